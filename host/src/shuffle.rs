//! The host side of blocking result partitions: the on-disk format of a
//! subpartition, the writer a producer uses, the reader a consumer uses, and
//! the stable key hash that routes records on `hash` edges.
//!
//! A partition lives in the directory its shuffle descriptor names (Flink's
//! `ShuffleDescriptor`; the shuffle master plugin decides it). The producer
//! writes subpartition `i` to `<location>/sub-<i>.data`, fsyncs every
//! non-empty file, then creates `<location>/COMPLETE` and fsyncs the directory. A partition
//! without `COMPLETE` does not exist: a consumer that finds it missing fails
//! with [`ShuffleError::PartitionNotFound`], and the scheduler re-runs the
//! producer first (Flink's `PartitionNotFoundException` failover).
//!
//! The location is a plugin's answer, so the writer and reader take a
//! [`PluginDir`] checked against the shuffle master's writable grants and
//! do every file operation through the grant's capability, never following
//! a symlink (`crate::grant`, rule in `docs/write-a-plugin.md`).
//!
//! # Subpartition file format
//!
//! A sequence of blocks, then an end marker; nothing before or after. All
//! integers are little-endian `u32`. Each block carries whole records and
//! its own CRC32C (Castagnoli), so damage anywhere — a flipped byte, a file
//! cut at a record or block boundary or in the middle of a record, a block
//! lost from the middle — is caught when the data is read.
//!
//! | bytes | meaning |
//! |---|---|
//! | 4 | block payload length `p` in bytes, `p > 0` ([`BLOCK_HEADER_BYTES`] with the next field) |
//! | 4 | CRC32C of the `p` payload bytes |
//! | `p` | records, whole (see below) |
//! | … | more blocks |
//! | 4 | `0`: the end marker ([`END_MARKER_BYTES`] with the next field) |
//! | 4 | number of records in the file (modulo 2³²) |
//!
//! A record inside a payload:
//!
//! | bytes | meaning |
//! |---|---|
//! | 4 | number of fields `n` |
//! | then `n` times: 4 | field length `len` in bytes |
//! | `len` | the field, UTF-8 |
//!
//! The writer closes a block once its payload reaches [`BLOCK_BYTES`] (a
//! single larger record makes a larger block). An empty subpartition is
//! the end marker alone (8 bytes). The byte counts a producer reports (and
//! the event log records) are the file sizes, framing included.
//!
//! A file that does not follow this format — a checksum that does not match,
//! a block or record that ends early, no end marker, a record count that
//! differs, bytes after the end marker — is corrupt ([`ShuffleError::Corrupt`]).
//! This cannot happen to an intact partition with `COMPLETE`, which is
//! created only after every subpartition was fsynced; a consumer that meets
//! it treats the partition as lost, like a missing one, and the producer runs
//! again (docs/recovery.md, "Damaged partitions").

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use crate::grant::{self, GrantError, PluginDir};

/// Name of the marker file that makes a partition exist.
pub const COMPLETE_MARKER: &str = "COMPLETE";
/// Size of the length prefixes in a subpartition file, bytes.
pub const LEN_BYTES: usize = 4;
/// Size of a block header (payload length, CRC32C), bytes.
pub const BLOCK_HEADER_BYTES: usize = 8;
/// Size of the end marker (`0`, record count), bytes.
pub const END_MARKER_BYTES: usize = 8;
/// Payload size at which the writer closes a block, bytes.
pub const BLOCK_BYTES: usize = 32 * 1024;
/// Buffer size of each subpartition writer and reader, bytes.
pub const IO_BUFFER: usize = 64 * 1024;

/// Errors of partition I/O.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ShuffleError {
    /// The partition has no `COMPLETE` marker (or its directory is gone).
    #[error("partition not found at {location}")]
    PartitionNotFound {
        /// The partition's directory.
        location: PathBuf,
    },
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The partition's directory is not one the host may use: outside the
    /// shuffle master's writable grants, or a symlink on the way
    /// (`crate::grant`). Names the plugin.
    #[error(transparent)]
    Grant(GrantError),
    /// A subpartition file is not in the format above.
    #[error("{path}: corrupt subpartition at byte {offset}: {reason}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Offset of the record that is bad.
        offset: u64,
        /// What is wrong.
        reason: &'static str,
    },
}

