//! `{{name}}`: a coordhost source reader (world `source-reader-plugin` of
//! `wit/reader.wit`, package `coordhost:reader`).
//!
//! It reads `key=value` log lines ("logfmt"), one record per line:
//!
//! ```text
//! level=info status=200 ms=12.5 path=/ cached=true
//! ```
//!
//! Each declared column takes the value of the key of its name (a key the
//! table does not declare is ignored, a declared key the line lacks is
//! null). Column types: `bigint`, `double`, `varchar`, `boolean`. A word
//! without `=`, or a value that does not parse as its column's type, is the
//! error value `invalid-split` naming the split, the file and the line's
//! byte offset. No config keys.
//!
//! The batch shape: `configure` gets the table's declared schema as an
//! Arrow IPC stream without batches; each `next-batch` answers an Arrow IPC
//! stream of that schema holding one batch (`None` when the split is done).
//! The host checks every batch.
//!
//! The rules (coordhost's docs/write-a-plugin.md): a `file-range` split
//! holds the lines that *start* in its byte range (the split enumerator cuts
//! files anywhere); the same split must always give the same batches
//! (recovery re-reads splits); expected failures are error values, never
//! panics (a panic is a trap and fails the task).

mod bindings {
    wit_bindgen::generate!({
        path: "wit",
        world: "source-reader-plugin",
    });
}

use std::cell::RefCell;
use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::sync::Arc;

use arrow_array::builder::{BooleanBuilder, Float64Builder, Int64Builder, StringBuilder};
use arrow_array::{ArrayRef, RecordBatch, RecordBatchOptions};
use arrow_schema::{DataType, SchemaRef};
use bindings::coordhost::reader::types::{Error, Split, SplitPayload};
use bindings::exports::coordhost::reader::source_reader::{Guest, GuestSplitReader, SplitReader};

/// Rows per batch.
const BATCH_ROWS: usize = 4096;

thread_local! {
    /// The declared schema; one instance reads one split at a time.
    static SCHEMA: RefCell<Option<SchemaRef>> = const { RefCell::new(None) };
}

/// The component: what `export!` binds the exported interface to.
struct Component;

impl Guest for Component {
    type SplitReader = Reader;

    fn configure(config: Vec<(String, String)>, schema: Vec<u8>) -> Result<(), Error> {
        if let Some((key, _)) = config.first() {
            return Err(Error::InvalidConfig(format!(
                "unknown key `{key}`; this reader takes no configuration"
            )));
        }
        let schema = arrow_ipc::reader::StreamReader::try_new(std::io::Cursor::new(schema), None)
            .map_err(|e| Error::InvalidConfig(format!("the declared schema does not decode: {e}")))?
            .schema();
        for f in schema.fields() {
            if !matches!(
                f.data_type(),
                DataType::Int64 | DataType::Float64 | DataType::Utf8 | DataType::Boolean
            ) {
                return Err(Error::InvalidConfig(format!(
                    "column `{}`: type {} is not one this reader reads (bigint, double, varchar, boolean)",
                    f.name(),
                    f.data_type()
                )));
            }
        }
        SCHEMA.with(|s| *s.borrow_mut() = Some(schema));
        Ok(())
    }
}

/// The reading of one split: its lines (byte offset, text), read at `open`.
struct Reader {
    schema: SchemaRef,
    split: String,
    lines: RefCell<std::vec::IntoIter<(u64, String)>>,
}

impl GuestSplitReader for Reader {
    fn open(split: Split) -> Result<SplitReader, Error> {
        let schema = SCHEMA
            .with(|s| s.borrow().clone())
            .ok_or_else(|| Error::Other("`open` before `configure`".into()))?;
        let (name, lines) = match split.payload {
            SplitPayload::FileRange(r) => {
                let name = format!("split `{}` ({})", split.id, r.path);
                let lines = read_range(&r.path, r.start, r.length)
                    .map_err(|e| Error::Io(format!("{name}: cannot read {}: {e}", r.path)))?;
                (name, lines)
            }
            SplitPayload::Inline(text) => {
                let mut at = 0;
                let mut lines = Vec::new();
                for line in text.split_inclusive('\n') {
                    lines.push((at, line.to_string()));
                    at += line.len() as u64;
                }
                (format!("split `{}` (inline)", split.id), lines)
            }
        };
        Ok(SplitReader::new(Reader {
            schema,
            split: name,
            lines: RefCell::new(lines.into_iter()),
        }))
    }

