//! What one run of the JobMaster did, counted for progress lines and the
//! run's summary: records and bytes per subtask, attempts run and reset (by
//! reason), what recovery skipped, splits handed out and given back, the
//! coordinator's busy time. One concern kept apart from the loop, as
//! Ballista keeps its scheduler's metrics apart from its state.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use crate::graph::ExecutionGraph;
use crate::scheduler::{InputSummary, VertexSummary};

/// Figures of one subtask's finished attempt.
#[derive(Default, Clone)]
pub(super) struct Figures {
    pub(super) records_in: u64,
    pub(super) records_out: u64,
    pub(super) bytes_out: u64,
}

/// Input figures of one source vertex in this run (see [`InputSummary`]).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct InputFigures {
    pub(super) bytes_assigned: u64,
    pub(super) splits_kept: u64,
    pub(super) bytes_kept: u64,
    pub(super) splits_reread: u64,
    pub(super) bytes_reread: u64,
}

/// The run's figures.
pub(super) struct RunFigures {
    /// Per job vertex, per subtask.
    pub(super) per_subtask: Vec<Vec<Figures>>,
    /// Attempts deployed.
    pub(super) tasks_run: u64,
    /// Execution vertices reset (in-run and by recovery).
    pub(super) tasks_reset: u64,
    /// Time the loop spent deciding and carrying out (not waiting).
    pub(super) busy: Duration,
    /// Executions recovery skipped.
    pub(super) tasks_skipped: u64,
    /// Whether this run recovered from a log.
    pub(super) recovered: bool,
    /// Resets by reason (kebab-case kind), for the summary.
    pub(super) reset_reasons: BTreeMap<String, u64>,
    /// Per source vertex: splits handed to readers, splits given back.
    pub(super) split_counts: HashMap<usize, (u64, u64)>,
    /// Per source vertex: input kept by recovery, read again, handed out.
    pub(super) input_figures: HashMap<usize, InputFigures>,
    /// Per source vertex: when its enumerator was last asked how many
    /// splits it holds, the answer, and the splits handed out by then
    /// (progress display only).
    pub(super) input_left: HashMap<usize, (Instant, Option<u64>, u64)>,
    /// Subtasks recovery skipped, per vertex.
    pub(super) skipped_here: HashMap<usize, u64>,
}

impl RunFigures {
    /// Nothing counted yet, for a job of `vertices` job vertices.
    pub(super) fn new(vertices: usize) -> Self {
        Self {
            per_subtask: vec![Vec::new(); vertices],
            tasks_run: 0,
            tasks_reset: 0,
            busy: Duration::ZERO,
            tasks_skipped: 0,
            recovered: false,
            reset_reasons: BTreeMap::new(),
            split_counts: HashMap::new(),
            input_figures: HashMap::new(),
            input_left: HashMap::new(),
            skipped_here: HashMap::new(),
        }
    }

    /// The summary line of each job vertex of `graph`.
    pub(super) fn vertex_summaries(&self, graph: &ExecutionGraph) -> Vec<VertexSummary> {
        graph
            .job
            .vertices
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let f = &self.per_subtask[i];
                VertexSummary {
                    id: v.id.clone(),
                    parallelism: graph.vertices[i].executions.len() as u32,
                    records_in: f.iter().map(|x| x.records_in).sum(),
                    records_out: f.iter().map(|x| x.records_out).sum(),
                    bytes_out: f.iter().map(|x| x.bytes_out).sum(),
                    splits_assigned: self.split_counts.get(&i).map_or(0, |c| c.0),
                    splits_returned: self.split_counts.get(&i).map_or(0, |c| c.1),
                    input: v.source.as_ref().map(|_| {
                        let f = self.input_figures.get(&i).copied().unwrap_or_default();
                        InputSummary {
                            bytes_assigned: f.bytes_assigned,
                            splits_kept: f.splits_kept,
                            bytes_kept: f.bytes_kept,
                            splits_reread: f.splits_reread,
                            bytes_reread: f.bytes_reread,
                        }
                    }),
                    skipped: self.skipped_here.get(&i).copied().unwrap_or(0),
                }
            })
            .collect()
    }
}
