//! The source coordinator: the host-side owner of one split enumerator
//! (Flink's `SourceCoordinator` with its `SplitAssignmentTracker`), without
//! the plugin host: the enumerator is behind the [`Enumerator`] trait (the
//! binary implements it over a Wasm instance, the simulator over an
//! in-process one), so the split bookkeeping that recovery depends on is
//! the same code in a run and in a simulated run.
//!
//! It drives the enumerator (`start`, `add-reader`, `handle-split-request`,
//! `add-splits-back`), applies the assignments and "no more splits" signals
//! the enumerator makes, and keeps, per reader subtask, the splits assigned
//! since the subtask's last reset (the assignment history), the splits not
//! yet handed to the reader, and the "no more splits" flag. When a subtask
//! is reset (failover, PartitionNotFound of a finished source, FLIP-383
//! recovery) its whole history goes back to the enumerator and its flag is
//! cleared, so every split is read exactly once by a finished attempt.
//! Readers pull: a request is answered at once when a split or the end is
//! known, and otherwise waits for a later assignment.
//!
//! With a `max-task-bytes` cap (docs/recovery.md, "Source tasks sized by
//! input"), the host itself answers "no more splits" to a reader that holds
//! at least that many input bytes and has nothing assigned left to read,
//! but never to the last subtask that has not been answered so: that one
//! reads until the enumerator says there is nothing left, so no split can
//! stay unread.
//!
//! An enumerator whose store was rebuilt after a fault (`on-trap =
//! "rebuild"`) knows the history as of its last batch snapshot: the
//! coordinator reconciles it ([`SourceCoordinator`]'s `resync`): splits
//! assigned since are "ghosts" it would hand out again (dropped when it
//! does), splits it believes assigned that no reader holds go back to it.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use crate::history::{CoordinatorSnapshot, ReaderState};
use crate::value::{SplitData, SplitPayloadData};

/// Most splits the host keeps assigned for one split enumerator at once
/// (its assignment history; splits given back no longer count).
pub const MAX_SPLITS_TOTAL: u64 = 1_000_000;

/// Most split bytes ([`split_bytes`]: ids, paths and inline text) the host
/// keeps assigned for one split enumerator at once: 256 MiB.
pub const MAX_SPLIT_BYTES_TOTAL: u64 = 256 << 20;

/// A call the enumerator made back into the host during one call (in the
/// plugin interface, through the imported `enumerator-context`), in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnumeratorAction {
    /// `assign-splits`: these splits now belong to reader `subtask`.
    Assign {
        /// The reader subtask.
        subtask: u32,
        /// The splits, in assignment order.
        splits: Vec<SplitData>,
    },
    /// `signal-no-more-splits`: reader `subtask` gets nothing more.
    NoMoreSplits {
        /// The reader subtask.
        subtask: u32,
    },
}

/// A split enumerator as the source coordinator drives it (Flink's
/// `SplitEnumerator`). Each call returns the [`EnumeratorAction`]s the
/// enumerator took during it, already checked against the parallelism.
pub trait Enumerator {
    /// What a call fails with.
    type Error: std::error::Error + Send + Sync + 'static;

