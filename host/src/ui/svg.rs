//! The job graph as one SVG picture, drawn on the server from a
//! [`JobView`] (no script, no font or file loaded): a box per job vertex
//! with its progress and a bar of its subtasks coloured by state and by the
//! last recovery's decision, the reset reasons listed under it, and an
//! arrow per edge labelled with its kind. `coordhost run --ui` (`GET /`)
//! and `log inspect --svg` draw with this one function.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::view::{Decision, JobView, TaskState, VertexView};

/// Fill of subtasks the last recovery kept (skipped: did not run again).
pub const COLOR_SKIPPED: &str = "#2e7d32";
/// Fill of subtasks the last recovery reset (run again).
pub const COLOR_RESET: &str = "#e65100";
/// Fill of finished subtasks recovery did not decide about.
pub const COLOR_FINISHED: &str = "#1565c0";
/// Fill of running subtasks.
pub const COLOR_RUNNING: &str = "#f9a825";
/// Fill of subtasks waiting to run.
pub const COLOR_CREATED: &str = "#bdbdbd";

const BOX_W: u32 = 240;
const BOX_H: u32 = 84;
const LINE_H: u32 = 14;
const GAP_X: u32 = 90;
const GAP_Y: u32 = 40;
const MARGIN: u32 = 20;
const BAR_W: u32 = BOX_W - 20;
/// Reason lines listed under a box at most (the rest summed up in one).
const MAX_REASON_LINES: usize = 4;

/// Escapes `s` for SVG/HTML text and attribute values.
#[must_use]
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// The category a subtask is drawn in: the last recovery's decision first
/// (kept or reset), else its state.
fn category(s: &super::view::SubtaskView) -> &'static str {
    match (&s.recovery, s.state) {
        (Some(Decision::Skipped { .. }), _) => "skipped",
        (Some(Decision::Reset { .. }), _) => "reset",
        (None, TaskState::Finished) => "finished",
        (None, TaskState::Running) => "running",
        (None, TaskState::Created) => "created",
    }
}

const CATEGORIES: [(&str, &str); 5] = [
    ("skipped", COLOR_SKIPPED),
    ("reset", COLOR_RESET),
    ("finished", COLOR_FINISHED),
    ("running", COLOR_RUNNING),
    ("created", COLOR_CREATED),
];

