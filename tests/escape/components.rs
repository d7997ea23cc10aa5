//! The component runtime against the hostile testkit: memory growth, infinite
//! loops, stack overflows, floods, huge results, imports used without grants,
//! the host environment, and grants that belong to another tool.

use std::net::TcpListener;

use serde_json::{Value, json};

use crate::scene::kit_header;
use crate::util::kit::{Kit, brief, code, text};
use crate::{Case, Observed, Scene};

const CLASS: &str = "components";

fn c(id: &'static str, attempt: &'static str, expected: &'static str, run: fn(&Scene) -> Observed) -> Case {
    Case { id, class: CLASS, runtime: "component", attempt, expected, heavy: false, run }
}

/// The testkit with every hostile tool declared, the workspace readable.
fn hostile(s: &Scene, id: &str) -> Kit {
    let mut tools = String::new();
    for t in ["echo", "spin", "grow", "flood", "recurse", "deep"] {
        tools.push_str(&format!("[tools.{t}]\nplugin = \"kit\"\nfs.read = [\"{{workspace}}\"]\n"));
    }
    tools.push_str("[tools.huge]\nplugin = \"kit\"\nlimits = { memory = \"128MiB\" }\n");
    s.kit(id, &tools)
}

/// Whether the same executor still answers a normal call.
fn serves(k: &Kit) -> bool {
    k.call("echo", json!({"after": true})).result == Some(json!({"after": true}))
}

/// The attack `tool` ends with `want` (and `message` in its text), and the next call is served.
fn contained(s: &Scene, id: &str, tool: &str, want: &str, message: &str) -> Observed {
    let k = hostile(s, id);
    let r = k.call(tool, json!({}));
    let next = serves(&k);
    let said = r.error.as_ref().is_some_and(|e| e.message.contains(message));
    Observed::new(code(&r) == want && said && next, format!("{}; next call served: {next}", brief(&r)))
}

