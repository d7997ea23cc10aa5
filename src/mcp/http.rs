//! Streamable HTTP, the second transport: `warden serve --http ADDR`.
//!
//! Stateless (no MCP sessions), so several instances can sit behind a load
//! balancer when they share `WARDEN_STATE_KEY`. Every request must carry
//! `Authorization: Bearer TOKEN` (401 otherwise, compared in constant time); a
//! request with an `Origin` header must come from a loopback origin or one given
//! with `--allow-origin` (403 otherwise), and its `Host` must name this server
//! (rmcp's DNS-rebinding check, 403). Only `/mcp` is served.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

use super::server::{Shared, WardenServer};

/// The largest request body accepted (413 past it).
pub const MAX_BODY_BYTES: usize = 4 << 20;

/// How the HTTP transport is set up.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// Where to listen.
    pub addr: SocketAddr,
    /// The bearer token every request must carry.
    pub token: String,
    /// Origins admitted besides loopback ones (exact `scheme://host:port`).
    pub allowed_origins: Vec<String>,
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

/// Serves MCP on `options.addr` until SIGINT or SIGTERM.
pub async fn serve(shared: Arc<Shared>, options: HttpOptions) -> Result<(), String> {
    let listener = tokio::net::TcpListener::bind(options.addr)
        .await
        .map_err(|e| format!("cannot listen on {}: {e} (pick another --http address)", options.addr))?;
    let local = listener.local_addr().map_err(|e| format!("cannot read the bound address: {e}"))?;
    if !local.ip().is_loopback() {
        tracing::warn!(
            "listening on {local}, which is not loopback: anyone who can reach it and holds the token can call tools"
        );
    }
    let mut hosts = vec!["localhost".to_string(), "127.0.0.1".to_string(), "::1".to_string()];
    if !local.ip().is_unspecified() {
        hosts.push(local.ip().to_string());
    }
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None)
        .with_allowed_hosts(hosts)
        .with_max_request_body_bytes(MAX_BODY_BYTES);
    let mcp = StreamableHttpService::new(
        move || Ok(WardenServer::new(shared.clone(), false)),
        Arc::new(NeverSessionManager::default()),
        config,
    );
    eprintln!("warden: serving MCP at http://{local}/mcp");
    let token: Arc<str> = Arc::from(options.token);
    let origins: Arc<[String]> = Arc::from(options.allowed_origins);
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| format!("cannot watch SIGTERM: {e}"))?;
    loop {
        let (stream, _) = tokio::select! {
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!("accept failed: {e}");
                    continue;
                }
            },
            _ = tokio::signal::ctrl_c() => return Ok(()),
            _ = term.recv() => return Ok(()),
        };
        let (mcp, token, origins) = (mcp.clone(), token.clone(), origins.clone());
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                let (mcp, token, origins) = (mcp.clone(), token.clone(), origins.clone());
                async move { Ok::<_, Infallible>(gate(req, &mcp, &token, &origins).await) }
            });
            if let Err(e) =
                hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await
            {
                tracing::debug!("connection ended: {e}");
            }
        });
    }
}

/// Path, token and origin checks, then rmcp.
async fn gate(
    req: http::Request<hyper::body::Incoming>,
    mcp: &StreamableHttpService<WardenServer, NeverSessionManager>,
    token: &str,
    origins: &[String],
) -> http::Response<Body> {
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
    if let Some(origin) = req.headers().get(http::header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("");
        if !loopback_origin(origin) && !origins.iter().any(|o| o == origin) {
            return plain(
                http::StatusCode::FORBIDDEN,
                "this Origin is not allowed: pass --allow-origin ORIGIN to warden serve to admit it\n",
            );
        }
    }
    mcp.handle(req).await
}

#[cfg(test)]
mod tests {
    use super::loopback_origin;

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