    /// The enumerator's name (the plugin's name in the job file).
    fn name(&self) -> &str;
    /// Whether it supports batch snapshots.
    fn supports_batch_snapshot(&self) -> bool;
    /// `start`: discover splits. Called once after creation or restore.
    ///
    /// # Errors
    /// The enumerator's failure.
    fn start(&mut self) -> Result<Vec<EnumeratorAction>, Self::Error>;
    /// `add-reader`: reader `subtask` starts (a new attempt).
    ///
    /// # Errors
    /// The enumerator's failure.
    fn add_reader(&mut self, subtask: u32) -> Result<Vec<EnumeratorAction>, Self::Error>;
    /// `handle-split-request`: reader `subtask` asks for work.
    ///
    /// # Errors
    /// The enumerator's failure.
    fn handle_split_request(&mut self, subtask: u32) -> Result<Vec<EnumeratorAction>, Self::Error>;
    /// `add-splits-back`: the splits of reset reader `subtask` return.
    ///
    /// # Errors
    /// The enumerator's failure.
    fn add_splits_back(
        &mut self,
        splits: Vec<SplitData>,
        subtask: u32,
    ) -> Result<Vec<EnumeratorAction>, Self::Error>;
    /// `snapshot-state` for batch snapshot `checkpoint_id` (-1).
    ///
    /// # Errors
    /// The enumerator's failure.
    fn snapshot_state(&mut self, checkpoint_id: i64) -> Result<Vec<u8>, Self::Error>;
    /// How many splits it has not assigned yet.
    ///
    /// # Errors
    /// The enumerator's failure.
    fn unassigned_splits(&mut self) -> Result<u64, Self::Error>;
    /// After a call failed with an error for which [`Enumerator::was_rebuilt`]
    /// holds: what the rebuilt enumerator did when it was started; `None`
    /// when no rebuild happened since the last time this was asked.
    fn take_rebuild(&mut self) -> Option<Vec<EnumeratorAction>>;
    /// Whether a rebuild restores a batch snapshot (else it starts afresh).
    fn has_snapshot(&self) -> bool;
    /// Whether `error` is a fault after which the enumerator was rebuilt
    /// and may be called again.
    fn was_rebuilt(error: &Self::Error) -> bool;
    /// The error for a breach of the enumerator contract that the host
    /// found in `call` (a split id assigned twice, too many splits held).
    fn protocol_error(&self, call: &'static str, reason: String) -> Self::Error;
}

/// Bytes of a split as the host counts them against
/// [`MAX_SPLIT_BYTES_TOTAL`]: its id and its payload (a path or the
/// inline text).
pub fn split_bytes(s: &SplitData) -> u64 {
    let payload = match &s.payload {
        SplitPayloadData::FileRange { path, .. } => path.as_os_str().len(),
        SplitPayloadData::Inline(t) => t.len(),
    };
    (s.id.len() + payload) as u64
}

/// Errors of a source coordinator: its enumerator plugin failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CoordinatorError<E: std::error::Error + 'static> {
    /// A call into the enumerator failed.
    #[error("source coordinator of vertex `{vertex}`: {source}")]
    Plugin {
        /// The source job vertex id.
        vertex: String,
        /// The enumerator's error (names the plugin and the call).
        source: E,
    },
    /// The enumerator faulted again after its store was rebuilt, before it
    /// made any progress (a split assigned that no reader had, "no more
    /// splits", a registered reader, or a batch snapshot): rebuilding it
    /// again would loop forever.
    #[error(
        "source coordinator of vertex `{vertex}`: the split enumerator faulted again after its store was rebuilt, before it made any progress; not rebuilt again: {source}"
    )]
    FaultedAgain {
        /// The source job vertex id.
        vertex: String,
        /// The plugin's name (the message leaves it to `source`, which
        /// names it).
        plugin: String,
        /// The last fault (boxed: it is large and rare).
        source: Box<E>,
    },
    /// The enumerator's snapshot could not be taken or read.
    #[error("source coordinator of vertex `{vertex}`: snapshot: {reason}")]
    Snapshot {
        /// The source job vertex id.
        vertex: String,
        /// What is wrong.
        reason: String,
    },
}

/// The answer to one reader's split request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SplitAnswer {
    /// Read this split next.
    Split(SplitData),
    /// Nothing more will come.
    NoMoreSplits,
}

