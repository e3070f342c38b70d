//! One task of a SQL stage (docs/sql.md): the stage's DataFusion plan runs
//! with its leaves fed from this task's input — the splits it pulls from
//! the split enumerator (read as `read-csv` / `read-parquet` read them,
//! then cast to the declared column types), or its producers'
//! subpartitions — and its output goes to the result partitions or the
//! sink, as an operator chain's does.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use arrow_array::{Array, ArrayRef, RecordBatch};

use arrow_schema::{DataType, Field, Schema};
use datafusion::error::{DataFusionError, Result as DfResult};

use super::operators::BatchSink;
use super::{InputPartition, SplitSource, TaskError, TaskInput, Ticker, open_input};
use crate::grant::Grants;
use crate::graph::{StagePlan, StageSource};
use crate::shuffle::SubpartitionReader;
use crate::sql::{BatchIter, LeafInputs, LeafKind, SqlType, StageOutput};
use crate::value::{SplitData, SplitPayloadData};

/// The task's input, shared by the plan's leaves; the first input error
/// is kept here (DataFusion only sees its text).
struct Inner {
    vertex: String,
    source: Option<StageSource>,
    grants: Option<Grants>,
    /// The source readers of the job's tables read by one.
    readers: super::TableReaders,
    state: Mutex<FeedState>,
}

struct FeedState {
    splits: Option<Box<dyn SplitSource>>,
    parts: Vec<InputPartition>,
    ticker: Ticker,
    error: Option<TaskError>,
    splits_read: u64,
}

/// The [`LeafInputs`] of one task (its leaves' iterators share the inner state).
struct Feeds(Arc<Inner>);

