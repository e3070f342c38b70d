//! Workers: what runs a task.
//!
//! A task is one execution attempt. [`run_task`] reads its input (splits
//! pulled one at a time from the source coordinator, or the subpartitions
//! of its producers' result partitions) as Arrow record batches, runs the
//! vertex's Apache DataFusion plan over them — a SQL stage's recorded plan,
//! or a job-file vertex's operator chain lowered onto one
//! ([`crate::sql::chain`]): one engine for both — and writes the plan's
//! output either to its own result partitions
//! ([`crate::shuffle::PartitionWriter`], one per outgoing edge, routed by a
//! stable key hash on `hash` edges) or, for a sink, to a staging file that
//! the coordinator later publishes ([`sink`]). Tasks run on a
//! [`WorkerPool`] of plain threads and report back by message.
//!
//! A job-file vertex's columns are `Utf8` text as read, `Int64` counts and
//! `Decimal128` exact numbers from aggregates (and `Date32` from Parquet);
//! a value's text is [`coordhost_model::value::cell_text`]. Numbers are exact
//! fixed-point, so sums do not depend on the order rows arrive in.

pub mod csv;
mod decimal_text;
pub mod hive;
pub mod parquet;
mod pool;
pub mod sink;
mod source;
mod stage;

use std::ops::Range;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use arrow_array::RecordBatch;

pub use coordhost_model::value::cells::{MAX_VALUE_CHARS, quote_value};
pub use coordhost_model::value::{Decimal, SplitData, SplitPayloadData};
pub use pool::WorkerPool;
pub use sink::{BatchSink, OutputReport};
pub use source::{MAX_LINE_BYTES, VecSplitSource};

use crate::shuffle::{
    ExpectedPartition, ObjectPartitionWriter, PartitionProducer, PartitionWriter, ShuffleError,
    SubpartitionReader, route_batch,
};
use coordhost_io::grant::{Grants, PluginDir};
use coordhost_io::objstore::ObjectUrl;
use coordhost_model::graph::{
    AttemptId, DistributionPattern, Operator, SinkSpec, SubpartitionBytes,
};

/// Why a task failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TaskError {
    /// An input partition does not exist (Flink's `PartitionNotFoundException`),
    /// or is not the one its producer wrote (another producer's, of
    /// other bytes than reported, `data` not its index's): the scheduler
    /// re-runs `producer` before this consumer.
    #[error("input partition of {producer:?} not found at {location}: {reason}")]
    PartitionNotFound {
        /// The attempt that should have produced it.
        producer: AttemptId,
        /// Where it should be.
        location: PathBuf,
        /// What is missing or what differs.
        reason: String,
    },
    /// An input partition exists but its data fails to decode or checksum
    /// ([`ShuffleError::Corrupt`]): treated like a lost partition, so the
    /// scheduler re-runs `producer` before this consumer (docs/recovery.md,
    /// "Damaged partitions").
    #[error("input partition of {producer:?} is damaged: {source}")]
    PartitionCorrupt {
        /// The attempt that produced it.
        producer: AttemptId,
        /// What is wrong, with the file and offset.
        source: ShuffleError,
    },
    /// Partition I/O failed.
    #[error(transparent)]
    Shuffle(#[from] ShuffleError),
    /// Reading a split or writing output failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A split names a file the host may not read for its enumerator
    /// (outside its grants after symlinks are resolved, not a regular
    /// file) or cannot read safely (a line longer than
    /// [`MAX_LINE_BYTES`]). The reason names the plugin.
    #[error("split `{split}`: {reason}")]
    Split {
        /// The split's id.
        split: String,
        /// What is wrong, naming the plugin and the path.
        reason: String,
    },
    /// The vertex's plan failed on its input for a reason that may pass
    /// (DataFusion's error, an operator chain that does not fit its input).
    #[error("vertex `{vertex}`: {detail}")]
    Data {
        /// The job vertex id.
        vertex: String,
        /// What is wrong, with the split or file and the line.
        detail: String,
    },
    /// The input itself is wrong where it is stored, so reading it again
    /// gives the same error: a value that does not parse as its column's
    /// declared type, a CSV line with another number of fields, a quoted
    /// line break, a Parquet file whose footer or pages do not decode (or
    /// fail their checksum), a record a source-reader plugin calls
    /// `invalid-split`. `detail` names the file (or the split), and where
    /// the format has them the line (1-based, as a text editor counts, the
    /// header line included), the column (name and 1-based position) and
    /// the value (cut to [`MAX_VALUE_CHARS`] characters).
    ///
    /// A permanent failure ([`TaskError::is_permanent`]): the scheduler
    /// does not retry the attempt and fails the job at once, as Flink's
    /// failure classification marks a non-recoverable error
    /// (`SuppressRestartsException`) and Spark fails a job on a malformed
    /// record in `FAILFAST` mode (docs/sql.md, "When the input is wrong").
    #[error("{detail}")]
    InvalidData {
        /// What is wrong, with the file, the line, the column and the value.
        detail: String,
    },
    /// The source coordinator could not hand out a split (its plugin failed
    /// or the job is ending).
    #[error("split request failed: {reason}")]
    SplitRequest {
        /// Why.
        reason: String,
    },
    /// The worker process that ran the attempt failed it with an error
    /// the coordinator does not act on by kind, or was lost
    /// (`coordhost::remote`).
    #[error("worker `{worker}`: {message}")]
    Worker {
        /// The worker's id.
        worker: String,
        /// What happened.
        message: String,
    },
    /// The job ended while the task ran.
    #[error("{attempt:?} canceled")]
    Canceled {
        /// The canceled attempt.
        attempt: AttemptId,
    },
    /// A fault injected by a test (fail point `task::fail::*` of
    /// `coordhost::failpoints`).
    #[cfg(feature = "failpoints")]
    #[error("injected failure of {attempt:?} after {after_records} records")]
    Injected {
        /// The failing attempt.
        attempt: AttemptId,
        /// Records read before failing.
        after_records: u64,
    },
}

