//! Recovery figures (FLIP-383), printed as two tables:
//!
//! 1. **Restart to the first task running again** for a synthetic job
//!    `source` (parallelism N, `file-enumerator`) → forward → `middle`
//!    (parallelism N, a sink), shuffle plugin `local-shuffle`, crashed right
//!    after every source finished. The state before the crash is built for
//!    real, as cheaply as possible: N partitions registered with a real
//!    `local-shuffle` instance, each location an empty partition written by
//!    the host's `PartitionWriter` (`data`, then `index`), a
//!    real shuffle snapshot; a real `file-enumerator` (one 1-byte split per reader, then "no more splits")
//!    and its batch snapshot; a real event log (`JobStarted`,
//!    `JobVertexInitialized` for both vertices, N `ExecutionFinished`, the
//!    last one carrying both snapshots, as the recorder writes them). Then,
//!    per run on a pristine copy of that log: log replay (`open_job_log`),
//!    recovery (`JobMaster::new` + `job::recover_into`: shuffle restore,
//!    plan, partition reconciliation through the real shuffle master with a
//!    60 s previous-worker timeout that must end early, applying the plan
//!    with its N `ExecutionsReset` records), and making the decision durable
//!    (`RecoveryFinished`), after which the scheduler deploys its first task.
//! 2. **Recording overhead**: wall time of the TPC-H Q1 example at SF 0.1
//!    through `run_job` with `[recovery] enabled = true` (log + batch
//!    snapshots) vs `false` (log only), best of 3 each.
//!
//! `cargo bench -p coordhost --bench recovery` after `make plugins` and
//! `make data`. Environment: `COORDHOST_BENCH_VERTICES` (execution vertices
//! of the synthetic job, comma-separated, default `10000,100000`; N is half),
//! `COORDHOST_BENCH_RUNS` (default 3), `COORDHOST_BENCH_CALL_TIMEOUT_MS`
//! (plugin call deadline of the synthetic job, default the job file's 5000).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use coordhost::config::{JobConfig, LoadOptions, load_job};
use coordhost::coordinator::{CoordinatorSnapshot, SourceCoordinator, SplitAnswer};
use coordhost::events::{
    AttemptId, EnumeratorSnapshot, ExecutionFinished, FileStorage, JobEvent, JobStarted,
    JobVertexInitialized, ProducedPartition, RecoveryStarted, ShuffleSnapshot, SubtaskInputRange,
    WriterOptions, job_log_dir, open_job_log, replay,
};
use coordhost::graph::{ExecutionGraph, Parallelism};
use coordhost::job::{EventRecorder, graph_fingerprint};
use coordhost::job::{JobMaster, JobStatus, RunOptions, load_plugins, recover_into, run_job};
use coordhost::plugin::{
    ExecutionAttemptId, PartitionDescriptor, ProducerDescriptor, ResultPartitionId,
};

const JOB: &str = "recovery-bench";

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

fn fmt(d: Duration) -> String {
    if d < Duration::from_millis(10) {
        format!("{:.2} ms", d.as_secs_f64() * 1e3)
    } else if d < Duration::from_secs(10) {
        format!("{:.1} ms", d.as_secs_f64() * 1e3)
    } else {
        format!("{:.2} s", d.as_secs_f64())
    }
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_string())
}

// ---- 1. restart to the first task ------------------------------------------------------------

