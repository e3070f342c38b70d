//! The paths a user names for `coordhost run` to write, as a new user met
//! them (through the real binary and the real word count plugins):
//!
//! - `--summary-json` is checked before anything runs, `..` as the OS
//!   follows it, and a missing folder is said to be missing;
//! - `--data-dir` resolves `..` on disk (`lnk/../d` is `d` beside the
//!   target of `lnk`), and a `..` after a missing component or a file is
//!   refused up front, exit 2, one line, nothing created;
//! - a set-aside log (`run --fresh`) is named in nanoseconds.

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::support::job::example_job;

/// Three small text files in `tmp/input`, and the word count job over them
/// written to `tmp/wordcount.toml`.
fn word_count_job(tmp: &Path) -> PathBuf {
    let input = tmp.join("input");
    std::fs::create_dir_all(&input).unwrap();
    for i in 0..3 {
        std::fs::write(
            input.join(format!("f{i}.txt")),
            format!("alpha beta {i}\nbeta gamma\n"),
        )
        .unwrap();
    }
    example_job("wordcount.toml", "build/data/words", &input, tmp)
}

fn run(cwd: &Path, job: &Path, args: &[&str]) -> Output {
    crate::support::coordhost()
        .current_dir(cwd)
        .arg("run")
        .arg(job)
        .args(["--workers", "2"])
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

/// The refusal: exit 2, nothing on stdout, one line on stderr; returns it.
fn one_refusal_line(out: &Output) -> String {
    assert_eq!(out.status.code(), Some(2), "{}", describe(out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one line\n{}", describe(out));
    assert!(out.stdout.is_empty(), "{}", describe(out));
    lines[0].to_string()
}

/// The names in `dir`, sorted.
fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Runs the word count in a new temp folder (after `prepare` there) with
/// `args`: it must be refused before anything is created, with exit 2 and
/// the one line `want(temp folder)`.
fn assert_run_refused(
    prepare: impl FnOnce(&Path),
    args: &[&str],
    want: impl FnOnce(&Path) -> String,
) {
    let tmp = tempfile::tempdir().unwrap();
    let job = word_count_job(tmp.path());
    prepare(tmp.path());
    let before = entries(tmp.path());
    let out = run(tmp.path(), &job, args);
    let line = one_refusal_line(&out);
    assert_eq!(line, want(tmp.path()), "{}", describe(&out));
    assert_eq!(entries(tmp.path()), before, "nothing is created");
}

#[test]
fn a_summary_json_through_a_missing_folder_is_refused_before_the_job_runs() {
    assert_run_refused(
        |_| {},
        &["--data-dir", "d", "--summary-json", "nonexist/../s.json"],
        |tmp| {
            format!(
                "coordhost: --summary-json: `nonexist/../s.json`: `..` follows `{}`, which does not exist",
                tmp.join("nonexist").display()
            )
        },
    );
}

#[test]
fn a_summary_json_in_a_missing_folder_says_the_folder_does_not_exist() {
    assert_run_refused(
        |_| {},
        &["--data-dir", "d", "--summary-json", "nonexist/s.json"],
        |tmp| {
            format!(
                "coordhost: --summary-json: `nonexist/s.json` cannot be written: `{}` does not exist",
                tmp.join("nonexist").display()
            )
        },
    );
}

#[test]
fn a_data_dir_through_a_symlink_and_dotdot_runs_where_the_os_path_leads() {
    let tmp = tempfile::tempdir().unwrap();
    let job = word_count_job(tmp.path());
    let work = tmp.path().join("work");
    let target = tmp.path().join("other/target");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::create_dir_all(&target).unwrap();
    std::os::unix::fs::symlink(&target, work.join("lnk")).unwrap();
    let out = run(&work, &job, &["--data-dir", "lnk/../dd3"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert!(
        tmp.path()
            .join("other/dd3/output/wordcount/_SUCCESS")
            .is_file(),
        "`lnk/../dd3` is `dd3` beside the target of `lnk`\n{}",
        describe(&out)
    );
    assert!(
        !work.join("dd3").exists(),
        "nothing runs in `./dd3`\n{}",
        describe(&out)
    );
}

#[test]
fn a_data_dir_with_dotdot_after_a_file_is_refused_and_nothing_is_created() {
    assert_run_refused(
        |tmp| std::fs::write(tmp.join("afile"), "not a folder").unwrap(),
        &["--data-dir", "afile/../d"],
        |tmp| {
            format!(
                "coordhost: --data-dir: `afile/../d`: `..` follows `{}`, which is not a folder",
                tmp.join("afile").display()
            )
        },
    );
}

#[test]
fn fresh_sets_the_log_aside_named_in_nanoseconds() {
    let tmp = tempfile::tempdir().unwrap();
    let job = word_count_job(tmp.path());
    let out = run(tmp.path(), &job, &["--data-dir", "d"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let out = run(tmp.path(), &job, &["--data-dir", "d", "--fresh"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let aside: Vec<String> = entries(&tmp.path().join("d/wordcount"))
        .into_iter()
        .filter(|n| n.starts_with("log.discarded-"))
        .collect();
    assert_eq!(aside.len(), 1, "{aside:?}\n{}", describe(&out));
    let ns: u128 = aside[0]["log.discarded-".len()..]
        .parse()
        .expect("a number after `log.discarded-`");
    assert!(
        ns > 1_000_000_000_000_000_000,
        "nanoseconds since the Unix epoch, as `log.replaced-` and `log.damaged-`: {aside:?}"
    );
}

#[test]
fn a_cache_dir_through_a_missing_folder_is_refused_and_nothing_is_created() {
    assert_run_refused(
        |_| {},
        &["--data-dir", "d", "--cache-dir", "nonexist/../c"],
        |tmp| {
            format!(
                "coordhost: --cache-dir: `nonexist/../c`: `..` follows `{}`, which does not exist",
                tmp.join("nonexist").display()
            )
        },
    );
}

/// The plugin commands that load a component resolve `--cache-dir` as
/// `run` does: a `..` after a missing folder is one line, exit 2, and
/// nothing is created (neither `nonexist/` nor the cache).
#[test]
fn plugin_commands_refuse_a_cache_dir_through_a_missing_folder_and_create_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let plugin = crate::support::plugin_path("static-enumerator");
    let plugin = plugin.to_str().expect("a UTF-8 path");
    for command in [
        vec!["plugin", "check", plugin],
        vec!["plugin", "call", plugin, "--config", "split.0=a"],
        vec!["plugin", "test", plugin, "--config", "split.0=a"],
    ] {
        let out = crate::support::coordhost()
            .current_dir(tmp.path())
            .args(&command)
            .args(["--cache-dir", "nonexist/../c"])
            .output()
            .expect("coordhost runs");
        let line = one_refusal_line(&out);
        assert_eq!(
            line,
            format!(
                "coordhost: --cache-dir: `nonexist/../c`: `..` follows `{}`, which does not exist",
                tmp.path().join("nonexist").display()
            ),
            "{command:?}\n{}",
            describe(&out)
        );
        assert!(
            entries(tmp.path()).is_empty(),
            "{command:?}: nothing is created"
        );
    }
}
