//! In-run failover, the decision: what a failed execution attempt leads to
//! (Flink's restart of a failed task up to `max-attempts`, and its region
//! failover on blocking edges: a lost input partition's producer runs again
//! first). The JobMaster carries the decision out (resets, splits given
//! back, the next deployment); the decision itself reads and updates only
//! the execution graph.

use coordhost_model::graph::{AttemptId, ExecutionGraph, ExecutionState};

use crate::events::{ExecutionVertexId, ResetReason};

/// What a failed attempt's error says about where the fault lies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailureCause {
    /// The data is bad: another attempt would read the same bytes.
    pub permanent: bool,
    /// An input partition of this producer attempt was missing or damaged
    /// (a damaged partition counts as lost: docs/recovery.md "Damaged
    /// partitions").
    pub lost_input_of: Option<AttemptId>,
}

/// What a failed attempt leads to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FailoverAction {
    /// The job fails: the attempt's input data is bad.
    FailInvalidData,
    /// The job fails: this attempt (the failed one, or the producer whose
    /// partition it lost) used its last attempt.
    FailExhausted(AttemptId),
    /// The attempt runs again; first, when it lost an input partition that
    /// is still its producer's current one, that producer runs again with
    /// this reason.
    Reset {
        /// The producer to reset first, and why.
        producer: Option<(AttemptId, ResetReason)>,
    },
}

/// The decision on a failed attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failover {
    /// Whether this was the execution vertex's last attempt (the job fails
    /// on it): progress says "failed for good".
    pub last: bool,
    /// What follows.
    pub action: FailoverAction,
}

/// Decides what the failure of `attempt` (the current attempt of its
/// execution vertex) leads to, and marks it failed in `graph`.
///
/// Attempts this coordinator started count, not attempt numbers (a
/// recovered job numbers its re-runs above every recorded attempt). An
/// attempt that failed because an input partition was lost while its
/// producer is still the finished attempt that wrote it did nothing wrong:
/// its start is not counted, and the producer's re-run counts against the
/// producer's `max_attempts` instead (a worker lost with partitions of
/// several stages would otherwise burn a consumer's attempts once per lost
/// level).
pub fn decide(
    graph: &mut ExecutionGraph,
    attempt: AttemptId,
    cause: FailureCause,
    max_attempts: u32,
) -> Failover {
    let current_producer = cause.lost_input_of.filter(|p| {
        graph.vertices[p.vertex]
            .executions
            .get(p.subtask as usize)
            .is_some_and(|e| e.attempt == p.attempt && e.state == ExecutionState::Finished)
    });
    let execution = &mut graph.vertices[attempt.vertex].executions[attempt.subtask as usize];
    if current_producer.is_some() {
        execution.attempts_started = execution.attempts_started.saturating_sub(1);
    }
    let started = execution.attempts_started;
    execution.state = ExecutionState::Failed;
    let last = cause.permanent || started >= max_attempts;
    let action = if cause.permanent {
        FailoverAction::FailInvalidData
    } else if started >= max_attempts {
        FailoverAction::FailExhausted(attempt)
    } else if let Some(producer) = current_producer {
        let producer_started =
            graph.vertices[producer.vertex].executions[producer.subtask as usize].attempts_started;
        if producer_started >= max_attempts {
            FailoverAction::FailExhausted(producer)
        } else {
            FailoverAction::Reset {
                producer: Some((producer, lost_partition(graph, attempt, producer))),
            }
        }
    } else {
        FailoverAction::Reset { producer: None }
    };
    Failover { last, action }
}

/// Why `producer` runs again: `consumer` did not find (or could not read)
/// its partition of the data set between the two.
fn lost_partition(graph: &ExecutionGraph, consumer: AttemptId, producer: AttemptId) -> ResetReason {
    let job = &graph.job;
    let data_set = job
        .inputs(consumer.vertex)
        .into_iter()
        .find(|&e| job.edges[e].from == producer.vertex)
        .map(|e| job.data_set_id(e))
        .unwrap_or_default();
    ResetReason::PartitionNotFound {
        data_set,
        consumer: ExecutionVertexId {
            job_vertex: job.vertices[consumer.vertex].id.clone(),
            subtask: consumer.subtask,
        },
    }
}

