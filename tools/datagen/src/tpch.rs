//! The eight TPC-H tables as CSV and as typed Parquet, made by the `tpchgen`
//! library (TPC-H's own `dbgen` rules: scale factor 0.1 gives 600 572
//! `lineitem` rows) and, for Parquet, its `tpchgen-arrow` companion.
//!
//! A table is written as part files `<table>-<part>.csv` or
//! `<table>-<part>.parquet`, part from 1: the big tables ([`Table::is_big`]:
//! `part`, `partsupp`, `customer`, `orders`, `lineitem`) in as many parts as
//! asked, the small ones (`region`, `nation`, `supplier`) always in one.
//! The parts of a table together hold exactly the rows of the whole table,
//! in `dbgen`'s order; the CSV and Parquet part files of one table and part
//! hold the same rows in the same order.
//!
//! [`write_tpch`] lays out a whole data set: `<out>/<table>/<table>-N.<ext>`
//! for every table asked, and, for `lineitem`, the same files a second time
//! as hard links at `<out>/lineitem-N.<ext>` (where the hand-written Q1
//! examples and tests have always read them).
//!
//! CSV: a header line with the column names, comma-separated, text that can
//! hold a comma (addresses and comments) in double quotes, money with two
//! decimals, dates `YYYY-MM-DD` (`tpchgen`'s formatting).
//!
//! Parquet: snappy, row groups of a chosen number of rows (the last of a
//! file fewer), the types of [`Table::schema`]: every integer `Int64`, money
//! and quantities `Decimal128(15, 2)`, dates `Date32`, text `Utf8`, no column
//! nullable. Integers are `Int64` throughout (also `l_linenumber`, `p_size`,
//! `ps_availqty`, `o_shippriority`), which is what a CSV reader infers, so the
//! two formats of a table have one schema apart from money and dates.

use std::fmt::Display;
use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::{ArrowError, DataType, Field, Schema, SchemaRef};
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;
use tpchgen::csv::{
    CustomerCsv, LineItemCsv, NationCsv, OrderCsv, PartCsv, PartSuppCsv, RegionCsv, SupplierCsv,
};
use tpchgen::generators::{
    CustomerGenerator, LineItemGenerator, NationGenerator, OrderGenerator, PartGenerator,
    PartSuppGenerator, RegionGenerator, SupplierGenerator,
};
use tpchgen_arrow::{
    CustomerArrow, LineItemArrow, NationArrow, OrderArrow, PartArrow, PartSuppArrow, RegionArrow,
    SupplierArrow,
};

/// Rows per Parquet row group unless told otherwise: 131 072 (128 Ki rows,
/// about 5 MB of `lineitem` with snappy).
pub const DEFAULT_ROW_GROUP_ROWS: usize = 128 * 1024;

/// Rows per record batch handed to the Parquet writer.
const WRITE_BATCH_ROWS: usize = 8192;

/// One of the eight TPC-H tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Table {
    /// `region`: 5 rows at every scale.
    Region,
    /// `nation`: 25 rows at every scale.
    Nation,
    /// `supplier`: 10 000 × scale rows.
    Supplier,
    /// `customer`: 150 000 × scale rows.
    Customer,
    /// `part`: 200 000 × scale rows.
    Part,
    /// `partsupp`: 800 000 × scale rows.
    PartSupp,
    /// `orders`: 1 500 000 × scale rows.
    Orders,
    /// `lineitem`: about 6 000 000 × scale rows.
    LineItem,
}

impl Table {
    /// All eight, smallest first.
    pub const ALL: [Table; 8] = [
        Table::Region,
        Table::Nation,
        Table::Supplier,
        Table::Customer,
        Table::Part,
        Table::PartSupp,
        Table::Orders,
        Table::LineItem,
    ];

