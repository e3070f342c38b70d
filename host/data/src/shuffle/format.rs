//! The bytes of a result partition: the named constants of
//! docs/shuffle-format.md, the block framing of `data` and the `index`
//! codec (version 2, which names the producer attempt and checks each
//! entry's blocks; version 1 is still parsed, without that binding).
//! Change both in the same commit.

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_buffer::Buffer;
use arrow_ipc::MetadataVersion;
use arrow_ipc::reader::StreamDecoder;
use arrow_ipc::writer::{IpcWriteOptions, StreamWriter};
use arrow_schema::ArrowError;

/// Name of the file that holds every block of a result partition.
pub const DATA_FILE: &str = "data";
/// Name of the index file; its existence means "partition complete".
pub const INDEX_FILE: &str = "index";
/// Name the index is written under before its rename to [`INDEX_FILE`].
pub const INDEX_TMP_FILE: &str = "index.tmp";
/// First 8 bytes of an index.
pub const INDEX_MAGIC: [u8; 8] = *b"CHSHUFX1";
/// Format version this code writes: the index names its producer
/// ([`PartitionProducer`]) and each entry carries its record count and the
/// CRC32C of its block headers.
pub const FORMAT_VERSION: u32 = 2;
/// The first format version: no producer, entries of
/// [`INDEX_ENTRY_BYTES_V1`] bytes. Still parsed (a consumer task refuses
/// it, since it cannot tell whose partition it is).
pub const FORMAT_VERSION_1: u32 = 1;
/// Size of a block header in `data` (payload length, CRC32C), bytes.
pub const BLOCK_HEADER_BYTES: usize = 8;
/// Size of the index header (magic, version, subpartitions, data length,
/// region count), bytes.
pub const INDEX_HEADER_BYTES: usize = 28;
/// Size of one index entry of version 2 (subpartition, offset, length,
/// records, CRC32C of its block headers), bytes.
pub const INDEX_ENTRY_BYTES: usize = 32;
/// Size of one index entry of version 1 (subpartition, offset, length), bytes.
pub const INDEX_ENTRY_BYTES_V1: usize = 20;
/// Longest name (job, data set, job vertex) the producer part of an index
/// of version 2 may hold, bytes of UTF-8.
pub const MAX_NAME_BYTES: usize = 4096;
/// Size of the CRC32C that closes the index, bytes.
pub const INDEX_CRC_BYTES: usize = 4;
/// Default bound of a writer's in-memory buffer, bytes of batches: when
/// it is reached the writer spills a region.
pub const SPILL_BYTES: usize = 16 << 20;
/// Most rows the writer merges into one block (`coordhost_model::value::BATCH_ROWS`).
pub const BLOCK_ROWS: usize = 8192;
/// Alignment of the buffers inside an IPC message, bytes.
const IPC_ALIGNMENT: usize = 8;
/// The end-of-stream marker that closes every block's IPC stream.
const IPC_END: [u8; 8] = [0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0];

/// Who wrote a result partition, as an index of version 2 names it: the
/// job, the intermediate data set (`<from>-<to>` job vertex ids), and the
/// producer's execution attempt (job vertex id, subtask, attempt number).
/// A consumer compares it with the producer it expects
/// (docs/shuffle-format.md, "Reading").
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PartitionProducer {
    /// The job's name.
    pub job: String,
    /// The intermediate data set (the edge's `<from>-<to>`).
    pub data_set: String,
    /// The producer's job vertex id.
    pub job_vertex: String,
    /// The producer's subtask.
    pub subtask: u32,
    /// The producer's attempt number.
    pub attempt: u32,
}

impl std::fmt::Display for PartitionProducer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "job `{}` data set `{}` producer `{}` subtask {} attempt {}",
            self.job, self.data_set, self.job_vertex, self.subtask, self.attempt
        )
    }
}

/// The `index` bytes of a finished partition of `num_subpartitions`
/// subpartitions into which `producer` wrote nothing (its `data` file is
/// empty): byte for byte what [`PartitionWriter::finish`](super::PartitionWriter::finish)
/// writes for such a producer (format version 2, docs/shuffle-format.md).
/// For tools that lay out many partitions at once, without a writer's three
/// `fsync`s each (the scale bench, `host/benches/scale.rs`).
#[must_use]
pub fn empty_index(num_subpartitions: u32, producer: PartitionProducer) -> Vec<u8> {
    Index {
        version: FORMAT_VERSION,
        num_subpartitions,
        data_len: 0,
        producer: Some(producer),
        regions: Vec::new(),
    }
    .encode()
}

