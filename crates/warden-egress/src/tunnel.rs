//! What every kind of proxy connection shares: the proxy's state, the record
//! of one attempt (written to the journal when the connection ends, however
//! it ends), connecting upstream within [`CONNECT_TIMEOUT`], and copying both
//! ways with byte counts, the proxy's byte budget ([`MAX_BYTES`]), the idle
//! timeout ([`IDLE_TIMEOUT`]) and the stop token.

use std::io;
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

use crate::rules::{Decision, Refusal};
use crate::{Attempt, CONNECT_TIMEOUT, EgressPolicy, IDLE_TIMEOUT, Journal, MAX_BYTES};

/// The copy buffer, per direction.
const BUF: usize = 64 * 1024;

/// One proxy's state, shared by its connections.
pub(crate) struct Ctx {
    pub(crate) policy: Arc<EgressPolicy>,
    pub(crate) journal: Arc<Journal>,
    pub(crate) stop: CancellationToken,
    /// Bytes carried so far, program to destination, by every connection.
    pub(crate) total_up: AtomicU64,
    /// Bytes carried so far, destination to program.
    pub(crate) total_down: AtomicU64,
}

impl Ctx {
    /// Why no new connection may start, when the byte budget is spent.
    pub(crate) fn spent(&self) -> Option<String> {
        let spent =
            self.total_up.load(Ordering::Relaxed) >= MAX_BYTES || self.total_down.load(Ordering::Relaxed) >= MAX_BYTES;
        spent.then(|| format!("this call already moved {} GiB one way through the proxy, its bound", MAX_BYTES >> 30))
    }
}

/// One attempt being made; recorded in the journal when dropped.
pub(crate) struct Ticket {
    journal: Arc<Journal>,
    stop: CancellationToken,
    noted: bool,
    start: Instant,
    pub(crate) via: &'static str,
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) address: Option<SocketAddr>,
    pub(crate) allowed: bool,
    pub(crate) reason: String,
    pub(crate) up: AtomicU64,
    pub(crate) down: AtomicU64,
    /// When a byte last moved either way, in milliseconds since `start`.
    activity: AtomicU64,
    /// warden ended the program's TLS here (a held credential binds the host).
    pub(crate) intercepted: bool,
    /// Each credential's substitutions and misdirected placeholders.
    uses: std::sync::Mutex<Vec<crate::journal::CredentialUse>>,
    /// Real values replaced by placeholders in what came back.
    redacted: AtomicU64,
}

impl Ticket {
    pub(crate) fn new(ctx: &Ctx, via: &'static str) -> Ticket {
        Ticket {
            journal: ctx.journal.clone(),
            stop: ctx.stop.clone(),
            noted: false,
            start: Instant::now(),
            via,
            host: String::new(),
            port: 0,
            address: None,
            allowed: false,
            reason: "the connection ended before a request".into(),
            up: AtomicU64::new(0),
            down: AtomicU64::new(0),
            activity: AtomicU64::new(0),
            intercepted: false,
            uses: Default::default(),
            redacted: AtomicU64::new(0),
        }
    }

    /// Counts a credential's substitutions and misdirected placeholders.
    pub(crate) fn use_credential(&self, name: &str, substituted: u64, misdirected: u64) {
        let Ok(mut uses) = self.uses.lock() else { return };
        match uses.iter_mut().find(|u| u.name == name) {
            Some(u) => {
                u.substituted += substituted;
                u.misdirected += misdirected;
            }
            None => uses.push(crate::journal::CredentialUse { name: name.to_string(), substituted, misdirected }),
        }
    }

