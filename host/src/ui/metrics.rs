//! `GET /metrics`: the running job in the Prometheus text format
//! (OpenMetrics 1.0, as the `prometheus-client` crate encodes it). The
//! figures are counted from a snapshot of the [`LiveJob`] at each scrape;
//! only the durable-append histogram is observed as the job runs.
//!
//! | metric | type | labels | what |
//! |---|---|---|---|
//! | `coordhost_job_info` | gauge (1) | `job`, `status` | the job and where it stands |
//! | `coordhost_coordinator_epoch` | gauge | | the coordinator run (log segment) serving |
//! | `coordhost_ha_standby` | gauge | | 1 while this coordinator is an `--ha` standby, else 0 |
//! | `coordhost_ha_leader_term` | gauge | | the term of the leader a standby waits behind (0: not a standby) |
//! | `coordhost_tasks` | gauge | `state` | subtasks `created`, `running`, `finished` |
//! | `coordhost_vertex_parallelism` | gauge | `vertex` | subtasks of each job vertex |
//! | `coordhost_vertex_tasks_finished` | gauge | `vertex` | finished subtasks of each job vertex |
//! | `coordhost_attempts_started_total` | counter | | attempts deployed by this run (`tasks_run`) |
//! | `coordhost_attempts_finished_total` | counter | | attempts that finished in this run |
//! | `coordhost_attempts_failed_total` | counter | | attempts that failed in this run |
//! | `coordhost_task_resets_total` | counter | `reason` | resets in this run by reason (`reset_reasons`) |
//! | `coordhost_recovery_tasks_skipped` | gauge | | subtasks this run's recovery kept (`tasks_skipped`) |
//! | `coordhost_recovery_tasks_reset` | gauge | `reason` | subtasks this run's recovery reset, by reason |
//! | `coordhost_recovery_duration_seconds` | gauge | | how long this run's recovery took |
//! | `coordhost_event_log_appends_total` | counter | | records this run appended to the event log |
//! | `coordhost_event_log_durable_append_seconds` | histogram | | an append made durable: write, then wait for the fsync |
//! | `coordhost_plugin_call_seconds` | histogram | `plugin`, `call` | calls into plugins by plugin and WIT function |
//! | `coordhost_shuffle_bytes_written_total` | counter | | bytes this run's finished attempts wrote to result partitions |
//! | `coordhost_vertex_bytes_out` | gauge | `vertex` | bytes written by the subtasks that finished in this run (`bytes_out`) |
//! | `coordhost_worker_heartbeats_total` | counter | `worker` | heartbeats this coordinator accepted from each worker process that registered with it |
//! | `coordhost_worker_heartbeat_age_seconds` | gauge | `worker` | seconds since that worker's last accepted heartbeat (since it registered, before the first) |

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::live::LiveJob;
use super::view::{JobView, RunView};

type Labels = Vec<(String, String)>;

fn label(name: &str, value: &str) -> Labels {
    vec![(name.to_owned(), value.to_owned())]
}

fn counter(registry: &mut Registry, name: &str, help: &str, value: u64) {
    let c: Counter = Counter::default();
    c.inc_by(value);
    registry.register(name, help, c);
}

fn gauge(registry: &mut Registry, name: &str, help: &str, value: i64) {
    let g: Gauge = Gauge::default();
    g.set(value);
    registry.register(name, help, g);
}

