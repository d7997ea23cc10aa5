//! Streamable HTTP, the second transport: `warden serve --http ADDR` ([`serve`],
//! [`HttpOptions`]).
//!
//! Stateless (no MCP sessions); only `/mcp` is served, to requests that carry
//! the bearer token, name this server in `Host` and, with an `Origin`, come
//! from loopback or an `--allow-origin` one. Everything a connection can hold before it authenticates
//! is bounded (connection cap with eviction, header and idle timeouts, listen
//! queue, accept back-off): the limits and their settings are in docs/mcp.md,
//! "Streamable HTTP" and "Connection limits and timeouts".

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioIo, TokioTimer};
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use super::legacy_tasks::{Legacy, REVISION, Session};
use super::server::{Shared, WardenServer};
use sha2::Digest;

/// The largest request body accepted (413 past it).
pub const MAX_BODY_BYTES: usize = 4 << 20;

/// The most connections held at once (`WARDEN_HTTP_MAX_CONNECTIONS` changes
/// it), further bounded by the descriptors: at start the soft `RLIMIT_NOFILE`
/// is raised to the hard limit, and the cap is at most
/// `nofile - min(FD_RESERVE, nofile / 2)`.
pub const MAX_CONNECTIONS: usize = 1024;

/// Descriptors kept out of the connection cap for everything else warden
/// opens (at most half the limit): the audit log, components, tools' pipes.
pub const FD_RESERVE: u64 = 256;

/// How long a connection has, from `accept`, to deliver the headers of an
/// authenticated request (`WARDEN_HTTP_HEADER_TIMEOUT_MS` changes it).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// How long an authenticated keep-alive connection may wait between the end of
/// one response and the end of the next request's headers
/// (`WARDEN_HTTP_IDLE_TIMEOUT_MS` changes it).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// Evicted connections whose sockets may still be closing when a new one is
/// accepted: past `cap + CLOSING_SLACK` open sockets, `accept` waits for them.
pub const CLOSING_SLACK: usize = 32;

/// The kernel's queue of connections not yet accepted (clamped by
/// `net.core.somaxconn`): a burst of connects waits there instead of having
/// its SYNs dropped (and retried a second later) while warden catches up.
pub const LISTEN_BACKLOG: u32 = 4096;

/// The first pause after a failed `accept`; it doubles on each further failure.
pub const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(10);

/// The longest pause after failed `accept`s.
pub const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// At most one warning of each kind (accept failures, evictions, refusals) per
/// this interval; the rest are counted and the count is reported with the next.
pub const WARN_INTERVAL: Duration = Duration::from_secs(5);

/// How the HTTP transport is set up.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// Where to listen.
    pub addr: SocketAddr,
    /// The bearer token every request must carry.
    pub token: String,
    /// Origins admitted besides loopback ones (exact `scheme://host:port`).
    pub allowed_origins: Vec<String>,
    /// Names admitted in `Host` besides loopback names and the listening
    /// address (`--allow-host`: service names), lowercase.
    pub allowed_hosts: Vec<String>,
}

type Body = BoxBody<Bytes, Infallible>;

fn plain(status: http::StatusCode, text: &'static str) -> http::Response<Body> {
    let mut r = http::Response::new(Full::new(Bytes::from(text)).boxed());
    *r.status_mut() = status;
    r
}

fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Whether `origin` is `http(s)://localhost|127.0.0.1|[::1]` on any port.
fn loopback_origin(origin: &str) -> bool {
    let Some(rest) = origin.strip_prefix("http://").or_else(|| origin.strip_prefix("https://")) else {
        return false;
    };
    let host = if let Some(v6) = rest.strip_prefix('[') {
        v6.split_once(']').map(|(h, _)| h)
    } else {
        Some(rest.split(':').next().unwrap_or(rest))
    };
    let port_ok = |after: &str| after.is_empty() || after.strip_prefix(':').is_some_and(|p| p.parse::<u16>().is_ok());
    match host {
        Some("localhost") => port_ok(&rest["localhost".len()..]),
        Some("127.0.0.1") => port_ok(&rest["127.0.0.1".len()..]),
        Some("::1") => port_ok(&rest["[::1]".len()..]),
        _ => false,
    }
}

