//! HTTP `CONNECT` and plain forwarding for the egress proxy (`handle`): a
//! strictly parsed head (at most [`MAX_HEAD`] bytes and [`MAX_HEADERS`] lines,
//! within [`HEAD_TIMEOUT`]), a tunnel or one forwarded request per connection
//! with unambiguous framing, and refusals as `403`/`400`/`502`/`503` whose text
//! names the key to change. The rules are in docs/security.md, "The egress proxy".

use std::sync::atomic::Ordering;

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use crate::rules::ip_literal;
use crate::tunnel::{Ctx, Failure, Ticket, answer_and_close, open, pipe, respond};
use crate::{HEAD_TIMEOUT, MAX_BYTES, MAX_HEAD, MAX_HEADERS};

/// The longest chunk-size or trailer line of a chunked body.
const MAX_CHUNK_LINE: usize = 4096;

/// A malformed request, or a refusal before any connection: status and text.
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) reason: String,
}

pub(crate) fn bad(reason: impl Into<String>) -> Answer {
    Answer { status: 400, reason: reason.into() }
}

/// The response warden writes instead of the destination's.
pub(crate) fn response(status: u16, reason: &str) -> Vec<u8> {
    let phrase = match status {
        400 => "Bad Request",
        403 => "Forbidden",
        408 => "Request Timeout",
        421 => "Misdirected Request",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "Error",
    };
    let body = format!("warden egress proxy: {reason}\n");
    let refusal = if status == 403 { "X-Warden-Refusal: 1\r\n" } else { "" };
    format!(
        "HTTP/1.1 {status} {phrase}\r\nContent-Type: text/plain; charset=utf-8\r\n{refusal}Connection: close\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// A parsed request head.
pub(crate) struct Head {
    pub(crate) method: String,
    pub(crate) target: String,
    pub(crate) version: String,
    /// Names as sent; values with surrounding whitespace trimmed.
    pub(crate) headers: Vec<(String, Vec<u8>)>,
}

impl Head {
    /// The values of header `name` (any case).
    pub(crate) fn all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.headers.iter().filter(move |(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_slice())
    }
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Reads the head: up to and including the empty line. Returns it and the
/// bytes that came after it.
async fn read_head(stream: &mut TcpStream) -> Result<(Vec<u8>, Vec<u8>), Answer> {
    let mut buf = Vec::with_capacity(4096);
    let read = async {
        let mut chunk = vec![0u8; 8192];
        loop {
            if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let early = buf.split_off(end + 4);
                return Ok((std::mem::take(&mut buf), early));
            }
            if buf.windows(2).any(|w| w == b"\n\n") {
                return Err(bad("lines must end in CRLF (a bare LF in the request head)"));
            }
            if buf.len() > MAX_HEAD {
                return Err(bad(format!("the request head is longer than {} KiB", MAX_HEAD / 1024)));
            }
            let room = (MAX_HEAD + 4 - buf.len()).min(chunk.len());
            match stream.read(&mut chunk[..room]).await {
                Ok(0) => return Err(bad("the connection closed before the request head ended")),
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                Err(e) => return Err(bad(format!("reading the request failed: {e}"))),
            }
        }
    };
    match tokio::time::timeout(HEAD_TIMEOUT, read).await {
        Ok(r) => r,
        Err(_) => Err(Answer {
            status: 408,
            reason: format!("the request head took longer than {}s", HEAD_TIMEOUT.as_secs()),
        }),
    }
}

/// Parses a head that ends in CRLF CRLF.
pub(crate) fn parse_head(raw: &[u8]) -> Result<Head, Answer> {
    let body = raw.strip_suffix(b"\r\n\r\n").unwrap_or(raw);
    if split_crlf(body).any(|l| l.contains(&b'\n')) {
        return Err(bad("lines must end in CRLF (a bare LF in the request head)"));
    }
    if split_crlf(body).any(|l| l.contains(&b'\r')) {
        return Err(bad("a bare CR in the request head"));
    }
    let mut lines = split_crlf(body);
    let line = lines.next().unwrap_or_default();
    let line = std::str::from_utf8(line).map_err(|_| bad("the request line is not text"))?;
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) = (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(bad(format!("malformed request line {:?}", truncate(line))));
    };
    if method.is_empty() || !method.bytes().all(is_tchar) {
        return Err(bad(format!("malformed method {:?}", truncate(method))));
    }
    if target.is_empty() || target.bytes().any(|b| b <= b' ' || b == 0x7f) {
        return Err(bad("malformed request target"));
    }
    if version != "HTTP/1.1" && version != "HTTP/1.0" {
        return Err(bad(format!("HTTP/1.0 or HTTP/1.1 only, not {:?}", truncate(version))));
    }
    let mut headers = Vec::new();
    for line in lines {
        if headers.len() == MAX_HEADERS {
            return Err(bad(format!("more than {MAX_HEADERS} header lines")));
        }
        if line.first().is_some_and(|&b| b == b' ' || b == b'\t') {
            return Err(bad("obsolete line folding (a header line starting with whitespace)"));
        }
        let colon = line.iter().position(|&b| b == b':').ok_or_else(|| bad("a header line without a colon"))?;
        let (name, value) = (&line[..colon], &line[colon + 1..]);
        if name.is_empty() || !name.iter().all(|&b| is_tchar(b)) {
            return Err(bad(format!(
                "malformed header name {:?} (no spaces before the colon)",
                truncate(&String::from_utf8_lossy(name))
            )));
        }
        let value = value.trim_ascii();
        if value.iter().any(|&b| (b < b' ' && b != b'\t') || b == 0x7f) {
            return Err(bad("a control character in a header value"));
        }
        headers.push((String::from_utf8_lossy(name).into_owned(), value.to_vec()));
    }
    Ok(Head { method: method.into(), target: target.into(), version: version.into(), headers })
}

/// The lines of `s` between CRLFs.
fn split_crlf(s: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = Some(s);
    std::iter::from_fn(move || {
        let r = rest?;
        match r.windows(2).position(|w| w == b"\r\n") {
            Some(i) => {
                rest = Some(&r[i + 2..]);
                Some(&r[..i])
            }
            None => {
                rest = None;
                Some(r)
            }
        }
    })
}

fn truncate(s: &str) -> &str {
    match s.char_indices().nth(80) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// `host[:port]` or `[v6][:port]`.
pub(crate) fn parse_authority(s: &str) -> Result<(String, Option<u16>), String> {
    let bracketed = s.starts_with('[');
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let (h, after) = rest.split_once(']').ok_or_else(|| format!("malformed address in {:?}", truncate(s)))?;
        if !matches!(ip_literal(h), Some(std::net::IpAddr::V6(_))) {
            return Err(format!("{:?} is not an IPv6 address", truncate(h)));
        }
        match after {
            "" => (h, None),
            p => (h, Some(p.strip_prefix(':').ok_or_else(|| format!("malformed authority {:?}", truncate(s)))?)),
        }
    } else {
        match s.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (s, None),
        }
    };
    if host.is_empty() || host.contains(['@', '/', '?', '#', '%', '\\']) || (!bracketed && host.contains(':')) {
        return Err(format!("malformed host in {:?}", truncate(s)));
    }
    let port = match port {
        None => None,
        Some(p) => {
            let ok = !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit());
            match p.parse::<u16>() {
                Ok(n) if ok && n > 0 => Some(n),
                _ => return Err(format!("malformed port in {:?}", truncate(s))),
            }
        }
    };
    Ok((host.to_string(), port))
}

