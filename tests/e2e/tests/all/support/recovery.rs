//! Helpers of the `recovery_*` tests (scenarios 1–11 of docs/recovery.md, "unit
//! level"): topology T1 written as a real job file over real input files,
//! run in-process with [`run_job`], or through the binary with a simulated
//! coordinator crash ([`CrashPoint`], a fail point: [`super::knobs`]), then
//! run again on the same data directory.
//!
//! - [`T1`] writes the job: `source` (5, a split enumerator with 10 splits)
//!   → forward → `middle` (5) → hash → `sink` (`auto`, 2 for this data).
//! - [`T1::run`] / [`T1::crash`] run it; [`Log::read`] replays the job's
//!   event log with `coordhost::events::replay`.
//! - [`sorted_output`] reads the sink folder (checked complete) as sorted
//!   lines; [`T1::baseline`] is the output of an uninterrupted run.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::{plugin_path, published_lines, segment_files};
use coordhost::events::{
    AttemptId, ExecutionFinished, ExecutionsReset, FileStorage, JobEvent, RecoveryFinished,
    ReplayedEvent, ResetReason, job_log_dir, replay,
};
use coordhost::job::{JobStatus, RunOptions, Summary, run_job};

use super::knobs::{CrashPoint, CrashRun, Knobs, LostPartition};

/// The job's name (also its folder under the data directory).
pub const JOB: &str = "t1";
/// Number of splits (input files, or inline splits).
pub const SPLITS: u32 = 10;
/// Lines per split.
pub const LINES: u32 = 20;
/// Worker threads: enough for every subtask of a vertex to run at once
/// (tasks mostly sleep in `record-delay-us`, which costs no CPU).
pub const WORKERS: usize = 12;

/// Which split enumerator feeds `source`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Enumerator {
    /// `file-enumerator` over 10 files: supports batch snapshots.
    Files,
    /// `static-enumerator` with 10 inline `split.N`: cannot snapshot.
    Static,
}

/// The text of split `i`: `LINES` lines of words.
pub fn split_text(i: u32) -> Vec<String> {
    (0..LINES)
        .map(|j| {
            format!(
                "w{} w{} common f{i} z{}",
                (i * 7 + j) % 13,
                j % 5,
                (i + j) % 3
            )
        })
        .collect()
}

/// Word counts as the test computes them itself.
pub fn expected_counts() -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for i in 0..SPLITS {
        for line in split_text(i) {
            for w in line.split(' ') {
                *counts.entry(w.to_string()).or_insert(0) += 1;
            }
        }
    }
    counts
}

/// The expected sink output, as sorted `word count` lines.
pub fn expected_lines() -> Vec<String> {
    let mut lines: Vec<String> = expected_counts()
        .into_iter()
        .map(|(w, n)| format!("{w} {n}"))
        .collect();
    lines.sort();
    lines
}

/// Bytes the middles write to the hash edge when middle `m` reads the
/// splits `middle_of(i) == m`, measured with the host's own writer
/// (docs/shuffle-format.md): each middle writes one partition of 4
/// subpartitions (the sink's default `max-parallelism`) routed by the key
/// hash, as one batch of one Utf8 column (the writer merges a
/// subpartition's batches into one block per region).
fn middle_bytes(middle_of: impl Fn(u32) -> u32) -> u64 {
    use arrow_array::{ArrayRef, RecordBatch, StringArray};
    use arrow_schema::{DataType, Field, Schema};
    let scratch = tempfile::tempdir().expect("tempdir");
    let schema = std::sync::Arc::new(Schema::new(vec![Field::new("c0", DataType::Utf8, false)]));
    let mut total = 0;
    for middle in 0..5 {
        let words: Vec<String> = (0..SPLITS)
            .filter(|&i| middle_of(i) == middle)
            .flat_map(split_text)
            .flat_map(|line| line.split(' ').map(str::to_string).collect::<Vec<_>>())
            .collect();
        if words.is_empty() {
            continue;
        }
        let col: ArrayRef = std::sync::Arc::new(StringArray::from(words));
        let batch = RecordBatch::try_new(schema.clone(), vec![col]).expect("batch");
        let loc = scratch.path().join(format!("m{middle}"));
        let mut w = coordhost::shuffle::PartitionWriter::create(
            &loc,
            4,
            crate::support::damage::test_producer(),
        )
        .expect("create");
        for (sub, part) in coordhost::shuffle::route_batch(&batch, &[0], 4) {
            w.write_batch(sub, &part).expect("write");
        }
        total += w.finish().expect("finish").iter().sum::<u64>();
    }
    total
}

