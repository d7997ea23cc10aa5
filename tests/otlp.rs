//! `[audit.otlp]` end to end against a receiver this project did not write the
//! decoder of: `tests/otlp/receiver.py` (python3's http.server on loopback)
//! decodes what warden posts with the OpenTelemetry project's own Python
//! `opentelemetry-proto` messages (in a virtualenv under the target directory,
//! installed on first use). Every record of the local log must arrive with its
//! `seq` and hash, `warden log verify` must pass on the same log, argument
//! values stay home by default, and records made while the receiver was down
//! are sent by the next warden that starts. Waits poll to a deadline.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod util;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use sha2::{Digest, Sha256};
use util::{Env, within};

const OTLP_PROTO: &str = "opentelemetry-proto==1.45.2";
/// A value of a denied call's arguments: it must never reach the receiver.
const ARG_VALUE: &str = "ARGUMENT-VALUE-3e1f-stays-home";
const TOKEN: &str = "otlp-test-token-5b2c";
/// How long a record may take to arrive.
const ARRIVAL: Duration = Duration::from_secs(60);

fn tmp() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).to_path_buf()
}

/// A scratch directory of this uid's own (`.ci/unprivileged` runs suites again as another user).
fn mine(name: &str) -> PathBuf {
    let uid = nix::unistd::geteuid().as_raw();
    tmp().join(if uid == 0 { name.to_string() } else { format!("{name}-{uid}") })
}

/// The virtualenv's python, with `opentelemetry-proto` installed (once per test process).
fn python() -> PathBuf {
    static PY: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    PY.get_or_init(make_venv).clone()
}

fn make_venv() -> PathBuf {
    let venv = mine("otlp-venv");
    let py = venv.join("bin/python");
    let ready = py.is_file()
        && Command::new(&py)
            .args(["-c", "import opentelemetry.proto.collector.logs.v1.logs_service_pb2"])
            .output()
            .is_ok_and(|o| o.status.success());
    if !ready {
        let made = Command::new("python3").arg("-m").arg("venv").arg(&venv).output().unwrap();
        assert!(made.status.success(), "python3 -m venv (install python3-venv): {made:?}");
        let pip = Command::new(&py)
            .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", OTLP_PROTO])
            .output()
            .unwrap();
        assert!(pip.status.success(), "pip install {OTLP_PROTO}: {}", String::from_utf8_lossy(&pip.stderr));
    }
    py
}

/// A running receiver; killed when dropped.
struct Receiver {
    child: Child,
    port: u16,
    out: PathBuf,
}

impl Receiver {
    /// Starts one on `port` (0: any), appending to `out`.
    fn start(dir: &Path, out: &Path, port: u16) -> Receiver {
        let port_file = dir.join(format!("port-{}", std::process::id()));
        let _ = std::fs::remove_file(&port_file);
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/otlp/receiver.py");
        let child = Command::new(python())
            .arg(script)
            .arg(&port_file)
            .arg(out)
            .arg(port.to_string())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let mut r = Receiver { child, port: 0, out: out.to_path_buf() };
        assert!(within(Duration::from_secs(30), || port_file.is_file()), "the receiver did not start");
        r.port = std::fs::read_to_string(&port_file).unwrap().trim().parse().unwrap();
        r
    }

    /// What it received so far: every log record and span, decoded.
    fn received(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.out)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn policy(port: u16, extra: &str) -> String {
    format!(
        r#"version = 1

[plugins.fs]
source = "builtin:fs"

[tools.read_file]
plugin = "fs"
tier = "auto"
fs.read = ["{{workspace}}"]

[tools.write_file]
plugin = "fs"
tier = "deny"
fs.write = ["{{workspace}}"]

[audit.otlp]
endpoint = "http://127.0.0.1:{port}"
headers = {{ x-test-token = {{ env = "WARDEN_TEST_OTLP_TOKEN" }} }}
spans = true
{extra}
"#
    )
}

fn call(env: &Env, tool: &str, args: &str) -> util::Run {
    let mut c = env.command(&["--policy", "warden.toml", "call", tool, args]);
    c.env("WARDEN_TEST_OTLP_TOKEN", TOKEN);
    util::run_to_end(c, None)
}

/// The local log's records: (seq, sha256 of the line, the record).
fn local(env: &Env) -> Vec<(u64, String, Value)> {
    std::fs::read_to_string(&env.log)
        .unwrap()
        .lines()
        .filter(|l| !l.trim_matches('\0').is_empty())
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            (v["seq"].as_u64().unwrap(), hex::encode(Sha256::digest(l.as_bytes())), v)
        })
        .collect()
}

