//! The scheduler: runs a batch job from its job file to its `_SUCCESS`
//! marker, as Flink's JobMaster does for a batch job with blocking shuffles.
//!
//! One thread owns the scheduling state ([`crate::graph::ExecutionGraph`],
//! the source coordinators, the shuffle master plugin): a single loop that
//! receives messages (task finished, task failed, split requested) and
//! changes the graph. Tasks run on a [`crate::runtime::WorkerPool`] and
//! report back over a channel. A job vertex is initialized (its `auto`
//! parallelism decided from its inputs' produced bytes) and its subtasks
//! deployed once all its inputs are finished; every result partition is
//! registered with the shuffle master plugin before its producer runs. A
//! failed attempt is re-run (up to `max-attempts` attempts per execution
//! vertex; on worker processes, an attempt that could not be placed — no
//! worker alive, a `Deploy` refused or unanswered — does not count: it
//! waits for a worker, at most `job.slot-request-timeout-ms`); a consumer that finds an input partition missing
//! (PartitionNotFound) resets that producer first (Flink's region
//! failover, reduced to blocking edges).
//!
//! Scheduling facts go to a [`JobEventSink`] (vertex initialized, execution
//! finished, executions reset), so the durable event log can hook in; a
//! recovery's decision arrives as a plain-value
//! [`RecoveryPlan`](crate::plan::RecoveryPlan) that
//! [`JobMaster::apply_recovery`] installs before anything is scheduled. The
//! scheduler never imports `recovery/`: the job driver (`crate::job`)
//! connects the two (docs/architecture.md).

mod master;
mod stop;
pub use stop::{StopReason, StopRequest, signal_name};

use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::config::ConfigError;
use crate::coordinator::CoordinatorError;
use crate::graph::{AttemptId, ProducedPartition, VertexInit};
use crate::plugin::PluginError;
use crate::runtime::TaskError;

pub use master::JobMaster;

