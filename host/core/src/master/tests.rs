use std::time::Duration;

use coordhost_model::graph::{ExecutionState, Parallelism};

use super::*;
use crate::placement::Place;
use crate::test_jobs::source_to_sink;

/// `source` (2 subtasks, a split enumerator) → hash → `sink` (2), three
/// attempts each, snapshots on with a pause of `pause`.
fn core(pause: Duration) -> JobMasterCore {
    JobMasterCore::new(
        ExecutionGraph::new(source_to_sink(Parallelism::Fixed(2))),
        3,
        Duration::from_secs(5),
        SnapshotPolicy::new(true, pause),
    )
}

fn at(vertex: usize, subtask: u32, attempt: u32) -> AttemptId {
    AttemptId {
        vertex,
        subtask,
        attempt,
    }
}

fn partition(location: &str) -> Vec<ProducedPartition> {
    vec![ProducedPartition {
        edge: 0,
        location: location.into(),
        bytes_per_subpartition: vec![8, 8].into(),
    }]
}

fn failover(message: &str) -> ResetReason {
    ResetReason::Failover {
        message: message.into(),
    }
}

fn retried() -> FailureCause {
    FailureCause {
        permanent: false,
        lost_input_of: None,
    }
}

/// The attempts `actions` deploy.
fn deploys(actions: &[Action]) -> Vec<AttemptId> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Schedule(Effect::Deploy(a)) => Some(*a),
            _ => None,
        })
        .collect()
}

/// The attempts `actions` reset, with their kinds.
fn resets(actions: &[Action]) -> Vec<(AttemptId, &'static str)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Schedule(Effect::Reset { attempt, kind, .. }) => Some((*attempt, *kind)),
            _ => None,
        })
        .collect()
}

/// Carries out a finish's one action: its record is appended.
fn record(c: &mut JobMasterCore, actions: Vec<Action>) {
    let Ok(
        [
            Action::RecordFinished {
                attempt,
                partitions,
                ..
            },
        ],
    ) = <[Action; 1]>::try_from(actions)
    else {
        panic!("a finish asks for its record");
    };
    assert_eq!(
        c.step(
            Duration::ZERO,
            Input::FinishRecorded {
                attempt,
                partitions,
            },
        ),
        Vec::new()
    );
}

/// Schedules and starts every offered attempt; returns them.
fn start_offered(c: &mut JobMasterCore) -> Vec<AttemptId> {
    let started = deploys(&c.schedule(usize::MAX));
    for &a in &started {
        c.sched.started(a);
    }
    started
}

#[test]
fn a_finish_is_recorded_before_anything_is_acted_on_and_carries_a_snapshot_when_one_is_due() {
    let mut c = core(Duration::from_secs(3600));
    assert_eq!(start_offered(&mut c), vec![at(0, 0, 0), at(0, 1, 0)]);

    // A source subtask's finish carries a snapshot whatever the pause (its
    // enumerator's assignment changed); nothing is scheduled with it.
    let first = c.step(
        Duration::from_millis(10),
        Input::Finished {
            attempt: at(0, 0, 0),
            partitions: partition("a"),
        },
    );
    assert_eq!(
        first,
        vec![Action::RecordFinished {
            attempt: at(0, 0, 0),
            partitions: partition("a"),
            snapshot_of: Some(BTreeSet::from([0])),
            done: (1, 2),
        }]
    );
    // Not finished in the graph until it is recorded.
    assert_eq!(
        c.graph().vertices[0].executions[0].state,
        ExecutionState::Running
    );
    record(&mut c, first);
    c.snapshots.taken(Duration::from_millis(10));
    let second = c.step(
        Duration::from_millis(20),
        Input::Finished {
            attempt: at(0, 1, 0),
            partitions: partition("b"),
        },
    );
    record(&mut c, second);
    c.snapshots.taken(Duration::from_millis(20));
    assert_eq!(
        c.graph().vertices[0].executions[1].state,
        ExecutionState::Finished
    );
    // Once the group is durable, the driver schedules: the consumer.
    assert_eq!(start_offered(&mut c), vec![at(1, 0, 0), at(1, 1, 0)]);

    // A sink subtask that produced nothing and does not complete its
    // vertex waits for the pause ...
    let sink = c.step(
        Duration::from_millis(30),
        Input::Finished {
            attempt: at(1, 0, 0),
            partitions: Vec::new(),
        },
    );
    assert!(matches!(
        sink.as_slice(),
        [Action::RecordFinished {
            snapshot_of: None,
            done: (1, 2),
            ..
        }]
    ));
    record(&mut c, sink);
    // ... the one that completes it does not.
    let last = c.step(
        Duration::from_millis(40),
        Input::Finished {
            attempt: at(1, 1, 0),
            partitions: Vec::new(),
        },
    );
    assert!(matches!(
        last.as_slice(),
        [Action::RecordFinished {
            snapshot_of: Some(_),
            done: (2, 2),
            ..
        }]
    ));
    record(&mut c, last);
    // A report of an attempt that is no longer running changes nothing.
    assert_eq!(
        c.step(
            Duration::from_millis(50),
            Input::Finished {
                attempt: at(0, 1, 0),
                partitions: partition("c"),
            },
        ),
        Vec::new()
    );
    assert_eq!(
        c.graph().vertices[0].executions[1].partitions,
        partition("b")
    );
}

