//! Helpers of the `crash_*` tests (scenarios 12–15 of docs/recovery.md): real
//! `coordhost run` processes on a word-count job, killed with SIGKILL and
//! started again on the same data directory.
//!
//! - [`WordJob`] writes the job file (word count over a generated folder,
//!   sources and sink slowed with `record-delay-us`, recovery settings).
//! - [`Coordhost::start`] spawns the binary (a [`Process`]); [`Running::kill`]
//!   sends SIGKILL; [`Running::finish`] waits for the end and reads the
//!   `--summary-json` file into a [`RunSummary`].
//! - [`EventLog::read`] runs `coordhost log inspect <data>/<job> --json` and
//!   answers "which subtasks of a vertex are finished" the way recovery
//!   replays it (a reset removes the subtask again).
//! - [`sorted_output`] reads a sink folder (checked complete) as sorted lines.
//! - [`Rng`] and [`seed`]: seeded randomness; `COORDHOST_CRASH_SEED` replays.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::Duration;

use super::process::{Logs, Process, Waited, coordhost, killed_by_sigkill};
use super::{cache_dir, expected_word_counts, plugin_path, published_lines};
use serde_json::Value;

/// The job's name (also its folder under the data directory).
pub const JOB: &str = "wordcount";
/// The source job vertex.
pub const SOURCE: &str = "tokenize";
/// The sink job vertex (parallelism `auto`).
pub const SINK: &str = "count";
/// Seed used when `COORDHOST_CRASH_SEED` is not set.
pub const DEFAULT_SEED: u64 = 0x00c0_ffee_2024_0383;
/// Longest any single `coordhost` process may take before the test calls it
/// hung (a guard against a wedged test, not a timing assertion).
pub const HANG_GUARD: Duration = Duration::from_secs(240);

/// The seed of this test run: `COORDHOST_CRASH_SEED` (decimal or `0x` hex),
/// else [`DEFAULT_SEED`]. Printed by the caller so a failure can be replayed.
///
/// # Panics
/// If the variable is set but is not a number.
pub fn seed() -> u64 {
    match std::env::var("COORDHOST_CRASH_SEED") {
        Ok(s) => {
            let s = s.trim();
            let parsed = match s.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => s.parse(),
            };
            parsed.unwrap_or_else(|e| panic!("COORDHOST_CRASH_SEED={s:?} is not a u64: {e}"))
        }
        Err(_) => DEFAULT_SEED,
    }
}

/// SplitMix64: small, seeded, the same sequence everywhere.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator starting from `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

/// The word-count job file of the crash tests: the example's graph
/// (`tokenize` → hash → `count` with `auto` parallelism) over `input`, with
/// knobs that shape how long each phase lasts.
#[derive(Debug, Clone)]
pub struct WordJob {
    /// Folder of `.txt` files.
    pub input: PathBuf,
    /// Source parallelism.
    pub sources: u32,
    /// Split size handed out by the file enumerator, bytes.
    pub split_bytes: u64,
    /// Worker threads (`job.workers`).
    pub workers: u32,
    /// Sleep per input line of a source subtask, µs.
    pub source_delay_us: u64,
    /// Sleep per input record of a sink subtask, µs.
    pub sink_delay_us: u64,
    /// `bytes-per-task` of the `auto` sink.
    pub bytes_per_task: u64,
    /// `max-parallelism` of the `auto` sink.
    pub max_sink_parallelism: u32,
    /// `recovery.previous-worker-timeout-ms`.
    pub previous_worker_timeout_ms: u64,
    /// `recovery.snapshot-min-pause-ms`.
    pub snapshot_min_pause_ms: u64,
    /// `fail-first-reports` of the `local-shuffle` plugin: its first N
    /// `get-partitions-with-metrics` calls per process fail (0: none).
    pub shuffle_fail_first_reports: u32,
    /// `fail-restore-while` of the `local-shuffle` plugin: while this file
    /// exists, its `restore-state` fails (`None`: never).
    pub shuffle_fail_restore_while: Option<PathBuf>,
    /// The shuffle master component (a name under `build/plugins/`):
    /// `local-shuffle` unless a test picks `py-shuffle` or
    /// `local-shuffle-0.1.0`, which take the same fault keys or none.
    pub shuffle_plugin: &'static str,
    /// `ignore-worker-reports` of `local-shuffle`: answer from files even
    /// when workers report.
    pub shuffle_ignore_worker_reports: bool,
}

