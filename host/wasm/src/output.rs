//! Bounds on what a plugin can make the host print or keep (issue 9,
//! item 11): every line a plugin writes (stdout, stderr, `host-log`) and
//! every error message it returns becomes one line of bounded length, and
//! lines beyond a rate are dropped and counted instead of printed.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Longest plugin output line printed, in bytes; longer lines are cut.
pub const MAX_LINE_BYTES: usize = 4096;

/// Longest message a plugin error (its WIT `error` value, a trap's reason)
/// carries into the host's errors, logs and the JSON summary, in bytes.
pub const MAX_MESSAGE_BYTES: usize = 1024;

/// Lines a plugin may print per [`RATE_WINDOW`], across stdout, stderr and
/// `host-log`; the rest of the window's lines are dropped and counted.
pub const LINES_PER_WINDOW: u32 = 200;

/// The window of [`LINES_PER_WINDOW`].
pub const RATE_WINDOW: Duration = Duration::from_secs(1);

/// `text` as one line of at most `max` bytes (plus a note of what was cut):
/// line breaks and other control characters become spaces, and a text
/// longer than `max` is cut at a character boundary and ends with
/// `… (N more bytes)`.
pub fn one_line(text: &str, max: usize) -> String {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut line: String = text[..end]
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if end < text.len() {
        line.push_str(&format!("… ({} more bytes)", text.len() - end));
    }
    line
}

/// How many lines a plugin printed in the current window, shared by its
/// output streams and its `host-log`. Cheap to clone.
#[derive(Clone)]
pub struct LineBudget {
    state: Arc<Mutex<Window>>,
}

struct Window {
    plugin: Arc<str>,
    started: Instant,
    printed: u32,
    dropped: u64,
}

impl LineBudget {
    pub fn new(plugin: Arc<str>) -> Self {
        Self {
            state: Arc::new(Mutex::new(Window {
                plugin,
                started: Instant::now(),
                printed: 0,
                dropped: 0,
            })),
        }
    }

    /// Whether one more line may be printed now. Opening a new window first
    /// reports how many lines the last ones dropped.
    pub fn admit(&self) -> bool {
        let mut w = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if w.started.elapsed() >= RATE_WINDOW {
            if w.dropped > 0 {
                tracing::warn!(
                    target: crate::LOG_TARGET,
                    plugin = &*w.plugin,
                    "{} lines of plugin output dropped (more than {LINES_PER_WINDOW} lines per {} ms)",
                    w.dropped,
                    RATE_WINDOW.as_millis()
                );
            }
            w.started = Instant::now();
            w.printed = 0;
            w.dropped = 0;
        }
        if w.printed < LINES_PER_WINDOW {
            w.printed += 1;
            true
        } else {
            w.dropped += 1;
            false
        }
    }
}

impl Drop for Window {
    fn drop(&mut self) {
        if self.dropped > 0 {
            tracing::warn!(
                target: crate::LOG_TARGET,
                plugin = &*self.plugin,
                "{} lines of plugin output dropped at the end (more than {LINES_PER_WINDOW} lines per {} ms)",
                self.dropped,
                RATE_WINDOW.as_millis()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_joins_lines_and_cuts_long_text() {
        assert_eq!(one_line("a\nb\r\tc", 100), "a b  c");
        assert_eq!(one_line("abcdef", 3), "abc… (3 more bytes)");
        // Never cuts inside a character.
        assert_eq!(one_line("ééé", 3), "é… (4 more bytes)");
        assert_eq!(one_line("short", 5), "short");
    }

    #[test]
    fn a_budget_admits_its_lines_per_window_then_drops() {
        let budget = LineBudget::new(Arc::from("p"));
        let admitted = (0..LINES_PER_WINDOW * 3).filter(|_| budget.admit()).count();
        // The loop takes far less than a window on any machine.
        assert_eq!(admitted, LINES_PER_WINDOW as usize);
    }
}
