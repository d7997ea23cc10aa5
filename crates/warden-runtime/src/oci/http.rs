//! The registry's HTTP: one request per connection over hyper 1 (HTTPS with
//! rustls, ring and the WebPKI roots; plain HTTP to loopback hosts only),
//! bounded in time and size, with token or basic authentication on a `401`
//! and at most [`MAX_REDIRECTS`] redirects that never go from https to http
//! and never carry the registry's credentials to another host.
//!
//! Nothing the registry says is trusted beyond the transport: the caller
//! hashes every body it keeps.

use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode, Uri, header};
use http_body_util::{BodyExt, Full};

/// How long a TCP connection (and TLS handshake) may take.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long one request may take, its whole response body included.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// The most redirects one request follows.
pub(crate) const MAX_REDIRECTS: usize = 3;
/// The largest token or error body read.
const MAX_SMALL_BODY: u64 = 1 << 20;
/// The environment variables of registry credentials.
pub(crate) const USERNAME_VAR: &str = "WARDEN_OCI_USERNAME";
/// See [`USERNAME_VAR`].
pub(crate) const PASSWORD_VAR: &str = "WARDEN_OCI_PASSWORD";
/// The registries (and token services) the credentials may be sent to: `HOST[:PORT],…`.
pub(crate) const REGISTRY_VAR: &str = "WARDEN_OCI_REGISTRY";

/// A response: status, headers and the body read up to its cap.
pub(crate) struct Reply {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Vec<u8>,
}

impl Reply {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The body's start as text, for an error message.
    pub(crate) fn excerpt(&self) -> String {
        let text = String::from_utf8_lossy(&self.body[..self.body.len().min(300)]).into_owned();
        text.chars().filter(|c| !c.is_control()).collect()
    }
}

/// One registry: where it is and what authorises requests to it.
pub(crate) struct Registry {
    /// `https://HOST[:PORT]` or, for a loopback host, `http://…`.
    base: String,
    /// `HOST[:PORT]`.
    authority: String,
    /// The `Authorization` value earned by the last challenge.
    auth: Option<String>,
}

