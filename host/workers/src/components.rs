//! The plugin components a worker process's tasks need, whatever their
//! kind (issue 27, item 3; docs/workers.md, "Plugin components on
//! workers"): a scalar function's (`super::functions`), a table's source
//! reader (`super::readers`).
//!
//! A deploy names a component ([`RemoteComponent`]: its SHA-256 and the
//! plugin's settings), never its bytes. [`WorkerComponents::load`] makes
//! it a loaded plugin, one path for every kind:
//!
//! 1. the component's bytes: `<data-dir>/components/<sha256>.wasm` when
//!    this worker keeps a file of that hash (checked by hashing it), else
//!    fetched from the coordinator ([`ComponentSource`], `FetchComponent`)
//!    and kept there;
//! 2. the SHA-256 of the fetched bytes must be the deploy's: bytes of
//!    another hash are refused, naming the plugin and both hashes, and are
//!    neither kept, compiled nor run;
//! 3. compiled from those very bytes (never re-read from disk) through the
//!    worker's compiled-component cache (`--cache-dir`), linked against the
//!    world of the kind the task needs, and pre-instantiated.
//!
//! The callers keep what they made of the loaded plugin (a function, a
//! reader, each with its pool of idle instances) for the worker's later
//! tasks: one load per component and settings per worker process, whatever
//! the number of tasks. The sandbox is the coordinator's: the deadline per
//! call, the memory cap and the grants of the plugin's `limits` and `dirs`.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use sha2::Digest as _;

use super::task::{RemoteComponent, is_sha256_hex};
use coordhost_wasm::{HostOptions, LoadedPlugin, PluginHost, PluginKind};

