//! An execution attempt as it crosses from the coordinator to a worker
//! process: [`RemoteTask`] on the coordinator, `DeployRequest` of
//! `proto/coordhost/worker/v1/worker.proto` on the wire, with the job
//! vertex's task ([`RemoteVertex`]) postcard-encoded inside.

use std::ops::Range;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::grant::DirGrant;
use crate::graph::{AttemptId, DistributionPattern, Operator, SinkSpec};
use crate::rpc;
use crate::shuffle::ExpectedPartition;

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
    /// For a source: the split enumerator plugin's name and grants.
    pub source: Option<(String, Vec<DirGrant>)>,
    /// The job's scalar functions (`[functions.NAME]`, docs/sql.md): a
    /// stage plan calls them by name; the worker binds each name to the
    /// component of this hash, fetched from the coordinator when it has
    /// none (docs/workers.md, "Scalar functions on workers").
    pub functions: Vec<RemoteFunction>,
}

/// One scalar function of the job as a worker needs it to run it as the
/// coordinator would: its name, its component by SHA-256 (the bytes
/// travel separately, `FetchComponent`, and only when the worker has none
/// of that hash), its signature (the planner's, for decoding a stage
/// before the component is loaded) and its plugin settings. What a worker
/// receives here is checked before use: the hash must be 64 lowercase hex
/// digits (it names a file), the types must parse, and the loaded
/// component must declare exactly this signature.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteFunction {
    /// The name SQL calls it by.
    pub name: String,
    /// The component file on the coordinator, for messages only.
    pub component: String,
    /// Lowercase hex SHA-256 of the component's bytes.
    pub sha256: String,
    /// Argument types in Arrow's text form (`Int64`, `Decimal128(15, 2)`).
    pub arguments: Vec<String>,
    /// Result type in Arrow's text form.
    pub returns: String,
    /// The function's `config`, in file order.
    pub config: Vec<(String, String)>,
    /// Directories granted (none unless the job file lists some).
    pub dirs: Vec<DirGrant>,
    /// `limits.call-timeout-ms`.
    pub call_timeout_ms: u64,
    /// `limits.memory-mib`, in bytes.
    pub memory_bytes: u64,
    /// `limits.on-trap`.
    pub on_trap: crate::plugin::TrapPolicy,
}

impl RemoteFunction {
    /// The function `f` of a job whose `[functions.NAME]` entry is `spec`.
    pub fn new(f: &crate::sql::SqlFunction, spec: &crate::plugin::PluginSpec) -> Self {
        Self {
            name: f.name.clone(),
            component: spec.path.display().to_string(),
            sha256: f.sha256.clone(),
            arguments: f.arguments.iter().map(ToString::to_string).collect(),
            returns: f.returns.to_string(),
            config: spec.config.clone(),
            dirs: spec.dirs.clone(),
            call_timeout_ms: spec.limits.call_timeout.as_millis() as u64,
            memory_bytes: spec.limits.memory_bytes,
            on_trap: spec.limits.on_trap,
        }
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
    /// The partition's path below its holder's partition root.
    pub location: PathBuf,
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
    /// master's location, relative to its grant).
    pub location: PathBuf,
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
