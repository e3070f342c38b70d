//! Source readers: the lines of a split (a byte range of a file, or inline
//! text), as `read-lines` or `read-csv` rows.
//!
//! A file range owns every line that *starts* inside `[start, start+length)`
//! (the Hadoop `LineRecordReader` rule the WIT contract states), so ranges
//! can cut lines anywhere and every line is read by exactly one split.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};

use super::operators::CsvLineParser;
use super::{SplitSource, TaskError};
use crate::grant::Grants;
use crate::graph::Operator;
use crate::value::{SplitData, SplitPayloadData};

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

/// Reads every line `split` owns and turns it into a row as the chain's
/// first operator says (`read-lines`: `[line]`; `read-csv`: the fields),
/// calling `emit` per row.
///
/// # Errors
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
/// be read, [`TaskError::Data`] for a CSV line with the wrong number of
/// fields, and whatever `emit` returns.
pub fn read_split(
    split: &SplitData,
    grants: Option<&Grants>,
    operators: &[Operator],
    vertex: &str,
    mut emit: impl FnMut(Vec<String>) -> Result<(), TaskError>,
) -> Result<(), TaskError> {
    if let Some(Operator::ReadParquet { columns }) = operators.first() {
        return super::parquet::read_split_rows(split, grants, columns, vertex, emit);
    }
    let (csv, skip_header) = match operators.first() {
        Some(Operator::ReadCsv {
            columns,
            delimiter,
            skip_header,
        }) => (Some((*columns, *delimiter)), *skip_header),
        _ => (None, false),
    };
    let mut fields = Vec::new();
    let mut parser = csv.map(|(_, delim)| CsvLineParser::new(delim));
    // `header`: the line starts at byte 0 of a file. `skip-header` skips
    // the header once per file, never a line of an inline split (issue 17).
    let mut on_line = |line: &str,
                       offset: u64,
                       header: bool,
                       file: &str|
     -> Result<(), TaskError> {
        let line = line.strip_suffix('\n').unwrap_or(line);
        if skip_header && header {
            return Ok(());
        }
        match csv {
            None => emit(vec![line.strip_suffix('\r').unwrap_or(line).to_string()]),
            Some((n, _)) => {
                if line.is_empty() {
                    return Ok(());
                }
                if let Some(parser) = parser.as_mut() {
                    parser.parse(line, &mut fields);
                }
                if fields.len() != n {
                    return Err(TaskError::Data {
                        vertex: vertex.to_string(),
                        detail: format!(
                            "{file} at byte {offset}: {} fields, the read-csv operator expects {n}",
                            fields.len()
                        ),
                    });
                }
                emit(std::mem::take(&mut fields))
            }
        }
    };
    match &split.payload {
        SplitPayloadData::Inline(text) => {
            let mut offset = 0u64;
            let name = format!("split {}", split.id);
            for line in text.split_inclusive('\n') {
                on_line(line, offset, false, &name)?;
                offset += line.len() as u64;
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
            let file = match grants {
                Some(g) => g.open_readable_file(path).map_err(|e| TaskError::Split {
                    split: split.id.clone(),
                    reason: e.to_string(),
                })?,
                None => File::open(path).map_err(io)?,
            };
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
                let line = std::str::from_utf8(&buf).map_err(|_| TaskError::Data {
                    vertex: vertex.to_string(),
                    detail: format!("{name} at byte {pos}: the line is not UTF-8"),
                })?;
                on_line(line, pos, pos == 0, &name)?;
                pos += n as u64;
            }
            Ok(())
        }
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
        read_split(&split, None, &[Operator::ReadLines], "v", |r| {
            out.push(r[0].clone());
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
