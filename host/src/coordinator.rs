//! The source coordinator: the host-side owner of one split enumerator
//! plugin instance (Flink's `SourceCoordinator` with its
//! `SplitAssignmentTracker`).
//!
//! It drives the enumerator (`start`, `add-reader`, `handle-split-request`,
//! `add-splits-back`), applies the assignments and "no more splits" signals
//! the plugin makes through its context, and keeps, per reader subtask,
//! the splits assigned since the subtask's last reset (the assignment
//! history), the splits not yet handed to the reader, and the "no more
//! splits" flag. When a subtask is reset (failover, PartitionNotFound of a
//! finished source, FLIP-383 recovery) its whole history goes back to the
//! enumerator and its flag is cleared, so every split is read exactly once
//! by a finished attempt. Readers pull: a request is answered at once when
//! a split or the end is known, and otherwise waits for a later assignment.
//!
//! With a `max-task-bytes` cap (docs/recovery.md, "Source tasks sized by
//! input"), the host itself answers "no more splits" to a reader that holds
//! at least that many input bytes and has nothing assigned left to read,
//! but never to the last subtask that has not been answered so: that one
//! reads until the enumerator says there is nothing left, so no split can
//! stay unread.

use std::collections::{BTreeSet, HashSet};

use crate::grant::Grants;
use crate::plugin::{
    EnumeratorAction, FileRange, LoadedPlugin, MAX_SPLIT_BYTES_TOTAL, MAX_SPLITS_TOTAL,
    PluginError, Split, SplitEnumerator, SplitPayload,
};
use crate::value::{SplitData, SplitPayloadData};

pub use coordhost_core::history::{CoordinatorSnapshot, ReaderState, split_input_bytes};

