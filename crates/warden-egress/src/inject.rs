//! One intercepted request made ready for the real server ([`plan`]): the
//! placeholder replaced by the real value where a bind covering the request
//! says (`Authorization: Bearer`, inside a decoded `Authorization: Basic`, a
//! named header, a query parameter, and the body only with `body = true`),
//! and every placeholder left anywhere else counted as misdirected. The
//! request's path is judged as sent: one that could be read two ways
//! (`%2F`, `%2E`, `..`, `//`, `\`) matches no bind that names paths.

use std::sync::Arc;

use base64::Engine;
use warden_policy::{Bind, Inject};

use crate::http::{Answer, Framing, HOP_BY_HOP, Head, bad, framing};
use crate::scan::Replacer;
use crate::tunnel::Ticket;
use crate::vault::Held;

/// What goes upstream for one request.
pub(crate) struct Plan {
    /// The head, origin-form, placeholders replaced where bound.
    pub(crate) head: Vec<u8>,
    /// Replaces placeholders in the body (`body = true` binds).
    pub(crate) body: Option<Replacer>,
    /// The body goes re-framed as chunked (a replacement changes its length).
    pub(crate) chunked_body: bool,
    /// A `HEAD` request: its response has no body.
    pub(crate) head_method: bool,
    /// The program speaks HTTP/1.1 (a response body may be chunked to it).
    pub(crate) http11: bool,
    /// The connection ends after this exchange.
    pub(crate) close: bool,
}

/// Every occurrence of `from` in `v` replaced by `to`, and how many.
fn swap(v: &[u8], from: &[u8], to: &[u8]) -> (Vec<u8>, usize) {
    if from.is_empty() {
        return (v.to_vec(), 0);
    }
    let mut out = Vec::with_capacity(v.len());
    let (mut i, mut n) = (0, 0);
    while i < v.len() {
        if v[i..].starts_with(from) {
            out.extend_from_slice(to);
            i += from.len();
            n += 1;
        } else {
            out.push(v[i]);
            i += 1;
        }
    }
    (out, n)
}

fn count(v: &[u8], pat: &[u8]) -> usize {
    swap(v, pat, b"").1
}

/// The value after a case-insensitive `scheme ` prefix.
fn after_scheme<'a>(v: &'a [u8], scheme: &str) -> Option<&'a [u8]> {
    let n = scheme.len();
    (v.len() > n && v[..n].eq_ignore_ascii_case(scheme.as_bytes()) && v[n] == b' ').then(|| v[n + 1..].trim_ascii())
}

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::STANDARD
}

/// Applies one bind of `h` to the request; returns the substitutions made.
fn apply(b: &Bind, h: &Held, headers: &mut Vec<(String, Vec<u8>)>, target: &mut String) -> usize {
    let (ph, real) = (h.placeholder.as_bytes(), h.real().as_bytes());
    let mut n = 0;
    let header = match &b.inject {
        Inject::Bearer | Inject::Basic => "authorization",
        Inject::Header(name) => name.as_str(),
        Inject::Query(param) => {
            let Some((path, query)) = target.split_once('?') else { return 0 };
            let mut parts = Vec::new();
            for pair in query.split('&') {
                match pair.split_once('=') {
                    Some((k, v)) if k == param => {
                        let (nv, k2) = swap(v.as_bytes(), ph, crate::scan::percent(h.real(), true).as_bytes());
                        n += k2;
                        parts.push(format!("{k}={}", String::from_utf8_lossy(&nv)));
                    }
                    _ => parts.push(pair.to_string()),
                }
            }
            *target = format!("{path}?{}", parts.join("&"));
            return n;
        }
    };
    let mut present = false;
    for (name, value) in headers.iter_mut().filter(|(name, _)| name.eq_ignore_ascii_case(header)) {
        present = true;
        let _ = name;
        match &b.inject {
            Inject::Bearer => {
                if let Some(token) = after_scheme(value, "bearer") {
                    let (t, k) = swap(token, ph, real);
                    if k > 0 {
                        *value = [b"Bearer ".as_slice(), &t].concat();
                        n += k;
                    }
                }
            }
            Inject::Basic => {
                if let Some(decoded) = after_scheme(value, "basic").and_then(|t| b64().decode(t).ok()) {
                    let (d, k) = swap(&decoded, ph, real);
                    if k > 0 {
                        *value = format!("Basic {}", b64().encode(d)).into_bytes();
                        n += k;
                    }
                }
            }
            _ => {
                let (v, k) = swap(value, ph, real);
                *value = v;
                n += k;
            }
        }
    }
    if b.always && !present {
        let value = match &b.inject {
            Inject::Bearer => format!("Bearer {}", h.real()),
            Inject::Basic => format!("Basic {}", b64().encode(format!("{}:{}", b.user, h.real()))),
            _ => h.real().to_string(),
        };
        let name = if header == "authorization" { "Authorization" } else { header };
        headers.push((name.to_string(), value.into_bytes()));
        n += 1;
    }
    n
}

