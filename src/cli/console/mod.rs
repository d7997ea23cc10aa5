//! `warden console`: a local web page that shows every warden process on one
//! audit log, live, and lets a person steer them (docs/console.md).
//!
//! [`serve`] is a small HTTP/1 server on hyper (the stack `serve --http` uses)
//! with three gates on every request: `Host` must name this console (loopback
//! names and `--allow-host` ones: DNS rebinding), an `Origin` must be its own,
//! and the API needs the token printed on start (the page reads it from the
//! URL's fragment and sends it as a bearer token). The page's three files are
//! embedded ([`assets`]); [`feed`] streams the log, the live events and the
//! inbox as server-sent events; [`api`] answers the page's requests.

mod api;
mod defs;
mod feed;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};

use super::session::Session;
use super::{Failure, absolute, fail};
use crate::error::ErrorCode;

/// The most connections held at once.
pub(super) const MAX_CONNECTIONS: usize = 64;
/// The most live feeds (pages open) at once.
pub(super) const MAX_FEEDS: usize = 8;
/// How long a connection has to send a request's headers.
pub(super) const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// `Content-Security-Policy` of every answer: the page's own files only.
pub(super) const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                       connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

type Body = BoxBody<Bytes, Infallible>;

/// What every request handler shares.
pub(super) struct Console {
    /// The command line: the policy, for definitions and their acceptance.
    session: Arc<Session>,
    /// The audit log, absolute.
    log: PathBuf,
    /// Its live directory (`L.live`).
    live: PathBuf,
    /// The API's bearer token.
    token: String,
    /// The `Host` values admitted.
    hosts: Vec<String>,
    /// How answers given here are recorded: `console 127.0.0.1:PORT`.
    via: String,
    /// Places for live feeds.
    feeds: Arc<tokio::sync::Semaphore>,
    /// One definition check or acceptance at a time (each starts the policy's
    /// servers; an acceptance rewrites warden.lock).
    accepting: Arc<tokio::sync::Mutex<()>>,
}

/// `warden console [--listen ADDR] [--allow-host NAME]…`.
pub(super) fn console(s: Arc<Session>, listen: Option<SocketAddr>, allow_host: Vec<String>) -> Result<u8, Failure> {
    let addr = listen.unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)));
    if !addr.ip().is_loopback() {
        eprintln!(
            "warden: warning: the console listens on {addr}, beyond this machine: whoever reaches it with the \
             token can answer approvals and accept definitions (docs/console.md)"
        );
    }
    for h in &allow_host {
        if h.is_empty() || h.chars().any(|c| c.is_whitespace() || c == '/' || c == '@') {
            return Err(fail(ErrorCode::InvalidArgs, format!("--allow-host {h:?} is not a host name")));
        }
    }
    let mut b = [0u8; 32];
    getrandom::fill(&mut b).map_err(|e| fail(ErrorCode::Internal, format!("no randomness for the token: {e}")))?;
    let token = hex::encode(b);
    let log = absolute(&s.audit_log());
    let live = live_dir(&log);
    private(&live)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .thread_name("warden-console")
        .build()
        .map_err(|e| fail(ErrorCode::Internal, format!("cannot start the async runtime: {e}")))?;
    runtime.block_on(serve(s, addr, allow_host, token, log, live)).map_err(|m| fail(ErrorCode::Internal, m))?;
    Ok(0)
}

/// The live directory of the log at `log` (`L.live`).
pub(super) fn live_dir(log: &std::path::Path) -> PathBuf {
    crate::live::Live::for_log(log).path().to_path_buf()
}

/// Refuses a live directory that is not this uid's alone: what it holds
/// (pending approvals, events, the control sockets of `serve`) is believed.
fn private(live: &std::path::Path) -> Result<(), Failure> {
    use std::os::unix::fs::MetadataExt;
    let Ok(m) = std::fs::symlink_metadata(live) else { return Ok(()) }; // not made yet: serve makes it 0700
    let uid = nix::unistd::geteuid().as_raw();
    if !m.is_dir() || m.uid() != uid || m.mode() & 0o077 != 0 {
        return Err(fail(
            ErrorCode::InvalidArgs,
            format!(
                "{} is not a directory of uid {uid} closed to others (mode 0700): the console believes what it \
                 holds; run the console as the user who runs warden",
                live.display()
            ),
        ));
    }
    Ok(())
}

/// The `Host` values a console on `port` answers to.
fn hosts(port: u16, allow: &[String]) -> Vec<String> {
    let mut hosts: Vec<String> = ["127.0.0.1", "localhost", "[::1]"].iter().map(|h| format!("{h}:{port}")).collect();
    for h in allow {
        hosts.push(h.clone());
        hosts.push(format!("{h}:{port}"));
    }
    hosts
}

