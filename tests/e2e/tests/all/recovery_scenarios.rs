//! Recovery scenarios 1–5 and 8 of docs/recovery.md ("unit level"): topology T1
//! run through the real host with the real sample plugins and real files,
//! stopped by a simulated coordinator crash, then run again on the same data
//! directory. Every scenario also compares the final output with an
//! uninterrupted run of the same job.

use std::collections::{BTreeMap, BTreeSet};

use crate::support::part_files;
use crate::support::recovery::{
    Enumerator, Log, T1, after_finished, assert_same_output_as_uninterrupted, finished_attempts,
    finished_of, out_dir, partition_dirs, reasons, recovery, reset_of, skipped_of,
    splits_per_subtask, subpartition_sizes, vertex,
};
use coordhost::events::{AttemptId, JobEvent, ResetReason};

fn attempts(subtasks: std::ops::Range<u32>, vertex: &str, attempt: u32) -> BTreeSet<AttemptId> {
    subtasks
        .map(|subtask| AttemptId {
            job_vertex: vertex.to_string(),
            subtask,
            attempt,
        })
        .collect()
}

/// Scenario 1.
#[test]
fn finished_sources_are_skipped_with_their_attempts_and_bytes_and_every_middle_runs_again() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let t1 = T1::new(tmp.path(), Enumerator::Files);
    t1.write();
    let data = tmp.path().join("data");

    let first = t1
        .crash(&data, after_finished("source", 5), Vec::new())
        .expect("the crash came while the job ran");
    assert_eq!(vertex(&first, "source").splits_assigned, 10, "{first:#?}");
    let before = Log::read(&data).all();
    let finished = finished_of(&before, "source");
    assert_eq!(finished.len(), 5, "5 sources finished before the crash");
    assert!(
        finished_of(&before, "middle").is_empty(),
        "no middle finished before the crash"
    );
    // The partitions the log names are on disk with the recorded byte counts.
    for f in &finished {
        let p = &f.produced[0];
        assert_eq!(
            subpartition_sizes(std::path::Path::new(&p.location), 1),
            p.bytes_per_subpartition,
            "partition of {:?}",
            f.attempt
        );
    }
    let lines_read_before = vertex(&first, "source").records_out;
    assert_eq!(lines_read_before, 200, "every line was read once");

    let second = t1.run(&data, Vec::new());
    assert!(second.recovered, "{second:#?}");
    assert_eq!(second.tasks_skipped, 5, "{second:#?}");
    assert_eq!(
        vertex(&second, "source").records_in,
        0,
        "no source ran again"
    );
    assert_eq!(vertex(&second, "source").splits_assigned, 0);
    assert_eq!(vertex(&second, "source").splits_returned, 0);
    assert_eq!(
        vertex(&second, "middle").records_in,
        lines_read_before,
        "the middles read exactly what the kept sources produced"
    );
    assert_eq!(second.tasks_run, 5 + 2, "5 middles and 2 sinks ran");

    let log = Log::read(&data);
    let r = recovery(&log.all());
    assert_eq!(
        skipped_of(&r, "source"),
        finished.iter().map(|f| f.attempt.clone()).collect(),
        "the same attempt ids as before the crash"
    );
    assert!(
        skipped_of(&r, "middle").is_empty(),
        "no middle had finished"
    );
    assert!(reset_of(&r, "source").is_empty(), "{r:#?}");
    let after = log.of_segment(1);
    assert!(finished_of(&after, "source").is_empty());
    assert_eq!(
        finished_of(&after, "middle")
            .iter()
            .map(|f| f.attempt.clone())
            .collect::<BTreeSet<_>>(),
        attempts(0..5, "middle", 0),
        "every middle ran once, with attempt 0"
    );
    assert_same_output_as_uninterrupted(&data, Enumerator::Files);
}

