//! The shuffle master's memory of the partitions it placed: per job, the
//! shuffle descriptor of every registered partition, plus what a batch
//! snapshot needs to be incremental (FLIP-383's `ShuffleMasterSnapshot`: the
//! first snapshot of a job is full, later ones carry only the descriptors
//! registered since the one before).

use serde::{Deserialize, Serialize};
use std::borrow::Borrow;
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

/// Identifies a result partition (the WIT `result-partition-id`, flattened).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PartitionKey {
    /// Id of the intermediate data set.
    pub intermediate_data_set: String,
    /// Job vertex of the producing attempt.
    pub job_vertex: String,
    /// Subtask of the producing attempt.
    pub subtask: u32,
    /// Attempt number of the producing attempt.
    pub attempt: u32,
}

/// A shuffle descriptor as the shuffle master remembers it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredDescriptor {
    /// The partition.
    pub key: PartitionKey,
    /// Its directory (absolute).
    pub location: String,
    /// Number of subpartitions.
    pub num_subpartitions: u32,
}

/// One batch snapshot's content for one job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistrySnapshot {
    /// Whether it only adds to the snapshots before it.
    pub incremental: bool,
    /// The descriptors it carries, ordered by partition.
    pub descriptors: Vec<StoredDescriptor>,
}

/// A stored descriptor ordered and looked up by its partition key alone,
/// so that a set of them is a map from key to descriptor that holds each
/// key once (a map keyed by a copy of the key held it twice: about 100
/// bytes a partition of the plugin's memory, 50 MB at 500 000 partitions;
/// issue 29).
#[derive(Debug)]
struct ByKey(StoredDescriptor);

impl Borrow<PartitionKey> for ByKey {
    fn borrow(&self) -> &PartitionKey {
        &self.0.key
    }
}

impl PartialEq for ByKey {
    fn eq(&self, other: &Self) -> bool {
        self.0.key == other.0.key
    }
}

impl Eq for ByKey {}

impl PartialOrd for ByKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ByKey {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.key.cmp(&other.0.key)
    }
}

#[derive(Debug, Default)]
struct JobPartitions {
    /// Every registered partition's descriptor, by key.
    descriptors: BTreeSet<ByKey>,
    /// Partitions registered since the last snapshot, in registration order.
    since_snapshot: Vec<PartitionKey>,
    /// Whether a full snapshot was taken since the job was registered or
    /// restored; until then the next snapshot is full.
    full_snapshot_taken: bool,
}

/// Descriptors of every registered job.
#[derive(Debug, Default)]
pub struct PartitionRegistry {
    jobs: BTreeMap<String, JobPartitions>,
}

