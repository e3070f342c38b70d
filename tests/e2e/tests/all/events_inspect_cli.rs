//! `coordhost log inspect` through the real binary: a reader that stops
//! early (`| head -1`) ends it quietly, and a data directory holding
//! several jobs is answered with their names.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Stdio;

use crate::support::events::{manual, one_of_each};
use coordhost::events::open_job_log;

/// Writes a log for job `job` under `data_dir` with `rounds` copies of one
/// event of each kind.
fn write_log(data_dir: &Path, job: &str, rounds: usize) {
    let (writer, _) = open_job_log(data_dir, job, manual()).expect("open");
    for _ in 0..rounds {
        for event in one_of_each() {
            writer.append(&event).expect("append");
        }
    }
    writer.close().expect("close");
}

#[test]
fn log_inspect_into_a_pipe_closed_after_one_line_ends_quietly_with_exit_0() {
    let tmp = tempfile::tempdir().unwrap();
    // Far more than a pipe buffer holds (64 KiB): the writer is still
    // writing when the reader goes away.
    write_log(tmp.path(), "wordcount", 2000);
    let mut child = crate::support::coordhost()
        .args(["log", "inspect"])
        .arg(tmp.path().join("wordcount"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("coordhost starts");
    let mut reader = BufReader::new(child.stdout.take().expect("stdout"));
    let mut first = String::new();
    reader.read_line(&mut first).expect("one line");
    assert!(first.starts_with("event log "), "{first}");
    drop(reader);
    let out = child.wait_with_output().expect("coordhost ends");
    assert_eq!(
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned()
        ),
        (Some(0), String::new()),
        "a closed stdout ends `log inspect` quietly"
    );
}

#[test]
fn log_inspect_of_a_data_dir_with_two_jobs_names_them_and_asks_for_one() {
    let tmp = tempfile::tempdir().unwrap();
    let data_dir = tmp.path().join("d5");
    write_log(&data_dir, "wordcount", 1);
    write_log(&data_dir, "tpch", 1);
    let out = crate::support::coordhost()
        .current_dir(tmp.path())
        .args(["log", "inspect", "d5"])
        .output()
        .expect("coordhost runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(out.stdout.is_empty(), "{stderr}");
    assert_eq!(
        stderr.lines().collect::<Vec<_>>(),
        [
            "coordhost: d5 is a data directory holding 2 jobs (tpch, wordcount); name one: `coordhost log inspect d5/JOB`"
        ],
        "{stderr}"
    );
}
