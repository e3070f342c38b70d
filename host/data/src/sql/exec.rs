//! coordhost's leaf nodes in DataFusion plans, their
//! `PhysicalExtensionCodec`, and running one task of a stage.
//!
//! A stage plan has one kind of leaf: [`LeafExec`] of kind
//! [`LeafKind::Scan`] (a source stage: the splits of a table) or
//! [`LeafKind::Exchange`] (the subpartitions of the producers). At planning
//! time a leaf has the partitions DataFusion planned; when a task decodes
//! its stage it has the partitions its task reads (1, or one per producer
//! for a merge) and draws its batches from the task's [`LeafInputs`].

use std::fmt;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
    ReplaceChildrenOptions, SendableRecordBatchStream,
};
use datafusion_proto::physical_plan::{PhysicalExtensionCodec, PhysicalProtoConverterExtension};
use futures::StreamExt;
use serde::{Deserialize, Serialize};

use super::udf::FunctionSet;
use datafusion::logical_expr::ScalarUDF;

/// What a leaf reads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum LeafKind {
    /// The splits of table `table` that the task pulls from the split
    /// enumerator (one partition per task).
    Scan {
        /// The table's name.
        table: String,
    },
    /// The subpartitions of stage `from`'s result partitions that this
    /// task reads: one partition over all of them, or (`per_producer`,
    /// the input of a `SortPreservingMergeExec`) one partition per
    /// producer.
    Exchange {
        /// Index of the producing stage (its job vertex index).
        from: usize,
        /// One DataFusion partition per producer partition.
        per_producer: bool,
    },
    /// The input of a job-file vertex's operator chain (`super::chain`):
    /// the batches its read operator gives, or its producers'
    /// subpartitions, in one partition. Built in the task that runs it,
    /// never encoded. (Last of the variants: encoded plans of earlier
    /// logs decode as they did.)
    Chain,
}

/// Batches of one leaf partition, pulled on the task's thread.
pub type BatchIter = Box<dyn Iterator<Item = DfResult<RecordBatch>> + Send>;

/// Where a running stage's leaves get their batches (implemented by
/// `runtime` for one task).
pub trait LeafInputs: Send + Sync + fmt::Debug {
    /// Number of partitions a leaf of `kind` has in this task.
    fn partitions(&self, kind: &LeafKind) -> usize;
    /// The batches of partition `partition` of a leaf of `kind`.
    ///
    /// # Errors
    ///
    /// A DataFusion error when the input cannot be opened.
    fn open(&self, kind: &LeafKind, partition: usize) -> DfResult<BatchIter>;
}

/// A coordhost leaf in a DataFusion plan.
pub struct LeafExec {
    pub(super) kind: LeafKind,
    schema: SchemaRef,
    props: Arc<PlanProperties>,
    inputs: Option<Arc<dyn LeafInputs>>,
    /// At planning time, for a scan of a table with partition columns:
    /// the filters DataFusion pushed down that read only partition
    /// columns (`datafusion-proto` logical expressions, columns
    /// unqualified). Not part of the leaf's encoding: the stage cut moves
    /// them to the stage's `StageSource::Partitioned`.
    pub(super) prune: Vec<Vec<u8>>,
}

impl fmt::Debug for LeafExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeafExec")
            .field("kind", &self.kind)
            .field("partitions", &self.partitions())
            .finish_non_exhaustive()
    }
}

impl LeafExec {
    /// A leaf of `partitions` partitions producing `schema`.
    pub(super) fn new(
        kind: LeafKind,
        schema: SchemaRef,
        partitions: usize,
        inputs: Option<Arc<dyn LeafInputs>>,
    ) -> Self {
        let props = PlanProperties::new(
            EquivalenceProperties::new(Arc::clone(&schema)),
            Partitioning::UnknownPartitioning(partitions),
            EmissionType::Incremental,
            Boundedness::Bounded,
        );
        Self {
            kind,
            schema,
            props: Arc::new(props),
            inputs,
            prune: Vec::new(),
        }
    }

    fn partitions(&self) -> usize {
        self.props.output_partitioning().partition_count()
    }
}

impl DisplayAs for LeafExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            LeafKind::Scan { table } => write!(f, "CoordhostScan: table={table}"),
            LeafKind::Chain => write!(f, "CoordhostInput"),
            LeafKind::Exchange { from, per_producer } => write!(
                f,
                "CoordhostExchange: stage={from}, partitions={}{}",
                self.partitions(),
                if *per_producer {
                    ", one per producer"
                } else {
                    ""
                }
            ),
        }
    }
}

