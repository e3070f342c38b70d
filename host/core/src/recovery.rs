//! Job recovery after a coordinator crash (FLIP-383, "job recovery for
//! batch jobs"): from the replayed job event log, decide for every
//! execution vertex whether its work survived (skip: keep the attempt id
//! and its result partitions) or must run again (reset), and what each
//! plugin is restored from.
//!
//! [`recover`] is the algorithm of docs/recovery.md, one call per numbered
//! step. What it restores into is a [`RecoveryTarget`] (in a run, the job
//! driver's, over the scheduler's JobMaster): it restores the shuffle
//! master, says which enumerators support batch snapshots, answers which
//! result partitions still exist (a [`PartitionOracle`]; in a run the
//! binary's `recovery::ShuffleOracle`, the shuffle master's `get-partitions-with-metrics`
//! polled until every needed partition is reported or the previous-worker
//! timeout passes) and installs the resulting [`RecoveryPlan`] before
//! anything is scheduled. Recovery never imports the scheduler
//! (docs/architecture.md).

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use crate::events::{
    EnumeratorSnapshot, ExecutionFinished, JobEvent, JobVertexInitialized, ResetReason,
    ShuffleSnapshot,
};
use crate::graph::{DistributionPattern, JobGraph, ProducedPartition, VertexInit};
use crate::history::CoordinatorSnapshot;
use crate::plan::EnumeratorStart;
use crate::snapshot::SnapshotError;

pub use crate::plan::{
    ExecutionKey, OracleError, PartitionRef, RecoveredExecution, RecoveryError, RecoveryPlan,
};

/// Says which of the needed partitions still exist (docs/recovery.md step 6).
pub trait PartitionOracle {
    /// Whether each partition of `needed` exists now: one answer per
    /// partition, in the order asked (issue 29: matched by index, not by a
    /// set of copied references). Called once per round, with the
    /// partitions that became needed in that round: all of them in one
    /// call, since an oracle may wait for partitions to be reported (the
    /// previous-worker timeout, counted from its first question), and a
    /// partition asked about in a later call would get what is left of
    /// that wait, not all of it.
    ///
    /// # Errors
    /// The shuffle master's error, turned into [`RecoveryError::Partitions`].
    fn available(&mut self, needed: &[PartitionRef]) -> Result<Vec<bool>, OracleError>;
}

/// What a recovery restores into (in a run: the job driver's target over
/// the scheduler's JobMaster and the event recorder).
pub trait RecoveryTarget: PartitionOracle {
    /// The target's error; a [`RecoveryError`] converts into it.
    type Error: From<RecoveryError>;

    /// Step 4: restores the shuffle master from its batch snapshots (oldest
    /// first, from the last full one; empty: nothing to restore) and tells
    /// it partition recovery started.
    ///
    /// # Errors
    /// The target's, when the shuffle master fails.
    /// The snapshots are lent from the log (issue 29: not copied for the plan).
    fn restore_shuffle_master(&mut self, snapshots: &[&ShuffleSnapshot])
    -> Result<(), Self::Error>;

    /// Whether source vertex `vertex` (index in the job graph) has a split
    /// enumerator that supports batch snapshots (docs/recovery.md step 5).
    fn supports_batch_snapshot(&self, vertex: usize) -> bool;

    /// Step 5: restores the split enumerator of source vertex `vertex`
    /// from `snapshot` (its newest batch snapshot in the log, decoded) and
    /// keeps it for step 7, which gives the splits of every subtask that is
    /// not kept back to it.
    ///
    /// Returns `Ok(false)` when the enumerator plugin cannot be restored
    /// from the snapshot (its `restore`, or the `start` after it, returned
    /// an error or trapped): nothing is kept, and recovery treats the
    /// vertex like one whose enumerator cannot snapshot — a fresh
    /// enumerator, every subtask of an unfinished vertex reset (reason
    /// `enumerator-restore-failed`) with what read its old partitions.
    ///
    /// # Errors
    /// The target's, for a failure that is not the plugin's (recovery
    /// gives up, step 8).
    fn restore_enumerator(
        &mut self,
        vertex: usize,
        snapshot: CoordinatorSnapshot,
    ) -> Result<bool, Self::Error>;

    /// Step 7: installs the plan (kept attempts, restored enumerators,
    /// recorded resets, released partitions) before anything is scheduled.
    /// It may take the kept attempts' partitions out of `plan.kept` (moved
    /// into the execution graph, issue 29: not copied); the plan recovery
    /// returns is the one applied, as the target left it.
    ///
    /// # Errors
    /// The target's, when a reset cannot be recorded or an enumerator
    /// cannot be restored.
    fn apply(&mut self, plan: &mut RecoveryPlan) -> Result<(), Self::Error>;
}

/// Recovers `graph`'s job from the events of its log into `target`: the
/// numbered steps of docs/recovery.md, one call each. Only the current run
/// (from the last `JobStarted` on, [`current_run`]) counts.
///
/// # Errors
/// [`RecoveryError`] (converted) when the log does not fit the graph or the
/// shuffle master cannot say which partitions exist; the target's errors.
/// Step 8 (giving up) is the caller's: the job driver decides between a
/// fresh run and a refusal.
pub fn recover<T: RecoveryTarget, E: AsRef<JobEvent>>(
    graph: &JobGraph,
    events: &[E],
    target: &mut T,
) -> Result<RecoveryPlan, T::Error> {
    let run = current_run(events);
    let records = run.iter().map(|e| Cow::Borrowed(e.as_ref()));
    let steps = steps_1_to_5(graph, finished_job(run), records, target)?;
    steps_6_and_7(graph, steps, target)
}

