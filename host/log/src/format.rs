//! Every on-disk constant of the job event log, in one place, and the
//! byte-level encoding of segment headers and record frames.
//!
//! This file mirrors `docs/log-format.md` table for table: when one changes,
//! the other changes in the same commit. All integers are little-endian.
//! The idea of a small, separately specified framing layer comes from
//! raft-engine's `file_pipe_log/format.rs` and redb's `docs/design.md`.

/// File name prefix of a segment: `segment-<attempt:08>.log`.
pub const SEGMENT_PREFIX: &str = "segment-";
/// File name suffix of a segment.
pub const SEGMENT_SUFFIX: &str = ".log";
/// Suffix of a segment being created; never read, removed when found.
pub const TEMP_SUFFIX: &str = ".tmp";
/// Name of the lock file inside the log directory.
pub const LOCK_FILE: &str = "LOCK";
/// Name of the log directory inside a job's data directory
/// (`<data dir>/<job id>/log/`).
pub const LOG_DIR: &str = "log";

/// Magic bytes at offset 0 of every segment.
pub const MAGIC: [u8; 8] = *b"CHJEVLOG";
/// The segment format version this binary writes and the newest it reads.
pub const FORMAT_VERSION: u16 = 1;

/// Offset of the magic in the segment header.
pub const HEADER_MAGIC_OFFSET: usize = 0;
/// Offset of the format version (u16).
pub const HEADER_VERSION_OFFSET: usize = 8;
/// Offset of the reserved flags (u16, must be 0 in version 1).
pub const HEADER_FLAGS_OFFSET: usize = 10;
/// Offset of the coordinator attempt that wrote the segment (u32).
pub const HEADER_ATTEMPT_OFFSET: usize = 12;
/// Offset of the number of sealed older segments (u32).
pub const HEADER_SEALED_COUNT_OFFSET: usize = 16;
/// Size of the fixed part of the header, before the sealed-segment table.
pub const HEADER_FIXED_LEN: usize = 20;
/// Size of one sealed-segment entry: attempt (u32) and valid length (u64).
pub const SEALED_ENTRY_LEN: usize = 12;
/// Size of the header checksum (CRC32C of every header byte before it).
pub const HEADER_CRC_LEN: usize = 4;
/// Most sealed segments one header may list; a larger count is corruption.
pub const MAX_SEALED_SEGMENTS: u32 = 1 << 20;

/// Offset of the payload length (u32) in a record frame.
pub const FRAME_LEN_OFFSET: usize = 0;
/// Offset of the event kind id (u16) in a record frame.
pub const FRAME_KIND_OFFSET: usize = 4;
/// Offset of the schema version (u16) in a record frame.
pub const FRAME_VERSION_OFFSET: usize = 6;
/// Size of the frame head (length, kind, schema version); the payload follows.
pub const FRAME_HEAD_LEN: usize = 8;
/// Size of the CRC32C that follows the payload; it covers head and payload.
pub const FRAME_CRC_LEN: usize = 4;
/// Bytes a frame adds around its payload.
pub const FRAME_OVERHEAD: usize = FRAME_HEAD_LEN + FRAME_CRC_LEN;
/// Largest payload a frame may carry (64 MiB); a larger length is damage.
pub const MAX_PAYLOAD_LEN: u32 = 64 << 20;

/// File name prefix of a snapshot side file:
/// `snapshot-<coordinator attempt:08>-<number:08>.state`.
pub const SNAPSHOT_FILE_PREFIX: &str = "snapshot-";
/// File name suffix of a snapshot side file.
pub const SNAPSHOT_FILE_SUFFIX: &str = ".state";
/// Largest enumerator snapshot state kept inside its record (1 MiB); a
/// larger one is written to a side file that the record names.
pub const INLINE_SNAPSHOT_MAX: usize = 1 << 20;
/// Largest batch snapshot the host records (1 GiB). A larger one is refused
/// when it is taken, naming the plugin and both sizes; the job goes on and a
/// recovery restores the previous snapshot.
pub const MAX_SNAPSHOT_LEN: u64 = 1 << 30;

