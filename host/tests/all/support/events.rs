//! Shared helpers for the event log integration tests: one sample of every
//! event kind, and small log-building helpers over `MemoryStorage`.

use std::sync::Arc;

use coordhost::events::{
    AttemptId, EncodedSplit, EnumeratorSnapshot, EventLogWriter, ExecutionFinished,
    ExecutionVertexId, ExecutionsReset, JobEvent, JobFailed, JobFinished, JobStarted,
    JobVertexInitialized, MemoryStorage, ProducedPartition, RecoveryFinished, RecoveryReset,
    RecoveryStarted, Replay, ResetReason, ShuffleSnapshot, SinkCommitted, SplitAssignment,
    SubtaskInputRange, WriterOptions,
};

/// One event of every kind, with every optional part filled somewhere.
pub fn one_of_each() -> Vec<JobEvent> {
    let source0 = AttemptId {
        job_vertex: "source".into(),
        subtask: 0,
        attempt: 0,
    };
    vec![
        JobEvent::JobStarted(JobStarted {
            job_id: "wordcount".into(),
            graph_fingerprint: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
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
            parallelism: 2,
            subtask_inputs: (0..2)
                .map(|i| {
                    vec![SubtaskInputRange {
                        data_set: "middle->sink".into(),
                        partition_start: 0,
                        partition_end: 5,
                        subpartition_start: i * 3,
                        subpartition_end: i * 3 + 3,
                    }]
                })
                .collect(),
            decided_at_runtime: true,
        }),
        JobEvent::ExecutionFinished(ExecutionFinished {
            attempt: source0.clone(),
            coordinator_epoch: 0,
            produced: vec![ProducedPartition {
                data_set: "source->middle".into(),
                location: "/data/wordcount/partitions/source-0-0".into(),
                bytes_per_subpartition: vec![1024, 0, u64::MAX],
            }],
            enumerator_snapshots: vec![EnumeratorSnapshot {
                job_vertex: "source".into(),
                checkpoint_id: -1,
                state: vec![1, 2, 3, 255],
                assignments: vec![SplitAssignment {
                    subtask: 0,
                    splits: vec![
                        EncodedSplit {
                            id: "a.txt:0".into(),
                            bytes: b"a.txt 0 4096".to_vec(),
                        },
                        EncodedSplit {
                            id: "b.txt:0".into(),
                            bytes: vec![],
                        },
                    ],
                }],
                no_more_splits: vec![0],
                state_file: None,
                incremental: false,
            }],
            shuffle_snapshot: Some(ShuffleSnapshot {
                incremental: true,
                data: vec![9; 40],
            }),
        }),
        JobEvent::ExecutionFinished(ExecutionFinished {
            attempt: AttemptId {
                job_vertex: "source".into(),
                subtask: 1,
                attempt: 3,
            },
            coordinator_epoch: 1,
            produced: vec![],
            enumerator_snapshots: vec![],
            shuffle_snapshot: None,
        }),
        JobEvent::ExecutionsReset(ExecutionsReset {
            executions: vec![ExecutionVertexId {
                job_vertex: "source".into(),
                subtask: 0,
            }],
            reason: ResetReason::PartitionNotFound {
                data_set: "source->middle".into(),
                consumer: ExecutionVertexId {
                    job_vertex: "middle".into(),
                    subtask: 0,
                },
            },
        }),
        JobEvent::ExecutionsReset(ExecutionsReset {
            executions: vec![],
            reason: ResetReason::Failover {
                message: "worker lost: ünïcødé".into(),
            },
        }),
        JobEvent::SinkCommitted(SinkCommitted {
            attempt: AttemptId {
                job_vertex: "sink".into(),
                subtask: 1,
                attempt: 0,
            },
            file: "part-00001.csv".into(),
        }),
        JobEvent::RecoveryStarted(RecoveryStarted {
            coordinator_epoch: 1,
            replayed_records: 7,
            torn_tail_bytes: 13,
        }),
        JobEvent::RecoveryFinished(RecoveryFinished {
            skipped: vec![source0],
            reset: vec![
                RecoveryReset {
                    execution: ExecutionVertexId {
                        job_vertex: "middle".into(),
                        subtask: 0,
                    },
                    reason: ResetReason::RecoveryUnfinished,
                },
                RecoveryReset {
                    execution: ExecutionVertexId {
                        job_vertex: "source".into(),
                        subtask: 1,
                    },
                    reason: ResetReason::RecoveryNotInSnapshot,
                },
                RecoveryReset {
                    execution: ExecutionVertexId {
                        job_vertex: "source".into(),
                        subtask: 2,
                    },
                    reason: ResetReason::RecoveryEnumeratorWithoutSnapshot,
                },
                RecoveryReset {
                    execution: ExecutionVertexId {
                        job_vertex: "source".into(),
                        subtask: 3,
                    },
                    reason: ResetReason::RecoveryPartitionMissing {
                        data_set: "source->middle".into(),
                    },
                },
                RecoveryReset {
                    execution: ExecutionVertexId {
                        job_vertex: "middle".into(),
                        subtask: 3,
                    },
                    reason: ResetReason::RecoveryUpstreamReset {
                        upstream: ExecutionVertexId {
                            job_vertex: "source".into(),
                            subtask: 3,
                        },
                    },
                },
            ],
        }),
        JobEvent::JobFinished(JobFinished {
            job_id: "wordcount".into(),
        }),
        JobEvent::JobFailed(JobFailed {
            job_id: "wordcount".into(),
            error: "vertex `sink` subtask 1 failed on attempt 3 (of at most 3): ünïcødé".into(),
            exit_code: 1,
        }),
    ]
}

/// Options with no background thread, so tests decide every flush.
pub fn manual() -> WriterOptions {
    WriterOptions {
        flush_interval: None,
        ..WriterOptions::default()
    }
}

/// Writes `events` as one attempt into `storage` and closes the writer.
pub fn write_attempt(storage: &MemoryStorage, events: &[JobEvent]) -> Replay {
    let (writer, replay) = EventLogWriter::open(Arc::new(storage.clone()), manual()).expect("open");
    for event in events {
        writer.append(event).expect("append");
    }
    writer.close().expect("close");
    replay
}

/// The events of a replay, without positions.
pub fn events_of(replay: &Replay) -> Vec<JobEvent> {
    replay.iter_events().cloned().collect()
}
