//! What a split enumerator may do back into the host during one call
//! ([`EnumeratorAction`]) and the host's bounds on it. A leaf of
//! `plugin/`: the store records actions, the enumerator wrapper checks
//! them; neither imports the other for it.

use super::{Split, SplitPayload};

/// Most splits (plus context calls) the host takes from a split enumerator
/// in one call; past it the call fails naming the plugin.
pub const MAX_SPLITS_PER_CALL: u64 = 100_000;
/// Most split bytes (ids, paths and inline text) the host takes from a
/// split enumerator in one call: 64 MiB.
pub const MAX_SPLIT_BYTES_PER_CALL: u64 = 64 << 20;
/// The host's bounds on what it keeps assigned for one split enumerator
/// at once (its assignment history), kept by the source coordinator in
/// `coordhost-core`.
pub use coordhost_core::coordinator::{MAX_SPLIT_BYTES_TOTAL, MAX_SPLITS_TOTAL};

/// The bytes of a split the host keeps: its id and its path or inline text.
pub fn split_bytes(split: &Split) -> u64 {
    let payload = match &split.payload {
        SplitPayload::FileRange(r) => r.path.len(),
        SplitPayload::Inline(text) => text.len(),
    };
    (split.id.len() + payload) as u64
}

/// A call the enumerator made back into the host (through the imported
/// `enumerator-context`) during one call, in the order it made them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnumeratorAction {
    /// `assign-splits`: these splits now belong to reader `subtask`.
    Assign {
        /// The reader subtask.
        subtask: u32,
        /// The splits, in assignment order.
        splits: Vec<Split>,
    },
    /// `signal-no-more-splits`: reader `subtask` gets nothing more.
    NoMoreSplits {
        /// The reader subtask.
        subtask: u32,
    },
}
