//! [`SubpartitionReader`]: one subpartition of a result partition, read
//! range by range from `data` as its `index` names them
//! (docs/shuffle-format.md, "Reading").

use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufReader, ErrorKind, Read, Seek, SeekFrom};
use std::ops::Range;
use std::path::{Path, PathBuf};

use arrow_array::RecordBatch;

use super::format::{
    BLOCK_HEADER_BYTES, DATA_FILE, INDEX_FILE, Index, block_header, decode_payload,
};
use super::{IO_BUFFER, ShuffleError, grant_error};
use crate::grant::{self, PluginDir};

/// Reads the batches of one subpartition (or of a range of them, one
/// after the other) in the order they were written.
pub struct SubpartitionReader {
    path: PathBuf,
    data: Data,
    /// Ranges `(offset, length)` still to read.
    ranges: VecDeque<(u64, u64)>,
    /// Offset of the next block header, and the end of its range.
    at: u64,
    end: u64,
}

/// Where the blocks come from: the partition's `data` file, or a stream of
/// the blocks of the subpartitions read (another worker's answer, in order).
enum Data {
    File(BufReader<File>),
    Stream(Box<dyn Read + Send>),
}

impl std::fmt::Debug for SubpartitionReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SubpartitionReader")
            .field("path", &self.path)
            .field("at", &self.at)
            .finish_non_exhaustive()
    }
}

/// The raw bytes of some subpartitions of a partition on disk: the opened
/// `data` file and the `(offset, length)` ranges to send, in order. What a
/// worker serves to a consumer on another worker
/// ([`SubpartitionReader::from_stream`] reads it there).
#[derive(Debug)]
pub struct RawRanges {
    /// The `data` file (for messages).
    pub path: PathBuf,
    /// The opened `data` file.
    pub data: File,
    /// Ranges `(offset, length)` of `data`, in reading order.
    pub ranges: Vec<(u64, u64)>,
}

impl RawRanges {
    /// Total bytes of the ranges.
    pub fn total(&self) -> u64 {
        self.ranges.iter().map(|r| r.1).sum()
    }
}

impl SubpartitionReader {
    /// A reader over `stream`: the blocks of the subpartitions a consumer
    /// reads, back to back, `total` bytes in all (a [`RawRanges`] sent by
    /// the worker that holds the partition). `name` names the partition in
    /// errors. Every block's checksum is checked here, at the consumer, so
    /// damage on the way is found as damage on disk is.
    pub fn from_stream(name: PathBuf, stream: Box<dyn Read + Send>, total: u64) -> Self {
        Self {
            path: name,
            data: Data::Stream(stream),
            ranges: if total == 0 {
                VecDeque::new()
            } else {
                VecDeque::from([(0, total)])
            },
            at: 0,
            end: 0,
        }
    }

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
    /// shuffle master's grant) without following any symlink: reads and
    /// checks the whole index, and checks that `data` has the length the
    /// index records.
    ///
    /// # Errors
    ///
    /// [`ShuffleError::PartitionNotFound`] if the directory, `index` or
    /// `data` is missing; [`ShuffleError::Corrupt`] if the index is
    /// damaged, counts fewer subpartitions than `sub + 1`, or `data` has
    /// another length, or if `index` or `data` is not a regular file (a
    /// FIFO there is refused without blocking, never read);
    /// [`ShuffleError::Grant`] for a symlink on the way;
    /// [`ShuffleError::Io`] otherwise.
    pub fn open_in(location: &PluginDir, sub: u32) -> Result<Self, ShuffleError> {
        Self::open_range_in(location, sub..sub + 1)
    }

    /// As [`SubpartitionReader::open_in`], for the subpartitions `subs`
    /// (a consumer that reads several, as an `auto` job vertex's subtask
    /// may): the index is read once, and the batches come subpartition
    /// after subpartition, each in the order written.
    ///
    /// # Errors
    ///
    /// As [`SubpartitionReader::open_in`]; `Corrupt` if the index counts
    /// fewer subpartitions than `subs.end`.
    pub fn open_range_in(location: &PluginDir, subs: Range<u32>) -> Result<Self, ShuffleError> {
        let raw = Self::raw_ranges_in(location, subs)?;
        Ok(Self {
            path: raw.path,
            data: Data::File(BufReader::with_capacity(IO_BUFFER, raw.data)),
            ranges: raw.ranges.into(),
            at: 0,
            end: 0,
        })
    }

