//! The plugin host: runs split enumerators and shuffle masters that are
//! WebAssembly components implementing the WIT package
//! `coordhost:plugin@0.1.3` (see `wit/types.wit`), and those of 0.1.2,
//! 0.1.1 and 0.1.0.
//!
//! One [`PluginHost`] per process owns the wasmtime `Engine`, one `Linker`
//! per plugin kind, an epoch ticker thread (deadlines) and the on-disk
//! compiled-component cache. [`PluginHost::load`] turns a [`PluginSpec`]
//! (one `[plugins.NAME]` entry of a job file) into a [`LoadedPlugin`]: the
//! component compiled, checked against the world its kind requires, and
//! pre-instantiated once. Each instance ([`SplitEnumerator`],
//! [`ShuffleMaster`]) gets its own `Store` with a memory cap, a deadline on
//! every call, and no WASI capability beyond the directories the spec grants.
//!
//! A trap (or a deadline or the memory cap) poisons only that instance's
//! store: the wrapper drops it and, when the spec's [`TrapPolicy`] is
//! [`TrapPolicy::Rebuild`] and a batch snapshot was taken, rebuilds the
//! store from the pre-instantiated component and restores the snapshot.
//! Expected failures are WIT `error` values and come back as
//! [`PluginError::Returned`].
//!
//! Flink's counterparts: `SplitEnumerator` + `SupportsBatchSnapshot`, and
//! `ShuffleMaster` with FLIP-383's snapshot and partition-report methods.

mod actions;
pub mod bindings;
mod cache;
mod call_thread;
mod deadline;
mod enumerator;
mod error;
mod function;
mod instance;
mod local_files;
mod objects;
mod observe;
mod open_guard;
mod output;
mod pool;
mod reader;
mod shuffle;
mod store;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{Config, Engine};

pub use actions::{
    EnumeratorAction, MAX_SPLIT_BYTES_PER_CALL, MAX_SPLIT_BYTES_TOTAL, MAX_SPLITS_PER_CALL,
    MAX_SPLITS_TOTAL, split_bytes,
};
pub use bindings::enumerator::coordhost::plugin::types::{
    Error as PluginFailure, ExecutionAttemptId, FileRange, PartitionDescriptor,
    PartitionWithMetrics, ProducerDescriptor, ReportedPartition, ResultPartitionId,
    ShuffleDescriptor, ShuffleMasterSnapshot, Split, SplitPayload,
};
pub use bindings::{WIT_PACKAGE, WIT_VERSION, WIT_VERSIONS_LOADED};
pub use cache::{CacheOutcome, CompileNotice, NOTICE_AFTER};
pub use coordhost_io::grant::DirGrant;
pub use enumerator::SplitEnumerator;
pub use error::PluginError;
pub use function::{FunctionSignature, MAX_FUNCTION_ARGUMENTS, ScalarFunction};
pub use observe::{CallObserver, observe_calls};
pub use output::{MAX_MESSAGE_BYTES, one_line};
pub use reader::{
    INVALID_SPLIT_PREFIX, MAX_BATCH_BYTES, MAX_SPLIT_BATCHES, MAX_SPLIT_BYTES, SourceReader,
};
pub use shuffle::{JobShuffleContext, PartitionPlace, ShuffleMaster};

/// The `tracing` target of everything the plugin host logs: every call into
/// a split enumerator or shuffle master (`host -> plugin` at debug, with
/// the plugin and the call), what plugins log and print, traps, rebuilds,
/// cache notices. `COORDHOST_LOG=coordhost::plugin=debug` turns the calls
/// on, as docs/write-a-plugin.md tells plugin authors: the name the plugin
/// host had as a module of the binary, kept when it became this crate.
pub const LOG_TARGET: &str = "coordhost::plugin";

use bindings::enumerator::{SplitEnumeratorPlugin, SplitEnumeratorPluginPre};
use bindings::function::ScalarFunctionPluginPre;
use bindings::reader::SourceReaderPluginPre;
use bindings::shuffle::{ShuffleMasterPlugin, ShuffleMasterPluginPre};
use store::PluginState;

