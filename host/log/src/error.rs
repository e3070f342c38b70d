//! The one error type of the job event log, [`EventsError`], and the
//! [`Damage`] it names when a segment is corrupt.

use std::io;
use std::path::PathBuf;
use std::sync::Arc;

/// What is wrong with a corrupt segment.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Damage {
    /// The file does not start with the log's magic bytes.
    #[error("not a coordhost event log segment (bad magic)")]
    BadMagic,
    /// The file is shorter than its header.
    #[error("header is cut short ({needed} bytes needed)")]
    ShortHeader {
        /// Bytes the header needs.
        needed: usize,
    },
    /// The header checksum does not match.
    #[error("header checksum mismatch")]
    HeaderChecksum,
    /// The header's reserved flags are set or its sealed table is absurd.
    #[error("header field out of range: {field}")]
    HeaderField {
        /// The field.
        field: &'static str,
    },
    /// The attempt in the header is not the one in the file name.
    #[error("header says attempt {found}, file name says {expected}")]
    AttemptMismatch {
        /// Attempt from the file name.
        expected: u32,
        /// Attempt from the header.
        found: u32,
    },
    /// A record's checksum does not match its bytes.
    #[error("record checksum mismatch")]
    RecordChecksum,
    /// A record's length field is beyond the format's limit.
    #[error("record length {len} exceeds the limit")]
    RecordTooLong {
        /// The length field.
        len: u32,
    },
    /// A record runs past the end of the file or its sealed length.
    #[error("record runs past the end of the segment's valid bytes")]
    RecordCutShort,
    /// A checksum-valid record whose payload does not decode.
    #[error("record payload is malformed: {detail}")]
    Payload {
        /// What postcard said.
        detail: String,
    },
    /// The file is shorter than the length a newer segment sealed it at.
    #[error("segment is {file_len} bytes but was sealed at {valid_len}")]
    ShorterThanSealed {
        /// The sealed valid length.
        valid_len: u64,
        /// The file's length now.
        file_len: u64,
    },
    /// The newest header's sealed table does not match the segment files.
    #[error("sealed-segment table disagrees with the files: {detail}")]
    SealTable {
        /// What disagrees.
        detail: String,
    },
    /// A log object on object storage is missing, overwritten or cut
    /// short (docs/object-storage.md).
    #[error("{detail}")]
    Object {
        /// What is wrong with the object.
        detail: String,
    },
}

