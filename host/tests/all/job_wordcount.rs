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
