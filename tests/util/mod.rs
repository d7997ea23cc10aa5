//! Test harness: runs the real `warden` binary in a fresh workspace per test,
//! with its own audit log and state, no terminal, and a shared compile cache.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub(crate) mod kit;
pub(crate) mod mcp_stdio;
pub(crate) mod registry;

/// A temporary workspace plus a directory outside it.
pub(crate) struct Env {
    pub root: tempfile::TempDir,
    pub ws: PathBuf,
    pub outside: PathBuf,
    pub log: PathBuf,
}

/// What one run of warden did.
#[derive(Debug, Default)]
pub(crate) struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
    /// It outlived its limit and was killed.
    pub hung: bool,
}

impl Run {
    /// The result document (panics when stdout is not one JSON document).
    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(self.stdout.trim()).unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {self:?}"))
    }
    /// The result document (Null when stdout is not one JSON document).
    pub(crate) fn doc(&self) -> Value {
        serde_json::from_str(self.stdout.trim()).unwrap_or(Value::Null)
    }
    /// The error code, or "".
    pub(crate) fn error_code(&self) -> String {
        self.doc()["error"]["code"].as_str().unwrap_or_default().to_string()
    }
    /// The error message, or "".
    pub(crate) fn error_message(&self) -> String {
        self.doc()["error"]["message"].as_str().unwrap_or_default().to_string()
    }
    /// A process tool's exit code, when it ran.
    pub(crate) fn exit(&self) -> Option<i64> {
        self.doc()["result"]["exit_code"].as_i64()
    }
    /// A process tool's stdout.
    pub(crate) fn out(&self) -> String {
        self.doc()["result"]["stdout"].as_str().unwrap_or_default().to_string()
    }
    /// A process tool's stderr.
    pub(crate) fn err(&self) -> String {
        self.doc()["result"]["stderr"].as_str().unwrap_or_default().to_string()
    }
    /// Whether the call ran and returned a result.
    pub(crate) fn success(&self) -> bool {
        self.doc()["status"] == "success"
    }
    /// Everything warden printed.
    pub(crate) fn all(&self) -> String {
        format!("{}\n{}", self.stdout, self.stderr)
    }
    /// A one-line account: the error, or the exit code and the first lines of the streams.
    pub(crate) fn brief(&self) -> String {
        if self.hung {
            return "warden HUNG and was killed".into();
        }
        let doc = self.doc();
        if doc.is_null() {
            return format!("exit {}; not a result document: {}", self.code, clip(&self.all(), 160));
        }
        if doc["status"] != "success" {
            return format!("{}: {}", self.error_code(), clip(&self.error_message(), 160));
        }
        let mut s = format!("exit_code {}", self.exit().map_or("-".into(), |c| c.to_string()));
        let (out, err) = (self.out(), self.err());
        if !out.trim().is_empty() {
            s.push_str(&format!("; stdout {:?}", clip(out.trim(), 140)));
        }
        if !err.trim().is_empty() {
            s.push_str(&format!("; stderr {:?}", clip(err.trim(), 160)));
        }
        if doc["truncated"] == true || doc["result"]["truncated"] == true {
            s.push_str("; truncated");
        }
        s
    }
}

/// `s` cut to `n` characters, with a marker.
pub(crate) fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n { s.to_string() } else { format!("{}…", s.chars().take(n).collect::<String>()) }
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
        run_to_end(c, stdin.map(str::as_bytes))
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
            // A crash can leave zero bytes after the last line (the next writer cuts them).
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

/// The longest a single warden run of the escape battery may take before the case is called hung.
pub(crate) const HANG: Duration = Duration::from_secs(90);
/// The longest any other test's warden run may take (a `warden run` of a real build included).
pub(crate) const LONGEST_RUN: Duration = Duration::from_secs(900);

/// Spawns `c`, feeds `stdin`, collects both streams, and kills it past [`HANG`].
pub(crate) fn run_bounded(c: Command, stdin: Option<&[u8]>) -> Run {
    run_for(c, stdin, HANG, &|_| {})
}

/// [`run_bounded`], calling `started` with the child's pid once it runs.
pub(crate) fn run_bounded_with(c: Command, stdin: Option<&[u8]>, started: &dyn Fn(u32)) -> Run {
    run_for(c, stdin, HANG, started)
}

/// Runs `c` to its end, in a process group of its own; one that outlives
/// [`LONGEST_RUN`] is killed with its group and fails the test.
pub(crate) fn run_to_end(mut c: Command, stdin: Option<&[u8]>) -> Run {
    use std::os::unix::process::CommandExt;
    c.process_group(0);
    let r = run_for(c, stdin, LONGEST_RUN, &|_| {});
    assert!(!r.hung, "warden did not finish within {LONGEST_RUN:?} and was killed: {r:?}");
    r
}

/// Spawns `c` (stdout and stderr piped), feeds `stdin`, collects both streams,
/// calls `started` with its pid, and kills it past `limit` (the run is then `hung`).
pub(crate) fn run_for(mut c: Command, stdin: Option<&[u8]>, limit: Duration, started: &dyn Fn(u32)) -> Run {
    let mut child = c.spawn().expect("cannot start warden");
    started(child.id());
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().unwrap();
        let input = input.to_vec();
        std::thread::spawn(move || {
            let _ = std::io::Write::write_all(&mut pipe, &input);
        });
    }
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let t_out = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = out.read_to_end(&mut b);
        b
    });
    let t_err = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = err.read_to_end(&mut b);
        b
    });
    let deadline = Instant::now() + limit;
    let mut hung = false;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            hung = true;
            // Its group too, when it leads one (what it started would hold the pipes open).
            let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::SIGKILL);
            let _ = child.kill();
            break child.wait().unwrap();
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let stdout = String::from_utf8_lossy(&t_out.join().unwrap_or_default()).into_owned();
    let stderr = String::from_utf8_lossy(&t_err.join().unwrap_or_default()).into_owned();
    Run { code: status.code().unwrap_or(-1), stdout, stderr, hung }
}

/// `cargo xtask plugin ARGS`, run from the repository as a user would: its
/// cargo builds go to `target/tmp/xtask-plugin` (never the outer build's target
/// directory, so they never wait on its lock), and the warden this test was
/// built with inspects the plugins (no second build of warden).
pub(crate) fn xtask_plugin(args: &[&str]) -> std::process::Output {
    let out = Command::new(env!("CARGO"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["run", "--locked", "-q", "-p", "xtask", "--", "plugin"])
        .args(args)
        .env("CARGO_TARGET_DIR", Path::new(env!("CARGO_TARGET_TMPDIR")).join("xtask-plugin"))
        .env("WARDEN_BIN", env!("CARGO_BIN_EXE_warden"))
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    eprintln!(
        "$ cargo xtask plugin {}\n[exit {:?}]\n[stdout]\n{}\n[stderr]\n{}",
        args.join(" "),
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}