impl WordJob {
    /// The settings all crash tests start from: 4 sources, 4 workers,
    /// 256 KiB splits, sources and sink slowed so that one uninterrupted run
    /// of the [`Fixture::words`] data takes about 3 s in a debug build (the
    /// sleeps cost no CPU, which matters on a shared 2-core machine).
    pub fn new(input: &Path) -> Self {
        Self {
            input: input.to_path_buf(),
            sources: 4,
            split_bytes: 256 * 1024,
            workers: 4,
            source_delay_us: 40,
            sink_delay_us: 300,
            bytes_per_task: 45_000,
            max_sink_parallelism: 16,
            previous_worker_timeout_ms: 10_000,
            snapshot_min_pause_ms: 1_000,
            shuffle_fail_first_reports: 0,
            shuffle_fail_restore_while: None,
            shuffle_plugin: "local-shuffle",
            shuffle_ignore_worker_reports: false,
        }
    }

    /// Writes the job file to `path` (plugins: the built sample
    /// `file-enumerator` and `local-shuffle`) and returns `path`.
    ///
    /// # Panics
    /// If the file cannot be written or a sample plugin is not built.
    pub fn write(&self, path: &Path) -> PathBuf {
        let input = self.input.display();
        let text = format!(
            r#"# Written by tests/e2e/tests/all/support/crash.rs: word count for the crash tests.
[job]
name = "{JOB}"
workers = {workers}
max-attempts = 3

[recovery]
enabled = true
previous-worker-timeout-ms = {timeout}
snapshot-min-pause-ms = {pause}

[shuffle]
plugin = "shuffle"

[plugins.files]
component = "{enumerator}"
kind = "split-enumerator"
config = {{ dir = "{input}", split-bytes = {split}, pattern = ".txt" }}
dirs = [{{ path = "{input}", writable = false }}]

{shuffle}
[[vertices]]
id = "{SOURCE}"
source = "files"
parallelism = {sources}
record-delay-us = {source_delay}
operators = [
  {{ op = "read-lines" }},
  {{ op = "tokenize", column = "line", as = "word", lowercase = true }},
  {{ op = "aggregate", mode = "partial", key = ["word"], aggregates = [{{ fn = "count", as = "count" }}] }},
]

[[vertices]]
id = "{SINK}"
parallelism = "auto"
max-parallelism = {max_par}
bytes-per-task = {bytes_per_task}
record-delay-us = {sink_delay}
operators = [
  {{ op = "aggregate", mode = "final", key = ["word"], aggregates = [{{ fn = "count", as = "count" }}] }},
  {{ op = "write-text", path = "${{data_dir}}/output/{JOB}", separator = " " }},
]

[[edges]]
from = "{SOURCE}"
to = "{SINK}"
kind = "hash"
key = ["word"]
"#,
            workers = self.workers,
            timeout = self.previous_worker_timeout_ms,
            pause = self.snapshot_min_pause_ms,
            enumerator = plugin_path("file-enumerator").display(),
            shuffle = super::shuffle_table("shuffle", self.shuffle_plugin, &self.shuffle_faults()),
            split = self.split_bytes,
            sources = self.sources,
            source_delay = self.source_delay_us,
            max_par = self.max_sink_parallelism,
            bytes_per_task = self.bytes_per_task,
            sink_delay = self.sink_delay_us,
        );
        std::fs::write(path, text)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
        path.to_path_buf()
    }
}

impl WordJob {
    /// The fault-mode keys of the shuffle plugin's `config` table, each
    /// after a comma ("" when none is set).
    fn shuffle_faults(&self) -> String {
        let mut keys = String::new();
        if self.shuffle_fail_first_reports > 0 {
            keys += &format!(", fail-first-reports = {}", self.shuffle_fail_first_reports);
        }
        if self.shuffle_ignore_worker_reports {
            keys += ", ignore-worker-reports = true";
        }
        if let Some(marker) = &self.shuffle_fail_restore_while {
            keys += &format!(", fail-restore-while = \"{}\"", marker.display());
        }
        keys
    }
}

