//! Watching plugin calls from outside: how long each call into a plugin
//! took, by plugin and WIT function, told to one process-wide
//! [`CallObserver`] (`coordhost run --ui` feeds its `/metrics` histogram
//! `coordhost_plugin_call_seconds` with it, docs/ui.md).
//!
//! The time is measured from the moment the call's deadline was armed
//! (just before the host enters the guest) to the moment its outcome is
//! settled (a value, a returned error or a fault), so it includes the
//! guest's own work and the host functions it called. Without an observer
//! a call costs one atomic load more; the clock is read at arming anyway.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// Told of every settled plugin call (see the module docs). Called on the
/// thread that made the call, inside the job's path: keep it quick.
pub trait CallObserver: Send + Sync {
    /// Plugin `plugin` (its `[plugins.NAME]` / `[functions.NAME]` name)
    /// answered its WIT function `call` (e.g. `handle-split-request`,
    /// `next-batch`, `invoke`) after `took`, whatever the outcome.
    fn plugin_call(&self, plugin: &str, call: &'static str, took: Duration);
}

static OBSERVER: OnceLock<Arc<dyn CallObserver>> = OnceLock::new();

/// Sets the process's call observer. One per process (a `coordhost run`
/// serves one job): returns false, and keeps the first, when one was set
/// already.
pub fn observe_calls(observer: Arc<dyn CallObserver>) -> bool {
    OBSERVER.set(observer).is_ok()
}

/// The observer, if one was set.
pub fn observer() -> Option<&'static Arc<dyn CallObserver>> {
    OBSERVER.get()
}
