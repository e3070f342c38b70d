//! Recovery survives transient faults of the shuffle master (docs/recovery.md,
//! "What is retried, for how long" and "When recovery gives up"), through
//! real `coordhost run` processes killed with SIGKILL.
//!
//! The sample `local-shuffle` runs with its fault modes: `fail-first-reports`
//! makes the first `get-partitions-with-metrics` calls of every process
//! return `error::io("not reachable yet")`; `fail-restore-while` makes
//! `restore-state` fail while a marker file exists.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::support::crash::{
    Coordhost, EventLog, Fixture, Kill, Running, SINK, SOURCE, WordJob, describe_log,
    expected_output, first_difference, job_succeeded, published_parts, sorted_output, sources_done,
};

/// Source parallelism of the job.
const SOURCES: u32 = 4;
/// The warning the host prints once when a report fails inside the wait.
const RETRY_WARNING: &str = "could not say which partitions exist";

fn job(fx: &Fixture, fail_first_reports: u32, timeout_ms: u64) -> PathBuf {
    WordJob {
        previous_worker_timeout_ms: timeout_ms,
        shuffle_fail_first_reports: fail_first_reports,
        sink_delay_us: 600,
        snapshot_min_pause_ms: 0,
        bytes_per_task: 22_000,
        ..WordJob::new(&fx.input)
    }
    .write(&fx.path("job.toml"))
}

/// Kills `run` once `ready` holds; checks the job had not finished.
fn kill_when(mut run: Running, data_dir: &Path, what: &str, ready: impl Fn() -> bool) {
    if let Err(why) = run.poll_until(|| ready().then_some(())) {
        panic!("never saw {what}: {why}\n{}", run.stderr_tail());
    }
    match run.kill() {
        Kill::Killed { after } => eprintln!(
            "killed after {after:?} ({what}): {}",
            describe_log(EventLog::read(data_dir).as_ref())
        ),
        Kill::TooLate(_) => panic!("the job finished before the kill ({what})"),
    }
    assert!(
        !job_succeeded(data_dir),
        "_SUCCESS was written before the kill"
    );
}

fn all_sources_finished(data_dir: &Path) -> bool {
    sources_done(data_dir, SOURCES).is_some()
}

fn a_sink_committed(data_dir: &Path) -> bool {
    !published_parts(data_dir).is_empty()
        && EventLog::read(data_dir).is_some_and(|l| !l.finished(SINK).is_empty())
}

fn assert_output_right(data_dir: &Path, input: &Path) {
    let got = sorted_output(data_dir);
    let want = expected_output(input);
    assert!(
        got == want,
        "output is wrong: {}",
        first_difference(&got, &want)
    );
}

/// The source subtasks that ran in the last coordinator process.
fn sources_run_last(data_dir: &Path) -> BTreeSet<u32> {
    let log = EventLog::read(data_dir).expect("the event log");
    let newest = log.newest_segment().expect("a segment");
    log.finished_in_segment(SOURCE, newest)
}

#[test]
fn a_report_error_after_the_sources_finished_is_retried_and_the_finished_sources_are_skipped() {
    let fx = Fixture::words();
    let job = job(&fx, 1, 3_000);
    let data_dir = fx.path("data");
    let mut cmd = Coordhost::new(&job, &data_dir);
    kill_when(cmd.start(), &data_dir, "every source finished", || {
        all_sources_finished(&data_dir)
    });

    let (code, stderr) = cmd.start().exit();
    assert_eq!(code, Some(0), "the restart finishes the job:\n{stderr}");
    assert!(
        stderr.contains(RETRY_WARNING),
        "the restart met the injected report error (fail-first-reports = 1):\n{stderr}"
    );
    let summary = crate::support::crash::RunSummary(
        serde_json::from_slice(&std::fs::read(&cmd.summary).expect("summary")).expect("JSON"),
    );
    assert!(summary.recovered(), "recovery was kept: {}", summary.0);
    assert!(
        summary.tasks_skipped() >= u64::from(SOURCES),
        "the {SOURCES} finished sources are skipped: {}",
        summary.0
    );
    assert_eq!(
        sources_run_last(&data_dir),
        BTreeSet::new(),
        "no source runs again after one failed report"
    );
    assert_output_right(&data_dir, &fx.input);
}

