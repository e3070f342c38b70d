//! The plugin authors' kit (issue 17): `coordhost plugin new` writes a new
//! plugin project from a template ([`new`]), `coordhost plugin call` runs a
//! scripted sequence of calls and prints every answer ([`call`]), and
//! `coordhost plugin test` runs the contract checks of the project's own
//! conformance suite ([`conformance`]). The command faces are in [`command`].
//!
//! `call` and `test` load the plugin as a job would, through the real
//! plugin host: the kind is read from the component, the configuration
//! comes from `--config key=value`, and granted folders from `--grant`.
//! Each run gets a scratch folder: `${tmp}` in a configuration value is
//! replaced by its path; it is granted read-only to a split enumerator
//! (holding three small text files, `a.txt`, `b.txt`, `c.txt`, so a file
//! enumerator has something to list) and writable to a shuffle master,
//! whose configuration is `root = ${tmp}` when none is given.

pub mod call;
pub mod check;
pub mod command;
pub mod conformance;
pub mod function_checks;
pub mod new;

use std::path::{Path, PathBuf};

use crate::plugin::{DirGrant, LoadedPlugin, PluginError, PluginHost, PluginKind, PluginSpec};

/// The placeholder for the scratch folder in `--config` values.
pub const TMP_PLACEHOLDER: &str = "${tmp}";

/// The input files of a split enumerator's scratch folder: 10, 25 and 7 bytes.
pub const SCRATCH_FILES: [(&str, &str); 3] = [
    ("a.txt", "aaaa\nbbbb\n"),
    ("b.txt", "0123456789\n0123456789\nxx\n"),
    ("c.txt", "cc\ndd\ne"),
];

/// A plugin loaded for the kit, with its scratch folder (deleted on drop).
#[derive(Debug)]
pub struct Prepared {
    /// The loaded plugin.
    pub plugin: LoadedPlugin,
    /// The scratch folder.
    pub scratch: tempfile::TempDir,
}

/// Why the kit could not load a plugin.
#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    /// The scratch folder could not be made.
    #[error("cannot create a scratch folder: {0}")]
    Scratch(std::io::Error),
    /// A `--grant` folder is not absolute.
    #[error("--grant {}: give an absolute folder", .0.display())]
    RelativeGrant(PathBuf),
    /// A `--grant` or `--grant-rw` folder is the root folder (as a job
    /// file's `dirs`, docs/job-file.md, it is refused).
    #[error(
        "{option} {}: grants the root folder; grant only the folders the plugin needs",
        dir.display()
    )]
    RootGrant {
        /// `--grant` or `--grant-rw`.
        option: &'static str,
        /// The folder as given.
        dir: PathBuf,
    },
    /// Loading failed (not a component, wrong world, ...).
    #[error(transparent)]
    Plugin(#[from] PluginError),
}

/// Loads `path` for `plugin call` / `plugin test`: detects its kind, makes
/// the scratch folder, expands `${tmp}` in `config`, grants the scratch
/// folder and `grants` (read-only) and `grants_rw` (writable).
///
/// # Errors
/// [`PrepareError`].
pub fn prepare(
    host: &PluginHost,
    path: &Path,
    config: &[(String, String)],
    grants: &[PathBuf],
    grants_rw: &[PathBuf],
) -> Result<Prepared, PrepareError> {
    // The grants first: a refused one leaves nothing behind.
    for (list, option) in [(grants, "--grant"), (grants_rw, "--grant-rw")] {
        for dir in list {
            if !dir.is_absolute() {
                return Err(PrepareError::RelativeGrant(dir.clone()));
            }
            // `/..` or `/.` is `/` too.
            let resolved = crate::config::resolve_physical(dir).unwrap_or_else(|_| dir.clone());
            if resolved.parent().is_none() {
                return Err(PrepareError::RootGrant {
                    option,
                    dir: dir.clone(),
                });
            }
        }
    }
    let info = host.check(path)?;
    let scratch = tempfile::Builder::new()
        .prefix("coordhost-kit")
        .tempdir()
        .map_err(PrepareError::Scratch)?;
    let kind = info.kind;
    if kind == PluginKind::SplitEnumerator {
        for (name, text) in SCRATCH_FILES {
            std::fs::write(scratch.path().join(name), text).map_err(PrepareError::Scratch)?;
        }
    }
    let mut config = config.to_vec();
    if config.is_empty() && kind == PluginKind::ShuffleMaster {
        config.push(("root".into(), TMP_PLACEHOLDER.into()));
    }
    let tmp = scratch.path().to_string_lossy().into_owned();
    for (_, value) in &mut config {
        *value = value.replace(TMP_PLACEHOLDER, &tmp);
    }
    let mut dirs = vec![DirGrant {
        host: scratch.path().to_path_buf(),
        writable: kind == PluginKind::ShuffleMaster,
    }];
    for (list, writable) in [(grants, false), (grants_rw, true)] {
        for dir in list {
            dirs.push(DirGrant {
                host: dir.clone(),
                writable,
            });
        }
    }
    let mut spec = PluginSpec::bare(path, kind);
    spec.config = config;
    spec.dirs = dirs;
    let plugin = host.load(&spec)?;
    Ok(Prepared { plugin, scratch })
}
