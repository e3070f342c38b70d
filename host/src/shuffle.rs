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
//! A sequence of records, nothing before or after. All integers are
//! little-endian `u32`.
//!
//! | bytes | meaning |
//! |---|---|
//! | 4 | number of fields `n` |
//! | then `n` times: 4 | field length `len` in bytes |
//! | `len` | the field, UTF-8 |
//!
//! A file that ends inside a record is corrupt ([`ShuffleError::Corrupt`]);
//! it cannot happen to a partition with `COMPLETE`, which is created only
//! after every subpartition was fsynced.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use crate::grant::{self, GrantError, PluginDir};

/// Name of the marker file that makes a partition exist.
pub const COMPLETE_MARKER: &str = "COMPLETE";
/// Size of the length prefixes in a subpartition file, bytes.
pub const LEN_BYTES: usize = 4;
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
        })
    }

    /// Number of subpartitions.
    pub fn num_subpartitions(&self) -> u32 {
        self.files.len() as u32
    }

    /// Appends one record to subpartition `sub`.
    ///
    /// # Errors
    ///
    /// [`ShuffleError::Io`] if the write fails.
    ///
    /// # Panics
    ///
    /// If `sub` is out of range or a field is longer than 4 GiB.
    pub fn write<S: AsRef<str>>(&mut self, sub: u32, row: &[S]) -> Result<(), ShuffleError> {
        let f = &mut self.files[sub as usize];
        let mut n = LEN_BYTES as u64;
        let res = (|| {
            f.write_all(&(row.len() as u32).to_le_bytes())?;
            for field in row {
                let b = field.as_ref().as_bytes();
                let len = u32::try_from(b.len()).expect("field shorter than 4 GiB");
                f.write_all(&len.to_le_bytes())?;
                f.write_all(b)?;
                n += (LEN_BYTES + b.len()) as u64;
            }
            Ok(())
        })();
        res.map_err(|source| ShuffleError::Io {
            path: subpartition_path(&self.location, sub),
            source,
        })?;
        self.bytes[sub as usize] += n;
        Ok(())
    }

    /// Flushes and fsyncs every subpartition, then creates `COMPLETE` and
    /// fsyncs the directory. Returns the bytes of each subpartition.
    ///
    /// # Errors
    ///
    /// [`ShuffleError::Io`] if a flush, sync or the marker fails.
    pub fn finish(self) -> Result<Vec<u64>, ShuffleError> {
        for (i, f) in self.files.into_iter().enumerate() {
            let path = subpartition_path(&self.location, i as u32);
            let f = f.into_inner().map_err(|e| ShuffleError::Io {
                path: path.clone(),
                source: e.into_error(),
            })?;
            // An empty file has no data to sync: the directory fsync below
            // makes its entry durable, and its length is 0 from creation.
            if self.bytes[i] > 0 {
                f.sync_data()
                    .map_err(|source| ShuffleError::Io { path, source })?;
            }
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
    offset: u64,
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
        })
    }

    /// The next record, or `None` at the end of the file.
    ///
    /// # Errors
    ///
    /// [`ShuffleError::Corrupt`] for a truncated record or a field that is
    /// not UTF-8; [`ShuffleError::Io`] for a read error.
    pub fn next_record(&mut self) -> Result<Option<Vec<String>>, ShuffleError> {
        let start = self.offset;
        let mut len = [0u8; LEN_BYTES];
        match read_full(&mut self.input, &mut len) {
            Ok(0) => return Ok(None),
            Ok(LEN_BYTES) => {}
            Ok(_) => return Err(self.corrupt(start, "truncated field count")),
            Err(source) => return Err(self.io(source)),
        }
        let n = u32::from_le_bytes(len) as usize;
        let mut row = Vec::with_capacity(n.min(1024));
        let mut pos = start + LEN_BYTES as u64;
        for _ in 0..n {
            if read_full(&mut self.input, &mut len).map_err(|s| self.io(s))? != LEN_BYTES {
                return Err(self.corrupt(start, "truncated field length"));
            }
            let l = u32::from_le_bytes(len) as usize;
            let mut buf = vec![0u8; l];
            if read_full(&mut self.input, &mut buf).map_err(|s| self.io(s))? != l {
                return Err(self.corrupt(start, "truncated field"));
            }
            row.push(
                String::from_utf8(buf).map_err(|_| self.corrupt(start, "field is not UTF-8"))?,
            );
            pos += (LEN_BYTES + l) as u64;
        }
        self.offset = pos;
        Ok(Some(row))
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
        assert_eq!(bytes, vec![4 + 5 + 6 + 4 + 6, 4 + 4]);
        assert_eq!(
            fs::metadata(subpartition_path(&loc, 0))
                .expect("meta")
                .len(),
            bytes[0]
        );
        let mut r = SubpartitionReader::open(&loc, 0).expect("open");
        assert_eq!(
            r.next_record().expect("read"),
            Some(vec!["a".into(), "bc".into()])
        );
        assert_eq!(r.next_record().expect("read"), Some(vec!["é".into()]));
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

    #[test]
    fn a_truncated_record_is_corrupt() {
        let dir = tempfile::tempdir().expect("tempdir");
        let loc = dir.path().join("p");
        let mut w = PartitionWriter::create(&loc, 1).expect("create");
        w.write(0, &["hello"]).expect("write");
        w.finish().expect("finish");
        let p = subpartition_path(&loc, 0);
        let data = fs::read(&p).expect("read");
        fs::write(&p, &data[..data.len() - 2]).expect("write");
        let mut r = SubpartitionReader::open(&loc, 0).expect("open");
        assert!(matches!(
            r.next_record(),
            Err(ShuffleError::Corrupt { offset: 0, .. })
        ));
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
