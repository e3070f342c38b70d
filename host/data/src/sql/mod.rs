//! SQL jobs (issue 26, [`docs/sql.md`](../../docs/sql.md)): Apache DataFusion
//! plans a query over the job file's declared tables, and coordhost cuts the
//! physical plan into **stages** at its exchanges — each stage becomes a job
//! vertex, each exchange an edge — so scheduling, the event log, recovery,
//! result partitions and the exactly-once sink stay coordhost's.
//!
//! - [`plan_query`]: SQL text + table declarations → stages (plans as
//!   `datafusion-proto` bytes), or a [`SqlError`] naming the line and
//!   column, the table or column, or the operator that cannot be
//!   distributed.
//! - [`run_stage`]: runs one task of a stage — decodes its plan with the
//!   codec of coordhost's leaf nodes (a split-reading scan, a
//!   subpartition-reading exchange), whose batches come from a
//!   [`LeafInputs`] the caller (`runtime`) provides.
//! - [`run_chain`]: runs one task of a job-file vertex (the graph form):
//!   its operator chain lowered onto a DataFusion plan ([`chain`]) with the
//!   host's own functions ([`cellfn`]), over the same kind of leaf.
//!
//! This module plans and runs plans; it reads no file and no partition
//! itself (that is `runtime`'s, a floor up).

pub mod cellfn;
pub mod chain;
mod cut;
mod exec;
mod udf;

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::{DataType, Field, Schema, SchemaRef};

pub use exec::{BatchIter, LeafInputs, LeafKind, StageFailure, StageOutput, run_chain, run_stage};
pub use udf::{FunctionSet, ScalarCallee, SqlFunction};

use coordhost_model::graph::{DistributionPattern, StagePlan, StageSource};

/// Why a SQL job cannot be planned (exit 2 at load time).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SqlError {
    /// DataFusion refused the query: a syntax error (its message names the
    /// line and column), an unknown table, column or function.
    #[error("{0}")]
    Plan(String),
    /// The plan holds an operator coordhost does not distribute yet.
    #[error("the plan needs `{operator}`, which coordhost cannot distribute yet: {why}")]
    Undistributable {
        /// DataFusion's name of the operator, e.g. `HashJoinExec`.
        operator: String,
        /// What is missing.
        why: String,
    },
    /// A declared column type is not one coordhost reads.
    #[error(
        "column `{column}`: unknown type `{ty}`; expected one of {}",
        SqlType::NAMES
    )]
    Type {
        /// The column.
        column: String,
        /// The type as written.
        ty: String,
    },
}

/// A column type of a table declaration, as written (`bigint`,
/// `decimal(15,2)`, `date`, …) and as Arrow carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqlType {
    text: String,
    dt: DataType,
}

impl SqlType {
    /// The names [`SqlType::parse`] takes, for messages.
    pub const NAMES: &'static str =
        "`bigint`, `int`, `double`, `varchar` (or `text`), `date`, `boolean`, `decimal(P,S)`";

    /// Parses a declared type (case-insensitive, spaces ignored).
    ///
    /// # Errors
    ///
    /// [`SqlError::Type`] naming `column` for anything else, or a decimal
    /// whose precision is not 1..=38 or whose scale exceeds it.
    pub fn parse(column: &str, text: &str) -> Result<Self, SqlError> {
        let t: String = text
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect::<String>()
            .to_ascii_lowercase();
        let bad = || SqlError::Type {
            column: column.to_string(),
            ty: text.to_string(),
        };
        let dt = match t.as_str() {
            "bigint" | "int64" | "long" => DataType::Int64,
            "int" | "integer" | "int32" => DataType::Int32,
            "double" | "float8" | "float64" => DataType::Float64,
            "varchar" | "text" | "string" | "utf8" => DataType::Utf8,
            "date" => DataType::Date32,
            "boolean" | "bool" => DataType::Boolean,
            _ => {
                let inner = t
                    .strip_prefix("decimal(")
                    .and_then(|r| r.strip_suffix(')'))
                    .ok_or_else(bad)?;
                let (p, s) = inner.split_once(',').ok_or_else(bad)?;
                let p: u8 = p.parse().map_err(|_| bad())?;
                let s: i8 = s.parse().map_err(|_| bad())?;
                if !(1..=38).contains(&p) || s < 0 || s as u8 > p {
                    return Err(bad());
                }
                DataType::Decimal128(p, s)
            }
        };
        Ok(Self { text: t, dt })
    }

