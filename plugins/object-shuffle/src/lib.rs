//! `object-shuffle`: a coordhost shuffle master (Flink's `ShuffleMaster`,
//! world `shuffle-master-plugin`, WIT 0.1.2) that places every result
//! partition on S3-compatible object storage, under one prefix of its
//! writable store grant. The host's producers write a partition's `data`
//! and then its `index` object there (docs/shuffle-format.md; an object is
//! never changed after it is written), and consumers on any worker read
//! them there, so a partition outlives the worker process that wrote it: a
//! lost worker costs no re-run of its finished producers, and a coordinator
//! on another host finds the partitions a crashed one recorded (FLIP-383's
//! `getPartitionWithMetrics`, answered by reading each partition's index).
//!
//! # Config
//!
//! | key | meaning |
//! |---|---|
//! | `prefix` | `s3://BUCKET/PREFIX`: where partitions go; it must lie inside one of the plugin's **writable** store grants (`stores = [{ url = "...", writable = true }]`) |
//!
//! A partition of job `J`, data set `D`, produced by attempt `A` of subtask
//! `S` of job vertex `V` is the two objects
//! `<prefix>/<J>/<R>/<D>/<V>-<S>-<A>/data` and `.../index` (each name
//! sanitized as `plugin_support::partition_files` does for directories),
//! where `R` is this run's token, `run-` and 16 hex digits drawn at
//! random when the instance is created. Job names are not unique across
//! coordinators: two runs of one job file (a daily job, a backfill) that
//! share a prefix would otherwise name the same objects, and one run's
//! partitions would pass the other's checks (the index names the job, not
//! the run) — wrong output with exit 0.
//!
//! # State and snapshots
//!
//! The run token, nothing else: a partition's place is a function of the
//! token and its id, so after a restore the same id names the same objects.
//! `snapshot-state` answers a full snapshot: the format version (2), then
//! the token's bytes. `restore-state` takes the token of the last snapshot;
//! a version 1 snapshot (one byte, from before the token) leaves the new
//! token, so the partitions it recorded count as missing and run again.
//!
//! # Which partitions exist
//!
//! `get-partitions-with-metrics` reads each expected partition's `index`
//! object (a ranged get), checks it (checksum, format, the producer it
//! names is the one asked about) and that `data` has the length the index
//! records (a head), and reports the bytes of each subpartition. The host
//! checks every reported partition again against its log before a consumer
//! is sent to it.

mod bindings {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "shuffle-master-plugin",
    });
}

use bindings::coordhost::plugin::host_log;
use bindings::coordhost::plugin::object_store::{self as store, StoreError};
use bindings::coordhost::plugin::types::{
    Error, LogLevel, PartitionDescriptor, PartitionWithMetrics, ProducerDescriptor,
    ResultPartitionId, ShuffleDescriptor, ShuffleMasterSnapshot,
};
use bindings::exports::coordhost::plugin::shuffle_master::{
    Guest, GuestShuffleMaster, ShuffleMaster,
};
use plugin_support::partition_files::{
    DATA_FILE, INDEX_FILE, IndexProducer, checked_sizes, index_subpartitions, sanitize_component,
};
use std::cell::RefCell;
use std::collections::BTreeSet;

/// The first byte of every snapshot: its format version.
pub const SNAPSHOT_VERSION: u8 = 2;

/// A new run token: `run-` and 16 hex digits, from the random keys std
/// seeds its hash maps with (`wasi:random`) and the wall clock.
fn new_run_token() -> String {
    use std::hash::{BuildHasher, Hasher};
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(nanos);
    format!("run-{:016x}", h.finish())
}

