//! Split values: what a split enumerator hands out and a source task reads,
//! as the host keeps them (recorded in batch snapshots, replayed by
//! recovery). Plain values: no behaviour, no imports of the crate.

use std::path::PathBuf;

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