/// Whether `host` (no brackets, no port) is this machine: `localhost`, 127.0.0.0/8 or ::1.
pub(crate) fn is_loopback(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost") || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

impl Registry {
    /// The registry at `authority` (`HOST[:PORT]`): https, or http when the host is loopback.
    pub(crate) fn new(authority: &str) -> Registry {
        let host = warden_policy::oci::host_of(authority);
        let scheme = if is_loopback(host) { "http" } else { "https" };
        Registry { base: format!("{scheme}://{authority}"), authority: authority.to_string(), auth: None }
    }

    /// `path` (starting with `/`) or an absolute URL the registry gave, as a URI.
    pub(crate) fn uri(&self, location: &str) -> Result<Uri, String> {
        let text = if location.starts_with('/') { format!("{}{location}", self.base) } else { location.to_string() };
        text.parse::<Uri>().map_err(|e| format!("{text:?} is not a URL: {e}"))
    }

    /// Sends a request to the registry, answering one authentication challenge.
    pub(crate) async fn send(
        &mut self,
        method: Method,
        location: &str,
        headers: &[(&str, String)],
        body: Bytes,
        cap: u64,
    ) -> Result<Reply, String> {
        let uri = self.uri(location)?;
        let reply = self.follow(method.clone(), &uri, headers, body.clone(), cap).await?;
        if reply.status != StatusCode::UNAUTHORIZED {
            return Ok(reply);
        }
        let challenge = reply.header("www-authenticate").unwrap_or_default().to_string();
        self.auth = Some(self.answer(&challenge).await?);
        let again = self.follow(method, &uri, headers, body, cap).await?;
        if again.status == StatusCode::UNAUTHORIZED {
            return Err(format!(
                "{} refused the credentials (HTTP 401 again); check {USERNAME_VAR} and {PASSWORD_VAR}",
                self.authority
            ));
        }
        Ok(again)
    }

    /// Sends one request, following redirects: never https→http, and the
    /// registry's `Authorization` only to the registry itself.
    async fn follow(
        &self,
        method: Method,
        first: &Uri,
        headers: &[(&str, String)],
        body: Bytes,
        cap: u64,
    ) -> Result<Reply, String> {
        let mut uri = first.clone();
        for _ in 0..=MAX_REDIRECTS {
            let ours = uri.authority().is_some_and(|a| a.as_str().eq_ignore_ascii_case(&self.authority));
            let mut all: Vec<(&str, String)> = headers.to_vec();
            if let (true, Some(auth)) = (ours, &self.auth) {
                all.push(("authorization", auth.clone()));
            }
            let reply = exchange(method.clone(), &uri, &all, body.clone(), cap).await?;
            if !reply.status.is_redirection() || reply.status == StatusCode::NOT_MODIFIED {
                return Ok(reply);
            }
            let location = reply.header("location").ok_or_else(|| format!("{uri}: a redirect without a Location"))?;
            let next = if location.starts_with('/') {
                let scheme = uri.scheme_str().unwrap_or("https");
                let authority = uri.authority().map(|a| a.as_str()).unwrap_or_default();
                format!("{scheme}://{authority}{location}").parse::<Uri>()
            } else {
                location.parse::<Uri>()
            }
            .map_err(|e| format!("{uri}: the redirect to {location:?} is not a URL: {e}"))?;
            if uri.scheme_str() == Some("https") && next.scheme_str() != Some("https") {
                return Err(format!("{uri}: refused a redirect from https to {next} (not https)"));
            }
            uri = next;
        }
        Err(format!("{first}: more than {MAX_REDIRECTS} redirects"))
    }

    /// The `Authorization` value that answers `challenge`: a bearer token from
    /// its realm (anonymous, or with the configured credentials), or basic.
    async fn answer(&self, challenge: &str) -> Result<String, String> {
        let basic = |authority: &str| {
            credentials(authority).map(|c| {
                c.map(|(u, p)| {
                    format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}")))
                })
            })
        };
        let (scheme, params) = parse_challenge(challenge);
        match scheme.to_ascii_lowercase().as_str() {
            "bearer" => {}
            "basic" => {
                return basic(&self.authority)?.ok_or_else(|| {
                    format!(
                        "{} asks for credentials: set {USERNAME_VAR} and {PASSWORD_VAR}, and name it in {REGISTRY_VAR}",
                        self.authority
                    )
                });
            }
            _ => {
                return Err(format!(
                    "{} answered HTTP 401 with no challenge warden knows: {challenge:?}",
                    self.authority
                ));
            }
        }
        let param = |k: &str| params.iter().find(|(n, _)| n.eq_ignore_ascii_case(k)).map(|(_, v)| v.as_str());
        let realm = param("realm").ok_or_else(|| format!("{}: a Bearer challenge without a realm", self.authority))?;
        let realm_uri = realm.parse::<Uri>().map_err(|e| format!("token realm {realm:?}: {e}"))?;
        let loopback = realm_uri.host().is_some_and(is_loopback);
        if realm_uri.scheme_str() != Some("https") && !(loopback && realm_uri.scheme_str() == Some("http")) {
            return Err(format!(
                "{}: refused the token realm {realm}: it must be https (or http on loopback)",
                self.authority
            ));
        }
        let mut query = Vec::new();
        for key in ["service", "scope"] {
            if let Some(v) = param(key) {
                query.push(format!("{key}={}", percent_encode(v)));
            }
        }
        let sep = if realm.contains('?') { '&' } else { '?' };
        let url = if query.is_empty() { realm.to_string() } else { format!("{realm}{sep}{}", query.join("&")) };
        let uri = url.parse::<Uri>().map_err(|e| format!("token URL {url:?}: {e}"))?;
        // The credentials go to the token service only when it is one they are for; otherwise anonymous.
        let realm_authority = realm_uri.authority().map(|a| a.as_str().to_string()).unwrap_or_default();
        let headers: Vec<(&str, String)> =
            basic(&realm_authority).ok().flatten().into_iter().map(|b| ("authorization", b)).collect();
        let reply = exchange(Method::GET, &uri, &headers, Bytes::new(), MAX_SMALL_BODY).await?;
        if !reply.status.is_success() {
            return Err(format!(
                "the token service {realm} answered HTTP {}: {}; check {USERNAME_VAR} and {PASSWORD_VAR}, and that \
                 {REGISTRY_VAR} names {realm_authority} (credentials go nowhere else)",
                reply.status.as_u16(),
                reply.excerpt()
            ));
        }
        let doc: serde_json::Value =
            serde_json::from_slice(&reply.body).map_err(|e| format!("the token service {realm} sent no JSON: {e}"))?;
        let token = doc["token"].as_str().or(doc["access_token"].as_str()).filter(|t| !t.is_empty());
        let token = token.ok_or_else(|| format!("the token service {realm} sent no token"))?;
        Ok(format!("Bearer {token}"))
    }
}

