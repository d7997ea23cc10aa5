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

    let rows = [
        ("std::fs::read 4KiB in-process (floor)", percentile(floor.clone(), 0.5), percentile(floor, 0.95)),
        ("warden read_file in-process, whole pipeline", percentile(pipeline.clone(), 0.5), percentile(pipeline, 0.95)),
        ("cat of the file as a process", percentile(cat.clone(), 0.5), percentile(cat, 0.95)),
        ("warden call read_file process, warm cache", percentile(cli_warm.clone(), 0.5), percentile(cli_warm, 0.95)),
        ("warden call read_file process, empty cache", percentile(cli_cold.clone(), 0.5), percentile(cli_cold, 0.95)),
        ("bare sh -c true spawn", percentile(bare.clone(), 0.5), percentile(bare, 0.95)),
        ("warden shell `true`, whole pipeline", percentile(shell_true.clone(), 0.5), percentile(shell_true, 0.95)),
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
    let out = Path::new(env!("CARGO_MANIFEST_DIR")).join("target").join("bench.json");
    std::fs::write(&out, serde_json::to_string_pretty(&json_rows).unwrap()).unwrap();
    println!("wrote {}", out.display());
}