    /// The table's name in TPC-H's SQL (lower case), also its folder and
    /// file-name stem: `region`, `nation`, `supplier`, `customer`, `part`,
    /// `partsupp`, `orders`, `lineitem`.
    pub fn name(self) -> &'static str {
        match self {
            Table::Region => "region",
            Table::Nation => "nation",
            Table::Supplier => "supplier",
            Table::Customer => "customer",
            Table::Part => "part",
            Table::PartSupp => "partsupp",
            Table::Orders => "orders",
            Table::LineItem => "lineitem",
        }
    }

    /// The table named `name` (as [`Table::name`] spells it), if any.
    pub fn from_name(name: &str) -> Option<Table> {
        Table::ALL.into_iter().find(|t| t.name() == name)
    }

    /// Whether the table is written in several part files (`part`,
    /// `partsupp`, `customer`, `orders`, `lineitem`); the others are small
    /// and always one file.
    pub fn is_big(self) -> bool {
        !matches!(self, Table::Region | Table::Nation | Table::Supplier)
    }

    /// The number of files the table is written in when `parts` are asked
    /// for: `parts` (at least 1) for a big table, 1 for a small one.
    pub fn files(self, parts: u32) -> u32 {
        if self.is_big() { parts.max(1) } else { 1 }
    }

    /// The Arrow schema of the table's Parquet files: TPC-H's columns in
    /// order, named as in the CSV header, none nullable; `Int64` integers,
    /// `Decimal128(15, 2)` money and quantities, `Date32` dates, `Utf8` text.
    pub fn schema(self) -> SchemaRef {
        use DataType::{Date32, Int64, Utf8};
        let money = DataType::Decimal128(15, 2);
        let columns: &[(&str, &DataType)] = match self {
            Table::Region => &[
                ("r_regionkey", &Int64),
                ("r_name", &Utf8),
                ("r_comment", &Utf8),
            ],
            Table::Nation => &[
                ("n_nationkey", &Int64),
                ("n_name", &Utf8),
                ("n_regionkey", &Int64),
                ("n_comment", &Utf8),
            ],
            Table::Supplier => &[
                ("s_suppkey", &Int64),
                ("s_name", &Utf8),
                ("s_address", &Utf8),
                ("s_nationkey", &Int64),
                ("s_phone", &Utf8),
                ("s_acctbal", &money),
                ("s_comment", &Utf8),
            ],
            Table::Customer => &[
                ("c_custkey", &Int64),
                ("c_name", &Utf8),
                ("c_address", &Utf8),
                ("c_nationkey", &Int64),
                ("c_phone", &Utf8),
                ("c_acctbal", &money),
                ("c_mktsegment", &Utf8),
                ("c_comment", &Utf8),
            ],
            Table::Part => &[
                ("p_partkey", &Int64),
                ("p_name", &Utf8),
                ("p_mfgr", &Utf8),
                ("p_brand", &Utf8),
                ("p_type", &Utf8),
                ("p_size", &Int64),
                ("p_container", &Utf8),
                ("p_retailprice", &money),
                ("p_comment", &Utf8),
            ],
            Table::PartSupp => &[
                ("ps_partkey", &Int64),
                ("ps_suppkey", &Int64),
                ("ps_availqty", &Int64),
                ("ps_supplycost", &money),
                ("ps_comment", &Utf8),
            ],
            Table::Orders => &[
                ("o_orderkey", &Int64),
                ("o_custkey", &Int64),
                ("o_orderstatus", &Utf8),
                ("o_totalprice", &money),
                ("o_orderdate", &Date32),
                ("o_orderpriority", &Utf8),
                ("o_clerk", &Utf8),
                ("o_shippriority", &Int64),
                ("o_comment", &Utf8),
            ],
            Table::LineItem => &[
                ("l_orderkey", &Int64),
                ("l_partkey", &Int64),
                ("l_suppkey", &Int64),
                ("l_linenumber", &Int64),
                ("l_quantity", &money),
                ("l_extendedprice", &money),
                ("l_discount", &money),
                ("l_tax", &money),
                ("l_returnflag", &Utf8),
                ("l_linestatus", &Utf8),
                ("l_shipdate", &Date32),
                ("l_commitdate", &Date32),
                ("l_receiptdate", &Date32),
                ("l_shipinstruct", &Utf8),
                ("l_shipmode", &Utf8),
                ("l_comment", &Utf8),
            ],
        };
        Arc::new(Schema::new(
            columns
                .iter()
                .map(|(name, t)| Field::new(*name, (*t).clone(), false))
                .collect::<Vec<_>>(),
        ))
    }

    /// The CSV header line (without the line end): the column names of
    /// [`Table::schema`], comma-separated.
    pub fn csv_header(self) -> &'static str {
        match self {
            Table::Region => RegionCsv::header(),
            Table::Nation => NationCsv::header(),
            Table::Supplier => SupplierCsv::header(),
            Table::Customer => CustomerCsv::header(),
            Table::Part => PartCsv::header(),
            Table::PartSupp => PartSuppCsv::header(),
            Table::Orders => OrderCsv::header(),
            Table::LineItem => LineItemCsv::header(),
        }
    }
}

