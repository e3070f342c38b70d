//! A sample scalar function (`coordhost:function/scalar-function@0.1.0`):
//! `tax(price decimal(15,2), region varchar) -> decimal(15,2)`, the tax on
//! a price at the rate of its region, rounded half away from zero to the
//! cent. Rates, in basis points: AFRICA 1500, AMERICA 700, ASIA 1000,
//! EUROPE 2000, MIDDLE EAST 1250. An unknown region or a null argument
//! gives null. Deterministic. Config: `surcharge-bp` (optional, default 0)
//! is added to every rate.

#![allow(missing_docs, reason = "the generated bindings carry the WIT docs")]

mod bindings {
    wit_bindgen::generate!({
        path: "../../wit/function",
        world: "scalar-function-plugin",
    });
}

use std::cell::Cell;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Decimal128Type;
use arrow_array::{Array, Decimal128Array};
use bindings::coordhost::function::types::{DataType, DecimalType, Error, FunctionSignature};
use bindings::exports::coordhost::function::scalar_function::Guest;

const PRICE: DecimalType = DecimalType {
    precision: 15,
    scale: 2,
};

thread_local! {
    static SURCHARGE_BP: Cell<i128> = const { Cell::new(0) };
}

/// The rate of `region` in basis points (hundredths of a percent).
fn rate_bp(region: &str) -> Option<i128> {
    Some(match region {
        "AFRICA" => 1500,
        "AMERICA" => 700,
        "ASIA" => 1000,
        "EUROPE" => 2000,
        "MIDDLE EAST" => 1250,
        _ => return None,
    })
}

/// `cents * bp / 10000`, rounded half away from zero.
fn tax_cents(cents: i128, bp: i128) -> i128 {
    let p = cents * bp;
    let half = if p < 0 { -5000 } else { 5000 };
    (p + half) / 10000
}

struct Tax;

impl Guest for Tax {
    fn configure(config: Vec<(String, String)>) -> Result<(), Error> {
        for (k, v) in config {
            match k.as_str() {
                "surcharge-bp" => {
                    let bp: i128 = v.parse().map_err(|_| {
                        Error::InvalidConfig(format!("`surcharge-bp`: `{v}` is not an integer"))
                    })?;
                    SURCHARGE_BP.with(|s| s.set(bp));
                }
                other => return Err(Error::InvalidConfig(format!("unknown key `{other}`"))),
            }
        }
        Ok(())
    }

    fn signature() -> FunctionSignature {
        FunctionSignature {
            arguments: vec![DataType::Decimal128(PRICE), DataType::Utf8],
            returns: DataType::Decimal128(PRICE),
            deterministic: true,
        }
    }

    fn invoke(arguments: Vec<u8>) -> Result<Vec<u8>, Error> {
        let batch = plugin_support::arrow_batches::read_arguments(&arguments)
            .map_err(Error::InvalidInput)?;
        if batch.num_columns() != 2 {
            return Err(Error::InvalidInput(format!(
                "expected 2 arguments, got {}",
                batch.num_columns()
            )));
        }
        let price = batch
            .column(0)
            .as_primitive_opt::<Decimal128Type>()
            .ok_or_else(|| Error::InvalidInput("argument 0 is not a decimal".into()))?;
        let region = batch
            .column(1)
            .as_string_opt::<i32>()
            .ok_or_else(|| Error::InvalidInput("argument 1 is not a string".into()))?;
        let surcharge = SURCHARGE_BP.with(Cell::get);
        let out: Decimal128Array = (0..batch.num_rows())
            .map(|i| {
                if price.is_null(i) || region.is_null(i) {
                    return None;
                }
                rate_bp(region.value(i)).map(|bp| tax_cents(price.value(i), bp + surcharge))
            })
            .collect::<Decimal128Array>()
            .with_precision_and_scale(PRICE.precision, PRICE.scale)
            .map_err(|e| Error::Other(e.to_string()))?;
        plugin_support::arrow_batches::write_result(Arc::new(out)).map_err(Error::Other)
    }
}

bindings::export!(Tax with_types_in bindings);
