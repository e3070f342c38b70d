//! The durable job events: past-tense facts that the scheduler and recovery
//! record, each with a stable kind id and a schema version.
//!
//! These are their own types, separate from the scheduler's in-memory
//! messages (as Ballista's `history/src/event.rs` keeps them), so the log
//! format does not move when the scheduler does. Payloads are encoded with
//! `postcard`, which writes struct fields in declaration order without
//! names: adding, removing or reordering a field, or adding an enum variant,
//! is a new schema version of that kind (see `docs/log-format.md`).

use serde::{Deserialize, Serialize};

use super::format::{kind, schema};

/// `Vec<u8>` fields (split bytes, plugin states, stage plans) as serde
/// bytes. postcard writes a byte string and a sequence of `u8` the same way
/// (a varint length, then the bytes), so the log's format does not change;
/// decoding copies each field's bytes at once instead of pushing them one
/// element at a time through the sequence visitor (issue 29: replay
/// decoded at a twentieth of a raw read).
mod bytes_field {
    use serde::de::{SeqAccess, Visitor};
    use serde::{Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(bytes)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        d.deserialize_byte_buf(Bytes)
    }

    struct Bytes;

    impl<'de> Visitor<'de> for Bytes {
        type Value = Vec<u8>;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("bytes")
        }

        fn visit_bytes<E>(self, v: &[u8]) -> Result<Vec<u8>, E> {
            Ok(v.to_vec())
        }

        fn visit_byte_buf<E>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
            Ok(v)
        }

        // Formats that write bytes as a list of numbers (JSON).
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u8>, A::Error> {
            let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1 << 20));
            while let Some(b) = seq.next_element()? {
                out.push(b);
            }
            Ok(out)
        }
    }
}

/// An execution vertex: one parallel subtask of a job vertex.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ExecutionVertexId {
    /// The job vertex id, as in the job file.
    pub job_vertex: String,
    /// Subtask index, from 0.
    pub subtask: u32,
}

/// An execution attempt: one try of an execution vertex.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct AttemptId {
    /// The job vertex id.
    pub job_vertex: String,
    /// Subtask index, from 0.
    pub subtask: u32,
    /// Attempt number of this execution vertex, from 0.
    pub attempt: u32,
}

impl AttemptId {
    /// The execution vertex this attempt belongs to.
    #[must_use]
    pub fn execution_vertex(&self) -> ExecutionVertexId {
        ExecutionVertexId {
            job_vertex: self.job_vertex.clone(),
            subtask: self.subtask,
        }
    }
}

/// The first record of a job's log: what a later run compares its job with,
/// so that an edited job file is refused instead of recovered.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobStarted {
    /// The job id (also the name of the job's data directory).
    pub job_id: String,
    /// Lowercase hex SHA-256 of the job graph as configured.
    pub graph_fingerprint: String,
    /// Whether the job was started with recovery enabled.
    pub recovery_enabled: bool,
}

/// What one consumer subtask reads from one input edge: result partitions
/// `[partition_start, partition_end)` of the producer's intermediate data
/// set and, of each, subpartitions `[subpartition_start, subpartition_end)`
/// (Flink's `ExecutionVertexInputInfo`, with half-open ranges).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubtaskInputRange {
    /// The intermediate data set read (one per input edge).
    pub data_set: String,
    /// First result partition read (producer subtask index).
    pub partition_start: u32,
    /// One past the last result partition read.
    pub partition_end: u32,
    /// First subpartition read from each of those partitions.
    pub subpartition_start: u32,
    /// One past the last subpartition read.
    pub subpartition_end: u32,
}

/// A job vertex got its parallelism and input ranges (FLIP-383's
/// "ExecutionJobVertexInitializedEvent"). Written when the parallelism is
/// decided; replayed on recovery, never recomputed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobVertexInitialized {
    /// The job vertex id.
    pub job_vertex: String,
    /// Number of subtasks.
    pub parallelism: u32,
    /// Indexed by subtask (`parallelism` entries): one range per input edge.
    /// Empty for a source.
    pub subtask_inputs: Vec<Vec<SubtaskInputRange>>,
    /// True if the parallelism was decided at run time from produced bytes.
    pub decided_at_runtime: bool,
}

/// One result partition produced by a finished execution attempt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProducedPartition {
    /// The intermediate data set the partition belongs to (one per out-edge).
    pub data_set: String,
    /// Where the partition lives, as the shuffle descriptor names it.
    pub location: String,
    /// Bytes in each subpartition, indexed by subpartition (consumer subtask).
    pub bytes_per_subpartition: Vec<u64>,
}

/// One split handed to a source subtask, kept whole so that a restored
/// source coordinator can give it back to its enumerator.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EncodedSplit {
    /// The split id.
    pub id: String,
    /// The split as the enumerator encoded it (opaque to the host).
    #[serde(with = "bytes_field")]
    pub bytes: Vec<u8>,
}

/// The splits assigned to one source subtask so far, in assignment order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SplitAssignment {
    /// The source subtask index.
    pub subtask: u32,
    /// Splits assigned to it.
    pub splits: Vec<EncodedSplit>,
}

/// A batch snapshot of one source coordinator: the enumerator's state plus
/// the host's per-subtask split-assignment history (FLIP-383, "source
/// coordinator snapshot").
///
/// The history is recorded incrementally (issue 17, fix 6): a snapshot with
/// [`incremental`](Self::incremental) set holds only the splits assigned
/// since the previous snapshot of its job vertex in the log, and replay
/// folds them onto it ([`EnumeratorSnapshot::fold`]), so the log grows with
/// the splits, not with snapshots × splits. Whole histories are written
/// when no earlier one can be extended (the first snapshot of a
/// coordinator run, or after a subtask's splits went back to the
/// enumerator), and by binaries before schema version 3.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnumeratorSnapshot {
    /// The source job vertex whose coordinator this is.
    pub job_vertex: String,
    /// Checkpoint id passed to `snapshot-state`; `-1` for batch snapshots.
    pub checkpoint_id: i64,
    /// The enumerator's own state bytes.
    #[serde(with = "bytes_field")]
    pub state: Vec<u8>,
    /// Assignment history, one entry per subtask that received splits.
    pub assignments: Vec<SplitAssignment>,
    /// Subtasks that were told there are no more splits.
    pub no_more_splits: Vec<u32>,
    /// Set when the state is larger than
    /// [`INLINE_SNAPSHOT_MAX`](super::format::INLINE_SNAPSHOT_MAX): the
    /// state bytes are in this side file of the log directory and `state`
    /// is empty as recorded. Recovery fills `state` from the file, verified,
    /// with [`load_snapshot_files`](super::load_snapshot_files) (schema
    /// version 2 of `ExecutionFinished`; see `docs/log-format.md`).
    pub state_file: Option<SnapshotFile>,
    /// True when `assignments` holds only the splits assigned since the
    /// previous enumerator snapshot of this job vertex in the log, to be
    /// appended per subtask to the history that one gives; false when it is
    /// the whole history (schema version 3 of `ExecutionFinished`; see
    /// `docs/log-format.md`, "Incremental split-assignment history").
    pub incremental: bool,
}

