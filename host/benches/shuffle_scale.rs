//! All-to-all against forward edges at scale: the per-task cost of the
//! blocking shuffle, measured through the real `coordhost run`.
//!
//! Each row is a job `source` (parallelism N, one inline one-line split per
//! subtask from the sample `static-enumerator`, `read-lines` + `tokenize`)
//! → edge → `sink` (parallelism N, `aggregate` count + `write-text`), the
//! shuffle master `local-shuffle`, recovery on (the job file's default).
//! The input is a few bytes per task: what the wall time measures is
//! scheduling, plugin calls, durable events and result partition files.
//! A `hash` edge is all-to-all (every producer writes N subpartitions); a
//! `forward` edge gives each producer one subpartition.
//!
//! Per row: N, edge, tasks run, wall seconds (min/median/max of the runs,
//! spawn to exit), tasks per second and milliseconds per task (median run),
//! the regular files left under the shuffle root after the job (the final
//! attempts' result partitions: the job releases only superseded ones),
//! files per producer attempt per result partition, and the peak resident
//! set of the `coordhost` process (the kernel's high-water mark `VmHWM`,
//! sampled every 5 ms until it exits; the largest of the runs).
//!
//! A partition format whose file count grows with the number of
//! subpartitions writes N² files on an all-to-all edge. Before the table the
//! bench runs two probes (hash edge, N = 4 and 8) and fits
//! `files per producer = a + b × subpartitions`; a row that would write more
//! than `COORDHOST_BENCH_MAX_FILES` files (default 2 000 000), or need more
//! than half of the free disk space or inodes of the data folder, is
//! skipped with a line saying why. A row whose job file `coordhost` refuses
//! (exit code 2, e.g. a bound on an edge's subpartitions) is printed with
//! its one-line refusal.
//!
//! `cargo bench -p coordhost --bench shuffle_scale` after `make plugins`.
//! Environment:
//! - `COORDHOST_BENCH_N`: comma-separated N (default `256,1024,4096`);
//! - `COORDHOST_BENCH_EDGES`: `hash,forward` (default both);
//! - `COORDHOST_BENCH_RUNS`: runs per row (default 3);
//! - `COORDHOST_BENCH_BIN`: the `coordhost` binary to run (default the
//!   one cargo built with this bench, release);
//! - `COORDHOST_BENCH_CHECKOUT`: the checkout whose `build/plugins/` the
//!   jobs use (default this workspace); with the one above, the bench
//!   measures another checkout's build. The jobs run under this
//!   workspace's `build/bench-data/shuffle-scale/` (removed at the end)
//!   with its `build/cache/`;
//! - `COORDHOST_BENCH_MAX_FILES`: the file cap above;
//! - `COORDHOST_BENCH_ONE_RUN_FILES`: a row expected to write more files
//!   than this (default 200 000) runs once, as deleting them between runs
//!   can take longer than the run;
//! - `COORDHOST_BENCH_WORKERS`: `--workers` (default: the job's, one per core).
//!
//! Each run also prints a line on stderr as it ends.
//!
//! `cargo test --benches` runs it once at N = 8 with one run.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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

/// Where the jobs' plugins are (what the bench writes, data folders and the
/// compiled-component cache, stays under this workspace's `build/`).
fn checkout() -> PathBuf {
    std::env::var_os("COORDHOST_BENCH_CHECKOUT").map_or_else(workspace, PathBuf::from)
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
    let p = checkout()
        .join("build/plugins")
        .join(format!("{name}.wasm"));
    assert!(
        p.is_file(),
        "{} is missing: run `make plugins` there",
        p.display()
    );
    p
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Edge {
    Hash,
    Forward,
}

impl Edge {
    fn name(self) -> &'static str {
        match self {
            Edge::Hash => "hash",
            Edge::Forward => "forward",
        }
    }

    /// Subpartitions of each producer's result partition.
    fn subpartitions(self, n: u32) -> u32 {
        match self {
            Edge::Hash => n,
            Edge::Forward => 1,
        }
    }
}

