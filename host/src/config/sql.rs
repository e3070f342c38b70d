//! The SQL form of a job file (docs/sql.md): `[job] sql` or `sql-file`,
//! `[tables.NAME]` and `[sink]`, planned by `crate::sql` into the same job
//! graph the TOML form describes (a job vertex per stage, an edge per
//! exchange).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::raw::{RawSink, RawSql, RawTable};
use super::validate::{SinkField, Validator};
use super::{ConfigError, DEFAULT_BYTES_PER_TASK, DEFAULT_MAX_PARALLELISM, SqlSpec};
use crate::graph::{JobEdge, JobGraph, JobVertex, Operator, Parallelism, SinkFormat, SinkSpec};
use crate::plugin::{PluginKind, PluginSpec};
use crate::sql::{PlannedStage, SqlType, TableDecl, TableFormat};

/// Default `[job] parallelism` of a SQL job.
pub const DEFAULT_SQL_PARALLELISM: u32 = 4;

impl Validator {
    /// `message` (DataFusion's, which counts lines and columns from the
    /// start of the query) with the place in the user's file added: the
    /// `.sql` file of `sql-file`, or the job file's own line for an
    /// inline `sql = """..."""`.
    fn sql_place(&self, message: &str, sql_file: Option<&Path>) -> String {
        let Some((line, column)) = query_line_column(message) else {
            return message.to_string();
        };
        match sql_file {
            Some(path) => format!("{message} (at {}:{line}:{column})", path.display()),
            None => match std::fs::read_to_string(&self.file)
                .ok()
                .and_then(|t| inline_sql_start(&t))
            {
                Some((first, before)) => {
                    let column = if line == 1 { column + before } else { column };
                    format!(
                        "{message} (at {}:{}:{column})",
                        self.file.display(),
                        first + line - 1
                    )
                }
                None => message.to_string(),
            },
        }
    }

    /// Checks the SQL form, plans the query and builds its job graph.
    pub(super) fn sql_graph(
        &self,
        raw: RawSql,
        plugins: &BTreeMap<String, PluginSpec>,
    ) -> Result<(JobGraph, SqlSpec), ConfigError> {
        let (text, sql_file, field) = self.sql_text(raw.sql, raw.sql_file)?;
        let parallelism = self.sql_parallelism(raw.parallelism)?;
        let job_max_task_bytes = self.max_task_bytes("job.max-task-bytes", raw.max_task_bytes)?;
        let downstream_auto = self.sql_downstream_auto(raw.downstream_parallelism)?;
        let max_parallelism = self.sql_max_parallelism(raw.max_parallelism)?;
        let bytes_per_task = self.sql_bytes_per_task(raw.bytes_per_task)?;
        let tables = self.sql_tables(raw.tables, plugins, job_max_task_bytes, max_parallelism)?;
        let (sink_template, final_delay) = self.sql_sink(raw.sink)?;
        let (functions, function_specs) = self.functions(raw.functions)?;
        let stages =
            crate::sql::plan_query_with(&text, &tables, &functions, parallelism).map_err(|e| {
                self.invalid(field, self.sql_place(&e.to_string(), sql_file.as_deref()))
            })?;
        let n = stages.len();
        let mut vertices = Vec::with_capacity(n);
        let mut edges = Vec::new();
        for (i, st) in stages.into_iter().enumerate() {
            let decl = self.stage_table(field, st.table.as_ref(), &tables)?;
            let auto = downstream_auto && Self::stage_is_auto(&st);
            edges.extend(Self::stage_edges(i, &st, &vertices));
            let last = i + 1 == n;
            let sink = last.then(|| SinkSpec {
                columns: st.output_columns.clone(),
                ..sink_template.clone()
            });
            vertices.push(JobVertex {
                id: format!("stage{i}"),
                parallelism: if auto {
                    Parallelism::Auto
                } else {
                    Parallelism::Fixed(st.parallelism)
                },
                max_parallelism,
                bytes_per_task,
                max_task_bytes: decl.and_then(|d| d.max_task_bytes),
                source: decl.map(|d| d.plugin.clone()),
                operators: vec![Operator::Stage(st.plan)],
                sink,
                record_delay: if last { final_delay } else { Duration::ZERO },
                output_columns: st.output_columns,
            });
        }
        self.sinks.borrow_mut().push(SinkField {
            vertex: n - 1,
            field: "sink".to_string(),
            overwrite: sink_template.overwrite,
        });
        let graph = JobGraph {
            vertices,
            edges,
            order: (0..n).collect(),
        };
        Ok((
            graph,
            SqlSpec {
                text,
                tables,
                parallelism,
                downstream_auto,
                max_parallelism,
                bytes_per_task,
                functions,
                function_specs,
            },
        ))
    }

