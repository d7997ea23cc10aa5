//! The network of a component call ([`Net`]): its sockets ([`Net::socket_check`]),
//! its name lookups ([`Lookup`]) and its outgoing `wasi:http` requests (the
//! `send_request` hook), all judged by the same rules as the egress proxy of
//! process tools ([`crate::egress::rules`]). Refusals are kept ([`Net::note`])
//! for the call's error, and every attempt goes into its [`Journal`]. What each
//! admits is in docs/security.md, "Component tools".

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame};
use wasmtime::component::{HasData, Resource};
use wasmtime_wasi::p2::SocketError;
use wasmtime_wasi::p2::bindings::sockets::ip_name_lookup::{self, HostResolveAddressStream, ResolveAddressStream};
use wasmtime_wasi::p2::bindings::sockets::network::{self, ErrorCode as SocketErrorCode, IpAddress, Network};
use wasmtime_wasi::sockets::{SocketAddrUse, WasiSocketsCtxView};
use wasmtime_wasi_http::{Error as HttpError, RequestOptions, WasiBody, WasiHttpHooks};

use crate::egress::rules::{self, EgressPolicy, Refusal};
use crate::egress::{Attempt, Journal};

/// The least a component may receive in one `wasi:http` response body,
/// whatever the tool's `max_output` (see [`max_http_body`]).
pub(super) const MIN_HTTP_BODY: u64 = 1 << 20;

/// The bytes one `wasi:http` response body may carry for a tool whose
/// `limits.max_output` is `max_output`: the larger of the two. Past it the
/// body ends with `HTTP-response-body-size`.
pub(super) fn max_http_body(max_output: u64) -> u64 {
    max_output.max(MIN_HTTP_BODY)
}

/// What the calls' lookups, sockets and requests share: the policy, the
/// addresses warden's resolver answered for granted names, the latest
/// refusal and the journal.
pub(super) struct Shared {
    policy: EgressPolicy,
    journal: Arc<Journal>,
    /// Addresses a lookup of this call answered, with the name asked.
    answered: Mutex<Vec<(IpAddr, String)>>,
    note: Mutex<Option<String>>,
    /// When the call's time is up.
    deadline: Instant,
    max_body: u64,
}

/// The most lookup answers remembered per call.
const MAX_ANSWERED: usize = 1024;

impl Shared {
    fn refuse(&self, what: String) {
        *self.note.lock().unwrap_or_else(PoisonError::into_inner) = Some(what);
    }

    fn record(
        &self,
        via: &'static str,
        host: &str,
        port: u16,
        address: Option<SocketAddr>,
        verdict: &Result<String, String>,
    ) {
        self.journal.record(Attempt {
            via,
            host: host.to_string(),
            port,
            address: address.map(|a| a.to_string()),
            allowed: verdict.is_ok(),
            reason: match verdict {
                Ok(r) | Err(r) => r.clone(),
            },
            bytes_up: 0,
            bytes_down: 0,
            duration_ms: 0.0,
            intercepted: false,
            credentials: Vec::new(),
            redacted: 0,
        });
    }

    fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// Whether a TCP connect to `addr` is admitted (the grant that admits
    /// it), or why not.
    async fn admit_connect(&self, addr: SocketAddr) -> Result<String, String> {
        let p = &self.policy;
        let port = addr.port();
        let literal = addr.ip().to_string();
        // A grant naming the address itself.
        if let Ok(g) = p.grant_for(&literal, port) {
            return p.admit_socket_addr(&literal, addr).map(|()| format!("granted by net.connect {g}"));
        }
        let mut refusal = None;
        // An address a lookup of this call answered for a granted name.
        let names: Vec<String> = {
            let answered = self.answered.lock().unwrap_or_else(PoisonError::into_inner);
            answered.iter().filter(|(ip, _)| *ip == addr.ip()).map(|(_, n)| n.clone()).collect()
        };
        for name in &names {
            if let Ok(g) = p.grant_for(name, port) {
                match p.admit_socket_addr(name, addr) {
                    Ok(()) => return Ok(format!("{name} granted by net.connect {g}")),
                    Err(e) => refusal = Some(e),
                }
            }
        }
        // An address of an exact name granted on this port, resolved here.
        for g in p.grants.iter().filter(|g| g.port == port && !g.host.starts_with('*')) {
            if rules::ip_literal(&g.host).is_some() {
                continue;
            }
            let Ok(found) = rules::resolve(&g.host, port).await else { continue };
            if found.iter().any(|a| a.ip().to_canonical() == addr.ip().to_canonical()) {
                match p.admit_socket_addr(&g.host, addr) {
                    Ok(()) => return Ok(format!("{} granted by net.connect {g}", g.host)),
                    Err(e) => refusal = Some(e),
                }
            }
        }
        Err(refusal.unwrap_or_else(|| match p.grant_for(&literal, port) {
            Err(e) => e,
            Ok(_) => format!("{addr} is not granted"),
        }))
    }

