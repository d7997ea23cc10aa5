//! warden's runtimes: what runs a tool inside its sandbox, and the walls they share.
//!
//! [`Walls`] is what one call may reach, resolved from the tool's policy entry
//! (placeholders expanded, the per-call `{tmp}` created). A runtime turns it into
//! real confinement: wasmtime preopens and socket checks for components
//! ([`wasm`]), the `warden-sandbox` helper for processes ([`process`]), both for
//! wrapped MCP servers ([`server`]). Nothing here decides whether a call may run
//! (the host's executor did), and nothing here can reach the host's catalog,
//! executor, approval, audit, MCP server or CLI: this crate does not depend on them.

#![deny(unsafe_code)]

use warden_egress as egress;
use warden_policy as policy;

pub mod builtin;
pub mod error;
pub mod paths;
pub mod shape;

pub mod capture;
pub mod credentials;
pub mod hints;
pub mod layer;
pub mod oci;
pub mod persist;
pub mod process;
pub mod progress;
pub mod protect;
pub mod server;
pub mod signature;
pub mod wasm;

use std::fs;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::Serialize;

use crate::error::{CallError, ErrorCode};
use crate::policy::{GrantPath, Limits, NetGrant, ToolSpec};

/// A switch that stops one running call: its process tree is killed, or its
/// component traps at the next epoch tick. Cloned handles share the switch.
#[derive(Debug, Clone, Default)]
pub struct Cancel(Arc<AtomicBool>);

impl Cancel {
    /// A switch that is off.
    pub fn new() -> Cancel {
        Cancel::default()
    }

    /// Stops the call (idempotent).
    pub fn cancel(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    /// Whether the call was stopped.
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// Which stream a chunk of a program's output came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// Its standard output.
    Stdout,
    /// Its standard error.
    Stderr,
}

/// Sees a program's output as it arrives, before anything is dropped
/// (`warden call --stream`): process tools and command components.
pub type OutputTap = Arc<dyn Fn(Stream, &[u8]) + Send + Sync>;

/// One progress report of a running call (a `warden:plugin@0.2.0` component's
/// `progress` import, or a process tool's `WARDEN_PROGRESS_FD` line), already
/// bounded by [`progress::Reporter`]: `done` increased since the last
/// report, `total` (when given) is at least `done`, the message is clean.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Progress {
    /// Units done so far.
    pub done: u64,
    /// Units in all, when known.
    pub total: Option<u64>,
    /// What is happening (at most 256 bytes).
    pub message: String,
}

/// Sees a call's progress reports as they come (`warden serve` turns them into
/// MCP `notifications/progress`).
pub type ProgressSink = Arc<dyn Fn(&Progress) + Send + Sync>;

/// What watches one running call: the switch that cancels it, what sees its
/// output as it arrives, and what sees its progress reports (without a sink,
/// they go to `tap` as lines).
#[derive(Clone, Copy)]
pub struct Watch<'a> {
    /// Switched on to stop the call.
    pub cancel: &'a Cancel,
    /// Sees the program's output as it arrives.
    pub tap: Option<&'a OutputTap>,
    /// Sees the call's progress reports.
    pub progress: Option<&'a ProgressSink>,
}

/// What one call asks of a runtime: the tool, its input, its walls, and what
/// watches it. The executor builds one per call after every check has passed.
pub struct Invocation<'a> {
    /// The tool's name (every error names it).
    pub tool: &'a str,
    /// What the call runs with.
    pub input: Input<'a>,
    /// What the call may reach.
    pub walls: &'a Walls,
    /// The call's own `{tmp}`, when its walls have one.
    pub tmp: Option<&'a Path>,
    /// Its cancel switch, output tap and progress sink.
    pub watch: Watch<'a>,
}

