//! The stage cut: DataFusion's physical plan → coordhost stages.
//!
//! The plan is walked from the root. Every exchange ends the stage below
//! it and puts an exchange leaf in the stage above:
//!
//! | DataFusion node | the stage below | the stage above reads |
//! |---|---|---|
//! | `RepartitionExec` hash on columns, `n` partitions | ends; its output is routed by the key columns | a `hash` edge, `n` tasks, one subpartition each |
//! | `CoalescePartitionsExec` | ends | everything, in 1 task (the node stays, over one partition) |
//! | `SortPreservingMergeExec` | ends | everything, in 1 task, one leaf partition per producer, merged |
//! | `RepartitionExec` round robin | dropped: a task's rows stay in the task | — |
//!
//! The exchanges above `CoalescePartitionsExec` and `SortPreservingMergeExec`
//! are `broadcast` edges: every task of the stage above reads every
//! producer (one task, or the build side of a join whose probe side has
//! more). A stage reads one table or other stages, never both: an
//! operator with several inputs (a join) that would mix them, or scan two
//! tables, cuts each scanning input into a stage of its own, read over a
//! `forward` edge (producer task `i` to task `i`).
//!
//! A union, a leaf that is not a declared table, an order-preserving or
//! non-column hash repartition is [`SqlError::Undistributable`], naming the
//! operator: never a silent single-task fallback.

use std::sync::Arc;

use arrow_schema::{DataType, SchemaRef};
use async_trait::async_trait;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::JoinType;
use datafusion::common::utils::project_schema;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::context::SQLOptions;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown, TableType};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::joins::{HashJoinExec, NestedLoopJoinExec, PartitionMode};
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
use datafusion::physical_plan::{
    ExecutionPlan, Partitioning, displayable, replace_children_if_necessary,
};
use datafusion::prelude::{SessionConfig, SessionContext};

use super::exec::{LeafExec, LeafKind, encode_plan};
use super::{PlannedStage, SqlError, StageInput, TableDecl};
use coordhost_model::graph::{DistributionPattern, StagePlan};

/// A declared table as DataFusion's planner sees it: its schema, and a
/// scan that is a coordhost leaf of `partitions` partitions.
#[derive(Debug)]
struct DeclaredTable {
    decl: TableDecl,
    schema: SchemaRef,
    partitions: usize,
}

#[async_trait]
impl TableProvider for DeclaredTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    /// A filter that reads only partition columns is taken `Inexact`: it
    /// stays above the scan (DataFusion applies it to the rows), and the
    /// scan may skip a split whose folder values make it false
    /// (docs/sql.md, "Partition folders"). Every other filter is not
    /// taken, as before.
    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> DfResult<Vec<TableProviderFilterPushDown>> {
        Ok(filters
            .iter()
            .map(|f| {
                if self.on_partitions_only(f) {
                    TableProviderFilterPushDown::Inexact
                } else {
                    TableProviderFilterPushDown::Unsupported
                }
            })
            .collect())
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        _limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let schema = project_schema(&self.schema, projection)?;
        let mut leaf = LeafExec::new(
            LeafKind::Scan {
                table: self.decl.name.clone(),
            },
            schema,
            self.partitions,
            None,
        );
        leaf.prune = filters
            .iter()
            .filter(|f| self.on_partitions_only(f))
            .filter_map(prune_bytes)
            .collect();
        Ok(Arc::new(leaf))
    }
}

impl DeclaredTable {
    /// Whether `filter` reads at least one column and only partition
    /// columns of this table.
    fn on_partitions_only(&self, filter: &Expr) -> bool {
        let columns = filter.column_refs();
        !columns.is_empty()
            && columns.iter().all(|c| {
                self.decl
                    .partition_columns
                    .iter()
                    .any(|(name, _)| *name == c.name)
            })
    }
}

/// `filter` with its columns unqualified, as `datafusion-proto` bytes,
/// when they decode again without the planner's context (no job
/// function): else `None`, and the scan does not prune by it (the filter
/// above the scan still applies).
fn prune_bytes(filter: &Expr) -> Option<Vec<u8>> {
    use datafusion_proto::bytes::Serializeable;
    let expr = datafusion::logical_expr::expr_rewriter::unnormalize_col(filter.clone());
    let bytes = expr.to_bytes().ok()?;
    Expr::from_bytes(&bytes).ok()?;
    Some(bytes.to_vec())
}