    /// Whether a lookup of `name` is admitted: some grant covers it on some port.
    fn admit_lookup(&self, name: &str) -> Result<(), String> {
        let p = &self.policy;
        if p.grants.iter().any(|g| p.grant_for(name, g.port).is_ok()) {
            return Ok(());
        }
        let tool = &p.tool;
        Err(format!(
            "{tool} has no grant for {name} on any port; add \"{name}:PORT\" to net.connect of {tool} in the policy"
        ))
    }
}

/// The network state of one component call (in its store).
pub(super) struct Net {
    shared: Arc<Shared>,
    /// The name each pending lookup asked for, by resource.
    lookups: HashMap<u32, String>,
}

impl Net {
    /// The network of a call of `tool` under `policy`, whose time ends at `deadline`.
    pub(super) fn new(policy: EgressPolicy, journal: Arc<Journal>, deadline: Instant, max_output: u64) -> Net {
        Net {
            shared: Arc::new(Shared {
                policy,
                journal,
                answered: Mutex::default(),
                note: Mutex::default(),
                deadline,
                max_body: max_http_body(max_output),
            }),
            lookups: HashMap::new(),
        }
    }

    /// The latest refusal, for the error of a call that failed.
    pub(super) fn note(&self) -> Option<String> {
        self.shared.note.lock().unwrap_or_else(PoisonError::into_inner).clone().map(|n| format!("warden refused: {n}"))
    }

    /// The check wasmtime-wasi runs before each socket operation: a TCP connect
    /// to an address a grant names literally, or to one warden's resolver gave
    /// for a granted name that the private-address rule admits; the implicit
    /// bind before a connect (the wildcard address, port 0); nothing else (no
    /// listening, no UDP).
    pub(super) fn socket_check(
        &self,
    ) -> impl Fn(SocketAddr, SocketAddrUse) -> Pin<Box<dyn Future<Output = bool> + Send + Sync>> + Send + Sync + 'static
    {
        let shared = self.shared.clone();
        move |addr, usage| match usage {
            SocketAddrUse::TcpConnect => {
                let shared = shared.clone();
                let verdict = wasmtime_wasi::runtime::spawn(async move {
                    let verdict = shared.admit_connect(addr).await;
                    if let Err(e) = &verdict {
                        shared.refuse(format!("connect to {addr}: {e}"));
                    }
                    shared.record("wasi-socket", &addr.ip().to_string(), addr.port(), Some(addr), &verdict);
                    verdict.is_ok()
                });
                Box::pin(verdict)
            }
            SocketAddrUse::TcpBind => {
                let ok = addr.ip().is_unspecified() && addr.port() == 0;
                Box::pin(async move { ok })
            }
            _ => Box::pin(async { false }),
        }
    }
}

/// `wasi:sockets/ip-name-lookup` as a component sees it: wasmtime-wasi's,
/// for granted names only, private answers dropped.
pub(super) struct Lookup<'a> {
    pub(super) sockets: WasiSocketsCtxView<'a>,
    pub(super) net: &'a mut Net,
}

/// [`HasData`] for [`Lookup`].
pub(super) struct NetLookup;

impl HasData for NetLookup {
    type Data<'a> = Lookup<'a>;
}

fn ip_of(a: IpAddress) -> IpAddr {
    match a {
        IpAddress::Ipv4((a, b, c, d)) => IpAddr::from([a, b, c, d]),
        IpAddress::Ipv6((a, b, c, d, e, f, g, h)) => IpAddr::from([a, b, c, d, e, f, g, h]),
    }
}

