//! The `read-parquet` source reader: the row groups of a Parquet file that a
//! `file-range` split owns, as Arrow record batches of the listed columns.
//!
//! A split is an ordinary byte range of a `.parquet` file. It owns the row
//! groups whose *starting offset* lies in `[start, start + length)` — the
//! rule of Hadoop's and Spark's Parquet input formats (parquet-mr
//! `ParquetMetadataConverter.filterFileMetaDataByStart`) — so any cutting of
//! a file into byte ranges reads each row group exactly once, and the sample
//! `file-enumerator` can cut at row-group boundaries (`row-groups-per-split`)
//! or by bytes alike. A row group starts where its first column chunk
//! starts: at its dictionary page when that comes before its first data
//! page, else at its first data page (parquet-mr
//! `BlockMetaData.getStartingPos`).
//!
//! The file is opened through the split enumerator's grants
//! ([`Grants::open_readable_file`]), or for an `s3://` split as an object
//! inside its store grants; only the footer and the selected columns of the
//! owned row groups are read, with the `parquet` crate's Arrow reader, in
//! batches of at most [`BATCH_ROWS`] rows. From an object, the selected
//! column chunks are fetched together before decoding ([`prefetch`]).
//!
//! Columns are read as `Utf8`, `Int64`, `Decimal128(p, s)` or `Date32`
//! (the types every built-in operator takes); an `Int32` column is widened
//! to `Int64`. Any other type, or a null value, fails the task naming the
//! file and the column.

use std::fs::File;
use std::sync::{Arc, Mutex};

use arrow_array::cast::AsArray;
use arrow_array::types::Int32Type;
use arrow_array::{ArrayRef, Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::file::metadata::RowGroupMetaData;

use super::TaskError;
use coordhost_io::grant::Grants;
use coordhost_model::value::{BATCH_ROWS, SplitData, SplitPayloadData};

/// The byte offset where `row_group` starts: its first column chunk's
/// dictionary page when that comes before the first data page, else the
/// first data page (parquet-mr `BlockMetaData.getStartingPos`; the sample
/// `file-enumerator` cuts at the same offsets). `None` for a row group
/// without columns or with a negative offset.
pub fn row_group_start(row_group: &RowGroupMetaData) -> Option<u64> {
    let first = row_group.columns().first()?;
    let data = first.data_page_offset();
    let start = match first.dictionary_page_offset() {
        Some(dict) if dict > 0 && dict < data => dict,
        _ => data,
    };
    u64::try_from(start).ok()
}

/// Reads the row groups of the Parquet file that `split` owns (those
/// starting inside its byte range) and calls `emit` with each record batch
/// of `columns`, in that order, at most [`BATCH_ROWS`] rows each, row
/// groups in file order.
///
/// `grants` are the split enumerator's directories, the only place the file
/// is read from (symlinks that lead out are refused); `None` is for splits
/// the host made itself (tests, tools), read with the host's own authority.
///
/// # Errors
///
/// - [`TaskError::Split`] naming the split and the file: an `inline` split,
///   a file outside the grants or not a regular file, an I/O error of the
///   operating system while reading it (retried);
/// - [`TaskError::InvalidData`] naming the file (not retried): a file that
///   is not Parquet (bad magic, a footer that does not decode), a row
///   group whose pages fail to decode or their checksum; and, naming the
///   column too, a column the file lacks, of a type `read-parquet` does
///   not read, or holding nulls;
/// - [`TaskError::Io`] when the host cannot open its own file;
/// - whatever `emit` returns.
pub fn read_split(
    split: &SplitData,
    grants: Option<&Grants>,
    columns: &[String],
    vertex: &str,
    mut emit: impl FnMut(RecordBatch) -> Result<(), TaskError>,
) -> Result<(), TaskError> {
    let plugin = grants.map_or("(host)", Grants::plugin);
    let split_error = |reason: String| TaskError::Split {
        split: split.id.clone(),
        reason,
    };
    let SplitPayloadData::FileRange {
        path,
        start,
        length,
    } = &split.payload
    else {
        return Err(split_error(format!(
            "plugin `{plugin}` gave an inline split; read-parquet reads `file-range` splits of Parquet files"
        )));
    };
    let name = path.display().to_string();
    let file = open_input(path, grants, &split_error)?;
    // A file whose footer or pages do not decode (or fail their checksum)
    // is damaged where it is stored: a data error, not retried. An I/O
    // error of the operating system (`os error N`) may pass: retried.
    let invalid = |reason: String| {
        if reason.contains("os error") {
            split_error(format!("plugin `{plugin}` named {name}, which {reason}"))
        } else {
            TaskError::InvalidData {
                detail: format!("{name} (split `{}`) {reason}", split.id),
            }
        }
    };
    let not_parquet =
        |e: &dyn std::fmt::Display| invalid(format!("is not a readable Parquet file: {e}"));
    let prefetched = match &file {
        ParquetInput::Object(o, cache) => Some((o.clone(), cache.clone())),
        ParquetInput::File(_) => None,
    };
    let builder = ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| not_parquet(&e))?;
    let end = start.saturating_add(*length);
    let mut owned = Vec::new();
    for (i, rg) in builder.metadata().row_groups().iter().enumerate() {
        let at = row_group_start(rg)
            .ok_or_else(|| not_parquet(&format_args!("row group {i} has no column chunk")))?;
        if (*start..end).contains(&at) {
            owned.push(i);
        }
    }
    if owned.is_empty() {
        return Ok(());
    }
    let plan = Projection::plan(builder.schema(), columns, &name)?;
    let mask = ProjectionMask::roots(builder.parquet_schema(), plan.roots.iter().copied());
    if let Some((object, cache)) = prefetched {
        prefetch(
            &object,
            &cache,
            builder.metadata().row_groups(),
            &owned,
            &mask,
        )
        .map_err(|e| split_error(format!("plugin `{plugin}` named {name}: {e}")))?;
    }
    let reader = builder
        .with_row_groups(owned)
        .with_projection(mask)
        .with_batch_size(BATCH_ROWS)
        .build()
        .map_err(|e| not_parquet(&e))?;
    for batch in reader {
        let batch =
            batch.map_err(|e| invalid(format!("holds row groups that do not decode: {e}")))?;
        emit(plan.apply(&batch, &name, vertex)?)?;
    }
    Ok(())
}

