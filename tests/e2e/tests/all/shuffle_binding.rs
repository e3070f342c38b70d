//! A result partition is bound to its producer (docs/shuffle-format.md,
//! "Reading" and "What a shuffle master checks"): a partition that is not
//! the one its producer wrote is never read as input. Through the real
//! `coordhost run` with the sample plugins, on a word count whose two
//! source subtasks write partitions of exactly the same bytes per
//! subpartition but other counts (so sizes alone cannot tell them apart),
//! source 0's partition is replaced
//!
//! - mid-run, while the scheduler is held after both sources finished
//!   (fail point `crash::finished::tokenize` set to `sleep`): by a valid
//!   empty partition that names the right producer, by a copy of source 1's
//!   `data` and `index`, or by source 1's `data` hard-linked under its own
//!   index. Only the consumer's checks stand between these and the sink;
//! - after a simulated crash right after both sources finished, before the
//!   rerun: by a copy of source 1's `data` and `index` (the shuffle master
//!   sees an index naming another producer: the partition is missing at
//!   recovery), by a valid empty partition (the shuffle master reports 0
//!   bytes where the log recorded others), or by source 1's `data`
//!   hard-linked (the shuffle master sees nothing wrong, sizes are equal;
//!   the consumer's check of the entries' blocks finds it).
//!
//! A mid-run copy is also run on two worker processes: source 1's partition
//! (on `w1`) is replaced by source 0's, and a consumer on `w0` reads it
//! through `ReadSubpartitions` and refuses it itself.
//!
//! The copy before a rerun is also run with the Python shuffle master
//! (`py-shuffle`), which must leave the partition out as the Rust one does.
//!
//! Each run must end with exit 0 and exactly the word counts of the input,
//! the forged partition's producer having run again — never exit 0 with
//! other counts.

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::support::crash::{
    EventLog, JOB, SINK, SOURCE, WordJob, expected_output, first_difference, sorted_output,
    sources_done,
};
use crate::support::workers::{Workers, external_args, free_port};

/// Words both source files hold once each.
const VOCABULARY: usize = 300;
/// How often the skewed word appears in its file (and the other in it once).
const SKEW: usize = 300;

/// Two files of the same words with other counts: `a.txt` holds `alpha`
/// [`SKEW`] times and `beta` once, `b.txt` the other way round. Their
/// partial aggregates have the same rows but other counts, hence equal
/// bytes per subpartition (counts are 8-byte integers).
fn write_input(dir: &Path) {
    std::fs::create_dir_all(dir).expect("input dir");
    let vocabulary: Vec<String> = (0..VOCABULARY).map(|i| format!("w{i:03}")).collect();
    for (name, many, once) in [("a.txt", "alpha", "beta"), ("b.txt", "beta", "alpha")] {
        let mut text = String::new();
        for line in vocabulary.chunks(10) {
            text += &line.join(" ");
            text.push('\n');
        }
        for _ in 0..SKEW {
            text += many;
            text.push('\n');
        }
        text += once;
        text.push('\n');
        std::fs::write(dir.join(name), text).expect("input file");
    }
}

/// A test's folder: the input, the job file, the data directory.
struct Fixture {
    tmp: tempfile::TempDir,
    input: PathBuf,
    job: PathBuf,
    data_dir: PathBuf,
    /// More arguments of `run` (worker processes).
    extra_args: Vec<String>,
}

impl Fixture {
    fn new() -> Self {
        Self::with_shuffle("local-shuffle")
    }

    /// As [`Fixture::new`], with the shuffle master component `shuffle`.
    fn with_shuffle(shuffle: &'static str) -> Self {
        let tmp = tempfile::tempdir().expect("tempdir");
        let input = tmp.path().join("words");
        write_input(&input);
        // Two sources, one whole file each (both ask for a split at once,
        // and a slow first split keeps each from asking for a second
        // before the other got its own).
        let job = WordJob {
            sources: 2,
            split_bytes: 1 << 20,
            workers: 4,
            source_delay_us: 2_000,
            sink_delay_us: 0,
            bytes_per_task: 1_000,
            max_sink_parallelism: 4,
            previous_worker_timeout_ms: 3_000,
            shuffle_plugin: shuffle,
            ..WordJob::new(&input)
        }
        .write(&tmp.path().join("job.toml"));
        let data_dir = tmp.path().join("data");
        Self {
            tmp,
            input,
            job,
            data_dir,
            extra_args: Vec::new(),
        }
    }

