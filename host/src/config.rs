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

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::graph::{
    AggFunction, AggMode, Aggregate, CmpOp, DistributionPattern, JobEdge, JobGraph, JobVertex,
    Operator, Parallelism, SinkFormat, SinkSpec,
};

/// Default `bytes-per-task` for `auto` parallelism: 64 MiB, as Flink's
/// `execution.batch.adaptive.auto-parallelism.avg-data-volume-per-task`.
pub const DEFAULT_BYTES_PER_TASK: u64 = 64 * 1024 * 1024;
/// Default upper bound of `auto` parallelism (and the number of
/// subpartitions a producer writes for an `auto` consumer).
pub const DEFAULT_MAX_PARALLELISM: u32 = 32;
/// Default number of attempts an execution vertex gets before the job fails.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 3;

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
    #[error("{file}: field `{field}`: cannot read component {path}: {source}")]
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
}

/// How a job file is loaded.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// The data directory: replaces `${data_dir}` in plugin configs, granted
    /// directories and sink paths.
    pub data_dir: PathBuf,
}

/// What a plugin instance is: a split enumerator or a shuffle master.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PluginKindConfig {
    /// Feeds a source job vertex (world `split-enumerator-plugin`).
    SplitEnumerator,
    /// Decides where partitions live (world `shuffle-master-plugin`).
    ShuffleMaster,
}

/// What happens when a plugin traps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnTrap {
    /// Rebuild the store and restore the last snapshot.
    Rebuild,
    /// Fail the job.
    Fail,
}

/// Resource limits of one plugin instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginLimits {
    /// Deadline of one plugin call (default 5 s).
    pub call_timeout: Duration,
    /// Cap of the plugin's linear memory, bytes (default 256 MiB).
    pub memory_bytes: u64,
    /// What a trap does (default [`OnTrap::Fail`]).
    pub on_trap: OnTrap,
}

/// One directory granted to a plugin, at the same absolute path inside.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantedDir {
    /// Absolute host path.
    pub path: PathBuf,
    /// Whether the plugin may write.
    pub writable: bool,
}

/// One named plugin instance, paths resolved.
#[derive(Debug, Clone)]
pub struct PluginConfig {
    /// Name (the key under `[plugins]`).
    pub name: String,
    /// Absolute path of the component file (checked readable).
    pub component: PathBuf,
    /// Kind.
    pub kind: PluginKindConfig,
    /// Config map in file order, `${data_dir}`/`${job_dir}` substituted.
    pub config: Vec<(String, String)>,
    /// Granted directories.
    pub dirs: Vec<GrantedDir>,
    /// Limits.
    pub limits: PluginLimits,
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
    /// Plugin instances by name.
    pub plugins: BTreeMap<String, PluginConfig>,
    /// The shuffle master plugin's name.
    pub shuffle_plugin: String,
    /// Recovery settings.
    pub recovery: RecoverySettings,
    /// The job graph, columns resolved.
    pub graph: JobGraph,
}

