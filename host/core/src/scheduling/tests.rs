use coordhost_model::graph::{
    DistributionPattern, ExecutionState, JobEdge, JobGraph, Parallelism, ProducedPartition,
};

use super::*;
use crate::events::ExecutionVertexId;
use crate::test_jobs::{source_to_sink, vertex};

/// `source` (2, a split enumerator) → hash → `sink` (`parallelism`).
fn scheduling(sink: Parallelism) -> Scheduling {
    Scheduling::new(ExecutionGraph::new(source_to_sink(sink)), 3)
}

fn at(vertex: usize, subtask: u32, attempt: u32) -> AttemptId {
    AttemptId {
        vertex,
        subtask,
        attempt,
    }
}

fn partition(bytes: Vec<u64>) -> Vec<ProducedPartition> {
    vec![ProducedPartition {
        edge: 0,
        location: "p".into(),
        bytes_per_subpartition: bytes.into(),
    }]
}

fn failover(message: &str) -> ResetReason {
    ResetReason::Failover {
        message: message.into(),
    }
}

/// Deploys and finishes every offered attempt of vertex `v`, each with
/// `bytes` per subpartition.
fn run_vertex(s: &mut Scheduling, v: usize, bytes: &[u64]) {
    for effect in s.schedule() {
        if let Effect::Deploy(a) = effect
            && a.vertex == v
        {
            s.started(a);
            s.finished(a, partition(bytes.to_vec()));
        }
    }
}

#[test]
fn a_vertex_is_initialized_once_its_inputs_finish_and_its_subtasks_are_offered_once_deployed() {
    let mut s = scheduling(Parallelism::Fixed(2));
    let first = s.schedule();
    assert_eq!(
        first,
        vec![
            Effect::Initialized {
                vertex: 0,
                init: VertexInit {
                    parallelism: 2,
                    input_ranges: Vec::new()
                }
            },
            Effect::NeedEnumerator(0),
            Effect::Deploy(at(0, 0, 0)),
            Effect::Deploy(at(0, 1, 0)),
        ]
    );
    s.started(at(0, 0, 0));
    // Not initialized again; the deployed subtask is not offered again.
    assert_eq!(
        s.schedule(),
        vec![Effect::NeedEnumerator(0), Effect::Deploy(at(0, 1, 0))]
    );
    s.started(at(0, 1, 0));
    assert!(s.is_current(at(0, 1, 0)));
    assert!(!s.completes(at(0, 0, 0)));
    assert_eq!(s.finished(at(0, 0, 0), Vec::new()), (1, 2));
    assert!(s.completes(at(0, 1, 0)));
    assert_eq!(s.finished(at(0, 1, 0), Vec::new()), (2, 2));
    // A finished source needs no enumerator: no reader asks it again (a
    // recovered finished job started one, which listed the input again
    // and held splits nobody would read).
    let next = s.schedule();
    assert!(
        matches!(&next[0], Effect::Initialized { vertex: 1, init } if init.input_ranges == vec![0..1, 1..2])
    );
    assert_eq!(
        next[1..],
        [Effect::Deploy(at(1, 0, 0)), Effect::Deploy(at(1, 1, 0))]
    );
}

#[test]
fn an_auto_parallelism_follows_the_bytes_its_hash_input_produced() {
    let mut s = scheduling(Parallelism::Auto);
    run_vertex(&mut s, 0, &[10, 0, 0, 10]);
    let init = s.schedule().into_iter().find_map(|e| match e {
        Effect::Initialized { vertex: 1, init } => Some(init),
        _ => None,
    });
    // 40 bytes at 10 per task, at most 4 subpartitions: 4 subtasks.
    assert_eq!(init.map(|i| i.parallelism), Some(4));
}

