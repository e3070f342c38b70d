//! Hive-style partition folders (docs/sql.md, "Partition folders"): the
//! values of a table's partition columns read from the folders a split's
//! file lies in, `.../k1=v1/.../kN=vN/FILE`, and added to the split's rows
//! as constant columns (as DataFusion's `ListingTable` does with
//! `table_partition_cols`, and Hive and Spark before it).
//!
//! Folder names are a stranger's input: a folder that is not `KEY=VALUE`
//! for the declared column of its level, a value that does not parse as
//! the column's declared type, a name that is not UTF-8, each is refused
//! with one line naming the file and the folder.

use std::path::Path;
use std::sync::Arc;

use arrow_array::{Array, ArrayRef, RecordBatch, StringArray};
use arrow_schema::{Field, Schema};

use crate::sql::SqlType;
use coordhost_model::graph::ScanColumn;

/// The value Hive writes for a NULL (or empty) partition value; read
/// back as NULL.
pub const HIVE_NULL: &str = "__HIVE_DEFAULT_PARTITION__";

/// The partition values of the file at `path`: one array of one row per
/// level of `levels` (name and declared type, in folder order), read
/// from the last `levels.len()` folders of the path. `%XX` escapes (two
/// hex digits, as Hive writes `/`, `=`, `%` and others in values) are
/// decoded; [`HIVE_NULL`] is NULL.
///
/// # Errors
///
/// One line naming the file (and the folder): the path has fewer
/// folders than levels; a folder is not `NAME=VALUE` for its level's
/// column; the value is empty, not UTF-8 once decoded, or does not parse
/// as the declared type; a declared type is not one coordhost reads.
pub fn partition_values(path: &Path, levels: &[(String, String)]) -> Result<Vec<ArrayRef>, String> {
    let file = shown(&path.display().to_string());
    let names: Vec<&str> = levels.iter().map(|(n, _)| n.as_str()).collect();
    let folders: Vec<&std::ffi::OsStr> = path
        .parent()
        .map(|p| {
            p.components()
                .filter_map(|c| match c {
                    std::path::Component::Normal(n) => Some(n),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default();
    if folders.len() < levels.len() {
        return Err(format!(
            "file `{file}` lies in {} folders, fewer than the {} partition levels ({})",
            folders.len(),
            levels.len(),
            names.join("/")
        ));
    }
    let folders = &folders[folders.len() - levels.len()..];
    let mut values = Vec::with_capacity(levels.len());
    for ((name, ty), folder) in levels.iter().zip(folders) {
        let folder_shown = shown(&folder.to_string_lossy());
        let not_this_level = || {
            format!(
                "file `{file}`: folder `{folder_shown}` is not `{name}=VALUE` (the table's partition folders are {}, in this order)",
                names
                    .iter()
                    .map(|n| format!("`{n}=VALUE`"))
                    .collect::<Vec<_>>()
                    .join("/")
            )
        };
        let folder = folder.to_str().ok_or_else(not_this_level)?;
        let (key, raw) = folder.split_once('=').ok_or_else(not_this_level)?;
        if key != name {
            return Err(not_this_level());
        }
        let bad = |why: String| format!("file `{file}`: folder `{folder_shown}`: {why}");
        let value = unescape(raw).map_err(bad)?;
        if value.is_empty() {
            return Err(bad(format!(
                "partition column `{name}` has no value (Hive writes `{HIVE_NULL}` for NULL)"
            )));
        }
        let sql_type = SqlType::parse(name, ty).map_err(|e| bad(e.to_string()))?;
        let target = sql_type.data_type();
        let array: ArrayRef = if value == HIVE_NULL {
            arrow_array::new_null_array(target, 1)
        } else {
            let text: ArrayRef = Arc::new(StringArray::from(vec![value.as_str()]));
            let options = arrow_cast::CastOptions {
                safe: false,
                ..Default::default()
            };
            arrow_cast::cast_with_options(&text, target, &options).map_err(|e| {
                bad(format!(
                    "`{}` is not a `{ty}` value of partition column `{name}`: {e}",
                    shown(&value)
                ))
            })?
        };
        values.push(array);
    }
    Ok(values)
}

/// Whether a split whose partition values are `values` (one row each,
/// for `levels`) can be skipped: one of the `filters` (`datafusion-proto`
/// logical expressions over the partition columns, unqualified) is false
/// or NULL for them. A filter that does not decode, plan or evaluate to a
/// boolean prunes nothing: the split is read, and the filter above the
/// scan decides its rows as it would without pruning.
#[must_use]
pub fn pruned(filters: &[Vec<u8>], levels: &[(String, String)], values: &[ArrayRef]) -> bool {
    use datafusion::common::DFSchema;
    use datafusion::execution::context::ExecutionProps;
    use datafusion::logical_expr::Expr;
    use datafusion_proto::bytes::Serializeable;
    if filters.is_empty() || levels.len() != values.len() {
        return false;
    }
    let fields: Vec<Field> = levels
        .iter()
        .zip(values)
        .map(|((name, _), v)| Field::new(name, v.data_type().clone(), true))
        .collect();
    let schema = Arc::new(Schema::new(fields));
    let Ok(batch) = RecordBatch::try_new(Arc::clone(&schema), values.to_vec()) else {
        return false;
    };
    let Ok(df_schema) = DFSchema::try_from(schema.as_ref().clone()) else {
        return false;
    };
    let props = ExecutionProps::new();
    filters.iter().any(|bytes| {
        let Ok(expr) = Expr::from_bytes(bytes) else {
            return false;
        };
        let Ok(physical) = datafusion::physical_expr::create_physical_expr(
            &expr,
            &df_schema,
            &props,
            &datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext::default(
            ),
        ) else {
            return false;
        };
        let Ok(answer) = physical.evaluate(&batch).and_then(|v| v.into_array(1)) else {
            return false;
        };
        answer
            .as_any()
            .downcast_ref::<arrow_array::BooleanArray>()
            .is_some_and(|b| b.len() == 1 && (b.is_null(0) || !b.value(0)))
    })
}

/// `s` for a message: one line (control characters as spaces), at most
/// 1 KiB.
fn shown(s: &str) -> String {
    coordhost_wasm::one_line(s, 1024)
}

/// Decodes `%XX` (two hex digits) in a folder's value, as Hive's
/// `unescapePathName`: a `%` not followed by two hex digits stays as it
/// is.
///
/// # Errors
///
/// The decoded bytes are not UTF-8.
fn unescape(raw: &str) -> Result<String, String> {
    if !raw.contains('%') {
        return Ok(raw.to_string());
    }
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2]))
        {
            out.push((h * 16 + l) as u8);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8(out)
        .map_err(|_| "the value is not UTF-8 once its `%XX` escapes are decoded".to_string())
}

/// `batch` (the columns the file reading gave) with the partition
/// `values` added: the columns of `output`, in its order, each partition
/// value repeated for every row.
///
/// # Errors
///
/// Arrow's message when a column index is out of range or the columns do
/// not make a batch.
pub fn with_partition_values(
    batch: &RecordBatch,
    values: &[ArrayRef],
    output: &[ScanColumn],
) -> Result<RecordBatch, String> {
    let rows = batch.num_rows();
    let mut arrays = Vec::with_capacity(output.len());
    for column in output {
        let array = match column {
            ScanColumn::File(i) => Arc::clone(batch.columns().get(*i).ok_or_else(|| {
                format!(
                    "the scan reads file column {i} of a batch of {}",
                    batch.num_columns()
                )
            })?),
            ScanColumn::Partition(i) => {
                let one = values.get(*i).ok_or_else(|| {
                    format!("the scan reads partition level {i} of {}", values.len())
                })?;
                let scalar = datafusion::common::ScalarValue::try_from_array(one, 0)
                    .map_err(|e| e.to_string())?;
                scalar.to_array_of_size(rows).map_err(|e| e.to_string())?
            }
        };
        arrays.push(array);
    }
    let fields: Vec<Field> = arrays
        .iter()
        .enumerate()
        .map(|(k, a)| Field::new(format!("c{k}"), a.data_type().clone(), true))
        .collect();
    RecordBatch::try_new_with_options(
        Arc::new(Schema::new(fields)),
        arrays,
        &arrow_array::RecordBatchOptions::new().with_row_count(Some(rows)),
    )
    .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Array, Int32Array, Int64Array};

    fn levels(l: &[(&str, &str)]) -> Vec<(String, String)> {
        l.iter()
            .map(|(n, t)| ((*n).to_string(), (*t).to_string()))
            .collect()
    }

    #[test]
    fn values_come_from_the_last_folders_in_order_and_strangers_are_refused() {
        let two = levels(&[("y", "int"), ("region", "varchar")]);
        let v =
            partition_values(Path::new("/d/t/y=1995/region=a%2Fb/part-0.csv"), &two).expect("read");
        let y = v[0].as_any().downcast_ref::<Int32Array>().expect("int");
        assert_eq!(y.value(0), 1995);
        let r = v[1].as_any().downcast_ref::<StringArray>().expect("text");
        assert_eq!(r.value(0), "a/b");
        let v = partition_values(Path::new(&format!("/d/y={HIVE_NULL}/region=x/f")), &two)
            .expect("read");
        assert!(v[0].is_null(0));
        for (path, wanted) in [
            (
                "/d/t/region=a/y=1995/f",
                "folder `region=a` is not `y=VALUE`",
            ),
            ("/d/t/y=1995/f", "folder `t` is not `y=VALUE`"),
            ("/d/y=1995/t/f", "folder `t` is not `region=VALUE`"),
            ("/d/t/other/region=a/f", "folder `other` is not `y=VALUE`"),
            (
                "/d/t/y=19x5/region=a/f",
                "folder `y=19x5`: `19x5` is not a `int` value",
            ),
            (
                "/d/t/y=/region=a/f",
                "folder `y=`: partition column `y` has no value",
            ),
            (
                "/f",
                "lies in 0 folders, fewer than the 2 partition levels (y/region)",
            ),
        ] {
            let e = partition_values(Path::new(path), &two).expect_err(path);
            assert!(
                e.starts_with(&format!("file `{path}`")) && e.contains(wanted),
                "{path}: {e}"
            );
        }
        assert_eq!(unescape("50%").expect("kept"), "50%");
        assert_eq!(unescape("a%3Db%zz").expect("decoded"), "a=b%zz");
        assert!(unescape("%ff").is_err());
    }

    #[test]
    fn a_split_is_pruned_only_when_a_filter_is_surely_false_for_its_values() {
        use datafusion::prelude::{col, lit};
        use datafusion_proto::bytes::Serializeable;
        let levels = levels(&[("y", "int")]);
        let bytes = |e: datafusion::logical_expr::Expr| e.to_bytes().expect("bytes").to_vec();
        let v1995 = vec![Arc::new(Int32Array::from(vec![1995])) as ArrayRef];
        let null = vec![arrow_array::new_null_array(
            &arrow_schema::DataType::Int32,
            1,
        )];
        let is_1995 = bytes(col("y").eq(lit(1995i32)));
        let after_1995 = bytes(col("y").gt(lit(1995i32)));
        assert!(!pruned(std::slice::from_ref(&is_1995), &levels, &v1995));
        assert!(pruned(std::slice::from_ref(&after_1995), &levels, &v1995));
        assert!(
            pruned(std::slice::from_ref(&is_1995), &levels, &null),
            "NULL = 1995 is not true"
        );
        // Either filter false is enough; a filter that does not decode or
        // names another column prunes nothing.
        assert!(pruned(&[is_1995.clone(), after_1995], &levels, &v1995));
        assert!(!pruned(&[b"not proto".to_vec()], &levels, &v1995));
        assert!(!pruned(&[bytes(col("z").eq(lit(1i32)))], &levels, &v1995));
        // Not coerced (the planner coerces what it pushes): Int32 > Int64
        // does not evaluate here, so it prunes nothing.
        assert!(!pruned(
            &[bytes(col("y").gt(lit(2000i64)))],
            &levels,
            &v1995
        ));
        assert!(!pruned(&[], &levels, &v1995));
    }

    #[test]
    fn partition_values_are_repeated_for_every_row_in_the_output_order() {
        let file = RecordBatch::try_from_iter([(
            "k",
            Arc::new(Int64Array::from(vec![7, 8, 9])) as ArrayRef,
        )])
        .expect("batch");
        let values = vec![Arc::new(Int32Array::from(vec![1995])) as ArrayRef];
        let out = with_partition_values(
            &file,
            &values,
            &[ScanColumn::Partition(0), ScanColumn::File(0)],
        )
        .expect("batch");
        assert_eq!(out.num_rows(), 3);
        let y = out
            .column(0)
            .as_any()
            .downcast_ref::<Int32Array>()
            .expect("int");
        assert_eq!(y.values().to_vec(), [1995, 1995, 1995]);
        let only =
            with_partition_values(&file, &values, &[ScanColumn::Partition(0)]).expect("batch");
        assert_eq!((only.num_rows(), only.num_columns()), (3, 1));
    }
}
