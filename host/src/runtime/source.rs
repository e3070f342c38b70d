//! Source readers: the lines of a split (a byte range of a file, or inline
//! text), as `read-lines` or `read-csv` rows in record batches of `Utf8`
//! columns, at most [`BATCH_ROWS`] rows each (a split's last batch may be
//! shorter; every batch has at least one row).
//!
//! A file range owns every line that *starts* inside `[start, start+length)`
//! (the Hadoop `LineRecordReader` rule the WIT contract states), so ranges
//! can cut lines anywhere and every line is read by exactly one split.

use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};

use std::sync::Arc;

use arrow_array::builder::{ArrayBuilder, StringBuilder};
use arrow_array::{ArrayRef, NullArray, RecordBatch};

use super::operators::CsvLineParser;
use super::{SplitSource, TaskError};
use crate::grant::Grants;
use crate::graph::Operator;
use crate::value::cells::batch_of;
use crate::value::{BATCH_ROWS, SplitData, SplitPayloadData};

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

/// Reads every line `split` owns and turns it into rows as the chain's
/// first operator says (`read-lines`: one column, the line; `read-csv`: the
/// fields), calling `emit` per batch of at most [`BATCH_ROWS`] rows.
///
/// A `read-csv` batch holds every column, but only the columns the chain
/// reads before it replaces them (by `project`, `tokenize` or `aggregate`)
/// carry values; the others are `Null` columns of the right length, never
/// looked at (projection pushdown: the fields are split, not copied).
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
/// be read, [`TaskError::InvalidData`] for a CSV line with the wrong number
/// of fields or a quoted line break, and whatever `emit` returns.
pub fn read_split(
    split: &SplitData,
    grants: Option<&Grants>,
    operators: &[Operator],
    vertex: &str,
    mut emit: impl FnMut(RecordBatch) -> Result<(), TaskError>,
) -> Result<(), TaskError> {
    if let Some(Operator::ReadParquet { columns }) = operators.first() {
        return super::parquet::read_split(split, grants, columns, vertex, emit);
    }
    let (csv, skip_header) = match operators.first() {
        Some(Operator::ReadCsv {
            columns,
            delimiter,
            skip_header,
        }) => (Some((*columns, *delimiter)), *skip_header),
        _ => (None, false),
    };
    let mut rows = match csv {
        Some((n, delimiter)) => Rows::csv(delimiter, &needed_columns(operators, n)),
        None => Rows::lines(),
    };
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
        match &mut rows {
            Rows::Lines(b) => b.append_value(line.strip_suffix('\r').unwrap_or(line)),
            Rows::Csv {
                parser,
                columns,
                len,
            } => {
                if line.is_empty() {
                    return Ok(());
                }
                let n = parser.parse(line);
                if line.contains('"') && parser.ends_in_open_quote(line) {
                    return Err(TaskError::InvalidData {
                        detail: format!(
                            "{file} at byte {offset}: a quoted field holds a line break; CSV is read line by line (a split owns the lines that start in it), so the file cannot be read without losing or inventing records: remove the line breaks from its fields"
                        ),
                    });
                }
                if n != columns.len() {
                    return Err(TaskError::InvalidData {
                        detail: format!(
                            "{file} at byte {offset}: {n} fields, the read-csv operator expects {}",
                            columns.len()
                        ),
                    });
                }
                for (i, c) in columns.iter_mut().enumerate() {
                    if let Some(b) = c {
                        b.append_value(parser.field(i));
                    }
                }
                *len += 1;
            }
        }
        if rows.len() == BATCH_ROWS {
            emit(rows.take())?;
        }
        Ok(())
    };
    read_lines(split, grants, vertex, &mut on_line)?;
    if rows.len() > 0 {
        emit(rows.take())?;
    }
    Ok(())
}

/// The rows of the batch being built.
enum Rows {
    Lines(StringBuilder),
    Csv {
        parser: Box<CsvLineParser>,
        /// One builder per column the chain reads, `None` for the others.
        columns: Vec<Option<StringBuilder>>,
        /// Rows so far.
        len: usize,
    },
}

impl Rows {
    fn lines() -> Self {
        Rows::Lines(StringBuilder::with_capacity(BATCH_ROWS, BATCH_ROWS * 64))
    }

    fn csv(delimiter: u8, needed: &[bool]) -> Self {
        Rows::Csv {
            parser: Box::new(CsvLineParser::new(delimiter)),
            columns: needed
                .iter()
                .map(|&n| n.then(|| StringBuilder::with_capacity(BATCH_ROWS, BATCH_ROWS * 8)))
                .collect(),
            len: 0,
        }
    }

    fn len(&self) -> usize {
        match self {
            Rows::Lines(b) => b.len(),
            Rows::Csv { len, .. } => *len,
        }
    }

