//! A split enumerator that cannot be restored from its batch snapshot
//! restarts its own source's region, not the job (docs/recovery.md step 5,
//! "Sink output when a region runs again"): through the real `coordhost`
//! binary, a job of two independent pipelines (`a-source` → forward →
//! `a-sink`, `b-source` → forward → `b-sink`) crashes after both
//! progressed; then `b-splits` (the `faulty-enumerator` plugin) returns an
//! error value from `restore` while a marker file exists. The rerun keeps
//! every finished task of pipeline A, runs pipeline B's source again with a
//! fresh enumerator (and, when that source had finished and restarts in
//! full, its sink subtask that had published output too), and the output
//! is exact.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::support::knobs::{CrashPoint, Knobs, RunOutput, run_output};
use crate::support::{plugin_path, published_lines, shuffle_table, toml_string};
use coordhost::events::{FileStorage, JobEvent, ResetReason, job_log_dir, replay};
use coordhost::job::{JobStatus, RunOptions, Summary};

const JOB: &str = "two-pipelines";
/// Splits of pipeline A (one line each).
const A_SPLITS: u32 = 4;
/// Splits of pipeline B: with 2 readers, one reader finishes after one
/// split while the other reads the third one.
const B_SPLITS: u32 = 3;
/// `record-delay-us` of `b-source`: a line of B takes this long, so when
/// the first `b-source` subtask has finished, the other is still reading
/// its second split (and pipeline A, without delays, has long finished).
const B_DELAY_US: u64 = 1_000_000;

struct TwoPipelines {
    tmp: tempfile::TempDir,
    /// While this file exists, `b-splits` fails the calls of `on`.
    marker: PathBuf,
}

impl TwoPipelines {
    /// Writes the job file; `on` is the `faulty-enumerator` calls that fail
    /// (with an error value) while the marker exists.
    fn new(on: &str) -> Self {
        let tmp = tempfile::tempdir().expect("tempdir");
        let markers = tmp.path().join("markers");
        std::fs::create_dir_all(&markers).expect("markers folder");
        let marker = markers.join("FAIL");
        let faulty = toml_string(&plugin_path("faulty-enumerator").display().to_string());
        let text = format!(
            r#"[job]
name = "{JOB}"
max-attempts = 3

[recovery]
enabled = true
snapshot-min-pause-ms = 0

[shuffle]
plugin = "shuffle"

[plugins.a-splits]
component = {faulty}
kind = "split-enumerator"
config = {{ splits = {A_SPLITS} }}

[plugins.b-splits]
component = {faulty}
kind = "split-enumerator"
config = {{ splits = {B_SPLITS}, fault = "error", on = "{on}", fault-while = {marker} }}
dirs = [{{ path = {markers}, writable = false }}]

{shuffle}
[[vertices]]
id = "a-source"
source = "a-splits"
parallelism = 2
operators = [{{ op = "read-lines" }}]

[[vertices]]
id = "a-sink"
parallelism = 2
operators = [{{ op = "write-text", path = "${{data_dir}}/a-out" }}]

[[vertices]]
id = "b-source"
source = "b-splits"
parallelism = 2
record-delay-us = {B_DELAY_US}
operators = [{{ op = "read-lines" }}]

[[vertices]]
id = "b-sink"
parallelism = 2
operators = [{{ op = "write-text", path = "${{data_dir}}/b-out" }}]

[[edges]]
from = "a-source"
to = "a-sink"
kind = "forward"

[[edges]]
from = "b-source"
to = "b-sink"
kind = "forward"
"#,
            marker = toml_string(&marker.display().to_string()),
            markers = toml_string(&markers.display().to_string()),
            shuffle = shuffle_table("shuffle", "local-shuffle", ""),
        );
        std::fs::write(tmp.path().join("job.toml"), text).expect("job file");
        Self { tmp, marker }
    }

    fn data(&self) -> PathBuf {
        self.tmp.path().join("data")
    }