/// `bytes-per-task` that makes the `auto` sink 2 however the splits spread.
///
/// Splits are pulled on request, so which middle reads which split varies
/// from run to run. The words are the same, but every non-empty
/// subpartition of every middle is one more block, each with its own
/// framing and IPC schema: the edge's total is smallest when one middle
/// reads every split (4 blocks) and largest when all five read some (20
/// blocks). The sink is 2 when `bytes-per-task < total <= 2 ×
/// bytes-per-task`; this picks the middle of the range that holds for both
/// ends, and panics if the two ends are too far apart for any.
pub fn bytes_per_task_for_two() -> u64 {
    static BYTES: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *BYTES.get_or_init(|| {
        let least = middle_bytes(|_| 0);
        let most = middle_bytes(|i| i % 5);
        let (low, high) = (most.div_ceil(2), least);
        assert!(
            low < high,
            "T1's hash edge holds {least}..={most} bytes: no bytes-per-task makes the sink 2 for both"
        );
        (low + high) / 2
    })
}

/// Topology T1 with its knobs.
#[derive(Debug, Clone)]
pub struct T1 {
    /// The folder holding the job file and the input files.
    pub dir: PathBuf,
    /// The enumerator of `source`.
    pub enumerator: Enumerator,
    /// `record-delay-us` of `source` (per input line). Splits are pulled on
    /// request, so with no delay a source subtask that starts late can find
    /// the enumerator drained and read nothing; a consumer then skips its
    /// empty partition (docs/shuffle-format.md, "Reading") and a lost
    /// partition injected there never fires. A test that loses a source's
    /// or a middle's partition sets a delay of a few ms (20 lines a split):
    /// a subtask would have to start two splits' time late to read nothing.
    pub source_delay_us: u64,
    /// `record-delay-us` of `middle` (per input row).
    pub middle_delay_us: u64,
    /// `record-delay-us` of `sink` (per input row).
    pub sink_delay_us: u64,
    /// `bytes-per-task` of the `auto` sink.
    pub bytes_per_task: u64,
    /// `max-parallelism` of the `auto` sink.
    pub max_sink_parallelism: u32,
    /// `recovery.previous-worker-timeout-ms`.
    pub previous_worker_timeout_ms: u64,
    /// `recovery.snapshot-min-pause-ms`.
    pub snapshot_min_pause_ms: u64,
    /// `job.max-attempts`.
    pub max_attempts: u32,
    /// Whether `tokenize` lower-cases (an operator setting, part of the
    /// job graph's fingerprint).
    pub lowercase: bool,
}

impl T1 {
    /// T1 in `dir` fed by `enumerator`, no delays, sink parallelism 2,
    /// a snapshot at every finished execution (minimum pause 0).
    pub fn new(dir: &Path, enumerator: Enumerator) -> Self {
        Self {
            dir: dir.to_path_buf(),
            enumerator,
            source_delay_us: 0,
            middle_delay_us: 0,
            sink_delay_us: 0,
            bytes_per_task: bytes_per_task_for_two(),
            max_sink_parallelism: 4,
            previous_worker_timeout_ms: 10_000,
            snapshot_min_pause_ms: 0,
            max_attempts: 5,
            lowercase: false,
        }
    }

    /// The input folder of the file enumerator.
    pub fn input_dir(&self) -> PathBuf {
        self.dir.join("input")
    }

    /// The job file.
    pub fn job_file(&self) -> PathBuf {
        self.dir.join("t1.toml")
    }

