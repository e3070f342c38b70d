//! The queue of unassigned splits that a split enumerator keeps (Flink's
//! `FileSourceSplit` assigner in miniature), in a binding-free form that can be
//! serialized into a batch snapshot (FLIP-383).

use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// What a split holds; mirrors the WIT `split-payload`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum PendingPayload {
    /// A byte range `[start, start + length)` of the file at absolute `path`.
    FileRange {
        /// Absolute path, identical on the host and in the guest.
        path: String,
        /// First byte of the range.
        start: u64,
        /// Number of bytes in the range.
        length: u64,
    },
    /// Lines given inline, separated by `\n`.
    Inline(String),
}

/// A split not yet assigned to a reader; mirrors the WIT `split`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingSplit {
    /// Identifier unique within the enumerator.
    pub id: String,
    /// What a reader reads.
    pub payload: PendingPayload,
}

/// Cuts a file of `file_len` bytes into `file-range` splits of at most
/// `split_bytes` bytes, with ids `"<file_name>:<index>"`, index from 0. An
/// empty file gives no split: it has no line to read.
///
/// # Panics
///
/// If `split_bytes` is 0 (callers validate the config first).
pub fn file_range_splits(
    path: &str,
    file_name: &str,
    file_len: u64,
    split_bytes: u64,
) -> Vec<PendingSplit> {
    assert!(split_bytes > 0, "split size must be positive");
    let count = file_len.div_ceil(split_bytes);
    (0..count)
        .map(|index| {
            let start = index * split_bytes;
            PendingSplit {
                id: format!("{file_name}:{index}"),
                payload: PendingPayload::FileRange {
                    path: path.to_owned(),
                    start,
                    length: split_bytes.min(file_len - start),
                },
            }
        })
        .collect()
}

/// Unassigned splits, handed out from the front.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SplitQueue {
    splits: VecDeque<PendingSplit>,
}

impl SplitQueue {
    /// An empty queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends newly discovered splits at the back.
    pub fn extend(&mut self, splits: impl IntoIterator<Item = PendingSplit>) {
        self.splits.extend(splits);
    }

    /// Takes the next split to assign.
    pub fn next_split(&mut self) -> Option<PendingSplit> {
        self.splits.pop_front()
    }

    /// Puts splits that came back from a reset subtask at the *front*, in
    /// their given order, so they are handed out again before any new one
    /// (Flink's `SplitEnumerator#addSplitsBack`).
    pub fn add_back(&mut self, splits: Vec<PendingSplit>) {
        for split in splits.into_iter().rev() {
            self.splits.push_front(split);
        }
    }

    /// Number of unassigned splits.
    pub fn len(&self) -> usize {
        self.splits.len()
    }

    /// Whether no split is left.
    pub fn is_empty(&self) -> bool {
        self.splits.is_empty()
    }
}

/// Defines `to_wit(PendingSplit) -> Split` and `from_wit(Split) -> PendingSplit`
/// in the calling module, for the `split`, `split-payload` and `file-range`
/// types that the caller's `wit-bindgen` generated in module `$types` (each
/// plugin crate has its own copy of the WIT types, so the conversions cannot
/// live here as functions).
#[macro_export]
macro_rules! wit_split_conversions {
    ($types:path) => {
        /// Converts a queued split into the WIT `split` handed to readers.
        fn to_wit(split: $crate::splits::PendingSplit) -> Split {
            use $types as types;
            let payload = match split.payload {
                $crate::splits::PendingPayload::FileRange {
                    path,
                    start,
                    length,
                } => types::SplitPayload::FileRange(types::FileRange {
                    path,
                    start,
                    length,
                }),
                $crate::splits::PendingPayload::Inline(text) => types::SplitPayload::Inline(text),
            };
            types::Split {
                id: split.id,
                payload,
            }
        }

        /// Converts a WIT `split` that came back into a queued split.
        fn from_wit(split: Split) -> $crate::splits::PendingSplit {
            use $types as types;
            let payload = match split.payload {
                types::SplitPayload::FileRange(range) => {
                    $crate::splits::PendingPayload::FileRange {
                        path: range.path,
                        start: range.start,
                        length: range.length,
                    }
                }
                types::SplitPayload::Inline(text) => $crate::splits::PendingPayload::Inline(text),
            };
            $crate::splits::PendingSplit {
                id: split.id,
                payload,
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inline(id: &str) -> PendingSplit {
        PendingSplit {
            id: id.to_owned(),
            payload: PendingPayload::Inline(id.to_owned()),
        }
    }

    #[test]
    fn files_are_cut_into_ranges_that_cover_every_byte_once() {
        let splits = file_range_splits("/d/a.txt", "a.txt", 10, 4);
        let ranges: Vec<_> = splits
            .iter()
            .map(|s| match &s.payload {
                PendingPayload::FileRange { start, length, .. } => (s.id.as_str(), *start, *length),
                PendingPayload::Inline(_) => unreachable!(),
            })
            .collect();
        assert_eq!(
            ranges,
            [("a.txt:0", 0, 4), ("a.txt:1", 4, 4), ("a.txt:2", 8, 2)]
        );
        assert!(file_range_splits("/d/e", "e", 0, 4).is_empty());
        assert_eq!(file_range_splits("/d/x", "x", 8, 4).len(), 2);
    }

    #[test]
    fn splits_added_back_are_handed_out_first_in_their_order() {
        let mut queue = SplitQueue::new();
        queue.extend([inline("c"), inline("d")]);
        queue.add_back(vec![inline("a"), inline("b")]);
        let order: Vec<_> = std::iter::from_fn(|| queue.next_split())
            .map(|s| s.id)
            .collect();
        assert_eq!(order, ["a", "b", "c", "d"]);
        assert!(queue.is_empty());
    }
}
