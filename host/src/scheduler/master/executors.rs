//! The JobMaster's two executors (`coordhost_core::executor::Executor`):
//! threads of this process ([`Embedded`]) and worker processes over gRPC
//! ([`Workers`]); the simulator's virtual workers are the third
//! (`tests/sim`). An executor starts, stops and cleans up attempts; what
//! happens to an attempt comes back to the JobMaster's loop as a
//! [`Message`].

use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::Sender;

use coordhost_core::executor::{Executor, IN_PROCESS, WorkerId};

use super::Message;
use crate::grant::Grants;
use crate::graph::{AttemptId, JobVertex};
use crate::remote::{
    Cluster, RemoteFunction, RemoteInput, RemoteOutput, RemoteReader, RemoteSource, RemoteTask,
    RemoteVertex,
};
use crate::runtime::{OutputPlace, TaskInput, TaskSpec, WorkerPool, run_task};

/// What one attempt carries to its executor: its job vertex and its task
/// spec (a worker process gets the spec in its wire form, built from both).
pub(super) struct Deployment {
    pub vertex: JobVertex,
    pub spec: TaskSpec,
}

/// Threads of this process: an attempt runs as soon as a thread is free;
/// its one worker ([`IN_PROCESS`]) is always there, never refuses, is
/// never lost.
pub(super) struct Embedded {
    pub pool: WorkerPool,
    pub tx: Sender<Message>,
}

impl Executor for Embedded {
    type Task = Deployment;

    fn is_remote(&self) -> bool {
        false
    }

    fn pick_worker(&self, _avoid: &BTreeSet<WorkerId>) -> Option<WorkerId> {
        Some(IN_PROCESS.to_owned())
    }

    fn deploy(
        &mut self,
        attempt: AttemptId,
        task: Deployment,
        _worker: &str,
    ) -> Result<(), String> {
        let tx = self.tx.clone();
        let spec = task.spec;
        self.pool.submit(move || {
            let msg = match run_task(spec) {
                Ok(report) => Message::Finished { attempt, report },
                Err(error) => Message::Failed { attempt, error },
            };
            let _ignored = tx.send(msg);
        });
        Ok(())
    }

    /// An embedded attempt stops with the job's cancel flag only; a reset
    /// one runs to its end, and its report is a superseded attempt's.
    fn cancel(&mut self, _attempt: AttemptId) {}

    /// The JobMaster deletes this process's partitions itself (through the
    /// shuffle master's grants).
    fn release(&mut self, _attempt: AttemptId, _locations: &[PathBuf]) {}

    fn slots(&self) -> u64 {
        self.pool.size() as u64
    }
}

/// Worker processes (`crate::remote`): a `Deploy` goes out at once and its
/// outcome comes back as a cluster event.
pub(super) struct Workers {
    pub cluster: Arc<Cluster>,
    pub tasks: RemoteTasks,
}

impl Executor for Workers {
    type Task = Deployment;

    fn is_remote(&self) -> bool {
        true
    }

    fn pick_worker(&self, avoid: &BTreeSet<WorkerId>) -> Option<WorkerId> {
        self.cluster.pick_worker(avoid)
    }

    fn deploy(
        &mut self,
        _attempt: AttemptId,
        task: Deployment,
        worker: &str,
    ) -> Result<(), String> {
        let task = self.tasks.task(&task.vertex, task.spec);
        self.cluster.deploy(&task, worker)
    }

    fn cancel(&mut self, attempt: AttemptId) {
        self.cluster.cancel(attempt);
    }

    fn release(&mut self, attempt: AttemptId, locations: &[PathBuf]) {
        self.cluster.release(attempt, locations);
    }

    fn slots(&self) -> u64 {
        self.cluster.slots()
    }
}

