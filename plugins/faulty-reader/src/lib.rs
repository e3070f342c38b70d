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

#![allow(missing_docs, reason = "the generated bindings carry the WIT docs")]

mod bindings {
    wit_bindgen::generate!({
        path: "../../wit/reader",
        world: "source-reader-plugin",
    });
}

use std::cell::RefCell;
use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use bindings::coordhost::reader::types::{Error, Split};
use bindings::exports::coordhost::reader::source_reader::{Guest, GuestSplitReader, SplitReader};

thread_local! {
    static MODE: RefCell<String> = RefCell::new(String::new());
    static PATH: RefCell<String> = RefCell::new(String::new());
    static DECLARED: RefCell<Option<Arc<Schema>>> = const { RefCell::new(None) };
}

struct Component;

/// One split's reading: it holds nothing.
struct Reader;

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
    fn open(_split: Split) -> Result<SplitReader, Error> {
        Ok(SplitReader::new(Reader))
    }

    fn next_batch(&self) -> Result<Option<Vec<u8>>, Error> {
        match MODE.with(|m| m.borrow().clone()).as_str() {
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
