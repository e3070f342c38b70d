//! The result partition format stays readable (docs/shuffle-format.md,
//! "Golden partitions"): `host/tests/data/shuffle-golden/` was written by
//! the first build of format version 1, `host/tests/data/shuffle-golden-v2/`
//! by the first build of version 2; both are read here, batch by batch.
//! Version 1 names no producer: it reads unbound, and a consumer task
//! (bound to its producer) refuses it as not found.
//!
//! Neither is regenerated for a change of the format (a new version gets a
//! new directory). To write the version-2 one afresh — e.g. if it was lost —
//! delete it, run
//! `COORDHOST_WRITE_SHUFFLE_GOLDEN=1 cargo test -p coordhost --test all shuffle_golden`
//! and commit the two files.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::{ArrayRef, Decimal128Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use coordhost::grant::PluginDir;
use coordhost::shuffle::{
    ExpectedPartition, PartitionProducer, PartitionWriter, ShuffleError, SubpartitionReader,
};

/// The version-1 golden partition.
fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/shuffle-golden")
}

/// The version-2 golden partition.
fn golden_v2_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/shuffle-golden-v2")
}

/// The producer the version-2 golden partition names.
fn golden_producer() -> PartitionProducer {
    PartitionProducer {
        job: "golden".into(),
        data_set: "source-sink".into(),
        job_vertex: "source".into(),
        subtask: 1,
        attempt: 2,
    }
}

/// The bytes per subpartition of the golden partitions (`data` is the same
/// in both versions).
const GOLDEN_BYTES: [u64; 3] = [1144, 0, 1168];

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
    let mut w = PartitionWriter::create(dir, 3, golden_producer()).expect("create");
    for (first, third) in want[0].iter().zip(&want[2]) {
        // Buffer both batches of the region, then let the second spill it.
        w = w.with_spill_bytes(usize::MAX);
        w.write_batch(0, first).expect("write");
        w = w.with_spill_bytes(1);
        w.write_batch(2, third).expect("write");
    }
    w.finish().expect("finish")
}

/// Every batch of every subpartition of the partition at `dir`, read
/// unbound.
fn read_unbound(dir: &Path) -> Vec<Vec<RecordBatch>> {
    (0..3)
        .map(|sub| {
            let mut r = SubpartitionReader::open(dir, sub).expect("open");
            std::iter::from_fn(|| r.next_batch().expect("intact")).collect()
        })
        .collect()
}

/// Subpartitions `subs` of the partition at `dir`, read bound to the golden
/// producer and bytes.
fn read_bound(dir: &Path, subs: std::ops::Range<u32>) -> Result<Vec<RecordBatch>, ShuffleError> {
    let expected = ExpectedPartition {
        producer: golden_producer(),
        bytes: Some(GOLDEN_BYTES[subs.start as usize..subs.end as usize].to_vec()),
    };
    let dir = PluginDir::host_chosen(dir).expect("dir");
    let mut r = SubpartitionReader::open_expected_in(&dir, subs, &expected)?;
    let mut got = Vec::new();
    while let Some(b) = r.next_batch()? {
        got.push(b);
    }
    Ok(got)
}

#[test]
fn the_golden_partition_of_version_1_reads_back_unbound_and_is_refused_bound() {
    let dir = golden_dir();
    let index = std::fs::read(dir.join("index")).expect("the golden index");
    assert_eq!(&index[..8], b"CHSHUFX1");
    assert_eq!(u32::from_le_bytes(index[8..12].try_into().unwrap()), 1);
    assert_eq!(
        u32::from_le_bytes(index[24..28].try_into().unwrap()),
        2,
        "two regions"
    );
    assert_eq!(read_unbound(&dir), expected());
    match read_bound(&dir, 0..3) {
        Err(ShuffleError::PartitionNotFound { reason, .. }) => {
            assert!(reason.contains("version 1"), "{reason}");
        }
        other => panic!("a bound read of version 1: {other:?}"),
    }
}

#[test]
fn the_golden_partition_of_version_2_reads_back_unbound_and_bound() {
    let dir = golden_v2_dir();
    if std::env::var_os("COORDHOST_WRITE_SHUFFLE_GOLDEN").is_some() && !dir.exists() {
        let sizes = write_golden(&dir);
        eprintln!(
            "wrote {} with bytes per subpartition {sizes:?}",
            dir.display()
        );
    }
    let index = std::fs::read(dir.join("index")).expect("the golden index");
    assert_eq!(&index[..8], b"CHSHUFX1");
    assert_eq!(u32::from_le_bytes(index[8..12].try_into().unwrap()), 2);
    assert_eq!(read_unbound(&dir), expected());
    for sub in 0..3u32 {
        let got = read_bound(&dir, sub..sub + 1).expect("bound");
        assert_eq!(got, expected()[sub as usize], "subpartition {sub}");
    }
    assert_eq!(read_bound(&dir, 0..3).expect("bound"), expected().concat());
}

#[test]
fn a_partition_written_today_has_the_golden_bytes() {
    let scratch = tempfile::tempdir().expect("tempdir");
    let fresh = scratch.path().join("p");
    assert_eq!(write_golden(&fresh), GOLDEN_BYTES);
    for file in ["index", "data"] {
        let golden = std::fs::read(golden_v2_dir().join(file)).expect("golden");
        let today = std::fs::read(fresh.join(file)).expect("fresh");
        assert!(
            golden == today,
            "{file} differs from the golden partition's: the writer's output changed; \
             readers of old partitions are covered by the tests above"
        );
    }
    assert!(
        std::fs::read(golden_dir().join("data")).expect("v1 data")
            == std::fs::read(fresh.join("data")).expect("fresh"),
        "version 2 changed the index only: `data` is as in version 1"
    );
}