/// Path of subpartition `i` of the partition at `location`.
pub fn subpartition_path(location: &Path, i: u32) -> PathBuf {
    location.join(subpartition_name(i))
}

/// File name of subpartition `i` inside its partition's directory.
pub fn subpartition_name(i: u32) -> String {
    format!("sub-{i}.data")
}

fn grant_error(location: &Path, e: GrantError) -> ShuffleError {
    ShuffleError::Io {
        path: location.to_path_buf(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string()),
    }
}

/// Whether the partition at `location` exists (has its `COMPLETE` marker).
pub fn partition_exists(location: &Path) -> bool {
    location.join(COMPLETE_MARKER).is_file()
}

/// FNV-1a, 64 bit, over the key fields separated by `0x1f`: stable across
/// processes and runs (unlike `RandomState`), so a re-run routes every
/// record to the same subpartition.
pub fn key_hash<S: AsRef<str>>(row: &[S], key: &[usize]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h = OFFSET;
    for (n, &k) in key.iter().enumerate() {
        if n > 0 {
            h ^= 0x1f;
            h = h.wrapping_mul(PRIME);
        }
        for &b in row[k].as_ref().as_bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(PRIME);
        }
    }
    h
}

/// Writes one result partition: one buffered file per subpartition.
#[derive(Debug)]
pub struct PartitionWriter {
    location: PathBuf,
    /// The partition's directory, opened without following symlinks.
    dir: cap_std::fs::Dir,
    files: Vec<BufWriter<File>>,
    bytes: Vec<u64>,
    /// Per subpartition: the payload of the block being filled.
    blocks: Vec<Vec<u8>>,
    /// Per subpartition: records written (modulo 2³², as the end marker).
    records: Vec<u32>,
}

impl PartitionWriter {
    /// Creates `location` (and parents) afresh, removing what an earlier
    /// try left there, and opens `num_subpartitions` files. For a directory
    /// the host chose itself; a location a shuffle master returned goes
    /// through [`PartitionWriter::create_in`].
    ///
    /// # Errors
    ///
    /// [`ShuffleError::Io`] if the directory or a file cannot be created.
    pub fn create(location: &Path, num_subpartitions: u32) -> Result<Self, ShuffleError> {
        // The host chose the path: its parents are made as needed.
        if let Some(parent) = location.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|source| ShuffleError::Io {
                path: parent.to_path_buf(),
                source,
            })?;
        }
        let dir = PluginDir::host_chosen(location).map_err(|e| grant_error(location, e))?;
        Self::create_in(&dir, num_subpartitions)
    }

    /// As [`PartitionWriter::create`], for a directory inside a shuffle
    /// master's writable grant: every file operation goes through the
    /// grant's capability and never follows a symlink (`crate::grant`).
    ///
    /// # Errors
    ///
    /// [`ShuffleError::Grant`] if the directory cannot be created there
    /// (e.g. a symlink on the way); [`ShuffleError::Io`] for a file.
    pub fn create_in(location: &PluginDir, num_subpartitions: u32) -> Result<Self, ShuffleError> {
        let dir = location.create_fresh().map_err(ShuffleError::Grant)?;
        let location_path = location.path();
        let mut files = Vec::with_capacity(num_subpartitions as usize);
        for i in 0..num_subpartitions {
            let path = subpartition_path(location_path, i);
            let f = grant::create_new_file(&dir, &subpartition_name(i))
                .map_err(|source| ShuffleError::Io { path, source })?;
            files.push(BufWriter::with_capacity(IO_BUFFER, f));
        }
        Ok(Self {
            location: location_path.to_path_buf(),
            dir,
            files,
            bytes: vec![0; num_subpartitions as usize],
            blocks: vec![Vec::new(); num_subpartitions as usize],
            records: vec![0; num_subpartitions as usize],
        })
    }

    /// Number of subpartitions.
    pub fn num_subpartitions(&self) -> u32 {
        self.files.len() as u32
    }

    /// Appends one record to subpartition `sub` (written out when its block
    /// is full, or by [`PartitionWriter::finish`]).
    ///
    /// # Errors
    ///
    /// [`ShuffleError::Io`] if writing a full block fails.
    ///
    /// # Panics
    ///
    /// If `sub` is out of range or a field is longer than 4 GiB.
    pub fn write<S: AsRef<str>>(&mut self, sub: u32, row: &[S]) -> Result<(), ShuffleError> {
        let block = &mut self.blocks[sub as usize];
        encode_record(block, row);
        self.records[sub as usize] = self.records[sub as usize].wrapping_add(1);
        if block.len() >= BLOCK_BYTES {
            self.write_block(sub)?;
        }
        Ok(())
    }

    /// Writes the pending block of `sub` (if any) with its header.
    fn write_block(&mut self, sub: u32) -> Result<(), ShuffleError> {
        let payload = std::mem::take(&mut self.blocks[sub as usize]);
        if payload.is_empty() {
            return Ok(());
        }
        let header = block_header(&payload);
        self.put(sub, &header)?;
        self.put(sub, &payload)
    }

    fn put(&mut self, sub: u32, bytes: &[u8]) -> Result<(), ShuffleError> {
        self.files[sub as usize]
            .write_all(bytes)
            .map_err(|source| ShuffleError::Io {
                path: subpartition_path(&self.location, sub),
                source,
            })?;
        self.bytes[sub as usize] += bytes.len() as u64;
        Ok(())
    }

    /// Writes every pending block and the end markers.
    fn write_tails(&mut self) -> Result<(), ShuffleError> {
        for sub in 0..self.num_subpartitions() {
            self.write_block(sub)?;
            let mut end = [0u8; END_MARKER_BYTES];
            end[LEN_BYTES..].copy_from_slice(&self.records[sub as usize].to_le_bytes());
            self.put(sub, &end)?;
        }
        Ok(())
    }

    /// Writes the last block and the end marker of every subpartition,
    /// flushes and fsyncs them, then creates `COMPLETE` and fsyncs the
    /// directory. Returns the bytes of each subpartition (file sizes).
    ///
    /// # Errors
    ///
    /// [`ShuffleError::Io`] if a flush, sync or the marker fails.
    pub fn finish(mut self) -> Result<Vec<u64>, ShuffleError> {
        self.write_tails()?;
        for (i, f) in self.files.into_iter().enumerate() {
            let path = subpartition_path(&self.location, i as u32);
            let f = f.into_inner().map_err(|e| ShuffleError::Io {
                path: path.clone(),
                source: e.into_error(),
            })?;
            f.sync_data()
                .map_err(|source| ShuffleError::Io { path, source })?;
        }
        let marker = self.location.join(COMPLETE_MARKER);
        grant::create_new_file(&self.dir, COMPLETE_MARKER)
            .and_then(|f| f.sync_all())
            .map_err(|source| ShuffleError::Io {
                path: marker,
                source,
            })?;
        grant::sync_opened_dir(&self.dir);
        Ok(self.bytes)
    }
}