#[cfg(test)]
mod tests {
    use coordhost_model::graph::{Parallelism, VertexInit};

    use super::*;
    use crate::test_jobs::source_to_sink;

    /// `source` (2) → hash → `sink` (2), both initialized; every source
    /// subtask finished at attempt 0 after one start.
    fn graph() -> ExecutionGraph {
        let mut graph = ExecutionGraph::new(source_to_sink(Parallelism::Fixed(2)));
        for v in 0..2 {
            graph.initialize(
                v,
                VertexInit {
                    parallelism: 2,
                    input_ranges: Vec::new(),
                },
            );
        }
        for e in &mut graph.vertices[0].executions {
            e.state = ExecutionState::Finished;
            e.attempts_started = 1;
        }
        for e in &mut graph.vertices[1].executions {
            e.state = ExecutionState::Running;
            e.attempts_started = 1;
        }
        graph
    }

    const SINK_0: AttemptId = AttemptId {
        vertex: 1,
        subtask: 0,
        attempt: 0,
    };
    const SOURCE_1: AttemptId = AttemptId {
        vertex: 0,
        subtask: 1,
        attempt: 0,
    };

    fn cause(permanent: bool, lost_input_of: Option<AttemptId>) -> FailureCause {
        FailureCause {
            permanent,
            lost_input_of,
        }
    }

    #[test]
    fn a_failed_attempt_runs_again_until_its_attempts_are_used() {
        let mut g = graph();
        let first = decide(&mut g, SINK_0, cause(false, None), 2);
        assert_eq!(first.action, FailoverAction::Reset { producer: None });
        assert!(!first.last);
        assert_eq!(g.vertices[1].executions[0].state, ExecutionState::Failed);
        g.vertices[1].executions[0].attempts_started = 2;
        let second = decide(&mut g, SINK_0, cause(false, None), 2);
        assert_eq!(second.action, FailoverAction::FailExhausted(SINK_0));
        assert!(second.last);
    }

    #[test]
    fn bad_data_fails_the_job_at_once() {
        let mut g = graph();
        let d = decide(&mut g, SINK_0, cause(true, Some(SOURCE_1)), 5);
        assert_eq!((d.last, d.action), (true, FailoverAction::FailInvalidData));
    }

    #[test]
    fn a_lost_input_resets_its_producer_first_and_costs_the_consumer_no_attempt() {
        let mut g = graph();
        let d = decide(&mut g, SINK_0, cause(false, Some(SOURCE_1)), 2);
        let reason = ResetReason::PartitionNotFound {
            data_set: "source-sink".into(),
            consumer: ExecutionVertexId {
                job_vertex: "sink".into(),
                subtask: 0,
            },
        };
        assert_eq!(
            d.action,
            FailoverAction::Reset {
                producer: Some((SOURCE_1, reason))
            }
        );
        assert_eq!(g.vertices[1].executions[0].attempts_started, 0);
        // The producer's own attempts bound its re-runs.
        let mut g = graph();
        g.vertices[0].executions[1].attempts_started = 3;
        let d = decide(&mut g, SINK_0, cause(false, Some(SOURCE_1)), 3);
        assert_eq!(d.action, FailoverAction::FailExhausted(SOURCE_1));
    }

    #[test]
    fn a_lost_input_of_a_producer_already_running_again_resets_only_the_consumer() {
        let mut g = graph();
        g.vertices[0].executions[1].attempt = 1;
        g.vertices[0].executions[1].state = ExecutionState::Running;
        let d = decide(&mut g, SINK_0, cause(false, Some(SOURCE_1)), 3);
        assert_eq!(d.action, FailoverAction::Reset { producer: None });
        assert_eq!(g.vertices[1].executions[0].attempts_started, 1, "counted");
    }
}