/// A test's temporary folder with its generated input.
#[derive(Debug)]
pub struct Fixture {
    /// Owns the folder; removed when dropped.
    pub tmp: tempfile::TempDir,
    /// The input folder of `.txt` files.
    pub input: PathBuf,
}

impl Fixture {
    /// 16 text files of 4000 lines each (about 4 MB, 64 000 lines, a
    /// 2000-word vocabulary), generated deterministically.
    ///
    /// # Panics
    /// If the files cannot be written.
    pub fn words() -> Self {
        let tmp = tempfile::tempdir().expect("tempdir");
        let input = tmp.path().join("words");
        coordhost_datagen::write_words(&input, 16, 4000, 383).expect("generate the words");
        Self { tmp, input }
    }

    /// A path inside the temporary folder.
    pub fn path(&self, name: &str) -> PathBuf {
        self.tmp.path().join(name)
    }
}

/// One `coordhost run` command line: the same job, data directory and
/// summary file every time it is started.
#[derive(Debug, Clone)]
pub struct Coordhost {
    /// The job file.
    pub job: PathBuf,
    /// `--data-dir`.
    pub data_dir: PathBuf,
    /// `--summary-json`.
    pub summary: PathBuf,
    /// More arguments of `run` (e.g. `--fresh`), for the next starts.
    pub extra_args: Vec<String>,
    /// `COORDHOST_LOG` of the next starts (`None`: the default, warnings).
    pub log: Option<&'static str>,
    /// More environment variables of the next starts (e.g. the `AWS_*`
    /// ones of an object store).
    pub env: Vec<(String, String)>,
    starts: u32,
}

impl Coordhost {
    /// The command for `job` on `data_dir`; the summary goes next to the data
    /// directory (`<data_dir>.summary.json`).
    pub fn new(job: &Path, data_dir: &Path) -> Self {
        let mut summary = data_dir.as_os_str().to_owned();
        summary.push(".summary.json");
        Self {
            job: job.to_path_buf(),
            data_dir: data_dir.to_path_buf(),
            summary: PathBuf::from(summary),
            extra_args: Vec::new(),
            log: None,
            env: Vec::new(),
            starts: 0,
        }
    }

    /// Spawns `coordhost --cache-dir <shared cache> run JOB --data-dir DIR
    /// --summary-json FILE`, stdout and stderr to files next to the data
    /// directory (`<data_dir>.run<N>.out` / `.err`). Removes a summary left by
    /// an earlier start first, so a summary read later is this run's.
    ///
    /// # Panics
    /// If the binary cannot be spawned.
    pub fn start(&mut self) -> Running {
        self.starts += 1;
        let _absent = std::fs::remove_file(&self.summary);
        let stem = PathBuf::from(format!("{}.run{}", self.data_dir.display(), self.starts));
        let mut command = coordhost();
        if let Some(filter) = self.log {
            command.env("COORDHOST_LOG", filter);
        }
        command
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .arg("--cache-dir")
            .arg(cache_dir())
            .arg("run")
            .arg(&self.job)
            .arg("--data-dir")
            .arg(&self.data_dir)
            .arg("--summary-json")
            .arg(&self.summary)
            .args(&self.extra_args);
        Running {
            process: Process::spawn("coordhost run", &mut command, Logs::pair(&stem)),
            summary: self.summary.clone(),
            data_dir: self.data_dir.clone(),
        }
    }

    /// Starts a run and waits for it to finish the job (exit 0, status
    /// `finished`).
    ///
    /// # Panics
    /// As [`Running::finish`].
    pub fn run_to_end(&mut self) -> Finished {
        self.start().finish()
    }
}

/// A `coordhost run` process that is running (or has just ended, unreaped).
#[derive(Debug)]
pub struct Running {
    process: Process,
    summary: PathBuf,
    data_dir: PathBuf,
}

