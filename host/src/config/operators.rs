//! Validation of operator chains: each operator's columns resolved against
//! the columns before it.

use super::ConfigError;
use super::raw::*;
use super::validate::Validator;
use crate::graph::{AggFunction, AggMode, Aggregate, CmpOp, Operator, SinkFormat, SinkSpec};

/// What one operator adds to a chain.
enum Step {
    /// An operator, with the columns after it when it changes them.
    Op(Operator, Option<Vec<String>>),
    /// The chain's sink, from a write operator.
    Sink(SinkSpec),
}

impl Validator {
    #[expect(
        clippy::type_complexity,
        reason = "private helper returning the three parts of a chain"
    )]
    pub(super) fn operators(
        &self,
        vi: usize,
        raw: Vec<toml::Value>,
        input: Option<Vec<String>>,
        is_sink: bool,
    ) -> Result<(Vec<Operator>, Option<SinkSpec>, Vec<String>), ConfigError> {
        let is_source = input.is_none();
        let mut cols: Option<Vec<String>> = input;
        let mut ops = Vec::new();
        let mut sink = None;
        let n = raw.len();
        for (j, value) in raw.into_iter().enumerate() {
            let field = format!("vertices[{vi}].operators[{j}]");
            let rop: RawOperator = self.typed(&field, value)?;
            self.check_operator_place(&field, &rop, is_source && j == 0, is_sink && j + 1 == n)?;
            let current = cols.clone().unwrap_or_default();
            match self.operator(vi, &field, rop, &current)? {
                Step::Op(op, out) => {
                    ops.push(op);
                    if out.is_some() {
                        cols = out;
                    }
                }
                Step::Sink(spec) => sink = Some(spec),
            }
        }
        if is_source && ops.is_empty() {
            return Err(self.invalid(
                format!("vertices[{vi}].operators"),
                "a source vertex must start with `read-lines`, `read-csv` or `read-parquet`",
            ));
        }
        if is_sink && sink.is_none() {
            return Err(self.invalid(
                format!("vertices[{vi}].operators"),
                "a vertex without outgoing edges must end with `write-csv` or `write-text`",
            ));
        }
        Ok((ops, sink, cols.unwrap_or_default()))
    }

    /// A read operator comes first in a source vertex and only there
    /// (`first_of_source`); a write operator only last in a vertex without
    /// outgoing edges (`last_of_sink`).
    fn check_operator_place(
        &self,
        field: &str,
        rop: &RawOperator,
        first_of_source: bool,
        last_of_sink: bool,
    ) -> Result<(), ConfigError> {
        let is_read = matches!(
            rop,
            RawOperator::ReadLines {}
                | RawOperator::ReadCsv { .. }
                | RawOperator::ReadParquet { .. }
        );
        if is_read != first_of_source {
            return Err(self.invalid(
                format!("{field}.op"),
                if is_read {
                    "a read operator must be the first operator of a source vertex"
                } else {
                    "a source vertex must start with `read-lines`, `read-csv` or `read-parquet`"
                },
            ));
        }
        let is_write = matches!(
            rop,
            RawOperator::WriteCsv { .. } | RawOperator::WriteText { .. }
        );
        if is_write && !last_of_sink {
            return Err(self.invalid(
                format!("{field}.op"),
                "a write operator must be the last operator of a vertex without outgoing edges",
            ));
        }
        Ok(())
    }

    /// The operator at `field` of vertex `vi`, reading columns `current`.
    fn operator(
        &self,
        vi: usize,
        field: &str,
        rop: RawOperator,
        current: &[String],
    ) -> Result<Step, ConfigError> {
        Ok(match rop {
            RawOperator::ReadLines {} => {
                Step::Op(Operator::ReadLines, Some(vec!["line".to_string()]))
            }
            RawOperator::ReadCsv {
                columns,
                delimiter,
                skip_header,
            } => {
                let op = self.read_csv(field, &columns, delimiter, skip_header)?;
                Step::Op(op, Some(columns))
            }
            RawOperator::ReadParquet { columns } => {
                let op = self.read_parquet(field, &columns)?;
                Step::Op(op, Some(columns))
            }
            RawOperator::Tokenize {
                column,
                output,
                lowercase,
            } => {
                let c = self.column_index(field, "column", current, &column)?;
                let op = Operator::Tokenize {
                    column: c,
                    lowercase,
                };
                Step::Op(op, Some(vec![output]))
            }
            RawOperator::Filter {
                column,
                cmp,
                value,
                value_type,
            } => {
                let c = self.column_index(field, "column", current, &column)?;
                Step::Op(self.filter(field, c, cmp, value, value_type)?, None)
            }
            RawOperator::Project { columns } => {
                let mut idx = Vec::new();
                for name in &columns {
                    idx.push(self.column_index(field, "columns", current, name)?);
                }
                Step::Op(Operator::Project { columns: idx }, Some(columns))
            }
            RawOperator::Aggregate {
                key,
                aggregates,
                mode,
                decimals,
            } => {
                let (op, out) = self.aggregate(field, current, key, aggregates, mode, decimals)?;
                Step::Op(op, Some(out))
            }
            RawOperator::WriteCsv {
                path,
                header,
                delimiter,
                overwrite,
            } => {
                let delimiter = self.delimiter(&format!("{field}.delimiter"), delimiter)?;
                let format = SinkFormat::Csv { header, delimiter };
                Step::Sink(self.write_sink(vi, field, &path, format, overwrite, current)?)
            }
            RawOperator::WriteText {
                path,
                separator,
                overwrite,
            } => {
                let format = SinkFormat::Text {
                    separator: separator.unwrap_or_else(|| " ".to_string()),
                };
                Step::Sink(self.write_sink(vi, field, &path, format, overwrite, current)?)
            }
        })
    }

    /// The index of column `name` among `current`; a missing column is
    /// refused naming `{field}.{sub}` and the columns there are.
    fn column_index(
        &self,
        field: &str,
        sub: &str,
        current: &[String],
        name: &str,
    ) -> Result<usize, ConfigError> {
        current.iter().position(|c| c == name).ok_or_else(|| {
            self.invalid(
                format!("{field}.{sub}"),
                format!(
                    "`{name}` is not a column here (columns: {})",
                    current.join(", ")
                ),
            )
        })
    }

    /// A `read-csv` operator of at least one column.
    fn read_csv(
        &self,
        field: &str,
        columns: &[String],
        delimiter: Option<String>,
        skip_header: bool,
    ) -> Result<Operator, ConfigError> {
        let delimiter = self.delimiter(&format!("{field}.delimiter"), delimiter)?;
        if columns.is_empty() {
            return Err(self.invalid(format!("{field}.columns"), "needs at least one column"));
        }
        Ok(Operator::ReadCsv {
            columns: columns.len(),
            delimiter,
            skip_header,
        })
    }

    /// A `read-parquet` operator of at least one column, each named once.
    fn read_parquet(&self, field: &str, columns: &[String]) -> Result<Operator, ConfigError> {
        if columns.is_empty() {
            return Err(self.invalid(format!("{field}.columns"), "needs at least one column"));
        }
        for (k, name) in columns.iter().enumerate() {
            if name.is_empty() {
                return Err(self.invalid(format!("{field}.columns[{k}]"), "the name is empty"));
            }
            if columns[..k].contains(name) {
                return Err(self.invalid(
                    format!("{field}.columns[{k}]"),
                    format!("`{name}` is listed twice"),
                ));
            }
        }
        Ok(Operator::ReadParquet {
            columns: columns.to_vec(),
        })
    }

    /// A `filter` operator on column index `column`: its comparison, and
    /// its value as text and, for `type = "number"`, as a number.
    fn filter(
        &self,
        field: &str,
        column: usize,
        cmp: String,
        value: toml::Value,
        value_type: Option<String>,
    ) -> Result<Operator, ConfigError> {
        let op: CmpOp = self.choice::<RawCmp>(&format!("{field}.cmp"), cmp)?.into();
        let numeric = match value_type {
            None => false,
            Some(t) => {
                self.choice::<RawValueType>(&format!("{field}.type"), t)? == RawValueType::Number
            }
        };
        let text = match value {
            toml::Value::String(s) => s,
            toml::Value::Integer(i) => i.to_string(),
            toml::Value::Float(f) => f.to_string(),
            _ => {
                return Err(self.invalid(format!("{field}.value"), "must be a string or a number"));
            }
        };
        let number = if numeric {
            Some(crate::value::Decimal::parse(&text).ok_or_else(|| {
                self.invalid(
                    format!("{field}.value"),
                    format!("`{text}` is not a number"),
                )
            })?)
        } else {
            None
        };
        Ok(Operator::Filter {
            column,
            cmp: op,
            value: text,
            number,
        })
    }

    /// The sink of a write operator at `field` of vertex `vi`, noted for the
    /// path checks, writing columns `current` in `format` under `path`.
    fn write_sink(
        &self,
        vi: usize,
        field: &str,
        path: &str,
        format: SinkFormat,
        overwrite: bool,
        current: &[String],
    ) -> Result<SinkSpec, ConfigError> {
        self.note_sink(vi, field, overwrite);
        let (dir, objects) = self.sink_path(&format!("{field}.path"), path)?;
        Ok(SinkSpec {
            dir,
            format,
            columns: current.to_vec(),
            overwrite,
            objects,
        })
    }

    fn note_sink(&self, vertex: usize, field: &str, overwrite: bool) {
        self.sinks.borrow_mut().push(super::validate::SinkField {
            vertex,
            field: field.to_string(),
            overwrite,
        });
    }

    pub(super) fn delimiter(&self, field: &str, d: Option<String>) -> Result<u8, ConfigError> {
        match d.as_deref() {
            None => Ok(b','),
            Some(s) if s.len() == 1 && s.as_bytes()[0] != b'"' && s.as_bytes()[0] != b'\n' => {
                Ok(s.as_bytes()[0])
            }
            Some(s) => Err(self.invalid(
                field,
                format!("`{s}` is not a single ASCII character other than a quote or newline"),
            )),
        }
    }

    pub(super) fn aggregate(
        &self,
        field: &str,
        current: &[String],
        key: Vec<String>,
        aggregates: Vec<RawAggregate>,
        mode: Option<String>,
        decimals: Option<u32>,
    ) -> Result<(Operator, Vec<String>), ConfigError> {
        let mode: AggMode = match mode {
            None => AggMode::Complete,
            Some(m) => self
                .choice::<RawAggMode>(&format!("{field}.mode"), m)?
                .into(),
        };
        let decimals = decimals.unwrap_or(2);
        if decimals > 6 {
            return Err(self.invalid(format!("{field}.decimals"), "at most 6"));
        }
        if aggregates.is_empty() {
            return Err(self.invalid(
                format!("{field}.aggregates"),
                "needs at least one aggregate",
            ));
        }
        let find = |name: &str, sub: String| -> Result<usize, ConfigError> {
            current.iter().position(|c| c == name).ok_or_else(|| {
                self.invalid(
                    sub,
                    format!(
                        "`{name}` is not a column here (columns: {})",
                        current.join(", ")
                    ),
                )
            })
        };
        let mut key_idx = Vec::new();
        for k in &key {
            key_idx.push(find(k, format!("{field}.key"))?);
        }
        let mut out = key.clone();
        let mut aggs = Vec::new();
        for (a, ra) in aggregates.into_iter().enumerate() {
            let afield = format!("{field}.aggregates[{a}]");
            let function: AggFunction = self
                .choice::<RawAggFunction>(&format!("{afield}.fn"), ra.function.clone())?
                .into();
            // Input columns: in final mode the partial state columns, named after the output.
            let inputs = if mode == AggMode::Final {
                let names = Aggregate::state_columns(function, &ra.output);
                let mut v = Vec::new();
                for n in names {
                    v.push(find(&n, format!("{afield}.as"))?);
                }
                v
            } else if function == AggFunction::Count {
                if ra.column.is_some() {
                    return Err(self.invalid(format!("{afield}.column"), "count takes no column"));
                }
                Vec::new()
            } else {
                let c = ra.column.as_deref().ok_or_else(|| {
                    self.invalid(
                        format!("{afield}.column"),
                        format!("{} needs a column", ra.function),
                    )
                })?;
                vec![find(c, format!("{afield}.column"))?]
            };
            if out.contains(&ra.output) {
                return Err(self.invalid(
                    format!("{afield}.as"),
                    format!("duplicate output column `{}`", ra.output),
                ));
            }
            if mode == AggMode::Partial {
                out.extend(Aggregate::state_columns(function, &ra.output));
            } else {
                out.push(ra.output.clone());
            }
            aggs.push(Aggregate {
                function,
                inputs,
                output: ra.output,
            });
        }
        Ok((
            Operator::Aggregate {
                key: key_idx,
                aggregates: aggs,
                mode,
                decimals,
            },
            out,
        ))
    }
}
