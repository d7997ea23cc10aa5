//! `warden serve`: the policy's tools to any MCP client. [`server`] answers
//! `tools/list` and `tools/call` over the executor; [`approval`] asks the
//! client's user; [`tools`] turns policy tools into definitions and responses
//! into results; [`http`] is the Streamable HTTP transport; [`logging`] the
//! client's log level; [`jobs`] and [`tasks`] (with [`legacy_tasks`]) run
//! `background = true` tools, and [`control`] answers `warden console` about them. On stdio, stdout carries only MCP frames, logs go
//! to stderr, and the server exits 0 when stdin closes. See docs/mcp.md.

#![forbid(unsafe_code)]

pub mod approval;
pub mod control;
pub mod frames;
pub mod http;
pub mod jobs;
pub mod legacy_tasks;
pub mod logging;
pub mod server;
pub mod tasks;
pub mod tools;

use std::sync::Arc;
use std::time::Duration;

use rmcp::ServiceExt;
use rmcp::service::ServerInitializeError;

use self::approval::Sealer;
use self::server::{Shared, WardenServer};
use warden_core::executor::Executor;

/// The default time a client's user has to answer an approval question.
pub const DEFAULT_APPROVAL_TIMEOUT: Duration = Duration::from_secs(120);
/// Environment variable holding the requestState key (hex, at least 32 bytes),
/// shared by instances behind one load balancer.
pub const STATE_KEY_ENV: &str = "WARDEN_STATE_KEY";

/// How `warden serve` runs.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// How long an approval may take.
    pub approval_timeout: Duration,
    /// `--approve yes|deny` was given: the flag answers every approval (yes:
    /// approved as `flag`; deny: `APPROVAL_REQUIRED`), and the client is never asked.
    pub approver_only: bool,
    /// Calls whose client cannot ask (or, with `approver_only`, every call
    /// needing approval) wait in warden's inbox for a person.
    pub inbox: bool,
    /// Serve Streamable HTTP instead of stdio.
    pub http: Option<http::HttpOptions>,
}

/// The requestState key: from [`STATE_KEY_ENV`], else fresh random bytes.
fn state_key() -> Result<Vec<u8>, String> {
    if let Ok(hex_key) = std::env::var(STATE_KEY_ENV) {
        let key = hex::decode(hex_key.trim())
            .map_err(|e| format!("{STATE_KEY_ENV} is not hex: {e} (give at least 64 hex digits)"))?;
        if key.len() < 32 {
            return Err(format!("{STATE_KEY_ENV} has {} bytes; it needs at least 32 (64 hex digits)", key.len()));
        }
        return Ok(key);
    }
    let mut key = vec![0u8; 32];
    getrandom::fill(&mut key).map_err(|e| format!("no randomness for the requestState key: {e}"))?;
    Ok(key)
}

/// Runs the server until stdin closes (stdio) or a signal arrives (HTTP).
pub fn serve(mut executor: Executor, options: ServeOptions) -> Result<(), String> {
    // A client that cannot ask its user leaves the call waiting in warden's
    // inbox (unless `--approve yes|deny` answers everything).
    if options.inbox {
        executor.offer_inbox(options.approval_timeout);
    }
    executor.announce_calls();
    let sealer = Sealer::new(state_key()?, options.approval_timeout)?;
    let shared = Arc::new(Shared::new(executor, sealer, options.approver_only)?);
    // One stdio client needs no worker pool: every hop of a frame (the gate,
    // rmcp, the writer) stays on one thread instead of waking another (an IPI
    // each on a VM). Calls run on blocking threads either way. HTTP serves many
    // clients at once and keeps the pool.
    let runtime = match options.http {
        Some(_) => tokio::runtime::Builder::new_multi_thread().enable_all().thread_name("warden-mcp").build(),
        None => tokio::runtime::Builder::new_current_thread().enable_all().thread_name("warden-mcp").build(),
    }
    .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    let served = shared.clone();
    let result = runtime.block_on(async move {
        // Jobs are listed, followed and cancelled from `warden console` through this socket.
        let _control = served.jobs_table().and_then(|jobs| {
            control::start(jobs, served.audit_log().path())
                .map_err(|e| tracing::warn!("no control socket for warden console: {e}"))
                .ok()
        });
        match options.http {
            Some(h) => http::serve(served, h).await,
            None => stdio(served).await,
        }
    });
    // No job outlives the server: each is torn down and its end record written.
    shared.shutdown_jobs();
    // Calls still running on blocking threads finish (and are audited) in the background.
    runtime.shutdown_timeout(Duration::from_secs(5));
    result
}

