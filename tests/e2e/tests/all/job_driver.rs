//! Promises of the job driver (`host/src/job/`), through the real
//! `coordhost` binary and real sample plugins (issue 13):
//!
//! - the data directory is resolved once, `..` as the OS follows it:
//!   `--data-dir nonexist/../d` is refused (exit 2) and creates nothing;
//! - every published sink subtask is logged as `SinkCommitted`, which
//!   `coordhost log inspect` shows;
//! - an error that wraps a plugin's error names the plugin once.

use std::path::Path;
use std::process::Output;

use crate::support::job::example_job;
use crate::support::plugin_path;

/// Three small text files.
fn words(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    for i in 0..3 {
        std::fs::write(
            dir.join(format!("f{i}.txt")),
            format!("alpha beta {i}\nbeta gamma\n"),
        )
        .unwrap();
    }
}

fn coordhost(cwd: &Path, args: &[&str]) -> Output {
    crate::support::coordhost()
        .current_dir(cwd)
        .args(args)
        .output()
        .expect("coordhost runs")
}

fn describe(out: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The word count example over three files, run in `tmp` with
/// `--data-dir nonexist/../d`.
fn run_through_a_missing_folder(tmp: &Path) -> Output {
    run_word_count(tmp, "nonexist/../d")
}

/// The word count example over three files, run in `tmp` with
/// `--data-dir DATA_DIR`.
fn run_word_count(tmp: &Path, data_dir: &str) -> Output {
    words(&tmp.join("input"));
    let job = example_job(
        "wordcount.toml",
        "build/data/words",
        &tmp.join("input"),
        tmp,
    );
    coordhost(
        tmp,
        &[
            "run",
            &job.display().to_string(),
            "--data-dir",
            data_dir,
            "--workers",
            "2",
        ],
    )
}

#[test]
fn a_data_dir_through_a_missing_folder_is_refused_and_creates_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let out = run_through_a_missing_folder(tmp.path());
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.lines().collect::<Vec<_>>(),
        [format!(
            "coordhost: --data-dir: `nonexist/../d`: `..` follows `{}`, which does not exist",
            tmp.path().join("nonexist").display()
        )],
        "{}",
        describe(&out)
    );
    assert!(
        !tmp.path().join("nonexist").exists() && !tmp.path().join("d").exists(),
        "no `nonexist/` and no `d/` are created\n{}",
        describe(&out)
    );
}

#[test]
fn every_published_sink_subtask_is_logged_as_sink_committed_and_inspect_shows_it() {
    let tmp = tempfile::tempdir().unwrap();
    let out = run_word_count(tmp.path(), "d");
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let mut parts: Vec<String> = std::fs::read_dir(tmp.path().join("d/output/wordcount"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("part-"))
        .collect();
    parts.sort();
    assert!(!parts.is_empty(), "{}", describe(&out));

    let inspect = coordhost(tmp.path(), &["log", "inspect", "d/wordcount", "--json"]);
    assert_eq!(inspect.status.code(), Some(0), "{}", describe(&inspect));
    let doc: serde_json::Value = serde_json::from_slice(&inspect.stdout).expect("JSON");
    let events = doc["events"].as_array().expect("events");
    let mut committed: Vec<String> = events
        .iter()
        .filter(|e| e["event"]["kind"] == "SinkCommitted")
        .map(|e| {
            let committed = &e["event"]["event"];
            assert_eq!(committed["attempt"]["job_vertex"], "count", "{e}");
            committed["file"].as_str().expect("file").to_string()
        })
        .collect();
    committed.sort();
    assert_eq!(
        committed, parts,
        "one SinkCommitted per published part file"
    );

    let text = coordhost(tmp.path(), &["log", "inspect", "d/wordcount"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.lines()
            .any(|l| l.contains("SinkCommitted") && l.contains(&parts[0])),
        "{text}"
    );
}

#[test]
fn a_split_enumerator_that_faults_again_after_its_rebuild_is_named_once() {
    // Every rebuilt store hands out the splits readers already have, then
    // traps at the same place: the second fault without progress fails the
    // job with an error that wraps the plugin's.
    let tmp = tempfile::tempdir().unwrap();
    let job = tmp.path().join("faulty.toml");
    let component = |name: &str| {
        serde_json::to_string(&plugin_path(name).display().to_string()).expect("a string")
    };
    std::fs::write(
        &job,
        format!(
            r#"[job]
name = "faulty"
max-attempts = 1

[shuffle]
plugin = "shuffle"

[plugins.faulty]
component = {faulty}
kind = "split-enumerator"
config = {{ fault = "trap", trap-after = "2", splits = "6" }}
limits = {{ on-trap = "rebuild" }}

[plugins.shuffle]
component = {shuffle}
kind = "shuffle-master"
config = {{ root = "${{data_dir}}/shuffle" }}
dirs = [{{ path = "${{data_dir}}/shuffle", writable = true }}]

[[vertices]]
id = "read"
source = "faulty"
parallelism = 2
operators = [
  {{ op = "read-lines" }},
  {{ op = "write-text", path = "${{data_dir}}/output/faulty" }},
]
"#,
            faulty = component("faulty-enumerator"),
            shuffle = component("local-shuffle"),
        ),
    )
    .unwrap();
    let out = coordhost(
        tmp.path(),
        &["run", &job.display().to_string(), "--data-dir", "state"],
    );
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.contains("faulted again after its store was rebuilt"),
        "{}",
        describe(&out)
    );
    assert_eq!(
        last.matches("`faulty`").count(),
        1,
        "the plugin is named once: {last}"
    );
    assert!(last.contains("plugin `faulty`: `"), "{last}");
}
