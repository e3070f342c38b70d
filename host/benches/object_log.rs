//! The job event log on object storage beside the local folder log (issue
//! 30, docs/object-storage.md "Figures"): durable group commits — `G`
//! events appended, then one flush that returns when they are durable (an
//! `fdatasync` of the segment file; one conditional PUT of a new object) —
//! their latency (p50, p99) and throughput, to a SeaweedFS `weed mini` on
//! loopback (started here, as the tests do) and to a folder on the local
//! disk, side by side, for G = 1 and G = 100.
//!
//! Run with `make bench-objlog` (or `cargo bench -p coordhost --bench
//! object_log`; `make s3-deps` installs `weed` into `.venv`). Options:
//! `--commits N` (default 300) commits per backend and group size.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use coordhost::events::{
    AttemptId, EventLogWriter, ExecutionFinished, FileStorage, FsyncPolicy, JobEvent, ObjectLogUrl,
    ObjectStorage, ProducedPartition, Storage, WriterOptions,
};
use object_store::aws::AmazonS3Builder;

#[allow(dead_code)]
#[path = "../../tests/e2e/tests/all/support/s3.rs"]
mod s3;

/// The workspace root (what `s3.rs` finds `.venv/bin/weed` under).
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the host crate sits in the workspace")
        .to_path_buf()
}

const BUCKET: &str = "coordhost-bench";

/// An event of the size a finished subtask writes.
fn event(i: usize) -> JobEvent {
    JobEvent::ExecutionFinished(ExecutionFinished {
        attempt: AttemptId {
            job_vertex: format!("vertex-{}", i % 7),
            subtask: (i % 500) as u32,
            attempt: 0,
        },
        coordinator_epoch: 0,
        produced: vec![ProducedPartition {
            data_set: "map->reduce".into(),
            location: format!("/data/job/partitions/{i}"),
            bytes_per_subpartition: (0..16).map(|s| (i * 31 + s * 1024) as u64).collect(),
        }],
        enumerator_snapshots: vec![],
        shuffle_snapshot: None,
    })
}

/// One backend's figures for one group size.
struct Figures {
    latencies: Vec<Duration>,
    total: Duration,
    events: usize,
}

impl Figures {
    fn percentile(&self, p: f64) -> f64 {
        let mut sorted = self.latencies.clone();
        sorted.sort();
        let at = ((sorted.len() as f64 - 1.0) * p).round() as usize;
        sorted[at].as_secs_f64() * 1e3
    }

    fn commits_per_s(&self) -> f64 {
        self.latencies.len() as f64 / self.total.as_secs_f64()
    }

    fn events_per_s(&self) -> f64 {
        self.events as f64 / self.total.as_secs_f64()
    }
}

/// `commits` group commits of `group` events each through a writer on
/// `storage`; each commit timed from its first append to the end of its
/// durable flush.
fn commit_groups(storage: Arc<dyn Storage>, group: usize, commits: usize) -> Figures {
    let options = WriterOptions {
        fsync: FsyncPolicy::EveryFlush,
        flush_interval: None,
        buffer_limit: usize::MAX,
    };
    let (writer, _) = EventLogWriter::open(storage, options).expect("open the log");
    let events: Vec<JobEvent> = (0..group * commits).map(event).collect();
    let mut latencies = Vec::with_capacity(commits);
    let started = Instant::now();
    for chunk in events.chunks(group) {
        let t = Instant::now();
        for e in chunk {
            writer.append(e).expect("append");
        }
        writer.flush().expect("durable flush");
        latencies.push(t.elapsed());
    }
    let total = started.elapsed();
    writer.close().expect("close");
    Figures {
        latencies,
        total,
        events: events.len(),
    }
}

fn main() {
    let mut commits = 300;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--commits" => {
                commits = args
                    .next()
                    .and_then(|n| n.parse().ok())
                    .expect("--commits N");
            }
            // What `cargo bench` passes on.
            "--bench" => {}
            other => panic!("unknown option `{other}` (known: --commits N)"),
        }
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let server = s3::Seaweed::start(&tmp.path().join("seaweed"), BUCKET);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "object_log bench: {commits} durable group commits per line; SeaweedFS `weed mini` on loopback ({}) vs a folder in {} (fdatasync); load average at start: {}",
        server.endpoint(),
        tmp.path().display(),
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!(
        "{:<8} {:>6} {:>9} {:>9} {:>11} {:>11}",
        "backend", "G", "p50 ms", "p99 ms", "commits/s", "events/s"
    );
    for (i, group) in [1usize, 100].into_iter().enumerate() {
        let folder = tmp.path().join(format!("folder-{group}"));
        let local: Arc<dyn Storage> =
            Arc::new(FileStorage::open_for_writing(&folder).expect("the folder log"));
        let url = ObjectLogUrl::parse(&format!("s3://{BUCKET}/bench-{i}")).expect("url");
        let builder = AmazonS3Builder::new()
            .with_endpoint(server.endpoint())
            .with_allow_http(true)
            .with_region("us-east-1")
            .with_access_key_id(s3::ACCESS_KEY)
            .with_secret_access_key(s3::SECRET_KEY);
        let objects: Arc<dyn Storage> = Arc::new(
            ObjectStorage::connect_from(&url, builder, server.endpoint()).expect("the object log"),
        );
        let mut rows = Vec::new();
        for (name, storage) in [("folder", local), ("objects", objects)] {
            let f = commit_groups(storage, group, commits);
            println!(
                "{name:<8} {group:>6} {:>9.2} {:>9.2} {:>11.0} {:>11.0}",
                f.percentile(0.5),
                f.percentile(0.99),
                f.commits_per_s(),
                f.events_per_s()
            );
            rows.push(f);
        }
        println!(
            "         objects / folder at G = {group}: p50 latency × {:.1}, throughput × {:.2}",
            rows[1].percentile(0.5) / rows[0].percentile(0.5),
            rows[1].events_per_s() / rows[0].events_per_s()
        );
    }
}
