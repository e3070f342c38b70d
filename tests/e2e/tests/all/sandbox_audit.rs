//! The sandbox audit: each promise of the README's sandbox paragraph
//! ("Write a plugin"), proved through a real `coordhost run` process with
//! the real `faulty-enumerator` component (issue 9):
//!
//! | promise | tests |
//! |---|---|
//! | a deadline on every call, also while the guest waits in WASI | `a_looping_*`, `a_sleeping_*` |
//! | a memory cap per instance | `a_plugin_that_grows_memory_*` |
//! | no file system beyond the granted directories (read, write, `..`, symlinks) | `the_file_system_*` |
//! | no environment variables | `no_environment_variable_*` |
//! | no sockets | `no_socket_*` |
//! | a trap poisons only that plugin: `rebuild` goes on, `fail` fails naming it | `a_trap_*` |
//! | plugin output is bounded (lines, rate, errors, the JSON summary) | `a_flood_*` |
//! | a source subtask waits for a split at most its split wait | `a_silent_enumerator_*` |
//!
//! Times are asserted within twice the deadline plus a generous slack (the
//! machine is shared); the scenarios without the fix take 20–60 s or
//! forever.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::support::{cache_dir, plugin_path, shuffle_table, toml_string};

/// Slack on top of twice a deadline: process start, loading components
/// from the shared cache, a loaded machine.
const SLACK: Duration = Duration::from_secs(20);

/// The log filter under which the probe's `host-log` lines (level info)
/// are printed.
const INFO: (&str, &str) = ("COORDHOST_LOG", "info");

/// A job with one source vertex fed by `faulty-enumerator` (named `faulty`)
/// and writing its lines as text.
struct AuditJob {
    /// `config = { ... }` of the enumerator, as TOML key/value pairs.
    config: Vec<(&'static str, String)>,
    /// `limits = { ... }` of the enumerator.
    limits: String,
    /// `dirs = [...]` of the enumerator.
    dirs: String,
    parallelism: u32,
    record_delay_us: u64,
    snapshot_min_pause_ms: u64,
    max_attempts: u32,
}

impl AuditJob {
    fn new(config: &[(&'static str, &str)], limits: &str) -> Self {
        Self {
            config: config.iter().map(|(k, v)| (*k, (*v).to_string())).collect(),
            limits: limits.to_string(),
            dirs: "[]".to_string(),
            parallelism: 2,
            record_delay_us: 0,
            snapshot_min_pause_ms: 1000,
            max_attempts: 1,
        }
    }

    fn toml(&self) -> String {
        let config: Vec<String> = self
            .config
            .iter()
            .map(|(k, v)| format!("{k} = {}", toml_string(v)))
            .collect();
        format!(
            r#"[job]
name = "audit"
max-attempts = {max_attempts}

[recovery]
enabled = true
previous-worker-timeout-ms = 1000
snapshot-min-pause-ms = {pause}

[shuffle]
plugin = "shuffle"

[plugins.faulty]
component = {faulty}
kind = "split-enumerator"
config = {{ {config} }}
dirs = {dirs}
limits = {{ {limits} }}

{shuffle}
[[vertices]]
id = "read"
source = "faulty"
parallelism = {parallelism}
record-delay-us = {delay}
operators = [
  {{ op = "read-lines" }},
  {{ op = "write-text", path = "${{data_dir}}/output/audit" }},
]
"#,
            max_attempts = self.max_attempts,
            pause = self.snapshot_min_pause_ms,
            faulty = toml_string(&plugin_path("faulty-enumerator").display().to_string()),
            shuffle = shuffle_table("shuffle", "local-shuffle", ""),
            config = config.join(", "),
            dirs = self.dirs,
            limits = self.limits,
            parallelism = self.parallelism,
            delay = self.record_delay_us,
        )
    }

    /// Writes the job into a new temporary folder and runs it.
    fn run(&self) -> Outcome {
        self.run_with(&[])
    }

    fn run_with(&self, env: &[(&str, &str)]) -> Outcome {
        let tmp = tempfile::tempdir().expect("tempdir");
        let job = tmp.path().join("audit.toml");
        std::fs::write(&job, self.toml()).expect("write job");
        let data_dir = tmp.path().join("state");
        let summary = tmp.path().join("summary.json");
        let mut command = crate::support::coordhost();
        command
            .env("COORDHOST_CACHE_DIR", cache_dir())
            .env_remove("COORDHOST_LOG")
            .arg("run")
            .arg(&job)
            .arg("--data-dir")
            .arg(&data_dir)
            .arg("--summary-json")
            .arg(&summary)
            .arg("--workers")
            .arg("2");
        for (k, v) in env {
            command.env(k, v);
        }
        let started = Instant::now();
        let out = command.output().expect("coordhost runs");
        let elapsed = started.elapsed();
        let summary = std::fs::read(&summary)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok());
        Outcome {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            elapsed,
            summary,
            data_dir,
            _tmp: tmp,
        }
    }
}

/// What one `coordhost run` did.
struct Outcome {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    elapsed: Duration,
    summary: Option<serde_json::Value>,
    data_dir: PathBuf,
    _tmp: tempfile::TempDir,
}

impl Outcome {
    fn describe(&self) -> String {
        format!(
            "exit {:?} after {:?}\n--- stdout\n{}\n--- stderr (first 4000 bytes)\n{}",
            self.code,
            self.elapsed,
            self.stdout,
            self.stderr.chars().take(4000).collect::<String>()
        )
    }

