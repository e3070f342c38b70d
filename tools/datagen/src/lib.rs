//! Data for coordhost's examples, tests and benchmarks.
//!
//! - [`tpch`]: the eight TPC-H tables (`region`, `nation`, `supplier`,
//!   `customer`, `part`, `partsupp`, `orders`, `lineitem`) as CSV and as
//!   typed Parquet, made by the `tpchgen` library (TPC-H's own `dbgen`
//!   rules, so scale factor 0.1 gives 600 572 `lineitem` rows):
//!   [`write_tpch`] lays out a data set, [`write_table`] writes one table,
//!   [`write_lineitem`] and [`write_lineitem_parquet`] just `lineitem`'s
//!   part files into a folder.
//! - [`write_words`]: a folder of text files of pseudo-random words from a
//!   fixed vocabulary with a skewed (Zipf-like) frequency, deterministic in
//!   the seed, for the word-count example.

use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

pub mod tpch;

pub use tpch::{
    DEFAULT_ROW_GROUP_ROWS, Format, Table, Written, lineitem_schema, write_lineitem,
    write_lineitem_parquet, write_table, write_tpch,
};

/// Writes `files` text files `text-<i>.txt` of `lines_per_file` lines each
/// into `dir`; every line has 4 to 15 words with some punctuation and
/// capitals. Returns the files and the total number of words.
///
/// # Errors
///
/// The I/O error of creating the folder or writing a file.
pub fn write_words(
    dir: &Path,
    files: u32,
    lines_per_file: u32,
    seed: u64,
) -> io::Result<(Vec<PathBuf>, u64)> {
    fs::create_dir_all(dir)?;
    let vocabulary = vocabulary(2000);
    let mut rng = XorShift(seed.max(1));
    let mut paths = Vec::new();
    let mut words = 0u64;
    for f in 0..files {
        let path = dir.join(format!("text-{f:03}.txt"));
        let mut out = BufWriter::new(File::create(&path)?);
        for _ in 0..lines_per_file {
            let n = 4 + rng.next() % 12;
            let mut line = String::new();
            for i in 0..n {
                // Skewed pick: the minimum of two uniform draws favours low ranks.
                let r = (rng.next() % vocabulary.len() as u64)
                    .min(rng.next() % vocabulary.len() as u64);
                let mut w = vocabulary[r as usize].clone();
                if rng.next().is_multiple_of(10) {
                    w[..1].make_ascii_uppercase();
                }
                if i > 0 {
                    line.push(' ');
                }
                line.push_str(&w);
                if rng.next().is_multiple_of(8) {
                    line.push_str([",", ".", ";", "!", "?"][(rng.next() % 5) as usize]);
                }
                words += 1;
            }
            writeln!(out, "{line}")?;
        }
        out.into_inner()
            .map_err(io::IntoInnerError::into_error)?
            .sync_all()?;
        paths.push(path);
    }
    Ok((paths, words))
}

/// `n` distinct lower-case words made of syllables.
fn vocabulary(n: usize) -> Vec<String> {
    const SYLLABLES: [&str; 24] = [
        "ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ze", "bra", "cle", "dri", "fo", "gu",
        "ha", "jo", "pe", "qui", "sto", "tra", "un", "wy", "xe", "yo",
    ];
    let mut out = Vec::with_capacity(n);
    let mut i = 0usize;
    while out.len() < n {
        let mut w = String::new();
        let mut k = i;
        loop {
            w.push_str(SYLLABLES[k % SYLLABLES.len()]);
            k /= SYLLABLES.len();
            if k == 0 {
                break;
            }
        }
        out.push(w);
        i += 1;
    }
    out
}

/// A small deterministic generator (Marsaglia's xorshift64).
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
}