    /// The Arrow type.
    #[must_use]
    pub fn data_type(&self) -> &DataType {
        &self.dt
    }

    /// The type as [`SqlType::parse`] reads it back (lower case, no spaces).
    #[must_use]
    pub fn text(&self) -> &str {
        &self.text
    }
}

/// The format of a declared table's files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TableFormat {
    /// CSV lines: `header` says the first line of each file names the
    /// columns (it is skipped), `delimiter` separates fields.
    Csv {
        /// Skip the first line of each file.
        header: bool,
        /// Field delimiter (one byte).
        delimiter: u8,
    },
    /// Parquet files, read by row group.
    Parquet,
    /// Read by a source-reader plugin (`format = { reader = "NAME" }`,
    /// WIT `coordhost:reader`): each split goes to the plugin, which
    /// answers record batches of the declared schema.
    Reader {
        /// The source-reader plugin under `[plugins]`.
        plugin: String,
        /// Lowercase hex SHA-256 of its component: part of the SQL
        /// fingerprint, so a changed reader between a crash and the rerun
        /// is a changed job.
        component_sha256: String,
    },
}

/// One `[tables.NAME]` of a SQL job file.
#[derive(Clone, PartialEq, Eq)]
pub struct TableDecl {
    /// The table's name in SQL.
    pub name: String,
    /// The split-enumerator plugin that hands out its splits.
    pub plugin: String,
    /// How its files are read.
    pub format: TableFormat,
    /// Its columns in file order, each with its declared type.
    pub columns: Vec<(String, SqlType)>,
    /// `max-task-bytes` (the table's, else `[job]`'s): a scan task takes
    /// splits only until it holds about this many input bytes.
    pub max_task_bytes: Option<u64>,
    /// Tasks of this table's scan stage when not `[job] parallelism`: a
    /// scan sized by `max-task-bytes` has `[job] max-parallelism` tasks,
    /// those that find no split left finishing empty.
    pub scan_tasks: Option<u32>,
    /// `partition-columns`: the Hive-style partition folders the table's
    /// files lie in (`k1=v1/.../kN=vN/FILE`), each column with its
    /// declared type, in folder order; empty when the table has none.
    /// They follow [`TableDecl::columns`] in the table's schema.
    pub partition_columns: Vec<(String, SqlType)>,
}

impl std::fmt::Debug for TableDecl {
    /// As `#[derive(Debug)]` writes it, with `partition_columns` only
    /// when there are some: the SQL fingerprint hashes this text, so the
    /// fingerprints of logs written before partition columns existed stay
    /// the same.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("TableDecl");
        d.field("name", &self.name)
            .field("plugin", &self.plugin)
            .field("format", &self.format)
            .field("columns", &self.columns)
            .field("max_task_bytes", &self.max_task_bytes)
            .field("scan_tasks", &self.scan_tasks);
        if !self.partition_columns.is_empty() {
            d.field("partition_columns", &self.partition_columns);
        }
        d.finish()
    }
}

impl TableDecl {
    /// The table's Arrow schema (every column nullable): the file
    /// columns, then the partition columns.
    #[must_use]
    pub fn schema(&self) -> SchemaRef {
        Arc::new(Schema::new(
            self.columns
                .iter()
                .chain(&self.partition_columns)
                .map(|(n, t)| Field::new(n, t.data_type().clone(), true))
                .collect::<Vec<_>>(),
        ))
    }

    /// Index of column `name` in [`TableDecl::schema`].
    fn column_index(&self, name: &str) -> Option<usize> {
        self.columns
            .iter()
            .chain(&self.partition_columns)
            .position(|(n, _)| n == name)
    }

    /// How a source stage reads the columns `projection` (indices into
    /// [`TableDecl::schema`]) of this table: a table with partition
    /// columns reads the file columns among them (at least one: the
    /// first, when only partition columns are read, for the rows'
    /// count) and adds the partition values
    /// ([`StageSource::Partitioned`]), skipping the splits whose values
    /// make one of `prune` false.
    fn stage_source(&self, projection: &[usize], prune: Vec<Vec<u8>>) -> StageSource {
        if self.partition_columns.is_empty() {
            return self.file_source(projection);
        }
        let n = self.columns.len();
        let mut file_projection = Vec::new();
        let mut output = Vec::with_capacity(projection.len());
        for &i in projection {
            if i < n {
                output.push(coordhost_model::graph::ScanColumn::File(
                    file_projection.len(),
                ));
                file_projection.push(i);
            } else {
                output.push(coordhost_model::graph::ScanColumn::Partition(i - n));
            }
        }
        if file_projection.is_empty() {
            file_projection.push(0);
        }
        StageSource::Partitioned {
            table: self.name.clone(),
            files: Box::new(self.file_source(&file_projection)),
            levels: self
                .partition_columns
                .iter()
                .map(|(n, t)| (n.clone(), t.text().to_string()))
                .collect(),
            output,
            prune,
        }
    }

