//! The typed wrapper of a split-enumerator plugin instance (Flink's
//! `SplitEnumerator`, driven by the host's source coordinator).

use std::collections::BTreeSet;

use wasmtime::Store;
use wasmtime::component::ResourceAny;

use super::actions::{EnumeratorAction, MAX_SPLIT_BYTES_PER_CALL, MAX_SPLITS_PER_CALL};
use super::bindings::enumerator::SplitEnumeratorPlugin;
use super::bindings::enumerator::exports::coordhost::plugin::split_enumerator::GuestEnumerator;
use super::instance::{self, Fault};
use super::store::PluginState;
use super::{KindPre, LoadedPlugin, PluginError, PluginKind, Split, SplitPayload, TrapPolicy};
use coordhost_io::grant::Grants;

/// One live split enumerator. Every method is one call into the plugin
/// under its deadline and memory cap; methods that let the plugin talk back
/// return the [`EnumeratorAction`]s it took, already checked against the
/// parallelism.
pub struct SplitEnumerator {
    plugin: LoadedPlugin,
    parallelism: u32,
    live: Option<Live>,
    /// Readers registered through [`SplitEnumerator::add_reader`].
    readers: BTreeSet<u32>,
    /// The last batch snapshot taken through this wrapper: what a rebuild
    /// after a trap restores.
    last_snapshot: Option<Vec<u8>>,
    /// Why the instance is unusable, when it is.
    poisoned: Option<String>,
    /// What the store rebuilt after the last fault did when started, until
    /// the source coordinator takes it.
    rebuilt: Option<Vec<EnumeratorAction>>,
    /// The plugin's granted directories: a `file-range` split must name a
    /// path inside one of them (`coordhost_io::grant`).
    grants: Grants,
}

struct Live {
    store: Store<PluginState>,
    world: SplitEnumeratorPlugin,
    handle: ResourceAny,
}

impl SplitEnumerator {
    pub(crate) fn create(
        plugin: LoadedPlugin,
        parallelism: u32,
        snapshot: Option<Vec<u8>>,
    ) -> Result<Self, PluginError> {
        instance::expect_kind(&plugin, PluginKind::SplitEnumerator)?;
        let call = if snapshot.is_some() {
            "restore"
        } else {
            "create"
        };
        tracing::debug!(target: crate::LOG_TARGET, plugin = plugin.name(), call, "host -> plugin");
        let live = instantiate(&plugin, parallelism, &BTreeSet::new(), snapshot.as_deref())?;
        let grants =
            Grants::new(plugin.name(), &plugin.spec().dirs).with_stores(&plugin.spec().stores);
        Ok(Self {
            grants,
            plugin,
            parallelism,
            live: Some(live),
            readers: BTreeSet::new(),
            last_snapshot: snapshot,
            poisoned: None,
            rebuilt: None,
        })
    }

    /// The plugin's name in the job file.
    pub fn name(&self) -> &str {
        self.plugin.name()
    }

    /// The plugin's granted directories.
    pub fn grants(&self) -> &Grants {
        &self.grants
    }

    /// The source parallelism this enumerator serves.
    pub fn parallelism(&self) -> u32 {
        self.parallelism
    }

    /// Whether the plugin supports batch snapshots (asked once at load).
    pub fn supports_batch_snapshot(&self) -> bool {
        self.plugin.supports_batch_snapshot()
    }

    /// `start`: discover splits. Call once after creation or restore.
    ///
    /// # Errors
    /// The plugin's error value, a fault ([`PluginError::Trap`],
    /// [`PluginError::Deadline`], [`PluginError::MemoryCap`]), or
    /// [`PluginError::Poisoned`] after an earlier fault.
    pub fn start(&mut self) -> Result<Vec<EnumeratorAction>, PluginError> {
        self.call("start", |g, store, h| g.call_start(store, h))
    }

