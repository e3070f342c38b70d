//! The files of snapshot side files in a log folder: written durably,
//! read back checked against their record (size and CRC32C), removed. The
//! file half of [`FileStorage`](super::FileStorage)'s side files (the rules are
//! `coordhost_log`'s); which
//! side files a log needs is `snapshot_file`'s business (docs/log-format.md,
//! "Snapshot side files").

use std::fs::{self, File, OpenOptions};
use std::io::Write as _;
use std::path::Path;

use coordhost_log::format::{TEMP_SUFFIX, is_snapshot_file_name};
use coordhost_log::{EventsError, SnapshotFile, check_against_record};

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

#[cfg(test)]
mod tests {
    use std::fs;

    use std::collections::BTreeSet;

    use coordhost_log::format::snapshot_file_name;
    use coordhost_log::remove_snapshot_files_except;

    use super::*;

    #[test]
    fn a_side_file_round_trips_and_damage_or_a_wrong_size_is_named() {
        crate::files::test_support::within_deadline(|| {
            let dir = tempfile::tempdir().expect("tempdir");
            let name = snapshot_file_name(0, 1);
            let state: Vec<u8> = (0..3000u32).map(|i| (i % 251) as u8).collect();
            let file = write(dir.path(), &name, &state).expect("write");
            assert_eq!((file.len, file.crc32c), (3000, crc32c::crc32c(&state)));
            assert_eq!(read(dir.path(), &file).expect("read"), state);

            let mut damaged = state.clone();
            damaged[1234] ^= 1;
            fs::write(dir.path().join(&name), &damaged).expect("damage");
            let error = read(dir.path(), &file)
                .expect_err("damage is caught")
                .to_string();
            assert!(error.contains("CRC32C") && error.contains(&name), "{error}");

            fs::write(dir.path().join(&name), &state[..10]).expect("truncate");
            let error = read(dir.path(), &file)
                .expect_err("size is checked")
                .to_string();
            assert!(
                error.contains("is 10 bytes; its record says 3000"),
                "{error}"
            );

            let forged = SnapshotFile {
                file: "../escape.state".into(),
                ..file.clone()
            };
            assert!(read(dir.path(), &forged).is_err());

            fs::remove_file(dir.path().join(&name)).expect("remove");
            assert!(read(dir.path(), &file).is_err());

            // A FIFO in its place is refused at once, never waited on.
            crate::files::test_support::mkfifo(&dir.path().join(&name));
            let error = read(dir.path(), &file).expect_err("a FIFO").to_string();
            assert!(
                error.contains("it is a FIFO, not a regular file") && error.contains(&name),
                "{error}"
            );
        });
    }

    #[test]
    fn only_side_files_not_kept_are_removed() {
        let dir = tempfile::tempdir().expect("tempdir");
        for n in 0..3 {
            write(dir.path(), &snapshot_file_name(0, n), b"x").expect("write");
        }
        fs::write(dir.path().join("segment-00000000.log"), b"seg").expect("segment");
        let keep: BTreeSet<String> = [snapshot_file_name(0, 1)].into();
        assert_eq!(
            remove_snapshot_files_except(
                &crate::events::FileStorage::open_read_only(dir.path()),
                &keep
            )
            .expect("rm"),
            2
        );
        let mut left: Vec<String> = fs::read_dir(dir.path())
            .expect("list")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(
            left,
            ["segment-00000000.log", "snapshot-00000000-00000001.state"]
        );
    }
}