    /// How a source stage reads the file columns `projection` (indices
    /// into [`TableDecl::columns`]).
    fn file_source(&self, projection: &[usize]) -> StageSource {
        match &self.format {
            TableFormat::Csv { header, delimiter } => StageSource::Csv {
                fields: self.columns.len(),
                delimiter: *delimiter,
                header: *header,
                columns: projection
                    .iter()
                    .map(|&i| {
                        (
                            i,
                            self.columns[i].0.clone(),
                            self.columns[i].1.text().to_string(),
                        )
                    })
                    .collect(),
            },
            TableFormat::Reader { .. } => StageSource::Reader {
                table: self.name.clone(),
                columns: projection
                    .iter()
                    .map(|&i| {
                        (
                            i,
                            self.columns[i].0.clone(),
                            self.columns[i].1.text().to_string(),
                        )
                    })
                    .collect(),
            },
            TableFormat::Parquet => StageSource::Parquet {
                columns: projection
                    .iter()
                    .map(|&i| {
                        (
                            self.columns[i].0.clone(),
                            self.columns[i].1.text().to_string(),
                        )
                    })
                    .collect(),
            },
        }
    }
}

/// One input of a stage: the stage it reads and how its rows were routed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StageInput {
    /// Index of the producing stage (earlier in the list).
    pub from: usize,
    /// How rows travel: `Hash` (by `key`), `Broadcast` (every consumer
    /// task reads everything: a coalesce or merge, the build side of a
    /// join) or `Forward` (producer task `i` to consumer task `i`: a scan
    /// cut off a stage that also reads another stage).
    pub pattern: DistributionPattern,
    /// Hash key: column indices of the producer's output (empty unless
    /// `pattern` is `Hash`).
    pub key: Vec<usize>,
}

/// One stage of a planned query, in an order where producers come first;
/// the last stage is the one whose output goes to the sink.
#[derive(Debug, Clone)]
pub struct PlannedStage {
    /// The plan, its display and (for a source stage) how it reads splits.
    pub plan: StagePlan,
    /// Number of tasks (the plan's partitions at this stage).
    pub parallelism: u32,
    /// The table a source stage scans.
    pub table: Option<String>,
    /// What it reads from earlier stages (none for a source stage).
    pub inputs: Vec<StageInput>,
    /// Names of its output columns.
    pub output_columns: Vec<String>,
}

/// Plans `sql` over `tables` with DataFusion (target partitions =
/// `parallelism`) and cuts the physical plan into stages (docs/sql.md,
/// "The stage cut").
///
/// # Errors
///
/// [`SqlError::Plan`] for what DataFusion refuses (syntax with line and
/// column, unknown table, column or function);
/// [`SqlError::Undistributable`] for an operator the cut does not handle.
pub fn plan_query(
    sql: &str,
    tables: &[TableDecl],
    parallelism: u32,
) -> Result<Vec<PlannedStage>, SqlError> {
    plan_query_with(sql, tables, &FunctionSet::default(), parallelism)
}

/// As [`plan_query`], with the job's scalar functions callable by name.
///
/// # Errors
///
/// As [`plan_query`]; [`SqlError::Plan`] naming a function whose name is
/// one of DataFusion's own.
pub fn plan_query_with(
    sql: &str,
    tables: &[TableDecl],
    functions: &FunctionSet,
    parallelism: u32,
) -> Result<Vec<PlannedStage>, SqlError> {
    let functions = functions.clone();
    too_many_operators(sql)?;
    // DataFusion's planner is async; it runs on its own thread with its
    // own runtime, so the caller may be inside another runtime or not.
    let sql = sql.to_string();
    let declared = tables.to_vec();
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .name("coordhost-sql-planner".to_owned())
            .stack_size(PLANNER_STACK_BYTES)
            .spawn_scoped(s, || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .build()
                    .map_err(|e| SqlError::Plan(format!("cannot start the planner: {e}")))?;
                rt.block_on(cut::plan_and_cut(&sql, &declared, &functions, parallelism))
            })
            .map_err(|e| SqlError::Plan(format!("cannot start the planner: {e}")))?
            .join()
            .unwrap_or_else(|_| Err(SqlError::Plan("the planner panicked".to_string())))
    })
    .map_err(|e| name_the_tables(e, tables))
}

