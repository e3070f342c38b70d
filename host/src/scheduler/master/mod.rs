//! The JobMaster loop: the single owner of the execution graph.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::time::{Duration, Instant};

use coordhost_core::clock::{Clock, SystemClock};
use coordhost_core::master::{Action, Input, JobMasterCore};
use coordhost_core::snapshot_policy::SnapshotPolicy;

use super::{BatchSnapshots, JobError, JobEventSink, JobStatus, RunOptions, Summary};
use crate::config::JobConfig;
use crate::coordinator::{CoordinatorSnapshot, SourceCoordinator, SplitAnswer};
use crate::events::ResetReason;
use crate::graph::{AttemptId, ExecutionGraph, ExecutionState, ProducedPartition};
use crate::plan::{EnumeratorStart, RecoveryPlan};
use crate::plugin::{
    ExecutionAttemptId, LoadedPlugin, ResultPartitionId, ShuffleDescriptor, ShuffleMaster,
    ShuffleMasterSnapshot,
};
mod cleanup;
mod deploy;
mod executors;
mod failover;
mod figures;

use coordhost_core::executor::Executor;
use executors::Deployment;
use figures::{Figures, RunFigures};

use crate::remote::{Cluster, ClusterEvent};
use crate::runtime::{SplitSource, TaskError, TaskReport, WorkerPool, sink};
use crate::value::SplitData;

/// What the loop receives.
enum Message {
    /// A source task asks for its next split; answer on `reply`.
    SplitRequest {
        attempt: AttemptId,
        reply: Sender<Result<Option<SplitData>, String>>,
    },
    /// A task finished.
    Finished {
        attempt: AttemptId,
        report: TaskReport,
    },
    /// A task failed.
    Failed {
        attempt: AttemptId,
        error: TaskError,
    },
    /// A worker process was lost with the output of `held`.
    WorkerLost {
        worker: String,
        held: Vec<AttemptId>,
    },
    /// The `Deploy` of `attempt` to `worker` failed: the attempt was not
    /// placed (it may have started there and pulled splits).
    DeployFailed {
        attempt: AttemptId,
        worker: String,
        message: String,
    },
}

/// A source task's view of its source coordinator: a request message and a
/// wait for the reply (Flink's pull-based split requests) of at most the
/// enumerator plugin's split wait (`limits.split-wait-ms`, issue 9 item 7).
struct CoordinatorSplits {
    attempt: AttemptId,
    /// The source job vertex id.
    vertex: String,
    /// The split enumerator plugin's name.
    plugin: String,
    /// Longest wait for one answer.
    wait: Duration,
    tx: Sender<Message>,
}

impl SplitSource for CoordinatorSplits {
    fn next_split(&mut self) -> Result<Option<SplitData>, TaskError> {
        let (reply, rx) = channel();
        let failed = |reason: String| TaskError::SplitRequest { reason };
        self.tx
            .send(Message::SplitRequest {
                attempt: self.attempt,
                reply,
            })
            .map_err(|_| failed("the scheduler is gone".into()))?;
        match rx.recv_timeout(self.wait) {
            Ok(answer) => answer.map_err(failed),
            Err(RecvTimeoutError::Timeout) => Err(failed(format!(
                "plugin `{}` gave subtask {} of `{}` no split and no end of splits within its split wait of {} ms (limits.split-wait-ms)",
                self.plugin,
                self.attempt.subtask,
                self.vertex,
                self.wait.as_millis()
            ))),
            Err(RecvTimeoutError::Disconnected) => {
                Err(failed("the scheduler dropped the request".into()))
            }
        }
    }
}

/// The JobMaster: owns the execution graph, the source coordinators and the
/// shuffle master; runs the loop.
pub struct JobMaster {
    job: String,
    /// The decisions, as a state machine without I/O
    /// (`coordhost_core::master`): the execution graph and what a finish, a
    /// failure, a refused `Deploy`, a lost worker or a recovery plan does to
    /// it; where attempts go; when batch snapshots are taken. It is stepped
    /// with each message and ticked while something waits; this file
    /// carries its actions out.
    core: JobMasterCore,
    plugins: BTreeMap<String, LoadedPlugin>,
    /// The source readers of the SQL job's tables read by one, by table.
    readers: crate::runtime::TableReaders,
    /// The SQL job's scalar functions, handed to every embedded task.
    functions: crate::sql::FunctionSet,
    shuffle: ShuffleMaster,
    shuffle_plugin: String,
    /// With high availability: the leadership's fence, checked before a
    /// sink publication (`RunOptions::fence`).
    fence: Option<Arc<dyn crate::events::Fence>>,
    coordinators: HashMap<usize, SourceCoordinator>,
    /// Split wait of each split enumerator plugin, by plugin name.
    split_waits: BTreeMap<String, Duration>,
    /// Split requests waiting for an answer, by attempt.
    waiting: HashMap<AttemptId, Sender<Result<Option<SplitData>, String>>>,
    /// Shuffle descriptors of the current attempts, by (vertex, subtask).
    descriptors: HashMap<(usize, u32), Vec<ShuffleDescriptor>>,
    /// What this run did, for progress lines and the summary (one concern:
    /// counting).
    figures: RunFigures,
    opts: RunOptions,
    /// Where attempts run: threads of this process or worker processes
    /// (`executors`; the core's trait, which the simulator implements too).
    executor: Box<dyn Executor<Task = Deployment>>,
    /// The worker processes, when attempts run there: what only they do
    /// (fetching staged sink output, releasing the job, the partition
    /// question asked of the workers' reports).
    cluster: Option<Arc<Cluster>>,
    tx: Sender<Message>,
    rx: Receiver<Message>,
    cancel: Arc<AtomicBool>,
    /// Where a signal or `coordhost cancel` asks the run to stop
    /// (`RunOptions::stop`), looked at every [`StopRequest::TICK`].
    stop: Option<Arc<crate::scheduler::StopRequest>>,
    running: usize,
    /// A message taken from the channel while gathering finishes that
    /// arrived together ([`JobMaster::on_finishes`]), handled next.
    held: Option<Message>,
    /// Progress lines of finishes recorded but not yet durable: printed
    /// once their group is (a progress line follows its durable record).
    finished_lines: Vec<(usize, u32, u32)>,
    /// The time the core is stepped with.
    clock: Arc<dyn Clock>,
}

