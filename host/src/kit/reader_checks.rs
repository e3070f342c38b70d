//! The contract checks of `coordhost plugin test` for a source reader (WIT
//! `coordhost:reader`, issue 27 item 4), run through the real plugin host:
//! [`crate::plugin::SourceReader::read_split`] checks every batch against
//! the declared schema exactly as a SQL job does, under the same deadline
//! and memory cap, and a fault or an error value comes back as the job
//! would see it.
//!
//! The reader is tested on the author's own sample ([`super::ReaderSample`]:
//! the declared columns, a file of good records and, optionally, a file
//! holding a record it must refuse), copied into the scratch folder, which
//! is the reader's only grant. The splits are the ones the sample
//! enumerator `file-enumerator` makes: byte ranges of a file, cut anywhere
//! (a reader reads the records that *start* in its range).
//!
//! The checks, in order:
//! - `configure-accepts-the-schema`: a fresh instance's `configure` takes
//!   the configuration and the declared schema.
//! - `reads-the-declared-schema`: the whole input as one split gives at
//!   least one row, every batch of the declared columns and types.
//! - `deterministic-across-reads`: that split read twice on one instance
//!   (another split read between) and once on a fresh instance gives the
//!   same batches (recovery re-reads splits and must get the rows the first
//!   read got).
//! - `byte-ranges-cover-the-file`: the input cut into [`RANGES`] byte ranges
//!   at arbitrary offsets gives, range after range, the rows of the whole
//!   file, each once.
//! - `unreadable-split-is-an-error-value`: a split of a file that does not
//!   exist, and one of a file outside the reader's grants, each get an
//!   error value (not a trap, not an answer).
//! - `inline-split-is-read-or-refused`: an inline split (the input's text)
//!   gives the rows of the whole file, or an error value; not a trap.
//! - `bad-record-is-invalid-split`: the `--bad-input` file gets the error
//!   value `invalid-split`, whose message names the split or the file (not
//!   applicable without `--bad-input`).

use std::path::Path;
use std::sync::Arc;

use arrow_array::{Array, RecordBatch};
use arrow_schema::SchemaRef;

use super::ReaderSample;
use super::check::{Check, answer_case, check, said};
use crate::plugin::{INVALID_SPLIT_PREFIX, LoadedPlugin, PluginError, PluginFailure, SourceReader};
use crate::value::{SplitData, SplitPayloadData};

/// Into how many byte ranges `byte-ranges-cover-the-file` cuts the input.
pub const RANGES: u64 = 3;
/// The table name the kit's reads are made for (it appears in the host's
/// messages).
pub const TABLE: &str = "kit-table";

/// The split of `length` bytes of `path` from `start`, with id `id`.
pub(crate) fn range(id: &str, path: &Path, start: u64, length: u64) -> SplitData {
    SplitData {
        id: id.to_string(),
        payload: SplitPayloadData::FileRange {
            path: path.to_path_buf(),
            start,
            length,
        },
    }
}

/// The whole of `path` as one split with id `id`.
pub(crate) fn whole(id: &str, path: &Path) -> Result<SplitData, String> {
    let len = std::fs::metadata(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?
        .len();
    Ok(range(id, path, 0, len))
}

/// A fresh reader of the sample's schema (its own pool of instances).
fn reader(plugin: &LoadedPlugin, schema: &SchemaRef) -> Result<Arc<SourceReader>, String> {
    plugin
        .source_reader(TABLE, SchemaRef::clone(schema))
        .map_err(|e| said(&e))
}

/// What a failed read gave: [`answer_case`], or a broken contract (a batch
/// the host refused).
fn case(e: &PluginError) -> &'static str {
    match e {
        PluginError::Protocol { .. } => "a broken contract",
        other => answer_case(other),
    }
}

/// Reads `split`, the error as one line naming what was read.
fn read(r: &SourceReader, split: &SplitData, what: &str) -> Result<Vec<RecordBatch>, String> {
    r.read_split(split)
        .map_err(|e| format!("{what}: {}: {}", case(&e), said(&e)))
}

/// Rows in `batches`.
pub(crate) fn rows(batches: &[RecordBatch]) -> usize {
    batches.iter().map(RecordBatch::num_rows).sum()
}

/// Whether two reads gave the same batches: as many, each with the same
/// rows and values (floating-point values bit for bit).
fn same_batches(a: &[RecordBatch], b: &[RecordBatch]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            x.num_rows() == y.num_rows()
                && x.columns()
                    .iter()
                    .zip(y.columns())
                    .all(|(p, q)| p.to_data() == q.to_data())
        })
}

