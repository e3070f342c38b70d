//! The durable job event log (the `coordhost-log` crate, host/log) and the
//! places it is kept: a folder of the local file system
//! (`<data dir>/<job id>/log/segment-<attempt:08>.log`, one segment per
//! coordinator attempt, plus `LOCK`; [`FileStorage`], [`open_job_log`]),
//! or objects of S3-compatible storage ([`ObjectStorage`],
//! [`open_object_log`]). [`recovery`](crate::recovery) rebuilds a batch
//! job's progress from it after a coordinator crash (FLIP-383; see
//! `docs/log-format.md`).
//!
//! Everything of the log that needs no place (records, format, writer,
//! reader, side-file rules, [`MemoryStorage`]) is re-exported from
//! `coordhost_log` under the same names; this module adds the lock, the
//! folder and object backends, side files as files, and `inspect`.

mod file_storage;
mod folder;
mod inspect;
mod lock;
mod object_log;
mod side_file;

pub use coordhost_log::*;

pub use crate::objstore::DEFAULT_WRITE_RETRY;
pub use file_storage::FileStorage;
pub use folder::{
    UnlockedReplay, job_log_dir, open_job_log, open_job_log_after, open_job_log_fenced,
};
pub use inspect::{describe, inspect, locate_log_dir};
pub use lock::{LockHolder, LogLock};
pub use object_log::{ObjectLogUrl, ObjectStorage, open_object_log};