/// Scenario 2.
#[test]
fn a_lost_partition_reruns_only_its_producer_and_gives_back_exactly_its_splits() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut t1 = T1::new(tmp.path(), Enumerator::Files);
    // Slow readers, so that the pulled splits spread over all of them.
    t1.source_delay_us = 5_000;
    t1.write();
    let data = tmp.path().join("data");

    t1.crash(&data, after_finished("source", 5), Vec::new());
    let before = Log::read(&data).all();
    let kept = finished_attempts(&before, "source");
    assert_eq!(kept.len(), 5);
    let splits = splits_per_subtask(&before, "source");
    let source0_splits = splits.get(&0).map_or(0, Vec::len) as u64;
    assert!(source0_splits >= 1, "source 0 read some splits: {splits:?}");
    assert_eq!(
        splits.values().map(Vec::len).sum::<usize>(),
        10,
        "all 10 splits were assigned: {splits:?}"
    );
    let location = finished_of(&before, "source")
        .iter()
        .find(|f| f.attempt.subtask == 0)
        .map(|f| f.produced[0].location.clone())
        .expect("source 0 finished");
    std::fs::remove_dir_all(&location).expect("delete source 0's partition");

    let second = t1.run(&data, Vec::new());
    assert!(second.recovered);
    assert_eq!(reasons(&second, "partition-missing"), 1, "{second:#?}");
    assert_eq!(second.tasks_skipped, 4, "{second:#?}");
    let source = vertex(&second, "source");
    assert_eq!(
        (source.splits_returned, source.splits_assigned),
        (source0_splits, source0_splits),
        "exactly source 0's splits went back and were handed out again"
    );
    assert_eq!(source.records_in, source0_splits * 20);

    let log = Log::read(&data);
    let r = recovery(&log.all());
    assert_eq!(
        skipped_of(&r, "source"),
        kept.values().filter(|a| a.subtask != 0).cloned().collect(),
        "sources 1–4 keep their attempts"
    );
    assert!(matches!(
        reset_of(&r, "source").get(&0),
        Some(ResetReason::RecoveryPartitionMissing { .. })
    ));
    assert_eq!(reset_of(&r, "source").len(), 1, "{r:#?}");
    let reran: Vec<AttemptId> = finished_of(&log.of_segment(1), "source")
        .iter()
        .map(|f| f.attempt.clone())
        .collect();
    assert_eq!(
        reran,
        vec![AttemptId {
            job_vertex: "source".into(),
            subtask: 0,
            attempt: 1
        }],
        "only source 0 ran again, with an attempt above the recorded one"
    );
    assert_same_output_as_uninterrupted(&data, Enumerator::Files);
}

/// Runs `t1` again on `data` with the partition question asked two
/// partitions at a time (fail point `recovery::question-chunk`); returns
/// the driver's count of partitions asked and of calls made.
fn rerun_with_question_in_twos(t1: &T1, data: &std::path::Path) -> (usize, usize) {
    let o = t1.options(data);
    let mut command = crate::support::coordhost();
    if let Some(cache) = &o.cache_dir {
        command.arg("--cache-dir").arg(cache);
    }
    command
        .arg("run")
        .arg(&o.job_file)
        .arg("--data-dir")
        .arg(data)
        .env("FAILPOINTS", "recovery::question-chunk=return(2)")
        .env("COORDHOST_LOG", "warn,coordhost::job::driver=info")
        .env("NO_COLOR", "1");
    if let Some(workers) = o.workers {
        command.arg("--workers").arg(workers.to_string());
    }
    let out = command.output().expect("coordhost runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let line = stderr
        .lines()
        .find(|l| l.contains("partition question answered"))
        .unwrap_or_else(|| panic!("no partition question line: {stderr}"));
    let field = |key: &str| -> usize {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(key))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {key} in {line}"))
    };
    (field("partitions="), field("calls="))
}