/// DataFusion's refusal in one line. A syntax error names its line and
/// column: the parser's own, or the end of `sql` when the query stops
/// early (the parser gives no place for that).
fn refused(e: &DataFusionError, sql: &str) -> SqlError {
    let text = match e.find_root() {
        DataFusionError::SQL(parser, _) => {
            let mut t = format!("syntax error: {parser}");
            if !t.contains("Line: ") {
                let line = sql.trim_end().lines().count().max(1);
                let column = sql
                    .trim_end()
                    .lines()
                    .last()
                    .map_or(0, |l| l.chars().count())
                    + 1;
                t.push_str(&format!(
                    " at the end of the query (Line: {line}, Column: {column})"
                ));
            }
            t
        }
        root => root.to_string(),
    };
    SqlError::Plan(text.replace('\n', " "))
}

/// Plans `sql` and cuts it (see the module docs).
pub(super) async fn plan_and_cut(
    sql: &str,
    tables: &[TableDecl],
    functions: &[super::SqlFunction],
    parallelism: u32,
) -> Result<Vec<PlannedStage>, SqlError> {
    let partitions = parallelism.max(1) as usize;
    let mut config = SessionConfig::new().with_target_partitions(partitions);
    {
        let o = config.options_mut();
        // Every hash join partitioned on both sides (two hash edges), never
        // a build side collected into each task unasked.
        o.optimizer.hash_join_single_partition_threshold = 0;
        o.optimizer.hash_join_single_partition_threshold_rows = 0;
        o.optimizer.prefer_hash_join = true;
        o.optimizer.repartition_joins = true;
        // Dynamic filters link operators across what becomes a stage
        // boundary (and do not travel as plan bytes): off.
        o.optimizer.enable_dynamic_filter_pushdown = false;
        o.optimizer.enable_topk_dynamic_filter_pushdown = false;
        o.optimizer.enable_join_dynamic_filter_pushdown = false;
        o.optimizer.enable_aggregate_dynamic_filter_pushdown = false;
        // An uncorrelated scalar subquery becomes a join (its one row
        // broadcast), not a `ScalarSubqueryExec` that would run the
        // subquery inside each task.
        o.optimizer.enable_physical_uncorrelated_scalar_subquery = false;
        // Round-robin repartitions would be dropped by the cut anyway.
        o.optimizer.enable_round_robin_repartition = false;
        // Text stays `Utf8`, the type the declarations and routing use.
        o.sql_parser.map_string_types_to_utf8view = false;
    }
    let ctx = SessionContext::new_with_config(config);
    for f in functions {
        if ctx.state().scalar_functions().contains_key(&f.name) {
            return Err(SqlError::Plan(format!(
                "function `{}`: DataFusion has a built-in function of that name; give the job's function another name",
                f.name
            )));
        }
        ctx.register_udf(super::udf::WasmUdf::udf(f));
    }
    for t in tables {
        ctx.register_table(
            t.name.as_str(),
            Arc::new(DeclaredTable {
                schema: t.schema(),
                decl: t.clone(),
                partitions: t.scan_tasks.map_or(partitions, |n| n.max(1) as usize),
            }),
        )
        .map_err(|e| refused(&e, sql))?;
    }
    // A query, nothing else: no DDL (CREATE), DML (INSERT) or SET.
    let options = SQLOptions::new()
        .with_allow_ddl(false)
        .with_allow_dml(false)
        .with_allow_statements(false);
    let df = ctx
        .sql_with_options(sql, options)
        .await
        .map_err(|e| refused(&e, sql))?;
    let plan = df
        .create_physical_plan()
        .await
        .map_err(|e| refused(&e, sql))?;
    let mut cutter = Cutter {
        tables,
        stages: Vec::new(),
    };
    cutter.finish_stage(plan)?;
    Ok(cutter.stages)
}

/// What one stage reads, collected while its plan is rewritten.
#[derive(Default)]
struct Reads {
    table: Option<String>,
    inputs: Vec<StageInput>,
}

struct Cutter<'a> {
    tables: &'a [TableDecl],
    stages: Vec<PlannedStage>,
}

fn undistributable(node: &dyn ExecutionPlan, why: impl Into<String>) -> SqlError {
    SqlError::Undistributable {
        operator: node.name().to_string(),
        why: why.into(),
    }
}

/// Notes the table a scan leaf reads in `reads`; a stage scans one table.
fn note_scan(plan: &dyn ExecutionPlan, leaf: &LeafExec, reads: &mut Reads) -> Result<(), SqlError> {
    if let LeafKind::Scan { table } = &leaf.kind {
        if let Some(other) = &reads.table {
            return Err(undistributable(
                plan,
                format!("a stage would scan two tables (`{other}` and `{table}`)"),
            ));
        }
        reads.table = Some(table.clone());
    }
    Ok(())
}