impl JobMaster {
    /// Prepares a run: creates the shuffle master instance, registers the
    /// job with it, prepares the sink folders and starts `workers` threads.
    ///
    /// # Errors
    ///
    /// [`JobError::Plugin`] if the shuffle master fails; [`JobError::Io`]
    /// or [`JobError::Commit`] for sink folders; [`JobError::Workers`].
    pub fn new(
        config: &JobConfig,
        graph: ExecutionGraph,
        plugins: BTreeMap<String, LoadedPlugin>,
        opts: &RunOptions,
        workers: usize,
    ) -> Result<Self, JobError> {
        let shuffle_plugin = config.shuffle_plugin.clone();
        let plugin_err = |source| JobError::Plugin {
            plugin: shuffle_plugin.clone(),
            source,
        };
        let mut shuffle = plugins
            .get(&shuffle_plugin)
            .ok_or_else(|| JobError::Internal {
                reason: format!("shuffle plugin `{shuffle_plugin}` not loaded"),
            })?
            .shuffle_master()
            .map_err(plugin_err)?;
        shuffle.register_job(&config.name).map_err(plugin_err)?;
        let snapshots_enabled = config.recovery.enabled && shuffle.supports_batch_snapshot();
        let readers = table_readers(config, &plugins)?;
        let (tx, rx) = channel();
        let executor = executor(config, opts, &graph, &plugins, &mut shuffle, &tx, workers)?;
        let figures = RunFigures::new(graph.job.vertices.len());
        Ok(Self {
            job: config.name.clone(),
            // Batch snapshots are taken when recovery is enabled and the
            // shuffle master supports them (FLIP-383 disables recovery
            // otherwise), at most one per `snapshot-min-pause` before a
            // vertex completes.
            core: JobMasterCore::new(
                graph,
                config.max_attempts,
                config.slot_request_timeout,
                SnapshotPolicy::new(snapshots_enabled, config.recovery.snapshot_min_pause),
            ),
            functions: config
                .sql
                .as_ref()
                .map(|sql| sql.functions.clone())
                .unwrap_or_default(),
            plugins,
            readers,
            shuffle,
            shuffle_plugin,
            fence: opts.fence.clone(),
            coordinators: HashMap::new(),
            split_waits: config
                .plugins
                .iter()
                .map(|(name, p)| (name.clone(), p.limits.split_wait))
                .collect(),
            waiting: HashMap::new(),
            descriptors: HashMap::new(),
            figures,
            opts: opts.clone(),
            executor,
            cluster: opts.external.clone(),
            tx,
            rx,
            cancel: Arc::new(AtomicBool::new(false)),
            stop: opts.stop.clone(),
            running: 0,
            held: None,
            finished_lines: Vec::new(),
            clock: Arc::new(SystemClock::new()),
        })
    }

    /// Whether this run takes batch snapshots (recovery enabled and the
    /// shuffle master supports them).
    pub fn snapshots_enabled(&self) -> bool {
        self.core.snapshots.enabled()
    }

    /// Passes the named crash point `point`, one of
    /// [`crate::failpoints::CRASH_POINTS`] (a test knob: fail point
    /// `crash::<point>`): when it fires, makes what was recorded durable and
    /// stops the run as a crash would. Without the `failpoints` feature it
    /// does nothing.
    ///
    /// # Errors
    ///
    /// `JobError::SimulatedCrash` when the fail point fires.
    #[cfg(feature = "failpoints")]
    pub fn crash_point(
        &self,
        point: &'static str,
        events: &mut dyn JobEventSink,
    ) -> Result<(), JobError> {
        crash_if(
            &format!("crash::{point}"),
            || format!("at `{point}`"),
            events,
        )
    }

    /// Passes the named crash point `point`: nothing happens without the
    /// `failpoints` feature.
    ///
    /// # Errors
    ///
    /// None.
    #[cfg(not(feature = "failpoints"))]
    pub fn crash_point(
        &self,
        _point: &'static str,
        _events: &mut dyn JobEventSink,
    ) -> Result<(), JobError> {
        Ok(())
    }

    /// Removes what an earlier run left in the sink folders; a fresh run
    /// calls this before [`JobMaster::run`], a recovered one does not.
    ///
    /// # Errors
    ///
    /// [`JobError::Commit`] if a folder cannot be cleaned.
    pub fn prepare_fresh_sinks(&self) -> Result<(), JobError> {
        for v in &self.core.sched.graph.job.vertices {
            if let Some(s) = &v.sink {
                sink::prepare_fresh(s).map_err(|source| JobError::Commit {
                    vertex: v.id.clone(),
                    source: Box::new(source),
                })?;
            }
        }
        Ok(())
    }

    /// Restores the shuffle master from the log's batch snapshots (oldest
    /// first, from the last full one; none: nothing to restore) and tells it
    /// partition recovery started (docs/recovery.md step 4).
    ///
    /// # Errors
    ///
    /// [`JobError::Plugin`] when the shuffle master fails either call.
    pub fn restore_shuffle_master(
        &mut self,
        snapshots: Vec<ShuffleMasterSnapshot>,
    ) -> Result<(), JobError> {
        let shuffle_err = |source| JobError::Plugin {
            plugin: self.shuffle_plugin.clone(),
            source,
        };
        if !snapshots.is_empty() {
            self.shuffle.restore_state(snapshots).map_err(shuffle_err)?;
        }
        self.shuffle
            .notify_partition_recovery_started(&self.job)
            .map_err(shuffle_err)
    }

    /// The worker processes this run uses, if it runs on them
    /// (`coordhost run --external-workers`).
    pub fn external_cluster(&self) -> Option<Arc<Cluster>> {
        self.cluster.clone()
    }

    /// The shuffle master instance.
    pub fn shuffle_master(&mut self) -> &mut ShuffleMaster {
        &mut self.shuffle
    }

    /// Per job vertex (by index): whether it is a source whose split
    /// enumerator supports batch snapshots.
    pub fn sources_supporting_snapshots(&self) -> Vec<bool> {
        self.core
            .sched
            .graph
            .job
            .vertices
            .iter()
            .map(|v| {
                v.source
                    .as_ref()
                    .and_then(|p| self.plugins.get(p))
                    .is_some_and(LoadedPlugin::supports_batch_snapshot)
            })
            .collect()
    }

