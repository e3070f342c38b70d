//! Seeing a job (issue 31, docs/ui.md): the job as a view folded from its
//! event log's records, drawn as an SVG graph coloured by state and by what
//! the last recovery kept and reset; the web page, JSON API and Prometheus
//! metrics that `coordhost run --ui HOST:PORT` serves while the job runs;
//! and the same picture drawn offline by `coordhost log inspect --svg`.
//!
//! - `view`: [`JobView`], the fold of job events (and, live, deployments);
//! - `svg`: [`render_svg`], the graph picture;
//! - `page`: the HTML page around it;
//! - `metrics`: the Prometheus text;
//! - `live`: [`LiveJob`], the view a running job updates;
//! - `server`: [`serve`], the loopback-by-default GET-only listener;
//! - `guard`: its cap on open connections and idle timeout.
//!
//! This floor reads only `events` and `graph`; the job layer feeds a
//! [`LiveJob`] where it already records facts, so the job's path costs a
//! mutex and a few field updates per event.

mod guard;
mod live;
mod metrics;
mod page;
mod server;
mod svg;
mod view;

pub use guard::{IDLE_TIMEOUT, MAX_CONNECTIONS};
pub use live::{HeartbeatSource, LiveJob, WorkerBeats};
pub use metrics::{CONTENT_TYPE as METRICS_CONTENT_TYPE, render as render_metrics};
pub use page::render as render_page;
pub use server::{UiError, UiServer, serve};
pub use svg::{
    COLOR_CREATED, COLOR_FINISHED, COLOR_RESET, COLOR_RUNNING, COLOR_SKIPPED, escape,
    render as render_svg,
};
pub use view::{
    AttemptView, Decision, EdgeView, InputView, JobView, MAX_ATTEMPTS_KEPT, RecoveryView, RunView,
    StandbyView, SubtaskView, TaskState, VertexView,
};