impl EnumeratorSnapshot {
    /// The snapshot to record for this one (a whole history) when the
    /// previous recorded snapshot of its job vertex had the whole history
    /// `previous`: only the splits assigned since, if every subtask's
    /// history in `previous` is a prefix of its history here; else the
    /// whole history again (a subtask's splits went back to the
    /// enumerator). `None` for `previous` (nothing recorded yet) also gives
    /// the whole history.
    #[must_use]
    pub fn since(&self, previous: Option<&[SplitAssignment]>) -> Self {
        let whole = || Self {
            incremental: false,
            ..self.clone()
        };
        let Some(previous) = previous else {
            return whole();
        };
        // Each side looked up by subtask once (the first entry of a
        // subtask counts, as a scan would find it): linear in the history,
        // not quadratic (issue 29: a source of 4096 subtasks recorded this
        // at every finish).
        let first_by_subtask = |list: &[SplitAssignment]| {
            let mut at: std::collections::HashMap<u32, usize> =
                std::collections::HashMap::with_capacity(list.len());
            for (i, a) in list.iter().enumerate() {
                at.entry(a.subtask).or_insert(i);
            }
            at
        };
        let here = first_by_subtask(&self.assignments);
        let mut delta = Vec::new();
        for before in previous {
            let now = here
                .get(&before.subtask)
                .map_or(&[][..], |&i| &self.assignments[i].splits[..]);
            if !now.starts_with(&before.splits) {
                return whole();
            }
        }
        let there = first_by_subtask(previous);
        for now in &self.assignments {
            let known = there
                .get(&now.subtask)
                .map_or(0, |&i| previous[i].splits.len());
            if now.splits.len() > known {
                delta.push(SplitAssignment {
                    subtask: now.subtask,
                    splits: now.splits[known..].to_vec(),
                });
            }
        }
        Self {
            job_vertex: self.job_vertex.clone(),
            checkpoint_id: self.checkpoint_id,
            state: self.state.clone(),
            assignments: delta,
            no_more_splits: self.no_more_splits.clone(),
            state_file: self.state_file.clone(),
            incremental: true,
        }
    }

    /// Replay's fold: `newer`, the next recorded snapshot of this
    /// snapshot's job vertex, applied to this one (a whole history). An
    /// incremental `newer` appends its splits per subtask to this history
    /// and takes everything else from `newer`; a whole one replaces it.
    /// The result is a whole history (`incremental` false).
    pub fn fold(&mut self, newer: EnumeratorSnapshot) {
        if !newer.incremental {
            *self = newer;
            return;
        }
        let mut assignments = std::mem::take(&mut self.assignments);
        for add in newer.assignments {
            match assignments.iter_mut().find(|a| a.subtask == add.subtask) {
                Some(a) => a.splits.extend(add.splits),
                None => assignments.push(add),
            }
        }
        *self = EnumeratorSnapshot {
            assignments,
            incremental: false,
            ..newer
        };
    }
}

/// A batch snapshot's state kept in a side file of the log directory
/// instead of inside its record (`docs/log-format.md`, "Snapshot side
/// files"). The file holds exactly the state bytes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotFile {
    /// File name inside the log directory:
    /// `snapshot-<coordinator attempt:08>-<number:08>.state`.
    pub file: String,
    /// Length of the state in bytes (the file's exact size).
    pub len: u64,
    /// CRC32C (Castagnoli) of the state bytes.
    pub crc32c: u32,
}

/// Schema version 2 of [`EnumeratorSnapshot`] (and of `ExecutionFinished`):
/// whole histories only.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct EnumeratorSnapshotV2 {
    job_vertex: String,
    checkpoint_id: i64,
    #[serde(with = "bytes_field")]
    state: Vec<u8>,
    assignments: Vec<SplitAssignment>,
    no_more_splits: Vec<u32>,
    state_file: Option<SnapshotFile>,
}

/// Schema version 2 of [`ExecutionFinished`]: snapshot side files, whole
/// histories. Still written when no snapshot is incremental.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct ExecutionFinishedV2 {
    attempt: AttemptId,
    coordinator_epoch: u32,
    produced: Vec<ProducedPartition>,
    enumerator_snapshots: Vec<EnumeratorSnapshotV2>,
    shuffle_snapshot: Option<ShuffleSnapshot>,
}

impl From<ExecutionFinishedV2> for ExecutionFinished {
    fn from(v2: ExecutionFinishedV2) -> Self {
        Self {
            attempt: v2.attempt,
            coordinator_epoch: v2.coordinator_epoch,
            produced: v2.produced,
            enumerator_snapshots: v2
                .enumerator_snapshots
                .into_iter()
                .map(|s| EnumeratorSnapshot {
                    job_vertex: s.job_vertex,
                    checkpoint_id: s.checkpoint_id,
                    state: s.state,
                    assignments: s.assignments,
                    no_more_splits: s.no_more_splits,
                    state_file: s.state_file,
                    incremental: false,
                })
                .collect(),
            shuffle_snapshot: v2.shuffle_snapshot,
        }
    }
}

/// Schema version 1 of [`EnumeratorSnapshot`]: the state always inline.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct EnumeratorSnapshotV1 {
    job_vertex: String,
    checkpoint_id: i64,
    #[serde(with = "bytes_field")]
    state: Vec<u8>,
    assignments: Vec<SplitAssignment>,
    no_more_splits: Vec<u32>,
}

/// Schema version 1 of [`ExecutionFinished`]: no snapshot side files.
/// Still written when every state is inline, so that such logs stay
/// readable by binaries that know only version 1.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct ExecutionFinishedV1 {
    attempt: AttemptId,
    coordinator_epoch: u32,
    produced: Vec<ProducedPartition>,
    enumerator_snapshots: Vec<EnumeratorSnapshotV1>,
    shuffle_snapshot: Option<ShuffleSnapshot>,
}

impl From<ExecutionFinishedV1> for ExecutionFinished {
    fn from(v1: ExecutionFinishedV1) -> Self {
        Self {
            attempt: v1.attempt,
            coordinator_epoch: v1.coordinator_epoch,
            produced: v1.produced,
            enumerator_snapshots: v1
                .enumerator_snapshots
                .into_iter()
                .map(|s| EnumeratorSnapshot {
                    job_vertex: s.job_vertex,
                    checkpoint_id: s.checkpoint_id,
                    state: s.state,
                    assignments: s.assignments,
                    no_more_splits: s.no_more_splits,
                    state_file: None,
                    incremental: false,
                })
                .collect(),
            shuffle_snapshot: v1.shuffle_snapshot,
        }
    }
}

impl ExecutionFinished {
    /// True if a state lives in a side file (schema version 2 is needed).
    fn uses_side_files(&self) -> bool {
        self.enumerator_snapshots
            .iter()
            .any(|s| s.state_file.is_some())
    }