/// The host side of one source job vertex.
pub struct SourceCoordinator<E: Enumerator> {
    vertex: String,
    enumerator: E,
    readers: Vec<ReaderState>,
    waiting: BTreeSet<u32>,
    /// The history as it was when the enumerator's last batch snapshot was
    /// taken (or restored; empty for a fresh enumerator) — what a store
    /// rebuilt after a trap knows about — kept as the difference from
    /// `readers`: the splits assigned then to each reader whose assignment
    /// changed since, as they were; any other reader's are its current
    /// ones ([`SourceCoordinator::at_snapshot`]). Issue 29: a whole copy of
    /// the history per restore and per snapshot was an eighth of a
    /// million-vertex restart's memory, and is needed only after a trap.
    changed_since_snapshot: BTreeMap<u32, Vec<SplitData>>,
    /// Ids in `ghosts` when the last snapshot was taken.
    ghosts_at_snapshot: BTreeSet<String>,
    /// Splits the enumerator holds as unassigned although the history says
    /// a reader has them (after a rebuild); when the enumerator assigns one,
    /// the host drops that assignment.
    ghosts: BTreeSet<String>,
    /// Subtasks that were assigned a ghost during the current call.
    dropped_for: BTreeSet<u32>,
    /// True from a rebuild after a fault until the enumerator makes progress
    /// (a split kept for a reader, "no more splits", a registered reader, a
    /// batch snapshot); a fault while it is true fails the job
    /// ([`CoordinatorError::FaultedAgain`]).
    rebuilt_without_progress: bool,
    /// Ids of the splits in the assignment history (assigned and not given
    /// back): the same id again breaks the contract.
    held: HashSet<String>,
    /// Bytes of the splits in the history (see `plugin::split_bytes`).
    held_bytes: u64,
    /// Subtasks whose reader was answered "no more splits" since its last
    /// reset (or, restored, whose history says so).
    ended: BTreeSet<u32>,
    /// `max-task-bytes`: a reader holding at least this many input bytes
    /// is told "no more splits" by the host, unless it is the last subtask
    /// not yet told so. `None`: readers read until the enumerator ends them.
    max_task_bytes: Option<u64>,
}

impl<E: Enumerator> SourceCoordinator<E> {
    /// A coordinator for `parallelism` readers over the fresh `enumerator`
    /// (made by `make`), started.
    ///
    /// # Errors
    ///
    /// [`CoordinatorError::Plugin`] if making or starting it fails.
    pub fn start(
        vertex: &str,
        parallelism: u32,
        max_task_bytes: Option<u64>,
        make: impl FnOnce() -> Result<E, E::Error>,
    ) -> Result<Self, CoordinatorError<E::Error>> {
        let enumerator = make().map_err(|source| CoordinatorError::Plugin {
            vertex: vertex.to_string(),
            source,
        })?;
        let mut c = Self::with_history(
            vertex,
            enumerator,
            vec![ReaderState::default(); parallelism as usize],
            max_task_bytes,
        );
        c.start_enumerator()?;
        Ok(c)
    }

    /// A coordinator restored from a [`CoordinatorSnapshot`]: the
    /// enumerator restored by `restore` from the snapshot's state, then
    /// started (FLIP-383 recovery, docs/recovery.md step 4). The history
    /// comes back as it was; reset the unfinished subtasks afterwards so
    /// their splits return. `restore` is not called when the snapshot does
    /// not fit the parallelism.
    ///
    /// # Errors
    ///
    /// [`CoordinatorError::Plugin`] if restoring or starting fails;
    /// [`CoordinatorError::Snapshot`] if the history does not fit the parallelism.
    pub fn restore(
        vertex: &str,
        parallelism: u32,
        snapshot: CoordinatorSnapshot,
        max_task_bytes: Option<u64>,
        restore: impl FnOnce(&[u8]) -> Result<E, E::Error>,
    ) -> Result<Self, CoordinatorError<E::Error>> {
        if snapshot.readers.len() != parallelism as usize {
            return Err(CoordinatorError::Snapshot {
                vertex: vertex.to_string(),
                reason: format!(
                    "{} readers in the snapshot, parallelism {parallelism}",
                    snapshot.readers.len()
                ),
            });
        }
        let enumerator =
            restore(&snapshot.enumerator).map_err(|source| CoordinatorError::Plugin {
                vertex: vertex.to_string(),
                source,
            })?;
        let mut c = Self::with_history(vertex, enumerator, snapshot.readers, max_task_bytes);
        c.start_enumerator()?;
        Ok(c)
    }

