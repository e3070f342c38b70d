//! Row-group splits of Parquet files: a split is an ordinary `file-range`
//! whose byte range covers exactly `K` whole row groups.
//!
//! The host's `read-parquet` reads the row groups whose *starting offset*
//! lies in a split's `[start, start + length)`: Hadoop's and Spark's rule
//! (parquet-mr `ParquetMetadataConverter.filterFileMetaDataByStart`), so any
//! byte-range cutting reads each row group exactly once. A row group starts
//! where its first column chunk starts: at its dictionary page when it has
//! one before its first data page, else at its first data page
//! (parquet-mr `BlockMetaData.getStartingPos`). This module cuts at those
//! offsets, so each split holds `K` row groups (the last one fewer).
//!
//! Only the footer is read (the Parquet file ends with the Thrift-encoded
//! `FileMetaData`, its length as a little-endian `u32`, and the magic
//! `PAR1`), with the `parquet` crate's metadata decoder; no page is read.

use std::io::{Read, Seek, SeekFrom};

use parquet::file::metadata::{ParquetMetaDataReader, RowGroupMetaData};
use plugin_support::splits::{PendingPayload, PendingSplit};

/// The magic at both ends of a Parquet file.
const MAGIC: &[u8; 4] = b"PAR1";

/// Largest footer the enumerator decodes, in bytes (64 MiB): a bigger one
/// is refused rather than allocated inside the guest's memory cap.
pub const MAX_FOOTER_BYTES: u64 = 64 << 20;

/// The offset where `row_group` starts: its first column chunk's dictionary
/// page when that comes before the first data page, else the first data
/// page (parquet-mr `BlockMetaData.getStartingPos`). The host's reader uses
/// the same rule.
pub fn row_group_start(row_group: &RowGroupMetaData) -> Option<u64> {
    let first = row_group.columns().first()?;
    let data = first.data_page_offset();
    let start = match first.dictionary_page_offset() {
        Some(dict) if dict > 0 && dict < data => dict,
        _ => data,
    };
    u64::try_from(start).ok()
}

/// Reads the footer of the Parquet file `path` (of `file_len` bytes) and
/// returns the starting offset of each row group, in file order.
///
/// # Errors
///
/// A message naming the file: it cannot be read, it is not a Parquet file
/// (no `PAR1` at either end), its footer is bigger than
/// [`MAX_FOOTER_BYTES`] or does not decode, or its row groups do not start
/// at strictly increasing offsets inside the file.
pub fn row_group_starts(path: &str, file_len: u64) -> Result<Vec<u64>, String> {
    let mut file: Option<std::fs::File> = None;
    row_group_starts_with(path, file_len, |offset, length| {
        let f = match &mut file {
            Some(f) => f,
            None => file
                .insert(std::fs::File::open(path).map_err(|e| format!("cannot open {path}: {e}"))?),
        };
        let io = |e: std::io::Error| format!("cannot read {path}: {e}");
        f.seek(SeekFrom::Start(offset)).map_err(io)?;
        let mut bytes = vec![0u8; usize::try_from(length).map_err(|e| e.to_string())?];
        f.read_exact(&mut bytes).map_err(io)?;
        Ok(bytes)
    })
}

/// [`row_group_starts`] over any input: `read(offset, length)` returns
/// exactly `length` bytes of the file or object named `path` (of
/// `file_len` bytes) from `offset`, or a message naming it. Only the two
/// ends and the footer are read.
///
/// # Errors
///
/// As [`row_group_starts`].
pub fn row_group_starts_with(
    path: &str,
    file_len: u64,
    mut read: impl FnMut(u64, u64) -> Result<Vec<u8>, String>,
) -> Result<Vec<u64>, String> {
    let bad = |why: String| format!("{path} is not a readable Parquet file: {why}");
    if file_len < 12 {
        return Err(bad(format!(
            "it has {file_len} bytes, fewer than a Parquet file's 12"
        )));
    }
    let head = read(0, 4)?;
    let tail = read(file_len - 8, 8)?;
    if head.len() != 4 || tail.len() != 8 {
        return Err(bad(format!("it ends before its {file_len} bytes")));
    }
    if head.as_slice() != MAGIC || &tail[4..] != MAGIC {
        return Err(bad("no `PAR1` magic at its start and end".to_owned()));
    }
    let footer_len = u64::from(u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]));
    if footer_len > MAX_FOOTER_BYTES || footer_len + 12 > file_len {
        return Err(bad(format!(
            "its footer claims {footer_len} bytes (file {file_len} bytes, limit {MAX_FOOTER_BYTES})"
        )));
    }
    let footer = read(file_len - 8 - footer_len, footer_len)?;
    if footer.len() as u64 != footer_len {
        return Err(bad(format!("it ends before its {file_len} bytes")));
    }
    let metadata = ParquetMetaDataReader::decode_metadata(&footer)
        .map_err(|e| bad(format!("its footer does not decode: {e}")))?;
    let mut starts = Vec::with_capacity(metadata.num_row_groups());
    for (i, rg) in metadata.row_groups().iter().enumerate() {
        let start =
            row_group_start(rg).ok_or_else(|| bad(format!("row group {i} has no column chunk")))?;
        if start >= file_len || starts.last().is_some_and(|&prev| start <= prev) {
            return Err(bad(format!(
                "row group {i} starts at byte {start}, not after the previous one inside the file"
            )));
        }
        starts.push(start);
    }
    Ok(starts)
}

