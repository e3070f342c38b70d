//! Loading the plugins of a job file: the plugin host (with its
//! compiled-component cache) and one loaded component per `[plugins.NAME]`.

use std::collections::BTreeMap;
use std::path::Path;

use crate::config::{JobConfig, OnTrap, PluginConfig, PluginKindConfig};
use crate::plugin::{
    DirGrant, HostOptions, Limits, LoadedPlugin, PluginError, PluginHost, PluginKind, PluginSpec,
    TrapPolicy,
};
use crate::scheduler::{JobError, RunOptions};

/// Creates the data directory and the plugin host, loads every plugin of
/// the job file, and decides the number of workers.
///
/// # Errors
///
/// [`JobError::Io`] for the data directory, [`JobError::Plugin`] for a
/// plugin that does not load.
pub fn load_plugins(
    config: &JobConfig,
    opts: &RunOptions,
) -> Result<(BTreeMap<String, LoadedPlugin>, usize), JobError> {
    let data_dir = std::path::absolute(&opts.data_dir).unwrap_or_else(|_| opts.data_dir.clone());
    std::fs::create_dir_all(&data_dir).map_err(|source| JobError::Io {
        path: data_dir.clone(),
        source,
    })?;
    let host = PluginHost::new(HostOptions {
        cache_dir: Some(
            opts.cache_dir
                .clone()
                .unwrap_or_else(|| data_dir.join("cache")),
        ),
    })
    .map_err(|source| JobError::Plugin {
        plugin: "(engine)".into(),
        source,
    })?;
    let mut plugins = BTreeMap::new();
    for (name, p) in &config.plugins {
        let spec = plugin_spec(p)?;
        let loaded = host.load(&spec).map_err(|source| JobError::PluginLoad {
            file: config.file.clone(),
            plugin: name.clone(),
            field: match source {
                PluginError::Grant { .. } => "dirs",
                PluginError::KindMismatch { .. } => "kind",
                _ => "component",
            },
            source: Box::new(source),
        })?;
        plugins.insert(name.clone(), loaded);
    }
    let workers = opts
        .workers
        .or(config.workers)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from));
    Ok((plugins, workers))
}

/// Maps a job file's plugin entry onto the plugin host's spec; creates
/// writable granted directories that do not exist yet.
fn plugin_spec(p: &PluginConfig) -> Result<PluginSpec, JobError> {
    for d in &p.dirs {
        if d.writable {
            create_dir(&d.path)?;
        }
    }
    Ok(PluginSpec {
        name: p.name.clone(),
        path: p.component.clone(),
        kind: match p.kind {
            PluginKindConfig::SplitEnumerator => PluginKind::SplitEnumerator,
            PluginKindConfig::ShuffleMaster => PluginKind::ShuffleMaster,
        },
        config: p.config.clone(),
        dirs: p
            .dirs
            .iter()
            .map(|d| DirGrant {
                host: d.path.clone(),
                writable: d.writable,
            })
            .collect(),
        limits: Limits {
            call_timeout: p.limits.call_timeout,
            memory_bytes: p.limits.memory_bytes,
            on_trap: match p.limits.on_trap {
                OnTrap::Rebuild => TrapPolicy::Rebuild,
                OnTrap::Fail => TrapPolicy::Fail,
            },
        },
    })
}

fn create_dir(path: &Path) -> Result<(), JobError> {
    std::fs::create_dir_all(path).map_err(|source| JobError::Io {
        path: path.to_path_buf(),
        source,
    })
}
