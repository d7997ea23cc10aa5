//! MCP logging: the level a client asked for, and warden's own warnings as
//! `notifications/message`.
//!
//! A client chooses a level with `logging/setLevel` (legacy sessions, up to
//! 2025-11-25) or per request with `_meta["io.modelcontextprotocol/logLevel"]`
//! (2026-07-28). warden sends nothing until a level is chosen. What it sends
//! is about warden, never a tool's own output: a call that did not run because
//! the policy denied it, because nobody could approve it, or because someone
//! said no goes out at `warning`, with the tool, the error code and the
//! message the result carries too (logger `warden`), so a client that shows
//! its log sees refusals the agent may not repeat.
//!
//! Where the level lives: on stdio the handler is the session, so
//! `logging/setLevel` holds for the rest of it. Streamable HTTP is stateless
//! (no `Mcp-Session-Id`): each request has a handler of its own, so a
//! `logging/setLevel` is accepted and answered `{}` but cannot reach the
//! requests after it; only a 2026-07-28 client's per-request `logLevel` takes
//! effect there.

#![allow(deprecated)] // rmcp marks logging deprecated (SEP-2577); 2025-11-25 clients still use it.

use std::sync::{Arc, Mutex, PoisonError};

use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam};
use rmcp::service::RequestContext;
use rmcp::{Peer, RoleServer};
use serde_json::json;

use crate::executor::{CallResponse, Status};

/// Severity order of MCP levels (`debug` lowest).
pub fn rank(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

/// The level one session asked for with `logging/setLevel`; `None` until then.
#[derive(Default)]
pub struct SessionLevel(Mutex<Option<LoggingLevel>>);

impl SessionLevel {
    /// Remembers `level` for the rest of the session.
    pub fn set(&self, level: LoggingLevel) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(level);
    }

    /// The level asked for, if any.
    pub fn get(&self) -> Option<LoggingLevel> {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Where one request's log messages go, and from which level on.
pub struct Logger {
    peer: Peer<RoleServer>,
    level: Option<LoggingLevel>,
}

impl Logger {
    /// The request's own `logLevel` wins; else the session's; else nothing is sent.
    pub fn for_request(context: &RequestContext<RoleServer>, session: Option<&Arc<SessionLevel>>) -> Logger {
        let level = context.meta.log_level().or_else(|| session.and_then(|s| s.get()));
        Logger { peer: context.peer.clone(), level }
    }

    /// Sends `data` at `level` when the client asked for that level or a lower one.
    pub async fn send(&self, level: LoggingLevel, data: serde_json::Value) {
        if self.level.is_some_and(|min| rank(level) >= rank(min)) {
            let note = LoggingMessageNotificationParam::new(level, data).with_logger("warden");
            let _ = self.peer.notify_logging_message(note).await;
        }
    }

    /// A `warning` for a call the policy, the approval or the user stopped.
    pub async fn refusal(&self, response: &CallResponse) {
        let Some(e) = &response.error else { return };
        let refused = response.status == Status::Rejected
            || matches!(e.code, crate::ErrorCode::Denied | crate::ErrorCode::ApprovalRequired);
        if refused {
            let data = json!({
                "tool": response.tool,
                "call_id": response.call_id,
                "code": e.code.to_string(),
                "message": e.message,
            });
            self.send(LoggingLevel::Warning, data).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_rank_by_severity() {
        let all = [
            LoggingLevel::Debug,
            LoggingLevel::Info,
            LoggingLevel::Notice,
            LoggingLevel::Warning,
            LoggingLevel::Error,
            LoggingLevel::Critical,
            LoggingLevel::Alert,
            LoggingLevel::Emergency,
        ];
        assert!(all.windows(2).all(|w| rank(w[0]) < rank(w[1])));
    }

    #[test]
    fn a_session_level_is_remembered() {
        let s = SessionLevel::default();
        assert_eq!(s.get(), None);
        s.set(LoggingLevel::Warning);
        assert_eq!(s.get(), Some(LoggingLevel::Warning));
    }
}