/// The partition question in chunks (issue 29, `recovery::QUESTION_CHUNK`):
/// asked two partitions at a time, the five source partitions take three
/// calls, and the recovery decides as with one call — all five kept, or,
/// with source 3's partition gone, source 3 alone runs again.
#[test]
fn the_partition_question_asked_in_chunks_decides_as_in_one_call() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let t1 = T1::new(tmp.path(), Enumerator::Files);
    t1.write();

    let whole = tmp.path().join("whole");
    t1.crash(&whole, after_finished("source", 5), Vec::new());
    assert_eq!(rerun_with_question_in_twos(&t1, &whole), (5, 3));
    let r = recovery(&Log::read(&whole).all());
    assert_eq!(skipped_of(&r, "source").len(), 5, "{r:#?}");
    assert!(reset_of(&r, "source").is_empty(), "{r:#?}");
    assert_same_output_as_uninterrupted(&whole, Enumerator::Files);

    let lost = tmp.path().join("lost");
    t1.crash(&lost, after_finished("source", 5), Vec::new());
    let location = finished_of(&Log::read(&lost).all(), "source")
        .iter()
        .find(|f| f.attempt.subtask == 3)
        .map(|f| f.produced[0].location.clone())
        .expect("source 3 finished");
    std::fs::remove_dir_all(&location).expect("delete source 3's partition");
    let (partitions, calls) = rerun_with_question_in_twos(&t1, &lost);
    // Three calls for the first round, one a round for the lost one while
    // the previous-worker wait lasts.
    assert!(partitions == 5 && calls > 3, "{partitions} {calls}");
    let r = recovery(&Log::read(&lost).all());
    assert_eq!(
        reset_of(&r, "source").keys().copied().collect::<Vec<_>>(),
        vec![3],
        "{r:#?}"
    );
    assert!(matches!(
        reset_of(&r, "source").get(&3),
        Some(ResetReason::RecoveryPartitionMissing { .. })
    ));
    assert_eq!(skipped_of(&r, "source").len(), 4, "{r:#?}");
    assert_same_output_as_uninterrupted(&lost, Enumerator::Files);
}

/// Scenario 3.
#[test]
fn when_no_partition_is_reported_within_the_wait_every_source_runs_again() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut t1 = T1::new(tmp.path(), Enumerator::Files);
    t1.previous_worker_timeout_ms = 200;
    t1.write();
    let data = tmp.path().join("data");

    t1.crash(&data, after_finished("source", 5), Vec::new());
    let dirs = partition_dirs(&data, "source");
    assert_eq!(dirs.len(), 5, "{dirs:?}");
    for d in dirs {
        std::fs::remove_dir_all(&d).expect("delete partition");
    }

    let second = t1.run(&data, Vec::new());
    assert!(second.recovered);
    assert_eq!(second.tasks_skipped, 0, "{second:#?}");
    assert_eq!(reasons(&second, "partition-missing"), 5, "{second:#?}");
    let source = vertex(&second, "source");
    assert_eq!(
        (source.splits_returned, source.splits_assigned),
        (10, 10),
        "every split went back and was handed out again"
    );
    assert_eq!(source.records_in, 200);
    let log = Log::read(&data);
    let r = recovery(&log.all());
    assert!(skipped_of(&r, "source").is_empty(), "{r:#?}");
    assert_eq!(reset_of(&r, "source").len(), 5);
    assert_eq!(
        finished_of(&log.of_segment(1), "source")
            .iter()
            .map(|f| f.attempt.clone())
            .collect::<BTreeSet<_>>(),
        attempts(0..5, "source", 1)
    );
    assert_same_output_as_uninterrupted(&data, Enumerator::Files);
}

/// Scenario 4.
#[test]
fn an_unfinished_source_whose_enumerator_cannot_snapshot_reruns_every_subtask_finished_ones_too() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut t1 = T1::new(tmp.path(), Enumerator::Static);
    t1.source_delay_us = 5_000;
    t1.write();
    let data = tmp.path().join("data");

    t1.crash(&data, after_finished("source", 1), Vec::new());
    let before = Log::read(&data).all();
    let done = finished_attempts(&before, "source");
    assert_eq!(done.len(), 1, "one source finished before the crash");
    let (&first_done, _) = done.iter().next().expect("one");

    let second = t1.run(&data, Vec::new());
    assert!(second.recovered);
    assert_eq!(second.tasks_skipped, 0, "{second:#?}");
    assert_eq!(
        reasons(&second, "enumerator-cannot-snapshot"),
        5,
        "{second:#?}"
    );
    let source = vertex(&second, "source");
    assert_eq!(
        source.splits_assigned, 10,
        "the fresh enumerator handed out all 10 splits again"
    );
    assert_eq!(source.records_in, 200);
    let log = Log::read(&data);
    let r = recovery(&log.all());
    assert!(skipped_of(&r, "source").is_empty(), "{r:#?}");
    assert_eq!(
        reset_of(&r, "source"),
        (0..5)
            .map(|s| (s, ResetReason::RecoveryEnumeratorWithoutSnapshot))
            .collect::<BTreeMap<_, _>>()
    );
    let after = log.of_segment(1);
    let reran = finished_of(&after, "source");
    assert_eq!(reran.len(), 5, "every source ran again");
    let rerun_of_done = reran
        .iter()
        .find(|f| f.attempt.subtask == first_done)
        .expect("the finished source ran again");
    assert_eq!(
        rerun_of_done.attempt.attempt, 1,
        "above the attempt recorded for it"
    );
    assert_same_output_as_uninterrupted(&data, Enumerator::Static);
}

