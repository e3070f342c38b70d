//! The graph form lowered onto DataFusion: a job-file vertex's operator
//! chain (`tokenize`, `filter`, `project`, `aggregate`) becomes one
//! DataFusion physical plan over the vertex's input, run like a SQL stage
//! (`super::run_chain`, docs/job-file.md, "Operators").
//!
//! | operator | plan |
//! |---|---|
//! | `read-lines` / `read-csv` / `read-parquet`, or the producers' partitions | the leaf ([`super::LeafExec`], kind `Chain`): the task's batches, read by `runtime` |
//! | `tokenize` | `ProjectionExec` of `coordhost_words[_lower](column)`, then `UnnestExec` of the list |
//! | `filter`, text | `FilterExec`: `column <op> 'value'` on text; a date column against a `YYYY-MM-DD` value as dates (a date outside years 0000–9999, whose text starts with `+` or `-`, sorts below every such value, as its text does); any other column as `CAST(column AS Utf8)` |
//! | `filter`, `type = "number"` | `FilterExec`: integers and decimals against the exact `Decimal128` constant, text through `coordhost_number` (a cell that is not a number fails the task) |
//! | `project` | `ProjectionExec` |
//! | `aggregate` | `AggregateExec` (single phase) grouping by the key columns: `count(1)`, `sum` / `min` / `max` of `coordhost_number(column)` (`Decimal128(38, 6)`); `final` sums `coordhost_count` of the count states; then a `ProjectionExec` casting `complete` / `final` values to `Decimal128(38, decimals)` (Arrow rounds half away from zero) and `coordhost_average(sum, count)` for `avg` |
//!
//! Column names inside the plan are `c0`, `c1`, … (the chain addresses
//! columns by position; names in the job file may repeat after a
//! `project`). A source vertex's leaf carries one more column, `__file`
//! ([`FILE_COLUMN`]): the file each row was read from, which a number's
//! error names; it follows the rows until the first `aggregate` and is
//! dropped before the output.
//!
//! An `aggregate` without key emits no row when no row comes (DataFusion
//! would emit one): a hidden `count(1)` is kept and rows with 0 are
//! dropped. Groups come out in the order of their first row (DataFusion's
//! group tables keep that order when they emit everything at the end).

use std::sync::Arc;

use arrow_schema::{DataType, Field, Schema, SchemaRef};
use datafusion::common::{NullHandling, ScalarValue, UnnestOptions};
use datafusion::config::ConfigOptions;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::functions_aggregate::count::count_udaf;
use datafusion::functions_aggregate::min_max::{max_udaf, min_udaf};
use datafusion::functions_aggregate::sum::sum_udaf;
use datafusion::logical_expr::{AggregateUDF, Operator as DfOp, ScalarUDF};
use datafusion::physical_expr::ScalarFunctionExpr;
use datafusion::physical_expr::aggregate::{AggregateExprBuilder, AggregateFunctionExpr};
use datafusion::physical_expr::expressions::{BinaryExpr, CastExpr, Column, Literal};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::PhysicalExpr;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode, PhysicalGroupBy};
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::unnest::{ListUnnest, UnnestExec};

use super::cellfn::{self, Reader, STATE_SCALE};
use coordhost_model::graph::{AggFunction, AggMode, Aggregate, CmpOp, Operator};
use coordhost_model::value::cells::{self, DECIMAL_PRECISION};

/// The name of the column a source vertex's leaf adds: the file (or
/// `split ID`) each row was read from, as a dictionary of text.
pub const FILE_COLUMN: &str = "__file";

/// The type of [`FILE_COLUMN`].
#[must_use]
pub fn file_column_type() -> DataType {
    DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8))
}

/// Which of the `n` columns of a `read-csv` source the rest of the chain
/// reads: those a `filter` looks at, up to and including the first
/// operator that replaces the columns (`project`, `tokenize`,
/// `aggregate`); every column if none does (the rows leave the vertex).
/// The others are never parsed (a `Null` column stands in for them).
#[must_use]
pub fn needed_columns(operators: &[Operator], n: usize) -> Vec<bool> {
    let mut need = vec![false; n];
    let mut mark = |c: usize| {
        if let Some(x) = need.get_mut(c) {
            *x = true;
        }
    };
    for op in operators.iter().skip(1) {
        match op {
            Operator::ReadLines
            | Operator::ReadCsv { .. }
            | Operator::ReadParquet { .. }
            | Operator::Stage(_) => {}
            Operator::Filter { column, .. } => mark(*column),
            Operator::Tokenize { column, .. } => {
                mark(*column);
                return need;
            }
            Operator::Project { columns } => {
                columns.iter().for_each(|&c| mark(c));
                return need;
            }
            Operator::Aggregate {
                key, aggregates, ..
            } => {
                key.iter()
                    .chain(aggregates.iter().flat_map(|a| &a.inputs))
                    .for_each(|&c| mark(c));
                return need;
            }
        }
    }
    vec![true; n]
}