    fn options(&self) -> RunOptions {
        crate::support::job::options(&self.tmp.path().join("job.toml"), &self.data(), 4)
    }

    fn run(&self, knobs: &Knobs) -> RunOutput {
        run_output(&self.options(), knobs)
    }

    /// The first run, stopped right after the first `b-source` subtask
    /// finished (the other still reads its second split); checks what
    /// finished by then.
    fn crash_with_b_source_half_way(&self) {
        self.crash_after_finished("b-source");
        assert_eq!(
            finished_per_vertex(&self.events()),
            BTreeMap::from([
                ("a-sink".to_string(), 2),
                ("a-source".to_string(), 2),
                ("b-source".to_string(), 1),
            ]),
            "pipeline A finished, b-source half-way, when the first run crashed"
        );
    }

    /// The first run, stopped right after the first `b-sink` subtask
    /// finished (its part file published); checks what finished by then.
    fn crash_with_b_sink_half_way(&self) {
        self.crash_after_finished("b-sink");
        assert_eq!(
            finished_per_vertex(&self.events()),
            BTreeMap::from([
                ("a-sink".to_string(), 2),
                ("a-source".to_string(), 2),
                ("b-sink".to_string(), 1),
                ("b-source".to_string(), 2),
            ]),
            "pipeline A finished, b-sink half-way, when the first run crashed"
        );
        assert_eq!(
            crate::support::part_files(&self.data().join("b-out")).len(),
            1,
            "the finished b-sink subtask published its part file before the crash"
        );
    }

    /// The first run, stopped right after the first execution of `vertex`.
    fn crash_after_finished(&self, vertex: &str) {
        let out = self.run(&Knobs::crash(CrashPoint::AfterFinished {
            vertex: vertex.into(),
            count: 1,
        }));
        assert!(
            out.stderr.contains("simulated coordinator crash"),
            "the first run stops at the crash: exit {:?}\n{}",
            out.code,
            out.stderr
        );
    }

    /// Every event of the job's log.
    fn events(&self) -> Vec<JobEvent> {
        let dir = job_log_dir(&self.data(), JOB).expect("job id");
        replay(&FileStorage::open_read_only(&dir))
            .expect("the log replays")
            .events
            .into_iter()
            .map(|e| e.event)
            .collect()
    }

    fn arm(&self) {
        std::fs::write(&self.marker, b"").expect("create the fault marker");
    }

    fn disarm(&self) {
        std::fs::remove_file(&self.marker).expect("remove the fault marker");
    }

    /// Both sinks' output, each checked complete: every split's line once.
    fn assert_output_exact(&self) {
        for (out, splits) in [("a-out", A_SPLITS), ("b-out", B_SPLITS)] {
            let mut lines = published_lines(&self.data().join(out));
            lines.sort();
            let expected: Vec<String> = (0..splits).map(|i| format!("line-{i}")).collect();
            assert_eq!(lines, expected, "{out}: every line exactly once");
        }
    }
}

/// Finished executions per job vertex in `events`.
fn finished_per_vertex(events: &[JobEvent]) -> BTreeMap<String, u32> {
    let mut n = BTreeMap::new();
    for e in events {
        if let JobEvent::ExecutionFinished(f) = e {
            *n.entry(f.attempt.job_vertex.clone()).or_insert(0) += 1;
        }
    }
    n
}

fn vertex<'a>(summary: &'a Summary, id: &str) -> &'a coordhost::job::VertexSummary {
    summary
        .vertices
        .iter()
        .find(|v| v.id == id)
        .unwrap_or_else(|| panic!("no vertex {id} in {summary:#?}"))
}

/// The `RecoveryFinished` of the last recovery in `events`: reset reasons
/// by (vertex, subtask).
fn last_recovery_resets(events: &[JobEvent]) -> BTreeMap<(String, u32), ResetReason> {
    let finished = events
        .iter()
        .rev()
        .find_map(|e| match e {
            JobEvent::RecoveryFinished(r) => Some(r),
            _ => None,
        })
        .expect("a RecoveryFinished");
    finished
        .reset
        .iter()
        .map(|r| {
            (
                (r.execution.job_vertex.clone(), r.execution.subtask),
                r.reason.clone(),
            )
        })
        .collect()
}

