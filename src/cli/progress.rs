//! Tool progress in `warden call`: on a terminal, one line at the
//! bottom that updates in place (`[tool] progress 3/10 (30%): message`) and is
//! erased when the call returns; otherwise, with `--stream`, one plain line
//! per report, so a CI log keeps them all.
//!
//! The reports arrive already bounded and cleaned by the runtime's reporter
//! (increasing, at most 20 a second, the message cut to 256 bytes with control
//! characters made spaces), so nothing here can move the cursor but warden.
//! With `--stream`, the program's own output goes through [`Console::output`],
//! which lifts the progress line out of the way and puts it back after a
//! complete line.

use std::io::{IsTerminal, Write};
use std::sync::{Arc, Mutex, PoisonError};

use crate::runtime::{Progress, ProgressSink};

/// Erase the current terminal line and return to its start.
const CLEAR: &str = "\r\x1b[K";
/// The width assumed when the terminal's cannot be read.
const DEFAULT_WIDTH: usize = 80;

#[derive(Default)]
struct State {
    /// The progress line drawn now, if one is on screen.
    shown: Option<String>,
    /// The last thing written to stderr ended a line (or nothing was written).
    at_line_start: bool,
}

/// Where `warden call` shows a call's progress and streamed output.
pub(super) struct Console {
    tool: String,
    /// stderr is a terminal that understands `CLEAR` (not `TERM=dumb`).
    tty: bool,
    /// Plain lines when not on a terminal (`--stream`).
    plain: bool,
    state: Mutex<State>,
}

impl Console {
    /// A console for one call of `tool`; `stream` is `--stream`.
    pub(super) fn new(tool: &str, stream: bool) -> Arc<Console> {
        let tty = std::io::stderr().is_terminal() && std::env::var("TERM").map_or(true, |t| t != "dumb");
        Arc::new(Console {
            tool: tool.to_string(),
            tty,
            plain: stream && !tty,
            state: Mutex::new(State { shown: None, at_line_start: true }),
        })
    }

    /// The sink the runtime's reporter sends to, when progress shows at all.
    pub(super) fn sink(self: &Arc<Self>) -> Option<ProgressSink> {
        if !self.tty && !self.plain {
            return None;
        }
        let me = self.clone();
        Some(Arc::new(move |p: &Progress| me.progress(p)))
    }

    fn line(&self, p: &Progress) -> String {
        let mut line = format!("[{}] progress {}", self.tool, p.done);
        if let Some(total) = p.total {
            line.push_str(&format!("/{total}"));
            if self.tty && total > 0 {
                line.push_str(&format!(" ({}%)", p.done.saturating_mul(100) / total));
            }
        }
        if !p.message.is_empty() {
            line.push_str(": ");
            line.push_str(&p.message);
        }
        line
    }

    fn progress(&self, p: &Progress) {
        let line = self.line(p);
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let mut err = std::io::stderr().lock();
        if self.tty {
            // One row, never wrapped: a wrapped line could not be erased.
            let fitted = fit(&line, width().saturating_sub(1));
            let lead = if s.shown.is_none() && !s.at_line_start { "\n" } else { CLEAR };
            let _ = write!(err, "{lead}{fitted}");
            s.shown = Some(fitted);
            s.at_line_start = true; // the next output starts by erasing the line
        } else {
            let _ = writeln!(err, "{line}");
            s.at_line_start = true;
        }
        let _ = err.flush();
    }

    /// Program output (already cleaned), around the progress line.
    pub(super) fn output(&self, text: &str) {
        if text.is_empty() {
            return;
        }
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let mut err = std::io::stderr().lock();
        if s.shown.is_some() {
            let _ = err.write_all(CLEAR.as_bytes());
        }
        let _ = err.write_all(text.as_bytes());
        s.at_line_start = text.ends_with('\n');
        match &s.shown {
            // Back at the bottom once the output ended its line; mid-line, it waits for the next report.
            Some(line) if s.at_line_start => {
                let _ = err.write_all(line.as_bytes());
            }
            Some(_) => s.shown = None,
            None => {}
        }
        let _ = err.flush();
    }

    /// Erases the progress line (the call returned).
    pub(super) fn finish(&self) {
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if s.shown.take().is_some() {
            let mut err = std::io::stderr().lock();
            let _ = err.write_all(CLEAR.as_bytes());
            let _ = err.flush();
        }
    }
}

/// The terminal's width in columns (stderr's), or [`DEFAULT_WIDTH`].
fn width() -> usize {
    rustix::termios::tcgetwinsize(std::io::stderr())
        .ok()
        .map(|w| usize::from(w.ws_col))
        .filter(|&w| w > 0)
        .unwrap_or(DEFAULT_WIDTH)
}

/// `line` cut to at most `max` characters, with `…` where it was cut.
fn fit(line: &str, max: usize) -> String {
    if line.chars().count() <= max {
        return line.to_string();
    }
    let mut cut: String = line.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_line_is_cut_to_the_width() {
        assert_eq!(fit("abcdef", 10), "abcdef");
        assert_eq!(fit("abcdef", 4), "abc…");
        assert_eq!(fit("ééééé", 3).chars().count(), 3);
    }

    #[test]
    fn the_line_names_the_tool_and_the_share_done() {
        let c = Console { tool: "t".into(), tty: true, plain: false, state: Mutex::default() };
        let p = Progress { done: 3, total: Some(10), message: "files".into() };
        assert_eq!(c.line(&p), "[t] progress 3/10 (30%): files");
        let c = Console { tty: false, plain: true, ..c };
        assert_eq!(c.line(&p), "[t] progress 3/10: files");
        let p = Progress { done: 7, total: None, message: String::new() };
        assert_eq!(c.line(&p), "[t] progress 7");
    }
}