/// Resolves on SIGTERM, SIGINT or SIGHUP (the terminal `serve` ran in was
/// closed); never, if they cannot be watched. Each ends `serve` the same way:
/// jobs ended, the log's fill cut.
pub async fn signalled() {
    use tokio::signal::unix::{SignalKind, signal};
    match (signal(SignalKind::terminate()), signal(SignalKind::interrupt()), signal(SignalKind::hangup())) {
        (Ok(mut term), Ok(mut int), Ok(mut hup)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
                _ = hup.recv() => {}
            }
        }
        _ => std::future::pending().await,
    }
}

async fn stdio(shared: Arc<Shared>) -> Result<(), String> {
    // Non-blocking (epoll) when stdin and stdout are pipes, as agents start servers;
    // on reopened descriptors, so O_NONBLOCK never reaches the inherited streams.
    let (stdin, stdout) = rmcp::transport::stdio_pipes();
    let (input, output, writer, mut closed) = frames::gate(stdin, stdout, shared.legacy_tasks());
    let owner: Arc<str> = Arc::from(format!("stdio:{}", std::process::id()));
    let jobs = shared.has_jobs();
    // No job outlives the connection: each is torn down and its end record written
    // (a request still waiting on one, a 2025-11-25 tasks/result, then ends too).
    let exiting = shared.clone();
    let end_jobs = move || {
        let shared = exiting.clone();
        async move {
            let _ = tokio::task::spawn_blocking(move || shared.shutdown_jobs()).await;
        }
    };
    // A signal ends `serve` at once (it would otherwise kill the process with
    // nothing cleaned up): jobs ended and recorded here, the log's fill cut by
    // the caller. rmcp is not waited for then: it
    // waits on its stdin reader.
    let mut signalled_out = false;
    let served = match WardenServer::new(shared, true, owner).serve((input, output)).await {
        Ok(running) => {
            let ct = running.cancellation_token();
            let stopped = running.waiting();
            tokio::pin!(stopped);
            let stop = |r: Result<_, _>| r.map(|_| ()).map_err(|e| format!("the MCP server stopped: {e}"));
            tokio::select! {
                r = &mut stopped => stop(r),
                // With background jobs, closing stdin ends the jobs first: rmcp
                // waits for requests in flight, and one may wait on a job.
                _ = closed.wait_for(|c| *c), if jobs => {
                    end_jobs().await;
                    match tokio::time::timeout(Duration::from_secs(5), stopped).await {
                        Ok(r) => stop(r),
                        Err(_) => Ok(()),
                    }
                }
                _ = signalled() => {
                    if jobs {
                        end_jobs().await;
                    }
                    ct.cancel();
                    signalled_out = true;
                    Ok(())
                }
            }
        }
        // stdin closed before the client said anything: nothing to serve.
        Err(ServerInitializeError::ConnectionClosed(_)) => Ok(()),
        Err(e) => Err(format!("the MCP client's first message was not usable: {e}")),
    };
    // Every frame written reaches stdout before the process exits (after a
    // signal the writer may wait on rmcp, which is not waited for).
    if !signalled_out {
        let _ = tokio::time::timeout(Duration::from_secs(5), writer).await;
    }
    served
}