    /// True if a snapshot's history is incremental (schema version 3 is
    /// needed).
    fn uses_incremental_history(&self) -> bool {
        self.enumerator_snapshots.iter().any(|s| s.incremental)
    }

    /// The oldest schema version that can hold this event: 1 without side
    /// files or incremental histories, 2 with side files, 3 with an
    /// incremental history (readable by the older binaries when it can).
    fn version(&self) -> u16 {
        if self.uses_incremental_history() {
            3
        } else if self.uses_side_files() {
            2
        } else {
            1
        }
    }

    fn to_v2(&self) -> ExecutionFinishedV2 {
        ExecutionFinishedV2 {
            attempt: self.attempt.clone(),
            coordinator_epoch: self.coordinator_epoch,
            produced: self.produced.clone(),
            enumerator_snapshots: self
                .enumerator_snapshots
                .iter()
                .map(|s| EnumeratorSnapshotV2 {
                    job_vertex: s.job_vertex.clone(),
                    checkpoint_id: s.checkpoint_id,
                    state: s.state.clone(),
                    assignments: s.assignments.clone(),
                    no_more_splits: s.no_more_splits.clone(),
                    state_file: s.state_file.clone(),
                })
                .collect(),
            shuffle_snapshot: self.shuffle_snapshot.clone(),
        }
    }

    fn to_v1(&self) -> ExecutionFinishedV1 {
        ExecutionFinishedV1 {
            attempt: self.attempt.clone(),
            coordinator_epoch: self.coordinator_epoch,
            produced: self.produced.clone(),
            enumerator_snapshots: self
                .enumerator_snapshots
                .iter()
                .map(|s| EnumeratorSnapshotV1 {
                    job_vertex: s.job_vertex.clone(),
                    checkpoint_id: s.checkpoint_id,
                    state: s.state.clone(),
                    assignments: s.assignments.clone(),
                    no_more_splits: s.no_more_splits.clone(),
                })
                .collect(),
            shuffle_snapshot: self.shuffle_snapshot.clone(),
        }
    }
}

/// A batch snapshot of the shuffle master.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShuffleSnapshot {
    /// True if it adds to earlier snapshots; false if it replaces them.
    pub incremental: bool,
    /// The shuffle master's bytes.
    #[serde(with = "bytes_field")]
    pub data: Vec<u8>,
}

/// An execution attempt finished (FLIP-383's "ExecutionVertexFinishedEvent").
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutionFinished {
    /// The attempt that finished.
    pub attempt: AttemptId,
    /// Coordinator attempt (segment attempt) during which it finished.
    pub coordinator_epoch: u32,
    /// Result partitions it produced, one per outgoing edge.
    pub produced: Vec<ProducedPartition>,
    /// Snapshots of source coordinators touched since the last snapshot.
    pub enumerator_snapshots: Vec<EnumeratorSnapshot>,
    /// Snapshot of the shuffle master, if one was taken.
    pub shuffle_snapshot: Option<ShuffleSnapshot>,
}

impl ExecutionFinished {
    /// True if any plugin snapshot is attached.
    #[must_use]
    pub fn has_snapshot(&self) -> bool {
        !self.enumerator_snapshots.is_empty() || self.shuffle_snapshot.is_some()
    }
}

/// Why execution vertices were reset (made to run again).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ResetReason {
    /// A task failed and the failover strategy chose these vertices.
    Failover {
        /// The failure message.
        message: String,
    },
    /// A consumer could not find a partition of this producer.
    PartitionNotFound {
        /// The data set whose partition was missing.
        data_set: String,
        /// The consumer that reported it.
        consumer: ExecutionVertexId,
    },
    /// Recovery: the vertex had not finished before the crash.
    RecoveryUnfinished,
    /// Recovery: it finished, but no later snapshot reflects it.
    RecoveryNotInSnapshot,
    /// Recovery: its enumerator cannot snapshot and its vertex was unfinished.
    RecoveryEnumeratorWithoutSnapshot,
    /// Recovery: a partition it produced is no longer reported.
    RecoveryPartitionMissing {
        /// The data set whose partition is missing.
        data_set: String,
    },
    /// Recovery: an upstream producer it depends on runs again.
    RecoveryUpstreamReset {
        /// The upstream execution vertex that was reset.
        upstream: ExecutionVertexId,
    },
    /// Recovery: its source's split enumerator could not be restored from
    /// its batch snapshot (the plugin's `restore` or the `start` after it
    /// failed), so the source vertex starts over with a fresh enumerator.
    /// Added in schema version 2 of `ExecutionsReset` and
    /// `RecoveryFinished`: a record that holds it is written as version 2,
    /// every other as version 1 (docs/log-format.md, "Kinds").
    RecoveryEnumeratorRestoreFailed,
}

impl ResetReason {
    /// The reason's short name, the one `--summary-json`'s `reset_reasons`,
    /// `coordhost run --ui` (`/api/job`, `/metrics`) and `log inspect --svg`
    /// all use: `failover`, `partition-not-found`, `unfinished`,
    /// `no-snapshot`, `enumerator-cannot-snapshot`, `partition-missing`,
    /// `upstream-reset`, `enumerator-restore-failed`.
    #[must_use]
    pub fn short_name(&self) -> &'static str {
        match self {
            Self::Failover { .. } => "failover",
            Self::PartitionNotFound { .. } => "partition-not-found",
            Self::RecoveryUnfinished => "unfinished",
            Self::RecoveryNotInSnapshot => "no-snapshot",
            Self::RecoveryEnumeratorWithoutSnapshot => "enumerator-cannot-snapshot",
            Self::RecoveryPartitionMissing { .. } => "partition-missing",
            Self::RecoveryUpstreamReset { .. } => "upstream-reset",
            Self::RecoveryEnumeratorRestoreFailed => "enumerator-restore-failed",
        }
    }

    /// Whether recovery (not a failure during a run) decided this reset.
    #[must_use]
    pub fn is_recovery(&self) -> bool {
        !matches!(self, Self::Failover { .. } | Self::PartitionNotFound { .. })
    }

    /// True for a reason only schema version 2 of `ExecutionsReset` and
    /// `RecoveryFinished` holds.
    fn needs_version_2(&self) -> bool {
        matches!(self, Self::RecoveryEnumeratorRestoreFailed)
    }
}

/// Execution vertices were reset: their latest finished attempt no longer
/// counts. Written during normal runs and during recovery.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutionsReset {
    /// The reset execution vertices.
    pub executions: Vec<ExecutionVertexId>,
    /// Why.
    pub reason: ResetReason,
}

impl ExecutionsReset {
    /// The oldest schema version that holds this record: 2 for a reason
    /// added in version 2, else 1 (readable by older binaries).
    fn version(&self) -> u16 {
        if self.reason.needs_version_2() { 2 } else { 1 }
    }
}

/// A sink subtask's staged output was published under its final name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SinkCommitted {
    /// The sink attempt whose staging file was published.
    pub attempt: AttemptId,
    /// The published file, relative to the job's output directory.
    pub file: String,
}

