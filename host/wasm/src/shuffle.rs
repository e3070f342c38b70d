//! The typed wrapper of a shuffle-master plugin instance (Flink's
//! `ShuffleMaster` with FLIP-383's batch snapshot and partition report).

use std::path::Path;
use std::sync::Arc;

use wasmtime::Store;
use wasmtime::component::ResourceAny;

use super::bindings::shuffle::ShuffleMasterPlugin;
use super::bindings::shuffle::exports::coordhost::plugin::shuffle_master::GuestShuffleMaster;
use super::instance::{self, Fault};
use super::store::PluginState;
use super::{
    KindPre, LoadedPlugin, PartitionDescriptor, PartitionWithMetrics, PluginError, PluginFailure,
    PluginKind, ProducerDescriptor, ReportedPartition, ResultPartitionId, ShuffleDescriptor,
    ShuffleMasterSnapshot, TrapPolicy,
};
use coordhost_io::grant::{Grants, PluginDir};

/// The host side of `job-shuffle-context` (WIT 0.1.1): where a job's
/// partitions are held. Flink's `JobShuffleContext`, through which
/// FLIP-383's shuffle master asks the TaskExecutors which partitions they
/// still hold. The host implements it over its worker registry
/// (`coordhost::remote::Cluster`); a shuffle master without a context is told
/// `none` (embedded workers).
pub trait JobShuffleContext: Send + Sync {
    /// The partitions of `job_id` that worker processes report holding now;
    /// `None` when the job runs on embedded workers.
    fn reported_partitions(&self, job_id: &str) -> Option<Vec<ReportedPartition>>;
}

/// Where a partition the shuffle master placed lives, checked against its
/// grants ([`ShuffleMaster::partition_place`]).
#[derive(Debug, Clone)]
pub enum PartitionPlace {
    /// A directory inside one of its writable grants.
    Dir(PluginDir),
    /// A prefix of object storage inside one of its writable store grants.
    Object(coordhost_io::objstore::ObjectUrl),
}

/// One live shuffle master. Every method is one call into the plugin under
/// its deadline and memory cap.
pub struct ShuffleMaster {
    plugin: LoadedPlugin,
    live: Option<Live>,
    /// Snapshots taken through this wrapper since the last full one: what a
    /// rebuild after a trap restores (FLIP-383: full replaces, incremental
    /// appends).
    snapshots: Vec<ShuffleMasterSnapshot>,
    /// Jobs registered, registered again after a rebuild.
    jobs: Vec<String>,
    poisoned: Option<String>,
    /// The plugin's granted directories: every location it returns is
    /// checked against them (`coordhost_io::grant`).
    grants: Grants,
    /// What `job-shuffle-context` answers; kept across rebuilds.
    context: Option<Arc<dyn JobShuffleContext>>,
}

struct Live {
    store: Store<PluginState>,
    world: ShuffleMasterPlugin,
    handle: ResourceAny,
}

impl ShuffleMaster {
    pub(crate) fn create(plugin: LoadedPlugin) -> Result<Self, PluginError> {
        instance::expect_kind(&plugin, PluginKind::ShuffleMaster)?;
        tracing::debug!(target: crate::LOG_TARGET, plugin = plugin.name(), call = "create", "host -> plugin");
        let live = instantiate(&plugin, None)?;
        let grants =
            Grants::new(plugin.name(), &plugin.spec().dirs).with_stores(&plugin.spec().stores);
        Ok(Self {
            plugin,
            live: Some(live),
            snapshots: Vec::new(),
            jobs: Vec::new(),
            poisoned: None,
            grants,
            context: None,
        })
    }

    /// Sets what `job-shuffle-context.reported-partitions` answers from now
    /// on (this instance and any rebuilt after a trap): the worker registry
    /// when the job runs on worker processes.
    pub fn set_job_shuffle_context(&mut self, context: Arc<dyn JobShuffleContext>) {
        if let Some(live) = self.live.as_mut() {
            live.store.data_mut().job_shuffle_context = Some(context.clone());
        }
        self.context = Some(context);
    }

