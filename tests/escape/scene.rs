//! The scene every case runs in: a secret planted outside every workspace, a
//! fresh workspace per case, the real `warden` binary for process tools and the
//! library `Executor` for components, and the canaries the cases check.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::util::kit::Kit;
use crate::util::{Run, cache_dir, clip, run_bounded, run_bounded_with};

/// The real command line.
pub(crate) const WARDEN: &str = env!("CARGO_BIN_EXE_warden");
/// The interpreter the probes are written for (Debian package python3).
pub(crate) const PYTHON: &str = "/usr/bin/python3";
/// The hostile test component (`plugins/testkit`).
pub(crate) const TESTKIT: &str = warden::runtime::builtin::TESTKIT_WASM;
/// Set in warden's own environment to the secret: no tool may ever see it.
pub(crate) const CANARY_VAR: &str = "WARDEN_ESCAPE_CANARY";
/// Everything the cases share.
pub(crate) struct Scene {
    _dir: tempfile::TempDir,
    /// The scene's root (canonical): `outside/`, `ws/<case>/`, `policies/`, `logs/`.
    pub base: PathBuf,
    /// A directory no policy grants, holding `secret.txt`.
    pub outside: PathBuf,
    /// `outside/secret.txt`, mode 0644: only the sandbox keeps a tool from it.
    pub secret_file: PathBuf,
    /// The secret's text (unique per run).
    pub secret: String,
    /// The first line of `/etc/shadow`, when the test can read it (as root).
    pub shadow: Option<String>,
    /// Whether the test runs as root (the tool then runs as uid 0 without capabilities).
    pub root: bool,
    counter: AtomicUsize,
    /// The namespaces a process call gets on this host (its record's `sandbox.namespaces`), asked once.
    namespaces: std::sync::OnceLock<Vec<String>>,
}

/// The extra shape of a shell tool's policy.
#[derive(Clone, Copy)]
pub(crate) struct Tool<'a> {
    /// Extra `fs.read` entries.
    pub read: &'a [&'a str],
    /// `net.connect` entries.
    pub net: &'a [&'a str],
    /// The inside of `limits = { … }`.
    pub limits: &'a str,
}

/// A shell tool that reads `{system}` and its workspace, writes its workspace and `{tmp}`.
pub(crate) const SHELL: Tool<'static> = Tool { read: &[], net: &[], limits: "timeout = \"20s\"" };
/// The same with `/proc` readable.
pub(crate) const SHELL_PROC: Tool<'static> = Tool { read: &["/proc"], net: &[], limits: "timeout = \"20s\"" };

impl Scene {
    pub(crate) fn new() -> Scene {
        let dir = tempfile::Builder::new().prefix("warden-escape-").tempdir().expect("a temporary directory");
        let base = dir.path().canonicalize().unwrap();
        // Traversable by everyone, so a case may run its tool as another uid: only
        // the sandbox, never file modes, keeps a tool from what lies here.
        set_mode(&base, 0o755);
        let outside = base.join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        set_mode(&outside, 0o755);
        for d in ["ws", "policies", "logs", "home"] {
            std::fs::create_dir_all(base.join(d)).unwrap();
            set_mode(&base.join(d), 0o755);
        }
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
        let secret = format!("ESCAPE-SECRET-{:x}-{}", nanos, std::process::id());
        let secret_file = outside.join("secret.txt");
        std::fs::write(&secret_file, &secret).unwrap();
        set_mode(&secret_file, 0o644);
        let shadow = std::fs::read_to_string("/etc/shadow")
            .ok()
            .and_then(|s| s.lines().next().map(str::to_string))
            .filter(|l| {
                // A line worth looking for: long enough not to occur by chance.
                l.len() > 12
            });
        Scene {
            _dir: dir,
            base,
            outside,
            secret_file,
            secret,
            shadow,
            root: nix::unistd::geteuid().is_root(),
            counter: AtomicUsize::new(0),
            namespaces: std::sync::OnceLock::new(),
        }
    }

    /// Whether `text` holds the secret, warden's canary variable or a line of `/etc/shadow`.
    pub(crate) fn leaks(&self, text: &str) -> bool {
        text.contains(&self.secret) || self.shadow.as_deref().is_some_and(|l| text.contains(l))
    }

    /// `text` with every secret replaced, so that a report never carries one.
    pub(crate) fn redact(&self, text: &str) -> String {
        let mut t = text.replace(&self.secret, "[THE SECRET]");
        if let Some(l) = &self.shadow {
            t = t.replace(l.as_str(), "[A LINE OF /etc/shadow]");
        }
        t
    }