/// The synthetic job file. The job file allows parallelism up to 4096, so
/// it says 1 and the loaded graph gets N (see [`load_synthetic`]).
fn synthetic_job_file(dir: &Path, input: &Path, call_timeout_ms: u64) -> PathBuf {
    let text = format!(
        r#"
[job]
name = "{JOB}"

[recovery]
enabled = true
previous-worker-timeout-ms = 60000

[shuffle]
plugin = "shuffle"

[plugins.files]
component = "{enumerator}"
kind = "split-enumerator"
config = {{ dir = "{input}", split-bytes = 1 }}
dirs = [{{ path = "{input}", writable = false }}]
limits = {{ call-timeout-ms = {call_timeout_ms} }}

[plugins.shuffle]
component = "{shuffle}"
kind = "shuffle-master"
config = {{ root = "${{data_dir}}/shuffle" }}
dirs = [{{ path = "${{data_dir}}/shuffle", writable = true }}]
limits = {{ call-timeout-ms = {call_timeout_ms} }}

[[vertices]]
id = "source"
source = "files"
parallelism = 1
operators = [{{ op = "read-lines" }}]

[[vertices]]
id = "middle"
parallelism = 1
operators = [{{ op = "write-text", path = "${{data_dir}}/out" }}]

[[edges]]
from = "source"
to = "middle"
kind = "forward"
"#,
        enumerator = plugin("file-enumerator").display(),
        shuffle = plugin("local-shuffle").display(),
        input = input.display(),
    );
    let job = dir.join("synthetic.toml");
    std::fs::write(&job, text).expect("job file");
    job
}

fn load_synthetic(job: &Path, data_dir: &Path, n: u32) -> JobConfig {
    let mut config = load_job(
        job,
        &LoadOptions {
            data_dir: data_dir.to_path_buf(),
            cache_dir: None,
            log_on_objects: false,
        },
    )
    .expect("synthetic job file");
    for v in &mut config.graph.vertices {
        v.parallelism = Parallelism::Fixed(n);
    }
    config
}

fn run_options(job: &Path, data_dir: &Path) -> RunOptions {
    let mut opts = RunOptions::new(job, data_dir);
    opts.workers = Some(2);
    opts.cache_dir = Some(workspace().join("build/cache"));
    opts
}

/// How the recorder encodes a coordinator snapshot ([`coordhost::snapshot::encode`]).
fn logged_enumerator_snapshot(vertex: &str, snap: &CoordinatorSnapshot) -> EnumeratorSnapshot {
    coordhost::snapshot::encode(vertex, snap).expect("snapshot encodes")
}

/// What building the "before the crash" state took.
struct Built {
    shuffle: Duration,
    files: Duration,
    enumerator: Duration,
    log: Duration,
    log_bytes: u64,
}

