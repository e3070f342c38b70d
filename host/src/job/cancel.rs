//! Cancelling a job (`coordhost cancel DIR`) and what a run does about it
//! (docs/job-file.md, "Stopping, cancelling, resuming").
//!
//! Only a coordinator writes a job's event log, so `coordhost cancel` does
//! not: it leaves a request, the file `CANCEL` in the job's folder
//! (`<data-dir>/<job>/CANCEL`, beside `log/`). The coordinator running the
//! job looks for it every [`WATCH_EVERY`], stops its attempts, releases the
//! job's partitions and records `JobCancelled`; if none runs, the next
//! `coordhost run` of the job does so first and ends without running
//! anything more. Whether a coordinator runs the job is read from the
//! kernel's table of file locks (`/proc/locks`), without taking the log's
//! lock: taking it, even for an instant, could refuse a coordinator that
//! starts at that instant.
//!
//! A run finds a log whose last run ended cancelled and refuses to go on
//! with it ([`JobError::CancelledEarlier`], exit 3) unless asked: `run
//! --resume` goes on from where it stopped (and withdraws a request not yet
//! acted on), `run --fresh` starts again from scratch.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::exit::{EXIT_BAD_INPUT, EXIT_OK};
use crate::events::{JobEvent, Replay};
use crate::scheduler::{JobError, StopReason, StopRequest};

/// The request file's name, in the job's folder.
pub const CANCEL_FILE: &str = "CANCEL";

/// For a job whose event log is on object storage: the file in the job's
/// folder that holds the log's `s3://` URL (one line; never credentials),
/// written by the coordinator, read by `coordhost cancel`.
pub const OBJECT_LOG_FILE: &str = "OBJECT_LOG";

/// How often a running coordinator looks for the request file.
pub const WATCH_EVERY: Duration = Duration::from_millis(100);

/// Arguments of `coordhost cancel`.
#[derive(Debug, Clone, clap::Args)]
pub struct CancelArgs {
    /// The job's folder in the data directory (`<data-dir>/<job>`), its
    /// `log/` folder, or a data directory holding one job.
    pub dir: PathBuf,
    /// How long to wait for the coordinator running the job to stop, s.
    #[arg(long, value_name = "S", default_value_t = 60)]
    pub wait_s: u64,
}

/// The request file of job folder `job_dir`.
#[must_use]
pub fn request_path(job_dir: &Path) -> PathBuf {
    job_dir.join(CANCEL_FILE)
}

/// Whether a cancel request waits in `job_dir` (a regular file named
/// [`CANCEL_FILE`]; a symlink or anything else there is not one).
#[must_use]
pub fn requested(job_dir: &Path) -> bool {
    std::fs::symlink_metadata(request_path(job_dir)).is_ok_and(|m| m.is_file())
}

/// Notes in job folder `job_dir` that the job's log is at `url`
/// ([`OBJECT_LOG_FILE`]).
///
/// # Errors
/// [`JobError::Io`] naming the file.
pub fn note_object_log(job_dir: &Path, url: &crate::events::ObjectLogUrl) -> Result<(), JobError> {
    let path = job_dir.join(OBJECT_LOG_FILE);
    std::fs::write(&path, format!("{url}\n")).map_err(|source| JobError::Io { path, source })
}

/// Removes job folder `job_dir`'s [`OBJECT_LOG_FILE`] (its log is a
/// folder log now); a missing one is fine.
pub fn forget_object_log(job_dir: &Path) {
    let path = job_dir.join(OBJECT_LOG_FILE);
    if let Err(e) = std::fs::remove_file(&path)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!("{}: cannot remove: {e}", path.display());
    }
}

/// Removes job folder `job_dir` that a run on an object log created and
/// then could not use: its lock file and [`OBJECT_LOG_FILE`], then the
/// folder if nothing else is in it.
pub fn remove_new_job_dir(job_dir: &Path) {
    for name in [crate::events::LOCK_FILE, OBJECT_LOG_FILE] {
        let _absent = std::fs::remove_file(job_dir.join(name));
    }
    let _not_empty = std::fs::remove_dir(job_dir);
}

/// Removes a request (after it was recorded, or withdrawn by `--resume` or
/// `--fresh`); a missing one is fine.
///
/// # Errors
/// [`JobError::Io`] naming the file when it exists and cannot be removed.
pub fn withdraw(job_dir: &Path) -> Result<(), JobError> {
    let path = request_path(job_dir);
    match std::fs::remove_file(&path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(JobError::Io { path, source: e }),
        _ => Ok(()),
    }
}

/// The log's last run ended cancelled: the error a run refuses with, unless
/// a run or recovery started after the `JobCancelled`.
#[must_use]
pub fn cancelled_earlier(job: &str, replay: &Replay) -> Option<JobError> {
    let mut by = None;
    for e in &replay.events {
        match &e.event {
            JobEvent::JobCancelled(c) => by = Some(c.requested_by.clone()),
            JobEvent::JobStarted(_) | JobEvent::RecoveryStarted(_) | JobEvent::JobFinished(_) => {
                by = None;
            }
            _ => {}
        }
    }
    by.map(|by| JobError::CancelledEarlier {
        job: job.to_owned(),
        by,
    })
}

