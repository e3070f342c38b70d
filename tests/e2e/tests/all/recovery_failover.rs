//! Recovery scenarios 6, 7 and 11 of docs/recovery.md ("unit level"): failover
//! (PartitionNotFound, through the `LostPartition` knob) before or after a
//! simulated coordinator crash, with the real sample plugins and real files.
//! Every scenario also compares the final output with an uninterrupted run.

use std::collections::BTreeSet;

use crate::support::recovery::{
    Enumerator, Log, T1, after_finished, assert_same_output_as_uninterrupted, finished_attempts,
    finished_of, lost, reasons, recovery, reset_of, resets_of, skipped_of, splits_per_subtask,
    vertex,
};
use coordhost::events::{JobEvent, ResetReason};

/// The subtasks of `vertex` named by each `ExecutionsReset` event, in order.
fn reset_groups(events: &[JobEvent], vertex: &str) -> Vec<(BTreeSet<u32>, ResetReason)> {
    resets_of(events, vertex)
        .iter()
        .map(|r| {
            (
                r.executions
                    .iter()
                    .filter(|x| x.job_vertex == vertex)
                    .map(|x| x.subtask)
                    .collect(),
                r.reason.clone(),
            )
        })
        .collect()
}

/// The events of segment 1 after its `RecoveryFinished` (what the recovered
/// run did, not what recovery decided).
fn after_recovery(log: &Log) -> Vec<JobEvent> {
    let seg = log.of_segment(1);
    let at = seg
        .iter()
        .position(|e| matches!(e, JobEvent::RecoveryFinished(_)))
        .expect("segment 1 holds a RecoveryFinished");
    seg[at + 1..].to_vec()
}

/// Scenario 6.
#[test]
fn a_kept_source_whose_enumerator_cannot_snapshot_restarts_in_full_once_then_one_subtask_at_a_time()
{
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut t1 = T1::new(tmp.path(), Enumerator::Static);
    t1.source_delay_us = 5_000;
    // Middles 1–4 are still running when middle 0 meets the lost partition.
    t1.middle_delay_us = 5_000;
    t1.write();
    let data = tmp.path().join("data");

    t1.crash(&data, after_finished("source", 5), Vec::new());
    let kept = finished_attempts(&Log::read(&data).all(), "source");
    assert_eq!(kept.len(), 5);
    assert!(kept.values().all(|a| a.attempt == 0));

    // Middles never finished before the crash: they run with attempt 0. The
    // first PartitionNotFound (middle 0) restarts all sources; middle 1 meets
    // its lost partition on the attempt that runs after they finished again.
    let second = t1.run(
        &data,
        vec![
            lost("middle", 0, 0, "source", 0),
            lost("middle", 1, 1, "source", 1),
        ],
    );
    assert!(second.recovered);
    assert_eq!(second.tasks_skipped, 5, "{second:#?}");
    assert_eq!(
        reasons(&second, "partition-not-found"),
        2,
        "source 0, then source 1: {second:#?}"
    );
    assert_eq!(
        reasons(&second, "enumerator-cannot-snapshot"),
        4,
        "sources 1–4 restarted with source 0, once: {second:#?}"
    );
    let r = recovery(&Log::read(&data).all());
    assert_eq!(skipped_of(&r, "source").len(), 5, "{r:#?}");

    let log = Log::read(&data);
    let ran = after_recovery(&log);
    let groups = reset_groups(&ran, "source");
    let subtasks: Vec<BTreeSet<u32>> = groups.iter().map(|(s, _)| s.clone()).collect();
    let first_restart: BTreeSet<u32> = subtasks
        .iter()
        .take(subtasks.len().saturating_sub(1))
        .flatten()
        .copied()
        .collect();
    assert_eq!(
        (first_restart, subtasks.last().cloned()),
        ((0..5).collect(), Some(BTreeSet::from([1]))),
        "all 5 sources reset, then only source 1: {groups:#?}"
    );
    assert!(
        matches!(
            groups.last().map(|(_, r)| r),
            Some(ResetReason::PartitionNotFound { .. })
        ),
        "{groups:#?}"
    );
    let source_runs: BTreeSet<(u32, u32)> = finished_of(&ran, "source")
        .iter()
        .map(|f| (f.attempt.subtask, f.attempt.attempt))
        .collect();
    assert_eq!(
        source_runs,
        BTreeSet::from([(0, 1), (1, 1), (2, 1), (3, 1), (4, 1), (1, 2)]),
        "every source ran once more (attempt 1), source 1 twice (attempt 2)"
    );
    let source = vertex(&second, "source");
    assert!(
        source.splits_returned >= 1,
        "source 1's splits went back to the fresh enumerator: {source:?}"
    );
    assert_eq!(
        source.splits_assigned,
        10 + source.splits_returned,
        "the fresh enumerator handed out all 10 splits, then source 1's again: {source:?}"
    );
    assert_eq!(source.records_in, 200, "{source:?}");
    assert_same_output_as_uninterrupted(&data, Enumerator::Static);
}

