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
    executor_logging_to(root, &root.join("audit.jsonl"))
}

fn executor_logging_to(root: &Path, log: &Path) -> (Executor, std::path::PathBuf, std::path::PathBuf) {
    let log = log.to_path_buf();
    let ws = root.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let ws = ws.canonicalize().unwrap();
    let ctx = Context { workspace: ws.clone(), home: root.into(), cache: root.into() };
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

/// A log made immutable (`chattr +i`) after warden opened it refuses every
/// write, even through the open descriptor: the call must not run. Setting the
/// attribute needs `CAP_LINUX_IMMUTABLE` (root) and a file system that keeps it.
#[test]
fn an_immutable_log_stops_the_call_before_it_runs() {
    let dir = tempfile::tempdir().unwrap();
    let (exec, ws, log) = executor(dir.path());
    assert_eq!(write(&exec, "before.txt").status, Status::Success);
    let set = std::process::Command::new("chattr").arg("+i").arg(&log).status();
    if !set.as_ref().is_ok_and(|s| s.success()) {
        eprintln!("skipped: chattr +i needs root and a file system with attributes ({set:?})");
        return;
    }
    let r = write(&exec, "after.txt");
    let _ = std::process::Command::new("chattr").arg("-i").arg(&log).status();
    assert_eq!(r.status, Status::Error, "{r:?}");
    let e = r.error.unwrap();
    assert_eq!(e.code.as_str(), "INTERNAL");
    assert!(e.message.contains("nothing ran") && e.message.contains("immutable"), "{}", e.message);
    assert!(!ws.join("after.txt").exists(), "the tool ran without a record");
    // Once the attribute is gone, calls run and are recorded again.
    assert_eq!(write(&exec, "again.txt").status, Status::Success);
    assert!(ws.join("again.txt").exists());
}

/// Unmounts a test file system when the test ends, however it ends.
struct Mounted(std::path::PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// A full disk: the log's file system (a 2 MiB tmpfs) is filled until less than
/// the 1 MiB a record may need is free. The call does not run; once space is
/// back, calls run again. Mounting needs root, as CI runs.
#[test]
fn a_full_disk_stops_the_call_before_it_runs() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: mounting a small file system needs root (CI runs as root)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let small = dir.path().join("small");
    std::fs::create_dir(&small).unwrap();
    let status =
        std::process::Command::new("mount").args(["-t", "tmpfs", "-o", "size=2m", "tmpfs"]).arg(&small).status();
    assert!(status.is_ok_and(|s| s.success()), "cannot mount a tmpfs as root");
    let _mounted = Mounted(small.clone());
    let (exec, ws, log) = executor_logging_to(dir.path(), &small.join("audit.jsonl"));
    assert_eq!(write(&exec, "before.txt").status, Status::Success);

    let fs = nix::sys::statvfs::statvfs(&small).unwrap();
    let free = fs.blocks_available() * fs.fragment_size();
    let filler = small.join("filler");
    std::fs::write(&filler, vec![0u8; (free - (256 << 10)) as usize]).unwrap();
    let r = write(&exec, "after.txt");
    assert_eq!(r.status, Status::Error, "{r:?}");
    let e = r.error.unwrap();
    assert_eq!(e.code.as_str(), "INTERNAL");
    assert!(e.message.contains("nothing ran") && e.message.contains("bytes free"), "{}", e.message);
    assert!(!ws.join("after.txt").exists(), "the tool ran without a record");

    std::fs::remove_file(&filler).unwrap();
    assert_eq!(write(&exec, "again.txt").status, Status::Success);
    assert!(ws.join("again.txt").exists());
    // The records that were written verify.
    let v = warden::audit::verify(&log).unwrap();
    assert!(v.problem.is_none(), "{:?}", v.problem);
}

/// A tool that fills the log's file system *while it runs* (the log shares it
/// with the workspace the tool may write): the space for the call's record was
/// reserved before the tool started, so the record is still appended, whole,
/// and the chain verifies; the result says what the tool met (`No space left`).
/// The next call finds the disk full and does not run. The record is made
/// larger than a page (a long comment in the command), so without the
/// reservation it would need a block the tool has taken. Mounting needs root.
#[test]
fn a_tool_that_fills_the_disk_during_its_call_still_gets_a_whole_record() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: mounting a small file system needs root (CI runs as root)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let small = dir.path().join("small");
    std::fs::create_dir(&small).unwrap();
    let status =
        std::process::Command::new("mount").args(["-t", "tmpfs", "-o", "size=4m", "tmpfs"]).arg(&small).status();
    assert!(status.is_ok_and(|s| s.success()), "cannot mount a tmpfs as root");
    let _mounted = Mounted(small.clone());
    // The workspace and the log on the one small file system.
    let log = small.join("audit.jsonl");
    let ws = small.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let ws = ws.canonicalize().unwrap();
    let ctx = Context { workspace: ws.clone(), home: dir.path().into(), cache: dir.path().into() };
    let cache = Path::new(env!("CARGO_TARGET_TMPDIR")).join("warden-test-cache");
    let exec = Executor::new(
        Policy::embedded_default(&ctx).unwrap(),
        Approver::new(ApproveMode::Yes),
        AuditLog::open(&log).unwrap(),
        warden::Options { cache_dir: Some(cache), sandbox_helper: Some(env!("CARGO_BIN_EXE_warden-sandbox").into()) },
    )
    .unwrap();
    assert_eq!(write(&exec, "before.txt").status, Status::Success);

    let command = format!("dd if=/dev/zero of=fill bs=64k; echo filled # {}", "p".repeat(4000));
    let r = exec.call(ToolCall::new("shell", json!({ "command": command })));
    let free = {
        let fs = nix::sys::statvfs::statvfs(&small).unwrap();
        fs.blocks_available() * fs.fragment_size()
    };
    assert!(free < 64 << 10, "the tool did not fill the file system ({free} bytes still free)");
    // The call's result says what happened.
    assert_eq!(r.status, Status::Success, "{r:?}");
    let result = r.result.as_ref().unwrap();
    assert_eq!(result["exit_code"], 0, "{result}");
    assert!(result["stderr"].as_str().unwrap().contains("No space left on device"), "{result}");
    assert!(result["stdout"].as_str().unwrap().contains("filled"), "{result}");
    assert!(std::fs::metadata(ws.join("fill")).unwrap().len() > 2 << 20);

    // Its record is there, whole, last, and the chain verifies.
    let v = warden::audit::verify(&log).unwrap();
    assert_eq!((v.records, v.torn_line, v.problem.clone()), (2, None, None), "{v:?}");
    let text = std::fs::read_to_string(&log).unwrap();
    let last: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(last["call_id"], r.call_id.as_str());
    assert_eq!((last["tool"].as_str(), last["status"].as_str()), (Some("shell"), Some("success")));
    assert!(last["args"]["command"].as_str().unwrap().starts_with("dd if=/dev/zero"));
    assert!(text.lines().last().unwrap().len() > 4096, "the record fits in a page: the test proves nothing");

    // The disk is full now: the next call does not run.
    let r = write(&exec, "after.txt");
    assert_eq!(r.error.as_ref().map(|e| e.code.as_str()), Some("INTERNAL"), "{r:?}");
    assert!(!ws.join("after.txt").exists(), "the tool ran without a record");
    std::fs::remove_file(ws.join("fill")).unwrap();
    assert_eq!(write(&exec, "again.txt").status, Status::Success);
    let v = warden::audit::verify(&log).unwrap();
    assert_eq!((v.records, v.torn_line, v.problem.clone()), (4, None, None), "{v:?}");
}
