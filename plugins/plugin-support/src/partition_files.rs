//! The on-disk layout of result partitions that the sample shuffle masters
//! hand out, and the checks they make on it.
//!
//! A partition of job `J`, intermediate data set `D`, produced by attempt `A`
//! of subtask `S` of job vertex `V`, lives in the directory
//! `<root>/<J>/<D>/<V>-<S>-<A>` (each name [sanitized](sanitize_component)).
//! The host writes subpartition `i` to `<location>/sub-<i>.data` and, once all
//! are complete, creates `<location>/COMPLETE` (the WIT `shuffle-descriptor`
//! contract). A partition without that marker does not exist yet.

use std::fs;
use std::io::ErrorKind;

/// Name of the marker file the host creates once every subpartition is written.
pub const COMPLETE_MARKER: &str = "COMPLETE";

/// Makes `name` safe as one path component: every character outside
/// `[A-Za-z0-9._-]` becomes `_`, and a name that is empty or only dots (which
/// would mean "here" or "parent") has each character replaced by `_` (an empty
/// name becomes `_`).
pub fn sanitize_component(name: &str) -> String {
    if name.chars().all(|c| c == '.') {
        return if name.is_empty() {
            "_".to_owned()
        } else {
            "_".repeat(name.len())
        };
    }
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The directory of one result partition under `root` (an absolute path
/// without trailing `/`, or `/`).
pub fn partition_location(
    root: &str,
    job_id: &str,
    intermediate_data_set: &str,
    job_vertex: &str,
    subtask: u32,
    attempt: u32,
) -> String {
    format!(
        "{}/{}/{}/{}-{subtask}-{attempt}",
        root.trim_end_matches('/'),
        sanitize_component(job_id),
        sanitize_component(intermediate_data_set),
        sanitize_component(job_vertex),
    )
}

/// Path of the data file of subpartition `index` in `location`.
pub fn subpartition_path(location: &str, index: u32) -> String {
    format!("{location}/sub-{index}.data")
}

/// Creates the partition directory (and its parents) so the host can write
/// into it.
///
/// # Errors
///
/// The OS error, naming the directory.
pub fn create_location(location: &str) -> Result<(), String> {
    fs::create_dir_all(location)
        .map_err(|e| format!("cannot create partition directory {location}: {e}"))
}

/// The size in bytes of each of the `num_subpartitions` data files of a
/// finished partition, or `None` when `<location>/COMPLETE` does not exist
/// (the partition was never finished or was deleted).
///
/// # Errors
///
/// The marker exists but a data file is missing or cannot be read, or the
/// marker itself cannot be checked for another reason than absence: the
/// partition is damaged, and the message says which file.
pub fn completed_sizes(location: &str, num_subpartitions: u32) -> Result<Option<Vec<u64>>, String> {
    let marker = format!("{location}/{COMPLETE_MARKER}");
    match fs::metadata(&marker) {
        Ok(_) => {}
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot check {marker}: {e}")),
    }
    (0..num_subpartitions)
        .map(|index| {
            let path = subpartition_path(location, index);
            fs::metadata(&path)
                .map(|m| m.len())
                .map_err(|e| format!("partition marked complete but {path} is unreadable: {e}"))
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

/// Deletes the partition directory `location`, which must lie strictly inside
/// `root`; a directory already gone is fine.
///
/// # Errors
///
/// `location` is outside `root` (the shuffle master deletes nothing it did not
/// hand out), or the OS refuses the deletion.
pub fn release_location(root: &str, location: &str) -> Result<(), String> {
    if !is_strictly_inside(root, location) {
        return Err(format!(
            "refusing to delete {location}: it is not a partition directory under {root}"
        ));
    }
    match fs::remove_dir_all(location) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!("cannot delete partition directory {location}: {e}")),
    }
}

/// Whether `path` names something below `root` without climbing out of it
/// (no empty, `.` or `..` component after the root).
pub fn is_strictly_inside(root: &str, path: &str) -> bool {
    let prefix = format!("{}/", root.trim_end_matches('/'));
    match path.strip_prefix(&prefix) {
        Some(rest) => {
            !rest.is_empty()
                && rest
                    .split('/')
                    .all(|c| !c.is_empty() && c != "." && c != "..")
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn components_are_sanitized_and_never_climb() {
        assert_eq!(sanitize_component("map/1 x"), "map_1_x");
        assert_eq!(sanitize_component("a.b-c_D9"), "a.b-c_D9");
        assert_eq!(sanitize_component(".."), "__");
        assert_eq!(sanitize_component(""), "_");
        assert_eq!(sanitize_component("é"), "_");
    }

    #[test]
    fn locations_follow_the_documented_layout() {
        assert_eq!(
            partition_location("/r/", "job 1", "ds", "map", 2, 0),
            "/r/job_1/ds/map-2-0"
        );
        assert_eq!(partition_location("/", "j", "d", "v", 0, 1), "/j/d/v-0-1");
    }

    #[test]
    fn only_directories_strictly_inside_the_root_may_be_released() {
        assert!(is_strictly_inside("/r", "/r/j/d/v-0-0"));
        assert!(!is_strictly_inside("/r", "/r"));
        assert!(!is_strictly_inside("/r", "/r/"));
        assert!(!is_strictly_inside("/r", "/rx/j"));
        assert!(!is_strictly_inside("/r", "/r/../etc"));
        assert!(release_location("/r", "/etc").is_err());
    }

    #[test]
    fn a_partition_counts_only_once_its_marker_exists() {
        let dir = std::env::temp_dir().join(format!("plugin-support-{}", std::process::id()));
        let location = dir.join("j/d/v-0-0");
        let location = location.to_str().unwrap();
        create_location(location).unwrap();
        fs::write(subpartition_path(location, 0), b"abc").unwrap();
        fs::write(subpartition_path(location, 1), b"").unwrap();
        assert_eq!(completed_sizes(location, 2).unwrap(), None);
        fs::write(format!("{location}/{COMPLETE_MARKER}"), b"").unwrap();
        assert_eq!(completed_sizes(location, 2).unwrap(), Some(vec![3, 0]));
        assert!(completed_sizes(location, 3).is_err());
        release_location(dir.to_str().unwrap(), location).unwrap();
        assert_eq!(completed_sizes(location, 2).unwrap(), None);
        fs::remove_dir_all(&dir).unwrap();
    }
}
