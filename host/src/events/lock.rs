//! The job log lock: an exclusive advisory lock on `<log dir>/LOCK`, held
//! for as long as a writer may append, so two coordinators never write the
//! same job's log at once; the second one is refused.
//!
//! The lock is `flock(2)`-style (std's `File::try_lock`): the kernel drops it when the
//! holding process dies, so a crashed coordinator never leaves a stale lock.
//!
//! A lock on a file alone can be stolen: after `rm LOCK` a second
//! coordinator creates a new `LOCK` (another inode) and locks that, while
//! the first still holds the old one (issue 12.4). So the log directory
//! itself is locked too — a directory cannot be unlinked while it holds
//! segments, and a new one under the same name is a new log. Both locks are
//! taken; either one held elsewhere refuses the second coordinator, whatever
//! happened to the `LOCK` file's name.
//!
//! Deleting the whole log folder (`rm -rf log`) still lets a second
//! coordinator start a new log beside the first, which holds its locks on
//! unlinked inodes. So the holder also verifies, before every durable step
//! of the log ([`LockHolder::verify`], called by each segment sync), that the
//! log folder at its path is still the one it locked, and stops with an
//! error when it is not: it never makes another record durable, and so
//! never publishes output after its lock was lost.

use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};

use coordhost_log::EventsError;
use coordhost_log::format::LOCK_FILE;

/// A held lock on one job's log directory; released when dropped.
#[derive(Debug)]
pub struct LogLock {
    file: File,
    /// The log directory, opened and locked (see the module docs).
    dir: File,
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
        let dir = File::open(log_dir).map_err(io(log_dir))?;
        exclusive(&dir, &path)?;
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)
            .map_err(io(&path))?;
        exclusive(&file, &path)?;
        Ok(Self { file, dir, path })
    }

    /// The lock file.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What the holder checks before each durable step: the identity
    /// (device and inode) of the locked log folder.
    ///
    /// # Errors
    /// The I/O error of reading the held files' metadata.
    pub fn holder(&self) -> std::io::Result<LockHolder> {
        Ok(LockHolder {
            log_dir: self.path.parent().unwrap_or(Path::new("")).to_path_buf(),
            dir: identity(&self.dir.metadata()?),
        })
    }
}

/// The identity of a held [`LogLock`], checked against the file system.
#[derive(Debug, Clone)]
pub struct LockHolder {
    log_dir: PathBuf,
    /// (device, inode) of the locked log folder.
    dir: (u64, u64),
}

impl LockHolder {
    /// Checks that `<log dir>` is still the folder this coordinator locked.
    ///
    /// # Errors
    /// An error of kind `Other` naming the log folder when it was deleted or
    /// replaced: the lock is lost and the caller must stop.
    pub fn verify(&self) -> std::io::Result<()> {
        let now = |path: &Path| std::fs::symlink_metadata(path).ok().map(|m| identity(&m));
        // The folder's lock alone keeps a second coordinator out, so a
        // deleted or replaced `LOCK` file is no reason to stop; a deleted or
        // replaced folder is.
        if now(&self.log_dir) == Some(self.dir) {
            return Ok(());
        }
        Err(std::io::Error::other(format!(
            "{}: this coordinator lost its lock on the job log (the log folder was deleted or replaced while it ran); it stops so that two coordinators never write one job",
            self.log_dir.display()
        )))
    }
}

fn identity(m: &std::fs::Metadata) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    (m.dev(), m.ino())
}

/// Takes `file`'s exclusive lock without waiting; `path` names the log's
/// lock in the error.
fn exclusive(file: &File, path: &Path) -> Result<(), EventsError> {
    match file.try_lock() {
        Ok(()) => Ok(()),
        Err(TryLockError::WouldBlock) => Err(EventsError::Locked {
            path: path.to_path_buf(),
        }),
        Err(TryLockError::Error(source)) => Err(EventsError::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}

impl Drop for LogLock {
    fn drop(&mut self) {
        // Closing the file releases the lock too; unlocking first makes the
        // release independent of when the descriptor is closed.
        for f in [&self.file, &self.dir] {
            if let Err(e) = f.unlock() {
                tracing::warn!(path = %self.path.display(), error = %e, "could not unlock the event log");
            }
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

    #[test]
    fn a_deleted_or_replaced_lock_file_does_not_let_a_second_holder_in() {
        let dir = tempfile::tempdir().expect("tempdir");
        let first = LogLock::acquire(dir.path()).expect("first lock");
        std::fs::remove_file(dir.path().join(LOCK_FILE)).expect("rm LOCK");
        assert!(matches!(
            LogLock::acquire(dir.path()),
            Err(EventsError::Locked { .. })
        ));
        // A replacement LOCK file, locked by no one.
        std::fs::write(dir.path().join(LOCK_FILE), b"").expect("a new LOCK");
        assert!(matches!(
            LogLock::acquire(dir.path()),
            Err(EventsError::Locked { .. })
        ));
        drop(first);
        LogLock::acquire(dir.path()).expect("lock after release");
    }
}