/// A coordinator attempt began recovering from the log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecoveryStarted {
    /// The recovering coordinator attempt.
    pub coordinator_epoch: u32,
    /// Whole records replayed from older segments.
    pub replayed_records: u64,
    /// Bytes of a torn tail cut from the newest older segment (0 if none).
    pub torn_tail_bytes: u64,
}

/// One execution vertex that recovery decided to run again.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecoveryReset {
    /// The execution vertex.
    pub execution: ExecutionVertexId,
    /// Why it runs again.
    pub reason: ResetReason,
}

/// Recovery decided, for every task, skip or reset (FLIP-383; docs/recovery.md step 7).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecoveryFinished {
    /// Finished attempts kept as they were.
    pub skipped: Vec<AttemptId>,
    /// Execution vertices that run again.
    pub reset: Vec<RecoveryReset>,
}

impl RecoveryFinished {
    /// The oldest schema version that holds this record: 2 when a reset's
    /// reason was added in version 2, else 1 (readable by older binaries).
    fn version(&self) -> u16 {
        if self.reset.iter().any(|r| r.reason.needs_version_2()) {
            2
        } else {
            1
        }
    }
}

/// A recovery's decision as `RecoveryFinished` records it, read where it
/// is kept (the recovery plan) instead of built as a record: at 1 M
/// execution vertices the record whole is about 60 MB of strings, built at
/// the restart's memory peak only to be encoded (issue 29).
/// [`encode_recovery_finished`] writes the bytes the record would have.
pub trait RecoveryDecision {
    /// The kept (skipped) attempts, in the record's order: (job vertex id,
    /// subtask, attempt).
    fn skipped(&self) -> impl ExactSizeIterator<Item = (&str, u32, u32)>;
    /// The execution vertices that run again, in the record's order: (job
    /// vertex id, subtask, why).
    fn reset(&self) -> impl ExactSizeIterator<Item = (&str, u32, &ResetReason)>;
}

/// A sequence serialized from a fresh iterator each time (postcard needs
/// the length first: the iterator's exact size).
struct SeqOf<F>(F);

impl<F, I> Serialize for SeqOf<F>
where
    F: Fn() -> I,
    I: ExactSizeIterator,
    I::Item: Serialize,
{
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq as _;
        let items = (self.0)();
        let mut seq = serializer.serialize_seq(Some(items.len()))?;
        for item in items {
            seq.serialize_element(&item)?;
        }
        seq.end()
    }
}

/// [`AttemptId`] borrowed: the same fields, so the same bytes.
#[derive(Serialize)]
struct AttemptRef<'a> {
    job_vertex: &'a str,
    subtask: u32,
    attempt: u32,
}

/// [`RecoveryReset`] borrowed: the same fields, so the same bytes.
#[derive(Serialize)]
struct RecoveryResetRef<'a> {
    execution: ExecutionVertexRef<'a>,
    reason: &'a ResetReason,
}

/// [`ExecutionVertexId`] borrowed.
#[derive(Serialize)]
struct ExecutionVertexRef<'a> {
    job_vertex: &'a str,
    subtask: u32,
}

/// The `RecoveryFinished` payload of `decision`, appended to `out`, and the
/// schema version it is written at (that of [`RecoveryFinished`]: 2 when a
/// reason needs it, else 1). The bytes are those
/// `JobEvent::RecoveryFinished` of the same decision encodes to.
///
/// # Errors
/// As [`JobEvent::encode_payload`].
pub fn encode_recovery_finished(
    decision: &impl RecoveryDecision,
    out: Vec<u8>,
) -> Result<(Vec<u8>, u16), postcard::Error> {
    let version = if decision.reset().any(|(_, _, r)| r.needs_version_2()) {
        2
    } else {
        1
    };
    let skipped = SeqOf(|| {
        decision
            .skipped()
            .map(|(job_vertex, subtask, attempt)| AttemptRef {
                job_vertex,
                subtask,
                attempt,
            })
    });
    let reset = SeqOf(|| {
        decision
            .reset()
            .map(|(job_vertex, subtask, reason)| RecoveryResetRef {
                execution: ExecutionVertexRef {
                    job_vertex,
                    subtask,
                },
                reason,
            })
    });
    Ok((postcard::to_extend(&(skipped, reset), out)?, version))
}

/// High availability (`coordhost run --ha`, docs/ha.md): the coordinator
/// that writes this segment leads the job in this term. The first record
/// of the segment it starts; recovery does not use it, `log inspect`
/// shows which term wrote what.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaderElected {
    /// The term: the etcd revision at which this leadership began; a
    /// newer leader's is larger.
    pub term: u64,
    /// The etcd cluster of the election (`etcd://HOST:PORT,...`).
    pub etcd: String,
    /// The address the leader serves workers on (empty without workers).
    pub address: String,
}

/// The run ended with the job finished: every sink's output and `_SUCCESS`
/// published. The last record of a finished run, made durable (under the
/// fence, with high availability) before the coordinator exits or steps
/// down; recovery does not use it (docs/recovery.md, "How a run ends").
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobFinished {
    /// The job id.
    pub job_id: String,
}

/// The run ended with the job failed (a task ran out of attempts, a plugin
/// call failed, output could not be published): the job's own failure, not
/// the coordinator's (a crash, a lost leadership or its own log write
/// leave no such record). The last record of a failed run, made durable
/// before the coordinator exits or steps down. With high availability a
/// later leader finds it and does not run the job again (docs/ha.md,
/// "A failed job stays failed").
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobFailed {
    /// The job id.
    pub job_id: String,
    /// Why, in one line (the run's `coordhost:` error line).
    pub error: String,
    /// The exit code the run ended with: 1 failed while running, 2 bad
    /// input (a split enumerator refused its configuration).
    pub exit_code: u8,
}

/// The run ended with the job cancelled: `coordhost cancel` asked for it
/// (docs/job-file.md, "Stopping, cancelling, resuming"), and the
/// coordinator stopped its attempts and released the job's partitions.
/// The last record of a cancelled run, made durable before the
/// coordinator exits. Recovery ignores it; a later `run` refuses to go on
/// with the job unless asked (`--resume`), as Flink's and Spark's
/// cancelled jobs are not restarted by themselves.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobCancelled {
    /// The job id.
    pub job_id: String,
    /// Who asked, in one line (e.g. "`coordhost cancel` (pid 4242)").
    pub requested_by: String,
}

/// A SQL job's plan (docs/sql.md): written durably right after the
/// `JobStarted` of a SQL job, before anything is scheduled. A rerun whose
/// SQL text and tables have `sql_fingerprint` runs these stages, never a
/// new plan; recovery's skip-or-reset decision does not read it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StagesPlanned {
    /// Lowercase hex SHA-256 of the SQL text, the table declarations and
    /// the parallelism the stages were planned from.
    pub sql_fingerprint: String,
    /// The stages, producers first; the last one feeds the sink.
    pub stages: Vec<PlannedStage>,
}

