//! `{{name}}`: a coordhost shuffle master (world `shuffle-master-plugin` of
//! `wit/types.wit`) that keeps result partitions as folders under one root
//! and supports batch snapshots.
//!
//! Config key `root`: an absolute folder, granted writable to the plugin in
//! the job file (`dirs = [{ path = "...", writable = true }]`). Partition
//! `<data set>/<vertex>-<subtask>-<attempt>` of job `J` lives in
//! `<root>/<J>/<data set>/<vertex>-<subtask>-<attempt>` (characters other
//! than `[A-Za-z0-9._-]` become `_`). The host writes `data` there, then
//! `index` (coordhost's docs/shuffle-format.md); a partition is reported
//! only once `index` exists, checks out and records `data`'s length, with
//! the bytes of each subpartition taken from it.
//!
//! Snapshot format, version 1: the text `v1`, then one line per partition,
//! tab-separated: data set, vertex, subtask, attempt, subpartitions,
//! location. Every snapshot is full (`incremental: false`); a plugin with
//! many partitions may send only what is new (`incremental: true`) after a
//! first full one.

mod bindings {
    wit_bindgen::generate!({
        path: "wit",
        world: "shuffle-master-plugin",
    });
}

use std::cell::RefCell;
use std::path::Path;

use bindings::coordhost::plugin::types::{
    Error, ExecutionAttemptId, LogLevel, PartitionDescriptor, PartitionWithMetrics,
    ProducerDescriptor, ResultPartitionId, ShuffleDescriptor, ShuffleMasterSnapshot,
};
use bindings::coordhost::plugin::host_log;
use bindings::exports::coordhost::plugin::shuffle_master::{
    Guest, GuestShuffleMaster, ShuffleMaster,
};

/// The first line of every snapshot this code writes.
const SNAPSHOT_V1: &str = "v1";

/// CRC32C (Castagnoli), the checksum of a partition's index.
fn crc32c(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = (crc >> 1) ^ (0x82F6_3B78 & (crc & 1).wrapping_neg());
        }
    }
    !crc
}

/// The bytes of each subpartition of the partition at `dir`, from its
/// `index` (magic `CHSHUFX1`, version 2, subpartition count, length of
/// `data`, region count, the producer it names, regions of `(subpartition,
/// offset, length, records, header CRC32C)` entries, CRC32C); `None` when
/// the index is missing or damaged, names another producer than `job_id`'s
/// partition `id`, or `data` has another length.
fn partition_sizes(
    dir: &Path,
    num_subpartitions: u32,
    job_id: &str,
    id: &ResultPartitionId,
) -> Option<Vec<u64>> {
    let bytes = std::fs::read(dir.join("index")).ok()?;
    let (body, crc) = bytes.split_at(bytes.len().checked_sub(4)?);
    if crc32c(body) != u32::from_le_bytes(crc.try_into().ok()?) {
        return None;
    }
    let mut at = 0;
    let mut take = |n: usize| {
        let s = body.get(at..at + n)?;
        at += n;
        let mut word = [0u8; 8];
        word[..n.min(8)].copy_from_slice(&s[..n.min(8)]);
        Some((s.to_vec(), u64::from_le_bytes(word)))
    };
    if take(8)?.0 != b"CHSHUFX1" || take(4)?.1 != 2 || take(4)?.1 != u64::from(num_subpartitions) {
        return None;
    }
    let data_len = take(8)?.1;
    let regions = take(4)?.1;
    // The producer the index names must be the one registered here: another
    // producer's partition copied to this place is not this one.
    for name in [job_id, &id.intermediate_data_set, &id.producer.job_vertex] {
        let len = usize::try_from(take(4)?.1).ok()?;
        if take(len)?.0 != name.as_bytes() {
            return None;
        }
    }
    if take(4)?.1 != u64::from(id.producer.subtask)
        || take(4)?.1 != u64::from(id.producer.attempt)
    {
        return None;
    }
    let mut sizes = vec![0u64; num_subpartitions as usize];
    let mut next = 0u64;
    for _ in 0..regions {
        for _ in 0..take(4)?.1 {
            // Records and the header checksum are the host's to check.
            let (sub, offset, len, _records, _crc) =
                (take(4)?.1, take(8)?.1, take(8)?.1, take(8)?.1, take(4)?.1);
            if sub >= u64::from(num_subpartitions) || offset != next || len == 0 {
                return None;
            }
            next = offset.checked_add(len)?;
            sizes[sub as usize] += len;
        }
    }
    let data = std::fs::metadata(dir.join("data")).ok()?.len();
    (take(1).is_none() && next == data_len && data == data_len).then_some(sizes)
}

