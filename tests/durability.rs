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
#[ignore = "needs root"]
fn an_immutable_log_stops_the_call_before_it_runs() {
    let dir = tempfile::tempdir().unwrap();
    let (exec, ws, log) = executor(dir.path());
    assert_eq!(write(&exec, "before.txt").status, Status::Success);
    let set = std::process::Command::new("chattr").arg("+i").arg(&log).status();
    assert!(
        set.as_ref().is_ok_and(|s| s.success()),
        "chattr +i needs root (`cargo test -- --ignored` as root) and a file system that keeps attributes: {set:?}"
    );
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

/// A tmpfs of `size` mounted in a new temporary directory (root only: the
/// tests that use it are marked so), unmounted when the guard drops.
fn small_tmpfs(size: &str) -> (tempfile::TempDir, std::path::PathBuf, Mounted) {
    assert!(
        nix::unistd::geteuid().is_root(),
        "needs root: run it as root with `cargo test -- --ignored` (.ci/run does)"
    );
    let dir = tempfile::tempdir().unwrap();
    let small = dir.path().join("small");
    std::fs::create_dir(&small).unwrap();
    let options = format!("size={size}");
    let status =
        std::process::Command::new("mount").args(["-t", "tmpfs", "-o", &options, "tmpfs"]).arg(&small).status();
    assert!(status.is_ok_and(|s| s.success()), "cannot mount a tmpfs as root");
    let mounted = Mounted(small.clone());
    (dir, small, mounted)
}

/// A full disk: the log's file system (a 2 MiB tmpfs) is filled until less than
/// the 1 MiB a record may need is free. The call does not run; once space is
/// back, calls run again. Mounting needs root, as CI runs.
#[test]
#[ignore = "needs root"]
fn a_full_disk_stops_the_call_before_it_runs() {
    let (dir, small, _mounted) = small_tmpfs("2m");
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

/// The same attack as the escape battery's disk fill, against a long-lived
/// log as `serve` keeps it (records reserved with `fallocate` past its end, the
/// file only ever holding whole lines), on a 4 MiB tmpfs that a `shell` call
/// fills with `dd` while it runs. The call's record (longer than a page) is
/// there and whole, the next call is refused before it runs, and calls run
/// again once space is back. Mounting needs root.
#[test]
#[ignore = "needs root"]
fn a_tool_filling_the_disk_under_a_served_log_still_gets_its_whole_record() {
    let (dir, small, _mounted) = small_tmpfs("4m");
    let ws = small.join("ws");
    std::fs::create_dir(&ws).unwrap();
    let ws = ws.canonicalize().unwrap();
    let log_path = small.join("audit.jsonl");
    let log = AuditLog::open(&log_path).unwrap();
    let ctx = Context { workspace: ws.clone(), home: dir.path().into(), cache: dir.path().into() };
    // The default policy's shell, with a hermetic PATH: the test's own may put
    // a user's shim directory (pyenv) before /usr/bin, which warden refuses.
    let text = warden::policy::DEFAULT_POLICY.replacen(
        r#"env = { pass = ["PATH", "LANG"], set = { HOME = "{tmp}" } }"#,
        r#"env = { set = { HOME = "{tmp}", PATH = "/usr/local/bin:/usr/bin:/bin" } }"#,
        1,
    );
    let exec = Executor::new(
        Policy::from_text(&text, "default", Path::new("."), &ctx).unwrap(),
        Approver::new(ApproveMode::Yes),
        log,
        warden::Options {
            cache_dir: None,
            sandbox_helper: Some(std::path::Path::new(env!("CARGO_BIN_EXE_warden")).with_file_name("warden-sandbox")),
        },
    )
    .unwrap();
    let shell = |command: &str| exec.call(ToolCall::new("shell", json!({ "command": command })));

    let first = shell("true");
    assert_eq!(first.status, Status::Success, "{first:?}");
    let fill = shell(&format!("dd if=/dev/zero of=fill bs=64k; echo filled # {}", "p".repeat(4000)));
    let fs = nix::sys::statvfs::statvfs(&small).unwrap();
    let free = fs.blocks_available() * fs.fragment_size();
    assert!(free < 64 << 10, "dd did not fill the disk: {free} bytes free");
    assert_eq!(fill.status, Status::Success, "{fill:?}");
    assert!(fill.to_json()["result"]["stderr"].as_str().unwrap_or_default().contains("No space left"), "{fill:?}");
    let v = warden::audit::verify(&log_path).unwrap();
    assert_eq!((v.records, v.torn_line, v.problem), (2, None, None));
    let text = std::fs::read(&log_path).unwrap();
    assert!(!text.contains(&0) && text.ends_with(b"\n"), "the log holds whole lines only");
    let last_line = text.split(|&b| b == b'\n').rfind(|l| !l.is_empty()).unwrap();
    let last: serde_json::Value = serde_json::from_slice(last_line).unwrap();
    assert_eq!(last["call_id"], fill.to_json()["call_id"]);
    assert!(last_line.len() > 4096, "the record spans pages: {} bytes", last_line.len());

    let next = shell("touch after");
    assert_eq!(next.error.as_ref().map(|e| e.code.as_str()), Some("INTERNAL"), "{next:?}");
    assert!(!ws.join("after").exists(), "the tool ran without room for its record");
    std::fs::remove_file(ws.join("fill")).unwrap();
    assert_eq!(shell("true").status, Status::Success);
    drop(exec);
    let text = std::fs::read(&log_path).unwrap();
    assert!(!text.contains(&0) && text.ends_with(b"\n"), "the log holds whole lines only");
    let v = warden::audit::verify(&log_path).unwrap();
    assert_eq!((v.records, v.torn_line, v.problem), (4, None, None));
}

/// A file-size limit that warden inherited (a tool cannot set one on warden:
/// seccomp refuses `prlimit64` on another process) would fail the append after
/// the tool ran; warden ignores `SIGXFSZ` and refuses the call before it runs.
#[test]
fn a_file_size_limit_too_small_for_the_log_stops_the_call_before_it_runs() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let log = dir.path().join("audit.jsonl");
    std::fs::write(&log, "").unwrap();
    let warden = env!("CARGO_BIN_EXE_warden");
    let run = |limit_kib: u32| {
        std::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "ulimit -S -f {limit_kib}; exec \"$0\" --approve yes --audit-log \"$1\" --workspace \"$2\" call write_file \
                 '{{\"path\":\"ran.txt\",\"content\":\"ran\"}}'"
            ))
            .arg(warden)
            .arg(&log)
            .arg(&ws)
            .env("WARDEN_CACHE_DIR", Path::new(env!("CARGO_TARGET_TMPDIR")).join("warden-test-cache"))
            .output()
            .unwrap()
    };
    // Room enough: the call runs and is recorded.
    let ok = run(1 << 20);
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stdout));
    std::fs::remove_file(ws.join("ran.txt")).unwrap();
    // 1 KiB: warden is not killed by SIGXFSZ, and the tool does not run.
    let out = run(1);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(70), "{doc}");
    assert_eq!(doc["error"]["code"], "INTERNAL", "{doc}");
    assert!(doc["error"]["message"].as_str().unwrap().contains("RLIMIT_FSIZE"), "{doc}");
    assert!(!ws.join("ran.txt").exists(), "the tool ran without room for its record");
    assert!(warden::audit::verify(&log).unwrap().problem.is_none());
}
