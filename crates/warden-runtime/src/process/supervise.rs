//! The host's watch over one call, in one `poll` loop on the calling thread:
//! the helper's exit (a pidfd), its stdout and stderr (read as they come, each
//! kept within its cap and shown to the tap: a program is never stopped for
//! what it prints), the wall-clock limit and the cancel switch. Then the kill
//! of whatever is left in the group, and the reap.
//!
//! One loop rather than a thread per pipe and one waiting for the exit: when
//! the tool ends, one wake-up sees it. With threads, the end of a call was a
//! chain of four wake-ups (two readers, the waiter, the caller), each waiting
//! for a CPU while the kernel tore the call's namespaces down on the other
//! (1.5–3.5 ms on two cores), and each call made and ended three threads.

use std::io::Read;
use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::process::{ChildStderr, ChildStdout};
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
use nix::unistd::Pid;

use super::cgroup::CallCgroup;
use crate::error::{CallError, ErrorCode};
use crate::{Cancel, OutputTap, Stream, capture};

/// How often the loop looks at the cancel switch (and, on a kernel without
/// pidfds, at the helper).
const CANCEL_POLL: Duration = Duration::from_millis(20);

/// How long the pipes are drained once the group is dead: every writer is
/// gone then, so they end at once; the bound is for what cannot happen.
const DRAIN_GRACE: Duration = Duration::from_secs(2);

/// How a supervised process ended.
pub(super) struct Ended {
    pub status: i32,
    pub rusage: libc::rusage,
    pub timed_out: bool,
    pub cancelled: bool,
}

/// Chunks on their way to the tap, at most this many at once: past that,
/// the pipe is not read until the tap catches up (the tool then waits on its
/// full pipe, as it would on a slow terminal), while the deadline still holds.
const TAP_QUEUE: usize = 16;

/// What the watch saw: how the helper ended, and what it printed.
pub(super) struct Watched {
    pub ended: Result<Ended, CallError>,
    pub stdout: capture::HeadTail,
    pub stderr: capture::HeadTail,
    /// A pipe still open [`DRAIN_GRACE`] after the group died was left unread:
    /// what it held is missing (the result says truncated).
    pub cut_short: bool,
}

/// One of the helper's output pipes.
struct Pipe<R> {
    which: Stream,
    reader: Option<R>,
    kept: capture::HeadTail,
    /// A chunk the tap's queue had no room for yet; the pipe waits until it has.
    pending: Option<Vec<u8>>,
}

impl<R: Read + AsFd> Pipe<R> {
    fn new(which: Stream, reader: Option<R>, cap: usize) -> Pipe<R> {
        // Non-blocking: poll's "readable" is only a hint (the tool can reopen its
        // own stdout through /proc/self/fd and take the bytes first), and a read
        // that blocked here would stop the deadline and the cancel switch.
        if let Some(r) = &reader
            && let Err(e) = rustix::io::ioctl_fionbio(r.as_fd(), true)
        {
            tracing::warn!("cannot make the tool's {which:?} pipe non-blocking: {e}");
        }
        Pipe { which, reader, kept: capture::HeadTail::new(cap), pending: None }
    }

    /// Whether to poll it: open, and nothing waiting for the tap.
    fn wants_input(&self) -> bool {
        self.reader.is_some() && self.pending.is_none()
    }

    /// Reads once: a chunk, the end, or nothing (another reader took it).
    fn read_once(&mut self, buf: &mut [u8], tap: Option<&TapFeed>) {
        let Some(reader) = self.reader.as_mut() else { return };
        match reader.read(buf) {
            Ok(0) => self.reader = None,
            Ok(n) => {
                self.kept.push(&buf[..n]);
                if let Some(feed) = tap {
                    self.pending = feed.offer(self.which, buf[..n].to_vec());
                }
            }
            Err(e) if matches!(e.kind(), std::io::ErrorKind::Interrupted | std::io::ErrorKind::WouldBlock) => {}
            Err(_) => self.reader = None,
        }
    }

    /// Hands the waiting chunk to the tap if its queue has room now.
    fn flush(&mut self, tap: Option<&TapFeed>) {
        if let (Some(chunk), Some(feed)) = (self.pending.take(), tap) {
            self.pending = feed.offer(self.which, chunk);
        }
    }
}

/// The tap, called on a thread of its own (a tap may block: `--stream`
/// writes to a terminal that may be stopped), fed through a bounded queue.
struct TapFeed {
    queue: std::sync::mpsc::SyncSender<(Stream, Vec<u8>)>,
    thread: std::thread::JoinHandle<()>,
}

impl TapFeed {
    fn start(tap: &OutputTap) -> TapFeed {
        let (queue, chunks) = std::sync::mpsc::sync_channel::<(Stream, Vec<u8>)>(TAP_QUEUE);
        let tap = tap.clone();
        let thread = std::thread::spawn(move || {
            for (which, chunk) in chunks {
                tap(which, &chunk);
            }
        });
        TapFeed { queue, thread }
    }