#[test]
fn a_failed_attempt_is_told_reset_and_deployed_again_until_its_last_attempt_fails_the_job() {
    let mut c = core(Duration::ZERO);
    start_offered(&mut c);
    for attempt in 0..2 {
        let out = c.step(
            Duration::ZERO,
            Input::Failed {
                attempt: at(0, 1, attempt),
                cause: retried(),
                reason: failover("boom"),
            },
        );
        assert_eq!(
            out.first(),
            Some(&Action::AttemptFailed {
                attempt: at(0, 1, attempt),
                worker: None,
                last: false,
            })
        );
        assert_eq!(resets(&out), vec![(at(0, 1, attempt), "failover")]);
        // Nothing is deployed with the decision: the driver schedules next.
        assert!(deploys(&out).is_empty());
        assert_eq!(
            deploys(&c.schedule(usize::MAX)),
            vec![at(0, 1, attempt + 1)]
        );
        c.sched.started(at(0, 1, attempt + 1));
    }
    let out = c.step(
        Duration::ZERO,
        Input::Failed {
            attempt: at(0, 1, 2),
            cause: retried(),
            reason: failover("boom"),
        },
    );
    assert_eq!(
        out,
        vec![
            Action::AttemptFailed {
                attempt: at(0, 1, 2),
                worker: None,
                last: true,
            },
            Action::FailJob(JobFailure::Exhausted {
                used: at(0, 1, 2),
                max_attempts: 3,
            }),
        ]
    );
}

#[test]
fn invalid_data_fails_the_job_at_once_and_a_stale_failure_is_ignored() {
    let mut c = core(Duration::ZERO);
    start_offered(&mut c);
    assert_eq!(
        c.step(
            Duration::ZERO,
            Input::Failed {
                attempt: at(0, 0, 7),
                cause: retried(),
                reason: failover("stale"),
            },
        ),
        Vec::new()
    );
    let out = c.step(
        Duration::ZERO,
        Input::Failed {
            attempt: at(0, 0, 0),
            cause: FailureCause {
                permanent: true,
                lost_input_of: None,
            },
            reason: failover("bad bytes"),
        },
    );
    assert_eq!(
        out.last(),
        Some(&Action::FailJob(JobFailure::InvalidData {
            attempt: at(0, 0, 0)
        }))
    );
    assert!(resets(&out).is_empty());
}

#[test]
fn a_refused_deploy_runs_again_elsewhere_without_costing_an_attempt() {
    let mut c = core(Duration::ZERO);
    let a = at(0, 0, 0);
    assert!(deploys(&c.schedule(usize::MAX)).contains(&a));
    let Place::On { worker, .. } = c
        .placement
        .place((0, 0), Duration::ZERO, |_| Some("w1".to_owned()))
    else {
        panic!("w1 is alive");
    };
    c.placement.deployed(a, worker);
    c.sched.started(a);
    let out = c.step(
        Duration::from_millis(5),
        Input::DeployRefused {
            attempt: a,
            worker: "w1".into(),
            why: "worker `w1` refused the Deploy".into(),
        },
    );
    assert_eq!(resets(&out), vec![(a, "not-placed")]);
    let Some(Action::Schedule(Effect::Reset { reason, .. })) = out.first() else {
        panic!("{out:?}");
    };
    assert_eq!(
        reason,
        &failover("not placed: worker `w1` refused the Deploy")
    );
    assert!(deploys(&c.schedule(usize::MAX)).contains(&at(0, 0, 1)));
    assert_eq!(c.graph().vertices[0].executions[0].attempts_started, 0);
    // Its next attempt (waiting since the refusal) avoids w1 while another
    // worker is alive.
    let placed = c
        .placement
        .place((0, 0), Duration::from_millis(6), |avoid| {
            assert!(avoid.contains("w1"));
            Some("w2".to_owned())
        });
    assert_eq!(
        placed,
        Place::On {
            worker: "w2".into(),
            waited: true
        }
    );
    // A refusal of an attempt already superseded changes nothing.
    assert_eq!(
        c.step(
            Duration::from_millis(7),
            Input::DeployRefused {
                attempt: a,
                worker: "w1".into(),
                why: "late".into(),
            },
        ),
        Vec::new()
    );
}

