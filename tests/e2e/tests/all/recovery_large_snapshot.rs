//! Issue 9 item 8: a batch snapshot larger than a log record (64 MiB) no
//! longer makes a job unfinishable. A real `faulty-enumerator` whose every
//! snapshot carries `snapshot-pad-mib` MiB of padding:
//!
//! - 70 MiB through `coordhost run`: the state goes to a side file beside
//!   the log; after a SIGKILL the restart restores the enumerator from it
//!   (the plugin checks its padding on restore), skips the finished sources
//!   and publishes the same output as an uninterrupted run; superseded side
//!   files are gone.
//! - over the size limit (lowered with the fail point `snapshot::max-bytes`
//!   of the real binary, with the real log): refused when taken, in one warning naming the
//!   plugin and both sizes; the job finishes, and a crashed run of it
//!   recovers and finishes too.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::support::crash::{
    Coordhost, EventLog, JOB, Kill, SINK, SOURCE, sorted_output, sources_done,
};
use crate::support::knobs::{self, CrashPoint, Knobs};
use crate::support::{cache_dir, plugin_path};
use coordhost::events::{FileStorage, JobEvent, format, replay};
use coordhost::job::{JobStatus, RunOptions, run_job};

/// Splits of the enumerator (one input line each).
const SPLITS: u32 = 6;

/// Writes the job (the crash helpers' job and vertex names, so their log
/// and output helpers apply): `faulty-enumerator` with `pad_mib` MiB of
/// snapshot padding feeding 2 sources, a sink slowed by `sink_delay_us`
/// per record, a batch snapshot at every finished execution.
fn write_job(dir: &Path, pad_mib: u32, sink_delay_us: u64) -> PathBuf {
    let text = format!(
        r#"[job]
name = "{JOB}"
workers = 2
max-attempts = 3

[recovery]
enabled = true
previous-worker-timeout-ms = 10000
snapshot-min-pause-ms = 0

[shuffle]
plugin = "shuffle"

[plugins.big]
component = "{enumerator}"
kind = "split-enumerator"
config = {{ splits = {SPLITS}, snapshot-pad-mib = {pad_mib} }}
limits = {{ call-timeout-ms = 60000, memory-mib = 1024 }}

{shuffle}
[[vertices]]
id = "{SOURCE}"
source = "big"
parallelism = 2
operators = [{{ op = "read-lines" }}]

[[vertices]]
id = "{SINK}"
parallelism = 1
record-delay-us = {sink_delay_us}
operators = [
  {{ op = "aggregate", key = ["line"], aggregates = [{{ fn = "count", as = "n" }}] }},
  {{ op = "write-text", path = "${{data_dir}}/output/{JOB}", separator = " " }},
]

[[edges]]
from = "{SOURCE}"
to = "{SINK}"
kind = "hash"
key = ["line"]
"#,
        enumerator = plugin_path("faulty-enumerator").display(),
        shuffle = crate::support::shuffle_table("shuffle", "local-shuffle", ""),
    );
    let path = dir.join(format!("big-{pad_mib}.toml"));
    std::fs::write(&path, text).expect("write the job file");
    path
}

/// The snapshot side files in the job's log folder: name → size.
fn side_files(data_dir: &Path) -> Vec<(String, u64)> {
    let log = data_dir.join(JOB).join(format::LOG_DIR);
    let mut files: Vec<(String, u64)> = std::fs::read_dir(&log)
        .expect("log folder")
        .map(|e| e.expect("entry"))
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .ends_with(format::SNAPSHOT_FILE_SUFFIX)
        })
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                e.metadata().expect("metadata").len(),
            )
        })
        .collect();
    files.sort();
    files
}

/// Output of an uninterrupted run of the same job without padding.
fn baseline(dir: &Path) -> String {
    let job = write_job(dir, 0, 0);
    let data = dir.join("baseline");
    Coordhost::new(&job, &data).run_to_end();
    let out = sorted_output(&data);
    assert_eq!(
        out.lines().count(),
        SPLITS as usize,
        "one line per split:\n{out}"
    );
    out
}

#[test]
fn a_70_mib_snapshot_is_kept_in_a_side_file_and_restored_after_a_sigkill() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let want = baseline(tmp.path());
    let job = write_job(tmp.path(), 70, 1_500_000);
    let data = tmp.path().join("data");
    let mut cmd = Coordhost::new(&job, &data);

    let mut first = cmd.start();
    let done = first.poll_until(|| sources_done(&data, 2));
    if let Err(e) = done {
        panic!("the sources did not finish: {e}\n{}", first.stderr_tail());
    }
    let tail = first.stderr_tail();
    match first.kill() {
        Kill::Killed { .. } => {}
        Kill::TooLate(_) => panic!("the job ended before the kill; the sink is too fast"),
    }
    assert!(
        !tail.contains("the limit is"),
        "no record was too large:\n{tail}"
    );
    // The second source's record, then the removal of the first source's
    // superseded side file: a kill between the two leaves both.
    let files = side_files(&data);
    assert!(
        matches!(files.len(), 1 | 2),
        "the newest snapshot's side file, and at most the one it superseded: {files:?}"
    );
    let newest = files.last().expect("a side file").clone();
    let state_len = newest.1;
    assert!(
        state_len > 70 << 20,
        "the side file holds the whole 70 MiB state: {files:?}"
    );
    let log = EventLog::read(&data).expect("the log");
    assert_eq!(log.finished(SOURCE).len(), 2);

    let second = cmd.run_to_end();
    assert!(second.summary.recovered(), "{}", second.summary.brief());
    assert!(
        second.summary.tasks_skipped() >= 2,
        "both finished sources are skipped, their enumerator restored from the side file: {}",
        second.summary.brief()
    );
    assert_eq!(
        sorted_output(&data),
        want,
        "the same output as an uninterrupted run"
    );
    assert_eq!(
        side_files(&data),
        vec![newest.clone()],
        "no new source snapshot, so the side file the restart restored from stays, and only it"
    );

    // `log inspect` names the side file instead of printing 70 MiB.
    let out = crate::support::coordhost()
        .args(["log", "inspect"])
        .arg(data.join(JOB))
        .output()
        .expect("log inspect");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!(
            "{state_len} state bytes in side file {}",
            newest.0
        )),
        "{text}"
    );
}

