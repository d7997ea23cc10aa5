//! No record, no run: when the audit log cannot take a call's record (the file
//! was removed or replaced under warden), the tool does not run and the call
//! ends `INTERNAL` naming the log.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use serde_json::json;
use warden::approval::{ApproveMode, Approver};
use warden::audit::AuditLog;
use warden::policy::Context;
use warden::{Executor, Policy, Status, ToolCall};

fn executor(root: &Path) -> (Executor, std::path::PathBuf, std::path::PathBuf) {
    let ws = root.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let ws = ws.canonicalize().unwrap();
    let ctx = Context { workspace: ws.clone(), home: root.into(), cache: root.into() };
    let log = root.join("audit.jsonl");
    let cache = Path::new(env!("CARGO_TARGET_TMPDIR")).join("warden-test-cache");
    let exec = Executor::new(
        Policy::embedded_default(&ctx).unwrap(),
        Approver::new(ApproveMode::Yes),
        AuditLog::open(&log).unwrap(),
        warden::Options { cache_dir: Some(cache), sandbox_helper: None },
    )
    .unwrap();
    (exec, ws, log)
}

fn write(exec: &Executor, name: &str) -> warden::CallResponse {
    exec.call(ToolCall::new("write_file", json!({"path": name, "content": "ran"})))
}

#[test]
fn a_removed_log_stops_the_call_before_it_runs() {
    let dir = tempfile::tempdir().unwrap();
    let (exec, ws, log) = executor(dir.path());
    assert_eq!(write(&exec, "before.txt").status, Status::Success);
    std::fs::remove_file(&log).unwrap();
    let r = write(&exec, "after.txt");
    assert_eq!(r.status, Status::Error, "{r:?}");
    let e = r.error.unwrap();
    assert_eq!(e.code.as_str(), "INTERNAL");
    assert!(e.message.contains("nothing ran") && e.message.contains("removed"), "{}", e.message);
    assert!(!ws.join("after.txt").exists(), "the tool ran without a record");
}

#[test]
fn a_replaced_log_stops_the_call_and_is_not_written_to() {
    let dir = tempfile::tempdir().unwrap();
    let (exec, ws, log) = executor(dir.path());
    assert_eq!(write(&exec, "before.txt").status, Status::Success);
    let forged = dir.path().join("forged.jsonl");
    std::fs::write(&forged, "").unwrap();
    std::fs::rename(&forged, &log).unwrap();
    let r = write(&exec, "after.txt");
    assert_eq!(r.error.as_ref().map(|e| e.code.as_str()), Some("INTERNAL"), "{r:?}");
    assert!(r.error.unwrap().message.contains("replaced"));
    assert!(!ws.join("after.txt").exists());
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "", "a record went into the replacement file");
}
