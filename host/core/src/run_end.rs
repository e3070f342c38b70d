//! How the log's last run ended, as a coordinator reads it before it runs
//! anything: with high availability a job that failed on its own stays
//! failed, and a new leader does not run it again (docs/ha.md, "A failed job
//! stays failed"; Flink's FLINK-39704, where a JobManager that took over
//! re-ran a job that had failed).
//!
//! The rule reads only records: the last `JobFailed` counts while no run
//! (`JobStarted`), recovery (`RecoveryStarted`) or finish (`JobFinished`)
//! came after it; the term is that of the last `LeaderElected` before it.

use crate::events::JobEvent;

/// The failure the log's last run recorded (`JobFailed`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EarlierFailure {
    /// The term of the leader that recorded it, when the log names one
    /// (a `LeaderElected` before it).
    pub term: Option<u64>,
    /// The recorded error line.
    pub error: String,
    /// The failed run's exit code (1 failed while running, 2 bad input).
    pub exit_code: u8,
}

/// The failure of the log's last run when it ended with `JobFailed` and
/// no run, recovery or finish came after it; `None` otherwise. `events`
/// are the replayed records in log order.
pub fn failed_earlier<'a>(
    events: impl IntoIterator<Item = &'a JobEvent>,
) -> Option<EarlierFailure> {
    let mut term = None;
    let mut failed = None;
    for event in events {
        match event {
            JobEvent::LeaderElected(l) => term = Some(l.term),
            JobEvent::JobFailed(f) => {
                failed = Some(EarlierFailure {
                    term,
                    error: f.error.clone(),
                    exit_code: f.exit_code,
                });
            }
            JobEvent::JobStarted(_) | JobEvent::RecoveryStarted(_) | JobEvent::JobFinished(_) => {
                failed = None;
            }
            _ => {}
        }
    }
    failed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{JobFailed, JobFinished, JobStarted, LeaderElected, RecoveryStarted};

    fn started() -> JobEvent {
        JobEvent::JobStarted(JobStarted {
            job_id: "j".into(),
            graph_fingerprint: "f".into(),
            recovery_enabled: true,
        })
    }

    fn leader(term: u64) -> JobEvent {
        JobEvent::LeaderElected(LeaderElected {
            term,
            etcd: "etcd://127.0.0.1:2379".into(),
            address: String::new(),
        })
    }

    fn failed(error: &str) -> JobEvent {
        JobEvent::JobFailed(JobFailed {
            job_id: "j".into(),
            error: error.into(),
            exit_code: 1,
        })
    }

    #[test]
    fn a_failure_counts_with_the_term_of_the_leader_before_it() {
        let log = [leader(3), started(), leader(4), failed("boom")];
        assert_eq!(
            failed_earlier(&log),
            Some(EarlierFailure {
                term: Some(4),
                error: "boom".into(),
                exit_code: 1
            })
        );
        // A leader elected after the failure does not change whose it was.
        let later = [started(), failed("boom"), leader(9)];
        assert_eq!(failed_earlier(&later).and_then(|f| f.term), None);
    }

    #[test]
    fn a_run_recovery_or_finish_after_the_failure_ends_it() {
        let recovery = JobEvent::RecoveryStarted(RecoveryStarted {
            coordinator_epoch: 2,
            replayed_records: 3,
            torn_tail_bytes: 0,
        });
        let finished = JobEvent::JobFinished(JobFinished { job_id: "j".into() });
        for after in [started(), recovery, finished] {
            assert_eq!(failed_earlier(&[started(), failed("x"), after]), None);
        }
        assert_eq!(failed_earlier(&[started()]), None);
        assert_eq!(failed_earlier(&[]), None);
    }
}
