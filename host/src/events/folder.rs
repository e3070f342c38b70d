//! A job's event log as a folder of the local file system:
//! `<data dir>/<job id>/log` ([`job_log_dir`]), opened for this coordinator
//! attempt under its lock or a fence ([`open_job_log`]), or replayed without
//! the lock first and reused when its files did not change
//! ([`UnlockedReplay`], issue 29).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use coordhost_log::format::LOG_DIR;
use coordhost_log::{EventLogWriter, EventsError, Replay, Storage as _, WriterOptions, replay};

use super::file_storage::FileStorage;

/// The log directory of job `job_id` under `data_dir`: `<data_dir>/<job_id>/log`.
///
/// # Errors
/// [`EventsError::InvalidJobId`] if the job id is empty, `.`, `..`, or holds a
/// path separator.
pub fn job_log_dir(data_dir: &Path, job_id: &str) -> Result<PathBuf, EventsError> {
    if job_id.is_empty() || job_id == "." || job_id == ".." || job_id.contains(['/', '\\', '\0']) {
        return Err(EventsError::InvalidJobId {
            job_id: job_id.to_owned(),
        });
    }
    Ok(data_dir.join(job_id).join(LOG_DIR))
}

/// Opens job `job_id`'s log under `data_dir` for this coordinator attempt:
/// takes the lock, replays what earlier attempts wrote, and starts a new
/// segment that seals the older ones at their valid lengths.
///
/// A fresh log returns an empty [`Replay`]; the caller's first event is then
/// [`JobStarted`](super::JobStarted). Otherwise the caller recovers from the
/// replay (FLIP-383; docs/recovery.md step 1) and records `RecoveryStarted`.
///
/// # Errors
/// [`EventsError::Locked`] if another coordinator writes this log; any
/// replay error (the log is left untouched, nothing is sealed); I/O errors.
pub fn open_job_log(
    data_dir: &Path,
    job_id: &str,
    options: WriterOptions,
) -> Result<(EventLogWriter, Replay), EventsError> {
    open_job_log_fenced(data_dir, job_id, options, None)
}

/// As [`open_job_log`]; with `fence` (high availability, `crate::ha`) the
/// log is guarded by the leadership's fence instead of the lock.
///
/// # Errors
/// As [`open_job_log`], without [`EventsError::Locked`] when fenced.
pub fn open_job_log_fenced(
    data_dir: &Path,
    job_id: &str,
    options: WriterOptions,
    fence: Option<Arc<dyn super::Fence>>,
) -> Result<(EventLogWriter, Replay), EventsError> {
    open_job_log_after(data_dir, job_id, options, fence, None)
}

/// As [`open_job_log_fenced`], reusing `earlier` — the log replayed without
/// the lock before (a coordinator's checks before it opens the log) — when
/// every segment file it read is still there, the same file (device and
/// inode) of the same length: the segments are append-only, so the replay
/// under the lock would decode the same records again (issue 29). Else the
/// log is replayed under the lock as usual.
///
/// # Errors
/// As [`open_job_log`].
pub fn open_job_log_after(
    data_dir: &Path,
    job_id: &str,
    options: WriterOptions,
    fence: Option<Arc<dyn super::Fence>>,
    earlier: Option<UnlockedReplay>,
) -> Result<(EventLogWriter, Replay), EventsError> {
    let dir = job_log_dir(data_dir, job_id)?;
    let storage = match fence {
        Some(fence) => FileStorage::open_for_writing_fenced(&dir, fence)?,
        None => FileStorage::open_for_writing(&dir)?,
    };
    if let Some(UnlockedReplay {
        replay: Ok(replay),
        files: Some(files),
    }) = earlier
        && files.still_hold(&storage, &replay)
    {
        return EventLogWriter::open_replayed(Arc::new(storage), replay, options);
    }
    EventLogWriter::open(Arc::new(storage), options)
}

/// A job's log folder replayed without the lock, with the segment files
/// the replay read ([`open_job_log_after`] reuses it if they did not change).
#[derive(Debug)]
pub struct UnlockedReplay {
    /// The replay, or why the log cannot be replayed.
    pub replay: Result<Replay, EventsError>,
    /// The segment files as noted before the replay read them; `None` when
    /// they could not be noted (the replay is then never reused).
    files: Option<SegmentFiles>,
}

impl UnlockedReplay {
    /// Replays the log in `log_dir` without the lock; `None` without a folder.
    #[must_use]
    pub fn read(log_dir: &Path) -> Option<Self> {
        if !log_dir.is_dir() {
            return None;
        }
        let storage = FileStorage::open_read_only(log_dir);
        // Noted first: a file replaced after this is another inode, one
        // appended to is longer than the replay read.
        let files = SegmentFiles::note(&storage);
        Some(Self {
            replay: replay(&storage),
            files,
        })
    }
}

impl From<Result<Replay, EventsError>> for UnlockedReplay {
    /// A replay with no segment files noted (e.g. of an object store): never reused.
    fn from(replay: Result<Replay, EventsError>) -> Self {
        Self {
            replay,
            files: None,
        }
    }
}

/// Segment files of a log folder: (attempt, device, inode), attempt ascending.
#[derive(Debug, PartialEq, Eq)]
struct SegmentFiles(Vec<(u32, u64, u64)>);

impl SegmentFiles {
    fn note(storage: &FileStorage) -> Option<Self> {
        use std::os::unix::fs::MetadataExt as _;
        storage
            .list_segments()
            .ok()?
            .into_iter()
            .map(|attempt| {
                let meta = std::fs::symlink_metadata(storage.segment_path(attempt)).ok()?;
                Some((attempt, meta.dev(), meta.ino()))
            })
            .collect::<Option<Vec<_>>>()
            .map(Self)
    }

    /// True if `storage`'s folder holds exactly these files, each as long as
    /// `replay` (made after they were noted) found it.
    fn still_hold(&self, storage: &FileStorage, replay: &Replay) -> bool {
        self.0.len() == replay.segments.len()
            && Self::note(storage).as_ref() == Some(self)
            && self
                .0
                .iter()
                .zip(&replay.segments)
                .all(|(&(attempt, ..), s)| {
                    s.attempt == attempt
                        && std::fs::symlink_metadata(storage.segment_path(attempt))
                            .is_ok_and(|m| m.len() == s.file_len)
                })
    }
}