impl PartitionRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts tracking `job_id`; registering a known job again keeps its partitions.
    pub fn register_job(&mut self, job_id: &str) {
        self.jobs.entry(job_id.to_owned()).or_default();
    }

    /// Whether `job_id` is registered (or restored).
    pub fn is_registered(&self, job_id: &str) -> bool {
        self.jobs.contains_key(job_id)
    }

    /// Records the descriptor of a newly registered partition, replacing one
    /// with the same id.
    ///
    /// # Errors
    ///
    /// `job_id` is not registered.
    pub fn record(&mut self, job_id: &str, descriptor: StoredDescriptor) -> Result<(), String> {
        let job = self
            .jobs
            .get_mut(job_id)
            .ok_or_else(|| format!("job {job_id} is not registered"))?;
        job.since_snapshot.push(descriptor.key.clone());
        job.descriptors.replace(ByKey(descriptor));
        Ok(())
    }

    /// The descriptor of partition `key` of `job_id`, if known.
    pub fn get(&self, job_id: &str, key: &PartitionKey) -> Option<&StoredDescriptor> {
        self.jobs
            .get(job_id)?
            .descriptors
            .get(key)
            .map(|stored| &stored.0)
    }

    /// Forgets partition `key` in whichever job holds it with this `location`;
    /// returns whether one was found.
    pub fn forget(&mut self, key: &PartitionKey, location: &str) -> bool {
        let mut found = false;
        for job in self.jobs.values_mut() {
            if job
                .descriptors
                .get(key)
                .is_some_and(|d| d.0.location == location)
            {
                job.descriptors.remove(key);
                found = true;
            }
        }
        found
    }

    /// Forgets `job_id` and all its descriptors.
    pub fn unregister_job(&mut self, job_id: &str) {
        self.jobs.remove(job_id);
    }

    /// Takes a batch snapshot of `job_id`: full the first time (and the first
    /// time after a restore), then incremental.
    ///
    /// # Errors
    ///
    /// `job_id` is not registered.
    pub fn snapshot(&mut self, job_id: &str) -> Result<RegistrySnapshot, String> {
        let job = self
            .jobs
            .get_mut(job_id)
            .ok_or_else(|| format!("job {job_id} is not registered"))?;
        let since = std::mem::take(&mut job.since_snapshot);
        if !job.full_snapshot_taken {
            job.full_snapshot_taken = true;
            return Ok(RegistrySnapshot {
                incremental: false,
                descriptors: job.descriptors.iter().map(|d| d.0.clone()).collect(),
            });
        }
        let mut keys = since;
        keys.sort();
        keys.dedup();
        Ok(RegistrySnapshot {
            incremental: true,
            // A partition released since it was registered is left out.
            descriptors: keys
                .iter()
                .filter_map(|k| job.descriptors.get(k).map(|d| d.0.clone()))
                .collect(),
        })
    }

    /// Applies one snapshot of `job_id`, oldest first: a full one replaces
    /// the job's descriptors, an incremental one adds to them. The job is
    /// registered if it was not, and its next snapshot will be full.
    pub fn restore(&mut self, job_id: &str, snapshot: RegistrySnapshot) {
        let mut restore = Restore::default();
        restore.snapshot(self, job_id, snapshot.incremental);
        for descriptor in snapshot.descriptors {
            restore.add(job_id, descriptor);
        }
        self.finish_restore(restore);
    }

    /// Puts in place what `restore` rebuilt: each job it touched gets the
    /// descriptors built there (registered if it was not), and its next
    /// snapshot will be full. Returns how many descriptors the jobs hold.
    pub fn finish_restore(&mut self, restore: Restore) -> usize {
        let mut held = 0;
        for (job_id, descriptors) in restore.jobs {
            held += descriptors.len();
            let job = self.jobs.entry(job_id).or_default();
            job.descriptors = descriptors;
            job.since_snapshot.clear();
            job.full_snapshot_taken = false;
        }
        held
    }
}

/// Snapshots being restored, one descriptor at a time, beside the registry
/// they will replace jobs of ([`PartitionRegistry::finish_restore`]): a
/// shuffle master decodes its snapshots straight into it, so a bad one
/// found half-way leaves the registry as it was (drop the `Restore`), and no
/// list of every decoded descriptor is held besides (50 MB at 500 000
/// partitions, issue 29).
#[derive(Debug, Default)]
pub struct Restore {
    jobs: BTreeMap<String, BTreeSet<ByKey>>,
}

impl Restore {
    /// Starts the next snapshot of `job_id` (oldest first): a full one
    /// starts the job over; an incremental one adds to what the snapshots
    /// before it rebuilt or, for the first of its job, to what `registry`
    /// holds.
    pub fn snapshot(&mut self, registry: &PartitionRegistry, job_id: &str, incremental: bool) {
        if !incremental {
            self.jobs.insert(job_id.to_owned(), BTreeSet::new());
        } else if !self.jobs.contains_key(job_id) {
            let held = registry.jobs.get(job_id).map_or_else(BTreeSet::new, |job| {
                job.descriptors.iter().map(|d| ByKey(d.0.clone())).collect()
            });
            self.jobs.insert(job_id.to_owned(), held);
        }
    }