/// Each vertex's column: the longest path from a vertex without inputs.
fn columns(view: &JobView) -> Vec<u32> {
    let n = view.vertices.len();
    let index = |id: &str| view.vertices.iter().position(|v| v.id == id);
    let mut col = vec![0_u32; n];
    // Relax at most n times (a cycle, which a job graph never has, stops
    // growing there).
    for _ in 0..n {
        let mut changed = false;
        for e in &view.edges {
            if let (Some(f), Some(t)) = (index(&e.from), index(&e.to))
                && col[t] < col[f] + 1
                && col[f] + 1 < n as u32
            {
                col[t] = col[f] + 1;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    col
}

/// Reset reasons of a vertex's subtasks, by short name.
fn reasons(v: &VertexView) -> BTreeMap<&str, u32> {
    let mut out = BTreeMap::new();
    for s in &v.subtasks {
        if let Some(Decision::Reset { reason, .. }) = &s.recovery {
            *out.entry(reason.as_str()).or_insert(0) += 1;
        }
    }
    out
}

fn box_height(v: &VertexView) -> u32 {
    let lines = reasons(v).len().min(MAX_REASON_LINES + 1) as u32;
    BOX_H + lines * LINE_H
}

/// The legend's words for a category.
fn legend_label(category: &str) -> &str {
    match category {
        "skipped" => "kept (skipped)",
        "reset" => "reset by recovery",
        other => other,
    }
}

/// Horizontal room of one legend entry: the swatch, its label (at most
/// 7 px a character at font size 12) and a gap.
fn legend_step(label: &str) -> u32 {
    16 + 7 * label.chars().count() as u32 + 18
}

fn legend_width() -> u32 {
    CATEGORIES
        .iter()
        .map(|(name, _)| legend_step(legend_label(name)))
        .sum()
}

/// Draws `view` as a standalone SVG document (`<svg xmlns=...>...</svg>`).
///
/// Structure a reader (or a test) can rely on: one `<g class="vertex"
/// data-vertex="ID" data-parallelism="N" data-finished="N"
/// data-skipped="N" data-reset="N">` per job vertex, holding a `<rect
/// class="vertex-box">` and one `<rect class="bar CATEGORY" fill="COLOR">`
/// per non-empty category of its subtasks (`skipped` [`COLOR_SKIPPED`],
/// `reset` [`COLOR_RESET`], `finished` [`COLOR_FINISHED`], `running`
/// [`COLOR_RUNNING`], `created` [`COLOR_CREATED`]), and one `<text
/// class="reason">` per reset reason; one `<g class="edge" data-from="ID"
/// data-to="ID" data-kind="KIND">` per edge.
#[must_use]
pub fn render(view: &JobView) -> String {
    let (pos, legend_y) = layout(view);
    let width = pos.iter().map(|p| p.0 + BOX_W).max().unwrap_or(0) + MARGIN;
    let height = legend_y + 30;
    let width = width.max(legend_width() + 2 * MARGIN);

    let mut svg = String::new();
    write_head(&mut svg, view, width, height);
    // Edges first, under the boxes.
    write_edges(&mut svg, view, &pos);
    for (i, v) in view.vertices.iter().enumerate() {
        write_vertex(&mut svg, v, pos[i]);
    }
    write_legend(&mut svg, legend_y);
    svg.push_str("</svg>");
    svg
}

/// Each vertex's box as (x, y, height), rows within each column in vertex
/// order, and the y of the legend under the lowest column.
fn layout(view: &JobView) -> (Vec<(u32, u32, u32)>, u32) {
    let cols = columns(view);
    let mut next_y: BTreeMap<u32, u32> = BTreeMap::new();
    let mut pos = Vec::with_capacity(view.vertices.len());
    for (i, v) in view.vertices.iter().enumerate() {
        let c = cols[i];
        let y = next_y.entry(c).or_insert(MARGIN);
        pos.push((MARGIN + c * (BOX_W + GAP_X), *y, box_height(v)));
        *y += box_height(v) + GAP_Y;
    }
    let legend_y = next_y.values().copied().max().unwrap_or(MARGIN);
    (pos, legend_y)
}

/// The opening `<svg>` tag, the arrow marker and the title.
fn write_head(svg: &mut String, view: &JobView, width: u32, height: u32) {
    let _ = write!(
        svg,
        r##"<svg xmlns="http://www.w3.org/2000/svg" class="job-graph" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12" data-job="{}" data-status="{}">"##,
        escape(&view.job),
        escape(&view.status)
    );
    svg.push_str(r##"<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="8" markerHeight="8" orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#555"/></marker></defs>"##);
    let _ = write!(
        svg,
        "<title>job {} ({}), coordinator run {}</title>",
        escape(&view.job),
        escape(&view.status),
        view.epoch
    );
}

/// An arrow per edge between the boxes at `pos`, labelled with its kind.
fn write_edges(svg: &mut String, view: &JobView, pos: &[(u32, u32, u32)]) {
    let index = |id: &str| view.vertices.iter().position(|v| v.id == id);
    for e in &view.edges {
        let (Some(f), Some(t)) = (index(&e.from), index(&e.to)) else {
            continue;
        };
        let (fx, fy, _) = pos[f];
        let (tx, ty, _) = pos[t];
        let (x1, y1) = (fx + BOX_W, fy + BOX_H / 2);
        let (x2, y2) = (tx, ty + BOX_H / 2);
        let mid = (x1 + x2) / 2;
        let kind = e.kind.as_deref().unwrap_or("");
        let _ = write!(
            svg,
            r##"<g class="edge" data-from="{}" data-to="{}" data-kind="{}"><path d="M {x1} {y1} C {mid} {y1}, {mid} {y2}, {x2} {y2}" fill="none" stroke="#555" stroke-width="1.5" marker-end="url(#arrow)"/>"##,
            escape(&e.from),
            escape(&e.to),
            escape(kind)
        );
        if !kind.is_empty() {
            let _ = write!(
                svg,
                r##"<text x="{mid}" y="{}" text-anchor="middle" fill="#333">{}</text>"##,
                (y1 + y2) / 2 - 6,
                escape(kind)
            );
        }
        svg.push_str("</g>");
    }
}

/// One vertex's group: its box at (x, y) of height h, name, progress, bar
/// of subtasks, recovery decision and reset reasons.
fn write_vertex(svg: &mut String, v: &VertexView, (x, y, h): (u32, u32, u32)) {
    let state_stroke = if v.parallelism > 0 && v.finished == v.parallelism {
        COLOR_FINISHED
    } else if v.subtasks.iter().any(|s| s.state == TaskState::Running) {
        COLOR_RUNNING
    } else {
        "#757575"
    };
    let _ = write!(
        svg,
        r##"<g class="vertex" data-vertex="{}" data-parallelism="{}" data-finished="{}" data-skipped="{}" data-reset="{}">"##,
        escape(&v.id),
        v.parallelism,
        v.finished,
        v.skipped,
        v.reset
    );
    let _ = write!(
        svg,
        r##"<rect class="vertex-box" x="{x}" y="{y}" width="{BOX_W}" height="{h}" rx="6" fill="#fafafa" stroke="{state_stroke}" stroke-width="2"/>"##
    );
    let _ = write!(
        svg,
        r##"<text x="{}" y="{}" font-weight="bold" font-size="14">{}</text>"##,
        x + 10,
        y + 20,
        escape(&v.id)
    );
    write_progress(svg, v, x, y);
    write_bar(svg, v, x + 10, y + 46);
    let decided = if v.skipped + v.reset > 0 {
        format!("recovery: kept {}, reset {}", v.skipped, v.reset)
    } else {
        String::new()
    };
    let _ = write!(
        svg,
        r##"<text class="decision" x="{}" y="{}">{decided}</text>"##,
        x + 10,
        y + 74
    );
    write_reasons(svg, v, x, y);
    svg.push_str("</g>");
}

/// The progress line of the box at (x, y): subtasks finished and, for a
/// source, the splits handed out (of those known), bytes in the title.
fn write_progress(svg: &mut String, v: &VertexView, x: u32, y: u32) {
    let progress = if v.parallelism == 0 {
        "not initialized".to_owned()
    } else {
        format!("{}/{} finished", v.finished, v.parallelism)
    };
    let progress = match v.input {
        Some(i) => format!(
            "{progress}, splits {}{}",
            i.splits,
            i.splits_left
                .map_or(String::new(), |l| format!("/{}", i.splits + l))
        ),
        None => progress,
    };
    let _ = write!(
        svg,
        r##"<text class="progress" x="{}" y="{}">{progress}{}</text>"##,
        x + 10,
        y + 38,
        v.input.map_or(String::new(), |i| format!(
            "<title>input handed out: {} splits, {} bytes</title>",
            i.splits, i.bytes
        ))
    );
}

/// The bar at (bx, by): one segment per category, proportional to its
/// subtasks.
fn write_bar(svg: &mut String, v: &VertexView, bx: u32, by: u32) {
    let _ = write!(
        svg,
        r##"<rect x="{bx}" y="{by}" width="{BAR_W}" height="12" fill="#eeeeee" stroke="#9e9e9e"/>"##
    );
    let total = v.subtasks.len() as u64;
    let mut done = 0_u64;
    for (name, color) in CATEGORIES {
        let n = v.subtasks.iter().filter(|s| category(s) == name).count() as u64;
        if n == 0 || total == 0 {
            continue;
        }
        let start = bx as u64 + done * u64::from(BAR_W) / total;
        done += n;
        let end = bx as u64 + done * u64::from(BAR_W) / total;
        let _ = write!(
            svg,
            r##"<rect class="bar {name}" x="{start}" y="{by}" width="{}" height="12" fill="{color}"><title>{n} {name}</title></rect>"##,
            (end - start).max(1)
        );
    }
}

/// The reset reasons under the decision line of the box at (x, y), one
/// line each, at most [`MAX_REASON_LINES`] and the rest summed up.
fn write_reasons(svg: &mut String, v: &VertexView, x: u32, y: u32) {
    let rs = reasons(v);
    for (k, (reason, n)) in rs.iter().enumerate() {
        // Under the decision line (y + 74), one line each.
        let ly = y + BOX_H + k as u32 * LINE_H + 6;
        if k == MAX_REASON_LINES {
            let rest: u32 = rs.values().skip(MAX_REASON_LINES).sum();
            let _ = write!(
                svg,
                r##"<text class="reason" x="{}" y="{ly}" fill="{COLOR_RESET}">reset: {rest} more</text>"##,
                x + 10
            );
            break;
        }
        let _ = write!(
            svg,
            r##"<text class="reason" x="{}" y="{ly}" fill="{COLOR_RESET}">reset: {} ×{n}</text>"##,
            x + 10,
            escape(reason)
        );
    }
}

/// The legend at `legend_y`: each entry as wide as its label.
fn write_legend(svg: &mut String, legend_y: u32) {
    svg.push_str(r#"<g class="legend">"#);
    let mut lx = MARGIN;
    for (name, color) in CATEGORIES {
        let label = legend_label(name);
        let _ = write!(
            svg,
            r##"<rect x="{lx}" y="{}" width="12" height="12" fill="{color}"/><text x="{}" y="{}">{label}</text>"##,
            legend_y,
            lx + 16,
            legend_y + 10
        );
        lx += legend_step(label);
    }
    svg.push_str("</g>");
}