/// The key of a hash repartition `plan`: the index in `in_schema` of each
/// expression, which must be a column of a type routing takes.
fn hash_key(
    plan: &dyn ExecutionPlan,
    exprs: &[Arc<dyn PhysicalExpr>],
    in_schema: &SchemaRef,
) -> Result<Vec<usize>, SqlError> {
    let mut key = Vec::new();
    for e in exprs {
        let col = e.downcast_ref::<Column>().ok_or_else(|| {
            undistributable(
                plan,
                format!("a hash repartition on the expression `{e}`, not a column"),
            )
        })?;
        let ty = in_schema.field(col.index()).data_type();
        if !matches!(
            ty,
            DataType::Utf8
                | DataType::LargeUtf8
                | DataType::Int32
                | DataType::Int64
                | DataType::Decimal128(..)
                | DataType::Date32
        ) {
            return Err(undistributable(
                plan,
                format!(
                    "a hash key `{}` of type {ty} (routing takes Utf8, Int32, Int64, Decimal128, Date32)",
                    col.name()
                ),
            ));
        }
        key.push(col.index());
    }
    Ok(key)
}

impl Cutter<'_> {
    /// Rewrites `plan` as one stage (cutting the stages below it first),
    /// records it, and returns its index.
    fn finish_stage(&mut self, plan: Arc<dyn ExecutionPlan>) -> Result<usize, SqlError> {
        let mut reads = Reads::default();
        let plan = self.rewrite(plan, &mut reads)?;
        self.record(plan, reads)
    }

    /// Records `plan` (already rewritten, reading `reads`) as a stage.
    fn record(&mut self, plan: Arc<dyn ExecutionPlan>, reads: Reads) -> Result<usize, SqlError> {
        if reads.table.is_some() && !reads.inputs.is_empty() {
            return Err(SqlError::Undistributable {
                operator: plan.name().to_string(),
                why: "a stage would read a table and another stage's output at once".into(),
            });
        }
        if reads.table.is_none() && reads.inputs.is_empty() {
            return Err(SqlError::Undistributable {
                operator: plan.name().to_string(),
                why: "the query reads no declared table".into(),
            });
        }
        let parallelism = u32::try_from(plan.properties().output_partitioning().partition_count())
            .unwrap_or(u32::MAX);
        let schema = plan.schema();
        let source = match &reads.table {
            Some(name) => {
                let decl = self
                    .tables
                    .iter()
                    .find(|t| &t.name == name)
                    .ok_or_else(|| SqlError::Plan(format!("no table `{name}`")))?;
                let leaf_schema = scan_schema(&plan).unwrap_or_else(|| Arc::clone(&schema));
                let projection: Vec<usize> = leaf_schema
                    .fields()
                    .iter()
                    .filter_map(|f| decl.column_index(f.name()))
                    .collect();
                // A query that reads no column (`count(*)`) still needs the
                // rows: the scan reads the first column and the leaf keeps
                // only their count.
                let projection = if projection.is_empty() {
                    vec![0]
                } else {
                    projection
                };
                Some(decl.stage_source(&projection, scan_prune(&plan)))
            }
            None => None,
        };
        let display = displayable(plan.as_ref()).indent(false).to_string();
        let bytes = encode_plan(Arc::clone(&plan))
            .map_err(|e| SqlError::Plan(format!("the stage plan cannot be encoded: {e}")))?;
        self.stages.push(PlannedStage {
            plan: StagePlan {
                plan: bytes,
                source,
                display,
            },
            parallelism,
            table: reads.table,
            inputs: reads.inputs,
            output_columns: schema.fields().iter().map(|f| f.name().clone()).collect(),
        });
        Ok(self.stages.len() - 1)
    }

    /// `plan` with its exchanges replaced by leaves (the stages below
    /// finished and recorded), within the current stage.
    fn rewrite(
        &mut self,
        plan: Arc<dyn ExecutionPlan>,
        reads: &mut Reads,
    ) -> Result<Arc<dyn ExecutionPlan>, SqlError> {
        if let Some(leaf) = plan.downcast_ref::<LeafExec>() {
            note_scan(plan.as_ref(), leaf, reads)?;
            return Ok(plan);
        }
        if let Some(rep) = plan.downcast_ref::<RepartitionExec>() {
            return self.rewrite_repartition(plan.as_ref(), rep, reads);
        }
        if let Some(coalesce) = plan.downcast_ref::<CoalescePartitionsExec>() {
            let fetch = coalesce.fetch();
            let leaf = self.exchange(
                Arc::clone(coalesce.input()),
                reads,
                DistributionPattern::Broadcast,
                Vec::new(),
                1,
                false,
            )?;
            return Ok(Arc::new(
                CoalescePartitionsExec::new(leaf).with_fetch(fetch),
            ));
        }
        if let Some(merge) = plan.downcast_ref::<SortPreservingMergeExec>() {
            let input = Arc::clone(merge.input());
            let producers = input.properties().output_partitioning().partition_count();
            let leaf = self.exchange(
                input,
                reads,
                DistributionPattern::Broadcast,
                Vec::new(),
                producers,
                true,
            )?;
            return Ok(Arc::new(
                SortPreservingMergeExec::new(merge.expr().clone(), leaf).with_fetch(merge.fetch()),
            ));
        }
        self.rewrite_operator(plan, reads)
    }

    /// A `RepartitionExec`: round robin is dropped (a task's rows stay in
    /// the task), a hash on columns ends the stage below; any other is
    /// undistributable.
    fn rewrite_repartition(
        &mut self,
        plan: &dyn ExecutionPlan,
        rep: &RepartitionExec,
        reads: &mut Reads,
    ) -> Result<Arc<dyn ExecutionPlan>, SqlError> {
        match rep.partitioning() {
            Partitioning::RoundRobinBatch(_) => self.rewrite(Arc::clone(rep.input()), reads),
            Partitioning::Hash(exprs, n) => {
                if rep.preserve_order() {
                    return Err(undistributable(
                        plan,
                        "an order-preserving hash repartition",
                    ));
                }
                let input = Arc::clone(rep.input());
                let key = hash_key(plan, exprs, &input.schema())?;
                self.exchange(input, reads, DistributionPattern::Hash, key, *n, false)
            }
            other => Err(undistributable(plan, format!("a repartition by {other}"))),
        }
    }

    /// Any other operator: each input rewritten in its own reads, then
    /// joined into this stage's ([`Self::join_inputs`]).
    fn rewrite_operator(
        &mut self,
        plan: Arc<dyn ExecutionPlan>,
        reads: &mut Reads,
    ) -> Result<Arc<dyn ExecutionPlan>, SqlError> {
        let plan = one_probe_task(&plan)?.unwrap_or(plan);
        let children: Vec<Arc<dyn ExecutionPlan>> = plan.children().into_iter().cloned().collect();
        if children.is_empty() {
            return Err(undistributable(
                plan.as_ref(),
                "a leaf that is not a declared table",
            ));
        }
        if plan.name() == "UnionExec" || plan.name() == "InterleaveExec" {
            return Err(undistributable(
                plan.as_ref(),
                "a union (its tasks would be the sum of its inputs' tasks)",
            ));
        }
        // Each input in its own reads first: a stage reads either one
        // table or other stages' output, so when inputs of a join mix the
        // two (or scan two tables), each scanning input becomes a stage of
        // its own, read here task by task (a forward edge).
        let mut rewritten = Vec::with_capacity(children.len());
        let mut subs = Vec::with_capacity(children.len());
        for c in children {
            let mut sub = Reads::default();
            rewritten.push(self.rewrite(c, &mut sub)?);
            subs.push(sub);
        }
        let new_children = self.join_inputs(rewritten, subs, reads)?;
        replace_children_if_necessary(Arc::clone(&plan), new_children)
            .map_err(|e| undistributable(plan.as_ref(), e.to_string()))
    }

    /// The inputs of an operator, each rewritten with what it reads
    /// (`subs`), as this stage's children: when they mix a table with other
    /// stages (or scan two tables), each scanning input is recorded as a
    /// stage of its own and read over a forward edge; the others' reads
    /// join `reads`.
    fn join_inputs(
        &mut self,
        rewritten: Vec<Arc<dyn ExecutionPlan>>,
        subs: Vec<Reads>,
        reads: &mut Reads,
    ) -> Result<Vec<Arc<dyn ExecutionPlan>>, SqlError> {
        let tables =
            subs.iter().filter(|r| r.table.is_some()).count() + usize::from(reads.table.is_some());
        let stages = subs.iter().filter(|r| !r.inputs.is_empty()).count()
            + usize::from(!reads.inputs.is_empty());
        let split_off = tables > 1 || (tables == 1 && stages > 0);
        let mut new_children = Vec::with_capacity(rewritten.len());
        for (child, sub) in rewritten.into_iter().zip(subs) {
            if split_off && sub.table.is_some() {
                let schema = child.schema();
                let partitions = child.properties().output_partitioning().partition_count();
                let from = self.record(child, sub)?;
                reads.inputs.push(StageInput {
                    from,
                    pattern: DistributionPattern::Forward,
                    key: Vec::new(),
                });
                new_children.push(Arc::new(LeafExec::new(
                    LeafKind::Exchange {
                        from,
                        per_producer: false,
                    },
                    schema,
                    partitions,
                    None,
                )) as Arc<dyn ExecutionPlan>);
                continue;
            }
            if let Some(t) = sub.table {
                reads.table = Some(t);
            }
            reads.inputs.extend(sub.inputs);
            new_children.push(child);
        }
        Ok(new_children)
    }

    /// Ends the stage of `input` and returns the leaf of the stage above
    /// that reads it over `pattern`: `partitions` partitions at planning
    /// time (the consumer's tasks, or the producers for `per_producer`).
    fn exchange(
        &mut self,
        input: Arc<dyn ExecutionPlan>,
        reads: &mut Reads,
        pattern: DistributionPattern,
        key: Vec<usize>,
        partitions: usize,
        per_producer: bool,
    ) -> Result<Arc<dyn ExecutionPlan>, SqlError> {
        let schema = input.schema();
        let from = self.finish_stage(input)?;
        reads.inputs.push(StageInput { from, pattern, key });
        Ok(Arc::new(LeafExec::new(
            LeafKind::Exchange { from, per_producer },
            schema,
            partitions,
            None,
        )))
    }
}