    /// Adds one descriptor of the current snapshot of `job_id`, replacing
    /// one with the same key.
    pub fn add(&mut self, job_id: &str, descriptor: StoredDescriptor) {
        // The job is there once its snapshot started: no id copied per
        // descriptor (half a million of them at 1 M execution vertices).
        let descriptors = match self.jobs.get_mut(job_id) {
            Some(descriptors) => descriptors,
            None => self.jobs.entry(job_id.to_owned()).or_default(),
        };
        descriptors.replace(ByKey(descriptor));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn descriptor(subtask: u32) -> StoredDescriptor {
        StoredDescriptor {
            key: PartitionKey {
                intermediate_data_set: "ds".into(),
                job_vertex: "map".into(),
                subtask,
                attempt: 0,
            },
            location: format!("/r/j/ds/map-{subtask}-0"),
            num_subpartitions: 2,
        }
    }

    #[test]
    fn the_first_snapshot_is_full_and_later_ones_incremental() {
        let mut registry = PartitionRegistry::new();
        assert!(registry.record("j", descriptor(0)).is_err());
        registry.register_job("j");
        registry.record("j", descriptor(0)).unwrap();
        registry.record("j", descriptor(1)).unwrap();
        let first = registry.snapshot("j").unwrap();
        assert!(!first.incremental);
        assert_eq!(first.descriptors.len(), 2);
        registry.record("j", descriptor(2)).unwrap();
        let second = registry.snapshot("j").unwrap();
        assert!(second.incremental);
        assert_eq!(second.descriptors, [descriptor(2)]);
        assert!(registry.snapshot("j").unwrap().descriptors.is_empty());
    }

    #[test]
    fn restoring_a_full_then_incremental_snapshots_rebuilds_the_descriptors() {
        let mut registry = PartitionRegistry::new();
        registry.register_job("j");
        registry.record("j", descriptor(9)).unwrap();
        registry.restore(
            "j",
            RegistrySnapshot {
                incremental: false,
                descriptors: vec![descriptor(0)],
            },
        );
        registry.restore(
            "j",
            RegistrySnapshot {
                incremental: true,
                descriptors: vec![descriptor(1)],
            },
        );
        assert!(registry.get("j", &descriptor(9).key).is_none());
        assert!(registry.get("j", &descriptor(0).key).is_some());
        assert!(registry.get("j", &descriptor(1).key).is_some());
        assert!(!registry.snapshot("j").unwrap().incremental);
    }

    #[test]
    fn a_partition_registered_or_restored_again_replaces_its_descriptor() {
        let mut registry = PartitionRegistry::new();
        registry.register_job("j");
        registry.record("j", descriptor(0)).unwrap();
        let moved = StoredDescriptor {
            location: "/r/j/ds/elsewhere".into(),
            ..descriptor(0)
        };
        registry.record("j", moved.clone()).unwrap();
        registry.record("j", descriptor(1)).unwrap();
        assert_eq!(registry.get("j", &moved.key), Some(&moved));
        let full = registry.snapshot("j").unwrap();
        assert_eq!(full.descriptors, [moved.clone(), descriptor(1)]);
        // A snapshot holding one partition twice: the later one counts.
        registry.restore(
            "j",
            RegistrySnapshot {
                incremental: false,
                descriptors: vec![moved, descriptor(1), descriptor(0)],
            },
        );
        assert_eq!(registry.get("j", &descriptor(0).key), Some(&descriptor(0)));
        assert_eq!(
            registry.snapshot("j").unwrap().descriptors,
            [descriptor(0), descriptor(1)]
        );
    }

    #[test]
    fn a_restore_replaces_only_the_jobs_it_touched_once_it_is_finished() {
        let mut registry = PartitionRegistry::new();
        for job in ["a", "b", "c"] {
            registry.register_job(job);
            registry.record(job, descriptor(0)).unwrap();
        }
        let mut restore = Restore::default();
        // "a": incremental first, so it adds to what the registry holds.
        restore.snapshot(&registry, "a", true);
        restore.add("a", descriptor(1));
        // "b": full, then incremental on top of it.
        restore.snapshot(&registry, "b", false);
        restore.add("b", descriptor(2));
        restore.snapshot(&registry, "b", true);
        restore.add("b", descriptor(3));
        // Nothing changes until it is finished.
        assert!(registry.get("a", &descriptor(1).key).is_none());
        assert!(registry.get("b", &descriptor(0).key).is_some());
        assert_eq!(registry.finish_restore(restore), 4);
        let keys = |registry: &mut PartitionRegistry, job| {
            let mut subtasks: Vec<u32> = registry
                .snapshot(job)
                .unwrap()
                .descriptors
                .iter()
                .map(|d| d.key.subtask)
                .collect();
            subtasks.sort_unstable();
            subtasks
        };
        assert_eq!(keys(&mut registry, "a"), [0, 1]);
        assert_eq!(keys(&mut registry, "b"), [2, 3]);
        assert_eq!(keys(&mut registry, "c"), [0]);
    }

    #[test]
    fn forgotten_partitions_leave_snapshots_and_look_ups() {
        let mut registry = PartitionRegistry::new();
        registry.register_job("j");
        registry.record("j", descriptor(0)).unwrap();
        assert!(!registry.forget(&descriptor(0).key, "/elsewhere"));
        assert!(registry.forget(&descriptor(0).key, &descriptor(0).location));
        assert!(registry.get("j", &descriptor(0).key).is_none());
        assert!(registry.snapshot("j").unwrap().descriptors.is_empty());
        registry.unregister_job("j");
        assert!(!registry.is_registered("j"));
    }
}
