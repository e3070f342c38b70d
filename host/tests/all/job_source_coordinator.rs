//! The host-side source coordinator with real enumerator plugins: pull
//! requests, the per-subtask assignment history, "no more splits", splits
//! handed back on reset, and a batch snapshot that carries the history.

use std::collections::BTreeSet;

use crate::support::{grant, host, spec};
use coordhost::coordinator::{SourceCoordinator, SplitAnswer};
use coordhost::plugin::PluginKind;

/// Pulls every split `subtask` gets until "no more splits"; returns the ids.
fn drain(c: &mut SourceCoordinator, subtask: u32) -> Vec<String> {
    let mut ids = Vec::new();
    loop {
        match c.request_split(subtask).expect("request") {
            Some(SplitAnswer::Split(s)) => ids.push(s.id),
            Some(SplitAnswer::NoMoreSplits) => return ids,
            None => panic!("subtask {subtask} was left waiting"),
        }
    }
}

fn static_enumerator(splits: usize) -> coordhost::plugin::LoadedPlugin {
    let keys: Vec<(String, String)> = (0..splits)
        .map(|i| (format!("split.{i}"), format!("line {i}")))
        .collect();
    let config: Vec<(&str, &str)> = keys.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    host()
        .load(&spec(
            "static-enumerator",
            PluginKind::SplitEnumerator,
            &config,
        ))
        .expect("load")
}

#[test]
fn every_split_goes_to_exactly_one_reader_and_a_reset_hands_its_splits_back() {
    let plugin = static_enumerator(10);
    let mut c = SourceCoordinator::start("source", &plugin, 5, None).expect("start");
    for s in 0..5 {
        c.register_reader(s).expect("reader");
    }
    // Subtask 0 pulls 3, then each reader drains what is left.
    let mut first = Vec::new();
    for _ in 0..3 {
        match c.request_split(0).expect("request") {
            Some(SplitAnswer::Split(s)) => first.push(s.id),
            other => panic!("expected a split, got {other:?}"),
        }
    }
    let mut all: Vec<String> = first.clone();
    for s in 1..5 {
        all.extend(drain(&mut c, s));
    }
    all.extend(drain(&mut c, 0));
    let unique: BTreeSet<&String> = all.iter().collect();
    assert_eq!((all.len(), unique.len()), (10, 10), "{all:?}");
    assert_eq!(c.unassigned_splits().expect("unassigned"), 0);
    assert!(c.readers().iter().all(|r| r.no_more_splits));

    // Reset subtask 0: exactly its history goes back, its flag is cleared.
    let history: Vec<String> = c.readers()[0]
        .assigned
        .iter()
        .map(|s| s.id.clone())
        .collect();
    assert!(history.len() >= 3);
    let back = c.reset_subtask(0).expect("reset");
    assert_eq!(back, history.len());
    assert_eq!(c.unassigned_splits().expect("unassigned"), back as u64);
    assert!(!c.readers()[0].no_more_splits && c.readers()[0].assigned.is_empty());
    c.register_reader(0).expect("reader again");
    let mut again = drain(&mut c, 0);
    again.sort();
    let mut expected = history;
    expected.sort();
    assert_eq!(
        again, expected,
        "the reset subtask reads its own splits again"
    );
    assert_eq!(c.unassigned_splits().expect("unassigned"), 0);
}

#[test]
fn a_batch_snapshot_carries_the_history_into_a_restored_coordinator() {
    let dir = tempfile::tempdir().expect("tempdir");
    for i in 0..3 {
        std::fs::write(
            dir.path().join(format!("f{i}.txt")),
            "a\nb\nc\n".repeat(100),
        )
        .expect("file");
    }
    let dir_str = dir.path().display().to_string();
    let mut s = spec(
        "file-enumerator",
        PluginKind::SplitEnumerator,
        &[("dir", dir_str.as_str()), ("split-bytes", "200")],
    );
    s.dirs.push(grant(dir.path(), false));
    let plugin = host().load(&s).expect("load");
    assert!(plugin.supports_batch_snapshot());
    let mut c = SourceCoordinator::start("source", &plugin, 2, None).expect("start");
    c.register_reader(0).expect("reader");
    c.register_reader(1).expect("reader");
    let total = c.unassigned_splits().expect("unassigned");
    assert_eq!(total, 9, "3 files of 600 bytes in 200-byte splits");
    for _ in 0..2 {
        assert!(matches!(
            c.request_split(0).expect("req"),
            Some(SplitAnswer::Split(_))
        ));
    }
    assert!(matches!(
        c.request_split(1).expect("req"),
        Some(SplitAnswer::Split(_))
    ));
    let snap = c.snapshot().expect("snapshot").expect("consistent");
    assert_eq!(snap.readers[0].assigned.len(), 2);
    assert_eq!(snap.readers[1].assigned.len(), 1);

    let mut restored =
        SourceCoordinator::restore("source", &plugin, 2, snap, None).expect("restore");
    assert_eq!(restored.unassigned_splits().expect("unassigned"), total - 3);
    // FLIP-383 step 5: reset the unfinished subtask 1; its split returns.
    assert_eq!(restored.reset_subtask(1).expect("reset"), 1);
    assert_eq!(restored.unassigned_splits().expect("unassigned"), total - 2);
    restored.register_reader(0).expect("reader");
    restored.register_reader(1).expect("reader");
    // Resetting subtask 0 as well returns its 2 splits: a full re-read
    // then sees every split exactly once.
    assert_eq!(restored.reset_subtask(0).expect("reset 0"), 2);
    let mut seen = Vec::new();
    seen.extend(drain(&mut restored, 0));
    seen.extend(drain(&mut restored, 1));
    let unique: BTreeSet<&String> = seen.iter().collect();
    assert_eq!((seen.len(), unique.len()), (9, 9), "{seen:?}");
}

