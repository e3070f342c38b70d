//! Stopping, cancelling and resuming a job through the real binary
//! (issue 31, item 5; docs/job-file.md, "Stopping, cancelling, resuming"):
//! SIGTERM and SIGINT stop a run cleanly and the next run resumes it;
//! `coordhost cancel` ends a job for good, whether a coordinator runs it
//! or not, and a later run refuses it unless `--resume` or `--fresh`.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use crate::support::job::{example_job, word_count_output};
use crate::support::{coordhost, expected_word_counts};

/// The word-count example over its own input, its final vertex slowed
/// (5 ms a record) so that a run lasts seconds after its sources finished.
struct Slow {
    tmp: tempfile::TempDir,
    job: PathBuf,
    words: PathBuf,
    state: PathBuf,
}

impl Slow {
    fn new() -> Self {
        let tmp = tempfile::tempdir().expect("tempdir");
        let words = tmp.path().join("words");
        coordhost_datagen::write_words(&words, 4, 200, 5).expect("input");
        let job = example_job("wordcount.toml", "build/data/words", &words, tmp.path());
        let text = std::fs::read_to_string(&job).expect("job");
        let slowed = text.replacen(
            "bytes-per-task = 262144",
            "bytes-per-task = 262144\nrecord-delay-us = 5000",
            1,
        );
        assert_ne!(text, slowed, "the example has the line to slow");
        std::fs::write(&job, slowed).expect("job");
        let state = tmp.path().join("state");
        Self {
            job,
            words,
            state,
            tmp,
        }
    }

    fn job_dir(&self) -> PathBuf {
        self.state.join("wordcount")
    }

    fn output(&self) -> PathBuf {
        self.state.join("output/wordcount")
    }

    fn command(&self, extra: &[&str]) -> Command {
        let mut c = coordhost();
        c.arg("run")
            .arg(&self.job)
            .arg("--data-dir")
            .arg(&self.state)
            .arg("--summary-json")
            .arg(self.tmp.path().join("summary.json"))
            .args(extra);
        c
    }

    fn run(&self, extra: &[&str]) -> Output {
        self.command(extra).output().expect("coordhost runs")
    }

    /// Starts a run whose stderr lines arrive on the receiver.
    fn spawn(&self) -> (Child, Receiver<String>) {
        let mut child = self
            .command(&[])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("coordhost starts");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        (child, rx)
    }

    fn summary(&self) -> serde_json::Value {
        serde_json::from_slice(
            &std::fs::read(self.tmp.path().join("summary.json")).expect("summary"),
        )
        .expect("JSON")
    }

    fn event_kinds(&self) -> Vec<String> {
        let out = coordhost()
            .args(["log", "inspect", "--json"])
            .arg(self.job_dir())
            .output()
            .expect("log inspect");
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        json["events"]
            .as_array()
            .expect("events")
            .iter()
            // `{"event": {"kind": "JobCancelled", "event": {...}}}`.
            .map(|e| e["event"]["kind"].as_str().unwrap_or_default().to_owned())
            .collect()
    }
}

/// Waits for a stderr line containing `needle`; returns every line so far.
fn wait_for(rx: &Receiver<String>, needle: &str, seen: &mut Vec<String>) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if let Ok(line) = rx.recv_timeout(Duration::from_millis(100)) {
            let hit = line.contains(needle);
            seen.push(line);
            if hit {
                return;
            }
        }
    }
    panic!(
        "no stderr line with {needle:?} within 60 s:\n{}",
        seen.join("\n")
    );
}