/// `WARDEN_OCI_USERNAME` and `WARDEN_OCI_PASSWORD`, when both are set and
/// `authority` (a registry, or its token service) is one that
/// `WARDEN_OCI_REGISTRY` names: credentials meant for one registry never go to
/// another that a policy names or a registry points at.
fn credentials(authority: &str) -> Result<Option<(String, String)>, String> {
    let Some(user) = std::env::var(USERNAME_VAR).ok().filter(|u| !u.is_empty()) else { return Ok(None) };
    let Ok(pass) = std::env::var(PASSWORD_VAR) else { return Ok(None) };
    let hosts = std::env::var(REGISTRY_VAR).unwrap_or_default();
    if hosts.split(',').map(str::trim).any(|h| !h.is_empty() && h.eq_ignore_ascii_case(authority)) {
        return Ok(Some((user, pass)));
    }
    Err(format!(
        "{authority} asks for credentials, and {USERNAME_VAR} is set, but {REGISTRY_VAR} does not name \
         {authority}: add it ({REGISTRY_VAR}=HOST[:PORT],… lists the registries, and their token services, your \
         credentials are for) only if they are meant for it"
    ))
}

/// `Bearer realm="…",service="…",scope="…"` → ("Bearer", [(realm, …), …]); quoted values may hold commas.
pub(crate) fn parse_challenge(text: &str) -> (String, Vec<(String, String)>) {
    let text = text.trim();
    let (scheme, rest) = text.split_once(' ').unwrap_or((text, ""));
    let mut params = Vec::new();
    let mut chars = rest.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| *c == ',' || c.is_whitespace()) {
            chars.next();
        }
        let key: String = std::iter::from_fn(|| chars.next_if(|c| *c != '=' && *c != ',')).collect();
        if key.is_empty() || chars.next() != Some('=') {
            break;
        }
        let mut value = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => value.extend(chars.next()),
                    '"' => break,
                    c => value.push(c),
                }
            }
        } else {
            value = std::iter::from_fn(|| chars.next_if(|c| *c != ',')).collect::<String>().trim().to_string();
        }
        params.push((key.trim().to_string(), value));
    }
    (scheme.to_string(), params)
}

/// Percent-encodes all but RFC 3986's unreserved characters.
fn percent_encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

trait Stream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static> Stream for T {}

