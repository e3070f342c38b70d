//! No special file blocks the host (issue 24, item 3): a FIFO (or device)
//! where a regular file is expected ends in an exact result or one clear
//! refusal, never in a hang past a deadline. Every case runs the real
//! `coordhost` binary with the real sample plugins:
//!
//! | where the FIFO is | who meets it | what must happen | test |
//! |---|---|---|---|
//! | a granted folder | a plugin opening it through WASI (`faulty-enumerator`'s probe) | `open` fails at once in the guest, the host warns naming the file, the call keeps its deadline, the job's output is exact | `a_fifo_in_a_grant_*` |
//! | the folder `file-enumerator` lists | the enumerator | skipped with a warning naming it; exact word count | `a_fifo_among_the_input_files_*` |
//! | a `file-range` split | the host's split reader | the job fails naming plugin, split, file and "a FIFO" | `a_split_naming_a_fifo_*` |
//! | a partition's `index` / `data`, before a recovery run | the shuffle master (`local-shuffle`, `py-shuffle`) | the partition counts as missing, its producer runs again, exact output | `a_fifo_in_place_of_a_partitions_*` |
//! | an event log segment, before a recovery run | the host's log reader | exit 1 (the run failed on its own storage), one error line naming the segment and "a FIFO" | `a_fifo_in_place_of_a_log_segment_*` |
//! | `plugin call --steps @FILE` | the kit | exit 2, one line naming the file (also for `/dev/zero`) | `plugin_call_refuses_*` |
//!
//! Each process runs under a guard ([`GUARD`], or the crash helpers'
//! `HANG_GUARD`): a regression that blocks on a FIFO fails the test with
//! the process's stderr instead of hanging CI.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::crash::{
    Coordhost, EventLog, Fixture, Kill, SOURCE, WordJob, expected_output, first_difference,
    job_succeeded, log_dir, sorted_output, sources_done,
};
use crate::support::{cache_dir, plugin_path, segment_files, toml_string};

/// Longest one `coordhost` process of these tests may take before the test
/// kills it and fails: far beyond what each needs (seconds), far below a
/// FIFO's "forever".
const GUARD: Duration = Duration::from_secs(120);

/// Creates a FIFO at `path` (mode 0600) that nobody opens: whoever opens it
/// for reading with a blocking `open` waits forever.
fn mkfifo(path: &Path) {
    rustix::fs::mkfifoat(
        rustix::fs::CWD,
        path,
        rustix::fs::Mode::from_raw_mode(0o600),
    )
    .unwrap_or_else(|e| panic!("mkfifo {}: {e}", path.display()));
}

/// How one guarded process ended.
struct Ended {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    elapsed: Duration,
}

impl Ended {
    fn describe(&self) -> String {
        format!(
            "exit {:?} after {:?}\n--- stdout\n{}\n--- stderr\n{}",
            self.code, self.elapsed, self.stdout, self.stderr
        )
    }
}

