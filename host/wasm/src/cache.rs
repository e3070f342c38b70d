//! The compiled-component cache: compiling a component takes from 0.1 s
//! (small Rust plugins) to 20 s (a Python interpreter), so the host keeps
//! the machine code on disk, keyed by the SHA-256 of the component bytes and
//! by the engine's compatibility hash (wasmtime version, target, settings).
//! A second load of the same file with the same engine never recompiles.

use std::fs;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

use super::PluginError;

/// Whether a load compiled the component or found it in the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheOutcome {
    /// Machine code came from the cache.
    Hit,
    /// The component was compiled (and, with a cache directory, stored).
    Compiled,
}

/// Called with a component's path when compiling it has taken
/// [`NOTICE_AFTER`] and is not done (never when it comes from the cache, nor
/// for a quick compile): `coordhost plugin check` says "compiling ..." on
/// stderr, since a Python or JavaScript component takes seconds (issue 17,
/// item 7), while a refusal of a small component stays one line.
#[derive(Clone)]
pub struct CompileNotice(pub std::sync::Arc<dyn Fn(&Path) + Send + Sync>);

impl std::fmt::Debug for CompileNotice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CompileNotice")
    }
}

/// How long a compile runs before the [`CompileNotice`] is given: 1 s.
pub const NOTICE_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// Runs `compile`; if it is still running after [`NOTICE_AFTER`], calls
/// `notice` with `path` (from a helper thread, joined before returning, so
/// the notice never comes after what the caller prints next).
fn noticed<T>(notice: Option<&CompileNotice>, path: &Path, compile: impl FnOnce() -> T) -> T {
    let Some(CompileNotice(notice)) = notice else {
        return compile();
    };
    let (done, waiting) = std::sync::mpsc::channel::<()>();
    let notice = std::sync::Arc::clone(notice);
    let path_owned = path.to_path_buf();
    let watcher = std::thread::spawn(move || {
        if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = waiting.recv_timeout(NOTICE_AFTER)
        {
            notice(&path_owned);
        }
    });
    let result = compile();
    drop(done);
    // The watcher only waits and prints: it cannot panic but through `notice`.
    let _ = watcher.join();
    result
}

/// On-disk cache of precompiled components; `dir = None` disables it.
#[derive(Debug, Clone)]
pub struct ComponentCache {
    dir: Option<PathBuf>,
    engine_key: String,
    pub notice: Option<CompileNotice>,
}

impl ComponentCache {
    pub fn new(engine: &Engine, dir: Option<PathBuf>) -> Self {
        let mut hasher = Sha256Hasher(Sha256::new());
        env!("CARGO_PKG_VERSION").hash(&mut hasher);
        engine.precompile_compatibility_hash().hash(&mut hasher);
        let engine_key = hex(&hasher.0.finalize()[..8]);
        Self {
            dir,
            engine_key,
            notice: None,
        }
    }