fn clamp(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The Prometheus text of `live` now (content type
/// [`CONTENT_TYPE`]).
///
/// # Errors
/// Only if the encoder fails to write into a `String` (it does not).
pub fn render(live: &LiveJob) -> Result<String, std::fmt::Error> {
    let view = live.snapshot();
    let run = view
        .runs
        .iter()
        .find(|r| r.epoch == view.epoch)
        .cloned()
        .unwrap_or_default();
    let mut registry = Registry::default();
    register_job(&mut registry, &view);
    register_tasks(&mut registry, &view);
    register_vertices(&mut registry, &view);
    register_run(&mut registry, &run);
    register_recovery(&mut registry, &view);
    register_event_log(&mut registry, live);
    register_workers(&mut registry, live);

    let mut out = String::new();
    encode(&mut out, &registry)?;
    Ok(out)
}

/// The job and its status, the coordinator run serving and whether it is a
/// standby (and behind which term).
fn register_job(registry: &mut Registry, view: &JobView) {
    let info: Family<Labels, Gauge> = Family::default();
    info.get_or_create(&vec![
        ("job".to_owned(), view.job.clone()),
        ("status".to_owned(), view.status.clone()),
    ])
    .set(1);
    registry.register("coordhost_job_info", "The job and its status", info);
    gauge(
        registry,
        "coordhost_coordinator_epoch",
        "The coordinator run serving (its event log segment)",
        i64::from(view.epoch),
    );

    gauge(
        registry,
        "coordhost_ha_standby",
        "1 while this coordinator is a high-availability standby (another leads the job)",
        i64::from(view.standby.is_some()),
    );
    gauge(
        registry,
        "coordhost_ha_leader_term",
        "The term of the coordinator a standby waits behind (0: not a standby)",
        clamp(view.standby.as_ref().map_or(0, |s| s.leader_term)),
    );
}

/// Subtasks by state.
fn register_tasks(registry: &mut Registry, view: &JobView) {
    let tasks: Family<Labels, Gauge> = Family::default();
    for (state, n) in view.tasks_by_state() {
        tasks
            .get_or_create(&label("state", state.name()))
            .set(clamp(n));
    }
    registry.register("coordhost_tasks", "Subtasks by state", tasks);
}

/// Each job vertex's parallelism, finished subtasks and bytes written.
fn register_vertices(registry: &mut Registry, view: &JobView) {
    let parallelism: Family<Labels, Gauge> = Family::default();
    let finished: Family<Labels, Gauge> = Family::default();
    let bytes_out: Family<Labels, Gauge> = Family::default();
    for v in &view.vertices {
        bytes_out
            .get_or_create(&label("vertex", &v.id))
            .set(clamp(v.bytes_out));
        parallelism
            .get_or_create(&label("vertex", &v.id))
            .set(i64::from(v.parallelism));
        finished
            .get_or_create(&label("vertex", &v.id))
            .set(i64::from(v.finished));
    }
    registry.register(
        "coordhost_vertex_parallelism",
        "Subtasks of each job vertex (0: not decided yet)",
        parallelism,
    );
    registry.register(
        "coordhost_vertex_tasks_finished",
        "Finished subtasks of each job vertex",
        finished,
    );
    registry.register(
        "coordhost_vertex_bytes_out",
        "Bytes the subtasks of each job vertex that finished in this coordinator run wrote to result partitions",
        bytes_out,
    );
}

/// The counters of this coordinator run: bytes shuffled, attempts started,
/// finished and failed, and subtask resets by reason.
fn register_run(registry: &mut Registry, run: &RunView) {
    counter(
        registry,
        "coordhost_shuffle_bytes_written",
        "Bytes the attempts that finished in this coordinator run wrote to result partitions",
        run.bytes_shuffled,
    );

    counter(
        registry,
        "coordhost_attempts_started",
        "Attempts deployed by this coordinator run",
        run.attempts_started,
    );
    counter(
        registry,
        "coordhost_attempts_finished",
        "Attempts that finished in this coordinator run",
        run.attempts_finished,
    );
    counter(
        registry,
        "coordhost_attempts_failed",
        "Attempts that failed in this coordinator run",
        run.attempts_failed,
    );
    let resets: Family<Labels, Counter> = Family::default();
    for (reason, n) in &run.reset_reasons {
        resets.get_or_create(&label("reason", reason)).inc_by(*n);
    }
    registry.register(
        "coordhost_task_resets",
        "Subtask resets in this coordinator run, by reason",
        resets,
    );
}

/// What this run's recovery kept and reset (by reason), and how long it
/// took; zero when this run did not recover.
fn register_recovery(registry: &mut Registry, view: &JobView) {
    let recovery = view.recovery.clone().filter(|r| r.epoch == view.epoch);
    gauge(
        registry,
        "coordhost_recovery_tasks_skipped",
        "Subtasks this run's recovery kept (did not run again)",
        clamp(recovery.as_ref().map_or(0, |r| r.skipped)),
    );
    let recovery_resets: Family<Labels, Gauge> = Family::default();
    for (reason, n) in recovery.iter().flat_map(|r| &r.reset_reasons) {
        recovery_resets
            .get_or_create(&label("reason", reason))
            .set(clamp(*n));
    }
    registry.register(
        "coordhost_recovery_tasks_reset",
        "Subtasks this run's recovery reset, by reason",
        recovery_resets,
    );
    let duration: Gauge<f64, std::sync::atomic::AtomicU64> = Gauge::default();
    duration.set(
        recovery
            .as_ref()
            .and_then(|r| r.duration_ms)
            .map_or(0.0, |ms| ms as f64 / 1000.0),
    );
    registry.register(
        "coordhost_recovery_duration_seconds",
        "How long this run's recovery took (0: no recovery)",
        duration,
    );
}

/// Appends to the event log, their durable-append histogram and the
/// plugin call histograms, as `live` observed them.
fn register_event_log(registry: &mut Registry, live: &LiveJob) {
    counter(
        registry,
        "coordhost_event_log_appends",
        "Records this coordinator run appended to the job event log",
        live.appends(),
    );
    registry.register(
        "coordhost_event_log_durable_append_seconds",
        "Appends made durable: the write and the wait for its fsync",
        live.durable_append_histogram(),
    );
    registry.register(
        "coordhost_plugin_call_seconds",
        "Calls into plugins, from entering the guest to the settled outcome, by plugin and WIT function",
        live.plugin_call_histograms(),
    );
}

/// Heartbeats accepted from each registered worker process and the age of
/// its last one.
fn register_workers(registry: &mut Registry, live: &LiveJob) {
    let beats: Family<Labels, Counter> = Family::default();
    let age: Family<Labels, Gauge<f64, std::sync::atomic::AtomicU64>> = Family::default();
    for w in live.worker_heartbeats() {
        beats
            .get_or_create(&label("worker", &w.worker))
            .inc_by(w.received);
        age.get_or_create(&label("worker", &w.worker))
            .set(w.since_last.as_secs_f64());
    }
    registry.register(
        "coordhost_worker_heartbeats",
        "Heartbeats this coordinator accepted from each worker process (coordhost worker) that registered with it",
        beats,
    );
    registry.register(
        "coordhost_worker_heartbeat_age_seconds",
        "Seconds since each worker process's last accepted heartbeat (since it registered, before the first); a worker silent past the heartbeat timeout is given up",
        age,
    );
}

/// The content type of [`render`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
