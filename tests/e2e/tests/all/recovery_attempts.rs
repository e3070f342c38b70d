//! Issue 12.2 and 12.5 on topology T1 with simulated crashes: attempt
//! numbers are never used twice for one execution vertex across coordinator
//! runs, partitions not in the final plan are released by the end of the
//! job, and the `JobVertexInitialized` a recovered run records carries the
//! same input ranges as a fresh run's.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::support::recovery::{
    Enumerator, Log, T1, after_finished, assert_same_output_as_uninterrupted, lost, partition_dirs,
    segments,
};
use coordhost::events::{JobEvent, JobVertexInitialized};

/// The last `JobVertexInitialized` of each vertex among `events`.
fn inits(events: &[JobEvent]) -> BTreeMap<String, JobVertexInitialized> {
    events
        .iter()
        .filter_map(|e| match e {
            JobEvent::JobVertexInitialized(i) => Some((i.job_vertex.clone(), i.clone())),
            _ => None,
        })
        .collect()
}

/// Per subtask of `vertex`, the attempt whose finish counts at the end of
/// `events` (a reset, or a recovery's reset, removes it).
fn final_attempts(events: &[JobEvent], vertex: &str) -> BTreeMap<u32, u32> {
    let mut out = BTreeMap::new();
    for e in events {
        match e {
            JobEvent::ExecutionFinished(f) if f.attempt.job_vertex == vertex => {
                out.insert(f.attempt.subtask, f.attempt.attempt);
            }
            JobEvent::ExecutionsReset(r) => {
                for x in r.executions.iter().filter(|x| x.job_vertex == vertex) {
                    out.remove(&x.subtask);
                }
            }
            JobEvent::RecoveryFinished(r) => {
                for x in r.reset.iter().filter(|x| x.execution.job_vertex == vertex) {
                    out.remove(&x.execution.subtask);
                }
            }
            _ => {}
        }
    }
    out
}

/// The partition folders `<vertex>-<subtask>-<attempt>` the final plan
/// keeps: one per subtask, at its final attempt.
fn live_partitions(data: &Path, events: &[JobEvent], vertex: &str) -> Vec<PathBuf> {
    let dirs = partition_dirs(data, vertex);
    let parent = dirs
        .first()
        .and_then(|d| d.parent())
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let mut want: Vec<PathBuf> = final_attempts(events, vertex)
        .iter()
        .map(|(s, a)| parent.join(format!("{vertex}-{s}-{a}")))
        .collect();
    want.sort();
    want
}

#[test]
fn a_recovered_run_records_the_same_input_ranges_as_a_fresh_run() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let t1 = T1::new(tmp.path(), Enumerator::Files);
    t1.write();
    let fresh = tmp.path().join("fresh");
    t1.run(&fresh, Vec::new());
    let want = inits(&Log::read(&fresh).all());
    assert_eq!(want.len(), 3, "every vertex initialized: {want:#?}");

    // Crash once `middle` is initialized and one of its subtasks finished:
    // the `auto` sink, which reads all of `middle`'s partitions, is then
    // initialized by the recovered run.
    let data = tmp.path().join("data");
    t1.crash(&data, after_finished("middle", 1), Vec::new());
    let first = inits(&Log::read(&data).of_segment(0));
    assert!(first.contains_key("middle") && !first.contains_key("sink"));
    t1.run(&data, Vec::new());
    let log = Log::read(&data);
    assert!(
        inits(&log.of_segment(1)).contains_key("sink"),
        "the recovered run (epoch 1) initialized the sink"
    );
    let got = inits(&log.all());
    for (vertex, init) in &want {
        assert_eq!(
            got.get(vertex),
            Some(init),
            "`{vertex}`: the recorded ranges differ from a fresh run's"
        );
    }
    let sink = &got["sink"];
    assert!(
        sink.subtask_inputs
            .iter()
            .all(|r| r[0].partition_start == 0 && r[0].partition_end == 5),
        "every sink subtask reads partitions 0..5 of middle: {sink:?}"
    );
    assert_same_output_as_uninterrupted(&data, Enumerator::Files);
}

#[test]
fn an_attempt_number_is_never_reused_and_superseded_partitions_are_released() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut t1 = T1::new(tmp.path(), Enumerator::Files);
    // Slow readers, so that source 1 pulls a split and middle 1 holds bytes
    // for the sink (see `T1::source_delay_us`).
    t1.source_delay_us = 5_000;
    t1.write();
    let data = tmp.path().join("data");

    // `sink` 0 finds `middle` 1's partition gone: middle 1 fails over and
    // finishes as attempt 1; the coordinator crashes right after.
    t1.crash(
        &data,
        after_finished("middle", 6),
        vec![lost("sink", 0, 0, "middle", 1)],
    );
    let log = Log::read(&data);
    let rerun = log
        .events
        .iter()
        .rev()
        .find(|e| {
            matches!(&e.event, JobEvent::ExecutionFinished(f)
                if f.attempt.job_vertex == "middle" && f.attempt.subtask == 1 && f.attempt.attempt == 1)
        })
        .expect("middle 1 finished as attempt 1");
    // Cut the log before that finish, as a crash before its write would.
    let newest = segments(&data).pop().expect("a segment");
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&newest)
        .expect("segment");
    file.set_len(rerun.position.offset).expect("cut");
    drop(file);
    let unrecorded = partition_dirs(&data, "middle")
        .into_iter()
        .find(|d| d.ends_with("middle-1-1"))
        .expect("the unrecorded attempt 1 wrote its partition");

    t1.run(&data, Vec::new());
    let events = Log::read(&data).all();
    let mut used: BTreeSet<(String, u32, u32)> = BTreeSet::new();
    for e in &events {
        if let JobEvent::ExecutionFinished(f) = e {
            let a = &f.attempt;
            assert!(
                used.insert((a.job_vertex.clone(), a.subtask, a.attempt)),
                "{}#{} attempt {} finished twice",
                a.job_vertex,
                a.subtask,
                a.attempt
            );
        }
    }
    let middle_1: Vec<u32> = events
        .iter()
        .filter_map(|e| match e {
            JobEvent::ExecutionFinished(f)
                if f.attempt.job_vertex == "middle" && f.attempt.subtask == 1 =>
            {
                Some(f.attempt.attempt)
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        middle_1,
        vec![0, 2],
        "the re-run skips attempt 1, which ran before the crash"
    );
    assert!(
        !unrecorded.exists(),
        "{} was released",
        unrecorded.display()
    );
    for vertex in ["source", "middle"] {
        assert_eq!(
            partition_dirs(&data, vertex),
            live_partitions(&data, &events, vertex),
            "only the final plan's partitions of `{vertex}` are left"
        );
    }
    assert_same_output_as_uninterrupted(&data, Enumerator::Files);
}
