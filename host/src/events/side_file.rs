//! The files of snapshot side files in a log folder: written durably,
//! read back checked against their record (size and CRC32C), removed. The
//! file half of [`FileStorage`](super::FileStorage)'s side files; which
//! side files a log needs is `snapshot_file`'s business (docs/log-format.md,
//! "Snapshot side files").

use std::fs::{self, File, OpenOptions};
use std::io::Write as _;
use std::path::Path;

use super::error::EventsError;
use super::event::SnapshotFile;
use super::format::{TEMP_SUFFIX, is_snapshot_file_name};

/// Writes `state` as side file `name` of `log_dir`, durably: a temporary
/// file is written and fsynced, renamed, and the directory fsynced.
///
/// # Errors
/// [`EventsError::SnapshotFile`] naming the file and the I/O error.
pub(crate) fn write(log_dir: &Path, name: &str, state: &[u8]) -> Result<SnapshotFile, EventsError> {
    let path = log_dir.join(name);
    let tmp = log_dir.join(format!("{name}{TEMP_SUFFIX}"));
    let failed = |e: std::io::Error| EventsError::SnapshotFile {
        path: path.clone(),
        problem: format!("cannot be written: {e}"),
    };
    {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .map_err(failed)?;
        file.write_all(state).map_err(failed)?;
        file.sync_all().map_err(failed)?;
    }
    fs::rename(&tmp, &path).map_err(failed)?;
    File::open(log_dir)
        .and_then(|d| d.sync_all())
        .map_err(failed)?;
    Ok(SnapshotFile {
        file: name.to_owned(),
        len: state.len() as u64,
        crc32c: crc32c::crc32c(state),
    })
}

/// Reads side file `file` of `log_dir` and checks it against its record.
///
/// # Errors
/// [`EventsError::SnapshotFile`] if the name is not a side file's, or the
/// file is missing, has another size, or fails its CRC32C.
pub fn read(log_dir: &Path, file: &SnapshotFile) -> Result<Vec<u8>, EventsError> {
    let path = log_dir.join(&file.file);
    let problem = |problem: String| EventsError::SnapshotFile {
        path: path.clone(),
        problem,
    };
    if !is_snapshot_file_name(&file.file) {
        return Err(problem(
            "the record names a file that is not a snapshot side file".to_owned(),
        ));
    }
    // A regular file only, opened without blocking (a FIFO in its place is
    // refused at once), and never more bytes than its record says.
    let (mut opened, len) = crate::files::open_regular_file(&path, u64::MAX)
        .map_err(|e| problem(format!("cannot be read: {e}")))?;
    if len != file.len {
        return Err(problem(format!(
            "is {len} bytes; its record says {}",
            file.len
        )));
    }
    let bytes = crate::files::read_rest(&mut opened, Vec::new(), file.len)
        .map_err(|e| problem(format!("cannot be read: {e}")))?;
    check_against_record(&bytes, file, "file").map_err(problem)?;
    Ok(bytes)
}

/// Checks the bytes of side file `file` (a `what`: file or object) against
/// what its record says: size, then CRC32C.
///
/// # Errors
/// The problem, in words, for [`EventsError::SnapshotFile`].
pub(super) fn check_against_record(
    bytes: &[u8],
    file: &SnapshotFile,
    what: &str,
) -> Result<(), String> {
    if bytes.len() as u64 != file.len {
        return Err(format!(
            "is {} bytes; its record says {}",
            bytes.len(),
            file.len
        ));
    }
    let crc = crc32c::crc32c(bytes);
    if crc != file.crc32c {
        return Err(format!(
            "CRC32C is {crc:#010x}; its record says {:#010x} (the {what} is damaged)",
            file.crc32c
        ));
    }
    Ok(())
}

/// Removes side file `name` of `log_dir`; a failure is logged (the file is
/// then only wasted space: no record will need it).
pub(crate) fn remove(log_dir: &Path, name: &str) {
    if let Err(e) = fs::remove_file(log_dir.join(name))
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(
            file = %log_dir.join(name).display(),
            "could not remove a superseded batch snapshot side file: {e}"
        );
    }
}