// ---- raw (serde) shapes -------------------------------------------------------------------

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawJobFile {
    job: RawJob,
    #[serde(default)]
    recovery: Option<RawRecovery>,
    shuffle: RawShuffle,
    #[serde(default)]
    plugins: toml::Table,
    #[serde(default)]
    vertices: Vec<toml::Value>,
    #[serde(default)]
    edges: Vec<toml::Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawJob {
    name: String,
    workers: Option<i64>,
    max_attempts: Option<i64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawRecovery {
    enabled: Option<bool>,
    previous_worker_timeout_ms: Option<u64>,
    snapshot_min_pause_ms: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawShuffle {
    plugin: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawPlugin {
    component: String,
    kind: String,
    #[serde(default)]
    config: toml::Table,
    #[serde(default)]
    dirs: Vec<RawDir>,
    #[serde(default)]
    limits: Option<RawLimits>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawDir {
    path: String,
    #[serde(default)]
    writable: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawLimits {
    call_timeout_ms: Option<u64>,
    memory_mib: Option<u64>,
    on_trap: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawVertex {
    id: String,
    parallelism: toml::Value,
    #[serde(default)]
    source: Option<String>,
    #[serde(default)]
    operators: Vec<toml::Value>,
    #[serde(default)]
    max_parallelism: Option<i64>,
    #[serde(default)]
    bytes_per_task: Option<i64>,
    #[serde(default)]
    record_delay_us: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawEdge {
    from: String,
    to: String,
    kind: String,
    #[serde(default)]
    key: Vec<String>,
}

#[derive(Deserialize)]
#[serde(tag = "op", rename_all = "kebab-case", deny_unknown_fields)]
enum RawOperator {
    ReadLines {},
    #[serde(rename_all = "kebab-case")]
    ReadCsv {
        columns: Vec<String>,
        #[serde(default)]
        delimiter: Option<String>,
        #[serde(default)]
        skip_header: bool,
    },
    #[serde(rename_all = "kebab-case")]
    Tokenize {
        column: String,
        #[serde(rename = "as")]
        output: String,
        #[serde(default)]
        lowercase: bool,
    },
    #[serde(rename_all = "kebab-case")]
    Filter {
        column: String,
        cmp: String,
        value: toml::Value,
        #[serde(default, rename = "type")]
        value_type: Option<String>,
    },
    #[serde(rename_all = "kebab-case")]
    Project {
        columns: Vec<String>,
    },
    #[serde(rename_all = "kebab-case")]
    Aggregate {
        key: Vec<String>,
        aggregates: Vec<RawAggregate>,
        #[serde(default)]
        mode: Option<String>,
        #[serde(default)]
        decimals: Option<u32>,
    },
    #[serde(rename_all = "kebab-case")]
    WriteCsv {
        path: String,
        #[serde(default)]
        header: bool,
        #[serde(default)]
        delimiter: Option<String>,
    },
    #[serde(rename_all = "kebab-case")]
    WriteText {
        path: String,
        #[serde(default)]
        separator: Option<String>,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawAggregate {
    #[serde(rename = "fn")]
    function: String,
    #[serde(default)]
    column: Option<String>,
    #[serde(rename = "as")]
    output: String,
}

// ---- loading ------------------------------------------------------------------------------

/// Reads and validates the job file at `path`.
///
/// Relative paths in the file (components, granted directories, sink paths)
/// are resolved against the file's folder; `${data_dir}` is replaced by
/// `opts.data_dir` (made absolute) and `${job_dir}` by the file's folder.
///
/// # Errors
///
/// [`ConfigError`] naming the file and the field: the file cannot be read,
/// is not TOML, has an unknown or missing field, names a plugin that does not
/// exist or has the wrong kind, has a cycle, a bad parallelism, a forward
/// edge between vertices of different parallelism, an unknown column, or a
/// component that cannot be read.
pub fn load_job(path: &Path, opts: &LoadOptions) -> Result<JobConfig, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
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
        message: parse_message(&e, text),
    })?;
    let job_dir = absolute(path.parent().unwrap_or(Path::new(".")));
    let data_dir = absolute(&opts.data_dir);
    let v = Validator {
        file,
        job_dir,
        data_dir,
    };
    v.validate(raw)
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

fn absolute(p: &Path) -> PathBuf {
    let p = if p.as_os_str().is_empty() {
        Path::new(".")
    } else {
        p
    };
    normalize(&std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf()))
}

/// Removes `.` and resolves `..` lexically (without touching the file system).
fn normalize(p: &Path) -> PathBuf {
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

struct Validator {
    file: PathBuf,
    job_dir: PathBuf,
    data_dir: PathBuf,
}

impl Validator {
    fn invalid(&self, field: impl Into<String>, reason: impl Into<String>) -> ConfigError {
        ConfigError::Invalid {
            file: self.file.clone(),
            field: field.into(),
            reason: reason.into(),
        }
    }

    fn typed<T: serde::de::DeserializeOwned>(
        &self,
        field: &str,
        value: toml::Value,
    ) -> Result<T, ConfigError> {
        value
            .try_into()
            .map_err(|e: toml::de::Error| self.invalid(field, e.message().trim().to_string()))
    }

    fn substitute(&self, s: &str) -> String {
        s.replace("${data_dir}", &self.data_dir.to_string_lossy())
            .replace("${job_dir}", &self.job_dir.to_string_lossy())
    }

    fn resolve_path(&self, s: &str) -> PathBuf {
        let p = PathBuf::from(self.substitute(s));
        if p.is_absolute() {
            normalize(&p)
        } else {
            normalize(&self.job_dir.join(p))
        }
    }

    /// A plugin config value: substituted; a value that starts with
    /// `${data_dir}` or `${job_dir}` is a path and is normalized (no `..`),
    /// so the plugin sees the same path the host grants.
    fn config_value(&self, s: &str) -> String {
        let v = self.substitute(s);
        if s.starts_with("${data_dir}") || s.starts_with("${job_dir}") {
            normalize(Path::new(&v)).to_string_lossy().into_owned()
        } else {
            v
        }
    }

    fn validate(&self, raw: RawJobFile) -> Result<JobConfig, ConfigError> {
        if raw.job.name.is_empty()
            || !raw
                .job
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(self.invalid(
                "job.name",
                "must be non-empty and use only letters, digits, `-` and `_`",
            ));
        }
        let workers = match raw.job.workers {
            None => None,
            Some(n) if (1..=1024).contains(&n) => Some(n as usize),
            Some(n) => return Err(self.invalid("job.workers", format!("{n} is not in 1..=1024"))),
        };
        let max_attempts = match raw.job.max_attempts {
            None => DEFAULT_MAX_ATTEMPTS,
            Some(n) if (1..=100).contains(&n) => n as u32,
            Some(n) => {
                return Err(self.invalid("job.max-attempts", format!("{n} is not in 1..=100")));
            }
        };
        let recovery = raw.recovery.map_or(
            RecoverySettings {
                enabled: true,
                previous_worker_timeout: Duration::from_secs(10),
                snapshot_min_pause: Duration::from_secs(1),
            },
            |r| RecoverySettings {
                enabled: r.enabled.unwrap_or(true),
                previous_worker_timeout: Duration::from_millis(
                    r.previous_worker_timeout_ms.unwrap_or(10_000),
                ),
                snapshot_min_pause: Duration::from_millis(r.snapshot_min_pause_ms.unwrap_or(1000)),
            },
        );
        let mut plugins = BTreeMap::new();
        for (name, value) in raw.plugins {
            let p = self.plugin(&name, value)?;
            plugins.insert(name, p);
        }
        match plugins.get(&raw.shuffle.plugin) {
            None => {
                return Err(self.invalid(
                    "shuffle.plugin",
                    format!("no plugin named `{}` under [plugins]", raw.shuffle.plugin),
                ));
            }
            Some(p) if p.kind != PluginKindConfig::ShuffleMaster => {
                return Err(self.invalid(
                    "shuffle.plugin",
                    format!("plugin `{}` is not a shuffle-master", raw.shuffle.plugin),
                ));
            }
            Some(_) => {}
        }
        let graph = self.graph(raw.vertices, raw.edges, &plugins)?;
        Ok(JobConfig {
            file: self.file.clone(),
            name: raw.job.name,
            workers,
            max_attempts,
            plugins,
            shuffle_plugin: raw.shuffle.plugin,
            recovery,
            graph,
        })
    }

    fn plugin(&self, name: &str, value: toml::Value) -> Result<PluginConfig, ConfigError> {
        let field = format!("plugins.{name}");
        let raw: RawPlugin = self.typed(&field, value)?;
        let kind = match raw.kind.as_str() {
            "split-enumerator" => PluginKindConfig::SplitEnumerator,
            "shuffle-master" => PluginKindConfig::ShuffleMaster,
            other => {
                return Err(self.invalid(
                    format!("{field}.kind"),
                    format!("`{other}` is not `split-enumerator` or `shuffle-master`"),
                ));
            }
        };
        let component = self.resolve_path(&raw.component);
        if let Err(source) = std::fs::File::open(&component).and_then(|f| {
            if f.metadata()?.is_dir() {
                Err(std::io::Error::other("is a directory"))
            } else {
                Ok(())
            }
        }) {
            return Err(ConfigError::Component {
                file: self.file.clone(),
                field: format!("{field}.component"),
                path: component,
                source,
            });
        }
        let mut config = Vec::with_capacity(raw.config.len());
        for (k, v) in raw.config {
            let s = match v {
                toml::Value::String(s) => self.config_value(&s),
                toml::Value::Integer(i) => i.to_string(),
                toml::Value::Float(f) => f.to_string(),
                toml::Value::Boolean(b) => b.to_string(),
                _ => {
                    return Err(self.invalid(
                        format!("{field}.config.{k}"),
                        "must be a string, number or boolean",
                    ));
                }
            };
            config.push((k, s));
        }
        let dirs = raw
            .dirs
            .iter()
            .map(|d| GrantedDir {
                path: self.resolve_path(&d.path),
                writable: d.writable,
            })
            .collect();
        let mut limits = PluginLimits {
            call_timeout: Duration::from_secs(5),
            memory_bytes: 256 * 1024 * 1024,
            on_trap: OnTrap::Fail,
        };
        if let Some(l) = raw.limits {
            if let Some(ms) = l.call_timeout_ms {
                if ms == 0 {
                    return Err(self.invalid(
                        format!("{field}.limits.call-timeout-ms"),
                        "must be at least 1",
                    ));
                }
                limits.call_timeout = Duration::from_millis(ms);
            }
            if let Some(mib) = l.memory_mib {
                if mib == 0 || mib > 4096 {
                    return Err(self.invalid(
                        format!("{field}.limits.memory-mib"),
                        format!("{mib} is not in 1..=4096"),
                    ));
                }
                limits.memory_bytes = mib * 1024 * 1024;
            }
            if let Some(t) = l.on_trap {
                limits.on_trap = match t.as_str() {
                    "rebuild" => OnTrap::Rebuild,
                    "fail" => OnTrap::Fail,
                    other => {
                        return Err(self.invalid(
                            format!("{field}.limits.on-trap"),
                            format!("`{other}` is not `rebuild` or `fail`"),
                        ));
                    }
                };
            }
        }
        Ok(PluginConfig {
            name: name.to_string(),
            component,
            kind,
            config,
            dirs,
            limits,
        })
    }

    fn graph(
        &self,
        raw_vertices: Vec<toml::Value>,
        raw_edges: Vec<toml::Value>,
        plugins: &BTreeMap<String, PluginConfig>,
    ) -> Result<JobGraph, ConfigError> {
        if raw_vertices.is_empty() {
            return Err(self.invalid("vertices", "the job has no vertices"));
        }
        let mut vertices = Vec::new();
        let mut index: HashMap<String, usize> = HashMap::new();
        let mut raw_ops = Vec::new();
        for (i, value) in raw_vertices.into_iter().enumerate() {
            let field = format!("vertices[{i}]");
            let rv: RawVertex = self.typed(&field, value)?;
            if rv.id.is_empty()
                || !rv
                    .id
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            {
                return Err(self.invalid(
                    format!("{field}.id"),
                    "must be non-empty and use only letters, digits, `-` and `_`",
                ));
            }
            if index.insert(rv.id.clone(), i).is_some() {
                return Err(self.invalid(
                    format!("{field}.id"),
                    format!("duplicate vertex id `{}`", rv.id),
                ));
            }
            let parallelism = match &rv.parallelism {
                toml::Value::String(s) if s == "auto" => Parallelism::Auto,
                toml::Value::Integer(n) if (1..=4096).contains(n) => Parallelism::Fixed(*n as u32),
                other => {
                    return Err(self.invalid(
                        format!("{field}.parallelism"),
                        format!("{other} is neither an integer in 1..=4096 nor \"auto\""),
                    ));
                }
            };
            let max_parallelism = match rv.max_parallelism {
                None => DEFAULT_MAX_PARALLELISM,
                Some(n) if (1..=4096).contains(&n) => n as u32,
                Some(n) => {
                    return Err(self.invalid(
                        format!("{field}.max-parallelism"),
                        format!("{n} is not in 1..=4096"),
                    ));
                }
            };
            let bytes_per_task = match rv.bytes_per_task {
                None => DEFAULT_BYTES_PER_TASK,
                Some(n) if n >= 1 => n as u64,
                Some(n) => {
                    return Err(self.invalid(
                        format!("{field}.bytes-per-task"),
                        format!("{n} is not positive"),
                    ));
                }
            };
            if let Some(src) = &rv.source {
                match plugins.get(src) {
                    None => {
                        return Err(self.invalid(
                            format!("{field}.source"),
                            format!("no plugin named `{src}` under [plugins]"),
                        ));
                    }
                    Some(p) if p.kind != PluginKindConfig::SplitEnumerator => {
                        return Err(self.invalid(
                            format!("{field}.source"),
                            format!("plugin `{src}` is not a split-enumerator"),
                        ));
                    }
                    Some(_) => {}
                }
                if parallelism == Parallelism::Auto {
                    return Err(self.invalid(
                        format!("{field}.parallelism"),
                        "a source vertex needs a fixed parallelism",
                    ));
                }
            }
            raw_ops.push(rv.operators);
            vertices.push(JobVertex {
                id: rv.id,
                parallelism,
                max_parallelism,
                bytes_per_task,
                source: rv.source,
                operators: Vec::new(),
                sink: None,
                record_delay: Duration::from_micros(rv.record_delay_us.unwrap_or(0)),
                output_columns: Vec::new(),
            });
        }
        let mut edges = Vec::new();
        for (i, value) in raw_edges.into_iter().enumerate() {
            let field = format!("edges[{i}]");
            let re: RawEdge = self.typed(&field, value)?;
            let from = *index.get(&re.from).ok_or_else(|| {
                self.invalid(format!("{field}.from"), format!("no vertex `{}`", re.from))
            })?;
            let to = *index.get(&re.to).ok_or_else(|| {
                self.invalid(format!("{field}.to"), format!("no vertex `{}`", re.to))
            })?;
            let pattern = match re.kind.as_str() {
                "forward" => DistributionPattern::Forward,
                "hash" => DistributionPattern::Hash,
                other => {
                    return Err(self.invalid(
                        format!("{field}.kind"),
                        format!("`{other}` is not `forward` or `hash`"),
                    ));
                }
            };
            match pattern {
                DistributionPattern::Hash if re.key.is_empty() => {
                    return Err(self.invalid(
                        format!("{field}.key"),
                        "a hash edge needs at least one key column",
                    ));
                }
                DistributionPattern::Forward if !re.key.is_empty() => {
                    return Err(self.invalid(format!("{field}.key"), "a forward edge takes no key"));
                }
                DistributionPattern::Forward => {
                    let (pf, pt) = (vertices[from].parallelism, vertices[to].parallelism);
                    if pf == Parallelism::Auto || pt == Parallelism::Auto || pf != pt {
                        return Err(self.invalid(
                            format!("{field}.kind"),
                            format!(
                                "a forward edge needs equal fixed parallelism on both ends; `{}` has {pf}, `{}` has {pt}",
                                re.from, re.to
                            ),
                        ));
                    }
                }
                DistributionPattern::Hash => {}
            }
            if edges.iter().any(|e: &JobEdge| e.from == from && e.to == to) {
                return Err(self.invalid(field, format!("duplicate edge {} -> {}", re.from, re.to)));
            }
            edges.push(JobEdge {
                from,
                to,
                pattern,
                key_names: re.key,
                key: Vec::new(),
            });
        }
        let order = topological_order(vertices.len(), &edges).map_err(|cycle| {
            let names: Vec<&str> = cycle.iter().map(|&v| vertices[v].id.as_str()).collect();
            self.invalid(
                "edges",
                format!("the edges form a cycle through {}", names.join(" -> ")),
            )
        })?;
        for (i, v) in vertices.iter().enumerate() {
            let has_in = edges.iter().any(|e| e.to == i);
            if v.source.is_some() && has_in {
                return Err(self.invalid(
                    format!("vertices[{i}].source"),
                    "a source vertex cannot have incoming edges",
                ));
            }
            if v.source.is_none() && !has_in {
                return Err(self.invalid(
                    format!("vertices[{i}].source"),
                    "a vertex without incoming edges must name its source plugin",
                ));
            }
            let ins: Vec<&JobEdge> = edges.iter().filter(|e| e.to == i).collect();
            if ins.len() > 1
                && ins
                    .iter()
                    .any(|e| e.pattern == DistributionPattern::Forward)
            {
                return Err(self.invalid(
                    format!("vertices[{i}]"),
                    "a vertex fed by a forward edge takes no other input",
                ));
            }
        }
        // Resolve operators in topological order, so each vertex knows its input columns.
        for &vi in &order {
            let input: Option<Vec<String>> = {
                let ins: Vec<&JobEdge> = edges.iter().filter(|e| e.to == vi).collect();
                match ins.first() {
                    None => None,
                    Some(first) => {
                        let cols = vertices[first.from].output_columns.clone();
                        for e in &ins[1..] {
                            if vertices[e.from].output_columns != cols {
                                return Err(self.invalid(
                                    format!("vertices[{vi}]"),
                                    format!(
                                        "inputs `{}` and `{}` produce different columns",
                                        vertices[first.from].id, vertices[e.from].id
                                    ),
                                ));
                            }
                        }
                        Some(cols)
                    }
                }
            };
            let is_sink = !edges.iter().any(|e| e.from == vi);
            let ops = std::mem::take(&mut raw_ops[vi]);
            let (operators, sink, out) = self.operators(vi, ops, input, is_sink)?;
            let v = &mut vertices[vi];
            v.operators = operators;
            v.sink = sink;
            v.output_columns = out;
        }
        for (i, e) in edges.iter_mut().enumerate() {
            let cols = &vertices[e.from].output_columns;
            for k in &e.key_names {
                let idx = cols.iter().position(|c| c == k).ok_or_else(|| {
                    self.invalid(
                        format!("edges[{i}].key"),
                        format!(
                            "`{k}` is not a column of `{}` (it has {})",
                            vertices[e.from].id,
                            cols.join(", ")
                        ),
                    )
                })?;
                e.key.push(idx);
            }
        }
        Ok(JobGraph {
            vertices,
            edges,
            order,
        })
    }

    #[expect(
        clippy::type_complexity,
        reason = "private helper returning the three parts of a chain"
    )]
    fn operators(
        &self,
        vi: usize,
        raw: Vec<toml::Value>,
        input: Option<Vec<String>>,
        is_sink: bool,
    ) -> Result<(Vec<Operator>, Option<SinkSpec>, Vec<String>), ConfigError> {
        let is_source = input.is_none();
        let mut cols: Option<Vec<String>> = input;
        let mut ops = Vec::new();
        let mut sink = None;
        let n = raw.len();
        for (j, value) in raw.into_iter().enumerate() {
            let field = format!("vertices[{vi}].operators[{j}]");
            let rop: RawOperator = self.typed(&field, value)?;
            let is_read = matches!(rop, RawOperator::ReadLines {} | RawOperator::ReadCsv { .. });
            if is_read != (is_source && j == 0) {
                return Err(self.invalid(
                    format!("{field}.op"),
                    if is_read {
                        "a read operator must be the first operator of a source vertex"
                    } else {
                        "a source vertex must start with `read-lines` or `read-csv`"
                    },
                ));
            }
            let is_write = matches!(
                rop,
                RawOperator::WriteCsv { .. } | RawOperator::WriteText { .. }
            );
            if is_write && !(is_sink && j + 1 == n) {
                return Err(self.invalid(
                    format!("{field}.op"),
                    "a write operator must be the last operator of a vertex without outgoing edges",
                ));
            }
            let current = cols.clone().unwrap_or_default();
            let col = |name: &str, sub: &str| -> Result<usize, ConfigError> {
                current.iter().position(|c| c == name).ok_or_else(|| {
                    self.invalid(
                        format!("{field}.{sub}"),
                        format!(
                            "`{name}` is not a column here (columns: {})",
                            current.join(", ")
                        ),
                    )
                })
            };
            match rop {
                RawOperator::ReadLines {} => {
                    ops.push(Operator::ReadLines);
                    cols = Some(vec!["line".to_string()]);
                }
                RawOperator::ReadCsv {
                    columns,
                    delimiter,
                    skip_header,
                } => {
                    let delimiter = self.delimiter(&format!("{field}.delimiter"), delimiter)?;
                    if columns.is_empty() {
                        return Err(
                            self.invalid(format!("{field}.columns"), "needs at least one column")
                        );
                    }
                    ops.push(Operator::ReadCsv {
                        columns: columns.len(),
                        delimiter,
                        skip_header,
                    });
                    cols = Some(columns);
                }
                RawOperator::Tokenize {
                    column,
                    output,
                    lowercase,
                } => {
                    let c = col(&column, "column")?;
                    ops.push(Operator::Tokenize {
                        column: c,
                        lowercase,
                    });
                    cols = Some(vec![output]);
                }
                RawOperator::Filter {
                    column,
                    cmp,
                    value,
                    value_type,
                } => {
                    let c = col(&column, "column")?;
                    let op = CmpOp::parse(&cmp).ok_or_else(|| {
                        self.invalid(
                            format!("{field}.cmp"),
                            format!("`{cmp}` is not one of == != < <= > >="),
                        )
                    })?;
                    let numeric = match value_type.as_deref() {
                        None | Some("string") => false,
                        Some("number") => true,
                        Some(other) => {
                            return Err(self.invalid(
                                format!("{field}.type"),
                                format!("`{other}` is not `string` or `number`"),
                            ));
                        }
                    };
                    let text = match value {
                        toml::Value::String(s) => s,
                        toml::Value::Integer(i) => i.to_string(),
                        toml::Value::Float(f) => f.to_string(),
                        _ => {
                            return Err(self.invalid(
                                format!("{field}.value"),
                                "must be a string or a number",
                            ));
                        }
                    };
                    let number = if numeric {
                        Some(crate::runtime::Decimal::parse(&text).ok_or_else(|| {
                            self.invalid(
                                format!("{field}.value"),
                                format!("`{text}` is not a number"),
                            )
                        })?)
                    } else {
                        None
                    };
                    ops.push(Operator::Filter {
                        column: c,
                        cmp: op,
                        value: text,
                        number,
                    });
                }
                RawOperator::Project { columns } => {
                    let mut idx = Vec::new();
                    for name in &columns {
                        idx.push(col(name, "columns")?);
                    }
                    ops.push(Operator::Project { columns: idx });
                    cols = Some(columns);
                }
                RawOperator::Aggregate {
                    key,
                    aggregates,
                    mode,
                    decimals,
                } => {
                    let (op, out) =
                        self.aggregate(&field, &current, key, aggregates, mode, decimals)?;
                    ops.push(op);
                    cols = Some(out);
                }
                RawOperator::WriteCsv {
                    path,
                    header,
                    delimiter,
                } => {
                    let delimiter = self.delimiter(&format!("{field}.delimiter"), delimiter)?;
                    sink = Some(SinkSpec {
                        dir: self.resolve_path(&path),
                        format: SinkFormat::Csv { header, delimiter },
                        columns: current.clone(),
                    });
                }
                RawOperator::WriteText { path, separator } => {
                    sink = Some(SinkSpec {
                        dir: self.resolve_path(&path),
                        format: SinkFormat::Text {
                            separator: separator.unwrap_or_else(|| " ".to_string()),
                        },
                        columns: current.clone(),
                    });
                }
            }
        }
        if is_source && ops.is_empty() {
            return Err(self.invalid(
                format!("vertices[{vi}].operators"),
                "a source vertex must start with `read-lines` or `read-csv`",
            ));
        }
        if is_sink && sink.is_none() {
            return Err(self.invalid(
                format!("vertices[{vi}].operators"),
                "a vertex without outgoing edges must end with `write-csv` or `write-text`",
            ));
        }
        Ok((ops, sink, cols.unwrap_or_default()))
    }

    fn delimiter(&self, field: &str, d: Option<String>) -> Result<u8, ConfigError> {
        match d.as_deref() {
            None => Ok(b','),
            Some(s) if s.len() == 1 && s.as_bytes()[0] != b'"' && s.as_bytes()[0] != b'\n' => {
                Ok(s.as_bytes()[0])
            }
            Some(s) => Err(self.invalid(
                field,
                format!("`{s}` is not a single ASCII character other than a quote or newline"),
            )),
        }
    }

    fn aggregate(
        &self,
        field: &str,
        current: &[String],
        key: Vec<String>,
        aggregates: Vec<RawAggregate>,
        mode: Option<String>,
        decimals: Option<u32>,
    ) -> Result<(Operator, Vec<String>), ConfigError> {
        let mode = match mode.as_deref() {
            None | Some("complete") => AggMode::Complete,
            Some("partial") => AggMode::Partial,
            Some("final") => AggMode::Final,
            Some(other) => {
                return Err(self.invalid(
                    format!("{field}.mode"),
                    format!("`{other}` is not `complete`, `partial` or `final`"),
                ));
            }
        };
        let decimals = decimals.unwrap_or(2);
        if decimals > 6 {
            return Err(self.invalid(format!("{field}.decimals"), "at most 6"));
        }
        if aggregates.is_empty() {
            return Err(self.invalid(
                format!("{field}.aggregates"),
                "needs at least one aggregate",
            ));
        }
        let find = |name: &str, sub: String| -> Result<usize, ConfigError> {
            current.iter().position(|c| c == name).ok_or_else(|| {
                self.invalid(
                    sub,
                    format!(
                        "`{name}` is not a column here (columns: {})",
                        current.join(", ")
                    ),
                )
            })
        };
        let mut key_idx = Vec::new();
        for k in &key {
            key_idx.push(find(k, format!("{field}.key"))?);
        }
        let mut out = key.clone();
        let mut aggs = Vec::new();
        for (a, ra) in aggregates.into_iter().enumerate() {
            let afield = format!("{field}.aggregates[{a}]");
            let function = match ra.function.as_str() {
                "count" => AggFunction::Count,
                "sum" => AggFunction::Sum,
                "min" => AggFunction::Min,
                "max" => AggFunction::Max,
                "avg" => AggFunction::Avg,
                other => {
                    return Err(self.invalid(
                        format!("{afield}.fn"),
                        format!("`{other}` is not count, sum, min, max or avg"),
                    ));
                }
            };
            // Input columns: in final mode the partial state columns, named after the output.
            let inputs = if mode == AggMode::Final {
                let names = Aggregate::state_columns(function, &ra.output);
                let mut v = Vec::new();
                for n in names {
                    v.push(find(&n, format!("{afield}.as"))?);
                }
                v
            } else if function == AggFunction::Count {
                if ra.column.is_some() {
                    return Err(self.invalid(format!("{afield}.column"), "count takes no column"));
                }
                Vec::new()
            } else {
                let c = ra.column.as_deref().ok_or_else(|| {
                    self.invalid(
                        format!("{afield}.column"),
                        format!("{} needs a column", ra.function),
                    )
                })?;
                vec![find(c, format!("{afield}.column"))?]
            };
            if out.contains(&ra.output) {
                return Err(self.invalid(
                    format!("{afield}.as"),
                    format!("duplicate output column `{}`", ra.output),
                ));
            }
            if mode == AggMode::Partial {
                out.extend(Aggregate::state_columns(function, &ra.output));
            } else {
                out.push(ra.output.clone());
            }
            aggs.push(Aggregate {
                function,
                inputs,
                output: ra.output,
            });
        }
        Ok((
            Operator::Aggregate {
                key: key_idx,
                aggregates: aggs,
                mode,
                decimals,
            },
            out,
        ))
    }
}

/// Kahn's algorithm; on a cycle returns the vertices of one cycle.
fn topological_order(n: usize, edges: &[JobEdge]) -> Result<Vec<usize>, Vec<usize>> {
    let mut indeg = vec![0usize; n];
    for e in edges {
        indeg[e.to] += 1;
    }
    let mut ready: Vec<usize> = (0..n).filter(|&v| indeg[v] == 0).rev().collect();
    let mut order = Vec::with_capacity(n);
    while let Some(v) = ready.pop() {
        order.push(v);
        for e in edges.iter().filter(|e| e.from == v) {
            indeg[e.to] -= 1;
            if indeg[e.to] == 0 {
                ready.push(e.to);
            }
        }
    }
    if order.len() == n {
        return Ok(order);
    }
    // Walk predecessors among the remaining vertices until one repeats.
    let mut v = (0..n).find(|&v| indeg[v] > 0).unwrap_or(0);
    let mut seen = vec![usize::MAX; n];
    let mut path = Vec::new();
    while seen[v] == usize::MAX {
        seen[v] = path.len();
        path.push(v);
        v = edges
            .iter()
            .find(|e| e.to == v && indeg[e.from] > 0)
            .map_or(v, |e| e.from);
    }
    let mut cycle: Vec<usize> = path[seen[v]..].to_vec();
    cycle.reverse();
    cycle.push(cycle[0]);
    Err(cycle)
}