/// Fsyncs a directory so renames and new entries in it are durable.
/// Best effort: some file systems refuse to open directories.
pub fn sync_dir(dir: &Path) {
    if let Ok(d) = File::open(dir) {
        let _ignored = d.sync_all();
    }
}

/// Reads the records of one subpartition in order.
#[derive(Debug)]
pub struct SubpartitionReader {
    path: PathBuf,
    input: BufReader<File>,
    /// File offset of the next block header.
    offset: u64,
    /// File offset of the current block's header.
    block_offset: u64,
    /// Payload of the current block, and the read position in it.
    block: Vec<u8>,
    at: usize,
    /// Records read so far (modulo 2³²).
    records: u32,
    /// The end marker was read and checked.
    ended: bool,
}

impl SubpartitionReader {
    /// Opens subpartition `sub` of the partition at `location`, a directory
    /// the host chose itself; see [`SubpartitionReader::open_in`].
    ///
    /// # Errors
    ///
    /// As [`SubpartitionReader::open_in`].
    pub fn open(location: &Path, sub: u32) -> Result<Self, ShuffleError> {
        let dir = PluginDir::host_chosen(location).map_err(|e| grant_error(location, e))?;
        Self::open_in(&dir, sub)
    }

    /// Opens subpartition `sub` of the partition at `location` (inside a
    /// shuffle master's grant) without following any symlink.
    ///
    /// # Errors
    ///
    /// [`ShuffleError::PartitionNotFound`] if the directory, its
    /// `COMPLETE` marker or the file is missing; [`ShuffleError::Grant`]
    /// for a symlink on the way; [`ShuffleError::Io`] otherwise.
    pub fn open_in(location: &PluginDir, sub: u32) -> Result<Self, ShuffleError> {
        let not_found = || ShuffleError::PartitionNotFound {
            location: location.path().to_path_buf(),
        };
        let dir = match location.open() {
            Ok(dir) => dir,
            Err(e) if e.is_not_found() => return Err(not_found()),
            Err(e) => return Err(ShuffleError::Grant(e)),
        };
        if !dir
            .symlink_metadata(COMPLETE_MARKER)
            .is_ok_and(|m| m.is_file())
        {
            return Err(not_found());
        }
        let path = subpartition_path(location.path(), sub);
        let f = grant::open_file_nofollow(&dir, &subpartition_name(sub)).map_err(|source| {
            if source.kind() == std::io::ErrorKind::NotFound {
                not_found()
            } else {
                ShuffleError::Io {
                    path: path.clone(),
                    source,
                }
            }
        })?;
        Ok(Self {
            path,
            input: BufReader::with_capacity(IO_BUFFER, f),
            offset: 0,
            block_offset: 0,
            block: Vec::new(),
            at: 0,
            records: 0,
            ended: false,
        })
    }