    fn with_history(
        vertex: &str,
        enumerator: E,
        readers: Vec<ReaderState>,
        max_task_bytes: Option<u64>,
    ) -> Self {
        let mut held = HashSet::new();
        let mut held_bytes = 0;
        for s in readers.iter().flat_map(|r| &r.assigned) {
            held.insert(s.id.clone());
            held_bytes += split_bytes(s);
        }
        let ended = readers
            .iter()
            .enumerate()
            .filter(|(_, r)| r.no_more_splits)
            .map(|(s, _)| s as u32)
            .collect();
        Self {
            vertex: vertex.to_string(),
            enumerator,
            changed_since_snapshot: BTreeMap::new(),
            readers,
            waiting: BTreeSet::new(),
            ghosts_at_snapshot: BTreeSet::new(),
            ghosts: BTreeSet::new(),
            dropped_for: BTreeSet::new(),
            rebuilt_without_progress: false,
            held,
            held_bytes,
            ended,
            max_task_bytes,
        }
    }

    /// The enumerator.
    pub fn enumerator(&self) -> &E {
        &self.enumerator
    }

    /// The enumerator's name.
    pub fn plugin(&self) -> &str {
        self.enumerator.name()
    }

    fn broke(&self, call: &'static str, reason: String) -> CoordinatorError<E::Error> {
        self.err(self.enumerator.protocol_error(call, reason))
    }

    fn err(&self, source: E::Error) -> CoordinatorError<E::Error> {
        CoordinatorError::Plugin {
            vertex: self.vertex.clone(),
            source,
        }
    }

    /// `start`; a fault that rebuilt the store already started the new one.
    fn start_enumerator(&mut self) -> Result<(), CoordinatorError<E::Error>> {
        match self.enumerator.start() {
            Ok(actions) => self.apply("start", actions),
            Err(e) if E::was_rebuilt(&e) => self.rebuilt(e),
            Err(e) => Err(self.err(e)),
        }
    }

    /// After fault `e` rebuilt the store: fails when the previous rebuild
    /// made no progress (the plugin would fault at the same place forever),
    /// else reconciles the new store ([`SourceCoordinator::resync`]).
    fn rebuilt(&mut self, e: E::Error) -> Result<(), CoordinatorError<E::Error>> {
        if self.rebuilt_without_progress {
            return Err(CoordinatorError::FaultedAgain {
                vertex: self.vertex.clone(),
                plugin: self.enumerator.name().to_string(),
                source: Box::new(e),
            });
        }
        self.resync()?;
        self.rebuilt_without_progress = true;
        Ok(())
    }

    /// Calls the enumerator; after a fault that rebuilt its store
    /// (`on-trap = "rebuild"`), reconciles the rebuilt store with the
    /// history ([`SourceCoordinator::resync`]) and, if `retry`, makes the
    /// call once more: a plugin bug that strikes once lets the job go on
    /// (issue 9, item 3); one that strikes again fails it.
    fn call<R>(
        &mut self,
        retry: bool,
        mut f: impl FnMut(&mut E) -> Result<R, E::Error>,
    ) -> Result<Option<R>, CoordinatorError<E::Error>> {
        match f(&mut self.enumerator) {
            Ok(r) => Ok(Some(r)),
            Err(e) if E::was_rebuilt(&e) => {
                self.rebuilt(e)?;
                if !retry {
                    return Ok(None);
                }
                match f(&mut self.enumerator) {
                    Ok(r) => Ok(Some(r)),
                    // Nothing made progress since the rebuild: this fails.
                    Err(again) if E::was_rebuilt(&again) => self.rebuilt(again).map(|()| None),
                    Err(again) => Err(self.err(again)),
                }
            }
            Err(e) => Err(self.err(e)),
        }
    }

