//! `coordhost plugin test` and `plugin call` for source readers (issue 27,
//! item 4) through the `coordhost` binary: every check passes on the sample
//! readers (Rust `fixed-width-reader`, Python `py-reader`), and each check
//! fails, named with its reason, on `faulty-reader` in the mode that breaks
//! it. The projects `plugin new` generates in Rust, Python and JavaScript
//! are built as their READMEs say and pass `plugin test` and `plugin call`
//! in `scripts/kit-check.sh` (part of `make test`), with every other
//! template.

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::support::{cache_dir, plugin_path, workspace};

/// The checks of a source reader, in the order `plugin test` prints them.
const CHECKS: [&str; 7] = [
    "configure-accepts-the-schema",
    "reads-the-declared-schema",
    "deterministic-across-reads",
    "byte-ranges-cover-the-file",
    "unreadable-split-is-an-error-value",
    "inline-split-is-read-or-refused",
    "bad-record-is-invalid-split",
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

/// `plugin SUBCOMMAND wasm` with `args` after it.
fn plugin(subcommand: &str, wasm: &Path, args: &[String]) -> Output {
    let wasm = wasm.to_string_lossy().into_owned();
    let mut all = vec!["plugin", subcommand, wasm.as_str()];
    all.extend(args.iter().map(String::as_str));
    coordhost(&all)
}

/// `--column NAME=TYPE` for each column, `--input`, and `--bad-input` when given.
fn sample_args(columns: &[&str], input: &Path, bad: Option<&Path>) -> Vec<String> {
    let mut args = Vec::new();
    for c in columns {
        args.extend(["--column".to_string(), (*c).to_string()]);
    }
    args.extend(["--input".to_string(), input.display().to_string()]);
    if let Some(bad) = bad {
        args.extend(["--bad-input".to_string(), bad.display().to_string()]);
    }
    args
}

/// Asserts `out` is a passed `plugin test` of every check, headed by `schema`.
fn assert_all_passed(what: &str, out: &Output, schema: &str) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{what}: {}", show(out));
    for check in CHECKS {
        assert!(
            stdout.contains(&format!("ok      {check}: ")),
            "{what}: `{check}` passed: {stdout}"
        );
    }
    assert!(stdout.contains("passed: 7 checks"), "{what}: {stdout}");
    assert!(
        stdout.contains(&format!(
            "source-reader plugin, declared schema: {schema}\n"
        )),
        "{what}: the header line is the declared schema: {stdout}"
    );
}

/// A file of integers, one per line (an empty line among them, no break
/// at the end), and a file with a line that is not one.
fn integer_files(dir: &Path) -> (PathBuf, PathBuf) {
    let good = dir.join("ints.txt");
    let text: Vec<String> = (0..40).map(|i| (i * 37 - 500).to_string()).collect();
    std::fs::write(
        &good,
        format!("{}\n\n{}", text[..20].join("\n"), text[20..].join("\n")),
    )
    .expect("ints");
    let bad = dir.join("bad-ints.txt");
    std::fs::write(&bad, "1\n2\nthree\n4\n").expect("bad ints");
    (good, bad)
}

