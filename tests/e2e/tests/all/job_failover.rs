//! Failover within a run: a failed attempt re-runs (bounded), a consumer
//! that finds an input partition missing resets its producer first, splits
//! of a reset source go back to the enumerator, and the sink never
//! duplicates or drops rows.

use std::collections::BTreeMap;
use std::path::Path;

use crate::support::job::{example_job, options, run_ok, word_count_output};
use crate::support::knobs::{InjectedFault, Knobs, LostPartition, run_ok_with};
use crate::support::{expected_word_counts, plugin_path};
use coordhost::job::JobStatus;

fn faults(faults: &[(&str, u32, u32, u64)]) -> Knobs {
    Knobs {
        faults: faults
            .iter()
            .map(|&(vertex, subtask, attempt, after_records)| InjectedFault {
                vertex: vertex.into(),
                subtask,
                attempt,
                after_records,
            })
            .collect(),
        ..Knobs::default()
    }
}

fn wordcount(tmp: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let data = tmp.join("words");
    coordhost_datagen::write_words(&data, 4, 1200, 3).expect("data");
    // Small splits, so that every reader reads several.
    let job = example_job("wordcount.toml", "build/data/words", &data, tmp);
    let text = std::fs::read_to_string(&job)
        .expect("job")
        .replace("split-bytes = 1048576", "split-bytes = 20000");
    std::fs::write(&job, text).expect("job");
    (job, data)
}

#[test]
fn a_source_attempt_that_fails_midway_reruns_and_no_word_is_counted_twice() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (job, data) = wordcount(tmp.path());
    let opts = options(&job, &tmp.path().join("state"), 2);
    let summary = run_ok_with(&opts, &faults(&[("tokenize", 0, 0, 100)]));
    assert_eq!(summary.tasks_reset, 1);
    assert_eq!(summary.tasks_run, summary.tasks_total + 1);
    assert_eq!(
        word_count_output(&tmp.path().join("state/output/wordcount")),
        expected_word_counts(&data)
    );
}

#[test]
fn a_sink_attempt_that_fails_midway_reruns_and_publishes_once() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (job, data) = wordcount(tmp.path());
    let opts = options(&job, &tmp.path().join("state"), 2);
    let summary = run_ok_with(&opts, &faults(&[("count", 0, 0, 100)]));
    assert_eq!(summary.tasks_reset, 1);
    assert_eq!(
        word_count_output(&tmp.path().join("state/output/wordcount")),
        expected_word_counts(&data)
    );
}

#[test]
fn an_execution_vertex_out_of_attempts_fails_the_job_naming_it() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (job, _) = wordcount(tmp.path());
    let text = std::fs::read_to_string(&job)
        .expect("job")
        .replace("max-attempts = 3", "max-attempts = 2");
    std::fs::write(&job, text).expect("job");
    let opts = options(&job, &tmp.path().join("state"), 2);
    let knobs = faults(&[("count", 0, 0, 10), ("count", 0, 1, 10)]);
    let summary =
        crate::support::knobs::run(&opts, &knobs).unwrap_or_else(|e| panic!("the job starts: {e}"));
    assert_eq!(summary.status, JobStatus::Failed);
    let error = summary.error.expect("an error");
    assert!(
        error.contains("vertex `count` subtask 0 failed on attempt 1"),
        "{error}"
    );
    assert!(!tmp.path().join("state/output/wordcount/_SUCCESS").exists());
}