/// The job file of one row, written into `dir`.
fn job_file(dir: &Path, n: u32, edge: Edge) -> PathBuf {
    let splits: Vec<String> = (0..n)
        .map(|i| format!("\"split.{i}\" = \"w{i} x{}\"", i % 7))
        .collect();
    let key = match edge {
        Edge::Hash => "\nkey = [\"word\"]",
        Edge::Forward => "",
    };
    let text = format!(
        r#"[job]
name = "shuffle-scale"

[shuffle]
plugin = "shuffle"

[plugins.splits]
component = "{enumerator}"
kind = "split-enumerator"
config = {{ {splits} }}

[plugins.shuffle]
component = "{shuffle}"
kind = "shuffle-master"
config = {{ root = "${{data_dir}}/shuffle" }}
dirs = [{{ path = "${{data_dir}}/shuffle", writable = true }}]

[[vertices]]
id = "source"
source = "splits"
parallelism = {n}
operators = [{{ op = "read-lines" }}, {{ op = "tokenize", column = "line", as = "word" }}]

[[vertices]]
id = "sink"
parallelism = {n}
operators = [{{ op = "aggregate", key = ["word"], aggregates = [{{ fn = "count", as = "n" }}] }}, {{ op = "write-text", path = "${{data_dir}}/out" }}]

[[edges]]
from = "source"
to = "sink"
kind = "{edge}"{key}
"#,
        splits = splits.join(", "),
        enumerator = plugin("static-enumerator").display(),
        shuffle = plugin("local-shuffle").display(),
        edge = edge.name(),
    );
    let job = dir.join(format!("shuffle-scale-{}-{n}.toml", edge.name()));
    std::fs::write(&job, text).expect("job file");
    job
}

/// One finished run.
struct Run {
    wall: Duration,
    tasks: u64,
    producers: u64,
    files: u64,
    file_bytes: u64,
    peak_rss_kib: u64,
}

/// `VmHWM` of `/proc/<pid>/status` in KiB, if the process is still there.
fn vm_hwm_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Regular files under `dir` (recursively) and the disk space they take.
fn count_files(dir: &Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let mut files = 0;
    let mut bytes = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries {
            let e = e.expect("dir entry");
            let m = e.metadata().expect("metadata");
            if m.is_dir() {
                stack.push(e.path());
            } else if m.is_file() {
                files += 1;
                bytes += m.blocks() * 512;
            }
        }
    }
    (files, bytes)
}

