//! Host-side file operations on paths that a plugin named: the location of
//! a shuffle descriptor (where the host writes, reads and deletes result
//! partitions) and the file of a `file-range` split (what a source reader
//! reads).
//!
//! Such a path is input from a stranger. The rule (stated for plugin authors
//! in `docs/write-a-plugin.md`): the host touches a path that a plugin named
//! only if it lies inside one of that plugin's writable grants (for reads:
//! any of its grants) after every symlink is resolved, and it never follows
//! a symlink when it creates, writes or deletes there.
//!
//! Every operation goes through a capability: the grant's root is opened as
//! a [`cap_std::fs::Dir`] and the rest of the path is resolved relative to
//! it, so a `..` or a symlink that leads out of the grant is refused by
//! `cap-std` itself. Directories the host creates, writes or deletes in are
//! opened one component at a time without following symlinks
//! ([`cap_fs_ext::DirExt::open_dir_nofollow`]), and files there are opened
//! with `O_NOFOLLOW`, so a symlink that a plugin plants (even inside its
//! grant, even while the host works there) is never followed.

use std::ffi::OsString;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use cap_fs_ext::{DirExt, FollowSymlinks, OpenOptionsFollowExt, OpenOptionsSyncExt};
use cap_std::ambient_authority;
use cap_std::fs::{Dir, OpenOptions};

/// A directory granted to a plugin (one entry of a job file's
/// `plugins.NAME.dirs`). The guest sees it at the same absolute path as the
/// host, so paths in splits and shuffle descriptors mean the same thing on
/// both sides.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DirGrant {
    /// The directory (absolute).
    pub host: PathBuf,
    /// Whether the plugin may create, write and delete in it.
    pub writable: bool,
}

/// Why the host refused, or failed, to touch a path a plugin named. Every
/// message names the plugin and the path.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GrantError {
    /// The path is not inside any grant of the needed kind.
    #[error(
        "plugin `{plugin}` named {}, which is outside every {access} directory granted to it ({grants})",
        path.display()
    )]
    Outside {
        /// The plugin's name in the job file.
        plugin: String,
        /// The path it named.
        path: PathBuf,
        /// `"writable"` or `"readable"`.
        access: &'static str,
        /// The grants of that kind, listed for the message (or `none`).
        grants: String,
    },
    /// The path is relative, or has `.` or `..` components.
    #[error(
        "plugin `{plugin}` named {}, which is not a plain absolute path (no `.` or `..` components)",
        path.display()
    )]
    NotPlain {
        /// The plugin's name in the job file.
        plugin: String,
        /// The path it named.
        path: PathBuf,
    },
    /// A component of the path is a symbolic link where the host creates,
    /// writes or deletes.
    #[error(
        "plugin `{plugin}` named {}, but {} is a symbolic link; the host never follows a symlink where it creates, writes or deletes",
        path.display(), link.display()
    )]
    Symlink {
        /// The plugin's name in the job file.
        plugin: String,
        /// The path it named.
        path: PathBuf,
        /// The component that is a symlink.
        link: PathBuf,
    },
    /// The path does not name a regular file (a device, a FIFO, a socket,
    /// a directory).
    #[error("plugin `{plugin}` named {}, which is {what}, not a regular file", path.display())]
    NotAFile {
        /// The plugin's name in the job file.
        plugin: String,
        /// The path it named.
        path: PathBuf,
        /// What it is instead, e.g. `"a FIFO"`, `"a directory"`.
        what: &'static str,
    },
    /// An `s3://` URL that is not plain or lies outside the plugin's store
    /// grants (docs/object-storage.md, "Grants for plugins"); `reason`
    /// starts with "plugin `NAME` named".
    #[error("{reason}")]
    Store {
        /// The plugin's name in the job file.
        plugin: String,
        /// The URL it named.
        path: PathBuf,
        /// The refusal, naming the plugin, the URL and its grants.
        reason: String,
    },
    /// The operation failed (including `cap-std` refusing a symlink or `..`
    /// that leads out of the grant).
    #[error("plugin `{plugin}` named {}: {source}", path.display())]
    Io {
        /// The plugin's name in the job file.
        plugin: String,
        /// The path it named.
        path: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
}

