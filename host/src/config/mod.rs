//! The job file: a TOML document naming the plugin instances, the job graph
//! (job vertices with built-in operator chains, edges with a distribution
//! pattern), the recovery settings and the shuffle plugin.
//!
//! [`load_job`] reads and validates a file in one pass and returns a
//! [`JobConfig`] whose [`JobGraph`] has every column reference resolved, so
//! nothing later can fail on a typo. Every mistake is one [`ConfigError`]
//! naming the file and the field (`vertices[1].parallelism`,
//! `plugins.files.component`, ...). The format is specified, with a complete
//! example, in `docs/job-file.md`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::graph::JobGraph;
#[cfg(doc)]
use crate::plugin::Limits;
use crate::plugin::PluginSpec;

/// Default `bytes-per-task` for `auto` parallelism: 64 MiB, as Flink's
/// `execution.batch.adaptive.auto-parallelism.avg-data-volume-per-task`.
pub const DEFAULT_BYTES_PER_TASK: u64 = 64 * 1024 * 1024;
/// Default upper bound of `auto` parallelism (and the number of
/// subpartitions a producer writes for an `auto` consumer).
pub const DEFAULT_MAX_PARALLELISM: u32 = 32;
/// Default number of attempts an execution vertex gets before the job fails.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 3;
/// Default `job.slot-request-timeout-ms`: 5 minutes, as Flink's
/// `slot.request.timeout`.
pub const DEFAULT_SLOT_REQUEST_TIMEOUT: Duration = Duration::from_secs(300);
/// The plugin name of the shuffle master a job without `[shuffle]` uses:
/// the sample `local-shuffle` (`builtin:local-shuffle`) with
/// `root = "${data_dir}/shuffle"`, that folder granted read-write.
pub const DEFAULT_SHUFFLE_PLUGIN: &str = "local-shuffle";
/// Largest `job.slot-request-timeout-ms`: one day.
pub const MAX_SLOT_REQUEST_TIMEOUT_MS: i64 = 86_400_000;

