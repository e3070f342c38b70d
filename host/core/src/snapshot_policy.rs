//! When batch snapshots are taken, and of which source vertices (FLIP-383,
//! "recording"): one concern of the JobMaster, kept apart from it as
//! Ballista keeps its scheduler state in managers of one concern each.
//!
//! A batch snapshot (the shuffle master's state plus, per source vertex
//! whose split assignment changed since the last one, its enumerator's
//! state and history) rides on the `ExecutionFinished` record of the
//! finish that triggered it. One is due when a job vertex completed or
//! when the minimum pause since the last one passed; none is taken while
//! recording is off (recovery disabled, or a shuffle master without batch
//! snapshots).

use std::collections::BTreeSet;
use std::time::Duration;

/// The snapshot policy and its bookkeeping. Times are a [`Clock`]'s
/// readings (`crate::clock`).
///
/// [`Clock`]: crate::clock::Clock
#[derive(Debug, Clone)]
pub struct SnapshotPolicy {
    enabled: bool,
    min_pause: Duration,
    /// When the last batch snapshot was taken.
    last: Option<Duration>,
    /// Source vertices whose coordinator changed since the last snapshot.
    touched: BTreeSet<usize>,
    /// Source vertices whose oversized snapshot was already reported (one
    /// warning per vertex, however often it is refused).
    oversized_reported: BTreeSet<usize>,
}

impl SnapshotPolicy {
    /// A policy that takes snapshots if `enabled`, at most one per
    /// `min_pause` before a job vertex completes.
    #[must_use]
    pub fn new(enabled: bool, min_pause: Duration) -> Self {
        Self {
            enabled,
            min_pause,
            last: None,
            touched: BTreeSet::new(),
            oversized_reported: BTreeSet::new(),
        }
    }

    /// Whether batch snapshots are taken at all.
    #[must_use]
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Source vertex `vertex`'s split assignment changed: the next snapshot
    /// takes its coordinator's state.
    pub fn touch(&mut self, vertex: usize) {
        self.touched.insert(vertex);
    }

    /// Starts the snapshot a finish of job vertex `vertex` carries, at
    /// `now`, if one is due ([`SnapshotPolicy::begin`]). A finish that
    /// plugin state must reflect carries one whatever the minimum pause
    /// (issue 26 item 7, docs/recovery.md "Recording"): a source subtask's
    /// (`source`: its enumerator's split assignment, touched here; a finish
    /// the enumerator's latest snapshot does not reflect runs again after a
    /// crash, recovery step 3), one that `produced` partitions (the shuffle
    /// master's registry, incremental, answers recovery step 6), and one
    /// that `completes` its vertex. Only finishes that touch none of these
    /// (sink subtasks) wait for the pause. The JobMaster's `on_finished`
    /// and the simulator both ask this.
    pub fn begin_for_finish(
        &mut self,
        now: Duration,
        vertex: usize,
        source: bool,
        completes: bool,
        produced: bool,
    ) -> Option<BTreeSet<usize>> {
        if source {
            self.touch(vertex);
        }
        self.begin(now, completes || source || produced)
    }

    /// Starts a snapshot at `now` if one is due (`vertex_complete`, or the
    /// minimum pause passed since the last one): the source vertices to
    /// snapshot, taken out of the touched set; `None` when none is due.
    /// End it with [`SnapshotPolicy::taken`] or
    /// [`SnapshotPolicy::abandon`].
    pub fn begin(&mut self, now: Duration, vertex_complete: bool) -> Option<BTreeSet<usize>> {
        let due = vertex_complete
            || self
                .last
                .is_none_or(|t| now.saturating_sub(t) >= self.min_pause);
        (self.enabled && due).then(|| std::mem::take(&mut self.touched))
    }

    /// Vertex `vertex` could not be snapshotted consistently this time (a
    /// rebuilt enumerator still holds splits a reader has): the previous
    /// snapshot stays the one recovery uses, and the vertex waits for the
    /// next.
    pub fn defer(&mut self, vertex: usize) {
        self.touched.insert(vertex);
    }

    /// The snapshot begun with `vertices` is not taken (a state too large to
    /// record): every one of them waits for the next, and the pause does
    /// not restart.
    pub fn abandon(&mut self, vertices: BTreeSet<usize>) {
        self.touched.extend(vertices);
    }

    /// Whether this is the first refusal of `vertex`'s oversized snapshot
    /// (warned once; later refusals are quieter).
    pub fn first_refusal(&mut self, vertex: usize) -> bool {
        self.oversized_reported.insert(vertex)
    }

    /// The snapshot begun was taken at `now`: the pause starts again.
    pub fn taken(&mut self, now: Duration) {
        self.last = Some(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAUSE: Duration = Duration::from_secs(1);

    fn at(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    #[test]
    fn a_snapshot_is_due_first_then_after_the_pause_or_when_a_vertex_completes() {
        let mut policy = SnapshotPolicy::new(true, PAUSE);
        policy.touch(2);
        assert_eq!(policy.begin(at(0), false), Some([2].into()));
        policy.taken(at(0));
        policy.touch(3);
        assert_eq!(policy.begin(at(999), false), None, "inside the pause");
        assert_eq!(
            policy.begin(at(999), true),
            Some([3].into()),
            "a vertex completed"
        );
        policy.taken(at(999));
        assert_eq!(policy.begin(at(1998), false), None);
        assert_eq!(
            policy.begin(at(1999), false),
            Some(BTreeSet::new()),
            "the pause passed"
        );
    }

    #[test]
    fn a_source_or_producing_finish_carries_a_snapshot_a_sink_finish_waits_for_the_pause() {
        let mut policy = SnapshotPolicy::new(true, PAUSE);
        let t0 = Duration::from_secs(10);
        assert!(policy.begin(t0, false).is_some());
        policy.taken(t0);
        let soon = t0 + PAUSE / 2;
        // A sink subtask's finish within the pause: none.
        assert_eq!(policy.begin_for_finish(soon, 2, false, false, false), None);
        // A source subtask's: due, with its vertex touched.
        assert_eq!(
            policy.begin_for_finish(soon, 0, true, false, false),
            Some(BTreeSet::from([0]))
        );
        // One that produced partitions, or completes its vertex: due.
        assert!(
            policy
                .begin_for_finish(soon, 1, false, false, true)
                .is_some()
        );
        assert!(
            policy
                .begin_for_finish(soon, 2, false, true, false)
                .is_some()
        );
    }

    #[test]
    fn deferred_and_abandoned_vertices_wait_for_the_next_snapshot() {
        let mut policy = SnapshotPolicy::new(true, PAUSE);
        policy.touch(1);
        policy.touch(4);
        let taken = policy.begin(at(0), true).expect("due");
        policy.defer(4);
        policy.taken(at(0));
        assert_eq!(policy.begin(at(999), true), Some([4].into()));
        policy.abandon([4].into());
        // Abandoned: the pause runs from the last snapshot taken (at 0),
        // and the vertex is still touched.
        assert_eq!(policy.begin(at(1000), false), Some([4].into()));
        assert_eq!(taken, [1, 4].into());
    }

    #[test]
    fn nothing_is_due_while_recording_is_off_and_a_refusal_is_first_once() {
        let mut policy = SnapshotPolicy::new(false, PAUSE);
        policy.touch(0);
        assert_eq!(policy.begin(at(5000), true), None);
        assert!(!policy.enabled());
        assert!(policy.first_refusal(0));
        assert!(!policy.first_refusal(0));
        assert!(policy.first_refusal(1));
    }
}
