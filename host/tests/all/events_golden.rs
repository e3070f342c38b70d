//! The golden log: `tests/data/golden-log-v1/` was written by the first
//! build of the format (version 1) and is committed. It is replayed by
//! every build, forever, and never regenerated: a later format version adds
//! a new golden log beside it and keeps this one.
//!
//! The log has two coordinator attempts; attempt 0 ended with a torn record
//! that attempt 1 sealed away, and attempt 1 also ends torn. Every event
//! kind appears. To write it on a checkout that lacks it (and only then),
//! run this test with `COORDHOST_WRITE_GOLDEN_LOG=1`.

use std::fs::OpenOptions;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use coordhost::events::{
    AttemptId, EncodedSplit, EnumeratorSnapshot, EventLogWriter, ExecutionFinished,
    ExecutionVertexId, ExecutionsReset, FileStorage, JobEvent, JobStarted, JobVertexInitialized,
    ProducedPartition, RecoveryFinished, RecoveryReset, RecoveryStarted, ResetReason,
    ShuffleSnapshot, SinkCommitted, SplitAssignment, SubtaskInputRange, WriterOptions, format,
    replay,
};

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/golden-log-v1")
}

fn vertex(job_vertex: &str, subtask: u32) -> ExecutionVertexId {
    ExecutionVertexId {
        job_vertex: job_vertex.into(),
        subtask,
    }
}

fn attempt(job_vertex: &str, subtask: u32, attempt: u32) -> AttemptId {
    AttemptId {
        job_vertex: job_vertex.into(),
        subtask,
        attempt,
    }
}

/// What attempt 0 wrote, whole.
fn attempt_0_events() -> Vec<JobEvent> {
    vec![
        JobEvent::JobStarted(JobStarted {
            job_id: "golden".into(),
            graph_fingerprint: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
                .into(),
            recovery_enabled: true,
        }),
        JobEvent::JobVertexInitialized(JobVertexInitialized {
            job_vertex: "source".into(),
            parallelism: 2,
            subtask_inputs: vec![vec![], vec![]],
            decided_at_runtime: false,
        }),
        JobEvent::JobVertexInitialized(JobVertexInitialized {
            job_vertex: "sink".into(),
            parallelism: 1,
            subtask_inputs: vec![vec![SubtaskInputRange {
                data_set: "source->sink".into(),
                partition_start: 0,
                partition_end: 2,
                subpartition_start: 0,
                subpartition_end: 1,
            }]],
            decided_at_runtime: true,
        }),
        JobEvent::ExecutionFinished(ExecutionFinished {
            attempt: attempt("source", 0, 0),
            coordinator_epoch: 0,
            produced: vec![ProducedPartition {
                data_set: "source->sink".into(),
                location: "partitions/source-0-0".into(),
                bytes_per_subpartition: vec![4096],
            }],
            enumerator_snapshots: vec![EnumeratorSnapshot {
                job_vertex: "source".into(),
                checkpoint_id: -1,
                state: b"remaining:b.txt".to_vec(),
                assignments: vec![SplitAssignment {
                    subtask: 0,
                    splits: vec![EncodedSplit {
                        id: "a.txt:0".into(),
                        bytes: b"a.txt@0+4096".to_vec(),
                    }],
                }],
                no_more_splits: vec![0],
                state_file: None,
                incremental: false,
            }],
            shuffle_snapshot: Some(ShuffleSnapshot {
                incremental: false,
                data: b"source-0-0".to_vec(),
            }),
        }),
        JobEvent::ExecutionsReset(ExecutionsReset {
            executions: vec![vertex("source", 1)],
            reason: ResetReason::Failover {
                message: "worker 3 lost".into(),
            },
        }),
        JobEvent::ExecutionFinished(ExecutionFinished {
            attempt: attempt("source", 1, 1),
            coordinator_epoch: 0,
            produced: vec![ProducedPartition {
                data_set: "source->sink".into(),
                location: "partitions/source-1-1".into(),
                bytes_per_subpartition: vec![100],
            }],
            enumerator_snapshots: vec![],
            shuffle_snapshot: None,
        }),
    ]
}