    /// `handle-split-request`: reader `subtask` (on `hostname`) asks for work.
    ///
    /// # Errors
    /// As [`SplitEnumerator::start`]; [`PluginError::Protocol`] when the
    /// plugin assigns to a subtask beyond the parallelism.
    pub fn handle_split_request(
        &mut self,
        subtask: u32,
        hostname: Option<&str>,
    ) -> Result<Vec<EnumeratorAction>, PluginError> {
        self.call("handle-split-request", |g, store, h| {
            g.call_handle_split_request(store, h, subtask, hostname)
        })
    }

    /// `add-splits-back`: splits of a reset subtask return to the enumerator
    /// (failover, or FLIP-383 recovery of an unfinished subtask).
    ///
    /// # Errors
    /// As [`SplitEnumerator::handle_split_request`].
    pub fn add_splits_back(
        &mut self,
        splits: Vec<Split>,
        subtask: u32,
    ) -> Result<Vec<EnumeratorAction>, PluginError> {
        self.call("add-splits-back", |g, store, h| {
            g.call_add_splits_back(store, h, &splits, subtask)
        })
    }

    /// `add-reader`: a reader for `subtask` registered.
    ///
    /// # Errors
    /// As [`SplitEnumerator::handle_split_request`].
    pub fn add_reader(&mut self, subtask: u32) -> Result<Vec<EnumeratorAction>, PluginError> {
        self.readers.insert(subtask);
        if let Some(live) = &mut self.live {
            live.store.data_mut().context.readers.insert(subtask);
        }
        self.call("add-reader", |g, store, h| {
            g.call_add_reader(store, h, subtask)
        })
    }

    /// `snapshot-state`: a batch snapshot when `checkpoint_id` is -1. The
    /// bytes are also kept as what a rebuild after a trap restores.
    ///
    /// # Errors
    /// As [`SplitEnumerator::start`]; plugins without batch-snapshot support
    /// return an error value.
    pub fn snapshot_state(&mut self, checkpoint_id: i64) -> Result<Vec<u8>, PluginError> {
        let (bytes, _) = self.call_value("snapshot-state", |g, store, h| {
            g.call_snapshot_state(store, h, checkpoint_id)
        })?;
        self.last_snapshot = Some(bytes.clone());
        Ok(bytes)
    }

    /// `unassigned-splits`: splits the enumerator holds that no reader has.
    ///
    /// # Errors
    /// As [`SplitEnumerator::start`].
    pub fn unassigned_splits(&mut self) -> Result<u64, PluginError> {
        let result = self.call_value("unassigned-splits", |g, store, h| {
            g.call_unassigned_splits(store, h)
                .map(Ok::<u64, super::PluginFailure>)
        });
        result.map(|(count, _)| count)
    }

    fn call(
        &mut self,
        call: &'static str,
        f: impl FnOnce(
            GuestEnumerator<'_>,
            &mut Store<PluginState>,
            ResourceAny,
        ) -> wasmtime::Result<Result<(), super::PluginFailure>>,
    ) -> Result<Vec<EnumeratorAction>, PluginError> {
        self.call_value(call, f).map(|((), actions)| actions)
    }

