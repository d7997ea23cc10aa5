//! `WARDEN_PROGRESS_FD`: a process tool's own progress reports. Per call the
//! host makes a pipe ([`ProgressPipe`]) whose write end is the one descriptor
//! above 2 the tool gets (sent to the helper after the spec, [`send_fd`] and
//! [`recv_fd`]); a thread of the host reads the other end ([`ProgressReader`])
//! into the shared [`Reporter`]. The tool's input is bounded and never fatal
//! ([`MAX_PROGRESS_LINE`], [`MAX_PROGRESS_BYTES`], [`DRAIN_GRACE`]); what a
//! program may write is in docs/policy.md ("Progress", under process tools).

use std::os::fd::{AsFd, OwnedFd};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

use crate::progress::{ProgressCounts, Reporter, parse_line};
pub use warden_sandbox::progress::{PROGRESS_ENV, recv_fd, send_fd};

/// The longest progress line read, in bytes with its newline; longer ones are skipped.
pub const MAX_PROGRESS_LINE: usize = 4096;
/// The most bytes read from one call's progress pipe; past it the host closes its end.
pub const MAX_PROGRESS_BYTES: u64 = 16 << 20;
/// How long the reader drains the pipe after the program's tree is gone.
pub const DRAIN_GRACE: Duration = Duration::from_millis(200);

/// The call's progress pipe, before the helper starts.
pub struct ProgressPipe {
    /// The host's end (non-blocking, close-on-exec).
    pub read: OwnedFd,
    /// The tool's end (close-on-exec in the host; sent to the helper).
    pub write: OwnedFd,
}

impl ProgressPipe {
    /// A fresh pipe, both ends close-on-exec, the read end non-blocking.
    pub fn new() -> std::io::Result<ProgressPipe> {
        let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
        let flags = rustix::fs::fcntl_getfl(&read)?;
        rustix::fs::fcntl_setfl(&read, flags | rustix::fs::OFlags::NONBLOCK)?;
        Ok(ProgressPipe { read, write })
    }
}

/// Reads one call's progress pipe on a thread of its own.
pub struct ProgressReader {
    /// Dropped (or written to) when the program's tree is gone.
    ended: mpsc::Sender<()>,
    thread: std::thread::JoinHandle<ProgressCounts>,
}

impl ProgressReader {
    /// Starts reading `read` into `reporter`.
    pub fn start(read: OwnedFd, reporter: Reporter) -> ProgressReader {
        let (ended, rx) = mpsc::channel();
        let thread = std::thread::spawn(move || read_reports(read, reporter, &rx, MAX_PROGRESS_BYTES));
        ProgressReader { ended, thread }
    }

    /// The program's tree is gone: drains what is left (at most
    /// [`DRAIN_GRACE`]), sends the last held-back report, and returns the counts.
    pub fn finish(self) -> ProgressCounts {
        drop(self.ended);
        self.thread.join().unwrap_or_default()
    }
}

/// Splits the pipe's bytes into bounded lines.
struct Lines {
    line: Vec<u8>,
    /// The current line passed [`MAX_PROGRESS_LINE`]: skipped to its newline.
    overlong: bool,
}

impl Lines {
    fn push(&mut self, mut data: &[u8], reporter: &mut Reporter) {
        while !data.is_empty() {
            let (part, rest, complete) = match data.iter().position(|&b| b == b'\n') {
                Some(i) => (&data[..i], &data[i + 1..], true),
                None => (data, &[][..], false),
            };
            if !self.overlong && self.line.len() + part.len() < MAX_PROGRESS_LINE {
                self.line.extend_from_slice(part);
            } else {
                self.overlong = true;
                self.line.clear();
            }
            if complete {
                self.end_line(reporter);
            }
            data = rest;
        }
    }

    fn end_line(&mut self, reporter: &mut Reporter) {
        if self.overlong {
            reporter.ignore();
        } else if !self.line.trim_ascii().is_empty() {
            match parse_line(&self.line) {
                Some((done, total, message)) => {
                    reporter.report(done, total, &message);
                }
                None => reporter.ignore(),
            }
        }
        self.line.clear();
        self.overlong = false;
    }
}

