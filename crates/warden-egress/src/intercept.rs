//! TLS interception toward a host a held credential binds ([`run`]): warden
//! ends the program's TLS with a leaf of its per-process CA for the CONNECT
//! target (and no other name), opens its own TLS to the real server verified
//! against the system roots, and relays HTTP/1.1 requests one by one. In each
//! request it puts the real value in place of the placeholder only where a
//! bind covering the request says ([`inject`]); in every response it puts the
//! placeholder back in place of every form of the real value, compressed
//! bodies decoded first. A `Host` or SNI that disagrees with the CONNECT
//! target, upgrades and HTTP/2 are refused; redirects are passed on, never
//! followed. docs/credentials.md has the rules.

use std::sync::{Arc, OnceLock};

use tokio::io::{AsyncBufRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use crate::body::{Incoming, MAX_DECODED, Outgoing, Status, read_status};
use crate::http::{Answer, Framing, HOP_BY_HOP, Head, bad, framing, parse_authority, parse_head, response, same_host};
use crate::inject::{Plan, plan};
use crate::scan::{Decoder, Replacer};
use crate::tunnel::{Ctx, Ticket};
use crate::vault::Held;
use crate::{CONNECT_TIMEOUT, HEAD_TIMEOUT, IDLE_TIMEOUT, MAX_BYTES, MAX_HEAD};

/// warden's CA for this process, made on first use; its key never leaves memory.
pub fn authority() -> Result<&'static crate::ca::Authority, String> {
    static CA: OnceLock<Result<crate::ca::Authority, String>> = OnceLock::new();
    CA.get_or_init(crate::ca::Authority::new).as_ref().map_err(|e| format!("cannot make warden's egress CA: {e}"))
}

/// The held credentials with a bind at `host:port`: a CONNECT there is intercepted.
pub(crate) fn bound_here(ctx: &Ctx, host: &str, port: u16) -> Vec<Arc<Held>> {
    ctx.policy.credentials.iter().filter(|h| h.binds_to(host, port)).cloned().collect()
}

/// Serves an intercepted CONNECT (the `200` already sent) until either side
/// ends, the call ends or the connection idles. Returns a note on how it ended
/// when not cleanly.
pub(crate) async fn run(
    client: TcpStream,
    upstream: TcpStream,
    ctx: &Ctx,
    t: &Ticket,
    here: &[Arc<Held>],
) -> Option<String> {
    tokio::select! {
        () = ctx.stop.cancelled() => Some("ended: the call ended".into()),
        () = t.idle() => Some(format!("ended: idle for {}s", IDLE_TIMEOUT.as_secs())),
        r = session(client, upstream, ctx, t, here) => r,
    }
}

async fn session(client: TcpStream, upstream: TcpStream, ctx: &Ctx, t: &Ticket, here: &[Arc<Held>]) -> Option<String> {
    let host = t.host.clone();
    let server = match authority().and_then(|a| a.server_config(&host)) {
        Ok(s) => s,
        Err(e) => return Some(format!("ended: {e}")),
    };
    let tls = match tokio::time::timeout(HEAD_TIMEOUT, tokio_rustls::TlsAcceptor::from(server).accept(client)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            return Some(format!(
                "ended: the program's TLS handshake failed ({e}); warden answers only for {host}, the CONNECT \
                 target, over HTTP/1.1"
            ));
        }
        Err(_) => return Some("ended: the program's TLS handshake timed out".into()),
    };
    let (cr, mut cw) = tokio::io::split(tls);
    let mut cr = BufReader::new(cr);
    let up = match connect_upstream(&host, upstream).await {
        Ok(u) => u,
        Err(e) => {
            let reason = format!("{host} did not prove its identity, so nothing was sent to it: {e}");
            let _ = cw.write_all(&response(502, &reason)).await;
            let _ = cw.shutdown().await;
            return Some(format!("ended: {reason}"));
        }
    };
    let (ur, mut uw) = tokio::io::split(up);
    let mut ur = BufReader::new(ur);
    let redact = match crate::vault::redactor(&ctx.policy.credentials) {
        Ok(r) => r,
        Err(e) => {
            let _ = cw.write_all(&response(502, &e)).await;
            return Some(format!("ended: {e}"));
        }
    };
    let mut first = true;
    loop {
        let limit = if first { HEAD_TIMEOUT } else { IDLE_TIMEOUT };
        first = false;
        let head = match tokio::time::timeout(limit, read_head(&mut cr)).await {
            Ok(Ok(None)) => return None,
            Ok(Ok(Some(raw))) => parse_head(&raw),
            Ok(Err(a)) => Err(a),
            Err(_) => return None,
        };
        let prepared = head.and_then(|h| plan(&h, t, here, &ctx.policy.credentials).map(|p| (h, p)));
        let (head, req) = match prepared {
            Ok(x) => x,
            Err(a) => {
                let _ = cw.write_all(&response(a.status, &a.reason)).await;
                let _ = cw.shutdown().await;
                return Some(format!("ended: refused a request: {}", a.reason));
            }
        };
        let io = Io { cr: &mut cr, cw: &mut cw, ur: &mut ur, uw: &mut uw };
        match exchange(ctx, t, &head, &req, io, &redact).await {
            Ok(true) => continue,
            Ok(false) => {
                let _ = cw.shutdown().await;
                return None;
            }
            Err(e) => return Some(format!("ended: {e}")),
        }
    }
}

