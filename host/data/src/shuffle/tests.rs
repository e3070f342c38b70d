use std::fs;
use std::ops::Range;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Decimal128Type, Int64Type};
use arrow_array::{ArrayRef, Date32Array, Decimal128Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use proptest::prelude::*;

use super::format::{Entry, FORMAT_VERSION, FORMAT_VERSION_1, INDEX_TMP_FILE, Index};
use super::*;

/// The producer the tests' partitions name.
fn producer() -> PartitionProducer {
    PartitionProducer {
        job: "j".into(),
        data_set: "a-b".into(),
        job_vertex: "a".into(),
        subtask: 0,
        attempt: 0,
    }
}

fn schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("word", DataType::Utf8, false),
        Field::new("count", DataType::Int64, false),
        Field::new("price", DataType::Decimal128(38, 2), false),
    ]))
}

/// A batch of `rows` rows whose values start at `first`.
fn batch(first: i64, rows: usize) -> RecordBatch {
    let n = first..first + rows as i64;
    let words: StringArray = n.clone().map(|i| Some(format!("w{i}"))).collect();
    let counts: Int64Array = n.clone().map(Some).collect();
    let prices = Decimal128Array::from(n.map(|i| i128::from(i) * 7 - 50).collect::<Vec<_>>())
        .with_precision_and_scale(38, 2)
        .expect("valid decimal type");
    let cols: Vec<ArrayRef> = vec![Arc::new(words), Arc::new(counts), Arc::new(prices)];
    RecordBatch::try_new(schema(), cols).expect("batch")
}

/// One row of the test batches: `(word, count, price in cents)`.
type Row = (String, i64, i128);

/// Rows of a batch.
fn rows(b: &RecordBatch) -> Vec<Row> {
    let w = b.column(0).as_string::<i32>();
    let c = b.column(1).as_primitive::<Int64Type>();
    let p = b.column(2).as_primitive::<Decimal128Type>();
    (0..b.num_rows())
        .map(|r| (w.value(r).to_string(), c.value(r), p.value(r)))
        .collect()
}

/// Every row of subpartition `sub`, or the error.
fn read_sub(loc: &Path, sub: u32) -> Result<Vec<Row>, ShuffleError> {
    let mut r = SubpartitionReader::open(loc, sub)?;
    let mut out = Vec::new();
    while let Some(b) = r.next_batch()? {
        assert_eq!(b.schema(), schema(), "the schema survives");
        out.extend(rows(&b));
    }
    assert!(r.next_batch()?.is_none(), "the end stays the end");
    Ok(out)
}

fn index_of(loc: &Path) -> Index {
    Index::parse(&fs::read(loc.join(INDEX_FILE)).expect("index")).expect("intact index")
}

/// Writes `plan` (per write: subpartition, first value, rows) with a
/// buffer of `spill` bytes; returns the expected rows per subpartition and
/// the reported bytes.
fn write_plan(
    loc: &Path,
    n: u32,
    plan: &[(u32, i64, usize)],
    spill: usize,
) -> (Vec<Vec<Row>>, Vec<u64>) {
    let mut w = PartitionWriter::create(loc, n, producer())
        .expect("create")
        .with_spill_bytes(spill);
    let mut want = vec![Vec::new(); n as usize];
    for &(sub, first, count) in plan {
        let b = batch(first, count);
        want[sub as usize].extend(rows(&b));
        w.write_batch(sub, &b).expect("write");
    }
    (want, w.finish().expect("finish"))
}

/// 40 writes over 12 subpartitions (3, 7 and 11 get none) with a small
/// buffer: several regions.
fn sample_plan() -> Vec<(u32, i64, usize)> {
    (0..40)
        .map(|i: i64| {
            let sub = [0, 1, 2, 4, 5, 6, 8, 9, 10][(i as usize * 5) % 9];
            (sub, i * 1000, 1 + (i as usize * 37) % 90)
        })
        .collect()
}