/// [`recover`] of events it owns, folded in place (issue 29, "recovery in
/// one pass, in place"): step 1 takes each record by value — a finish's
/// partition locations and byte counts and the snapshots it carries are
/// moved into the fold, the rest of the record is dropped as it is folded
/// — so the decoded log and the fold never both hold the same data. What
/// is left of the events goes before the partition question of step 6,
/// the restart's peak of memory.
///
/// # Errors
/// As [`recover`].
pub fn recover_owned<T, E>(
    graph: &JobGraph,
    mut events: Vec<E>,
    target: &mut T,
) -> Result<RecoveryPlan, T::Error>
where
    T: RecoveryTarget,
    E: AsRef<JobEvent> + Into<JobEvent>,
{
    events.drain(..current_run_start(&events));
    let finished = finished_job(&events);
    let records = events.into_iter().map(|e| Cow::Owned(e.into()));
    let steps = steps_1_to_5(graph, finished, records, target)?;
    steps_6_and_7(graph, steps, target)
}

/// Where steps 1–5 leave a recovery.
enum Steps {
    /// The job finished: the plan keeps every execution and is applied.
    Finished(RecoveryPlan),
    /// The plan before step 6: its kept executions are candidates whose
    /// partitions are asked about next.
    AskPartitions(RecoveryPlan),
}

/// Steps 1–5 over the current run's `records` (borrowed from the log, or
/// owned and consumed as they are folded); `finished`: the run holds a
/// `JobFinished` that no reset follows ([`finished_job`]).
fn steps_1_to_5<'a, T: RecoveryTarget>(
    graph: &JobGraph,
    finished: bool,
    records: impl Iterator<Item = Cow<'a, JobEvent>>,
    target: &mut T,
) -> Result<Steps, T::Error> {
    // Steps 1 and 2: replay; job vertices keep their recorded decisions.
    let mut replayed = replay(graph, records)?;
    if finished {
        // The job finished (its `JobFinished` is durable after every
        // finish and publication): every execution is kept as recorded;
        // nothing reads a partition or asks an enumerator again.
        let mut plan = keep_finished(replayed);
        mark_unfinished(&mut plan);
        target.apply(&mut plan)?;
        return Ok(Steps::Finished(plan));
    }
    // Step 3: finishes that no snapshot reflects run again.
    distrust_unsnapshotted(graph, &mut replayed);
    // Step 4: the shuffle master from its snapshots (the enumerators in
    // step 5, where a failed restore changes the decision).
    let shuffle: Vec<&ShuffleSnapshot> = replayed.shuffle.iter().map(AsRef::as_ref).collect();
    target.restore_shuffle_master(&shuffle)?;
    drop(shuffle);
    // Step 5: reset or skip per source vertex (restoring the enumerators
    // that can be, from their newest snapshots).
    reset_or_skip_sources(graph, &mut replayed, target)?;
    Ok(Steps::AskPartitions(keep_finished(replayed)))
}

fn steps_6_and_7<T: RecoveryTarget>(
    graph: &JobGraph,
    steps: Steps,
    target: &mut T,
) -> Result<RecoveryPlan, T::Error> {
    let mut plan = match steps {
        Steps::Finished(plan) => return Ok(plan),
        Steps::AskPartitions(plan) => plan,
    };
    // Step 6: keep only producers whose needed partitions survive.
    reset_forward_readers_of_sources(graph, &mut plan);
    reconcile_partitions(graph, &mut plan, target)?;
    mark_unfinished(&mut plan);
    // Step 7: install the plan.
    target.apply(&mut plan)?;
    Ok(plan)
}

/// The events of the current run: from the last `JobStarted` on (all of
/// them if there is none). A run that started over (after a failed
/// recovery, or `--fresh`) wrote a new `JobStarted`. `events` are
/// [`JobEvent`]s or [`ReplayedEvent`](crate::events::ReplayedEvent)s: a
/// sub-slice, nothing copied.
pub fn current_run<E: AsRef<JobEvent>>(events: &[E]) -> &[E] {
    &events[current_run_start(events)..]
}

/// [`current_run`], mutable (the driver loads snapshot side files into it).
pub fn current_run_mut<E: AsRef<JobEvent>>(events: &mut [E]) -> &mut [E] {
    let start = current_run_start(events);
    &mut events[start..]
}

/// Whether `run` (the current run's records) holds a `JobFinished` with no
/// `ExecutionsReset` after it: the job finished and no later coordinator
/// ran any of it again, so recovery keeps it whole (a new leader elected
/// right after the finish, or a plain restart, runs nothing again and
/// publishes nothing again: found by the simulator, seed 2453, where a
/// finish recorded without a snapshot was run again and its part file
/// published a second time).
fn finished_job<E: AsRef<JobEvent>>(run: &[E]) -> bool {
    for event in run.iter().rev() {
        match event.as_ref() {
            JobEvent::JobFinished(_) => return true,
            JobEvent::ExecutionsReset(_) | JobEvent::JobStarted(_) => return false,
            _ => {}
        }
    }
    false
}

fn current_run_start<E: AsRef<JobEvent>>(events: &[E]) -> usize {
    events
        .iter()
        .rposition(|e| matches!(e.as_ref(), JobEvent::JobStarted(_)))
        .unwrap_or(0)
}

