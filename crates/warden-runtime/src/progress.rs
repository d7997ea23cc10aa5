//! Progress reports of a running call, whichever runtime they come from (a
//! `warden:plugin@0.2.0` component's `progress` import, or a process tool's
//! `WARDEN_PROGRESS_FD` lines, [`super::process::progress`]). The [`Reporter`]
//! is the one place that bounds them (increasing, cleaned, cut to
//! [`MAX_PROGRESS_MESSAGE`] bytes, at most one per [`PROGRESS_INTERVAL`]) and
//! sends them to the call's [`ProgressSink`] or, else, its [`OutputTap`]'s
//! stderr; [`ProgressCounts`] go to the audit record. docs/policy.md
//! ("Progress") has the rules.

use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::Value;

use super::{OutputTap, Progress, ProgressSink, Stream};

/// The longest progress message forwarded, in bytes (longer ones are cut).
pub const MAX_PROGRESS_MESSAGE: usize = 256;
/// The least time between two forwarded progress reports.
pub const PROGRESS_INTERVAL: Duration = Duration::from_millis(50);
/// The largest progress or total a JSON report may give: 2^53 - 1, the last
/// integer a JSON number (a double) holds exactly.
pub const MAX_PROGRESS_VALUE: u64 = (1 << 53) - 1;

/// How many progress reports a call made, for its audit record.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ProgressCounts {
    /// Reports that were valid and increasing (forwarded, or merged into a
    /// later one by the rate limit).
    pub accepted: u64,
    /// Reports that were malformed, too long, out of range or not increasing.
    pub ignored: u64,
}

/// Forwards one call's progress reports: bounded, increasing, rate-limited.
#[derive(Default)]
pub struct Reporter {
    tool: String,
    sink: Option<ProgressSink>,
    tap: Option<OutputTap>,
    last_done: Option<u64>,
    last_sent: Option<Instant>,
    pending: Option<Progress>,
    counts: ProgressCounts,
}

impl Reporter {
    /// A reporter for `tool` that forwards to `sink`, or else as lines to `tap`'s stderr.
    pub fn new(tool: &str, sink: Option<ProgressSink>, tap: Option<OutputTap>) -> Reporter {
        Reporter { tool: tool.to_string(), sink, tap, ..Reporter::default() }
    }

    /// Takes one report from the tool: whether it was accepted (it increased).
    pub fn report(&mut self, done: u64, total: Option<u64>, message: &str) -> bool {
        if self.last_done.is_some_and(|last| done <= last) {
            self.counts.ignored += 1;
            return false;
        }
        self.counts.accepted += 1;
        self.last_done = Some(done);
        if self.sink.is_none() && self.tap.is_none() {
            return true;
        }
        let mut message: String =
            crate::shape::sanitize_str(message).chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
        if message.len() > MAX_PROGRESS_MESSAGE {
            let mut end = MAX_PROGRESS_MESSAGE;
            while !message.is_char_boundary(end) {
                end -= 1;
            }
            message.truncate(end);
        }
        self.pending = Some(Progress { done, total: total.filter(|t| *t >= done), message });
        self.flush_due();
        true
    }

    /// Counts a report that could not be taken at all (malformed, too long).
    pub fn ignore(&mut self) {
        self.counts.ignored += 1;
    }

    /// The reports so far.
    pub fn counts(&self) -> ProgressCounts {
        self.counts
    }

    /// How long until the pending report may go, if one waits.
    pub fn due_in(&self) -> Option<Duration> {
        self.pending.as_ref()?;
        Some(self.last_sent.map_or(Duration::ZERO, |t| PROGRESS_INTERVAL.saturating_sub(t.elapsed())))
    }

    /// Sends the pending report if the rate limit lets it go now.
    pub fn flush_due(&mut self) {
        if self.due_in() == Some(Duration::ZERO) {
            self.flush();
        }
    }

    /// Sends the pending report, if any (when the call returns).
    pub fn flush(&mut self) {
        let Some(p) = self.pending.take() else { return };
        self.last_sent = Some(Instant::now());
        if let Some(sink) = &self.sink {
            sink(&p);
        } else if let Some(tap) = &self.tap {
            let total = p.total.map(|t| format!("/{t}")).unwrap_or_default();
            let message = if p.message.is_empty() { String::new() } else { format!(": {}", p.message) };
            tap(Stream::Stderr, format!("[{}] progress {}{total}{message}\n", self.tool, p.done).as_bytes());
        }
    }
}

