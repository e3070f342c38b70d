//! Shared helpers of the host's integration tests: where the built sample
//! plugins are, and one plugin host per test process with the shared
//! compiled-component cache (so the suite compiles each component once).

#![allow(
    dead_code,
    reason = "each test binary uses a different subset of the helpers"
)]

use std::path::PathBuf;
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