#[test]
fn batches_round_trip_over_many_subpartitions_and_regions_with_empty_ones_costing_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let loc = dir.path().join("p");
    let (want, bytes) = write_plan(&loc, 12, &sample_plan(), 4096);
    let index = index_of(&loc);
    assert!(index.regions.len() > 2, "{} regions", index.regions.len());
    assert_eq!(bytes, index.bytes_per_subpartition());
    for sub in [3, 7, 11] {
        assert_eq!(bytes[sub], 0, "an empty subpartition has no bytes");
    }
    assert_eq!(
        bytes.iter().sum::<u64>(),
        fs::metadata(loc.join(DATA_FILE)).expect("data").len(),
        "the subpartitions' bytes add up to the data file"
    );
    let names: Vec<String> = fs::read_dir(&loc)
        .expect("dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    let mut names = names;
    names.sort();
    assert_eq!(names, ["data", "index"], "two files, no index.tmp");
    for sub in 0..12 {
        assert_eq!(read_sub(&loc, sub).expect("intact"), want[sub as usize]);
    }
}

#[test]
fn a_range_of_subpartitions_reads_each_in_turn_from_one_index() {
    let dir = tempfile::tempdir().expect("tempdir");
    let loc = dir.path().join("p");
    let (want, _) = write_plan(&loc, 12, &sample_plan(), 4096);
    let plugin_dir = coordhost_io::grant::PluginDir::host_chosen(&loc).expect("dir");
    let mut r = SubpartitionReader::open_range_in(&plugin_dir, 2..7).expect("open");
    let mut got = Vec::new();
    while let Some(b) = r.next_batch().expect("read") {
        got.extend(rows(&b));
    }
    assert_eq!(got, want[2..7].concat());
    assert!(matches!(
        SubpartitionReader::open_range_in(&plugin_dir, 10..13),
        Err(ShuffleError::Corrupt { .. })
    ));
}

#[test]
fn small_batches_of_a_region_are_merged_into_blocks_of_at_most_block_rows() {
    let dir = tempfile::tempdir().expect("tempdir");
    let loc = dir.path().join("p");
    let plan: Vec<_> = (0..1000).map(|i| (0, i * 10, 10)).collect();
    let (want, _) = write_plan(&loc, 1, &plan, usize::MAX);
    let mut r = SubpartitionReader::open(&loc, 0).expect("open");
    let mut sizes = Vec::new();
    while let Some(b) = r.next_batch().expect("read") {
        sizes.push(b.num_rows());
    }
    // 819 batches of 10 rows fill a block as far as whole batches go.
    assert_eq!(sizes, [8190, 1810]);
    assert_eq!(read_sub(&loc, 0).expect("intact"), want[0]);
}

#[test]
fn a_partition_without_batches_has_an_index_of_no_regions_and_reads_empty() {
    let dir = tempfile::tempdir().expect("tempdir");
    let loc = dir.path().join("p");
    let bytes = PartitionWriter::create(&loc, 3, producer())
        .expect("create")
        .finish()
        .expect("finish");
    assert_eq!(bytes, vec![0, 0, 0]);
    assert_eq!(index_of(&loc).regions.len(), 0);
    for sub in 0..3 {
        assert_eq!(read_sub(&loc, sub).expect("empty"), vec![]);
    }
    assert!(partition_exists(&loc));
}

#[test]
fn a_partition_without_its_index_is_not_found() {
    let dir = tempfile::tempdir().expect("tempdir");
    let loc = dir.path().join("p");
    let mut w = PartitionWriter::create(&loc, 1, producer()).expect("create");
    w.write_batch(0, &batch(0, 5)).expect("write");
    drop(w);
    assert!(!partition_exists(&loc));
    assert!(matches!(
        SubpartitionReader::open(&loc, 0),
        Err(ShuffleError::PartitionNotFound { .. })
    ));
    // A crash between `index.tmp` and the rename: still not found.
    write_plan(&loc, 1, &[(0, 0, 5)], usize::MAX);
    fs::rename(loc.join(INDEX_FILE), loc.join(INDEX_TMP_FILE)).expect("rename");
    assert!(matches!(
        SubpartitionReader::open(&loc, 0),
        Err(ShuffleError::PartitionNotFound { .. })
    ));
    assert!(matches!(
        SubpartitionReader::open(&dir.path().join("gone"), 0),
        Err(ShuffleError::PartitionNotFound { .. })
    ));
}

/// Reads every subpartition; the first error.
fn read_all(loc: &Path, n: u32) -> Result<(), ShuffleError> {
    (0..n).try_for_each(|sub| read_sub(loc, sub).map(drop))
}

