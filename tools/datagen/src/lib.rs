//! Data for coordhost's examples, tests and benchmarks.
//!
//! - [`write_lineitem`]: the TPC-H `lineitem` table as CSV files, made by the
//!   `tpchgen` library (TPC-H's own `dbgen` rules, so scale factor 0.1 gives
//!   600 572 rows), cut into `parts` files with a header line each.
//! - [`write_lineitem_parquet`]: the same rows as Parquet files (snappy,
//!   row groups of a chosen number of rows), typed: `Int64` keys and line
//!   numbers, `Decimal128(15, 2)` quantity, price, discount and tax, `Utf8`
//!   flags, modes and comments, `Date32` dates.
//! - [`write_words`]: a folder of text files of pseudo-random words from a
//!   fixed vocabulary with a skewed (Zipf-like) frequency, deterministic in
//!   the seed, for the word-count example.

use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use std::sync::Arc;

use arrow_array::builder::{Date32Builder, Decimal128Builder, Int64Builder, StringBuilder};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;
use tpchgen::csv::LineItemCsv;
use tpchgen::generators::{LineItem, LineItemGenerator};

/// Rows per row group of [`write_lineitem_parquet`] unless told otherwise:
/// 131 072 (128 Ki rows, about 5 MB of lineitem with snappy).
pub const DEFAULT_ROW_GROUP_ROWS: usize = 128 * 1024;

/// Rows per record batch handed to the Parquet writer.
const WRITE_BATCH_ROWS: usize = 8192;

/// Writes `lineitem-<part>.csv` (part from 1 to `parts`) into `dir` for
/// scale factor `scale`; returns the files and the number of rows.
///
/// # Errors
///
/// The I/O error of creating the folder or writing a file.
pub fn write_lineitem(dir: &Path, scale: f64, parts: u32) -> io::Result<(Vec<PathBuf>, u64)> {
    fs::create_dir_all(dir)?;
    let parts = parts.max(1);
    let mut files = Vec::new();
    let mut rows = 0u64;
    for part in 1..=parts {
        let path = dir.join(format!("lineitem-{part}.csv"));
        let tmp = dir.join(format!(".lineitem-{part}.csv.tmp"));
        let mut out = BufWriter::with_capacity(1 << 20, File::create(&tmp)?);
        writeln!(out, "{}", LineItemCsv::header())?;
        let generator = LineItemGenerator::new(scale, part as i32, parts as i32);
        for item in generator.iter() {
            writeln!(out, "{}", LineItemCsv::new(item))?;
            rows += 1;
        }
        out.into_inner()
            .map_err(io::IntoInnerError::into_error)?
            .sync_all()?;
        fs::rename(&tmp, &path)?;
        files.push(path);
    }
    Ok((files, rows))
}

/// The Arrow schema of [`write_lineitem_parquet`]'s files: the 16 columns
/// of TPC-H `lineitem`, named as in the CSV header, none nullable.
pub fn lineitem_schema() -> SchemaRef {
    let money = DataType::Decimal128(15, 2);
    let col = |name: &str, t: &DataType| Field::new(name, t.clone(), false);
    Arc::new(Schema::new(vec![
        col("l_orderkey", &DataType::Int64),
        col("l_partkey", &DataType::Int64),
        col("l_suppkey", &DataType::Int64),
        col("l_linenumber", &DataType::Int64),
        col("l_quantity", &money),
        col("l_extendedprice", &money),
        col("l_discount", &money),
        col("l_tax", &money),
        col("l_returnflag", &DataType::Utf8),
        col("l_linestatus", &DataType::Utf8),
        col("l_shipdate", &DataType::Date32),
        col("l_commitdate", &DataType::Date32),
        col("l_receiptdate", &DataType::Date32),
        col("l_shipinstruct", &DataType::Utf8),
        col("l_shipmode", &DataType::Utf8),
        col("l_comment", &DataType::Utf8),
    ]))
}

