//! The job graph (the job as configured) and the execution graph (its
//! parallel instances and their attempts), in Flink's terms.
//!
//! A [`JobGraph`] holds [`JobVertex`]es joined by [`JobEdge`]s; each edge is
//! one *intermediate data set*. The [`ExecutionGraph`] expands every job
//! vertex into *execution vertices* (one per subtask) once its parallelism
//! is known, and each execution vertex into numbered *execution attempts*.
//! Every finished attempt owns one *result partition* per outgoing edge,
//! cut into subpartitions, one per consumer subtask (or, for a consumer with
//! `auto` parallelism, one per possible consumer subtask up to its
//! max-parallelism, handed out later as contiguous ranges, as Flink's
//! adaptive batch scheduler does).
//!
//! The execution graph is plain data, mutated only by the scheduler's loop;
//! a recovery step can build one in a pre-restored state and hand it over.

use std::fmt;
use std::ops::Range;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::value::Decimal;

/// A vertex's parallelism as configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parallelism {
    /// A fixed number of subtasks.
    Fixed(u32),
    /// Decided at run time from the produced bytes of its inputs.
    Auto,
}

impl fmt::Display for Parallelism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Parallelism::Fixed(n) => write!(f, "{n}"),
            Parallelism::Auto => write!(f, "auto"),
        }
    }
}

/// How records of an edge travel from producer to consumer subtasks
/// (Flink's `DistributionPattern` plus the partitioner).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum DistributionPattern {
    /// Pointwise: producer subtask `i` feeds consumer subtask `i`.
    Forward,
    /// All-to-all: each record goes to subpartition `hash(key) % n`.
    Hash,
    /// All-to-all, every record to every consumer: each producer writes one
    /// subpartition and every consumer subtask reads it from every producer
    /// (the build side of a SQL join, a merge into one task; docs/sql.md).
    Broadcast,
}

/// Comparison of a [`Operator::Filter`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CmpOp {
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
}

impl CmpOp {
    /// Whether `ordering` (of the row's value against the constant) passes.
    pub fn holds(self, ordering: std::cmp::Ordering) -> bool {
        use std::cmp::Ordering::*;
        match self {
            CmpOp::Eq => ordering == Equal,
            CmpOp::Ne => ordering != Equal,
            CmpOp::Lt => ordering == Less,
            CmpOp::Le => ordering != Greater,
            CmpOp::Gt => ordering == Greater,
            CmpOp::Ge => ordering != Less,
        }
    }
}

/// An aggregate function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum AggFunction {
    /// Number of rows.
    Count,
    /// Sum of a numeric column.
    Sum,
    /// Minimum of a numeric column.
    Min,
    /// Maximum of a numeric column.
    Max,
    /// Average of a numeric column.
    Avg,
}

/// Where an aggregation sits in a two-phase plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum AggMode {
    /// Rows in, final values out.
    Complete,
    /// Rows in, mergeable state columns out (a combiner).
    Partial,
    /// State columns of a partial aggregation in, final values out.
    Final,
}

/// One aggregate of an [`Operator::Aggregate`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Aggregate {
    /// The function.
    pub function: AggFunction,
    /// Input column indices: none for `count` (complete/partial), one value
    /// column otherwise; in final mode the state columns.
    pub inputs: Vec<usize>,
    /// Output column name.
    pub output: String,
}

impl Aggregate {
    /// Names of the state columns a partial aggregate named `output` emits:
    /// `output` itself, or `output.sum` and `output.count` for `avg`.
    pub fn state_columns(function: AggFunction, output: &str) -> Vec<String> {
        match function {
            AggFunction::Avg => vec![format!("{output}.sum"), format!("{output}.count")],
            _ => vec![output.to_string()],
        }
    }
}

