//! Validation of a parsed job file: plugins, vertices, edges, the order of
//! the graph, each error naming its field.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::builtin::BuiltinComponent;
use super::raw::*;
use super::{
    ConfigError, DEFAULT_BYTES_PER_TASK, DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_PARALLELISM,
    DEFAULT_SHUFFLE_PLUGIN, DEFAULT_SLOT_REQUEST_TIMEOUT, JobConfig, MAX_NAME_CHARS,
    MAX_RECORD_DELAY_US, MAX_SLOT_REQUEST_TIMEOUT_MS, MAX_TLS_FILE_BYTES, RecoverySettings,
    normalize, one_line,
};
use crate::files;
use crate::graph::{DistributionPattern, JobEdge, JobGraph, JobVertex, Parallelism};
use crate::plugin::{DirGrant, Limits, PluginKind, PluginSpec};

pub(super) struct Validator {
    pub(super) file: PathBuf,
    pub(super) job_dir: PathBuf,
    pub(super) data_dir: PathBuf,
    /// The compiled-component cache when it already exists
    /// ([`super::LoadOptions::cache_dir`]).
    pub(super) cache_dir: Option<PathBuf>,
    /// [`super::LoadOptions::log_on_objects`].
    pub(super) log_on_objects: bool,
    /// Where each sink's `path` field is, filled while operators are read,
    /// for the path checks that run once the whole file is known.
    pub(super) sinks: RefCell<Vec<SinkField>>,
    /// Every `builtin:NAME` component resolved so far, by field
    /// (`plugins.NAME`, `functions.NAME`).
    pub(super) builtins: RefCell<BTreeMap<String, BuiltinComponent>>,
    /// Where `builtin:NAME` is looked for ([`super::builtin::search_path`]).
    pub(super) search_path: Vec<super::builtin::SearchDir>,
}

/// A sink's place in the job file.
pub(super) struct SinkField {
    /// Index of the job vertex.
    pub(super) vertex: usize,
    /// The write operator's field, e.g. `vertices[1].operators[1]`.
    pub(super) field: String,
    /// The operator's `overwrite`: the folder may hold files of others.
    pub(super) overwrite: bool,
}

impl Validator {
    pub(super) fn invalid(
        &self,
        field: impl Into<String>,
        reason: impl Into<String>,
    ) -> ConfigError {
        ConfigError::Invalid {
            file: self.file.clone(),
            field: one_line(&field.into()),
            reason: one_line(&reason.into()),
        }
    }

    pub(super) fn typed<T: serde::de::DeserializeOwned>(
        &self,
        field: &str,
        value: toml::Value,
    ) -> Result<T, ConfigError> {
        value
            .try_into()
            .map_err(|e: toml::de::Error| self.invalid(field, e.message().trim().to_string()))
    }

    /// A `max-task-bytes` value: absent, or an integer of at least 1
    /// (input bytes per source task). 0, a negative number or anything
    /// but an integer is refused naming `field`.
    pub(super) fn max_task_bytes(
        &self,
        field: &str,
        value: Option<toml::Value>,
    ) -> Result<Option<u64>, ConfigError> {
        match value {
            None => Ok(None),
            Some(toml::Value::Integer(n)) if n >= 1 => Ok(Some(n as u64)),
            Some(toml::Value::Integer(n)) => {
                Err(self.invalid(field, format!("{n} is not a positive number of bytes")))
            }
            Some(other) => Err(self.invalid(
                field,
                format!("{other} is not an integer (input bytes per source task)"),
            )),
        }
    }

    /// One word of a closed set (a serde enum with kebab-case names): an
    /// unknown word is refused naming `field`, with serde's message
    /// ("unknown variant `x`, expected one of `a`, `b`, ...").
    pub(super) fn choice<T: serde::de::DeserializeOwned>(
        &self,
        field: &str,
        word: String,
    ) -> Result<T, ConfigError> {
        use serde::de::value::{Error, StringDeserializer};
        T::deserialize(StringDeserializer::<Error>::new(word))
            .map_err(|e| self.invalid(field, e.to_string()))
    }