/// Cuts a Parquet file into `file-range` splits of `per_split` row groups
/// each (the last may hold fewer), given the row groups' starting offsets
/// in file order. Split `j` covers `[starts[jK], starts[(j+1)K])`, the last
/// one up to `file_len`, so it holds exactly the starts of its row groups.
/// Ids name the file and the (inclusive) row-group range:
/// `"<file_name>#rg<first>-<last>"`. A file without row groups gives no
/// split.
///
/// # Panics
///
/// If `per_split` is 0 (callers validate the config first).
pub fn row_group_splits(
    path: &str,
    file_name: &str,
    file_len: u64,
    starts: &[u64],
    per_split: u64,
) -> Vec<PendingSplit> {
    assert!(per_split > 0, "row groups per split must be positive");
    let k = usize::try_from(per_split).unwrap_or(usize::MAX);
    starts
        .chunks(k)
        .enumerate()
        .map(|(j, chunk)| {
            let first = j * k;
            let last = first + chunk.len() - 1;
            let start = chunk[0];
            let end = starts.get(last + 1).copied().unwrap_or(file_len);
            PendingSplit {
                id: format!("{file_name}#rg{first}-{last}"),
                payload: PendingPayload::FileRange {
                    path: path.to_owned(),
                    start,
                    length: end - start,
                },
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ranges(splits: &[PendingSplit]) -> Vec<(&str, u64, u64)> {
        splits
            .iter()
            .map(|s| match &s.payload {
                PendingPayload::FileRange { start, length, .. } => (s.id.as_str(), *start, *length),
                PendingPayload::Inline(_) => unreachable!("file ranges only"),
            })
            .collect()
    }

    #[test]
    fn each_split_covers_k_whole_row_groups_and_the_last_one_the_rest() {
        let starts = [4, 100, 250, 300, 420];
        let splits = row_group_splits("/d/l.parquet", "l.parquet", 600, &starts, 2);
        assert_eq!(
            ranges(&splits),
            [
                ("l.parquet#rg0-1", 4, 246),
                ("l.parquet#rg2-3", 250, 170),
                ("l.parquet#rg4-4", 420, 180),
            ]
        );
        // Every row group's start lies in exactly one split's range.
        for s in starts {
            let holding = ranges(&splits)
                .iter()
                .filter(|(_, a, n)| (*a..a + n).contains(&s))
                .count();
            assert_eq!(holding, 1, "row group at {s}");
        }
    }

    #[test]
    fn one_split_per_file_when_k_is_at_least_the_row_group_count() {
        let splits = row_group_splits("/d/l.parquet", "l.parquet", 600, &[4, 100], 7);
        assert_eq!(ranges(&splits), [("l.parquet#rg0-1", 4, 596)]);
        assert!(row_group_splits("/d/e.parquet", "e.parquet", 40, &[], 3).is_empty());
    }

    #[test]
    fn a_file_that_is_not_parquet_is_refused_naming_it() {
        let dir = std::env::temp_dir().join(format!("fe-pq-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("x.parquet");
        std::fs::write(&path, b"a,b,c\n1,2,3\n4,5,6\n").unwrap();
        let p = path.to_str().unwrap();
        let err = row_group_starts(p, std::fs::metadata(&path).unwrap().len()).unwrap_err();
        assert!(err.contains(p) && err.contains("PAR1"), "{err}");
        // Magic at both ends, a footer length past the file.
        std::fs::write(&path, b"PAR1xxxxxxxx\xff\xff\x00\x00PAR1").unwrap();
        let err = row_group_starts(p, 20).unwrap_err();
        assert!(err.contains("footer claims"), "{err}");
        // Magic and a plausible length, but no Thrift inside.
        std::fs::write(&path, b"PAR1\x01\x02\x03\x04\x04\x00\x00\x00PAR1").unwrap();
        let err = row_group_starts(p, 16).unwrap_err();
        assert!(err.contains("does not decode"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