/// One stage of a [`StagesPlanned`]: a job vertex of the SQL job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedStage {
    /// The job vertex id (`stage0`, `stage1`, …).
    pub job_vertex: String,
    /// Its number of subtasks.
    pub parallelism: u32,
    /// For a source stage: its split-enumerator plugin.
    pub source: Option<String>,
    /// The stage as the job graph holds it: the `datafusion-proto` plan
    /// bytes and how a source reads its splits, postcard-encoded
    /// (`graph::StagePlan`).
    #[serde(with = "bytes_field")]
    pub stage: Vec<u8>,
    /// Names of its output columns.
    pub output_columns: Vec<String>,
    /// Its inputs, one per job edge into it.
    pub inputs: Vec<StageEdge>,
    /// `Some` for an `auto` stage (`[job] downstream-parallelism =
    /// "auto"`): its number of subtasks is decided at run time from what
    /// its producers wrote (recorded by `JobVertexInitialized`), and
    /// `parallelism` is only the planner's partition count. Schema
    /// version 2 of `StagesPlanned`; a record without an `auto` stage is
    /// written in version 1, as before.
    pub auto: Option<StageAuto>,
}

/// How an `auto` stage of a [`PlannedStage`] decides its parallelism.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageAuto {
    /// Upper bound of its subtasks, and the number of subpartitions every
    /// producer feeding it over a hash edge writes.
    pub max_parallelism: u32,
    /// Target input bytes per subtask.
    pub bytes_per_task: u64,
}

/// Schema version 1 of [`PlannedStage`]: without `auto`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct PlannedStageV1 {
    job_vertex: String,
    parallelism: u32,
    source: Option<String>,
    #[serde(with = "bytes_field")]
    stage: Vec<u8>,
    output_columns: Vec<String>,
    inputs: Vec<StageEdge>,
}

/// Schema version 1 of [`StagesPlanned`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct StagesPlannedV1 {
    sql_fingerprint: String,
    stages: Vec<PlannedStageV1>,
}

impl StagesPlanned {
    /// The schema version this record needs: 2 when a stage is `auto`.
    #[must_use]
    pub fn version(&self) -> u16 {
        if self.stages.iter().any(|s| s.auto.is_some()) {
            2
        } else {
            1
        }
    }

    fn to_v1(&self) -> StagesPlannedV1 {
        StagesPlannedV1 {
            sql_fingerprint: self.sql_fingerprint.clone(),
            stages: self
                .stages
                .iter()
                .map(|s| PlannedStageV1 {
                    job_vertex: s.job_vertex.clone(),
                    parallelism: s.parallelism,
                    source: s.source.clone(),
                    stage: s.stage.clone(),
                    output_columns: s.output_columns.clone(),
                    inputs: s.inputs.clone(),
                })
                .collect(),
        }
    }
}

impl From<StagesPlannedV1> for StagesPlanned {
    fn from(v1: StagesPlannedV1) -> Self {
        Self {
            sql_fingerprint: v1.sql_fingerprint,
            stages: v1
                .stages
                .into_iter()
                .map(|s| PlannedStage {
                    job_vertex: s.job_vertex,
                    parallelism: s.parallelism,
                    source: s.source,
                    stage: s.stage,
                    output_columns: s.output_columns,
                    inputs: s.inputs,
                    auto: None,
                })
                .collect(),
        }
    }
}

/// How rows travel on a [`StageEdge`] (the job graph's distribution
/// pattern, as the log writes it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum StagePattern {
    /// Producer task `i` to consumer task `i`.
    Forward,
    /// By the hash of `key`.
    Hash,
    /// Every row to every consumer task.
    Broadcast,
}

/// One input of a [`PlannedStage`]: a job edge.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageEdge {
    /// Index of the producing stage in [`StagesPlanned::stages`] (earlier).
    pub from: u32,
    /// How rows travel.
    pub pattern: StagePattern,
    /// Hash key: column indices of the producer's output (empty unless
    /// `pattern` is `Hash`).
    pub key: Vec<u32>,
}

/// Every durable job event. The variant decides the kind id and the schema
/// version written in the record frame.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "event")]
pub enum JobEvent {
    /// See [`JobStarted`].
    JobStarted(JobStarted),
    /// See [`JobVertexInitialized`].
    JobVertexInitialized(JobVertexInitialized),
    /// See [`ExecutionFinished`].
    ExecutionFinished(ExecutionFinished),
    /// See [`ExecutionsReset`].
    ExecutionsReset(ExecutionsReset),
    /// See [`SinkCommitted`].
    SinkCommitted(SinkCommitted),
    /// See [`RecoveryStarted`].
    RecoveryStarted(RecoveryStarted),
    /// See [`RecoveryFinished`].
    RecoveryFinished(RecoveryFinished),
    /// See [`LeaderElected`].
    LeaderElected(LeaderElected),
    /// See [`JobFinished`].
    JobFinished(JobFinished),
    /// See [`JobFailed`].
    JobFailed(JobFailed),
    /// See [`StagesPlanned`].
    StagesPlanned(StagesPlanned),
    /// See [`JobCancelled`].
    JobCancelled(JobCancelled),
}

/// Why a checksum-valid record could not become an event.
#[derive(Debug)]
pub(crate) enum DecodeProblem {
    /// The kind id is not one this binary knows.
    UnknownKind,
    /// The schema version is newer than this binary knows.
    NewerVersion {
        /// Newest known version of the kind.
        max_known: u16,
    },
    /// Version 0, or a payload that does not decode exactly.
    Malformed(String),
}

/// So that code reading events takes a slice of them or of
/// [`ReplayedEvent`](super::ReplayedEvent)s alike, without copying.
impl AsRef<JobEvent> for JobEvent {
    fn as_ref(&self) -> &JobEvent {
        self
    }
}

impl AsMut<JobEvent> for JobEvent {
    fn as_mut(&mut self) -> &mut JobEvent {
        self
    }
}

impl JobEvent {
    /// Stable kind id written in the frame (see [`kind`]).
    #[must_use]
    pub fn kind_id(&self) -> u16 {
        match self {
            Self::JobStarted(_) => kind::JOB_STARTED,
            Self::JobVertexInitialized(_) => kind::JOB_VERTEX_INITIALIZED,
            Self::ExecutionFinished(_) => kind::EXECUTION_FINISHED,
            Self::ExecutionsReset(_) => kind::EXECUTIONS_RESET,
            Self::SinkCommitted(_) => kind::SINK_COMMITTED,
            Self::RecoveryStarted(_) => kind::RECOVERY_STARTED,
            Self::RecoveryFinished(_) => kind::RECOVERY_FINISHED,
            Self::LeaderElected(_) => kind::LEADER_ELECTED,
            Self::JobFinished(_) => kind::JOB_FINISHED,
            Self::JobFailed(_) => kind::JOB_FAILED,
            Self::JobCancelled(_) => kind::JOB_CANCELLED,
            Self::StagesPlanned(_) => kind::STAGES_PLANNED,
        }
    }

