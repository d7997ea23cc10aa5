//! Message bodies and response heads on an intercepted connection: a body
//! read piece by piece whatever its framing ([`Incoming`]), written in the
//! framing warden chooses ([`Outgoing`]), and a strictly parsed response head
//! ([`Status`]). Bounded like the rest of the proxy: heads by
//! [`MAX_RESPONSE_HEAD`], lines by [`MAX_CHUNK_LINE`], decoded bodies by
//! [`MAX_DECODED`].

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::MAX_HEADERS;

/// The longest response head, in bytes.
pub(crate) const MAX_RESPONSE_HEAD: usize = 256 * 1024;
/// The longest chunk-size or trailer line.
const MAX_CHUNK_LINE: usize = 4096;
/// The most bytes warden decodes from one compressed response.
pub(crate) const MAX_DECODED: u64 = 4 << 30;
/// The most bytes read from a body at once.
const PIECE: usize = 64 * 1024;

/// How a body arrives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Incoming {
    /// No body.
    None,
    /// Exactly this many bytes.
    Length(u64),
    /// Chunked; `left` bytes of the current chunk, `done` after the last.
    Chunked { left: u64, done: bool },
    /// Until the connection closes (responses only).
    Close,
}

impl Incoming {
    /// The next piece of the body, `None` at its end.
    pub(crate) async fn piece(&mut self, r: &mut (impl AsyncBufRead + Unpin)) -> Result<Option<Vec<u8>>, String> {
        match self {
            Incoming::None => Ok(None),
            Incoming::Length(0) => Ok(None),
            Incoming::Length(n) => {
                let got = take(r, *n).await?;
                if got.is_empty() {
                    return Err("the connection closed before the body ended".into());
                }
                *n -= got.len() as u64;
                Ok(Some(got))
            }
            Incoming::Close => {
                let got = take(r, PIECE as u64).await?;
                Ok((!got.is_empty()).then_some(got))
            }
            Incoming::Chunked { done: true, .. } => Ok(None),
            Incoming::Chunked { left, done } => {
                if *left == 0 {
                    let size = chunk_size(&line(r).await?)?;
                    if size == 0 {
                        for _ in 0..MAX_HEADERS {
                            if line(r).await?.is_empty() {
                                *done = true;
                                return Ok(None);
                            }
                        }
                        return Err(format!("more than {MAX_HEADERS} trailer lines"));
                    }
                    *left = size;
                }
                let got = take(r, *left).await?;
                if got.is_empty() {
                    return Err("the connection closed inside a chunk".into());
                }
                *left -= got.len() as u64;
                if *left == 0 {
                    let mut crlf = [0u8; 2];
                    r.read_exact(&mut crlf).await.map_err(|_| "the connection closed inside a chunk".to_string())?;
                    if &crlf != b"\r\n" {
                        return Err("a chunk not followed by CRLF".into());
                    }
                }
                Ok(Some(got))
            }
        }
    }
}

/// Up to `max` bytes (at most [`PIECE`]) of what `r` has; empty at its end.
async fn take(r: &mut (impl AsyncBufRead + Unpin), max: u64) -> Result<Vec<u8>, String> {
    let buf = r.fill_buf().await.map_err(|e| format!("reading failed: {e}"))?;
    let n = buf.len().min(usize::try_from(max).unwrap_or(usize::MAX)).min(PIECE);
    let got = buf[..n].to_vec();
    r.consume(n);
    Ok(got)
}

/// One line without its CRLF; a bare LF is refused.
async fn line(r: &mut (impl AsyncBufRead + Unpin)) -> Result<Vec<u8>, String> {
    let mut l = Vec::new();
    let limited = &mut (&mut *r).take(MAX_CHUNK_LINE as u64 + 1);
    limited.read_until(b'\n', &mut l).await.map_err(|e| format!("reading failed: {e}"))?;
    match l.strip_suffix(b"\r\n") {
        Some(x) if !x.contains(&b'\r') => Ok(x.to_vec()),
        _ if l.len() > MAX_CHUNK_LINE => Err("a chunk line longer than 4 KiB".into()),
        _ if !l.ends_with(b"\n") => Err("the connection closed inside a chunked body".into()),
        _ => Err("a chunked body line not ending in CRLF".into()),
    }
}

fn chunk_size(line: &[u8]) -> Result<u64, String> {
    let size = line.split(|&b| b == b';').next().unwrap_or_default().trim_ascii();
    if size.is_empty() || size.len() > 15 || !size.iter().all(u8::is_ascii_hexdigit) {
        return Err("a malformed chunk size".into());
    }
    std::str::from_utf8(size)
        .ok()
        .and_then(|s| u64::from_str_radix(s, 16).ok())
        .ok_or_else(|| "a malformed chunk size".into())
}

