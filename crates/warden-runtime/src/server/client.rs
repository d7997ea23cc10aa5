//! A synchronous MCP client over one sandboxed server's stdin and stdout:
//! newline-delimited JSON-RPC, requests matched to responses by id.
//!
//! The server is untrusted. A reader thread takes its stdout one message at a
//! time, each at most [`MAX_MESSAGE`] bytes (a longer one ends the connection);
//! responses go to the request that waits for them, requests from the server are
//! answered (`ping`) or refused (sampling, elicitation, roots: a wrapped server
//! gets nothing from warden's client), notifications are dropped. A second
//! thread keeps the last [`STDERR_TAIL`] bytes of its stderr for error messages.
//! When stdout ends, the process group is killed and reaped, and every waiting
//! request fails with the exit status and that tail.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{RecvTimeoutError, SyncSender, sync_channel};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::Cancel;
use crate::error::{CallError, ErrorCode};
use crate::process::ServerProcess;

/// The largest message a server may send.
pub const MAX_MESSAGE: usize = 16 << 20;
/// How much of a server's stderr is kept for messages.
const STDERR_TAIL: usize = 4096;
/// How long a failed call waits for the server's stderr to be read to its end.
const STDERR_SETTLE: Duration = Duration::from_millis(200);
/// How long a write to a server that does not read may block.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// How often a waiting request looks at its cancel switch.
const POLL: Duration = Duration::from_millis(20);

/// What a request got back.
enum Reply {
    Result(Value),
    Error(i64, String),
}

type Pending = Arc<Mutex<HashMap<u64, SyncSender<Reply>>>>;
/// Where a request's `notifications/progress` go, by its progress token (its id).
type Progress = Arc<Mutex<HashMap<u64, SyncSender<Value>>>>;

/// Who sees a request's progress, and where its notifications wait.
type Watch<'a> = (&'a dyn Fn(&Value), &'a std::sync::mpsc::Receiver<Value>);

/// Progress notifications kept for one request between two looks (more are dropped).
const MAX_PROGRESS_QUEUED: usize = 64;

/// One live connection to a server process.
pub struct Connection {
    name: String,
    writer: Mutex<UnixStream>,
    pending: Pending,
    progress: Progress,
    next_id: AtomicU64,
    alive: Arc<AtomicBool>,
    ended: Arc<Mutex<Option<String>>>,
    stderr: Arc<Mutex<Tail>>,
    /// The stderr pipe's read end (a copy), to see whether bytes wait unread.
    stderr_fd: std::os::fd::OwnedFd,
    /// Stopped and reaped by the reader when stdout ends, or on drop.
    process: Arc<Mutex<ServerProcess>>,
    /// When it started.
    pub started: Instant,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection").field("name", &self.name).finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Connection {
    /// Takes over `process`'s stdio and starts the reader threads.
    pub fn new(name: &str, mut process: ServerProcess) -> Result<Connection, CallError> {
        let Some((stdin, stdout, stderr)) = process.take_stdio() else {
            return Err(CallError::new(ErrorCode::Internal, format!("server {name}: its stdio is not available")));
        };
        let _ = stdin.set_write_timeout(Some(WRITE_TIMEOUT));
        let pending: Pending = Arc::default();
        let progress: Progress = Arc::default();
        let alive = Arc::new(AtomicBool::new(true));
        let ended = Arc::new(Mutex::new(None));
        let tail = Arc::new(Mutex::new(Tail::default()));
        let process = Arc::new(Mutex::new(process));
        let replies = stdin
            .try_clone()
            .map_err(|e| CallError::new(ErrorCode::Internal, format!("server {name}: cannot clone its stdin: {e}")))?;
        let stderr_fd = std::os::fd::AsFd::as_fd(&stderr)
            .try_clone_to_owned()
            .map_err(|e| CallError::new(ErrorCode::Internal, format!("server {name}: cannot clone its stderr: {e}")))?;
        {
            let tail = tail.clone();
            std::thread::Builder::new()
                .name(format!("warden-{name}-stderr"))
                .spawn(move || keep_tail(stderr, &tail))
                .map_err(|e| CallError::new(ErrorCode::Internal, format!("cannot start a thread: {e}")))?;
        }
        {
            let (name, pending, alive, ended, tail, process) =
                (name.to_string(), pending.clone(), alive.clone(), ended.clone(), tail.clone(), process.clone());
            let progress = progress.clone();
            std::thread::Builder::new()
                .name(format!("warden-{name}-stdout"))
                .spawn(move || {
                    let why = read_messages(stdout, replies, &pending, &progress);
                    alive.store(false, Ordering::SeqCst);
                    let status = lock(&process).stop_after(Duration::from_millis(500));
                    let said = String::from_utf8_lossy(&lock(&tail).bytes).trim().to_string();
                    let said = if said.is_empty() { String::new() } else { format!("; its stderr ends: {said}") };
                    *lock(&ended) = Some(format!("server {name} {why} ({status}){said}"));
                    // Waiting requests see the closed channel and read `ended`.
                    lock(&pending).clear();
                })
                .map_err(|e| CallError::new(ErrorCode::Internal, format!("cannot start a thread: {e}")))?;
        }
        Ok(Connection {
            name: name.to_string(),
            writer: Mutex::new(stdin),
            pending,
            progress,
            next_id: AtomicU64::new(1),
            alive,
            ended,
            stderr: tail,
            stderr_fd,
            process,
            started: Instant::now(),
        })
    }

