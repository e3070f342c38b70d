//! The support module of the library's integration tests: where the built
//! sample plugins are, the shared compiled-component cache, one plugin host
//! per test process with that cache (so the suite compiles each component
//! once), and a sink's published output read back. Helpers of one area live
//! in a submodule:
//!
//! - [`events`]: one event of every kind and logs over `MemoryStorage`;
//! - [`job`]: the examples rewritten for a test, run in process, sink output
//!   read back.
//!
//! The end-to-end tests (`tests/e2e`) include this file as it is (one copy
//! of what both need) and add their own helpers for processes beside it.

pub mod events;
pub mod job;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use coordhost::plugin::{DirGrant, HostOptions, Limits, PluginHost, PluginKind, PluginSpec};

/// The workspace root: the nearest folder above the test's package (host/,
/// or tests/e2e for the end-to-end tests, which include this file) that
/// holds `Cargo.lock`.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .find(|dir| dir.join("Cargo.lock").is_file())
        .expect("the package lies in the workspace, beside its Cargo.lock")
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
