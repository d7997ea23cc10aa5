//! The stable error codes of a call and the exit codes they map to.
//!
//! Codes are part of the contract (README.md lists them with their exit codes,
//! under "Use"): their spelling never changes, and every code has exactly one
//! exit code.

use std::fmt;

use serde::Serialize;

/// Why a call did not succeed. Serialised as the SCREAMING_CASE string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[non_exhaustive]
pub enum ErrorCode {
    /// No tool of that name under the policy.
    NotFound,
    /// The arguments do not match the tool's input schema.
    InvalidArgs,
    /// The policy denies the call.
    Denied,
    /// The call needs approval and nobody could answer.
    ApprovalRequired,
    /// Someone was asked and said no.
    Rejected,
    /// The sandbox refused an access at run time.
    PermissionDenied,
    /// The file the tool was asked to use does not exist.
    FileNotFound,
    /// A path argument is outside what the tool may reach.
    InvalidPath,
    /// The call ran past its wall-clock limit.
    Timeout,
    /// Memory, output, processes or file size ran past a limit.
    LimitExceeded,
    /// The tool itself failed (a trap, a crash, a reported failure).
    ExecutionFailed,
    /// The sandbox the policy asks for cannot be set up here.
    SandboxUnavailable,
    /// warden itself failed (for example the audit log could not be written).
    Internal,
    /// The caller cancelled the call while it ran (an MCP `notifications/cancelled`);
    /// its sandbox was torn down.
    Cancelled,
}

impl ErrorCode {
    /// The stable string form, as in result JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::NotFound => "NOT_FOUND",
            ErrorCode::InvalidArgs => "INVALID_ARGS",
            ErrorCode::Denied => "DENIED",
            ErrorCode::ApprovalRequired => "APPROVAL_REQUIRED",
            ErrorCode::Rejected => "REJECTED",
            ErrorCode::PermissionDenied => "PERMISSION_DENIED",
            ErrorCode::FileNotFound => "FILE_NOT_FOUND",
            ErrorCode::InvalidPath => "INVALID_PATH",
            ErrorCode::Timeout => "TIMEOUT",
            ErrorCode::LimitExceeded => "LIMIT_EXCEEDED",
            ErrorCode::ExecutionFailed => "EXECUTION_FAILED",
            ErrorCode::SandboxUnavailable => "SANDBOX_UNAVAILABLE",
            ErrorCode::Internal => "INTERNAL",
            ErrorCode::Cancelled => "CANCELLED",
        }
    }

    /// The process exit code of `call` and `exec` for this error.
    pub fn exit_code(self) -> u8 {
        match self {
            ErrorCode::ExecutionFailed
            | ErrorCode::FileNotFound
            | ErrorCode::InvalidPath
            | ErrorCode::PermissionDenied => 1,
            ErrorCode::InvalidArgs | ErrorCode::NotFound => 2,
            ErrorCode::Denied | ErrorCode::ApprovalRequired | ErrorCode::Rejected => 3,
            ErrorCode::Timeout | ErrorCode::LimitExceeded => 4,
            ErrorCode::SandboxUnavailable => 5,
            ErrorCode::Internal => 70,
            ErrorCode::Cancelled => 130,
        }
    }

    /// Whether the caller can reasonably retry or change something and succeed.
    pub fn recoverable(self) -> bool {
        !matches!(self, ErrorCode::Internal | ErrorCode::SandboxUnavailable | ErrorCode::Denied)
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A failed call: a code and a message naming the tool, the key or path, and what to change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallError {
    /// The stable code.
    pub code: ErrorCode,
    /// What went wrong, for a person.
    pub message: String,
}

impl CallError {
    /// A new error with `code` and `message`.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> CallError {
        CallError { code, message: message.into() }
    }

    /// The result document's `error` object: `code`, `message`, `recoverable`
    /// (every place that reports an error builds it here).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({"code": self.code.as_str(), "message": self.message, "recoverable": self.code.recoverable()})
    }
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for CallError {}