impl GrantError {
    /// Whether the path (or a directory on it) does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::Io { source, .. } if source.kind() == io::ErrorKind::NotFound)
    }

    /// The message without its leading "plugin `NAME` named ": for errors
    /// that name the plugin already (`broke the plugin contract: ...`).
    pub fn detail(&self) -> String {
        let text = self.to_string();
        let plugin = match self {
            Self::Outside { plugin, .. }
            | Self::NotPlain { plugin, .. }
            | Self::Symlink { plugin, .. }
            | Self::NotAFile { plugin, .. }
            | Self::Store { plugin, .. }
            | Self::Io { plugin, .. } => plugin,
        };
        text.strip_prefix(&format!("plugin `{plugin}` named "))
            .map_or_else(|| text.clone(), str::to_string)
    }

    /// The path the plugin named.
    pub fn path(&self) -> &Path {
        match self {
            Self::Outside { path, .. }
            | Self::NotPlain { path, .. }
            | Self::Symlink { path, .. }
            | Self::NotAFile { path, .. }
            | Self::Store { path, .. }
            | Self::Io { path, .. } => path,
        }
    }
}

/// The directories granted to one plugin (its `dirs` in the job file) and
/// its folders of object storage (`stores`), as the host checks the paths
/// and `s3://` URLs the plugin returns against them. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Grants {
    inner: Arc<GrantsInner>,
}

#[derive(Debug)]
struct GrantsInner {
    plugin: Arc<str>,
    dirs: Vec<DirGrant>,
    stores: Vec<crate::objstore::StoreGrant>,
}

impl Grants {
    /// The grants `dirs` of plugin `plugin`.
    pub fn new(plugin: &str, dirs: &[DirGrant]) -> Self {
        Self {
            inner: Arc::new(GrantsInner {
                plugin: Arc::from(plugin),
                dirs: dirs.to_vec(),
                stores: Vec::new(),
            }),
        }
    }

    /// The same grants with the store grants `stores` added.
    #[must_use]
    pub fn with_stores(self, stores: &[crate::objstore::StoreGrant]) -> Self {
        Self {
            inner: Arc::new(GrantsInner {
                plugin: self.inner.plugin.clone(),
                dirs: self.inner.dirs.clone(),
                stores: stores.to_vec(),
            }),
        }
    }

    /// The store grants.
    pub fn stores(&self) -> &[crate::objstore::StoreGrant] {
        &self.inner.stores
    }

    /// The object storage prefix `location` names (an `s3://` URL, as a
    /// shuffle master places a partition there), if it lies inside one of
    /// the plugin's **writable** store grants: where the host writes,
    /// reads and deletes that partition's objects.
    ///
    /// # Errors
    /// [`GrantError::Store`] naming the plugin, the URL and its grants when
    /// it is not a plain URL, lies outside every grant or only inside a
    /// read-only one.
    pub fn writable_object(
        &self,
        location: &Path,
    ) -> Result<crate::objstore::ObjectUrl, GrantError> {
        let text = location.to_string_lossy();
        crate::objstore::check_granted(self.plugin(), &self.inner.stores, &text, true, false)
            .map_err(|refusal| GrantError::Store {
                plugin: self.plugin().to_string(),
                path: location.to_path_buf(),
                reason: refusal.to_string(),
            })
    }

    /// The object an `s3://` `path` names, if it lies inside one of the
    /// plugin's store grants (`Ok(None)` for a path that is not a URL).
    fn locate_object(&self, path: &Path) -> Result<Option<crate::objstore::ObjectUrl>, GrantError> {
        let Some(text) = path.to_str().filter(|t| crate::objstore::is_object_url(t)) else {
            return Ok(None);
        };
        crate::objstore::check_granted(self.plugin(), &self.inner.stores, text, false, false)
            .map(Some)
            .map_err(|refusal| GrantError::Store {
                plugin: self.plugin().to_string(),
                path: path.to_path_buf(),
                reason: refusal.to_string(),
            })
    }