#[test]
fn a_failed_attempt_is_reset_under_the_next_attempt_number_until_its_attempts_are_used() {
    let mut s = scheduling(Parallelism::Fixed(2));
    s.schedule();
    s.started(at(0, 0, 0));
    let cause = FailureCause {
        permanent: false,
        lost_input_of: None,
    };
    for attempt in 0..2 {
        let (decision, effects) = s.failed(at(0, 0, attempt), cause, failover("x"));
        assert!(!decision.last);
        assert_eq!(
            effects,
            vec![
                Effect::Reset {
                    attempt: at(0, 0, attempt),
                    reason: failover("x"),
                    kind: "failover",
                    // A running attempt had produced nothing.
                    partitions: Vec::new(),
                },
                Effect::ResetsDone
            ]
        );
        assert!(
            s.schedule()
                .contains(&Effect::Deploy(at(0, 0, attempt + 1)))
        );
        s.started(at(0, 0, attempt + 1));
    }
    let (decision, effects) = s.failed(at(0, 0, 2), cause, failover("x"));
    assert_eq!(
        (decision.last, decision.action),
        (true, FailoverAction::FailExhausted(at(0, 0, 2)))
    );
    assert!(effects.is_empty(), "{effects:?}");
}

#[test]
fn a_lost_input_resets_its_producer_before_the_consumer() {
    let mut s = scheduling(Parallelism::Fixed(2));
    run_vertex(&mut s, 0, &[1, 1]);
    s.schedule();
    s.started(at(1, 0, 0));
    let cause = FailureCause {
        permanent: false,
        lost_input_of: Some(at(0, 1, 0)),
    };
    let (_, effects) = s.failed(at(1, 0, 0), cause, failover("lost"));
    let reset: Vec<AttemptId> = effects
        .iter()
        .filter_map(|e| match e {
            Effect::Reset { attempt, .. } => Some(*attempt),
            _ => None,
        })
        .collect();
    assert_eq!(reset, vec![at(0, 1, 0), at(1, 0, 0)]);
    assert!(matches!(
        &effects[0],
        Effect::Reset {
            kind: "partition-not-found",
            ..
        }
    ));
    // The producer runs before its consumer is offered again.
    let offered: Vec<Effect> = s
        .schedule()
        .into_iter()
        .filter(|e| matches!(e, Effect::Deploy(_)))
        .collect();
    assert_eq!(offered, vec![Effect::Deploy(at(0, 1, 1))]);
}

#[test]
fn a_refused_deploy_runs_again_without_costing_an_attempt() {
    let mut s = scheduling(Parallelism::Fixed(2));
    s.schedule();
    s.started(at(0, 0, 0));
    let effects = s.deploy_failed(at(0, 0, 0), failover("not placed"));
    assert!(matches!(
        &effects[0],
        Effect::Reset {
            kind: "not-placed",
            ..
        }
    ));
    let e = &s.graph.vertices[0].executions[0];
    assert_eq!(
        (e.attempt, e.state, e.attempts_started),
        (1, ExecutionState::Created, 0)
    );
}

#[test]
fn a_lost_worker_resets_what_it_held_and_what_a_reset_consumer_needs_again() {
    let mut s = scheduling(Parallelism::Fixed(2));
    run_vertex(&mut s, 0, &[1, 1]);
    run_vertex(&mut s, 1, &[]);
    // The sink finished: the source's partitions are needed by no one.
    let lost = failover("worker gone");
    let held = [at(0, 0, 0), at(1, 1, 0)];
    let effects = s.worker_lost(&held, &|_| false, &lost);
    // The sink subtask's partition was on the worker and is read by no
    // one either (no consumer): nothing runs again.
    assert!(effects.is_empty(), "{effects:?}");
    // With the sink subtask running again, the source's output it held is
    // needed again.
    s.reset(at(1, 1, 0), failover("x"), "failover");
    let effects = s.worker_lost(&held, &|_| false, &lost);
    assert_eq!(
        effects,
        vec![
            Effect::Reset {
                attempt: at(0, 0, 0),
                reason: lost.clone(),
                kind: "failover",
                // The finished source's partition, taken out of the graph
                // for the driver to release.
                partitions: partition(vec![1, 1]),
            },
            Effect::ResetsDone
        ]
    );
    // Partitions that outlive the worker (object storage) are not lost.
    assert!(s.graph.vertices[0].executions[0].partitions.is_empty());
    let mut s2 = scheduling(Parallelism::Fixed(2));
    run_vertex(&mut s2, 0, &[1, 1]);
    assert!(s2.worker_lost(&held, &|_| true, &lost).is_empty());
}