/// How often the engine's epoch advances; deadlines are counted in these ticks.
const EPOCH_TICK: Duration = Duration::from_millis(5);

/// The kinds of plugin, one WIT world each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PluginKind {
    /// World `split-enumerator-plugin`: discovers and assigns source splits.
    SplitEnumerator,
    /// World `shuffle-master-plugin`: places result partitions and reports them.
    ShuffleMaster,
    /// World `scalar-function-plugin` of the package `coordhost:function`:
    /// a function SQL calls once per record batch (`[functions.NAME]`).
    ScalarFunction,
    /// World `source-reader-plugin` of the package `coordhost:reader`:
    /// reads the splits of a SQL table into Arrow record batches
    /// (`[tables.NAME] format = { reader = "PLUGIN" }`).
    SourceReader,
}

impl PluginKind {
    /// The WIT world name.
    pub fn world(self) -> &'static str {
        match self {
            Self::SplitEnumerator => "split-enumerator-plugin",
            Self::ShuffleMaster => "shuffle-master-plugin",
            Self::ScalarFunction => "scalar-function-plugin",
            Self::SourceReader => "source-reader-plugin",
        }
    }
}

impl fmt::Display for PluginKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::SplitEnumerator => "split-enumerator",
            Self::ShuffleMaster => "shuffle-master",
            Self::ScalarFunction => "scalar-function",
            Self::SourceReader => "source-reader",
        })
    }
}

/// What to do with a plugin instance after it traps, overruns its deadline
/// or hits its memory cap: the job file's `limits.on-trap`
/// (`"rebuild"` or `"fail"`, docs/job-file.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TrapPolicy {
    /// Rebuild the store from the pre-instantiated component and restore the
    /// last batch snapshot taken through the wrapper (a split enumerator
    /// without one is created afresh).
    Rebuild,
    /// Keep the instance unusable: every later call fails with
    /// [`PluginError::Poisoned`], so the job fails naming the plugin. The
    /// default, as docs/job-file.md promises.
    #[default]
    Fail,
}

/// Default of a plugin's `limits.split-wait-ms`: 3 minutes.
pub const DEFAULT_SPLIT_WAIT: Duration = Duration::from_secs(180);

/// Per-plugin limits: a `[plugins.NAME]` entry's `limits` table. The
/// defaults ([`Limits::default`]) are the job file's defaults
/// (docs/job-file.md), the one place they are written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Deadline of each call into the plugin (including instantiation),
    /// `call-timeout-ms`. Default 5 s.
    pub call_timeout: Duration,
    /// Cap of the plugin's linear memories, in bytes (`memory-mib`).
    /// Default 256 MiB.
    pub memory_bytes: u64,
    /// What happens after a trap (`on-trap`). Default [`TrapPolicy::Fail`].
    pub on_trap: TrapPolicy,
    /// For a split enumerator: how long a source subtask waits for the
    /// answer to one split request before its attempt fails naming the
    /// plugin (`split-wait-ms`, default [`DEFAULT_SPLIT_WAIT`]). Enforced
    /// by the scheduler, not by the plugin host.
    pub split_wait: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            call_timeout: Duration::from_secs(5),
            memory_bytes: 256 << 20,
            on_trap: TrapPolicy::default(),
            split_wait: DEFAULT_SPLIT_WAIT,
        }
    }
}

/// One plugin instance as configured: a `[plugins.NAME]` entry of the job
/// file, the one type of a plugin's settings (the job file loader,
/// `coordhost::config`, parses into it, paths resolved).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginSpec {
    /// The plugin's name in the job file; tags its log lines and errors.
    pub name: String,
    /// The component file (absolute when read from a job file).
    pub path: PathBuf,
    /// The kind the job file expects.
    pub kind: PluginKind,
    /// The plugin's configuration, passed to `create`, in file order
    /// (`${data_dir}`/`${job_dir}` substituted by the job file loader).
    pub config: Vec<(String, String)>,
    /// Directories granted; nothing else of the file system is visible.
    pub dirs: Vec<DirGrant>,
    /// Folders of object storage granted (`stores`, WIT 0.1.2's
    /// `object-store`); no other object is reachable.
    pub stores: Vec<coordhost_io::objstore::StoreGrant>,
    /// Sandbox limits.
    pub limits: Limits,
}

