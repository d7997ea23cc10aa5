//! Community tools as components: a real third-party CLI (ripgrep, from
//! crates.io, compiled here for wasm32-wasip2) run as a `kind = "command"`
//! tool; pinning (a flipped byte) and `warden.lock` (a changed definition) for
//! `warden:plugin` components.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

const WARDEN: &str = env!("CARGO_BIN_EXE_warden");
const TESTKIT: &str = warden::runtime::builtin::TESTKIT_WASM;
/// The crates.io CLI the command-component tests run.
const RIPGREP: &str = "ripgrep@15.2.0";

static BUILD: Mutex<()> = Mutex::new(());

/// ripgrep compiled for wasm32-wasip2 from crates.io (with its own Cargo.lock),
/// built once under the target directory.
fn ripgrep_wasm() -> PathBuf {
    let _once = BUILD.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("ripgrep-wasm");
    let wasm = root.join("bin").join("rg.wasm");
    if !wasm.is_file() {
        let out = Command::new(env!("CARGO"))
            .args(["install", RIPGREP, "--locked", "--quiet", "--target", "wasm32-wasip2", "--root"])
            .arg(&root)
            .arg("--target-dir")
            .arg(root.join("build"))
            .env_remove("RUSTFLAGS")
            .env_remove("CARGO_TARGET_DIR")
            .output()
            .expect("cannot run cargo install");
        assert!(
            out.status.success(),
            "cargo install {RIPGREP} for wasm32-wasip2 failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    wasm
}

struct Scene {
    _dir: tempfile::TempDir,
    root: PathBuf,
    ws: PathBuf,
    policy: PathBuf,
}

impl Scene {
    fn new(policy: &str) -> Scene {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let ws = root.join("ws");
        std::fs::create_dir_all(ws.join("src")).unwrap();
        std::fs::write(ws.join("src/main.rs"), "fn main() { println!(\"needle in the workspace\"); }\n").unwrap();
        std::fs::write(root.join("outside.txt"), "needle outside the workspace\n").unwrap();
        let policy_path = root.join("warden.toml");
        std::fs::write(&policy_path, policy).unwrap();
        Scene { _dir: dir, root, ws, policy: policy_path }
    }

    fn warden(&self, args: &[&str]) -> Output {
        Command::new(WARDEN)
            .arg("--policy")
            .arg(&self.policy)
            .arg("--workspace")
            .arg(&self.ws)
            .arg("--audit-log")
            .arg(self.root.join("audit.jsonl"))
            .args(args)
            .env("WARDEN_CACHE_DIR", Path::new(env!("CARGO_TARGET_TMPDIR")).join("warden-test-cache"))
            .env("RUST_LOG", "warn")
            .output()
            .unwrap()
    }

    fn call(&self, tool: &str, args: Value) -> (Value, Output) {
        let out = self.warden(&["call", tool, &args.to_string()]);
        let doc = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stderr)));
        (doc, out)
    }
}

fn sha256_file(p: &Path) -> String {
    hex::encode(Sha256::digest(std::fs::read(p).unwrap()))
}

fn ripgrep_policy(rg: &Path) -> String {
    format!(
        r#"version = 1

[plugins.rg]
source = "{rg}"
sha256 = "{sha}"
kind = "command"

[tools.search]
plugin = "rg"
description = "Search files under a path with ripgrep"
args = ["--no-config", "--json", "-e", "{{pattern}}", "--", "{{path}}"]
input_schema = '{{"type":"object","properties":{{"pattern":{{"type":"string","maxLength":1000}},"path":{{"type":"string","format":"path","maxLength":4096}}}},"required":["pattern","path"],"additionalProperties":false}}'
tier = "auto"
fs.read = ["{{workspace}}"]
limits = {{ memory = "512MiB", timeout = "20s" }}

# The same program with a free-form path: nothing but the sandbox stands
# between the argument and the host.
[tools.search_anywhere]
plugin = "rg"
args = ["--no-config", "-e", "{{pattern}}", "--", "{{target}}"]
tier = "auto"
fs.read = ["{{workspace}}"]
limits = {{ memory = "512MiB", timeout = "20s" }}
"#,
        rg = rg.display(),
        sha = sha256_file(rg)
    )
}

