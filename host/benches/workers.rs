//! Worker processes (issue 14): the three figures of the issue, measured on
//! real `coordhost` processes (a coordinator and `coordhost worker`s on
//! loopback) running real components (the sample `static-enumerator`,
//! `file-enumerator` and `local-shuffle`).
//!
//! 1. **Coordinator cost per task**: the same job (`source`, parallelism P,
//!    one inline one-line split per subtask, `read-lines` + `tokenize` →
//!    edge → `sink0`, `aggregate` + `write-text`; a `hash` edge to P/3 sinks
//!    and a `forward` edge to P sinks) run with embedded workers
//!    (`coordhost run JOB`, one thread per core) and with 3 external worker
//!    processes (`--listen 127.0.0.1:PORT --external-workers 3`, 2 slots
//!    each), and with the 3 workers on mutual TLS (`--tls-cert/--tls-key/
//!    --tls-ca` on the coordinator and every worker, certificates of
//!    `coordhost cluster certs`; issue 25), followed per edge by a line
//!    "TLS vs plain" with both costs per task and their ratio (the issue's
//!    target: at most ×1.15). Per row, the median of the runs of: the job's wall time as the
//!    summary reports it (`wall_ms`: first vertex to end, without loading
//!    plugins or waiting for workers) and per task; the process's wall time
//!    (spawn to exit); per source and per sink subtask, each vertex's first
//!    to last progress line; the coordinator process's CPU time (user +
//!    system, `/proc/PID/stat` read once it has exited and before it is
//!    reaped); the summary's `coordinator_busy_us` per task; and the
//!    workers' CPU time during the run.
//! 2. **Restart to the first task running again** with 3 workers holding
//!    P × E result partitions (one partition = one producer attempt × one
//!    outgoing edge): `source` (parallelism P, tiny inline splits) with E
//!    `hash` edges to E sinks (parallelism 2 each). The coordinator is
//!    SIGKILLed as soon as it printed `source: P/P finished` (the progress
//!    line follows the durable `ExecutionFinished`), then started again with
//!    the same `--data-dir` while the workers live on. Measured from the
//!    restarted process's spawn, on the lines it and the workers print
//!    (`COORDHOST_LOG`), stamped as they arrive: listening, the 3 workers
//!    registered again (with how many partitions they hold), the partitions
//!    matched against the log (`partitions reported by workers`), the
//!    recovery decision durable (`recovered from the job event log`), the
//!    first `deploying` line of the scheduler, and the first `running` line
//!    of a worker in its new session (the first task running again). Then
//!    the producers the restarted run skipped (its `--summary-json`). A job
//!    vertex has at most 4096 subtasks, so 10 000 partitions are 2500
//!    producers × 4 edges; 4000 × 1 is the second point.
//! 3. **Worker-to-worker shuffle bytes per second**: a job reading M MiB of
//!    generated text (`file-enumerator`, 4 sources, `read-lines`) → `hash`
//!    edge on the line → 6 consumers that read every subpartition and keep
//!    nothing (`filter` no line matches, `write-text`), embedded (every read
//!    from the local disk) vs 3 external workers (a consumer reads the
//!    partitions of producers on another worker through
//!    `ReadSubpartitions`). The consumer phase is timed from the progress
//!    line `sink: parallelism 6` (every producer finished) to
//!    `sink: 6/6 finished`; the bytes are the producers' bytes per
//!    subpartition from the event log (`coordhost log inspect --json`),
//!    those read remotely found from where each attempt ran (the workers'
//!    `running` lines). Also on 3 TLS workers, followed by a line "TLS vs
//!    plain" with both MB/s and their ratio (the issue's target: at least
//!    ×0.8).
//!
//! `cargo bench -p coordhost --bench workers` (`make bench-workers`) after
//! `make plugins`. Everything runs in a temporary folder, with this
//! workspace's `build/cache` as the compiled-component cache; every child
//! process is killed when the bench ends, also on a panic. Environment:
//! - `COORDHOST_BENCH_BIN`: the `coordhost` binary (default the one cargo
//!   built with this bench);
//! - `COORDHOST_BENCH_ONLY`: comma-separated `cost`, `restart`, `shuffle`
//!   (default all three);
//! - `COORDHOST_BENCH_TASK_SOURCES`: P of figure 1 (default 600);
//! - `COORDHOST_BENCH_COST_EDGES`: the edges of figure 1 (default
//!   `hash,forward`);
//! - `COORDHOST_BENCH_RUNS`: runs per row of figures 1 and 3 (default 3);
//! - `COORDHOST_BENCH_RESTART`: the points `PxE` of figure 2,
//!   comma-separated (default `2500x4,4000x1`);
//! - `COORDHOST_BENCH_SHUFFLE_MIB`: M of figure 3 (default 512);
//! - `COORDHOST_BENCH_LOGS`: a folder where every process's output is kept
//!   (each line with its arrival in seconds since that process's spawn).
//!
//! Without `--bench` (`cargo test --benches`) it runs once, small.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_string())
}

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace")
        .to_path_buf()
}

fn binary() -> PathBuf {
    let bin = std::env::var_os("COORDHOST_BENCH_BIN").map_or_else(
        || PathBuf::from(env!("CARGO_BIN_EXE_coordhost")),
        PathBuf::from,
    );
    assert!(bin.is_file(), "{} is not a file", bin.display());
    bin
}

