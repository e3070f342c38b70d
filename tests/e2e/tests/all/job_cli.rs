//! `coordhost run` as a real process: exit codes, the one-line error for a
//! bad job file, the printed summary and the JSON summary.

use crate::support::job::{example_job, word_count_output};
use crate::support::{coordhost, expected_word_counts};

#[test]
fn run_finishes_with_exit_0_and_writes_the_json_summary() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("words");
    coordhost_datagen::write_words(&data, 2, 500, 5).expect("data");
    let job = example_job("wordcount.toml", "build/data/words", &data, tmp.path());
    let state = tmp.path().join("state");
    let summary_file = tmp.path().join("summary.json");
    let out = coordhost()
        .arg("run")
        .arg(&job)
        .arg("--data-dir")
        .arg(&state)
        .arg("--summary-json")
        .arg(&summary_file)
        .arg("--workers")
        .arg("2")
        .output()
        .expect("coordhost runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("job wordcount: Finished"), "{stdout}");
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&summary_file).expect("summary file")).expect("JSON");
    assert_eq!(json["status"], "finished");
    assert_eq!(json["recovered"], false);
    assert_eq!(json["tasks_run"], json["tasks_total"]);
    assert!(json["wall_ms"].as_u64().is_some());
    assert_eq!(
        word_count_output(&state.join("output/wordcount")),
        expected_word_counts(&data)
    );
}

#[test]
fn a_bad_job_file_exits_2_with_one_line_naming_file_and_field() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("words");
    std::fs::create_dir_all(&data).expect("dir");
    let job = example_job("wordcount.toml", "build/data/words", &data, tmp.path());
    let text = std::fs::read_to_string(&job)
        .expect("job")
        .replace("parallelism = 4", "parallelism = 0");
    std::fs::write(&job, text).expect("job");
    let out = coordhost()
        .arg("run")
        .arg(&job)
        .arg("--data-dir")
        .arg(tmp.path().join("state"))
        .output()
        .expect("coordhost runs");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].contains(&job.display().to_string())
            && lines[0].contains("vertices[0].parallelism"),
        "{stderr}"
    );
}

#[test]
fn a_job_that_fails_while_running_exits_1() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("lines");
    std::fs::create_dir_all(&data).expect("dir");
    // Two columns expected, three given: the source task fails on every attempt.
    std::fs::write(data.join("a.csv"), "x,y,z\n").expect("data");
    let job = example_job("wordcount.toml", "build/data/words", &data, tmp.path());
    let text = std::fs::read_to_string(&job)
        .expect("job")
        .replace("pattern = \".txt\"", "pattern = \".csv\"")
        .replace(
            "{ op = \"read-lines\" }",
            "{ op = \"read-csv\", columns = [\"line\", \"other\"] }",
        );
    std::fs::write(&job, text).expect("job");
    let out = coordhost()
        .arg("run")
        .arg(&job)
        .arg("--data-dir")
        .arg(tmp.path().join("state"))
        .output()
        .expect("coordhost runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("3 fields, the read-csv operator expects 2"),
        "{stderr}"
    );
}

/// Issue 31, item 5: a source whose enumerator gives no split (an empty
/// input folder) finishes, and the summary says so in one line under that
/// source; a run that read input has no such line.
#[test]
fn a_source_that_yields_no_split_says_so_in_one_line() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let run = |data: &std::path::Path, name: &str| {
        let dir = tmp.path().join(name);
        std::fs::create_dir_all(&dir).expect("job folder");
        let job = example_job("wordcount.toml", "build/data/words", data, &dir);
        coordhost()
            .arg("run")
            .arg(&job)
            .arg("--data-dir")
            .arg(tmp.path().join(name).join("state"))
            .output()
            .expect("coordhost runs")
    };
    let empty = tmp.path().join("empty");
    std::fs::create_dir_all(&empty).expect("empty input folder");
    let out = run(&empty, "a");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains("read no input"))
        .collect();
    assert_eq!(
        lines,
        [
            "                   read no input: its split enumerator gave no split (an empty input folder, or a pattern that matches no file?)"
        ],
        "{stdout}"
    );
    // It sits right under the source vertex's line.
    let all: Vec<&str> = stdout.lines().collect();
    let at = all
        .iter()
        .position(|l| l.contains("read no input"))
        .expect("line");
    assert!(
        all[at - 1].trim_start().starts_with("tokenize "),
        "{stdout}"
    );

    let words = tmp.path().join("words");
    coordhost_datagen::write_words(&words, 1, 20, 3).expect("data");
    let out = run(&words, "b");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!stdout.contains("read no input"), "{stdout}");
}

/// Whether `line` starts with an RFC 3339 UTC time to the second and a
/// space (`2026-12-02T06:40:01Z `).
fn starts_with_utc_time(line: &str) -> bool {
    let b = line.as_bytes();
    b.len() > 21
        && b[..20].iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            10 => *c == b'T',
            13 | 16 => *c == b':',
            19 => *c == b'Z',
            _ => c.is_ascii_digit(),
        })
        && b[20] == b' '
}

#[test]
fn progress_lines_carry_the_time_and_a_source_says_its_input_in_splits_and_bytes() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("words");
    coordhost_datagen::write_words(&data, 3, 400, 11).expect("data");
    let job = example_job("wordcount.toml", "build/data/words", &data, tmp.path());
    let summary_file = tmp.path().join("summary.json");
    let out = coordhost()
        .arg("run")
        .arg(&job)
        .arg("--data-dir")
        .arg(tmp.path().join("state"))
        .arg("--summary-json")
        .arg(&summary_file)
        .output()
        .expect("coordhost runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    // stderr is a pipe here: plain lines, every one stamped.
    let progress: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("tokenize: ") || l.contains("count: "))
        .collect();
    assert!(progress.len() >= 3, "{stderr}");
    for line in &progress {
        assert!(starts_with_utc_time(line), "no time on {line:?}");
    }
    // The source's first split is shown at once; its last line gives the
    // whole input: 3 files of under a MiB, one split each, nothing left.
    assert!(
        progress
            .iter()
            .any(|l| l.contains("tokenize: input splits 1 of 3, ")),
        "{stderr}"
    );
    let last = progress
        .iter()
        .find(|l| l.contains("tokenize: 4/4 finished; input: splits 3 of 3, "))
        .unwrap_or_else(|| panic!("no final input line: {stderr}"));
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&summary_file).expect("summary")).expect("JSON");
    let bytes = json["vertices"]
        .as_array()
        .and_then(|vs| vs.iter().find(|v| v["id"] == "tokenize"))
        .and_then(|v| v["input"]["bytes_assigned"].as_u64())
        .expect("tokenize's input in the summary");
    let on_disk: u64 = std::fs::read_dir(&data)
        .expect("data")
        .map(|e| e.expect("entry").metadata().expect("meta").len())
        .sum();
    assert_eq!(bytes, on_disk, "every byte handed out once");
    let shown = if bytes < 1024 {
        format!("{bytes} B")
    } else {
        format!("{:.1} KiB", bytes as f64 / 1024.0)
    };
    assert!(
        last.contains(&format!(", {shown}")),
        "{last} vs {bytes} bytes"
    );
}