/// The limits in force, from the defaults, the environment and the
/// descriptor limit.
#[derive(Debug, Clone, Copy)]
struct Limits {
    max_connections: usize,
    header_timeout: Duration,
    idle_timeout: Duration,
}

fn env_number(name: &str) -> Result<Option<u64>, String> {
    match std::env::var(name) {
        Err(_) => Ok(None),
        Ok(v) => match v.trim().parse::<u64>() {
            Ok(n) if n > 0 => Ok(Some(n)),
            _ => Err(format!("{name} must be a positive whole number, not {v:?}")),
        },
    }
}

impl Limits {
    /// `nofile` is the soft descriptor limit in force.
    fn new(nofile: u64) -> Result<Limits, String> {
        let wanted = env_number("WARDEN_HTTP_MAX_CONNECTIONS")?.map_or(MAX_CONNECTIONS as u64, |n| n);
        let by_fds = nofile.saturating_sub(FD_RESERVE.min(nofile / 2)).max(1);
        let ms = |name, default: Duration| -> Result<Duration, String> {
            Ok(env_number(name)?.map_or(default, Duration::from_millis))
        };
        Ok(Limits {
            max_connections: usize::try_from(wanted.min(by_fds)).unwrap_or(MAX_CONNECTIONS),
            header_timeout: ms("WARDEN_HTTP_HEADER_TIMEOUT_MS", HEADER_READ_TIMEOUT)?,
            idle_timeout: ms("WARDEN_HTTP_IDLE_TIMEOUT_MS", IDLE_TIMEOUT)?,
        })
    }
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit; returns the soft limit in
/// force afterwards.
fn raise_nofile() -> u64 {
    use nix::sys::resource::{RLIM_INFINITY, Resource, getrlimit, setrlimit};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return 1024;
    };
    if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        return if hard == RLIM_INFINITY { u64::MAX } else { hard };
    }
    if soft == RLIM_INFINITY { u64::MAX } else { soft }
}

/// At most one report per [`WARN_INTERVAL`]: `hit` answers the number of
/// reports suppressed since the last one when this one may be made.
#[derive(Default)]
struct Throttle {
    last: Option<Instant>,
    suppressed: u64,
}

impl Throttle {
    fn hit(&mut self) -> Option<u64> {
        let now = Instant::now();
        if self.last.is_some_and(|t| now.duration_since(t) < WARN_INTERVAL) {
            self.suppressed += 1;
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.suppressed))
    }
}

fn suppressed(n: u64) -> String {
    if n == 0 { String::new() } else { format!(" ({n} more since the last report)") }
}

/// One open connection.
struct Slot {
    /// It has sent at least one authenticated request.
    authed: bool,
    /// Authenticated requests in progress.
    busy: u32,
    /// When it was accepted or last finished a request.
    since: Instant,
    /// Cancelled to close it.
    close: CancellationToken,
}

/// The open connections, by accept order.
#[derive(Default)]
struct Registry {
    slots: Mutex<BTreeMap<u64, Slot>>,
}

enum Admission {
    /// Admitted; `evicted` when another connection was closed to make room.
    Admitted { close: CancellationToken, evicted: bool },
    /// Every slot is busy with authenticated work.
    Refused,
}

impl Registry {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Slot>> {
        self.slots.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Takes a slot for connection `id`, evicting the oldest connection with
    /// nothing authenticated in flight when all `cap` slots are taken.
    fn admit(&self, id: u64, cap: usize) -> Admission {
        let mut slots = self.lock();
        let mut evicted = false;
        if slots.len() >= cap {
            let unauthenticated = slots.iter().find(|(_, s)| !s.authed && s.busy == 0).map(|(id, _)| *id);
            let victim = unauthenticated
                .or_else(|| slots.iter().filter(|(_, s)| s.busy == 0).min_by_key(|(_, s)| s.since).map(|(id, _)| *id));
            let Some(victim) = victim else {
                return Admission::Refused;
            };
            if let Some(s) = slots.remove(&victim) {
                s.close.cancel();
            }
            evicted = true;
        }
        let close = CancellationToken::new();
        slots.insert(id, Slot { authed: false, busy: 0, since: Instant::now(), close: close.clone() });
        Admission::Admitted { close, evicted }
    }

