//! `fixed-width-reader`: a coordhost source reader
//! (`coordhost:reader/source-reader@0.1.0`) for fixed-width records, a
//! format DataFusion does not read: one record per line, each column a
//! fixed number of bytes, padded with spaces (COBOL copybooks, mainframe
//! exports, bank statements).
//!
//! # Config
//!
//! | key | meaning |
//! |---|---|
//! | `widths` | the width in bytes of each declared column, in declared order, comma-separated, e.g. `"6,12,10"` |
//!
//! # Records
//!
//! A split is a `file-range` of a file (its records are the lines that
//! *start* in the range, the Hadoop rule the host's CSV reader follows) or
//! inline text. Each line (`\n`, an optional `\r` before it dropped) is cut
//! into the columns by `widths`; each field is trimmed of spaces, and an
//! empty field is null. A line shorter than the widths' sum has its
//! missing trailing fields empty (editors strip trailing blanks); a longer
//! one, a field that is not UTF-8 or does not parse as its column's type is
//! an `invalid-split` error naming the split, the line's byte offset, the
//! column and the value. Empty lines are skipped.
//!
//! Types: `Int64`, `Int32`, `Float64`, `Utf8`, `Boolean` (`true`/`false`),
//! `Date32` (`YYYY-MM-DD`), `Decimal128(p, s)` (at most `s` fraction
//! digits, at most `p` digits in all).
//!
//! The file is read through the reader's own grants: the host preopens each
//! granted directory at its host path, so `std::fs` opens the split's
//! absolute path, and a file outside them cannot be opened.

#![allow(missing_docs, reason = "the generated bindings carry the WIT docs")]

mod bindings {
    wit_bindgen::generate!({
        path: "../../wit/reader",
        world: "source-reader-plugin",
    });
}

use std::cell::RefCell;
use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::sync::Arc;

use arrow_array::builder::{
    BooleanBuilder, Date32Builder, Decimal128Builder, Float64Builder, Int32Builder, Int64Builder,
    StringBuilder,
};
use arrow_array::{ArrayRef, RecordBatch, RecordBatchOptions};
use arrow_schema::{DataType, SchemaRef};
use bindings::coordhost::reader::types::{Error, Split, SplitPayload};
use bindings::exports::coordhost::reader::source_reader::{Guest, GuestSplitReader, SplitReader};

/// Rows per batch.
const BATCH_ROWS: usize = 8192;
/// Longest line read: 1 MiB.
const MAX_LINE_BYTES: usize = 1 << 20;

/// What `configure` set.
struct Settings {
    schema: SchemaRef,
    widths: Vec<usize>,
}

thread_local! {
    static SETTINGS: RefCell<Option<Arc<Settings>>> = const { RefCell::new(None) };
}

/// One line of a split: its byte offset in the file (or the inline text)
/// and its text without the line break.
struct Line {
    at: u64,
    bytes: Vec<u8>,
}

/// The reading of one split: its lines, read at `open`, handed out a
/// batch at a time.
struct Reader {
    settings: Arc<Settings>,
    split: String,
    lines: RefCell<std::vec::IntoIter<Line>>,
}

struct Component;

impl Guest for Component {
    type SplitReader = Reader;