/// A path that could be read two ways by the server.
fn ambiguous(path: &str) -> bool {
    let lower = path.to_ascii_lowercase();
    lower.contains("%2f")
        || lower.contains("%2e")
        || lower.contains("%5c")
        // Decoded twice by some servers (`%252e`), or a matrix parameter
        // that Tomcat, Jetty and Spring drop (`/..;/`).
        || lower.contains("%25")
        || path.contains(';')
        || !path.is_ascii()
        || path.contains('\\')
        || path.contains("//")
        || path.split('/').any(|s| s == "." || s == "..")
}

/// Headers and a query parameter through which frameworks take another
/// method or path than the request line's: a bind that names methods or
/// paths is judged on the request line, so they never go with its value.
const OVERRIDES: [&str; 8] = [
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
    "x-original-url",
    "x-rewrite-url",
    "x-original-method",
    "forwarded",
    "x-forwarded-prefix",
];

/// Placeholders of `h` left in the request head: raw, or inside a Basic header.
pub(crate) fn left_over(h: &Held, target: &str, headers: &[(String, Vec<u8>)]) -> usize {
    let ph = h.placeholder.as_bytes();
    let mut n = count(target.as_bytes(), ph);
    for (name, value) in headers {
        n += count(value, ph);
        if name.eq_ignore_ascii_case("authorization")
            && let Some(d) = after_scheme(value, "basic").and_then(|t| b64().decode(t).ok())
        {
            n += count(&d, ph);
        }
    }
    n
}

/// Makes `head` ready for the real server (see the module's text).
pub(crate) fn plan(head: &Head, t: &Ticket, here: &[Arc<Held>], all: &[Arc<Held>]) -> Result<Plan, Answer> {
    let mut target = crate::intercept::check_target(head, &t.host, t.port)?;
    let body_framing = framing(head)?;
    let path = target.split('?').next().unwrap_or("/").to_string();
    let query = target.split_once('?').map_or("", |(_, q)| q);
    let unclear = ambiguous(&path) || query.split('&').any(|p| p.starts_with("_method="));
    let mut headers = head.headers.clone();
    let mut uses: Vec<(&str, usize, usize)> = Vec::new();
    let mut body_pairs = Vec::new();
    let mut narrowed = false;
    for h in here {
        let mut n = 0;
        for b in h.binds.iter().filter(|b| b.covers(&t.host, t.port, &head.method, &path)) {
            let narrow = !b.paths.is_empty() || !b.methods.is_empty();
            if unclear && narrow {
                continue;
            }
            narrowed |= narrow;
            n += apply(b, h, &mut headers, &mut target);
            if b.body {
                body_pairs.push((h.placeholder.as_bytes().to_vec(), h.real().as_bytes().to_vec()));
            }
        }
        uses.push((&h.name, n, 0));
    }
    for h in all {
        let left = left_over(h, &target, &headers);
        match uses.iter_mut().find(|u| u.0 == h.name) {
            Some(u) => u.2 += left,
            None => uses.push((&h.name, 0, left)),
        }
    }
    for (name, substituted, misdirected) in &uses {
        if *substituted > 0 || *misdirected > 0 {
            t.use_credential(name, *substituted as u64, *misdirected as u64);
        }
    }
    if uses.iter().any(|u| u.1 > 0) {
        // A response in slices (Range) would let an echoing server return the
        // value in pieces too short to be recognised.
        headers.retain(|(n, _)| !n.eq_ignore_ascii_case("range") && !n.eq_ignore_ascii_case("if-range"));
        if narrowed {
            headers.retain(|(n, _)| !OVERRIDES.iter().any(|o| n.eq_ignore_ascii_case(o)));
        }
    }
    if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("host")) {
        let host = if t.port == 443 { t.host.clone() } else { format!("{}:{}", t.host, t.port) };
        headers.insert(0, ("Host".into(), host.into_bytes()));
    }
    body_pairs.sort();
    body_pairs.dedup();
    let body =
        match (!body_pairs.is_empty() && !matches!(body_framing, Framing::None)).then(|| Replacer::new(body_pairs)) {
            None => None,
            Some(Ok(r)) => Some(r),
            Some(Err(e)) => return Err(Answer { status: 502, reason: e }),
        };
    let http11 = head.version == "HTTP/1.1";
    let chunked_body = match (&body_framing, &body) {
        (Framing::Chunked, _) => true,
        (Framing::Length(_), Some(r)) if !r.same_length() => {
            if !http11 {
                return Err(bad("body substitution that changes the length needs HTTP/1.1 (chunked)"));
            }
            true
        }
        _ => false,
    };
    let lists_close =
        head.all("connection").any(|v| v.split(|&b| b == b',').any(|x| x.trim_ascii().eq_ignore_ascii_case(b"close")));
    let keep_alive = head
        .all("connection")
        .any(|v| v.split(|&b| b == b',').any(|x| x.trim_ascii().eq_ignore_ascii_case(b"keep-alive")));
    let close = lists_close || (!http11 && !keep_alive);
    let out = upstream_head(head, &target, &headers, chunked_body, close)?;
    Ok(Plan { head: out, body, chunked_body, head_method: head.method == "HEAD", http11, close })
}

