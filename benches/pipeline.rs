//! `cargo bench --bench pipeline`: the cost of a component call through warden's
//! whole pipeline, against baselines measured in the same run.
//!
//! * floor: `std::fs::read` of the same 4 KiB file in-process;
//! * warden in-process: `Executor::call(read_file)`, warm engine, a fresh instance
//!   per call, the audit record fsynced to a file;
//! * `cat` of the file as a process;
//! * `warden call read_file` as a whole process, warm compile cache and empty cache;
//! * process tools: a bare `sh -c true` spawn, warden's `shell` running `true`
//!   through the whole pipeline (engine loaded), `bwrap --ro-bind / / true` and
//!   `firejail --noprofile true` when installed.
//!
//! * MCP: `read_file` round trip over stdio from a persistent client to
//!   `warden serve`, and calls per second with 8 concurrent clients (each with its
//!   own server, as stdio agents have); `warden serve` RSS idle and after the calls.
//!
//! Prints a table of medians and ratios and writes `target/bench.json`.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;
use warden::approval::{ApproveMode, Approver};
use warden::audit::AuditLog;
use warden::policy::Context;
use warden::{Executor, Policy, ToolCall};

fn percentile(mut v: Vec<Duration>, p: f64) -> Duration {
    v.sort();
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn measure(n: usize, mut f: impl FnMut()) -> Vec<Duration> {
    (0..n)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect()
}

/// A persistent raw MCP client of `warden serve` on stdio.
struct McpClient {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: std::io::BufReader<std::process::ChildStdout>,
    next: u64,
}

impl McpClient {
    fn start(warden: &str, ws: &Path, log: &Path, cache: &Path) -> McpClient {
        let mut child = Command::new(warden)
            .current_dir(ws)
            .arg("--audit-log")
            .arg(log)
            .arg("serve")
            .env("WARDEN_CACHE_DIR", cache)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut c = McpClient { child, stdin, stdout, next: 1 };
        c.request("initialize", json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}));
        c.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        c
    }

    fn send(&mut self, v: &serde_json::Value) {
        use std::io::Write;
        let mut line = serde_json::to_vec(v).unwrap();
        line.push(b'\n');
        self.stdin.write_all(&line).unwrap();
        self.stdin.flush().unwrap();
    }

    fn request(&mut self, method: &str, params: serde_json::Value) -> serde_json::Value {
        use std::io::BufRead;
        let id = self.next;
        self.next += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        let mut line = String::new();
        loop {
            line.clear();
            assert!(self.stdout.read_line(&mut line).unwrap() > 0, "warden serve closed stdout");
            let v: serde_json::Value = serde_json::from_str(&line).unwrap();
            if v["id"] == id {
                return v;
            }
        }
    }

    fn read_file(&mut self) {
        let r = self.request("tools/call", json!({"name": "read_file", "arguments": {"path": "four.txt"}}));
        assert_eq!(r["result"]["isError"], false, "{r}");
    }

    fn rss_kb(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap()
    }
}

impl Drop for McpClient {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let ws = ws.canonicalize().unwrap();
    let file = ws.join("four.txt");
    std::fs::write(&file, "abcdefghijklmno\n".repeat(256)).unwrap();
    let cache = dir.path().join("cache");

    let ctx = Context { workspace: ws.clone(), home: dir.path().into(), cache: dir.path().into() };
    let policy = Policy::embedded_default(&ctx).unwrap();
    let log = AuditLog::open(&dir.path().join("audit.jsonl")).unwrap();
    let warden_bin = env!("CARGO_BIN_EXE_warden");
    let exec = Executor::new(
        policy,
        Approver::new(ApproveMode::Yes),
        log,
        warden::Options {
            cache_dir: Some(cache.clone()),
            sandbox_helper: Some(env!("CARGO_BIN_EXE_warden-sandbox").into()),
        },
    )
    .unwrap();
    let call = || {
        let r = exec.call(ToolCall::new("read_file", json!({"path": "four.txt"})));
        assert_eq!(r.exit_code(), 0, "{r:?}");
    };