/// The schema of a chain's leaf: `columns` (the types of the vertex's
/// input columns) named `c0`, `c1`, …, then [`FILE_COLUMN`] if `file`.
#[must_use]
pub fn leaf_schema(columns: &[DataType], file: bool) -> SchemaRef {
    let mut fields: Vec<Field> = columns
        .iter()
        .enumerate()
        .map(|(i, t)| Field::new(format!("c{i}"), t.clone(), true))
        .collect();
    if file {
        fields.push(Field::new(FILE_COLUMN, file_column_type(), true));
    }
    Arc::new(Schema::new(fields))
}

/// The physical plan of `operators` (read operators are the leaf's, and
/// skipped) over `leaf`, whose schema is [`leaf_schema`]'s.
///
/// # Errors
///
/// A DataFusion error when an operator names a column the input does not
/// have, or a SQL stage is among the operators.
pub fn plan_chain(
    operators: &[Operator],
    leaf: Arc<dyn ExecutionPlan>,
) -> DfResult<Arc<dyn ExecutionPlan>> {
    let file = leaf
        .schema()
        .fields()
        .last()
        .is_some_and(|f| f.name() == FILE_COLUMN);
    let mut at = Lowering {
        plan: leaf,
        file,
        config: Arc::new(ConfigOptions::default()),
    };
    for op in operators {
        match op {
            Operator::ReadLines | Operator::ReadCsv { .. } | Operator::ReadParquet { .. } => {}
            Operator::Stage(_) => {
                return Err(DataFusionError::Internal(
                    "a SQL stage is not part of an operator chain".to_string(),
                ));
            }
            Operator::Tokenize { column, lowercase } => at.tokenize(*column, *lowercase)?,
            Operator::Filter {
                column,
                cmp,
                value,
                number,
            } => {
                let predicate = match number {
                    Some(n) => at.numeric_predicate(*column, *cmp, n.millionths())?,
                    None => at.text_predicate(*column, *cmp, value)?,
                };
                at.plan = Arc::new(FilterExec::try_new(predicate, Arc::clone(&at.plan))?);
            }
            Operator::Project { columns } => {
                let exprs = columns
                    .iter()
                    .enumerate()
                    .map(|(k, &c)| Ok((at.column(c)?, format!("c{k}"))))
                    .collect::<DfResult<Vec<_>>>()?;
                at.project(exprs)?;
            }
            Operator::Aggregate {
                key,
                aggregates,
                mode,
                decimals,
            } => at.aggregate(key, aggregates, *mode, *decimals)?,
        }
    }
    if at.file {
        let exprs = (0..at.width())
            .map(|c| Ok((at.column(c)?, format!("c{c}"))))
            .collect::<DfResult<Vec<_>>>()?;
        at.file = false;
        at.project(exprs)?;
    }
    Ok(at.plan)
}

/// The plan so far.
struct Lowering {
    plan: Arc<dyn ExecutionPlan>,
    /// The last column is [`FILE_COLUMN`].
    file: bool,
    config: Arc<ConfigOptions>,
}

fn df_op(cmp: CmpOp) -> DfOp {
    match cmp {
        CmpOp::Eq => DfOp::Eq,
        CmpOp::Ne => DfOp::NotEq,
        CmpOp::Lt => DfOp::Lt,
        CmpOp::Le => DfOp::LtEq,
        CmpOp::Gt => DfOp::Gt,
        CmpOp::Ge => DfOp::GtEq,
    }
}

fn lit(v: ScalarValue) -> Arc<dyn PhysicalExpr> {
    Arc::new(Literal::new(v))
}

fn binary(l: Arc<dyn PhysicalExpr>, op: DfOp, r: Arc<dyn PhysicalExpr>) -> Arc<dyn PhysicalExpr> {
    Arc::new(BinaryExpr::new(l, op, r))
}

fn cast(e: Arc<dyn PhysicalExpr>, to: DataType) -> Arc<dyn PhysicalExpr> {
    Arc::new(CastExpr::new(e, to, None))
}

fn state_decimal() -> DataType {
    DataType::Decimal128(DECIMAL_PRECISION, STATE_SCALE)
}

impl Lowering {
    fn schema(&self) -> SchemaRef {
        self.plan.schema()
    }

    /// Columns other than [`FILE_COLUMN`].
    fn width(&self) -> usize {
        self.schema().fields().len() - usize::from(self.file)
    }

    fn column(&self, i: usize) -> DfResult<Arc<dyn PhysicalExpr>> {
        if i >= self.width() {
            return Err(DataFusionError::Plan(format!(
                "column {i} of an input of {} columns",
                self.width()
            )));
        }
        Ok(Arc::new(Column::new(self.schema().field(i).name(), i)))
    }

    fn data_type(&self, i: usize) -> DataType {
        self.schema().field(i).data_type().clone()
    }

    /// The file column, as the last argument of a number's reading.
    fn file_arg(&self) -> Vec<Arc<dyn PhysicalExpr>> {
        if self.file {
            let i = self.width();
            vec![Arc::new(Column::new(FILE_COLUMN, i))]
        } else {
            Vec::new()
        }
    }