    /// Writes the input files (file enumerator) and the job file; returns
    /// the job file.
    ///
    /// # Panics
    /// If a file cannot be written or a sample plugin is not built.
    pub fn write(&self) -> PathBuf {
        let source_plugin = match self.enumerator {
            Enumerator::Files => {
                let input = self.input_dir();
                std::fs::create_dir_all(&input).expect("input dir");
                for i in 0..SPLITS {
                    let mut text = split_text(i).join("\n");
                    text.push('\n');
                    std::fs::write(input.join(format!("in-{i:02}.txt")), text).expect("input");
                }
                format!(
                    r#"[plugins.splits]
component = "{}"
kind = "split-enumerator"
config = {{ dir = "{input}", split-bytes = 1048576, pattern = ".txt" }}
dirs = [{{ path = "{input}", writable = false }}]
"#,
                    plugin_path("file-enumerator").display(),
                    input = input.display(),
                )
            }
            Enumerator::Static => {
                let splits: Vec<String> = (0..SPLITS)
                    .map(|i| format!("\"split.{i}\" = \"{}\"", split_text(i).join("\\n")))
                    .collect();
                format!(
                    r#"[plugins.splits]
component = "{}"
kind = "split-enumerator"
config = {{ {} }}
"#,
                    plugin_path("static-enumerator").display(),
                    splits.join(", "),
                )
            }
        };
        let text = format!(
            r#"# Topology T1 of docs/recovery.md, written by tests/e2e/tests/all/support/recovery.rs.
[job]
name = "{JOB}"
max-attempts = {max_attempts}

[recovery]
enabled = true
previous-worker-timeout-ms = {timeout}
snapshot-min-pause-ms = {pause}

[shuffle]
plugin = "shuffle"

{source_plugin}
{shuffle}
[[vertices]]
id = "source"
source = "splits"
parallelism = 5
record-delay-us = {source_delay}
operators = [{{ op = "read-lines" }}]

[[vertices]]
id = "middle"
parallelism = 5
record-delay-us = {middle_delay}
operators = [{{ op = "tokenize", column = "line", as = "word", lowercase = {lowercase} }}]

[[vertices]]
id = "sink"
parallelism = "auto"
bytes-per-task = {bytes_per_task}
max-parallelism = {max_par}
record-delay-us = {sink_delay}
operators = [
  {{ op = "aggregate", key = ["word"], aggregates = [{{ fn = "count", as = "n" }}] }},
  {{ op = "write-text", path = "${{data_dir}}/out" }},
]

[[edges]]
from = "source"
to = "middle"
kind = "forward"

[[edges]]
from = "middle"
to = "sink"
kind = "hash"
key = ["word"]
"#,
            max_attempts = self.max_attempts,
            timeout = self.previous_worker_timeout_ms,
            pause = self.snapshot_min_pause_ms,
            shuffle = crate::support::shuffle_table("shuffle", "local-shuffle", ""),
            source_delay = self.source_delay_us,
            middle_delay = self.middle_delay_us,
            lowercase = self.lowercase,
            bytes_per_task = self.bytes_per_task,
            max_par = self.max_sink_parallelism,
            sink_delay = self.sink_delay_us,
        );
        let job = self.job_file();
        std::fs::create_dir_all(&self.dir).expect("job dir");
        std::fs::write(&job, text).expect("write job");
        job
    }

    /// Run options for this job over `data_dir`.
    pub fn options(&self, data_dir: &Path) -> RunOptions {
        super::job::options(&self.job_file(), data_dir, WORKERS)
    }

    /// Runs to the end (no crash) with `lost` partitions (in-process when
    /// there are none, else through the binary); asserts it finished.
    pub fn run(&self, data_dir: &Path, lost: Vec<LostPartition>) -> Summary {
        let o = self.options(data_dir);
        let summary = if lost.is_empty() {
            run_job(&o).expect("the job starts")
        } else {
            let knobs = Knobs {
                lost_partitions: lost,
                ..Knobs::default()
            };
            super::knobs::run(&o, &knobs).unwrap_or_else(|e| panic!("the job starts: {e}"))
        };
        assert_eq!(
            summary.status,
            JobStatus::Finished,
            "the job did not finish: {:?}\n{summary:#?}",
            summary.error
        );
        summary
    }

    /// Runs the binary until the simulated crash `at`; asserts the run
    /// stopped there. Returns the run's summary when the crash came while
    /// the job ran (a crash during recovery ends the run before it has a
    /// summary).
    pub fn crash(
        &self,
        data_dir: &Path,
        at: CrashPoint,
        lost: Vec<LostPartition>,
    ) -> Option<Summary> {
        let knobs = Knobs {
            crash_at: Some(at.clone()),
            lost_partitions: lost,
            ..Knobs::default()
        };
        match super::knobs::run_to_crash(&self.options(data_dir), &knobs) {
            CrashRun::Crashed(summary) => summary,
            CrashRun::Finished(summary) => panic!(
                "the run was to stop at the simulated crash {at:?}, but it ended: {summary:#?}"
            ),
        }
    }

