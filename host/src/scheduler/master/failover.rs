//! In-run failover: a failed attempt is reset and runs again (up to
//! `max-attempts`); a PartitionNotFound — or an input partition whose data
//! fails to decode or checksum — resets the lost partition's producer first
//! (Flink's region failover on blocking edges), giving a source's splits
//! back to its enumerator. What a failure leads to is decided by
//! `coordhost_core::failover`; this file carries it out.

use coordhost_core::failover::{FailoverAction, FailureCause};
use coordhost_core::scheduling::Effect;

use super::JobMaster;
use crate::events::ResetReason;
use crate::graph::AttemptId;
use crate::runtime::{TaskError, sink};
use crate::scheduler::{JobError, JobEventSink};
use crate::shuffle::is_object_location;

impl JobMaster {
    pub(super) fn on_failed(
        &mut self,
        attempt: AttemptId,
        error: TaskError,
        events: &mut dyn JobEventSink,
    ) -> Result<(), JobError> {
        let current = self.is_current(attempt);
        // Its next attempt prefers another worker (a full disk, say, fails
        // every attempt sent back there).
        let worker = self.placement.failed(attempt, current);
        if !current {
            return Ok(());
        }
        let vertex_id = self.sched.graph.job.vertices[attempt.vertex].id.clone();
        // Logged at debug only: the progress line below (or, when the job
        // fails on it, the run's `coordhost:` line) says it once.
        match &worker {
            Some(w) => {
                tracing::debug!(vertex = %vertex_id, subtask = attempt.subtask, attempt = attempt.attempt, worker = %w, "attempt failed: {error}");
            }
            None => {
                tracing::debug!(vertex = %vertex_id, subtask = attempt.subtask, attempt = attempt.attempt, "attempt failed: {error}");
            }
        }
        let lost_input_of = match &error {
            TaskError::PartitionNotFound { producer, .. }
            | TaskError::PartitionCorrupt { producer, .. } => Some(*producer),
            _ => None,
        };
        let cause = FailureCause {
            permanent: error.is_permanent(),
            lost_input_of,
        };
        let reason = ResetReason::Failover {
            message: error.to_string(),
        };
        let (decision, resets) = self.sched.failed(attempt, cause, reason);
        if let Some(p) = &self.opts.progress {
            let reason = match &worker {
                Some(w) if !matches!(error, TaskError::Worker { .. }) => {
                    format!("{error} (on worker `{w}`)")
                }
                _ => error.to_string(),
            };
            if decision.last {
                p.task_failed_for_good(&vertex_id, attempt.subtask, attempt.attempt, &reason);
            } else {
                p.task_failed(&vertex_id, attempt.subtask, attempt.attempt, &reason);
            }
        }
        match decision.action {
            FailoverAction::FailInvalidData => Err(JobError::InvalidData {
                vertex: vertex_id,
                subtask: attempt.subtask,
                attempt: attempt.attempt,
                source: Box::new(error),
            }),
            FailoverAction::FailExhausted(used) => Err(JobError::TaskFailed {
                vertex: self.sched.graph.job.vertices[used.vertex].id.clone(),
                subtask: used.subtask,
                attempt: used.attempt,
                max_attempts: self.sched.max_attempts(),
                source: Box::new(error),
            }),
            FailoverAction::Reset { .. } => self.carry_out(resets, events),
        }
    }

    /// The `Deploy` of `attempt` to `worker` failed (refused, no answer in
    /// time, the worker gone): the attempt was not placed, so it is not a
    /// failed attempt of `max-attempts`. It may have started there and
    /// pulled splits all the same, so it is reset like a failed one (its
    /// splits go back to the enumerator, `add-splits-back`) and the
    /// execution vertex runs again under a new attempt number, on another
    /// worker if one is alive, else on the same after a pause (100 ms,
    /// doubling up to 1 s), within `job.slot-request-timeout-ms`.
    pub(super) fn on_deploy_failed(
        &mut self,
        attempt: AttemptId,
        worker: String,
        message: &str,
        events: &mut dyn JobEventSink,
    ) -> Result<(), JobError> {
        if !self.is_current(attempt) {
            self.placement.forget(attempt);
            return Ok(());
        }
        let vertex_id = self.sched.graph.job.vertices[attempt.vertex].id.clone();
        let why = format!("worker `{worker}` {message}");
        tracing::warn!(vertex = %vertex_id, subtask = attempt.subtask, attempt = attempt.attempt, worker = %worker, "not placed: {why}; its splits go back and it runs again under a new attempt number (not counted against max-attempts)");
        self.placement
            .deploy_failed(attempt, worker, why.clone(), self.clock.now());
        let resets = self.sched.deploy_failed(
            attempt,
            ResetReason::Failover {
                message: format!("not placed: {why}"),
            },
        );
        self.carry_out(resets, events)
    }

