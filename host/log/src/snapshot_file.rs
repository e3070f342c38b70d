//! Snapshot side files: a batch snapshot state too large to sit inside its
//! record (more than [`INLINE_SNAPSHOT_MAX`]) is written to a file of the
//! log directory, made durable (file and directory fsynced) before the
//! record that names it is appended, verified (size and CRC32C) when
//! recovery loads it, and removed once a later durable snapshot of the same
//! job vertex supersedes it. See `docs/log-format.md`, "Snapshot side files".

use super::error::EventsError;
use super::event::{JobEvent, SnapshotFile};
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

/// Checks the bytes of side file `file` (a `what`: file or object) against
/// what its record says: size, then CRC32C.
///
/// # Errors
/// The problem, in words, for [`EventsError::SnapshotFile`].
pub fn check_against_record(bytes: &[u8], file: &SnapshotFile, what: &str) -> Result<(), String> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_side_files_bytes_are_checked_by_size_then_crc() {
        let state = b"enumerator state".to_vec();
        let record = SnapshotFile {
            file: crate::format::snapshot_file_name(0, 1),
            len: state.len() as u64,
            crc32c: crc32c::crc32c(&state),
        };
        assert_eq!(check_against_record(&state, &record, "file"), Ok(()));
        let short = check_against_record(&state[..3], &record, "file").expect_err("short");
        assert_eq!(short, "is 3 bytes; its record says 16");
        let mut damaged = state.clone();
        damaged[0] ^= 1;
        let error = check_against_record(&damaged, &record, "object").expect_err("damaged");
        assert!(
            error.contains("CRC32C") && error.ends_with("(the object is damaged)"),
            "{error}"
        );
    }
}
