//! The built-in operator chain: tokenize, filter, project and aggregate,
//! push-based over Arrow record batches (each batch is pushed through the
//! stages; an aggregation keeps its groups until its input ends, then
//! pushes them on), ending in a [`BatchSink`] (result partitions or a
//! sink's staging file).
//!
//! Reading (`read-lines`, `read-csv`) happens before the chain, in the
//! source reader; this module has the CSV line parser it uses. Values are
//! compared and grouped by their text ([`crate::value::cell_text`]), so a
//! column gives the same result whether it arrives as `Utf8` text or as an
//! `Int64`, `Decimal128` or `Date32` column.

use std::sync::Arc;

use arrow_array::builder::{ArrayBuilder, StringBuilder};
use arrow_array::cast::AsArray;
use arrow_array::types::{Date32Type, Decimal128Type, Int64Type};
use arrow_array::{Array, BooleanArray, RecordBatch};
use arrow_schema::DataType;

use super::TaskError;
use super::aggregate::AggState;
use crate::graph::{CmpOp, Operator};
use crate::value::cells::{self, NotANumber, batch_of};
use crate::value::{BATCH_ROWS, Decimal, write_cell_text};

/// What a finished chain reports: rows written and, for result partitions,
/// each outgoing edge's index with the bytes of each of its subpartitions.
pub type ChainOutput = (u64, Vec<(usize, Vec<u64>)>);

/// Where the chain's output batches go.
pub trait BatchSink: Send {
    /// Takes one output batch (at least one row).
    ///
    /// # Errors
    ///
    /// [`TaskError`] if writing fails.
    fn write(&mut self, batch: &RecordBatch) -> Result<(), TaskError>;

    /// The schema of every batch to come, when it is known before the
    /// first (a SQL stage's output): a Parquet sink writes it even when no
    /// row comes. Ignored by the others.
    fn expect_schema(&mut self, _schema: &arrow_schema::SchemaRef) {}

    /// Flushes and makes the output durable; returns the rows written and,
    /// for result partitions, the bytes per subpartition of each edge.
    ///
    /// # Errors
    ///
    /// [`TaskError`] if flushing fails.
    fn finish(self: Box<Self>) -> Result<ChainOutput, TaskError>;
}

enum Stage {
    Tokenize {
        column: usize,
        lowercase: bool,
    },
    Filter {
        column: usize,
        cmp: CmpOp,
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
    out: Box<dyn BatchSink>,
}

impl Chain {
    /// Compiles `operators` (read operators are skipped: the source reader
    /// applies them) in front of `out`.
    pub fn new(vertex: &str, operators: &[Operator], out: Box<dyn BatchSink>) -> Self {
        let stages = operators
            .iter()
            .filter_map(|op| match op {
                // A SQL stage never reaches a chain (`run_task` runs its plan).
                Operator::ReadLines
                | Operator::ReadCsv { .. }
                | Operator::ReadParquet { .. }
                | Operator::Stage(_) => None,
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
                } => Some(Stage::Aggregate(Box::new(AggState::new(
                    key.clone(),
                    aggregates.clone(),
                    *mode,
                    *decimals,
                )))),
            })
            .collect();
        Self {
            vertex: vertex.to_string(),
            stages,
            out,
        }
    }

    /// Pushes one input batch through the chain.
    ///
    /// # Errors
    ///
    /// [`TaskError::InvalidData`] for a value an operator cannot use (not a
    /// number where one is wanted); errors of the sink.
    pub fn push_batch(&mut self, batch: RecordBatch) -> Result<(), TaskError> {
        self.push_from(0, batch)
    }

    /// A value an operator cannot use (`abc` where a number is wanted):
    /// the same input fails the same way, so a data error, not retried.
    fn bad_value(detail: String) -> TaskError {
        TaskError::InvalidData { detail }
    }

    fn data(&self, detail: String) -> TaskError {
        TaskError::Data {
            vertex: self.vertex.clone(),
            detail,
        }
    }