    fn authed(&self, id: u64) -> bool {
        self.lock().get(&id).is_some_and(|s| s.authed)
    }

    fn begin(&self, id: u64) {
        if let Some(s) = self.lock().get_mut(&id) {
            s.authed = true;
            s.busy += 1;
        }
    }

    fn end(&self, id: u64) {
        if let Some(s) = self.lock().get_mut(&id) {
            s.busy = s.busy.saturating_sub(1);
            s.since = Instant::now();
        }
    }

    fn remove(&self, id: u64) {
        self.lock().remove(&id);
    }
}

/// Frees a connection's slot when its task ends, however it ends.
struct Held(Arc<Registry>, u64);

impl Drop for Held {
    fn drop(&mut self) {
        self.0.remove(self.1);
    }
}

/// Marks an authenticated request in progress on a connection.
struct Busy(Arc<Registry>, u64);

impl Busy {
    fn new(registry: &Arc<Registry>, id: u64) -> Busy {
        registry.begin(id);
        Busy(registry.clone(), id)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.end(self.1);
    }
}

/// A listening socket with a [`LISTEN_BACKLOG`]-long queue.
fn listen(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = if addr.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// Serves MCP on `options.addr` until SIGINT or SIGTERM.
pub async fn serve(shared: Arc<Shared>, options: HttpOptions) -> Result<(), String> {
    let limits = Limits::new(raise_nofile())?;
    let (listener, local) = bind(options.addr)?;
    let legacy = shared.legacy_tasks();
    let mcp = mcp_service(shared, local, &options.token, &options.allowed_hosts);
    eprintln!("warden: serving MCP at http://{local}/mcp");
    tracing::debug!("HTTP limits: {limits:?}");
    let registry = Arc::new(Registry::default());
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(limits.idle_timeout);
    let kit = ConnectionKit {
        mcp,
        token: Arc::from(options.token),
        origins: Arc::from(options.allowed_origins),
        registry: registry.clone(),
        legacy,
        builder,
        header_timeout: limits.header_timeout,
    };
    // SIGTERM, SIGINT or SIGHUP ends `serve` (its cleanup runs after this returns).
    let signalled = super::signalled();
    tokio::pin!(signalled);
    let (mut accept_errors, mut evictions, mut refusals) =
        (Throttle::default(), Throttle::default(), Throttle::default());
    let mut backoff: Option<Duration> = None;
    let mut next_id = 0u64;
    // Every socket, counted until it is closed: an evicted one is closed by its
    // own task, so the accept loop could otherwise outrun the closing.
    let sockets = Arc::new(tokio::sync::Semaphore::new(limits.max_connections + CLOSING_SLACK));
    loop {
        let permit = tokio::select! {
            p = sockets.clone().acquire_owned() => p.map_err(|e| format!("the connection count: {e}"))?,
            _ = &mut signalled => return Ok(()),
        };
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = &mut signalled => return Ok(()),
        };
        let stream = match accepted {
            Ok((stream, _)) => {
                backoff = None;
                stream
            }
            Err(e) => {
                let pause = accept_failed(&e, &mut backoff, &mut accept_errors);
                tokio::select! {
                    _ = tokio::time::sleep(pause) => {}
                    _ = &mut signalled => return Ok(()),
                }
                continue;
            }
        };
        next_id += 1;
        let id = next_id;
        let Some(close) = admit(&registry, id, limits.max_connections, &mut evictions, &mut refusals) else {
            drop((stream, permit));
            continue;
        };
        let held = Held(registry.clone(), id);
        tokio::spawn(serve_connection(kit.clone(), Accepted { stream, permit, held, close, id }));
    }
}

/// Listens on `addr`; the bound address, with a warning when it is not loopback.
fn bind(addr: SocketAddr) -> Result<(tokio::net::TcpListener, SocketAddr), String> {
    let listener = listen(addr).map_err(|e| format!("cannot listen on {addr}: {e} (pick another --http address)"))?;
    let local = listener.local_addr().map_err(|e| format!("cannot read the bound address: {e}"))?;
    if !local.ip().is_loopback() {
        tracing::warn!(
            "listening on {local}, which is not loopback: anyone who can reach it and holds the token can call tools"
        );
    }
    Ok((listener, local))
}

/// rmcp's stateless, JSON-answering service over `shared`, for the hosts that
/// name `local`; its jobs belong to `token`.
fn mcp_service(
    shared: Arc<Shared>,
    local: SocketAddr,
    token: &str,
    allowed: &[String],
) -> StreamableHttpService<WardenServer, NeverSessionManager> {
    let mut hosts = vec!["localhost".to_string(), "127.0.0.1".to_string(), "::1".to_string()];
    if !local.ip().is_unspecified() {
        hosts.push(local.ip().to_string());
    }
    hosts.extend(allowed.iter().cloned());
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None)
        .with_allowed_hosts(hosts)
        .with_max_request_body_bytes(MAX_BODY_BYTES);
    // Jobs belong to the bearer token (there is one per server).
    let owner: Arc<str> = Arc::from(format!("token:{}", &hex::encode(sha2::Sha256::digest(token.as_bytes()))[..32]));
    StreamableHttpService::new(
        move || Ok(WardenServer::new(shared.clone(), false, owner.clone())),
        Arc::new(NeverSessionManager::default()),
        config,
    )
}