/// Everything that can be wrong with a job file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The job file could not be read.
    #[error("{file}: cannot read the job file: {source}")]
    Read {
        /// The job file.
        file: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A worker's `--config` file could not be read.
    #[error("{file}: cannot read the config file: {source}")]
    ReadConfig {
        /// The config file.
        file: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not valid TOML or does not have the job file's shape
    /// (an unknown field, a missing field, a value of the wrong type).
    #[error("{file}: {message}")]
    Parse {
        /// The job file.
        file: PathBuf,
        /// The parser's message; it names the field and the line.
        message: String,
    },
    /// A field has a value that is not allowed.
    #[error("{file}: field `{field}`: {reason}")]
    Invalid {
        /// The job file.
        file: PathBuf,
        /// Path of the field, e.g. `vertices[1].parallelism`.
        field: String,
        /// What is wrong.
        reason: String,
    },
    /// A plugin's component file cannot be read.
    #[error("{file}: field `{field}`: cannot read component {}: {source}", one_line(&path.display().to_string()))]
    Component {
        /// The job file.
        file: PathBuf,
        /// Path of the field, e.g. `plugins.files.component`.
        field: String,
        /// The component path, resolved against the job file's folder.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A command-line argument of `coordhost run` is not allowed (checked
    /// with the job file, before anything is created).
    #[error("{arg}: {reason}")]
    Argument {
        /// The option, e.g. `--workers`.
        arg: &'static str,
        /// What is wrong.
        reason: String,
    },
}

/// Longest job name and job vertex id, characters: both become file names
/// (the job's folder in the data directory, partition folders).
pub const MAX_NAME_CHARS: usize = 128;
/// Largest `record-delay-us` (10 s per record).
pub const MAX_RECORD_DELAY_US: u64 = 10_000_000;

/// Makes `s` one line: line breaks and other control characters are
/// escaped, so every refusal is exactly one line whatever the input held.
pub fn one_line(s: &str) -> String {
    if !s.chars().any(char::is_control) {
        return s.to_string();
    }
    s.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// How a job file is loaded.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// The data directory: replaces `${data_dir}` in plugin configs, granted
    /// directories and sink paths.
    pub data_dir: PathBuf,
    /// The compiled-component cache (`--cache-dir`): the components the
    /// check loads (a SQL job's scalar functions) are compiled through it
    /// when the folder already exists, so a job file checked again (a
    /// rerun, a worker's or a standby's start) does not compile them again;
    /// the check never creates it (docs/job-file.md).
    pub cache_dir: Option<PathBuf>,
    /// The job's event log is on object storage (`run --log s3://…`; a job
    /// file's `[job] log` says so itself): whether a sink folder's entries
    /// are this job's is then decided by the driver from the log
    /// ([`crate::scheduler::JobError::ForeignOutput`]), not by the job's
    /// folder in the data directory.
    pub log_on_objects: bool,
}

/// The `[recovery]` table (FLIP-383's settings).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoverySettings {
    /// Whether progress is recovered after a crash
    /// (`execution.batch.job-recovery.enabled`).
    pub enabled: bool,
    /// How long recovery waits for previous workers to report partitions
    /// (`execution.batch.job-recovery.previous-worker.recovery.timeout`).
    pub previous_worker_timeout: Duration,
    /// Minimum pause between two batch snapshots of the plugins
    /// (`execution.batch.job-recovery.snapshot.min-pause`).
    pub snapshot_min_pause: Duration,
}

/// A validated job file.
#[derive(Debug, Clone)]
pub struct JobConfig {
    /// The job file.
    pub file: PathBuf,
    /// Job name (also the job id given to the shuffle master).
    pub name: String,
    /// Worker threads; `None` means one per core.
    pub workers: Option<usize>,
    /// Attempts per execution vertex before the job fails.
    pub max_attempts: u32,
    /// On worker processes: how long an execution vertex may wait for a
    /// worker to run on before the job fails (`job.slot-request-timeout-ms`,
    /// Flink's `slot.request.timeout`).
    pub slot_request_timeout: Duration,
    /// Plugin instances by name: each entry's settings as the plugin host
    /// takes them (component path absolute and checked readable, granted
    /// directories resolved, limits defaulted as [`Limits::default`]).
    pub plugins: BTreeMap<String, PluginSpec>,
    /// The shuffle master plugin's name.
    pub shuffle_plugin: String,
    /// Whether the job file has no `[shuffle]` table, so the job uses the
    /// built-in local shuffle master ([`DEFAULT_SHUFFLE_PLUGIN`], component
    /// `builtin:local-shuffle`, partitions under `${data_dir}/shuffle`).
    pub default_shuffle: bool,
    /// The plugins whose `component` is `builtin:NAME`, by field
    /// (`plugins.NAME`, `functions.NAME`): the file found and its SHA-256,
    /// which the job fingerprint records instead of the path
    /// ([`builtin`]).
    pub builtins: BTreeMap<String, builtin::BuiltinComponent>,
    /// Recovery settings.
    pub recovery: RecoverySettings,
    /// The job graph, columns resolved.
    pub graph: JobGraph,
    /// `[cluster] tls = { cert, key, ca }`: the coordinator's TLS files
    /// (absolute, each checked readable), used with `--listen` unless the
    /// `--tls-*` flags name others.
    pub tls: Option<crate::tls::TlsFiles>,
    /// For a SQL job (docs/sql.md): the query and its tables, which the
    /// job fingerprint covers besides the stage plans in `graph`.
    pub sql: Option<SqlSpec>,
    /// `[job] log = "s3://BUCKET/PREFIX"`: the job's event log on object
    /// storage (docs/object-storage.md); `run --log` overrides it.
    pub log: Option<crate::events::ObjectLogUrl>,
}

/// The SQL of a SQL job: what it was planned from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqlSpec {
    /// The query text.
    pub text: String,
    /// The declared tables, in file order.
    pub tables: Vec<crate::sql::TableDecl>,
    /// DataFusion's target partitions (`[job] parallelism`).
    pub parallelism: u32,
    /// `[job] downstream-parallelism = "auto"`: the stages after hash
    /// exchanges decide their parallelism at run time.
    pub downstream_auto: bool,
    /// `[job] max-parallelism`: the bound of `auto` stages, and the tasks
    /// of a scan sized by `max-task-bytes`.
    pub max_parallelism: u32,
    /// `[job] bytes-per-task` of `auto` stages.
    pub bytes_per_task: u64,
    /// The `[functions.NAME]` scalar functions, loaded (empty when none).
    pub functions: crate::sql::FunctionSet,
    /// The plugin settings of each of `functions`, in the same order
    /// (component path, config, grants, limits): what a worker process
    /// needs to load the same function (`remote::RemoteFunction`).
    pub function_specs: Vec<PluginSpec>,
}

