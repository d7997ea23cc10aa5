//! warden's builtin network tool, `http_fetch`, as a component.
//!
//! It reaches the network only through `wasi:http`, whose every request warden
//! checks against the tool's `net.connect` grants (the name resolved by warden,
//! private addresses refused without `net.allow_private`, the connection made
//! to the admitted address). Redirects are followed here, at most
//! [`MAX_REDIRECTS`], each a new request checked again by warden.

wit_bindgen::generate!({ world: "plugin", path: "../wit" });

use exports::warden::plugin::tool::{Guest, ToolError, ToolInfo};
use wasip2::http::outgoing_handler;
use wasip2::http::types::{ErrorCode, Fields, IncomingResponse, Method, OutgoingRequest, Scheme};
use wasip2::io::streams::StreamError;

/// Redirects followed (301, 302, 303, 307, 308), each checked again by warden.
const MAX_REDIRECTS: usize = 5;
/// The body bytes kept by default, and the most `max_bytes` may ask.
const MAX_BODY: u64 = 1 << 20;
/// The response headers kept, and the bytes of each value.
const MAX_HEADERS: usize = 100;
const MAX_HEADER_VALUE: usize = 4096;
/// The longest URL accepted.
const MAX_URL: usize = 8192;

const SCHEMA: &str = r#"{
  "type": "object",
  "properties": {
    "url": {"type": "string", "description": "An http:// or https:// URL; its host and port must be granted by net.connect", "maxLength": 8192},
    "method": {"enum": ["GET", "HEAD"], "default": "GET"},
    "max_bytes": {"type": "integer", "minimum": 0, "maximum": 1048576, "description": "Body bytes kept (default and most: 1 MiB); the rest is dropped and truncated is true"}
  },
  "required": ["url"],
  "additionalProperties": false
}"#;

struct Net;

impl Guest for Net {
    fn describe() -> Vec<ToolInfo> {
        vec![ToolInfo {
            name: "http_fetch".into(),
            description: "Fetch an http:// or https:// URL with GET or HEAD: the status, the response headers and the \
                          body as text (at most 1 MiB; redirects followed up to 5 times, each checked against the \
                          tool's net.connect grants)"
                .into(),
            input_schema: SCHEMA.into(),
        }]
    }

    fn call(name: String, args: String) -> Result<String, ToolError> {
        if name != "http_fetch" {
            return Err(ToolError::NotFound(format!("no tool named {name}")));
        }
        let args: serde_json::Value = serde_json::from_str(&args).map_err(|e| ToolError::InvalidArgs(e.to_string()))?;
        let url = args.get("url").and_then(|v| v.as_str()).unwrap_or_default().to_string();
        let head = match args.get("method").and_then(|v| v.as_str()).unwrap_or("GET") {
            "GET" => false,
            "HEAD" => true,
            other => return Err(ToolError::InvalidArgs(format!("method {other:?}: GET or HEAD"))),
        };
        let max = args.get("max_bytes").and_then(|v| v.as_u64()).unwrap_or(MAX_BODY).min(MAX_BODY);
        fetch(&url, head, max).map(|v| v.to_string())
    }
}

export!(Net);

/// A parsed `http(s)://authority/path?query` (no fragment).
#[derive(Debug, Clone, PartialEq)]
struct Url {
    https: bool,
    authority: String,
    path: String,
}

impl Url {
    fn parse(text: &str) -> Result<Url, String> {
        if text.len() > MAX_URL {
            return Err(format!("the URL is longer than {MAX_URL} bytes"));
        }
        let (scheme, rest) =
            text.split_once("://").ok_or_else(|| format!("{text:?} is not an http:// or https:// URL"))?;
        let https = match scheme.to_ascii_lowercase().as_str() {
            "https" => true,
            "http" => false,
            other => return Err(format!("scheme {other:?}: only http and https are fetched")),
        };
        let rest = rest.split('#').next().unwrap_or_default();
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, path) = rest.split_at(end);
        if authority.is_empty() {
            return Err(format!("{text:?} names no host"));
        }
        if authority.contains('@') {
            return Err("credentials in the URL are not supported".into());
        }
        if authority.chars().any(|c| c.is_whitespace() || c.is_control()) || path.chars().any(|c| c.is_control()) {
            return Err(format!("{text:?} contains spaces or control characters"));
        }
        let path = if path.is_empty() {
            "/".to_string()
        } else if path.starts_with('?') {
            format!("/{path}")
        } else {
            path.to_string()
        };
        Ok(Url { https, authority: authority.to_string(), path })
    }

    /// Where a `Location` header leads from here.
    fn join(&self, location: &str) -> Result<Url, String> {
        let location = location.trim();
        if location.contains("://") {
            return Url::parse(location);
        }
        let scheme = if self.https { "https" } else { "http" };
        if let Some(rest) = location.strip_prefix("//") {
            return Url::parse(&format!("{scheme}://{rest}"));
        }
        if location.starts_with('/') {
            return Url::parse(&format!("{scheme}://{}{location}", self.authority));
        }
        let dir = self.path.split('?').next().unwrap_or("/");
        let dir = &dir[..dir.rfind('/').map_or(0, |i| i + 1)];
        Url::parse(&format!("{scheme}://{}{dir}{location}", self.authority))
    }
}

impl std::fmt::Display for Url {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}://{}{}", if self.https { "https" } else { "http" }, self.authority, self.path)
    }
}

