//! The job file's shapes as serde reads them, before validation: every
//! table denies unknown fields, so a typo is an error naming the field.

use serde::Deserialize;

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct RawJobFile {
    pub(super) job: RawJob,
    #[serde(default)]
    pub(super) recovery: Option<RawRecovery>,
    /// Absent: the built-in local shuffle master.
    #[serde(default)]
    pub(super) shuffle: Option<RawShuffle>,
    #[serde(default)]
    pub(super) plugins: toml::Table,
    #[serde(default)]
    pub(super) vertices: Vec<toml::Value>,
    #[serde(default)]
    pub(super) edges: Vec<toml::Value>,
    /// SQL jobs (docs/sql.md): `[tables.NAME]`.
    #[serde(default)]
    pub(super) tables: toml::Table,
    /// SQL jobs: where the query's result goes.
    #[serde(default)]
    pub(super) sink: Option<toml::Value>,
    /// SQL jobs: scalar functions, `[functions.NAME]`.
    #[serde(default)]
    pub(super) functions: toml::Table,
    #[serde(default)]
    pub(super) cluster: Option<RawCluster>,
}

/// A worker's `--config` file: only the `[cluster]` table.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct RawClusterFile {
    pub(super) cluster: RawCluster,
}

/// `[cluster]`: how the processes of a cluster talk to each other.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct RawCluster {
    #[serde(default)]
    pub(super) tls: Option<RawTls>,
}

/// `[cluster] tls = { cert, key, ca }`: the `--tls-*` files.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct RawTls {
    pub(super) cert: String,
    pub(super) key: String,
    pub(super) ca: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct RawJob {
    pub(super) name: String,
    pub(super) workers: Option<i64>,
    pub(super) max_attempts: Option<i64>,
    pub(super) slot_request_timeout_ms: Option<i64>,
    /// Where the job's event log lives: `s3://BUCKET/PREFIX` (docs/object-storage.md).
    pub(super) log: Option<String>,
    /// SQL jobs: the query, inline or in a file.
    pub(super) sql: Option<String>,
    pub(super) sql_file: Option<String>,
    /// SQL jobs: DataFusion's target partitions, the tasks of each
    /// parallel stage.
    pub(super) parallelism: Option<i64>,
    /// SQL jobs: `max-task-bytes` of every table that sets none.
    pub(super) max_task_bytes: Option<toml::Value>,
    /// SQL jobs: `"auto"` for the stages after hash exchanges.
    pub(super) downstream_parallelism: Option<toml::Value>,
    /// SQL jobs: the upper bound of `auto` stages and the number of tasks
    /// of a scan sized by `max-task-bytes`.
    pub(super) max_parallelism: Option<toml::Value>,
    /// SQL jobs: target input bytes per task of an `auto` stage.
    pub(super) bytes_per_task: Option<toml::Value>,
}

/// `[tables.NAME]` of a SQL job.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct RawTable {
    pub(super) plugin: String,
    /// `"csv"`, `"parquet"` or `{ reader = "PLUGIN" }`.
    pub(super) format: toml::Value,
    #[serde(default)]
    pub(super) header: Option<bool>,
    #[serde(default)]
    pub(super) delimiter: Option<String>,
    #[serde(default)]
    pub(super) schema: toml::Table,
    #[serde(default)]
    pub(super) max_task_bytes: Option<toml::Value>,
    /// Hive-style partition folders: `[{ name, type }]`, in folder order.
    #[serde(default)]
    pub(super) partition_columns: Vec<RawPartitionColumn>,
}

/// One of `tables.NAME.partition-columns`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct RawPartitionColumn {
    pub(super) name: String,
    #[serde(rename = "type")]
    pub(super) ty: String,
}