/// File format of a written table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// CSV with a header line.
    Csv,
    /// Parquet, snappy, typed by [`Table::schema`].
    Parquet,
}

impl Format {
    /// The file-name extension without the dot: `csv` or `parquet`.
    pub fn extension(self) -> &'static str {
        match self {
            Format::Csv => "csv",
            Format::Parquet => "parquet",
        }
    }
}

/// What one table came to: its files in part order and its row count.
#[derive(Clone, Debug)]
pub struct Written {
    /// The table.
    pub table: Table,
    /// The part files, `<table>-1.<ext>` first.
    pub files: Vec<PathBuf>,
    /// Rows over all its files.
    pub rows: u64,
}

/// Writes `table` for scale factor `scale` into `dir` (created if missing)
/// as `<table>-<part>.<ext>`, in [`Table::files`]`(parts)` files; Parquet
/// in row groups of `row_group_rows` rows. Each file is written under a
/// dot-name and renamed when complete, so a reader never sees half a file.
///
/// # Errors
///
/// The I/O error of creating the folder or writing a file (a Parquet or
/// Arrow error comes as [`io::ErrorKind::Other`]).
pub fn write_table(
    table: Table,
    format: Format,
    dir: &Path,
    scale: f64,
    parts: u32,
    row_group_rows: usize,
) -> io::Result<Written> {
    fs::create_dir_all(dir)?;
    let files = table.files(parts);
    let mut written = Written {
        table,
        files: Vec::new(),
        rows: 0,
    };
    for part in 1..=files {
        let name = format!("{}-{part}.{}", table.name(), format.extension());
        let path = dir.join(&name);
        let tmp = dir.join(format!(".{name}.tmp"));
        let file = File::create(&tmp)?;
        let (file, rows) = match format {
            Format::Csv => write_csv_part(table, file, scale, part, files)?,
            Format::Parquet => write_parquet_part(table, file, scale, part, files, row_group_rows)?,
        };
        file.sync_all()?;
        fs::rename(&tmp, &path)?;
        written.files.push(path);
        written.rows += rows;
    }
    Ok(written)
}

/// Writes the tables `tables` of scale factor `scale` under `out` as
/// `<out>/<table>/<table>-N.<ext>` ([`write_table`]), then links
/// `lineitem`'s files (if asked for) also as `<out>/lineitem-N.<ext>`:
/// hard links, or copies where the file system has none. Returns what each
/// table came to, in the order asked.
///
/// # Errors
///
/// As [`write_table`]; and the I/O error of linking or copying.
pub fn write_tpch(
    out: &Path,
    tables: &[Table],
    format: Format,
    scale: f64,
    parts: u32,
    row_group_rows: usize,
) -> io::Result<Vec<Written>> {
    let mut all = Vec::new();
    for &table in tables {
        let written = write_table(
            table,
            format,
            &out.join(table.name()),
            scale,
            parts,
            row_group_rows,
        )?;
        if table == Table::LineItem {
            for file in &written.files {
                let name = file.file_name().expect("a part file has a name");
                link_or_copy(file, &out.join(name))?;
            }
        }
        all.push(written);
    }
    Ok(all)
}

/// Makes `to` name the file `from`: a hard link, else a copy (written
/// under a dot-name and renamed), replacing what `to` was.
fn link_or_copy(from: &Path, to: &Path) -> io::Result<()> {
    let name = to.file_name().expect("a link has a name").to_string_lossy();
    let tmp = to.with_file_name(format!(".{name}.tmp"));
    let _ = fs::remove_file(&tmp);
    if fs::hard_link(from, &tmp).is_err() {
        fs::copy(from, &tmp)?;
    }
    fs::rename(&tmp, to)
}