    fn configure(config: Vec<(String, String)>, schema: Vec<u8>) -> Result<(), Error> {
        let schema = arrow_ipc::reader::StreamReader::try_new(std::io::Cursor::new(schema), None)
            .map_err(|e| Error::InvalidConfig(format!("the declared schema does not decode: {e}")))?
            .schema();
        let mut widths = None;
        for (k, v) in config {
            match k.as_str() {
                "widths" => {
                    let parsed: Result<Vec<usize>, _> =
                        v.split(',').map(|w| w.trim().parse::<usize>()).collect();
                    match parsed {
                        Ok(w) if w.iter().all(|&n| n >= 1) => widths = Some(w),
                        _ => {
                            return Err(Error::InvalidConfig(format!(
                                "`widths`: `{v}` is not a comma-separated list of widths of at least 1 byte"
                            )));
                        }
                    }
                }
                other => return Err(Error::InvalidConfig(format!("unknown key `{other}`"))),
            }
        }
        let widths = widths.ok_or_else(|| {
            Error::InvalidConfig("`widths` is missing: the width in bytes of each column".into())
        })?;
        if widths.len() != schema.fields().len() {
            return Err(Error::InvalidConfig(format!(
                "`widths` gives {} widths, but the table declares {} columns",
                widths.len(),
                schema.fields().len()
            )));
        }
        for f in schema.fields() {
            match f.data_type() {
                DataType::Int64
                | DataType::Int32
                | DataType::Float64
                | DataType::Utf8
                | DataType::Boolean
                | DataType::Date32
                | DataType::Decimal128(_, _) => {}
                other => {
                    return Err(Error::InvalidConfig(format!(
                        "column `{}`: type {other} is not one this reader parses",
                        f.name()
                    )));
                }
            }
        }
        SETTINGS.with(|s| *s.borrow_mut() = Some(Arc::new(Settings { schema, widths })));
        Ok(())
    }
}

impl GuestSplitReader for Reader {
    fn open(split: Split) -> Result<SplitReader, Error> {
        let settings = SETTINGS
            .with(|s| s.borrow().clone())
            .ok_or_else(|| Error::Other("`open` before `configure`".into()))?;
        let (name, lines) = match split.payload {
            SplitPayload::FileRange(r) => {
                let lines = read_range(&r.path, r.start, r.length)
                    .map_err(|e| Error::Io(format!("split `{}`: {e}", split.id)))?;
                (format!("split `{}` ({})", split.id, r.path), lines)
            }
            SplitPayload::Inline(text) => {
                let mut at = 0u64;
                let lines = text
                    .split_inclusive('\n')
                    .map(|l| {
                        let line = Line {
                            at,
                            bytes: strip_break(l.as_bytes()).to_vec(),
                        };
                        at += l.len() as u64;
                        line
                    })
                    .collect();
                (format!("split `{}`", split.id), lines)
            }
        };
        Ok(SplitReader::new(Reader {
            settings,
            split: name,
            lines: RefCell::new(lines.into_iter()),
        }))
    }

    fn next_batch(&self) -> Result<Option<Vec<u8>>, Error> {
        let mut lines = self.lines.borrow_mut();
        let mut columns: Vec<Column> = self
            .settings
            .schema
            .fields()
            .iter()
            .map(|f| Column::new(f.data_type()))
            .collect();
        let mut rows = 0;
        for line in lines.by_ref() {
            if line.bytes.is_empty() {
                continue;
            }
            self.parse_line(&line, &mut columns)?;
            rows += 1;
            if rows == BATCH_ROWS {
                break;
            }
        }
        if rows == 0 {
            return Ok(None);
        }
        let arrays: Vec<ArrayRef> = columns.into_iter().map(Column::finish).collect();
        let batch = RecordBatch::try_new_with_options(
            Arc::clone(&self.settings.schema),
            arrays,
            &RecordBatchOptions::new().with_row_count(Some(rows)),
        )
        .map_err(|e| Error::Other(format!("cannot make a batch: {e}")))?;
        let mut out = Vec::new();
        {
            let mut w = arrow_ipc::writer::StreamWriter::try_new(&mut out, &self.settings.schema)
                .map_err(|e| Error::Other(format!("cannot write a batch: {e}")))?;
            w.write(&batch)
                .map_err(|e| Error::Other(format!("cannot write a batch: {e}")))?;
            w.finish()
                .map_err(|e| Error::Other(format!("cannot write a batch: {e}")))?;
        }
        Ok(Some(out))
    }
}

