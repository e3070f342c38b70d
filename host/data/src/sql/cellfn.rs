//! The host's own DataFusion scalar functions, which the graph form's
//! operators are lowered onto (`super::chain`, docs/job-file.md,
//! "Operators"): what DataFusion has no function for, with the job file's
//! rules.
//!
//! | function | arguments | result |
//! |---|---|---|
//! | `coordhost_words` / `coordhost_words_lower` | a value | `List<Utf8>`: the maximal runs of letters and digits of its text (`char::is_alphanumeric`), lower-cased by the second (`str::to_lowercase`); `tokenize` unnests it |
//! | `coordhost_number` | a value [, its file] | `Decimal128(38, 6)`: text read by the job file's number rule ([`coordhost_model::value::cells::parse_decimal`]), integers and decimals exactly; anything else fails the task naming the value |
//! | `coordhost_count` | a count state column [, its file] | `Int64`: integers as they are, their text parsed |
//! | `coordhost_average` | a sum (`Decimal128(38, 6)`), a count | `Decimal128(38, d)`: the exact quotient rounded once, half away from zero |
//!
//! The optional second argument of `coordhost_number` and `coordhost_count`
//! is the file each row was read from (the `__file` column of a source
//! vertex's input, `super::chain::FILE_COLUMN`): an error names it, as a
//! data error of a source task always did.
//!
//! A value that is not a number fails with a [`ValueError`] that says it is
//! permanent (the same input fails the same way); the caller finds it in
//! DataFusion's error with [`value_error`].

use std::fmt;
use std::sync::Arc;

use arrow_array::builder::{ListBuilder, StringBuilder};
use arrow_array::cast::AsArray;
use arrow_array::types::Decimal128Type;
use arrow_array::{Array, ArrayRef, Int64Array};
use arrow_schema::{DataType, Field};
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

use coordhost_model::value::cells::{self, NotANumber, quote_value};
use coordhost_model::value::write_cell_text;

/// Digits after the point of the numbers operators compute with.
pub const STATE_SCALE: i8 = 6;

/// A value an operator cannot use, or an aggregate that cannot be
/// computed: the message, and whether running the task again must fail the
/// same way (a value of the input: a data error, not retried).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValueError {
    /// What is wrong: the file (for a source vertex), the operator and the
    /// value, e.g. ``a.csv: aggregate: `abc` is not a number``.
    pub detail: String,
    /// The input itself is wrong.
    pub permanent: bool,
}

impl fmt::Display for ValueError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.detail)
    }
}

impl std::error::Error for ValueError {}

/// The [`ValueError`] somewhere in `e`'s chain of causes, if there is one.
#[must_use]
pub fn value_error(e: &DataFusionError) -> Option<ValueError> {
    let mut at: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = at {
        if let Some(v) = err.downcast_ref::<ValueError>() {
            return Some(v.clone());
        }
        if let Some(DataFusionError::External(inner)) = err.downcast_ref::<DataFusionError>()
            && let Some(v) = inner.downcast_ref::<ValueError>()
        {
            return Some(v.clone());
        }
        at = err.source();
    }
    None
}

fn fail(detail: String, permanent: bool) -> DataFusionError {
    DataFusionError::External(Box::new(ValueError { detail, permanent }))
}

/// The operator a number is read for, in messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reader {
    /// A `filter` with `type = "number"`.
    Filter,
    /// An `aggregate`.
    Aggregate,
}

impl Reader {
    fn word(self) -> &'static str {
        match self {
            Reader::Filter => "filter",
            Reader::Aggregate => "aggregate",
        }
    }
}

/// The message for a value that is not a `what` (`number`, `count`):
/// prefixed with row `row`'s file when the call has a file column.
fn not_a(reader: Reader, what: &str, e: &NotANumber, file: Option<&ArrayRef>) -> String {
    let prefix = file
        .filter(|f| e.row < f.len())
        .map(|f| format!("{}: ", cells::cell_text(f.as_ref(), e.row)))
        .unwrap_or_default();
    format!(
        "{prefix}{}: {} is not a {what}",
        reader.word(),
        quote_value(&e.text)
    )
}

/// The arguments of a call as arrays of `rows` rows.
fn arrays(args: &ScalarFunctionArgs) -> DfResult<Vec<ArrayRef>> {
    args.args
        .iter()
        .map(|a| a.to_array(args.number_rows))
        .collect()
}

/// `coordhost_words` / `coordhost_words_lower`.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Words {
    lowercase: bool,
    signature: Signature,
}

/// The words of a value (see the module table).
#[must_use]
pub fn words(lowercase: bool) -> ScalarUDF {
    ScalarUDF::new_from_impl(Words {
        lowercase,
        signature: Signature::any(1, Volatility::Immutable),
    })
}

fn list_of_text() -> DataType {
    DataType::List(Arc::new(Field::new("item", DataType::Utf8, true)))
}

