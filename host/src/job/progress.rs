//! `coordhost run`'s progress on stderr: a bar per job vertex on a
//! terminal, plain timestamped lines otherwise. Both count tasks per
//! vertex and, for a source vertex, the input handed to its readers in
//! splits and bytes with a rate and an estimate of the time left (the
//! enumerator's own count of the splits it still holds over the rate at
//! which splits went out so far; Spark's stage progress and Flink's
//! `pendingSplits` give users the same two figures).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use indicatif::{MultiProgress, ProgressBar, ProgressStyle};

use crate::scheduler::{InputProgress, ProgressListener};

/// How often, at most, [`Lines`] prints a source's input progress.
const LINE_EVERY: Duration = Duration::from_secs(5);

/// The wall-clock time now in UTC as RFC 3339 to the second
/// (`2026-12-02T06:40:01Z`), the form `COORDHOST_LOG`'s lines use too.
pub(crate) fn utc_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    utc(secs)
}

/// `secs` after 1970-01-01T00:00:00Z as RFC 3339 to the second.
fn utc(secs: u64) -> String {
    let days = i32::try_from(secs / 86_400).unwrap_or(i32::MAX);
    let (y, m, d) = crate::value::cells::civil_from_days(days);
    let t = secs % 86_400;
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        t / 3600,
        t / 60 % 60,
        t % 60
    )
}

/// Bytes in binary units with one decimal (`1.5 GiB`, `512 B`).
fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

/// A duration as `1h02m03s`, `2m03s` or `3s`.
fn span(d: Duration) -> String {
    let s = d.as_secs();
    match (s / 3600, s / 60 % 60, s % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, s) => format!("{m}m{s:02}s"),
        (h, m, s) => format!("{h}h{m:02}m{s:02}s"),
    }
}

/// One source vertex's input so far, and since when.
#[derive(Debug, Clone, Copy)]
struct Input {
    /// When its first split went out in this run.
    since: Instant,
    latest: InputProgress,
    /// When [`Lines`] last printed it.
    printed: Option<Instant>,
}

impl Input {
    /// `splits 12 of 40, 1.2 GiB, 85.0 MiB/s, about 42s left`: the counts
    /// handed out, the byte rate since the first split, and the time left
    /// at the split rate so far (left out until a second has passed and
    /// while the enumerator's count is unknown).
    fn describe(&self, now: Instant) -> String {
        let p = self.latest;
        let mut out = match p.splits_left {
            Some(left) => format!("splits {} of {}", p.splits, p.splits + left),
            None => format!("splits {}", p.splits),
        };
        out.push_str(&format!(", {}", bytes(p.bytes)));
        let elapsed = now.duration_since(self.since);
        if elapsed >= Duration::from_secs(1) {
            let secs = elapsed.as_secs_f64();
            out.push_str(&format!(", {}/s", bytes((p.bytes as f64 / secs) as u64)));
            if let Some(left) = p.splits_left {
                let rate = p.splits as f64 / secs;
                if left == 0 {
                    out.push_str(", all handed out");
                } else if rate > 0.0 {
                    let eta = Duration::from_secs_f64((left as f64 / rate).min(1e9));
                    out.push_str(&format!(", about {} left", span(eta)));
                }
            }
        }
        out
    }
}

/// Per vertex input figures shared by both displays.
#[derive(Default)]
struct Inputs(Mutex<HashMap<String, Input>>);

impl Inputs {
    /// Records `p` for `vertex`; returns its description if `print_every`
    /// has passed since it was last printed (or it never was).
    fn update(&self, vertex: &str, p: InputProgress, print_every: Duration) -> Option<String> {
        let now = Instant::now();
        let mut all = self.0.lock().ok()?;
        let input = all.entry(vertex.to_owned()).or_insert(Input {
            since: now,
            latest: p,
            printed: None,
        });
        input.latest = p;
        let due = input
            .printed
            .is_none_or(|at| now.duration_since(at) >= print_every);
        if !due {
            return None;
        }
        input.printed = Some(now);
        Some(input.describe(now))
    }

    /// The last description of `vertex`, if it is a source.
    fn last(&self, vertex: &str) -> Option<String> {
        let all = self.0.lock().ok()?;
        all.get(vertex).map(|i| i.describe(Instant::now()))
    }
}

/// Writes one progress line to stderr with one `write` (stderr is
/// unbuffered: `eprintln!` writes each piece of the format on its own,
/// eight calls for a task's line, issue 29's dispatch cost).
macro_rules! progress_line {
    ($($arg:tt)*) => {
        coordhost_io::stderr_line!($($arg)*)
    };
}

/// Plain progress lines on stderr (not a terminal), each starting with
/// the UTC time: a vertex's parallelism, each finished task, each failed
/// attempt, and a source's input at most every [`LINE_EVERY`].
#[derive(Default)]
pub(super) struct Lines {
    inputs: Inputs,
}