impl PluginSpec {
    /// A spec with no configuration, no grants and default limits, named
    /// after the file.
    pub fn bare(path: &Path, kind: PluginKind) -> Self {
        let name = path
            .file_stem()
            .map_or_else(|| "plugin".into(), |s| s.to_string_lossy().into_owned());
        Self {
            name,
            path: path.to_path_buf(),
            kind,
            config: Vec::new(),
            dirs: Vec::new(),
            stores: Vec::new(),
            limits: Limits::default(),
        }
    }
}

/// Options of the process-wide plugin host.
#[derive(Debug, Clone, Default)]
pub struct HostOptions {
    /// Directory of the compiled-component cache; `None` disables caching.
    pub cache_dir: Option<PathBuf>,
}

/// What `coordhost plugin check` reports about a component.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PluginInfo {
    /// The plugin kind (world).
    pub kind: PluginKind,
    /// The WIT world, e.g. `split-enumerator-plugin`.
    pub world: String,
    /// The WIT package, e.g. `coordhost:plugin`.
    pub package: String,
    /// The WIT package version the component targets.
    pub version: String,
    /// Whether the plugin supports batch snapshots (FLIP-383).
    pub supports_batch_snapshot: bool,
    /// Whether it imports `job-shuffle-context` (WIT 0.1.1): a shuffle
    /// master that reads the partitions worker processes report.
    pub reads_worker_reports: bool,
    /// A scalar function's signature in words, e.g. `(Int64) -> Int64,
    /// deterministic: true`; `None` for the other kinds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    /// The component's exports.
    pub exports: Vec<String>,
    /// Whether machine code came from the cache.
    #[serde(skip)]
    pub cache: CacheOutcome,
}

/// The process-wide plugin host. Cheap to clone.
#[derive(Clone)]
pub struct PluginHost {
    inner: Arc<HostInner>,
}

struct HostInner {
    engine: Engine,
    enumerator_linker: Linker<PluginState>,
    shuffle_linker: Linker<PluginState>,
    /// Scalar functions and source readers import nothing of coordhost's:
    /// WASI only.
    function_linker: Linker<PluginState>,
    cache: cache::ComponentCache,
    ticker: Arc<EpochTicker>,
}

/// The thread that advances the engine's epoch every [`EPOCH_TICK`]. Shared
/// by the [`PluginHost`] and every [`LoadedPlugin`] it made (and so by every
/// instance): the thread stops only when the last of them is dropped, so
/// deadlines keep firing after the host that loaded the plugins is gone
/// (issue 9, item 1: the scheduler drops its `PluginHost` once the plugins
/// are loaded).
struct EpochTicker {
    stop: Arc<AtomicBool>,
}

