//! Helpers of the `job_*` tests: example job files rewritten to point at a
//! test's own data and the built sample plugins, a run with the shared
//! component cache, and reading a sink's published output. (The end-to-end
//! tests use them too; their run of the binary with test knobs is
//! `knobs::run_ok_with` there.)

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::{cache_dir, plugin_path, published_lines, workspace};
use coordhost::job::{JobStatus, RunOptions, Summary, run_job};

/// Writes `examples/<example>` into `dir` with its input folder replaced by
/// `data` and its plugin paths by the built plugins; returns the job file.
pub fn example_job(example: &str, input_rel: &str, data: &Path, dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(workspace().join("examples").join(example))
        .expect("example exists");
    let plugins = plugin_path("file-enumerator")
        .parent()
        .expect("plugin dir")
        .to_path_buf();
    let text = text
        .replace(
            &format!("${{job_dir}}/../{input_rel}"),
            &data.display().to_string(),
        )
        .replace(&format!("../{input_rel}"), &data.display().to_string())
        .replace("../build/plugins", &plugins.display().to_string());
    // The demo slows its final stage (to have time to kill it); tests run at full speed.
    let text: String = text
        .lines()
        .map(|l| {
            if l.starts_with("record-delay-us") {
                "record-delay-us = 0"
            } else {
                l
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        !text.contains("../build"),
        "every build path was replaced:\n{text}"
    );
    let job = dir.join(example);
    std::fs::write(&job, text).expect("write job");
    job
}

/// Options for `job` with data under `data_dir`, `workers` threads, the shared cache.
pub fn options(job: &Path, data_dir: &Path, workers: usize) -> RunOptions {
    let mut o = RunOptions::new(job, data_dir);
    o.workers = Some(workers);
    o.cache_dir = Some(cache_dir());
    o
}

/// Runs in-process and asserts the job finished.
pub fn run_ok(opts: &RunOptions) -> Summary {
    assert_finished(run_job(opts).expect("the job starts"))
}

/// `summary`, asserting the job finished (the error in the message if not).
pub fn assert_finished(summary: Summary) -> Summary {
    assert_eq!(
        summary.status,
        JobStatus::Finished,
        "job failed: {:?}",
        summary.error
    );
    summary
}

/// Parses `word count` lines of the word-count output; a word seen twice fails.
pub fn word_count_output(out: &Path) -> BTreeMap<String, u64> {
    let mut got = BTreeMap::new();
    for line in published_lines(out) {
        let (w, n) = line.split_once(' ').expect("`word count` line");
        let prev = got.insert(w.to_string(), n.parse::<u64>().expect("count"));
        assert!(prev.is_none(), "word `{w}` appears twice in the output");
    }
    got
}