/// A built-in operator with its columns resolved to indices.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Operator {
    /// Source: one row `[line]` per line of the split.
    ReadLines,
    /// Source: one row per CSV line of the split.
    ReadCsv {
        /// Number of columns each line must have.
        columns: usize,
        /// Field delimiter.
        delimiter: u8,
        /// Skip the first line of each file (the line at byte 0).
        skip_header: bool,
    },
    /// Source: the listed columns of the Parquet row groups that start in
    /// the split's byte range (`host/data/src/runtime/parquet.rs`).
    ReadParquet {
        /// Column names, in output order; each must exist in every file.
        columns: Vec<String>,
    },
    /// One row `[word]` per word (maximal run of letters and digits).
    Tokenize {
        /// Column to split.
        column: usize,
        /// Lower-case the words.
        lowercase: bool,
    },
    /// Keeps rows whose column compares true against a constant.
    Filter {
        /// Column compared.
        column: usize,
        /// Comparison.
        cmp: CmpOp,
        /// Constant, compared as a string unless `number` is set.
        value: String,
        /// Constant as a number: compare numerically.
        number: Option<Decimal>,
    },
    /// Keeps the listed columns, in that order.
    Project {
        /// Column indices.
        columns: Vec<usize>,
    },
    /// Groups by key and aggregates (blocking: emits when its input ends).
    Aggregate {
        /// Key column indices.
        key: Vec<usize>,
        /// Aggregates.
        aggregates: Vec<Aggregate>,
        /// Phase.
        mode: AggMode,
        /// Digits after the point of non-count outputs (complete/final).
        decimals: u32,
    },
    /// A stage of a SQL job (docs/sql.md): the whole chain is one
    /// DataFusion physical plan, run by `runtime`; always the vertex's only
    /// operator.
    Stage(StagePlan),
}

/// How a SQL source stage reads the splits of its table: the declared
/// format and the columns its scan reads, in the order of the scan's
/// output (docs/sql.md, "Table declarations").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum StageSource {
    /// CSV lines of `file-range` or inline splits.
    Csv {
        /// Number of fields of every line (the declared columns).
        fields: usize,
        /// Field delimiter.
        delimiter: u8,
        /// The first line of each file is a header.
        header: bool,
        /// Field index of each column the scan reads, with its declared
        /// name and type (`SqlType` text, e.g. `decimal(15,2)`).
        columns: Vec<(usize, String, String)>,
    },
    /// Row groups of Parquet files (`runtime/parquet.rs`).
    Parquet {
        /// Name and declared type of each column the scan reads.
        columns: Vec<(String, String)>,
    },
    /// Record batches of every declared column, answered by the table's
    /// source-reader plugin (WIT `coordhost:reader`); the scan keeps the
    /// columns it reads.
    Reader {
        /// The table (the task finds its reader by this name).
        table: String,
        /// Index among the declared columns, name and declared type of
        /// each column the scan reads.
        columns: Vec<(usize, String, String)>,
    },
    /// A table in Hive-style partition folders (`[tables.NAME]
    /// partition-columns`, docs/sql.md): each split's file lies in
    /// `.../k1=v1/.../kN=vN/FILE`, the last N folders of its path naming
    /// the declared partition columns in order; `files` reads the file's
    /// own columns and the host adds each partition value as a constant
    /// column of the split's rows, as DataFusion's `ListingTable` does with
    /// `table_partition_cols`. (Last of the variants: logs written before
    /// it decode as they did.)
    Partitioned {
        /// The table, for messages.
        table: String,
        /// How the files' own columns are read: the scan's file columns,
        /// in the order [`ScanColumn::File`] counts them.
        files: Box<StageSource>,
        /// Every declared partition column, name and declared type
        /// (`SqlType` text), in folder order.
        levels: Vec<(String, String)>,
        /// The scan's output columns, in order.
        output: Vec<ScanColumn>,
        /// The query's filters that read only partition columns, as
        /// `datafusion-proto` logical expressions (columns unqualified): a
        /// split whose values make one of them false or NULL is not read
        /// (partition pruning; the filters still apply to the rows).
        prune: Vec<Vec<u8>>,
    },
}

