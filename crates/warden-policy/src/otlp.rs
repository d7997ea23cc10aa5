//! `[audit.otlp]`: where warden exports its audit records as OpenTelemetry
//! (OTLP) log records, and optionally one span per call. The policy names the
//! collector, the protocol, the headers (their values only from warden's own
//! environment, never written in the policy), the TLS trust and the bounds of
//! the export; the exporter itself is the `warden-otlp` crate. docs/otlp.md has
//! the whole contract.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use crate::compile::Checker;
use crate::units::PolicyDuration;

/// `batch` when unset: records per export request.
pub const DEFAULT_BATCH: usize = 512;
/// The largest `batch`.
pub const MAX_BATCH: usize = 8192;
/// `queue` when unset: records read from the log and held in memory at a time.
pub const DEFAULT_QUEUE: usize = 4096;
/// The largest `queue`.
pub const MAX_QUEUE: usize = 65536;
/// `timeout` when unset: one export request, connection included.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// `flush` when unset: how long a short-lived warden (`call`, `run`) waits at
/// exit for its records to be sent before leaving them to the next start.
pub const DEFAULT_FLUSH: Duration = Duration::from_secs(2);
/// The longest `flush`.
pub const MAX_FLUSH: Duration = Duration::from_secs(30);
/// The longest `timeout`.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(120);
/// The most `headers`.
pub const MAX_HEADERS: usize = 32;

/// `[audit.otlp]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawOtlp {
    pub endpoint: Spanned<String>,
    pub logs_endpoint: Option<Spanned<String>>,
    pub traces_endpoint: Option<Spanned<String>>,
    pub protocol: Option<Spanned<String>>,
    #[serde(default)]
    pub headers: BTreeMap<Spanned<String>, Spanned<toml::Value>>,
    pub ca_file: Option<Spanned<String>>,
    pub spans: Option<bool>,
    pub arguments: Option<Spanned<String>>,
    pub batch: Option<Spanned<i64>>,
    pub queue: Option<Spanned<i64>>,
    pub timeout: Option<Spanned<PolicyDuration>>,
    pub flush: Option<Spanned<PolicyDuration>>,
}

/// The wire protocol of the export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// Protobuf bodies POSTed over HTTP/1.1 to `/v1/logs` and `/v1/traces`.
    HttpProtobuf,
}

/// What the exported records say of a call's arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Arguments {
    /// Their shape only: key names, JSON types, string and array lengths.
    #[default]
    Shape,
    /// The arguments as the local log holds them (secrets redacted, long values cut).
    Values,
}

/// One collector URL, split.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    /// `https` (verified TLS) or `http`.
    pub tls: bool,
    /// The host name or address (an IPv6 address without brackets).
    pub host: String,
    pub port: u16,
    /// The path, starting with `/`.
    pub path: String,
}

impl std::fmt::Display for Url {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let scheme = if self.tls { "https" } else { "http" };
        if self.host.contains(':') {
            write!(f, "{scheme}://[{}]:{}{}", self.host, self.port, self.path)
        } else {
            write!(f, "{scheme}://{}:{}{}", self.host, self.port, self.path)
        }
    }
}

/// `[audit.otlp]`, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Otlp {
    /// Where log records go: `logs_endpoint` as written, else `endpoint` with `v1/logs` appended.
    pub logs: Url,
    /// Where spans go: `traces_endpoint` as written, else `endpoint` with `v1/traces` appended.
    pub traces: Url,
    pub protocol: Protocol,
    /// Header name (lower case) → the variable of warden's environment holding its value.
    pub headers: BTreeMap<String, String>,
    /// Extra trust roots (PEM), added to the system's.
    pub ca_file: Option<PathBuf>,
    /// Export a span per call too.
    pub spans: bool,
    pub arguments: Arguments,
    pub batch: usize,
    pub queue: usize,
    pub timeout: Duration,
    pub flush: Duration,
}