fn plugin(name: &str) -> PathBuf {
    let p = workspace()
        .join("build/plugins")
        .join(format!("{name}.wasm"));
    assert!(
        p.is_file(),
        "{} is missing: run `make plugins`",
        p.display()
    );
    p
}

fn cache_dir() -> PathBuf {
    workspace().join("build/cache")
}

/// A loopback address with a port nobody listened on a moment ago.
fn free_port() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    l.local_addr().expect("local addr").to_string()
}

/// Clock ticks per second of `/proc/PID/stat` times.
fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

/// State and user + system CPU seconds of a process from `/proc/PID/stat`.
fn proc_stat(pid: u32, ticks: f64) -> Option<(char, f64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields follow the last `)`.
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let state = f.first()?.chars().next()?;
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    Some((state, (utime + stime) / ticks))
}

/// Lines a child printed (stdout and stderr), each stamped when it arrived.
type Lines = Arc<Mutex<Vec<(Instant, String)>>>;

/// A child process whose output is collected line by line; killed (SIGKILL)
/// and reaped when dropped.
struct Proc {
    name: String,
    child: Option<Child>,
    started: Instant,
    lines: Lines,
}

impl Proc {
    fn spawn(name: &str, mut cmd: Command) -> Self {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let started = Instant::now();
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("start {name}: {e}"));
        let lines: Lines = Arc::default();
        let out = child.stdout.take().expect("stdout");
        let err = child.stderr.take().expect("stderr");
        collect(out, lines.clone());
        collect(err, lines.clone());
        Self {
            name: name.to_string(),
            child: Some(child),
            started,
            lines,
        }
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// Arrival of the first line containing `pattern` at or after `after`.
    fn first_line(&self, pattern: &str, after: Instant) -> Option<Instant> {
        self.lines
            .lock()
            .expect("lines")
            .iter()
            .find(|(t, l)| *t >= after && l.contains(pattern))
            .map(|(t, _)| *t)
    }

    /// Every line containing `pattern`.
    fn lines_with(&self, pattern: &str) -> Vec<(Instant, String)> {
        self.lines
            .lock()
            .expect("lines")
            .iter()
            .filter(|(_, l)| l.contains(pattern))
            .cloned()
            .collect()
    }