/// Writes the CSV of part `part` of `parts` of `table` into `file`; returns
/// the file and the number of rows.
fn write_csv_part(
    table: Table,
    file: File,
    scale: f64,
    part: u32,
    parts: u32,
) -> io::Result<(File, u64)> {
    let mut out = BufWriter::with_capacity(1 << 20, file);
    writeln!(out, "{}", table.csv_header())?;
    let (p, n) = (part as i32, parts as i32);
    let rows = match table {
        Table::Region => csv_rows(
            &mut out,
            RegionGenerator::new(scale, p, n).iter().map(RegionCsv::new),
        ),
        Table::Nation => csv_rows(
            &mut out,
            NationGenerator::new(scale, p, n).iter().map(NationCsv::new),
        ),
        Table::Supplier => csv_rows(
            &mut out,
            SupplierGenerator::new(scale, p, n)
                .iter()
                .map(SupplierCsv::new),
        ),
        Table::Customer => csv_rows(
            &mut out,
            CustomerGenerator::new(scale, p, n)
                .iter()
                .map(CustomerCsv::new),
        ),
        Table::Part => csv_rows(
            &mut out,
            PartGenerator::new(scale, p, n).iter().map(PartCsv::new),
        ),
        Table::PartSupp => csv_rows(
            &mut out,
            PartSuppGenerator::new(scale, p, n)
                .iter()
                .map(PartSuppCsv::new),
        ),
        Table::Orders => csv_rows(
            &mut out,
            OrderGenerator::new(scale, p, n).iter().map(OrderCsv::new),
        ),
        Table::LineItem => csv_rows(
            &mut out,
            LineItemGenerator::new(scale, p, n)
                .iter()
                .map(LineItemCsv::new),
        ),
    }?;
    let file = out.into_inner().map_err(io::IntoInnerError::into_error)?;
    Ok((file, rows))
}

/// Writes each row of `rows` as a line; returns how many.
fn csv_rows<D: Display>(out: &mut impl Write, rows: impl Iterator<Item = D>) -> io::Result<u64> {
    let mut n = 0;
    for row in rows {
        writeln!(out, "{row}")?;
        n += 1;
    }
    Ok(n)
}

/// The record batches of part `part` of `parts` of `table`, as
/// `tpchgen-arrow` makes them (its own column types).
fn arrow_batches(
    table: Table,
    scale: f64,
    part: u32,
    parts: u32,
) -> Box<dyn Iterator<Item = Result<RecordBatch, ArrowError>>> {
    let (p, n) = (part as i32, parts as i32);
    let b = WRITE_BATCH_ROWS;
    match table {
        Table::Region => {
            Box::new(RegionArrow::new(RegionGenerator::new(scale, p, n)).with_batch_size(b))
        }
        Table::Nation => {
            Box::new(NationArrow::new(NationGenerator::new(scale, p, n)).with_batch_size(b))
        }
        Table::Supplier => {
            Box::new(SupplierArrow::new(SupplierGenerator::new(scale, p, n)).with_batch_size(b))
        }
        Table::Customer => {
            Box::new(CustomerArrow::new(CustomerGenerator::new(scale, p, n)).with_batch_size(b))
        }
        Table::Part => Box::new(PartArrow::new(PartGenerator::new(scale, p, n)).with_batch_size(b)),
        Table::PartSupp => {
            Box::new(PartSuppArrow::new(PartSuppGenerator::new(scale, p, n)).with_batch_size(b))
        }
        Table::Orders => {
            Box::new(OrderArrow::new(OrderGenerator::new(scale, p, n)).with_batch_size(b))
        }
        Table::LineItem => {
            Box::new(LineItemArrow::new(LineItemGenerator::new(scale, p, n)).with_batch_size(b))
        }
    }
}

/// `batch` with every column cast to the type `schema` gives it (string
/// views to `Utf8`, 32-bit to 64-bit integers); the column names must be
/// the schema's, in order.
fn conform(batch: &RecordBatch, schema: &SchemaRef) -> Result<RecordBatch, ArrowError> {
    let theirs = batch.schema();
    if theirs.fields().len() != schema.fields().len() {
        return Err(ArrowError::SchemaError(format!(
            "tpchgen-arrow gave {} columns, {} expected",
            theirs.fields().len(),
            schema.fields().len()
        )));
    }
    let mut columns = Vec::with_capacity(schema.fields().len());
    for ((field, ours), column) in theirs
        .fields()
        .iter()
        .zip(schema.fields())
        .zip(batch.columns())
    {
        if field.name() != ours.name() {
            return Err(ArrowError::SchemaError(format!(
                "tpchgen-arrow gave column `{}` where `{}` was expected",
                field.name(),
                ours.name()
            )));
        }
        columns.push(arrow_cast::cast(column, ours.data_type())?);
    }
    RecordBatch::try_new(schema.clone(), columns)
}

