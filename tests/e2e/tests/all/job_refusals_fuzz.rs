//! A few thousand mutated job files, made from the examples, fed to the
//! loader: it never panics or hangs, and every refusal is one line naming
//! the job file. A sample of the refused files goes through the real
//! binary: exit 2, the loader's line, and nothing written.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::support::job::example_job;
use coordhost::config::{LoadOptions, parse_job};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

/// Pieces a careless or hostile edit puts into a job file.
const TOKENS: &[&str] = &[
    "\n",
    "\"",
    "[",
    "]",
    "{",
    "}",
    "=",
    ",",
    "/",
    "..",
    "${",
    "${HOME}",
    "${data_dir",
    "${${job_dir}}",
    "${job_dir}",
    "${data_dir}",
    "\"/\"",
    "\"\"",
    "0",
    "-1",
    "4096",
    "4097",
    "99999999999999999999",
    "auto",
    "[[vertices]]",
    "[[edges]]",
    "[plugins.x]",
    "/dev/zero",
    "\"/etc/passwd\"",
    "writable = true",
    "overwrite = true",
    "\u{0}",
    "é",
    "\\n",
];

/// One edit of the text.
#[derive(Debug, Clone)]
enum Mutation {
    /// Removes `len` bytes at `at` (both taken modulo the text).
    Delete { at: usize, len: usize },
    /// Inserts a token at `at`.
    Insert { at: usize, token: usize },
    /// Replaces the `n`th number with a token.
    Number { n: usize, token: usize },
    /// Duplicates line `n`.
    DuplicateLine { n: usize },
    /// Swaps lines `a` and `b`.
    SwapLines { a: usize, b: usize },
    /// Cuts the text at `at`.
    Truncate { at: usize },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let any = 0..100_000usize;
    let token = 0..TOKENS.len();
    prop_oneof![
        (any.clone(), 1..40usize).prop_map(|(at, len)| Mutation::Delete { at, len }),
        (any.clone(), token.clone()).prop_map(|(at, token)| Mutation::Insert { at, token }),
        (any.clone(), token).prop_map(|(n, token)| Mutation::Number { n, token }),
        any.clone().prop_map(|n| Mutation::DuplicateLine { n }),
        (any.clone(), any.clone()).prop_map(|(a, b)| Mutation::SwapLines { a, b }),
        any.prop_map(|at| Mutation::Truncate { at }),
    ]
}

/// The nearest char boundary at or below `at % (len + 1)`.
fn boundary(text: &str, at: usize) -> usize {
    let mut i = at % (text.len() + 1);
    while !text.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn apply(text: &str, m: &Mutation) -> String {
    match *m {
        Mutation::Delete { at, len } => {
            let start = boundary(text, at);
            let end = boundary(text, (start + len).min(text.len()));
            format!("{}{}", &text[..start], &text[end.max(start)..])
        }
        Mutation::Insert { at, token } => {
            let i = boundary(text, at);
            format!("{}{}{}", &text[..i], TOKENS[token], &text[i..])
        }
        Mutation::Number { n, token } => {
            let spans: Vec<(usize, usize)> = number_spans(text);
            if spans.is_empty() {
                return text.to_string();
            }
            let (s, e) = spans[n % spans.len()];
            format!("{}{}{}", &text[..s], TOKENS[token], &text[e..])
        }
        Mutation::DuplicateLine { n } => {
            let mut lines: Vec<&str> = text.lines().collect();
            let i = n % lines.len().max(1);
            if let Some(l) = lines.get(i).copied() {
                lines.insert(i, l);
            }
            lines.join("\n")
        }
        Mutation::SwapLines { a, b } => {
            let mut lines: Vec<&str> = text.lines().collect();
            let n = lines.len().max(1);
            if !lines.is_empty() {
                lines.swap(a % n, b % n);
            }
            lines.join("\n")
        }
        Mutation::Truncate { at } => text[..boundary(text, at)].to_string(),
    }
}

fn number_spans(text: &str) -> Vec<(usize, usize)> {
    let bytes = text.as_bytes();
    let mut spans = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i].is_ascii_digit() {
            let s = i;
            while i < bytes.len() && bytes[i].is_ascii_digit() {
                i += 1;
            }
            spans.push((s, i));
        } else {
            i += 1;
        }
    }
    spans
}

/// Every file and folder under `root`, with sizes.
fn listing(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let path = e.path();
            match std::fs::symlink_metadata(&path) {
                Ok(m) if m.is_dir() => {
                    out.push(format!("{}/", path.display()));
                    stack.push(path);
                }
                Ok(m) => out.push(format!("{} {}", path.display(), m.len())),
                Err(_) => {}
            }
        }
    }
    out.sort();
    out
}