/// Builds, under `data_dir`, the state a coordinator leaves when it dies
/// right after the last source subtask finished.
fn build_state(config: &JobConfig, opts: &RunOptions, data_dir: &Path, n: u32) -> Built {
    let (plugins, _) = load_plugins(config, opts).expect("plugins");
    let graph = &config.graph;
    let data_set = graph.data_set_id(0);

    // The shuffle master registers every source partition; each producer
    // wrote its `data` and then its `index`.
    let t = Instant::now();
    let mut shuffle = plugins[&config.shuffle_plugin]
        .shuffle_master()
        .expect("shuffle master");
    shuffle.register_job(JOB).expect("register job");
    let mut locations = Vec::with_capacity(n as usize);
    for s in 0..n {
        let d = shuffle
            .register_partition_with_producer(
                JOB,
                &PartitionDescriptor {
                    id: ResultPartitionId {
                        intermediate_data_set: data_set.clone(),
                        producer: ExecutionAttemptId {
                            job_vertex: "source".into(),
                            subtask: s,
                            attempt: 0,
                        },
                    },
                    num_subpartitions: graph.num_subpartitions(0),
                },
                &ProducerDescriptor {
                    worker_id: "local".into(),
                    hostname: None,
                },
            )
            .expect("register partition");
        locations.push(d.location);
    }
    let shuffle_time = t.elapsed();
    let t = Instant::now();
    for (s, location) in (0..).zip(&locations) {
        // An empty partition written by the host's own writer
        // (docs/shuffle-format.md): an empty `data` and an `index` of no regions.
        coordhost::shuffle::PartitionWriter::create(
            Path::new(location),
            graph.num_subpartitions(0),
            coordhost::shuffle::PartitionProducer {
                job: JOB.into(),
                data_set: data_set.clone(),
                job_vertex: "source".into(),
                subtask: s,
                attempt: 0,
            },
        )
        .and_then(coordhost::shuffle::PartitionWriter::finish)
        .expect("an empty partition");
    }
    let files = t.elapsed();
    let t = Instant::now();
    let shuffle_snapshot = shuffle.snapshot_state(JOB).expect("shuffle snapshot");
    let shuffle_time = shuffle_time + t.elapsed();
    drop(shuffle);

    // The source coordinator: every reader got one split, then "no more splits".
    let t = Instant::now();
    let mut coordinator =
        SourceCoordinator::start("source", &plugins["files"], n, None).expect("start");
    for s in 0..n {
        coordinator.register_reader(s).expect("add reader");
        let a = coordinator.request_split(s).expect("split request");
        assert!(matches!(a, Some(SplitAnswer::Split(_))), "{a:?}");
    }
    for s in 0..n {
        let a = coordinator.request_split(s).expect("split request");
        assert!(matches!(a, Some(SplitAnswer::NoMoreSplits)), "{a:?}");
    }
    let enumerator_snapshot = logged_enumerator_snapshot(
        "source",
        &coordinator
            .snapshot()
            .expect("snapshot")
            .expect("no fault: consistent"),
    );
    let enumerator = t.elapsed();
    drop(coordinator);

    // The event log, as the recorder writes it.
    let t = Instant::now();
    let (writer, _) = open_job_log(data_dir, JOB, WriterOptions::default()).expect("open log");
    let epoch = writer.coordinator_attempt();
    writer
        .append_durable(&JobEvent::JobStarted(JobStarted {
            job_id: JOB.into(),
            graph_fingerprint: graph_fingerprint(graph),
            recovery_enabled: true,
        }))
        .expect("append");
    writer
        .append_durable(&JobEvent::JobVertexInitialized(JobVertexInitialized {
            job_vertex: "source".into(),
            parallelism: n,
            subtask_inputs: vec![Vec::new(); n as usize],
            decided_at_runtime: false,
        }))
        .expect("append");
    let mut snapshots = Some((enumerator_snapshot, shuffle_snapshot));
    for (s, location) in (0..n).zip(locations) {
        let last = s + 1 == n;
        let (enumerator_snapshots, shuffle_snapshot) = match last.then(|| snapshots.take()) {
            Some(Some((e, sh))) => (
                vec![e],
                Some(ShuffleSnapshot {
                    incremental: sh.incremental,
                    data: sh.data,
                }),
            ),
            _ => (Vec::new(), None),
        };
        let event = JobEvent::ExecutionFinished(ExecutionFinished {
            attempt: AttemptId {
                job_vertex: "source".into(),
                subtask: s,
                attempt: 0,
            },
            coordinator_epoch: epoch,
            produced: vec![ProducedPartition {
                data_set: data_set.clone(),
                location,
                bytes_per_subpartition: vec![0],
            }],
            enumerator_snapshots,
            shuffle_snapshot,
        });
        if last {
            writer.append_durable(&event).expect("append");
        } else {
            writer.append(&event).expect("append");
        }
    }
    writer
        .append_durable(&JobEvent::JobVertexInitialized(JobVertexInitialized {
            job_vertex: "middle".into(),
            parallelism: n,
            subtask_inputs: (0..n)
                .map(|s| {
                    vec![SubtaskInputRange {
                        data_set: data_set.clone(),
                        partition_start: s,
                        partition_end: s + 1,
                        subpartition_start: 0,
                        subpartition_end: 1,
                    }]
                })
                .collect(),
            decided_at_runtime: false,
        }))
        .expect("append");
    writer.close().expect("close log");
    let log = t.elapsed();
    let log_dir = job_log_dir(data_dir, JOB).expect("log dir");
    let log_bytes = dir_files(&log_dir)
        .iter()
        .map(|p| std::fs::metadata(p).map_or(0, |m| m.len()))
        .sum();
    Built {
        shuffle: shuffle_time,
        files,
        enumerator,
        log,
        log_bytes,
    }
}