    /// Returns the compiled component for `bytes` (read from `path`).
    ///
    /// # Errors
    /// [`PluginError::Compile`] when wasmtime refuses the component;
    /// [`PluginError::Cache`] when the cache directory cannot be written.
    pub fn load(
        &self,
        engine: &Engine,
        path: &Path,
        bytes: &[u8],
    ) -> Result<(Component, CacheOutcome), PluginError> {
        let compile_error = |e: wasmtime::Error| PluginError::Compile {
            path: path.to_path_buf(),
            reason: format!("{e:#}"),
        };
        let Some(dir) = &self.dir else {
            let component = noticed(self.notice.as_ref(), path, || Component::new(engine, bytes))
                .map_err(compile_error)?;
            return Ok((component, CacheOutcome::Compiled));
        };
        let entry = dir.join(format!(
            "{}-{}.cwasm",
            hex(&Sha256::digest(bytes)[..16]),
            self.engine_key
        ));
        if let Some(hit) = cached(engine, &entry) {
            return Ok((hit, CacheOutcome::Hit));
        }
        fs::create_dir_all(dir).map_err(|source| PluginError::Cache {
            path: dir.clone(),
            source,
        })?;
        // One compile per component at a time among the processes sharing
        // this cache (workers started together, a test suite): the others
        // wait for its entry instead of compiling the same bytes again.
        let (turn, compiled) = noticed(self.notice.as_ref(), path, || {
            let turn = CompileTurn::take(&entry, COMPILE_WAIT);
            if let Some(hit) = cached(engine, &entry) {
                return (turn, Ok(Err(hit)));
            }
            (turn, engine.precompile_component(bytes).map(Ok))
        });
        let compiled = match compiled.map_err(compile_error)? {
            Ok(compiled) => compiled,
            Err(hit) => return Ok((hit, CacheOutcome::Hit)),
        };
        let cache_error = |source| PluginError::Cache {
            path: entry.clone(),
            source,
        };
        // Write beside, then rename: a crash never leaves a half-written entry.
        let staging = entry.with_extension(format!(
            "tmp-{}-{}",
            std::process::id(),
            STAGING_COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        fs::write(&staging, &compiled).map_err(cache_error)?;
        fs::rename(&staging, &entry).map_err(cache_error)?;
        drop(turn);
        let component = deserialize(engine, &entry).map_err(compile_error)?;
        Ok((component, CacheOutcome::Compiled))
    }
}

/// The cache's entry at `entry`, if there is a usable one; an unusable one
/// is logged and compiled again.
fn cached(engine: &Engine, entry: &Path) -> Option<Component> {
    if !entry.is_file() {
        return None;
    }
    match deserialize(engine, entry) {
        Ok(component) => Some(component),
        Err(e) => {
            tracing::warn!(
                target: crate::LOG_TARGET,
                entry = %entry.display(),
                "compiled-component cache entry unusable ({e:#}); compiling again"
            );
            None
        }
    }
}

/// Longest a load waits for another process compiling the same component
/// before compiling it itself: 5 minutes (a Python component takes about
/// 25 s of CPU in a debug build, far longer on a loaded machine). The wait
/// ends early when that process dies (the kernel drops its lock) or its
/// entry appears.
pub const COMPILE_WAIT: std::time::Duration = std::time::Duration::from_secs(300);

/// How often a waiting load looks at the lock and the entry again.
const COMPILE_POLL: std::time::Duration = std::time::Duration::from_millis(50);

/// The right to compile one component into the cache: an exclusive
/// `flock(2)`-style lock on `<entry>.lock` (std's `File::try_lock`), held
/// while compiling and writing the entry and released on drop (or by the
/// kernel when the process dies). Taking it never blocks past its bound:
/// the lock is polled without waiting, and a lock file that cannot be
/// opened or locked (a read-only cache, a FIFO put in its place) only means
/// compiling without a turn, as before the lock existed.
struct CompileTurn(Option<fs::File>);

impl CompileTurn {
    fn take(entry: &Path, wait: std::time::Duration) -> Self {
        let lock_path = entry.with_extension("lock");
        let Some(file) = open_lock_file(&lock_path) else {
            return Self(None);
        };
        let deadline = std::time::Instant::now() + wait;
        loop {
            match file.try_lock() {
                Ok(()) => return Self(Some(file)),
                Err(fs::TryLockError::WouldBlock) => {}
                Err(fs::TryLockError::Error(e)) => {
                    tracing::debug!(target: crate::LOG_TARGET, lock = %lock_path.display(), error = %e, "no compile lock");
                    return Self(None);
                }
            }
            if entry.is_file() {
                return Self(None);
            }
            if std::time::Instant::now() >= deadline {
                tracing::warn!(
                    target: crate::LOG_TARGET,
                    lock = %lock_path.display(),
                    "another process has been compiling this component for {} s; compiling it here too",
                    wait.as_secs()
                );
                return Self(None);
            }
            std::thread::sleep(COMPILE_POLL);
        }
    }
}

impl Drop for CompileTurn {
    fn drop(&mut self) {
        if let Some(file) = &self.0 {
            let _ = file.unlock();
        }
    }
}

/// Opens (creating) the lock file without following a symbolic link and
/// without blocking (`O_NONBLOCK`: a FIFO in its place), and only if it is a
/// regular file.
fn open_lock_file(path: &Path) -> Option<fs::File> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let flags = rustix::fs::OFlags::NONBLOCK | rustix::fs::OFlags::NOFOLLOW;
    let file = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(i32::try_from(flags.bits()).unwrap_or(0))
        .open(path)
        .ok()?;
    coordhost_io::files::nonblocking_regular(file).ok()
}

/// Makes staging names unique between threads of one process.
static STAGING_COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Loads machine code written by [`Engine::precompile_component`].
#[expect(
    unsafe_code,
    reason = "wasmtime's deserialize is unsafe; see the safety argument"
)]
fn deserialize(engine: &Engine, entry: &Path) -> wasmtime::Result<Component> {
    // SAFETY: `Component::deserialize_file` requires that the file was made
    // by `Engine::precompile_component` and not altered since. Entries are
    // only ever created above, by this engine configuration, in a cache
    // directory owned by the user running the host, and published by atomic
    // rename, so no reader sees a partial file. wasmtime checks the header
    // against the engine's compatibility settings itself. Anyone able to
    // rewrite the cache could equally replace the coordhost binary.
    unsafe { Component::deserialize_file(engine, entry) }
}