impl TaskError {
    /// Whether running the attempt again cannot help: the input itself is
    /// wrong ([`TaskError::InvalidData`]). Every other failure (a lost
    /// partition, an I/O error, a plugin that trapped or timed out, a lost
    /// worker) may pass and is retried up to `max-attempts`.
    #[must_use]
    pub fn is_permanent(&self) -> bool {
        matches!(self, Self::InvalidData { .. })
    }
}

/// What a data error calls `split`'s input: its file, or `split ID` for
/// an inline split.
pub fn split_file(split: &SplitData) -> String {
    match &split.payload {
        SplitPayloadData::FileRange { path, .. } => path.display().to_string(),
        SplitPayloadData::Inline(_) => format!("split `{}`", split.id),
    }
}

/// Where a source task gets its splits: the pull model of Flink's source
/// readers (`handle-split-request` → assignment or "no more splits").
pub trait SplitSource: Send {
    /// Blocks until the next split assigned to this subtask arrives;
    /// `None` once the enumerator signalled "no more splits".
    ///
    /// # Errors
    ///
    /// [`TaskError::SplitRequest`] if no answer can come.
    fn next_split(&mut self) -> Result<Option<SplitData>, TaskError>;
}

/// Reads the subpartitions of a result partition another worker process
/// holds (`coordhost::remote`): opens a stream of its blocks.
pub trait PartitionFetch: Send + Sync {
    /// A reader over subpartitions `subs` of the partition at `location`
    /// (relative to the holder's partition root), bound to `expected`
    /// here, at the consumer ([`SubpartitionReader::from_stream`]).
    ///
    /// # Errors
    ///
    /// [`ShuffleError::PartitionNotFound`] when the holder does not hold it
    /// or cannot be reached, or it is not the partition `expected` names;
    /// [`ShuffleError::Corrupt`] for an index that does not parse;
    /// [`ShuffleError::Io`] otherwise.
    fn open(
        &self,
        location: &std::path::Path,
        subs: Range<u32>,
        expected: &ExpectedPartition,
    ) -> Result<SubpartitionReader, ShuffleError>;
}

/// One input partition a non-source task reads.
#[derive(Clone)]
pub struct InputPartition {
    /// Producer attempt (for PartitionNotFound).
    pub producer: AttemptId,
    /// The partition's directory, as the shuffle master named it.
    pub location: PathBuf,
    /// The shuffle master's grants: the directory is read only inside them,
    /// without following symlinks (`coordhost_io::grant`).
    pub grants: Grants,
    /// Subpartitions to read.
    pub subpartitions: Range<u32>,
    /// What the partition must be: the producer attempt its index names,
    /// and the bytes of each subpartition read as the producer reported
    /// them (docs/shuffle-format.md, "Reading").
    pub expected: ExpectedPartition,
    /// Set when another worker process holds the partition: `location` is
    /// then relative to that worker's partition root and read through this.
    pub remote: Option<Arc<dyn PartitionFetch>>,
    /// Set when the partition is on object storage (`object-shuffle`):
    /// read from there with this process's credentials, whoever wrote it;
    /// checked against the shuffle master's writable store grants by the
    /// coordinator before it is set.
    pub object: Option<ObjectUrl>,
}

