//! The `read-lines` source reader: the lines of a split (a byte range of a
//! file, or inline text) as record batches of one `Utf8` column, at most
//! [`BATCH_ROWS`] rows each (a split's last batch may be shorter; every
//! batch has at least one row). `read-csv` reads through arrow-csv
//! (`super::csv`), `read-parquet` through the parquet crate
//! (`super::parquet`), both by the same ownership rule.
//!
//! A file range owns every line that *starts* inside `[start, start+length)`
//! (the Hadoop `LineRecordReader` rule the WIT contract states), so ranges
//! can cut lines anywhere and every line is read by exactly one split.

use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_array::builder::{ArrayBuilder, StringBuilder};

use super::{SplitSource, TaskError};
use coordhost_io::grant::Grants;
use coordhost_model::value::cells::batch_of;
use coordhost_model::value::{BATCH_ROWS, SplitData, SplitPayloadData};

/// Longest line a source reader takes from a `file-range` split, in bytes
/// (16 MiB, the newline included): a longer line fails the task naming the
/// split's enumerator, so a file without newlines cannot grow host memory.
pub const MAX_LINE_BYTES: usize = 16 << 20;

/// A [`SplitSource`] over a fixed list (tests and tools).
#[derive(Debug, Default)]
pub struct VecSplitSource(pub std::collections::VecDeque<SplitData>);

impl SplitSource for VecSplitSource {
    fn next_split(&mut self) -> Result<Option<SplitData>, TaskError> {
        Ok(self.0.pop_front())
    }
}

/// Reads every line `split` owns as `read-lines` rows: one `Utf8` column,
/// the line without its line break (and without a `\r` before it),
/// calling `emit` per batch of at most [`BATCH_ROWS`] rows.
///
/// A `file-range` split is read only inside `grants`, the split
/// enumerator's directories (symlinks resolved, regular files only, lines
/// up to [`MAX_LINE_BYTES`]); `None` is for splits the host made itself
/// (tests, tools), read with the host's own authority.
///
/// # Errors
///
/// [`TaskError::Split`] for a file outside the grants, not a regular file,
/// or with a line over the bound; [`TaskError::Io`] for a file that cannot
/// be read, [`TaskError::InvalidData`] for a line that is not UTF-8, and
/// whatever `emit` returns.
pub fn read_split(
    split: &SplitData,
    grants: Option<&Grants>,
    mut emit: impl FnMut(RecordBatch) -> Result<(), TaskError>,
) -> Result<(), TaskError> {
    let mut lines = StringBuilder::with_capacity(BATCH_ROWS, BATCH_ROWS * 64);
    let mut on_line = |line: &str| -> Result<(), TaskError> {
        let line = line.strip_suffix('\n').unwrap_or(line);
        lines.append_value(line.strip_suffix('\r').unwrap_or(line));
        if lines.len() == BATCH_ROWS {
            emit(batch_of(vec![Arc::new(lines.finish())]))?;
        }
        Ok(())
    };
    read_lines(split, grants, &mut on_line)?;
    if lines.len() > 0 {
        emit(batch_of(vec![Arc::new(lines.finish())]))?;
    }
    Ok(())
}

/// Calls `on_line(line)` for every line `split` owns (the line with its
/// `\n`, if it has one).
fn read_lines(
    split: &SplitData,
    grants: Option<&Grants>,
    on_line: &mut impl FnMut(&str) -> Result<(), TaskError>,
) -> Result<(), TaskError> {
    match &split.payload {
        SplitPayloadData::Inline(text) => {
            for line in text.split_inclusive('\n') {
                on_line(line)?;
            }
            Ok(())
        }
        SplitPayloadData::FileRange {
            path,
            start,
            length,
        } => {
            let io = |source| TaskError::Io {
                path: path.clone(),
                source,
            };
            let name = path.display().to_string();
            let file = open_split_file(split, path, grants)?;
            let plugin = grants.map_or("(host)", Grants::plugin);
            let too_long = |at: u64| TaskError::Split {
                split: split.id.clone(),
                reason: format!(
                    "plugin `{plugin}` named {name}, whose line at byte {at} is longer than {MAX_LINE_BYTES} bytes"
                ),
            };
            let mut f = BufReader::with_capacity(256 * 1024, file);
            let end = start.saturating_add(*length);
            let mut pos = *start;
            let mut buf = Vec::new();
            if *start > 0 {
                // The line that contains byte start-1 belongs to an earlier split.
                f.seek(SeekFrom::Start(start - 1)).map_err(io)?;
                let n = read_line_bounded(&mut f, &mut buf).map_err(io)?;
                if n > MAX_LINE_BYTES {
                    return Err(too_long(start - 1));
                }
                pos = start - 1 + n as u64;
            }
            while pos < end {
                buf.clear();
                let n = read_line_bounded(&mut f, &mut buf).map_err(io)?;
                if n == 0 {
                    break;
                }
                if n > MAX_LINE_BYTES {
                    return Err(too_long(pos));
                }
                let line = std::str::from_utf8(&buf).map_err(|_| TaskError::InvalidData {
                    detail: format!("{name} at byte {pos}: the line is not UTF-8"),
                })?;
                on_line(line)?;
                pos += n as u64;
            }
            Ok(())
        }
    }
}

