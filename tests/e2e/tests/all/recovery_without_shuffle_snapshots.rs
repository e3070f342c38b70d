//! A job whose shuffle master cannot take batch snapshots (`memory-shuffle`)
//! gets no progress recovery (FLIP-383): the run says so once at start, and
//! after a crash the job runs again from scratch, with the right output.

use crate::support::expected_word_counts;
use crate::support::job::{example_job, options, word_count_output};
use crate::support::knobs::{self, CrashPoint, Knobs};
use coordhost::job::{JobStatus, run_job};

fn input(dir: &std::path::Path) {
    std::fs::create_dir_all(dir).unwrap();
    for f in 0..4 {
        let text: String = (0..100)
            .map(|i| format!("a{} b{}\n", (i + f) % 11, i % 3))
            .collect();
        std::fs::write(dir.join(format!("t{f}.txt")), text).unwrap();
    }
}

#[test]
fn without_shuffle_snapshots_the_run_warns_once_and_a_crash_restarts_from_scratch() {
    let tmp = tempfile::tempdir().unwrap();
    let words = tmp.path().join("words");
    input(&words);
    let job = example_job("wordcount.toml", "build/data/words", &words, tmp.path());
    let text = std::fs::read_to_string(&job)
        .unwrap()
        .replace("local-shuffle.wasm", "memory-shuffle.wasm");
    std::fs::write(&job, text).unwrap();

    let data = tmp.path().join("data");
    let out = crate::support::coordhost()
        .args([
            "run",
            job.to_str().unwrap(),
            "--data-dir",
            data.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(
        stderr.matches("cannot take batch snapshots").count(),
        1,
        "said once, naming the plugin: {stderr}"
    );
    assert!(stderr.contains("`shuffle`"), "{stderr}");

    let crashed = tmp.path().join("crashed");
    let opts = options(&job, &crashed, 2);
    let crash = Knobs::crash(CrashPoint::AfterFinished {
        vertex: "tokenize".into(),
        count: 4,
    });
    let first = knobs::run(&opts, &crash).unwrap();
    assert!(
        first
            .error
            .as_deref()
            .is_some_and(|e| e.contains("simulated")),
        "{:?}",
        first.error
    );
    let second = run_job(&opts).unwrap();
    assert_eq!(second.status, JobStatus::Finished, "{:?}", second.error);
    assert!(
        !second.recovered,
        "no progress recovery without shuffle snapshots"
    );
    assert_eq!(second.tasks_skipped, 0);
    assert_eq!(second.tasks_run, second.tasks_total, "everything ran again");
    assert_eq!(
        word_count_output(&crashed.join("output/wordcount")),
        expected_word_counts(&words)
    );
}