async fn serve(
    session: Arc<Session>,
    addr: SocketAddr,
    allow_host: Vec<String>,
    token: String,
    log: PathBuf,
    live: PathBuf,
) -> Result<(), String> {
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    let local = listener.local_addr().map_err(|e| format!("cannot read the listening address: {e}"))?;
    let shown = if local.ip().is_unspecified() { SocketAddr::from(([127, 0, 0, 1], local.port())) } else { local };
    eprintln!("warden: console at http://{shown}/#token={token}");
    eprintln!("warden: watching {} (live directory {})", log.display(), live.display());
    let console = Arc::new(Console {
        session,
        log,
        live,
        token,
        hosts: hosts(local.port(), &allow_host),
        via: format!("console {shown}"),
        feeds: Arc::new(tokio::sync::Semaphore::new(MAX_FEEDS)),
        accepting: Arc::new(tokio::sync::Mutex::new(())),
    });
    let connections = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(HEADER_TIMEOUT);
    let stop = crate::mcp::signalled();
    tokio::pin!(stop);
    loop {
        let permit = tokio::select! {
            p = connections.clone().acquire_owned() => p.map_err(|e| format!("the connection count: {e}"))?,
            _ = &mut stop => return Ok(()),
        };
        let (stream, _) = tokio::select! {
            r = listener.accept() => match r {
                Ok(a) => a,
                Err(e) => {
                    eprintln!("warden: console: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut stop => return Ok(()),
        };
        let (console, builder) = (console.clone(), builder.clone());
        tokio::spawn(async move {
            let _permit = permit;
            let service = hyper::service::service_fn(move |req| {
                let console = console.clone();
                async move { Ok::<_, Infallible>(handle(console, req).await) }
            });
            let _ = builder.serve_connection(TokioIo::new(stream), service).await;
        });
    }
}

/// An answer with the headers every answer carries.
pub(super) fn answer(status: http::StatusCode, content_type: &str, body: Body) -> http::Response<Body> {
    let mut r = http::Response::new(body);
    *r.status_mut() = status;
    let h = r.headers_mut();
    let set = |h: &mut http::HeaderMap, k: &'static str, v: &str| {
        if let Ok(v) = http::HeaderValue::from_str(v) {
            h.insert(k, v);
        }
    };
    set(h, "content-type", content_type);
    set(h, "content-security-policy", CSP);
    set(h, "x-content-type-options", "nosniff");
    set(h, "referrer-policy", "no-referrer");
    set(h, "x-frame-options", "DENY");
    set(h, "cache-control", "no-store");
    r
}

/// A short text answer.
pub(super) fn text(status: http::StatusCode, message: impl Into<String>) -> http::Response<Body> {
    answer(status, "text/plain; charset=utf-8", Full::new(Bytes::from(message.into())).boxed())
}

/// A JSON answer.
pub(super) fn json(status: http::StatusCode, v: &serde_json::Value) -> http::Response<Body> {
    answer(status, "application/json", Full::new(Bytes::from(v.to_string())).boxed())
}

fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The gates, then the page's files or the API.
async fn handle(c: Arc<Console>, req: http::Request<Incoming>) -> http::Response<Body> {
    use http::StatusCode;
    let header = |name: http::header::HeaderName| req.headers().get(name).and_then(|v| v.to_str().ok());
    let host = header(http::header::HOST).unwrap_or("").to_string();
    if !c.hosts.iter().any(|h| h.eq_ignore_ascii_case(&host)) {
        return text(StatusCode::FORBIDDEN, "Forbidden: the Host header does not name this console (see --allow-host)");
    }
    // The page's own origin: http, or https behind a proxy that terminates TLS for an --allow-host name.
    let own = |o: &[u8]| same(o, format!("http://{host}").as_bytes()) || same(o, format!("https://{host}").as_bytes());
    if let Some(origin) = req.headers().get(http::header::ORIGIN)
        && !own(origin.as_bytes())
    {
        return text(StatusCode::FORBIDDEN, "Forbidden: a request from another origin");
    }
    let path = req.uri().path().to_string();
    let asset = |ct: &str, body: &'static str| answer(StatusCode::OK, ct, Full::new(Bytes::from(body)).boxed());
    match (req.method().as_str(), path.as_str()) {
        ("GET", "/" | "/index.html") => asset("text/html; charset=utf-8", include_str!("assets/index.html")),
        ("GET", "/console.js") => asset("text/javascript; charset=utf-8", include_str!("assets/console.js")),
        ("GET", "/favicon.ico") => answer(StatusCode::NO_CONTENT, "text/plain", Full::new(Bytes::new()).boxed()),
        ("GET", "/console.css") => asset("text/css; charset=utf-8", include_str!("assets/console.css")),
        (_, p) if p.starts_with("/api/") => {
            let bearer = header(http::header::AUTHORIZATION).and_then(|v| v.strip_prefix("Bearer "));
            if !bearer.is_some_and(|t| same(t.trim().as_bytes(), c.token.as_bytes())) {
                return text(StatusCode::UNAUTHORIZED, "Unauthorized: open the address `warden console` printed");
            }
            api::route(c, req).await
        }
        _ => text(StatusCode::NOT_FOUND, "Not found"),
    }
}