    /// The splits reader `subtask` was assigned when the enumerator's last
    /// batch snapshot was taken (or restored; none for a fresh one).
    fn at_snapshot(&self, subtask: u32) -> &[SplitData] {
        match self.changed_since_snapshot.get(&subtask) {
            Some(then) => then,
            None => self
                .readers
                .get(subtask as usize)
                .map_or(&[], |r| &r.assigned),
        }
    }

    /// Reader `subtask`'s assignment is about to change: what it was at the
    /// last snapshot is kept, the first time it changes since.
    fn changing(&mut self, subtask: u32) {
        let readers = &self.readers;
        if let Some(r) = readers.get(subtask as usize) {
            self.changed_since_snapshot
                .entry(subtask)
                .or_insert_with(|| r.assigned.clone());
        }
    }

    /// Reconciles a store rebuilt after a fault with the host's
    /// split-assignment history. The rebuilt enumerator knows the history
    /// as of its last snapshot (`at_snapshot`; nothing for a fresh
    /// `create`): splits assigned since then are ghosts (it would hand them
    /// out again; the host drops such assignments), splits it believes
    /// assigned that no reader holds any more go back to it
    /// (`add-splits-back`), and what it did when started is applied.
    fn resync(&mut self) -> Result<(), CoordinatorError<E::Error>> {
        let started = self.enumerator.take_rebuild().unwrap_or_default();
        let current: BTreeSet<String> = self
            .readers
            .iter()
            .flat_map(|r| r.assigned.iter().map(|s| s.id.clone()))
            .collect();
        let mut known = BTreeSet::new();
        let mut missing: Vec<(u32, Vec<SplitData>)> = Vec::new();
        for subtask in 0..self.readers.len() as u32 {
            let mut back = Vec::new();
            for split in self.at_snapshot(subtask) {
                known.insert(split.id.clone());
                // A ghost at snapshot time is still held by the enumerator.
                if !current.contains(&split.id) && !self.ghosts_at_snapshot.contains(&split.id) {
                    back.push(split.clone());
                }
            }
            if !back.is_empty() {
                missing.push((subtask, back));
            }
        }
        self.ghosts = current
            .iter()
            .filter(|id| !known.contains(*id) || self.ghosts_at_snapshot.contains(*id))
            .cloned()
            .collect();
        tracing::warn!(
            vertex = %self.vertex,
            plugin = self.enumerator.name(),
            "rebuilt split enumerator reconciled with the assignment history: {} splits assigned since its {} are not handed out again, {} go back to it",
            self.ghosts.len(),
            if self.enumerator.has_snapshot() { "last snapshot" } else { "creation" },
            missing.iter().map(|(_, b)| b.len()).sum::<usize>()
        );
        self.apply("start", started)?;
        for (subtask, back) in missing {
            let actions = self
                .enumerator
                .add_splits_back(back, subtask)
                .map_err(|e| self.err(e))?;
            self.apply("add-splits-back", actions)?;
        }
        Ok(())
    }

    /// Applies what the enumerator did during `call`: drops assignments of
    /// ghosts (splits a rebuilt store hands out again), and checks what the
    /// wrapper cannot see alone: a split id already in the assignment
    /// history, and the bounds on what the host keeps for one enumerator.
    fn apply(
        &mut self,
        call: &'static str,
        actions: Vec<EnumeratorAction>,
    ) -> Result<(), CoordinatorError<E::Error>> {
        for a in actions {
            match a {
                EnumeratorAction::Assign { subtask, splits } => {
                    let mut kept = Vec::with_capacity(splits.len());
                    for split in splits {
                        if self.ghosts.remove(&split.id) {
                            tracing::debug!(vertex = %self.vertex, "split `{}` is already assigned; not handed out again", split.id);
                            self.dropped_for.insert(subtask);
                        } else {
                            kept.push(split);
                        }
                    }
                    if !kept.is_empty() {
                        self.rebuilt_without_progress = false;
                    }
                    for s in &kept {
                        if self.held.contains(&s.id) {
                            return Err(self.broke(
                                call,
                                format!(
                                    "assigned split id `{}` again while it is still assigned (ids are unique within an enumerator)",
                                    s.id
                                ),
                            ));
                        }
                        self.held.insert(s.id.clone());
                        self.held_bytes += split_bytes(s);
                    }
                    if self.held.len() as u64 > MAX_SPLITS_TOTAL
                        || self.held_bytes > MAX_SPLIT_BYTES_TOTAL
                    {
                        return Err(self.broke(
                            call,
                            format!(
                                "has {} splits ({} bytes) assigned; the host keeps at most {MAX_SPLITS_TOTAL} splits and {MAX_SPLIT_BYTES_TOTAL} bytes for one enumerator",
                                self.held.len(),
                                self.held_bytes
                            ),
                        ));
                    }
                    self.changing(subtask);
                    if let Some(r) = self.readers.get_mut(subtask as usize) {
                        r.assigned.extend(kept);
                    }
                }
                EnumeratorAction::NoMoreSplits { subtask } => {
                    self.rebuilt_without_progress = false;
                    if let Some(r) = self.readers.get_mut(subtask as usize) {
                        r.no_more_splits = true;
                    }
                }
            }
        }
        Ok(())
    }

