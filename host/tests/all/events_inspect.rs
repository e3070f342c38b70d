//! `log inspect`: human lines and JSON over a real log directory.

use crate::support::events::{manual, one_of_each};
use coordhost::events::{EventsError, inspect, open_job_log};

fn written_log() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let (writer, _) = open_job_log(dir.path(), "wordcount", manual()).expect("open");
    for event in one_of_each() {
        writer.append(&event).expect("append");
    }
    writer.close().expect("close");
    dir
}

#[test]
fn inspect_prints_one_line_per_segment_and_event() {
    let dir = written_log();
    let mut out = Vec::new();
    inspect(&dir.path().join("wordcount"), false, &mut out).expect("inspect");
    let text = String::from_utf8(out).expect("utf-8");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1 + 1 + one_of_each().len() + 1, "{text}");
    assert!(
        lines[1].starts_with("segment 00000000 newest: 12 records"),
        "{text}"
    );
    assert!(
        lines[2].starts_with("00000000:24       epoch 0   JobStarted"),
        "{text}"
    );
    assert!(
        text.contains(
            "ExecutionFinished    source#0 attempt 0 epoch 0 produced [source->middle at"
        ),
        "{text}"
    );
    assert!(
        text.contains("partition of source->middle not found by middle#0"),
        "{text}"
    );
    assert!(
        text.contains("SinkCommitted        sink#1 attempt 0 file part-00001.csv"),
        "{text}"
    );
    assert!(
        text.contains("JobFinished          job wordcount finished"),
        "{text}"
    );
    assert!(
        text.contains("JobFailed            job wordcount failed (exit 1): vertex `sink`"),
        "{text}"
    );
    assert_eq!(lines.last(), Some(&"12 events"));
}

#[test]
fn inspect_json_is_one_document_with_every_event() {
    let dir = written_log();
    let mut out = Vec::new();
    inspect(&dir.path().join("wordcount/log"), true, &mut out).expect("inspect");
    let doc: serde_json::Value = serde_json::from_slice(&out).expect("valid JSON");
    let events = doc["events"].as_array().expect("events");
    assert_eq!(events.len(), one_of_each().len());
    assert_eq!(events[0]["position"]["offset"], 24);
    assert_eq!(events[0]["epoch"], 0, "the coordinator run that wrote it");
    assert_eq!(events[0]["event"]["kind"], "JobStarted");
    assert_eq!(events[0]["event"]["event"]["job_id"], "wordcount");
    assert_eq!(
        events[3]["event"]["event"]["produced"][0]["bytes_per_subpartition"][0],
        1024
    );
    assert!(doc["torn_tail"].is_null());
    assert_eq!(doc["segments"][0]["records"], 12);
}

#[test]
fn inspect_reports_the_torn_tail_of_the_golden_log() {
    let golden = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/golden-log-v1");
    let mut out = Vec::new();
    inspect(&golden, false, &mut out).expect("inspect");
    let text = String::from_utf8(out).expect("utf-8");
    assert!(
        text.contains("segment 00000000 sealed: 6 records, 394 valid of 404 bytes"),
        "{text}"
    );
    assert!(
        text.contains("torn tail: 7 bytes cut at byte 220 of"),
        "{text}"
    );
}

#[test]
fn inspect_refuses_a_directory_without_a_log_and_names_corruption() {
    let empty = tempfile::tempdir().expect("tempdir");
    assert!(matches!(
        inspect(empty.path(), false, &mut Vec::new()),
        Err(EventsError::NoLog { .. })
    ));

    let dir = written_log();
    let segment = dir.path().join("wordcount/log/segment-00000000.log");
    let mut bytes = std::fs::read(&segment).expect("read");
    bytes[30] ^= 0xff;
    std::fs::write(&segment, bytes).expect("write");
    match inspect(&dir.path().join("wordcount"), true, &mut Vec::new()) {
        Err(e @ EventsError::Corrupt { .. }) => {
            let message = e.to_string();
            assert!(
                message.contains("segment-00000000.log is corrupt at byte 24"),
                "{message}"
            );
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

#[test]
fn inspect_names_the_coordinator_run_that_wrote_each_record() {
    let dir = written_log();
    // A second coordinator run (epoch 1) appends one event.
    let (writer, replay) = open_job_log(dir.path(), "wordcount", manual()).expect("reopen");
    assert_eq!(replay.events.len(), one_of_each().len());
    writer.append(&one_of_each()[0]).expect("append");
    writer.close().expect("close");
    let mut out = Vec::new();
    inspect(&dir.path().join("wordcount"), false, &mut out).expect("inspect");
    let text = String::from_utf8(out).expect("utf-8");
    let epochs: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("0000"))
        .map(|l| l.split_whitespace().nth(2).expect("epoch column"))
        .collect();
    let mut want = vec!["0"; one_of_each().len()];
    want.push("1");
    assert_eq!(epochs, want, "{text}");
    let mut json = Vec::new();
    inspect(&dir.path().join("wordcount"), true, &mut json).expect("inspect");
    let doc: serde_json::Value = serde_json::from_slice(&json).expect("JSON");
    let epochs: Vec<u64> = doc["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|e| e["epoch"].as_u64().expect("epoch"))
        .collect();
    assert_eq!(epochs.last(), Some(&1));
    assert_eq!(
        epochs.iter().filter(|&&e| e == 0).count(),
        one_of_each().len()
    );
}
