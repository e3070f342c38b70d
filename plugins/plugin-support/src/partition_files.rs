//! The on-disk layout of result partitions that the sample shuffle masters
//! hand out, and the checks they make on it.
//!
//! A partition of job `J`, intermediate data set `D`, produced by attempt `A`
//! of subtask `S` of job vertex `V`, lives in the directory
//! `<root>/<J>/<D>/<V>-<S>-<A>` (each name [sanitized](sanitize_component)).
//! The host writes the partition as two files there (the WIT
//! `shuffle-descriptor` contract; byte tables in docs/shuffle-format.md):
//! `data`, the blocks of every subpartition, then `index`, which says where
//! each subpartition's bytes are, and names the producer attempt that wrote
//! it (index format version 2). A partition without `index` does not exist
//! yet; one whose `index` is damaged, of another version, names another
//! producer than the one the shuffle master registered there, or whose
//! `data` has another length than the index records is damaged.

use std::fs;
use std::io::ErrorKind;

/// Name of the file holding the blocks of every subpartition.
pub const DATA_FILE: &str = "data";
/// Name of the index file; the host creates it (by a rename) once `data`
/// is durable, so its existence means "partition complete".
pub const INDEX_FILE: &str = "index";
/// First 8 bytes of an index.
pub const INDEX_MAGIC: &[u8; 8] = b"CHSHUFX1";
/// Index format version this code reads (version 1 names no producer and is
/// refused: its producer runs again and writes version 2).
pub const INDEX_VERSION: u32 = 2;
/// Longest producer name an index may hold, bytes.
pub const MAX_NAME_BYTES: usize = 4096;

/// The producer attempt an index names: job, intermediate data set, job
/// vertex, subtask, attempt (docs/shuffle-format.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexProducer {
    /// The job's id.
    pub job: String,
    /// The intermediate data set.
    pub data_set: String,
    /// The producer's job vertex.
    pub job_vertex: String,
    /// The producer's subtask.
    pub subtask: u32,
    /// The producer's attempt number.
    pub attempt: u32,
}

impl std::fmt::Display for IndexProducer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "job `{}` data set `{}` producer `{}` subtask {} attempt {}",
            self.job, self.data_set, self.job_vertex, self.subtask, self.attempt
        )
    }
}

/// Makes `name` safe as one path component: every character outside
/// `[A-Za-z0-9._-]` becomes `_`, and a name that is empty or only dots (which
/// would mean "here" or "parent") has each character replaced by `_` (an empty
/// name becomes `_`).
pub fn sanitize_component(name: &str) -> String {
    if name.chars().all(|c| c == '.') {
        return if name.is_empty() {
            "_".to_owned()
        } else {
            "_".repeat(name.len())
        };
    }
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The directory of one result partition under `root` (an absolute path
/// without trailing `/`, or `/`).
pub fn partition_location(
    root: &str,
    job_id: &str,
    intermediate_data_set: &str,
    job_vertex: &str,
    subtask: u32,
    attempt: u32,
) -> String {
    format!(
        "{}/{}/{}/{}-{subtask}-{attempt}",
        root.trim_end_matches('/'),
        sanitize_component(job_id),
        sanitize_component(intermediate_data_set),
        sanitize_component(job_vertex),
    )
}

/// Creates the partition directory (and its parents) so the host can write
/// into it.
///
/// # Errors
///
/// The OS error, naming the directory.
pub fn create_location(location: &str) -> Result<(), String> {
    fs::create_dir_all(location)
        .map_err(|e| format!("cannot create partition directory {location}: {e}"))
}

/// CRC32C (Castagnoli, reflected polynomial `0x82F63B78`) of `bytes`, the
/// checksum of the index and of every block.
pub fn crc32c(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = (crc >> 1) ^ (0x82F6_3B78 & (crc & 1).wrapping_neg());
        }
    }
    !crc
}