/// Runs `command` (stdin closed, stdout and stderr to files named `name`
/// in `dir`) to its end, at most [`GUARD`]; past it, kills it and fails.
fn run_guarded(mut command: Command, dir: &Path, name: &str) -> Ended {
    let out = dir.join(format!("{name}.out"));
    let err = dir.join(format!("{name}.err"));
    let file = |p: &Path| std::fs::File::create(p).expect("output file");
    command
        .stdin(Stdio::null())
        .stdout(file(&out))
        .stderr(file(&err));
    let started = Instant::now();
    let mut child = command.spawn().expect("spawn coordhost");
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if started.elapsed() > GUARD {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "coordhost did not end within {GUARD:?} (blocked on a special file?); killed it.\n--- stderr\n{}",
                std::fs::read_to_string(&err).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Ended {
        code: status.code(),
        stdout: std::fs::read_to_string(&out).unwrap_or_default(),
        stderr: std::fs::read_to_string(&err).unwrap_or_default(),
        elapsed: started.elapsed(),
    }
}

/// A job whose one source vertex is fed by `faulty-enumerator` (named
/// `faulty`, granted `grant` read-write, deadline `timeout_ms` per call),
/// writing its lines as text to `${data_dir}/output/special`.
fn faulty_job(dir: &Path, config: &[(&str, String)], grant: &Path, timeout_ms: u64) -> PathBuf {
    let config: Vec<String> = config
        .iter()
        .map(|(k, v)| format!("{k} = {}", toml_string(v)))
        .collect();
    let text = format!(
        r#"[job]
name = "special"
max-attempts = 1

[recovery]
enabled = false

[shuffle]
plugin = "shuffle"

[plugins.faulty]
component = {faulty}
kind = "split-enumerator"
config = {{ {config} }}
dirs = [{{ path = {grant}, writable = true }}]
limits = {{ call-timeout-ms = {timeout_ms}, on-trap = "fail" }}

{shuffle}
[[vertices]]
id = "read"
source = "faulty"
parallelism = 2
operators = [
  {{ op = "read-lines" }},
  {{ op = "write-text", path = "${{data_dir}}/output/special" }},
]
"#,
        faulty = toml_string(&plugin_path("faulty-enumerator").display().to_string()),
        config = config.join(", "),
        grant = toml_string(&grant.display().to_string()),
        shuffle = crate::support::shuffle_table("shuffle", "local-shuffle", ""),
    );
    let job = dir.join("special.toml");
    std::fs::write(&job, text).expect("job file");
    job
}

/// `coordhost run JOB --data-dir DIR/data --workers 2` with the shared
/// cache and the given log filter.
fn run_command(job: &Path, dir: &Path, log: Option<&str>) -> Command {
    let mut command = crate::support::coordhost();
    command
        .env("COORDHOST_CACHE_DIR", cache_dir())
        .arg("run")
        .arg(job)
        .arg("--data-dir")
        .arg(dir.join("data"))
        .args(["--workers", "2"]);
    if let Some(filter) = log {
        command.env("COORDHOST_LOG", filter);
    }
    command
}

/// Every published line of the `special` job's sink folder, sorted.
fn special_output(dir: &Path) -> Vec<String> {
    let mut lines = crate::support::published_lines(&dir.join("data/output/special"));
    lines.sort();
    lines
}

/// The line of `stderr` that holds `needle`.
fn line_with<'a>(stderr: &'a str, needle: &str) -> &'a str {
    stderr
        .lines()
        .find(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("no line with {needle:?} in stderr:\n{stderr}"))
}

#[test]
fn a_fifo_in_a_grant_is_refused_to_a_plugin_at_once_and_its_call_keeps_its_deadline() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let granted = tmp.path().join("granted");
    std::fs::create_dir_all(&granted).expect("grant");
    std::fs::write(granted.join("inside.txt"), "inside\n").expect("control file");
    let fifo = granted.join("fifo");
    mkfifo(&fifo);
    std::os::unix::fs::symlink("fifo", granted.join("link-to-fifo")).expect("symlink");
    let link = granted.join("link-to-fifo");
    let paths = |ps: &[&Path]| {
        ps.iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    let job = faulty_job(
        tmp.path(),
        &[
            ("fault", "probe".into()),
            ("on", "start".into()),
            ("splits", "2".into()),
            (
                "probe-read",
                paths(&[&granted.join("inside.txt"), &fifo, &link]),
            ),
            ("probe-write", paths(&[&fifo])),
        ],
        &granted,
        5_000,
    );
    let o = run_guarded(
        run_command(&job, tmp.path(), Some("info")),
        tmp.path(),
        "run",
    );
    assert_eq!(o.code, Some(0), "{}", o.describe());
    // The control: a regular file in the same grant is read, so the
    // refusals below are the host's and not a broken probe.
    let inside = line_with(
        &o.stderr,
        &format!("probe read {}: ", granted.join("inside.txt").display()),
    );
    assert!(inside.contains("ALLOWED read 7 bytes"), "{inside}");
    for (what, path) in [("read", &fifo), ("read", &link), ("write", &fifo)] {
        let line = line_with(&o.stderr, &format!("probe {what} {}: ", path.display()));
        assert!(line.contains(": refused: Not supported"), "{line}");
    }
    // The host says what it refused, naming the plugin and the file.
    let warning = line_with(&o.stderr, &format!("refused to open {}", fifo.display()));
    assert!(
        warning.contains("plugin=\"faulty\"") && warning.contains("it is a FIFO"),
        "{warning}"
    );
    // Nothing waited on the FIFO: the whole run took less than the one
    // call's deadline would allow many times over.
    assert!(
        o.elapsed < Duration::from_secs(60),
        "took {:?}\n{}",
        o.elapsed,
        o.describe()
    );
    assert_eq!(special_output(tmp.path()), ["line-0", "line-1"]);
    assert!(
        rustix::fs::stat(&fifo).is_ok_and(
            |s| rustix::fs::FileType::from_raw_mode(s.st_mode) == rustix::fs::FileType::Fifo
        ),
        "the FIFO is still there, untouched"
    );
}