/// Where a worker gets the bytes of a component it does not keep: the
/// coordinator (`FetchComponent`).
pub(super) trait ComponentSource: Send + Sync {
    /// The bytes sent for `sha256`, as they came (the caller checks their
    /// hash).
    ///
    /// # Errors
    ///
    /// Why none came, in words: refused, unreachable, silent, cut short,
    /// or larger than the largest component.
    fn fetch(&self, sha256: &str) -> Result<Vec<u8>, String>;
}

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Lowercase hex SHA-256 of `bytes`.
pub(super) fn sha256_hex(bytes: &[u8]) -> String {
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// What a component is, for messages: `scalar function `tax``,
/// `source reader `fixed``.
pub(super) fn what(kind: PluginKind, name: &str) -> String {
    match kind {
        PluginKind::ScalarFunction => format!("scalar function `{name}`"),
        PluginKind::SourceReader => format!("source reader `{name}`"),
        other => format!("{other} plugin `{name}`"),
    }
}

/// Refuses a deploy's `component` of `what` whose hash is not a SHA-256 as
/// coordhost writes it (it names a file of the worker).
///
/// # Errors
///
/// One line naming `what` and the hash given.
pub(super) fn check_hash(what: &str, component: &RemoteComponent) -> Result<(), String> {
    if is_sha256_hex(&component.sha256) {
        Ok(())
    } else {
        Err(format!(
            "{what}: `{}` is not a SHA-256 (64 lowercase hex digits)",
            coordhost_wasm::one_line(&component.sha256, 80)
        ))
    }
}

/// The component bytes and the plugin host of one worker process.
pub(super) struct WorkerComponents {
    /// The worker's id, for messages.
    worker: String,
    /// `<data-dir>/components`: component bytes by hash.
    dir: PathBuf,
    /// The compiled-component cache.
    cache_dir: Option<PathBuf>,
    /// Made at the first load (an engine and its epoch thread).
    host: Mutex<Option<PluginHost>>,
    /// Held while component bytes are read or fetched: one fetch per hash.
    fetching: Mutex<()>,
}

impl WorkerComponents {
    /// The components of worker `worker`, bytes kept in `dir`, compiled
    /// through `cache_dir`.
    pub(super) fn new(worker: &str, dir: PathBuf, cache_dir: Option<PathBuf>) -> Self {
        Self {
            worker: worker.to_owned(),
            dir,
            cache_dir,
            host: Mutex::new(None),
            fetching: Mutex::new(()),
        }
    }

    /// The worker's id.
    pub(super) fn worker(&self) -> &str {
        &self.worker
    }

    /// Loads `component` as plugin `name` of `kind`: its bytes kept here or
    /// fetched from `source`, of exactly the deploy's hash, compiled
    /// through the cache and pre-instantiated with the deploy's settings.
    /// Blocks (a fetch waits on the worker's async runtime): never call it
    /// on a thread of an async runtime.
    ///
    /// # Errors
    ///
    /// One line: a hash that is not a SHA-256, the fetch failed or the
    /// bytes have another hash (each naming the plugin, the component and
    /// the hash), or the plugin host refused the component (not a
    /// component, another world, a trap while it starts; naming the
    /// plugin).
    pub(super) fn load(
        &self,
        name: &str,
        kind: PluginKind,
        component: &RemoteComponent,
        source: &dyn ComponentSource,
    ) -> Result<LoadedPlugin, String> {
        let what = what(kind, name);
        check_hash(&what, component)?;
        let bytes = self.bytes(&what, component, source)?;
        let spec = component.spec(name, kind, self.file(&component.sha256));
        let host = self.host()?;
        // The plugin host's message names the plugin; the caller names
        // the component, its hash and this worker.
        let loaded = host.load_bytes(&spec, &bytes).map_err(|e| e.to_string())?;
        tracing::info!(
            target: crate::LOG_TARGET, worker = %self.worker,
            plugin = %name,
            kind = %kind,
            sha256 = %component.sha256,
            cache = ?loaded.cache_outcome(),
            "compiled a component"
        );
        Ok(loaded)
    }

    /// The process's plugin host, made at the first load.
    fn host(&self) -> Result<PluginHost, String> {
        let mut host = lock(&self.host);
        if let Some(h) = &*host {
            return Ok(h.clone());
        }
        let made = PluginHost::new(HostOptions {
            cache_dir: self.cache_dir.clone(),
        })
        .map_err(|e| format!("worker `{}`: {e}", self.worker))?;
        *host = Some(made.clone());
        Ok(made)
    }

    /// Where the bytes of `sha256` are kept.
    pub(super) fn file(&self, sha256: &str) -> PathBuf {
        self.dir.join(format!("{sha256}.wasm"))
    }

    /// The bytes of `component` (of `what`), of exactly its hash: kept
    /// ones, or fetched from `source` (then kept).
    pub(super) fn bytes(
        &self,
        what: &str,
        component: &RemoteComponent,
        source: &dyn ComponentSource,
    ) -> Result<Vec<u8>, String> {
        let sha256 = &component.sha256;
        let _one_at_a_time = lock(&self.fetching);
        let file = self.file(sha256);
        if file.exists() {
            match coordhost_io::files::read_regular_file(
                &file,
                coordhost_io::files::MAX_COMPONENT_BYTES,
            ) {
                Ok(bytes) if sha256_hex(&bytes) == *sha256 => return Ok(bytes),
                Ok(_) => {
                    tracing::warn!(target: crate::LOG_TARGET, worker = %self.worker, file = %file.display(), "a kept component does not have the hash it is named by; fetching it again")
                }
                Err(e) => {
                    tracing::warn!(target: crate::LOG_TARGET, worker = %self.worker, file = %file.display(), "a kept component cannot be read ({e}); fetching it again")
                }
            }
        }
        let bytes = source.fetch(sha256).map_err(|e| {
            format!(
                "worker `{}` cannot fetch the component of {what} (sha256 {sha256}) from the coordinator: {e}",
                self.worker
            )
        })?;
        let got = sha256_hex(&bytes);
        if got != *sha256 {
            tracing::warn!(target: crate::LOG_TARGET, worker = %self.worker, plugin = %what, expected = %sha256, got = %got, "refused a component whose hash is not the job's");
            return Err(format!(
                "worker `{}` refuses the component of {what}: the {} bytes the coordinator sent have sha256 {got}, but the job's component ({}) has sha256 {sha256}; it does not run them",
                self.worker,
                bytes.len(),
                component.path,
            ));
        }
        tracing::info!(target: crate::LOG_TARGET, worker = %self.worker, plugin = %what, sha256 = %sha256, bytes = bytes.len(), "fetched a component from the coordinator");
        if let Err(e) = self.keep(&file, &bytes) {
            // Kept or not, the checked bytes in memory are what runs.
            tracing::warn!(target: crate::LOG_TARGET, worker = %self.worker, file = %file.display(), "cannot keep the component ({e}); it will be fetched again by the next process");
        }
        Ok(bytes)
    }

    /// Writes `bytes` to `file` beside it first, then renames: no reader
    /// ever sees half a component.
    fn keep(&self, file: &Path, bytes: &[u8]) -> std::io::Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        let staging = file.with_extension(format!("tmp-{}", std::process::id()));
        std::fs::write(&staging, bytes)?;
        std::fs::rename(&staging, file)
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A source that answers every fetch with `bytes`.
    pub(crate) struct Fixed(pub Vec<u8>);

    impl ComponentSource for Fixed {
        fn fetch(&self, _sha256: &str) -> Result<Vec<u8>, String> {
            Ok(self.0.clone())
        }
    }

    fn component(sha256: &str) -> RemoteComponent {
        RemoteComponent {
            path: "/jobs/f.wasm".into(),
            sha256: sha256.into(),
            config: Vec::new(),
            dirs: Vec::new(),
            call_timeout_ms: 1000,
            memory_bytes: 1 << 20,
            on_trap: coordhost_wasm::TrapPolicy::Fail,
        }
    }

    #[test]
    fn bytes_of_another_hash_are_refused_naming_both_and_never_kept() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let components = WorkerComponents::new("w0", tmp.path().join("components"), None);
        let want = sha256_hex(b"the real component");
        let what = what(PluginKind::SourceReader, "fixed");
        let e = components
            .bytes(&what, &component(&want), &Fixed(b"something else".to_vec()))
            .expect_err("refused");
        let got = sha256_hex(b"something else");
        for needle in [
            "source reader `fixed`",
            &want,
            &got,
            "/jobs/f.wasm",
            "does not run them",
        ] {
            assert!(e.contains(needle), "`{needle}` in: {e}");
        }
        assert!(!components.file(&want).exists(), "nothing kept");
        // The right bytes are kept, and then read back without a fetch.
        let ok = components
            .bytes(
                &what,
                &component(&want),
                &Fixed(b"the real component".to_vec()),
            )
            .expect("the right bytes");
        assert_eq!(ok, b"the real component");
        let again = components
            .bytes(&what, &component(&want), &Fixed(b"never asked".to_vec()))
            .expect("kept bytes");
        assert_eq!(again, b"the real component");
        // A kept file that lost its hash is fetched again.
        std::fs::write(components.file(&want), b"damaged").expect("damage");
        let e = components
            .bytes(&what, &component(&want), &Fixed(b"fetched anew".to_vec()))
            .expect_err("refused");
        assert!(e.contains(&sha256_hex(b"fetched anew")), "{e}");
    }

    #[test]
    fn a_hash_that_could_name_another_file_is_refused_before_any_fetch() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let components = WorkerComponents::new("w0", tmp.path().to_path_buf(), None);
        let e = components
            .load(
                "fixed",
                PluginKind::SourceReader,
                &component("../../etc/passwd"),
                &Fixed(Vec::new()),
            )
            .expect_err("refused");
        assert!(
            e.contains("source reader `fixed`") && e.contains("not a SHA-256"),
            "{e}"
        );
    }
}