/// A read position in an index.
struct IndexReader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl IndexReader<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let s = self
            .bytes
            .get(self.at..self.at + N)
            .ok_or_else(|| format!("it ends early at byte {}", self.at))?;
        self.at += N;
        Ok(s.try_into().expect("N bytes"))
    }
    fn u32(&mut self) -> Result<u32, String> {
        self.take().map(u32::from_le_bytes)
    }
    fn u64(&mut self) -> Result<u64, String> {
        self.take().map(u64::from_le_bytes)
    }
    fn name(&mut self) -> Result<String, String> {
        let at = self.at;
        let len = self.u32()? as usize;
        if len > MAX_NAME_BYTES {
            return Err(format!("its producer name at byte {at} is too long"));
        }
        let bytes = self
            .bytes
            .get(self.at..self.at + len)
            .ok_or_else(|| format!("it ends early at byte {}", self.at))?;
        self.at += len;
        String::from_utf8(bytes.to_vec())
            .map_err(|_| format!("its producer name at byte {at} is not UTF-8"))
    }
}

/// Parses an index (docs/shuffle-format.md, version 2) of a partition with
/// `num_subpartitions` subpartitions: returns the length `data` must have,
/// the bytes of each subpartition (the sum of its entries' lengths) and the
/// producer it names.
///
/// # Errors
///
/// What is wrong: checksum, magic, version, subpartition count, producer
/// names, or entries that do not tile `data` in order with subpartitions
/// strictly ascending within each region.
pub fn parse_index(
    bytes: &[u8],
    num_subpartitions: u32,
) -> Result<(u64, Vec<u64>, IndexProducer), String> {
    let body_len = bytes
        .len()
        .checked_sub(4)
        .ok_or("it is shorter than its checksum")?;
    let (body, crc) = bytes.split_at(body_len);
    if crc32c(body) != u32::from_le_bytes(crc.try_into().expect("4 bytes")) {
        return Err("its checksum (CRC32C) does not match".into());
    }
    let mut r = IndexReader { bytes: body, at: 0 };
    if &r.take::<8>()? != INDEX_MAGIC {
        return Err("it is not an index (bad magic)".into());
    }
    let version = r.u32()?;
    if version != INDEX_VERSION {
        return Err(format!(
            "its format version {version} is not {INDEX_VERSION}"
        ));
    }
    let n = r.u32()?;
    if n != num_subpartitions {
        return Err(format!(
            "it counts {n} subpartitions, the descriptor {num_subpartitions}"
        ));
    }
    let data_len = r.u64()?;
    let regions = r.u32()?;
    let producer = IndexProducer {
        job: r.name()?,
        data_set: r.name()?,
        job_vertex: r.name()?,
        subtask: r.u32()?,
        attempt: r.u32()?,
    };
    let mut sizes = vec![0u64; n as usize];
    let mut next = 0u64;
    for _ in 0..regions {
        let mut last: Option<u32> = None;
        for _ in 0..r.u32()? {
            // Records and the header checksum are the consumer's to check.
            let (sub, offset, len, _records, _crc) =
                (r.u32()?, r.u64()?, r.u64()?, r.u64()?, r.u32()?);
            if sub >= n || last.is_some_and(|l| l >= sub) || len == 0 || offset != next {
                return Err(format!("its entry at byte {} is out of order", r.at - 32));
            }
            last = Some(sub);
            next = offset.checked_add(len).ok_or("an entry runs past 2^64")?;
            sizes[sub as usize] += len;
        }
    }
    if r.at != body.len() || next != data_len {
        return Err("its entries do not cover the data file".into());
    }
    Ok((data_len, sizes, producer))
}