/// What a SIGKILL did.
#[derive(Debug)]
pub enum Kill {
    /// The process was running and died of SIGKILL this long after its start.
    Killed {
        /// Time from spawn to kill.
        after: Duration,
    },
    /// The process had ended on its own before the kill; it is the last run.
    TooLate(Finished),
}

/// A `coordhost run` that finished the job.
#[derive(Debug, Clone)]
pub struct Finished {
    /// Its `--summary-json`.
    pub summary: RunSummary,
    /// Time from spawn to exit, measured by the test.
    pub elapsed: Duration,
}

impl Running {
    /// The process id.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// Time since the process was spawned.
    pub fn elapsed(&self) -> Duration {
        self.process.elapsed()
    }

    /// SIGKILLs the process (`Child::kill` sends SIGKILL on Unix) and reaps
    /// it; checks it really died of SIGKILL. If it had already ended, that
    /// run must have finished the job: [`Kill::TooLate`].
    ///
    /// # Panics
    /// If the kill fails, or the process ended in another way than SIGKILL
    /// or a finished job.
    pub fn kill(mut self) -> Kill {
        if self.process.try_wait().is_some() {
            return Kill::TooLate(self.finish());
        }
        let after = self.process.elapsed();
        let status = self.process.kill();
        if killed_by_sigkill(status) {
            return Kill::Killed { after };
        }
        // It ended on its own between `try_wait` and `kill`.
        Kill::TooLate(self.finish_with(status))
    }

    /// Waits until the process ends (at most [`HANG_GUARD`]) and checks that
    /// it finished the job: exit 0, summary status `finished`.
    ///
    /// # Panics
    /// If it hangs, fails, or writes no summary; the message carries the end
    /// of its stderr.
    pub fn finish(mut self) -> Finished {
        let status = self.wait_guarded();
        self.finish_with(status)
    }

    /// Waits until the process ends (at most [`HANG_GUARD`]) whatever the
    /// outcome: its exit code (`None` if a signal ended it), its whole
    /// stderr, and its summary when it wrote one.
    ///
    /// # Panics
    /// If it hangs.
    pub fn wait_exit(mut self) -> Exited {
        let status = self.wait_guarded();
        Exited {
            code: status.code(),
            stderr: self.process.stderr(),
        }
    }

    fn finish_with(&mut self, status: ExitStatus) -> Finished {
        let elapsed = self.process.elapsed();
        assert!(
            status.success(),
            "coordhost run on {} ended with {status} after {elapsed:?}.\n{}",
            self.data_dir.display(),
            self.stderr_tail()
        );
        let text = std::fs::read_to_string(&self.summary).unwrap_or_else(|e| {
            panic!(
                "coordhost run exited 0 but its summary {} is unreadable: {e}\n{}",
                self.summary.display(),
                self.stderr_tail()
            )
        });
        let summary = RunSummary(serde_json::from_str(&text).expect("summary is JSON"));
        assert_eq!(
            summary.status(),
            "finished",
            "summary of a run that exited 0: {text}"
        );
        Finished { summary, elapsed }
    }

    /// Waits until the process ends (at most [`HANG_GUARD`]) however it
    /// ends; returns its exit code (`None` if a signal ended it) and its
    /// whole stderr.
    ///
    /// # Panics
    /// If it hangs.
    pub fn exit(self) -> (Option<i32>, String) {
        let exited = self.wait_exit();
        (exited.code, exited.stderr)
    }

    /// Waits until the process ends, at most [`HANG_GUARD`]; then kills it
    /// and panics with the end of its stderr.
    fn wait_guarded(&mut self) -> ExitStatus {
        let deadline = self.process.started() + HANG_GUARD;
        if let Some(status) = self.process.wait_until(deadline) {
            return status;
        }
        self.process.kill_quietly();
        panic!(
            "coordhost run on {} did not end within {HANG_GUARD:?}; killed it.\n{}",
            self.data_dir.display(),
            self.stderr_tail()
        );
    }