    fn call_value<R>(
        &mut self,
        call: &'static str,
        f: impl FnOnce(
            GuestEnumerator<'_>,
            &mut Store<PluginState>,
            ResourceAny,
        ) -> wasmtime::Result<Result<R, super::PluginFailure>>,
    ) -> Result<(R, Vec<EnumeratorAction>), PluginError> {
        let Some(live) = self.live.as_mut() else {
            let cause = self.poisoned.clone().unwrap_or_default();
            return Err(PluginError::Poisoned {
                plugin: self.plugin.name().to_string(),
                call,
                cause,
            });
        };
        // Every call into the plugin, for authors (`COORDHOST_LOG=coordhost::plugin=debug`).
        tracing::debug!(target: crate::LOG_TARGET, plugin = self.plugin.name(), call, "host -> plugin");
        instance::arm_deadline(&mut live.store, self.plugin.inner());
        live.store.data_mut().context.begin_call();
        let outcome = f(
            live.world.coordhost_plugin_split_enumerator().enumerator(),
            &mut live.store,
            live.handle,
        );
        match instance::settle(&live.store, self.plugin.inner(), call, outcome) {
            Ok(Ok(value)) => {
                let context = &mut live.store.data_mut().context;
                let over_bound = context.over_bound;
                let actions = std::mem::take(&mut context.actions);
                if over_bound {
                    return Err(self.broke(
                        call,
                        format!(
                            "assigned more than {MAX_SPLITS_PER_CALL} splits or {MAX_SPLIT_BYTES_PER_CALL} bytes of splits in one call (the host's bound on what it takes from a plugin per call)"
                        ),
                    ));
                }
                self.check_actions(call, &actions)?;
                Ok((value, actions))
            }
            Ok(Err(returned)) => Err(returned),
            Err(fault) => Err(self.after_fault(call, fault)),
        }
    }

    fn broke(&self, call: &'static str, reason: String) -> PluginError {
        PluginError::Protocol {
            plugin: self.plugin.name().to_string(),
            call,
            reason,
        }
    }

    /// The contract of `enumerator-context`: subtasks within the
    /// parallelism, assignments only to registered readers, `file-range`
    /// paths inside the plugin's grants, no split id twice in one call.
    fn check_actions(
        &self,
        call: &'static str,
        actions: &[EnumeratorAction],
    ) -> Result<(), PluginError> {
        let mut ids = std::collections::HashSet::new();
        for action in actions {
            let (EnumeratorAction::Assign { subtask, .. }
            | EnumeratorAction::NoMoreSplits { subtask }) = action;
            if *subtask >= self.parallelism {
                return Err(self.broke(
                    call,
                    format!(
                        "named subtask {subtask}, but the source has parallelism {}",
                        self.parallelism
                    ),
                ));
            }
            let EnumeratorAction::Assign { subtask, splits } = action else {
                continue;
            };
            if !self.readers.contains(subtask) {
                return Err(self.broke(
                    call,
                    format!(
                        "assigned splits to subtask {subtask}, which has no registered reader (enumerator-context.assign-splits)"
                    ),
                ));
            }
            for split in splits {
                if !ids.insert(split.id.as_str()) {
                    return Err(self.broke(
                        call,
                        format!(
                            "assigned split id `{}` twice (ids are unique within an enumerator)",
                            split.id
                        ),
                    ));
                }
                if let SplitPayload::FileRange(r) = &split.payload
                    && let Err(e) = self.grants.check_readable(std::path::Path::new(&r.path))
                {
                    return Err(
                        self.broke(call, format!("split `{}` names {}", split.id, e.detail()))
                    );
                }
            }
        }
        Ok(())
    }

    /// Drops the poisoned store and, if allowed, rebuilds it: from the last
    /// batch snapshot when there is one, otherwise from a fresh `create`
    /// (issue 9, item 3). The rebuilt enumerator is started; what it did
    /// then waits in [`SplitEnumerator::take_rebuild`] for the source
    /// coordinator, which reconciles it with the host's assignment history.
    fn after_fault(&mut self, call: &'static str, fault: Fault) -> PluginError {
        self.live = None;
        let policy = self.plugin.inner().spec.limits.on_trap;
        let rebuilt = policy == TrapPolicy::Rebuild
            && match self.rebuild() {
                Ok(actions) => {
                    self.rebuilt = Some(actions);
                    true
                }
                Err(e) => {
                    tracing::error!(
                        target: crate::LOG_TARGET,
                        plugin = self.plugin.name(),
                        "rebuilding after a fault failed: {e}"
                    );
                    self.live = None;
                    false
                }
            };
        let error = fault.into_error(self.plugin.inner(), call, rebuilt);
        if rebuilt {
            let from = if self.last_snapshot.is_some() {
                "the last batch snapshot"
            } else {
                "a fresh `create`"
            };
            tracing::warn!(
                target: crate::LOG_TARGET,
                plugin = self.plugin.name(),
                "{error}; store rebuilt from {from}"
            );
        } else {
            self.poisoned = Some(error.to_string());
        }
        error
    }