impl StageSource {
    /// The reading of the files themselves: `files` of a
    /// [`StageSource::Partitioned`], else `self`.
    #[must_use]
    pub fn files(&self) -> &StageSource {
        match self {
            Self::Partitioned { files, .. } => files.files(),
            other => other,
        }
    }
}

/// One output column of a [`StageSource::Partitioned`] scan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ScanColumn {
    /// Column `i` of what the file reading (`files`) gives.
    File(usize),
    /// The value of partition level `i` (an index into `levels`).
    Partition(usize),
}

/// One stage of a SQL job: a DataFusion physical plan as
/// `datafusion-proto` bytes, whose leaves are coordhost's split-reading
/// scan (a source stage) or exchange reads (the subpartitions of its
/// producers); see `crate::sql`.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StagePlan {
    /// The plan, `datafusion-proto` `PhysicalPlanNode` bytes.
    pub plan: Vec<u8>,
    /// For a source stage: how its scan reads a split.
    pub source: Option<StageSource>,
    /// The plan as DataFusion displays it (for `log inspect` and messages).
    pub display: String,
}

impl fmt::Debug for StagePlan {
    /// The plan by its SHA-256 (what the job fingerprint hashes), not
    /// its bytes.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use sha2::Digest;
        let digest: String = sha2::Sha256::digest(&self.plan)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        f.debug_struct("StagePlan")
            .field("plan_sha256", &digest)
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

/// Output format of a sink.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SinkFormat {
    /// CSV, quoting fields that need it.
    Csv {
        /// Write the column names first.
        header: bool,
        /// Field delimiter.
        delimiter: u8,
    },
    /// Fields joined by `separator`, one row per line.
    Text {
        /// Field separator.
        separator: String,
    },
    /// A Parquet file per sink subtask (SQL jobs, `[sink] format =
    /// "parquet"`), columns as the plan types them.
    Parquet,
}

/// Where and how a sink vertex writes (its `write-csv` / `write-text`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SinkSpec {
    /// Output folder (absolute). For a sink on object storage
    /// (`objects`), the local folder its tasks stage their parts in:
    /// `<data dir>/<job>/sink-staging/<vertex>`.
    pub dir: PathBuf,
    /// Format.
    pub format: SinkFormat,
    /// Column names of the rows written.
    pub columns: Vec<String>,
    /// `overwrite = true`: the job file lets a run that has no log of this
    /// job clear `part-*`, `_SUCCESS` and `_staging` in `dir` (see
    /// docs/job-file.md). Not part of the job fingerprint: it cannot change
    /// a byte of output.
    pub overwrite: bool,
    /// `path = "s3://BUCKET/PREFIX"`: the parts and `_SUCCESS` are objects
    /// under this prefix (docs/object-storage.md, "Sink output"); `None`
    /// for a folder. Not sent to worker processes (their wire form is
    /// unchanged): a worker only stages, the coordinator publishes.
    #[serde(skip)]
    pub objects: Option<crate::object_url::ObjectUrl>,
}

/// One step of the job.
#[derive(Debug, Clone)]
pub struct JobVertex {
    /// Id from the job file.
    pub id: String,
    /// Configured parallelism.
    pub parallelism: Parallelism,
    /// Upper bound of `auto` parallelism.
    pub max_parallelism: u32,
    /// Target input bytes per subtask for `auto` parallelism.
    pub bytes_per_task: u64,
    /// `max-task-bytes` of a source vertex: a subtask takes splits only
    /// until it holds about this many input bytes (split lengths), the
    /// last open subtask excepted (docs/recovery.md, "Source tasks sized
    /// by input"). `None`: until the enumerator has none left.
    pub max_task_bytes: Option<u64>,
    /// The split-enumerator plugin feeding a source vertex.
    pub source: Option<String>,
    /// The operator chain (without the write operator).
    pub operators: Vec<Operator>,
    /// The sink, for a vertex without outgoing edges.
    pub sink: Option<SinkSpec>,
    /// Test knob: sleep this long per record read.
    pub record_delay: Duration,
    /// Names of the columns this vertex emits.
    pub output_columns: Vec<String>,
}