/// The bytes of each of the `num_subpartitions` subpartitions of a
/// finished partition that `producer` wrote, read from its `index`; `None`
/// when `<location>/index` does not exist (the partition was never finished
/// or was deleted). Looks the files up by their full paths; a shuffle
/// master that reports many partitions uses [`RootDir::completed_sizes`],
/// which gives the same answers with fewer file-system calls.
///
/// # Errors
///
/// The index exists but is damaged or names another producer, `data` is
/// missing or unreadable, or `data` has another length than the index
/// records: the partition is damaged, and the message says which file and
/// why.
pub fn completed_sizes(
    location: &str,
    num_subpartitions: u32,
    producer: &IndexProducer,
) -> Result<Option<Vec<u64>>, String> {
    let index = format!("{location}/{INDEX_FILE}");
    let bytes = match fs::read(&index) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read {index}: {e}")),
    };
    let data = format!("{location}/{DATA_FILE}");
    checked_sizes(location, &bytes, num_subpartitions, producer, || {
        fs::metadata(&data)
            .map(|m| m.len())
            .map_err(|e| e.to_string())
    })
    .map(Some)
}

/// The number of subpartitions an index (its `bytes`) says it has, read
/// from its header without checking anything else; `None` when it is too
/// short to hold one. For a shuffle master that keeps no count of its own
/// (`object-shuffle`): [`parse_index`] then checks the whole index.
pub fn index_subpartitions(bytes: &[u8]) -> Option<u32> {
    bytes
        .get(12..16)
        .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
}

/// The sizes an `index` (its `bytes`) records, once it names `producer` and
/// `data_len` (the length of `data` as the store or file system says, or
/// why it cannot) matches it. `location` names the partition in messages.
///
/// # Errors
///
/// What is wrong, naming the file: a damaged index, another producer, a
/// `data` of another length or that cannot be looked at.
pub fn checked_sizes(
    location: &str,
    bytes: &[u8],
    num_subpartitions: u32,
    producer: &IndexProducer,
    data_len: impl FnOnce() -> Result<u64, String>,
) -> Result<Vec<u64>, String> {
    let (want, sizes, named) = parse_index(bytes, num_subpartitions)
        .map_err(|why| format!("partition index {location}/{INDEX_FILE} is damaged: {why}"))?;
    if named != *producer {
        return Err(format!(
            "partition index {location}/{INDEX_FILE} names {named}, not {producer} registered there"
        ));
    }
    let len = data_len().map_err(|e| {
        format!("partition has an index but {location}/{DATA_FILE} is unreadable: {e}")
    })?;
    if len != want {
        return Err(format!(
            "partition data {location}/{DATA_FILE} has {len} bytes; its index records {want}"
        ));
    }
    Ok(sizes)
}

/// What the host's `local-files.read-small-files` (WIT 0.1.3) found at one
/// path, as plugin-support sees it (a plugin converts its bindings' type).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SmallFile {
    /// The whole file.
    Whole(Vec<u8>),
    /// A regular file longer than asked for: its size.
    TooLarge(u64),
    /// Nothing there.
    Missing,
    /// Anything else, naming the path.
    Failed(String),
}

/// What the host's `local-files.file-sizes` (WIT 0.1.3) found at one path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileSize {
    /// A regular file of this many bytes.
    Regular(u64),
    /// Nothing there.
    Missing,
    /// Anything else, naming the path.
    Failed(String),
}

/// Many files read or looked at in one call: a plugin's `local-files`
/// import (WIT 0.1.3), where WASI takes several calls per file (issue 29).
/// Answers come in the order of the paths.
pub trait BulkFiles {
    /// Each path's contents, up to `max_bytes`.
    fn read_small_files(&self, paths: &[String], max_bytes: u32) -> Vec<SmallFile>;
    /// Each path's size.
    fn file_sizes(&self, paths: &[String]) -> Vec<FileSize>;
}

/// Bytes of an `index` read in bulk; a larger one is read on its own.
const BULK_INDEX_BYTES: u32 = 4096;

/// One partition a report asks about: its location, subpartitions and
/// the producer its index must name.
pub type Asked<'a> = (&'a str, u32, &'a IndexProducer);