/// A call's input.
pub enum Input<'a> {
    /// The tool's arguments, validated against its schema: a process tool fills
    /// its `exec` template with them, a component gets them as JSON.
    Args(&'a serde_json::Value),
    /// A command line: a command component's argv (output captured), or, for a
    /// process tool, `warden run`'s own command (warden's stdio).
    Argv(Vec<String>),
}

/// A runtime that confines each call by the call's walls: components
/// ([`wasm::ComponentRuntime`]) and process tools ([`process::ProcessRuntime`]).
/// A wrapped MCP server is not one: it is confined once, when it starts, by
/// its own walls, and a call is a request to it ([`server::Servers::call`]).
pub trait Runtime {
    /// What the policy names to run: a program (`exec`) or a loaded component.
    type Target: ?Sized;
    /// What this runtime enforces for `walls` (the record's `sandbox`, before the run confirms it).
    fn report(&self, walls: &Walls) -> SandboxReport;
    /// Runs `target` as `call` describes, inside `call.walls`.
    fn run(&self, target: &Self::Target, call: Invocation<'_>) -> Result<RunOutput, CallError>;
}

/// A tool as its owner describes it: a plugin's `describe()`, or an MCP
/// server's `tools/list` (what `warden.lock` pins and the catalog judges).
#[derive(Debug, Clone)]
pub struct ToolDef {
    /// Its name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// Its JSON Schema, as text.
    pub input_schema: String,
}

/// What a call used.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Usage {
    /// CPU time of the thread or process that ran it.
    pub cpu_ms: f64,
    /// Peak memory in KiB (for components: peak linear memory).
    pub max_rss_kb: u64,
    /// Bytes of output the tool produced (result plus captured streams).
    pub output_bytes: u64,
    /// Whether anything it produced was cut at a limit.
    pub truncated: bool,
    /// The progress reports it made, when it made any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub progress: Option<progress::ProgressCounts>,
}

/// The sandbox layers a call ran under, as recorded in results and the audit log.
#[derive(Debug, Clone, Serialize)]
pub struct SandboxReport {
    /// `component` (or `process`).
    pub runtime: &'static str,
    /// Landlock ABI in force (processes only).
    pub landlock_abi: Option<u32>,
    /// Whether a seccomp filter was installed (processes only).
    pub seccomp: bool,
    /// Whether rlimits were applied (processes only).
    pub rlimits: bool,
    /// The uid the tool ran as.
    pub uid: Option<u32>,
    /// What bounded the number of processes: `pids-cgroup`, `rlimit`, or `none` (as
    /// root without a cgroup, in best-effort mode) (processes only).
    pub processes: Option<&'static str>,
    /// The directories the call could reach: `path (ro|rw)`.
    pub dirs: Vec<String>,
    /// The TCP destinations it could reach.
    pub net: Vec<String>,
    /// Whether the call's `{tmp}` was a tmpfs of its own bounded by
    /// `limits.tmp_size` and `tmp_files` (processes with a `{tmp}` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tmp_quota: Option<bool>,
    /// What bounded the memory the tree holds (`memfd`, shared memory and
    /// `{tmp}` pages included): `cgroup`, or `rlimit` (address space and file
    /// size only) (processes only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<&'static str>,
    /// SysV IPC and POSIX message queues: `namespace` (a private IPC namespace),
    /// `refused` (seccomp), or `shared` (`sysv_ipc = true` without a namespace) (processes only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ipc: Option<&'static str>,
    /// What enforces the protected and denied paths (`fs.deny_read`,
    /// `fs.deny_write`, the built-in protected list): `mount-namespace`,
    /// `wasi-host`, or `none` (best-effort mode where no layer could).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paths: Option<&'static str>,
    /// The namespaces the call had of its own (`user`, `mount`, `pid`, `ipc`)
    /// (processes only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<&'static str>,
    /// `/proc`: `private` (the call's pid namespace) or `host` (processes only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proc: Option<&'static str>,
    /// What keeps the tool from changing file metadata (mode, owner, times,
    /// extended attributes) outside its write grants: `mount-view` (every
    /// other mount of its namespace read-only), `seccomp-uid0` (no namespace:
    /// refused to uid 0 only), or `none` (an ordinary uid without a namespace
    /// may change what it owns) (processes only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<&'static str>,
    /// How the call reaches the network: `proxy` (a network namespace whose one
    /// way out is warden's egress proxy), `loopback` (a network namespace, no
    /// grants), `landlock-ports` (best-effort without a namespace: every host on
    /// the granted ports), `none` (no sockets), or `wasi-host` (components).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub egress: Option<&'static str>,
    /// What the tool's file system is: `grants` (a root built from its grants:
    /// nothing else exists, and `AF_UNIX` sockets are admitted) or `host` (the
    /// host's tree under Landlock, `AF_UNIX` refused) (processes only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub view: Option<&'static str>,
}

