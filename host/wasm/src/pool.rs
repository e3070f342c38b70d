//! The idle instances of a plugin that tasks call at the same time (scalar
//! functions, source readers): a call takes one or makes a fresh one, and
//! gives it back only when it ended normally (a faulted store is poisoned
//! and is dropped). At most [`MAX_IDLE`] are kept; more are dropped.

use std::sync::{Mutex, PoisonError};

/// Most idle instances one pool keeps.
pub const MAX_IDLE: usize = 16;

/// Idle instances of one plugin, shared by the threads that call it.
pub struct IdlePool<T> {
    idle: Mutex<Vec<T>>,
}

impl<T> IdlePool<T> {
    /// An empty pool.
    pub fn new() -> Self {
        Self {
            idle: Mutex::new(Vec::new()),
        }
    }

    /// An idle instance, if there is one.
    pub fn take(&self) -> Option<T> {
        self.idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop()
    }

    /// Gives `instance` back; dropped when [`MAX_IDLE`] are idle already.
    pub fn put(&self, instance: T) {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        if idle.len() < MAX_IDLE {
            idle.push(instance);
        }
    }
}