/// `[sink]` of a SQL job.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct RawSink {
    pub(super) path: String,
    pub(super) format: String,
    #[serde(default)]
    pub(super) header: Option<bool>,
    #[serde(default)]
    pub(super) delimiter: Option<String>,
    #[serde(default)]
    pub(super) overwrite: bool,
    /// Test and demo knob: the last stage sleeps this long per input record.
    #[serde(default)]
    pub(super) record_delay_us: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct RawRecovery {
    pub(super) enabled: Option<bool>,
    pub(super) previous_worker_timeout_ms: Option<u64>,
    pub(super) snapshot_min_pause_ms: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct RawShuffle {
    pub(super) plugin: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct RawPlugin {
    pub(super) component: String,
    pub(super) kind: String,
    #[serde(default)]
    pub(super) config: toml::Table,
    #[serde(default)]
    pub(super) dirs: Vec<RawDir>,
    /// Folders of object storage granted (issue 30, docs/object-storage.md).
    #[serde(default)]
    pub(super) stores: Vec<RawStore>,
    #[serde(default)]
    pub(super) limits: Option<RawLimits>,
}

/// One entry of `plugins.NAME.stores`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct RawStore {
    pub(super) url: String,
    #[serde(default)]
    pub(super) writable: bool,
}

/// `[functions.NAME]` of a SQL job: a scalar-function plugin.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct RawFunction {
    pub(super) component: String,
    #[serde(default)]
    pub(super) config: toml::Table,
    #[serde(default)]
    pub(super) dirs: Vec<RawDir>,
    #[serde(default)]
    pub(super) limits: Option<RawLimits>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct RawDir {
    pub(super) path: String,
    #[serde(default)]
    pub(super) writable: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct RawLimits {
    pub(super) call_timeout_ms: Option<u64>,
    pub(super) memory_mib: Option<u64>,
    pub(super) on_trap: Option<String>,
    pub(super) split_wait_ms: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct RawVertex {
    pub(super) id: String,
    pub(super) parallelism: toml::Value,
    #[serde(default)]
    pub(super) source: Option<String>,
    #[serde(default)]
    pub(super) operators: Vec<toml::Value>,
    #[serde(default)]
    pub(super) max_parallelism: Option<i64>,
    #[serde(default)]
    pub(super) bytes_per_task: Option<i64>,
    #[serde(default)]
    pub(super) max_task_bytes: Option<toml::Value>,
    #[serde(default)]
    pub(super) record_delay_us: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct RawEdge {
    pub(super) from: String,
    pub(super) to: String,
    pub(super) kind: String,
    #[serde(default)]
    pub(super) key: Vec<String>,
}

#[derive(Deserialize)]
#[serde(tag = "op", rename_all = "kebab-case", deny_unknown_fields)]
pub(super) enum RawOperator {
    ReadLines {},
    #[serde(rename_all = "kebab-case")]
    ReadCsv {
        columns: Vec<String>,
        #[serde(default)]
        delimiter: Option<String>,
        #[serde(default)]
        skip_header: bool,
    },
    #[serde(rename_all = "kebab-case")]
    ReadParquet {
        columns: Vec<String>,
    },
    #[serde(rename_all = "kebab-case")]
    Tokenize {
        column: String,
        #[serde(rename = "as")]
        output: String,
        #[serde(default)]
        lowercase: bool,
    },
    #[serde(rename_all = "kebab-case")]
    Filter {
        column: String,
        cmp: String,
        value: toml::Value,
        #[serde(default, rename = "type")]
        value_type: Option<String>,
    },
    #[serde(rename_all = "kebab-case")]
    Project {
        columns: Vec<String>,
    },
    #[serde(rename_all = "kebab-case")]
    Aggregate {
        key: Vec<String>,
        aggregates: Vec<RawAggregate>,
        #[serde(default)]
        mode: Option<String>,
        #[serde(default)]
        decimals: Option<u32>,
    },
    #[serde(rename_all = "kebab-case")]
    WriteCsv {
        path: String,
        #[serde(default)]
        header: bool,
        #[serde(default)]
        delimiter: Option<String>,
        #[serde(default)]
        overwrite: bool,
    },
    #[serde(rename_all = "kebab-case")]
    WriteText {
        path: String,
        #[serde(default)]
        separator: Option<String>,
        #[serde(default)]
        overwrite: bool,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct RawAggregate {
    #[serde(rename = "fn")]
    pub(super) function: String,
    #[serde(default)]
    pub(super) column: Option<String>,
    #[serde(rename = "as")]
    pub(super) output: String,
}

// The job file's closed sets of words, read by serde: an unknown word is
// refused with serde's "unknown variant `x`, expected one of ..." message,
// which [`Validator::choice`](super::validate::Validator::choice) puts
// behind the file and the field.

/// An edge's `kind`.
#[derive(Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(super) enum RawEdgeKind {
    Forward,
    Hash,
}

impl From<RawEdgeKind> for crate::graph::DistributionPattern {
    fn from(k: RawEdgeKind) -> Self {
        match k {
            RawEdgeKind::Forward => Self::Forward,
            RawEdgeKind::Hash => Self::Hash,
        }
    }
}

/// An aggregate operator's `mode`.
#[derive(Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(super) enum RawAggMode {
    Complete,
    Partial,
    Final,
}

impl From<RawAggMode> for crate::graph::AggMode {
    fn from(m: RawAggMode) -> Self {
        match m {
            RawAggMode::Complete => Self::Complete,
            RawAggMode::Partial => Self::Partial,
            RawAggMode::Final => Self::Final,
        }
    }
}

/// An aggregate's `fn`.
#[derive(Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(super) enum RawAggFunction {
    Count,
    Sum,
    Min,
    Max,
    Avg,
}

impl From<RawAggFunction> for crate::graph::AggFunction {
    fn from(f: RawAggFunction) -> Self {
        match f {
            RawAggFunction::Count => Self::Count,
            RawAggFunction::Sum => Self::Sum,
            RawAggFunction::Min => Self::Min,
            RawAggFunction::Max => Self::Max,
            RawAggFunction::Avg => Self::Avg,
        }
    }
}

/// A filter's `cmp`.
#[derive(Deserialize)]
pub(super) enum RawCmp {
    #[serde(rename = "==")]
    Eq,
    #[serde(rename = "!=")]
    Ne,
    #[serde(rename = "<")]
    Lt,
    #[serde(rename = "<=")]
    Le,
    #[serde(rename = ">")]
    Gt,
    #[serde(rename = ">=")]
    Ge,
}

impl From<RawCmp> for crate::graph::CmpOp {
    fn from(c: RawCmp) -> Self {
        match c {
            RawCmp::Eq => Self::Eq,
            RawCmp::Ne => Self::Ne,
            RawCmp::Lt => Self::Lt,
            RawCmp::Le => Self::Le,
            RawCmp::Gt => Self::Gt,
            RawCmp::Ge => Self::Ge,
        }
    }
}

/// A filter's `type`: how its `value` compares.
#[derive(Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub(super) enum RawValueType {
    String,
    Number,
}

/// What the SQL form of a job file says, before planning.
pub(super) struct RawSql {
    pub(super) sql: Option<String>,
    pub(super) sql_file: Option<String>,
    pub(super) parallelism: Option<i64>,
    pub(super) max_task_bytes: Option<toml::Value>,
    pub(super) downstream_parallelism: Option<toml::Value>,
    pub(super) max_parallelism: Option<toml::Value>,
    pub(super) bytes_per_task: Option<toml::Value>,
    pub(super) tables: toml::Table,
    pub(super) sink: Option<toml::Value>,
    pub(super) functions: toml::Table,
}
