//! The planner's decisions for topology T1 of docs/recovery.md, from
//! hand-written logs: `source` (5, split enumerator) → forward →
//! `middle` (5) → hash → `sink` (auto).

use std::collections::BTreeSet;

use super::*;
use crate::config::{LoadOptions, parse_job};
use crate::coordinator::CoordinatorSnapshot;
use crate::events::{
    AttemptId, EncodedSplit, EnumeratorSnapshot, ExecutionFinished, ExecutionsReset, JobEvent,
    JobVertexInitialized, ResetReason, ShuffleSnapshot, SplitAssignment,
};
use crate::graph::JobGraph;
use crate::plan::EnumeratorStart;
use crate::value::SplitData;

const T1: &str = r#"
    [job]
    name = "t1"
    [shuffle]
    plugin = "shuffle"
    [plugins.splits]
    component = "splits.wasm"
    kind = "split-enumerator"
    [plugins.shuffle]
    component = "shuffle.wasm"
    kind = "shuffle-master"
    [[vertices]]
    id = "source"
    source = "splits"
    parallelism = 5
    operators = [{ op = "read-lines" }]
    [[vertices]]
    id = "middle"
    parallelism = 5
    operators = [{ op = "tokenize", column = "line", as = "word" }]
    [[vertices]]
    id = "sink"
    parallelism = "auto"
    max-parallelism = 4
    operators = [{ op = "write-text", path = "${job_dir}/out" }]
    [[edges]]
    from = "source"
    to = "middle"
    kind = "forward"
    [[edges]]
    from = "middle"
    to = "sink"
    kind = "hash"
    key = ["word"]
"#;

fn t1() -> JobGraph {
    parse_t(T1)
}

/// T1 with `middle` → forward → `sink` (5): a chain of forward edges.
fn t1_forward() -> JobGraph {
    let toml = T1
        .replace(
            "kind = \"hash\"\n    key = [\"word\"]",
            "kind = \"forward\"",
        )
        .replace(
            "parallelism = \"auto\"\n    max-parallelism = 4",
            "parallelism = 5",
        );
    assert_ne!(toml, T1);
    parse_t(&toml)
}

fn parse_t(toml: &str) -> JobGraph {
    let dir = tempfile::tempdir().unwrap();
    for f in ["splits.wasm", "shuffle.wasm"] {
        std::fs::write(dir.path().join(f), b"\0asm\x0d\0\x01\0").unwrap();
    }
    let opts = LoadOptions {
        data_dir: dir.path().join("data"),
        cache_dir: None,
        log_on_objects: false,
    };
    parse_job(&dir.path().join("t1.toml"), toml, &opts)
        .expect("T1 parses")
        .graph
}

fn init(vertex: &str, parallelism: u32) -> JobEvent {
    JobEvent::JobVertexInitialized(JobVertexInitialized {
        job_vertex: vertex.into(),
        parallelism,
        subtask_inputs: vec![Vec::new(); parallelism as usize],
        decided_at_runtime: vertex == "sink",
    })
}

fn data_set(vertex: &str) -> Option<&'static str> {
    match vertex {
        "source" => Some("source-middle"),
        "middle" => Some("middle-sink"),
        _ => None,
    }
}

fn finished(vertex: &str, subtask: u32, attempt: u32, snapshot: bool) -> JobEvent {
    let produced = data_set(vertex)
        .map(|ds| crate::events::ProducedPartition {
            data_set: ds.into(),
            location: format!("/shuffle/{vertex}-{subtask}-{attempt}"),
            bytes_per_subpartition: vec![100],
        })
        .into_iter()
        .collect();
    let split = |id: String| EncodedSplit {
        id: id.clone(),
        bytes: postcard::to_allocvec(&SplitData {
            id,
            payload: crate::value::SplitPayloadData::Inline("x".into()),
        })
        .unwrap(),
    };
    let enumerator_snapshots = if snapshot {
        vec![EnumeratorSnapshot {
            job_vertex: "source".into(),
            checkpoint_id: -1,
            state: vec![1, 2, 3],
            assignments: (0..5)
                .map(|s| SplitAssignment {
                    subtask: s,
                    splits: vec![split(format!("s{s}a")), split(format!("s{s}b"))],
                })
                .collect(),
            no_more_splits: Vec::new(),
            state_file: None,
            incremental: false,
        }]
    } else {
        Vec::new()
    };
    JobEvent::ExecutionFinished(ExecutionFinished {
        attempt: AttemptId {
            job_vertex: vertex.into(),
            subtask,
            attempt,
        },
        coordinator_epoch: 1,
        produced,
        enumerator_snapshots,
        shuffle_snapshot: snapshot.then(|| ShuffleSnapshot {
            incremental: false,
            data: vec![9],
        }),
    })
}

