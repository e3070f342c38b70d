//! The small storage trait under the event log, with a real file
//! implementation and an in-memory one for tests.
//!
//! Keeping I/O behind [`Storage`] lets tests tell bytes that were written
//! from bytes that are durable, simulate a crash that keeps only the durable
//! ones (plus, optionally, part of the rest), and inject write or sync
//! failures (the approach of redb's `tests/crash_consistency.rs`).

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::error::EventsError;
use super::event::SnapshotFile;
use super::format::{TEMP_SUFFIX, parse_segment_file_name, segment_file_name};
use super::lock::LogLock;

/// Where segments live. Segments are named by the coordinator attempt that
/// wrote them.
pub trait Storage: Send + Sync + Debug {
    /// Path naming segment `attempt` in messages (a real file for
    /// [`FileStorage`], a made-up path for [`MemoryStorage`]).
    fn segment_path(&self, attempt: u32) -> PathBuf;

    /// The attempts of every segment present, ascending.
    ///
    /// # Errors
    /// The listing's I/O error.
    fn list_segments(&self) -> io::Result<Vec<u32>>;

    /// All bytes of segment `attempt` as a reader would see them now.
    ///
    /// # Errors
    /// The read's I/O error.
    fn read_segment(&self, attempt: u32) -> io::Result<Vec<u8>>;

    /// Creates segment `attempt` holding `header`, atomically and durably:
    /// after a crash it either does not exist or holds the whole header.
    /// Returns the handle that appends to it.
    ///
    /// # Errors
    /// The I/O error; the segment then does not exist.
    fn create_segment(&self, attempt: u32, header: &[u8]) -> io::Result<Box<dyn SegmentAppender>>;

    /// Called once before a replay lists and reads segments: a storage that
    /// must fetch and check the log first (objects, `super::ObjectStorage`)
    /// does so here and names any damage it finds.
    ///
    /// # Errors
    /// Damage found ([`EventsError::Corrupt`]) or the store's error.
    fn check(&self) -> Result<(), EventsError> {
        Ok(())
    }

    /// Writes batch snapshot side file `name` holding `state`, durably,
    /// and returns what the record that uses it must name
    /// (`docs/log-format.md`, "Snapshot side files").
    ///
    /// # Errors
    /// [`EventsError::SnapshotFile`] naming the file and the problem.
    fn write_side_file(&self, name: &str, state: &[u8]) -> Result<SnapshotFile, EventsError> {
        let _unused = state;
        Err(no_side_files(self, name))
    }

    /// Reads side file `file.file` and checks it against its record.
    ///
    /// # Errors
    /// [`EventsError::SnapshotFile`] if it is missing or does not match.
    fn read_side_file(&self, file: &SnapshotFile) -> Result<Vec<u8>, EventsError> {
        Err(no_side_files(self, &file.file))
    }

    /// Removes side file `name`; a failure is logged (the file is then
    /// only wasted space).
    fn remove_side_file(&self, name: &str) {
        let _unused = name;
    }

    /// The names of every side file present.
    ///
    /// # Errors
    /// The listing's error.
    fn list_side_files(&self) -> Result<Vec<String>, EventsError> {
        Ok(Vec::new())
    }
}

fn no_side_files<S: Storage + ?Sized>(storage: &S, name: &str) -> EventsError {
    EventsError::SnapshotFile {
        path: storage
            .segment_path(0)
            .parent()
            .map(|d| d.join(name))
            .unwrap_or_default(),
        problem: "cannot be kept: this storage holds no side files".to_owned(),
    }
}

/// Appends to one segment. Used by one writer at a time.
pub trait SegmentAppender: Send + Debug {
    /// Writes `bytes` at the end of the segment (not yet durable).
    ///
    /// # Errors
    /// The I/O error; some of `bytes` may have been written.
    fn append(&mut self, bytes: &[u8]) -> io::Result<()>;

    /// Makes every appended byte durable (fsync).
    ///
    /// # Errors
    /// The I/O error; durability of unsynced bytes is then unknown.
    fn sync(&mut self) -> io::Result<()>;
}