/// Writes the Parquet of part `part` of `parts` of `table` into `file`;
/// returns the file and the number of rows.
fn write_parquet_part(
    table: Table,
    file: File,
    scale: f64,
    part: u32,
    parts: u32,
    row_group_rows: usize,
) -> io::Result<(File, u64)> {
    let schema = table.schema();
    let props = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .set_max_row_group_row_count(Some(row_group_rows.max(1)))
        .build();
    let mut writer =
        ArrowWriter::try_new(file, schema.clone(), Some(props)).map_err(io::Error::other)?;
    let mut rows = 0u64;
    for batch in arrow_batches(table, scale, part, parts) {
        let batch =
            conform(&batch.map_err(io::Error::other)?, &schema).map_err(io::Error::other)?;
        rows += batch.num_rows() as u64;
        writer.write(&batch).map_err(io::Error::other)?;
    }
    let file = writer.into_inner().map_err(io::Error::other)?;
    Ok((file, rows))
}

/// Writes `lineitem-<part>.csv` (part from 1 to `parts`) into `dir` for
/// scale factor `scale`; returns the files and the number of rows.
///
/// # Errors
///
/// The I/O error of creating the folder or writing a file.
pub fn write_lineitem(dir: &Path, scale: f64, parts: u32) -> io::Result<(Vec<PathBuf>, u64)> {
    let w = write_table(
        Table::LineItem,
        Format::Csv,
        dir,
        scale,
        parts,
        DEFAULT_ROW_GROUP_ROWS,
    )?;
    Ok((w.files, w.rows))
}