/// Expects `Corrupt` naming `file` when every subpartition is read.
fn assert_corrupt(loc: &Path, n: u32, file: &str, what: &str) {
    match read_all(loc, n) {
        Err(ShuffleError::Corrupt { path, .. }) => {
            assert_eq!(path, loc.join(file), "{what}: names the file");
        }
        other => panic!("{what}: expected Corrupt naming {file}, got {other:?}"),
    }
}

#[test]
fn every_flipped_byte_and_every_cut_of_either_file_is_corrupt() {
    let dir = tempfile::tempdir().expect("tempdir");
    let loc = dir.path().join("p");
    let plan = [(0, 0, 3), (2, 10, 2), (0, 20, 4), (1, 30, 1)];
    // A buffer of 1 byte: every write is a region of its own.
    write_plan(&loc, 4, &plan, 1);
    assert_eq!(index_of(&loc).regions.len(), 4);
    for file in [DATA_FILE, INDEX_FILE] {
        let path = loc.join(file);
        let intact = fs::read(&path).expect("read");
        // Every byte of the index; of `data`, every byte of its first
        // block's header and IPC metadata, then every fifth (a debug build
        // decodes slowly).
        let places = (0..intact.len()).filter(|at| file == INDEX_FILE || *at < 200 || at % 5 == 0);
        for at in places {
            let mut bad = intact.clone();
            bad[at] ^= 0x10;
            fs::write(&path, &bad).expect("flip");
            assert_corrupt(&loc, 4, file, &format!("{file}: byte {at} flipped"));
            fs::write(&path, &intact[..at]).expect("cut");
            let named = if file == DATA_FILE {
                DATA_FILE
            } else {
                INDEX_FILE
            };
            assert_corrupt(&loc, 4, named, &format!("{file}: cut at {at}"));
        }
        let mut longer = intact.clone();
        longer.push(0);
        fs::write(&path, &longer).expect("append");
        assert_corrupt(&loc, 4, file, &format!("{file}: a byte appended"));
        fs::write(&path, &intact).expect("restore");
    }
    read_all(&loc, 4).expect("intact again");
}