#[test]
fn plugin_test_passes_the_sample_readers_in_rust_and_python() {
    let tmp = tempfile::tempdir().expect("tempdir");
    // py-reader on the example's access log, and a log with a line that is not one.
    let log = workspace().join("examples/access-log/access-0.log");
    let bad_log = tmp.path().join("bad.log");
    std::fs::write(
        &bad_log,
        "10.0.0.1 - - [01/Dec/2026:10:00:00 +0000] \"GET / HTTP/1.1\" 200 12\nGET / HTTP/1.1 200\n",
    )
    .expect("bad log");
    let columns = [
        "host=varchar",
        "user=varchar",
        "time=bigint",
        "method=varchar",
        "path=varchar",
        "status=int",
        "bytes=bigint",
        "referer=varchar",
    ];
    let out = plugin(
        "test",
        &plugin_path("py-reader"),
        &sample_args(&columns, &log, Some(&bad_log)),
    );
    assert_all_passed(
        "py-reader",
        &out,
        "(host Utf8, user Utf8, time Int64, method Utf8, path Utf8, status Int32, bytes Int64, referer Utf8)",
    );

    // fixed-width-reader on records of widths 4 and 10, one with a bad date.
    let fw = tmp.path().join("accounts.txt");
    let lines: Vec<String> = (0..30)
        .map(|i| format!("{i:>4}{:<10}", format!("2026-11-{:02}", 1 + i % 28)))
        .collect();
    std::fs::write(&fw, lines.join("\n")).expect("fixed-width");
    let bad_fw = tmp.path().join("bad-accounts.txt");
    std::fs::write(&bad_fw, "   12026-11-01\n   22026-13-01\n").expect("bad fixed-width");
    let mut args = sample_args(&["id=bigint", "opened=date"], &fw, Some(&bad_fw));
    args.extend(["--config".into(), "widths=4,10".into()]);
    let out = plugin("test", &plugin_path("fixed-width-reader"), &args);
    assert_all_passed("fixed-width-reader", &out, "(id Int64, opened Date32)");

    // The faulty reader in its reference mode breaks no rule.
    let (ints, bad_ints) = integer_files(tmp.path());
    let mut args = sample_args(&["n=bigint", "note=varchar"], &ints, Some(&bad_ints));
    args.extend(["--config".into(), "mode=lines".into()]);
    let out = plugin("test", &plugin_path("faulty-reader"), &args);
    assert_all_passed("faulty-reader lines", &out, "(n Int64, note Utf8)");
}

#[test]
fn each_reader_check_fails_on_the_faulty_reader_mode_that_breaks_it() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (ints, bad_ints) = integer_files(tmp.path());
    let secret = tempfile::tempdir().expect("secret dir");
    let secret_file = secret.path().join("secret.txt");
    std::fs::write(&secret_file, "not granted\n").expect("secret");
    let escape = format!("mode=escape,path={}", secret_file.display());
    // (config, the check that fails, what its line says, checks that still pass)
    let cases: Vec<(&str, &str, Vec<&str>, Vec<&str>)> = vec![
        (
            "mode=nonsense",
            "configure-accepts-the-schema",
            vec!["`invalid-config`", "unknown mode `nonsense`"],
            vec![],
        ),
        (
            "mode=wrong-schema",
            "reads-the-declared-schema",
            vec![
                "the whole input: a broken contract",
                "the batch's columns are (x Utf8), but the table declares (n Int64, note Utf8)",
            ],
            vec!["configure-accepts-the-schema"],
        ),
        (
            "mode=trap",
            "reads-the-declared-schema",
            vec!["the whole input: a trap", "faulty-reader: trap mode"],
            vec!["configure-accepts-the-schema"],
        ),
        (
            &escape,
            "reads-the-declared-schema",
            vec!["the whole input: `io`", "cannot read", "secret.txt"],
            vec!["configure-accepts-the-schema"],
        ),
        (
            "mode=nondeterministic",
            "deterministic-across-reads",
            vec![
                "the second read on one instance gave other batches: row 0: n=-500, note=null then n=-498, note=null",
            ],
            vec![
                "reads-the-declared-schema",
                "unreadable-split-is-an-error-value",
                "bad-record-is-invalid-split",
            ],
        ),
        (
            "mode=whole-file",
            "byte-ranges-cover-the-file",
            vec![
                "the whole file gave 40 rows, its 3 ranges 120",
                "read the records that start in the range",
            ],
            vec![
                "deterministic-across-reads",
                "inline-split-is-read-or-refused",
                "bad-record-is-invalid-split",
            ],
        ),
        (
            "mode=panicky",
            "unreadable-split-is-an-error-value",
            vec![
                "which does not exist: expected an error value, got a trap",
                "panicky mode opens without a check",
            ],
            vec!["reads-the-declared-schema", "byte-ranges-cover-the-file"],
        ),
        (
            "mode=panicky",
            "bad-record-is-invalid-split",
            vec![
                "expected the error value `invalid-split`, got a trap",
                "panicky mode parses without a check",
            ],
            vec!["deterministic-across-reads"],
        ),
        (
            "mode=vague",
            "bad-record-is-invalid-split",
            vec![
                "the message does not name the split (`bad-split`) or the file: invalid split: a bad line",
            ],
            vec![
                "reads-the-declared-schema",
                "byte-ranges-cover-the-file",
                "unreadable-split-is-an-error-value",
            ],
        ),
    ];
    for (config, failed, says, passed) in cases {
        let mut args = sample_args(&["n=bigint", "note=varchar"], &ints, Some(&bad_ints));
        for pair in config.split(',') {
            args.extend(["--config".to_string(), pair.to_string()]);
        }
        let out = plugin("test", &plugin_path("faulty-reader"), &args);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(1), "{config}: {}", show(&out));
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&format!("FAILED  {failed}: ")))
            .unwrap_or_else(|| panic!("{config}: `{failed}` failed: {stdout}"));
        for s in says {
            assert!(line.contains(s), "{config}: `{s}` in: {line}");
        }
        for p in passed {
            assert!(
                stdout.contains(&format!("ok      {p}: ")),
                "{config}: `{p}` still passes: {stdout}"
            );
        }
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(failed),
            "{config}: stderr names the failed check: {}",
            show(&out)
        );
    }
}

