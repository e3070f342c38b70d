//! Recovery scenarios 9 and 10 of docs/recovery.md ("unit level": a torn tail,
//! corruption in the middle of the job event log), a second crash right
//! after recovery, and an edited job file on the same data directory. Real
//! plugins, real files; the log is damaged on disk between runs.

use std::collections::BTreeSet;
use std::path::Path;

use crate::support::knobs::CrashPoint;
use crate::support::recovery::{
    Enumerator, Log, T1, WORKERS, after_finished, assert_same_output_as_uninterrupted,
    finished_attempts, finished_of, frames, log_dir, out_dir, recoveries, recovery, reset_of,
    segments, skipped_of, tree,
};
use crate::support::{cache_dir, part_files};
use coordhost::events::{JobEvent, ResetReason};
use coordhost::job::{JobError, run_job};

/// Flips one byte inside the payload of record `index` of `segment`;
/// returns the offset of that record's frame.
fn flip_byte_in_record(segment: &Path, index: usize) -> u64 {
    let all = frames(segment);
    assert!(
        index + 1 < all.len(),
        "record {index} is not the last of {}: {all:?}",
        segment.display()
    );
    let (offset, len) = all[index];
    assert!(len > 12, "the record has a payload");
    let at = (offset + 8 + 1) as usize;
    let mut bytes = std::fs::read(segment).expect("segment");
    bytes[at] ^= 0x5a;
    std::fs::write(segment, bytes).expect("write segment");
    offset
}

/// Scenario 9.
#[test]
fn a_torn_tail_is_cut_and_the_subtask_whose_finish_was_torn_runs_again() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let t1 = T1::new(tmp.path(), Enumerator::Files);
    t1.write();
    let data = tmp.path().join("data");

    t1.crash(&data, after_finished("source", 5), Vec::new());
    let before = Log::read(&data).all();
    let Some(JobEvent::ExecutionFinished(last)) = before.last() else {
        panic!("the log ends with the 5th source's finish: {before:#?}");
    };
    assert_eq!(last.attempt.job_vertex, "source");
    let torn = last.attempt.subtask;
    let segs = segments(&data);
    assert_eq!(segs.len(), 1);
    let (offset, len) = *frames(&segs[0]).last().expect("records");
    let keep = offset + len / 2;
    std::fs::OpenOptions::new()
        .write(true)
        .open(&segs[0])
        .expect("segment")
        .set_len(keep)
        .expect("cut the last record in half");
    let cut = Log::read(&data);
    assert_eq!(cut.torn_tail_bytes, len / 2, "replay sees the torn tail");
    assert_eq!(
        cut.events.len(),
        before.len() - 1,
        "every whole record kept"
    );

    let second = t1.run(&data, Vec::new());
    assert!(second.recovered, "{second:#?}");
    let log = Log::read(&data);
    let started: Vec<u64> = log
        .all()
        .iter()
        .filter_map(|e| match e {
            JobEvent::RecoveryStarted(s) => Some(s.torn_tail_bytes),
            _ => None,
        })
        .collect();
    assert_eq!(started, vec![len / 2], "the cut is recorded");
    let r = recovery(&log.all());
    assert!(
        reset_of(&r, "source").contains_key(&torn),
        "source {torn}, whose finish was torn, runs again: {r:#?}"
    );
    assert_eq!(skipped_of(&r, "source").len(), 4, "{r:#?}");
    // Its finish is not in the log any more: it runs with any attempt
    // number above the recorded ones (none).
    assert_eq!(
        finished_of(&log.of_segment(1), "source")
            .iter()
            .map(|f| f.attempt.subtask)
            .collect::<Vec<_>>(),
        vec![torn],
        "only the source whose finish was torn ran again"
    );
    assert_eq!(second.tasks_skipped, 4, "{second:#?}");
    assert_same_output_as_uninterrupted(&data, Enumerator::Files);
}

/// Scenario 10, no committed output yet: a real `coordhost run` process,
/// so that its message can be read.
#[test]
fn corruption_in_an_older_segment_is_named_loudly_and_the_job_runs_again_from_scratch() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let t1 = T1::new(tmp.path(), Enumerator::Files);
    t1.write();
    let data = tmp.path().join("data");

    // Two crashes, two segments; no sink finished.
    t1.crash(&data, after_finished("source", 2), Vec::new());
    t1.crash(&data, after_finished("source", 1), Vec::new());
    let segs = segments(&data);
    assert_eq!(segs.len(), 2, "{segs:?}");
    assert!(
        part_files(&out_dir(&data)).is_empty(),
        "no committed output"
    );
    let offset = flip_byte_in_record(&segs[0], 1);

    let summary_file = tmp.path().join("summary.json");
    let output = crate::support::coordhost()
        .arg("--cache-dir")
        .arg(cache_dir())
        .arg("run")
        .arg(t1.job_file())
        .arg("--data-dir")
        .arg(&data)
        .arg("--workers")
        .arg(WORKERS.to_string())
        .arg("--summary-json")
        .arg(&summary_file)
        .output()
        .expect("coordhost runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "exit {:?}\n{stderr}",
        output.status
    );
    let named = format!("{} is corrupt at byte {offset}", segs[0].display());
    assert!(
        stderr.contains(&named),
        "stderr names the segment and the offset ({named}):\n{stderr}"
    );
    assert!(
        stderr.contains("from scratch"),
        "stderr says the job runs again from scratch:\n{stderr}"
    );
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&summary_file).expect("summary")).expect("json");
    assert_eq!(summary["status"], "finished", "{summary:#}");
    assert_eq!(summary["recovered"], false, "{summary:#}");
    assert_eq!(summary["tasks_skipped"], 0, "{summary:#}");
    assert_eq!(summary["tasks_run"], summary["tasks_total"], "{summary:#}");
    // The damaged log is kept aside, not deleted.
    let aside: Vec<String> = std::fs::read_dir(data.join("t1"))
        .expect("job dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("log.damaged"))
        .collect();
    assert_eq!(aside.len(), 1, "{aside:?}");
    assert_same_output_as_uninterrupted(&data, Enumerator::Files);
}