impl network::Host for Lookup<'_> {
    fn convert_error_code(&mut self, error: SocketError) -> wasmtime::Result<SocketErrorCode> {
        network::Host::convert_error_code(&mut self.sockets, error)
    }

    fn network_error_code(
        &mut self,
        err: Resource<wasmtime_wasi::p2::bindings::io::error::Error>,
    ) -> wasmtime::Result<Option<SocketErrorCode>> {
        network::Host::network_error_code(&mut self.sockets, err)
    }
}

impl network::HostNetwork for Lookup<'_> {
    fn drop(&mut self, this: Resource<Network>) -> wasmtime::Result<()> {
        network::HostNetwork::drop(&mut self.sockets, this)
    }
}

impl ip_name_lookup::Host for Lookup<'_> {
    fn resolve_addresses(
        &mut self,
        network: Resource<Network>,
        name: String,
    ) -> Result<Resource<ResolveAddressStream>, SocketError> {
        if let Err(why) = self.net.shared.admit_lookup(&name) {
            self.net.shared.refuse(format!("lookup of {name}: {why}"));
            self.net.shared.record("wasi-lookup", &name, 0, None, &Err(why));
            return Err(SocketErrorCode::PermanentResolverFailure.into());
        }
        let stream = ip_name_lookup::Host::resolve_addresses(&mut self.sockets, network, name.clone())?;
        if self.net.lookups.len() < MAX_ANSWERED {
            self.net.lookups.insert(stream.rep(), name);
        }
        Ok(stream)
    }
}

impl HostResolveAddressStream for Lookup<'_> {
    fn resolve_next_address(
        &mut self,
        stream: Resource<ResolveAddressStream>,
    ) -> Result<Option<IpAddress>, SocketError> {
        let rep = stream.rep();
        let Some(name) = self.net.lookups.get(&rep).cloned() else {
            return Err(SocketErrorCode::PermanentResolverFailure.into());
        };
        loop {
            let next = HostResolveAddressStream::resolve_next_address(&mut self.sockets, Resource::new_borrow(rep))?;
            let Some(ip) = next else { return Ok(None) };
            let addr = ip_of(ip);
            let shared = &self.net.shared;
            match shared.policy.admit_address(&name, addr) {
                Ok(()) => {
                    let mut answered = shared.answered.lock().unwrap_or_else(PoisonError::into_inner);
                    if answered.len() < MAX_ANSWERED && !answered.iter().any(|(a, n)| *a == addr && *n == name) {
                        answered.push((addr, name.clone()));
                    }
                    return Ok(Some(addr.into()));
                }
                Err(why) => {
                    shared.refuse(format!("lookup of {name}: {why}"));
                    shared.record("wasi-lookup", &name, 0, Some(SocketAddr::new(addr, 0)), &Err(why));
                }
            }
        }
    }

    fn subscribe(
        &mut self,
        stream: Resource<ResolveAddressStream>,
    ) -> wasmtime::Result<Resource<wasmtime_wasi::p2::DynPollable>> {
        HostResolveAddressStream::subscribe(&mut self.sockets, stream)
    }

    fn drop(&mut self, stream: Resource<ResolveAddressStream>) -> wasmtime::Result<()> {
        self.net.lookups.remove(&stream.rep());
        HostResolveAddressStream::drop(&mut self.sockets, stream)
    }
}

type IoFuture = Box<dyn Future<Output = Result<(), HttpError>> + Send>;

impl WasiHttpHooks for Net {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        _options: Option<RequestOptions>,
        _fut: IoFuture,
    ) -> Box<dyn Future<Output = Result<(http::Response<WasiBody>, IoFuture), HttpError>> + Send> {
        let shared = self.shared.clone();
        Box::new(async move { send(shared, request).await })
    }
}

/// [`webpki_client`], as a component's HTTP error.
fn tls_config() -> Result<Arc<rustls::ClientConfig>, HttpError> {
    webpki_client().map_err(|e| HttpError::InternalError(Some(e)))
}

/// The one TLS client configuration warden's own clients use (a component's
/// outgoing HTTP, the OCI registry client): WebPKI roots, ring, TLS 1.2 and 1.3.
pub(crate) fn webpki_client() -> Result<Arc<rustls::ClientConfig>, String> {
    static CONFIG: OnceLock<Result<Arc<rustls::ClientConfig>, String>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let roots = rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.into() };
            rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .map(|b| Arc::new(b.with_root_certificates(roots).with_no_client_auth()))
                .map_err(|e| format!("TLS configuration: {e}"))
        })
        .clone()
}