    /// The query, from `sql` or the file `sql-file` names (not both, not
    /// empty), with that file's path and the field that holds the query.
    fn sql_text(
        &self,
        sql: Option<String>,
        sql_file: Option<String>,
    ) -> Result<(String, Option<PathBuf>, &'static str), ConfigError> {
        let (text, sql_file) = match (sql, sql_file) {
            (Some(_), Some(_)) => {
                return Err(self.invalid("job.sql-file", "give `sql` or `sql-file`, not both"));
            }
            (Some(t), None) => (t, None),
            (None, Some(f)) => {
                let path = self.resolve_path("job.sql-file", &f)?;
                let text = crate::files::read_job_text(&path).map_err(|e| {
                    self.invalid(
                        "job.sql-file",
                        format!("cannot read {}: {e}", path.display()),
                    )
                })?;
                (text, Some(path))
            }
            (None, None) => unreachable!("called for a SQL job"),
        };
        let field = if sql_file.is_some() {
            "job.sql-file"
        } else {
            "job.sql"
        };
        if text.trim().is_empty() {
            return Err(self.invalid(field, "the query is empty"));
        }
        Ok((text, sql_file, field))
    }

    /// `job.parallelism`: in 1..=4096, [`DEFAULT_SQL_PARALLELISM`] when absent.
    fn sql_parallelism(&self, value: Option<i64>) -> Result<u32, ConfigError> {
        match value {
            None => Ok(DEFAULT_SQL_PARALLELISM),
            Some(n) if (1..=4096).contains(&n) => Ok(n as u32),
            Some(n) => Err(self.invalid("job.parallelism", format!("{n} is not in 1..=4096"))),
        }
    }

    /// `job.downstream-parallelism`: absent, or `"auto"`.
    fn sql_downstream_auto(&self, value: Option<toml::Value>) -> Result<bool, ConfigError> {
        match value {
            None => Ok(false),
            Some(toml::Value::String(s)) if s == "auto" => Ok(true),
            Some(other) => Err(self.invalid(
                "job.downstream-parallelism",
                format!("{other} is not \"auto\" (leave it out for `parallelism` tasks)"),
            )),
        }
    }

    /// `job.max-parallelism`: an integer in 1..=4096,
    /// [`DEFAULT_MAX_PARALLELISM`] when absent.
    fn sql_max_parallelism(&self, value: Option<toml::Value>) -> Result<u32, ConfigError> {
        match value {
            None => Ok(DEFAULT_MAX_PARALLELISM),
            Some(toml::Value::Integer(n)) if (1..=4096).contains(&n) => Ok(n as u32),
            Some(other) => Err(self.invalid(
                "job.max-parallelism",
                format!("{other} is not an integer in 1..=4096"),
            )),
        }
    }

    /// `job.bytes-per-task`: a positive integer, [`DEFAULT_BYTES_PER_TASK`]
    /// when absent.
    fn sql_bytes_per_task(&self, value: Option<toml::Value>) -> Result<u64, ConfigError> {
        match value {
            None => Ok(DEFAULT_BYTES_PER_TASK),
            Some(toml::Value::Integer(n)) if n >= 1 => Ok(n as u64),
            Some(other) => Err(self.invalid(
                "job.bytes-per-task",
                format!("{other} is not a positive integer (bytes)"),
            )),
        }
    }

