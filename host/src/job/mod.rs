//! Drive one job: the room above `scheduler/` and `recovery/` that connects
//! them (docs/architecture.md). [`run_job`] checks the job file, opens the
//! job's event log, refuses an edited job, recovers an interrupted run or
//! starts a fresh one, runs it on the scheduler's [`JobMaster`] with the
//! [`EventRecorder`] as its event sink, and closes the log.
//!
//! - `driver`: the sequence above (open, refuse, recover or start, run, close);
//! - `recorder`: scheduling facts → durable job events, and the job
//!   fingerprints that stop a replay against an edited job file;
//! - `plugins`: loading every plugin of the job file;
//! - `command`: the `coordhost run` face (clap arguments, progress, summary);
//! - `ui`: `run --ui`: starts the job's page and feeds it (docs/ui.md);
//! - `exit`: the exit codes of every command, and the rule that maps a
//!   [`JobError`] onto one.
//!
//! The scheduler's public types are re-exported here: this is the library's
//! face for running a job.

pub mod cancel;
mod command;
mod driver;
pub mod exit;
mod log_place;
mod plugins;
mod progress;
mod recorder;
mod sql;
mod ui;

pub use command::{RunArgs, run_command};
pub use driver::{recover_into, run_job};
pub use exit::{EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, exit_code};
pub use plugins::load_plugins;
pub use recorder::{EventRecorder, graph_fingerprint, job_fingerprint};
pub use ui::UiArgs;

pub use crate::scheduler::{
    BatchSnapshots, JobError, JobEventSink, JobMaster, JobStatus, NoEvents, ProgressListener,
    RecordingError, RunOptions, Summary, VertexSummary,
};
