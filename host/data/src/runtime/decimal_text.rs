//! Decimal fields of CSV text, rounded to the declared scale.
//!
//! arrow-csv 59 parses a `Decimal128(P, S)` field with
//! `arrow_cast::parse::parse_decimal`, which drops the digits past `S`:
//! `5.129` as `decimal(10,2)` reads as `5.12`, `-5.125` as `-5.12` — a
//! wrong sum with exit 0. (The cast from text, `arrow_cast::cast`, rounds,
//! but trims spaces and makes a string per value.) coordhost rounds half
//! away from zero to `S` digits, as PostgreSQL's `numeric`, DuckDB and
//! Spark's CSV reader do (Java's `HALF_UP`), and refuses a value whose
//! rounded form has more than `P` digits.
//!
//! How: arrow-csv reads the field one digit finer ([`finer`]: precision
//! and scale one higher), where its truncation keeps exactly the first
//! digit past `S`; that digit alone decides the rounding (5 or more is at
//! least half a unit), done over the whole column by [`round_finer`].
//! [`parse_rounded`] is the same rule for one text (the search for the bad
//! value when a task fails). The syntax is arrow-csv's: an optional sign,
//! digits with at most one point, an optional exponent; no spaces.

use arrow_array::cast::AsArray;
use arrow_array::types::{Decimal128Type, Decimal256Type, DecimalType};
use arrow_array::{Array, Decimal128Array};
use arrow_buffer::i256;
use arrow_schema::DataType;

/// The type arrow-csv reads a `decimal(precision, scale)` field as: one
/// digit finer (`Decimal256` past 38 digits).
pub fn finer(precision: u8, scale: i8) -> DataType {
    if precision < Decimal128Type::MAX_PRECISION {
        DataType::Decimal128(precision + 1, scale + 1)
    } else {
        DataType::Decimal256(precision + 1, scale + 1)
    }
}

/// `v` (one digit finer than wanted) divided by 10, rounded half away from
/// zero.
fn round_last_digit(v: i128) -> i128 {
    let (q, r) = (v / 10, v % 10);
    if r >= 5 {
        q + 1
    } else if r <= -5 {
        q - 1
    } else {
        q
    }
}

/// [`round_last_digit`] for a `Decimal256` value; `None` past `i128`.
fn round_last_digit_256(v: i256) -> Option<i128> {
    let ten = i256::from_i128(10);
    let (q, r) = (v.wrapping_div(ten), v.wrapping_rem(ten));
    let q = if r >= i256::from_i128(5) {
        q.wrapping_add(i256::ONE)
    } else if r <= i256::from_i128(-5) {
        q.wrapping_sub(i256::ONE)
    } else {
        q
    };
    q.to_i128()
}

/// A column arrow-csv read as [`finer`]`(precision, scale)`, rounded to
/// `Decimal128(precision, scale)`, NULL where it is NULL; `Err(row)`: the
/// first row whose rounded value has more than `precision` digits.
pub fn round_finer(column: &dyn Array, precision: u8, scale: i8) -> Result<Decimal128Array, usize> {
    let rounded: Decimal128Array = match column.data_type() {
        DataType::Decimal128(..) => column
            .as_primitive::<Decimal128Type>()
            .unary(round_last_digit),
        _ => {
            let wide = column.as_primitive::<Decimal256Type>();
            let mut values = Vec::with_capacity(wide.len());
            for (row, &v) in wide.values().iter().enumerate() {
                match round_last_digit_256(v) {
                    Some(v) => values.push(v),
                    None if wide.is_null(row) => values.push(0),
                    None => return Err(row),
                }
            }
            Decimal128Array::new(values.into(), wide.nulls().cloned())
        }
    };
    if let Some(row) = (0..rounded.len()).find(|&row| {
        rounded.is_valid(row)
            && !Decimal128Type::is_valid_decimal_precision(rounded.value(row), precision)
    }) {
        return Err(row);
    }
    rounded
        .with_precision_and_scale(precision, scale)
        .map_err(|_| 0)
}

