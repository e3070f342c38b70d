//! The word-count example end to end: real plugins (file-enumerator,
//! local-shuffle), real files, output checked against the test's own count.

use crate::support::expected_word_counts;
use crate::support::job::{example_job, options, run_ok, word_count_output};

#[test]
fn word_count_example_counts_every_word_of_the_folder() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("words");
    let (_, words) = coordhost_datagen::write_words(&data, 5, 1500, 7).expect("data");
    let job = example_job("wordcount.toml", "build/data/words", &data, tmp.path());
    let data_dir = tmp.path().join("state");
    let summary = run_ok(&options(&job, &data_dir, 2));

    let expected = expected_word_counts(&data);
    assert_eq!(expected.values().sum::<u64>(), words);
    let got = word_count_output(&data_dir.join("output/wordcount"));
    assert_eq!(got, expected);

    // Four sources, an `auto` sink decided from the shuffled bytes.
    assert_eq!(summary.vertices[0].parallelism, 4);
    assert!(summary.vertices[1].parallelism >= 1 && summary.vertices[1].parallelism <= 16);
    assert_eq!(
        summary.tasks_total,
        u64::from(4 + summary.vertices[1].parallelism)
    );
    assert_eq!(summary.tasks_run, summary.tasks_total);
    assert_eq!(
        (
            summary.tasks_reset,
            summary.tasks_skipped,
            summary.recovered
        ),
        (0, 0, false)
    );
    assert_eq!(summary.vertices[1].records_out, expected.len() as u64);
    let json = serde_json::to_value(&summary).expect("json");
    for key in [
        "status",
        "recovered",
        "tasks_total",
        "tasks_run",
        "tasks_skipped",
        "tasks_reset",
        "wall_ms",
    ] {
        assert!(json.get(key).is_some(), "summary JSON lacks {key}: {json}");
    }
    assert_eq!(json["status"], "finished");
}

#[test]
fn the_auto_sink_splits_into_several_subtasks_when_bytes_say_so() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("words");
    coordhost_datagen::write_words(&data, 3, 2000, 11).expect("data");
    let job = example_job("wordcount.toml", "build/data/words", &data, tmp.path());
    // 4 KiB per task: far more bytes than that, so the sink runs at its max of 16.
    let text = std::fs::read_to_string(&job)
        .expect("job")
        .replace("bytes-per-task = 262144", "bytes-per-task = 4096");
    std::fs::write(&job, text).expect("job");
    let data_dir = tmp.path().join("state");
    let summary = run_ok(&options(&job, &data_dir, 2));
    assert_eq!(summary.vertices[1].parallelism, 16);
    let got = word_count_output(&data_dir.join("output/wordcount"));
    assert_eq!(got, expected_word_counts(&data));
}

#[test]
fn a_source_vertex_with_max_task_bytes_reads_every_word_once_and_sized_subtasks_finish_empty() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("words");
    coordhost_datagen::write_words(&data, 3, 2000, 5).expect("data");
    let input: u64 = std::fs::read_dir(&data)
        .expect("words")
        .map(|e| {
            std::fs::metadata(e.expect("entry").path())
                .expect("size")
                .len()
        })
        .sum();
    let job = example_job("wordcount.toml", "build/data/words", &data, tmp.path());
    // 4 kB splits, 16 kB per subtask, 64 subtasks: more than the input needs.
    let text = std::fs::read_to_string(&job)
        .expect("job")
        .replace("split-bytes = 1048576", "split-bytes = 4096")
        .replace(
            "source = \"files\"\nparallelism = 4",
            "source = \"files\"\nparallelism = 64\nmax-task-bytes = 16384",
        );
    assert!(text.contains("max-task-bytes = 16384"), "{text}");
    std::fs::write(&job, text).expect("job");
    let data_dir = tmp.path().join("state");
    let summary = run_ok(&options(&job, &data_dir, 2));
    assert_eq!(
        word_count_output(&data_dir.join("output/wordcount")),
        expected_word_counts(&data),
        "every word counted once"
    );
    let source = &summary.vertices[0];
    assert_eq!(source.parallelism, 64);
    let read = source.input.expect("a source's input").bytes_assigned;
    assert_eq!(read, input, "every split handed out once");
    // Each subtask but the last open one stops at 16 kB + one split, so at
    // least input / 20 kB subtasks took splits (they wrote bytes); the
    // others found none left and finished empty.
    let log = coordhost::events::replay(&coordhost::events::FileStorage::open_read_only(
        &data_dir.join("wordcount/log"),
    ))
    .expect("the log");
    let mut finished = 0u64;
    let mut wrote = 0u64;
    for e in log.iter_events() {
        if let coordhost::events::JobEvent::ExecutionFinished(f) = e
            && f.attempt.job_vertex == source.id
        {
            finished += 1;
            let bytes: u64 = f
                .produced
                .iter()
                .flat_map(|p| &p.bytes_per_subpartition)
                .sum();
            wrote += u64::from(bytes > 0);
        }
    }
    assert_eq!(finished, 64, "every subtask finished");
    let needed = input.div_ceil(16_384 + 4096);
    assert!(
        wrote >= needed && wrote < 64,
        "{wrote} subtasks read splits ({input} bytes: at least {needed}), the others none"
    );
}