struct Finished {
    attempt: u32,
    partitions: Vec<ProducedPartition>,
    index: usize,
}

/// Step 1's record of one source vertex's enumerator snapshots, borrowed
/// from the log or moved out of its owned records: the newest whole one
/// and the incremental ones after it.
struct Snapshots<'a> {
    whole: Cow<'a, EnumeratorSnapshot>,
    since: Vec<Cow<'a, EnumeratorSnapshot>>,
    /// Index (in the current run) of the event that carried the newest.
    at: usize,
}

impl<'a> Snapshots<'a> {
    /// The whole history: what [`EnumeratorSnapshot::fold`] makes of
    /// `whole` and each of `since` in order, built once (a subtask's splits
    /// appended in log order; the rest from the newest snapshot). With no
    /// incremental ones it is `whole` as it is: lent, or moved.
    fn folded(self) -> Cow<'a, EnumeratorSnapshot> {
        let Some(newest) = self.since.last() else {
            return self.whole;
        };
        let mut assignments = self.whole.into_owned().assignments;
        let mut at: std::collections::HashMap<u32, usize> =
            std::collections::HashMap::with_capacity(assignments.len());
        for (i, a) in assignments.iter().enumerate() {
            at.entry(a.subtask).or_insert(i);
        }
        for snap in &self.since {
            for add in &snap.assignments {
                match at.get(&add.subtask) {
                    Some(&i) => assignments[i].splits.extend(add.splits.iter().cloned()),
                    None => {
                        at.insert(add.subtask, assignments.len());
                        assignments.push(add.clone());
                    }
                }
            }
        }
        Cow::Owned(EnumeratorSnapshot {
            job_vertex: newest.job_vertex.clone(),
            checkpoint_id: newest.checkpoint_id,
            state: newest.state.clone(),
            assignments,
            no_more_splits: newest.no_more_splits.clone(),
            state_file: newest.state_file.clone(),
            incremental: false,
        })
    }
}

/// What steps 1 and 2 leave: the log replayed into maps.
struct Replayed<'a> {
    plan: RecoveryPlan,
    /// The shuffle-master snapshots to restore, lent from the log (or
    /// moved out of its owned records).
    shuffle: Vec<Cow<'a, ShuffleSnapshot>>,
    finished: BTreeMap<ExecutionKey, Finished>,
    enumerators: BTreeMap<usize, Cow<'a, EnumeratorSnapshot>>,
    /// Per source vertex, the index (in the current run) of the event that
    /// carried its latest enumerator snapshot.
    enumerator_at: BTreeMap<usize, usize>,
    /// Index (in the current run) of the last event that carried a snapshot.
    last_snapshot: Option<usize>,
}

/// Step 5 for every source vertex, in job-graph order.
fn reset_or_skip_sources<T: RecoveryTarget>(
    graph: &JobGraph,
    replayed: &mut Replayed<'_>,
    target: &mut T,
) -> Result<(), T::Error> {
    for v in 0..graph.vertices.len() {
        if graph.vertices[v].source.is_some() {
            let supports = target.supports_batch_snapshot(v);
            reset_or_skip_source(graph, replayed, v, supports, &mut |v, snapshot| {
                target.restore_enumerator(v, snapshot)
            })?;
        }
    }
    Ok(())
}

/// The finished executions left after steps 3 and 5 are kept (step 6 may
/// still reset some).
fn keep_finished(replayed: Replayed<'_>) -> RecoveryPlan {
    let Replayed {
        mut plan, finished, ..
    } = replayed;
    for ((v, s), f) in finished {
        plan.kept.insert(
            (v, s),
            RecoveredExecution {
                attempt: f.attempt,
                partitions: f.partitions,
            },
        );
    }
    plan
}

/// Steps 1 and 2: replays the current run's records into the latest
/// finished attempt per execution vertex (an `ExecutionsReset` removes the
/// entries it names), the initialized vertices in log order with their
/// recorded decisions, the latest enumerator snapshot per source vertex
/// and the shuffle-master snapshots from the last full one on. A record
/// lent from the log is copied from as needed; an owned one is taken apart
/// and dropped as it is folded.
fn replay<'a>(
    graph: &JobGraph,
    records: impl Iterator<Item = Cow<'a, JobEvent>>,
) -> Result<Replayed<'a>, RecoveryError> {
    let names = Names::new(graph);
    let mut fold = Fold::new();
    let mut count = 0;
    for (index, event) in records.enumerate() {
        count += 1;
        match event {
            Cow::Borrowed(JobEvent::ExecutionFinished(done)) => {
                fold.finished(graph, &names, index, Cow::Borrowed(done))?;
            }
            Cow::Owned(JobEvent::ExecutionFinished(done)) => {
                fold.finished(graph, &names, index, Cow::Owned(done))?;
            }
            other => match other.as_ref() {
                JobEvent::JobVertexInitialized(init) => fold.initialized(graph, &names, init)?,
                JobEvent::ExecutionsReset(reset) => {
                    for ev in &reset.executions {
                        fold.reset((names.vertex(&ev.job_vertex)?, ev.subtask));
                    }
                }
                JobEvent::ExecutionFinished(_)
                | JobEvent::JobStarted(_)
                | JobEvent::SinkCommitted(_)
                | JobEvent::RecoveryStarted(_)
                | JobEvent::RecoveryFinished(_)
                | JobEvent::LeaderElected(_)
                | JobEvent::JobFinished(_)
                | JobEvent::JobFailed(_)
                | JobEvent::JobCancelled(_)
                | JobEvent::StagesPlanned(_) => {}
            },
        }
    }
    fold.plan.replayed = count;
    Ok(fold.into_replayed())
}