impl EpochTicker {
    fn start(engine: &Engine) -> Result<Self, PluginError> {
        let stop = Arc::new(AtomicBool::new(false));
        let (stopping, ticking) = (stop.clone(), engine.weak());
        std::thread::Builder::new()
            .name("coordhost-epoch".into())
            .spawn(move || {
                while !stopping.load(Ordering::Relaxed) {
                    std::thread::sleep(EPOCH_TICK);
                    match ticking.upgrade() {
                        Some(engine) => engine.increment_epoch(),
                        None => break,
                    }
                }
            })
            .map_err(|e| PluginError::Engine {
                reason: format!("cannot start the epoch thread: {e}"),
            })?;
        Ok(Self { stop })
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

impl PluginHost {
    /// Creates the engine, the linkers and the epoch ticker.
    ///
    /// # Errors
    /// [`PluginError::Engine`] when wasmtime cannot be configured.
    pub fn new(options: HostOptions) -> Result<Self, PluginError> {
        Self::with_compile_notice(options, None)
    }

    /// As [`PluginHost::new`], with `notice` called before each component
    /// is compiled (not when it comes from the cache).
    ///
    /// # Errors
    /// [`PluginError::Engine`] when wasmtime cannot be configured.
    pub fn with_compile_notice(
        options: HostOptions,
        notice: Option<CompileNotice>,
    ) -> Result<Self, PluginError> {
        let engine_error = |e: wasmtime::Error| PluginError::Engine {
            reason: format!("{e:#}"),
        };
        let mut config = Config::new();
        config.wasm_component_model(true);
        config.epoch_interruption(true);
        config.concurrency_support(false);
        config.cranelift_opt_level(wasmtime::OptLevel::Speed);
        let engine = Engine::new(&config).map_err(engine_error)?;

        let mut enumerator_linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut enumerator_linker).map_err(engine_error)?;
        deadline::add_to_linker(&mut enumerator_linker).map_err(engine_error)?;
        open_guard::add_to_linker(&mut enumerator_linker).map_err(engine_error)?;
        SplitEnumeratorPlugin::add_to_linker::<_, HasSelf<PluginState>>(
            &mut enumerator_linker,
            |s| s,
        )
        .map_err(engine_error)?;
        let mut shuffle_linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut shuffle_linker).map_err(engine_error)?;
        deadline::add_to_linker(&mut shuffle_linker).map_err(engine_error)?;
        open_guard::add_to_linker(&mut shuffle_linker).map_err(engine_error)?;
        ShuffleMasterPlugin::add_to_linker::<_, HasSelf<PluginState>>(&mut shuffle_linker, |s| s)
            .map_err(engine_error)?;

        let mut function_linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut function_linker).map_err(engine_error)?;
        deadline::add_to_linker(&mut function_linker).map_err(engine_error)?;
        open_guard::add_to_linker(&mut function_linker).map_err(engine_error)?;

        let ticker = Arc::new(EpochTicker::start(&engine)?);

