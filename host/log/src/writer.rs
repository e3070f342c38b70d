//! The event log writer: one segment per coordinator attempt, records
//! buffered and written in groups (group commit), fsynced per policy.
//!
//! Appending only encodes the event into an in-memory buffer and returns its
//! [`Sequence`]. A flush writes the whole buffer with one append and, under
//! [`FsyncPolicy::EveryFlush`], one fsync; flushes happen on an interval
//! (a background thread), when the buffer passes its limit, when the caller
//! asks (`flush`, at every job vertex completion), and when a caller waits
//! for an event to be durable. Flushes are serialized by one I/O lock taken
//! before the buffer is taken, so records reach the segment in append order.
//!
//! Any write or fsync failure is sticky: the writer stops writing, logs the
//! failure, and every later append, flush or wait returns
//! [`EventsError::WriteFailed`]; nothing is silently dropped.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use super::error::EventsError;
use super::event::JobEvent;
use super::format;
use super::reader::{self, Replay};
use super::storage::{SegmentAppender, Storage};

/// When a flush makes written records durable.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FsyncPolicy {
    /// fsync after every flush: a record is durable once its flush returns.
    #[default]
    EveryFlush,
    /// Never fsync: "durable" means handed to the operating system, which
    /// survives a process crash but not a power loss.
    Never,
}

/// How a writer batches and syncs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriterOptions {
    /// fsync policy.
    pub fsync: FsyncPolicy,
    /// Interval of the background flush; `None` flushes only when asked or
    /// when the buffer is full. Default 50 ms.
    pub flush_interval: Option<Duration>,
    /// Buffered bytes beyond which `append` flushes at once. Default 1 MiB.
    pub buffer_limit: usize,
}

impl Default for WriterOptions {
    fn default() -> Self {
        Self {
            fsync: FsyncPolicy::EveryFlush,
            flush_interval: Some(Duration::from_millis(50)),
            buffer_limit: 1 << 20,
        }
    }
}

/// Number of a record appended by one writer, from 0 in its segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Sequence(pub u64);

#[derive(Debug)]
struct State {
    buffer: Vec<u8>,
    /// Sequence the next appended record gets.
    next: u64,
    /// Records `[0, durable)` are durable.
    durable: u64,
    /// Bytes in the segment (header and records) known written.
    written_len: u64,
    failure: Option<Failure>,
    closing: bool,
}

/// A sticky write failure: where the failing write began, and why.
#[derive(Debug)]
struct Failure {
    offset: u64,
    source: Arc<std::io::Error>,
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    /// Signalled when records become durable, on failure and on close.
    changed: Condvar,
    /// Serializes flushes; taken before the buffer is taken.
    io: Mutex<Box<dyn SegmentAppender>>,
    segment: PathBuf,
    fsync: FsyncPolicy,
}

/// Appends job events to a new segment for this coordinator attempt.
///
/// Dropping the writer flushes what is buffered (a failure is logged);
/// [`EventLogWriter::close`] does the same and returns the error.
#[derive(Debug)]
pub struct EventLogWriter {
    shared: Arc<Shared>,
    flusher: Option<JoinHandle<()>>,
    attempt: u32,
    buffer_limit: usize,
    /// Snapshot side files written so far by this attempt (names them).
    snapshot_files: std::sync::atomic::AtomicU32,
    // Dropped after the segment is closed: keeps the lock (for file storage).
    storage: Arc<dyn Storage>,
}

impl EventLogWriter {
    /// Replays `storage` and opens a new segment sealing every existing one;
    /// see the binary's `events::open_job_log`. `storage` must be exclusively this writer's (a
    /// `FileStorage` opened for writing holds the lock).
    ///
    /// # Errors
    /// Replay errors; [`EventsError::Io`] if the segment cannot be created.
    pub fn open(
        storage: Arc<dyn Storage>,
        options: WriterOptions,
    ) -> Result<(Self, Replay), EventsError> {
        let replay = reader::replay(&*storage)?;
        Self::open_replayed(storage, replay, options)
    }

