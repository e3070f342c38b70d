//! One task of a SQL stage (docs/sql.md) or of a job-file vertex: a
//! DataFusion plan runs with its leaves fed from this task's input — the
//! splits it pulls from the split enumerator (a SQL table's read as
//! declared, cast to the declared column types; a vertex's as its read
//! operator says), or its producers' subpartitions — and its output goes
//! to the result partitions or the sink.
//!
//! A SQL stage's plan is the one recorded when the job started ([`run`]).
//! A job-file vertex's operator chain is lowered onto a plan in the task
//! ([`run_chain`], `crate::sql::chain`) once its first input batch shows
//! the input's column types (a `read-parquet` column's type is the file's;
//! a partition's are its producer's); a task without input writes nothing,
//! as every operator of the chain maps no row to no row.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use arrow_array::{Array, ArrayRef, RecordBatch};

use arrow_schema::{DataType, Field, Schema, SchemaRef};
use datafusion::error::{DataFusionError, Result as DfResult};

use super::sink::{BatchSink, OutputReport};
use super::{InputPartition, SplitSource, TaskError, TaskInput, Ticker, open_input};
use crate::shuffle::SubpartitionReader;
use crate::sql::{BatchIter, LeafInputs, LeafKind, SqlType, StageFailure, StageOutput};
use coordhost_io::grant::Grants;
use coordhost_model::graph::{Operator, StagePlan, StageSource};
use coordhost_model::value::{SplitData, SplitPayloadData};

/// The task's input, shared by the plan's leaves; the first input error
/// is kept here (DataFusion only sees its text).
struct Inner {
    vertex: String,
    source: Option<StageSource>,
    /// For a job-file source vertex: how its read operator reads a split.
    chain: Option<ChainRead>,
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
        if let Some(read) = &self.chain {
            return self.read_chain_split(read, &split).map(Some);
        }
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
                coordhost_wasm::PluginError::Returned {
                    error: coordhost_wasm::PluginFailure::Other(message),
                    ..
                } if message.starts_with(coordhost_wasm::INVALID_SPLIT_PREFIX)
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
            operator: false,
        })
    }

    /// The batches a job-file vertex's read operator gives for `split`,
    /// each with the split's file as the last column
    /// (`crate::sql::chain::FILE_COLUMN`).
    fn read_chain_split(
        &self,
        read: &ChainRead,
        split: &SplitData,
    ) -> Result<Vec<RecordBatch>, TaskError> {
        let mut out = Vec::new();
        match read {
            ChainRead::Lines => super::source::read_split(split, self.grants.as_ref(), |b| {
                out.push(b);
                Ok(())
            })?,
            ChainRead::Csv { csv, fields } => {
                super::csv::read_split(split, self.grants.as_ref(), csv, &self.vertex, |b| {
                    // Every field of the line, the ones the chain does not
                    // read as `Null` columns.
                    let rows = b.num_rows();
                    let columns = (0..*fields)
                        .map(|i| match csv.read.iter().position(|&r| r == i) {
                            Some(j) => Arc::clone(b.column(j)),
                            None => Arc::new(arrow_array::NullArray::new(rows)) as ArrayRef,
                        })
                        .collect();
                    out.push(coordhost_model::value::cells::batch_of(columns));
                    Ok(())
                })?;
            }
            ChainRead::Parquet { columns } => super::parquet::read_split(
                split,
                self.grants.as_ref(),
                columns,
                &self.vertex,
                |b| {
                    out.push(b);
                    Ok(())
                },
            )?,
        }
        let file = super::split_file(split);
        out.into_iter()
            .map(|b| {
                let rows = b.num_rows();
                let keys = arrow_array::Int32Array::from(vec![0; rows]);
                let names: ArrayRef = Arc::new(arrow_array::StringArray::from(vec![file.as_str()]));
                let files = arrow_array::DictionaryArray::try_new(keys, names).map_err(|e| {
                    TaskError::Data {
                        vertex: self.vertex.clone(),
                        detail: format!("{file}: {e}"),
                    }
                })?;
                let mut columns = b.columns().to_vec();
                columns.push(Arc::new(files));
                Ok(coordhost_model::value::cells::batch_of(columns))
            })
            .collect()
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
            } else if let Some(why) = changes_values(array.data_type(), &target) {
                // Cast anyway, the file's values would change without a
                // word (a decimal cut to an integer, an integer read as a
                // date): refused, naming what to declare.
                let held = super::csv::sql_type_name(array.data_type());
                return Err(TaskError::InvalidData {
                    detail: format!(
                        "{what}: column `{name}` holds {held} values; the table declares `{ty}`, and {why}: declare it `{held}` (or cast in the query)"
                    ),
                });
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

/// Why a Parquet column of type `from` cast to the declared `to` would
/// change its values without an error, or `None` when the cast keeps them
/// or fails loudly on one it cannot keep (`safe: false`: an integer too
/// wide for `int`, a text that is not a number, a decimal over its
/// precision). Kept: text to anything and anything to text, an integer to
/// another integer or to a decimal, a decimal to one of the same or a
/// larger scale. Changed: a decimal to fewer digits after the point (it
/// rounds), a decimal or an integer to a double (binary fractions; an
/// integer past 2^53), a decimal to an integer (cut), an integer to a
/// date or a boolean, a date to a number (a count of days).
fn changes_values(from: &DataType, to: &DataType) -> Option<&'static str> {
    use DataType::{Boolean, Date32, Decimal128, Float64, Int32, Int64, Utf8};
    match (from, to) {
        (Utf8, _) | (_, Utf8) => None,
        (Int32 | Int64, Int32 | Int64 | Decimal128(..)) => None,
        (Decimal128(_, s1), Decimal128(_, s2)) if s2 >= s1 => None,
        (Decimal128(..), Decimal128(..)) => {
            Some("a decimal of fewer digits after the point rounds each value")
        }
        (Decimal128(..), Int32 | Int64) => Some("an integer type cuts every fraction"),
        (Int32 | Int64 | Decimal128(..), Float64) => {
            Some("a double holds binary fractions, not these exact values")
        }
        (Int32 | Int64, Date32) => {
            Some("an integer is not a date (it would read as days since 1970)")
        }
        (_, Boolean) => Some("only text converts to a boolean"),
        (Date32, _) => Some("a date converts only to text"),
        _ => Some("the conversion is not one that keeps values"),
    }
}