/// Largest file `[cluster] tls` may name: 1 MiB (a PEM certificate chain
/// or key is a few KiB).
pub const MAX_TLS_FILE_BYTES: u64 = 1024 * 1024;

pub use crate::files;
pub mod builtin;
mod functions;
mod operators;
mod paths;
mod raw;
mod readers;
mod sql;
mod validate;

pub(crate) use paths::first_entry;
pub use paths::{NewFolders, check_arguments, check_cache_dir};

use raw::RawJobFile;
use validate::Validator;

/// Reads and validates the job file at `path`.
///
/// Relative paths in the file (components, granted directories, sink paths)
/// are resolved against the file's folder; `${data_dir}` is replaced by
/// `opts.data_dir` (resolved by [`resolve_physical`]) and `${job_dir}` by
/// the file's folder (resolved by [`absolute`]).
///
/// # Errors
///
/// [`ConfigError`] naming the file and the field: the file cannot be read,
/// is not TOML, has an unknown or missing field, names a plugin that does not
/// exist or has the wrong kind, has a cycle, a bad parallelism, a forward
/// edge between vertices of different parallelism, an unknown column, or a
/// component that cannot be read; [`ConfigError::Argument`] naming
/// `--data-dir` when it is not a folder and cannot be created as one, or a
/// `..` in it follows a missing component.
pub fn load_job(path: &Path, opts: &LoadOptions) -> Result<JobConfig, ConfigError> {
    let text = crate::files::read_job_text(path).map_err(|source| ConfigError::Read {
        file: path.to_path_buf(),
        source,
    })?;
    parse_job(path, &text, opts)
}

/// Parses and validates job-file text as if it had been read from `path`
/// (which is used for relative paths and in messages).
///
/// # Errors
///
/// As [`load_job`], except [`ConfigError::Read`].
pub fn parse_job(path: &Path, text: &str, opts: &LoadOptions) -> Result<JobConfig, ConfigError> {
    let file = path.to_path_buf();
    let raw: RawJobFile = toml::from_str(text).map_err(|e| ConfigError::Parse {
        file: file.clone(),
        message: one_line(&parse_message(&e, text)),
    })?;
    let job_dir = absolute(path.parent().unwrap_or(Path::new(".")));
    let data_dir = resolve_physical(&opts.data_dir).map_err(|reason| ConfigError::Argument {
        arg: "--data-dir",
        reason,
    })?;
    let v = Validator {
        file,
        job_dir,
        data_dir,
        cache_dir: opts.cache_dir.clone().filter(|d| d.is_dir()),
        log_on_objects: opts.log_on_objects,
        sinks: std::cell::RefCell::new(Vec::new()),
        builtins: std::cell::RefCell::new(BTreeMap::new()),
        search_path: builtin::search_path(),
    };
    v.check_data_dir()?;
    let config = v.validate(raw)?;
    v.check_paths(&config)?;
    v.check_object_sinks(&config)?;
    Ok(config)
}

/// Reads a worker's `--config` file: a TOML file with one `[cluster]`
/// table, whose `tls = { cert, key, ca }` names the worker's TLS files
/// (relative paths resolved against the file's folder; `${job_dir}` is the
/// file's folder, `${data_dir}` the worker's `--data-dir`). Returns `None`
/// when the table has no `tls`.
///
/// # Errors
///
/// [`ConfigError`] naming the file and the field: the file cannot be read,
/// is not TOML, has another table or an unknown field, or a TLS file is
/// missing, not a regular file, larger than [`MAX_TLS_FILE_BYTES`] or
/// cannot be read.
pub fn load_cluster_file(
    path: &Path,
    data_dir: &Path,
) -> Result<Option<crate::tls::TlsFiles>, ConfigError> {
    let text = crate::files::read_job_text(path).map_err(|source| ConfigError::ReadConfig {
        file: path.to_path_buf(),
        source,
    })?;
    let file = path.to_path_buf();
    let raw: raw::RawClusterFile = toml::from_str(&text).map_err(|e| ConfigError::Parse {
        file: file.clone(),
        message: one_line(&parse_message(&e, &text)),
    })?;
    let v = Validator {
        file,
        job_dir: absolute(path.parent().unwrap_or(Path::new("."))),
        data_dir: absolute(data_dir),
        cache_dir: None,
        log_on_objects: false,
        sinks: std::cell::RefCell::new(Vec::new()),
        builtins: std::cell::RefCell::new(BTreeMap::new()),
        search_path: builtin::search_path(),
    };
    v.cluster_tls(Some(raw.cluster))
}