    /// A fresh, empty workspace for case `id` (canonical).
    pub(crate) fn ws(&self, id: &str) -> PathBuf {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let ws = self.base.join("ws").join(format!("{}-{n}", id.replace(['/', '.'], "_")));
        std::fs::create_dir_all(&ws).unwrap();
        ws.canonicalize().unwrap()
    }

    /// A directory outside every workspace, for read-only grants and planted files.
    pub(crate) fn side_dir(&self, name: &str) -> PathBuf {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let d = self.base.join(format!("{name}-{n}"));
        std::fs::create_dir_all(&d).unwrap();
        set_mode(&d, 0o755);
        d
    }

    /// A fresh audit log path (not yet created), outside every workspace.
    pub(crate) fn log_file(&self) -> PathBuf {
        self.unique("logs", "jsonl")
    }

    fn unique(&self, dir: &str, ext: &str) -> PathBuf {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        self.base.join(dir).join(format!("{n}.{ext}"))
    }

    /// A policy file holding `text`, outside every workspace.
    pub(crate) fn policy_file(&self, text: &str) -> PathBuf {
        let p = self.unique("policies", "toml");
        std::fs::write(&p, text).unwrap();
        p
    }

    /// The text of a policy with one `shell` tool (bash, tier auto) shaped by `tool`.
    pub(crate) fn shell_policy(tool: Tool<'_>) -> String {
        let quote = |v: &[&str]| v.iter().map(|s| format!("{s:?}")).collect::<Vec<_>>().join(", ");
        let mut read = vec!["{system}", "{workspace}"];
        read.extend(tool.read);
        format!(
            "version = 1\n[tools.shell]\nexec = [\"/bin/bash\", \"-c\", \"{{command}}\"]\ntier = \"auto\"\n\
             fs.read = [{}]\nfs.write = [\"{{workspace}}\", \"{{tmp}}\"]\nnet.connect = [{}]\n\
             env = {{ set = {{ PATH = \"/usr/local/bin:/usr/bin:/bin\", HOME = \"{{tmp}}\" }} }}\nlimits = {{ {} }}\n",
            quote(&read),
            quote(tool.net),
            tool.limits
        )
    }

    /// `warden call shell {"command": command}` in `ws` under a policy shaped by `tool`.
    pub(crate) fn shell(&self, ws: &Path, tool: Tool<'_>, command: &str) -> Run {
        let policy = self.policy_file(&Scene::shell_policy(tool));
        let args = serde_json::json!({ "command": command }).to_string();
        self.warden(ws, &["--policy", policy.to_str().unwrap(), "call", "shell", &args], None, None)
    }

    /// Writes `script` to `ws/probe.py` and runs it with python3 in the shell tool;
    /// `then` runs in the same shell afterwards (for example `echo exit=$?`).
    pub(crate) fn python(&self, ws: &Path, tool: Tool<'_>, script: &str, then: &str) -> Run {
        std::fs::write(ws.join("probe.py"), script).unwrap();
        self.shell(ws, tool, &format!("{PYTHON} probe.py; {then}"))
    }

    /// Runs warden with `args` (after `--audit-log LOG --workspace WS`) in `cwd`
    /// (default: `ws`), with the canary in its environment, stdin from `stdin`.
    pub(crate) fn warden(&self, ws: &Path, args: &[&str], stdin: Option<&[u8]>, cwd: Option<&Path>) -> Run {
        let log = self.unique("logs", "jsonl");
        self.warden_logged(ws, &log, args, stdin, cwd)
    }