/// Step 1's fold of the current run's records, one record at a time, into
/// what recovery keeps (issue 29: snapshots borrowed from the log, or
/// moved out of owned records, and folded once at the end, never copied
/// per record).
struct Fold<'a> {
    plan: RecoveryPlan,
    finished: BTreeMap<ExecutionKey, Finished>,
    enumerators: BTreeMap<usize, Snapshots<'a>>,
    shuffle_snapshots: Vec<Cow<'a, ShuffleSnapshot>>,
    last_snapshot: Option<usize>,
    inits: BTreeMap<usize, VertexInit>,
}

impl<'a> Fold<'a> {
    fn new() -> Self {
        Self {
            plan: RecoveryPlan::default(),
            finished: BTreeMap::new(),
            enumerators: BTreeMap::new(),
            shuffle_snapshots: Vec::new(),
            last_snapshot: None,
            inits: BTreeMap::new(),
        }
    }

    /// A `JobVertexInitialized`: the recorded decision is kept, never
    /// recomputed (the first one of a vertex counts).
    fn initialized(
        &mut self,
        graph: &JobGraph,
        names: &Names<'_>,
        init: &JobVertexInitialized,
    ) -> Result<(), RecoveryError> {
        let v = names.vertex(&init.job_vertex)?;
        let decided = vertex_init(graph, v, init)?;
        // Durable before any subtask deploys: attempt 0 may have run.
        for s in 0..decided.parallelism {
            self.plan.highest_attempt.raise((v, s), 0);
        }
        if self.inits.insert(v, decided.clone()).is_none() {
            self.plan.initialized.push((v, decided));
        }
        Ok(())
    }

    /// An `ExecutionFinished` (record `index` of the current run): the
    /// execution, its partitions and the batch snapshots it carries — lent
    /// from the log, or moved out of an owned record.
    fn finished(
        &mut self,
        graph: &JobGraph,
        names: &Names<'_>,
        index: usize,
        done: Cow<'a, ExecutionFinished>,
    ) -> Result<(), RecoveryError> {
        let v = names.vertex(&done.attempt.job_vertex)?;
        let s = done.attempt.subtask;
        let attempt = done.attempt.attempt;
        check_subtask(graph, &self.inits, v, s)?;
        // A recorded partition, its location and byte counts copied or moved.
        let partition = |data_set: &str, location: PathBuf, bytes: Vec<u64>| {
            Ok(ProducedPartition {
                edge: names.edge(v, data_set)?,
                location,
                bytes_per_subpartition: bytes.into(),
            })
        };
        let (partitions, enumerators, shuffle) = match done {
            Cow::Borrowed(done) => (
                done.produced
                    .iter()
                    .map(|p| {
                        let location = PathBuf::from(&p.location);
                        partition(&p.data_set, location, p.bytes_per_subpartition.clone())
                    })
                    .collect::<Result<Vec<_>, RecoveryError>>()?,
                done.enumerator_snapshots
                    .iter()
                    .map(Cow::Borrowed)
                    .collect(),
                done.shuffle_snapshot.as_ref().map(Cow::Borrowed),
            ),
            Cow::Owned(done) => (
                done.produced
                    .into_iter()
                    .map(|p| {
                        let location = PathBuf::from(p.location);
                        partition(&p.data_set, location, p.bytes_per_subpartition)
                    })
                    .collect::<Result<Vec<_>, RecoveryError>>()?,
                done.enumerator_snapshots
                    .into_iter()
                    .map(Cow::Owned)
                    .collect::<Vec<_>>(),
                done.shuffle_snapshot.map(Cow::Owned),
            ),
        };
        self.plan.highest_attempt.raise((v, s), attempt);
        self.finished.insert(
            (v, s),
            Finished {
                attempt,
                partitions,
                index,
            },
        );
        if !enumerators.is_empty() || shuffle.is_some() {
            self.last_snapshot = Some(index);
        }
        for snap in enumerators {
            self.enumerator_snapshot(names.vertex(&snap.job_vertex)?, index, snap)?;
        }
        if let Some(shuffle) = shuffle {
            if !shuffle.incremental {
                self.shuffle_snapshots.clear();
            }
            self.shuffle_snapshots.push(shuffle);
        }
        Ok(())
    }

    /// Source vertex `v`'s enumerator snapshot in record `index`: an
    /// incremental history extends the previous one (docs/log-format.md,
    /// "Incremental split-assignment history"), a whole one replaces it.
    fn enumerator_snapshot(
        &mut self,
        v: usize,
        index: usize,
        snap: Cow<'a, EnumeratorSnapshot>,
    ) -> Result<(), RecoveryError> {
        match self.enumerators.get_mut(&v) {
            Some(known) => {
                if snap.incremental {
                    known.since.push(snap);
                } else {
                    known.whole = snap;
                    known.since.clear();
                }
                known.at = index;
            }
            None if snap.incremental => {
                return Err(RecoveryError::Inconsistent {
                    reason: format!(
                        "the enumerator snapshot of `{}` holds only the splits assigned since an earlier one, and the log has none",
                        snap.job_vertex
                    ),
                });
            }
            None => {
                self.enumerators.insert(
                    v,
                    Snapshots {
                        whole: snap,
                        since: Vec::new(),
                        at: index,
                    },
                );
            }
        }
        Ok(())
    }