    /// Replaces `${data_dir}`, `${job_dir}` and `${env:NAME}` (the value of
    /// environment variable `NAME`, as Spark's and Flink's configuration
    /// files allow) in one pass over `s`, the job file's text: a replaced
    /// value is never scanned again (a data directory or a variable whose
    /// value holds `${job_dir}` stays as it is). Any other `${...}`, a `${`
    /// without `}`, a variable that is not set or not UTF-8 is an error
    /// naming `field` (and the variable). The values are part of the
    /// resolved job, so of its fingerprint: a variable changed between a
    /// crash and the next run makes it an edited job, refused.
    pub(super) fn substitute(&self, field: &str, s: &str) -> Result<String, ConfigError> {
        let mut out = String::with_capacity(s.len());
        let mut rest = s;
        while let Some(start) = rest.find("${") {
            out.push_str(&rest[..start]);
            let after = &rest[start + 2..];
            let Some(end) = after.find('}') else {
                return Err(self.invalid(
                    field,
                    format!("`{s}` has a `${{` without a closing `}}`; only `${{data_dir}}`, `${{job_dir}}` and `${{env:NAME}}` are replaced"),
                ));
            };
            match &after[..end] {
                "data_dir" => out.push_str(&self.data_dir.to_string_lossy()),
                "job_dir" => out.push_str(&self.job_dir.to_string_lossy()),
                name if name.starts_with("env:") => {
                    out.push_str(&self.env_var(field, s, &name[4..])?)
                }
                name if !name.is_empty()
                    && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') =>
                {
                    return Err(self.invalid(
                        field,
                        format!("unknown substitution `${{{name}}}`; only `${{data_dir}}`, `${{job_dir}}` and `${{env:NAME}}` are replaced"),
                    ));
                }
                name => {
                    return Err(self.invalid(
                        field,
                        format!("`${{{name}}}` is not a substitution; only `${{data_dir}}`, `${{job_dir}}` and `${{env:NAME}}` are replaced"),
                    ));
                }
            }
            rest = &after[end + 1..];
        }
        out.push_str(rest);
        Ok(out)
    }

    /// The value of environment variable `var` for `${env:VAR}` in `s`.
    fn env_var(&self, field: &str, s: &str, var: &str) -> Result<String, ConfigError> {
        let well_formed = var
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !well_formed {
            return Err(self.invalid(
                field,
                format!("`${{env:{var}}}` in `{s}` does not name an environment variable (letters, digits and `_`, not starting with a digit)"),
            ));
        }
        match std::env::var(var) {
            Ok(value) => Ok(value),
            Err(std::env::VarError::NotPresent) => Err(self.invalid(
                field,
                format!("`${{env:{var}}}`: environment variable {var} is not set"),
            )),
            Err(std::env::VarError::NotUnicode(_)) => Err(self.invalid(
                field,
                format!("`${{env:{var}}}`: environment variable {var} is not UTF-8"),
            )),
        }
    }

    /// A path field: substituted, resolved against the job file's folder,
    /// normalized. An empty path is an error naming `field`.
    pub(super) fn resolve_path(&self, field: &str, s: &str) -> Result<PathBuf, ConfigError> {
        if s.trim().is_empty() {
            return Err(self.invalid(field, "the path is empty"));
        }
        let p = PathBuf::from(self.substitute(field, s)?);
        Ok(if p.is_absolute() {
            normalize(&p)
        } else {
            normalize(&self.job_dir.join(p))
        })
    }

    /// A sink's `path`: a folder as [`Validator::resolve_path`] makes it,
    /// or `s3://BUCKET/PREFIX` (substituted first) for output on object
    /// storage, whose local staging folder [`Validator::stage_object_sinks`]
    /// fills in once the job's name is known.
    pub(super) fn sink_path(
        &self,
        field: &str,
        s: &str,
    ) -> Result<(PathBuf, Option<crate::objstore::ObjectUrl>), ConfigError> {
        let text = self.substitute(field, s)?;
        if !crate::objstore::is_object_url(&text) {
            return Ok((self.resolve_path(field, s)?, None));
        }
        let url = crate::objstore::ObjectUrl::parse(&text, false).map_err(|why| {
            self.invalid(
                field,
                format!("{why} (a sink on object storage is s3://BUCKET/PREFIX)"),
            )
        })?;
        Ok((PathBuf::new(), Some(url)))
    }

    /// Gives each sink on object storage its local staging folder,
    /// `<data dir>/<job>/sink-staging/<vertex>`: its tasks write their
    /// parts there before the coordinator uploads them.
    pub(super) fn stage_object_sinks(&self, job: &str, graph: &mut crate::graph::JobGraph) {
        for v in &mut graph.vertices {
            if let Some(sink) = v.sink.as_mut().filter(|s| s.objects.is_some()) {
                sink.dir = self.data_dir.join(job).join("sink-staging").join(&v.id);
            }
        }
    }

    /// A plugin config value: substituted; a value that starts with
    /// `${data_dir}` or `${job_dir}` is a path and is normalized (no `..`),
    /// so the plugin sees the same path the host grants.
    pub(super) fn config_value(&self, field: &str, s: &str) -> Result<String, ConfigError> {
        let v = self.substitute(field, s)?;
        Ok(
            if s.starts_with("${data_dir}") || s.starts_with("${job_dir}") {
                normalize(Path::new(&v)).to_string_lossy().into_owned()
            } else {
                v
            },
        )
    }

