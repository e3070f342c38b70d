//! In-run failover: a failed attempt is reset and runs again (up to
//! `max-attempts`); a PartitionNotFound — or an input partition whose data
//! fails to decode or checksum — resets the lost partition's producer first
//! (Flink's region failover on blocking edges), giving a source's splits
//! back to its enumerator. What a failure leads to is decided by
//! `coordhost_core::failover`; this file carries it out.

use coordhost_core::failover::{self, FailoverAction, FailureCause};

use super::{JobMaster, reason_kind};
use crate::events::ResetReason;
use crate::graph::{AttemptId, ExecutionState};
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
        let worker = self.placed_on.remove(&attempt);
        if !self.is_current(attempt) {
            return Ok(());
        }
        let key = (attempt.vertex, attempt.subtask);
        self.waiting_since.remove(&key);
        self.refusals.remove(&key);
        let vertex_id = self.graph.job.vertices[attempt.vertex].id.clone();
        // Logged at debug only: the progress line below (or, when the job
        // fails on it, the run's `coordhost:` line) says it once.
        match &worker {
            Some(w) => {
                tracing::debug!(vertex = %vertex_id, subtask = attempt.subtask, attempt = attempt.attempt, worker = %w, "attempt failed: {error}");
                // Its next attempt prefers another worker (a full disk, say,
                // fails every attempt sent back there).
                self.failed_on.entry(key).or_default().insert(w.clone());
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
        let decision = failover::decide(&mut self.graph, attempt, cause, self.max_attempts);
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
                vertex: self.graph.job.vertices[used.vertex].id.clone(),
                subtask: used.subtask,
                attempt: used.attempt,
                max_attempts: self.max_attempts,
                source: Box::new(error),
            }),
            FailoverAction::Reset { producer } => {
                if let Some((producer, reason)) = producer {
                    self.reset(producer, reason, events)?;
                }
                self.reset(
                    attempt,
                    ResetReason::Failover {
                        message: error.to_string(),
                    },
                    events,
                )
            }
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
        self.placed_on.remove(&attempt);
        if !self.is_current(attempt) {
            return Ok(());
        }
        let key = (attempt.vertex, attempt.subtask);
        let vertex_id = self.graph.job.vertices[attempt.vertex].id.clone();
        let why = format!("worker `{worker}` {message}");
        tracing::warn!(vertex = %vertex_id, subtask = attempt.subtask, attempt = attempt.attempt, worker = %worker, "not placed: {why}; its splits go back and it runs again under a new attempt number (not counted against max-attempts)");
        let ev = &mut self.graph.vertices[attempt.vertex].executions[attempt.subtask as usize];
        ev.attempts_started = ev.attempts_started.saturating_sub(1);
        ev.state = ExecutionState::Failed;
        self.failed_on.entry(key).or_default().insert(worker);
        let now = std::time::Instant::now();
        self.waiting_since.entry(key).or_insert(now);
        let failures = {
            let n = self.refusals.entry(key).or_default();
            *n = n.saturating_add(1);
            *n
        };
        let pause = std::time::Duration::from_millis(100 << (failures - 1).min(4))
            .min(std::time::Duration::from_secs(1));
        self.unplaced.insert(
            key,
            super::Unplaced {
                retry_at: now + pause,
                why: why.clone(),
            },
        );
        self.reset_as(
            attempt,
            ResetReason::Failover {
                message: format!("not placed: {why}"),
            },
            "not-placed",
            events,
        )
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
        loop {
            let mut reset_any = false;
            for &a in held {
                let Some(e) = self.graph.vertices[a.vertex]
                    .executions
                    .get(a.subtask as usize)
                else {
                    continue;
                };
                if e.attempt != a.attempt || e.state != ExecutionState::Finished {
                    continue;
                }
                // Partitions on object storage (`object-shuffle`) were not
                // on the worker: they outlive it, nothing runs again.
                if !e.partitions.is_empty()
                    && e.partitions.iter().all(|p| is_object_location(&p.location))
                {
                    continue;
                }
                let needed = self.graph.job.outputs(a.vertex).iter().any(|&edge| {
                    let to = self.graph.job.edges[edge].to;
                    let consumers = &self.graph.vertices[to].executions;
                    consumers.is_empty()
                        || consumers
                            .iter()
                            .any(|c| c.state != ExecutionState::Finished)
                });
                if needed {
                    self.reset(
                        a,
                        ResetReason::Failover {
                            message: format!(
                                "worker `{worker}`, which held its partitions, was lost"
                            ),
                        },
                        events,
                    )?;
                    reset_any = true;
                }
            }
            // Each pass resets at least one finished attempt of `held`,
            // which is then no longer finished: at most `held.len()` passes.
            if !reset_any {
                return Ok(());
            }
        }
    }

    /// Resets one execution vertex: releases its partitions, gives a
    /// source's splits back, and makes a new attempt in `Created`. The first
    /// reset of a subtask of a source that recovery kept although its
    /// enumerator cannot snapshot resets every subtask of it, with a fresh
    /// enumerator, and what read its old partitions (FLIP-383, "restart
    /// all, once": [`crate::plan::restart_all_once`]).
    pub(super) fn reset(
        &mut self,
        attempt: AttemptId,
        reason: ResetReason,
        events: &mut dyn JobEventSink,
    ) -> Result<(), JobError> {
        let kind = reason_kind(&reason);
        self.reset_as(attempt, reason, kind, events)
    }

    /// [`JobMaster::reset`], counted in the summary's `reset_reasons` as
    /// `kind` (`not-placed` for an attempt whose `Deploy` failed, which the
    /// log records as a failover).
    pub(super) fn reset_as(
        &mut self,
        attempt: AttemptId,
        reason: ResetReason,
        kind: &'static str,
        events: &mut dyn JobEventSink,
    ) -> Result<(), JobError> {
        let restarts = self.restart_all_once.contains_key(&attempt.vertex);
        let graph = &self.graph;
        let also = crate::plan::restart_all_once(
            &graph.job,
            &mut self.restart_all_once,
            (attempt.vertex, attempt.subtask),
            &|v| graph.vertices[v].executions.len() as u32,
            &|(v, s)| {
                matches!(
                    graph.vertices[v].executions[s as usize].state,
                    ExecutionState::Finished | ExecutionState::Running
                )
            },
        );
        if restarts {
            // The source restarts with a fresh enumerator.
            self.coordinators.remove(&attempt.vertex);
        }
        for ((v, s), why) in also {
            let other = self.graph.attempt_id(v, s);
            self.reset_one(other, why, events)?;
        }
        self.reset_one_as(attempt, reason, kind, events)?;
        self.crash_point("executions-reset", events)
    }

    pub(super) fn reset_one(
        &mut self,
        attempt: AttemptId,
        reason: ResetReason,
        events: &mut dyn JobEventSink,
    ) -> Result<(), JobError> {
        let kind = reason_kind(&reason);
        self.reset_one_as(attempt, reason, kind, events)
    }

    fn reset_one_as(
        &mut self,
        attempt: AttemptId,
        reason: ResetReason,
        kind: &'static str,
        events: &mut dyn JobEventSink,
    ) -> Result<(), JobError> {
        let v = attempt.vertex;
        let vertex_id = self.graph.job.vertices[v].id.clone();
        events.executions_reset(&vertex_id, &[attempt], &reason)?;
        *self.reset_reasons.entry(kind.into()).or_default() += 1;
        let descriptors = self
            .descriptors
            .remove(&(v, attempt.subtask))
            .unwrap_or_default();
        if let super::Executor::External(cluster) = &self.executor {
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
            cluster.release(attempt, &relative);
            // A reset attempt still running stops; its report (canceled)
            // ends it here as a superseded one.
            cluster.cancel(attempt);
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
        if let Some(s) = &self.graph.job.vertices[v].sink {
            let _ignored =
                std::fs::remove_file(sink::staging_path(s, attempt.subtask, attempt.attempt));
        }
        let ev = &mut self.graph.vertices[v].executions[attempt.subtask as usize];
        ev.attempt += 1;
        ev.state = ExecutionState::Created;
        ev.partitions.clear();
        self.tasks_reset += 1;
        self.answer_waiting(v);
        Ok(())
    }
}
