//! `warden serve`: the tools over MCP, on stdio or streamable HTTP.

use super::args::ApproveArg;

use super::session::Session;
use super::{Failure, fail};
use crate::error::ErrorCode;

pub(super) fn serve(
    s: &Session,
    http: Option<std::net::SocketAddr>,
    approval_timeout: std::time::Duration,
    (allow_origin, allow_host): (&[String], &[String]),
) -> Result<u8, Failure> {
    if s.cli.approve == Some(ApproveArg::Prompt) {
        return Err(fail(
            ErrorCode::InvalidArgs,
            "serve cannot prompt on a terminal: approvals go to the MCP client's user (drop --approve prompt)",
        ));
    }
    let http = match http {
        None => None,
        Some(addr) => {
            let token = match std::env::var("WARDEN_HTTP_TOKEN") {
                Ok(t) if t.trim().len() >= 16 => t.trim().to_string(),
                Ok(_) => return Err(fail(ErrorCode::InvalidArgs, "WARDEN_HTTP_TOKEN must be at least 16 characters")),
                Err(_) => {
                    let mut b = [0u8; 32];
                    getrandom::fill(&mut b)
                        .map_err(|e| fail(ErrorCode::Internal, format!("no randomness for the token: {e}")))?;
                    let t = hex::encode(b);
                    eprintln!("warden: bearer token: {t} (set WARDEN_HTTP_TOKEN to choose one)");
                    t
                }
            };
            let allowed_hosts = allow_host.iter().map(|h| check_host_name(h)).collect::<Result<Vec<_>, _>>()?;
            Some(crate::mcp::http::HttpOptions { addr, token, allowed_origins: allow_origin.to_vec(), allowed_hosts })
        }
    };
    if http.is_none() && !allow_host.is_empty() {
        return Err(fail(ErrorCode::InvalidArgs, "--allow-host applies to --http only"));
    }
    let approver_only = s.cli.approve.is_some();
    let inbox = matches!(s.cli.approve, None | Some(ApproveArg::Inbox));
    let options = crate::mcp::ServeOptions { approval_timeout, approver_only, inbox, http };
    let executor = s.executor()?;
    crate::mcp::serve(executor, options).map_err(|m| fail(ErrorCode::Internal, m))?;
    Ok(0)
}

/// An `--allow-host` name: a DNS name (letters, digits, `-`, `.`, and `_` as
/// Compose service names have), lowercased, without a port or trailing dot;
/// IP literals need no flag.
fn check_host_name(name: &str) -> Result<String, Failure> {
    let lower = name.trim().trim_end_matches('.').to_ascii_lowercase();
    let ok = !lower.is_empty()
        && lower.len() <= 253
        && lower.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        });
    if !ok {
        return Err(fail(
            ErrorCode::InvalidArgs,
            format!("--allow-host {name:?}: give a host name such as warden.internal (no port, scheme or wildcard)"),
        ));
    }
    Ok(lower)
}
