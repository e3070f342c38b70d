//! A test tool that damages result partitions the way disks and people do:
//! a subpartition file deleted, cut at a block boundary, cut at a record
//! boundary inside a block, cut in the middle of a record, or one byte
//! flipped — while the partition keeps its `COMPLETE` marker.
//!
//! It parses the subpartition format itself (the byte table in the doc
//! comment of host/src/shuffle.rs: blocks of `{u32 length, u32 CRC32C,
//! records}` and an 8-byte end marker) so that it can aim at boundaries; it
//! checks what it parses, so a format change makes it fail loudly rather
//! than aim at the wrong bytes.

use std::path::{Path, PathBuf};

/// A kind of damage to one subpartition file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Damage {
    /// Nothing is changed.
    None,
    /// The file is deleted (the partition keeps `COMPLETE`).
    Deleted,
    /// The file is cut where a block (or the end marker) begins.
    CutAtBlockBoundary,
    /// The file is cut between two records of the same block.
    CutAtRecordBoundary,
    /// The file is cut inside a record.
    CutMidRecord,
    /// One byte anywhere in the file is inverted (the size stays).
    FlippedByte,
}

impl Damage {
    /// Every kind, `None` first.
    #[cfg_attr(
        not(feature = "failpoints"),
        expect(
            dead_code,
            reason = "used by recovery_damage_proptest, built with the failpoints feature"
        )
    )]
    pub const ALL: [Damage; 6] = [
        Damage::None,
        Damage::Deleted,
        Damage::CutAtBlockBoundary,
        Damage::CutAtRecordBoundary,
        Damage::CutMidRecord,
        Damage::FlippedByte,
    ];
}

/// Where the blocks and records of a subpartition file are.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Layout {
    /// Offset of every block header, then of the end marker.
    pub block_starts: Vec<usize>,
    /// Byte range of every record (inside the payloads).
    pub records: Vec<(usize, usize)>,
    /// The file's length.
    pub len: usize,
}

fn word(bytes: &[u8], at: usize) -> Result<usize, String> {
    bytes
        .get(at..at + 4)
        .and_then(|s| <[u8; 4]>::try_from(s).ok())
        .map(|b| u32::from_le_bytes(b) as usize)
        .ok_or_else(|| format!("no u32 at byte {at} of {} bytes", bytes.len()))
}

/// Parses an intact subpartition file.
///
/// # Errors
/// A message when the bytes are not an intact subpartition (the tool aims
/// only at files as the host wrote them, not at damage done before).
pub fn layout(bytes: &[u8]) -> Result<Layout, String> {
    let mut out = Layout {
        len: bytes.len(),
        ..Layout::default()
    };
    let mut at = 0;
    loop {
        out.block_starts.push(at);
        let len = word(bytes, at)?;
        if len == 0 {
            if at + 8 != bytes.len() || word(bytes, at + 4)? != out.records.len() {
                return Err(format!("bad end marker at byte {at}"));
            }
            return Ok(out);
        }
        let payload = at + 8;
        let end = payload + len;
        let block = bytes
            .get(payload..end)
            .ok_or_else(|| format!("block at {at} is cut"))?;
        if crc32c::crc32c(block) as usize != word(bytes, at + 4)? {
            return Err(format!("block at {at}: CRC32C does not match"));
        }
        let mut r = payload;
        while r < end {
            let fields = word(bytes, r)?;
            let mut e = r + 4;
            for _ in 0..fields {
                e += 4 + word(bytes, e)?;
            }
            if e > end {
                return Err(format!("record at {r} ends outside its block"));
            }
            out.records.push((r, e));
            r = e;
        }
        at = end;
    }
}

/// Picks `items[pick % len]`.
fn choose<T: Copy>(items: &[T], pick: u64) -> Option<T> {
    (!items.is_empty()).then(|| items[(pick % items.len() as u64) as usize])
}

/// Applies `how` to the subpartition file `file`; `pick` chooses among the
/// possible places (any number: it is taken modulo their count). Returns a
/// line saying what was done, or `None` when the file has no such place
/// (e.g. a record boundary in a file with one record) or is not intact.
///
/// # Panics
/// If the file cannot be read or written.
pub fn damage_file(file: &Path, how: Damage, pick: u64) -> Option<String> {
    let bytes = std::fs::read(file).unwrap_or_else(|e| panic!("read {}: {e}", file.display()));
    let l = layout(&bytes).ok()?;
    let name = file.display();
    let cut = |at: usize, what: &str| {
        std::fs::write(file, &bytes[..at]).expect("cut the file");
        format!("{name}: cut at byte {at} of {} ({what})", l.len)
    };
    match how {
        Damage::None => Some(format!("{name}: left intact")),
        Damage::Deleted => {
            std::fs::remove_file(file).expect("delete the file");
            Some(format!("{name}: deleted"))
        }
        Damage::CutAtBlockBoundary => {
            choose(&l.block_starts, pick).map(|at| cut(at, "a block boundary"))
        }
        Damage::CutAtRecordBoundary => {
            // Record starts that are not block starts: a cut inside a block.
            let inside: Vec<usize> = l
                .records
                .iter()
                .map(|r| r.0)
                .filter(|s| !l.block_starts.contains(&(s - 8)))
                .collect();
            choose(&inside, pick).map(|at| cut(at, "a record boundary inside a block"))
        }
        Damage::CutMidRecord => {
            let inside: Vec<usize> = l.records.iter().flat_map(|&(s, e)| s + 1..e).collect();
            choose(&inside, pick).map(|at| cut(at, "the middle of a record"))
        }
        Damage::FlippedByte => {
            let at = (pick % bytes.len() as u64) as usize;
            let mut changed = bytes.clone();
            changed[at] ^= 0xff;
            std::fs::write(file, &changed).expect("write the flipped byte");
            Some(format!("{name}: byte {at} of {} flipped", l.len))
        }
    }
}

/// The intact subpartition files of the partition at `location` that hold
/// at least one record, in subpartition order.
pub fn non_empty_subpartitions(location: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut numbered: Vec<(u32, PathBuf)> = std::fs::read_dir(location)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let i = name
                .strip_prefix("sub-")?
                .strip_suffix(".data")?
                .parse()
                .ok()?;
            Some((i, e.path()))
        })
        .collect();
    numbered.sort();
    for (_, file) in numbered {
        let Ok(bytes) = std::fs::read(&file) else {
            continue;
        };
        if layout(&bytes).is_ok_and(|l| !l.records.is_empty()) {
            out.push(file);
        }
    }
    out
}

/// Applies `how` to one non-empty subpartition of the partition at
/// `location`, chosen with `pick` like the place inside it. `None` when no
/// subpartition offers such a place.
#[cfg_attr(
    not(feature = "failpoints"),
    expect(
        dead_code,
        reason = "used by recovery_damage_proptest, built with the failpoints feature"
    )
)]
pub fn damage_partition(location: &Path, how: Damage, pick: u64) -> Option<String> {
    let files = non_empty_subpartitions(location);
    let n = files.len() as u64;
    (0..n).find_map(|k| {
        let file = &files[((pick + k) % n) as usize];
        damage_file(file, how, pick / n.max(1))
    })
}
