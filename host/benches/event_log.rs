//! Event log throughput beside SQLite (WAL mode) with the same fsync policy:
//! appends per second with group commit (one fsync per flush of `GROUP`
//! events, and one fsync per event), and replay records per second, each
//! printed with the ratio ours / SQLite.
//!
//! Run with `cargo bench -p coordhost --bench event_log`. Both sides write
//! the same postcard payloads to the same file system; SQLite runs with
//! `journal_mode = WAL` and `synchronous = FULL` (the WAL is synced at every
//! commit), one transaction per flush. Replay decodes every payload on both
//! sides.
//!
//! Then the log bytes of a source job vertex whose M splits are assigned
//! over N batch snapshots, recorded as whole split-assignment histories
//! (the shape before schema version 3 of `ExecutionFinished`: snapshots ×
//! splits) and incrementally (each snapshot holds the splits assigned since
//! the previous one: splits), with the ratio (issue 17, fix 6).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use coordhost::events::{
    AttemptId, EncodedSplit, EnumeratorSnapshot, EventLogWriter, ExecutionFinished, FileStorage,
    FsyncPolicy, JobEvent, ProducedPartition, ShuffleSnapshot, SplitAssignment, WriterOptions,
    replay,
};
use rusqlite::{Connection, params};

/// Events per group commit in the batched runs.
const GROUP: usize = 100;

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
        shuffle_snapshot: i.is_multiple_of(10).then(|| ShuffleSnapshot {
            incremental: true,
            data: vec![7; 64],
        }),
    })
}

fn ours_append(dir: &Path, events: &[JobEvent], group: usize) -> Duration {
    let storage = Arc::new(FileStorage::open_for_writing(dir).expect("open"));
    let options = WriterOptions {
        fsync: FsyncPolicy::EveryFlush,
        flush_interval: None,
        buffer_limit: usize::MAX,
    };
    let (writer, _) = EventLogWriter::open(storage, options).expect("writer");
    let start = Instant::now();
    for (i, e) in events.iter().enumerate() {
        writer.append(e).expect("append");
        if (i + 1).is_multiple_of(group) {
            writer.flush().expect("flush");
        }
    }
    writer.close().expect("close");
    start.elapsed()
}

fn sqlite_open(path: &Path) -> Connection {
    let conn = Connection::open(path).expect("sqlite open");
    conn.pragma_update(None, "journal_mode", "WAL")
        .expect("wal");
    conn.pragma_update(None, "synchronous", "FULL")
        .expect("synchronous");
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS events (seq INTEGER PRIMARY KEY, kind INTEGER NOT NULL, version INTEGER NOT NULL, payload BLOB NOT NULL)",
    )
    .expect("create table");
    conn
}

fn sqlite_append(path: &Path, events: &[JobEvent], group: usize) -> Duration {
    let mut conn = sqlite_open(path);
    let start = Instant::now();
    for chunk in events.chunks(group) {
        let tx = conn.transaction().expect("begin");
        {
            let mut insert = tx
                .prepare_cached("INSERT INTO events (kind, version, payload) VALUES (?1, ?2, ?3)")
                .expect("prepare");
            for e in chunk {
                let payload = e.encode_payload().expect("encode");
                insert
                    .execute(params![e.kind_id(), e.schema_version(), payload])
                    .expect("insert");
            }
        }
        tx.commit().expect("commit");
    }
    start.elapsed()
}

fn ours_replay(dir: &Path, expected: usize) -> Duration {
    let start = Instant::now();
    let replayed = replay(&FileStorage::open_read_only(dir)).expect("replay");
    assert_eq!(replayed.events.len(), expected);
    start.elapsed()
}

fn sqlite_replay(path: &Path, expected: usize) -> Duration {
    let start = Instant::now();
    let conn = Connection::open(path).expect("open");
    let mut select = conn
        .prepare("SELECT kind, version, payload FROM events ORDER BY seq")
        .expect("prepare");
    let mut rows = select.query([]).expect("query");
    let mut count = 0;
    while let Some(row) = rows.next().expect("row") {
        let kind: u16 = row.get(0).expect("kind");
        let version: u16 = row.get(1).expect("version");
        let payload: Vec<u8> = row.get(2).expect("payload");
        assert_eq!((kind, version), (3, 1));
        let decoded: ExecutionFinished = postcard::from_bytes(&payload).expect("decode");
        std::hint::black_box(decoded);
        count += 1;
    }
    assert_eq!(count, expected);
    start.elapsed()
}

fn per_second(n: usize, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64()
}

fn best_of(runs: usize, mut f: impl FnMut() -> Duration) -> Duration {
    (0..runs).map(|_| f()).min().unwrap_or_default()
}

fn append_row(label: &str, n: usize, group: usize) {
    let events: Vec<JobEvent> = (0..n).map(event).collect();
    let ours = best_of(3, || {
        let dir = tempfile::tempdir().expect("tempdir");
        ours_append(dir.path(), &events, group)
    });
    let sqlite = best_of(3, || {
        let dir = tempfile::tempdir().expect("tempdir");
        sqlite_append(&dir.path().join("events.db"), &events, group)
    });
    let (a, b) = (per_second(n, ours), per_second(n, sqlite));
    println!(
        "{label:<34} ours {a:>12.0}/s   sqlite-wal {b:>12.0}/s   ratio {:.2}",
        a / b
    );
}