    fn push_from(&mut self, from: usize, mut batch: RecordBatch) -> Result<(), TaskError> {
        let mut i = from;
        while i < self.stages.len() {
            if batch.num_rows() == 0 {
                return Ok(());
            }
            match &mut self.stages[i] {
                Stage::Tokenize { column, lowercase } => {
                    let words = tokenize(batch.column(*column).as_ref(), *lowercase);
                    for b in words {
                        self.push_from(i + 1, b)?;
                    }
                    return Ok(());
                }
                Stage::Filter {
                    column,
                    cmp,
                    value,
                    number,
                } => {
                    let col = batch.column(*column).as_ref();
                    let mask = match number {
                        Some(n) => numeric_mask(col, *cmp, *n),
                        None => Ok(text_mask(col, *cmp, value)),
                    };
                    let mask = match mask {
                        Ok(m) => m,
                        Err(e) => {
                            let detail =
                                format!("filter: {} is not a number", super::quote_value(&e.text));
                            return Err(Self::bad_value(detail));
                        }
                    };
                    let kept = mask.true_count();
                    if kept == 0 {
                        return Ok(());
                    }
                    if kept < batch.num_rows() {
                        batch = arrow_select::filter::filter_record_batch(&batch, &mask)
                            .map_err(|e| self.data(format!("filter: {e}")))?;
                    }
                }
                Stage::Project { columns } => {
                    batch = batch
                        .project(columns)
                        .map_err(|e| self.data(format!("project: {e}")))?;
                }
                Stage::Aggregate(state) => {
                    if let Err(detail) = state.add(&batch) {
                        return Err(Self::bad_value(detail));
                    }
                    return Ok(());
                }
            }
            i += 1;
        }
        if batch.num_rows() == 0 {
            return Ok(());
        }
        self.out.write(&batch)
    }

    /// Ends the input: each aggregation, in chain order, pushes its groups
    /// on (in batches of at most [`BATCH_ROWS`] rows); then the sink is
    /// finished.
    ///
    /// # Errors
    ///
    /// As [`Chain::push_batch`], and errors of finishing the sink.
    pub fn finish(mut self) -> Result<ChainOutput, TaskError> {
        for i in 0..self.stages.len() {
            let batches = match &mut self.stages[i] {
                Stage::Aggregate(state) => state.drain(),
                _ => continue,
            };
            let batches = batches.map_err(|detail| self.data(detail))?;
            for b in batches {
                self.push_from(i + 1, b)?;
            }
        }
        self.out.finish()
    }
}

/// The words of `column` (maximal runs of letters and digits, Unicode's
/// `char::is_alphanumeric`), lower-cased with `str::to_lowercase` if asked,
/// as one-column `Utf8` batches of at most [`BATCH_ROWS`] rows.
fn tokenize(column: &dyn Array, lowercase: bool) -> Vec<RecordBatch> {
    let mut out = Vec::new();
    let mut words = StringBuilder::with_capacity(BATCH_ROWS, BATCH_ROWS * 8);
    let mut text = String::new();
    let mut lower = String::new();
    for row in 0..column.len() {
        text.clear();
        write_cell_text(column, row, &mut text);
        for word in text
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
        {
            if !lowercase {
                words.append_value(word);
            } else if word.is_ascii() {
                lower.clear();
                lower.push_str(word);
                lower.make_ascii_lowercase();
                words.append_value(&lower);
            } else {
                words.append_value(word.to_lowercase());
            }
            if words.len() == BATCH_ROWS {
                out.push(batch_of(vec![Arc::new(words.finish())]));
            }
        }
    }
    if words.len() > 0 {
        out.push(batch_of(vec![Arc::new(words.finish())]));
    }
    out
}

/// Which rows of `column` compare true against the string `value`: byte-wise
/// on the cells' text (`Date32` cells against a `YYYY-MM-DD` constant as
/// dates, which orders them the same way).
fn text_mask(column: &dyn Array, cmp: CmpOp, value: &str) -> BooleanArray {
    let n = column.len();
    let mut keep = Vec::with_capacity(n);
    match column.data_type() {
        DataType::Utf8 if column.null_count() == 0 => {
            let a = column.as_string::<i32>();
            for row in 0..n {
                keep.push(cmp.holds(a.value(row).cmp(value)));
            }
        }
        DataType::Date32 if column.null_count() == 0 && cells::parse_date(value).is_some() => {
            let c = cells::parse_date(value).unwrap_or_default();
            let plain = cells::plain_date_range();
            let a = column.as_primitive::<Date32Type>();
            let mut text = String::new();
            for (row, &d) in a.values().iter().enumerate() {
                let ordering = if plain.contains(&d) {
                    d.cmp(&c)
                } else {
                    text.clear();
                    write_cell_text(column, row, &mut text);
                    text.as_str().cmp(value)
                };
                keep.push(cmp.holds(ordering));
            }
        }
        _ => {
            let mut text = String::new();
            for row in 0..n {
                text.clear();
                write_cell_text(column, row, &mut text);
                keep.push(cmp.holds(text.as_str().cmp(value)));
            }
        }
    }
    BooleanArray::from(keep)
}

