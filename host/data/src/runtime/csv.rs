//! CSV splits of a SQL table, read straight into typed Arrow columns by
//! arrow-csv (the CSV reader DataFusion itself uses) instead of text
//! columns that are cast afterwards (docs/sql.md, "Table declarations").
//!
//! What a split owns is the Hadoop rule `read-csv` follows too: the lines
//! that start in its byte range (a split that starts past byte 0 skips the
//! line holding byte `start - 1`; the last line it owns may run past its
//! end). Around arrow-csv's decoder this module keeps coordhost's own
//! rules on those lines: the first line of a file is skipped when the
//! table has a header, empty lines are skipped, a line longer than
//! [`MAX_LINE_BYTES`] fails the split, and a line that ends inside an open
//! quote fails the task naming the file and the byte, because a quoted
//! field holding a line break cannot be read line by line without losing
//! or inventing records.
//!
//! Values: an empty field is NULL whatever the column's type (as DuckDB and
//! Spark read CSV); any other field that does not parse as its declared
//! type fails the task naming the file, the column and the value.

use std::cell::Cell;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef};

use super::TaskError;
use super::decimal_text;
use super::source::MAX_LINE_BYTES;
use coordhost_io::grant::Grants;
use coordhost_model::value::{BATCH_ROWS, SplitData, SplitPayloadData};

/// How the lines of a table's files are laid out.
#[derive(Debug, Clone)]
pub struct TypedCsv {
    /// Field delimiter.
    pub delimiter: u8,
    /// The first line of each file names the columns.
    pub header: bool,
    /// Name and type of every field of a line, in file order (fields the
    /// scan does not read can be anything: they are not parsed).
    pub fields: Vec<(String, DataType)>,
    /// Field index of each column to emit, in output order.
    pub read: Vec<usize>,
    /// Read for a job file's `read-csv` operator (the graph form) rather
    /// than a SQL table: an empty field of a `Utf8` column is the empty
    /// string, not NULL, and a line with another number of fields is
    /// named as the operator's.
    pub operator: bool,
}

/// What a task reads a CSV split through; one per split.
struct Decode<'a> {
    csv: &'a TypedCsv,
    /// For each output column, its position in the decoder's output.
    order: Vec<usize>,
    out_schema: SchemaRef,
    decoder: arrow_csv::reader::Decoder,
    /// The file (or split) named in messages.
    name: String,
    vertex: &'a str,
    /// Offset of the first owned line, for messages.
    first: u64,
    /// Where arrow-csv's error is, for [`read_split`]'s message.
    at: &'a Cell<Option<Where>>,
    /// Records flushed so far (the first record of the next batch).
    flushed: usize,
}

/// Where in a split a data error is, as found while reading it; turned
/// into a line number only when a task fails ([`line_of`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Where {
    /// The record (0-based) among the records the split owns: its lines
    /// but the header and empty ones.
    Record(usize),
    /// The line that starts at this byte of the file.
    Byte(u64),
}

impl<'a> Decode<'a> {
    fn new(
        csv: &'a TypedCsv,
        name: String,
        vertex: &'a str,
        first: u64,
        at: &'a Cell<Option<Where>>,
    ) -> Result<Self, TaskError> {
        let mut projection = csv.read.clone();
        projection.sort_unstable();
        projection.dedup();
        let order = csv
            .read
            .iter()
            .map(|i| projection.binary_search(i).unwrap_or(0))
            .collect();
        // Decimal fields are read one digit finer and rounded to their
        // scale in `flush` (`decimal_text`): arrow-csv drops the digits
        // past the scale it is given.
        let schema = Arc::new(Schema::new(
            csv.fields
                .iter()
                .map(|(n, t)| match *t {
                    DataType::Decimal128(p, s) => Field::new(n, decimal_text::finer(p, s), true),
                    ref t => Field::new(n, t.clone(), true),
                })
                .collect::<Vec<_>>(),
        ));
        let out_schema = Arc::new(Schema::new(
            csv.read
                .iter()
                .map(|&i| Field::new(&csv.fields[i].0, csv.fields[i].1.clone(), true))
                .collect::<Vec<_>>(),
        ));
        let decoder = arrow_csv::ReaderBuilder::new(schema)
            .with_header(false)
            .with_delimiter(csv.delimiter)
            .with_batch_size(BATCH_ROWS)
            .with_projection(projection)
            .build_decoder();
        Ok(Self {
            csv,
            order,
            out_schema,
            decoder,
            name,
            vertex,
            first,
            at,
            flushed: 0,
        })
    }