    /// The last 40 lines of the process's stderr, for failure messages.
    pub fn stderr_tail(&self) -> String {
        format!(
            "--- stderr of coordhost ({}) ---\n{}",
            self.process.stderr_path().display(),
            self.process.stderr_tail(40)
        )
    }

    /// Polls `condition` every 5 ms until it returns `Some`, or the process
    /// ends first (`Err` with how it ended: the kill will come too late).
    pub fn poll_until<T>(&mut self, condition: impl FnMut() -> Option<T>) -> Result<T, String> {
        let deadline = self.process.started() + HANG_GUARD;
        let polled = self
            .process
            .poll_until(deadline, Duration::from_millis(5), condition);
        polled.map_err(|why| match why {
            Waited::Ended(status) => format!(
                "the process ended ({status}) after {:?} before the condition held",
                self.process.elapsed()
            ),
            Waited::TimedOut => format!("the condition did not hold within {HANG_GUARD:?}"),
        })
    }
}

/// How a `coordhost run` ended, whatever the outcome ([`Running::wait_exit`]).
#[derive(Debug, Clone)]
pub struct Exited {
    /// The exit code; `None` if a signal ended the process.
    pub code: Option<i32>,
    /// Its whole stderr.
    pub stderr: String,
}

/// The `--summary-json` of a run (see `Summary` in `host/src/scheduler`).
#[derive(Debug, Clone)]
pub struct RunSummary(pub Value);

impl RunSummary {
    fn u64(&self, key: &str) -> u64 {
        self.0[key]
            .as_u64()
            .unwrap_or_else(|| panic!("summary has no number `{key}`: {}", self.0))
    }
    /// `status`.
    pub fn status(&self) -> &str {
        self.0["status"].as_str().unwrap_or("?")
    }
    /// `recovered`.
    pub fn recovered(&self) -> bool {
        self.0["recovered"]
            .as_bool()
            .unwrap_or_else(|| panic!("summary has no bool `recovered`: {}", self.0))
    }
    /// `tasks_total`.
    pub fn tasks_total(&self) -> u64 {
        self.u64("tasks_total")
    }
    /// `tasks_run`.
    pub fn tasks_run(&self) -> u64 {
        self.u64("tasks_run")
    }
    /// `tasks_skipped`.
    pub fn tasks_skipped(&self) -> u64 {
        self.u64("tasks_skipped")
    }
    /// `tasks_reset`.
    pub fn tasks_reset(&self) -> u64 {
        self.u64("tasks_reset")
    }
    /// `wall_ms`.
    pub fn wall_ms(&self) -> u64 {
        self.u64("wall_ms")
    }
    /// The parallelism of job vertex `id` in this run.
    pub fn parallelism(&self, id: &str) -> u32 {
        self.0["vertices"]
            .as_array()
            .and_then(|vs| vs.iter().find(|v| v["id"] == id))
            .and_then(|v| v["parallelism"].as_u64())
            .and_then(|p| u32::try_from(p).ok())
            .unwrap_or_else(|| panic!("summary has no vertex `{id}`: {}", self.0))
    }
    /// One line for tables: `run R skipped S reset X of T, recovered B, W ms`.
    pub fn brief(&self) -> String {
        format!(
            "run {} skipped {} reset {} of {} (recovered {}), {} ms",
            self.tasks_run(),
            self.tasks_skipped(),
            self.tasks_reset(),
            self.tasks_total(),
            self.recovered(),
            self.wall_ms()
        )
    }
}

/// A job's event log as `coordhost log inspect <data>/<job> --json` prints it.
#[derive(Debug, Clone)]
pub struct EventLog {
    /// The `events` array: `{position: {attempt, offset}, event: {kind, event}}`.
    pub events: Vec<Value>,
    /// Attempt numbers of the segments (one per coordinator start).
    pub segments: Vec<u64>,
}

impl EventLog {
    /// Reads the log of the job under `data_dir` with the real CLI. `None`
    /// when there is no log (yet): the CLI says "no event log".
    ///
    /// # Panics
    /// On any other failure of `log inspect` (corruption after a SIGKILL is a
    /// bug: a kill can only tear the tail).
    pub fn read(data_dir: &Path) -> Option<Self> {
        Self::try_read(data_dir).unwrap_or_else(|why| panic!("{why}"))
    }

