//! Deployment: initializing job vertices (fixed or `auto` parallelism),
//! starting source coordinators, registering result partitions with the
//! shuffle master, and handing execution attempts to the worker pool.

use std::path::PathBuf;
use std::sync::Arc;

use coordhost_core::executor::IN_PROCESS;
use coordhost_core::placement::{NO_WORKER, Place};

use super::executors::Deployment;
use super::{CoordinatorSplits, Figures, JobMaster};
use crate::coordinator::SourceCoordinator;
use crate::grant::Grants;
use crate::graph::{AttemptId, DistributionPattern, VertexInit};
use crate::plugin::{
    ExecutionAttemptId, PartitionDescriptor, PartitionPlace, ProducerDescriptor, ResultPartitionId,
    ShuffleDescriptor,
};
use crate::runtime::{InputPartition, OutputPlace, TaskInput, TaskOutput, TaskSpec};
use crate::scheduler::{JobError, JobEventSink};
use crate::shuffle::{ExpectedPartition, PartitionProducer, is_object_location};

impl JobMaster {
    /// Initializes every vertex whose inputs are finished and deploys every
    /// created execution whose inputs are finished (decided by
    /// [`JobMasterCore::schedule`](coordhost_core::master::JobMasterCore::schedule)).
    pub(super) fn schedule(&mut self, events: &mut dyn JobEventSink) -> Result<(), JobError> {
        let actions = self.core.schedule(self.room());
        self.carry_out(actions, None, events)
    }

    /// How many more attempts the executor is handed now
    /// (`coordhost_core::master::room`: two per slot, less those running).
    pub(super) fn room(&self) -> usize {
        coordhost_core::master::room(self.executor.slots(), self.running)
    }

    pub(super) fn start_coordinator(&mut self, v: usize) -> Result<(), JobError> {
        let vertex = &self.core.sched.graph.job.vertices[v];
        let name = vertex.source.clone().unwrap_or_default();
        let plugin = self.plugins.get(&name).ok_or_else(|| JobError::Internal {
            reason: format!("source plugin `{name}` not loaded"),
        })?;
        let parallelism = self.core.sched.graph.vertices[v].executions.len() as u32;
        let c = SourceCoordinator::start(&vertex.id, plugin, parallelism, vertex.max_task_bytes)?;
        self.coordinators.insert(v, c);
        Ok(())
    }

    /// Records the initialization of vertex `v` the core decided (fixed,
    /// or `auto` from the bytes its inputs produced).
    pub(super) fn initialized(
        &mut self,
        v: usize,
        init: &VertexInit,
        events: &mut dyn JobEventSink,
    ) -> Result<(), JobError> {
        let id = self.core.sched.graph.job.vertices[v].id.clone();
        tracing::info!(vertex = %id, parallelism = init.parallelism, "vertex initialized");
        events.vertex_initialized(&id, init)?;
        self.figures.per_subtask[v] = vec![Figures::default(); init.parallelism as usize];
        if let Some(p) = &self.opts.progress {
            p.vertex_initialized(&id, init.parallelism);
        }
        self.crash_point("vertex-initialized", events)
    }

    pub(super) fn deploy(&mut self, v: usize, s: u32) -> Result<(), JobError> {
        // On worker processes, a worker is chosen first: an attempt that
        // cannot be placed is not started (and not counted), it waits.
        let remote = self.executor.is_remote();
        let worker = if remote {
            let Some(worker) = self.place(v, s) else {
                return Ok(());
            };
            worker
        } else {
            IN_PROCESS.to_owned()
        };
        let attempt = self.core.sched.graph.attempt_id(v, s);
        let jv = self.core.sched.graph.job.vertices[v].clone();
        let (outputs, descriptors) = self.register_outputs(v, s, attempt.attempt)?;
        self.descriptors.insert((v, s), descriptors);
        let input = self.task_input(v, s, attempt)?;
        #[cfg(feature = "failpoints")]
        self.inject_loss(&jv.id, attempt);
        // A source reads `file-range` splits only inside its enumerator's grants.
        let source_grants = jv.source.as_ref().map(|name| {
            let (dirs, stores) = self
                .plugins
                .get(name)
                .map(|p| (p.spec().dirs.clone(), p.spec().stores.clone()))
                .unwrap_or_default();
            Grants::new(name, &dirs).with_stores(&stores)
        });
        let spec = TaskSpec {
            attempt,
            vertex_id: jv.id.clone(),
            operators: Arc::new(jv.operators.clone()),
            readers: self.readers.clone(),
            input,
            outputs,
            sink: jv.sink.clone().map(Arc::new),
            source_grants,
            functions: self.functions.clone(),
            record_delay: jv.record_delay,
            #[cfg(feature = "failpoints")]
            fail_after: crate::failpoints::task_fails_after(&jv.id, s, attempt.attempt),
            cancel: self.cancel.clone(),
        };
        self.core.sched.started(attempt);
        self.running += 1;
        self.figures.tasks_run += 1;
        if let Some(p) = &self.opts.progress {
            p.task_started(&jv.id, s, attempt.attempt);
        }
        tracing::debug!(vertex = %jv.id, subtask = s, attempt = attempt.attempt, "deploying");
        let task = Deployment { vertex: jv, spec };
        // Returns at once; what becomes of the attempt comes back as a
        // message (a failed Deploy too).
        if let Err(reason) = self.executor.deploy(attempt, task, &worker) {
            // Nothing was sent: no message will end this attempt.
            self.running -= 1;
            return Err(JobError::LostLeadership { reason });
        }
        if remote {
            self.core.placement.deployed(attempt, worker);
        }
        self.answer_waiting(v);
        Ok(())
    }