/// Connects to `uri`'s host: TCP within [`CONNECT_TIMEOUT`], then TLS for https.
async fn connect(uri: &Uri) -> Result<Box<dyn Stream>, String> {
    let host = uri.host().ok_or_else(|| format!("{uri}: no host"))?;
    let bare = host.trim_start_matches('[').trim_end_matches(']').to_string();
    let tls = match uri.scheme_str() {
        Some("https") => true,
        Some("http") if is_loopback(&bare) => false,
        Some("http") => return Err(format!("{uri}: plain http is refused for a host that is not loopback")),
        other => return Err(format!("{uri}: unsupported scheme {other:?}")),
    };
    let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
    // Plain http only to this machine: `localhost` must resolve to loopback addresses and nothing else.
    let addrs: Vec<std::net::SocketAddr> =
        tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::lookup_host((bare.as_str(), port)))
            .await
            .map_err(|_| format!("{uri}: resolving {bare} took longer than {} s", CONNECT_TIMEOUT.as_secs()))?
            .map_err(|e| format!("{uri}: cannot resolve {bare}: {e}"))?
            .collect();
    if !tls && addrs.iter().any(|a| !a.ip().is_loopback()) {
        return Err(format!("{uri}: {bare} resolves to an address that is not loopback; plain http is refused"));
    }
    let tcp = tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::TcpStream::connect(&addrs[..]))
        .await
        .map_err(|_| format!("{host}:{port}: no connection within {}s", CONNECT_TIMEOUT.as_secs()))?
        .map_err(|e| format!("cannot connect to {host}:{port}: {e}"))?;
    if !tls {
        return Ok(Box::new(tcp));
    }
    let name = match bare.parse::<std::net::IpAddr>() {
        Ok(ip) => rustls::pki_types::ServerName::IpAddress(ip.into()),
        Err(_) => rustls::pki_types::ServerName::try_from(bare.clone()).map_err(|e| format!("{host}: {e}"))?,
    };
    let connector = tokio_rustls::TlsConnector::from(crate::wasm::net::webpki_client()?);
    let stream = tokio::time::timeout(CONNECT_TIMEOUT, connector.connect(name, tcp))
        .await
        .map_err(|_| format!("{host}:{port}: no TLS handshake within {}s", CONNECT_TIMEOUT.as_secs()))?
        .map_err(|e| format!("TLS with {host}:{port} failed: {e}"))?;
    Ok(Box::new(stream))
}

/// One request and its response, within [`REQUEST_TIMEOUT`]; a body beyond `cap` is an error.
async fn exchange(
    method: Method,
    uri: &Uri,
    headers: &[(&str, String)],
    body: Bytes,
    cap: u64,
) -> Result<Reply, String> {
    tokio::time::timeout(REQUEST_TIMEOUT, exchange_unbounded(method, uri, headers, body, cap))
        .await
        .map_err(|_| format!("{uri}: no complete answer within {}s", REQUEST_TIMEOUT.as_secs()))?
}