/// Opens the file of `split`'s `file-range` payload: through the plugin's
/// `grants` when it has them, else (a path the host chose: tests, tools)
/// as a regular file, without blocking on a FIFO.
///
/// # Errors
///
/// [`TaskError::Split`] for a file outside the grants or not a regular
/// file, [`TaskError::Io`] for one that cannot be opened.
/// A split's input: a file, or an object read through the host's client.
pub(super) trait SplitInput: std::io::Read + Seek + Send {}
impl<T: std::io::Read + Seek + Send> SplitInput for T {}

/// Opens the input of a `file-range` split: a file inside `grants`, or
/// (an `s3://` path) an object inside the store grants of `grants`.
pub(super) fn open_split_file(
    split: &SplitData,
    path: &std::path::Path,
    grants: Option<&Grants>,
) -> Result<Box<dyn SplitInput>, TaskError> {
    let refused = |e: coordhost_io::grant::GrantError| TaskError::Split {
        split: split.id.clone(),
        reason: e.to_string(),
    };
    let is_object = path
        .to_str()
        .is_some_and(coordhost_io::objstore::is_object_url);
    match grants {
        Some(g) if is_object => g
            .open_readable_object(path)
            .map(|f| Box::new(f) as Box<dyn SplitInput>)
            .map_err(refused),
        Some(g) => g
            .open_readable_file(path)
            .map(|f| Box::new(f) as Box<dyn SplitInput>)
            .map_err(refused),
        None => coordhost_io::files::open_regular_file(path, u64::MAX)
            .map(|(f, _)| Box::new(f) as Box<dyn SplitInput>)
            .map_err(|source| TaskError::Io {
                path: path.to_path_buf(),
                source,
            }),
    }
}

/// Reads one line (with its `\n`) into `buf`, but at most
/// [`MAX_LINE_BYTES`] + 1 bytes: a result over the bound means the line is
/// too long.
fn read_line_bounded(f: &mut impl BufRead, buf: &mut Vec<u8>) -> std::io::Result<usize> {
    f.take(MAX_LINE_BYTES as u64 + 1).read_until(b'\n', buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::cast::AsArray;

    fn lines(path: &std::path::Path, start: u64, length: u64) -> Vec<String> {
        let split = SplitData {
            id: "s".into(),
            payload: SplitPayloadData::FileRange {
                path: path.to_path_buf(),
                start,
                length,
            },
        };
        let mut out = Vec::new();
        read_split(&split, None, |b| {
            let lines = b.column(0).as_string::<i32>();
            out.extend(lines.iter().map(|l| l.expect("text").to_string()));
            Ok(())
        })
        .expect("read");
        out
    }

    #[test]
    fn ranges_cut_anywhere_give_every_line_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("f.txt");
        let text = "alpha\nbeta\n\ngamma delta\nlast-no-newline";
        std::fs::write(&p, text).expect("write");
        let all = lines(&p, 0, text.len() as u64);
        assert_eq!(all, ["alpha", "beta", "", "gamma delta", "last-no-newline"]);
        for cut in 0..=text.len() as u64 {
            let mut both = lines(&p, 0, cut);
            both.extend(lines(&p, cut, text.len() as u64 - cut));
            assert_eq!(both, all, "cut at {cut}");
        }
    }
}