    /// Schema version this binary writes for the event: the newest of its
    /// kind, except that an `ExecutionFinished`, an `ExecutionsReset` and a
    /// `RecoveryFinished` are written in the oldest version that holds them
    /// (`ExecutionFinished`: 1 without snapshot side files or incremental
    /// histories, 2 with side files; the other two: 1 unless a reset reason
    /// of version 2 is in them; readable by older binaries), and so is a
    /// `StagesPlanned` (1 unless a stage is `auto`).
    #[must_use]
    pub fn schema_version(&self) -> u16 {
        match self {
            Self::ExecutionFinished(e) => e.version(),
            Self::ExecutionsReset(e) => e.version(),
            Self::RecoveryFinished(e) => e.version(),
            Self::StagesPlanned(e) => e.version(),
            _ => max_known_version(self.kind_id()).unwrap_or(0),
        }
    }

    /// The event's kind name, e.g. `"ExecutionFinished"`.
    #[must_use]
    pub fn kind_name(&self) -> &'static str {
        kind_name(self.kind_id()).unwrap_or("?")
    }

    /// The postcard payload of the event (without framing).
    ///
    /// # Errors
    /// The postcard error; it cannot happen for these types short of
    /// running out of memory.
    pub fn encode_payload(&self) -> Result<Vec<u8>, postcard::Error> {
        self.encode_payload_after(Vec::new())
    }

    /// [`JobEvent::encode_payload`], appended to `out` (the writer puts a
    /// frame's head before it and seals the frame in place:
    /// `format::seal_frame`).
    ///
    /// # Errors
    /// As [`JobEvent::encode_payload`].
    pub fn encode_payload_after(&self, out: Vec<u8>) -> Result<Vec<u8>, postcard::Error> {
        match self {
            Self::JobStarted(e) => postcard::to_extend(e, out),
            Self::JobVertexInitialized(e) => postcard::to_extend(e, out),
            Self::ExecutionFinished(e) => match e.version() {
                1 => postcard::to_extend(&e.to_v1(), out),
                2 => postcard::to_extend(&e.to_v2(), out),
                _ => postcard::to_extend(e, out),
            },
            Self::ExecutionsReset(e) => postcard::to_extend(e, out),
            Self::SinkCommitted(e) => postcard::to_extend(e, out),
            Self::RecoveryStarted(e) => postcard::to_extend(e, out),
            Self::RecoveryFinished(e) => postcard::to_extend(e, out),
            Self::LeaderElected(e) => postcard::to_extend(e, out),
            Self::JobFinished(e) => postcard::to_extend(e, out),
            Self::JobFailed(e) => postcard::to_extend(e, out),
            Self::JobCancelled(e) => postcard::to_extend(e, out),
            Self::StagesPlanned(e) => match e.version() {
                1 => postcard::to_extend(&e.to_v1(), out),
                _ => postcard::to_extend(e, out),
            },
        }
    }

    /// Decodes a payload of `kind_id` at schema `version`.
    pub(crate) fn decode(
        kind_id: u16,
        version: u16,
        payload: &[u8],
    ) -> Result<Self, DecodeProblem> {
        let max_known = max_known_version(kind_id).ok_or(DecodeProblem::UnknownKind)?;
        if version > max_known {
            return Err(DecodeProblem::NewerVersion { max_known });
        }
        if version == 0 {
            return Err(DecodeProblem::Malformed("schema version 0".to_owned()));
        }
        // Older versions are upgraded here; only `ExecutionFinished` has them.
        match kind_id {
            kind::JOB_STARTED => exact(payload).map(Self::JobStarted),
            kind::JOB_VERTEX_INITIALIZED => exact(payload).map(Self::JobVertexInitialized),
            kind::EXECUTION_FINISHED if version == 1 => {
                exact::<ExecutionFinishedV1>(payload).map(|v1| Self::ExecutionFinished(v1.into()))
            }
            kind::EXECUTION_FINISHED if version == 2 => {
                exact::<ExecutionFinishedV2>(payload).map(|v2| Self::ExecutionFinished(v2.into()))
            }
            kind::EXECUTION_FINISHED => exact(payload).map(Self::ExecutionFinished),
            // Version 2 only appends a `ResetReason` variant: both decode
            // as the same type, and a version 1 record cannot hold it.
            kind::EXECUTIONS_RESET => exact::<ExecutionsReset>(payload).and_then(|e| {
                within_version(version, e.version())?;
                Ok(Self::ExecutionsReset(e))
            }),
            kind::SINK_COMMITTED => exact(payload).map(Self::SinkCommitted),
            kind::RECOVERY_STARTED => exact(payload).map(Self::RecoveryStarted),
            kind::RECOVERY_FINISHED => exact::<RecoveryFinished>(payload).and_then(|e| {
                within_version(version, e.version())?;
                Ok(Self::RecoveryFinished(e))
            }),
            kind::LEADER_ELECTED => exact(payload).map(Self::LeaderElected),
            kind::JOB_FINISHED => exact(payload).map(Self::JobFinished),
            kind::JOB_FAILED => exact(payload).map(Self::JobFailed),
            kind::JOB_CANCELLED => exact(payload).map(Self::JobCancelled),
            kind::STAGES_PLANNED if version == 1 => {
                exact::<StagesPlannedV1>(payload).map(|v1| Self::StagesPlanned(v1.into()))
            }
            kind::STAGES_PLANNED => exact(payload).map(Self::StagesPlanned),
            _ => Err(DecodeProblem::UnknownKind),
        }
    }
}

/// Refuses a record of schema `version` that holds what only schema
/// version `needs` (newer) can: a version 1 payload with a reset reason
/// added in version 2 was not written by any coordhost.
fn within_version(version: u16, needs: u16) -> Result<(), DecodeProblem> {
    if needs > version {
        return Err(DecodeProblem::Malformed(format!(
            "a schema version {version} record holds a value of version {needs}"
        )));
    }
    Ok(())
}

/// Decodes `payload` as `T`, refusing trailing bytes.
fn exact<T: serde::de::DeserializeOwned>(payload: &[u8]) -> Result<T, DecodeProblem> {
    let (value, rest) = postcard::take_from_bytes(payload)
        .map_err(|e| DecodeProblem::Malformed(format!("payload does not decode: {e}")))?;
    if rest.is_empty() {
        Ok(value)
    } else {
        Err(DecodeProblem::Malformed(format!(
            "{} bytes after the payload",
            rest.len()
        )))
    }
}