/// Stable kind ids of the events. Never reuse or renumber one; 0 is invalid.
pub mod kind {
    /// [`JobStarted`](crate::JobStarted).
    pub const JOB_STARTED: u16 = 1;
    /// [`JobVertexInitialized`](crate::JobVertexInitialized).
    pub const JOB_VERTEX_INITIALIZED: u16 = 2;
    /// [`ExecutionFinished`](crate::ExecutionFinished).
    pub const EXECUTION_FINISHED: u16 = 3;
    /// [`ExecutionsReset`](crate::ExecutionsReset).
    pub const EXECUTIONS_RESET: u16 = 4;
    /// [`SinkCommitted`](crate::SinkCommitted).
    pub const SINK_COMMITTED: u16 = 5;
    /// [`RecoveryStarted`](crate::RecoveryStarted).
    pub const RECOVERY_STARTED: u16 = 6;
    /// [`RecoveryFinished`](crate::RecoveryFinished).
    pub const RECOVERY_FINISHED: u16 = 7;
    /// [`LeaderElected`](crate::LeaderElected).
    pub const LEADER_ELECTED: u16 = 8;
    /// [`JobFinished`](crate::JobFinished).
    pub const JOB_FINISHED: u16 = 9;
    /// [`JobFailed`](crate::JobFailed).
    pub const JOB_FAILED: u16 = 10;
    /// [`StagesPlanned`](crate::StagesPlanned).
    pub const STAGES_PLANNED: u16 = 11;
    /// [`JobCancelled`](crate::JobCancelled).
    pub const JOB_CANCELLED: u16 = 12;
    /// The largest kind id this binary knows; a record of a larger one was
    /// written by a newer coordhost.
    pub const NEWEST: u16 = JOB_CANCELLED;
}

/// Newest schema version of each kind's payload that this binary knows.
/// A record with a larger version is refused, never mis-parsed.
pub mod schema {
    /// Schema version of `JobStarted` payloads.
    pub const JOB_STARTED: u16 = 1;
    /// Schema version of `JobVertexInitialized` payloads.
    pub const JOB_VERTEX_INITIALIZED: u16 = 1;
    /// Schema version of `ExecutionFinished` payloads: 2 adds a side file
    /// per enumerator snapshot (`EnumeratorSnapshot::state_file`), 3 an
    /// incremental split-assignment history
    /// (`EnumeratorSnapshot::incremental`); the oldest version that holds
    /// a record is the one written.
    pub const EXECUTION_FINISHED: u16 = 3;
    /// Schema version of `ExecutionsReset` payloads: 2 adds the reset
    /// reason `RecoveryEnumeratorRestoreFailed`; the oldest version that
    /// holds a record is the one written.
    pub const EXECUTIONS_RESET: u16 = 2;
    /// Schema version of `SinkCommitted` payloads.
    pub const SINK_COMMITTED: u16 = 1;
    /// Schema version of `RecoveryStarted` payloads.
    pub const RECOVERY_STARTED: u16 = 1;
    /// Schema version of `RecoveryFinished` payloads: 2 adds the reset
    /// reason `RecoveryEnumeratorRestoreFailed` (as `EXECUTIONS_RESET`).
    pub const RECOVERY_FINISHED: u16 = 2;
    /// Schema version of `LeaderElected` payloads.
    pub const LEADER_ELECTED: u16 = 1;
    /// Schema version of `JobFinished` payloads.
    pub const JOB_FINISHED: u16 = 1;
    /// Schema version of `JobFailed` payloads.
    pub const JOB_FAILED: u16 = 1;
    /// Schema version of `StagesPlanned` payloads: 2 adds a stage's
    /// `auto` parallelism (written only when a stage is `auto`).
    pub const STAGES_PLANNED: u16 = 2;
    /// Schema version of `JobCancelled` payloads.
    pub const JOB_CANCELLED: u16 = 1;
}

/// File name of the segment written by coordinator attempt `attempt`.
#[must_use]
pub fn segment_file_name(attempt: u32) -> String {
    format!("{SEGMENT_PREFIX}{attempt:08}{SEGMENT_SUFFIX}")
}

/// The attempt encoded in a segment file name, or `None` if `name` is not
/// exactly `segment-<8 digits>.log`.
#[must_use]
pub fn parse_segment_file_name(name: &str) -> Option<u32> {
    let digits = name
        .strip_prefix(SEGMENT_PREFIX)?
        .strip_suffix(SEGMENT_SUFFIX)?;
    if digits.len() != 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// File name of the `number`-th snapshot side file written by coordinator
/// attempt `attempt`.
#[must_use]
pub fn snapshot_file_name(attempt: u32, number: u32) -> String {
    format!("{SNAPSHOT_FILE_PREFIX}{attempt:08}-{number:08}{SNAPSHOT_FILE_SUFFIX}")
}

/// True if `name` is exactly `snapshot-<8 digits>-<8 digits>.state` (so a
/// name read from a record can never leave the log directory).
#[must_use]
pub fn is_snapshot_file_name(name: &str) -> bool {
    let Some(middle) = name
        .strip_prefix(SNAPSHOT_FILE_PREFIX)
        .and_then(|n| n.strip_suffix(SNAPSHOT_FILE_SUFFIX))
    else {
        return false;
    };
    let bytes = middle.as_bytes();
    bytes.len() == 17
        && bytes[8] == b'-'
        && bytes
            .iter()
            .enumerate()
            .all(|(i, b)| i == 8 || b.is_ascii_digit())
}

/// An older segment as sealed by a newer segment's header: replay reads it
/// only up to `valid_len` bytes (header included).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct SealedSegment {
    /// Coordinator attempt that wrote the older segment.
    pub attempt: u32,
    /// Bytes of it that hold the header and whole records; later bytes are ignored forever.
    pub valid_len: u64,
}