    /// Registers one result partition per outgoing edge of vertex `v` with
    /// the shuffle master for attempt `attempt` of subtask `s`: the task's
    /// outputs (a folder or an object, checked against the shuffle master's
    /// writable grants: the host writes only there, `crate::grant`) and the
    /// shuffle descriptors.
    fn register_outputs(
        &mut self,
        v: usize,
        s: u32,
        attempt: u32,
    ) -> Result<(Vec<TaskOutput>, Vec<ShuffleDescriptor>), JobError> {
        let job_vertex = self.core.sched.graph.job.vertices[v].id.clone();
        let mut outputs = Vec::new();
        let mut descriptors = Vec::new();
        for e in self.core.sched.graph.job.outputs(v) {
            let n = self.core.sched.graph.job.num_subpartitions(e);
            let data_set = self.core.sched.graph.job.data_set_id(e);
            let producer = PartitionProducer {
                job: self.job.clone(),
                data_set: data_set.clone(),
                job_vertex: job_vertex.clone(),
                subtask: s,
                attempt,
            };
            let id = ResultPartitionId {
                intermediate_data_set: data_set,
                producer: ExecutionAttemptId {
                    job_vertex: job_vertex.clone(),
                    subtask: s,
                    attempt,
                },
            };
            let d = self
                .shuffle
                .register_partition_with_producer(
                    &self.job,
                    &PartitionDescriptor {
                        id,
                        num_subpartitions: n,
                    },
                    &ProducerDescriptor {
                        worker_id: "local".into(),
                        hostname: None,
                    },
                )
                .map_err(|source| JobError::Plugin {
                    plugin: self.shuffle_plugin.clone(),
                    source,
                })?;
            // Checked against the shuffle master's writable grants (as the
            // wrapper did already): the host writes only there (`crate::grant`).
            let place = self
                .shuffle
                .partition_place("register-partition-with-producer", &d.location)
                .map_err(|source| JobError::Plugin {
                    plugin: self.shuffle_plugin.clone(),
                    source,
                })?;
            let location = match place {
                PartitionPlace::Dir(dir) => OutputPlace::Dir(dir),
                PartitionPlace::Object(url) => OutputPlace::Object {
                    url,
                    staging: self.partition_staging(&producer),
                },
            };
            let edge = &self.core.sched.graph.job.edges[e];
            outputs.push(TaskOutput {
                edge: e,
                location,
                num_subpartitions: n,
                producer,
                pattern: edge.pattern,
                key: edge.key.clone(),
            });
            descriptors.push(d);
        }
        Ok((outputs, descriptors))
    }

    /// What attempt `attempt` of subtask `s` of vertex `v` reads: splits
    /// from its source coordinator (the reader registered with it), or the
    /// partitions of its inputs.
    fn task_input(&mut self, v: usize, s: u32, attempt: AttemptId) -> Result<TaskInput, JobError> {
        let Some(plugin) = self.core.sched.graph.job.vertices[v].source.clone() else {
            return Ok(TaskInput::Partitions(self.inputs_of(v, s)));
        };
        if let Some(c) = self.coordinators.get_mut(&v) {
            c.register_reader(s)?;
            self.core.snapshots.touch(v);
        }
        let wait = self
            .split_waits
            .get(&plugin)
            .copied()
            .unwrap_or(crate::plugin::DEFAULT_SPLIT_WAIT);
        Ok(TaskInput::Splits(Box::new(CoordinatorSplits {
            attempt,
            vertex: self.core.sched.graph.job.vertices[v].id.clone(),
            plugin,
            wait,
            tx: self.tx.clone(),
        })))
    }

    /// The worker the next attempt of execution vertex (`v`, `s`) goes to,
    /// or `None` when it must wait (`coordhost_core::placement`): no worker
    /// is alive, or its last `Deploy` failed a moment ago and only the
    /// worker that failed it is there. Workers an earlier attempt failed on
    /// are taken only when no other is alive.
    fn place(&mut self, v: usize, s: u32) -> Option<String> {
        let now = self.clock.now();
        let executor = &self.executor;
        let place = self
            .core
            .placement
            .place((v, s), now, |avoid| executor.pick_worker(avoid));
        let vertex = &self.core.sched.graph.job.vertices[v].id;
        match place {
            Place::On { worker, waited } => {
                if waited {
                    tracing::info!(%vertex, subtask = s, %worker, "placed after waiting for a worker");
                }
                Some(worker)
            }
            Place::Pause => None,
            Place::NoWorker { newly, first } => {
                if newly {
                    let wait = self.core.placement.slot_request_timeout().as_millis();
                    if first {
                        tracing::warn!(%vertex, subtask = s, "{NO_WORKER}: waiting for one (at most {wait} ms, job.slot-request-timeout-ms); an attempt that waits is not a failed one");
                    } else {
                        tracing::debug!(%vertex, subtask = s, "{NO_WORKER}: waiting for one");
                    }
                }
                None
            }
        }
    }