    /// Execution `key` was reset: it is no longer finished, and the reset
    /// made a new attempt, one above the current one (which is at most the
    /// highest so far). A failover reset is durable before that attempt
    /// deploys; a recovery's resets before `RecoveryFinished` is.
    fn reset(&mut self, key: ExecutionKey) {
        self.finished.remove(&key);
        self.plan.highest_attempt.bump(key);
    }

    fn into_replayed(self) -> Replayed<'a> {
        let mut plan = self.plan;
        plan.shuffle_snapshots = self.shuffle_snapshots.len();
        let enumerator_at = self
            .enumerators
            .iter()
            .map(|(&v, known)| (v, known.at))
            .collect();
        let enumerators = self
            .enumerators
            .into_iter()
            .map(|(v, known)| (v, known.folded()))
            .collect();
        Replayed {
            enumerator_at,
            plan,
            shuffle: self.shuffle_snapshots,
            finished: self.finished,
            enumerators,
            last_snapshot: self.last_snapshot,
        }
    }
}

/// Step 3: finished source attempts that their enumerator's latest
/// snapshot does not reflect run again (reason `no-snapshot`): the restored
/// enumerator does not know which splits they took. For a source whose log
/// holds no snapshot of its enumerator, the last event that carried any
/// snapshot decides here (a source that cannot snapshot is then kept or
/// restarted whole in step 5; one that can but whose state was never
/// recorded has every finished subtask reset in step 5, as a fresh
/// enumerator hands every split out again). A finished attempt of any other vertex
/// depends on no plugin's snapshot: what it produced is checked where it
/// is needed (step 6 asks the shuffle master for its partitions; a sink's
/// output is staged or published), so it is kept (issue 26 item 7: a
/// crash costs only what was running).
fn distrust_unsnapshotted(graph: &JobGraph, replayed: &mut Replayed<'_>) {
    let last = replayed.last_snapshot;
    let trailing: Vec<ExecutionKey> = replayed
        .finished
        .iter()
        .filter(|((v, _), f)| {
            if graph.vertices[*v].source.is_none() {
                return false;
            }
            let covered = replayed.enumerator_at.get(v).copied().or(last);
            covered.is_none_or(|at| f.index > at)
        })
        .map(|(k, _)| *k)
        .collect();
    for key in trailing {
        if let Some(f) = replayed.finished.remove(&key) {
            replayed
                .plan
                .release
                .extend(partition_refs(key, &f.attempt, &f.partitions));
        }
        replayed
            .plan
            .reset
            .insert(key, ResetReason::RecoveryNotInSnapshot);
    }
}

/// The job graph's names looked up without a scan per record: job vertex
/// ids, and per vertex the data sets of its outgoing edges.
struct Names<'g> {
    graph: &'g JobGraph,
    vertices: std::collections::HashMap<&'g str, usize>,
    /// Per vertex: (data set id, edge index) of each outgoing edge.
    outputs: Vec<Vec<(String, usize)>>,
}

impl<'g> Names<'g> {
    fn new(graph: &'g JobGraph) -> Self {
        Self {
            graph,
            // Reversed, so that the first vertex of an id wins, as a scan.
            vertices: graph
                .vertices
                .iter()
                .enumerate()
                .rev()
                .map(|(i, v)| (v.id.as_str(), i))
                .collect(),
            outputs: (0..graph.vertices.len())
                .map(|v| {
                    graph
                        .outputs(v)
                        .into_iter()
                        .map(|e| (graph.data_set_id(e), e))
                        .collect()
                })
                .collect(),
        }
    }

    /// The index of job vertex `id`.
    fn vertex(&self, id: &str) -> Result<usize, RecoveryError> {
        self.vertices
            .get(id)
            .copied()
            .ok_or_else(|| RecoveryError::UnknownVertex {
                vertex: id.to_string(),
            })
    }

    /// The outgoing edge of vertex `v` whose data set is `data_set`.
    fn edge(&self, v: usize, data_set: &str) -> Result<usize, RecoveryError> {
        self.outputs[v]
            .iter()
            .find(|(d, _)| d == data_set)
            .map(|&(_, e)| e)
            .ok_or_else(|| RecoveryError::UnknownDataSet {
                vertex: self.graph.vertices[v].id.clone(),
                data_set: data_set.to_string(),
            })
    }
}

fn check_subtask(
    graph: &JobGraph,
    inits: &BTreeMap<usize, VertexInit>,
    v: usize,
    s: u32,
) -> Result<(), RecoveryError> {
    match inits.get(&v) {
        Some(init) if s < init.parallelism => Ok(()),
        Some(init) => Err(RecoveryError::Inconsistent {
            reason: format!(
                "subtask {s} of `{}` finished, but its parallelism is {}",
                graph.vertices[v].id, init.parallelism
            ),
        }),
        None => Err(RecoveryError::Inconsistent {
            reason: format!(
                "subtask {s} of `{}` finished before the vertex was initialized",
                graph.vertices[v].id
            ),
        }),
    }
}