    /// Every `[tables.NAME]` (at least one), a table without its own
    /// `max-task-bytes` taking the job's.
    fn sql_tables(
        &self,
        raw: toml::Table,
        plugins: &BTreeMap<String, PluginSpec>,
        job_max_task_bytes: Option<u64>,
        max_parallelism: u32,
    ) -> Result<Vec<TableDecl>, ConfigError> {
        if raw.is_empty() {
            return Err(self.invalid("tables", "a SQL job declares its tables as [tables.NAME]"));
        }
        let mut tables = Vec::new();
        for (name, value) in raw {
            let mut t = self.table(&name, value, plugins)?;
            if t.max_task_bytes.is_none() {
                t.max_task_bytes = job_max_task_bytes;
            }
            // A scan sized by input has `max-parallelism` tasks: enough
            // that each holds about `max-task-bytes`; the tasks that find
            // no split left finish empty (docs/sql.md).
            if t.max_task_bytes.is_some() {
                t.scan_tasks = Some(max_parallelism);
            }
            tables.push(t);
        }
        Ok(tables)
    }

    /// `[sink]`: the sink of the last stage (its columns left empty, the
    /// stage's own go in) and the delay of that stage's records.
    fn sql_sink(&self, sink: Option<toml::Value>) -> Result<(SinkSpec, Duration), ConfigError> {
        let sink_value =
            sink.ok_or_else(|| self.invalid("sink", "a SQL job needs a [sink] (path and format)"))?;
        let rs: RawSink = self.typed("sink", sink_value)?;
        let (dir, objects) = self.sink_path("sink.path", &rs.path)?;
        let format = self.sql_sink_format(&rs.format, rs.header, rs.delimiter)?;
        let final_delay = match rs.record_delay_us {
            None => Duration::ZERO,
            Some(us) if us <= 10_000_000 => Duration::from_micros(us),
            Some(us) => {
                return Err(self.invalid(
                    "sink.record-delay-us",
                    format!("{us} is not in 0..=10000000"),
                ));
            }
        };
        let spec = SinkSpec {
            dir,
            format,
            columns: Vec::new(),
            overwrite: rs.overwrite,
            objects,
        };
        Ok((spec, final_delay))
    }

    /// `sink.format`: `csv` (with its `header` and `delimiter`) or `parquet`
    /// (without them).
    fn sql_sink_format(
        &self,
        format: &str,
        header: Option<bool>,
        delimiter: Option<String>,
    ) -> Result<SinkFormat, ConfigError> {
        match format {
            "csv" => Ok(SinkFormat::Csv {
                header: header.unwrap_or(true),
                delimiter: self.delimiter("sink.delimiter", delimiter)?,
            }),
            "parquet" => {
                if header.is_some() || delimiter.is_some() {
                    return Err(self.invalid(
                        "sink.format",
                        "`header` and `delimiter` are for `csv`, not `parquet`",
                    ));
                }
                Ok(SinkFormat::Parquet)
            }
            other => Err(self.invalid(
                "sink.format",
                format!("unknown format `{other}`, expected `csv` or `parquet`"),
            )),
        }
    }