    fn call(
        &self,
        udf: ScalarUDF,
        args: Vec<Arc<dyn PhysicalExpr>>,
        schema: &Schema,
    ) -> DfResult<Arc<dyn PhysicalExpr>> {
        Ok(Arc::new(ScalarFunctionExpr::try_new(
            Arc::new(udf),
            args,
            schema,
            Arc::clone(&self.config),
        )?))
    }

    /// `coordhost_number(column [, file])`.
    fn number(
        &self,
        e: Arc<dyn PhysicalExpr>,
        reader: Reader,
        schema: &Schema,
    ) -> DfResult<Arc<dyn PhysicalExpr>> {
        let mut args = vec![e];
        args.extend(self.file_arg());
        self.call(cellfn::number(reader), args, schema)
    }

    /// A projection of `exprs`, with the file column after them while
    /// there is one.
    fn project(&mut self, mut exprs: Vec<(Arc<dyn PhysicalExpr>, String)>) -> DfResult<()> {
        exprs.extend(
            self.file_arg()
                .into_iter()
                .map(|f| (f, FILE_COLUMN.to_string())),
        );
        self.plan = Arc::new(ProjectionExec::try_new(exprs, Arc::clone(&self.plan))?);
        Ok(())
    }

    fn tokenize(&mut self, column: usize, lowercase: bool) -> DfResult<()> {
        let words = self.call(
            cellfn::words(lowercase),
            vec![self.column(column)?],
            &self.schema(),
        )?;
        self.project(vec![(words, "c0".to_string())])?;
        let mut fields = vec![Field::new("c0", DataType::Utf8, true)];
        if self.file {
            fields.push(Field::new(FILE_COLUMN, file_column_type(), true));
        }
        let options = UnnestOptions {
            null_handling: NullHandling::Drop,
            ..UnnestOptions::default()
        };
        self.plan = Arc::new(UnnestExec::new(
            Arc::clone(&self.plan),
            vec![ListUnnest {
                index_in_input_schema: 0,
                depth: 1,
            }],
            Vec::new(),
            Arc::new(Schema::new(fields)),
            options,
        )?);
        Ok(())
    }

    /// `column <cmp> value` on the text of the cells.
    fn text_predicate(
        &self,
        column: usize,
        cmp: CmpOp,
        value: &str,
    ) -> DfResult<Arc<dyn PhysicalExpr>> {
        let c = self.column(column)?;
        let text = || lit(ScalarValue::Utf8(Some(value.to_string())));
        let op = df_op(cmp);
        Ok(match self.data_type(column) {
            DataType::Utf8 => binary(c, op, text()),
            DataType::Date32 => match cells::parse_date(value) {
                Some(days) => {
                    // Inside years 0000..=9999 a date's text orders as the
                    // date; beyond 9999 (`+10000-01-01`) it sorts below
                    // every `YYYY-MM-DD` (as does a year before 0000, which
                    // is below the range anyway).
                    let date = lit(ScalarValue::Date32(Some(days)));
                    let last = lit(ScalarValue::Date32(Some(*cells::plain_date_range().end())));
                    let plain = binary(Arc::clone(&c), op, date);
                    match cmp {
                        CmpOp::Eq | CmpOp::Ne => plain,
                        CmpOp::Lt | CmpOp::Le => binary(plain, DfOp::Or, binary(c, DfOp::Gt, last)),
                        CmpOp::Gt | CmpOp::Ge => {
                            binary(plain, DfOp::And, binary(c, DfOp::LtEq, last))
                        }
                    }
                }
                None => binary(cast(c, DataType::Utf8), op, text()),
            },
            _ => binary(cast(c, DataType::Utf8), op, text()),
        })
    }

    /// `column <cmp> value` as exact numbers (`value` in millionths).
    fn numeric_predicate(
        &self,
        column: usize,
        cmp: CmpOp,
        millionths: i128,
    ) -> DfResult<Arc<dyn PhysicalExpr>> {
        let c = self.column(column)?;
        let op = df_op(cmp);
        let constant = || {
            lit(ScalarValue::Decimal128(
                Some(millionths),
                DECIMAL_PRECISION,
                STATE_SCALE,
            ))
        };
        Ok(match self.data_type(column) {
            DataType::Int64 => binary(cast(c, state_decimal()), op, constant()),
            DataType::Decimal128(_, s) if s <= STATE_SCALE => {
                binary(cast(c, state_decimal()), op, constant())
            }
            DataType::Decimal128(p, s) => {
                // More digits after the point than the constant: the
                // constant is scaled up to the column's, exactly.
                let scaled = 10i128
                    .checked_pow(u32::from(s.unsigned_abs()) - STATE_SCALE as u32)
                    .and_then(|f| millionths.checked_mul(f));
                match scaled {
                    Some(v) => binary(c, op, lit(ScalarValue::Decimal128(Some(v), p, s))),
                    // A constant beyond every value of the column.
                    None => lit(ScalarValue::Boolean(Some(
                        cmp.holds(0.cmp(&millionths.signum())),
                    ))),
                }
            }
            _ => {
                let n = self.number(c, Reader::Filter, &self.schema())?;
                binary(n, op, constant())
            }
        })
    }

