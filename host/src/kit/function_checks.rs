//! The contract checks of `coordhost plugin test` for a scalar function
//! (WIT `coordhost:function`, issue 27 item 4), run through the real plugin
//! host: [`crate::plugin::ScalarFunction::call`] checks every answer's type
//! and row count exactly as a SQL job does, under the same deadline and
//! memory cap.
//!
//! The batches are made here from the declared argument types: [`ROWS`]
//! rows of values that a seeded generator picks (negative, zero, large,
//! non-ASCII text, the empty string), every [`NULL_EVERY`]th row null in
//! each column, and a batch of one row. A function must answer any batch of its
//! declared types: a value it has no answer for gives null, not an error
//! value, since one error fails the whole query.
//!
//! The checks, in order:
//! - `signature-stable`: `signature` asked twice of each of two fresh
//!   instances equals the signature read at load (recovery plans with it).
//! - `declares-deterministic`: the signature says `deterministic: true`
//!   (a job refuses a function that does not; recovery re-runs tasks).
//! - `answers-declared-type-and-rows`: a batch of [`ROWS`] rows, one of
//!   one row (the host never sends an empty one) each get one column of the declared type
//!   and as many rows.
//! - `deterministic-across-calls`: the same batch twice on one instance,
//!   with another batch between, and once on a fresh instance, gives the
//!   same column each time.
//! - `wrong-schema-is-an-error-value`: a batch with one more column, and
//!   one whose first column has another type, get an error value (not a
//!   trap, not an answer).
//! - `not-arrow-is-an-error-value`: bytes that are not an Arrow IPC
//!   stream get an error value.

use std::sync::Arc;

use arrow_array::{
    Array, ArrayRef, BooleanArray, Date32Array, Decimal128Array, Float64Array, Int64Array,
    RecordBatch, StringArray,
};
use arrow_schema::{DataType, Field, Schema};

use super::check::{Check, answer_case, check, said};
use crate::plugin::{FunctionSignature, LoadedPlugin, PluginError, ScalarFunction};

/// Rows of the main test batch: more than one byte of validity bits and
/// not a multiple of 8.
pub const ROWS: usize = 301;
/// Every this many rows (from row 3) a value is null, in each column.
pub const NULL_EVERY: usize = 7;

/// Texts the generated `Utf8` columns draw from besides generated words:
/// the empty string, non-ASCII text, a TPC-H-like value.
const TEXTS: [&str; 5] = ["", "straße", "1-URGENT", "EUROPE", "日本"];