    /// The declaration of the table a source stage scans (none for
    /// another stage).
    fn stage_table<'t>(
        &self,
        field: &str,
        table: Option<&String>,
        tables: &'t [TableDecl],
    ) -> Result<Option<&'t TableDecl>, ConfigError> {
        match table {
            Some(t) => {
                Ok(Some(tables.iter().find(|d| &d.name == t).ok_or_else(
                    || self.invalid(field, format!("no table `{t}`")),
                )?))
            }
            None => Ok(None),
        }
    }

    /// Whether a stage gets `auto` parallelism (with `downstream-parallelism
    /// = "auto"`): one fed by hash exchanges (and possibly broadcast ones),
    /// none forward, that the planner made parallel. Its plan reads
    /// whatever subpartitions a task is given (docs/sql.md, "auto
    /// parallelism").
    fn stage_is_auto(st: &PlannedStage) -> bool {
        st.parallelism > 1
            && st
                .inputs
                .iter()
                .any(|e| e.pattern == crate::graph::DistributionPattern::Hash)
            && st
                .inputs
                .iter()
                .all(|e| e.pattern != crate::graph::DistributionPattern::Forward)
    }

    /// The edges into stage `i`, each key named after the columns of the
    /// stage it comes from (among `vertices`, the stages before it).
    fn stage_edges(i: usize, st: &PlannedStage, vertices: &[JobVertex]) -> Vec<JobEdge> {
        let mut edges = Vec::new();
        for input in &st.inputs {
            let names = &vertices
                .get(input.from)
                .map(|v: &JobVertex| v.output_columns.clone())
                .unwrap_or_default();
            edges.push(JobEdge {
                from: input.from,
                to: i,
                pattern: input.pattern,
                key_names: input.key.iter().map(|&k| names[k].clone()).collect(),
                key: input.key.clone(),
            });
        }
        edges
    }

    /// One `[tables.NAME]`.
    fn table(
        &self,
        name: &str,
        value: toml::Value,
        plugins: &BTreeMap<String, PluginSpec>,
    ) -> Result<TableDecl, ConfigError> {
        let field = format!("tables.{name}");
        if !name.starts_with(|c: char| c.is_ascii_lowercase())
            || !name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        {
            return Err(self.invalid(
                &field,
                "a table name starts with a lower-case letter and uses only lower-case letters, digits and `_`",
            ));
        }
        let mut rt: RawTable = self.typed(&field, value)?;
        let partition_columns = std::mem::take(&mut rt.partition_columns);
        match plugins.get(&rt.plugin) {
            None => {
                return Err(self.invalid(
                    format!("{field}.plugin"),
                    format!("no plugin named `{}` under [plugins]", rt.plugin),
                ));
            }
            Some(p) if p.kind != PluginKind::SplitEnumerator => {
                return Err(self.invalid(
                    format!("{field}.plugin"),
                    format!("plugin `{}` is not a split-enumerator", rt.plugin),
                ));
            }
            Some(_) => {}
        }
        let format_name = match rt.format {
            toml::Value::String(f) => f,
            toml::Value::Table(t) => {
                if rt.header.is_some() || rt.delimiter.is_some() {
                    return Err(self.invalid(
                        format!("{field}.format"),
                        "`header` and `delimiter` are for `csv`, not a reader plugin",
                    ));
                }
                let format = self.reader_format(&field, t, plugins)?;
                return self
                    .table_rest(
                        name,
                        &field,
                        rt.plugin,
                        format,
                        rt.schema,
                        rt.max_task_bytes,
                    )
                    .and_then(|decl| self.with_partitions(&field, decl, partition_columns));
            }
            other => {
                return Err(self.invalid(
                    format!("{field}.format"),
                    format!(
                        "{other} is neither `csv`, `parquet` nor a reader table `{{ reader = \"PLUGIN\" }}`"
                    ),
                ));
            }
        };
        let format = match format_name.as_str() {
            "csv" => TableFormat::Csv {
                header: rt.header.unwrap_or(false),
                delimiter: self.delimiter(&format!("{field}.delimiter"), rt.delimiter)?,
            },
            "parquet" => {
                if rt.header.is_some() || rt.delimiter.is_some() {
                    return Err(self.invalid(
                        format!("{field}.format"),
                        "`header` and `delimiter` are for `csv`, not `parquet`",
                    ));
                }
                TableFormat::Parquet
            }
            other => {
                return Err(self.invalid(
                    format!("{field}.format"),
                    format!(
                        "unknown format `{other}`, expected `csv`, `parquet` or `{{ reader = \"PLUGIN\" }}`"
                    ),
                ));
            }
        };
        self.table_rest(
            name,
            &field,
            rt.plugin,
            format,
            rt.schema,
            rt.max_task_bytes,
        )
        .and_then(|decl| self.with_partitions(&field, decl, partition_columns))
    }

    /// The rest of one `[tables.NAME]` once its format is known: the
    /// schema and `max-task-bytes`.
    fn table_rest(
        &self,
        name: &str,
        field: &str,
        plugin: String,
        format: TableFormat,
        schema: toml::Table,
        max_task_bytes: Option<toml::Value>,
    ) -> Result<TableDecl, ConfigError> {
        if schema.is_empty() {
            return Err(self.invalid(
                format!("{field}.schema"),
                "needs the columns and their types, e.g. `schema = { l_orderkey = \"bigint\" }`",
            ));
        }
        let mut columns = Vec::new();
        for (col, ty) in schema {
            let cf = format!("{field}.schema.{col}");
            let toml::Value::String(ty) = ty else {
                return Err(self.invalid(cf, "a type is a string, e.g. \"decimal(15,2)\""));
            };
            let t = SqlType::parse(&col, &ty).map_err(|e| self.invalid(&cf, e.to_string()))?;
            columns.push((col, t));
        }
        let max_task_bytes =
            self.max_task_bytes(&format!("{field}.max-task-bytes"), max_task_bytes)?;
        Ok(TableDecl {
            name: name.to_string(),
            plugin,
            format,
            columns,
            max_task_bytes,
            scan_tasks: None,
            partition_columns: Vec::new(),
        })
    }

    /// `decl` with its `partition-columns` (`raw_partitions`): each name
    /// letters, digits and `_`, not a column of `schema`, not listed twice;
    /// each type one [`SqlType::parse`] reads.
    fn with_partitions(
        &self,
        field: &str,
        mut decl: TableDecl,
        raw_partitions: Vec<super::raw::RawPartitionColumn>,
    ) -> Result<TableDecl, ConfigError> {
        let columns = &decl.columns;
        let mut partition_columns: Vec<(String, SqlType)> = Vec::new();
        for (k, p) in raw_partitions.into_iter().enumerate() {
            let pf = format!("{field}.partition-columns[{k}]");
            // The name is the `key` of folders `key=value`: no `/`, no
            // `=`, nothing a folder name cannot hold.
            if p.name.is_empty()
                || !p
                    .name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_')
            {
                return Err(self.invalid(
                    format!("{pf}.name"),
                    format!(
                        "`{}` is not a partition column name: letters, digits and `_` (the `key` of folders `key=value`)",
                        p.name
                    ),
                ));
            }
            if columns.iter().any(|(c, _)| *c == p.name) {
                return Err(self.invalid(
                    format!("{pf}.name"),
                    format!(
                        "`{}` is also a column of `schema`: a partition column's values come from the folder names, not the files",
                        p.name
                    ),
                ));
            }
            if partition_columns.iter().any(|(c, _)| *c == p.name) {
                return Err(self.invalid(
                    format!("{pf}.name"),
                    format!("`{}` is listed twice", p.name),
                ));
            }
            let t = SqlType::parse(&p.name, &p.ty)
                .map_err(|e| self.invalid(format!("{pf}.type"), e.to_string()))?;
            partition_columns.push((p.name, t));
        }
        decl.partition_columns = partition_columns;
        Ok(decl)
    }
}