/// Everything that can stop a job.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JobError {
    /// The job file is wrong.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A plugin could not be loaded, or a call into it failed. The message
    /// names the plugin once (most plugin errors name it themselves).
    #[error("{}", plugin_message(plugin, source))]
    Plugin {
        /// The plugin's name in the job file.
        plugin: String,
        /// What went wrong.
        source: PluginError,
    },
    /// A plugin of the job file could not be loaded.
    #[error("{}: field `plugins.{plugin}.{field}`: {source}", file.display())]
    PluginLoad {
        /// The job file.
        file: PathBuf,
        /// The plugin's name in the job file.
        plugin: String,
        /// The field at fault: `component`, `kind`, `dirs` or `config`.
        field: &'static str,
        /// What went wrong (boxed: it is large and rare).
        source: Box<PluginError>,
    },
    /// A source coordinator's enumerator failed.
    #[error(transparent)]
    Coordinator(#[from] CoordinatorError),
    /// A file or folder of the data directory or the output could not be used.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Publishing sink output failed.
    #[error("sink of vertex `{vertex}`: {source}")]
    Commit {
        /// The sink vertex id.
        vertex: String,
        /// The error (boxed: it is large and rare).
        source: Box<TaskError>,
    },
    /// An execution vertex failed on its last allowed attempt.
    #[error(
        "vertex `{vertex}` subtask {subtask} failed on attempt {attempt} (of at most {max_attempts}): {source}"
    )]
    TaskFailed {
        /// The job vertex id.
        vertex: String,
        /// The subtask.
        subtask: u32,
        /// The last attempt number.
        attempt: u32,
        /// The limit from `job.max-attempts`.
        max_attempts: u32,
        /// Why it failed.
        source: Box<TaskError>,
    },
    /// An execution vertex failed on input that is wrong where it is
    /// stored ([`TaskError::InvalidData`]: a value that does not parse, a
    /// damaged file). Another attempt would read the same bytes, so the
    /// attempt is not retried and the job fails at once, whatever
    /// `max-attempts` allows (a permanent failure, as Flink classifies
    /// non-recoverable errors).
    #[error(
        "{source} (vertex `{vertex}` subtask {subtask}, attempt {attempt}; a data error is not retried)"
    )]
    InvalidData {
        /// The job vertex id.
        vertex: String,
        /// The subtask.
        subtask: u32,
        /// The attempt that read it.
        attempt: u32,
        /// The error, naming the file, line, column and value.
        source: Box<TaskError>,
    },
    /// On worker processes: an execution vertex found no worker to run on
    /// (none was alive, or every `Deploy` of it failed) for
    /// `job.slot-request-timeout-ms` (Flink's `slot.request.timeout`).
    #[error(
        "vertex `{vertex}` subtask {subtask} found no worker to run on within {waited_ms} ms (job.slot-request-timeout-ms): {why}"
    )]
    NoWorker {
        /// The job vertex id.
        vertex: String,
        /// The subtask.
        subtask: u32,
        /// The setting's value, ms.
        waited_ms: u64,
        /// Why the last try to place it failed (`no worker is registered`,
        /// or the worker and its answer to the `Deploy`).
        why: String,
    },
    /// With high availability: this coordinator lost the leadership of
    /// the job (its etcd lease expired) and stopped before the next step
    /// that needs it (a sink publication, a command to a worker).
    #[error("{reason}; this coordinator stops without writing or commanding anything more")]
    LostLeadership {
        /// What the leadership's fence said.
        reason: String,
    },
    /// High availability: the log's last run ended with `JobFailed`; a new
    /// leader does not run a failed job again (docs/ha.md, "A failed job
    /// stays failed"). Exits with the failed run's exit code.
    #[error("job `{job}` failed under an earlier coordinator{}: {error}; a leader does not run a failed job again: `coordhost run --ha ... --fresh` runs it again from scratch", term.map(|t| format!(" (term {t})")).unwrap_or_default())]
    FailedEarlier {
        /// The job.
        job: String,
        /// The term of the leader that recorded the failure, if the log
        /// names one.
        term: Option<u64>,
        /// The recorded error line.
        error: String,
        /// The failed run's exit code (1, or 2 for bad input).
        exit_code: u8,
    },
    /// The run was stopped by a signal (SIGINT, SIGTERM) before the job
    /// ended ([`StopRequest`]): nothing more was recorded and every result
    /// partition is kept, so the next run recovers the job.
    #[error("stopped by {}: what finished is kept in the event log; run the same command again to resume the job, or `coordhost cancel` its data folder to cancel it", signal_name(*signal))]
    Stopped {
        /// The signal's number.
        signal: i32,
    },
    /// The run was cancelled (`coordhost cancel`): its attempts stopped,
    /// its partitions released, `JobCancelled` recorded.
    #[error(
        "job `{job}` was cancelled ({by}); a later run does not resume it unless asked (`run --resume`)"
    )]
    Cancelled {
        /// The job.
        job: String,
        /// Who asked.
        by: String,
    },
    /// The log's last run ended cancelled (`JobCancelled`): a run does not
    /// go on with a cancelled job unless asked.
    #[error(
        "job `{job}` was cancelled ({by}); a run does not resume a cancelled job: pass --resume to go on from where it stopped, or --fresh to run it again from scratch"
    )]
    CancelledEarlier {
        /// The job.
        job: String,
        /// Who asked, as recorded.
        by: String,
    },
    /// The job event log cannot be opened (another coordinator holds it, or
    /// an I/O error).
    #[error("job event log: {source}")]
    Log {
        /// The log's error.
        #[from]
        source: crate::events::EventsError,
    },
    /// The data directory holds a log of this job written for a different
    /// job graph: replaying it would be wrong.
    #[error("{}: the job's event log was written for a different job graph (the job file changed since); undo the edit, use another {}, or pass --fresh to discard what this one holds for the job", data_dir.display(), if data_dir.to_string_lossy().starts_with("s3://") { "log prefix" } else { "--data-dir" })]
    JobFileChanged {
        /// The data directory, or the `s3://` URL of a log on object
        /// storage.
        data_dir: PathBuf,
    },
    /// Progress cannot be recovered and a full re-run would duplicate sink
    /// output that was already committed (docs/recovery.md step 8).
    #[error("{reason}; a full re-run would duplicate the sink output already committed in {}: pass --fresh to discard it and run the job again from scratch", output.display())]
    WouldDuplicate {
        /// Why recovery is impossible.
        reason: String,
        /// A sink folder holding committed output.
        output: PathBuf,
    },
    /// The sink folder holds published output, but the data directory holds
    /// no event log of this job (deleted, or only its segments): a run from
    /// scratch would delete that output without a word (issue 12.3).
    #[error("{}: published output ({}) but no event log of job `{job}` in the data directory (was it deleted?); a run from scratch would delete it: pass --fresh to discard what this data directory holds", output.display(), files.join(", "))]
    UnloggedOutput {
        /// The job id.
        job: String,
        /// The sink folder.
        output: PathBuf,
        /// The published files in it (names).
        files: Vec<String>,
    },
    /// A sink folder holds an entry although the job's event log on object
    /// storage has no run of this job: the folder's rule of docs/job-file.md
    /// ("Sinks"), checked once the log is read because the data directory
    /// alone cannot say whether the job ran (a standby on another data
    /// directory shares the sink folder and the log, not the disk).
    ///
    /// A sink on object storage: its prefix holds a `part-*` or `_SUCCESS`
    /// object and the job's log (wherever it is) has no run of the job.
    #[error("{}: already holds `{entry}`, which this job did not write (its event log {log} has no run of job `{job}`); {}", output.display(), if output.to_string_lossy().starts_with("s3://") { "delete those objects, name another prefix, or set `overwrite = true` to let a fresh run delete the `part-*` and `_SUCCESS` objects there" } else { "empty the folder, name another, or set `overwrite = true` to let a fresh run remove `part-*`, `_SUCCESS` and `_staging` there" })]
    ForeignOutput {
        /// The job id.
        job: String,
        /// The sink folder, or the `s3://` URL of a sink on objects.
        output: PathBuf,
        /// The first entry in it, by name.
        entry: String,
        /// The log's URL.
        log: String,
    },
    /// The store of a sink on object storage cannot be used (it cannot be
    /// reached, refuses the credentials, has no such bucket): one line
    /// naming the endpoint and the sink's `s3://` URL, never credentials.
    /// Exit code 1: the run failed on its storage.
    #[error("sink output: {problem}")]
    SinkStore {
        /// `object store ENDPOINT (sink s3://BUCKET/PREFIX): WHAT (DETAIL)`.
        problem: String,
    },
    /// The store of a writable store grant of the shuffle master (where a
    /// shuffle master such as `object-shuffle` places result partitions,
    /// which the host writes) could not be used when asked before anything
    /// ran: one line naming the endpoint, the plugin and the grant, never
    /// credentials. Exit code 1, as for a sink's store.
    #[error("result partitions: {problem}")]
    ShuffleStore {
        /// `object store ENDPOINT (store granted to shuffle master `P`: s3://…): WHAT (DETAIL)`.
        problem: String,
    },
    /// Recovery itself failed (a plugin or the shuffle master could not be
    /// restored or asked) although the log is intact, and committed sink
    /// output rules out a full re-run: the log is kept as it is (a
    /// `RecoveryStarted` added), and the next run of the same command tries
    /// to recover again (docs/recovery.md, "When
    /// recovery gives up"). Exit code 1: the run failed, the input is fine.
    #[error("recovery failed: {reason}; the job event log is kept and the next `coordhost run` of this job tries to recover again (a full re-run now would duplicate the sink output already committed in {})", output.display())]
    RecoveryRetryLater {
        /// What failed.
        reason: String,
        /// A sink folder holding committed output.
        output: PathBuf,
    },
    /// Recovery could not use the log (docs/recovery.md step 8).
    #[error("recovery failed: {source}")]
    Recovery {
        /// Why.
        #[from]
        source: crate::plan::RecoveryError,
    },
    /// The run stopped at a simulated crash point (a test knob: fail points
    /// `crash::*` of [`crate::failpoints`]).
    #[cfg(feature = "failpoints")]
    #[error("simulated coordinator crash {point}")]
    SimulatedCrash {
        /// Where.
        point: String,
    },
    /// The event sink refused an event.
    #[error("recording a job event failed: {source}")]
    Recording {
        /// What the sink said.
        #[from]
        source: RecordingError,
    },
    /// A state the scheduler never reaches unless it has a bug (a plugin
    /// of the job file missing after loading, the task channel closed).
    #[error("internal error: {reason}")]
    Internal {
        /// What happened.
        reason: String,
    },
    /// The worker pool could not start.
    #[error("cannot start the worker pool: {source}")]
    Workers {
        /// The OS error.
        source: std::io::Error,
    },
}