impl std::fmt::Debug for InputPartition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InputPartition")
            .field("producer", &self.producer)
            .field("location", &self.location)
            .field("subpartitions", &self.subpartitions)
            .field("remote", &self.remote.is_some())
            .field("object", &self.object)
            .finish_non_exhaustive()
    }
}

/// A task's input.
pub enum TaskInput {
    /// A source: splits pulled from the source coordinator.
    Splits(Box<dyn SplitSource>),
    /// Result partitions of producers, read in order.
    Partitions(Vec<InputPartition>),
}

/// Where a task writes one result partition.
#[derive(Debug, Clone)]
pub enum OutputPlace {
    /// The directory of the shuffle descriptor, checked against the
    /// shuffle master's writable grants.
    Dir(PluginDir),
    /// A prefix of object storage (the descriptor's `s3://` location,
    /// checked against the shuffle master's writable store grants): the
    /// partition is staged in the local folder `staging` (one the host
    /// chose) and uploaded as `<url>/data` and `<url>/index`.
    Object {
        /// Where the objects go.
        url: ObjectUrl,
        /// The local staging folder, removed when the task ends.
        staging: PathBuf,
    },
}

/// One result partition a task writes.
#[derive(Debug, Clone)]
pub struct TaskOutput {
    /// Edge index.
    pub edge: usize,
    /// Where the partition goes.
    pub location: OutputPlace,
    /// Number of subpartitions.
    pub num_subpartitions: u32,
    /// The attempt writing it, as its index names it.
    pub producer: PartitionProducer,
    /// Routing.
    pub pattern: DistributionPattern,
    /// Key column indices for hash routing.
    pub key: Vec<usize>,
}

/// The source readers of a SQL job's tables, by table name (cheap to
/// clone: shared by every task of the job).
pub type TableReaders = Arc<std::collections::BTreeMap<String, Arc<coordhost_wasm::SourceReader>>>;

/// Everything a worker needs to run one execution attempt.
pub struct TaskSpec {
    /// The attempt.
    pub attempt: AttemptId,
    /// The job vertex id (for messages).
    pub vertex_id: String,
    /// The operator chain.
    pub operators: Arc<Vec<Operator>>,
    /// The source-reader plugins of the SQL job's tables read by one
    /// (`format = { reader = "PLUGIN" }`), by table: the coordinator's
    /// loaded readers in embedded tasks, on a worker process those of the
    /// tables its scan reads (components fetched by hash, docs/workers.md).
    pub readers: TableReaders,
    /// The input.
    pub input: TaskInput,
    /// Result partitions to write (none for a sink).
    pub outputs: Vec<TaskOutput>,
    /// For a sink: where to stage the output.
    pub sink: Option<Arc<SinkSpec>>,
    /// For a source: the split enumerator's grants, the only place a
    /// `file-range` split is read from (`coordhost_io::grant`).
    pub source_grants: Option<Grants>,
    /// The job's scalar functions (`[functions.NAME]`), which a SQL
    /// stage's plan calls by name: the coordinator's loaded functions in
    /// embedded tasks, the worker's (components fetched by hash) on a
    /// worker process.
    pub functions: crate::sql::FunctionSet,
    /// Sleep per input record (test knob): before each input batch, its
    /// rows times this.
    pub record_delay: Duration,
    /// Fail after this many records (a test knob: fail point
    /// `task::fail::*` of `coordhost::failpoints`): the input batch that
    /// takes the count past it fails the task before it is pushed.
    #[cfg(feature = "failpoints")]
    pub fail_after: Option<u64>,
    /// Set by the scheduler when the job ends early: the task stops at its
    /// next input batch (or while sleeping for `record_delay`) with
    /// [`TaskError::Canceled`].
    pub cancel: Arc<AtomicBool>,
}