impl ProgressListener for Lines {
    fn vertex_initialized(&self, vertex: &str, parallelism: u32) {
        progress_line!("{} {vertex}: parallelism {parallelism}", utc_now());
    }
    fn task_finished(&self, vertex: &str, finished: u32, total: u32) {
        match self.inputs.last(vertex) {
            Some(input) if finished == total => progress_line!(
                "{} {vertex}: {finished}/{total} finished; input: {input}",
                utc_now()
            ),
            _ => progress_line!("{} {vertex}: {finished}/{total} finished", utc_now()),
        }
    }
    fn task_failed(&self, vertex: &str, subtask: u32, attempt: u32, reason: &str) {
        progress_line!(
            "{} {vertex}: subtask {subtask} attempt {attempt} failed: {reason}",
            utc_now()
        );
    }
    fn task_failed_for_good(&self, _: &str, _: u32, _: u32, _: &str) {
        // The run's `coordhost:` line says it, once.
    }
    fn input_progress(&self, vertex: &str, input: InputProgress) {
        if let Some(line) = self.inputs.update(vertex, input, LINE_EVERY) {
            progress_line!("{} {vertex}: input {line}", utc_now());
        }
    }
}

/// One progress bar per job vertex on stderr, with the time since the
/// run started and, for a source, its input.
#[derive(Default)]
pub(super) struct Bars {
    multi: MultiProgress,
    bars: Mutex<HashMap<String, ProgressBar>>,
    inputs: Inputs,
}

impl Bars {
    fn bar(&self, vertex: &str) -> Option<ProgressBar> {
        self.bars.lock().ok().and_then(|b| b.get(vertex).cloned())
    }
}

impl ProgressListener for Bars {
    fn vertex_initialized(&self, vertex: &str, parallelism: u32) {
        let bar = self.multi.add(ProgressBar::new(u64::from(parallelism)));
        let style = ProgressStyle::with_template(
            "{elapsed_precise} {prefix:>16} [{bar:30}] {pos}/{len} tasks {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar());
        bar.set_style(style.progress_chars("=> "));
        bar.set_prefix(vertex.to_string());
        if let Ok(mut bars) = self.bars.lock() {
            bars.insert(vertex.to_string(), bar);
        }
    }
    fn task_finished(&self, vertex: &str, finished: u32, total: u32) {
        if let Some(bar) = self.bar(vertex) {
            bar.set_length(u64::from(total));
            bar.set_position(u64::from(finished));
            if finished == total {
                bar.finish();
            }
        }
    }
    fn task_failed(&self, vertex: &str, subtask: u32, attempt: u32, reason: &str) {
        let _ignored = self.multi.println(format!(
            "{} {vertex}: subtask {subtask} attempt {attempt} failed: {reason}",
            utc_now()
        ));
    }
    fn task_failed_for_good(&self, _: &str, _: u32, _: u32, _: &str) {
        // The run's `coordhost:` line says it, once.
    }
    fn input_progress(&self, vertex: &str, input: InputProgress) {
        // The bar redraws itself at most ~20 times a second: update always.
        if let (Some(bar), Some(text)) = (
            self.bar(vertex),
            self.inputs.update(vertex, input, Duration::ZERO),
        ) {
            bar.set_message(text);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_is_rfc3339_to_the_second() {
        assert_eq!(utc(0), "1970-01-01T00:00:00Z");
        // 2026-12-02T06:40:01Z
        assert_eq!(utc(1_796_193_601), "2026-12-02T06:40:01Z");
        assert_eq!(utc(951_782_400), "2000-02-29T00:00:00Z");
    }

    #[test]
    fn bytes_and_spans_read_as_people_write_them() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(3 << 30), "3.0 GiB");
        assert_eq!(span(Duration::from_secs(3)), "3s");
        assert_eq!(span(Duration::from_secs(123)), "2m03s");
        assert_eq!(span(Duration::from_secs(3723)), "1h02m03s");
    }

    #[test]
    fn a_source_shows_rate_and_time_left_from_the_enumerators_count() {
        let since = Instant::now();
        let input = Input {
            since,
            latest: InputProgress {
                splits: 10,
                bytes: 10 << 20,
                splits_left: Some(30),
            },
            printed: None,
        };
        let text = input.describe(since + Duration::from_secs(10));
        assert_eq!(text, "splits 10 of 40, 10.0 MiB, 1.0 MiB/s, about 30s left");
        // Under a second: counts only; unknown count: no estimate.
        assert_eq!(input.describe(since), "splits 10 of 40, 10.0 MiB");
        let unknown = Input {
            latest: InputProgress {
                splits_left: None,
                ..input.latest
            },
            ..input
        };
        assert_eq!(
            unknown.describe(since + Duration::from_secs(10)),
            "splits 10, 10.0 MiB, 1.0 MiB/s"
        );
        let done = Input {
            latest: InputProgress {
                splits_left: Some(0),
                ..input.latest
            },
            ..input
        };
        assert!(
            done.describe(since + Duration::from_secs(10))
                .ends_with("all handed out")
        );
    }
}