    /// As [`EventLog::read`], with a failure of `log inspect` returned
    /// (for a test that reads a log another process may be setting aside
    /// at that moment) instead of a panic.
    pub fn try_read(data_dir: &Path) -> Result<Option<Self>, String> {
        let out = crate::support::coordhost()
            .arg("log")
            .arg("inspect")
            .arg(data_dir.join(JOB))
            .arg("--json")
            .output()
            .expect("spawn coordhost log inspect");
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() {
            if stderr.contains("no event log") {
                return Ok(None);
            }
            return Err(format!(
                "coordhost log inspect {} failed ({}): {stderr}",
                data_dir.join(JOB).display(),
                out.status
            ));
        }
        let doc: Value = serde_json::from_slice(&out.stdout).expect("log inspect prints JSON");
        let events = doc["events"].as_array().cloned().unwrap_or_default();
        let segments = doc["segments"]
            .as_array()
            .map(|s| s.iter().filter_map(|s| s["attempt"].as_u64()).collect())
            .unwrap_or_default();
        Ok(Some(Self { events, segments }))
    }

    /// The newest segment's attempt number (the last coordinator start).
    pub fn newest_segment(&self) -> Option<u64> {
        self.segments.iter().copied().max()
    }

    /// Subtasks of `vertex` whose latest finish still counts, replayed as
    /// recovery does: `ExecutionFinished` adds a subtask, an `ExecutionsReset`
    /// naming it or a `RecoveryFinished` listing it as reset removes it.
    pub fn finished(&self, vertex: &str) -> BTreeSet<u32> {
        self.final_attempts(vertex).into_keys().collect()
    }

    /// Subtasks of `vertex` with an `ExecutionFinished` written by the
    /// coordinator start `segment` (i.e. that ran in that process).
    pub fn finished_in_segment(&self, vertex: &str, segment: u64) -> BTreeSet<u32> {
        self.events
            .iter()
            .filter(|e| e["position"]["attempt"].as_u64() == Some(segment))
            .filter(|e| e["event"]["kind"] == "ExecutionFinished")
            .filter_map(|e| subtask_of(&e["event"]["event"]["attempt"], vertex))
            .collect()
    }

    /// How many `ExecutionFinished` each (job vertex, subtask) has, over
    /// every run in the log.
    pub fn finish_counts(&self) -> std::collections::BTreeMap<(String, u64), u32> {
        let mut n = std::collections::BTreeMap::new();
        for e in self
            .events
            .iter()
            .filter(|e| e["event"]["kind"] == "ExecutionFinished")
        {
            let a = &e["event"]["event"]["attempt"];
            if let (Some(v), Some(s)) = (a["job_vertex"].as_str(), a["subtask"].as_u64()) {
                *n.entry((v.to_owned(), s)).or_default() += 1;
            }
        }
        n
    }

    /// (job vertex, subtask) with more than one `ExecutionFinished`: a
    /// task that ran to its end again.
    pub fn finished_twice(&self) -> Vec<(String, u64)> {
        self.finish_counts()
            .into_iter()
            .filter(|(_, n)| *n > 1)
            .map(|(k, _)| k)
            .collect()
    }

    /// How many events of `kind` the log holds.
    pub fn count(&self, kind: &str) -> usize {
        self.events
            .iter()
            .filter(|e| e["event"]["kind"] == kind)
            .count()
    }
}

fn subtask_of(id: &Value, vertex: &str) -> Option<u32> {
    (id["job_vertex"] == vertex)
        .then(|| id["subtask"].as_u64())
        .flatten()
        .and_then(|s| u32::try_from(s).ok())
}

/// The event log folder of the job under `data_dir`.
pub fn log_dir(data_dir: &Path) -> PathBuf {
    coordhost::events::job_log_dir(data_dir, JOB).expect("job id")
}

/// The sink folder of the job under `data_dir`.
pub fn output_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("output").join(JOB)
}

