//! Reading files the user names (the job file, a plugin's component, a
//! `plugin call` script) or that the disk hands the host (the event log's
//! segments and snapshot side files): only regular files, with a size bound
//! checked before a byte is read, so that `/dev/zero`, a FIFO or a 2 GB file
//! is refused in one line instead of filling memory or blocking
//! (docs/job-file.md, "Rules and their messages").
//!
//! No open here blocks: a file is opened with `O_NONBLOCK`, so opening a
//! FIFO that nobody writes returns at once, its kind is checked on the open
//! handle (`fstat`), and the flag is cleared again on a regular file before
//! it is read. [`nonblocking_regular`] does the last two steps for a file
//! opened elsewhere (`crate::grant`, the plugin host's WASI file system).

use std::fs::File;
use std::io::Read as _;
use std::path::Path;

/// Largest job file accepted, bytes (4 MiB; the examples are a few KiB).
pub const MAX_JOB_FILE_BYTES: u64 = 4 * 1024 * 1024;

/// Largest component file accepted, bytes (256 MiB; the Python sample
/// plugins, the largest, are about 18 MiB).
pub const MAX_COMPONENT_BYTES: u64 = 256 * 1024 * 1024;

/// Length of the preamble a WebAssembly component starts with (magic and
/// version), read before the rest of the file.
pub const PREAMBLE_BYTES: usize = 8;

/// Largest `plugin call --steps @FILE` script accepted, bytes (1 MiB).
pub const MAX_SCRIPT_BYTES: u64 = 1024 * 1024;

/// Opens `path` for reading if it is a regular file no larger than
/// `max_bytes`; returns the file and its length in bytes. Symbolic links
/// are followed (the user named the path).
///
/// The kind of file is checked before it is opened (opening some devices
/// has effects), the open itself never blocks (`O_NONBLOCK`: a FIFO that
/// nobody writes), and the kind is checked again on the open handle, so a
/// FIFO swapped in between is refused too.
///
/// # Errors
///
/// The OS error of `metadata`/`open`, or an error of kind `InvalidInput`
/// saying the path is a directory, a device, a FIFO or a socket, or of kind
/// `FileTooLarge` giving the size and the bound.
pub fn open_regular_file(path: &Path, max_bytes: u64) -> std::io::Result<(File, u64)> {
    check_kind(&std::fs::metadata(path)?)?;
    let file = nonblocking_regular(open_nonblocking(path)?)?;
    let len = file.metadata()?.len();
    if len > max_bytes {
        return Err(std::io::Error::new(
            std::io::ErrorKind::FileTooLarge,
            format!("the file has {len} bytes, more than the limit of {max_bytes}"),
        ));
    }
    Ok((file, len))
}

/// Checks on the open handle `file` (opened with `O_NONBLOCK`) that it is a
/// regular file, and clears `O_NONBLOCK` so that it reads as usual.
///
/// # Errors
///
/// The OS error of `fstat`/`fcntl`, or an error of kind `InvalidInput`
/// saying what the file is instead (a directory, a FIFO, a device, a
/// socket).
pub fn nonblocking_regular(file: File) -> std::io::Result<File> {
    check_kind(&file.metadata()?)?;
    clear_nonblocking(&file)?;
    Ok(file)
}

/// Reads the whole regular file at `path`, at most `max_bytes` (see
/// [`open_regular_file`]).
///
/// # Errors
///
/// As [`open_regular_file`] and [`read_rest`].
pub fn read_regular_file(path: &Path, max_bytes: u64) -> std::io::Result<Vec<u8>> {
    let (mut file, len) = open_regular_file(path, max_bytes)?;
    // Room for the length `fstat` gave: `read_rest` reads through `take`,
    // which hides the file's size from `read_to_end`, so an empty buffer
    // grew by doubling (a 146 MiB event-log segment took a 256 MiB buffer
    // and every copy on the way; issue 29).
    // Only room: a length that cannot be had (a sparse or damaged file)
    // leaves the buffer to grow as it is read, as before.
    let mut bytes = Vec::new();
    let _unreserved = bytes.try_reserve_exact(usize::try_from(len).unwrap_or(0));
    read_rest(&mut file, bytes, max_bytes)
}

#[cfg(unix)]
fn open_nonblocking(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let nonblock = rustix::fs::OFlags::NONBLOCK.bits();
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(i32::try_from(nonblock).unwrap_or(0))
        .open(path)
}

#[cfg(not(unix))]
fn open_nonblocking(path: &Path) -> std::io::Result<File> {
    File::open(path)
}