async fn exchange_unbounded(
    method: Method,
    uri: &Uri,
    headers: &[(&str, String)],
    body: Bytes,
    cap: u64,
) -> Result<Reply, String> {
    let head = method == Method::HEAD;
    let io = connect(uri).await?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake::<_, Full<Bytes>>(hyper_util::rt::TokioIo::new(io))
        .await
        .map_err(|e| format!("{uri}: {e}"))?;
    let conn = tokio::spawn(conn);
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let authority = uri.authority().map(|a| a.as_str().to_string()).unwrap_or_default();
    let mut request = http::Request::builder()
        .method(method)
        .uri(path)
        .header(header::HOST, authority)
        .header(header::USER_AGENT, concat!("warden/", env!("CARGO_PKG_VERSION")));
    for (k, v) in headers {
        request = request.header(*k, v);
    }
    let request = request.body(Full::new(body)).map_err(|e| format!("{uri}: {e}"))?;
    let response = sender.send_request(request).await.map_err(|e| format!("{uri}: {e}"))?;
    let (parts, mut incoming) = response.into_parts();
    let declared = parts.headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if head {
        conn.abort();
        return Ok(Reply { status: parts.status, headers: parts.headers, body: Vec::new() });
    }
    if declared.is_some_and(|n| n > cap) && parts.status.is_success() {
        conn.abort();
        return Err(format!("{uri}: the answer is larger than the {cap} bytes warden reads"));
    }
    let mut body = Vec::new();
    while let Some(frame) = incoming.frame().await {
        let frame = frame.map_err(|e| format!("{uri}: {e}"))?;
        if let Some(data) = frame.data_ref() {
            if (body.len() + data.len()) as u64 > cap {
                conn.abort();
                if !parts.status.is_success() {
                    break;
                }
                return Err(format!("{uri}: the answer is larger than the {cap} bytes warden reads"));
            }
            body.extend_from_slice(data);
        }
    }
    conn.abort();
    Ok(Reply { status: parts.status, headers: parts.headers, body })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::type_complexity)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_bearer_challenge_with_commas_in_quotes() {
        let (scheme, params) = parse_challenge(
            r#"Bearer realm="https://auth.example/token",service="reg.example",scope="repository:a/b:pull,push""#,
        );
        assert_eq!(scheme, "Bearer");
        assert_eq!(
            params,
            [
                ("realm".into(), "https://auth.example/token".into()),
                ("service".into(), "reg.example".into()),
                ("scope".into(), "repository:a/b:pull,push".into()),
            ]
        );
        assert_eq!(percent_encode("repository:a/b:pull,push"), "repository%3Aa%2Fb%3Apull%2Cpush");
    }

    #[test]
    fn plain_http_only_for_loopback() {
        assert!(Registry::new("127.0.0.1:5000").base.starts_with("http://"));
        assert!(Registry::new("localhost:5000").base.starts_with("http://"));
        assert!(Registry::new("[::1]:5000").base.starts_with("http://"));
        assert!(Registry::new("127.9.9.9").base.starts_with("http://"));
        assert!(Registry::new("ghcr.io").base.starts_with("https://"));
        assert!(Registry::new("10.0.0.1:5000").base.starts_with("https://"));
    }

    /// A one-request HTTP server on 127.0.0.1: answers `reply` and hands back the request's head.
    fn serve_once(reply: String) -> (u16, std::thread::JoinHandle<String>) {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let handle = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && s.read(&mut byte).unwrap() == 1 {
                head.push(byte[0]);
            }
            s.write_all(reply.as_bytes()).unwrap();
            String::from_utf8_lossy(&head).to_ascii_lowercase()
        });
        (port, handle)
    }

    #[test]
    fn a_redirect_to_another_host_does_not_carry_the_credentials() {
        let (other, other_seen) =
            serve_once("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello".into());
        let (port, seen) = serve_once(format!(
            "HTTP/1.1 307 Temporary Redirect\r\nLocation: http://localhost:{other}/elsewhere\r\n\
             Content-Length: 0\r\nConnection: close\r\n\r\n"
        ));
        let mut registry = Registry::new(&format!("127.0.0.1:{port}"));
        registry.auth = Some("Bearer secret-token".into());
        let reply = super::super::block_on(registry.send(Method::GET, "/v2/x/blobs/y", &[], Bytes::new(), 100))
            .unwrap()
            .unwrap();
        assert_eq!((reply.status, reply.body.as_slice()), (StatusCode::OK, b"hello".as_slice()));
        assert!(seen.join().unwrap().contains("authorization: bearer secret-token"));
        let there = other_seen.join().unwrap();
        assert!(there.starts_with("get /elsewhere") && !there.contains("authorization"), "{there}");
    }

    #[test]
    fn a_body_beyond_its_cap_is_an_error() {
        let (port, _seen) =
            serve_once("HTTP/1.1 200 OK\r\nContent-Length: 11\r\nConnection: close\r\n\r\nhello world".into());
        let mut registry = Registry::new(&format!("127.0.0.1:{port}"));
        let got = super::super::block_on(registry.send(Method::GET, "/v2/", &[], Bytes::new(), 5)).unwrap();
        assert!(got.is_err_and(|e| e.contains("larger than the 5 bytes")));
    }
}
