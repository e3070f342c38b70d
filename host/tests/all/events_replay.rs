//! The event log end to end over in-memory and real storage: round trips,
//! torn tails at every offset, flipped bytes in every position, sealing,
//! version refusals, write failures and the lock.

use std::sync::Arc;

use crate::support::events::{events_of, manual, one_of_each, write_attempt};
use coordhost::events::{
    self, Damage, EventLogWriter, EventsError, FaultPoint, FileStorage, FsyncPolicy, JobEvent,
    MemoryStorage, Position, RecoveryStarted, SinkCommitted, Storage, WriterOptions, format,
    open_job_log, replay,
};

/// Start offsets of every record in a segment (after its header).
fn record_offsets(storage: &MemoryStorage, attempt: u32) -> Vec<usize> {
    let replay = replay(storage).expect("replay");
    replay
        .events
        .iter()
        .filter(|e| e.position.attempt == attempt)
        .map(|e| e.position.offset as usize)
        .collect()
}

fn corrupt_at(result: Result<events::Replay, EventsError>) -> (std::path::PathBuf, u64, Damage) {
    match result {
        Err(EventsError::Corrupt {
            segment,
            offset,
            damage,
        }) => (segment, offset, damage),
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

#[test]
fn every_event_kind_round_trips_through_memory_and_files() {
    let storage = MemoryStorage::new();
    write_attempt(&storage, &one_of_each());
    let replayed = replay(&storage).expect("replay");
    assert_eq!(events_of(&replayed), one_of_each());
    assert!(replayed.torn_tail.is_none());
    assert_eq!(
        replayed.job_started().map(|s| s.job_id.as_str()),
        Some("wordcount")
    );

    let dir = tempfile::tempdir().expect("tempdir");
    let (writer, fresh) = open_job_log(dir.path(), "wordcount", manual()).expect("open");
    assert!(fresh.is_empty());
    assert_eq!(writer.coordinator_attempt(), 0);
    for event in one_of_each() {
        writer.append(&event).expect("append");
    }
    writer.close().expect("close");
    let (writer, replayed) = open_job_log(dir.path(), "wordcount", manual()).expect("reopen");
    assert_eq!(writer.coordinator_attempt(), 1);
    assert_eq!(events_of(&replayed), one_of_each());
    assert_eq!(
        replayed.events[0].position,
        Position {
            attempt: 0,
            offset: format::header_len(0) as u64
        }
    );
}

#[test]
fn kind_ids_and_schema_versions_are_stable() {
    let ids: Vec<(u16, u16, &str)> = one_of_each()
        .iter()
        .map(|e| (e.kind_id(), e.schema_version(), e.kind_name()))
        .collect();
    for (id, version, name) in [
        (1, 1, "JobStarted"),
        (2, 1, "JobVertexInitialized"),
        (3, 1, "ExecutionFinished"),
        (4, 1, "ExecutionsReset"),
        (5, 1, "SinkCommitted"),
        (6, 1, "RecoveryStarted"),
        (7, 1, "RecoveryFinished"),
        (9, 1, "JobFinished"),
        (10, 1, "JobFailed"),
    ] {
        assert!(
            ids.contains(&(id, version, name)),
            "{name} is not kind {id} version {version}"
        );
    }
}

#[test]
fn a_torn_tail_at_every_byte_of_the_last_record_is_cut_and_the_rest_replays() {
    let storage = MemoryStorage::new();
    let events = one_of_each();
    write_attempt(&storage, &events);
    let bytes = storage.written(0);
    let last = *record_offsets(&storage, 0).last().expect("records");
    for cut in last..bytes.len() {
        let torn = MemoryStorage::new();
        torn.put_segment(0, bytes[..cut].to_vec());
        let replayed = replay(&torn).unwrap_or_else(|e| panic!("cut at {cut}: {e}"));
        assert_eq!(
            events_of(&replayed),
            events[..events.len() - 1],
            "cut at {cut}"
        );
        match &replayed.torn_tail {
            None => assert_eq!(cut, last),
            Some(tail) => {
                assert_eq!(
                    (tail.attempt, tail.offset, tail.bytes_dropped),
                    (0, last as u64, (cut - last) as u64)
                );
            }
        }
    }
}

#[test]
fn a_cut_torn_tail_stays_cut_after_the_next_attempt_seals_it() {
    let storage = MemoryStorage::new();
    let events = one_of_each();
    write_attempt(&storage, &events);
    let bytes = storage.written(0);
    let last = *record_offsets(&storage, 0).last().expect("records");
    let cut = last + (bytes.len() - last) / 2;
    storage.put_segment(0, bytes[..cut].to_vec());

    let recovered = RecoveryStarted {
        coordinator_epoch: 1,
        replayed_records: 9,
        torn_tail_bytes: (cut - last) as u64,
    };
    let first = write_attempt(&storage, &[JobEvent::RecoveryStarted(recovered.clone())]);
    assert_eq!(
        first.torn_tail.as_ref().map(|t| t.offset),
        Some(last as u64)
    );

    // Bytes appended to the sealed segment later (here: the rest of the torn
    // record) are ignored: every later replay sees the same prefix.
    storage.put_segment(0, bytes.clone());
    let replayed = replay(&storage).expect("replay");
    let mut expected = events[..events.len() - 1].to_vec();
    expected.push(JobEvent::RecoveryStarted(recovered));
    assert_eq!(events_of(&replayed), expected);
    assert!(replayed.torn_tail.is_none());
    assert_eq!(replayed.segments[0].valid_len, last as u64);
    assert!(replayed.segments[0].sealed);
    assert_eq!(replayed.segments[0].file_len, bytes.len() as u64);
}

#[test]
fn a_flipped_byte_in_any_record_but_the_newest_last_is_corruption_naming_segment_and_offset() {
    let storage = MemoryStorage::new();
    let events = one_of_each();
    write_attempt(&storage, &events);
    let bytes = storage.written(0);
    let offsets = record_offsets(&storage, 0);
    let last = *offsets.last().expect("records");
    for start in 0..bytes.len() {
        let record = offsets
            .iter()
            .rev()
            .find(|&&o| o <= start)
            .copied()
            .unwrap_or(0);
        let mut damaged = bytes.clone();
        damaged[start] ^= 0x20;
        let storage = MemoryStorage::new();
        storage.put_segment(0, damaged);
        let result = replay(&storage);
        if record >= last {
            // Damage in the last record is indistinguishable from a torn write.
            let replayed = result.unwrap_or_else(|e| panic!("flip at {start}: {e}"));
            assert_eq!(
                events_of(&replayed),
                events[..events.len() - 1],
                "flip at {start}"
            );
            assert_eq!(replayed.torn_tail.map(|t| t.offset), Some(last as u64));
        } else {
            let (segment, offset, _) = corrupt_at(result);
            assert_eq!(segment, storage.segment_path(0));
            assert_eq!(offset, record as u64, "flip at {start}");
        }
    }
}

#[test]
fn a_flipped_byte_anywhere_in_a_sealed_segment_is_corruption() {
    let storage = MemoryStorage::new();
    write_attempt(&storage, &one_of_each());
    write_attempt(&storage, &one_of_each()[..2]);
    let bytes = storage.written(0);
    let offsets = record_offsets(&storage, 0);
    for start in 0..bytes.len() {
        let record = offsets
            .iter()
            .rev()
            .find(|&&o| o <= start)
            .copied()
            .unwrap_or(0);
        let damaged_storage = MemoryStorage::new();
        let mut damaged = bytes.clone();
        damaged[start] ^= 0x01;
        damaged_storage.put_segment(0, damaged);
        damaged_storage.put_segment(1, storage.written(1));
        let (segment, offset, _) = corrupt_at(replay(&damaged_storage));
        assert_eq!(
            (segment, offset),
            (storage.segment_path(0), record as u64),
            "flip at {start}"
        );
    }
}

#[test]
fn a_truncated_sealed_segment_or_a_missing_one_is_corruption() {
    let storage = MemoryStorage::new();
    write_attempt(&storage, &one_of_each());
    write_attempt(&storage, &one_of_each());
    write_attempt(&storage, &[]);
    let sealed = storage.written(1);
    storage.put_segment(1, sealed[..sealed.len() - 1].to_vec());
    let (segment, _, damage) = corrupt_at(replay(&storage));
    assert_eq!(segment, storage.segment_path(1));
    assert!(
        matches!(damage, Damage::ShorterThanSealed { .. }),
        "{damage:?}"
    );

    let gap = MemoryStorage::new();
    gap.put_segment(0, storage.written(0));
    gap.put_segment(2, storage.written(2));
    let (segment, offset, damage) = corrupt_at(replay(&gap));
    assert_eq!((segment, offset), (gap.segment_path(2), 0));
    assert!(matches!(damage, Damage::SealTable { .. }), "{damage:?}");
}

/// A frame with a valid checksum, as a newer binary would write it.
fn forged_segment(kind: u16, version: u16) -> MemoryStorage {
    let mut bytes = format::encode_header(0, &[]);
    let payload = JobEvent::SinkCommitted(SinkCommitted {
        attempt: events::AttemptId {
            job_vertex: "sink".into(),
            subtask: 0,
            attempt: 0,
        },
        file: "part-0".into(),
    })
    .encode_payload()
    .expect("encode");
    format::encode_frame(&mut bytes, kind, version, &payload);
    format::encode_frame(&mut bytes, format::kind::SINK_COMMITTED, 1, &payload);
    let storage = MemoryStorage::new();
    storage.put_segment(0, bytes);
    storage
}

#[test]
fn a_newer_schema_version_or_an_unknown_kind_is_refused_with_a_typed_error() {
    let header_len = format::header_len(0) as u64;
    match replay(&forged_segment(format::kind::SINK_COMMITTED, 2)) {
        Err(EventsError::UnsupportedVersion {
            kind: 5,
            kind_name: "SinkCommitted",
            version: 2,
            max_known: 1,
            offset,
            ..
        }) => {
            assert_eq!(offset, header_len);
        }
        other => panic!("expected UnsupportedVersion, got {other:?}"),
    }
    match replay(&forged_segment(99, 1)) {
        Err(EventsError::UnknownKind {
            kind: 99, offset, ..
        }) => assert_eq!(offset, header_len),
        other => panic!("expected UnknownKind, got {other:?}"),
    }
    let (_, offset, damage) = corrupt_at(replay(&forged_segment(format::kind::SINK_COMMITTED, 0)));
    assert_eq!(offset, header_len);
    assert!(matches!(damage, Damage::Payload { .. }), "{damage:?}");
    // A valid frame whose payload is of another kind does not decode exactly.
    let (_, _, damage) = corrupt_at(replay(&forged_segment(format::kind::RECOVERY_STARTED, 1)));
    assert!(matches!(damage, Damage::Payload { .. }), "{damage:?}");
}

#[test]
fn a_newer_segment_format_is_refused_with_a_typed_error() {
    let mut header = format::encode_header(0, &[]);
    header[format::HEADER_VERSION_OFFSET] = 2;
    let body = header.len() - format::HEADER_CRC_LEN;
    let crc = crc32c::crc32c(&header[..body]);
    header[body..].copy_from_slice(&crc.to_le_bytes());
    let storage = MemoryStorage::new();
    storage.put_segment(0, header);
    match replay(&storage) {
        Err(EventsError::UnsupportedFormat {
            found: 2,
            max_known: 1,
            ..
        }) => {}
        other => panic!("expected UnsupportedFormat, got {other:?}"),
    }
}

#[test]
fn only_durable_bytes_survive_a_crash_and_wait_durable_means_on_disk() {
    let storage = MemoryStorage::new();
    let (writer, _) = EventLogWriter::open(Arc::new(storage.clone()), manual()).expect("open");
    let events = one_of_each();
    let first = writer.append(&events[0]).expect("append");
    writer.append(&events[1]).expect("append");
    assert_eq!(
        storage.written(0).len(),
        format::header_len(0),
        "appends are buffered"
    );
    assert!(events_of(&replay(&storage.crash(0)).expect("replay")).is_empty());
    writer.wait_durable(first).expect("durable");
    assert_eq!(writer.durable_count(), 2, "one group commit covers both");
    assert_eq!(storage.sync_count(), 1);
    writer.append(&events[2]).expect("append");
    let sink = writer.append_durable(&events[7]).expect("append durable");
    assert_eq!(sink.0, 3);
    assert_eq!(storage.sync_count(), 2);
    let after_crash = replay(&storage.crash(0)).expect("replay");
    assert_eq!(
        events_of(&after_crash),
        vec![
            events[0].clone(),
            events[1].clone(),
            events[2].clone(),
            events[7].clone()
        ]
    );
    drop(writer);
}

#[test]
fn the_background_flush_makes_appends_durable_on_its_interval() {
    let storage = MemoryStorage::new();
    let options = WriterOptions {
        flush_interval: Some(std::time::Duration::from_millis(5)),
        ..WriterOptions::default()
    };
    let (writer, _) = EventLogWriter::open(Arc::new(storage.clone()), options).expect("open");
    writer.append(&one_of_each()[0]).expect("append");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while writer.durable_count() < 1 {
        assert!(
            std::time::Instant::now() < deadline,
            "background flush never ran"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert_eq!(
        events_of(&replay(&storage.crash(0)).expect("replay")).len(),
        1
    );
    writer.close().expect("close");
}

#[test]
fn a_full_buffer_flushes_without_being_asked() {
    let storage = MemoryStorage::new();
    let options = WriterOptions {
        buffer_limit: 1,
        ..manual()
    };
    let (writer, _) = EventLogWriter::open(Arc::new(storage.clone()), options).expect("open");
    writer.append(&one_of_each()[3]).expect("append");
    assert_eq!(writer.durable_count(), 1);
    assert_eq!(storage.durable(0), storage.written(0));
    writer.close().expect("close");
}

#[test]
fn fsync_policy_never_writes_without_syncing() {
    let storage = MemoryStorage::new();
    let options = WriterOptions {
        fsync: FsyncPolicy::Never,
        ..manual()
    };
    let (writer, _) = EventLogWriter::open(Arc::new(storage.clone()), options).expect("open");
    writer.append_durable(&one_of_each()[0]).expect("append");
    assert_eq!(storage.sync_count(), 0);
    assert_eq!(
        events_of(&replay(&storage).expect("replay")).len(),
        1,
        "written to the OS"
    );
    assert!(
        events_of(&replay(&storage.crash(0)).expect("replay")).is_empty(),
        "but not durable"
    );
    writer.close().expect("close");
}

#[test]
fn a_write_failure_mid_run_is_sticky_and_surfaces_on_every_later_call() {
    for point in [FaultPoint::Append, FaultPoint::Sync] {
        let storage = MemoryStorage::new();
        let (writer, _) = EventLogWriter::open(Arc::new(storage.clone()), manual()).expect("open");
        let events = one_of_each();
        let kept = writer
            .append_durable(&events[0])
            .expect("first flush works");
        storage.inject_fault(point, 0);
        let lost = writer.append(&events[1]).expect("buffered");
        let failed = |r: Result<(), EventsError>| match r {
            Err(EventsError::WriteFailed {
                segment,
                offset,
                source,
            }) => {
                assert_eq!(segment, storage.segment_path(0));
                assert!(offset > 0);
                assert!(source.to_string().contains("injected"), "{source}");
            }
            other => panic!("{point:?}: expected WriteFailed, got {other:?}"),
        };
        failed(writer.flush());
        failed(writer.wait_durable(lost));
        failed(writer.append(&events[2]).map(|_| ()));
        failed(writer.flush());
        writer
            .wait_durable(kept)
            .expect("what was durable stays durable");
        failed(writer.close());
        let after_power_loss = replay(&storage.crash(0)).expect("replay");
        assert_eq!(events_of(&after_power_loss), vec![events[0].clone()]);
        if point == FaultPoint::Append {
            // The failing write left half a record: replay cuts it.
            let after_crash = replay(&storage.crash(usize::MAX)).expect("replay");
            assert_eq!(events_of(&after_crash), vec![events[0].clone()]);
            assert!(after_crash.torn_tail.is_some());
        }
    }
}

#[test]
fn a_write_failure_in_the_background_flush_surfaces_on_the_next_append() {
    let storage = MemoryStorage::new();
    let options = WriterOptions {
        flush_interval: Some(std::time::Duration::from_millis(2)),
        ..WriterOptions::default()
    };
    let (writer, _) = EventLogWriter::open(Arc::new(storage.clone()), options).expect("open");
    storage.inject_fault(FaultPoint::Append, 0);
    writer.append(&one_of_each()[0]).expect("buffered");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match writer.append(&one_of_each()[1]) {
            Err(EventsError::WriteFailed { .. }) => break,
            Ok(_) => assert!(
                std::time::Instant::now() < deadline,
                "failure never surfaced"
            ),
            Err(other) => panic!("unexpected {other}"),
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

#[test]
fn a_failed_segment_creation_leaves_the_log_as_it_was() {
    let storage = MemoryStorage::new();
    write_attempt(&storage, &one_of_each());
    storage.inject_fault(FaultPoint::Create, 0);
    match EventLogWriter::open(Arc::new(storage.clone()), manual()) {
        Err(EventsError::Io { path, .. }) => assert_eq!(path, storage.segment_path(1)),
        other => panic!("expected Io, got {other:?}"),
    }
    assert_eq!(storage.list_segments().expect("list"), vec![0]);
    assert_eq!(events_of(&replay(&storage).expect("replay")), one_of_each());
}

#[test]
fn a_second_coordinator_on_the_same_job_log_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (writer, _) = open_job_log(dir.path(), "job-1", manual()).expect("first");
    match open_job_log(dir.path(), "job-1", manual()) {
        Err(EventsError::Locked { path }) => assert_eq!(path, dir.path().join("job-1/log/LOCK")),
        other => panic!("expected Locked, got {other:?}"),
    }
    open_job_log(dir.path(), "job-2", manual()).expect("another job is not locked");
    writer.close().expect("close");
    let (again, _) = open_job_log(dir.path(), "job-1", manual()).expect("after the first closed");
    assert_eq!(again.coordinator_attempt(), 1);
    assert!(FileStorage::open_for_writing(&dir.path().join("job-1/log")).is_err());
}

#[test]
fn job_ids_that_cannot_name_a_directory_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    for bad in ["", ".", "..", "a/b", "a\\b"] {
        assert!(
            matches!(
                open_job_log(dir.path(), bad, manual()),
                Err(EventsError::InvalidJobId { .. })
            ),
            "{bad:?} accepted"
        );
    }
}

#[test]
fn each_attempt_writes_its_own_segment_and_replay_spans_them_in_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let events = one_of_each();
    for (attempt, chunk) in events.chunks(4).enumerate() {
        let (writer, replay) = open_job_log(dir.path(), "j", manual()).expect("open");
        assert_eq!(writer.coordinator_attempt() as usize, attempt);
        assert_eq!(events_of(&replay), events[..attempt * 4]);
        for event in chunk {
            writer.append(event).expect("append");
        }
        writer.close().expect("close");
    }
    let log = dir.path().join("j/log");
    let replayed = replay(&FileStorage::open_read_only(&log)).expect("replay");
    assert_eq!(events_of(&replayed), events);
    assert_eq!(
        replayed
            .segments
            .iter()
            .map(|s| s.attempt)
            .collect::<Vec<_>>(),
        vec![0, 1, 2]
    );
    assert!(log.join("segment-00000002.log").is_file());
}

/// Issue 29: a restart replays its log once, without the lock, for its
/// checks, and reuses that replay under the lock only while every segment
/// file it read is still the same file of the same length; a new segment,
/// bytes appended, or a file replaced by one of the same length are seen.
#[test]
fn an_unlocked_replay_is_reused_only_while_its_segment_files_are_unchanged() {
    use coordhost::events::{UnlockedReplay, job_log_dir, open_job_log_after};
    let dir = tempfile::tempdir().expect("tempdir");
    let log_dir = job_log_dir(dir.path(), "wordcount").expect("log dir");
    let (writer, _) = open_job_log(dir.path(), "wordcount", manual()).expect("open");
    for event in one_of_each() {
        writer.append(&event).expect("append");
    }
    writer.close().expect("close");
    let reopen = |found| {
        let (writer, replayed) =
            open_job_log_after(dir.path(), "wordcount", manual(), None, found).expect("reopen");
        (writer, replayed)
    };
    let recovery_started = JobEvent::RecoveryStarted(RecoveryStarted {
        coordinator_epoch: 1,
        replayed_records: 0,
        torn_tail_bytes: 0,
    });

    // Unchanged: the same records, the next attempt.
    let found = UnlockedReplay::read(&log_dir).expect("a log folder");
    let before = found.replay.as_ref().expect("replays").clone();
    let (writer, replayed) = reopen(Some(found));
    assert_eq!(writer.coordinator_attempt(), 1);
    assert_eq!(replayed, before);
    writer.append(&recovery_started).expect("append");
    writer.close().expect("close");

    // A segment written after the unlocked replay: replayed again.
    let found = UnlockedReplay::read(&log_dir).expect("a log folder");
    let seen = events_of(found.replay.as_ref().expect("replays"));
    let (writer, _) = open_job_log(dir.path(), "wordcount", manual()).expect("another run");
    writer.append(&recovery_started).expect("append");
    writer.close().expect("close");
    let (writer, replayed) = reopen(Some(found));
    assert_eq!(writer.coordinator_attempt(), 3);
    assert_eq!(events_of(&replayed).len(), seen.len() + 1);
    writer.close().expect("close");

    // Bytes appended to the newest segment: the fresh replay cuts them.
    let found = UnlockedReplay::read(&log_dir).expect("a log folder");
    assert!(found.replay.as_ref().expect("replays").torn_tail.is_none());
    let newest = log_dir.join(format::segment_file_name(3));
    let mut bytes = std::fs::read(&newest).expect("read");
    bytes.extend_from_slice(&[7; 5]);
    std::fs::write(&newest, &bytes).expect("append bytes");
    let (writer, replayed) = reopen(Some(found));
    assert_eq!(replayed.torn_tail.map(|t| t.bytes_dropped), Some(5));
    writer.append(&recovery_started).expect("append");
    writer.close().expect("close");

    // The newest segment replaced by a file of the same length whose last
    // record is damaged (another inode): the fresh replay cuts that record.
    let found = UnlockedReplay::read(&log_dir).expect("a log folder");
    let seen = events_of(found.replay.as_ref().expect("replays"));
    let newest = log_dir.join(format::segment_file_name(4));
    let mut bytes = std::fs::read(&newest).expect("read");
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    let temp = log_dir.join("replacement");
    std::fs::write(&temp, &bytes).expect("write");
    std::fs::rename(&temp, &newest).expect("replace");
    let (writer, replayed) = reopen(Some(found));
    assert_eq!(events_of(&replayed).len(), seen.len() - 1);
    assert!(replayed.torn_tail.is_some());
    writer.close().expect("close");
}
