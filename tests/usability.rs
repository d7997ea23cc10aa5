//! Usability: real programs, tried as a new user would, in a process
//! tool that reads `{system}` and the workspace and writes the workspace and
//! `{tmp}` (the per-call namespaces, the private `/proc` and `/dev/shm`, and
//! the protected paths all in force). Each must work.
//!
//! Every test prints a row (`usability: PROGRAM | works | policy | detail`) and
//! appends it as a JSON line to `target/tmp/usability-<uid>.json`, so the
//! closing note's table can be built from a run as root and one as an ordinary
//! user (`.ci/unprivileged` runs this binary as `warden-ci`).
//!
//! As root, the workspace is given to an ordinary owner (uid 65534), as
//! `docs/security.md` recommends, so the tool runs as that user, not as uid 0
//! without capabilities; the cargo test keeps the invoking user (the toolchain
//! lives under its home). The row says which uid owned the workspace.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod util;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use serde_json::json;
use util::{Env, Run};

const PYTHON: &str = "/usr/bin/python3";
const PYTEST: &str = "pytest==8.4.2";
/// The owner given to the workspace when the test runs as root.
const ORDINARY_UID: u32 = 65534;

/// Who owns the workspace when the test runs as root.
#[derive(Clone, Copy, PartialEq)]
enum Owner {
    /// An ordinary user (uid 65534): the setup `docs/security.md` recommends.
    Ordinary,
    /// Whoever runs the test (root in CI: the tool then runs as uid 0 without capabilities).
    Invoker,
}

/// One program's policy: what it reads beyond `{system}` and the workspace, its extra environment and limits.
struct Shape<'a> {
    read: &'a [&'a str],
    env: &'a [(&'a str, &'a str)],
    limits: &'a str,
}

const PLAIN: Shape<'static> = Shape { read: &[], env: &[], limits: "timeout = \"60s\"" };

impl Shape<'_> {
    fn policy(&self) -> String {
        let quote = |v: &[&str]| v.iter().map(|s| format!("{s:?}")).collect::<Vec<_>>().join(", ");
        let mut read = vec!["{system}", "{workspace}"];
        read.extend(self.read);
        let mut set = vec!["HOME = \"{tmp}\"".to_string()];
        set.extend(self.env.iter().map(|(k, v)| format!("{k} = {v:?}")));
        format!(
            "version = 1\n[tools.sh]\nexec = [\"/bin/sh\", \"-c\", \"{{command}}\"]\ntier = \"auto\"\n\
             fs.read = [{}]\nfs.write = [\"{{workspace}}\", \"{{tmp}}\"]\n\
             env = {{ pass = [\"PATH\", \"LANG\"], set = {{ {} }} }}\nlimits = {{ {} }}\n",
            quote(&read),
            set.join(", "),
            self.limits
        )
    }
    /// The policy in a line, for the table.
    fn summary(&self) -> String {
        let mut s = String::from("read {system} {workspace}");
        for r in self.read {
            s.push_str(&format!(" {r}"));
        }
        s.push_str("; write {workspace} {tmp}; env HOME={tmp}");
        for (k, _) in self.env {
            s.push_str(&format!(" {k}"));
        }
        s.push_str(&format!("; {}", self.limits));
        s
    }
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// A fresh workspace; as root, given to `owner` (after `prepare` ran on the host).
fn workspace(owner: Owner, prepare: impl FnOnce(&Path)) -> (Env, u32) {
    let env = Env::new();
    prepare(&env.ws);
    let mut uid = nix::unistd::geteuid().as_raw();
    if is_root() && owner == Owner::Ordinary {
        // The tool must reach its workspace: the temporary directory above it is 0700.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(env.root.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let out = Command::new("chown")
            .args(["-R", &format!("{ORDINARY_UID}:{ORDINARY_UID}")])
            .arg(&env.ws)
            .output()
            .unwrap();
        assert!(out.status.success(), "chown: {}", String::from_utf8_lossy(&out.stderr));
        uid = ORDINARY_UID;
    }
    (env, uid)
}

/// Runs `command` in the `sh` tool shaped by `shape`.
fn sh(env: &Env, shape: &Shape<'_>, command: &str) -> Run {
    let policy = env.root.path().join("policy.toml");
    std::fs::write(&policy, shape.policy()).unwrap();
    let args = json!({ "command": command }).to_string();
    env.run(&["--policy", policy.to_str().unwrap(), "call", "sh", &args])
}

/// What a call printed: stdout, stderr, or warden's refusal.
struct Said {
    ok: bool,
    exit: Option<i64>,
    stdout: String,
    stderr: String,
    doc: serde_json::Value,
}