/// Feeds `Hash` output into SHA-256 so the key is stable across processes.
struct Sha256Hasher(Sha256);

impl Hasher for Sha256Hasher {
    fn finish(&self) -> u64 {
        let digest = self.0.clone().finalize();
        u64::from_le_bytes(digest[..8].try_into().unwrap_or_default())
    }

    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The smallest valid component: the preamble of an empty one.
    const EMPTY_COMPONENT: &[u8] = &[0x00, 0x61, 0x73, 0x6d, 0x0d, 0x00, 0x01, 0x00];

    fn engine() -> Engine {
        Engine::new(&wasmtime::Config::new()).expect("engine")
    }

    fn entry_of(cache: &ComponentCache, dir: &Path, bytes: &[u8]) -> PathBuf {
        dir.join(format!(
            "{}-{}.cwasm",
            hex(&Sha256::digest(bytes)[..16]),
            cache.engine_key
        ))
    }

    #[test]
    fn a_load_waits_for_the_process_compiling_the_same_component_and_uses_its_entry() {
        let dir = tempfile::tempdir().expect("tempdir");
        let engine = engine();
        let cache = ComponentCache::new(&engine, Some(dir.path().to_path_buf()));
        let entry = entry_of(&cache, dir.path(), EMPTY_COMPONENT);
        // Another compiler's turn (a separate open file description, as in
        // another process).
        let turn = CompileTurn::take(&entry, std::time::Duration::ZERO);
        assert!(turn.0.is_some(), "the first turn takes the lock");
        let waiter = {
            let (engine, cache) = (engine.clone(), cache.clone());
            std::thread::spawn(move || {
                cache
                    .load(&engine, Path::new("empty.wasm"), EMPTY_COMPONENT)
                    .map(|(_, outcome)| outcome)
            })
        };
        std::thread::sleep(std::time::Duration::from_millis(400));
        assert!(
            !waiter.is_finished(),
            "the load waits while the turn is held"
        );
        assert!(!entry.exists(), "the waiting load compiled nothing");
        let compiled = engine
            .precompile_component(EMPTY_COMPONENT)
            .expect("compiles");
        fs::write(&entry, compiled).expect("entry written");
        drop(turn);
        let outcome = waiter.join().expect("no panic").expect("loads");
        assert_eq!(
            outcome,
            CacheOutcome::Hit,
            "the waiter used the holder's entry"
        );
    }

    #[test]
    fn a_holder_that_leaves_without_an_entry_hands_the_compile_to_the_waiter() {
        let dir = tempfile::tempdir().expect("tempdir");
        let engine = engine();
        let cache = ComponentCache::new(&engine, Some(dir.path().to_path_buf()));
        let entry = entry_of(&cache, dir.path(), EMPTY_COMPONENT);
        let turn = CompileTurn::take(&entry, std::time::Duration::ZERO);
        let waiter = {
            let (engine, cache) = (engine.clone(), cache.clone());
            std::thread::spawn(move || {
                cache
                    .load(&engine, Path::new("empty.wasm"), EMPTY_COMPONENT)
                    .map(|(_, outcome)| outcome)
            })
        };
        std::thread::sleep(std::time::Duration::from_millis(200));
        drop(turn); // as a compiler that died: no entry
        let outcome = waiter.join().expect("no panic").expect("loads");
        assert_eq!(outcome, CacheOutcome::Compiled);
        assert!(entry.is_file(), "the waiter wrote the entry");
    }

    #[test]
    fn a_fifo_in_place_of_the_lock_file_is_not_waited_on() {
        let dir = tempfile::tempdir().expect("tempdir");
        let engine = engine();
        let cache = ComponentCache::new(&engine, Some(dir.path().to_path_buf()));
        let entry = entry_of(&cache, dir.path(), EMPTY_COMPONENT);
        rustix::fs::mknodat(
            rustix::fs::CWD,
            entry.with_extension("lock"),
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .expect("mkfifo");
        let started = std::time::Instant::now();
        let (_, outcome) = cache
            .load(&engine, Path::new("empty.wasm"), EMPTY_COMPONENT)
            .expect("loads");
        assert_eq!(outcome, CacheOutcome::Compiled);
        assert!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "the open of the FIFO did not block"
        );
    }
}
