//! Checks of the folders a job touches, made once the whole job file is
//! read and before anything is created: the data directory, the folders
//! granted to plugins, the sinks' output folders, the compiled-component
//! cache, and the command line's own paths and numbers. Each rule and its
//! message is in docs/job-file.md ("Rules and their messages").
//!
//! Paths are compared lexically, after `${...}` substitution and
//! normalization (no `.` or `..`), as the host later uses them; the data
//! directory, the cache and the summary file are resolved first by
//! [`super::resolve_physical`] (`..` as the OS follows it).

use std::path::{Path, PathBuf};

use super::validate::{SinkField, Validator};
use super::{ConfigError, JobConfig};
use crate::plugin::{DirGrant, PluginSpec};

/// Bounds of `--workers`, the same as `job.workers`.
pub const WORKERS: std::ops::RangeInclusive<usize> = 1..=1024;

/// How two paths relate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Overlap {
    Same,
    /// The first lies inside the second.
    Inside,
    /// The first contains the second.
    Contains,
}

fn overlap(a: &Path, b: &Path) -> Option<Overlap> {
    if a == b {
        Some(Overlap::Same)
    } else if a.starts_with(b) {
        Some(Overlap::Inside)
    } else if b.starts_with(a) {
        Some(Overlap::Contains)
    } else {
        None
    }
}

fn relation(o: Overlap) -> &'static str {
    match o {
        Overlap::Same => "is",
        Overlap::Inside => "lies inside",
        Overlap::Contains => "contains",
    }
}

/// The nearest existing ancestor of a path that does not exist must be a
/// folder, or the path can never be created.
fn creatable(p: &Path) -> Result<(), String> {
    match std::fs::metadata(p) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(format!("`{}` exists and is not a folder", p.display())),
        Err(_) => {
            let mut a = p.parent();
            while let Some(dir) = a {
                if let Ok(m) = std::fs::metadata(dir) {
                    return if m.is_dir() {
                        Ok(())
                    } else {
                        Err(format!(
                            "`{}` cannot be created: `{}` is not a folder",
                            p.display(),
                            dir.display()
                        ))
                    };
                }
                a = dir.parent();
            }
            Ok(())
        }
    }
}

/// `plugins.NAME.dirs[K].path`.
fn grant_field(plugin: &str, k: usize) -> String {
    format!("plugins.{plugin}.dirs[{k}].path")
}

impl Validator {
    /// `--data-dir` must be a folder or creatable as one.
    pub(super) fn check_data_dir(&self) -> Result<(), ConfigError> {
        creatable(&self.data_dir).map_err(|reason| ConfigError::Argument {
            arg: "--data-dir",
            reason: super::one_line(&reason),
        })
    }