fn said(r: &Run) -> Said {
    let doc: serde_json::Value = serde_json::from_str(r.stdout.trim()).unwrap_or(serde_json::Value::Null);
    let res = &doc["result"];
    let exit = res["exit_code"].as_i64();
    Said {
        ok: doc["status"] == "success" && exit == Some(0),
        exit,
        stdout: res["stdout"].as_str().unwrap_or_default().to_string(),
        stderr: if doc.is_null() {
            format!("warden exit {}: {}{}", r.code, r.stdout, r.stderr)
        } else if doc["status"] != "success" {
            format!("{}: {}", doc["error"]["code"], doc["error"]["message"])
        } else {
            res["stderr"].as_str().unwrap_or_default().to_string()
        },
        doc,
    }
}

fn tail(s: &str, n: usize) -> String {
    let chars: Vec<char> = s.trim().chars().collect();
    let start = chars.len().saturating_sub(n);
    chars[start..].iter().collect::<String>().replace('\n', "\\n")
}

/// Prints the row and appends it to `target/tmp/usability-<uid>.json` (JSON lines).
fn record(program: &str, works: &str, shape: &Shape<'_>, owner_uid: u32, detail: &str, started: Instant) {
    let uid = nix::unistd::geteuid().as_raw();
    let row = json!({
        "program": program,
        "works": works,
        "policy": shape.summary(),
        "test_uid": uid,
        "workspace_owner": owner_uid,
        "detail": detail,
        "seconds": (started.elapsed().as_secs_f64() * 10.0).round() / 10.0,
        "ts": std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_secs(),
    });
    println!("usability: {program} | {works} | {} | owner uid {owner_uid} | {detail}", shape.summary());
    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("usability-{uid}.json"));
    if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(&path) {
        let _ = f.write_all(format!("{row}\n").as_bytes());
    }
}

/// Records the row, then fails the test when the program did not work.
fn verdict(program: &str, ok: bool, shape: &Shape<'_>, owner_uid: u32, detail: &str, started: Instant) {
    record(program, if ok { "yes" } else { "no" }, shape, owner_uid, detail, started);
    assert!(ok, "{program} does not work in the sandbox ({}): {detail}", shape.summary());
}