    /// Restores the source coordinator of source vertex `v` from its batch
    /// snapshot (docs/recovery.md step 5: the enumerator plugin's
    /// `restore`, then `start`, with the split-assignment history of
    /// `snapshot`, one reader per entry of `snapshot.readers`) and keeps
    /// it: [`JobMaster::apply_recovery`] gives the splits of the subtasks
    /// that are not kept back to it.
    ///
    /// # Errors
    ///
    /// [`JobError::Coordinator`] when the enumerator cannot be restored
    /// (a plugin error, [`crate::coordinator::CoordinatorError::Plugin`],
    /// means its `restore` or `start` failed); [`JobError::Internal`] if
    /// `v` is not a source. Nothing is kept then.
    pub fn restore_coordinator(
        &mut self,
        v: usize,
        snapshot: CoordinatorSnapshot,
    ) -> Result<(), JobError> {
        let vertex = &self.core.sched.graph.job.vertices[v];
        let plugin = vertex
            .source
            .as_ref()
            .and_then(|p| self.plugins.get(p))
            .ok_or_else(|| JobError::Internal {
                reason: format!("source plugin of `{}` not loaded", vertex.id),
            })?;
        let parallelism = snapshot.readers.len() as u32;
        let c = SourceCoordinator::restore(
            &vertex.id,
            plugin,
            parallelism,
            snapshot,
            vertex.max_task_bytes,
        )?;
        self.coordinators.insert(v, c);
        Ok(())
    }

    /// The split enumerator plugin of source vertex `v`, if it is one.
    pub fn source_plugin(&self, v: usize) -> Option<&str> {
        self.core.sched.graph.job.vertices.get(v)?.source.as_deref()
    }

    /// Installs a recovery plan before anything is scheduled
    /// (docs/recovery.md step 7): recorded parallelism and input ranges,
    /// kept executions with their attempt ids and partitions, restored
    /// source coordinators with the unfinished subtasks' splits given back,
    /// and partitions of re-run producers released. Resets are recorded.
    ///
    /// # Errors
    ///
    /// [`JobError::Recording`] when a reset cannot be recorded;
    /// [`JobError::Coordinator`] when an enumerator cannot be restored.
    /// The master must then not be run.
    pub fn apply_recovery(
        &mut self,
        plan: &mut RecoveryPlan,
        events: &mut dyn JobEventSink,
    ) -> Result<(), JobError> {
        self.core.sched.install(plan);
        for (v, init) in &plan.initialized {
            self.figures.per_subtask[*v] = vec![Figures::default(); init.parallelism as usize];
            if let Some(p) = &self.opts.progress {
                p.vertex_initialized(&self.core.sched.graph.job.vertices[*v].id, init.parallelism);
            }
        }
        for (&(v, s), reason) in &plan.reset {
            if self.core.sched.graph.vertices[v]
                .executions
                .get(s as usize)
                .is_none()
            {
                continue;
            }
            let id = self.core.sched.graph.attempt_id(v, s);
            let vertex = self.core.sched.graph.job.vertices[v].id.clone();
            events.executions_reset(&vertex, &[id], reason)?;
            *self
                .figures
                .reset_reasons
                .entry(reason_kind(reason).into())
                .or_default() += 1;
        }
        for (&v, start) in &plan.coordinators {
            if *start == EnumeratorStart::Fresh {
                // A fresh enumerator (started when the vertex is scheduled).
                self.coordinators.remove(&v);
                continue;
            }
            let parallelism = self.core.sched.graph.vertices[v].executions.len() as u32;
            // Restored in step 5 (`restore_coordinator`), for the recorded
            // parallelism.
            let Some(mut c) = self
                .coordinators
                .remove(&v)
                .filter(|c| c.readers().len() == parallelism as usize)
            else {
                return Err(JobError::Internal {
                    reason: format!(
                        "recovery restored no source coordinator of `{}` for parallelism {parallelism}",
                        self.core.graph().job.vertices[v].id
                    ),
                });
            };
            // Unfinished subtasks are reset explicitly: their splits go back
            // to the restored enumerator and "no more splits" is cleared.
            // What the kept subtasks read is kept input; what the reset
            // ones held (as the recorded history says) is read again.
            let input = self.figures.input_figures.entry(v).or_default();
            for s in 0..parallelism {
                let history = &c.readers()[s as usize];
                if plan.kept.contains_key(&(v, s)) {
                    input.splits_kept += history.assigned.len() as u64;
                    input.bytes_kept += history.assigned_bytes();
                    c.mark_finished(s);
                } else {
                    input.splits_reread += history.assigned.len() as u64;
                    input.bytes_reread += history.assigned_bytes();
                    let n = c.reset_subtask(s)?;
                    self.figures.split_counts.entry(v).or_default().1 += n as u64;
                }
            }
            self.coordinators.insert(v, c);
        }
        for p in &plan.release {
            let d = self.descriptor(
                p.vertex,
                p.subtask,
                p.attempt,
                &ProducedPartition {
                    edge: p.edge,
                    location: p.location.clone(),
                    bytes_per_subpartition: Default::default(),
                },
            );
            if let Err(e) = self.shuffle.release_partition_externally(&d) {
                tracing::warn!(plugin = %self.shuffle_plugin, "releasing {}: {e}", d.location);
            }
            self.delete_partition(&p.location);
        }
        self.figures.tasks_skipped = plan.kept.len() as u64;
        for &(v, _) in plan.kept.keys() {
            *self.figures.skipped_here.entry(v).or_default() += 1;
        }
        self.figures.tasks_reset += plan.reset.len() as u64;
        self.figures.recovered = true;
        Ok(())
    }

    /// Deletes the data of the partition at `location` where it lives: its
    /// directory, only inside the shuffle master's writable grants and
    /// without following symlinks (`crate::grant`); its objects on object
    /// storage, only inside its writable store grants. A failure is
    /// logged, not fatal: a partition left behind only costs space.
    pub(super) fn delete_partition(&self, location: &std::path::Path) {
        let grants = self.shuffle.grants();
        let deleted = if crate::shuffle::is_object_location(location) {
            grants
                .writable_object(location)
                .map_err(|e| e.to_string())
                .and_then(|url| {
                    crate::shuffle::delete_object_partition(&url).map_err(|e| e.to_string())
                })
        } else {
            grants.remove_dir_all(location).map_err(|e| e.to_string())
        };
        if let Err(e) = deleted {
            tracing::warn!(plugin = %self.shuffle_plugin, "not deleted: {e}");
        }
    }

    /// The shuffle descriptor of a partition recorded in the log.
    pub(super) fn descriptor(
        &self,
        v: usize,
        s: u32,
        attempt: u32,
        p: &ProducedPartition,
    ) -> ShuffleDescriptor {
        ShuffleDescriptor {
            id: ResultPartitionId {
                intermediate_data_set: self.core.sched.graph.job.data_set_id(p.edge),
                producer: ExecutionAttemptId {
                    job_vertex: self.core.sched.graph.job.vertices[v].id.clone(),
                    subtask: s,
                    attempt,
                },
            },
            location: p.location.to_string_lossy().into_owned(),
            num_subpartitions: self.core.sched.graph.job.num_subpartitions(p.edge),
        }
    }