/// `plan` with its probe side merged into one partition, when `plan` is a
/// join whose build side is collected whole (a `CollectLeft` hash join, a
/// nested-loop join) and whose join type emits build rows at the end
/// (`Left`, `LeftAnti`, `LeftSemi`, `LeftMark`, `Full`): DataFusion
/// tracks which build rows matched across the probe partitions of one
/// process, so split over tasks each task would emit the build rows that
/// did not match *its* probe rows. One probe task keeps the answer right
/// (TPC-H Q16's `NOT IN` is such a join).
fn one_probe_task(
    plan: &Arc<dyn ExecutionPlan>,
) -> Result<Option<Arc<dyn ExecutionPlan>>, SqlError> {
    let (join_type, collected, left, right) = if let Some(j) = plan.downcast_ref::<HashJoinExec>() {
        (
            *j.join_type(),
            *j.partition_mode() == PartitionMode::CollectLeft,
            j.left(),
            j.right(),
        )
    } else if let Some(j) = plan.downcast_ref::<NestedLoopJoinExec>() {
        (*j.join_type(), true, j.left(), j.right())
    } else {
        return Ok(None);
    };
    let emits_build_rows = matches!(
        join_type,
        JoinType::Left
            | JoinType::LeftAnti
            | JoinType::LeftSemi
            | JoinType::LeftMark
            | JoinType::Full
    );
    if !collected
        || !emits_build_rows
        || right.properties().output_partitioning().partition_count() <= 1
    {
        return Ok(None);
    }
    let merged: Arc<dyn ExecutionPlan> = Arc::new(CoalescePartitionsExec::new(Arc::clone(right)));
    replace_children_if_necessary(Arc::clone(plan), vec![Arc::clone(left), merged])
        .map(Some)
        .map_err(|e| undistributable(plan.as_ref(), e.to_string()))
}

/// The schema of the scan leaf of a stage plan.
/// The pruning filters of the scan leaf of a stage's plan ([`LeafExec`]'s
/// `prune`), if it has any.
fn scan_prune(plan: &Arc<dyn ExecutionPlan>) -> Vec<Vec<u8>> {
    fn find(plan: &Arc<dyn ExecutionPlan>) -> Option<Vec<Vec<u8>>> {
        if let Some(leaf) = plan.downcast_ref::<LeafExec>()
            && matches!(leaf.kind, LeafKind::Scan { .. })
        {
            return Some(leaf.prune.clone());
        }
        plan.children().into_iter().find_map(find)
    }
    find(plan).unwrap_or_default()
}

fn scan_schema(plan: &Arc<dyn ExecutionPlan>) -> Option<SchemaRef> {
    if let Some(leaf) = plan.downcast_ref::<LeafExec>()
        && matches!(leaf.kind, LeafKind::Scan { .. })
    {
        return Some(plan.schema());
    }
    plan.children().into_iter().find_map(scan_schema)
}