/// The published part files of the sink folder now: subtask → inode.
pub fn published_parts(data_dir: &Path) -> BTreeMap<u32, u64> {
    let Ok(entries) = std::fs::read_dir(output_dir(data_dir)) else {
        return BTreeMap::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let subtask = name
                .strip_prefix("part-")?
                .strip_suffix(".txt")?
                .parse()
                .ok()?;
            Some((subtask, e.metadata().ok()?.ino()))
        })
        .collect()
}

/// True once the sink folder has its `_SUCCESS` marker.
pub fn job_succeeded(data_dir: &Path) -> bool {
    output_dir(data_dir).join("_SUCCESS").is_file()
}

/// The job's output as one string of sorted lines: checks `_SUCCESS` is
/// there, no staging folder is left, and no word appears twice (a duplicated
/// row would show up as a second line for the same word).
///
/// # Panics
/// If any check fails.
pub fn sorted_output(data_dir: &Path) -> String {
    let out = output_dir(data_dir);
    let mut lines = published_lines(&out);
    assert!(!lines.is_empty(), "{}: no output rows", out.display());
    lines.sort();
    let mut words = BTreeSet::new();
    for l in &lines {
        let word = l.split_once(' ').map_or(l.as_str(), |(w, _)| w);
        assert!(
            words.insert(word.to_owned()),
            "{}: word `{word}` appears twice (a duplicated row)",
            out.display()
        );
    }
    let mut text = lines.join("\n");
    text.push('\n');
    text
}

/// The word count of `input` computed by the test itself, in the sink's
/// `word count` format, sorted like [`sorted_output`].
pub fn expected_output(input: &Path) -> String {
    let mut lines: Vec<String> = expected_word_counts(input)
        .iter()
        .map(|(w, n)| format!("{w} {n}"))
        .collect();
    lines.sort();
    let mut text = lines.join("\n");
    text.push('\n');
    text
}

/// Where two outputs first differ, for a failure message.
pub fn first_difference(got: &str, want: &str) -> String {
    let (g, w): (Vec<&str>, Vec<&str>) = (got.lines().collect(), want.lines().collect());
    let at = g
        .iter()
        .zip(&w)
        .position(|(a, b)| a != b)
        .unwrap_or(g.len().min(w.len()));
    format!(
        "{} lines vs {} expected; first difference at line {at}: got {:?}, expected {:?}",
        g.len(),
        w.len(),
        g.get(at),
        w.get(at)
    )
}

/// How the test decided that every source subtask had finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourcesDone {
    /// The event log shows an `ExecutionFinished` for every source subtask.
    EventLog,
    /// There is no event log at all (the binary does not record events), so
    /// the shuffle folder's `index` files stood in: the output checks
    /// still run, and the recovery checks fail saying the log is missing.
    ShuffleMarkersWithoutLog,
}

/// `Some` once every one of the `sources` source subtasks has finished, per
/// the event log — or, if the data directory holds no event log at all, per
/// the shuffle's `index` files (see [`SourcesDone`]).
pub fn sources_done(data_dir: &Path, sources: u32) -> Option<SourcesDone> {
    match EventLog::read(data_dir) {
        Some(log) => {
            (log.finished(SOURCE).len() == sources as usize).then_some(SourcesDone::EventLog)
        }
        None => (complete_source_partitions(data_dir) >= sources as usize)
            .then_some(SourcesDone::ShuffleMarkersWithoutLog),
    }
}

/// Distinct source subtasks with a complete partition (an `index`) under the
/// local-shuffle root (`<data>/shuffle/<job>/<from>-<to>/<from>-<subtask>-<attempt>/`).
fn complete_source_partitions(data_dir: &Path) -> usize {
    let root = data_dir
        .join("shuffle")
        .join(JOB)
        .join(format!("{SOURCE}-{SINK}"));
    let Ok(entries) = std::fs::read_dir(root) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .filter(|e| e.path().join("index").is_file())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let rest = name.strip_prefix(&format!("{SOURCE}-"))?;
            rest.split('-').next()?.parse::<u32>().ok()
        })
        .collect::<BTreeSet<_>>()
        .len()
}