/// Topology T1 of docs/recovery.md: `source` (5, a static enumerator with 10
/// inline splits) → forward → `middle` (5) → hash → `sink` (auto).
fn t1_job(dir: &Path) -> (std::path::PathBuf, BTreeMap<String, u64>) {
    let mut splits = String::new();
    let mut expected: BTreeMap<String, u64> = BTreeMap::new();
    for i in 0..10 {
        let text: Vec<String> = (0..30)
            .map(|j| format!("w{} w{} shared", (i * 7 + j) % 13, j % 5))
            .collect();
        for line in &text {
            for w in line.split(' ') {
                *expected.entry(w.to_string()).or_default() += 1;
            }
        }
        splits.push_str(&format!("\"split.{i}\" = \"{}\", ", text.join("\\n")));
    }
    let toml = format!(
        r#"
[job]
name = "t1"
max-attempts = 3

[shuffle]
plugin = "shuffle"

[plugins.splits]
component = "{enumerator}"
kind = "split-enumerator"
config = {{ {splits} }}

{shuffle}
[[vertices]]
id = "source"
source = "splits"
parallelism = 5
# Slow readers (60 ms a split), so that source 0 pulls a split before the
# others have drained the enumerator and its partition holds bytes.
record-delay-us = 2000
operators = [{{ op = "read-lines" }}]

[[vertices]]
id = "middle"
parallelism = 5
operators = [{{ op = "tokenize", column = "line", as = "word" }}]

[[vertices]]
id = "sink"
parallelism = "auto"
bytes-per-task = 1500
max-parallelism = 4
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
        enumerator = plugin_path("static-enumerator").display(),
        shuffle = crate::support::shuffle_table("shuffle", "local-shuffle", ""),
    );
    let job = dir.join("t1.toml");
    std::fs::write(&job, toml).expect("job");
    (job, expected)
}

#[test]
fn a_lost_partition_resets_its_producer_first_and_its_splits_are_read_again() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (job, expected) = t1_job(tmp.path());
    let state = tmp.path().join("state");
    let opts = options(&job, &state, 2);
    let knobs = Knobs {
        lost_partitions: vec![LostPartition {
            consumer: "middle".into(),
            consumer_subtask: 0,
            consumer_attempt: 0,
            producer: "source".into(),
            producer_subtask: 0,
        }],
        ..Knobs::default()
    };
    let summary = run_ok_with(&opts, &knobs);
    // middle 0 failed with PartitionNotFound: source 0 and middle 0 were reset.
    assert_eq!(summary.tasks_reset, 2, "{summary:?}");
    assert_eq!(summary.tasks_run, summary.tasks_total + 2);
    assert_eq!(
        summary.vertices[0].records_in, 300,
        "every split read exactly once by a finished source"
    );
    assert!(
        summary.vertices[2].parallelism > 1,
        "auto chose {}",
        summary.vertices[2].parallelism
    );
    assert_eq!(word_count_output(&state.join("out")), expected);
}

#[test]
fn t1_without_faults_reads_every_split_once() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (job, expected) = t1_job(tmp.path());
    let state = tmp.path().join("state");
    let summary = run_ok(&options(&job, &state, 1));
    assert_eq!(
        (summary.tasks_reset, summary.tasks_run),
        (0, summary.tasks_total)
    );
    assert_eq!(summary.vertices[0].records_in, 300);
    assert_eq!(word_count_output(&state.join("out")), expected);
}

/// `source` (1 subtask, one inline split holding only the word `aaa`) →
/// hash → `sink` (4 subtasks): the source's partition holds bytes for one
/// subpartition only.
fn one_word_job(dir: &Path) -> std::path::PathBuf {
    let toml = format!(
        r#"
[job]
name = "one-word"
max-attempts = 3

[shuffle]
plugin = "shuffle"

[plugins.splits]
component = "{enumerator}"
kind = "split-enumerator"
config = {{ "split.0" = "aaa aaa\naaa" }}

{shuffle}
[[vertices]]
id = "source"
source = "splits"
parallelism = 1
operators = [{{ op = "read-lines" }}, {{ op = "tokenize", column = "line", as = "word" }}]

[[vertices]]
id = "sink"
parallelism = 4
operators = [
  {{ op = "aggregate", key = ["word"], aggregates = [{{ fn = "count", as = "n" }}] }},
  {{ op = "write-text", path = "${{data_dir}}/out" }},
]

[[edges]]
from = "source"
to = "sink"
kind = "hash"
key = ["word"]
"#,
        enumerator = plugin_path("static-enumerator").display(),
        shuffle = crate::support::shuffle_table("shuffle", "local-shuffle", ""),
    );
    let job = dir.join("one-word.toml");
    std::fs::write(&job, toml).expect("job");
    job
}

