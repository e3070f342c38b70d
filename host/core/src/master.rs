//! The JobMaster's decisions as one state machine (issue 28 item 2): the
//! execution bookkeeping ([`Scheduling`]), where attempts go
//! ([`Placement`]) and when batch snapshots are taken ([`SnapshotPolicy`]),
//! driven by two entries, as raft-rs drives its `RawNode`:
//!
//! - [`JobMasterCore::step`] takes one input (an attempt finished, its
//!   finish was recorded, it failed, had its `Deploy` refused, or a worker
//!   was lost with partitions) and the time it happened;
//! - [`JobMasterCore::tick`] is time passing: the execution vertices that
//!   wait for a worker are offered again, and [`JobMasterCore::overdue`]
//!   says, once the driver tried to place them, whether one waited too long.
//!
//! Both return [`Action`]s that the driver carries out in the order given:
//! record this, deploy that, tell the user, fail the job; after each input
//! the driver asks [`JobMasterCore::schedule`] what can go ahead. Nothing
//! here does I/O or reads a clock: the binary's JobMaster (threads or worker
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
    /// The `ExecutionFinished` record that [`Action::RecordFinished`]
    /// asked for is appended: the graph holds the finish of `attempt` with
    /// `partitions` from now on (so a run that fails before its record
    /// never counts it finished).
    FinishRecorded {
        /// The attempt.
        attempt: AttemptId,
        /// What it produced, as recorded.
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
    /// `snapshot_of` when it is `Some` (FLIP-383 "recording"), then step
    /// [`Input::FinishRecorded`] with the partitions. Nothing is acted on
    /// for it (its consumers scheduled) before the record is durable: the
    /// driver schedules after its group of finishes is.
    RecordFinished {
        /// The attempt.
        attempt: AttemptId,
        /// What it produced.
        partitions: Vec<ProducedPartition>,
        /// The source vertices whose enumerators a batch snapshot takes,
        /// when one is due.
        snapshot_of: Option<BTreeSet<usize>>,
        /// Subtasks of its job vertex finished once it is, of how many.
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

    /// What can go ahead now ([`Scheduling::schedule_at_most`]):
    /// initializations, enumerators, and at most `room` deployments — the
    /// driver's free task slots ([`room`]), so that what cannot run yet
    /// stays created in the graph instead of queued in an executor (Flink
    /// deploys an execution vertex once it has a slot; Spark offers a task
    /// to a free core).
    /// Execution vertices waiting to be placed are offered whatever the
    /// room ([`Scheduling::schedule_at_most`]).
    pub fn schedule(&mut self, room: usize) -> Vec<Action> {
        let waiting: Vec<(usize, u32)> = self.placement.waiting().collect();
        self.sched
            .schedule_at_most(room, &waiting)
            .into_iter()
            .map(Action::Schedule)
            .collect()
    }

    /// Takes `input`, which happened at `now` (a [`crate::clock::Clock`]
    /// reading), and returns what follows. What can go ahead after it is
    /// not part of the answer: the driver asks [`JobMasterCore::schedule`]
    /// once the input's actions are carried out (after a group of
    /// finishes, once the group is durable).
    pub fn step(&mut self, now: Duration, input: Input) -> Vec<Action> {
        match input {
            Input::Finished {
                attempt,
                partitions,
            } => self.finished(now, attempt, partitions),
            Input::FinishRecorded {
                attempt,
                partitions,
            } => {
                if self.sched.is_current(attempt) {
                    self.placement.finished(attempt);
                    self.sched.finished(attempt, partitions);
                }
                Vec::new()
            }
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
                scheduled(resets)
            }
        }
    }

    /// Time passed with no input: the execution vertices that wait (for a
    /// worker, or out a refused `Deploy`'s pause) are offered again. Once
    /// the driver tried to place them, [`JobMasterCore::overdue`] says
    /// whether one of those still waiting waited too long (a worker that
    /// registered just before the deadline places its vertex first).
    /// `room`: as for [`JobMasterCore::schedule`].
    pub fn tick(&mut self, room: usize) -> Vec<Action> {
        if self.placement.is_waiting() {
            self.schedule(room)
        } else {
            Vec::new()
        }
    }

    /// The failure of an execution vertex that has waited for a worker
    /// past the slot request timeout at `now`, if one has (asked after each
    /// input and each tick, once their actions are carried out).
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
        let others = self.sched.finished_count(v);
        let done = (
            others + 1,
            self.sched.graph.vertices[v].executions.len() as u32,
        );
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
                out.extend(scheduled(resets));
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
        scheduled(resets)
    }
}

/// How many more attempts a driver hands its executor now: two per task
/// slot (one running, one queued, so that a slot does not idle while the
/// JobMaster's loop deploys its next attempt) less the `running` ones; with
/// no slot at all (no worker registered yet) one, which then waits for a
/// worker under the slot request timeout.
pub fn room(slots: u64, running: usize) -> usize {
    let slots = usize::try_from(slots).unwrap_or(usize::MAX);
    slots.saturating_mul(2).max(1).saturating_sub(running)
}

/// The bookkeeping's `effects` as actions.
fn scheduled(effects: Vec<Effect>) -> Vec<Action> {
    effects.into_iter().map(Action::Schedule).collect()
}

#[cfg(test)]
mod tests;