fn dir_files(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.is_file())
        .collect()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for f in dir_files(from) {
        std::fs::copy(&f, to.join(f.file_name().expect("name"))).expect("copy");
    }
}

/// One restart: the figures of its phases.
struct Restart {
    load: Duration,
    replay: Duration,
    recover: Duration,
    new: Duration,
    decision: Duration,
    replayed: usize,
    kept: usize,
    reset: usize,
}

/// What `run_recoverable` does up to the point where the scheduler deploys
/// the first task, minus the checks it makes on the way.
fn restart(config: &JobConfig, opts: &RunOptions, data_dir: &Path, n: u32) -> Restart {
    let t = Instant::now();
    let (plugins, workers) = load_plugins(config, opts).expect("plugins");
    let load = t.elapsed();

    let t = Instant::now();
    let (writer, mut replayed) =
        open_job_log(data_dir, JOB, WriterOptions::default()).expect("open");
    let replayed_records = replayed.events.len();
    // Owned, as the driver hands them over: `recover_into` folds the
    // current run's records in place and drops them.
    let events = std::mem::take(&mut replayed.events);
    let current_run = coordhost::recovery::current_run(&events).len();
    let replay_time = t.elapsed();

    let t = Instant::now();
    let mut recorder = EventRecorder::new(writer, config.graph.clone());
    recorder
        .append(&JobEvent::RecoveryStarted(RecoveryStarted {
            coordinator_epoch: recorder.epoch(),
            replayed_records: replayed_records as u64,
            torn_tail_bytes: 0,
        }))
        .expect("append");
    let mut master = JobMaster::new(
        config,
        ExecutionGraph::new(config.graph.clone()),
        plugins,
        opts,
        workers,
    )
    .expect("job master");
    let new = t.elapsed();
    let replayed_count = current_run;
    let plan = recover_into(&mut master, config, events, &mut recorder).expect("recover");
    let recover = t.elapsed();

    let t = Instant::now();
    recorder
        .append_durable(&JobEvent::RecoveryFinished(
            plan.finished_event(&config.graph),
        ))
        .expect("append");
    let decision = t.elapsed();

    assert_eq!(plan.kept.len(), n as usize, "every source must be kept");
    assert!(
        plan.reset.keys().all(|&(v, _)| v == 1),
        "only `middle` runs again"
    );
    drop(master);
    recorder.close().expect("close");
    Restart {
        load,
        replay: replay_time,
        recover,
        new,
        decision,
        replayed: replayed_count,
        kept: plan.kept.len(),
        reset: plan.reset.len(),
    }
}