/// How warden writes a body on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outgoing {
    /// As many bytes as the head's `Content-Length` says (unchanged).
    Length,
    /// Chunked.
    Chunked,
    /// Raw, then the connection closes.
    Close,
}

impl Outgoing {
    /// Writes one piece.
    pub(crate) async fn put(self, w: &mut (impl AsyncWrite + Unpin), data: &[u8]) -> Result<(), String> {
        if data.is_empty() {
            return Ok(());
        }
        let fail = |e: std::io::Error| format!("writing failed: {e}");
        if self == Outgoing::Chunked {
            w.write_all(format!("{:x}\r\n", data.len()).as_bytes()).await.map_err(fail)?;
            w.write_all(data).await.map_err(fail)?;
            w.write_all(b"\r\n").await.map_err(fail)
        } else {
            w.write_all(data).await.map_err(fail)
        }
    }

    /// Ends the body.
    pub(crate) async fn end(self, w: &mut (impl AsyncWrite + Unpin)) -> Result<(), String> {
        if self == Outgoing::Chunked {
            w.write_all(b"0\r\n\r\n").await.map_err(|e| format!("writing failed: {e}"))?;
        }
        w.flush().await.map_err(|e| format!("writing failed: {e}"))
    }
}

/// A parsed response head.
pub(crate) struct Status {
    pub(crate) version: String,
    pub(crate) code: u16,
    pub(crate) reason: String,
    pub(crate) headers: Vec<(String, Vec<u8>)>,
}

impl Status {
    pub(crate) fn all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.headers.iter().filter(move |(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_slice())
    }

    /// Whether a header lists `token` (comma-separated, any case).
    pub(crate) fn lists(&self, name: &str, token: &str) -> bool {
        self.all(name).any(|v| v.split(|&b| b == b',').any(|t| t.trim_ascii().eq_ignore_ascii_case(token.as_bytes())))
    }

    /// The body's framing (RFC 9112 §6.3), for a response to `head_request`.
    pub(crate) fn framing(&self, head_request: bool) -> Result<Incoming, String> {
        if head_request || self.code < 200 || self.code == 204 || self.code == 304 {
            return Ok(Incoming::None);
        }
        let te: Vec<&[u8]> = self.all("transfer-encoding").collect();
        if !te.is_empty() {
            // Any other transfer coding (gzip, deflate, a list) would reach
            // the program undecoded, so unscanned.
            if te.len() != 1 || !te[0].trim_ascii().eq_ignore_ascii_case(b"chunked") {
                return Err("a response Transfer-Encoding other than exactly chunked, which warden cannot scan".into());
            }
            return Ok(Incoming::Chunked { left: 0, done: false });
        }
        let mut length: Option<u64> = None;
        for v in self.all("content-length") {
            for part in v.split(|&b| b == b',') {
                let n: u64 = std::str::from_utf8(part.trim_ascii())
                    .ok()
                    .filter(|s| !s.is_empty() && s.len() <= 19 && s.bytes().all(|b| b.is_ascii_digit()))
                    .and_then(|s| s.parse().ok())
                    .ok_or("the response has a malformed Content-Length")?;
                if length.is_some_and(|l| l != n) {
                    return Err("the response has differing Content-Length values".into());
                }
                length = Some(n);
            }
        }
        Ok(length.map_or(Incoming::Close, Incoming::Length))
    }
}

/// Reads a response head (up to and including its empty line).
pub(crate) async fn read_status(r: &mut (impl AsyncBufRead + Unpin)) -> Result<Status, String> {
    let mut raw = Vec::new();
    loop {
        let mut l = Vec::new();
        let limited = &mut (&mut *r).take((MAX_RESPONSE_HEAD + 2 - raw.len().min(MAX_RESPONSE_HEAD)) as u64);
        limited.read_until(b'\n', &mut l).await.map_err(|e| format!("reading the response failed: {e}"))?;
        if l.is_empty() {
            return Err("the server closed the connection without a response".into());
        }
        if !l.ends_with(b"\r\n") {
            return Err(if raw.len() + l.len() > MAX_RESPONSE_HEAD {
                format!("the response head is longer than {} KiB", MAX_RESPONSE_HEAD / 1024)
            } else {
                "a response head line not ending in CRLF".into()
            });
        }
        let end = l == b"\r\n";
        raw.extend_from_slice(&l);
        if end {
            break;
        }
    }
    parse_status(&raw)
}

