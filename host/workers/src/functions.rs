//! A worker process's scalar functions (issue 27, item 3; docs/workers.md,
//! "Plugin components on workers").
//!
//! A deploy names the job's functions ([`RemoteFunction`]: name, signature
//! and the component with its settings), never their bytes. The first call
//! of a function on this worker loads its component through the worker's
//! one path for every component a task needs
//! ([`super::components::WorkerComponents::load`]: bytes kept or fetched
//! by hash, checked, compiled once through the cache), checks that it
//! declares the deploy's signature, and keeps it for the worker's later
//! tasks with its pool of idle instances, as the coordinator's embedded
//! tasks keep theirs: one load per function per worker process, whatever
//! the number of tasks.

use std::collections::HashMap;
use std::str::FromStr as _;
use std::sync::{Arc, Mutex};

use arrow_array::ArrayRef;
use arrow_schema::DataType;

use super::components::{ComponentSource, WorkerComponents, check_hash, lock, what};
use super::task::RemoteFunction;
use coordhost_data::sql::{FunctionSet, ScalarCallee, SqlFunction};
use coordhost_wasm::{PluginKind, ScalarFunction};

/// One function's loaded form, filled by its first call.
type Slot = Arc<Mutex<Option<Arc<ScalarFunction>>>>;

/// The scalar functions of one worker process.
pub(super) struct WorkerFunctions {
    /// The worker's components (bytes by hash, the plugin host).
    components: Arc<WorkerComponents>,
    /// Per function (its postcard form: the same name, hash, settings and
    /// signature): the loaded function once loaded.
    loaded: Mutex<HashMap<Vec<u8>, Slot>>,
}

impl WorkerFunctions {
    /// The functions of a worker whose components are `components`.
    pub(super) fn new(components: Arc<WorkerComponents>) -> Self {
        Self {
            components,
            loaded: Mutex::new(HashMap::new()),
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
            check_hash(&what(PluginKind::ScalarFunction, &f.name), &f.component)?;
            let parse = |t: &str| {
                DataType::from_str(t).map_err(|e| {
                    format!(
                        "scalar function `{}`: `{}` is not an Arrow type: {e}",
                        f.name,
                        coordhost_wasm::one_line(t, 80)
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
                sha256: f.component.sha256.clone(),
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
            .field("sha256", &self.remote.component.sha256)
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
                self.remote.name,
                self.remote.component.path,
                self.remote.component.sha256,
                self.functions.components.worker()
            )
        })?;
        *slot = Some(loaded.clone());
        Ok(loaded)
    }

    fn load(&self) -> Result<Arc<ScalarFunction>, String> {
        let f = &self.remote;
        let function = self
            .functions
            .components
            .load(
                &f.name,
                PluginKind::ScalarFunction,
                &f.component,
                &*self.source,
            )?
            .scalar_function()
            .map_err(|e| e.to_string())?;
        tracing::info!(
            target: crate::LOG_TARGET, worker = %self.functions.components.worker(),
            function = %f.name,
            sha256 = %f.component.sha256,
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
                self.remote.name, self.remote.component.path
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::components::tests::Fixed;
    use crate::task::RemoteComponent;

    fn remote(sha256: &str) -> RemoteFunction {
        RemoteFunction {
            name: "f".into(),
            arguments: vec!["Int64".into()],
            returns: "Decimal128(15, 2)".into(),
            component: RemoteComponent {
                path: "/jobs/f.wasm".into(),
                sha256: sha256.into(),
                config: Vec::new(),
                dirs: Vec::new(),
                call_timeout_ms: 1000,
                memory_bytes: 1 << 20,
                on_trap: coordhost_wasm::TrapPolicy::Fail,
            },
        }
    }

    #[test]
    fn a_deploy_with_a_bad_hash_or_type_is_refused_naming_the_function() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let components = Arc::new(WorkerComponents::new("w0", tmp.path().to_path_buf(), None));
        let functions = Arc::new(WorkerFunctions::new(components));
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
