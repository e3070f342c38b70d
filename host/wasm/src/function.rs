//! The typed wrapper of a scalar-function plugin (WIT package
//! `coordhost:function@0.1.0`, `wit/function/`): its signature, read once
//! at load, and [`ScalarFunction::call`], one call per record batch.
//!
//! The batch shape: the host writes the argument columns as an Arrow IPC
//! stream (a schema of `arg0`, `arg1`, ... of the declared types and one
//! record batch) and reads the answer as an Arrow IPC stream too. The
//! answer is input from a stranger: it must decode (arrow-ipc validates
//! the buffers), hold exactly one column of the declared result type and
//! exactly one batch of as many rows as the arguments, or the call fails
//! with [`PluginError::Protocol`] saying what came back.
//!
//! Instances: a task calls the function on its own thread, and several
//! tasks run at once, so a [`ScalarFunction`] keeps a pool of idle
//! instances (each its own store, memory cap and deadline) and makes a new
//! one (instantiate, then `configure`) when none is idle. A fault (trap,
//! deadline, memory cap) drops the instance; with `on-trap = "rebuild"`
//! the batch is tried once more on a fresh instance before the call fails.

use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch, RecordBatchOptions};
use arrow_schema::{DataType, Field, Schema};
use wasmtime::Store;

use super::bindings::function::ScalarFunctionPlugin;
use super::bindings::function::coordhost::function::types as wit;
use super::instance::{self, Fault};
use super::store::PluginState;
use super::{KindPre, LoadedInner, LoadedPlugin, PluginError, PluginFailure, PluginKind};
use super::{MAX_MESSAGE_BYTES, TrapPolicy, one_line};

/// Most arguments a scalar function may declare.
pub const MAX_FUNCTION_ARGUMENTS: usize = 16;

/// A scalar function's signature as the component declared it, in Arrow
/// types (one of `Int64`, `Float64`, `Utf8`, `Boolean`,
/// `Decimal128(p, s)`, `Date32` each).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FunctionSignature {
    /// Argument types, in call order.
    pub arguments: Vec<DataType>,
    /// The result type.
    pub returns: DataType,
    /// Whether the function says the same arguments always give the same
    /// result (the job file loader refuses one that says `false`).
    pub deterministic: bool,
}

/// The Arrow type of a WIT data type, or why it is none (a decimal out of
/// Arrow's `Decimal128` range).
fn arrow_type(t: &wit::DataType) -> Result<DataType, String> {
    Ok(match t {
        wit::DataType::Int64 => DataType::Int64,
        wit::DataType::Float64 => DataType::Float64,
        wit::DataType::Utf8 => DataType::Utf8,
        wit::DataType::Boolean => DataType::Boolean,
        wit::DataType::Date32 => DataType::Date32,
        wit::DataType::Decimal128(d) => {
            if !(1..=38).contains(&d.precision) || d.scale < 0 || d.scale as u8 > d.precision {
                return Err(format!(
                    "decimal128({}, {}) is not a decimal type: precision must be 1..=38 and scale 0..=precision",
                    d.precision, d.scale
                ));
            }
            DataType::Decimal128(d.precision, d.scale)
        }
    })
}

/// An instance of the component: its store and exports, configured.
struct Live {
    store: Store<PluginState>,
    world: ScalarFunctionPlugin,
}