/// One edge: an intermediate data set from `from` to `to`.
#[derive(Debug, Clone)]
pub struct JobEdge {
    /// Producer vertex index.
    pub from: usize,
    /// Consumer vertex index.
    pub to: usize,
    /// Distribution pattern.
    pub pattern: DistributionPattern,
    /// Key column names (hash edges).
    pub key_names: Vec<String>,
    /// Key column indices into the producer's output.
    pub key: Vec<usize>,
}

/// The job as configured.
#[derive(Debug, Clone)]
pub struct JobGraph {
    /// Vertices in file order.
    pub vertices: Vec<JobVertex>,
    /// Edges in file order.
    pub edges: Vec<JobEdge>,
    /// Vertex indices in a topological order.
    pub order: Vec<usize>,
}

impl JobGraph {
    /// Id of the intermediate data set of edge `e`: `<from>-<to>`.
    pub fn data_set_id(&self, e: usize) -> String {
        let edge = &self.edges[e];
        format!(
            "{}-{}",
            self.vertices[edge.from].id, self.vertices[edge.to].id
        )
    }

    /// Every vertex downstream of `v` (its consumers, their consumers, …),
    /// in topological order.
    pub fn downstream(&self, v: usize) -> Vec<usize> {
        let mut reached = vec![false; self.vertices.len()];
        let mut stack = vec![v];
        while let Some(x) = stack.pop() {
            for e in self.outputs(x) {
                let to = self.edges[e].to;
                if !reached[to] {
                    reached[to] = true;
                    stack.push(to);
                }
            }
        }
        self.order.iter().copied().filter(|&x| reached[x]).collect()
    }

    /// Indices of the edges entering vertex `v`.
    pub fn inputs(&self, v: usize) -> Vec<usize> {
        (0..self.edges.len())
            .filter(|&e| self.edges[e].to == v)
            .collect()
    }

    /// Indices of the edges leaving vertex `v`.
    pub fn outputs(&self, v: usize) -> Vec<usize> {
        (0..self.edges.len())
            .filter(|&e| self.edges[e].from == v)
            .collect()
    }

    /// Number of subpartitions each producer partition of edge `e` has: 1
    /// for forward, the consumer's parallelism for hash, or its
    /// max-parallelism when that is `auto`.
    pub fn num_subpartitions(&self, e: usize) -> u32 {
        let edge = &self.edges[e];
        match (edge.pattern, self.vertices[edge.to].parallelism) {
            (DistributionPattern::Forward | DistributionPattern::Broadcast, _) => 1,
            (DistributionPattern::Hash, Parallelism::Fixed(n)) => n,
            (DistributionPattern::Hash, Parallelism::Auto) => {
                self.vertices[edge.to].max_parallelism
            }
        }
    }
}

/// Flink's execution states (`ExecutionState`), in lifecycle order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ExecutionState {
    /// Not yet scheduled.
    Created,
    /// Waiting for a worker.
    Scheduled,
    /// Handed to a worker.
    Deploying,
    /// Running on a worker.
    Running,
    /// Done; its partitions are complete.
    Finished,
    /// Stopped on purpose.
    Canceled,
    /// Failed.
    Failed,
}

/// Identifies one execution attempt (Flink's `ExecutionAttemptID`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct AttemptId {
    /// Job vertex index.
    pub vertex: usize,
    /// Subtask index.
    pub subtask: u32,
    /// Attempt number, from 0.
    pub attempt: u32,
}

/// A finished result partition: where it lives and how big each
/// subpartition is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProducedPartition {
    /// Edge index (the intermediate data set).
    pub edge: usize,
    /// Directory named by the shuffle descriptor.
    pub location: PathBuf,
    /// Bytes written per subpartition.
    pub bytes_per_subpartition: SubpartitionBytes,
}