/// The component: what `export!` binds the exported interface to.
struct Component;

impl Guest for Component {
    type ShuffleMaster = FolderShuffle;
}

/// One shuffle master; the host creates one per job. WIT methods take
/// `&self`, so the state sits in a cell.
pub struct FolderShuffle {
    root: String,
    /// Every partition registered (or restored) and not released.
    partitions: RefCell<Vec<ShuffleDescriptor>>,
}

/// One path component, reduced to `[A-Za-z0-9._-]` so it can neither climb
/// (`..`) nor nest.
fn safe(component: &str) -> String {
    let s: String = component
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || "._-".contains(c) { c } else { '_' })
        .collect();
    if s.is_empty() || s.chars().all(|c| c == '.') {
        "_".repeat(s.len().max(1))
    } else {
        s
    }
}

/// A partition's identity, comparable (the generated types are not).
fn key(id: &ResultPartitionId) -> (&str, &str, u32, u32) {
    let p = &id.producer;
    (&id.intermediate_data_set, &p.job_vertex, p.subtask, p.attempt)
}

fn io(what: &str, path: &str, e: std::io::Error) -> Error {
    Error::Io(format!("cannot {what} {path}: {e}"))
}

fn encode(d: &ShuffleDescriptor) -> String {
    let p = &d.id.producer;
    format!(
        "{}\t{}\t{}\t{}\t{}\t{}",
        d.id.intermediate_data_set, p.job_vertex, p.subtask, p.attempt, d.num_subpartitions, d.location
    )
}

fn decode(line: &str) -> Option<ShuffleDescriptor> {
    let f: Vec<&str> = line.split('\t').collect();
    let [data_set, vertex, subtask, attempt, subpartitions, location] = f.as_slice() else {
        return None;
    };
    Some(ShuffleDescriptor {
        id: ResultPartitionId {
            intermediate_data_set: (*data_set).to_string(),
            producer: ExecutionAttemptId {
                job_vertex: (*vertex).to_string(),
                subtask: subtask.parse().ok()?,
                attempt: attempt.parse().ok()?,
            },
        },
        num_subpartitions: subpartitions.parse().ok()?,
        location: (*location).to_string(),
    })
}

impl GuestShuffleMaster for FolderShuffle {
    fn create(config: Vec<(String, String)>) -> Result<ShuffleMaster, Error> {
        let root = config
            .iter()
            .rev()
            .find(|(k, _)| k == "root")
            .map(|(_, v)| v.trim_end_matches('/').to_string())
            .ok_or_else(|| Error::InvalidConfig("root: missing; set an absolute folder".into()))?;
        if !root.starts_with('/') {
            return Err(Error::InvalidConfig(format!("root: `{root}` is not an absolute path")));
        }
        // The line newcomers cannot guess: the generated `ShuffleMaster::new`
        // wraps our type into the WIT resource handle.
        Ok(ShuffleMaster::new(FolderShuffle {
            root,
            partitions: RefCell::new(Vec::new()),
        }))
    }

    fn register_job(&self, job_id: String) -> Result<(), Error> {
        host_log::log(LogLevel::Info, &format!("job {job_id} registered"));
        Ok(())
    }