    /// Feeds whole lines (or the last line's start, when its end comes in
    /// the next call) to the decoder, emitting every full batch.
    fn feed(
        &mut self,
        mut data: &[u8],
        emit: &mut impl FnMut(RecordBatch) -> Result<(), TaskError>,
    ) -> Result<(), TaskError> {
        while !data.is_empty() {
            let n = self.decoder.decode(data).map_err(|e| self.error(&e))?;
            data = &data[n..];
            if self.decoder.capacity() == 0 {
                self.flush(emit)?;
            } else if n == 0 {
                // Room for rows, input left, nothing taken: never loop on it.
                return Err(TaskError::InvalidData {
                    detail: format!(
                        "{}, in the lines from byte {}: the CSV decoder took none of {} bytes",
                        self.name,
                        self.first,
                        data.len()
                    ),
                });
            }
        }
        Ok(())
    }

    /// Ends the input: the last line without a line break, then what is left.
    fn finish(
        &mut self,
        emit: &mut impl FnMut(RecordBatch) -> Result<(), TaskError>,
    ) -> Result<(), TaskError> {
        self.decoder.decode(&[]).map_err(|e| self.error(&e))?;
        self.flush(emit)
    }

    fn flush(
        &mut self,
        emit: &mut impl FnMut(RecordBatch) -> Result<(), TaskError>,
    ) -> Result<(), TaskError> {
        let Some(batch) = self.decoder.flush().map_err(|e| self.error(&e))? else {
            return Ok(());
        };
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let columns: Vec<ArrayRef> = self
            .order
            .iter()
            .zip(&self.csv.read)
            .map(|(&j, &field)| {
                let c = batch.column(j);
                if let DataType::Decimal128(p, s) = self.csv.fields[field].1 {
                    return match decimal_text::round_finer(c.as_ref(), p, s) {
                        Ok(d) => Ok(Arc::new(d) as ArrayRef),
                        Err(row) => Err(self.too_wide(field, row)),
                    };
                }
                Ok(
                    if self.csv.operator && c.data_type() == &DataType::Utf8 && c.null_count() > 0 {
                        // arrow-csv reads an empty field as NULL, with no
                        // bytes: without the nulls it is the empty string.
                        let (offsets, values, _) = c.as_string::<i32>().clone().into_parts();
                        Arc::new(arrow_array::StringArray::new(offsets, values, None)) as ArrayRef
                    } else {
                        Arc::clone(c)
                    },
                )
            })
            .collect::<Result<_, TaskError>>()?;
        self.flushed += batch.num_rows();
        let batch = RecordBatch::try_new(Arc::clone(&self.out_schema), columns).map_err(|e| {
            TaskError::Data {
                vertex: self.vertex.to_string(),
                detail: format!("{}: {e}", self.name),
            }
        })?;
        emit(batch)
    }

    /// A decimal of field `field` in record `row` of the batch being
    /// flushed that has more digits than its type once rounded: the message
    /// names the column, and `at` the record for the line number (the
    /// value is found again as text when the task fails: `diagnose`).
    fn too_wide(&self, field: usize, row: usize) -> TaskError {
        self.at.set(Some(Where::Record(self.flushed + row)));
        let (column, ty) = &self.csv.fields[field];
        let ty = sql_type_name(ty);
        TaskError::InvalidData {
            detail: format!(
                "{}, column {} `{column}` ({ty}): Parser error: the value has more digits than {ty} holds once rounded to its scale",
                self.name,
                field + 1,
            ),
        }
    }

