//! Machinery shared by the typed wrappers: making a store, arming the
//! deadline, and telling a deadline, a memory cap and a plugin trap apart.

use wasmtime::{Store, Trap};

use super::bindings::enumerator::SplitEnumeratorPlugin;
use super::bindings::shuffle::ShuffleMasterPlugin;
use super::deadline::DeadlineInWasi;
use super::output::{MAX_MESSAGE_BYTES, one_line};
use super::store::PluginState;
use super::{EPOCH_TICK, KindPre, LoadedInner, LoadedPlugin, PluginError, PluginKind};

/// A fresh store for `loaded`'s plugin with its memory cap and deadline armed.
pub fn new_store(loaded: &LoadedInner) -> Result<Store<PluginState>, PluginError> {
    let mut store = Store::new(&loaded.engine, PluginState::new(&loaded.spec)?);
    store.limiter(|state| &mut state.limiter);
    arm_deadline(&mut store, loaded);
    Ok(store)
}

/// Sets the store's deadline to the spec's call timeout from now.
pub fn arm_deadline(store: &mut Store<PluginState>, loaded: &LoadedInner) {
    let tick = EPOCH_TICK.as_nanos().max(1);
    let ticks = loaded.spec.limits.call_timeout.as_nanos().div_ceil(tick);
    // One tick more: the epoch may advance right after arming.
    store.set_epoch_deadline(u64::try_from(ticks).unwrap_or(u64::MAX).saturating_add(1));
    store.data_mut().call_deadline =
        std::time::Instant::now().checked_add(loaded.spec.limits.call_timeout);
    store.data().stderr_tail.clear();
}

/// Why a call into a plugin did not return normally.
#[derive(Debug)]
pub enum Fault {
    Deadline,
    MemoryCap,
    Trap(String),
}

impl Fault {
    /// Classifies the error of a failed call on `store`.
    pub fn classify(store: &Store<PluginState>, error: &wasmtime::Error) -> Self {
        if store.data().limiter.hit {
            Self::MemoryCap
        } else if error.downcast_ref::<Trap>() == Some(&Trap::Interrupt)
            || error.downcast_ref::<DeadlineInWasi>().is_some()
        {
            Self::Deadline
        } else {
            tracing::debug!(target: crate::LOG_TARGET, plugin = &*store.data().plugin, "trap: {error:?}");
            // The reason only: wasmtime's wasm backtrace is a context around
            // it, kept for the debug line above (issue 9, item 11).
            let what = error
                .downcast_ref::<Trap>()
                .map_or_else(|| error.root_cause().to_string(), ToString::to_string);
            let stderr = store.data().stderr_tail.joined();
            let message = if stderr.is_empty() {
                what
            } else {
                // What the plugin said (a panic message) is the reason; the
                // trap kind follows.
                format!("{stderr} ({what})")
            };
            Self::Trap(one_line(&message, MAX_MESSAGE_BYTES))
        }
    }

    /// The error for the caller.
    pub fn into_error(
        self,
        loaded: &LoadedInner,
        call: &'static str,
        rebuilt: bool,
    ) -> PluginError {
        let plugin = loaded.spec.name.clone();
        match self {
            Self::Deadline => PluginError::Deadline {
                plugin,
                call,
                timeout_ms: u64::try_from(loaded.spec.limits.call_timeout.as_millis())
                    .unwrap_or(u64::MAX),
                rebuilt,
            },
            Self::MemoryCap => PluginError::MemoryCap {
                plugin,
                call,
                cap_bytes: loaded.spec.limits.memory_bytes,
                rebuilt,
            },
            Self::Trap(message) => PluginError::Trap {
                plugin,
                call,
                message,
                rebuilt,
            },
        }
    }
}

/// Turns the outcome of a call on a store into the wrapper's result; a
/// fault is reported as `Err(Fault)` for the wrapper to handle. Tells the
/// [`super::observe`] observer, if any, how long the call took (since
/// [`arm_deadline`]).
pub fn settle<R, E>(
    store: &Store<PluginState>,
    loaded: &LoadedInner,
    call: &'static str,
    outcome: wasmtime::Result<Result<R, E>>,
) -> Result<Result<R, PluginError>, Fault>
where
    E: Into<super::PluginFailure>,
{
    if let Some(observer) = super::observe::observer()
        && let Some(started) = store
            .data()
            .call_deadline
            .and_then(|d| d.checked_sub(loaded.spec.limits.call_timeout))
    {
        observer.plugin_call(&loaded.spec.name, call, started.elapsed());
    }
    match outcome {
        Ok(Ok(value)) => Ok(Ok(value)),
        Ok(Err(error)) => Ok(Err(PluginError::Returned {
            plugin: loaded.spec.name.clone(),
            call,
            error: bounded_failure(error.into()),
        })),
        Err(error) => Err(Fault::classify(store, &error)),
    }
}

/// The plugin's error value with its message cut to one line of
/// [`MAX_MESSAGE_BYTES`].
fn bounded_failure(failure: super::PluginFailure) -> super::PluginFailure {
    use super::PluginFailure as F;
    let cut = |m: String| one_line(&m, MAX_MESSAGE_BYTES);
    match failure {
        F::InvalidConfig(m) => F::InvalidConfig(cut(m)),
        F::InvalidState(m) => F::InvalidState(cut(m)),
        F::Io(m) => F::Io(cut(m)),
        F::CorruptSnapshot(m) => F::CorruptSnapshot(cut(m)),
        F::Other(m) => F::Other(cut(m)),
    }
}

/// Asks the plugin's static `supports-batch-snapshot` in a throwaway store.
pub fn query_supports_batch_snapshot(loaded: &LoadedInner) -> Result<bool, PluginError> {
    const CALL: &str = "supports-batch-snapshot";
    let mut store = new_store(loaded)?;
    let answer = match &loaded.pre {
        KindPre::Enumerator(pre) => {
            pre.instantiate(&mut store)
                .and_then(|world: SplitEnumeratorPlugin| {
                    world
                        .coordhost_plugin_split_enumerator()
                        .enumerator()
                        .call_supports_batch_snapshot(&mut store)
                })
        }
        KindPre::Shuffle(pre) => {
            pre.instantiate(&mut store)
                .and_then(|world: ShuffleMasterPlugin| {
                    world
                        .coordhost_plugin_shuffle_master()
                        .shuffle_master()
                        .call_supports_batch_snapshot(&mut store)
                })
        }
        // A scalar function or source reader keeps no state to snapshot.
        KindPre::Function(_) | KindPre::Reader(_) => Ok(false),
    };
    answer.map_err(|e| Fault::classify(&store, &e).into_error(loaded, CALL, false))
}

/// Checks that `loaded` is of `kind`.
pub fn expect_kind(loaded: &LoadedPlugin, kind: PluginKind) -> Result<(), PluginError> {
    let spec = &loaded.inner().spec;
    if spec.kind == kind {
        Ok(())
    } else {
        Err(PluginError::KindMismatch {
            plugin: spec.name.clone(),
            path: spec.path.clone(),
            configured: kind,
            found: spec.kind,
        })
    }
}