impl JobError {
    /// Whether a split enumerator refused its configuration: an
    /// `invalid-config` error value from `create` while its source
    /// coordinator starts. That is bad input (the job file's plugin
    /// `config`), not a failure of the run (issue 17, fix 5).
    #[must_use]
    pub fn is_invalid_plugin_config(&self) -> bool {
        matches!(
            self,
            Self::Coordinator(CoordinatorError::Plugin {
                source: PluginError::Returned {
                    call: "create",
                    error: crate::plugin::PluginFailure::InvalidConfig(_),
                    ..
                },
                ..
            })
        )
    }
}

/// `plugin `NAME`: ERROR`, unless the error names its plugin itself (the
/// one rule: [`PluginError::plugin`]).
fn plugin_message(plugin: &str, source: &PluginError) -> String {
    match source.plugin() {
        Some(_) => source.to_string(),
        None => format!("plugin `{plugin}`: {source}"),
    }
}

/// Why a [`JobEventSink`] refused a scheduling fact; the job fails with
/// [`JobError::Recording`] (exit 1: the run failed on its own storage).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecordingError {
    /// The event log refused the event (a write or fsync failure is
    /// sticky: every later append fails too).
    #[error(transparent)]
    Log(#[from] crate::events::EventsError),
    /// A batch snapshot cannot be put in the log's form.
    #[error(transparent)]
    Snapshot(#[from] crate::snapshot::SnapshotError),
    /// The fact names a job vertex the job graph does not have.
    #[error("unknown job vertex `{vertex}`")]
    UnknownVertex {
        /// The vertex id.
        vertex: String,
    },
}

/// Receives scheduling facts as they happen: the hook for the durable job
/// event log (FLIP-383 "recording"). Every method is called on the
/// scheduler's thread, after the graph changed and before the change is
/// acted on (e.g. a vertex is initialized before its subtasks deploy).
pub trait JobEventSink {
    /// Vertex `vertex` got its parallelism and input ranges
    /// (`JobVertexInitialized`).
    ///
    /// # Errors
    ///
    /// [`RecordingError`]; the job fails with [`JobError::Recording`].
    fn vertex_initialized(&mut self, vertex: &str, init: &VertexInit)
    -> Result<(), RecordingError>;

    /// An execution attempt finished with these partitions
    /// (`ExecutionFinished`), with the batch snapshots taken at this moment
    /// (FLIP-383 "recording": when its job vertex completed or the snapshot
    /// minimum pause passed; empty otherwise), handed over: the record
    /// takes their bytes without a copy (issue 29).
    ///
    /// # Errors
    ///
    /// As [`JobEventSink::vertex_initialized`].
    fn execution_finished(
        &mut self,
        vertex: &str,
        attempt: AttemptId,
        partitions: &[ProducedPartition],
        snapshots: BatchSnapshots,
    ) -> Result<(), RecordingError>;

    /// These attempts were reset and will run again (`ExecutionsReset`).
    ///
    /// # Errors
    ///
    /// As [`JobEventSink::vertex_initialized`].
    fn executions_reset(
        &mut self,
        vertex: &str,
        attempts: &[AttemptId],
        reason: &crate::events::ResetReason,
    ) -> Result<(), RecordingError>;

    /// Sink subtask `attempt` published its output as `file` (the part
    /// file's name in the sink folder) (`SinkCommitted`). Called right
    /// after the publish, before the attempt's
    /// [`JobEventSink::execution_finished`].
    ///
    /// # Errors
    ///
    /// As [`JobEventSink::vertex_initialized`].
    fn sink_committed(&mut self, _attempt: AttemptId, _file: &str) -> Result<(), RecordingError> {
        Ok(())
    }

    /// Finishes that arrived together are recorded as one group from here
    /// to [`JobEventSink::end_finishes`] (group commit): in between,
    /// [`JobEventSink::execution_finished`] may append without waiting
    /// for durability.
    fn begin_finishes(&mut self) {}

    /// Makes every record of the group durable at once (one write, one
    /// fsync), before the scheduler acts on any of its finishes.
    ///
    /// # Errors
    ///
    /// As [`JobEventSink::vertex_initialized`].
    fn end_finishes(&mut self) -> Result<(), RecordingError> {
        Ok(())
    }

    /// Every vertex finished; the sinks' `_SUCCESS` markers come next. The
    /// log must be durable before they are written.
    ///
    /// # Errors
    ///
    /// As [`JobEventSink::vertex_initialized`].
    fn job_finished(&mut self) -> Result<(), RecordingError> {
        Ok(())
    }
}

/// Batch snapshots taken when an execution finished (FLIP-383 recording).
#[derive(Debug, Default, Clone)]
pub struct BatchSnapshots {
    /// Source coordinators touched since the last snapshot, by job vertex id:
    /// the enumerator's state plus the host's split-assignment history.
    pub coordinators: Vec<(String, crate::coordinator::CoordinatorSnapshot)>,
    /// The shuffle master's snapshot.
    pub shuffle: Option<crate::plugin::ShuffleMasterSnapshot>,
}

impl BatchSnapshots {
    /// Whether nothing was taken.
    pub fn is_empty(&self) -> bool {
        self.coordinators.is_empty() && self.shuffle.is_none()
    }
}

/// A [`JobEventSink`] that records nothing.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoEvents;

impl JobEventSink for NoEvents {
    fn vertex_initialized(&mut self, _: &str, _: &VertexInit) -> Result<(), RecordingError> {
        Ok(())
    }
    fn execution_finished(
        &mut self,
        _: &str,
        _: AttemptId,
        _: &[ProducedPartition],
        _: BatchSnapshots,
    ) -> Result<(), RecordingError> {
        Ok(())
    }
    fn executions_reset(
        &mut self,
        _: &str,
        _: &[AttemptId],
        _: &crate::events::ResetReason,
    ) -> Result<(), RecordingError> {
        Ok(())
    }
}

/// Receives progress for display (a progress bar per vertex, or lines).
/// Called on the scheduler's thread; keep it quick.
pub trait ProgressListener: Send + Sync {
    /// Vertex `vertex` will run `parallelism` subtasks.
    fn vertex_initialized(&self, vertex: &str, parallelism: u32);
    /// A subtask of `vertex` finished; `finished` of `total` are done.
    fn task_finished(&self, vertex: &str, finished: u32, total: u32);
    /// An attempt failed and will be retried (or the job fails).
    fn task_failed(&self, vertex: &str, subtask: u32, attempt: u32, reason: &str);
    /// An attempt failed and the job fails on it (a data error, which is
    /// not retried, or the last attempt `max-attempts` allows): the run's
    /// final `coordhost:` line prints the error, so a printer need not.
    /// Default: [`ProgressListener::task_failed`].
    fn task_failed_for_good(&self, vertex: &str, subtask: u32, attempt: u32, reason: &str) {
        self.task_failed(vertex, subtask, attempt, reason);
    }
    /// Attempt `attempt` of subtask `subtask` of `vertex` was deployed (it
    /// counts in the summary's `tasks_run`). Default: nothing (the
    /// progress bars need it not; `coordhost run --ui` does).
    fn task_started(&self, _vertex: &str, _subtask: u32, _attempt: u32) {}
    /// Source vertex `vertex` handed a split to a reader: `input` is what
    /// it handed out in this run so far (cumulative) and what its split
    /// enumerator still holds. Default: nothing.
    fn input_progress(&self, _vertex: &str, _input: InputProgress) {}
}

/// A source vertex's input handed to readers in this run, for progress
/// display (`coordhost run`'s bars and lines, `--ui`): like Flink's
/// source metrics `numBytesIn`/`pendingSplits`, counted by the host.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputProgress {
    /// Splits handed to readers in this run (read again ones included).
    pub splits: u64,
    /// Their input bytes (a `file-range` split's length, an inline
    /// split's text length).
    pub bytes: u64,
    /// Splits the enumerator still holds (its `unassigned-splits`), as
    /// last asked: `None` before the first answer or if it failed. The
    /// enumerator's own count: a plugin may discover more later.
    pub splits_left: Option<u64>,
}