    /// arrow-csv's error as a data error, with the file and the column's
    /// name; the record it names is kept in `at` for the line number.
    fn error(&self, e: &arrow_schema::ArrowError) -> TaskError {
        let text = e.to_string();
        self.at.set(arrow_record(&text).map(Where::Record));
        // arrow-csv counts fields of the file ("column 2"; "field 3" from 1).
        let column = text
            .split_once("for column ")
            .map(|(_, rest)| (rest, 0))
            .or_else(|| text.split_once("and field ").map(|(_, rest)| (rest, 1)))
            .and_then(|(rest, base)| {
                rest.chars()
                    .take_while(char::is_ascii_digit)
                    .collect::<String>()
                    .parse::<usize>()
                    .ok()
                    .and_then(|i| i.checked_sub(base))
            })
            .and_then(|i| self.csv.fields.get(i).map(|f| (i, f)))
            .map(|(i, (n, t))| format!(", column {} `{n}` ({})", i + 1, sql_type_name(t)))
            .unwrap_or_default();
        if text.contains("incorrect number of fields") {
            // "incorrect number of fields for line 3, expected 3 got 2"
            let got = text
                .rsplit_once(" got ")
                .map_or("another number of", |(_, n)| n);
            if self.csv.operator {
                return TaskError::InvalidData {
                    detail: format!(
                        "{}: {got} fields, the read-csv operator expects {}",
                        self.name,
                        self.csv.fields.len()
                    ),
                };
            }
            return TaskError::InvalidData {
                detail: format!(
                    "{}: {got} fields where the table declares {}",
                    self.name,
                    self.csv.fields.len()
                ),
            };
        }
        if text.contains("invalid UTF-8") {
            return TaskError::InvalidData {
                detail: format!("{}{column}: the field is not UTF-8 text", self.name),
            };
        }
        TaskError::InvalidData {
            detail: format!(
                "{}{column}, in the lines from byte {}: {text}",
                self.name, self.first
            ),
        }
    }
}

/// The record (0-based, among those fed to one decoder) arrow-csv 59's
/// error `text` names: its record decoder counts from 1 ("incorrect
/// number of fields for line 3", "invalid UTF-8 data for line 3 and field
/// 2"), its value parser from 0 ("Error while parsing value 'x' as type
/// 'Int64' for column 2 at line 0").
fn arrow_record(text: &str) -> Option<usize> {
    let number = |rest: &str| {
        rest.chars()
            .take_while(char::is_ascii_digit)
            .collect::<String>()
            .parse::<usize>()
            .ok()
    };
    if let Some((_, rest)) = text.split_once("for line ") {
        return number(rest).and_then(|n| n.checked_sub(1));
    }
    text.split_once(" at line ")
        .and_then(|(_, rest)| number(rest))
}

/// A declared type as the job file writes it (`bigint`, `decimal(15,2)`);
/// also a Parquet column's type in messages (`stage`).
pub(super) fn sql_type_name(t: &DataType) -> String {
    match t {
        DataType::Int64 => "bigint".into(),
        DataType::Int32 => "int".into(),
        DataType::Float64 => "double".into(),
        DataType::Utf8 => "varchar".into(),
        DataType::Date32 => "date".into(),
        DataType::Boolean => "boolean".into(),
        DataType::Decimal128(p, s) => format!("decimal({p},{s})"),
        other => other.to_string(),
    }
}

/// Where a CSV line is, as far as quoting goes (csv-core's rules with
/// RFC 4180 quotes: a quote opens a quoted field only at the field's start,
/// `""` inside one is a quote, and a quote elsewhere is a plain byte).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Quoting {
    /// At the start of a field.
    FieldStart,
    /// In a field that did not start with a quote (or whose quotes closed).
    Plain,
    /// Inside a quoted field.
    Quoted,
    /// Just after a quote inside a quoted field: it closes the field unless
    /// another quote follows.
    QuoteInQuoted,
}

/// Line-level rules over the bytes of the owned lines, carried across
/// chunks: the header line, line length, open quotes at a line break.
struct Lines {
    /// Offset (in the file) of the next byte.
    at: u64,
    /// Offset where the current line started.
    line_start: u64,
    /// Bytes of the current line so far.
    line_len: usize,
    /// The current line is the header, to be dropped.
    skipping_header: bool,
    quoting: Quoting,
    delimiter: u8,
}

impl Lines {
    fn new(at: u64, skipping_header: bool, delimiter: u8) -> Self {
        Self {
            at,
            line_start: at,
            line_len: 0,
            skipping_header,
            quoting: Quoting::FieldStart,
            delimiter,
        }
    }

