//! Scale figures (issue 29): a coordinator restart at 10 000, 100 000 and
//! 1 000 000 execution vertices, measured on the real `coordhost` binary.
//!
//! **The job.** A job vertex has at most 4096 subtasks (docs/job-file.md),
//! so T execution vertices are K pipelines `s<i>` (parallelism P, the sample
//! `file-enumerator`, one 1-byte split per subtask) → `forward` →
//! `t<i>` (parallelism P, `write-text`), with K = ⌈T / 2 / 4096⌉ and
//! P = ⌈T / 2 / K⌉ (so 2·K·P ≥ T, printed). Shuffle plugin: the sample
//! `local-shuffle` (partitions under `<data-dir>/shuffle`).
//!
//! **The state before the crash**, built as a real run leaves it when the
//! coordinator dies right after the last source subtask finished, but in
//! bulk: every source partition registered with one real `local-shuffle`
//! instance (its full snapshot taken once, at the end); each partition's
//! `data` (empty) and `index` written with the bytes the host's
//! `PartitionWriter` leaves for a producer that wrote nothing
//! (`coordhost::shuffle::format::empty_index`), without its three `fsync`s
//! per partition (which made the recovery bench's set-up cost 1.57 ms per
//! partition); per source vertex a real `file-enumerator` that handed each
//! reader one split and then "no more splits", and its batch snapshot; the
//! event log written through the log writer as the recorder writes it
//! (`JobStarted` with the job file's fingerprint, `JobVertexInitialized` for
//! every vertex, one `ExecutionFinished` per source subtask, the last of
//! each source vertex carrying its enumerator's snapshot and the last of
//! all the shuffle master's), appended without a sync per record.
//!
//! **The restart**, per run on a pristine copy of that log: `coordhost run
//! JOB --data-dir D --workers 2` is started with `COORDHOST_LOG` showing the
//! driver's timing lines and the scheduler's `deploying` lines, each line
//! stamped as it arrives; the process is killed (SIGKILL) at its first
//! `deploying` line (the first task of the recovered job, a `t<i>`
//! subtask, is being started). Printed per size: replay (the driver's
//! `replay_ms`: read and decode every record once, without the lock, for
//! the checks; lock; that replay reused if no segment file changed; new
//! segment), recovery
//! decision (`decision_ms`: `job::recover_into`, every step of
//! docs/recovery.md), of which the partition question (`partitions_ms`,
//! the shuffle master's `get-partitions-with-metrics` for all K·P source
//! partitions), restart → first task (spawn to the first `deploying` line:
//! process start, plugin loads from the compiled cache, replay, recovery,
//! `RecoveryFinished` durable), and the child's peak RSS (`VmHWM` of
//! `/proc/PID/status` read just before the kill: the high-water mark the
//! kernel also reports as `ru_maxrss`). Beside the replay, the same
//! segments read raw (`std::fs::read` of each segment file, warm) and
//! decoded by `coordhost::events::replay` in this process, as MB/s; beside
//! the partition question, its floor on this machine: the same partitions'
//! `index` read and `data` looked at with `std::fs` in this process, one
//! thread per core, no sandbox and no plugin.
//!
//! `make bench-scale` (`cargo bench -p coordhost --bench scale -- ARGS`)
//! after `make plugins`. Arguments after `--`:
//! - `--sizes 10000,100000,1000000`: execution vertices per point (default
//!   these three; `cargo test --benches`, without `--bench`, runs 2000);
//! - `--runs N`: restarts (and dispatch runs) per point, the median
//!   printed (default 3);
//! - `--only recovery,dispatch`: which tables (default both);
//! - `--dispatch-sources P`: the dispatch job's source parallelism (default
//!   2000, so 4000 tasks; 50 without `--bench`);
//! - `--keep`: keep each size's folder (job file, data directory, the
//!   pristine log) and print its path, to profile a restart on it again;
//! - `--log-on-objects`: a second row per size with the same log written
//!   to objects (issue 30, docs/object-storage.md "Figures"): a SeaweedFS
//!   `weed mini` on loopback started by the bench (`make s3-deps`), the log
//!   written through the object log's writer (one conditional PUT per group
//!   commit), the restart run with `--log s3://…` on the same data
//!   directory and partitions; before each run the objects an earlier run
//!   added are deleted.
//!
//! **Dispatch** (second table): a job of 2·P no-op tasks (`source`,
//! parallelism P, the sample `static-enumerator` with one inline one-line
//! split per subtask, `read-lines` → `forward` → `sink`, parallelism P,
//! `write-text`) run to the end embedded (`--workers 2`) and on 3 worker
//! processes of 2 slots each (`--listen --external-workers 3`, on loopback); printed: tasks per second of the job's wall time (the
//! summary's `wall_ms`) and the coordinator's busy time per task. Each
//! twice: with the data directory under the system's temporary folder
//! (`disk`), and under `/dev/shm` (`tmpfs`), where creating a task's files
//! and folders costs no disk (a line says so when there is no `/dev/shm`).
//!
//! Everything runs in a temporary folder (removed at the end, also on a
//! panic), with this workspace's `build/cache` as the compiled-component
//! cache. `COORDHOST_BENCH_BIN` names another `coordhost` binary.