fn host_git(ws: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(ws)
        // The host user reads a workspace the ordinary owner now has.
        .args(["-c", "safe.directory=*"])
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", ws.parent().unwrap())
        .output()
        .expect("git on the host");
    assert!(out.status.success(), "host git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn git_add_commit_checkout_stash_merge_in_a_repository_prepared_on_the_host() {
    let started = Instant::now();
    let (env, owner) = workspace(Owner::Ordinary, |ws| {
        host_git(ws, &["init", "-q", "-b", "main", "."]);
        host_git(ws, &["config", "user.name", "Host User"]);
        host_git(ws, &["config", "user.email", "host@example.invalid"]);
        std::fs::write(ws.join("a.txt"), "one\n").unwrap();
        host_git(ws, &["add", "a.txt"]);
        host_git(ws, &["commit", "-q", "-m", "initial, on the host"]);
    });
    let script = r#"
step() { "$@" >"$HOME/step.out" 2>&1 || { echo "FAILED at: $*"; cat "$HOME/step.out"; exit 1; }; }
step git status --short
echo two >> a.txt
step git add a.txt
step git commit -q -m second
step git checkout -q -b feature
echo f > f.txt
step git add f.txt
step git commit -q -m feature
step git checkout -q main
echo wip >> a.txt
step git stash -q
step git stash pop -q
step git stash -q
echo m > m.txt
step git add m.txt
step git commit -q -m main-side
step git merge -q --no-edit feature
step git stash pop -q
git log --oneline | wc -l
echo ALLOK
"#;
    let r = sh(&env, &PLAIN, script);
    let s = said(&r);
    // The host sees the work: five commits, the merge with both sides, the stash popped.
    let log = if s.ok { host_git(&env.ws, &["log", "--oneline"]) } else { String::new() };
    let ok = s.ok && s.stdout.contains("ALLOK") && log.lines().count() == 5 && env.ws.join("f.txt").exists();
    let detail = if ok {
        "git status, add, commit, checkout -b, stash, stash pop, merge: all worked; the host sees 5 commits".to_string()
    } else {
        format!("exit {:?}: {} {}", s.exit, tail(&s.stdout, 300), tail(&s.stderr, 300))
    };
    verdict("git (add, commit, checkout -b, stash, merge)", ok, &PLAIN, owner, &detail, started);
}

#[test]
fn python_venv_with_ensurepip() {
    let started = Instant::now();
    let (env, owner) = workspace(Owner::Ordinary, |_| {});
    let r = sh(
        &env,
        &PLAIN,
        &format!(
            "{PYTHON} -m venv .venv && .venv/bin/python -m pip --version && \
             .venv/bin/python -c 'import sys; print(\"in-venv\", sys.prefix != sys.base_prefix)'"
        ),
    );
    let s = said(&r);
    let ok = s.ok && s.stdout.contains("in-venv True") && s.stdout.contains("pip ");
    let detail = if ok {
        tail(&s.stdout, 120)
    } else {
        format!("exit {:?}: {} {}", s.exit, tail(&s.stdout, 200), tail(&s.stderr, 400))
    };
    verdict("python3 -m venv (with ensurepip)", ok, &PLAIN, owner, &detail, started);
}

#[test]
fn python_multiprocessing_pool_map() {
    let started = Instant::now();
    let (env, owner) = workspace(Owner::Ordinary, |ws| {
        std::fs::write(
            ws.join("pool.py"),
            "from multiprocessing import Pool\n\nif __name__ == '__main__':\n    with Pool(4) as p:\n        \
             print('sum', sum(p.map(abs, range(-100, 0))))\n",
        )
        .unwrap();
    });
    let r = sh(&env, &PLAIN, &format!("{PYTHON} pool.py"));
    let s = said(&r);
    let ok = s.ok && s.stdout.contains("sum 5050");
    let detail =
        if ok { "Pool(4).map: sum 5050".into() } else { format!("exit {:?}: {}", s.exit, tail(&s.stderr, 400)) };
    verdict("python3 multiprocessing.Pool map", ok, &PLAIN, owner, &detail, started);
}

fn which(program: &str) -> Option<PathBuf> {
    ["/usr/local/bin", "/usr/bin", "/bin"].iter().map(|d| Path::new(d).join(program)).find(|p| p.is_file())
}

#[test]
fn node_sees_its_cpus() {
    let started = Instant::now();
    let Some(node) = which("node") else {
        println!("skipped: node is not installed (CI installs nodejs and npm)");
        record("node os.cpus()", "skipped (node not installed)", &PLAIN, nix::unistd::geteuid().as_raw(), "", started);
        return;
    };
    // V8 reserves virtual memory for its code range: node does not start under the default 256MiB (RLIMIT_AS).
    let shape = Shape { read: &[], env: &[], limits: "timeout = \"60s\", memory = \"2GiB\"" };
    let (env, owner) = workspace(Owner::Ordinary, |_| {});
    let r = sh(&env, &shape, &format!("{} -e 'console.log(\"cpus\", require(\"os\").cpus().length)'", node.display()));
    let s = said(&r);
    let n: i64 = s.stdout.trim().strip_prefix("cpus ").and_then(|n| n.trim().parse().ok()).unwrap_or(0);
    let ok = s.ok && n > 0;
    let detail = if ok {
        format!("os.cpus().length = {n}")
    } else {
        format!("exit {:?}: {} {}", s.exit, tail(&s.stdout, 100), tail(&s.stderr, 300))
    };
    verdict("node os.cpus()", ok, &shape, owner, &detail, started);
}

#[test]
fn ps_shows_only_the_calls_processes() {
    let started = Instant::now();
    let (env, owner) = workspace(Owner::Ordinary, |_| {});
    // ps once the background child has become `sleep` (between fork and exec it is still `sh`).
    let r = sh(
        &env,
        &PLAIN,
        "sleep 5 & i=0; while [ \"$(cat /proc/$!/comm 2>/dev/null)\" != sleep ] && [ $i -lt 500 ]; do i=$((i+1)); done; \
         ps -e -o pid=,comm=; kill $!",
    );
    let s = said(&r);
    let rows: Vec<&str> = s.stdout.lines().filter(|l| !l.trim().is_empty()).collect();
    let names: Vec<&str> = rows.iter().filter_map(|l| l.split_whitespace().nth(1)).collect();
    // The call's init is warden's helper, pid 1 of the namespace.
    let mine = ["sh", "sleep", "ps", "bash", "dash", "warden-helper", "warden-sandbox", "warden"];
    let foreign: Vec<&&str> = names.iter().filter(|n| !mine.contains(n)).collect();
    let ok = s.ok && names.contains(&"ps") && names.contains(&"sleep") && foreign.is_empty() && rows.len() <= 6;
    let detail = format!("ps -e listed {}: {}", rows.len(), names.join(", "));
    let detail = if s.ok { detail } else { format!("{detail}; exit {:?}: {}", s.exit, tail(&s.stderr, 300)) };
    verdict("ps -e (only the call's processes)", ok, &PLAIN, owner, &detail, started);
}

#[test]
fn tmpdir_is_set_by_warden() {
    let started = Instant::now();
    let (env, owner) = workspace(Owner::Ordinary, |_| {});
    let r = sh(&env, &PLAIN, "echo \"TMPDIR=$TMPDIR TMP=$TMP TEMP=$TEMP\"; f=$(mktemp) && echo made=$f && rm \"$f\"");
    let s = said(&r);
    let line = s.stdout.lines().next().unwrap_or_default().to_string();
    let tmpdir = line.split_whitespace().next().and_then(|w| w.strip_prefix("TMPDIR=")).unwrap_or_default().to_string();
    let ok = s.ok
        && !tmpdir.is_empty()
        && line == format!("TMPDIR={tmpdir} TMP={tmpdir} TEMP={tmpdir}")
        && s.stdout.contains(&format!("made={tmpdir}/"));
    let detail = format!("{} {}", tail(&s.stdout, 200), tail(&s.stderr, 200));
    verdict("TMPDIR/TMP/TEMP and mktemp", ok, &PLAIN, owner, &detail, started);
}

/// The toolchain's homes, when this user can reach them.
fn rust_homes() -> Option<(PathBuf, PathBuf)> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let cargo =
        std::env::var_os("CARGO_HOME").map(PathBuf::from).or_else(|| home.as_ref().map(|h| h.join(".cargo")))?;
    let rustup =
        std::env::var_os("RUSTUP_HOME").map(PathBuf::from).or_else(|| home.as_ref().map(|h| h.join(".rustup")))?;
    let (cargo, rustup) = (cargo.canonicalize().ok()?, rustup.canonicalize().ok()?);
    (cargo.join("bin/cargo").is_file() && rustup.join("toolchains").is_dir()).then_some((cargo, rustup))
}