    /// As [`EventLogWriter::open`], with `replay` this storage's latest
    /// replay (made under its lock, or unchanged since: `events::open_job_log_after`).
    ///
    /// # Errors
    /// [`EventsError::Io`] if the segment cannot be created.
    pub fn open_replayed(
        storage: Arc<dyn Storage>,
        replay: Replay,
        options: WriterOptions,
    ) -> Result<(Self, Replay), EventsError> {
        let writer = Self::start_segment(storage, &replay, options)?;
        if let Some(torn) = &replay.torn_tail {
            // Once per coordinator attempt: the new segment seals the cut.
            tracing::warn!(
                segment = %torn.segment.display(),
                offset = torn.offset,
                bytes_dropped = torn.bytes_dropped,
                "cut a torn tail from the newest event log segment (a crash interrupted a write)"
            );
        }
        Ok((writer, replay))
    }

    /// Opens a new segment after `replay` (which must be this storage's
    /// latest replay), sealing the segments it saw at their valid lengths.
    ///
    /// # Errors
    /// [`EventsError::Io`] if the segment cannot be created.
    pub fn start_segment(
        storage: Arc<dyn Storage>,
        replay: &Replay,
        options: WriterOptions,
    ) -> Result<Self, EventsError> {
        let attempt = replay.next_attempt();
        let header = format::encode_header(attempt, &replay.seal_table());
        let segment = storage.segment_path(attempt);
        let appender =
            storage
                .create_segment(attempt, &header)
                .map_err(|source| EventsError::Io {
                    path: segment.clone(),
                    source,
                })?;
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                buffer: Vec::new(),
                next: 0,
                durable: 0,
                written_len: header.len() as u64,
                failure: None,
                closing: false,
            }),
            changed: Condvar::new(),
            io: Mutex::new(appender),
            segment,
            fsync: options.fsync,
        });
        let flusher = options.flush_interval.map(|interval| {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name(format!("event-log-flush-{attempt}"))
                .spawn(move || flush_loop(&shared, interval))
        });
        let flusher = match flusher.transpose() {
            Ok(handle) => handle,
            Err(source) => {
                return Err(EventsError::Io {
                    path: shared.segment.clone(),
                    source,
                });
            }
        };
        Ok(Self {
            shared,
            flusher,
            attempt,
            buffer_limit: options.buffer_limit,
            snapshot_files: std::sync::atomic::AtomicU32::new(0),
            storage,
        })
    }

    /// The coordinator attempt (epoch) this writer's segment belongs to.
    #[must_use]
    pub fn coordinator_attempt(&self) -> u32 {
        self.attempt
    }

    /// The segment this writer appends to.
    #[must_use]
    pub fn segment(&self) -> &Path {
        &self.shared.segment
    }

    /// The log directory (the segment's folder): where snapshot side files live.
    #[must_use]
    pub fn log_dir(&self) -> &Path {
        self.shared
            .segment
            .parent()
            .unwrap_or_else(|| Path::new("."))
    }

    /// Writes a batch snapshot `state` as a new side file of the log
    /// directory, durably (file and directory fsynced), and returns what
    /// the record that uses it must name. Call it before appending that
    /// record (`docs/log-format.md`, "Snapshot side files").
    ///
    /// # Errors
    /// [`EventsError::SnapshotFile`] if the file cannot be written.
    pub fn write_snapshot_file(
        &self,
        state: &[u8],
    ) -> Result<super::event::SnapshotFile, EventsError> {
        let number = self
            .snapshot_files
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format::snapshot_file_name(self.attempt, number);
        self.storage.write_side_file(&name, state)
    }

    /// The storage this writer's segment lives in (its side files too).
    #[must_use]
    pub fn storage(&self) -> &Arc<dyn Storage> {
        &self.storage
    }

    /// Removes a side file that a durable later snapshot superseded; a
    /// failure is logged (the file is then unused).
    pub fn remove_snapshot_file(&self, name: &str) {
        if format::is_snapshot_file_name(name) {
            self.storage.remove_side_file(name);
        }
    }

    /// Buffers `event` and returns its sequence; it becomes durable at a
    /// later flush. Flushes at once if the buffer passes its limit.
    ///
    /// # Errors
    /// [`EventsError::WriteFailed`] if any earlier write failed;
    /// [`EventsError::RecordTooLarge`] / [`EventsError::Encode`] if the
    /// event does not fit a record (nothing is buffered then).
    pub fn append(&self, event: &JobEvent) -> Result<Sequence, EventsError> {
        self.append_encoded(event.kind_id(), |out| {
            Ok((event.encode_payload_after(out)?, event.schema_version()))
        })
    }

    /// [`append`](Self::append) of a record of kind `kind_id` whose payload
    /// `encode` appends to the buffer it is given, returning the schema
    /// version it wrote (for a record encoded from where its data is kept,
    /// [`crate::encode_recovery_finished`], issue 29).
    ///
    /// # Errors
    /// As [`append`](Self::append).
    pub fn append_encoded(
        &self,
        kind_id: u16,
        encode: impl FnOnce(Vec<u8>) -> Result<(Vec<u8>, u16), postcard::Error>,
    ) -> Result<Sequence, EventsError> {
        let kind_name = crate::event::kind_name(kind_id).unwrap_or("?");
        // The frame is made where the payload is encoded (issue 29: a large
        // payload is not copied into a second buffer).
        let (frame, version) = encode(vec![0; format::FRAME_HEAD_LEN])
            .map_err(|source| EventsError::Encode { kind_name, source })?;
        debug_assert!(
            crate::event::max_known_version(kind_id)
                .is_some_and(|max| (1..=max).contains(&version)),
            "append_encoded: kind {kind_id} at version {version} is not one this binary writes"
        );
        // The encoder appends after the frame's head, never takes it away.
        let len = frame.len().saturating_sub(format::FRAME_HEAD_LEN);
        debug_assert_eq!(
            len + format::FRAME_HEAD_LEN,
            frame.len(),
            "the head was cut"
        );
        if len > format::MAX_PAYLOAD_LEN as usize {
            return Err(EventsError::RecordTooLarge {
                kind_name,
                len,
                max: format::MAX_PAYLOAD_LEN,
            });
        }
        let frame = format::seal_frame(frame, kind_id, version);
        let (sequence, full) = {
            let mut state = self.shared.lock_state();
            if let Some(failure) = &state.failure {
                return Err(self.shared.failed(failure));
            }
            if state.buffer.is_empty() {
                state.buffer = frame;
            } else {
                // Grown once to fit a large frame, not doubled past it.
                if frame.len() > state.buffer.capacity() - state.buffer.len()
                    && frame.len() >= self.buffer_limit
                {
                    state.buffer.reserve_exact(frame.len());
                }
                state.buffer.extend_from_slice(&frame);
            }
            let sequence = Sequence(state.next);
            state.next += 1;
            (sequence, state.buffer.len() >= self.buffer_limit)
        };
        if full {
            self.shared.flush()?;
        }
        Ok(sequence)
    }

    /// Writes every buffered record and, per policy, fsyncs (group commit).
    /// Call it at every job vertex completion.
    ///
    /// # Errors
    /// [`EventsError::WriteFailed`] if this or any earlier write failed.
    pub fn flush(&self) -> Result<(), EventsError> {
        self.shared.flush()
    }

    /// Returns once the record `sequence` is durable, flushing if needed.
    ///
    /// # Errors
    /// [`EventsError::WriteFailed`] if a write failed before it was durable.
    ///
    /// # Panics
    /// If `sequence` was not returned by this writer's `append`.
    pub fn wait_durable(&self, sequence: Sequence) -> Result<(), EventsError> {
        loop {
            {
                let state = self.shared.lock_state();
                assert!(
                    sequence.0 < state.next,
                    "sequence {} was never appended",
                    sequence.0
                );
                if state.durable > sequence.0 {
                    return Ok(());
                }
                if let Some(failure) = &state.failure {
                    return Err(self.shared.failed(failure));
                }
            }
            self.shared.flush()?;
        }
    }

    /// Appends `event` and returns only once it is durable: for events a
    /// later decision depends on (a snapshot, a sink commit).
    ///
    /// # Errors
    /// As [`append`](Self::append) and [`wait_durable`](Self::wait_durable).
    pub fn append_durable(&self, event: &JobEvent) -> Result<Sequence, EventsError> {
        let sequence = self.append(event)?;
        self.wait_durable(sequence)?;
        Ok(sequence)
    }

    /// [`append_encoded`](Self::append_encoded), returning once the record
    /// is durable.
    ///
    /// # Errors
    /// As [`append_durable`](Self::append_durable).
    pub fn append_encoded_durable(
        &self,
        kind_id: u16,
        encode: impl FnOnce(Vec<u8>) -> Result<(Vec<u8>, u16), postcard::Error>,
    ) -> Result<Sequence, EventsError> {
        let sequence = self.append_encoded(kind_id, encode)?;
        self.wait_durable(sequence)?;
        Ok(sequence)
    }

    /// Records `[0, n)` are durable; returns `n`.
    #[must_use]
    pub fn durable_count(&self) -> u64 {
        self.shared.lock_state().durable
    }

    /// Flushes what is buffered, stops the background flush and closes the
    /// segment (the lock is released when the storage is dropped).
    ///
    /// # Errors
    /// [`EventsError::WriteFailed`] if the final flush or any earlier write failed.
    pub fn close(mut self) -> Result<(), EventsError> {
        self.stop_flusher();
        self.shared.flush()
    }

    fn stop_flusher(&mut self) {
        self.shared.lock_state().closing = true;
        self.shared.changed.notify_all();
        if let Some(handle) = self.flusher.take()
            && handle.join().is_err()
        {
            tracing::error!(segment = %self.shared.segment.display(), "event log flush thread panicked");
        }
    }
}