impl Reader {
    /// Cuts `line` into its fields and appends each to its column.
    fn parse_line(&self, line: &Line, columns: &mut [Column]) -> Result<(), Error> {
        let total: usize = self.settings.widths.iter().sum();
        let bad = |what: String| {
            Error::InvalidSplit(format!("{}, line at byte {}: {what}", self.split, line.at))
        };
        if line.bytes.len() > total {
            return Err(bad(format!(
                "{} bytes, longer than the {total} the widths add up to",
                line.bytes.len()
            )));
        }
        let mut from = 0;
        for ((width, field), column) in self
            .settings
            .widths
            .iter()
            .zip(self.settings.schema.fields())
            .zip(columns.iter_mut())
        {
            let to = (from + width).min(line.bytes.len());
            let raw = line.bytes.get(from.min(to)..to).unwrap_or_default();
            from += width;
            let text = std::str::from_utf8(raw)
                .map_err(|_| bad(format!("column `{}` is not UTF-8", field.name())))?
                .trim_matches(' ');
            column
                .push(text)
                .map_err(|e| bad(format!("column `{}`: `{text}` {e}", field.name())))?;
        }
        Ok(())
    }
}

/// `line` without its `\n` and a `\r` before it.
fn strip_break(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// The lines that start in `[start, start + length)` of `path`.
fn read_range(path: &str, start: u64, length: u64) -> Result<Vec<Line>, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("cannot open {path}: {e}"))?;
    let mut f = BufReader::with_capacity(1 << 16, file);
    let io = |e: std::io::Error| format!("cannot read {path}: {e}");
    let end = start.saturating_add(length);
    let mut pos = start;
    let mut buf = Vec::new();
    if start > 0 {
        // The line that holds byte start-1 belongs to an earlier split.
        f.seek(SeekFrom::Start(start - 1)).map_err(io)?;
        let n = read_line(&mut f, &mut buf, path, start - 1)?;
        pos = start - 1 + n as u64;
    }
    let mut lines = Vec::new();
    while pos < end {
        buf.clear();
        let n = read_line(&mut f, &mut buf, path, pos)?;
        if n == 0 {
            break;
        }
        lines.push(Line {
            at: pos,
            bytes: strip_break(&buf).to_vec(),
        });
        pos += n as u64;
    }
    Ok(lines)
}

/// Reads one line (with its `\n`) into `buf`; its length in bytes.
fn read_line(
    f: &mut BufReader<std::fs::File>,
    buf: &mut Vec<u8>,
    path: &str,
    at: u64,
) -> Result<usize, String> {
    use std::io::Read;
    let n = f
        .by_ref()
        .take(MAX_LINE_BYTES as u64 + 1)
        .read_until(b'\n', buf)
        .map_err(|e| format!("cannot read {path}: {e}"))?;
    if n > MAX_LINE_BYTES {
        return Err(format!(
            "{path}: the line at byte {at} is longer than {MAX_LINE_BYTES} bytes"
        ));
    }
    Ok(n)
}

/// A column being built.
enum Column {
    Int64(Int64Builder),
    Int32(Int32Builder),
    Float64(Float64Builder),
    Utf8(StringBuilder),
    Boolean(BooleanBuilder),
    Date32(Date32Builder),
    Decimal(Decimal128Builder, u8, i8),
}

impl Column {
    fn new(t: &DataType) -> Self {
        match t {
            DataType::Int64 => Self::Int64(Int64Builder::new()),
            DataType::Int32 => Self::Int32(Int32Builder::new()),
            DataType::Float64 => Self::Float64(Float64Builder::new()),
            DataType::Boolean => Self::Boolean(BooleanBuilder::new()),
            DataType::Date32 => Self::Date32(Date32Builder::new()),
            DataType::Decimal128(p, s) => Self::Decimal(Decimal128Builder::new(), *p, *s),
            // `configure` refused every other type.
            _ => Self::Utf8(StringBuilder::new()),
        }
    }

