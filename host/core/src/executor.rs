//! Where execution attempts run, as the JobMaster sees it: one trait for
//! threads of the coordinator's own process, worker processes over gRPC and
//! the simulator's virtual workers (issue 28; Flink's `TaskExecutorGateway`
//! seen from the scheduler, Ballista's `ExecutorManager`).
//!
//! An executor is told to start, stop and clean up attempts; it never
//! decides anything. What happens to an attempt comes back to the JobMaster
//! later, as an input of its own (finished, failed, its `Deploy` refused,
//! its worker lost), never as a return value: a deploy returns at once.

use std::collections::BTreeSet;
use std::path::PathBuf;

use crate::graph::AttemptId;

/// The name of a worker (a worker process's id; the embedded executor's one
/// place is [`IN_PROCESS`]).
pub type WorkerId = String;

/// The one worker of an executor that runs attempts in the coordinator's own
/// process.
pub const IN_PROCESS: &str = "local";

/// Where execution attempts run.
pub trait Executor {
    /// What one attempt carries to where it runs (the binary: its task
    /// spec; the simulator: nothing but the attempt).
    type Task;

    /// Whether attempts run on worker processes that can be lost, refuse a
    /// `Deploy`, or be missing (then an attempt waits to be placed);
    /// `false` for threads of the coordinator's own process.
    fn is_remote(&self) -> bool;

    /// The worker the next attempt of an execution vertex goes to: one not
    /// in `avoid` (the workers its earlier attempts failed on) while there
    /// is one; `None` when no worker is alive, so the attempt waits.
    fn pick_worker(&self, avoid: &BTreeSet<WorkerId>) -> Option<WorkerId>;

    /// Starts `task`, attempt `attempt`, on `worker` and returns at once.
    ///
    /// # Errors
    /// Only when nothing can be handed to any worker any more (the
    /// coordinator lost its leadership): the message says why. A refused
    /// or unanswered `Deploy` is not an error here; it comes back later.
    fn deploy(&mut self, attempt: AttemptId, task: Self::Task, worker: &str) -> Result<(), String>;

    /// Asks `attempt` to stop if it still runs (it was reset); its end, if
    /// it comes, is a superseded attempt's.
    fn cancel(&mut self, attempt: AttemptId);

    /// Deletes what `attempt` wrote on its worker: its result partitions at
    /// `locations` (relative to the worker's root).
    fn release(&mut self, attempt: AttemptId, locations: &[PathBuf]);

    /// Attempts it runs at once, in all.
    fn slots(&self) -> u64;
}
