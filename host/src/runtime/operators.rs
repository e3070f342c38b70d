//! The built-in operator chain: tokenize, filter, project and aggregate,
//! push-based (each row is pushed through the stages; an aggregation keeps
//! rows until its input ends, then pushes its groups on), ending in a
//! [`RowSink`] (result partitions or a sink's staging file).
//!
//! Reading (`read-lines`, `read-csv`) happens before the chain, in the
//! source reader; this module has the CSV line parser it uses.

use std::collections::HashMap;

use super::{Decimal, TaskError};
use crate::graph::{AggFunction, AggMode, Aggregate, Operator};

/// What a finished chain reports: rows written and, for result partitions,
/// each outgoing edge's index with the bytes of each of its subpartitions.
pub type ChainOutput = (u64, Vec<(usize, Vec<u64>)>);

/// Where the chain's output rows go.
pub trait RowSink: Send {
    /// Takes one output row.
    ///
    /// # Errors
    ///
    /// [`TaskError`] if writing fails.
    fn write(&mut self, row: Vec<String>) -> Result<(), TaskError>;

    /// Flushes and makes the output durable; returns the rows written and,
    /// for result partitions, the bytes per subpartition of each edge.
    ///
    /// # Errors
    ///
    /// [`TaskError`] if flushing fails.
    fn finish(self: Box<Self>) -> Result<ChainOutput, TaskError>;
}

/// Accumulated state of one aggregate for one group.
#[derive(Debug, Clone)]
enum Acc {
    Count(i64),
    Sum(Decimal),
    Min(Decimal),
    Max(Decimal),
    Avg(Decimal, i64),
}

struct AggState {
    key: Vec<usize>,
    aggregates: Vec<Aggregate>,
    mode: AggMode,
    decimals: u32,
    groups: HashMap<Vec<String>, Vec<Acc>>,
    /// Key order of first appearance, so output is deterministic per input order.
    order: Vec<Vec<String>>,
}

enum Stage {
    Tokenize {
        column: usize,
        lowercase: bool,
    },
    Filter {
        column: usize,
        cmp: crate::graph::CmpOp,
        value: String,
        number: Option<Decimal>,
    },
    Project {
        columns: Vec<usize>,
    },
    Aggregate(Box<AggState>),
}

/// A compiled operator chain.
pub struct Chain {
    vertex: String,
    stages: Vec<Stage>,
    out: Box<dyn RowSink>,
}

impl Chain {
    /// Compiles `operators` (read operators are skipped: the source reader
    /// applies them) in front of `out`.
    pub fn new(vertex: &str, operators: &[Operator], out: Box<dyn RowSink>) -> Self {
        let stages = operators
            .iter()
            .filter_map(|op| match op {
                Operator::ReadLines | Operator::ReadCsv { .. } | Operator::ReadParquet { .. } => {
                    None
                }
                Operator::Tokenize { column, lowercase } => Some(Stage::Tokenize {
                    column: *column,
                    lowercase: *lowercase,
                }),
                Operator::Filter {
                    column,
                    cmp,
                    value,
                    number,
                } => Some(Stage::Filter {
                    column: *column,
                    cmp: *cmp,
                    value: value.clone(),
                    number: *number,
                }),
                Operator::Project { columns } => Some(Stage::Project {
                    columns: columns.clone(),
                }),
                Operator::Aggregate {
                    key,
                    aggregates,
                    mode,
                    decimals,
                } => Some(Stage::Aggregate(Box::new(AggState {
                    key: key.clone(),
                    aggregates: aggregates.clone(),
                    mode: *mode,
                    decimals: *decimals,
                    groups: HashMap::new(),
                    order: Vec::new(),
                }))),
            })
            .collect();
        Self {
            vertex: vertex.to_string(),
            stages,
            out,
        }
    }

    /// Pushes one input row through the chain.
    ///
    /// # Errors
    ///
    /// [`TaskError::Data`] for a value an operator cannot use; errors of the sink.
    pub fn push(&mut self, row: Vec<String>) -> Result<(), TaskError> {
        self.push_from(0, row)
    }

    fn data(&self, detail: String) -> TaskError {
        TaskError::Data {
            vertex: self.vertex.clone(),
            detail,
        }
    }