    /// The refusal, in one line, of a source vertex `v`'s enumerator
    /// snapshot over [`MAX_SNAPSHOT_LEN`](crate::events::format::MAX_SNAPSHOT_LEN)
    /// (a test lowers it with the fail point `snapshot::max-bytes` of
    /// `crate::failpoints`, to test the refusal without a 1 GiB snapshot);
    /// `None` if it fits.
    fn oversized_snapshot(&self, v: usize, snapshot: &CoordinatorSnapshot) -> Option<String> {
        let len = snapshot.enumerator.len() as u64;
        let max = crate::events::format::MAX_SNAPSHOT_LEN;
        #[cfg(feature = "failpoints")]
        let max = crate::failpoints::max_snapshot_bytes().map_or(max, |m| m.min(max));
        (len > max).then(|| {
            let vertex = &self.core.sched.graph.job.vertices[v];
            format!(
                "plugin `{}`: the batch snapshot of job vertex `{}` is {len} bytes, over the limit of {max} bytes; it is not recorded (the job goes on; a recovery restores the previous batch snapshot)",
                vertex.source.as_deref().unwrap_or("?"),
                vertex.id
            )
        })
    }

    /// The error of a refused `ExecutionFinished`: when the record is over
    /// the event log's limit (`MAX_PAYLOAD_LEN`) only because of the
    /// shuffle master's batch snapshot in it (it would fit without it), a
    /// failure of the shuffle plugin, naming it and both sizes, as a
    /// contract breach of its `snapshot-state` (an inline shuffle snapshot
    /// must fit one record, docs/log-format.md); any other error as it is.
    fn name_oversized_shuffle_snapshot(
        &self,
        shuffle_bytes: Option<usize>,
        e: super::RecordingError,
    ) -> JobError {
        let (
            super::RecordingError::Log(crate::events::EventsError::RecordTooLarge {
                len, max, ..
            }),
            Some(shuffle_bytes),
        ) = (&e, shuffle_bytes)
        else {
            return e.into();
        };
        if len.saturating_sub(shuffle_bytes) > *max as usize {
            return e.into();
        }
        JobError::Plugin {
            plugin: self.shuffle_plugin.clone(),
            source: crate::plugin::PluginError::Protocol {
                plugin: self.shuffle_plugin.clone(),
                call: "snapshot-state",
                reason: format!(
                    "its batch snapshot is {shuffle_bytes} bytes; the `ExecutionFinished` record that carries it would be {len} bytes, over the event log's limit of {max} bytes per record, so it cannot be recorded"
                ),
            },
        }
    }

    /// Takes the batch snapshot the policy began (FLIP-383 "recording"):
    /// the enumerators of the `touched` source vertices and the shuffle
    /// master; none when `touched` is `None` (no snapshot is due).
    fn take_snapshots(
        &mut self,
        touched: Option<BTreeSet<usize>>,
    ) -> Result<BatchSnapshots, JobError> {
        let Some(touched) = touched else {
            return Ok(BatchSnapshots::default());
        };
        let mut taken = BatchSnapshots::default();
        for &v in &touched {
            let Some(c) = self.coordinators.get_mut(&v) else {
                continue;
            };
            if !c.snapshot_consistent() {
                // A rebuilt enumerator still holds splits a reader has: its
                // snapshot would hand them out again after a crash. The
                // previous snapshot stays the one recovery uses.
                self.core.snapshots.defer(v);
                continue;
            }
            if c.supports_batch_snapshot() {
                let Some(snapshot) = c.snapshot()? else {
                    // The enumerator faulted during the snapshot and its
                    // rebuilt store holds splits a reader has: deferred,
                    // as above.
                    self.core.snapshots.defer(v);
                    continue;
                };
                if let Some(refusal) = self.oversized_snapshot(v, &snapshot) {
                    // Recorded without this state, the batch snapshot would
                    // pair newer finishes with an older enumerator: none is
                    // taken, and the touched vertices wait for the next one.
                    if self.core.snapshots.first_refusal(v) {
                        tracing::warn!("{refusal}");
                    } else {
                        tracing::debug!("{refusal}");
                    }
                    self.core.snapshots.abandon(touched);
                    return Ok(BatchSnapshots::default());
                }
                taken
                    .coordinators
                    .push((self.core.sched.graph.job.vertices[v].id.clone(), snapshot));
            }
        }
        taken.shuffle =
            Some(
                self.shuffle
                    .snapshot_state(&self.job)
                    .map_err(|source| JobError::Plugin {
                        plugin: self.shuffle_plugin.clone(),
                        source,
                    })?,
            );
        self.core.snapshots.taken(self.clock.now());
        Ok(taken)
    }

