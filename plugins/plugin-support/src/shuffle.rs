//! The part of a shuffle master (Flink's `ShuffleMaster`) that the sample
//! shuffle plugins share: placing partitions in directories under one root,
//! remembering their descriptors, reporting the ones that exist with their
//! sizes (FLIP-383's `getPartitionWithMetrics`), and releasing them. The
//! plugins add the WIT glue and, for `local-shuffle`, batch snapshots.

use crate::partition_files::{
    IndexProducer, RootDir, create_location, is_strictly_inside, partition_location,
    release_location,
};
use crate::registry::{PartitionKey, PartitionRegistry, StoredDescriptor};

/// Why a shuffle operation failed; each plugin maps it to the WIT `error`
/// case of the same name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShuffleFailure {
    /// The call does not fit the current state (e.g. an unregistered job).
    InvalidState(String),
    /// A file-system operation failed.
    Io(String),
}

/// A partition that exists, with the bytes of each subpartition.
pub type ReportedPartition = (StoredDescriptor, Vec<u64>);

/// Partitions placed under `root`, with their descriptors.
#[derive(Debug)]
pub struct PartitionPlacer {
    root: String,
    dir: RootDir,
    registry: PartitionRegistry,
}

impl PartitionPlacer {
    /// A placer for partitions under the absolute directory `root`, which is
    /// created if missing.
    ///
    /// # Errors
    ///
    /// [`ShuffleFailure::Io`] when `root` cannot be created (e.g. it was not
    /// granted to the plugin).
    pub fn new(root: String) -> Result<Self, ShuffleFailure> {
        std::fs::create_dir_all(&root)
            .map_err(|e| ShuffleFailure::Io(format!("cannot create shuffle root {root}: {e}")))?;
        let dir = RootDir::open(&root).map_err(ShuffleFailure::Io)?;
        Ok(Self {
            root,
            dir,
            registry: PartitionRegistry::new(),
        })
    }

    /// The root directory.
    pub fn root(&self) -> &str {
        &self.root
    }

    /// The descriptors, for registering jobs, snapshots and restores.
    pub fn registry(&mut self) -> &mut PartitionRegistry {
        &mut self.registry
    }

    /// Decides where partition `key` of `job_id` lives, creates that
    /// directory, and remembers the descriptor.
    ///
    /// # Errors
    ///
    /// [`ShuffleFailure::InvalidState`] for an unregistered job,
    /// [`ShuffleFailure::Io`] when the directory cannot be created.
    pub fn place(
        &mut self,
        job_id: &str,
        key: PartitionKey,
        num_subpartitions: u32,
    ) -> Result<StoredDescriptor, ShuffleFailure> {
        if !self.registry.is_registered(job_id) {
            return Err(ShuffleFailure::InvalidState(format!(
                "job {job_id} is not registered"
            )));
        }
        let location = partition_location(
            &self.root,
            job_id,
            &key.intermediate_data_set,
            &key.job_vertex,
            key.subtask,
            key.attempt,
        );
        create_location(&location).map_err(ShuffleFailure::Io)?;
        let descriptor = StoredDescriptor {
            key,
            location,
            num_subpartitions,
        };
        self.registry
            .record(job_id, descriptor.clone())
            .map_err(ShuffleFailure::InvalidState)?;
        Ok(descriptor)
    }