/// One index entry: the bytes of subpartition `sub` within one region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Entry {
    /// The subpartition.
    pub sub: u32,
    /// Offset of its first block in `data`.
    pub offset: u64,
    /// Length of its blocks in this region, framing included.
    pub len: u64,
    /// Rows in its blocks (version 2; 0 in version 1).
    pub records: u64,
    /// CRC32C of its blocks' headers, in order (version 2; 0 in version 1).
    pub headers_crc: u32,
}

/// A parsed index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Index {
    /// [`FORMAT_VERSION`] or [`FORMAT_VERSION_1`].
    pub version: u32,
    /// Number of subpartitions of the partition.
    pub num_subpartitions: u32,
    /// Length of `data`, bytes.
    pub data_len: u64,
    /// Who wrote it (`None` in version 1, which does not say).
    pub producer: Option<PartitionProducer>,
    /// The regions in the order written, each its entries by subpartition.
    pub regions: Vec<Vec<Entry>>,
}

/// Where an index or block is bad: offset in its file and what is wrong.
pub type Bad = (u64, &'static str);

impl Index {
    /// The index's bytes, CRC32C included, in its `version`'s layout.
    ///
    /// # Panics
    ///
    /// If a version-2 index has no producer, or a name is longer than
    /// [`MAX_NAME_BYTES`].
    pub fn encode(&self) -> Vec<u8> {
        let v2 = self.version != FORMAT_VERSION_1;
        let entries: usize = self.regions.iter().map(Vec::len).sum();
        let entry_bytes = if v2 {
            INDEX_ENTRY_BYTES
        } else {
            INDEX_ENTRY_BYTES_V1
        };
        let mut out = Vec::with_capacity(
            INDEX_HEADER_BYTES + 64 + 4 * self.regions.len() + entry_bytes * entries + 4,
        );
        out.extend_from_slice(&INDEX_MAGIC);
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&self.num_subpartitions.to_le_bytes());
        out.extend_from_slice(&self.data_len.to_le_bytes());
        out.extend_from_slice(&u32_len(self.regions.len()).to_le_bytes());
        if v2 {
            let p = self
                .producer
                .as_ref()
                .expect("an index of version 2 names its producer");
            for name in [&p.job, &p.data_set, &p.job_vertex] {
                assert!(
                    name.len() <= MAX_NAME_BYTES,
                    "a name of {} bytes",
                    name.len()
                );
                out.extend_from_slice(&u32_len(name.len()).to_le_bytes());
                out.extend_from_slice(name.as_bytes());
            }
            out.extend_from_slice(&p.subtask.to_le_bytes());
            out.extend_from_slice(&p.attempt.to_le_bytes());
        }
        for region in &self.regions {
            out.extend_from_slice(&u32_len(region.len()).to_le_bytes());
            for e in region {
                out.extend_from_slice(&e.sub.to_le_bytes());
                out.extend_from_slice(&e.offset.to_le_bytes());
                out.extend_from_slice(&e.len.to_le_bytes());
                if v2 {
                    out.extend_from_slice(&e.records.to_le_bytes());
                    out.extend_from_slice(&e.headers_crc.to_le_bytes());
                }
            }
        }
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Parses and checks an index of version 2 or 1: its CRC32C, magic,
    /// version, the producer's names (version 2: UTF-8, at most
    /// [`MAX_NAME_BYTES`]), and that its entries tile `data` from byte 0 to
    /// the recorded length, in order, with subpartitions strictly ascending
    /// within each region.
    ///
    /// # Errors
    ///
    /// The offset in the index and what is wrong.
    pub fn parse(bytes: &[u8]) -> Result<Self, Bad> {
        if bytes.len() < INDEX_HEADER_BYTES + INDEX_CRC_BYTES {
            return Err((0, "the index is shorter than its header"));
        }
        let body_len = bytes.len() - INDEX_CRC_BYTES;
        let (body, crc) = bytes.split_at(body_len);
        if crc32c::crc32c(body) != u32::from_le_bytes(crc.try_into().expect("4 bytes")) {
            return Err((body_len as u64, "index checksum (CRC32C) does not match"));
        }
        let mut r = Cursor { bytes: body, at: 0 };
        if r.take(8)? != INDEX_MAGIC {
            return Err((0, "not an index (bad magic)"));
        }
        let version = r.u32()?;
        if version != FORMAT_VERSION && version != FORMAT_VERSION_1 {
            return Err((8, "unknown index format version"));
        }
        let v2 = version == FORMAT_VERSION;
        let entry_bytes = if v2 {
            INDEX_ENTRY_BYTES
        } else {
            INDEX_ENTRY_BYTES_V1
        };
        let num_subpartitions = r.u32()?;
        let data_len = r.u64()?;
        let num_regions = r.u32()? as usize;
        let producer = if v2 {
            Some(read_producer(&mut r)?)
        } else {
            None
        };
        // Each region takes at least 4 bytes: a count cannot ask for more
        // memory than the index holds.
        if num_regions > r.left() / 4 {
            return Err((24, "more regions than the index holds"));
        }
        let mut regions = Vec::with_capacity(num_regions);
        let mut next = 0u64;
        for _ in 0..num_regions {
            let count_at = r.at as u64;
            let count = r.u32()? as usize;
            if count > r.left() / entry_bytes {
                return Err((count_at, "more entries than the index holds"));
            }
            let mut region: Vec<Entry> = Vec::with_capacity(count);
            for _ in 0..count {
                let at = r.at as u64;
                let e = read_entry(&mut r, v2)?;
                check_entry(&e, at, region.last(), num_subpartitions, next)?;
                next = e
                    .offset
                    .checked_add(e.len)
                    .ok_or((at, "an entry runs past 2^64"))?;
                region.push(e);
            }
            regions.push(region);
        }
        if r.left() != 0 {
            return Err((r.at as u64, "bytes after the last region"));
        }
        if next != data_len {
            return Err((16, "the entries do not cover the data file's length"));
        }
        Ok(Self {
            version,
            num_subpartitions,
            data_len,
            producer,
            regions,
        })
    }

    /// Bytes of every subpartition: the sum of its entries' lengths.
    pub fn bytes_per_subpartition(&self) -> Vec<u64> {
        let mut out = vec![0; self.num_subpartitions as usize];
        for e in self.regions.iter().flatten() {
            out[e.sub as usize] += e.len;
        }
        out
    }

    /// The entries of subpartition `sub`, in region order.
    pub fn entries(&self, sub: u32) -> impl Iterator<Item = Entry> + '_ {
        self.regions
            .iter()
            .flatten()
            .filter(move |e| e.sub == sub)
            .copied()
    }

    /// The `(offset, length)` ranges of subpartition `sub`, in region order.
    pub fn ranges(&self, sub: u32) -> Vec<(u64, u64)> {
        self.entries(sub).map(|e| (e.offset, e.len)).collect()
    }
}