/// Errors of a source coordinator: its enumerator plugin failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CoordinatorError {
    /// A call into the enumerator failed.
    #[error("source coordinator of vertex `{vertex}`: {source}")]
    Plugin {
        /// The source job vertex id.
        vertex: String,
        /// The plugin error (names the plugin and the call).
        source: PluginError,
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
        /// names it: [`PluginError::plugin`]).
        plugin: String,
        /// The last fault (boxed: it is large and rare).
        source: Box<PluginError>,
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
pub struct SourceCoordinator {
    vertex: String,
    enumerator: SplitEnumerator,
    readers: Vec<ReaderState>,
    waiting: BTreeSet<u32>,
    /// The history as it was when the enumerator's last batch snapshot was
    /// taken (or restored; empty for a fresh enumerator): what a store
    /// rebuilt after a trap knows about.
    at_snapshot: Vec<ReaderState>,
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

impl SourceCoordinator {
    /// Creates a fresh enumerator for `parallelism` readers and starts it.
    ///
    /// # Errors
    ///
    /// [`CoordinatorError::Plugin`] if creating or starting fails.
    pub fn start(
        vertex: &str,
        plugin: &LoadedPlugin,
        parallelism: u32,
        max_task_bytes: Option<u64>,
    ) -> Result<Self, CoordinatorError> {
        let err = |source| CoordinatorError::Plugin {
            vertex: vertex.to_string(),
            source,
        };
        let enumerator = plugin.split_enumerator(parallelism).map_err(err)?;
        let mut c = Self {
            vertex: vertex.to_string(),
            enumerator,
            readers: vec![ReaderState::default(); parallelism as usize],
            waiting: BTreeSet::new(),
            at_snapshot: vec![ReaderState::default(); parallelism as usize],
            ghosts_at_snapshot: BTreeSet::new(),
            ghosts: BTreeSet::new(),
            dropped_for: BTreeSet::new(),
            rebuilt_without_progress: false,
            held: HashSet::new(),
            held_bytes: 0,
            ended: BTreeSet::new(),
            max_task_bytes,
        };
        c.start_enumerator()?;
        Ok(c)
    }

    /// Restores the enumerator from a [`CoordinatorSnapshot`] and starts it
    /// (FLIP-383 recovery, docs/recovery.md step 4). The history comes back as it was; reset
    /// the unfinished subtasks afterwards so their splits return.
    ///
    /// # Errors
    ///
    /// [`CoordinatorError::Plugin`] if restoring or starting fails;
    /// [`CoordinatorError::Snapshot`] if the history does not fit the parallelism.
    pub fn restore(
        vertex: &str,
        plugin: &LoadedPlugin,
        parallelism: u32,
        snapshot: &CoordinatorSnapshot,
        max_task_bytes: Option<u64>,
    ) -> Result<Self, CoordinatorError> {
        let err = |source| CoordinatorError::Plugin {
            vertex: vertex.to_string(),
            source,
        };
        if snapshot.readers.len() != parallelism as usize {
            return Err(CoordinatorError::Snapshot {
                vertex: vertex.to_string(),
                reason: format!(
                    "{} readers in the snapshot, parallelism {parallelism}",
                    snapshot.readers.len()
                ),
            });
        }
        let enumerator = plugin
            .restore_split_enumerator(parallelism, &snapshot.enumerator)
            .map_err(err)?;
        let mut held = HashSet::new();
        let mut held_bytes = 0;
        for s in snapshot.readers.iter().flat_map(|r| &r.assigned) {
            held.insert(s.id.clone());
            held_bytes += split_data_bytes(s);
        }
        let mut c = Self {
            vertex: vertex.to_string(),
            enumerator,
            readers: snapshot.readers.clone(),
            waiting: BTreeSet::new(),
            at_snapshot: snapshot.readers.clone(),
            ghosts_at_snapshot: BTreeSet::new(),
            ghosts: BTreeSet::new(),
            dropped_for: BTreeSet::new(),
            rebuilt_without_progress: false,
            held,
            held_bytes,
            ended: snapshot
                .readers
                .iter()
                .enumerate()
                .filter(|(_, r)| r.no_more_splits)
                .map(|(s, _)| s as u32)
                .collect(),
            max_task_bytes,
        };
        c.start_enumerator()?;
        Ok(c)
    }

    /// The enumerator's name.
    pub fn plugin(&self) -> &str {
        self.enumerator.name()
    }

    /// The enumerator's granted directories: the only place its
    /// `file-range` splits are read from.
    pub fn grants(&self) -> &Grants {
        self.enumerator.grants()
    }

    fn broke(&self, call: &'static str, reason: String) -> CoordinatorError {
        self.err(PluginError::Protocol {
            plugin: self.enumerator.name().to_string(),
            call,
            reason,
        })
    }

    fn err(&self, source: PluginError) -> CoordinatorError {
        CoordinatorError::Plugin {
            vertex: self.vertex.clone(),
            source,
        }
    }

    /// `start`; a fault that rebuilt the store already started the new one.
    fn start_enumerator(&mut self) -> Result<(), CoordinatorError> {
        match self.enumerator.start() {
            Ok(actions) => self.apply("start", actions),
            Err(e) if e.was_rebuilt() => self.rebuilt(e),
            Err(e) => Err(self.err(e)),
        }
    }

    /// After fault `e` rebuilt the store: fails when the previous rebuild
    /// made no progress (the plugin would fault at the same place forever),
    /// else reconciles the new store ([`SourceCoordinator::resync`]).
    fn rebuilt(&mut self, e: PluginError) -> Result<(), CoordinatorError> {
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
        mut f: impl FnMut(&mut SplitEnumerator) -> Result<R, PluginError>,
    ) -> Result<Option<R>, CoordinatorError> {
        match f(&mut self.enumerator) {
            Ok(r) => Ok(Some(r)),
            Err(e) if e.was_rebuilt() => {
                self.rebuilt(e)?;
                if !retry {
                    return Ok(None);
                }
                match f(&mut self.enumerator) {
                    Ok(r) => Ok(Some(r)),
                    // Nothing made progress since the rebuild: this fails.
                    Err(again) if again.was_rebuilt() => self.rebuilt(again).map(|()| None),
                    Err(again) => Err(self.err(again)),
                }
            }
            Err(e) => Err(self.err(e)),
        }
    }

    /// Reconciles a store rebuilt after a fault with the host's
    /// split-assignment history. The rebuilt enumerator knows the history
    /// as of its last snapshot (`at_snapshot`; nothing for a fresh
    /// `create`): splits assigned since then are ghosts (it would hand them
    /// out again; the host drops such assignments), splits it believes
    /// assigned that no reader holds any more go back to it
    /// (`add-splits-back`), and what it did when started is applied.
    fn resync(&mut self) -> Result<(), CoordinatorError> {
        let started = self.enumerator.take_rebuild().unwrap_or_default();
        let current: BTreeSet<String> = self
            .readers
            .iter()
            .flat_map(|r| r.assigned.iter().map(|s| s.id.clone()))
            .collect();
        let mut known = BTreeSet::new();
        let mut missing: Vec<(u32, Vec<SplitData>)> = Vec::new();
        for (subtask, r) in self.at_snapshot.iter().enumerate() {
            let mut back = Vec::new();
            for split in &r.assigned {
                known.insert(split.id.clone());
                // A ghost at snapshot time is still held by the enumerator.
                if !current.contains(&split.id) && !self.ghosts_at_snapshot.contains(&split.id) {
                    back.push(split.clone());
                }
            }
            if !back.is_empty() {
                missing.push((subtask as u32, back));
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
            let splits = back.into_iter().map(to_plugin).collect();
            let actions = self
                .enumerator
                .add_splits_back(splits, subtask)
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
    ) -> Result<(), CoordinatorError> {
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
                        self.held_bytes += crate::plugin::split_bytes(s);
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
                    if let Some(r) = self.readers.get_mut(subtask as usize) {
                        r.assigned.extend(kept.into_iter().map(from_plugin));
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
    pub fn register_reader(&mut self, subtask: u32) -> Result<(), CoordinatorError> {
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
    pub fn request_split(&mut self, subtask: u32) -> Result<Option<SplitAnswer>, CoordinatorError> {
        if let Some(a) = self.answer(subtask) {
            return Ok(Some(a));
        }
        // Ask again while the enumerator only hands this reader splits it
        // already gave (ghosts after a rebuild); each such answer uses one up.
        loop {
            self.dropped_for.clear();
            if let Some(actions) = self.call(true, |e| e.handle_split_request(subtask, None))? {
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
    pub fn reset_subtask(&mut self, subtask: u32) -> Result<usize, CoordinatorError> {
        let r = std::mem::take(&mut self.readers[subtask as usize]);
        self.waiting.remove(&subtask);
        self.ended.remove(&subtask);
        let n = r.assigned.len();
        for s in &r.assigned {
            self.held.remove(&s.id);
            self.held_bytes = self.held_bytes.saturating_sub(split_data_bytes(s));
        }
        // A ghost is still held by the enumerator: it goes back by itself.
        let back: Vec<Split> = r
            .assigned
            .into_iter()
            .filter(|s| !self.ghosts.remove(&s.id))
            .map(to_plugin)
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
    pub fn check_all_read(&self) -> Result<(), CoordinatorError> {
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
    pub fn check_none_left(&mut self) -> Result<(), CoordinatorError> {
        if self.max_task_bytes.is_none() {
            return Ok(());
        }
        let left = self.unassigned_splits()?;
        if left > 0 {
            return Err(self.broke(
                "unassigned-splits",
                format!(
                    "still holds {left} splits after every reader of `{}` finished; they were never read",
                    self.vertex
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

    /// Takes a batch snapshot (checkpoint id -1) with the history.
    ///
    /// # Errors
    ///
    /// [`CoordinatorError::Plugin`] if the enumerator fails.
    pub fn snapshot(&mut self) -> Result<CoordinatorSnapshot, CoordinatorError> {
        let enumerator = self
            .call(true, |e| e.snapshot_state(-1))?
            .unwrap_or_default();
        self.at_snapshot = self.readers.clone();
        self.ghosts_at_snapshot = self.ghosts.clone();
        self.rebuilt_without_progress = false;
        Ok(CoordinatorSnapshot {
            enumerator,
            readers: self.readers.clone(),
        })
    }

    /// Splits the enumerator has not assigned yet (diagnostics, tests).
    ///
    /// # Errors
    ///
    /// [`CoordinatorError::Plugin`] if the enumerator fails.
    pub fn unassigned_splits(&mut self) -> Result<u64, CoordinatorError> {
        Ok(self
            .call(true, SplitEnumerator::unassigned_splits)?
            .unwrap_or_default())
    }
}

/// Converts a plugin split into the runtime's form.
pub fn from_plugin(s: Split) -> SplitData {
    SplitData {
        id: s.id,
        payload: match s.payload {
            SplitPayload::FileRange(r) => SplitPayloadData::FileRange {
                path: r.path.into(),
                start: r.start,
                length: r.length,
            },
            SplitPayload::Inline(t) => SplitPayloadData::Inline(t),
        },
    }
}

/// Converts a runtime split back into the plugin's form.
pub fn to_plugin(s: SplitData) -> Split {
    Split {
        id: s.id,
        payload: match s.payload {
            SplitPayloadData::FileRange {
                path,
                start,
                length,
            } => SplitPayload::FileRange(FileRange {
                path: path.to_string_lossy().into_owned(),
                start,
                length,
            }),
            SplitPayloadData::Inline(t) => SplitPayload::Inline(t),
        },
    }
}

/// [`crate::plugin::split_bytes`] of a split in the runtime's form.
fn split_data_bytes(s: &SplitData) -> u64 {
    let payload = match &s.payload {
        SplitPayloadData::FileRange { path, .. } => path.as_os_str().len(),
        SplitPayloadData::Inline(t) => t.len(),
    };
    (s.id.len() + payload) as u64
}