fn finish(mut child: Child, rx: &Receiver<String>, seen: &mut Vec<String>) -> Option<i32> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        while let Ok(line) = rx.try_recv() {
            seen.push(line);
        }
        if let Some(status) = child.try_wait().expect("wait") {
            std::thread::sleep(Duration::from_millis(100));
            while let Ok(line) = rx.try_recv() {
                seen.push(line);
            }
            return status.code();
        }
        assert!(
            Instant::now() < deadline,
            "the coordinator did not end within 30 s:\n{}",
            seen.join("\n")
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn signal(child: &Child, name: &str) {
    let status = Command::new("kill")
        .arg(format!("-{name}"))
        .arg(child.id().to_string())
        .status()
        .expect("kill runs");
    assert!(status.success());
}

fn cancel(dir: &Path) -> Output {
    coordhost()
        .arg("cancel")
        .arg(dir)
        .output()
        .expect("coordhost cancel runs")
}

#[test]
fn sigterm_stops_the_run_cleanly_and_the_same_command_resumes_it() {
    for (name, code) in [("TERM", 143), ("INT", 130)] {
        let slow = Slow::new();
        let (child, rx) = slow.spawn();
        let mut seen = Vec::new();
        wait_for(&rx, "tokenize: 4/4 finished", &mut seen);
        signal(&child, name);
        let exit = finish(child, &rx, &mut seen);
        let stderr = seen.join("\n");
        assert_eq!(exit, Some(code), "SIG{name}:\n{stderr}");
        assert!(
            stderr.contains(&format!(
                "coordhost: stopped by SIG{name}: what finished is kept in the event log; run the same command again to resume the job"
            )),
            "{stderr}"
        );
        assert_eq!(slow.summary()["status"], "stopped");
        assert!(!slow.output().join("_SUCCESS").exists());
        // Nothing recorded as an end: the log ends as after a crash.
        let kinds = slow.event_kinds();
        assert!(
            !kinds
                .iter()
                .any(|k| k == "JobFailed" || k == "JobCancelled" || k == "JobFinished"),
            "{kinds:?}"
        );
        let out = slow.run(&[]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let summary = slow.summary();
        assert_eq!(summary["recovered"], true, "{summary}");
        assert_eq!(
            summary["tasks_skipped"], 4,
            "the four sources are kept: {summary}"
        );
        assert_eq!(
            word_count_output(&slow.output()),
            expected_word_counts(&slow.words)
        );
    }
}

#[test]
fn cancel_stops_a_running_job_records_it_and_a_later_run_refuses_until_resume() {
    let slow = Slow::new();
    let (child, rx) = slow.spawn();
    let mut seen = Vec::new();
    wait_for(&rx, "tokenize: 4/4 finished", &mut seen);
    let out = cancel(&slow.job_dir());
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "job `wordcount` cancelled"
    );
    let exit = finish(child, &rx, &mut seen);
    let stderr = seen.join("\n");
    assert_eq!(exit, Some(3), "{stderr}");
    assert!(
        stderr.contains("coordhost: job `wordcount` was cancelled (`coordhost cancel`)"),
        "{stderr}"
    );
    assert_eq!(slow.summary()["status"], "cancelled");
    assert_eq!(
        slow.event_kinds().last().map(String::as_str),
        Some("JobCancelled")
    );
    assert!(
        !slow.job_dir().join("CANCEL").exists(),
        "the request is done"
    );
    assert!(!slow.output().join("_SUCCESS").exists());

    // A later run refuses, the log unchanged but for a new empty segment.
    let out = slow.run(&[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert_eq!(
        stderr.trim(),
        "coordhost: job `wordcount` was cancelled (`coordhost cancel`); a run does not resume a cancelled job: pass --resume to go on from where it stopped, or --fresh to run it again from scratch"
    );
    // Cancelling it again says so.
    let out = cancel(&slow.job_dir());
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "job `wordcount` is already cancelled"
    );
    // --resume goes on with it, and the answer is right.
    let out = slow.run(&["--resume"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        word_count_output(&slow.output()),
        expected_word_counts(&slow.words)
    );
    // A finished job cannot be cancelled.
    let out = cancel(&slow.job_dir());
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("job `wordcount` already finished; there is nothing to cancel"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_cancel_with_no_coordinator_waits_for_the_next_run_which_records_it() {
    let slow = Slow::new();
    let (child, rx) = slow.spawn();
    let mut seen = Vec::new();
    wait_for(&rx, "tokenize: 4/4 finished", &mut seen);
    signal(&child, "TERM");
    assert_eq!(
        finish(child, &rx, &mut seen),
        Some(143),
        "{}",
        seen.join("\n")
    );

    let out = cancel(&slow.state);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("no coordinator runs job `wordcount` now"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(slow.job_dir().join("CANCEL").is_file());
    let out = slow.run(&[]);
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(slow.summary()["status"], "cancelled");
    assert_eq!(
        slow.summary()["tasks_run"],
        0,
        "nothing deployed after the request"
    );
    assert_eq!(
        slow.event_kinds().last().map(String::as_str),
        Some("JobCancelled")
    );
    assert!(!slow.job_dir().join("CANCEL").exists());
    // --fresh runs it again from scratch.
    let out = slow.run(&["--fresh"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(slow.summary()["recovered"], false);
    assert_eq!(
        word_count_output(&slow.output()),
        expected_word_counts(&slow.words)
    );
}

#[test]
fn cancel_of_a_folder_without_a_job_log_is_bad_input_naming_it() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = cancel(tmp.path());
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("coordhost: ") && stderr.contains(&tmp.path().display().to_string()),
        "{stderr}"
    );
}