/// Splits `http[s]://host[:port][/path]`. No user information (a credential
/// in the policy), query or fragment.
pub fn parse_url(s: &str) -> Result<Url, String> {
    let (tls, rest) = if let Some(r) = s.strip_prefix("https://") {
        (true, r)
    } else if let Some(r) = s.strip_prefix("http://") {
        (false, r)
    } else {
        return Err(format!("{s:?} is not an http:// or https:// URL"));
    };
    if rest.contains(['?', '#']) {
        return Err(format!("{s:?}: a collector URL has no query or fragment"));
    }
    let (authority, path) = rest.find('/').map_or((rest, "/"), |i| rest.split_at(i));
    if authority.contains('@') {
        return Err(format!(
            "{s:?}: user information in the URL would put a secret in the policy; send it as a header whose \
             value comes from warden's environment (headers = {{ authorization = {{ env = \"VAR\" }} }})"
        ));
    }
    let (host, port) = if let Some(r) = authority.strip_prefix('[') {
        let (h, after) = r.split_once(']').ok_or_else(|| format!("{s:?}: unclosed [ in the host"))?;
        (h, after.strip_prefix(':'))
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    if host.is_empty() || !host.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._:".contains(&b)) {
        return Err(format!("{s:?}: bad host {host:?}"));
    }
    let port = match port {
        Some(p) => p.parse::<u16>().ok().filter(|&p| p != 0).ok_or_else(|| format!("{s:?}: bad port {p:?}"))?,
        None if tls => 443,
        None => 80,
    };
    if !path.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(format!("{s:?}: the path must be printable ASCII (percent-encode the rest)"));
    }
    Ok(Url { tls, host: host.to_ascii_lowercase(), port, path: path.to_string() })
}

/// `base` with `signal` (`v1/logs`) appended to its path, as the OTLP exporter
/// specification appends it to `OTEL_EXPORTER_OTLP_ENDPOINT`.
fn with_signal(base: &Url, signal: &str) -> Url {
    let mut u = base.clone();
    if !u.path.ends_with('/') {
        u.path.push('/');
    }
    u.path.push_str(signal);
    u
}

/// A header name an exporter may set: an HTTP token, and none that the
/// transport owns.
fn valid_header(name: &str) -> Result<(), String> {
    const OWNED: &[&str] = &[
        "host",
        "content-type",
        "content-length",
        "content-encoding",
        "transfer-encoding",
        "connection",
        "te",
        "upgrade",
        "keep-alive",
        "proxy-connection",
    ];
    if name.is_empty() || name.len() > 128 || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)) {
        return Err(format!("{name:?} is not a header name (letters, digits, '-', '_', '.')"));
    }
    if OWNED.contains(&name.to_ascii_lowercase().as_str()) || name.starts_with("grpc-") {
        return Err(format!("{name:?} is set by the exporter itself"));
    }
    Ok(())
}