    let floor = measure(20_000, || {
        std::hint::black_box(std::fs::read(&file).unwrap());
    });
    for _ in 0..200 {
        call();
    }
    let pipeline = measure(2_000, call);
    let cat = measure(300, || {
        let s = Command::new("cat").arg(&file).stdout(Stdio::null()).status().unwrap();
        assert!(s.success());
    });
    let cli = |cache: &Path| {
        let out = Command::new(warden_bin)
            .current_dir(&ws)
            .args(["--audit-log"])
            .arg(dir.path().join("cli-audit.jsonl"))
            .args(["call", "read_file", r#"{"path":"four.txt"}"#])
            .env("WARDEN_CACHE_DIR", cache)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(out.success());
    };
    cli(&cache);
    let cli_warm = measure(100, || cli(&cache));
    let mut i = 0;
    let cli_cold = measure(5, || {
        i += 1;
        cli(&dir.path().join(format!("empty-cache-{i}")));
    });

    let spawn = |program: &str, args: &[&str]| {
        let s = Command::new(program).args(args).stdout(Stdio::null()).stderr(Stdio::null()).status().unwrap();
        assert!(s.success(), "{program} {args:?}");
    };
    let bare = measure(300, || spawn("/bin/sh", &["-c", "true"]));
    let shell = || {
        let r = exec.call(ToolCall::new("shell", json!({"command": "true"})));
        assert_eq!(r.exit_code(), 0, "{r:?}");
    };
    shell();
    let shell_true = measure(300, shell);
    let mut extra = Vec::new();
    if Path::new("/usr/bin/bwrap").exists() {
        let v = measure(300, || spawn("/usr/bin/bwrap", &["--ro-bind", "/", "/", "/bin/true"]));
        extra.push(("bwrap --ro-bind / / true", percentile(v.clone(), 0.5), percentile(v, 0.95)));
    }
    if Path::new("/usr/bin/firejail").exists() {
        let ok = Command::new("/usr/bin/firejail")
            .args(["--quiet", "--noprofile", "/bin/true"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            let v = measure(50, || spawn("/usr/bin/firejail", &["--quiet", "--noprofile", "/bin/true"]));
            extra.push(("firejail --noprofile true", percentile(v.clone(), 0.5), percentile(v, 0.95)));
        }
    }

    // MCP over stdio.
    let mcp_log = dir.path().join("mcp-audit.jsonl");
    let mut mcp = McpClient::start(warden_bin, &ws, &mcp_log, &cache);
    let idle_rss = mcp.rss_kb();
    for _ in 0..200 {
        mcp.read_file();
    }
    let mcp_rtt = measure(2_000, || mcp.read_file());
    for _ in 0..7_800 {
        mcp.read_file();
    }
    let rss_after = mcp.rss_kb();
    drop(mcp);
    let per_client = 1_000;
    let mut clients: Vec<McpClient> =
        (0..8).map(|i| McpClient::start(warden_bin, &ws, &dir.path().join(format!("mcp-{i}.jsonl")), &cache)).collect();
    for c in &mut clients {
        c.read_file();
    }
    let started = Instant::now();
    std::thread::scope(|s| {
        for c in &mut clients {
            s.spawn(move || {
                for _ in 0..per_client {
                    c.read_file();
                }
            });
        }
    });
    let per_second = (8 * per_client) as f64 / started.elapsed().as_secs_f64();
    drop(clients);

    let rows = [
        ("std::fs::read 4KiB in-process (floor)", percentile(floor.clone(), 0.5), percentile(floor, 0.95)),
        ("warden read_file in-process, whole pipeline", percentile(pipeline.clone(), 0.5), percentile(pipeline, 0.95)),
        ("cat of the file as a process", percentile(cat.clone(), 0.5), percentile(cat, 0.95)),
        ("warden call read_file process, warm cache", percentile(cli_warm.clone(), 0.5), percentile(cli_warm, 0.95)),
        ("warden call read_file process, empty cache", percentile(cli_cold.clone(), 0.5), percentile(cli_cold, 0.95)),
        ("bare sh -c true spawn", percentile(bare.clone(), 0.5), percentile(bare, 0.95)),
        ("warden shell `true`, whole pipeline", percentile(shell_true.clone(), 0.5), percentile(shell_true, 0.95)),
        ("MCP read_file round trip, stdio", percentile(mcp_rtt.clone(), 0.5), percentile(mcp_rtt, 0.95)),
    ];
    let rows: Vec<_> = rows.into_iter().chain(extra).collect();
    let base = us(rows[1].1);
    println!("{:<46} {:>12} {:>12} {:>16}", "case", "p50 µs", "p95 µs", "p50 / pipeline");
    let mut json_rows = Vec::new();
    for (name, p50, p95) in rows {
        println!("{name:<46} {:>12.1} {:>12.1} {:>15.2}x", us(p50), us(p95), us(p50) / base);
        json_rows
            .push(json!({"case": name, "p50_us": us(p50), "p95_us": us(p95), "ratio_to_pipeline": us(p50) / base}));
    }
    println!("MCP, 8 concurrent stdio clients: {per_second:.0} read_file calls/s");
    println!("warden serve RSS: {idle_rss} KiB idle, {rss_after} KiB after 10,000 calls");
    json_rows.push(json!({"case": "MCP calls per second, 8 concurrent stdio clients", "value": per_second}));
    json_rows.push(json!({"case": "warden serve RSS KiB idle", "value": idle_rss}));
    json_rows.push(json!({"case": "warden serve RSS KiB after 10,000 calls", "value": rss_after}));
    let out = Path::new(env!("CARGO_MANIFEST_DIR")).join("target").join("bench.json");
    std::fs::write(&out, serde_json::to_string_pretty(&json_rows).unwrap()).unwrap();
    println!("wrote {}", out.display());
}
