//! The plugin authors' kit through the `coordhost` binary (issue 17):
//! `plugin new`, `plugin call`, `plugin test` against the sample plugins
//! and a faulty one, `plugin check`'s "compiling ..." line and its listing
//! of exports, and `skip-header` on inline splits. The generated projects
//! are built and tested by `scripts/kit-check.sh` (part of `make test`).

use std::path::Path;
use std::process::Output;

use crate::support::{cache_dir, plugin_path, workspace};

/// A built sample plugin's path as an argument.
fn plugin(name: &str) -> String {
    plugin_path(name).to_string_lossy().into_owned()
}

fn coordhost_in(cache: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    crate::support::coordhost()
        .args(args)
        .env("COORDHOST_CACHE_DIR", cache)
        .envs(env.iter().copied())
        .output()
        .expect("coordhost runs")
}

fn coordhost(args: &[&str]) -> Output {
    coordhost_in(&cache_dir(), args, &[])
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn show(out: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}--- stderr\n{}",
        out.status.code(),
        text(&out.stdout),
        text(&out.stderr)
    )
}

#[test]
fn plugin_test_passes_every_sample_plugin() {
    let cases: [(&str, &[&str]); 7] = [
        (
            "file-enumerator",
            &["--config", "dir=${tmp}", "--config", "split-bytes=8"],
        ),
        ("py-enumerator", &["--config", "dir=${tmp}"]),
        (
            "js-enumerator",
            &["--config", "dir=${tmp}", "--config", "split-bytes=4"],
        ),
        (
            "static-enumerator",
            &[
                "--config",
                "split.0=first",
                "--config",
                "split.1=second\nline",
            ],
        ),
        ("local-shuffle", &[]),
        ("py-shuffle", &["--config", "root=${tmp}/partitions"]),
        ("memory-shuffle", &[]),
    ];
    for (name, config) in cases {
        let path = plugin(name);
        let mut args = vec!["plugin", "test", &path];
        args.extend_from_slice(config);
        let out = coordhost(&args);
        let stdout = text(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{name}: {}", show(&out));
        assert!(stdout.contains("passed: "), "{name}: {stdout}");
        assert!(!stdout.contains("FAILED"), "{name}: {stdout}");
        let snapshots = !matches!(name, "static-enumerator" | "memory-shuffle");
        assert_eq!(
            stdout.contains("ok      batch-snapshot-restore"),
            snapshots,
            "{name}: {stdout}"
        );
        assert_eq!(
            stdout.contains("ok      no-snapshot-is-an-error-value"),
            !snapshots,
            "{name}: {stdout}"
        );
    }
}

#[test]
fn plugin_test_fails_a_faulty_enumerator_and_names_each_failed_check() {
    // Traps whenever it takes a snapshot: the hand-out is fine, the
    // snapshot checks fail.
    let path = plugin("faulty-enumerator");
    let out = coordhost(&[
        "plugin",
        "test",
        &path,
        "--config",
        "fault=trap",
        "--config",
        "on=snapshot-state",
    ]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(stdout.contains("ok      hand-out"), "{stdout}");
    assert!(
        stdout.contains("FAILED  batch-snapshot-restore: "),
        "{stdout}"
    );
    assert!(stdout.contains("trap on snapshot-state"), "{stdout}");
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("failed: batch-snapshot-restore, restore-does-not-rediscover"),
        "{stderr}"
    );

    // Hands out the same id twice: the hand-out check fails.
    let out = coordhost(&["plugin", "test", &path, "--config", "fault=duplicate-ids"]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(
        text(&out.stdout).contains("FAILED  hand-out: "),
        "{}",
        show(&out)
    );
    assert!(text(&out.stderr).contains("hand-out"), "{}", show(&out));
    // The checks that need the hand-out did not run, and the report says so.
    assert!(
        text(&out.stdout).contains(
            "5 checks not run after `hand-out` failed: no-more-splits-is-final, add-splits-back, batch-snapshot-restore, restore-does-not-rediscover, corrupt-snapshot\nfailed: 1 of 2 checks"
        ),
        "{}",
        show(&out)
    );
}

#[test]
fn plugin_test_names_the_error_case_a_failed_corrupt_snapshot_check_got() {
    // `restore` answers every snapshot with `error::other`.
    let path = plugin("faulty-enumerator");
    let out = coordhost(&[
        "plugin",
        "test",
        &path,
        "--config",
        "fault=flood",
        "--config",
        "on=restore",
        "--config",
        "flood-lines=0",
        "--config",
        "flood-line-bytes=10",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(
        text(&out.stdout)
            .contains("FAILED  corrupt-snapshot: expected `corrupt-snapshot`, got `other`: "),
        "{}",
        show(&out)
    );
    assert!(
        text(&out.stderr).contains("corrupt-snapshot"),
        "{}",
        show(&out)
    );
}

#[test]
fn plugin_call_refuses_a_split_id_assigned_again_while_still_assigned() {
    // Every request assigns the id `dup`: the second one breaks the
    // contract, as the coordinator of a real run says.
    let path = plugin("faulty-enumerator");
    let out = coordhost(&["plugin", "call", &path, "--config", "fault=duplicate-ids"]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let stdout = text(&out.stdout);
    let first = stdout
        .find("-> assign-splits: reader 0 gets dup ")
        .unwrap_or_else(|| panic!("no first assignment:\n{stdout}"));
    let error = stdout
        .find("  -> error: ")
        .unwrap_or_else(|| panic!("no error:\n{stdout}"));
    assert!(first < error, "{stdout}");
    assert!(
        stdout[error..].contains(
            "`handle-split-request` broke the plugin contract: assigned split id `dup` again while it is still assigned (ids are unique within an enumerator)"
        ),
        "{stdout}"
    );
    assert!(
        stdout.ends_with('\n') && stdout[error..].lines().count() == 1,
        "{stdout}"
    );
}

#[test]
fn plugin_call_leaves_snapshot_steps_out_of_the_default_script_without_batch_snapshots() {
    let path = plugin("static-enumerator");
    let out = coordhost(&[
        "plugin",
        "call",
        &path,
        "--config",
        "split.0=first",
        "--config",
        "split.1=second",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let stdout = text(&out.stdout);
    assert_eq!(
        stdout
            .lines()
            .filter(|l| l.contains("without `snapshot` and `restore` steps"))
            .count(),
        1,
        "{stdout}"
    );
    assert!(!stdout.contains("snapshot-state"), "{stdout}");
    assert!(!stdout.contains("restore("), "{stdout}");
    assert!(
        stdout.contains("-> signal-no-more-splits: reader 0"),
        "{stdout}"
    );
    // A shuffle master without batch snapshots: the same.
    let out = coordhost(&["plugin", "call", &plugin("memory-shuffle")]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("without `snapshot` and `restore` steps")
            && !stdout.contains("snapshot-state"),
        "{stdout}"
    );
    assert!(stdout.contains("unregister-job("), "{stdout}");
}

#[test]
fn plugin_call_prints_a_run_a_snapshot_and_the_recovery_that_follows() {
    let path = plugin("file-enumerator");
    let out = coordhost(&[
        "plugin",
        "call",
        &path,
        "--config",
        "dir=${tmp}",
        "--config",
        "split-bytes=8",
    ]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let order = [
        "create(config [(\"dir\", ",
        "start()",
        "add-reader(0)",
        // No hostname, as a real run's coordinator passes none.
        "handle-split-request(0, none)",
        "-> assign-splits: reader 0 gets a.txt:0 file-range ",
        "snapshot-state(-1)",
        "the host keeps with it the assignment history: reader 0: [\"a.txt:0\"]",
        "-> signal-no-more-splits: reader 0",
        "restore(config ",
        "history is rolled back to the snapshot: reader 0: [\"a.txt:0\"]",
        "add-splits-back([\"a.txt:0\"], 0)",
        "-> assign-splits: reader 0 gets a.txt:0 file-range ",
        "-> assign-splits: reader 0 gets c.txt:0 file-range ",
        "-> signal-no-more-splits: reader 0",
    ];
    let mut at = 0;
    for expected in order {
        let found = stdout[at..]
            .find(expected)
            .unwrap_or_else(|| panic!("`{expected}` after byte {at} of:\n{stdout}"));
        at += found + expected.len();
    }

    // A script of one's own; a step the kind does not know is bad input.
    let out = coordhost(&[
        "plugin",
        "call",
        &path,
        "--config",
        "dir=${tmp}",
        "--steps",
        "create,start,add-reader:1,unassigned",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert!(
        text(&out.stdout).contains("unassigned-splits()\n  -> 3\n"),
        "{}",
        show(&out)
    );
    // The same script from a file, with a comment.
    let script = tempfile::NamedTempFile::new().expect("script");
    std::fs::write(
        script.path(),
        "# a reader and the count\ncreate\nstart\nadd-reader:1, unassigned\n",
    )
    .expect("script");
    let at = format!("@{}", script.path().display());
    let out = coordhost(&[
        "plugin",
        "call",
        &path,
        "--config",
        "dir=${tmp}",
        "--steps",
        &at,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert!(
        text(&out.stdout).contains("add-reader(1)\n  -> ok\nunassigned-splits()\n  -> 3\n"),
        "{}",
        show(&out)
    );
    let out = coordhost(&["plugin", "call", &path, "--steps", "create,register-job"]);
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    let stderr = text(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("--steps: `register-job` is not a split-enumerator step"),
        "{stderr}"
    );
}

#[test]
fn plugin_call_of_a_shuffle_master_restores_a_new_instance_and_traces_calls_at_debug() {
    let path = plugin("local-shuffle");
    let out = coordhost_in(
        &cache_dir(),
        &["plugin", "call", &path],
        &[("COORDHOST_LOG", "coordhost::plugin=debug")],
    );
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let restored = stdout
        .split("restore-state(")
        .nth(1)
        .unwrap_or_else(|| panic!("no restore:\n{stdout}"));
    // The host's writer says what it wrote; the restored instance reports
    // the same bytes, read from the partitions' index files.
    let written = stdout
        .split("(bytes per subpartition ")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .unwrap_or_else(|| panic!("no produced sizes:\n{stdout}"));
    assert!(written.starts_with('['), "{stdout}");
    assert!(
        restored.contains(&format!(
            "source->sink/source-0-0: bytes per subpartition {written}"
        )) && restored.contains(&format!(
            "source->sink/source-1-0: bytes per subpartition {written}"
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains("snapshot-state(\"kit-job\")\n  -> full: "),
        "{stdout}"
    );
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("host -> plugin") && stderr.contains("get-partitions-with-metrics"),
        "{stderr}"
    );
    // Bad input: one line naming the option, exit 2, before any call.
    for (args, says) in [
        (
            vec!["--grant", "relative/dir"],
            "--grant relative/dir: give an absolute folder",
        ),
        (
            vec!["--steps", "create,start"],
            "--steps: `start` is not a shuffle-master step",
        ),
        (
            vec!["--steps", "report,create"],
            "--steps: the script begins with `report`; it must begin with `create`",
        ),
    ] {
        let mut all = vec!["plugin", "call", path.as_str()];
        all.extend(args);
        let out = coordhost(&all);
        assert_eq!(out.status.code(), Some(2), "{}", show(&out));
        let stderr = text(&out.stderr);
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.contains(says), "{stderr}");
        assert!(text(&out.stdout).is_empty(), "{}", show(&out));
    }
    assert!(stderr.contains("call=\"create\""), "{stderr}");
    // A failed call exits 1 and says what the plugin answered.
    let out = coordhost(&["plugin", "call", &path, "--config", "root=relative"]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(text(&out.stdout).contains("  -> error: "), "{}", show(&out));
}

#[test]
fn plugin_new_writes_a_rust_scalar_function_with_its_own_wit() {
    let parent = tempfile::tempdir().expect("tempdir");
    let dir = parent.path().to_str().expect("utf-8");
    let out = coordhost(&[
        "plugin",
        "new",
        "my-tax",
        "--kind",
        "scalar-function",
        "--lang",
        "rust",
        "--dir",
        dir,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let project = parent.path().join("my-tax");
    let wit = std::fs::read_to_string(project.join("wit/function.wit")).expect("wit");
    let repo_wit =
        std::fs::read_to_string(workspace().join("wit/function/function.wit")).expect("wit");
    assert_eq!(wit, repo_wit, "the coordhost:function WIT is copied in");
    assert!(!project.join("wit/types.wit").exists());
    let source = std::fs::read_to_string(project.join("src/lib.rs")).expect("source");
    assert!(
        source.contains("my_tax") && !source.contains("{{"),
        "{source}"
    );
    let lock = std::fs::read_to_string(project.join("Cargo.lock")).expect("lock");
    assert!(
        lock.contains("name = \"my-tax\""),
        "the lockfile names the project"
    );
}

#[test]
fn plugin_new_writes_a_project_with_the_wit_and_refuses_a_folder_that_is_not_empty() {
    let parent = tempfile::tempdir().expect("tempdir");
    let dir = parent.path().to_str().expect("utf-8");
    for (lang, kind, entry) in [
        ("rust", "split-enumerator", "src/lib.rs"),
        ("rust", "shuffle-master", "src/lib.rs"),
        ("python", "split-enumerator", "split_enumerator.py"),
        ("python", "shuffle-master", "shuffle_master.py"),
        ("js", "split-enumerator", "enumerator.js"),
    ] {
        let name = format!("my-{lang}-{kind}");
        let out = coordhost(&[
            "plugin", "new", &name, "--kind", kind, "--lang", lang, "--dir", dir,
        ]);
        assert_eq!(out.status.code(), Some(0), "{lang} {kind}: {}", show(&out));
        let project = parent.path().join(&name);
        let wit = std::fs::read_to_string(project.join("wit/types.wit")).expect("wit");
        let repo_wit = std::fs::read_to_string(workspace().join("wit/types.wit")).expect("wit");
        assert_eq!(wit, repo_wit, "{lang} {kind}: the WIT is copied in");
        let readme = std::fs::read_to_string(project.join("README.md")).expect("README");
        assert!(readme.contains("coordhost plugin test"), "{readme}");
        assert!(!readme.contains("{{"), "{readme}");
        let source = std::fs::read_to_string(project.join(entry)).expect("source");
        assert!(
            source.contains(&name),
            "{lang} {kind}: named after the project"
        );
        if lang == "js" {
            // No lockfile: package.json pins exact versions, and the README says so.
            let package =
                std::fs::read_to_string(project.join("package.json")).expect("package.json");
            assert!(
                package.contains("\"@bytecodealliance/componentize-js\": \"0."),
                "{package}"
            );
            assert!(
                !package.contains('^') && !package.contains('~'),
                "{package}"
            );
            assert!(
                readme.contains("`npm install` installs exactly"),
                "{readme}"
            );
        }
        if lang == "rust" {
            assert!(
                readme.contains("`$CARGO_TARGET_DIR/wasm32-wasip2/release/"),
                "{readme}"
            );
            let cargo = std::fs::read_to_string(project.join("Cargo.toml")).expect("Cargo.toml");
            assert!(cargo.contains("wit-bindgen = \"=0."), "{cargo}");
            assert!(
                source.contains("::new("),
                "the Rust template shows the constructor"
            );
        }

        // Again into the same (now non-empty) folder: one line, exit 2.
        let again = coordhost(&[
            "plugin", "new", &name, "--kind", kind, "--lang", lang, "--dir", dir,
        ]);
        assert_eq!(again.status.code(), Some(2), "{}", show(&again));
        let stderr = text(&again.stderr);
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(
            stderr.contains(&format!(
                "{}: the folder exists and is not empty",
                project.display()
            )),
            "{stderr}"
        );
    }
    let out = coordhost(&[
        "plugin",
        "new",
        "x",
        "--kind",
        "shuffle-master",
        "--lang",
        "js",
        "--dir",
        dir,
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    assert!(text(&out.stderr).contains("--lang js --kind shuffle-master: no template"));
    let out = coordhost(&[
        "plugin",
        "new",
        "Bad_Name",
        "--kind",
        "shuffle-master",
        "--lang",
        "rust",
        "--dir",
        dir,
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    assert!(
        text(&out.stderr).contains("NAME `Bad_Name`"),
        "{}",
        show(&out)
    );
}

#[test]
fn plugin_check_says_compiling_only_when_it_compiles_and_explains_other_exports() {
    // A Python component compiles for seconds (far past the notice's 1 s):
    // the first check says so, the second takes it from the cache.
    let cache = tempfile::tempdir().expect("tempdir");
    let path = plugin("py-enumerator");
    let first = coordhost_in(cache.path(), &["plugin", "check", &path], &[]);
    assert_eq!(first.status.code(), Some(0), "{}", show(&first));
    assert!(
        text(&first.stderr).starts_with("compiling py-enumerator.wasm ..."),
        "{}",
        show(&first)
    );
    let second = coordhost_in(cache.path(), &["plugin", "check", &path], &[]);
    assert_eq!(second.status.code(), Some(0), "{}", show(&second));
    assert!(
        !text(&second.stderr).contains("compiling"),
        "{}",
        show(&second)
    );
    let rust = coordhost(&["plugin", "check", &plugin("file-enumerator")]);
    assert!(
        !text(&rust.stdout).contains("other exports"),
        "{}",
        show(&rust)
    );

    let py = coordhost(&["plugin", "check", &plugin("py-enumerator")]);
    let stdout = text(&py.stdout);
    assert_eq!(py.status.code(), Some(0), "{}", show(&py));
    assert!(
        stdout.contains("  exports:                 coordhost:plugin/split-enumerator@0.1.3\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains("  other exports:           exports (added by componentize-py"),
        "{stdout}"
    );
}

#[test]
fn skip_header_skips_the_header_of_a_file_once_and_nothing_of_inline_splits() {
    let tmp = tempfile::tempdir().expect("tempdir");
    // 10 numbered lines in inline splits of 3.
    let splits: Vec<String> = (0..4)
        .map(|i| {
            let lines: Vec<String> = (i * 3 + 1..=(i * 3 + 3).min(10))
                .map(|n| n.to_string())
                .collect();
            format!("\"split.{i}\" = \"{}\"", lines.join("\\n"))
        })
        .collect();
    // And one CSV file with a header line: skipped once, at byte 0.
    let input = tmp.path().join("input");
    std::fs::create_dir(&input).expect("input");
    let csv = input.join("more.csv");
    std::fs::write(&csv, "n\n11\n12\n").expect("csv");
    let job = format!(
        r#"[job]
name = "skip-header"

[shuffle]
plugin = "shuffle"

[plugins.splits]
component = "{enumerator}"
kind = "split-enumerator"
config = {{ {splits}, files = "{csv}" }}
dirs = [{{ path = "{input}" }}]

[plugins.shuffle]
component = "{shuffle}"
kind = "shuffle-master"
config = {{ root = "${{data_dir}}/shuffle" }}
dirs = [{{ path = "${{data_dir}}/shuffle", writable = true }}]

[[vertices]]
id = "source"
source = "splits"
parallelism = 2
operators = [
  {{ op = "read-csv", columns = ["n"], skip-header = true }},
  {{ op = "write-text", path = "${{data_dir}}/out" }},
]
"#,
        enumerator = plugin("static-enumerator"),
        shuffle = plugin("memory-shuffle"),
        splits = splits.join(", "),
        csv = csv.display(),
        input = input.display(),
    );
    let file = tmp.path().join("job.toml");
    std::fs::write(&file, job).expect("job");
    let data = tmp.path().join("data");
    let out = coordhost(&[
        "run",
        file.to_str().expect("utf-8"),
        "--data-dir",
        data.to_str().expect("utf-8"),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let mut records: Vec<u32> = Vec::new();
    for entry in std::fs::read_dir(data.join("out")).expect("output") {
        let path = entry.expect("entry").path();
        if path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("part-"))
        {
            let body = std::fs::read_to_string(&path).expect("part");
            records.extend(
                body.lines()
                    .map(|l| l.trim().parse::<u32>().expect("a number")),
            );
        }
    }
    records.sort_unstable();
    assert_eq!(records, (1..=12).collect::<Vec<_>>());
}

/// Every file and folder under `root`, sorted (for "nothing written").
fn tree(root: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p.clone());
            }
            out.push(p);
        }
    }
    out.sort();
    out
}

/// Asserts `out` is a refusal: exit 2 and exactly the one line `expected`.
fn assert_refused(out: &Output, expected: &str) {
    assert_eq!(out.status.code(), Some(2), "{}", show(out));
    assert_eq!(
        text(&out.stderr).lines().collect::<Vec<_>>(),
        [expected],
        "{}",
        show(out)
    );
    assert!(
        out.stdout.is_empty(),
        "a refusal calls nothing: {}",
        show(out)
    );
}

#[test]
fn plugin_call_refuses_a_script_without_steps_in_one_line() {
    let scratch = tempfile::tempdir().expect("tempdir");
    let comments = scratch.path().join("comments.steps");
    std::fs::write(&comments, "# only a comment\n\n   # and another\n").expect("script");
    let blank = scratch.path().join("blank.steps");
    std::fs::write(&blank, "").expect("script");
    let expected = "coordhost: --steps: the script has no steps (only blanks, commas or `#` comments); give at least `create`, or leave --steps out for the default script";
    let before = tree(scratch.path());
    for steps in [
        String::new(),
        " , ,".to_string(),
        format!("@{}", comments.display()),
        format!("@{}", blank.display()),
    ] {
        let out = coordhost(&[
            "plugin",
            "call",
            &plugin("static-enumerator"),
            "--config",
            "split.0=x",
            "--steps",
            &steps,
        ]);
        assert_refused(&out, expected);
    }
    assert_eq!(tree(scratch.path()), before, "nothing written");
}

#[test]
fn plugin_call_refuses_granting_the_root_folder_as_a_job_file_does() {
    let scratch = tempfile::tempdir().expect("tempdir");
    for (option, dir) in [
        ("--grant", "/"),
        ("--grant-rw", "/"),
        ("--grant", "/.."),
        ("--grant-rw", "/./"),
    ] {
        let out = coordhost_in(
            scratch.path(),
            &[
                "plugin",
                "call",
                &plugin("static-enumerator"),
                "--config",
                "split.0=x",
                option,
                dir,
            ],
            &[],
        );
        assert_refused(
            &out,
            &format!(
                "coordhost: {option} {dir}: grants the root folder; grant only the folders the plugin needs"
            ),
        );
    }
    assert_eq!(
        tree(scratch.path()),
        Vec::<std::path::PathBuf>::new(),
        "refused before the component is loaded: nothing compiled into the cache"
    );
}

#[test]
fn plugin_new_refuses_an_over_long_name_and_a_dir_that_is_a_file() {
    let parent = tempfile::tempdir().expect("tempdir");
    let file = parent.path().join("a-file");
    std::fs::write(&file, "not a folder\n").expect("file");
    let before = tree(parent.path());
    let new = |name: &str, dir: &Path| {
        coordhost(&[
            "plugin",
            "new",
            name,
            "--kind",
            "split-enumerator",
            "--lang",
            "rust",
            "--dir",
            dir.to_str().expect("utf-8"),
        ])
    };
    let long = "a".repeat(65);
    assert_refused(
        &new(&long, parent.path()),
        "coordhost: NAME: has 65 characters, more than 64 (it names the folder, the crate and the component)",
    );
    assert_refused(
        &new("my-plugin", &file),
        &format!("coordhost: --dir {}: is not a folder", file.display()),
    );
    let under = file.join("sub");
    assert_refused(
        &new("my-plugin", &under),
        &format!(
            "coordhost: --dir {}: cannot be created: `{}` is not a folder",
            under.display(),
            file.display()
        ),
    );
    assert_eq!(tree(parent.path()), before, "nothing written");
    // 64 characters is still a name.
    let out = new(&"b".repeat(64), parent.path());
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
}