#[test]
fn a_report_error_after_a_sink_committed_is_retried_and_the_restart_finishes_the_job() {
    let fx = Fixture::words();
    let job = job(&fx, 1, 3_000);
    let data_dir = fx.path("data");
    let mut cmd = Coordhost::new(&job, &data_dir);
    kill_when(cmd.start(), &data_dir, "a committed sink subtask", || {
        a_sink_committed(&data_dir)
    });
    let committed = published_parts(&data_dir);

    let (code, stderr) = cmd.start().exit();
    assert_eq!(
        code,
        Some(0),
        "the restart finishes the job (not exit 2, \"a full re-run would duplicate\"):\n{stderr}"
    );
    assert!(
        stderr.contains(RETRY_WARNING),
        "the restart met the injected report error (fail-first-reports = 1):\n{stderr}"
    );
    let after = published_parts(&data_dir);
    for (subtask, inode) in &committed {
        assert_eq!(
            after.get(subtask),
            Some(inode),
            "sink {subtask}, committed before the kill, is kept (same part file)"
        );
    }
    assert_eq!(
        sources_run_last(&data_dir),
        BTreeSet::new(),
        "no source runs again after one failed report"
    );
    assert_output_right(&data_dir, &fx.input);
}

#[test]
fn a_shuffle_master_that_fails_the_whole_wait_makes_its_partitions_missing_and_the_job_still_finishes()
 {
    let fx = Fixture::words();
    let job = job(&fx, 1_000_000, 1_000);
    let data_dir = fx.path("data");
    let mut cmd = Coordhost::new(&job, &data_dir);
    kill_when(cmd.start(), &data_dir, "a committed sink subtask", || {
        a_sink_committed(&data_dir)
    });

    let (code, stderr) = cmd.start().exit();
    assert_eq!(code, Some(0), "the restart finishes the job:\n{stderr}");
    assert_eq!(
        stderr.matches(RETRY_WARNING).count(),
        1,
        "one warning line for a wait full of errors:\n{stderr}"
    );
    assert_eq!(
        sources_run_last(&data_dir),
        (0..SOURCES).collect::<BTreeSet<u32>>(),
        "with nothing reported, every source runs again"
    );
    assert_output_right(&data_dir, &fx.input);
}

#[test]
fn a_failed_restore_with_committed_output_keeps_the_log_and_the_next_run_recovers() {
    let fx = Fixture::words();
    let data_dir = fx.path("data");
    let marker = data_dir.join("shuffle").join("FAIL_RESTORE");
    let job = WordJob {
        shuffle_fail_restore_while: Some(marker.clone()),
        sink_delay_us: 600,
        snapshot_min_pause_ms: 0,
        bytes_per_task: 22_000,
        ..WordJob::new(&fx.input)
    }
    .write(&fx.path("job.toml"));
    let mut cmd = Coordhost::new(&job, &data_dir);
    kill_when(cmd.start(), &data_dir, "a committed sink subtask", || {
        a_sink_committed(&data_dir)
    });
    std::fs::write(&marker, b"").expect("create the fault marker");
    let before = EventLog::read(&data_dir).expect("the log");

    let (code, stderr) = cmd.start().exit();
    assert_eq!(
        code,
        Some(1),
        "a failed recovery is a failed run:\n{stderr}"
    );
    let line = stderr
        .lines()
        .find(|l| l.starts_with("coordhost: recovery failed"))
        .unwrap_or_else(|| panic!("no `coordhost: recovery failed` line:\n{stderr}"));
    assert!(
        line.contains("restore refused") && line.contains("tries to recover again"),
        "the line says what failed and that a later run tries again: {line}"
    );
    let after = EventLog::read(&data_dir).expect("the log");
    assert_eq!(
        after.count("JobStarted"),
        before.count("JobStarted"),
        "the failed recovery did not start the job over"
    );
    assert_eq!(
        after.finished(SINK),
        before.finished(SINK),
        "the finished sinks still count"
    );

    std::fs::remove_file(&marker).expect("remove the fault marker");
    let finale = cmd.run_to_end();
    assert!(
        finale.summary.recovered(),
        "the next run recovered: {}",
        finale.summary.0
    );
    assert_output_right(&data_dir, &fx.input);
}