/// [`RootDir::completed_sizes`] of every partition of `asked`, in order,
/// with two calls of `files` for all of them: the indexes of at most
/// [`BULK_INDEX_BYTES`] bytes, then the sizes of the `data` of those that
/// have one. A larger index goes through `single` (the per-file way). The
/// answers, checks and messages are those of [`checked_sizes`].
pub fn completed_sizes_bulk(
    asked: &[Asked<'_>],
    files: &dyn BulkFiles,
    single: impl Fn(&str, u32, &IndexProducer) -> Result<Option<Vec<u64>>, String>,
) -> Vec<Result<Option<Vec<u64>>, String>> {
    let indexes: Vec<String> = asked
        .iter()
        .map(|(location, ..)| format!("{location}/{INDEX_FILE}"))
        .collect();
    let read = files.read_small_files(&indexes, BULK_INDEX_BYTES);
    if read.len() != asked.len() {
        let why = format!(
            "the host answered {} of {} index reads",
            read.len(),
            asked.len()
        );
        return asked.iter().map(|_| Err(why.clone())).collect();
    }
    let with_index: Vec<usize> = (0..asked.len())
        .filter(|&i| matches!(read[i], SmallFile::Whole(_)))
        .collect();
    let data: Vec<String> = with_index
        .iter()
        .map(|&i| format!("{}/{DATA_FILE}", asked[i].0))
        .collect();
    let mut sizes = files.file_sizes(&data).into_iter();
    let mut answers = Vec::with_capacity(asked.len());
    for ((location, num_subpartitions, producer), found) in asked.iter().zip(read) {
        answers.push(match found {
            SmallFile::Whole(bytes) => {
                let data_len = sizes.next();
                checked_sizes(
                    location,
                    &bytes,
                    *num_subpartitions,
                    producer,
                    || match data_len {
                        Some(FileSize::Regular(n)) => Ok(n),
                        Some(FileSize::Missing) => Err("no such file".to_owned()),
                        Some(FileSize::Failed(why)) => Err(why),
                        None => Err("the host did not answer for it".to_owned()),
                    },
                )
                .map(Some)
            }
            SmallFile::TooLarge(_) => single(location, *num_subpartitions, producer),
            SmallFile::Missing => Ok(None),
            SmallFile::Failed(why) => Err(format!("cannot read {location}/{INDEX_FILE}: {why}")),
        });
    }
    answers
}

/// The shuffle root, opened once so that a partition report looks each
/// partition's files up relative to it.
///
/// Why: in a WASI 0.2 guest, every call that takes a full path makes the
/// host resolve that path again from the granted directory, and Rust's
/// `std::fs` (through wasi-libc) adds a second path look-up to each `stat`
/// for the inode number. Reporting 5 000 partitions with `std::fs` cost about
/// 21 µs per partition, most of a coordinator restart (the recovery bench,
/// `host/benches/recovery.rs`). Relative to an opened root a partition costs
/// one `open-at` of its index, one `read` of it (a `stat` and more reads
/// only for an index of more than 4 KiB) and one `stat-at` of its data. Outside a WASI 0.2 guest (the unit tests) and for
/// a location outside the root, it falls back to [`completed_sizes`].
pub struct RootDir {
    root: String,
    #[cfg(all(target_os = "wasi", target_env = "p2"))]
    dir: wasip2::filesystem::types::Descriptor,
}

impl std::fmt::Debug for RootDir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RootDir").field("root", &self.root).finish()
    }
}

impl RootDir {
    /// Opens the existing directory `root` (absolute, as the plugin's grants
    /// name it).
    ///
    /// # Errors
    ///
    /// `root` lies in no directory granted to the plugin, or cannot be
    /// opened as a directory.
    pub fn open(root: &str) -> Result<Self, String> {
        Ok(Self {
            root: root.trim_end_matches('/').to_owned(),
            #[cfg(all(target_os = "wasi", target_env = "p2"))]
            dir: wasi_dir::open(root)?,
        })
    }