    /// The output of an uninterrupted run of this job (in a scratch data
    /// directory), sorted; also checked against the test's own word counts.
    pub fn baseline(&self) -> Vec<String> {
        let scratch = tempfile::tempdir().expect("tempdir");
        let summary = self.run(scratch.path(), Vec::new());
        assert_eq!(
            (summary.tasks_reset, summary.tasks_run, summary.recovered),
            (0, summary.tasks_total, false),
            "the uninterrupted run ran every task once: {summary:#?}"
        );
        let lines = sorted_output(scratch.path());
        assert_eq!(
            lines,
            expected_lines(),
            "the uninterrupted run counts every word of the input once"
        );
        lines
    }
}

/// A crash right after the `count`-th finished execution of `vertex`.
pub fn after_finished(vertex: &str, count: u32) -> CrashPoint {
    CrashPoint::AfterFinished {
        vertex: vertex.to_string(),
        count,
    }
}

/// A partition of `producer`'s subtask that disappears before `consumer`'s
/// subtask reads it at `consumer_attempt`.
pub fn lost(
    consumer: &str,
    consumer_subtask: u32,
    consumer_attempt: u32,
    producer: &str,
    producer_subtask: u32,
) -> LostPartition {
    LostPartition {
        consumer: consumer.to_string(),
        consumer_subtask,
        consumer_attempt,
        producer: producer.to_string(),
        producer_subtask,
    }
}

/// The sink folder of T1 under `data_dir`.
pub fn out_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("out")
}

/// The published part files of the sink (checked complete, as
/// [`published_lines`]), as sorted lines.
pub fn sorted_output(data_dir: &Path) -> Vec<String> {
    let mut lines = published_lines(&out_dir(data_dir));
    lines.sort();
    lines
}

/// Every file under `dir` with its bytes (for "untouched" checks).
pub fn tree(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd {
            let p = e.expect("entry").path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.insert(p.clone(), std::fs::read(&p).expect("read"));
            }
        }
    }
    out
}

/// The job's log folder under `data_dir`.
pub fn log_dir(data_dir: &Path) -> PathBuf {
    job_log_dir(data_dir, JOB).expect("job id")
}

/// The segment files of the job's log, oldest first.
pub fn segments(data_dir: &Path) -> Vec<PathBuf> {
    segment_files(&log_dir(data_dir))
}

/// The frames of a segment file: (offset, total length) of every whole
/// record after the header (docs/log-format.md: header 20 + 12·n + 4 bytes;
/// frame = u32 length, u16 kind, u16 version, payload, u32 CRC32C).
pub fn frames(segment: &Path) -> Vec<(u64, u64)> {
    let bytes = std::fs::read(segment).expect("segment");
    assert_eq!(&bytes[..8], b"CHJEVLOG", "segment magic");
    let sealed = u32::from_le_bytes(bytes[16..20].try_into().expect("4 bytes")) as usize;
    let mut at = 20 + 12 * sealed + 4;
    let mut out = Vec::new();
    while at + 8 <= bytes.len() {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes")) as usize;
        let total = 8 + len + 4;
        if at + total > bytes.len() {
            break;
        }
        out.push((at as u64, total as u64));
        at += total;
    }
    out
}

/// The job's event log, replayed read-only.
#[derive(Debug, Clone)]
pub struct Log {
    /// Every whole record, oldest first.
    pub events: Vec<ReplayedEvent>,
    /// Bytes of a torn tail cut from the newest segment.
    pub torn_tail_bytes: u64,
}

impl Log {
    /// Replays the log of T1 under `data_dir`.
    pub fn read(data_dir: &Path) -> Self {
        let r = replay(&FileStorage::open_read_only(&log_dir(data_dir))).expect("log replays");
        Self {
            events: r.events,
            torn_tail_bytes: r.torn_tail.map_or(0, |t| t.bytes_dropped),
        }
    }

