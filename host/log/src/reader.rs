//! Replay of a job's event log: every whole record of every segment, in
//! order, with a torn tail of the newest segment cut and any other damage
//! refused as corruption naming the segment and the offset.
//!
//! The reader advances a valid offset record by record, as raft-engine's
//! `file_pipe_log/reader.rs` does. Older segments are read only up to the
//! valid length that the newest segment's header sealed them at, so a torn
//! tail cut once is cut the same way by every later replay, and bytes
//! appended after a seal are ignored.

use std::path::PathBuf;

use serde::Serialize;

use super::error::{Damage, EventsError};
use super::event::{DecodeProblem, JobEvent, JobStarted, kind_name};
use super::format::{self, FrameProblem, HeaderProblem, SealedSegment, SegmentHeader};
use super::storage::Storage;

/// Where a record starts: the segment's coordinator attempt and the byte
/// offset of its frame in that segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Position {
    /// Coordinator attempt that wrote the segment.
    pub attempt: u32,
    /// Byte offset of the record frame in the segment.
    pub offset: u64,
}

/// One replayed event and where it was found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ReplayedEvent {
    /// Where the record starts.
    pub position: Position,
    /// The event.
    pub event: JobEvent,
}

impl AsRef<JobEvent> for ReplayedEvent {
    fn as_ref(&self) -> &JobEvent {
        &self.event
    }
}

impl From<ReplayedEvent> for JobEvent {
    /// The event, its position dropped (recovery takes owned records
    /// apart as it folds them).
    fn from(replayed: ReplayedEvent) -> Self {
        replayed.event
    }
}

impl AsMut<JobEvent> for ReplayedEvent {
    fn as_mut(&mut self) -> &mut JobEvent {
        &mut self.event
    }
}

/// A torn tail cut from the newest segment: the bytes after the last whole
/// record, holding no whole record (a crash in the middle of a write).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TornTail {
    /// The segment file.
    pub segment: PathBuf,
    /// Its coordinator attempt.
    pub attempt: u32,
    /// Offset where the cut starts (the end of the last whole record).
    pub offset: u64,
    /// Bytes dropped, from `offset` to the end of the file.
    pub bytes_dropped: u64,
}

/// What replay found in one segment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SegmentSummary {
    /// Coordinator attempt that wrote it.
    pub attempt: u32,
    /// The segment file.
    pub path: PathBuf,
    /// Its size now, in bytes.
    pub file_len: u64,
    /// Bytes that hold the header and whole records (the sealed length of an
    /// older segment; the end of the last whole record of the newest).
    pub valid_len: u64,
    /// Whole records in it.
    pub records: u64,
    /// True if a newer segment sealed it.
    pub sealed: bool,
}

/// The outcome of replaying a log.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Replay {
    /// Every whole record, oldest first.
    pub events: Vec<ReplayedEvent>,
    /// The torn tail cut from the newest segment, if any.
    pub torn_tail: Option<TornTail>,
    /// One summary per segment, oldest first.
    pub segments: Vec<SegmentSummary>,
}

impl Replay {
    /// True if the log has no segment at all (a fresh job).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.segments.is_empty()
    }

    /// The first record, if it is the [`JobStarted`] every log begins with.
    #[must_use]
    pub fn job_started(&self) -> Option<&JobStarted> {
        match self.events.first().map(|e| &e.event) {
            Some(JobEvent::JobStarted(started)) => Some(started),
            _ => None,
        }
    }

    /// The events alone, oldest first.
    pub fn iter_events(&self) -> impl Iterator<Item = &JobEvent> {
        self.events.iter().map(|e| &e.event)
    }

    /// The coordinator attempt that the next writer uses: one past the
    /// newest segment's, or 0 for a fresh log.
    #[must_use]
    pub fn next_attempt(&self) -> u32 {
        self.segments
            .last()
            .map_or(0, |s| s.attempt.saturating_add(1))
    }

    /// The sealed-segment table a new segment's header carries: every
    /// segment with its valid length.
    #[must_use]
    pub fn seal_table(&self) -> Vec<SealedSegment> {
        self.segments
            .iter()
            .map(|s| SealedSegment {
                attempt: s.attempt,
                valid_len: s.valid_len,
            })
            .collect()
    }
}