trait Stream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static> Stream for T {}

/// Sends one request of a component: checks, resolves, admits, connects to
/// an admitted address, and returns the response with its body bounded.
async fn send(
    shared: Arc<Shared>,
    mut request: http::Request<WasiBody>,
) -> Result<(http::Response<WasiBody>, IoFuture), HttpError> {
    let started = Instant::now();
    let uri = request.uri().clone();
    let tls = uri.scheme() == Some(&http::uri::Scheme::HTTPS);
    let Some(host) = uri.host().map(str::to_string) else { return Err(HttpError::HttpRequestUriInvalid) };
    let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
    let decision = match shared.policy.decide(&host, port).await {
        Ok(d) => d,
        Err(refusal) => {
            let policy = refusal.is_policy();
            let why = refusal.to_string();
            shared.refuse(format!("HTTP request to {host}:{port}: {why}"));
            let address = match &refusal {
                Refusal::Private { address, .. } => Some(*address),
                _ => None,
            };
            shared.record("wasi-http", &host, port, address, &Err(why.clone()));
            return Err(if policy {
                HttpError::HttpRequestDenied
            } else {
                HttpError::DnsError { rcode: Some(why), info_code: None }
            });
        }
    };
    // Connect to an admitted address: the name is never resolved again.
    let mut stream = None;
    let mut last = None;
    for addr in &decision.addrs {
        match tokio::time::timeout(shared.remaining(), tokio::net::TcpStream::connect(addr)).await {
            Ok(Ok(s)) => {
                stream = Some((s, *addr));
                break;
            }
            Ok(Err(e)) => last = Some(HttpError::Connect(e)),
            Err(_) => {
                last = Some(HttpError::ConnectionTimeout);
                break;
            }
        }
    }
    let Some((tcp, addr)) = stream else {
        let e = last.unwrap_or(HttpError::ConnectionRefused);
        shared.record("wasi-http", &host, port, decision.addrs.first().copied(), &Err(format!("{e}")));
        return Err(e);
    };
    shared.record("wasi-http", &host, port, Some(addr), &Ok(format!("granted by net.connect {}", decision.grant)));
    let io: Box<dyn Stream> = if tls {
        let name = match rules::ip_literal(&host) {
            Some(ip) => rustls::pki_types::ServerName::IpAddress(ip.into()),
            None => rustls::pki_types::ServerName::try_from(host.clone())?,
        };
        let connector = tokio_rustls::TlsConnector::from(tls_config()?);
        match tokio::time::timeout(shared.remaining(), connector.connect(name, tcp)).await {
            Ok(Ok(s)) => Box::new(s),
            Ok(Err(e)) => return Err(HttpError::Tls(e)),
            Err(_) => return Err(HttpError::ConnectionTimeout),
        }
    } else {
        Box::new(tcp)
    };
    let (mut sender, conn) = tokio::time::timeout(
        shared.remaining(),
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(io)),
    )
    .await
    .map_err(|_| HttpError::ConnectionTimeout)??;
    // The connection lives at most as long as the call.
    let remaining = shared.remaining();
    let conn = tokio::spawn(async move { tokio::time::timeout(remaining, conn).await });
    // The request line carries the path alone (the Host header names the authority).
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    *request.uri_mut() = http::Uri::try_from(path).map_err(|_| HttpError::HttpRequestUriInvalid)?;
    let response = tokio::time::timeout(shared.remaining(), sender.send_request(request))
        .await
        .map_err(|_| HttpError::ConnectionReadTimeout)??;
    let deadline = tokio::time::Instant::from_std(shared.deadline);
    let limit = shared.max_body;
    let response = response.map(|incoming| {
        Bounded { incoming, seen: 0, limit, deadline: Box::pin(tokio::time::sleep_until(deadline)) }.boxed_unsync()
    });
    tracing::debug!("wasi:http {host}:{port} via {addr} in {:?}", started.elapsed());
    let io: IoFuture = Box::new(async move {
        match conn.await {
            Ok(Ok(Err(e))) => Err(HttpError::from(e)),
            Ok(Err(_)) => Err(HttpError::HttpResponseTimeout),
            _ => Ok(()),
        }
    });
    Ok((response, io))
}