    /// While the header line is skipped: the part of `chunk` after it, or
    /// `None` when all of `chunk` belongs to the header.
    fn skip_header<'c>(
        &mut self,
        chunk: &'c [u8],
        too_long: &dyn Fn(u64) -> TaskError,
    ) -> Result<Option<&'c [u8]>, TaskError> {
        let Some(nl) = memchr::memchr(b'\n', chunk) else {
            self.line_len += chunk.len();
            self.at += chunk.len() as u64;
            if self.line_len > MAX_LINE_BYTES {
                return Err(too_long(self.line_start));
            }
            return Ok(None);
        };
        self.line_len += nl + 1;
        if self.line_len > MAX_LINE_BYTES {
            return Err(too_long(self.line_start));
        }
        self.at += (nl + 1) as u64;
        self.line_start = self.at;
        self.line_len = 0;
        self.skipping_header = false;
        Ok(Some(&chunk[nl + 1..]))
    }

    /// Checks `chunk` (the next bytes of the owned lines) and calls `keep`
    /// with the part to decode (all of it but a header line).
    fn pass(
        &mut self,
        mut chunk: &[u8],
        name: &str,
        at: &Cell<Option<Where>>,
        too_long: &dyn Fn(u64) -> TaskError,
        keep: &mut dyn FnMut(&[u8]) -> Result<(), TaskError>,
    ) -> Result<(), TaskError> {
        if self.skipping_header {
            match self.skip_header(chunk, too_long)? {
                Some(rest) => chunk = rest,
                None => return Ok(()),
            }
        }
        if chunk.is_empty() {
            return Ok(());
        }
        let mut prev = 0usize;
        if self.quoting != Quoting::Quoted && memchr::memchr(b'"', chunk).is_none() {
            for nl in memchr::memchr_iter(b'\n', chunk) {
                self.line_break(nl, &mut prev, too_long)?;
            }
            self.quoting = match chunk[chunk.len() - 1] {
                b'\n' => Quoting::FieldStart,
                b if b == self.delimiter => Quoting::FieldStart,
                _ => Quoting::Plain,
            };
        } else {
            // Only quotes, delimiters and line breaks change the state; a
            // gap between two of them is plain bytes.
            let mut last: Option<usize> = None;
            for i in memchr::memchr3_iter(b'"', self.delimiter, b'\n', chunk) {
                let gap = match last {
                    Some(l) => i > l + 1,
                    None => i > 0,
                };
                if gap {
                    self.quoting = match self.quoting {
                        Quoting::FieldStart | Quoting::Plain | Quoting::QuoteInQuoted => {
                            Quoting::Plain
                        }
                        Quoting::Quoted => Quoting::Quoted,
                    };
                }
                last = Some(i);
                let b = chunk[i];
                if b == b'"' {
                    self.quoting = match self.quoting {
                        Quoting::FieldStart => Quoting::Quoted,
                        Quoting::Plain => Quoting::Plain,
                        Quoting::Quoted => Quoting::QuoteInQuoted,
                        Quoting::QuoteInQuoted => Quoting::Quoted,
                    };
                } else if b == b'\n' {
                    if self.quoting == Quoting::Quoted {
                        at.set(Some(Where::Byte(self.line_start)));
                        return Err(TaskError::InvalidData {
                            detail: format!(
                                "{name}: a quoted field holds a line break; CSV is read line by line (a split owns the lines that start in it), so the file cannot be read without losing or inventing records: remove the line breaks from its fields"
                            ),
                        });
                    }
                    self.quoting = Quoting::FieldStart;
                    self.line_break(i, &mut prev, too_long)?;
                } else if self.quoting != Quoting::Quoted {
                    self.quoting = Quoting::FieldStart;
                }
            }
            let trailing = match last {
                Some(l) => chunk.len() > l + 1,
                None => true,
            };
            if trailing && self.quoting != Quoting::Quoted {
                self.quoting = Quoting::Plain;
            }
        }
        let rest = chunk.len() - prev;
        self.line_len += rest;
        self.at += rest as u64;
        if self.line_len > MAX_LINE_BYTES {
            return Err(too_long(self.line_start));
        }
        keep(chunk)
    }

    /// The line break at `chunk[nl]` ends the current line.
    fn line_break(
        &mut self,
        nl: usize,
        prev: &mut usize,
        too_long: &dyn Fn(u64) -> TaskError,
    ) -> Result<(), TaskError> {
        let n = nl + 1 - *prev;
        if self.line_len + n > MAX_LINE_BYTES {
            return Err(too_long(self.line_start));
        }
        self.at += n as u64;
        self.line_start = self.at;
        self.line_len = 0;
        *prev = nl + 1;
        Ok(())
    }

    /// At the end of the owned lines: a last line left inside a quote.
    fn end(&self, name: &str, at: &Cell<Option<Where>>) -> Result<(), TaskError> {
        if self.quoting == Quoting::Quoted {
            at.set(Some(Where::Byte(self.line_start)));
            return Err(TaskError::InvalidData {
                detail: format!(
                    "{name}: a quoted field is not closed before the end of the split's last line"
                ),
            });
        }
        Ok(())
    }
}