/// The Arrow schema of [`write_lineitem_parquet`]'s files:
/// [`Table::schema`] of [`Table::LineItem`].
pub fn lineitem_schema() -> SchemaRef {
    Table::LineItem.schema()
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
    let w = write_table(
        Table::LineItem,
        Format::Parquet,
        dir,
        scale,
        parts,
        row_group_rows,
    )?;
    Ok((w.files, w.rows))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_cast::display::{ArrayFormatter, FormatOptions};
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    use parquet::file::reader::{FileReader, SerializedFileReader};

    const SCALE: f64 = 0.01;

    /// The fields of one CSV line as `tpchgen` writes it: commas between
    /// fields, double quotes around a field that may hold a comma.
    fn csv_fields(line: &str) -> Vec<String> {
        let mut fields = vec![String::new()];
        let mut quoted = false;
        for c in line.chars() {
            match c {
                '"' => quoted = !quoted,
                ',' if !quoted => fields.push(String::new()),
                c => fields.last_mut().expect("one field").push(c),
            }
        }
        assert!(!quoted, "unbalanced quotes in {line:?}");
        fields
    }

    /// The data lines of the CSV files, header checked and dropped.
    fn csv_rows(table: Table, files: &[PathBuf]) -> Vec<Vec<String>> {
        let mut rows = Vec::new();
        for file in files {
            let text = fs::read_to_string(file).expect("read csv");
            let mut lines = text.lines();
            assert_eq!(lines.next(), Some(table.csv_header()), "{}", file.display());
            rows.extend(lines.map(csv_fields));
        }
        rows
    }

    /// The rows of the Parquet files, every value as Arrow displays it;
    /// checks each file's schema and row-group sizes on the way.
    fn parquet_rows(table: Table, files: &[PathBuf], row_group_rows: usize) -> Vec<Vec<String>> {
        let mut rows = Vec::new();
        for file in files {
            let meta = SerializedFileReader::new(File::open(file).expect("open"))
                .expect("parquet footer")
                .metadata()
                .clone();
            for rg in meta.row_groups() {
                assert!(
                    rg.num_rows() as usize <= row_group_rows,
                    "{}",
                    file.display()
                );
            }
            let reader = ParquetRecordBatchReaderBuilder::try_new(File::open(file).expect("open"))
                .expect("parquet")
                .build()
                .expect("reader");
            for batch in reader {
                let batch = batch.expect("batch");
                assert_eq!(batch.schema(), table.schema(), "{}", file.display());
                let options = FormatOptions::default();
                let formatters: Vec<_> = batch
                    .columns()
                    .iter()
                    .map(|c| ArrayFormatter::try_new(c.as_ref(), &options).expect("formatter"))
                    .collect();
                for i in 0..batch.num_rows() {
                    rows.push(formatters.iter().map(|f| f.value(i).to_string()).collect());
                }
            }
        }
        rows
    }

    #[test]
    fn every_table_has_the_same_rows_in_csv_and_parquet() {
        let tmp = tempfile::tempdir().expect("tempdir");
        for table in Table::ALL {
            let csv = write_table(table, Format::Csv, &tmp.path().join("csv"), SCALE, 3, 1000)
                .expect("csv");
            let pq = write_table(
                table,
                Format::Parquet,
                &tmp.path().join("pq"),
                SCALE,
                3,
                1000,
            )
            .expect("parquet");
            let files = if table.is_big() { 3 } else { 1 };
            assert_eq!(csv.files.len(), files, "{table:?}");
            assert_eq!(pq.files.len(), files, "{table:?}");
            assert_eq!(csv.rows, pq.rows, "{table:?}");
            let mut a = csv_rows(table, &csv.files);
            // The CSV prints a whole quantity without decimals (`l_quantity` 17),
            // the Parquet decimal with its scale (17.00).
            let schema = table.schema();
            for row in &mut a {
                for (field, value) in schema.fields().iter().zip(row.iter_mut()) {
                    if matches!(field.data_type(), DataType::Decimal128(..)) && !value.contains('.')
                    {
                        value.push_str(".00");
                    }
                }
            }
            let b = parquet_rows(table, &pq.files, 1000);
            assert_eq!(a.len() as u64, csv.rows, "{table:?}");
            assert_eq!(a, b, "{table:?}: CSV and Parquet differ");
        }
    }

    #[test]
    fn parts_together_are_the_whole_table_with_dbgen_row_counts() {
        let tmp = tempfile::tempdir().expect("tempdir");
        // Row counts of dbgen at scale factor 0.01.
        let expected = [
            (Table::Region, 5),
            (Table::Nation, 25),
            (Table::Supplier, 100),
            (Table::Customer, 1500),
            (Table::Part, 2000),
            (Table::PartSupp, 8000),
            (Table::Orders, 15000),
            (Table::LineItem, 60175),
        ];
        for (table, rows) in expected {
            let one = write_table(table, Format::Csv, &tmp.path().join("one"), SCALE, 1, 1000)
                .expect("one part");
            let four = write_table(table, Format::Csv, &tmp.path().join("four"), SCALE, 4, 1000)
                .expect("four parts");
            assert_eq!(one.rows, rows, "{table:?}");
            assert_eq!(
                csv_rows(table, &one.files),
                csv_rows(table, &four.files),
                "{table:?}"
            );
        }
    }

    #[test]
    fn write_tpch_lays_out_table_folders_and_links_lineitem_beside_them() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let out = tmp.path().join("tpch");
        let written = write_tpch(&out, &Table::ALL, Format::Parquet, SCALE, 2, 4096).expect("tpch");
        assert_eq!(written.len(), 8);
        for w in &written {
            let name = w.table.name();
            let expected: Vec<PathBuf> = (1..=w.table.files(2))
                .map(|i| out.join(name).join(format!("{name}-{i}.parquet")))
                .collect();
            assert_eq!(w.files, expected);
        }
        let mut top: Vec<String> = fs::read_dir(&out)
            .expect("list")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".parquet"))
            .collect();
        top.sort();
        assert_eq!(top, ["lineitem-1.parquet", "lineitem-2.parquet"]);
        for i in 1..=2 {
            let a = fs::read(out.join(format!("lineitem-{i}.parquet"))).expect("top");
            let b = fs::read(out.join(format!("lineitem/lineitem-{i}.parquet"))).expect("folder");
            assert_eq!(a, b);
        }
        assert!(
            fs::read_dir(out.join("lineitem")).expect("list").all(|e| !e
                .expect("entry")
                .file_name()
                .to_string_lossy()
                .starts_with('.')),
            "no temporary file is left"
        );
    }

    #[test]
    fn table_names_round_trip() {
        for t in Table::ALL {
            assert_eq!(Table::from_name(t.name()), Some(t));
        }
        assert_eq!(Table::from_name("order"), None);
    }
}