/// Clears `O_NONBLOCK` on `file` (a no-op when it is not set).
///
/// # Errors
///
/// The OS error of `fcntl`.
#[cfg(unix)]
pub fn clear_nonblocking(file: &impl std::os::fd::AsFd) -> std::io::Result<()> {
    use rustix::fs::{OFlags, fcntl_getfl, fcntl_setfl};
    let flags = fcntl_getfl(file)?;
    if flags.contains(OFlags::NONBLOCK) {
        fcntl_setfl(file, flags - OFlags::NONBLOCK)?;
    }
    Ok(())
}

/// Clears `O_NONBLOCK` on `file` (nothing to do off Unix).
///
/// # Errors
///
/// None.
#[cfg(not(unix))]
pub fn clear_nonblocking<F>(_file: &F) -> std::io::Result<()> {
    Ok(())
}

/// Reads at most `n` bytes from the start of `file` (fewer at its end).
///
/// # Errors
///
/// The OS error of the read.
pub fn read_head(file: &mut File, n: usize) -> std::io::Result<Vec<u8>> {
    let mut head = Vec::with_capacity(n);
    file.by_ref().take(n as u64).read_to_end(&mut head)?;
    Ok(head)
}

/// Reads the rest of `file` after `head` (which was read from it), never
/// more than `max_bytes` in all, even if the file grew since it was opened.
///
/// # Errors
///
/// The OS error of the read, or `FileTooLarge` when the file grew past
/// `max_bytes`.
pub fn read_rest(file: &mut File, head: Vec<u8>, max_bytes: u64) -> std::io::Result<Vec<u8>> {
    let mut bytes = head;
    let left = max_bytes.saturating_sub(bytes.len() as u64);
    file.by_ref()
        .take(left.saturating_add(1))
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max_bytes {
        return Err(std::io::Error::new(
            std::io::ErrorKind::FileTooLarge,
            format!("the file grew past the limit of {max_bytes} bytes while it was read"),
        ));
    }
    Ok(bytes)
}

/// Reads the whole job file at `path` as UTF-8 text, bounded by
/// [`MAX_JOB_FILE_BYTES`].
///
/// # Errors
///
/// As [`open_regular_file`]; `InvalidData` for text that is not UTF-8.
pub fn read_job_text(path: &Path) -> std::io::Result<String> {
    read_text_file(path, MAX_JOB_FILE_BYTES)
}

/// Reads the whole regular file at `path` as UTF-8 text, at most
/// `max_bytes`.
///
/// # Errors
///
/// As [`open_regular_file`]; `InvalidData` for text that is not UTF-8.
pub fn read_text_file(path: &Path, max_bytes: u64) -> std::io::Result<String> {
    let bytes = read_regular_file(path, max_bytes)?;
    String::from_utf8(bytes).map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "the file is not UTF-8 text",
        )
    })
}

fn check_kind(meta: &std::fs::Metadata) -> std::io::Result<()> {
    let ft = meta.file_type();
    if ft.is_file() {
        return Ok(());
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        format!("it is {}, not a regular file", kind_of(&ft)),
    ))
}

/// What a file of type `ft` is, for messages: `"a regular file"`,
/// `"a directory"`, `"a FIFO"`, `"a character device"`, ...
pub fn kind_of(ft: &std::fs::FileType) -> &'static str {
    if ft.is_file() {
        "a regular file"
    } else if ft.is_dir() {
        "a directory"
    } else if ft.is_symlink() {
        "a symbolic link"
    } else {
        special_kind(ft)
    }
}

#[cfg(unix)]
fn special_kind(ft: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt as _;
    if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_block_device() {
        "a block device"
    } else if ft.is_socket() {
        "a socket"
    } else {
        "a special file"
    }
}

#[cfg(not(unix))]
fn special_kind(_: &std::fs::FileType) -> &'static str {
    "a special file"
}

/// Helpers for the unit tests of every floor that put special files where
/// the host expects regular ones.
#[cfg(any(test, feature = "test-support"))]
pub mod test_support {
    use std::path::Path;
    use std::time::Duration;

    /// Longest a unit test that meets a FIFO may take.
    const LIMIT: Duration = Duration::from_secs(20);

