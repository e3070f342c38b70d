//! The C Arrow IPC codec of the C guests (`plugins/c-arrow`, issue 27 item
//! 4) against arrow-rs, both ways: arrow-rs writes streams of Int64,
//! Float64 and Utf8 columns with nulls (sliced too, so offsets and bitmaps
//! do not start at 0), the codec reads each column and writes it back
//! (`plugins/c-arrow/arrow_echo.c`, compiled natively by `cc` with
//! AddressSanitizer and UndefinedBehaviorSanitizer), and arrow-rs must read
//! the very column it wrote. Then streams the codec must refuse: bytes
//! that are not Arrow, cut streams, another type or column count, two
//! batches, a buffer outside the body; each gets one line naming what was
//! wrong and exit 1, never a crash. The C sample's own path through the
//! host is `sql_functions_c.rs`.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, OnceLock};

use arrow_array::{Array, ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{Field, Schema};

use crate::support::workspace;

/// The driver, compiled once per test process into a folder kept for it.
fn echo_binary() -> &'static PathBuf {
    static BIN: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    &BIN.get_or_init(|| {
        let dir = tempfile::tempdir().expect("tempdir");
        let bin = dir.path().join("arrow_echo");
        let src = workspace().join("plugins/c-arrow");
        let out = Command::new("cc")
            .args(["-std=c11", "-g", "-O1", "-Wall", "-Wextra", "-Werror"])
            .args(["-fsanitize=address,undefined", "-fno-sanitize-recover=all"])
            .arg("-I")
            .arg(&src)
            .arg(src.join("arrow_echo.c"))
            .arg(src.join("arrow_ipc.c"))
            .arg("-o")
            .arg(&bin)
            .output()
            .expect("cc runs (the C compiler every Rust build on Linux needs)");
        assert!(
            out.status.success(),
            "arrow_echo compiles: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        (dir, bin)
    })
    .1
}

/// Runs the driver on `input`.
fn echo(types: &str, column: usize, input: &[u8]) -> Output {
    let mut child = Command::new(echo_binary())
        .args([types, &column.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("arrow_echo starts");
    let mut stdin = child.stdin.take().expect("stdin");
    let input = input.to_vec();
    let writer = std::thread::spawn(move || {
        // The driver may stop reading early on bad input: a broken pipe is fine.
        let _ = stdin.write_all(&input);
    });
    let out = child.wait_with_output().expect("arrow_echo ends");
    writer.join().expect("writer");
    out
}

/// `batch` as an Arrow IPC stream, written by arrow-rs.
fn stream(batch: &RecordBatch) -> Vec<u8> {
    let mut out = Vec::new();
    let mut w =
        arrow_ipc::writer::StreamWriter::try_new(&mut out, &batch.schema()).expect("writer");
    w.write(batch).expect("batch");
    w.finish().expect("finish");
    drop(w);
    out
}

/// The one batch of a stream, read by arrow-rs (which validates it).
fn read(bytes: &[u8]) -> RecordBatch {
    let reader = arrow_ipc::reader::StreamReader::try_new(std::io::Cursor::new(bytes), None)
        .expect("arrow-rs reads the codec's schema");
    let batches: Vec<RecordBatch> = reader
        .collect::<Result<_, _>>()
        .expect("arrow-rs reads the codec's batch");
    assert_eq!(batches.len(), 1, "exactly one batch");
    batches.into_iter().next().expect("one batch")
}

fn batch(columns: Vec<ArrayRef>) -> RecordBatch {
    let fields: Vec<Field> = columns
        .iter()
        .enumerate()
        .map(|(i, c)| Field::new(format!("arg{i}"), c.data_type().clone(), true))
        .collect();
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).expect("batch")
}

/// Columns of `rows` rows with a null every 7th row (from row 3), negative
/// and extreme values, empty and non-ASCII text.
fn columns(rows: usize) -> Vec<ArrayRef> {
    let null = |i: usize| i % 7 == 3;
    let ints: Int64Array = (0..rows)
        .map(|i| {
            (!null(i)).then(|| match i % 5 {
                0 => i64::MIN,
                1 => i64::MAX,
                _ => (i as i64 - 150) * 1_000_003,
            })
        })
        .collect();
    let floats: Float64Array = (0..rows)
        .map(|i| {
            (!null(i)).then(|| match i % 6 {
                0 => -0.0,
                1 => f64::INFINITY,
                2 => f64::MIN_POSITIVE,
                _ => i as f64 / 3.0 - 40.0,
            })
        })
        .collect();
    let texts: StringArray = (0..rows)
        .map(|i| {
            (!null(i)).then(|| match i % 4 {
                0 => String::new(),
                1 => "straße 日本".to_string(),
                _ => format!("w{i}"),
            })
        })
        .collect();
    vec![Arc::new(ints), Arc::new(floats), Arc::new(texts)]
}

const TYPES: &str = "int64,float64,utf8";

fn show(out: &Output) -> String {
    format!(
        "exit {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn the_c_codec_reads_what_arrow_rs_writes_and_writes_what_arrow_rs_reads() {
    let full = batch(columns(301));
    // Sliced: arrow-rs writes the slice's buffers; the first offset need not be 0.
    let sliced = full.slice(5, 250);
    let one = full.slice(3, 1);
    let no_nulls = full.slice(4, 3);
    for (what, b) in [
        ("301 rows", &full),
        ("a slice", &sliced),
        ("one null row", &one),
        ("no nulls", &no_nulls),
    ] {
        assert!(what != "one null row" || b.column(0).null_count() == 1);
        assert!(what != "no nulls" || b.column(0).null_count() == 0);
        let bytes = stream(b);
        for (k, expected) in b.columns().iter().enumerate() {
            let out = echo(TYPES, k, &bytes);
            assert_eq!(
                out.status.code(),
                Some(0),
                "{what}, column {k}: {}",
                show(&out)
            );
            let answer = read(&out.stdout);
            assert_eq!(answer.num_columns(), 1, "{what}");
            assert_eq!(answer.schema().field(0).name(), "result");
            assert!(answer.schema().field(0).is_nullable());
            let got = answer.column(0);
            assert_eq!(got.data_type(), expected.data_type(), "{what}, column {k}");
            assert_eq!(got.len(), expected.len(), "{what}, column {k}");
            assert_eq!(
                got.null_count(),
                expected.null_count(),
                "{what}, column {k}"
            );
            // Values compared as arrow-rs sees them (floats bit for bit via their text).
            for i in 0..got.len() {
                let show_row = |a: &ArrayRef| {
                    arrow_cast::display::array_value_to_string(a, i).expect("display")
                };
                assert_eq!(
                    (got.is_null(i), show_row(got)),
                    (expected.is_null(i), show_row(expected)),
                    "{what}, column {k}, row {i}"
                );
            }
            if let (Some(g), Some(e)) = (
                got.as_any().downcast_ref::<Float64Array>(),
                expected.as_any().downcast_ref::<Float64Array>(),
            ) {
                for i in (0..g.len()).filter(|&i| e.is_valid(i)) {
                    assert_eq!(g.value(i).to_bits(), e.value(i).to_bits(), "row {i}");
                }
            }
        }
    }
}

#[test]
fn the_c_codec_refuses_what_is_not_its_batch_shape_naming_it() {
    let good = stream(&batch(columns(20)));
    let mut two_batches = Vec::new();
    {
        let b = batch(columns(20));
        let mut w = arrow_ipc::writer::StreamWriter::try_new(&mut two_batches, &b.schema())
            .expect("writer");
        w.write(&b).expect("batch");
        w.write(&b).expect("batch");
        w.finish().expect("finish");
    }
    let only_schema = {
        let b = batch(columns(20));
        let mut out = Vec::new();
        let mut w =
            arrow_ipc::writer::StreamWriter::try_new(&mut out, &b.schema()).expect("writer");
        w.finish().expect("finish");
        drop(w);
        out
    };
    let cases: Vec<(&str, &str, Vec<u8>, &str)> = vec![
        (
            "not Arrow",
            TYPES,
            b"hello, world".to_vec(),
            "not an Arrow IPC stream",
        ),
        ("empty", TYPES, Vec::new(), "the stream is empty"),
        (
            "cut in the body",
            TYPES,
            good[..good.len() - 40].to_vec(),
            "runs past the end",
        ),
        (
            "another type",
            "int64,utf8,utf8",
            good.clone(),
            "column 1 (`arg1`) is Float64, expected Utf8",
        ),
        (
            "another count",
            "int64,float64",
            good.clone(),
            "the schema has 3 columns, expected 2",
        ),
        ("two batches", TYPES, two_batches, "exactly one batch"),
        ("no batch", TYPES, only_schema, "no record batch"),
    ];
    for (what, types, bytes, says) in cases {
        let out = echo(types, 0, &bytes);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{what}: {}", show(&out));
        assert!(stderr.contains(says), "{what}: `{says}` in {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{what}: one line: {stderr}");
    }

    // Every prefix and every single flipped byte of a good stream: an answer
    // or a refusal, never a crash or a sanitizer report (exit 0 or 1 only).
    // (A stream cut just before its end-of-stream marker is whole: not cut there.)
    for cut in (0..good.len() - 8).step_by(11) {
        let out = echo(TYPES, 2, &good[..cut]);
        assert_eq!(out.status.code(), Some(1), "cut at {cut}: {}", show(&out));
    }
    for at in (0..good.len()).step_by(5) {
        let mut bad = good.clone();
        bad[at] ^= 0xA5;
        let out = echo(TYPES, 2, &bad);
        assert!(
            matches!(out.status.code(), Some(0 | 1)),
            "byte {at} flipped: {}",
            show(&out)
        );
        if out.status.code() == Some(0) {
            // What the codec accepted, it answers as a stream arrow-rs reads.
            let answer = read(&out.stdout);
            assert_eq!(answer.num_rows(), answer.column(0).len());
        }
    }
}