        let mut cache = cache::ComponentCache::new(&engine, options.cache_dir);
        cache.notice = notice;
        Ok(Self {
            inner: Arc::new(HostInner {
                engine,
                enumerator_linker,
                shuffle_linker,
                function_linker,
                cache,
                ticker,
            }),
        })
    }

    /// The wasmtime engine (for benchmarks and tests).
    pub fn engine(&self) -> &Engine {
        &self.inner.engine
    }

    /// Loads `spec`'s component: reads it, compiles it (or takes it from the
    /// cache), checks that it implements the world of `spec.kind` at this
    /// host's WIT version, links it and pre-instantiates it.
    ///
    /// # Errors
    /// [`PluginError::Read`], [`PluginError::Empty`],
    /// [`PluginError::NotAComponent`], [`PluginError::Compile`],
    /// [`PluginError::WrongWorld`], [`PluginError::IncompatibleVersion`],
    /// [`PluginError::KindMismatch`], [`PluginError::Link`], or a fault while
    /// asking the plugin whether it supports batch snapshots.
    pub fn load(&self, spec: &PluginSpec) -> Result<LoadedPlugin, PluginError> {
        let (component, cache) = self.compile(&spec.path)?;
        self.load_compiled(spec, &component, cache)
    }

    /// As [`PluginHost::load`], from the component's `bytes` in memory
    /// rather than from `spec.path` (which then only names the component
    /// in messages and is never read): a worker process loads a scalar
    /// function's component from bytes whose SHA-256 it checked, so that
    /// nothing can change between the check and the compile.
    ///
    /// # Errors
    /// As [`PluginHost::load`]; [`PluginError::Read`] for more than
    /// [`coordhost_io::files::MAX_COMPONENT_BYTES`].
    pub fn load_bytes(&self, spec: &PluginSpec, bytes: &[u8]) -> Result<LoadedPlugin, PluginError> {
        if bytes.len() as u64 > coordhost_io::files::MAX_COMPONENT_BYTES {
            return Err(PluginError::Read {
                path: spec.path.clone(),
                source: std::io::Error::other(format!(
                    "{} bytes, more than the largest component coordhost loads ({} bytes)",
                    bytes.len(),
                    coordhost_io::files::MAX_COMPONENT_BYTES
                )),
            });
        }
        check_magic(&spec.path, bytes)?;
        let (component, cache) = self
            .inner
            .cache
            .load(&self.inner.engine, &spec.path, bytes)?;
        self.load_compiled(spec, &component, cache)
    }

    /// Checks, links and pre-instantiates a compiled `component` as `spec`.
    fn load_compiled(
        &self,
        spec: &PluginSpec,
        component: &Component,
        cache: CacheOutcome,
    ) -> Result<LoadedPlugin, PluginError> {
        let detected = detect_kind(&self.inner.engine, &spec.path, component)?;
        let kind = detected.kind;
        if kind != spec.kind {
            return Err(PluginError::KindMismatch {
                plugin: spec.name.clone(),
                path: spec.path.clone(),
                configured: spec.kind,
                found: kind,
            });
        }
        let link_error = |e: wasmtime::Error| PluginError::Link {
            plugin: spec.name.clone(),
            path: spec.path.clone(),
            reason: format!("{e:#}"),
        };
        let world_error = |e: wasmtime::Error| PluginError::WrongWorld {
            path: spec.path.clone(),
            missing: format!("{e:#}"),
        };
        let pre = match kind {
            PluginKind::SplitEnumerator => {
                let pre = self
                    .inner
                    .enumerator_linker
                    .instantiate_pre(component)
                    .map_err(link_error)?;
                KindPre::Enumerator(SplitEnumeratorPluginPre::new(pre).map_err(world_error)?)
            }
            PluginKind::ShuffleMaster => {
                let pre = self
                    .inner
                    .shuffle_linker
                    .instantiate_pre(component)
                    .map_err(link_error)?;
                KindPre::Shuffle(ShuffleMasterPluginPre::new(pre).map_err(world_error)?)
            }
            PluginKind::ScalarFunction => {
                let pre = self
                    .inner
                    .function_linker
                    .instantiate_pre(component)
                    .map_err(link_error)?;
                KindPre::Function(ScalarFunctionPluginPre::new(pre).map_err(world_error)?)
            }
            PluginKind::SourceReader => {
                let pre = self
                    .inner
                    .function_linker
                    .instantiate_pre(component)
                    .map_err(link_error)?;
                KindPre::Reader(SourceReaderPluginPre::new(pre).map_err(world_error)?)
            }
        };
        let mut loaded = LoadedInner {
            spec: spec.clone(),
            engine: self.inner.engine.clone(),
            _ticker: self.inner.ticker.clone(),
            pre,
            supports_batch_snapshot: false,
            cache,
            version: detected.version,
            reads_worker_reports: detected.reads_worker_reports,
            signature: None,
        };
        if kind == PluginKind::ScalarFunction {
            loaded.signature = Some(function::query_signature(&loaded)?);
        } else if kind == PluginKind::SourceReader {
            // A reader keeps no state between splits: nothing to snapshot.
            // Instantiating it once here finds a component that traps at
            // start before any job relies on it.
            reader::check_instantiates(&loaded)?;
        } else {
            loaded.supports_batch_snapshot = instance::query_supports_batch_snapshot(&loaded)?;
        }
        Ok(LoadedPlugin {
            inner: Arc::new(loaded),
        })
    }

    /// Checks a component file without a job: which world and version it
    /// implements and whether it supports batch snapshots.
    ///
    /// # Errors
    /// As [`PluginHost::load`], without [`PluginError::KindMismatch`].
    pub fn check(&self, path: &Path) -> Result<PluginInfo, PluginError> {
        let (component, _) = self.compile(path)?;
        let Detected {
            kind,
            exports,
            version,
            reads_worker_reports,
        } = detect_kind(&self.inner.engine, path, &component)?;
        let loaded = self.load(&PluginSpec::bare(path, kind))?;
        let signature = loaded.function_signature().map(|sig| {
            let args: Vec<String> = sig.arguments.iter().map(ToString::to_string).collect();
            format!(
                "({}) -> {}, deterministic: {}",
                args.join(", "),
                sig.returns,
                sig.deterministic
            )
        });
        Ok(PluginInfo {
            kind,
            world: kind.world().to_string(),
            package: match kind {
                PluginKind::ScalarFunction => bindings::FUNCTION_PACKAGE,
                PluginKind::SourceReader => bindings::READER_PACKAGE,
                PluginKind::SplitEnumerator | PluginKind::ShuffleMaster => WIT_PACKAGE,
            }
            .to_string(),
            signature,
            version,
            supports_batch_snapshot: loaded.supports_batch_snapshot(),
            reads_worker_reports,
            exports,
            cache: loaded.cache_outcome(),
        })
    }

    fn compile(&self, path: &Path) -> Result<(Component, CacheOutcome), PluginError> {
        // Only a regular file, its size bounded and its preamble checked
        // before the rest is read (docs/job-file.md, "Rules and their messages").
        use coordhost_io::files::{self, MAX_COMPONENT_BYTES, PREAMBLE_BYTES};
        let read_error = |source| PluginError::Read {
            path: path.to_path_buf(),
            source,
        };
        let (mut file, _) =
            files::open_regular_file(path, MAX_COMPONENT_BYTES).map_err(read_error)?;
        let head = files::read_head(&mut file, PREAMBLE_BYTES).map_err(read_error)?;
        check_magic(path, &head)?;
        let bytes = files::read_rest(&mut file, head, MAX_COMPONENT_BYTES).map_err(read_error)?;
        self.inner.cache.load(&self.inner.engine, path, &bytes)
    }
}