pub(crate) fn cases() -> Vec<Case> {
    vec![
        c(
            "comp-memory-growth",
            "`grow`: allocate 1 MiB blocks forever, under limits.memory = 32MiB",
            "LIMIT_EXCEEDED naming limits.memory; the next call is served",
            |s| contained(s, "grow", "grow", "LIMIT_EXCEEDED", "32MiB"),
        ),
        c(
            "comp-infinite-loop",
            "`spin`: loop forever under timeout = 1s",
            "TIMEOUT (epoch deadline); the next call is served",
            |s| contained(s, "spin", "spin", "TIMEOUT", ""),
        ),
        c(
            "comp-stack-overflow-native",
            "`deep`: recurse with small frames until the native wasm stack (1 MiB) overflows",
            "EXECUTION_FAILED: stack overflow; the host thread survives, the next call is served",
            |s| contained(s, "deep", "deep", "EXECUTION_FAILED", "stack overflow"),
        ),
        c(
            "comp-stack-overflow-shadow",
            "`recurse`: recurse with large frames until the component's own shadow stack runs out",
            "EXECUTION_FAILED (out of bounds memory access, a trap); the next call is served",
            |s| contained(s, "recurse", "recurse", "EXECUTION_FAILED", ""),
        ),
        c(
            "comp-output-flood",
            "`flood`: write 64 MiB to stdout and stderr",
            "success, truncated: the pipes are capped at max_output; the next call is served",
            |s| {
                let k = hostile(s, "flood");
                let r = k.call("flood", json!({}));
                let next = serves(&k);
                Observed::new(
                    r.error.is_none() && r.truncated && next,
                    format!("{}; next call served: {next}", brief(&r)),
                )
            },
        ),
        c(
            "comp-huge-result",
            "`huge`: return a 16 MiB string",
            "success, truncated to max_output (64 KiB of JSON)",
            |s| {
                let k = hostile(s, "huge");
                let r = k.call("huge", json!({}));
                let size = r.result.as_ref().map(|v| serde_json::to_vec(v).unwrap().len()).unwrap_or(0);
                Observed::new(
                    r.error.is_none() && r.truncated && size <= 64 << 10 && serves(&k),
                    format!("{}; {size} bytes kept", brief(&r)),
                )
            },
        ),
        c(
            "comp-read-ungranted",
            "`read` of a file in the workspace by a tool with no fs grant at all",
            "PERMISSION_DENIED: nothing is preopened; the content never appears",
            |s| {
                let k = s.kit("read-none", "[tools.read]\nplugin = \"kit\"\n");
                std::fs::write(k.ws.join("private.txt"), &s.secret).unwrap();
                let r = k.call("read", json!({"path": k.ws.join("private.txt")}));
                Observed::new(code(&r) == "PERMISSION_DENIED" && !s.leaks(&text(&r)), brief(&r))
            },
        ),
        c(
            "comp-write-ungranted",
            "`write` of a file in the workspace by a tool with no fs grant at all",
            "PERMISSION_DENIED; nothing created",
            |s| {
                let k = s.kit("write-none", "[tools.write]\nplugin = \"kit\"\n");
                let target = k.ws.join("planted.txt");
                let r = k.call("write", json!({"path": target, "content": "pwned"}));
                let made = target.exists();
                Observed::new(code(&r) == "PERMISSION_DENIED" && !made, format!("{}; created: {made}", brief(&r)))
            },
        ),
        c(
            "comp-connect-ungranted",
            "`connect` to a local TCP listener by a tool with no net grant",
            "PERMISSION_DENIED; the listener sees no connection",
            |s| {
                let l = TcpListener::bind("127.0.0.1:0").unwrap();
                l.set_nonblocking(true).unwrap();
                let k = s.kit("connect-none", "[tools.connect]\nplugin = \"kit\"\n");
                let r = k.call("connect", json!({"addr": l.local_addr().unwrap().to_string()}));
                let arrived = l.accept().is_ok();
                Observed::new(code(&r) == "PERMISSION_DENIED" && !arrived, format!("{}; arrived: {arrived}", brief(&r)))
            },
        ),
        c(
            "comp-grants-per-tool",
            "`read` (granted the workspace) of a directory that only the same plugin's `write` tool is granted",
            "PERMISSION_DENIED: grants belong to the tool, not the plugin",
            |s| {
                let other = s.side_dir("other-tool");
                std::fs::write(other.join("theirs.txt"), &s.secret).unwrap();
                let k = s.kit(
                    "per-tool",
                    &format!(
                        "[tools.read]\nplugin = \"kit\"\nfs.read = [\"{{workspace}}\"]\n[tools.write]\nplugin = \"kit\"\nfs.write = [{:?}]\n",
                        other.display().to_string()
                    ),
                );
                let r = k.call("read", json!({"path": other.join("theirs.txt")}));
                Observed::new(code(&r) == "PERMISSION_DENIED" && !s.leaks(&text(&r)), brief(&r))
            },
        ),
        c(
            "comp-proc-environ",
            "`read` of /proc/self/environ and /proc/1/environ (warden's and init's environment)",
            "refused: /proc is not preopened; the canary never appears",
            |s| {
                let k = s.kit("proc-environ", "[tools.read]\nplugin = \"kit\"\nfs.read = [\"{workspace}\"]\n");
                let a = k.call("read", json!({"path": "/proc/self/environ"}));
                let b = k.call("read", json!({"path": "/proc/1/environ"}));
                let ok = a.error.is_some() && b.error.is_some() && !s.leaks(&text(&a)) && !s.leaks(&text(&b));
                Observed::new(ok, format!("{}; {}", brief(&a), brief(&b)))
            },
        ),
        c(
            "comp-host-environment",
            "`env` through the real warden binary, whose environment holds WARDEN_ESCAPE_CANARY (the secret) and PATH",
            "only WARDEN_WORKSPACE and WARDEN_ROOTS, no arguments; the canary never appears",
            |s| {
                let ws = s.ws("env-c");
                let policy = s.policy_file(&format!("{}[tools.env]\nplugin = \"kit\"\n", kit_header()));
                let r = s.warden(&ws, &["--policy", policy.to_str().unwrap(), "call", "env"], None, None);
                let result: Value = r.doc()["result"].clone();
                let names: Vec<String> = result["env"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(Value::as_str)
                            .map(|e| e.split('=').next().unwrap_or_default().to_string())
                            .collect()
                    })
                    .unwrap_or_default();
                let ok = names == ["WARDEN_WORKSPACE", "WARDEN_ROOTS"]
                    && result["args"] == json!([])
                    && !s.leaks(&r.all())
                    && std::env::var_os("PATH").is_some();
                Observed::new(ok, format!("variables {names:?}, arguments {}", result["args"]))
            },
        ),
    ]
}