/// The pause after a failed `accept` (doubling on each failure in a row),
/// reported at most once per [`WARN_INTERVAL`].
fn accept_failed(e: &std::io::Error, backoff: &mut Option<Duration>, errors: &mut Throttle) -> Duration {
    // Out of descriptors or memory: the pending connection stays in
    // the backlog, so retrying at once would spin. Pause instead.
    let pause = backoff.map_or(ACCEPT_BACKOFF_MIN, |b| (b * 2).min(ACCEPT_BACKOFF_MAX));
    *backoff = Some(pause);
    if let Some(n) = errors.hit() {
        tracing::warn!("accept failed: {e}; retrying in up to {ACCEPT_BACKOFF_MAX:?}{}", suppressed(n));
    }
    pause
}

/// Admits connection `id` under the cap: its close switch, or `None` when it
/// is refused. Evictions and refusals are reported, throttled.
fn admit(
    registry: &Registry,
    id: u64,
    cap: usize,
    evictions: &mut Throttle,
    refusals: &mut Throttle,
) -> Option<CancellationToken> {
    match registry.admit(id, cap) {
        Admission::Admitted { close, evicted } => {
            if evicted && let Some(n) = evictions.hit() {
                tracing::warn!(
                    "{} connections open (the cap): closed the oldest one without an authenticated request in progress{}",
                    cap,
                    suppressed(n)
                );
            }
            Some(close)
        }
        Admission::Refused => {
            if let Some(n) = refusals.hit() {
                tracing::warn!(
                    "all {} connections are busy with authenticated calls: refused a new one{}",
                    cap,
                    suppressed(n)
                );
            }
            None
        }
    }
}

/// What every connection's task shares.
#[derive(Clone)]
struct ConnectionKit {
    mcp: StreamableHttpService<WardenServer, NeverSessionManager>,
    token: Arc<str>,
    origins: Arc<[String]>,
    registry: Arc<Registry>,
    legacy: Option<Arc<Legacy>>,
    builder: hyper::server::conn::http1::Builder,
    header_timeout: Duration,
}

/// One admitted connection: its socket, its place among the sockets and in
/// the registry, and its close switch.
struct Accepted {
    stream: tokio::net::TcpStream,
    permit: tokio::sync::OwnedSemaphorePermit,
    held: Held,
    close: CancellationToken,
    id: u64,
}

/// Serves one connection until it ends, is evicted, or sends no authenticated
/// request within the header timeout.
async fn serve_connection(kit: ConnectionKit, accepted: Accepted) {
    let ConnectionKit { mcp, token, origins, registry, legacy, builder, header_timeout } = kit;
    let Accepted { stream, permit, held, close, id } = accepted;
    let _counted = permit;
    let _held = held;
    let conn_registry = registry.clone();
    let service = hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
        let (mcp, token, origins, registry) = (mcp.clone(), token.clone(), origins.clone(), registry.clone());
        let legacy = legacy.clone();
        async move {
            let gates = Gates { mcp: &mcp, token: &token, origins: &origins, registry: &registry, legacy };
            Ok::<_, Infallible>(gate(req, gates, id).await)
        }
    });
    let conn = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    let deadline = tokio::time::sleep(header_timeout);
    tokio::pin!(deadline);
    let mut before_auth = true;
    loop {
        tokio::select! {
            r = conn.as_mut() => {
                if let Err(e) = r {
                    tracing::debug!("connection ended: {e}");
                }
                return;
            }
            // Evicted: dropping the connection closes the socket.
            () = close.cancelled() => return,
            () = &mut deadline, if before_auth => {
                if !conn_registry.authed(id) {
                    tracing::debug!("connection closed: no authenticated request within {header_timeout:?}");
                    return;
                }
                before_auth = false;
            }
        }
    }
}

