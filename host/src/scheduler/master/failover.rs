//! In-run failover: a failed attempt is reset and runs again (up to
//! `max-attempts`); a PartitionNotFound — or an input partition whose data
//! fails to decode or checksum — resets the lost partition's producer first
//! (Flink's region failover on blocking edges), giving a source's splits
//! back to its enumerator. What a failure leads to is decided by
//! `coordhost_core::failover`; this file carries it out.

use coordhost_core::failover::FailureCause;
use coordhost_core::master::{Action, Input, JobFailure};
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
        let actions = self.core.step(
            self.clock.now(),
            Input::Failed {
                attempt,
                cause,
                reason,
            },
        );
        self.carry_out(actions, Some(error), events)
    }

    /// The `Deploy` of `attempt` to `worker` failed (refused, no answer in
    /// time, the worker gone): the attempt was not placed, so it is not a
    /// failed attempt of `max-attempts`. It may have started there and
    /// pulled splits all the same, so it is reset like a failed one (its
    /// splits go back to the enumerator, `add-splits-back`) and the
    /// execution vertex runs again under a new attempt number, on another
    /// worker if one is alive, else on the same after a pause (100 ms,
    /// doubling up to 1 s), within `job.slot-request-timeout-ms`
    /// (`coordhost_core::master`, `Input::DeployRefused`).
    pub(super) fn on_deploy_failed(
        &mut self,
        attempt: AttemptId,
        worker: String,
        message: &str,
        events: &mut dyn JobEventSink,
    ) -> Result<(), JobError> {
        let why = format!("worker `{worker}` {message}");
        if self.core.is_current(attempt) {
            let vertex_id = &self.core.graph().job.vertices[attempt.vertex].id;
            tracing::warn!(vertex = %vertex_id, subtask = attempt.subtask, attempt = attempt.attempt, worker = %worker, "not placed: {why}; its splits go back and it runs again under a new attempt number (not counted against max-attempts)");
        }
        let actions = self.core.step(
            self.clock.now(),
            Input::DeployRefused {
                attempt,
                worker,
                why,
            },
        );
        self.carry_out(actions, None, events)
    }

    /// A worker process was lost with the partitions of the finished
    /// attempts `held`: each one still current whose output some consumer
    /// has yet to read is reset now, so consumers wait for the re-run
    /// instead of failing one by one on PartitionNotFound (Flink releases a
    /// lost TaskManager's partitions the same way), until nothing more is
    /// reset (`Scheduling::worker_lost`: TPC-H Q3 lost its job when one
    /// pass decided it, `tpch_objects`).
    pub(super) fn on_worker_lost(
        &mut self,
        worker: &str,
        held: &[AttemptId],
        events: &mut dyn JobEventSink,
    ) -> Result<(), JobError> {
        // Partitions on object storage (`object-shuffle`) were not on the
        // worker: they outlive it, nothing runs again for them.
        let graph = self.core.graph();
        let held = held
            .iter()
            .copied()
            .filter(|a| {
                let partitions = graph.vertices[a.vertex]
                    .executions
                    .get(a.subtask as usize)
                    .map_or(&[][..], |e| &e.partitions[..]);
                partitions.is_empty() || !partitions.iter().all(|p| is_object_location(&p.location))
            })
            .collect();
        let reason = ResetReason::Failover {
            message: format!("worker `{worker}`, which held its partitions, was lost"),
        };
        let actions = self
            .core
            .step(self.clock.now(), Input::WorkerLost { held, reason });
        self.carry_out(actions, None, events)
    }

    /// Carries out the core's actions in order (`coordhost_core::master`):
    /// records initializations and resets, starts or drops enumerators,
    /// deploys, tells the user of a failed attempt, and stops at the first
    /// error or at the job's failure. `failed_with`: the error of the
    /// attempt whose failure these actions answer.
    pub(super) fn carry_out(
        &mut self,
        actions: Vec<Action>,
        mut failed_with: Option<TaskError>,
        events: &mut dyn JobEventSink,
    ) -> Result<(), JobError> {
        for action in actions {
            match action {
                Action::Schedule(effect) => self.carry_out_effect(effect, events)?,
                Action::AttemptFailed {
                    attempt,
                    worker,
                    last,
                } => self.tell_failed(attempt, worker.as_deref(), last, failed_with.as_ref()),
                Action::FailJob(failure) => {
                    return Err(self.job_failure(failure, failed_with.take()));
                }
                Action::RecordFinished { attempt, .. } => {
                    return Err(JobError::Internal {
                        reason: format!(
                            "a finish of {attempt:?} came back from a decision that was not a finish"
                        ),
                    });
                }
            }
        }
        Ok(())
    }

    fn carry_out_effect(
        &mut self,
        effect: Effect,
        events: &mut dyn JobEventSink,
    ) -> Result<(), JobError> {
        match effect {
            Effect::Initialized { vertex, init } => self.initialized(vertex, &init, events),
            Effect::NeedEnumerator(v) => {
                if !self.coordinators.contains_key(&v) {
                    self.start_coordinator(v)?;
                }
                Ok(())
            }
            Effect::Deploy(a) => self.deploy(a.vertex, a.subtask),
            // The source restarts with a fresh enumerator (FLIP-383
            // "restart all, once"): its subtasks' resets give nothing back.
            Effect::FreshEnumerator(v) => {
                self.coordinators.remove(&v);
                Ok(())
            }
            Effect::Reset {
                attempt,
                reason,
                kind,
                partitions,
            } => self.reset_one(attempt, &reason, kind, &partitions, events),
            Effect::ResetsDone => self.crash_point("executions-reset", events),
        }
    }

    /// Says that `attempt` failed with `error`: at debug level, and as a
    /// progress line (or, when the job fails on it, the run's `coordhost:`
    /// line says it once).
    fn tell_failed(
        &self,
        attempt: AttemptId,
        worker: Option<&str>,
        last: bool,
        error: Option<&TaskError>,
    ) {
        let vertex_id = &self.core.graph().job.vertices[attempt.vertex].id;
        // A worker's own error names the worker already.
        let remote_error = matches!(error, Some(TaskError::Worker { .. }));
        let error = error.map_or_else(|| "failed".to_owned(), ToString::to_string);
        match worker {
            Some(w) => {
                tracing::debug!(vertex = %vertex_id, subtask = attempt.subtask, attempt = attempt.attempt, worker = %w, "attempt failed: {error}");
            }
            None => {
                tracing::debug!(vertex = %vertex_id, subtask = attempt.subtask, attempt = attempt.attempt, "attempt failed: {error}");
            }
        }
        let Some(p) = &self.opts.progress else {
            return;
        };
        let reason = match worker {
            Some(w) if !remote_error => format!("{error} (on worker `{w}`)"),
            _ => error,
        };
        if last {
            p.task_failed_for_good(vertex_id, attempt.subtask, attempt.attempt, &reason);
        } else {
            p.task_failed(vertex_id, attempt.subtask, attempt.attempt, &reason);
        }
    }

    /// The job's error for the core's `failure`; `error`: the failed
    /// attempt's, when a failure ends it.
    pub(super) fn job_failure(&self, failure: JobFailure, error: Option<TaskError>) -> JobError {
        let vertex = |v: usize| self.core.graph().job.vertices[v].id.clone();
        let Some(error) = error else {
            return match failure {
                JobFailure::NoWorker {
                    vertex: v,
                    subtask,
                    waited,
                    why,
                } => JobError::NoWorker {
                    vertex: vertex(v),
                    subtask,
                    waited_ms: waited.as_millis() as u64,
                    why,
                },
                other => JobError::Internal {
                    reason: format!("the job failed ({other:?}) without a failed attempt"),
                },
            };
        };
        match failure {
            JobFailure::InvalidData { attempt } => JobError::InvalidData {
                vertex: vertex(attempt.vertex),
                subtask: attempt.subtask,
                attempt: attempt.attempt,
                source: Box::new(error),
            },
            JobFailure::Exhausted { used, max_attempts } => JobError::TaskFailed {
                vertex: vertex(used.vertex),
                subtask: used.subtask,
                attempt: used.attempt,
                max_attempts,
                source: Box::new(error),
            },
            other => self.job_failure(other, None),
        }
    }

    /// Resets one execution vertex as the core decided (the graph already
    /// holds its next attempt, created): records it, releases its
    /// partitions, gives a source's splits back, cancels it on a worker.
    fn reset_one(
        &mut self,
        attempt: AttemptId,
        reason: &ResetReason,
        kind: &'static str,
        partitions: &[crate::graph::ProducedPartition],
        events: &mut dyn JobEventSink,
    ) -> Result<(), JobError> {
        let v = attempt.vertex;
        let vertex_id = self.core.sched.graph.job.vertices[v].id.clone();
        events.executions_reset(&vertex_id, &[attempt], reason)?;
        *self.figures.reset_reasons.entry(kind.into()).or_default() += 1;
        // The descriptors its deployment registered; for an attempt a
        // recovery kept, built from the partitions the log recorded.
        let descriptors = match self.descriptors.remove(&(v, attempt.subtask)) {
            Some(registered) => registered,
            None => partitions
                .iter()
                .map(|p| self.descriptor(v, attempt.subtask, attempt.attempt, p))
                .collect(),
        };
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
            self.core.snapshots.touch(v);
            let n = c.reset_subtask(attempt.subtask)?;
            self.figures.split_counts.entry(v).or_default().1 += n as u64;
            tracing::debug!(vertex = %vertex_id, subtask = attempt.subtask, splits = n, "splits back to the enumerator");
        }
        self.waiting.remove(&attempt);
        if let Some(s) = &self.core.sched.graph.job.vertices[v].sink {
            let _ignored =
                std::fs::remove_file(sink::staging_path(s, attempt.subtask, attempt.attempt));
        }
        self.figures.tasks_reset += 1;
        self.answer_waiting(v);
        Ok(())
    }
}
