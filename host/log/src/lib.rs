//! The durable job event log of coordhost: an append-only, checksummed,
//! versioned record of scheduling facts (job vertex initialized, execution
//! finished, executions reset, sink committed, recovery started and
//! finished) from which recovery rebuilds a batch job's progress after a
//! coordinator crash (Apache Flink's FLIP-383 job event store, made
//! stricter: see `docs/log-format.md`).
//!
//! This crate is the log without a place to keep it: the records, the
//! segment format, the writer (group commit, fsync policy, sticky
//! failures), the reader (replay, torn tails, damage) and the snapshot side
//! files' rules, all over the [`Storage`] trait, with [`MemoryStorage`] for
//! tests and simulations. The places are the binary's `events` module: a
//! folder of the local file system under a lock, and S3-compatible objects
//! (docs/architecture.md, "Crates"). It does no file I/O of its own.
//!
//! A new coordinator attempt opens the log with [`EventLogWriter::open`],
//! which replays every older segment ([`Replay`]) and starts a new segment
//! whose header seals the older ones at their valid lengths. Events are
//! appended with [`EventLogWriter::append`] (group commit) and made durable
//! with [`EventLogWriter::flush`], [`EventLogWriter::wait_durable`] or
//! [`EventLogWriter::append_durable`]. [`replay`] reads without writing.

mod error;
mod event;
pub mod format;
mod reader;
mod snapshot_file;
mod storage;
mod writer;

pub use error::{Damage, EventsError};
pub use event::encode_recovery_finished;
pub use event::{
    AttemptId, EncodedSplit, EnumeratorSnapshot, ExecutionFinished, ExecutionVertexId,
    ExecutionsReset, JobCancelled, JobEvent, JobFailed, JobFinished, JobStarted,
    JobVertexInitialized, LeaderElected, PlannedStage, ProducedPartition, RecoveryDecision,
    RecoveryFinished, RecoveryReset, RecoveryStarted, ResetReason, ShuffleSnapshot, SinkCommitted,
    SnapshotFile, SplitAssignment, StageAuto, StageEdge, StagePattern, StagesPlanned,
    SubtaskInputRange, kind_name, max_known_version,
};
pub use format::LOCK_FILE;
pub use reader::{Position, Replay, ReplayedEvent, SegmentSummary, TornTail, replay};
pub use snapshot_file::{
    check_against_record, load_snapshot_files, newest_snapshot_files, remove_snapshot_files_except,
};
pub use storage::{FaultPoint, Fence, MemoryStorage, SegmentAppender, Storage};
pub use writer::{EventLogWriter, FsyncPolicy, Sequence, WriterOptions};