impl ExecutionPlan for LeafExec {
    fn name(&self) -> &'static str {
        match self.kind {
            LeafKind::Scan { .. } => "CoordhostScan",
            LeafKind::Exchange { .. } => "CoordhostExchange",
            LeafKind::Chain => "CoordhostInput",
        }
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.props
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        Vec::new()
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DfResult<TreeNodeRecursion>,
    ) -> DfResult<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn replace_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn ExecutionPlan>>,
        _options: ReplaceChildrenOptions,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    fn with_new_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    fn execute(
        &self,
        partition: usize,
        _context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        let inputs = self.inputs.as_ref().ok_or_else(|| {
            DataFusionError::Internal("a planning-time leaf cannot run".to_string())
        })?;
        if partition >= self.partitions() {
            return Err(DataFusionError::Internal(format!(
                "{} has {} partitions, asked for {partition}",
                self.name(),
                self.partitions()
            )));
        }
        let iter = inputs.open(&self.kind, partition)?;
        // The inputs block (a split pulled from the coordinator, a
        // partition fetched from another worker, both over gRPC on a worker
        // process): they are drained on a thread of their own, outside the
        // stage's runtime, two batches ahead at most.
        let (tx, rx) = tokio::sync::mpsc::channel::<DfResult<RecordBatch>>(2);
        std::thread::Builder::new()
            .name(format!("coordhost-{}", self.name()))
            .spawn(move || {
                for item in iter {
                    if tx.blocking_send(item).is_err() {
                        break;
                    }
                }
            })
            .map_err(|e| DataFusionError::Execution(format!("cannot start a leaf reader: {e}")))?;
        let batches = futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|item| (item, rx))
        });
        let schema = Arc::clone(&self.schema);
        let stream = batches.map(move |b| {
            b.and_then(|b| {
                super::with_schema(&b, &schema)
                    .map_err(|e| DataFusionError::ArrowError(Box::new(e), None))
            })
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            Arc::clone(&self.schema),
            stream,
        )))
    }
}

/// What the codec writes for a leaf: postcard of this.
#[derive(Serialize, Deserialize)]
struct LeafBytes {
    kind: LeafKind,
    /// Partitions at planning time.
    partitions: u32,
    /// The schema as an Arrow IPC stream without batches.
    schema: Vec<u8>,
}

fn schema_bytes(schema: &SchemaRef) -> DfResult<Vec<u8>> {
    let mut out = Vec::new();
    let mut w = arrow_ipc::writer::StreamWriter::try_new(&mut out, schema)?;
    w.finish()?;
    drop(w);
    Ok(out)
}

fn schema_from_bytes(bytes: &[u8]) -> DfResult<SchemaRef> {
    let r = arrow_ipc::reader::StreamReader::try_new(std::io::Cursor::new(bytes), None)?;
    Ok(r.schema())
}

/// The `PhysicalExtensionCodec` of coordhost's leaves: with `inputs` (a
/// task), decoded leaves take their partitions and batches from it;
/// without (planning), they keep the planned partitions and cannot run.
#[derive(Debug, Default)]
pub(super) struct LeafCodec {
    pub(super) inputs: Option<Arc<dyn LeafInputs>>,
    /// The job's scalar functions: a decoded plan's calls of them by name
    /// are looked up here (`super::udf`).
    pub(super) functions: FunctionSet,
}

impl PhysicalExtensionCodec for LeafCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        _ctx: &TaskContext,
        _proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        if !inputs.is_empty() {
            return Err(DataFusionError::Internal(
                "a coordhost leaf has no inputs".to_string(),
            ));
        }
        let leaf: LeafBytes = postcard::from_bytes(buf)
            .map_err(|e| DataFusionError::Internal(format!("coordhost leaf: {e}")))?;
        let schema = schema_from_bytes(&leaf.schema)?;
        let partitions = match &self.inputs {
            Some(i) => i.partitions(&leaf.kind),
            None => leaf.partitions as usize,
        };
        Ok(Arc::new(LeafExec::new(
            leaf.kind,
            schema,
            partitions,
            self.inputs.clone(),
        )))
    }

    fn try_encode_udf(&self, node: &ScalarUDF, buf: &mut Vec<u8>) -> DfResult<()> {
        // A job function by its name (a non-empty definition sends the
        // decoder to `try_decode_udf`); DataFusion's own functions as
        // DataFusion writes them (empty: looked up in its registry).
        if super::udf::is_job_function(node) {
            buf.extend_from_slice(node.name().as_bytes());
        }
        Ok(())
    }

    fn try_decode_udf(&self, name: &str, _buf: &[u8]) -> DfResult<Arc<ScalarUDF>> {
        super::udf::decode(&self.functions, name)
    }

    fn try_encode(
        &self,
        node: Arc<dyn ExecutionPlan>,
        buf: &mut Vec<u8>,
        _proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> DfResult<()> {
        let leaf = node.downcast_ref::<LeafExec>().ok_or_else(|| {
            DataFusionError::NotImplemented(format!(
                "`{}` has no datafusion-proto form",
                node.name()
            ))
        })?;
        let bytes = LeafBytes {
            kind: leaf.kind.clone(),
            partitions: u32::try_from(leaf.partitions()).unwrap_or(u32::MAX),
            schema: schema_bytes(&leaf.schema)?,
        };
        buf.extend(
            postcard::to_stdvec(&bytes)
                .map_err(|e| DataFusionError::Internal(format!("coordhost leaf: {e}")))?,
        );
        Ok(())
    }
}

