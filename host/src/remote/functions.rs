//! A worker process's scalar functions (issue 27, item 3; docs/workers.md,
//! "Scalar functions on workers").
//!
//! A deploy names the job's functions ([`RemoteFunction`]: name, settings,
//! signature and the SHA-256 of the component), never their bytes. The
//! first call of a function on this worker loads it:
//!
//! 1. the component's bytes: `<data-dir>/components/<sha256>.wasm` when
//!    this worker holds a file of that hash (checked by hashing it), else
//!    fetched from the coordinator ([`ComponentSource`], `FetchComponent`)
//!    and kept there;
//! 2. the SHA-256 of the fetched bytes must be the deploy's: bytes of
//!    another hash are refused, naming the function and both hashes, and
//!    are neither kept, compiled nor run;
//! 3. compiled from those very bytes (never re-read from disk) through the
//!    worker's compiled-component cache (`--cache-dir`), pre-instantiated,
//!    and checked to declare the deploy's signature;
//! 4. kept for the worker's later tasks with its pool of idle instances,
//!    as the coordinator's embedded tasks keep theirs: one load per
//!    function per worker process, whatever the number of tasks.
//!
//! The sandbox is the coordinator's: the deadline per call, the memory cap
//! and the grants of the function's `limits` and `dirs`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::str::FromStr as _;
use std::sync::{Arc, Mutex, PoisonError};

use arrow_array::ArrayRef;
use arrow_schema::DataType;
use sha2::Digest as _;

use super::task::{RemoteFunction, is_sha256_hex};
use crate::plugin::{HostOptions, Limits, PluginHost, PluginKind, PluginSpec, ScalarFunction};
use crate::sql::{FunctionSet, ScalarCallee, SqlFunction};

/// Where a worker gets the bytes of a component it does not hold: the
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