    pub(super) fn validate(&self, raw: RawJobFile) -> Result<JobConfig, ConfigError> {
        self.check_job_name(&raw.job.name)?;
        let workers = self.job_workers(raw.job.workers)?;
        let max_attempts = self.job_max_attempts(raw.job.max_attempts)?;
        let slot_request_timeout =
            self.job_slot_request_timeout(raw.job.slot_request_timeout_ms)?;
        let log = self.job_log(raw.job.log.as_deref())?;
        let recovery = Self::recovery_settings(raw.recovery);
        let mut plugins = self.plugin_table(raw.plugins)?;
        let default_shuffle = raw.shuffle.is_none();
        let shuffle_plugin = self.shuffle_plugin(raw.shuffle, &raw.job.name, &mut plugins)?;
        let is_sql = raw.job.sql.is_some() || raw.job.sql_file.is_some();
        let (graph, sql) = if is_sql {
            self.check_no_vertices(&raw.vertices, &raw.edges)?;
            let (graph, spec) = self.sql_graph(
                super::raw::RawSql {
                    sql: raw.job.sql,
                    sql_file: raw.job.sql_file,
                    parallelism: raw.job.parallelism,
                    max_task_bytes: raw.job.max_task_bytes,
                    downstream_parallelism: raw.job.downstream_parallelism,
                    max_parallelism: raw.job.max_parallelism,
                    bytes_per_task: raw.job.bytes_per_task,
                    tables: raw.tables,
                    sink: raw.sink,
                    functions: raw.functions,
                },
                &plugins,
            )?;
            (graph, Some(spec))
        } else {
            self.check_no_sql_fields(&raw.job, &raw.tables, raw.sink.as_ref(), &raw.functions)?;
            (self.graph(raw.vertices, raw.edges, &plugins)?, None)
        };
        let mut graph = graph;
        self.stage_object_sinks(&raw.job.name, &mut graph);
        let tls = self.cluster_tls(raw.cluster)?;
        Ok(JobConfig {
            file: self.file.clone(),
            name: raw.job.name,
            workers,
            max_attempts,
            slot_request_timeout,
            plugins,
            shuffle_plugin,
            default_shuffle,
            builtins: self.builtins.borrow().clone(),
            recovery,
            graph,
            tls,
            sql,
            log,
        })
    }