    fn answer(&mut self, subtask: u32) -> Option<SplitAnswer> {
        // Another subtask that has not been told "no more splits" (one that
        // runs, or one still to run) will ask again, so this one may stop
        // at its cap: the last such subtask always drains the enumerator.
        let others_open = self.readers.len() - self.ended.len() > 1;
        let r = &mut self.readers[subtask as usize];
        if r.delivered < r.assigned.len() {
            r.delivered += 1;
            Some(SplitAnswer::Split(r.assigned[r.delivered - 1].clone()))
        } else if !r.no_more_splits
            && others_open
            && !self.ended.contains(&subtask)
            && self
                .max_task_bytes
                .is_some_and(|cap| r.delivered > 0 && r.delivered_bytes() >= cap)
        {
            tracing::debug!(vertex = %self.vertex, subtask, "reader holds its max-task-bytes of input: no more splits for it");
            r.no_more_splits = true;
            self.ended.insert(subtask);
            Some(SplitAnswer::NoMoreSplits)
        } else if r.no_more_splits {
            self.ended.insert(subtask);
            Some(SplitAnswer::NoMoreSplits)
        } else {
            None
        }
    }

    /// A reader for `subtask` starts (a new attempt): `add-reader`.
    ///
    /// # Errors
    ///
    /// [`CoordinatorError::Plugin`] if the call fails.
    pub fn register_reader(&mut self, subtask: u32) -> Result<(), CoordinatorError<E::Error>> {
        if let Some(actions) = self.call(true, |e| e.add_reader(subtask))? {
            // A registered reader is progress: readers are finite.
            self.rebuilt_without_progress = false;
            self.apply("add-reader", actions)?;
        }
        Ok(())
    }

    /// Reader `subtask` asks for its next split. Splits already assigned
    /// but not handed out come first; then, under a `max-task-bytes` cap,
    /// a reader that holds at least the cap in input bytes is answered
    /// "no more splits" if another subtask has not been answered so (that
    /// one will ask again; the last one is never capped, so it drains the
    /// enumerator); otherwise the enumerator is asked
    /// (`handle-split-request`). `None` means "wait": the answer comes later
    /// from [`SourceCoordinator::take_ready`].
    ///
    /// # Errors
    ///
    /// [`CoordinatorError::Plugin`] if the enumerator fails.
    pub fn request_split(
        &mut self,
        subtask: u32,
    ) -> Result<Option<SplitAnswer>, CoordinatorError<E::Error>> {
        if let Some(a) = self.answer(subtask) {
            return Ok(Some(a));
        }
        // Ask again while the enumerator only hands this reader splits it
        // already gave (ghosts after a rebuild); each such answer uses one up.
        loop {
            self.dropped_for.clear();
            if let Some(actions) = self.call(true, |e| e.handle_split_request(subtask))? {
                self.apply("handle-split-request", actions)?;
            }
            if let Some(a) = self.answer(subtask) {
                return Ok(Some(a));
            }
            if !self.dropped_for.contains(&subtask) {
                self.waiting.insert(subtask);
                return Ok(None);
            }
        }
    }