    /// A new store, restored from the last snapshot or freshly created, and
    /// started (WIT: `start` after `create` or `restore`). Returns what
    /// `start` did. A fault here is not rebuilt again.
    fn rebuild(&mut self) -> Result<Vec<EnumeratorAction>, PluginError> {
        const CALL: &str = "start";
        let mut live = instantiate(
            &self.plugin,
            self.parallelism,
            &self.readers,
            self.last_snapshot.as_deref(),
        )?;
        let inner = self.plugin.inner();
        instance::arm_deadline(&mut live.store, inner);
        live.store.data_mut().context.actions.clear();
        let outcome = live
            .world
            .coordhost_plugin_split_enumerator()
            .enumerator()
            .call_start(&mut live.store, live.handle);
        match instance::settle(&live.store, inner, CALL, outcome) {
            Ok(Ok(())) => {
                let actions = std::mem::take(&mut live.store.data_mut().context.actions);
                self.check_actions(CALL, &actions)?;
                self.live = Some(live);
                Ok(actions)
            }
            Ok(Err(returned)) => Err(returned),
            Err(fault) => Err(fault.into_error(inner, CALL, false)),
        }
    }

    /// After a call failed with a fault and the store was rebuilt
    /// ([`PluginError::was_rebuilt`]): the actions the rebuilt enumerator
    /// took when it was started. `None` when no rebuild happened since the
    /// last time this was asked.
    pub fn take_rebuild(&mut self) -> Option<Vec<EnumeratorAction>> {
        self.rebuilt.take()
    }

    /// Whether the last batch snapshot (what a rebuild restores) exists;
    /// without one a rebuild starts from a fresh `create`.
    pub fn has_snapshot(&self) -> bool {
        self.last_snapshot.is_some()
    }
}

/// Instantiates the component in a new store and creates (or restores) the
/// enumerator resource; a restored one is started again.
fn instantiate(
    plugin: &LoadedPlugin,
    parallelism: u32,
    readers: &BTreeSet<u32>,
    snapshot: Option<&[u8]>,
) -> Result<Live, PluginError> {
    let inner = plugin.inner();
    let KindPre::Enumerator(pre) = &inner.pre else {
        return Err(PluginError::KindMismatch {
            plugin: inner.spec.name.clone(),
            path: inner.spec.path.clone(),
            configured: PluginKind::SplitEnumerator,
            found: PluginKind::ShuffleMaster,
        });
    };
    let mut store = instance::new_store(inner)?;
    store.data_mut().context.parallelism = parallelism;
    store.data_mut().context.readers = readers.clone();
    let call = if snapshot.is_some() {
        "restore"
    } else {
        "create"
    };
    let world = match pre.instantiate(&mut store) {
        Ok(world) => world,
        Err(e) => return Err(Fault::classify(&store, &e).into_error(inner, "instantiate", false)),
    };
    let guest = world.coordhost_plugin_split_enumerator().enumerator();
    let outcome = match snapshot {
        Some(bytes) => guest.call_restore(&mut store, &inner.spec.config, parallelism, bytes),
        None => guest.call_create(&mut store, &inner.spec.config, parallelism),
    };
    let handle = match instance::settle(&store, inner, call, outcome) {
        Ok(Ok(handle)) => handle,
        Ok(Err(returned)) => return Err(returned),
        Err(fault) => return Err(fault.into_error(inner, call, false)),
    };
    Ok(Live {
        store,
        world,
        handle,
    })
}