    /// `job.name`: non-empty, letters, digits, `-` and `_` only, and at
    /// most [`MAX_NAME_CHARS`] long (it names a folder).
    fn check_job_name(&self, name: &str) -> Result<(), ConfigError> {
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(self.invalid(
                "job.name",
                "must be non-empty and use only letters, digits, `-` and `_`",
            ));
        }
        if name.len() > MAX_NAME_CHARS {
            return Err(self.invalid(
                "job.name",
                format!(
                    "has {} characters, more than {MAX_NAME_CHARS} (it names a folder)",
                    name.len()
                ),
            ));
        }
        Ok(())
    }

    /// `job.workers`: absent, or a number of workers in 1..=1024.
    fn job_workers(&self, workers: Option<i64>) -> Result<Option<usize>, ConfigError> {
        match workers {
            None => Ok(None),
            Some(n) if (1..=1024).contains(&n) => Ok(Some(n as usize)),
            Some(n) => Err(self.invalid("job.workers", format!("{n} is not in 1..=1024"))),
        }
    }

    /// `job.max-attempts`: in 1..=100, [`DEFAULT_MAX_ATTEMPTS`] when absent.
    fn job_max_attempts(&self, max_attempts: Option<i64>) -> Result<u32, ConfigError> {
        match max_attempts {
            None => Ok(DEFAULT_MAX_ATTEMPTS),
            Some(n) if (1..=100).contains(&n) => Ok(n as u32),
            Some(n) => Err(self.invalid("job.max-attempts", format!("{n} is not in 1..=100"))),
        }
    }

    /// `job.slot-request-timeout-ms`: in 1..=[`MAX_SLOT_REQUEST_TIMEOUT_MS`],
    /// [`DEFAULT_SLOT_REQUEST_TIMEOUT`] when absent.
    fn job_slot_request_timeout(&self, ms: Option<i64>) -> Result<Duration, ConfigError> {
        match ms {
            None => Ok(DEFAULT_SLOT_REQUEST_TIMEOUT),
            Some(n) if (1..=MAX_SLOT_REQUEST_TIMEOUT_MS).contains(&n) => {
                Ok(Duration::from_millis(n as u64))
            }
            Some(n) => Err(self.invalid(
                "job.slot-request-timeout-ms",
                format!("{n} is not in 1..={MAX_SLOT_REQUEST_TIMEOUT_MS}"),
            )),
        }
    }

    /// `job.log`: absent, or the URL of an event log in object storage.
    fn job_log(
        &self,
        log: Option<&str>,
    ) -> Result<Option<crate::events::ObjectLogUrl>, ConfigError> {
        match log {
            None => Ok(None),
            Some(text) => Ok(Some(
                crate::events::ObjectLogUrl::parse(text)
                    .map_err(|reason| self.invalid("job.log", reason))?,
            )),
        }
    }

    /// `[recovery]`: on, with a 10 s wait for a previous worker and a 1 s
    /// pause between snapshots, unless the table says otherwise.
    fn recovery_settings(recovery: Option<RawRecovery>) -> RecoverySettings {
        recovery.map_or(
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
        )
    }

    /// Every entry of `[plugins]`, by name, in the table's order.
    fn plugin_table(&self, raw: toml::Table) -> Result<BTreeMap<String, PluginSpec>, ConfigError> {
        let mut plugins = BTreeMap::new();
        for (name, value) in raw {
            let p = self.plugin(&name, value)?;
            plugins.insert(name, p);
        }
        Ok(plugins)
    }

    /// The name of the job's shuffle master: `[shuffle] plugin`, which must
    /// name a shuffle-master under `[plugins]`, or without `[shuffle]` the
    /// built-in one ([`Self::default_shuffle`]), added to `plugins`.
    fn shuffle_plugin(
        &self,
        shuffle: Option<RawShuffle>,
        job: &str,
        plugins: &mut BTreeMap<String, PluginSpec>,
    ) -> Result<String, ConfigError> {
        match shuffle {
            Some(shuffle) => {
                match plugins.get(&shuffle.plugin) {
                    None => {
                        return Err(self.invalid(
                            "shuffle.plugin",
                            format!("no plugin named `{}` under [plugins]", shuffle.plugin),
                        ));
                    }
                    Some(p) if p.kind != PluginKind::ShuffleMaster => {
                        return Err(self.invalid(
                            "shuffle.plugin",
                            format!("plugin `{}` is not a shuffle-master", shuffle.plugin),
                        ));
                    }
                    Some(_) => {}
                }
                Ok(shuffle.plugin)
            }
            None => {
                let spec = self.default_shuffle(job, plugins)?;
                let name = spec.name.clone();
                plugins.insert(name.clone(), spec);
                Ok(name)
            }
        }
    }

    /// A SQL job takes no `[[vertices]]` or `[[edges]]`: the plan makes them.
    fn check_no_vertices(
        &self,
        vertices: &[toml::Value],
        edges: &[toml::Value],
    ) -> Result<(), ConfigError> {
        if !vertices.is_empty() || !edges.is_empty() {
            return Err(self.invalid(
                "vertices",
                "a SQL job (`[job] sql`) has no [[vertices]] or [[edges]]: the plan makes them",
            ));
        }
        Ok(())
    }

    /// A job of vertices and edges sets none of the fields only a SQL job
    /// takes; the first one set is named.
    fn check_no_sql_fields(
        &self,
        job: &RawJob,
        tables: &toml::Table,
        sink: Option<&toml::Value>,
        functions: &toml::Table,
    ) -> Result<(), ConfigError> {
        if let Some(f) = [
            (job.parallelism.is_some(), "job.parallelism"),
            (job.max_task_bytes.is_some(), "job.max-task-bytes"),
            (
                job.downstream_parallelism.is_some(),
                "job.downstream-parallelism",
            ),
            (job.max_parallelism.is_some(), "job.max-parallelism"),
            (job.bytes_per_task.is_some(), "job.bytes-per-task"),
            (!tables.is_empty(), "tables"),
            (sink.is_some(), "sink"),
            (!functions.is_empty(), "functions"),
        ]
        .iter()
        .find_map(|(set, f)| set.then_some(*f))
        {
            return Err(self.invalid(f, "only a SQL job (`[job] sql`) takes this"));
        }
        Ok(())
    }

    /// `[cluster] tls = { cert, key, ca }`: each path substituted, resolved
    /// against the file's folder and read (a regular file of at most
    /// [`MAX_TLS_FILE_BYTES`]); what the PEM holds is checked when TLS is
    /// set up, with messages naming the same fields.
    pub(super) fn cluster_tls(
        &self,
        cluster: Option<RawCluster>,
    ) -> Result<Option<crate::tls::TlsFiles>, ConfigError> {
        let Some(RawTls { cert, key, ca }) = cluster.and_then(|c| c.tls) else {
            return Ok(None);
        };
        let file = |which: &str, s: &str| -> Result<PathBuf, ConfigError> {
            let field = format!("cluster.tls.{which}");
            let path = self.resolve_path(&field, s)?;
            files::read_regular_file(&path, MAX_TLS_FILE_BYTES).map_err(|e| {
                self.invalid(&field, format!("cannot read `{}`: {e}", path.display()))
            })?;
            Ok(path)
        };
        Ok(Some(crate::tls::TlsFiles {
            cert: file("cert", &cert)?,
            key: file("key", &key)?,
            ca: file("ca", &ca)?,
            from: Some(self.file.clone()),
        }))
    }

    pub(super) fn plugin(&self, name: &str, value: toml::Value) -> Result<PluginSpec, ConfigError> {
        let field = format!("plugins.{name}");
        let raw: RawPlugin = self.typed(&field, value)?;
        let kind: PluginKind = self.choice(&format!("{field}.kind"), raw.kind.clone())?;
        if kind == PluginKind::ScalarFunction {
            return Err(self.invalid(
                format!("{field}.kind"),
                "a scalar function is declared as [functions.NAME] of a SQL job, not under [plugins]",
            ));
        }
        self.plugin_at(&field, name, raw, kind)
    }

    /// The settings of a plugin entry at `field` (`plugins.NAME` or
    /// `functions.NAME`) of `kind`.
    pub(super) fn plugin_at(
        &self,
        field: &str,
        name: &str,
        raw: RawPlugin,
        kind: PluginKind,
    ) -> Result<PluginSpec, ConfigError> {
        let component = self.plugin_component(field, &raw.component)?;
        self.check_component(&format!("{field}.component"), &component)?;
        let config = self.plugin_config(field, raw.config)?;
        let dirs = self.plugin_dirs(field, &raw.dirs)?;
        let stores = self.plugin_stores(field, &raw.stores, kind)?;
        let limits = self.plugin_limits(field, raw.limits)?;
        Ok(PluginSpec {
            name: name.to_string(),
            path: component,
            kind,
            config,
            dirs,
            stores,
            limits,
        })
    }

    /// The path of `{field}.component`: a `builtin:NAME` looked up on the
    /// search path (and noted in [`Validator::builtins`]), or a path resolved
    /// against the job file's folder.
    fn plugin_component(&self, field: &str, component: &str) -> Result<PathBuf, ConfigError> {
        Ok(match component.strip_prefix(super::builtin::PREFIX) {
            Some(builtin) => {
                let found = super::builtin::resolve(builtin, &self.search_path)
                    .map_err(|reason| self.invalid(format!("{field}.component"), reason))?;
                let path = found.path.clone();
                self.builtins.borrow_mut().insert(field.to_string(), found);
                path
            }
            None => self.resolve_path(&format!("{field}.component"), component)?,
        })
    }

    /// `{field}.config`: each value a string (substituted), number or
    /// boolean, as the text the plugin is given.
    fn plugin_config(
        &self,
        field: &str,
        raw: toml::Table,
    ) -> Result<Vec<(String, String)>, ConfigError> {
        let mut config = Vec::with_capacity(raw.len());
        for (k, v) in raw {
            let s = match v {
                toml::Value::String(s) => self.config_value(&format!("{field}.config.{k}"), &s)?,
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
        Ok(config)
    }

    /// `{field}.dirs`: the folders granted to the plugin, each path resolved.
    fn plugin_dirs(&self, field: &str, raw: &[RawDir]) -> Result<Vec<DirGrant>, ConfigError> {
        let mut dirs = Vec::with_capacity(raw.len());
        for (k, d) in raw.iter().enumerate() {
            dirs.push(DirGrant {
                host: self.resolve_path(&format!("{field}.dirs[{k}].path"), &d.path)?,
                writable: d.writable,
            });
        }
        Ok(dirs)
    }

    /// `{field}.stores`: the object stores granted to the plugin, only to a
    /// split-enumerator or a shuffle-master.
    fn plugin_stores(
        &self,
        field: &str,
        raw: &[RawStore],
        kind: PluginKind,
    ) -> Result<Vec<crate::objstore::StoreGrant>, ConfigError> {
        let mut stores = Vec::with_capacity(raw.len());
        for (k, g) in raw.iter().enumerate() {
            let url = crate::objstore::ObjectUrl::parse(&g.url, true)
                .map_err(|reason| self.invalid(format!("{field}.stores[{k}].url"), reason))?;
            if !matches!(
                kind,
                PluginKind::SplitEnumerator | PluginKind::ShuffleMaster
            ) {
                return Err(self.invalid(
                    format!("{field}.stores"),
                    format!("a {kind} plugin cannot reach object storage; only split-enumerator and shuffle-master plugins get store grants"),
                ));
            }
            stores.push(crate::objstore::StoreGrant {
                url,
                writable: g.writable,
            });
        }
        Ok(stores)
    }

    /// `{field}.limits`: the defaults, with each limit the table sets
    /// checked and put in place.
    fn plugin_limits(&self, field: &str, raw: Option<RawLimits>) -> Result<Limits, ConfigError> {
        let mut limits = Limits::default();
        if let Some(l) = raw {
            if let Some(ms) = l.call_timeout_ms {
                if ms == 0 {
                    return Err(self.invalid(
                        format!("{field}.limits.call-timeout-ms"),
                        "must be at least 1",
                    ));
                }
                limits.call_timeout = Duration::from_millis(ms);
            }
            if let Some(ms) = l.split_wait_ms {
                if ms == 0 {
                    return Err(self.invalid(
                        format!("{field}.limits.split-wait-ms"),
                        "must be at least 1",
                    ));
                }
                limits.split_wait = Duration::from_millis(ms);
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
                limits.on_trap = self.choice(&format!("{field}.limits.on-trap"), t)?;
            }
        }
        Ok(limits)
    }

    /// The shuffle master of a job file without `[shuffle]`: plugin
    /// [`DEFAULT_SHUFFLE_PLUGIN`], component `builtin:local-shuffle`, its
    /// partitions under `${data_dir}/shuffle` (granted read-write, created
    /// by the run). Refused, naming `shuffle`, when the file declares a
    /// shuffle master of its own (it would be silently unused), when
    /// `[plugins]` already has a plugin of that name, and for a job named
    /// `shuffle` (whose folder in the data directory is that folder).
    fn default_shuffle(
        &self,
        job: &str,
        plugins: &BTreeMap<String, PluginSpec>,
    ) -> Result<PluginSpec, ConfigError> {
        let name = DEFAULT_SHUFFLE_PLUGIN;
        if let Some((own, _)) = plugins
            .iter()
            .find(|(_, p)| p.kind == PluginKind::ShuffleMaster)
        {
            return Err(self.invalid(
                "shuffle",
                format!(
                    "missing, but plugin `{own}` is a shuffle-master: name it with `[shuffle] plugin = \"{own}\"` (a job file without [shuffle] uses builtin:local-shuffle)"
                ),
            ));
        }
        if let Some(p) = plugins.get(name) {
            return Err(self.invalid(
                "shuffle",
                format!(
                    "missing: a job file without [shuffle] uses builtin:local-shuffle as plugin `{name}`, but [plugins.{name}] is a {}; add a [shuffle] table or rename the plugin",
                    p.kind
                ),
            ));
        }
        if job == "shuffle" {
            return Err(self.invalid(
                "shuffle",
                "missing: the built-in shuffle master keeps its partitions in `${data_dir}/shuffle`, the folder of a job named `shuffle`; add a [shuffle] table",
            ));
        }
        let shuffle_root = toml::Value::String("${data_dir}/shuffle".to_string());
        let mut config = toml::Table::new();
        config.insert("root".to_string(), shuffle_root);
        let raw = RawPlugin {
            component: format!("{}local-shuffle", super::builtin::PREFIX),
            kind: "shuffle-master".to_string(),
            config,
            dirs: vec![RawDir {
                path: "${data_dir}/shuffle".to_string(),
                writable: true,
            }],
            stores: Vec::new(),
            limits: None,
        };
        self.plugin_at(
            &format!("plugins.{name}"),
            name,
            raw,
            PluginKind::ShuffleMaster,
        )
        .map_err(|e| match e {
            ConfigError::Invalid {
                file,
                field,
                reason,
            } => ConfigError::Invalid {
                file,
                field: "shuffle".to_string(),
                reason: format!(
                    "missing, so the job uses the built-in shuffle master (`{field}`): {reason}"
                ),
            },
            other => other,
        })
    }

    pub(super) fn graph(
        &self,
        raw_vertices: Vec<toml::Value>,
        raw_edges: Vec<toml::Value>,
        plugins: &BTreeMap<String, PluginSpec>,
    ) -> Result<JobGraph, ConfigError> {
        if raw_vertices.is_empty() {
            return Err(self.invalid("vertices", "the job has no vertices"));
        }
        let mut vertices = Vec::new();
        let mut index: HashMap<String, usize> = HashMap::new();
        let mut raw_ops = Vec::new();
        for (i, value) in raw_vertices.into_iter().enumerate() {
            let (vertex, ops) = self.vertex(i, value, &mut index, plugins)?;
            raw_ops.push(ops);
            vertices.push(vertex);
        }
        let mut edges = Vec::new();
        for (i, value) in raw_edges.into_iter().enumerate() {
            let edge = self.edge(i, value, &index, &vertices, &edges)?;
            edges.push(edge);
        }
        let order = self.vertex_order(&vertices, &edges)?;
        self.check_vertex_inputs(&vertices, &edges)?;
        self.resolve_operators(&mut vertices, &edges, &order, raw_ops)?;
        self.resolve_edge_keys(&mut edges, &vertices)?;
        Ok(JobGraph {
            vertices,
            edges,
            order,
        })
    }

    /// `vertices[i]`, its id added to `index`; its operators are returned
    /// unread, since reading them needs the vertex's input columns.
    fn vertex(
        &self,
        i: usize,
        value: toml::Value,
        index: &mut HashMap<String, usize>,
        plugins: &BTreeMap<String, PluginSpec>,
    ) -> Result<(JobVertex, Vec<toml::Value>), ConfigError> {
        let field = format!("vertices[{i}]");
        let rv: RawVertex = self.typed(&field, value)?;
        self.check_vertex_id(&field, &rv.id)?;
        let record_delay_us = rv.record_delay_us.unwrap_or(0);
        if record_delay_us > MAX_RECORD_DELAY_US {
            return Err(self.invalid(
                format!("{field}.record-delay-us"),
                format!("{record_delay_us} is not in 0..={MAX_RECORD_DELAY_US}"),
            ));
        }
        if index.insert(rv.id.clone(), i).is_some() {
            return Err(self.invalid(
                format!("{field}.id"),
                format!("duplicate vertex id `{}`", rv.id),
            ));
        }
        let parallelism = self.vertex_parallelism(&field, &rv.parallelism)?;
        let max_parallelism = self.vertex_max_parallelism(&field, rv.max_parallelism)?;
        let bytes_per_task = self.vertex_bytes_per_task(&field, rv.bytes_per_task)?;
        if let Some(src) = &rv.source {
            self.check_vertex_source(&field, src, parallelism, plugins)?;
        }
        let max_task_bytes =
            self.max_task_bytes(&format!("{field}.max-task-bytes"), rv.max_task_bytes)?;
        if max_task_bytes.is_some() && rv.source.is_none() {
            return Err(self.invalid(
                format!("{field}.max-task-bytes"),
                "only a source vertex (one with `source`) takes this",
            ));
        }
        let vertex = JobVertex {
            id: rv.id,
            parallelism,
            max_parallelism,
            bytes_per_task,
            max_task_bytes,
            source: rv.source,
            operators: Vec::new(),
            sink: None,
            record_delay: Duration::from_micros(record_delay_us),
            output_columns: Vec::new(),
        };
        Ok((vertex, rv.operators))
    }

    /// `{field}.id`: non-empty, letters, digits, `-` and `_` only, and at
    /// most [`MAX_NAME_CHARS`] long (it names files).
    fn check_vertex_id(&self, field: &str, id: &str) -> Result<(), ConfigError> {
        if id.is_empty()
            || !id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(self.invalid(
                format!("{field}.id"),
                "must be non-empty and use only letters, digits, `-` and `_`",
            ));
        }
        if id.len() > MAX_NAME_CHARS {
            return Err(self.invalid(
                format!("{field}.id"),
                format!(
                    "has {} characters, more than {MAX_NAME_CHARS} (it names files)",
                    id.len()
                ),
            ));
        }
        Ok(())
    }

    /// `{field}.parallelism`: an integer in 1..=4096 or `"auto"`.
    fn vertex_parallelism(
        &self,
        field: &str,
        value: &toml::Value,
    ) -> Result<Parallelism, ConfigError> {
        match value {
            toml::Value::String(s) if s == "auto" => Ok(Parallelism::Auto),
            toml::Value::Integer(n) if (1..=4096).contains(n) => Ok(Parallelism::Fixed(*n as u32)),
            other => Err(self.invalid(
                format!("{field}.parallelism"),
                format!("{other} is neither an integer in 1..=4096 nor \"auto\""),
            )),
        }
    }

    /// `{field}.max-parallelism`: in 1..=4096, [`DEFAULT_MAX_PARALLELISM`]
    /// when absent.
    fn vertex_max_parallelism(&self, field: &str, value: Option<i64>) -> Result<u32, ConfigError> {
        match value {
            None => Ok(DEFAULT_MAX_PARALLELISM),
            Some(n) if (1..=4096).contains(&n) => Ok(n as u32),
            Some(n) => Err(self.invalid(
                format!("{field}.max-parallelism"),
                format!("{n} is not in 1..=4096"),
            )),
        }
    }

    /// `{field}.bytes-per-task`: positive, [`DEFAULT_BYTES_PER_TASK`] when
    /// absent.
    fn vertex_bytes_per_task(&self, field: &str, value: Option<i64>) -> Result<u64, ConfigError> {
        match value {
            None => Ok(DEFAULT_BYTES_PER_TASK),
            Some(n) if n >= 1 => Ok(n as u64),
            Some(n) => Err(self.invalid(
                format!("{field}.bytes-per-task"),
                format!("{n} is not positive"),
            )),
        }
    }

    /// `{field}.source`: must name a split-enumerator under `[plugins]`, and
    /// a source vertex needs a fixed parallelism.
    fn check_vertex_source(
        &self,
        field: &str,
        src: &str,
        parallelism: Parallelism,
        plugins: &BTreeMap<String, PluginSpec>,
    ) -> Result<(), ConfigError> {
        match plugins.get(src) {
            None => {
                return Err(self.invalid(
                    format!("{field}.source"),
                    format!("no plugin named `{src}` under [plugins]"),
                ));
            }
            Some(p) if p.kind != PluginKind::SplitEnumerator => {
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
        Ok(())
    }

    /// `edges[i]`, between vertices of `index`; its key columns are
    /// resolved later ([`Self::resolve_edge_keys`]). `edges` are the
    /// edges read before it.
    fn edge(
        &self,
        i: usize,
        value: toml::Value,
        index: &HashMap<String, usize>,
        vertices: &[JobVertex],
        edges: &[JobEdge],
    ) -> Result<JobEdge, ConfigError> {
        let field = format!("edges[{i}]");
        let re: RawEdge = self.typed(&field, value)?;
        let from = *index.get(&re.from).ok_or_else(|| {
            self.invalid(format!("{field}.from"), format!("no vertex `{}`", re.from))
        })?;
        let to = *index
            .get(&re.to)
            .ok_or_else(|| self.invalid(format!("{field}.to"), format!("no vertex `{}`", re.to)))?;
        let pattern: DistributionPattern = self
            .choice::<RawEdgeKind>(&format!("{field}.kind"), re.kind.clone())?
            .into();
        self.check_edge_pattern(&field, &re, pattern, &vertices[from], &vertices[to])?;
        if edges.iter().any(|e: &JobEdge| e.from == from && e.to == to) {
            return Err(self.invalid(field, format!("duplicate edge {} -> {}", re.from, re.to)));
        }
        Ok(JobEdge {
            from,
            to,
            pattern,
            key_names: re.key,
            key: Vec::new(),
        })
    }

    /// An edge's key fits its kind: a hash edge has a key, a forward edge
    /// none, and a forward edge joins equal fixed parallelisms.
    fn check_edge_pattern(
        &self,
        field: &str,
        re: &RawEdge,
        pattern: DistributionPattern,
        from: &JobVertex,
        to: &JobVertex,
    ) -> Result<(), ConfigError> {
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
                let (pf, pt) = (from.parallelism, to.parallelism);
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
            // Only SQL stages make broadcast edges.
            DistributionPattern::Hash | DistributionPattern::Broadcast => {}
        }
        Ok(())
    }

    /// The vertices in topological order; a cycle is refused, naming it.
    fn vertex_order(
        &self,
        vertices: &[JobVertex],
        edges: &[JobEdge],
    ) -> Result<Vec<usize>, ConfigError> {
        topological_order(vertices.len(), edges).map_err(|cycle| {
            let names: Vec<&str> = cycle.iter().map(|&v| vertices[v].id.as_str()).collect();
            self.invalid(
                "edges",
                format!("the edges form a cycle through {}", names.join(" -> ")),
            )
        })
    }

    /// Each vertex has a source or incoming edges but not both, and one fed
    /// by a forward edge has no other input.
    fn check_vertex_inputs(
        &self,
        vertices: &[JobVertex],
        edges: &[JobEdge],
    ) -> Result<(), ConfigError> {
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
        Ok(())
    }

    /// Reads each vertex's operators (`raw_ops`, by vertex) in topological
    /// `order`, so each vertex knows its input columns.
    fn resolve_operators(
        &self,
        vertices: &mut [JobVertex],
        edges: &[JobEdge],
        order: &[usize],
        mut raw_ops: Vec<Vec<toml::Value>>,
    ) -> Result<(), ConfigError> {
        for &vi in order {
            let input = self.input_columns(vi, vertices, edges)?;
            let is_sink = !edges.iter().any(|e| e.from == vi);
            let ops = std::mem::take(&mut raw_ops[vi]);
            let (operators, sink, out) = self.operators(vi, ops, input, is_sink)?;
            let v = &mut vertices[vi];
            v.operators = operators;
            v.sink = sink;
            v.output_columns = out;
        }
        Ok(())
    }

    /// The columns vertex `vi` reads: none for a source, else those of its
    /// inputs, which must all produce the same columns.
    fn input_columns(
        &self,
        vi: usize,
        vertices: &[JobVertex],
        edges: &[JobEdge],
    ) -> Result<Option<Vec<String>>, ConfigError> {
        let ins: Vec<&JobEdge> = edges.iter().filter(|e| e.to == vi).collect();
        match ins.first() {
            None => Ok(None),
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
                Ok(Some(cols))
            }
        }
    }

    /// Each edge's key names as column indexes of the vertex it leaves.
    fn resolve_edge_keys(
        &self,
        edges: &mut [JobEdge],
        vertices: &[JobVertex],
    ) -> Result<(), ConfigError> {
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
        Ok(())
    }
}

impl Validator {
    /// A component must be a regular file within [`files::MAX_COMPONENT_BYTES`]
    /// that starts with a component's preamble; nothing more is read here.
    fn check_component(&self, field: &str, component: &Path) -> Result<(), ConfigError> {
        let io_error = |source| ConfigError::Component {
            file: self.file.clone(),
            field: one_line(field),
            path: component.to_path_buf(),
            source,
        };
        let (mut f, _) =
            files::open_regular_file(component, files::MAX_COMPONENT_BYTES).map_err(io_error)?;
        let head = files::read_head(&mut f, files::PREAMBLE_BYTES).map_err(io_error)?;
        crate::plugin::check_magic(component, &head).map_err(|e| self.invalid(field, e.to_string()))
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
