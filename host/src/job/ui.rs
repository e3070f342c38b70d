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
    coordhost_io::stderr_line!(
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

/// The job runs on worker processes: `/metrics` shows their heartbeats as
/// `cluster`'s registry counts them.
pub(super) fn watch_heartbeats(live: &LiveJob, cluster: &crate::remote::Cluster) {
    let read = cluster.heartbeat_reader();
    live.watch_heartbeats(Box::new(move || {
        read()
            .into_iter()
            .map(|h| crate::ui::WorkerBeats {
                worker: h.worker,
                received: h.received,
                since_last: h.since_last,
            })
            .collect()
    }));
}

/// The standby's view of leader `term` announcing `address` (empty: it
/// serves no worker processes) on `etcd`.
pub(super) fn standby_view(
    term: u64,
    address: &str,
    etcd: &crate::ha::EtcdUrl,
) -> crate::ui::StandbyView {
    crate::ui::StandbyView {
        leader_term: term,
        leader_address: (!address.is_empty()).then(|| address.to_owned()),
        etcd: etcd.to_string(),
    }
}

/// How often a standby with `--ui` asks etcd who leads.
const LEADER_POLL: std::time::Duration = std::time::Duration::from_secs(1);

/// Asks etcd who leads `job` every [`LEADER_POLL`] from a thread of its
/// own and tells `live` (a standby's page follows a change of leader
/// while it waits); stops when the returned guard is dropped (this
/// coordinator leads, or gave up). A failed question is skipped: the page
/// keeps the last answer.
pub(super) fn watch_leader(
    live: Arc<LiveJob>,
    etcd: crate::ha::EtcdUrl,
    job: String,
) -> LeaderWatch {
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stopped = stop.clone();
    let spawned = std::thread::Builder::new()
        .name("coordhost-ui-leader".to_owned())
        .spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            while !stopped.load(std::sync::atomic::Ordering::SeqCst) {
                let asked = runtime.block_on(async {
                    tokio::time::timeout(LEADER_POLL, crate::ha::leader_address(&etcd, &job)).await
                });
                if stopped.load(std::sync::atomic::Ordering::SeqCst) {
                    break;
                }
                if let Ok(Ok(Some((term, address)))) = asked {
                    live.leader_changed(standby_view(term, &address, &etcd));
                }
                std::thread::sleep(LEADER_POLL);
            }
        });
    if let Err(e) = spawned {
        tracing::warn!("--ui: cannot watch the leader: {e}");
    }
    LeaderWatch(stop)
}

/// Stops [`watch_leader`]'s thread when dropped.
pub(super) struct LeaderWatch(Arc<std::sync::atomic::AtomicBool>);

impl Drop for LeaderWatch {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
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
        Ok(s) => live.ended(
            match s.status {
                JobStatus::Finished => "finished",
                JobStatus::Failed => "failed",
                JobStatus::Stopped => "stopped",
                JobStatus::Cancelled => "cancelled",
            },
            s.error.as_deref(),
        ),
        Err(e) => live.ended(
            match e {
                crate::scheduler::JobError::CancelledEarlier { .. } => "cancelled",
                _ => "failed",
            },
            Some(&crate::config::one_line(&e.to_string())),
        ),
    }
    if args.ui_linger_s > 0 {
        coordhost_io::stderr_line!(
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
    fn task_failed_for_good(&self, vertex: &str, subtask: u32, attempt: u32, reason: &str) {
        self.live.task_failed(vertex, subtask, attempt, reason);
        if let Some(p) = &self.inner {
            p.task_failed_for_good(vertex, subtask, attempt, reason);
        }
    }
    fn task_started(&self, vertex: &str, subtask: u32, attempt: u32) {
        self.live.task_started(vertex, subtask, attempt);
        if let Some(p) = &self.inner {
            p.task_started(vertex, subtask, attempt);
        }
    }
    fn input_progress(&self, vertex: &str, input: crate::scheduler::InputProgress) {
        self.live.input_progress(
            vertex,
            crate::ui::InputView {
                splits: input.splits,
                bytes: input.bytes,
                splits_left: input.splits_left,
            },
        );
        if let Some(p) = &self.inner {
            p.input_progress(vertex, input);
        }
    }
}