impl Drop for EventLogWriter {
    fn drop(&mut self) {
        self.stop_flusher();
        if let Err(e) = self.shared.flush() {
            tracing::error!(error = %e, "event log writer dropped with records that could not be written");
        }
    }
}

impl Shared {
    fn failed(&self, failure: &Failure) -> EventsError {
        EventsError::WriteFailed {
            segment: self.segment.clone(),
            offset: failure.offset,
            source: Arc::clone(&failure.source),
        }
    }

    fn lock_state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// One group commit: take the buffer under the I/O lock, write it, sync.
    fn flush(&self) -> Result<(), EventsError> {
        let mut io = self.io.lock().unwrap_or_else(PoisonError::into_inner);
        let (batch, upto, offset) = {
            let mut state = self.lock_state();
            if let Some(failure) = &state.failure {
                return Err(self.failed(failure));
            }
            if state.buffer.is_empty() {
                return Ok(());
            }
            (
                std::mem::take(&mut state.buffer),
                state.next,
                state.written_len,
            )
        };
        let result = io.append(&batch).and_then(|()| match self.fsync {
            FsyncPolicy::EveryFlush => io.sync(),
            FsyncPolicy::Never => Ok(()),
        });
        drop(io);
        let mut state = self.lock_state();
        let outcome = match result {
            Ok(()) => {
                state.durable = upto;
                state.written_len += batch.len() as u64;
                Ok(())
            }
            Err(source) => {
                let failure = Failure {
                    offset,
                    source: Arc::new(source),
                };
                let error = self.failed(&failure);
                tracing::error!(error = %error, "event log write failed; the writer refuses further events");
                state.failure = Some(failure);
                Err(error)
            }
        };
        drop(state);
        self.changed.notify_all();
        outcome
    }
}

fn flush_loop(shared: &Shared, interval: Duration) {
    loop {
        {
            let state = shared.lock_state();
            let (state, _) = shared
                .changed
                .wait_timeout_while(state, interval, |s| !s.closing)
                .unwrap_or_else(PoisonError::into_inner);
            if state.closing || state.failure.is_some() {
                return;
            }
        }
        // A failure is recorded in the state and reported to the next caller.
        let _failure_is_sticky = shared.flush();
    }
}