    /// The next record, or `None` after the end marker.
    ///
    /// # Errors
    ///
    /// [`ShuffleError::Corrupt`] when the file is not in the format above
    /// (checksum mismatch, truncated block or record, missing end marker,
    /// wrong record count, trailing bytes, a field that is not UTF-8);
    /// [`ShuffleError::Io`] for a read error.
    pub fn next_record(&mut self) -> Result<Option<Vec<String>>, ShuffleError> {
        loop {
            if self.ended {
                return Ok(None);
            }
            if self.at < self.block.len() {
                let row = decode_record(&self.block, &mut self.at)
                    .map_err(|reason| self.corrupt(self.block_offset, reason))?;
                self.records = self.records.wrapping_add(1);
                return Ok(Some(row));
            }
            self.next_block()?;
        }
    }

    /// Reads the next block (checking its CRC32C) or the end marker.
    fn next_block(&mut self) -> Result<(), ShuffleError> {
        let start = self.offset;
        let mut header = [0u8; BLOCK_HEADER_BYTES];
        match read_full(&mut self.input, &mut header).map_err(|s| self.io(s))? {
            BLOCK_HEADER_BYTES => {}
            0 => return Err(self.corrupt(start, "the file ends without its end marker")),
            _ => return Err(self.corrupt(start, "truncated block header")),
        }
        let (len, crc) = header.split_at(LEN_BYTES);
        let len = u32::from_le_bytes(len.try_into().expect("4 bytes"));
        let crc = u32::from_le_bytes(crc.try_into().expect("4 bytes"));
        if len == 0 {
            if crc != self.records {
                return Err(self.corrupt(
                    start,
                    "the end marker counts other records than the file holds",
                ));
            }
            let mut rest = [0u8; 1];
            if read_full(&mut self.input, &mut rest).map_err(|s| self.io(s))? != 0 {
                return Err(self.corrupt(start, "bytes after the end marker"));
            }
            self.ended = true;
            return Ok(());
        }
        // `take` + `read_to_end` grows the buffer only as bytes arrive: a
        // damaged length cannot make the reader allocate more than the file holds.
        let mut payload = Vec::new();
        (&mut self.input)
            .take(u64::from(len))
            .read_to_end(&mut payload)
            .map_err(|s| self.io(s))?;
        if payload.len() != len as usize {
            return Err(self.corrupt(start, "truncated block"));
        }
        if crc32c::crc32c(&payload) != crc {
            return Err(self.corrupt(start, "block checksum (CRC32C) does not match"));
        }
        self.block_offset = start;
        self.offset = start + (BLOCK_HEADER_BYTES as u64) + u64::from(len);
        self.block = payload;
        self.at = 0;
        Ok(())
    }

    fn io(&self, source: std::io::Error) -> ShuffleError {
        ShuffleError::Io {
            path: self.path.clone(),
            source,
        }
    }

    fn corrupt(&self, offset: u64, reason: &'static str) -> ShuffleError {
        ShuffleError::Corrupt {
            path: self.path.clone(),
            offset,
            reason,
        }
    }
}

