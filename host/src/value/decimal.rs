//! Exact fixed-point numbers for filters and aggregates.

use std::fmt;

/// A decimal number with 6 digits after the point, stored as an integer
/// count of millionths. Sums are exact, so an aggregate does not depend on
/// the order its rows arrive in (unlike `f64`).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Default,
    serde::Serialize,
    serde::Deserialize,
)]
pub struct Decimal(i128);

/// Millionths per unit.
const SCALE: i128 = 1_000_000;
/// Digits after the point.
const SCALE_DIGITS: usize = 6;

impl Decimal {
    /// Zero.
    pub const ZERO: Decimal = Decimal(0);

    /// Parses `[-+]digits[.digits]` with at most 6 digits after the point;
    /// `None` for anything else (including an empty string).
    pub fn parse(s: &str) -> Option<Self> {
        super::cells::parse_decimal(s, SCALE_DIGITS as u32).map(Decimal)
    }

    /// The count of millionths.
    pub fn millionths(self) -> i128 {
        self.0
    }

    /// From an integer.
    pub fn from_int(i: i64) -> Self {
        Decimal(i128::from(i) * SCALE)
    }

    /// This value divided by `n`, rounded half away from zero to millionths.
    ///
    /// # Panics
    ///
    /// If `n` is 0.
    pub fn div_int(self, n: i64) -> Self {
        let n = i128::from(n);
        assert!(n != 0, "division by zero");
        let q = self.0 / n;
        let r = self.0 % n;
        let adj = if 2 * r.abs() >= n.abs() {
            self.0.signum() * n.signum()
        } else {
            0
        };
        Decimal(q + adj)
    }

    /// Formats `self / n` with exactly `decimals` digits after the point,
    /// rounding the exact quotient once, half away from zero (an average).
    ///
    /// # Panics
    ///
    /// If `n` is 0.
    pub fn format_div(self, n: i64, decimals: u32) -> String {
        let d = decimals.min(SCALE_DIGITS as u32);
        assert!(n != 0, "division by zero");
        let num = self.0 * 10i128.pow(d);
        let den = i128::from(n) * SCALE;
        let (q, r) = (num / den, num % den);
        let q = if 2 * r.abs() >= den.abs() {
            q + num.signum() * den.signum()
        } else {
            q
        };
        Decimal(q * 10i128.pow(SCALE_DIGITS as u32 - d)).format(d)
    }

    /// Formats with exactly `decimals` digits after the point (none for 0),
    /// rounding half away from zero.
    pub fn format(self, decimals: u32) -> String {
        let d = decimals.min(SCALE_DIGITS as u32);
        let unit = 10i128.pow(SCALE_DIGITS as u32 - d);
        let abs = self.0.abs();
        let mut q = abs / unit;
        if (abs % unit) * 2 >= unit {
            q += 1;
        }
        let sign = if self.0 < 0 && q != 0 { "-" } else { "" };
        if d == 0 {
            return format!("{sign}{q}");
        }
        let p = 10i128.pow(d);
        format!("{sign}{}.{:0width$}", q / p, q % p, width = d as usize)
    }
}

impl std::ops::Add for Decimal {
    type Output = Decimal;

    /// Exact sum.
    fn add(self, other: Self) -> Self {
        Decimal(self.0 + other.0)
    }
}

impl fmt::Display for Decimal {
    /// Full precision: 6 digits after the point (the partial-aggregate state form).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.format(SCALE_DIGITS as u32))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_formats_exactly() {
        let d = |s| Decimal::parse(s).expect("number");
        assert_eq!(d("21168.23").format(2), "21168.23");
        assert_eq!(d("-0.005").format(2), "-0.01");
        assert_eq!(d("0.004").format(2), "0.00");
        assert_eq!(d("17").format(0), "17");
        assert_eq!(d("1.5").to_string(), "1.500000");
        assert_eq!(d("1") + d("2.25"), d("3.25"));
        assert_eq!(d("10").div_int(3).format(6), "3.333333");
        assert_eq!(d("-2").div_int(3).format(6), "-0.666667");
        assert_eq!(d("0.004999").format(2), "0.00");
        assert_eq!(d("1").format_div(8, 2), "0.13");
        assert_eq!(d("0.009999").format_div(2, 2), "0.00");
        for bad in ["", "-", ".", "1.2345678", "1e5", "abc", "1.2.3"] {
            assert_eq!(Decimal::parse(bad), None, "{bad}");
        }
    }
}
