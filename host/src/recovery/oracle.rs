//! The partition oracle of a real run: the shuffle master plugin, asked
//! again and again until every needed partition is reported or the
//! previous-worker timeout passes (FLIP-383 step 6; the wait ends as soon as
//! everything needed is reported).

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use super::{PartitionOracle, PartitionRef};
use crate::graph::JobGraph;
use crate::plugin::{ExecutionAttemptId, ResultPartitionId, ShuffleMaster};

/// A partition id as a hashable key: data set, producer vertex, subtask, attempt.
type PartitionKey<'a> = (&'a str, &'a str, u32, u32);

fn key(id: &ResultPartitionId) -> PartitionKey<'_> {
    (
        &id.intermediate_data_set,
        &id.producer.job_vertex,
        id.producer.subtask,
        id.producer.attempt,
    )
}

/// Pause between two questions to the shuffle master while waiting.
const POLL: Duration = Duration::from_millis(20);

/// Asks a [`ShuffleMaster`] which partitions exist, waiting at most
/// `timeout` in all (counted from the first question) for missing ones.
pub struct ShuffleOracle<'a> {
    shuffle: &'a mut ShuffleMaster,
    job: &'a str,
    graph: &'a JobGraph,
    timeout: Duration,
    started: Option<Instant>,
}

impl<'a> ShuffleOracle<'a> {
    /// An oracle over `shuffle` for job `job`.
    pub fn new(
        shuffle: &'a mut ShuffleMaster,
        job: &'a str,
        graph: &'a JobGraph,
        timeout: Duration,
    ) -> Self {
        Self {
            shuffle,
            job,
            graph,
            timeout,
            started: None,
        }
    }

    fn id(&self, p: &PartitionRef) -> ResultPartitionId {
        ResultPartitionId {
            intermediate_data_set: self.graph.data_set_id(p.edge),
            producer: ExecutionAttemptId {
                job_vertex: self.graph.vertices[p.vertex].id.clone(),
                subtask: p.subtask,
                attempt: p.attempt,
            },
        }
    }
}

impl PartitionOracle for ShuffleOracle<'_> {
    fn available(&mut self, needed: &[PartitionRef]) -> Result<BTreeSet<PartitionRef>, String> {
        let started = *self.started.get_or_insert_with(Instant::now);
        let ids: Vec<ResultPartitionId> = needed.iter().map(|p| self.id(p)).collect();
        loop {
            let remaining = self.timeout.saturating_sub(started.elapsed());
            let remaining_ms = u64::try_from(remaining.as_millis()).unwrap_or(u64::MAX);
            let reported = self
                .shuffle
                .get_partitions_with_metrics(self.job, &ids, remaining_ms)
                .map_err(|e| e.to_string())?;
            // A report counts only for the exact attempt and location recorded:
            // reports of other attempts are never taken for this one.
            let reported: HashMap<PartitionKey<'_>, &str> = reported
                .iter()
                .map(|r| (key(&r.descriptor.id), r.descriptor.location.as_str()))
                .collect();
            let found: BTreeSet<PartitionRef> = needed
                .iter()
                .zip(&ids)
                .filter(|(p, id)| {
                    reported
                        .get(&key(id))
                        .is_some_and(|loc| std::path::Path::new(loc) == p.location)
                })
                .map(|(p, _)| p.clone())
                .collect();
            if found.len() == needed.len() || remaining.is_zero() {
                return Ok(found);
            }
            std::thread::sleep(POLL.min(remaining));
        }
    }
}