    /// [`Scene::warden`] with a chosen audit log.
    pub(crate) fn warden_logged(
        &self,
        ws: &Path,
        log: &Path,
        args: &[&str],
        stdin: Option<&[u8]>,
        cwd: Option<&Path>,
    ) -> Run {
        let mut c = self.warden_command(ws, log, args, cwd);
        c.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() });
        run_bounded(c, stdin)
    }

    /// [`Scene::warden_logged`] (no stdin, in `ws`) with `env` added to warden's environment.
    pub(crate) fn warden_env(&self, ws: &Path, log: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
        let mut c = self.warden_command(ws, log, args, None);
        c.stdin(Stdio::null());
        for (k, v) in env {
            c.env(k, v);
        }
        run_bounded(c, None)
    }

    /// The command line of [`Scene::warden_logged`], stdin not yet chosen.
    fn warden_command(&self, ws: &Path, log: &Path, args: &[&str], cwd: Option<&Path>) -> Command {
        let mut c = Command::new(WARDEN);
        c.current_dir(cwd.unwrap_or(ws))
            .arg("--audit-log")
            .arg(log)
            .arg("--workspace")
            .arg(ws)
            .args(args)
            .env(CANARY_VAR, &self.secret)
            .env("WARDEN_CACHE_DIR", cache_dir())
            .env("HOME", self.base.join("home"))
            // The system's programs, whatever the invoking shell had first on PATH (tests/util).
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env_remove("XDG_STATE_HOME")
            .env_remove("XDG_CACHE_HOME")
            .env_remove("RUST_LOG")
            // Its own process group: a group kill that got through would not reach this test.
            .process_group(0)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }

    /// Runs warden like [`Scene::warden`] (in `cwd`), and once it is started writes
    /// its host pid to `ws/warden.pid` (made whole by a rename), for a probe that
    /// aims at warden by the pid the host knows it by.
    pub(crate) fn warden_with_pid(&self, ws: &Path, log: &Path, args: &[&str], cwd: Option<&Path>) -> Run {
        let mut c = self.warden_command(ws, log, args, cwd);
        c.stdin(Stdio::null());
        let (tmp, dest) = (ws.join(".warden.pid.tmp"), ws.join("warden.pid"));
        run_bounded_with(c, None, &|pid| {
            let _ = std::fs::write(&tmp, pid.to_string()).and_then(|()| std::fs::rename(&tmp, &dest));
        })
    }

    /// The namespaces a process call gets on this host (`sandbox.namespaces` of one
    /// `true` call's record; empty when it gets none). Asked once per run.
    pub(crate) fn call_namespaces(&self) -> &[String] {
        self.namespaces.get_or_init(|| {
            let ws = self.ws("namespaces-probe");
            let log = self.unique("logs", "jsonl");
            let policy = self.policy_file(&Scene::shell_policy(SHELL));
            let r = self.warden_logged(
                &ws,
                &log,
                &["--policy", policy.to_str().unwrap(), "call", "shell", r#"{"command":"true"}"#],
                None,
                None,
            );
            assert!(r.success(), "the namespace probe call failed: {}", r.brief());
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let record: Value = text.lines().last().and_then(|l| serde_json::from_str(l).ok()).unwrap_or(Value::Null);
            record["sandbox"]["namespaces"]
                .as_array()
                .map(|v| v.iter().filter_map(|n| n.as_str().map(str::to_string)).collect())
                .unwrap_or_default()
        })
    }

    /// Whether a process call gets the namespace `name` (`pid`, `ipc`, `mount`, `user`) here.
    pub(crate) fn call_has(&self, name: &str) -> bool {
        self.call_namespaces().iter().any(|n| n == name)
    }

    /// A library executor over `tools` (TOML tables), with the testkit as plugin
    /// `kit` and the builtin `fs` component as plugin `fs`, defaults tier auto,
    /// timeout 1s and memory 32MiB, in a fresh workspace.
    pub(crate) fn kit(&self, id: &str, tools: &str) -> Kit {
        self.kit_in(self.ws(id), tools)
    }

    /// [`Scene::kit`] in the workspace `ws`, prepared by the caller.
    pub(crate) fn kit_in(&self, ws: PathBuf, tools: &str) -> Kit {
        let text = format!("{}{tools}", kit_header());
        Kit::at(ws, &self.base.join("home"), self.unique("logs", "jsonl"), &text)
    }
}

/// The policy header of [`Scene::kit`] (also usable with the binary).
pub(crate) fn kit_header() -> String {
    let sha = hex::encode(Sha256::digest(std::fs::read(TESTKIT).unwrap()));
    format!(
        "version = 1\n[defaults]\ntier = \"auto\"\ntimeout = \"1s\"\nmemory = \"32MiB\"\n\
         [plugins.kit]\nsource = \"{TESTKIT}\"\nsha256 = \"{sha}\"\n[plugins.fs]\nsource = \"builtin:fs\"\n"
    )
}

pub(crate) fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

pub(crate) fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::symlink_metadata(path).map(|m| m.permissions().mode() & 0o7777).unwrap_or(0)
}

/// Live (non-zombie) processes whose command line contains `marker`, waiting up
/// to 5 s for them to go (the host's kill and the reaping take a moment).
pub(crate) fn survivors(marker: &str) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let found = scan(marker);
        if found.is_empty() || Instant::now() > deadline {
            return found;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn scan(marker: &str) -> Vec<String> {
    let me = std::process::id().to_string();
    let mut found = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else { return found };
    for e in dir.filter_map(Result::ok) {
        let path = e.path();
        if path.file_name().is_some_and(|n| n == me.as_str()) {
            continue;
        }
        let Ok(cmd) = std::fs::read(path.join("cmdline")) else { continue };
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        let stat = std::fs::read_to_string(path.join("stat")).unwrap_or_default();
        let zombie = stat.rsplit_once(')').is_some_and(|(_, r)| r.trim_start().starts_with('Z'));
        if cmd.contains(marker) && !zombie && !cmd.contains("cargo") {
            found.push(format!("{}: {}", path.display(), clip(&cmd, 80)));
        }
    }
    found
}