    /// Runs the loop until every vertex finished (then publishes `_SUCCESS`)
    /// or the job fails; running tasks are canceled before this returns. The
    /// summary's `status` and `error` say how it ended (a [`JobError`] in words).
    pub fn run(mut self, events: &mut dyn JobEventSink) -> Summary {
        let started = Instant::now();
        if let Some(stop) = &self.stop {
            stop.set_accepting(true);
        }
        // What an earlier run on this data directory staged for object
        // storage and never uploaded (killed mid-write) is nobody's: this
        // run holds the job's lock, and its producers stage afresh.
        if !self.executor.is_remote() {
            let _absent =
                std::fs::remove_dir_all(self.opts.data_dir.join(&self.job).join("shuffle-staging"));
        }
        let result = self.drive(events);
        if let Some(stop) = &self.stop {
            stop.set_accepting(false);
        }
        self.cancel.store(true, Ordering::Relaxed);
        if let Some(cluster) = &self.cluster {
            cluster.cancel_all();
        }
        self.waiting.clear();
        // Let running tasks see the cancel flag or a dropped reply, then stop.
        let mut held = self.held.take();
        while self.running > 0 || held.is_some() {
            let next = match held.take() {
                Some(msg) => Ok(msg),
                None => self.rx.recv(),
            };
            match next {
                Ok(Message::SplitRequest { reply, .. }) => {
                    let _ignored = reply.send(Err("the job is ending".into()));
                }
                Ok(Message::WorkerLost { .. }) => {}
                // Finished, Failed, DeployFailed: one per deployed attempt.
                Ok(_) => self.running -= 1,
                Err(_) => break,
            }
        }
        let cancelled = matches!(result, Err(JobError::Cancelled { .. }));
        if (result.is_ok() || cancelled)
            && let Some(cluster) = &self.cluster
        {
            // The job is over and every attempt has stopped: each
            // partition and staged output on the workers is nobody's now.
            cluster.release_job(&self.job);
        }
        // A simulated crash leaves everything as a dead process would.
        #[cfg(feature = "failpoints")]
        let crashed = matches!(result, Err(JobError::SimulatedCrash { .. }));
        #[cfg(not(feature = "failpoints"))]
        let crashed = false;
        // A stopped run keeps its partitions for the next run, as a crash.
        let stopped = matches!(result, Err(JobError::Stopped { .. }));
        if !crashed && !stopped {
            let _ignored = self.shuffle.unregister_job(&self.job);
        }
        let mut summary = self.summary(started);
        if let Err(e) = result {
            summary.status = match e {
                JobError::Stopped { .. } => JobStatus::Stopped,
                JobError::Cancelled { .. } => JobStatus::Cancelled,
                _ => JobStatus::Failed,
            };
            summary.bad_input = e.is_invalid_plugin_config();
            summary.coordinator_failed = crashed
                || matches!(
                    e,
                    JobError::LostLeadership { .. }
                        | JobError::Stopped { .. }
                        | JobError::Log { .. }
                        | JobError::Recording { .. }
                        | JobError::Io { .. }
                        | JobError::Internal { .. }
                );
            // Bounded: plugin errors are already cut, but a job error may
            // quote other plugin answers (issue 9, item 11).
            summary.error = Some(crate::plugin::one_line(
                &e.to_string(),
                4 * crate::plugin::MAX_MESSAGE_BYTES,
            ));
            // The summary carries the error; `coordhost run` prints it
            // once, as its `coordhost:` line.
            tracing::debug!(job = %self.job, "job failed: {e}");
            // Only the folders where output was published: a failed run
            // lists no empty or half-written folder as its output.
            summary.outputs = self
                .core
                .sched
                .graph
                .job
                .vertices
                .iter()
                .filter_map(|v| v.sink.as_ref())
                .filter(|s| holds_published_output(s))
                .map(sink::output_name)
                .collect();
        }
        summary
    }

    /// The error that ends the run when a signal or `coordhost cancel`
    /// asked it to stop (`RunOptions::stop`).
    fn check_stop(&self) -> Result<(), JobError> {
        match self.stop.as_ref().and_then(|s| s.requested()) {
            None => Ok(()),
            Some(crate::scheduler::StopReason::Signal(signal)) => Err(JobError::Stopped { signal }),
            Some(reason @ crate::scheduler::StopReason::Cancel) => Err(JobError::Cancelled {
                job: self.job.clone(),
                by: reason.describe(),
            }),
        }
    }

    fn drive(&mut self, events: &mut dyn JobEventSink) -> Result<(), JobError> {
        // A cancel request that waited for this run is acted on before
        // anything is deployed.
        self.check_stop()?;
        let t = Instant::now();
        self.schedule(events)?;
        self.figures.busy += t.elapsed();
        while !self.core.sched.is_finished() {
            // Looked at before each wait, so a message received is always
            // handled (a dropped `Finished` would leave its attempt counted
            // as running).
            self.check_stop()?;
            let closed = || JobError::Internal {
                reason: "the task channel closed".into(),
            };
            // While execution vertices wait for a worker, look again every
            // tick: workers register without a message to this loop; so
            // does a stop request.
            let msg = if let Some(msg) = self.held.take() {
                Some(msg)
            } else if !self.core.placement.is_waiting() && self.stop.is_none() {
                Some(self.rx.recv().map_err(|_| closed())?)
            } else {
                match self.rx.recv_timeout(PLACEMENT_TICK) {
                    Ok(msg) => Some(msg),
                    Err(RecvTimeoutError::Timeout) => None,
                    Err(RecvTimeoutError::Disconnected) => return Err(closed()),
                }
            };
            let t = Instant::now();
            match msg {
                Some(msg) => {
                    self.handle(msg, events)?;
                    if let Some(failure) = self.core.overdue(self.clock.now()) {
                        return Err(self.job_failure(failure, None));
                    }
                }
                // Time passed: what waits for a worker is offered again
                // (`JobMasterCore::tick`), then has it waited too long?
                None => {
                    let actions = self.core.tick(self.room());
                    self.carry_out(actions, None, events)?;
                    if let Some(failure) = self.core.overdue(self.clock.now()) {
                        return Err(self.job_failure(failure, None));
                    }
                }
            }
            self.figures.busy += t.elapsed();
        }
        self.release_superseded();
        for c in self.coordinators.values_mut() {
            c.check_all_read()?;
            c.check_none_left()?;
        }
        events.job_finished()?;
        for v in &self.core.sched.graph.job.vertices {
            if let Some(s) = &v.sink {
                sink::write_success(s).map_err(|source| JobError::Commit {
                    vertex: v.id.clone(),
                    source: Box::new(source),
                })?;
            }
        }
        Ok(())
    }

    fn handle(&mut self, msg: Message, events: &mut dyn JobEventSink) -> Result<(), JobError> {
        match msg {
            Message::SplitRequest { attempt, reply } => self.on_split_request(attempt, reply),
            Message::Finished { attempt, report } => {
                self.running -= 1;
                self.on_finishes(attempt, report, events)?;
                self.schedule(events)
            }
            Message::Failed { attempt, error } => {
                self.running -= 1;
                self.on_failed(attempt, error, events)?;
                self.schedule(events)
            }
            Message::WorkerLost { worker, held } => {
                self.on_worker_lost(&worker, &held, events)?;
                self.schedule(events)
            }
            Message::DeployFailed {
                attempt,
                worker,
                message,
            } => {
                self.running -= 1;
                self.on_deploy_failed(attempt, worker, &message, events)?;
                self.schedule(events)
            }
        }
    }

    fn is_current(&self, a: AttemptId) -> bool {
        self.core.sched.is_current(a)
    }

    fn on_split_request(
        &mut self,
        attempt: AttemptId,
        reply: Sender<Result<Option<SplitData>, String>>,
    ) -> Result<(), JobError> {
        if !self.is_current(attempt) {
            let _ignored = reply.send(Err("the attempt is no longer current".into()));
            return Ok(());
        }
        let Some(c) = self.coordinators.get_mut(&attempt.vertex) else {
            let _ignored = reply.send(Err("not a source".into()));
            return Ok(());
        };
        self.core.snapshots.touch(attempt.vertex);
        match c.request_split(attempt.subtask)? {
            Some(a) => {
                let handed = matches!(a, SplitAnswer::Split(_));
                if let SplitAnswer::Split(s) = &a {
                    self.figures
                        .split_counts
                        .entry(attempt.vertex)
                        .or_default()
                        .0 += 1;
                    self.figures
                        .input_figures
                        .entry(attempt.vertex)
                        .or_default()
                        .bytes_assigned += crate::coordinator::split_input_bytes(s);
                }
                let _ignored = reply.send(Ok(answer(a)));
                if handed {
                    self.tell_input_progress(attempt.vertex);
                }
            }
            None => {
                self.waiting.insert(attempt, reply);
            }
        }
        self.answer_waiting(attempt.vertex);
        Ok(())
    }