/// One line saying what the log says now, for tables and messages.
pub fn describe_log(log: Option<&EventLog>) -> String {
    match log {
        None => "no event log".to_owned(),
        Some(l) => format!(
            "{} events in {} segments; finished {SOURCE} {:?} {SINK} {:?}",
            l.events.len(),
            l.segments.len(),
            l.finished(SOURCE),
            l.finished(SINK)
        ),
    }
}

/// The result-partition folders of the job under the local-shuffle root,
/// as `(producer vertex, subtask, attempt)`
/// (`<data>/shuffle/<job>/<from>-<to>/<vertex>-<subtask>-<attempt>/`).
pub fn shuffle_partitions(data_dir: &Path) -> BTreeSet<(String, u32, u32)> {
    let root = data_dir.join("shuffle").join(JOB);
    let mut out = BTreeSet::new();
    for ds in std::fs::read_dir(root).into_iter().flatten().flatten() {
        for p in std::fs::read_dir(ds.path()).into_iter().flatten().flatten() {
            let name = p.file_name().to_string_lossy().into_owned();
            let mut parts = name.rsplitn(3, '-');
            let (Some(a), Some(s), Some(v)) = (parts.next(), parts.next(), parts.next()) else {
                continue;
            };
            if let (Ok(s), Ok(a)) = (s.parse(), a.parse()) {
                out.insert((v.to_owned(), s, a));
            }
        }
    }
    out
}

impl EventLog {
    /// Per subtask of `vertex`, the attempt whose finish counts at the end
    /// of the log, replayed as recovery does (see [`EventLog::finished`]).
    pub fn final_attempts(&self, vertex: &str) -> BTreeMap<u32, u32> {
        let mut done = BTreeMap::new();
        for e in &self.events {
            let body = &e["event"]["event"];
            match e["event"]["kind"].as_str() {
                Some("ExecutionFinished") => {
                    if let Some(s) = subtask_of(&body["attempt"], vertex) {
                        let a = body["attempt"]["attempt"].as_u64().unwrap_or(u64::MAX);
                        done.insert(s, u32::try_from(a).unwrap_or(u32::MAX));
                    }
                }
                Some("ExecutionsReset") => {
                    for v in body["executions"].as_array().into_iter().flatten() {
                        if let Some(s) = subtask_of(v, vertex) {
                            done.remove(&s);
                        }
                    }
                }
                Some("RecoveryFinished") => {
                    for r in body["reset"].as_array().into_iter().flatten() {
                        if let Some(s) = subtask_of(&r["execution"], vertex) {
                            done.remove(&s);
                        }
                    }
                }
                _ => {}
            }
        }
        done
    }

    /// Every `(subtask, attempt)` of `vertex` with an `ExecutionFinished`,
    /// in log order (an attempt number used twice shows up twice).
    pub fn finished_attempts(&self, vertex: &str) -> Vec<(u32, u32)> {
        self.events
            .iter()
            .filter(|e| e["event"]["kind"] == "ExecutionFinished")
            .filter_map(|e| {
                let a = &e["event"]["event"]["attempt"];
                let s = subtask_of(a, vertex)?;
                Some((s, u32::try_from(a["attempt"].as_u64()?).ok()?))
            })
            .collect()
    }
}

impl EventLog {
    /// Every execution vertex an `ExecutionsReset` of reason `Failover`
    /// names, `(job vertex, subtask)`, with the failover's message, in log
    /// order.
    pub fn failovers(&self) -> Vec<((String, u64), String)> {
        let mut out = Vec::new();
        for e in self
            .events
            .iter()
            .filter(|e| e["event"]["kind"] == "ExecutionsReset")
        {
            let body = &e["event"]["event"];
            let Some(message) = body["reason"]["Failover"]["message"].as_str() else {
                continue;
            };
            for x in body["executions"].as_array().into_iter().flatten() {
                let id = (
                    x["job_vertex"].as_str().unwrap_or("?").to_owned(),
                    x["subtask"].as_u64().unwrap_or(u64::MAX),
                );
                out.push((id, message.to_owned()));
            }
        }
        out
    }
}
