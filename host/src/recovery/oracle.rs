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

/// For each partition of `asked`, the index in `reported` of its report
/// (the last, if a plugin reports one twice, as a map from the reports
/// would have it), or `None`. A shuffle master reports in the order asked,
/// leaving out what it does not know, so the two lists are walked side by
/// side, comparing ids, with no key built or hashed (issue 29). Reports
/// out of that order (a plugin is a stranger) are found through a map.
fn match_reports(
    asked: &[ResultPartitionId],
    reported: &[PartitionWithMetrics],
) -> Vec<Option<usize>> {
    /// How far ahead of the walk a report is looked for (the partitions
    /// left out in between are the ones not reported).
    const AHEAD: usize = 256;
    let mut answer: Vec<Option<usize>> = vec![None; asked.len()];
    let mut next = 0;
    let mut rest = Vec::new();
    for (r, report) in reported.iter().enumerate() {
        let id = &report.descriptor.id;
        let ahead = if rest.len() < AHEAD {
            asked[next..].iter().take(AHEAD).position(|a| a == id)
        } else {
            None
        };
        match ahead {
            Some(ahead) => {
                answer[next + ahead] = Some(r);
                next += ahead + 1;
            }
            None => rest.push(r),
        }
    }
    if !rest.is_empty() {
        let slots: HashMap<PartitionKey<'_>, usize> = asked
            .iter()
            .enumerate()
            .rev()
            .map(|(i, a)| (key(a), i))
            .collect();
        for r in rest {
            if let Some(&at) = slots.get(&key(&reported[r].descriptor.id)) {
                answer[at] = answer[at].max(Some(r));
            }
        }
    }
    answer
}

/// Partitions asked about in one `get-partitions-with-metrics` call at most
/// (issue 29). The lists of one call (the ids asked, the descriptors
/// reported, and inside the plugin whatever it builds per partition: paths,
/// keys, the index bytes it reads) are held at once; a plugin's linear
/// memory never shrinks, and one call for a million partitions needed more
/// than the default 256 MiB and 5 s call deadline of a plugin. In chunks
/// both stay bounded whatever the job's size; a chunk's answer is matched
/// and dropped before the next is asked.
pub const QUESTION_CHUNK: usize = 65_536;

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
    /// Partitions asked about in one call at most ([`QUESTION_CHUNK`]).
    chunk: usize,
    /// `get-partitions-with-metrics` calls made, over every round.
    calls: usize,
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
            chunk: question_chunk(),
            calls: 0,
        }
    }

    /// The shuffle master's `get-partitions-with-metrics` calls so far.
    pub fn calls(&self) -> usize {
        self.calls
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
    /// One round of [`PartitionOracle::available`], asking `shuffle`:
    /// whether each of `needed` survives, in order.
    ///
    /// # Errors
    /// None today: an error of the shuffle master inside the wait is asked
    /// again, and what is still unreported when the wait ends counts as
    /// missing.
    pub fn ask(
        &mut self,
        shuffle: &mut ShuffleMaster,
        needed: &[PartitionRef],
    ) -> Result<Vec<bool>, PluginError> {
        let started = *self.started.get_or_insert_with(Instant::now);
        // Partitions without a final answer yet, as indices into `needed`
        // (neither found nor reported with another location or size: a
        // report of a changed partition is final, waiting longer cannot
        // make it whole).
        let mut pending: Vec<usize> = (0..needed.len()).collect();
        let mut found = vec![false; needed.len()];
        let mut pause = POLL;
        let mut failures: u32 = 0;
        loop {
            let mut still = Vec::new();
            let mut failed = false;
            // One call per chunk of what is pending, its ids made for the
            // call and dropped after it.
            for chunk in pending.chunks(self.chunk.max(1)) {
                let remaining = self.timeout.saturating_sub(started.elapsed());
                let remaining_ms = u64::try_from(remaining.as_millis()).unwrap_or(u64::MAX);
                let asked: Vec<ResultPartitionId> =
                    chunk.iter().map(|&i| self.id(&needed[i])).collect();
                self.calls += 1;
                match shuffle.get_partitions_with_metrics(self.job, &asked, remaining_ms) {
                    Ok(reported) => {
                        let answered = match_reports(&asked, &reported);
                        for (slot, &i) in chunk.iter().enumerate() {
                            match answered[slot] {
                                None => still.push(i),
                                Some(r) => {
                                    found[i] = self.survives(&needed[i], &reported[r]);
                                }
                            }
                        }
                    }
                    // docs/recovery.md, "What is retried": an error inside
                    // the wait is asked again with backoff until the wait
                    // ends; only what is still unreported then counts as
                    // missing.
                    Err(e) => {
                        failures += 1;
                        failed = true;
                        if failures == 1 {
                            tracing::warn!(
                                "the shuffle master could not say which partitions exist ({e}); asking again for up to {remaining_ms} ms"
                            );
                        }
                        still.extend_from_slice(chunk);
                    }
                }
            }
            pending = still;
            pause = if failed {
                (pause * 2).min(MAX_BACKOFF)
            } else {
                POLL
            };
            let remaining = self.timeout.saturating_sub(started.elapsed());
            if pending.is_empty() || remaining.is_zero() {
                if failures > 0 {
                    tracing::info!(
                        failures,
                        found = found.iter().filter(|&&f| f).count(),
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

/// [`QUESTION_CHUNK`], or with the `failpoints` feature the fail point
/// `recovery::question-chunk`'s count (a test asks in chunks of two).
fn question_chunk() -> usize {
    #[cfg(feature = "failpoints")]
    if let Some(n) = crate::failpoints::question_chunk() {
        return n;
    }
    QUESTION_CHUNK
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
