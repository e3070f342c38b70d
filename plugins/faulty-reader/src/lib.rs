//! A test source reader (`coordhost:reader/source-reader@0.1.0`) that
//! misbehaves as its config's `mode` says, so the host's checks can be
//! tested on the real path (`coordhost run`):
//!
//! - `wrong-schema`: answers a batch of one `Utf8` column `x`, whatever
//!   the table declares.
//! - `trap`: panics in `next-batch` (a trap).
//! - `slow`: loops for ever in `next-batch` (the call deadline stops it).
//! - `escape`: reads the file its config's `path` names (meant to lie
//!   outside its grants) and answers `io` when it cannot.
//! - `endless`: answers empty batches for ever (the host's per-split
//!   bound stops it).
//!
//! The modes below read a split's lines (those that start in its byte
//! range; an inline split's lines), each a decimal integer, into the first
//! declared column (which must be `Int64`; the others are null), and break
//! one rule each, for the checks of `coordhost plugin test`:
//!
//! - `lines`: breaks none (the reference the others differ from).
//! - `nondeterministic`: adds to each value how many splits this instance
//!   read before (a second read of the same split differs).
//! - `whole-file`: reads the whole file whatever the range says.
//! - `panicky`: panics where it should answer an error value: a file it
//!   cannot open, a line that is not an integer.
//! - `vague`: refuses a line that is not an integer with `invalid-split`
//!   naming neither the split nor the file.

#![allow(missing_docs, reason = "the generated bindings carry the WIT docs")]

mod bindings {
    wit_bindgen::generate!({
        path: "../../wit/reader",
        world: "source-reader-plugin",
    });
}

use std::cell::RefCell;
use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use bindings::coordhost::reader::types::{Error, Split, SplitPayload};
use bindings::exports::coordhost::reader::source_reader::{Guest, GuestSplitReader, SplitReader};

thread_local! {
    static MODE: RefCell<String> = RefCell::new(String::new());
    static PATH: RefCell<String> = RefCell::new(String::new());
    static DECLARED: RefCell<Option<Arc<Schema>>> = const { RefCell::new(None) };
    /// Splits this instance opened (the `nondeterministic` mode adds it).
    static OPENED: std::cell::Cell<i64> = const { std::cell::Cell::new(0) };
}

/// The modes that read lines of integers.
const LINE_MODES: [&str; 5] = [
    "lines",
    "nondeterministic",
    "whole-file",
    "panicky",
    "vague",
];

struct Component;

/// One split's reading: for the line modes, the batch still to answer.
struct Reader {
    batch: RefCell<Option<Vec<u8>>>,
}

impl Guest for Component {
    type SplitReader = Reader;

    fn configure(config: Vec<(String, String)>, schema: Vec<u8>) -> Result<(), Error> {
        let declared = arrow_ipc::reader::StreamReader::try_new(std::io::Cursor::new(schema), None)
            .map_err(|e| Error::InvalidConfig(format!("the declared schema does not decode: {e}")))?
            .schema();
        DECLARED.with(|d| *d.borrow_mut() = Some(declared));
        for (k, v) in config {
            match (k.as_str(), v.as_str()) {
                ("mode", "wrong-schema" | "trap" | "slow" | "escape" | "endless") => {
                    MODE.with(|m| *m.borrow_mut() = v.clone());
                }
                ("mode", m) if LINE_MODES.contains(&m) => {
                    MODE.with(|m| *m.borrow_mut() = v.clone());
                }
                ("mode", other) => {
                    return Err(Error::InvalidConfig(format!("unknown mode `{other}`")));
                }
                ("path", _) => PATH.with(|p| *p.borrow_mut() = v.clone()),
                (other, _) => return Err(Error::InvalidConfig(format!("unknown key `{other}`"))),
            }
        }
        Ok(())
    }
}

impl GuestSplitReader for Reader {
    fn open(split: Split) -> Result<SplitReader, Error> {
        let mode = MODE.with(|m| m.borrow().clone());
        let batch = if LINE_MODES.contains(&mode.as_str()) {
            let opened = OPENED.with(|o| {
                o.set(o.get() + 1);
                o.get() - 1
            });
            Some(read_lines(&mode, &split, opened)?)
        } else {
            None
        };
        Ok(SplitReader::new(Reader {
            batch: RefCell::new(batch),
        }))
    }