/// The bytes of each subpartition of one result partition, as its producer
/// reported them, held compactly: the coordinator keeps one per finished
/// producer, so an all-to-all edge of N × N would otherwise hold N² `u64`s
/// (128 MiB at N = 4096), most of them 0 when a producer's rows go to few
/// consumers.
///
/// Shape: `len()` subpartitions, each a byte count. Stored as the list of
/// non-zero `(subpartition, bytes)` pairs when that is smaller (fewer than
/// two thirds of the subpartitions hold bytes), else as the dense list. An
/// empty list means "sizes unknown" (a partition recovery only releases).
/// Serialized as the dense list, so its serde shape is a `Vec<u64>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "Vec<u64>", into = "Vec<u64>")]
pub struct SubpartitionBytes {
    len: u32,
    repr: BytesRepr,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum BytesRepr {
    Dense(Box<[u64]>),
    /// Non-zero entries, subpartition ascending.
    Sparse(Box<[(u32, u64)]>),
}

impl Default for BytesRepr {
    fn default() -> Self {
        Self::Dense(Box::default())
    }
}

impl From<Vec<u64>> for SubpartitionBytes {
    fn from(bytes: Vec<u64>) -> Self {
        let len = u32::try_from(bytes.len()).expect("fewer than 2^32 subpartitions");
        let non_zero = bytes.iter().filter(|&&b| b != 0).count();
        // 12 bytes a sparse entry against 8 a dense one.
        let repr = if non_zero * 3 < bytes.len() * 2 {
            BytesRepr::Sparse(
                (0..len)
                    .zip(bytes)
                    .filter(|&(_, b)| b != 0)
                    .collect::<Vec<_>>()
                    .into_boxed_slice(),
            )
        } else {
            BytesRepr::Dense(bytes.into_boxed_slice())
        };
        Self { len, repr }
    }
}

impl From<SubpartitionBytes> for Vec<u64> {
    fn from(bytes: SubpartitionBytes) -> Self {
        bytes.to_vec()
    }
}

impl SubpartitionBytes {
    /// Number of subpartitions.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether the sizes are unknown (no subpartition).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes of subpartition `i`; `None` past the end.
    pub fn get(&self, i: usize) -> Option<u64> {
        if i >= self.len() {
            return None;
        }
        Some(match &self.repr {
            BytesRepr::Dense(d) => d[i],
            BytesRepr::Sparse(s) => s
                .binary_search_by_key(&(i as u32), |&(sub, _)| sub)
                .map_or(0, |at| s[at].1),
        })
    }

    /// The subpartitions that hold bytes, ascending, with their bytes.
    pub fn non_zero(&self) -> impl Iterator<Item = (usize, u64)> + '_ {
        let (dense, sparse): (&[u64], &[(u32, u64)]) = match &self.repr {
            BytesRepr::Dense(d) => (d, &[]),
            BytesRepr::Sparse(s) => (&[], s),
        };
        dense
            .iter()
            .enumerate()
            .filter(|&(_, &b)| b != 0)
            .map(|(i, &b)| (i, b))
            .chain(sparse.iter().map(|&(i, b)| (i as usize, b)))
    }

    /// Whether every subpartition in `range` is known to hold 0 bytes. A
    /// subpartition past the end is not known to be empty: the consumer
    /// then reads the partition and the mismatch surfaces there, rather
    /// than rows being skipped without a word.
    pub fn all_zero_in(&self, range: Range<u32>) -> bool {
        if range.is_empty() {
            return true;
        }
        if range.end > self.len {
            return false;
        }
        match &self.repr {
            BytesRepr::Dense(d) => d[range.start as usize..range.end as usize]
                .iter()
                .all(|&b| b == 0),
            BytesRepr::Sparse(s) => {
                let from = s.partition_point(|&(sub, _)| sub < range.start);
                s.get(from).is_none_or(|&(sub, _)| sub >= range.end)
            }
        }
    }