    fn assert_exit(&self, code: i32) {
        assert_eq!(self.code, Some(code), "{}", self.describe());
    }

    fn assert_within(&self, limit: Duration) {
        assert!(
            self.elapsed <= limit,
            "took {:?}, more than {limit:?}\n{}",
            self.elapsed,
            self.describe()
        );
    }

    fn assert_stderr_has(&self, needle: &str) {
        assert!(
            self.stderr.contains(needle),
            "stderr lacks {needle:?}\n{}",
            self.describe()
        );
    }

    /// The summary's `error`, which a failed job has.
    fn summary_error(&self) -> String {
        self.summary
            .as_ref()
            .and_then(|s| s["error"].as_str())
            .unwrap_or_else(|| panic!("the summary has an error\n{}", self.describe()))
            .to_string()
    }

    /// Every line of the published output, counted.
    fn output_lines(&self) -> BTreeMap<String, u32> {
        let dir = self.data_dir.join("output").join("audit");
        let mut lines = BTreeMap::new();
        let entries = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}\n{}", dir.display(), self.describe()));
        for entry in entries {
            let path = entry.expect("entry").path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if name.starts_with("part-") {
                for line in std::fs::read_to_string(&path).expect("part").lines() {
                    *lines.entry(line.to_string()).or_default() += 1;
                }
            }
        }
        lines
    }

    /// The `probe` lines the enumerator logged, one per attempt.
    fn probe_line(&self, what: &str, target: &str) -> String {
        let prefix = format!("probe {what} {target}: ");
        self.stderr
            .lines()
            .find_map(|l| l.find(&prefix).map(|at| l[at..].to_string()))
            .unwrap_or_else(|| panic!("no line {prefix:?}\n{}", self.describe()))
    }
}

/// Each of `line-0` .. `line-{n-1}` exactly once.
fn each_line_once(n: u32) -> BTreeMap<String, u32> {
    (0..n).map(|i| (format!("line-{i}"), 1)).collect()
}

fn assert_names_deadline(o: &Outcome, call: &str, ms: u64) {
    o.assert_exit(1);
    for needle in [
        "plugin `faulty`".to_string(),
        format!("`{call}`"),
        format!("deadline of {ms} ms"),
    ] {
        o.assert_stderr_has(&needle);
    }
}

#[test]
fn a_looping_enumerator_fails_the_job_within_twice_its_deadline() {
    for call in ["handle-split-request", "start", "create"] {
        let o = AuditJob::new(
            &[("fault", "loop"), ("on", call)],
            "call-timeout-ms = 1000, on-trap = \"fail\"",
        )
        .run();
        assert_names_deadline(&o, call, 1000);
        o.assert_within(2 * Duration::from_secs(1) + SLACK);
    }
}

#[test]
fn a_sleeping_enumerator_is_cut_off_at_its_deadline_and_the_job_fails() {
    // Without a deadline-aware WASI, each call takes the full 60 s and counts
    // as a success.
    let o = AuditJob::new(
        &[("fault", "sleep"), ("sleep-ms", "60000")],
        "call-timeout-ms = 1000, on-trap = \"fail\"",
    )
    .run();
    assert_names_deadline(&o, "handle-split-request", 1000);
    o.assert_within(2 * Duration::from_secs(1) + SLACK);
    assert!(
        o.elapsed < Duration::from_secs(60),
        "the sleep was not cut: {:?}",
        o.elapsed
    );
}

#[test]
fn a_plugin_that_grows_memory_stops_at_its_cap_and_the_job_fails_naming_it() {
    let o = AuditJob::new(
        &[("fault", "grow-memory")],
        "memory-mib = 32, call-timeout-ms = 30000, on-trap = \"fail\"",
    )
    .run();
    o.assert_exit(1);
    o.assert_stderr_has("plugin `faulty`");
    o.assert_stderr_has("past its cap of 33554432 bytes");
}

/// A file outside every grant, a granted folder, and ways out of it.
struct Escapes {
    tmp: tempfile::TempDir,
}

impl Escapes {
    fn new() -> Self {
        let tmp = tempfile::tempdir().expect("tempdir");
        let granted = tmp.path().join("granted");
        let outside = tmp.path().join("outside");
        std::fs::create_dir_all(&granted).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("secret.txt"), "secret\n").unwrap();
        std::fs::write(granted.join("inside.txt"), "inside\n").unwrap();
        std::os::unix::fs::symlink(outside.join("secret.txt"), granted.join("link-to-secret"))
            .unwrap();
        std::os::unix::fs::symlink("../outside", granted.join("link-to-outside")).unwrap();
        Self { tmp }
    }