#[test]
fn a_data_file_of_another_length_than_the_index_records_is_corrupt() {
    let dir = tempfile::tempdir().expect("tempdir");
    let loc = dir.path().join("p");
    write_plan(&loc, 2, &[(0, 0, 3), (1, 5, 3)], usize::MAX);
    let data = fs::read(loc.join(DATA_FILE)).expect("data");
    fs::write(loc.join(DATA_FILE), &data[..data.len() - 1]).expect("cut");
    match SubpartitionReader::open(&loc, 1) {
        Err(ShuffleError::Corrupt {
            path,
            offset,
            reason,
        }) => {
            assert_eq!(path, loc.join(DATA_FILE));
            assert_eq!(offset, data.len() as u64 - 1);
            assert_eq!(reason, "the data file's length differs from the index's");
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

#[test]
fn ranges_that_do_not_split_data_into_whole_blocks_are_corrupt() {
    let dir = tempfile::tempdir().expect("tempdir");
    let loc = dir.path().join("p");
    write_plan(&loc, 2, &[(0, 0, 3), (1, 5, 3)], usize::MAX);
    let mut index = index_of(&loc);
    let [a, b] = index.regions[0][..] else {
        panic!("one region of two entries: {index:?}")
    };
    // The boundary moves 3 bytes into subpartition 1's block: the entries
    // still tile the file and the index's checksum is right.
    index.regions[0] = vec![
        Entry {
            len: a.len + 3,
            ..a
        },
        Entry {
            offset: b.offset + 3,
            len: b.len - 3,
            ..b
        },
    ];
    fs::write(loc.join(INDEX_FILE), index.encode()).expect("index");
    for sub in 0..2 {
        match read_sub(&loc, sub) {
            Err(ShuffleError::Corrupt { path, reason, .. }) => {
                assert_eq!(path, loc.join(DATA_FILE));
                assert!(reason.contains("range"), "{reason}");
            }
            other => panic!("subpartition {sub}: expected Corrupt, got {other:?}"),
        }
    }
}

/// An index of 3 subpartitions over 30 bytes of `data`, in `version`'s layout.
fn sample_index(version: u32) -> Index {
    let e = |sub, offset| Entry {
        sub,
        offset,
        len: 10,
        records: if version == FORMAT_VERSION { 4 } else { 0 },
        headers_crc: if version == FORMAT_VERSION { 77 } else { 0 },
    };
    Index {
        version,
        num_subpartitions: 3,
        data_len: 30,
        producer: (version == FORMAT_VERSION).then(producer),
        regions: vec![vec![e(0, 0), e(2, 10)], vec![e(2, 20)]],
    }
}

#[test]
fn an_index_is_refused_for_each_broken_rule_with_its_offset() {
    // Version 2: the producer's names (1 + 3 + 1 bytes, each after its
    // length) and two numbers follow the header; entries of 32 bytes.
    // Version 1: entries of 20 bytes right after the header.
    for (version, second_entry) in [(FORMAT_VERSION, 28 + 25 + 4 + 32), (FORMAT_VERSION_1, 52)] {
        let good = sample_index(version);
        assert_eq!(Index::parse(&good.encode()), Ok(good.clone()));
        assert_eq!(good.bytes_per_subpartition(), vec![10, 0, 20]);
        assert_eq!(good.ranges(2), vec![(10, 10), (20, 10)]);
        let broken = |f: &dyn Fn(&mut Index)| {
            let mut i = good.clone();
            f(&mut i);
            Index::parse(&i.encode()).expect_err("refused")
        };
        assert_eq!(
            broken(&|i| i.regions[0][1].sub = 0).1,
            "subpartitions are not strictly ascending in a region"
        );
        assert_eq!(
            broken(&|i| i.num_subpartitions = 2),
            (
                second_entry,
                "an entry names a subpartition beyond the count"
            )
        );
        assert_eq!(
            broken(&|i| i.data_len = 31).1,
            "the entries do not cover the data file's length"
        );
        assert_eq!(
            broken(&|i| i.regions[1][0].offset = 21).1,
            "the entries do not tile the data file"
        );
        assert_eq!(
            broken(&|i| i.regions[1][0].len = 0).1,
            "an entry of length 0"
        );
        let mut bytes = good.encode();
        bytes[8] = 3;
        let n = bytes.len() - 4;
        let crc = crc32c::crc32c(&bytes[..n]);
        bytes[n..].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(
            Index::parse(&bytes),
            Err((8, "unknown index format version"))
        );
        bytes[0] = b'X';
        let crc = crc32c::crc32c(&bytes[..n]);
        bytes[n..].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(Index::parse(&bytes), Err((0, "not an index (bad magic)")));
    }
    // A name that is not UTF-8.
    let mut bytes = sample_index(FORMAT_VERSION).encode();
    bytes[32] = 0xff;
    let n = bytes.len() - 4;
    let crc = crc32c::crc32c(&bytes[..n]);
    bytes[n..].copy_from_slice(&crc.to_le_bytes());
    assert_eq!(
        Index::parse(&bytes),
        Err((28, "a producer name that is not UTF-8"))
    );
}

/// What a consumer of subpartitions `subs` of a partition written by
/// `write_plan` (its bytes `bytes`) expects.
fn expect(bytes: &[u64], subs: Range<u32>) -> ExpectedPartition {
    ExpectedPartition {
        producer: producer(),
        bytes: Some(bytes[subs.start as usize..subs.end as usize].to_vec()),
    }
}

/// Every row of `subs` read bound to `expected`, or the error.
fn read_bound(
    loc: &Path,
    subs: Range<u32>,
    expected: &ExpectedPartition,
) -> Result<Vec<Row>, ShuffleError> {
    let dir = coordhost_io::grant::PluginDir::host_chosen(loc).expect("dir");
    let mut r = SubpartitionReader::open_expected_in(&dir, subs, expected)?;
    let mut out = Vec::new();
    while let Some(b) = r.next_batch()? {
        out.extend(rows(&b));
    }
    Ok(out)
}

/// The reason of a `PartitionNotFound`; panics on anything else.
fn not_found_reason(r: Result<Vec<Row>, ShuffleError>, what: &str) -> String {
    match r {
        Err(ShuffleError::PartitionNotFound { reason, .. }) => reason,
        other => panic!("{what}: expected PartitionNotFound, got {other:?}"),
    }
}

#[test]
fn a_bound_read_of_the_right_partition_reads_every_row() {
    let dir = tempfile::tempdir().expect("tempdir");
    let loc = dir.path().join("p");
    let (want, bytes) = write_plan(&loc, 12, &sample_plan(), 4096);
    for subs in [0..1, 2..7, 3..4, 0..12] {
        let got = read_bound(&loc, subs.clone(), &expect(&bytes, subs.clone())).expect("bound");
        assert_eq!(got, want[subs.start as usize..subs.end as usize].concat());
    }
    // Sizes unknown: the producer is still checked.
    let unknown = ExpectedPartition {
        producer: producer(),
        bytes: None,
    };
    assert_eq!(read_bound(&loc, 2..3, &unknown).expect("bound"), want[2]);
}

#[test]
fn a_partition_of_another_producer_or_of_other_bytes_is_not_found() {
    let dir = tempfile::tempdir().expect("tempdir");
    let loc = dir.path().join("p");
    let (_, bytes) = write_plan(&loc, 12, &sample_plan(), 4096);
    for other in [
        PartitionProducer {
            attempt: 1,
            ..producer()
        },
        PartitionProducer {
            subtask: 3,
            ..producer()
        },
        PartitionProducer {
            job_vertex: "b".into(),
            ..producer()
        },
        PartitionProducer {
            data_set: "a-c".into(),
            ..producer()
        },
        PartitionProducer {
            job: "k".into(),
            ..producer()
        },
    ] {
        let e = ExpectedPartition {
            producer: other.clone(),
            bytes: None,
        };
        let reason = not_found_reason(read_bound(&loc, 0..1, &e), "another producer");
        assert!(reason.contains("names job `j`"), "{reason}");
        assert!(reason.contains(&other.to_string()), "{reason}");
    }
    let mut e = expect(&bytes, 0..2);
    e.bytes.as_mut().expect("known")[1] += 1;
    let reason = not_found_reason(read_bound(&loc, 0..2, &e), "other bytes");
    assert!(reason.contains("subpartition 1"), "{reason}");
    // A valid empty partition of the right producer in its place.
    let (_, empty) = write_plan(&loc, 12, &[], 4096);
    assert_eq!(empty, vec![0; 12]);
    let reason = not_found_reason(read_bound(&loc, 0..12, &expect(&bytes, 0..12)), "empty");
    assert!(reason.contains("its producer reported"), "{reason}");
}

#[test]
fn an_index_of_version_1_is_read_unbound_and_refused_bound() {
    let dir = tempfile::tempdir().expect("tempdir");
    let loc = dir.path().join("p");
    let (want, bytes) = write_plan(&loc, 2, &[(0, 0, 3), (1, 5, 3)], usize::MAX);
    let mut index = index_of(&loc);
    index.version = FORMAT_VERSION_1;
    index.producer = None;
    for e in index.regions.iter_mut().flatten() {
        e.records = 0;
        e.headers_crc = 0;
    }
    fs::write(loc.join(INDEX_FILE), index.encode()).expect("index");
    assert_eq!(read_sub(&loc, 1).expect("unbound"), want[1]);
    let reason = not_found_reason(read_bound(&loc, 0..2, &expect(&bytes, 0..2)), "v1");
    assert!(reason.contains("version 1"), "{reason}");
}

#[test]
fn data_that_is_not_its_index_s_is_not_found_even_with_equal_sizes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    // Equal sizes, other values: the same shapes one value apart.
    let (_, bytes) = write_plan(&a, 2, &[(0, 0, 3), (1, 5, 3)], usize::MAX);
    let (_, bytes_b) = write_plan(&b, 2, &[(0, 1, 3), (1, 6, 3)], usize::MAX);
    assert_eq!(bytes, bytes_b, "equal sizes");
    fs::remove_file(a.join(DATA_FILE)).expect("rm");
    fs::hard_link(b.join(DATA_FILE), a.join(DATA_FILE)).expect("hard link");
    let reason = not_found_reason(read_bound(&a, 0..2, &expect(&bytes, 0..2)), "hard link");
    assert!(reason.contains("checksum"), "{reason}");
    // Rows the index does not record (its checksum recomputed).
    write_plan(&a, 2, &[(0, 0, 3), (1, 5, 3)], usize::MAX);
    let mut index = index_of(&a);
    index.regions[0][1].records = 4;
    fs::write(a.join(INDEX_FILE), index.encode()).expect("index");
    let reason = not_found_reason(read_bound(&a, 1..2, &expect(&bytes, 1..2)), "records");
    assert!(reason.contains("3 rows, its index records 4"), "{reason}");
}

#[test]
fn a_stream_of_raw_ranges_reads_bound_at_the_consumer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let loc = dir.path().join("p");
    let (want, bytes) = write_plan(&loc, 12, &sample_plan(), 4096);
    let plugin_dir = coordhost_io::grant::PluginDir::host_chosen(&loc).expect("dir");
    let stream_of = |subs: Range<u32>| {
        let raw = SubpartitionReader::raw_ranges_in(&plugin_dir, subs).expect("raw");
        let data = fs::read(loc.join(DATA_FILE)).expect("data");
        let mut sent = Vec::new();
        for &(offset, len) in &raw.ranges {
            sent.extend_from_slice(&data[offset as usize..(offset + len) as usize]);
        }
        (raw.total(), raw.index, sent)
    };
    let (total, index, sent) = stream_of(2..7);
    let read = |expected: &ExpectedPartition, sent: Vec<u8>| {
        let mut r = SubpartitionReader::from_stream(
            "peer:p".into(),
            Box::new(std::io::Cursor::new(sent)),
            total,
            &index,
            2..7,
            expected,
        )?;
        let mut out = Vec::new();
        while let Some(b) = r.next_batch()? {
            out.extend(rows(&b));
        }
        Ok(out)
    };
    assert_eq!(
        read(&expect(&bytes, 2..7), sent.clone()).expect("bound"),
        want[2..7].concat()
    );
    let other = ExpectedPartition {
        producer: PartitionProducer {
            attempt: 9,
            ..producer()
        },
        bytes: None,
    };
    not_found_reason(read(&other, sent.clone()), "another producer on the wire");
    // The blocks of another partition of equal sizes under this index.
    let (x, y) = (dir.path().join("x"), dir.path().join("y"));
    let (_, bytes_x) = write_plan(&x, 2, &[(0, 0, 3), (1, 5, 3)], usize::MAX);
    write_plan(&y, 2, &[(0, 1, 3), (1, 6, 3)], usize::MAX);
    let index_x = fs::read(x.join(INDEX_FILE)).expect("index");
    let data_y = fs::read(y.join(DATA_FILE)).expect("data");
    assert_eq!(
        data_y.len() as u64,
        bytes_x.iter().sum::<u64>(),
        "equal sizes"
    );
    let mut r = SubpartitionReader::from_stream(
        "peer:x".into(),
        Box::new(std::io::Cursor::new(data_y.clone())),
        data_y.len() as u64,
        &index_x,
        0..2,
        &expect(&bytes_x, 0..2),
    )
    .expect("the index binds");
    let got = std::iter::from_fn(|| r.next_batch().transpose()).find_map(Result::err);
    assert!(
        matches!(got, Some(ShuffleError::PartitionNotFound { .. })),
        "another partition's blocks: {got:?}"
    );
    // A stream shorter than its index's ranges.
    let short = SubpartitionReader::from_stream(
        "peer:x".into(),
        Box::new(std::io::Cursor::new(Vec::new())),
        1,
        &index_x,
        0..2,
        &expect(&bytes_x, 0..2),
    );
    assert!(
        matches!(short, Err(ShuffleError::Corrupt { .. })),
        "{short:?}"
    );
}

#[test]
fn a_symlinked_index_is_not_followed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let loc = dir.path().join("p");
    let other = dir.path().join("q");
    write_plan(&loc, 1, &[(0, 0, 3)], usize::MAX);
    write_plan(&other, 1, &[(0, 0, 3)], usize::MAX);
    fs::remove_file(loc.join(INDEX_FILE)).expect("rm");
    std::os::unix::fs::symlink(other.join(INDEX_FILE), loc.join(INDEX_FILE)).expect("symlink");
    assert!(!partition_exists(&loc));
    assert!(matches!(
        SubpartitionReader::open(&loc, 0),
        Err(ShuffleError::Io { .. })
    ));
}

