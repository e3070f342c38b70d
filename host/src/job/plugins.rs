//! Loading the plugins of a job file: the plugin host (with its
//! compiled-component cache) and one loaded component per `[plugins.NAME]`.

use std::collections::BTreeMap;
use std::path::Path;

use crate::config::JobConfig;
use crate::plugin::{HostOptions, LoadedPlugin, PluginError, PluginHost, PluginSpec};
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
    let data_dir = &opts.data_dir;
    std::fs::create_dir_all(data_dir).map_err(|source| JobError::Io {
        path: data_dir.to_path_buf(),
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
        create_writable_grants(p)?;
        let loaded = host.load(p).map_err(|source| JobError::PluginLoad {
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

/// Creates the writable granted directories of a plugin that do not exist
/// yet (the job file loader parsed its settings into the plugin host's
/// [`PluginSpec`]).
fn create_writable_grants(p: &PluginSpec) -> Result<(), JobError> {
    for d in &p.dirs {
        if d.writable {
            create_dir(&d.host)?;
        }
    }
    Ok(())
}

fn create_dir(path: &Path) -> Result<(), JobError> {
    std::fs::create_dir_all(path).map_err(|source| JobError::Io {
        path: path.to_path_buf(),
        source,
    })
}