    /// Whether the plugin imports `job-shuffle-context` (WIT 0.1.1), i.e.
    /// answers the partition query from the workers' reports itself.
    pub fn reads_worker_reports(&self) -> bool {
        self.plugin.reads_worker_reports()
    }

    /// The plugin's name in the job file.
    pub fn name(&self) -> &str {
        self.plugin.name()
    }

    /// Whether the plugin supports batch snapshots (asked once at load).
    /// Without it the host disables progress recovery (FLIP-383).
    pub fn supports_batch_snapshot(&self) -> bool {
        self.plugin.supports_batch_snapshot()
    }

    /// `register-job`.
    ///
    /// # Errors
    /// The plugin's error value, a fault ([`PluginError::Trap`],
    /// [`PluginError::Deadline`], [`PluginError::MemoryCap`]), or
    /// [`PluginError::Poisoned`] after an earlier fault.
    pub fn register_job(&mut self, job_id: &str) -> Result<(), PluginError> {
        self.call("register-job", |g, store, h| {
            g.call_register_job(store, h, job_id)
        })?;
        if !self.jobs.iter().any(|j| j == job_id) {
            self.jobs.push(job_id.to_string());
        }
        Ok(())
    }

    /// The plugin's granted directories, against which the host checks
    /// every location before it creates, writes, reads or deletes there.
    pub fn grants(&self) -> &Grants {
        &self.grants
    }

    /// `register-partition-with-producer`: where the partition will live.
    /// The answer is checked against the contract: the descriptor is for
    /// the partition asked about, with its number of subpartitions, at a
    /// location inside one of the plugin's writable grants.
    ///
    /// # Errors
    /// As [`ShuffleMaster::register_job`]; [`PluginError::Protocol`] when
    /// the answer breaks the contract.
    pub fn register_partition_with_producer(
        &mut self,
        job_id: &str,
        partition: &PartitionDescriptor,
        producer: &ProducerDescriptor,
    ) -> Result<ShuffleDescriptor, PluginError> {
        const CALL: &str = "register-partition-with-producer";
        let d = self.call(CALL, |g, store, h| {
            g.call_register_partition_with_producer(store, h, job_id, partition, producer)
        })?;
        let broke = |reason: String| PluginError::Protocol {
            plugin: self.plugin.name().to_string(),
            call: CALL,
            reason,
        };
        if d.id != partition.id {
            return Err(broke(format!(
                "returned a shuffle descriptor for partition {}, but was asked for {}",
                partition_name(&d.id),
                partition_name(&partition.id)
            )));
        }
        if d.num_subpartitions != partition.num_subpartitions {
            return Err(broke(format!(
                "returned a shuffle descriptor of {} subpartitions for partition {}, which has {}",
                d.num_subpartitions,
                partition_name(&partition.id),
                partition.num_subpartitions
            )));
        }
        self.partition_place(CALL, &d.location)?;
        Ok(d)
    }

    /// Where a partition at `location` (as a descriptor names it) lives:
    /// a directory inside one of the plugin's writable grants, or (an
    /// `s3://` location, `object-shuffle`) a prefix of object storage
    /// inside one of its writable store grants.
    ///
    /// # Errors
    /// [`PluginError::Protocol`] naming `call` when it lies inside neither.
    pub fn partition_place(
        &self,
        call: &'static str,
        location: &str,
    ) -> Result<PartitionPlace, PluginError> {
        if !coordhost_io::objstore::is_object_url(location) {
            return self.partition_dir(call, location).map(PartitionPlace::Dir);
        }
        self.grants
            .writable_object(Path::new(location))
            .map(PartitionPlace::Object)
            .map_err(|e| PluginError::Protocol {
                plugin: self.plugin.name().to_string(),
                call,
                reason: format!("returned location {}", e.detail()),
            })
    }