/// What a tool returned.
#[derive(Debug, Clone)]
pub struct RunOutput {
    /// The result document.
    pub value: serde_json::Value,
    /// What it used.
    pub usage: Usage,
    /// The sandbox as the runtime confirmed it after the run, when it reports one.
    pub sandbox: Option<SandboxReport>,
    /// The value is MCP content (`{"content": [blocks], "structuredContent": {…}}`,
    /// from a `warden:plugin@0.2.0` component): it is fitted to `max_output`
    /// block by block ([`crate::shape::fit_content`]), never cut inside a binary.
    pub blocks: bool,
}

/// Everything one call may reach: directories, environment, network and limits.
#[derive(Debug, Clone)]
pub struct Walls {
    /// Granted paths that exist (directories, and for processes files), with write access or not.
    pub dirs: Vec<(PathBuf, bool)>,
    /// Granted paths as the policy spells them, where a symbolic link on the
    /// way (`/etc/localtime`, a merged-`/usr` `/lib64`) makes them differ from
    /// their canonical form in `dirs`: a call's root built from its grants
    /// recreates those links.
    pub links: Vec<PathBuf>,
    /// The whole environment the tool sees.
    pub env: Vec<(String, String)>,
    /// TCP destinations.
    pub net: Vec<NetGrant>,
    /// Host unix sockets the tool may connect to (`net.unix`), as granted.
    pub unix: Vec<PathBuf>,
    /// `net.allow_private = true`.
    pub allow_private: bool,
    /// The call's network attempts, as its egress proxy saw them.
    pub journal: std::sync::Arc<crate::egress::Journal>,
    /// Limits.
    pub limits: Limits,
    /// The workspace (relative paths are joined to it).
    pub workspace: PathBuf,
    /// The call's `{tmp}`, when it has one (nothing in it outlives the call).
    pub tmp: Option<PathBuf>,
    /// SysV IPC and POSIX message queues admitted without a private IPC namespace.
    pub sysv_ipc: bool,
    /// inotify watches admitted.
    pub inotify: bool,
    /// `{system}` is granted (a private `/proc` and `/dev/shm` go with it where
    /// the call has namespaces of its own).
    pub system: bool,
    /// Protected and denied paths inside the grants.
    pub protect: protect::Protection,
    /// The credentials it holds (`credentials = [...]`), loaded: the egress
    /// proxy puts their real values into requests toward their binds.
    pub credentials: Vec<std::sync::Arc<crate::egress::vault::Held>>,
}

impl Walls {
    /// Walls that reach nothing (no directory, environment, network or IPC)
    /// within `limits`: what a caller starts from before granting its own few
    /// things (a component's `describe()`, the self-test, tests).
    pub fn nothing(workspace: PathBuf, limits: Limits) -> Walls {
        Walls {
            dirs: Vec::new(),
            links: Vec::new(),
            env: Vec::new(),
            net: Vec::new(),
            unix: Vec::new(),
            allow_private: false,
            journal: Default::default(),
            limits,
            workspace,
            tmp: None,
            sysv_ipc: false,
            inotify: false,
            system: false,
            protect: Default::default(),
            credentials: Vec::new(),
        }
    }