/// `n` as a `u32` count.
///
/// # Panics
///
/// If it does not fit (more than 2³² regions or entries).
fn u32_len(n: usize) -> u32 {
    u32::try_from(n).expect("fewer than 2^32 regions and entries")
}

/// A read position in the index's bytes.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Bad> {
        let s = self
            .bytes
            .get(self.at..self.at + n)
            .ok_or((self.at as u64, "the index ends early"))?;
        self.at += n;
        Ok(s)
    }
    fn u32(&mut self) -> Result<u32, Bad> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4")))
    }
    fn u64(&mut self) -> Result<u64, Bad> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8")))
    }
    fn left(&self) -> usize {
        self.bytes.len() - self.at
    }
}

/// Appends one block holding `batch` to `out`: header (payload length,
/// CRC32C of the payload), then one Arrow IPC stream (schema, the batch,
/// end-of-stream marker), uncompressed.
///
/// # Errors
///
/// The Arrow error if the batch cannot be encoded.
pub fn encode_block(batch: &RecordBatch, out: &mut Vec<u8>) -> Result<(), ArrowError> {
    let start = out.len();
    out.extend_from_slice(&[0; BLOCK_HEADER_BYTES]);
    let options = IpcWriteOptions::try_new(IPC_ALIGNMENT, false, MetadataVersion::V5)?;
    let mut w = StreamWriter::try_new_with_options(&mut *out, &batch.schema(), options)?;
    w.write(batch)?;
    w.finish()?;
    drop(w);
    let payload = &out[start + BLOCK_HEADER_BYTES..];
    let len = u32::try_from(payload.len())
        .map_err(|_| ArrowError::InvalidArgumentError("a block of 4 GiB or more".into()))?;
    let crc = crc32c::crc32c(payload);
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
    out[start + 4..start + BLOCK_HEADER_BYTES].copy_from_slice(&crc.to_le_bytes());
    Ok(())
}