    fn register_partition_with_producer(
        &self,
        job_id: String,
        partition: PartitionDescriptor,
        _producer: ProducerDescriptor,
    ) -> Result<ShuffleDescriptor, Error> {
        let p = &partition.id.producer;
        let location = format!(
            "{}/{}/{}/{}-{}-{}",
            self.root,
            safe(&job_id),
            safe(&partition.id.intermediate_data_set),
            safe(&p.job_vertex),
            p.subtask,
            p.attempt
        );
        std::fs::create_dir_all(&location).map_err(|e| io("create", &location, e))?;
        let d = ShuffleDescriptor {
            id: partition.id,
            location,
            num_subpartitions: partition.num_subpartitions,
        };
        let mut partitions = self.partitions.borrow_mut();
        partitions.retain(|known| key(&known.id) != key(&d.id));
        partitions.push(d.clone());
        Ok(d)
    }

    fn release_partition_externally(&self, descriptor: ShuffleDescriptor) -> Result<(), Error> {
        self.partitions
            .borrow_mut()
            .retain(|d| key(&d.id) != key(&descriptor.id));
        // Only folders under the root: a descriptor is input, not a command.
        if descriptor.location.starts_with(&format!("{}/", self.root)) {
            match std::fs::remove_dir_all(&descriptor.location) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io("delete", &descriptor.location, e)),
            }
        }
        Ok(())
    }

    fn supports_batch_snapshot() -> bool {
        true
    }

    fn snapshot_state(&self, _job_id: String) -> Result<ShuffleMasterSnapshot, Error> {
        let mut text = String::from(SNAPSHOT_V1);
        for d in self.partitions.borrow().iter() {
            text.push('\n');
            text.push_str(&encode(d));
        }
        Ok(ShuffleMasterSnapshot {
            incremental: false,
            data: text.into_bytes(),
        })
    }

    fn restore_state(&self, snapshots: Vec<ShuffleMasterSnapshot>) -> Result<(), Error> {
        let corrupt = |why: String| Error::CorruptSnapshot(format!("{{name}} snapshot: {why}"));
        let mut partitions = self.partitions.borrow_mut();
        for snapshot in snapshots {
            if !snapshot.incremental {
                partitions.clear();
            }
            let text = String::from_utf8(snapshot.data).map_err(|_| corrupt("not UTF-8".into()))?;
            let mut lines = text.lines();
            match lines.next() {
                Some(SNAPSHOT_V1) => {}
                Some(other) => return Err(corrupt(format!("unknown version `{other}`"))),
                None => return Err(corrupt("empty".into())),
            }
            for line in lines {
                let d = decode(line).ok_or_else(|| corrupt(format!("bad line `{line}`")))?;
                partitions.retain(|known| key(&known.id) != key(&d.id));
                partitions.push(d);
            }
        }
        Ok(())
    }

    fn notify_partition_recovery_started(&self, _job_id: String) {}

    fn get_partitions_with_metrics(
        &self,
        job_id: String,
        expected: Vec<ResultPartitionId>,
        _remaining_ms: u64,
    ) -> Result<Vec<PartitionWithMetrics>, Error> {
        // Answer at once with what exists; the host asks again while it waits.
        let mut out = Vec::new();
        for d in self.partitions.borrow().iter().filter(|d| expected.iter().any(|e| key(e) == key(&d.id))) {
            let dir = Path::new(&d.location);
            if let Some(bytes_per_subpartition) =
                partition_sizes(dir, d.num_subpartitions, &job_id, &d.id)
            {
                out.push(PartitionWithMetrics {
                    descriptor: d.clone(),
                    bytes_per_subpartition,
                });
            }
        }
        Ok(out)
    }

    fn unregister_job(&self, _job_id: String) {
        self.partitions.borrow_mut().clear();
    }
}

bindings::export!(Component with_types_in bindings);