    fn aggregate(
        &mut self,
        key: &[usize],
        aggregates: &[Aggregate],
        mode: AggMode,
        decimals: u32,
    ) -> DfResult<()> {
        let input = self.schema();
        let group: Vec<(Arc<dyn PhysicalExpr>, String)> = key
            .iter()
            .enumerate()
            .map(|(j, &k)| Ok((self.column(k)?, format!("c{j}"))))
            .collect::<DfResult<_>>()?;
        let hidden = key.is_empty();
        let exprs = self.aggregate_exprs(aggregates, mode == AggMode::Final, hidden, &input)?;
        let n_aggs = exprs.len();
        let plan = AggregateExec::try_new(
            AggregateMode::Single,
            PhysicalGroupBy::new_single(group),
            exprs,
            vec![None; n_aggs],
            Arc::clone(&self.plan),
            input,
        )?;
        self.plan = Arc::new(plan);
        self.file = false;
        let out = self.schema();
        if hidden {
            let last = out.fields().len() - 1;
            let rows: Arc<dyn PhysicalExpr> = Arc::new(Column::new(out.field(last).name(), last));
            let some = binary(rows, DfOp::Gt, lit(ScalarValue::Int64(Some(0))));
            self.plan = Arc::new(FilterExec::try_new(some, Arc::clone(&self.plan))?);
        }
        let exprs = self.aggregate_output(key.len(), aggregates, mode, decimals, &out)?;
        self.plan = Arc::new(ProjectionExec::try_new(exprs, Arc::clone(&self.plan))?);
        Ok(())
    }

    /// The aggregate expressions over `input`: per aggregate, the columns
    /// of the aggregation it reads (one, or two for `avg`: sum and count),
    /// from its inputs, or in final mode (`fin`) from its partial state;
    /// with `hidden`, a last count of the rows.
    fn aggregate_exprs(
        &self,
        aggregates: &[Aggregate],
        fin: bool,
        hidden: bool,
        input: &SchemaRef,
    ) -> DfResult<Vec<Arc<AggregateFunctionExpr>>> {
        let one = || lit(ScalarValue::Int64(Some(1)));
        let mut exprs: Vec<Arc<AggregateFunctionExpr>> = Vec::new();
        let mut add = |f: Arc<AggregateUDF>, arg: Arc<dyn PhysicalExpr>| -> DfResult<()> {
            let name = format!("a{}", exprs.len());
            exprs.push(Arc::new(
                AggregateExprBuilder::new(f, vec![arg])
                    .schema(Arc::clone(input))
                    .alias(name)
                    .build()?,
            ));
            Ok(())
        };
        let input_column = |a: &Aggregate, i: usize| -> DfResult<Arc<dyn PhysicalExpr>> {
            let c = a.inputs.get(i).copied().ok_or_else(|| {
                DataFusionError::Plan(format!("aggregate `{}` has no input {i}", a.output))
            })?;
            self.column(c)
        };
        let number = |a: &Aggregate, i: usize| -> DfResult<Arc<dyn PhysicalExpr>> {
            self.number(input_column(a, i)?, Reader::Aggregate, input)
        };
        let count_state = |a: &Aggregate, i: usize| -> DfResult<Arc<dyn PhysicalExpr>> {
            let mut args = vec![input_column(a, i)?];
            args.extend(self.file_arg());
            self.call(cellfn::count(), args, input)
        };
        for a in aggregates {
            match (a.function, fin) {
                (AggFunction::Count, false) => add(count_udaf(), one())?,
                (AggFunction::Count, true) => add(sum_udaf(), count_state(a, 0)?)?,
                (AggFunction::Sum, _) => add(sum_udaf(), number(a, 0)?)?,
                (AggFunction::Min, _) => add(min_udaf(), number(a, 0)?)?,
                (AggFunction::Max, _) => add(max_udaf(), number(a, 0)?)?,
                (AggFunction::Avg, false) => {
                    add(sum_udaf(), number(a, 0)?)?;
                    add(count_udaf(), one())?;
                }
                (AggFunction::Avg, true) => {
                    add(sum_udaf(), number(a, 0)?)?;
                    add(sum_udaf(), count_state(a, 1)?)?;
                }
            }
        }
        if hidden {
            add(count_udaf(), one())?;
        }
        Ok(exprs)
    }

