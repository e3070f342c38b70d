//! Segments as files in one job's log folder ([`FileStorage`]), locked by a
//! [`LogLock`] or guarded by another [`Fence`]: the event log's
//! [`Storage`] on a local file system.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};

use coordhost_log::EventsError;
use coordhost_log::SnapshotFile;
use coordhost_log::format::{TEMP_SUFFIX, parse_segment_file_name, segment_file_name};
use coordhost_log::{Fence, SegmentAppender, Storage};

use super::lock::LogLock;

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

#[cfg(test)]
mod tests {
    use super::*;

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