/// How to run a job.
#[derive(Clone)]
pub struct RunOptions {
    /// The job file.
    pub job_file: PathBuf,
    /// The data directory (`--data-dir`; default `./coordhost-data`).
    pub data_dir: PathBuf,
    /// Worker threads; overrides `job.workers`; default one per core.
    pub workers: Option<usize>,
    /// Compiled-component cache; default `<data-dir>/cache`.
    pub cache_dir: Option<PathBuf>,
    /// Progress display.
    pub progress: Option<Arc<dyn ProgressListener>>,
    /// `--fresh`: discard what the data directory holds for this job (its
    /// log is set aside, never deleted; published output is removed) and
    /// run from scratch.
    pub fresh: bool,
    /// Run the attempts on worker processes registered with this cluster
    /// (`coordhost run --listen ... --external-workers N`) instead of
    /// threads of this process (`crate::remote`).
    pub external: Option<Arc<crate::remote::Cluster>>,
    /// With high availability (`coordhost run --ha`): the leadership's
    /// fence (`crate::ha`). The event log is guarded by it instead of its
    /// lock, and sink publication checks it first.
    pub fence: Option<Arc<dyn crate::events::Fence>>,
    /// With high availability: the leadership, recorded in the log as
    /// `LeaderElected` once the run starts or recovers.
    pub leader: Option<crate::events::LeaderElected>,
    /// With high availability and `--fresh`: where the log's last
    /// `JobStarted` was when this coordinator started, before it campaigned
    /// (`None` inside: no log, or no `JobStarted` in it). Once it leads,
    /// the log is discarded only if that is still its last `JobStarted`:
    /// a run another coordinator started afresh since is not discarded
    /// again (docs/ha.md, "A failed job stays failed").
    pub fresh_if_last_started: Option<Option<LastJobStarted>>,
    /// `coordhost run --ui`: the view the job's page, `/api/job` and
    /// `/metrics` read; the job driver and its recorder update it
    /// (docs/ui.md).
    pub ui: Option<Arc<crate::ui::LiveJob>>,
    /// Where a signal or `coordhost cancel` asks the run to stop
    /// ([`StopRequest`]); `None`: nothing stops it but its end. With it,
    /// the job driver also watches the job folder for a cancel request
    /// (`<data-dir>/<job>/CANCEL`, written by `coordhost cancel`).
    pub stop: Option<Arc<StopRequest>>,
    /// `run --resume`: go on with a job whose last run was cancelled (and
    /// withdraw a cancel request not yet acted on).
    pub resume: bool,
    /// The job's event log on object storage (`run --log s3://...`,
    /// docs/object-storage.md) instead of the data directory.
    pub log: Option<crate::events::ObjectLogUrl>,
    /// How long a write to an event log on object storage keeps trying
    /// through transient store failures before the run fails
    /// (`run --log-retry-s`).
    pub log_retry: std::time::Duration,
}