impl std::fmt::Debug for Feeds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Feeds")
            .field("vertex", &self.0.vertex)
            .finish_non_exhaustive()
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, FeedState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Keeps `e` (the first error wins) and hands DataFusion its text.
    fn fail(&self, e: TaskError) -> DataFusionError {
        let text = e.to_string();
        let mut s = self.lock();
        if s.error.is_none() {
            s.error = Some(e);
        }
        DataFusionError::Execution(text)
    }

    /// Counts `batch`'s rows as input (cancel, test knobs).
    fn tick(&self, rows: usize) -> Result<(), TaskError> {
        let mut s = self.lock();
        s.ticker.tick(rows)
    }

    /// The batches of the next split, cast to the declared types; `None`
    /// when the enumerator has no more splits.
    fn next_split_batches(&self) -> Result<Option<Vec<RecordBatch>>, TaskError> {
        let split = {
            let mut s = self.lock();
            let Some(src) = s.splits.as_mut() else {
                return Ok(None);
            };
            match src.next_split()? {
                Some(split) => {
                    s.splits_read += 1;
                    split
                }
                None => return Ok(None),
            }
        };
        let source = self.source.as_ref().ok_or_else(|| TaskError::Data {
            vertex: self.vertex.clone(),
            detail: "a stage without a scan was given splits".to_string(),
        })?;
        self.read_split(source, &split).map(Some)
    }

    /// The batches `source` reads from `split`, cast to the declared
    /// types; for a table of partition folders, with the values of the
    /// split's folders added (`super::hive`).
    fn read_split(
        &self,
        source: &StageSource,
        split: &SplitData,
    ) -> Result<Vec<RecordBatch>, TaskError> {
        let mut out = Vec::new();
        match source {
            StageSource::Partitioned {
                table,
                files,
                levels,
                output,
                prune,
            } => {
                let data = |detail: String| TaskError::Data {
                    vertex: self.vertex.clone(),
                    detail: format!("table `{table}`: {detail}"),
                };
                let SplitPayloadData::FileRange { path, .. } = &split.payload else {
                    return Err(data(format!(
                        "split `{}` is inline, but the table's partition values come from the folders of a file",
                        split.id
                    )));
                };
                // Checked before the file is read: a folder that does not
                // fit the declaration fails the split, not its rows.
                let values = super::hive::partition_values(path, levels).map_err(data)?;
                if super::hive::pruned(prune, levels, &values) {
                    return Ok(Vec::new());
                }
                let batches = self.read_split(files, split)?;
                return batches
                    .iter()
                    .map(|b| super::hive::with_partition_values(b, &values, output).map_err(data))
                    .collect();
            }
            StageSource::Csv {
                fields,
                delimiter,
                header,
                columns,
            } => {
                let csv = self.csv_layout(*fields, *delimiter, *header, columns)?;
                super::csv::read_split(split, self.grants.as_ref(), &csv, &self.vertex, |b| {
                    out.push(b);
                    Ok(())
                })?;
            }
            StageSource::Parquet { columns } => {
                let names: Vec<String> = columns.iter().map(|c| c.0.clone()).collect();
                super::parquet::read_split(
                    split,
                    self.grants.as_ref(),
                    &names,
                    &self.vertex,
                    |batch| {
                        let cols: Vec<(ArrayRef, &str, &str)> = columns
                            .iter()
                            .enumerate()
                            .map(|(i, (name, ty))| {
                                (Arc::clone(batch.column(i)), name.as_str(), ty.as_str())
                            })
                            .collect();
                        out.push(self.typed(split, cols)?);
                        Ok(())
                    },
                )?;
            }
            StageSource::Reader { table, columns } => {
                out = self.read_with_plugin(split, table, columns)?;
            }
        }
        Ok(out)
    }

    /// The batches the table's source-reader plugin gives for `split`
    /// (checked against the declared schema by the plugin host), cut to
    /// the `columns` the scan reads. A `file-range` split must name a file
    /// inside the reader's own grants: the host checks it before the
    /// reader sees the split.
    fn read_with_plugin(
        &self,
        split: &SplitData,
        table: &str,
        columns: &[(usize, String, String)],
    ) -> Result<Vec<RecordBatch>, TaskError> {
        let reader = self.readers.get(table).ok_or_else(|| TaskError::Data {
            vertex: self.vertex.clone(),
            detail: format!(
                "table `{table}` is read by a source-reader plugin, which this task was not given"
            ),
        })?;
        let spec = reader.plugin().spec();
        let failed = |reason: String| TaskError::Split {
            split: split.id.clone(),
            reason: format!("table `{table}`, source reader `{}`: {reason}", spec.name),
        };
        if let SplitPayloadData::FileRange { path, .. } = &split.payload {
            Grants::new(&spec.name, &spec.dirs)
                .check_readable(path)
                .map_err(|e| failed(format!("its split names {}", e.detail())))?;
        }
        let batches = reader.read_split(split).map_err(|e| {
            // `invalid-split`: the reader says the split's records do not
            // parse (a value that is not a number, a line of another
            // format): a data error, not retried.
            let invalid = matches!(
                &e,
                crate::plugin::PluginError::Returned {
                    error: crate::plugin::PluginFailure::Other(message),
                    ..
                } if message.starts_with(crate::plugin::INVALID_SPLIT_PREFIX)
            );
            // The plugin host's message names the plugin already.
            let text = e.to_string();
            let text = text
                .strip_prefix(&format!("plugin `{}`: ", spec.name))
                .map_or(text.clone(), str::to_string);
            let error = failed(text);
            if invalid {
                TaskError::InvalidData {
                    detail: error.to_string(),
                }
            } else {
                error
            }
        })?;
        let declared = reader.schema().fields();
        let fields: Vec<Field> = columns
            .iter()
            .map(|(i, name, _)| {
                declared
                    .get(*i)
                    .map(|f| Field::new(name, f.data_type().clone(), true))
                    .ok_or_else(|| {
                        failed(format!(
                            "the scan reads column {i} of a table of {} columns",
                            declared.len()
                        ))
                    })
            })
            .collect::<Result<_, _>>()?;
        let schema = Arc::new(Schema::new(fields));
        batches
            .into_iter()
            .map(|b| {
                let arrays: Vec<ArrayRef> = columns
                    .iter()
                    .map(|(i, _, _)| Arc::clone(b.column(*i)))
                    .collect();
                RecordBatch::try_new_with_options(
                    Arc::clone(&schema),
                    arrays,
                    &arrow_array::RecordBatchOptions::new().with_row_count(Some(b.num_rows())),
                )
                .map_err(|e| failed(format!("cannot project the batch: {e}")))
            })
            .collect()
    }

    /// The layout arrow-csv reads a table's lines with: every field of a
    /// line, the read ones with their declared types.
    fn csv_layout(
        &self,
        fields: usize,
        delimiter: u8,
        header: bool,
        columns: &[(usize, String, String)],
    ) -> Result<super::csv::TypedCsv, TaskError> {
        let mut all: Vec<(String, DataType)> = (0..fields)
            .map(|i| (format!("field {i}"), DataType::Utf8))
            .collect();
        for (i, name, ty) in columns {
            let t = SqlType::parse(name, ty).map_err(|e| TaskError::Data {
                vertex: self.vertex.clone(),
                detail: e.to_string(),
            })?;
            let slot = all.get_mut(*i).ok_or_else(|| TaskError::Data {
                vertex: self.vertex.clone(),
                detail: format!("column `{name}` is field {i} of lines of {fields} fields"),
            })?;
            *slot = (name.clone(), t.data_type().clone());
        }
        Ok(super::csv::TypedCsv {
            delimiter,
            header,
            fields: all,
            read: columns.iter().map(|c| c.0).collect(),
        })
    }

    /// A batch of a Parquet split's `cols` cast to their declared types.
    fn typed(
        &self,
        split: &SplitData,
        cols: Vec<(ArrayRef, &str, &str)>,
    ) -> Result<RecordBatch, TaskError> {
        let what = match &split.payload {
            SplitPayloadData::FileRange { path, .. } => {
                format!("split `{}` ({})", split.id, path.display())
            }
            SplitPayloadData::Inline(_) => format!("split `{}`", split.id),
        };
        let mut fields = Vec::with_capacity(cols.len());
        let mut arrays = Vec::with_capacity(cols.len());
        for (array, name, ty) in cols {
            let target = SqlType::parse(name, ty).map_err(|e| TaskError::Data {
                vertex: self.vertex.clone(),
                detail: e.to_string(),
            })?;
            let target = target.data_type().clone();
            let array = if array.data_type() == &target {
                array
            } else {
                let options = arrow_cast::CastOptions {
                    safe: false,
                    ..Default::default()
                };
                // A value the file holds that is not of the declared type:
                // a data error, not retried.
                arrow_cast::cast_with_options(&array, &target, &options).map_err(|e| {
                    TaskError::InvalidData {
                        detail: format!("{what}: column `{name}` does not hold {ty} values: {e}"),
                    }
                })?
            };
            fields.push(Field::new(name, target, true));
            arrays.push(array);
        }
        let rows = arrays.first().map_or(0, |a| a.len());
        RecordBatch::try_new_with_options(
            Arc::new(Schema::new(fields)),
            arrays,
            &arrow_array::RecordBatchOptions::new().with_row_count(Some(rows)),
        )
        .map_err(|e| TaskError::Data {
            vertex: self.vertex.clone(),
            detail: format!("{what}: {e}"),
        })
    }
}

