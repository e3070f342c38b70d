//! A test tool that damages result partitions the way disks and people do
//! (docs/shuffle-format.md): the `data` file deleted, cut at a block
//! boundary or inside a block, one of its bytes flipped; the `index`
//! deleted, cut, or one of its bytes flipped.
//!
//! It parses the format itself (blocks of `{u32 length, u32 CRC32C, Arrow
//! IPC stream}` in `data`; magic, header, regions and CRC32C in `index`)
//! so that it can aim at boundaries; it checks what it parses, so a format
//! change makes it fail loudly rather than aim at the wrong bytes.

use std::path::Path;
use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};

/// A kind of damage to one result partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Damage {
    /// Nothing is changed.
    None,
    /// `data` is deleted (the partition keeps its `index`).
    DataDeleted,
    /// `data` is cut where a block begins.
    DataCutAtBlockBoundary,
    /// `data` is cut inside a block.
    DataCutMidBlock,
    /// One byte of `data` is inverted (the size stays).
    DataFlippedByte,
    /// `index` is deleted.
    IndexDeleted,
    /// `index` is cut.
    IndexCut,
    /// One byte of `index` is inverted (the size stays).
    IndexFlippedByte,
}

impl Damage {
    /// Every kind, `None` first.
    pub const ALL: [Damage; 8] = [
        Damage::None,
        Damage::DataDeleted,
        Damage::DataCutAtBlockBoundary,
        Damage::DataCutMidBlock,
        Damage::DataFlippedByte,
        Damage::IndexDeleted,
        Damage::IndexCut,
        Damage::IndexFlippedByte,
    ];
}

/// Where the blocks of an intact partition are.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Layout {
    /// Byte range of every block in `data`, header included.
    pub blocks: Vec<(usize, usize)>,
    /// Length of `data`.
    pub data_len: usize,
    /// Length of `index`.
    pub index_len: usize,
}

fn u32_at(bytes: &[u8], at: usize) -> Result<u32, String> {
    bytes
        .get(at..at + 4)
        .and_then(|s| <[u8; 4]>::try_from(s).ok())
        .map(u32::from_le_bytes)
        .ok_or_else(|| format!("no u32 at byte {at} of {} bytes", bytes.len()))
}

fn u64_at(bytes: &[u8], at: usize) -> Result<u64, String> {
    bytes
        .get(at..at + 8)
        .and_then(|s| <[u8; 8]>::try_from(s).ok())
        .map(u64::from_le_bytes)
        .ok_or_else(|| format!("no u64 at byte {at} of {} bytes", bytes.len()))
}

/// Parses an intact partition: `index` (magic, CRC32C, recorded data
/// length) and the blocks of `data` (each CRC32C).
///
/// # Errors
/// A message when the files are not an intact partition (the tool aims
/// only at partitions as the host wrote them, not at damage done before).
pub fn layout(data: &[u8], index: &[u8]) -> Result<Layout, String> {
    if index.len() < 32 || &index[..8] != b"CHSHUFX1" || u32_at(index, 8)? != 2 {
        return Err("not a version-2 index".into());
    }
    let body = index.len() - 4;
    if crc32c::crc32c(&index[..body]) != u32_at(index, body)? {
        return Err("the index's CRC32C does not match".into());
    }
    if u64_at(index, 16)? != data.len() as u64 {
        return Err("data has another length than the index records".into());
    }
    let mut blocks = Vec::new();
    let mut at = 0;
    while at < data.len() {
        let len = u32_at(data, at)? as usize;
        let end = at + 8 + len;
        let payload = data
            .get(at + 8..end)
            .ok_or_else(|| format!("block at {at} is cut"))?;
        if len == 0 || crc32c::crc32c(payload) != u32_at(data, at + 4)? {
            return Err(format!("block at {at}: bad length or CRC32C"));
        }
        blocks.push((at, end));
        at = end;
    }
    Ok(Layout {
        blocks,
        data_len: data.len(),
        index_len: index.len(),
    })
}

/// Picks `items[pick % len]`.
fn choose<T: Copy>(items: &[T], pick: u64) -> Option<T> {
    (!items.is_empty()).then(|| items[(pick % items.len() as u64) as usize])
}

fn read(file: &Path) -> Vec<u8> {
    std::fs::read(file).unwrap_or_else(|e| panic!("read {}: {e}", file.display()))
}