/// Scenario 10, committed output exists.
#[test]
fn corruption_in_an_older_segment_with_committed_output_stops_and_touches_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let t1 = T1::new(tmp.path(), Enumerator::Files);
    t1.write();
    let data = tmp.path().join("data");

    t1.crash(&data, after_finished("source", 5), Vec::new());
    t1.crash(&data, after_finished("sink", 1), Vec::new());
    let segs = segments(&data);
    assert_eq!(segs.len(), 2, "{segs:?}");
    assert_eq!(
        part_files(&out_dir(&data)).len(),
        1,
        "sink output committed"
    );
    flip_byte_in_record(&segs[0], 1);
    let output_before = tree(&out_dir(&data));
    let log_before = tree(&log_dir(&data));

    let result = run_job(&t1.options(&data));
    match result {
        Err(JobError::WouldDuplicate { output, reason }) => {
            assert_eq!(output, out_dir(&data));
            assert!(reason.contains("corrupt"), "{reason}");
        }
        other => panic!("expected JobError::WouldDuplicate, got {other:?}"),
    }
    assert_eq!(
        tree(&out_dir(&data)),
        output_before,
        "the output is untouched"
    );
    assert!(!out_dir(&data).join("_SUCCESS").exists());
    assert_eq!(
        tree(&log_dir(&data))
            .into_iter()
            .filter(|(p, _)| p.file_name().is_some_and(|n| n != "LOCK"))
            .collect::<Vec<_>>(),
        log_before
            .into_iter()
            .filter(|(p, _)| p.file_name().is_some_and(|n| n != "LOCK"))
            .collect::<Vec<_>>(),
        "the log is kept as it was"
    );
}

/// A second crash right after recovery replays to the same decisions.
#[test]
fn a_second_crash_right_after_recovery_replays_to_the_same_decisions() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let t1 = T1::new(tmp.path(), Enumerator::Files);
    t1.write();
    let data = tmp.path().join("data");

    t1.crash(&data, after_finished("source", 5), Vec::new());
    if let Some(crashed) = t1.crash(&data, CrashPoint::AfterRecovery, Vec::new()) {
        assert_eq!(
            crashed.tasks_run, 0,
            "nothing ran after recovery: {crashed:#?}"
        );
    }
    let second = Log::read(&data).of_segment(1);
    assert!(
        matches!(second.last(), Some(JobEvent::RecoveryFinished(_))),
        "the second coordinator attempt stopped right after RecoveryFinished: {second:#?}"
    );
    let third = t1.run(&data, Vec::new());
    assert!(third.recovered);
    assert_eq!(third.tasks_skipped, 5, "{third:#?}");

    let log = Log::read(&data);
    let all = log.all();
    let decisions = recoveries(&all);
    assert_eq!(decisions.len(), 2, "{decisions:#?}");
    let as_sets = |r: &coordhost::events::RecoveryFinished| {
        (
            r.skipped.iter().cloned().collect::<BTreeSet<_>>(),
            r.reset
                .iter()
                .map(|x| (x.execution.clone(), format!("{:?}", x.reason)))
                .collect::<BTreeSet<_>>(),
        )
    };
    assert_eq!(as_sets(decisions[0]), as_sets(decisions[1]));
    assert_eq!(
        skipped_of(decisions[1], "source"),
        finished_attempts(&log.of_segment(0), "source")
            .into_values()
            .collect()
    );
    assert!(
        reset_of(decisions[1], "source")
            .values()
            .all(|r| !matches!(r, ResetReason::RecoveryPartitionMissing { .. })),
        "{decisions:#?}"
    );
    assert_same_output_as_uninterrupted(&data, Enumerator::Files);
}

/// An edited job file on the same data directory is refused.
#[test]
fn an_edited_job_file_on_the_same_data_directory_is_refused() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut t1 = T1::new(tmp.path(), Enumerator::Files);
    t1.write();
    let data = tmp.path().join("data");

    t1.crash(&data, after_finished("source", 5), Vec::new());
    let log_before = tree(&log_dir(&data));
    t1.lowercase = true;
    t1.write();

    match run_job(&t1.options(&data)) {
        Err(JobError::JobFileChanged { data_dir }) => {
            assert_eq!(
                std::path::absolute(&data_dir).expect("absolute"),
                std::path::absolute(&data).expect("absolute")
            );
        }
        other => panic!("expected JobError::JobFileChanged, got {other:?}"),
    }
    assert_eq!(
        tree(&log_dir(&data)),
        log_before,
        "the log of the original job is kept exactly as it was (no segment sealed or added)"
    );
    assert!(!out_dir(&data).join("_SUCCESS").exists());
}
