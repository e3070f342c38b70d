//! [`SubpartitionReader`]: one subpartition of a result partition, read
//! range by range from `data` as its `index` names them
//! (docs/shuffle-format.md, "Reading"). A consumer task opens it bound to
//! what it expects ([`ExpectedPartition`]: the producer attempt, and the
//! bytes its producer reported), so a partition that is not the one its
//! producer wrote is [`ShuffleError::PartitionNotFound`], never input.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufReader, ErrorKind, Read, Seek, SeekFrom};
use std::ops::Range;
use std::path::{Path, PathBuf};

use arrow_array::RecordBatch;

use super::format::{
    BLOCK_HEADER_BYTES, DATA_FILE, INDEX_FILE, Index, PartitionProducer, block_header,
    decode_payload,
};
use super::{IO_BUFFER, ShuffleError, grant_error};
use coordhost_io::grant::{self, PluginDir};
use coordhost_io::objstore::{ObjectFile, ObjectUrl};

/// What a consumer expects of one input partition: who wrote it and, when
/// known, how many bytes each subpartition it reads holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpectedPartition {
    /// The producer attempt, as the index must name it.
    pub producer: PartitionProducer,
    /// The bytes of each subpartition read, in order (one per subpartition
    /// of the range), as the producer reported them and the log recorded
    /// them; `None` when unknown.
    pub bytes: Option<Vec<u64>>,
}

/// Reads the batches of one subpartition (or of a range of them, one
/// after the other) in the order they were written.
pub struct SubpartitionReader {
    /// The partition (its directory, or the peer and path), for messages.
    location: PathBuf,
    /// The `data` file (or the stream's name), for messages.
    path: PathBuf,
    data: Data,
    /// Ranges still to read.
    ranges: VecDeque<Span>,
    /// Offset of the next block header, and the end of its range.
    at: u64,
    end: u64,
    /// The range being read: its start and what its blocks must add up to.
    start: u64,
    check: Option<SpanCheck>,
    /// What its blocks read so far add up to.
    got: SpanCheck,
}

/// One index entry to read: its range of `data` and, for format version
/// 2, what its blocks must add up to.
#[derive(Debug, Clone, Copy)]
struct Span {
    offset: u64,
    len: u64,
    check: Option<SpanCheck>,
}

/// The rows of an entry's blocks and the CRC32C of their headers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct SpanCheck {
    records: u64,
    headers_crc: u32,
}

/// Where the blocks come from: the partition's `data` file, its `data`
/// object, or a stream of the blocks of the subpartitions read (another
/// worker's answer, in order).
enum Data {
    File(BufReader<File>),
    Object(ObjectData),
    Stream(Box<dyn Read + Send>),
}

/// The `data` object of a partition on object storage, read by ranged GETs
/// of the spans being read (never past the end of the span, so a consumer
/// of one small subpartition fetches only its bytes), at most
/// [`OBJECT_READ_BYTES`] at a time.
struct ObjectData {
    file: ObjectFile,
    /// Where the next read starts.
    pos: u64,
    /// The bytes fetched last and where they start.
    buf: bytes::Bytes,
    buf_at: u64,
}

/// Largest ranged GET of a consumer reading a `data` object, bytes.
const OBJECT_READ_BYTES: u64 = 8 << 20;

/// Largest `index` object a consumer reads, bytes (an index of 64 MiB
/// holds two million entries).
const MAX_INDEX_OBJECT_BYTES: u64 = 64 << 20;

impl ObjectData {
    /// Fills `out` from the object at the read position, fetching up to
    /// `limit` (the end of the span being read) when the bytes are not
    /// fetched yet. An object that ends first is `UnexpectedEof`.
    fn read_exact(&mut self, out: &mut [u8], limit: u64) -> std::io::Result<()> {
        let want = out.len() as u64;
        let end = self.pos + want;
        let have_end = self.buf_at + self.buf.len() as u64;
        if self.pos < self.buf_at || end > have_end {
            let upto = limit.min(self.pos + OBJECT_READ_BYTES).max(end);
            self.buf = self.file.fetch(self.pos, upto)?;
            self.buf_at = self.pos;
        }
        let from = usize::try_from(self.pos - self.buf_at).unwrap_or(usize::MAX);
        let Some(bytes) = self.buf.get(from..from + out.len()) else {
            return Err(std::io::Error::new(
                ErrorKind::UnexpectedEof,
                "the data object ends inside a block",
            ));
        };
        out.copy_from_slice(bytes);
        self.pos = end;
        Ok(())
    }
}