    /// The last lines printed, for failure messages.
    fn tail(&self) -> String {
        let lines = self.lines.lock().expect("lines");
        let from = lines.len().saturating_sub(30);
        lines[from..]
            .iter()
            .map(|(_, l)| l.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Waits until a line contains `pattern`; panics if the process ends
    /// first or `timeout` passes.
    fn wait_for_line(&mut self, pattern: &str, timeout: Duration) -> Instant {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(t) = self.first_line(pattern, self.started) {
                return t;
            }
            let ended = self
                .child
                .as_mut()
                .expect("running")
                .try_wait()
                .expect("try_wait");
            assert!(
                ended.is_none() && Instant::now() < deadline,
                "{} printed no line with `{pattern}` ({}):\n{}",
                self.name,
                ended.map_or("timed out".to_string(), |s| format!("ended {s}")),
                self.tail()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Waits for the process to end: its exit status, wall time since spawn
    /// and CPU seconds (read from `/proc` while it is a zombie, before it is
    /// reaped; the last sample if that was missed).
    fn wait(&mut self, ticks: f64) -> (ExitStatus, Duration, f64) {
        let pid = self.pid();
        let mut cpu = 0.0;
        while let Some((state, c)) = proc_stat(pid, ticks) {
            cpu = c;
            if state == 'Z' {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let status = self.child.take().expect("running").wait().expect("wait");
        (status, self.started.elapsed(), cpu)
    }

    fn kill(&mut self) -> ExitStatus {
        let mut c = self.child.take().expect("running");
        c.kill().expect("SIGKILL");
        c.wait().expect("reap")
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(c) = self.child.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
        // `COORDHOST_BENCH_LOGS=DIR`: keep what every process printed.
        if let Some(dir) = std::env::var_os("COORDHOST_BENCH_LOGS") {
            let dir = PathBuf::from(dir);
            let _ = std::fs::create_dir_all(&dir);
            let name = format!(
                "{}-{}.log",
                self.name.replace(|c: char| !c.is_ascii_alphanumeric(), "-"),
                self.started.elapsed().as_nanos()
            );
            let text: Vec<String> = self
                .lines
                .lock()
                .map(|l| {
                    l.iter()
                        .map(|(t, l)| {
                            format!("{:>9.3} {l}", t.duration_since(self.started).as_secs_f64())
                        })
                        .collect()
                })
                .unwrap_or_default();
            let _ = std::fs::write(dir.join(name), text.join("\n"));
        }
    }
}

fn collect(stream: impl Read + Send + 'static, lines: Lines) {
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { break };
            lines.lock().expect("lines").push((Instant::now(), line));
        }
    });
}

/// What a worker prints when an attempt starts (`COORDHOST_LOG=coordhost::remote=debug`).
const RUNNING: &str = "worker: running ";

/// Three (or n) `coordhost worker` processes, killed when dropped.
struct Workers {
    procs: Vec<Proc>,
}

impl Workers {
    fn start(n: usize, coordinator: &str, base: &Path, slots: u32) -> Self {
        Self::start_with(n, coordinator, base, slots, |_| Vec::new())
    }

    /// As [`Workers::start`], worker `i` with the more arguments `extra(i)`
    /// (its TLS files).
    fn start_with(
        n: usize,
        coordinator: &str,
        base: &Path,
        slots: u32,
        extra: impl Fn(usize) -> Vec<String>,
    ) -> Self {
        let procs = (0..n)
            .map(|i| {
                let mut cmd = Command::new(binary());
                cmd.arg("--cache-dir")
                    .arg(cache_dir())
                    .arg("worker")
                    .arg("--coordinator")
                    .arg(coordinator)
                    .arg("--data-dir")
                    .arg(base.join(format!("w{i}")))
                    .arg("--slots")
                    .arg(slots.to_string())
                    .arg("--id")
                    .arg(format!("w{i}"))
                    .arg("--keep-partitions-ms")
                    .arg("600000")
                    .args(extra(i))
                    // `running` (an attempt starts) is a debug line.
                    .env("COORDHOST_LOG", "coordhost::remote=debug");
                Proc::spawn(&format!("worker w{i}"), cmd)
            })
            .collect();
        Self { procs }
    }

    /// The first `running` line (an attempt starts) of any worker in the
    /// session it registered in at or after `after`.
    fn first_running(&self, after: Instant) -> Option<Instant> {
        self.procs
            .iter()
            .filter_map(|p| {
                let registered = p.first_line("worker: registered ", after)?;
                p.first_line(RUNNING, registered)
            })
            .min()
    }

    /// Where each attempt (vertex, subtask, attempt) ran since `after`:
    /// the index of its worker.
    fn placement(&self, after: Instant) -> HashMap<(String, u32, u32), usize> {
        let mut at = HashMap::new();
        for (i, p) in self.procs.iter().enumerate() {
            for (t, line) in p.lines_with(RUNNING) {
                if t < after {
                    continue;
                }
                let field = |k: &str| {
                    line.split_whitespace()
                        .find_map(|w| w.strip_prefix(&format!("{k}=")))
                        .map(str::to_string)
                };
                if let (Some(v), Some(s), Some(a)) =
                    (field("vertex"), field("subtask"), field("attempt"))
                {
                    at.insert(
                        (v, s.parse().expect("subtask"), a.parse().expect("attempt")),
                        i,
                    );
                }
            }
        }
        at
    }
}

/// `coordhost run` with these arguments, output collected.
fn run_cmd(job: &Path, data: &Path, summary: &Path, extra: &[String], log: &str) -> Command {
    let mut cmd = Command::new(binary());
    cmd.arg("--cache-dir")
        .arg(cache_dir())
        .arg("run")
        .arg(job)
        .arg("--data-dir")
        .arg(data)
        .arg("--summary-json")
        .arg(summary)
        .args(extra)
        .env("COORDHOST_LOG", log);
    cmd
}

/// The `run` arguments that put a job on `n` workers registering at `addr`.
fn external(addr: &str, n: usize) -> Vec<String> {
    vec![
        "--listen".into(),
        addr.into(),
        "--external-workers".into(),
        n.to_string(),
        "--worker-wait-ms".into(),
        "60000".into(),
    ]
}

/// `coordhost cluster certs DIR --job JOB --workers w0,w1,w2`: the CA and
/// the certificates of a TLS cluster for `job` (issue 25).
fn certs(dir: &Path, job: &str) -> PathBuf {
    let out = Command::new(binary())
        .args(["cluster", "certs"])
        .arg(dir)
        .args(["--job", job, "--workers", "w0,w1,w2"])
        .output()
        .expect("run coordhost cluster certs");
    assert!(
        out.status.success(),
        "cluster certs: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    dir.to_path_buf()
}

/// `--tls-cert DIR/NAME.pem --tls-key DIR/NAME.key --tls-ca DIR/ca.pem`.
fn tls_args(pki: &Path, name: &str) -> Vec<String> {
    let f = |n: String| pki.join(n).display().to_string();
    vec![
        "--tls-cert".into(),
        f(format!("{name}.pem")),
        "--tls-key".into(),
        f(format!("{name}.key")),
        "--tls-ca".into(),
        f("ca.pem".into()),
    ]
}

/// The worker modes of figures 1 and 3 besides `embedded`: 3 workers on
/// plain gRPC, and 3 workers on mutual TLS (certificates for `job` in
/// `work/pki`), each set registering at a port of its own. Returns, per
/// mode, its name, the `run` arguments and its workers.
fn worker_modes(work: &Path, job: &str) -> Vec<(&'static str, Vec<String>, Workers)> {
    let plain = free_port();
    let tls = free_port();
    let pki = certs(&work.join("pki"), job);
    let mut tls_run = external(&tls, 3);
    tls_run.extend(tls_args(&pki, "coordinator"));
    vec![
        (
            "3 workers",
            external(&plain, 3),
            Workers::start(3, &plain, &work.join("workers"), 2),
        ),
        (
            "3 w. TLS",
            tls_run,
            Workers::start_with(3, &tls, &work.join("workers-tls"), 2, |i| {
                tls_args(&pki, &format!("w{i}"))
            }),
        ),
    ]
}

/// `tls / plain` as `×R` (`-` when plain is 0).
fn ratio(tls: f64, plain: f64) -> String {
    if plain > 0.0 {
        format!("x{:.2}", tls / plain)
    } else {
        "-".into()
    }
}

fn summary(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("summary file"))
        .expect("summary JSON")
}

/// The `[shuffle]` and `local-shuffle` tables of every job here.
const SHUFFLE: &str = r#"[shuffle]
plugin = "shuffle"

[plugins.shuffle]
component = "LOCAL_SHUFFLE"
kind = "shuffle-master"
config = { root = "${data_dir}/shuffle" }
dirs = [{ path = "${data_dir}/shuffle", writable = true }]
"#;

/// A job of many small tasks: `source` (parallelism `sources`, one inline
/// one-line split each) with one edge of kind `edge` (`hash`, or `forward`
/// with `sink_parallelism` = `sources`) to each of `sinks` sink vertices
/// `sink0`, `sink1`, … of parallelism `sink_parallelism`.
fn tiny_job(path: &Path, name: &str, sources: u32, sinks: u32, sink_parallelism: u32, edge: &str) {
    let splits: Vec<String> = (0..sources)
        .map(|i| format!("\"split.{i}\" = \"w{} x{}\"", i % 97, i % 7))
        .collect();
    let mut text = format!(
        r#"[job]
name = "{name}"

[recovery]
previous-worker-timeout-ms = 30000

{shuffle}
[plugins.splits]
component = "{enumerator}"
kind = "split-enumerator"
config = {{ {splits} }}

[[vertices]]
id = "source"
source = "splits"
parallelism = {sources}
operators = [{{ op = "read-lines" }}, {{ op = "tokenize", column = "line", as = "word" }}]
"#,
        shuffle = SHUFFLE.replace("LOCAL_SHUFFLE", &plugin("local-shuffle").to_string_lossy()),
        enumerator = plugin("static-enumerator").display(),
        splits = splits.join(", "),
    );
    for s in 0..sinks {
        text += &format!(
            r#"
[[vertices]]
id = "sink{s}"
parallelism = {sink_parallelism}
operators = [{{ op = "aggregate", key = ["word"], aggregates = [{{ fn = "count", as = "n" }}] }}, {{ op = "write-text", path = "${{data_dir}}/out{s}" }}]

[[edges]]
from = "source"
to = "sink{s}"
kind = "{edge}"{key}
"#,
            key = if edge == "hash" {
                "\nkey = [\"word\"]"
            } else {
                ""
            },
        );
    }
    std::fs::write(path, text).expect("job file");
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// One run of figure 1.
struct CostRun {
    job_s: f64,
    process_s: f64,
    cpu_s: f64,
    busy_s: f64,
    tasks: u64,
    /// Seconds from the first progress line of `source` to its last.
    sources_s: f64,
    /// Seconds from `sink0: parallelism` (every source finished) to its last progress line.
    sinks_s: f64,
    /// CPU seconds of the worker processes during the run.
    workers_cpu_s: f64,
}

impl Workers {
    /// User + system CPU seconds of all workers so far.
    fn cpu(&self, ticks: f64) -> f64 {
        self.procs
            .iter()
            .filter_map(|p| proc_stat(p.pid(), ticks).map(|(_, c)| c))
            .sum()
    }
}

fn cost_run(
    work: &Path,
    job: &Path,
    run: usize,
    extra: &[String],
    ticks: f64,
    workers: Option<&Workers>,
) -> CostRun {
    let data = work.join(format!("data-{run}"));
    let summary_path = work.join(format!("summary-{run}.json"));
    let workers_before = workers.map_or(0.0, |w| w.cpu(ticks));
    let mut p = Proc::spawn(
        "coordhost run",
        run_cmd(job, &data, &summary_path, extra, "warn"),
    );
    let (status, wall, cpu) = p.wait(ticks);
    let workers_cpu_s = workers.map_or(0.0, |w| w.cpu(ticks)) - workers_before;
    assert!(
        status.success(),
        "coordhost run ended {status}:\n{}\n{}",
        p.tail(),
        workers.map_or(String::new(), |w| w
            .procs
            .iter()
            .map(Proc::tail)
            .collect::<Vec<_>>()
            .join("\n"))
    );
    let s = summary(&summary_path);
    assert_eq!(s["status"], "finished", "{s}");
    assert_eq!(s["tasks_reset"], 0, "{s}");
    let _ = std::fs::remove_dir_all(&data);
    let phase = |vertex: &str| {
        let lines = p.lines_with(&format!("{vertex}: "));
        let first = lines
            .iter()
            .find(|(_, l)| l.contains(": parallelism"))
            .map(|(t, _)| *t);
        match (first, lines.last()) {
            (Some(a), Some((b, _))) => b.duration_since(a).as_secs_f64(),
            _ => 0.0,
        }
    };
    CostRun {
        sources_s: phase("source"),
        sinks_s: phase("sink0"),
        workers_cpu_s,
        job_s: s["wall_ms"].as_f64().expect("wall_ms") / 1e3,
        process_s: wall.as_secs_f64(),
        cpu_s: cpu,
        busy_s: s["coordinator_busy_us"].as_f64().unwrap_or(0.0) / 1e6,
        tasks: s["tasks_run"].as_u64().expect("tasks_run"),
    }
}

/// Figure 1: coordinator cost per task, embedded vs 3 external workers,
/// for each edge kind of `edges`.
fn cost_per_task(root: &Path, sources: u32, edges: &[String], runs: usize, ticks: f64) {
    let work = root.join("cost");
    std::fs::create_dir_all(&work).expect("folder");
    println!(
        "\n1. coordinator cost per task: source (parallelism {sources}, one tiny inline split each) -> edge -> sink0; embedded ({} threads, one per core) vs 3 worker processes (2 slots each), plain and with mutual TLS; {runs} run(s) per row, median",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let modes = worker_modes(&work, "cost");
    let mut rows = Vec::new();
    let mut ratios: Vec<(String, f64, f64, f64)> = Vec::new();
    let mut run = 0;
    for edge in edges {
        let sinks = if edge == "forward" {
            sources
        } else {
            (sources / 3).max(1)
        };
        let job = work.join(format!("job-{edge}.toml"));
        tiny_job(&job, "cost", sources, 1, sinks, edge);
        let all_modes: Vec<(&str, Vec<String>, Option<&Workers>)> =
            std::iter::once(("embedded", Vec::new(), None))
                .chain(modes.iter().map(|(m, e, w)| (*m, e.clone(), Some(w))))
                .collect();
        // Rounds interleave the modes (embedded, plain, TLS, embedded, ...):
        // a load that drifts during the figure then weighs on every mode
        // alike instead of on whichever ran last.
        let mut by_mode: Vec<Vec<CostRun>> = all_modes.iter().map(|_| Vec::new()).collect();
        for i in 0..runs {
            for (m, (mode, extra, w)) in all_modes.iter().enumerate() {
                run += 1;
                let r = cost_run(&work, &job, run, extra, ticks, *w);
                eprintln!(
                    "  {edge} {sources}->{sinks} {mode} run {}/{runs}: job {:.2} s (sources {:.2} s, sinks {:.2} s), process {:.2} s, CPU {:.2} s, workers' CPU {:.2} s",
                    i + 1,
                    r.job_s,
                    r.sources_s,
                    r.sinks_s,
                    r.process_s,
                    r.cpu_s,
                    r.workers_cpu_s
                );
                by_mode[m].push(r);
            }
        }
        // Per round, TLS over plain (the two ran back to back): the median
        // of these ratios is what the target is checked against.
        if let [_, plain, tls] = &by_mode[..] {
            let paired = |f: fn(&CostRun) -> f64| {
                let mut r: Vec<f64> = plain
                    .iter()
                    .zip(tls)
                    .filter(|(p, _)| f(p) > 0.0)
                    .map(|(p, t)| f(t) / f(p))
                    .collect();
                if r.is_empty() { 0.0 } else { median(&mut r) }
            };
            ratios.push((
                format!("{edge} {sources}->{sinks}"),
                paired(|r| r.job_s),
                paired(|r| r.cpu_s),
                paired(|r| r.workers_cpu_s),
            ));
        }
        for ((mode, _, _), all) in all_modes.iter().zip(by_mode) {
            let mode = *mode;
            let med = |f: fn(&CostRun) -> f64| median(&mut all.iter().map(f).collect::<Vec<_>>());
            rows.push((
                format!("{edge} {sources}->{sinks}"),
                mode,
                all[0].tasks,
                [
                    med(|r| r.job_s),
                    med(|r| r.process_s),
                    med(|r| r.sources_s),
                    med(|r| r.sinks_s),
                    med(|r| r.cpu_s),
                    med(|r| r.busy_s),
                    med(|r| r.workers_cpu_s),
                ],
            ));
        }
    }
    println!(
        "{:>18} {:>10} {:>6} {:>7} {:>8} {:>10} {:>9} {:>9} {:>8} {:>8} {:>8} {:>8}",
        "job",
        "mode",
        "tasks",
        "job s",
        "ms/task",
        "process s",
        "src ms/t",
        "sink ms/t",
        "CPU s",
        "CPU ms/t",
        "busy ms/t",
        "wrk CPU s"
    );
    for (job, mode, tasks, [job_s, process_s, sources_s, sinks_s, cpu_s, busy_s, wcpu]) in &rows {
        let t = *tasks as f64;
        let (src, sink) = job
            .split_once(' ')
            .and_then(|(_, n)| n.split_once("->"))
            .map(|(a, b)| {
                (
                    a.parse::<f64>().unwrap_or(1.0),
                    b.parse::<f64>().unwrap_or(1.0),
                )
            })
            .unwrap_or((1.0, 1.0));
        println!(
            "{job:>18} {mode:>10} {tasks:>6} {job_s:>7.2} {:>8.2} {process_s:>10.2} {:>9.2} {:>9.2} {cpu_s:>8.2} {:>8.2} {:>8.2} {wcpu:>8.2}",
            job_s * 1e3 / t,
            sources_s * 1e3 / src,
            sinks_s * 1e3 / sink,
            cpu_s * 1e3 / t,
            busy_s * 1e3 / t,
        );
    }
    // TLS vs plain, per edge: the issue's target is at most 1.15 times the
    // plain cost per task.
    for pair in rows.chunks(3) {
        if let [_, (job, _, plain_tasks, plain), (_, _, tls_tasks, tls)] = pair {
            let per_task = |f: &[f64; 7], t: u64| f[0] * 1e3 / t as f64;
            let cpu_per_task = |f: &[f64; 7], t: u64| f[4] * 1e3 / t as f64;
            println!(
                "{job:>18}   TLS vs plain: job {:.2} vs {:.2} ms/task ({}), coordinator CPU {:.2} vs {:.2} ms/task ({}), workers' CPU {:.2} vs {:.2} s ({}); target <= x1.15 per task",
                per_task(tls, *tls_tasks),
                per_task(plain, *plain_tasks),
                ratio(per_task(tls, *tls_tasks), per_task(plain, *plain_tasks)),
                cpu_per_task(tls, *tls_tasks),
                cpu_per_task(plain, *plain_tasks),
                ratio(
                    cpu_per_task(tls, *tls_tasks),
                    cpu_per_task(plain, *plain_tasks)
                ),
                tls[6],
                plain[6],
                ratio(tls[6], plain[6]),
            );
        }
    }
    for (job, job_r, cpu_r, workers_r) in &ratios {
        println!(
            "{job:>18}   TLS / plain, median of the {runs} back-to-back rounds: job time x{job_r:.2}, coordinator CPU x{cpu_r:.2} (target <= x1.15 per task), workers' CPU x{workers_r:.2}"
        );
    }
    println!(
        "   3 w. TLS = the 3 workers with mutual TLS to the coordinator and between them (certificates of `coordhost cluster certs`)"
    );
    println!(
        "   job s = the summary's wall_ms (first vertex to end); process s = spawn to exit (plugin loading and, external, waiting for the workers to register included); \
         src/sink ms/t = each vertex's first to last progress line per subtask (sinks: from every source finished); CPU = the coordinator process's user + system time (/proc); \
         busy = the summary's coordinator_busy_us; wrk CPU = the 3 workers' CPU time during the run"
    );
}

/// Figure 2: restart to the first task running again, the workers holding
/// `producers × edges` partitions.
fn restart(root: &Path, producers: u32, edges: u32, ticks: f64) {
    let work = root.join(format!("restart-{producers}x{edges}"));
    std::fs::create_dir_all(&work).expect("folder");
    let job = work.join("job.toml");
    tiny_job(&job, "restart", producers, edges, 2, "hash");
    let partitions = u64::from(producers) * u64::from(edges);
    println!(
        "\n2. restart -> first task running again: source (parallelism {producers}) with {edges} hash edges = {partitions} result partitions on 3 workers (2 slots each)"
    );
    let addr = free_port();
    let workers = Workers::start(3, &addr, &work.join("workers"), 2);
    let data = work.join("data");
    let extra = external(&addr, 3);

    let mut first = Proc::spawn(
        "coordhost run (first)",
        run_cmd(&job, &data, &work.join("summary-1.json"), &extra, "warn"),
    );
    let done = first.wait_for_line(
        &format!("source: {producers}/{producers} finished"),
        Duration::from_secs(1800),
    );
    let status = first.kill();
    let producers_s = done.duration_since(first.started).as_secs_f64();
    eprintln!(
        "  first run: every producer finished after {producers_s:.1} s; SIGKILLed ({status})"
    );
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9),
        "the first run ended on its own before the kill:\n{}",
        first.tail()
    );

    let summary_path = work.join("summary-2.json");
    let mut second = Proc::spawn(
        "coordhost run (restarted)",
        run_cmd(
            &job,
            &data,
            &summary_path,
            &extra,
            "coordhost=info,coordhost::scheduler::master::deploy=debug",
        ),
    );
    let t0 = second.started;
    let (status, wall, cpu) = second.wait(ticks);
    assert!(
        status.success(),
        "the restarted run ended {status}:\n{}",
        second.tail()
    );
    let s = summary(&summary_path);
    assert_eq!(s["status"], "finished", "{s}");
    let at = |p: &Proc, pattern: &str| {
        p.first_line(pattern, t0)
            .map(|t| t.duration_since(t0).as_secs_f64() * 1e3)
    };
    // Each worker's first registration with the restarted coordinator (a
    // worker registering again later, e.g. given up under load, is noted).
    let registered = second.lines_with("worker registered");
    let mut first_by_worker: Vec<(String, Instant, u64)> = Vec::new();
    for (t, l) in &registered {
        let field = |k: &str| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix(&format!("{k}=")))
                .map(str::to_string)
        };
        let id = field("worker").unwrap_or_default();
        if !first_by_worker.iter().any(|(w, ..)| *w == id) {
            let held = field("held").and_then(|n| n.parse().ok()).unwrap_or(0);
            first_by_worker.push((id, *t, held));
        }
    }
    let held: u64 = first_by_worker.iter().map(|(.., h)| h).sum();
    let last_registered = first_by_worker
        .iter()
        .map(|(_, t, _)| t.duration_since(t0).as_secs_f64() * 1e3)
        .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))));
    if registered.len() > first_by_worker.len() {
        println!(
            "   note: {} registrations of {} workers in the restarted run; lines about lost workers: {:?}",
            registered.len(),
            first_by_worker.len(),
            second
                .lines_with("worker lost")
                .iter()
                .map(|(t, l)| format!("{:.0} ms: {l}", t.duration_since(t0).as_secs_f64() * 1e3))
                .collect::<Vec<_>>()
        );
    }
    let ms = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.0}"));
    let skipped = s["vertices"]
        .as_array()
        .and_then(|vs| vs.iter().find(|v| v["id"] == "source"))
        .and_then(|v| v["skipped"].as_u64())
        .unwrap_or(0);
    println!(
        "   ms from the restarted coordinator's spawn: listening {} | 3 workers registered again {} (holding {held} partitions) | partitions matched with the log {} | recovery durable {} | first deploy {} | first task running on a worker {}",
        ms(at(&second, "serving workers")),
        ms(last_registered),
        ms(at(&second, "partitions reported by workers")),
        ms(at(&second, "recovered from the job event log")),
        ms(at(&second, "deploying")),
        ms(workers
            .first_running(t0)
            .map(|t| t.duration_since(t0).as_secs_f64() * 1e3)),
    );
    println!(
        "   producers skipped {skipped} of {producers}; restarted run: {} tasks run, {} skipped, {} reset, {:.2} s to the end, coordinator CPU {cpu:.2} s (first run: producers finished in {producers_s:.1} s)",
        s["tasks_run"],
        s["tasks_skipped"],
        s["tasks_reset"],
        wall.as_secs_f64(),
    );
}

