//! The JobMaster's decisions as one state machine (issue 28 item 2): the
//! execution bookkeeping ([`Scheduling`]), where attempts go
//! ([`Placement`]) and when batch snapshots are taken ([`SnapshotPolicy`]),
//! driven by two entries, as raft-rs drives its `RawNode`:
//!
//! - [`JobMasterCore::step`] takes one input (an attempt finished, failed,
//!   had its `Deploy` refused, or a worker was lost with partitions) and the
//!   time it happened;
//! - [`JobMasterCore::tick`] takes the time alone (an execution vertex that
//!   waits for a worker is offered again, or has waited too long).
//!
//! Both return [`Action`]s that the driver carries out in the order given:
//! record this, deploy that, tell the user, fail the job. Nothing here does
//! I/O or reads a clock: the binary's JobMaster (threads or worker
//! processes, a real clock) and the simulator (`tests/sim`: virtual workers,
//! a virtual clock) are two drivers of the same decisions, so a schedule
//! the simulator finds is one the binary takes.
//!
//! What stays with the driver is what asks a plugin or the disk: whether a
//! source attempt read all its splits, publishing a sink's output, taking
//! the snapshots a [`Action::RecordFinished`] names (the driver reports a
//! refused or deferred one to [`JobMasterCore::snapshots`]), and appending
//! the records.

use std::collections::BTreeSet;
use std::time::Duration;

use coordhost_model::graph::{AttemptId, ExecutionGraph, ProducedPartition};

use crate::events::ResetReason;
use crate::executor::WorkerId;
use crate::failover::{FailoverAction, FailureCause};
use crate::placement::Placement;
use crate::scheduling::{Effect, Scheduling};
use crate::snapshot_policy::SnapshotPolicy;

/// What the JobMaster learns about its attempts and workers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// `attempt` finished with `partitions`, and the driver's checks of it
    /// passed (a source read every split it was handed; a sink's output is
    /// published). A report of an attempt that is no longer current is
    /// ignored.
    Finished {
        /// The attempt.
        attempt: AttemptId,
        /// The result partitions it wrote.
        partitions: Vec<ProducedPartition>,
    },
    /// `attempt` failed with `cause`; `reason` is recorded if it runs again.
    Failed {
        /// The attempt.
        attempt: AttemptId,
        /// What its error says about the fault.
        cause: FailureCause,
        /// Why it is reset, as recorded (`ExecutionsReset`).
        reason: ResetReason,
    },
    /// The `Deploy` of `attempt` to `worker` failed (refused, no answer in
    /// time, the worker gone), `why` in words. It was not placed, so it is
    /// not a failed attempt of `max-attempts`; it may have started and
    /// pulled splits all the same, so it is reset and runs again, on
    /// another worker if one is alive, else on the same after a pause.
    DeployRefused {
        /// The attempt.
        attempt: AttemptId,
        /// The worker it was sent to.
        worker: WorkerId,
        /// Why, in words (`worker \`w1\` refused …`).
        why: String,
    },
    /// A worker was lost with the partitions of the finished attempts
    /// `held` (only those whose partitions were on it: a partition on
    /// object storage outlives its worker). Each one still current whose
    /// output a consumer has yet to read runs again with `reason`.
    WorkerLost {
        /// The finished attempts whose partitions were on the worker.
        held: Vec<AttemptId>,
        /// Why they are reset, as recorded.
        reason: ResetReason,
    },
}