    fn next_batch(&self) -> Result<Option<Vec<u8>>, Error> {
        let mode = MODE.with(|m| m.borrow().clone());
        if LINE_MODES.contains(&mode.as_str()) {
            return Ok(self.batch.borrow_mut().take());
        }
        match mode.as_str() {
            "trap" => panic!("faulty-reader: trap mode"),
            "slow" => {
                let mut n: u64 = 0;
                loop {
                    n = std::hint::black_box(n.wrapping_add(1));
                }
            }
            "escape" => {
                let path = PATH.with(|p| p.borrow().clone());
                match std::fs::read(&path) {
                    Ok(bytes) => Err(Error::Other(format!(
                        "read {} bytes of {path}, which should not be granted",
                        bytes.len()
                    ))),
                    Err(e) => Err(Error::Io(format!("cannot read {path}: {e}"))),
                }
            }
            "endless" => {
                let schema = DECLARED
                    .with(|d| d.borrow().clone())
                    .ok_or_else(|| Error::Other("`next-batch` before `configure`".into()))?;
                write(&schema, &RecordBatch::new_empty(Arc::clone(&schema))).map(Some)
            }
            _ => {
                let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Utf8, true)]));
                let col: ArrayRef = Arc::new(StringArray::from(vec!["not", "declared"]));
                let batch = RecordBatch::try_new(Arc::clone(&schema), vec![col])
                    .map_err(|e| Error::Other(e.to_string()))?;
                write(&schema, &batch).map(Some)
            }
        }
    }
}

/// The text of the lines of `split` (the lines that start in its range, or
/// the whole file in mode `whole-file`), with their byte offsets.
fn split_lines(mode: &str, split: &Split) -> Result<Vec<(u64, String)>, Error> {
    let (text, start, end) = match &split.payload {
        SplitPayload::Inline(text) => (text.clone(), 0, u64::MAX),
        SplitPayload::FileRange(r) => {
            let read = std::fs::read_to_string(&r.path);
            let text = if mode == "panicky" {
                read.expect("faulty-reader: panicky mode opens without a check")
            } else {
                read.map_err(|e| {
                    Error::Io(format!("split `{}`: cannot read {}: {e}", split.id, r.path))
                })?
            };
            if mode == "whole-file" {
                (text, 0, u64::MAX)
            } else {
                (text, r.start, r.start.saturating_add(r.length))
            }
        }
    };
    let mut at = 0u64;
    let mut lines = Vec::new();
    for line in text.split_inclusive('\n') {
        // A line belongs to the range it starts in.
        if at >= start && at < end {
            lines.push((at, line.trim_end().to_string()));
        }
        at += line.len() as u64;
    }
    Ok(lines)
}

/// One batch of the line modes: each line's integer (plus `opened` in mode
/// `nondeterministic`) in the first declared column, the others null.
fn read_lines(mode: &str, split: &Split, opened: i64) -> Result<Vec<u8>, Error> {
    let schema = DECLARED
        .with(|d| d.borrow().clone())
        .ok_or_else(|| Error::Other("`open` before `configure`".into()))?;
    if schema.fields().first().map(|f| f.data_type()) != Some(&DataType::Int64) {
        return Err(Error::Other(
            "the line modes need a first column of type bigint".into(),
        ));
    }
    let mut values = Vec::new();
    for (at, line) in split_lines(mode, split)? {
        if line.is_empty() {
            continue;
        }
        let value: i64 = match (mode, line.parse::<i64>()) {
            (_, Ok(v)) => v,
            ("panicky", Err(_)) => panic!("faulty-reader: panicky mode parses without a check"),
            ("vague", Err(_)) => return Err(Error::InvalidSplit("a bad line".into())),
            (_, Err(_)) => {
                return Err(Error::InvalidSplit(format!(
                    "split `{}`, line at byte {at}: `{line}` is not an integer",
                    split.id
                )));
            }
        };
        values.push(if mode == "nondeterministic" {
            value + opened
        } else {
            value
        });
    }
    let rows = values.len();
    let mut columns: Vec<ArrayRef> = vec![Arc::new(Int64Array::from(values))];
    for f in schema.fields().iter().skip(1) {
        columns.push(arrow_array::new_null_array(f.data_type(), rows));
    }
    let batch = RecordBatch::try_new(Arc::clone(&schema), columns)
        .map_err(|e| Error::Other(e.to_string()))?;
    write(&schema, &batch)
}

/// `batch` as an Arrow IPC stream.
fn write(schema: &Arc<Schema>, batch: &RecordBatch) -> Result<Vec<u8>, Error> {
    let mut out = Vec::new();
    let mut w = arrow_ipc::writer::StreamWriter::try_new(&mut out, schema)
        .map_err(|e| Error::Other(e.to_string()))?;
    w.write(batch).map_err(|e| Error::Other(e.to_string()))?;
    w.finish().map_err(|e| Error::Other(e.to_string()))?;
    drop(w);
    Ok(out)
}

bindings::export!(Component with_types_in bindings);
