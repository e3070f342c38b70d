//! `local-shuffle`: a coordhost shuffle master (Flink's `ShuffleMaster`, world
//! `shuffle-master-plugin`) that places result partitions in directories under
//! one local root and can tell, after a coordinator crash, which of them still
//! exist (FLIP-383's `getPartitionWithMetrics`), with batch snapshots of its
//! descriptors (FLIP-383's `ShuffleMasterSnapshot`).
//!
//! # Config
//!
//! | key | meaning |
//! |---|---|
//! | `root` | absolute directory, granted read-write at the same path on host and guest |
//! | `fail-restore-while` | fault mode for tests (default none): an absolute path under `root`; while a file exists there, `restore-state` returns `error::io` |
//! | `ignore-worker-reports` | fault mode for tests (default `false`): `true` answers `get-partitions-with-metrics` from the files under `root` even when worker processes report what they hold, as a shuffle master that is wrong would (the host must not keep a partition no live worker holds) |
//! | `fail-first-reports` | fault mode for tests (default 0): the first N `get-partitions-with-metrics` calls of this instance (one instance per `coordhost` process) return `error::io("not reachable yet")`, as a shuffle service that is still starting would |
//! | `snapshot-pad-mib` | test knob (default 0): N MiB of zero bytes appended to the `data` of every snapshot (`restore-state` checks and strips them), so the host's limit on the size of a shuffle snapshot can be tested |
//!
//! A partition lives in `<root>/<job-id>/<intermediate-data-set>/<job-vertex>-<subtask>-<attempt>`
//! (see `plugin_support::partition_files`); the host writes its `data` file there and
//! then its `index` (docs/shuffle-format.md).
//!
//! # Snapshots
//!
//! The first `snapshot-state` of a job (and the first after a restore) is
//! full: every descriptor of the job. Later ones are incremental: the
//! descriptors registered since the snapshot before. `restore-state` takes the
//! list from the last full snapshot on and rebuilds the descriptors.
//!
//! The `data` of a snapshot is byte 0 = format version [`SNAPSHOT_VERSION`]
//! (1), then the `postcard` encoding of [`SnapshotBody`]: the job id and the
//! descriptors (data set, job vertex, subtask, attempt, location, number of
//! subpartitions).
//!
//! # Worker processes
//!
//! When `job-shuffle-context.reported-partitions` (WIT 0.1.1) answers a list
//! (the job runs on `coordhost worker` processes), `get-partitions-with-metrics`
//! answers from it: a partition exists if a worker reports it at the place this
//! plugin chose (relative to its grant) with one size per subpartition. No file
//! is read then. When it answers `none` (embedded workers), the files under
//! `root` are checked as before. Built with the feature `wit-0-1-0`, it targets
//! the frozen contract 0.1.0 and always checks files.

// The current contract; with the feature `wit-0-1-0` the same plugin is
// built against the frozen 0.1.0 (`wit/0.1.0/`), without
// `job-shuffle-context` (`make plugins` ships it as
// `local-shuffle-0.1.0.wasm`, for the host's tests of 0.1.0 plugins).
#[cfg(not(feature = "wit-0-1-0"))]
mod bindings {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "shuffle-master-plugin",
    });
}
#[cfg(feature = "wit-0-1-0")]
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
use plugin_support::registry::{Restore, StoredDescriptor};
use plugin_support::shuffle::PartitionPlacer;
use serde::{Deserialize, Serialize};
use std::cell::RefCell;

/// Version byte that opens the `data` of every snapshot this plugin writes.
pub const SNAPSHOT_VERSION: u8 = 1;

/// The component: the type the generated `export!` binds to.
struct Component;

impl Guest for Component {
    type ShuffleMaster = LocalShuffleMaster;
}

/// What the `data` of one snapshot holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotBody {
    /// The job the descriptors belong to.
    pub job_id: String,
    /// The descriptors (all of the job's for a full snapshot).
    pub descriptors: Vec<StoredDescriptor>,
}

impl SnapshotBody {
    /// Encodes the body as described in the crate docs.
    pub fn encode(&self) -> Result<Vec<u8>, String> {
        let mut bytes = vec![SNAPSHOT_VERSION];
        bytes.extend(
            postcard::to_allocvec(self).map_err(|e| format!("cannot encode snapshot: {e}"))?,
        );
        Ok(bytes)
    }