#[test]
fn cargo_test_offline_of_a_tiny_crate() {
    let started = Instant::now();
    let Some((cargo_home, rustup_home)) = rust_homes() else {
        println!(
            "skipped: no cargo this user can reach (CARGO_HOME / ~/.cargo with bin/cargo, RUSTUP_HOME / ~/.rustup)"
        );
        let shape = PLAIN;
        record(
            "cargo test --offline",
            "skipped (no reachable toolchain for this user)",
            &shape,
            nix::unistd::geteuid().as_raw(),
            "",
            started,
        );
        return;
    };
    let (c, r) = (cargo_home.display().to_string(), rustup_home.display().to_string());
    let read = [c.as_str(), r.as_str()];
    let env_set = [("CARGO_HOME", c.as_str()), ("RUSTUP_HOME", r.as_str())];
    let shape = Shape {
        read: &read,
        env: &env_set,
        limits: "timeout = \"240s\", memory = \"8GiB\", processes = 256, open_files = 1024",
    };
    let (env, owner) = workspace(Owner::Invoker, |ws| {
        std::fs::create_dir_all(ws.join("tiny/src")).unwrap();
        std::fs::write(
            ws.join("tiny/Cargo.toml"),
            "[package]\nname = \"tiny\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\n",
        )
        .unwrap();
        std::fs::write(
            ws.join("tiny/src/lib.rs"),
            "pub fn add(a: u32, b: u32) -> u32 {\n    a + b\n}\n\n#[cfg(test)]\nmod tests {\n    #[test]\n    \
             fn adds() {\n        assert_eq!(super::add(2, 2), 4);\n    }\n}\n",
        )
        .unwrap();
    });
    let r = sh(
        &env,
        &shape,
        "cd tiny && echo \"TMPDIR=$TMPDIR\" && \"$CARGO_HOME/bin/cargo\" test --offline --target-dir target 2>&1 | tail -n 25",
    );
    let s = said(&r);
    let ok = s.ok && s.stdout.contains("test result: ok. 1 passed") && s.stdout.contains("TMPDIR=/");
    let detail = if ok {
        "1 passed (target dir under the workspace, TMPDIR from warden)".to_string()
    } else {
        format!("exit {:?}: {} {}", s.exit, tail(&s.stdout, 600), tail(&s.stderr, 300))
    };
    let _ = &s.doc;
    verdict("cargo test --offline (tiny crate, no dependencies)", ok, &shape, owner, &detail, started);
}

/// A virtualenv with pytest under the target directory (one per uid), or why not.
fn pytest_venv() -> Result<PathBuf, String> {
    let uid = nix::unistd::geteuid().as_raw();
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("usability-venv-{uid}"));
    let py = venv.join("bin/python");
    let ready = |py: &Path| {
        Command::new(py)
            .args(["-c", "import importlib.metadata as m; assert m.version('pytest') == '8.4.2'"])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if ready(&py) {
        return Ok(venv);
    }
    let out = Command::new(PYTHON).args(["-m", "venv"]).arg(&venv).output().map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!("python3 -m venv: {}", String::from_utf8_lossy(&out.stderr)));
    }
    let out = Command::new(&py)
        .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--timeout", "20", PYTEST])
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() || !ready(&py) {
        return Err(format!("pip install {PYTEST} (offline?): {}", tail(&String::from_utf8_lossy(&out.stderr), 300)));
    }
    Ok(venv)
}

