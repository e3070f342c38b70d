//! The durable job event log: an append-only, checksummed, versioned record
//! of scheduling facts (job vertex initialized, execution finished,
//! executions reset, sink committed, recovery started and finished) from
//! which [`recovery`](crate::recovery) rebuilds a batch job's progress after
//! a coordinator crash (Apache Flink's FLIP-383 job event store, made
//! stricter: see `docs/log-format.md`).
//!
//! Layout: `<data dir>/<job id>/log/segment-<attempt:08>.log`, one segment
//! per coordinator attempt, plus `LOCK`. A new attempt calls
//! [`open_job_log`], which takes the lock, replays every older segment
//! ([`Replay`]), and starts a new segment whose header seals the older ones
//! at their valid lengths. Events are appended with
//! [`EventLogWriter::append`] (group commit) and made durable with
//! [`EventLogWriter::flush`], [`EventLogWriter::wait_durable`] or
//! [`EventLogWriter::append_durable`]. [`replay`] and [`inspect`] read
//! without the lock.
//!
//! Parts: [`format`](mod@format) (every on-disk constant), the event types, the
//! [`Storage`] trait with [`FileStorage`] and [`MemoryStorage`], the writer,
//! the reader, the lock, `inspect`, and snapshot side files (a large batch
//! snapshot state kept beside the log, named by its record).

mod error;
mod event;
pub mod format;
mod inspect;
mod lock;
mod object_log;
mod reader;
mod side_file;
mod snapshot_file;
mod storage;
mod writer;

pub use crate::objstore::DEFAULT_WRITE_RETRY;
pub use error::{Damage, EventsError};
pub use event::{
    AttemptId, EncodedSplit, EnumeratorSnapshot, ExecutionFinished, ExecutionVertexId,
    ExecutionsReset, JobCancelled, JobEvent, JobFailed, JobFinished, JobStarted,
    JobVertexInitialized, LeaderElected, PlannedStage, ProducedPartition, RecoveryFinished,
    RecoveryReset, RecoveryStarted, ResetReason, ShuffleSnapshot, SinkCommitted, SnapshotFile,
    SplitAssignment, StageAuto, StageEdge, StagePattern, StagesPlanned, SubtaskInputRange,
    kind_name, max_known_version,
};
pub use format::LOCK_FILE;
pub use inspect::{describe, inspect, locate_log_dir};
pub use lock::{LockHolder, LogLock};
pub use object_log::{ObjectLogUrl, ObjectStorage, open_object_log};
pub use reader::{Position, Replay, ReplayedEvent, SegmentSummary, TornTail, replay};
pub use snapshot_file::{load_snapshot_files, newest_snapshot_files, remove_snapshot_files_except};
pub use storage::{FaultPoint, Fence, FileStorage, MemoryStorage, SegmentAppender, Storage};
pub use writer::{
    EventLogWriter, FsyncPolicy, Sequence, UnlockedReplay, WriterOptions, job_log_dir,
    open_job_log, open_job_log_after, open_job_log_fenced,
};