    /// Opens the object an `s3://` `path` names for reading, inside one of
    /// the plugin's store grants, with the host's client.
    ///
    /// # Errors
    /// [`GrantError::Store`] for a URL outside the grants (or not a URL),
    /// [`GrantError::Io`] when the store cannot read it.
    pub fn open_readable_object(
        &self,
        path: &Path,
    ) -> Result<crate::objstore::ObjectFile, GrantError> {
        let url = self.locate_object(path)?.ok_or_else(|| GrantError::Store {
            plugin: self.plugin().to_string(),
            path: path.to_path_buf(),
            reason: format!(
                "plugin `{}` named {}, which is not an s3:// URL",
                self.plugin(),
                path.display()
            ),
        })?;
        crate::objstore::ObjectFile::open(&url).map_err(|source| GrantError::Io {
            plugin: self.plugin().to_string(),
            path: path.to_path_buf(),
            source,
        })
    }

    /// The plugin's name.
    pub fn plugin(&self) -> &str {
        &self.inner.plugin
    }

    /// Finds the grant `path` lies in, lexically: `path` must be absolute,
    /// have no `.` or `..` components, and lie strictly below a grant's
    /// root (as the job file wrote it, or canonicalized). Returns the root
    /// and the relative rest.
    fn locate(&self, path: &Path, writable: bool) -> Result<(PathBuf, PathBuf), GrantError> {
        let plugin = self.plugin().to_string();
        let plain = path.is_absolute()
            && path
                .components()
                .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
        if !plain {
            return Err(GrantError::NotPlain {
                plugin,
                path: path.to_path_buf(),
            });
        }
        let candidates = self.inner.dirs.iter().filter(|g| g.writable || !writable);
        let below = |root: &Path| {
            path.strip_prefix(root)
                .ok()
                .filter(|rel| rel.components().next().is_some())
                .map(Path::to_path_buf)
        };
        for g in candidates.clone() {
            // The root as written first; canonicalized only when that
            // misses (each canonicalize is a `readlink` per component, and
            // recovery asks this for every partition, issue 29).
            let rel = below(&g.host).or_else(|| {
                std::fs::canonicalize(&g.host)
                    .ok()
                    .and_then(|root| below(&root))
            });
            if let Some(rel) = rel {
                return Ok((g.host.clone(), rel));
            }
        }
        let listed: Vec<String> = candidates.map(|g| g.host.display().to_string()).collect();
        Err(GrantError::Outside {
            plugin,
            path: path.to_path_buf(),
            access: if writable { "writable" } else { "readable" },
            grants: if listed.is_empty() {
                "none".into()
            } else {
                listed.join(", ")
            },
        })
    }

    /// Checks, without touching the file system, that `path` may be a
    /// directory the host creates, writes and deletes in: inside a writable
    /// grant. The symlink checks happen when the directory is used.
    ///
    /// # Errors
    /// [`GrantError::NotPlain`] or [`GrantError::Outside`].
    pub fn writable_dir(&self, path: &Path) -> Result<PluginDir, GrantError> {
        let (root, rel) = self.locate(path, true)?;
        Ok(PluginDir {
            plugin: self.inner.plugin.clone(),
            root,
            rel,
            path: path.to_path_buf(),
        })
    }

    /// Checks, without touching the file system, that `path` lies inside
    /// one of the plugin's grants (read-only or writable); an `s3://` URL
    /// inside one of its store grants.
    ///
    /// # Errors
    /// [`GrantError::NotPlain`], [`GrantError::Outside`] or
    /// [`GrantError::Store`].
    pub fn check_readable(&self, path: &Path) -> Result<(), GrantError> {
        if self.locate_object(path)?.is_some() {
            return Ok(());
        }
        self.locate(path, false).map(|_| ())
    }

