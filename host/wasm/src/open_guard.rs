//! Opening files in granted directories without blocking the host.
//!
//! wasmtime-wasi's `wasi:filesystem/types` opens the path a guest names with
//! a plain blocking `open` on the thread that runs the guest (this host lets
//! WASI block the current thread, see `store.rs`). Opening a FIFO that
//! nobody writes waits in the kernel, where neither epoch interruption nor
//! the deadline-aware `wasi:io/poll` of `deadline.rs` reaches: the plugin
//! call would outlive its deadline, for as long as nobody writes (issue 24,
//! item 3). Reading a character device such as `/dev/zero` never ends.
//!
//! So the host replaces that interface's one opening function,
//! `[method]descriptor.open-at`, in its linkers (the rest of the interface
//! stays wasmtime-wasi's). The replacement keeps wasmtime-wasi's rules for
//! flags and permissions, and in addition:
//!
//! - looks at what the path names before opening it: a FIFO, a character
//!   or block device or a socket is refused without being opened (opening
//!   some devices has effects);
//! - opens with `O_NONBLOCK`, so even a FIFO swapped in after that look
//!   does not block the open;
//! - checks the open handle (`fstat`): anything but a regular file or a
//!   directory is closed again and refused; `O_NONBLOCK` is cleared on what
//!   is kept.
//!
//! A refusal is the WASI error `unsupported` for the guest and one warning
//! line on the host's log naming the plugin and the path (within the
//! plugin's line budget). What a guest can reach stays a subset of
//! wasmtime-wasi's: sandboxing of the path is `cap-std`'s, as there.

use std::io;
use std::sync::Arc;

use cap_fs_ext::{FileTypeExt as _, FollowSymlinks, OpenOptionsFollowExt, OpenOptionsSyncExt};
use wasmtime::StoreContextMut;
use wasmtime::component::{Linker, Resource};
use wasmtime_wasi::OpenMode;
use wasmtime_wasi::filesystem::{Descriptor, Dir as WasiDir, File as WasiFile};
use wasmtime_wasi::p2::bindings::sync::filesystem::types::{
    DescriptorFlags, ErrorCode, OpenFlags, PathFlags,
};

use super::store::{ALLOW_BLOCKING_CURRENT_THREAD, PluginState};

/// The interface whose `open-at` is replaced: the exact name under which
/// `wasmtime_wasi::p2::add_to_linker_sync` (wasmtime-wasi 48) defines it.
/// Guests importing an older 0.2 version are linked to it by semver.
const FILESYSTEM_TYPES: &str = "wasi:filesystem/types@0.2.12";

/// The function replaced.
const OPEN_AT: &str = "[method]descriptor.open-at";

/// Replaces `open-at` of `wasi:filesystem/types` in `linker` (which already
/// has WASI) with the non-blocking version.
///
/// # Errors
/// What wasmtime says when the function cannot be defined.
pub fn add_to_linker(linker: &mut Linker<PluginState>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let defined = linker.instance(FILESYSTEM_TYPES).and_then(|mut types| {
        types.func_wrap(
            OPEN_AT,
            |mut store: StoreContextMut<'_, PluginState>,
             (dir, path_flags, path, oflags, flags): (
                Resource<Descriptor>,
                PathFlags,
                String,
                OpenFlags,
                DescriptorFlags,
            )| {
                let state = store.data_mut();
                let opened = match state.table_mut().get(&dir)? {
                    Descriptor::Dir(d) => open_at(d, path_flags, &path, oflags, flags),
                    Descriptor::File(_) => Err(Refusal::Code(ErrorCode::NotDirectory)),
                };
                let result = match opened {
                    Ok(descriptor) => Ok(state.table_mut().push(descriptor)?),
                    Err(Refusal::Code(code)) => Err(code),
                    Err(Refusal::Special { what, at }) => {
                        if state.admit_line() {
                            tracing::warn!(
                                target: crate::LOG_TARGET,
                                plugin = &*state.plugin,
                                "refused to open {at}: it is {what}; plugins may open only regular files and directories in their grants"
                            );
                        }
                        Err(ErrorCode::Unsupported)
                    }
                };
                Ok((result,))
            },
        )
    });
    linker.allow_shadowing(false);
    defined
}

/// Why `open-at` did not open.
enum Refusal {
    /// A WASI error code, as wasmtime-wasi would have returned it.
    Code(ErrorCode),
    /// The path names a FIFO, a device or a socket.
    Special {
        /// What it is, e.g. `"a FIFO"`.
        what: &'static str,
        /// The path for the host's message (absolute when known).
        at: String,
    },
}

impl From<io::Error> for Refusal {
    fn from(e: io::Error) -> Self {
        // wasmtime-wasi's own mapping of OS errors to WASI error codes.
        let code = match wasmtime_wasi::p2::FsError::from(e).downcast() {
            Ok(code) => ErrorCode::from(code),
            Err(_) => ErrorCode::Io,
        };
        Self::Code(code)
    }
}

