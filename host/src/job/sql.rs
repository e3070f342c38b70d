//! SQL jobs in the driver (docs/sql.md, "What recovery records"): the
//! stage plans are written to the log when the job starts
//! ([`stages_planned`]), and a rerun of the same SQL runs the recorded
//! stages ([`adopt_recorded_stages`]) instead of the plan it made while
//! checking the job file, so a skipped stage's output keeps its meaning.

use super::recorder::sql_fingerprint;
use crate::config::JobConfig;
use crate::events::{JobEvent, PlannedStage, StageAuto, StageEdge, StagePattern, StagesPlanned};
use crate::graph::{
    DistributionPattern, JobEdge, JobGraph, JobVertex, Operator, Parallelism, StagePlan,
};
use crate::scheduler::JobError;

/// The `StagesPlanned` event of a SQL job's graph, `None` for a TOML-graph
/// job.
///
/// # Errors
///
/// [`JobError::Io`] naming the job file if a stage cannot be encoded (it
/// cannot happen short of running out of memory).
pub(super) fn stages_planned(config: &JobConfig) -> Result<Option<JobEvent>, JobError> {
    let Some(sql) = &config.sql else {
        return Ok(None);
    };
    let graph = &config.graph;
    let mut stages = Vec::with_capacity(graph.vertices.len());
    for (i, v) in graph.vertices.iter().enumerate() {
        let Some(Operator::Stage(plan)) = v.operators.first() else {
            return Ok(None);
        };
        let (parallelism, auto) = match v.parallelism {
            Parallelism::Fixed(n) => (n, None),
            // The planner's partition count stays as a figure; the record
            // says the stage is `auto` and how it decides.
            Parallelism::Auto => (
                v.max_parallelism,
                Some(StageAuto {
                    max_parallelism: v.max_parallelism,
                    bytes_per_task: v.bytes_per_task,
                }),
            ),
        };
        let stage = postcard::to_stdvec(plan).map_err(|e| JobError::Io {
            path: config.file.clone(),
            source: std::io::Error::other(e.to_string()),
        })?;
        let inputs = graph
            .inputs(i)
            .into_iter()
            .map(|e| {
                let edge = &graph.edges[e];
                StageEdge {
                    from: edge.from as u32,
                    pattern: match edge.pattern {
                        DistributionPattern::Forward => StagePattern::Forward,
                        DistributionPattern::Hash => StagePattern::Hash,
                        DistributionPattern::Broadcast => StagePattern::Broadcast,
                    },
                    key: edge.key.iter().map(|&k| k as u32).collect(),
                }
            })
            .collect();
        stages.push(PlannedStage {
            job_vertex: v.id.clone(),
            parallelism,
            source: v.source.clone(),
            stage,
            output_columns: v.output_columns.clone(),
            inputs,
            auto,
        });
    }
    Ok(Some(JobEvent::StagesPlanned(StagesPlanned {
        sql_fingerprint: sql_fingerprint(sql),
        stages,
    })))
}

/// For a SQL job whose log's current run recorded stages planned from the
/// same SQL text and tables: replaces the job graph with those stages (the
/// sink stays the job file's). Returns whether it did. A log that cannot
/// be read, or holds no such record, leaves the graph as planned.
pub(super) fn adopt_recorded_stages(
    config: &mut JobConfig,
    log: &super::log_place::LogPlace,
) -> bool {
    let Some(sql) = &config.sql else {
        return false;
    };
    let Some(Ok(replay)) = log.replay_existing() else {
        return false;
    };
    let run = crate::recovery::current_run(&replay.events);
    let wanted = sql_fingerprint(sql);
    let Some(recorded) = run.iter().find_map(|e| match &e.event {
        JobEvent::StagesPlanned(s) if s.sql_fingerprint == wanted => Some(s),
        _ => None,
    }) else {
        return false;
    };
    match graph_of(recorded, &config.graph) {
        Some(graph) => {
            tracing::info!(
                "SQL job: running the {} stages recorded in the log, not a new plan",
                graph.vertices.len()
            );
            config.graph = graph;
            true
        }
        None => {
            tracing::warn!(
                "SQL job: the stages recorded in the log do not decode; the job file's plan is used"
            );
            false
        }
    }
}

/// The job graph of `recorded`, with the sink of `planned`'s last vertex.
fn graph_of(recorded: &StagesPlanned, planned: &JobGraph) -> Option<JobGraph> {
    let sink = planned.vertices.last()?.sink.clone()?;
    let n = recorded.stages.len();
    let mut vertices = Vec::with_capacity(n);
    let mut edges = Vec::new();
    for (i, s) in recorded.stages.iter().enumerate() {
        let plan: StagePlan = postcard::from_bytes(&s.stage).ok()?;
        for input in &s.inputs {
            let from = input.from as usize;
            let key = &input.key;
            let names: &Vec<String> = &recorded.stages.get(from)?.output_columns;
            if from >= i {
                return None;
            }
            let key: Vec<usize> = key.iter().map(|&k| k as usize).collect();
            edges.push(JobEdge {
                from,
                to: i,
                pattern: match input.pattern {
                    StagePattern::Forward => DistributionPattern::Forward,
                    StagePattern::Hash => DistributionPattern::Hash,
                    StagePattern::Broadcast => DistributionPattern::Broadcast,
                },
                key_names: key
                    .iter()
                    .map(|&k| names.get(k).cloned())
                    .collect::<Option<_>>()?,
                key,
            });
        }
        let template = planned.vertices.first()?;
        let (parallelism, max_parallelism, bytes_per_task) = match s.auto {
            // Recorded `auto`: decided at run time (a recovery replays the
            // recorded decision), with the recorded bounds.
            Some(a) => (
                Parallelism::Auto,
                a.max_parallelism.max(1),
                a.bytes_per_task.max(1),
            ),
            None => (
                Parallelism::Fixed(s.parallelism.max(1)),
                template.max_parallelism,
                template.bytes_per_task,
            ),
        };
        vertices.push(JobVertex {
            id: s.job_vertex.clone(),
            parallelism,
            max_parallelism,
            bytes_per_task,
            // Tuning, not layout: the job file's value for the same stage
            // (the same SQL fingerprint means the same tables).
            max_task_bytes: planned
                .vertices
                .get(i)
                .filter(|p| p.id == s.job_vertex)
                .and_then(|p| p.max_task_bytes),
            source: s.source.clone(),
            operators: vec![Operator::Stage(plan)],
            sink: (i + 1 == n).then(|| crate::graph::SinkSpec {
                columns: s.output_columns.clone(),
                ..sink.clone()
            }),
            // The sink's `record-delay-us` slows the last stage only.
            record_delay: if i + 1 == n {
                planned.vertices.last()?.record_delay
            } else {
                std::time::Duration::ZERO
            },
            output_columns: s.output_columns.clone(),
        });
    }
    Some(JobGraph {
        vertices,
        edges,
        order: (0..n).collect(),
    })
}