/// Replays every segment in `storage`.
///
/// A fresh log (no segment) gives an empty [`Replay`]. A torn tail of the
/// newest segment is cut and reported in [`Replay::torn_tail`]; replay does
/// not log it ([`EventLogWriter::open`](super::EventLogWriter::open), which
/// seals it away, warns once).
///
/// # Errors
/// [`EventsError::Corrupt`] for damage anywhere else (naming segment and
/// offset), [`EventsError::UnsupportedFormat`] / [`EventsError::UnsupportedVersion`]
/// / [`EventsError::UnknownKind`] for data newer than this binary, and
/// [`EventsError::Io`] if a segment cannot be listed or read.
pub fn replay(storage: &dyn Storage) -> Result<Replay, EventsError> {
    storage.check()?;
    let attempts = storage.list_segments().map_err(|source| EventsError::Io {
        path: storage
            .segment_path(0)
            .parent()
            .map(PathBuf::from)
            .unwrap_or_default(),
        source,
    })?;
    let Some((&newest, older)) = attempts.split_last() else {
        return Ok(Replay::default());
    };
    let newest_bytes = read(storage, newest)?;
    let newest_header = header(storage, newest, &newest_bytes)?;
    check_seal_table(storage, newest, &newest_header.sealed, older)?;

    let mut replay = Replay::default();
    for (index, entry) in newest_header.sealed.iter().enumerate() {
        let bytes = read(storage, entry.attempt)?;
        let head = header(storage, entry.attempt, &bytes)?;
        if head.sealed[..] != newest_header.sealed[..index] {
            return Err(corrupt(
                storage,
                entry.attempt,
                0,
                Damage::SealTable {
                    detail: format!("its own table differs from the one segment {newest} carries"),
                },
            ));
        }
        scan_sealed(storage, entry, head.encoded_len(), &bytes, &mut replay)?;
    }
    scan_newest(
        storage,
        newest,
        newest_header.encoded_len(),
        &newest_bytes,
        &mut replay,
    )?;
    Ok(replay)
}

fn read(storage: &dyn Storage, attempt: u32) -> Result<Vec<u8>, EventsError> {
    storage
        .read_segment(attempt)
        .map_err(|source| EventsError::Io {
            path: storage.segment_path(attempt),
            source,
        })
}

fn corrupt(storage: &dyn Storage, attempt: u32, offset: u64, damage: Damage) -> EventsError {
    EventsError::Corrupt {
        segment: storage.segment_path(attempt),
        offset,
        damage,
    }
}

fn header(storage: &dyn Storage, attempt: u32, bytes: &[u8]) -> Result<SegmentHeader, EventsError> {
    let damage = match format::decode_header(bytes) {
        Ok(h) if h.attempt == attempt => return Ok(h),
        Ok(h) => Damage::AttemptMismatch {
            expected: attempt,
            found: h.attempt,
        },
        Err(HeaderProblem::Version(found)) => {
            return Err(EventsError::UnsupportedFormat {
                segment: storage.segment_path(attempt),
                found,
                max_known: format::FORMAT_VERSION,
            });
        }
        Err(HeaderProblem::Short { needed }) => Damage::ShortHeader { needed },
        Err(HeaderProblem::BadMagic) => Damage::BadMagic,
        Err(HeaderProblem::Checksum) => Damage::HeaderChecksum,
        Err(HeaderProblem::Flags(_)) => Damage::HeaderField { field: "flags" },
        Err(HeaderProblem::SealedCount(_)) => Damage::HeaderField {
            field: "sealed segment count",
        },
    };
    Err(corrupt(storage, attempt, 0, damage))
}

/// The newest header must seal exactly the older segments present.
fn check_seal_table(
    storage: &dyn Storage,
    newest: u32,
    sealed: &[SealedSegment],
    older: &[u32],
) -> Result<(), EventsError> {
    let listed: Vec<u32> = sealed.iter().map(|s| s.attempt).collect();
    if listed == older {
        return Ok(());
    }
    let missing: Vec<u32> = listed
        .iter()
        .filter(|a| !older.contains(a))
        .copied()
        .collect();
    let unsealed: Vec<u32> = older
        .iter()
        .filter(|a| !listed.contains(a))
        .copied()
        .collect();
    Err(corrupt(
        storage,
        newest,
        0,
        Damage::SealTable {
            detail: format!(
                "sealed attempts {listed:?}; missing files {missing:?}; files not sealed {unsealed:?}"
            ),
        },
    ))
}