/// A variable name: letters, digits and `_`, not starting with a digit.
fn valid_var(v: &str) -> bool {
    !v.is_empty()
        && v.len() <= 128
        && !v.starts_with(|c: char| c.is_ascii_digit())
        && v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

fn bound(c: &mut Checker<'_>, key: &str, v: &Option<Spanned<i64>>, default: usize, max: usize) -> usize {
    match v {
        None => default,
        Some(s) if (1..=max as i64).contains(s.get_ref()) => *s.get_ref() as usize,
        Some(s) => {
            c.problem(s.span(), format!("audit.otlp.{key} = {}: must be 1 to {max}", s.get_ref()));
            default
        }
    }
}

fn url_of(c: &mut Checker<'_>, key: &str, s: &Spanned<String>) -> Option<Url> {
    parse_url(s.get_ref()).map_err(|e| c.problem(s.span(), format!("audit.otlp.{key}: {e}"))).ok()
}

/// Checks `[audit.otlp]`; `dir` is the policy's directory (a relative `ca_file` starts there).
pub(crate) fn compile_otlp(c: &mut Checker<'_>, raw: &Spanned<RawOtlp>, dir: &Path) -> Option<Otlp> {
    let r = raw.get_ref();
    let base = url_of(c, "endpoint", &r.endpoint);
    let logs = match &r.logs_endpoint {
        Some(s) => url_of(c, "logs_endpoint", s),
        None => base.as_ref().map(|b| with_signal(b, "v1/logs")),
    };
    let traces = match &r.traces_endpoint {
        Some(s) => url_of(c, "traces_endpoint", s),
        None => base.as_ref().map(|b| with_signal(b, "v1/traces")),
    };
    let protocol = match r.protocol.as_ref().map(|p| (p.get_ref().as_str(), p.span())) {
        None | Some(("http/protobuf", _)) => Protocol::HttpProtobuf,
        Some(("grpc", span)) => {
            c.problem(
                span,
                "audit.otlp.protocol = \"grpc\": this warden exports over http/protobuf only; point endpoint at \
                 the collector's OTLP/HTTP port (4318 by default) and write protocol = \"http/protobuf\"",
            );
            Protocol::HttpProtobuf
        }
        Some((other, span)) => {
            c.problem(span, format!("audit.otlp.protocol = {other:?}: write \"http/protobuf\""));
            Protocol::HttpProtobuf
        }
    };
    let headers = compile_headers(c, r);
    let ca_file = r.ca_file.as_ref().map(|f| {
        if !logs.as_ref().is_some_and(|u| u.tls) && !traces.as_ref().is_some_and(|u| u.tls) {
            c.problem(
                f.span(),
                "audit.otlp.ca_file: the endpoints are http://, so no certificate is checked; use https://",
            );
        }
        dir.join(f.get_ref())
    });
    let arguments = match r.arguments.as_ref().map(|a| (a.get_ref().as_str(), a.span())) {
        None | Some(("shape", _)) => Arguments::Shape,
        Some(("values", _)) => Arguments::Values,
        Some((other, span)) => {
            c.problem(span, format!("audit.otlp.arguments = {other:?}: write \"shape\" (the default) or \"values\""));
            Arguments::Shape
        }
    };
    let batch = bound(c, "batch", &r.batch, DEFAULT_BATCH, MAX_BATCH);
    let queue = bound(c, "queue", &r.queue, DEFAULT_QUEUE.max(batch), MAX_QUEUE);
    if let Some(q) = r.queue.as_ref().filter(|_| queue < batch) {
        c.problem(q.span(), format!("audit.otlp.queue = {queue}: must be at least batch ({batch})"));
    }
    let duration =
        |c: &mut Checker<'_>, key: &str, v: &Option<Spanned<PolicyDuration>>, d: Duration, max: Duration| match v {
            None => d,
            Some(s) if s.get_ref().0 <= max => s.get_ref().0,
            Some(s) => {
                c.problem(s.span(), format!("audit.otlp.{key}: at most {}s", max.as_secs()));
                d
            }
        };
    let timeout = duration(c, "timeout", &r.timeout, DEFAULT_TIMEOUT, MAX_TIMEOUT);
    let flush = duration(c, "flush", &r.flush, DEFAULT_FLUSH, MAX_FLUSH);
    Some(Otlp {
        logs: logs?,
        traces: traces?,
        protocol,
        headers,
        ca_file,
        spans: r.spans.unwrap_or(false),
        arguments,
        batch,
        queue,
        timeout,
        flush,
    })
}

/// `headers = { NAME = { env = "VAR" } }`: never a literal value.
fn compile_headers(c: &mut Checker<'_>, r: &RawOtlp) -> BTreeMap<String, String> {
    let mut headers = BTreeMap::new();
    if r.headers.len() > MAX_HEADERS {
        c.problem(r.endpoint.span(), format!("audit.otlp.headers: at most {MAX_HEADERS}"));
    }
    for (name, value) in &r.headers {
        let n = name.get_ref();
        if let Err(e) = valid_header(n) {
            c.problem(name.span(), format!("audit.otlp.headers.{n}: {e}"));
            continue;
        }
        let var = match value.get_ref() {
            toml::Value::Table(t) if t.len() == 1 => t.get("env").and_then(toml::Value::as_str),
            _ => None,
        };
        match var {
            Some(v) if valid_var(v) => {
                headers.insert(n.to_ascii_lowercase(), v.to_string());
            }
            Some(v) => c.problem(value.span(), format!("audit.otlp.headers.{n}: {v:?} is not a variable name")),
            None => c.problem(
                value.span(),
                format!(
                    "audit.otlp.headers.{n}: write {n} = {{ env = \"VAR\" }}; the value comes from warden's \
                     environment, never from the policy (it is a secret more often than not)"
                ),
            ),
        }
    }
    headers
}