/// What the driver does, in the order given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// A decision of the execution bookkeeping ([`Effect`]): record an
    /// initialization or a reset, start or drop an enumerator, deploy.
    Schedule(Effect),
    /// Record `ExecutionFinished` of `attempt` with `partitions`, carrying
    /// a batch snapshot of the shuffle master and of the enumerators of
    /// `snapshot_of` when it is `Some` (FLIP-383 "recording"). The graph
    /// already holds the finish; nothing is acted on for it (its
    /// consumers scheduled) before the record is durable: the driver
    /// schedules after its group of finishes is.
    RecordFinished {
        /// The attempt.
        attempt: AttemptId,
        /// What it produced.
        partitions: Vec<ProducedPartition>,
        /// The source vertices whose enumerators a batch snapshot takes,
        /// when one is due.
        snapshot_of: Option<BTreeSet<usize>>,
        /// Subtasks of its job vertex finished now, of how many.
        done: (u32, u32),
    },
    /// Tell the user that `attempt` (on `worker`, if one) failed; `last`:
    /// it was its execution vertex's last attempt (the job fails on it).
    AttemptFailed {
        /// The attempt.
        attempt: AttemptId,
        /// The worker it ran on.
        worker: Option<WorkerId>,
        /// Failed for good.
        last: bool,
    },
    /// The job fails; nothing follows this action.
    FailJob(JobFailure),
}

/// Why the JobMaster fails a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobFailure {
    /// `attempt` read invalid data: another attempt would read the same
    /// bytes (`FailureCause::permanent`).
    InvalidData {
        /// The attempt.
        attempt: AttemptId,
    },
    /// `used` (the failed attempt, or the producer whose partition it lost)
    /// used its last of `max_attempts`.
    Exhausted {
        /// The attempt that used the last one.
        used: AttemptId,
        /// `job.max-attempts`.
        max_attempts: u32,
    },
    /// Execution vertex (`vertex`, `subtask`) waited longer than `waited`
    /// (`job.slot-request-timeout-ms`, Flink's `slot.request.timeout`) for
    /// a worker, because `why`.
    NoWorker {
        /// The job vertex index.
        vertex: usize,
        /// The subtask.
        subtask: u32,
        /// The slot request timeout.
        waited: Duration,
        /// Why it waited.
        why: String,
    },
}

/// The JobMaster's decision state: three parts of one concern each.
#[derive(Debug)]
pub struct JobMasterCore {
    /// The execution graph and what happens to it.
    pub sched: Scheduling,
    /// Which worker each attempt goes to, and who waits for one.
    pub placement: Placement,
    /// When batch snapshots are taken.
    pub snapshots: SnapshotPolicy,
}

impl JobMasterCore {
    /// The decision state of a run that has not started: `graph` with
    /// `max_attempts` per execution vertex, a slot request timeout, and the
    /// snapshot policy.
    pub fn new(
        graph: ExecutionGraph,
        max_attempts: u32,
        slot_request_timeout: Duration,
        snapshots: SnapshotPolicy,
    ) -> Self {
        Self {
            sched: Scheduling::new(graph, max_attempts),
            placement: Placement::new(slot_request_timeout),
            snapshots,
        }
    }

    /// The execution graph.
    pub fn graph(&self) -> &ExecutionGraph {
        &self.sched.graph
    }

    /// Whether `attempt` is the running current attempt of its execution
    /// vertex (a report of any other is stale).
    pub fn is_current(&self, attempt: AttemptId) -> bool {
        self.sched.is_current(attempt)
    }

    /// What can go ahead now ([`Scheduling::schedule`]): initializations,
    /// enumerators, deployments.
    pub fn schedule(&mut self) -> Vec<Action> {
        self.sched
            .schedule()
            .into_iter()
            .map(Action::Schedule)
            .collect()
    }

    /// Takes `input`, which happened at `now` (a [`crate::clock::Clock`]
    /// reading), and returns what follows. After a failure, a refused
    /// `Deploy` or a lost worker, what can go ahead then is scheduled too;
    /// after a finish it is not (the driver calls
    /// [`JobMasterCore::schedule`] once the finish is durable).
    pub fn step(&mut self, now: Duration, input: Input) -> Vec<Action> {
        match input {
            Input::Finished {
                attempt,
                partitions,
            } => self.finished(now, attempt, partitions),
            Input::Failed {
                attempt,
                cause,
                reason,
            } => self.failed(attempt, cause, reason),
            Input::DeployRefused {
                attempt,
                worker,
                why,
            } => self.deploy_refused(now, attempt, worker, why),
            Input::WorkerLost { held, reason } => {
                let resets = self.sched.worker_lost(&held, &|_| false, &reason);
                self.then_schedule(resets)
            }
        }
    }