/// Whether `token` has the shape [`new_run_token`] gives.
fn is_run_token(token: &str) -> bool {
    token
        .strip_prefix("run-")
        .is_some_and(|hex| hex.len() == 16 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Largest index read, bytes (the host's bound on one ranged get).
const MAX_INDEX_BYTES: u64 = 16 << 20;

/// The component: the type the generated `export!` binds to.
struct Component;

impl Guest for Component {
    type ShuffleMaster = ObjectShuffleMaster;
}

/// One shuffle master instance (one per job).
pub struct ObjectShuffleMaster {
    /// `s3://BUCKET/PREFIX`, without a trailing `/`.
    prefix: String,
    /// Jobs registered.
    jobs: RefCell<BTreeSet<String>>,
    /// This run's token (a folder below each job's): new at create, the
    /// recorded one after a restore.
    run: RefCell<String>,
    /// Warnings already logged (the host asks again while it waits).
    warned: RefCell<BTreeSet<String>>,
}

/// A store error as the WIT error of a shuffle master call.
fn store_error(e: StoreError) -> Error {
    match e {
        StoreError::InvalidUrl(m)
        | StoreError::NotGranted(m)
        | StoreError::ReadOnly(m)
        | StoreError::TooLarge(m) => Error::InvalidConfig(m),
        StoreError::NotFound(m) | StoreError::Timeout(m) | StoreError::Unavailable(m) => {
            Error::Io(m)
        }
    }
}

/// Deletes the partition objects under `folder` (a job's, `<prefix>/<job>/`):
/// those named as this plugin names them, `<data set>/<vertex>-<subtask>-<attempt>/`
/// then `data` or `index`. Anything else there (another tool's objects, a
/// table someone put under the prefix) is left alone.
fn delete_under(folder: &str) -> Result<(), StoreError> {
    let mut after: Option<String> = None;
    loop {
        let page = store::list_objects(folder, after.as_deref(), 1000)?;
        for meta in &page {
            if !is_partition_object(&meta.url[folder.len().min(meta.url.len())..]) {
                continue;
            }
            match store::delete_object(&meta.url) {
                Ok(()) | Err(StoreError::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        match page.last() {
            Some(last) if page.len() == 1000 => after = Some(last.url.clone()),
            _ => return Ok(()),
        }
    }
}

/// Whether `rest` (a key below a job's folder) names a partition object:
/// `<data set>/<vertex>-<subtask>-<attempt>/data` or `.../index`.
fn is_partition_object(rest: &str) -> bool {
    let parts: Vec<&str> = rest.split('/').collect();
    let [data_set, producer, name] = parts.as_slice() else {
        return false;
    };
    let mut numbers = producer.rsplitn(3, '-');
    let (Some(attempt), Some(subtask), Some(vertex)) =
        (numbers.next(), numbers.next(), numbers.next())
    else {
        return false;
    };
    !data_set.is_empty()
        && !vertex.is_empty()
        && attempt.parse::<u32>().is_ok()
        && subtask.parse::<u32>().is_ok()
        && (*name == DATA_FILE || *name == INDEX_FILE)
}

/// Whether `url` lies inside `grant` as a folder (or is the grant itself).
fn inside(url: &str, grant: &str) -> bool {
    url == grant
        || url
            .strip_prefix(grant)
            .is_some_and(|rest| rest.starts_with('/'))
}

impl ObjectShuffleMaster {
    /// The place of partition `id` of `job_id`.
    fn location(&self, job_id: &str, id: &ResultPartitionId) -> String {
        // The layout of `plugin_support::partition_files::partition_location`,
        // one folder (the run's) deeper.
        format!(
            "{}/{}/{}-{}-{}",
            self.run_folder(job_id),
            sanitize_component(&id.intermediate_data_set),
            sanitize_component(&id.producer.job_vertex),
            id.producer.subtask,
            id.producer.attempt
        )
    }

    /// `<prefix>/<job>/<run>`: where this run's partitions of `job_id` are.
    fn run_folder(&self, job_id: &str) -> String {
        format!(
            "{}/{}/{}",
            self.prefix,
            sanitize_component(job_id),
            self.run.borrow()
        )
    }

    /// The bytes per subpartition of partition `id` of `job_id` at
    /// `location`, from its index; `None` when it has no index (never
    /// finished, or released). A damaged partition is logged once and
    /// counts as missing.
    fn sizes(
        &self,
        job_id: &str,
        id: &ResultPartitionId,
        location: &str,
    ) -> Result<Option<Vec<u64>>, Error> {
        let index_url = format!("{location}/{INDEX_FILE}");
        let bytes = match store::get_range(&index_url, 0, MAX_INDEX_BYTES) {
            Ok(bytes) => bytes,
            Err(StoreError::NotFound(_)) => return Ok(None),
            Err(e) => return Err(store_error(e)),
        };
        let producer = IndexProducer {
            job: job_id.to_owned(),
            data_set: id.intermediate_data_set.clone(),
            job_vertex: id.producer.job_vertex.clone(),
            subtask: id.producer.subtask,
            attempt: id.producer.attempt,
        };
        let n = index_subpartitions(&bytes).unwrap_or(0);
        let data_url = format!("{location}/{DATA_FILE}");
        let mut unreachable = None;
        let checked = checked_sizes(location, &bytes, n, &producer, || match store::head_object(
            &data_url,
        ) {
            Ok(meta) => Ok(meta.size),
            Err(StoreError::NotFound(m)) => Err(m),
            Err(e) => {
                let said = format!("{e:?}");
                unreachable = Some(e);
                Err(said)
            }
        });
        if let Some(e) = unreachable {
            return Err(store_error(e));
        }
        match checked {
            Ok(sizes) => Ok(Some(sizes)),
            Err(why) => {
                if self.warned.borrow_mut().insert(why.clone()) {
                    host_log::log(LogLevel::Warn, &why);
                }
                Ok(None)
            }
        }
    }

    /// Deletes the partition's objects: `index` first, so it stops
    /// counting as complete before its data goes.
    fn delete(location: &str) -> Result<(), Error> {
        for name in [INDEX_FILE, DATA_FILE] {
            store::delete_object(&format!("{location}/{name}")).map_err(store_error)?;
        }
        Ok(())
    }
}

impl GuestShuffleMaster for ObjectShuffleMaster {
    fn create(config: Vec<(String, String)>) -> Result<ShuffleMaster, Error> {
        plugin_support::config::only_keys(&config, &["prefix"]).map_err(Error::InvalidConfig)?;
        let prefix = plugin_support::config::required(&config, "prefix")
            .map_err(Error::InvalidConfig)?
            .trim_end_matches('/')
            .to_owned();
        let plain = prefix.strip_prefix("s3://").is_some_and(|rest| {
            rest.split('/')
                .all(|part| !part.is_empty() && part != "." && part != ".." && !part.contains('%'))
        });
        if !plain {
            return Err(Error::InvalidConfig(format!(
                "`prefix` = `{prefix}` is not a plain s3://BUCKET/PREFIX (no empty, `.` or `..` part, no `%`)"
            )));
        }
        let grants = store::grants();
        if !grants.iter().any(|g| g.writable && inside(&prefix, &g.url)) {
            let listed: Vec<String> = grants
                .iter()
                .map(|g| {
                    format!(
                        "{} ({})",
                        g.url,
                        if g.writable { "writable" } else { "read-only" }
                    )
                })
                .collect();
            return Err(Error::InvalidConfig(format!(
                "`prefix` = `{prefix}` lies inside none of the plugin's writable store grants (it has: {}); add stores = [{{ url = \"{prefix}\", writable = true }}] to its entry",
                if listed.is_empty() {
                    "none".to_owned()
                } else {
                    listed.join(", ")
                }
            )));
        }
        Ok(ShuffleMaster::new(Self {
            prefix,
            jobs: RefCell::new(BTreeSet::new()),
            run: RefCell::new(new_run_token()),
            warned: RefCell::new(BTreeSet::new()),
        }))
    }

    fn register_job(&self, job_id: String) -> Result<(), Error> {
        self.jobs.borrow_mut().insert(job_id);
        Ok(())
    }

    fn register_partition_with_producer(
        &self,
        job_id: String,
        partition: PartitionDescriptor,
        _producer: ProducerDescriptor,
    ) -> Result<ShuffleDescriptor, Error> {
        if !self.jobs.borrow().contains(&job_id) {
            return Err(Error::InvalidState(format!(
                "job {job_id} is not registered"
            )));
        }
        Ok(ShuffleDescriptor {
            location: self.location(&job_id, &partition.id),
            id: partition.id,
            num_subpartitions: partition.num_subpartitions,
        })
    }

    fn release_partition_externally(&self, descriptor: ShuffleDescriptor) -> Result<(), Error> {
        if !inside(&descriptor.location, &self.prefix) {
            return Err(Error::InvalidState(format!(
                "{} is not a partition of this shuffle master (prefix {})",
                descriptor.location, self.prefix
            )));
        }
        Self::delete(&descriptor.location)
    }

    fn supports_batch_snapshot() -> bool {
        true
    }

    fn snapshot_state(&self, _job_id: String) -> Result<ShuffleMasterSnapshot, Error> {
        let mut data = vec![SNAPSHOT_VERSION];
        data.extend_from_slice(self.run.borrow().as_bytes());
        Ok(ShuffleMasterSnapshot {
            incremental: false,
            data,
        })
    }

    fn restore_state(&self, snapshots: Vec<ShuffleMasterSnapshot>) -> Result<(), Error> {
        let mut token = None;
        for (i, s) in snapshots.iter().enumerate() {
            match s.data.split_first() {
                // Before the run token: its partitions are under no token.
                Some((1, [])) => {}
                Some((&SNAPSHOT_VERSION, rest))
                    if std::str::from_utf8(rest).is_ok_and(is_run_token) =>
                {
                    token = std::str::from_utf8(rest).ok().map(str::to_owned);
                }
                _ => {
                    return Err(Error::CorruptSnapshot(format!(
                        "snapshot {i} ({} bytes) is neither version 1 (one byte) nor version {SNAPSHOT_VERSION} with a run token",
                        s.data.len()
                    )));
                }
            }
        }
        if let Some(token) = token {
            *self.run.borrow_mut() = token;
        }
        Ok(())
    }

    fn notify_partition_recovery_started(&self, job_id: String) {
        self.jobs.borrow_mut().insert(job_id.clone());
        host_log::log(
            LogLevel::Info,
            &format!(
                "partition recovery of job {job_id} started: partitions under {}",
                self.prefix
            ),
        );
    }

    fn get_partitions_with_metrics(
        &self,
        job_id: String,
        expected: Vec<ResultPartitionId>,
        _remaining_ms: u64,
    ) -> Result<Vec<PartitionWithMetrics>, Error> {
        let mut reported = Vec::new();
        for id in expected {
            let location = self.location(&job_id, &id);
            if let Some(sizes) = self.sizes(&job_id, &id, &location)? {
                reported.push(PartitionWithMetrics {
                    descriptor: ShuffleDescriptor {
                        num_subpartitions: sizes.len() as u32,
                        location,
                        id,
                    },
                    bytes_per_subpartition: sizes,
                });
            }
        }
        Ok(reported)
    }

    /// Flink's `unregisterJob`: the job is over, its partitions are
    /// nobody's. Every partition object of this run, under
    /// `<prefix>/<job>/<run>/`, is deleted (a listing, a page of at most
    /// 1000 keys at a time; other objects there stay, and other runs'
    /// folders are not looked at); a failure is logged and leaves them.
    fn unregister_job(&self, job_id: String) {
        self.jobs.borrow_mut().remove(&job_id);
        let folder = format!("{}/", self.run_folder(&job_id));
        if let Err(e) = delete_under(&folder) {
            host_log::log(
                LogLevel::Warn,
                &format!("could not delete the partitions under {folder}: {e:?}"),
            );
        }
    }
}

bindings::export!(Component with_types_in bindings);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_tokens_have_their_shape_and_differ() {
        let (a, b) = (new_run_token(), new_run_token());
        assert!(is_run_token(&a) && is_run_token(&b), "{a} {b}");
        assert_ne!(a, b);
        for bad in [
            "run-",
            "run-0123",
            "run-0123456789abcdeg",
            "x-0123456789abcdef",
            "run-0123456789abcdef/..",
        ] {
            assert!(!is_run_token(bad), "{bad}");
        }
    }

    #[test]
    fn only_partition_objects_are_deleted_with_the_job() {
        for yes in ["ds/v-0-0/data", "ds/vertex-a-b-12-3/index"] {
            assert!(is_partition_object(yes), "{yes}");
        }
        for no in [
            "lineitem/part-0.parquet",
            "ds/v-0-0/data/x",
            "ds/v-0-0/other",
            "ds/v-x-0/data",
            "ds/-0-0/data",
            "v-0-0/data",
            "",
        ] {
            assert!(!is_partition_object(no), "{no}");
        }
    }

    #[test]
    fn a_prefix_is_inside_a_grant_only_as_a_folder() {
        assert!(inside("s3://b/shuffle", "s3://b/shuffle"));
        assert!(inside("s3://b/shuffle/job", "s3://b/shuffle"));
        assert!(!inside("s3://b/shuffle-old", "s3://b/shuffle"));
        assert!(!inside("s3://c/shuffle", "s3://b/shuffle"));
    }
}
