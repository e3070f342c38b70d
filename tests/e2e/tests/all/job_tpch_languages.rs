//! The TPC-H Q1-style example with its split enumerator written in Rust,
//! Python and JavaScript gives the same result, and recovery after a
//! coordinator crash works with each of them (issue "plugins in any Wasm
//! language", item 3).

use crate::support::job::{example_job, options, run_ok};
use crate::support::knobs::{self, CrashPoint, Knobs};
use crate::support::published_lines;
use coordhost::job::{JobStatus, run_job};

const ENUMERATORS: [&str; 3] = ["file-enumerator", "py-enumerator", "js-enumerator"];

fn sorted(mut lines: Vec<String>) -> Vec<String> {
    lines.sort();
    lines
}

#[test]
fn tpch_q1_gives_the_same_result_with_the_rust_python_and_javascript_enumerators_and_recovers_with_each()
 {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("lineitem");
    coordhost_datagen::write_lineitem(&data, 0.01, 3).expect("data");
    let example = example_job("tpch-q1.toml", "build/data/tpch-sf0.1", &data, tmp.path());
    let text = std::fs::read_to_string(&example)
        .expect("job")
        .replace("split-bytes = 4194304", "split-bytes = 500000")
        .replace("record-delay-us = 250000", "record-delay-us = 0");

    let mut results = Vec::new();
    for name in ENUMERATORS {
        let job = tmp.path().join(format!("tpch-{name}.toml"));
        std::fs::write(
            &job,
            text.replace("file-enumerator.wasm", &format!("{name}.wasm")),
        )
        .expect("job");

        let plain = tmp.path().join(format!("state-{name}"));
        let summary = run_ok(&options(&job, &plain, 2));
        assert!(!summary.recovered);
        let lines = sorted(published_lines(&plain.join("output/tpch-q1")));
        results.push((name, lines.clone()));

        // Crash once the scan has finished, then recover.
        let crashed = tmp.path().join(format!("crash-{name}"));
        let opts = options(&job, &crashed, 2);
        let crash = Knobs::crash(CrashPoint::AfterFinished {
            vertex: "scan".into(),
            count: 4,
        });
        let first = knobs::run(&opts, &crash).expect("the first run starts");
        assert!(
            first
                .error
                .as_deref()
                .is_some_and(|e| e.contains("simulated")),
            "{name}: {:?}",
            first.error
        );
        let second = run_job(&opts).expect("the restart starts");
        assert_eq!(
            second.status,
            JobStatus::Finished,
            "{name}: {:?}",
            second.error
        );
        assert!(second.recovered, "{name}: the restart recovers");
        assert_eq!(
            second.tasks_skipped, 4,
            "{name}: the four scan subtasks are skipped"
        );
        let scan = second
            .vertices
            .iter()
            .find(|v| v.id == "scan")
            .expect("scan vertex");
        assert_eq!(
            scan.skipped, 4,
            "{name}: the summary says per vertex what was skipped"
        );
        assert_eq!(
            sorted(published_lines(&crashed.join("output/tpch-q1"))),
            lines,
            "{name}: same result after recovery"
        );
    }
    let (_, rust) = &results[0];
    assert_eq!(rust.len(), 5, "a header and four groups");
    for (name, lines) in &results[1..] {
        assert_eq!(lines, rust, "{name} gives the Rust enumerator's result");
    }
}
