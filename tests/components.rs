//! The component runtime against a hostile component (`plugins/testkit`): each
//! attack is really attempted, the runtime contains it with the right error,
//! and the same process serves the next call normally.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Read;
use std::net::TcpListener;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use warden::approval::{ApproveMode, Approver};
use warden::audit::AuditLog;
use warden::policy::Context;
use warden::{CallResponse, Executor, Policy, Status, ToolCall};

const TESTKIT: &str = env!("WARDEN_TESTKIT_WASM");

struct Kit {
    _dir: tempfile::TempDir,
    ws: std::path::PathBuf,
    exec: Executor,
}

fn kit(extra: &str) -> Kit {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let ws = ws.canonicalize().unwrap();
    let sha = hex::encode(Sha256::digest(std::fs::read(TESTKIT).unwrap()));
    let mut text = format!(
        "version = 1\n[defaults]\ntier = \"auto\"\ntimeout = \"20s\"\nmemory = \"32MiB\"\n\
         [plugins.kit]\nsource = \"{TESTKIT}\"\nsha256 = \"{sha}\"\n"
    );
    // A generous timeout, so that a loaded machine does not turn a limit into a
    // TIMEOUT; `spin` alone has 1s, the timeout it tests.
    for tool in ["echo", "env", "grow", "flood", "recurse", "deep", "read"] {
        text.push_str(&format!("[tools.{tool}]\nplugin = \"kit\"\nfs.read = [\"{{workspace}}\"]\n"));
    }
    text.push_str("[tools.spin]\nplugin = \"kit\"\nlimits = { timeout = \"1s\" }\n");
    text.push_str("[tools.huge]\nplugin = \"kit\"\nlimits = { memory = \"128MiB\" }\n");
    text.push_str("[tools.write]\nplugin = \"kit\"\nfs.read = [\"{workspace}\"]\n");
    text.push_str(extra);
    let ctx = Context { workspace: ws.clone(), home: dir.path().into(), cache: dir.path().into() };
    let policy = Policy::from_text(&text, "kit.toml", Path::new("/"), &ctx).unwrap_or_else(|e| panic!("{e}"));
    let log = AuditLog::open(&dir.path().join("audit.jsonl")).unwrap();
    let cache = Path::new(env!("CARGO_TARGET_TMPDIR")).join("warden-test-cache");
    let exec = Executor::new(
        policy,
        Approver::new(ApproveMode::Deny),
        log,
        warden::Options { cache_dir: Some(cache), sandbox_helper: None },
    )
    .unwrap();
    Kit { _dir: dir, ws, exec }
}

fn call(k: &Kit, tool: &str, args: Value) -> CallResponse {
    k.exec.call(ToolCall::new(tool, args))
}

fn code(r: &CallResponse) -> &'static str {
    r.error.as_ref().map(|e| e.code.as_str()).unwrap_or("")
}

fn still_serves(k: &Kit) {
    let r = call(k, "echo", json!({"after": true}));
    assert_eq!(r.status, Status::Success, "the next call failed: {r:?}");
    assert_eq!(r.result, Some(json!({"after": true})));
}

#[test]
fn an_infinite_loop_times_out_within_the_tools_timeout() {
    let k = kit("");
    let started = Instant::now();
    let r = call(&k, "spin", json!({}));
    assert_eq!(code(&r), "TIMEOUT", "{r:?}");
    assert_eq!(r.exit_code(), 4);
    let took = started.elapsed();
    assert!(took < Duration::from_secs(5), "took {took:?} for a 1s timeout");
    still_serves(&k);
}

#[test]
fn memory_growth_past_the_limit_is_limit_exceeded() {
    let k = kit("");
    let r = call(&k, "grow", json!({}));
    assert_eq!(code(&r), "LIMIT_EXCEEDED", "{r:?}");
    assert!(r.error.as_ref().unwrap().message.contains("32MiB"), "{r:?}");
    still_serves(&k);
}

#[test]
fn an_output_flood_is_truncated_not_fatal() {
    let k = kit("");
    let r = call(&k, "flood", json!({}));
    assert_eq!(r.status, Status::Success, "{r:?}");
    assert!(r.truncated);
    still_serves(&k);
}

#[test]
fn a_huge_result_is_cut_to_max_output() {
    let k = kit("");
    let r = call(&k, "huge", json!({}));
    assert_eq!(r.status, Status::Success, "{r:?}");
    assert!(r.truncated);
    assert!(serde_json::to_vec(r.result.as_ref().unwrap()).unwrap().len() <= 64 << 10);
    still_serves(&k);
}

#[test]
fn a_stack_overflow_is_execution_failed() {
    let k = kit("");
    let r = call(&k, "deep", json!({}));
    assert_eq!(code(&r), "EXECUTION_FAILED", "{r:?}");
    assert!(r.error.as_ref().unwrap().message.contains("stack overflow"), "{r:?}");
    still_serves(&k);
    // Large frames exhaust the stack the component keeps in its own memory first.
    let r = call(&k, "recurse", json!({}));
    assert_eq!(code(&r), "EXECUTION_FAILED", "{r:?}");
    assert!(r.error.as_ref().unwrap().message.contains("out of bounds memory access"), "{r:?}");
    assert!(!r.error.as_ref().unwrap().message.contains("wasm backtrace"), "{r:?}");
    still_serves(&k);
}