/// Reports every partition present except those at the given locations.
struct Shuffle {
    missing: Vec<String>,
    asked: Vec<Vec<PartitionRef>>,
}

impl PartitionOracle for Shuffle {
    fn available(&mut self, needed: &[PartitionRef]) -> Result<Vec<bool>, OracleError> {
        self.asked.push(needed.to_vec());
        Ok(needed
            .iter()
            .map(|p| !self.missing.iter().any(|m| p.location.ends_with(m)))
            .collect())
    }
}

/// A recovery target over `supports` and a [`Shuffle`] oracle that
/// records what [`recover`] restores and applies.
struct Target<'a> {
    supports: &'a dyn Fn(usize) -> bool,
    /// Source vertices whose enumerator's `restore` fails.
    unrestorable: Vec<usize>,
    /// Source vertices restored, in order, with the snapshot each was
    /// handed.
    restored_enumerators: Vec<(usize, CoordinatorSnapshot)>,
    oracle: &'a mut Shuffle,
    restored: Option<Vec<ShuffleSnapshot>>,
    applied: Option<RecoveryPlan>,
}

impl<'a> Target<'a> {
    /// A target where every source vertex's enumerator supports batch
    /// snapshots and restores, asking `oracle`.
    fn every_enumerator(oracle: &'a mut Shuffle) -> Self {
        Self {
            supports: &|_| true,
            unrestorable: Vec::new(),
            restored_enumerators: Vec::new(),
            oracle,
            restored: None,
            applied: None,
        }
    }
}

impl PartitionOracle for Target<'_> {
    fn available(&mut self, needed: &[PartitionRef]) -> Result<Vec<bool>, OracleError> {
        assert!(
            self.restored.is_some(),
            "the shuffle master is restored first"
        );
        self.oracle.available(needed)
    }
}

impl RecoveryTarget for Target<'_> {
    type Error = RecoveryError;
    fn restore_shuffle_master(
        &mut self,
        snapshots: &[&ShuffleSnapshot],
    ) -> Result<(), RecoveryError> {
        self.restored = Some(snapshots.iter().map(|&s| s.clone()).collect());
        Ok(())
    }
    fn supports_batch_snapshot(&self, vertex: usize) -> bool {
        (self.supports)(vertex)
    }
    fn restore_enumerator(
        &mut self,
        vertex: usize,
        snapshot: CoordinatorSnapshot,
    ) -> Result<bool, RecoveryError> {
        assert!(self.supports_batch_snapshot(vertex));
        if self.unrestorable.contains(&vertex) {
            return Ok(false);
        }
        self.restored_enumerators.push((vertex, snapshot));
        Ok(true)
    }
    fn apply(&mut self, plan: &mut RecoveryPlan) -> Result<(), RecoveryError> {
        self.applied = Some(plan.clone());
        Ok(())
    }
}

/// [`recover`] into a [`Target`]; the plan it returns is the one applied.
fn plan(
    graph: &JobGraph,
    events: &[JobEvent],
    supports: &dyn Fn(usize) -> bool,
    oracle: &mut Shuffle,
) -> Result<RecoveryPlan, RecoveryError> {
    plan_unrestorable(graph, events, supports, &[], oracle)
}

/// [`plan`] where restoring the enumerators of `unrestorable` fails.
fn plan_unrestorable(
    graph: &JobGraph,
    events: &[JobEvent],
    supports: &dyn Fn(usize) -> bool,
    unrestorable: &[usize],
    oracle: &mut Shuffle,
) -> Result<RecoveryPlan, RecoveryError> {
    let mut target = Target {
        supports,
        unrestorable: unrestorable.to_vec(),
        restored_enumerators: Vec::new(),
        oracle,
        restored: None,
        applied: None,
    };
    let plan = recover(graph, events, &mut target)?;
    assert_eq!(
        target.applied.as_ref(),
        Some(&plan),
        "step 7 applies the plan"
    );
    Ok(plan)
}

fn shuffle(missing: &[&str]) -> Shuffle {
    Shuffle {
        missing: missing.iter().map(|m| m.to_string()).collect(),
        asked: Vec::new(),
    }
}

/// Scenario 1's log: every source finished, the last with snapshots; middles initialized.
fn sources_finished() -> Vec<JobEvent> {
    let mut events = vec![init("source", 5), init("middle", 5)];
    events.extend((0..5).map(|s| finished("source", s, 0, s == 4)));
    events
}

