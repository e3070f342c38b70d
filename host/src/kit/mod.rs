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
//! whose configuration is `root = ${tmp}` when none is given. A source
//! reader is given its declared schema (`--column NAME=TYPE`) and sample
//! files (`--input`, `--bad-input`), copied into the scratch folder, which
//! is granted read-only: the checks of [`reader_checks`] read them as
//! splits.

pub mod call;
pub mod check;
pub mod command;
pub mod conformance;
pub mod function_checks;
pub mod new;
pub mod reader_checks;

use std::path::{Path, PathBuf};

use std::sync::Arc;

use arrow_schema::{Field, Schema, SchemaRef};

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
    /// A source reader's declared schema and sample files; `None` for
    /// other kinds.
    pub reader: Option<ReaderSample>,
}

/// What a source reader is tested with, as given on the command line:
/// `--column NAME=TYPE` (repeatable, in declared order; the types of a job
/// file's `schema`, docs/sql.md), `--input FILE`, `--bad-input FILE`.
#[derive(Debug, Clone, Default)]
pub struct ReaderInputs {
    /// The declared columns, `(name, SQL type)`, in order.
    pub columns: Vec<(String, String)>,
    /// A file of good records.
    pub input: Option<PathBuf>,
    /// A file holding a record the reader must refuse (`invalid-split`).
    pub bad_input: Option<PathBuf>,
}

impl ReaderInputs {
    /// Whether any reader option was given.
    fn given(&self) -> bool {
        !self.columns.is_empty() || self.input.is_some() || self.bad_input.is_some()
    }
}

/// A source reader's declared schema and its sample files, copied into the
/// scratch folder (granted read-only to the reader).
#[derive(Debug, Clone)]
pub struct ReaderSample {
    /// The declared schema: every column nullable, as a SQL job declares it.
    pub schema: SchemaRef,
    /// The copy of `--input` in the scratch folder (absolute).
    pub input: PathBuf,
    /// The copy of `--bad-input` in the scratch folder, if one was given.
    pub bad_input: Option<PathBuf>,
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
    /// A source reader was given no `--column` or no `--input`, or a
    /// plugin of another kind was given one of them.
    #[error("{option}: {reason}")]
    ReaderOption {
        /// The option (`--column`, `--input`, `--bad-input`).
        option: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// A `--column` type is not one a table may declare.
    #[error(
        "--column {name}={ty}: not a column type; use one of {}",
        crate::sql::SqlType::NAMES
    )]
    ColumnType {
        /// The column name.
        name: String,
        /// The type as given.
        ty: String,
    },
    /// A sample file could not be read or copied into the scratch folder.
    #[error("{option} {}: {reason}", path.display())]
    Sample {
        /// `--input` or `--bad-input`.
        option: &'static str,
        /// The file as given.
        path: PathBuf,
        /// What failed.
        reason: String,
    },
}

/// Most bytes of a sample file (`--input`, `--bad-input`): 64 MiB; the
/// checks read it several times.
pub const MAX_SAMPLE_BYTES: u64 = 64 << 20;

/// The declared schema of `columns`, each nullable.
fn declared_schema(columns: &[(String, String)]) -> Result<SchemaRef, PrepareError> {
    let mut fields = Vec::with_capacity(columns.len());
    for (name, ty) in columns {
        if name.is_empty() || fields.iter().any(|f: &Field| f.name() == name) {
            return Err(PrepareError::ReaderOption {
                option: "--column",
                reason: format!("`{name}`: give each column a name, once"),
            });
        }
        let parsed =
            crate::sql::SqlType::parse(name, ty).map_err(|_| PrepareError::ColumnType {
                name: name.clone(),
                ty: ty.clone(),
            })?;
        fields.push(Field::new(name, parsed.data_type().clone(), true));
    }
    Ok(Arc::new(Schema::new(fields)))
}

/// Copies sample `path` into `scratch` as `name`; the copy's path.
fn copy_sample(
    option: &'static str,
    path: &Path,
    scratch: &Path,
    name: &str,
) -> Result<PathBuf, PrepareError> {
    let bad = |reason: String| PrepareError::Sample {
        option,
        path: path.to_path_buf(),
        reason,
    };
    let bytes =
        crate::files::read_regular_file(path, MAX_SAMPLE_BYTES).map_err(|e| bad(e.to_string()))?;
    let to = scratch.join(name);
    std::fs::write(&to, bytes)
        .map_err(|e| bad(format!("cannot copy it into the scratch folder: {e}")))?;
    Ok(to)
}

/// The reader sample of a source reader: the schema and both files
/// copied into `scratch` (`input-NAME`, `bad-NAME`).
fn reader_sample(inputs: &ReaderInputs, scratch: &Path) -> Result<ReaderSample, PrepareError> {
    if inputs.columns.is_empty() {
        return Err(PrepareError::ReaderOption {
            option: "--column",
            reason: "a source reader is tested against a declared schema: give each column as --column NAME=TYPE, in order".into(),
        });
    }
    let schema = declared_schema(&inputs.columns)?;
    let Some(input) = &inputs.input else {
        return Err(PrepareError::ReaderOption {
            option: "--input",
            reason: "a source reader is tested on a sample: give a file of records it reads as --input FILE".into(),
        });
    };
    let file_name = |p: &Path| {
        p.file_name()
            .map_or_else(|| "sample".into(), |n| n.to_string_lossy().into_owned())
    };
    let input = copy_sample(
        "--input",
        input,
        scratch,
        &format!("input-{}", file_name(input)),
    )?;
    let bad_input = match &inputs.bad_input {
        Some(p) => Some(copy_sample(
            "--bad-input",
            p,
            scratch,
            &format!("bad-{}", file_name(p)),
        )?),
        None => None,
    };
    Ok(ReaderSample {
        schema,
        input,
        bad_input,
    })
}

/// Loads `path` for `plugin call` / `plugin test`: detects its kind, makes
/// the scratch folder, expands `${tmp}` in `config`, grants the scratch
/// folder and `grants` (read-only) and `grants_rw` (writable). A source
/// reader needs `reader`'s columns and input (copied into the scratch
/// folder); another kind takes none of them.
///
/// # Errors
/// [`PrepareError`].
pub fn prepare(
    host: &PluginHost,
    path: &Path,
    config: &[(String, String)],
    grants: &[PathBuf],
    grants_rw: &[PathBuf],
    reader: &ReaderInputs,
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
    let sample = if kind == PluginKind::SourceReader {
        Some(reader_sample(reader, scratch.path())?)
    } else if reader.given() {
        return Err(PrepareError::ReaderOption {
            option: if !reader.columns.is_empty() {
                "--column"
            } else if reader.input.is_some() {
                "--input"
            } else {
                "--bad-input"
            },
            reason: format!(
                "only a source reader takes --column, --input and --bad-input; this is a {kind} plugin"
            ),
        });
    } else {
        None
    };
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
    Ok(Prepared {
        plugin,
        scratch,
        reader: sample,
    })
}