    /// [`completed_sizes`] of the partition at `location`, looked up
    /// relative to the root when `location` lies strictly inside it.
    ///
    /// # Errors
    ///
    /// As [`completed_sizes`].
    pub fn completed_sizes(
        &self,
        location: &str,
        num_subpartitions: u32,
        producer: &IndexProducer,
    ) -> Result<Option<Vec<u64>>, String> {
        #[cfg(all(target_os = "wasi", target_env = "p2"))]
        if is_strictly_inside(&self.root, location) {
            let relative = &location[self.root.len() + 1..];
            return wasi_dir::completed_sizes(
                &self.dir,
                location,
                relative,
                num_subpartitions,
                producer,
            );
        }
        completed_sizes(location, num_subpartitions, producer)
    }
}

/// [`RootDir`]'s calls, on the WASI 0.2 file-system interface directly.
#[cfg(all(target_os = "wasi", target_env = "p2"))]
mod wasi_dir {
    use super::{DATA_FILE, INDEX_FILE, IndexProducer, checked_sizes};
    use wasip2::filesystem::preopens::get_directories;
    use wasip2::filesystem::types::{Descriptor, DescriptorFlags, ErrorCode, OpenFlags, PathFlags};

    /// Whether the granted directory `granted` is `path` or an ancestor.
    fn covers(granted: &str, path: &str) -> bool {
        let granted = granted.trim_end_matches('/');
        path == granted
            || path
                .strip_prefix(granted)
                .is_some_and(|rest| rest.starts_with('/'))
    }

    /// Opens `root` from the deepest granted directory that holds it.
    pub(super) fn open(root: &str) -> Result<Descriptor, String> {
        let root = root.trim_end_matches('/');
        let (granted, name) = get_directories()
            .into_iter()
            .filter(|(_, name)| covers(name, root))
            .max_by_key(|(_, name)| name.len())
            .ok_or_else(|| format!("{root} is in no directory granted to this plugin"))?;
        let rest = root[name.trim_end_matches('/').len()..].trim_start_matches('/');
        if rest.is_empty() {
            return Ok(granted);
        }
        granted
            .open_at(
                PathFlags::SYMLINK_FOLLOW,
                rest,
                OpenFlags::DIRECTORY,
                DescriptorFlags::READ,
            )
            .map_err(|e| format!("cannot open shuffle root {root}: {e}"))
    }

    /// Bytes of an `index` asked for by the first `read`.
    const FIRST_READ: u64 = 4096;

    /// The sizes of the partition at `relative` under `dir` (whose full
    /// path is `location`, for messages); symbolic links are not followed.
    pub(super) fn completed_sizes(
        dir: &Descriptor,
        location: &str,
        relative: &str,
        num_subpartitions: u32,
        producer: &IndexProducer,
    ) -> Result<Option<Vec<u64>>, String> {
        let unreadable = |e: ErrorCode| format!("cannot read {location}/{INDEX_FILE}: {e}");
        let index = match dir.open_at(
            PathFlags::empty(),
            &format!("{relative}/{INDEX_FILE}"),
            OpenFlags::empty(),
            DescriptorFlags::READ,
        ) {
            Ok(index) => index,
            Err(ErrorCode::NoEntry) => return Ok(None),
            Err(e) => return Err(unreadable(e)),
        };
        // One `read` for an index of up to FIRST_READ bytes (most are a
        // few hundred): a regular file reads short only at its end, and an
        // index cut short anyway fails its checksum (damage, never a wrong
        // size). A larger one is read to the size `stat` gives.
        let (mut bytes, end) = index.read(FIRST_READ, 0).map_err(unreadable)?;
        if !end && bytes.len() as u64 == FIRST_READ {
            let size = index.stat().map_err(unreadable)?.size;
            while (bytes.len() as u64) < size {
                let at = bytes.len() as u64;
                let (chunk, end) = index.read(size - at, at).map_err(unreadable)?;
                bytes.extend_from_slice(&chunk);
                if chunk.is_empty() || end {
                    break;
                }
            }
        }
        drop(index);
        checked_sizes(location, &bytes, num_subpartitions, producer, || {
            dir.stat_at(PathFlags::empty(), &format!("{relative}/{DATA_FILE}"))
                .map(|stat| stat.size)
                .map_err(|e| e.to_string())
        })
        .map(Some)
    }
}