/// One function's loaded form, filled by its first call.
type Slot = Arc<Mutex<Option<Arc<ScalarFunction>>>>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Lowercase hex SHA-256 of `bytes`.
fn sha256_hex(bytes: &[u8]) -> String {
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The scalar functions of one worker process.
pub(super) struct WorkerFunctions {
    /// The worker's id, for messages.
    worker: String,
    /// `<data-dir>/components`: component bytes by hash.
    dir: PathBuf,
    /// The compiled-component cache.
    cache_dir: Option<PathBuf>,
    /// Made at the first load (an engine and its epoch thread).
    host: Mutex<Option<PluginHost>>,
    /// Per function (its postcard form: the same name, hash, settings and
    /// signature): the loaded function once loaded.
    loaded: Mutex<HashMap<Vec<u8>, Slot>>,
    /// Held while component bytes are read or fetched: one fetch per hash.
    fetching: Mutex<()>,
}

impl WorkerFunctions {
    /// The functions of worker `worker`, bytes kept in `dir`, compiled
    /// through `cache_dir`.
    pub(super) fn new(worker: &str, dir: PathBuf, cache_dir: Option<PathBuf>) -> Self {
        Self {
            worker: worker.to_owned(),
            dir,
            cache_dir,
            host: Mutex::new(None),
            loaded: Mutex::new(HashMap::new()),
            fetching: Mutex::new(()),
        }
    }

    /// Forgets the loaded functions (their instances): the job is over.
    /// The bytes stay in `<data-dir>/components` and the machine code in
    /// the cache, so a later job loads them without a fetch or a compile.
    pub(super) fn forget_loaded(&self) {
        lock(&self.loaded).clear();
    }

    /// `functions` of a deploy as its stage plan binds them, each loaded
    /// at its first call with bytes from `source` when this worker holds
    /// none of its hash.
    ///
    /// # Errors
    ///
    /// One line naming the function: a hash that is not 64 lowercase hex
    /// digits, a type that is not an Arrow type.
    pub(super) fn function_set(
        self: &Arc<Self>,
        functions: &[RemoteFunction],
        source: &Arc<dyn ComponentSource>,
    ) -> Result<FunctionSet, String> {
        let mut out = Vec::with_capacity(functions.len());
        for f in functions {
            if !is_sha256_hex(&f.sha256) {
                return Err(format!(
                    "scalar function `{}`: `{}` is not a SHA-256 (64 lowercase hex digits)",
                    f.name,
                    crate::plugin::one_line(&f.sha256, 80)
                ));
            }
            let parse = |t: &str| {
                DataType::from_str(t).map_err(|e| {
                    format!(
                        "scalar function `{}`: `{}` is not an Arrow type: {e}",
                        f.name,
                        crate::plugin::one_line(t, 80)
                    )
                })
            };
            let arguments = f
                .arguments
                .iter()
                .map(|t| parse(t))
                .collect::<Result<Vec<_>, _>>()?;
            let returns = parse(&f.returns)?;
            let key =
                postcard::to_stdvec(f).map_err(|e| format!("scalar function `{}`: {e}", f.name))?;
            let slot = lock(&self.loaded).entry(key).or_default().clone();
            out.push(SqlFunction {
                name: f.name.clone(),
                arguments: arguments.clone(),
                returns: returns.clone(),
                sha256: f.sha256.clone(),
                callee: Arc::new(WorkerCallee {
                    functions: self.clone(),
                    remote: f.clone(),
                    arguments,
                    returns,
                    slot,
                    source: source.clone(),
                }),
            });
        }
        Ok(out.into())
    }

    /// The process's plugin host, made at the first call.
    fn host(&self) -> Result<PluginHost, String> {
        let mut host = lock(&self.host);
        if let Some(h) = &*host {
            return Ok(h.clone());
        }
        let made = PluginHost::new(HostOptions {
            cache_dir: self.cache_dir.clone(),
        })
        .map_err(|e| e.to_string())?;
        *host = Some(made.clone());
        Ok(made)
    }

    /// Where the bytes of `sha256` are kept.
    fn file(&self, sha256: &str) -> PathBuf {
        self.dir.join(format!("{sha256}.wasm"))
    }

    /// The bytes of `f`'s component, of exactly its hash: kept ones, or
    /// fetched from `source` (then kept).
    fn bytes(&self, f: &RemoteFunction, source: &dyn ComponentSource) -> Result<Vec<u8>, String> {
        let _one_at_a_time = lock(&self.fetching);
        let file = self.file(&f.sha256);
        if file.exists() {
            match crate::files::read_regular_file(&file, crate::files::MAX_COMPONENT_BYTES) {
                Ok(bytes) if sha256_hex(&bytes) == f.sha256 => return Ok(bytes),
                Ok(_) => {
                    tracing::warn!(worker = %self.worker, file = %file.display(), "a kept component does not have the hash it is named by; fetching it again")
                }
                Err(e) => {
                    tracing::warn!(worker = %self.worker, file = %file.display(), "a kept component cannot be read ({e}); fetching it again")
                }
            }
        }
        let bytes = source.fetch(&f.sha256).map_err(|e| {
            format!(
                "worker `{}` cannot fetch the component of scalar function `{}` (sha256 {}) from the coordinator: {e}",
                self.worker, f.name, f.sha256
            )
        })?;
        let got = sha256_hex(&bytes);
        if got != f.sha256 {
            tracing::warn!(worker = %self.worker, function = %f.name, expected = %f.sha256, got = %got, "refused a component whose hash is not the job's");
            return Err(format!(
                "worker `{}` refuses the component of scalar function `{}`: the {} bytes the coordinator sent have sha256 {got}, but the job's component ({}) has sha256 {}; it does not run them",
                self.worker,
                f.name,
                bytes.len(),
                f.component,
                f.sha256
            ));
        }
        tracing::info!(worker = %self.worker, function = %f.name, sha256 = %f.sha256, bytes = bytes.len(), "fetched a component from the coordinator");
        if let Err(e) = self.keep(&file, &bytes) {
            // Kept or not, the checked bytes in memory are what runs.
            tracing::warn!(worker = %self.worker, file = %file.display(), "cannot keep the component ({e}); it will be fetched again by the next process");
        }
        Ok(bytes)
    }

    /// Writes `bytes` to `file` beside it first, then renames: no reader
    /// ever sees half a component.
    fn keep(&self, file: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        let staging = file.with_extension(format!("tmp-{}", std::process::id()));
        std::fs::write(&staging, bytes)?;
        std::fs::rename(&staging, file)
    }
}

/// A function of a deploy: loads its component at the first call on this
/// worker, then calls it.
struct WorkerCallee {
    functions: Arc<WorkerFunctions>,
    remote: RemoteFunction,
    /// The deploy's signature, parsed.
    arguments: Vec<DataType>,
    returns: DataType,
    slot: Slot,
    source: Arc<dyn ComponentSource>,
}

impl std::fmt::Debug for WorkerCallee {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerCallee")
            .field("function", &self.remote.name)
            .field("sha256", &self.remote.sha256)
            .finish_non_exhaustive()
    }
}

impl WorkerCallee {
    /// The loaded function: the slot's, or loaded now (other tasks
    /// calling it wait for this load rather than making their own).
    fn function(&self) -> Result<Arc<ScalarFunction>, String> {
        let mut slot = lock(&self.slot);
        if let Some(f) = &*slot {
            return Ok(f.clone());
        }
        // On a thread of its own: the caller runs inside the stage's
        // async runtime, and fetching blocks on the worker's.
        let loaded = std::thread::scope(|s| {
            s.spawn(|| self.load())
                .join()
                .unwrap_or_else(|_| Err("the thread loading it panicked".to_string()))
        })
        .map_err(|e| {
            format!(
                "scalar function `{}` (component {}, sha256 {}) on worker `{}`: {e}",
                self.remote.name, self.remote.component, self.remote.sha256, self.functions.worker
            )
        })?;
        *slot = Some(loaded.clone());
        Ok(loaded)
    }