    /// Spawns `coordhost run` with `FAILPOINTS=failpoints`; stderr goes to
    /// `<data>.run<n>.err`.
    fn spawn(&self, failpoints: &str, n: u32) -> (Child, PathBuf) {
        let err = PathBuf::from(format!("{}.run{n}.err", self.data_dir.display()));
        let child = crate::support::coordhost()
            .arg("run")
            .arg(&self.job)
            .arg("--data-dir")
            .arg(&self.data_dir)
            .args(&self.extra_args)
            .env("FAILPOINTS", failpoints)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&err).expect("stderr file"))
            .spawn()
            .expect("spawn coordhost");
        (child, err)
    }

    /// Runs to the end; the exit code and stderr.
    fn run(&self, failpoints: &str, n: u32) -> (Option<i32>, String) {
        let (mut child, err) = self.spawn(failpoints, n);
        let status = wait(&mut child, Duration::from_secs(240));
        (status, std::fs::read_to_string(err).unwrap_or_default())
    }
}

/// Waits for `child` at most `guard`; its exit code.
fn wait(child: &mut Child, guard: Duration) -> Option<i32> {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status.code();
        }
        if start.elapsed() > guard {
            let _ignored = child.kill();
            panic!("coordhost ran longer than {guard:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Source subtask `subtask`'s latest recorded partition: its folder and
/// bytes per subpartition.
fn source_partition(log: &EventLog, subtask: u64) -> (PathBuf, Vec<u64>) {
    let b = log
        .events
        .iter()
        .filter(|e| e["event"]["kind"] == "ExecutionFinished")
        .map(|e| &e["event"]["event"])
        .rfind(|b| b["attempt"]["job_vertex"] == SOURCE && b["attempt"]["subtask"] == subtask)
        .unwrap_or_else(|| panic!("no finished {SOURCE} {subtask} in the log"));
    let p = &b["produced"][0];
    let location = PathBuf::from(p["location"].as_str().expect("a location"));
    let bytes = p["bytes_per_subpartition"]
        .as_array()
        .expect("bytes")
        .iter()
        .map(|v| v.as_u64().expect("a byte count"))
        .collect();
    (location, bytes)
}

/// The two sources' partitions, checked to hold equal bytes per
/// subpartition (else a swap would be refused by its sizes alone and the
/// test would prove nothing about the binding), and their number of
/// subpartitions.
fn equal_partitions(data_dir: &Path) -> (PathBuf, PathBuf, u32) {
    let log = EventLog::read(data_dir).expect("the event log");
    let (p0, b0) = source_partition(&log, 0);
    let (p1, b1) = source_partition(&log, 1);
    assert_eq!(
        b0, b1,
        "the two sources' partitions have equal bytes per subpartition (each source read one file)"
    );
    assert!(b0.iter().sum::<u64>() > 0, "they hold rows");
    (p0, p1, u32::try_from(b0.len()).expect("a count"))
}

/// Reset reasons the log records for `vertex` subtask `subtask`, in order.
fn reset_reasons(data_dir: &Path, vertex: &str, subtask: u64) -> Vec<String> {
    let log = EventLog::read(data_dir).expect("the event log");
    log.events
        .iter()
        .filter(|e| e["event"]["kind"] == "ExecutionsReset")
        .map(|e| &e["event"]["event"])
        .filter(|b| {
            b["executions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|x| x["job_vertex"] == vertex && x["subtask"] == subtask)
        })
        .map(|b| b["reason"].to_string())
        .collect()
}

/// Asserts that `SOURCE` 0 was reset for `reason` (a `ResetReason` kind).
fn assert_reset_for(data_dir: &Path, reason: &str, how: Forgery) {
    assert_subtask_reset_for(data_dir, 0, reason, how);
}

/// Asserts that `SOURCE` `subtask` was reset for `reason`.
fn assert_subtask_reset_for(data_dir: &Path, subtask: u32, reason: &str, how: Forgery) {
    let reasons = reset_reasons(data_dir, SOURCE, u64::from(subtask));
    assert!(
        reasons.iter().any(|r| r.contains(reason)),
        "{how:?}: {SOURCE} {subtask} was reset for {reason}: {reasons:?}"
    );
}

/// How source 0's partition is replaced.
#[derive(Debug, Clone, Copy)]
enum Forgery {
    /// A valid empty partition naming source 0 (attempt 0) written in its place.
    EmptyOfTheRightProducer,
    /// Source 1's `data` and `index` copied over source 0's.
    CopyOfAnotherProducer,
    /// Source 0's `data` replaced by a hard link to source 1's.
    HardLinkedData,
}

/// Replaces the partition at `p0`, source `victim`'s, as `how` says (`p1`:
/// the other source's partition; `n`: subpartitions).
fn forge(how: Forgery, victim: u32, p0: &Path, p1: &Path, n: u32) {
    match how {
        Forgery::EmptyOfTheRightProducer => {
            // The host's own writer: what is left is exactly a valid,
            // complete partition of the right producer with no rows.
            let producer = coordhost::shuffle::PartitionProducer {
                job: JOB.into(),
                data_set: format!("{SOURCE}-{SINK}"),
                job_vertex: SOURCE.into(),
                subtask: victim,
                attempt: 0,
            };
            coordhost::shuffle::PartitionWriter::create(p0, n, producer)
                .and_then(coordhost::shuffle::PartitionWriter::finish)
                .expect("an empty partition");
        }
        Forgery::CopyOfAnotherProducer => {
            for file in ["data", "index"] {
                std::fs::copy(p1.join(file), p0.join(file)).expect("copy");
            }
        }
        Forgery::HardLinkedData => {
            std::fs::remove_file(p0.join("data")).expect("remove data");
            std::fs::hard_link(p1.join("data"), p0.join("data")).expect("hard link");
        }
    }
}

/// The run ended exactly: exit 0 and the input's word counts; source 0 ran
/// again (some attempt above 0 finished).
fn assert_exact(fx: &Fixture, code: Option<i32>, stderr: &str, how: Forgery) {
    assert_exact_rerun(fx, code, stderr, how, 0);
}

/// As [`assert_exact`], for source `victim`.
fn assert_exact_rerun(fx: &Fixture, code: Option<i32>, stderr: &str, how: Forgery, victim: u32) {
    assert_eq!(code, Some(0), "{how:?}: the job finishes:\n{stderr}");
    let got = sorted_output(&fx.data_dir);
    let want = expected_output(&fx.input);
    assert!(
        got == want,
        "{how:?}: the output is wrong: {}",
        first_difference(&got, &want)
    );
    let log = EventLog::read(&fx.data_dir).expect("the event log");
    let attempts = log.finished_attempts(SOURCE);
    assert!(
        attempts.iter().any(|&(s, a)| s == victim && a > 0),
        "{how:?}: {SOURCE} {victim} ran again: {attempts:?}"
    );
}

/// Runs the job, holds the scheduler for 6 s once both sources finished,
/// forges source 0's partition meanwhile, lets the run go on.
fn forged_mid_run(how: Forgery) {
    let fx = Fixture::new();
    let (mut child, err) = fx.spawn("crash::finished::tokenize=1*off->1*sleep(6000)", 1);
    let start = Instant::now();
    while sources_done(&fx.data_dir, 2).is_none() {
        assert!(
            child.try_wait().expect("wait").is_none(),
            "the run ended before both sources finished:\n{}",
            std::fs::read_to_string(&err).unwrap_or_default()
        );
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "sources never finished"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let (p0, p1, n) = equal_partitions(&fx.data_dir);
    forge(how, 0, &p0, &p1, n);
    let held = start.elapsed();
    let code = wait(&mut child, Duration::from_secs(240));
    let stderr = std::fs::read_to_string(&err).unwrap_or_default();
    eprintln!("{how:?}: forged after {held:?}\n{stderr}");
    assert_exact(&fx, code, &stderr, how);
    // Only a consumer could see it: the shuffle master is not asked mid-run.
    assert_reset_for(&fx.data_dir, "PartitionNotFound", how);
}

#[test]
fn a_valid_empty_partition_put_in_place_mid_run_makes_its_producer_run_again() {
    forged_mid_run(Forgery::EmptyOfTheRightProducer);
}

#[test]
fn another_producers_partition_of_equal_size_copied_in_mid_run_is_not_read() {
    forged_mid_run(Forgery::CopyOfAnotherProducer);
}

#[test]
fn another_producers_data_hard_linked_in_mid_run_is_not_read() {
    forged_mid_run(Forgery::HardLinkedData);
}

/// Runs the job to a simulated crash right after both sources finished,
/// forges source 0's partition, runs the same command again; the rerun's
/// stderr and data directory.
fn forged_after_crash(how: Forgery) -> (String, Fixture) {
    forged_after_crash_with(how, Fixture::new())
}

/// As [`forged_after_crash`], on the fixture `fx`.
fn forged_after_crash_with(how: Forgery, fx: Fixture) -> (String, Fixture) {
    let (code, stderr) = fx.run("crash::finished::tokenize=1*off->return", 1);
    assert!(
        stderr.contains("simulated coordinator crash"),
        "the first run crashed on purpose (exit {code:?}):\n{stderr}"
    );
    let (p0, p1, n) = equal_partitions(&fx.data_dir);
    forge(how, 0, &p0, &p1, n);
    let (code, stderr) = fx.run("", 2);
    eprintln!("{how:?}: the rerun\n{stderr}");
    assert_exact(&fx, code, &stderr, how);
    (stderr, fx)
}

#[test]
fn another_producers_partition_copied_in_before_a_rerun_is_missing_at_recovery() {
    let how = Forgery::CopyOfAnotherProducer;
    let (_, fx) = forged_after_crash(how);
    // The shuffle master left it out of its report: its index names
    // another producer.
    assert_reset_for(&fx.data_dir, "RecoveryPartitionMissing", how);
}

#[test]
fn the_python_shuffle_master_refuses_another_producers_partition_copied_in_before_a_rerun() {
    let how = Forgery::CopyOfAnotherProducer;
    let (stderr, fx) = forged_after_crash_with(how, Fixture::with_shuffle("py-shuffle"));
    assert_reset_for(&fx.data_dir, "RecoveryPartitionMissing", how);
    assert!(
        stderr.contains("names producer"),
        "py-shuffle says why it left the partition out:\n{stderr}"
    );
}

#[test]
fn another_producers_data_hard_linked_in_before_a_rerun_is_refused_by_its_consumer() {
    let how = Forgery::HardLinkedData;
    let (_, fx) = forged_after_crash(how);
    // Sizes and index are right, so recovery keeps it; the consumer finds
    // the blocks are not the index's.
    assert_reset_for(&fx.data_dir, "PartitionNotFound", how);
}

#[test]
fn a_valid_empty_partition_put_in_place_before_a_rerun_is_missing_at_recovery() {
    // The shuffle master reports 0 bytes where the log recorded others.
    let how = Forgery::EmptyOfTheRightProducer;
    let (_, fx) = forged_after_crash(how);
    assert_reset_for(&fx.data_dir, "RecoveryPartitionMissing", how);
}

/// Where worker `i` keeps the partition the coordinator names `location`
/// (below `<worker data>/partitions/`, at its path relative to the shuffle
/// master's grant, `<data>/shuffle`).
fn on_worker(fx: &Fixture, workers: &Workers, location: &Path) -> Option<PathBuf> {
    let relative = location
        .strip_prefix(fx.data_dir.join("shuffle"))
        .expect("a location under the shuffle root");
    (0..2)
        .map(|i| workers.data_dir(i).join("partitions").join(relative))
        .find(|p| p.join("index").is_file())
}

/// On two workers of two slots: source 0 runs on `w0`, source 1 on `w1`
/// (most free slots first, ties by id), and the first consumer subtask on
/// `w0`, so it reads source 1's partition from `w1` through
/// `ReadSubpartitions`. Source 1's partition is replaced by a copy of
/// source 0's while the scheduler is held: the consumer must refuse what
/// `w1` sends.
#[test]
fn another_producers_partition_copied_in_mid_run_on_worker_processes_is_not_read() {
    let how = Forgery::CopyOfAnotherProducer;
    let mut fx = Fixture::new();
    let addr = free_port();
    let workers = Workers::start(2, &addr, &fx.tmp.path().join("workers"), 2);
    fx.extra_args = external_args(&addr, 2, 2_000);
    let (mut child, err) = fx.spawn("crash::finished::tokenize=1*off->1*sleep(6000)", 1);
    let start = Instant::now();
    while sources_done(&fx.data_dir, 2).is_none() {
        assert!(
            child.try_wait().expect("wait").is_none(),
            "the run ended before both sources finished:\n{}",
            std::fs::read_to_string(&err).unwrap_or_default()
        );
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "sources never finished"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let (l0, l1, n) = equal_partitions(&fx.data_dir);
    let p0 = on_worker(&fx, &workers, &l0).expect("a worker holds source 0's partition");
    let p1 = on_worker(&fx, &workers, &l1).expect("a worker holds source 1's partition");
    assert!(
        p1.starts_with(workers.data_dir(1)),
        "source 1 ran on w1: {}",
        p1.display()
    );
    forge(how, 1, &p1, &p0, n);
    let code = wait(&mut child, Duration::from_secs(240));
    let stderr = std::fs::read_to_string(&err).unwrap_or_default();
    eprintln!("{how:?} on workers:\n{stderr}\n{}", workers.logs());
    assert_exact_rerun(&fx, code, &stderr, how, 1);
    assert_subtask_reset_for(&fx.data_dir, 1, "PartitionNotFound", how);
    // A consumer on w0 refused what w1 sent (the partition named as
    // `<w1 address>:<location>`, checked at the consumer).
    let remote = format!(":{JOB}/{SOURCE}-{SINK}/{SOURCE}-1-0: its index names");
    assert!(
        stderr.contains(&remote),
        "a consumer on another worker refused the partition it was sent:\n{stderr}"
    );
}