/// A decoded segment header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentHeader {
    /// Format version found in the header.
    pub format_version: u16,
    /// Coordinator attempt that wrote this segment.
    pub attempt: u32,
    /// Every older segment with its sealed valid length, oldest first.
    pub sealed: Vec<SealedSegment>,
}

impl SegmentHeader {
    /// Size in bytes of this header on disk.
    #[must_use]
    pub fn encoded_len(&self) -> usize {
        header_len(self.sealed.len())
    }
}

/// On-disk size of a header that seals `sealed_count` older segments.
#[must_use]
pub const fn header_len(sealed_count: usize) -> usize {
    HEADER_FIXED_LEN + sealed_count * SEALED_ENTRY_LEN + HEADER_CRC_LEN
}

/// Encodes a version-[`FORMAT_VERSION`] header for `attempt`, sealing `sealed`.
#[must_use]
pub fn encode_header(attempt: u32, sealed: &[SealedSegment]) -> Vec<u8> {
    let mut out = Vec::with_capacity(header_len(sealed.len()));
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&attempt.to_le_bytes());
    let count = u32::try_from(sealed.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&count.to_le_bytes());
    for entry in sealed {
        out.extend_from_slice(&entry.attempt.to_le_bytes());
        out.extend_from_slice(&entry.valid_len.to_le_bytes());
    }
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// Why a header could not be decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HeaderProblem {
    /// Fewer bytes than the header needs.
    Short {
        /// Bytes the header needs.
        needed: usize,
    },
    /// The magic is not [`MAGIC`].
    BadMagic,
    /// The checksum does not match.
    Checksum,
    /// The format version is newer than [`FORMAT_VERSION`] (or zero).
    Version(u16),
    /// Reserved flags are not zero.
    Flags(u16),
    /// The sealed-segment count is beyond [`MAX_SEALED_SEGMENTS`].
    SealedCount(u32),
}

/// Decodes the header at the start of `bytes`.
///
/// # Errors
/// A [`HeaderProblem`] saying what is wrong; the magic is checked first,
/// then the checksum, then the version, so a damaged header is reported as
/// damage and only an intact newer header as a newer version.
pub fn decode_header(bytes: &[u8]) -> Result<SegmentHeader, HeaderProblem> {
    if bytes.len() < HEADER_FIXED_LEN + HEADER_CRC_LEN {
        return Err(HeaderProblem::Short {
            needed: header_len(0),
        });
    }
    if bytes[HEADER_MAGIC_OFFSET..HEADER_MAGIC_OFFSET + MAGIC.len()] != MAGIC {
        return Err(HeaderProblem::BadMagic);
    }
    let count = read_u32(bytes, HEADER_SEALED_COUNT_OFFSET);
    if count > MAX_SEALED_SEGMENTS {
        return Err(HeaderProblem::SealedCount(count));
    }
    let len = header_len(count as usize);
    if bytes.len() < len {
        return Err(HeaderProblem::Short { needed: len });
    }
    let body = len - HEADER_CRC_LEN;
    if crc32c::crc32c(&bytes[..body]) != read_u32(bytes, body) {
        return Err(HeaderProblem::Checksum);
    }
    let format_version = read_u16(bytes, HEADER_VERSION_OFFSET);
    if format_version == 0 || format_version > FORMAT_VERSION {
        return Err(HeaderProblem::Version(format_version));
    }
    let flags = read_u16(bytes, HEADER_FLAGS_OFFSET);
    if flags != 0 {
        return Err(HeaderProblem::Flags(flags));
    }
    let sealed = (0..count as usize)
        .map(|i| {
            let at = HEADER_FIXED_LEN + i * SEALED_ENTRY_LEN;
            SealedSegment {
                attempt: read_u32(bytes, at),
                valid_len: read_u64(bytes, at + 4),
            }
        })
        .collect();
    Ok(SegmentHeader {
        format_version,
        attempt: read_u32(bytes, HEADER_ATTEMPT_OFFSET),
        sealed,
    })
}

