//! Job graphs that the core's unit tests share.

use std::time::Duration;

use coordhost_model::graph::{DistributionPattern, JobEdge, JobGraph, JobVertex, Parallelism};

/// A job vertex `id` of `parallelism` (at most 4 subtasks, 10 bytes a
/// task when `auto`), a source with split enumerator `splits` if `source`.
pub(crate) fn vertex(id: &str, parallelism: Parallelism, source: bool) -> JobVertex {
    JobVertex {
        id: id.to_owned(),
        parallelism,
        max_parallelism: 4,
        bytes_per_task: 10,
        max_task_bytes: None,
        source: source.then(|| "splits".to_owned()),
        operators: Vec::new(),
        sink: None,
        record_delay: Duration::ZERO,
        output_columns: Vec::new(),
    }
}

/// `source` (2 subtasks, a split enumerator) → hash → `sink` (`sink`).
pub(crate) fn source_to_sink(sink: Parallelism) -> JobGraph {
    JobGraph {
        vertices: vec![
            vertex("source", Parallelism::Fixed(2), true),
            vertex("sink", sink, false),
        ],
        edges: vec![JobEdge {
            from: 0,
            to: 1,
            pattern: DistributionPattern::Hash,
            key_names: Vec::new(),
            key: Vec::new(),
        }],
        order: vec![0, 1],
    }
}