    /// Counts real values put back to placeholders in a response.
    pub(crate) fn redacted(&self, n: usize) {
        self.redacted.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Notes that bytes moved (for [`IDLE_TIMEOUT`]).
    pub(crate) fn touch(&self) {
        self.activity.store(self.start.elapsed().as_millis() as u64, Ordering::Relaxed);
    }

    /// Resolves when no byte moved for [`IDLE_TIMEOUT`].
    pub(crate) async fn idle(&self) {
        self.touch();
        loop {
            let last = Duration::from_millis(self.activity.load(Ordering::Relaxed));
            let due = self.start + last + IDLE_TIMEOUT;
            if Instant::now() >= due {
                return;
            }
            tokio::time::sleep_until(due.into()).await;
        }
    }

    /// Marks the attempt refused, and why.
    pub(crate) fn refuse(&mut self, reason: impl Into<String>) {
        self.allowed = false;
        self.reason = reason.into();
    }

    /// Marks the attempt made, to `address`, under `decision`'s grant.
    pub(crate) fn grant(&mut self, decision: &Decision, address: SocketAddr) {
        self.allowed = true;
        self.address = Some(address);
        self.reason = format!("granted by net.connect \"{}\"", decision.grant);
    }

    /// Adds a note on how an allowed connection ended.
    pub(crate) fn note(&mut self, note: &str) {
        self.noted = true;
        self.reason.push_str(" (");
        self.reason.push_str(note);
        self.reason.push(')');
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if self.stop.is_cancelled() && !self.noted {
            if self.allowed {
                self.note("ended: the call ended");
            } else if self.port == 0 {
                self.reason = "the call ended before the request arrived".into();
            }
        }
        self.journal.record(Attempt {
            via: self.via,
            host: std::mem::take(&mut self.host),
            port: self.port,
            address: self.address.map(|a| a.to_string()),
            allowed: self.allowed,
            reason: std::mem::take(&mut self.reason),
            bytes_up: self.up.load(Ordering::Relaxed),
            bytes_down: self.down.load(Ordering::Relaxed),
            duration_ms: self.start.elapsed().as_secs_f64() * 1000.0,
            intercepted: self.intercepted,
            credentials: self.uses.lock().map(|mut u| std::mem::take(&mut *u)).unwrap_or_default(),
            redacted: self.redacted.load(Ordering::Relaxed),
        });
    }
}

/// Why connecting upstream failed.
#[derive(Debug)]
pub(crate) enum ConnectError {
    /// [`CONNECT_TIMEOUT`] passed.
    TimedOut(String),
    /// Every address refused the connection.
    Refused(String),
    /// The network of the last address is unreachable.
    NetworkUnreachable(String),
    /// Another error (unreachable, …).
    Other(String),
}

impl ConnectError {
    pub(crate) fn reason(&self) -> &str {
        match self {
            ConnectError::TimedOut(r)
            | ConnectError::Refused(r)
            | ConnectError::NetworkUnreachable(r)
            | ConnectError::Other(r) => r,
        }
    }
}

/// Connects to the first of `decision`'s addresses that answers, in order,
/// within [`CONNECT_TIMEOUT`] for them all.
pub(crate) async fn connect(host: &str, decision: &Decision) -> Result<(TcpStream, SocketAddr), ConnectError> {
    let deadline = tokio::time::Instant::now() + CONNECT_TIMEOUT;
    let mut last: Option<(SocketAddr, io::Error)> = None;
    for &addr in &decision.addrs {
        match tokio::time::timeout_at(deadline, TcpStream::connect(addr)).await {
            Ok(Ok(s)) => {
                let _ = s.set_nodelay(true);
                return Ok((s, addr));
            }
            Ok(Err(e)) => last = Some((addr, e)),
            Err(_) => {
                return Err(ConnectError::TimedOut(format!(
                    "connecting to {host} ({addr}) took longer than {}s",
                    CONNECT_TIMEOUT.as_secs()
                )));
            }
        }
    }
    Err(match last {
        Some((addr, e)) if e.kind() == io::ErrorKind::ConnectionRefused => {
            ConnectError::Refused(format!("{host} ({addr}) refused the connection"))
        }
        Some((addr, e)) if e.kind() == io::ErrorKind::NetworkUnreachable => {
            ConnectError::NetworkUnreachable(format!("cannot connect to {host} ({addr}): {e}"))
        }
        Some((addr, e)) => ConnectError::Other(format!("cannot connect to {host} ({addr}): {e}")),
        None => ConnectError::Other(format!("{host} has no address to connect to")),
    })
}

/// How a copy ended.
enum End {
    /// The reader reached its end (the writer was shut down after it).
    Eof,
    /// The proxy's byte budget is spent.
    Budget,
}

/// Copies `r` to `w` until `r` ends, counting into `count` and `total` and
/// touching `ticket` after each chunk.
async fn one_way<R, W>(r: &mut R, w: &mut W, count: &AtomicU64, total: &AtomicU64, ticket: &Ticket) -> io::Result<End>
where
    R: AsyncRead + Unpin + ?Sized,
    W: AsyncWrite + Unpin + ?Sized,
{
    let mut buf = vec![0u8; BUF];
    loop {
        let n = r.read(&mut buf).await?;
        if n == 0 {
            let _ = w.shutdown().await;
            return Ok(End::Eof);
        }
        if total.fetch_add(n as u64, Ordering::Relaxed) + n as u64 > MAX_BYTES {
            return Ok(End::Budget);
        }
        w.write_all(&buf[..n]).await?;
        count.fetch_add(n as u64, Ordering::Relaxed);
        ticket.touch();
    }
}

/// Copies `client` to `upstream` (after `early`, bytes the client sent past its
/// request) and `upstream` to `client` until both directions end, either side
/// fails, the connection is idle for [`IDLE_TIMEOUT`], the proxy's byte budget
/// is spent, or the proxy stops. Returns a note when it ended otherwise than
/// by both sides closing.
pub(crate) async fn pipe(
    ctx: &Ctx,
    ticket: &Ticket,
    client: TcpStream,
    upstream: TcpStream,
    early: &[u8],
) -> Option<String> {
    let mut client = client;
    let mut upstream = upstream;
    if !early.is_empty() {
        if ctx.total_up.fetch_add(early.len() as u64, Ordering::Relaxed) + early.len() as u64 > MAX_BYTES {
            return Some(budget_note());
        }
        if let Err(e) = upstream.write_all(early).await {
            return Some(format!("writing upstream failed: {e}"));
        }
        ticket.up.fetch_add(early.len() as u64, Ordering::Relaxed);
    }
    // In the kernel, through a pipe per direction, where the kernel lets us.
    if let (Ok(up), Ok(down)) = (Splice::new(), Splice::new()) {
        let up = up.run(&client, &upstream, &ticket.up, &ctx.total_up, ticket);
        let down = down.run(&upstream, &client, &ticket.down, &ctx.total_down, ticket);
        return relay(ctx, ticket, up, down).await;
    }
    let (mut cr, mut cw) = client.split();
    let (mut ur, mut uw) = upstream.split();
    let up = one_way(&mut cr, &mut uw, &ticket.up, &ctx.total_up, ticket);
    let down = one_way(&mut ur, &mut cw, &ticket.down, &ctx.total_down, ticket);
    relay(ctx, ticket, up, down).await
}

/// A pipe that carries one direction of a tunnel inside the kernel: `splice`
/// from the reading socket into it, and from it into the writing socket, so
/// the bytes are never copied through warden's memory (on this 2-core VM a
/// copying relay reached about half of a direct connection's loopback
/// throughput; see the bench's egress rows).
struct Splice {
    read: std::os::fd::OwnedFd,
    write: std::os::fd::OwnedFd,
}

/// The pipe's capacity, and the most one `splice` moves (at most 64
/// connections x 2 directions x this, in pipe pages, per proxy).
const SPLICE_PIPE: usize = 256 << 10;

impl Splice {
    fn new() -> io::Result<Splice> {
        use rustix::pipe::{PipeFlags, fcntl_setpipe_size, pipe_with};
        let (read, write) = pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK)?;
        // A larger pipe where the limit allows it (the default 64 KiB otherwise).
        let _ = fcntl_setpipe_size(&write, SPLICE_PIPE);
        Ok(Splice { read, write })
    }