/// warden's own TLS to the real server, verified against the system roots.
async fn connect_upstream(host: &str, tcp: TcpStream) -> Result<tokio_rustls::client::TlsStream<TcpStream>, String> {
    let config = crate::ca::upstream_config()?;
    let name = rustls::pki_types::ServerName::try_from(host.to_string()).map_err(|e| format!("{host}: {e}"))?;
    match tokio::time::timeout(CONNECT_TIMEOUT, tokio_rustls::TlsConnector::from(config).connect(name, tcp)).await {
        Ok(Ok(s)) => Ok(s),
        Ok(Err(e)) => Err(format!("the TLS handshake failed: {e}")),
        Err(_) => Err(format!("the TLS handshake took longer than {}s", CONNECT_TIMEOUT.as_secs())),
    }
}

/// Reads one request head from `r`, leaving what follows it; `None` when the
/// connection ends before a byte of it.
async fn read_head(r: &mut (impl AsyncBufRead + Unpin)) -> Result<Option<Vec<u8>>, Answer> {
    use tokio::io::AsyncBufReadExt;
    let mut acc: Vec<u8> = Vec::new();
    loop {
        let buf = r.fill_buf().await.map_err(|e| bad(format!("reading the request failed: {e}")))?;
        if buf.is_empty() {
            return if acc.is_empty() { Ok(None) } else { Err(bad("the connection closed inside a request head")) };
        }
        let start = acc.len().saturating_sub(3);
        let before = acc.len();
        acc.extend_from_slice(buf);
        if let Some(pos) = acc[start..].windows(4).position(|w| w == b"\r\n\r\n") {
            let end = start + pos + 4;
            r.consume(end - before);
            acc.truncate(end);
            return Ok(Some(acc));
        }
        let n = buf.len();
        r.consume(n);
        if acc.len() > MAX_HEAD {
            return Err(bad(format!("the request head is longer than {} KiB", MAX_HEAD / 1024)));
        }
    }
}

/// Both sides of an intercepted connection.
struct Io<'a, CR, CW, UR, UW> {
    cr: &'a mut CR,
    cw: &'a mut CW,
    ur: &'a mut UR,
    uw: &'a mut UW,
}

/// Counts `n` bytes one way against the ticket and the proxy's budget.
fn count(ctx: &Ctx, t: &Ticket, up: bool, n: usize) -> Result<(), String> {
    use std::sync::atomic::Ordering;
    let n = n as u64;
    let (total, mine) = if up { (&ctx.total_up, &t.up) } else { (&ctx.total_down, &t.down) };
    if total.fetch_add(n, Ordering::Relaxed) + n > MAX_BYTES {
        return Err(format!("the proxy's bound of {} GiB each way is spent", MAX_BYTES >> 30));
    }
    mine.fetch_add(n, Ordering::Relaxed);
    t.touch();
    Ok(())
}