/// Newest schema version known for `kind_id`, or `None` for an unknown kind.
#[must_use]
pub fn max_known_version(kind_id: u16) -> Option<u16> {
    Some(match kind_id {
        kind::JOB_STARTED => schema::JOB_STARTED,
        kind::JOB_VERTEX_INITIALIZED => schema::JOB_VERTEX_INITIALIZED,
        kind::EXECUTION_FINISHED => schema::EXECUTION_FINISHED,
        kind::EXECUTIONS_RESET => schema::EXECUTIONS_RESET,
        kind::SINK_COMMITTED => schema::SINK_COMMITTED,
        kind::RECOVERY_STARTED => schema::RECOVERY_STARTED,
        kind::RECOVERY_FINISHED => schema::RECOVERY_FINISHED,
        kind::LEADER_ELECTED => schema::LEADER_ELECTED,
        kind::JOB_FINISHED => schema::JOB_FINISHED,
        kind::JOB_FAILED => schema::JOB_FAILED,
        kind::JOB_CANCELLED => schema::JOB_CANCELLED,
        kind::STAGES_PLANNED => schema::STAGES_PLANNED,
        _ => return None,
    })
}

/// Name of `kind_id`, or `None` for an unknown kind.
#[must_use]
pub fn kind_name(kind_id: u16) -> Option<&'static str> {
    Some(match kind_id {
        kind::JOB_STARTED => "JobStarted",
        kind::JOB_VERTEX_INITIALIZED => "JobVertexInitialized",
        kind::EXECUTION_FINISHED => "ExecutionFinished",
        kind::EXECUTIONS_RESET => "ExecutionsReset",
        kind::SINK_COMMITTED => "SinkCommitted",
        kind::RECOVERY_STARTED => "RecoveryStarted",
        kind::RECOVERY_FINISHED => "RecoveryFinished",
        kind::LEADER_ELECTED => "LeaderElected",
        kind::JOB_FINISHED => "JobFinished",
        kind::JOB_FAILED => "JobFailed",
        kind::JOB_CANCELLED => "JobCancelled",
        kind::STAGES_PLANNED => "StagesPlanned",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finished(state_file: Option<SnapshotFile>) -> JobEvent {
        JobEvent::ExecutionFinished(ExecutionFinished {
            attempt: AttemptId {
                job_vertex: "source".into(),
                subtask: 0,
                attempt: 0,
            },
            coordinator_epoch: 1,
            produced: Vec::new(),
            enumerator_snapshots: vec![EnumeratorSnapshot {
                job_vertex: "source".into(),
                checkpoint_id: -1,
                state: if state_file.is_some() {
                    Vec::new()
                } else {
                    b"inline".to_vec()
                },
                assignments: Vec::new(),
                no_more_splits: vec![0],
                state_file,
                incremental: false,
            }],
            shuffle_snapshot: None,
        })
    }

    #[test]
    fn execution_finished_is_version_1_inline_and_version_2_with_a_side_file() {
        let inline = finished(None);
        assert_eq!(inline.schema_version(), 1);
        let bytes = inline.encode_payload().expect("encode");
        assert_eq!(
            JobEvent::decode(kind::EXECUTION_FINISHED, 1, &bytes).expect("v1"),
            inline
        );

        let side = finished(Some(SnapshotFile {
            file: "snapshot-00000001-00000000.state".into(),
            len: 73_400_320,
            crc32c: 0xdead_beef,
        }));
        assert_eq!(side.schema_version(), 2);
        let bytes = side.encode_payload().expect("encode");
        assert_eq!(
            JobEvent::decode(kind::EXECUTION_FINISHED, 2, &bytes).expect("v2"),
            side
        );
        assert!(JobEvent::decode(kind::EXECUTION_FINISHED, 1, &bytes).is_err());
        assert!(matches!(
            JobEvent::decode(kind::EXECUTION_FINISHED, 4, &bytes),
            Err(DecodeProblem::NewerVersion { max_known: 3 })
        ));
    }

    fn stages(auto: Option<StageAuto>) -> JobEvent {
        let stage = |id: &str, auto| PlannedStage {
            job_vertex: id.into(),
            parallelism: 3,
            source: None,
            stage: vec![1, 2, 3],
            output_columns: vec!["k".into()],
            inputs: vec![StageEdge {
                from: 0,
                pattern: StagePattern::Hash,
                key: vec![0],
            }],
            auto,
        };
        JobEvent::StagesPlanned(StagesPlanned {
            sql_fingerprint: "ab".into(),
            stages: vec![stage("stage0", None), stage("stage1", auto)],
        })
    }

    #[test]
    fn stages_planned_is_version_1_without_auto_stages_and_version_2_with_one() {
        let fixed = stages(None);
        assert_eq!(fixed.schema_version(), 1);
        let bytes = fixed.encode_payload().expect("encode");
        // Version 1 bytes are what binaries before `auto` wrote and read.
        let JobEvent::StagesPlanned(plain) = &fixed else {
            unreachable!()
        };
        assert_eq!(bytes, postcard::to_stdvec(&plain.to_v1()).expect("v1"));
        assert_eq!(
            JobEvent::decode(kind::STAGES_PLANNED, 1, &bytes).expect("v1"),
            fixed
        );

        let auto = stages(Some(StageAuto {
            max_parallelism: 8,
            bytes_per_task: 3_000_000,
        }));
        assert_eq!(auto.schema_version(), 2);
        let bytes = auto.encode_payload().expect("encode");
        assert_eq!(
            JobEvent::decode(kind::STAGES_PLANNED, 2, &bytes).expect("v2"),
            auto
        );
        assert!(JobEvent::decode(kind::STAGES_PLANNED, 1, &bytes).is_err());
        assert!(matches!(
            JobEvent::decode(kind::STAGES_PLANNED, 3, &bytes),
            Err(DecodeProblem::NewerVersion { max_known: 2 })
        ));
    }

    fn split(id: &str) -> EncodedSplit {
        EncodedSplit {
            id: id.into(),
            bytes: id.as_bytes().to_vec(),
        }
    }

    fn history(of: &[(u32, &[&str])]) -> Vec<SplitAssignment> {
        of.iter()
            .map(|(subtask, ids)| SplitAssignment {
                subtask: *subtask,
                splits: ids.iter().map(|id| split(id)).collect(),
            })
            .collect()
    }

    fn snapshot(state: &[u8], assignments: Vec<SplitAssignment>) -> EnumeratorSnapshot {
        EnumeratorSnapshot {
            job_vertex: "source".into(),
            checkpoint_id: -1,
            state: state.to_vec(),
            assignments,
            no_more_splits: Vec::new(),
            state_file: None,
            incremental: false,
        }
    }

    #[test]
    fn an_incremental_history_is_version_3_and_folds_back_to_the_whole_history() {
        let first = snapshot(b"a", history(&[(0, &["s0"]), (1, &["s1"])]));
        let second = snapshot(
            b"b",
            history(&[(0, &["s0", "s2"]), (1, &["s1"]), (2, &["s3"])]),
        );
        let third = snapshot(
            b"c",
            history(&[(0, &["s0", "s2", "s4"]), (1, &["s1"]), (2, &["s3"])]),
        );

        let recorded_first = first.since(None);
        assert!(!recorded_first.incremental);
        let recorded_second = second.since(Some(&first.assignments));
        assert!(recorded_second.incremental);
        assert_eq!(
            recorded_second.assignments,
            history(&[(0, &["s2"]), (2, &["s3"])])
        );
        let recorded_third = third.since(Some(&second.assignments));
        assert_eq!(recorded_third.assignments, history(&[(0, &["s4"])]));

        // Through the log format: version 3, decoded as written.
        let mut event = match finished(None) {
            JobEvent::ExecutionFinished(e) => e,
            _ => unreachable!("finished() is an ExecutionFinished"),
        };
        event.enumerator_snapshots = vec![recorded_third.clone()];
        let event = JobEvent::ExecutionFinished(event);
        assert_eq!(event.schema_version(), 3);
        let bytes = event.encode_payload().expect("encode");
        assert_eq!(
            JobEvent::decode(kind::EXECUTION_FINISHED, 3, &bytes).expect("v3"),
            event
        );

        let mut folded = recorded_first;
        folded.fold(recorded_second);
        folded.fold(recorded_third);
        assert_eq!(folded, third);
    }

    #[test]
    fn a_history_that_lost_splits_is_recorded_whole_and_replaces_the_fold() {
        let before = snapshot(b"a", history(&[(0, &["s0", "s1"]), (1, &["s2"])]));
        // Subtask 0 was reset: its splits went back to the enumerator.
        let after = snapshot(b"b", history(&[(0, &["s3"]), (1, &["s2"])]));
        let recorded = after.since(Some(&before.assignments));
        assert!(!recorded.incremental);
        assert_eq!(recorded, after);
        let mut folded = before.since(None);
        folded.fold(recorded);
        assert_eq!(folded, after);
    }

    /// A decision kept as a test's lists, read as [`RecoveryDecision`].
    struct Lists(RecoveryFinished);

    impl RecoveryDecision for Lists {
        fn skipped(&self) -> impl ExactSizeIterator<Item = (&str, u32, u32)> {
            self.0
                .skipped
                .iter()
                .map(|a| (a.job_vertex.as_str(), a.subtask, a.attempt))
        }

        fn reset(&self) -> impl ExactSizeIterator<Item = (&str, u32, &ResetReason)> {
            self.0.reset.iter().map(|r| {
                (
                    r.execution.job_vertex.as_str(),
                    r.execution.subtask,
                    &r.reason,
                )
            })
        }
    }

    #[test]
    fn a_decision_encoded_where_it_is_kept_has_the_bytes_and_version_of_the_record() {
        let vertex = |job_vertex: &str, subtask| ExecutionVertexId {
            job_vertex: job_vertex.into(),
            subtask,
        };
        let kept = |subtask, attempt| AttemptId {
            job_vertex: "source-\u{e9}".into(),
            subtask,
            attempt,
        };
        let reset = |execution, reason| RecoveryReset { execution, reason };
        let every_reason = vec![
            reset(vertex("sink", 0), ResetReason::RecoveryUnfinished),
            reset(
                vertex("sink", 300),
                ResetReason::Failover {
                    message: "boom".into(),
                },
            ),
            reset(
                vertex("map", 7),
                ResetReason::PartitionNotFound {
                    data_set: "s-m".into(),
                    consumer: vertex("sink", 2),
                },
            ),
            reset(vertex("map", 8), ResetReason::RecoveryNotInSnapshot),
            reset(
                vertex("map", 9),
                ResetReason::RecoveryEnumeratorWithoutSnapshot,
            ),
            reset(
                vertex("map", 10),
                ResetReason::RecoveryPartitionMissing {
                    data_set: "s-m".into(),
                },
            ),
            reset(
                vertex("map", 11),
                ResetReason::RecoveryUpstreamReset {
                    upstream: vertex("source", 70_000),
                },
            ),
        ];
        let mut with_version_2 = every_reason.clone();
        with_version_2.push(reset(
            vertex("source", 1),
            ResetReason::RecoveryEnumeratorRestoreFailed,
        ));
        for (decision, version) in [
            (
                RecoveryFinished {
                    skipped: Vec::new(),
                    reset: Vec::new(),
                },
                1,
            ),
            (
                RecoveryFinished {
                    skipped: vec![kept(0, 0), kept(1, 3), kept(200, 1 << 20)],
                    reset: every_reason,
                },
                1,
            ),
            (
                RecoveryFinished {
                    skipped: vec![kept(5, 0)],
                    reset: with_version_2,
                },
                2,
            ),
        ] {
            let event = JobEvent::RecoveryFinished(decision.clone());
            let prefix = vec![0xAB; 3];
            let (bytes, written) =
                encode_recovery_finished(&Lists(decision), prefix.clone()).expect("encode");
            assert_eq!(written, version);
            assert_eq!(event.schema_version(), version);
            assert_eq!(bytes[..3], prefix[..], "appended after what `out` held");
            assert_eq!(bytes[3..], event.encode_payload().expect("encode")[..]);
            assert_eq!(
                JobEvent::decode(kind::RECOVERY_FINISHED, version, &bytes[3..]).expect("decode"),
                event
            );
        }
    }

    #[test]
    fn a_reset_for_a_failed_enumerator_restore_is_version_2_and_others_stay_version_1() {
        let vertex = ExecutionVertexId {
            job_vertex: "source".into(),
            subtask: 1,
        };
        let reset = |reason: ResetReason| {
            JobEvent::ExecutionsReset(ExecutionsReset {
                executions: vec![vertex.clone()],
                reason,
            })
        };
        let finished = |reason: ResetReason| {
            JobEvent::RecoveryFinished(RecoveryFinished {
                skipped: Vec::new(),
                reset: vec![RecoveryReset {
                    execution: vertex.clone(),
                    reason,
                }],
            })
        };
        for (event, kind_id) in [
            (
                reset(ResetReason::RecoveryUnfinished),
                kind::EXECUTIONS_RESET,
            ),
            (
                finished(ResetReason::RecoveryUnfinished),
                kind::RECOVERY_FINISHED,
            ),
        ] {
            assert_eq!(event.schema_version(), 1, "{event:?}");
            let bytes = event.encode_payload().expect("encode");
            assert_eq!(JobEvent::decode(kind_id, 1, &bytes).expect("v1"), event);
        }
        for (event, kind_id) in [
            (
                reset(ResetReason::RecoveryEnumeratorRestoreFailed),
                kind::EXECUTIONS_RESET,
            ),
            (
                finished(ResetReason::RecoveryEnumeratorRestoreFailed),
                kind::RECOVERY_FINISHED,
            ),
        ] {
            assert_eq!(event.schema_version(), 2, "{event:?}");
            let bytes = event.encode_payload().expect("encode");
            assert_eq!(JobEvent::decode(kind_id, 2, &bytes).expect("v2"), event);
            // No coordhost writes the new reason as version 1.
            assert!(matches!(
                JobEvent::decode(kind_id, 1, &bytes),
                Err(DecodeProblem::Malformed(_))
            ));
            assert!(matches!(
                JobEvent::decode(kind_id, 3, &bytes),
                Err(DecodeProblem::NewerVersion { max_known: 2 })
            ));
        }
    }
}