/// What a file of type `ft` is when the host does not lend it to plugins:
/// `None` for a regular file, a directory and a symbolic link (whose target
/// the open itself judges).
fn special(ft: cap_std::fs::FileType) -> Option<&'static str> {
    if ft.is_file() || ft.is_dir() || ft.is_symlink() {
        None
    } else if ft.is_fifo() {
        Some("a FIFO")
    } else if ft.is_char_device() {
        Some("a character device")
    } else if ft.is_block_device() {
        Some("a block device")
    } else if ft.is_socket() {
        Some("a socket")
    } else {
        Some("a special file")
    }
}

/// Opens `path` under the directory descriptor `dir` as wasmtime-wasi's
/// `open-at` does (same flags, same permission checks, same sandbox), but
/// never blocking and never handing out anything but a regular file or a
/// directory.
fn open_at(
    dir: &WasiDir,
    path_flags: PathFlags,
    path: &str,
    oflags: OpenFlags,
    flags: DescriptorFlags,
) -> Result<Descriptor, Refusal> {
    use Refusal::Code;
    let mut opts = cap_std::fs::OpenOptions::new();
    let mut mode = OpenMode::empty();
    let creates = oflags.contains(OpenFlags::CREATE);
    if creates {
        if oflags.contains(OpenFlags::EXCLUSIVE) {
            opts.create_new(true);
        } else {
            opts.create(true);
        }
        opts.write(true);
        mode |= OpenMode::WRITE;
    }
    if oflags.contains(OpenFlags::TRUNCATE) {
        opts.truncate(true).write(true);
        mode |= OpenMode::WRITE;
    }
    if flags.contains(DescriptorFlags::READ) {
        opts.read(true);
        mode |= OpenMode::READ;
    }
    if flags.contains(DescriptorFlags::WRITE) {
        opts.write(true);
        mode |= OpenMode::WRITE;
    } else {
        // Opened for reading when not for writing, as wasmtime-wasi does: the
        // descriptor's permissions refuse what the mode does not allow.
        opts.read(true);
        mode |= OpenMode::READ;
    }
    let follow = path_flags.contains(PathFlags::SYMLINK_FOLLOW);
    opts.follow(if follow {
        FollowSymlinks::Yes
    } else {
        FollowSymlinks::No
    });
    opts.nonblock(true);
    if flags.intersects(
        DescriptorFlags::FILE_INTEGRITY_SYNC
            | DescriptorFlags::DATA_INTEGRITY_SYNC
            | DescriptorFlags::REQUESTED_WRITE_SYNC,
    ) {
        return Err(Code(ErrorCode::Unsupported));
    }
    let wants_dir = oflags.contains(OpenFlags::DIRECTORY);
    if wants_dir
        && oflags.intersects(OpenFlags::CREATE | OpenFlags::EXCLUSIVE | OpenFlags::TRUNCATE)
    {
        return Err(Code(ErrorCode::Invalid));
    }
    if dir.perms.write_not_permitted() && (creates || mode.contains(OpenMode::WRITE)) {
        return Err(Code(ErrorCode::NotPermitted));
    }

    let base = cap_std::fs::Dir::from_std_file(dir.dir.try_clone()?);
    let refuse = |what| Refusal::Special {
        what,
        at: full_path(&dir.dir, path),
    };
    // Look first: a device is refused without being opened.
    let looked = if follow {
        base.metadata(path)
    } else {
        base.symlink_metadata(path)
    };
    if let Some(what) = looked.ok().and_then(|m| special(m.file_type())) {
        return Err(refuse(what));
    }
    let opened = base.open_with(path, &opts)?.into_std();
    let ft = opened.metadata()?.file_type();
    if !(ft.is_file() || ft.is_dir()) {
        return Err(refuse(coordhost_io::files::kind_of(&ft)));
    }
    coordhost_io::files::clear_nonblocking(&opened)?;
    if ft.is_dir() {
        Ok(Descriptor::Dir(WasiDir::new(
            opened,
            dir.perms,
            mode,
            ALLOW_BLOCKING_CURRENT_THREAD,
        )))
    } else if wants_dir {
        Err(Code(ErrorCode::NotDirectory))
    } else {
        Ok(Descriptor::File(WasiFile::new(
            opened,
            dir.perms,
            mode,
            ALLOW_BLOCKING_CURRENT_THREAD,
        )))
    }
}