mod common;
use common::{plugin_path, workspace};

#[allow(dead_code)]
#[path = "../../tests/e2e/tests/all/support/s3.rs"]
mod s3;

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use coordhost::config::{JobConfig, LoadOptions, load_job};
use coordhost::coordinator::{SourceCoordinator, SplitAnswer};
use coordhost::events::{
    AttemptId, ExecutionFinished, FileStorage, JobEvent, JobStarted, JobVertexInitialized,
    ObjectLogUrl, ObjectStorage, ProducedPartition, ShuffleSnapshot, SubtaskInputRange,
    WriterOptions, job_log_dir, open_job_log, open_object_log, replay,
};
use coordhost::job::{RunOptions, job_fingerprint, load_plugins};
use coordhost::plugin::{
    ExecutionAttemptId, PartitionDescriptor, ProducerDescriptor, ResultPartitionId,
};
use coordhost::shuffle::{DATA_FILE, INDEX_FILE, PartitionProducer};

const JOB: &str = "scale-bench";
/// Most subtasks a job vertex may have (docs/job-file.md).
const MAX_PARALLELISM: u32 = 4096;

fn binary() -> PathBuf {
    let bin = std::env::var_os("COORDHOST_BENCH_BIN").map_or_else(
        || PathBuf::from(env!("CARGO_BIN_EXE_coordhost")),
        PathBuf::from,
    );
    assert!(bin.is_file(), "{} is not a file", bin.display());
    bin
}