#[test]
fn a_fifo_in_place_of_data_or_index_is_corrupt_at_once_even_for_an_empty_partition() {
    coordhost_io::files::test_support::within_deadline(|| {
        let dir = tempfile::tempdir().expect("tempdir");
        for file in [DATA_FILE, INDEX_FILE] {
            // Empty: its index records 0 data bytes, the size a FIFO stats as.
            let loc = dir.path().join(format!("empty-{file}"));
            PartitionWriter::create(&loc, 2, producer())
                .expect("create")
                .finish()
                .expect("finish");
            fs::remove_file(loc.join(file)).expect("rm");
            coordhost_io::files::test_support::mkfifo(&loc.join(file));
            assert_corrupt(&loc, 2, file, "a FIFO, opened without blocking");
        }
    });
}

/// The texts of a row's key cells, as sinks write them.
fn texts(b: &RecordBatch, r: usize) -> Vec<String> {
    (0..4)
        .map(|c| coordhost_model::value::cell_text(b.column(c), r).into_owned())
        .collect()
}

#[test]
fn route_batch_sends_each_row_where_key_hash_of_its_texts_says_in_order() {
    let base = batch(-40, 500);
    let days = Date32Array::from((0..500).map(|i| i * 97 - 20_000).collect::<Vec<_>>());
    let mut cols = base.columns().to_vec();
    cols.push(Arc::new(days));
    let mut fields: Vec<Field> = schema()
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    fields.push(Field::new("day", DataType::Date32, false));
    let b = RecordBatch::try_new(Arc::new(Schema::new(fields)), cols).expect("batch");
    for key in [vec![0], vec![1], vec![2], vec![3], vec![3, 0, 2]] {
        for n in [1, 7, 64] {
            let routed = route_batch(&b, &key, n);
            let subs: Vec<u32> = routed.iter().map(|(s, _)| *s).collect();
            assert!(subs.windows(2).all(|w| w[0] < w[1]), "ascending, once each");
            let mut want: Vec<Vec<Vec<String>>> = vec![Vec::new(); n as usize];
            for r in 0..b.num_rows() {
                let t = texts(&b, r);
                want[(key_hash(&t, &key) % u64::from(n)) as usize].push(t);
            }
            for (s, part) in &routed {
                let got: Vec<Vec<String>> = (0..part.num_rows()).map(|r| texts(part, r)).collect();
                assert_eq!(&got, &want[*s as usize], "key {key:?}, n {n}, sub {s}");
            }
            let total: usize = routed.iter().map(|(_, p)| p.num_rows()).sum();
            assert_eq!(total, b.num_rows());
        }
    }
    assert!(route_batch(&b.slice(0, 0), &[0], 4).is_empty());
}