/// The head sent upstream: origin-form, hop-by-hop headers and what
/// `Connection` lists dropped, `Accept-Encoding: identity` (so the response
/// can be scanned), framing as decided.
fn upstream_head(
    head: &Head,
    target: &str,
    headers: &[(String, Vec<u8>)],
    chunked: bool,
    close: bool,
) -> Result<Vec<u8>, Answer> {
    let mut listed: Vec<String> = Vec::new();
    for v in head.all("connection") {
        for token in v.split(|&b| b == b',') {
            let token = String::from_utf8_lossy(token.trim_ascii()).to_ascii_lowercase();
            if matches!(token.as_str(), "host" | "content-length" | "transfer-encoding" | "authorization") {
                return Err(bad(format!("Connection may not name {token}")));
            }
            listed.push(token);
        }
    }
    let mut out = format!("{} {} HTTP/1.1\r\n", head.method, target).into_bytes();
    let mut length_written = false;
    for (name, value) in headers {
        let lower = name.to_ascii_lowercase();
        let framing_header = lower == "content-length" || lower == "transfer-encoding";
        if HOP_BY_HOP.contains(&lower.as_str())
            || listed.contains(&lower)
            || lower == "accept-encoding"
            || lower == "expect" && head.version != "HTTP/1.1"
            || (framing_header && chunked)
            || (lower == "content-length" && std::mem::replace(&mut length_written, true))
        {
            continue;
        }
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"Accept-Encoding: identity\r\n");
    if chunked {
        out.extend_from_slice(b"Transfer-Encoding: chunked\r\n");
    }
    if close {
        out.extend_from_slice(b"Connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn ambiguous_paths_are_told_apart() {
        for p in [
            "/a/%2F/b",
            "/a/../b",
            "/a//b",
            "/a/./b",
            "/%2e%2e/x",
            "/a\\b",
            "/..",
            "/v1/..;/admin",
            "/v1/%252e%252e/x",
            "/v1/é",
        ] {
            assert!(ambiguous(p), "{p}");
        }
        for p in ["/repos/acme/x", "/", "/v1/a.b/c..d"] {
            assert!(!ambiguous(p), "{p}");
        }
    }

    #[test]
    fn swap_and_percent() {
        assert_eq!(swap(b"aXXbXX", b"XX", b"yyy"), (b"ayyybyyy".to_vec(), 2));
        assert_eq!(crate::scan::percent("a b/c~", true), "a%20b%2Fc~");
    }
}
