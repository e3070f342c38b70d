//! Reading files the user names (the job file, a plugin's component): only
//! regular files, with a size bound checked before a byte is read, so that
//! `/dev/zero`, a FIFO or a 2 GB file is refused in one line instead of
//! filling memory or blocking (docs/job-file.md, "Rules and their messages").

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

/// Opens `path` for reading if it is a regular file no larger than
/// `max_bytes`; returns the file and its length in bytes.
///
/// The kind of file is checked before it is opened, so a FIFO never blocks
/// the caller, and again on the open handle.
///
/// # Errors
///
/// The OS error of `metadata`/`open`, or an error of kind `InvalidInput`
/// saying the path is a directory, a device, a FIFO or a socket, or of kind
/// `FileTooLarge` giving the size and the bound.
pub fn open_regular_file(path: &Path, max_bytes: u64) -> std::io::Result<(File, u64)> {
    check_kind(&std::fs::metadata(path)?)?;
    let file = File::open(path)?;
    let meta = file.metadata()?;
    check_kind(&meta)?;
    if meta.len() > max_bytes {
        return Err(std::io::Error::new(
            std::io::ErrorKind::FileTooLarge,
            format!(
                "the file has {} bytes, more than the limit of {max_bytes}",
                meta.len()
            ),
        ));
    }
    Ok((file, meta.len()))
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
    file.by_ref().take(left + 1).read_to_end(&mut bytes)?;
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
    let (mut file, _) = open_regular_file(path, MAX_JOB_FILE_BYTES)?;
    let bytes = read_rest(&mut file, Vec::new(), MAX_JOB_FILE_BYTES)?;
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
    let what = if ft.is_dir() {
        "a directory"
    } else {
        special_kind(&ft)
    };
    Err(std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        format!("it is {what}, not a regular file"),
    ))
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
