//! The shuffle master's memory of the partitions it placed: per job, the
//! shuffle descriptor of every registered partition, plus what a batch
//! snapshot needs to be incremental (FLIP-383's `ShuffleMasterSnapshot`: the
//! first snapshot of a job is full, later ones carry only the descriptors
//! registered since the one before).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

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

#[derive(Debug, Default)]
struct JobPartitions {
    descriptors: BTreeMap<PartitionKey, StoredDescriptor>,
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
        job.descriptors.insert(descriptor.key.clone(), descriptor);
        Ok(())
    }

    /// The descriptor of partition `key` of `job_id`, if known.
    pub fn get(&self, job_id: &str, key: &PartitionKey) -> Option<&StoredDescriptor> {
        self.jobs.get(job_id)?.descriptors.get(key)
    }

    /// Forgets partition `key` in whichever job holds it with this `location`;
    /// returns whether one was found.
    pub fn forget(&mut self, key: &PartitionKey, location: &str) -> bool {
        let mut found = false;
        for job in self.jobs.values_mut() {
            if job
                .descriptors
                .get(key)
                .is_some_and(|d| d.location == location)
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
                descriptors: job.descriptors.values().cloned().collect(),
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
                .filter_map(|k| job.descriptors.get(k).cloned())
                .collect(),
        })
    }

    /// Applies one snapshot of `job_id`, oldest first: a full one replaces
    /// the job's descriptors, an incremental one adds to them. The job is
    /// registered if it was not, and its next snapshot will be full.
    pub fn restore(&mut self, job_id: &str, snapshot: RegistrySnapshot) {
        let job = self.jobs.entry(job_id.to_owned()).or_default();
        if !snapshot.incremental {
            job.descriptors.clear();
        }
        for descriptor in snapshot.descriptors {
            job.descriptors.insert(descriptor.key.clone(), descriptor);
        }
        job.since_snapshot.clear();
        job.full_snapshot_taken = false;
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