    /// Time passed to `now` with no input: the job fails if an execution
    /// vertex waited for a worker past the slot request timeout; else the
    /// vertices that wait (for a worker, or out a refused `Deploy`'s
    /// pause) are offered again.
    pub fn tick(&mut self, now: Duration) -> Vec<Action> {
        if let Some(failure) = self.overdue(now) {
            return vec![Action::FailJob(failure)];
        }
        if self.placement.is_waiting() {
            self.schedule()
        } else {
            Vec::new()
        }
    }

    /// The failure of an execution vertex that has waited for a worker
    /// past the slot request timeout at `now`, if one has.
    pub fn overdue(&self, now: Duration) -> Option<JobFailure> {
        self.placement
            .overdue(now)
            .map(|((vertex, subtask), why)| JobFailure::NoWorker {
                vertex,
                subtask,
                waited: self.placement.slot_request_timeout(),
                why: why.to_owned(),
            })
    }

    fn finished(
        &mut self,
        now: Duration,
        attempt: AttemptId,
        partitions: Vec<ProducedPartition>,
    ) -> Vec<Action> {
        if !self.sched.is_current(attempt) {
            return Vec::new();
        }
        let v = attempt.vertex;
        // Whether this finish carries a batch snapshot whatever the pause:
        // `SnapshotPolicy::begin_for_finish` says why.
        let completes = self.sched.completes(attempt);
        let source = self.sched.graph.job.vertices[v].source.is_some();
        let snapshot_of =
            self.snapshots
                .begin_for_finish(now, v, source, completes, !partitions.is_empty());
        self.placement.finished(attempt);
        let done = self.sched.finished(attempt, partitions.clone());
        vec![Action::RecordFinished {
            attempt,
            partitions,
            snapshot_of,
            done,
        }]
    }

    fn failed(
        &mut self,
        attempt: AttemptId,
        cause: FailureCause,
        reason: ResetReason,
    ) -> Vec<Action> {
        let current = self.sched.is_current(attempt);
        // Its next attempt prefers another worker (a full disk, say, fails
        // every attempt sent back there).
        let worker = self.placement.failed(attempt, current);
        if !current {
            return Vec::new();
        }
        let (decision, resets) = self.sched.failed(attempt, cause, reason);
        let told = Action::AttemptFailed {
            attempt,
            worker,
            last: decision.last,
        };
        match decision.action {
            FailoverAction::FailInvalidData => {
                vec![told, Action::FailJob(JobFailure::InvalidData { attempt })]
            }
            FailoverAction::FailExhausted(used) => vec![
                told,
                Action::FailJob(JobFailure::Exhausted {
                    used,
                    max_attempts: self.sched.max_attempts(),
                }),
            ],
            FailoverAction::Reset { .. } => {
                let mut out = vec![told];
                out.extend(self.then_schedule(resets));
                out
            }
        }
    }

    fn deploy_refused(
        &mut self,
        now: Duration,
        attempt: AttemptId,
        worker: WorkerId,
        why: String,
    ) -> Vec<Action> {
        if !self.sched.is_current(attempt) {
            self.placement.forget(attempt);
            return Vec::new();
        }
        let reason = ResetReason::Failover {
            message: format!("not placed: {why}"),
        };
        self.placement.deploy_failed(attempt, worker, why, now);
        let resets = self.sched.deploy_failed(attempt, reason);
        self.then_schedule(resets)
    }

    /// `effects`, then what can go ahead after them.
    fn then_schedule(&mut self, effects: Vec<Effect>) -> Vec<Action> {
        let mut out: Vec<Action> = effects.into_iter().map(Action::Schedule).collect();
        out.extend(self.schedule());
        out
    }
}

#[cfg(test)]
mod tests;
