//! `GET /`: one server-rendered HTML page of a job — the graph as inline SVG
//! ([`super::svg::render`]), what the last recovery kept and reset and why,
//! what each coordinator run did, and the attempts of each subtask (which
//! run, which state). While the job runs the page reloads itself every two
//! seconds (`<meta http-equiv="refresh">`: no script, nothing fetched from
//! elsewhere).

use std::fmt::Write as _;

use super::svg::{self, escape};
use super::view::{Decision, JobView, StandbyView};

/// Seconds between reloads while the job runs.
pub const REFRESH_S: u32 = 2;

/// The page of `view`.
#[must_use]
pub fn render(view: &JobView) -> String {
    let mut h = String::new();
    write_head(&mut h, view);
    write_status(&mut h, view);
    if let Some(s) = &view.standby {
        write_standby(&mut h, s);
        return h;
    }
    write_recovery(&mut h, view);
    h.push_str("<div id=\"graph\">");
    h.push_str(&svg::render(view));
    h.push_str("</div>");
    write_decisions(&mut h, view);
    write_runs(&mut h, view);
    write_attempts(&mut h, view);
    h.push_str("<p><a href=\"/api/job\">/api/job</a> · <a href=\"/metrics\">/metrics</a></p></body></html>\n");
    h
}

/// The document's head (reloading itself while the job runs) and the
/// opening `<body>`.
fn write_head(h: &mut String, view: &JobView) {
    let live = matches!(
        view.status.as_str(),
        "running" | "recovering" | "starting" | "standby"
    );
    h.push_str("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">");
    if live {
        let _ = write!(h, "<meta http-equiv=\"refresh\" content=\"{REFRESH_S}\">");
    }
    let _ = write!(
        h,
        "<title>coordhost: {} ({})</title>",
        escape(&view.job),
        escape(&view.status)
    );
    h.push_str(
        "<style>body{font-family:sans-serif;margin:1.5em;color:#212121}\
         table{border-collapse:collapse;margin:0.5em 0 1.5em}\
         td,th{border:1px solid #ccc;padding:2px 8px;text-align:left;font-size:13px}\
         .skipped{color:#2e7d32}.reset{color:#e65100}</style></head><body>",
    );
}

/// The job's name, its status (with its error) and the coordinator run.
fn write_status(h: &mut String, view: &JobView) {
    let _ = write!(
        h,
        "<h1>job <span id=\"job\">{}</span></h1><p id=\"status\" data-status=\"{}\">status: <b>{}</b>, coordinator run (epoch) <span id=\"epoch\">{}</span>",
        escape(&view.job),
        escape(&view.status),
        escape(&view.status),
        view.epoch
    );
    if let Some(e) = &view.error {
        let _ = write!(h, " — {}", escape(e));
    }
    h.push_str("</p>");
}

/// A standby's note of who leads, ending the page.
fn write_standby(h: &mut String, s: &StandbyView) {
    let who = s.leader_address.as_deref().map_or_else(
        || "another coordinator (it serves no worker processes)".to_owned(),
        |a| {
            format!(
                "the coordinator serving workers at <span id=\"leader-address\">{}</span>",
                escape(a)
            )
        },
    );
    let _ = writeln!(
        h,
        "<p id=\"standby\" data-leader-term=\"{}\">this coordinator is a <b>standby</b>: {who} leads the job (term {}, election on {}). This page shows the job once this coordinator leads; the leader's own page has it now.</p></body></html>",
        s.leader_term,
        s.leader_term,
        escape(&s.etcd)
    );
}

/// What the last recovery kept and reset, by reason, and how long it took.
fn write_recovery(h: &mut String, view: &JobView) {
    match &view.recovery {
        Some(r) => {
            let _ = write!(
                h,
                "<p id=\"recovery\">recovery in run {}: kept (skipped) <b class=\"skipped\">{}</b>, reset <b class=\"reset\">{}</b>",
                r.epoch, r.skipped, r.reset
            );
            for (reason, n) in &r.reset_reasons {
                let _ = write!(h, "; {} ×{n}", escape(reason));
            }
            if let Some(ms) = r.duration_ms {
                let _ = write!(h, "; took {ms} ms");
            }
            h.push_str("</p>");
        }
        None => h.push_str("<p id=\"recovery\">no recovery: this job run started afresh</p>"),
    }
}

/// Recovery decisions, one row per subtask decided about (nothing when
/// there are none).
fn write_decisions(h: &mut String, view: &JobView) {
    let decided: Vec<_> = view
        .vertices
        .iter()
        .flat_map(|v| v.subtasks.iter().map(move |s| (v, s)))
        .filter(|(_, s)| s.recovery.is_some())
        .collect();
    if !decided.is_empty() {
        h.push_str("<h2>Recovery decisions</h2><table id=\"decisions\"><tr><th>vertex</th><th>subtask</th><th>decision</th><th>why</th></tr>");
        for (v, s) in decided {
            let (class, what, why) = match &s.recovery {
                Some(Decision::Skipped { attempt }) => (
                    "skipped",
                    "skipped".to_owned(),
                    format!("attempt {attempt} kept"),
                ),
                Some(Decision::Reset { reason, detail }) => {
                    ("reset", format!("reset: {reason}"), detail.clone())
                }
                None => continue,
            };
            let _ = write!(
                h,
                "<tr class=\"{class}\" data-vertex=\"{}\" data-subtask=\"{}\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                escape(&v.id),
                s.subtask,
                escape(&v.id),
                s.subtask,
                escape(&what),
                escape(&why)
            );
        }
        h.push_str("</table>");
    }
}

/// What each coordinator run did, one row per run.
fn write_runs(h: &mut String, view: &JobView) {
    h.push_str("<h2>Coordinator runs</h2><table id=\"runs\"><tr><th>epoch</th><th>attempts started</th><th>finished</th><th>failed</th><th>kept by recovery</th><th>resets</th><th>log records</th></tr>");
    for r in &view.runs {
        let reasons: Vec<String> = r
            .reset_reasons
            .iter()
            .map(|(k, n)| format!("{} ×{n}", escape(k)))
            .collect();
        let _ = write!(
            h,
            "<tr><td>{}{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{} {}</td><td>{}</td></tr>",
            r.epoch,
            r.leader_term
                .map(|t| format!(" (term {t})"))
                .unwrap_or_default(),
            r.attempts_started,
            r.attempts_finished,
            r.attempts_failed,
            r.tasks_skipped,
            r.tasks_reset,
            reasons.join(", "),
            r.events
        );
    }
    h.push_str("</table>");
}

/// The attempts of each subtask: which run, which state.
fn write_attempts(h: &mut String, view: &JobView) {
    h.push_str("<h2>Attempts</h2><table id=\"attempts\"><tr><th>vertex</th><th>subtask</th><th>attempts (run: attempt state)</th></tr>");
    for v in &view.vertices {
        for s in &v.subtasks {
            let cells: Vec<String> = s
                .attempts
                .iter()
                .map(|a| {
                    format!(
                        "run {}: #{} {}{}",
                        a.epoch,
                        a.attempt,
                        escape(&a.state),
                        a.reason
                            .as_deref()
                            .map(|r| format!(" ({})", escape(r)))
                            .unwrap_or_default()
                    )
                })
                .collect();
            let _ = write!(
                h,
                "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
                escape(&v.id),
                s.subtask,
                cells.join(" → ")
            );
        }
    }
    h.push_str("</table>");
}