/// Deletes the partition directory `location`, which must lie strictly inside
/// `root`; a directory already gone is fine.
///
/// # Errors
///
/// `location` is outside `root` (the shuffle master deletes nothing it did not
/// hand out), or the OS refuses the deletion.
pub fn release_location(root: &str, location: &str) -> Result<(), String> {
    if !is_strictly_inside(root, location) {
        return Err(format!(
            "refusing to delete {location}: it is not a partition directory under {root}"
        ));
    }
    match fs::remove_dir_all(location) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!("cannot delete partition directory {location}: {e}")),
    }
}

/// Whether `path` names something below `root` without climbing out of it
/// (no empty, `.` or `..` component after the root).
pub fn is_strictly_inside(root: &str, path: &str) -> bool {
    let prefix = format!("{}/", root.trim_end_matches('/'));
    match path.strip_prefix(&prefix) {
        Some(rest) => {
            !rest.is_empty()
                && rest
                    .split('/')
                    .all(|c| !c.is_empty() && c != "." && c != "..")
        }
        None => false,
    }
}

#[cfg(test)]
/// The producer [`test_index`] names.
pub(crate) fn test_producer() -> IndexProducer {
    IndexProducer {
        job: "j".into(),
        data_set: "d".into(),
        job_vertex: "v".into(),
        subtask: 0,
        attempt: 0,
    }
}

#[cfg(test)]
/// An index of `regions`, each a list of (subpartition, length),
/// tiling a data file from byte 0, naming [`test_producer`].
pub(crate) fn test_index(n: u32, regions: &[&[(u32, u64)]]) -> Vec<u8> {
    test_index_of(n, regions, &test_producer())
}