fn reasons(plan: &RecoveryPlan, vertex: usize) -> Vec<Option<ResetReason>> {
    (0..5)
        .map(|s| plan.reset.get(&(vertex, s)).cloned())
        .collect()
}

#[test]
fn finished_sources_are_kept_and_running_middles_reset() {
    let g = t1();
    let mut oracle = shuffle(&[]);
    let plan = plan(&g, &sources_finished(), &|_| true, &mut oracle).unwrap();
    assert_eq!(
        plan.kept.keys().copied().collect::<Vec<_>>(),
        (0..5).map(|s| (0, s)).collect::<Vec<_>>()
    );
    assert!(
        reasons(&plan, 1)
            .iter()
            .all(|r| *r == Some(ResetReason::RecoveryUnfinished))
    );
    assert_eq!(oracle.asked.len(), 1, "one question while nothing is lost");
    assert_eq!(
        oracle.asked[0].len(),
        5,
        "the five source partitions are needed"
    );
    assert_eq!(plan.coordinators[&0], EnumeratorStart::Restored);
    let mut oracle = shuffle(&[]);
    let mut target = Target::every_enumerator(&mut oracle);
    recover(&g, &sources_finished(), &mut target).unwrap();
    let [(0, restored)] = target.restored_enumerators.as_slice() else {
        panic!("source 0 restored once from the snapshot");
    };
    assert_eq!(restored.enumerator, vec![1, 2, 3]);
    assert_eq!(restored.readers[3].assigned.len(), 2);
    assert_eq!(plan.shuffle_snapshots, 1);
}

#[test]
fn a_lost_partition_resets_only_its_producer() {
    let plan = plan(
        &t1(),
        &sources_finished(),
        &|_| true,
        &mut shuffle(&["source-0-0"]),
    )
    .unwrap();
    assert_eq!(
        plan.reset.get(&(0, 0)),
        Some(&ResetReason::RecoveryPartitionMissing {
            data_set: "source-middle".into()
        })
    );
    assert!((1..5).all(|s| plan.kept.contains_key(&(0, s))));
    assert_eq!(
        plan.release.len(),
        1,
        "the lost partition's producer releases it"
    );
    assert_eq!(plan.next_attempt((0, 0)), 1);
}

#[test]
fn all_partitions_lost_resets_all_sources() {
    let missing = [
        "source-0-0",
        "source-1-0",
        "source-2-0",
        "source-3-0",
        "source-4-0",
    ];
    let plan = plan(
        &t1(),
        &sources_finished(),
        &|_| true,
        &mut shuffle(&missing),
    )
    .unwrap();
    assert!(plan.kept.is_empty());
}

#[test]
fn an_unfinished_vertex_whose_enumerator_cannot_snapshot_resets_every_subtask() {
    let mut events = vec![init("source", 5), init("middle", 5)];
    events.push(finished("source", 0, 0, false));
    let plan = plan(&t1(), &events, &|_| false, &mut shuffle(&[])).unwrap();
    assert!(plan.kept.is_empty());
    // Source 0 is dropped as a trailing finish, the rest never finished;
    // with no snapshot support every subtask starts over.
    assert_eq!(
        plan.coordinators[&0],
        EnumeratorStart::Fresh,
        "a fresh enumerator"
    );
    assert!(reasons(&plan, 0).iter().all(Option::is_some));
}

#[test]
fn a_finished_vertex_whose_enumerator_cannot_snapshot_is_kept_and_restarts_in_full_once() {
    let mut events = vec![init("source", 5), init("middle", 5)];
    // The shuffle master still snapshots; the enumerator cannot.
    events.extend((0..5).map(|s| {
        let mut e = finished("source", s, 0, s == 4);
        if let JobEvent::ExecutionFinished(f) = &mut e {
            f.enumerator_snapshots.clear();
        }
        e
    }));
    let kept = plan(&t1(), &events, &|_| false, &mut shuffle(&[])).unwrap();
    assert_eq!(kept.kept.len(), 5);
    assert_eq!(
        kept.restart_all_once.get(&0),
        Some(&ResetReason::RecoveryEnumeratorWithoutSnapshot)
    );

    let lost = plan(&t1(), &events, &|_| false, &mut shuffle(&["source-2-0"])).unwrap();
    assert!(
        lost.kept.is_empty(),
        "one lost partition restarts every source subtask"
    );
    assert!(
        lost.restart_all_once.is_empty(),
        "the one-shot restart is used up"
    );
    assert_eq!(
        lost.reset[&(0, 2)],
        ResetReason::RecoveryPartitionMissing {
            data_set: "source-middle".into()
        }
    );
    assert_eq!(
        lost.reset[&(0, 0)],
        ResetReason::RecoveryEnumeratorWithoutSnapshot
    );
}