/// Scenario 5.
#[test]
fn a_finished_source_whose_enumerator_cannot_snapshot_is_kept() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let t1 = T1::new(tmp.path(), Enumerator::Static);
    t1.write();
    let data = tmp.path().join("data");

    t1.crash(&data, after_finished("source", 5), Vec::new());
    let kept = finished_attempts(&Log::read(&data).all(), "source");
    assert_eq!(kept.len(), 5);

    let second = t1.run(&data, Vec::new());
    assert!(second.recovered);
    assert_eq!(second.tasks_skipped, 5, "{second:#?}");
    assert_eq!(second.tasks_run, 7, "5 middles and 2 sinks: {second:#?}");
    let source = vertex(&second, "source");
    assert_eq!(
        (
            source.records_in,
            source.splits_assigned,
            source.splits_returned
        ),
        (0, 0, 0)
    );
    assert_eq!(reasons(&second, "enumerator-cannot-snapshot"), 0);
    let log = Log::read(&data);
    let r = recovery(&log.all());
    assert_eq!(
        skipped_of(&r, "source"),
        kept.values().cloned().collect(),
        "every source keeps its attempt"
    );
    assert!(reset_of(&r, "source").is_empty(), "{r:#?}");
    assert!(finished_of(&log.of_segment(1), "source").is_empty());
    assert_same_output_as_uninterrupted(&data, Enumerator::Static);
}

/// Scenario 8.
#[test]
fn a_run_time_parallelism_decision_is_replayed_not_recomputed() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut t1 = T1::new(tmp.path(), Enumerator::Files);
    t1.write();
    let data = tmp.path().join("data");

    t1.crash(&data, after_finished("sink", 1), Vec::new());
    let before = Log::read(&data).all();
    let sink_inits: Vec<u32> = before
        .iter()
        .filter_map(|e| match e {
            JobEvent::JobVertexInitialized(i) if i.job_vertex == "sink" => Some(i.parallelism),
            _ => None,
        })
        .collect();
    assert_eq!(sink_inits, vec![2], "the sink's parallelism was decided: 2");
    let sink_done = finished_attempts(&before, "sink");
    assert_eq!(sink_done.len(), 1, "one sink subtask finished");
    let (&done, done_attempt) = sink_done.iter().next().expect("one");
    let other = 1 - done;
    let published = part_files(&out_dir(&data));
    assert_eq!(published.len(), 1, "{published:?}");
    let published_bytes = std::fs::read(&published[0]).expect("part");

    // A fresh decision would now be 4 (the maximum); the fingerprint
    // ignores `bytes-per-task`, so the log is still this job's.
    t1.bytes_per_task = 1;
    t1.write();

    let second = t1.run(&data, Vec::new());
    assert!(second.recovered);
    assert_eq!(vertex(&second, "sink").parallelism, 2, "{second:#?}");
    assert_eq!(second.tasks_skipped, 5 + 5 + 1, "{second:#?}");
    assert_eq!(second.tasks_run, 1, "only the other sink ran: {second:#?}");
    let log = Log::read(&data);
    let r = recovery(&log.all());
    assert_eq!(
        skipped_of(&r, "sink"),
        BTreeSet::from([done_attempt.clone()]),
        "sink {done} is skipped"
    );
    assert_eq!(
        reset_of(&r, "sink").keys().copied().collect::<Vec<_>>(),
        vec![other]
    );
    let after = log.of_segment(1);
    assert!(
        !after.iter().any(|e| matches!(
            e,
            JobEvent::JobVertexInitialized(i) if i.job_vertex == "sink"
        )),
        "the decision was not made again"
    );
    assert_eq!(
        finished_of(&after, "sink")
            .iter()
            .map(|f| f.attempt.subtask)
            .collect::<Vec<_>>(),
        vec![other]
    );
    assert_eq!(
        std::fs::read(&published[0]).expect("part"),
        published_bytes,
        "sink {done}'s published output is untouched"
    );
    assert_eq!(part_files(&out_dir(&data)).len(), 2);
    assert_same_output_as_uninterrupted(&data, Enumerator::Files);
}