/// One JSON progress line a process tool wrote: `{"progress": N, "total": M,
/// "message": "…"}` (`total` and `message` optional, other keys ignored).
/// `None` when it is not an object, `progress` is missing, a number is not
/// finite, negative or above [`MAX_PROGRESS_VALUE`], or `message` is not a
/// string. A fraction is rounded down.
pub fn parse_line(line: &[u8]) -> Option<(u64, Option<u64>, String)> {
    let value: Value = serde_json::from_slice(line).ok()?;
    let fields = value.as_object()?;
    let number = |v: &Value| {
        let n = v.as_f64()?;
        (n.is_finite() && n >= 0.0 && n <= MAX_PROGRESS_VALUE as f64).then_some(n.floor() as u64)
    };
    let done = number(fields.get("progress")?)?;
    let total = match fields.get("total") {
        None | Some(Value::Null) => None,
        Some(t) => Some(number(t)?),
    };
    let message = match fields.get("message") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(_) => return None,
    };
    Some((done, total, message))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::{Arc, Mutex};

    use super::*;

    fn collecting() -> (Arc<Mutex<Vec<Progress>>>, ProgressSink) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        (seen, Arc::new(move |p: &Progress| s.lock().unwrap().push(p.clone())))
    }

    #[test]
    fn progress_is_increasing_bounded_and_rate_limited_with_the_last_kept() {
        let (seen, sink) = collecting();
        let mut r = Reporter::new("t", Some(sink), None);
        r.report(1, Some(10), &format!("a\u{1b}[31m{}", "é".repeat(300)));
        r.report(1, Some(10), "same: dropped");
        r.report(0, Some(10), "lower: dropped");
        r.report(2, Some(10), "soon: pending");
        r.report(3, Some(10), "soon: replaces it");
        r.flush();
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 2, "{seen:?}");
        assert_eq!(seen[0].done, 1);
        assert!(seen[0].message.len() <= MAX_PROGRESS_MESSAGE && seen[0].message.starts_with("a[31m"));
        assert_eq!((seen[1].done, seen[1].total, seen[1].message.as_str()), (3, Some(10), "soon: replaces it"));
        assert_eq!(r.counts(), ProgressCounts { accepted: 3, ignored: 2 });
    }

    #[test]
    fn a_held_back_report_goes_once_the_interval_passed() {
        let (seen, sink) = collecting();
        let mut r = Reporter::new("t", Some(sink), None);
        r.report(1, None, "");
        r.report(2, None, "");
        assert_eq!(seen.lock().unwrap().len(), 1);
        assert!(r.due_in().is_some_and(|d| d <= PROGRESS_INTERVAL));
        std::thread::sleep(PROGRESS_INTERVAL);
        r.flush_due();
        assert_eq!(seen.lock().unwrap().len(), 2);
        assert_eq!(r.due_in(), None);
    }

    #[test]
    fn a_message_cannot_break_the_line_or_reach_the_terminal() {
        let lines = Arc::new(Mutex::new(String::new()));
        let l = lines.clone();
        let tap: OutputTap = Arc::new(move |_, b: &[u8]| l.lock().unwrap().push_str(&String::from_utf8_lossy(b)));
        let mut r = Reporter::new("t", None, Some(tap));
        r.report(1, Some(2), "ok\n[t] progress 2/2: forged\r\u{1b}]0;title\u{7}\u{202e}x");
        let lines = lines.lock().unwrap();
        assert_eq!(lines.lines().count(), 1, "{lines:?}");
        assert!(!lines.contains('\u{1b}') && !lines.contains('\u{7}') && !lines.contains('\u{202e}'), "{lines:?}");
        assert!(lines.starts_with("[t] progress 1/2: ok "), "{lines:?}");
    }

    #[test]
    fn json_lines_need_a_finite_non_negative_progress_within_range() {
        assert_eq!(parse_line(br#"{"progress": 1, "total": 3}"#), Some((1, Some(3), String::new())));
        assert_eq!(parse_line(br#"{"progress": 2.7, "message": "m", "x": 1}"#), Some((2, None, "m".into())));
        assert_eq!(parse_line(br#"{"progress": 2, "total": null, "message": null}"#), Some((2, None, String::new())));
        for bad in [
            &br#"{"progress": -1}"#[..],
            br#"{"progress": 1e300}"#,
            br#"{"progress": 1e999}"#,
            br#"{"progress": NaN}"#,
            br#"{"progress": "5"}"#,
            br#"{"progress": 9007199254740993}"#,
            br#"{"progress": 1, "total": -3}"#,
            br#"{"progress": 1, "message": 5}"#,
            br#"{"total": 3}"#,
            br#"[1, 3]"#,
            b"not json",
        ] {
            assert_eq!(parse_line(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }
}