    /// Resolves a tool's grants for one call; `tmp` is created when the grants mention it.
    /// `writable` are the places some tool may write ([`crate::Policy::writable_roots`]):
    /// a granted path that passes through a symbolic link inside one of them is
    /// refused, and every granted path is given to the runtimes in its canonical
    /// form, which they open without following any link ([`resolve_grant`]).
    pub fn for_tool(
        tool: &ToolSpec,
        workspace: &Path,
        writable: &[PathBuf],
        own: &[(String, PathBuf)],
    ) -> Result<(Walls, Option<CallTmp>), CallError> {
        let g = &tool.grants;
        let needs_tmp = g.paths.iter().any(|p| matches!(p.path, GrantPath::Tmp(_)))
            || g.env_set.values().any(|v| v.contains("{tmp}"));
        let tmp = if needs_tmp { Some(CallTmp::create()?) } else { None };
        let (dirs, links) = resolve_paths(tool, tmp.as_ref(), writable)?;
        let unix = resolve_unix(tool, &dirs, writable)?;
        let expand_globs = matches!(tool.runner, crate::policy::Runner::Process(_) | crate::policy::Runner::Server(_));
        let protect = protect::Protection::for_call(&protect::ProtectInput {
            tool: &tool.name,
            dirs: &dirs,
            deny: &g.deny,
            unprotect: &g.unprotect,
            tmp: tmp.as_ref().map(|t| t.path.as_path()),
            expand_globs,
            git_init: g.git_init,
            own,
        })
        .map_err(|e| CallError::new(ErrorCode::PermissionDenied, format!("{}: {e}", tool.name)))?;
        let mut env = call_env(g, tmp.as_ref(), &dirs);
        let mut dirs = dirs;
        let credentials = credentials::for_call(tool, &mut env, &mut dirs)?;
        let walls = Walls {
            dirs,
            links,
            env,
            net: g.net.clone(),
            unix,
            allow_private: g.allow_private,
            journal: Default::default(),
            limits: tool.limits,
            workspace: workspace.to_path_buf(),
            tmp: tmp.as_ref().map(|t| t.path.clone()),
            sysv_ipc: g.sysv_ipc,
            inotify: g.inotify,
            system: g.system,
            protect,
            credentials,
        };
        Ok((walls, tmp))
    }

    /// The reachable directories as `path (ro|rw)`, for sandbox reports.
    pub fn dirs_text(&self) -> Vec<String> {
        self.dirs.iter().map(|(d, w)| format!("{} ({})", d.display(), if *w { "rw" } else { "ro" })).collect()
    }
}

/// A granted directory and whether it is writable.
type Dir = (PathBuf, bool);

/// A tool's path grants for one call, each resolved ([`resolve_grant`]) with
/// `{tmp}` ones made in the call's directory; and the granted paths that were links.
fn resolve_paths(
    tool: &ToolSpec,
    tmp: Option<&CallTmp>,
    writable: &[PathBuf],
) -> Result<(Vec<Dir>, Vec<PathBuf>), CallError> {
    let mut dirs = Vec::new();
    let mut links = Vec::new();
    for grant in &tool.grants.paths {
        let path = match (&grant.path, tmp) {
            (GrantPath::Fixed(p), _) => p.clone(),
            (GrantPath::Tmp(rel), Some(t)) => {
                let p = t.path.join(rel);
                fs::create_dir_all(&p)
                    .map_err(|e| CallError::new(ErrorCode::Internal, format!("cannot create {}: {e}", p.display())))?;
                p
            }
            (GrantPath::Tmp(_), None) => continue,
        };
        match resolve_grant(&tool.name, &path, writable)? {
            Some(resolved) => {
                if resolved != path {
                    links.push(path);
                }
                dirs.push((resolved, grant.write));
            }
            None => tracing::debug!(tool = %tool.name, "grant {} does not exist: nothing to open", path.display()),
        }
    }
    Ok((dirs, links))
}