/// What a finished task reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskReport {
    /// Input records (lines read or partition records).
    pub records_in: u64,
    /// Rows written to partitions or the sink.
    pub records_out: u64,
    /// Per output: edge index and bytes per subpartition (compact: a
    /// finished task's report may wait in the coordinator's queue, and an
    /// all-to-all edge has as many subpartitions as consumers).
    pub partitions: Vec<(usize, SubpartitionBytes)>,
    /// Splits read (sources).
    pub splits: u64,
}

/// Runs one task to the end on the calling thread.
///
/// # Errors
///
/// [`TaskError`]: a missing input partition, I/O, bad data, a failed split
/// request, or an injected fault. Partial output is left behind without its
/// `index` or in a staging file that is never published.
pub fn run_task(spec: TaskSpec) -> Result<TaskReport, TaskError> {
    let TaskSpec {
        attempt,
        vertex_id,
        operators,
        readers,
        input,
        outputs,
        sink,
        source_grants,
        functions,
        record_delay,
        #[cfg(feature = "failpoints")]
        fail_after,
        cancel,
    } = spec;
    let out: Box<dyn BatchSink> = match &sink {
        Some(s) => Box::new(sink::SinkWriter::create(
            s,
            attempt.subtask,
            attempt.attempt,
        )?),
        None => Box::new(PartitionOutputs::create(&outputs)?),
    };
    let ticker = Ticker {
        attempt,
        cancel,
        record_delay,
        #[cfg(feature = "failpoints")]
        fail_after,
        records_in: 0,
    };
    let (records_in, splits, (records_out, partitions)) = match operators.as_slice() {
        // A SQL stage: its recorded DataFusion plan is the whole chain.
        [Operator::Stage(stage)] => stage::run(
            stage,
            functions,
            readers,
            &vertex_id,
            input,
            source_grants,
            ticker,
            out,
        )?,
        // A job-file vertex: its operators lowered onto a DataFusion plan.
        chain => stage::run_chain(chain, &vertex_id, input, source_grants, ticker, out)?,
    };
    Ok(TaskReport {
        records_in,
        records_out,
        partitions: partitions
            .into_iter()
            .map(|(edge, bytes)| (edge, SubpartitionBytes::from(bytes)))
            .collect(),
        splits,
    })
}

/// Before each input batch of `rows` rows: count them, stop if canceled,
/// fail if the injected fault's count is crossed, sleep the test delay.
pub struct Ticker {
    attempt: AttemptId,
    cancel: Arc<AtomicBool>,
    record_delay: Duration,
    #[cfg(feature = "failpoints")]
    fail_after: Option<u64>,
    /// Input records so far.
    pub records_in: u64,
}

impl Ticker {
    fn tick(&mut self, rows: usize) -> Result<(), TaskError> {
        let attempt = self.attempt;
        let cancel = &self.cancel;
        let canceled = || cancel.load(Ordering::Relaxed);
        if canceled() {
            return Err(TaskError::Canceled { attempt });
        }
        self.records_in += rows as u64;
        #[cfg(feature = "failpoints")]
        if let Some(n) = self.fail_after
            && self.records_in > n
        {
            return Err(TaskError::Injected {
                attempt,
                after_records: n,
            });
        }
        if !self.record_delay.is_zero() {
            // In slices, so a cancel does not wait for a whole batch's sleep.
            let mut left = self
                .record_delay
                .saturating_mul(u32::try_from(rows).unwrap_or(u32::MAX));
            let slice = Duration::from_millis(50);
            while !left.is_zero() {
                let nap = left.min(slice);
                std::thread::sleep(nap);
                left -= nap;
                if canceled() {
                    return Err(TaskError::Canceled { attempt });
                }
            }
        }
        Ok(())
    }
}

/// A shuffle error of input partition `p` as the scheduler acts on it: a
/// missing partition is PartitionNotFound, a damaged one PartitionCorrupt.
fn classify(p: &InputPartition, e: ShuffleError) -> TaskError {
    match e {
        ShuffleError::PartitionNotFound { location, reason } => TaskError::PartitionNotFound {
            producer: p.producer,
            location,
            reason,
        },
        corrupt @ ShuffleError::Corrupt { .. } => TaskError::PartitionCorrupt {
            producer: p.producer,
            source: corrupt,
        },
        other => TaskError::Shuffle(other),
    }
}

