//! The host side of the WIT interface `local-files` (0.1.3): many files of
//! the plugin's granted directories read, or looked at, in one call.
//!
//! Why: a shuffle master answering FLIP-383's partition question reads each
//! partition's `index` and looks at the size of its `data`; through WASI
//! that is four calls a partition, each through the WASI layer, and at
//! 500 000 partitions it was most of a restart (issue 29,
//! docs/recovery.md "Figures"). Here the host does the same file-system
//! work natively, on a few threads, with the rules WASI applies to the
//! plugin: a path is absolute and plain, lies inside a granted directory
//! (as the job file wrote it: the plugin sees its grants under those
//! names), its last part is not followed when it is a symbolic link and
//! no part leads out of the grant (`cap-std`), and a FIFO, device or
//! socket is refused without being opened (a look at the path first, then
//! `O_NONBLOCK` and `fstat` on the handle against a swap). Nothing here
//! traps: every problem is a `failed` value naming the path, and the
//! call's deadline ends the work (the paths left get `failed`).

use std::io::Read as _;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use cap_fs_ext::{FollowSymlinks, OpenOptionsFollowExt, OpenOptionsSyncExt as _};
use cap_std::ambient_authority;
use cap_std::fs::{Dir, OpenOptions};

use super::bindings::shuffle::coordhost::plugin::local_files::{FileSize, Host, SmallFile};
use super::store::PluginState;
use coordhost_io::grant::DirGrant;

/// Paths answered per call; later ones get `failed`.
pub const MAX_PATHS: usize = 1_000_000;
/// The largest `max-bytes` honoured (a larger one counts as this).
pub const MAX_FILE_BYTES: u32 = 1 << 20;
/// Bytes read per call in all; files after that get `failed`.
pub const MAX_CALL_BYTES: u64 = 256 << 20;
/// Paths below which one thread does all the work.
const SPLIT_ABOVE: usize = 2048;
/// Threads at most.
const MAX_THREADS: usize = 4;
/// Paths between two looks at the deadline.
const DEADLINE_EVERY: usize = 256;

/// The plugin's granted directories, opened once for a call.
struct Roots {
    /// (the grant's path as the job file wrote it, the opened directory),
    /// deepest first so a path is found in its innermost grant.
    dirs: Vec<(PathBuf, Option<Dir>)>,
}

impl Roots {
    fn open(grants: &[DirGrant]) -> Self {
        let mut dirs: Vec<(PathBuf, Option<Dir>)> = grants
            .iter()
            .map(|g| {
                let dir = Dir::open_ambient_dir(&g.host, ambient_authority()).ok();
                (g.host.clone(), dir)
            })
            .collect();
        dirs.sort_by_key(|(p, _)| std::cmp::Reverse(p.components().count()));
        Self { dirs }
    }

    /// The opened grant `path` lies strictly inside, and the rest of it.
    fn locate<'a>(&self, path: &'a str) -> Result<(&Dir, &'a Path), String> {
        let p = Path::new(path);
        let plain = p.is_absolute()
            && p.components()
                .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
        if !plain {
            return Err(format!(
                "{path}: not an absolute path of plain parts (no `.` or `..`)"
            ));
        }
        for (root, dir) in &self.dirs {
            if let Ok(rel) = p.strip_prefix(root)
                && rel.components().next().is_some()
            {
                return match dir {
                    Some(dir) => Ok((dir, rel)),
                    None => Err(format!(
                        "{path}: the granted directory {} cannot be opened",
                        root.display()
                    )),
                };
            }
        }
        Err(format!(
            "{path}: outside every directory granted to the plugin"
        ))
    }
}

/// How an open or stat failed, as the WIT answers it: `None` for
/// "nothing there" (the path or one of its parts is missing, or a part is
/// a file).
fn problem(path: &str, e: &std::io::Error) -> Option<String> {
    use rustix::io::Errno;
    match Errno::from_io_error(e) {
        Some(Errno::NOENT | Errno::NOTDIR) => None,
        Some(Errno::LOOP) => Some(format!("{path}: a symbolic link (not followed)")),
        _ if e.kind() == std::io::ErrorKind::NotFound => None,
        _ => Some(format!("{path}: {e}")),
    }
}

/// What a file of type `ft` is, when it is not a regular file.
fn not_regular(path: &str, ft: std::fs::FileType) -> String {
    format!(
        "{path}: {}, not a regular file",
        coordhost_io::files::kind_of(&ft)
    )
}

/// Why a path has no regular file to answer with.
enum NoFile {
    /// Nothing there.
    Missing,
    /// Anything else, naming the path.
    Failed(String),
}

