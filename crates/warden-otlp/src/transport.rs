//! OTLP/HTTP with protobuf bodies: one POST per batch over HTTP/1.1, plain or
//! TLS (the system's roots, which honour `SSL_CERT_FILE`, and the policy's
//! `ca_file`), headers whose values come from warden's environment, the whole
//! exchange under the policy's `timeout` and the response read to a bound.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, HeaderValue};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName};
use warden_policy::otlp::{Otlp, Url};

/// The most of a response body read (a collector answers with a short message).
const MAX_RESPONSE: usize = 64 << 10;

/// What became of one request.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// Accepted; the response body.
    Accepted(Bytes),
    /// Not accepted this time (no connection, a timeout, 429, 5xx, 401, …): send it again later.
    Retry(String),
    /// The collector refuses this content (400 or 413): sending it again as it is cannot succeed.
    Refused(String),
}

/// How requests are made.
pub(crate) struct Transport {
    tls: Option<tokio_rustls::TlsConnector>,
    headers: Vec<(HeaderName, HeaderValue)>,
    timeout: Duration,
}

/// The headers of `settings`, their values read from warden's environment now.
fn headers(settings: &Otlp) -> Result<Vec<(HeaderName, HeaderValue)>, String> {
    settings
        .headers
        .iter()
        .map(|(name, var)| {
            let value = std::env::var(var).map_err(|_| {
                format!(
                    "[audit.otlp] headers.{name} comes from the environment variable {var}, which warden's \
                     environment does not hold (or not as UTF-8): set it, or remove the header"
                )
            })?;
            let name =
                HeaderName::from_bytes(name.as_bytes()).map_err(|e| format!("[audit.otlp] headers.{name}: {e}"))?;
            let mut value = HeaderValue::from_str(value.trim())
                .map_err(|_| format!("[audit.otlp] headers.{name}: the value of {var} is not a valid header value"))?;
            value.set_sensitive(true);
            Ok((name, value))
        })
        .collect()
}

/// The TLS client: the system's roots and the `ca_file`'s certificates.
fn tls(settings: &Otlp) -> Result<tokio_rustls::TlsConnector, String> {
    let mut roots = rustls::RootCertStore::empty();
    let loaded = rustls_native_certs::load_native_certs();
    let (system, _) = roots.add_parsable_certificates(loaded.certs);
    if let Some(ca) = &settings.ca_file {
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(ca)
            .and_then(|it| it.collect::<Result<_, _>>())
            .map_err(|e| format!("[audit.otlp] ca_file {}: {e} (give a PEM file of CA certificates)", ca.display()))?;
        if certs.is_empty() {
            return Err(format!("[audit.otlp] ca_file {}: no certificate in it", ca.display()));
        }
        let (added, _) = roots.add_parsable_certificates(certs);
        if added == 0 {
            return Err(format!("[audit.otlp] ca_file {}: none of its certificates could be used", ca.display()));
        }
    } else if system == 0 {
        return Err(format!(
            "[audit.otlp]: the endpoint is https:// and no system root certificate could be loaded (SSL_CERT_FILE={}): \
             set SSL_CERT_FILE, or give ca_file",
            std::env::var("SSL_CERT_FILE").unwrap_or_else(|_| "unset".into())
        ));
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("[audit.otlp] TLS configuration: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}

impl Transport {
    /// The transport of `settings`: fails (naming the variable or file) when a
    /// header's variable is unset or the trust roots cannot be loaded.
    pub(crate) fn new(settings: &Otlp) -> Result<Transport, String> {
        let needs_tls = settings.logs.tls || (settings.spans && settings.traces.tls);
        Ok(Transport {
            tls: if needs_tls { Some(tls(settings)?) } else { None },
            headers: headers(settings)?,
            timeout: settings.timeout,
        })
    }

    /// POSTs `body` (a protobuf message) to `url`.
    pub(crate) async fn post(&self, url: &Url, body: Vec<u8>) -> Outcome {
        match tokio::time::timeout(self.timeout, self.exchange(url, body)).await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(e)) => Outcome::Retry(format!("{url}: {e}")),
            Err(_) => Outcome::Retry(format!("{url}: no answer within {:?} (timeout)", self.timeout)),
        }
    }

    async fn exchange(&self, url: &Url, body: Vec<u8>) -> Result<Outcome, Box<dyn std::error::Error + Send + Sync>> {
        let tcp = tokio::net::TcpStream::connect((url.host.as_str(), url.port)).await?;
        tcp.set_nodelay(true)?;
        if url.tls {
            let connector = self.tls.as_ref().ok_or("no TLS client for an https:// endpoint")?;
            let name = ServerName::try_from(url.host.clone())?;
            let stream = connector.connect(name, tcp).await?;
            self.request(url, TokioIo::new(stream), body).await
        } else {
            self.request(url, TokioIo::new(tcp), body).await
        }
    }

    async fn request<T>(
        &self,
        url: &Url,
        io: T,
        body: Vec<u8>,
    ) -> Result<Outcome, Box<dyn std::error::Error + Send + Sync>>
    where
        T: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    {
        let (mut sender, conn) = hyper::client::conn::http1::handshake(io).await?;
        let driver = tokio::spawn(conn);
        let default_port = if url.tls { 443 } else { 80 };
        let host = match (url.host.contains(':'), url.port == default_port) {
            (true, true) => format!("[{}]", url.host),
            (true, false) => format!("[{}]:{}", url.host, url.port),
            (false, true) => url.host.clone(),
            (false, false) => format!("{}:{}", url.host, url.port),
        };
        let mut req = http::Request::post(url.path.as_str())
            .header(http::header::HOST, host)
            .header(http::header::CONTENT_TYPE, "application/x-protobuf")
            .header(http::header::USER_AGENT, concat!("warden/", env!("CARGO_PKG_VERSION")))
            .body(Full::new(Bytes::from(body)))?;
        for (name, value) in &self.headers {
            req.headers_mut().insert(name.clone(), value.clone());
        }
        let resp = sender.send_request(req).await?;
        let status = resp.status();
        let body = Limited::new(resp.into_body(), MAX_RESPONSE).collect().await.map(|c| c.to_bytes());
        driver.abort();
        let text = |b: &Result<Bytes, _>| match b {
            Ok(b) => String::from_utf8_lossy(&b[..b.len().min(300)]).into_owned(),
            Err(_) => String::new(),
        };
        Ok(match status.as_u16() {
            200..=299 => Outcome::Accepted(body.unwrap_or_default()),
            400 | 413 => Outcome::Refused(format!("{url}: {status} {}", text(&body))),
            _ => Outcome::Retry(format!("{url}: {status} {}", text(&body))),
        })
    }
}
