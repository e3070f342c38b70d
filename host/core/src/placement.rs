//! Deployment's bookkeeping on worker processes: which worker the next
//! attempt of an execution vertex goes to, which execution vertices wait for
//! a worker and since when, and how long a vertex whose `Deploy` was refused
//! pauses before it is tried on the same worker again (Flink's slot requests
//! with `slot.request.timeout`; Ballista keeps the same in its executor
//! manager). Time is what the caller hands in (a [`crate::clock::Clock`]
//! reading), so every decision is a function of state and input.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use crate::executor::WorkerId;
use crate::graph::AttemptId;

/// An execution vertex: (job vertex index, subtask).
pub type VertexKey = (usize, u32);

/// Why an execution vertex waits when no worker is alive.
pub const NO_WORKER: &str = "no worker is registered";

/// The first pause after a refused `Deploy`; it doubles with each refusal
/// in a row, up to [`MAX_PAUSE`].
pub const FIRST_PAUSE: Duration = Duration::from_millis(100);
/// The longest pause after refused `Deploy`s.
pub const MAX_PAUSE: Duration = Duration::from_secs(1);

/// What [`Placement::place`] decided for an execution vertex.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// Deploy its next attempt on `worker`; `waited`: it had been waiting.
    On {
        /// The worker.
        worker: WorkerId,
        /// Whether it had waited to be placed.
        waited: bool,
    },
    /// No worker is alive: it waits. `newly`: it did not wait for this
    /// reason before; `first`: no other vertex waits for it either (said
    /// once, loudly).
    NoWorker {
        /// It starts waiting for a worker now.
        newly: bool,
        /// No other vertex waits for a worker.
        first: bool,
    },
    /// Its `Deploy` was refused a moment ago and only that worker is
    /// there: it waits out the pause.
    Pause,
}

/// An execution vertex that waits for a worker.
#[derive(Debug, Clone)]
struct Unplaced {
    /// Not tried on a worker it failed on before this.
    retry_at: Duration,
    /// Why it waits, for the log and the error when the wait ends.
    why: String,
}

/// The placement state of one run.
#[derive(Debug)]
pub struct Placement {
    /// The worker each attempt in flight was deployed to.
    placed_on: HashMap<AttemptId, WorkerId>,
    /// Per execution vertex: the workers one of its attempts failed on (or
    /// whose `Deploy` failed); its next attempt prefers another.
    failed_on: HashMap<VertexKey, BTreeSet<WorkerId>>,
    /// Execution vertices waiting for a worker.
    unplaced: BTreeMap<VertexKey, Unplaced>,
    /// Since when each execution vertex has been waiting: set when it first
    /// could not be placed, kept through failed `Deploy`s, cleared when one
    /// of its attempts finishes or fails after being placed.
    waiting_since: HashMap<VertexKey, Duration>,
    /// Per execution vertex: its `Deploy`s refused in a row (kept through
    /// placements, cleared with `waiting_since`).
    refusals: HashMap<VertexKey, u32>,
    /// The longest wait for a worker (`job.slot-request-timeout-ms`).
    slot_request_timeout: Duration,
}

impl Placement {
    /// Nothing placed, nothing waiting; a vertex may wait at most
    /// `slot_request_timeout` for a worker.
    #[must_use]
    pub fn new(slot_request_timeout: Duration) -> Self {
        Self {
            placed_on: HashMap::new(),
            failed_on: HashMap::new(),
            unplaced: BTreeMap::new(),
            waiting_since: HashMap::new(),
            refusals: HashMap::new(),
            slot_request_timeout,
        }
    }

    /// The longest wait for a worker.
    #[must_use]
    pub fn slot_request_timeout(&self) -> Duration {
        self.slot_request_timeout
    }