/// The regular file at `path`, looked at without opening it or following
/// a symbolic link at its end (opening some devices has effects, as
/// `open_guard.rs` says): its grant, the rest of the path and its size.
fn look<'r, 'p>(roots: &'r Roots, path: &'p str) -> Result<(&'r Dir, &'p Path, u64), NoFile> {
    let (dir, rel) = roots.locate(path).map_err(NoFile::Failed)?;
    match dir.symlink_metadata(rel) {
        Ok(m) if m.is_file() => Ok((dir, rel, m.len())),
        Ok(m) if m.file_type().is_symlink() => Err(NoFile::Failed(format!(
            "{path}: a symbolic link (not followed)"
        ))),
        Ok(m) => Err(NoFile::Failed(format!(
            "{path}: {}, not a regular file",
            coordhost_io::grant::kind_name(m.file_type())
        ))),
        Err(e) => Err(problem(path, &e).map_or(NoFile::Missing, NoFile::Failed)),
    }
}

/// Reads the file at `path` (see the module docs).
fn read_one(roots: &Roots, path: &str, max: u64, budget: &AtomicU64) -> SmallFile {
    let (dir, rel, looked) = match look(roots, path) {
        Ok(found) => found,
        Err(NoFile::Missing) => return SmallFile::Missing,
        Err(NoFile::Failed(why)) => return SmallFile::Failed(why),
    };
    if looked > max {
        return SmallFile::TooLarge(looked);
    }
    // Opened without blocking and checked again on the handle: a FIFO
    // swapped in since the look is refused too.
    let mut o = OpenOptions::new();
    o.read(true).nonblock(true).follow(FollowSymlinks::No);
    let mut file = match dir.open_with(rel, &o) {
        Ok(f) => f.into_std(),
        Err(e) => {
            return match problem(path, &e) {
                None => SmallFile::Missing,
                Some(why) => SmallFile::Failed(why),
            };
        }
    };
    let meta = match file.metadata() {
        Ok(m) => m,
        Err(e) => return SmallFile::Failed(format!("{path}: {e}")),
    };
    if !meta.file_type().is_file() {
        return SmallFile::Failed(not_regular(path, meta.file_type()));
    }
    let size = meta.len();
    if size > max {
        return SmallFile::TooLarge(size);
    }
    if budget.fetch_add(size, Ordering::Relaxed) + size > MAX_CALL_BYTES {
        return SmallFile::Failed(format!(
            "{path}: the call read {MAX_CALL_BYTES} bytes already"
        ));
    }
    // The size `fstat` gave, usually in one `read` (a regular file reads
    // short only at its end; one that shrank meanwhile ends early, and a
    // partition index cut short fails its own checksum).
    let mut bytes = vec![0u8; usize::try_from(size).unwrap_or(0)];
    let mut got = 0;
    while got < bytes.len() {
        match file.read(&mut bytes[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return SmallFile::Failed(format!("{path}: {e}")),
        }
    }
    bytes.truncate(got);
    SmallFile::Whole(bytes)
}

/// The size of the file at `path` (see the module docs).
fn size_of(roots: &Roots, path: &str) -> FileSize {
    match look(roots, path) {
        Ok((_, _, size)) => FileSize::Regular(size),
        Err(NoFile::Missing) => FileSize::Missing,
        Err(NoFile::Failed(why)) => FileSize::Failed(why),
    }
}

/// Answers `one` for each of `paths` in order, on up to [`MAX_THREADS`]
/// threads; after `deadline` (looked at every [`DEADLINE_EVERY`] paths) and
/// past [`MAX_PATHS`], `late` answers instead.
fn answer_all<T: Send>(
    paths: &[String],
    deadline: Option<Instant>,
    one: impl Fn(&str) -> T + Sync,
    late: impl Fn(&str, &'static str) -> T + Sync,
) -> Vec<T> {
    let (served, over) = paths.split_at(paths.len().min(MAX_PATHS));
    let chunk = |part: &[String]| -> Vec<T> {
        let mut out = Vec::with_capacity(part.len());
        let mut timed_out = false;
        for (i, p) in part.iter().enumerate() {
            if !timed_out
                && i % DEADLINE_EVERY == 0
                && deadline.is_some_and(|d| Instant::now() >= d)
            {
                timed_out = true;
            }
            out.push(if timed_out {
                late(p, "the plugin call's deadline passed first")
            } else {
                one(p)
            });
        }
        out
    };
    let threads = std::thread::available_parallelism()
        .map_or(1, std::num::NonZero::get)
        .min(MAX_THREADS);
    let mut answers = if served.len() <= SPLIT_ABOVE || threads < 2 {
        chunk(served)
    } else {
        let per = served.len().div_ceil(threads);
        std::thread::scope(|s| {
            let handles: Vec<_> = served
                .chunks(per)
                .map(|part| s.spawn(|| chunk(part)))
                .collect();
            let mut all = Vec::with_capacity(served.len());
            for (h, part) in handles.into_iter().zip(served.chunks(per)) {
                match h.join() {
                    Ok(answers) => all.extend(answers),
                    Err(_) => all.extend(part.iter().map(|p| late(p, "the host's reader failed"))),
                }
            }
            all
        })
    };
    answers.extend(
        over.iter()
            .map(|p| late(p, "past the 1 000 000 paths one call answers")),
    );
    answers
}

impl Host for PluginState {
    fn read_small_files(&mut self, paths: Vec<String>, max_bytes: u32) -> Vec<SmallFile> {
        let roots = Roots::open(&self.dirs);
        let max = u64::from(max_bytes.min(MAX_FILE_BYTES));
        let budget = AtomicU64::new(0);
        answer_all(
            &paths,
            self.call_deadline,
            |p| read_one(&roots, p, max, &budget),
            |p, why| SmallFile::Failed(format!("{p}: {why}")),
        )
    }

    fn file_sizes(&mut self, paths: Vec<String>) -> Vec<FileSize> {
        let roots = Roots::open(&self.dirs);
        answer_all(
            &paths,
            self.call_deadline,
            |p| size_of(&roots, p),
            |p, why| FileSize::Failed(format!("{p}: {why}")),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roots(dir: &Path) -> Roots {
        Roots::open(&[DirGrant {
            host: dir.to_path_buf(),
            writable: false,
        }])
    }

    #[test]
    fn reads_inside_the_grant_only_and_never_follows_or_blocks() {
        coordhost_io::files::test_support::within_deadline(|| {
            let tmp = tempfile::tempdir().expect("tempdir");
            let root = tmp.path().join("root");
            std::fs::create_dir_all(root.join("p")).expect("mkdir");
            std::fs::write(root.join("p/index"), b"abc").expect("write");
            std::fs::write(root.join("p/big"), vec![7u8; 100]).expect("write");
            std::fs::write(tmp.path().join("secret"), b"s").expect("write");
            std::os::unix::fs::symlink("index", root.join("p/link")).expect("symlink");
            std::os::unix::fs::symlink("../..", root.join("p/up")).expect("symlink");
            coordhost_io::files::test_support::mkfifo(&root.join("p/fifo"));
            let r = roots(&root);
            let budget = AtomicU64::new(0);
            let read = |p: &Path| read_one(&r, p.to_str().expect("utf-8"), 10, &budget);
            assert_eq!(
                read(&root.join("p/index")),
                SmallFile::Whole(b"abc".to_vec())
            );
            assert_eq!(read(&root.join("p/big")), SmallFile::TooLarge(100));
            assert_eq!(read(&root.join("p/none")), SmallFile::Missing);
            assert_eq!(read(&root.join("q/none")), SmallFile::Missing);
            assert_eq!(read(&root.join("p/index/x")), SmallFile::Missing);
            for (path, says) in [
                (root.join("p/link"), "symbolic link"),
                (root.join("p/fifo"), "FIFO"),
                (root.join("p"), "directory"),
                (tmp.path().join("secret"), "outside every directory granted"),
                (root.join("p/../../secret"), "plain parts"),
                (root.join("p/up/secret"), "secret"),
            ] {
                match read(&path) {
                    SmallFile::Failed(why) => assert!(
                        why.contains(says) && why.contains(path.to_str().expect("utf-8")),
                        "{why}"
                    ),
                    other => panic!("{}: {other:?}", path.display()),
                }
            }
            let size = |p: &Path| size_of(&r, p.to_str().expect("utf-8"));
            assert_eq!(size(&root.join("p/big")), FileSize::Regular(100));
            assert_eq!(size(&root.join("p/none")), FileSize::Missing);
            assert!(
                matches!(size(&root.join("p/link")), FileSize::Failed(w) if w.contains("symbolic link"))
            );
            assert!(
                matches!(size(&root.join("p/fifo")), FileSize::Failed(w) if w.contains("a FIFO"))
            );
            assert!(
                matches!(size(&tmp.path().join("secret")), FileSize::Failed(w) if w.contains("outside"))
            );
        });
    }

    #[test]
    fn many_paths_answer_in_order_across_threads_and_stop_at_the_deadline() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path().to_path_buf();
        let paths: Vec<String> = (0..5000)
            .map(|i| {
                let p = root.join(format!("f{i}"));
                if i % 3 == 0 {
                    std::fs::write(&p, i.to_string()).expect("write");
                }
                p.to_str().expect("utf-8").to_owned()
            })
            .collect();
        let r = roots(&root);
        let budget = AtomicU64::new(0);
        let answers = answer_all(
            &paths,
            None,
            |p| read_one(&r, p, 64, &budget),
            |p, why| SmallFile::Failed(format!("{p}: {why}")),
        );
        assert_eq!(answers.len(), paths.len());
        for (i, a) in answers.iter().enumerate() {
            if i % 3 == 0 {
                assert_eq!(a, &SmallFile::Whole(i.to_string().into_bytes()), "{i}");
            } else {
                assert_eq!(a, &SmallFile::Missing, "{i}");
            }
        }
        let past = Some(Instant::now() - std::time::Duration::from_secs(1));
        let late = answer_all(
            &paths,
            past,
            |p| size_of(&r, p),
            |p, why| FileSize::Failed(format!("{p}: {why}")),
        );
        assert_eq!(late.len(), paths.len());
        assert!(
            late.iter()
                .all(|a| matches!(a, FileSize::Failed(w) if w.contains("deadline"))),
            "{:?}",
            &late[..2]
        );
    }
}