/// Which rows of `column` compare true against the number `value`, exactly:
/// text parsed with the job file's number rule, `Int64` and `Decimal128`
/// compared by value.
///
/// # Errors
///
/// [`NotANumber`] for the first cell that is not a number (text that does
/// not parse, a `Date32`, a null).
fn numeric_mask(
    column: &dyn Array,
    cmp: CmpOp,
    value: Decimal,
) -> Result<BooleanArray, NotANumber> {
    let c = value.millionths();
    let n = column.len();
    let mut keep = Vec::with_capacity(n);
    match column.data_type() {
        DataType::Int64 if column.null_count() == 0 => {
            for &v in column.as_primitive::<Int64Type>().values() {
                keep.push(cmp.holds((i128::from(v) * 1_000_000).cmp(&c)));
            }
        }
        DataType::Decimal128(_, s) if column.null_count() == 0 => {
            let s = i32::from(*s);
            for &v in column.as_primitive::<Decimal128Type>().values() {
                keep.push(cmp.holds(compare_scaled(v, s, c, 6)));
            }
        }
        _ => {
            for v in cells::decimal_column(column, 6)? {
                keep.push(cmp.holds(v.cmp(&c)));
            }
        }
    }
    Ok(BooleanArray::from(keep))
}

/// Orders `a * 10^-sa` against `b * 10^-sb` exactly (no overflow: a factor
/// that leaves `i128` makes its side larger in magnitude than the other).
fn compare_scaled(a: i128, sa: i32, b: i128, sb: i32) -> std::cmp::Ordering {
    let scale = |v: i128, by: i32| -> Option<i128> {
        10i128
            .checked_pow(by.unsigned_abs())
            .and_then(|f| v.checked_mul(f))
    };
    if sa <= sb {
        match scale(a, sb - sa) {
            Some(a) => a.cmp(&b),
            None => a.signum().cmp(&0),
        }
    } else {
        match scale(b, sa - sb) {
            Some(b) => a.cmp(&b),
            None => 0.cmp(&b.signum()),
        }
    }
}