/// Opens the Parquet file or object `path` names: through `grants` (an
/// `s3://` URL as an object inside the store grants, else a file inside
/// the granted directories), or, without grants (the host's own file),
/// as a regular file. A refusal is `split_error`'s; the host's own file
/// that does not open is [`TaskError::Io`].
fn open_input(
    path: &std::path::Path,
    grants: Option<&Grants>,
    split_error: &impl Fn(String) -> TaskError,
) -> Result<ParquetInput, TaskError> {
    let is_object = path
        .to_str()
        .is_some_and(coordhost_io::objstore::is_object_url);
    Ok(match grants {
        Some(g) if is_object => ParquetInput::Object(
            g.open_readable_object(path)
                .map_err(|e| split_error(e.to_string()))?,
            Arc::default(),
        ),
        Some(g) => ParquetInput::File(
            g.open_readable_file(path)
                .map_err(|e| split_error(e.to_string()))?,
        ),
        None => ParquetInput::File(
            coordhost_io::files::open_regular_file(path, u64::MAX)
                .map_err(|source| TaskError::Io {
                    path: path.to_path_buf(),
                    source,
                })?
                .0,
        ),
    })
}

/// What a Parquet split is read from: a file, or an object read by ranged
/// GETs through the host's client (an `s3://` split), with the column
/// chunks the split reads fetched ahead ([`prefetch`]).
enum ParquetInput {
    File(File),
    Object(coordhost_io::objstore::ObjectFile, Arc<Mutex<Prefetched>>),
}

/// Column chunks fetched ahead, as (offset in the object, bytes).
#[derive(Default)]
struct Prefetched(Vec<(u64, bytes::Bytes)>);