#[test]
fn the_first_reset_of_a_source_kept_without_snapshots_restarts_it_whole_once() {
    let mut s = scheduling(Parallelism::Fixed(2));
    run_vertex(&mut s, 0, &[1, 1]);
    run_vertex(&mut s, 1, &[]);
    let mut plan = RecoveryPlan::default();
    plan.restart_all_once
        .insert(0, ResetReason::RecoveryEnumeratorWithoutSnapshot);
    s.restart_all_once = plan.restart_all_once.clone();
    let effects = s.reset(at(0, 0, 0), failover("x"), "failover");
    assert_eq!(effects[0], Effect::FreshEnumerator(0));
    let reset: Vec<(usize, u32)> = effects
        .iter()
        .filter_map(|e| match e {
            Effect::Reset { attempt, .. } => Some((attempt.vertex, attempt.subtask)),
            _ => None,
        })
        .collect();
    assert_eq!(reset, vec![(0, 1), (1, 0), (1, 1), (0, 0)]);
    assert!(matches!(
        &effects[2],
        Effect::Reset { reason: ResetReason::RecoveryUpstreamReset { upstream }, .. }
            if *upstream == ExecutionVertexId { job_vertex: "source".into(), subtask: 0 }
    ));
    // Once: the next reset of the source resets only itself.
    let again = s.reset(at(0, 1, 1), failover("y"), "failover");
    assert_eq!(again.len(), 2, "{again:?}");
}

/// `source` (2) → forward → `middle` (2) → forward → `sink` (2), every
/// subtask finished at attempt 0.
fn forward_chain_finished() -> Scheduling {
    let edge = |from, to| JobEdge {
        from,
        to,
        pattern: DistributionPattern::Forward,
        key_names: Vec::new(),
        key: Vec::new(),
    };
    let job = JobGraph {
        vertices: vec![
            vertex("source", Parallelism::Fixed(2), true),
            vertex("middle", Parallelism::Fixed(2), false),
            vertex("sink", Parallelism::Fixed(2), false),
        ],
        edges: vec![edge(0, 1), edge(1, 2)],
        order: vec![0, 1, 2],
    };
    let mut s = Scheduling::new(ExecutionGraph::new(job), 3);
    for v in 0..3 {
        run_vertex(&mut s, v, &[1]);
    }
    s
}

fn reset_keys(effects: &[Effect]) -> Vec<(usize, u32)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Reset { attempt, .. } => Some((attempt.vertex, attempt.subtask)),
            _ => None,
        })
        .collect()
}

#[test]
fn what_read_a_re_running_source_subtask_through_forward_edges_runs_again() {
    // Re-run, source subtasks may swap splits (a lost worker resets several
    // at once): what read source 0's old records subtask for subtask would
    // keep records another subtask reads again (coordhost-sim seed 2978).
    let mut s = forward_chain_finished();
    let effects = s.reset(at(0, 0, 0), failover("lost"), "failover");
    assert_eq!(reset_keys(&effects), vec![(0, 0), (1, 0), (2, 0)]);
    assert!(matches!(
        &effects[1],
        Effect::Reset { reason, .. } if *reason == failover("lost")
    ));
    // A re-run of a middle subtask reads the same records: its sink stays.
    let effects = s.reset(at(1, 1, 0), failover("x"), "failover");
    assert_eq!(reset_keys(&effects), vec![(1, 1)]);
}