/// Errors of the job event log.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EventsError {
    /// Reading or listing the log failed.
    #[error("event log I/O on {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// A segment is damaged somewhere other than a torn tail of the newest
    /// segment. Recovery must not use the log.
    #[error("event log segment {segment} is corrupt at byte {offset}: {damage}")]
    Corrupt {
        /// The segment file.
        segment: PathBuf,
        /// Byte offset of the damaged header or record frame.
        offset: u64,
        /// What is wrong.
        damage: Damage,
    },
    /// A segment's format version is newer than this binary knows.
    #[error(
        "event log segment {segment} has format version {found}; this binary reads up to version {max_known} (a newer coordhost wrote this log; the log is left as it is)"
    )]
    UnsupportedFormat {
        /// The segment file.
        segment: PathBuf,
        /// The version found.
        found: u16,
        /// The newest version this binary reads.
        max_known: u16,
    },
    /// A record's schema version is newer than this binary knows.
    #[error(
        "event log segment {segment} at byte {offset}: {kind_name} (kind {kind}) record of schema version {version}; this binary reads up to version {max_known} (a newer coordhost wrote this log; the log is left as it is)"
    )]
    UnsupportedVersion {
        /// Kind id.
        kind: u16,
        /// Kind name.
        kind_name: &'static str,
        /// Version found.
        version: u16,
        /// Newest version known.
        max_known: u16,
        /// The segment file.
        segment: PathBuf,
        /// Byte offset of the record frame.
        offset: u64,
    },
    /// A checksum-valid record of a kind this binary does not know.
    #[error(
        "event log segment {segment} at byte {offset}: record of event kind {kind}, which this binary does not know (it reads kinds up to {max_known}; a newer coordhost wrote this log; the log is left as it is)"
    )]
    UnknownKind {
        /// Kind id.
        kind: u16,
        /// The newest kind id this binary knows.
        max_known: u16,
        /// The segment file.
        segment: PathBuf,
        /// Byte offset of the record frame.
        offset: u64,
    },
    /// Another coordinator holds the job's log lock.
    #[error("the job's event log in {} is locked by another coordinator (lock {})", path.parent().unwrap_or(path).display(), path.display())]
    Locked {
        /// The lock file.
        path: PathBuf,
    },
    /// The job's log is led through etcd (a coordinator ran it with
    /// `--ha`, docs/ha.md): a coordinator without `--ha` is refused, and a
    /// coordinator with `--ha` is refused while one without holds the lock.
    #[error("the job's event log in {} {why}", path.display())]
    HaMismatch {
        /// The log directory.
        path: PathBuf,
        /// What is wrong and what to do.
        why: &'static str,
    },
    /// A write or fsync failed earlier; the writer refuses all further work.
    /// Events appended after the last durable one may be lost.
    #[error("event log write to {segment} failed at byte {offset}: {source}")]
    WriteFailed {
        /// The segment being written.
        segment: PathBuf,
        /// Segment length (bytes known written) when the failing write began.
        offset: u64,
        /// The I/O error, shared by every call that reports it.
        #[source]
        source: Arc<io::Error>,
    },
    /// An event does not fit in one record.
    #[error("{kind_name} event payload is {len} bytes; the limit is {max}")]
    RecordTooLarge {
        /// Kind name.
        kind_name: &'static str,
        /// Encoded payload length.
        len: usize,
        /// The limit.
        max: u32,
    },
    /// A batch snapshot side file cannot be written, or, when recovery
    /// loads it, is missing or does not match its record (size, CRC32C).
    #[error("batch snapshot side file {path} {problem}")]
    SnapshotFile {
        /// The side file.
        path: PathBuf,
        /// What is wrong, e.g. "is 10 bytes; its record says 3000".
        problem: String,
    },
    /// The object store holding the log cannot be reached, refuses the
    /// credentials, has no such bucket, or failed a request.
    #[error("object store {endpoint} (log {location}): {problem}")]
    Store {
        /// The endpoint requests went to.
        endpoint: String,
        /// The log's URL or the object's.
        location: String,
        /// What went wrong, in one line.
        problem: String,
    },
    /// `--log` or `log inspect` named an object storage URL that is not
    /// valid.
    #[error("{problem}")]
    BadObjectUrl {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        problem: String,
    },
    /// An event could not be encoded.
    #[error("{kind_name} event does not encode: {source}")]
    Encode {
        /// Kind name.
        kind_name: &'static str,
        /// The postcard error.
        #[source]
        source: postcard::Error,
    },
    /// A job id that cannot name a directory.
    #[error(
        "job id {job_id:?} cannot name a directory (empty, '.', '..', or has a path separator)"
    )]
    InvalidJobId {
        /// The job id.
        job_id: String,
    },
    /// No event log exists at the given directory.
    #[error(
        "no event log under {path} (expected segment-*.log files, or a log/ folder holding them)"
    )]
    NoLog {
        /// The directory.
        path: PathBuf,
    },
    /// `log inspect` was given a data directory holding several jobs.
    #[error(
        "{} is a data directory holding {} jobs ({}); name one: `coordhost log inspect {}/JOB`",
        path.display(),
        jobs.len(),
        jobs.join(", "),
        path.display()
    )]
    SeveralJobs {
        /// The data directory.
        path: PathBuf,
        /// The jobs with an event log in it (their folder names), sorted.
        jobs: Vec<String>,
    },
    /// Writing `log inspect` output failed.
    #[error("writing inspect output: {source}")]
    Output {
        /// The I/O or JSON error.
        #[source]
        source: io::Error,
    },
}