/// A tool's `net.unix` grants for one call: each resolved as a grant is (no
/// link planted where a tool may write), and a socket it must be; one that is
/// not there is left out (the program finds no such file).
fn resolve_unix(tool: &ToolSpec, dirs: &[(PathBuf, bool)], writable: &[PathBuf]) -> Result<Vec<PathBuf>, CallError> {
    let mut unix = Vec::new();
    for p in &tool.grants.unix {
        let Some(resolved) = resolve_grant(&tool.name, p, writable)? else { continue };
        use std::os::unix::fs::FileTypeExt;
        let is_socket = fs::symlink_metadata(&resolved).is_ok_and(|m| m.file_type().is_socket());
        if !is_socket {
            return Err(CallError::new(
                ErrorCode::PermissionDenied,
                format!(
                    "{}: net.unix {} is not a socket ({}); name the socket itself, not its directory",
                    tool.name,
                    p.display(),
                    resolved.display()
                ),
            ));
        }
        if let Some((d, _)) = dirs.iter().find(|(d, w)| *w && resolved.starts_with(d)) {
            return Err(CallError::new(
                ErrorCode::PermissionDenied,
                format!(
                    "{}: net.unix {} lies in its write grant {}, where the call's layer shows a copy that \
                     connects to nothing; grant that directory read-only, or move the socket",
                    tool.name,
                    p.display(),
                    d.display()
                ),
            ));
        }
        unix.push(resolved);
    }
    Ok(unix)
}

/// The call's environment: `TMPDIR`, `TMP`, `TEMP` and the cache variables in
/// its own `{tmp}` (unless the policy sets or passes them), the passed
/// variables, then the set ones with `{tmp}` filled.
fn call_env(g: &crate::policy::Grants, tmp: Option<&CallTmp>, dirs: &[(PathBuf, bool)]) -> Vec<(String, String)> {
    let mut env = Vec::new();
    // TMPDIR, TMP and TEMP: the call's own {tmp} (the first writable
    // directory in it), unless the policy sets or passes them.
    if let Some(t) = tmp {
        let writable_tmp = dirs.iter().filter(|(p, w)| *w && p.starts_with(&t.path)).map(|(p, _)| p).min();
        if let Some(dir) = writable_tmp {
            let dir = dir.to_string_lossy();
            // Caches that programs would otherwise leave in the workspace
            // (Python's __pycache__, pytest's .pytest_cache) go there too.
            let defaults = [
                ("TMPDIR", dir.to_string()),
                ("TMP", dir.to_string()),
                ("TEMP", dir.to_string()),
                ("PYTHONPYCACHEPREFIX", format!("{dir}/pycache")),
                ("PYTEST_ADDOPTS", format!("-o cache_dir={dir}/pytest-cache")),
            ];
            for (var, value) in defaults {
                if !g.env_set.contains_key(var) && !g.env_pass.iter().any(|p| p == var) {
                    env.push((var.to_string(), value));
                }
            }
        }
    }
    for name in &g.env_pass {
        if let Ok(v) = std::env::var(name) {
            env.push((name.clone(), v));
        }
    }
    for (k, v) in &g.env_set {
        let v = match tmp {
            Some(t) => v.replace("{tmp}", &t.path.to_string_lossy()),
            None => v.clone(),
        };
        env.push((k.clone(), v));
    }
    env
}