    /// Appends the field `text` (trimmed; empty is null).
    fn push(&mut self, text: &str) -> Result<(), String> {
        let empty = text.is_empty();
        match self {
            Self::Utf8(b) if empty => b.append_null(),
            Self::Utf8(b) => b.append_value(text),
            Self::Int64(b) if empty => b.append_null(),
            Self::Int64(b) => b.append_value(text.parse().map_err(|_| "is not a bigint")?),
            Self::Int32(b) if empty => b.append_null(),
            Self::Int32(b) => b.append_value(text.parse().map_err(|_| "is not an int")?),
            Self::Float64(b) if empty => b.append_null(),
            Self::Float64(b) => b.append_value(text.parse().map_err(|_| "is not a double")?),
            Self::Boolean(b) if empty => b.append_null(),
            Self::Boolean(b) => b.append_value(match text {
                "true" => true,
                "false" => false,
                _ => return Err("is not `true` or `false`".into()),
            }),
            Self::Date32(b) if empty => b.append_null(),
            Self::Date32(b) => b.append_value(parse_date(text).ok_or("is not a YYYY-MM-DD date")?),
            Self::Decimal(b, _, _) if empty => b.append_null(),
            Self::Decimal(b, p, s) => b.append_value(parse_decimal(text, *p, *s)?),
        }
        Ok(())
    }

    fn finish(self) -> ArrayRef {
        match self {
            Self::Int64(mut b) => Arc::new(b.finish()),
            Self::Int32(mut b) => Arc::new(b.finish()),
            Self::Float64(mut b) => Arc::new(b.finish()),
            Self::Utf8(mut b) => Arc::new(b.finish()),
            Self::Boolean(mut b) => Arc::new(b.finish()),
            Self::Date32(mut b) => Arc::new(b.finish()),
            Self::Decimal(mut b, p, s) => Arc::new(
                b.finish()
                    .with_precision_and_scale(p, s)
                    .unwrap_or_else(|_| unreachable_precision()),
            ),
        }
    }
}

/// The host declares only decimals Arrow has (precision 1..=38, scale
/// 0..=precision), so `with_precision_and_scale` cannot fail.
fn unreachable_precision() -> arrow_array::Decimal128Array {
    panic!("the declared decimal type is not one Arrow has")
}

/// Days since 1970-01-01 of `YYYY-MM-DD` (proleptic Gregorian).
fn parse_date(text: &str) -> Option<i32> {
    let mut parts = text.split('-');
    let (y, m, d) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || y.len() != 4 || m.len() != 2 || d.len() != 2 {
        return None;
    }
    let (y, m, d): (i64, i64, i64) = (y.parse().ok()?, m.parse().ok()?, d.parse().ok()?);
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let days_in = [
        31,
        if leap { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    if !(1..=12).contains(&m) || d < 1 || d > days_in[(m - 1) as usize] {
        return None;
    }
    // Days from civil (Howard Hinnant's algorithm, in my own words: count
    // from a March-based year so the leap day ends the year).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    i32::try_from(era * 146_097 + doe - 719_468).ok()
}

/// The unscaled value of the decimal `text` at scale `s`, of at most `p` digits.
fn parse_decimal(text: &str, p: u8, s: i8) -> Result<i128, String> {
    let bad = || format!("is not a decimal({p},{s})");
    let (neg, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
    let scale = usize::try_from(s).map_err(|_| bad())?;
    if int.is_empty() && frac.is_empty()
        || !int.bytes().all(|b| b.is_ascii_digit())
        || !frac.bytes().all(|b| b.is_ascii_digit())
        || frac.len() > scale
    {
        return Err(bad());
    }
    let int = int.trim_start_matches('0');
    if int.len() + scale > usize::from(p) {
        return Err(bad());
    }
    let mut v: i128 = 0;
    for b in int.bytes().chain(frac.bytes()) {
        v = v * 10 + i128::from(b - b'0');
    }
    for _ in frac.len()..scale {
        v *= 10;
    }
    Ok(if neg { -v } else { v })
}

bindings::export!(Component with_types_in bindings);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_and_decimals_parse() {
        assert_eq!(parse_date("1970-01-01"), Some(0));
        assert_eq!(parse_date("2000-03-01"), Some(11_017));
        assert_eq!(parse_date("1969-12-31"), Some(-1));
        assert_eq!(parse_date("2001-02-29"), None);
        assert_eq!(parse_decimal("12.5", 15, 2), Ok(1250));
        assert_eq!(parse_decimal("-0.07", 15, 2), Ok(-7));
        assert!(parse_decimal("1.234", 15, 2).is_err());
        assert!(parse_decimal("x", 15, 2).is_err());
    }
}
