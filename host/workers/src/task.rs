//! An execution attempt as it crosses from the coordinator to a worker
//! process: [`RemoteTask`] on the coordinator, `DeployRequest` of
//! `proto/coordhost/worker/v1/worker.proto` on the wire, with the job
//! vertex's task ([`RemoteVertex`]) postcard-encoded inside.

use std::ops::Range;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::rpc;
use coordhost_data::shuffle::ExpectedPartition;
use coordhost_io::grant::DirGrant;
use coordhost_model::graph::{AttemptId, DistributionPattern, Operator, SinkSpec};

/// What every attempt of one job vertex runs: its operator chain, the
/// routing of its outgoing edges, its sink and, for a source, the split
/// enumerator's grants (the only place a `file-range` split is read from).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteVertex {
    /// The operator chain.
    pub operators: Vec<Operator>,
    /// Per outgoing edge index: its routing and key columns.
    pub routes: Vec<(usize, DistributionPattern, Vec<usize>)>,
    /// For a sink: its format and columns (the folder is the
    /// coordinator's; the worker stages under its own data directory).
    pub sink: Option<SinkSpec>,
    /// For a source: the split enumerator plugin's name and the grants
    /// its splits are read inside.
    pub source: Option<RemoteSource>,
    /// The job's scalar functions (`[functions.NAME]`, docs/sql.md): a
    /// stage plan calls them by name; the worker binds each name to the
    /// component of this hash, fetched from the coordinator when it has
    /// none (docs/workers.md, "Plugin components on workers").
    pub functions: Vec<RemoteFunction>,
    /// For a scan of a table read by a source-reader plugin
    /// (`format = { reader = "PLUGIN" }`): that reader, loaded on the
    /// worker the same way as a function's component. Empty otherwise.
    pub readers: Vec<RemoteReader>,
}

/// The grants a source task reads its `file-range` splits inside: those
/// of its split enumerator (plugin `plugin`), its directories and its
/// object-store grants, the latter always read-only (a task reads splits,
/// it never writes objects). The coordinator checks each split against
/// the enumerator's grants when it assigns it; the worker checks the
/// grants it receives ([`RemoteSource::grants`]) and each split again
/// when the task opens it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteSource {
    /// The split enumerator plugin's name (named in messages).
    pub plugin: String,
    /// Its directory grants.
    pub dirs: Vec<DirGrant>,
    /// Its store grants, read-only.
    pub stores: Vec<coordhost_io::objstore::StoreGrant>,
}

impl RemoteSource {
    /// The grants a task of the enumerator `spec` reads inside: its
    /// directories, and its store grants made read-only.
    pub fn new(spec: &coordhost_wasm::PluginSpec) -> Self {
        Self {
            plugin: spec.name.clone(),
            dirs: spec.dirs.clone(),
            stores: spec
                .stores
                .iter()
                .map(|g| coordhost_io::objstore::StoreGrant {
                    url: g.url.clone(),
                    writable: false,
                })
                .collect(),
        }
    }

    /// The grants as the worker's task uses them, after checking what
    /// came over the wire: each store grant must be a plain
    /// `s3://BUCKET[/PREFIX]` that parses back to itself (the rule of
    /// docs/object-storage.md) and read-only.
    ///
    /// # Errors
    /// A sentence naming the plugin and the grant.
    pub fn grants(&self) -> Result<coordhost_io::grant::Grants, String> {
        for g in &self.stores {
            let text = g.url.to_string();
            match coordhost_io::objstore::ObjectUrl::parse(&text, true) {
                Ok(url) if url == g.url => {}
                Ok(_) => {
                    return Err(format!(
                        "the store grant {text} of plugin `{}` is not written plainly",
                        self.plugin
                    ));
                }
                Err(why) => {
                    return Err(format!("a store grant of plugin `{}`: {why}", self.plugin));
                }
            }
            if g.writable {
                return Err(format!(
                    "the store grant {text} of plugin `{}` is writable; a task reads splits only",
                    self.plugin
                ));
            }
        }
        Ok(coordhost_io::grant::Grants::new(&self.plugin, &self.dirs).with_stores(&self.stores))
    }
}