    /// The grant and sink rules of docs/job-file.md, in that order.
    pub(super) fn check_paths(&self, config: &JobConfig) -> Result<(), ConfigError> {
        let job_folder = self.data_dir.join(&config.name);
        let sinks = self.sink_list(config);
        // What a sink path is on its own comes first: `/` overlaps everything.
        for s in &sinks {
            if s.dir.parent().is_none() {
                return Err(self.invalid(
                    &s.field,
                    format!(
                        "`{}` is the root folder; name a folder for this job's output",
                        s.dir.display()
                    ),
                ));
            }
            creatable(&s.dir).map_err(|r| self.invalid(&s.field, r))?;
        }
        let plugins: Vec<&PluginSpec> = config.plugins.values().collect();
        for (pi, p) in plugins.iter().enumerate() {
            for (k, d) in p.dirs.iter().enumerate() {
                self.check_grant(config, &job_folder, &sinks, &plugins[..pi], &p.name, k, d)?;
            }
        }
        let job_folder_exists = job_folder.exists();
        for (i, s) in sinks.iter().enumerate() {
            let shown = s.dir.display();
            for other in &sinks[..i] {
                let v = &config.graph.vertices[other.vertex].id;
                let why = match overlap(&s.dir, &other.dir) {
                    None => continue,
                    Some(Overlap::Same) => {
                        format!("`{shown}` is also the output folder of vertex `{v}`")
                    }
                    Some(o) => format!(
                        "`{shown}` {} `{}`, the output folder of vertex `{v}`",
                        relation(o),
                        other.dir.display()
                    ),
                };
                return Err(self.invalid(
                    &s.field,
                    format!("{why}; every sink needs a folder of its own"),
                ));
            }
            if let Some(o) = overlap(&s.dir, &job_folder) {
                return Err(self.invalid(
                    &s.field,
                    format!(
                        "`{shown}` {} the job's folder `{}` in the data directory (its event log)",
                        relation(o),
                        job_folder.display()
                    ),
                ));
            }
            for p in &plugins {
                for g in &p.dirs {
                    // A grant inside this folder was refused with the grants.
                    if let Some(o @ (Overlap::Same | Overlap::Inside)) = overlap(&s.dir, &g.host) {
                        return Err(self.invalid(
                            &s.field,
                            format!(
                                "`{shown}` {} `{}`, a folder granted to plugin `{}`",
                                relation(o),
                                g.host.display(),
                                p.name
                            ),
                        ));
                    }
                }
            }
            // With the log on objects the log says whether the job ran
            // (the driver checks it once the log is read).
            if !s.overwrite
                && !job_folder_exists
                && !self.log_on_objects
                && config.log.is_none()
                && let Some(name) = first_entry(&s.dir)
            {
                return Err(self.invalid(
                    &s.field,
                    format!(
                        "`{shown}` already holds `{name}`, which this job did not write; empty the folder, name another, or set `overwrite = true` to let a fresh run remove `part-*`, `_SUCCESS` and `_staging` there"
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Sinks on object storage: each needs a prefix of its own (not the
    /// same as, inside or around another's, nor a plugin's store grant or
    /// inside or around one, as a sink folder and a granted folder). What
    /// the prefix holds is checked when the run starts, once the store is
    /// asked (docs/object-storage.md, "Sink output").
    pub(super) fn check_object_sinks(&self, config: &JobConfig) -> Result<(), ConfigError> {
        let fields = self.sinks.borrow();
        let mut seen: Vec<(&crate::objstore::ObjectUrl, usize)> = Vec::new();
        let mut sinks: Vec<&SinkField> = fields.iter().collect();
        sinks.sort_by_key(|n| n.vertex);
        for n in sinks {
            let Some(url) = config.graph.vertices[n.vertex]
                .sink
                .as_ref()
                .and_then(|s| s.objects.as_ref())
            else {
                continue;
            };
            for (other, v) in &seen {
                if url.within(other, true) || other.within(url, true) {
                    return Err(self.invalid(
                        format!("{}.path", n.field),
                        format!(
                            "`{url}` overlaps `{other}`, the output prefix of vertex `{}`; every sink needs a prefix of its own",
                            config.graph.vertices[*v].id
                        ),
                    ));
                }
            }
            for p in config.plugins.values() {
                for g in &p.stores {
                    if url.within(&g.url, true) || g.url.within(url, true) {
                        return Err(self.invalid(
                            format!("{}.path", n.field),
                            format!(
                                "`{url}` overlaps `{}`, a store granted to plugin `{}`; a sink's prefix is its own",
                                g.url, p.name
                            ),
                        ));
                    }
                }
            }
            seen.push((url, n.vertex));
        }
        Ok(())
    }

    /// The sinks in file order, with their `path` fields.
    fn sink_list(&self, config: &JobConfig) -> Vec<Sink> {
        let mut notes: Vec<Sink> = self
            .sinks
            .borrow()
            .iter()
            .filter_map(|n: &SinkField| {
                // A sink on object storage has no output folder here (its
                // staging folder is the job's own): [`Validator::check_object_sinks`].
                let spec = config.graph.vertices[n.vertex].sink.as_ref();
                spec.filter(|s| s.objects.is_none()).map(|s| Sink {
                    field: format!("{}.path", n.field),
                    dir: s.dir.clone(),
                    vertex: n.vertex,
                    overwrite: n.overwrite,
                })
            })
            .collect();
        notes.sort_by_key(|n| n.vertex);
        notes
    }

    /// The rules of one granted folder `d` (`plugins.NAME.dirs[K]`);
    /// `earlier` are the plugins checked before this one.
    #[expect(
        clippy::too_many_arguments,
        reason = "private helper of check_paths; the arguments are its loop state"
    )]
    fn check_grant(
        &self,
        config: &JobConfig,
        job_folder: &Path,
        sinks: &[Sink],
        earlier: &[&PluginSpec],
        plugin: &str,
        k: usize,
        d: &DirGrant,
    ) -> Result<(), ConfigError> {
        let field = grant_field(plugin, k);
        let g = &d.host;
        let shown = g.display();
        if g.parent().is_none() {
            return Err(self.invalid(
                field,
                format!(
                    "grants the root folder `{shown}`; grant only the folders the plugin needs"
                ),
            ));
        }
        if d.writable && g.starts_with(&self.data_dir) {
            // The host creates it (the shuffle root `${data_dir}/shuffle`).
            creatable(g).map_err(|r| self.invalid(&field, r))?;
        } else if d.writable {
            // Outside the data directory the host creates nothing: a
            // misspelt folder would be made, left behind and written to.
            match std::fs::metadata(g) {
                Ok(m) if m.is_dir() => {}
                Ok(_) => {
                    return Err(self.invalid(field, format!("`{shown}` is not a folder")));
                }
                Err(e) => {
                    return Err(self.invalid(
                        field,
                        format!(
                            "`{shown}`: {e} (a writable grant outside the data directory `{}` must exist; only folders inside it are created)",
                            self.data_dir.display()
                        ),
                    ));
                }
            }
        } else {
            match std::fs::metadata(g) {
                Ok(m) if m.is_dir() => {}
                Ok(_) => {
                    return Err(self.invalid(field, format!("`{shown}` is not a folder")));
                }
                Err(e) => {
                    return Err(self.invalid(
                        field,
                        format!("`{shown}`: {e} (a read-only grant must exist)"),
                    ));
                }
            }
        }
        if let Some(o) = overlap(g, job_folder) {
            return Err(self.invalid(
                field,
                format!(
                    "`{shown}` {} the job's folder `{}` in the data directory (its event log, which recovery trusts)",
                    relation(o),
                    job_folder.display()
                ),
            ));
        }
        for s in sinks {
            if overlap(g, &s.dir) == Some(Overlap::Inside) {
                return Err(self.invalid(
                    field,
                    format!(
                        "`{shown}` lies inside `{}`, the output folder of vertex `{}`",
                        s.dir.display(),
                        config.graph.vertices[s.vertex].id
                    ),
                ));
            }
        }
        for q in earlier {
            for h in &q.dirs {
                if !(d.writable || h.writable) {
                    continue;
                }
                if let Some(o) = overlap(g, &h.host) {
                    return Err(self.invalid(
                        field,
                        format!(
                            "`{shown}` {} `{}`, granted to plugin `{}`; a folder one plugin may write is granted to no other",
                            relation(o),
                            h.host.display(),
                            q.name
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

/// A sink's output folder and its place in the job file.
struct Sink {
    /// `vertices[I].operators[J].path`.
    field: String,
    dir: PathBuf,
    vertex: usize,
    overwrite: bool,
}

/// The first entry of `dir` by name, if it is a folder holding anything.
pub(crate) fn first_entry(dir: &Path) -> Option<String> {
    let entries = std::fs::read_dir(dir).ok()?;
    entries
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .min()
}

/// The command line's own values of `coordhost run`, checked before the job
/// file is read: `--workers` in `1..=1024` (`WORKERS`), and `--summary-json` a file
/// that can be written (not a folder, in a folder that exists).
///
/// # Errors
///
/// [`ConfigError::Argument`] naming the option.
pub fn check_arguments(
    workers: Option<usize>,
    summary_json: Option<&Path>,
) -> Result<(), ConfigError> {
    if let Some(n) = workers
        && !WORKERS.contains(&n)
    {
        return Err(ConfigError::Argument {
            arg: "--workers",
            reason: format!("{n} is not in {}..={}", WORKERS.start(), WORKERS.end()),
        });
    }
    if let Some(path) = summary_json {
        let shown = super::one_line(&path.display().to_string());
        if path.is_dir() {
            return Err(ConfigError::Argument {
                arg: "--summary-json",
                reason: format!("`{shown}` is a folder; name a file"),
            });
        }
        let resolved = super::resolve_physical(path).map_err(|reason| ConfigError::Argument {
            arg: "--summary-json",
            reason,
        })?;
        let parent = resolved.parent().map(Path::to_path_buf).unwrap_or_default();
        let why = match std::fs::metadata(&parent) {
            Ok(m) if m.is_dir() => None,
            Ok(_) => Some("is not a folder"),
            Err(_) => Some("does not exist"),
        };
        if let Some(why) = why {
            return Err(ConfigError::Argument {
                arg: "--summary-json",
                reason: format!(
                    "`{shown}` cannot be written: `{}` {why}",
                    super::one_line(&parent.display().to_string())
                ),
            });
        }
    }
    Ok(())
}

/// The compiled-component cache (whose entries are loaded as native code)
/// must not overlap a folder granted to a plugin or a sink's output folder.
///
/// # Errors
///
/// [`ConfigError::Invalid`] naming `plugins.NAME.dirs[K].path` or the sink's
/// `vertices[I].operators[J].path`; [`ConfigError::Argument`] naming
/// `--cache-dir` when a `..` in it follows a missing component
/// ([`super::resolve_physical`]).
pub fn check_cache_dir(config: &JobConfig, cache_dir: &Path) -> Result<(), ConfigError> {
    let cache = super::resolve_physical(cache_dir).map_err(|reason| ConfigError::Argument {
        arg: "--cache-dir",
        reason,
    })?;
    let invalid = |field: String, what: &Path, o: Overlap| ConfigError::Invalid {
        file: config.file.clone(),
        field,
        reason: super::one_line(&format!(
            "`{}` {} the compiled-component cache `{}` (its entries are loaded as native code)",
            what.display(),
            relation(o),
            cache.display()
        )),
    };
    for p in config.plugins.values() {
        for (k, d) in p.dirs.iter().enumerate() {
            if let Some(o) = overlap(&d.host, &cache) {
                return Err(invalid(grant_field(&p.name, k), &d.host, o));
            }
        }
    }
    for (i, v) in config.graph.vertices.iter().enumerate() {
        if let Some(s) = v.sink.as_ref().filter(|s| s.objects.is_none())
            && let Some(o) = overlap(&s.dir, &cache)
        {
            // The write operator is the last of the chain; the others are
            // the vertex's operators.
            let field = format!("vertices[{i}].operators[{}].path", v.operators.len());
            return Err(invalid(field, &s.dir, o));
        }
    }
    Ok(())
}

/// The folders a run would create before its plugins are loaded (the data
/// directory, writable granted folders) that do not exist yet. A component
/// that passes the validation pass can still fail to load (it does not
/// compile, it is the other kind); [`NewFolders::remove`] then takes away
/// what this run created, so a refused run leaves nothing behind.
#[derive(Debug, Default)]
pub struct NewFolders {
    /// The data directory, when it is new, and its topmost new ancestor.
    data_dir: Option<(PathBuf, PathBuf)>,
    /// New writable granted folders outside the data directory, each with
    /// its topmost new ancestor.
    grants: Vec<(PathBuf, PathBuf)>,
}

/// `p` and its topmost ancestor that does not exist, if `p` does not exist.
fn new_with_top(p: &Path) -> Option<(PathBuf, PathBuf)> {
    if p.exists() {
        return None;
    }
    let mut top = p.to_path_buf();
    while let Some(parent) = top.parent() {
        if parent.as_os_str().is_empty() || parent.exists() {
            break;
        }
        top = parent.to_path_buf();
    }
    Some((p.to_path_buf(), top))
}

/// Removes `from` and its ancestors up to `top`, each only if empty.
fn remove_empty_up_to(from: &Path, top: &Path) {
    let mut p = Some(from);
    while let Some(dir) = p {
        if std::fs::remove_dir(dir).is_err() || dir == top {
            break;
        }
        p = dir.parent();
    }
}

impl NewFolders {
    /// Notes which of `config`'s folders do not exist yet under `data_dir`.
    pub fn note(config: &JobConfig, data_dir: &Path) -> Self {
        let data_dir = super::absolute(data_dir);
        let grants = config
            .plugins
            .values()
            .flat_map(|p| p.dirs.iter())
            .filter(|d| d.writable && !d.host.starts_with(&data_dir))
            .filter_map(|d| new_with_top(&d.host))
            .collect();
        Self {
            data_dir: new_with_top(&data_dir),
            grants,
        }
    }

    /// Removes the noted folders: the new data directory with what this run
    /// put in it (the compiled-component cache, granted folders), and each
    /// new granted folder outside it if it is still empty.
    pub fn remove(&self) {
        for (dir, top) in &self.grants {
            remove_empty_up_to(dir, top);
        }
        if let Some((dir, top)) = &self.data_dir
            && std::fs::remove_dir_all(dir).is_ok()
            && let Some(parent) = dir.parent()
            && dir != top
        {
            remove_empty_up_to(parent, top);
        }
    }
}
