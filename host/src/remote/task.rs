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
    fn attempts_cross_the_wire_unchanged() {
        let a = AttemptId {
            vertex: 3,
            subtask: 7,
            attempt: 2,
        };
        assert_eq!(from_wire(Some(&to_wire(a))), a);
    }
}