/// Scenario 6, made deterministic: one worker, so middles 0–3 finish
/// (reading sources 0–3's partitions) before middle 4 meets its lost
/// partition and every source restarts with a fresh enumerator, which
/// hands the splits out differently. The middles that read the old
/// partitions must not contribute stale rows.
#[test]
fn consumers_that_finished_before_a_full_source_restart_do_not_keep_the_old_split_assignment() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut t1 = T1::new(tmp.path(), Enumerator::Static);
    t1.source_delay_us = 5_000;
    t1.write();
    let data = tmp.path().join("data");

    t1.crash(&data, after_finished("source", 5), Vec::new());
    let before = Log::read(&data).all();
    let old_source4 = finished_of(&before, "source")
        .iter()
        .find(|f| f.attempt.subtask == 4)
        .map(|f| f.produced[0].bytes_per_subpartition[0])
        .expect("source 4 finished");
    assert!(
        old_source4 > 0,
        "source 4 read some splits before the crash"
    );

    let mut opts = t1.options(&data);
    opts.workers = Some(1);
    let knobs = crate::support::knobs::Knobs {
        lost_partitions: vec![lost("middle", 4, 0, "source", 4)],
        ..Default::default()
    };
    let second =
        crate::support::knobs::run(&opts, &knobs).unwrap_or_else(|e| panic!("the job starts: {e}"));
    assert_eq!(
        second.status,
        coordhost::job::JobStatus::Finished,
        "{second:#?}"
    );
    assert_eq!(
        reasons(&second, "enumerator-cannot-snapshot"),
        4,
        "every source restarted: {second:#?}"
    );
    assert_same_output_as_uninterrupted(&data, Enumerator::Static);
}

/// Scenario 7, with a crash.
#[test]
fn splits_are_counted_through_a_partition_not_found_after_recovery() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut t1 = T1::new(tmp.path(), Enumerator::Files);
    t1.source_delay_us = 5_000;
    t1.write();
    let data = tmp.path().join("data");

    let first = t1
        .crash(&data, after_finished("source", 5), Vec::new())
        .expect("the crash came while the job ran");
    assert_eq!(vertex(&first, "source").splits_assigned, 10);
    let before = Log::read(&data).all();
    let splits = splits_per_subtask(&before, "source");
    assert_eq!(
        splits.values().map(Vec::len).sum::<usize>(),
        10,
        "{splits:?}"
    );
    let n0 = splits.get(&0).map_or(0, Vec::len) as u64;
    assert!(n0 >= 1, "source 0 read some splits: {splits:?}");

    let second = t1.run(&data, vec![lost("middle", 0, 0, "source", 0)]);
    assert!(second.recovered);
    assert_eq!(second.tasks_skipped, 5, "{second:#?}");
    let source = vertex(&second, "source");
    assert_eq!(
        (source.splits_returned, source.splits_assigned),
        (n0, n0),
        "exactly source 0's {n0} splits went back and were assigned again; the restored enumerator held none unassigned"
    );
    assert_eq!(source.records_in, n0 * 20);
    assert_eq!(reasons(&second, "partition-not-found"), 1, "{second:#?}");
    let log = Log::read(&data);
    let ran = after_recovery(&log);
    assert_eq!(
        reset_groups(&ran, "source")
            .into_iter()
            .map(|(s, _)| s)
            .collect::<Vec<_>>(),
        vec![BTreeSet::from([0])]
    );
    assert_eq!(
        finished_of(&ran, "source")
            .iter()
            .map(|f| (f.attempt.subtask, f.attempt.attempt))
            .collect::<Vec<_>>(),
        vec![(0, 1)]
    );
    assert_same_output_as_uninterrupted(&data, Enumerator::Files);
}

