//! Exact fixed-point constants of the job file (a `filter`'s number).

/// A decimal number with 6 digits after the point, stored as an integer
/// count of millionths: a `filter`'s `type = "number"` constant, compared
/// exactly with a column's values (`crate::sql::chain`). Its `Debug` text is
/// part of a job's fingerprint (`Decimal(1500000)` for 1.5).
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

/// Digits after the point.
const SCALE_DIGITS: u32 = 6;

impl Decimal {
    /// Parses `[-+]digits[.digits]` (surrounding whitespace ignored) with
    /// at most 6 digits after the point and 30 before it; `None` for
    /// anything else (including an empty string, a lone sign or point, an
    /// exponent).
    pub fn parse(s: &str) -> Option<Self> {
        super::cells::parse_decimal(s, SCALE_DIGITS).map(Decimal)
    }

    /// The count of millionths.
    pub fn millionths(self) -> i128 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_exactly() {
        let d = |s| Decimal::parse(s).expect("number").millionths();
        assert_eq!(d("21168.23"), 21_168_230_000);
        assert_eq!(d("-0.005"), -5_000);
        assert_eq!(d(" +17 "), 17_000_000);
        assert_eq!(d(".25"), 250_000);
        assert_eq!(
            format!("{:?}", Decimal::parse("1.5")),
            "Some(Decimal(1500000))"
        );
        for bad in ["", "-", ".", "1.2345678", "1e5", "abc", "1.2.3"] {
            assert_eq!(Decimal::parse(bad), None, "{bad}");
        }
    }
}