/// Writes `mib` MiB of text lines into four files under `dir`.
fn write_input(dir: &Path, mib: u64) -> u64 {
    use std::io::Write;
    std::fs::create_dir_all(dir).expect("input folder");
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let per_file = mib * (1 << 20) / 4;
    let mut total = 0;
    for f in 0..4 {
        let file = std::fs::File::create(dir.join(format!("part-{f}.txt"))).expect("input file");
        let mut w = std::io::BufWriter::new(file);
        let mut written = 0;
        while written < per_file {
            let mut line = String::new();
            for _ in 0..12 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                line += &format!("w{:x} ", x % 100_000);
            }
            line.push('\n');
            w.write_all(line.as_bytes()).expect("write input");
            written += line.len() as u64;
        }
        w.flush().expect("flush input");
        total += written;
    }
    total
}

const SHUFFLE_SOURCES: u32 = 4;
const SHUFFLE_CONSUMERS: u32 = 6;

fn shuffle_job(path: &Path, input: &Path) {
    let text = format!(
        r#"[job]
name = "shuffle-bytes"

{shuffle}
[plugins.files]
component = "{enumerator}"
kind = "split-enumerator"
config = {{ dir = "{input}", split-bytes = 8388608, pattern = ".txt" }}
dirs = [{{ path = "{input}", writable = false }}]

[[vertices]]
id = "source"
source = "files"
parallelism = {SHUFFLE_SOURCES}
operators = [{{ op = "read-lines" }}]

[[vertices]]
id = "sink"
parallelism = {SHUFFLE_CONSUMERS}
operators = [{{ op = "filter", column = "line", cmp = "==", value = "no line is this" }}, {{ op = "write-text", path = "${{data_dir}}/out" }}]

[[edges]]
from = "source"
to = "sink"
kind = "hash"
key = ["line"]
"#,
        shuffle = SHUFFLE.replace("LOCAL_SHUFFLE", &plugin("local-shuffle").to_string_lossy()),
        enumerator = plugin("file-enumerator").display(),
        input = input.display(),
    );
    std::fs::write(path, text).expect("job file");
}