impl Prefetched {
    /// The fetched bytes from `start` to the end of the fetched run that
    /// holds it, if one does.
    fn from(&self, start: u64) -> Option<bytes::Bytes> {
        self.0.iter().find_map(|(at, bytes)| {
            let end = at + bytes.len() as u64;
            (*at <= start && start < end)
                .then(|| bytes.slice(usize::try_from(start - at).unwrap_or(usize::MAX)..))
        })
    }
}

/// Most bytes of column chunks fetched ahead for one split; a split
/// that reads more streams them as it reads.
const MAX_PREFETCH_BYTES: u64 = 256 << 20;

/// For a split of an object: fetches every column chunk of `columns` in
/// the row groups `owned` of `row_groups` at once ([`ObjectFile::fetch_ranges`]:
/// neighbours joined, up to 10 requests at a time) into `cache`, which the
/// reader then reads from. Reading them as the Parquet reader asks, one
/// chunk after the other, cost a few milliseconds of store latency each
/// (docs/object-storage.md, "TPC-H from objects").
///
/// [`ObjectFile::fetch_ranges`]: coordhost_io::objstore::ObjectFile::fetch_ranges
fn prefetch(
    object: &coordhost_io::objstore::ObjectFile,
    cache: &Mutex<Prefetched>,
    row_groups: &[RowGroupMetaData],
    owned: &[usize],
    columns: &ProjectionMask,
) -> std::io::Result<()> {
    let mut ranges: Vec<std::ops::Range<u64>> = Vec::new();
    for rg in owned.iter().filter_map(|&i| row_groups.get(i)) {
        for (leaf, chunk) in rg.columns().iter().enumerate() {
            if !columns.leaf_included(leaf) {
                continue;
            }
            let (start, length) = chunk.byte_range();
            let end = start.saturating_add(length).min(object.size());
            if start < end {
                ranges.push(start..end);
            }
        }
    }
    ranges.sort_by_key(|r| r.start);
    let total: u64 = ranges.iter().map(|r| r.end - r.start).sum();
    if ranges.is_empty() || total > MAX_PREFETCH_BYTES {
        return Ok(());
    }
    let fetched = object.fetch_ranges(ranges.clone())?;
    let mut c = cache
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    c.0 = ranges.iter().map(|r| r.start).zip(fetched).collect();
    Ok(())
}

impl parquet::file::reader::Length for ParquetInput {
    fn len(&self) -> u64 {
        match self {
            Self::File(f) => f.len(),
            Self::Object(o, _) => o.size(),
        }
    }
}

impl parquet::file::reader::ChunkReader for ParquetInput {
    type T = Box<dyn std::io::Read + Send>;

    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        match self {
            Self::File(f) => Ok(Box::new(f.get_read(start)?)),
            Self::Object(o, cache) => {
                let ahead = cache
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .from(start);
                let mut at = o.clone();
                // What was fetched ahead first, the object after it (a
                // reader never reads past its column chunk, which was
                // fetched whole; the rest is only a fallback).
                let skip = ahead.as_ref().map_or(0, |b| b.len() as u64);
                std::io::Seek::seek(&mut at, std::io::SeekFrom::Start(start + skip))?;
                match ahead {
                    Some(bytes) => Ok(Box::new(std::io::Read::chain(
                        std::io::Cursor::new(bytes),
                        at,
                    ))),
                    None => Ok(Box::new(at)),
                }
            }
        }
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<bytes::Bytes> {
        match self {
            Self::File(f) => f.get_bytes(start, length),
            Self::Object(o, cache) => {
                let ahead = cache
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .from(start);
                match ahead {
                    Some(bytes) if bytes.len() >= length => Ok(bytes.slice(..length)),
                    _ => o
                        .fetch(start, start.saturating_add(length as u64))
                        .map_err(|e| parquet::errors::ParquetError::External(Box::new(e))),
                }
            }
        }
    }
}