/// Whether two hosts are the same: names without case or a trailing dot,
/// addresses by value.
pub(crate) fn same_host(a: &str, b: &str) -> bool {
    match (ip_literal(a), ip_literal(b)) {
        (Some(x), Some(y)) => x == y,
        (None, None) => a.trim_end_matches('.').eq_ignore_ascii_case(b.trim_end_matches('.')),
        _ => false,
    }
}

/// Checks the one `Host` header against the target; `required` for forwarding.
fn check_host(head: &Head, host: &str, port: u16, default_port: u16, required: bool) -> Result<(), Answer> {
    let mut hosts = head.all("host");
    let Some(value) = hosts.next() else {
        return if required { Err(bad("the request has no Host header")) } else { Ok(()) };
    };
    if hosts.next().is_some() {
        return Err(bad("the request has more than one Host header"));
    }
    let value = std::str::from_utf8(value).map_err(|_| bad("the Host header is not text"))?;
    let (h, p) = parse_authority(value).map_err(|e| bad(format!("the Host header: {e}")))?;
    let p = p.unwrap_or(default_port);
    if !same_host(&h, host) || p != port {
        let target = if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") };
        return Err(bad(format!(
            "the Host header ({}) does not agree with the request's target ({target})",
            truncate(value)
        )));
    }
    Ok(())
}