/// The 8-byte preamble of a WebAssembly component (magic, version 0x0d, layer 1).
const COMPONENT_PREAMBLE: [u8; 8] = [0x00, 0x61, 0x73, 0x6d, 0x0d, 0x00, 0x01, 0x00];
/// The 8-byte preamble of a core WebAssembly module (magic, version 1).
const CORE_MODULE_PREAMBLE: [u8; 8] = [0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00];

/// Checks that `bytes` (read from `path`) begin as a WebAssembly component.
///
/// # Errors
/// [`PluginError::Empty`] for no bytes; [`PluginError::NotAComponent`]
/// naming `path` for a core module (with how to make it a component), an
/// unsupported binary version or layer, or bytes that are not WebAssembly.
pub fn check_magic(path: &Path, bytes: &[u8]) -> Result<(), PluginError> {
    let not_component = |reason: &str| PluginError::NotAComponent {
        path: path.to_path_buf(),
        reason: reason.into(),
    };
    if bytes.is_empty() {
        return Err(PluginError::Empty {
            path: path.to_path_buf(),
        });
    }
    if bytes.starts_with(&COMPONENT_PREAMBLE) {
        return Ok(());
    }
    if bytes.starts_with(&CORE_MODULE_PREAMBLE) {
        return Err(not_component(
            "it is a core WebAssembly module; build for wasm32-wasip2 (or wrap it with `wasm-tools component new`)",
        ));
    }
    if bytes.starts_with(&COMPONENT_PREAMBLE[..4]) {
        return Err(not_component(
            "unsupported WebAssembly binary version or layer",
        ));
    }
    Err(not_component(
        "it does not start with the WebAssembly magic bytes `\\0asm`",
    ))
}

/// What [`detect_kind`] found in a component.
struct Detected {
    kind: PluginKind,
    /// The package version of its plugin export, one of [`bindings::WIT_VERSIONS_LOADED`].
    version: String,
    exports: Vec<String>,
    /// Whether it imports `job-shuffle-context` (0.1.1 shuffle masters that read worker reports).
    reads_worker_reports: bool,
}

