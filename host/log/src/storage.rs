//! The small storage trait under the event log, with an in-memory
//! implementation for tests and simulations (the binary's `events` module
//! adds the folder and object-store ones).
//!
//! Keeping I/O behind [`Storage`] lets tests tell bytes that were written
//! from bytes that are durable, simulate a crash that keeps only the durable
//! ones (plus, optionally, part of the rest), and inject write or sync
//! failures (the approach of redb's `tests/crash_consistency.rs`).

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::io;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::error::EventsError;
use super::event::SnapshotFile;
use super::format::segment_file_name;

/// Where segments live. Segments are named by the coordinator attempt that
/// wrote them.
pub trait Storage: Send + Sync + Debug {
    /// Path naming segment `attempt` in messages (a real file for
    /// the binary's `FileStorage`, a made-up path for [`MemoryStorage`]).
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
/// this job's log. The binary's `LogLock` holder checks that the locked folder
/// is still there; with high availability (the binary's `ha` module) the leadership's
/// fence checks that the etcd lease still holds. An error stops the writer
/// before the change: it makes no further record durable.
pub trait Fence: Send + Sync + Debug {
    /// `Ok` while this process may write.
    ///
    /// # Errors
    /// An error naming why it may not (the lock or the leadership was lost).
    fn verify(&self) -> io::Result<()>;
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
}
