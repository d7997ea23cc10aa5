//! `cargo xtask fuzz [--seconds N] [TARGET...]`: runs each fuzz target of
//! `fuzz/` (cargo-fuzz, libFuzzer, the nightly toolchain) for N seconds (default
//! 60) from its committed seeds, and prints one line per target: executions,
//! coverage, corpus size and the verdict. A crash or hang stops that target,
//! leaves its input in `fuzz/artifacts/TARGET/`, and makes the command fail.
//!
//! The targets (`src/fuzzing.rs` holds their bodies): `policy` (the policy
//! loader), `exec_input` (the tool-call shapes of `warden exec`),
//! `args_and_shape` (argument validation, sanitising and truncation),
//! `mcp_frame` (the MCP stdio frame gate) and `sshsig` (plugin signatures).

use std::path::Path;
use std::process::{Command, Stdio};

/// Every target, in the order they run.
pub const TARGETS: &[&str] = &["policy", "exec_input", "args_and_shape", "mcp_frame", "sshsig"];

/// Codegen units for the fuzz build (cargo-fuzz defaults to 1 outside `--dev`,
/// which makes the build several minutes longer on a small machine; the runs
/// are a little slower). `run` must pass the same, or it builds everything again.
const CODEGEN_UNITS: &str = "16";

/// `cargo xtask fuzz` usage.
pub const USAGE: &str = "usage: cargo xtask fuzz [--seconds N] [TARGET...]   (targets: policy, exec_input, \
                         args_and_shape, mcp_frame, sshsig; default: all, 60 s each)";

/// `cargo +nightly …`, through the rustup proxy, free of what the outer cargo set.
fn nightly() -> Command {
    let mut c = Command::new("cargo");
    c.arg("+nightly");
    for var in ["RUSTUP_TOOLCHAIN", "RUSTC", "RUSTC_WRAPPER", "RUSTFLAGS", "CARGO_TARGET_DIR", "CARGO"] {
        c.env_remove(var);
    }
    c
}

/// Runs the command.
pub fn run(root: &Path, args: &[String]) -> Result<(), String> {
    let mut seconds = 60u64;
    let mut targets: Vec<String> = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--seconds" => {
                let v = it.next().ok_or(USAGE)?;
                seconds = v.parse().map_err(|_| format!("--seconds {v:?} is not a whole number of seconds"))?;
            }
            "-h" | "--help" => return Err(USAGE.into()),
            t if TARGETS.contains(&t) => targets.push(t.to_string()),
            other => return Err(format!("unknown target or option {other:?}\n{USAGE}")),
        }
    }
    if targets.is_empty() {
        targets = TARGETS.iter().map(|t| t.to_string()).collect();
    }
    if !nightly().arg("--version").output().is_ok_and(|o| o.status.success()) {
        return Err("fuzzing needs the nightly toolchain: `rustup toolchain install nightly`".into());
    }
    if !nightly().args(["fuzz", "--version"]).output().is_ok_and(|o| o.status.success()) {
        return Err("fuzzing needs cargo-fuzz: `cargo install cargo-fuzz --locked`".into());
    }
    let fuzz_dir = root.join("fuzz");
    // The nightly toolchain has no wasm32-wasip2 target: the fuzz build of warden
    // takes the builtin components from the normal build.
    let plugins = root.join("target/wasm-plugins/wasm32-wasip2/release");
    if ["fs.wasm", "net.wasm", "testkit.wasm"].iter().any(|p| !plugins.join(p).is_file()) {
        let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .current_dir(root)
            .args(["build", "--locked", "--lib"])
            .status()
            .map_err(|e| format!("cannot run cargo: {e}"))?;
        if !status.success() {
            return Err("building warden (for its components) failed".into());
        }
    }
    // One build for every target (no sanitizer: warden's fuzzed code is safe Rust;
    // libFuzzer's coverage guidance and the invariant checks are what find bugs).
    let status = nightly()
        .current_dir(root)
        .args(["fuzz", "build", "--sanitizer", "none", "--codegen-units", CODEGEN_UNITS, "--fuzz-dir"])
        .arg(&fuzz_dir)
        .env("WARDEN_PLUGIN_DIR", &plugins)
        .status()
        .map_err(|e| format!("cannot run cargo fuzz: {e}"))?;
    if !status.success() {
        return Err("building the fuzz targets failed (see above)".into());
    }
    let mut failed = Vec::new();
    let mut rows = Vec::new();
    for target in &targets {
        let corpus = fuzz_dir.join("corpus").join(target);
        std::fs::create_dir_all(&corpus).map_err(|e| format!("cannot create {}: {e}", corpus.display()))?;
        eprintln!("== fuzzing {target} for {seconds} s");
        let out = nightly()
            .current_dir(root)
            .args(["fuzz", "run", "--sanitizer", "none", "--codegen-units", CODEGEN_UNITS, "--fuzz-dir"])
            .arg(&fuzz_dir)
            .env("WARDEN_PLUGIN_DIR", &plugins)
            .arg(target)
            .arg(&corpus)
            .arg("--")
            .arg(format!("-max_total_time={seconds}"))
            .args(["-timeout=10", "-rss_limit_mb=4096", "-max_len=65536", "-print_final_stats=1"])
            .stdout(Stdio::inherit())
            .stderr(Stdio::piped())
            .output()
            .map_err(|e| format!("cannot run cargo fuzz: {e}"))?;
        let log = String::from_utf8_lossy(&out.stderr);
        let stat = |name: &str| {
            log.lines()
                .filter_map(|l| l.strip_prefix(&format!("stat::{name}:")))
                .next_back()
                .map(|v| v.trim().to_string())
                .unwrap_or_else(|| "?".into())
        };
        let last_status = log.lines().rev().find(|l| l.contains(" cov: ")).unwrap_or("").to_string();
        let field =
            |key: &str| last_status.split_whitespace().skip_while(|w| *w != key).nth(1).unwrap_or("?").to_string();
        let verdict = if out.status.success() { "ok" } else { "CRASH/HANG" };
        if !out.status.success() {
            failed.push(target.clone());
            eprintln!(
                "{}",
                log.lines().rev().take(40).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        rows.push(format!(
            "{target:<16} {:>12} {:>8} {:>8} {:>8} {:>6}s  {verdict}",
            stat("number_of_executed_units"),
            field("cov:"),
            field("ft:"),
            field("corp:"),
            seconds
        ));
    }
    println!(
        "{:<16} {:>12} {:>8} {:>8} {:>8} {:>7}  VERDICT",
        "TARGET", "EXECUTIONS", "COV", "FEATURES", "CORPUS", "TIME"
    );
    for r in rows {
        println!("{r}");
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{} target(s) crashed or hung: {}; the inputs are in fuzz/artifacts/",
            failed.len(),
            failed.join(", ")
        ))
    }
}