    fn push_from(&mut self, from: usize, mut row: Vec<String>) -> Result<(), TaskError> {
        let mut i = from;
        while i < self.stages.len() {
            match &mut self.stages[i] {
                Stage::Tokenize { column, lowercase } => {
                    let (column, lowercase) = (*column, *lowercase);
                    let text = std::mem::take(&mut row[column]);
                    for word in text
                        .split(|c: char| !c.is_alphanumeric())
                        .filter(|w| !w.is_empty())
                    {
                        let w = if lowercase {
                            word.to_lowercase()
                        } else {
                            word.to_string()
                        };
                        self.push_from(i + 1, vec![w])?;
                    }
                    return Ok(());
                }
                Stage::Filter {
                    column,
                    cmp,
                    value,
                    number,
                } => {
                    let field = &row[*column];
                    let ordering = match number {
                        Some(n) => match Decimal::parse(field) {
                            Some(v) => v.cmp(n),
                            None => {
                                let detail = format!("filter: `{field}` is not a number");
                                return Err(self.data(detail));
                            }
                        },
                        None => field.as_str().cmp(value.as_str()),
                    };
                    if !cmp.holds(ordering) {
                        return Ok(());
                    }
                }
                Stage::Project { columns } => {
                    row = columns
                        .iter()
                        .map(|&c| std::mem::take(&mut row[c]))
                        .collect();
                }
                Stage::Aggregate(state) => {
                    if let Err(detail) = state.add(row) {
                        return Err(self.data(detail));
                    }
                    return Ok(());
                }
            }
            i += 1;
        }
        self.out.write(row)
    }

    /// Ends the input: each aggregation, in chain order, pushes its groups
    /// on; then the sink is finished.
    ///
    /// # Errors
    ///
    /// As [`Chain::push`], and errors of finishing the sink.
    pub fn finish(mut self) -> Result<ChainOutput, TaskError> {
        for i in 0..self.stages.len() {
            let rows = match &mut self.stages[i] {
                Stage::Aggregate(state) => state.drain(),
                _ => continue,
            };
            for row in rows {
                self.push_from(i + 1, row)?;
            }
        }
        self.out.finish()
    }
}

impl AggState {
    fn add(&mut self, row: Vec<String>) -> Result<(), String> {
        let key: Vec<String> = self.key.iter().map(|&k| row[k].clone()).collect();
        let accs = match self.groups.get_mut(&key) {
            Some(a) => a,
            None => {
                let init = self
                    .aggregates
                    .iter()
                    .map(|a| initial(a.function))
                    .collect();
                self.order.push(key.clone());
                self.groups.entry(key).or_insert(init)
            }
        };
        let num = |i: usize| -> Result<Decimal, String> {
            Decimal::parse(&row[i])
                .ok_or_else(|| format!("aggregate: `{}` is not a number", row[i]))
        };
        let int = |i: usize| -> Result<i64, String> {
            row[i]
                .parse::<i64>()
                .map_err(|_| format!("aggregate: `{}` is not a count", row[i]))
        };
        for (a, acc) in self.aggregates.iter().zip(accs.iter_mut()) {
            let fin = self.mode == AggMode::Final;
            match acc {
                Acc::Count(c) => *c += if fin { int(a.inputs[0])? } else { 1 },
                Acc::Sum(s) => *s = *s + num(a.inputs[0])?,
                Acc::Min(m) => *m = (*m).min(num(a.inputs[0])?),
                Acc::Max(m) => *m = (*m).max(num(a.inputs[0])?),
                Acc::Avg(s, c) => {
                    *s = *s + num(a.inputs[0])?;
                    *c += if fin { int(a.inputs[1])? } else { 1 };
                }
            }
        }
        Ok(())
    }

    fn drain(&mut self) -> Vec<Vec<String>> {
        let mut out = Vec::with_capacity(self.order.len());
        for key in std::mem::take(&mut self.order) {
            let Some(accs) = self.groups.remove(&key) else {
                continue;
            };
            let mut row = key;
            for acc in accs {
                match (self.mode, acc) {
                    (_, Acc::Count(c)) => row.push(c.to_string()),
                    (AggMode::Partial, Acc::Sum(v) | Acc::Min(v) | Acc::Max(v)) => {
                        row.push(v.to_string())
                    }
                    (AggMode::Partial, Acc::Avg(s, c)) => {
                        row.push(s.to_string());
                        row.push(c.to_string());
                    }
                    (_, Acc::Sum(v) | Acc::Min(v) | Acc::Max(v)) => {
                        row.push(v.format(self.decimals))
                    }
                    (_, Acc::Avg(s, c)) => row.push(s.format_div(c, self.decimals)),
                }
            }
            out.push(row);
        }
        out
    }
}