/// A `tracing` writer that keeps every line, for the refusal's warning.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().expect("lock")).into_owned()
    }
}

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("lock").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Self;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

fn options(job: &Path, data: &Path) -> RunOptions {
    let mut opts = RunOptions::new(job, data);
    opts.cache_dir = Some(cache_dir());
    opts
}

#[test]
fn a_snapshot_over_the_limit_is_refused_when_taken_and_the_job_still_finishes_and_recovers() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let want = baseline(tmp.path());
    let job = write_job(tmp.path(), 2, 0);
    let limit = 1 << 20;
    let lowered = Knobs {
        max_snapshot_bytes: Some(limit),
        ..Knobs::default()
    };

    // An uninterrupted run: refused, one line, and the job finishes.
    let data = tmp.path().join("whole");
    let run = knobs::run_output(&options(&job, &data), &lowered);
    let summary = run
        .summary
        .unwrap_or_else(|| panic!("the job starts: {}", run.stderr));
    assert_eq!(summary.status, JobStatus::Finished, "{:?}", summary.error);
    assert_eq!(sorted_output(&data), want);
    let warnings = run.stderr;
    let refusals: Vec<&str> = warnings
        .lines()
        .filter(|l| l.contains("over the limit"))
        .collect();
    assert_eq!(refusals.len(), 1, "one line, however often: {warnings}");
    let state_len = 8 + (2u64 << 20);
    assert!(
        refusals[0].contains("plugin `big`")
            && refusals[0].contains(&format!("is {state_len} bytes"))
            && refusals[0].contains(&format!("limit of {limit} bytes")),
        "names the plugin and both sizes: {}",
        refusals[0]
    );
    let log = replay(&FileStorage::open_read_only(
        &data.join(JOB).join(format::LOG_DIR),
    ))
    .expect("the log replays");
    let recorded = log
        .iter_events()
        .filter(
            |e| matches!(e, JobEvent::ExecutionFinished(f) if !f.enumerator_snapshots.is_empty()),
        )
        .count();
    assert_eq!(recorded, 0, "no refused state was recorded");

    // A crashed run of the same job recovers from what was recorded and
    // finishes: the job never becomes unfinishable.
    let data = tmp.path().join("crashed");
    let opts = options(&job, &data);
    let crash = Knobs {
        crash_at: Some(CrashPoint::AfterFinished {
            vertex: SOURCE.to_owned(),
            count: 2,
        }),
        ..lowered.clone()
    };
    assert!(
        knobs::run_to_crash(&opts, &crash).crashed(),
        "the run was to stop at the simulated crash"
    );
    let summary = knobs::run(&opts, &lowered).unwrap_or_else(|e| panic!("the restart starts: {e}"));
    assert_eq!(summary.status, JobStatus::Finished, "{:?}", summary.error);
    assert!(summary.recovered);
    assert_eq!(sorted_output(&data), want);
}

#[test]
fn a_damaged_side_file_fails_recovery_naming_the_file_and_the_job_runs_again_from_scratch() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let want = baseline(tmp.path());
    // 2 MiB of padding: over the inline limit, so in a side file.
    let job = write_job(tmp.path(), 2, 0);
    let data = tmp.path().join("data");
    let opts = options(&job, &data);
    let crash = Knobs::crash(CrashPoint::AfterFinished {
        vertex: SOURCE.to_owned(),
        count: 2,
    });
    assert!(
        knobs::run_to_crash(&opts, &crash).crashed(),
        "the run was to stop at the simulated crash"
    );
    let files = side_files(&data);
    assert_eq!(files.len(), 1, "{files:?}");
    let side = data.join(JOB).join(format::LOG_DIR).join(&files[0].0);
    let bytes = std::fs::read(&side).expect("side file");
    std::fs::write(&side, &bytes[..bytes.len() - 1]).expect("truncate the side file");

    let captured = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(captured.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::WARN)
        .finish();
    let summary = tracing::subscriber::with_default(subscriber, || {
        run_job(&options(&job, &data)).expect("the restart starts")
    });
    assert_eq!(summary.status, JobStatus::Finished, "{:?}", summary.error);
    assert!(!summary.recovered, "the damaged snapshot is not used");
    assert_eq!(sorted_output(&data), want);
    let log = captured.text();
    assert!(
        log.contains("recovery failed")
            && log.contains(&files[0].0)
            && log.contains(&format!(
                "is {} bytes; its record says {}",
                files[0].1 - 1,
                files[0].1
            )),
        "names the side file and what is wrong: {log}"
    );
}
