//! Issue 10 items 4 and 5, through real `coordhost run` processes on the
//! crash tests' word-count job (`file-enumerator`, `local-shuffle`):
//!
//! - a checksum-valid record of a newer schema version or an unknown kind is
//!   refused with exit 2, naming the version (or kind) and the newest this
//!   binary reads; the log is left exactly as it was (nothing set aside);
//! - a data directory moved to another path is the same job, not "the job
//!   file changed";
//! - a torn tail is warned about once per run, not twice;
//! - a damaged partition is warned about once, not at every poll of the
//!   previous-worker wait;
//! - a run whose own storage fails (the log cannot be written: a file size
//!   limit of 0 stands in for a full disk) exits 1, as any run that fails
//!   on its storage does.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::support::cache_dir;
use crate::support::crash::{
    Coordhost, Fixture, JOB, Kill, SINK, SOURCE, WordJob, expected_output, log_dir, sorted_output,
    sources_done,
};
use coordhost::events::{JobEvent, SinkCommitted, format};

/// A fast word-count job (no delays) written into the fixture folder.
fn fast_job(fx: &Fixture) -> PathBuf {
    let mut job = WordJob::new(&fx.input);
    job.source_delay_us = 0;
    job.sink_delay_us = 0;
    job.write(&fx.path("job.toml"))
}

/// `coordhost run JOB --data-dir DATA` to its end, stdout and stderr kept.
fn run(job: &Path, data: &Path) -> Output {
    crate::support::coordhost()
        .arg("--cache-dir")
        .arg(cache_dir())
        .arg("run")
        .arg(job)
        .arg("--data-dir")
        .arg(data)
        .output()
        .expect("spawn coordhost")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Every file of `dir` (not recursive) with its bytes.
fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .expect("list")
        .map(|e| e.expect("entry"))
        .filter(|e| e.path().is_file())
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).expect("read"),
            )
        })
        .collect()
}

/// The newest segment of the job's log.
fn newest_segment(data: &Path) -> PathBuf {
    let dir = log_dir(data);
    let newest = files(&dir)
        .into_keys()
        .filter(|n| format::parse_segment_file_name(n).is_some())
        .max()
        .expect("a segment");
    dir.join(newest)
}

fn append(path: &Path, bytes: &[u8]) {
    use std::io::Write as _;
    std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .expect("open segment")
        .write_all(bytes)
        .expect("append");
}

/// A checksum-valid frame of `kind` at schema `version`, as a newer binary
/// would write it.
fn newer_frame(kind: u16, version: u16) -> Vec<u8> {
    let payload = JobEvent::SinkCommitted(SinkCommitted {
        attempt: coordhost::events::AttemptId {
            job_vertex: SINK.into(),
            subtask: 0,
            attempt: 0,
        },
        file: "part-00000.txt".into(),
    })
    .encode_payload()
    .expect("encode");
    let mut frame = Vec::new();
    format::encode_frame(&mut frame, kind, version, &payload);
    frame
}

fn assert_refused_and_untouched(job: &Path, data: &Path, forged: &[u8], needles: &[&str]) {
    let segment = newest_segment(data);
    let original = std::fs::read(&segment).expect("segment");
    append(&segment, forged);
    let before = files(&log_dir(data));
    let out = run(job, data);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "one line: {err}");
    for needle in needles {
        assert!(lines[0].contains(needle), "`{needle}` in: {err}");
    }
    assert!(lines[0].contains(&segment.display().to_string()), "{err}");
    assert_eq!(
        files(&log_dir(data)),
        before,
        "the log is left exactly as it was"
    );
    let siblings: Vec<String> = std::fs::read_dir(data.join(JOB))
        .expect("job folder")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("log."))
        .collect();
    assert!(siblings.is_empty(), "nothing set aside: {siblings:?}");
    std::fs::write(&segment, original).expect("restore the segment");
}

#[test]
fn a_record_of_a_newer_version_or_kind_is_refused_with_exit_2_and_the_log_left_as_it_is() {
    let fx = Fixture::words();
    let job = fast_job(&fx);
    let data = fx.path("data");
    let out = run(&job, &data);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    assert_refused_and_untouched(
        &job,
        &data,
        &newer_frame(format::kind::SINK_COMMITTED, 9),
        &["SinkCommitted", "schema version 9", "reads up to version 1"],
    );
    assert_refused_and_untouched(
        &job,
        &data,
        &newer_frame(99, 1),
        &[
            "event kind 99",
            &format!("kinds up to {}", format::kind::NEWEST),
        ],
    );

    // Without the forged record the same log is used again: nothing was lost.
    let out = run(&job, &data);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(sorted_output(&data), expected_output(&fx.input));
}

