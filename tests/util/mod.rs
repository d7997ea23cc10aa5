//! Test harness: runs the real `warden` binary in a fresh workspace per test,
//! with its own audit log and state, no terminal, and a shared compile cache.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

pub(crate) mod kit;
pub(crate) mod mcp_stdio;

/// A temporary workspace plus a directory outside it.
pub(crate) struct Env {
    pub root: tempfile::TempDir,
    pub ws: PathBuf,
    pub outside: PathBuf,
    pub log: PathBuf,
}

/// What one run of warden did.
#[derive(Debug)]
pub(crate) struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(self.stdout.trim()).unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {self:?}"))
    }
    pub(crate) fn error_code(&self) -> String {
        self.json()["error"]["code"].as_str().unwrap_or_default().to_string()
    }
}

/// The shared compiled-component cache (one compile for the whole test run).
pub(crate) fn cache_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("warden-test-cache-{}", nix::unistd::geteuid()))
}

/// The `PATH` warden runs with in the tests: the system's programs, whatever
/// the invoking shell had first (a pyenv or cargo directory ahead of
/// `/usr/bin` is a toolchain a tool's grants do not hold, and warden refuses
/// such a swap before running; docs/ci.md).
/// How many times `text` says the sandbox refused a path: Landlock's EACCES,
/// the read-only view's EROFS, or ENOENT where the call's root is built from
/// its grants (the host's path, which the test made, is not there at all).
#[allow(dead_code)]
pub(crate) fn refusals(text: &str) -> usize {
    ["Permission denied", "Read-only file system", "No such file or directory"]
        .iter()
        .map(|r| text.matches(r).count())
        .sum()
}

pub(crate) const PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// A distinctive secret that must never appear in any output.
pub(crate) const SECRET: &str = "TOPSECRET-7f3a9c-do-not-leak";

impl Env {
    pub(crate) fn new() -> Env {
        let root = tempfile::tempdir().unwrap();
        let ws = root.path().join("ws");
        let outside = root.path().join("outside");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("secret.txt"), SECRET).unwrap();
        let ws = ws.canonicalize().unwrap();
        let outside = outside.canonicalize().unwrap();
        let log = root.path().join("state").join("audit.jsonl");
        Env { root, ws, outside, log }
    }

    pub(crate) fn write(&self, rel: &str, content: &str) -> PathBuf {
        let p = self.ws.join(rel);
        if let Some(d) = p.parent() {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(&p, content).unwrap();
        p
    }

    pub(crate) fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_warden"));
        c.current_dir(&self.ws)
            .arg("--audit-log")
            .arg(&self.log)
            .args(args)
            .env("WARDEN_CACHE_DIR", cache_dir())
            .env("HOME", self.root.path())
            .env("PATH", PATH)
            .env_remove("XDG_STATE_HOME")
            .env_remove("XDG_CACHE_HOME")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }

    pub(crate) fn run(&self, args: &[&str]) -> Run {
        self.run_with_stdin(args, None)
    }

    pub(crate) fn run_with_stdin(&self, args: &[&str], stdin: Option<&str>) -> Run {
        let mut c = self.command(args);
        if stdin.is_some() {
            c.stdin(Stdio::piped());
        }
        let mut child = c.spawn().unwrap();
        if let Some(input) = stdin {
            child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
        }
        let out = child.wait_with_output().unwrap();
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// `warden call TOOL ARGS` with extra global flags before `call`.
    pub(crate) fn call(&self, flags: &[&str], tool: &str, args: &str) -> Run {
        let mut a: Vec<&str> = flags.to_vec();
        a.extend(["call", tool, args]);
        self.run(&a)
    }

    pub(crate) fn audit_records(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            // A server killed mid-session leaves the log's blank fill (zero bytes) after the last line.
            .filter(|l| !l.trim_matches([' ', '\0']).is_empty())
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

/// The first line of a test marked `#[ignore = "needs root"]`: run by hand
/// without root, it fails saying so rather than passing untested.
#[allow(dead_code, reason = "not every suite has a test that needs root")]
pub(crate) fn needs_root() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "needs root: run it as root with `cargo test -- --ignored` (.ci/run does)"
    );
}

/// Polls `done` until it holds or `deadline` passes; whether it held. A
/// check of something that happens asynchronously (a connection arriving, a
/// killed process gone) waits only as long as it must and fails at the deadline.
pub(crate) fn within(deadline: std::time::Duration, mut done: impl FnMut() -> bool) -> bool {
    let end = std::time::Instant::now() + deadline;
    loop {
        if done() {
            return true;
        }
        if std::time::Instant::now() >= end {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}