/// Runs `body` on a thread and fails if it takes longer than `limit`
/// (a hang in the loader), passing a panic of `body` on.
fn within(limit: Duration, body: impl FnOnce() + Send + 'static) {
    let (tx, rx) = std::sync::mpsc::channel();
    let worker = std::thread::spawn(move || {
        body();
        let _ = tx.send(());
    });
    match rx.recv_timeout(limit) {
        Ok(()) => worker.join().expect("no panic"),
        Err(_) if worker.is_finished() => {
            if let Err(panic) = worker.join() {
                std::panic::resume_unwind(panic);
            }
        }
        Err(_) => panic!("the loader did not finish within {limit:?}"),
    }
}

/// A refused mutation kept for the binary: the text and the loader's line.
struct Sample {
    text: String,
    line: String,
}

#[test]
fn thousands_of_mutated_examples_load_or_are_refused_in_one_line_without_panic_or_hang() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path().to_path_buf();
    let words = root.join("words");
    coordhost_datagen::write_words(&words, 1, 20, 3).expect("input");
    let tpch = root.join("tpch");
    std::fs::create_dir_all(&tpch).expect("tpch input");
    let examples: Vec<(PathBuf, String)> = [
        example_job("wordcount.toml", "build/data/words", &words, &root),
        example_job("tpch-q1.toml", "build/data/tpch-sf0.1", &tpch, &root),
    ]
    .into_iter()
    .map(|p| {
        let text = std::fs::read_to_string(&p).expect("example");
        (p, text)
    })
    .collect();
    let samples: &'static Mutex<Vec<Sample>> = Box::leak(Box::new(Mutex::new(Vec::new())));
    let loader_root = root.clone();
    within(Duration::from_secs(600), move || {
        let mut runner = TestRunner::new(Config {
            cases: 3000,
            failure_persistence: None,
            ..Config::default()
        });
        let strategy = (0..examples.len(), prop::collection::vec(mutation(), 1..4));
        let data_dir = loader_root.join("state");
        let counter = Mutex::new(0usize);
        runner
            .run(&strategy, |(which, mutations)| {
                let (path, original) = &examples[which];
                let text = mutations.iter().fold(original.clone(), |t, m| apply(&t, m));
                let started = Instant::now();
                let result = parse_job(
                    path,
                    &text,
                    &LoadOptions {
                        data_dir: data_dir.clone(),
                        cache_dir: None,
                        log_on_objects: false,
                    },
                );
                prop_assert!(
                    started.elapsed() < Duration::from_secs(20),
                    "one load took {:?}",
                    started.elapsed()
                );
                if let Err(e) = result {
                    let line = e.to_string();
                    prop_assert_eq!(line.lines().count(), 1, "not one line: {:?}", line);
                    prop_assert!(
                        line.starts_with(&path.display().to_string()),
                        "the refusal does not name the job file: {}",
                        line
                    );
                    let mut n = counter.lock().expect("counter");
                    *n += 1;
                    if *n % 150 == 1 {
                        samples.lock().expect("samples").push(Sample { text, line });
                    }
                }
                Ok(())
            })
            .expect("every mutated job file loads or is refused in one line");
    });
    let samples = samples.lock().expect("samples");
    assert!(
        samples.len() >= 5,
        "too few refusals sampled: {}",
        samples.len()
    );
    for (i, s) in samples.iter().enumerate() {
        // Same folder as the examples, so relative paths resolve alike.
        let job = root.join("wordcount.toml");
        let tpch_job = root.join("tpch-q1.toml");
        let path = if s.line.starts_with(&tpch_job.display().to_string()) {
            tpch_job
        } else {
            job
        };
        let original = std::fs::read_to_string(&path).expect("example");
        std::fs::write(&path, &s.text).expect("mutated job");
        let before = listing(&root);
        let out = crate::support::coordhost()
            .arg("run")
            .arg(&path)
            .arg("--data-dir")
            .arg(root.join("state"))
            .output()
            .expect("coordhost runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "sample {i}: {stderr}");
        assert_eq!(
            stderr.lines().collect::<Vec<_>>(),
            [format!("coordhost: {}", s.line)],
            "sample {i}"
        );
        assert_eq!(listing(&root), before, "sample {i} wrote files");
        std::fs::write(&path, original).expect("restore the example");
    }
}