#[test]
fn a_split_naming_a_fifo_fails_the_job_at_once_naming_plugin_split_and_file() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let granted = tmp.path().join("granted");
    std::fs::create_dir_all(&granted).expect("grant");
    let fifo = granted.join("split.fifo");
    mkfifo(&fifo);
    let job = faulty_job(
        tmp.path(),
        &[
            ("fault", "assign-file".into()),
            ("splits", "0".into()),
            ("path", fifo.display().to_string()),
        ],
        &granted,
        5_000,
    );
    let o = run_guarded(run_command(&job, tmp.path(), None), tmp.path(), "run");
    assert_eq!(o.code, Some(1), "{}", o.describe());
    let last = o
        .stderr
        .lines()
        .rfind(|l| l.starts_with("coordhost: "))
        .unwrap_or_else(|| panic!("no `coordhost:` error line\n{}", o.describe()));
    for needle in [
        "plugin `faulty`",
        "split `file-",
        &fifo.display().to_string(),
        "which is a FIFO, not a regular file",
    ] {
        assert!(last.contains(needle), "{needle:?} missing from: {last}");
    }
}

#[test]
fn a_fifo_among_the_input_files_is_skipped_with_a_warning_and_the_count_is_exact() {
    let fx = Fixture::words();
    // Computed before the FIFO exists: the test's own count reads every file.
    let want = expected_output(&fx.input);
    let fifo = fx.input.join("zz-pipe.txt");
    mkfifo(&fifo);
    let job = WordJob::new(&fx.input).write(&fx.path("job.toml"));
    let data_dir = fx.path("data");
    let mut command = crate::support::coordhost();
    command
        .arg("--cache-dir")
        .arg(cache_dir())
        .arg("run")
        .arg(&job)
        .arg("--data-dir")
        .arg(&data_dir);
    let o = run_guarded(command, fx.tmp.path(), "run");
    assert_eq!(o.code, Some(0), "{}", o.describe());
    let got = sorted_output(&data_dir);
    assert!(
        got == want,
        "output with a FIFO among the input: {}",
        first_difference(&got, &want)
    );
    let warning = line_with(
        &o.stderr,
        &format!("skipping {}: it is not a regular file", fifo.display()),
    );
    assert!(
        warning.contains("plugin=\"files\""),
        "names the plugin: {warning}"
    );
}

/// The partition folder of source subtask 0's latest recorded finish.
fn source_partition(log: &EventLog) -> PathBuf {
    log.events
        .iter()
        .filter(|e| e["event"]["kind"] == "ExecutionFinished")
        .map(|e| &e["event"]["event"])
        .filter(|b| b["attempt"]["job_vertex"] == SOURCE && b["attempt"]["subtask"] == 0)
        .filter_map(|b| b["produced"][0]["location"].as_str())
        .next_back()
        .map(PathBuf::from)
        .unwrap_or_else(|| panic!("no finished {SOURCE} 0 in the log"))
}

/// Runs the word count, SIGKILLs it once every source finished (no sink
/// done yet), applies `damage` to the data directory and the log, and
/// starts the same command again; returns the data directory and how the
/// restart ended (within the crash helpers' hang guard).
fn crash_then(
    fx: &Fixture,
    shuffle_plugin: &'static str,
    damage: impl FnOnce(&Path, &EventLog),
) -> (PathBuf, Option<i32>, String) {
    let job = WordJob {
        previous_worker_timeout_ms: 3_000,
        sink_delay_us: 600,
        shuffle_plugin,
        ..WordJob::new(&fx.input)
    }
    .write(&fx.path("job.toml"));
    let data_dir = fx.path("data");
    let mut cmd = Coordhost::new(&job, &data_dir);
    let mut run = cmd.start();
    if let Err(why) = run.poll_until(|| sources_done(&data_dir, 4)) {
        panic!(
            "never saw every source finished: {why}\n{}",
            run.stderr_tail()
        );
    }
    match run.kill() {
        Kill::Killed { .. } => {}
        Kill::TooLate(_) => panic!("the job finished before the kill"),
    }
    assert!(!job_succeeded(&data_dir), "_SUCCESS before the kill");
    let log = EventLog::read(&data_dir).expect("the event log at the kill");
    damage(&data_dir, &log);
    let (code, stderr) = cmd.start().exit();
    (data_dir, code, stderr)
}