/// What a writer checks before it changes the log: that it may still write
/// this job's log. The [`LogLock`]'s holder checks that the locked folder
/// is still there; with high availability (`crate::ha`) the leadership's
/// fence checks that the etcd lease still holds. An error stops the writer
/// before the change: it makes no further record durable.
pub trait Fence: Send + Sync + Debug {
    /// `Ok` while this process may write.
    ///
    /// # Errors
    /// An error naming why it may not (the lock or the leadership was lost).
    fn verify(&self) -> io::Result<()>;
}

impl Fence for super::lock::LockHolder {
    fn verify(&self) -> io::Result<()> {
        super::lock::LockHolder::verify(self)
    }
}

/// File in a job's log directory that says the log is led through etcd
/// (`coordhost run --ha`): a coordinator without `--ha` refuses it.
pub const HA_MARKER: &str = "HA";

/// Segments as files in one job's log directory, holding the directory's
/// [`LogLock`] or guarded by another [`Fence`] (or, to read, neither).
#[derive(Debug)]
pub struct FileStorage {
    dir: PathBuf,
    lock: Option<LogLock>,
    /// With high availability: checked before every segment creation,
    /// append and sync, in place of the lock.
    fence: Option<std::sync::Arc<dyn Fence>>,
}

impl FileStorage {
    /// Opens `log_dir` for writing: creates it if needed, removes leftover
    /// `*.tmp` files of an interrupted segment creation, and takes the lock,
    /// held until this value is dropped.
    ///
    /// # Errors
    /// [`EventsError::Locked`] if another coordinator holds the log;
    /// [`EventsError::Io`] for other failures.
    pub fn open_for_writing(log_dir: &Path) -> Result<Self, EventsError> {
        let led_through_etcd = || {
            log_dir.join(HA_MARKER).exists().then(|| EventsError::HaMismatch {
                path: log_dir.to_path_buf(),
                why: "is led through etcd (it was run with --ha): run it with --ha, or remove its HA file once no coordinator runs it with --ha",
            })
        };
        // Asked before the lock too, for the message: a leader with --ha
        // may hold the lock.
        if let Some(e) = led_through_etcd() {
            return Err(e);
        }
        let lock = LogLock::acquire(log_dir)?;
        if let Some(e) = led_through_etcd() {
            return Err(e);
        }
        Self::remove_temp_files(log_dir)?;
        Ok(Self {
            dir: log_dir.to_path_buf(),
            lock: Some(lock),
            fence: None,
        })
    }

    /// Opens `log_dir` for writing under `fence` instead of the lock (high
    /// availability: the elected leader writes a log every coordinator of
    /// the job can read; a deposed one is stopped by its fence, and what it
    /// wrote after a newer segment sealed it is ignored by replay).
    ///
    /// # Errors
    /// [`EventsError::Io`] when the folder cannot be created or cleaned.
    pub fn open_for_writing_fenced(
        log_dir: &Path,
        fence: std::sync::Arc<dyn Fence>,
    ) -> Result<Self, EventsError> {
        fs::create_dir_all(log_dir).map_err(|source| EventsError::Io {
            path: log_dir.to_path_buf(),
            source,
        })?;
        // The lock too, when free: it keeps a coordinator without --ha out.
        // Held, it is a deposed leader's (paused, still holding it) only if
        // the log is already led through etcd; else one without --ha runs.
        let marker = log_dir.join(HA_MARKER);
        let lock = match LogLock::acquire(log_dir) {
            Ok(lock) => Some(lock),
            Err(EventsError::Locked { .. }) if marker.exists() => None,
            Err(EventsError::Locked { .. }) => {
                return Err(EventsError::HaMismatch {
                    path: log_dir.to_path_buf(),
                    why: "is held by a coordinator started without --ha: stop it, or run every coordinator of the job with --ha",
                });
            }
            Err(e) => return Err(e),
        };
        if !marker.exists() {
            fs::write(
                &marker,
                b"led through etcd: coordhost run --ha (docs/ha.md)\n",
            )
            .and_then(|()| File::open(log_dir)?.sync_all())
            .map_err(|source| EventsError::Io {
                path: marker.clone(),
                source,
            })?;
        }
        Self::remove_temp_files(log_dir)?;
        Ok(Self {
            dir: log_dir.to_path_buf(),
            lock,
            fence: Some(fence),
        })
    }