    /// Opens the regular file `path` for reading, inside one of the
    /// plugin's grants after every symlink is resolved (symlinks that stay
    /// inside the grant are followed; `cap-std` refuses any that leave it).
    ///
    /// Never blocks on a FIFO or device: its kind is checked before the
    /// open, the open is `O_NONBLOCK`, and the kind is checked again on the
    /// open handle (a FIFO swapped in between is refused too).
    ///
    /// # Errors
    /// [`GrantError::NotPlain`], [`GrantError::Outside`],
    /// [`GrantError::NotAFile`] (a device, FIFO, socket or directory), or
    /// [`GrantError::Io`] (missing, or a symlink leading out of the grant).
    pub fn open_readable_file(&self, path: &Path) -> Result<std::fs::File, GrantError> {
        let (root, rel) = self.locate(path, false)?;
        let io = |source| GrantError::Io {
            plugin: self.plugin().to_string(),
            path: path.to_path_buf(),
            source,
        };
        let not_a_file = |what| GrantError::NotAFile {
            plugin: self.plugin().to_string(),
            path: path.to_path_buf(),
            what,
        };
        let dir = Dir::open_ambient_dir(&root, ambient_authority()).map_err(io)?;
        // Checked before opening too: opening some devices has effects.
        let ft = dir.metadata(&rel).map_err(io)?.file_type();
        if !ft.is_file() {
            return Err(not_a_file(kind_name(ft)));
        }
        let mut o = OpenOptions::new();
        o.read(true).nonblock(true);
        let file = dir.open_with(&rel, &o).map_err(io)?.into_std();
        let ft = file.metadata().map_err(io)?.file_type();
        if !ft.is_file() {
            return Err(not_a_file(crate::files::kind_of(&ft)));
        }
        crate::files::clear_nonblocking(&file).map_err(io)?;
        Ok(file)
    }

    /// Deletes the directory `path` and everything in it, if it lies inside
    /// a writable grant, without following any symlink (a symlink found
    /// inside is removed, not followed; a symlink on the way is refused).
    /// A path that does not exist is not an error.
    ///
    /// # Errors
    /// As [`Grants::writable_dir`] and [`PluginDir::remove_all`].
    pub fn remove_dir_all(&self, path: &Path) -> Result<(), GrantError> {
        self.writable_dir(path)?.remove_all()
    }
}

/// A directory inside one of a plugin's writable grants (or, for
/// [`PluginDir::host_chosen`], a directory the host picked itself). Holds
/// no open handle: each use opens the grant's root and walks down without
/// following symlinks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginDir {
    plugin: Arc<str>,
    root: PathBuf,
    /// Relative to `root`; at least one component, all `Normal`.
    rel: PathBuf,
    path: PathBuf,
}

impl PluginDir {
    /// A directory the host chose itself (tests, tools): `path`'s parent is
    /// the root, opened with the host's own authority.
    ///
    /// # Errors
    /// [`GrantError::NotPlain`] when `path` has no parent and file name.
    pub fn host_chosen(path: &Path) -> Result<Self, GrantError> {
        match (path.parent(), path.file_name()) {
            (Some(parent), Some(name)) => Ok(Self {
                plugin: Arc::from("(host)"),
                root: if parent.as_os_str().is_empty() {
                    PathBuf::from(".")
                } else {
                    parent.to_path_buf()
                },
                rel: PathBuf::from(name),
                path: path.to_path_buf(),
            }),
            _ => Err(GrantError::NotPlain {
                plugin: "(host)".into(),
                path: path.to_path_buf(),
            }),
        }
    }

    /// The path as the plugin named it (for messages and the event log).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The path below its grant's root: plain components only, at least
    /// one. A worker process keeps a partition at this path below its own
    /// partition root (`coordhost::remote`), never at the coordinator's.
    pub fn relative(&self) -> &Path {
        &self.rel
    }

    /// The plugin whose grant this is.
    pub fn plugin(&self) -> &str {
        &self.plugin
    }

    fn io(&self, source: io::Error) -> GrantError {
        GrantError::Io {
            plugin: self.plugin.to_string(),
            path: self.path.clone(),
            source,
        }
    }