/// The `Line: L, Column: C` of a DataFusion parser message.
fn query_line_column(message: &str) -> Option<(usize, usize)> {
    let at = message.rfind("Line: ")?;
    let rest = &message[at + "Line: ".len()..];
    let (line, rest) = rest.split_once(", Column: ")?;
    let column: String = rest.chars().take_while(char::is_ascii_digit).collect();
    Some((line.trim().parse().ok()?, column.parse().ok()?))
}

/// Where the text of the job file's `sql = ...` value starts: its line
/// (from 1) and the number of characters before it on that line. A
/// multi-line string's line break right after `"""` is not part of the
/// value (TOML), so the query then starts on the next line.
fn inline_sql_start(job_file: &str) -> Option<(usize, usize)> {
    for (i, line) in job_file.lines().enumerate() {
        let Some(rest) = line.trim_start().strip_prefix("sql") else {
            continue;
        };
        let Some(value) = rest.trim_start().strip_prefix('=') else {
            continue;
        };
        let value = value.trim_start();
        for quote in [r#"""""#, "'''", "\"", "'"] {
            if let Some(after) = value.strip_prefix(quote) {
                if quote.len() == 3 && after.trim().is_empty() {
                    return Some((i + 2, 0));
                }
                return Some((i + 1, line.len() - after.len()));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::{inline_sql_start, query_line_column};

    #[test]
    fn the_query_place_maps_to_the_job_file() {
        assert_eq!(
            query_line_column("sql parser error: Expected: x, found: ) at Line: 2, Column: 23"),
            Some((2, 23))
        );
        assert_eq!(query_line_column("no place here"), None);
        let job = "[job]\nname = \"q\"\nsql = \"\"\"\nSELECT 1\n\"\"\"\n";
        assert_eq!(inline_sql_start(job), Some((4, 0)));
        let job = "[job]\nsql = \"SELECT )\"\n";
        assert_eq!(inline_sql_start(job), Some((2, 7)));
        let job = "[job]\nsql-file = \"q.sql\"\n";
        assert_eq!(inline_sql_start(job), None);
    }
}