/// Appends `row` to a block payload in the record format above.
///
/// # Panics
///
/// If a field or the field count does not fit in a `u32`.
fn encode_record<S: AsRef<str>>(out: &mut Vec<u8>, row: &[S]) {
    let n = u32::try_from(row.len()).expect("fewer than 2^32 fields");
    out.extend_from_slice(&n.to_le_bytes());
    for field in row {
        let b = field.as_ref().as_bytes();
        let len = u32::try_from(b.len()).expect("field shorter than 4 GiB");
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(b);
    }
}

/// The header of a block with `payload`: its length and CRC32C.
fn block_header(payload: &[u8]) -> [u8; BLOCK_HEADER_BYTES] {
    let len = u32::try_from(payload.len()).expect("block shorter than 4 GiB");
    let mut header = [0u8; BLOCK_HEADER_BYTES];
    header[..LEN_BYTES].copy_from_slice(&len.to_le_bytes());
    header[LEN_BYTES..].copy_from_slice(&crc32c::crc32c(payload).to_le_bytes());
    header
}

/// Decodes the record at `*at` of a block payload and advances `*at`.
fn decode_record(block: &[u8], at: &mut usize) -> Result<Vec<String>, &'static str> {
    let mut pos = *at;
    let mut take = |n: usize| -> Result<&[u8], &'static str> {
        let end = pos
            .checked_add(n)
            .filter(|&e| e <= block.len())
            .ok_or("a record runs past the end of its block")?;
        let bytes = &block[pos..end];
        pos = end;
        Ok(bytes)
    };
    let word = |b: &[u8]| u32::from_le_bytes(b.try_into().expect("4 bytes")) as usize;
    let n = word(take(LEN_BYTES)?);
    let mut row = Vec::with_capacity(n.min(1024));
    for _ in 0..n {
        let len = word(take(LEN_BYTES)?);
        let field = take(len)?;
        row.push(String::from_utf8(field.to_vec()).map_err(|_| "field is not UTF-8")?);
    }
    *at = pos;
    Ok(row)
}