/// What [`gate`] checks a request against and hands it to.
struct Gates<'a> {
    mcp: &'a StreamableHttpService<WardenServer, NeverSessionManager>,
    token: &'a str,
    origins: &'a [String],
    registry: &'a Arc<Registry>,
    /// 2025-11-25 tasks' rewriting, when background tools are offered.
    legacy: Option<Arc<Legacy>>,
}

/// Path, token and origin checks, then rmcp.
async fn gate(req: http::Request<hyper::body::Incoming>, gates: Gates<'_>, conn: u64) -> http::Response<Body> {
    let Gates { mcp, token, origins, registry, legacy } = gates;
    if req.uri().path() != "/mcp" {
        return plain(http::StatusCode::NOT_FOUND, "warden serves MCP at /mcp only\n");
    }
    let authorized = req
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|t| same(t.trim().as_bytes(), token.as_bytes()));
    if !authorized {
        let mut r = plain(
            http::StatusCode::UNAUTHORIZED,
            "a bearer token is required: send Authorization: Bearer TOKEN (printed by warden serve, or WARDEN_HTTP_TOKEN)\n",
        );
        r.headers_mut().insert(http::header::WWW_AUTHENTICATE, http::HeaderValue::from_static("Bearer"));
        return r;
    }
    // From here on the connection is authenticated and this request is in
    // progress: it is neither timed out before authentication nor evicted.
    let _busy = Busy::new(registry, conn);
    if let Some(origin) = req.headers().get(http::header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("");
        if !loopback_origin(origin) && !origins.iter().any(|o| o == origin) {
            return plain(
                http::StatusCode::FORBIDDEN,
                "this Origin is not allowed: pass --allow-origin ORIGIN to warden serve to admit it\n",
            );
        }
    }
    // A 2025-11-25 request (its header, or an `initialize` without one) may be a tasks frame.
    let version = req.headers().get("mcp-protocol-version").map(|v| v.as_bytes().to_vec());
    match legacy {
        Some(l)
            if req.method() == http::Method::POST && version.as_deref().is_none_or(|v| v == REVISION.as_bytes()) =>
        {
            legacy_round_trip(req, mcp, Session::new(l, version.is_some())).await
        }
        _ => mcp.handle(req).await,
    }
}

/// Each `data:` line of an event stream through [`Session::outbound`]; `None` when none changed.
fn rewrite_events(session: &mut Session, body: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(body.len());
    let mut changed = false;
    for (i, line) in body.split(|&b| b == b'\n').enumerate() {
        if i > 0 {
            out.push(b'\n');
        }
        let payload = line.strip_prefix(b"data:").map(|p| p.strip_prefix(b" ").unwrap_or(p));
        let payload = payload.map(|p| p.strip_suffix(b"\r").unwrap_or(p));
        match payload.filter(|p| session.waiting(p)).and_then(|p| session.outbound(p)) {
            Some(new) => {
                out.extend_from_slice(b"data: ");
                out.extend_from_slice(&new);
                changed = true;
            }
            None => out.extend_from_slice(line),
        }
    }
    changed.then_some(out)
}

