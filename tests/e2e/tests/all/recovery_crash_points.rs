//! Crashes at every named point of the recording and recovery code
//! (`coordhost::failpoints::CRASH_POINTS`, fail points `crash::<point>`
//! set on the real binary), on the word-count example with real plugins:
//! the run stops as a dead coordinator would, a new run on
//! the same data directory recovers, and the output equals the word counts
//! the test computes itself. A crash inside a recovery is followed by a
//! second recovery, which must still end right.

use std::path::Path;

use crate::support::expected_word_counts;
use crate::support::job::{example_job, options, word_count_output};
use crate::support::knobs::{self, CrashPoint, InjectedFault, Knobs};
use coordhost::events::{JobEvent, open_job_log};
use coordhost::failpoints::CRASH_POINTS;
use coordhost::job::{JobStatus, RunOptions, run_job};

/// Six small text files.
fn input(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    for f in 0..6 {
        let text: String = (0..200)
            .map(|i| format!("w{} x{} common\n", (i * 7 + f) % 37, i % 5))
            .collect();
        std::fs::write(dir.join(format!("part-{f}.txt")), text).unwrap();
    }
}

fn crash_at(point: &str) -> Option<CrashPoint> {
    Some(CrashPoint::Named {
        point: point.to_string(),
        occurrence: 1,
    })
}

/// Runs the binary until the crash point; returns whether it crashed there.
fn run_crashing(opts: &RunOptions, knobs: &Knobs) -> bool {
    knobs::run_to_crash(opts, knobs).crashed()
}

fn recovery_finished_count(data: &Path) -> usize {
    let (writer, replay) =
        open_job_log(data, "wordcount", Default::default()).expect("log replays");
    writer.close().expect("close");
    replay
        .events
        .iter()
        .filter(|e| matches!(e.event, JobEvent::RecoveryFinished(_)))
        .count()
}

#[test]
fn a_crash_at_every_named_point_is_recovered_with_the_same_output() {
    let tmp = tempfile::tempdir().unwrap();
    let words = tmp.path().join("words");
    input(&words);
    let expected = expected_word_counts(&words);
    let job = example_job("wordcount.toml", "build/data/words", &words, tmp.path());
    // The final count subtask 0 (it gets every word: the input is small)
    // fails once, so the run passes through a failover reset.
    let fault = InjectedFault {
        vertex: "count".into(),
        subtask: 0,
        attempt: 0,
        after_records: 10,
    };

    for point in CRASH_POINTS {
        let data = tmp.path().join(format!("data-{point}"));
        let opts = options(&job, &data, 2);
        let mut knobs = Knobs {
            faults: vec![fault.clone()],
            ..Knobs::default()
        };
        if point.starts_with("recovery-") {
            // Reach a recovery first: crash once all tokenize subtasks are recorded.
            knobs.crash_at = Some(CrashPoint::AfterFinished {
                vertex: "tokenize".into(),
                count: 4,
            });
            assert!(
                run_crashing(&opts, &knobs),
                "{point}: the first run did not reach its crash"
            );
            knobs.faults.clear();
        }
        knobs.crash_at = crash_at(point);
        assert!(
            run_crashing(&opts, &knobs),
            "{point}: the run never passed this point"
        );

        let summary =
            run_job(&opts).unwrap_or_else(|e| panic!("{point}: the restart did not start: {e}"));
        assert_eq!(
            summary.status,
            JobStatus::Finished,
            "{point}: {:?}",
            summary.error
        );
        assert_eq!(
            word_count_output(&data.join("output/wordcount")),
            expected,
            "{point}: output differs"
        );
        if point.starts_with("recovery-") {
            assert!(
                summary.recovered,
                "{point}: the run after a crash in recovery recovers again"
            );
            assert!(
                summary.tasks_skipped >= 4,
                "{point}: the recorded tokenize subtasks are skipped"
            );
        }
        if *point == "recovery-finished" {
            assert_eq!(
                recovery_finished_count(&data),
                2,
                "{point}: both recoveries recorded their decision"
            );
        }
    }
}