    /// Opens the partition at `location` as [`SubpartitionReader::open_range_in`]
    /// does (the same checks and errors) and returns its `data` file with
    /// the ranges of subpartitions `subs`, unread.
    ///
    /// # Errors
    ///
    /// As [`SubpartitionReader::open_range_in`].
    pub fn raw_ranges_in(
        location: &PluginDir,
        subs: Range<u32>,
    ) -> Result<RawRanges, ShuffleError> {
        let not_found = || ShuffleError::PartitionNotFound {
            location: location.path().to_path_buf(),
        };
        let dir = match location.open() {
            Ok(dir) => dir,
            Err(e) if e.is_not_found() => return Err(not_found()),
            Err(e) => return Err(ShuffleError::Grant(e)),
        };
        let open = |name: &str| {
            let path = location.path().join(name);
            match grant::open_file_nofollow(&dir, name) {
                Ok(f) => Ok((f, path)),
                Err(e) if e.kind() == ErrorKind::NotFound => Err(not_found()),
                // A FIFO, device or socket in its place (never opened so
                // that it blocks): the partition is damaged, so its
                // producer runs again as for any corrupt partition.
                Err(e) if e.kind() == ErrorKind::InvalidInput => Err(ShuffleError::Corrupt {
                    path,
                    offset: 0,
                    reason: "it is not a regular file (a FIFO, a device, a socket or a directory)",
                }),
                Err(source) => Err(ShuffleError::Io { path, source }),
            }
        };
        let (mut index_file, index_path) = open(INDEX_FILE)?;
        let mut bytes = Vec::new();
        index_file
            .read_to_end(&mut bytes)
            .map_err(|source| ShuffleError::Io {
                path: index_path.clone(),
                source,
            })?;
        let corrupt =
            |path: &PathBuf, (offset, reason): (u64, &'static str)| ShuffleError::Corrupt {
                path: path.clone(),
                offset,
                reason,
            };
        let index = Index::parse(&bytes).map_err(|bad| corrupt(&index_path, bad))?;
        if subs.end > index.num_subpartitions {
            return Err(corrupt(
                &index_path,
                (
                    12,
                    "the index counts fewer subpartitions than the consumer reads",
                ),
            ));
        }
        let (data, path) = open(DATA_FILE)?;
        let len = data
            .metadata()
            .map_err(|source| ShuffleError::Io {
                path: path.clone(),
                source,
            })?
            .len();
        if len != index.data_len {
            return Err(corrupt(
                &path,
                (
                    len.min(index.data_len),
                    "the data file's length differs from the index's",
                ),
            ));
        }
        Ok(RawRanges {
            path,
            data,
            ranges: subs.flat_map(|sub| index.ranges(sub)).collect(),
        })
    }

    /// The next batch, or `None` after the last one.
    ///
    /// # Errors
    ///
    /// [`ShuffleError::Corrupt`] naming `data` and the block's offset when
    /// a block's checksum does not match, a block does not fit its range
    /// (ranges that do not tile into whole blocks), or its payload is not
    /// one Arrow IPC stream of one batch; [`ShuffleError::Io`] for a read
    /// error.
    pub fn next_batch(&mut self) -> Result<Option<RecordBatch>, ShuffleError> {
        if self.at == self.end {
            let Some((offset, len)) = self.ranges.pop_front() else {
                return Ok(None);
            };
            // A stream holds one range and is read from its start.
            if let Data::File(f) = &mut self.data {
                f.seek(SeekFrom::Start(offset)).map_err(|s| self.io(s))?;
            }
            self.at = offset;
            self.end = offset + len;
        }
        let start = self.at;
        if self.end - start < BLOCK_HEADER_BYTES as u64 {
            return Err(self.corrupt(start, "a block header runs past its subpartition's range"));
        }
        let mut header = [0u8; BLOCK_HEADER_BYTES];
        self.read_exact(start, &mut header)?;
        let (len, crc) = block_header(&header);
        if len == 0 {
            return Err(self.corrupt(start, "a block of length 0"));
        }
        let next = start + (BLOCK_HEADER_BYTES as u64) + u64::from(len);
        if next > self.end {
            return Err(self.corrupt(start, "a block runs past its subpartition's range"));
        }
        // The length is at most the range, which lies inside the file.
        let mut payload = vec![0u8; len as usize];
        self.read_exact(start, &mut payload)?;
        if crc32c::crc32c(&payload) != crc {
            return Err(self.corrupt(start, "block checksum (CRC32C) does not match"));
        }
        let batch = decode_payload(payload).map_err(|reason| self.corrupt(start, reason))?;
        self.at = next;
        Ok(Some(batch))
    }

    /// Reads exactly `buf.len()` bytes of the block at `block`.
    fn read_exact(&mut self, block: u64, buf: &mut [u8]) -> Result<(), ShuffleError> {
        let read = match &mut self.data {
            Data::File(f) => f.read_exact(buf),
            Data::Stream(r) => r.read_exact(buf),
        };
        match read {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == ErrorKind::UnexpectedEof => {
                Err(self.corrupt(block, "the data file ends inside a block"))
            }
            Err(e) => Err(self.io(e)),
        }
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
