//! A stop-gap between the row path of the operators and the batch path of
//! result partitions (issue 16): rows become one-row-set Utf8 batches of
//! up to [`ROWS_PER_BATCH`] rows before the [`PartitionWriter`], and
//! batches become rows again after the [`crate::shuffle::SubpartitionReader`].
//! It goes away once the operators move `RecordBatch`es themselves.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, RecordBatch, RecordBatchOptions, StringArray};
use arrow_schema::{DataType, Field, Schema};

use super::{TaskError, TaskOutput};
use crate::graph::DistributionPattern;
use crate::shuffle::{PartitionWriter, route_batch};

/// Most rows buffered before they are written as one batch.
pub const ROWS_PER_BATCH: usize = 8192;

/// The rows of `batch` as vectors of their cells' texts (Utf8 columns;
/// a null is the empty text).
///
/// # Panics
///
/// If a column is not Utf8 (this adapter writes only Utf8 batches).
pub fn batch_rows(batch: &RecordBatch) -> Vec<Vec<String>> {
    let cols: Vec<&StringArray> = batch.columns().iter().map(|c| c.as_string()).collect();
    (0..batch.num_rows())
        .map(|r| {
            cols.iter()
                .map(|c| {
                    if c.is_valid(r) {
                        c.value(r).to_string()
                    } else {
                        String::new()
                    }
                })
                .collect()
        })
        .collect()
}

/// Rows of one width as a batch of Utf8 columns `c0`, `c1`, ….
fn rows_batch(rows: &[Vec<String>], width: usize) -> RecordBatch {
    let fields: Vec<Field> = (0..width)
        .map(|i| Field::new(format!("c{i}"), DataType::Utf8, false))
        .collect();
    let cols: Vec<ArrayRef> = (0..width)
        .map(|i| Arc::new(StringArray::from_iter_values(rows.iter().map(|r| &r[i]))) as ArrayRef)
        .collect();
    let options = RecordBatchOptions::new().with_row_count(Some(rows.len()));
    RecordBatch::try_new_with_options(Arc::new(Schema::new(fields)), cols, &options)
        .expect("columns of one length and type")
}

/// Buffers the rows a task writes and hands them to every output's writer
/// as batches, routed per output.
pub struct RowBatcher {
    rows: Vec<Vec<String>>,
}

impl RowBatcher {
    /// An empty buffer.
    pub fn new() -> Self {
        Self { rows: Vec::new() }
    }

    /// Buffers `row`; writes the buffer first when it is full or `row` has
    /// another width than the rows before it.
    pub fn push(
        &mut self,
        row: Vec<String>,
        writers: &mut [(TaskOutput, PartitionWriter)],
    ) -> Result<(), TaskError> {
        if self.rows.first().is_some_and(|r| r.len() != row.len()) {
            self.flush(writers)?;
        }
        self.rows.push(row);
        if self.rows.len() >= ROWS_PER_BATCH {
            self.flush(writers)?;
        }
        Ok(())
    }

    /// Writes the buffered rows as one batch to every output.
    pub fn flush(
        &mut self,
        writers: &mut [(TaskOutput, PartitionWriter)],
    ) -> Result<(), TaskError> {
        let Some(width) = self.rows.first().map(Vec::len) else {
            return Ok(());
        };
        let batch = rows_batch(&self.rows, width);
        self.rows.clear();
        for (o, w) in writers {
            match o.pattern {
                DistributionPattern::Forward => w.write_batch(0, &batch)?,
                DistributionPattern::Hash => {
                    for (sub, part) in route_batch(&batch, &o.key, o.num_subpartitions) {
                        w.write_batch(sub, &part)?;
                    }
                }
            }
        }
        Ok(())
    }
}