    fn granted(&self) -> PathBuf {
        self.tmp.path().join("granted")
    }

    fn outside(&self) -> PathBuf {
        self.tmp.path().join("outside")
    }
}

fn path_list(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(",")
}

#[test]
fn the_file_system_beyond_the_grants_stays_out_of_reach_through_wasi() {
    let e = Escapes::new();
    let (granted, outside) = (e.granted(), e.outside());
    let reads = [
        granted.join("inside.txt"),
        outside.join("secret.txt"),
        granted.join("../outside/secret.txt"),
        granted.join("link-to-secret"),
        granted.join("link-to-outside/secret.txt"),
        PathBuf::from("/etc/passwd"),
    ];
    let writes = [
        granted.join("written.txt"),
        outside.join("new.txt"),
        granted.join("../outside/dotdot.txt"),
        granted.join("link-to-outside/through-link.txt"),
        granted.join("link-to-secret"),
    ];
    let mut job = AuditJob::new(
        &[
            ("fault", "probe"),
            ("on", "start"),
            ("splits", "2"),
            ("probe-read", &path_list(&reads)),
            ("probe-write", &path_list(&writes)),
        ],
        "on-trap = \"fail\"",
    );
    job.dirs = format!(
        "[{{ path = {}, writable = true }}]",
        toml_string(&granted.display().to_string())
    );
    let o = job.run_with(&[INFO]);
    o.assert_exit(0);

    // The control: inside the grant, reading and writing work, so a
    // "refused" below is the sandbox and not a broken probe.
    let inside = o.probe_line("read", &reads[0].display().to_string());
    assert!(inside.contains("ALLOWED read 7 bytes"), "{inside}");
    let written = o.probe_line("write", &writes[0].display().to_string());
    assert!(written.contains("ALLOWED"), "{written}");
    assert!(granted.join("written.txt").is_file());

    for path in &reads[1..] {
        let line = o.probe_line("read", &path.display().to_string());
        assert!(line.contains(": refused: "), "{line}");
    }
    for path in &writes[1..] {
        let line = o.probe_line("write", &path.display().to_string());
        assert!(line.contains(": refused: "), "{line}");
    }
    let mut outside_now: Vec<String> = std::fs::read_dir(&outside)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    outside_now.sort();
    assert_eq!(outside_now, ["secret.txt"], "nothing was created outside");
    assert_eq!(
        std::fs::read_to_string(outside.join("secret.txt")).unwrap(),
        "secret\n",
        "the file behind the symlink is unchanged"
    );
    assert_eq!(o.output_lines(), each_line_once(2));
}