#[test]
fn the_run_time_parallelism_is_replayed_and_a_finished_sink_subtask_kept() {
    let mut events = sources_finished();
    events.extend((0..5).map(|s| finished("middle", s, 0, s == 4)));
    let mut sink = init("sink", 2);
    if let JobEvent::JobVertexInitialized(i) = &mut sink {
        i.subtask_inputs = vec![
            vec![crate::events::SubtaskInputRange {
                data_set: "middle-sink".into(),
                partition_start: 0,
                partition_end: 5,
                subpartition_start: 0,
                subpartition_end: 3,
            }],
            vec![crate::events::SubtaskInputRange {
                data_set: "middle-sink".into(),
                partition_start: 0,
                partition_end: 5,
                subpartition_start: 3,
                subpartition_end: 4,
            }],
        ];
    }
    events.push(sink);
    events.push(finished("sink", 0, 0, true));
    let plan = plan(&t1(), &events, &|_| true, &mut shuffle(&[])).unwrap();
    let (_, decided) = plan.initialized.iter().find(|(v, _)| *v == 2).unwrap();
    assert_eq!(decided.parallelism, 2);
    assert_eq!(decided.input_ranges, vec![0..3, 3..4]);
    assert!(plan.kept.contains_key(&(2, 0)));
    assert_eq!(
        plan.reset.get(&(2, 1)),
        Some(&ResetReason::RecoveryUnfinished)
    );
    assert!(
        plan.kept.contains_key(&(1, 3)),
        "middles are kept: sink 1 still reads them"
    );
}

#[test]
fn a_source_finish_after_its_enumerators_last_snapshot_is_not_trusted() {
    // Sources 0..3 finish without snapshots, 4 with; then source 2 is reset
    // and finishes again without a snapshot: its splits are not in any.
    let mut events = sources_finished();
    events.push(JobEvent::ExecutionsReset(ExecutionsReset {
        executions: vec![crate::events::ExecutionVertexId {
            job_vertex: "source".into(),
            subtask: 2,
        }],
        reason: ResetReason::Failover {
            message: "boom".into(),
        },
    }));
    events.push(finished("source", 2, 1, false));
    let plan = plan(&t1(), &events, &|_| true, &mut shuffle(&[])).unwrap();
    assert_eq!(
        plan.reset.get(&(0, 2)),
        Some(&ResetReason::RecoveryNotInSnapshot)
    );
    assert!(
        plan.kept.contains_key(&(0, 1)),
        "finished before the snapshot"
    );
}

#[test]
fn what_read_a_distrusted_source_subtask_through_a_forward_edge_runs_again() {
    // Sources 3 and 4 finish after the last snapshot (4's snapshot refused,
    // say), and middle 3 read source 3's records through the forward edge.
    // Re-run, sources 3 and 4 may swap splits: middle 3's records would be
    // read twice or lost (coordhost-sim seed 72498, docs/simulation.md).
    let mut events = vec![init("source", 5), init("middle", 5)];
    events.extend((0..5).map(|s| finished("source", s, 0, s == 2)));
    events.push(finished("middle", 3, 0, false));
    events.push(finished("middle", 1, 0, false));
    let plan = plan(&t1(), &events, &|_| true, &mut shuffle(&[])).unwrap();
    assert_eq!(
        plan.reset.get(&(0, 3)),
        Some(&ResetReason::RecoveryNotInSnapshot)
    );
    assert_eq!(
        plan.reset.get(&(1, 3)),
        Some(&ResetReason::RecoveryNotInSnapshot),
        "{plan:?}"
    );
    assert!(
        plan.release.iter().any(|p| (p.vertex, p.subtask) == (1, 3)),
        "its old partition is released"
    );
    // Middle 1 read source 1, which is kept: it stays.
    assert!(plan.kept.contains_key(&(1, 1)), "{plan:?}");
}