impl ScalarUDFImpl for Words {
    fn name(&self) -> &str {
        if self.lowercase {
            "coordhost_words_lower"
        } else {
            "coordhost_words"
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(list_of_text())
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let [column] = arrays(&args)?.try_into().map_err(|_| {
            DataFusionError::Internal(format!("{} takes one argument", self.name()))
        })?;
        let mut out = ListBuilder::with_capacity(
            StringBuilder::with_capacity(column.len() * 8, column.len() * 48),
            column.len(),
        );
        let mut text = String::new();
        let mut lower = String::new();
        for row in 0..column.len() {
            text.clear();
            // A null's text is empty: no words.
            write_cell_text(column.as_ref(), row, &mut text);
            for word in text
                .split(|c: char| !c.is_alphanumeric())
                .filter(|w| !w.is_empty())
            {
                if !self.lowercase {
                    out.values().append_value(word);
                } else if word.is_ascii() {
                    lower.clear();
                    lower.push_str(word);
                    lower.make_ascii_lowercase();
                    out.values().append_value(&lower);
                } else {
                    out.values().append_value(word.to_lowercase());
                }
            }
            out.append(true);
        }
        Ok(ColumnarValue::Array(Arc::new(out.finish())))
    }
}

/// `coordhost_number`.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Number {
    reader: Reader,
    signature: Signature,
}

/// A value as an exact number (see the module table), read for `reader`.
#[must_use]
pub fn number(reader: Reader) -> ScalarUDF {
    ScalarUDF::new_from_impl(Number {
        reader,
        signature: Signature::variadic_any(Volatility::Immutable),
    })
}

impl ScalarUDFImpl for Number {
    fn name(&self) -> &str {
        "coordhost_number"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Decimal128(cells::DECIMAL_PRECISION, STATE_SCALE))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let arrays = arrays(&args)?;
        let column = arrays.first().ok_or_else(|| {
            DataFusionError::Internal("coordhost_number takes a value".to_string())
        })?;
        let values = match column.data_type() {
            DataType::Utf8 | DataType::Int64 | DataType::Decimal128(..) | DataType::Date32 => {
                cells::decimal_column(column.as_ref(), STATE_SCALE as u32)
            }
            // No other type comes from the graph form's readers.
            _ if column.is_empty() => Ok(Vec::new()),
            _ => Err(NotANumber {
                row: 0,
                text: cells::cell_text(column.as_ref(), 0).into_owned(),
            }),
        }
        .map_err(|e| fail(not_a(self.reader, "number", &e, arrays.get(1)), true))?;
        Ok(ColumnarValue::Array(Arc::new(cells::decimal_array(
            values,
            STATE_SCALE,
        ))))
    }
}

/// `coordhost_count`.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Count {
    signature: Signature,
}

/// A count state column as `Int64` (see the module table).
#[must_use]
pub fn count() -> ScalarUDF {
    ScalarUDF::new_from_impl(Count {
        signature: Signature::variadic_any(Volatility::Immutable),
    })
}

impl ScalarUDFImpl for Count {
    fn name(&self) -> &str {
        "coordhost_count"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Int64)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let arrays = arrays(&args)?;
        let column = arrays.first().ok_or_else(|| {
            DataFusionError::Internal("coordhost_count takes a value".to_string())
        })?;
        if column.data_type() == &DataType::Int64 && column.null_count() == 0 {
            return Ok(ColumnarValue::Array(Arc::clone(column)));
        }
        let counts = cells::count_column(column.as_ref())
            .map_err(|e| fail(not_a(Reader::Aggregate, "count", &e, arrays.get(1)), true))?;
        Ok(ColumnarValue::Array(Arc::new(Int64Array::from(
            counts.into_owned(),
        ))))
    }
}

/// `coordhost_average`.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Average {
    decimals: i8,
    signature: Signature,
}

/// `sum / count` with `decimals` digits after the point (at most
/// [`STATE_SCALE`]), rounded once, half away from zero.
#[must_use]
pub fn average(decimals: u32) -> ScalarUDF {
    ScalarUDF::new_from_impl(Average {
        decimals: i8::try_from(decimals.min(STATE_SCALE as u32)).unwrap_or(STATE_SCALE),
        signature: Signature::any(2, Volatility::Immutable),
    })
}

impl ScalarUDFImpl for Average {
    fn name(&self) -> &str {
        "coordhost_average"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Decimal128(
            cells::DECIMAL_PRECISION,
            self.decimals,
        ))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let arrays = arrays(&args)?;
        let (Some(sums), Some(counts)) = (arrays.first(), arrays.get(1)) else {
            return Err(DataFusionError::Internal(
                "coordhost_average takes a sum and a count".to_string(),
            ));
        };
        let (DataType::Decimal128(_, STATE_SCALE), DataType::Int64) =
            (sums.data_type(), counts.data_type())
        else {
            return Err(DataFusionError::Internal(format!(
                "coordhost_average of {} and {}",
                sums.data_type(),
                counts.data_type()
            )));
        };
        let sums = sums.as_primitive::<Decimal128Type>();
        let counts = counts.as_primitive::<arrow_array::types::Int64Type>();
        let d = u32::try_from(self.decimals).unwrap_or(0);
        let unit = 10i128.pow(STATE_SCALE as u32);
        let mut out = Vec::with_capacity(sums.len());
        for (s, c) in sums.values().iter().zip(counts.values()) {
            if *c == 0 {
                return Err(fail("aggregate: an average over 0 rows".to_string(), false));
            }
            let num = s * 10i128.pow(d);
            out.push(cells::div_round_signed(num, i128::from(*c) * unit));
        }
        Ok(ColumnarValue::Array(Arc::new(cells::decimal_array(
            out,
            self.decimals,
        ))))
    }
}
