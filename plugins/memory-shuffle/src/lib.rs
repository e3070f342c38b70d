//! `memory-shuffle`: a coordhost shuffle master (world `shuffle-master-plugin`)
//! that places partitions under a local root like `local-shuffle` but keeps its
//! descriptors only in memory and does **not** support batch snapshots. With
//! it the host cannot recover a job's progress (FLIP-383: a shuffle master
//! without `SupportsBatchSnapshot` disables job recovery), so it shows the
//! "restart from scratch" path. It targets the WIT package 0.1.0
//! (`wit/0.1.0/types.wit`), the contract before 0.1.1 added
//! `job-shuffle-context`.
//!
//! # Config
//!
//! | key | meaning |
//! |---|---|
//! | `root` | absolute directory, granted read-write at the same path on host and guest |
//! | `fault` | `none` (default) or `trap-register-job`: `register-job` panics (a plugin bug, for the host's tests) |
//!
//! `get-partitions-with-metrics` reports only partitions registered in this
//! instance whose `index` exists and checks out; `snapshot-state` and
//! `restore-state` return `error::other("not supported")`.

// Built against the frozen contract 0.1.0 (`wit/0.1.0/`), not the current
// `wit/`: the host's tests load it to show that 0.1.0 plugins still work.
mod bindings {
    wit_bindgen::generate!({
        path: "../../wit/0.1.0",
        world: "shuffle-master-plugin",
    });
}

use bindings::coordhost::plugin::host_log;
use bindings::coordhost::plugin::types::{
    Error, LogLevel, PartitionDescriptor, PartitionWithMetrics, ProducerDescriptor,
    ResultPartitionId, ShuffleDescriptor, ShuffleMasterSnapshot,
};
use bindings::exports::coordhost::plugin::shuffle_master::{
    Guest, GuestShuffleMaster, ShuffleMaster,
};
use plugin_support::shuffle::PartitionPlacer;
use std::cell::RefCell;

/// The message of the error values that snapshot calls return.
const NOT_SUPPORTED: &str = "not supported";

/// The component: the type the generated `export!` binds to.
struct Component;

impl Guest for Component {
    type ShuffleMaster = MemoryShuffleMaster;
}

/// One shuffle master instance (one per job).
pub struct MemoryShuffleMaster {
    placer: RefCell<PartitionPlacer>,
    /// Whether `register-job` panics (config `fault = "trap-register-job"`).
    trap_register_job: bool,
}

impl GuestShuffleMaster for MemoryShuffleMaster {
    fn create(config: Vec<(String, String)>) -> Result<ShuffleMaster, Error> {
        plugin_support::config::only_keys(&config, &["root", "fault"])
            .map_err(Error::InvalidConfig)?;
        let root =
            plugin_support::config::absolute_path(&config, "root").map_err(Error::InvalidConfig)?;
        let trap_register_job = match plugin_support::config::value(&config, "fault") {
            None | Some("none") => false,
            Some("trap-register-job") => true,
            Some(other) => {
                return Err(Error::InvalidConfig(format!(
                    "fault `{other}` is not `none` or `trap-register-job`"
                )));
            }
        };
        let placer = PartitionPlacer::new(root).map_err(failure_to_wit)?;
        Ok(ShuffleMaster::new(Self {
            placer: RefCell::new(placer),
            trap_register_job,
        }))
    }

    fn register_job(&self, job_id: String) -> Result<(), Error> {
        assert!(
            !self.trap_register_job,
            "memory-shuffle: trap on register-job (fault = \"trap-register-job\")"
        );
        self.placer.borrow_mut().registry().register_job(&job_id);
        Ok(())
    }

    fn register_partition_with_producer(
        &self,
        job_id: String,
        partition: PartitionDescriptor,
        _producer: ProducerDescriptor,
    ) -> Result<ShuffleDescriptor, Error> {
        let descriptor = self
            .placer
            .borrow_mut()
            .place(&job_id, key_of(&partition.id), partition.num_subpartitions)
            .map_err(failure_to_wit)?;
        Ok(descriptor_to_wit(&descriptor))
    }

    fn release_partition_externally(&self, descriptor: ShuffleDescriptor) -> Result<(), Error> {
        self.placer
            .borrow_mut()
            .release(&key_of(&descriptor.id), &descriptor.location)
            .map_err(failure_to_wit)
    }

    fn supports_batch_snapshot() -> bool {
        false
    }

    fn snapshot_state(&self, _job_id: String) -> Result<ShuffleMasterSnapshot, Error> {
        Err(Error::Other(NOT_SUPPORTED.to_owned()))
    }

    fn restore_state(&self, _snapshots: Vec<ShuffleMasterSnapshot>) -> Result<(), Error> {
        Err(Error::Other(NOT_SUPPORTED.to_owned()))
    }

    fn notify_partition_recovery_started(&self, job_id: String) {
        host_log::log(
            LogLevel::Info,
            &format!(
                "partition recovery of job {job_id} started; only this instance's partitions are known"
            ),
        );
    }

    fn get_partitions_with_metrics(
        &self,
        job_id: String,
        expected: Vec<ResultPartitionId>,
        _remaining_ms: u64,
    ) -> Result<Vec<PartitionWithMetrics>, Error> {
        let keys: Vec<_> = expected.iter().map(key_of).collect();
        let (reported, warnings) = self.placer.borrow().report(&job_id, &keys);
        for warning in warnings {
            host_log::log(LogLevel::Warn, &warning);
        }
        Ok(reported
            .iter()
            .map(|(descriptor, sizes)| PartitionWithMetrics {
                descriptor: descriptor_to_wit(descriptor),
                bytes_per_subpartition: sizes.clone(),
            })
            .collect())
    }

    fn unregister_job(&self, job_id: String) {
        self.placer.borrow_mut().registry().unregister_job(&job_id);
    }
}

plugin_support::wit_partition_conversions!(bindings::coordhost::plugin::types);

bindings::export!(Component with_types_in bindings);
