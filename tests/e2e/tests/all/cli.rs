//! The `coordhost` binary as a user runs it: `plugin check` on every sample
//! plugin and on every kind of bad file, and `log inspect` on the golden log.

use std::path::Path;
use std::process::Output;

use crate::support::{plugin_path, workspace};

fn coordhost(args: &[&str]) -> Output {
    crate::support::coordhost()
        .args(args)
        .output()
        .expect("coordhost runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn plugin_check_and_call_show_a_scalar_functions_world_and_signature() {
    let path = plugin_path("tax-function");
    let out = coordhost(&["plugin", "check", path.to_str().unwrap()]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    for line in [
        "scalar-function plugin\n",
        "  world:                   coordhost:function/scalar-function-plugin@0.1.0\n",
        "  signature:               (Decimal128(15, 2), Utf8) -> Decimal128(15, 2), deterministic: true\n",
        "  exports:                 coordhost:function/scalar-function@0.1.0\n",
    ] {
        assert!(stdout.contains(line), "`{line}` in: {stdout}");
    }
    assert!(!stdout.contains("other exports"), "{stdout}");
    let out = coordhost(&["plugin", "call", path.to_str().unwrap()]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains("scalar-function plugin, signature: (Decimal128(15, 2), Utf8) -> Decimal128(15, 2), deterministic: true"),
        "{stdout}"
    );
    // A non-deterministic one is shown as it declares itself; only a job refuses it.
    let path = plugin_path("faulty-function");
    let out = coordhost(&[
        "plugin",
        "call",
        path.to_str().unwrap(),
        "--config",
        "mode=nondeterministic",
    ]);
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("(Int64) -> Int64, deterministic: false"),
        "{stdout}{}",
        text(&out.stderr)
    );
}

#[test]
fn plugin_check_names_kind_version_and_snapshot_support_of_every_sample_plugin() {
    let expected = [
        ("file-enumerator", "split-enumerator", "yes"),
        ("static-enumerator", "split-enumerator", "no"),
        ("faulty-enumerator", "split-enumerator", "yes"),
        ("py-enumerator", "split-enumerator", "yes"),
        ("js-enumerator", "split-enumerator", "yes"),
        ("local-shuffle", "shuffle-master", "yes"),
        ("memory-shuffle", "shuffle-master", "no"),
        ("local-shuffle-0.1.0", "shuffle-master", "yes"),
        ("static-enumerator-0.1.1", "split-enumerator", "no"),
        ("py-shuffle", "shuffle-master", "yes"),
    ];
    for (name, kind, snapshot) in expected {
        // Two samples stay on the frozen contract 0.1.0 (wit/0.1.0/), one
        // on 0.1.1 (wit/0.1.1/): the host loads them as they are
        // (docs/write-a-plugin.md, "Contract versions"). Only the shuffle
        // masters of 0.1.1 and later read worker reports.
        let version = match name {
            "memory-shuffle" | "local-shuffle-0.1.0" => "0.1.0",
            "static-enumerator-0.1.1" => "0.1.1",
            _ => "0.1.3",
        };
        let reads = matches!(name, "local-shuffle" | "py-shuffle");
        let path = plugin_path(name);
        let out = coordhost(&["plugin", "check", path.to_str().unwrap()]);
        let stdout = text(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{name}: {stdout}{}",
            text(&out.stderr)
        );
        assert!(
            stdout.contains(&format!("{kind} plugin")),
            "{name}: {stdout}"
        );
        assert!(
            stdout.contains(&format!("coordhost:plugin/{kind}-plugin@{version}")),
            "{name}: {stdout}"
        );
        if kind == "shuffle-master" {
            let line = if reads {
                "reads worker reports:    yes (imports job-shuffle-context)"
            } else {
                "reads worker reports:    no (with worker processes the host answers from their reports)"
            };
            assert!(stdout.contains(line), "{name}: {stdout}");
        } else {
            assert!(!stdout.contains("reads worker reports"), "{name}: {stdout}");
        }
        assert!(
            stdout.contains(&format!("supports batch snapshot: {snapshot}")),
            "{name}: {stdout}"
        );

        let json = coordhost(&["plugin", "check", "--json", path.to_str().unwrap()]);
        let value: serde_json::Value = serde_json::from_slice(&json.stdout).expect("valid JSON");
        assert_eq!(value["valid"], true);
        assert_eq!(value["kind"], kind);
        assert_eq!(value["version"], version);
        assert_eq!(value["reads_worker_reports"], reads, "{name}");
        assert_eq!(value["world"], format!("{kind}-plugin"));
        assert_eq!(value["supports_batch_snapshot"], snapshot == "yes");
    }
}

fn assert_refused(file: &Path, needle: &str) {
    let out = coordhost(&["plugin", "check", file.to_str().unwrap()]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{}: {stderr}", file.display());
    assert!(
        out.stdout.is_empty(),
        "nothing on stdout for a refused file"
    );
    assert_eq!(
        stderr.trim_end().lines().count(),
        1,
        "one clear line: {stderr}"
    );
    assert!(
        stderr.contains(file.to_str().unwrap()),
        "names the file: {stderr}"
    );
    assert!(
        stderr.contains(needle),
        "says what is wrong ({needle}): {stderr}"
    );
}

#[test]
fn plugin_check_refuses_wrong_worlds_and_non_components_with_one_line_and_exit_2() {
    assert_refused(&plugin_path("wrong-world"), "version 0.2.0");
    assert_refused(&plugin_path("not-a-plugin"), "exports neither");
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.wasm");
    std::fs::write(&empty, b"").unwrap();
    assert_refused(&empty, "empty");
    let garbage = dir.path().join("garbage.wasm");
    std::fs::write(&garbage, b"#!/bin/sh\necho hi\n").unwrap();
    assert_refused(&garbage, "not a WebAssembly component");
    assert_refused(&dir.path().join("absent.wasm"), "cannot read");
}

#[test]
fn log_inspect_prints_the_golden_log_and_refuses_a_folder_without_one() {
    let golden = workspace().join("host/tests/data/golden-log-v1");
    let out = coordhost(&["log", "inspect", golden.to_str().unwrap()]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains("ExecutionFinished") || stdout.contains("execution-finished"),
        "{stdout}"
    );
    let json = coordhost(&["log", "inspect", "--json", golden.to_str().unwrap()]);
    let value: serde_json::Value = serde_json::from_slice(&json.stdout).expect("valid JSON");
    assert!(value["events"].as_array().is_some_and(|e| !e.is_empty()));

    // A data directory holding one job's folder is accepted too.
    let data = tempfile::tempdir().unwrap();
    let job = data.path().join("some-job");
    std::fs::create_dir_all(&job).unwrap();
    std::fs::write(data.path().join("summary.json"), "{}").unwrap();
    std::fs::create_dir_all(job.join("log")).unwrap();
    for entry in std::fs::read_dir(golden.join("log")).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), job.join("log").join(entry.file_name())).unwrap();
    }
    let out = coordhost(&["log", "inspect", data.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // The event lines (`SEGMENT:OFFSET KIND ...`); header and torn-tail lines name paths.
    let events = |s: &str| {
        s.lines()
            .filter(|l| l.starts_with("0000"))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        events(&text(&out.stdout)),
        events(&stdout),
        "same events as naming the log folder"
    );

    let empty = tempfile::tempdir().unwrap();
    let out = coordhost(&["log", "inspect", empty.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains(empty.path().to_str().unwrap()),
        "{}",
        text(&out.stderr)
    );
}