/// `text` as a `Decimal128(precision, scale)` value (units of
/// `10^-scale`) by the same rule as [`finer`] and [`round_finer`]; `None`
/// if it is not a decimal number or its rounded value has more than
/// `precision` digits.
pub fn parse_rounded(text: &str, precision: u8, scale: i8) -> Option<i128> {
    let rounded = if precision < Decimal128Type::MAX_PRECISION {
        round_last_digit(
            arrow_cast::parse::parse_decimal::<Decimal128Type>(text, precision + 1, scale + 1)
                .ok()?,
        )
    } else {
        round_last_digit_256(
            arrow_cast::parse::parse_decimal::<Decimal256Type>(text, precision + 1, scale + 1)
                .ok()?,
        )?
    };
    Decimal128Type::is_valid_decimal_precision(rounded, precision).then_some(rounded)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digits_past_the_scale_round_half_away_from_zero() {
        let cases: &[(&str, Option<i128>)] = &[
            ("5.129", Some(513)),
            ("5.125", Some(513)),
            ("5.1249999", Some(512)),
            ("-5.125", Some(-513)),
            ("-5.124", Some(-512)),
            ("5.12", Some(512)),
            ("5.1", Some(510)),
            ("5", Some(500)),
            ("+5.", Some(500)),
            (".5", Some(50)),
            ("0.005", Some(1)),
            ("-0.005", Some(-1)),
            ("-0.004", Some(0)),
            ("1.2345e1", Some(1235)),
            ("99999999.99", Some(9_999_999_999)),
            // Rounds past 10 digits: decimal(10,2) cannot hold 100000000.00.
            ("99999999.995", None),
            ("999999999.0", None),
            (" 5.00 ", None),
            ("5.00 ", None),
            ("5,00", None),
            ("abc", None),
            ("", None),
            ("1.2.3", None),
        ];
        for &(text, want) in cases {
            assert_eq!(parse_rounded(text, 10, 2), want, "{text:?}");
        }
        // Scale 0 rounds to whole units; precision 38 goes through i256.
        assert_eq!(parse_rounded("2.5", 5, 0), Some(3));
        assert_eq!(parse_rounded("-2.5", 5, 0), Some(-3));
        assert_eq!(parse_rounded("2.49", 5, 0), Some(2));
        assert_eq!(parse_rounded("1.005", 38, 2), Some(101));
        assert_eq!(parse_rounded("-1.005", 38, 2), Some(-101));
        // 36 + 2 digits: the largest decimal(38,2); rounding up overflows.
        let nines: i128 = "9".repeat(38).parse().expect("38 nines fit an i128");
        assert_eq!(
            parse_rounded(&("9".repeat(36) + ".994"), 38, 2),
            Some(nines)
        );
        assert_eq!(parse_rounded(&("9".repeat(36) + ".995"), 38, 2), None);
    }

    #[test]
    fn a_finer_column_rounds_keeps_its_nulls_and_names_the_first_row_too_wide() {
        use arrow_array::Decimal256Array;
        let finer128 = Decimal128Array::from(vec![Some(10_050), None, Some(-20_005), Some(-4)])
            .with_precision_and_scale(11, 3)
            .expect("decimal(11,3)");
        let d = round_finer(&finer128, 10, 2).expect("decimals");
        assert_eq!(d.data_type(), &DataType::Decimal128(10, 2));
        assert_eq!(
            (d.value(0), d.is_null(1), d.value(2), d.value(3)),
            (1_005, true, -2_001, 0)
        );
        // 9.995 rounds to 10.00: four digits, too many for decimal(3,2).
        let wide = Decimal128Array::from(vec![Some(1_000), Some(9_995)])
            .with_precision_and_scale(4, 3)
            .expect("decimal(4,3)");
        assert_eq!(round_finer(&wide, 3, 2).err(), Some(1));
        let finer256 = Decimal256Array::from(vec![Some(i256::from_i128(-25)), None])
            .with_precision_and_scale(39, 1)
            .expect("decimal(39,1)");
        let d = round_finer(&finer256, 38, 0).expect("decimals");
        assert_eq!((d.value(0), d.is_null(1)), (-3, true));
        assert_eq!(finer(10, 2), DataType::Decimal128(11, 3));
        assert_eq!(finer(38, 2), DataType::Decimal256(39, 3));
    }
}
