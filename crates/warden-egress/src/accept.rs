//! The accept loop: connections from the tool's namespace, at most
//! [`MAX_CONNECTIONS`] served at once, each told apart by its first byte
//! (`0x05` starts a SOCKS5 greeting; anything else is taken for an HTTP
//! request) and handed to [`socks`] or [`http`]. Connections past the bound
//! are still read (as many again, each within [`HEAD_TIMEOUT`]) so that the
//! program gets a `503` or SOCKS `0x01` and the journal the attempt; past
//! that they are closed unanswered and recorded. Every connection's task
//! selects on the proxy's stop token.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::tunnel::{Ctx, Ticket, busy_reason};
use crate::{EgressPolicy, HEAD_TIMEOUT, Journal, MAX_CONNECTIONS, http, socks};

/// Starts accepting on `listener` on warden's egress runtime until `stop` is
/// cancelled.
pub(crate) fn serve(
    listener: std::net::TcpListener,
    policy: Arc<EgressPolicy>,
    journal: Arc<Journal>,
    stop: CancellationToken,
) -> Result<(), String> {
    let rt = crate::runtime()?;
    listener.set_nonblocking(true).map_err(|e| format!("cannot make the proxy's socket non-blocking: {e}"))?;
    let listener = {
        let _inside = rt.enter();
        TcpListener::from_std(listener).map_err(|e| format!("cannot serve the proxy's socket: {e}"))?
    };
    let ctx = Arc::new(Ctx {
        policy,
        journal,
        stop,
        total_up: AtomicU64::new(0),
        total_down: AtomicU64::new(0),
        redactor: Default::default(),
    });
    rt.spawn(accept_loop(listener, ctx));
    Ok(())
}

async fn accept_loop(listener: TcpListener, ctx: Arc<Ctx>) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let overflow = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let accepted = tokio::select! {
            () = ctx.stop.cancelled() => return,
            r = listener.accept() => r,
        };
        let stream = match accepted {
            Ok((s, _)) => s,
            Err(_) => {
                // Out of descriptors or similar: wait a little rather than spin.
                tokio::select! {
                    () = ctx.stop.cancelled() => return,
                    () = tokio::time::sleep(Duration::from_millis(100)) => continue,
                }
            }
        };
        let _ = stream.set_nodelay(true);
        let (permit, busy) = match slots.clone().try_acquire_owned() {
            Ok(p) => (p, false),
            Err(_) => match overflow.clone().try_acquire_owned() {
                Ok(p) => (p, true),
                Err(_) => {
                    let mut t = Ticket::new(&ctx, "http");
                    t.refuse(busy_reason());
                    drop(stream);
                    continue;
                }
            },
        };
        let ctx = ctx.clone();
        tokio::spawn(async move {
            let _permit = permit;
            tokio::select! {
                () = ctx.stop.cancelled() => {}
                () = connection(stream, &ctx, busy) => {}
            }
        });
    }
}

/// One connection: SOCKS5 or HTTP by its first byte.
async fn connection(stream: TcpStream, ctx: &Ctx, busy: bool) {
    let mut first = [0u8; 1];
    match tokio::time::timeout(HEAD_TIMEOUT, stream.peek(&mut first)).await {
        Ok(Ok(n)) if n > 0 && first[0] == 0x05 => socks::handle(stream, ctx, busy).await,
        Ok(Ok(n)) if n > 0 => http::handle(stream, ctx, busy).await,
        Ok(Ok(_)) => {
            // Closed before a byte: recorded as such by the ticket.
            let _t = Ticket::new(ctx, "http");
        }
        Ok(Err(e)) => Ticket::new(ctx, "http").refuse(format!("reading the request failed: {e}")),
        Err(_) => {
            let mut t = Ticket::new(ctx, "http");
            t.refuse(format!("no request within {}s", HEAD_TIMEOUT.as_secs()));
        }
    }
}