fn plugin(name: &str) -> PathBuf {
    let p = plugin_path(name);
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

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The machine's load, as `uptime` says it, for the figures table.
fn load_line() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// K pipelines of P subtasks per vertex for about `total` execution vertices.
fn shape(total: u32) -> (u32, u32) {
    let half = total.div_ceil(2).max(1);
    let k = half.div_ceil(MAX_PARALLELISM);
    (k, half.div_ceil(k))
}

fn job_file(dir: &Path, input: &Path, k: u32, p: u32) -> PathBuf {
    use std::fmt::Write as _;
    let mut text = format!(
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

[plugins.shuffle]
component = "{shuffle}"
kind = "shuffle-master"
config = {{ root = "${{data_dir}}/shuffle" }}
dirs = [{{ path = "${{data_dir}}/shuffle", writable = true }}]
# The bench's own set-up registers 500 000 partitions with one instance and
# takes its snapshot in one `snapshot-state` call: the raised limits are
# for that (not measured without them). A restart
# needs no more than the defaults since the partition question is asked in
# chunks (2026-12-05: with this line removed, the 1 M restart kept all
# 500 118 sources; before, `get-partitions-with-metrics` hit the 256 MiB cap
# and every source ran again).
limits = {{ call-timeout-ms = 600000, memory-mib = 4096 }}
"#,
        enumerator = plugin("file-enumerator").display(),
        shuffle = plugin("local-shuffle").display(),
        input = input.display(),
    );
    for i in 0..k {
        write!(
            text,
            r#"
[[vertices]]
id = "s{i}"
source = "files"
parallelism = {p}
operators = [{{ op = "read-lines" }}]

[[vertices]]
id = "t{i}"
parallelism = {p}
operators = [{{ op = "write-text", path = "${{data_dir}}/out/{i}" }}]

[[edges]]
from = "s{i}"
to = "t{i}"
kind = "forward"
"#
        )
        .expect("write");
    }
    let job = dir.join("scale.toml");
    std::fs::write(&job, text).expect("job file");
    job
}

/// What building the "before the crash" state took, seconds per part,
/// and what its event log records.
struct Built {
    shuffle: Duration,
    files: Duration,
    enumerators: Duration,
    log: Duration,
    records: LogRecords,
}

/// What the crashed job's event log records beyond the job file: each
/// source subtask's partition location, each source vertex's enumerator
/// snapshot, the shuffle master's snapshot.
struct LogRecords {
    fingerprint: String,
    data_sets: Vec<String>,
    locations: Vec<Vec<String>>,
    enumerator_snapshots: Vec<coordhost::events::EnumeratorSnapshot>,
    shuffle_snapshot: ShuffleSnapshot,
}

/// Builds, under `data_dir`, the state a coordinator leaves when it dies
/// right after the last source subtask finished.
#[allow(clippy::too_many_lines)]
fn build_state(config: &JobConfig, opts: &RunOptions, data_dir: &Path, k: u32, p: u32) -> Built {
    let (plugins, _) = load_plugins(config, opts).expect("plugins");
    let graph = &config.graph;
    let source = |i: u32| 2 * i as usize;
    let edge = |i: u32| {
        graph
            .edges
            .iter()
            .position(|e| e.from == source(i))
            .expect("edge of a source")
    };

    // Every source partition registered; its files as a finished empty
    // partition leaves them.
    let t = Instant::now();
    let mut shuffle = plugins[&config.shuffle_plugin]
        .shuffle_master()
        .expect("shuffle master");
    shuffle.register_job(JOB).expect("register job");
    let mut locations: Vec<Vec<String>> = Vec::with_capacity(k as usize);
    for i in 0..k {
        let data_set = graph.data_set_id(edge(i));
        let subs = graph.num_subpartitions(edge(i));
        let mut at = Vec::with_capacity(p as usize);
        for s in 0..p {
            let d = shuffle
                .register_partition_with_producer(
                    JOB,
                    &PartitionDescriptor {
                        id: ResultPartitionId {
                            intermediate_data_set: data_set.clone(),
                            producer: ExecutionAttemptId {
                                job_vertex: format!("s{i}"),
                                subtask: s,
                                attempt: 0,
                            },
                        },
                        num_subpartitions: subs,
                    },
                    &ProducerDescriptor {
                        worker_id: "local".into(),
                        hostname: None,
                    },
                )
                .expect("register partition");
            at.push(d.location);
        }
        locations.push(at);
    }
    let shuffle_snapshot = shuffle.snapshot_state(JOB).expect("shuffle snapshot");
    drop(shuffle);
    let shuffle_time = t.elapsed();

    let t = Instant::now();
    for (i, at) in (0..k).zip(&locations) {
        let data_set = graph.data_set_id(edge(i));
        let subs = graph.num_subpartitions(edge(i));
        for (s, location) in (0..).zip(at) {
            let dir = Path::new(location);
            std::fs::create_dir_all(dir).expect("partition dir");
            std::fs::write(dir.join(DATA_FILE), b"").expect("data");
            let index = coordhost::shuffle::format::empty_index(
                subs,
                PartitionProducer {
                    job: JOB.into(),
                    data_set: data_set.clone(),
                    job_vertex: format!("s{i}"),
                    subtask: s,
                    attempt: 0,
                },
            );
            std::fs::write(dir.join(INDEX_FILE), index).expect("index");
        }
    }
    let files = t.elapsed();

    // Per source vertex: every reader got one split, then "no more splits".
    let t = Instant::now();
    let mut enumerator_snapshots = Vec::with_capacity(k as usize);
    for i in 0..k {
        let id = format!("s{i}");
        let mut c = SourceCoordinator::start(&id, &plugins["files"], p, None).expect("start");
        for s in 0..p {
            c.register_reader(s).expect("add reader");
            let a = c.request_split(s).expect("split request");
            assert!(matches!(a, Some(SplitAnswer::Split(_))), "{a:?}");
        }
        for s in 0..p {
            let a = c.request_split(s).expect("split request");
            assert!(matches!(a, Some(SplitAnswer::NoMoreSplits)), "{a:?}");
        }
        let snap = c
            .snapshot()
            .expect("snapshot")
            .expect("no fault: consistent");
        enumerator_snapshots.push(coordhost::snapshot::encode(&id, &snap).expect("encode"));
    }
    let enumerators = t.elapsed();

    let t = Instant::now();
    let records = LogRecords {
        fingerprint: job_fingerprint(config, data_dir),
        data_sets: (0..k).map(|i| graph.data_set_id(edge(i))).collect(),
        locations,
        enumerator_snapshots,
        shuffle_snapshot: ShuffleSnapshot {
            incremental: shuffle_snapshot.incremental,
            data: shuffle_snapshot.data,
        },
    };
    let (writer, _) = open_job_log(data_dir, JOB, WriterOptions::default()).expect("open log");
    write_log(writer, &records, k, p);
    Built {
        shuffle: shuffle_time,
        files,
        enumerators,
        log: t.elapsed(),
        records,
    }
}

/// Writes the crashed job's event log through `writer` as the recorder
/// writes it (appended without a sync per record), and closes it.
fn write_log(writer: coordhost::events::EventLogWriter, r: &LogRecords, k: u32, p: u32) {
    let epoch = writer.coordinator_attempt();
    writer
        .append_durable(&JobEvent::JobStarted(JobStarted {
            job_id: JOB.into(),
            graph_fingerprint: r.fingerprint.clone(),
            recovery_enabled: true,
        }))
        .expect("append");
    for i in 0..k {
        writer
            .append(&JobEvent::JobVertexInitialized(JobVertexInitialized {
                job_vertex: format!("s{i}"),
                parallelism: p,
                subtask_inputs: vec![Vec::new(); p as usize],
                decided_at_runtime: false,
            }))
            .expect("append");
    }
    let mut shuffle_snapshot = Some(r.shuffle_snapshot.clone());
    for ((i, at), enumerator) in (0..k).zip(&r.locations).zip(&r.enumerator_snapshots) {
        let data_set = &r.data_sets[i as usize];
        let mut enumerator = Some(enumerator.clone());
        for (s, location) in (0..p).zip(at) {
            let last_of_vertex = s + 1 == p;
            let last = last_of_vertex && i + 1 == k;
            let event = JobEvent::ExecutionFinished(ExecutionFinished {
                attempt: AttemptId {
                    job_vertex: format!("s{i}"),
                    subtask: s,
                    attempt: 0,
                },
                coordinator_epoch: epoch,
                produced: vec![ProducedPartition {
                    data_set: data_set.clone(),
                    location: location.clone(),
                    bytes_per_subpartition: vec![0],
                }],
                enumerator_snapshots: if last_of_vertex {
                    enumerator.take().into_iter().collect()
                } else {
                    Vec::new()
                },
                shuffle_snapshot: if last { shuffle_snapshot.take() } else { None },
            });
            writer.append(&event).expect("append");
        }
    }
    for i in 0..k {
        let data_set = &r.data_sets[i as usize];
        writer
            .append(&JobEvent::JobVertexInitialized(JobVertexInitialized {
                job_vertex: format!("t{i}"),
                parallelism: p,
                subtask_inputs: (0..p)
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
    }
    writer.flush().expect("flush");
    writer.close().expect("close log");
}

fn segment_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.is_file())
        .collect();
    v.sort();
    v
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for f in segment_files(from) {
        std::fs::copy(&f, to.join(f.file_name().expect("name"))).expect("copy");
    }
}

/// Lines a child printed, each stamped when it arrived.
type Lines = Arc<Mutex<Vec<(Instant, String)>>>;

fn collect(stream: impl Read + Send + 'static, lines: Lines) {
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { break };
            lines.lock().expect("lines").push((Instant::now(), line));
        }
    });
}