/// A response body cut at `limit` bytes and at the call's deadline.
struct Bounded {
    incoming: hyper::body::Incoming,
    seen: u64,
    limit: u64,
    deadline: Pin<Box<tokio::time::Sleep>>,
}

impl Body for Bounded {
    type Data = Bytes;
    type Error = HttpError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, HttpError>>> {
        if self.deadline.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Some(Err(HttpError::HttpResponseTimeout)));
        }
        match Pin::new(&mut self.incoming).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    self.seen += data.len() as u64;
                    if self.seen > self.limit {
                        let limit = self.limit;
                        return Poll::Ready(Some(Err(HttpError::HttpResponseBodySize(Some(limit)))));
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(HttpError::from(e)))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.incoming.is_end_stream()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::policy::NetGrant;
    use std::io::{Read, Write};

    /// A server on 127.0.0.1 answering one request with `size` bytes; returns
    /// its port and how many requests reached it.
    fn server(size: usize) -> (u16, Arc<Mutex<usize>>) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(0));
        let s = seen.clone();
        std::thread::spawn(move || {
            if let Ok((mut c, _)) = l.accept() {
                *s.lock().unwrap() += 1;
                let mut buf = [0u8; 4096];
                let _ = c.read(&mut buf);
                let _ = write!(c, "HTTP/1.1 200 OK\r\nContent-Length: {size}\r\nConnection: close\r\n\r\n");
                let _ = c.write_all(&vec![b'x'; size]);
            }
        });
        (port, seen)
    }

    fn shared(grants: &[(&str, u16)], max_body: u64) -> Arc<Shared> {
        let policy = EgressPolicy {
            tool: "t".into(),
            grants: grants.iter().map(|(h, p)| NetGrant { host: h.to_string(), port: *p }).collect(),
            allow_private: false,
            credentials: Vec::new(),
        };
        let net = Net::new(policy, Arc::default(), Instant::now() + Duration::from_secs(10), 0);
        let mut s = Arc::try_unwrap(net.shared).unwrap_or_else(|_| panic!("shared"));
        s.max_body = max_body;
        Arc::new(s)
    }

    fn request(url: &str) -> http::Request<WasiBody> {
        let body = http_body_util::Empty::<Bytes>::new().map_err(|never| match never {}).boxed_unsync();
        let host = url.split('/').nth(2).unwrap().to_string();
        http::Request::builder().uri(url).header("host", host).body(body).unwrap()
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
    }

    /// The send hook: a literal grant reaches the server and the body is cut
    /// at the bound; a granted name resolving to loopback and an ungranted
    /// port are refused before any connection, the note naming the key.
    #[test]
    fn the_send_hook_admits_bounds_and_refuses() {
        let rt = runtime();
        let (port, seen) = server(100_000);
        let s = shared(&[("127.0.0.1", port)], 1000);
        let (response, io) = rt.block_on(send(s.clone(), request(&format!("http://127.0.0.1:{port}/")))).unwrap();
        assert_eq!(response.status(), 200);
        let body = rt.block_on(response.into_body().collect());
        assert!(matches!(body, Err(HttpError::HttpResponseBodySize(Some(1000)))), "{body:?}");
        drop(io);
        assert_eq!(*seen.lock().unwrap(), 1);

        let (port, seen) = server(10);
        let s = shared(&[("localhost", port)], 1000);
        let e = rt.block_on(send(s.clone(), request(&format!("http://localhost:{port}/")))).err();
        assert!(matches!(e, Some(HttpError::HttpRequestDenied)), "{e:?}");
        assert!(s.note.lock().unwrap().clone().unwrap().contains("net.allow_private"));
        let e = rt.block_on(send(s.clone(), request(&format!("http://127.0.0.1:{}/", port ^ 1)))).err();
        assert!(matches!(e, Some(HttpError::HttpRequestDenied)), "{e:?}");
        assert!(s.note.lock().unwrap().clone().unwrap().contains("net.connect"));
        assert_eq!(*seen.lock().unwrap(), 0, "a refused request connected");
    }
}