    /// The output of an aggregation whose columns are `out`: the `key_len`
    /// key columns, then each aggregate's columns (its partial state in
    /// partial mode, else its value at `decimals` places), named `c0`,
    /// `c1`, ...
    fn aggregate_output(
        &self,
        key_len: usize,
        aggregates: &[Aggregate],
        mode: AggMode,
        decimals: u32,
        out: &SchemaRef,
    ) -> DfResult<Vec<(Arc<dyn PhysicalExpr>, String)>> {
        let col =
            |i: usize| -> Arc<dyn PhysicalExpr> { Arc::new(Column::new(out.field(i).name(), i)) };
        let mut exprs: Vec<(Arc<dyn PhysicalExpr>, String)> = Vec::new();
        for j in 0..key_len {
            exprs.push((col(j), format!("c{j}")));
        }
        let d = decimals.min(STATE_SCALE as u32) as i8;
        let mut at = key_len;
        for a in aggregates {
            let mut push = |e: Arc<dyn PhysicalExpr>| {
                let name = format!("c{}", exprs.len());
                exprs.push((e, name));
            };
            match (a.function, mode) {
                (AggFunction::Avg, AggMode::Partial) => {
                    push(col(at));
                    push(col(at + 1));
                    at += 2;
                }
                (AggFunction::Avg, _) => {
                    let avg =
                        self.call(cellfn::average(decimals), vec![col(at), col(at + 1)], out)?;
                    push(avg);
                    at += 2;
                }
                (AggFunction::Count, _) | (_, AggMode::Partial) => {
                    push(col(at));
                    at += 1;
                }
                (_, _) if d == STATE_SCALE => {
                    push(col(at));
                    at += 1;
                }
                (_, _) => {
                    push(cast(col(at), DataType::Decimal128(DECIMAL_PRECISION, d)));
                    at += 1;
                }
            }
        }
        Ok(exprs)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use arrow_array::{
        ArrayRef, Date32Array, DictionaryArray, Int32Array, Int64Array, RecordBatch, StringArray,
    };

    use super::*;
    use crate::sql::{BatchIter, LeafInputs, LeafKind, StageFailure, StageOutput, run_chain};
    use coordhost_model::value::cell_text;
    use coordhost_model::value::cells::{batch_of, decimal_array};

    #[derive(Debug)]
    struct Batches(Mutex<Option<Vec<RecordBatch>>>);

    impl LeafInputs for Batches {
        fn partitions(&self, _kind: &LeafKind) -> usize {
            1
        }
        fn open(&self, _kind: &LeafKind, _partition: usize) -> DfResult<BatchIter> {
            let v = self.0.lock().expect("lock").take().unwrap_or_default();
            Ok(Box::new(v.into_iter().map(Ok)))
        }
    }

    #[derive(Default)]
    struct Collect(Vec<RecordBatch>);

    impl StageOutput for Collect {
        fn schema(&mut self, _schema: &SchemaRef) {}
        fn batch(&mut self, batch: RecordBatch) -> bool {
            self.0.push(batch);
            true
        }
    }

    impl Collect {
        fn rows(&self) -> Vec<Vec<String>> {
            let mut out = Vec::new();
            for b in &self.0 {
                for r in 0..b.num_rows() {
                    out.push(
                        b.columns()
                            .iter()
                            .map(|c| cell_text(c.as_ref(), r).into_owned())
                            .collect(),
                    );
                }
            }
            out
        }

        fn types(&self) -> Vec<DataType> {
            self.0[0]
                .schema()
                .fields()
                .iter()
                .map(|f| f.data_type().clone())
                .collect()
        }
    }

    /// Runs `ops` over `batches` (the leaf's schema from the first; with a
    /// file column when `file`).
    fn run_batches(ops: &[Operator], batches: Vec<RecordBatch>) -> Result<Collect, StageFailure> {
        let first = &batches[0];
        let file = first
            .schema()
            .fields()
            .last()
            .is_some_and(|f| f.data_type() == &file_column_type());
        let types: Vec<DataType> = first
            .columns()
            .iter()
            .take(first.num_columns() - usize::from(file))
            .map(|c| c.data_type().clone())
            .collect();
        let schema = leaf_schema(&types, file);
        let mut out = Collect::default();
        let inputs = Arc::new(Batches(Mutex::new(Some(batches))));
        run_chain(ops, schema, inputs, &mut out)?;
        Ok(out)
    }

    fn text_batch(rows: &[&[&str]]) -> RecordBatch {
        let width = rows.first().map_or(0, |r| r.len());
        batch_of(
            (0..width)
                .map(|c| {
                    Arc::new(StringArray::from(
                        rows.iter().map(|r| r[c]).collect::<Vec<_>>(),
                    )) as ArrayRef
                })
                .collect(),
        )
    }

    /// `batch` with a file column naming `file`.
    fn from_file(batch: RecordBatch, file: &str) -> RecordBatch {
        let keys = Int32Array::from(vec![0; batch.num_rows()]);
        let names: ArrayRef = Arc::new(StringArray::from(vec![file]));
        let mut columns = batch.columns().to_vec();
        columns.push(Arc::new(
            DictionaryArray::try_new(keys, names).expect("dict"),
        ));
        batch_of(columns)
    }

    fn run(ops: &[Operator], rows: &[&[&str]]) -> Vec<Vec<String>> {
        let mut out = run_batches(ops, vec![text_batch(rows)])
            .expect("run")
            .rows();
        out.sort();
        out
    }

    fn agg(function: AggFunction, inputs: Vec<usize>) -> Aggregate {
        Aggregate {
            function,
            inputs,
            output: "x".into(),
        }
    }

    #[test]
    fn tokenize_then_count_counts_words() {
        let ops = [
            Operator::ReadLines,
            Operator::Tokenize {
                column: 0,
                lowercase: true,
            },
            Operator::Aggregate {
                key: vec![0],
                aggregates: vec![agg(AggFunction::Count, vec![])],
                mode: AggMode::Complete,
                decimals: 2,
            },
        ];
        let out = run(&ops, &[&["The cat, the hat."], &["CAT ΣΑΣ"], &[""]]);
        assert_eq!(
            out,
            [["cat", "2"], ["hat", "1"], ["the", "2"], ["σας", "1"]]
        );
        // Without lower-casing, and through a file column.
        let ops = [Operator::Tokenize {
            column: 0,
            lowercase: false,
        }];
        let b = from_file(text_batch(&[&["a-B c"]]), "f.txt");
        let out = run_batches(&ops, vec![b]).expect("run");
        assert_eq!(out.rows(), [["a"], ["B"], ["c"]]);
        assert_eq!(out.types(), [DataType::Utf8]);
    }

    fn two_phase(mode: AggMode) -> Operator {
        let fin = mode == AggMode::Final;
        Operator::Aggregate {
            key: vec![0],
            aggregates: vec![
                agg(AggFunction::Count, if fin { vec![1] } else { vec![] }),
                agg(AggFunction::Avg, if fin { vec![2, 3] } else { vec![1] }),
                agg(AggFunction::Min, if fin { vec![4] } else { vec![1] }),
                agg(AggFunction::Max, if fin { vec![5] } else { vec![1] }),
                agg(AggFunction::Sum, if fin { vec![6] } else { vec![1] }),
            ],
            mode,
            decimals: 2,
        }
    }

    #[test]
    fn partial_then_final_equals_complete() {
        let rows: &[&[&str]] = &[&["k", "1.005"], &["k", "2"], &["j", "-3"], &["k", "-0.004"]];
        let complete =
            run_batches(&[two_phase(AggMode::Complete)], vec![text_batch(rows)]).expect("complete");
        let partial =
            run_batches(&[two_phase(AggMode::Partial)], vec![text_batch(rows)]).expect("partial");
        assert_eq!(
            partial.rows(),
            [
                [
                    "k",
                    "3",
                    "3.001000",
                    "3",
                    "-0.004000",
                    "2.000000",
                    "3.001000"
                ],
                [
                    "j",
                    "1",
                    "-3.000000",
                    "1",
                    "-3.000000",
                    "-3.000000",
                    "-3.000000"
                ]
            ]
        );
        let d6 = DataType::Decimal128(38, 6);
        assert_eq!(
            partial.types(),
            [
                DataType::Utf8,
                DataType::Int64,
                d6.clone(),
                DataType::Int64,
                d6.clone(),
                d6.clone(),
                d6
            ]
        );
        // The final phase reads the typed state columns, or their text
        // (state columns written as text).
        let fin = run_batches(&[two_phase(AggMode::Final)], partial.0.clone()).expect("final");
        let texts = partial.rows();
        let refs: Vec<Vec<&str>> = texts
            .iter()
            .map(|r| r.iter().map(String::as_str).collect())
            .collect();
        let slices: Vec<&[&str]> = refs.iter().map(Vec::as_slice).collect();
        let fin_text =
            run_batches(&[two_phase(AggMode::Final)], vec![text_batch(&slices)]).expect("final");
        assert_eq!(complete.rows(), fin.rows());
        assert_eq!(complete.rows(), fin_text.rows());
        assert_eq!(
            complete.rows(),
            [
                ["k", "3", "1.00", "0.00", "2.00", "3.00"],
                ["j", "1", "-3.00", "-3.00", "-3.00", "-3.00"]
            ]
        );
        let d2 = DataType::Decimal128(38, 2);
        assert_eq!(
            complete.types(),
            [
                DataType::Utf8,
                DataType::Int64,
                d2.clone(),
                d2.clone(),
                d2.clone(),
                d2
            ]
        );
    }

    #[test]
    fn averages_and_sums_round_half_away_from_zero_once() {
        let ops = [Operator::Aggregate {
            key: vec![],
            aggregates: vec![
                agg(AggFunction::Avg, vec![0]),
                agg(AggFunction::Sum, vec![0]),
            ],
            mode: AggMode::Complete,
            decimals: 2,
        }];
        // 0.005 + 0.01 + 0 = 0.015: the average 0.005 rounds up, the sum
        // 0.015 to 0.02; negated, away from zero.
        let out = run(&ops, &[&["0.005"], &["0.01"], &["0"]]);
        assert_eq!(out, [["0.01", "0.02"]]);
        let out = run(&ops, &[&["-0.005"], &["-0.01"], &["0"]]);
        assert_eq!(out, [["-0.01", "-0.02"]]);
        // 1/8 = 0.125 at 6 digits: `decimals = 6` keeps it.
        let six = [Operator::Aggregate {
            key: vec![],
            aggregates: vec![agg(AggFunction::Avg, vec![0])],
            mode: AggMode::Complete,
            decimals: 6,
        }];
        let mut rows: Vec<&[&str]> = vec![&["1"]];
        rows.extend(std::iter::repeat_n(&["0"][..], 7));
        assert_eq!(run(&six, &rows), [["0.125000"]]);
    }

    #[test]
    fn groups_come_out_in_order_of_first_appearance_across_batches() {
        let ops = [Operator::Aggregate {
            key: vec![0, 1],
            aggregates: vec![agg(AggFunction::Count, vec![])],
            mode: AggMode::Complete,
            decimals: 2,
        }];
        let batches = vec![
            text_batch(&[&["b", "1"], &["a", "bc"], &["b", "1"]]),
            text_batch(&[&["ab", "c"], &["a", "bc"]]),
        ];
        let out = run_batches(&ops, batches).expect("run").rows();
        assert_eq!(out, [["b", "1", "2"], ["a", "bc", "2"], ["ab", "c", "1"]]);
    }

    #[test]
    fn an_aggregate_without_key_over_no_row_emits_none() {
        let ops = [
            Operator::Filter {
                column: 0,
                cmp: CmpOp::Eq,
                value: "none".into(),
                number: None,
            },
            Operator::Aggregate {
                key: vec![],
                aggregates: vec![
                    agg(AggFunction::Count, vec![]),
                    agg(AggFunction::Sum, vec![0]),
                ],
                mode: AggMode::Partial,
                decimals: 2,
            },
        ];
        assert!(run(&ops, &[&["1"], &["2"]]).is_empty());
        assert_eq!(run(&ops[1..], &[&["1"], &["2"]]), [["2", "3.000000"]]);
    }

    #[test]
    fn typed_columns_aggregate_like_their_text() {
        let typed = batch_of(vec![
            Arc::new(Date32Array::from(vec![10_471, 10_471, 10_472])),
            Arc::new(Int64Array::from(vec![3, 4, -5])),
            Arc::new(decimal_array(vec![1_005, 2_000, -1], 3)),
        ]);
        let text = text_batch(&[
            &["1998-09-02", "3", "1.005"],
            &["1998-09-02", "4", "2.000"],
            &["1998-09-03", "-5", "-0.001"],
        ]);
        let ops = [Operator::Aggregate {
            key: vec![0],
            aggregates: vec![
                agg(AggFunction::Sum, vec![1]),
                agg(AggFunction::Avg, vec![2]),
                agg(AggFunction::Max, vec![2]),
            ],
            mode: AggMode::Complete,
            decimals: 2,
        }];
        let a = run_batches(&ops, vec![typed]).expect("typed");
        let b = run_batches(&ops, vec![text]).expect("text");
        assert_eq!(a.rows(), b.rows());
        assert_eq!(
            a.rows(),
            [
                ["1998-09-02", "7.00", "1.50", "2.00"],
                ["1998-09-03", "-5.00", "0.00", "0.00"]
            ]
        );
        // The key keeps its type.
        assert_eq!(a.types()[0], DataType::Date32);
    }

    fn invalid(e: Result<Collect, StageFailure>) -> String {
        match e {
            Err(StageFailure::Invalid(detail)) => detail,
            Err(other) => panic!("not a data error: {other:?}"),
            Ok(c) => panic!("no error: {:?}", c.rows()),
        }
    }

    #[test]
    fn a_value_that_is_not_a_number_fails_naming_it_and_its_file() {
        let sum = [Operator::Aggregate {
            key: vec![],
            aggregates: vec![agg(AggFunction::Sum, vec![1])],
            mode: AggMode::Complete,
            decimals: 2,
        }];
        let e = invalid(run_batches(
            &sum,
            vec![text_batch(&[&["1", "2"], &["1", "x"]])],
        ));
        assert_eq!(e, "aggregate: `x` is not a number");
        // From a source: the file the row came from.
        let batches = vec![
            from_file(text_batch(&[&["1", "2"]]), "a.csv"),
            from_file(text_batch(&[&["1", "2"], &["1", "abc\t"]]), "b.csv"),
        ];
        let e = invalid(run_batches(&sum, batches));
        assert_eq!(e, "b.csv: aggregate: `abc\\t` is not a number");
        let dates = batch_of(vec![Arc::new(Date32Array::from(vec![0]))]);
        let avg = [Operator::Aggregate {
            key: vec![],
            aggregates: vec![agg(AggFunction::Avg, vec![0])],
            mode: AggMode::Partial,
            decimals: 2,
        }];
        let e = invalid(run_batches(&avg, vec![dates]));
        assert_eq!(e, "aggregate: `1970-01-01` is not a number");
        let fin = [Operator::Aggregate {
            key: vec![],
            aggregates: vec![agg(AggFunction::Count, vec![0])],
            mode: AggMode::Final,
            decimals: 2,
        }];
        let e = invalid(run_batches(&fin, vec![text_batch(&[&["2.5"]])]));
        assert_eq!(e, "aggregate: `2.5` is not a count");
        // An average over state columns that count 0 rows: not the input's
        // fault, retried.
        let fin_avg = [Operator::Aggregate {
            key: vec![],
            aggregates: vec![agg(AggFunction::Avg, vec![0, 1])],
            mode: AggMode::Final,
            decimals: 2,
        }];
        match run_batches(&fin_avg, vec![text_batch(&[&["2.5", "0"]])]) {
            Err(StageFailure::Failed(m)) => assert!(m.contains("an average over 0 rows"), "{m}"),
            other => panic!("{:?}", other.map(|c| c.rows())),
        }
    }

    #[test]
    fn filter_and_project_keep_the_right_columns() {
        let ops = [
            Operator::Filter {
                column: 1,
                cmp: CmpOp::Le,
                value: "1998-09-02".into(),
                number: None,
            },
            Operator::Project {
                columns: vec![2, 0, 2],
            },
        ];
        let out = run(
            &ops,
            &[&["a", "1998-09-02", "x"], &["b", "1998-09-03", "y"]],
        );
        assert_eq!(out, [["x", "a", "x"]]);
    }

    fn filter(cmp: CmpOp, value: &str, number: bool) -> Operator {
        Operator::Filter {
            column: 0,
            cmp,
            value: value.into(),
            number: number.then(|| coordhost_model::value::Decimal::parse(value).expect("number")),
        }
    }

    fn kept(ops: &[Operator], column: ArrayRef) -> Vec<String> {
        run_batches(ops, vec![batch_of(vec![column])])
            .expect("run")
            .rows()
            .into_iter()
            .map(|mut r| r.remove(0))
            .collect()
    }

    #[test]
    fn filters_compare_dates_integers_and_decimals_by_value() {
        let dates: ArrayRef = Arc::new(Date32Array::from(vec![10_470, 10_471, 10_472, 2_932_897]));
        // Dates order as their texts do, also beyond year 9999 ('+' < '1').
        assert_eq!(
            kept(&[filter(CmpOp::Le, "1998-09-02", false)], dates.clone()),
            ["1998-09-01", "1998-09-02", "+10000-01-01"]
        );
        assert_eq!(
            kept(&[filter(CmpOp::Gt, "1998-09-01", false)], dates.clone()),
            ["1998-09-02", "1998-09-03"]
        );
        // A constant that is not a whole date compares with the text.
        assert_eq!(
            kept(&[filter(CmpOp::Gt, "1998-09-02x", false)], dates),
            ["1998-09-03"]
        );
        let ints: ArrayRef = Arc::new(Int64Array::from(vec![9, 10, 100]));
        assert_eq!(kept(&[filter(CmpOp::Lt, "10", true)], ints.clone()), ["9"]);
        // As strings, "100" < "9".
        assert_eq!(kept(&[filter(CmpOp::Lt, "9", false)], ints), ["10", "100"]);
        let dec: ArrayRef = Arc::new(decimal_array(vec![5, 50, 4_999_999_999], 9));
        assert_eq!(
            kept(&[filter(CmpOp::Ge, "0.000000050", false)], dec.clone()),
            ["0.000000050", "4.999999999"]
        );
        assert_eq!(
            kept(&[filter(CmpOp::Gt, "0.000001", true)], dec.clone()),
            ["4.999999999"]
        );
        assert_eq!(
            kept(&[filter(CmpOp::Ne, "5", true)], dec),
            ["0.000000005", "0.000000050", "4.999999999"]
        );
        let cents: ArrayRef = Arc::new(decimal_array(vec![150, -5, 0], 2));
        assert_eq!(
            kept(&[filter(CmpOp::Lt, "1.505", true)], cents.clone()),
            ["1.50", "-0.05", "0.00"]
        );
        assert_eq!(kept(&[filter(CmpOp::Lt, "0", false)], cents), ["-0.05"]);
        let text: ArrayRef = Arc::new(StringArray::from(vec!["2", " 10 ", "-1.5"]));
        assert_eq!(kept(&[filter(CmpOp::Ge, "2", true)], text), ["2", " 10 "]);
    }

    #[test]
    fn a_numeric_filter_on_a_cell_that_is_not_a_number_fails() {
        let text: ArrayRef = Arc::new(StringArray::from(vec!["1", "abc"]));
        let e = invalid(run_batches(
            &[filter(CmpOp::Gt, "0", true)],
            vec![batch_of(vec![text])],
        ));
        assert_eq!(e, "filter: `abc` is not a number");
        let dates: ArrayRef = Arc::new(Date32Array::from(vec![0]));
        let e = invalid(run_batches(
            &[filter(CmpOp::Gt, "0", true)],
            vec![batch_of(vec![dates])],
        ));
        assert_eq!(e, "filter: `1970-01-01` is not a number");
    }

    #[test]
    fn only_the_columns_a_chain_reads_are_needed() {
        let ops = [
            Operator::ReadCsv {
                columns: 4,
                delimiter: b',',
                skip_header: false,
            },
            Operator::Filter {
                column: 3,
                cmp: CmpOp::Eq,
                value: "x".into(),
                number: None,
            },
            Operator::Project { columns: vec![1] },
        ];
        assert_eq!(needed_columns(&ops, 4), [false, true, false, true]);
        assert_eq!(needed_columns(&ops[..1], 2), [true, true]);
    }
}