fn read_full(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn records_round_trip_and_sizes_are_counted() {
        let dir = tempfile::tempdir().expect("tempdir");
        let loc = dir.path().join("p");
        let mut w = PartitionWriter::create(&loc, 2).expect("create");
        w.write(0, &["a", "bc"]).expect("write");
        w.write(1, &[""]).expect("write");
        w.write(0, &["é"]).expect("write");
        let bytes = w.finish().expect("finish");
        // One block each: header, records, end marker.
        let head_and_end = (BLOCK_HEADER_BYTES + END_MARKER_BYTES) as u64;
        assert_eq!(
            bytes,
            vec![head_and_end + (4 + 5 + 6) + (4 + 6), head_and_end + 4 + 4]
        );
        for (i, &b) in bytes.iter().enumerate() {
            let len = fs::metadata(subpartition_path(&loc, i as u32))
                .expect("meta")
                .len();
            assert_eq!(len, b, "reported bytes are the file size");
        }
        let mut r = SubpartitionReader::open(&loc, 0).expect("open");
        assert_eq!(
            r.next_record().expect("read"),
            Some(vec!["a".into(), "bc".into()])
        );
        assert_eq!(r.next_record().expect("read"), Some(vec!["é".into()]));
        assert_eq!(r.next_record().expect("read"), None);
        assert_eq!(r.next_record().expect("read again"), None);
    }

    #[test]
    fn an_empty_subpartition_is_its_end_marker_alone() {
        let dir = tempfile::tempdir().expect("tempdir");
        let loc = dir.path().join("p");
        let bytes = PartitionWriter::create(&loc, 1)
            .expect("create")
            .finish()
            .expect("finish");
        assert_eq!(bytes, vec![END_MARKER_BYTES as u64]);
        let mut r = SubpartitionReader::open(&loc, 0).expect("open");
        assert_eq!(r.next_record().expect("read"), None);
    }

    #[test]
    fn a_partition_without_its_marker_is_not_found() {
        let dir = tempfile::tempdir().expect("tempdir");
        let loc = dir.path().join("p");
        let mut w = PartitionWriter::create(&loc, 1).expect("create");
        w.write(0, &["x"]).expect("write");
        drop(w);
        assert!(matches!(
            SubpartitionReader::open(&loc, 0),
            Err(ShuffleError::PartitionNotFound { .. })
        ));
    }

    /// Writes `rows` rows of 100 bytes into one subpartition (several
    /// blocks) and returns the file's path and bytes.
    fn many_blocks(loc: &Path, rows: usize) -> (PathBuf, Vec<u8>) {
        let mut w = PartitionWriter::create(loc, 1).expect("create");
        let field = "x".repeat(92);
        for _ in 0..rows {
            w.write(0, &[field.as_str()]).expect("write");
        }
        w.finish().expect("finish");
        let p = subpartition_path(loc, 0);
        let data = fs::read(&p).expect("read");
        (p, data)
    }

    /// Reads every record; the error if the file is corrupt, else the count.
    fn read_all(loc: &Path) -> Result<usize, ShuffleError> {
        let mut r = SubpartitionReader::open(loc, 0)?;
        let mut n = 0;
        while r.next_record()?.is_some() {
            n += 1;
        }
        Ok(n)
    }

    fn corrupt_reason(loc: &Path) -> &'static str {
        match read_all(loc) {
            Err(ShuffleError::Corrupt { reason, .. }) => reason,
            other => panic!("expected corrupt data, got {other:?}"),
        }
    }

    #[test]
    fn a_large_subpartition_spans_blocks_and_reads_back_whole() {
        let dir = tempfile::tempdir().expect("tempdir");
        let loc = dir.path().join("p");
        let (_, data) = many_blocks(&loc, 1000);
        assert!(data.len() > 2 * BLOCK_BYTES, "several blocks were written");
        assert_eq!(read_all(&loc).expect("intact"), 1000);
    }

    #[test]
    fn damage_anywhere_in_a_subpartition_is_corrupt_when_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let loc = dir.path().join("p");
        let (p, data) = many_blocks(&loc, 1000);
        let first_block = BLOCK_HEADER_BYTES + BLOCK_BYTES.next_multiple_of(100);
        let cases: Vec<(&str, Vec<u8>, &str)> = vec![
            (
                "cut at a block boundary",
                data[..first_block].to_vec(),
                "the file ends without its end marker",
            ),
            (
                "cut at a record boundary inside a block",
                data[..first_block + BLOCK_HEADER_BYTES + 500].to_vec(),
                "truncated block",
            ),
            (
                "cut in the middle of a record",
                data[..BLOCK_HEADER_BYTES + 250].to_vec(),
                "truncated block",
            ),
            (
                "cut inside the end marker",
                data[..data.len() - 3].to_vec(),
                "truncated block header",
            ),
            (
                "a flipped byte in a record",
                {
                    let mut d = data.clone();
                    d[BLOCK_HEADER_BYTES + 150] ^= 0x01;
                    d
                },
                "block checksum (CRC32C) does not match",
            ),
            (
                "the first block gone",
                data[first_block..].to_vec(),
                "the end marker counts other records than the file holds",
            ),
            (
                "bytes after the end marker",
                {
                    let mut d = data.clone();
                    d.push(0);
                    d
                },
                "bytes after the end marker",
            ),
        ];
        for (what, bytes, want) in cases {
            fs::write(&p, &bytes).expect("damage");
            assert_eq!(corrupt_reason(&loc), want, "{what}");
        }
    }

    #[test]
    fn a_record_that_does_not_fit_its_block_is_corrupt() {
        let mut block = Vec::new();
        encode_record(&mut block, &["abc", "de"]);
        let mut at = 0;
        assert_eq!(
            decode_record(&block, &mut at).expect("whole"),
            vec!["abc".to_string(), "de".to_string()]
        );
        assert_eq!(at, block.len());
        let mut at = 0;
        assert_eq!(
            decode_record(&block[..block.len() - 1], &mut at),
            Err("a record runs past the end of its block")
        );
        let mut bad = Vec::new();
        encode_record(&mut bad, &["ab"]);
        let last = bad.len() - 1;
        bad[last] = 0xff;
        assert_eq!(decode_record(&bad, &mut 0), Err("field is not UTF-8"));
    }

    #[test]
    fn key_hash_is_stable_and_separates_fields() {
        assert_eq!(key_hash(&["a"], &[0]), key_hash(&["a".to_string()], &[0]));
        assert_ne!(
            key_hash(&["ab", "c"], &[0, 1]),
            key_hash(&["a", "bc"], &[0, 1])
        );
        // FNV-1a 64 of "a", a published test vector.
        assert_eq!(key_hash(&["a"], &[0]), 0xaf63_dc4c_8601_ec8c);
    }
}