/// Turns a `JobVertexInitialized` record back into the scheduler's decision.
fn vertex_init(
    graph: &JobGraph,
    v: usize,
    init: &JobVertexInitialized,
) -> Result<VertexInit, RecoveryError> {
    if let crate::graph::Parallelism::Fixed(n) = graph.vertices[v].parallelism
        && n != init.parallelism
    {
        return Err(RecoveryError::Inconsistent {
            reason: format!(
                "`{}` has parallelism {n} in the job file but {} in the log",
                graph.vertices[v].id, init.parallelism
            ),
        });
    }
    // The recorded range of a hash input (all hash inputs of one consumer
    // read the same subpartitions); a forward input's `0..1` says nothing.
    let hash_slot = graph
        .inputs(v)
        .iter()
        .position(|&e| graph.edges[e].pattern == DistributionPattern::Hash);
    let input_ranges = init
        .subtask_inputs
        .iter()
        .map(|inputs| {
            hash_slot
                .and_then(|slot| inputs.get(slot))
                .map_or(0..0, |r| r.subpartition_start..r.subpartition_end)
        })
        .collect();
    Ok(VertexInit {
        parallelism: init.parallelism,
        input_ranges,
    })
}

/// Where a source vertex's split enumerator comes from (step 5).
enum Enumerator {
    /// Restored from its newest batch snapshot.
    Restored,
    /// It supports batch snapshots, but the log has none of it: a fresh one.
    NoSnapshotYet,
    /// A fresh one, because it cannot take batch snapshots, or because
    /// restoring it from its snapshot failed (`reason`, for the resets).
    Fresh {
        /// Why its subtasks reset when its vertex is unfinished.
        reason: ResetReason,
    },
}

/// Step 5 for one source vertex: the reset-or-skip table. `restore`
/// restores its enumerator from a snapshot ([`RecoveryTarget::restore_enumerator`]).
fn reset_or_skip_source<E: From<RecoveryError>>(
    graph: &JobGraph,
    replayed: &mut Replayed<'_>,
    v: usize,
    supports_snapshot: bool,
    restore: &mut dyn FnMut(usize, CoordinatorSnapshot) -> Result<bool, E>,
) -> Result<(), E> {
    let Replayed {
        plan,
        finished,
        enumerators,
        ..
    } = replayed;
    let Some(parallelism) = plan
        .initialized
        .iter()
        .find(|(iv, _)| *iv == v)
        .map(|(_, i)| i.parallelism)
    else {
        plan.coordinators.insert(v, EnumeratorStart::Fresh);
        return Ok(());
    };
    let all_finished = (0..parallelism).all(|s| finished.contains_key(&(v, s)));
    let enumerator = match enumerators.get(&v) {
        Some(snap) if supports_snapshot => {
            let decoded = coordinator_snapshot(graph, v, parallelism, snap)?;
            if restore(v, decoded)? {
                Enumerator::Restored
            } else {
                Enumerator::Fresh {
                    reason: ResetReason::RecoveryEnumeratorRestoreFailed,
                }
            }
        }
        None if supports_snapshot => Enumerator::NoSnapshotYet,
        _ => Enumerator::Fresh {
            reason: ResetReason::RecoveryEnumeratorWithoutSnapshot,
        },
    };
    match enumerator {
        Enumerator::Restored => {
            plan.coordinators.insert(v, EnumeratorStart::Restored);
            // Unfinished subtasks are reset explicitly by the scheduler
            // (their splits go back); `mark_unfinished` records why.
        }
        Enumerator::NoSnapshotYet => {
            plan.coordinators.insert(v, EnumeratorStart::Fresh);
            // A fresh enumerator hands every split out again, so no
            // finished subtask of this source may be kept. Step 3 keeps a
            // finish that an earlier snapshot of any plugin covers; here
            // the enumerator's own state was never recorded (deferred for
            // a rebuilt enumerator while the shuffle master's snapshot was
            // taken): kept, its splits were read twice (coordhost-sim
            // seed 281, docs/simulation.md).
            for s in 0..parallelism {
                if let Some(f) = finished.remove(&(v, s)) {
                    plan.release
                        .extend(partition_refs((v, s), &f.attempt, &f.partitions));
                    plan.reset
                        .insert((v, s), ResetReason::RecoveryNotInSnapshot);
                }
            }
        }
        Enumerator::Fresh { reason } if all_finished => {
            plan.coordinators.insert(v, EnumeratorStart::Fresh);
            plan.restart_all_once.insert(v, reason);
        }
        Enumerator::Fresh { reason } => {
            plan.coordinators.insert(v, EnumeratorStart::Fresh);
            // The whole region starts over: every subtask of the source
            // and everything downstream that read its old partitions
            // (`crate::plan::restart_source`), else a kept consumer would
            // hold splits the fresh enumerator hands out again.
            let initialized: BTreeMap<usize, u32> = plan
                .initialized
                .iter()
                .map(|(iv, init)| (*iv, init.parallelism))
                .collect();
            let live: BTreeSet<ExecutionKey> = finished.keys().copied().collect();
            let downstream = crate::plan::restart_source(
                graph,
                (v, 0),
                &reason,
                &|x| initialized.get(&x).copied().unwrap_or(0),
                &|k| live.contains(&k),
            );
            let own = (0..parallelism).map(|s| ((v, s), reason.clone()));
            let region = own.chain(downstream.into_iter().filter(|((x, _), _)| *x != v));
            for (key, why) in region {
                if let Some(f) = finished.remove(&key) {
                    plan.release
                        .extend(partition_refs(key, &f.attempt, &f.partitions));
                }
                plan.reset.insert(key, why);
            }
        }
    }
    Ok(())
}