/// Per producer attempt (subtask, attempt): its bytes per subpartition, from
/// the job's event log (the last `ExecutionFinished` of each subtask).
fn produced_bytes(data: &Path, job: &str) -> HashMap<u32, (u32, Vec<u64>)> {
    let out = Command::new(binary())
        .args(["log", "inspect"])
        .arg(data.join(job))
        .arg("--json")
        .output()
        .expect("coordhost log inspect");
    assert!(out.status.success(), "coordhost log inspect failed");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("log JSON");
    let mut by_subtask = HashMap::new();
    for e in v["events"].as_array().expect("events") {
        let e = &e["event"];
        if e["kind"] != "ExecutionFinished" || e["event"]["attempt"]["job_vertex"] != "source" {
            continue;
        }
        let a = &e["event"]["attempt"];
        let bytes: Vec<u64> = e["event"]["produced"][0]["bytes_per_subpartition"]
            .as_array()
            .expect("bytes per subpartition")
            .iter()
            .map(|b| b.as_u64().expect("bytes"))
            .collect();
        by_subtask.insert(
            a["subtask"].as_u64().expect("subtask") as u32,
            (a["attempt"].as_u64().expect("attempt") as u32, bytes),
        );
    }
    by_subtask
}

/// Figure 3: consumers' read throughput, local files vs other workers.
fn shuffle_bytes(root: &Path, mib: u64, runs: usize) {
    let work = root.join("shuffle");
    let input = work.join("input");
    let input_bytes = write_input(&input, mib);
    let job = work.join("job.toml");
    shuffle_job(&job, &input);
    println!(
        "\n3. shuffle read throughput: {:.0} MiB of text -> source ({SHUFFLE_SOURCES}, read-lines) -> hash on the line -> {SHUFFLE_CONSUMERS} consumers (filter that keeps nothing); {runs} run(s) per mode",
        input_bytes as f64 / f64::from(1 << 20)
    );
    let modes = worker_modes(&work, "shuffle-bytes");
    let mut mb_s = Vec::new();
    println!(
        "{:>10} {:>12} {:>14} {:>24} {:>8} {:>7}",
        "mode", "bytes read", "of them remote", "consumers s min/med/max", "MB/s", "job s"
    );
    let all_modes = std::iter::once(("embedded", Vec::new(), None))
        .chain(modes.iter().map(|(m, e, w)| (*m, e.clone(), Some(w))));
    for (mode, extra, workers) in all_modes {
        let mut secs_all = Vec::new();
        let mut job_all = Vec::new();
        let mut row = (0, 0);
        for run in 0..runs {
            let (total, remote, secs, job_s) = shuffle_run(
                &work,
                &job,
                &format!("{}-{run}", mode.replace([' ', '.'], "")),
                &extra,
                workers,
            );
            eprintln!(
                "  {mode} run {}/{runs}: {total} bytes, {:.0}% remote, consumers {secs:.3} s, job {job_s:.2} s",
                run + 1,
                100.0 * remote as f64 / total as f64
            );
            secs_all.push(secs);
            job_all.push(job_s);
            row = (total, remote);
        }
        let (total, remote) = row;
        let med = median(&mut secs_all);
        println!(
            "{mode:>10} {total:>12} {:>13.0}% {:>24} {:>8.0} {:>7.2}",
            100.0 * remote as f64 / total as f64,
            format!(
                "{:.3}/{med:.3}/{:.3}",
                secs_all[0],
                secs_all[secs_all.len() - 1]
            ),
            total as f64 / med / 1e6,
            median(&mut job_all),
        );
        mb_s.push(total as f64 / med / 1e6);
    }
    if let [_, plain, tls] = mb_s[..] {
        println!(
            "   TLS vs plain: {tls:.0} vs {plain:.0} MB/s ({}); target >= x0.80",
            ratio(tls, plain)
        );
    }
    println!(
        "   bytes read = the producers' bytes per subpartition (event log), all read by the consumers; remote = those of a producer on another worker than the consumer (ReadSubpartitions over loopback gRPC); \
         consumers s = from every producer finished (progress line) to the last consumer finished: deploying, reading, checksums, Arrow decoding and the filter; \
         MB/s = bytes read / median consumers s (10^6 bytes); job s = median of the summary's wall_ms"
    );
}

