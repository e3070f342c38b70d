//! Cells of Arrow record batches: the text of a value, and columns read as
//! exact numbers.
//!
//! A [`RecordBatch`] is what the data plane moves
//! (issue 16: operators, result partitions, sinks). The graph form's
//! columns are `Utf8` (text read by `read-lines` / `read-csv`), `Int64`
//! (counts), `Decimal128` (sums and averages, Parquet decimals) or
//! `Date32` (Parquet dates). What shows a value as text — a sink's CSV or
//! text line, the key hash of a `hash` edge, a data error's message — uses
//! [`cell_text`], so one value has one text whatever type carries it:
//!
//! | type | text |
//! |---|---|
//! | `Utf8` | as is |
//! | `Int64` | decimal digits, `-` for negatives |
//! | `Decimal128(p, s)` | exactly `s` digits after the point (no point when `s` is 0), `-` for negatives; a negative `s` appends `-s` zeros |
//! | `Date32` | `YYYY-MM-DD` (proleptic Gregorian; a year outside 0..=9999 as `+YYYYY` / `-YYYY`, as chrono prints it) |
//! | a null of any type | empty |
//!
//! The operators themselves are DataFusion's (`crate::sql::chain`); the
//! host's functions they call read numbers column-wise into `i128` counts
//! of `10^-scale` units ([`decimal_column`]) with the accept/reject rule of
//! [`Decimal::parse`](super::Decimal::parse) for text, and exactly for
//! typed columns, so an aggregate or a numeric filter gives the same result
//! for `"12.50"` in a CSV file as for `12.50` in a `Decimal128(15, 2)`
//! column.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Date32Type, Decimal128Type, Int64Type};
use arrow_array::{Array, ArrayRef, Decimal128Array, RecordBatch, RecordBatchOptions, StringArray};
use arrow_schema::{DataType, Field, Schema};

/// Most rows in one record batch that a source reader builds (Arrow's and
/// DataFusion's default batch size).
pub const BATCH_ROWS: usize = 8192;

/// Most digits before the point a decimal may have (text or typed): 30,
/// so that sums of many values at 6 digits after the point stay inside `i128`.
pub const MAX_INT_DIGITS: usize = 30;

/// Precision of the `Decimal128` columns aggregates create (Arrow's maximum).
pub const DECIMAL_PRECISION: u8 = 38;

/// The text of row `row` of `column` (the table above). Borrows `Utf8`
/// values; formats the others.
///
/// # Panics
///
/// If `row` is out of bounds. Types other than `Utf8`, `Int64`,
/// `Decimal128`, `Date32` (the graph form's types) come from SQL stages
/// and are shown as Arrow displays them (a type Arrow cannot display
/// panics).
pub fn cell_text(column: &dyn Array, row: usize) -> Cow<'_, str> {
    if let DataType::Utf8 = column.data_type() {
        if column.is_null(row) {
            return Cow::Borrowed("");
        }
        return Cow::Borrowed(column.as_string::<i32>().value(row));
    }
    let mut s = String::new();
    write_cell_text(column, row, &mut s);
    Cow::Owned(s)
}

/// Appends the text of row `row` of `column` to `out` (as [`cell_text`],
/// without allocating a string per cell).
///
/// # Panics
///
/// As [`cell_text`].
pub fn write_cell_text(column: &dyn Array, row: usize, out: &mut String) {
    if column.is_null(row) {
        return;
    }
    match column.data_type() {
        DataType::Utf8 => out.push_str(column.as_string::<i32>().value(row)),
        DataType::Int64 => {
            let _infallible = write!(out, "{}", column.as_primitive::<Int64Type>().value(row));
        }
        DataType::Decimal128(_, scale) => {
            let v = column.as_primitive::<Decimal128Type>().value(row);
            write_decimal(v, *scale, out);
        }
        DataType::Date32 => {
            write_date(column.as_primitive::<Date32Type>().value(row), out);
        }
        // Other types come from SQL stages (docs/sql.md): Arrow's display.
        _ => match arrow_cast::display::ArrayFormatter::try_new(
            column,
            &arrow_cast::display::FormatOptions::default(),
        ) {
            Ok(f) => {
                let _infallible = write!(out, "{}", f.value(row));
            }
            Err(e) => panic!(
                "a column of type {} cannot be shown: {e}",
                column.data_type()
            ),
        },
    }
}