/// Makes a fresh instance of `loaded` and calls its `configure`.
fn instantiate(loaded: &LoadedInner) -> Result<Live, PluginError> {
    let KindPre::Function(pre) = &loaded.pre else {
        return Err(PluginError::KindMismatch {
            plugin: loaded.spec.name.clone(),
            path: loaded.spec.path.clone(),
            configured: PluginKind::ScalarFunction,
            found: loaded.spec.kind,
        });
    };
    let mut store = instance::new_store(loaded)?;
    let world = pre
        .instantiate(&mut store)
        .map_err(|e| Fault::classify(&store, &e).into_error(loaded, "instantiate", false))?;
    instance::arm_deadline(&mut store, loaded);
    let outcome = world
        .coordhost_function_scalar_function()
        .call_configure(&mut store, &loaded.spec.config);
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

/// A function's error value as the plugin host's failure type.
fn failure(e: wit::Error) -> PluginFailure {
    match e {
        wit::Error::InvalidConfig(m) => PluginFailure::InvalidConfig(m),
        wit::Error::InvalidInput(m) => PluginFailure::Other(format!("invalid input: {m}")),
        wit::Error::Other(m) => PluginFailure::Other(m),
    }
}

/// Asks a fresh, configured instance for the signature (at load).
pub fn query_signature(loaded: &LoadedInner) -> Result<FunctionSignature, PluginError> {
    let mut all = query_signatures(loaded, 1)?;
    all.pop().ok_or_else(|| PluginError::Protocol {
        plugin: loaded.spec.name.clone(),
        call: "signature",
        reason: "no signature was read".to_string(),
    })
}

/// Asks one fresh, configured instance for its signature `times` times, in
/// order (`plugin test` checks that the answers do not change; the WIT
/// says they must not). Each answer is checked as at load.
pub(crate) fn query_signatures(
    loaded: &LoadedInner,
    times: usize,
) -> Result<Vec<FunctionSignature>, PluginError> {
    const CALL: &str = "signature";
    let mut live = instantiate(loaded)?;
    let protocol = |reason: String| PluginError::Protocol {
        plugin: loaded.spec.name.clone(),
        call: CALL,
        reason,
    };
    let mut out = Vec::with_capacity(times);
    for _ in 0..times {
        instance::arm_deadline(&mut live.store, loaded);
        let sig = live
            .world
            .coordhost_function_scalar_function()
            .call_signature(&mut live.store)
            .map_err(|e| Fault::classify(&live.store, &e).into_error(loaded, CALL, false))?;
        if sig.arguments.len() > MAX_FUNCTION_ARGUMENTS {
            return Err(protocol(format!(
                "it declares {} arguments, more than {MAX_FUNCTION_ARGUMENTS}",
                sig.arguments.len()
            )));
        }
        let mut arguments = Vec::with_capacity(sig.arguments.len());
        for (i, a) in sig.arguments.iter().enumerate() {
            arguments.push(arrow_type(a).map_err(|r| protocol(format!("argument {i}: {r}")))?);
        }
        let returns = arrow_type(&sig.returns).map_err(|r| protocol(format!("result: {r}")))?;
        out.push(FunctionSignature {
            arguments,
            returns,
            deterministic: sig.deterministic,
        });
    }
    Ok(out)
}

/// A scalar-function plugin ready to be called from many threads: its
/// signature and a pool of idle instances. Cheap to share (`Arc`).
pub struct ScalarFunction {
    plugin: LoadedPlugin,
    signature: FunctionSignature,
    idle: Arc<super::pool::IdlePool<Live>>,
}

impl std::fmt::Debug for ScalarFunction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScalarFunction")
            .field("plugin", &self.plugin.name())
            .field("signature", &self.signature)
            .finish_non_exhaustive()
    }
}

impl ScalarFunction {
    pub(crate) fn new(plugin: LoadedPlugin) -> Result<Arc<Self>, PluginError> {
        instance::expect_kind(&plugin, PluginKind::ScalarFunction)?;
        let signature = plugin
            .inner()
            .signature
            .clone()
            .ok_or_else(|| PluginError::Protocol {
                plugin: plugin.name().to_string(),
                call: "signature",
                reason: "no signature was read at load".to_string(),
            })?;
        Ok(Arc::new(Self {
            plugin,
            signature,
            idle: Arc::new(super::pool::IdlePool::new()),
        }))
    }

    /// The signature the component declared at load.
    pub fn signature(&self) -> &FunctionSignature {
        &self.signature
    }

    /// The loaded plugin (its spec names the function and the component).
    pub fn plugin(&self) -> &LoadedPlugin {
        &self.plugin
    }