/// Reads the lines `split` owns as CSV of `csv`'s layout, emitting
/// batches of at most [`BATCH_ROWS`] rows with the columns `csv.read` in
/// that order and their declared types.
///
/// # Errors
///
/// [`TaskError::Split`] for a file outside the grants, not a regular file,
/// or with a line over [`MAX_LINE_BYTES`]; [`TaskError::Io`] for a file
/// that cannot be read; [`TaskError::InvalidData`] naming the file, the
/// line (1-based, every line of the file counted: the header and empty
/// ones too) and, for a value that does not parse, the column (name,
/// 1-based position, declared type) and the value, for a line with
/// another number of fields, a field that is not UTF-8, a quoted line
/// break; and whatever `emit` returns.
pub fn read_split(
    split: &SplitData,
    grants: Option<&Grants>,
    csv: &TypedCsv,
    vertex: &str,
    emit: impl FnMut(RecordBatch) -> Result<(), TaskError>,
) -> Result<(), TaskError> {
    let at = Cell::new(None);
    let detail = match read_lines(split, grants, csv, vertex, &at, emit) {
        // arrow-csv does not always say which column a value that does not
        // parse is in (nor which value, for a decimal): read the split again
        // as text and cast column by column to find it (the task fails
        // either way).
        Err(TaskError::InvalidData { detail }) if detail.contains("Parser error") => {
            match diagnose(split, grants, csv, vertex) {
                Some((record, found)) => {
                    at.set(Some(Where::Record(record)));
                    found
                }
                None => detail,
            }
        }
        Err(TaskError::InvalidData { detail }) => detail,
        other => return other,
    };
    let name = split_name(split);
    let line = at
        .get()
        .and_then(|w| line_of(split, grants, csv.header, w))
        .map(|l| format!(" line {l}"))
        .unwrap_or_default();
    // Every message of `read_lines` and `diagnose` starts with `name`.
    let detail = match detail.strip_prefix(name.as_str()) {
        Some(rest) => format!("{name}{line}{rest}"),
        None => detail,
    };
    Err(TaskError::InvalidData { detail })
}

/// What messages call `split`'s input: its file, or `split ID` for an
/// inline split.
fn split_name(split: &SplitData) -> String {
    match &split.payload {
        SplitPayloadData::FileRange { path, .. } => path.display().to_string(),
        SplitPayloadData::Inline(_) => format!("split {}", split.id),
    }
}

/// The first value of `split` that does not parse as its column's
/// declared type: its record (0-based among the split's records) and a
/// message naming the file, the column (1-based position, name, declared
/// type) and the value; `None` if every value parses.
fn diagnose(
    split: &SplitData,
    grants: Option<&Grants>,
    csv: &TypedCsv,
    vertex: &str,
) -> Option<(usize, String)> {
    let text = TypedCsv {
        fields: csv
            .fields
            .iter()
            .map(|(n, _)| (n.clone(), DataType::Utf8))
            .collect(),
        ..csv.clone()
    };
    let name = split_name(split);
    let mut row = 0usize;
    let mut found = None;
    let options = arrow_cast::CastOptions {
        safe: false,
        ..Default::default()
    };
    let _ = read_lines(split, grants, &text, vertex, &Cell::new(None), |batch| {
        if found.is_some() {
            return Ok(());
        }
        // The first bad row of the batch, whichever column it is in.
        let mut first: Option<(usize, String)> = None;
        for (c, &field) in csv.read.iter().enumerate() {
            let (column, ty) = &csv.fields[field];
            let values = batch.column(c);
            // A decimal by the reader's own rule (rounded, no spaces), not
            // arrow-cast's (which trims spaces).
            let parses = |one: &arrow_array::StringArray| match *ty {
                DataType::Decimal128(p, s) => (0..one.len()).all(|i| {
                    one.is_null(i) || decimal_text::parse_rounded(one.value(i), p, s).is_some()
                }),
                _ => arrow_cast::cast_with_options(one, ty, &options).is_ok(),
            };
            if parses(values.as_string::<i32>()) {
                continue;
            }
            let strings = arrow_array::cast::AsArray::as_string::<i32>(values.as_ref());
            let limit = first
                .as_ref()
                .map_or(arrow_array::Array::len(strings), |f| f.0);
            for i in 0..limit {
                if arrow_array::Array::is_null(strings, i) {
                    continue;
                }
                let one = arrow_array::StringArray::from(vec![strings.value(i)]);
                if !parses(&one) {
                    let ty = sql_type_name(ty);
                    first = Some((
                        i,
                        format!(
                            "{name}, column {} `{column}` ({ty}): {} is not a valid {ty}",
                            field + 1,
                            super::quote_value(strings.value(i)),
                        ),
                    ));
                    break;
                }
            }
        }
        match first {
            Some((i, message)) => found = Some((row + i, message)),
            None => row += batch.num_rows(),
        }
        Ok(())
    });
    found
}