    /// Queues `chunk`; gives it back when the queue is full.
    fn offer(&self, which: Stream, chunk: Vec<u8>) -> Option<Vec<u8>> {
        match self.queue.try_send((which, chunk)) {
            Ok(()) | Err(std::sync::mpsc::TrySendError::Disconnected(_)) => None,
            Err(std::sync::mpsc::TrySendError::Full((_, chunk))) => Some(chunk),
        }
    }

    /// Delivers what is left (the tool is gone: waiting on the tap now holds
    /// only the call's return) and waits for the tap to finish.
    fn finish(self, pipes: [Option<(Stream, Vec<u8>)>; 2]) {
        for (which, chunk) in pipes.into_iter().flatten() {
            let _ = self.queue.send((which, chunk));
        }
        drop(self.queue);
        let _ = self.thread.join();
    }
}

/// Kills the helper's group if the watch unwinds, so no tool outlives it.
struct KillOnUnwind(Pid);

impl Drop for KillOnUnwind {
    fn drop(&mut self) {
        if std::thread::panicking() {
            kill_helper(self.0);
        }
    }
}

/// Watches the helper `pid` until it has exited and both pipes have ended,
/// killing its whole process group at the deadline or on cancel, then kills
/// what is left in the group (before reaping, so the group id cannot be
/// reused), and reaps it.
pub(super) fn supervise(
    pid: Pid,
    (stdout, stderr): (Option<ChildStdout>, Option<ChildStderr>),
    cap: usize,
    tap: Option<&OutputTap>,
    timeout: Duration,
    cancel: &Cancel,
    cgroup: Option<&CallCgroup>,
) -> Watched {
    let _guard = KillOnUnwind(pid);
    let mut out = Pipe::new(Stream::Stdout, stdout, cap);
    let mut err = Pipe::new(Stream::Stderr, stderr, cap);
    let feed = tap.map(TapFeed::start);
    // Without a pidfd (a kernel before 5.3), the exit is looked for at every tick.
    let pidfd = pidfd_open(pid).ok();
    let deadline = Instant::now() + timeout;
    let (mut timed_out, mut cancelled, mut killed) = (false, false, false);
    let mut exited_at: Option<Instant> = None;
    let mut buf = vec![0u8; 64 << 10];
    let mut failure = None;
    let mut cut_short = false;
    loop {
        if let Some(at) = exited_at {
            if out.reader.is_none() && err.reader.is_none() {
                break;
            }
            if at.elapsed() > DRAIN_GRACE || failure.is_some() {
                cut_short = true;
                tracing::warn!("the tool's output pipes were still open {DRAIN_GRACE:?} after its group died");
                break;
            }
        } else if !killed {
            if Instant::now() >= deadline {
                timed_out = true;
            } else if cancel.is_cancelled() {
                cancelled = true;
            }
            if timed_out || cancelled {
                kill_helper(pid);
                killed = true;
            }
        }
        out.flush(feed.as_ref());
        err.flush(feed.as_ref());
        let waiting_on_tap = out.pending.is_some() || err.pending.is_some();
        let mut tick = match exited_at {
            Some(at) => DRAIN_GRACE.saturating_sub(at.elapsed()),
            None if killed => CANCEL_POLL,
            None => CANCEL_POLL.min(deadline.saturating_duration_since(Instant::now())),
        };
        if waiting_on_tap {
            // Looked at again soon: the tap may have made room.
            tick = tick.min(Duration::from_millis(1));
        }
        let watch_exit = exited_at.is_none();
        let (out_ready, err_ready, exit_ready) = {
            let watched = [
                out.reader.as_ref().filter(|_| out.wants_input()).map(AsFd::as_fd),
                err.reader.as_ref().filter(|_| err.wants_input()).map(AsFd::as_fd),
                pidfd.as_ref().filter(|_| watch_exit).map(AsFd::as_fd),
            ];
            let mut fds = Vec::with_capacity(3);
            let mut at = [None; 3];
            for (i, fd) in watched.into_iter().enumerate() {
                if let Some(fd) = fd {
                    at[i] = Some(fds.len());
                    fds.push(PollFd::new(fd, PollFlags::POLLIN));
                }
            }
            let [o, e, p] = at;
            // Rounded up: a wait under a millisecond would be no wait, and spin.
            let ms = tick.as_micros().div_ceil(1000);
            let wait = PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX);
            match poll(&mut fds, wait) {
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(e) => {
                    failure = Some(format!("poll: {e}"));
                    kill_helper(pid);
                    killed = true;
                }
            }
            let ready = |i: Option<usize>| i.is_some_and(|i| fds[i].revents().is_some_and(|r| !r.is_empty()));
            (ready(o), ready(e), ready(p))
        };
        if out_ready {
            out.read_once(&mut buf, feed.as_ref());
        }
        if err_ready {
            err.read_once(&mut buf, feed.as_ref());
        }
        if watch_exit && (exit_ready || (pidfd.is_none() && has_exited(pid))) {
            // The helper is a zombie now (not reaped: it keeps the pid and the
            // group id reserved): what is left in its group dies, so every
            // writer of the pipes is gone and they end.
            kill_group(pid, cgroup);
            exited_at = Some(Instant::now());
        }
        if failure.is_some() && exited_at.is_none() {
            // poll itself failed (the helper was killed): wait for the exit without it.
            while let Err(nix::errno::Errno::EINTR) = waitid(Id::Pid(pid), WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT)
            {
            }
            kill_group(pid, cgroup);
            exited_at = Some(Instant::now());
        }
    }
    if let Some(feed) = feed {
        feed.finish([out.pending.take().map(|c| (out.which, c)), err.pending.take().map(|c| (err.which, c))]);
    }
    let ended = reap(pid, timed_out, cancelled).and_then(|e| match failure {
        Some(why) => Err(CallError::new(ErrorCode::Internal, why)),
        None => Ok(e),
    });
    Watched { ended, stdout: out.kept, stderr: err.kept, cut_short }
}

