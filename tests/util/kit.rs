//! The in-process harness over the testkit component (`WARDEN_TESTKIT_WASM`,
//! built by warden-runtime's build.rs): an [`Executor`] on a fresh workspace with its own audit
//! log, approvals denied, the compiled-component cache shared between tests.

use std::path::{Path, PathBuf};

use serde_json::Value;
use sha2::{Digest, Sha256};
use warden::approval::{ApproveMode, Approver};
use warden::audit::AuditLog;
use warden::policy::Context;
use warden::{CallResponse, Executor, Policy, Status, ToolCall};

use super::clip;

/// The testkit component.
pub(crate) const TESTKIT: &str = warden::runtime::builtin::TESTKIT_WASM;

/// One test's executor over the testkit.
pub(crate) struct Kit {
    /// Holds the workspace, the audit log and the state, when the kit made them.
    _dir: Option<tempfile::TempDir>,
    /// The workspace (canonical).
    pub ws: PathBuf,
    /// Its audit log.
    pub log: PathBuf,
    /// The executor.
    pub exec: Executor,
}

impl Kit {
    /// A policy of `[defaults]` (tier auto, 20 s, `memory`), the testkit as
    /// plugin `kit` (pinned by its hash), then `rest`.
    pub(crate) fn new(memory: &str, rest: &str) -> Kit {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        let ws = ws.canonicalize().unwrap();
        let sha = hex::encode(Sha256::digest(std::fs::read(TESTKIT).unwrap()));
        let text = format!(
            "version = 1\n[defaults]\ntier = \"auto\"\ntimeout = \"20s\"\nmemory = \"{memory}\"\n\
             [plugins.kit]\nsource = \"{TESTKIT}\"\nsha256 = \"{sha}\"\n{rest}"
        );
        let log = dir.path().join("audit.jsonl");
        let exec = executor_at(&ws, dir.path(), &log, &text);
        Kit { _dir: Some(dir), ws, log, exec }
    }

    /// A kit for the policy `text` over `ws`, prepared by the caller, its state in
    /// `home` and its audit log at `log`.
    pub(crate) fn at(ws: PathBuf, home: &Path, log: PathBuf, text: &str) -> Kit {
        let exec = executor_at(&ws, home, &log, text);
        Kit { _dir: None, ws, log, exec }
    }

    /// One call.
    pub(crate) fn call(&self, tool: &str, args: Value) -> CallResponse {
        self.exec.call(ToolCall::new(tool, args))
    }

    /// The last record of the kit's audit log.
    pub(crate) fn last_record(&self) -> Value {
        let text = std::fs::read_to_string(&self.log).unwrap();
        serde_json::from_str(text.lines().last().unwrap()).unwrap()
    }
}

/// An executor for the policy `text` over the workspace `ws`, its audit log
/// and state in `dir`, approvals denied, the component cache shared.
pub(crate) fn executor(dir: &Path, ws: &Path, text: &str) -> Executor {
    executor_at(ws, dir, &dir.join("audit.jsonl"), text)
}

/// An executor for the policy `text` over `ws`, its state in `home`, its audit
/// log at `log`, approvals denied, the component cache shared.
pub(crate) fn executor_at(ws: &Path, home: &Path, log: &Path, text: &str) -> Executor {
    let ctx = Context { workspace: ws.to_path_buf(), home: home.into(), cache: home.into() };
    let policy = Policy::from_text(text, "kit.toml", Path::new("/"), &ctx).unwrap_or_else(|e| panic!("{e}"));
    let log = AuditLog::open(log).unwrap();
    Executor::new(
        policy,
        Approver::new(ApproveMode::Deny),
        log,
        warden::Options { cache_dir: Some(super::cache_dir()), sandbox_helper: None },
    )
    .unwrap()
}

/// A response's error code, or "".
pub(crate) fn code(r: &CallResponse) -> &'static str {
    r.error.as_ref().map(|e| e.code.as_str()).unwrap_or("")
}

/// A response's error message, or "".
pub(crate) fn message(r: &CallResponse) -> String {
    r.error.as_ref().map(|e| e.message.clone()).unwrap_or_default()
}

/// A one-line account of a component call.
pub(crate) fn brief(r: &CallResponse) -> String {
    match (&r.status, &r.error) {
        (Status::Success, _) => {
            let text = r.result.as_ref().map(Value::to_string).unwrap_or_default();
            format!("success{}: {}", if r.truncated { " (truncated)" } else { "" }, clip(&text, 140))
        }
        (_, Some(e)) => format!("{}: {}", e.code.as_str(), clip(&e.message, 160)),
        (s, None) => s.as_str().to_string(),
    }
}

/// Everything a component call returned, for leak checks.
pub(crate) fn text(r: &CallResponse) -> String {
    format!("{:?} {}", r.error, r.result.as_ref().map(Value::to_string).unwrap_or_default())
}