/// The reader's loop: until end of file, the byte bound, or [`DRAIN_GRACE`]
/// after `ended` says the program's tree is gone.
fn read_reports(read: OwnedFd, mut reporter: Reporter, ended: &mpsc::Receiver<()>, max_bytes: u64) -> ProgressCounts {
    let mut lines = Lines { line: Vec::new(), overlong: false };
    let mut buf = vec![0u8; 16 << 10];
    let mut total = 0u64;
    let mut deadline: Option<Instant> = None;
    /// How often the loop looks whether the program ended.
    const LOOK: Duration = Duration::from_millis(20);
    'read: loop {
        if deadline.is_none() && !matches!(ended.try_recv(), Err(mpsc::TryRecvError::Empty)) {
            deadline = Some(Instant::now() + DRAIN_GRACE);
        }
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            break;
        }
        let mut wait = LOOK;
        if let Some(d) = deadline {
            wait = wait.min(d - now);
        }
        if let Some(due) = reporter.due_in() {
            wait = wait.min(due);
        }
        let mut fds = [PollFd::new(read.as_fd(), PollFlags::POLLIN)];
        let ms = PollTimeout::try_from(wait.as_millis().max(1) as u64 as i32).unwrap_or(PollTimeout::MAX);
        match poll(&mut fds, ms) {
            Ok(0) | Err(nix::errno::Errno::EINTR) => {}
            Ok(_) => loop {
                match rustix::io::read(&read, &mut buf) {
                    Ok(0) => break 'read,
                    Ok(n) => {
                        let n = n.min(usize::try_from(max_bytes - total).unwrap_or(usize::MAX));
                        total += n as u64;
                        lines.push(&buf[..n], &mut reporter);
                        if total >= max_bytes {
                            tracing::debug!("a process tool wrote {total} bytes of progress: no more is read");
                            reporter.ignore();
                            break 'read;
                        }
                    }
                    Err(rustix::io::Errno::INTR) => {}
                    Err(_) => break,
                }
            },
            Err(_) => break,
        }
        reporter.flush_due();
    }
    // A last line without its newline, when whole.
    if !lines.line.is_empty() || lines.overlong {
        lines.end_line(&mut reporter);
    }
    drop(read);
    reporter.flush();
    reporter.counts()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::{Progress, ProgressSink};

    fn run(input: &[u8], max_bytes: u64) -> (Vec<Progress>, ProgressCounts) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        let sink: ProgressSink = Arc::new(move |p: &Progress| s.lock().unwrap().push(p.clone()));
        let pipe = ProgressPipe::new().unwrap();
        let input = input.to_vec();
        let mut w = std::fs::File::from(pipe.write);
        let writer = std::thread::spawn(move || {
            let _ = w.write_all(&input);
        });
        let (_tx, rx) = mpsc::channel();
        let counts = read_reports(pipe.read, Reporter::new("t", Some(sink), None), &rx, max_bytes);
        let _ = writer.join();
        let seen = seen.lock().unwrap().clone();
        (seen, counts)
    }

    #[test]
    fn lines_are_bounded_and_bad_ones_are_counted_not_fatal() {
        let long = format!("{{\"progress\": 2, \"message\": \"{}\"}}\n", "x".repeat(MAX_PROGRESS_LINE));
        let input = format!(
            "{{\"progress\": 1, \"total\": 4}}\n{long}not json\n\n{{\"progress\": -3}}\n{{\"progress\": 1}}\n{{\"progress\": 3, \"total\": 4}}"
        );
        let (seen, counts) = run(input.as_bytes(), MAX_PROGRESS_BYTES);
        let got: Vec<(u64, Option<u64>)> = seen.iter().map(|p| (p.done, p.total)).collect();
        assert_eq!(got, [(1, Some(4)), (3, Some(4))]);
        assert_eq!(counts, ProgressCounts { accepted: 2, ignored: 4 });
    }

    #[test]
    fn a_write_end_held_open_elsewhere_cannot_hold_the_call_up() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        let sink: ProgressSink = Arc::new(move |p: &Progress| s.lock().unwrap().push(p.clone()));
        let pipe = ProgressPipe::new().unwrap();
        // A descendant that outlived the program keeps the write end open, and wrote one report.
        let mut kept = std::fs::File::from(pipe.write);
        kept.write_all(b"{\"progress\": 7}\n").unwrap();
        let reader = ProgressReader::start(pipe.read, Reporter::new("t", Some(sink), None));
        std::thread::sleep(Duration::from_millis(50));
        let started = Instant::now();
        let counts = reader.finish();
        assert!(started.elapsed() < DRAIN_GRACE + Duration::from_millis(300), "{:?}", started.elapsed());
        assert_eq!(counts.accepted, 1);
        assert_eq!(seen.lock().unwrap().len(), 1);
        drop(kept);
    }

    #[test]
    fn reading_stops_at_the_byte_bound() {
        let line = b"{\"progress\": 1}\n".repeat(10_000);
        let (seen, counts) = run(&line, 1000);
        assert_eq!(seen.len(), 1);
        // 1000 bytes: 58 whole lines, one counted as accepted, the rest not increasing,
        // and one more for the bound.
        assert_eq!(counts.accepted, 1);
        assert!(counts.ignored < 100, "{counts:?}");
    }
}
