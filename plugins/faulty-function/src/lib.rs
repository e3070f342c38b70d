//! A test scalar function (`coordhost:function/scalar-function@0.1.0`):
//! `plus_one(x bigint) -> bigint`, x + 1, unless its config's `mode` says
//! to misbehave, so the host's checks can be tested on the real path:
//!
//! - `ok` (default): x + 1.
//! - `trap`: panics in `invoke` (a trap).
//! - `slow`: loops forever in `invoke` (the call deadline stops it).
//! - `wrong-type`: returns a `varchar` column, not `bigint`.
//! - `wrong-length`: returns one row fewer than it was given.
//! - `nondeterministic`: says so in its signature (the host refuses it).
//! - `bad-decimal`: declares a result type `decimal(40,2)`, which Arrow has not.
//! - `memory`: allocates without end in `invoke` (the memory cap stops it).
//! - `unstable-signature`: the first `signature` of an instance says
//!   `bigint -> bigint`, every later one `bigint -> double`.
//! - `drifting`: x + n, where n counts the instance's `invoke` calls (1, 2,
//!   ...): the same batch gets another answer the second time.
//! - `unchecked`: x + 1, but traps (a panic) on a batch whose first column
//!   is not `bigint` or that is not Arrow IPC, instead of returning the
//!   error value `invalid-input`.

#![allow(missing_docs, reason = "the generated bindings carry the WIT docs")]

mod bindings {
    wit_bindgen::generate!({
        path: "../../wit/function",
        world: "scalar-function-plugin",
    });
}

use std::cell::{Cell, RefCell};
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{ArrayRef, Int64Array, StringArray};
use bindings::coordhost::function::types::{DataType, DecimalType, Error, FunctionSignature};
use bindings::exports::coordhost::function::scalar_function::Guest;

thread_local! {
    static MODE: RefCell<String> = RefCell::new("ok".to_string());
    /// Calls of `signature` (mode `unstable-signature`) or `invoke` (mode `drifting`).
    static CALLS: Cell<i64> = const { Cell::new(0) };
}

/// Counts one more call; returns the count.
fn count_call() -> i64 {
    CALLS.with(|c| {
        c.set(c.get() + 1);
        c.get()
    })
}

fn mode() -> String {
    MODE.with(|m| m.borrow().clone())
}

struct Faulty;

impl Guest for Faulty {
    fn configure(config: Vec<(String, String)>) -> Result<(), Error> {
        for (k, v) in config {
            match (k.as_str(), v.as_str()) {
                (
                    "mode",
                    "ok" | "trap" | "slow" | "wrong-type" | "wrong-length" | "nondeterministic"
                    | "bad-decimal" | "memory" | "unstable-signature" | "drifting" | "unchecked",
                ) => MODE.with(|m| *m.borrow_mut() = v.clone()),
                ("mode", other) => {
                    return Err(Error::InvalidConfig(format!("unknown mode `{other}`")));
                }
                (other, _) => return Err(Error::InvalidConfig(format!("unknown key `{other}`"))),
            }
        }
        Ok(())
    }

    fn signature() -> FunctionSignature {
        let mode = mode();
        FunctionSignature {
            arguments: vec![DataType::Int64],
            returns: if mode == "bad-decimal" {
                DataType::Decimal128(DecimalType {
                    precision: 40,
                    scale: 2,
                })
            } else if mode == "unstable-signature" && count_call() > 1 {
                DataType::Float64
            } else {
                DataType::Int64
            },
            deterministic: mode != "nondeterministic",
        }
    }

    fn invoke(arguments: Vec<u8>) -> Result<Vec<u8>, Error> {
        let unchecked = mode() == "unchecked";
        let batch = match plugin_support::arrow_batches::read_arguments(&arguments) {
            Ok(b) => b,
            Err(e) if unchecked => panic!("plus_one does not check its input: {e}"),
            Err(e) => return Err(Error::InvalidInput(e)),
        };
        let x = match batch.column(0).as_primitive_opt::<Int64Type>() {
            Some(x) => x,
            None if unchecked => panic!("plus_one does not check its input: not a bigint"),
            None => return Err(Error::InvalidInput("argument 0 is not a bigint".into())),
        };
        if batch.num_columns() != 1 {
            return Err(Error::InvalidInput(format!(
                "expected 1 argument, got {}",
                batch.num_columns()
            )));
        }
        let out: ArrayRef = match mode().as_str() {
            "trap" => panic!("plus_one was told to trap"),
            "slow" => {
                let mut n: u64 = 0;
                loop {
                    n = std::hint::black_box(n.wrapping_add(1));
                }
            }
            "memory" => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(vec![1u8; 1 << 20]);
                    std::hint::black_box(&hoard);
                }
            }
            "wrong-type" => Arc::new(StringArray::from_iter_values(
                (0..x.len()).map(|i| x.value(i).to_string()),
            )),
            "wrong-length" => Arc::new(
                x.iter()
                    .skip(1)
                    .map(|v| v.map(|v| v + 1))
                    .collect::<Int64Array>(),
            ),
            "drifting" => {
                let n = count_call();
                Arc::new(x.iter().map(|v| v.map(|v| v + n)).collect::<Int64Array>())
            }
            _ => Arc::new(x.iter().map(|v| v.map(|v| v + 1)).collect::<Int64Array>()),
        };
        plugin_support::arrow_batches::write_result(out).map_err(Error::Other)
    }
}

bindings::export!(Faulty with_types_in bindings);