fn parse_status(raw: &[u8]) -> Result<Status, String> {
    let text = raw.strip_suffix(b"\r\n\r\n").ok_or("a response head without its empty line")?;
    let mut lines = text.split(|&b| b == b'\n').map(|l| l.strip_suffix(b"\r").unwrap_or(l));
    let first = std::str::from_utf8(lines.next().unwrap_or_default()).map_err(|_| "a status line that is not text")?;
    let mut parts = first.splitn(3, ' ');
    let (Some(version), Some(code)) = (parts.next(), parts.next()) else {
        return Err("a malformed status line".into());
    };
    if version != "HTTP/1.1" && version != "HTTP/1.0" {
        return Err("a response that is not HTTP/1.0 or HTTP/1.1".into());
    }
    let code: u16 = code.parse().ok().filter(|c| (100..600).contains(c)).ok_or("a malformed status code")?;
    let reason = parts.next().unwrap_or("").to_string();
    let mut headers = Vec::new();
    for l in lines {
        if headers.len() == MAX_HEADERS * 2 {
            return Err(format!("more than {} response header lines", MAX_HEADERS * 2));
        }
        if l.contains(&b'\r') || l.first().is_some_and(|&b| b == b' ' || b == b'\t') {
            return Err("a bare CR or a folded line in the response head".into());
        }
        let colon = l.iter().position(|&b| b == b':').ok_or("a response header line without a colon")?;
        let (name, value) = (&l[..colon], l[colon + 1..].trim_ascii());
        if name.is_empty() || name.iter().any(|&b| b <= b' ' || b == 0x7f) {
            return Err("a malformed response header name".into());
        }
        if value.iter().any(|&b| (b < b' ' && b != b'\t') || b == 0x7f) {
            return Err("a control character in a response header".into());
        }
        headers.push((String::from_utf8_lossy(name).into_owned(), value.to_vec()));
    }
    Ok(Status { version: version.into(), code, reason, headers })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    async fn body(incoming: Incoming, input: &[u8]) -> Result<Vec<u8>, String> {
        let mut r = tokio::io::BufReader::new(input);
        let mut i = incoming;
        let mut out = Vec::new();
        while let Some(p) = i.piece(&mut r).await? {
            out.extend(p);
        }
        Ok(out)
    }

    #[tokio::test]
    async fn bodies_are_read_in_each_framing() {
        assert_eq!(body(Incoming::Length(3), b"abcdef").await.unwrap(), b"abc");
        let chunked = Incoming::Chunked { left: 0, done: false };
        assert_eq!(body(chunked, b"3;x=y\r\nabc\r\n2\r\nde\r\n0\r\nT: 1\r\n\r\n").await.unwrap(), b"abcde");
        assert!(body(chunked, b"3\nabc\r\n0\r\n\r\n").await.is_err());
        assert!(body(chunked, b"zz\r\n").await.is_err());
        assert!(body(Incoming::Length(9), b"abc").await.is_err());
        assert_eq!(body(Incoming::Close, b"all of it").await.unwrap(), b"all of it");
    }

    #[tokio::test]
    async fn response_heads_are_parsed_strictly_and_framed_per_rfc_9112() {
        let mut r = tokio::io::BufReader::new(&b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"[..]);
        let s = read_status(&mut r).await.unwrap();
        assert_eq!((s.code, s.framing(false).unwrap()), (200, Incoming::Length(5)));
        assert_eq!(s.framing(true).unwrap(), Incoming::None);
        for bad in [
            &b"HTTP/1.1 200 OK\nA: b\r\n\r\n"[..],
            b"HTTP/2 200 OK\r\n\r\n",
            b"HTTP/1.1 200 OK\r\n folded\r\n\r\n",
            b"HTTP/1.1 99 x\r\n\r\n",
        ] {
            let mut r = tokio::io::BufReader::new(bad);
            assert!(read_status(&mut r).await.is_err(), "{}", String::from_utf8_lossy(bad));
        }
        let mut r = tokio::io::BufReader::new(&b"HTTP/1.1 204 No\r\nContent-Length: 5\r\n\r\n"[..]);
        assert_eq!(read_status(&mut r).await.unwrap().framing(false).unwrap(), Incoming::None);
        let mut r = tokio::io::BufReader::new(
            &b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n"[..],
        );
        assert_eq!(
            read_status(&mut r).await.unwrap().framing(false).unwrap(),
            Incoming::Chunked { left: 0, done: false }
        );
        let mut r = tokio::io::BufReader::new(&b"HTTP/1.1 200 OK\r\nContent-Length: 5, 6\r\n\r\n"[..]);
        assert!(read_status(&mut r).await.unwrap().framing(false).is_err());
    }
}