    /// Where the next attempt of `key` goes, at time `now`: `pick` is the
    /// executor's choice of a live worker, given the workers to avoid
    /// ([`crate::executor::Executor::pick_worker`]). A worker it failed on
    /// is taken only when no other is alive, and then only after the pause
    /// its last refusal set.
    pub fn place(
        &mut self,
        key: VertexKey,
        now: Duration,
        pick: impl FnOnce(&BTreeSet<WorkerId>) -> Option<WorkerId>,
    ) -> Place {
        let avoid = self.failed_on.get(&key).cloned().unwrap_or_default();
        match pick(&avoid) {
            Some(worker)
                if !avoid.contains(&worker)
                    || self.unplaced.get(&key).is_none_or(|u| u.retry_at <= now) =>
            {
                let waited = self.unplaced.remove(&key).is_some();
                Place::On { worker, waited }
            }
            Some(_) => Place::Pause,
            None => {
                self.waiting_since.entry(key).or_insert(now);
                let first = self.unplaced.values().all(|u| u.why != NO_WORKER);
                let u = self.unplaced.entry(key).or_insert_with(|| Unplaced {
                    retry_at: now,
                    why: String::new(),
                });
                let newly = u.why != NO_WORKER;
                if newly {
                    NO_WORKER.clone_into(&mut u.why);
                }
                Place::NoWorker { newly, first }
            }
        }
    }

    /// `attempt` was handed to `worker`.
    pub fn deployed(&mut self, attempt: AttemptId, worker: WorkerId) {
        self.placed_on.insert(attempt, worker);
    }

    /// `attempt` finished: its vertex no longer waits or counts refusals.
    pub fn finished(&mut self, attempt: AttemptId) {
        let key = (attempt.vertex, attempt.subtask);
        self.placed_on.remove(&attempt);
        self.waiting_since.remove(&key);
        self.refusals.remove(&key);
    }

    /// `attempt` failed; `current`: it is its vertex's current attempt (a
    /// superseded one's end changes nothing else). Its next attempt
    /// prefers another worker. The worker it ran on, if it was placed.
    pub fn failed(&mut self, attempt: AttemptId, current: bool) -> Option<WorkerId> {
        let worker = self.placed_on.remove(&attempt);
        if current {
            let key = (attempt.vertex, attempt.subtask);
            self.waiting_since.remove(&key);
            self.refusals.remove(&key);
            if let Some(w) = &worker {
                self.failed_on.entry(key).or_default().insert(w.clone());
            }
        }
        worker
    }

    /// The `Deploy` of `attempt` to `worker` failed at `now` (`why`, for
    /// the error should the wait end): its vertex prefers another worker,
    /// and waits 100 ms (doubling with each refusal in a row, at most 1 s)
    /// before it is sent back to this one.
    pub fn deploy_failed(
        &mut self,
        attempt: AttemptId,
        worker: WorkerId,
        why: String,
        now: Duration,
    ) {
        self.placed_on.remove(&attempt);
        let key = (attempt.vertex, attempt.subtask);
        self.failed_on.entry(key).or_default().insert(worker);
        self.waiting_since.entry(key).or_insert(now);
        let refusals = self.refusals.entry(key).or_default();
        *refusals = refusals.saturating_add(1);
        let pause = (FIRST_PAUSE * (1 << (*refusals - 1).min(4))).min(MAX_PAUSE);
        self.unplaced.insert(
            key,
            Unplaced {
                retry_at: now + pause,
                why,
            },
        );
    }

    /// `attempt` ended without a report of its own (its vertex was reset):
    /// it is no longer placed anywhere.
    pub fn forget(&mut self, attempt: AttemptId) {
        self.placed_on.remove(&attempt);
    }

