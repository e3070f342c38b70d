//! The result partition format stays readable (docs/shuffle-format.md,
//! "Golden partition"): `host/tests/data/shuffle-golden/` was written by
//! the first build of format version 1 and is read here, batch by batch.
//!
//! It is never regenerated for a change of the format (a new version gets
//! a new directory). To write it afresh for version 1 only — e.g. if it
//! was lost — run
//! `COORDHOST_WRITE_SHUFFLE_GOLDEN=1 cargo test -p coordhost --test all shuffle_golden`
//! and commit the two files.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::{ArrayRef, Decimal128Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use coordhost::shuffle::{PartitionWriter, SubpartitionReader};

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/shuffle-golden")
}

/// A batch of (word, count, price with 2 decimals).
fn batch(words: &[&str], counts: &[i64], cents: &[i128]) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![
        Field::new("word", DataType::Utf8, false),
        Field::new("count", DataType::Int64, false),
        Field::new("price", DataType::Decimal128(38, 2), false),
    ]));
    let prices = Decimal128Array::from(cents.to_vec())
        .with_precision_and_scale(38, 2)
        .expect("decimal type");
    let cols: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from(words.to_vec())),
        Arc::new(Int64Array::from(counts.to_vec())),
        Arc::new(prices),
    ];
    RecordBatch::try_new(schema, cols).expect("batch")
}

/// What the golden partition holds: per subpartition, its batches in
/// order (subpartition 1 is empty; each subpartition has one batch per
/// region).
fn expected() -> Vec<Vec<RecordBatch>> {
    vec![
        vec![
            batch(&["apple", "pear"], &[3, 1], &[1999, -5]),
            batch(&["plum"], &[7], &[0]),
        ],
        vec![],
        vec![
            batch(
                &["fig", "kiwi", "lime"],
                &[10, 20, -30],
                &[12345, 100, -99999],
            ),
            batch(&["date"], &[i64::MAX], &[i128::from(i64::MAX) * 1000]),
        ],
    ]
}

/// Writes the golden partition: regions of one batch per non-empty
/// subpartition (a buffer of 1 byte spills after each pair of writes).
fn write_golden(dir: &Path) -> Vec<u64> {
    let want = expected();
    let mut w = PartitionWriter::create(dir, 3).expect("create");
    for (first, third) in want[0].iter().zip(&want[2]) {
        // Buffer both batches of the region, then let the second spill it.
        w = w.with_spill_bytes(usize::MAX);
        w.write_batch(0, first).expect("write");
        w = w.with_spill_bytes(1);
        w.write_batch(2, third).expect("write");
    }
    w.finish().expect("finish")
}

#[test]
fn the_golden_partition_reads_back_batch_by_batch() {
    let dir = golden_dir();
    if std::env::var_os("COORDHOST_WRITE_SHUFFLE_GOLDEN").is_some() {
        let sizes = write_golden(&dir);
        eprintln!(
            "wrote {} with bytes per subpartition {sizes:?}",
            dir.display()
        );
    }
    let index = std::fs::read(dir.join("index")).expect("the golden index");
    assert_eq!(&index[..8], b"CHSHUFX1");
    assert_eq!(
        u32::from_le_bytes(index[24..28].try_into().unwrap()),
        2,
        "two regions"
    );
    for (sub, want) in expected().iter().enumerate() {
        let mut r = SubpartitionReader::open(&dir, sub as u32).expect("open");
        let mut got = Vec::new();
        while let Some(b) = r.next_batch().expect("intact") {
            got.push(b);
        }
        assert_eq!(&got, want, "subpartition {sub}");
    }
}

#[test]
fn a_partition_written_today_has_the_golden_bytes() {
    let scratch = tempfile::tempdir().expect("tempdir");
    let fresh = scratch.path().join("p");
    write_golden(&fresh);
    for file in ["index", "data"] {
        let golden = std::fs::read(golden_dir().join(file)).expect("golden");
        let today = std::fs::read(fresh.join(file)).expect("fresh");
        assert!(
            golden == today,
            "{file} differs from the golden partition's: the writer's output changed; \
             readers of old partitions are covered by the test above"
        );
    }
}