    /// The events written by coordinator attempt (segment) `epoch`.
    pub fn of_segment(&self, epoch: u32) -> Vec<JobEvent> {
        self.events
            .iter()
            .filter(|e| e.position.attempt == epoch)
            .map(|e| e.event.clone())
            .collect()
    }

    /// Every event, oldest first.
    pub fn all(&self) -> Vec<JobEvent> {
        self.events.iter().map(|e| e.event.clone()).collect()
    }
}

/// `ExecutionFinished` events of `vertex` among `events`, in order.
pub fn finished_of<'a>(events: &'a [JobEvent], vertex: &str) -> Vec<&'a ExecutionFinished> {
    events
        .iter()
        .filter_map(|e| match e {
            JobEvent::ExecutionFinished(f) if f.attempt.job_vertex == vertex => Some(f),
            _ => None,
        })
        .collect()
}

/// `ExecutionsReset` events of `vertex` among `events`, in order.
pub fn resets_of<'a>(events: &'a [JobEvent], vertex: &str) -> Vec<&'a ExecutionsReset> {
    events
        .iter()
        .filter_map(|e| match e {
            JobEvent::ExecutionsReset(r) if r.executions.iter().any(|x| x.job_vertex == vertex) => {
                Some(r)
            }
            _ => None,
        })
        .collect()
}

/// Every `RecoveryFinished` among `events`, in order.
pub fn recoveries(events: &[JobEvent]) -> Vec<&RecoveryFinished> {
    events
        .iter()
        .filter_map(|e| match e {
            JobEvent::RecoveryFinished(r) => Some(r),
            _ => None,
        })
        .collect()
}

/// The single `RecoveryFinished` among `events`.
pub fn recovery(events: &[JobEvent]) -> RecoveryFinished {
    let all = recoveries(events);
    assert_eq!(all.len(), 1, "one RecoveryFinished: {all:#?}");
    all[0].clone()
}

/// Attempts of `vertex` that a recovery skipped.
pub fn skipped_of(r: &RecoveryFinished, vertex: &str) -> BTreeSet<AttemptId> {
    r.skipped
        .iter()
        .filter(|a| a.job_vertex == vertex)
        .cloned()
        .collect()
}

/// Subtasks of `vertex` that a recovery reset, with their reasons.
pub fn reset_of(r: &RecoveryFinished, vertex: &str) -> BTreeMap<u32, ResetReason> {
    r.reset
        .iter()
        .filter(|x| x.execution.job_vertex == vertex)
        .map(|x| (x.execution.subtask, x.reason.clone()))
        .collect()
}

/// The latest finished attempt of each subtask of `vertex` in `events`
/// (a reset removes the subtask again), as recovery replays it.
pub fn finished_attempts(events: &[JobEvent], vertex: &str) -> BTreeMap<u32, AttemptId> {
    let mut out = BTreeMap::new();
    for e in events {
        match e {
            JobEvent::ExecutionFinished(f) if f.attempt.job_vertex == vertex => {
                out.insert(f.attempt.subtask, f.attempt.clone());
            }
            JobEvent::ExecutionsReset(r) => {
                for x in r.executions.iter().filter(|x| x.job_vertex == vertex) {
                    out.remove(&x.subtask);
                }
            }
            _ => {}
        }
    }
    out
}

/// Splits each subtask of `vertex` had in the newest enumerator snapshot
/// among `events` (the host's assignment history, incremental records
/// folded as replay folds them).
pub fn splits_per_subtask(events: &[JobEvent], vertex: &str) -> BTreeMap<u32, Vec<String>> {
    let mut whole: Option<coordhost::events::EnumeratorSnapshot> = None;
    for e in events {
        match e {
            JobEvent::JobStarted(_) => whole = None,
            JobEvent::ExecutionFinished(f) => {
                for s in f
                    .enumerator_snapshots
                    .iter()
                    .filter(|s| s.job_vertex == vertex)
                {
                    match &mut whole {
                        Some(w) => w.fold(s.clone()),
                        None => whole = Some(s.clone()),
                    }
                }
            }
            _ => {}
        }
    }
    let snap = whole.unwrap_or_else(|| panic!("no enumerator snapshot of `{vertex}` in the log"));
    snap.assignments
        .iter()
        .map(|a| (a.subtask, a.splits.iter().map(|s| s.id.clone()).collect()))
        .collect()
}