#[test]
fn key_hash_is_stable_and_separates_fields() {
    assert_eq!(key_hash(&["a"], &[0]), key_hash(&["a".to_string()], &[0]));
    assert_ne!(
        key_hash(&["ab", "c"], &[0, 1]),
        key_hash(&["a", "bc"], &[0, 1])
    );
    // FNV-1a 64 of "a", a published test vector.
    assert_eq!(key_hash(&["a"], &[0]), 0xaf63_dc4c_8601_ec8c);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn any_plan_of_writes_reads_back_per_subpartition(
        n in 1u32..20,
        writes in proptest::collection::vec((0u32..20, 0usize..50), 0..40),
        spill in prop_oneof![Just(1usize), 500usize..5000, Just(usize::MAX)],
    ) {
        let dir = tempfile::tempdir().expect("tempdir");
        let loc = dir.path().join("p");
        let plan: Vec<_> = writes
            .iter()
            .enumerate()
            .map(|(i, &(s, rows))| (s % n, i as i64 * 100, rows))
            .collect();
        let (want, bytes) = write_plan(&loc, n, &plan, spill);
        for sub in 0..n {
            prop_assert_eq!(read_sub(&loc, sub).expect("intact"), want[sub as usize].clone());
            prop_assert_eq!(bytes[sub as usize] == 0, want[sub as usize].is_empty());
        }
    }
}

#[test]
fn empty_index_is_what_a_writer_that_wrote_nothing_leaves() {
    let dir = tempfile::tempdir().unwrap();
    let loc = dir.path().join("p");
    let sizes = PartitionWriter::create(&loc, 3, producer())
        .unwrap()
        .finish()
        .unwrap();
    assert_eq!(sizes, vec![0, 0, 0]);
    assert_eq!(
        fs::read(loc.join(INDEX_FILE)).unwrap(),
        format::empty_index(3, producer())
    );
    assert_eq!(fs::read(loc.join(DATA_FILE)).unwrap(), Vec::<u8>::new());
}