    /// The batch so far; starts the next one.
    fn take(&mut self) -> RecordBatch {
        match self {
            Rows::Lines(b) => batch_of(vec![Arc::new(b.finish())]),
            Rows::Csv { columns, len, .. } => {
                let n = std::mem::take(len);
                batch_of(
                    columns
                        .iter_mut()
                        .map(|c| match c {
                            Some(b) => Arc::new(b.finish()) as ArrayRef,
                            None => Arc::new(NullArray::new(n)) as ArrayRef,
                        })
                        .collect(),
                )
            }
        }
    }
}

/// Which of the `n` columns of a `read-csv` source the rest of the chain
/// reads: those a `filter` looks at, up to and including the first
/// operator that replaces the columns (`project`, `tokenize`,
/// `aggregate`); every column if none does (the rows leave the vertex).
pub fn needed_columns(operators: &[Operator], n: usize) -> Vec<bool> {
    let mut need = vec![false; n];
    for op in operators.iter().skip(1) {
        match op {
            Operator::ReadLines
            | Operator::ReadCsv { .. }
            | Operator::ReadParquet { .. }
            | Operator::Stage(_) => {}
            Operator::Filter { column, .. } => need[*column] = true,
            Operator::Tokenize { column, .. } => {
                need[*column] = true;
                return need;
            }
            Operator::Project { columns } => {
                for &c in columns {
                    need[c] = true;
                }
                return need;
            }
            Operator::Aggregate {
                key, aggregates, ..
            } => {
                for &c in key.iter().chain(aggregates.iter().flat_map(|a| &a.inputs)) {
                    need[c] = true;
                }
                return need;
            }
        }
    }
    vec![true; n]
}

/// Calls `on_line(line, offset, at_byte_0_of_a_file, name)` for every line
/// `split` owns (the line with its `\n`, if it has one).
fn read_lines(
    split: &SplitData,
    grants: Option<&Grants>,
    vertex: &str,
    on_line: &mut impl FnMut(&str, u64, bool, &str) -> Result<(), TaskError>,
) -> Result<(), TaskError> {
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

/// Opens the file of `split`'s `file-range` payload: through the plugin's
/// `grants` when it has them, else (a path the host chose: tests, tools)
/// as a regular file, without blocking on a FIFO.
///
/// # Errors
///
/// [`TaskError::Split`] for a file outside the grants or not a regular
/// file, [`TaskError::Io`] for one that cannot be opened.
pub(super) fn open_split_file(
    split: &SplitData,
    path: &std::path::Path,
    grants: Option<&Grants>,
) -> Result<std::fs::File, TaskError> {
    match grants {
        Some(g) => g.open_readable_file(path).map_err(|e| TaskError::Split {
            split: split.id.clone(),
            reason: e.to_string(),
        }),
        None => crate::files::open_regular_file(path, u64::MAX)
            .map(|(f, _)| f)
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
        read_split(&split, None, &[Operator::ReadLines], "v", |b| {
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

    fn csv_batches(text: &str, operators: &[Operator]) -> Result<Vec<RecordBatch>, TaskError> {
        let split = SplitData {
            id: "s".into(),
            payload: SplitPayloadData::Inline(text.to_string()),
        };
        let mut out = Vec::new();
        read_split(&split, None, operators, "v", |b| {
            out.push(b);
            Ok(())
        })?;
        Ok(out)
    }

    fn read_csv(columns: usize) -> Operator {
        Operator::ReadCsv {
            columns,
            delimiter: b',',
            skip_header: false,
        }
    }

    #[test]
    fn csv_rows_come_in_batches_of_at_most_batch_rows() {
        let text = "a,\"b,c\"\n\n".repeat(BATCH_ROWS + 3);
        let batches = csv_batches(&text, &[read_csv(2)]).expect("read");
        let sizes: Vec<usize> = batches.iter().map(RecordBatch::num_rows).collect();
        assert_eq!(sizes, [BATCH_ROWS, 3], "empty lines are skipped");
        let last = &batches[1];
        assert_eq!(last.column(0).as_string::<i32>().value(2), "a");
        assert_eq!(last.column(1).as_string::<i32>().value(2), "b,c");
    }

    #[test]
    fn read_csv_fills_only_the_columns_the_chain_reads() {
        let ops = [
            read_csv(4),
            Operator::Filter {
                column: 3,
                cmp: crate::graph::CmpOp::Eq,
                value: "x".into(),
                number: None,
            },
            Operator::Project { columns: vec![1] },
        ];
        assert_eq!(needed_columns(&ops, 4), [false, true, false, true]);
        let b = &csv_batches("1,2,3,x\n", &ops).expect("read")[0];
        assert_eq!(b.num_columns(), 4);
        assert_eq!(b.column(0).data_type(), &arrow_schema::DataType::Null);
        assert_eq!(b.column(1).as_string::<i32>().value(0), "2");
        // Rows that leave the chain as they are keep every column.
        assert_eq!(needed_columns(&[read_csv(2)], 2), [true, true]);
        // A wrong field count still fails, naming the offset.
        let err = csv_batches("1,2,3,x\n1,2\n", &ops).expect_err("fails");
        assert_eq!(
            err.to_string(),
            "split s at byte 8: 2 fields, the read-csv operator expects 4"
        );
    }
}