/// A seeded xorshift generator: the same batch every run.
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// A column of `rows` values of `t` from `seed`, every [`NULL_EVERY`]th
/// null. `None` for a type the WIT cannot declare.
fn column(t: &DataType, rows: usize, seed: u64) -> Option<ArrayRef> {
    let mut g = Gen(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let null = |i: usize| i % NULL_EVERY == 3;
    let mut pick = |i: usize| (!null(i)).then(|| g.next());
    Some(match t {
        DataType::Int64 => Arc::new(
            (0..rows)
                .map(|i| pick(i).map(|x| (x as i64) >> (x % 48)))
                .collect::<Int64Array>(),
        ),
        DataType::Float64 => Arc::new(
            (0..rows)
                .map(|i| pick(i).map(|x| ((x % 2_000_001) as f64 - 1_000_000.0) / 64.0))
                .collect::<Float64Array>(),
        ),
        DataType::Utf8 => Arc::new(
            (0..rows)
                .map(|i| {
                    pick(i).map(|x| match x % 8 {
                        k @ 0..5 => TEXTS[k as usize].to_string(),
                        _ => format!("w{}", x % 1000),
                    })
                })
                .collect::<StringArray>(),
        ),
        DataType::Boolean => Arc::new(
            (0..rows)
                .map(|i| pick(i).map(|x| x % 2 == 0))
                .collect::<BooleanArray>(),
        ),
        DataType::Date32 => Arc::new(
            (0..rows)
                .map(|i| pick(i).map(|x| (x % 40_000) as i32 - 10_000))
                .collect::<Date32Array>(),
        ),
        DataType::Decimal128(p, s) => {
            // Within the precision, and small ones (prices, rates) too.
            let limit = 10i128.pow(u32::from(*p).min(18));
            let values: Decimal128Array = (0..rows)
                .map(|i| {
                    pick(i).map(|x| {
                        let v = i128::from(x) % limit;
                        if x % 3 == 0 {
                            v % 10_000
                        } else {
                            v - limit / 2
                        }
                    })
                })
                .collect();
            Arc::new(values.with_precision_and_scale(*p, *s).ok()?)
        }
        _ => return None,
    })
}

/// The argument columns of `sig`, `rows` long, from `seed`.
fn arguments(sig: &FunctionSignature, rows: usize, seed: u64) -> Result<Vec<ArrayRef>, String> {
    sig.arguments
        .iter()
        .enumerate()
        .map(|(i, t)| {
            column(t, rows, seed + i as u64).ok_or_else(|| {
                format!("argument {i} has type {t}, which `plugin test` cannot make")
            })
        })
        .collect()
}

/// Whether two answers are the same column: the same type, nulls and
/// values (floating-point values compared bit for bit, so a NaN equals
/// itself).
fn same_column(a: &ArrayRef, b: &ArrayRef) -> bool {
    if let (Some(x), Some(y)) = (
        a.as_any().downcast_ref::<Float64Array>(),
        b.as_any().downcast_ref::<Float64Array>(),
    ) {
        return x.len() == y.len()
            && (0..x.len()).all(|i| {
                x.is_null(i) == y.is_null(i)
                    && (x.is_null(i) || x.value(i).to_bits() == y.value(i).to_bits())
            });
    }
    a.to_data() == b.to_data()
}

/// Row `i` of `a` as text (`null` for null).
fn value_at(a: &ArrayRef, i: usize) -> String {
    let options = arrow_cast::display::FormatOptions::default().with_null("null");
    arrow_cast::display::ArrayFormatter::try_new(a.as_ref(), &options)
        .map_or_else(|e| format!("({e})"), |f| f.value(i).to_string())
}

/// The first row where two answers differ, for the message.
fn first_difference(a: &ArrayRef, b: &ArrayRef) -> String {
    let n = a.len().min(b.len());
    for i in 0..n {
        if !same_column(&a.slice(i, 1), &b.slice(i, 1)) {
            return format!("row {i}: {} then {}", value_at(a, i), value_at(b, i));
        }
    }
    format!("{} rows then {} rows", a.len(), b.len())
}

/// An IPC stream of one batch of `columns`, named `arg0`, `arg1`, ...
fn stream(columns: &[ArrayRef]) -> Result<Vec<u8>, String> {
    let fields: Vec<Field> = columns
        .iter()
        .enumerate()
        .map(|(i, c)| Field::new(format!("arg{i}"), c.data_type().clone(), true))
        .collect();
    let schema = Arc::new(Schema::new(fields));
    let batch = RecordBatch::try_new(Arc::clone(&schema), columns.to_vec())
        .map_err(|e| format!("cannot make a test batch: {e}"))?;
    let mut out = Vec::new();
    let mut w = arrow_ipc::writer::StreamWriter::try_new(&mut out, &schema)
        .map_err(|e| format!("cannot write a test batch: {e}"))?;
    w.write(&batch)
        .map_err(|e| format!("cannot write a test batch: {e}"))?;
    w.finish()
        .map_err(|e| format!("cannot write a test batch: {e}"))?;
    drop(w);
    Ok(out)
}

/// A type unlike `t`, for the wrong-schema batch.
fn other_type(t: &DataType) -> DataType {
    if *t == DataType::Utf8 {
        DataType::Int64
    } else {
        DataType::Utf8
    }
}

/// The verdict on an answer to bytes the function must refuse.
fn must_refuse(answer: Result<Vec<u8>, PluginError>, what: &str) -> Result<(), String> {
    match answer {
        Err(PluginError::Returned { .. }) => Ok(()),
        Err(other) => Err(format!(
            "{what}: expected an error value (`invalid-input`), got {}: {}",
            answer_case(&other),
            said(&other)
        )),
        Ok(_) => Err(format!(
            "{what}: it answered; a batch of another schema must get the error value `invalid-input`"
        )),
    }
}

/// The function, as a job calls it; a fresh pool of instances each time.
fn function(plugin: &LoadedPlugin) -> Result<Arc<ScalarFunction>, String> {
    plugin.scalar_function().map_err(|e| said(&e))
}

/// Every scalar-function check of `plugin`, in order.
pub(crate) fn checks(plugin: &LoadedPlugin) -> Vec<Check> {
    let Some(sig) = plugin.function_signature().cloned() else {
        return vec![check(
            "signature-stable",
            "",
            Box::new(|| Err("no signature was read at load".into())),
        )];
    };
    vec![
        check(
            "signature-stable",
            "`signature`, asked twice of each of two fresh instances, is the signature read at load",
            Box::new(|| signature_stable(plugin, &sig)),
        ),
        check(
            "declares-deterministic",
            "the signature says `deterministic: true` (recovery re-runs tasks; a job refuses a function that says false)",
            Box::new(|| declares_deterministic(&sig)),
        ),
        check(
            "answers-declared-type-and-rows",
            "batches of 301 rows (with nulls) and of 1 row of the declared types each get one column of the declared type and as many rows",
            Box::new(|| answers_declared_type_and_rows(plugin, &sig)),
        ),
        check(
            "deterministic-across-calls",
            "the same batch, twice on one instance (another batch between) and once on a fresh instance, gets the same column",
            Box::new(|| deterministic_across_calls(plugin, &sig)),
        ),
        check(
            "wrong-schema-is-an-error-value",
            "a batch with one column too many, and one whose first column has another type, get an error value (not a trap, not an answer)",
            Box::new(|| wrong_schema_is_an_error_value(plugin, &sig)),
        ),
        check(
            "not-arrow-is-an-error-value",
            "bytes that are not an Arrow IPC stream get an error value (not a trap)",
            Box::new(|| not_arrow_is_an_error_value(plugin)),
        ),
    ]
}

/// `signature-stable`: two fresh instances, asked twice each, give the
/// signature read at load.
fn signature_stable(
    plugin: &LoadedPlugin,
    sig: &FunctionSignature,
) -> Result<Option<String>, String> {
    for instance in 1..=2 {
        let all = plugin.query_signatures(2).map_err(|e| said(&e))?;
        for (call, got) in all.iter().enumerate() {
            if got != sig {
                return Err(format!(
                    "call {} of `signature` on fresh instance {instance} said {}, but at load it said {}",
                    call + 1,
                    show_signature(got),
                    show_signature(sig)
                ));
            }
        }
    }
    Ok(None)
}

/// `declares-deterministic`: the signature says `deterministic: true`.
fn declares_deterministic(sig: &FunctionSignature) -> Result<Option<String>, String> {
    if sig.deterministic {
        Ok(None)
    } else {
        Err("the signature says `deterministic: false`; a job refuses this function (recovery re-runs tasks and must get the rows the first run got)".into())
    }
}

/// `answers-declared-type-and-rows`: batches of [`ROWS`] rows and of 1 row
/// each get an answer (the host checks its type and row count).
fn answers_declared_type_and_rows(
    plugin: &LoadedPlugin,
    sig: &FunctionSignature,
) -> Result<Option<String>, String> {
    let f = function(plugin)?;
    for rows in [ROWS, 1] {
        let args = arguments(sig, rows, 1)?;
        f.call(&args, rows)
            .map_err(|e| format!("a batch of {rows} rows: {}", said(&e)))?;
    }
    Ok(None)
}

/// `deterministic-across-calls`: one batch, twice on one instance and once
/// on a fresh one, gets the same column.
fn deterministic_across_calls(
    plugin: &LoadedPlugin,
    sig: &FunctionSignature,
) -> Result<Option<String>, String> {
    let args = arguments(sig, ROWS, 1)?;
    let between = arguments(sig, ROWS, 2)?;
    let f = function(plugin)?;
    let first = f.call(&args, ROWS).map_err(|e| said(&e))?;
    f.call(&between, ROWS).map_err(|e| said(&e))?;
    let again = f.call(&args, ROWS).map_err(|e| said(&e))?;
    if !same_column(&first, &again) {
        return Err(format!(
            "the second call on one instance answered otherwise: {}",
            first_difference(&first, &again)
        ));
    }
    let fresh = function(plugin)?.call(&args, ROWS).map_err(|e| said(&e))?;
    if !same_column(&first, &fresh) {
        return Err(format!(
            "a fresh instance answered otherwise: {}",
            first_difference(&first, &fresh)
        ));
    }
    Ok(None)
}

/// `wrong-schema-is-an-error-value`: a batch with a column too many and one
/// with its first column retyped each get an error value.
fn wrong_schema_is_an_error_value(
    plugin: &LoadedPlugin,
    sig: &FunctionSignature,
) -> Result<Option<String>, String> {
    let f = function(plugin)?;
    let mut extra = arguments(sig, 5, 3)?;
    extra.push(column(&DataType::Utf8, 5, 4).ok_or("no Utf8 column")?);
    must_refuse(
        f.call_bytes(&stream(&extra)?),
        &format!("a batch of {} columns", extra.len()),
    )?;
    let f = function(plugin)?;
    let mut retyped = arguments(sig, 5, 3)?;
    let first = sig.arguments.first().map_or(DataType::Int64, other_type);
    let replaced = column(&first, 5, 5).ok_or("no column")?;
    if retyped.is_empty() {
        retyped.push(replaced);
    } else {
        retyped[0] = replaced;
    }
    must_refuse(
        f.call_bytes(&stream(&retyped)?),
        &format!("a batch whose first column is {first}"),
    )?;
    Ok(None)
}

/// `not-arrow-is-an-error-value`: bytes that are not Arrow IPC get an error
/// value.
fn not_arrow_is_an_error_value(plugin: &LoadedPlugin) -> Result<Option<String>, String> {
    let f = function(plugin)?;
    must_refuse(
        f.call_bytes(b"\xff\xff\xff\xffnot an Arrow IPC stream"),
        "bytes that are not Arrow IPC",
    )?;
    Ok(None)
}

/// A signature as `plugin call` prints it: `(Int64, Utf8) -> Float64, deterministic: true`.
pub(crate) fn show_signature(sig: &FunctionSignature) -> String {
    let args: Vec<String> = sig.arguments.iter().map(ToString::to_string).collect();
    format!(
        "({}) -> {}, deterministic: {}",
        args.join(", "),
        sig.returns,
        sig.deterministic
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_columns_have_every_declared_type_nulls_and_the_row_count() {
        for t in [
            DataType::Int64,
            DataType::Float64,
            DataType::Utf8,
            DataType::Boolean,
            DataType::Date32,
            DataType::Decimal128(15, 2),
            DataType::Decimal128(38, 10),
            DataType::Decimal128(1, 0),
        ] {
            let c = column(&t, ROWS, 1).expect("a column");
            assert_eq!(c.data_type(), &t);
            assert_eq!(c.len(), ROWS);
            assert_eq!(c.null_count(), (3..ROWS).step_by(NULL_EVERY).count(), "{t}");
            assert!(
                same_column(&c, &column(&t, ROWS, 1).expect("again")),
                "{t}: seeded"
            );
            assert!(
                !same_column(&c, &column(&t, ROWS, 2).expect("other")),
                "{t}: seed matters"
            );
        }
        assert!(column(&DataType::Int8, 3, 1).is_none());
    }

    #[test]
    fn same_column_compares_floats_bit_for_bit_and_finds_the_first_difference() {
        let a: ArrayRef = Arc::new(Float64Array::from(vec![Some(f64::NAN), None, Some(1.0)]));
        let b: ArrayRef = Arc::new(Float64Array::from(vec![Some(f64::NAN), None, Some(2.0)]));
        assert!(same_column(&a, &a));
        assert!(!same_column(&a, &b));
        assert_eq!(first_difference(&a, &b), "row 2: 1.0 then 2.0");
    }
}