/// Makes a record frame of `buf` in place: `buf` holds [`FRAME_HEAD_LEN`]
/// bytes (any value), then the payload; the head (length, kind, version)
/// is written over them and the CRC32C appended. The same bytes as
/// [`encode_frame`], without copying the payload (issue 29: a shuffle
/// master's snapshot of a million partitions is tens of megabytes).
///
/// The caller checks that the payload is at most `MAX_PAYLOAD_LEN` bytes first.
#[must_use]
pub fn seal_frame(mut buf: Vec<u8>, kind: u16, version: u16) -> Vec<u8> {
    let payload = buf.len().saturating_sub(FRAME_HEAD_LEN);
    let len = u32::try_from(payload).unwrap_or(u32::MAX);
    buf[0..4].copy_from_slice(&len.to_le_bytes());
    buf[4..6].copy_from_slice(&kind.to_le_bytes());
    buf[6..8].copy_from_slice(&version.to_le_bytes());
    let crc = crc32c::crc32c(&buf);
    buf.reserve_exact(FRAME_CRC_LEN);
    buf.extend_from_slice(&crc.to_le_bytes());
    buf
}

/// Appends one record frame (length, kind, version, payload, CRC32C) to `out`.
///
/// The caller checks `payload.len() <= MAX_PAYLOAD_LEN` first.
pub fn encode_frame(out: &mut Vec<u8>, kind: u16, version: u16, payload: &[u8]) {
    let start = out.len();
    let len = u32::try_from(payload.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&kind.to_le_bytes());
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(payload);
    let crc = crc32c::crc32c(&out[start..]);
    out.extend_from_slice(&crc.to_le_bytes());
}

/// A whole, checksum-verified frame found in a byte slice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame<'a> {
    /// Event kind id.
    pub kind: u16,
    /// Schema version of the payload.
    pub version: u16,
    /// The payload bytes.
    pub payload: &'a [u8],
    /// Bytes the whole frame occupies.
    pub frame_len: usize,
}

/// Why no whole frame starts at an offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameProblem {
    /// Fewer bytes remain than the frame head or its claimed length needs.
    Incomplete,
    /// The length field exceeds [`MAX_PAYLOAD_LEN`].
    TooLong(u32),
    /// The checksum does not match the bytes.
    Checksum,
}

/// Decodes the frame at the start of `bytes` (which may run past it).
///
/// # Errors
/// A [`FrameProblem`] when no whole, checksum-valid frame starts there.
pub fn decode_frame(bytes: &[u8]) -> Result<Frame<'_>, FrameProblem> {
    if bytes.len() < FRAME_HEAD_LEN {
        return Err(FrameProblem::Incomplete);
    }
    let len = read_u32(bytes, FRAME_LEN_OFFSET);
    if len > MAX_PAYLOAD_LEN {
        return Err(FrameProblem::TooLong(len));
    }
    let frame_len = FRAME_OVERHEAD + len as usize;
    if bytes.len() < frame_len {
        return Err(FrameProblem::Incomplete);
    }
    let body = frame_len - FRAME_CRC_LEN;
    if crc32c::crc32c(&bytes[..body]) != read_u32(bytes, body) {
        return Err(FrameProblem::Checksum);
    }
    Ok(Frame {
        kind: read_u16(bytes, FRAME_KIND_OFFSET),
        version: read_u16(bytes, FRAME_VERSION_OFFSET),
        payload: &bytes[FRAME_HEAD_LEN..body],
        frame_len,
    })
}

/// How many frames `bytes` holds from its start, by their heads alone (no
/// checksum): an upper bound on the records a scan will decode, for sizing
/// its list (issue 29). Stops at the first head whose kind this binary
/// does not know, whose length is too large or runs past the end: the
/// zeros a torn tail often is (a file that grew before its data reached
/// the disk) would otherwise count as a chain of empty frames.
#[must_use]
pub fn count_frames(bytes: &[u8]) -> usize {
    let mut offset = 0;
    let mut frames = 0;
    while let Some(head) = bytes.get(offset..offset + FRAME_HEAD_LEN) {
        let len = read_u32(head, FRAME_LEN_OFFSET);
        let kind = read_u16(head, FRAME_KIND_OFFSET);
        if len > MAX_PAYLOAD_LEN || !(kind::JOB_STARTED..=kind::NEWEST).contains(&kind) {
            break;
        }
        let next = offset + FRAME_OVERHEAD + len as usize;
        if next > bytes.len() {
            break;
        }
        frames += 1;
        offset = next;
    }
    frames
}