    /// Answers for waiting readers that can now be answered (after another
    /// call assigned them splits).
    pub fn take_ready(&mut self) -> Vec<(u32, SplitAnswer)> {
        let waiting: Vec<u32> = self.waiting.iter().copied().collect();
        let mut out = Vec::new();
        for s in waiting {
            if let Some(a) = self.answer(s) {
                self.waiting.remove(&s);
                out.push((s, a));
            }
        }
        out
    }

    /// Resets `subtask`: its assignment history goes back to the enumerator
    /// (`add-splits-back`), its "no more splits" flag is cleared and a
    /// waiting request is dropped. Returns how many splits went back.
    ///
    /// # Errors
    ///
    /// [`CoordinatorError::Plugin`] if the enumerator fails.
    pub fn reset_subtask(&mut self, subtask: u32) -> Result<usize, CoordinatorError<E::Error>> {
        self.changing(subtask);
        let r = std::mem::take(&mut self.readers[subtask as usize]);
        self.waiting.remove(&subtask);
        self.ended.remove(&subtask);
        let n = r.assigned.len();
        for s in &r.assigned {
            self.held.remove(&s.id);
            self.held_bytes = self.held_bytes.saturating_sub(split_bytes(s));
        }
        // A ghost is still held by the enumerator: it goes back by itself.
        let back: Vec<SplitData> = r
            .assigned
            .into_iter()
            .filter(|s| !self.ghosts.remove(&s.id))
            .collect();
        if !back.is_empty() {
            // After a rebuild, the resync already gave these back (they are
            // no longer in the history): no retry.
            if let Some(actions) = self.call(false, |e| e.add_splits_back(back.clone(), subtask))? {
                self.apply("add-splits-back", actions)?;
            }
        }
        Ok(n)
    }

    /// Checks the report of a source attempt of `subtask` that finished
    /// having read `splits_read` splits: it must have been answered "no
    /// more splits" and have read exactly the splits handed to it since its
    /// last reset, and none may wait in its history undelivered. Otherwise
    /// the finish cannot be accepted (a split would be lost): `Err` says
    /// why, and the attempt fails, giving its splits back.
    ///
    /// # Errors
    ///
    /// The reason, in words naming the vertex and the counts.
    pub fn check_finished(&self, subtask: u32, splits_read: u64) -> Result<(), String> {
        let Some(r) = self.readers.get(subtask as usize) else {
            return Err(format!(
                "vertex `{}` has no reader subtask {subtask}",
                self.vertex
            ));
        };
        if !self.ended.contains(&subtask) {
            return Err(format!(
                "subtask {subtask} of `{}` reported finished before it was told there are no more splits",
                self.vertex
            ));
        }
        if r.delivered as u64 != splits_read || r.delivered != r.assigned.len() {
            return Err(format!(
                "subtask {subtask} of `{}` reported reading {splits_read} splits; it was handed {} of the {} assigned to it",
                self.vertex,
                r.delivered,
                r.assigned.len()
            ));
        }
        Ok(())
    }