/// One request and its response. `Ok(true)`: the connection may carry another.
async fn exchange<CR, CW, UR, UW>(
    ctx: &Ctx,
    t: &Ticket,
    head: &Head,
    req: &Plan,
    io: Io<'_, CR, CW, UR, UW>,
    redact: &Replacer,
) -> Result<bool, String>
where
    CR: AsyncBufRead + Unpin,
    CW: AsyncWrite + Unpin,
    UR: AsyncBufRead + Unpin,
    UW: AsyncWrite + Unpin,
{
    let Io { cr, cw, ur, uw } = io;
    let send = async {
        uw.write_all(&req.head).await.map_err(|e| format!("writing upstream failed: {e}"))?;
        count(ctx, t, true, req.head.len())?;
        let mut incoming = match framing(head).map_err(|a| a.reason)? {
            Framing::None => Incoming::None,
            Framing::Length(n) => Incoming::Length(n),
            Framing::Chunked => Incoming::Chunked { left: 0, done: false },
        };
        let out = if req.chunked_body { Outgoing::Chunked } else { Outgoing::Length };
        let mut stream = req.body.as_ref().map(Replacer::stream);
        while let Some(piece) = incoming.piece(cr).await.map_err(|e| format!("the request body: {e}"))? {
            let piece = match stream.as_mut() {
                Some(s) => s.feed(&piece),
                None => piece,
            };
            count(ctx, t, true, piece.len())?;
            out.put(uw, &piece).await?;
        }
        if let Some(s) = stream.as_mut() {
            out.put(uw, &s.finish()).await?;
        }
        out.end(uw).await
    };
    let recv = respond(ctx, t, req, ur, cw, redact);
    let mut send = std::pin::pin!(send);
    let mut recv = std::pin::pin!(recv);
    let mut sent = false;
    loop {
        tokio::select! {
            r = &mut send, if !sent => {
                r?;
                sent = true;
            }
            r = &mut recv => {
                // A response before the whole request (a 401 to an upload):
                // the rest of the body is unread, so the connection ends.
                return r.map(|keep| keep && sent);
            }
        }
    }
}

/// Reads the response (after any interim ones) and writes it to the program
/// with every form of a real value replaced by its placeholder.
async fn respond(
    ctx: &Ctx,
    t: &Ticket,
    req: &Plan,
    ur: &mut (impl AsyncBufRead + Unpin),
    cw: &mut (impl AsyncWrite + Unpin),
    redact: &Replacer,
) -> Result<bool, String> {
    loop {
        let st = match read_status(ur).await {
            Ok(s) => s,
            Err(e) => {
                let _ = cw.write_all(&response(502, &format!("{}: {e}", t.host))).await;
                return Err(e);
            }
        };
        if st.code == 101 {
            return Err("the server switched protocols, which warden does not relay".into());
        }
        let incoming = st.framing(req.head_method)?;
        let encoding = st
            .all("content-encoding")
            .map(|v| String::from_utf8_lossy(v).trim().to_ascii_lowercase())
            .collect::<Vec<_>>()
            .join(",");
        let mut decoder = match (incoming, encoding.as_str()) {
            (Incoming::None, _) | (_, "" | "identity") => None,
            (_, enc) => match Decoder::new(enc, MAX_DECODED) {
                Ok(d) => Some(d),
                Err(e) => {
                    let _ = cw.write_all(&response(502, &format!("{}: {e}", t.host))).await;
                    return Err(e);
                }
            },
        };
        let out = match incoming {
            Incoming::Length(_) if decoder.is_none() && redact.same_length() => Outgoing::Length,
            Incoming::None => Outgoing::Length,
            _ if req.http11 => Outgoing::Chunked,
            _ => Outgoing::Close,
        };
        let closing = req.close
            || st.lists("connection", "close")
            || (st.version == "HTTP/1.0" && !st.lists("connection", "keep-alive"))
            || incoming == Incoming::Close
            || out == Outgoing::Close;
        let head = response_head(&st, incoming, out, decoder.is_some(), closing);
        let (head, _) = redact.replace_all(&head);
        count(ctx, t, false, head.len())?;
        cw.write_all(&head).await.map_err(|e| format!("writing to the program failed: {e}"))?;
        if st.code < 200 {
            cw.flush().await.map_err(|e| format!("writing to the program failed: {e}"))?;
            continue;
        }
        let mut incoming = incoming;
        let mut stream = redact.stream();
        while let Some(piece) = incoming.piece(ur).await.map_err(|e| format!("the response body: {e}"))? {
            let piece = match decoder.as_mut() {
                Some(d) => d.feed(&piece)?,
                None => piece,
            };
            let piece = stream.feed(&piece);
            count(ctx, t, false, piece.len())?;
            out.put(cw, &piece).await?;
        }
        let mut rest = match decoder.as_mut() {
            Some(d) => stream.feed(&d.finish()?),
            None => Vec::new(),
        };
        rest.extend(stream.finish());
        out.put(cw, &rest).await?;
        out.end(cw).await?;
        if stream.hits() > 0 {
            t.redacted(stream.hits());
        }
        return Ok(!closing);
    }
}