#[test]
fn pytest_runs_and_leaves_no_cache_in_the_workspace() {
    let started = Instant::now();
    let venv = match pytest_venv() {
        Ok(v) => v,
        Err(why) => {
            println!("skipped: cannot make a virtualenv with {PYTEST}: {why}");
            record("pytest", "skipped (no pytest: offline?)", &PLAIN, nix::unistd::geteuid().as_raw(), &why, started);
            return;
        }
    };
    let v = venv.display().to_string();
    let read = [v.as_str()];
    let shape = Shape { read: &read, env: &[], limits: "timeout = \"60s\"" };
    let (env, owner) = workspace(Owner::Ordinary, |ws| {
        std::fs::write(ws.join("test_sample.py"), "def test_adds():\n    assert 1 + 1 == 2\n").unwrap();
    });
    // As a new user would: no -p no:cacheprovider, no environment of their own.
    let r = sh(&env, &shape, &format!("{v}/bin/python -m pytest -q"));
    let s = said(&r);
    let ran = s.ok && s.stdout.contains("1 passed");
    let cache = env.ws.join(".pytest_cache").exists();
    let pycache = env.ws.join("__pycache__").exists();
    let detail = format!(
        "{}; .pytest_cache left in the workspace: {}; __pycache__ left: {}",
        if ran {
            "1 passed".to_string()
        } else {
            format!("exit {:?}: {} {}", s.exit, tail(&s.stdout, 300), tail(&s.stderr, 300))
        },
        if cache { "yes" } else { "no" },
        if pycache { "yes" } else { "no" },
    );
    verdict("pytest (plain `python -m pytest`)", ran && !cache, &shape, owner, &detail, started);
}

/// Runs `command` in the `sh` tool shaped by `shape` with `warden call FLAGS`.
fn sh_flags(env: &Env, shape: &Shape<'_>, flags: &[&str], command: &str) -> Run {
    let policy = env.root.path().join("policy.toml");
    std::fs::write(&policy, shape.policy()).unwrap();
    let args = json!({ "command": command }).to_string();
    let mut argv = vec!["--policy", policy.to_str().unwrap(), "call"];
    argv.extend(flags);
    argv.extend(["sh", &args]);
    env.run(&argv)
}

/// `pytest -v` over 3,001 tests, one failing near the end, under the
/// default `max_output` (64 KiB): the run goes to its end (nothing is killed for
/// its output), the result keeps the head and the tail (the summary line and
/// the failure), and `--exit-status` makes the CI step fail with pytest's own 1.
#[test]
fn pytest_with_3001_tests_and_a_failure_fails_the_step_with_exit_status() {
    let started = Instant::now();
    let venv = match pytest_venv() {
        Ok(v) => v,
        Err(why) => {
            println!("skipped: cannot make a virtualenv with {PYTEST}: {why}");
            record("pytest -v, 3001 tests", "skipped (no pytest: offline?)", &PLAIN, 0, &why, started);
            return;
        }
    };
    let v = venv.display().to_string();
    let read = [v.as_str()];
    let shape = Shape { read: &read, env: &[], limits: "timeout = \"120s\"" };
    let (env, owner) = workspace(Owner::Ordinary, |ws| {
        let mut text = String::from(
            "import pytest\n\n@pytest.mark.parametrize('n', range(3000))\ndef test_many(n):\n    assert n >= 0\n\n",
        );
        text.push_str("def test_zz_the_last_one_fails():\n    assert 'verdict' == 'the end of the log'\n");
        std::fs::write(ws.join("test_big.py"), text).unwrap();
    });
    let r = sh_flags(&env, &shape, &["--exit-status"], &format!("{v}/bin/python -m pytest -v -p no:cacheprovider"));
    let s = said(&r);
    let dropped = s.doc["result"]["dropped"]["stdout"].as_u64().unwrap_or(0);
    let summary = s.stdout.contains("1 failed, 3000 passed");
    let named = s.stdout.contains("test_zz_the_last_one_fails");
    let ok = r.code == 1 && s.exit == Some(1) && summary && named && dropped > 0 && s.doc["truncated"] == true;
    let detail = format!(
        "warden exit {} (pytest's {:?}); truncated {}, {dropped} bytes dropped from the middle; summary line kept: {summary}; failure named: {named}",
        r.code, s.exit, s.doc["truncated"]
    );
    verdict("pytest -v, 3001 tests, 1 failing, --exit-status", ok, &shape, owner, &detail, started);
    // Without the flag the step's exit says only that the call ran.
    let r = sh_flags(&env, &shape, &[], &format!("{v}/bin/python -m pytest -q -p no:cacheprovider"));
    assert_eq!(r.code, 0, "without --exit-status, a call that ran exits 0: {r:?}");
}

/// `--exit-status` for a signal (128+N) and `--stream` copying the
/// program's output to stderr as it arrives, cleaned of terminal escapes.
#[test]
fn exit_status_reports_signals_and_stream_copies_output_cleaned() {
    let (env, _) = workspace(Owner::Invoker, |_| {});
    // A fault's signal, and one the program sends itself (the call's init is
    // pid 1 of its pid namespace, the tool its child: its own kill is not ignored).
    let r =
        sh_flags(&env, &PLAIN, &["--exit-status"], &format!("exec {PYTHON} -c 'import ctypes; ctypes.string_at(0)'"));
    assert_eq!(r.code, 128 + 11, "{r:?}");
    assert_eq!(r.json()["result"]["signal"], "SIGSEGV", "{r:?}");
    let abort = format!("exec {PYTHON} -c 'import os, signal; os.kill(os.getpid(), signal.SIGABRT)'");
    let r = sh_flags(&env, &PLAIN, &["--exit-status"], &abort);
    assert_eq!(r.code, 128 + 6, "a self-SIGABRT is reported as one: {r:?}");
    assert_eq!(r.json()["result"]["signal"], "SIGABRT", "{r:?}");
    let r = sh_flags(&env, &PLAIN, &["--exit-status"], "exit 0");
    assert_eq!(r.code, 0, "{r:?}");
    let r = sh_flags(&env, &PLAIN, &["--stream"], "echo out-line; printf 'err-\\033[31mred\\n' >&2; exit 4");
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stderr.contains("out-line\n") && r.stderr.contains("err-[31mred\n"), "{}", r.stderr);
    assert!(!r.stderr.contains('\u{1b}'), "no escape reaches the terminal: {:?}", r.stderr);
    let doc: serde_json::Value = serde_json::from_str(r.stdout.trim()).unwrap();
    assert_eq!(doc["result"]["exit_code"], 4);
}