fn restart_table(vertices: &[u32], runs: usize, call_timeout_ms: u64) {
    println!(
        "restart to the first task running again (median of {runs} runs; build = one-off set-up, not part of the restart)"
    );
    println!(
        "{:>9} {:>7} {:>9} {:>9} {:>11} {:>11} {:>11} {:>11} {:>10} {:>10} {:>9} {:>10} {:>11}",
        "exec vtx",
        "N",
        "build s",
        "log MiB",
        "load plugs",
        "replay",
        "recover",
        "(new)",
        "decision",
        "total",
        "+load",
        "kept/reset",
        "events"
    );
    for &total in vertices {
        let n = total / 2;
        let work = tempfile::Builder::new()
            .prefix("coordhost-recovery-bench")
            .tempdir()
            .expect("tempdir");
        let input = work.path().join("input");
        std::fs::create_dir_all(&input).expect("input dir");
        std::fs::write(input.join("data.txt"), vec![b'x'; n as usize]).expect("input");
        let data_dir = work.path().join("data");
        let job = synthetic_job_file(work.path(), &input, call_timeout_ms);
        let config = load_synthetic(&job, &data_dir, n);
        let opts = run_options(&job, &data_dir);
        // Warm the compiled-component cache, so `load plugs` is a cached load.
        drop(load_plugins(&config, &opts).expect("plugins"));

        let t = Instant::now();
        let built = build_state(&config, &opts, &data_dir, n);
        let build = t.elapsed();
        eprintln!(
            "N = {n}: built in {:.1} s (shuffle registrations + snapshot {}, partition files {}, enumerator {}, log {})",
            build.as_secs_f64(),
            fmt(built.shuffle),
            fmt(built.files),
            fmt(built.enumerator),
            fmt(built.log),
        );
        let log_dir = job_log_dir(&data_dir, JOB).expect("log dir");
        let pristine = work.path().join("pristine-log");
        copy_dir(&log_dir, &pristine);

        let mut samples = Vec::new();
        for _ in 0..runs {
            std::fs::remove_dir_all(&log_dir).expect("remove log");
            copy_dir(&pristine, &log_dir);
            samples.push(restart(&config, &opts, &data_dir, n));
        }
        let pick = |f: fn(&Restart) -> Duration| median(samples.iter().map(f).collect());
        let last = samples.last().expect("a run");
        println!(
            "{:>9} {:>7} {:>9.1} {:>9.1} {:>11} {:>11} {:>11} {:>11} {:>10} {:>10} {:>9} {:>10} {:>11}",
            2 * n,
            n,
            build.as_secs_f64(),
            built.log_bytes as f64 / (1 << 20) as f64,
            fmt(pick(|r| r.load)),
            fmt(pick(|r| r.replay)),
            fmt(pick(|r| r.recover)),
            fmt(pick(|r| r.new)),
            fmt(pick(|r| r.decision)),
            fmt(pick(|r| r.replay + r.recover + r.decision)),
            fmt(pick(|r| r.load + r.replay + r.recover + r.decision)),
            format!("{}/{}", last.kept, last.reset),
            last.replayed,
        );
    }
    println!(
        "replay = open_job_log (lock, read + check every record, new segment) + current run's events; \
         recover = JobMaster::new (shuffle master instance, worker pool) + job::recover_into \
         (shuffle restore, plan, partition report of all N, enumerator restore, apply, N ExecutionsReset), \
         (new) = the JobMaster::new part of it; \
         decision = RecoveryFinished made durable; total = replay + recover + decision; \
         +load = total + loading the plugins from the compiled cache"
    );
}

// ---- 2. recording overhead -------------------------------------------------------------------

/// A copy of `examples/tpch-q1.toml` with absolute paths, no record delay,
/// and recovery on or off.
fn tpch_job(dir: &Path, recovery: bool) -> PathBuf {
    let root = workspace();
    let text = std::fs::read_to_string(root.join("examples/tpch-q1.toml")).expect("example");
    let text = text
        .replace("${job_dir}/../", &format!("{}/", root.display()))
        .replace("\"../", &format!("\"{}/", root.display()));
    let mut section = String::new();
    let mut switched = false;
    let lines: Vec<String> = text
        .lines()
        .map(|line| {
            let trimmed = line.trim_start();
            if trimmed.starts_with('[') {
                section = trimmed.to_string();
            }
            if trimmed.starts_with("record-delay-us") {
                "record-delay-us = 0".to_string()
            } else if section == "[recovery]" && trimmed.starts_with("enabled") {
                switched = true;
                format!("enabled = {recovery}")
            } else {
                line.to_string()
            }
        })
        .collect();
    assert!(
        switched,
        "examples/tpch-q1.toml has no `[recovery] enabled`"
    );
    let job = dir.join(if recovery {
        "tpch-q1-recovery.toml"
    } else {
        "tpch-q1-no-recovery.toml"
    });
    std::fs::write(&job, lines.join("\n") + "\n").expect("job");
    job
}