    /// Removes leftover `*.tmp` files of an interrupted segment creation.
    fn remove_temp_files(log_dir: &Path) -> Result<(), EventsError> {
        let io = |source| EventsError::Io {
            path: log_dir.to_path_buf(),
            source,
        };
        for entry in fs::read_dir(log_dir).map_err(io)? {
            let path = entry.map_err(io)?.path();
            if path.to_string_lossy().ends_with(TEMP_SUFFIX) {
                fs::remove_file(&path).map_err(|source| EventsError::Io { path, source })?;
            }
        }
        Ok(())
    }

    /// Opens `log_dir` to read only, without the lock (e.g. `log inspect`
    /// while a coordinator runs; it then sees a prefix of the log).
    #[must_use]
    pub fn open_read_only(log_dir: &Path) -> Self {
        Self {
            dir: log_dir.to_path_buf(),
            lock: None,
            fence: None,
        }
    }

    /// The log directory.
    #[must_use]
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// True if this storage holds the log's lock.
    #[must_use]
    pub fn is_locked(&self) -> bool {
        self.lock.is_some()
    }
}

impl Storage for FileStorage {
    fn segment_path(&self, attempt: u32) -> PathBuf {
        self.dir.join(segment_file_name(attempt))
    }

    fn list_segments(&self) -> io::Result<Vec<u32>> {
        let mut attempts = Vec::new();
        for entry in fs::read_dir(&self.dir)? {
            if let Some(attempt) = entry?
                .file_name()
                .to_str()
                .and_then(parse_segment_file_name)
            {
                attempts.push(attempt);
            }
        }
        attempts.sort_unstable();
        Ok(attempts)
    }

    fn read_segment(&self, attempt: u32) -> io::Result<Vec<u8>> {
        // A regular file only: a FIFO or device put in a segment's place
        // is refused at once instead of blocking or never ending.
        crate::files::read_regular_file(&self.segment_path(attempt), u64::MAX)
    }

    fn create_segment(&self, attempt: u32, header: &[u8]) -> io::Result<Box<dyn SegmentAppender>> {
        if let Some(fence) = &self.fence {
            fence.verify()?;
        }
        let path = self.segment_path(attempt);
        let mut tmp_name = path.clone().into_os_string();
        tmp_name.push(TEMP_SUFFIX);
        let tmp = PathBuf::from(tmp_name);
        {
            let mut file = OpenOptions::new().write(true).create_new(true).open(&tmp)?;
            file.write_all(header)?;
            file.sync_all()?;
        }
        if path.exists() {
            fs::remove_file(&tmp)?;
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "segment already exists",
            ));
        }
        fs::rename(&tmp, &path)?;
        File::open(&self.dir)?.sync_all()?;
        let file = OpenOptions::new().append(true).open(&path)?;
        let holder: Option<std::sync::Arc<dyn Fence>> = match &self.lock {
            Some(lock) => Some(std::sync::Arc::new(lock.holder()?)),
            None => None,
        };
        Ok(Box::new(FileAppender {
            file,
            // With high availability the fence decides (a lock taken beside
            // it only keeps coordinators without --ha out).
            holder: self.fence.clone().or(holder),
            fence_appends: self.fence.is_some(),
        }))
    }

    fn write_side_file(&self, name: &str, state: &[u8]) -> Result<SnapshotFile, EventsError> {
        super::side_file::write(&self.dir, name, state)
    }

    fn read_side_file(&self, file: &SnapshotFile) -> Result<Vec<u8>, EventsError> {
        super::side_file::read(&self.dir, file)
    }

    fn remove_side_file(&self, name: &str) {
        super::side_file::remove(&self.dir, name);
    }

    fn list_side_files(&self) -> Result<Vec<String>, EventsError> {
        let io = |source| EventsError::Io {
            path: self.dir.clone(),
            source,
        };
        let mut names = Vec::new();
        for entry in fs::read_dir(&self.dir).map_err(io)? {
            let name = entry.map_err(io)?.file_name();
            if let Some(name) = name.to_str()
                && super::format::is_snapshot_file_name(name)
            {
                names.push(name.to_owned());
            }
        }
        Ok(names)
    }
}