/// Encodes a stage plan as `datafusion-proto` bytes.
pub(super) fn encode_plan(plan: Arc<dyn ExecutionPlan>) -> DfResult<Vec<u8>> {
    let codec = LeafCodec::default();
    Ok(
        datafusion_proto::bytes::physical_plan_to_bytes_with_extension_codec(plan, &codec)?
            .to_vec(),
    )
}

/// Where a running stage's output goes.
pub trait StageOutput: Send {
    /// The schema of every batch to come (called once, before the first).
    fn schema(&mut self, schema: &SchemaRef);
    /// One output batch (at least one row); `false` stops the stage (the
    /// implementation keeps its error).
    fn batch(&mut self, batch: RecordBatch) -> bool;
}

/// Why a stage's task failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StageFailure {
    /// The [`StageOutput`] refused a batch (it keeps its own error).
    Output,
    /// A value of the input cannot be used (a cell that is not a number
    /// where an operator wants one): the same input fails the same way.
    /// The message names the file when the rows came from one.
    Invalid(String),
    /// Anything else: the plan does not decode or build, an input failed
    /// (the caller's [`LeafInputs`] keeps the original error), DataFusion
    /// failed while running it.
    Failed(String),
}

impl From<DataFusionError> for StageFailure {
    fn from(e: DataFusionError) -> Self {
        match super::cellfn::value_error(&e) {
            Some(v) if v.permanent => StageFailure::Invalid(v.detail),
            Some(v) => StageFailure::Failed(v.detail),
            None => StageFailure::Failed(e.to_string()),
        }
    }
}

/// Runs one task of a stage: decodes `plan` (`datafusion-proto` bytes)
/// with its leaves fed by `inputs` and its calls of job functions bound
/// to `functions`, executes its single output partition
/// and hands `out` its schema and then every batch it produces, in order.
///
/// Runs on a thread of its own with a one-thread Tokio runtime (the
/// caller may be inside another runtime); returns when the plan is done.
///
/// # Errors
///
/// [`StageFailure`]: the output failed, a value could not be used, or the
/// plan does not decode, does not have exactly one output partition, or
/// failed while running (an input's failure is DataFusion's error wrapping
/// it; the caller's [`LeafInputs`] keeps the original).
pub fn run_stage(
    plan: &[u8],
    inputs: Arc<dyn LeafInputs>,
    functions: FunctionSet,
    out: &mut dyn StageOutput,
) -> Result<(), StageFailure> {
    run_plan(
        move |task| {
            let codec = LeafCodec {
                inputs: Some(inputs),
                functions,
            };
            datafusion_proto::bytes::physical_plan_from_bytes_with_extension_codec(
                plan, task, &codec,
            )
            .map_err(|e| StageFailure::Failed(format!("the stage plan does not decode: {e}")))
        },
        out,
    )
}

/// Runs one task of a job-file vertex: its operator chain lowered onto a
/// DataFusion plan (`super::chain`) over a leaf of schema `schema` (built
/// by [`super::chain::leaf_schema`]) fed by `inputs`, its output handed to
/// `out` as [`run_stage`] does.
///
/// # Errors
///
/// As [`run_stage`]; [`StageFailure::Failed`] when the chain does not
/// lower onto the input (a column it does not have).
pub fn run_chain(
    operators: &[coordhost_model::graph::Operator],
    schema: SchemaRef,
    inputs: Arc<dyn LeafInputs>,
    out: &mut dyn StageOutput,
) -> Result<(), StageFailure> {
    run_plan(
        move |_task| {
            let leaf = Arc::new(LeafExec::new(LeafKind::Chain, schema, 1, Some(inputs)));
            super::chain::plan_chain(operators, leaf)
                .map_err(|e| StageFailure::Failed(format!("the operator chain: {e}")))
        },
        out,
    )
}

/// Builds a plan with `make` and runs its single output partition into
/// `out`, on a thread of its own with a one-thread Tokio runtime.
fn run_plan<F>(make: F, out: &mut dyn StageOutput) -> Result<(), StageFailure>
where
    F: FnOnce(&TaskContext) -> Result<Arc<dyn ExecutionPlan>, StageFailure> + Send,
{
    std::thread::scope(|s| {
        s.spawn(move || -> Result<(), StageFailure> {
            let rt = tokio::runtime::Builder::new_current_thread()
                .build()
                .map_err(|e| {
                    StageFailure::Failed(format!("cannot start the stage runtime: {e}"))
                })?;
            rt.block_on(async move {
                let ctx = datafusion::prelude::SessionContext::new();
                let task = ctx.task_ctx();
                let plan = make(task.as_ref())?;
                let parts = plan.properties().output_partitioning().partition_count();
                if parts != 1 {
                    return Err(StageFailure::Failed(format!(
                        "the stage plan has {parts} output partitions in a task, not 1"
                    )));
                }
                out.schema(&plan.schema());
                let mut stream = plan.execute(0, task)?;
                while let Some(batch) = stream.next().await {
                    let batch = batch?;
                    if batch.num_rows() > 0 && !out.batch(batch) {
                        return Err(StageFailure::Output);
                    }
                }
                Ok(())
            })
        })
        .join()
        .unwrap_or_else(|_| Err(StageFailure::Failed("the stage panicked".to_string())))
    })
}
