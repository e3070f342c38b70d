//! Snapshot side files: a batch snapshot state too large to sit inside its
//! record (more than [`INLINE_SNAPSHOT_MAX`]) is written to a file of the
//! log directory, made durable (file and directory fsynced) before the
//! record that names it is appended, verified (size and CRC32C) when
//! recovery loads it, and removed once a later durable snapshot of the same
//! job vertex supersedes it. See `docs/log-format.md`, "Snapshot side files".

use super::error::EventsError;
use super::event::JobEvent;
use super::format::is_snapshot_file_name;
use super::storage::Storage;
use std::collections::{BTreeMap, BTreeSet};

/// Indexes into `events` of the newest enumerator snapshot of each job
/// vertex: what recovery restores (and all it ever needs of side files).
fn newest_snapshots<E: AsRef<JobEvent>>(events: &[E]) -> BTreeMap<String, (usize, usize)> {
    let mut newest = BTreeMap::new();
    for (e, event) in events.iter().enumerate() {
        if let JobEvent::ExecutionFinished(done) = event.as_ref() {
            for (s, snap) in done.enumerator_snapshots.iter().enumerate() {
                newest.insert(snap.job_vertex.clone(), (e, s));
            }
        }
    }
    newest
}

/// The side file of the newest enumerator snapshot of each job vertex in
/// `events`, by job vertex (vertices whose newest state is inline are left
/// out).
#[must_use]
pub fn newest_snapshot_files<E: AsRef<JobEvent>>(events: &[E]) -> BTreeMap<String, String> {
    newest_snapshots(events)
        .into_iter()
        .filter_map(|(vertex, (e, s))| match events[e].as_ref() {
            JobEvent::ExecutionFinished(done) => done.enumerator_snapshots[s]
                .state_file
                .as_ref()
                .map(|f| (vertex, f.file.clone())),
            _ => None,
        })
        .collect()
}

/// Fills in, from its side file, the state of the newest enumerator
/// snapshot of each job vertex in `events` (the one recovery restores);
/// older, superseded snapshots keep an empty state (their files may be
/// gone). `events` are one run's, oldest first.
///
/// # Errors
/// [`EventsError::SnapshotFile`] if a needed side file is missing or does
/// not match its record.
pub fn load_snapshot_files<E: AsRef<JobEvent> + AsMut<JobEvent>>(
    storage: &dyn Storage,
    events: &mut [E],
) -> Result<(), EventsError> {
    for (e, s) in newest_snapshots(events).into_values() {
        if let JobEvent::ExecutionFinished(done) = events[e].as_mut() {
            let snap = &mut done.enumerator_snapshots[s];
            if let Some(file) = &snap.state_file {
                snap.state = storage.read_side_file(file)?;
            }
        }
    }
    Ok(())
}

/// Removes every side file of the log in `storage` except those named in
/// `keep` (leftovers of a crash before their record, or superseded ones).
/// Returns how many were removed; a failure to remove one is logged, not
/// fatal.
///
/// # Errors
/// [`EventsError::Io`] (or the store's error) if the side files cannot be
/// listed.
pub fn remove_snapshot_files_except(
    storage: &dyn Storage,
    keep: &BTreeSet<String>,
) -> Result<usize, EventsError> {
    let mut removed = 0;
    for name in storage.list_side_files()? {
        if is_snapshot_file_name(&name) && !keep.contains(&name) {
            storage.remove_side_file(&name);
            removed += 1;
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;
    use crate::events::SnapshotFile;
    use crate::events::format::snapshot_file_name;
    use crate::events::side_file::{read, write};

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