#[cfg(test)]
/// As [`test_index`], naming `p`.
pub(crate) fn test_index_of(n: u32, regions: &[&[(u32, u64)]], p: &IndexProducer) -> Vec<u8> {
    let mut out = INDEX_MAGIC.to_vec();
    out.extend_from_slice(&INDEX_VERSION.to_le_bytes());
    out.extend_from_slice(&n.to_le_bytes());
    let total: u64 = regions.iter().flat_map(|r| r.iter()).map(|e| e.1).sum();
    out.extend_from_slice(&total.to_le_bytes());
    out.extend_from_slice(&(regions.len() as u32).to_le_bytes());
    for name in [&p.job, &p.data_set, &p.job_vertex] {
        out.extend_from_slice(&(name.len() as u32).to_le_bytes());
        out.extend_from_slice(name.as_bytes());
    }
    out.extend_from_slice(&p.subtask.to_le_bytes());
    out.extend_from_slice(&p.attempt.to_le_bytes());
    let mut offset = 0u64;
    for r in regions {
        out.extend_from_slice(&(r.len() as u32).to_le_bytes());
        for &(sub, len) in r.iter() {
            out.extend_from_slice(&sub.to_le_bytes());
            out.extend_from_slice(&offset.to_le_bytes());
            out.extend_from_slice(&len.to_le_bytes());
            out.extend_from_slice(&1u64.to_le_bytes());
            out.extend_from_slice(&0u32.to_le_bytes());
            offset += len;
        }
    }
    let crc = crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn components_are_sanitized_and_never_climb() {
        assert_eq!(sanitize_component("map/1 x"), "map_1_x");
        assert_eq!(sanitize_component("a.b-c_D9"), "a.b-c_D9");
        assert_eq!(sanitize_component(".."), "__");
        assert_eq!(sanitize_component(""), "_");
        assert_eq!(sanitize_component("é"), "_");
    }

    #[test]
    fn locations_follow_the_documented_layout() {
        assert_eq!(
            partition_location("/r/", "job 1", "ds", "map", 2, 0),
            "/r/job_1/ds/map-2-0"
        );
        assert_eq!(partition_location("/", "j", "d", "v", 0, 1), "/j/d/v-0-1");
    }

    #[test]
    fn only_directories_strictly_inside_the_root_may_be_released() {
        assert!(is_strictly_inside("/r", "/r/j/d/v-0-0"));
        assert!(!is_strictly_inside("/r", "/r"));
        assert!(!is_strictly_inside("/r", "/r/"));
        assert!(!is_strictly_inside("/r", "/rx/j"));
        assert!(!is_strictly_inside("/r", "/r/../etc"));
        assert!(release_location("/r", "/etc").is_err());
    }

    #[test]
    fn crc32c_is_castagnoli() {
        // The check value of CRC-32C.
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(b""), 0);
    }

    #[test]
    fn an_index_gives_the_bytes_of_each_subpartition_and_damage_is_refused() {
        let good = test_index(3, &[&[(0, 10), (2, 5)], &[(2, 7)]]);
        assert_eq!(
            parse_index(&good, 3).unwrap(),
            (22, vec![10, 0, 12], test_producer())
        );
        assert!(
            parse_index(&good, 4)
                .unwrap_err()
                .contains("counts 3 subpartitions")
        );
        for at in 0..good.len() {
            let mut bad = good.clone();
            bad[at] ^= 0x04;
            assert!(parse_index(&bad, 3).is_err(), "byte {at} flipped");
            assert!(parse_index(&good[..at], 3).is_err(), "cut at {at}");
        }
        let unordered = test_index(3, &[&[(2, 5), (0, 10)]]);
        assert!(
            parse_index(&unordered, 3)
                .unwrap_err()
                .contains("out of order")
        );
        let empty = test_index(2, &[]);
        assert_eq!(
            parse_index(&empty, 2).unwrap(),
            (0, vec![0, 0], test_producer())
        );
    }

    #[test]
    fn a_partition_counts_only_once_its_index_exists_and_its_data_matches() {
        let dir = std::env::temp_dir().join(format!("plugin-support-{}", std::process::id()));
        let location = dir.join("j/d/v-0-0");
        let location = location.to_str().unwrap();
        let p = test_producer();
        create_location(location).unwrap();
        fs::write(format!("{location}/{DATA_FILE}"), [7u8; 8]).unwrap();
        assert_eq!(completed_sizes(location, 2, &p).unwrap(), None);
        fs::write(
            format!("{location}/{INDEX_FILE}"),
            test_index(2, &[&[(0, 3), (1, 5)]]),
        )
        .unwrap();
        assert_eq!(completed_sizes(location, 2, &p).unwrap(), Some(vec![3, 5]));
        // The opened root answers the same (in a WASI 0.2 guest through its
        // own calls, which the host's recovery tests exercise).
        let root = RootDir::open(dir.to_str().unwrap()).unwrap();
        assert_eq!(
            root.completed_sizes(location, 2, &p).unwrap(),
            Some(vec![3, 5])
        );
        assert!(
            root.completed_sizes(location, 3, &p)
                .unwrap_err()
                .contains("is damaged")
        );
        assert!(
            completed_sizes(location, 3, &p)
                .unwrap_err()
                .contains("is damaged")
        );
        // Another producer's partition in this one's place.
        let other = IndexProducer {
            attempt: 1,
            ..test_producer()
        };
        let refused = completed_sizes(location, 2, &other).unwrap_err();
        assert!(refused.contains("names job `j`"), "{refused}");
        assert!(refused.contains("attempt 1 registered there"), "{refused}");
        fs::write(format!("{location}/{DATA_FILE}"), [7u8; 7]).unwrap();
        assert!(
            completed_sizes(location, 2, &p)
                .unwrap_err()
                .contains("has 7 bytes")
        );
        fs::remove_file(format!("{location}/{DATA_FILE}")).unwrap();
        assert!(
            completed_sizes(location, 2, &p)
                .unwrap_err()
                .contains("unreadable")
        );
        release_location(dir.to_str().unwrap(), location).unwrap();
        assert_eq!(completed_sizes(location, 2, &p).unwrap(), None);
        fs::remove_dir_all(&dir).unwrap();
    }
}