    /// Opens `name` in `dir` as a directory without following a symlink,
    /// creating it first when `create` and it is missing.
    fn step(
        &self,
        dir: &Dir,
        name: &OsString,
        walked: &Path,
        create: bool,
    ) -> Result<Dir, GrantError> {
        match dir.symlink_metadata(name) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(GrantError::Symlink {
                    plugin: self.plugin.to_string(),
                    path: self.path.clone(),
                    link: self.root.join(walked),
                });
            }
            Ok(_) => {}
            Err(e) if create && e.kind() == io::ErrorKind::NotFound => match dir.create_dir(name) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(self.io(e)),
            },
            Err(e) => return Err(self.io(e)),
        }
        // `open_dir_nofollow` also refuses a symlink swapped in since the check above.
        dir.open_dir_nofollow(name).map_err(|e| {
            if matches!(dir.symlink_metadata(name), Ok(m) if m.file_type().is_symlink()) {
                GrantError::Symlink {
                    plugin: self.plugin.to_string(),
                    path: self.path.clone(),
                    link: self.root.join(walked),
                }
            } else {
                self.io(e)
            }
        })
    }

    /// The parent of the directory, walked to without following symlinks
    /// (created on the way when `create`), and the directory's own name.
    fn parent(&self, create: bool) -> Result<(Dir, OsString), GrantError> {
        let names: Vec<OsString> = self
            .rel
            .components()
            .map(|c| c.as_os_str().to_os_string())
            .collect();
        let (last, ancestors) = names.split_last().ok_or_else(|| GrantError::NotPlain {
            plugin: self.plugin.to_string(),
            path: self.path.clone(),
        })?;
        let mut dir =
            Dir::open_ambient_dir(&self.root, ambient_authority()).map_err(|e| self.io(e))?;
        let mut walked = PathBuf::new();
        for name in ancestors {
            walked.push(name);
            dir = self.step(&dir, name, &walked, create)?;
        }
        Ok((dir, last.clone()))
    }

    /// Creates the directory afresh (parents too), removing what an
    /// earlier try left there (an empty directory is kept), and returns it
    /// opened. No symlink is
    /// followed; one on the way is refused, one at the directory itself is
    /// removed (it is the plugin's, inside its grant).
    ///
    /// # Errors
    /// [`GrantError::Symlink`] or [`GrantError::Io`].
    pub fn create_fresh(&self) -> Result<Dir, GrantError> {
        let (parent, name) = self.parent(true)?;
        // An empty directory is already fresh: it is kept (a shuffle master
        // that makes its partition's folder when it places it would
        // otherwise have it removed and made again by every attempt: two
        // of the costliest calls of a tiny task on ext4, issue 29).
        if let Ok(dir) = self.step(&parent, &name, &self.rel, false)
            && dir.entries().is_ok_and(|mut e| e.next().is_none())
        {
            return Ok(dir);
        }
        match parent.remove_dir_all(&name) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(self.io(e)),
        }
        parent.create_dir(&name).map_err(|e| self.io(e))?;
        self.step(&parent, &name, &self.rel, false)
    }

    /// Opens the existing directory without following symlinks.
    ///
    /// # Errors
    /// [`GrantError::Symlink`], or [`GrantError::Io`] (see
    /// [`GrantError::is_not_found`]).
    pub fn open(&self) -> Result<Dir, GrantError> {
        let (parent, name) = self.parent(false)?;
        self.step(&parent, &name, &self.rel, false)
    }

    /// Deletes the directory and everything in it without following a
    /// symlink; missing is fine.
    ///
    /// # Errors
    /// [`GrantError::Symlink`] for a symlink on the way, [`GrantError::Io`].
    pub fn remove_all(&self) -> Result<(), GrantError> {
        let (parent, name) = match self.parent(false) {
            Ok(found) => found,
            Err(e) if e.is_not_found() => return Ok(()),
            Err(e) => return Err(e),
        };
        match parent.remove_dir_all(&name) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(self.io(e)),
        }
    }
}

