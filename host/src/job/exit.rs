//! Exit codes of every `coordhost` command, defined once, and the rule
//! that maps a [`JobError`] onto one (also in the README's table).
//!
//! | code | meaning |
//! |---|---|
//! | 0 | success: the job finished, the component is a valid plugin, the log was printed |
//! | 1 | the job failed while running (a task ran out of attempts, a data error, a plugin failed), or the run failed on its own storage |
//! | 2 | bad input: command line, job file, component, log, data directory |
//! | 3 | the job was cancelled (`coordhost cancel`), by this run or an earlier one |
//! | 128 + N | signal N (2 SIGINT: 130, 15 SIGTERM: 143) stopped the run; the next run resumes the job |

use crate::plugin::PluginError;
use crate::scheduler::JobError;

/// Exit code: success (the job finished; the component is a valid plugin;
/// the log was printed).
pub const EXIT_OK: u8 = 0;
/// Exit code: the job (or the check) failed while running, or the run
/// failed on its own storage.
pub const EXIT_FAILED: u8 = 1;
/// Exit code: bad input (command line, job file, component, log, data
/// directory).
pub const EXIT_BAD_INPUT: u8 = 2;
/// Exit code: the job was cancelled (`coordhost cancel`), in this run or,
/// for a run that refused to go on with it, an earlier one.
pub const EXIT_CANCELLED: u8 = 3;

/// Exit code of a run stopped by signal `number` (the shell's convention,
/// 128 + N: 130 for SIGINT, 143 for SIGTERM).
#[must_use]
pub fn exit_stopped(number: i32) -> u8 {
    u8::try_from(128 + number.clamp(1, 127)).unwrap_or(u8::MAX)
}

/// The exit code of a run that ended with `error` before a summary existed.
///
/// One rule for storage: a run that fails on its own storage (the event
/// log cannot be written or synced, a record does not fit, a file of the
/// data directory cannot be used) exits [`EXIT_FAILED`], as a failure
/// while the job runs does; [`EXIT_BAD_INPUT`] is for what the user gave:
/// the command line, the job file, a component, a log that is damaged or
/// written by a newer coordhost, a data directory in use or of another job.
#[must_use]
pub fn exit_code(error: &JobError) -> u8 {
    if let JobError::FailedEarlier { exit_code, .. } = error {
        // The failed run's own code, as it exited then.
        return *exit_code;
    }
    match error {
        JobError::Stopped { signal } => return exit_stopped(*signal),
        JobError::Cancelled { .. } | JobError::CancelledEarlier { .. } => return EXIT_CANCELLED,
        _ => {}
    }
    if error.is_bad_input() {
        EXIT_BAD_INPUT
    } else {
        EXIT_FAILED
    }
}