/// Asserts the run kept all of pipeline A (4 tasks) and read every split
/// of B again from a fresh enumerator.
fn assert_kept_a_and_reran_b_source(summary: &Summary, stderr: &str) {
    assert!(summary.recovered, "{summary:#?}");
    assert_eq!(
        summary.tasks_skipped, 4,
        "pipeline A is skipped: {summary:#?}\n{stderr}"
    );
    for id in ["a-source", "a-sink"] {
        let v = vertex(summary, id);
        assert_eq!(
            (v.skipped, v.records_in),
            (2, 0),
            "{id} did not run again: {summary:#?}"
        );
    }
    assert_eq!(vertex(summary, "a-source").splits_assigned, 0);
    let b = vertex(summary, "b-source");
    assert_eq!(
        (b.skipped, b.records_in, b.splits_assigned),
        (0, u64::from(B_SPLITS), u64::from(B_SPLITS)),
        "a fresh enumerator handed out every split of B again: {summary:#?}"
    );
    assert_eq!(vertex(summary, "b-sink").skipped, 0, "{summary:#?}");
    assert_eq!(
        summary.tasks_run, 4,
        "both b-source and both b-sink subtasks ran: {summary:#?}\n{stderr}"
    );
}

/// The one warning line that says why B starts over, checked.
fn assert_one_restore_warning(stderr: &str) {
    let warning: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("error on restore"))
        .collect();
    assert_eq!(
        warning.len(),
        1,
        "one warning line says why B starts over:\n{stderr}"
    );
    assert!(
        warning[0].contains("`b-splits`")
            && warning[0].contains("`b-source`")
            && warning[0].contains("faulty-enumerator: error on restore")
            && warning[0].contains("fresh split enumerator"),
        "the line names the plugin, the vertex, its error and what happens: {}",
        warning[0]
    );
}

#[test]
fn an_enumerator_whose_restore_fails_restarts_its_source_and_the_other_pipeline_is_kept() {
    let job = TwoPipelines::new("restore");
    job.crash_with_b_source_half_way();
    job.arm();

    let out = job.run(&Knobs::default());
    assert_eq!(
        out.code,
        Some(0),
        "the rerun finishes the job:\n{}",
        out.stderr
    );
    let summary = out.summary.expect("--summary-json is written");
    assert_eq!(summary.status, JobStatus::Finished);
    assert_kept_a_and_reran_b_source(&summary, &out.stderr);
    assert_eq!(
        summary.reset_reasons,
        BTreeMap::from([("enumerator-restore-failed".to_string(), 2)]),
        "both b-source subtasks (the finished one too); b-sink was not initialized yet"
    );
    assert_one_restore_warning(&out.stderr);
    let resets = last_recovery_resets(&job.events());
    for s in 0..2 {
        assert_eq!(
            resets.get(&("b-source".to_string(), s)),
            Some(&ResetReason::RecoveryEnumeratorRestoreFailed),
            "{resets:?}"
        );
    }
    assert!(
        !resets.keys().any(|(v, _)| v.starts_with("a-")),
        "nothing of A is reset: {resets:?}"
    );
    job.assert_output_exact();
}