/// What turns a task spec into the task a worker process gets: the job, the
/// shuffle master's grants (partition paths go relative to them), the
/// source plugins' grants, and the job's functions and readers as workers
/// fetch them.
pub(super) struct RemoteTasks {
    pub job: String,
    pub shuffle_grants: Grants,
    /// Per split enumerator plugin: its grants as a worker gets them.
    pub sources: BTreeMap<String, RemoteSource>,
    /// The job's scalar functions as a worker is told of them (name,
    /// settings, component hash).
    pub functions: Vec<RemoteFunction>,
    /// The source readers of the SQL job's tables as a worker is told of
    /// them (table, columns, plugin, settings, component hash); a scan
    /// deploy carries its table's.
    pub readers: Vec<RemoteReader>,
}

impl RemoteTasks {
    /// `spec` as a worker process gets it: paths relative to the shuffle
    /// master's grant (a worker keeps partitions below its own root).
    fn task(&self, jv: &JobVertex, spec: TaskSpec) -> RemoteTask {
        let relative = |location: &std::path::Path| {
            self.shuffle_grants
                .writable_dir(location)
                .map(|d| d.relative().to_path_buf())
                // Never registered (a producer without a known
                // partition): a name no worker holds, so the consumer
                // fails with PartitionNotFound and the producer re-runs.
                .unwrap_or_else(|_| "unknown-partition".into())
        };
        let inputs = match &spec.input {
            TaskInput::Partitions(parts) => parts
                .iter()
                .map(|p| RemoteInput {
                    producer: p.producer,
                    location: if p.object.is_some() {
                        PathBuf::new()
                    } else {
                        relative(&p.location)
                    },
                    object: p.object.clone(),
                    subpartitions: p.subpartitions.clone(),
                    expected: p.expected.clone(),
                })
                .collect(),
            TaskInput::Splits(_) => Vec::new(),
        };
        // The enumerator's grants, its store grants read-only: exactly
        // where the splits it assigns may lie (each checked against them
        // at assignment), and nothing to write.
        let source = jv.source.as_ref().map(|name| {
            self.sources
                .get(name)
                .cloned()
                .unwrap_or_else(|| RemoteSource {
                    plugin: name.clone(),
                    dirs: Vec::new(),
                    stores: Vec::new(),
                })
        });
        RemoteTask {
            job: self.job.clone(),
            attempt: spec.attempt,
            vertex_id: jv.id.clone(),
            vertex: RemoteVertex {
                operators: jv.operators.clone(),
                routes: spec
                    .outputs
                    .iter()
                    .map(|o| (o.edge, o.pattern, o.key.clone()))
                    .collect(),
                sink: jv.sink.clone(),
                source,
                functions: self.functions.clone(),
                // A scan of a table read by a source reader carries that
                // reader (the worker loads it before the task runs).
                readers: self
                    .readers
                    .iter()
                    .filter(|r| scans_table(&jv.operators, &r.table))
                    .cloned()
                    .collect(),
            },
            inputs,
            outputs: spec
                .outputs
                .iter()
                .map(|o| {
                    let (location, object) = match &o.location {
                        OutputPlace::Dir(dir) => (dir.relative().to_path_buf(), None),
                        // On object storage: the worker stages it below its
                        // own root and uploads it with its own credentials.
                        OutputPlace::Object { url, .. } => (PathBuf::new(), Some(url.clone())),
                    };
                    RemoteOutput {
                        edge: o.edge,
                        location,
                        object,
                        num_subpartitions: o.num_subpartitions,
                        data_set: o.producer.data_set.clone(),
                    }
                })
                .collect(),
            record_delay: spec.record_delay,
            #[cfg(feature = "failpoints")]
            fail_after: spec.fail_after,
            #[cfg(not(feature = "failpoints"))]
            fail_after: None,
        }
    }
}

/// Whether the operator chain `operators` holds a SQL stage whose scan
/// reads `table` through a source reader.
fn scans_table(operators: &[crate::graph::Operator], table: &str) -> bool {
    operators.iter().any(|op| {
        matches!(
            op,
            crate::graph::Operator::Stage(crate::graph::StagePlan {
                source: Some(source),
                ..
            }) if matches!(source.files(), crate::graph::StageSource::Reader { table: t, .. } if t == table)
        )
    })
}