/// Scenario 7, the same sequence without a crash.
#[test]
fn splits_are_counted_the_same_through_a_partition_not_found_without_a_crash() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut t1 = T1::new(tmp.path(), Enumerator::Files);
    t1.source_delay_us = 5_000;
    t1.write();
    let data = tmp.path().join("data");

    let summary = t1.run(&data, vec![lost("middle", 0, 0, "source", 0)]);
    let events = Log::read(&data).all();
    let reset_at = events
        .iter()
        .position(|e| matches!(e, JobEvent::ExecutionsReset(r) if r.executions.iter().any(|x| x.job_vertex == "source")))
        .expect("source 0 was reset");
    let splits = splits_per_subtask(&events[..reset_at], "source");
    assert_eq!(
        splits.values().map(Vec::len).sum::<usize>(),
        10,
        "{splits:?}"
    );
    let n0 = splits.get(&0).map_or(0, Vec::len) as u64;
    assert!(n0 >= 1, "source 0 read some splits: {splits:?}");
    let source = vertex(&summary, "source");
    assert_eq!(
        (source.splits_returned, source.splits_assigned - 10),
        (n0, n0),
        "exactly source 0's {n0} splits went back and were assigned again"
    );
    assert_eq!(reasons(&summary, "partition-not-found"), 1, "{summary:#?}");
    assert_same_output_as_uninterrupted(&data, Enumerator::Files);
}

/// Scenario 11.
#[test]
fn a_source_reset_by_partition_not_found_and_running_again_at_the_crash_is_not_skipped() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut t1 = T1::new(tmp.path(), Enumerator::Files);
    // The re-running source 0 is slow; the other middles finish well before it.
    t1.source_delay_us = 10_000;
    t1.middle_delay_us = 2_000;
    t1.write();
    let data = tmp.path().join("data");

    t1.crash(
        &data,
        after_finished("middle", 1),
        vec![lost("middle", 0, 0, "source", 0)],
    );
    let before = Log::read(&data).all();
    assert_eq!(
        finished_of(&before, "source").len(),
        5,
        "every source finished once"
    );
    let groups = reset_groups(&before, "source");
    assert!(
        matches!(
            groups.as_slice(),
            [(s, ResetReason::PartitionNotFound { .. })] if *s == BTreeSet::from([0])
        ),
        "source 0 was reset by PartitionNotFound: {groups:#?}"
    );
    let finished = finished_attempts(&before, "source");
    assert_eq!(
        finished.keys().copied().collect::<Vec<_>>(),
        vec![1, 2, 3, 4],
        "source 0 was running again at the crash"
    );
    // Source 0's splits before its reset, and those it had pulled again by
    // the crash (the rest were back in the enumerator's snapshot state).
    let reset_at = before
        .iter()
        .position(|e| matches!(e, JobEvent::ExecutionsReset(_)))
        .expect("a reset");
    let had = splits_per_subtask(&before[..reset_at], "source");
    let n0 = had.get(&0).map_or(0, Vec::len) as u64;
    assert!(n0 >= 1, "source 0 read some splits: {had:?}");
    let again = splits_per_subtask(&before, "source");
    let pulled_again = again.get(&0).map_or(0, Vec::len) as u64;
    assert!(pulled_again <= n0, "{had:?} {again:?}");

    let second = t1.run(&data, Vec::new());
    assert!(second.recovered);
    let log = Log::read(&data);
    let r = recovery(&log.all());
    assert_eq!(
        skipped_of(&r, "source"),
        finished.values().cloned().collect(),
        "sources 1–4 are skipped"
    );
    assert!(
        reset_of(&r, "source").contains_key(&0),
        "source 0 is not skipped: {r:#?}"
    );
    let ran = after_recovery(&log);
    let reran: Vec<(u32, u32)> = finished_of(&ran, "source")
        .iter()
        .map(|f| (f.attempt.subtask, f.attempt.attempt))
        .collect();
    assert_eq!(reran.len(), 1, "{reran:?}");
    assert_eq!(reran[0].0, 0);
    assert!(reran[0].1 >= 1, "a new attempt: {reran:?}");
    let source = vertex(&second, "source");
    assert_eq!(
        (source.splits_returned, source.splits_assigned),
        (pulled_again, n0),
        "the splits source 0 held at the crash went back; it read all {n0} of its splits again"
    );
    assert_eq!(source.records_in, n0 * 20, "{source:?}");
    assert_same_output_as_uninterrupted(&data, Enumerator::Files);
}