    /// Moves `r` to `w` until `r` ends, with [`one_way`]'s accounting.
    async fn run(
        self,
        r: &TcpStream,
        w: &TcpStream,
        count: &AtomicU64,
        total: &AtomicU64,
        ticket: &Ticket,
    ) -> io::Result<End> {
        use rustix::pipe::{SpliceFlags, splice};
        use tokio::io::Interest;
        let flags = SpliceFlags::MOVE | SpliceFlags::NONBLOCK;
        loop {
            r.readable().await?;
            let n = match r.try_io(Interest::READABLE, || {
                splice(r, None, &self.write, None, SPLICE_PIPE, flags).map_err(io::Error::from)
            }) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            };
            if n == 0 {
                let _ = rustix::net::shutdown(w, rustix::net::Shutdown::Write);
                return Ok(End::Eof);
            }
            if total.fetch_add(n as u64, Ordering::Relaxed) + n as u64 > MAX_BYTES {
                return Ok(End::Budget);
            }
            let mut left = n;
            while left > 0 {
                w.writable().await?;
                match w.try_io(Interest::WRITABLE, || {
                    splice(&self.read, None, w, None, left, flags).map_err(io::Error::from)
                }) {
                    Ok(0) => return Err(io::Error::new(io::ErrorKind::WriteZero, "the pipe gave nothing")),
                    Ok(m) => {
                        left -= m;
                        count.fetch_add(m as u64, Ordering::Relaxed);
                        ticket.touch();
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    Err(e) => return Err(e),
                }
            }
        }
    }
}

fn budget_note() -> String {
    format!("ended: the proxy's bound of {} GiB each way is spent", MAX_BYTES >> 30)
}