/// Serves one HTTP connection.
pub(crate) async fn handle(mut stream: TcpStream, ctx: &Ctx, busy: bool) {
    let mut ticket = Ticket::new(ctx, "http");
    let parsed = match read_head(&mut stream).await {
        Ok((raw, early)) => parse_head(&raw).map(|h| (h, early)),
        Err(a) => Err(a),
    };
    let (head, early) = match parsed {
        Ok(x) => x,
        Err(a) => return refuse(stream, &mut ticket, a).await,
    };
    if head.method.eq_ignore_ascii_case("CONNECT") {
        ticket.via = "connect";
        tunnel(stream, ctx, &mut ticket, &head, &early, busy).await;
    } else if head.target.starts_with('/') || head.target == "*" {
        let why = "warden's egress proxy takes only proxy requests (CONNECT host:port, or a request for an absolute \
                   http:// URL); it serves nothing itself";
        refuse(stream, &mut ticket, bad(why)).await;
    } else {
        forward(stream, ctx, &mut ticket, &head, early, busy).await;
    }
}

/// Writes `a` as the response, records it as the reason, closes.
async fn refuse(stream: TcpStream, ticket: &mut Ticket, a: Answer) {
    ticket.refuse(a.reason.clone());
    answer_and_close(stream, &response(a.status, &a.reason)).await;
}

/// The response for a failed [`open`].
fn failed(f: &Failure, ticket: &Ticket) -> Answer {
    let status = match f {
        Failure::Busy => 503,
        Failure::Policy => 403,
        Failure::Unresolved | Failure::Connect(_) => 502,
    };
    Answer { status, reason: ticket.reason.clone() }
}

/// `CONNECT host:port`.
async fn tunnel(mut stream: TcpStream, ctx: &Ctx, ticket: &mut Ticket, head: &Head, early: &[u8], busy: bool) {
    let target = match parse_authority(&head.target) {
        Ok((h, Some(p))) => (h, p),
        Ok((_, None)) => return refuse(stream, ticket, bad("CONNECT needs host:port")).await,
        Err(e) => return refuse(stream, ticket, bad(format!("CONNECT target: {e}"))).await,
    };
    (ticket.host, ticket.port) = target;
    if let Err(a) = check_host(head, &ticket.host, ticket.port, 443, false) {
        return refuse(stream, ticket, a).await;
    }
    let upstream = match open(ctx, ticket, busy).await {
        Ok(s) => s,
        Err(f) => {
            let a = failed(&f, ticket);
            return answer_and_close(stream, &response(a.status, &a.reason)).await;
        }
    };
    let here = crate::intercept::bound_here(ctx, &ticket.host, ticket.port);
    if !here.is_empty() && !early.is_empty() {
        let why = "the program sent bytes before the tunnel was established, toward a host a credential binds";
        return refuse(stream, ticket, bad(why)).await;
    }
    if let Err(e) = stream.write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n").await {
        ticket.note(&format!("ended: {e}"));
        return;
    }
    if !here.is_empty() {
        ticket.intercepted = true;
        if let Some(note) = crate::intercept::run(stream, upstream, ctx, ticket, &here).await {
            ticket.note(&note);
        }
        return;
    }
    if let Some(note) = pipe(ctx, ticket, stream, upstream, early).await {
        ticket.note(&note);
    }
}

/// How the request's body is framed.
pub(crate) enum Framing {
    None,
    Length(u64),
    Chunked,
}

/// The body's framing, refusing every ambiguity a smuggler could use.
pub(crate) fn framing(head: &Head) -> Result<Framing, Answer> {
    let te: Vec<&[u8]> = head.all("transfer-encoding").collect();
    let mut lengths = Vec::new();
    for v in head.all("content-length") {
        for part in v.split(|&b| b == b',') {
            let part = part.trim_ascii();
            if part.is_empty() || part.len() > 19 || !part.iter().all(u8::is_ascii_digit) {
                return Err(bad("malformed Content-Length"));
            }
            let n: u64 = std::str::from_utf8(part)
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| bad("malformed Content-Length"))?;
            lengths.push(n);
        }
    }
    if !te.is_empty() && !lengths.is_empty() {
        return Err(bad("the request has both Content-Length and Transfer-Encoding (request smuggling)"));
    }
    if !te.is_empty() {
        if te.len() > 1 || !te[0].eq_ignore_ascii_case(b"chunked") {
            return Err(bad("Transfer-Encoding other than exactly \"chunked\" is refused (request smuggling)"));
        }
        if head.version == "HTTP/1.0" {
            return Err(bad("Transfer-Encoding in an HTTP/1.0 request"));
        }
        return Ok(Framing::Chunked);
    }
    match lengths.split_first() {
        None => Ok(Framing::None),
        Some((first, rest)) if rest.iter().all(|n| n == first) => Ok(Framing::Length(*first)),
        Some(_) => Err(bad("differing Content-Length values (request smuggling)")),
    }
}