/// Writes `lineitem-<part>.parquet` (part from 1 to `parts`) into `dir` for
/// scale factor `scale`: the rows [`write_lineitem`] writes as CSV, in the
/// same order and files, typed by [`lineitem_schema`], snappy-compressed,
/// in row groups of `row_group_rows` rows (the last of a file fewer).
/// Returns the files and the number of rows.
///
/// # Errors
///
/// The I/O error of creating the folder or writing a file (a Parquet error
/// comes as [`io::ErrorKind::Other`]).
pub fn write_lineitem_parquet(
    dir: &Path,
    scale: f64,
    parts: u32,
    row_group_rows: usize,
) -> io::Result<(Vec<PathBuf>, u64)> {
    fs::create_dir_all(dir)?;
    let parts = parts.max(1);
    let schema = lineitem_schema();
    let props = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .set_max_row_group_row_count(Some(row_group_rows.max(1)))
        .build();
    let mut files = Vec::new();
    let mut rows = 0u64;
    for part in 1..=parts {
        let path = dir.join(format!("lineitem-{part}.parquet"));
        let tmp = dir.join(format!(".lineitem-{part}.parquet.tmp"));
        let mut writer =
            ArrowWriter::try_new(File::create(&tmp)?, schema.clone(), Some(props.clone()))
                .map_err(io::Error::other)?;
        let generator = LineItemGenerator::new(scale, part as i32, parts as i32);
        let mut batch = LineItemBatch::new();
        for item in generator.iter() {
            batch.push(&item);
            rows += 1;
            if batch.len == WRITE_BATCH_ROWS {
                writer
                    .write(&batch.finish(&schema)?)
                    .map_err(io::Error::other)?;
            }
        }
        if batch.len > 0 {
            writer
                .write(&batch.finish(&schema)?)
                .map_err(io::Error::other)?;
        }
        writer.into_inner().map_err(io::Error::other)?.sync_all()?;
        fs::rename(&tmp, &path)?;
        files.push(path);
    }
    Ok((files, rows))
}

/// Column builders of one record batch of `lineitem`.
struct LineItemBatch {
    ints: [Int64Builder; 4],
    money: [Decimal128Builder; 4],
    texts: [StringBuilder; 5],
    dates: [Date32Builder; 3],
    len: usize,
}

impl LineItemBatch {
    fn new() -> Self {
        Self {
            ints: std::array::from_fn(|_| Int64Builder::new()),
            money: std::array::from_fn(|_| Decimal128Builder::new()),
            texts: std::array::from_fn(|_| StringBuilder::new()),
            dates: std::array::from_fn(|_| Date32Builder::new()),
            len: 0,
        }
    }

    fn push(&mut self, item: &LineItem<'_>) {
        let [orderkey, partkey, suppkey, linenumber] = &mut self.ints;
        orderkey.append_value(item.l_orderkey);
        partkey.append_value(item.l_partkey);
        suppkey.append_value(item.l_suppkey);
        linenumber.append_value(i64::from(item.l_linenumber));
        // Quantity is a whole number; the others are hundredths already.
        let [quantity, price, discount, tax] = &mut self.money;
        quantity.append_value(i128::from(item.l_quantity) * 100);
        price.append_value(i128::from(item.l_extendedprice.into_inner()));
        discount.append_value(i128::from(item.l_discount.into_inner()));
        tax.append_value(i128::from(item.l_tax.into_inner()));
        let [returnflag, linestatus, shipinstruct, shipmode, comment] = &mut self.texts;
        returnflag.append_value(item.l_returnflag);
        linestatus.append_value(item.l_linestatus);
        shipinstruct.append_value(item.l_shipinstruct);
        shipmode.append_value(item.l_shipmode);
        comment.append_value(item.l_comment);
        let [ship, commit, receipt] = &mut self.dates;
        ship.append_value(item.l_shipdate.to_unix_epoch());
        commit.append_value(item.l_commitdate.to_unix_epoch());
        receipt.append_value(item.l_receiptdate.to_unix_epoch());
        self.len += 1;
    }