#[test]
fn a_finished_source_whose_restore_fails_restarts_in_full_with_its_published_sink_output_once() {
    let job = TwoPipelines::new("restore");
    job.crash_with_b_sink_half_way();
    let before = job.events();
    // The b-sink subtask that has not run reads the b-source subtask of
    // its index (forward): that partition is gone, so b-source restarts.
    let published = before
        .iter()
        .find_map(|e| match e {
            JobEvent::SinkCommitted(c) if c.attempt.job_vertex == "b-sink" => {
                Some(c.attempt.clone())
            }
            _ => None,
        })
        .expect("a b-sink subtask published");
    let unfinished = 1 - published.subtask;
    let lost = before
        .iter()
        .find_map(|e| match e {
            JobEvent::ExecutionFinished(f)
                if f.attempt.job_vertex == "b-source" && f.attempt.subtask == unfinished =>
            {
                Some(PathBuf::from(&f.produced[0].location))
            }
            _ => None,
        })
        .expect("the b-source subtask finished");
    std::fs::remove_dir_all(&lost).expect("delete the partition");
    job.arm();

    let out = job.run(&Knobs::default());
    assert_eq!(
        out.code,
        Some(0),
        "the rerun finishes the job:\n{}",
        out.stderr
    );
    let summary = out.summary.expect("--summary-json is written");
    assert_kept_a_and_reran_b_source(&summary, &out.stderr);
    assert_eq!(
        summary.reset_reasons,
        BTreeMap::from([
            ("partition-missing".to_string(), 1),
            ("enumerator-restore-failed".to_string(), 1),
            ("upstream-reset".to_string(), 1),
            ("unfinished".to_string(), 1),
        ]),
        "the lost partition's producer, the other b-source subtask with it (a \
         fresh enumerator), the b-sink subtask that had published (it read the \
         old split assignment) and the one that had not"
    );
    assert_one_restore_warning(&out.stderr);
    let resets = last_recovery_resets(&job.events());
    assert!(
        matches!(
            resets.get(&("b-sink".to_string(), published.subtask)),
            Some(ResetReason::RecoveryUpstreamReset { upstream }) if upstream.job_vertex == "b-source"
        ),
        "{resets:?}"
    );
    // The published part file was published again, by a later attempt.
    let republished: Vec<u32> = job
        .events()
        .iter()
        .skip(before.len())
        .filter_map(|e| match e {
            JobEvent::SinkCommitted(c)
                if c.attempt.job_vertex == "b-sink" && c.attempt.subtask == published.subtask =>
            {
                Some(c.attempt.attempt)
            }
            _ => None,
        })
        .collect();
    assert!(
        republished.len() == 1 && republished[0] > published.attempt,
        "part file {} replaced once, by a later attempt: {republished:?}",
        published.subtask
    );
    job.assert_output_exact();
}

#[test]
fn an_enumerator_that_can_be_neither_restored_nor_created_fails_the_run_naming_it_and_loses_nothing()
 {
    let job = TwoPipelines::new("restore,create");
    job.crash_with_b_source_half_way();
    job.arm();

    let out = job.run(&Knobs::default());
    assert_eq!(out.code, Some(1), "a failed run:\n{}", out.stderr);
    let line = out
        .stderr
        .lines()
        .rfind(|l| l.starts_with("coordhost:"))
        .unwrap_or_else(|| panic!("no `coordhost:` line:\n{}", out.stderr));
    assert!(
        line.contains("`b-splits`")
            && line.contains("`b-source`")
            && line.contains("faulty-enumerator: error on create"),
        "the error names the plugin, the vertex and the plugin's error: {line}"
    );
    assert_one_restore_warning(&out.stderr);
    let summary = out.summary.expect("--summary-json is written");
    assert_eq!(summary.status, JobStatus::Failed, "{summary:#?}");
    assert_eq!(
        finished_per_vertex(&job.events()).get("a-sink"),
        Some(&2),
        "the log still holds pipeline A's work"
    );
    assert!(
        !job.data().join("a-out").join("_SUCCESS").exists(),
        "nothing is published as complete"
    );

    // The fault goes away: the next run recovers A's work and finishes.
    job.disarm();
    let out = job.run(&Knobs::default());
    assert_eq!(out.code, Some(0), "the next run finishes:\n{}", out.stderr);
    let summary = out.summary.expect("--summary-json is written");
    assert!(summary.recovered, "{summary:#?}");
    assert_eq!(
        summary.tasks_skipped, 4,
        "pipeline A is still skipped: {summary:#?}"
    );
    assert_eq!(vertex(&summary, "b-source").records_in, u64::from(B_SPLITS));
    job.assert_output_exact();
}
