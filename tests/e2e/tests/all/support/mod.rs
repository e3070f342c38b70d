//! The one support module of the end-to-end tests. Where the built sample
//! plugins are, the shared compiled-component cache, the examples rewritten
//! for a test and a sink's output read back come from the library's own
//! integration tests (`host/tests/all/support`, included as [`library`]:
//! one copy of what both need). Helpers of one area live in a submodule:
//!
//! - [`process`]: the `coordhost` binary (the one place that names it) with
//!   the test environment, and every process a test starts: its pid, its
//!   logs, signals, kills and waits with deadlines;
//! - [`crash`]: real `coordhost run` processes killed with SIGKILL, the word
//!   count job they run, the `--summary-json` file and `log inspect`;
//! - [`recovery`]: topology T1 of docs/recovery.md run in-process, with
//!   simulated crashes, and the event log read back;
//! - [`job`]: the examples rewritten for a test, sink output read back;
//! - [`knobs`]: a run of the binary with test knobs (fail points): a
//!   simulated crash, a failing attempt, a lost partition;
//! - [`events`]: one event of every kind and logs over `MemoryStorage`;
//! - [`damage`]: result partitions damaged the way disks and people do;
//! - [`workers`]: `coordhost worker` processes; [`etcd`]: a real etcd;
//!   [`netns`]: machines of their own in network namespaces;
//! - [`ui`]: HTTP to `run --ui`, and the recovered job its tests look at;
//! - [`s3`]: a real S3 server (SeaweedFS) per test, and [`fault_proxy`]
//!   between it and `coordhost` to inject 503s, delays and outages.

#[allow(
    dead_code,
    reason = "the library's tests' helpers of the in-process plugin host, which these tests do not call"
)]
#[path = "../../../../../host/tests/all/support/mod.rs"]
mod library;
pub use library::{
    cache_dir, events, expected_word_counts, job, part_files, plugin_path, published_lines,
    workspace,
};

pub mod crash;
pub mod damage;
pub mod etcd;
pub mod fault_proxy;
pub mod knobs;
pub mod netns;
pub mod process;
pub use process::coordhost;
pub mod recovery;
pub mod s3;
pub use s3::ports;
pub mod ui;
pub mod workers;

use std::path::{Path, PathBuf};

/// The `[plugins.NAME]` table of a shuffle master, the sample plugin
/// `plugin` (e.g. `local-shuffle`), whose partitions live under
/// `${data_dir}/shuffle` (granted read-write), with `extra_config` (each key
/// after a comma, "" for none) added to its `config` table. Every job file a
/// test writes uses this one table.
pub fn shuffle_table(name: &str, plugin: &str, extra_config: &str) -> String {
    format!(
        r#"[plugins.{name}]
component = {component}
kind = "shuffle-master"
config = {{ root = "${{data_dir}}/shuffle"{extra_config} }}
dirs = [{{ path = "${{data_dir}}/shuffle", writable = true }}]
"#,
        component = toml_string(&plugin_path(plugin).display().to_string()),
    )
}

/// `s` as a TOML basic string: quoted, with `"`, `\` and control
/// characters escaped (a JSON string is one).
pub fn toml_string(s: &str) -> String {
    serde_json::to_string(s).expect("a string serializes")
}

/// The segment files (`segment-*.log`) of the event log folder `log_dir`,
/// oldest first; none when the folder does not exist.
pub fn segment_files(log_dir: &Path) -> Vec<PathBuf> {
    let mut segs: Vec<PathBuf> = std::fs::read_dir(log_dir)
        .into_iter()
        .flatten()
        .map(|e| e.expect("entry").path())
        .filter(|p| {
            p.file_name().is_some_and(|n| {
                let n = n.to_string_lossy();
                n.starts_with("segment-") && n.ends_with(".log")
            })
        })
        .collect();
    segs.sort();
    segs
}