/// Which root columns of the file to read and how to put the reader's
/// columns (in file order) into the job's order, with their output types.
struct Projection {
    /// Root column indices of the file, ascending.
    roots: Vec<usize>,
    /// For each requested column, its position in the reader's output.
    order: Vec<usize>,
    /// The schema of the emitted batches.
    schema: Arc<Schema>,
}

impl Projection {
    fn plan(file_schema: &Schema, columns: &[String], name: &str) -> Result<Self, TaskError> {
        // The file is not what the job declares: a data error.
        let data = |detail: String| TaskError::InvalidData { detail };
        let mut wanted = Vec::with_capacity(columns.len());
        let mut fields = Vec::with_capacity(columns.len());
        for c in columns {
            let Ok(i) = file_schema.index_of(c) else {
                let names: Vec<&str> = file_schema
                    .fields()
                    .iter()
                    .map(|f| f.name().as_str())
                    .collect();
                return Err(data(format!(
                    "{name} has no column `{c}` (its columns: {})",
                    names.join(", ")
                )));
            };
            let t = file_schema.field(i).data_type();
            let out = match t {
                DataType::Utf8
                | DataType::Int64
                | DataType::Decimal128(_, _)
                | DataType::Date32 => t.clone(),
                DataType::Int32 => DataType::Int64,
                other => {
                    return Err(data(format!(
                        "{name}: column `{c}` is {other}; read-parquet reads Utf8, Int64, Int32, Decimal128 and Date32 columns"
                    )));
                }
            };
            wanted.push(i);
            fields.push(Field::new(c, out, false));
        }
        let mut roots = wanted.clone();
        roots.sort_unstable();
        let order = wanted
            .iter()
            .map(|w| roots.binary_search(w).unwrap_or_default())
            .collect();
        Ok(Self {
            roots,
            order,
            schema: Arc::new(Schema::new(fields)),
        })
    }

