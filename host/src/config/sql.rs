//! The SQL form of a job file (docs/sql.md): `[job] sql` or `sql-file`,
//! `[tables.NAME]` and `[sink]`, planned by `crate::sql` into the same job
//! graph the TOML form describes (a job vertex per stage, an edge per
//! exchange).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use super::raw::{RawSink, RawSql, RawTable};
use super::validate::{SinkField, Validator};
use super::{ConfigError, DEFAULT_BYTES_PER_TASK, DEFAULT_MAX_PARALLELISM, SqlSpec};
use crate::graph::{JobEdge, JobGraph, JobVertex, Operator, Parallelism, SinkFormat, SinkSpec};
use crate::plugin::{PluginKind, PluginSpec};
use crate::sql::{SqlType, TableDecl, TableFormat};

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
        let (text, sql_file) = match (raw.sql, raw.sql_file) {
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
        let parallelism = match raw.parallelism {
            None => DEFAULT_SQL_PARALLELISM,
            Some(n) if (1..=4096).contains(&n) => n as u32,
            Some(n) => {
                return Err(self.invalid("job.parallelism", format!("{n} is not in 1..=4096")));
            }
        };
        let job_max_task_bytes = self.max_task_bytes("job.max-task-bytes", raw.max_task_bytes)?;
        let downstream_auto = match raw.downstream_parallelism {
            None => false,
            Some(toml::Value::String(s)) if s == "auto" => true,
            Some(other) => {
                return Err(self.invalid(
                    "job.downstream-parallelism",
                    format!("{other} is not \"auto\" (leave it out for `parallelism` tasks)"),
                ));
            }
        };
        let max_parallelism = match raw.max_parallelism {
            None => DEFAULT_MAX_PARALLELISM,
            Some(toml::Value::Integer(n)) if (1..=4096).contains(&n) => n as u32,
            Some(other) => {
                return Err(self.invalid(
                    "job.max-parallelism",
                    format!("{other} is not an integer in 1..=4096"),
                ));
            }
        };
        let bytes_per_task = match raw.bytes_per_task {
            None => DEFAULT_BYTES_PER_TASK,
            Some(toml::Value::Integer(n)) if n >= 1 => n as u64,
            Some(other) => {
                return Err(self.invalid(
                    "job.bytes-per-task",
                    format!("{other} is not a positive integer (bytes)"),
                ));
            }
        };
        if raw.tables.is_empty() {
            return Err(self.invalid("tables", "a SQL job declares its tables as [tables.NAME]"));
        }
        let mut tables = Vec::new();
        for (name, value) in raw.tables {
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
        let sink_value = raw
            .sink
            .ok_or_else(|| self.invalid("sink", "a SQL job needs a [sink] (path and format)"))?;
        let rs: RawSink = self.typed("sink", sink_value)?;
        let (dir, objects) = self.sink_path("sink.path", &rs.path)?;
        let format = match rs.format.as_str() {
            "csv" => SinkFormat::Csv {
                header: rs.header.unwrap_or(true),
                delimiter: self.delimiter("sink.delimiter", rs.delimiter)?,
            },
            "parquet" => {
                if rs.header.is_some() || rs.delimiter.is_some() {
                    return Err(self.invalid(
                        "sink.format",
                        "`header` and `delimiter` are for `csv`, not `parquet`",
                    ));
                }
                SinkFormat::Parquet
            }
            other => {
                return Err(self.invalid(
                    "sink.format",
                    format!("unknown format `{other}`, expected `csv` or `parquet`"),
                ));
            }
        };
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
        let (functions, function_specs) = self.functions(raw.functions)?;
        let stages =
            crate::sql::plan_query_with(&text, &tables, &functions, parallelism).map_err(|e| {
                self.invalid(field, self.sql_place(&e.to_string(), sql_file.as_deref()))
            })?;
        let n = stages.len();
        let mut vertices = Vec::with_capacity(n);
        let mut edges = Vec::new();
        for (i, st) in stages.into_iter().enumerate() {
            let decl = match &st.table {
                Some(t) => Some(
                    tables
                        .iter()
                        .find(|d| &d.name == t)
                        .ok_or_else(|| self.invalid(field, format!("no table `{t}`")))?,
                ),
                None => None,
            };
            let source = decl.map(|d| d.plugin.clone());
            // `auto`: a stage fed by hash exchanges (and possibly
            // broadcast ones), none forward, that the planner made
            // parallel. Its plan reads whatever subpartitions a task is
            // given (docs/sql.md, "auto parallelism").
            let auto = downstream_auto
                && st.parallelism > 1
                && st
                    .inputs
                    .iter()
                    .any(|e| e.pattern == crate::graph::DistributionPattern::Hash)
                && st
                    .inputs
                    .iter()
                    .all(|e| e.pattern != crate::graph::DistributionPattern::Forward);
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
            let sink = (i + 1 == n).then(|| SinkSpec {
                dir: dir.clone(),
                format: format.clone(),
                columns: st.output_columns.clone(),
                overwrite: rs.overwrite,
                objects: objects.clone(),
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
                source,
                operators: vec![Operator::Stage(st.plan)],
                sink,
                record_delay: if i + 1 == n {
                    final_delay
                } else {
                    Duration::ZERO
                },
                output_columns: st.output_columns,
            });
        }
        self.sinks.borrow_mut().push(SinkField {
            vertex: n - 1,
            field: "sink".to_string(),
            overwrite: rs.overwrite,
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