/// docs/shuffle-format.md, "Reading": a consumer does not open a producer's
/// partition that holds no byte for it (Spark's zero-size block skip). The
/// source's partition is lost before the first consumer is deployed, so all
/// four consumers run after the loss: only the one that reads `aaa` fails
/// with PartitionNotFound (the three others have nothing there and skip
/// it), and only it and the producer are reset.
#[test]
fn a_lost_partition_fails_only_the_consumer_it_holds_bytes_for() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let job = one_word_job(tmp.path());
    let state = tmp.path().join("state");
    let knobs = Knobs {
        lost_partitions: vec![LostPartition {
            consumer: "sink".into(),
            consumer_subtask: 0,
            consumer_attempt: 0,
            producer: "source".into(),
            producer_subtask: 0,
        }],
        ..Knobs::default()
    };
    let summary = run_ok_with(&options(&job, &state, 1), &knobs);
    assert_eq!(
        summary.reset_reasons.get("partition-not-found"),
        Some(&1),
        "{summary:?}"
    );
    assert_eq!(summary.tasks_reset, 2, "{summary:?}");
    assert_eq!(
        word_count_output(&state.join("out")),
        BTreeMap::from([("aaa".to_string(), 3)])
    );
}

#[test]
fn a_failure_the_log_could_not_record_is_not_reported_as_the_end_of_the_job() {
    // The job fails on its own (`count` out of attempts), and its
    // `JobFailed` cannot be made durable (as when the leadership is lost
    // between the failure and its record). The next run or leader finds no
    // failure and recovers the job, so this run must not say the job ended
    // failed (Flink's FLINK-39704 re-ran a job reported failed;
    // docs/recovery.md, "How a run ends"; the simulator's invariant 5).
    let tmp = tempfile::tempdir().expect("tempdir");
    let (job, data) = wordcount(tmp.path());
    let text = std::fs::read_to_string(&job)
        .expect("job")
        .replace("max-attempts = 3", "max-attempts = 2");
    std::fs::write(&job, text).expect("job");
    let state = tmp.path().join("state");
    let opts = options(&job, &state, 2);
    let failpoints = "task::fail::count::0::0=return(10);task::fail::count::0::1=return(10);\
                      job::job-failed-not-recorded=return";
    let out = crate::support::knobs::run_output_with_failpoints(&opts, failpoints, &[]);
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    let summary = out.summary.expect("a summary");
    assert_eq!(summary.status, JobStatus::Failed);
    let error = summary.error.expect("an error");
    assert!(
        error.contains("vertex `count` subtask 0 failed on attempt 1"),
        "the job's own error first: {error}"
    );
    assert!(
        error.contains(
            "this failure could not be recorded in the event log (test knob job::job-failed-not-recorded: the record was refused): the next run or leader recovers the job"
        ),
        "{error}"
    );
    // The error line the user sees is the same.
    assert!(
        out.stderr
            .lines()
            .any(|l| l.starts_with("coordhost: ") && l.contains("could not be recorded")),
        "{}",
        out.stderr
    );
    let log = crate::support::coordhost()
        .args(["log", "inspect"])
        .arg(state.join("wordcount"))
        .arg("--json")
        .output()
        .expect("log inspect");
    assert!(log.status.success(), "{log:?}");
    let text = String::from_utf8_lossy(&log.stdout);
    assert!(text.contains("\"JobStarted\""), "{text}");
    assert!(!text.contains("\"JobFailed\""), "{text}");
    // The next run recovers the job and finishes it.
    let summary = run_ok(&opts);
    assert!(summary.tasks_skipped > 0, "{summary:?}");
    assert_eq!(
        word_count_output(&state.join("output/wordcount")),
        expected_word_counts(&data)
    );
}