    fn next_batch(&self) -> Result<Option<Vec<u8>>, Error> {
        let mut columns: Vec<Column> = self
            .schema
            .fields()
            .iter()
            .map(|f| Column::new(f.data_type()))
            .collect();
        let mut rows = 0;
        for (at, line) in self.lines.borrow_mut().by_ref() {
            let line = line.trim_end_matches(['\n', '\r']);
            if line.trim().is_empty() {
                continue;
            }
            self.parse(at, line, &mut columns)?;
            rows += 1;
            if rows == BATCH_ROWS {
                break;
            }
        }
        if rows == 0 {
            return Ok(None);
        }
        let arrays: Vec<ArrayRef> = columns.into_iter().map(Column::finish).collect();
        let other = |e: arrow_schema::ArrowError| Error::Other(format!("cannot write a batch: {e}"));
        let batch = RecordBatch::try_new_with_options(
            Arc::clone(&self.schema),
            arrays,
            &RecordBatchOptions::new().with_row_count(Some(rows)),
        )
        .map_err(other)?;
        let mut out = Vec::new();
        let mut writer =
            arrow_ipc::writer::StreamWriter::try_new(&mut out, &self.schema).map_err(other)?;
        writer.write(&batch).map_err(other)?;
        writer.finish().map_err(other)?;
        drop(writer);
        Ok(Some(out))
    }
}

impl Reader {
    /// Appends the record of `line` (at byte `at`) to `columns`.
    fn parse(&self, at: u64, line: &str, columns: &mut [Column]) -> Result<(), Error> {
        let bad = |what: String| {
            Error::InvalidSplit(format!("{}, line at byte {at}: {what}: `{line}`", self.split))
        };
        let mut values: Vec<Option<&str>> = vec![None; columns.len()];
        for word in line.split_whitespace() {
            let (key, value) = word
                .split_once('=')
                .ok_or_else(|| bad(format!("`{word}` is not key=value")))?;
            if let Some(i) = self.schema.fields().iter().position(|f| f.name() == key) {
                values[i] = Some(value);
            }
        }
        for ((column, value), field) in columns.iter_mut().zip(values).zip(self.schema.fields()) {
            column
                .push(value)
                .map_err(|why| bad(format!("`{}`: {why}", field.name())))?;
        }
        Ok(())
    }
}

/// The lines (byte offset, text) that start in `[start, start + length)`
/// of `path`: the line holding byte `start - 1` belongs to the split before.
fn read_range(path: &str, start: u64, length: u64) -> std::io::Result<Vec<(u64, String)>> {
    let mut file = BufReader::new(std::fs::File::open(path)?);
    let mut pos = start;
    let mut buf = String::new();
    if start > 0 {
        file.seek(SeekFrom::Start(start - 1))?;
        pos = start - 1 + file.read_line(&mut buf)? as u64;
    }
    let mut lines = Vec::new();
    while pos < start + length {
        buf.clear();
        let n = file.read_line(&mut buf)?;
        if n == 0 {
            break;
        }
        lines.push((pos, buf.clone()));
        pos += n as u64;
    }
    Ok(lines)
}

/// A column being built.
enum Column {
    Int64(Int64Builder),
    Float64(Float64Builder),
    Utf8(StringBuilder),
    Boolean(BooleanBuilder),
}

impl Column {
    fn new(t: &DataType) -> Self {
        match t {
            DataType::Int64 => Self::Int64(Int64Builder::new()),
            DataType::Float64 => Self::Float64(Float64Builder::new()),
            DataType::Boolean => Self::Boolean(BooleanBuilder::new()),
            // `configure` refused every other type.
            _ => Self::Utf8(StringBuilder::new()),
        }
    }

    /// Appends `value` (`None`: the line has no such key, a null).
    fn push(&mut self, value: Option<&str>) -> Result<(), String> {
        match (self, value) {
            (Self::Int64(b), None) => b.append_null(),
            (Self::Int64(b), Some(v)) => b.append_value(v.parse().map_err(|_| "not a bigint")?),
            (Self::Float64(b), None) => b.append_null(),
            (Self::Float64(b), Some(v)) => b.append_value(v.parse().map_err(|_| "not a double")?),
            (Self::Utf8(b), v) => b.append_option(v),
            (Self::Boolean(b), None) => b.append_null(),
            (Self::Boolean(b), Some("true")) => b.append_value(true),
            (Self::Boolean(b), Some("false")) => b.append_value(false),
            (Self::Boolean(_), Some(_)) => return Err("not `true` or `false`".into()),
        }
        Ok(())
    }

    fn finish(self) -> ArrayRef {
        match self {
            Self::Int64(mut b) => Arc::new(b.finish()),
            Self::Float64(mut b) => Arc::new(b.finish()),
            Self::Utf8(mut b) => Arc::new(b.finish()),
            Self::Boolean(mut b) => Arc::new(b.finish()),
        }
    }
}

bindings::export!(Component with_types_in bindings);
