//! SOCKS5 (RFC 1928) for the egress proxy (`handle`), with names resolved by
//! warden: no authentication, `CONNECT` only, greeting and request within
//! [`HEAD_TIMEOUT`]. The reply codes are in docs/security.md, "The egress proxy".

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::HEAD_TIMEOUT;
use crate::tunnel::{ConnectError, Ctx, Failure, Ticket, answer_and_close, open, pipe};

const VERSION: u8 = 0x05;
const NO_AUTH: u8 = 0x00;
const NO_METHOD: u8 = 0xFF;
const CMD_CONNECT: u8 = 0x01;

/// Reply codes (RFC 1928 section 6).
mod reply {
    pub(super) const SUCCEEDED: u8 = 0x00;
    pub(super) const GENERAL_FAILURE: u8 = 0x01;
    pub(super) const NOT_ALLOWED: u8 = 0x02;
    pub(super) const NETWORK_UNREACHABLE: u8 = 0x03;
    pub(super) const HOST_UNREACHABLE: u8 = 0x04;
    pub(super) const CONNECTION_REFUSED: u8 = 0x05;
    pub(super) const TTL_EXPIRED: u8 = 0x06;
    pub(super) const COMMAND_NOT_SUPPORTED: u8 = 0x07;
    pub(super) const ADDRESS_TYPE_NOT_SUPPORTED: u8 = 0x08;
}

/// A reply with bound address `0.0.0.0:0`.
fn reply(code: u8) -> [u8; 10] {
    [VERSION, code, 0x00, 0x01, 0, 0, 0, 0, 0, 0]
}

/// Why the handshake stopped: what to answer (if anything) and the reason.
struct Stop {
    answer: Option<Vec<u8>>,
    reason: String,
}

fn io_stop(e: io::Error) -> Stop {
    let reason = if e.kind() == io::ErrorKind::UnexpectedEof {
        "the SOCKS client closed during the handshake".to_string()
    } else {
        format!("reading the SOCKS handshake failed: {e}")
    };
    Stop { answer: None, reason }
}

/// Greeting, method choice and request; fills in the ticket's host and port.
async fn handshake(stream: &mut TcpStream, ticket: &mut Ticket) -> Result<(), Stop> {
    let mut two = [0u8; 2];
    stream.read_exact(&mut two).await.map_err(io_stop)?;
    let [version, n] = two;
    if version != VERSION {
        return Err(Stop { answer: None, reason: format!("SOCKS version {version} (only 5 is spoken)") });
    }
    let mut methods = vec![0u8; usize::from(n)];
    stream.read_exact(&mut methods).await.map_err(io_stop)?;
    if !methods.contains(&NO_AUTH) {
        return Err(Stop {
            answer: Some(vec![VERSION, NO_METHOD]),
            reason: "the SOCKS client offers no method warden takes (only \"no authentication\")".into(),
        });
    }
    stream.write_all(&[VERSION, NO_AUTH]).await.map_err(io_stop)?;

    let mut fixed = [0u8; 4];
    stream.read_exact(&mut fixed).await.map_err(io_stop)?;
    let [version, cmd, _reserved, atyp] = fixed;
    if version != VERSION {
        return Err(Stop { answer: None, reason: format!("SOCKS request version {version} (only 5 is spoken)") });
    }
    let host = match atyp {
        0x01 => {
            let mut a = [0u8; 4];
            stream.read_exact(&mut a).await.map_err(io_stop)?;
            Ipv4Addr::from(a).to_string()
        }
        0x03 => {
            let len = stream.read_u8().await.map_err(io_stop)?;
            let mut name = vec![0u8; usize::from(len)];
            stream.read_exact(&mut name).await.map_err(io_stop)?;
            String::from_utf8_lossy(&name).into_owned()
        }
        0x04 => {
            let mut a = [0u8; 16];
            stream.read_exact(&mut a).await.map_err(io_stop)?;
            Ipv6Addr::from(a).to_string()
        }
        other => {
            return Err(Stop {
                answer: Some(reply(reply::ADDRESS_TYPE_NOT_SUPPORTED).to_vec()),
                reason: format!("SOCKS address type {other} (IPv4, domain and IPv6 are spoken)"),
            });
        }
    };
    let port = stream.read_u16().await.map_err(io_stop)?;
    (ticket.host, ticket.port) = (host, port);
    if cmd != CMD_CONNECT {
        return Err(Stop {
            answer: Some(reply(reply::COMMAND_NOT_SUPPORTED).to_vec()),
            reason: format!("SOCKS command {cmd} (only CONNECT is allowed: no BIND, no UDP)"),
        });
    }
    Ok(())
}

/// Serves one SOCKS5 connection.
pub(crate) async fn handle(mut stream: TcpStream, ctx: &Ctx, busy: bool) {
    let mut ticket = Ticket::new(ctx, "socks5");
    let shaken = match tokio::time::timeout(HEAD_TIMEOUT, handshake(&mut stream, &mut ticket)).await {
        Ok(r) => r,
        Err(_) => Err(Stop {
            answer: None,
            reason: format!("the SOCKS handshake took longer than {}s", HEAD_TIMEOUT.as_secs()),
        }),
    };
    if let Err(stop) = shaken {
        ticket.refuse(stop.reason);
        return answer_and_close(stream, &stop.answer.unwrap_or_default()).await;
    }
    let upstream = match open(ctx, &mut ticket, busy).await {
        Ok(s) => s,
        Err(f) => {
            let code = match f {
                Failure::Busy => reply::GENERAL_FAILURE,
                Failure::Policy => reply::NOT_ALLOWED,
                Failure::Unresolved => reply::HOST_UNREACHABLE,
                Failure::Connect(ConnectError::Refused(_)) => reply::CONNECTION_REFUSED,
                Failure::Connect(ConnectError::TimedOut(_)) => reply::TTL_EXPIRED,
                Failure::Connect(ConnectError::NetworkUnreachable(_)) => reply::NETWORK_UNREACHABLE,
                Failure::Connect(ConnectError::Other(_)) => reply::HOST_UNREACHABLE,
            };
            return answer_and_close(stream, &reply(code)).await;
        }
    };
    if let Err(e) = stream.write_all(&reply(reply::SUCCEEDED)).await {
        ticket.note(&format!("ended: {e}"));
        return;
    }
    let here = crate::intercept::bound_here(ctx, &ticket.host, ticket.port);
    if !here.is_empty() {
        ticket.intercepted = true;
        if let Some(note) = crate::intercept::run(stream, upstream, ctx, &ticket, &here).await {
            ticket.note(&note);
        }
        return;
    }
    if let Some(note) = pipe(ctx, &ticket, stream, upstream, &[]).await {
        ticket.note(&note);
    }
}
