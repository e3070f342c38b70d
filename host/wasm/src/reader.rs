//! The typed wrapper of a source-reader plugin (WIT package
//! `coordhost:reader@0.1.0`, `wit/reader/`): [`SourceReader::read_split`]
//! reads one split a split enumerator made into record batches of the
//! table's declared schema.
//!
//! The batch shape: `configure` gets the declared schema as an Arrow IPC
//! stream without batches; each `next-batch` answer is an Arrow IPC stream
//! of that schema holding exactly one record batch. Every answer is input
//! from a stranger and is checked before anything downstream sees it: at
//! most [`MAX_BATCH_BYTES`] of IPC, it must decode (arrow-ipc validates
//! the buffers), its columns must have the declared names and types in the
//! declared order, and a split may give at most [`MAX_SPLIT_BATCHES`]
//! batches and [`MAX_SPLIT_BYTES`] in all. Otherwise the read fails with
//! [`PluginError::Protocol`] naming the table, the split and what came back.
//!
//! Instances, as for scalar functions: several tasks read at once, so a
//! [`SourceReader`] keeps a pool of idle configured instances (each its own
//! store, memory cap and deadline per call) and makes a new one when none
//! is idle. A split is read whole on one instance and its batches are
//! handed on only when it is done, so a failure never leaves half a split
//! downstream. A fault (trap, deadline, memory cap) drops the instance;
//! with `on-trap = "rebuild"` the split is read once more from its start on
//! a fresh instance before the read fails.

use std::sync::Arc;

use arrow_array::{RecordBatch, RecordBatchOptions};
use arrow_schema::SchemaRef;
use wasmtime::Store;
use wasmtime::component::ResourceAny;

use super::bindings::reader::SourceReaderPlugin;
use super::bindings::reader::coordhost::reader::types as wit;
use super::instance::{self, Fault};
use super::store::PluginState;
use super::{KindPre, LoadedInner, LoadedPlugin, PluginError, PluginFailure, PluginKind};
use super::{MAX_MESSAGE_BYTES, TrapPolicy, one_line};
use coordhost_model::value::{SplitData, SplitPayloadData};

/// Largest batch a reader may answer, as Arrow IPC bytes: 16 MiB.
pub const MAX_BATCH_BYTES: usize = 16 << 20;
/// Most batches one split may give (a reader that answers empty batches
/// for ever is stopped here).
pub const MAX_SPLIT_BATCHES: usize = 1 << 16;
/// Most Arrow IPC bytes one split may give in all: 1 GiB (the batches of a
/// split are held until it is done).
pub const MAX_SPLIT_BYTES: u64 = 1 << 30;
/// An instance of the component: its store and exports, configured.
struct Live {
    store: Store<PluginState>,
    world: SourceReaderPlugin,
}

/// How a reader's `invalid-split` error value begins once it is the host's
/// [`PluginFailure::Other`] (the host's failure type has no case of its
/// own for it): `invalid split: ` and then the reader's words. `plugin
/// test` (`coordhost::kit`) tells `invalid-split` from `other` by it.
pub const INVALID_SPLIT_PREFIX: &str = "invalid split: ";

/// A reader's error value as the plugin host's failure type.
fn failure(e: wit::Error) -> PluginFailure {
    match e {
        wit::Error::InvalidConfig(m) => PluginFailure::InvalidConfig(m),
        wit::Error::InvalidSplit(m) => PluginFailure::Other(format!("{INVALID_SPLIT_PREFIX}{m}")),
        wit::Error::Io(m) => PluginFailure::Io(m),
        wit::Error::Other(m) => PluginFailure::Other(m),
    }
}

/// The reader's pre-instantiated component, or a kind mismatch.
fn pre(
    loaded: &LoadedInner,
) -> Result<&super::bindings::reader::SourceReaderPluginPre<PluginState>, PluginError> {
    match &loaded.pre {
        KindPre::Reader(pre) => Ok(pre),
        _ => Err(PluginError::KindMismatch {
            plugin: loaded.spec.name.clone(),
            path: loaded.spec.path.clone(),
            configured: PluginKind::SourceReader,
            found: loaded.spec.kind,
        }),
    }
}

/// Instantiates the component once in a throwaway store (at load: a
/// component that traps while it starts is refused before a job uses it).
pub fn check_instantiates(loaded: &LoadedInner) -> Result<(), PluginError> {
    let pre = pre(loaded)?;
    let mut store = instance::new_store(loaded)?;
    pre.instantiate(&mut store)
        .map(|_| ())
        .map_err(|e| Fault::classify(&store, &e).into_error(loaded, "instantiate", false))
}