/// Finds which plugin interface the component exports, at which version
/// (one of [`bindings::WIT_VERSIONS_LOADED`]), and whether it imports the
/// job shuffle context.
fn detect_kind(
    engine: &Engine,
    path: &Path,
    component: &Component,
) -> Result<Detected, PluginError> {
    let ty = component.component_type();
    let exports: Vec<String> = ty
        .exports(engine)
        .map(|(name, _)| name.to_string())
        .collect();
    let reads_worker_reports = ty.imports(engine).any(|(name, _)| {
        name.strip_prefix(bindings::JOB_SHUFFLE_CONTEXT_INTERFACE)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('@'))
    });
    for (interface, kind, loads) in [
        (
            bindings::SPLIT_ENUMERATOR_INTERFACE,
            PluginKind::SplitEnumerator,
            bindings::WIT_VERSIONS_LOADED,
        ),
        (
            bindings::SHUFFLE_MASTER_INTERFACE,
            PluginKind::ShuffleMaster,
            bindings::WIT_VERSIONS_LOADED,
        ),
        (
            bindings::SCALAR_FUNCTION_INTERFACE,
            PluginKind::ScalarFunction,
            &[bindings::FUNCTION_VERSION][..],
        ),
        (
            bindings::SOURCE_READER_INTERFACE,
            PluginKind::SourceReader,
            &[bindings::READER_VERSION][..],
        ),
    ] {
        for name in &exports {
            let Some(rest) = name.strip_prefix(interface) else {
                continue;
            };
            let found = match rest.strip_prefix('@') {
                Some(version) if loads.contains(&version) => {
                    return Ok(Detected {
                        kind,
                        version: version.to_string(),
                        exports,
                        reads_worker_reports,
                    });
                }
                Some(version) => version.to_string(),
                None if rest.is_empty() => "(unversioned)".to_string(),
                None => continue,
            };
            return Err(PluginError::IncompatibleVersion {
                path: path.to_path_buf(),
                interface: interface.to_string(),
                found,
                expected: loads.join(" or "),
            });
        }
    }
    Err(PluginError::WrongWorld {
        path: path.to_path_buf(),
        missing: format!(
            "it exports neither `{}@{v}` nor `{}@{v}` nor `{}@{f}` nor `{}@{r}` (its exports: {})",
            bindings::SPLIT_ENUMERATOR_INTERFACE,
            bindings::SHUFFLE_MASTER_INTERFACE,
            bindings::SCALAR_FUNCTION_INTERFACE,
            bindings::SOURCE_READER_INTERFACE,
            if exports.is_empty() {
                "none".to_string()
            } else {
                exports.join(", ")
            },
            v = WIT_VERSION,
            f = bindings::FUNCTION_VERSION,
            r = bindings::READER_VERSION,
        ),
    })
}

/// A compiled, checked and pre-instantiated plugin. Cheap to clone; makes
/// instances.
#[derive(Clone)]
pub struct LoadedPlugin {
    inner: Arc<LoadedInner>,
}

pub(crate) struct LoadedInner {
    pub(crate) spec: PluginSpec,
    pub(crate) engine: Engine,
    /// Keeps the epoch ticking while this plugin (or an instance) lives.
    _ticker: Arc<EpochTicker>,
    pub(crate) pre: KindPre,
    pub(crate) supports_batch_snapshot: bool,
    pub(crate) cache: CacheOutcome,
    /// The WIT package version the component targets.
    pub(crate) version: String,
    /// Whether it imports `job-shuffle-context`.
    pub(crate) reads_worker_reports: bool,
    /// A scalar function's signature, read at load.
    pub(crate) signature: Option<FunctionSignature>,
}

pub(crate) enum KindPre {
    Enumerator(SplitEnumeratorPluginPre<PluginState>),
    Shuffle(ShuffleMasterPluginPre<PluginState>),
    Function(ScalarFunctionPluginPre<PluginState>),
    Reader(SourceReaderPluginPre<PluginState>),
}

impl LoadedPlugin {
    /// The spec it was loaded from.
    pub fn spec(&self) -> &PluginSpec {
        &self.inner.spec
    }

    /// The plugin's name in the job file.
    pub fn name(&self) -> &str {
        &self.inner.spec.name
    }