    /// Creates a FIFO at `path` (mode 0600) that nobody opens.
    pub fn mkfifo(path: &Path) {
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            path,
            rustix::fs::Mode::from_raw_mode(0o600),
        )
        .unwrap_or_else(|e| panic!("mkfifo {}: {e}", path.display()));
    }

    /// Runs `body` on a thread of its own and returns what it returns (or
    /// re-raises its panic); fails the test when it has not ended within
    /// 20 s, so that a regression that blocks on a FIFO fails instead of
    /// hanging the test run (the blocked thread is left behind).
    pub fn within_deadline<T: Send + 'static>(body: impl FnOnce() -> T + Send + 'static) -> T {
        within(LIMIT, body)
    }

    /// [`within_deadline`] with another limit.
    pub fn within<T: Send + 'static>(
        limit: Duration,
        body: impl FnOnce() -> T + Send + 'static,
    ) -> T {
        let (done, ended) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            let _ = done.send(body());
        });
        match ended.recv_timeout(limit) {
            Ok(value) => value,
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => match thread.join() {
                Err(panic) => std::panic::resume_unwind(panic),
                Ok(()) => unreachable!("the body ended without sending"),
            },
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                panic!("blocked for more than {limit:?} (on a special file?)")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::OpenOptionsExt as _;

    use super::test_support::{mkfifo, within_deadline};
    use super::*;

    #[test]
    fn a_fifo_or_a_device_is_refused_without_blocking_and_a_file_is_read() {
        within_deadline(|| {
            let tmp = tempfile::tempdir().expect("tempdir");
            let fifo = tmp.path().join("fifo");
            mkfifo(&fifo);
            let err = read_regular_file(&fifo, 10).expect_err("a FIFO");
            assert_eq!(err.to_string(), "it is a FIFO, not a regular file");
            let err = read_regular_file(Path::new("/dev/zero"), u64::MAX).expect_err("a device");
            assert_eq!(
                err.to_string(),
                "it is a character device, not a regular file"
            );
            let file = tmp.path().join("file");
            std::fs::write(&file, "abc").expect("write");
            assert_eq!(read_regular_file(&file, u64::MAX).expect("read"), b"abc");
            let err = read_regular_file(&file, 2).expect_err("too large");
            assert_eq!(err.kind(), std::io::ErrorKind::FileTooLarge);
            // The open handle reads as usual: O_NONBLOCK is cleared.
            let (opened, len) = open_regular_file(&file, 3).expect("open");
            assert_eq!(len, 3);
            let flags = rustix::fs::fcntl_getfl(&opened).expect("flags");
            assert!(!flags.contains(rustix::fs::OFlags::NONBLOCK));
        });
    }

    #[test]
    fn a_large_file_is_read_into_a_buffer_of_its_size_not_a_doubled_one() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let file = tmp.path().join("segment");
        let len = (3 << 20) + 5;
        std::fs::write(&file, vec![7u8; len]).expect("write");
        let bytes = read_regular_file(&file, u64::MAX).expect("read");
        assert_eq!(bytes.len(), len);
        assert!(
            bytes.capacity() < len + 4096,
            "capacity {} for {len} bytes",
            bytes.capacity()
        );
    }

    #[test]
    fn a_fifo_swapped_in_after_the_look_is_refused_on_the_open_handle() {
        within_deadline(|| {
            let tmp = tempfile::tempdir().expect("tempdir");
            let fifo = tmp.path().join("fifo");
            mkfifo(&fifo);
            // The second check alone, as after a swap between look and open.
            let opened = open_nonblocking(&fifo).expect("a non-blocking open of a FIFO returns");
            let err = nonblocking_regular(opened).expect_err("refused");
            assert_eq!(err.to_string(), "it is a FIFO, not a regular file");
        });
    }

    #[test]
    fn the_deadline_guard_fails_a_blocked_body_and_passes_on_a_panic() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let fifo = tmp.path().join("fifo");
        mkfifo(&fifo);
        let reader = fifo.clone();
        let blocked = std::panic::catch_unwind(|| {
            super::test_support::within(std::time::Duration::from_millis(300), move || {
                // A blocking open of a FIFO nobody writes: what the guard is for.
                drop(File::open(&reader));
            });
        });
        // Release the blocked reader: a writer that opens without blocking.
        let writer = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(i32::try_from(rustix::fs::OFlags::NONBLOCK.bits()).unwrap_or(0))
            .open(&fifo);
        let message = blocked.expect_err("the guard fails the test");
        let text = message
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_default();
        assert!(text.contains("blocked for more than"), "{text}");
        assert!(writer.is_ok(), "the reader was still waiting: {writer:?}");
        let panicked = std::panic::catch_unwind(|| within_deadline(|| panic!("inner")));
        assert!(panicked.is_err());
    }
}