/// Row `i` of `batch` as `name=value, ...` (`null` for null).
pub(crate) fn show_row(batch: &RecordBatch, i: usize) -> String {
    let options = arrow_cast::display::FormatOptions::default().with_null("null");
    let schema = batch.schema();
    batch
        .columns()
        .iter()
        .zip(schema.fields())
        .map(|(c, f)| {
            let v = arrow_cast::display::ArrayFormatter::try_new(c.as_ref(), &options)
                .map_or_else(|e| format!("({e})"), |fmt| fmt.value(i).to_string());
            format!("{}={v}", f.name())
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The rows of `batches` as one batch of `schema`.
fn concat(schema: &SchemaRef, batches: &[RecordBatch]) -> Result<RecordBatch, String> {
    arrow_select::concat::concat_batches(schema, batches)
        .map_err(|e| format!("cannot put the batches together: {e}"))
}

/// The first row where two reads differ, for the message.
fn first_difference(schema: &SchemaRef, a: &[RecordBatch], b: &[RecordBatch]) -> String {
    let (Ok(x), Ok(y)) = (concat(schema, a), concat(schema, b)) else {
        return "the batches do not put together".into();
    };
    let n = x.num_rows().min(y.num_rows());
    for i in 0..n {
        if show_row(&x, i) != show_row(&y, i) {
            return format!("row {i}: {} then {}", show_row(&x, i), show_row(&y, i));
        }
    }
    if x.num_rows() == y.num_rows() {
        format!(
            "the same rows, cut into {} batches then {}",
            a.len(),
            b.len()
        )
    } else {
        format!("{} rows then {} rows", x.num_rows(), y.num_rows())
    }
}

/// The verdict on a read the reader must refuse with an error value.
fn must_refuse(answer: Result<Vec<RecordBatch>, PluginError>, what: &str) -> Result<(), String> {
    match answer {
        Err(PluginError::Returned { .. }) => Ok(()),
        Err(other) => Err(format!(
            "{what}: expected an error value, got {}: {}",
            case(&other),
            said(&other)
        )),
        Ok(batches) => Err(format!(
            "{what}: it answered {} rows; a split the reader cannot read must get an error value (`io` or `invalid-split`)",
            rows(&batches)
        )),
    }
}

/// Every source-reader check of `plugin` on `sample`, in order.
pub(crate) fn checks(plugin: &LoadedPlugin, sample: &ReaderSample) -> Vec<Check> {
    let schema = &sample.schema;
    let input = &sample.input;
    vec![
        check(
            "configure-accepts-the-schema",
            "`configure` of a fresh instance takes the configuration and the declared schema",
            Box::new(|| configure_accepts_the_schema(plugin, schema)),
        ),
        check(
            "reads-the-declared-schema",
            "the whole input as one split gives at least one row, in batches of the declared columns and types",
            Box::new(|| reads_the_declared_schema(plugin, schema, input)),
        ),
        check(
            "deterministic-across-reads",
            "one split, read twice on one instance (another split between) and once on a fresh instance, gives the same batches",
            Box::new(|| deterministic_across_reads(plugin, schema, input)),
        ),
        check(
            "byte-ranges-cover-the-file",
            "the input cut into 3 byte ranges at arbitrary offsets gives, range after range, the rows of the whole file, each once",
            Box::new(|| byte_ranges_cover_the_file(plugin, schema, input)),
        ),
        check(
            "unreadable-split-is-an-error-value",
            "a split of a file that does not exist, and one of a file outside the grants, each get an error value (not a trap, not an answer)",
            Box::new(|| unreadable_split_is_an_error_value(plugin, schema, input)),
        ),
        check(
            "inline-split-is-read-or-refused",
            "an inline split holding the input's text gives the whole file's rows or an error value (not a trap)",
            Box::new(|| inline_split_is_read_or_refused(plugin, schema, input)),
        ),
        check(
            "bad-record-is-invalid-split",
            "the --bad-input file gets the error value `invalid-split`, naming the split or the file (not a trap, not an answer)",
            Box::new(|| bad_record_is_invalid_split(plugin, schema, sample)),
        ),
    ]
}

/// `configure-accepts-the-schema`: a fresh instance warms up with the
/// configuration and the declared schema.
fn configure_accepts_the_schema(
    plugin: &LoadedPlugin,
    schema: &SchemaRef,
) -> Result<Option<String>, String> {
    reader(plugin, schema)?
        .warm_up()
        .map_err(|e| format!("{}: {}", case(&e), said(&e)))?;
    Ok(None)
}

/// `reads-the-declared-schema`: the whole input as one split gives rows
/// (the host checks each batch against the schema).
fn reads_the_declared_schema(
    plugin: &LoadedPlugin,
    schema: &SchemaRef,
    input: &Path,
) -> Result<Option<String>, String> {
    let r = reader(plugin, schema)?;
    let batches = read(&r, &whole("whole", input)?, "the whole input")?;
    if rows(&batches) == 0 {
        return Err(format!(
            "the whole input ({}) gave no rows; give an --input with records the reader reads",
            input.display()
        ));
    }
    Ok(None)
}

/// `deterministic-across-reads`: one split read twice on one instance and
/// once on a fresh one gives the same batches.
fn deterministic_across_reads(
    plugin: &LoadedPlugin,
    schema: &SchemaRef,
    input: &Path,
) -> Result<Option<String>, String> {
    let split = whole("whole", input)?;
    let len = std::fs::metadata(input).map_err(|e| e.to_string())?.len();
    let between = range("first-half", input, 0, len / 2);
    let r = reader(plugin, schema)?;
    let first = read(&r, &split, "the first read")?;
    read(&r, &between, "the read between")?;
    let again = read(&r, &split, "the second read")?;
    if !same_batches(&first, &again) {
        return Err(format!(
            "the second read on one instance gave other batches: {}",
            first_difference(schema, &first, &again)
        ));
    }
    let fresh_reader = reader(plugin, schema)?;
    let fresh = read(&fresh_reader, &split, "the read on a fresh instance")?;
    if !same_batches(&first, &fresh) {
        return Err(format!(
            "a fresh instance gave other batches: {}",
            first_difference(schema, &first, &fresh)
        ));
    }
    Ok(None)
}

/// `byte-ranges-cover-the-file`: the [`RANGES`] byte ranges of the input
/// give, in order, the rows of the whole file.
fn byte_ranges_cover_the_file(
    plugin: &LoadedPlugin,
    schema: &SchemaRef,
    input: &Path,
) -> Result<Option<String>, String> {
    let r = reader(plugin, schema)?;
    let all = read(&r, &whole("whole", input)?, "the whole input")?;
    let len = std::fs::metadata(input).map_err(|e| e.to_string())?.len();
    let mut parts = Vec::new();
    for k in 0..RANGES {
        let (start, end) = (len * k / RANGES, len * (k + 1) / RANGES);
        let split = range(&format!("range-{k}"), input, start, end - start);
        parts.extend(read(&r, &split, &format!("bytes [{start}, {end})"))?);
    }
    let (whole_rows, part_rows) = (concat(schema, &all)?, concat(schema, &parts)?);
    let same = whole_rows.num_rows() == part_rows.num_rows()
        && whole_rows
            .columns()
            .iter()
            .zip(part_rows.columns())
            .all(|(a, b)| a.to_data() == b.to_data());
    if !same {
        return Err(format!(
            "the whole file gave {} rows, its {RANGES} ranges {} ({}); read the records that start in the range, and only those",
            whole_rows.num_rows(),
            part_rows.num_rows(),
            first_difference(schema, &all, &parts)
        ));
    }
    Ok(None)
}

/// `unreadable-split-is-an-error-value`: a missing file and a file outside
/// the grants each get an error value.
fn unreadable_split_is_an_error_value(
    plugin: &LoadedPlugin,
    schema: &SchemaRef,
    input: &Path,
) -> Result<Option<String>, String> {
    let scratch = input.parent().ok_or("the input has no folder")?;
    let missing = scratch.join("no-such-file");
    must_refuse(
        reader(plugin, schema)?.read_split(&range("missing", &missing, 0, 100)),
        &format!("a split of {}, which does not exist", missing.display()),
    )?;
    let outside = tempfile::Builder::new()
        .prefix("coordhost-kit-ungranted")
        .tempdir()
        .map_err(|e| format!("cannot make a folder outside the grants: {e}"))?;
    let secret = outside.path().join("secret.txt");
    std::fs::copy(input, &secret)
        .map_err(|e| format!("cannot copy the input outside the grants: {e}"))?;
    let split = whole("ungranted", &secret)?;
    must_refuse(
        reader(plugin, schema)?.read_split(&split),
        &format!(
            "a split of {}, outside the reader's grants",
            secret.display()
        ),
    )?;
    Ok(None)
}

/// `inline-split-is-read-or-refused`: the input's text as an inline split
/// gives the whole file's rows or an error value.
fn inline_split_is_read_or_refused(
    plugin: &LoadedPlugin,
    schema: &SchemaRef,
    input: &Path,
) -> Result<Option<String>, String> {
    let text = std::fs::read(input).map_err(|e| e.to_string())?;
    let Ok(text) = String::from_utf8(text) else {
        return Ok(Some(
            "the input is not UTF-8 text, so it cannot be an inline split".into(),
        ));
    };
    let r = reader(plugin, schema)?;
    let all = read(&r, &whole("whole", input)?, "the whole input")?;
    let split = SplitData {
        id: "inline".into(),
        payload: SplitPayloadData::Inline(text),
    };
    match r.read_split(&split) {
        Err(PluginError::Returned { .. }) => Ok(None),
        Err(other) => Err(format!(
            "an inline split: expected rows or an error value, got {}: {}",
            case(&other),
            said(&other)
        )),
        Ok(got) => {
            let (a, b) = (concat(schema, &all)?, concat(schema, &got)?);
            let same = a.num_rows() == b.num_rows()
                && a.columns()
                    .iter()
                    .zip(b.columns())
                    .all(|(x, y)| x.to_data() == y.to_data());
            if same {
                Ok(None)
            } else {
                Err(format!(
                    "an inline split of the input's text gave other rows than the file: {}",
                    first_difference(schema, &all, &got)
                ))
            }
        }
    }
}

/// `bad-record-is-invalid-split`: the `--bad-input` file gets the error
/// value `invalid-split`, naming the split or the file.
fn bad_record_is_invalid_split(
    plugin: &LoadedPlugin,
    schema: &SchemaRef,
    sample: &ReaderSample,
) -> Result<Option<String>, String> {
    let Some(bad) = &sample.bad_input else {
        return Ok(Some(
            "no --bad-input given (a file holding a record the reader must refuse)".into(),
        ));
    };
    let split = whole("bad-split", bad)?;
    match reader(plugin, schema)?.read_split(&split) {
        Err(PluginError::Returned {
            error: PluginFailure::Other(message),
            ..
        }) if message.starts_with(INVALID_SPLIT_PREFIX) => {
            let file = bad.to_string_lossy();
            let name = bad.file_name().map(|n| n.to_string_lossy().into_owned());
            let named = message.contains("bad-split")
                || message.contains(file.as_ref())
                || name.is_some_and(|n| message.contains(&n));
            if named {
                Ok(None)
            } else {
                Err(format!(
                    "the message does not name the split (`bad-split`) or the file: {}",
                    crate::plugin::one_line(&message, 400)
                ))
            }
        }
        Err(other) => Err(format!(
            "the bad input: expected the error value `invalid-split`, got {}: {}",
            match &other {
                PluginError::Returned { .. } => "another error value",
                e => case(e),
            },
            said(&other)
        )),
        Ok(batches) => Err(format!(
            "the bad input was read ({} rows); a record that is not the format must get `invalid-split`",
            rows(&batches)
        )),
    }
}

/// The declared schema as `plugin test` and `plugin call` print it:
/// `(id Int64, name Utf8)`.
pub(crate) fn show_schema(schema: &SchemaRef) -> String {
    let columns: Vec<String> = schema
        .fields()
        .iter()
        .map(|f| format!("{} {}", f.name(), f.data_type()))
        .collect();
    format!("({})", columns.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{ArrayRef, Float64Array, Int64Array};
    use arrow_schema::{DataType, Field, Schema};

    fn batch(ids: &[i64], xs: &[f64]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("x", DataType::Float64, true),
        ]));
        let id: ArrayRef = Arc::new(Int64Array::from(ids.to_vec()));
        let x: ArrayRef = Arc::new(Float64Array::from(xs.to_vec()));
        RecordBatch::try_new(schema, vec![id, x]).expect("batch")
    }

    #[test]
    fn reads_compare_batch_by_batch_and_name_the_first_difference() {
        let a = vec![batch(&[1, 2], &[f64::NAN, 1.5])];
        assert!(same_batches(&a, &a.clone()), "a NaN equals itself");
        let b = vec![batch(&[1, 2], &[f64::NAN, 2.5])];
        assert!(!same_batches(&a, &b));
        let schema = a[0].schema();
        assert_eq!(
            first_difference(&schema, &a, &b),
            "row 1: id=2, x=1.5 then id=2, x=2.5"
        );
        let cut = vec![batch(&[1], &[f64::NAN]), batch(&[2], &[1.5])];
        assert!(!same_batches(&a, &cut));
        assert_eq!(
            first_difference(&schema, &a, &cut),
            "the same rows, cut into 1 batches then 2"
        );
        assert_eq!(show_schema(&schema), "(id Int64, x Float64)");
    }
}