    /// The rows pushed since the last call, as a batch of `schema`.
    fn finish(&mut self, schema: &SchemaRef) -> io::Result<RecordBatch> {
        let [orderkey, partkey, suppkey, linenumber] = &mut self.ints;
        let [quantity, price, discount, tax] = &mut self.money;
        let [returnflag, linestatus, shipinstruct, shipmode, comment] = &mut self.texts;
        let [ship, commit, receipt] = &mut self.dates;
        let money = |b: &mut Decimal128Builder| -> io::Result<ArrayRef> {
            Ok(Arc::new(
                b.finish()
                    .with_precision_and_scale(15, 2)
                    .map_err(io::Error::other)?,
            ))
        };
        let columns: Vec<ArrayRef> = vec![
            Arc::new(orderkey.finish()),
            Arc::new(partkey.finish()),
            Arc::new(suppkey.finish()),
            Arc::new(linenumber.finish()),
            money(quantity)?,
            money(price)?,
            money(discount)?,
            money(tax)?,
            Arc::new(returnflag.finish()),
            Arc::new(linestatus.finish()),
            Arc::new(ship.finish()),
            Arc::new(commit.finish()),
            Arc::new(receipt.finish()),
            Arc::new(shipinstruct.finish()),
            Arc::new(shipmode.finish()),
            Arc::new(comment.finish()),
        ];
        self.len = 0;
        RecordBatch::try_new(schema.clone(), columns).map_err(io::Error::other)
    }
}

/// Writes `files` text files `text-<i>.txt` of `lines_per_file` lines each
/// into `dir`; every line has 4 to 15 words with some punctuation and
/// capitals. Returns the files and the total number of words.
///
/// # Errors
///
/// The I/O error of creating the folder or writing a file.
pub fn write_words(
    dir: &Path,
    files: u32,
    lines_per_file: u32,
    seed: u64,
) -> io::Result<(Vec<PathBuf>, u64)> {
    fs::create_dir_all(dir)?;
    let vocabulary = vocabulary(2000);
    let mut rng = XorShift(seed.max(1));
    let mut paths = Vec::new();
    let mut words = 0u64;
    for f in 0..files {
        let path = dir.join(format!("text-{f:03}.txt"));
        let mut out = BufWriter::new(File::create(&path)?);
        for _ in 0..lines_per_file {
            let n = 4 + rng.next() % 12;
            let mut line = String::new();
            for i in 0..n {
                // Skewed pick: the minimum of two uniform draws favours low ranks.
                let r = (rng.next() % vocabulary.len() as u64)
                    .min(rng.next() % vocabulary.len() as u64);
                let mut w = vocabulary[r as usize].clone();
                if rng.next().is_multiple_of(10) {
                    w[..1].make_ascii_uppercase();
                }
                if i > 0 {
                    line.push(' ');
                }
                line.push_str(&w);
                if rng.next().is_multiple_of(8) {
                    line.push_str([",", ".", ";", "!", "?"][(rng.next() % 5) as usize]);
                }
                words += 1;
            }
            writeln!(out, "{line}")?;
        }
        out.into_inner()
            .map_err(io::IntoInnerError::into_error)?
            .sync_all()?;
        paths.push(path);
    }
    Ok((paths, words))
}

/// `n` distinct lower-case words made of syllables.
fn vocabulary(n: usize) -> Vec<String> {
    const SYLLABLES: [&str; 24] = [
        "ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ze", "bra", "cle", "dri", "fo", "gu",
        "ha", "jo", "pe", "qui", "sto", "tra", "un", "wy", "xe", "yo",
    ];
    let mut out = Vec::with_capacity(n);
    let mut i = 0usize;
    while out.len() < n {
        let mut w = String::new();
        let mut k = i;
        loop {
            w.push_str(SYLLABLES[k % SYLLABLES.len()]);
            k /= SYLLABLES.len();
            if k == 0 {
                break;
            }
        }
        out.push(w);
        i += 1;
    }
    out
}

/// A small deterministic generator (Marsaglia's xorshift64).
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
}