#[test]
fn a_moved_data_directory_is_the_same_job_and_not_an_edited_job_file() {
    let fx = Fixture::words();
    let mut job = WordJob::new(&fx.input);
    // The partitions recorded under the old path are gone: do not wait long.
    job.previous_worker_timeout_ms = 1_000;
    let job = job.write(&fx.path("job.toml"));
    let old = fx.path("old");
    let mut cmd = Coordhost::new(&job, &old);
    let mut first = cmd.start();
    if let Err(e) = first.poll_until(|| sources_done(&old, 4)) {
        panic!("the sources did not finish: {e}\n{}", first.stderr_tail());
    }
    assert!(
        matches!(first.kill(), Kill::Killed { .. }),
        "the sink is slowed, so the job was still running"
    );

    let new = fx.path("new");
    std::fs::rename(&old, &new).expect("mv the data directory");
    let second = Coordhost::new(&job, &new).run_to_end();
    assert!(
        second.summary.recovered(),
        "recovered, not refused: {}",
        second.summary.brief()
    );
    assert_eq!(sorted_output(&new), expected_output(&fx.input));

    // An edited job file on the moved directory is still refused.
    let text = std::fs::read_to_string(&job).expect("job");
    std::fs::write(&job, text.replace("lowercase = true", "lowercase = false")).expect("edit");
    let out = run(&job, &new);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("job file changed"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_torn_tail_is_warned_about_once_per_run() {
    let fx = Fixture::words();
    let job = fast_job(&fx);
    let data = fx.path("data");
    assert_eq!(run(&job, &data).status.code(), Some(0));
    append(&newest_segment(&data), &[0x17, 0, 0]);
    let out = run(&job, &data);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(err.matches("torn tail").count(), 1, "{err}");
}

#[test]
fn a_damaged_partition_is_warned_about_once_while_the_host_waits_for_partitions() {
    let fx = Fixture::words();
    let mut job = WordJob::new(&fx.input);
    job.previous_worker_timeout_ms = 3_000;
    let job = job.write(&fx.path("job.toml"));
    let data = fx.path("data");
    let mut cmd = Coordhost::new(&job, &data);
    let mut first = cmd.start();
    if let Err(e) = first.poll_until(|| sources_done(&data, 4)) {
        panic!("the sources did not finish: {e}\n{}", first.stderr_tail());
    }
    assert!(
        matches!(first.kill(), Kill::Killed { .. }),
        "the sink is slowed, so the job was still running"
    );
    // Keep `index`, lose `data`: the shuffle master warns and leaves
    // the partition out of its report at every poll.
    let partitions = data
        .join("shuffle")
        .join(JOB)
        .join(format!("{SOURCE}-{SINK}"));
    let damaged = std::fs::read_dir(&partitions)
        .expect("partitions")
        .map(|e| e.expect("entry").path())
        .find(|p| p.join("index").is_file() && p.join("data").is_file())
        .expect("a complete source partition");
    std::fs::remove_file(damaged.join("data")).expect("damage");

    let second = cmd.start();
    let stderr_file = PathBuf::from(format!("{}.run2.err", data.display()));
    let finished = second.finish();
    let err = std::fs::read_to_string(&stderr_file).expect("stderr");
    let warned = err
        .lines()
        .filter(|l| l.contains(&damaged.display().to_string()) && l.contains("unreadable"))
        .count();
    assert_eq!(warned, 1, "one warning for the damaged partition:\n{err}");
    assert!(finished.summary.recovered(), "{}", finished.summary.brief());
    assert_eq!(sorted_output(&data), expected_output(&fx.input));
}

#[test]
fn a_run_that_cannot_write_its_event_log_exits_1_naming_the_log() {
    let fx = Fixture::words();
    let job = fast_job(&fx);
    let data = fx.path("data");
    // A file size limit of 0 bytes: every write to a file fails with EFBIG
    // (SIGXFSZ ignored, which `exec` keeps), as on a full disk.
    let out = Command::new("sh")
        .arg("-c")
        .arg(r#"trap '' XFSZ; ulimit -f 0; exec "$@""#)
        .arg("sh")
        .arg(crate::support::process::coordhost_bin())
        .arg("--cache-dir")
        .arg(cache_dir())
        .arg("run")
        .arg(&job)
        .arg("--data-dir")
        .arg(&data)
        .env_remove("COORDHOST_LOG")
        .stdin(Stdio::null())
        .output()
        .expect("spawn sh");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let line = err
        .lines()
        .find(|l| l.starts_with("coordhost: "))
        .unwrap_or_else(|| panic!("an error line: {err}"));
    assert!(
        line.contains("event log") && line.contains(&log_dir(&data).display().to_string()),
        "names the log: {line}"
    );
}