impl JobError {
    /// Whether this error is bad input (exit 2: the job file, a component,
    /// the command line, the data directory) rather than a failure while the
    /// job started or ran (exit 1). A plugin that traps, misses a deadline,
    /// breaks the contract or returns an error other than
    /// `invalid-config` failed; a component that cannot be loaded is bad
    /// input.
    pub fn is_bad_input(&self) -> bool {
        use crate::events::EventsError;
        match self {
            // A run that fails on its own storage (the data directory, the
            // log, an output file) failed; it is not bad input.
            Self::Workers { .. }
            | Self::Io { .. }
            | Self::Recording { .. }
            | Self::Internal { .. }
            | Self::RecoveryRetryLater { .. }
            | Self::SinkStore { .. }
            | Self::ShuffleStore { .. }
            // A plugin or a task failed while the job ran.
            | Self::Commit { .. }
            | Self::LostLeadership { .. }
            | Self::NoWorker { .. }
            | Self::FailedEarlier { .. }
            | Self::Stopped { .. }
            | Self::Cancelled { .. }
            | Self::CancelledEarlier { .. }
            | Self::TaskFailed { .. }
            // Input data found wrong while the job ran (a value that does not
            // parse): the job failed, exit 1, as Spark's FAILFAST mode.
            | Self::InvalidData { .. } => false,
            // A split enumerator that refused its configuration is bad
            // input; any other failure of it is a failure of the run.
            Self::Coordinator(_) => self.is_invalid_plugin_config(),
            Self::Log { source } => !matches!(
                source,
                EventsError::Io { .. }
                    | EventsError::WriteFailed { .. }
                    | EventsError::RecordTooLarge { .. }
                    | EventsError::Encode { .. }
                    | EventsError::SnapshotFile { .. }
                    | EventsError::Store { .. }
            ),
            Self::Plugin { source, .. } => matches!(
                source,
                PluginError::Read { .. }
                    | PluginError::Empty { .. }
                    | PluginError::NotAComponent { .. }
                    | PluginError::Compile { .. }
                    | PluginError::WrongWorld { .. }
                    | PluginError::IncompatibleVersion { .. }
                    | PluginError::KindMismatch { .. }
                    | PluginError::Link { .. }
                    | PluginError::Grant { .. }
                    | PluginError::Returned {
                        error: crate::plugin::PluginFailure::InvalidConfig(_),
                        ..
                    }
            ),
            _ => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::EventsError;

    fn log(source: EventsError) -> JobError {
        JobError::Log { source }
    }

    #[test]
    fn a_run_that_fails_on_its_own_storage_exits_1_and_bad_input_exits_2() {
        let io = || std::io::Error::other("No space left on device");
        let storage = [
            log(EventsError::RecordTooLarge {
                kind_name: "ExecutionFinished",
                len: 73_400_412,
                max: crate::events::format::MAX_PAYLOAD_LEN,
            }),
            log(EventsError::Io {
                path: "log/segment-00000001.log".into(),
                source: io(),
            }),
            log(EventsError::WriteFailed {
                segment: "log/segment-00000001.log".into(),
                offset: 24,
                source: std::sync::Arc::new(io()),
            }),
            log(EventsError::SnapshotFile {
                path: "log/snapshot-00000001-00000000.state".into(),
                problem: "cannot be written: No space left on device".into(),
            }),
            JobError::Recording {
                source: crate::scheduler::RecordingError::Log(EventsError::Io {
                    path: "log/segment-00000001.log".into(),
                    source: io(),
                }),
            },
            JobError::Internal {
                reason: "the task channel closed".into(),
            },
            JobError::Io {
                path: "data/output".into(),
                source: io(),
            },
        ];
        for e in &storage {
            assert_eq!(exit_code(e), EXIT_FAILED, "{e}");
        }
        let input = [
            log(EventsError::UnsupportedVersion {
                kind: 5,
                kind_name: "SinkCommitted",
                version: 9,
                max_known: 1,
                segment: "log/segment-00000000.log".into(),
                offset: 24,
            }),
            log(EventsError::UnknownKind {
                kind: 99,
                max_known: crate::events::format::kind::NEWEST,
                segment: "log/segment-00000000.log".into(),
                offset: 24,
            }),
            log(EventsError::Locked {
                path: "log/LOCK".into(),
            }),
            JobError::JobFileChanged {
                data_dir: "data".into(),
            },
        ];
        for e in &input {
            assert_eq!(exit_code(e), EXIT_BAD_INPUT, "{e}");
        }
    }

    #[test]
    fn a_split_enumerator_refusing_its_config_in_create_is_bad_input_other_errors_are_not() {
        use crate::coordinator::CoordinatorError;
        use crate::plugin::PluginFailure;
        let returned = |call, error| {
            JobError::Coordinator(CoordinatorError::Plugin {
                vertex: "source".into(),
                source: PluginError::Returned {
                    plugin: "files".into(),
                    call,
                    error,
                },
            })
        };
        let refused = returned("create", PluginFailure::InvalidConfig("split-bytes".into()));
        assert!(refused.is_invalid_plugin_config());
        assert_eq!(exit_code(&refused), EXIT_BAD_INPUT);
        for failed in [
            returned("create", PluginFailure::Io("disk".into())),
            returned(
                "handle-split-request",
                PluginFailure::InvalidConfig("late".into()),
            ),
        ] {
            assert!(!failed.is_invalid_plugin_config(), "{failed}");
            assert_eq!(exit_code(&failed), EXIT_FAILED, "{failed}");
        }
    }
}