/// `policies/ci.toml` as shipped runs real test runners in
/// a CI step, `warden run -- …`: `python3 -m unittest` (a failure fails the
/// step: warden exits with the runner's status), `npm test` with node's own
/// runner, and `cargo test --offline` where this user has a toolchain. Its
/// `test` tool runs a runner's own command line at once and asks for anything
/// else (in CI nobody answers: exit 3).
#[test]
fn the_ci_policy_runs_real_test_runners_and_fails_the_step_when_they_fail() {
    let started = Instant::now();
    let policy = Path::new(env!("CARGO_MANIFEST_DIR")).join("policies/ci.toml");
    let (env, owner) = workspace(Owner::Invoker, |ws| {
        std::fs::write(
            ws.join("test_unit.py"),
            "import unittest\n\nclass T(unittest.TestCase):\n    def test_ok(self):\n        self.assertEqual(1 + 1, 2)\n\n    def test_fails(self):\n        self.assertEqual('warden', 'gate')\n",
        )
        .unwrap();
        std::fs::create_dir_all(ws.join("js")).unwrap();
        std::fs::write(
            ws.join("js/package.json"),
            r#"{"name":"t","version":"1.0.0","scripts":{"test":"node --test"}}"#,
        )
        .unwrap();
        std::fs::write(
            ws.join("js/add.test.js"),
            "const test = require('node:test');\nconst assert = require('node:assert');\ntest('adds', () => assert.strictEqual(1 + 1, 2));\n",
        )
        .unwrap();
    });
    // As a CI job runs it: with the runner's own HOME (its toolchains live there).
    let run = |command: &str| {
        let mut c = env.command(&["--policy", policy.to_str().unwrap(), "run", "--", "sh", "-c", command]);
        if let Some(home) = std::env::var_os("HOME") {
            c.env("HOME", home);
        }
        util::run_to_end(c, None)
    };
    let shape = Shape { read: &[], env: &[], limits: "policies/ci.toml as shipped" };
    let r = run("python3 -m unittest -q test_unit 2>&1");
    let unittest = r.code == 1 && r.stdout.contains("FAILED (failures=1)");
    record(
        "python3 -m unittest (ci.toml, 1 failing)",
        if unittest { "yes" } else { "no" },
        &shape,
        owner,
        &format!("warden exit {}, {}", r.code, tail(&r.stdout, 120)),
        started,
    );
    assert!(unittest, "{r:?}");
    // The `test` tool: a runner's own command line at once, a shell line asks (and nobody answers).
    let call = |command: &str| {
        let args = json!({ "command": command }).to_string();
        let c = env.command(&["--policy", policy.to_str().unwrap(), "call", "test", &args]);
        let r = util::run_to_end(c, None);
        (r.code, r.stdout)
    };
    let (code, out) = call("python3 -m unittest -q test_unit");
    assert!(code == 0 && out.contains("\"exit_code\":1"), "the runner ran at once: {out}");
    let (code, out) = call("python3 -m unittest -q test_unit; id");
    assert!(code == 3 && out.contains("APPROVAL_REQUIRED"), "a shell line asks: {out}");

    if which("npm").is_some() {
        let r = run("cd js && npm test 2>&1");
        let npm = r.code == 0 && r.stdout.contains("pass 1");
        record(
            "npm test (node --test, ci.toml)",
            if npm { "yes" } else { "no" },
            &shape,
            owner,
            &format!("warden exit {}, {}", r.code, tail(&r.stdout, 200)),
            started,
        );
        assert!(npm, "{r:?}");
    }
    if let Some((cargo_home, _)) =
        rust_homes().filter(|(c, _)| c.starts_with(std::env::var("HOME").unwrap_or_default()))
    {
        std::fs::create_dir_all(env.ws.join("tiny/src")).unwrap();
        std::fs::write(
            env.ws.join("tiny/Cargo.toml"),
            "[package]\nname = \"tiny\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
        )
        .unwrap();
        std::fs::write(env.ws.join("tiny/src/lib.rs"), "#[test]\nfn adds() { assert_eq!(1 + 1, 2); }\n").unwrap();
        let r = run(&format!(
            "cd tiny && {}/bin/cargo test --offline -j 16 2>&1 | grep 'test result'",
            cargo_home.display()
        ));
        let cargo = r.code == 0 && r.stdout.contains("test result: ok. 1 passed");
        record(
            "cargo test --offline -j 16 (ci.toml)",
            if cargo { "yes" } else { "no" },
            &shape,
            owner,
            &format!("warden exit {}, {}", r.code, tail(&r.stdout, 200)),
            started,
        );
        assert!(cargo, "{r:?}");
    }
}