#[test]
fn a_source_whose_enumerator_state_was_never_recorded_runs_again_whole() {
    // Every source subtask finished; the completing finish carried the
    // shuffle master's snapshot but not the enumerator's (deferred for a
    // rebuilt enumerator). Recovery starts a fresh enumerator, which hands
    // every split out again: a kept subtask's splits would be read twice
    // (coordhost-sim seed 281, docs/simulation.md).
    let mut events = vec![init("source", 5), init("middle", 5)];
    events.extend((0..5).map(|s| {
        let mut e = finished("source", s, 0, s == 4);
        if let JobEvent::ExecutionFinished(f) = &mut e {
            f.enumerator_snapshots.clear();
        }
        e
    }));
    let plan = plan(&t1(), &events, &|_| true, &mut shuffle(&[])).unwrap();
    assert_eq!(
        plan.coordinators.get(&0),
        Some(&EnumeratorStart::Fresh),
        "a fresh enumerator"
    );
    for s in 0..5 {
        assert_eq!(
            plan.reset.get(&(0, s)),
            Some(&ResetReason::RecoveryNotInSnapshot),
            "source {s}: {plan:?}"
        );
        assert!(plan.release.iter().any(|p| (p.vertex, p.subtask) == (0, s)));
    }
    assert!(plan.kept.is_empty(), "{plan:?}");
}

#[test]
fn the_forward_rule_goes_on_through_a_reader_that_runs_again_for_another_reason() {
    // T1 with `middle` → forward → `sink` (5). Sources 3 and 4 finish after
    // the last snapshot; every middle and sink 3 finish; then middle 3 is
    // reset by a failover before the crash; sinks 1 and 3 finished. Sink 3 read middle 3's old
    // output, made of source 3's old splits: it runs again with source 3's
    // reason although middle 3, between them, is not kept for its own
    // reason (coordhost-sim seed 10888 found the in-run twin:
    // `Scheduling::reset_forward_readers_of_sources`).
    let mut events = vec![init("source", 5), init("middle", 5), init("sink", 5)];
    events.extend((0..5).map(|s| finished("source", s, 0, s == 2)));
    events.extend((0..5).map(|s| finished("middle", s, 0, false)));
    events.push(finished("sink", 1, 0, false));
    events.push(finished("sink", 3, 0, false));
    events.push(JobEvent::ExecutionsReset(ExecutionsReset {
        executions: vec![crate::events::ExecutionVertexId {
            job_vertex: "middle".into(),
            subtask: 3,
        }],
        reason: ResetReason::Failover {
            message: "worker lost".into(),
        },
    }));
    let plan = plan(&t1_forward(), &events, &|_| true, &mut shuffle(&[])).unwrap();
    assert_eq!(
        plan.reset.get(&(0, 3)),
        Some(&ResetReason::RecoveryNotInSnapshot)
    );
    assert_eq!(
        plan.reset.get(&(2, 3)),
        Some(&ResetReason::RecoveryNotInSnapshot),
        "{plan:?}"
    );
    // Sink 1 read middle 1, which read source 1 (kept): it stays.
    assert!(plan.kept.contains_key(&(2, 1)), "{plan:?}");
}

#[test]
fn a_finish_downstream_after_the_last_snapshot_is_kept_when_its_partition_survives() {
    let mut events = sources_finished();
    events.push(finished("middle", 0, 0, false));
    let plan = plan(&t1(), &events, &|_| true, &mut shuffle(&[])).unwrap();
    assert!(
        plan.kept.contains_key(&(1, 0)),
        "no plugin state depends on it: {plan:?}"
    );
    // Its partition gone, it runs again for that reason instead.
    let plan = plan_missing(&events, &["/shuffle/middle-0-0"]);
    assert!(!plan.kept.contains_key(&(1, 0)));
    assert!(
        matches!(
            plan.reset.get(&(1, 0)),
            Some(ResetReason::RecoveryPartitionMissing { .. })
        ),
        "{plan:?}"
    );
}

fn plan_missing(events: &[JobEvent], missing: &[&str]) -> RecoveryPlan {
    plan(&t1(), events, &|_| true, &mut shuffle(missing)).unwrap()
}

#[test]
fn a_source_reset_before_the_crash_is_not_skipped() {
    let mut events = sources_finished();
    events.push(JobEvent::ExecutionsReset(ExecutionsReset {
        executions: vec![crate::events::ExecutionVertexId {
            job_vertex: "source".into(),
            subtask: 1,
        }],
        reason: ResetReason::PartitionNotFound {
            data_set: "source-middle".into(),
            consumer: crate::events::ExecutionVertexId {
                job_vertex: "middle".into(),
                subtask: 1,
            },
        },
    }));
    let plan = plan(&t1(), &events, &|_| true, &mut shuffle(&[])).unwrap();
    assert!(!plan.kept.contains_key(&(0, 1)));
    assert_eq!(
        plan.reset.get(&(0, 1)),
        Some(&ResetReason::RecoveryUnfinished)
    );
    assert_eq!(
        plan.next_attempt((0, 1)),
        2,
        "the reset made attempt 1, which may have run: the re-run takes 2"
    );
}