/// Replaces `file` of source 0's partition by a FIFO after the crash; the
/// restart must count the partition missing, run source 0 again and
/// produce the exact output. Returns the restart's stderr.
fn assert_fifo_partition_file_reruns_its_producer(
    file: &str,
    shuffle_plugin: &'static str,
) -> String {
    let fx = Fixture::words();
    let mut fifo = PathBuf::new();
    let (data_dir, code, stderr) = crash_then(&fx, shuffle_plugin, |_, log| {
        let location = source_partition(log);
        fifo = location.join(file);
        std::fs::remove_file(&fifo).expect("the partition file exists");
        mkfifo(&fifo);
    });
    assert_eq!(code, Some(0), "the restart finishes the job:\n{stderr}");
    let got = sorted_output(&data_dir);
    let want = expected_output(&fx.input);
    assert!(
        got == want,
        "output after a FIFO in place of {}: {}",
        fifo.display(),
        first_difference(&got, &want)
    );
    let log = EventLog::read(&data_dir).expect("the event log");
    let newest = log.newest_segment().expect("a segment");
    let rerun: BTreeSet<u32> = log.finished_in_segment(SOURCE, newest);
    assert!(rerun.contains(&0), "{SOURCE} 0 ran again: {rerun:?}");
    let missing = log
        .events
        .iter()
        .filter(|e| e["event"]["kind"] == "ExecutionsReset")
        .map(|e| &e["event"]["event"])
        .filter(|b| {
            b["executions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|x| x["job_vertex"] == SOURCE && x["subtask"] == 0)
        })
        .any(|b| b["reason"].to_string().contains("RecoveryPartitionMissing"));
    assert!(missing, "recovery reset {SOURCE} 0 for a missing partition");
    stderr
}

#[test]
fn a_fifo_in_place_of_a_partitions_index_makes_it_missing_and_its_producer_runs_again() {
    let stderr = assert_fifo_partition_file_reruns_its_producer("index", "local-shuffle");
    // The shuffle master's open of the FIFO was refused, and the host said so.
    let warning = line_with(&stderr, "refused to open ");
    assert!(
        warning.contains("/index: it is a FIFO") && warning.contains("plugin=\"shuffle\""),
        "{warning}"
    );
}

#[test]
fn a_fifo_in_place_of_a_partitions_index_is_refused_to_a_python_shuffle_master_too() {
    let stderr = assert_fifo_partition_file_reruns_its_producer("index", "py-shuffle");
    let warning = line_with(&stderr, "refused to open ");
    assert!(warning.contains("/index: it is a FIFO"), "{warning}");
}

#[test]
fn a_fifo_in_place_of_a_partitions_data_makes_it_missing_and_its_producer_runs_again() {
    assert_fifo_partition_file_reruns_its_producer("data", "local-shuffle");
}

#[test]
fn a_fifo_in_place_of_a_log_segment_is_refused_at_once_naming_it() {
    let fx = Fixture::words();
    let mut segment = PathBuf::new();
    let (_, code, stderr) = crash_then(&fx, "local-shuffle", |data_dir, _| {
        segment = segment_files(&log_dir(data_dir))
            .pop()
            .expect("a segment file");
        std::fs::remove_file(&segment).expect("remove the segment");
        mkfifo(&segment);
    });
    // Exit 1, as for any log that cannot be read (the run failed on its own
    // storage, README "Exit codes"), with the one error line naming it.
    assert_eq!(code, Some(1), "the run fails on its log:\n{stderr}");
    let last = stderr
        .lines()
        .rfind(|l| l.starts_with("coordhost: "))
        .unwrap_or_else(|| panic!("no `coordhost:` error line:\n{stderr}"));
    assert!(
        last.contains(&segment.display().to_string())
            && last.contains("it is a FIFO, not a regular file"),
        "{last}"
    );
}

#[test]
fn plugin_call_refuses_a_fifo_or_a_device_as_its_steps_file_in_one_line() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let fifo = tmp.path().join("steps.fifo");
    mkfifo(&fifo);
    let plugin = plugin_path("static-enumerator");
    for (file, what) in [
        (fifo.clone(), "it is a FIFO, not a regular file"),
        (
            PathBuf::from("/dev/zero"),
            "it is a character device, not a regular file",
        ),
    ] {
        let mut command = crate::support::coordhost();
        command
            .env("COORDHOST_CACHE_DIR", cache_dir())
            .args(["plugin", "call"])
            .arg(&plugin)
            .arg("--steps")
            .arg(format!("@{}", file.display()));
        let o = run_guarded(command, tmp.path(), "call");
        assert_eq!(o.code, Some(2), "{}", o.describe());
        assert_eq!(o.stderr.lines().count(), 1, "{}", o.describe());
        assert!(
            o.stderr.contains(&format!(
                "--steps @{}: cannot read the script: {what}",
                file.display()
            )),
            "{}",
            o.describe()
        );
        assert!(o.stdout.is_empty(), "{}", o.describe());
    }
}