/// The planner thread's stack: a chain of `OR`s or `+`s is a tree as deep
/// as it is long, and DataFusion walks it by recursion (its tree walks grow
/// their stack on the heap, `recursive_protection`; a clone of an
/// expression does not). Only what is touched is committed.
const PLANNER_STACK_BYTES: usize = 256 << 20;

/// The most binary operators (`AND`, `OR`, `+`, `=`, ...) a query may
/// hold: each can deepen an expression tree by one, and a tree deeper than
/// the stacks of the planner and of the tasks that evaluate it ends the
/// process (a stack overflow aborts; it cannot be caught). A query of
/// thousands of `OR`s can say `IN (...)`, which has no such depth. Nested
/// parentheses and calls are bounded by the SQL parser's own recursion
/// limit.
pub const MAX_OPERATORS: usize = 4096;

/// [`SqlError::Plan`] when `sql` holds more than [`MAX_OPERATORS`] binary
/// operators (counted over its tokens: no tree is built to count them).
fn too_many_operators(sql: &str) -> Result<(), SqlError> {
    use datafusion::sql::sqlparser::dialect::GenericDialect;
    use datafusion::sql::sqlparser::keywords::Keyword;
    use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
    // A query that does not tokenize is refused by the planner, with its
    // place in the text.
    let Ok(tokens) = Tokenizer::new(&GenericDialect {}, sql).tokenize() else {
        return Ok(());
    };
    let operators = tokens
        .iter()
        .filter(|t| match t {
            Token::Word(w) => matches!(w.keyword, Keyword::AND | Keyword::OR),
            Token::Plus
            | Token::Minus
            | Token::Mul
            | Token::Div
            | Token::Mod
            | Token::Eq
            | Token::DoubleEq
            | Token::Neq
            | Token::Lt
            | Token::Gt
            | Token::LtEq
            | Token::GtEq
            | Token::StringConcat
            | Token::Ampersand
            | Token::Pipe
            | Token::Caret => true,
            _ => false,
        })
        .count();
    if operators > MAX_OPERATORS {
        return Err(SqlError::Plan(format!(
            "the query holds {operators} operators (AND, OR, +, =, ...); at most {MAX_OPERATORS} are planned, as each may deepen an expression by one (for many alternatives of one column, write `column IN (v1, v2, ...)`)"
        )));
    }
    Ok(())
}

/// DataFusion's "table 'datafusion.public.x' not found", with the tables
/// the job file declares (as an unknown column's message lists the valid
/// fields).
fn name_the_tables(e: SqlError, tables: &[TableDecl]) -> SqlError {
    match e {
        SqlError::Plan(text) if text.contains("table '") && text.ends_with("' not found") => {
            let names: Vec<String> = tables.iter().map(|t| format!("`{}`", t.name)).collect();
            let declared = if names.is_empty() {
                "no table is declared ([tables.NAME])".to_owned()
            } else {
                format!("the job file declares {}", names.join(", "))
            };
            SqlError::Plan(format!("{text}; {declared}"))
        }
        other => other,
    }
}