/// `chown -R` to the ordinary owner when the test runs as root (as [`workspace`] does).
fn give(path: &Path) {
    if is_root() {
        let out =
            Command::new("chown").args(["-R", &format!("{ORDINARY_UID}:{ORDINARY_UID}")]).arg(path).output().unwrap();
        assert!(out.status.success(), "chown: {}", String::from_utf8_lossy(&out.stderr));
    }
}

#[test]
fn git_rebase_worktree_and_submodule_update_in_the_sandbox() {
    let started = Instant::now();
    let mut lib = PathBuf::new();
    let (env, owner) = workspace(Owner::Ordinary, |ws| {
        // A repository to be the submodule, beside the workspace (the tool may read it).
        lib = ws.parent().unwrap().join("lib-src");
        std::fs::create_dir_all(&lib).unwrap();
        host_git(&lib, &["init", "-q", "-b", "main", "."]);
        std::fs::write(lib.join("lib.txt"), "lib\n").unwrap();
        host_git(&lib, &["add", "lib.txt"]);
        host_git(&lib, &["-c", "user.name=h", "-c", "user.email=h@example.invalid", "commit", "-q", "-m", "lib"]);
        host_git(ws, &["init", "-q", "-b", "main", "."]);
        host_git(ws, &["config", "user.name", "Host User"]);
        host_git(ws, &["config", "user.email", "host@example.invalid"]);
        std::fs::write(ws.join("a.txt"), "one\n").unwrap();
        host_git(ws, &["add", "a.txt"]);
        host_git(ws, &["commit", "-q", "-m", "initial"]);
        let url = lib.display().to_string();
        host_git(ws, &["-c", "protocol.file.allow=always", "submodule", "add", "-q", &url, "lib"]);
        host_git(ws, &["commit", "-q", "-m", "the submodule"]);
        host_git(ws, &["branch", "feature"]);
        std::fs::write(ws.join("b.txt"), "main side\n").unwrap();
        host_git(ws, &["add", "b.txt"]);
        host_git(ws, &["commit", "-q", "-m", "main side"]);
        // The submodule registered but not cloned: `submodule update` in the sandbox clones it.
        host_git(ws, &["submodule", "deinit", "-q", "-f", "lib"]);
        std::fs::remove_dir_all(ws.join(".git/modules/lib")).unwrap();
        host_git(ws, &["submodule", "init", "-q"]);
    });
    give(&lib);
    let read = Box::leak(vec![Box::leak(lib.display().to_string().into_boxed_str()) as &str].into_boxed_slice());
    let shape = Shape { read, env: &[], limits: "timeout = \"120s\"" };
    let script = r#"
step() { "$@" >"$HOME/step.out" 2>&1 || { echo "FAILED at: $*"; cat "$HOME/step.out"; exit 1; }; }
step git checkout -q feature
echo f > f.txt
step git add f.txt
step git commit -q -m feature
step git rebase -q main
step git checkout -q main
step git worktree add -q wt/one -b wt-branch
cd wt/one
echo w > w.txt
step git add w.txt
step git commit -q -m in-the-worktree
cd ../..
step git -c protocol.file.allow=always submodule update -q
step git submodule status
echo ALLOK
"#;
    let r = sh(&env, &shape, script);
    let s = said(&r);
    let ws = &env.ws;
    let mut problems = Vec::new();
    if !s.ok || !s.stdout.contains("ALLOK") {
        problems.push(format!("exit {:?}: {} {}", s.exit, tail(&s.stdout, 300), tail(&s.stderr, 300)));
    } else {
        // The host sees it all: the rebase, the worktree and its commit, the submodule checked out.
        let rebased = host_git(ws, &["log", "--oneline", "main..feature"]);
        if rebased.lines().count() != 1 || !host_git(ws, &["merge-base", "--is-ancestor", "main", "feature"]).is_empty()
        {
            problems.push(format!("feature is not rebased onto main: {rebased}"));
        }
        if !host_git(ws, &["worktree", "list"]).contains("wt/one") {
            problems.push("the worktree is not registered".into());
        }
        if !host_git(&ws.join("wt/one"), &["log", "-1", "--format=%s"]).contains("in-the-worktree") {
            problems.push("the worktree's commit is not there".into());
        }
        let status = host_git(ws, &["submodule", "status"]);
        if !status.starts_with(' ') || !ws.join("lib/lib.txt").exists() || !ws.join("lib/.git").is_file() {
            problems.push(format!("the submodule is not checked out: {status:?}"));
        }
        if s.doc["result"]["layer"]["refused"].is_array() {
            problems.push(format!("warden refused part of ordinary git work: {}", s.doc["result"]["layer"]));
        }
    }
    let ok = problems.is_empty();
    let detail = if ok {
        "git checkout, commit, rebase, worktree add (and a commit in it), submodule update: all worked; the host \
         sees the rebase, the worktree and the submodule"
            .to_string()
    } else {
        problems.join("; ")
    };
    verdict("git (rebase, worktree add, submodule update)", ok, &shape, owner, &detail, started);
}

