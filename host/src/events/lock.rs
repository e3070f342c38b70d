//! The job log lock: an exclusive advisory lock on `<log dir>/LOCK`, held
//! for as long as a writer may append, so two coordinators never write the
//! same job's log at once; the second one is refused.
//!
//! The lock is `flock(2)`-style (through `fs2`): the kernel drops it when the
//! holding process dies, so a crashed coordinator never leaves a stale lock.

use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use fs2::FileExt;

use super::error::EventsError;
use super::format::LOCK_FILE;

/// A held lock on one job's log directory; released when dropped.
#[derive(Debug)]
pub struct LogLock {
    file: File,
    path: PathBuf,
}

impl LogLock {
    /// Takes the lock on `log_dir` without waiting, creating the directory
    /// and the lock file if needed.
    ///
    /// # Errors
    /// [`EventsError::Locked`] if another holder has it (another process, or
    /// another open in this one); [`EventsError::Io`] if the file cannot be
    /// created or locked for another reason.
    pub fn acquire(log_dir: &Path) -> Result<Self, EventsError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| EventsError::Io { path, source }
        };
        std::fs::create_dir_all(log_dir).map_err(io(log_dir))?;
        let path = log_dir.join(LOCK_FILE);
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)
            .map_err(io(&path))?;
        match file.try_lock_exclusive() {
            Ok(()) => Ok(Self { file, path }),
            Err(e)
                if e.kind() == ErrorKind::WouldBlock
                    || e.raw_os_error() == fs2::lock_contended_error().raw_os_error() =>
            {
                Err(EventsError::Locked { path })
            }
            Err(source) => Err(EventsError::Io { path, source }),
        }
    }

    /// The lock file.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for LogLock {
    fn drop(&mut self) {
        // Closing the file releases the lock too; unlocking first makes the
        // release independent of when the descriptor is closed.
        if let Err(e) = FileExt::unlock(&self.file) {
            tracing::warn!(path = %self.path.display(), error = %e, "could not unlock the event log");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_on_the_same_log_is_refused_until_the_first_is_dropped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let first = LogLock::acquire(dir.path()).expect("first lock");
        match LogLock::acquire(dir.path()) {
            Err(EventsError::Locked { path }) => assert_eq!(path, dir.path().join(LOCK_FILE)),
            other => panic!("expected Locked, got {other:?}"),
        }
        drop(first);
        LogLock::acquire(dir.path()).expect("lock after release");
    }
}