/// One granted path for one call: its canonical form, or `None` when it does
/// not exist. A grant is resolved again at every call, and a tool that may
/// write where the path leads could have replaced a directory of it with a
/// symbolic link since the last one (`{workspace}/sub` -> `/etc`), widening
/// this call's grant to the link's target. So the path is walked one component
/// at a time and every symbolic link met, one hop at a time (the links inside
/// a link's target included), is judged where it lies: one strictly inside a
/// `writable` place (canonical paths: [`crate::Policy::writable_roots`]; a
/// writable root itself cannot be replaced from within) is refused. Links
/// elsewhere (`/bin` -> `usr/bin`, an administrator's `/home` -> `/data/home`)
/// are followed. The runtimes open the canonical result without following any
/// link (`openat2` with `RESOLVE_NO_SYMLINKS`), so a link planted after this
/// check fails the call instead of being followed.
pub fn resolve_grant(tool: &str, path: &Path, writable: &[PathBuf]) -> Result<Option<PathBuf>, CallError> {
    use std::collections::VecDeque;
    use std::path::Component;
    /// Links followed at most, as the kernel's own limit (`ELOOP`).
    const MAX_HOPS: usize = 40;
    fn parts(p: &Path) -> VecDeque<std::ffi::OsString> {
        p.components()
            .filter_map(|c| match c {
                Component::RootDir => Some("/".into()),
                Component::ParentDir => Some("..".into()),
                Component::Normal(n) => Some(n.to_os_string()),
                Component::CurDir | Component::Prefix(_) => None,
            })
            .collect()
    }
    let mut pending = parts(path);
    // `at` never holds a symbolic link: each component was checked when added.
    let mut at = PathBuf::from("/");
    let mut hops = 0;
    while let Some(part) = pending.pop_front() {
        if part == "/" {
            at = PathBuf::from("/");
            continue;
        }
        if part == ".." {
            at.pop();
            continue;
        }
        let next = at.join(&part);
        let Ok(meta) = fs::symlink_metadata(&next) else { return Ok(None) };
        if !meta.file_type().is_symlink() {
            at = next;
            continue;
        }
        let target = fs::read_link(&next).map_err(|e| {
            CallError::new(ErrorCode::Internal, format!("{tool}: cannot read the link {}: {e}", next.display()))
        })?;
        if let Some(root) = writable.iter().find(|w| next != **w && next.starts_with(w)) {
            return Err(CallError::new(
                ErrorCode::PermissionDenied,
                format!(
                    "{tool}: the granted path {} passes through the symbolic link {} (-> {}), inside {}, \
                     where a tool may write: a tool could have planted it to widen this grant, so the call does \
                     not run; remove the link, or grant its target directly in fs.read/fs.write",
                    path.display(),
                    next.display(),
                    target.display(),
                    root.display()
                ),
            ));
        }
        hops += 1;
        if hops > MAX_HOPS {
            return Err(CallError::new(
                ErrorCode::PermissionDenied,
                format!("{tool}: the granted path {} goes through more than {MAX_HOPS} links", path.display()),
            ));
        }
        // Go on from where the link leads, its own components judged in turn.
        let mut rest = parts(&target);
        rest.extend(pending.drain(..));
        pending = rest;
    }
    Ok(Some(at))
}

/// The per-call private `{tmp}` directory, removed when dropped.
#[derive(Debug)]
pub struct CallTmp {
    /// Its path.
    pub path: PathBuf,
}

impl CallTmp {
    /// A fresh private (0700) directory under the system temporary directory.
    pub fn create() -> Result<CallTmp, CallError> {
        let mut rnd = [0u8; 8];
        getrandom::fill(&mut rnd).map_err(|e| CallError::new(ErrorCode::Internal, format!("no randomness: {e}")))?;
        let path = std::env::temp_dir().join(format!("warden-{}", hex::encode(rnd)));
        fs::DirBuilder::new().mode(0o700).create(&path).map_err(|e| {
            CallError::new(ErrorCode::Internal, format!("cannot create the call's {{tmp}} {}: {e}", path.display()))
        })?;
        Ok(CallTmp { path })
    }
}

impl Drop for CallTmp {
    fn drop(&mut self) {
        if let Err(e) = fs::remove_dir_all(&self.path) {
            tracing::warn!("cannot remove {}: {e}", self.path.display());
        }
    }
}