/// Rebuilds the host's coordinator snapshot from the log's form
/// ([`crate::snapshot::decode`]).
fn coordinator_snapshot(
    graph: &JobGraph,
    v: usize,
    parallelism: u32,
    snap: &EnumeratorSnapshot,
) -> Result<CoordinatorSnapshot, RecoveryError> {
    let vertex = &graph.vertices[v].id;
    crate::snapshot::decode(vertex, parallelism, snap).map_err(|e| match e {
        SnapshotError::Split { vertex, reason } => RecoveryError::Split { vertex, reason },
        other => RecoveryError::Inconsistent {
            reason: other.to_string(),
        },
    })
}

fn partition_refs(
    key: ExecutionKey,
    attempt: &u32,
    partitions: &[ProducedPartition],
) -> Vec<PartitionRef> {
    partitions
        .iter()
        .map(|p| partition_ref(key, *attempt, p))
        .collect()
}

/// The reference to partition `p` of attempt `attempt` of `key`.
fn partition_ref(key: ExecutionKey, attempt: u32, p: &ProducedPartition) -> PartitionRef {
    PartitionRef {
        vertex: key.0,
        subtask: key.1,
        attempt,
        edge: p.edge,
        location: p.location.clone(),
        bytes_per_subpartition: p.bytes_per_subpartition.to_vec(),
    }
}

/// Whether the partition of producer subtask `s` on edge `e` will be read
/// again: the consumer is not initialized yet, or one of the subtasks that
/// read this partition is not kept. `open` holds, per consumer vertex,
/// whether any of its subtasks is not kept (computed once per round).
fn consumed_again(
    graph: &JobGraph,
    plan: &RecoveryPlan,
    open: &BTreeMap<usize, bool>,
    e: usize,
    s: u32,
) -> bool {
    let consumer = graph.edges[e].to;
    let Some(&any_open) = open.get(&consumer) else {
        return true;
    };
    match graph.edges[e].pattern {
        DistributionPattern::Forward => !plan.kept.contains_key(&(consumer, s)),
        DistributionPattern::Hash | DistributionPattern::Broadcast => any_open,
    }
}

/// Per initialized vertex: whether any of its subtasks is not kept.
fn open_vertices(plan: &RecoveryPlan) -> BTreeMap<usize, bool> {
    plan.initialized
        .iter()
        .map(|(v, init)| {
            (
                *v,
                (0..init.parallelism).any(|s| !plan.kept.contains_key(&(*v, s))),
            )
        })
        .collect()
}

/// Step 6: keep a producer only if every partition a re-running consumer
/// needs is still there; reset what lost one, and follow the resets upstream.
fn reconcile_partitions(
    graph: &JobGraph,
    plan: &mut RecoveryPlan,
    oracle: &mut impl PartitionOracle,
) -> Result<(), RecoveryError> {
    // Partitions already reported, by producer attempt and edge (a kept
    // attempt's partitions never change; issue 29: no copy of each
    // reference kept for the look-up).
    let mut confirmed: BTreeSet<(ExecutionKey, u32, usize)> = BTreeSet::new();
    loop {
        let open = open_vertices(plan);
        // References are made only for what is asked about.
        let (known, now): (&BTreeSet<_>, &RecoveryPlan) = (&confirmed, plan);
        let needed: Vec<PartitionRef> = now
            .kept
            .iter()
            .flat_map(|(&key, exec)| {
                let open = &open;
                exec.partitions
                    .iter()
                    .filter(move |p| {
                        !known.contains(&(key, exec.attempt, p.edge))
                            && consumed_again(graph, now, open, p.edge, key.1)
                    })
                    .map(move |p| partition_ref(key, exec.attempt, p))
            })
            .collect();
        if needed.is_empty() {
            return Ok(());
        }
        let available = oracle
            .available(&needed)
            .map_err(|source| RecoveryError::Partitions { source })?;
        if available.len() != needed.len() {
            return Err(RecoveryError::Partitions {
                source: format!(
                    "{} answers for {} partitions asked about",
                    available.len(),
                    needed.len()
                )
                .into(),
            });
        }
        let mut lost: Vec<(ExecutionKey, String)> = Vec::new();
        let mut reported = Vec::new();
        for (p, there) in needed.into_iter().zip(available) {
            if there {
                reported.push(((p.vertex, p.subtask), p.attempt, p.edge));
            } else {
                lost.push(((p.vertex, p.subtask), graph.data_set_id(p.edge)));
            }
        }
        if lost.is_empty() {
            // Nothing reset: the next round would need exactly what was
            // just confirmed, so none.
            return Ok(());
        }
        confirmed.extend(reported);
        for (key, data_set) in lost {
            reset_kept(
                graph,
                plan,
                key,
                ResetReason::RecoveryPartitionMissing { data_set },
            );
        }
        reset_forward_readers_of_sources(graph, plan);
    }
}

/// A source subtask that runs again may read other splits than it read
/// before: its enumerator hands the splits of every re-running subtask out
/// anew, to whichever asks first. An execution that read its output through
/// a forward edge (subtask for subtask) holds records of splits the source
/// subtask may not read again, and another subtask may read them a second
/// time: it runs again too, with the source subtask's reason, and so on
/// along forward edges, through readers reset for another reason as well.
/// (Through a hash edge every consumer read its share of every producer's
/// records: the re-running source subtasks together read the same splits
/// as before, so a kept hash consumer stays right.) Found by the simulator
/// (docs/simulation.md).
fn reset_forward_readers_of_sources(graph: &JobGraph, plan: &mut RecoveryPlan) {
    let mut stack: Vec<(ExecutionKey, ResetReason)> = plan
        .reset
        .iter()
        .filter(|((v, _), _)| graph.vertices[*v].source.is_some())
        .map(|(&key, reason)| (key, reason.clone()))
        .collect();
    while let Some(((v, s), reason)) = stack.pop() {
        for e in graph.outputs(v) {
            if graph.edges[e].pattern != DistributionPattern::Forward {
                continue;
            }
            let key = (graph.edges[e].to, s);
            if let Some(exec) = plan.kept.remove(&key) {
                plan.release
                    .extend(partition_refs(key, &exec.attempt, &exec.partitions));
                plan.reset.insert(key, reason.clone());
            }
            // On through a reader reset for another reason too (its
            // partition lost, say): its re-run reads the source's new
            // records, so what read its old output holds old ones.
            stack.push((key, reason.clone()));
        }
    }
}

