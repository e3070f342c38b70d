//! The partition oracle of a real run: the shuffle master plugin, asked
//! again and again until every needed partition is reported or the
//! previous-worker timeout passes (docs/recovery.md step 6; the wait ends as
//! soon as everything needed is reported). Errors of the shuffle master
//! inside the wait are retried with backoff; a partition counts as
//! surviving only if it is reported with the recorded location and bytes.

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

#[cfg(doc)]
use super::PartitionOracle;
use super::PartitionRef;
use crate::graph::JobGraph;
use crate::plugin::{
    ExecutionAttemptId, PartitionWithMetrics, PluginError, ResultPartitionId, ShuffleMaster,
};

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
/// Longest pause between two questions after errors (the pause doubles
/// from [`POLL`] with every error in a row).
const MAX_BACKOFF: Duration = Duration::from_millis(500);

/// Asks a [`ShuffleMaster`] which partitions exist, waiting at most
/// `timeout` in all (counted from the first question) for missing ones.
/// It keeps the wait's state across rounds; the shuffle master is lent to
/// each question ([`ShuffleOracle::ask`]).
pub struct ShuffleOracle<'a> {
    job: &'a str,
    graph: &'a JobGraph,
    timeout: Duration,
    started: Option<Instant>,
    /// Partitions whose size mismatch was already reported (one line each).
    warned: BTreeSet<PartitionRef>,
}

impl<'a> ShuffleOracle<'a> {
    /// An oracle for job `job` of `graph`.
    pub fn new(job: &'a str, graph: &'a JobGraph, timeout: Duration) -> Self {
        Self {
            job,
            graph,
            timeout,
            started: None,
            warned: BTreeSet::new(),
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

impl ShuffleOracle<'_> {
    /// One round of [`PartitionOracle::available`], asking `shuffle`.
    ///
    /// # Errors
    /// None today: an error of the shuffle master inside the wait is asked
    /// again, and what is still unreported when the wait ends counts as
    /// missing.
    pub fn ask(
        &mut self,
        shuffle: &mut ShuffleMaster,
        needed: &[PartitionRef],
    ) -> Result<BTreeSet<PartitionRef>, PluginError> {
        let started = *self.started.get_or_insert_with(Instant::now);
        // Partitions without a final answer yet: neither found nor reported
        // with another location or size (a report of a changed partition is
        // final, waiting longer cannot make it whole).
        let mut pending: Vec<(PartitionRef, ResultPartitionId)> =
            needed.iter().map(|p| (p.clone(), self.id(p))).collect();
        let mut found: BTreeSet<PartitionRef> = BTreeSet::new();
        let mut pause = POLL;
        let mut failures: u32 = 0;
        loop {
            let remaining = self.timeout.saturating_sub(started.elapsed());
            let remaining_ms = u64::try_from(remaining.as_millis()).unwrap_or(u64::MAX);
            let ids: Vec<ResultPartitionId> = pending.iter().map(|(_, id)| id.clone()).collect();
            match shuffle.get_partitions_with_metrics(self.job, &ids, remaining_ms) {
                Ok(reported) => {
                    pause = POLL;
                    let reported: HashMap<PartitionKey<'_>, &PartitionWithMetrics> = reported
                        .iter()
                        .map(|r| (key(&r.descriptor.id), r))
                        .collect();
                    let mut still = Vec::with_capacity(pending.len());
                    for (p, id) in pending {
                        match reported.get(&key(&id)) {
                            None => still.push((p, id)),
                            Some(r) => {
                                if self.survives(&p, r) {
                                    found.insert(p);
                                }
                            }
                        }
                    }
                    pending = still;
                }
                // docs/recovery.md, "What is retried": an error inside the
                // wait is asked again with backoff until the wait ends; only
                // what is still unreported then counts as missing.
                Err(e) => {
                    failures += 1;
                    if failures == 1 {
                        tracing::warn!(
                            "the shuffle master could not say which partitions exist ({e}); asking again for up to {remaining_ms} ms"
                        );
                    }
                    pause = (pause * 2).min(MAX_BACKOFF);
                }
            }
            if pending.is_empty() || remaining.is_zero() {
                if failures > 0 {
                    tracing::info!(
                        failures,
                        found = found.len(),
                        needed = needed.len(),
                        "partition reports after retries"
                    );
                }
                return Ok(found);
            }
            std::thread::sleep(pause.min(remaining));
        }
    }
}

impl ShuffleOracle<'_> {
    /// Whether a report shows the partition as it was recorded: the exact
    /// attempt and location (reports of other attempts are never taken for
    /// this one) and the recorded bytes of every subpartition (a partition
    /// whose size changed is damaged and counts as missing, docs/recovery.md
    /// "What counts as a surviving partition"). A plugin's report is input
    /// from a stranger: a wrong count of subpartitions is a mismatch too.
    fn survives(&mut self, p: &PartitionRef, r: &PartitionWithMetrics) -> bool {
        if std::path::Path::new(&r.descriptor.location) != p.location {
            return false;
        }
        if r.bytes_per_subpartition == p.bytes_per_subpartition {
            return true;
        }
        if self.warned.insert(p.clone()) {
            tracing::warn!(
                "partition at {} of {} subtask {} attempt {}: the shuffle master reports {:?} bytes per subpartition, the log recorded {:?}; it counts as missing and its producer runs again",
                p.location.display(),
                self.graph.vertices[p.vertex].id,
                p.subtask,
                p.attempt,
                r.bytes_per_subpartition,
                p.bytes_per_subpartition
            );
        }
        false
    }
}