/// A plugin component a task needs, whatever its kind (a scalar
/// function's, a source reader's), as a worker is told of it: the
/// component by its SHA-256 (the bytes travel separately, `FetchComponent`,
/// and only when the worker keeps none of that hash) and the plugin's
/// settings, so that the worker loads it exactly as the coordinator does:
/// the same config, the same grants, the same limits.
///
/// What a worker receives here is checked before use: the hash must be 64
/// lowercase hex digits (it names a file) and the fetched bytes must have
/// it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteComponent {
    /// The component file on the coordinator, for messages only.
    pub path: String,
    /// Lowercase hex SHA-256 of the component's bytes: the job's (the
    /// hash the job file was checked with, part of its fingerprint).
    pub sha256: String,
    /// The plugin's `config`, in file order.
    pub config: Vec<(String, String)>,
    /// Directories granted (none unless the job file lists some). The
    /// host paths are the coordinator's: a worker sees the same file
    /// system (docs/workers.md).
    pub dirs: Vec<DirGrant>,
    /// `limits.call-timeout-ms`.
    pub call_timeout_ms: u64,
    /// `limits.memory-mib`, in bytes.
    pub memory_bytes: u64,
    /// `limits.on-trap`.
    pub on_trap: coordhost_wasm::TrapPolicy,
}

impl RemoteComponent {
    /// The component of the plugin `spec` whose bytes have SHA-256
    /// `sha256` (lowercase hex).
    pub fn new(spec: &coordhost_wasm::PluginSpec, sha256: &str) -> Self {
        Self {
            path: spec.path.display().to_string(),
            sha256: sha256.to_owned(),
            config: spec.config.clone(),
            dirs: spec.dirs.clone(),
            call_timeout_ms: u64::try_from(spec.limits.call_timeout.as_millis())
                .unwrap_or(u64::MAX),
            memory_bytes: spec.limits.memory_bytes,
            on_trap: spec.limits.on_trap,
        }
    }

    /// The plugin settings a worker loads it with: plugin `name` of `kind`,
    /// its component at `path` (the worker's copy, named in messages).
    pub fn spec(
        &self,
        name: &str,
        kind: coordhost_wasm::PluginKind,
        path: PathBuf,
    ) -> coordhost_wasm::PluginSpec {
        coordhost_wasm::PluginSpec {
            name: name.to_owned(),
            path,
            kind,
            config: self.config.clone(),
            dirs: self.dirs.clone(),
            // Workers load scalar functions and source readers, which
            // reach no object storage.
            stores: Vec::new(),
            limits: coordhost_wasm::Limits {
                call_timeout: Duration::from_millis(self.call_timeout_ms),
                memory_bytes: self.memory_bytes,
                on_trap: self.on_trap,
                ..coordhost_wasm::Limits::default()
            },
        }
    }
}

/// One scalar function of the job as a worker needs it to run it as the
/// coordinator would: its name, its signature (the planner's, for decoding
/// a stage before the component is loaded) and its component. The types
/// must parse and the loaded component must declare exactly this
/// signature.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteFunction {
    /// The name SQL calls it by.
    pub name: String,
    /// Argument types in Arrow's text form (`Int64`, `Decimal128(15, 2)`).
    pub arguments: Vec<String>,
    /// Result type in Arrow's text form.
    pub returns: String,
    /// Its component and plugin settings.
    pub component: RemoteComponent,
}

impl RemoteFunction {
    /// The function `f` of a job whose `[functions.NAME]` entry is `spec`.
    pub fn new(f: &coordhost_data::sql::SqlFunction, spec: &coordhost_wasm::PluginSpec) -> Self {
        Self {
            name: f.name.clone(),
            arguments: f.arguments.iter().map(ToString::to_string).collect(),
            returns: f.returns.to_string(),
            component: RemoteComponent::new(spec, &f.sha256),
        }
    }
}