/// The helper, and its group once it made one (before its `setsid` there is none).
pub(super) fn kill_helper(pid: Pid) {
    let _ = killpg(pid, Signal::SIGKILL);
    let _ = nix::sys::signal::kill(pid, Signal::SIGKILL);
}

/// Whether the helper has exited (not reaped).
fn has_exited(pid: Pid) -> bool {
    match waitid(Id::Pid(pid), WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT | WaitPidFlag::WNOHANG) {
        Ok(WaitStatus::StillAlive) | Err(nix::errno::Errno::EINTR) => false,
        // Exited, or nothing to wait for (then nothing will change either).
        Ok(_) | Err(_) => true,
    }
}

/// Reaps the helper with its resource usage, then any other child of warden's
/// in the call's group (seccomp refuses `CLONE_PARENT`, so there should be
/// none): no zombie piles up.
fn reap(pid: Pid, timed_out: bool, cancelled: bool) -> Result<Ended, CallError> {
    let mut status = 0;
    // SAFETY: rusage is plain data the kernel fills; status is a valid i32 out-pointer.
    #[allow(unsafe_code)]
    let (r, rusage) = unsafe {
        let mut rusage: libc::rusage = std::mem::zeroed();
        let r = libc::wait4(pid.as_raw(), &mut status, 0, &mut rusage);
        (r, rusage)
    };
    if r < 0 {
        return Err(CallError::new(ErrorCode::Internal, format!("wait4: {}", std::io::Error::last_os_error())));
    }
    while let Ok(s) = waitid(Id::PGid(pid), WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG) {
        if s == WaitStatus::StillAlive {
            break;
        }
    }
    Ok(Ended { status, rusage, timed_out, cancelled })
}

/// A descriptor that becomes readable when `pid` exits.
fn pidfd_open(pid: Pid) -> std::io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or
    // -1; no memory is passed. The pid is our unreaped child, so it cannot have
    // been reused for another process.
    #[allow(unsafe_code)]
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid.as_raw(), 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor to us; nothing else owns it.
    #[allow(unsafe_code)]
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Sends SIGKILL to the group until nothing in it is left.
/// With the call's pids cgroup (as root) its `cgroup.procs` names the live
/// members (zombies are not listed, and no member can leave: `setsid` and
/// `setpgid` are refused, the cgroup files are outside every grant); without
/// one, `/proc` is scanned, which costs a read per process on the host.
pub(super) fn kill_group(pgid: Pid, cgroup: Option<&CallCgroup>) {
    for _ in 0..1000 {
        if let Err(nix::errno::Errno::ESRCH) = killpg(pgid, Signal::SIGKILL) {
            return;
        }
        // Only the zombie leader may remain: check whether any other member lives.
        let live = match cgroup {
            Some(c) => c.pids().iter().any(|p| *p != pgid.as_raw()),
            None => group_has_live_members(pgid),
        };
        if !live {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn group_has_live_members(pgid: Pid) -> bool {
    let Ok(dir) = std::fs::read_dir("/proc") else { return false };
    dir.filter_map(Result::ok).any(|e| {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(|s| s.parse::<i32>().ok()) else { return false };
        if pid == pgid.as_raw() {
            return false;
        }
        std::fs::read_to_string(format!("/proc/{pid}/stat")).ok().is_some_and(|stat| {
            // Fields after the command (which may contain spaces): state ppid pgrp ...
            stat.rsplit_once(')').is_some_and(|(_, rest)| {
                let f: Vec<&str> = rest.split_whitespace().collect();
                f.get(2).and_then(|g| g.parse::<i32>().ok()) == Some(pgid.as_raw()) && f.first() != Some(&"Z")
            })
        })
    })
}