    /// The directory of a partition at `location` (as a descriptor names
    /// it), checked to lie inside one of the plugin's writable grants.
    ///
    /// # Errors
    /// [`PluginError::Protocol`] naming `call` when it does not.
    pub fn partition_dir(
        &self,
        call: &'static str,
        location: &str,
    ) -> Result<PluginDir, PluginError> {
        self.grants
            .writable_dir(Path::new(location))
            .map_err(|e| PluginError::Protocol {
                plugin: self.plugin.name().to_string(),
                call,
                reason: format!("returned location {}", e.detail()),
            })
    }

    /// `release-partition-externally`: the partition's data may go.
    ///
    /// # Errors
    /// As [`ShuffleMaster::register_job`].
    pub fn release_partition_externally(
        &mut self,
        descriptor: &ShuffleDescriptor,
    ) -> Result<(), PluginError> {
        self.call("release-partition-externally", |g, store, h| {
            g.call_release_partition_externally(store, h, descriptor)
        })
    }

    /// `snapshot-state`: a full or incremental batch snapshot. Also kept as
    /// what a rebuild after a trap restores.
    ///
    /// # Errors
    /// As [`ShuffleMaster::register_job`].
    pub fn snapshot_state(&mut self, job_id: &str) -> Result<ShuffleMasterSnapshot, PluginError> {
        let snapshot = self.call("snapshot-state", |g, store, h| {
            g.call_snapshot_state(store, h, job_id)
        })?;
        if !snapshot.incremental {
            self.snapshots.clear();
        }
        self.snapshots.push(snapshot.clone());
        Ok(snapshot)
    }

    /// `restore-state`: rebuild the plugin's state from snapshots taken
    /// before, oldest first, starting with a full one.
    ///
    /// # Errors
    /// As [`ShuffleMaster::register_job`]; `corrupt-snapshot` from the plugin.
    pub fn restore_state(
        &mut self,
        snapshots: Vec<ShuffleMasterSnapshot>,
    ) -> Result<(), PluginError> {
        self.call("restore-state", |g, store, h| {
            g.call_restore_state(store, h, &snapshots)
        })?;
        self.snapshots = snapshots;
        Ok(())
    }

    /// `notify-partition-recovery-started`.
    ///
    /// # Errors
    /// A fault, or [`PluginError::Poisoned`].
    pub fn notify_partition_recovery_started(&mut self, job_id: &str) -> Result<(), PluginError> {
        self.call("notify-partition-recovery-started", |g, store, h| {
            g.call_notify_partition_recovery_started(store, h, job_id)
                .map(Ok)
        })
    }

    /// `get-partitions-with-metrics`: which of `expected` exist now, with
    /// bytes per subpartition. `remaining_ms` tells the plugin how much of
    /// the host's wait is left; the plugin answers at once.
    ///
    /// # Errors
    /// As [`ShuffleMaster::register_job`].
    pub fn get_partitions_with_metrics(
        &mut self,
        job_id: &str,
        expected: &[ResultPartitionId],
        remaining_ms: u64,
    ) -> Result<Vec<PartitionWithMetrics>, PluginError> {
        self.call("get-partitions-with-metrics", |g, store, h| {
            g.call_get_partitions_with_metrics(store, h, job_id, expected, remaining_ms)
        })
    }

    /// `unregister-job`.
    ///
    /// # Errors
    /// A fault, or [`PluginError::Poisoned`].
    pub fn unregister_job(&mut self, job_id: &str) -> Result<(), PluginError> {
        self.call("unregister-job", |g, store, h| {
            g.call_unregister_job(store, h, job_id).map(Ok)
        })?;
        self.jobs.retain(|j| j != job_id);
        Ok(())
    }