    /// Tells the progress listener what source vertex `v` handed out so
    /// far, asking its enumerator how many splits it still holds at most
    /// every [`INPUT_LEFT_EVERY`] (a plugin call; a failed answer shows as
    /// unknown here and surfaces on the enumerator's next real call).
    fn tell_input_progress(&mut self, v: usize) {
        let Some(progress) = self.opts.progress.clone() else {
            return;
        };
        let now = std::time::Instant::now();
        let splits = self.figures.split_counts.get(&v).map_or(0, |c| c.0);
        let asked = self.figures.input_left.get(&v).copied();
        let left = match asked {
            // Between two questions, each split handed out is one fewer.
            Some((at, left, then)) if now.duration_since(at) < INPUT_LEFT_EVERY => {
                left.map(|l| l.saturating_sub(splits.saturating_sub(then)))
            }
            _ => {
                let left = self
                    .coordinators
                    .get_mut(&v)
                    .and_then(|c| c.unassigned_splits().ok());
                self.figures.input_left.insert(v, (now, left, splits));
                left
            }
        };
        progress.input_progress(
            &self.core.sched.graph.job.vertices[v].id,
            crate::scheduler::InputProgress {
                splits,
                bytes: self
                    .figures
                    .input_figures
                    .get(&v)
                    .map_or(0, |f| f.bytes_assigned),
                splits_left: left,
            },
        );
    }

    /// Answers waiting readers of vertex `v` that got splits meanwhile.
    fn answer_waiting(&mut self, v: usize) {
        let Some(c) = self.coordinators.get_mut(&v) else {
            return;
        };
        let mut handed = false;
        for (subtask, a) in c.take_ready() {
            let id = self.core.sched.graph.attempt_id(v, subtask);
            if let Some(reply) = self.waiting.remove(&id) {
                if let SplitAnswer::Split(s) = &a {
                    self.figures.split_counts.entry(v).or_default().0 += 1;
                    self.figures
                        .input_figures
                        .entry(v)
                        .or_default()
                        .bytes_assigned += crate::coordinator::split_input_bytes(s);
                    handed = true;
                }
                let _ignored = reply.send(Ok(answer(a)));
            }
        }
        if handed {
            self.tell_input_progress(v);
        }
    }

    /// Records `attempt`'s finish and every other finish already waiting in
    /// the channel as one group (issue 29, group commit): each
    /// `ExecutionFinished` appended as it is handled, then all made durable
    /// together (one write, one fsync) before any is acted on; their
    /// progress lines follow. A group ends at the first other message (kept
    /// for the loop) or at a finish that completes its job vertex, so a
    /// vertex's completion is acted on (its consumers scheduled, their
    /// `JobVertexInitialized` recorded) at the same point of the log as
    /// one finish at a time would. With one task slot no two finishes are
    /// ever waiting together, and the log is the same record for record.
    fn on_finishes(
        &mut self,
        attempt: AttemptId,
        report: TaskReport,
        events: &mut dyn JobEventSink,
    ) -> Result<(), JobError> {
        events.begin_finishes();
        let mut next = Some((attempt, report));
        let mut handled = Ok(());
        while let Some((attempt, report)) = next.take() {
            match self.on_finished(attempt, report, events) {
                Ok(false) => {}
                Ok(true) => break,
                Err(e) => {
                    handled = Err(e);
                    break;
                }
            }
            match self.rx.try_recv() {
                Ok(Message::Finished { attempt, report }) => {
                    self.running -= 1;
                    next = Some((attempt, report));
                }
                Ok(other) => self.held = Some(other),
                Err(_) => {}
            }
        }
        let durable = events.end_finishes();
        let lines = std::mem::take(&mut self.finished_lines);
        handled?;
        durable?;
        for (v, done, total) in lines {
            if let Some(p) = &self.opts.progress {
                p.task_finished(&self.core.sched.graph.job.vertices[v].id, done, total);
            }
        }
        Ok(())
    }

    /// Records one finish (appended; durable with its group, see
    /// [`JobMaster::on_finishes`]). Returns whether it completed its job vertex.
    fn on_finished(
        &mut self,
        attempt: AttemptId,
        report: TaskReport,
        events: &mut dyn JobEventSink,
    ) -> Result<bool, JobError> {
        if !self.is_current(attempt) {
            return Ok(false);
        }
        let v = attempt.vertex;
        // A source attempt finished only if it read every split it was
        // handed, through the end of its splits: a report that says
        // otherwise (a worker's word) fails the attempt, and its splits go
        // back to the enumerator instead of being lost.
        if let Some(c) = self.coordinators.get(&v)
            && let Err(reason) = c.check_finished(attempt.subtask, report.splits)
        {
            return self
                .on_failed(attempt, TaskError::SplitRequest { reason }, events)
                .map(|()| false);
        }
        let vertex = self.core.sched.graph.job.vertices[v].clone();
        let partitions = self.produced_partitions(v, attempt.subtask, &report);
        if let Some(spec) = &vertex.sink
            && !self.publish_output(attempt, spec, &vertex.id, events)?
        {
            return Ok(false);
        }
        let fig = &mut self.figures.per_subtask[v][attempt.subtask as usize];
        *fig = Figures {
            records_in: report.records_in,
            records_out: report.records_out,
            bytes_out: partitions
                .iter()
                .map(|p| p.bytes_per_subpartition.total())
                .sum(),
        };
        // The core decides whether this finish carries a batch snapshot
        // (`SnapshotPolicy::begin_for_finish` says why); it holds the finish
        // once it is recorded, and acts on it once its group is durable.
        let actions = self.core.step(
            self.clock.now(),
            Input::Finished {
                attempt,
                partitions,
            },
        );
        let Ok(
            [
                Action::RecordFinished {
                    attempt,
                    partitions,
                    snapshot_of,
                    done: (done, total),
                },
            ],
        ) = <[Action; 1]>::try_from(actions)
        else {
            return Err(JobError::Internal {
                reason: format!("the finish of a current attempt {attempt:?} was not recorded"),
            });
        };
        let snapshots = self.take_snapshots(snapshot_of)?;
        if !snapshots.is_empty() {
            self.crash_point("snapshot-taken", events)?;
        }
        let shuffle_bytes = snapshots.shuffle.as_ref().map(|s| s.data.len());
        events
            .execution_finished(&vertex.id, attempt, &partitions, snapshots)
            .map_err(|e| self.name_oversized_shuffle_snapshot(shuffle_bytes, e))?;
        self.crash_point("execution-finished", events)?;
        #[cfg(feature = "failpoints")]
        crash_if(
            &format!("crash::finished::{}", vertex.id),
            || format!("after a finished execution of `{}`", vertex.id),
            events,
        )?;
        // Recorded: the graph holds the finish from now on.
        self.core.step(
            self.clock.now(),
            Input::FinishRecorded {
                attempt,
                partitions,
            },
        );
        tracing::debug!(vertex = %vertex.id, subtask = attempt.subtask, attempt = attempt.attempt, "finished");
        self.finished_lines.push((v, done, total));
        Ok(done == total)
    }