#[test]
fn a_log_naming_an_unknown_vertex_is_refused() {
    let err = plan(&t1(), &[init("renamed", 5)], &|_| true, &mut shuffle(&[])).unwrap_err();
    assert!(err.to_string().contains("`renamed`"), "{err}");
}

#[test]
fn a_full_restart_of_a_source_that_cannot_snapshot_also_resets_what_read_its_old_partitions() {
    let mut events = vec![init("source", 5), init("middle", 5)];
    events.extend((0..5).map(|s| {
        let mut e = finished("source", s, 0, s == 4);
        if let JobEvent::ExecutionFinished(f) = &mut e {
            f.enumerator_snapshots.clear();
        }
        e
    }));
    // Middles 0 and 1 finished (recorded with a snapshot); the rest did not.
    events.push(finished("middle", 0, 0, false));
    events.push(finished("middle", 1, 0, true));
    if let Some(JobEvent::ExecutionFinished(f)) = events.last_mut() {
        f.enumerator_snapshots.clear();
    }
    let plan = plan(&t1(), &events, &|_| false, &mut shuffle(&["source-3-0"])).unwrap();
    assert!(
        plan.kept.is_empty(),
        "sources restart in full and the middles that read them run again"
    );
    let upstream = crate::events::ExecutionVertexId {
        job_vertex: "source".into(),
        subtask: 3,
    };
    assert_eq!(
        plan.reset[&(1, 0)],
        ResetReason::RecoveryUpstreamReset {
            upstream: upstream.clone()
        }
    );
    assert_eq!(
        plan.reset[&(1, 1)],
        ResetReason::RecoveryUpstreamReset { upstream }
    );
}

fn job_started() -> JobEvent {
    JobEvent::JobStarted(crate::events::JobStarted {
        job_id: "t1".into(),
        graph_fingerprint: "f".into(),
        recovery_enabled: true,
    })
}

#[test]
fn recovery_restores_the_shuffle_master_from_the_current_runs_snapshots_only() {
    let g = t1();
    let mut oracle = shuffle(&[]);
    let mut target = Target::every_enumerator(&mut oracle);
    let plan = recover(&g, &sources_finished(), &mut target).unwrap();
    assert_eq!(
        target.restored,
        Some(vec![ShuffleSnapshot {
            incremental: false,
            data: vec![9],
        }])
    );
    assert_eq!(plan.kept.len(), 5);

    // A run that started over: the first run's finishes and snapshots do not count.
    let mut events = vec![job_started()];
    events.extend(sources_finished());
    events.extend([job_started(), init("source", 5)]);
    let mut oracle = shuffle(&[]);
    let mut target = Target::every_enumerator(&mut oracle);
    let plan = recover(&g, &events, &mut target).unwrap();
    assert_eq!(target.restored, Some(Vec::new()));
    assert!(plan.kept.is_empty(), "{plan:?}");
    assert_eq!(
        reasons(&plan, 0),
        vec![Some(ResetReason::RecoveryUnfinished); 5]
    );
}

/// Source 0 and middle 0 (its forward consumer) finished, with snapshots;
/// sources 1–4 did not.
fn source_0_region_finished() -> Vec<JobEvent> {
    vec![
        init("source", 5),
        init("middle", 5),
        finished("source", 0, 0, true),
        finished("middle", 0, 0, true),
    ]
}

#[test]
fn an_unfinished_source_whose_enumerator_cannot_be_restored_restarts_its_region() {
    let g = t1();
    let mut oracle = shuffle(&[]);
    let plan = plan_unrestorable(
        &g,
        &source_0_region_finished(),
        &|_| true,
        &[0],
        &mut oracle,
    )
    .unwrap();
    assert_eq!(
        plan.coordinators[&0],
        EnumeratorStart::Fresh,
        "a fresh enumerator"
    );
    assert_eq!(
        reasons(&plan, 0),
        vec![Some(ResetReason::RecoveryEnumeratorRestoreFailed); 5],
        "every source subtask, the finished one too"
    );
    assert_eq!(
        plan.reset[&(1, 0)],
        ResetReason::RecoveryUpstreamReset {
            upstream: crate::events::ExecutionVertexId {
                job_vertex: "source".into(),
                subtask: 0,
            }
        },
        "the middle that read source 0's old partition runs again"
    );
    assert!(plan.kept.is_empty(), "{plan:?}");
    let released: BTreeSet<(usize, u32)> =
        plan.release.iter().map(|p| (p.vertex, p.subtask)).collect();
    assert_eq!(released, BTreeSet::from([(0, 0), (1, 0)]));
    assert!(oracle.asked.is_empty(), "nothing kept, nothing to ask");
}