impl LeafInputs for Feeds {
    fn partitions(&self, kind: &LeafKind) -> usize {
        match kind {
            LeafKind::Scan { .. }
            | LeafKind::Chain
            | LeafKind::Exchange {
                per_producer: false,
                ..
            } => 1,
            // One partition per producer that wrote anything for this
            // task (`inputs_of` leaves out those that reported no byte),
            // and at least one: when every producer was empty (a table
            // without splits) the merge above reads one empty partition,
            // as DataFusion's `SortPreservingMergeExec` needs an input.
            LeafKind::Exchange {
                from,
                per_producer: true,
            } => self
                .0
                .lock()
                .parts
                .iter()
                .filter(|p| p.producer.vertex == *from)
                .count()
                .max(1),
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
            // A SQL stage's plan has no chain leaf.
            LeafKind::Chain => Err(DataFusionError::Internal(
                "a SQL stage has no operator-chain input".to_string(),
            )),
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
) -> Result<(u64, u64, OutputReport), TaskError> {
    let (splits, parts) = match input {
        TaskInput::Splits(s) => (Some(s), Vec::new()),
        TaskInput::Partitions(p) => (None, p),
    };
    let feeds = Arc::new(Inner {
        vertex: vertex.to_string(),
        source: stage.source.clone(),
        chain: None,
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
    finish(&feeds, result, emit_error, out)
}

/// After a plan ran: the first input error if there was one, else the
/// plan's failure as a task error, else the finished output with the
/// input records and the splits read.
fn finish(
    feeds: &Inner,
    result: Result<(), StageFailure>,
    emit_error: Option<TaskError>,
    out: Box<dyn BatchSink>,
) -> Result<(u64, u64, OutputReport), TaskError> {
    let mut state = feeds.lock();
    if let Some(e) = state.error.take() {
        return Err(e);
    }
    match result {
        Ok(()) => {}
        Err(StageFailure::Output) => {
            return Err(emit_error.unwrap_or_else(|| TaskError::Data {
                vertex: feeds.vertex.clone(),
                detail: "the output failed".to_string(),
            }));
        }
        // A value the plan cannot use came from the input: a data error,
        // naming the file when the rows came from one.
        Err(StageFailure::Invalid(detail)) => return Err(TaskError::InvalidData { detail }),
        Err(StageFailure::Failed(message)) => {
            return Err(TaskError::Data {
                vertex: feeds.vertex.clone(),
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

/// How a job-file source vertex reads a split: its read operator.
enum ChainRead {
    /// `read-lines`: one `Utf8` column, the line.
    Lines,
    /// `read-csv`: `fields` text columns, the ones the chain reads parsed
    /// by arrow-csv (`csv.read`), the others `Null`.
    Csv {
        csv: super::csv::TypedCsv,
        fields: usize,
    },
    /// `read-parquet`: the listed columns, typed as the file has them.
    Parquet { columns: Vec<String> },
}

impl ChainRead {
    /// The read operator at the head of `operators`, if it has one.
    fn of(operators: &[Operator]) -> Option<Self> {
        Some(match operators.first()? {
            Operator::ReadLines => ChainRead::Lines,
            Operator::ReadCsv {
                columns,
                delimiter,
                skip_header,
            } => {
                let needed = crate::sql::chain::needed_columns(operators, *columns);
                let mut read: Vec<usize> = (0..*columns).filter(|&i| needed[i]).collect();
                if read.is_empty() {
                    // Rows still count (a `count` without key): read one.
                    read.push(0);
                }
                ChainRead::Csv {
                    csv: super::csv::TypedCsv {
                        delimiter: *delimiter,
                        header: *skip_header,
                        fields: (0..*columns)
                            .map(|i| (format!("field {}", i + 1), DataType::Utf8))
                            .collect(),
                        read,
                        operator: true,
                    },
                    fields: *columns,
                }
            }
            Operator::ReadParquet { columns } => ChainRead::Parquet {
                columns: columns.clone(),
            },
            _ => return None,
        })
    }
}

/// The [`LeafInputs`] of a job-file vertex's task: its one leaf takes the
/// task's batches (the first already read, to learn the schema).
struct ChainFeeds {
    batches: Mutex<Option<BatchIter>>,
}

impl std::fmt::Debug for ChainFeeds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChainFeeds").finish_non_exhaustive()
    }
}

impl LeafInputs for ChainFeeds {
    fn partitions(&self, _kind: &LeafKind) -> usize {
        1
    }

    fn open(&self, _kind: &LeafKind, _partition: usize) -> DfResult<BatchIter> {
        self.batches
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
            .ok_or_else(|| DataFusionError::Internal("the input was opened twice".to_string()))
    }
}

/// `batch` with the column types of `schema`: a later split or producer
/// may give a column in another type than the first (a Parquet decimal of
/// another precision), cast to the first's.
fn conform(vertex: &str, batch: RecordBatch, schema: &SchemaRef) -> Result<RecordBatch, TaskError> {
    let fields = schema.fields();
    if batch.num_columns() != fields.len() {
        return Err(TaskError::Data {
            vertex: vertex.to_string(),
            detail: format!(
                "the input has {} columns in one batch and {} in another",
                fields.len(),
                batch.num_columns()
            ),
        });
    }
    if batch
        .columns()
        .iter()
        .zip(fields)
        .all(|(c, f)| c.data_type() == f.data_type())
    {
        return Ok(batch);
    }
    let options = arrow_cast::CastOptions {
        safe: false,
        ..Default::default()
    };
    let columns = batch
        .columns()
        .iter()
        .zip(fields)
        .enumerate()
        .map(|(i, (c, f))| {
            if c.data_type() == f.data_type() {
                return Ok(Arc::clone(c));
            }
            arrow_cast::cast_with_options(c, f.data_type(), &options).map_err(|e| {
                TaskError::Data {
                    vertex: vertex.to_string(),
                    detail: format!(
                        "input column {} is {} in one batch and {} in another, which does not convert: {e}",
                        i + 1,
                        f.data_type(),
                        c.data_type()
                    ),
                }
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    RecordBatch::try_new_with_options(
        Arc::clone(schema),
        columns,
        &arrow_array::RecordBatchOptions::new().with_row_count(Some(batch.num_rows())),
    )
    .map_err(|e| TaskError::Data {
        vertex: vertex.to_string(),
        detail: e.to_string(),
    })
}

/// Runs the task of a job-file vertex whose chain is `operators`: its
/// input (splits read by its read operator, or its producers'
/// subpartitions, every edge's in order) through the chain lowered onto a
/// DataFusion plan; returns the input records, the splits read and what
/// `out` reports.
pub(super) fn run_chain(
    operators: &[Operator],
    vertex: &str,
    input: TaskInput,
    grants: Option<Grants>,
    ticker: Ticker,
    mut out: Box<dyn BatchSink>,
) -> Result<(u64, u64, OutputReport), TaskError> {
    let scan = matches!(input, TaskInput::Splits(_));
    let (splits, parts) = match input {
        TaskInput::Splits(s) => (Some(s), Vec::new()),
        TaskInput::Partitions(p) => (None, p),
    };
    let feeds = Arc::new(Inner {
        vertex: vertex.to_string(),
        source: None,
        chain: ChainRead::of(operators),
        grants,
        readers: Arc::default(),
        state: Mutex::new(FeedState {
            splits,
            parts: Vec::new(),
            ticker,
            error: None,
            splits_read: 0,
        }),
    });
    if scan && feeds.chain.is_none() {
        return Err(TaskError::Data {
            vertex: vertex.to_string(),
            detail: "a vertex without a read operator was given splits".to_string(),
        });
    }
    let mut batches: BatchIter = if scan {
        Box::new(ScanIter {
            feeds: Arc::clone(&feeds),
            pending: VecDeque::new(),
            done: false,
        })
    } else {
        Box::new(ExchangeIter {
            feeds: Arc::clone(&feeds),
            parts: parts.into(),
            reader: None,
        })
    };
    // The first batch shows the input's column types.
    let first = match batches.next() {
        None => return finish(&feeds, Ok(()), None, out),
        Some(Err(e)) => return finish(&feeds, Err(StageFailure::Failed(e.to_string())), None, out),
        Some(Ok(b)) => b,
    };
    let types: Vec<DataType> = first
        .columns()
        .iter()
        .take(first.num_columns() - usize::from(scan))
        .map(|c| c.data_type().clone())
        .collect();
    let schema = crate::sql::chain::leaf_schema(&types, scan);
    let rest = {
        let feeds = Arc::clone(&feeds);
        let schema = Arc::clone(&schema);
        let vertex = vertex.to_string();
        std::iter::once(Ok(first))
            .chain(batches)
            .map(move |b| b.and_then(|b| conform(&vertex, b, &schema).map_err(|e| feeds.fail(e))))
    };
    let inputs: Arc<dyn LeafInputs> = Arc::new(ChainFeeds {
        batches: Mutex::new(Some(Box::new(rest))),
    });
    let mut output = Output {
        out: &mut out,
        error: None,
    };
    let result = crate::sql::run_chain(operators, schema, inputs, &mut output);
    let emit_error = output.error;
    finish(&feeds, result, emit_error, out)
}

#[cfg(test)]
mod tests {
    use super::changes_values;
    use arrow_schema::DataType::{Boolean, Date32, Decimal128, Float64, Int32, Int64, Utf8};

    #[test]
    fn a_parquet_column_is_cast_only_where_its_values_stay_or_the_cast_fails_loudly() {
        for (from, to) in [
            (Int64, Int32),
            (Int64, Decimal128(15, 2)),
            (Decimal128(15, 2), Decimal128(18, 4)),
            (Decimal128(15, 2), Utf8),
            (Utf8, Int64),
            (Date32, Utf8),
        ] {
            assert_eq!(changes_values(&from, &to), None, "{from} -> {to}");
        }
        for (from, to) in [
            (Decimal128(15, 2), Int32),
            (Decimal128(15, 2), Decimal128(15, 0)),
            (Decimal128(15, 2), Float64),
            (Int64, Float64),
            (Int64, Date32),
            (Int64, Boolean),
            (Date32, Int64),
        ] {
            assert!(changes_values(&from, &to).is_some(), "{from} -> {to}");
        }
    }
}