/// Refuses an export whose secrets or trust a tool could reach: a header's
/// variable passed to a tool (`env.pass`), the `ca_file` inside a write grant.
pub(crate) fn check_reach(
    c: &mut Checker<'_>,
    raw: &Spanned<RawOtlp>,
    otlp: &Otlp,
    holders: &[(String, &crate::Grants)],
) {
    for (who, g) in holders {
        for (name, var) in &otlp.headers {
            if g.env_pass.contains(var) {
                c.problem(
                    raw.span(),
                    format!(
                        "audit.otlp.headers.{name}: {who} passes {var} (env.pass), so it would read the collector's \
                         secret; keep the variable out of every tool's env.pass"
                    ),
                );
            }
        }
        let Some(ca) = &otlp.ca_file else { continue };
        let writable = g.paths.iter().filter(|p| p.write).find_map(|p| match &p.path {
            crate::GrantPath::Fixed(dir) if ca.starts_with(dir) => Some(dir),
            _ => None,
        });
        if let Some(dir) = writable {
            c.problem(
                raw.get_ref().ca_file.as_ref().map_or(raw.span(), Spanned::span),
                format!(
                    "audit.otlp.ca_file: {who} may write {} (its grant {}), so it could make warden trust its own \
                     collector; keep the file out of every write grant",
                    ca.display(),
                    dir.display()
                ),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_follow_the_exporter_rules() {
        let u = parse_url("http://127.0.0.1:4318").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(with_signal(&u, "v1/logs").to_string(), "http://127.0.0.1:4318/v1/logs");
        let u = parse_url("https://otel.example.com/otlp/").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(with_signal(&u, "v1/traces").to_string(), "https://otel.example.com:443/otlp/v1/traces");
        let u = parse_url("http://[::1]:9/x").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((u.host.as_str(), u.port, u.path.as_str()), ("::1", 9, "/x"));
        for bad in ["ftp://x", "http://user:pw@x", "http://x:0", "http://x?a=1", "http://", "http://x:99999"] {
            assert!(parse_url(bad).is_err(), "{bad} accepted");
        }
    }

    fn compile(otlp: &str, tools: &str) -> Result<crate::Policy, String> {
        let text = format!("version = 1\n{tools}\n[audit.otlp]\n{otlp}\n");
        let dir = std::env::temp_dir();
        let ctx = crate::Context::from_env(&dir).map_err(|e| e.to_string())?;
        crate::Policy::from_text(&text, "p.toml", &dir, &ctx).map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_and_endpoints() {
        let p = compile("endpoint = \"http://127.0.0.1:4318\"", "").unwrap_or_else(|e| panic!("{e}"));
        let o = p.audit.otlp.unwrap_or_else(|| panic!("no otlp"));
        assert_eq!(o.logs.to_string(), "http://127.0.0.1:4318/v1/logs");
        assert_eq!(o.traces.to_string(), "http://127.0.0.1:4318/v1/traces");
        assert_eq!(
            (o.batch, o.queue, o.timeout, o.flush),
            (DEFAULT_BATCH, DEFAULT_QUEUE, DEFAULT_TIMEOUT, DEFAULT_FLUSH)
        );
        assert_eq!((o.spans, o.arguments, o.protocol), (false, Arguments::Shape, Protocol::HttpProtobuf));
        let p = compile("endpoint = \"https://c\"\nlogs_endpoint = \"https://c/custom\"", "")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(p.audit.otlp.map(|o| o.logs.to_string()), Some("https://c:443/custom".to_string()));
    }

    #[test]
    fn refuses_what_would_leak_or_mislead() {
        let e = "endpoint = \"http://c\"\n";
        for (otlp, tools, says) in [
            (format!("{e}headers = {{ authorization = \"Bearer x\" }}"), "", "never from the policy"),
            (format!("{e}headers = {{ content-type = {{ env = \"V\" }} }}"), "", "set by the exporter"),
            (format!("{e}protocol = \"grpc\""), "", "http/protobuf only"),
            (format!("{e}arguments = \"all\""), "", "\"shape\""),
            (format!("{e}batch = 100\nqueue = 10"), "", "at least batch"),
            (format!("{e}ca_file = \"/x.pem\""), "", "no certificate is checked"),
            (
                format!("{e}headers = {{ authorization = {{ env = \"OTEL_TOKEN\" }} }}"),
                "[tools.t]\nexec = [\"/bin/true\"]\nenv.pass = [\"OTEL_TOKEN\"]",
                "passes OTEL_TOKEN",
            ),
            (
                "endpoint = \"https://c\"\nca_file = \"/srv/w/ca.pem\"".to_string(),
                "[tools.t]\nexec = [\"/bin/true\"]\nfs.write = [\"/srv/w\"]",
                "could make warden trust",
            ),
        ] {
            match compile(&otlp, tools) {
                Ok(_) => panic!("accepted: {otlp}"),
                Err(m) => assert!(m.contains(says), "{otlp}: {m}"),
            }
        }
    }
}