#[test]
fn no_environment_variable_of_the_host_reaches_a_plugin() {
    let o = AuditJob::new(&[("fault", "probe"), ("on", "start")], "on-trap = \"fail\"")
        .run_with(&[INFO, ("COORDHOST_AUDIT_SECRET", "do-not-leak")]);
    o.assert_exit(0);
    let line = o.probe_line("env", "variables");
    assert!(line.contains("variables: refused: none visible"), "{line}");
    assert!(!o.stderr.contains("COORDHOST_AUDIT_SECRET"));
}

#[test]
fn no_socket_reaches_the_network_from_a_plugin() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
    listener.set_nonblocking(true).expect("nonblocking");
    let address = listener.local_addr().expect("address").to_string();
    let o = AuditJob::new(
        &[
            ("fault", "probe"),
            ("on", "start"),
            ("probe-connect", &address),
        ],
        "on-trap = \"fail\"",
    )
    .run_with(&[INFO]);
    o.assert_exit(0);
    let line = o.probe_line("connect", &address);
    assert!(line.contains(": refused: "), "{line}");
    match listener.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("the listener was reached: {other:?}"),
    }
}

#[test]
fn a_trap_after_a_snapshot_with_rebuild_lets_the_job_finish_with_every_line_once() {
    // Issue 9, item 3: the second batch snapshot traps; the store is rebuilt
    // from the first and the job goes on.
    let mut job = AuditJob::new(
        &[
            ("fault", "trap"),
            ("on", "snapshot-state"),
            ("trap-after", "1"),
            ("splits", "1"),
        ],
        "on-trap = \"rebuild\"",
    );
    job.record_delay_us = 500_000;
    job.snapshot_min_pause_ms = 0;
    let o = job.run();
    o.assert_exit(0);
    o.assert_stderr_has("store rebuilt from the last batch snapshot");
    assert_eq!(o.output_lines(), each_line_once(1));
}

#[test]
fn a_trap_before_any_snapshot_with_rebuild_starts_afresh_and_replays_the_assignments() {
    // The second `add-reader` traps before any snapshot exists: the store is
    // created afresh, splits already assigned are not handed out twice.
    let mut job = AuditJob::new(
        &[
            ("fault", "trap"),
            ("on", "add-reader"),
            ("trap-after", "1"),
            ("splits", "6"),
        ],
        "on-trap = \"rebuild\"",
    );
    job.parallelism = 3;
    let o = job.run();
    o.assert_exit(0);
    o.assert_stderr_has("store rebuilt from a fresh `create`");
    assert_eq!(o.output_lines(), each_line_once(6));
}

#[test]
fn a_trap_without_on_trap_fails_the_job_as_docs_job_file_promises() {
    // Issue 13: one type for a plugin's settings, one default (`fail`).
    let o = AuditJob::new(&[("fault", "trap")], "").run();
    o.assert_exit(1);
    assert!(
        o.stderr.contains("`handle-split-request` trapped") && !o.stderr.contains("store rebuilt"),
        "the default fails the job, it does not rebuild:\n{}",
        o.describe()
    );
}

#[test]
fn a_trap_with_fail_fails_the_job_naming_plugin_and_call_with_the_reason_first() {
    let o = AuditJob::new(&[("fault", "trap")], "on-trap = \"fail\"").run();
    o.assert_exit(1);
    let line = o
        .stderr
        .lines()
        .find(|l| l.starts_with("coordhost: "))
        .unwrap_or_else(|| panic!("an error line\n{}", o.describe()))
        .to_string();
    assert!(line.contains("plugin `faulty`"), "{line}");
    assert!(line.contains("`handle-split-request` trapped"), "{line}");
    assert!(!line.contains("trapped: ;"), "no empty reason: {line}");
    let reason = line
        .find("faulty-enumerator: trap on handle-split-request")
        .unwrap_or_else(|| panic!("the panic message: {line}"));
    let kind = line
        .find("unreachable")
        .unwrap_or_else(|| panic!("the trap kind: {line}"));
    assert!(reason < kind, "the reason comes first: {line}");
    assert!(
        !o.stderr.contains("wasm backtrace"),
        "no backtrace before the reason\n{}",
        o.describe()
    );
}