/// One run of `job` in a fresh data directory: wall time, the summary's
/// `wall_ms`, events and batch snapshots in the log, log bytes.
fn tpch_run(job: &Path) -> (Duration, u64, usize, usize, u64) {
    let state = tempfile::tempdir().expect("tempdir");
    let mut opts = RunOptions::new(job, state.path());
    opts.cache_dir = Some(workspace().join("build/cache"));
    let t = Instant::now();
    let s = run_job(&opts).expect("job starts");
    let wall = t.elapsed();
    assert_eq!(s.status, JobStatus::Finished, "{:?}", s.error);
    let log_dir = job_log_dir(state.path(), "tpch-q1").expect("log dir");
    let r = replay(&FileStorage::open_read_only(&log_dir)).expect("replay");
    let snapshots = r
        .iter_events()
        .filter(|e| matches!(e, JobEvent::ExecutionFinished(f) if f.has_snapshot()))
        .count();
    let bytes = r.segments.iter().map(|s| s.file_len).sum();
    (wall, s.wall_ms, r.events.len(), snapshots, bytes)
}

fn overhead_table(runs: usize) {
    let data = workspace().join("build/data/tpch-sf0.1");
    assert!(
        data.is_dir(),
        "{} is missing: run `make data`",
        data.display()
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let on = tpch_job(dir.path(), true);
    let off = tpch_job(dir.path(), false);
    let mut with = Vec::new();
    let mut without = Vec::new();
    // Interleaved, so drift on the shared machine hits both alike.
    for _ in 0..runs {
        with.push(tpch_run(&on));
        without.push(tpch_run(&off));
    }
    let best =
        |v: &[(Duration, u64, usize, usize, u64)]| *v.iter().min_by_key(|r| r.0).expect("a run");
    let (w, wm, we, ws, wb) = best(&with);
    let (o, om, oe, os, ob) = best(&without);
    println!();
    println!("recording overhead: tpch-q1 SF 0.1 through run_job, best of {runs}");
    println!(
        "{:<22} {:>10} {:>10} {:>8} {:>10} {:>10}   all wall ms",
        "recovery", "wall ms", "run ms", "events", "snapshots", "log KiB"
    );
    for (name, wall, ms, ev, sn, b, all) in [
        ("enabled (snapshots)", w, wm, we, ws, wb, &with),
        ("disabled (log only)", o, om, oe, os, ob, &without),
    ] {
        let all: Vec<String> = all
            .iter()
            .map(|r| format!("{:.0}", r.0.as_secs_f64() * 1e3))
            .collect();
        println!(
            "{:<22} {:>10.1} {:>10} {:>8} {:>10} {:>10.1}   {}",
            name,
            wall.as_secs_f64() * 1e3,
            ms,
            ev,
            sn,
            b as f64 / 1024.0,
            all.join(" ")
        );
    }
    println!(
        "ratio enabled / disabled: {:.3} (wall = run_job end to end; run ms = the summary's wall_ms)",
        w.as_secs_f64() / o.as_secs_f64()
    );
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` passes nothing: run once, small.
    let quick = !std::env::args().any(|a| a == "--bench");
    let vertices: Vec<u32> = env_or(
        "COORDHOST_BENCH_VERTICES",
        if quick { "200" } else { "10000,100000" },
    )
    .split(',')
    .map(|s| s.trim().parse().expect("execution vertices"))
    .collect();
    let runs: usize = env_or("COORDHOST_BENCH_RUNS", if quick { "1" } else { "3" })
        .parse()
        .expect("runs");
    let call_timeout_ms: u64 = env_or("COORDHOST_BENCH_CALL_TIMEOUT_MS", "5000")
        .parse()
        .expect("call timeout");
    restart_table(&vertices, runs, call_timeout_ms);
    overhead_table(runs);
}
