//! The state a running job shares with its web page: one [`JobView`]
//! behind a mutex, updated where the job already records its facts (each
//! event the recorder appends, each deployment the scheduler counts), and
//! a latency histogram of durable appends. Readers (the HTTP handlers)
//! clone the view and count it up outside the job's path.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;

use super::view::{JobView, StandbyView};
use crate::events::{JobEvent, Replay};
use crate::graph::JobGraph;

/// Upper bounds of the durable-append latency buckets, seconds: 100 µs to
/// about 3.3 s, doubling.
fn append_buckets() -> impl Iterator<Item = f64> {
    prometheus_client::metrics::histogram::exponential_buckets(0.0001, 2.0, 16)
}

/// Upper bounds of the plugin call latency buckets, seconds: 10 µs to
/// about 21 s, doubling.
fn call_buckets() -> impl Iterator<Item = f64> {
    prometheus_client::metrics::histogram::exponential_buckets(0.000_01, 2.0, 22)
}

fn call_histogram() -> Histogram {
    Histogram::new(call_buckets())
}

/// Plugin call latency histograms, labelled `plugin` and `call`.
pub type PluginCalls = Family<Vec<(String, String)>, Histogram, fn() -> Histogram>;

/// The heartbeats of one worker process, as `/metrics` shows them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerBeats {
    /// The worker's id.
    pub worker: String,
    /// Heartbeats the coordinator accepted from it.
    pub received: u64,
    /// Time since the last one (or since it registered, before the first).
    pub since_last: Duration,
}

/// Where [`LiveJob`] asks for the workers' heartbeats at each scrape (the
/// job layer installs one reading the coordinator's worker registry).
pub type HeartbeatSource = Box<dyn Fn() -> Vec<WorkerBeats> + Send + Sync>;

/// A running job as the page, `/api/job` and `/metrics` see it.
pub struct LiveJob {
    view: Mutex<JobView>,
    /// The coordinator run appending now (its log segment's number).
    epoch: AtomicU32,
    /// Appends to the event log this process made.
    appends: AtomicU64,
    /// Durable appends (append, then wait for the fsync), seconds.
    durable_append: Histogram,
    /// Calls into plugins, seconds, by plugin and WIT function.
    plugin_calls: PluginCalls,
    /// With worker processes: their heartbeats.
    heartbeats: Mutex<Option<HeartbeatSource>>,
}

impl Default for LiveJob {
    fn default() -> Self {
        Self::new()
    }
}