fn read_u16(bytes: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([bytes[at], bytes[at + 1]])
}

fn read_u32(bytes: &[u8], at: usize) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(b)
}

fn read_u64(bytes: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_counted_by_their_lengths_up_to_a_cut_or_overlong_one() {
        let mut bytes = Vec::new();
        for payload in [&b""[..], b"abc", &[7u8; 300]] {
            encode_frame(&mut bytes, 3, 1, payload);
        }
        assert_eq!(count_frames(&bytes), 3);
        assert_eq!(count_frames(&bytes[..bytes.len() - 1]), 2, "a cut frame");
        assert_eq!(count_frames(&[]), 0);
        let mut overlong = bytes.clone();
        let at = FRAME_OVERHEAD + FRAME_LEN_OFFSET;
        overlong[at..at + 4].copy_from_slice(&(MAX_PAYLOAD_LEN + 1).to_le_bytes());
        assert_eq!(
            count_frames(&overlong),
            1,
            "stops at a length past the limit"
        );
        let mut zeros = bytes.clone();
        zeros.extend_from_slice(&[0; 4096]);
        assert_eq!(
            count_frames(&zeros),
            3,
            "zeros after the frames are no frames"
        );
    }

    #[test]
    fn header_round_trips_with_its_sealed_table() {
        let sealed = [
            SealedSegment {
                attempt: 0,
                valid_len: 1234,
            },
            SealedSegment {
                attempt: 1,
                valid_len: u64::MAX,
            },
        ];
        let bytes = encode_header(2, &sealed);
        assert_eq!(bytes.len(), header_len(2));
        let header = decode_header(&bytes).expect("decodes");
        assert_eq!(header.attempt, 2);
        assert_eq!(header.sealed, sealed);
        assert_eq!(header.encoded_len(), bytes.len());
    }

    #[test]
    fn header_with_a_flipped_byte_is_refused() {
        let bytes = encode_header(
            7,
            &[SealedSegment {
                attempt: 3,
                valid_len: 99,
            }],
        );
        for i in 0..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[i] ^= 0x40;
            assert!(decode_header(&damaged).is_err(), "flip at {i} accepted");
        }
    }

    #[test]
    fn frame_round_trips_and_reports_each_problem() {
        let mut out = Vec::new();
        encode_frame(&mut out, kind::SINK_COMMITTED, 1, b"payload");
        let mut head = vec![0xAA; FRAME_HEAD_LEN];
        head.extend_from_slice(b"payload");
        assert_eq!(
            seal_frame(head, kind::SINK_COMMITTED, 1),
            out,
            "a frame sealed in place is the frame encoded"
        );
        assert_eq!(out.len(), FRAME_OVERHEAD + 7);
        let frame = decode_frame(&out).expect("decodes");
        assert_eq!(
            (frame.kind, frame.version, frame.payload),
            (5, 1, &b"payload"[..])
        );
        assert_eq!(
            decode_frame(&out[..out.len() - 1]),
            Err(FrameProblem::Incomplete)
        );
        let mut bad = out.clone();
        bad[9] ^= 1;
        assert_eq!(decode_frame(&bad), Err(FrameProblem::Checksum));
        let mut long = out;
        long[3] = 0xff;
        assert!(matches!(decode_frame(&long), Err(FrameProblem::TooLong(_))));
    }

    #[test]
    fn segment_names_parse_only_in_their_exact_shape() {
        assert_eq!(segment_file_name(42), "segment-00000042.log");
        assert_eq!(parse_segment_file_name("segment-00000042.log"), Some(42));
        assert_eq!(parse_segment_file_name("segment-42.log"), None);
        assert_eq!(parse_segment_file_name("segment-00000042.log.tmp"), None);
        assert_eq!(parse_segment_file_name("segment-0000004x.log"), None);
    }

    #[test]
    fn snapshot_file_names_are_recognized_only_in_their_exact_shape() {
        let name = snapshot_file_name(3, 12);
        assert_eq!(name, "snapshot-00000003-00000012.state");
        assert!(is_snapshot_file_name(&name));
        assert!(!is_snapshot_file_name(
            "snapshot-00000003-00000012.state.tmp"
        ));
        assert!(!is_snapshot_file_name("snapshot-3-12.state"));
        assert!(!is_snapshot_file_name("../snapshot-00000003-0000001.state"));
        assert!(!is_snapshot_file_name("snapshot-0000000/-00000012.state"));
    }
}