/// Which run of a job's log is the last one: the log folder (its device and
/// inode: a log set aside and started anew is another folder, although its
/// first `JobStarted` sits at the same position) and where its last
/// `JobStarted` is ([`RunOptions::fresh_if_last_started`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LastJobStarted {
    /// `(st_dev, st_ino)` of the log folder.
    pub log_dir: (u64, u64),
    /// The record's position.
    pub at: crate::events::Position,
}

impl RunOptions {
    /// Options for `job_file` with data in `data_dir`.
    pub fn new(job_file: impl Into<PathBuf>, data_dir: impl Into<PathBuf>) -> Self {
        Self {
            job_file: job_file.into(),
            data_dir: data_dir.into(),
            workers: None,
            cache_dir: None,
            progress: None,
            fresh: false,
            external: None,
            fence: None,
            leader: None,
            fresh_if_last_started: None,
            ui: None,
            stop: None,
            resume: false,
            log: None,
            log_retry: crate::events::DEFAULT_WRITE_RETRY,
        }
    }
}

impl std::fmt::Debug for RunOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunOptions")
            .field("job_file", &self.job_file)
            .field("data_dir", &self.data_dir)
            .field("workers", &self.workers)
            .field("cache_dir", &self.cache_dir)
            .field("fresh", &self.fresh)
            .field("external", &self.external.as_ref().map(|c| c.local_addr()))
            .finish_non_exhaustive()
    }
}