/// Applies `how` to the partition at `location`; `pick` chooses among the
/// possible places (any number: it is taken modulo their count). Returns
/// a line saying what was done, or `None` when the partition has no such
/// place (e.g. no block) or is not intact.
///
/// # Panics
/// If a file cannot be read or written.
pub fn damage_partition(location: &Path, how: Damage, pick: u64) -> Option<String> {
    let (data_path, index_path) = (location.join("data"), location.join("index"));
    let (data, index) = (read(&data_path), read(&index_path));
    let l = layout(&data, &index).ok()?;
    let cut = |file: &Path, bytes: &[u8], at: usize, what: &str| {
        std::fs::write(file, &bytes[..at]).expect("cut the file");
        format!(
            "{}: cut at byte {at} of {} ({what})",
            file.display(),
            bytes.len()
        )
    };
    let flip = |file: &Path, bytes: &[u8]| {
        let at = (pick % bytes.len() as u64) as usize;
        let mut changed = bytes.to_vec();
        changed[at] ^= 0xff;
        std::fs::write(file, &changed).expect("write the flipped byte");
        format!("{}: byte {at} of {} flipped", file.display(), bytes.len())
    };
    let delete = |file: &Path| {
        std::fs::remove_file(file).expect("delete the file");
        format!("{}: deleted", file.display())
    };
    match how {
        Damage::None => Some(format!("{}: left intact", location.display())),
        Damage::DataDeleted => Some(delete(&data_path)),
        Damage::IndexDeleted => Some(delete(&index_path)),
        Damage::DataCutAtBlockBoundary => {
            let starts: Vec<usize> = l.blocks.iter().map(|b| b.0).collect();
            choose(&starts, pick).map(|at| cut(&data_path, &data, at, "a block boundary"))
        }
        Damage::DataCutMidBlock => {
            let inside: Vec<usize> = l.blocks.iter().flat_map(|&(s, e)| s + 1..e).collect();
            choose(&inside, pick).map(|at| cut(&data_path, &data, at, "inside a block"))
        }
        Damage::DataFlippedByte => (l.data_len > 0).then(|| flip(&data_path, &data)),
        Damage::IndexCut => {
            let at = (pick % l.index_len as u64) as usize;
            Some(cut(&index_path, &index, at, "the index"))
        }
        Damage::IndexFlippedByte => Some(flip(&index_path, &index)),
    }
}

/// Flips one byte in every block of the partition's `data` (the sizes
/// stay), so that every consumer of a non-empty subpartition meets a bad
/// checksum. `None` when the partition has no block or is not intact.
///
/// # Panics
/// If a file cannot be read or written.
pub fn flip_every_block(location: &Path) -> Option<String> {
    let data_path = location.join("data");
    let mut data = read(&data_path);
    let l = layout(&data, &read(&location.join("index"))).ok()?;
    if l.blocks.is_empty() {
        return None;
    }
    for &(s, e) in &l.blocks {
        data[(s + e) / 2] ^= 0xff;
    }
    std::fs::write(&data_path, &data).expect("write the flipped bytes");
    Some(format!(
        "{}: one byte flipped in each of its {} blocks",
        data_path.display(),
        l.blocks.len()
    ))
}

/// The producer the partitions written by these tools name (job `t`, data
/// set `a-b`, subtask 0 of `a`, attempt 0).
pub fn test_producer() -> coordhost::shuffle::PartitionProducer {
    coordhost::shuffle::PartitionProducer {
        job: "t".into(),
        data_set: "a-b".into(),
        job_vertex: "a".into(),
        subtask: 0,
        attempt: 0,
    }
}

/// Writes, with the host's writer, a partition of one subpartition at
/// `location` holding `rows` rows of two Utf8 cells (`word<i>` and 200
/// `x`), in several blocks and regions.
///
/// # Panics
/// If the partition cannot be written.
pub fn write_words(location: &Path, rows: usize) -> Vec<u64> {
    let schema = Arc::new(Schema::new(vec![
        Field::new("word", DataType::Utf8, false),
        Field::new("pad", DataType::Utf8, false),
    ]));
    let mut w = coordhost::shuffle::PartitionWriter::create(location, 1, test_producer())
        .expect("create")
        .with_spill_bytes(20_000);
    for first in (0..rows).step_by(25) {
        let n = first..rows.min(first + 25);
        let words: StringArray = n.clone().map(|i| Some(format!("word{i}"))).collect();
        let pad: StringArray = n.map(|_| Some("x".repeat(200))).collect();
        let cols: Vec<ArrayRef> = vec![Arc::new(words), Arc::new(pad)];
        let b = RecordBatch::try_new(schema.clone(), cols).expect("batch");
        w.write_batch(0, &b).expect("write");
    }
    w.finish().expect("finish")
}