#[test]
fn plugin_call_reads_the_sample_and_prints_the_bad_record_error() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (ints, bad_ints) = integer_files(tmp.path());
    let faulty = plugin_path("faulty-reader");
    let mut args = sample_args(&["n=bigint"], &ints, None);
    args.extend(["--config".into(), "mode=lines".into()]);
    let out = plugin("call", &faulty, &args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    for line in [
        "source-reader plugin (WIT coordhost:reader@0.1.0)\n",
        "configure(config [(\"mode\", \"lines\")], schema (n Int64))\n  -> ok\n",
        "file-range ",
        "  -> batch 1: 40 rows\n     n=-500\n     n=-463\n     n=-426\n",
        "  -> none: 1 batches, 40 rows\n",
    ] {
        assert!(stdout.contains(line), "`{line}` in: {stdout}");
    }
    // The bad sample's error is printed and ends the transcript: exit 1.
    let mut args = sample_args(&["n=bigint"], &ints, Some(&bad_ints));
    args.extend(["--config".into(), "mode=lines".into()]);
    let out = plugin("call", &faulty, &args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(
        stdout.contains("  -> error: plugin `faulty-reader`: `open` failed: invalid split: split `bad-input`, line at byte 4: `three` is not an integer"),
        "{stdout}"
    );
}

#[test]
fn reader_options_are_refused_in_one_line_naming_the_option() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (ints, _) = integer_files(tmp.path());
    let reader = plugin_path("faulty-reader");
    let ints_arg = ints.display().to_string();
    let cases: Vec<(PathBuf, Vec<&str>, &str)> = vec![
        (
            reader.clone(),
            vec!["--input", &ints_arg],
            "--column: a source reader is tested against a declared schema",
        ),
        (
            reader.clone(),
            vec!["--column", "n=bigint"],
            "--input: a source reader is tested on a sample",
        ),
        (
            reader.clone(),
            vec!["--column", "n=bigint(3)", "--input", &ints_arg],
            "--column n=bigint(3): not a column type; use one of `bigint`",
        ),
        (
            reader.clone(),
            vec![
                "--column", "n=bigint", "--column", "n=int", "--input", &ints_arg,
            ],
            "--column: `n`: give each column a name, once",
        ),
        (
            reader.clone(),
            vec!["--column", "n=bigint", "--input", "/no/such/sample.txt"],
            "--input /no/such/sample.txt: ",
        ),
        (
            plugin_path("tax-function"),
            vec!["--input", &ints_arg],
            "--input: only a source reader takes --column, --input and --bad-input; this is a scalar-function plugin",
        ),
    ];
    for (wasm, args, says) in cases {
        for sub in ["test", "call"] {
            let args: Vec<String> = args.iter().map(ToString::to_string).collect();
            let out = plugin(sub, &wasm, &args);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{sub} {args:?}: {}", show(&out));
            let lines: Vec<&str> = stderr
                .lines()
                .filter(|l| !l.starts_with("compiling "))
                .collect();
            assert_eq!(lines.len(), 1, "one line: {stderr}");
            assert!(
                stderr.contains(says),
                "{sub} {args:?}: `{says}` in: {stderr}"
            );
        }
    }
}