fn initial(f: AggFunction) -> Acc {
    match f {
        AggFunction::Count => Acc::Count(0),
        AggFunction::Sum => Acc::Sum(Decimal::ZERO),
        AggFunction::Min => {
            Acc::Min(Decimal::parse("999999999999999999999999").unwrap_or_default())
        }
        AggFunction::Max => {
            Acc::Max(Decimal::parse("-999999999999999999999999").unwrap_or_default())
        }
        AggFunction::Avg => Acc::Avg(Decimal::ZERO, 0),
    }
}

/// Splits CSV lines into fields with `csv-core` (RFC 4180 quoting:
/// `delimiter` separates fields; a field that starts with `"` runs to the
/// next lone `"`, and `""` inside it is one quote), one line at a time:
/// line breaks inside fields are not supported, since a split is cut into
/// lines first. A trailing `\r` is dropped.
///
/// One parser is reused for every line of a split, so the reader's state
/// machine is built once.
pub struct CsvLineParser {
    reader: csv_core::Reader,
    /// Field bytes of the line being parsed, unquoted.
    bytes: Vec<u8>,
    /// End offset in `bytes` of each field.
    ends: Vec<usize>,
}

impl CsvLineParser {
    /// A parser for lines whose fields are separated by `delimiter` (an
    /// ASCII byte other than a quote or a newline: the job file's rule).
    #[must_use]
    pub fn new(delimiter: u8) -> Self {
        Self {
            reader: csv_core::ReaderBuilder::new()
                .delimiter(delimiter)
                // Only `\n` ends a record: a `\r` inside a line is data.
                .terminator(csv_core::Terminator::Any(b'\n'))
                .build(),
            bytes: vec![0; 256],
            ends: vec![0; 16],
        }
    }

    /// Replaces `out` by the fields of `line` (one field, empty, for an
    /// empty line).
    pub fn parse(&mut self, line: &str, out: &mut Vec<String>) {
        out.clear();
        let line = line.strip_suffix('\r').unwrap_or(line);
        self.reader.reset();
        let mut input = line.as_bytes();
        let (mut nbytes, mut nends) = (0, 0);
        // The line, then the end of input, which completes the record.
        let mut at_end = false;
        loop {
            let (result, nin, nout, nend) =
                self.reader
                    .read_record(input, &mut self.bytes[nbytes..], &mut self.ends[nends..]);
            input = &input[nin..];
            nbytes += nout;
            nends += nend;
            match result {
                csv_core::ReadRecordResult::InputEmpty if !at_end => at_end = true,
                csv_core::ReadRecordResult::OutputFull => {
                    self.bytes.resize(self.bytes.len() * 2, 0);
                }
                csv_core::ReadRecordResult::OutputEndsFull => {
                    self.ends.resize(self.ends.len() * 2, 0);
                }
                csv_core::ReadRecordResult::InputEmpty
                | csv_core::ReadRecordResult::Record
                | csv_core::ReadRecordResult::End => break,
            }
        }
        if nends == 0 {
            // An empty line is a record of one empty field.
            out.push(String::new());
            return;
        }
        let mut start = 0;
        for &end in &self.ends[..nends] {
            // Only ASCII quotes are removed from a `&str`: still UTF-8.
            out.push(String::from_utf8_lossy(&self.bytes[start..end]).into_owned());
            start = end;
        }
    }
}

