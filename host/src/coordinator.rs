//! The source coordinator over a split-enumerator plugin. The split
//! bookkeeping (Flink's `SourceCoordinator` with its
//! `SplitAssignmentTracker`: the assignment history, the waiting readers,
//! `max-task-bytes`, the reconciliation of an enumerator rebuilt after a
//! fault) is `coordhost_core::coordinator`, free of the plugin host, so the
//! simulator runs the same code; this module adapts the Wasm enumerator to
//! its `Enumerator` trait ([`WasmEnumerator`]) and keeps the constructors
//! from a loaded plugin, the plugin's grants, and the conversions between
//! the plugin's splits and the runtime's.

use std::ops::{Deref, DerefMut};

use coordhost_core::coordinator::Enumerator;

use crate::grant::Grants;
use crate::plugin::{
    self, FileRange, LoadedPlugin, PluginError, Split, SplitEnumerator, SplitPayload,
};
use crate::value::{SplitData, SplitPayloadData};

pub use coordhost_core::coordinator::{EnumeratorAction, SplitAnswer};
pub use coordhost_core::history::{CoordinatorSnapshot, ReaderState, split_input_bytes};

/// Errors of a source coordinator: its enumerator plugin failed
/// (`coordhost_core::coordinator::CoordinatorError` over [`PluginError`]).
pub type CoordinatorError = coordhost_core::coordinator::CoordinatorError<PluginError>;

/// A split-enumerator plugin instance as the core's source coordinator
/// drives it: each call is one call into the plugin
/// ([`SplitEnumerator`]), its actions converted to the runtime's splits.
pub struct WasmEnumerator(SplitEnumerator);

impl WasmEnumerator {
    /// The plugin's granted directories: the only place its `file-range`
    /// splits are read from.
    pub fn grants(&self) -> &Grants {
        self.0.grants()
    }
}

impl Enumerator for WasmEnumerator {
    type Error = PluginError;

    fn name(&self) -> &str {
        self.0.name()
    }

    fn supports_batch_snapshot(&self) -> bool {
        self.0.supports_batch_snapshot()
    }

    fn start(&mut self) -> Result<Vec<EnumeratorAction>, PluginError> {
        self.0.start().map(actions)
    }

    fn add_reader(&mut self, subtask: u32) -> Result<Vec<EnumeratorAction>, PluginError> {
        self.0.add_reader(subtask).map(actions)
    }

    fn handle_split_request(&mut self, subtask: u32) -> Result<Vec<EnumeratorAction>, PluginError> {
        self.0.handle_split_request(subtask, None).map(actions)
    }

    fn add_splits_back(
        &mut self,
        splits: Vec<SplitData>,
        subtask: u32,
    ) -> Result<Vec<EnumeratorAction>, PluginError> {
        let splits = splits.into_iter().map(to_plugin).collect();
        self.0.add_splits_back(splits, subtask).map(actions)
    }

    fn snapshot_state(&mut self, checkpoint_id: i64) -> Result<Vec<u8>, PluginError> {
        self.0.snapshot_state(checkpoint_id)
    }

    fn unassigned_splits(&mut self) -> Result<u64, PluginError> {
        self.0.unassigned_splits()
    }

    fn take_rebuild(&mut self) -> Option<Vec<EnumeratorAction>> {
        self.0.take_rebuild().map(actions)
    }

    fn has_snapshot(&self) -> bool {
        self.0.has_snapshot()
    }

    fn was_rebuilt(error: &PluginError) -> bool {
        error.was_rebuilt()
    }

    fn protocol_error(&self, call: &'static str, reason: String) -> PluginError {
        PluginError::Protocol {
            plugin: self.0.name().to_string(),
            call,
            reason,
        }
    }
}

/// The plugin's actions with the runtime's splits.
fn actions(actions: Vec<plugin::EnumeratorAction>) -> Vec<EnumeratorAction> {
    actions
        .into_iter()
        .map(|a| match a {
            plugin::EnumeratorAction::Assign { subtask, splits } => EnumeratorAction::Assign {
                subtask,
                splits: splits.into_iter().map(from_plugin).collect(),
            },
            plugin::EnumeratorAction::NoMoreSplits { subtask } => {
                EnumeratorAction::NoMoreSplits { subtask }
            }
        })
        .collect()
}

/// The host side of one source job vertex: the core's source coordinator
/// over a Wasm split enumerator (its methods through `Deref`).
pub struct SourceCoordinator(coordhost_core::coordinator::SourceCoordinator<WasmEnumerator>);

impl Deref for SourceCoordinator {
    type Target = coordhost_core::coordinator::SourceCoordinator<WasmEnumerator>;

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl DerefMut for SourceCoordinator {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl SourceCoordinator {
    /// Creates a fresh enumerator of `plugin` for `parallelism` readers and
    /// starts it.
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
        coordhost_core::coordinator::SourceCoordinator::start(
            vertex,
            parallelism,
            max_task_bytes,
            || plugin.split_enumerator(parallelism).map(WasmEnumerator),
        )
        .map(Self)
    }

    /// Restores the enumerator of `plugin` from a [`CoordinatorSnapshot`]
    /// and starts it (FLIP-383 recovery, docs/recovery.md step 4). The
    /// history comes back as it was; reset the unfinished subtasks
    /// afterwards so their splits return.
    ///
    /// # Errors
    ///
    /// [`CoordinatorError::Plugin`] if restoring or starting fails;
    /// [`CoordinatorError::Snapshot`] if the history does not fit the parallelism.
    pub fn restore(
        vertex: &str,
        plugin: &LoadedPlugin,
        parallelism: u32,
        snapshot: CoordinatorSnapshot,
        max_task_bytes: Option<u64>,
    ) -> Result<Self, CoordinatorError> {
        coordhost_core::coordinator::SourceCoordinator::restore(
            vertex,
            parallelism,
            snapshot,
            max_task_bytes,
            |state| {
                plugin
                    .restore_split_enumerator(parallelism, state)
                    .map(WasmEnumerator)
            },
        )
        .map(Self)
    }

    /// The enumerator's granted directories: the only place its
    /// `file-range` splits are read from.
    pub fn grants(&self) -> &Grants {
        self.0.enumerator().grants()
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