/// Makes a fresh instance of `loaded` and calls its `configure` with the
/// declared schema (`schema`, IPC bytes).
fn instantiate(loaded: &LoadedInner, schema: &[u8]) -> Result<Live, PluginError> {
    let pre = pre(loaded)?;
    let mut store = instance::new_store(loaded)?;
    let world = pre
        .instantiate(&mut store)
        .map_err(|e| Fault::classify(&store, &e).into_error(loaded, "instantiate", false))?;
    instance::arm_deadline(&mut store, loaded);
    let outcome = world.coordhost_reader_source_reader().call_configure(
        &mut store,
        &loaded.spec.config,
        schema,
    );
    match instance::settle(
        &store,
        loaded,
        "configure",
        outcome.map(|r| r.map_err(failure)),
    ) {
        Ok(Ok(())) => Ok(Live { store, world }),
        Ok(Err(e)) => Err(e),
        Err(fault) => Err(fault.into_error(loaded, "configure", false)),
    }
}

/// A source-reader plugin bound to one table: its declared schema and a
/// pool of idle configured instances. Cheap to share (`Arc`).
pub struct SourceReader {
    plugin: LoadedPlugin,
    table: String,
    schema: SchemaRef,
    /// `schema` as an Arrow IPC stream without batches (for `configure`).
    schema_bytes: Vec<u8>,
    idle: super::pool::IdlePool<Live>,
}

impl std::fmt::Debug for SourceReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SourceReader")
            .field("plugin", &self.plugin.name())
            .field("table", &self.table)
            .finish_non_exhaustive()
    }
}

/// How one try of a split ended without a fault of the instance: the
/// batches, or an error after which the instance is dropped all the same.
type Try = Result<Vec<RecordBatch>, PluginError>;

impl SourceReader {
    pub(crate) fn new(
        plugin: LoadedPlugin,
        table: &str,
        schema: SchemaRef,
    ) -> Result<Arc<Self>, PluginError> {
        instance::expect_kind(&plugin, PluginKind::SourceReader)?;
        let mut schema_bytes = Vec::new();
        let written = arrow_ipc::writer::StreamWriter::try_new(&mut schema_bytes, &schema)
            .and_then(|mut w| w.finish());
        written.map_err(|e| PluginError::Protocol {
            plugin: plugin.name().to_string(),
            call: "configure",
            reason: format!("cannot encode the declared schema of table `{table}`: {e}"),
        })?;
        Ok(Arc::new(Self {
            plugin,
            table: table.to_string(),
            schema,
            schema_bytes,
            idle: super::pool::IdlePool::new(),
        }))
    }

    /// The loaded plugin (its spec names the reader, its component and
    /// its grants).
    pub fn plugin(&self) -> &LoadedPlugin {
        &self.plugin
    }

    /// The table this reader reads.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The declared schema every batch has.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// Makes one configured instance now and keeps it idle: a
    /// configuration the reader refuses (or a component that traps in
    /// `configure`) is found when the job starts, not at its first split.
    ///
    /// # Errors
    /// [`PluginError::Returned`] with the reader's `invalid-config` (or
    /// other) error value; a fault during instantiation or `configure`.
    pub fn warm_up(&self) -> Result<(), PluginError> {
        let loaded = self.plugin.inner();
        let live = std::thread::scope(|s| {
            s.spawn(|| instantiate(loaded, &self.schema_bytes))
                .join()
                .unwrap_or_else(|_| {
                    Err(PluginError::Trap {
                        plugin: loaded.spec.name.clone(),
                        call: "configure",
                        message: "the host thread calling the plugin panicked".to_string(),
                        rebuilt: false,
                    })
                })
        })?;
        self.idle.put(live);
        Ok(())
    }

    /// Reads `split` whole: `open`, then `next-batch` until `none`, each
    /// call within the plugin's deadline. The batches have the declared
    /// schema (checked), in the order the reader gave them; empty ones are
    /// dropped. Blocks the calling thread (the reading runs on a thread of
    /// its own: WASI's bounded waits must not run inside an async runtime).
    ///
    /// # Errors
    /// [`PluginError::Protocol`] for an answer that is too large, does not
    /// decode or has another schema (the reason names the table, the split
    /// and the batch); [`PluginError::Trap`], [`PluginError::Deadline`],
    /// [`PluginError::MemoryCap`] for a fault; [`PluginError::Returned`]
    /// for the reader's error value.
    pub fn read_split(&self, split: &SplitData) -> Result<Vec<RecordBatch>, PluginError> {
        let loaded = self.plugin.inner();
        match self.try_split(split, false) {
            Err(e) if e.is_fault() && loaded.spec.limits.on_trap == TrapPolicy::Rebuild => {
                tracing::warn!(
                    target: crate::LOG_TARGET,
                    plugin = loaded.spec.name,
                    table = self.table,
                    split = split.id,
                    "{e}; reading the split once more on a fresh instance"
                );
                self.try_split(split, true)
            }
            other => other,
        }
    }

