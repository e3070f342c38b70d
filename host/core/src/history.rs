//! A source vertex's split-assignment history as the host keeps it beside
//! its split enumerator (Flink's `SourceCoordinator` keeps the same to give
//! a failed reader's splits back): per subtask the splits assigned since
//! its last reset and how many were handed out, and a batch snapshot of
//! both with the enumerator's bytes (FLIP-383 stores the history with the
//! enumerator's state). Plain values: the enumerator itself is the binary's
//! (`coordinator::SourceCoordinator` over the plugin host).

use serde::{Deserialize, Serialize};

use crate::value::{SplitData, SplitPayloadData};

/// Per-subtask state, serializable for batch snapshots (FLIP-383 stores the
/// assignment history with the enumerator's state).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReaderState {
    /// Splits assigned since the subtask's last reset, in order.
    pub assigned: Vec<SplitData>,
    /// How many of `assigned` were handed to the reader.
    pub delivered: usize,
    /// The enumerator signalled "no more splits" for this subtask, or the
    /// host did because the subtask reached its `max-task-bytes` cap (the
    /// effect is the same: the reader ends, and a reset clears it).
    pub no_more_splits: bool,
}

impl ReaderState {
    /// Input bytes of the splits handed to the reader so far
    /// ([`split_input_bytes`] each).
    pub fn delivered_bytes(&self) -> u64 {
        self.assigned[..self.delivered.min(self.assigned.len())]
            .iter()
            .map(split_input_bytes)
            .sum()
    }

    /// Input bytes of every split in the history.
    pub fn assigned_bytes(&self) -> u64 {
        self.assigned.iter().map(split_input_bytes).sum()
    }
}

/// The input bytes a split stands for: a `file-range`'s length, an inline
/// split's text length. This is what `max-task-bytes` counts and what the
/// summary reports as kept and re-read input.
pub fn split_input_bytes(s: &SplitData) -> u64 {
    match &s.payload {
        SplitPayloadData::FileRange { length, .. } => *length,
        SplitPayloadData::Inline(t) => t.len() as u64,
    }
}

/// A batch snapshot of a source coordinator: the enumerator's bytes plus
/// the host's per-subtask history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CoordinatorSnapshot {
    /// What `snapshot-state(-1)` returned.
    pub enumerator: Vec<u8>,
    /// One entry per subtask.
    pub readers: Vec<ReaderState>,
}