/// Writes one CSV field, quoting it if it holds the delimiter, a quote or a
/// line break.
pub fn write_csv_field(out: &mut String, field: &str, delimiter: u8) {
    let needs = field
        .bytes()
        .any(|c| c == delimiter || c == b'"' || c == b'\n' || c == b'\r');
    if needs {
        out.push('"');
        out.push_str(&field.replace('"', "\"\""));
        out.push('"');
    } else {
        out.push_str(field);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    fn csv(line: &str) -> Vec<String> {
        let mut v = Vec::new();
        CsvLineParser::new(b',').parse(line, &mut v);
        v
    }

    #[test]
    fn csv_lines_split_with_quotes() {
        assert_eq!(csv("a,b,c"), ["a", "b", "c"]);
        assert_eq!(
            csv("1,\"x, y\",\"he said \"\"hi\"\"\"\r"),
            ["1", "x, y", "he said \"hi\""]
        );
        assert_eq!(csv("a,"), ["a", ""]);
        assert_eq!(csv(""), [""]);
        let mut s = String::new();
        write_csv_field(&mut s, "x, \"y\"", b',');
        assert_eq!(csv(&s), ["x, \"y\""]);
    }

    #[test]
    fn one_csv_parser_reads_many_lines_of_any_length() {
        let mut p = CsvLineParser::new(b'|');
        let mut v = Vec::new();
        // Longer than the first buffers (256 bytes, 16 fields): they grow.
        let long = "é".repeat(300);
        let line = format!("{long}|{}", "x|".repeat(40));
        p.parse(&line, &mut v);
        assert_eq!(v.len(), 42);
        assert_eq!(v[0], long);
        assert_eq!(v[41], "");
        // The next line starts afresh; a `\r` inside a line is data, a
        // quote inside an unquoted field is kept.
        p.parse("a\rb|c\"d|\"e|f\"", &mut v);
        assert_eq!(v, ["a\rb", "c\"d", "e|f"]);
        p.parse("", &mut v);
        assert_eq!(v, [""]);
    }

    #[derive(Clone, Default)]
    struct Collect(Arc<Mutex<Vec<Vec<String>>>>);
    impl RowSink for Collect {
        fn write(&mut self, row: Vec<String>) -> Result<(), TaskError> {
            self.0.lock().expect("lock").push(row);
            Ok(())
        }
        fn finish(self: Box<Self>) -> Result<ChainOutput, TaskError> {
            Ok((0, Vec::new()))
        }
    }

    fn run(ops: &[Operator], rows: &[&[&str]]) -> Vec<Vec<String>> {
        let sink = Collect::default();
        let mut chain = Chain::new("v", ops, Box::new(sink.clone()));
        for r in rows {
            chain
                .push(r.iter().map(|s| s.to_string()).collect())
                .expect("push");
        }
        chain.finish().expect("finish");
        let mut out = sink.0.lock().expect("lock").clone();
        out.sort();
        out
    }

    #[test]
    fn tokenize_then_count_counts_words() {
        let ops = [
            Operator::Tokenize {
                column: 0,
                lowercase: true,
            },
            Operator::Aggregate {
                key: vec![0],
                aggregates: vec![Aggregate {
                    function: AggFunction::Count,
                    inputs: vec![],
                    output: "n".into(),
                }],
                mode: AggMode::Complete,
                decimals: 2,
            },
        ];
        let out = run(&ops, &[&["The cat, the hat."], &["CAT"]]);
        assert_eq!(out, [["cat", "2"], ["hat", "1"], ["the", "2"]]);
    }

    #[test]
    fn partial_then_final_equals_complete() {
        let aggs = |mode| Operator::Aggregate {
            key: vec![0],
            aggregates: vec![
                Aggregate {
                    function: AggFunction::Count,
                    inputs: if mode == AggMode::Final {
                        vec![1]
                    } else {
                        vec![]
                    },
                    output: "n".into(),
                },
                Aggregate {
                    function: AggFunction::Avg,
                    inputs: if mode == AggMode::Final {
                        vec![2, 3]
                    } else {
                        vec![1]
                    },
                    output: "a".into(),
                },
                Aggregate {
                    function: AggFunction::Min,
                    inputs: if mode == AggMode::Final {
                        vec![4]
                    } else {
                        vec![1]
                    },
                    output: "m".into(),
                },
            ],
            mode,
            decimals: 2,
        };
        let rows: &[&[&str]] = &[&["k", "1.005"], &["k", "2"], &["j", "-3"]];
        let complete = run(&[aggs(AggMode::Complete)], rows);
        let partial = run(&[aggs(AggMode::Partial)], rows);
        let partial_refs: Vec<Vec<&str>> = partial
            .iter()
            .map(|r| r.iter().map(String::as_str).collect())
            .collect();
        let partial_rows: Vec<&[&str]> = partial_refs.iter().map(Vec::as_slice).collect();
        let fin = run(&[aggs(AggMode::Final)], &partial_rows);
        assert_eq!(complete, fin);
        assert_eq!(
            complete,
            [["j", "1", "-3.00", "-3.00"], ["k", "2", "1.50", "1.01"]]
        );
    }

    #[test]
    fn filter_and_project_keep_the_right_columns() {
        let ops = [
            Operator::Filter {
                column: 1,
                cmp: crate::graph::CmpOp::Le,
                value: "1998-09-02".into(),
                number: None,
            },
            Operator::Project {
                columns: vec![2, 0],
            },
        ];
        let out = run(
            &ops,
            &[&["a", "1998-09-02", "x"], &["b", "1998-09-03", "y"]],
        );
        assert_eq!(out, [["x", "a"]]);
    }
}