/// The longest value a data error quotes, in characters; a longer one is
/// cut and ends with `…`.
pub const MAX_VALUE_CHARS: usize = 40;

/// `value` as a data error quotes it: control characters escaped, cut to
/// [`MAX_VALUE_CHARS`] characters (then ending with `…`), in backticks.
#[must_use]
pub fn quote_value(value: &str) -> String {
    let mut out = String::from("`");
    for (n, c) in value.chars().enumerate() {
        if n == MAX_VALUE_CHARS {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out.push('`');
    out
}

/// A record batch of `columns` named `c0`, `c1`, … (the graph form
/// addresses columns by index; the names only label Arrow IPC streams).
///
/// # Panics
///
/// If the columns differ in length.
pub fn batch_of(columns: Vec<ArrayRef>) -> RecordBatch {
    let rows = columns.first().map_or(0, |c| c.len());
    let fields: Vec<Field> = columns
        .iter()
        .enumerate()
        .map(|(i, c)| Field::new(format!("c{i}"), c.data_type().clone(), true))
        .collect();
    RecordBatch::try_new_with_options(
        Arc::new(Schema::new(fields)),
        columns,
        &RecordBatchOptions::new().with_row_count(Some(rows)),
    )
    .expect("columns of one length")
}

/// Appends `value * 10^-scale` with exactly `scale` digits after the point.
pub fn write_decimal(value: i128, scale: i8, out: &mut String) {
    if value < 0 {
        out.push('-');
    }
    let abs = value.unsigned_abs();
    if scale <= 0 {
        let _infallible = write!(out, "{abs}");
        if abs != 0 {
            for _ in 0..(-i32::from(scale)) {
                out.push('0');
            }
        }
        return;
    }
    let unit = 10u128.pow(u32::from(scale.unsigned_abs()));
    let _infallible = write!(
        out,
        "{}.{:0width$}",
        abs / unit,
        abs % unit,
        width = scale as usize
    );
}

/// Appends the date `days` after 1970-01-01 as `YYYY-MM-DD`.
pub fn write_date(days: i32, out: &mut String) {
    let (y, m, d) = civil_from_days(days);
    let _infallible = if (0..=9999).contains(&y) {
        write!(out, "{y:04}-{m:02}-{d:02}")
    } else if y > 9999 {
        write!(out, "+{y}-{m:02}-{d:02}")
    } else {
        write!(out, "-{:04}-{m:02}-{d:02}", -y)
    };
}

/// Year, month (1..=12) and day (1..=31) of the date `days` after
/// 1970-01-01 (Howard Hinnant's `civil_from_days`).
pub fn civil_from_days(days: i32) -> (i64, u32, u32) {
    let z = i64::from(days) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// Days after 1970-01-01 of a date (inverse of [`civil_from_days`]).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = i64::from(if m > 2 { m - 3 } else { m + 9 });
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The `Date32` value whose text ([`cell_text`]) is exactly `text`, if
/// `text` is such a date (`YYYY-MM-DD`, year 0000..=9999, a real day).
pub fn parse_date(text: &str) -> Option<i32> {
    let b = text.as_bytes();
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<u32> {
        b[r].iter().try_fold(0u32, |acc, &c| {
            c.is_ascii_digit().then(|| acc * 10 + u32::from(c - b'0'))
        })
    };
    let (y, m, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    if !(1..=12).contains(&m) || d == 0 {
        return None;
    }
    let days = i32::try_from(days_from_civil(i64::from(y), m, d)).ok()?;
    (civil_from_days(days) == (i64::from(y), m, d)).then_some(days)
}

/// First and last `Date32` value whose text is a plain `YYYY-MM-DD` (years
/// 0000 and 9999): inside this range, comparing dates is comparing texts.
pub fn plain_date_range() -> std::ops::RangeInclusive<i32> {
    let first = days_from_civil(0, 1, 1) as i32;
    let last = days_from_civil(9999, 12, 31) as i32;
    first..=last
}

/// Parses `[-+]digits[.digits]` (surrounding whitespace ignored) with at
/// most `scale` digits after the point and at most [`MAX_INT_DIGITS`]
/// before it, as a count of `10^-scale` units; `None` for anything else
/// (an empty string, a lone sign or point, an exponent). The rule of
/// [`Decimal::parse`](super::Decimal::parse), which calls it with scale 6.
///
/// # Panics
///
/// If `scale` is over 6 + 2 (beyond what `i128` holds with 30 integer digits).
pub fn parse_decimal(s: &str, scale: u32) -> Option<i128> {
    assert!(scale <= 8, "scale {scale} is over 8");
    let s = s.trim();
    let (neg, body) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    // One pass: digits, at most one point, nothing else.
    let (mut v, mut int_digits, mut frac_digits, mut point) = (0i128, 0usize, 0u32, false);
    for &c in body.as_bytes() {
        match c {
            b'0'..=b'9' => {
                if point {
                    frac_digits += 1;
                    if frac_digits > scale {
                        return None;
                    }
                } else {
                    int_digits += 1;
                    if int_digits > MAX_INT_DIGITS {
                        return None;
                    }
                }
                v = v * 10 + i128::from(c - b'0');
            }
            b'.' if !point => point = true,
            _ => return None,
        }
    }
    if int_digits == 0 && frac_digits == 0 {
        return None;
    }
    v *= 10i128.pow(scale - frac_digits);
    Some(if neg { -v } else { v })
}

/// A cell that is not a number (or not a count): its row and its text, for
/// the operator's message (`` `TEXT` is not a number ``).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotANumber {
    /// Row in the batch.
    pub row: usize,
    /// The cell's text ([`cell_text`]).
    pub text: String,
}

fn not_a_number(column: &dyn Array, row: usize) -> NotANumber {
    NotANumber {
        row,
        text: cell_text(column, row).into_owned(),
    }
}

/// `column` as exact numbers in `10^-scale` units, one per row:
///
/// - `Utf8`: [`parse_decimal`] (the text rule of the job file's numbers);
/// - `Int64`: the integer;
/// - `Decimal128(p, s)`: the same value, if it has no more than `scale`
///   significant digits after the point and at most [`MAX_INT_DIGITS`]
///   before it;
/// - `Date32` or a null: not a number.
///
/// # Errors
///
/// [`NotANumber`] for the first row that is not a number.
///
/// # Panics
///
/// As [`parse_decimal`] for the scale; for a type outside the data plane.
pub fn decimal_column(column: &dyn Array, scale: u32) -> Result<Vec<i128>, NotANumber> {
    let n = column.len();
    let unit = 10i128.pow(scale);
    match column.data_type() {
        DataType::Utf8 => {
            let a: &StringArray = column.as_string::<i32>();
            let mut out = Vec::with_capacity(n);
            for row in 0..n {
                let v = if a.is_null(row) {
                    None
                } else {
                    parse_decimal(a.value(row), scale)
                };
                out.push(v.ok_or_else(|| not_a_number(column, row))?);
            }
            Ok(out)
        }
        DataType::Int64 => {
            let a = column.as_primitive::<Int64Type>();
            if let Some(row) = (0..n).find(|&r| a.is_null(r)) {
                return Err(not_a_number(column, row));
            }
            Ok(a.values().iter().map(|&v| i128::from(v) * unit).collect())
        }
        DataType::Decimal128(_, s) => {
            let a: &Decimal128Array = column.as_primitive::<Decimal128Type>();
            let s = i32::from(*s);
            let max = 10i128.pow(MAX_INT_DIGITS as u32) * unit;
            let mut out = Vec::with_capacity(n);
            for row in 0..n {
                let v = if a.is_null(row) {
                    None
                } else {
                    rescale(a.value(row), s, scale as i32).filter(|v| v.abs() < max)
                };
                out.push(v.ok_or_else(|| not_a_number(column, row))?);
            }
            Ok(out)
        }
        DataType::Date32 if n == 0 => Ok(Vec::new()),
        DataType::Date32 => Err(not_a_number(column, 0)),
        other => panic!("a column of type {other} is not part of the data plane"),
    }
}

/// `v * 10^-from` as a count of `10^-to` units, if exact and inside `i128`.
fn rescale(v: i128, from: i32, to: i32) -> Option<i128> {
    if from <= to {
        10i128
            .checked_pow((to - from) as u32)
            .and_then(|f| v.checked_mul(f))
    } else {
        let f = 10i128.checked_pow((from - to) as u32)?;
        (v % f == 0).then_some(v / f)
    }
}

/// `column` as counts (the state column of a `count` or an `avg`'s count
/// in a `final` aggregate): `Int64` as is, `Utf8` parsed as an `i64`
/// (Rust's `str::parse`: an optional sign and digits), a `Decimal128` of
/// scale 0 that fits.
///
/// # Errors
///
/// [`NotANumber`] for the first row that is not a count.
pub fn count_column(column: &dyn Array) -> Result<Cow<'_, [i64]>, NotANumber> {
    let n = column.len();
    match column.data_type() {
        DataType::Int64 => match (0..n).find(|&r| column.is_null(r)) {
            None => Ok(Cow::Borrowed(column.as_primitive::<Int64Type>().values())),
            Some(row) => Err(not_a_number(column, row)),
        },
        DataType::Utf8 => {
            let a = column.as_string::<i32>();
            let mut out = Vec::with_capacity(n);
            for row in 0..n {
                let v = if a.is_null(row) {
                    None
                } else {
                    a.value(row).parse::<i64>().ok()
                };
                out.push(v.ok_or_else(|| not_a_number(column, row))?);
            }
            Ok(Cow::Owned(out))
        }
        DataType::Decimal128(_, 0) => {
            let a = column.as_primitive::<Decimal128Type>();
            let mut out = Vec::with_capacity(n);
            for row in 0..n {
                let v = if a.is_null(row) {
                    None
                } else {
                    i64::try_from(a.value(row)).ok()
                };
                out.push(v.ok_or_else(|| not_a_number(column, row))?);
            }
            Ok(Cow::Owned(out))
        }
        _ if n == 0 => Ok(Cow::Owned(Vec::new())),
        _ => Err(not_a_number(column, 0)),
    }
}

/// `values` (counts of `10^-scale` units) as a `Decimal128(38, scale)` column.
pub fn decimal_array(values: Vec<i128>, scale: i8) -> Decimal128Array {
    Decimal128Array::from(values)
        .with_precision_and_scale(DECIMAL_PRECISION, scale)
        .expect("precision 38 holds any scale up to 38")
}

/// `num / den` rounded half away from zero (`den != 0`).
pub fn div_round_signed(num: i128, den: i128) -> i128 {
    let (q, r) = (num / den, num % den);
    if 2 * r.abs() >= den.abs() {
        q + num.signum() * den.signum()
    } else {
        q
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Date32Array, Int64Array};

    #[test]
    fn every_type_has_one_text() {
        let s = StringArray::from(vec![Some("a,b"), None]);
        assert_eq!(cell_text(&s, 0), "a,b");
        assert_eq!(cell_text(&s, 1), "");
        let i = Int64Array::from(vec![0, -42, i64::MAX]);
        assert_eq!(cell_text(&i, 1), "-42");
        assert_eq!(cell_text(&i, 2), "9223372036854775807");
        let d = decimal_array(vec![-5, 123_456, 0, -100], 2);
        let texts: Vec<_> = (0..4).map(|r| cell_text(&d, r).into_owned()).collect();
        assert_eq!(texts, ["-0.05", "1234.56", "0.00", "-1.00"]);
        let d0 = decimal_array(vec![17, -3], 0);
        assert_eq!(cell_text(&d0, 0), "17");
        assert_eq!(cell_text(&d0, 1), "-3");
        let mut neg = String::new();
        write_decimal(12, -2, &mut neg);
        assert_eq!(neg, "1200");
        let dates = Date32Array::from(vec![0, 10_471, -1, 2_932_897, -719_529]);
        let texts: Vec<_> = (0..5).map(|r| cell_text(&dates, r).into_owned()).collect();
        assert_eq!(
            texts,
            [
                "1970-01-01",
                "1998-09-02",
                "1969-12-31",
                "+10000-01-01",
                "-0001-12-31"
            ]
        );
    }

    #[test]
    fn decimal_and_date_texts_are_exact() {
        let dec = |v, s| {
            let mut t = String::new();
            write_decimal(v, s, &mut t);
            t
        };
        assert_eq!(dec(12345, 2), "123.45");
        assert_eq!(dec(-5, 2), "-0.05");
        assert_eq!(dec(0, 3), "0.000");
        assert_eq!(dec(42, 0), "42");
        assert_eq!(dec(-42, -2), "-4200");
        let date = |d| {
            let mut t = String::new();
            write_date(d, &mut t);
            t
        };
        assert_eq!(date(0), "1970-01-01");
        assert_eq!(date(-1), "1969-12-31");
        assert_eq!(date(10_561), "1998-12-01");
        assert_eq!(date(11_016), "2000-02-29");
    }

    #[test]
    fn dates_parse_back_only_when_real() {
        for days in [0, 10_471, -1, -719_528, 2_932_896 - 1, 59, 60] {
            let mut t = String::new();
            write_date(days, &mut t);
            assert_eq!(parse_date(&t), Some(days), "{t}");
        }
        for bad in [
            "1998-02-30",
            "1998-13-01",
            "1998-00-10",
            "98-09-02",
            "1998-9-02x",
            "1998/09/02",
        ] {
            assert_eq!(parse_date(bad), None, "{bad}");
        }
        assert_eq!(plain_date_range(), -719_528..=2_932_896);
    }

    #[test]
    fn text_numbers_follow_the_job_file_rule() {
        let col = StringArray::from(vec!["21168.23", " -0.5 ", "+7", ".25", "3."]);
        assert_eq!(
            decimal_column(&col, 6),
            Ok(vec![
                21_168_230_000,
                -500_000,
                7_000_000,
                250_000,
                3_000_000
            ])
        );
        for bad in ["", "-", ".", "1.2345678", "1e5", "abc", "1.2.3"] {
            let col = StringArray::from(vec!["1", bad]);
            assert_eq!(
                decimal_column(&col, 6),
                Err(NotANumber {
                    row: 1,
                    text: bad.to_string()
                }),
                "{bad}"
            );
        }
        let long = format!("{}1", "9".repeat(30));
        assert_eq!(parse_decimal(&long, 6), None);
        assert!(parse_decimal(&"9".repeat(30), 6).is_some());
        let col = StringArray::from(vec![None::<&str>]);
        assert_eq!(
            decimal_column(&col, 6).map_err(|e| e.text),
            Err(String::new())
        );
    }

    #[test]
    fn typed_numbers_are_exact() {
        let i = Int64Array::from(vec![3, -4]);
        assert_eq!(decimal_column(&i, 2), Ok(vec![300, -400]));
        let d = decimal_array(vec![1_234, -5], 3);
        assert_eq!(decimal_column(&d, 6), Ok(vec![1_234_000, -5_000]));
        let fine = decimal_array(vec![120_000_000, 123_456_789], 8);
        assert_eq!(
            decimal_column(&fine, 6),
            Err(NotANumber {
                row: 1,
                text: "1.23456789".into()
            })
        );
        assert_eq!(decimal_column(&fine.slice(0, 1), 6), Ok(vec![1_200_000]));
        let date = Date32Array::from(vec![10_471]);
        assert_eq!(
            decimal_column(&date, 6),
            Err(NotANumber {
                row: 0,
                text: "1998-09-02".into()
            })
        );
        assert_eq!(
            decimal_column(&Date32Array::from(Vec::<i32>::new()), 6),
            Ok(vec![])
        );
    }

    #[test]
    fn counts_come_from_integers_or_their_text() {
        let i = Int64Array::from(vec![3, 4]);
        assert_eq!(count_column(&i).expect("ints").as_ref(), [3, 4]);
        let s = StringArray::from(vec!["5", "+6"]);
        assert_eq!(count_column(&s).expect("texts").as_ref(), [5, 6]);
        let d = decimal_array(vec![7], 0);
        assert_eq!(count_column(&d).expect("scale 0").as_ref(), [7]);
        let bad = StringArray::from(vec!["1", "1.5"]);
        assert_eq!(
            count_column(&bad),
            Err(NotANumber {
                row: 1,
                text: "1.5".into()
            })
        );
        let d2 = decimal_array(vec![700], 2);
        assert_eq!(count_column(&d2).map_err(|e| e.text), Err("7.00".into()));
    }

    #[test]
    fn rounding_is_half_away_from_zero() {
        assert_eq!(div_round_signed(5, 10), 1);
        assert_eq!(div_round_signed(-5, 10), -1);
        assert_eq!(div_round_signed(4, 10), 0);
        assert_eq!(div_round_signed(-4_999, 10_000), 0);
        assert_eq!(div_round_signed(1, -2), -1);
        assert_eq!(div_round_signed(10, 3), 3);
    }
}