/// Creates file `name` in `dir` for writing; it must not exist, and a
/// symlink there is not followed.
///
/// # Errors
/// The I/O error.
pub fn create_new_file(dir: &Dir, name: &str) -> io::Result<std::fs::File> {
    let mut o = OpenOptions::new();
    o.write(true).create_new(true).follow(FollowSymlinks::No);
    dir.open_with(name, &o).map(cap_std::fs::File::into_std)
}

/// Opens the regular file `name` in `dir` for reading without following a
/// symlink and without blocking: the open is `O_NONBLOCK` (a FIFO that
/// nobody writes does not hold it), and the open handle must be a regular
/// file (`O_NONBLOCK` is then cleared).
///
/// # Errors
/// The I/O error; of kind `InvalidInput` ("it is a FIFO, not a regular
/// file") when `name` is a FIFO, a device, a socket or a directory.
pub fn open_file_nofollow(dir: &Dir, name: &str) -> io::Result<std::fs::File> {
    let mut o = OpenOptions::new();
    o.read(true).follow(FollowSymlinks::No).nonblock(true);
    let file = dir.open_with(name, &o)?.into_std();
    crate::files::nonblocking_regular(file)
}

/// What a file of type `ft` is, for messages: `"a directory"`, `"a FIFO"`, ...
pub fn kind_name(ft: cap_std::fs::FileType) -> &'static str {
    use cap_fs_ext::FileTypeExt as _;
    if ft.is_dir() {
        "a directory"
    } else if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_block_device() {
        "a block device"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_symlink() {
        "a symbolic link"
    } else if ft.is_file() {
        "a regular file"
    } else {
        "a special file"
    }
}

