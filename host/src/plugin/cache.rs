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
pub(crate) struct ComponentCache {
    dir: Option<PathBuf>,
    engine_key: String,
    pub(crate) notice: Option<CompileNotice>,
}

impl ComponentCache {
    pub(crate) fn new(engine: &Engine, dir: Option<PathBuf>) -> Self {
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
    pub(crate) fn load(
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
        if entry.is_file() {
            match deserialize(engine, &entry) {
                Ok(component) => return Ok((component, CacheOutcome::Hit)),
                Err(e) => tracing::warn!(
                    entry = %entry.display(),
                    "compiled-component cache entry unusable ({e:#}); compiling again"
                ),
            }
        }
        let compiled = noticed(self.notice.as_ref(), path, || {
            engine.precompile_component(bytes)
        })
        .map_err(compile_error)?;
        let cache_error = |source| PluginError::Cache {
            path: entry.clone(),
            source,
        };
        fs::create_dir_all(dir).map_err(|source| PluginError::Cache {
            path: dir.clone(),
            source,
        })?;
        // Write beside, then rename: a crash never leaves a half-written entry.
        let staging = entry.with_extension(format!(
            "tmp-{}-{}",
            std::process::id(),
            STAGING_COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        fs::write(&staging, &compiled).map_err(cache_error)?;
        fs::rename(&staging, &entry).map_err(cache_error)?;
        let component = deserialize(engine, &entry).map_err(compile_error)?;
        Ok((component, CacheOutcome::Compiled))
    }
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