#[test]
fn a_finished_source_whose_enumerator_cannot_be_restored_is_kept_and_restarts_in_full_once() {
    let plan = plan_unrestorable(
        &t1(),
        &sources_finished(),
        &|_| true,
        &[0],
        &mut shuffle(&[]),
    )
    .unwrap();
    assert_eq!(plan.kept.len(), 5, "{plan:?}");
    assert_eq!(
        plan.coordinators[&0],
        EnumeratorStart::Fresh,
        "a fresh enumerator"
    );
    assert_eq!(
        plan.restart_all_once.get(&0),
        Some(&ResetReason::RecoveryEnumeratorRestoreFailed)
    );

    let lost = plan_unrestorable(
        &t1(),
        &sources_finished(),
        &|_| true,
        &[0],
        &mut shuffle(&["source-1-0"]),
    )
    .unwrap();
    assert!(
        lost.kept.is_empty(),
        "one lost partition restarts every source subtask"
    );
    assert_eq!(
        lost.reset[&(0, 0)],
        ResetReason::RecoveryEnumeratorRestoreFailed
    );
    assert_eq!(
        lost.reset[&(0, 1)],
        ResetReason::RecoveryPartitionMissing {
            data_set: "source-middle".into()
        }
    );
}

#[test]
fn a_restored_enumerator_is_restored_once_before_the_plan_is_applied() {
    let g = t1();
    let mut oracle = shuffle(&[]);
    let mut target = Target::every_enumerator(&mut oracle);
    let plan = recover(&g, &source_0_region_finished(), &mut target).unwrap();
    let restored: Vec<usize> = target
        .restored_enumerators
        .iter()
        .map(|(v, _)| *v)
        .collect();
    assert_eq!(restored, vec![0]);
    assert_eq!(plan.coordinators[&0], EnumeratorStart::Restored);
    assert!(plan.kept.contains_key(&(0, 0)) && plan.kept.contains_key(&(1, 0)));
}

#[test]
fn an_unfinished_source_that_cannot_snapshot_also_resets_a_finished_consumer_of_its_old_output() {
    let mut events = source_0_region_finished();
    for e in &mut events {
        if let JobEvent::ExecutionFinished(f) = e {
            f.enumerator_snapshots.clear();
        }
    }
    let plan = plan(&t1(), &events, &|_| false, &mut shuffle(&[])).unwrap();
    assert!(plan.kept.is_empty(), "{plan:?}");
    assert_eq!(
        reasons(&plan, 0),
        vec![Some(ResetReason::RecoveryEnumeratorWithoutSnapshot); 5]
    );
    assert!(
        matches!(
            plan.reset[&(1, 0)],
            ResetReason::RecoveryUpstreamReset { .. }
        ),
        "{plan:?}"
    );
}

/// T1 finished: every subtask of every vertex finished, the source's
/// finishes without an enumerator snapshot (refused as too large), and
/// the run's `JobFinished` recorded.
fn t1_finished_without_snapshots() -> Vec<JobEvent> {
    let mut events = vec![init("source", 5), init("middle", 5), init("sink", 4)];
    events.extend((0..5).map(|s| finished("source", s, 0, false)));
    events.extend((0..5).map(|s| finished("middle", s, 0, false)));
    events.extend((0..4).map(|s| finished("sink", s, 0, false)));
    events.push(JobEvent::JobFinished(crate::events::JobFinished {
        job_id: "t1".into(),
    }));
    events
}

#[test]
fn a_finished_job_is_recovered_whole_whatever_its_snapshots_and_partitions() {
    // A leader elected right after the finish (or a plain restart) runs
    // nothing again and publishes nothing again, even where the rules for
    // an unfinished job would distrust a finish (no enumerator snapshot
    // reflects it) or miss a partition (coordhost-sim seed 2453).
    let events = t1_finished_without_snapshots();
    let mut oracle = shuffle(&["/shuffle/source-0-0", "/shuffle/middle-3-0"]);
    let plan = plan(&t1(), &events, &|_| true, &mut oracle).unwrap();
    assert!(plan.reset.is_empty(), "{plan:?}");
    assert!(plan.release.is_empty(), "{plan:?}");
    assert_eq!(plan.kept.len(), 14, "{plan:?}");
    assert!(oracle.asked.is_empty(), "no partition question");
    // Without the `JobFinished` the same log is an unfinished run's.
    let unfinished = &events[..events.len() - 1];
    let plan = plan_missing(unfinished, &["/shuffle/middle-3-0"]);
    assert!(!plan.reset.is_empty(), "{plan:?}");
}

