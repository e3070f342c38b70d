//! A damaged result partition is never trusted (docs/recovery.md, "What
//! counts as a surviving partition" and "Damaged partitions"): `coordhost
//! run` is SIGKILLed once every source finished, one source's partition is
//! damaged (with the tool of tests/e2e/tests/all/support/damage.rs), and the
//! same command runs again. The producer must run again and the output
//! must be an uninterrupted run's.
//!
//! - `data` cut at a block boundary or inside a block: its length is not
//!   the one the index records, so the shuffle master does not report the
//!   partition and recovery counts it as missing;
//! - a flipped byte in `index`: its checksum fails, the shuffle master does
//!   not report the partition, recovery counts it as missing;
//! - a flipped byte in every block of `data`: the sizes are unchanged, so
//!   recovery keeps the producer, but the consumer's read fails the block
//!   checksum, and the producer runs again before the consumer (as for a
//!   lost partition).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::support::crash::{
    Coordhost, EventLog, Fixture, Kill, SINK, SOURCE, WordJob, describe_log, expected_output,
    first_difference, job_succeeded, sorted_output, sources_done,
};
use crate::support::damage::{Damage, damage_partition, flip_every_block};

/// Source parallelism of the job.
const SOURCES: u32 = 4;

/// The partition folder that source subtask `subtask`'s latest recorded
/// finish names.
fn source_partition(log: &EventLog, subtask: u64) -> PathBuf {
    log.events
        .iter()
        .filter(|e| e["event"]["kind"] == "ExecutionFinished")
        .map(|e| &e["event"]["event"])
        .filter(|b| b["attempt"]["job_vertex"] == SOURCE && b["attempt"]["subtask"] == subtask)
        .filter_map(|b| b["produced"][0]["location"].as_str())
        .next_back()
        .map(PathBuf::from)
        .unwrap_or_else(|| panic!("no finished {SOURCE} {subtask} in the log"))
}

/// The sink's parallelism once the log records it.
fn sink_parallelism(log: &EventLog) -> Option<usize> {
    log.events
        .iter()
        .filter(|e| e["event"]["kind"] == "JobVertexInitialized")
        .map(|e| &e["event"]["event"])
        .find(|b| b["job_vertex"] == SINK)
        .and_then(|b| b["parallelism"].as_u64())
        .map(|n| n as usize)
}

/// Runs the job, SIGKILLs it once every source finished, applies `damage`
/// to source 0's partition, runs it again; returns the data directory and
/// the restarted run's stderr.
fn crash_damage_restart(fx: &Fixture, damage: impl Fn(&Path) -> String) -> (PathBuf, String) {
    let job = WordJob {
        previous_worker_timeout_ms: 3_000,
        sink_delay_us: 600,
        ..WordJob::new(&fx.input)
    }
    .write(&fx.path("job.toml"));
    let data_dir = fx.path("data");
    let mut cmd = Coordhost::new(&job, &data_dir);
    let mut run = cmd.start();
    if let Err(why) = run.poll_until(|| sources_done(&data_dir, SOURCES)) {
        panic!(
            "never saw every source finished: {why}\n{}",
            run.stderr_tail()
        );
    }
    match run.kill() {
        Kill::Killed { .. } => {}
        Kill::TooLate(_) => panic!("the job finished before the kill"),
    }
    assert!(!job_succeeded(&data_dir), "_SUCCESS before the kill");
    let log = EventLog::read(&data_dir).expect("the event log at the kill");
    eprintln!("at the kill: {}", describe_log(Some(&log)));
    let sinks = sink_parallelism(&log);
    assert!(
        sinks.is_none_or(|n| log.finished(SINK).len() < n),
        "some sink subtask is still to run at the kill"
    );
    let what = damage(&source_partition(&log, 0));
    eprintln!("damage: {what}");

    let (code, stderr) = cmd.start().exit();
    assert_eq!(
        code,
        Some(0),
        "the restart finishes the job ({what}):\n{stderr}"
    );
    let got = sorted_output(&data_dir);
    let want = expected_output(&fx.input);
    assert!(
        got == want,
        "output is wrong after {what}: {}",
        first_difference(&got, &want)
    );
    (data_dir, stderr)
}

/// Source subtasks that finished in the last coordinator process.
fn sources_run_last(data_dir: &Path) -> BTreeSet<u32> {
    let log = EventLog::read(data_dir).expect("the event log");
    let newest = log.newest_segment().expect("a segment");
    log.finished_in_segment(SOURCE, newest)
}

/// Reset reasons that the log records for `vertex` subtask `subtask`, in
/// order (from `ExecutionsReset` events).
fn reset_reasons(data_dir: &Path, vertex: &str, subtask: u64) -> Vec<String> {
    let log = EventLog::read(data_dir).expect("the event log");
    log.events
        .iter()
        .filter(|e| e["event"]["kind"] == "ExecutionsReset")
        .map(|e| &e["event"]["event"])
        .filter(|b| {
            b["executions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|x| x["job_vertex"] == vertex && x["subtask"] == subtask)
        })
        .map(|b| b["reason"].to_string())
        .collect()
}

fn damage(how: Damage) -> impl Fn(&Path) -> String {
    move |location: &Path| {
        damage_partition(location, how, 3)
            .unwrap_or_else(|| panic!("{} offers no place for {how:?}", location.display()))
    }
}

/// Damages source 0's partition with `how` after the crash; the restart
/// must count the partition missing and run source 0 again.
fn assert_damaged_partition_reruns_its_producer(how: Damage) {
    let fx = Fixture::words();
    let (data_dir, _) = crash_damage_restart(&fx, damage(how));
    assert!(
        sources_run_last(&data_dir).contains(&0),
        "{SOURCE} 0, whose partition was damaged ({how:?}), runs again"
    );
    let reasons = reset_reasons(&data_dir, SOURCE, 0);
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("RecoveryPartitionMissing")),
        "recovery reset {SOURCE} 0 for a missing partition: {reasons:?}"
    );
}

#[test]
fn a_data_file_cut_at_a_block_boundary_is_missing_and_its_producer_runs_again() {
    assert_damaged_partition_reruns_its_producer(Damage::DataCutAtBlockBoundary);
}

#[test]
fn a_data_file_cut_inside_a_block_is_missing_and_its_producer_runs_again() {
    assert_damaged_partition_reruns_its_producer(Damage::DataCutMidBlock);
}

#[test]
fn a_damaged_index_is_refused_by_the_shuffle_master_and_its_producer_runs_again() {
    assert_damaged_partition_reruns_its_producer(Damage::IndexFlippedByte);
}

#[test]
fn a_flipped_byte_fails_the_checksum_when_read_and_the_producer_runs_again_before_the_consumer() {
    let fx = Fixture::words();
    let flip_all = |location: &Path| {
        flip_every_block(location).unwrap_or_else(|| panic!("{} holds blocks", location.display()))
    };
    let (data_dir, stderr) = crash_damage_restart(&fx, flip_all);
    assert!(
        stderr.contains("checksum") || stderr.contains("corrupt"),
        "a consumer met the damaged block:\n{stderr}"
    );
    assert!(
        sources_run_last(&data_dir).contains(&0),
        "{SOURCE} 0, whose partition failed its checksum, runs again"
    );
    let reasons = reset_reasons(&data_dir, SOURCE, 0);
    assert!(
        reasons.iter().any(|r| r.contains("PartitionNotFound")),
        "{SOURCE} 0 was reset as for a lost partition: {reasons:?}"
    );
}