    /// The sum over all subpartitions.
    pub fn total(&self) -> u64 {
        self.non_zero().map(|(_, b)| b).sum()
    }

    /// The dense list, one entry per subpartition (as the log records it).
    pub fn to_vec(&self) -> Vec<u64> {
        match &self.repr {
            BytesRepr::Dense(d) => d.to_vec(),
            BytesRepr::Sparse(s) => {
                let mut out = vec![0; self.len()];
                for &(i, b) in s.iter() {
                    out[i as usize] = b;
                }
                out
            }
        }
    }
}

/// One parallel subtask of a job vertex.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutionVertex {
    /// Current (latest) attempt number.
    pub attempt: u32,
    /// State of the current attempt.
    pub state: ExecutionState,
    /// Partitions of the current attempt (once finished, or registered).
    pub partitions: Vec<ProducedPartition>,
    /// Attempts started so far.
    pub attempts_started: u32,
}

/// A vertex's run-time initialization: the decision a recovery replays.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VertexInit {
    /// Number of subtasks.
    pub parallelism: u32,
    /// For each subtask, the range of producer subpartitions it reads on
    /// each hash input (empty for sources; `[i, i+1)` for forward inputs
    /// is implied).
    pub input_ranges: Vec<Range<u32>>,
}

/// The execution side of one job vertex.
#[derive(Debug, Clone, Default)]
pub struct ExecutionJobVertex {
    /// Set once the parallelism is decided.
    pub init: Option<VertexInit>,
    /// One per subtask, after `init`.
    pub executions: Vec<ExecutionVertex>,
}

impl ExecutionJobVertex {
    /// How many of its execution vertices are finished (a walk of them:
    /// the scheduler keeps this count as states change,
    /// `coordhost_core::scheduling::Scheduling`).
    pub fn finished_count(&self) -> u32 {
        self.executions
            .iter()
            .filter(|e| e.state == ExecutionState::Finished)
            .count() as u32
    }
}

/// The execution graph: the job graph plus every execution vertex's state.
#[derive(Debug, Clone)]
pub struct ExecutionGraph {
    /// The job graph.
    pub job: JobGraph,
    /// One entry per job vertex (same index).
    pub vertices: Vec<ExecutionJobVertex>,
}

impl ExecutionGraph {
    /// A graph where nothing has run.
    pub fn new(job: JobGraph) -> Self {
        let vertices = vec![ExecutionJobVertex::default(); job.vertices.len()];
        Self { job, vertices }
    }

    /// Initializes vertex `v` with a decided parallelism and input ranges;
    /// every subtask starts in [`ExecutionState::Created`] at attempt 0.
    pub fn initialize(&mut self, v: usize, init: VertexInit) {
        let n = init.parallelism as usize;
        self.vertices[v].executions = vec![
            ExecutionVertex {
                attempt: 0,
                state: ExecutionState::Created,
                partitions: Vec::new(),
                attempts_started: 0,
            };
            n
        ];
        self.vertices[v].init = Some(init);
    }

    /// The current attempt id of subtask `subtask` of vertex `v`.
    pub fn attempt_id(&self, v: usize, subtask: u32) -> AttemptId {
        AttemptId {
            vertex: v,
            subtask,
            attempt: self.vertices[v].executions[subtask as usize].attempt,
        }
    }

    /// Total number of execution vertices initialized so far.
    pub fn execution_count(&self) -> usize {
        self.vertices.iter().map(|v| v.executions.len()).sum()
    }
}