/// Opens the subpartitions input partition `p` reads (through the holder
/// for a remote one, inside the shuffle master's grants for a local one).
fn open_input(p: &InputPartition) -> Result<SubpartitionReader, TaskError> {
    if let Some(url) = &p.object {
        return SubpartitionReader::open_object(url, p.subpartitions.clone(), &p.expected)
            .map_err(|e| classify(p, e));
    }
    if crate::shuffle::is_object_location(&p.location) {
        // Recorded on object storage but outside the shuffle master's
        // writable store grants: never read, the producer runs again.
        return Err(TaskError::PartitionNotFound {
            producer: p.producer,
            location: p.location.clone(),
            reason: "it lies outside the shuffle master's writable store grants".into(),
        });
    }
    match &p.remote {
        Some(fetch) => fetch
            .open(&p.location, p.subpartitions.clone(), &p.expected)
            .map_err(|e| classify(p, e)),
        None => {
            let dir = p
                .grants
                .writable_dir(&p.location)
                .map_err(|e| TaskError::Shuffle(ShuffleError::Grant(e)))?;
            SubpartitionReader::open_expected_in(&dir, p.subpartitions.clone(), &p.expected)
                .map_err(|e| classify(p, e))
        }
    }
}

/// The result partitions of one task, one writer per outgoing edge: a batch
/// goes whole to subpartition 0 on a `forward` edge, split by the key hash
/// of its rows on a `hash` edge ([`crate::shuffle::route_batch`]).
struct PartitionOutputs {
    writers: Vec<(TaskOutput, OutputWriter)>,
    rows: u64,
}

/// The writer of one result partition: on disk, or staged and uploaded to
/// object storage.
enum OutputWriter {
    Dir(PartitionWriter),
    Object(ObjectPartitionWriter),
}

impl OutputWriter {
    fn write_batch(&mut self, sub: u32, batch: &RecordBatch) -> Result<(), ShuffleError> {
        match self {
            Self::Dir(w) => w.write_batch(sub, batch),
            Self::Object(w) => w.write_batch(sub, batch),
        }
    }

    fn finish(self) -> Result<Vec<u64>, ShuffleError> {
        match self {
            Self::Dir(w) => w.finish(),
            Self::Object(w) => w.finish(),
        }
    }
}

impl PartitionOutputs {
    fn create(outputs: &[TaskOutput]) -> Result<Self, TaskError> {
        let mut writers = Vec::new();
        for o in outputs {
            let (n, producer) = (o.num_subpartitions, o.producer.clone());
            let writer = match &o.location {
                OutputPlace::Dir(dir) => {
                    OutputWriter::Dir(PartitionWriter::create_in(dir, n, producer)?)
                }
                OutputPlace::Object { url, staging } => OutputWriter::Object(
                    ObjectPartitionWriter::create(url.clone(), staging, n, producer)?,
                ),
            };
            writers.push((o.clone(), writer));
        }
        Ok(Self { writers, rows: 0 })
    }
}

impl BatchSink for PartitionOutputs {
    fn write(&mut self, batch: &RecordBatch) -> Result<(), TaskError> {
        self.rows += batch.num_rows() as u64;
        for (o, w) in &mut self.writers {
            match o.pattern {
                DistributionPattern::Forward | DistributionPattern::Broadcast => {
                    w.write_batch(0, batch)?;
                }
                DistributionPattern::Hash => {
                    for (sub, part) in route_batch(batch, &o.key, o.num_subpartitions) {
                        w.write_batch(sub, &part)?;
                    }
                }
            }
        }
        Ok(())
    }

    fn finish(self: Box<Self>) -> Result<OutputReport, TaskError> {
        let mut parts = Vec::new();
        for (o, w) in self.writers {
            parts.push((o.edge, w.finish()?));
        }
        Ok((self.rows, parts))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quoted_value_is_cut_and_its_control_characters_escaped() {
        assert_eq!(quote_value("abc"), "`abc`");
        assert_eq!(quote_value("a\tb"), "`a\\tb`");
        let long = "x".repeat(MAX_VALUE_CHARS + 5);
        assert_eq!(
            quote_value(&long),
            format!("`{}…`", "x".repeat(MAX_VALUE_CHARS))
        );
        assert!(
            TaskError::InvalidData {
                detail: String::new()
            }
            .is_permanent()
        );
        assert!(
            !TaskError::SplitRequest {
                reason: String::new()
            }
            .is_permanent()
        );
    }
}
