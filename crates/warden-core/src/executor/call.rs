//! What goes into a call and what comes out: the request, the hooks a
//! client lends it, the response with its status and exit code.

use std::path::PathBuf;

use serde_json::{Map, Value, json};

use crate::approval::{self, Verdict};
use crate::error::{CallError, ErrorCode};
use crate::runtime::Cancel;

/// The largest arguments object accepted, as JSON bytes.
pub const MAX_ARGS_BYTES: usize = 1 << 20;

/// A request to run one tool.
#[derive(Debug, Clone)]
pub struct ToolCall {
    /// The requested name.
    pub tool: String,
    /// The arguments (must be a JSON object).
    pub args: Value,
    /// Why the arguments could not be read, when the caller could not parse them
    /// (for example an OpenAI `arguments` string that is not JSON): the call fails
    /// with `INVALID_ARGS` and this message, and is still audited.
    pub input_error: Option<String>,
}

impl ToolCall {
    /// A call of `tool` with `args`.
    pub fn new(tool: impl Into<String>, args: Value) -> ToolCall {
        ToolCall { tool: tool.into(), args, input_error: None }
    }
}

/// How a call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// It ran and returned a result.
    Success,
    /// It did not run, or failed.
    Error,
    /// Someone said no.
    Rejected,
    /// The caller cancelled it while it ran (error code `CANCELLED`).
    Cancelled,
}

impl Status {
    /// The stable string form, as in result JSON and the audit log.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Success => "success",
            Status::Error => "error",
            Status::Rejected => "rejected",
            Status::Cancelled => "cancelled",
        }
    }
}

/// What a caller other than the command line brings to one call.
#[derive(Default)]
pub struct CallHooks<'a> {
    /// Answers `ask`/`confirm` calls instead of the executor's [`Approver`] (an MCP
    /// client's elicitation). It is asked only after the policy decided the tier.
    pub approve: Option<&'a (dyn Fn(&approval::Request<'_>) -> Verdict + Sync)>,
    /// Switched on to stop the call: the sandbox is torn down and the call ends `CANCELLED`.
    pub cancel: Cancel,
    /// Sees a program's output as it arrives (process tools, command components).
    pub tap: Option<crate::runtime::OutputTap>,
    /// Sees the call's progress reports (`warden:plugin@0.2.0` components, and
    /// process tools' `WARDEN_PROGRESS_FD` lines);
    /// without it they go to `tap` as lines.
    pub progress: Option<crate::runtime::ProgressSink>,
    /// `warden run`: this command line runs under the tool's walls instead of
    /// its `exec`, with warden's own stdin, stdout and stderr (the call's
    /// arguments are `{"command": …}`, for its rules and its record).
    pub run: Option<Vec<String>>,
    /// How the agent reached warden, shown with a call waiting in the inbox.
    pub client: Option<&'a str>,
}

impl CallHooks<'_> {
    /// What the runtimes see of these hooks while the call runs.
    pub fn watch(&self) -> crate::runtime::Watch<'_> {
        crate::runtime::Watch { cancel: &self.cancel, tap: self.tap.as_ref(), progress: self.progress.as_ref() }
    }
}

/// The response to one call: what `call` prints and `exec` wraps.
#[derive(Debug, Clone)]
pub struct CallResponse {
    /// How it ended.
    pub status: Status,
    /// The requested tool name.
    pub tool: String,
    /// The call's id (also in the audit record).
    pub call_id: String,
    /// The shaped result, on success.
    pub result: Option<Value>,
    /// Whether anything was cut.
    pub truncated: bool,
    /// The error, on error (and `REJECTED` on rejection).
    pub error: Option<CallError>,
    /// `{"hit": true, "call_id", "age_ms"}` when the result came from the cache.
    pub cache: Option<Value>,
    /// Why it was rejected.
    pub reason: Option<String>,
    /// Wall time of the whole call.
    pub duration_ms: f64,
}

impl CallResponse {
    /// The result document of DESIGN's contract, with stable keys.
    pub fn to_json(&self) -> Value {
        let mut o = Map::new();
        o.insert("status".into(), json!(self.status.as_str()));
        o.insert("tool".into(), json!(self.tool));
        o.insert("call_id".into(), json!(self.call_id));
        match self.status {
            Status::Success => {
                o.insert("result".into(), self.result.clone().unwrap_or(Value::Null));
                o.insert("truncated".into(), json!(self.truncated));
                if let Some(hit) = &self.cache {
                    o.insert("cache".into(), hit.clone());
                }
            }
            Status::Error | Status::Cancelled => {
                if let Some(e) = &self.error {
                    o.insert("error".into(), e.to_json());
                }
            }
            Status::Rejected => {
                o.insert("reason".into(), json!(self.reason.clone().unwrap_or_default()));
            }
        }
        o.insert("duration_ms".into(), json!((self.duration_ms * 1000.0).round() / 1000.0));
        Value::Object(o)
    }

    /// The exit code of `call` for this response.
    pub fn exit_code(&self) -> u8 {
        match (&self.status, &self.error) {
            (Status::Success, _) => 0,
            (Status::Rejected, _) => ErrorCode::Rejected.exit_code(),
            (Status::Error | Status::Cancelled, Some(e)) => e.code.exit_code(),
            (Status::Error | Status::Cancelled, None) => ErrorCode::Internal.exit_code(),
        }
    }
}

/// How an executor finds what it needs beyond the policy.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Where compiled components are cached (`None`: compile in memory each start).
    pub cache_dir: Option<PathBuf>,
    /// The `warden` binary, re-executed as the sandbox helper of process tools
    /// (`None`: process tools are unavailable).
    pub sandbox_helper: Option<PathBuf>,
}
