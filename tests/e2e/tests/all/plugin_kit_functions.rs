//! `coordhost plugin test` and `plugin new` for scalar functions (issue 27,
//! item 4) through the `coordhost` binary: every check passes on the
//! sample functions in Rust, Python and JavaScript, and each check fails,
//! named with its reason, on `faulty-function` in the mode that breaks it.
//! The generated Python and JavaScript projects are built and tested by
//! `scripts/kit-check.sh` (part of `make test`).

use std::process::Output;

use crate::support::{cache_dir, plugin_path, workspace};

/// The checks of a scalar function, in the order `plugin test` prints them.
const CHECKS: [&str; 6] = [
    "signature-stable",
    "declares-deterministic",
    "answers-declared-type-and-rows",
    "deterministic-across-calls",
    "wrong-schema-is-an-error-value",
    "not-arrow-is-an-error-value",
];

fn coordhost(args: &[&str]) -> Output {
    crate::support::coordhost()
        .args(args)
        .env("COORDHOST_CACHE_DIR", cache_dir())
        .output()
        .expect("coordhost runs")
}

fn show(out: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}--- stderr\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `plugin test` of the sample `name` with `config` (`key=value`).
fn plugin_test(name: &str, config: &[&str]) -> Output {
    let path = plugin_path(name).to_string_lossy().into_owned();
    let mut args = vec!["plugin", "test", path.as_str()];
    for c in config {
        args.extend(["--config", c]);
    }
    coordhost(&args)
}

#[test]
fn plugin_test_passes_the_sample_functions_in_rust_python_and_js() {
    for (name, signature) in [
        (
            "tax-function",
            "(Decimal128(15, 2), Utf8) -> Decimal128(15, 2), deterministic: true",
        ),
        (
            "py-function",
            "(Decimal128(15, 2), Decimal128(15, 2)) -> Decimal128(15, 2), deterministic: true",
        ),
        ("js-function", "(Utf8) -> Int64, deterministic: true"),
        ("faulty-function", "(Int64) -> Int64, deterministic: true"),
    ] {
        let out = plugin_test(name, &[]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{name}: {}", show(&out));
        for check in CHECKS {
            assert!(
                stdout.contains(&format!("ok      {check}: ")),
                "{name}: `{check}` passed: {stdout}"
            );
        }
        assert!(stdout.contains("passed: 6 checks"), "{name}: {stdout}");
        assert!(
            stdout.contains(&format!("scalar-function plugin, signature: {signature}\n"))
                && !stdout.contains("batch snapshots"),
            "{name}: the header line is the signature: {stdout}"
        );
    }
}

/// The Python and JavaScript samples configured as the benchmark's
/// `plus_one` (host/benches/functions.rs) pass every check too, with the
/// signature that config key `function` chose.
#[test]
fn plugin_test_passes_the_python_and_js_samples_configured_as_plus_one() {
    for name in ["py-function", "js-function"] {
        let out = plugin_test(name, &["function=plus_one"]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{name}: {}", show(&out));
        assert!(stdout.contains("passed: 6 checks"), "{name}: {stdout}");
        assert!(
            stdout.contains(
                "scalar-function plugin, signature: (Int64) -> Int64, deterministic: true\n"
            ),
            "{name}: {stdout}"
        );
    }
}

#[test]
fn each_function_check_fails_on_the_faulty_function_that_breaks_it() {
    // (mode, the check that fails, what its line says, checks that still pass)
    let cases: [(&str, &str, &[&str], &[&str]); 7] = [
        (
            "unstable-signature",
            "signature-stable",
            &[
                "call 2 of `signature` on fresh instance 1 said (Int64) -> Float64",
                "at load it said (Int64) -> Int64",
            ],
            &[
                "answers-declared-type-and-rows",
                "deterministic-across-calls",
            ],
        ),
        (
            "nondeterministic",
            "declares-deterministic",
            &["`deterministic: false`", "a job refuses this function"],
            &["signature-stable", "deterministic-across-calls"],
        ),
        (
            "wrong-type",
            "answers-declared-type-and-rows",
            &[
                "a batch of 301 rows",
                "of type Utf8, but the function declared Int64",
            ],
            &["signature-stable", "wrong-schema-is-an-error-value"],
        ),
        (
            "wrong-length",
            "answers-declared-type-and-rows",
            &["the answer has 300 rows, but the function was given 301"],
            &["signature-stable", "declares-deterministic"],
        ),
        (
            "trap",
            "answers-declared-type-and-rows",
            &["`invoke` trapped", "plus_one was told to trap"],
            &["signature-stable", "wrong-schema-is-an-error-value"],
        ),
        (
            "drifting",
            "deterministic-across-calls",
            &["the second call on one instance answered otherwise: row 0:"],
            &[
                "answers-declared-type-and-rows",
                "wrong-schema-is-an-error-value",
            ],
        ),
        (
            "unchecked",
            "wrong-schema-is-an-error-value",
            &[
                "a batch whose first column is Utf8: expected an error value (`invalid-input`), got a trap",
                "does not check its input",
            ],
            &[
                "answers-declared-type-and-rows",
                "deterministic-across-calls",
            ],
        ),
    ];
    for (mode, failed, says, passed) in cases {
        let config = format!("mode={mode}");
        let out = plugin_test("faulty-function", &[&config]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(1), "{mode}: {}", show(&out));
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&format!("FAILED  {failed}: ")))
            .unwrap_or_else(|| panic!("{mode}: `{failed}` failed: {stdout}"));
        for s in says {
            assert!(line.contains(s), "{mode}: `{s}` in: {line}");
        }
        for p in passed {
            assert!(
                stdout.contains(&format!("ok      {p}: ")),
                "{mode}: `{p}` still passes: {stdout}"
            );
        }
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(failed),
            "{mode}: stderr names the failed check: {}",
            show(&out)
        );
    }
    // Bytes that are not Arrow IPC trap the unchecked function too.
    let out = plugin_test("faulty-function", &["mode=unchecked"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("FAILED  not-arrow-is-an-error-value: bytes that are not Arrow IPC: expected an error value (`invalid-input`), got a trap"),
        "{stdout}"
    );
}