    /// Decodes bytes that [`SnapshotBody::encode`] wrote.
    ///
    /// # Errors
    ///
    /// A message for `error::corrupt-snapshot`.
    pub fn decode(bytes: &[u8]) -> Result<Self, String> {
        let mut body = Self {
            job_id: String::new(),
            descriptors: Vec::new(),
        };
        Self::decode_each(bytes, |decoded| match decoded {
            Decoded::Job(job_id) => job_id.clone_into(&mut body.job_id),
            Decoded::Descriptor(_, descriptor) => body.descriptors.push(descriptor),
        })?;
        Ok(body)
    }

    /// Decodes bytes that [`SnapshotBody::encode`] wrote one descriptor at
    /// a time, without a list of them: `each` is given the job id first,
    /// then each descriptor with it, in order (`restore-state`
    /// puts them straight into a [`Restore`]; at 500 000 partitions the
    /// list was 50 MB of the plugin's memory, which never shrinks; issue 29).
    /// The checks and messages are those of [`SnapshotBody::decode`];
    /// descriptors given before an error are the caller's to drop.
    ///
    /// # Errors
    ///
    /// A message for `error::corrupt-snapshot`.
    pub fn decode_each(bytes: &[u8], mut each: impl FnMut(Decoded<'_>)) -> Result<(), String> {
        let (&version, body) = bytes
            .split_first()
            .ok_or_else(|| "snapshot data is empty".to_owned())?;
        if version != SNAPSHOT_VERSION {
            return Err(format!(
                "snapshot format version {version} is not supported (expected {SNAPSHOT_VERSION})"
            ));
        }
        let undecodable = |e: postcard::Error| format!("snapshot data does not decode: {e}");
        // The postcard layout of `SnapshotBody`: the job id, then the
        // descriptors as a sequence (its length, then each one).
        let (job_id, rest) = postcard::take_from_bytes::<String>(body).map_err(undecodable)?;
        each(Decoded::Job(&job_id));
        let (count, mut rest) = postcard::take_from_bytes::<usize>(rest).map_err(undecodable)?;
        for _ in 0..count {
            let (one, after) =
                postcard::take_from_bytes::<StoredDescriptor>(rest).map_err(undecodable)?;
            each(Decoded::Descriptor(&job_id, one));
            rest = after;
        }
        if !rest.is_empty() {
            return Err(format!("snapshot data has {} trailing bytes", rest.len()));
        }
        Ok(())
    }
}

/// What [`SnapshotBody::decode_each`] hands on, in order.
#[derive(Debug)]
pub enum Decoded<'a> {
    /// The snapshot's job id (first).
    Job(&'a str),
    /// One descriptor, with the job id.
    Descriptor(&'a str, StoredDescriptor),
}

/// One shuffle master instance (one per job).
pub struct LocalShuffleMaster {
    placer: RefCell<PartitionPlacer>,
    /// Warnings already logged: the host asks again and again while it
    /// waits for partitions, and a damaged partition is reported once.
    warned: RefCell<std::collections::BTreeSet<String>>,
    /// `get-partitions-with-metrics` calls still to fail (`fail-first-reports`).
    failing_reports: RefCell<u32>,
    /// `fail-restore-while`: `restore-state` fails while this file exists.
    fail_restore_while: Option<String>,
    /// `ignore-worker-reports`: answer from the files under `root` even
    /// when workers report (a shuffle master that is wrong on purpose).
    ignore_worker_reports: bool,
    /// `snapshot-pad-mib`, in bytes: zero bytes after every snapshot's body.
    snapshot_pad: usize,
}

/// The body of snapshot `data` that ends in `pad` zero bytes of padding.
fn without_padding(data: &[u8], pad: usize) -> Result<&[u8], String> {
    let body = data
        .len()
        .checked_sub(pad)
        .ok_or_else(|| format!("snapshot data is shorter than its {pad} bytes of padding"))?;
    if data[body..].iter().any(|&b| b != 0) {
        return Err("snapshot padding is not zero".to_owned());
    }
    Ok(&data[..body])
}

impl GuestShuffleMaster for LocalShuffleMaster {
    fn create(config: Vec<(String, String)>) -> Result<ShuffleMaster, Error> {
        plugin_support::config::only_keys(
            &config,
            &[
                "root",
                "fail-first-reports",
                "fail-restore-while",
                "ignore-worker-reports",
                "snapshot-pad-mib",
            ],
        )
        .map_err(Error::InvalidConfig)?;
        let root =
            plugin_support::config::absolute_path(&config, "root").map_err(Error::InvalidConfig)?;
        let failing_reports = plugin_support::config::parsed_or(&config, "fail-first-reports", 0)
            .map_err(Error::InvalidConfig)?;
        let fail_restore_while = plugin_support::config::value(&config, "fail-restore-while")
            .map(|_| plugin_support::config::absolute_path(&config, "fail-restore-while"))
            .transpose()
            .map_err(Error::InvalidConfig)?;
        let ignore_worker_reports =
            plugin_support::config::parsed_or(&config, "ignore-worker-reports", false)
                .map_err(Error::InvalidConfig)?;
        let pad_mib: u32 = plugin_support::config::parsed_or(&config, "snapshot-pad-mib", 0)
            .map_err(Error::InvalidConfig)?;
        let placer = PartitionPlacer::new(root).map_err(failure_to_wit)?;
        Ok(ShuffleMaster::new(Self {
            snapshot_pad: pad_mib as usize * (1 << 20),
            ignore_worker_reports,
            placer: RefCell::new(placer),
            warned: RefCell::new(std::collections::BTreeSet::new()),
            failing_reports: RefCell::new(failing_reports),
            fail_restore_while,
        }))
    }

    fn register_job(&self, job_id: String) -> Result<(), Error> {
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
        true
    }

    fn snapshot_state(&self, job_id: String) -> Result<ShuffleMasterSnapshot, Error> {
        let snapshot = self
            .placer
            .borrow_mut()
            .registry()
            .snapshot(&job_id)
            .map_err(Error::InvalidState)?;
        let body = SnapshotBody {
            job_id,
            descriptors: snapshot.descriptors,
        };
        let mut data = body.encode().map_err(Error::Other)?;
        data.resize(data.len() + self.snapshot_pad, 0);
        Ok(ShuffleMasterSnapshot {
            incremental: snapshot.incremental,
            data,
        })
    }

    fn restore_state(&self, snapshots: Vec<ShuffleMasterSnapshot>) -> Result<(), Error> {
        if let Some(marker) = &self.fail_restore_while
            && std::fs::metadata(marker).is_ok()
        {
            return Err(Error::Io(format!(
                "{marker} exists: restore refused (fault mode `fail-restore-while`)"
            )));
        }
        if snapshots.first().is_some_and(|s| s.incremental) {
            return Err(Error::CorruptSnapshot(
                "the first snapshot to restore is incremental; a restore starts at a full one"
                    .to_owned(),
            ));
        }
        // Decoded into a restore beside the registry, which it replaces
        // only once every snapshot decoded: a bad snapshot leaves the
        // shuffle master as it was.
        let mut placer = self.placer.borrow_mut();
        let registry = placer.registry();
        let mut restore = Restore::default();
        let mut restored = 0;
        for (i, s) in snapshots.iter().enumerate() {
            let body = without_padding(&s.data, self.snapshot_pad)
                .map_err(|e| Error::CorruptSnapshot(format!("snapshot {i}: {e}")))?;
            SnapshotBody::decode_each(body, |decoded| match decoded {
                Decoded::Job(job_id) => restore.snapshot(registry, job_id, s.incremental),
                Decoded::Descriptor(job_id, descriptor) => {
                    restored += 1;
                    restore.add(job_id, descriptor);
                }
            })
            .map_err(|e| Error::CorruptSnapshot(format!("snapshot {i}: {e}")))?;
        }
        registry.finish_restore(restore);
        host_log::log(
            LogLevel::Info,
            &format!(
                "restored {restored} descriptors from {} snapshots",
                snapshots.len()
            ),
        );
        Ok(())
    }

    fn notify_partition_recovery_started(&self, job_id: String) {
        host_log::log(
            LogLevel::Info,
            &format!("partition recovery of job {job_id} started"),
        );
    }

    fn get_partitions_with_metrics(
        &self,
        job_id: String,
        expected: Vec<ResultPartitionId>,
        _remaining_ms: u64,
    ) -> Result<Vec<PartitionWithMetrics>, Error> {
        {
            let mut failing = self.failing_reports.borrow_mut();
            if *failing > 0 {
                *failing -= 1;
                return Err(Error::Io("not reachable yet".to_owned()));
            }
        }
        let keys: Vec<_> = expected.iter().map(key_of).collect();
        // Worker processes (WIT 0.1.1): what they report holding is the
        // answer; the files are on their disks, not in this plugin's grant.
        let held = if self.ignore_worker_reports {
            None
        } else {
            worker_reports(&job_id)
        };
        let reported = match held {
            Some(held) => self.placer.borrow().report_held(&job_id, &keys, &held),
            None => {
                let (reported, warnings) =
                    self.placer
                        .borrow()
                        .report_with(&job_id, &keys, bulk_files());
                for warning in warnings {
                    if self.warned.borrow_mut().insert(warning.clone()) {
                        host_log::log(LogLevel::Warn, &warning);
                    }
                }
                reported
            }
        };
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

/// What `job-shuffle-context.reported-partitions` answers, as (partition,
/// place relative to the grant, bytes per subpartition); `None` with
/// embedded workers, and always in the 0.1.0 build.
#[cfg(not(feature = "wit-0-1-0"))]
fn worker_reports(
    job_id: &str,
) -> Option<Vec<(plugin_support::registry::PartitionKey, String, Vec<u64>)>> {
    let reports = bindings::coordhost::plugin::job_shuffle_context::reported_partitions(job_id)?;
    Some(
        reports
            .into_iter()
            .map(|r| (key_of(&r.id), r.relative_location, r.bytes_per_subpartition))
            .collect(),
    )
}

#[cfg(feature = "wit-0-1-0")]
fn worker_reports(
    _job_id: &str,
) -> Option<Vec<(plugin_support::registry::PartitionKey, String, Vec<u64>)>> {
    None
}

/// The host's `local-files` import (WIT 0.1.3): a report reads every
/// partition's index and data size in two calls instead of four WASI calls
/// a partition (issue 29). Not in the 0.1.0 build.
#[cfg(not(feature = "wit-0-1-0"))]
struct HostFiles;

#[cfg(not(feature = "wit-0-1-0"))]
impl plugin_support::partition_files::BulkFiles for HostFiles {
    fn read_small_files(
        &self,
        paths: &[String],
        max_bytes: u32,
    ) -> Vec<plugin_support::partition_files::SmallFile> {
        use bindings::coordhost::plugin::local_files::{SmallFile as Wit, read_small_files};
        use plugin_support::partition_files::SmallFile;
        read_small_files(paths, max_bytes)
            .into_iter()
            .map(|f| match f {
                Wit::Whole(bytes) => SmallFile::Whole(bytes),
                Wit::TooLarge(size) => SmallFile::TooLarge(size),
                Wit::Missing => SmallFile::Missing,
                Wit::Failed(why) => SmallFile::Failed(why),
            })
            .collect()
    }

    fn file_sizes(&self, paths: &[String]) -> Vec<plugin_support::partition_files::FileSize> {
        use bindings::coordhost::plugin::local_files::{FileSize as Wit, file_sizes};
        use plugin_support::partition_files::FileSize;
        file_sizes(paths)
            .into_iter()
            .map(|f| match f {
                Wit::Regular(size) => FileSize::Regular(size),
                Wit::Missing => FileSize::Missing,
                Wit::Failed(why) => FileSize::Failed(why),
            })
            .collect()
    }
}

#[cfg(not(feature = "wit-0-1-0"))]
fn bulk_files() -> Option<&'static dyn plugin_support::partition_files::BulkFiles> {
    Some(&HostFiles)
}

#[cfg(feature = "wit-0-1-0")]
fn bulk_files() -> Option<&'static dyn plugin_support::partition_files::BulkFiles> {
    None
}

plugin_support::wit_partition_conversions!(bindings::coordhost::plugin::types);

bindings::export!(Component with_types_in bindings);

#[cfg(test)]
mod tests {
    use super::*;
    use plugin_support::registry::PartitionKey;

    #[test]
    fn snapshot_padding_is_stripped_only_when_it_is_there_and_zero() {
        let mut data = vec![1, 2, 3];
        data.resize(3 + 8, 0);
        assert_eq!(without_padding(&data, 8).unwrap(), &[1, 2, 3]);
        assert_eq!(without_padding(&data, 0).unwrap(), &data[..]);
        assert!(
            without_padding(&data, 12).is_err(),
            "shorter than its padding"
        );
        data[5] = 7;
        assert!(without_padding(&data, 8).is_err(), "padding not zero");
    }

    #[test]
    fn snapshot_data_round_trips_and_bad_bytes_are_refused() {
        let body = SnapshotBody {
            job_id: "j".into(),
            descriptors: vec![StoredDescriptor {
                key: PartitionKey {
                    intermediate_data_set: "ds".into(),
                    job_vertex: "map".into(),
                    subtask: 1,
                    attempt: 2,
                },
                location: "/r/j/ds/map-1-2".into(),
                num_subpartitions: 3,
            }],
        };
        let bytes = body.encode().unwrap();
        assert_eq!(SnapshotBody::decode(&bytes).unwrap(), body);
        assert!(SnapshotBody::decode(&[]).is_err());
        assert!(SnapshotBody::decode(&[2]).is_err());
        assert!(SnapshotBody::decode(&bytes[..bytes.len() - 1]).is_err());
        let mut longer = bytes.clone();
        longer.push(7);
        assert!(SnapshotBody::decode(&longer).is_err());
        // Every shorter prefix is refused, one descriptor at a time too.
        for cut in 0..bytes.len() {
            assert!(
                SnapshotBody::decode_each(&bytes[..cut], |_| {}).is_err(),
                "{cut} of {} bytes",
                bytes.len()
            );
        }
    }

    /// Partition `subtask` of the test job's one data set.
    fn descriptor(subtask: u32) -> StoredDescriptor {
        StoredDescriptor {
            key: PartitionKey {
                intermediate_data_set: "ds".into(),
                job_vertex: "map".into(),
                subtask,
                attempt: 0,
            },
            location: format!("/r/j/ds/map-{subtask}-0"),
            num_subpartitions: 1,
        }
    }

    #[test]
    fn a_bad_snapshot_after_good_ones_leaves_the_registry_as_it_was() {
        let root = std::env::temp_dir().join(format!("local-shuffle-test-{}", std::process::id()));
        let master = LocalShuffleMaster {
            placer: RefCell::new(PartitionPlacer::new(root.display().to_string()).unwrap()),
            warned: RefCell::default(),
            failing_reports: RefCell::new(0),
            fail_restore_while: None,
            ignore_worker_reports: false,
            snapshot_pad: 0,
        };
        {
            let mut placer = master.placer.borrow_mut();
            placer.registry().register_job("j");
            placer.registry().record("j", descriptor(0)).unwrap();
        }
        let good = SnapshotBody {
            job_id: "j".into(),
            descriptors: vec![descriptor(1), descriptor(2)],
        }
        .encode()
        .unwrap();
        let mut bad = good.clone();
        bad.truncate(bad.len() - 3);
        let snapshot = |incremental, data| ShuffleMasterSnapshot { incremental, data };
        let refused = master.restore_state(vec![snapshot(false, good), snapshot(true, bad)]);
        assert!(
            matches!(&refused, Err(Error::CorruptSnapshot(why)) if why.starts_with("snapshot 1: ")),
            "{refused:?}"
        );
        let mut placer = master.placer.borrow_mut();
        let registry = placer.registry();
        assert_eq!(registry.get("j", &descriptor(0).key), Some(&descriptor(0)));
        assert!(registry.get("j", &descriptor(1).key).is_none());
        drop(placer);
        let _ = std::fs::remove_dir_all(root);
    }

    #[test]
    fn descriptors_are_handed_on_one_at_a_time_after_the_job_id() {
        let body = SnapshotBody {
            job_id: "job".into(),
            descriptors: (0..300).map(descriptor).collect(),
        };
        let mut seen = Vec::new();
        SnapshotBody::decode_each(&body.encode().unwrap(), |decoded| {
            seen.push(match decoded {
                Decoded::Job(job) => format!("job {job}"),
                Decoded::Descriptor(job, d) => format!("{job} {}", d.key.subtask),
            });
        })
        .unwrap();
        let expected: Vec<String> = std::iter::once("job job".to_owned())
            .chain((0..300).map(|s| format!("job {s}")))
            .collect();
        assert_eq!(seen, expected);
    }
}