/// The source reader of one table of the job (`[tables.TABLE] format =
/// { reader = "PLUGIN" }`) as a worker needs it to read the table's splits
/// as the coordinator's embedded tasks would: the table, its declared
/// columns (the schema every batch is checked against), the plugin's name
/// and its component. The types must parse.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteReader {
    /// The table's name in SQL.
    pub table: String,
    /// The source-reader plugin's name under `[plugins]`.
    pub plugin: String,
    /// The table's columns in file order: name and Arrow type in Arrow's
    /// text form (every column nullable, as [`coordhost_data::sql::TableDecl::schema`]).
    pub columns: Vec<(String, String)>,
    /// Its component and plugin settings.
    pub component: RemoteComponent,
}

impl RemoteReader {
    /// The reader of table `t`, or `None` when `t` is not read by one;
    /// `spec` is its `[plugins.PLUGIN]` entry.
    pub fn new(
        t: &coordhost_data::sql::TableDecl,
        spec: &coordhost_wasm::PluginSpec,
    ) -> Option<Self> {
        let coordhost_data::sql::TableFormat::Reader {
            plugin,
            component_sha256,
        } = &t.format
        else {
            return None;
        };
        Some(Self {
            table: t.name.clone(),
            plugin: plugin.clone(),
            columns: t
                .columns
                .iter()
                .map(|(name, ty)| (name.clone(), ty.data_type().to_string()))
                .collect(),
            component: RemoteComponent::new(spec, component_sha256),
        })
    }
}

/// Whether `sha256` is a SHA-256 as coordhost writes it: 64 lowercase hex
/// digits (and so a safe file name).
pub fn is_sha256_hex(sha256: &str) -> bool {
    sha256.len() == 64
        && sha256
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// One input partition of a consumer attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteInput {
    /// The producer attempt.
    pub producer: AttemptId,
    /// The partition's path below its holder's partition root (empty for
    /// one on object storage).
    pub location: PathBuf,
    /// The partition's place on object storage, read there by the worker
    /// (protocol revision 5); `None` for one a worker holds.
    pub object: Option<coordhost_io::objstore::ObjectUrl>,
    /// Subpartitions read.
    pub subpartitions: Range<u32>,
    /// What the partition must be (its producer, the bytes reported).
    pub expected: ExpectedPartition,
}

/// One result partition an attempt writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteOutput {
    /// Edge index.
    pub edge: usize,
    /// The partition's path below the worker's partition root (the shuffle
    /// master's location, relative to its grant; empty for one on object
    /// storage).
    pub location: PathBuf,
    /// Where the worker uploads the partition on object storage (protocol
    /// revision 5), staging it below its own root first; `None` for one it
    /// keeps on its disk.
    pub object: Option<coordhost_io::objstore::ObjectUrl>,
    /// Number of subpartitions.
    pub num_subpartitions: u32,
    /// The intermediate data set, as the partition's index names it.
    pub data_set: String,
}

/// Everything a worker process needs to run one execution attempt.
#[derive(Debug, Clone)]
pub struct RemoteTask {
    /// The job's name.
    pub job: String,
    /// The attempt.
    pub attempt: AttemptId,
    /// The job vertex id (for messages).
    pub vertex_id: String,
    /// The job vertex's task.
    pub vertex: RemoteVertex,
    /// Input partitions (none for a source, which pulls splits).
    pub inputs: Vec<RemoteInput>,
    /// Result partitions written (none for a sink).
    pub outputs: Vec<RemoteOutput>,
    /// Sleep per input record (test knob of the job file).
    pub record_delay: Duration,
    /// Fail after this many input records (test knob).
    pub fail_after: Option<u64>,
}

/// `a` on the wire.
pub fn to_wire(a: AttemptId) -> rpc::Attempt {
    rpc::Attempt {
        vertex: a.vertex as u32,
        subtask: a.subtask,
        attempt: a.attempt,
    }
}

/// An attempt from the wire; a missing one is vertex 0, subtask 0, attempt 0
/// and is refused where it matters (it is never current unless deployed).
pub fn from_wire(a: Option<&rpc::Attempt>) -> AttemptId {
    let a = a.cloned().unwrap_or_default();
    AttemptId {
        vertex: a.vertex as usize,
        subtask: a.subtask,
        attempt: a.attempt,
    }
}