    /// The result partitions a finished attempt of subtask `s` of vertex `v`
    /// reports, at the locations its shuffle descriptors gave them.
    fn produced_partitions(&self, v: usize, s: u32, report: &TaskReport) -> Vec<ProducedPartition> {
        let descriptors = self
            .descriptors
            .get(&(v, s))
            .map(Vec::as_slice)
            .unwrap_or_default();
        let outputs = self.core.sched.graph.job.outputs(v);
        report
            .partitions
            .iter()
            .map(|(edge, bytes)| {
                let slot = outputs.iter().position(|e| e == edge).unwrap_or(0);
                let location = descriptors
                    .get(slot)
                    .map(|d| PathBuf::from(&d.location))
                    .unwrap_or_default();
                ProducedPartition {
                    edge: *edge,
                    location,
                    bytes_per_subpartition: bytes.clone(),
                }
            })
            .collect()
    }

    /// Publishes the sink output of finished `attempt` of vertex `vertex_id`
    /// and records it: on worker processes the coordinator first fetches
    /// what the worker staged (a worker never publishes: docs/workers.md);
    /// a deposed leader never publishes (docs/ha.md, "Fencing"). `Ok(false)`
    /// when the staged output could not be fetched: the attempt failed and
    /// runs again.
    ///
    /// # Errors
    /// The lost leadership, the publication's and the recorder's errors.
    fn publish_output(
        &mut self,
        attempt: AttemptId,
        spec: &crate::graph::SinkSpec,
        vertex_id: &str,
        events: &mut dyn JobEventSink,
    ) -> Result<bool, JobError> {
        if let Some(cluster) = &self.cluster {
            let staging = sink::staging_path(spec, attempt.subtask, attempt.attempt);
            if let Err(message) = cluster.fetch_sink(&self.job, vertex_id, attempt, &staging) {
                // Its worker died after reporting, say.
                let error = TaskError::Worker {
                    worker: "(the one that ran it)".into(),
                    message: format!("fetching the staged output: {message}"),
                };
                return self.on_failed(attempt, error, events).map(|()| false);
            }
        }
        if let Some(fence) = &self.fence {
            fence.verify().map_err(|e| JobError::LostLeadership {
                reason: e.to_string(),
            })?;
        }
        sink::publish(spec, attempt.subtask, attempt.attempt).map_err(|source| {
            JobError::Commit {
                vertex: vertex_id.to_owned(),
                source: Box::new(source),
            }
        })?;
        let part = sink::part_path(spec, attempt.subtask);
        let file = part
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        events.sink_committed(attempt, &file)?;
        self.crash_point("sink-published", events)?;
        Ok(true)
    }

    fn summary(&self, started: Instant) -> Summary {
        let vertices = self.figures.vertex_summaries(self.core.graph());
        // Every execution vertex once, by the state it ended in.
        let (mut finished, mut failed, mut stopped, mut not_run) = (0, 0, 0, 0);
        for e in self
            .core
            .sched
            .graph
            .vertices
            .iter()
            .flat_map(|v| &v.executions)
        {
            match e.state {
                ExecutionState::Finished => finished += 1,
                ExecutionState::Failed => failed += 1,
                ExecutionState::Created => not_run += 1,
                ExecutionState::Scheduled
                | ExecutionState::Deploying
                | ExecutionState::Running
                | ExecutionState::Canceled => stopped += 1,
            }
        }
        Summary {
            job: self.job.clone(),
            status: JobStatus::Finished,
            tasks_finished: finished,
            tasks_failed: failed,
            tasks_stopped: stopped,
            tasks_not_run: not_run,
            recovered: self.figures.recovered,
            tasks_total: self.core.sched.graph.execution_count() as u64,
            tasks_run: self.figures.tasks_run,
            tasks_skipped: self.figures.tasks_skipped,
            reset_reasons: self.figures.reset_reasons.clone(),
            tasks_reset: self.figures.tasks_reset,
            wall_ms: started.elapsed().as_millis() as u64,
            workers: self.executor.slots(),
            coordinator_busy_us: self.figures.busy.as_micros() as u64,
            vertices,
            outputs: self
                .core
                .sched
                .graph
                .job
                .vertices
                .iter()
                .filter_map(|v| v.sink.as_ref().map(sink::output_name))
                .collect(),
            error: None,
            bad_input: false,
            coordinator_failed: false,
            default_shuffle: false,
        }
    }
}

/// How often the loop looks for a worker while execution vertices wait
/// for one.
const PLACEMENT_TICK: Duration = Duration::from_millis(50);

/// How often, at most, a source's enumerator is asked how many splits it
/// still holds for the progress display (`unassigned-splits`).
const INPUT_LEFT_EVERY: Duration = Duration::from_millis(500);

/// The job's scalar functions and source readers as a worker process is
/// told of them (name or table, settings, component hash); empty in
/// embedded mode.
fn remote_components(
    config: &JobConfig,
    opts: &RunOptions,
) -> (
    Vec<crate::remote::RemoteFunction>,
    Vec<crate::remote::RemoteReader>,
) {
    let Some(sql) = config.sql.as_ref().filter(|_| opts.external.is_some()) else {
        return (Vec::new(), Vec::new());
    };
    let functions = sql
        .functions
        .iter()
        .zip(&sql.function_specs)
        .map(|(f, spec)| crate::remote::RemoteFunction::new(f, spec))
        .collect();
    let readers = sql
        .tables
        .iter()
        .filter_map(|t| match &t.format {
            crate::sql::TableFormat::Reader { plugin, .. } => config
                .plugins
                .get(plugin)
                .and_then(|spec| crate::remote::RemoteReader::new(t, spec)),
            _ => None,
        })
        .collect();
    (functions, readers)
}