    /// The reader's `batch` with the columns in the job's order, `Int32`
    /// widened to `Int64`.
    fn apply(
        &self,
        batch: &RecordBatch,
        name: &str,
        vertex: &str,
    ) -> Result<RecordBatch, TaskError> {
        let mut arrays: Vec<ArrayRef> = Vec::with_capacity(self.order.len());
        for (&pos, field) in self.order.iter().zip(self.schema.fields()) {
            let a = batch.column(pos);
            if a.null_count() > 0 {
                return Err(TaskError::InvalidData {
                    detail: format!(
                        "{name}: column `{}` holds nulls; read-parquet reads columns without nulls",
                        field.name()
                    ),
                });
            }
            let a = match a.data_type() {
                DataType::Int32 => Arc::new(Int64Array::from_iter_values(
                    a.as_primitive::<Int32Type>()
                        .values()
                        .iter()
                        .map(|&v| i64::from(v)),
                )) as ArrayRef,
                _ => a.clone(),
            };
            arrays.push(a);
        }
        RecordBatch::try_new(self.schema.clone(), arrays).map_err(|e| TaskError::Data {
            vertex: vertex.to_string(),
            detail: format!("{name}: {e}"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::types::Int64Type;
    use arrow_array::{Date32Array, Decimal128Array, Int32Array, StringArray};
    use parquet::arrow::ArrowWriter;
    use parquet::file::properties::WriterProperties;
    use std::path::{Path, PathBuf};

    /// A file of `rows` rows `(id Int64, qty Decimal128(15,2), day Date32,
    /// name Utf8, small Int32)` in row groups of `group` rows.
    fn write_file(dir: &Path, rows: i64, group: usize) -> PathBuf {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("qty", DataType::Decimal128(15, 2), false),
            Field::new("day", DataType::Date32, false),
            Field::new("name", DataType::Utf8, false),
            Field::new("small", DataType::Int32, false),
        ]));
        let path = dir.join("t.parquet");
        let props = WriterProperties::builder()
            .set_max_row_group_row_count(Some(group))
            .build();
        let mut w = ArrowWriter::try_new(
            File::create(&path).expect("create"),
            schema.clone(),
            Some(props),
        )
        .expect("writer");
        let ids: Vec<i64> = (0..rows).collect();
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(ids.clone())),
                Arc::new(
                    Decimal128Array::from(
                        ids.iter()
                            .map(|&i| i128::from(i) * 7 - 300)
                            .collect::<Vec<_>>(),
                    )
                    .with_precision_and_scale(15, 2)
                    .expect("decimal"),
                ),
                Arc::new(Date32Array::from(
                    ids.iter().map(|&i| 10_000 + i as i32).collect::<Vec<_>>(),
                )),
                Arc::new(StringArray::from_iter_values(
                    ids.iter().map(|i| format!("n{i}")),
                )),
                Arc::new(Int32Array::from(
                    ids.iter().map(|&i| -(i as i32)).collect::<Vec<_>>(),
                )),
            ],
        )
        .expect("batch");
        w.write(&batch).expect("write");
        w.close().expect("close");
        path
    }

    fn split(path: &Path, start: u64, length: u64) -> SplitData {
        SplitData {
            id: "s".into(),
            payload: SplitPayloadData::FileRange {
                path: path.to_path_buf(),
                start,
                length,
            },
        }
    }

    fn ids(path: &Path, start: u64, length: u64) -> Vec<i64> {
        let mut out = Vec::new();
        read_split(
            &split(path, start, length),
            None,
            &["id".into()],
            "v",
            |b| {
                assert!(b.num_rows() <= BATCH_ROWS);
                out.extend(
                    b.column(0)
                        .as_primitive::<Int64Type>()
                        .values()
                        .iter()
                        .copied(),
                );
                Ok(())
            },
        )
        .expect("read");
        out
    }

    #[test]
    fn byte_ranges_cut_anywhere_read_every_row_group_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write_file(dir.path(), 1000, 100);
        let len = std::fs::metadata(&path).expect("len").len();
        let all = ids(&path, 0, len);
        assert_eq!(all, (0..1000).collect::<Vec<_>>());
        for cut in (0..=len).step_by(97) {
            let mut both = ids(&path, 0, cut);
            both.extend(ids(&path, cut, len - cut));
            assert_eq!(both, all, "cut at {cut}");
        }
    }

    #[test]
    fn columns_come_in_the_job_order_with_their_texts() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write_file(dir.path(), 3, 100);
        let cols: Vec<String> = ["name", "small", "day", "qty"].map(String::from).into();
        let mut rows = Vec::new();
        read_split(&split(&path, 0, u64::MAX), None, &cols, "v", |b| {
            for r in 0..b.num_rows() {
                let cells: Vec<String> = b
                    .columns()
                    .iter()
                    .map(|a| coordhost_model::value::cell_text(a.as_ref(), r).into_owned())
                    .collect();
                rows.push(cells.join(","));
            }
            Ok(())
        })
        .expect("read");
        assert_eq!(
            rows,
            [
                "n0,0,1997-05-19,-3.00",
                "n1,-1,1997-05-20,-2.93",
                "n2,-2,1997-05-21,-2.86"
            ]
        );
    }

    #[test]
    fn a_missing_column_and_a_file_that_is_not_parquet_are_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write_file(dir.path(), 3, 100);
        let err = read_split(
            &split(&path, 0, 1 << 20),
            None,
            &["nope".into()],
            "scan",
            |_| Ok(()),
        )
        .expect_err("no such column");
        let msg = err.to_string();
        assert!(
            msg.contains("`nope`") && msg.contains(&path.display().to_string()),
            "{msg}"
        );
        let csv = dir.path().join("x.parquet");
        std::fs::write(&csv, "a,b\n1,2\n").expect("write");
        let msg = read_split(&split(&csv, 0, 8), None, &["a".into()], "scan", |_| Ok(()))
            .expect_err("not parquet")
            .to_string();
        assert!(
            msg.contains("x.parquet (split `s`) is not a readable Parquet file"),
            "{msg}"
        );
    }
}