/// A file enumerator over 3 files of 600 bytes in 200-byte splits (9).
fn file_enumerator(dir: &std::path::Path) -> coordhost::plugin::LoadedPlugin {
    for i in 0..3 {
        std::fs::write(dir.join(format!("f{i}.txt")), "a\nb\nc\n".repeat(100)).expect("file");
    }
    let dir_str = dir.display().to_string();
    let mut s = spec(
        "file-enumerator",
        PluginKind::SplitEnumerator,
        &[("dir", dir_str.as_str()), ("split-bytes", "200")],
    );
    s.dirs.push(grant(dir, false));
    host().load(&s).expect("load")
}

#[test]
fn max_task_bytes_ends_readers_at_the_cap_but_the_last_open_one_drains_the_enumerator() {
    let dir = tempfile::tempdir().expect("tempdir");
    let plugin = file_enumerator(dir.path());
    // 300 bytes: a reader stops after its second 200-byte split.
    let mut c = SourceCoordinator::start("source", &plugin, 3, Some(300)).expect("start");
    for s in 0..3 {
        c.register_reader(s).expect("reader");
    }
    assert_eq!(drain(&mut c, 0).len(), 2, "capped after 400 bytes");
    assert_eq!(drain(&mut c, 1).len(), 2, "capped after 400 bytes");
    // Subtask 2 is the last one not yet ended: never capped.
    assert_eq!(
        drain(&mut c, 2).len(),
        5,
        "the last open reader takes the rest"
    );
    assert_eq!(c.unassigned_splits().expect("unassigned"), 0);
    c.check_none_left().expect("nothing left");

    // Two resets give 4 splits back; the first reader to come back stops
    // at its cap while the other is open, the other drains.
    assert_eq!(c.reset_subtask(0).expect("reset"), 2);
    assert_eq!(c.reset_subtask(1).expect("reset"), 2);
    c.register_reader(0).expect("reader");
    c.register_reader(1).expect("reader");
    assert_eq!(drain(&mut c, 0).len(), 2);
    assert_eq!(drain(&mut c, 1).len(), 2);
    assert_eq!(c.unassigned_splits().expect("unassigned"), 0);

    // A cap of 1 byte (one split each), then 0 and 2 reset after 1 ended:
    // 8 splits back, 0 stops at its cap while 2 is open, and 2 — the last
    // open reader — reads all the others (none may stay unread).
    let mut d = SourceCoordinator::start("source", &plugin, 3, Some(1)).expect("start");
    for s in 0..3 {
        d.register_reader(s).expect("reader");
    }
    assert_eq!(drain(&mut d, 0).len(), 1);
    assert_eq!(drain(&mut d, 1).len(), 1);
    assert_eq!(drain(&mut d, 2).len(), 7);
    assert_eq!(d.reset_subtask(0).expect("reset"), 1);
    assert_eq!(d.reset_subtask(2).expect("reset"), 7);
    d.register_reader(0).expect("reader");
    d.register_reader(2).expect("reader");
    // Subtask 0 is capped at 1 split (2 is still open) ...
    assert_eq!(drain(&mut d, 0).len(), 1);
    // ... and 2, the last open one, reads the 7 others.
    assert_eq!(drain(&mut d, 2).len(), 7);
    assert_eq!(d.unassigned_splits().expect("unassigned"), 0);
    d.check_none_left().expect("nothing left");
}

#[test]
fn a_kept_subtask_does_not_count_as_one_that_could_still_drain() {
    let dir = tempfile::tempdir().expect("tempdir");
    let plugin = file_enumerator(dir.path());
    let mut c = SourceCoordinator::start("source", &plugin, 2, Some(300)).expect("start");
    c.register_reader(0).expect("reader");
    c.register_reader(1).expect("reader");
    // Subtask 0 reads 2 splits and finishes; its snapshot is taken before
    // it was told "no more splits" (as after a crash between the two).
    for _ in 0..2 {
        assert!(matches!(
            c.request_split(0).expect("req"),
            Some(SplitAnswer::Split(_))
        ));
    }
    let snap = c.snapshot().expect("snapshot").expect("consistent");
    let mut r = SourceCoordinator::restore("source", &plugin, 2, snap, Some(300)).expect("restore");
    // Recovery keeps subtask 0 and resets 1: 1 is then the only one that
    // will ask again, so it drains the 7 splits left.
    r.mark_finished(0);
    r.reset_subtask(1).expect("reset");
    r.register_reader(1).expect("reader");
    assert_eq!(drain(&mut r, 1).len(), 7);
    assert_eq!(r.unassigned_splits().expect("unassigned"), 0);
}