    /// Checks, when the job's vertices all finished, that every split in the
    /// assignment history was handed to its reader: an enumerator that
    /// assigns a split to a reader after that reader finished would
    /// otherwise lose it without a word.
    ///
    /// # Errors
    ///
    /// [`CoordinatorError::Plugin`] (a protocol error naming the plugin,
    /// the subtask and the split).
    pub fn check_all_read(&self) -> Result<(), CoordinatorError<E::Error>> {
        for (subtask, r) in self.readers.iter().enumerate() {
            if let Some(split) = r.assigned.get(r.delivered) {
                return Err(self.broke(
                    "assign-splits",
                    format!(
                        "assigned split `{}` to subtask {subtask} after that reader was told there are no more splits; it was never read",
                        split.id
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Counts `subtask` as ended (recovery keeps its finished attempt): a
    /// finished reader never asks again, so it must not count as one that
    /// could still drain the enumerator under a `max-task-bytes` cap.
    pub fn mark_finished(&mut self, subtask: u32) {
        if (subtask as usize) < self.readers.len() {
            self.waiting.remove(&subtask);
            self.ended.insert(subtask);
        }
    }

    /// The `max-task-bytes` cap, if any.
    pub fn max_task_bytes(&self) -> Option<u64> {
        self.max_task_bytes
    }

    /// Checks, when the job's vertices all finished and readers were
    /// capped by `max-task-bytes`, that the enumerator holds no split no
    /// reader took: the host ended readers that the enumerator did not,
    /// so it checks that this left nothing behind (a safety net under the
    /// rule in [`SourceCoordinator::request_split`]; it does not trigger
    /// for an enumerator that keeps its contract).
    ///
    /// # Errors
    ///
    /// [`CoordinatorError::Plugin`] naming the plugin and the count.
    pub fn check_none_left(&mut self) -> Result<(), CoordinatorError<E::Error>> {
        if self.max_task_bytes.is_none() {
            return Ok(());
        }
        let left = self.unassigned_splits()?;
        if left > 0 {
            return Err(self.broke(
                "unassigned-splits",
                format!(
                    "still holds {left} {} after every reader of `{}` finished; {} never read",
                    if left == 1 { "split" } else { "splits" },
                    self.vertex,
                    if left == 1 { "it was" } else { "they were" }
                ),
            ));
        }
        Ok(())
    }

    /// The assignment history of every subtask.
    pub fn readers(&self) -> &[ReaderState] {
        &self.readers
    }

    /// Whether a batch snapshot taken now would agree with the history: not
    /// while an enumerator rebuilt after a trap still holds splits that a
    /// reader has (they are dropped as it hands them out).
    pub fn snapshot_consistent(&self) -> bool {
        self.ghosts.is_empty()
    }

    /// Whether the enumerator supports batch snapshots.
    pub fn supports_batch_snapshot(&self) -> bool {
        self.enumerator.supports_batch_snapshot()
    }

    /// Takes a batch snapshot (checkpoint id -1) with the history; `None`
    /// when the snapshot would not agree with the history, so it must not
    /// be recorded: the enumerator still holds splits a reader has (a
    /// store rebuilt after a fault, before or during this call). Either way
    /// what the enumerator's state now is becomes what a later rebuild
    /// restores, paired with the history as it is now.
    ///
    /// A fault inside `snapshot-state` that rebuilt the store used to make
    /// the retried call's state, ghosts included, the recorded snapshot: a
    /// recovery from it restored an enumerator that handed those splits out
    /// a second time (coordhost-sim seed 4079, docs/simulation.md).
    ///
    /// # Errors
    ///
    /// [`CoordinatorError::Plugin`] if the enumerator fails.
    pub fn snapshot(&mut self) -> Result<Option<CoordinatorSnapshot>, CoordinatorError<E::Error>> {
        let Some(enumerator) = self.call(true, |e| e.snapshot_state(-1))? else {
            return Ok(None);
        };
        self.changed_since_snapshot.clear();
        self.ghosts_at_snapshot = self.ghosts.clone();
        self.rebuilt_without_progress = false;
        if !self.ghosts.is_empty() {
            return Ok(None);
        }
        Ok(Some(CoordinatorSnapshot {
            enumerator,
            readers: self.readers.clone(),
        }))
    }

    /// Splits the enumerator has not assigned yet (diagnostics, tests).
    ///
    /// # Errors
    ///
    /// [`CoordinatorError::Plugin`] if the enumerator fails.
    pub fn unassigned_splits(&mut self) -> Result<u64, CoordinatorError<E::Error>> {
        Ok(self.call(true, E::unassigned_splits)?.unwrap_or_default())
    }
}

#[cfg(test)]
mod tests;
