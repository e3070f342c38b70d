//! The SQL form of a job file (docs/sql.md): `[job] sql` or `sql-file`,
//! `[tables.NAME]` and `[sink]`, planned by `crate::sql` into the same job
//! graph the TOML form describes (a job vertex per stage, an edge per
//! exchange).

use std::collections::BTreeMap;
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
    /// Checks the SQL form, plans the query and builds its job graph.
    pub(super) fn sql_graph(
        &self,
        raw: RawSql,
        plugins: &BTreeMap<String, PluginSpec>,
    ) -> Result<(JobGraph, SqlSpec), ConfigError> {
        let text = match (raw.sql, raw.sql_file) {
            (Some(_), Some(_)) => {
                return Err(self.invalid("job.sql-file", "give `sql` or `sql-file`, not both"));
            }
            (Some(t), None) => t,
            (None, Some(f)) => {
                let path = self.resolve_path("job.sql-file", &f)?;
                crate::files::read_job_text(&path).map_err(|e| {
                    self.invalid(
                        "job.sql-file",
                        format!("cannot read {}: {e}", path.display()),
                    )
                })?
            }
            (None, None) => unreachable!("called for a SQL job"),
        };
        let field = "job.sql";
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
        if raw.tables.is_empty() {
            return Err(self.invalid("tables", "a SQL job declares its tables as [tables.NAME]"));
        }
        let mut tables = Vec::new();
        for (name, value) in raw.tables {
            tables.push(self.table(&name, value, plugins)?);
        }
        let sink_value = raw
            .sink
            .ok_or_else(|| self.invalid("sink", "a SQL job needs a [sink] (path and format)"))?;
        let rs: RawSink = self.typed("sink", sink_value)?;
        let dir = self.resolve_path("sink.path", &rs.path)?;
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
        let functions = self.functions(raw.functions)?;
        let stages = crate::sql::plan_query_with(&text, &tables, &functions, parallelism)
            .map_err(|e| self.invalid(field, e.to_string()))?;
        let n = stages.len();
        let mut vertices = Vec::with_capacity(n);
        let mut edges = Vec::new();
        for (i, st) in stages.into_iter().enumerate() {
            let source = match &st.table {
                Some(t) => Some(
                    tables
                        .iter()
                        .find(|d| &d.name == t)
                        .map(|d| d.plugin.clone())
                        .ok_or_else(|| self.invalid(field, format!("no table `{t}`")))?,
                ),
                None => None,
            };
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
            });
            vertices.push(JobVertex {
                id: format!("stage{i}"),
                parallelism: Parallelism::Fixed(st.parallelism),
                max_parallelism: DEFAULT_MAX_PARALLELISM,
                bytes_per_task: DEFAULT_BYTES_PER_TASK,
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
                functions,
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
        let rt: RawTable = self.typed(&field, value)?;
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
        let format = match rt.format.as_str() {
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
                    format!("unknown format `{other}`, expected `csv` or `parquet`"),
                ));
            }
        };
        if rt.schema.is_empty() {
            return Err(self.invalid(
                format!("{field}.schema"),
                "needs the columns and their types, e.g. `schema = { l_orderkey = \"bigint\" }`",
            ));
        }
        let mut columns = Vec::new();
        for (col, ty) in rt.schema {
            let cf = format!("{field}.schema.{col}");
            let toml::Value::String(ty) = ty else {
                return Err(self.invalid(cf, "a type is a string, e.g. \"decimal(15,2)\""));
            };
            let t = SqlType::parse(&col, &ty).map_err(|e| self.invalid(&cf, e.to_string()))?;
            columns.push((col, t));
        }
        Ok(TableDecl {
            name: name.to_string(),
            plugin: rt.plugin,
            format,
            columns,
        })
    }
}