/// What attempt 1 wrote, whole.
fn attempt_1_events() -> Vec<JobEvent> {
    vec![
        JobEvent::RecoveryStarted(RecoveryStarted {
            coordinator_epoch: 1,
            replayed_records: 6,
            torn_tail_bytes: 10,
        }),
        JobEvent::ExecutionsReset(ExecutionsReset {
            executions: vec![vertex("source", 1)],
            reason: ResetReason::RecoveryNotInSnapshot,
        }),
        JobEvent::RecoveryFinished(RecoveryFinished {
            skipped: vec![attempt("source", 0, 0)],
            reset: vec![
                RecoveryReset {
                    execution: vertex("source", 1),
                    reason: ResetReason::RecoveryNotInSnapshot,
                },
                RecoveryReset {
                    execution: vertex("sink", 0),
                    reason: ResetReason::RecoveryUnfinished,
                },
            ],
        }),
        JobEvent::ExecutionFinished(ExecutionFinished {
            attempt: attempt("source", 1, 2),
            coordinator_epoch: 1,
            produced: vec![ProducedPartition {
                data_set: "source->sink".into(),
                location: "partitions/source-1-2".into(),
                bytes_per_subpartition: vec![100],
            }],
            enumerator_snapshots: vec![],
            shuffle_snapshot: Some(ShuffleSnapshot {
                incremental: true,
                data: b"source-1-2".to_vec(),
            }),
        }),
        JobEvent::SinkCommitted(SinkCommitted {
            attempt: attempt("sink", 0, 0),
            file: "part-00000.csv".into(),
        }),
    ]
}

/// The first `len` bytes of a frame that never finished: a torn write.
fn torn_bytes(len: usize) -> Vec<u8> {
    let event = JobEvent::SinkCommitted(SinkCommitted {
        attempt: attempt("sink", 0, 9),
        file: "torn".into(),
    });
    let mut frame = Vec::new();
    format::encode_frame(
        &mut frame,
        event.kind_id(),
        event.schema_version(),
        &event.encode_payload().expect("encode"),
    );
    frame.truncate(len);
    frame
}

fn append_raw(path: &Path, bytes: &[u8]) {
    let mut file = OpenOptions::new()
        .append(true)
        .open(path)
        .expect("open segment");
    file.write_all(bytes).expect("append torn bytes");
}

/// The generator: writes the golden log into `dir` (which must not hold one).
fn write_golden_log(dir: &Path) {
    let log = dir.join(format::LOG_DIR);
    assert!(!log.exists(), "refusing to overwrite {}", log.display());
    let options = WriterOptions {
        flush_interval: None,
        ..WriterOptions::default()
    };
    for (events, torn) in [(attempt_0_events(), 10), (attempt_1_events(), 7)] {
        let storage = Arc::new(FileStorage::open_for_writing(&log).expect("open"));
        let (writer, _) = EventLogWriter::open(storage, options).expect("open writer");
        let segment = writer.segment().to_path_buf();
        for event in &events {
            writer.append(event).expect("append");
        }
        writer.close().expect("close");
        append_raw(&segment, &torn_bytes(torn));
    }
    std::fs::remove_file(log.join(format::LOCK_FILE)).expect("remove LOCK");
}

#[test]
fn golden_log_written_by_the_first_build_still_replays() {
    let log = golden_dir().join(format::LOG_DIR);
    let replayed = replay(&FileStorage::open_read_only(&log)).expect("the golden log replays");
    let expected: Vec<(u32, JobEvent)> = attempt_0_events()
        .into_iter()
        .map(|e| (0, e))
        .chain(attempt_1_events().into_iter().map(|e| (1, e)))
        .collect();
    let got: Vec<(u32, JobEvent)> = replayed
        .events
        .iter()
        .map(|e| (e.position.attempt, e.event.clone()))
        .collect();
    assert_eq!(got, expected);
    assert_eq!(
        replayed.events[0].position.offset, 24,
        "header of a first segment is 24 bytes"
    );

    let sealed = &replayed.segments[0];
    assert!(sealed.sealed);
    assert_eq!(
        sealed.file_len - sealed.valid_len,
        10,
        "attempt 0's torn record stays sealed away"
    );
    let torn = replayed.torn_tail.as_ref().expect("attempt 1 ends torn");
    assert_eq!((torn.attempt, torn.bytes_dropped), (1, 7));
    assert_eq!(
        replayed.job_started().map(|s| s.job_id.as_str()),
        Some("golden")
    );
}

#[test]
fn the_writer_still_writes_the_golden_log_byte_for_byte() {
    let golden = golden_dir();
    if !golden.join(format::LOG_DIR).exists()
        && std::env::var_os("COORDHOST_WRITE_GOLDEN_LOG").is_some()
    {
        write_golden_log(&golden);
    }
    let scratch = tempfile::tempdir().expect("tempdir");
    write_golden_log(scratch.path());
    for name in ["segment-00000000.log", "segment-00000001.log"] {
        let committed = std::fs::read(golden.join(format::LOG_DIR).join(name))
            .unwrap_or_else(|e| panic!("{name} of the golden log: {e} (see this file's header)"));
        let written =
            std::fs::read(scratch.path().join(format::LOG_DIR).join(name)).expect("written");
        assert!(
            committed == written,
            "{name}: this build no longer writes format version 1 as the first build did"
        );
    }
}
