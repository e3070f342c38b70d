//! What one plugin's wasmtime `Store` holds: its WASI context (nothing
//! granted unless configured), its memory cap, and the host side of the
//! imported interfaces (`host-log`, `enumerator-context`,
//! `job-shuffle-context`; `object-store` is in `objects.rs`).

use std::collections::BTreeSet;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use wasmtime::ResourceLimiter;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::actions::EnumeratorAction;
use super::bindings::enumerator::coordhost::plugin::{enumerator_context, host_log, types};
use super::output::{LineBudget, MAX_LINE_BYTES, one_line};
use super::{PluginError, PluginSpec};

/// Whether WASI calls of a plugin run on the thread that runs the plugin
/// (`WasiCtxBuilder::allow_blocking_current_thread`): they do, nothing in
/// them blocks (files of granted directories are regular files, see
/// `open_guard.rs`, and waits are bounded by `deadline.rs`).
pub const ALLOW_BLOCKING_CURRENT_THREAD: bool = true;

/// The data of one plugin store.
pub struct PluginState {
    /// The plugin's name in the job file, used to tag its log lines.
    pub plugin: Arc<str>,
    wasi: WasiCtx,
    table: ResourceTable,
    pub limiter: MemoryCap,
    /// The plugin's most recent stderr lines (a panic message ends up here
    /// before the trap), cleared before each call.
    pub stderr_tail: StderrTail,
    /// State of `enumerator-context` (unused by shuffle masters).
    pub context: EnumeratorContextState,
    /// Rate limit of the plugin's lines (stdout, stderr, `host-log`).
    budget: LineBudget,
    /// When the call in progress must end; WASI waits give up then
    /// (see `plugin/deadline.rs`).
    pub call_deadline: Option<std::time::Instant>,
    /// What `job-shuffle-context` answers (shuffle masters only); `None`:
    /// the job runs on embedded workers.
    pub job_shuffle_context: Option<Arc<dyn super::JobShuffleContext>>,
    /// The plugin's store grants: where `object-store` calls may reach
    /// (`plugin/objects.rs`).
    pub stores: Vec<coordhost_io::objstore::StoreGrant>,
    /// The plugin's granted directories: where `local-files` calls may
    /// reach (`plugin/local_files.rs`), the same WASI preopens.
    pub dirs: Vec<coordhost_io::grant::DirGrant>,
}

/// The host side of `enumerator-context` for one enumerator instance.
#[derive(Debug, Default)]
pub struct EnumeratorContextState {
    /// Source parallelism.
    pub parallelism: u32,
    /// Subtasks with a registered reader.
    pub readers: BTreeSet<u32>,
    /// Context calls made during the current plugin call, in order.
    pub actions: Vec<EnumeratorAction>,
    /// Splits and split bytes taken during the current call; past the
    /// bounds of `actions::MAX_SPLITS_PER_CALL` and
    /// `actions::MAX_SPLIT_BYTES_PER_CALL` nothing more is kept and
    /// `over_bound` is set, so a plugin cannot grow host memory.
    pub taken: (u64, u64),
    /// Set when the current call went past a bound.
    pub over_bound: bool,
}

impl EnumeratorContextState {
    /// Starts a plugin call: no actions, nothing taken.
    pub fn begin_call(&mut self) {
        self.actions.clear();
        self.taken = (0, 0);
        self.over_bound = false;
    }

    /// Counts `items` (splits and context calls) and `bytes` against the
    /// per-call bounds; whether they may be kept.
    fn take(&mut self, items: u64, bytes: u64) -> bool {
        if self.over_bound {
            return false;
        }
        self.taken.0 = self.taken.0.saturating_add(items);
        self.taken.1 = self.taken.1.saturating_add(bytes);
        if self.taken.0 > super::actions::MAX_SPLITS_PER_CALL
            || self.taken.1 > super::actions::MAX_SPLIT_BYTES_PER_CALL
        {
            self.over_bound = true;
            self.actions = Vec::new();
            return false;
        }
        true
    }
}

