//! The recovery plan (FLIP-383): the decision a recovery hands to the
//! scheduler, as plain values — which execution vertices are kept (with
//! their attempt and result partitions), which run again and why, what each
//! source coordinator and the shuffle master are restored from.
//!
//! It sits below both `recovery/` (which computes it from the replayed log,
//! docs/recovery.md steps 1–6) and `scheduler/` (which installs it, step 7),
//! so that neither imports the other (docs/architecture.md). The one policy
//! both apply, "restart all, once" ([`restart_all_once`]), lives here too.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::events::{ExecutionVertexId, RecoveryDecision as _, ResetReason};
use crate::graph::{JobGraph, ProducedPartition, VertexInit};

/// Why a `PartitionOracle` (`crate::recovery`) could not answer (in a run,
/// the plugin host's `PluginError` of the shuffle master), kept as the
/// error it was.
pub type OracleError = Box<dyn std::error::Error + Send + Sync>;

/// An execution vertex: (job vertex index in the job graph, subtask index).
pub type ExecutionKey = (usize, u32);

/// Why recovery cannot use the log; the job then restarts from scratch (or
/// stops, when committed sink output would be duplicated).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecoveryError {
    /// The log names a job vertex the job graph does not have.
    #[error("the event log names job vertex `{vertex}`, which the job file does not have")]
    UnknownVertex {
        /// The vertex id in the log.
        vertex: String,
    },
    /// The log names an intermediate data set the job graph does not have.
    #[error(
        "the event log names data set `{data_set}` of job vertex `{vertex}`, which the job graph does not have"
    )]
    UnknownDataSet {
        /// The producing vertex.
        vertex: String,
        /// The data set id in the log.
        data_set: String,
    },
    /// A record does not fit the graph (a subtask beyond the parallelism, a
    /// parallelism that contradicts the job file).
    #[error("the event log does not fit the job graph: {reason}")]
    Inconsistent {
        /// What does not fit.
        reason: String,
    },
    /// A split in an enumerator snapshot cannot be decoded.
    #[error(
        "job vertex `{vertex}`: a split in the enumerator snapshot cannot be decoded: {reason}"
    )]
    Split {
        /// The source vertex.
        vertex: String,
        /// The decoder's message.
        reason: String,
    },
    /// Asking which partitions still exist failed.
    #[error("asking the shuffle master which partitions exist failed: {source}")]
    Partitions {
        /// The shuffle master's error (in a run, the plugin host's `PluginError`).
        source: OracleError,
    },
}

/// A finished execution that recovery keeps: its attempt and partitions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoveredExecution {
    /// The attempt number, unchanged.
    pub attempt: u32,
    /// Its result partitions, one per outgoing edge.
    pub partitions: Vec<ProducedPartition>,
}

/// One result partition a kept producer made: what the partition oracle
/// is asked about.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct PartitionRef {
    /// Producer job vertex index.
    pub vertex: usize,
    /// Producer subtask.
    pub subtask: u32,
    /// Producer attempt.
    pub attempt: u32,
    /// Edge index of the data set.
    pub edge: usize,
    /// Where its data is.
    pub location: PathBuf,
    /// The bytes of each subpartition recorded in the log; a report of
    /// other sizes means the data changed (docs/recovery.md, "What counts
    /// as a surviving partition").
    pub bytes_per_subpartition: Vec<u64>,
}

/// How a source vertex's split enumerator runs after a recovery (step 5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnumeratorStart {
    /// Restored from its batch snapshot by the recovery target, which owns
    /// the restored source coordinator.
    Restored,
    /// A fresh enumerator, started when the vertex is scheduled.
    Fresh,
}

/// The highest attempt number recorded per execution vertex
/// ([`RecoveryPlan::highest_attempt`]), per job vertex one number per
/// subtask (issue 29: four bytes an execution vertex, where a map entry
/// per execution vertex took forty).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HighestAttempts {
    /// Per job vertex, per subtask: the highest attempt number plus one, or
    /// 0 when none is recorded.
    next: BTreeMap<usize, Vec<u32>>,
    /// The same for subtasks at or past [`HighestAttempts::DENSE`], which no
    /// job vertex has (a record naming one is checked elsewhere, or
    /// harmless): one entry each, so such a record costs no vector of its
    /// size.
    far: BTreeMap<ExecutionKey, u32>,
}

impl HighestAttempts {
    /// Subtasks below this are kept one number each per job vertex (a job
    /// vertex has at most 4 096 subtasks, docs/job-file.md).
    const DENSE: u32 = 1 << 16;

    fn slot(&mut self, (v, s): ExecutionKey) -> &mut u32 {
        if s >= Self::DENSE {
            return self.far.entry((v, s)).or_default();
        }
        let subtasks = self.next.entry(v).or_default();
        if subtasks.len() <= s as usize {
            subtasks.resize(s as usize + 1, 0);
        }
        &mut subtasks[s as usize]
    }