/// Connects the run to its worker cluster: the cluster's events become the
/// loop's messages, each source vertex's split wait is set, and the
/// components of the job's scalar functions and source readers are served
/// to the workers by hash (docs/workers.md).
fn connect_cluster(
    cluster: &Arc<Cluster>,
    config: &JobConfig,
    graph: &ExecutionGraph,
    tx: &Sender<Message>,
    (functions, readers): (
        &[crate::remote::RemoteFunction],
        &[crate::remote::RemoteReader],
    ),
) {
    let events = tx.clone();
    cluster.set_events(move |e| {
        let msg = match e {
            ClusterEvent::SplitRequest { attempt, reply } => {
                Message::SplitRequest { attempt, reply }
            }
            ClusterEvent::Finished { attempt, report } => Message::Finished { attempt, report },
            ClusterEvent::Failed { attempt, error } => Message::Failed { attempt, error },
            ClusterEvent::WorkerLost { worker, held } => Message::WorkerLost { worker, held },
            ClusterEvent::DeployFailed {
                attempt,
                worker,
                message,
            } => Message::DeployFailed {
                attempt,
                worker,
                message,
            },
        };
        let _ignored = events.send(msg);
    });
    for (v, jv) in graph.job.vertices.iter().enumerate() {
        if let Some(plugin) = &jv.source {
            let wait = config
                .plugins
                .get(plugin)
                .map(|p| p.limits.split_wait)
                .unwrap_or(crate::plugin::DEFAULT_SPLIT_WAIT);
            cluster.set_split_wait(v, wait, plugin, &jv.id);
        }
    }
    let functions = functions
        .iter()
        .map(|f| (format!("scalar function `{}`", f.name), &f.component));
    let readers = readers
        .iter()
        .map(|r| (format!("source reader `{}`", r.plugin), &r.component));
    cluster.serve_components(
        functions
            .chain(readers)
            .map(|(plugin, c)| crate::remote::ServedComponent {
                plugin,
                sha256: c.sha256.clone(),
                path: std::path::PathBuf::from(&c.path),
            })
            .collect(),
    );
}

/// Where this run's attempts go: the worker processes of `opts.external`
/// (connected to the loop's channel `tx`; the shuffle master learns what
/// they report holding), else `workers` threads of this process.
///
/// # Errors
/// [`JobError::Workers`] when the threads cannot be started.
fn executor(
    config: &JobConfig,
    opts: &RunOptions,
    graph: &ExecutionGraph,
    plugins: &BTreeMap<String, LoadedPlugin>,
    shuffle: &mut ShuffleMaster,
    tx: &Sender<Message>,
    workers: usize,
) -> Result<Box<dyn Executor<Task = Deployment>>, JobError> {
    let (remote_functions, remote_readers) = remote_components(config, opts);
    Ok(match &opts.external {
        Some(cluster) => {
            connect_cluster(
                cluster,
                config,
                graph,
                tx,
                (&remote_functions, &remote_readers),
            );
            // FLIP-383's job shuffle context: the shuffle master (WIT
            // 0.1.1) learns what the workers report holding.
            shuffle.set_job_shuffle_context(cluster.job_shuffle_context(&config.name, &graph.job));
            Box::new(executors::Workers {
                cluster: cluster.clone(),
                tasks: executors::RemoteTasks {
                    job: config.name.clone(),
                    shuffle_grants: shuffle.grants().clone(),
                    sources: plugins
                        .iter()
                        .map(|(name, p)| (name.clone(), crate::remote::RemoteSource::new(p.spec())))
                        .collect(),
                    functions: remote_functions,
                    readers: remote_readers,
                },
            })
        }
        None => Box::new(executors::Embedded {
            pool: WorkerPool::new(workers).map_err(|source| JobError::Workers { source })?,
            tx: tx.clone(),
        }),
    })
}

/// Whether a sink holds published output (`_SUCCESS` or a `part-*` file
/// or object).
fn holds_published_output(spec: &crate::graph::SinkSpec) -> bool {
    sink::published_names(spec).is_ok_and(|names| !names.is_empty())
}

fn answer(a: SplitAnswer) -> Option<SplitData> {
    match a {
        SplitAnswer::Split(s) => Some(s),
        SplitAnswer::NoMoreSplits => None,
    }
}

/// The summary's name of a reset reason ([`ResetReason::short_name`]).
fn reason_kind(reason: &ResetReason) -> &'static str {
    reason.short_name()
}

/// Fires the crash fail point `name` of [`crate::failpoints`]: makes what
/// was recorded durable and stops the run as a crash `where_` would.
///
/// # Errors
///
/// `JobError::SimulatedCrash` when the fail point fires;
/// [`JobError::Recording`] if the events cannot be made durable.
#[cfg(feature = "failpoints")]
fn crash_if(
    name: &str,
    where_: impl FnOnce() -> String,
    events: &mut dyn JobEventSink,
) -> Result<(), JobError> {
    if crate::failpoints::crash(name) {
        events.job_finished()?;
        return Err(JobError::SimulatedCrash { point: where_() });
    }
    Ok(())
}

/// The source reader of each table of `config`'s SQL read by one
/// (`format = { reader = "PLUGIN" }`), bound to the table's declared schema.
fn table_readers(
    config: &JobConfig,
    plugins: &BTreeMap<String, LoadedPlugin>,
) -> Result<crate::runtime::TableReaders, JobError> {
    let mut readers = BTreeMap::new();
    for t in config.sql.iter().flat_map(|sql| &sql.tables) {
        let crate::sql::TableFormat::Reader { plugin, .. } = &t.format else {
            continue;
        };
        let loaded = plugins.get(plugin).ok_or_else(|| JobError::Internal {
            reason: format!(
                "source-reader plugin `{plugin}` of table `{}` not loaded",
                t.name
            ),
        })?;
        let failed = |source| JobError::Plugin {
            plugin: plugin.clone(),
            source,
        };
        let reader = loaded.source_reader(&t.name, t.schema()).map_err(failed)?;
        // A configuration the reader refuses is bad input of the job file,
        // found before any task runs.
        reader.warm_up().map_err(|source| match source {
            crate::plugin::PluginError::Returned {
                error: crate::plugin::PluginFailure::InvalidConfig(_),
                ..
            } => JobError::PluginLoad {
                file: config.file.clone(),
                plugin: plugin.clone(),
                field: "config",
                source: Box::new(source),
            },
            other => failed(other),
        })?;
        readers.insert(t.name.clone(), reader);
    }
    Ok(std::sync::Arc::new(readers))
}