    fn load(&self) -> Result<Arc<ScalarFunction>, String> {
        let f = &self.remote;
        let bytes = self.functions.bytes(f, &*self.source)?;
        let spec = PluginSpec {
            name: f.name.clone(),
            path: self.functions.file(&f.sha256),
            kind: PluginKind::ScalarFunction,
            config: f.config.clone(),
            dirs: f.dirs.clone(),
            limits: Limits {
                call_timeout: std::time::Duration::from_millis(f.call_timeout_ms),
                memory_bytes: f.memory_bytes,
                on_trap: f.on_trap,
                ..Limits::default()
            },
        };
        let host = self.functions.host()?;
        let function = host
            .load_bytes(&spec, &bytes)
            .and_then(|loaded| loaded.scalar_function())
            .map_err(|e| e.to_string())?;
        tracing::info!(
            worker = %self.functions.worker,
            function = %f.name,
            sha256 = %f.sha256,
            cache = ?function.plugin().cache_outcome(),
            "loaded a scalar function"
        );
        let sig = function.signature();
        if sig.arguments != self.arguments || sig.returns != self.returns || !sig.deterministic {
            return Err(format!(
                "the component declares {:?} -> {} (deterministic: {}), not the job's {:?} -> {}",
                sig.arguments, sig.returns, sig.deterministic, self.arguments, self.returns
            ));
        }
        Ok(function)
    }
}

impl ScalarCallee for WorkerCallee {
    fn call(&self, arguments: &[ArrayRef], rows: usize) -> Result<ArrayRef, String> {
        let function = self.function()?;
        function.call(arguments, rows).map_err(|e| {
            format!(
                "scalar function `{}` (component {}), a batch of {rows} rows: {e}",
                self.remote.name, self.remote.component
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A source that answers every fetch with `bytes`.
    struct Fixed(Vec<u8>);

    impl ComponentSource for Fixed {
        fn fetch(&self, _sha256: &str) -> Result<Vec<u8>, String> {
            Ok(self.0.clone())
        }
    }

    fn remote(sha256: &str) -> RemoteFunction {
        RemoteFunction {
            name: "f".into(),
            component: "/jobs/f.wasm".into(),
            sha256: sha256.into(),
            arguments: vec!["Int64".into()],
            returns: "Decimal128(15, 2)".into(),
            config: Vec::new(),
            dirs: Vec::new(),
            call_timeout_ms: 1000,
            memory_bytes: 1 << 20,
            on_trap: crate::plugin::TrapPolicy::Fail,
        }
    }

    #[test]
    fn bytes_of_another_hash_are_refused_naming_both_and_never_kept() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let functions = WorkerFunctions::new("w0", tmp.path().join("components"), None);
        let want = sha256_hex(b"the real component");
        let e = functions
            .bytes(&remote(&want), &Fixed(b"something else".to_vec()))
            .expect_err("refused");
        let got = sha256_hex(b"something else");
        for needle in ["`f`", &want, &got, "/jobs/f.wasm", "does not run them"] {
            assert!(e.contains(needle), "`{needle}` in: {e}");
        }
        assert!(!functions.file(&want).exists(), "nothing kept");
        // The right bytes are kept, and then read back without a fetch.
        let ok = functions
            .bytes(&remote(&want), &Fixed(b"the real component".to_vec()))
            .expect("the right bytes");
        assert_eq!(ok, b"the real component");
        let again = functions
            .bytes(&remote(&want), &Fixed(b"never asked".to_vec()))
            .expect("kept bytes");
        assert_eq!(again, b"the real component");
        // A kept file that lost its hash is fetched again.
        std::fs::write(functions.file(&want), b"damaged").expect("damage");
        let e = functions
            .bytes(&remote(&want), &Fixed(b"fetched anew".to_vec()))
            .expect_err("refused");
        assert!(e.contains(&sha256_hex(b"fetched anew")), "{e}");
    }

    #[test]
    fn a_deploy_with_a_bad_hash_or_type_is_refused_naming_the_function() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let functions = Arc::new(WorkerFunctions::new("w0", tmp.path().to_path_buf(), None));
        let source: Arc<dyn ComponentSource> = Arc::new(Fixed(Vec::new()));
        let e = functions
            .function_set(&[remote("../../etc/passwd")], &source)
            .expect_err("refused");
        assert!(e.contains("`f`") && e.contains("not a SHA-256"), "{e}");
        let mut bad = remote(&"a".repeat(64));
        bad.returns = "Decimal999".into();
        let e = functions
            .function_set(&[bad], &source)
            .expect_err("refused");
        assert!(e.contains("`f`") && e.contains("not an Arrow type"), "{e}");
        let set = functions
            .function_set(&[remote(&"a".repeat(64))], &source)
            .expect("a good deploy");
        assert_eq!(set[0].returns, DataType::Decimal128(15, 2));
    }
}