#[test]
fn a_third_party_cli_runs_as_a_command_component_inside_its_preopen() {
    let rg = ripgrep_wasm();
    let s = Scene::new(&ripgrep_policy(&rg));

    let (doc, out) = s.call("search", json!({"pattern": "needle", "path": "src"}));
    assert_eq!(doc["status"], "success", "{doc} {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(doc["result"]["exit_code"], 0, "{doc}");
    let stdout = doc["result"]["stdout"].as_str().unwrap();
    let matches: Vec<Value> =
        stdout.lines().map(|l| serde_json::from_str::<Value>(l).unwrap()).filter(|m| m["type"] == "match").collect();
    assert_eq!(matches.len(), 1, "{stdout}");
    assert_eq!(matches[0]["data"]["path"]["text"], s.ws.join("src/main.rs").display().to_string());

    // No match: ripgrep's exit code 1 is reported, not turned into an error.
    let (doc, _) = s.call("search", json!({"pattern": "absent-word", "path": "src"}));
    assert_eq!((doc["status"].as_str(), doc["result"]["exit_code"].as_i64()), (Some("success"), Some(1)), "{doc}");

    // A path argument outside the grants is refused before anything runs.
    let outside = s.root.join("outside.txt").display().to_string();
    let (doc, _) = s.call("search", json!({"pattern": "needle", "path": outside}));
    assert_eq!(doc["error"]["code"], "INVALID_PATH", "{doc}");

    // A free-form argument reaches the program; the preopen refuses the read.
    let secret_dirs = [outside.as_str(), "../outside.txt", "/etc/passwd", "/proc/self/environ", "/root", "/tmp"];
    for target in secret_dirs {
        let (doc, _) = s.call("search_anywhere", json!({"pattern": ".", "target": target}));
        assert_eq!(doc["status"], "success", "{target}: {doc}");
        let r = &doc["result"];
        assert_ne!(r["exit_code"], 0, "{target}: {doc}");
        assert_eq!(r["stdout"], "", "{target} leaked: {doc}");
        assert!(r["stderr"].as_str().unwrap().contains(target), "{target}: {doc}");
    }
    // The guest's "/" is its own view: only the workspace (the "." preopen) is in it.
    let (doc, _) = s.call("search_anywhere", json!({"pattern": ".", "target": "/"}));
    let seen = doc["result"]["stdout"].as_str().unwrap();
    assert!(seen.contains("needle in the workspace") && !seen.contains("outside") && !seen.contains("root:"), "{doc}");
    // Relative paths resolve in the workspace (the "." preopen).
    let (doc, _) = s.call("search_anywhere", json!({"pattern": "needle", "target": "."}));
    assert_eq!(doc["result"]["exit_code"], 0, "{doc}");
    assert!(doc["result"]["stdout"].as_str().unwrap().contains("src/main.rs"), "{doc}");

    // The audit record says it ran as a component.
    let log = std::fs::read_to_string(s.root.join("audit.jsonl")).unwrap();
    let last: Value = serde_json::from_str(log.lines().last().unwrap()).unwrap();
    assert_eq!(last["sandbox"]["runtime"], "component", "{last}");
}

#[test]
fn inspect_says_a_command_program_is_one() {
    let rg = ripgrep_wasm();
    let s = Scene::new("version = 1\n");
    let out = s.warden(&["plugin", "inspect", "--json", rg.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["kind"], "command", "{doc}");
    assert_eq!(doc["sha256"], sha256_file(&rg));
    assert!(
        doc["imports"].as_array().unwrap().iter().any(|i| i["name"].as_str().unwrap().starts_with("wasi:filesystem"))
    );
}

#[test]
fn a_command_component_is_refused_as_a_plugin_and_vice_versa() {
    let rg = ripgrep_wasm();
    let policy = format!(
        "version = 1\n[plugins.rg]\nsource = \"{}\"\nsha256 = \"{}\"\n[tools.search]\nplugin = \"rg\"\n",
        rg.display(),
        sha256_file(&rg)
    );
    let s = Scene::new(&policy);
    let (doc, _) = s.call("search", json!({}));
    let msg = doc["error"]["message"].as_str().unwrap();
    assert!(msg.contains("kind = \\\"command\\\"") || msg.contains("kind = \"command\""), "{msg}");

    let policy = format!(
        "version = 1\n[plugins.kit]\nsource = \"{TESTKIT}\"\nsha256 = \"{}\"\nkind = \"command\"\n[tools.echo]\nplugin = \"kit\"\nargs = [\"x\"]\n",
        sha256_file(Path::new(TESTKIT))
    );
    let s = Scene::new(&policy);
    let (doc, _) = s.call("echo", json!({}));
    assert!(doc["error"]["message"].as_str().unwrap().contains("not a wasi:cli/command component"), "{doc}");
}

fn kit_policy(file: &Path, sha: &str) -> String {
    format!(
        "version = 1\n[plugins.kit]\nsource = \"{}\"\nsha256 = \"{sha}\"\n\
         [tools.echo]\nplugin = \"kit\"\ntier = \"auto\"\n[tools.env]\nplugin = \"kit\"\ntier = \"auto\"\n",
        file.display()
    )
}

#[test]
fn a_flipped_byte_is_refused_with_both_hashes() {
    let s = Scene::new("version = 1\n");
    let file = s.root.join("kit.wasm");
    let mut bytes = std::fs::read(TESTKIT).unwrap();
    let pinned = hex::encode(Sha256::digest(&bytes));
    let at = bytes.len() / 2;
    bytes[at] ^= 0x01;
    std::fs::write(&file, &bytes).unwrap();
    std::fs::write(&s.policy, kit_policy(&file, &pinned)).unwrap();
    let (doc, out) = s.call("echo", json!({}));
    let msg = doc["error"]["message"].as_str().unwrap();
    assert!(msg.contains(&pinned) && msg.contains(&sha256_file(&file)), "{msg}");
    assert_eq!(out.status.code(), Some(3));
}

#[test]
fn warden_lock_pins_definitions_and_refuses_a_changed_one() {
    let s = Scene::new("version = 1\n");
    std::fs::write(&s.policy, kit_policy(Path::new(TESTKIT), &sha256_file(Path::new(TESTKIT)))).unwrap();
    let lock = s.root.join("warden.lock");

    // No lock: runs, with a warning that nothing is pinned.
    let (doc, out) = s.call("echo", json!({"a": 1}));
    assert_eq!(doc["status"], "success", "{doc}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("warden lock"));

    let out = s.warden(&["lock"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(&lock).unwrap();
    assert!(text.contains("[plugins.\"kit\"]") && text.contains("\"echo\" = \"sha256:"), "{text}");
    let (doc, out) = s.call("echo", json!({"a": 1}));
    assert_eq!(doc["status"], "success", "{doc}");
    assert!(!String::from_utf8_lossy(&out.stderr).contains("not pinned"));
    assert!(s.warden(&["lock", "--check"]).status.success());

    // The definition no longer matches the lock (as if the component had changed it).
    let changed = text
        .lines()
        .map(|l| if l.starts_with("\"echo\"") { format!("\"echo\" = \"sha256:{}\"", "0".repeat(64)) } else { l.into() })
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(&lock, changed).unwrap();
    let (doc, out) = s.call("echo", json!({"a": 1}));
    assert_eq!(doc["error"]["code"], "DENIED", "{doc}");
    assert!(doc["error"]["message"].as_str().unwrap().contains("rug pull"), "{doc}");
    assert_eq!(out.status.code(), Some(3));
    let (doc, _) = s.call("env", json!({}));
    assert_eq!(doc["status"], "success", "the unchanged tool still runs: {doc}");
    let listed = String::from_utf8_lossy(&s.warden(&["list"]).stdout).to_string();
    assert!(listed.lines().any(|l| l.starts_with("echo") && l.contains("UNAVAILABLE")), "{listed}");
    let check = s.warden(&["lock", "--check"]);
    assert_eq!(check.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&check.stdout).contains("CHANGED  plugin kit: echo"));

    // A plugin the lock does not know is refused.
    std::fs::write(&lock, "version = 1\n").unwrap();
    let (doc, _) = s.call("echo", json!({}));
    assert!(doc["error"]["message"].as_str().unwrap().contains("is not in"), "{doc}");
    // A lock that cannot be read refuses everything it would check.
    std::fs::write(&lock, "version = 1\n[plugins.kit\n").unwrap();
    let (doc, _) = s.call("echo", json!({}));
    assert!(doc["error"]["message"].as_str().unwrap().contains("cannot be read"), "{doc}");

    assert!(s.warden(&["lock"]).status.success());
    let (doc, _) = s.call("echo", json!({"b": 2}));
    assert_eq!(doc["status"], "success", "{doc}");
}