/// `batch` with `schema` (same columns, the leaf's names and nullability).
///
/// # Errors
///
/// Arrow's error when the columns do not fit the schema.
pub fn with_schema(
    batch: &RecordBatch,
    schema: &SchemaRef,
) -> Result<RecordBatch, arrow_schema::ArrowError> {
    // A leaf of no column (`count(*)`) keeps only the row count.
    let columns = if schema.fields().is_empty() {
        Vec::new()
    } else {
        batch.columns().to_vec()
    };
    RecordBatch::try_new_with_options(
        Arc::clone(schema),
        columns,
        &arrow_array::RecordBatchOptions::new().with_row_count(Some(batch.num_rows())),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_parse() {
        assert_eq!(
            SqlType::parse("c", "DECIMAL(15, 2)").unwrap().data_type(),
            &DataType::Decimal128(15, 2)
        );
        assert_eq!(
            SqlType::parse("c", "date").unwrap().data_type(),
            &DataType::Date32
        );
        assert!(SqlType::parse("c", "decimal(40,2)").is_err());
        let e = SqlType::parse("l_x", "money").unwrap_err().to_string();
        assert!(e.contains("`l_x`") && e.contains("`money`"), "{e}");
    }

    fn table() -> TableDecl {
        let col = |n: &str, t: &str| (n.to_string(), SqlType::parse(n, t).unwrap());
        TableDecl {
            name: "t".into(),
            plugin: "files".into(),
            format: TableFormat::Csv {
                header: false,
                delimiter: b',',
            },
            columns: vec![
                col("k", "varchar"),
                col("v", "decimal(15,2)"),
                col("d", "date"),
            ],
            max_task_bytes: None,
            scan_tasks: None,
            partition_columns: Vec::new(),
        }
    }

    #[test]
    fn a_chain_of_operators_plans_up_to_the_bound_and_is_refused_past_it() {
        // 4 000 ORs and 4 000 `=`s would overflow the planner; a chain of
        // `+` as long as the bound allows plans (the deepest tree allowed).
        let chain = |n: usize| {
            let terms: Vec<String> = (0..n).map(|_| "1".to_owned()).collect();
            format!("SELECT k FROM t WHERE v > {}", terms.join(" + "))
        };
        plan_query(&chain(MAX_OPERATORS - 1), &[table()], 2).expect("the deepest chain allowed");
        let e = plan_query(&chain(MAX_OPERATORS + 1), &[table()], 2).expect_err("past the bound");
        assert!(
            e.to_string().contains("holds 4097 operators") && e.to_string().contains("IN ("),
            "{e}"
        );
        let ors: Vec<String> = (0..4000).map(|i| format!("v = {i}")).collect();
        let e = plan_query(
            &format!("SELECT k FROM t WHERE {}", ors.join(" OR ")),
            &[table()],
            2,
        )
        .expect_err("8 000 operators");
        assert!(e.to_string().contains("7999 operators"), "{e}");
    }

    #[test]
    fn an_unknown_table_is_named_with_the_declared_ones() {
        let e = plan_query("SELECT k FROM tt", &[table()], 2).expect_err("no table tt");
        assert_eq!(
            e.to_string(),
            "Error during planning: table 'datafusion.public.tt' not found; the job file declares `t`"
        );
        let e = plan_query("SELECT k FROM t WHERE nope = 1", &[table()], 2).expect_err("no column");
        assert!(!e.to_string().contains("declares"), "{e}");
    }

    #[test]
    fn a_table_without_partition_columns_prints_as_the_derived_debug_did() {
        // The SQL fingerprint hashes this text: logs written before
        // partition columns existed must keep their fingerprint.
        #[derive(Debug)]
        #[allow(dead_code)]
        struct TableDecl {
            name: String,
            plugin: String,
            format: TableFormat,
            columns: Vec<(String, SqlType)>,
            max_task_bytes: Option<u64>,
            scan_tasks: Option<u32>,
        }
        let t = table();
        let before = TableDecl {
            name: t.name.clone(),
            plugin: t.plugin.clone(),
            format: t.format.clone(),
            columns: t.columns.clone(),
            max_task_bytes: t.max_task_bytes,
            scan_tasks: t.scan_tasks,
        };
        assert_eq!(format!("{t:?}"), format!("{before:?}"));
        assert_eq!(format!("{t:#?}"), format!("{before:#?}"));
        let mut p = table();
        p.partition_columns = vec![("y".into(), SqlType::parse("y", "int").unwrap())];
        assert!(
            format!("{p:?}").ends_with(
                r#"scan_tasks: None, partition_columns: [("y", SqlType { text: "int", dt: Int32 })] }"#
            ),
            "{p:?}"
        );
    }

    #[test]
    fn a_scan_of_partition_columns_adds_their_values_and_reads_at_least_one_file_column() {
        let mut t = table();
        t.partition_columns = vec![("y".into(), SqlType::parse("y", "int").unwrap())];
        let source = |sql: &str| {
            plan_query(sql, std::slice::from_ref(&t), 2).unwrap()[0]
                .plan
                .source
                .clone()
        };
        use coordhost_model::graph::ScanColumn::{File, Partition};
        match source("SELECT y, count(*) AS n FROM t WHERE y = 1995 GROUP BY y") {
            Some(StageSource::Partitioned {
                table,
                files,
                levels,
                output,
                prune,
            }) => {
                assert_eq!(table, "t");
                assert_eq!(prune.len(), 1, "`y = 1995` prunes");
                assert_eq!(levels, [("y".to_string(), "int".to_string())]);
                assert_eq!(output, [Partition(0)]);
                match *files {
                    StageSource::Csv { columns, .. } => assert_eq!(columns[0].1, "k"),
                    other => panic!("{other:?}"),
                }
            }
            other => panic!("{other:?}"),
        }
        match source("SELECT v, y FROM t") {
            Some(StageSource::Partitioned { files, output, .. }) => {
                assert_eq!(output, [File(0), Partition(0)]);
                assert_eq!(files.files(), &*files);
                match *files {
                    StageSource::Csv { columns, .. } => {
                        let names: Vec<&str> = columns.iter().map(|c| c.1.as_str()).collect();
                        assert_eq!(names, ["v"]);
                    }
                    other => panic!("{other:?}"),
                }
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_group_by_with_order_is_cut_at_the_hash_repartition_and_the_merge() {
        let stages = plan_query(
            "SELECT k, sum(v * 2) AS s FROM t WHERE d <= date '2000-01-01' GROUP BY k ORDER BY k",
            &[table()],
            3,
        )
        .unwrap();
        type Shape<'a> = (u32, Option<&'a str>, Vec<(usize, Vec<usize>)>);
        let shape: Vec<Shape<'_>> = stages
            .iter()
            .map(|s| {
                (
                    s.parallelism,
                    s.table.as_deref(),
                    s.inputs.iter().map(|i| (i.from, i.key.clone())).collect(),
                )
            })
            .collect();
        assert_eq!(
            shape,
            [
                (3, Some("t"), vec![]),
                (3, None, vec![(0, vec![0])]),
                (1, None, vec![(1, vec![])]),
            ],
            "{stages:#?}"
        );
        assert_eq!(stages[2].output_columns, ["k", "s"]);
        // The scan reads only the columns the query needs, in scan order.
        match &stages[0].plan.source {
            Some(StageSource::Csv {
                columns, fields, ..
            }) => {
                assert_eq!(*fields, 3);
                let names: Vec<&str> = columns.iter().map(|c| c.1.as_str()).collect();
                assert_eq!(names, ["k", "v", "d"]);
            }
            other => panic!("{other:?}"),
        }
        assert!(stages[2].plan.display.contains("SortPreservingMergeExec"));
    }

    #[test]
    fn a_join_reads_two_hash_inputs_and_a_union_and_bad_sql_are_refused() {
        let stages = plan_query(
            "SELECT a.k, b.v FROM t a JOIN t b ON a.k = b.k",
            &[table()],
            2,
        )
        .unwrap();
        let inputs: Vec<Vec<(usize, DistributionPattern, Vec<usize>)>> = stages
            .iter()
            .map(|s| {
                s.inputs
                    .iter()
                    .map(|i| (i.from, i.pattern, i.key.clone()))
                    .collect()
            })
            .collect();
        assert_eq!(
            inputs,
            [
                vec![],
                vec![],
                vec![
                    (0, DistributionPattern::Hash, vec![0]),
                    (1, DistributionPattern::Hash, vec![0])
                ]
            ],
            "{stages:#?}"
        );
        assert!(
            stages[2].plan.display.contains("HashJoinExec"),
            "{}",
            stages[2].plan.display
        );
        // A scalar subquery: its one row is broadcast to the tasks that
        // compare with it.
        let stages = plan_query(
            "SELECT k FROM t WHERE v > (SELECT avg(v) FROM t)",
            &[table()],
            2,
        )
        .unwrap();
        assert!(
            stages
                .iter()
                .flat_map(|s| &s.inputs)
                .any(|i| i.pattern == DistributionPattern::Broadcast),
            "{stages:#?}"
        );
        let e = plan_query("SELECT k FROM t UNION ALL SELECT k FROM t", &[table()], 2)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("UnionExec") && e.contains("cannot distribute"),
            "{e}"
        );
        let e = plan_query("SELECT k FROM t WHERE", &[table()], 2)
            .unwrap_err()
            .to_string();
        assert!(e.contains("syntax error") && e.contains("Line: 1"), "{e}");
        let e = plan_query("SELECT nope FROM t", &[table()], 2)
            .unwrap_err()
            .to_string();
        assert!(e.contains("nope"), "{e}");
        let e = plan_query("SELECT 1", &[table()], 2)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("reads no declared table") || e.contains("not a declared table"),
            "{e}"
        );
    }
}