impl PluginState {
    /// Builds the state for a new store of `spec`'s plugin.
    ///
    /// # Errors
    /// [`PluginError::Grant`] when a granted directory cannot be opened.
    pub fn new(spec: &PluginSpec) -> Result<Self, PluginError> {
        let plugin: Arc<str> = Arc::from(spec.name.as_str());
        let mut wasi = WasiCtxBuilder::new();
        wasi.allow_blocking_current_thread(ALLOW_BLOCKING_CURRENT_THREAD);
        let budget = LineBudget::new(plugin.clone());
        wasi.stdout(TracingOutput::new(plugin.clone(), "stdout", budget.clone()));
        let stderr_tail = StderrTail::default();
        let mut stderr = TracingOutput::new(plugin.clone(), "stderr", budget.clone());
        stderr.tail = Some(stderr_tail.clone());
        wasi.stderr(stderr);
        for grant in &spec.dirs {
            let perms = if grant.writable {
                FsPerms::ReadWrite
            } else {
                FsPerms::ReadOnly
            };
            let guest = grant.host.to_string_lossy().into_owned();
            wasi.preopened_dir(&grant.host, guest, perms)
                .map_err(|e| PluginError::Grant {
                    plugin: spec.name.clone(),
                    dir: grant.host.clone(),
                    reason: e.to_string(),
                })?;
        }
        Ok(Self {
            plugin,
            wasi: wasi.build(),
            table: ResourceTable::new(),
            limiter: MemoryCap::new(spec.limits.memory_bytes),
            stderr_tail,
            context: EnumeratorContextState::default(),
            budget,
            call_deadline: None,
            job_shuffle_context: None,
            stores: spec.stores.clone(),
            dirs: spec.dirs.clone(),
        })
    }

    /// The store's resource table (for the deadline-aware `wasi:io/poll`
    /// and the non-blocking `open-at`).
    pub fn table_mut(&mut self) -> &mut ResourceTable {
        &mut self.table
    }

    /// Whether one more host line about this plugin fits its line budget.
    pub fn admit_line(&self) -> bool {
        self.budget.admit()
    }
}

impl WasiView for PluginState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// A per-store memory cap. Growing a memory past it traps the call and
/// sets `hit`, so the host can tell a memory-cap trap from a plugin bug.
pub struct MemoryCap {
    cap_bytes: usize,
    pub hit: bool,
}

impl MemoryCap {
    fn new(cap_bytes: u64) -> Self {
        Self {
            cap_bytes: usize::try_from(cap_bytes).unwrap_or(usize::MAX),
            hit: false,
        }
    }
}

/// Most table elements a plugin may have: far beyond any real plugin.
const MAX_TABLE_ELEMENTS: usize = 1 << 20;

impl ResourceLimiter for MemoryCap {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.cap_bytes {
            self.hit = true;
            wasmtime::bail!(
                "memory cap of {} bytes reached (wanted {desired})",
                self.cap_bytes
            );
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= MAX_TABLE_ELEMENTS)
    }
}

impl types::Host for PluginState {}

impl super::bindings::shuffle::coordhost::plugin::job_shuffle_context::Host for PluginState {
    fn reported_partitions(&mut self, job_id: String) -> Option<Vec<types::ReportedPartition>> {
        self.job_shuffle_context
            .as_ref()
            .and_then(|context| context.reported_partitions(&job_id))
    }
}

impl host_log::Host for PluginState {
    fn log(&mut self, level: types::LogLevel, message: String) {
        if !self.budget.admit() {
            return;
        }
        let plugin = &*self.plugin;
        let message = one_line(&message, MAX_LINE_BYTES);
        match level {
            types::LogLevel::Trace => {
                tracing::trace!(target: crate::LOG_TARGET, plugin, "{message}")
            }
            types::LogLevel::Debug => {
                tracing::debug!(target: crate::LOG_TARGET, plugin, "{message}")
            }
            types::LogLevel::Info => tracing::info!(target: crate::LOG_TARGET, plugin, "{message}"),
            types::LogLevel::Warn => tracing::warn!(target: crate::LOG_TARGET, plugin, "{message}"),
            types::LogLevel::Error => {
                tracing::error!(target: crate::LOG_TARGET, plugin, "{message}")
            }
        }
    }
}