    /// Of the `expected` partitions of `job_id`, those with a known
    /// descriptor whose `index` exists, with their sizes from it, in the
    /// order asked. Returns at once. The second list holds a warning for each
    /// partition that has an index but is damaged (left out of the report,
    /// so its producer runs again).
    pub fn report<'a>(
        &self,
        job_id: &str,
        expected: impl IntoIterator<Item = &'a PartitionKey>,
    ) -> (Vec<ReportedPartition>, Vec<String>) {
        self.report_with(job_id, expected, None)
    }

    /// [`PartitionPlacer::report`], with the indexes and data sizes of all
    /// the partitions asked read through `files` in two calls when it is
    /// given (a plugin's `local-files` import, WIT 0.1.3; issue 29), and one
    /// partition at a time through WASI otherwise. Same answers, same
    /// warnings.
    pub fn report_with<'a>(
        &self,
        job_id: &str,
        expected: impl IntoIterator<Item = &'a PartitionKey>,
        files: Option<&dyn crate::partition_files::BulkFiles>,
    ) -> (Vec<ReportedPartition>, Vec<String>) {
        let Some(files) = files else {
            return self.report_one_by_one(job_id, expected);
        };
        let known: Vec<(&StoredDescriptor, IndexProducer)> = expected
            .into_iter()
            .filter_map(|key| {
                let descriptor = self.registry.get(job_id, key)?;
                Some((descriptor, Self::producer(job_id, key)))
            })
            .collect();
        let asked: Vec<crate::partition_files::Asked<'_>> = known
            .iter()
            .map(|(d, producer)| (d.location.as_str(), d.num_subpartitions, producer))
            .collect();
        let answers =
            crate::partition_files::completed_sizes_bulk(&asked, files, |location, n, producer| {
                self.dir.completed_sizes(location, n, producer)
            });
        let mut reported = Vec::new();
        let mut warnings = Vec::new();
        for ((descriptor, _), answer) in known.iter().zip(answers) {
            match answer {
                Ok(Some(sizes)) => reported.push(((*descriptor).clone(), sizes)),
                Ok(None) => {}
                Err(warning) => warnings.push(warning),
            }
        }
        (reported, warnings)
    }

    /// The producer the index of partition `key` of `job_id` must name.
    fn producer(job_id: &str, key: &PartitionKey) -> IndexProducer {
        IndexProducer {
            job: job_id.to_owned(),
            data_set: key.intermediate_data_set.clone(),
            job_vertex: key.job_vertex.clone(),
            subtask: key.subtask,
            attempt: key.attempt,
        }
    }

    /// [`PartitionPlacer::report`] through WASI, one partition at a time.
    fn report_one_by_one<'a>(
        &self,
        job_id: &str,
        expected: impl IntoIterator<Item = &'a PartitionKey>,
    ) -> (Vec<ReportedPartition>, Vec<String>) {
        let mut reported = Vec::new();
        let mut warnings = Vec::new();
        for key in expected {
            let Some(descriptor) = self.registry.get(job_id, key) else {
                continue;
            };
            // The index must name the attempt registered at this place:
            // another producer's partition copied here is damage.
            let producer = Self::producer(job_id, key);
            match self.dir.completed_sizes(
                &descriptor.location,
                descriptor.num_subpartitions,
                &producer,
            ) {
                Ok(Some(sizes)) => reported.push((descriptor.clone(), sizes)),
                Ok(None) => {}
                Err(warning) => warnings.push(warning),
            }
        }
        (reported, warnings)
    }

    /// Of the `expected` partitions of `job_id`, those with a known
    /// descriptor that a worker process reports holding (WIT 0.1.1,
    /// `job-shuffle-context.reported-partitions`), with the sizes the worker
    /// counted, in the order asked. `held` gives, per worker report, the
    /// partition, its location relative to the granted directory and its
    /// bytes per subpartition. A report counts only if its relative
    /// location is the tail of the descriptor's location (component-wise)
    /// and it has one size per subpartition: a worker holding the partition
    /// somewhere else holds another one. No file is read, so the answer
    /// costs no file-system call (the workers' disks are not the
    /// coordinator's anyway).
    pub fn report_held<'a>(
        &self,
        job_id: &str,
        expected: impl IntoIterator<Item = &'a PartitionKey>,
        held: &[(PartitionKey, String, Vec<u64>)],
    ) -> Vec<ReportedPartition> {
        // The reports by partition, looked up once per expected partition
        // (not a scan of every report per partition: 500 000 of each made
        // it 2.5 * 10^11 comparisons). A partition may be reported more
        // than once (two workers); the first that fits counts, as before.
        let mut by_key: std::collections::HashMap<&PartitionKey, Vec<usize>> =
            std::collections::HashMap::with_capacity(held.len());
        for (i, (k, _, _)) in held.iter().enumerate() {
            by_key.entry(k).or_default().push(i);
        }
        let mut reported = Vec::new();
        for key in expected {
            let Some(descriptor) = self.registry.get(job_id, key) else {
                continue;
            };
            let Some(reports) = by_key.get(key) else {
                continue;
            };
            let at = std::path::Path::new(&descriptor.location);
            let found = reports
                .iter()
                .map(|&i| &held[i])
                .find(|(_, relative, sizes)| {
                    !relative.is_empty()
                        && at.ends_with(relative)
                        && sizes.len() == descriptor.num_subpartitions as usize
                });
            if let Some((_, _, sizes)) = found {
                reported.push((descriptor.clone(), sizes.clone()));
            }
        }
        reported
    }

    /// Deletes the directory of a partition and forgets its descriptor.
    ///
    /// # Errors
    ///
    /// [`ShuffleFailure::InvalidState`] when `location` is not a directory
    /// under the root, [`ShuffleFailure::Io`] when the deletion fails.
    pub fn release(&mut self, key: &PartitionKey, location: &str) -> Result<(), ShuffleFailure> {
        if !is_strictly_inside(&self.root, location) {
            return Err(ShuffleFailure::InvalidState(format!(
                "refusing to delete {location}: it is not a partition directory under {}",
                self.root
            )));
        }
        release_location(&self.root, location).map_err(ShuffleFailure::Io)?;
        self.registry.forget(key, location);
        Ok(())
    }
}