    /// Computes one batch: `arguments` are the argument columns (of the
    /// declared types, each `rows` long); the answer is the result column,
    /// checked to be of the declared type and `rows` long. Blocks the
    /// calling thread for at most the call deadline per try (two tries
    /// with `on-trap = "rebuild"`).
    ///
    /// # Errors
    /// [`PluginError::Protocol`] for arguments of the wrong types (a host
    /// bug) or an answer that is not one column of the declared type and
    /// `rows` rows; [`PluginError::Trap`], [`PluginError::Deadline`],
    /// [`PluginError::MemoryCap`] for a fault; [`PluginError::Returned`]
    /// for the function's error value.
    pub fn call(&self, arguments: &[ArrayRef], rows: usize) -> Result<ArrayRef, PluginError> {
        const CALL: &str = "invoke";
        let loaded = self.plugin.inner();
        let protocol = |reason: String| PluginError::Protocol {
            plugin: loaded.spec.name.clone(),
            call: CALL,
            reason,
        };
        let bytes = encode_arguments(&self.signature, arguments, rows)
            .map_err(|e| protocol(format!("cannot encode the arguments: {e}")))?;
        let bytes = Arc::new(bytes);
        let answer = match self.try_call(&bytes, false) {
            Err(e) if e.is_fault() && loaded.spec.limits.on_trap == TrapPolicy::Rebuild => {
                tracing::warn!(
                    target: crate::LOG_TARGET,
                    plugin = loaded.spec.name,
                    "{e}; trying the batch once more on a fresh instance"
                );
                self.try_call(&bytes, true)?
            }
            other => other?,
        };
        decode_result(&answer, &self.signature.returns, rows).map_err(protocol)
    }

    /// Calls `invoke` once with `bytes` as they are, not checked against
    /// the signature, and returns the answer's bytes unread (`plugin test`
    /// sends batches of the wrong schema with it, to see an error value
    /// come back rather than a trap). No second try.
    ///
    /// # Errors
    /// As [`ScalarFunction::call`], less the checks of the answer.
    pub fn call_bytes(&self, bytes: &[u8]) -> Result<Vec<u8>, PluginError> {
        self.try_call(&Arc::new(bytes.to_vec()), false)
    }

    /// One try of `invoke` on an idle or fresh instance, on a plugin call
    /// thread ([`super::call_thread`]: WASI's bounded waits must not run
    /// inside the caller's async runtime). A faulted instance is dropped.
    fn try_call(&self, bytes: &Arc<Vec<u8>>, rebuilt: bool) -> Result<Vec<u8>, PluginError> {
        const CALL: &str = "invoke";
        let taken = self.idle.take();
        let plugin = self.plugin.clone();
        let idle = Arc::clone(&self.idle);
        let bytes = Arc::clone(bytes);
        super::call_thread::run(move || {
            let loaded = plugin.inner();
            let mut live = match taken {
                Some(l) => l,
                None => instantiate(loaded)?,
            };
            instance::arm_deadline(&mut live.store, loaded);
            let outcome = live
                .world
                .coordhost_function_scalar_function()
                .call_invoke(&mut live.store, &bytes);
            let settled = instance::settle(
                &live.store,
                loaded,
                CALL,
                outcome.map(|r| r.map_err(failure)),
            );
            match settled {
                Ok(result) => {
                    idle.put(live);
                    result
                }
                Err(fault) => Err(fault.into_error(loaded, CALL, rebuilt)),
            }
        })
        .unwrap_or_else(|super::call_thread::Panicked| {
            Err(PluginError::Trap {
                plugin: self.plugin.name().to_string(),
                call: CALL,
                message: "the host thread calling the plugin panicked".to_string(),
                rebuilt,
            })
        })
    }
}

/// The argument columns as an IPC stream of one batch (`arg0`, `arg1`, ...).
fn encode_arguments(
    signature: &FunctionSignature,
    arguments: &[ArrayRef],
    rows: usize,
) -> Result<Vec<u8>, String> {
    if arguments.len() != signature.arguments.len() {
        return Err(format!(
            "{} arguments given, {} declared",
            arguments.len(),
            signature.arguments.len()
        ));
    }
    let fields: Vec<Field> = signature
        .arguments
        .iter()
        .enumerate()
        .map(|(i, t)| Field::new(format!("arg{i}"), t.clone(), true))
        .collect();
    let schema = Arc::new(Schema::new(fields));
    let batch = RecordBatch::try_new_with_options(
        Arc::clone(&schema),
        arguments.to_vec(),
        &RecordBatchOptions::new().with_row_count(Some(rows)),
    )
    .map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    let mut w =
        arrow_ipc::writer::StreamWriter::try_new(&mut out, &schema).map_err(|e| e.to_string())?;
    w.write(&batch).map_err(|e| e.to_string())?;
    w.finish().map_err(|e| e.to_string())?;
    drop(w);
    Ok(out)
}