impl LeafInputs for Feeds {
    fn partitions(&self, kind: &LeafKind) -> usize {
        match kind {
            LeafKind::Scan { .. }
            | LeafKind::Exchange {
                per_producer: false,
                ..
            } => 1,
            LeafKind::Exchange {
                from,
                per_producer: true,
            } => self
                .0
                .lock()
                .parts
                .iter()
                .filter(|p| p.producer.vertex == *from)
                .count(),
        }
    }

    fn open(&self, kind: &LeafKind, partition: usize) -> DfResult<BatchIter> {
        let me = Arc::clone(&self.0);
        match kind {
            LeafKind::Scan { .. } => Ok(Box::new(ScanIter {
                feeds: me,
                pending: VecDeque::new(),
                done: false,
            })),
            LeafKind::Exchange { from, per_producer } => {
                let parts: Vec<InputPartition> = {
                    let s = self.0.lock();
                    let mine = s.parts.iter().filter(|p| p.producer.vertex == *from);
                    if *per_producer {
                        mine.skip(partition).take(1).cloned().collect()
                    } else {
                        mine.cloned().collect()
                    }
                };
                Ok(Box::new(ExchangeIter {
                    feeds: me,
                    parts: parts.into(),
                    reader: None,
                }))
            }
        }
    }
}

struct ScanIter {
    feeds: Arc<Inner>,
    pending: VecDeque<RecordBatch>,
    done: bool,
}