    /// Whether the plugin supports batch snapshots (FLIP-383
    /// `SupportsBatchSnapshot`), as it answered at load.
    pub fn supports_batch_snapshot(&self) -> bool {
        self.inner.supports_batch_snapshot
    }

    /// The WIT package version the component targets, one of
    /// [`bindings::WIT_VERSIONS_LOADED`] (e.g. `0.1.0`).
    pub fn wit_version(&self) -> &str {
        &self.inner.version
    }

    /// Whether the component imports `job-shuffle-context` (a 0.1.1 shuffle
    /// master that reads the partitions worker processes report). Without
    /// it, the host answers FLIP-383's partition query from the workers'
    /// reports itself when the job runs on worker processes (docs/workers.md).
    pub fn reads_worker_reports(&self) -> bool {
        self.inner.reads_worker_reports
    }

    /// Whether the load compiled the component or found it cached.
    pub fn cache_outcome(&self) -> CacheOutcome {
        self.inner.cache
    }

    /// Creates a fresh split enumerator for a source of `parallelism` subtasks.
    ///
    /// # Errors
    /// [`PluginError::KindMismatch`] for a shuffle-master plugin; the
    /// plugin's own `create` error; a fault during instantiation.
    pub fn split_enumerator(&self, parallelism: u32) -> Result<SplitEnumerator, PluginError> {
        SplitEnumerator::create(self.clone(), parallelism, None)
    }

    /// Re-creates a split enumerator from a batch snapshot.
    ///
    /// # Errors
    /// As [`LoadedPlugin::split_enumerator`]; the plugin's `restore` error
    /// (e.g. `corrupt-snapshot`).
    pub fn restore_split_enumerator(
        &self,
        parallelism: u32,
        snapshot: &[u8],
    ) -> Result<SplitEnumerator, PluginError> {
        SplitEnumerator::create(self.clone(), parallelism, Some(snapshot.to_vec()))
    }

    /// Creates a shuffle master.
    ///
    /// # Errors
    /// [`PluginError::KindMismatch`] for an enumerator plugin; the plugin's
    /// own `create` error; a fault during instantiation.
    pub fn shuffle_master(&self) -> Result<ShuffleMaster, PluginError> {
        ShuffleMaster::create(self.clone())
    }

    /// A scalar function's signature as it declared it at load; `None`
    /// for the other kinds.
    pub fn function_signature(&self) -> Option<&FunctionSignature> {
        self.inner.signature.as_ref()
    }

    /// The callable scalar function (a pool of instances made as calls
    /// need them).
    ///
    /// # Errors
    /// [`PluginError::KindMismatch`] for a plugin of another kind.
    pub fn scalar_function(&self) -> Result<Arc<ScalarFunction>, PluginError> {
        ScalarFunction::new(self.clone())
    }

    /// The source reader for a table of `schema` (a pool of configured
    /// instances made as splits need them).
    ///
    /// # Errors
    /// [`PluginError::KindMismatch`] for a plugin of another kind.
    pub fn source_reader(
        &self,
        table: &str,
        schema: arrow_schema::SchemaRef,
    ) -> Result<Arc<SourceReader>, PluginError> {
        SourceReader::new(self.clone(), table, schema)
    }

    pub(crate) fn inner(&self) -> &LoadedInner {
        &self.inner
    }

    /// Asks one fresh, configured instance of this scalar function for its
    /// signature `times` times, in order (`plugin test` checks that the
    /// answers do not change; the WIT says they must not). Each answer is
    /// checked as at load.
    ///
    /// # Errors
    /// [`PluginError`]: the instance could not be made, or a call trapped,
    /// ran past its deadline or returned a signature the load would refuse.
    pub fn query_signatures(&self, times: usize) -> Result<Vec<FunctionSignature>, PluginError> {
        function::query_signatures(&self.inner, times)
    }
}

impl fmt::Debug for LoadedPlugin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoadedPlugin")
            .field("name", &self.inner.spec.name)
            .field("kind", &self.inner.spec.kind)
            .field(
                "supports_batch_snapshot",
                &self.inner.supports_batch_snapshot,
            )
            .finish_non_exhaustive()
    }
}