/// CRC32C of the block headers in `blocks` (whole blocks, back to back, as
/// one entry's bytes): what a version-2 entry records. Each header holds
/// its payload's length and CRC32C, so this binds the entry to every
/// payload byte without hashing the payloads twice.
///
/// # Panics
///
/// If `blocks` does not split into whole blocks (the writer encoded them).
pub fn headers_crc(blocks: &[u8]) -> u32 {
    let mut crc = 0;
    let mut at = 0;
    while at < blocks.len() {
        let header: &[u8; BLOCK_HEADER_BYTES] = blocks[at..at + BLOCK_HEADER_BYTES]
            .try_into()
            .expect("a whole header");
        crc = crc32c::crc32c_append(crc, header);
        at += BLOCK_HEADER_BYTES + block_header(header).0 as usize;
    }
    assert_eq!(at, blocks.len(), "whole blocks");
    crc
}

/// Splits a block header into payload length and CRC32C.
pub fn block_header(h: &[u8; BLOCK_HEADER_BYTES]) -> (u32, u32) {
    (
        u32::from_le_bytes(h[..4].try_into().expect("4")),
        u32::from_le_bytes(h[4..].try_into().expect("4")),
    )
}

/// Decodes a block's payload (its CRC32C already checked): exactly one
/// IPC stream holding exactly one record batch. Zero-copy where aligned.
///
/// # Errors
///
/// What is wrong, when the payload is not such a stream.
pub fn decode_payload(payload: Vec<u8>) -> Result<RecordBatch, &'static str> {
    const NOT_ONE: &str = "the block is not one Arrow IPC stream of one record batch";
    if !payload.ends_with(&IPC_END) {
        return Err(NOT_ONE);
    }
    let mut buf = Buffer::from_vec(payload);
    let mut decoder = StreamDecoder::new();
    let batch = match decoder.decode(&mut buf) {
        Ok(Some(batch)) => batch,
        _ => return Err(NOT_ONE),
    };
    match decoder.decode(&mut buf) {
        Ok(None) if buf.is_empty() && decoder.finish().is_ok() => Ok(batch),
        _ => Err(NOT_ONE),
    }
}

/// The schema-equality test the writer merges batches by.
pub fn same_schema(a: &RecordBatch, b: &RecordBatch) -> bool {
    Arc::ptr_eq(&a.schema(), &b.schema()) || a.schema() == b.schema()
}
/// The producer's names and attempt of a version 2 index.
fn read_producer(r: &mut Cursor<'_>) -> Result<PartitionProducer, Bad> {
    let mut name = || -> Result<String, Bad> {
        let at = r.at as u64;
        let len = r.u32()? as usize;
        if len > MAX_NAME_BYTES {
            return Err((at, "a producer name longer than the limit"));
        }
        String::from_utf8(r.take(len)?.to_vec())
            .map_err(|_| (at, "a producer name that is not UTF-8"))
    };
    let (job, data_set, job_vertex) = (name()?, name()?, name()?);
    Ok(PartitionProducer {
        job,
        data_set,
        job_vertex,
        subtask: r.u32()?,
        attempt: r.u32()?,
    })
}

/// One entry of a region (version 2 adds its record count and headers' CRC).
fn read_entry(r: &mut Cursor<'_>, v2: bool) -> Result<Entry, Bad> {
    let mut e = Entry {
        sub: r.u32()?,
        offset: r.u64()?,
        len: r.u64()?,
        ..Entry::default()
    };
    if v2 {
        e.records = r.u64()?;
        e.headers_crc = r.u32()?;
    }
    Ok(e)
}

/// Checks entry `e` (at offset `at` of the index) against the subpartition
/// count, the region's previous entry and where the data so far ends.
fn check_entry(
    e: &Entry,
    at: u64,
    previous: Option<&Entry>,
    num_subpartitions: u32,
    next: u64,
) -> Result<(), Bad> {
    if e.sub >= num_subpartitions {
        return Err((at, "an entry names a subpartition beyond the count"));
    }
    if previous.is_some_and(|p| p.sub >= e.sub) {
        return Err((at, "subpartitions are not strictly ascending in a region"));
    }
    if e.len == 0 {
        return Err((at, "an entry of length 0"));
    }
    if e.offset != next {
        return Err((at, "the entries do not tile the data file"));
    }
    Ok(())
}