/// `location` as a relative path of plain components only (at least one),
/// or `None`: what a worker accepts as a partition's place below its root,
/// so a coordinator (or another worker) cannot name a file outside it.
pub fn plain_relative(location: &str) -> Option<PathBuf> {
    let p = Path::new(location);
    let mut parts = p.components().peekable();
    parts.peek()?;
    p.components()
        .all(|c| matches!(c, Component::Normal(_)))
        .then(|| p.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(url: &str, writable: bool) -> coordhost_io::objstore::StoreGrant {
        coordhost_io::objstore::StoreGrant {
            url: coordhost_io::objstore::ObjectUrl::parse(url, true).expect("url"),
            writable,
        }
    }

    #[test]
    fn a_source_task_gets_the_enumerators_grants_with_its_stores_read_only() {
        let mut spec = coordhost_wasm::PluginSpec::bare(
            Path::new("/p/files.wasm"),
            coordhost_wasm::PluginKind::SplitEnumerator,
        );
        spec.dirs = vec![DirGrant {
            host: PathBuf::from("/data/in"),
            writable: true,
        }];
        spec.stores = vec![store("s3://bkt/in", false), store("s3://bkt/out", true)];
        let source = RemoteSource::new(&spec);
        assert_eq!(source.plugin, "files");
        assert_eq!(source.dirs, spec.dirs);
        assert_eq!(
            source.stores,
            [store("s3://bkt/in", false), store("s3://bkt/out", false)]
        );
        // On the worker: the same grants, and the host's rule on each split.
        let grants = source.grants().expect("grants");
        assert_eq!(grants.stores(), source.stores.as_slice());
        assert!(
            grants
                .open_readable_object(Path::new("s3://bkt/other/x"))
                .is_err()
        );
        let wire = postcard::to_stdvec(&source).expect("encode");
        assert_eq!(
            postcard::from_bytes::<RemoteSource>(&wire).expect("decode"),
            source
        );
    }

    #[test]
    fn a_worker_refuses_a_writable_or_unplain_store_grant_naming_the_plugin() {
        let source = |stores| RemoteSource {
            plugin: "files".into(),
            dirs: Vec::new(),
            stores,
        };
        let e = source(vec![store("s3://bkt/out", true)])
            .grants()
            .expect_err("writable");
        assert!(
            e.contains("s3://bkt/out") && e.contains("`files`") && e.contains("writable"),
            "{e}"
        );
        let crafted = coordhost_io::objstore::StoreGrant {
            url: coordhost_io::objstore::ObjectUrl {
                bucket: "bkt".into(),
                key: "in/../secret".into(),
            },
            writable: false,
        };
        let e = source(vec![crafted]).grants().expect_err("dot-dot");
        assert!(e.contains("`files`") && e.contains("`..` part"), "{e}");
        let bad_bucket = coordhost_io::objstore::StoreGrant {
            url: coordhost_io::objstore::ObjectUrl {
                bucket: "B".into(),
                key: "in".into(),
            },
            writable: false,
        };
        assert!(source(vec![bad_bucket]).grants().is_err());
    }

    #[test]
    fn only_plain_relative_locations_are_accepted() {
        assert_eq!(
            plain_relative("job/ds-0/t-1-a0"),
            Some(PathBuf::from("job/ds-0/t-1-a0"))
        );
        for bad in ["", "/etc", "../x", "a/../../b", "./a"] {
            assert_eq!(plain_relative(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn only_lowercase_hex_sha256_names_a_component() {
        let good = "0123456789abcdef".repeat(4);
        assert!(is_sha256_hex(&good));
        for bad in [
            String::new(),
            good[..63].to_string(),
            format!("{good}0"),
            good.to_uppercase(),
            format!("../{}", &good[3..]),
            good.replacen('0', "g", 1),
        ] {
            assert!(!is_sha256_hex(&bad), "{bad:?}");
        }
    }

    #[test]
    fn attempts_cross_the_wire_unchanged() {
        let a = AttemptId {
            vertex: 3,
            subtask: 7,
            attempt: 2,
        };
        assert_eq!(from_wire(Some(&to_wire(a))), a);
    }
}
