//! The one support module of the integration tests: where the built sample
//! plugins are, the `coordhost` command with the shared compiled-component
//! cache, and one plugin host per test process with that cache (so the suite
//! compiles each component once). Helpers of one area live in a submodule:
//!
//! - [`crash`]: real `coordhost run` processes killed with SIGKILL, the word
//!   count job they run, the `--summary-json` file and `log inspect`;
//! - [`recovery`]: topology T1 of docs/recovery.md run in-process, with
//!   simulated crashes, and the event log read back;
//! - [`job`]: the examples rewritten for a test, sink output read back;
//! - [`knobs`]: a run of the binary with test knobs (fail points): a
//!   simulated crash, a failing attempt, a lost partition;
//! - [`events`]: one event of every kind and logs over `MemoryStorage`;
//! - [`damage`]: result partitions damaged the way disks and people do;
//! - [`ui`]: HTTP to `run --ui`, and the recovered job its tests look at;
//! - [`s3`]: a real S3 server (SeaweedFS) per test, and [`fault_proxy`]
//!   between it and `coordhost` to inject 503s, delays and outages.

pub mod crash;
pub mod damage;
pub mod etcd;
pub mod events;
pub mod fault_proxy;
pub mod job;
#[cfg(feature = "failpoints")]
pub mod knobs;
pub mod netns;
#[cfg(feature = "failpoints")]
pub mod recovery;
pub mod s3;
pub use s3::ports;
pub mod ui;
pub mod workers;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use coordhost::plugin::{DirGrant, HostOptions, Limits, PluginHost, PluginKind, PluginSpec};

/// The workspace root.
pub fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("host/ has a parent")
        .to_path_buf()
}

/// Path of a built sample plugin; fails (never skips) when it is missing.
pub fn plugin_path(name: &str) -> PathBuf {
    let dir = std::env::var_os("COORDHOST_PLUGIN_DIR")
        .map_or_else(|| workspace().join("build").join("plugins"), PathBuf::from);
    let path = dir.join(format!("{name}.wasm"));
    assert!(
        path.is_file(),
        "{} is missing: build the sample plugins with `make plugins` (the README's test command `make test` does it)",
        path.display()
    );
    path
}

/// The `coordhost` binary built with this test binary, as a user runs it:
/// the shared compiled-component cache (`COORDHOST_CACHE_DIR`), no
/// `COORDHOST_LOG` from the test's environment, no standard input.
pub fn coordhost() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_coordhost"));
    c.env("COORDHOST_CACHE_DIR", cache_dir())
        .env_remove("COORDHOST_LOG")
        .stdin(Stdio::null());
    c
}

/// The shared compiled-component cache of the test suite.
pub fn cache_dir() -> PathBuf {
    std::env::var_os("COORDHOST_CACHE_DIR")
        .map_or_else(|| workspace().join("build").join("cache"), PathBuf::from)
}

/// One plugin host per test process, with the shared cache.
pub fn host() -> &'static PluginHost {
    static HOST: OnceLock<PluginHost> = OnceLock::new();
    HOST.get_or_init(|| {
        PluginHost::new(HostOptions {
            cache_dir: Some(cache_dir()),
        })
        .expect("the engine starts")
    })
}

/// A spec for the sample plugin `name` with `config` and no grants.
pub fn spec(name: &str, kind: PluginKind, config: &[(&str, &str)]) -> PluginSpec {
    PluginSpec {
        name: name.to_string(),
        path: plugin_path(name),
        kind,
        config: config
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        dirs: Vec::new(),
        stores: Vec::new(),
        limits: Limits::default(),
    }
}

/// A read-only or read-write grant of `dir`.
pub fn grant(dir: &std::path::Path, writable: bool) -> DirGrant {
    DirGrant {
        host: dir.to_path_buf(),
        writable,
    }
}

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

/// The `part-*` files of a sink folder, sorted by name.
pub fn part_files(out: &Path) -> Vec<PathBuf> {
    let mut parts: Vec<PathBuf> = std::fs::read_dir(out)
        .map(|rd| {
            rd.map(|e| e.expect("entry").path())
                .filter(|p| {
                    p.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with("part-"))
                })
                .collect()
        })
        .unwrap_or_default();
    parts.sort();
    parts
}

/// The published part files of a sink folder, checked complete: `_SUCCESS`
/// present, no staging left, parts numbered 0..n without gaps.
pub fn published_lines(out: &Path) -> Vec<String> {
    assert!(
        out.join("_SUCCESS").is_file(),
        "{} has no _SUCCESS",
        out.display()
    );
    assert!(!out.join("_staging").exists(), "staging folder left behind");
    let parts = part_files(out);
    assert!(!parts.is_empty(), "no part files in {}", out.display());
    let mut lines = Vec::new();
    for p in parts {
        let text = std::fs::read_to_string(&p).expect("part file");
        lines.extend(text.lines().map(str::to_string));
    }
    lines
}

/// Word counts as the test computes them itself: lower-cased maximal runs
/// of alphanumeric characters over every file of `dir`.
pub fn expected_word_counts(dir: &Path) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for entry in std::fs::read_dir(dir).expect("data dir") {
        let text = std::fs::read_to_string(entry.expect("entry").path()).expect("text file");
        for w in text
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
        {
            *counts.entry(w.to_lowercase()).or_insert(0) += 1;
        }
    }
    counts
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
