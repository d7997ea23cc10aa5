//! MCP logging ([`Logger`], [`SessionLevel`]): the level a client asked for
//! (`logging/setLevel`, or a 2026-07-28 request's own `logLevel`), and warden's
//! own warnings as `notifications/message`: a call the policy denied, nobody
//! could approve, or someone rejected, at `warning`, logger `warden`. Nothing is
//! sent before a level is chosen, and never a tool's own output. On stdio the
//! level lasts the session; over stateless HTTP only the per-request one holds.
//! docs/mcp.md, "Logging, prompts, resources".

#![allow(deprecated)] // rmcp marks logging deprecated (SEP-2577); 2025-11-25 clients still use it.

use std::sync::{Arc, Mutex, PoisonError};

use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam};
use rmcp::service::RequestContext;
use rmcp::{Peer, RoleServer};
use serde_json::json;

use warden_core::executor::{CallResponse, Status};

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
            || matches!(
                e.code,
                warden_runtime::error::ErrorCode::Denied | warden_runtime::error::ErrorCode::ApprovalRequired
            );
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