impl enumerator_context::Host for PluginState {
    fn assign_splits(&mut self, assignment: Vec<(u32, Vec<types::Split>)>) {
        for (subtask, splits) in assignment {
            let bytes = splits.iter().map(super::actions::split_bytes).sum();
            if self.context.take(1 + splits.len() as u64, bytes) {
                self.context
                    .actions
                    .push(EnumeratorAction::Assign { subtask, splits });
            }
        }
    }

    fn signal_no_more_splits(&mut self, subtask: u32) {
        if self.context.take(1, 0) {
            self.context
                .actions
                .push(EnumeratorAction::NoMoreSplits { subtask });
        }
    }

    fn registered_readers(&mut self) -> Vec<u32> {
        self.context.readers.iter().copied().collect()
    }

    fn current_parallelism(&mut self) -> u32 {
        self.context.parallelism
    }
}

/// A plugin's stdout or stderr: whole lines go to `tracing` at `info`,
/// tagged with the plugin's name and the stream, cut to
/// [`MAX_LINE_BYTES`] and within the plugin's [`LineBudget`].
#[derive(Clone)]
struct TracingOutput {
    plugin: Arc<str>,
    stream: &'static str,
    partial: Arc<Mutex<Partial>>,
    tail: Option<StderrTail>,
    budget: LineBudget,
}

/// The line being written: its first [`MAX_LINE_BYTES`] bytes and how many
/// more there were.
#[derive(Default)]
struct Partial {
    bytes: Vec<u8>,
    cut: usize,
}

/// Most stderr lines kept for a trap message.
const TAIL_LINES: usize = 8;

/// The last lines a plugin wrote to stderr, shared with its stderr stream.
#[derive(Clone, Default)]
pub struct StderrTail(Arc<Mutex<std::collections::VecDeque<String>>>);

impl StderrTail {
    fn push(&self, line: String) {
        let mut lines = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if lines.len() == TAIL_LINES {
            lines.pop_front();
        }
        lines.push_back(line);
    }

    /// Forgets the lines written so far.
    pub fn clear(&self) {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clear();
    }

    /// The non-blank lines written since the last clear, joined by `; `.
    pub fn joined(&self) -> String {
        let lines = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        lines
            .iter()
            .map(String::as_str)
            .filter(|l| !l.trim().is_empty())
            .collect::<Vec<_>>()
            .join("; ")
    }
}

impl TracingOutput {
    fn new(plugin: Arc<str>, stream: &'static str, budget: LineBudget) -> Self {
        Self {
            plugin,
            stream,
            partial: Arc::default(),
            tail: None,
            budget,
        }
    }

    fn write_bytes(&self, bytes: &[u8]) {
        let mut partial = self
            .partial
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for chunk in bytes.split_inclusive(|&b| b == b'\n') {
            let (body, ends) = match chunk.split_last() {
                Some((&b'\n', body)) => (body, true),
                _ => (chunk, false),
            };
            let room = MAX_LINE_BYTES.saturating_sub(partial.bytes.len());
            let kept = body.len().min(room);
            partial.bytes.extend_from_slice(&body[..kept]);
            partial.cut += body.len() - kept;
            if ends {
                let line = std::mem::take(&mut *partial);
                self.emit(&line);
            }
        }
    }

    fn emit(&self, line: &Partial) {
        // The stderr tail keeps a panic message for the trap error even when
        // printing is over the rate.
        let mut text = one_line(&String::from_utf8_lossy(&line.bytes), MAX_LINE_BYTES);
        if line.cut > 0 {
            text.push_str(&format!("… ({} more bytes)", line.cut));
        }
        if self.budget.admit() {
            tracing::info!(target: crate::LOG_TARGET, plugin = &*self.plugin, stream = self.stream, "{text}");
        }
        if let Some(tail) = &self.tail {
            tail.push(text);
        }
    }
}

impl IsTerminal for TracingOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for TracingOutput {
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl tokio::io::AsyncWrite for TracingOutput {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.write_bytes(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