    /// A worker process was lost with the partitions of the finished
    /// attempts `held`: each one still current whose output some consumer
    /// has yet to read is reset now, so consumers wait for the re-run
    /// instead of failing one by one on PartitionNotFound (Flink releases a
    /// lost TaskManager's partitions the same way).
    ///
    /// Until nothing more is reset: resetting a consumer that was finished
    /// (its own output was on the worker) makes its inputs needed again,
    /// and those may have been on the same worker. Deciding in one pass,
    /// before that consumer was reset, left them "not needed" and its
    /// re-run then met one lost input after the other, each costing an
    /// attempt (TPC-H Q3 lost its job that way: `tpch_objects`).
    pub(super) fn on_worker_lost(
        &mut self,
        worker: &str,
        held: &[AttemptId],
        events: &mut dyn JobEventSink,
    ) -> Result<(), JobError> {
        // Partitions on object storage (`object-shuffle`) were not on the
        // worker: they outlive it, nothing runs again for them.
        let on_object_storage = |partitions: &[crate::graph::ProducedPartition]| {
            partitions.iter().all(|p| is_object_location(&p.location))
        };
        let reason = ResetReason::Failover {
            message: format!("worker `{worker}`, which held its partitions, was lost"),
        };
        let resets = self.sched.worker_lost(held, &on_object_storage, &reason);
        self.carry_out(resets, events)
    }

    /// Carries out the core's effects in order (`coordhost_core::scheduling`):
    /// records initializations and resets, starts or drops enumerators,
    /// deploys, and stops at the first error.
    pub(super) fn carry_out(
        &mut self,
        effects: Vec<Effect>,
        events: &mut dyn JobEventSink,
    ) -> Result<(), JobError> {
        for effect in effects {
            match effect {
                Effect::Initialized { vertex, init } => self.initialized(vertex, &init, events)?,
                Effect::NeedEnumerator(v) => {
                    if !self.coordinators.contains_key(&v) {
                        self.start_coordinator(v)?;
                    }
                }
                Effect::Deploy(a) => self.deploy(a.vertex, a.subtask)?,
                // The source restarts with a fresh enumerator (FLIP-383
                // "restart all, once"): its subtasks' resets give nothing back.
                Effect::FreshEnumerator(v) => {
                    self.coordinators.remove(&v);
                }
                Effect::Reset {
                    attempt,
                    reason,
                    kind,
                } => self.reset_one(attempt, &reason, kind, events)?,
                Effect::ResetsDone => self.crash_point("executions-reset", events)?,
            }
        }
        Ok(())
    }

    /// Resets one execution vertex as the core decided (the graph already
    /// holds its next attempt, created): records it, releases its
    /// partitions, gives a source's splits back, cancels it on a worker.
    fn reset_one(
        &mut self,
        attempt: AttemptId,
        reason: &ResetReason,
        kind: &'static str,
        events: &mut dyn JobEventSink,
    ) -> Result<(), JobError> {
        let v = attempt.vertex;
        let vertex_id = self.sched.graph.job.vertices[v].id.clone();
        events.executions_reset(&vertex_id, &[attempt], reason)?;
        *self.reset_reasons.entry(kind.into()).or_default() += 1;
        let descriptors = self
            .descriptors
            .remove(&(v, attempt.subtask))
            .unwrap_or_default();
        if self.executor.is_remote() {
            // The worker that holds them deletes them (below its own root).
            let relative: Vec<std::path::PathBuf> = descriptors
                .iter()
                .filter_map(|d| {
                    self.shuffle
                        .grants()
                        .writable_dir(std::path::Path::new(&d.location))
                        .ok()
                        .map(|p| p.relative().to_path_buf())
                })
                .collect();
            self.executor.release(attempt, &relative);
            // A reset attempt still running stops; its report (canceled)
            // ends it here as a superseded one.
            self.executor.cancel(attempt);
        }
        for d in descriptors {
            if let Err(e) = self.shuffle.release_partition_externally(&d) {
                tracing::warn!(plugin = %self.shuffle_plugin, "releasing {}: {e}", d.location);
            }
            self.delete_partition(std::path::Path::new(&d.location));
        }
        if let Some(c) = self.coordinators.get_mut(&v) {
            self.snapshots.touch(v);
            let n = c.reset_subtask(attempt.subtask)?;
            self.split_counts.entry(v).or_default().1 += n as u64;
            tracing::debug!(vertex = %vertex_id, subtask = attempt.subtask, splits = n, "splits back to the enumerator");
        }
        self.waiting.remove(&attempt);
        if let Some(s) = &self.sched.graph.job.vertices[v].sink {
            let _ignored =
                std::fs::remove_file(sink::staging_path(s, attempt.subtask, attempt.attempt));
        }
        self.tasks_reset += 1;
        self.answer_waiting(v);
        Ok(())
    }
}