/// Headers that describe one hop and are not forwarded.
pub(crate) const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "proxy-connection",
    "keep-alive",
    "te",
    "trailer",
    "upgrade",
    "proxy-authorization",
    "proxy-authenticate",
    "http2-settings",
];

/// The head sent upstream: origin-form, no hop-by-hop headers, one
/// `Content-Length`, `Connection: close`.
fn upstream_head(head: &Head, path: &str) -> Result<Vec<u8>, Answer> {
    let mut listed: Vec<String> = Vec::new();
    for v in head.all("connection") {
        for token in v.split(|&b| b == b',') {
            let token = String::from_utf8_lossy(token.trim_ascii()).to_ascii_lowercase();
            if matches!(token.as_str(), "host" | "content-length" | "transfer-encoding") {
                return Err(bad(format!("Connection may not name {token} (request smuggling)")));
            }
            if !token.is_empty() {
                listed.push(token);
            }
        }
    }
    let mut out = format!("{} {} {}\r\n", head.method, path, head.version).into_bytes();
    let mut length_written = false;
    for (name, value) in &head.headers {
        let lower = name.to_ascii_lowercase();
        if HOP_BY_HOP.contains(&lower.as_str()) || listed.contains(&lower) {
            continue;
        }
        if lower == "content-length" {
            if length_written {
                continue;
            }
            length_written = true;
        }
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"Connection: close\r\n\r\n");
    Ok(out)
}

/// `http://host[:port]/path` → host, port, origin-form path.
fn parse_url(target: &str) -> Result<(String, u16, String), Answer> {
    let lower = target.get(..8).unwrap_or(target).to_ascii_lowercase();
    let Some(rest) = lower.starts_with("http://").then(|| &target[7..]) else {
        if lower.starts_with("https://") {
            return Err(bad("https:// URLs go through CONNECT (the client must tunnel them)"));
        }
        return Err(bad(format!("only http:// URLs are forwarded, not {:?}", truncate(target))));
    };
    if rest.contains('#') {
        return Err(bad("a fragment in the request target"));
    }
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    let (host, port) = parse_authority(authority).map_err(|e| bad(format!("the URL: {e}")))?;
    let path = match path {
        "" => "/".to_string(),
        p if p.starts_with('?') => format!("/{p}"),
        p => p.to_string(),
    };
    Ok((host, port.unwrap_or(80), path))
}

/// Plain forwarding of one absolute-form request.
async fn forward(stream: TcpStream, ctx: &Ctx, ticket: &mut Ticket, head: &Head, early: Vec<u8>, busy: bool) {
    let (host, port, path) = match parse_url(&head.target) {
        Ok(x) => x,
        Err(a) => return refuse(stream, ticket, a).await,
    };
    (ticket.host, ticket.port) = (host, port);
    crate::intercept::plain_misdirected(ctx, ticket, head);
    let prepared = check_host(head, &ticket.host, port, 80, true)
        .and_then(|()| framing(head))
        .and_then(|f| upstream_head(head, &path).map(|h| (f, h)));
    let (framing, out_head) = match prepared {
        Ok(x) => x,
        Err(a) => return refuse(stream, ticket, a).await,
    };
    let mut upstream = match open(ctx, ticket, busy).await {
        Ok(s) => s,
        Err(f) => {
            let a = failed(&f, ticket);
            return answer_and_close(stream, &response(a.status, &a.reason)).await;
        }
    };
    let mut stream = stream;
    let note = {
        let (cr, mut cw) = stream.split();
        let (mut ur, mut uw) = upstream.split();
        let t: &Ticket = ticket;
        let send = async move {
            let mut body = BufReader::new(std::io::Cursor::new(early).chain(cr));
            send_up(ctx, t, &mut uw, &out_head).await?;
            match framing {
                Framing::None => Ok(()),
                Framing::Length(n) => copy_exact(ctx, t, &mut body, &mut uw, n).await,
                Framing::Chunked => copy_chunked(ctx, t, &mut body, &mut uw).await,
            }?;
            uw.flush().await.map_err(|e| format!("writing upstream failed: {e}"))
        };
        respond(ctx, t, send, &mut ur, &mut cw).await
    };
    if let Some(note) = note {
        ticket.note(&note);
    }
    // Let the client read the response before the socket closes.
    answer_and_close(stream, b"").await;
}

