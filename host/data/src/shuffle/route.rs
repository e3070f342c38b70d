//! Routing on `hash` edges: the stable key hash and [`route_batch`], which
//! splits a batch into one batch per subpartition.

use arrow_array::cast::AsArray;
use arrow_array::types::{Date32Type, Decimal128Type, Int32Type, Int64Type};
use arrow_array::{Array, RecordBatch, UInt32Array};
use arrow_schema::DataType;
use arrow_select::take::take_record_batch;

use coordhost_model::value::cells::{write_date, write_decimal};

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;
/// Byte mixed in between two key fields.
const FIELD_SEPARATOR: u8 = 0x1f;

/// FNV-1a, 64 bit, fed field by field.
struct Fnv(u64);

impl Fnv {
    fn new() -> Self {
        Self(FNV_OFFSET)
    }
    fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(FNV_PRIME);
        }
    }
    fn separate(&mut self) {
        self.feed(&[FIELD_SEPARATOR]);
    }
}

/// FNV-1a, 64 bit, over the key fields separated by `0x1f`: stable across
/// processes and runs (unlike `RandomState`), so a re-run routes every
/// record to the same subpartition.
pub fn key_hash<S: AsRef<str>>(row: &[S], key: &[usize]) -> u64 {
    let mut h = Fnv::new();
    for (n, &k) in key.iter().enumerate() {
        if n > 0 {
            h.separate();
        }
        h.feed(row[k].as_ref().as_bytes());
    }
    h.0
}

/// Splits `batch` by the hash of its key columns: row `r` goes to
/// subpartition `key_hash(texts of r's key cells) % n`, the texts being
/// those sinks write (Utf8 as is, integers in decimal, Decimal128 with
/// exactly `scale` digits after the point, Date32 as `YYYY-MM-DD`; a null
/// is the empty text). Returns, for every subpartition that gets rows in
/// ascending order, its rows in their order in `batch`: the rows are
/// ordered by subpartition with a counting sort and gathered with one
/// `take`; the batches returned are zero-copy slices of that.
///
/// # Panics
///
/// If `n` is 0, a key index is not a column of `batch`, or a key column
/// has a type other than Utf8, LargeUtf8, Int32, Int64, Decimal128, Date32.
pub fn route_batch(batch: &RecordBatch, key: &[usize], n: u32) -> Vec<(u32, RecordBatch)> {
    assert!(n > 0, "routing into 0 subpartitions");
    let rows = batch.num_rows();
    if rows == 0 {
        return Vec::new();
    }
    let cols: Vec<KeyColumn<'_>> = key
        .iter()
        .map(|&k| KeyColumn::new(batch.column(k).as_ref()))
        .collect();
    let mut text = String::new();
    let subs: Vec<u32> = (0..rows)
        .map(|r| {
            let mut h = Fnv::new();
            for (i, c) in cols.iter().enumerate() {
                if i > 0 {
                    h.separate();
                }
                c.feed(r, &mut h, &mut text);
            }
            (h.0 % u64::from(n)) as u32
        })
        .collect();
    let mut counts = vec![0u32; n as usize];
    for &s in &subs {
        counts[s as usize] += 1;
    }
    if let Some(only) = counts.iter().position(|&c| c as usize == rows) {
        return vec![(only as u32, batch.clone())];
    }
    let mut next = Vec::with_capacity(n as usize);
    let mut sum = 0u32;
    for &c in &counts {
        next.push(sum);
        sum += c;
    }
    let mut order = vec![0u32; rows];
    for (r, &s) in subs.iter().enumerate() {
        order[next[s as usize] as usize] = r as u32;
        next[s as usize] += 1;
    }
    let taken =
        take_record_batch(batch, &UInt32Array::from(order)).expect("indices below the row count");
    let mut out = Vec::new();
    let mut start = 0usize;
    for (s, &c) in counts.iter().enumerate() {
        if c > 0 {
            out.push((s as u32, taken.slice(start, c as usize)));
            start += c as usize;
        }
    }
    out
}

/// A key column, its type resolved once per batch.
enum KeyColumn<'a> {
    Utf8(&'a arrow_array::StringArray),
    LargeUtf8(&'a arrow_array::LargeStringArray),
    Int32(&'a arrow_array::PrimitiveArray<Int32Type>),
    Int64(&'a arrow_array::PrimitiveArray<Int64Type>),
    Decimal(&'a arrow_array::PrimitiveArray<Decimal128Type>, i8),
    Date(&'a arrow_array::PrimitiveArray<Date32Type>),
}

impl<'a> KeyColumn<'a> {
    fn new(a: &'a dyn Array) -> Self {
        match a.data_type() {
            DataType::Utf8 => Self::Utf8(a.as_string()),
            DataType::LargeUtf8 => Self::LargeUtf8(a.as_string()),
            DataType::Int32 => Self::Int32(a.as_primitive()),
            DataType::Int64 => Self::Int64(a.as_primitive()),
            DataType::Decimal128(_, scale) => Self::Decimal(a.as_primitive(), *scale),
            DataType::Date32 => Self::Date(a.as_primitive()),
            other => panic!(
                "a hash key column of type {other} (routing takes Utf8, Int32, Int64, Decimal128, Date32)"
            ),
        }
    }

    /// Feeds the text of row `r` to `h` (`text` is scratch space).
    fn feed(&self, r: usize, h: &mut Fnv, text: &mut String) {
        use std::fmt::Write;
        let null = match self {
            Self::Utf8(a) => a.is_null(r),
            Self::LargeUtf8(a) => a.is_null(r),
            Self::Int32(a) => a.is_null(r),
            Self::Int64(a) => a.is_null(r),
            Self::Decimal(a, _) => a.is_null(r),
            Self::Date(a) => a.is_null(r),
        };
        if null {
            return;
        }
        text.clear();
        match self {
            Self::Utf8(a) => return h.feed(a.value(r).as_bytes()),
            Self::LargeUtf8(a) => return h.feed(a.value(r).as_bytes()),
            Self::Int32(a) => write!(text, "{}", a.value(r)),
            Self::Int64(a) => write!(text, "{}", a.value(r)),
            Self::Decimal(a, scale) => {
                write_decimal(a.value(r), *scale, text);
                Ok(())
            }
            Self::Date(a) => {
                write_date(a.value(r), text);
                Ok(())
            }
        }
        .expect("writing to a String");
        h.feed(text.as_bytes());
    }
}