/// The response head the program gets: hop-by-hop headers dropped, framed as `out`.
fn response_head(st: &Status, incoming: Incoming, out: Outgoing, decoded: bool, closing: bool) -> Vec<u8> {
    let mut h = format!("HTTP/1.1 {} {}\r\n", st.code, st.reason).into_bytes();
    for (name, value) in &st.headers {
        let lower = name.to_ascii_lowercase();
        let framing_header = lower == "transfer-encoding" || lower == "content-length";
        let keep_length = lower == "content-length" && (incoming == Incoming::None || out == Outgoing::Length);
        if HOP_BY_HOP.contains(&lower.as_str())
            || (framing_header && !keep_length)
            || (decoded && lower == "content-encoding")
        {
            continue;
        }
        h.extend_from_slice(name.as_bytes());
        h.extend_from_slice(b": ");
        h.extend_from_slice(value);
        h.extend_from_slice(b"\r\n");
    }
    if out == Outgoing::Chunked && incoming != Incoming::None {
        h.extend_from_slice(b"Transfer-Encoding: chunked\r\n");
    }
    if closing {
        h.extend_from_slice(b"Connection: close\r\n");
    }
    h.extend_from_slice(b"\r\n");
    h
}

/// Checks that the request goes where the tunnel goes: its target and `Host`
/// agree with the CONNECT target (`421` otherwise), and it is plain HTTP/1.1.
pub(crate) fn check_target(head: &Head, host: &str, port: u16) -> Result<String, Answer> {
    let misdirected = |what: String| Answer {
        status: 421,
        reason: format!(
            "{what}, but this connection was opened to {host}:{port}; warden sends a request only where its \
             CONNECT goes"
        ),
    };
    if head.method.eq_ignore_ascii_case("CONNECT") || head.all("upgrade").next().is_some() || head.method == "PRI" {
        return Err(Answer {
            status: 501,
            reason: format!(
                "toward {host}, which a credential binds, warden relays HTTP/1.1 requests only: no CONNECT, \
                 Upgrade (WebSocket, h2c) or HTTP/2"
            ),
        });
    }
    let path = if head.target.starts_with('/') {
        head.target.clone()
    } else if head.target.len() > 8 && head.target[..8].eq_ignore_ascii_case("https://") {
        let rest = &head.target[8..];
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (h, p) = parse_authority(&rest[..end]).map_err(bad)?;
        if !same_host(&h, host) || p.unwrap_or(443) != port {
            return Err(misdirected(format!("the request's URL names {}", &rest[..end])));
        }
        match &rest[end..] {
            "" => "/".into(),
            p if p.starts_with('?') => format!("/{p}"),
            p => p.to_string(),
        }
    } else {
        return Err(bad("a request target that is neither a path nor an https:// URL"));
    };
    let mut hosts = head.all("host");
    match (hosts.next(), hosts.next()) {
        (None, _) if head.version == "HTTP/1.1" => return Err(bad("the request has no Host header")),
        (Some(_), Some(_)) => return Err(bad("the request has more than one Host header")),
        (Some(v), None) => {
            let v = String::from_utf8_lossy(v);
            let (h, p) = parse_authority(&v).map_err(|e| bad(format!("the Host header: {e}")))?;
            if !same_host(&h, host) || p.unwrap_or(443) != port {
                return Err(misdirected(format!("the Host header names {v}")));
            }
        }
        _ => {}
    }
    Ok(path)
}

/// Plain HTTP to anywhere: warden never puts a real value into it; a
/// placeholder seen there is counted as misdirected.
pub(crate) fn plain_misdirected(ctx: &Ctx, t: &Ticket, head: &Head) {
    for h in &ctx.policy.credentials {
        let n = crate::inject::left_over(h, &head.target, &head.headers);
        if n > 0 {
            t.use_credential(&h.name, 0, n as u64);
        }
    }
}