/// Writes `bytes` upstream, counting them against the ticket and the budget.
async fn send_up(ctx: &Ctx, t: &Ticket, w: &mut (impl AsyncWrite + Unpin), bytes: &[u8]) -> Result<(), String> {
    let n = bytes.len() as u64;
    if ctx.total_up.fetch_add(n, Ordering::Relaxed) + n > MAX_BYTES {
        return Err(format!("the proxy's bound of {} GiB each way is spent", MAX_BYTES >> 30));
    }
    w.write_all(bytes).await.map_err(|e| format!("writing upstream failed: {e}"))?;
    t.up.fetch_add(n, Ordering::Relaxed);
    t.touch();
    Ok(())
}

/// Forwards exactly `n` bytes of body.
async fn copy_exact(
    ctx: &Ctx,
    t: &Ticket,
    r: &mut (impl AsyncBufRead + Unpin),
    w: &mut (impl AsyncWrite + Unpin),
    mut n: u64,
) -> Result<(), String> {
    while n > 0 {
        let buf = r.fill_buf().await.map_err(|e| format!("reading the request body failed: {e}"))?;
        if buf.is_empty() {
            return Err("the client closed before the request body ended".into());
        }
        let take = buf.len().min(usize::try_from(n).unwrap_or(usize::MAX));
        let chunk = buf[..take].to_vec();
        r.consume(take);
        send_up(ctx, t, w, &chunk).await?;
        n -= take as u64;
    }
    Ok(())
}

/// One line of a chunked body, without its CRLF; a bare LF is refused.
async fn chunk_line(r: &mut (impl AsyncBufRead + Unpin)) -> Result<Vec<u8>, String> {
    let mut line = Vec::new();
    let limited = &mut (&mut *r).take(MAX_CHUNK_LINE as u64 + 1);
    limited.read_until(b'\n', &mut line).await.map_err(|e| format!("reading the request body failed: {e}"))?;
    match line.strip_suffix(b"\r\n") {
        Some(l) if !l.contains(&b'\r') => Ok(l.to_vec()),
        _ if line.len() > MAX_CHUNK_LINE => Err("a chunk line longer than 4 KiB".into()),
        _ if !line.ends_with(b"\n") => Err("the client closed before the request body ended".into()),
        _ => Err("a chunked body line not ending in CRLF".into()),
    }
}

/// Forwards a chunked body to its end, re-framed: sizes in lower-case hex,
/// chunk extensions and trailers dropped.
async fn copy_chunked(
    ctx: &Ctx,
    t: &Ticket,
    r: &mut (impl AsyncBufRead + Unpin),
    w: &mut (impl AsyncWrite + Unpin),
) -> Result<(), String> {
    loop {
        let line = chunk_line(r).await?;
        let size = line.split(|&b| b == b';').next().unwrap_or_default();
        if size.is_empty() || size.len() > 15 || !size.iter().all(u8::is_ascii_hexdigit) {
            return Err("a malformed chunk size".into());
        }
        let size = std::str::from_utf8(size)
            .ok()
            .and_then(|s| u64::from_str_radix(s, 16).ok())
            .ok_or("a malformed chunk size")?;
        if size == 0 {
            for _ in 0..MAX_HEADERS {
                if chunk_line(r).await?.is_empty() {
                    return send_up(ctx, t, w, b"0\r\n\r\n").await;
                }
            }
            return Err(format!("more than {MAX_HEADERS} trailer lines"));
        }
        send_up(ctx, t, w, format!("{size:x}\r\n").as_bytes()).await?;
        copy_exact(ctx, t, r, w, size).await?;
        let mut crlf = [0u8; 2];
        r.read_exact(&mut crlf).await.map_err(|_| "the client closed before the request body ended".to_string())?;
        if &crlf != b"\r\n" {
            return Err("a chunk not followed by CRLF".into());
        }
        send_up(ctx, t, w, b"\r\n").await?;
    }
}

#[cfg(test)]
mod tests {
    use super::parse_authority;

    #[test]
    fn authorities_take_bracketed_ipv6_with_and_without_a_port() {
        assert_eq!(parse_authority("[::1]:8080"), Ok(("::1".to_string(), Some(8080))));
        assert_eq!(parse_authority("[2001:db8::1]"), Ok(("2001:db8::1".to_string(), None)));
        assert_eq!(parse_authority("example.com:443"), Ok(("example.com".to_string(), Some(443))));
        for bad in ["[::1", "[example.com]:1", "[::1]x", "::1:80", "a@b:1", "h:0", "h:99999", ":80"] {
            assert!(parse_authority(bad).is_err(), "{bad}");
        }
    }
}