/// An attribute of a decoded log record or span, as protobuf's JSON mapping writes it.
fn attr<'a>(item: &'a Value, key: &str) -> Option<&'a Value> {
    item["attributes"].as_array()?.iter().find(|a| a["key"] == key).map(|a| &a["value"])
}

/// The (seq, hash) of each log record received.
fn received_chain(received: &[Value]) -> Vec<(u64, String)> {
    received
        .iter()
        .filter(|e| e["kind"] == "log")
        .map(|e| {
            let r = &e["record"];
            let seq = attr(r, "warden.audit.seq").and_then(|v| v["intValue"].as_str()).unwrap().parse().unwrap();
            let hash = attr(r, "warden.audit.hash").and_then(|v| v["stringValue"].as_str()).unwrap().to_string();
            (seq, hash)
        })
        .collect()
}

fn verify(env: &Env) {
    let v = env.run(&["log", "verify"]);
    assert_eq!(v.code, 0, "warden log verify: {v:?}");
}

#[test]
fn every_record_reaches_a_real_otlp_receiver_with_its_seq_and_hash() {
    let env = Env::new();
    let rx = Receiver::start(env.root.path(), &env.root.path().join("received.jsonl"), 0);
    env.write("warden.toml", &policy(rx.port, ""));
    env.write("hello.txt", "hello\n");
    assert!(call(&env, "read_file", r#"{"path":"hello.txt"}"#).success());
    let denied = call(&env, "write_file", &format!(r#"{{"path":"x.txt","content":"{ARG_VALUE}"}}"#));
    assert!(!denied.success(), "{denied:?}");
    let missing = call(&env, "read_file", r#"{"path":"missing.txt"}"#);
    assert!(!missing.success(), "{missing:?}");

    let records = local(&env);
    assert_eq!(records.len(), 3, "{records:?}");
    let want: Vec<(u64, String)> = records.iter().map(|(s, h, _)| (*s, h.clone())).collect();
    let arrived = within(ARRIVAL, || {
        let got = received_chain(&rx.received());
        want.iter().all(|w| got.contains(w))
    });
    let received = rx.received();
    assert!(arrived, "not every record arrived: want {want:?}, got {:?}", received_chain(&received));
    verify(&env);

    let logs: Vec<&Value> = received.iter().filter(|e| e["kind"] == "log").collect();
    let first = logs.iter().find(|e| attr(&e["record"], "gen_ai.tool.name").unwrap()["stringValue"] == "write_file");
    eprintln!("OTLP log record as received:\n{}", serde_json::to_string_pretty(first.unwrap()).unwrap());
    for e in &logs {
        let r = &e["record"];
        assert_eq!(e["headers"]["token"], TOKEN, "the header from the environment: {e}");
        assert_eq!(e["headers"]["content_type"], "application/x-protobuf");
        assert_eq!(e["scope"], "warden.audit");
        assert_eq!(attr(r, "mcp.method.name").unwrap()["stringValue"], "tools/call");
        let seq: u64 = attr(r, "warden.audit.seq").unwrap()["intValue"].as_str().unwrap().parse().unwrap();
        let (_, _, rec) = records.iter().find(|(s, _, _)| *s == seq).unwrap();
        assert_eq!(attr(r, "warden.audit.prev").unwrap()["stringValue"], rec["prev"]);
        let severity = r["severityText"].as_str().unwrap();
        match rec["decision"].as_str().unwrap() {
            "denied" => assert_eq!(severity, "WARN", "{r}"),
            _ if rec["status"] == "error" => assert_eq!(severity, "ERROR", "{r}"),
            _ => assert_eq!(severity, "INFO", "{r}"),
        }
    }
    // Argument values stay in the local log (arguments = "shape", the default); their shape goes.
    let text = serde_json::to_string(&received).unwrap();
    assert!(!text.contains(ARG_VALUE), "an argument value left warden: {text}");
    assert!(text.contains(&format!("string({})", ARG_VALUE.len())), "no argument shape: {text}");
    assert!(std::fs::read_to_string(&env.log).unwrap().contains(ARG_VALUE), "the local log keeps the value");

    // One span per call, named after the MCP conventions.
    let spans: Vec<&Value> = received.iter().filter(|e| e["kind"] == "span").collect();
    assert!(within(ARRIVAL, || rx.received().iter().filter(|e| e["kind"] == "span").count() >= 3));
    let names: Vec<String> = rx
        .received()
        .iter()
        .filter(|e| e["kind"] == "span")
        .map(|e| e["span"]["name"].as_str().unwrap().to_string())
        .collect();
    for tool in ["read_file", "write_file"] {
        assert!(names.contains(&format!("tools/call {tool}")), "{names:?} ({} spans at first look)", spans.len());
    }
}

#[test]
fn records_made_while_the_receiver_was_down_are_sent_by_the_next_warden() {
    let env = Env::new();
    let out = env.root.path().join("received.jsonl");
    // A port that was free a moment ago: nothing listens on it while the first calls run.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    env.write("warden.toml", &policy(port, "flush = \"300ms\""));
    env.write("hello.txt", "hello\n");
    for _ in 0..3 {
        assert!(call(&env, "read_file", r#"{"path":"hello.txt"}"#).success());
    }
    assert_eq!(local(&env).len(), 3);
    let cursor = warden_otlp_cursor(&env.log);
    assert!(cursor.as_ref().is_none_or(|c| c["seq"] == 0), "nothing was accepted, yet the cursor moved: {cursor:?}");

    let rx = Receiver::start(env.root.path(), &out, port);
    assert!(call(&env, "read_file", r#"{"path":"hello.txt"}"#).success());
    let want: Vec<(u64, String)> = local(&env).iter().map(|(s, h, _)| (*s, h.clone())).collect();
    assert_eq!(want.len(), 4);
    let arrived = within(ARRIVAL, || {
        let got = received_chain(&rx.received());
        want.iter().all(|w| got.contains(w))
    });
    assert!(arrived, "want {want:?}, got {:?}", received_chain(&rx.received()));
    verify(&env);
    // The cursor names the last record, by seq and hash.
    let c = warden_otlp_cursor(&env.log).unwrap();
    assert_eq!((c["seq"].as_u64().unwrap(), c["hash"].as_str().unwrap().to_string()), want[3]);
}

/// Every record of the log, its rotated files first: (seq, sha256 of the line).
fn all_files(env: &Env) -> Vec<(u64, String)> {
    let dir = env.log.parent().unwrap();
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("audit.0"))
        .collect();
    files.sort();
    files.push(env.log.clone());
    let mut out = Vec::new();
    for f in files {
        for l in std::fs::read_to_string(&f).unwrap().lines() {
            let v: Value = serde_json::from_str(l).unwrap();
            out.push((v["seq"].as_u64().unwrap(), hex::encode(Sha256::digest(l.as_bytes()))));
        }
    }
    out
}

#[test]
fn records_rotated_away_while_the_receiver_was_down_are_sent_from_the_rotated_files() {
    let env = Env::new();
    let out = env.root.path().join("received.jsonl");
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    env.write("warden.toml", &format!("{}\n[audit]\nrotate = \"1KiB\"\n", policy(port, "flush = \"300ms\"")));
    env.write("hello.txt", "hello\n");
    for _ in 0..8 {
        assert!(call(&env, "read_file", r#"{"path":"hello.txt"}"#).success());
    }
    let rotated = std::fs::read_dir(env.log.parent().unwrap())
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("audit.0"))
        .count();
    assert!(rotated >= 2, "the log did not rotate: {rotated} rotated files");
    let rx = Receiver::start(env.root.path(), &out, port);
    assert!(call(&env, "read_file", r#"{"path":"hello.txt"}"#).success());
    let want = all_files(&env);
    assert_eq!(want.len(), 9, "{want:?}");
    let arrived = within(ARRIVAL, || {
        let got = received_chain(&rx.received());
        want.iter().all(|w| got.contains(w))
    });
    assert!(arrived, "want {want:?}, got {:?}", received_chain(&rx.received()));
    verify(&env);
}

#[test]
fn a_header_whose_variable_is_unset_is_an_error_naming_it() {
    let env = Env::new();
    env.write("warden.toml", &policy(9, ""));
    let r = util::run_to_end(env.command(&["--policy", "warden.toml", "call", "read_file", "{}"]), None);
    assert_ne!(r.code, 0, "{r:?}");
    assert!(r.stderr.contains("WARDEN_TEST_OTLP_TOKEN"), "{r:?}");
    // A literal value in the policy is refused at its line.
    env.write("warden.toml", &policy(9, "").replace(r#"{ env = "WARDEN_TEST_OTLP_TOKEN" }"#, r#""literal""#));
    let r = env.run(&["--policy", "warden.toml", "policy", "check"]);
    assert_ne!(r.code, 0, "{r:?}");
    assert!(r.all().contains("audit.otlp.headers.x-test-token"), "{r:?}");
}

fn warden_otlp_cursor(log: &Path) -> Option<Value> {
    let mut name = log.file_name().unwrap().to_os_string();
    name.push(".otlp-cursor");
    std::fs::read(log.with_file_name(name)).ok().map(|b| serde_json::from_slice(&b).unwrap())
}
