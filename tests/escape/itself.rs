//! Attacks on warden itself rather than on what a tool may reach: starving the
//! HTTP server of descriptors before authenticating, and filling the disk that
//! holds the audit log while a call runs, so that its record is lost or torn.
//! (The tool's own routes to warden's process, prlimit64, scheduling calls and
//! SIGIO, are in `privilege.rs`; the approval preview in `hostside.rs`.)

use std::io::{BufRead, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::scene::WARDEN;
use crate::util::cache_dir;
use crate::{Case, Observed, Scene};

const CLASS: &str = "warden";

fn heavy(id: &'static str, attempt: &'static str, expected: &'static str, run: fn(&Scene) -> Observed) -> Case {
    Case { id, class: CLASS, runtime: "process", attempt, expected, heavy: true, run }
}

pub(crate) fn cases() -> Vec<Case> {
    vec![
        heavy(
            "warden-http-slowloris",
            "open 2,000 TCP connections to `warden serve --http` (itself under ulimit -n 1024) that never \
             authenticate (idle, or a header left unfinished), then call tools/list and read_file with the token",
            "the authenticated calls are answered promptly; every idle connection is closed (evicted at the cap or by \
             the header timeout); warden's stderr stays a few lines",
            slowloris,
        ),
        heavy(
            "warden-disk-fill",
            "a shell call fills the file system that holds both the workspace and the audit log (dd until ENOSPC), \
             with a record larger than a page",
            "the call's record is whole and last, the chain verifies; the next call does not run (INTERNAL) until \
             space is freed",
            disk_fill,
        ),
    ]
}

/// A `warden serve --http` child, killed when dropped.
struct Served(std::process::Child);

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

const TOKEN: &str = "slowloris-battery-token-0123456789";

/// One authenticated MCP request on a fresh connection: the status line and the body.
fn post(addr: SocketAddr, body: &Value) -> Result<(String, String), String> {
    let mut method = body["method"].as_str().unwrap_or_default().to_string();
    if let Some(name) = body["params"]["name"].as_str() {
        method = format!("{method}\r\nMcp-Name: {name}");
    }
    let body = body.to_string();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\nMcp-Method: {method}\r\n\
         Connection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(10)).map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(20))).map_err(|e| e.to_string())?;
    s.write_all(head.as_bytes()).map_err(|e| format!("send: {e}"))?;
    let mut out = String::new();
    s.read_to_string(&mut out).map_err(|e| format!("no answer: {e}"))?;
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    Ok((head.lines().next().unwrap_or_default().to_string(), body.to_string()))
}

fn slowloris(s: &Scene) -> Observed {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    const IDLE: usize = 2000;
    const HEADER_TIMEOUT_MS: u64 = 1500;
    // This process holds the 2,000 client sockets.
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    if soft < hard {
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard).unwrap();
    }
    if hard < IDLE as u64 + 300 {
        return Observed::skipped(format!("RLIMIT_NOFILE's hard limit is {hard}, fewer than the attack needs"));
    }
    let ws = s.ws("slowloris");
    std::fs::write(ws.join("four.txt"), "1\n2\n3\n4\n").unwrap();
    let log = s.base.join("logs").join("slowloris.jsonl");
    // warden runs with 1,024 descriptors, fewer than the attack's connections.
    let mut c = Command::new("sh");
    c.arg("-c")
        .arg("ulimit -n 1024 && exec \"$0\" \"$@\"")
        .arg(WARDEN)
        .arg("--audit-log")
        .arg(&log)
        .arg("--workspace")
        .arg(&ws)
        .args(["serve", "--http", "127.0.0.1:0"])
        .current_dir(&ws)
        .env("WARDEN_HTTP_TOKEN", TOKEN)
        .env("WARDEN_HTTP_HEADER_TIMEOUT_MS", HEADER_TIMEOUT_MS.to_string())
        .env("WARDEN_CACHE_DIR", cache_dir())
        .env("HOME", s.base.join("home"))
        .env_remove("WARDEN_HTTP_MAX_CONNECTIONS")
        .env_remove("WARDEN_HTTP_IDLE_TIMEOUT_MS")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = Served(c.spawn().unwrap());
    let mut stderr = std::io::BufReader::new(child.0.stderr.take().unwrap());
    let mut line = String::new();
    let addr: SocketAddr = loop {
        line.clear();
        if stderr.read_line(&mut line).unwrap_or(0) == 0 {
            return Observed::new(false, "warden serve --http exited before it listened");
        }
        if let Some(rest) = line.split("serving MCP at http://").nth(1) {
            break rest.split('/').next().unwrap_or_default().parse().unwrap();
        }
    };
    let drain = std::thread::spawn(move || {
        let (mut total, mut buf) = (0usize, [0u8; 8192]);
        while let Ok(n) = stderr.read(&mut buf) {
            if n == 0 {
                break;
            }
            total += n;
        }
        total
    });

    let started = Instant::now();
    let mut idle = Vec::with_capacity(IDLE);
    for i in 0..IDLE {
        match TcpStream::connect_timeout(&addr, Duration::from_secs(10)) {
            Ok(mut t) => {
                if i % 4 == 0 {
                    let _ = t.write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: appl");
                }
                idle.push(t);
            }
            Err(e) => return Observed::new(false, format!("idle connection {i} could not connect: {e}")),
        }
    }
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                      "io.modelcontextprotocol/clientCapabilities": {}});
    let calls = Instant::now();
    let mut answered = Vec::new();
    for id in 1..=3 {
        let r = post(addr, &json!({"jsonrpc": "2.0", "id": id, "method": "tools/list", "params": {"_meta": meta}}));
        answered
            .push(matches!(&r, Ok((status, body)) if status.starts_with("HTTP/1.1 200") && body.contains("read_file")));
    }
    let r = post(
        addr,
        &json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
                "params": {"name": "read_file", "arguments": {"path": "four.txt"}, "_meta": meta}}),
    );
    answered.push(
        matches!(&r, Ok((status, body)) if status.starts_with("HTTP/1.1 200") && body.contains("1\\n2\\n3\\n4\\n")),
    );
    let calls = calls.elapsed();

    let deadline = Instant::now() + Duration::from_millis(HEADER_TIMEOUT_MS) + Duration::from_secs(8);
    let mut still_open = 0;
    for t in idle.iter_mut() {
        let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
        let _ = t.set_read_timeout(Some(left));
        match t.read(&mut [0u8; 64]) {
            Ok(0) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            _ => still_open += 1,
        }
    }
    let closed = started.elapsed();
    drop(idle);
    drop(child);
    let stderr_bytes = drain.join().unwrap_or(usize::MAX);
    let ok_calls = answered.iter().filter(|a| **a).count();
    Observed::new(
        ok_calls == 4 && calls < Duration::from_secs(20) && still_open == 0 && stderr_bytes < 4096,
        format!(
            "{ok_calls}/4 authenticated calls answered in {calls:.2?} beside {IDLE} idle connections; \
             {still_open} idle connections still open {closed:.2?} after the first; warden wrote {stderr_bytes} \
             bytes to stderr"
        ),
    )
}