fn parse_message(e: &toml::de::Error, text: &str) -> String {
    let msg = e.message().trim().to_string();
    match e.span() {
        Some(span) => {
            let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
            format!("line {line}: {msg}")
        }
        None => msg,
    }
}

/// The resolution of the job file's folder (`${job_dir}`): absolute, with
/// `.` and `..` resolved lexically (without touching the file system). An
/// empty path is `.`. Paths the host writes to (`--data-dir`,
/// `--cache-dir`, `--summary-json`) are resolved by [`resolve_physical`].
pub fn absolute(p: &Path) -> PathBuf {
    let p = if p.as_os_str().is_empty() {
        Path::new(".")
    } else {
        p
    };
    normalize(&std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf()))
}

/// The one resolution of a path the user names for the host to write
/// (`--data-dir`, `--cache-dir`, `--summary-json`): absolute, `.` removed,
/// and each `..` resolved on disk, as the OS does when it opens the path:
/// `..` after an existing folder is that folder's real parent (its
/// symbolic links resolved), so `lnk/../d` is `d` beside the target of
/// `lnk`, not `./d`. Components not followed by `..` are kept as written.
/// An empty path is `.`.
///
/// # Errors
///
/// One line when a `..` follows a component that does not exist or is not
/// a folder (the OS could not follow it, and creating the missing folder
/// on the way would leave it behind): it names the component.
pub fn resolve_physical(p: &Path) -> Result<PathBuf, String> {
    use std::path::Component;
    let p = if p.as_os_str().is_empty() {
        Path::new(".")
    } else {
        p
    };
    let abs = std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let shown = one_line(&p.display().to_string());
    let mut out = PathBuf::new();
    for c in abs.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                let at = one_line(&out.display().to_string());
                let real = match std::fs::metadata(&out) {
                    Ok(m) if m.is_dir() => std::fs::canonicalize(&out)
                        .map_err(|e| format!("`{shown}`: `..` follows `{at}`: {e}"))?,
                    Ok(_) => {
                        return Err(format!(
                            "`{shown}`: `..` follows `{at}`, which is not a folder"
                        ));
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        return Err(format!(
                            "`{shown}`: `..` follows `{at}`, which does not exist"
                        ));
                    }
                    Err(e) => return Err(format!("`{shown}`: `..` follows `{at}`: {e}")),
                };
                out = real.parent().map_or(real.clone(), Path::to_path_buf);
            }
            other => out.push(other.as_os_str()),
        }
    }
    Ok(out)
}

/// Removes `.` and resolves `..` lexically (without touching the file system).
pub(super) fn normalize(p: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

#[cfg(test)]
mod resolve_tests {
    use super::resolve_physical;

    #[test]
    fn dotdot_goes_to_the_real_parent_and_other_components_stay_as_written() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let real = std::fs::canonicalize(tmp.path()).expect("canonical");
        std::fs::create_dir_all(real.join("x/y")).expect("x/y");
        std::os::unix::fs::symlink(real.join("x/y"), real.join("lnk")).expect("link");
        assert_eq!(
            resolve_physical(&real.join("lnk/../d")),
            Ok(real.join("x/d"))
        );
        assert_eq!(
            resolve_physical(&real.join("./lnk/new/./d")),
            Ok(real.join("lnk/new/d"))
        );
        assert_eq!(
            resolve_physical(std::path::Path::new("/../..")),
            Ok(std::path::PathBuf::from("/"))
        );
        let missing = resolve_physical(&real.join("lnk/new/../d")).expect_err("refused");
        assert!(missing.ends_with("which does not exist"), "{missing}");
    }
}
