//! Benchmark of whole jobs: rows per second of the TPC-H Q1-style example
//! at scale factors 0.1 and 1 with 1 and 2 workers, and the time the
//! coordinator itself spends per task (its loop's busy time, plugin calls
//! included, divided by the attempts run), also for a job of many tiny
//! tasks where that overhead dominates.
//!
//! `cargo bench -p coordhost --bench job`. Environment:
//! `COORDHOST_BENCH_SCALES` (default `0.1,1`), `COORDHOST_BENCH_RUNS`
//! (default 3; the median run is reported). Data goes to
//! `build/bench-data/` and is reused; plugins come from `build/plugins/`
//! (`make plugins`).

use std::path::{Path, PathBuf};
use std::time::Instant;

use coordhost::job::{JobStatus, RunOptions, Summary, run_job};

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace")
        .to_path_buf()
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

fn lineitem(scale: f64) -> (PathBuf, u64) {
    let dir = workspace().join(format!("build/bench-data/tpch-sf{scale}"));
    let marker = workspace().join(format!("build/bench-data/tpch-sf{scale}.rows"));
    if let Ok(rows) = std::fs::read_to_string(&marker) {
        return (dir, rows.trim().parse().expect("row count"));
    }
    let t = Instant::now();
    let (_, rows) = coordhost_datagen::write_lineitem(&dir, scale, 8).expect("generate lineitem");
    std::fs::write(&marker, rows.to_string()).expect("marker");
    eprintln!(
        "generated SF {scale}: {rows} rows in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    (dir, rows)
}

fn tpch_job(data: &Path, dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(workspace().join("examples/tpch-q1.toml")).expect("example");
    let text = text
        .replace(
            "${job_dir}/../build/data/tpch-sf0.1",
            &data.display().to_string(),
        )
        .replace("../build/data/tpch-sf0.1", &data.display().to_string())
        .replace(
            "../build/plugins/file-enumerator.wasm",
            &plugin("file-enumerator").display().to_string(),
        )
        .replace(
            "../build/plugins/local-shuffle.wasm",
            &plugin("local-shuffle").display().to_string(),
        );
    // The example slows its final stage for `make demo`; measure without it.
    let text = text.replace("record-delay-us = 250000", "record-delay-us = 0");
    let job = dir.join("tpch-q1.toml");
    std::fs::write(&job, text).expect("job");
    job
}

/// Many tiny tasks: `n` sources over one-line inline splits, a hash edge,
/// an `auto` sink (one subtask for so few bytes): the wall time is mostly
/// scheduling, plugin calls and partition files.
fn tiny_job(n: u32, dir: &Path) -> PathBuf {
    let splits: Vec<String> = (0..n)
        .map(|i| format!("\"split.{i}\" = \"w{i} x\""))
        .collect();
    let text = format!(
        r#"
[job]
name = "tiny"
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
parallelism = "auto"
operators = [{{ op = "aggregate", key = ["word"], aggregates = [{{ fn = "count", as = "n" }}] }}, {{ op = "write-text", path = "${{data_dir}}/out" }}]
[[edges]]
from = "source"
to = "sink"
kind = "hash"
key = ["word"]
"#,
        splits = splits.join(", "),
        enumerator = plugin("static-enumerator").display(),
        shuffle = plugin("local-shuffle").display(),
    );
    let job = dir.join("tiny.toml");
    std::fs::write(&job, text).expect("job");
    job
}

fn run(job: &Path, workers: usize, runs: usize) -> Vec<Summary> {
    let mut out = Vec::new();
    for _ in 0..runs {
        let state = tempfile::tempdir().expect("tempdir");
        let mut opts = RunOptions::new(job, state.path());
        opts.workers = Some(workers);
        opts.cache_dir = Some(workspace().join("build/cache"));
        let s = run_job(&opts).expect("job starts");
        assert_eq!(s.status, JobStatus::Finished, "{:?}", s.error);
        out.push(s);
    }
    out.sort_by_key(|s| s.wall_ms);
    out
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` passes nothing: run once, small.
    let quick = !std::env::args().any(|a| a == "--bench");
    let scales: Vec<f64> = std::env::var("COORDHOST_BENCH_SCALES")
        .unwrap_or_else(|_| if quick { "0.01".into() } else { "0.1,1".into() })
        .split(',')
        .map(|s| s.trim().parse().expect("scale factor"))
        .collect();
    let runs: usize = std::env::var("COORDHOST_BENCH_RUNS")
        .ok()
        .map_or(if quick { 1 } else { 3 }, |r| r.parse().expect("runs"));
    let dir = tempfile::tempdir().expect("tempdir");
    println!(
        "{:<28} {:>7} {:>10} {:>10} {:>14} {:>12}",
        "job", "workers", "rows", "wall ms", "rows/s", "coord us/task"
    );
    for &scale in &scales {
        let (data, rows) = lineitem(scale);
        let job = tpch_job(&data, dir.path());
        for workers in [1, 2] {
            let all = run(&job, workers, runs);
            let s = &all[all.len() / 2];
            assert_eq!(s.vertices[0].records_in, rows);
            println!(
                "{:<28} {:>7} {:>10} {:>10} {:>14.0} {:>12.1}",
                format!("tpch-q1 sf{scale}"),
                workers,
                rows,
                s.wall_ms,
                rows as f64 / (s.wall_ms.max(1) as f64 / 1000.0),
                s.coordinator_busy_us as f64 / s.tasks_run as f64
            );
        }
    }
    let n = if quick { 16 } else { 200 };
    let job = tiny_job(n, dir.path());
    for workers in [1, 2] {
        let all = run(&job, workers, runs);
        let s = &all[all.len() / 2];
        println!(
            "{:<28} {:>7} {:>10} {:>10} {:>14} {:>12.1}",
            format!("tiny x{} tasks", s.tasks_run),
            workers,
            n,
            s.wall_ms,
            "-",
            s.coordinator_busy_us as f64 / s.tasks_run as f64
        );
    }
}