impl Iterator for ScanIter {
    type Item = DfResult<RecordBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(b) = self.pending.pop_front() {
                return Some(match self.feeds.tick(b.num_rows()) {
                    Ok(()) => Ok(b),
                    Err(e) => {
                        self.done = true;
                        Err(self.feeds.fail(e))
                    }
                });
            }
            if self.done {
                return None;
            }
            match self.feeds.next_split_batches() {
                Ok(Some(batches)) => self.pending.extend(batches),
                Ok(None) => {
                    self.done = true;
                    return None;
                }
                Err(e) => {
                    self.done = true;
                    return Some(Err(self.feeds.fail(e)));
                }
            }
        }
    }
}

struct ExchangeIter {
    feeds: Arc<Inner>,
    parts: VecDeque<InputPartition>,
    reader: Option<(InputPartition, SubpartitionReader)>,
}

impl Iterator for ExchangeIter {
    type Item = DfResult<RecordBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some((p, r)) = &mut self.reader {
                match r.next_batch() {
                    Ok(Some(b)) => {
                        if let Err(e) = self.feeds.tick(b.num_rows()) {
                            self.parts.clear();
                            self.reader = None;
                            return Some(Err(self.feeds.fail(e)));
                        }
                        return Some(Ok(b));
                    }
                    Ok(None) => self.reader = None,
                    Err(e) => {
                        let e = super::classify(p, e);
                        self.parts.clear();
                        self.reader = None;
                        return Some(Err(self.feeds.fail(e)));
                    }
                }
                continue;
            }
            let p = self.parts.pop_front()?;
            if p.subpartitions.is_empty() {
                continue;
            }
            match open_input(&p) {
                Ok(r) => self.reader = Some((p, r)),
                Err(e) => {
                    self.parts.clear();
                    return Some(Err(self.feeds.fail(e)));
                }
            }
        }
    }
}

/// The stage's output into the task's [`BatchSink`], keeping its error.
struct Output<'a> {
    out: &'a mut Box<dyn BatchSink>,
    error: Option<TaskError>,
}

impl StageOutput for Output<'_> {
    fn schema(&mut self, schema: &arrow_schema::SchemaRef) {
        self.out.expect_schema(schema);
    }

    fn batch(&mut self, batch: RecordBatch) -> bool {
        match self.out.write(&batch) {
            Ok(()) => true,
            Err(e) => {
                self.error = Some(e);
                false
            }
        }
    }
}

/// Runs the task of `stage`: returns the input records, the splits read
/// and what `out` reports.
#[expect(
    clippy::too_many_arguments,
    reason = "the parts of a task spec a SQL stage uses, each once"
)]
pub(super) fn run(
    stage: &StagePlan,
    functions: crate::sql::FunctionSet,
    readers: super::TableReaders,
    vertex: &str,
    input: TaskInput,
    grants: Option<Grants>,
    ticker: Ticker,
    mut out: Box<dyn BatchSink>,
) -> Result<(u64, u64, super::operators::ChainOutput), TaskError> {
    let (splits, parts) = match input {
        TaskInput::Splits(s) => (Some(s), Vec::new()),
        TaskInput::Partitions(p) => (None, p),
    };
    let feeds = Arc::new(Inner {
        vertex: vertex.to_string(),
        source: stage.source.clone(),
        grants,
        readers,
        state: Mutex::new(FeedState {
            splits,
            parts,
            ticker,
            error: None,
            splits_read: 0,
        }),
    });
    let mut output = Output {
        out: &mut out,
        error: None,
    };
    let inputs: Arc<dyn LeafInputs> = Arc::new(Feeds(Arc::clone(&feeds)));
    let result = crate::sql::run_stage(&stage.plan, inputs, functions, &mut output);
    let emit_error = output.error;
    let mut state = feeds.lock();
    if let Some(e) = state.error.take() {
        return Err(e);
    }
    match result {
        Ok(()) => {}
        Err(None) => {
            return Err(emit_error.unwrap_or_else(|| TaskError::Data {
                vertex: vertex.to_string(),
                detail: "the output failed".to_string(),
            }));
        }
        Err(Some(message)) => {
            return Err(TaskError::Data {
                vertex: vertex.to_string(),
                detail: message,
            });
        }
    }
    let records_in = state.ticker.records_in;
    let splits_read = state.splits_read;
    drop(state);
    let output = out.finish()?;
    Ok((records_in, splits_read, output))
}