#[derive(Debug)]
struct FileAppender {
    file: File,
    /// The lock this storage holds (see `events/lock.rs`) or its fence,
    /// verified before every sync.
    holder: Option<std::sync::Arc<dyn Fence>>,
    /// Whether appends are checked too (a fence is a clock comparison;
    /// the lock's check reads metadata and stays at the syncs).
    fence_appends: bool,
}

impl SegmentAppender for FileAppender {
    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        if self.fence_appends
            && let Some(fence) = &self.holder
        {
            fence.verify()?;
        }
        self.file.write_all(bytes)
    }

    fn sync(&mut self) -> io::Result<()> {
        if let Some(holder) = &self.holder {
            holder.verify()?;
        }
        self.file.sync_data()
    }
}

/// Which operation an injected fault hits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultPoint {
    /// Segment creation.
    Create,
    /// An append.
    Append,
    /// A sync.
    Sync,
}

#[derive(Debug, Default)]
struct MemSegment {
    written: Vec<u8>,
    durable: usize,
}

#[derive(Debug, Default)]
struct MemState {
    segments: BTreeMap<u32, MemSegment>,
    /// Fault to inject after this many more successful operations of its kind.
    fault: Option<(FaultPoint, u64)>,
    syncs: u64,
}

/// In-memory segments that keep written and durable bytes apart and can
/// inject failures. Clones share the same segments, so a test can keep one
/// clone while a writer owns another.
#[derive(Clone, Debug, Default)]
pub struct MemoryStorage {
    state: Arc<Mutex<MemState>>,
}

impl MemoryStorage {
    /// Empty storage.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, MemState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Makes the next operation of kind `point` fail after `after` more
    /// successful ones; it fails once, later ones succeed.
    pub fn inject_fault(&self, point: FaultPoint, after: u64) {
        self.lock().fault = Some((point, after));
    }

    /// Bytes written to segment `attempt` (durable or not); empty if absent.
    #[must_use]
    pub fn written(&self, attempt: u32) -> Vec<u8> {
        self.lock()
            .segments
            .get(&attempt)
            .map(|s| s.written.clone())
            .unwrap_or_default()
    }

    /// The durable prefix of segment `attempt`; empty if absent.
    #[must_use]
    pub fn durable(&self, attempt: u32) -> Vec<u8> {
        self.lock()
            .segments
            .get(&attempt)
            .map(|s| s.written[..s.durable].to_vec())
            .unwrap_or_default()
    }

    /// Number of successful syncs so far (creation excluded).
    #[must_use]
    pub fn sync_count(&self) -> u64 {
        self.lock().syncs
    }

    /// A new storage as a power loss would leave this one: every segment
    /// holds its durable bytes plus the first `extra_unsynced` bytes written
    /// after them (a torn write).
    #[must_use]
    pub fn crash(&self, extra_unsynced: usize) -> Self {
        let segments = self
            .lock()
            .segments
            .iter()
            .map(|(&attempt, s)| {
                let keep = s
                    .durable
                    .saturating_add(extra_unsynced)
                    .min(s.written.len());
                let written = s.written[..keep].to_vec();
                (
                    attempt,
                    MemSegment {
                        durable: written.len(),
                        written,
                    },
                )
            })
            .collect();
        Self {
            state: Arc::new(Mutex::new(MemState {
                segments,
                ..MemState::default()
            })),
        }
    }

    /// Replaces segment `attempt` with `bytes`, all durable (for tests that
    /// damage a log).
    pub fn put_segment(&self, attempt: u32, bytes: Vec<u8>) {
        let durable = bytes.len();
        self.lock().segments.insert(
            attempt,
            MemSegment {
                written: bytes,
                durable,
            },
        );
    }

