//! Time as the core reads it: a monotonic reading, the time since the
//! clock's origin, so that a decision that waits ("the minimum pause
//! between batch snapshots passed") is a function of state and the time it
//! is handed, and a test or a simulation can hand it any time it likes
//! (the idea of raft-rs's `tick()` and of tokio's paused test clock).

use std::fmt::Debug;
use std::sync::Mutex;
use std::sync::PoisonError;
use std::time::{Duration, Instant};

/// A monotonic clock.
pub trait Clock: Send + Sync + Debug {
    /// The time since this clock's origin; never less than an earlier reading.
    fn now(&self) -> Duration;
}

/// The process's monotonic clock (`Instant`), from its creation.
#[derive(Debug, Clone, Copy)]
pub struct SystemClock {
    origin: Instant,
}

impl SystemClock {
    /// A clock whose origin is now.
    #[must_use]
    pub fn new() -> Self {
        Self {
            origin: Instant::now(),
        }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    fn now(&self) -> Duration {
        self.origin.elapsed()
    }
}

/// A clock that moves only when told ([`ManualClock::advance`]): tests and
/// simulations decide what time it is.
#[derive(Debug, Default)]
pub struct ManualClock {
    now: Mutex<Duration>,
}

impl ManualClock {
    /// A clock at its origin.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let mut now = self.now.lock().unwrap_or_else(PoisonError::into_inner);
        *now = now.saturating_add(by);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Duration {
        *self.now.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_advanced_and_the_system_clock_never_goes_back() {
        let manual = ManualClock::new();
        assert_eq!(manual.now(), Duration::ZERO);
        manual.advance(Duration::from_millis(250));
        manual.advance(Duration::from_millis(250));
        assert_eq!(manual.now(), Duration::from_millis(500));
        let system = SystemClock::new();
        let (a, b) = (system.now(), system.now());
        assert!(b >= a);
    }
}