    /// One try of a split on an idle or fresh instance. An instance that
    /// ended the split normally goes back to the pool; any other is dropped.
    fn try_split(&self, split: &SplitData, rebuilt: bool) -> Try {
        let loaded = self.plugin.inner();
        let taken = self.idle.take();
        std::thread::scope(|s| {
            s.spawn(move || {
                let mut live = match taken {
                    Some(l) => l,
                    None => instantiate(loaded, &self.schema_bytes)?,
                };
                let (result, keep) = self.read_on(&mut live, split, rebuilt);
                if keep {
                    self.idle.put(live);
                }
                result
            })
            .join()
            .unwrap_or_else(|_| {
                Err(PluginError::Trap {
                    plugin: loaded.spec.name.clone(),
                    call: "next-batch",
                    message: "the host thread calling the plugin panicked".to_string(),
                    rebuilt,
                })
            })
        })
    }

    /// Reads `split` on `live`; whether `live` may be used again.
    fn read_on(&self, live: &mut Live, split: &SplitData, rebuilt: bool) -> (Try, bool) {
        let loaded = self.plugin.inner();
        let wit_split = wit_split(split);
        instance::arm_deadline(&mut live.store, loaded);
        let outcome = live
            .world
            .coordhost_reader_source_reader()
            .split_reader()
            .call_open(&mut live.store, &wit_split);
        let handle: ResourceAny = match instance::settle(
            &live.store,
            loaded,
            "open",
            outcome.map(|r| r.map_err(failure)),
        ) {
            Ok(Ok(h)) => h,
            Ok(Err(e)) => return (Err(e), true),
            Err(fault) => return (Err(fault.into_error(loaded, "open", rebuilt)), false),
        };
        let mut batches = Vec::new();
        let mut total: u64 = 0;
        let mut answers: usize = 0;
        let result = loop {
            const CALL: &str = "next-batch";
            instance::arm_deadline(&mut live.store, loaded);
            let outcome = live
                .world
                .coordhost_reader_source_reader()
                .split_reader()
                .call_next_batch(&mut live.store, handle);
            let bytes = match instance::settle(
                &live.store,
                loaded,
                CALL,
                outcome.map(|r| r.map_err(failure)),
            ) {
                Ok(Ok(Some(bytes))) => bytes,
                Ok(Ok(None)) => break Ok(()),
                Ok(Err(e)) => break Err((e, true)),
                Err(fault) => return (Err(fault.into_error(loaded, CALL, rebuilt)), false),
            };
            answers += 1;
            total = total.saturating_add(bytes.len() as u64);
            let protocol = |reason: String| PluginError::Protocol {
                plugin: loaded.spec.name.clone(),
                call: CALL,
                reason: format!(
                    "table `{}`, split `{}`, batch {answers}: {reason}",
                    self.table, split.id
                ),
            };
            if bytes.len() > MAX_BATCH_BYTES {
                break Err((
                    protocol(format!(
                        "{} bytes of Arrow IPC, more than the {MAX_BATCH_BYTES} a batch may have",
                        bytes.len()
                    )),
                    false,
                ));
            }
            if answers > MAX_SPLIT_BATCHES || total > MAX_SPLIT_BYTES {
                break Err((
                    protocol(format!(
                        "the split gave more than {MAX_SPLIT_BATCHES} batches or {MAX_SPLIT_BYTES} bytes"
                    )),
                    false,
                ));
            }
            match decode_batch(&bytes, &self.schema) {
                Ok(b) if b.num_rows() == 0 => {}
                Ok(b) => batches.push(b),
                Err(reason) => break Err((protocol(reason), false)),
            }
        };
        // The split's resource goes (its destructor runs in the guest,
        // within a deadline of its own).
        instance::arm_deadline(&mut live.store, loaded);
        let dropped = handle.resource_drop(&mut live.store);
        match (result, dropped) {
            (Ok(()), Ok(())) => (Ok(batches), true),
            (Ok(()), Err(e)) => (
                Err(Fault::classify(&live.store, &e).into_error(loaded, "drop", rebuilt)),
                false,
            ),
            (Err((e, keep)), d) => (Err(e), keep && d.is_ok()),
        }
    }
}