/// One run of figure 3: bytes read, of them remote, consumer seconds, job seconds.
fn shuffle_run(
    work: &Path,
    job: &Path,
    tag: &str,
    extra: &[String],
    workers: Option<&Workers>,
) -> (u64, u64, f64, f64) {
    let data = work.join(format!("data-{tag}"));
    let summary_path = work.join(format!("summary-{tag}.json"));
    let mut p = Proc::spawn(
        "coordhost run",
        run_cmd(job, &data, &summary_path, extra, "warn"),
    );
    let t0 = p.started;
    let (status, _, _) = p.wait(100.0);
    assert!(
        status.success(),
        "coordhost run ended {status}:\n{}",
        p.tail()
    );
    let s = summary(&summary_path);
    assert_eq!(s["status"], "finished", "{s}");
    let from = p
        .first_line(&format!("sink: parallelism {SHUFFLE_CONSUMERS}"), t0)
        .expect("the consumers' progress line");
    let to = p
        .first_line(
            &format!("sink: {SHUFFLE_CONSUMERS}/{SHUFFLE_CONSUMERS} finished"),
            t0,
        )
        .expect("the consumers' last progress line");
    let secs = to.duration_since(from).as_secs_f64();
    let produced = produced_bytes(&data, "shuffle-bytes");
    let total: u64 = produced.values().flat_map(|(_, b)| b.iter()).sum();
    let mut remote = 0;
    if let Some(workers) = workers {
        let at = workers.placement(t0);
        for (subtask, (attempt, bytes)) in &produced {
            let w = at[&("source".to_string(), *subtask, *attempt)];
            for (c, b) in bytes.iter().enumerate() {
                let consumer = at
                    .iter()
                    .filter(|((v, s, _), _)| v == "sink" && *s as usize == c)
                    .map(|(_, w)| *w)
                    .next()
                    .expect("the consumer ran");
                if consumer != w {
                    remote += b;
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(&data);
    (
        total,
        remote,
        secs,
        s["wall_ms"].as_f64().unwrap_or(0.0) / 1e3,
    )
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` passes nothing: run once, small.
    let quick = !std::env::args().any(|a| a == "--bench");
    let only = env_or("COORDHOST_BENCH_ONLY", "cost,restart,shuffle");
    let parts: Vec<&str> = only.split(',').map(str::trim).collect();
    let num = |name: &str, full: &str, small: &str| -> u64 {
        env_or(name, if quick { small } else { full })
            .parse()
            .unwrap_or_else(|_| panic!("{name}: a number"))
    };
    let ticks = clock_ticks();
    let root = tempfile::Builder::new()
        .prefix("coordhost-bench-workers")
        .tempdir()
        .expect("temporary folder");
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "worker processes: coordhost {} ; {cores} cores ; plugins from {}",
        binary().display(),
        workspace().join("build/plugins").display()
    );
    if parts.contains(&"cost") {
        let edges: Vec<String> = env_or("COORDHOST_BENCH_COST_EDGES", "hash,forward")
            .split(',')
            .map(|e| e.trim().to_string())
            .inspect(|e| {
                assert!(
                    e == "hash" || e == "forward",
                    "COORDHOST_BENCH_COST_EDGES: {e} is neither hash nor forward"
                );
            })
            .collect();
        cost_per_task(
            root.path(),
            num("COORDHOST_BENCH_TASK_SOURCES", "600", "12") as u32,
            &edges,
            num("COORDHOST_BENCH_RUNS", "3", "1") as usize,
            ticks,
        );
    }
    if parts.contains(&"restart") {
        let points = env_or(
            "COORDHOST_BENCH_RESTART",
            if quick { "8x2" } else { "2500x4,4000x1" },
        );
        for point in points.split(',') {
            let (p, e) = point
                .trim()
                .split_once('x')
                .and_then(|(p, e)| Some((p.parse().ok()?, e.parse().ok()?)))
                .unwrap_or_else(|| {
                    panic!("COORDHOST_BENCH_RESTART: `{point}` is not PRODUCERSxEDGES")
                });
            restart(root.path(), p, e, ticks);
        }
    }
    if parts.contains(&"shuffle") {
        shuffle_bytes(
            root.path(),
            num("COORDHOST_BENCH_SHUFFLE_MIB", "512", "4"),
            num("COORDHOST_BENCH_RUNS", "3", "1") as usize,
        );
    }
}