/// Runs the job of (`n`, `edge`) once in a fresh data folder under `work`.
/// `Err` is the one line with which `coordhost` refused the job file (exit
/// code 2, before anything ran: e.g. a bound on an edge's subpartitions);
/// any other failure panics.
fn run_once(work: &Path, n: u32, edge: Edge, workers: Option<&str>) -> Result<Run, String> {
    let data = work.join("data");
    if data.exists() {
        std::fs::remove_dir_all(&data).expect("remove the previous data folder");
    }
    std::fs::create_dir_all(&data).expect("data folder");
    let job = job_file(work, n, edge);
    let summary = work.join("summary.json");
    let _ = std::fs::remove_file(&summary);
    let log = work.join("coordhost.out");
    let mut cmd = Command::new(binary());
    cmd.arg("run")
        .arg(&job)
        .arg("--data-dir")
        .arg(&data)
        .arg("--summary-json")
        .arg(&summary)
        .arg("--cache-dir")
        .arg(workspace().join("build/cache"));
    if let Some(w) = workers {
        cmd.args(["--workers", w]);
    }
    let out = std::fs::File::create(&log).expect("output file");
    cmd.stdin(Stdio::null())
        .stdout(out.try_clone().expect("output file"))
        .stderr(out);

    let start = Instant::now();
    let mut child = cmd.spawn().expect("start coordhost");
    let pid = child.id();
    let done = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(AtomicU64::new(0));
    let sampler = {
        let (done, peak) = (done.clone(), peak.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                if let Some(kib) = vm_hwm_kib(pid) {
                    peak.fetch_max(kib, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    let status = child.wait().expect("wait for coordhost");
    let wall = start.elapsed();
    done.store(true, Ordering::Relaxed);
    sampler.join().expect("sampler");
    let output = std::fs::read_to_string(&log).unwrap_or_default();
    if status.code() == Some(2) && !summary.exists() {
        return Err(output.lines().next().unwrap_or_default().to_string());
    }
    assert!(
        status.success(),
        "coordhost run {} failed ({status}); its output is in {}:\n{}",
        job.display(),
        log.display(),
        output
    );

    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&summary).expect("summary"))
            .expect("summary JSON");
    let tasks = s["tasks_run"].as_u64().expect("tasks_run");
    let reset = s["tasks_reset"].as_u64().expect("tasks_reset");
    assert_eq!(s["status"], "finished", "{s}");
    // No failover: every task ran once, N producer attempts.
    assert_eq!((tasks, reset), (2 * u64::from(n), 0), "{s}");
    let (files, file_bytes) = count_files(&data.join("shuffle"));
    assert!(
        files > 0,
        "no file under {}: the job left no result partition to count",
        data.join("shuffle").display()
    );
    Ok(Run {
        wall,
        tasks,
        producers: u64::from(n),
        files,
        file_bytes,
        peak_rss_kib: peak.load(Ordering::Relaxed),
    })
}

/// Free bytes and free inodes of the file system holding `dir` (`df -P`).
fn free_space(dir: &Path) -> (u64, u64) {
    let field = |flag: &str| -> u64 {
        let out = Command::new("df")
            .args(["-P", flag])
            .arg(dir)
            .output()
            .expect("run df");
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text
            .lines()
            .nth(1)
            .expect("df prints a line per file system");
        line.split_whitespace()
            .nth(3)
            .and_then(|v| v.parse().ok())
            .expect("df's available column")
    };
    (field("-k") * 1024, field("-i"))
}

/// Files per producer attempt = `a + b × subpartitions`, and disk bytes
/// per file, fitted on two small all-to-all runs.
struct Model {
    a: f64,
    b: f64,
    bytes_per_file: f64,
}

impl Model {
    fn probe(work: &Path, workers: Option<&str>) -> Self {
        let small = run_once(work, 4, Edge::Hash, workers).expect("the N = 4 probe runs");
        let large = run_once(work, 8, Edge::Hash, workers).expect("the N = 8 probe runs");
        let per = |r: &Run| r.files as f64 / r.producers as f64;
        let b = (per(&large) - per(&small)) / 4.0;
        let a = per(&small) - 4.0 * b;
        let bytes_per_file = (large.file_bytes as f64 / large.files as f64).max(4096.0);
        println!(
            "probe (hash edge): N = 4 -> {} files, N = 8 -> {} files: files per producer attempt ~ {a:.2} + {b:.2} x subpartitions",
            small.files, large.files
        );
        Self {
            a,
            b,
            bytes_per_file,
        }
    }

    fn files(&self, n: u32, edge: Edge) -> f64 {
        f64::from(n) * (self.a + self.b * f64::from(edge.subpartitions(n)))
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` passes nothing: run once, small.
    let quick = !std::env::args().any(|a| a == "--bench");
    let ns: Vec<u32> = env_or(
        "COORDHOST_BENCH_N",
        if quick { "8" } else { "256,1024,4096" },
    )
    .split(',')
    .map(|s| s.trim().parse().expect("COORDHOST_BENCH_N: a number"))
    .collect();
    let edges: Vec<Edge> = env_or("COORDHOST_BENCH_EDGES", "hash,forward")
        .split(',')
        .map(|e| match e.trim() {
            "hash" => Edge::Hash,
            "forward" => Edge::Forward,
            other => panic!("COORDHOST_BENCH_EDGES: {other} is neither hash nor forward"),
        })
        .collect();
    let runs: usize = env_or("COORDHOST_BENCH_RUNS", if quick { "1" } else { "3" })
        .parse()
        .expect("COORDHOST_BENCH_RUNS: a number");
    let max_files: f64 = env_or("COORDHOST_BENCH_MAX_FILES", "2000000")
        .parse()
        .expect("COORDHOST_BENCH_MAX_FILES: a number");
    let one_run_files: f64 = env_or("COORDHOST_BENCH_ONE_RUN_FILES", "200000")
        .parse()
        .expect("COORDHOST_BENCH_ONE_RUN_FILES: a number");
    let workers = std::env::var("COORDHOST_BENCH_WORKERS").ok();

    let work = workspace().join("build/bench-data/shuffle-scale");
    if work.exists() {
        std::fs::remove_dir_all(&work).expect("remove the previous bench folder");
    }
    std::fs::create_dir_all(&work).expect("bench folder");
    println!(
        "all-to-all vs forward: coordhost {} ; plugins from {}/build/plugins ; {runs} run(s) per row",
        binary().display(),
        checkout().display()
    );
    let model = Model::probe(&work, workers.as_deref());
    println!(
        "{:>5} {:>8} {:>6} {:>22} {:>8} {:>8} {:>10} {:>13} {:>9}",
        "N",
        "edge",
        "tasks",
        "wall s min/med/max",
        "tasks/s",
        "ms/task",
        "files",
        "files/prod/rp",
        "RSS MiB"
    );
    for &n in &ns {
        for &edge in &edges {
            let expected = model.files(n, edge);
            let (free_bytes, free_inodes) = free_space(&work);
            let need_bytes = expected * model.bytes_per_file;
            let why = if expected > max_files {
                Some(format!(
                    "would write ~{:.1} M files (cap {:.1} M, COORDHOST_BENCH_MAX_FILES)",
                    expected / 1e6,
                    max_files / 1e6
                ))
            } else if need_bytes > free_bytes as f64 / 2.0 {
                Some(format!(
                    "would need ~{:.1} GiB of the {:.1} GiB free",
                    need_bytes / f64::from(1 << 30),
                    free_bytes as f64 / f64::from(1 << 30)
                ))
            } else if expected > free_inodes as f64 / 2.0 {
                Some(format!(
                    "would need ~{:.1} M of the {:.1} M free inodes",
                    expected / 1e6,
                    free_inodes as f64 / 1e6
                ))
            } else {
                None
            };
            if let Some(why) = why {
                println!(
                    "{n:>5} {:>8} skipped: this partition format {why}",
                    edge.name()
                );
                continue;
            }
            // Deleting a million files between runs takes longer than the
            // run on a busy disk: such a row runs once.
            let row_runs = if expected > one_run_files { 1 } else { runs };
            let all: Result<Vec<Run>, String> = (0..row_runs)
                .map(|i| {
                    let r = run_once(&work, n, edge, workers.as_deref())?;
                    eprintln!(
                        "N = {n} {} run {}/{row_runs}: {:.2} s, {} files, peak RSS {:.1} MiB",
                        edge.name(),
                        i + 1,
                        r.wall.as_secs_f64(),
                        r.files,
                        r.peak_rss_kib as f64 / 1024.0
                    );
                    Ok(r)
                })
                .collect();
            let all = match all {
                Ok(all) => all,
                Err(refusal) => {
                    println!("{n:>5} {:>8} refused by coordhost: {refusal}", edge.name());
                    continue;
                }
            };
            let mut walls: Vec<f64> = all.iter().map(|r| r.wall.as_secs_f64()).collect();
            let med = median(&mut walls);
            let (min, max) = (walls[0], walls[walls.len() - 1]);
            let last = all.last().expect("a run");
            let tasks = last.tasks as f64;
            println!(
                "{n:>5} {:>8} {:>6} {:>22} {:>8.1} {:>8.2} {:>10} {:>13.2} {:>9.1}{}",
                edge.name(),
                last.tasks,
                format!("{min:.2}/{med:.2}/{max:.2}"),
                tasks / med,
                med * 1e3 / tasks,
                last.files,
                last.files as f64 / last.producers as f64,
                all.iter().map(|r| r.peak_rss_kib).max().unwrap_or(0) as f64 / 1024.0,
                if row_runs < runs {
                    "  (1 run: many files)"
                } else {
                    ""
                },
            );
        }
    }
    std::fs::remove_dir_all(&work).expect("remove the bench folder");
    println!(
        "tasks = attempts run (N sources + N sinks); files = regular files under the shuffle root after the job; \
         files/prod/rp = files per producer attempt per result partition; RSS = peak VmHWM of the coordhost process"
    );
}