/// How the job ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum JobStatus {
    /// Every vertex finished and the output is published.
    Finished,
    /// The job failed; `error` says why.
    Failed,
    /// A signal stopped the run before the job ended; the next run
    /// resumes it (`error` says so).
    Stopped,
    /// `coordhost cancel` ended the job (`error` says so).
    Cancelled,
}

/// Per-vertex figures of a run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VertexSummary {
    /// Job vertex id.
    pub id: String,
    /// Parallelism used (decided at run time for `auto`).
    pub parallelism: u32,
    /// Input records of the finished attempts.
    pub records_in: u64,
    /// Output rows of the finished attempts.
    pub records_out: u64,
    /// Bytes written to result partitions by the finished attempts.
    pub bytes_out: u64,
    /// Splits the source coordinator handed to readers in this run.
    pub splits_assigned: u64,
    /// Splits given back to the enumerator by resets in this run
    /// (failover or recovery).
    pub splits_returned: u64,
    /// Subtasks that recovery skipped (their output survived the crash).
    pub skipped: u64,
    /// For a source vertex: its input in bytes and splits, kept and read
    /// again (`None` for other vertices).
    pub input: Option<InputSummary>,
}

/// What a source vertex read in a run, in input bytes (a `file-range`
/// split's length, an inline split's text length) and splits.
///
/// `kept` and `reread` are decided when a rerun recovers: the splits in
/// the recorded split-assignment history of the subtasks recovery keeps
/// (their reads survived the crash) and of those it resets (handed out
/// before the crash and given back to the enumerator, so read again).
/// Both are 0 in a run that recovered nothing, and for an enumerator
/// without batch snapshots (it starts afresh: nothing is known kept).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputSummary {
    /// Input bytes of the splits handed to readers in this run (read
    /// again ones included).
    pub bytes_assigned: u64,
    /// Splits read before the crash by subtasks recovery kept.
    pub splits_kept: u64,
    /// Their input bytes.
    pub bytes_kept: u64,
    /// Splits handed out before the crash to subtasks recovery reset:
    /// given back to the enumerator and read again in this run.
    pub splits_reread: u64,
    /// Their input bytes.
    pub bytes_reread: u64,
}