/// A split as the reader's WIT contract names it.
fn wit_split(split: &SplitData) -> wit::Split {
    wit::Split {
        id: split.id.clone(),
        payload: match &split.payload {
            SplitPayloadData::FileRange {
                path,
                start,
                length,
            } => wit::SplitPayload::FileRange(wit::FileRange {
                path: path.to_string_lossy().into_owned(),
                start: *start,
                length: *length,
            }),
            SplitPayloadData::Inline(text) => wit::SplitPayload::Inline(text.clone()),
        },
    }
}

/// The one record batch of a reader's answer, checked against the
/// declared schema (column count, names and types in order) and given
/// that schema. The reason names what came back.
fn decode_batch(bytes: &[u8], declared: &SchemaRef) -> Result<RecordBatch, String> {
    let cut = |m: String| one_line(&m, MAX_MESSAGE_BYTES);
    let mut reader = arrow_ipc::reader::StreamReader::try_new(std::io::Cursor::new(bytes), None)
        .map_err(|e| cut(format!("the answer is not an Arrow IPC stream: {e}")))?;
    let schema = reader.schema();
    let found: Vec<String> = schema
        .fields()
        .iter()
        .map(|f| format!("{} {}", f.name(), f.data_type()))
        .collect();
    let wanted: Vec<String> = declared
        .fields()
        .iter()
        .map(|f| format!("{} {}", f.name(), f.data_type()))
        .collect();
    if found != wanted {
        return Err(cut(format!(
            "the batch's columns are ({}), but the table declares ({})",
            found.join(", "),
            wanted.join(", ")
        )));
    }
    let batch = reader
        .next()
        .ok_or_else(|| "the answer holds a schema but no batch".to_string())?
        .map_err(|e| cut(format!("the batch does not decode: {e}")))?;
    if reader.next().is_some() {
        return Err("the answer holds more than one batch, expected exactly one".to_string());
    }
    RecordBatch::try_new_with_options(
        SchemaRef::clone(declared),
        batch.columns().to_vec(),
        &RecordBatchOptions::new().with_row_count(Some(batch.num_rows())),
    )
    .map_err(|e| cut(format!("the batch does not fit the declared schema: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{ArrayRef, Int64Array, StringArray};
    use arrow_schema::{DataType, Field, Schema};

    fn stream(fields: Vec<Field>, cols: Vec<ArrayRef>, batches: usize) -> Vec<u8> {
        let schema = Arc::new(Schema::new(fields));
        let mut out = Vec::new();
        let mut w = arrow_ipc::writer::StreamWriter::try_new(&mut out, &schema).unwrap();
        for _ in 0..batches {
            let b = RecordBatch::try_new(Arc::clone(&schema), cols.clone()).unwrap();
            w.write(&b).unwrap();
        }
        w.finish().unwrap();
        drop(w);
        out
    }

    #[test]
    fn batches_are_checked_against_the_declared_schema() {
        let declared: SchemaRef = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("name", DataType::Utf8, true),
        ]));
        let id: ArrayRef = Arc::new(Int64Array::from(vec![1, 2]));
        let name: ArrayRef = Arc::new(StringArray::from(vec!["a", "b"]));
        let ok = stream(
            vec![
                Field::new("id", DataType::Int64, false),
                Field::new("name", DataType::Utf8, false),
            ],
            vec![Arc::clone(&id), Arc::clone(&name)],
            1,
        );
        let b = decode_batch(&ok, &declared).unwrap();
        assert_eq!(b.num_rows(), 2);
        assert_eq!(b.schema(), declared);
        let swapped = stream(
            vec![
                Field::new("name", DataType::Utf8, true),
                Field::new("id", DataType::Int64, true),
            ],
            vec![Arc::clone(&name), Arc::clone(&id)],
            1,
        );
        let e = decode_batch(&swapped, &declared).unwrap_err();
        assert!(
            e.contains("(name Utf8, id Int64)") && e.contains("declares (id Int64, name Utf8)"),
            "{e}"
        );
        let two = stream(
            vec![
                Field::new("id", DataType::Int64, true),
                Field::new("name", DataType::Utf8, true),
            ],
            vec![id, name],
            2,
        );
        assert!(
            decode_batch(&two, &declared)
                .unwrap_err()
                .contains("more than one batch")
        );
        assert!(
            decode_batch(b"nope", &declared)
                .unwrap_err()
                .contains("not an Arrow IPC")
        );
    }
}