impl LiveJob {
    /// Before the job file is read: an empty view.
    #[must_use]
    pub fn new() -> Self {
        Self {
            view: Mutex::new(JobView::new("")),
            epoch: AtomicU32::new(0),
            appends: AtomicU64::new(0),
            durable_append: Histogram::new(append_buckets()),
            plugin_calls: Family::new_with_constructor(call_histogram),
            heartbeats: Mutex::new(None),
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut JobView) -> R) -> R {
        // A panicking reader leaves a view that is still whole: go on.
        let mut view = self
            .view
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&mut view)
    }

    /// The job file was read: job `job` with `graph`'s vertices and edges.
    pub fn start(&self, job: &str, graph: &JobGraph) {
        let mut view = JobView::from_graph(job, graph);
        view.status = "starting".to_owned();
        self.with(|v| *v = view);
    }

    /// `--ha`: this coordinator is a standby for job `job`; `standby` says
    /// who leads. Ignored once it leads ([`Self::leading`]) or the job
    /// started, so a late answer from etcd cannot turn a leader's page
    /// back into a standby's.
    pub fn standby(&self, job: &str, standby: StandbyView) {
        self.with(|v| {
            if v.status == "unknown" || v.status == "standby" {
                job.clone_into(&mut v.job);
                v.status = "standby".to_owned();
                v.standby = Some(standby);
            }
        });
    }

    /// `--ha`: etcd names `standby`'s leader now; applied only while this
    /// coordinator is a standby already ([`Self::standby`] was told by the
    /// campaign), so a coordinator about to win never names itself.
    pub fn leader_changed(&self, standby: StandbyView) {
        self.with(|v| {
            if v.status == "standby" {
                v.standby = Some(standby);
            }
        });
    }

    /// `--ha`: this coordinator won the election; the job starts.
    pub fn leading(&self) {
        self.with(|v| {
            v.standby = None;
            if v.status == "unknown" || v.status == "standby" {
                v.status = "starting".to_owned();
            }
        });
    }

    /// The log was opened by coordinator run `epoch`: folds what it
    /// replayed (earlier runs) into the view.
    pub fn replayed(&self, replay: &Replay, epoch: u32) {
        self.epoch.store(epoch, Ordering::Relaxed);
        self.with(|v| {
            for e in &replay.events {
                v.apply(&e.event, e.position.attempt);
            }
            v.epoch = epoch;
            v.status = "running".to_owned();
        });
    }

    /// The run appended `event` to the log.
    pub fn appended(&self, event: &JobEvent) {
        self.appends.fetch_add(1, Ordering::Relaxed);
        let epoch = self.epoch.load(Ordering::Relaxed);
        self.with(|v| v.apply(event, epoch));
    }

    /// A durable append (write and fsync wait) took `took`.
    pub fn durable_append_took(&self, took: Duration) {
        self.durable_append.observe(took.as_secs_f64());
    }

    /// A call into plugin `plugin`'s WIT function `call` took `took`
    /// (the job layer forwards `crate::plugin`'s call observer here).
    pub fn plugin_call(&self, plugin: &str, call: &str, took: Duration) {
        self.plugin_calls
            .get_or_create(&vec![
                ("plugin".to_owned(), plugin.to_owned()),
                ("call".to_owned(), call.to_owned()),
            ])
            .observe(took.as_secs_f64());
    }

    /// The recovery of this run took `took` (from the decision to recover,
    /// after the log was replayed, to `RecoveryFinished` made durable).
    pub fn recovery_took(&self, took: Duration) {
        let ms = took.as_millis() as u64;
        self.with(|v| {
            if let Some(r) = &mut v.recovery {
                r.duration_ms = Some(ms);
            }
        });
    }

    /// A deployment: see [`JobView::task_started`].
    pub fn task_started(&self, vertex: &str, subtask: u32, attempt: u32) {
        let epoch = self.epoch.load(Ordering::Relaxed);
        self.with(|v| v.task_started(vertex, subtask, attempt, epoch));
    }

    /// A failed attempt: see [`JobView::task_failed`].
    pub fn task_failed(&self, vertex: &str, subtask: u32, attempt: u32, reason: &str) {
        let epoch = self.epoch.load(Ordering::Relaxed);
        self.with(|v| v.task_failed(vertex, subtask, attempt, reason, epoch));
    }

    /// A source's input so far: see [`JobView::input_progress`].
    pub fn input_progress(&self, vertex: &str, input: super::view::InputView) {
        self.with(|v| v.input_progress(vertex, input));
    }

    /// A job vertex's parallelism: see [`JobView::vertex_initialized`].
    pub fn vertex_initialized(&self, vertex: &str, parallelism: u32) {
        self.with(|v| v.vertex_initialized(vertex, parallelism));
    }

    /// The run ended: `status` is `finished`, `failed`, `stopped` or
    /// `cancelled` (with `error` saying why when not finished).
    pub fn ended(&self, status: &str, error: Option<&str>) {
        self.with(|v| {
            v.status = status.to_owned();
            v.error = error.map(str::to_owned);
        });
    }

    /// A counted copy of the view, taken under the lock.
    #[must_use]
    pub fn snapshot(&self) -> JobView {
        let mut view = self.with(|v| v.clone());
        view.recount();
        view
    }

    /// The job runs on worker processes: `source` tells their heartbeats
    /// (replacing any earlier source).
    pub fn watch_heartbeats(&self, source: HeartbeatSource) {
        *self
            .heartbeats
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(source);
    }

    /// The workers' heartbeats now, by worker id (none without worker
    /// processes).
    #[must_use]
    pub fn worker_heartbeats(&self) -> Vec<WorkerBeats> {
        self.heartbeats
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .as_ref()
            .map(|source| source())
            .unwrap_or_default()
    }

    /// Event log appends this process made.
    #[must_use]
    pub fn appends(&self) -> u64 {
        self.appends.load(Ordering::Relaxed)
    }

    /// The durable-append latency histogram (shared: a clone observes into
    /// the same buckets).
    #[must_use]
    pub fn durable_append_histogram(&self) -> Histogram {
        self.durable_append.clone()
    }

    /// The plugin call latency histograms (shared, as
    /// [`Self::durable_append_histogram`]).
    #[must_use]
    pub fn plugin_call_histograms(&self) -> PluginCalls {
        self.plugin_calls.clone()
    }
}