fn fetch(text: &str, head: bool, max: u64) -> Result<serde_json::Value, ToolError> {
    let mut url = Url::parse(text).map_err(ToolError::InvalidArgs)?;
    let mut redirects = 0;
    loop {
        let response = send(&url, head)?;
        let status = response.status();
        let headers = response.headers().entries();
        let location = headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("location"))
            .map(|(_, v)| String::from_utf8_lossy(v).into_owned());
        if matches!(status, 301 | 302 | 303 | 307 | 308)
            && let Some(location) = location
        {
            if redirects == MAX_REDIRECTS {
                return Err(ToolError::Failed(format!("{url}: more than {MAX_REDIRECTS} redirects")));
            }
            redirects += 1;
            url =
                url.join(&location).map_err(|e| ToolError::Failed(format!("{url}: redirect to {location:?}: {e}")))?;
            continue;
        }
        let mut map = serde_json::Map::new();
        for (k, v) in headers.iter() {
            if map.len() == MAX_HEADERS && !map.contains_key(k) {
                continue;
            }
            let mut value = String::from_utf8_lossy(&v[..v.len().min(MAX_HEADER_VALUE)]).into_owned();
            if let Some(serde_json::Value::String(prev)) = map.get(k) {
                value = format!("{prev}, {value}");
            }
            map.insert(k.clone(), value.into());
        }
        let (body, truncated) = if head { (Vec::new(), false) } else { read_body(&url, response, max)? };
        return Ok(serde_json::json!({
            "url": url.to_string(),
            "status": status,
            "headers": map,
            "body": String::from_utf8_lossy(&body),
            "truncated": truncated,
        }));
    }
}

fn send(url: &Url, head: bool) -> Result<IncomingResponse, ToolError> {
    let failed = |what: String| ToolError::Failed(format!("{url}: {what}"));
    let headers = Fields::from_list(&[
        ("user-agent".to_string(), b"warden-http_fetch".to_vec()),
        ("accept".to_string(), b"*/*".to_vec()),
    ])
    .map_err(|e| failed(format!("{e:?}")))?;
    let request = OutgoingRequest::new(headers);
    let method = if head { Method::Head } else { Method::Get };
    let scheme = if url.https { Scheme::Https } else { Scheme::Http };
    request.set_method(&method).map_err(|()| failed("bad method".into()))?;
    request.set_scheme(Some(&scheme)).map_err(|()| failed("bad scheme".into()))?;
    request.set_authority(Some(&url.authority)).map_err(|()| ToolError::InvalidArgs(format!("{url}: bad host")))?;
    request.set_path_with_query(Some(&url.path)).map_err(|()| ToolError::InvalidArgs(format!("{url}: bad path")))?;
    let future = outgoing_handler::handle(request, None).map_err(|e| error(url, e))?;
    future.subscribe().block();
    match future.get() {
        Some(Ok(Ok(response))) => Ok(response),
        Some(Ok(Err(e))) => Err(error(url, e)),
        Some(Err(())) | None => Err(failed("no response".into())),
    }
}

fn error(url: &Url, e: ErrorCode) -> ToolError {
    match e {
        ErrorCode::HttpRequestDenied => {
            ToolError::PermissionDenied(format!("{url}: the request was refused by warden's network policy"))
        }
        ErrorCode::DnsError(p) => {
            ToolError::Failed(format!("{url}: {}", p.rcode.unwrap_or_else(|| "DNS error".into())))
        }
        other => ToolError::Failed(format!("{url}: {other:?}")),
    }
}

/// The body, at most `max` bytes, and whether more was there.
fn read_body(url: &Url, response: IncomingResponse, max: u64) -> Result<(Vec<u8>, bool), ToolError> {
    let failed = |what: String| ToolError::Failed(format!("{url}: {what}"));
    let body = response.consume().map_err(|()| failed("no body".into()))?;
    let stream = body.stream().map_err(|()| failed("no body stream".into()))?;
    let mut out = Vec::new();
    let mut truncated = false;
    loop {
        let want = (max + 1).saturating_sub(out.len() as u64).min(64 << 10);
        if want == 0 {
            truncated = true;
            break;
        }
        match stream.blocking_read(want) {
            Ok(chunk) => out.extend_from_slice(&chunk),
            Err(StreamError::Closed) => break,
            Err(StreamError::LastOperationFailed(e)) => {
                match wasip2::http::types::http_error_code(&e) {
                    // warden's bound on a response body: what was read is kept.
                    Some(ErrorCode::HttpResponseBodySize(_)) => {
                        truncated = true;
                        break;
                    }
                    Some(code) => return Err(failed(format!("reading the body: {code:?}"))),
                    None => return Err(failed(format!("reading the body: {}", e.to_debug_string()))),
                }
            }
        }
    }
    if out.len() as u64 > max {
        out.truncate(max as usize);
        truncated = true;
    }
    drop(stream);
    drop(body);
    Ok((out, truncated))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_and_join() {
        let u = Url::parse("https://example.com:8443?q=1#frag").unwrap();
        assert_eq!(u, Url { https: true, authority: "example.com:8443".into(), path: "/?q=1".into() });
        assert!(Url::parse("ftp://x/").is_err());
        assert!(Url::parse("http://user:pw@x/").is_err());
        let base = Url::parse("http://h/a/b?x").unwrap();
        assert_eq!(base.join("/c").unwrap().to_string(), "http://h/c");
        assert_eq!(base.join("c").unwrap().to_string(), "http://h/a/c");
        assert_eq!(base.join("//o/p").unwrap().to_string(), "http://o/p");
        assert_eq!(base.join("https://o:1/").unwrap().to_string(), "https://o:1/");
    }
}