#[test]
fn git_init_needs_fs_git_init_and_its_repository_is_vetted() {
    let started = Instant::now();
    let (env, owner) = workspace(Owner::Ordinary, |_| {});
    let marker = env.root.path().join("planted-ran");
    let script = format!(
        "git init -q sub && git -C sub -c user.name=t -c user.email=t@example.invalid commit -q --allow-empty -m first \
         && git init -q evil && printf '[core]\\n\\tfsmonitor = \"touch {}\"\\n' >> evil/.git/config && echo ALLOK",
        marker.display()
    );
    // Without the key the repositories stay in the call's layer.
    let without = said(&sh(&env, &PLAIN, &script));
    let refused = without.doc["result"]["layer"].to_string();
    let kept_out = !env.ws.join("sub/.git").exists() && refused.contains("fs.git_init");
    // With it: sub lands whole; evil's config, which runs a program, does not.
    let policy = env.root.path().join("policy-init.toml");
    std::fs::write(&policy, format!("{}fs.git_init = true\n", PLAIN.policy())).unwrap();
    let args = json!({ "command": script }).to_string();
    let with = said(&env.run(&["--policy", policy.to_str().unwrap(), "call", "sh", &args]));
    let log = if env.ws.join("sub/.git").is_dir() {
        host_git(&env.ws.join("sub"), &["log", "--format=%s"])
    } else {
        String::new()
    };
    let evil_cfg = std::fs::read_to_string(env.ws.join("evil/.git/config")).unwrap_or_default();
    // Host git in the vetted repository runs nothing planted.
    let _ = Command::new("git").current_dir(env.ws.join("evil")).args(["-c", "safe.directory=*", "status"]).output();
    let ok = kept_out
        && with.ok
        && log.trim() == "first"
        && !evil_cfg.contains("fsmonitor")
        && !marker.exists()
        && with.doc["result"]["layer"].to_string().contains("evil/.git/config");
    let detail = if ok {
        "without fs.git_init the new repositories stay out (the refusal names the key); with it sub/.git lands and \
         host git reads its commit, and a config setting core.fsmonitor is refused"
            .to_string()
    } else {
        format!(
            "kept out without the key: {kept_out} ({}); with it: exit {:?} {} {}; host log {log:?}; evil config {evil_cfg:?}; ran: {}",
            tail(&refused, 200),
            with.exit,
            tail(&with.stdout, 200),
            tail(&with.doc["result"]["layer"].to_string(), 300),
            marker.exists()
        )
    };
    verdict("git init (fs.git_init)", ok, &PLAIN, owner, &detail, started);
}

#[test]
fn git_reads_its_repository_from_a_monorepo_package_workspace() {
    let started = Instant::now();
    let (env, owner) = workspace(Owner::Ordinary, |_| {});
    // The repository is the workspace's parent: the workspace is one package of it
    // (given, as root, to the ordinary owner whole, or git refuses it as another user's).
    let top = env.root.path();
    host_git(top, &["init", "-q", "-b", "main", "."]);
    std::fs::write(env.ws.join("index.js"), "module.exports = 1\n").unwrap();
    std::fs::write(top.join(".gitignore"), ".local/\npolicy.toml\nstate/\noutside/\n").unwrap();
    host_git(top, &["add", "ws/index.js", ".gitignore"]);
    host_git(top, &["-c", "user.name=h", "-c", "user.email=h@example.invalid", "commit", "-q", "-m", "monorepo"]);
    give(top);
    let read = Box::leak(vec![Box::leak(top.display().to_string().into_boxed_str()) as &str].into_boxed_slice());
    let shape = Shape { read, env: &[], limits: "timeout = \"60s\"" };
    let r = sh(&env, &shape, "git log --format=%s; echo new > n.txt; git status --short .; git diff --stat");
    let s = said(&r);
    let ok = s.ok && s.stdout.contains("monorepo") && s.stdout.contains("?? n.txt") && env.ws.join("n.txt").exists();
    let detail = if ok {
        "git log and git status from a package of a repository around the workspace: both worked".to_string()
    } else {
        format!("exit {:?}: {} {}", s.exit, tail(&s.stdout, 300), tail(&s.stderr, 300))
    };
    verdict("git in a monorepo package", ok, &shape, owner, &detail, started);
}