/// The line number (1-based, as a text editor counts: every line of the
/// file, the header and empty ones included) of `at` in `split`'s input:
/// the `n`-th record the split owns (its lines that start in its byte
/// range, but a header at byte 0 and empty lines, as [`read_split`] feeds
/// them to arrow-csv), or the line that starts at a byte. Reads the file
/// from its start, once, when a task fails; `None` if it cannot be read
/// or holds no such line.
fn line_of(split: &SplitData, grants: Option<&Grants>, header: bool, at: Where) -> Option<u64> {
    let (mut input, start): (Box<dyn BufRead>, u64) = match &split.payload {
        SplitPayloadData::Inline(text) => (Box::new(std::io::Cursor::new(text.clone())), 0),
        SplitPayloadData::FileRange { path, start, .. } => {
            let file = super::source::open_split_file(split, path, grants).ok()?;
            (Box::new(BufReader::with_capacity(1 << 20, file)), *start)
        }
    };
    let header = header && matches!(split.payload, SplitPayloadData::FileRange { .. });
    let mut buf = Vec::new();
    let (mut offset, mut number, mut records) = (0u64, 1u64, 0usize);
    loop {
        buf.clear();
        let n = (&mut input)
            .take(MAX_LINE_BYTES as u64 + 1)
            .read_until(b'\n', &mut buf)
            .ok()?;
        if n == 0 {
            return None;
        }
        match at {
            Where::Byte(b) if offset == b => return Some(number),
            Where::Byte(b) if offset > b => return None,
            Where::Byte(_) => {}
            Where::Record(k) => {
                let empty = buf.iter().all(|&c| c == b'\n' || c == b'\r');
                if offset >= start && !(header && offset == 0) && !empty {
                    if records == k {
                        return Some(number);
                    }
                    records += 1;
                }
            }
        }
        offset += n as u64;
        if buf.last() == Some(&b'\n') {
            number += 1;
        }
    }
}

/// [`read_split`] without the diagnosis.
fn read_lines(
    split: &SplitData,
    grants: Option<&Grants>,
    csv: &TypedCsv,
    vertex: &str,
    at: &Cell<Option<Where>>,
    mut emit: impl FnMut(RecordBatch) -> Result<(), TaskError>,
) -> Result<(), TaskError> {
    match &split.payload {
        SplitPayloadData::Inline(text) => {
            let name = format!("split {}", split.id);
            let mut lines = Lines::new(0, false, csv.delimiter);
            let mut decode = Decode::new(csv, name.clone(), vertex, 0, at)?;
            let too_long = |at: u64| TaskError::Split {
                split: split.id.clone(),
                reason: format!("its line at byte {at} is longer than {MAX_LINE_BYTES} bytes"),
            };
            lines.pass(text.as_bytes(), &name, at, &too_long, &mut |b| {
                decode.feed(b, &mut emit)
            })?;
            lines.end(&name, at)?;
            decode.finish(&mut emit)
        }
        SplitPayloadData::FileRange {
            path,
            start,
            length,
        } => {
            let io = |source| TaskError::Io {
                path: path.clone(),
                source,
            };
            let name = path.display().to_string();
            let file = super::source::open_split_file(split, path, grants)?;
            let plugin = grants.map_or("(host)", Grants::plugin);
            let too_long = |at: u64| TaskError::Split {
                split: split.id.clone(),
                reason: format!(
                    "plugin `{plugin}` named {name}, whose line at byte {at} is longer than {MAX_LINE_BYTES} bytes"
                ),
            };
            let mut f = BufReader::with_capacity(1 << 20, file);
            let end = start.saturating_add(*length);
            let pos = first_line_start(&mut f, *start, &too_long, &io)?;
            let mut lines = Lines::new(pos, csv.header && pos == 0, csv.delimiter);
            let mut decode = Decode::new(csv, name.clone(), vertex, pos, at)?;
            // No line starts in the range when the line that holds byte
            // start-1 runs to `end` or past it. Past `end`, only the rest of
            // the line that holds byte end-1 is read.
            let mut finishing = false;
            if pos < end {
                loop {
                    let chunk = f.fill_buf().map_err(io)?;
                    if chunk.is_empty() {
                        break;
                    }
                    let (take, done) = if finishing {
                        match memchr::memchr(b'\n', chunk) {
                            Some(nl) => (nl + 1, true),
                            None => (chunk.len(), false),
                        }
                    } else if lines.at + chunk.len() as u64 <= end {
                        (chunk.len(), false)
                    } else {
                        // `before`: the chunk's bytes before `end` (at least 1).
                        let before = (end - lines.at) as usize;
                        match memchr::memchr(b'\n', &chunk[before - 1..]) {
                            Some(nl) => (before + nl, true),
                            None => (chunk.len(), false),
                        }
                    };
                    let (piece, _) = chunk.split_at(take);
                    lines.pass(piece, &name, at, &too_long, &mut |b| {
                        decode.feed(b, &mut emit)
                    })?;
                    f.consume(take);
                    if done {
                        break;
                    }
                    if lines.at >= end {
                        finishing = true;
                        // The line that holds byte end-1 ended right at `end`.
                        if lines.line_len == 0 {
                            break;
                        }
                    }
                }
            }
            lines.end(&name, at)?;
            decode.finish(&mut emit)
        }
    }
}

