//! Source readers: the lines of a split (a byte range of a file, or inline
//! text), as `read-lines` or `read-csv` rows.
//!
//! A file range owns every line that *starts* inside `[start, start+length)`
//! (the Hadoop `LineRecordReader` rule the WIT contract states), so ranges
//! can cut lines anywhere and every line is read by exactly one split.

use std::fs::File;
use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::path::PathBuf;

use super::operators::parse_csv_line;
use super::{SplitSource, TaskError};
use crate::graph::Operator;

/// What a split holds, as the host's readers see it (mirrors the WIT
/// `split-payload`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum SplitPayloadData {
    /// Bytes `[start, start+length)` of a file.
    FileRange {
        /// Absolute path.
        path: PathBuf,
        /// First byte.
        start: u64,
        /// Number of bytes.
        length: u64,
    },
    /// Lines separated by `\n`.
    Inline(String),
}

/// A split handed to a source task.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SplitData {
    /// Id unique within its enumerator.
    pub id: String,
    /// What to read.
    pub payload: SplitPayloadData,
}

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
/// [`TaskError::Io`] for a file that cannot be read, [`TaskError::Data`] for
/// a CSV line with the wrong number of fields, and whatever `emit` returns.
pub fn read_split(
    split: &SplitData,
    operators: &[Operator],
    vertex: &str,
    mut emit: impl FnMut(Vec<String>) -> Result<(), TaskError>,
) -> Result<(), TaskError> {
    let (csv, skip_header) = match operators.first() {
        Some(Operator::ReadCsv {
            columns,
            delimiter,
            skip_header,
        }) => (Some((*columns, *delimiter)), *skip_header),
        _ => (None, false),
    };
    let mut fields = Vec::new();
    let mut on_line = |line: &str, offset: u64, file: &str| -> Result<(), TaskError> {
        let line = line.strip_suffix('\n').unwrap_or(line);
        if skip_header && offset == 0 {
            return Ok(());
        }
        match csv {
            None => emit(vec![line.strip_suffix('\r').unwrap_or(line).to_string()]),
            Some((n, delim)) => {
                if line.is_empty() {
                    return Ok(());
                }
                parse_csv_line(line, delim, &mut fields);
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
                on_line(line, offset, &name)?;
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
            let mut f = BufReader::with_capacity(256 * 1024, File::open(path).map_err(io)?);
            let end = start.saturating_add(*length);
            let mut pos = *start;
            let mut buf = Vec::new();
            if *start > 0 {
                // The line that contains byte start-1 belongs to an earlier split.
                f.seek(SeekFrom::Start(start - 1)).map_err(io)?;
                pos = start - 1 + f.read_until(b'\n', &mut buf).map_err(io)? as u64;
            }
            while pos < end {
                buf.clear();
                let n = f.read_until(b'\n', &mut buf).map_err(io)?;
                if n == 0 {
                    break;
                }
                let line = std::str::from_utf8(&buf).map_err(|_| TaskError::Data {
                    vertex: vertex.to_string(),
                    detail: format!("{name} at byte {pos}: the line is not UTF-8"),
                })?;
                on_line(line, pos, &name)?;
                pos += n as u64;
            }
            Ok(())
        }
    }
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
        read_split(&split, &[Operator::ReadLines], "v", |r| {
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