/// Fsyncs an opened directory so new entries in it are durable. Callers
/// treat it as best effort, as `coordhost::shuffle::sync_dir`.
///
/// A [`Dir`] of [`PluginDir`] is an `O_PATH` handle, and `fsync` of one
/// fails with `EBADF` (a copy of the handle synced nothing before): the
/// directory is opened again for reading, through `.` of the handle (no
/// path is walked).
///
/// # Errors
/// The I/O error of the open or the fsync.
pub fn sync_opened_dir(dir: &Dir) -> io::Result<()> {
    use rustix::fs::{Mode, OFlags};
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW;
    let readable = rustix::fs::openat(dir, ".", flags, Mode::empty())?;
    rustix::fs::fsync(&readable)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grants(dir: &Path, writable: bool) -> Grants {
        Grants::new(
            "p",
            &[DirGrant {
                host: dir.to_path_buf(),
                writable,
            }],
        )
    }

    #[test]
    fn paths_outside_or_not_plain_are_refused_and_the_root_itself_too() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path().join("root");
        std::fs::create_dir(&root).expect("mkdir");
        let g = grants(&root, true);
        assert!(g.writable_dir(&root.join("a/b")).is_ok());
        for bad in [
            tmp.path().join("other"),
            root.clone(),
            root.join("../other"),
            root.join("a/../../x"),
            PathBuf::from("relative/x"),
        ] {
            let e = g.writable_dir(&bad).expect_err("refused");
            assert!(e.to_string().contains("plugin `p`"), "{e}");
        }
        let ro = grants(&root, false);
        let e = ro
            .writable_dir(&root.join("a"))
            .expect_err("read-only grant");
        assert!(
            e.to_string()
                .contains("writable directory granted to it (none)"),
            "{e}"
        );
        assert!(
            e.detail()
                .starts_with(&root.join("a").display().to_string()),
            "{e}"
        );
        assert!(ro.check_readable(&root.join("a")).is_ok());
    }

    #[test]
    fn a_symlink_on_the_way_is_never_followed_when_creating_or_deleting() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path().join("root");
        let inside = root.join("real");
        let victim = tmp.path().join("victim");
        std::fs::create_dir_all(&inside).expect("mkdir");
        std::fs::create_dir_all(victim.join("p")).expect("mkdir");
        std::fs::write(victim.join("p/user.txt"), "keep").expect("write");
        std::os::unix::fs::symlink("../victim", root.join("escape")).expect("symlink");
        std::os::unix::fs::symlink("real", root.join("inner")).expect("symlink");
        let g = grants(&root, true);
        for via in ["escape", "inner"] {
            let d = g
                .writable_dir(&root.join(via).join("p"))
                .expect("lexically inside");
            assert!(matches!(d.create_fresh(), Err(GrantError::Symlink { .. })));
            assert!(matches!(d.remove_all(), Err(GrantError::Symlink { .. })));
        }
        // A symlink at the directory itself is removed, not followed.
        std::os::unix::fs::symlink("../victim/p", root.join("p")).expect("symlink");
        let d = g.writable_dir(&root.join("p")).expect("inside");
        let opened = d.create_fresh().expect("created");
        create_new_file(&opened, "data").expect("file");
        assert!(root.join("p/data").is_file());
        assert_eq!(
            std::fs::read_to_string(victim.join("p/user.txt")).expect("kept"),
            "keep"
        );
        d.remove_all().expect("removed");
        assert!(!root.join("p").exists());
        assert!(victim.join("p/user.txt").is_file());
    }

    #[test]
    fn create_fresh_keeps_an_empty_directory_and_clears_an_earlier_try() {
        use std::os::unix::fs::MetadataExt as _;
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path().join("root");
        std::fs::create_dir_all(root.join("p")).expect("mkdir");
        let inode = std::fs::metadata(root.join("p")).expect("stat").ino();
        let g = grants(&root, true);
        let d = g.writable_dir(&root.join("p")).expect("inside");
        let opened = d.create_fresh().expect("kept");
        assert_eq!(
            std::fs::metadata(root.join("p")).expect("stat").ino(),
            inode,
            "an empty directory is not made again"
        );
        create_new_file(&opened, "data").expect("file");
        // The directory handle is O_PATH; its entries are still synced.
        sync_opened_dir(&opened).expect("fsync of the directory");
        // What an earlier try left is removed.
        let again = d.create_fresh().expect("afresh");
        assert!(!root.join("p/data").exists());
        create_new_file(&again, "data").expect("the name is free again");
    }

    #[test]
    fn reads_follow_symlinks_only_inside_the_grant_and_only_to_regular_files() {
        crate::files::test_support::within_deadline(|| {
            let tmp = tempfile::tempdir().expect("tempdir");
            let root = tmp.path().join("root");
            std::fs::create_dir_all(root.join("d")).expect("mkdir");
            std::fs::write(root.join("f.txt"), "x\n").expect("write");
            std::fs::write(tmp.path().join("secret"), "s\n").expect("write");
            std::os::unix::fs::symlink("f.txt", root.join("ok")).expect("symlink");
            std::os::unix::fs::symlink("../secret", root.join("out")).expect("symlink");
            std::os::unix::fs::symlink("/dev/zero", root.join("zero")).expect("symlink");
            let g = grants(&root, false);
            assert!(g.open_readable_file(&root.join("f.txt")).is_ok());
            assert!(g.open_readable_file(&root.join("ok")).is_ok());
            assert!(g.open_readable_file(&root.join("out")).is_err());
            assert!(g.open_readable_file(&root.join("zero")).is_err());
            assert!(matches!(
                g.open_readable_file(&root.join("d")),
                Err(GrantError::NotAFile {
                    what: "a directory",
                    ..
                })
            ));
            // A FIFO, directly or behind a symlink: refused at once, never opened
            // so that it blocks.
            crate::files::test_support::mkfifo(&root.join("fifo"));
            std::os::unix::fs::symlink("fifo", root.join("to-fifo")).expect("symlink");
            for name in ["fifo", "to-fifo"] {
                let e = g.open_readable_file(&root.join(name)).expect_err("a FIFO");
                assert!(
                    e.to_string()
                        .ends_with("which is a FIFO, not a regular file"),
                    "{e}"
                );
            }
            let opened = Dir::open_ambient_dir(&root, ambient_authority()).expect("root");
            let e = open_file_nofollow(&opened, "fifo").expect_err("a FIFO");
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
            assert!(matches!(
                g.open_readable_file(Path::new("/etc/passwd")),
                Err(GrantError::Outside { .. })
            ));
        });
    }
}