    fn call<R>(
        &mut self,
        call: &'static str,
        f: impl FnOnce(
            GuestShuffleMaster<'_>,
            &mut Store<PluginState>,
            ResourceAny,
        ) -> wasmtime::Result<Result<R, PluginFailure>>,
    ) -> Result<R, PluginError> {
        let Some(live) = self.live.as_mut() else {
            let cause = self.poisoned.clone().unwrap_or_default();
            return Err(PluginError::Poisoned {
                plugin: self.plugin.name().to_string(),
                call,
                cause,
            });
        };
        // Every call into the plugin, for authors (`COORDHOST_LOG=coordhost::plugin=debug`).
        tracing::debug!(target: crate::LOG_TARGET, plugin = self.plugin.name(), call, "host -> plugin");
        instance::arm_deadline(&mut live.store, self.plugin.inner());
        let outcome = f(
            live.world
                .coordhost_plugin_shuffle_master()
                .shuffle_master(),
            &mut live.store,
            live.handle,
        );
        match instance::settle(&live.store, self.plugin.inner(), call, outcome) {
            Ok(result) => result,
            Err(fault) => Err(self.after_fault(call, fault)),
        }
    }

    /// Drops the poisoned store and, if allowed and possible, rebuilds it:
    /// new instance, jobs registered again, snapshots restored.
    fn after_fault(&mut self, call: &'static str, fault: Fault) -> PluginError {
        self.live = None;
        let inner = self.plugin.inner();
        let rebuilt = inner.spec.limits.on_trap == TrapPolicy::Rebuild
            && self.plugin.supports_batch_snapshot()
            && self
                .rebuild()
                .map_err(|e| tracing::error!(target: crate::LOG_TARGET, plugin = self.plugin.name(), "rebuild failed: {e}"))
                .is_ok();
        let error = fault.into_error(self.plugin.inner(), call, rebuilt);
        if rebuilt {
            tracing::warn!(
                target: crate::LOG_TARGET,
                plugin = self.plugin.name(),
                "{error}; store rebuilt and restored from its snapshots"
            );
        } else {
            self.live = None;
            self.poisoned = Some(error.to_string());
        }
        error
    }

    fn rebuild(&mut self) -> Result<(), PluginError> {
        self.live = Some(instantiate(&self.plugin, self.context.clone())?);
        for job in self.jobs.clone() {
            self.call("register-job", |g, store, h| {
                g.call_register_job(store, h, &job)
            })?;
        }
        if !self.snapshots.is_empty() {
            let snapshots = self.snapshots.clone();
            self.call("restore-state", |g, store, h| {
                g.call_restore_state(store, h, &snapshots)
            })?;
        }
        Ok(())
    }
}

/// `data-set/vertex-subtask-attempt`, for messages.
fn partition_name(id: &ResultPartitionId) -> String {
    format!(
        "{}/{}-{}-{}",
        id.intermediate_data_set, id.producer.job_vertex, id.producer.subtask, id.producer.attempt
    )
}

fn instantiate(
    plugin: &LoadedPlugin,
    context: Option<Arc<dyn JobShuffleContext>>,
) -> Result<Live, PluginError> {
    let inner = plugin.inner();
    let KindPre::Shuffle(pre) = &inner.pre else {
        return Err(PluginError::KindMismatch {
            plugin: inner.spec.name.clone(),
            path: inner.spec.path.clone(),
            configured: PluginKind::ShuffleMaster,
            found: PluginKind::SplitEnumerator,
        });
    };
    let mut store = instance::new_store(inner)?;
    store.data_mut().job_shuffle_context = context;
    let world = match pre.instantiate(&mut store) {
        Ok(world) => world,
        Err(e) => return Err(Fault::classify(&store, &e).into_error(inner, "instantiate", false)),
    };
    let outcome = world
        .coordhost_plugin_shuffle_master()
        .shuffle_master()
        .call_create(&mut store, &inner.spec.config);
    let handle = match instance::settle(&store, inner, "create", outcome) {
        Ok(Ok(handle)) => handle,
        Ok(Err(returned)) => return Err(returned),
        Err(fault) => return Err(fault.into_error(inner, "create", false)),
    };
    Ok(Live {
        store,
        world,
        handle,
    })
}