#[test]
fn the_forward_rule_goes_on_through_a_reader_already_running_again() {
    // Middle 1 runs again for its own reason first (its partition lost);
    // then source 1 runs again: the sink subtask that read middle 1's old
    // output holds records of source 1's old splits (seed 10888).
    let mut s = forward_chain_finished();
    s.reset(at(1, 1, 0), failover("lost partition"), "failover");
    let effects = s.reset(at(0, 1, 0), failover("worker lost"), "failover");
    assert_eq!(reset_keys(&effects), vec![(0, 1), (2, 1)]);
}

fn deploys(effects: &[Effect]) -> Vec<AttemptId> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Deploy(a) => Some(*a),
            _ => None,
        })
        .collect()
}

#[test]
fn at_most_room_created_vertices_are_offered_and_the_rest_stay_created_for_later() {
    let mut s = scheduling(Parallelism::Fixed(3));
    // Room for one: the first source subtask; the vertex is initialized
    // and its enumerator asked for all the same.
    let first = s.schedule_at_most(1, &[]);
    assert!(matches!(first[0], Effect::Initialized { vertex: 0, .. }));
    assert!(first.contains(&Effect::NeedEnumerator(0)));
    assert_eq!(deploys(&first), vec![at(0, 0, 0)]);
    // Not deployed (no slot after all): offered again, first.
    assert_eq!(deploys(&s.schedule_at_most(1, &[])), vec![at(0, 0, 0)]);
    s.started(at(0, 0, 0));
    assert_eq!(deploys(&s.schedule_at_most(0, &[])), Vec::new());
    assert_eq!(deploys(&s.schedule_at_most(5, &[])), vec![at(0, 1, 0)]);
    s.started(at(0, 1, 0));
    assert_eq!(deploys(&s.schedule_at_most(5, &[])), Vec::new(), "both run");
    // A reset attempt is created again under its next number, and offered.
    let resets = s.reset(at(0, 0, 0), failover("boom"), "failover");
    assert!(resets.iter().any(|e| matches!(e, Effect::Reset { .. })));
    assert_eq!(deploys(&s.schedule_at_most(5, &[])), vec![at(0, 0, 1)]);
    s.started(at(0, 0, 1));
    s.finished(at(0, 0, 1), partition(vec![1, 1, 1]));
    s.finished(at(0, 1, 0), partition(vec![1, 1, 1]));
    // The sink is initialized; its three subtasks two at a time, in
    // subtask order.
    let sink = s.schedule_at_most(2, &[]);
    assert!(
        sink.iter()
            .any(|e| matches!(e, Effect::Initialized { vertex: 1, .. }))
    );
    assert_eq!(deploys(&sink), vec![at(1, 0, 0), at(1, 1, 0)]);
    s.started(at(1, 1, 0));
    assert_eq!(
        deploys(&s.schedule_at_most(2, &[])),
        vec![at(1, 0, 0), at(1, 2, 0)]
    );
    // One that waits to be placed is offered whatever the room, after the
    // others, once.
    assert_eq!(
        deploys(&s.schedule_at_most(1, &[(1, 2), (1, 0)])),
        vec![at(1, 0, 0), at(1, 2, 0)]
    );
    // Unbounded, it offers what `schedule` offers.
    assert_eq!(s.clone().schedule(), s.schedule_at_most(usize::MAX, &[]));
}

#[test]
fn a_recovery_plan_offers_only_what_it_does_not_keep() {
    let mut s = scheduling(Parallelism::Fixed(2));
    let mut plan = RecoveryPlan::default();
    plan.initialized.push((
        0,
        VertexInit {
            parallelism: 2,
            input_ranges: Vec::new(),
        },
    ));
    plan.kept.insert(
        (0, 1),
        crate::plan::RecoveredExecution {
            attempt: 2,
            partitions: partition(vec![1, 1]),
        },
    );
    plan.reset.insert((0, 0), failover("lost"));
    plan.highest_attempt.raise((0, 0), 3);
    s.install(&mut plan);
    assert_eq!(deploys(&s.schedule_at_most(5, &[])), vec![at(0, 0, 4)]);
}
