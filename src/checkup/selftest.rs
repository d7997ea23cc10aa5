//! The self-test: a battery of real escape attempts run under the sandbox this
//! policy's mode gives on this host, for process tools (the [`super::probe`],
//! exec'd by the sandbox helper) and for components (a hostile component
//! embedded in warden). Each case is reported as contained or escaped, with
//! what was observed; an escape is an error-level finding.

#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::error::{CallError, ErrorCode};
use crate::policy::{ExecSpec, Limits, PluginSource, PluginSpec, SYSTEM_READ, SYSTEM_WRITE, SandboxMode};
use crate::runtime::process::{ProcessRuntime, default_helper};
use crate::runtime::wasm::{ComponentRuntime, LoadedPlugin};
use crate::runtime::{Cancel, Input, Invocation, RunOutput, Runtime, Walls, Watch};

/// The hostile component (`plugins/testkit`), built by warden-runtime's `build.rs`.
static HOSTILE: &[u8] = crate::runtime::builtin::TESTKIT;

/// One attempt and its outcome.
#[derive(Debug, Clone, Serialize)]
pub struct Case {
    /// `process` or `component`.
    pub runtime: &'static str,
    /// The attack class.
    pub name: &'static str,
    /// What was tried.
    pub attempt: String,
    /// What containment looks like.
    pub expected: &'static str,
    /// What happened.
    pub observed: String,
    /// Whether the sandbox held.
    pub contained: bool,
    /// The layers in force, as the runtime confirmed them.
    pub layers: String,
}

const SECRET: &str = "warden-self-test-secret";

/// The scratch directories of one self-test.
struct Scene {
    _dir: crate::runtime::CallTmp,
    ws: PathBuf,
    outside: PathBuf,
}

impl Scene {
    fn new() -> Result<Scene, String> {
        let dir = crate::runtime::CallTmp::create().map_err(|e| e.message)?;
        let root = dir.path.canonicalize().map_err(|e| e.to_string())?;
        let (ws, outside) = (root.join("ws"), root.join("outside"));
        for d in [&ws, &outside] {
            std::fs::create_dir(d).map_err(|e| format!("cannot create {}: {e}", d.display()))?;
        }
        std::fs::write(outside.join("secret"), SECRET).map_err(|e| e.to_string())?;
        std::os::unix::fs::symlink(outside.join("secret"), ws.join("link")).map_err(|e| e.to_string())?;
        Ok(Scene { _dir: dir, ws, outside })
    }

    fn limits(timeout: Duration) -> Limits {
        Limits {
            timeout,
            memory: 256 << 20,
            max_output: 64 << 10,
            cpu: timeout,
            processes: 16,
            open_files: 64,
            file_size: 1 << 20,
            tmp_size: 4 << 20,
            tmp_files: 64,
        }
    }

    fn walls(&self, extra_read: &[PathBuf], timeout: Duration) -> Walls {
        // Resolved as a call's grants are (canonical; the helper follows no link).
        let writable = [self.ws.clone()];
        let resolve = |p: &PathBuf| crate::runtime::resolve_grant("self-test", p, &writable).ok().flatten();
        let mut dirs = vec![(self.ws.clone(), true)];
        dirs.extend(extra_read.iter().filter_map(resolve).map(|p| (p, false)));
        Walls { dirs, ..Walls::nothing(self.ws.clone(), Scene::limits(timeout)) }
    }
}

fn layers(out: &Result<RunOutput, CallError>) -> String {
    match out.as_ref().ok().and_then(|o| o.sandbox.as_ref()) {
        Some(s) => format!(
            "landlock ABI {}, seccomp {}, rlimits {}, processes by {}",
            s.landlock_abi.unwrap_or(0),
            if s.seccomp { "on" } else { "OFF" },
            if s.rlimits { "on" } else { "OFF" },
            s.processes.unwrap_or("none")
        ),
        None => String::new(),
    }
}

/// Whether the daemon that wrote `note` still lives: it holds an exclusive
/// `flock` on the file for as long as it does (its pid is its pid namespace's,
/// meaningless here), and the kernel drops the lock when it dies.
fn alive(note: &Path) -> bool {
    let Ok(f) = std::fs::File::open(note) else { return false };
    rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err()
}