/// Unmounts its directory when dropped.
struct Mounted(std::path::PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

fn disk_fill(s: &Scene) -> Observed {
    if !s.root {
        return Observed::skipped("mounting a small file system to fill needs root (CI's root run attempts it)");
    }
    let small = s.side_dir("small-fs");
    let mounted = Command::new("mount").args(["-t", "tmpfs", "-o", "size=4m", "tmpfs"]).arg(&small).status();
    if !mounted.is_ok_and(|m| m.success()) {
        return Observed::skipped("cannot mount a 4 MiB tmpfs");
    }
    let _mounted = Mounted(small.clone());
    let log = small.join("audit.jsonl");
    let ws = small.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let ws = ws.canonicalize().unwrap();
    let policy = s.policy_file(&Scene::shell_policy(crate::scene::SHELL));
    let p = policy.to_str().unwrap();
    let call = |command: &str| {
        let args = json!({ "command": command }).to_string();
        s.warden_logged(&ws, &log, &["--policy", p, "call", "shell", &args], None, None)
    };
    let first = call("true");
    let fill = call(&format!("dd if=/dev/zero of=fill bs=64k; echo filled # {}", "p".repeat(4000)));
    let free = nix::sys::statvfs::statvfs(&small).map(|f| f.blocks_available() * f.fragment_size()).unwrap_or(0);
    let v = warden::audit::verify(&log).ok();
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let last: Value = text.lines().last().and_then(|l| serde_json::from_str(l).ok()).unwrap_or(Value::Null);
    let fill_id = fill.doc()["call_id"].clone();
    let recorded = v.as_ref().is_some_and(|v| v.records == 2 && v.torn_line.is_none() && v.problem.is_none())
        && last["call_id"] == fill_id
        && last["status"] == "success"
        && text.lines().last().is_some_and(|l| l.len() > 4096);
    let next = call("touch after");
    let refused = next.error_code() == "INTERNAL" && !Path::new(&ws.join("after")).exists();
    let _ = std::fs::remove_file(ws.join("fill"));
    let again = call("true");
    let verifies = warden::audit::verify(&log).is_ok_and(|v| v.records == 4 && v.problem.is_none());
    Observed::new(
        first.success()
            && fill.success()
            && fill.err().contains("No space left on device")
            && free < 64 << 10
            && recorded
            && refused
            && again.success()
            && verifies,
        format!(
            "fill: {}; {free} bytes left; its record whole and last, the chain verifying: {recorded}; the next call: \
             {}; after freeing space: {}; the log verifies with 4 records: {verifies}",
            fill.brief(),
            next.brief(),
            again.brief()
        ),
    )
}