    /// Whether the server still runs.
    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::SeqCst)
    }

    /// Why it ended, once it has.
    pub fn ended(&self) -> Option<String> {
        lock(&self.ended).clone()
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        lock(&self.process).pid()
    }

    /// Applies what the server wrote so far to the real tree (its layer,
    /// judged); `None` when it has none.
    pub fn apply_layer(&self) -> Option<crate::layer::Applied> {
        lock(&self.process).apply_layer()
    }

    /// Stops the server now.
    pub fn stop(&self) {
        lock(&self.process).stop();
    }

    /// The last bytes the server wrote to stderr.
    pub fn stderr_tail(&self) -> String {
        String::from_utf8_lossy(&lock(&self.stderr).bytes).to_string()
    }

    /// How many bytes the server has written to stderr so far (a mark for [`Connection::stderr_since`]).
    pub fn stderr_mark(&self) -> u64 {
        lock(&self.stderr).total
    }

    /// What the server wrote to stderr since `mark`, as far as the kept tail
    /// reaches, once the pipe holds nothing unread (the reader appends what it
    /// reads under the tail's lock, so an empty pipe under that lock means every
    /// byte written so far is in the tail), waiting at most [`STDERR_SETTLE`].
    pub fn stderr_since(&self, mark: u64) -> String {
        let deadline = Instant::now() + STDERR_SETTLE;
        loop {
            let t = lock(&self.stderr);
            let unread = rustix::io::ioctl_fionread(&self.stderr_fd).unwrap_or(0);
            if unread == 0 || Instant::now() >= deadline {
                let new = usize::try_from(t.total.saturating_sub(mark)).unwrap_or(usize::MAX).min(t.bytes.len());
                return String::from_utf8_lossy(&t.bytes[t.bytes.len() - new..]).to_string();
            }
            drop(t);
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn send(&self, message: &Value) -> Result<(), CallError> {
        let mut line = message.to_string();
        line.push('\n');
        lock(&self.writer).write_all(line.as_bytes()).map_err(|e| {
            CallError::new(
                ErrorCode::ExecutionFailed,
                format!(
                    "server {}: cannot send to it: {e}{}",
                    self.name,
                    self.ended().map(|w| format!(" ({w})")).unwrap_or_default()
                ),
            )
        })
    }

    /// Sends a notification.
    pub fn notify(&self, method: &str, params: Value) -> Result<(), CallError> {
        self.send(&json!({"jsonrpc": "2.0", "method": method, "params": params}))
    }

    /// Sends a request and waits for its result, at most `timeout`, or until `cancel`.
    /// A request that times out or is cancelled is cancelled at the server too.
    pub fn request(&self, method: &str, params: Value, timeout: Duration, cancel: &Cancel) -> Result<Value, CallError> {
        self.request_with_progress(method, params, timeout, cancel, None)
    }

    /// [`Connection::request`], asking for progress (a `progressToken`) when
    /// `on_progress` is given: it sees each `notifications/progress` params.
    pub fn request_with_progress(
        &self,
        method: &str,
        mut params: Value,
        timeout: Duration,
        cancel: &Cancel,
        on_progress: Option<&dyn Fn(&Value)>,
    ) -> Result<Value, CallError> {
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        let progress = on_progress.map(|f| {
            let (tx, rx) = sync_channel(MAX_PROGRESS_QUEUED);
            lock(&self.progress).insert(id, tx);
            if let Some(p) = params.as_object_mut() {
                p.insert("_meta".into(), json!({"progressToken": id}));
            }
            (f, rx)
        });
        let result = self.exchange(id, method, params, timeout, cancel, progress.as_ref().map(|(f, rx)| (*f, rx)));
        lock(&self.progress).remove(&id);
        result
    }

    fn exchange(
        &self,
        id: u64,
        method: &str,
        params: Value,
        timeout: Duration,
        cancel: &Cancel,
        progress: Option<Watch<'_>>,
    ) -> Result<Value, CallError> {
        let (tx, rx) = sync_channel(1);
        lock(&self.pending).insert(id, tx);
        if !self.is_alive() {
            lock(&self.pending).remove(&id);
            return Err(self.gone());
        }
        if let Err(e) = self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})) {
            lock(&self.pending).remove(&id);
            return Err(e);
        }
        let deadline = Instant::now() + timeout;
        loop {
            let now = Instant::now();
            let stop = if now >= deadline {
                Some((ErrorCode::Timeout, format!("did not answer {method} within {timeout:?} (limits.timeout)")))
            } else if cancel.is_cancelled() {
                Some((ErrorCode::Cancelled, format!("{method} was cancelled by the caller")))
            } else {
                None
            };
            if let Some((code, why)) = stop {
                lock(&self.pending).remove(&id);
                let _ = self.notify("notifications/cancelled", json!({"requestId": id, "reason": why}));
                return Err(CallError::new(code, format!("server {}: {why}", self.name)));
            }
            if let Some((show, queued)) = progress {
                while let Ok(p) = queued.try_recv() {
                    show(&p);
                }
            }
            match rx.recv_timeout(POLL.min(deadline - now)) {
                Ok(Reply::Result(v)) => return Ok(v),
                Ok(Reply::Error(code, message)) => {
                    let message: String = message.chars().take(2048).collect();
                    return Err(CallError::new(
                        if code == -32602 { ErrorCode::InvalidArgs } else { ErrorCode::ExecutionFailed },
                        format!("server {}: {method} failed: {message} (JSON-RPC error {code})", self.name),
                    ));
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return Err(self.gone()),
            }
        }
    }

    fn gone(&self) -> CallError {
        // The reader sets `ended` just before it drops the waiting requests.
        for _ in 0..100 {
            if let Some(why) = self.ended() {
                return CallError::new(ErrorCode::ExecutionFailed, format!("{why}; it is restarted for the next call"));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        CallError::new(ErrorCode::ExecutionFailed, format!("server {} stopped answering", self.name))
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Reads the server's messages until its stdout ends or it breaks the protocol;
/// returns what happened, for the message.
fn read_messages(stdout: impl Read, mut replies: UnixStream, pending: &Pending, progress: &Progress) -> String {
    let mut reader = BufReader::with_capacity(64 << 10, stdout);
    let mut line = Vec::new();
    loop {
        line.clear();
        match (&mut reader).take(MAX_MESSAGE as u64 + 1).read_until(b'\n', &mut line) {
            Ok(0) => return "exited".into(),
            Ok(_) if line.len() > MAX_MESSAGE => {
                return format!("sent a message larger than {MAX_MESSAGE} bytes and was stopped");
            }
            Ok(_) => {}
            Err(e) => return format!("could not be read ({e}) and was stopped"),
        }
        let text = line.trim_ascii();
        if text.is_empty() {
            continue;
        }
        let Ok(message) = serde_json::from_slice::<Value>(text) else {
            tracing::debug!("a server wrote a line that is not JSON; ignored");
            continue;
        };
        let id = message.get("id").cloned();
        match (message.get("method").and_then(Value::as_str), id) {
            // A request from the server: warden's client offers nothing but ping.
            (Some(method), Some(id)) => {
                let answer = if method == "ping" {
                    json!({"jsonrpc": "2.0", "id": id, "result": {}})
                } else {
                    json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "not offered to servers run by warden"}})
                };
                let mut out = answer.to_string();
                out.push('\n');
                let _ = replies.write_all(out.as_bytes());
            }
            // Progress of a request that asked for it; other notifications are dropped.
            (Some("notifications/progress"), None) => {
                let params = message.get("params").cloned().unwrap_or(Value::Null);
                if let Some(token) = params.get("progressToken").and_then(Value::as_u64)
                    && let Some(tx) = lock(progress).get(&token)
                {
                    let _ = tx.try_send(params);
                }
            }
            (Some(_), None) => {}
            (None, Some(id)) => {
                let Some(id) = id.as_u64() else { continue };
                let Some(tx) = lock(pending).remove(&id) else { continue };
                let reply = match (message.get("result"), message.get("error")) {
                    (Some(r), _) => Reply::Result(r.clone()),
                    (None, Some(e)) => Reply::Error(
                        e.get("code").and_then(Value::as_i64).unwrap_or(0),
                        e.get("message").and_then(Value::as_str).unwrap_or("no message").to_string(),
                    ),
                    (None, None) => Reply::Error(0, "a response with neither result nor error".into()),
                };
                let _ = tx.try_send(reply);
            }
            (None, None) => {}
        }
    }
}

/// The last [`STDERR_TAIL`] bytes a server wrote to stderr, and how many it wrote in all.
#[derive(Default)]
struct Tail {
    bytes: Vec<u8>,
    total: u64,
}

/// Keeps the last [`STDERR_TAIL`] bytes of `stderr` in `tail`: waits until
/// the pipe is readable, then reads and appends under the tail's lock (see
/// [`Connection::stderr_since`]).
fn keep_tail(mut stderr: std::process::ChildStderr, tail: &Mutex<Tail>) {
    let mut buf = [0u8; 8192];
    loop {
        let mut fds = [nix::poll::PollFd::new(std::os::fd::AsFd::as_fd(&stderr), nix::poll::PollFlags::POLLIN)];
        match nix::poll::poll(&mut fds, nix::poll::PollTimeout::NONE) {
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return,
        }
        let mut t = lock(tail);
        match stderr.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                t.bytes.extend_from_slice(&buf[..n]);
                t.total += n as u64;
                if t.bytes.len() > STDERR_TAIL {
                    let cut = t.bytes.len() - STDERR_TAIL;
                    t.bytes.drain(..cut);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}