/// Runs every case under `mode`; `cache_dir` is the component cache.
pub fn run(mode: SandboxMode, cache_dir: Option<PathBuf>) -> Result<Vec<Case>, String> {
    let scene = Scene::new()?;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| format!("cannot listen: {e}"))?;
    let target = listener.local_addr().map_err(|e| e.to_string())?.to_string();
    let mut cases = process_cases(&scene, mode, &target)?;
    cases.extend(component_cases(&scene, cache_dir, &target)?);
    drop(listener);
    Ok(cases)
}

fn process_cases(scene: &Scene, mode: SandboxMode, target: &str) -> Result<Vec<Case>, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the warden binary: {e}"))?;
    let exe_dir = exe.parent().map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("/"));
    let runtime = ProcessRuntime::new(default_helper(), mode);
    let mut read: Vec<PathBuf> = SYSTEM_READ.iter().map(PathBuf::from).collect();
    read.push(exe_dir);
    let secret = scene.outside.join("secret").display().to_string();
    let daemon_file = scene.ws.join("daemon.pid");
    let table: Vec<(&'static str, Vec<String>, &'static str, Duration)> = vec![
        ("read outside grants", vec!["read".into(), secret.clone()], "the read is refused", Duration::from_secs(10)),
        (
            "write outside grants",
            vec!["write".into(), scene.outside.join("planted").display().to_string()],
            "the write is refused",
            Duration::from_secs(10),
        ),
        (
            "symlink escape",
            vec!["read".into(), scene.ws.join("link").display().to_string()],
            "the read through the link is refused",
            Duration::from_secs(10),
        ),
        (
            "network connect",
            vec!["connect".into(), target.into()],
            "no socket or no connection",
            Duration::from_secs(10),
        ),
        ("namespace creation", vec!["userns".into()], "unshare(CLONE_NEWUSER) is refused", Duration::from_secs(10)),
        ("ptrace", vec!["ptrace".into()], "PTRACE_ATTACH to warden is refused", Duration::from_secs(10)),
        (
            "rlimits of warden",
            vec!["prlimit".into(), std::process::id().to_string()],
            "prlimit64(warden, RLIMIT_FSIZE = 0) is refused",
            Duration::from_secs(10),
        ),
        ("io_uring", vec!["io_uring".into()], "io_uring_setup is refused", Duration::from_secs(10)),
        ("fork bomb", vec!["fork".into(), "10000".into()], "fork fails at limits.processes", Duration::from_secs(10)),
        (
            "memory bomb",
            vec!["memory".into(), (8u64 << 30).to_string()],
            "an 8 GiB mapping is refused",
            Duration::from_secs(10),
        ),
        (
            "timeout with a daemonised descendant",
            vec!["daemon".into(), daemon_file.display().to_string()],
            "TIMEOUT, and no descendant survives",
            Duration::from_secs(1),
        ),
        (
            "output flood",
            vec!["flood".into(), (64u64 << 20).to_string()],
            "output cut at limits.max_output",
            Duration::from_secs(10),
        ),
    ];
    let mut cases = Vec::new();
    for (name, argv, expected, timeout) in table {
        let mut full = vec![exe.display().to_string(), super::probe::PROBE_ARG.to_string()];
        full.extend(argv.iter().cloned());
        let exec = ExecSpec { argv: full, params: Vec::new(), cwd: scene.ws.clone(), input_schema: None };
        let mut walls = scene.walls(&read, timeout);
        walls.dirs.extend(SYSTEM_WRITE.iter().map(PathBuf::from).filter(|p| p.exists()).map(|p| (p, true)));
        let watch = Watch { cancel: &Cancel::new(), tap: None, progress: None };
        let args = json!({});
        let out = runtime
            .run(&exec, Invocation { tool: "self-test", input: Input::Args(&args), walls: &walls, tmp: None, watch });
        let layers = layers(&out);
        let (observed, contained) = match (&out, name) {
            (Err(e), "timeout with a daemonised descendant") => {
                let note = std::fs::read_to_string(&daemon_file).unwrap_or_default();
                let pid = note.split_whitespace().next().unwrap_or("");
                std::thread::sleep(Duration::from_millis(50));
                let survived = !pid.is_empty() && alive(&daemon_file);
                (
                    format!(
                        "{}; descendant {}{}",
                        e.code,
                        if pid.is_empty() { "never started" } else { note.trim() },
                        if survived { ", STILL ALIVE" } else { ", gone" }
                    ),
                    e.code == ErrorCode::Timeout && !survived,
                )
            }
            (Err(e), _) => (format!("{}: {}", e.code, e.message), e.code != ErrorCode::Internal),
            (Ok(o), "output flood") => {
                let kept = o.value["stdout"].as_str().map_or(0, str::len);
                (
                    format!("kept {kept} of {} bytes, truncated {}", o.usage.output_bytes, o.usage.truncated),
                    o.usage.truncated && kept as u64 <= walls.limits.max_output,
                )
            }
            (Ok(o), _) => {
                let said = o.value["stdout"].as_str().unwrap_or("").trim().to_string();
                let contained = said.starts_with("refused:");
                (if said.is_empty() { format!("no report (exit {})", o.value["exit_code"]) } else { said }, contained)
            }
        };
        cases.push(Case { runtime: "process", name, attempt: argv.join(" "), expected, observed, contained, layers });
    }
    Ok(cases)
}