#[test]
fn plugin_new_writes_python_and_js_scalar_functions_with_the_function_wit() {
    let parent = tempfile::tempdir().expect("tempdir");
    let dir = parent.path().to_str().expect("utf-8");
    let repo_wit =
        std::fs::read_to_string(workspace().join("wit/function/function.wit")).expect("wit");
    for (lang, name, main) in [
        ("python", "py-scaled", "app.py"),
        ("js", "js-scaled", "function.js"),
    ] {
        let out = coordhost(&[
            "plugin",
            "new",
            name,
            "--kind",
            "scalar-function",
            "--lang",
            lang,
            "--dir",
            dir,
        ]);
        assert_eq!(out.status.code(), Some(0), "{lang}: {}", show(&out));
        let project = parent.path().join(name);
        let wit = std::fs::read_to_string(project.join("wit/function.wit")).expect("wit");
        assert_eq!(
            wit, repo_wit,
            "{lang}: the coordhost:function WIT is copied in"
        );
        assert!(!project.join("wit/types.wit").exists(), "{lang}");
        let source = std::fs::read_to_string(project.join(main)).expect("source");
        let crate_name = name.replace('-', "_");
        assert!(
            source.contains(&crate_name) && !source.contains("{{"),
            "{lang}: {source}"
        );
    }
    // The Python project ships the sample's codec as it is.
    let codec =
        std::fs::read_to_string(parent.path().join("py-scaled/arrow_ipc.py")).expect("codec");
    let sample =
        std::fs::read_to_string(workspace().join("plugins/py-arrow/arrow_ipc.py")).expect("codec");
    assert_eq!(codec, sample);
    // The JavaScript project pins apache-arrow as the sample does.
    let package = std::fs::read_to_string(parent.path().join("js-scaled/package.json"))
        .expect("package.json");
    assert!(
        package.contains("\"apache-arrow\": \"21.2.0\""),
        "{package}"
    );
}