/// A child killed (SIGKILL) and reaped when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `VmHWM` of a live process, bytes.
fn peak_rss(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The value of `key=` in a tracing line.
fn field(line: &str, key: &str) -> Option<f64> {
    let at = line.find(&format!(" {key}="))? + key.len() + 2;
    line[at..]
        .split(|c: char| c.is_whitespace())
        .next()?
        .parse()
        .ok()
}

/// One restart's figures, milliseconds (RSS in MiB).
#[derive(Debug, Default, Clone, Copy)]
struct Restart {
    replay: f64,
    decision: f64,
    partitions: f64,
    first_task: f64,
    rss_mib: f64,
}

/// The restart of `job` on `data_dir`; with `log`, its event log is the
/// object log there (`--log URL`, the store's `AWS_*` variables in `env`).
fn restart(job: &Path, data_dir: &Path, log: Option<(&str, &[(String, String)])>) -> Restart {
    let mut cmd = Command::new(binary());
    cmd.arg("run").arg(job).arg("--data-dir").arg(data_dir);
    if let Some((url, env)) = log {
        cmd.arg("--log")
            .arg(url)
            .envs(env.iter().map(|(k, v)| (k, v)));
    }
    cmd.arg("--workers")
        .arg("2")
        .arg("--cache-dir")
        .arg(cache_dir())
        .env(
            "COORDHOST_LOG",
            "warn,coordhost::job::driver=info,coordhost::scheduler::master::deploy=debug",
        )
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let started = Instant::now();
    let mut child = Killed(cmd.spawn().expect("start coordhost"));
    let lines: Lines = Arc::default();
    collect(child.0.stdout.take().expect("stdout"), lines.clone());
    collect(child.0.stderr.take().expect("stderr"), lines.clone());
    let deadline = started + Duration::from_secs(1800);
    let first = loop {
        let hit = lines
            .lock()
            .expect("lines")
            .iter()
            .find(|(_, l)| l.contains("deploying"))
            .map(|(t, _)| *t);
        if let Some(t) = hit {
            break t;
        }
        let ended = child.0.try_wait().expect("try_wait");
        if ended.is_some() || Instant::now() > deadline {
            std::thread::sleep(Duration::from_millis(100));
            let all = lines.lock().expect("lines");
            let tail: Vec<&str> = all.iter().rev().take(30).map(|(_, l)| l.as_str()).collect();
            panic!(
                "coordhost deployed no task ({ended:?}):\n{}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    let rss = peak_rss(child.0.id()).unwrap_or(0);
    drop(child);
    let all = lines.lock().expect("lines");
    let find = |what: &str, key: &str| {
        all.iter()
            .find(|(_, l)| l.contains(what))
            .and_then(|(_, l)| field(l, key))
            .unwrap_or_else(|| panic!("no `{what}` line with {key}="))
    };
    Restart {
        replay: find("job event log replayed", "replay_ms"),
        decision: find("recovered from the job event log", "decision_ms"),
        partitions: find("partition question answered", "partitions_ms"),
        first_task: ms(first - started),
        rss_mib: rss as f64 / f64::from(1 << 20),
    }
}

/// Raw read and in-process decode of the log's segments: (MiB, raw MB/s, decode MB/s, records).
fn read_rates(log_dir: &Path) -> (f64, f64, f64, usize) {
    let files = segment_files(log_dir);
    let mut bytes = 0;
    let mut raw = Vec::new();
    let mut decode = Vec::new();
    let mut records = 0;
    for _ in 0..3 {
        let t = Instant::now();
        bytes = files
            .iter()
            .map(|f| std::fs::read(f).expect("read").len())
            .sum::<usize>();
        raw.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        let r = replay(&FileStorage::open_read_only(log_dir)).expect("replay");
        decode.push(t.elapsed().as_secs_f64());
        records = r.events.len();
    }
    let mb = bytes as f64 / 1e6;
    (
        bytes as f64 / f64::from(1 << 20),
        mb / median(raw),
        mb / median(decode),
        records,
    )
}

/// The least file work a partition question that checks every partition
/// can cost on this machine, ms (median of 3, warm): each partition's
/// `index` read whole and its `data` looked at (`lstat`) with `std::fs`,
/// full paths, no sandbox, no plugin, on as many threads as there are
/// cores. The restart's partition question does this work and more (the
/// grant's rules, the plugin's checks); at 1 M execution vertices this
/// alone is over a second on 2 cores (docs/recovery.md, "The floor").
fn partition_files_floor(locations: &[Vec<String>]) -> f64 {
    let all: Vec<&str> = locations.iter().flatten().map(String::as_str).collect();
    let threads = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let per = all.len().div_ceil(threads).max(1);
    let mut took = Vec::new();
    for _ in 0..3 {
        let t = Instant::now();
        std::thread::scope(|s| {
            for part in all.chunks(per) {
                s.spawn(move || {
                    for location in part {
                        let dir = Path::new(location);
                        let index = std::fs::read(dir.join(INDEX_FILE)).expect("index");
                        assert!(!index.is_empty(), "{location}: an empty index");
                        let data = std::fs::symlink_metadata(dir.join(DATA_FILE)).expect("data");
                        assert!(data.is_file(), "{location}: data is not a file");
                    }
                });
            }
        });
        took.push(t.elapsed().as_secs_f64() * 1e3);
    }
    median(took)
}

/// The object store of the `objects` rows: a SeaweedFS `weed mini` on
/// loopback, started by the bench as the tests start one.
struct Store {
    server: s3::Seaweed,
    builder: object_store::aws::AmazonS3Builder,
}

impl Store {
    fn start(dir: &Path) -> Self {
        let server = s3::Seaweed::start(dir, BUCKET);
        let builder = object_store::aws::AmazonS3Builder::new()
            .with_endpoint(server.endpoint())
            .with_allow_http(true)
            .with_region("us-east-1")
            .with_access_key_id(s3::ACCESS_KEY)
            .with_secret_access_key(s3::SECRET_KEY);
        Self { server, builder }
    }
}

/// The bucket of the `objects` rows.
const BUCKET: &str = "coordhost-scale";

/// One row of the restart table: the log's place, the medians.
fn restart_row(
    total: u32,
    (k, p): (u32, u32),
    build: Duration,
    log: &str,
    rates: Option<(f64, f64, f64, usize)>,
    floor: Option<f64>,
    samples: &[Restart],
) {
    let pick = |f: fn(&Restart) -> f64| median(samples.iter().map(f).collect());
    let (log_mib, records, raw, decode, ratio) = match rates {
        Some((mib, raw, decode, records)) => (
            format!("{mib:.1}"),
            records.to_string(),
            format!("{raw:.0}"),
            format!("{decode:.0}"),
            format!("{:.1}", raw / decode),
        ),
        None => ("-".into(), "-".into(), "-".into(), "-".into(), "-".into()),
    };
    let floor = floor.map_or_else(|| "-".to_owned(), |ms| format!("{ms:.1}"));
    println!(
        "{:>9} {log:>7} {:>5} {:>5} {:>8.1} {log_mib:>8} {records:>9} {:>10.1} {:>11.1} {:>11.1} {floor:>10} {:>11.1} {:>11.1} {raw:>9} {decode:>10} {ratio:>10}",
        total,
        k,
        p,
        build.as_secs_f64(),
        pick(|r| r.replay),
        pick(|r| r.decision),
        pick(|r| r.partitions),
        pick(|r| r.first_task),
        pick(|r| r.rss_mib),
    );
}

fn recovery_table(sizes: &[u32], runs: usize, keep: bool, store: Option<&Store>) {
    println!(
        "restart of a crashed job, all sources finished, all partitions alive (median of the runs; load {})",
        load_line()
    );
    println!(
        "{:>9} {:>7} {:>5} {:>5} {:>8} {:>8} {:>9} {:>10} {:>11} {:>11} {:>10} {:>11} {:>11} {:>9} {:>10} {:>10}",
        "exec vtx",
        "log",
        "K",
        "P",
        "build s",
        "log MiB",
        "records",
        "replay ms",
        "decision ms",
        "(partit.)",
        "(floor)",
        "first task",
        "peak MiB",
        "raw MB/s",
        "decode MB/s",
        "ratio"
    );
    for &total in sizes {
        let (k, p) = shape(total);
        let work = tempfile::Builder::new()
            .prefix("coordhost-scale-bench")
            .tempdir()
            .expect("tempdir");
        let input = work.path().join("input");
        std::fs::create_dir_all(&input).expect("input dir");
        std::fs::write(input.join("data.txt"), vec![b'x'; p as usize]).expect("input");
        let data_dir = work.path().join("data");
        let job = job_file(work.path(), &input, k, p);
        let config = load_job(
            &job,
            &LoadOptions {
                data_dir: data_dir.clone(),
                cache_dir: Some(cache_dir()),
                log_on_objects: false,
            },
        )
        .expect("job file");
        let mut opts = RunOptions::new(&job, &data_dir);
        opts.cache_dir = Some(cache_dir());
        let t = Instant::now();
        let built = build_state(&config, &opts, &data_dir, k, p);
        let build = t.elapsed();
        eprintln!(
            "{} execution vertices: built in {:.1} s (shuffle registrations + snapshot {:.1} s, partition files {:.1} s, enumerators {:.1} s, log {:.1} s)",
            2 * k * p,
            build.as_secs_f64(),
            built.shuffle.as_secs_f64(),
            built.files.as_secs_f64(),
            built.enumerators.as_secs_f64(),
            built.log.as_secs_f64(),
        );
        let log_dir = job_log_dir(&data_dir, JOB).expect("log dir");
        let (log_mib, raw, decode, records) = read_rates(&log_dir);
        let floor = partition_files_floor(&built.records.locations);
        let pristine = work.path().join("pristine-log");
        copy_dir(&log_dir, &pristine);
        let mut samples = Vec::new();
        for _ in 0..runs {
            std::fs::remove_dir_all(&log_dir).expect("remove log");
            copy_dir(&pristine, &log_dir);
            let _ = std::fs::remove_dir_all(data_dir.join("out"));
            let r = restart(&job, &data_dir, None);
            eprintln!("  run: {r:?}");
            samples.push(r);
        }
        restart_row(
            2 * k * p,
            (k, p),
            build,
            "folder",
            Some((log_mib, raw, decode, records)),
            Some(floor),
            &samples,
        );
        if let Some(store) = store {
            // The same log written to objects (one PUT per group commit),
            // the same partitions, the folder log gone: each run starts
            // from the objects the writer left (those a run adds are
            // deleted before the next).
            let prefix = format!("scale-{total}");
            let url = format!("s3://{BUCKET}/{prefix}");
            let storage = ObjectStorage::connect_from(
                &ObjectLogUrl::parse(&url).expect("url"),
                store.builder.clone(),
                store.server.endpoint(),
            )
            .expect("the object log");
            let (writer, _) =
                open_object_log(Arc::new(storage), WriterOptions::default()).expect("open log");
            write_log(writer, &built.records, k, p);
            std::fs::remove_dir_all(&log_dir).expect("remove the folder log");
            let pristine: std::collections::BTreeSet<String> = store
                .server
                .keys(&format!("{prefix}/"))
                .into_iter()
                .collect();
            let env = store.server.env();
            let mut samples = Vec::new();
            for _ in 0..runs {
                for key in store.server.keys(&format!("{prefix}/")) {
                    if !pristine.contains(&key) {
                        store.server.delete(&key);
                    }
                }
                let _ = std::fs::remove_dir_all(data_dir.join("out"));
                let r = restart(&job, &data_dir, Some((&url, &env)));
                eprintln!("  run on objects: {r:?}");
                samples.push(r);
            }
            restart_row(2 * k * p, (k, p), build, "objects", None, None, &samples);
        }
        if keep {
            eprintln!("  kept: {}", work.keep().display());
        }
    }
    println!(
        "replay = the driver's replay_ms (read + decode every record once, the checks, lock, new segment); decision = job::recover_into \
         (shuffle restore, plan, partition question, enumerator restores, apply with its ExecutionsReset records); \
         (partit.) = the partition question's share of it; (floor) = the least file work such a question costs here: \
         every partition's index read and data looked at with std::fs, no sandbox or plugin, one thread per core, warm; first task = spawn to the first `deploying` line; \
         peak = VmHWM before the kill; raw / decode = the same segments read with std::fs::read / decoded by \
         events::replay in the bench's process, warm; ratio = raw / decode; log = where the event log is: \
         the data directory, or objects in a SeaweedFS `weed mini` on loopback (--log-on-objects; the same log, the same \
         partitions on disk)"
    );
}

// ---- dispatch: no-op tasks per second ------------------------------------------------------

/// A job of `2 * p` tiny tasks: `source` (parallelism `p`, the sample
/// `static-enumerator` handing each subtask one inline split of one short
/// line) → `forward` → `sink` (parallelism `p`, `write-text`).
fn dispatch_job(path: &Path, p: u32) {
    let splits: Vec<String> = (0..p)
        .map(|i| format!("\"split.{i}\" = \"x{i}\""))
        .collect();
    let text = format!(
        r#"[job]
name = "dispatch"

[shuffle]
plugin = "shuffle"

[plugins.shuffle]
component = "{shuffle}"
kind = "shuffle-master"
config = {{ root = "${{data_dir}}/shuffle" }}
dirs = [{{ path = "${{data_dir}}/shuffle", writable = true }}]

[plugins.splits]
component = "{enumerator}"
kind = "split-enumerator"
config = {{ {splits} }}

[[vertices]]
id = "source"
source = "splits"
parallelism = {p}
operators = [{{ op = "read-lines" }}]

[[vertices]]
id = "sink"
parallelism = {p}
operators = [{{ op = "write-text", path = "${{data_dir}}/out" }}]

[[edges]]
from = "source"
to = "sink"
kind = "forward"
"#,
        shuffle = plugin("local-shuffle").display(),
        enumerator = plugin("static-enumerator").display(),
        splits = splits.join(", "),
    );
    std::fs::write(path, text).expect("job file");
}

/// Output lines of a child that ended, with its exit status.
fn run_to_end(mut cmd: Command) -> (std::process::ExitStatus, String) {
    let out = cmd.stdin(Stdio::null()).output().expect("start coordhost");
    (
        out.status,
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

/// A loopback address with a port nobody listened on a moment ago.
fn free_port() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    l.local_addr().expect("local addr").to_string()
}

/// One dispatch run: (tasks run, job wall ms from the summary, coordinator busy µs).
fn dispatch_run(work: &Path, job: &Path, run: usize, external: Option<&str>) -> (u64, f64, f64) {
    let data = work.join(format!("data-{run}"));
    let summary = work.join(format!("summary-{run}.json"));
    let mut cmd = Command::new(binary());
    cmd.arg("--cache-dir")
        .arg(cache_dir())
        .arg("run")
        .arg(job)
        .arg("--data-dir")
        .arg(&data)
        .arg("--summary-json")
        .arg(&summary)
        .env("COORDHOST_LOG", "warn");
    let _workers: Vec<Killed> = match external {
        None => {
            cmd.arg("--workers").arg("2");
            Vec::new()
        }
        Some(addr) => {
            cmd.args([
                "--listen",
                addr,
                "--external-workers",
                "3",
                "--worker-wait-ms",
                "60000",
            ]);
            (0..3)
                .map(|i| {
                    let mut w = Command::new(binary());
                    w.arg("--cache-dir")
                        .arg(cache_dir())
                        .arg("worker")
                        .arg("--coordinator")
                        .arg(addr)
                        .arg("--data-dir")
                        .arg(work.join(format!("w{run}-{i}")))
                        .arg("--slots")
                        .arg("2")
                        .env("COORDHOST_LOG", "warn")
                        .stdin(Stdio::null())
                        .stdout(Stdio::null())
                        .stderr(Stdio::null());
                    Killed(w.spawn().expect("start a worker"))
                })
                .collect()
        }
    };
    let (status, output) = run_to_end(cmd);
    assert!(status.success(), "coordhost run ended {status}:\n{output}");
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&summary).expect("summary")).expect("JSON");
    assert_eq!(s["status"], "finished", "{s}");
    let _ = std::fs::remove_dir_all(&data);
    (
        s["tasks_run"].as_u64().expect("tasks_run"),
        s["wall_ms"].as_f64().expect("wall_ms"),
        s["coordinator_busy_us"].as_f64().unwrap_or(0.0),
    )
}

fn dispatch_table(p: u32, runs: usize) {
    println!();
    println!(
        "dispatch: {} no-op tasks (source {p} -> forward -> sink {p}), median of {runs} runs (load {})",
        2 * p,
        load_line()
    );
    println!(
        "{:<34} {:>8} {:>10} {:>10} {:>14}",
        "where", "tasks", "wall ms", "tasks/s", "busy us/task"
    );
    // The data directory on the temporary folder's disk, then on a tmpfs:
    // each task makes files and folders (a partition, a part file), and on
    // some file systems their creation, not the coordinator, sets the pace
    // (docs/recovery.md, "Dispatch").
    let tmpfs = Path::new("/dev/shm");
    let mut places = vec![("disk", std::env::temp_dir())];
    if tmpfs.is_dir() {
        places.push(("tmpfs", tmpfs.to_path_buf()));
    } else {
        println!("(no /dev/shm here: the rows with the data directory on a tmpfs are left out)");
    }
    for (place, parent) in places {
        dispatch_rows(p, runs, place, &parent);
    }
    println!(
        "wall = the summary's wall_ms (first vertex to the end, plugins loaded and workers registered before); \
         tasks/s = tasks / wall; busy = the summary's coordinator_busy_us per task; disk / tmpfs = where the data directory is"
    );
}

/// The dispatch rows (embedded, 3 workers) with the work folder in `parent`.
fn dispatch_rows(p: u32, runs: usize, place: &str, parent: &Path) {
    let work = tempfile::Builder::new()
        .prefix("coordhost-dispatch-bench")
        .tempdir_in(parent)
        .expect("tempdir");
    let job = work.path().join("dispatch.toml");
    dispatch_job(&job, p);
    for (name, external) in [("embedded (2 slots)", false), ("3 workers (2 slots)", true)] {
        let mut rows = Vec::new();
        for run in 0..runs {
            let addr = external.then(free_port);
            rows.push(dispatch_run(
                work.path(),
                &job,
                run + if external { 1000 } else { 0 },
                addr.as_deref(),
            ));
        }
        let tasks = rows[0].0;
        let wall = median(rows.iter().map(|r| r.1).collect());
        let busy = median(rows.iter().map(|r| r.2 / r.0 as f64).collect());
        println!(
            "{:<34} {:>8} {:>10.0} {:>10.0} {:>14.0}",
            format!("{name}, {place}"),
            tasks,
            wall,
            tasks as f64 / (wall / 1e3),
            busy
        );
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let quick = !args.iter().any(|a| a == "--bench");
    let value = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let sizes: Vec<u32> = value("--sizes")
        .unwrap_or_else(|| {
            (if quick {
                "2000"
            } else {
                "10000,100000,1000000"
            })
            .into()
        })
        .split(',')
        .map(|s| s.trim().parse().expect("--sizes: execution vertices"))
        .collect();
    let runs: usize = value("--runs")
        .unwrap_or_else(|| (if quick { "1" } else { "3" }).into())
        .parse()
        .expect("--runs");
    let only = value("--only").unwrap_or_else(|| "recovery,dispatch".into());
    let tasks: u32 = value("--dispatch-sources")
        .unwrap_or_else(|| (if quick { "50" } else { "2000" }).into())
        .parse()
        .expect("--dispatch-sources");
    if only.split(',').any(|o| o == "recovery") {
        let seaweed = tempfile::tempdir().expect("tempdir");
        let store = args
            .iter()
            .any(|a| a == "--log-on-objects")
            .then(|| Store::start(&seaweed.path().join("seaweed")));
        recovery_table(
            &sizes,
            runs,
            args.iter().any(|a| a == "--keep"),
            store.as_ref(),
        );
    }
    if only.split(',').any(|o| o == "dispatch") {
        dispatch_table(tasks, runs);
    }
}