fn component_cases(scene: &Scene, cache_dir: Option<PathBuf>, target: &str) -> Result<Vec<Case>, String> {
    let runtime = ComponentRuntime::new(cache_dir).map_err(|e| e.message)?;
    let file = scene.ws.parent().unwrap_or(&scene.ws).join("hostile.wasm");
    std::fs::write(&file, HOSTILE).map_err(|e| format!("cannot write {}: {e}", file.display()))?;
    let spec = PluginSpec {
        name: "self-test".into(),
        source: PluginSource::File(file),
        kind: crate::policy::PluginKind::Tool,
        sha256: Some(hex::encode(Sha256::digest(HOSTILE))),
        signers: Vec::new(),
        signature: None,
        location: "self-test".into(),
    };
    let plugin: Arc<LoadedPlugin> = runtime.load(&spec).map_err(|e| e.message)?;
    let secret = scene.outside.join("secret").display().to_string();
    let planted = scene.outside.join("planted-by-component");
    let table: Vec<(&'static str, &'static str, Value, &'static str)> = vec![
        ("read outside grants", "read", json!({"path": secret}), "the read is refused"),
        (
            "write outside grants",
            "write",
            json!({"path": planted.display().to_string(), "content": "x"}),
            "the write is refused",
        ),
        (
            "symlink escape",
            "read",
            json!({"path": scene.ws.join("link").display().to_string()}),
            "the read through the link is refused",
        ),
        ("network connect", "connect", json!({"addr": target}), "no socket"),
        ("memory bomb", "grow", json!({}), "LIMIT_EXCEEDED at limits.memory"),
        ("timeout", "spin", json!({}), "TIMEOUT"),
        ("output flood", "flood", json!({}), "streams cut at limits.max_output"),
    ];
    let mut cases = Vec::new();
    for (name, tool, args, expected) in table {
        // Only the timeout case needs a short limit; the others get time to reach theirs.
        let limit = if name == "timeout" { Duration::from_secs(1) } else { Duration::from_secs(10) };
        let walls = scene.walls(&[], limit);
        let watch = Watch { cancel: &Cancel::new(), tap: None, progress: None };
        let out = runtime.run(&plugin, Invocation { tool, input: Input::Args(&args), walls: &walls, tmp: None, watch });
        let (observed, contained) = match (&out, name) {
            (Ok(o), "output flood") => {
                (format!("produced {} bytes, truncated {}", o.usage.output_bytes, o.usage.truncated), o.usage.truncated)
            }
            (Ok(o), _) => (format!("succeeded: {}", crate::shape::truncate(o.value.clone(), 200).0), false),
            (Err(e), "memory bomb") => (format!("{}", e.code), e.code == ErrorCode::LimitExceeded),
            (Err(e), "timeout") => (format!("{}", e.code), e.code == ErrorCode::Timeout),
            (Err(e), _) => (format!("{}: {}", e.code, e.message), !e.message.contains(SECRET)),
        };
        let contained = contained && !planted.exists();
        cases.push(Case {
            runtime: "component",
            name,
            attempt: format!("{tool} {args}"),
            expected,
            observed,
            contained,
            layers: "WebAssembly component, preopens, memory limiter, epoch deadline".into(),
        });
    }
    for (name, why) in [
        ("namespace creation", "WASI has no namespace call"),
        ("ptrace", "WASI has no ptrace"),
        ("io_uring", "WASI has no io_uring"),
        ("fork bomb", "WASI has no fork or exec"),
    ] {
        cases.push(Case {
            runtime: "component",
            name,
            attempt: "-".into(),
            expected: "no such interface",
            observed: why.into(),
            contained: true,
            layers: "WebAssembly component".into(),
        });
    }
    Ok(cases)
}