/// Source subtasks of the history benchmark.
const SOURCE_SUBTASKS: u32 = 8;

/// The whole histories of `snapshots` snapshots of a source whose `splits`
/// splits are handed out round-robin, an equal share between snapshots.
fn whole_histories(snapshots: usize, splits: usize) -> Vec<EnumeratorSnapshot> {
    let mut assignments: Vec<SplitAssignment> = (0..SOURCE_SUBTASKS)
        .map(|subtask| SplitAssignment {
            subtask,
            splits: Vec::new(),
        })
        .collect();
    (0..snapshots)
        .map(|n| {
            let (from, to) = (splits * n / snapshots, splits * (n + 1) / snapshots);
            for i in from..to {
                assignments[i % SOURCE_SUBTASKS as usize]
                    .splits
                    .push(EncodedSplit {
                        id: format!("lineitem-{:04}.tbl:{i}", i % 64),
                        // About the size of a file-range split in postcard.
                        bytes: format!("/data/lineitem-{:04}.tbl@{}+1048576", i % 64, i << 20)
                            .into_bytes(),
                    });
            }
            EnumeratorSnapshot {
                job_vertex: "source".into(),
                checkpoint_id: -1,
                state: vec![0; 64],
                assignments: assignments.clone(),
                no_more_splits: Vec::new(),
                state_file: None,
                incremental: false,
            }
        })
        .collect()
}

/// Bytes of a log holding one `ExecutionFinished` per snapshot.
fn log_bytes(snapshots: &[EnumeratorSnapshot]) -> u64 {
    let dir = tempfile::tempdir().expect("tempdir");
    let storage = Arc::new(FileStorage::open_for_writing(dir.path()).expect("open"));
    let options = WriterOptions {
        fsync: FsyncPolicy::EveryFlush,
        flush_interval: None,
        buffer_limit: usize::MAX,
    };
    let (writer, _) = EventLogWriter::open(storage, options).expect("writer");
    for (i, snap) in snapshots.iter().enumerate() {
        let finished = ExecutionFinished {
            attempt: AttemptId {
                job_vertex: "source".into(),
                subtask: i as u32 % SOURCE_SUBTASKS,
                attempt: 0,
            },
            coordinator_epoch: 0,
            produced: Vec::new(),
            enumerator_snapshots: vec![snap.clone()],
            shuffle_snapshot: None,
        };
        writer
            .append(&JobEvent::ExecutionFinished(finished))
            .expect("append");
    }
    writer.close().expect("close");
    std::fs::read_dir(dir.path())
        .expect("log dir")
        .flatten()
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum()
}

fn history_row(snapshots: usize, splits: usize) {
    let whole = whole_histories(snapshots, splits);
    let mut incremental = Vec::with_capacity(whole.len());
    let mut previous: Option<&[SplitAssignment]> = None;
    for snap in &whole {
        incremental.push(snap.since(previous));
        previous = Some(&snap.assignments);
    }
    // Replay's fold gives back the newest whole history.
    let mut folded = incremental[0].clone();
    for snap in &incremental[1..] {
        folded.fold(snap.clone());
    }
    assert_eq!(Some(&folded), whole.last(), "the fold is the whole history");
    let (before, after) = (log_bytes(&whole), log_bytes(&incremental));
    println!(
        "{snapshots:>5} snapshots x {splits:>7} splits   whole histories {:>10.1} KiB   incremental {:>8.1} KiB   ratio {:.1}",
        before as f64 / 1024.0,
        after as f64 / 1024.0,
        before as f64 / after as f64
    );
}

fn main() {
    // `cargo test --benches` passes `--bench`-less flags; run small then.
    let quick = std::env::args().any(|a| a == "--test");
    let n = if quick { 1_000 } else { 50_000 };
    let payload = event(1).encode_payload().expect("encode").len();
    println!(
        "event log vs SQLite (WAL, synchronous=FULL); ~{payload}-byte ExecutionFinished payloads"
    );
    append_row(&format!("append, fsync per {GROUP} events"), n, GROUP);
    append_row(
        "append, fsync per event",
        if quick { 100 } else { 2_000 },
        1,
    );

    let events: Vec<JobEvent> = (0..n).map(event).collect();
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("log");
    ours_append(&log, &events, GROUP);
    let db = dir.path().join("events.db");
    sqlite_append(&db, &events, GROUP);
    let ours = best_of(5, || ours_replay(&log, n));
    let sqlite = best_of(5, || sqlite_replay(&db, n));
    let (a, b) = (per_second(n, ours), per_second(n, sqlite));
    println!(
        "{:<34} ours {a:>12.0}/s   sqlite-wal {b:>12.0}/s   ratio {:.2}",
        "replay (decode every record)",
        a / b
    );

    println!("log bytes of a source's split-assignment history (issue 17, fix 6)");
    let shapes: &[(usize, usize)] = if quick {
        &[(10, 1_000)]
    } else {
        &[(10, 10_000), (100, 10_000), (10, 100_000)]
    };
    for &(snapshots, splits) in shapes {
        history_row(snapshots, splits);
    }
}