/// Looks for the request file of `job_dir` every [`WATCH_EVERY`] while a
/// run goes on, and asks `stop` to cancel when it appears. Stops looking
/// when dropped.
pub struct Watcher {
    /// Dropped to end the thread at once (its wait ends disconnected).
    done: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Watcher {
    /// Starts watching.
    #[must_use]
    pub fn start(job_dir: PathBuf, stop: Arc<StopRequest>) -> Self {
        let (done, ended) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("cancel-watch".into())
            .spawn(move || {
                loop {
                    if requested(&job_dir) {
                        stop.request(StopReason::Cancel);
                        return;
                    }
                    // Wakes at once when the watcher is dropped, so a
                    // finished run does not wait out a sleep to exit.
                    match ended.recv_timeout(WATCH_EVERY) {
                        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                        Ok(()) | Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return,
                    }
                }
            })
            .ok();
        Self {
            done: Some(done),
            thread,
        }
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        drop(self.done.take());
        if let Some(t) = self.thread.take() {
            let _ignored = t.join();
        }
    }
}

/// The process holding the `flock` lock on `path`, read from `/proc/locks`
/// (Linux), without taking the lock. `None` when nobody holds it (or the
/// table cannot be read).
#[must_use]
pub fn lock_holder(path: &Path) -> Option<u32> {
    use std::os::unix::fs::MetadataExt as _;
    let meta = std::fs::metadata(path).ok()?;
    let table = std::fs::read_to_string("/proc/locks").ok()?;
    let dev = meta.dev();
    // glibc's gnu_dev_major/minor encoding.
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    let wanted = format!("{major:02x}:{minor:02x}:{}", meta.ino());
    table.lines().find_map(|line| {
        // "1: FLOCK  ADVISORY  WRITE 4242 fd:01:1234 0 EOF"; a blocked
        // waiter's line has "->" after the id and is not the holder.
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.get(1) == Some(&"->") {
            return None;
        }
        let at = fields.iter().position(|f| *f == wanted)?;
        fields.get(at.checked_sub(1)?)?.parse().ok()
    })
}

/// How the log's last run ended, for the messages of `coordhost cancel`.
enum LastEnd {
    Finished,
    Cancelled,
    Other,
}

fn last_end(replay: &Replay) -> LastEnd {
    let mut end = LastEnd::Other;
    for e in &replay.events {
        match &e.event {
            JobEvent::JobFinished(_) => end = LastEnd::Finished,
            JobEvent::JobCancelled(_) => end = LastEnd::Cancelled,
            JobEvent::JobStarted(_) | JobEvent::RecoveryStarted(_) | JobEvent::JobFailed(_) => {
                end = LastEnd::Other;
            }
            _ => {}
        }
    }
    end
}

fn read_log(log_dir: &Path) -> Result<Replay, crate::events::EventsError> {
    crate::events::replay(&crate::events::FileStorage::open_read_only(log_dir))
}

/// Where a job's log is, as `coordhost cancel` finds it.
enum JobLog {
    /// `<job>/log`.
    Folder(PathBuf),
    /// On object storage, through one client.
    Objects(Box<crate::events::ObjectStorage>),
}

impl JobLog {
    fn read(&self) -> Result<Replay, crate::events::EventsError> {
        match self {
            Self::Folder(dir) => read_log(dir),
            Self::Objects(storage) => crate::events::replay(&**storage),
        }
    }
}

/// The job folder and log that `dir` names: a job folder holding
/// [`OBJECT_LOG_FILE`] (its log is on objects; a run on a folder log
/// removes the file), else a folder log as [`crate::events::locate_log_dir`]
/// finds it, else a data directory with one job folder holding
/// [`OBJECT_LOG_FILE`].
fn locate(dir: &Path) -> Result<(PathBuf, JobLog), (u8, String)> {
    let bad = |e: &dyn std::fmt::Display| (EXIT_BAD_INPUT, crate::config::one_line(&e.to_string()));
    let noted =
        |d: &Path| std::fs::symlink_metadata(d.join(OBJECT_LOG_FILE)).is_ok_and(|m| m.is_file());
    let job_dir = if noted(dir) {
        dir.to_path_buf()
    } else {
        let folder_error = match crate::events::locate_log_dir(dir) {
            Ok(log_dir) => {
                let job_dir = log_dir
                    .parent()
                    .map(Path::to_path_buf)
                    .ok_or_else(|| bad(&format!("{}: not a job's folder", dir.display())))?;
                return Ok((job_dir, JobLog::Folder(log_dir)));
            }
            Err(e) => e,
        };
        // A data directory with one job, whose log is on objects.
        let found: Vec<PathBuf> = std::fs::read_dir(dir)
            .map(|entries| {
                entries
                    .filter_map(Result::ok)
                    .map(|e| e.path())
                    .filter(|p| p.is_dir() && noted(p))
                    .collect()
            })
            .unwrap_or_default();
        let [job_dir] = found.as_slice() else {
            return Err(bad(&folder_error));
        };
        job_dir.clone()
    };
    let file = job_dir.join(OBJECT_LOG_FILE);
    let text = crate::files::read_text_file(&file, 4096)
        .map_err(|e| bad(&format!("{}: {e}", file.display())))?;
    let url = crate::events::ObjectLogUrl::parse(text.trim())
        .map_err(|e| bad(&format!("{}: {e}", file.display())))?;
    let storage = crate::events::ObjectStorage::connect(&url).map_err(|e| bad(&e))?;
    Ok((job_dir, JobLog::Objects(Box::new(storage))))
}

/// Runs `coordhost cancel`; returns the exit code: 0 when the job is
/// cancelled or the request is left for the next run, 2 for a folder that
/// holds no job log or a job that already finished, 1 when the running
/// coordinator did not stop within `--wait-s`.
pub fn cancel_command(args: &CancelArgs) -> ExitCode {
    match cancel(args) {
        Ok(line) => {
            println!("{line}");
            ExitCode::from(EXIT_OK)
        }
        Err((code, line)) => {
            coordhost_io::stderr_line!("coordhost: {line}");
            ExitCode::from(code)
        }
    }
}

fn cancel(args: &CancelArgs) -> Result<String, (u8, String)> {
    let (job_dir, log) = locate(&args.dir)?;
    let replay = log.read().map_err(|e| {
        // A store that cannot be reached is a failure, not bad input.
        let code = if matches!(e, crate::events::EventsError::Store { .. }) {
            super::exit::EXIT_FAILED
        } else {
            EXIT_BAD_INPUT
        };
        (code, crate::config::one_line(&e.to_string()))
    })?;
    let job = job_dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    match last_end(&replay) {
        LastEnd::Finished => {
            return Err((
                EXIT_BAD_INPUT,
                format!(
                    "{}: job `{job}` already finished; there is nothing to cancel",
                    job_dir.display()
                ),
            ));
        }
        LastEnd::Cancelled => {
            return Ok(format!("job `{job}` is already cancelled"));
        }
        _ => {}
    }
    let request = request_path(&job_dir);
    if !requested(&job_dir) {
        let text = format!(
            "cancel requested by `coordhost cancel` (pid {})\n",
            std::process::id()
        );
        // A new file only: never through a symlink someone left there.
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&request)
            .and_then(|mut f| std::io::Write::write_all(&mut f, text.as_bytes()))
            .map_err(|e| {
                (
                    super::exit::EXIT_FAILED,
                    format!(
                        "{}: cannot write the cancel request: {e}",
                        request.display()
                    ),
                )
            })?;
    }
    // The lock a running coordinator holds: the log folder's, or for a log
    // on object storage the job folder's (docs/object-storage.md).
    let lock = match &log {
        JobLog::Folder(log_dir) => log_dir.join(crate::events::LOCK_FILE),
        JobLog::Objects(_) => job_dir.join(crate::events::LOCK_FILE),
    };
    let Some(pid) = lock_holder(&lock) else {
        return Ok(format!(
            "no coordinator runs job `{job}` now: the next `coordhost run` of it records the cancellation and ends (exit 3) without running anything (`run --resume` goes on with the job instead)"
        ));
    };
    coordhost_io::stderr_line!(
        "coordhost cancel: the coordinator running job `{job}` (pid {pid}) was asked to cancel it; waiting up to {} s",
        args.wait_s
    );
    let deadline = Instant::now() + Duration::from_secs(args.wait_s);
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        if lock_holder(&lock).is_none() {
            let ended = log.read().map(|r| last_end(&r));
            return match ended {
                Ok(LastEnd::Cancelled) => Ok(format!("job `{job}` cancelled")),
                Ok(LastEnd::Finished) => {
                    // Nothing is left to cancel: the request goes too.
                    let _ignored = withdraw(&job_dir);
                    Err((
                        super::exit::EXIT_FAILED,
                        format!("job `{job}` finished before the coordinator saw the request"),
                    ))
                }
                _ => Ok(format!(
                    "the coordinator of job `{job}` stopped without recording the cancellation: the next `coordhost run` of it records it"
                )),
            };
        }
    }
    Err((
        super::exit::EXIT_FAILED,
        format!(
            "the coordinator running job `{job}` (pid {pid}) did not stop within {} s; the request stays in {}",
            args.wait_s,
            request.display()
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_lock_names_its_holder_and_a_free_one_none() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("LOCK");
        let file = std::fs::File::create(&path).expect("lock file");
        assert_eq!(lock_holder(&path), None);
        file.try_lock().expect("locked");
        assert_eq!(lock_holder(&path), Some(std::process::id()));
        file.unlock().expect("unlocked");
        assert_eq!(lock_holder(&path), None);
    }
}
