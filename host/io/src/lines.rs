//! Human lines on stderr, each written with one `write`.
//!
//! The standard error stream is unbuffered: `eprintln!` writes each piece
//! of its format on its own (a line with three arguments is six or seven
//! `write` calls). Whoever follows the stream as it grows — a test polling
//! the file stderr goes to, `tail -f | grep`, a log shipper — can then
//! read half a line: CI once saw `standby for job `wordcount`: ` without
//! the leader's address that followed a moment later. [`stderr_line!`]
//! formats the whole line first and writes it in one call under the
//! stream's lock, so a reader sees the line whole or not at all (a single
//! `write` of a few hundred bytes to a file or a pipe is not split).
//!
//! [`stderr_line!`]: crate::stderr_line

use std::fmt;
use std::io::Write;

/// Writes `line` and a line break to `out` with one `write_all` of one
/// buffer. Errors are ignored, as `eprintln!` would panic on them: a
/// closed stderr must not end the coordinator.
pub fn write_line(out: &mut impl Write, line: fmt::Arguments<'_>) {
    let mut text = match line.as_str() {
        Some(s) => String::with_capacity(s.len() + 1) + s,
        None => line.to_string(),
    };
    text.push('\n');
    let _ignored = out.write_all(text.as_bytes());
}

/// `eprintln!` with the line written in one call (see the module's text).
#[macro_export]
macro_rules! stderr_line {
    ($($arg:tt)*) => {
        $crate::lines::write_line(&mut ::std::io::stderr().lock(), format_args!($($arg)*))
    };
}

#[cfg(test)]
mod tests {
    use super::write_line;
    use std::io::{self, Write};

    /// Counts the `write` calls it takes, keeping what they wrote.
    #[derive(Default)]
    struct Calls {
        writes: usize,
        bytes: Vec<u8>,
    }

    impl Write for Calls {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.writes += 1;
            self.bytes.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_line_of_many_pieces_is_one_write_ending_in_a_line_break() {
        let (job, who, term) = ("wordcount", "127.0.0.1:22375", 7);
        let mut eprintln_like = Calls::default();
        let _ignored = writeln!(
            eprintln_like,
            "standby for job `{job}`: {who} leads (term {term})"
        );
        let mut one = Calls::default();
        write_line(
            &mut one,
            format_args!("standby for job `{job}`: {who} leads (term {term})"),
        );
        assert_eq!(one.bytes, eprintln_like.bytes);
        assert_eq!(
            String::from_utf8_lossy(&one.bytes),
            "standby for job `wordcount`: 127.0.0.1:22375 leads (term 7)\n"
        );
        assert_eq!(one.writes, 1, "one write for the whole line");
        assert!(
            eprintln_like.writes > 1,
            "writeln! writes piece by piece: {}",
            eprintln_like.writes
        );
        let mut plain = Calls::default();
        write_line(&mut plain, format_args!("no arguments"));
        assert_eq!(
            (plain.writes, plain.bytes.as_slice()),
            (1, &b"no arguments\n"[..])
        );
    }
}