/// Defines, in the calling module, conversions between the WIT types that the
/// caller's `wit-bindgen` generated in module `$types` and this crate's
/// binding-free ones: `key_of(&ResultPartitionId) -> PartitionKey`,
/// `id_of(&PartitionKey) -> ResultPartitionId`,
/// `descriptor_to_wit(&StoredDescriptor) -> ShuffleDescriptor`, and
/// `failure_to_wit(ShuffleFailure) -> Error`.
#[macro_export]
macro_rules! wit_partition_conversions {
    ($types:path) => {
        /// The registry key of a WIT partition id.
        fn key_of(id: &ResultPartitionId) -> $crate::registry::PartitionKey {
            $crate::registry::PartitionKey {
                intermediate_data_set: id.intermediate_data_set.clone(),
                job_vertex: id.producer.job_vertex.clone(),
                subtask: id.producer.subtask,
                attempt: id.producer.attempt,
            }
        }

        /// The WIT partition id of a registry key.
        fn id_of(key: &$crate::registry::PartitionKey) -> ResultPartitionId {
            use $types as types;
            types::ResultPartitionId {
                intermediate_data_set: key.intermediate_data_set.clone(),
                producer: types::ExecutionAttemptId {
                    job_vertex: key.job_vertex.clone(),
                    subtask: key.subtask,
                    attempt: key.attempt,
                },
            }
        }

        /// The WIT shuffle descriptor of a remembered one.
        fn descriptor_to_wit(descriptor: &$crate::registry::StoredDescriptor) -> ShuffleDescriptor {
            use $types as types;
            types::ShuffleDescriptor {
                id: id_of(&descriptor.key),
                location: descriptor.location.clone(),
                num_subpartitions: descriptor.num_subpartitions,
            }
        }

        /// The WIT error for a shared shuffle failure.
        fn failure_to_wit(failure: $crate::shuffle::ShuffleFailure) -> Error {
            match failure {
                $crate::shuffle::ShuffleFailure::InvalidState(m) => Error::InvalidState(m),
                $crate::shuffle::ShuffleFailure::Io(m) => Error::Io(m),
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::partition_files::{DATA_FILE, INDEX_FILE, IndexProducer, test_index_of};

    fn key(subtask: u32) -> PartitionKey {
        PartitionKey {
            intermediate_data_set: "ds".into(),
            job_vertex: "map".into(),
            subtask,
            attempt: 0,
        }
    }

    #[test]
    fn placed_partitions_are_reported_once_complete_and_gone_once_released() {
        let root =
            std::env::temp_dir().join(format!("plugin-support-shuffle-{}", std::process::id()));
        let root = root.to_str().unwrap().to_owned();
        let mut placer = PartitionPlacer::new(root.clone()).unwrap();
        assert!(matches!(
            placer.place("j", key(0), 2),
            Err(ShuffleFailure::InvalidState(_))
        ));
        placer.registry().register_job("j");
        let placed = placer.place("j", key(0), 2).unwrap();
        assert_eq!(placed.location, format!("{root}/j/ds/map-0-0"));
        let (reported, _) = placer.report("j", [&key(0), &key(1)]);
        assert!(reported.is_empty());
        std::fs::write(format!("{}/{DATA_FILE}", placed.location), b"123456").unwrap();
        let producer = producer_of_map;
        // Another producer's index (subtask 1's) in subtask 0's place.
        let index = test_index_of(2, &[&[(0, 5), (1, 1)]], &producer(1));
        std::fs::write(format!("{}/{INDEX_FILE}", placed.location), index).unwrap();
        let (reported, warnings) = placer.report("j", [&key(0), &key(1)]);
        assert!(reported.is_empty(), "{reported:?}");
        assert!(warnings[0].contains("names job `j`"), "{warnings:?}");
        let index = test_index_of(2, &[&[(0, 5), (1, 1)]], &producer(0));
        std::fs::write(format!("{}/{INDEX_FILE}", placed.location), index).unwrap();
        let (reported, warnings) = placer.report("j", [&key(0), &key(1)]);
        assert_eq!(reported, [(placed.clone(), vec![5, 1])]);
        assert!(warnings.is_empty());
        assert!(matches!(
            placer.release(&key(0), "/etc"),
            Err(ShuffleFailure::InvalidState(_))
        ));
        placer.release(&key(0), &placed.location).unwrap();
        assert!(!std::path::Path::new(&placed.location).exists());
        assert!(placer.report("j", [&key(0)]).0.is_empty());
        std::fs::remove_dir_all(&root).unwrap();
    }

    /// The producer an index of partition `key(subtask)` of job `j` names.
    fn producer_of_map(subtask: u32) -> IndexProducer {
        PartitionPlacer::producer("j", &key(subtask))
    }

    /// A placer under a fresh root of this test process, with job `j`
    /// registered.
    fn placer_of_job_j(test: &str) -> (String, PartitionPlacer) {
        let root = std::env::temp_dir().join(format!(
            "plugin-support-shuffle-{test}-{}",
            std::process::id()
        ));
        let root = root.to_str().unwrap().to_owned();
        let mut placer = PartitionPlacer::new(root.clone()).unwrap();
        placer.registry().register_job("j");
        (root, placer)
    }

    #[test]
    fn partitions_held_by_workers_are_reported_at_the_place_and_size_they_give() {
        let (root, mut placer) = placer_of_job_j("held");
        let placed = placer.place("j", key(0), 2).unwrap();
        placer.place("j", key(1), 2).unwrap();
        let held = [
            (key(0), "j/ds/map-0-0".to_owned(), vec![5, 1]),
            // Another place, a wrong count of sizes, an unknown partition.
            (key(1), "j/ds/map-9-0".to_owned(), vec![1, 1]),
            (key(1), "j/ds/map-1-0".to_owned(), vec![1]),
            (key(2), "j/ds/map-2-0".to_owned(), vec![1, 1]),
        ];
        let reported = placer.report_held("j", [&key(0), &key(1), &key(2)], &held);
        assert_eq!(reported, [(placed, vec![5, 1])]);
        // A bare name that is only a suffix of the last component is no match.
        let partial = [(key(0), "0-0".to_owned(), vec![5, 1])];
        assert!(placer.report_held("j", [&key(0)], &partial).is_empty());
        assert!(placer.report_held("other", [&key(0)], &held).is_empty());
        std::fs::remove_dir_all(&root).unwrap();
    }
    /// `BulkFiles` over `std::fs`, as the host answers (for the test).
    struct StdFiles;

    impl crate::partition_files::BulkFiles for StdFiles {
        fn read_small_files(
            &self,
            paths: &[String],
            max_bytes: u32,
        ) -> Vec<crate::partition_files::SmallFile> {
            use crate::partition_files::SmallFile;
            paths
                .iter()
                .map(|p| match std::fs::read(p) {
                    Ok(b) if b.len() as u64 > u64::from(max_bytes) => {
                        SmallFile::TooLarge(b.len() as u64)
                    }
                    Ok(b) => SmallFile::Whole(b),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => SmallFile::Missing,
                    Err(e) => SmallFile::Failed(format!("{p}: {e}")),
                })
                .collect()
        }

        fn file_sizes(&self, paths: &[String]) -> Vec<crate::partition_files::FileSize> {
            use crate::partition_files::FileSize;
            paths
                .iter()
                .map(|p| match std::fs::metadata(p) {
                    Ok(m) => FileSize::Regular(m.len()),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => FileSize::Missing,
                    Err(e) => FileSize::Failed(format!("{p}: {e}")),
                })
                .collect()
        }
    }

    #[test]
    fn a_report_through_bulk_reads_answers_and_warns_as_one_by_one() {
        let (root, mut placer) = placer_of_job_j("bulk");
        let producer = producer_of_map;
        let keys: Vec<PartitionKey> = (0..7).map(key).collect();
        let placed: Vec<_> = keys
            .iter()
            .map(|k| placer.place("j", k.clone(), 2).unwrap())
            .collect();
        let write = |i: usize, data: &[u8], index: Vec<u8>| {
            std::fs::write(format!("{}/{DATA_FILE}", placed[i].location), data).unwrap();
            std::fs::write(format!("{}/{INDEX_FILE}", placed[i].location), index).unwrap();
        };
        // 0 whole; 1 no index; 2 another producer; 3 data of another length;
        // 4 a damaged index; 5 no data; 6 an index over 4 KiB (read alone).
        write(
            0,
            b"123456",
            test_index_of(2, &[&[(0, 5), (1, 1)]], &producer(0)),
        );
        write(
            2,
            b"123456",
            test_index_of(2, &[&[(0, 5), (1, 1)]], &producer(1)),
        );
        write(
            3,
            b"1234",
            test_index_of(2, &[&[(0, 5), (1, 1)]], &producer(3)),
        );
        write(4, b"123456", vec![1, 2, 3]);
        std::fs::write(
            format!("{}/{INDEX_FILE}", placed[5].location),
            test_index_of(2, &[&[(0, 5), (1, 1)]], &producer(5)),
        )
        .unwrap();
        let region: &[(u32, u64)] = &[(0, 1), (1, 1)];
        let big = test_index_of(2, &[region; 300], &producer(6));
        assert!(big.len() > 4096, "{}", big.len());
        write(6, &[0u8; 600], big);
        let one_by_one = placer.report("j", keys.iter());
        let bulk = placer.report_with("j", keys.iter(), Some(&StdFiles));
        assert_eq!(bulk.0, one_by_one.0);
        let reported: Vec<(u32, Vec<u64>)> = bulk
            .0
            .iter()
            .map(|(d, s)| (d.key.subtask, s.clone()))
            .collect();
        assert_eq!(reported, [(0, vec![5, 1]), (6, vec![300, 300])]);
        // The same warnings, but for the words of a missing file's error.
        assert_eq!(bulk.1.len(), 4, "{:?}", bulk.1);
        for (b, o) in bulk.1.iter().zip(&one_by_one.1) {
            let head = |w: &str| w.split(" is unreadable").next().unwrap_or(w).to_owned();
            assert_eq!(head(b), head(o));
        }
        std::fs::remove_dir_all(&root).unwrap();
    }
}