#[test]
fn a_reset_after_the_finish_makes_it_an_unfinished_run_again() {
    // A coordinator (before this rule) that ran part of a finished job
    // again recorded resets after `JobFinished`: its log is recovered by
    // the rules of an unfinished run.
    let mut events = t1_finished_without_snapshots();
    events.push(JobEvent::ExecutionsReset(ExecutionsReset {
        executions: vec![crate::events::ExecutionVertexId {
            job_vertex: "sink".into(),
            subtask: 2,
        }],
        reason: ResetReason::RecoveryUnfinished,
    }));
    let plan = plan(&t1(), &events, &|_| true, &mut shuffle(&[])).unwrap();
    assert!(plan.reset.contains_key(&(2, 2)), "{plan:?}");
    assert!(
        plan.reset.len() > 1,
        "the unsnapshotted sources too: {plan:?}"
    );
}

/// [`sources_finished`] with its batch snapshots in two parts: a whole one
/// at subtask 1's finish (subtasks 0 and 1's splits) and an incremental
/// one at subtask 4's (the splits assigned since), the shuffle master's
/// likewise.
fn sources_finished_incrementally() -> Vec<JobEvent> {
    let mut events = vec![init("source", 5), init("middle", 5)];
    events.extend((0..5).map(|s| finished("source", s, 0, s == 1 || s == 4)));
    for (i, since) in [(3, false), (6, true)] {
        let JobEvent::ExecutionFinished(f) = &mut events[i] else {
            unreachable!("record {i} is a finish");
        };
        let e = &mut f.enumerator_snapshots[0];
        e.assignments.retain(|a| (a.subtask >= 2) == since);
        e.incremental = since;
        if let Some(s) = f.shuffle_snapshot.as_mut() {
            s.incremental = since;
        }
    }
    events
}

#[test]
fn recovery_of_events_it_owns_decides_as_recovery_of_borrowed_ones() {
    let g = t1();
    for (events, missing) in [
        (sources_finished(), Vec::new()),
        (sources_finished(), vec!["source-2-0"]),
        (source_0_region_finished(), Vec::new()),
        (sources_finished_incrementally(), Vec::new()),
        (sources_finished_incrementally(), vec!["source-3-0"]),
    ] {
        let mut borrowed_oracle = shuffle(&missing);
        let mut borrowed_target = Target::every_enumerator(&mut borrowed_oracle);
        let borrowed = recover(&g, &events, &mut borrowed_target).expect("recovers");
        let borrowed_restored = (
            borrowed_target.restored.take(),
            std::mem::take(&mut borrowed_target.restored_enumerators),
        );
        let mut owned_oracle = shuffle(&missing);
        let mut target = Target::every_enumerator(&mut owned_oracle);
        let owned = recover_owned(&g, events, &mut target).expect("recovers");
        assert_eq!(target.applied.as_ref(), Some(&owned), "step 7 applies it");
        assert_eq!(owned, borrowed);
        // The snapshots moved out of the owned records restore what the
        // borrowed ones do.
        assert_eq!(
            (target.restored.take(), target.restored_enumerators),
            borrowed_restored
        );
        assert_eq!(owned_oracle.asked, borrowed_oracle.asked);
    }
}

#[test]
fn a_whole_snapshot_and_the_increments_after_it_restore_as_one_whole_snapshot() {
    let g = t1();
    let restore = |events: Vec<JobEvent>| {
        let mut oracle = shuffle(&[]);
        let mut target = Target::every_enumerator(&mut oracle);
        let plan = recover_owned(&g, events, &mut target).expect("recovers");
        (plan, target.restored_enumerators)
    };
    let (whole_plan, whole) = restore(sources_finished());
    let (parts_plan, parts) = restore(sources_finished_incrementally());
    assert_eq!(parts, whole);
    assert_eq!(parts_plan.kept, whole_plan.kept);
    assert_eq!(parts_plan.reset, whole_plan.reset);
    assert_eq!(
        parts_plan.shuffle_snapshots, 2,
        "the whole one and the increment"
    );
}