/// Decides an `auto` parallelism from the bytes each subpartition index
/// holds summed over all producers (Flink's adaptive batch scheduler):
/// `ceil(total / bytes_per_task)` clamped to `[1, max]` (and to the number of
/// subpartitions), then contiguous subpartition ranges of about equal bytes.
///
/// Returns the [`VertexInit`]; every subpartition belongs to exactly one range.
pub fn decide_parallelism(
    bytes_per_subpartition: &[u64],
    bytes_per_task: u64,
    max: u32,
) -> VertexInit {
    let n = bytes_per_subpartition.len() as u32;
    let total: u64 = bytes_per_subpartition.iter().sum();
    let wanted = total.div_ceil(bytes_per_task.max(1)).max(1);
    let p = wanted.min(u64::from(max)).min(u64::from(n.max(1))) as u32;
    let mut ranges = Vec::with_capacity(p as usize);
    let mut start = 0u32;
    let mut acc = 0u64;
    for k in 0..p {
        let remaining_ranges = p - k;
        if remaining_ranges == 1 {
            ranges.push(start..n);
            break;
        }
        // Cut when this range reaches its share, leaving one subpartition per later range.
        let target = total.saturating_mul(u64::from(k + 1)) / u64::from(p);
        let mut end = start + 1;
        acc += bytes_per_subpartition[start as usize];
        while end < n - (remaining_ranges - 1) && acc < target {
            acc += bytes_per_subpartition[end as usize];
            end += 1;
        }
        ranges.push(start..end);
        start = end;
    }
    VertexInit {
        parallelism: p,
        input_ranges: ranges,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn subpartition_bytes_answer_the_same_sparse_or_dense() {
        use super::SubpartitionBytes;
        for bytes in [
            vec![],
            vec![0, 0, 7, 0, 0, 0, 9, 0],
            vec![1, 2, 3, 0],
            vec![0; 5],
            vec![u64::MAX, 0, 0],
        ] {
            let b = SubpartitionBytes::from(bytes.clone());
            assert_eq!(b.len(), bytes.len());
            assert_eq!(b.to_vec(), bytes);
            assert_eq!(b.total(), bytes.iter().sum::<u64>());
            for i in 0..=bytes.len() {
                assert_eq!(b.get(i), bytes.get(i).copied(), "{bytes:?} at {i}");
                for j in i..=bytes.len() + 1 {
                    let want = (i..j).all(|k| bytes.get(k) == Some(&0));
                    assert_eq!(
                        b.all_zero_in(i as u32..j as u32),
                        want,
                        "{bytes:?} {i}..{j}"
                    );
                }
            }
            let non_zero: Vec<(usize, u64)> = b.non_zero().collect();
            let want: Vec<(usize, u64)> = bytes
                .iter()
                .copied()
                .enumerate()
                .filter(|&(_, x)| x != 0)
                .collect();
            assert_eq!(non_zero, want);
            let round: SubpartitionBytes =
                postcard::from_bytes(&postcard::to_allocvec(&b).unwrap()).unwrap();
            assert_eq!(round, b);
            assert_eq!(
                postcard::to_allocvec(&b).unwrap(),
                postcard::to_allocvec(&bytes).unwrap(),
                "serialized as the dense list"
            );
        }
    }

    use super::*;

    #[test]
    fn auto_parallelism_covers_every_subpartition_once() {
        let bytes = [10, 0, 0, 90, 5, 5, 0, 40];
        let init = decide_parallelism(&bytes, 50, 32);
        assert_eq!(init.parallelism, 3);
        assert_eq!(init.input_ranges.first().map(|r| r.start), Some(0));
        assert_eq!(init.input_ranges.last().map(|r| r.end), Some(8));
        for w in init.input_ranges.windows(2) {
            assert_eq!(w[0].end, w[1].start);
            assert!(!w[0].is_empty());
        }
    }

    #[test]
    fn auto_parallelism_is_clamped_to_max_and_at_least_one() {
        assert_eq!(decide_parallelism(&[100; 8], 1, 4).parallelism, 4);
        let empty = decide_parallelism(&[0; 8], 10, 4);
        assert_eq!(empty.parallelism, 1);
        assert_eq!(empty.input_ranges, vec![0..8]);
    }
}