    /// The partitions subtask `s` of vertex `v` reads, each with what it
    /// must be: the producer attempt its index names and, when the
    /// producer reported them (or the log recorded them), the bytes of
    /// each subpartition read (docs/shuffle-format.md, "Reading").
    pub(super) fn inputs_of(&self, v: usize, s: u32) -> Vec<InputPartition> {
        let range = self.core.sched.graph.vertices[v]
            .init
            .as_ref()
            .and_then(|i| i.input_ranges.get(s as usize).cloned())
            .unwrap_or(s..s + 1);
        let mut inputs = Vec::new();
        for e in self.core.sched.graph.job.inputs(v) {
            let edge = &self.core.sched.graph.job.edges[e];
            let producers = &self.core.sched.graph.vertices[edge.from].executions;
            let (subtasks, subpartitions) = match edge.pattern {
                DistributionPattern::Forward => (s..s + 1, 0..1),
                DistributionPattern::Hash => (0..producers.len() as u32, range.clone()),
                DistributionPattern::Broadcast => (0..producers.len() as u32, 0..1),
            };
            for p in subtasks {
                let ex = &producers[p as usize];
                let produced = ex.partitions.iter().find(|pp| pp.edge == e);
                // A producer that reported no byte for any of these
                // subpartitions is not opened at all (Spark's reducers skip
                // zero-sized blocks the same way): on an all-to-all edge most
                // (producer, consumer) pairs of a small job are empty, and
                // opening each pair's index would make the edge cost N².
                // Unknown sizes (an empty list) are read as before.
                if let Some(pp) = produced
                    && !pp.bytes_per_subpartition.is_empty()
                    && pp.bytes_per_subpartition.all_zero_in(subpartitions.clone())
                {
                    continue;
                }
                let location = produced.map(|pp| pp.location.clone()).unwrap_or_default();
                let bytes = produced
                    .filter(|pp| !pp.bytes_per_subpartition.is_empty())
                    .map(|pp| {
                        subpartitions
                            .clone()
                            .map(|i| pp.bytes_per_subpartition.get(i as usize).unwrap_or(0))
                            .collect()
                    });
                let expected = ExpectedPartition {
                    producer: PartitionProducer {
                        job: self.job.clone(),
                        data_set: self.core.sched.graph.job.data_set_id(e),
                        job_vertex: self.core.sched.graph.job.vertices[edge.from].id.clone(),
                        subtask: p,
                        attempt: ex.attempt,
                    },
                    bytes,
                };
                // On object storage: read from there by whoever runs the
                // consumer, once the place is inside the shuffle master's
                // writable store grants (one recorded elsewhere is read as
                // no partition: its producer runs again).
                let object = is_object_location(&location)
                    .then(|| self.shuffle.grants().writable_object(&location).ok())
                    .flatten();
                inputs.push(InputPartition {
                    producer: AttemptId {
                        vertex: edge.from,
                        subtask: p,
                        attempt: ex.attempt,
                    },
                    location,
                    grants: self.shuffle.grants().clone(),
                    subpartitions: subpartitions.clone(),
                    expected,
                    remote: None,
                    object,
                });
            }
        }
        inputs
    }

    /// The local folder where the partition `producer` writes is staged
    /// before it is uploaded to object storage, on the coordinator's disk
    /// (embedded workers): `<data dir>/<job>/shuffle-staging/<data
    /// set>/<vertex>-<subtask>-<attempt>`.
    fn partition_staging(&self, producer: &PartitionProducer) -> PathBuf {
        self.opts
            .data_dir
            .join(&self.job)
            .join("shuffle-staging")
            .join(&producer.data_set)
            .join(format!(
                "{}-{}-{}",
                producer.job_vertex, producer.subtask, producer.attempt
            ))
    }

    /// Test knob (fail point `partition::lost::*` of [`crate::failpoints`]):
    /// deletes the partitions a consumer attempt is about to read.
    #[cfg(feature = "failpoints")]
    pub(super) fn inject_loss(&self, vertex: &str, attempt: AttemptId) {
        let lost = crate::failpoints::lost_partitions(vertex, attempt.subtask, attempt.attempt);
        for (producer, producer_subtask) in lost {
            let Some(pv) = self
                .core
                .sched
                .graph
                .job
                .vertices
                .iter()
                .position(|x| x.id == producer)
            else {
                continue;
            };
            if let Some(ex) = self.core.sched.graph.vertices[pv]
                .executions
                .get(producer_subtask as usize)
            {
                for p in &ex.partitions {
                    tracing::info!("test knob: deleting partition {}", p.location.display());
                    self.delete_partition(&p.location);
                }
            }
        }
    }
}
