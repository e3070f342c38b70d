//! A source coordinator's batch snapshot in the log's form, encoded and
//! decoded side by side (FLIP-383 "recording" and docs/recovery.md step 4):
//! the host's [`CoordinatorSnapshot`] (the enumerator's opaque state plus
//! the split-assignment history per reader) becomes an
//! [`EnumeratorSnapshot`] of the `ExecutionFinished` record, each split
//! postcard-encoded; a recovery decodes it back. [`decode`] is the inverse
//! of [`encode`] (a unit test holds them to it).
//!
//! The recorder (the binary's `job` module) encodes; recovery decodes. Both sit above
//! this module (docs/architecture.md).

use crate::events::{EncodedSplit, EnumeratorSnapshot, SplitAssignment};
use crate::history::{CoordinatorSnapshot, ReaderState};
use crate::value::SplitData;

/// Why a coordinator snapshot cannot be encoded or decoded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SnapshotError {
    /// A split or a reader index cannot be written in the log's form.
    #[error("{reason}")]
    Encode {
        /// The encoder's message.
        reason: String,
    },
    /// The log's snapshot names a reader subtask beyond the parallelism.
    #[error("the enumerator snapshot of `{vertex}` names subtask {subtask}")]
    Subtask {
        /// The source job vertex id.
        vertex: String,
        /// The subtask named.
        subtask: u32,
    },
    /// A split of the log's snapshot cannot be decoded.
    #[error(
        "job vertex `{vertex}`: a split in the enumerator snapshot cannot be decoded: {reason}"
    )]
    Split {
        /// The source job vertex id.
        vertex: String,
        /// The decoder's message.
        reason: String,
    },
}

/// Encodes source vertex `vertex`'s coordinator snapshot into the log's
/// form: one [`SplitAssignment`] per reader that holds splits (each split
/// postcard-encoded, its id beside it), the readers told "no more splits",
/// and the enumerator's state inline (the recorder moves a large one into
/// a side file). `checkpoint_id` is -1: a batch snapshot, not a checkpoint.
///
/// # Errors
///
/// [`SnapshotError::Encode`] when a split cannot be encoded.
pub fn encode(
    vertex: &str,
    snap: &CoordinatorSnapshot,
) -> Result<EnumeratorSnapshot, SnapshotError> {
    let encode_err = |reason: String| SnapshotError::Encode { reason };
    let mut assignments = Vec::new();
    let mut no_more_splits = Vec::new();
    for (subtask, reader) in snap.readers.iter().enumerate() {
        let subtask = u32::try_from(subtask).map_err(|e| encode_err(e.to_string()))?;
        if !reader.assigned.is_empty() {
            let splits = reader
                .assigned
                .iter()
                .map(|s| {
                    Ok(EncodedSplit {
                        id: s.id.clone(),
                        bytes: postcard::to_allocvec(s).map_err(|e| encode_err(e.to_string()))?,
                    })
                })
                .collect::<Result<Vec<_>, SnapshotError>>()?;
            assignments.push(SplitAssignment { subtask, splits });
        }
        if reader.no_more_splits {
            no_more_splits.push(subtask);
        }
    }
    Ok(EnumeratorSnapshot {
        job_vertex: vertex.to_string(),
        checkpoint_id: -1,
        state: snap.enumerator.clone(),
        assignments,
        no_more_splits,
        state_file: None,
        incremental: false,
    })
}

/// Decodes source vertex `vertex`'s snapshot from the log's form for a
/// vertex of `parallelism` readers: every assigned split counts as
/// delivered. A "no more splits" for a reader beyond the parallelism is
/// ignored. The enumerator state must be inline (side files are loaded
/// before, `crate::events::load_snapshot_files`).
///
/// # Errors
///
/// [`SnapshotError::Subtask`] for an assignment to a reader beyond the
/// parallelism, [`SnapshotError::Split`] for a split that does not decode.
pub fn decode(
    vertex: &str,
    parallelism: u32,
    snap: &EnumeratorSnapshot,
) -> Result<CoordinatorSnapshot, SnapshotError> {
    let mut readers = vec![ReaderState::default(); parallelism as usize];
    for assignment in &snap.assignments {
        let reader = readers
            .get_mut(assignment.subtask as usize)
            .ok_or_else(|| SnapshotError::Subtask {
                vertex: vertex.to_string(),
                subtask: assignment.subtask,
            })?;
        for split in &assignment.splits {
            let data: SplitData =
                postcard::from_bytes(&split.bytes).map_err(|e| SnapshotError::Split {
                    vertex: vertex.to_string(),
                    reason: e.to_string(),
                })?;
            reader.assigned.push(data);
        }
        reader.delivered = reader.assigned.len();
    }
    for &s in &snap.no_more_splits {
        if let Some(reader) = readers.get_mut(s as usize) {
            reader.no_more_splits = true;
        }
    }
    Ok(CoordinatorSnapshot {
        enumerator: snap.state.clone(),
        readers,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::SplitPayloadData;

    fn split(id: &str, payload: SplitPayloadData) -> SplitData {
        SplitData {
            id: id.into(),
            payload,
        }
    }

    #[test]
    fn a_decoded_snapshot_is_the_encoded_one() {
        let readers = vec![
            ReaderState {
                assigned: vec![
                    split(
                        "a",
                        SplitPayloadData::FileRange {
                            path: "/data/in/a.csv".into(),
                            start: 7,
                            length: 1 << 40,
                        },
                    ),
                    split("b", SplitPayloadData::Inline("x\ny\n".into())),
                ],
                delivered: 2,
                no_more_splits: true,
            },
            ReaderState::default(),
            ReaderState {
                assigned: vec![split("c", SplitPayloadData::Inline(String::new()))],
                delivered: 1,
                ..ReaderState::default()
            },
        ];
        let snap = CoordinatorSnapshot {
            enumerator: vec![1, 2, 3, 255],
            readers,
        };
        let logged = encode("source", &snap).unwrap();
        assert_eq!(logged.job_vertex, "source");
        assert_eq!(logged.checkpoint_id, -1);
        assert_eq!(
            logged
                .assignments
                .iter()
                .map(|a| a.subtask)
                .collect::<Vec<_>>(),
            [0, 2],
            "a reader without splits has no assignment"
        );
        assert_eq!(logged.no_more_splits, [0]);
        assert_eq!(decode("source", 3, &logged).unwrap(), snap);
    }

    #[test]
    fn a_snapshot_naming_a_reader_beyond_the_parallelism_or_a_broken_split_is_refused() {
        let snap = CoordinatorSnapshot {
            enumerator: Vec::new(),
            readers: vec![
                ReaderState::default(),
                ReaderState {
                    assigned: vec![split("a", SplitPayloadData::Inline("x".into()))],
                    delivered: 1,
                    ..ReaderState::default()
                },
            ],
        };
        let mut logged = encode("src", &snap).unwrap();
        let err = decode("src", 1, &logged).unwrap_err();
        assert_eq!(
            err.to_string(),
            "the enumerator snapshot of `src` names subtask 1"
        );
        logged.assignments[0].splits[0].bytes = vec![0xff; 3];
        assert!(matches!(
            decode("src", 2, &logged),
            Err(SnapshotError::Split { vertex, .. }) if vertex == "src"
        ));
    }
}