    /// Attempt `attempt` of `key` may have run: the highest is at least it.
    pub fn raise(&mut self, key: ExecutionKey, attempt: u32) {
        let next = self.slot(key);
        *next = (*next).max(attempt.saturating_add(1));
    }

    /// `key` was reset: its next attempt, one above the highest so far (0
    /// when none is recorded), may have run.
    pub fn bump(&mut self, key: ExecutionKey) {
        let next = self.slot(key);
        *next = (*next).max(1).saturating_add(1);
    }

    /// The attempt number above every recorded one of `key` (0 when none
    /// is recorded).
    pub fn next(&self, (v, s): ExecutionKey) -> u32 {
        if s >= Self::DENSE {
            return self.far.get(&(v, s)).copied().unwrap_or(0);
        }
        self.next
            .get(&v)
            .and_then(|subtasks| subtasks.get(s as usize))
            .copied()
            .unwrap_or(0)
    }
}

/// The decision of a recovery.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryPlan {
    /// Vertices whose parallelism was decided, in log order, with their
    /// recorded decision (never recomputed).
    pub initialized: Vec<(usize, VertexInit)>,
    /// Finished executions that are skipped.
    pub kept: BTreeMap<ExecutionKey, RecoveredExecution>,
    /// Executions that run again and why (one entry each).
    pub reset: BTreeMap<ExecutionKey, ResetReason>,
    /// Per source vertex, how its split enumerator starts: restored from
    /// its batch snapshot in step 5 (the target took the decoded snapshot,
    /// [`crate::recovery::RecoveryTarget::restore_enumerator`]: the plan
    /// keeps no second copy of its split history, issue 29) or fresh.
    pub coordinators: BTreeMap<usize, EnumeratorStart>,
    /// How many shuffle-master snapshots were restored (from the last full
    /// one on); the snapshots are lent from the log to the shuffle master,
    /// not copied into the plan (issue 29).
    pub shuffle_snapshots: usize,
    /// Finished source vertices whose enumerator cannot snapshot (or could
    /// not be restored from its snapshot), each with the reason its other
    /// subtasks get (`enumerator-cannot-snapshot`,
    /// `enumerator-restore-failed`): the first later restart of any of
    /// their subtasks restarts all of them, once.
    pub restart_all_once: BTreeMap<usize, ResetReason>,
    /// Partitions of finished attempts that run again: to release.
    pub release: Vec<PartitionRef>,
    /// For every execution vertex seen in the log, the highest attempt
    /// number any coordinator run may have deployed (issue 12.2): 0 once its
    /// vertex is initialized, each recorded finish, and one more per
    /// recorded reset (a reset makes the next attempt, which may have run
    /// and written partitions before a crash). A re-run uses a higher one,
    /// so an attempt number is never used twice for one execution vertex.
    pub highest_attempt: HighestAttempts,
    /// Events replayed.
    pub replayed: usize,
}

impl RecoveryPlan {
    /// The attempt number a re-run of `key` uses: above every recorded one.
    pub fn next_attempt(&self, key: ExecutionKey) -> u32 {
        self.highest_attempt.next(key)
    }

    /// The decision as the `RecoveryFinished` event records it (docs/recovery.md step 7).
    pub fn finished_event(&self, graph: &JobGraph) -> crate::events::RecoveryFinished {
        let decision = self.decision(graph);
        crate::events::RecoveryFinished {
            skipped: decision
                .skipped()
                .map(|(job_vertex, subtask, attempt)| crate::events::AttemptId {
                    job_vertex: job_vertex.to_owned(),
                    subtask,
                    attempt,
                })
                .collect(),
            reset: decision
                .reset()
                .map(
                    |(job_vertex, subtask, reason)| crate::events::RecoveryReset {
                        execution: crate::events::ExecutionVertexId {
                            job_vertex: job_vertex.to_owned(),
                            subtask,
                        },
                        reason: reason.clone(),
                    },
                )
                .collect(),
        }
    }

    /// The decision over `graph`, read in place: what
    /// [`finished_event`](Self::finished_event) builds, for
    /// [`crate::events::encode_recovery_finished`] to encode without
    /// building it (issue 29).
    pub fn decision<'a>(&'a self, graph: &'a JobGraph) -> PlanDecision<'a> {
        PlanDecision { plan: self, graph }
    }
}

/// A [`RecoveryPlan`]'s decision over its job graph, as the
/// `RecoveryFinished` record holds it ([`RecoveryPlan::decision`]).
#[derive(Clone, Copy)]
pub struct PlanDecision<'a> {
    plan: &'a RecoveryPlan,
    graph: &'a JobGraph,
}