/// The summary's figures of `vertex`.
pub fn vertex<'a>(s: &'a Summary, vertex: &str) -> &'a coordhost::job::VertexSummary {
    s.vertices
        .iter()
        .find(|v| v.id == vertex)
        .unwrap_or_else(|| panic!("no vertex `{vertex}` in the summary"))
}

/// A reset count of the summary (0 if absent).
pub fn reasons(s: &Summary, reason: &str) -> u64 {
    s.reset_reasons.get(reason).copied().unwrap_or(0)
}

/// The partition folders of `vertex` under the shuffle root of `data_dir`
/// (`<root>/<job>/<data set>/<vertex>-<subtask>-<attempt>`).
pub fn partition_dirs(data_dir: &Path, vertex: &str) -> Vec<PathBuf> {
    let job = data_dir.join("shuffle").join(JOB);
    let mut out = Vec::new();
    for ds in std::fs::read_dir(&job).into_iter().flatten() {
        let ds = ds.expect("entry").path();
        for p in std::fs::read_dir(&ds).into_iter().flatten() {
            let p = p.expect("entry").path();
            let name = p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            if name
                .strip_prefix(&format!("{vertex}-"))
                .is_some_and(|rest| rest.split('-').count() == 2)
            {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The sorted output of an uninterrupted run of T1 fed by `enumerator`
/// (computed once per test process, in a scratch directory).
pub fn baseline(enumerator: Enumerator) -> Vec<String> {
    static CACHE: std::sync::Mutex<BTreeMap<Enumerator, Vec<String>>> =
        std::sync::Mutex::new(BTreeMap::new());
    let mut cache = CACHE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    cache
        .entry(enumerator)
        .or_insert_with(|| {
            let scratch = tempfile::tempdir().expect("tempdir");
            let t1 = T1::new(scratch.path(), enumerator);
            t1.write();
            t1.baseline()
        })
        .clone()
}

/// Asserts that the sink output under `data_dir` equals an uninterrupted
/// run's, line for line after sorting.
pub fn assert_same_output_as_uninterrupted(data_dir: &Path, enumerator: Enumerator) {
    let got = sorted_output(data_dir);
    let want = baseline(enumerator);
    if got != want {
        let got_set: BTreeSet<&String> = got.iter().collect();
        let want_set: BTreeSet<&String> = want.iter().collect();
        panic!(
            "the output differs from an uninterrupted run's\n  only in this run: {:?}\n  only in the uninterrupted run: {:?}",
            got_set.difference(&want_set).collect::<Vec<_>>(),
            want_set.difference(&got_set).collect::<Vec<_>>()
        );
    }
}

/// The bytes of each of the `n` subpartitions of a partition folder, as
/// its `index` records them (docs/shuffle-format.md: the sum of each
/// subpartition's entries), read here independently of the host's code;
/// `n` zeros without an index. Checks that `data` has the recorded length.
pub fn subpartition_sizes(location: &Path, n: usize) -> Vec<u64> {
    let Ok(index) = std::fs::read(location.join("index")) else {
        return vec![0; n];
    };
    let u32_at = |at: usize| u32::from_le_bytes(index[at..at + 4].try_into().unwrap());
    let u64_at = |at: usize| u64::from_le_bytes(index[at..at + 8].try_into().unwrap());
    assert_eq!(&index[..8], b"CHSHUFX1", "{}", location.display());
    assert_eq!(
        u32_at(12) as usize,
        n,
        "subpartitions of {}",
        location.display()
    );
    let data_len = std::fs::metadata(location.join("data")).map_or(0, |m| m.len());
    assert_eq!(
        u64_at(16),
        data_len,
        "data length of {}",
        location.display()
    );
    assert_eq!(u32_at(8), 2, "format version of {}", location.display());
    let mut sizes = vec![0; n];
    // Past the producer: three length-prefixed names, subtask, attempt.
    let mut at = 28;
    for _ in 0..3 {
        at += 4 + u32_at(at) as usize;
    }
    at += 8;
    for _ in 0..u32_at(24) {
        let entries = u32_at(at);
        at += 4;
        for _ in 0..entries {
            sizes[u32_at(at) as usize] += u64_at(at + 12);
            at += 32;
        }
    }
    assert_eq!(
        at + 4,
        index.len(),
        "the regions fill {}",
        location.display()
    );
    sizes
}