#[test]
fn components_see_no_host_environment_or_arguments() {
    assert!(std::env::var_os("PATH").is_some());
    let k = kit("");
    let r = call(&k, "env", json!({}));
    let v = r.result.unwrap();
    let names: Vec<String> = v["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap().split('=').next().unwrap().to_string())
        .collect();
    assert_eq!(names, ["WARDEN_WORKSPACE", "WARDEN_ROOTS"]);
    assert_eq!(v["args"], json!([]));
}

#[test]
fn components_cannot_read_outside_their_preopens() {
    let k = kit("");
    for path in ["/etc/passwd", "/proc/self/environ", "../../etc/passwd", "/"] {
        let r = call(&k, "read", json!({"path": path}));
        assert_eq!(r.status, Status::Error, "{path}: {r:?}");
        assert!(!format!("{r:?}").contains("root:x:0"));
    }
    std::fs::write(k.ws.join("ok.txt"), "inside").unwrap();
    let r = call(&k, "read", json!({"path": k.ws.join("ok.txt")}));
    assert_eq!(r.result, Some(json!("inside")), "{r:?}");
}

#[test]
fn a_read_only_grant_refuses_writes() {
    let k = kit("");
    let target = k.ws.join("x.txt");
    let r = call(&k, "write", json!({"path": target, "content": "pwned"}));
    assert_eq!(code(&r), "PERMISSION_DENIED", "{r:?}");
    assert!(!target.exists());
}

#[test]
fn no_network_without_a_grant_and_only_the_granted_destination_with_one() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let other = TcpListener::bind("127.0.0.1:0").unwrap();
    let other_port = other.local_addr().unwrap().port();
    listener.set_nonblocking(true).unwrap();
    other.set_nonblocking(true).unwrap();

    let k = kit(&format!("[tools.connect]\nplugin = \"kit\"\nnet.connect = [\"127.0.0.1:{port}\"]\n"));
    let r = call(&k, "connect", json!({"addr": format!("127.0.0.1:{other_port}")}));
    assert_eq!(code(&r), "PERMISSION_DENIED", "ungranted port: {r:?}");
    assert!(other.accept().is_err(), "a connection reached the ungranted listener");
    let r = call(&k, "connect", json!({"addr": format!("127.0.0.1:{port}")}));
    assert_eq!(r.result, Some(json!("connected")), "granted port: {r:?}");
    std::thread::sleep(Duration::from_millis(50));
    let (mut s, _) = listener.accept().expect("the granted connection arrived");
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);

    let k = kit("[tools.connect]\nplugin = \"kit\"\n");
    let r = call(&k, "connect", json!({"addr": format!("127.0.0.1:{port}")}));
    assert_eq!(code(&r), "PERMISSION_DENIED", "no grant: {r:?}");
    std::thread::sleep(Duration::from_millis(50));
    assert!(listener.accept().is_err(), "a connection arrived without a grant");
}

#[test]
fn a_plugin_whose_hash_does_not_match_its_pin_is_not_loaded() {
    let dir = tempfile::tempdir().unwrap();
    let ctx =
        Context { workspace: dir.path().canonicalize().unwrap(), home: dir.path().into(), cache: dir.path().into() };
    let pinned = "0".repeat(64);
    let text = format!(
        "version = 1\n[plugins.kit]\nsource = \"{TESTKIT}\"\nsha256 = \"{pinned}\"\n[tools.echo]\nplugin = \"kit\"\ntier = \"auto\"\n"
    );
    let policy = Policy::from_text(&text, "kit.toml", Path::new("/"), &ctx).unwrap();
    let log = AuditLog::open(&dir.path().join("a.jsonl")).unwrap();
    let exec = Executor::new(policy, Approver::new(ApproveMode::Deny), log, warden::Options::default()).unwrap();
    let r = exec.call(ToolCall::new("echo", json!({})));
    let msg = &r.error.as_ref().unwrap().message;
    let actual = hex::encode(Sha256::digest(std::fs::read(TESTKIT).unwrap()));
    assert!(msg.contains(&pinned) && msg.contains(&actual), "{msg}");
    assert_eq!(r.exit_code(), 3);
}

#[test]
fn concurrent_calls_share_one_engine() {
    let k = &kit("");
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..8).map(|i| s.spawn(move || call(k, "echo", json!({"i": i})))).collect();
        for (i, h) in handles.into_iter().enumerate() {
            assert_eq!(h.join().unwrap().result, Some(json!({"i": i})));
        }
    });
}

/// The executor's cancel switch stops a component in an infinite loop at its
/// next epoch tick, well before its timeout, and the call is recorded as cancelled.
#[test]
fn a_cancelled_component_stops_before_its_timeout() {
    use warden::executor::CallHooks;
    use warden::runtime::Cancel;

    let k = kit("");
    let hooks = CallHooks { approve: None, cancel: Cancel::new() };
    let switch = hooks.cancel.clone();
    let canceller = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        switch.cancel();
    });
    // `spin` has a 1s timeout: CANCELLED (not TIMEOUT) shows the switch ended it.
    let r = k.exec.call_with(ToolCall::new("spin", json!({})), &hooks);
    canceller.join().unwrap();
    assert_eq!(code(&r), "CANCELLED", "{r:?}");
    assert_eq!(r.status, Status::Cancelled);
    let log = std::fs::read_to_string(k._dir.path().join("audit.jsonl")).unwrap();
    let last: Value = serde_json::from_str(log.lines().last().unwrap()).unwrap();
    assert_eq!(last["status"], "cancelled");
    still_serves(&k);
}