impl crate::events::RecoveryDecision for PlanDecision<'_> {
    fn skipped(&self) -> impl ExactSizeIterator<Item = (&str, u32, u32)> {
        let graph = self.graph;
        self.plan
            .kept
            .iter()
            .map(move |(&(v, s), e)| (graph.vertices[v].id.as_str(), s, e.attempt))
    }

    fn reset(&self) -> impl ExactSizeIterator<Item = (&str, u32, &ResetReason)> {
        let graph = self.graph;
        self.plan
            .reset
            .iter()
            .map(move |(&(v, s), reason)| (graph.vertices[v].id.as_str(), s, reason))
    }
}

/// FLIP-383 "restart all, once": a finished source vertex whose split
/// enumerator cannot take batch snapshots (or could not be restored from
/// one) is kept by a recovery, but the first later reset of any of its
/// subtasks restarts all of them with a fresh enumerator — and, because a
/// fresh enumerator may hand the splits to other subtasks than before,
/// everything downstream that read (or is reading) the old partitions runs
/// again too, as Flink restarts a whole region ([`restart_source`]). The
/// one copy of this policy: recovery applies it while it reconciles
/// partitions (docs/recovery.md step 6), the scheduler on an in-run reset
/// (`scheduler/master/failover.rs`).
///
/// Returns the resets that come with resetting execution vertex `key`:
/// [`restart_source`] with the reason `pending` holds for its vertex
/// (`enumerator-cannot-snapshot` or `enumerator-restore-failed`) for the
/// other subtasks of the vertex. Empty, and nothing changes, unless `key`'s
/// vertex is in `pending`, from which it is removed: the restart happens once.
pub fn restart_all_once(
    graph: &JobGraph,
    pending: &mut BTreeMap<usize, ResetReason>,
    key: ExecutionKey,
    parallelism: &dyn Fn(usize) -> u32,
    live: &dyn Fn(ExecutionKey) -> bool,
) -> Vec<(ExecutionKey, ResetReason)> {
    let Some(sibling) = pending.remove(&key.0) else {
        return Vec::new();
    };
    restart_source(graph, key, &sibling, parallelism, live)
}

/// The region of a source vertex that starts over with a fresh split
/// enumerator because execution vertex `key` of it is reset: every other
/// live subtask of the source (reason `sibling`), then every live
/// execution of every vertex downstream of it (reason `upstream-reset`,
/// naming `key`), in vertex then subtask order; `key` itself is not among
/// them. A fresh enumerator may hand the splits to other subtasks than the
/// old one did, so nothing that read the old partitions may be kept: a
/// downstream sink subtask that already published runs again and its part
/// file is replaced (docs/recovery.md, "Sink output when a region runs
/// again"). `live` says which executions hold output or are running;
/// `parallelism` gives a vertex's subtask count (0: not initialized).
pub fn restart_source(
    graph: &JobGraph,
    key: ExecutionKey,
    sibling: &ResetReason,
    parallelism: &dyn Fn(usize) -> u32,
    live: &dyn Fn(ExecutionKey) -> bool,
) -> Vec<(ExecutionKey, ResetReason)> {
    let (v, subtask) = key;
    let mut resets: Vec<(ExecutionKey, ResetReason)> = (0..parallelism(v))
        .filter(|&s| s != subtask && live((v, s)))
        .map(|s| ((v, s), sibling.clone()))
        .collect();
    let upstream = ExecutionVertexId {
        job_vertex: graph.vertices[v].id.clone(),
        subtask,
    };
    for d in graph.downstream(v) {
        for s in (0..parallelism(d)).filter(|&s| live((d, s))) {
            resets.push((
                (d, s),
                ResetReason::RecoveryUpstreamReset {
                    upstream: upstream.clone(),
                },
            ));
        }
    }
    resets
}

#[cfg(test)]
mod highest_attempts_tests {
    use super::HighestAttempts;

    #[test]
    fn the_next_attempt_is_above_every_recorded_one_and_each_reset_adds_one() {
        let mut h = HighestAttempts::default();
        assert_eq!(h.next((0, 3)), 0, "nothing recorded");
        h.raise((0, 3), 0);
        assert_eq!(h.next((0, 3)), 1, "attempt 0 may have run");
        assert_eq!(h.next((0, 2)), 0, "a subtask below it stays unrecorded");
        h.raise((0, 3), 4);
        h.raise((0, 3), 2);
        assert_eq!(h.next((0, 3)), 5);
        h.bump((0, 3));
        assert_eq!(h.next((0, 3)), 6, "the reset's attempt 5 may have run");
        h.bump((1, 0));
        assert_eq!(
            h.next((1, 0)),
            2,
            "a reset with nothing before: attempt 1 may have run"
        );
        // A subtask no job vertex has (a damaged record) costs one entry.
        h.bump((1, u32::MAX - 1));
        assert_eq!(h.next((1, u32::MAX - 1)), 2);
        assert_eq!(h.next((1, 1)), 0);
    }
}