/// The index `bytes` (read from `path`) parsed, checked to count at
/// least the subpartitions `subs` a consumer reads: a partition on disk
/// and one on objects alike.
fn parse_index(bytes: &[u8], path: &Path, subs: &Range<u32>) -> Result<Index, ShuffleError> {
    let corrupt = |(offset, reason): (u64, &'static str)| ShuffleError::Corrupt {
        path: path.to_path_buf(),
        offset,
        reason,
    };
    let index = Index::parse(bytes).map_err(corrupt)?;
    if subs.end > index.num_subpartitions {
        return Err(corrupt((
            12,
            "the index counts fewer subpartitions than the consumer reads",
        )));
    }
    Ok(index)
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
/// `data` file, the `(offset, length)` ranges to send, in order, and the
/// index they come from. What a worker serves to a consumer on another
/// worker ([`SubpartitionReader::from_stream`] reads and checks it there).
#[derive(Debug)]
pub struct RawRanges {
    /// The `data` file (for messages).
    pub path: PathBuf,
    /// The opened `data` file.
    pub data: File,
    /// Ranges `(offset, length)` of `data`, in reading order.
    pub ranges: Vec<(u64, u64)>,
    /// The bytes of `index`, checked (sent along so the consumer checks
    /// the partition against what it expects).
    pub index: Vec<u8>,
}

impl RawRanges {
    /// Total bytes of the ranges.
    pub fn total(&self) -> u64 {
        self.ranges.iter().map(|r| r.1).sum()
    }
}

/// `PartitionNotFound` for the partition at `location`, saying why.
fn not_found(location: &Path, reason: impl Into<String>) -> ShuffleError {
    ShuffleError::PartitionNotFound {
        location: location.to_path_buf(),
        reason: reason.into(),
    }
}

/// The partition's files, opened and checked against each other.
struct Opened {
    index: Index,
    index_bytes: Vec<u8>,
    data: File,
    data_path: PathBuf,
}

/// Checks that `index` is the partition `expected` names: format version
/// 2, the same producer, and (when known) the same bytes for every
/// subpartition in `subs`.
fn bind(
    location: &Path,
    index: &Index,
    subs: &Range<u32>,
    expected: &ExpectedPartition,
) -> Result<(), ShuffleError> {
    let Some(producer) = &index.producer else {
        return Err(not_found(
            location,
            format!(
                "its index is of format version {}, which does not name its producer; {} is expected",
                index.version, expected.producer
            ),
        ));
    };
    if *producer != expected.producer {
        return Err(not_found(
            location,
            format!(
                "its index names {producer}, not the expected {}",
                expected.producer
            ),
        ));
    }
    if let Some(bytes) = &expected.bytes {
        if bytes.len() != subs.len() {
            return Err(not_found(
                location,
                format!(
                    "{} sizes were expected for subpartitions {subs:?}",
                    bytes.len()
                ),
            ));
        }
        for (sub, &want) in subs.clone().zip(bytes) {
            let have: u64 = index.entries(sub).map(|e| e.len).sum();
            if have != want {
                return Err(not_found(
                    location,
                    format!(
                        "its index records {have} bytes for subpartition {sub}, its producer reported {want}"
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// The entries of `subs` as spans to read, in order.
fn spans(index: &Index, subs: Range<u32>) -> VecDeque<Span> {
    let v2 = index.producer.is_some();
    subs.flat_map(|sub| index.entries(sub))
        .map(|e| Span {
            offset: e.offset,
            len: e.len,
            check: v2.then_some(SpanCheck {
                records: e.records,
                headers_crc: e.headers_crc,
            }),
        })
        .collect()
}

impl SubpartitionReader {
    fn new(location: PathBuf, path: PathBuf, data: Data, ranges: VecDeque<Span>) -> Self {
        Self {
            location,
            path,
            data,
            ranges,
            at: 0,
            end: 0,
            start: 0,
            check: None,
            got: SpanCheck::default(),
        }
    }

    /// A reader over `stream`: the blocks of subpartitions `subs` of a
    /// partition, back to back, `total` bytes in all, as another worker
    /// sends them (a [`RawRanges`]), with the bytes of that partition's
    /// `index`. `name` names the partition in errors. The index is parsed
    /// and bound to `expected` here, at the consumer, and every block's
    /// checksum and every entry's record count and header checksum are
    /// checked as it is read, so damage or a wrong partition on the way is
    /// found as it is on disk.
    ///
    /// # Errors
    ///
    /// [`ShuffleError::Corrupt`] if the index does not parse, counts fewer
    /// subpartitions than `subs.end`, or its ranges do not add up to
    /// `total`; [`ShuffleError::PartitionNotFound`] if it is not the
    /// partition `expected` names.
    pub fn from_stream(
        name: PathBuf,
        stream: Box<dyn Read + Send>,
        total: u64,
        index_bytes: &[u8],
        subs: Range<u32>,
        expected: &ExpectedPartition,
    ) -> Result<Self, ShuffleError> {
        let index = parse_index(index_bytes, &name.join(INDEX_FILE), &subs)?;
        bind(&name, &index, &subs, expected)?;
        let ranges = spans(&index, subs);
        if ranges.iter().map(|s| s.len).sum::<u64>() != total {
            return Err(ShuffleError::Corrupt {
                path: name,
                offset: total,
                reason: "the stream's length differs from its index's ranges",
            });
        }
        Ok(Self::new(
            name.clone(),
            name.join(DATA_FILE),
            Data::Stream(stream),
            ranges,
        ))
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
    /// index records. It does not ask whose partition it is (tools and
    /// tests; a consumer task uses [`SubpartitionReader::open_expected_in`]),
    /// and it reads format version 1 too.
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
        let o = Self::open_files(location, &subs)?;
        Ok(Self::new(
            location.path().to_path_buf(),
            o.data_path,
            Data::File(BufReader::with_capacity(IO_BUFFER, o.data)),
            spans(&o.index, subs),
        ))
    }

    /// As [`SubpartitionReader::open_range_in`], bound to `expected`: what
    /// a consumer task opens. The index must be of format version 2 and
    /// name `expected.producer`, and record for each subpartition of `subs`
    /// the bytes in `expected.bytes` (when known); reading then checks each
    /// entry's record count and header checksum against its blocks.
    ///
    /// # Errors
    ///
    /// As [`SubpartitionReader::open_range_in`], and
    /// [`ShuffleError::PartitionNotFound`], saying what differs, when the
    /// partition is not the one `expected` names.
    pub fn open_expected_in(
        location: &PluginDir,
        subs: Range<u32>,
        expected: &ExpectedPartition,
    ) -> Result<Self, ShuffleError> {
        let o = Self::open_files(location, &subs)?;
        bind(location.path(), &o.index, &subs, expected)?;
        Ok(Self::new(
            location.path().to_path_buf(),
            o.data_path,
            Data::File(BufReader::with_capacity(IO_BUFFER, o.data)),
            spans(&o.index, subs),
        ))
    }

    /// Opens the partition at `location` as [`SubpartitionReader::open_range_in`]
    /// does (the same checks and errors) and returns its `data` file with
    /// the ranges of subpartitions `subs`, unread, and its index.
    ///
    /// # Errors
    ///
    /// As [`SubpartitionReader::open_range_in`].
    pub fn raw_ranges_in(
        location: &PluginDir,
        subs: Range<u32>,
    ) -> Result<RawRanges, ShuffleError> {
        let o = Self::open_files(location, &subs)?;
        Ok(RawRanges {
            path: o.data_path,
            data: o.data,
            ranges: subs.flat_map(|sub| o.index.ranges(sub)).collect(),
            index: o.index_bytes,
        })
    }

    /// Opens subpartitions `subs` of the partition on object storage at
    /// `url` (the objects `<url>/index` and `<url>/data`, written by a
    /// producer as [`super::ObjectPartitionWriter`] does), bound to
    /// `expected` as [`SubpartitionReader::open_expected_in`] binds a
    /// partition on disk: the whole index is fetched and checked, `data`'s
    /// size must be the one the index records, and the blocks are fetched
    /// span by span as they are read, each checked as on disk. Also what
    /// recovery checks a recorded partition with (opened, never read).
    ///
    /// # Errors
    ///
    /// [`ShuffleError::PartitionNotFound`] if either object does not exist
    /// or the partition is not the one `expected` names;
    /// [`ShuffleError::Corrupt`] for an index that does not parse or counts
    /// too few subpartitions, or a `data` object of another size;
    /// [`ShuffleError::Io`] naming the object when the store fails.
    pub fn open_object(
        url: &ObjectUrl,
        subs: Range<u32>,
        expected: &ExpectedPartition,
    ) -> Result<Self, ShuffleError> {
        let location = PathBuf::from(url.to_string());
        let open = |name: &str| {
            let object = super::objects::child(url, name);
            let path = PathBuf::from(object.to_string());
            match ObjectFile::open(&object) {
                Ok(f) => Ok((f, path)),
                Err(e) if e.kind() == ErrorKind::NotFound => {
                    Err(not_found(&location, format!("it has no `{name}` object")))
                }
                Err(source) => Err(ShuffleError::Io { path, source }),
            }
        };
        let corrupt =
            |path: &PathBuf, (offset, reason): (u64, &'static str)| ShuffleError::Corrupt {
                path: path.clone(),
                offset,
                reason,
            };
        let (index_file, index_path) = open(INDEX_FILE)?;
        if index_file.size() > MAX_INDEX_OBJECT_BYTES {
            return Err(corrupt(
                &index_path,
                (
                    MAX_INDEX_OBJECT_BYTES,
                    "the index object is larger than any index",
                ),
            ));
        }
        let bytes = index_file
            .fetch(0, index_file.size())
            .map_err(|source| ShuffleError::Io {
                path: index_path.clone(),
                source,
            })?;
        if bytes.len() as u64 != index_file.size() {
            return Err(corrupt(
                &index_path,
                (
                    bytes.len() as u64,
                    "the index object is shorter than its size",
                ),
            ));
        }
        let index = parse_index(&bytes, &index_path, &subs)?;
        bind(&location, &index, &subs, expected)?;
        let (data, data_path) = open(DATA_FILE)?;
        if data.size() != index.data_len {
            return Err(corrupt(
                &data_path,
                (
                    data.size().min(index.data_len),
                    "the data object's size differs from the index's",
                ),
            ));
        }
        Ok(Self::new(
            location,
            data_path,
            Data::Object(ObjectData {
                file: data,
                pos: 0,
                buf: bytes::Bytes::new(),
                buf_at: 0,
            }),
            spans(&index, subs),
        ))
    }

    fn open_files(location: &PluginDir, subs: &Range<u32>) -> Result<Opened, ShuffleError> {
        let here = location.path();
        let dir = match location.open() {
            Ok(dir) => dir,
            Err(e) if e.is_not_found() => {
                return Err(not_found(here, "its directory does not exist"));
            }
            Err(e) => return Err(ShuffleError::Grant(e)),
        };
        let open = |name: &str| {
            let path = here.join(name);
            match grant::open_file_nofollow(&dir, name) {
                Ok(f) => Ok((f, path)),
                Err(e) if e.kind() == ErrorKind::NotFound => {
                    Err(not_found(here, format!("it has no `{name}`")))
                }
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
        let index = parse_index(&bytes, &index_path, subs)?;
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
        Ok(Opened {
            index,
            index_bytes: bytes,
            data,
            data_path: path,
        })
    }

    /// The next batch, or `None` after the last one.
    ///
    /// # Errors
    ///
    /// [`ShuffleError::Corrupt`] naming `data` and the block's offset when
    /// a block's checksum does not match, a block does not fit its range
    /// (ranges that do not tile into whole blocks), or its payload is not
    /// one Arrow IPC stream of one batch; [`ShuffleError::PartitionNotFound`]
    /// when, at the end of an entry of format version 2, its blocks do not
    /// hold the rows or the header checksum the index records (a `data`
    /// that is not the one the index was written with);
    /// [`ShuffleError::Io`] for a read error.
    pub fn next_batch(&mut self) -> Result<Option<RecordBatch>, ShuffleError> {
        if self.at == self.end {
            self.end_span()?;
            let Some(span) = self.ranges.pop_front() else {
                return Ok(None);
            };
            // A stream holds the ranges back to back and is read in order.
            match &mut self.data {
                Data::File(f) => {
                    f.seek(SeekFrom::Start(span.offset))
                        .map_err(|s| self.io(s))?;
                }
                Data::Object(o) => o.pos = span.offset,
                Data::Stream(_) => {}
            }
            self.at = span.offset;
            self.start = span.offset;
            self.end = span.offset + span.len;
            self.check = span.check;
            self.got = SpanCheck::default();
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
        self.got.headers_crc = crc32c::crc32c_append(self.got.headers_crc, &header);
        self.got.records += batch.num_rows() as u64;
        self.at = next;
        Ok(Some(batch))
    }

    /// Checks the entry just read (format version 2) against its index
    /// entry: its rows and the CRC32C of its block headers.
    fn end_span(&mut self) -> Result<(), ShuffleError> {
        let Some(want) = self.check.take() else {
            return Ok(());
        };
        if self.got.headers_crc != want.headers_crc {
            return Err(not_found(
                &self.location,
                format!(
                    "the blocks at bytes {}..{} of {} do not match its index's checksum of them: `data` is not the one the index was written with",
                    self.start,
                    self.end,
                    self.path.display()
                ),
            ));
        }
        if self.got.records != want.records {
            return Err(not_found(
                &self.location,
                format!(
                    "the blocks at bytes {}..{} of {} hold {} rows, its index records {}",
                    self.start,
                    self.end,
                    self.path.display(),
                    self.got.records,
                    want.records
                ),
            ));
        }
        Ok(())
    }

    /// Reads exactly `buf.len()` bytes of the block at `block`.
    fn read_exact(&mut self, block: u64, buf: &mut [u8]) -> Result<(), ShuffleError> {
        let read = match &mut self.data {
            Data::File(f) => f.read_exact(buf),
            Data::Object(o) => o.read_exact(buf, self.end),
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