/// Splits CSV lines into fields with `csv-core` (RFC 4180 quoting:
/// `delimiter` separates fields; a field that starts with `"` runs to the
/// next lone `"`, and `""` inside it is one quote), one line at a time:
/// line breaks inside fields are not supported, since a split is cut into
/// lines first. A trailing `\r` is dropped.
///
/// One parser is reused for every line of a split, so the reader's state
/// machine and its buffers are built once; fields are borrowed from it.
pub struct CsvLineParser {
    reader: csv_core::Reader,
    /// Field bytes of the line being parsed, unquoted.
    bytes: Vec<u8>,
    /// End offset in `bytes` of each field.
    ends: Vec<usize>,
    /// Number of fields of the line parsed last.
    fields: usize,
    delimiter: u8,
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
            fields: 0,
            delimiter,
        }
    }

    /// Parses `line`; returns its number of fields (one, empty, for an
    /// empty line), then available through [`CsvLineParser::field`].
    pub fn parse(&mut self, line: &str) -> usize {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if !line.as_bytes().contains(&b'"') {
            self.parse_plain(line)
        } else if let Some(n) = self.parse_simply_quoted(line) {
            n
        } else {
            self.parse_quoted(line)
        }
    }

    /// A line whose quoted fields are simple: each quoted field closes
    /// with a quote right before a delimiter or the end, and holds no
    /// doubled quote (a quote inside an unquoted field is data, as for
    /// `csv-core`). `None` for any other line, which `csv-core` reads.
    fn parse_simply_quoted(&mut self, line: &str) -> Option<usize> {
        let b = line.as_bytes();
        if self.bytes.len() < b.len() {
            self.bytes.resize(b.len().next_power_of_two(), 0);
        }
        let d = self.delimiter;
        let (mut at, mut n, mut nends) = (0, 0, 0);
        loop {
            let (piece, next) = if b.get(at) == Some(&b'"') {
                let len = b[at + 1..].iter().position(|&c| c == b'"')?;
                let close = at + 1 + len;
                match b.get(close + 1) {
                    None => (&b[at + 1..close], None),
                    Some(&c) if c == d => (&b[at + 1..close], Some(close + 2)),
                    Some(_) => return None,
                }
            } else {
                match b[at..].iter().position(|&c| c == d) {
                    Some(len) => (&b[at..at + len], Some(at + len + 1)),
                    None => (&b[at..], None),
                }
            };
            self.bytes[n..n + piece.len()].copy_from_slice(piece);
            n += piece.len();
            if nends == self.ends.len() {
                self.ends.resize(self.ends.len() * 2, 0);
            }
            self.ends[nends] = n;
            nends += 1;
            match next {
                Some(next) => at = next,
                None => break,
            }
        }
        self.fields = nends;
        Some(nends)
    }

    /// A line without quotes: its fields are the pieces between
    /// delimiters, exactly what `csv-core` gives, without its state machine.
    fn parse_plain(&mut self, line: &str) -> usize {
        let b = line.as_bytes();
        if self.bytes.len() < b.len() {
            self.bytes.resize(b.len().next_power_of_two(), 0);
        }
        let (mut n, mut nends) = (0, 0);
        for piece in b.split(|&c| c == self.delimiter) {
            self.bytes[n..n + piece.len()].copy_from_slice(piece);
            n += piece.len();
            if nends == self.ends.len() {
                self.ends.resize(self.ends.len() * 2, 0);
            }
            self.ends[nends] = n;
            nends += 1;
        }
        self.fields = nends;
        nends
    }

    /// Any line, through `csv-core`.
    fn parse_quoted(&mut self, line: &str) -> usize {
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
            self.ends[0] = 0;
            nends = 1;
        }
        self.fields = nends;
        nends
    }

    /// Whether `line` ends inside a quoted field (RFC 4180: a field that
    /// starts with `"` and whose closing `"` does not come): the record goes
    /// on past the line break, which a reader that cuts splits into lines
    /// cannot follow. A quote inside an unquoted field is data, `""` inside
    /// a quoted one is a quote.
    #[must_use]
    pub fn ends_in_open_quote(&self, line: &str) -> bool {
        let b = line.as_bytes();
        let (mut quoted, mut field_start) = (false, true);
        let mut i = 0;
        while i < b.len() {
            let c = b[i];
            if quoted {
                if c == b'"' {
                    if b.get(i + 1) == Some(&b'"') {
                        i += 2;
                        continue;
                    }
                    quoted = false;
                }
            } else if field_start && c == b'"' {
                quoted = true;
            }
            field_start = !quoted && c == self.delimiter;
            i += 1;
        }
        quoted
    }

    /// Field `i` of the line parsed last, unquoted.
    ///
    /// # Panics
    ///
    /// If `i` is not below the number [`CsvLineParser::parse`] returned.
    pub fn field(&self, i: usize) -> std::borrow::Cow<'_, str> {
        assert!(i < self.fields, "field {i} of {}", self.fields);
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        // Only ASCII quotes are removed from a `&str`: still UTF-8.
        String::from_utf8_lossy(&self.bytes[start..self.ends[i]])
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
    use crate::graph::{AggFunction, AggMode, Aggregate};
    use crate::value::cell_text;
    use arrow_array::ArrayRef;
    use arrow_array::{Date32Array, Int64Array, StringArray};
    use std::sync::Mutex;

    fn csv(line: &str) -> Vec<String> {
        let mut p = CsvLineParser::new(b',');
        let n = p.parse(line);
        (0..n).map(|i| p.field(i).into_owned()).collect()
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
    fn a_line_that_ends_inside_a_quoted_field_is_seen() {
        let p = CsvLineParser::new(b',');
        for open in ["a,\"x", "\"", "a,\"he said \"\"hi", "\"a\",\"b"] {
            assert!(p.ends_in_open_quote(open), "{open:?}");
        }
        for closed in [
            "a,b",
            "a,\"x\"",
            "ab\"c,d",
            "\"a\"x,b",
            "\"\"\"\"",
            "a,\"x, y\",z",
            "y\",b",
        ] {
            assert!(!p.ends_in_open_quote(closed), "{closed:?}");
        }
    }

    #[test]
    fn lines_split_without_csv_core_as_csv_core_splits_them() {
        let mut p = CsvLineParser::new(b'|');
        let mut q = CsvLineParser::new(b'|');
        let fields =
            |p: &CsvLineParser, n| (0..n).map(|i| p.field(i).into_owned()).collect::<Vec<_>>();
        let wide = "ab|".repeat(50);
        for line in [
            "",
            "|",
            "a",
            "a|",
            "|b",
            "a||c",
            "x y|\rz|é|",
            "\r|\r",
            &wide,
            &"\"ab\"|".repeat(50),
            "\"a|b\"|c|\"\"",
            "\"\"",
            "\"",
            "a|\"",
            "\"a\"x|b",
            "\"a\"\"b\"|c",
            "c\"d|\"e|f\"|\"é\"",
            "\"unclosed|x",
            "1|\"x\"|",
            "\"x\"\r",
        ] {
            let (n, m) = (
                p.parse(line),
                q.parse_quoted(line.strip_suffix('\r').unwrap_or(line)),
            );
            assert_eq!(fields(&p, n), fields(&q, m), "{line:?}");
        }
    }

    #[test]
    fn one_csv_parser_reads_many_lines_of_any_length() {
        let mut p = CsvLineParser::new(b'|');
        let fields =
            |p: &CsvLineParser, n| (0..n).map(|i| p.field(i).into_owned()).collect::<Vec<_>>();
        // Longer than the first buffers (256 bytes, 16 fields): they grow.
        let long = "é".repeat(300);
        let line = format!("{long}|{}", "x|".repeat(40));
        let n = p.parse(&line);
        assert_eq!(n, 42);
        let v = fields(&p, n);
        assert_eq!(v[0], long);
        assert_eq!(v[41], "");
        // The next line starts afresh; a `\r` inside a line is data, a
        // quote inside an unquoted field is kept.
        let n = p.parse("a\rb|c\"d|\"e|f\"");
        assert_eq!(fields(&p, n), ["a\rb", "c\"d", "e|f"]);
        let n = p.parse("");
        assert_eq!(fields(&p, n), [""]);
    }

    /// Collects the batches a chain writes (their types and texts).
    #[derive(Clone, Default)]
    struct Collect(Arc<Mutex<Vec<RecordBatch>>>);
    impl BatchSink for Collect {
        fn write(&mut self, batch: &RecordBatch) -> Result<(), TaskError> {
            assert!(batch.num_rows() > 0 && batch.num_rows() <= BATCH_ROWS);
            self.0.lock().expect("lock").push(batch.clone());
            Ok(())
        }
        fn finish(self: Box<Self>) -> Result<ChainOutput, TaskError> {
            Ok((0, Vec::new()))
        }
    }

    impl Collect {
        fn rows(&self) -> Vec<Vec<String>> {
            let mut out = Vec::new();
            for b in self.0.lock().expect("lock").iter() {
                for r in 0..b.num_rows() {
                    out.push(
                        b.columns()
                            .iter()
                            .map(|c| cell_text(c.as_ref(), r).into_owned())
                            .collect(),
                    );
                }
            }
            out
        }

        fn types(&self) -> Vec<DataType> {
            let batches = self.0.lock().expect("lock");
            batches[0]
                .schema()
                .fields()
                .iter()
                .map(|f| f.data_type().clone())
                .collect()
        }
    }

    fn text_batch(rows: &[&[&str]]) -> RecordBatch {
        let width = rows.first().map_or(0, |r| r.len());
        batch_of(
            (0..width)
                .map(|c| {
                    Arc::new(StringArray::from(
                        rows.iter().map(|r| r[c]).collect::<Vec<_>>(),
                    )) as ArrayRef
                })
                .collect(),
        )
    }

    fn run_batches(ops: &[Operator], batches: Vec<RecordBatch>) -> Result<Collect, TaskError> {
        let sink = Collect::default();
        let mut chain = Chain::new("v", ops, Box::new(sink.clone()));
        for b in batches {
            chain.push_batch(b)?;
        }
        chain.finish()?;
        Ok(sink)
    }

    fn run(ops: &[Operator], rows: &[&[&str]]) -> Vec<Vec<String>> {
        let mut out = run_batches(ops, vec![text_batch(rows)])
            .expect("run")
            .rows();
        out.sort();
        out
    }

    fn agg(function: AggFunction, inputs: Vec<usize>) -> Aggregate {
        Aggregate {
            function,
            inputs,
            output: "x".into(),
        }
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
                aggregates: vec![agg(AggFunction::Count, vec![])],
                mode: AggMode::Complete,
                decimals: 2,
            },
        ];
        let out = run(&ops, &[&["The cat, the hat."], &["CAT ΣΑΣ"]]);
        assert_eq!(
            out,
            [["cat", "2"], ["hat", "1"], ["the", "2"], ["σας", "1"]]
        );
    }

    #[test]
    fn tokenize_cuts_its_output_into_batches_of_at_most_batch_rows() {
        let line = "w ".repeat(BATCH_ROWS + 10);
        let ops = [Operator::Tokenize {
            column: 0,
            lowercase: false,
        }];
        let sink = run_batches(&ops, vec![text_batch(&[&[&line]])]).expect("run");
        let sizes: Vec<usize> = sink
            .0
            .lock()
            .expect("lock")
            .iter()
            .map(|b| b.num_rows())
            .collect();
        assert_eq!(sizes, [BATCH_ROWS, 10]);
    }

    fn two_phase(mode: AggMode) -> Operator {
        let fin = mode == AggMode::Final;
        Operator::Aggregate {
            key: vec![0],
            aggregates: vec![
                agg(AggFunction::Count, if fin { vec![1] } else { vec![] }),
                agg(AggFunction::Avg, if fin { vec![2, 3] } else { vec![1] }),
                agg(AggFunction::Min, if fin { vec![4] } else { vec![1] }),
                agg(AggFunction::Max, if fin { vec![5] } else { vec![1] }),
                agg(AggFunction::Sum, if fin { vec![6] } else { vec![1] }),
            ],
            mode,
            decimals: 2,
        }
    }

    #[test]
    fn partial_then_final_equals_complete() {
        let rows: &[&[&str]] = &[&["k", "1.005"], &["k", "2"], &["j", "-3"], &["k", "-0.004"]];
        let complete =
            run_batches(&[two_phase(AggMode::Complete)], vec![text_batch(rows)]).expect("complete");
        let partial =
            run_batches(&[two_phase(AggMode::Partial)], vec![text_batch(rows)]).expect("partial");
        assert_eq!(
            partial.rows(),
            [
                [
                    "k",
                    "3",
                    "3.001000",
                    "3",
                    "-0.004000",
                    "2.000000",
                    "3.001000"
                ],
                [
                    "j",
                    "1",
                    "-3.000000",
                    "1",
                    "-3.000000",
                    "-3.000000",
                    "-3.000000"
                ]
            ]
        );
        let d6 = DataType::Decimal128(38, 6);
        assert_eq!(
            partial.types(),
            [
                DataType::Utf8,
                DataType::Int64,
                d6.clone(),
                DataType::Int64,
                d6.clone(),
                d6.clone(),
                d6
            ]
        );
        // The final phase reads the typed state columns, or their text
        // (a partition written as text).
        let typed = partial.0.lock().expect("lock").clone();
        let fin = run_batches(&[two_phase(AggMode::Final)], typed).expect("final");
        let texts: Vec<Vec<String>> = partial.rows();
        let refs: Vec<Vec<&str>> = texts
            .iter()
            .map(|r| r.iter().map(String::as_str).collect())
            .collect();
        let slices: Vec<&[&str]> = refs.iter().map(Vec::as_slice).collect();
        let fin_text =
            run_batches(&[two_phase(AggMode::Final)], vec![text_batch(&slices)]).expect("final");
        assert_eq!(complete.rows(), fin.rows());
        assert_eq!(complete.rows(), fin_text.rows());
        assert_eq!(
            complete.rows(),
            [
                ["k", "3", "1.00", "0.00", "2.00", "3.00"],
                ["j", "1", "-3.00", "-3.00", "-3.00", "-3.00"]
            ]
        );
        let d2 = DataType::Decimal128(38, 2);
        assert_eq!(
            complete.types(),
            [
                DataType::Utf8,
                DataType::Int64,
                d2.clone(),
                d2.clone(),
                d2.clone(),
                d2
            ]
        );
    }

    #[test]
    fn groups_come_out_in_order_of_first_appearance_across_batches() {
        let ops = [Operator::Aggregate {
            key: vec![0, 1],
            aggregates: vec![agg(AggFunction::Count, vec![])],
            mode: AggMode::Complete,
            decimals: 2,
        }];
        let batches = vec![
            text_batch(&[&["b", "1"], &["a", "bc"], &["b", "1"]]),
            text_batch(&[&["ab", "c"], &["a", "bc"]]),
        ];
        let out = run_batches(&ops, batches).expect("run").rows();
        assert_eq!(out, [["b", "1", "2"], ["a", "bc", "2"], ["ab", "c", "1"]]);
    }

    #[test]
    fn many_batches_of_new_groups_keep_their_order_and_key_types() {
        let ops = [Operator::Aggregate {
            key: vec![0],
            aggregates: vec![agg(AggFunction::Sum, vec![0])],
            mode: AggMode::Partial,
            decimals: 2,
        }];
        // 200 batches, each with one new key and one seen before.
        let batches: Vec<RecordBatch> = (0..200i64)
            .map(|i| batch_of(vec![Arc::new(Int64Array::from(vec![i, i / 2]))]))
            .collect();
        let sink = run_batches(&ops, batches).expect("run");
        let rows = sink.rows();
        assert_eq!(rows.len(), 200);
        for (i, row) in rows.iter().enumerate() {
            let i = i as i64;
            // Key i is met as a new key in batch i and again in batches 2i, 2i+1.
            let times = 1 + (0..200).filter(|j| j / 2 == i).count() as i64;
            assert_eq!(row, &[i.to_string(), format!("{}.000000", i * times)]);
        }
        assert_eq!(sink.types()[0], DataType::Int64);
    }

    #[test]
    fn typed_columns_aggregate_like_their_text() {
        let typed = batch_of(vec![
            Arc::new(Date32Array::from(vec![10_471, 10_471, 10_472])),
            Arc::new(Int64Array::from(vec![3, 4, -5])),
            Arc::new(cells::decimal_array(vec![1_005, 2_000, -1], 3)),
        ]);
        let text = text_batch(&[
            &["1998-09-02", "3", "1.005"],
            &["1998-09-02", "4", "2.000"],
            &["1998-09-03", "-5", "-0.001"],
        ]);
        let ops = [Operator::Aggregate {
            key: vec![0],
            aggregates: vec![
                agg(AggFunction::Sum, vec![1]),
                agg(AggFunction::Avg, vec![2]),
                agg(AggFunction::Max, vec![2]),
            ],
            mode: AggMode::Complete,
            decimals: 2,
        }];
        let a = run_batches(&ops, vec![typed]).expect("typed");
        let b = run_batches(&ops, vec![text]).expect("text");
        assert_eq!(a.rows(), b.rows());
        assert_eq!(
            a.rows(),
            [
                ["1998-09-02", "7.00", "1.50", "2.00"],
                ["1998-09-03", "-5.00", "0.00", "0.00"]
            ]
        );
        // The key keeps its type.
        assert_eq!(a.types()[0], DataType::Date32);
    }

    #[test]
    fn bad_numbers_fail_with_the_first_bad_row() {
        let ops = [Operator::Aggregate {
            key: vec![],
            aggregates: vec![
                agg(AggFunction::Sum, vec![0]),
                agg(AggFunction::Sum, vec![1]),
            ],
            mode: AggMode::Complete,
            decimals: 2,
        }];
        let err = run_batches(
            &ops,
            vec![text_batch(&[&["1", "2"], &["1", "x"], &["y", "2"]])],
        )
        .err()
        .expect("fails");
        assert!(err.is_permanent(), "a data error");
        assert_eq!(err.to_string(), "aggregate: `x` is not a number");
        let dates = batch_of(vec![Arc::new(Date32Array::from(vec![0]))]);
        let one = [Operator::Aggregate {
            key: vec![],
            aggregates: vec![agg(AggFunction::Avg, vec![0])],
            mode: AggMode::Partial,
            decimals: 2,
        }];
        let err = run_batches(&one, vec![dates]).err().expect("fails");
        assert!(
            err.to_string().contains("`1970-01-01` is not a number"),
            "{err}"
        );
        let fin = [Operator::Aggregate {
            key: vec![],
            aggregates: vec![agg(AggFunction::Count, vec![0])],
            mode: AggMode::Final,
            decimals: 2,
        }];
        let err = run_batches(&fin, vec![text_batch(&[&["2.5"]])])
            .err()
            .expect("fails");
        assert_eq!(err.to_string(), "aggregate: `2.5` is not a count");
    }

    #[test]
    fn filter_and_project_keep_the_right_columns() {
        let ops = [
            Operator::Filter {
                column: 1,
                cmp: CmpOp::Le,
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

    fn filter(cmp: CmpOp, value: &str, number: bool) -> Operator {
        Operator::Filter {
            column: 0,
            cmp,
            value: value.into(),
            number: number.then(|| Decimal::parse(value).expect("number")),
        }
    }

    fn kept(ops: &[Operator], column: ArrayRef) -> Vec<String> {
        run_batches(ops, vec![batch_of(vec![column])])
            .expect("run")
            .rows()
            .into_iter()
            .map(|mut r| r.remove(0))
            .collect()
    }

    #[test]
    fn filters_compare_dates_integers_and_decimals_by_value() {
        let dates: ArrayRef = Arc::new(Date32Array::from(vec![10_470, 10_471, 10_472, 2_932_897]));
        // Dates order as their texts do, also beyond year 9999 ('+' < '1').
        assert_eq!(
            kept(&[filter(CmpOp::Le, "1998-09-02", false)], dates.clone()),
            ["1998-09-01", "1998-09-02", "+10000-01-01"]
        );
        // A constant that is not a whole date compares with the text.
        assert_eq!(
            kept(&[filter(CmpOp::Gt, "1998-09-02x", false)], dates),
            ["1998-09-03"]
        );
        let ints: ArrayRef = Arc::new(Int64Array::from(vec![9, 10, 100]));
        assert_eq!(kept(&[filter(CmpOp::Lt, "10", true)], ints.clone()), ["9"]);
        // As strings, "100" < "9".
        assert_eq!(kept(&[filter(CmpOp::Lt, "9", false)], ints), ["10", "100"]);
        let dec: ArrayRef = Arc::new(cells::decimal_array(vec![5, 50, 4_999_999_999], 9));
        assert_eq!(
            kept(&[filter(CmpOp::Ge, "0.000000050", false)], dec.clone()),
            ["0.000000050", "4.999999999"]
        );
        assert_eq!(
            kept(&[filter(CmpOp::Gt, "0.000001", true)], dec.clone()),
            ["4.999999999"]
        );
        assert_eq!(
            kept(&[filter(CmpOp::Ne, "5", true)], dec),
            ["0.000000005", "0.000000050", "4.999999999"]
        );
        let text: ArrayRef = Arc::new(StringArray::from(vec!["2", " 10 ", "-1.5"]));
        assert_eq!(kept(&[filter(CmpOp::Ge, "2", true)], text), ["2", " 10 "]);
    }

    #[test]
    fn a_numeric_filter_on_a_cell_that_is_not_a_number_fails() {
        let text: ArrayRef = Arc::new(StringArray::from(vec!["1", "abc"]));
        let err = run_batches(&[filter(CmpOp::Gt, "0", true)], vec![batch_of(vec![text])])
            .err()
            .expect("fails");
        assert!(err.is_permanent(), "a data error");
        assert_eq!(err.to_string(), "filter: `abc` is not a number");
        let dates: ArrayRef = Arc::new(Date32Array::from(vec![0]));
        let err = run_batches(&[filter(CmpOp::Gt, "0", true)], vec![batch_of(vec![dates])])
            .err()
            .expect("fails");
        assert_eq!(err.to_string(), "filter: `1970-01-01` is not a number");
    }

    #[test]
    fn project_selects_columns_without_copying() {
        let b = text_batch(&[&["a", "b", "c"]]);
        let sink = run_batches(
            &[Operator::Project {
                columns: vec![2, 0, 2],
            }],
            vec![b.clone()],
        )
        .expect("run");
        let out = sink.0.lock().expect("lock")[0].clone();
        assert!(Arc::ptr_eq(out.column(0), b.column(2)));
        assert_eq!(sink.rows(), [["c", "a", "c"]]);
    }
}
