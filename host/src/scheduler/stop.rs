//! Stopping a running job before it ends: a signal (SIGINT, SIGTERM) or
//! `coordhost cancel` asks, the JobMaster's loop notices within one tick
//! ([`StopRequest::TICK`]), stops its attempts and ends the run
//! (docs/job-file.md, "Stopping, cancelling, resuming").
//!
//! The two differ in what stays: a **stop** (a signal) records nothing
//! more and keeps every result partition, so the next run of the same
//! command recovers the job as after a crash (Flink's "suspend"); a
//! **cancel** records `JobCancelled`, releases the job's partitions, and a
//! later run refuses to go on unless asked (`run --resume`), as Flink's
//! `cancel` and Spark's `kill` end a job for good.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::Duration;

/// Why a run was asked to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// A signal (its number): stop and keep everything for the next run.
    Signal(i32),
    /// `coordhost cancel`: the job ends cancelled.
    Cancel,
}

impl StopReason {
    /// The signal's name (`SIGINT`, `SIGTERM`, else `signal N`), or
    /// `coordhost cancel`.
    #[must_use]
    pub fn describe(self) -> String {
        match self {
            Self::Signal(n) => signal_name(n),
            Self::Cancel => "`coordhost cancel`".to_owned(),
        }
    }
}

/// `SIGINT`, `SIGTERM`, `SIGHUP` by number; else `signal N`.
#[must_use]
pub fn signal_name(number: i32) -> String {
    match number {
        1 => "SIGHUP".to_owned(),
        2 => "SIGINT".to_owned(),
        15 => "SIGTERM".to_owned(),
        n => format!("signal {n}"),
    }
}

/// A request to stop one run, shared by whoever asks (the signal thread of
/// `coordhost run`, the cancel watcher of the job driver) and the
/// JobMaster, which polls it. The first request wins: a cancel after a
/// signal does not turn a stop into a cancel, nor the other way round.
#[derive(Debug, Default)]
pub struct StopRequest {
    /// 0: none; -1: cancel; n > 0: signal n.
    reason: AtomicI32,
    /// Whether a JobMaster's loop is running and will notice a request.
    accepting: AtomicBool,
}

impl StopRequest {
    /// How often the JobMaster's loop looks at the request at most.
    pub const TICK: Duration = Duration::from_millis(50);

    /// Asks the run to stop; returns false if an earlier request stands.
    pub fn request(&self, reason: StopReason) -> bool {
        let code = match reason {
            StopReason::Cancel => -1,
            StopReason::Signal(n) => n.max(1),
        };
        self.reason
            .compare_exchange(0, code, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    }

    /// The standing request, if any.
    #[must_use]
    pub fn requested(&self) -> Option<StopReason> {
        match self.reason.load(Ordering::SeqCst) {
            0 => None,
            -1 => Some(StopReason::Cancel),
            n => Some(StopReason::Signal(n)),
        }
    }

    /// Whether a JobMaster's loop is running now and will act on a request
    /// within a tick. While it is not (planning, recovery, a high
    /// availability campaign, the end of the run), a signal ends the
    /// process at once: the event log is safe at any instant, as after a
    /// crash.
    #[must_use]
    pub fn accepting(&self) -> bool {
        self.accepting.load(Ordering::SeqCst)
    }

    /// Set by the JobMaster when its loop starts (true) and ends (false).
    pub fn set_accepting(&self, on: bool) {
        self.accepting.store(on, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_request_wins() {
        let r = StopRequest::default();
        assert_eq!(r.requested(), None);
        assert!(r.request(StopReason::Signal(15)));
        assert!(!r.request(StopReason::Cancel));
        assert_eq!(r.requested(), Some(StopReason::Signal(15)));
        let r = StopRequest::default();
        assert!(r.request(StopReason::Cancel));
        assert!(!r.request(StopReason::Signal(2)));
        assert_eq!(r.requested(), Some(StopReason::Cancel));
        assert_eq!(StopReason::Signal(2).describe(), "SIGINT");
    }
}