#[test]
fn a_flood_of_plugin_output_is_cut_rate_limited_and_kept_out_of_the_summary() {
    let mut job = AuditJob::new(
        &[
            ("fault", "flood"),
            ("flood-lines", "20000"),
            ("flood-line-bytes", "8388608"),
        ],
        "call-timeout-ms = 60000, on-trap = \"fail\"",
    );
    job.parallelism = 1;
    let o = job.run_with(&[("COORDHOST_LOG", "info")]);
    o.assert_exit(1);
    // 20 000 lines on each of three channels plus three 8 MiB texts.
    assert!(
        o.stderr.len() < 1 << 20,
        "{} bytes of stderr",
        o.stderr.len()
    );
    let longest = o.stderr.lines().map(str::len).max().unwrap_or(0);
    assert!(longest < 16 << 10, "a line of {longest} bytes");
    o.assert_stderr_has("lines of plugin output dropped");
    o.assert_stderr_has("more bytes)");
    // The error: one line, reason first, cut.
    let error = o.summary_error();
    assert!(
        error.len() < 8 << 10,
        "{} bytes in the summary",
        error.len()
    );
    assert!(
        error.contains("flood error: the reason comes first second line"),
        "{}",
        &error[..error.len().min(300)]
    );
    assert!(!error.contains('\n'));
    assert!(
        !o.stderr.lines().any(|l| l.starts_with("second line")),
        "multi-line error printed"
    );
}

#[test]
fn a_silent_enumerator_fails_the_subtask_after_its_split_wait_then_the_job() {
    // Issue 9, item 7: `handle-split-request` answers `ok` but never assigns.
    let mut job = AuditJob::new(
        &[("fault", "silent")],
        "split-wait-ms = 1500, on-trap = \"fail\"",
    );
    job.parallelism = 1;
    job.max_attempts = 2;
    let o = job.run();
    o.assert_exit(1);
    o.assert_stderr_has("plugin `faulty` gave subtask 0 of `read` no split");
    o.assert_stderr_has("split wait of 1500 ms");
    // Retried like any task failure: two attempts waited.
    o.assert_within(2 * Duration::from_millis(1500) * 2 + SLACK);
    assert!(
        o.elapsed >= Duration::from_millis(2 * 1500),
        "both attempts waited: {:?}",
        o.elapsed
    );
    let error = o.summary_error();
    assert!(error.contains("(of at most 2)"), "{error}");
    assert!(error.contains("split wait of 1500 ms"), "{error}");
}

#[test]
fn the_audit_job_runs_clean_without_a_fault() {
    // The control of every case above: the same job without a fault.
    let o = AuditJob::new(&[("splits", "5")], "on-trap = \"fail\"").run();
    o.assert_exit(0);
    assert_eq!(o.output_lines(), each_line_once(5));
}

#[test]
fn the_probe_plugin_reports_allowed_access_so_its_refusals_mean_something() {
    // With the folder granted, the probe sees and reads the file: its
    // "refused" lines in the other tests come from the sandbox.
    let e = Escapes::new();
    let secret = e.outside().join("secret.txt");
    let mut job = AuditJob::new(
        &[
            ("fault", "probe"),
            ("on", "start"),
            ("probe-read", &secret.display().to_string()),
        ],
        "on-trap = \"fail\"",
    );
    job.dirs = format!(
        "[{{ path = {}, writable = false }}]",
        toml_string(&e.outside().display().to_string())
    );
    let o = job.run_with(&[INFO]);
    o.assert_exit(0);
    let line = o.probe_line("read", &secret.display().to_string());
    assert!(line.contains("ALLOWED read 7 bytes"), "{line}");
}

#[test]
fn a_plugin_that_traps_again_after_its_rebuild_without_progress_fails_the_job_instead_of_looping() {
    // Every rebuilt store hands out the two splits readers already have
    // (dropped by the host), then traps at the same place: rebuilding it
    // again would loop forever. The second fault without progress fails.
    let o = AuditJob::new(
        &[("fault", "trap"), ("trap-after", "2"), ("splits", "6")],
        "on-trap = \"rebuild\"",
    )
    .run();
    o.assert_exit(1);
    o.assert_stderr_has("faulted again after its store was rebuilt, before it made any progress");
    o.assert_stderr_has("plugin `faulty`");
    assert!(
        o.stderr.matches("store rebuilt from").count() <= 3,
        "a bounded number of rebuilds\n{}",
        o.describe()
    );
}