    fn take_fault(&self, point: FaultPoint) -> io::Result<()> {
        let mut state = self.lock();
        match &mut state.fault {
            Some((p, 0)) if *p == point => {
                state.fault = None;
                Err(io::Error::other(format!("injected {point:?} failure")))
            }
            Some((p, n)) if *p == point => {
                *n -= 1;
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

impl Storage for MemoryStorage {
    fn segment_path(&self, attempt: u32) -> PathBuf {
        PathBuf::from("memory").join(segment_file_name(attempt))
    }

    fn list_segments(&self) -> io::Result<Vec<u32>> {
        Ok(self.lock().segments.keys().copied().collect())
    }

    fn read_segment(&self, attempt: u32) -> io::Result<Vec<u8>> {
        self.lock()
            .segments
            .get(&attempt)
            .map(|s| s.written.clone())
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no such segment"))
    }

    fn create_segment(&self, attempt: u32, header: &[u8]) -> io::Result<Box<dyn SegmentAppender>> {
        self.take_fault(FaultPoint::Create)?;
        let mut state = self.lock();
        if state.segments.contains_key(&attempt) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "segment already exists",
            ));
        }
        state.segments.insert(
            attempt,
            MemSegment {
                written: header.to_vec(),
                durable: header.len(),
            },
        );
        Ok(Box::new(MemAppender {
            storage: self.clone(),
            attempt,
        }))
    }
}

#[derive(Debug)]
struct MemAppender {
    storage: MemoryStorage,
    attempt: u32,
}

impl SegmentAppender for MemAppender {
    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        if let Err(e) = self.storage.take_fault(FaultPoint::Append) {
            // A failing write may still have written part of its bytes.
            let mut state = self.storage.lock();
            if let Some(segment) = state.segments.get_mut(&self.attempt) {
                segment.written.extend_from_slice(&bytes[..bytes.len() / 2]);
            }
            return Err(e);
        }
        let mut state = self.storage.lock();
        let segment = state
            .segments
            .get_mut(&self.attempt)
            .ok_or_else(|| io::Error::other("segment vanished"))?;
        segment.written.extend_from_slice(bytes);
        Ok(())
    }

    fn sync(&mut self) -> io::Result<()> {
        self.storage.take_fault(FaultPoint::Sync)?;
        let mut state = self.storage.lock();
        state.syncs += 1;
        let segment = state
            .segments
            .get_mut(&self.attempt)
            .ok_or_else(|| io::Error::other("segment vanished"))?;
        segment.durable = segment.written.len();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_storage_keeps_written_and_durable_bytes_apart() {
        let storage = MemoryStorage::new();
        let mut seg = storage.create_segment(0, b"HDR").expect("create");
        seg.append(b"abc").expect("append");
        assert_eq!(storage.written(0), b"HDRabc");
        assert_eq!(storage.durable(0), b"HDR");
        assert_eq!(storage.crash(1).read_segment(0).expect("read"), b"HDRa");
        seg.sync().expect("sync");
        assert_eq!(storage.durable(0), b"HDRabc");
        storage.inject_fault(FaultPoint::Sync, 0);
        assert!(seg.sync().is_err());
        seg.sync().expect("a fault fires once");
    }

    #[test]
    fn file_storage_creates_lists_and_reads_segments() {
        crate::files::test_support::within_deadline(|| {
            let dir = tempfile::tempdir().expect("tempdir");
            let storage = FileStorage::open_for_writing(dir.path()).expect("open");
            assert!(storage.is_locked());
            let mut seg = storage.create_segment(3, b"HDR").expect("create");
            seg.append(b"xyz").expect("append");
            seg.sync().expect("sync");
            assert!(storage.create_segment(3, b"HDR").is_err());
            fs::write(dir.path().join("segment-00000001.log.tmp"), b"junk").expect("write tmp");
            assert_eq!(storage.list_segments().expect("list"), vec![3]);
            assert_eq!(storage.read_segment(3).expect("read"), b"HDRxyz");
            // A FIFO in a segment's place is refused at once, never waited on.
            crate::files::test_support::mkfifo(&storage.segment_path(4));
            let error = storage.read_segment(4).expect_err("a FIFO");
            assert_eq!(error.to_string(), "it is a FIFO, not a regular file");
        });
    }
}
