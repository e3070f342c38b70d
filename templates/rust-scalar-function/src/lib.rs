//! `{{name}}`: a coordhost scalar function (world `scalar-function-plugin`
//! of `wit/function.wit`, package `coordhost:function`).
//!
//! `{{crate}}(x double, factor double) -> double`: `x * factor`, null when
//! either is null. Config key (the `config` table of the function's
//! `[functions.NAME]` entry in the job file): `offset` (a number, default
//! 0) is added to every result.
//!
//! The batch shape: `invoke` gets an Arrow IPC stream of one batch with one
//! column per argument (`arg0`, `arg1`, of the declared types) and answers
//! an Arrow IPC stream of one column of the declared result type, in one
//! batch of the same number of rows. The host checks both.

mod bindings {
    wit_bindgen::generate!({
        path: "wit",
        world: "scalar-function-plugin",
    });
}

use std::cell::Cell;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Float64Type;
use arrow_array::{Array, Float64Array, RecordBatch};
use arrow_schema::{Field, Schema};
use bindings::coordhost::function::types::{DataType, Error, FunctionSignature};
use bindings::exports::coordhost::function::scalar_function::Guest;

thread_local! {
    /// The `offset` config key; one instance serves one task at a time.
    static OFFSET: Cell<f64> = const { Cell::new(0.0) };
}

/// The component: what `export!` binds the exported interface to.
struct Component;

impl Guest for Component {
    fn configure(config: Vec<(String, String)>) -> Result<(), Error> {
        for (key, value) in config {
            match key.as_str() {
                "offset" => {
                    let v: f64 = value.parse().map_err(|_| {
                        Error::InvalidConfig(format!("`offset`: `{value}` is not a number"))
                    })?;
                    OFFSET.with(|o| o.set(v));
                }
                other => return Err(Error::InvalidConfig(format!("unknown key `{other}`"))),
            }
        }
        Ok(())
    }

    fn signature() -> FunctionSignature {
        FunctionSignature {
            arguments: vec![DataType::Float64, DataType::Float64],
            returns: DataType::Float64,
            // Recovery re-runs tasks: the host refuses a function that
            // says `false` here.
            deterministic: true,
        }
    }

    fn invoke(arguments: Vec<u8>) -> Result<Vec<u8>, Error> {
        let mut reader =
            arrow_ipc::reader::StreamReader::try_new(std::io::Cursor::new(&arguments), None)
                .map_err(|e| Error::InvalidInput(e.to_string()))?;
        let batch = reader
            .next()
            .ok_or_else(|| Error::InvalidInput("no batch".into()))?
            .map_err(|e| Error::InvalidInput(e.to_string()))?;
        if batch.num_columns() != 2 {
            return Err(Error::InvalidInput(format!(
                "expected 2 arguments, got {}",
                batch.num_columns()
            )));
        }
        let column = |i: usize| {
            batch
                .column(i)
                .as_primitive_opt::<Float64Type>()
                .ok_or_else(|| Error::InvalidInput(format!("argument {i} is not a double")))
        };
        let (x, factor) = (column(0)?, column(1)?);
        let offset = OFFSET.with(Cell::get);
        let result: Float64Array = (0..batch.num_rows())
            .map(|i| {
                (!x.is_null(i) && !factor.is_null(i)).then(|| x.value(i) * factor.value(i) + offset)
            })
            .collect();
        let schema = Arc::new(Schema::new(vec![Field::new(
            "result",
            arrow_schema::DataType::Float64,
            true,
        )]));
        let out = RecordBatch::try_new(Arc::clone(&schema), vec![Arc::new(result)])
            .map_err(|e| Error::Other(e.to_string()))?;
        let mut bytes = Vec::new();
        let mut w = arrow_ipc::writer::StreamWriter::try_new(&mut bytes, &schema)
            .map_err(|e| Error::Other(e.to_string()))?;
        w.write(&out).map_err(|e| Error::Other(e.to_string()))?;
        w.finish().map_err(|e| Error::Other(e.to_string()))?;
        drop(w);
        Ok(bytes)
    }
}

bindings::export!(Component with_types_in bindings);