#[test]
fn a_lost_worker_resets_the_finished_producers_whose_output_is_still_needed() {
    let mut c = core(Duration::ZERO);
    start_offered(&mut c);
    for s in 0..2 {
        let out = c.step(
            Duration::ZERO,
            Input::Finished {
                attempt: at(0, s, 0),
                partitions: partition(&format!("p{s}")),
            },
        );
        record(&mut c, out);
    }
    start_offered(&mut c);
    let out = c.step(
        Duration::ZERO,
        Input::WorkerLost {
            held: vec![at(0, 1, 0)],
            reason: failover("worker `w1`, which held its partitions, was lost"),
        },
    );
    assert_eq!(resets(&out), vec![(at(0, 1, 0), "failover")]);
    assert_eq!(deploys(&c.schedule(usize::MAX)), vec![at(0, 1, 1)]);
}

#[test]
fn a_tick_offers_waiting_vertices_again_and_one_placed_at_the_deadline_is_not_overdue() {
    let mut c = core(Duration::ZERO);
    // Nothing waits: a tick does nothing, and nothing is overdue.
    assert_eq!(c.tick(usize::MAX), Vec::new());
    assert_eq!(c.overdue(Duration::from_secs(60)), None);
    for a in deploys(&c.schedule(usize::MAX)) {
        assert!(matches!(
            c.placement
                .place((a.vertex, a.subtask), Duration::ZERO, |_| None),
            Place::NoWorker { .. }
        ));
    }
    assert_eq!(deploys(&c.tick(usize::MAX)), vec![at(0, 0, 0), at(0, 1, 0)]);
    assert_eq!(c.overdue(Duration::from_secs(1)), None);
    // At the deadline a worker has registered for subtask 1 only: the tick
    // offers both, the driver places subtask 1, and only subtask 0 is
    // overdue.
    let deadline = Duration::from_secs(5);
    for a in deploys(&c.tick(usize::MAX)) {
        let worker = (a.subtask == 1).then(|| "w1".to_owned());
        c.placement
            .place((a.vertex, a.subtask), deadline, |_| worker.clone());
    }
    assert_eq!(
        c.overdue(deadline),
        Some(JobFailure::NoWorker {
            vertex: 0,
            subtask: 0,
            waited: deadline,
            why: crate::placement::NO_WORKER.to_owned(),
        })
    );
}

#[test]
fn a_vertex_whose_deploy_was_refused_is_offered_again_whatever_the_room() {
    let mut c = core(Duration::ZERO);
    // Room for one: subtask 0 is placed and started; subtask 1 stays created.
    let first = deploys(&c.schedule(1));
    assert_eq!(first, vec![at(0, 0, 0)]);
    c.sched.started(at(0, 0, 0));
    c.placement.deployed(at(0, 0, 0), "w1".to_owned());
    // Its Deploy is refused: it is reset and waits out a pause on `w1`.
    let out = c.step(
        Duration::ZERO,
        Input::DeployRefused {
            attempt: at(0, 0, 0),
            worker: "w1".to_owned(),
            why: "worker `w1` refused".to_owned(),
        },
    );
    assert_eq!(resets(&out), vec![(at(0, 0, 0), "not-placed")]);
    assert!(c.placement.is_waiting());
    // With no room (the other slot's attempt runs), the waiting vertex is
    // offered by the tick all the same, and the created one is not.
    assert_eq!(deploys(&c.tick(0)), vec![at(0, 0, 1)]);
    assert_eq!(deploys(&c.schedule(0)), vec![at(0, 0, 1)]);
}