/// One request through [`super::legacy_tasks`]: its body rewritten on the way
/// in (bounded like rmcp bounds it), its JSON answer on the way out.
async fn legacy_round_trip(
    req: http::Request<hyper::body::Incoming>,
    mcp: &StreamableHttpService<WardenServer, NeverSessionManager>,
    mut session: Session,
) -> http::Response<Body> {
    let (mut parts, body) = req.into_parts();
    let bytes = match http_body_util::Limited::new(body, MAX_BODY_BYTES).collect().await {
        Ok(c) => c.to_bytes(),
        Err(_) => {
            return plain(http::StatusCode::PAYLOAD_TOO_LARGE, "the request body is too large or was cut short\n");
        }
    };
    let bytes = session.inbound(&bytes).map(Bytes::from).unwrap_or(bytes);
    parts.headers.insert(http::header::CONTENT_LENGTH, http::HeaderValue::from(bytes.len()));
    let response = mcp.handle(http::Request::from_parts(parts, Full::new(bytes))).await;
    // Nothing to rewrite (no initialize, tools/list or task call): the answer
    // goes out as rmcp streams it, progress events as they come.
    if !session.expecting() {
        return response;
    }
    let kind = response.headers().get(http::header::CONTENT_TYPE).map(|v| v.as_bytes().to_vec());
    // A call that sent progress first is answered as an event stream.
    let sse = match kind.as_deref() {
        Some(k) if k.starts_with(b"application/json") => false,
        Some(k) if k.starts_with(b"text/event-stream") => true,
        _ => return response,
    };
    let (mut parts, body) = response.into_parts();
    let Ok(collected) = body.collect().await;
    let bytes = collected.to_bytes();
    let rewritten = if sse { rewrite_events(&mut session, &bytes) } else { session.outbound(&bytes) };
    let bytes = rewritten.map(Bytes::from).unwrap_or(bytes);
    parts.headers.insert(http::header::CONTENT_LENGTH, http::HeaderValue::from(bytes.len()));
    http::Response::from_parts(parts, Full::new(bytes).boxed())
}

#[cfg(test)]
mod tests {
    use super::{Admission, Registry, Throttle, loopback_origin};

    fn admitted(a: Admission) -> tokio_util::sync::CancellationToken {
        match a {
            Admission::Admitted { close, .. } => close,
            Admission::Refused => panic!("refused"),
        }
    }

    #[test]
    fn at_the_cap_the_oldest_unauthenticated_then_the_longest_idle_connection_gives_way() {
        let r = Registry::default();
        let c1 = admitted(r.admit(1, 3));
        let c2 = admitted(r.admit(2, 3));
        let c3 = admitted(r.admit(3, 3));
        // 1 is busy with an authenticated call, 2 authenticated and idle, 3 never authenticated.
        r.begin(1);
        r.begin(2);
        r.end(2);
        let c4 = admitted(r.admit(4, 3));
        assert!(c3.is_cancelled() && !c1.is_cancelled() && !c2.is_cancelled());
        // 4 is unauthenticated: it goes before the idle authenticated 2.
        let _c5 = admitted(r.admit(5, 3));
        assert!(c4.is_cancelled() && !c2.is_cancelled());
        r.begin(5);
        let _c6 = admitted(r.admit(6, 3));
        assert!(c2.is_cancelled() && !c1.is_cancelled());
        // Now 1 and 5 are busy, 6 is not: 6 gives way; once all three are busy, refuse.
        let _c7 = admitted(r.admit(7, 3));
        r.begin(7);
        assert!(matches!(r.admit(8, 3), Admission::Refused));
        r.end(1);
        let _c8 = admitted(r.admit(8, 3));
        assert!(c1.is_cancelled());
    }

    #[test]
    fn the_throttle_reports_once_per_interval_with_the_count() {
        let mut t = Throttle::default();
        assert_eq!(t.hit(), Some(0));
        assert_eq!(t.hit(), None);
        assert_eq!(t.hit(), None);
        t.last = t.last.and_then(|l| l.checked_sub(super::WARN_INTERVAL));
        assert_eq!(t.hit(), Some(2));
    }

    #[test]
    fn only_loopback_origins_pass_by_default() {
        for ok in ["http://localhost", "http://localhost:6274", "https://127.0.0.1:1", "http://[::1]:8080"] {
            assert!(loopback_origin(ok), "{ok}");
        }
        for bad in [
            "http://localhost.evil.com",
            "http://127.0.0.1.evil.com:80",
            "http://evil.com",
            "null",
            "http://localhost:abc",
            "file://localhost",
            "http://[::1]x",
        ] {
            assert!(!loopback_origin(bad), "{bad}");
        }
    }
}