/// The one column of the answer, checked against the declared type and
/// the row count. The reason names what came back.
fn decode_result(bytes: &[u8], returns: &DataType, rows: usize) -> Result<ArrayRef, String> {
    let cut = |m: String| one_line(&m, MAX_MESSAGE_BYTES);
    let mut reader = arrow_ipc::reader::StreamReader::try_new(std::io::Cursor::new(bytes), None)
        .map_err(|e| cut(format!("the answer is not an Arrow IPC stream: {e}")))?;
    let schema = reader.schema();
    if schema.fields().len() != 1 {
        return Err(format!(
            "the answer has {} columns, expected 1 of type {returns}",
            schema.fields().len()
        ));
    }
    let found = schema.field(0).data_type();
    if found != returns {
        return Err(cut(format!(
            "the answer's column is of type {found}, but the function declared {returns}"
        )));
    }
    let batch = reader
        .next()
        .ok_or_else(|| format!("the answer holds no batch, expected one of {rows} rows"))?
        .map_err(|e| cut(format!("the answer's batch does not decode: {e}")))?;
    if reader.next().is_some() {
        return Err("the answer holds more than one batch, expected exactly one".to_string());
    }
    if batch.num_rows() != rows {
        return Err(format!(
            "the answer has {} rows, but the function was given {rows}",
            batch.num_rows()
        ));
    }
    Ok(Arc::clone(batch.column(0)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Int64Array, StringArray};

    fn sig() -> FunctionSignature {
        FunctionSignature {
            arguments: vec![DataType::Int64],
            returns: DataType::Int64,
            deterministic: true,
        }
    }

    fn stream(col: ArrayRef) -> Vec<u8> {
        let schema = Arc::new(Schema::new(vec![Field::new(
            "r",
            col.data_type().clone(),
            true,
        )]));
        let batch = RecordBatch::try_new(Arc::clone(&schema), vec![col]).unwrap();
        let mut out = Vec::new();
        let mut w = arrow_ipc::writer::StreamWriter::try_new(&mut out, &schema).unwrap();
        w.write(&batch).unwrap();
        w.finish().unwrap();
        drop(w);
        out
    }

    #[test]
    fn answers_are_checked_for_type_rows_and_shape() {
        let ok = stream(Arc::new(Int64Array::from(vec![1, 2, 3])));
        assert_eq!(decode_result(&ok, &DataType::Int64, 3).unwrap().len(), 3);
        let e = decode_result(&ok, &DataType::Int64, 4).unwrap_err();
        assert!(e.contains("3 rows") && e.contains("given 4"), "{e}");
        let text = stream(Arc::new(StringArray::from(vec!["a"])));
        let e = decode_result(&text, &DataType::Int64, 1).unwrap_err();
        assert!(e.contains("Utf8") && e.contains("Int64"), "{e}");
        let e = decode_result(b"not arrow", &DataType::Int64, 1).unwrap_err();
        assert!(e.contains("not an Arrow IPC stream"), "{e}");
        // Cut short: the schema reads, the batch does not.
        let e = decode_result(&ok[..ok.len() - 20], &DataType::Int64, 3).unwrap_err();
        assert!(e.contains("batch"), "{e}");
    }

    #[test]
    fn arguments_encode_with_their_declared_types() {
        let bytes = encode_arguments(&sig(), &[Arc::new(Int64Array::from(vec![5, 6]))], 2).unwrap();
        let mut r =
            arrow_ipc::reader::StreamReader::try_new(std::io::Cursor::new(&bytes), None).unwrap();
        assert_eq!(r.schema().field(0).name(), "arg0");
        assert_eq!(r.next().unwrap().unwrap().num_rows(), 2);
        assert!(encode_arguments(&sig(), &[], 2).is_err());
        let bad = wit::DataType::Decimal128(wit::DecimalType {
            precision: 40,
            scale: 2,
        });
        assert!(arrow_type(&bad).unwrap_err().contains("decimal128(40, 2)"));
    }
}