/// Where the first line that starts at or after byte `start` of `f`
/// begins: the line that holds byte start-1 belongs to an earlier split.
fn first_line_start<R: BufRead + Seek>(
    f: &mut R,
    start: u64,
    too_long: &dyn Fn(u64) -> TaskError,
    io: &dyn Fn(std::io::Error) -> TaskError,
) -> Result<u64, TaskError> {
    if start == 0 {
        return Ok(0);
    }
    f.seek(SeekFrom::Start(start - 1)).map_err(io)?;
    let mut skipped = Vec::new();
    let n = f
        .by_ref()
        .take(MAX_LINE_BYTES as u64 + 1)
        .read_until(b'\n', &mut skipped)
        .map_err(io)?;
    if n > MAX_LINE_BYTES {
        return Err(too_long(start - 1));
    }
    Ok(start - 1 + n as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::types::Int64Type;

    fn layout(header: bool) -> TypedCsv {
        TypedCsv {
            delimiter: b',',
            header,
            fields: vec![
                ("k".into(), DataType::Utf8),
                ("v".into(), DataType::Int64),
                ("skip".into(), DataType::Utf8),
            ],
            read: vec![1, 0],
            operator: false,
        }
    }

    fn rows_of(
        path: &std::path::Path,
        start: u64,
        length: u64,
        csv: &TypedCsv,
    ) -> Result<Vec<(String, Option<i64>)>, TaskError> {
        let split = SplitData {
            id: format!("{start}"),
            payload: SplitPayloadData::FileRange {
                path: path.to_path_buf(),
                start,
                length,
            },
        };
        let mut rows = Vec::new();
        read_split(&split, None, csv, "v", |b| {
            let v = b.column(0).as_primitive::<Int64Type>();
            let k = b.column(1).as_string::<i32>();
            for i in 0..b.num_rows() {
                rows.push((k.value(i).to_string(), (!v.is_null(i)).then(|| v.value(i))));
            }
            Ok(())
        })?;
        Ok(rows)
    }

    #[test]
    fn ranges_cut_anywhere_give_every_record_once() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("t.csv");
        let text = "k,v,skip\na,1,x\n\nbb,22,y\r\nccc,,z\n\"d,d\",4,w";
        std::fs::write(&path, text).expect("write");
        let csv = layout(true);
        let whole = rows_of(&path, 0, text.len() as u64, &csv).expect("whole");
        assert_eq!(
            whole,
            vec![
                ("a".into(), Some(1)),
                ("bb".into(), Some(22)),
                ("ccc".into(), None),
                ("d,d".into(), Some(4)),
            ]
        );
        for cut in 1..text.len() as u64 {
            let mut rows = rows_of(&path, 0, cut, &csv).expect("left");
            rows.extend(rows_of(&path, cut, text.len() as u64 - cut, &csv).expect("right"));
            assert_eq!(rows, whole, "cut at {cut}");
        }
    }

    #[test]
    fn arrow_csv_59s_record_numbers_are_read_from_its_messages() {
        // The record decoder counts from 1, the value parser from 0.
        assert_eq!(
            arrow_record("Csv error: incorrect number of fields for line 3, expected 3 got 2"),
            Some(2)
        );
        assert_eq!(
            arrow_record("Csv error: Encountered invalid UTF-8 data for line 1 and field 2"),
            Some(0)
        );
        assert_eq!(
            arrow_record(
                "Parser error: Error while parsing value 'x' as type 'Int64' for column 1 at line 4. Row data: '[a,x]'"
            ),
            Some(4)
        );
        assert_eq!(
            arrow_record("Parser error: can't parse the string value x to decimal"),
            None
        );
    }

    #[test]
    fn a_bad_value_names_its_line_counted_from_the_start_of_the_file() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("t.csv");
        // Header, a record, an empty line, a CRLF line, the bad value.
        let text = "k,v,skip\na,1,x\n\nb,2,y\r\nc,zz,z\nd,4,w\n";
        std::fs::write(&path, text).expect("write");
        let want = format!(
            "{} line 5, column 2 `v` (bigint): `zz` is not a valid bigint",
            path.display()
        );
        // Read whole, and from a split that starts at the empty line.
        for start in [0, 15] {
            let e = rows_of(&path, start, text.len() as u64 - start, &layout(true))
                .expect_err("bad value");
            assert!(e.is_permanent(), "{e}");
            assert_eq!(e.to_string(), want, "split from byte {start}");
        }
        // A split that does not hold the bad line reads its own lines.
        assert_eq!(
            rows_of(&path, 0, 10, &layout(true))
                .expect("first line")
                .len(),
            1
        );
    }

    #[test]
    fn decimals_round_to_their_scale_and_a_bad_one_names_its_line_column_and_value() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("d.csv");
        let csv = TypedCsv {
            delimiter: b',',
            header: true,
            fields: vec![
                ("id".into(), DataType::Int64),
                ("salary".into(), DataType::Decimal128(10, 2)),
            ],
            read: vec![1, 0],
            operator: false,
        };
        let split = |len: usize| SplitData {
            id: "0".into(),
            payload: SplitPayloadData::FileRange {
                path: path.clone(),
                start: 0,
                length: len as u64,
            },
        };
        let read = |len: usize| {
            let mut rows = Vec::new();
            read_split(&split(len), None, &csv, "v", |b| {
                let d = b
                    .column(0)
                    .as_primitive::<arrow_array::types::Decimal128Type>();
                for i in 0..b.num_rows() {
                    rows.push((!d.is_null(i)).then(|| d.value(i)));
                }
                Ok(())
            })
            .map(|()| rows)
        };
        // arrow-csv alone reads 5.129 as 5.12 and -5.125 as -5.12.
        let text = "id,salary\n1,5.129\n2,-5.125\n3,\n4,7\n";
        std::fs::write(&path, text).expect("write");
        assert_eq!(
            read(text.len()).expect("rows"),
            vec![Some(513), Some(-513), None, Some(700)]
        );
        let text = "id,salary\n1,5.00\n\n2, 5.00 \n";
        std::fs::write(&path, text).expect("write");
        let e = read(text.len()).expect_err("spaces around a decimal");
        assert_eq!(
            e.to_string(),
            format!(
                "{} line 4, column 2 `salary` (decimal(10,2)): ` 5.00 ` is not a valid decimal(10,2)",
                path.display()
            )
        );
        let text = "id,salary\n1,99999999.995\n";
        std::fs::write(&path, text).expect("write");
        let e = read(text.len()).expect_err("too many digits once rounded");
        assert!(e.to_string().contains("line 2, column 2 `salary`"), "{e}");
    }

    #[test]
    fn a_quoted_line_break_and_a_bad_value_fail_naming_the_file() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("q.csv");
        std::fs::write(&path, "a,1,x\n\"two\nlines\",2,y\n").expect("write");
        let e = rows_of(&path, 0, 100, &layout(false)).expect_err("quoted line break");
        assert!(
            e.to_string()
                .contains("q.csv line 2: a quoted field holds a line break"),
            "{e}"
        );
        let bad = dir.path().join("bad.csv");
        std::fs::write(&bad, "a,1,x\nb,zz,y\n").expect("write");
        let e = rows_of(&bad, 0, 100, &layout(false)).expect_err("bad value");
        assert!(
            e.to_string().contains("bad.csv") && e.to_string().contains("`v`"),
            "{e}"
        );
        let short = dir.path().join("short.csv");
        std::fs::write(&short, "a,1\n").expect("write");
        let e = rows_of(&short, 0, 100, &layout(false)).expect_err("too few fields");
        assert!(e.to_string().contains("short.csv"), "{e}");
    }
}