/// Resets a kept execution, with what the "restart all, once" policy
/// ([`crate::plan::restart_all_once`]) adds when it is the first reset of
/// a finished source whose enumerator cannot snapshot.
fn reset_kept(graph: &JobGraph, plan: &mut RecoveryPlan, key: ExecutionKey, reason: ResetReason) {
    let mut keys: Vec<(ExecutionKey, ResetReason)> = vec![(key, reason)];
    // Read in place (issue 29: a copy of every kept key per lost partition
    // made losing all of 500 000 partitions quadratic).
    let RecoveryPlan {
        initialized,
        kept,
        restart_all_once,
        ..
    } = &mut *plan;
    keys.extend(crate::plan::restart_all_once(
        graph,
        restart_all_once,
        key,
        &|v| {
            initialized
                .iter()
                .find(|(iv, _)| *iv == v)
                .map_or(0, |(_, init)| init.parallelism)
        },
        &|k| kept.contains_key(&k),
    ));
    for (k, why) in keys {
        if let Some(exec) = plan.kept.remove(&k) {
            plan.release
                .extend(partition_refs(k, &exec.attempt, &exec.partitions));
            plan.reset.insert(k, why);
        }
    }
}

/// Records "unfinished" for every initialized subtask neither kept nor
/// already reset for another reason.
fn mark_unfinished(plan: &mut RecoveryPlan) {
    let inits: Vec<(usize, u32)> = plan
        .initialized
        .iter()
        .map(|(v, i)| (*v, i.parallelism))
        .collect();
    for (v, parallelism) in inits {
        for s in 0..parallelism {
            if !plan.kept.contains_key(&(v, s)) {
                plan.reset
                    .entry((v, s))
                    .or_insert(ResetReason::RecoveryUnfinished);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::Parallelism;
    use crate::test_jobs::source_to_sink;

    /// Answers from a list of missing locations, recording each call's size.
    struct Oracle {
        missing: Vec<&'static str>,
        calls: Vec<usize>,
    }

    impl PartitionOracle for Oracle {
        fn available(&mut self, needed: &[PartitionRef]) -> Result<Vec<bool>, OracleError> {
            self.calls.push(needed.len());
            Ok(needed
                .iter()
                .map(|p| !self.missing.iter().any(|m| p.location.ends_with(m)))
                .collect())
        }
    }

    /// Five finished source subtasks kept, each with one partition
    /// `/p/<subtask>`, their consumer not initialized yet.
    fn five_sources_kept() -> (JobGraph, RecoveryPlan) {
        let mut graph = source_to_sink(Parallelism::Fixed(1));
        graph.vertices[0].parallelism = Parallelism::Fixed(5);
        graph.vertices[0].max_parallelism = 8;
        let mut plan = RecoveryPlan::default();
        plan.initialized.push((
            0,
            VertexInit {
                parallelism: 5,
                input_ranges: Vec::new(),
            },
        ));
        for s in 0..5 {
            plan.kept.insert(
                (0, s),
                RecoveredExecution {
                    attempt: 0,
                    partitions: vec![ProducedPartition {
                        edge: 0,
                        location: PathBuf::from(format!("/p/{s}")),
                        bytes_per_subpartition: vec![1].into(),
                    }],
                },
            );
        }
        (graph, plan)
    }

    #[test]
    fn the_partition_question_is_one_call_per_round_and_resets_what_lost_a_partition() {
        for missing in [vec![], vec!["4"], vec!["1", "2"]] {
            let (graph, mut plan) = five_sources_kept();
            let mut oracle = Oracle {
                missing: missing.clone(),
                calls: Vec::new(),
            };
            reconcile_partitions(&graph, &mut plan, &mut oracle).expect("decides");
            assert_eq!(oracle.calls, vec![5], "{missing:?}");
            assert_eq!(plan.kept.len(), 5 - missing.len(), "{missing:?}");
            for m in &missing {
                let s: u32 = m.parse().expect("subtask");
                assert!(
                    matches!(
                        plan.reset.get(&(0, s)),
                        Some(ResetReason::RecoveryPartitionMissing { .. })
                    ),
                    "{plan:?}"
                );
            }
        }
    }

    #[test]
    fn an_oracle_that_answers_for_fewer_partitions_than_asked_is_an_error() {
        struct Short;
        impl PartitionOracle for Short {
            fn available(&mut self, needed: &[PartitionRef]) -> Result<Vec<bool>, OracleError> {
                Ok(vec![true; needed.len() - 1])
            }
        }
        let (graph, mut plan) = five_sources_kept();
        let err = reconcile_partitions(&graph, &mut plan, &mut Short)
            .expect_err("four answers for five partitions");
        assert!(
            err.to_string().contains("4 answers for 5 partitions"),
            "{err}"
        );
    }
}