fn scan_sealed(
    storage: &dyn Storage,
    entry: &SealedSegment,
    header_len: usize,
    bytes: &[u8],
    replay: &mut Replay,
) -> Result<(), EventsError> {
    let attempt = entry.attempt;
    let file_len = bytes.len() as u64;
    if entry.valid_len > file_len {
        return Err(corrupt(
            storage,
            attempt,
            file_len,
            Damage::ShorterThanSealed {
                valid_len: entry.valid_len,
                file_len,
            },
        ));
    }
    if entry.valid_len < header_len as u64 {
        return Err(corrupt(
            storage,
            attempt,
            0,
            Damage::SealTable {
                detail: format!("sealed length {} is inside the header", entry.valid_len),
            },
        ));
    }
    let valid = &bytes[..usize::try_from(entry.valid_len).unwrap_or(bytes.len())];
    let mut offset = header_len;
    let mut records = 0;
    reserve_for(replay, &valid[offset..]);
    while offset < valid.len() {
        match format::decode_frame(&valid[offset..]) {
            Ok(frame) => {
                push(storage, attempt, offset, frame, replay)?;
                offset += frame.frame_len;
                records += 1;
            }
            Err(problem) => {
                return Err(corrupt(
                    storage,
                    attempt,
                    offset as u64,
                    frame_damage(problem),
                ));
            }
        }
    }
    replay.segments.push(SegmentSummary {
        attempt,
        path: storage.segment_path(attempt),
        file_len,
        valid_len: entry.valid_len,
        records,
        sealed: true,
    });
    Ok(())
}

fn scan_newest(
    storage: &dyn Storage,
    attempt: u32,
    header_len: usize,
    bytes: &[u8],
    replay: &mut Replay,
) -> Result<(), EventsError> {
    let mut offset = header_len;
    let mut records = 0;
    reserve_for(replay, bytes.get(offset..).unwrap_or_default());
    while offset < bytes.len() {
        match format::decode_frame(&bytes[offset..]) {
            Ok(frame) => {
                push(storage, attempt, offset, frame, replay)?;
                offset += frame.frame_len;
                records += 1;
            }
            Err(problem) if whole_frame_after(bytes, offset) => {
                return Err(corrupt(
                    storage,
                    attempt,
                    offset as u64,
                    frame_damage(problem),
                ));
            }
            Err(_) => {
                let torn = TornTail {
                    segment: storage.segment_path(attempt),
                    attempt,
                    offset: offset as u64,
                    bytes_dropped: (bytes.len() - offset) as u64,
                };
                // Reported by the caller that acts on it (the writer, once per
                // run), not here: a run replays the log more than once.
                replay.torn_tail = Some(torn);
                break;
            }
        }
    }
    replay.segments.push(SegmentSummary {
        attempt,
        path: storage.segment_path(attempt),
        file_len: bytes.len() as u64,
        valid_len: offset as u64,
        records,
        sealed: false,
    });
    Ok(())
}

/// Room in the event list for every frame of `records`: the first (and
/// usually only) segment's exactly, later ones amortized, so that many
/// segments (a crash loop) do not copy the list once each (at 1 M execution
/// vertices the list holds half a million events; issue 29). Only room: if
/// it cannot be had, the list grows as records are pushed, as before.
fn reserve_for(replay: &mut Replay, records: &[u8]) {
    let _unreserved = replay.events.try_reserve(format::count_frames(records));
}

/// True if a whole, checksum-valid frame starts anywhere after `offset`:
/// then the damage at `offset` is not a torn tail but corruption.
fn whole_frame_after(bytes: &[u8], offset: usize) -> bool {
    (offset + 1..bytes.len().saturating_sub(format::FRAME_OVERHEAD - 1))
        .any(|start| format::decode_frame(&bytes[start..]).is_ok())
}

fn frame_damage(problem: FrameProblem) -> Damage {
    match problem {
        FrameProblem::Incomplete => Damage::RecordCutShort,
        FrameProblem::TooLong(len) => Damage::RecordTooLong { len },
        FrameProblem::Checksum => Damage::RecordChecksum,
    }
}

fn push(
    storage: &dyn Storage,
    attempt: u32,
    offset: usize,
    frame: format::Frame<'_>,
    replay: &mut Replay,
) -> Result<(), EventsError> {
    let segment = || storage.segment_path(attempt);
    let event =
        JobEvent::decode(frame.kind, frame.version, frame.payload).map_err(
            |problem| match problem {
                DecodeProblem::UnknownKind => EventsError::UnknownKind {
                    kind: frame.kind,
                    max_known: format::kind::NEWEST,
                    segment: segment(),
                    offset: offset as u64,
                },
                DecodeProblem::NewerVersion { max_known } => EventsError::UnsupportedVersion {
                    kind: frame.kind,
                    kind_name: kind_name(frame.kind).unwrap_or("?"),
                    version: frame.version,
                    max_known,
                    segment: segment(),
                    offset: offset as u64,
                },
                DecodeProblem::Malformed(detail) => {
                    corrupt(storage, attempt, offset as u64, Damage::Payload { detail })
                }
            },
        )?;
    replay.events.push(ReplayedEvent {
        position: Position {
            attempt,
            offset: offset as u64,
        },
        event,
    });
    Ok(())
}
