//! `coordhost run --ui HOST:PORT` (docs/ui.md): starts the job's page,
//! `/api/job` and `/metrics` ([`crate::ui::serve`]) before the run, feeds
//! the [`LiveJob`] from the progress listener (deployments, failures,
//! parallelism) and the plugin call observer (latencies) while the
//! recorder feeds it the events, says at the end how
//! the run ended, and keeps serving `--ui-linger-s` seconds after it.

use std::sync::Arc;

use crate::scheduler::{JobStatus, ProgressListener, RunOptions, Summary};
use crate::ui::LiveJob;

/// The `--ui` flags of `coordhost run`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct UiArgs {
    /// Serve the job's web page (`/`), JSON (`/api/job`) and Prometheus
    /// metrics (`/metrics`) on HOST:PORT while it runs (port 0: any free
    /// port; the address is printed on stderr). Loopback only unless
    /// `--ui-public` (docs/ui.md).
    #[arg(long, value_name = "HOST:PORT")]
    pub ui: Option<String>,
    /// Allow `--ui` on an address other than loopback: anyone who reaches
    /// it sees the job (read-only; there is no authentication).
    #[arg(long, requires = "ui")]
    pub ui_public: bool,
    /// Keep serving `--ui` this many seconds after the job ended, whole
    /// seconds (the exit waits for it).
    #[arg(long, value_name = "S", default_value_t = 0, requires = "ui")]
    pub ui_linger_s: u64,
}

/// Starts the listener of `args.ui` (if any) and hooks its [`LiveJob`]
/// into `opts` (its progress listener wrapped so both are told).
///
/// # Errors
/// The one-line reason (a bad or non-loopback address, a failed bind):
/// bad input, exit 2.
pub(super) fn start(args: &UiArgs, opts: &mut RunOptions) -> Result<Option<Arc<LiveJob>>, String> {
    let Some(addr) = &args.ui else {
        return Ok(None);
    };
    let live = Arc::new(LiveJob::new());
    let server = crate::ui::serve(addr, args.ui_public, live.clone()).map_err(|e| e.to_string())?;
    eprintln!(
        "coordhost run: job page on http://{}/ (also /api/job, /metrics)",
        server.local_addr()
    );
    opts.progress = Some(Arc::new(UiProgress {
        inner: opts.progress.take(),
        live: live.clone(),
    }));
    opts.ui = Some(live.clone());
    // One job per process: the first observer stays (none was set before).
    let _first = crate::plugin::observe_calls(Arc::new(UiCalls(live.clone())));
    Ok(Some(live))
}

/// Tells `live` how the run ended and, with `--ui-linger-s`, keeps the
/// process (and so the listener) alive that long.
pub(super) fn finish(
    args: &UiArgs,
    live: Option<&LiveJob>,
    result: &Result<Summary, crate::scheduler::JobError>,
) {
    let Some(live) = live else { return };
    match result {
        Ok(s) => live.ended(s.status == JobStatus::Finished, s.error.as_deref()),
        Err(e) => live.ended(false, Some(&crate::config::one_line(&e.to_string()))),
    }
    if args.ui_linger_s > 0 {
        eprintln!(
            "coordhost run: the job page stays up for {} s",
            args.ui_linger_s
        );
        std::thread::sleep(std::time::Duration::from_secs(args.ui_linger_s));
    }
}

/// Plugin call latencies, told to the [`LiveJob`]'s histograms.
struct UiCalls(Arc<LiveJob>);

impl crate::plugin::CallObserver for UiCalls {
    fn plugin_call(&self, plugin: &str, call: &'static str, took: std::time::Duration) {
        self.0.plugin_call(plugin, call, took);
    }
}

/// The run's progress listener, and the [`LiveJob`] told the same.
struct UiProgress {
    inner: Option<Arc<dyn ProgressListener>>,
    live: Arc<LiveJob>,
}

impl ProgressListener for UiProgress {
    fn vertex_initialized(&self, vertex: &str, parallelism: u32) {
        self.live.vertex_initialized(vertex, parallelism);
        if let Some(p) = &self.inner {
            p.vertex_initialized(vertex, parallelism);
        }
    }
    fn task_finished(&self, vertex: &str, finished: u32, total: u32) {
        // The view learns of it from the `ExecutionFinished` record.
        if let Some(p) = &self.inner {
            p.task_finished(vertex, finished, total);
        }
    }
    fn task_failed(&self, vertex: &str, subtask: u32, attempt: u32, reason: &str) {
        self.live.task_failed(vertex, subtask, attempt, reason);
        if let Some(p) = &self.inner {
            p.task_failed(vertex, subtask, attempt, reason);
        }
    }
    fn task_started(&self, vertex: &str, subtask: u32, attempt: u32) {
        self.live.task_started(vertex, subtask, attempt);
        if let Some(p) = &self.inner {
            p.task_started(vertex, subtask, attempt);
        }
    }
}