/// `path` under the directory open as `dir`, for the host's message: the
/// directory's own path from `/proc/self/fd` when there is one (a grant's
/// paths are the same for the host and the guest), else `path` alone.
fn full_path(dir: &Arc<std::fs::File>, path: &str) -> String {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd as _;
        if let Ok(at) = std::fs::read_link(format!("/proc/self/fd/{}", dir.as_raw_fd())) {
            return at.join(path).display().to_string();
        }
    }
    let _ = dir;
    path.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmtime_wasi::FsPerms;

    use coordhost_io::files::test_support::mkfifo;

    fn granted(dir: &std::path::Path, perms: FsPerms) -> WasiDir {
        let opened = std::fs::File::open(dir).expect("open the grant");
        WasiDir::new(opened, perms, OpenMode::READ | OpenMode::WRITE, true)
    }

    fn open(dir: &WasiDir, path: &str, flags: DescriptorFlags) -> Result<Descriptor, Refusal> {
        open_at(
            dir,
            PathFlags::SYMLINK_FOLLOW,
            path,
            OpenFlags::empty(),
            flags,
        )
    }

    #[test]
    fn a_fifo_is_refused_at_once_whether_read_or_written_and_a_file_opens() {
        coordhost_io::files::test_support::within_deadline(|| {
            let tmp = tempfile::tempdir().expect("tempdir");
            std::fs::write(tmp.path().join("file"), "x").expect("write");
            std::fs::create_dir(tmp.path().join("sub")).expect("mkdir");
            mkfifo(&tmp.path().join("fifo"));
            std::os::unix::fs::symlink("fifo", tmp.path().join("to-fifo")).expect("symlink");
            let dir = granted(tmp.path(), FsPerms::ReadWrite);
            let started = std::time::Instant::now();
            for path in ["fifo", "to-fifo"] {
                for flags in [DescriptorFlags::READ, DescriptorFlags::WRITE] {
                    match open(&dir, path, flags) {
                        Err(Refusal::Special { what, at }) => {
                            assert_eq!(what, "a FIFO");
                            assert!(at.ends_with(path), "{at}");
                        }
                        Err(Refusal::Code(c)) => panic!("{path}: code {c:?}, not a refusal"),
                        Ok(_) => panic!("{path} was opened"),
                    }
                }
            }
            assert!(started.elapsed() < std::time::Duration::from_secs(5));
            assert!(matches!(
                open(&dir, "file", DescriptorFlags::READ),
                Ok(Descriptor::File(_))
            ));
            assert!(matches!(
                open(&dir, "sub", DescriptorFlags::READ),
                Ok(Descriptor::Dir(_))
            ));
            assert!(matches!(
                open(&dir, "missing", DescriptorFlags::READ),
                Err(Refusal::Code(ErrorCode::NoEntry))
            ));
        });
    }

    #[test]
    fn the_flags_and_permissions_of_wasmtime_wasi_still_hold() {
        coordhost_io::files::test_support::within_deadline(|| {
            let tmp = tempfile::tempdir().expect("tempdir");
            std::fs::write(tmp.path().join("file"), "x").expect("write");
            let ro = granted(tmp.path(), FsPerms::ReadOnly);
            assert!(matches!(
                open(&ro, "file", DescriptorFlags::WRITE),
                Err(Refusal::Code(ErrorCode::NotPermitted))
            ));
            assert!(matches!(
                open_at(
                    &ro,
                    PathFlags::empty(),
                    "new",
                    OpenFlags::CREATE,
                    DescriptorFlags::READ
                ),
                Err(Refusal::Code(ErrorCode::NotPermitted))
            ));
            let rw = granted(tmp.path(), FsPerms::ReadWrite);
            assert!(matches!(
                open_at(
                    &rw,
                    PathFlags::empty(),
                    "file",
                    OpenFlags::DIRECTORY,
                    DescriptorFlags::READ
                ),
                Err(Refusal::Code(ErrorCode::NotDirectory))
            ));
            assert!(matches!(
                open_at(
                    &rw,
                    PathFlags::empty(),
                    "file",
                    OpenFlags::CREATE | OpenFlags::EXCLUSIVE,
                    DescriptorFlags::WRITE
                ),
                Err(Refusal::Code(ErrorCode::Exist))
            ));
            assert!(matches!(
                open(&rw, "../escape", DescriptorFlags::READ),
                Err(Refusal::Code(_))
            ));
            std::os::unix::fs::symlink("file", tmp.path().join("link")).expect("symlink");
            assert!(matches!(
                open_at(
                    &rw,
                    PathFlags::empty(),
                    "link",
                    OpenFlags::empty(),
                    DescriptorFlags::READ
                ),
                Err(Refusal::Code(ErrorCode::Loop))
            ));
            let Ok(Descriptor::File(f)) = open(&rw, "file", DescriptorFlags::READ) else {
                panic!("file opens");
            };
            let flags = rustix::fs::fcntl_getfl(&*f.file).expect("flags");
            assert!(!flags.contains(rustix::fs::OFlags::NONBLOCK));
        });
    }
}