/// The final summary of a run; serializes to the JSON of `--summary-json`
/// (and reads back from it, as the tests that run the binary do).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    /// Job name.
    pub job: String,
    /// How it ended.
    pub status: JobStatus,
    /// Whether progress was recovered from an earlier coordinator attempt.
    pub recovered: bool,
    /// Execution vertices of the job (after `auto` decisions).
    pub tasks_total: u64,
    /// Execution attempts started in this run.
    pub tasks_run: u64,
    /// Execution vertices skipped because recovery kept their work.
    pub tasks_skipped: u64,
    /// Execution attempts reset (failover, PartitionNotFound, recovery).
    pub tasks_reset: u64,
    /// Execution vertices finished when the run ended, those recovery
    /// kept (`tasks_skipped`) included. With `tasks_failed`,
    /// `tasks_stopped` and `tasks_not_run` it adds up to `tasks_total`:
    /// every execution vertex is counted once, by where it ended.
    #[serde(default)]
    pub tasks_finished: u64,
    /// Execution vertices whose last attempt failed and ended the job (a
    /// data error, or the last attempt `max-attempts` allows).
    #[serde(default)]
    pub tasks_failed: u64,
    /// Execution vertices running (or being placed) when the run ended
    /// without finishing (the job failed on another one, a signal stopped
    /// the run, `coordhost cancel`): their attempts were stopped.
    #[serde(default)]
    pub tasks_stopped: u64,
    /// Execution vertices that had not started when the run ended (waiting
    /// for their inputs, or reset and waiting to run again). A job vertex
    /// the run never reached is not among the execution vertices (its
    /// `parallelism` is 0 and the text summary says `not started`).
    #[serde(default)]
    pub tasks_not_run: u64,
    /// Resets by reason: `unfinished`, `no-snapshot`, `partition-missing`,
    /// `enumerator-cannot-snapshot`, `enumerator-restore-failed`,
    /// `upstream-reset` (recovery) and `failover`, `partition-not-found`,
    /// `not-placed` (during the run; the last: a `Deploy` to a worker
    /// process failed, which costs no attempt).
    pub reset_reasons: std::collections::BTreeMap<String, u64>,
    /// Wall-clock time of the run, milliseconds.
    pub wall_ms: u64,
    /// Worker threads.
    pub workers: u64,
    /// Time the scheduler loop spent handling messages (excluding waiting),
    /// microseconds: the coordinator's own overhead, plugin calls included.
    pub coordinator_busy_us: u64,
    /// Per vertex, in file order.
    pub vertices: Vec<VertexSummary>,
    /// Sink output folders; when the job failed, only those holding
    /// published output (`_SUCCESS` or `part-*` files), possibly none.
    pub outputs: Vec<PathBuf>,
    /// Why the job failed.
    pub error: Option<String>,
    /// Whether the job file has no `[shuffle]` table, so the job used the
    /// built-in local shuffle master (`builtin:local-shuffle`, partitions
    /// under `<data-dir>/shuffle`; docs/job-file.md). In the JSON summary
    /// as `default_shuffle` (absent, read back as `false`).
    #[serde(default)]
    pub default_shuffle: bool,
    /// Whether the job failed on bad input rather than while it ran: a
    /// split enumerator refused its configuration
    /// ([`JobError::is_invalid_plugin_config`]); `coordhost run` exits 2.
    /// Not in the JSON summary.
    #[serde(skip)]
    pub bad_input: bool,
    /// Whether the run ended on this coordinator's own failure rather than
    /// the job's: a simulated crash, a lost leadership, its event log or
    /// data directory failing, an internal error. Such a run records no
    /// `JobFailed` (the next run recovers the job); a failed run without
    /// it does (docs/recovery.md, "How a run ends"). Not in the JSON
    /// summary.
    #[serde(skip)]
    pub coordinator_failed: bool,
}