    /// The execution vertices that wait for a worker (or out a refused
    /// `Deploy`'s pause), in index order.
    pub fn waiting(&self) -> impl Iterator<Item = VertexKey> + '_ {
        self.unplaced.keys().copied()
    }

    /// Whether some execution vertex waits for a worker.
    #[must_use]
    pub fn is_waiting(&self) -> bool {
        !self.unplaced.is_empty()
    }

    /// The first execution vertex (in index order) that has waited for a
    /// worker at least the slot request timeout at `now`, with why it waits.
    #[must_use]
    pub fn overdue(&self, now: Duration) -> Option<(VertexKey, &str)> {
        self.unplaced.iter().find_map(|(key, u)| {
            let since = self.waiting_since.get(key)?;
            (now.saturating_sub(*since) >= self.slot_request_timeout)
                .then_some((*key, u.why.as_str()))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(vertex: usize, subtask: u32, attempt: u32) -> AttemptId {
        AttemptId {
            vertex,
            subtask,
            attempt,
        }
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_vertex_waits_while_no_worker_is_alive_and_times_out() {
        let mut p = Placement::new(ms(500));
        assert_eq!(
            p.place((0, 0), ms(0), |_| None),
            Place::NoWorker {
                newly: true,
                first: true
            }
        );
        assert_eq!(
            p.place((0, 1), ms(10), |_| None),
            Place::NoWorker {
                newly: true,
                first: false
            }
        );
        assert_eq!(
            p.place((0, 0), ms(20), |_| None),
            Place::NoWorker {
                newly: false,
                first: false
            }
        );
        assert!(p.is_waiting());
        assert_eq!(p.overdue(ms(499)), None);
        assert_eq!(p.overdue(ms(500)), Some(((0, 0), NO_WORKER)));
        // A worker registers: both are placed.
        let w = |_: &BTreeSet<WorkerId>| Some("w1".to_owned());
        assert_eq!(
            p.place((0, 0), ms(30), w),
            Place::On {
                worker: "w1".into(),
                waited: true
            }
        );
        assert_eq!(
            p.place((0, 1), ms(30), w),
            Place::On {
                worker: "w1".into(),
                waited: true
            }
        );
        assert!(!p.is_waiting());
    }

    #[test]
    fn a_refused_deploy_avoids_its_worker_and_pauses_when_it_is_the_only_one() {
        let mut p = Placement::new(Duration::from_secs(60));
        let a = attempt(1, 2, 0);
        p.deployed(a, "w1".into());
        p.deploy_failed(a, "w1".into(), "worker `w1` refused".into(), ms(1000));
        // Another worker is alive: taken at once.
        let mut seen = BTreeSet::new();
        let place = p.place((1, 2), ms(1000), |avoid| {
            seen.clone_from(avoid);
            Some("w2".to_owned())
        });
        assert_eq!(seen, BTreeSet::from(["w1".to_owned()]));
        assert_eq!(
            place,
            Place::On {
                worker: "w2".into(),
                waited: true
            }
        );
        // Refused again, only w1 left: 200 ms pause after the second refusal.
        p.deploy_failed(attempt(1, 2, 1), "w2".into(), "refused".into(), ms(2000));
        let only_w2 = |_: &BTreeSet<WorkerId>| Some("w2".to_owned());
        assert_eq!(p.place((1, 2), ms(2199), only_w2), Place::Pause);
        assert!(matches!(
            p.place((1, 2), ms(2200), only_w2),
            Place::On { .. }
        ));
    }

    #[test]
    fn pauses_double_up_to_a_second_and_a_finish_clears_them() {
        let mut p = Placement::new(Duration::from_secs(60));
        let only = |_: &BTreeSet<WorkerId>| Some("w".to_owned());
        for (n, pause) in [(0, 100), (1, 200), (2, 400), (3, 800), (4, 1000), (5, 1000)] {
            p.deploy_failed(attempt(0, 0, n), "w".into(), "refused".into(), ms(0));
            assert_eq!(p.place((0, 0), ms(pause - 1), only), Place::Pause, "{n}");
            assert!(
                matches!(p.place((0, 0), ms(pause), only), Place::On { .. }),
                "{n}"
            );
        }
        p.finished(attempt(0, 0, 6));
        p.deploy_failed(attempt(0, 0, 7), "w".into(), "refused".into(), ms(0));
        assert!(matches!(p.place((0, 0), ms(100), only), Place::On { .. }));
    }

    #[test]
    fn a_failure_on_a_worker_is_remembered_only_for_the_current_attempt() {
        let mut p = Placement::new(ms(500));
        p.deployed(attempt(0, 0, 0), "w1".into());
        p.deployed(attempt(0, 1, 0), "w1".into());
        assert_eq!(p.failed(attempt(0, 0, 0), true), Some("w1".into()));
        assert_eq!(p.failed(attempt(0, 1, 0), false), Some("w1".into()));
        let mut avoided = Vec::new();
        for key in [(0, 0), (0, 1)] {
            p.place(key, ms(0), |avoid| {
                avoided.push(avoid.len());
                Some("w2".to_owned())
            });
        }
        assert_eq!(avoided, [1, 0]);
        assert_eq!(p.failed(attempt(0, 2, 0), true), None, "never placed");
    }
}