/// Runs the two directions of [`pipe`] (copied or spliced) until both end,
/// and stops early when the connection is idle for [`IDLE_TIMEOUT`], the
/// proxy's byte budget is spent, or the proxy stops.
async fn relay(
    ctx: &Ctx,
    ticket: &Ticket,
    up: impl Future<Output = io::Result<End>>,
    down: impl Future<Output = io::Result<End>>,
) -> Option<String> {
    let mut up = pin!(up);
    let mut down = pin!(down);
    let mut idle = pin!(ticket.idle());
    let (mut up_done, mut down_done) = (false, false);
    while !(up_done && down_done) {
        tokio::select! {
            () = ctx.stop.cancelled() => return Some("ended: the call ended".into()),
            () = &mut idle => return Some(format!("ended: idle for {}s", IDLE_TIMEOUT.as_secs())),
            r = &mut up, if !up_done => match r {
                Ok(End::Eof) => up_done = true,
                Ok(End::Budget) => return Some(budget_note()),
                Err(e) => return Some(format!("ended: {e}")),
            },
            r = &mut down, if !down_done => match r {
                Ok(End::Eof) => down_done = true,
                Ok(End::Budget) => return Some(budget_note()),
                Err(e) => return Some(format!("ended: {e}")),
            },
        }
    }
    None
}

/// Copies `upstream` to `client` while `send` (which writes the request
/// upstream, touching the ticket as it goes) runs, like [`pipe`]'s down
/// direction with the same bounds; used by plain HTTP forwarding, where the
/// client's side is framed by the request. Ends when upstream closes.
pub(crate) async fn respond<F>(
    ctx: &Ctx,
    ticket: &Ticket,
    send: F,
    ur: &mut (impl AsyncRead + Unpin),
    cw: &mut (impl AsyncWrite + Unpin),
) -> Option<String>
where
    F: Future<Output = Result<(), String>>,
{
    let mut send = pin!(send);
    let mut down = pin!(one_way(ur, cw, &ticket.down, &ctx.total_down, ticket));
    let mut idle = pin!(ticket.idle());
    let mut sent = false;
    loop {
        tokio::select! {
            () = ctx.stop.cancelled() => return Some("ended: the call ended".into()),
            () = &mut idle => return Some(format!("ended: idle for {}s", IDLE_TIMEOUT.as_secs())),
            r = &mut send, if !sent => match r {
                Ok(()) => sent = true,
                Err(e) => return Some(format!("ended: {e}")),
            },
            r = &mut down => return match r {
                Ok(End::Eof) => None,
                Ok(End::Budget) => Some(budget_note()),
                Err(e) => Some(format!("ended: {e}")),
            },
        }
    }
}

/// Writes `answer` and closes `stream` gently: shut down writing, then read
/// and drop what the client still sends (a second or so), so the answer is
/// not lost to a reset.
pub(crate) async fn answer_and_close(mut stream: TcpStream, answer: &[u8]) {
    let _ = tokio::time::timeout(Duration::from_secs(5), stream.write_all(answer)).await;
    let _ = stream.shutdown().await;
    let drain = async {
        let mut buf = [0u8; 4096];
        let mut left = 256 * 1024usize;
        while left > 0 {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => left = left.saturating_sub(n),
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), drain).await;
}

/// Why [`open`] made no connection; the reason is in the ticket.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The proxy is at [`crate::MAX_CONNECTIONS`] or its byte budget is spent.
    Busy,
    /// The policy refused (no grant, or a private address).
    Policy,
    /// The name did not resolve.
    Unresolved,
    /// Connecting failed.
    Connect(ConnectError),
}

/// Why a connection past [`crate::MAX_CONNECTIONS`] is refused.
pub(crate) fn busy_reason() -> String {
    format!("more than {} connections at once through the proxy; retry when some have ended", crate::MAX_CONNECTIONS)
}

/// Decides and connects the ticket's `host:port`, filling in the ticket.
pub(crate) async fn open(ctx: &Ctx, ticket: &mut Ticket, busy: bool) -> Result<TcpStream, Failure> {
    if busy {
        ticket.refuse(busy_reason());
        return Err(Failure::Busy);
    }
    if let Some(r) = ctx.spent() {
        ticket.refuse(r);
        return Err(Failure::Busy);
    }
    let decision = match ctx.policy.decide(&ticket.host, ticket.port).await {
        Ok(d) => d,
        Err(r) => {
            if let Refusal::Private { address, .. } = &r {
                ticket.address = Some(*address);
            }
            let kind = if r.is_policy() { Failure::Policy } else { Failure::Unresolved };
            ticket.refuse(r);
            return Err(kind);
        }
    };
    match connect(&ticket.host, &decision).await {
        Ok((s, addr)) => {
            ticket.grant(&decision, addr);
            Ok(s)
        }
        Err(e) => {
            ticket.address = decision.addrs.last().copied();
            ticket.refuse(e.reason());
            Err(Failure::Connect(e))
        }
    }
}
