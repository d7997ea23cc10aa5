//! The process runtime ([`ProcessRuntime`]): policy-declared programs run as
//! separate processes, each started through the sandbox helper ([`helper`],
//! [`default_helper`]: `warden-sandbox` beside warden, else warden itself) that
//! confines itself and `execve`s the tool. The host supervises in one `poll`
//! loop (`supervise`: output with byte caps, exit, timeout, cancel) and kills
//! the whole process group at the end, so no process outlives its call. The
//! mechanisms are the `warden-sandbox` crate's, re-exported here; the call's
//! layer is [`crate::layer`]. docs/security.md, "Process tools".

pub mod cgroup;
mod launch;
pub mod plan;
pub mod program;
pub mod progress;
mod report;
mod server;
mod supervise;

use self::launch::{Prepared, Start, attach_proxy, launch_helper};
use self::report::{
    Ends, add_hints, best_effort_sandbox, egress_kind, exit_of, helper_failed, ipc_kind, layer_note, limit_reached,
    memory_bound, metadata_kind, namespace_name,
};
pub use self::server::{Layered, ServerProcess, StartedServer};
use warden_sandbox::{helper, landlock, limits, namespaces, netns, spec};

use std::io::Read;
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde_json::{Value, json};

use self::namespaces::NsSupport;
use self::spec::{HelperReport, MAX_REPORT};
use super::{Cancel, OutputTap, RunOutput, SandboxReport, Usage, Walls, Watch, capture};
use crate::error::{CallError, ErrorCode};
use crate::policy::{ExecSpec, SandboxMode};

pub use warden_sandbox::helper::default_helper;

/// What this kernel offers, probed once.
#[derive(Debug, Clone, Copy)]
pub struct HostSupport {
    /// Landlock ABI (0: none).
    pub landlock_abi: u32,
    /// seccomp filters are available.
    pub seccomp: bool,
    /// warden runs as root.
    pub root: bool,
    /// A call may have namespaces of its own (mount, pid, IPC, and user when
    /// not root): [`ProcessRuntime::namespace_support`] says why not.
    pub namespaces: bool,
}

impl HostSupport {
    /// Probes the running kernel.
    pub fn probe() -> HostSupport {
        let root = nix::unistd::geteuid().is_root();
        HostSupport {
            landlock_abi: landlock::kernel_abi(),
            seccomp: std::path::Path::new("/proc/sys/kernel/seccomp/actions_avail").exists(),
            root,
            namespaces: namespace_support(root).available,
        }
    }
}

/// Whether calls may have namespaces of their own: decided once per process
/// from `WARDEN_NAMESPACES` and the sysctls, and turned off for the rest of it
/// when a helper finds the kernel refusing them anyway.
fn namespace_support(root: bool) -> NsSupport {
    static PROBED: std::sync::OnceLock<NsSupport> = std::sync::OnceLock::new();
    let probed = PROBED.get_or_init(|| NsSupport::probe(root)).clone();
    match REFUSED.lock().ok().and_then(|r| r.clone()) {
        Some(why) if probed.available => NsSupport { available: false, user: probed.user, reason: Some(why) },
        _ => probed,
    }
}

/// Why a helper could not make a call's namespaces, once one could not.
static REFUSED: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

/// Runs process tools through the sandbox helper.
#[derive(Debug, Clone)]
pub struct ProcessRuntime {
    helper: Option<PathBuf>,
    mode: SandboxMode,
    support: HostSupport,
}

/// Reads the helper's first report line from a socket that stays open.
fn read_first_report(channel: &mut std::os::unix::net::UnixStream, prefix: Option<u8>) -> HelperReport {
    let _ = channel.set_read_timeout(Some(Duration::from_secs(10)));
    let mut line: Vec<u8> = prefix.into_iter().filter(|b| *b != b'\n').collect();
    let mut byte = [0u8; 1];
    // Byte by byte: what follows the line is not ours to consume.
    while line.len() < MAX_REPORT as usize {
        match channel.read(&mut byte) {
            Ok(1) if byte[0] == b'\n' => break,
            Ok(1) => line.push(byte[0]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            _ => break,
        }
    }
    serde_json::from_slice(&line).unwrap_or_default()
}

/// What a call runs: its command line, the tool's `exec` (its working
/// directory, and the program its hints name), and whether warden's own stdio
/// is the program's (`warden run`).
struct Program<'a> {
    argv: Vec<String>,
    exec: &'a ExecSpec,
    inherit: bool,
}

/// A sandbox helper just started: the program is about to run.
struct Spawned {
    child: std::process::Child,
    pid: Pid,
    /// The host's end of the helper socket: reports come back on it (and, for a
    /// server, the program's stdin goes out on it).
    channel: std::os::unix::net::UnixStream,
    /// The per-call pids cgroup (as root); removed when dropped.
    cgroup: Option<cgroup::CallCgroup>,
    /// The call's layer, applied when it ends.
    layer: Option<Layered>,
    /// warden's proxy, the call's one way out of its network namespace.
    proxy: Option<crate::egress::Proxy>,
    /// The first byte of the helper's report, when it came where the proxy's
    /// socket was expected.
    report_prefix: Option<u8>,
}

/// What a helper is spawned for.
enum Launch {
    /// One call: stdin is `/dev/null`; the tool gets this progress pipe's write end.
    Call {
        /// The write end of the call's progress pipe.
        progress: std::os::fd::OwnedFd,
        /// `warden run`: the program gets warden's own stdin and stdout, and
        /// its stderr when that is a terminal (otherwise a pipe copied to it
        /// as it comes, whose tail the hints are read from).
        inherit: bool,
    },
    /// A long-running MCP server: the helper socket becomes its stdin.
    Server,
}

/// Toolchains found or refused, never swapped: the program, each
/// link on its way and its `#!` interpreter inside the grants, and no `PATH`
/// entry outside them shadowing a program a granted one has. Refused before
/// anything starts, naming the path and the `fs.read` entry to add.
fn check_toolchain(tool: &str, program: Option<&str>, walls: &Walls) -> Result<(), CallError> {
    let granted: Vec<std::path::PathBuf> = walls.dirs.iter().map(|(d, _)| d.clone()).collect();
    let owner = format!("tool {tool}");
    if let Some(program) = program.map(std::path::Path::new).filter(|p| p.is_absolute())
        && let Some(why) = program::hint(program, &granted, &owner)
    {
        return Err(CallError::new(
            ErrorCode::ExecutionFailed,
            format!("{tool}: cannot run {}: {why}", program.display()),
        ));
    }
    if let Some((_, path)) = walls.env.iter().find(|(k, _)| k == "PATH")
        && let Some(why) = program::path_swap(path, &granted, &owner)
    {
        return Err(CallError::new(ErrorCode::ExecutionFailed, format!("{tool}: {why}")));
    }
    Ok(())
}

impl crate::Runtime for ProcessRuntime {
    type Target = ExecSpec;

    fn report(&self, walls: &Walls) -> SandboxReport {
        self.sandbox_report(walls)
    }

    fn run(&self, exec: &ExecSpec, call: crate::Invocation<'_>) -> Result<RunOutput, CallError> {
        let crate::Invocation { tool, input, walls, tmp, watch } = call;
        match input {
            crate::Input::Args(args) => self.call(tool, exec, args, walls, tmp, watch),
            crate::Input::Argv(argv) => self.run_command(tool, argv, exec, walls, tmp, watch.cancel),
        }
    }
}

impl ProcessRuntime {
    /// A runtime spawning `helper` (the `warden` binary) under `mode`.
    pub fn new(helper: Option<PathBuf>, mode: SandboxMode) -> ProcessRuntime {
        ProcessRuntime { helper, mode, support: HostSupport::probe() }
    }

    /// What the kernel offers.
    pub fn support(&self) -> HostSupport {
        self.support
    }

    /// Whether calls get namespaces of their own here (a private `/proc`,
    /// `/dev/shm` and IPC, `{tmp}` quota without root, and the mounts that
    /// enforce protected and denied paths), and why not, for `policy check`
    /// and `audit`.
    pub fn namespace_support(&self) -> NsSupport {
        if self.support.namespaces { namespace_support(self.support.root) } else { NsSupport::probe(self.support.root) }
    }

    /// Whether this call should ask for namespaces.
    fn namespaces_now(&self) -> bool {
        self.support.namespaces && namespace_support(self.support.root).available
    }

    /// Refuses, in `enforce` mode, a call with protected or denied paths where
    /// no mount namespace can be made.
    fn check_paths(&self, tool: &str, walls: &Walls) -> Result<(), CallError> {
        if walls.protect.rules.is_empty() || self.mode == SandboxMode::BestEffort || self.namespaces_now() {
            return Ok(());
        }
        let ns = self.namespace_support();
        Err(CallError::new(
            ErrorCode::SandboxUnavailable,
            format!(
                "{tool}: its grants hold protected or denied paths ({}), which a process tool can only be kept \
                 from by mounts in a mount namespace of its own, and none can be made here: {}; enable \
                 unprivileged user namespaces (`warden doctor` names the cause and the fix), run warden as \
                 root, or set [sandbox] mode = \"best-effort\" to run without these paths enforced",
                walls.protect.named(20),
                ns.reason.unwrap_or_else(|| "the kernel refused them".into())
            ),
        ))
    }

    /// Refuses, in `enforce` mode, a call with network grants where no network
    /// namespace can be made: Landlock filters TCP by port only, so a grant of
    /// `host:443` would open every host on 443, and a name grant UDP to every
    /// address.
    fn check_net(&self, tool: &str, walls: &Walls) -> Result<(), CallError> {
        if !walls.unix.is_empty() && !self.namespaces_now() {
            let ns = self.namespace_support();
            return Err(CallError::new(
                ErrorCode::SandboxUnavailable,
                format!(
                    "{tool}: its net.unix grants ({}) hold only in a root built from its grants, which needs \
                     namespaces of its own, and none can be made here: {}; enable unprivileged user namespaces \
                     (`warden doctor` names the cause and the fix), run warden as root, or remove net.unix",
                    walls.unix.iter().take(10).map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "),
                    ns.reason.unwrap_or_else(|| "the kernel refused them".into())
                ),
            ));
        }
        if walls.net.is_empty() || self.mode == SandboxMode::BestEffort || self.namespaces_now() {
            return Ok(());
        }
        let ns = self.namespace_support();
        let grants: Vec<String> = walls.net.iter().take(10).map(|g| g.to_string()).collect();
        Err(CallError::new(
            ErrorCode::SandboxUnavailable,
            format!(
                "{tool}: its net.connect grants ({}) hold only where the call has a network namespace of its own \
                 whose one way out is warden's proxy, and none can be made here: {}; enable unprivileged user \
                 namespaces (`warden doctor` names the cause and the fix), run warden as root, or set [sandbox] \
                 mode = \"best-effort\" to let it reach every host on the granted ports",
                grants.join(", "),
                ns.reason.unwrap_or_else(|| "the kernel refused them".into())
            ),
        ))
    }

    /// Refuses, in `enforce` mode, when a layer is missing.
    fn check_support(&self, tool: &str) -> Result<(), CallError> {
        if self.mode == SandboxMode::BestEffort {
            return Ok(());
        }
        let mut missing = Vec::new();
        if self.support.landlock_abi < landlock::MIN_ENFORCED_ABI {
            missing.push(format!(
                "Landlock ABI {} or newer (this kernel has {})",
                landlock::MIN_ENFORCED_ABI,
                self.support.landlock_abi
            ));
        }
        if !self.support.seccomp {
            missing.push("seccomp".to_string());
        }
        if missing.is_empty() {
            return Ok(());
        }
        Err(CallError::new(
            ErrorCode::SandboxUnavailable,
            format!(
                "{tool}: sandbox mode \"enforce\" needs {}; run on a kernel that has it (`warden doctor` says what \
                 this one lacks), or set [sandbox] mode = \"best-effort\" to run with what exists",
                missing.join(" and ")
            ),
        ))
    }

    /// Runs `exec` with `args` (already validated) inside `walls`; `cancel`
    /// kills the whole process tree when switched on; `tap` sees its output
    /// as it arrives; the program's own progress reports on
    /// `WARDEN_PROGRESS_FD` ([`progress`]) go to `progress` (or as lines to `tap`).
    fn call(
        &self,
        tool: &str,
        exec: &ExecSpec,
        args: &Value,
        walls: &Walls,
        tmp: Option<&std::path::Path>,
        watch: Watch<'_>,
    ) -> Result<RunOutput, CallError> {
        let argv = fill_argv(tool, exec, args, tmp)?;
        self.execute(tool, Program { argv, exec, inherit: false }, walls, tmp, watch)
    }

    /// `warden run`: `argv` (any command line, its program found on the
    /// tool's `PATH` when not a path) under the walls of the tool `exec`
    /// belongs to, with warden's own stdin, stdout and stderr.
    fn run_command(
        &self,
        tool: &str,
        mut argv: Vec<String>,
        exec: &ExecSpec,
        walls: &Walls,
        tmp: Option<&std::path::Path>,
        cancel: &Cancel,
    ) -> Result<RunOutput, CallError> {
        let program = argv.first().ok_or_else(|| {
            CallError::new(ErrorCode::InvalidArgs, format!("{tool}: warden run needs a command after --"))
        })?;
        argv[0] = program::locate(tool, program, &exec.cwd, walls)?;
        // A terminal is the program's own; a CI log gets the bytes as they come
        // through a pipe, whose tail the result's hints are read from.
        let raw: OutputTap = Arc::new(|stream, bytes: &[u8]| {
            if matches!(stream, crate::Stream::Stderr) {
                use std::io::Write as _;
                let _ = std::io::stderr().write_all(bytes);
            }
        });
        let tap = (!std::io::IsTerminal::is_terminal(&std::io::stderr())).then_some(&raw);
        self.execute(tool, Program { argv, exec, inherit: true }, walls, tmp, Watch { cancel, tap, progress: None })
    }

    /// Runs `argv` in the sandbox: the body of [`ProcessRuntime::call`] and
    /// [`ProcessRuntime::run_command`] (`inherit`: warden's own stdio).
    fn execute(
        &self,
        tool: &str,
        program: Program<'_>,
        walls: &Walls,
        tmp: Option<&std::path::Path>,
        watch: Watch<'_>,
    ) -> Result<RunOutput, CallError> {
        let Watch { cancel, tap, progress } = watch;
        let Program { argv, exec, inherit } = program;
        let limits = walls.limits;
        let started = Instant::now();
        let pipe = progress::ProgressPipe::new().map_err(|e| {
            CallError::new(ErrorCode::Internal, format!("{tool}: cannot create the progress pipe: {e}"))
        })?;
        let Spawned { mut child, pid, mut channel, cgroup, layer, proxy, report_prefix } =
            self.spawn(tool, argv, &exec.cwd, walls, tmp, Launch::Call { progress: pipe.write, inherit })?;
        let reporter = crate::progress::Reporter::new(tool, progress.cloned(), tap.cloned());
        let progress_reader = progress::ProgressReader::start(pipe.read, reporter);
        let cap = usize::try_from(limits.max_output).unwrap_or(usize::MAX);
        let supervise::Watched { ended, stdout, stderr, cut_short } = supervise::supervise(
            pid,
            (child.stdout.take(), child.stderr.take()),
            cap,
            tap,
            limits.timeout,
            cancel,
            cgroup.as_ref(),
        );
        // The tree is gone: what is left in the pipe is drained, within a grace period.
        let progress_counts = progress_reader.finish();
        let hit_pids_max = cgroup.as_ref().is_some_and(cgroup::CallCgroup::hit_max);
        let hit_memory_max = cgroup.as_ref().is_some_and(cgroup::CallCgroup::hit_memory_max);
        let memory_cgroup = cgroup.as_ref().is_some_and(cgroup::CallCgroup::has_memory);
        drop(cgroup);
        // The tree is gone: so are the proxy's connections (its journal keeps them).
        drop(proxy);
        // And its mounts: what it wrote is judged and applied, whatever the end.
        let applied = layer.map(|mut l| l.apply(crate::layer::ApplyMode::Move));
        let layer_note = applied.as_ref().map(layer_note).unwrap_or_default();
        // Any end of the call says what of its changes warden refused.
        let finish = move || -> Result<RunOutput, CallError> {
            let ended = ended?;
            let elapsed = started.elapsed();

            // Every end of the socket is closed now: the helper exec'd (close-on-exec) or exited.
            let report = read_report(&mut channel, report_prefix);
            if ended.cancelled {
                return Err(CallError::new(
                    ErrorCode::Cancelled,
                    format!(
                        "{tool}: cancelled by the caller after {:.1}s; its process tree was killed",
                        elapsed.as_secs_f64()
                    ),
                ));
            }
            // A timeout while the helper was still confining itself is still a timeout.
            if !report.ok && !ended.timed_out {
                return Err(helper_failed(tool, exec, walls, &report, &stderr.joined()));
            }

            let cpu = tv(ended.rusage.ru_utime) + tv(ended.rusage.ru_stime);
            // Both streams within max_output together, each keeping its head and tail.
            let [mut out_text, mut err_text] =
                capture::fit([("stdout", &stdout), ("stderr", &stderr)], capture::budget(cap));
            crate::credentials::redact_output(tool, walls, [&mut out_text.text, &mut err_text.text]);
            let truncated = out_text.dropped > 0 || err_text.dropped > 0 || cut_short;
            let usage = Usage {
                cpu_ms: cpu.as_secs_f64() * 1000.0,
                max_rss_kb: ended.rusage.ru_maxrss.max(0) as u64,
                output_bytes: stdout.total() + stderr.total(),
                truncated,
                progress: Some(progress_counts).filter(|c| c.accepted + c.ignored > 0),
            };
            let (exit_code, signal) = exit_of(ended.status);

            let ends =
                Ends { elapsed, cpu, exit_code, signal, timed_out: ended.timed_out, hit_pids_max, hit_memory_max };
            if let Some(e) = limit_reached(tool, &limits, &ends) {
                return Err(e);
            }
            let stderr_tail = stderr.joined();
            let mut value = json!({
                "exit_code": exit_code,
                "stdout": out_text.text,
                "stderr": err_text.text,
                "truncated": truncated,
                "cpu_ms": (usage.cpu_ms * 1000.0).round() / 1000.0,
                "max_rss_kb": usage.max_rss_kb,
            });
            if truncated {
                value["dropped"] = json!({"stdout": out_text.dropped, "stderr": err_text.dropped});
            }
            if let Some(sig) = signal {
                value["signal"] =
                    json!(Signal::try_from(sig).map(|s| s.as_str().to_string()).unwrap_or_else(|_| sig.to_string()));
            }
            add_hints(&mut value, tool, walls, exit_code, &stderr_tail);
            if let Some(layer) = applied.as_ref().and_then(|a| a.to_json(20, &walls.workspace)) {
                value["layer"] = layer;
            }
            let confirmed = self.confirmed(walls, &report, memory_cgroup);
            if self.mode == SandboxMode::BestEffort {
                value["sandbox"] = best_effort_sandbox(&report, &confirmed, memory_cgroup);
            }
            Ok(RunOutput { value, usage, sandbox: Some(confirmed), blocks: false })
        };
        finish().map_err(|e| CallError::new(e.code, format!("{}{layer_note}", e.message)))
    }

    /// Spawns the sandbox helper for `argv` in `cwd` inside `walls` and hands it
    /// its spec. For a [`Launch::Server`] the socket stays open after the spec and
    /// becomes the program's stdin (a long-running MCP server); for a
    /// [`Launch::Call`] the program's stdin is `/dev/null` and it gets the
    /// progress pipe's write end, sent after the spec.
    fn spawn(
        &self,
        tool: &str,
        argv: Vec<String>,
        cwd: &std::path::Path,
        walls: &Walls,
        tmp: Option<&std::path::Path>,
        launch: Launch,
    ) -> Result<Spawned, CallError> {
        let (stdin_from_host, progress_fd, inherit) = match launch {
            Launch::Server => (true, None, false),
            Launch::Call { progress, inherit } => (false, Some(progress), inherit),
        };
        let helper = self.preflight(tool, argv.first().map(String::as_str), walls)?;
        let prepared = self.prepare(tool, walls, tmp)?;
        let spec = plan::spec(plan::Request {
            argv,
            cwd,
            walls,
            tmp,
            host: plan::Host {
                root: self.support.root,
                namespaces: prepared.namespaces,
                mode: self.mode,
                parent_pid: std::process::id(),
                user_processes: if self.support.root {
                    0
                } else {
                    limits::processes_of(nix::unistd::getuid().as_raw())
                },
            },
            start: plan::Start { stdin_from_host, stdin_passed: inherit, progress: progress_fd.is_some() },
            made: plan::Made {
                layers: prepared.layer.as_ref().map(|l| l.layer.roots().to_vec()).unwrap_or_default(),
                layers_cover_writes: prepared.layers_cover_writes,
                cgroup: prepared.cgroup.as_ref().map(|c| spec::CgroupJoin {
                    name: c.name(),
                    hierarchies: c.hierarchies(),
                    join: c.self_join_files(),
                }),
                run_as: prepared.run_as,
            },
        });
        let proxied = spec.namespaces.as_ref().is_some_and(|p| p.proxy);
        let start = Start { helper, inherit, stdin_from_host, progress: progress_fd };
        let mut spawned = launch_helper(tool, spec, start, prepared)?;
        if proxied {
            attach_proxy(tool, walls, &mut spawned)?;
        }
        Ok(spawned)
    }

    /// The checks before anything is made for a call: the host can build its
    /// sandbox, its paths and network grants hold, its program is one its
    /// grants reach; and the helper to run it with.
    fn preflight(&self, tool: &str, program: Option<&str>, walls: &Walls) -> Result<&PathBuf, CallError> {
        self.check_support(tool)?;
        self.check_paths(tool, walls)?;
        self.check_net(tool, walls)?;
        check_toolchain(tool, program, walls)?;
        self.helper.as_ref().ok_or_else(|| {
            CallError::new(ErrorCode::SandboxUnavailable, format!("{tool}: no sandbox helper binary is configured"))
        })
    }

    /// What the host makes for a call before the helper starts: its write
    /// grants as layers, its cgroup (as root), and whom it runs as, with the
    /// call's `{tmp}` handed to that user.
    fn prepare(&self, tool: &str, walls: &Walls, tmp: Option<&std::path::Path>) -> Result<Prepared, CallError> {
        let limits = walls.limits;
        let call_id = {
            let mut b = [0u8; 6];
            let _ = getrandom::fill(&mut b);
            hex::encode(b)
        };
        let ns = self.namespaces_now();
        let enforce = self.mode == SandboxMode::Enforce;
        // Its write grants as layers, applied when it ends.
        let layer_roots = crate::layer::roots_of(&walls.dirs, tmp);
        let layer = if ns && !layer_roots.is_empty() {
            match crate::layer::Layer::create(&call_id, &layer_roots) {
                Ok(layer) => Some(Layered { layer, protect: walls.protect.clone() }),
                Err(e) if enforce => {
                    return Err(CallError::new(
                        ErrorCode::SandboxUnavailable,
                        format!(
                            "{tool}: {e}; the layer keeps what the tool writes from the host until warden has \
                             checked it, or set [sandbox] mode = \"best-effort\" to let it write directly"
                        ),
                    ));
                }
                Err(_) => None,
            }
        } else {
            None
        };
        let tmpfs = (tmp.is_some() || (ns && walls.system)) && (self.support.root || ns);
        let memory_max = limits.memory.saturating_add(if tmpfs { limits.tmp_size } else { 0 });
        // The monitor outside the call's pid namespace and its init are two processes more.
        let max_pids = limits.processes.saturating_add(2 * u32::from(ns));
        let cgroup = if self.support.root { cgroup::CallCgroup::create(&call_id, max_pids, memory_max) } else { None };
        if self.support.root && cgroup.is_none() && self.mode == SandboxMode::Enforce {
            return Err(CallError::new(
                ErrorCode::SandboxUnavailable,
                format!(
                    "{tool}: warden runs as root, where RLIMIT_NPROC does not apply, and no pids cgroup could be \
                     created to bound limits.processes; mount the pids controller or set mode = \"best-effort\""
                ),
            ));
        }
        let run_as = if self.support.root {
            std::fs::metadata(&walls.workspace).ok().map(|m| (m.uid(), m.gid())).filter(|(u, _)| *u != 0)
        } else {
            None
        };
        // The call's {tmp} belongs to whoever the tool runs as.
        if let (Some((uid, gid)), Some(t)) = (run_as, tmp) {
            let under_tmp = walls.dirs.iter().map(|(p, _)| p.as_path()).filter(|p| p.starts_with(t));
            for dir in std::iter::once(t).chain(under_tmp) {
                std::os::unix::fs::chown(dir, Some(uid), Some(gid)).map_err(|e| {
                    CallError::new(
                        ErrorCode::Internal,
                        format!("{tool}: cannot hand {} to uid {uid}: {e}", dir.display()),
                    )
                })?;
            }
        }
        let layers_cover_writes = layer_roots.is_empty() || layer.is_some();
        Ok(Prepared { namespaces: ns, layer, layers_cover_writes, cgroup, run_as })
    }

    /// Starts `exec` (no argument placeholders) as a long-running confined program
    /// whose stdin, stdout and stderr belong to the host: an MCP server. Returns
    /// once the helper reported the sandbox in force and exec'd the program.
    pub fn start_server(
        &self,
        name: &str,
        exec: &ExecSpec,
        walls: &Walls,
        tmp: Option<&std::path::Path>,
    ) -> Result<StartedServer, CallError> {
        let argv = fill_argv(name, exec, &Value::Null, tmp)?;
        let Spawned { mut child, pid, mut channel, cgroup, layer, proxy, report_prefix } =
            self.spawn(name, argv, &exec.cwd, walls, tmp, Launch::Server)?;
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let mut process = ServerProcess { child, pid, channel: None, cgroup, stdout, stderr, layer, proxy };
        // The first report line arrives before the exec; the socket stays open (it is the program's stdin).
        let report = read_first_report(&mut channel, report_prefix);
        if !report.ok {
            let why = report.error.unwrap_or_else(|| "the sandbox helper stopped before reporting".into());
            return Err(CallError::new(ErrorCode::SandboxUnavailable, format!("server {name}: {why}")));
        }
        let _ = channel.set_read_timeout(None);
        let memory_cgroup = process.cgroup.as_ref().is_some_and(cgroup::CallCgroup::has_memory);
        let mut confirmed = self.confirmed(walls, &report, memory_cgroup);
        confirmed.runtime = "mcp-server";
        process.channel = Some(channel);
        Ok(process.with_report(confirmed))
    }

    /// The sandbox as the helper's `report` confirmed it.
    fn confirmed(&self, walls: &Walls, report: &HelperReport, memory_cgroup: bool) -> SandboxReport {
        let mut confirmed = self.sandbox_report(walls);
        confirmed.memory = Some(memory_bound(memory_cgroup));
        confirmed.ipc = Some(ipc_kind(report.ipc_namespace, walls.sysv_ipc));
        confirmed.landlock_abi = Some(report.landlock_abi);
        confirmed.seccomp = report.seccomp;
        confirmed.rlimits = report.rlimits;
        confirmed.uid = Some(report.uid);
        confirmed.tmp_quota = walls.tmp.is_some().then_some(report.tmp_quota);
        if let Some(why) = &report.namespace_error
            && let Ok(mut refused) = REFUSED.lock()
        {
            refused.get_or_insert_with(|| format!("the kernel refused them ({why})"));
        }
        confirmed.namespaces = report.namespaces.iter().filter_map(|n| namespace_name(n)).collect();
        confirmed.proc = Some(if report.proc_private { "private" } else { "host" });
        confirmed.metadata = Some(metadata_kind(report.view_read_only, report.uid == 0));
        confirmed.view = Some(if report.grant_view { "grants" } else { "host" });
        if let Some(why) = &report.grant_view_error {
            tracing::warn!(workspace = %walls.workspace.display(), "the call's root was not built from its grants ({why}): AF_UNIX stays refused");
        }
        confirmed.egress = Some(egress_kind(report.net_namespace, !walls.net.is_empty()));
        confirmed.paths =
            (!walls.protect.rules.is_empty()).then_some(if report.paths_masked { "mount-namespace" } else { "none" });
        // As root only the cgroup bounds processes (uid 0 is exempt from RLIMIT_NPROC).
        confirmed.processes = Some(match (report.cgroup, self.support.root) {
            (true, _) => "pids-cgroup",
            (false, false) => "rlimit",
            (false, true) => "none",
        });
        confirmed
    }

    /// What the process runtime enforces for these walls (before the helper confirms it).
    fn sandbox_report(&self, walls: &Walls) -> SandboxReport {
        let enforce = self.mode == SandboxMode::Enforce;
        let ns = self.namespaces_now();
        let mut namespaces = Vec::new();
        if ns {
            if !self.support.root {
                namespaces.push("user");
            }
            namespaces.extend(["mount", "pid", "ipc", "net"]);
        }
        SandboxReport {
            runtime: "process",
            landlock_abi: Some(self.support.landlock_abi.min(6)),
            seccomp: self.support.seccomp || enforce,
            rlimits: true,
            processes: Some(if self.support.root { "pids-cgroup" } else { "rlimit" }),
            uid: Some(
                std::fs::metadata(&walls.workspace)
                    .ok()
                    .map(|m| m.uid())
                    .filter(|u| self.support.root && *u != 0)
                    .unwrap_or_else(|| nix::unistd::geteuid().as_raw()),
            ),
            dirs: walls.dirs_text(),
            net: walls.net.iter().map(|g| g.to_string()).collect(),
            tmp_quota: walls.tmp.is_some().then_some(self.support.root || ns),
            memory: Some(memory_bound(self.support.root)),
            ipc: Some(ipc_kind(self.support.root || ns, walls.sysv_ipc)),
            paths: (!walls.protect.rules.is_empty()).then_some(if ns { "mount-namespace" } else { "none" }),
            namespaces,
            proc: Some(if ns { "private" } else { "host" }),
            metadata: Some(metadata_kind(ns, self.support.root)),
            egress: Some(egress_kind(ns, !walls.net.is_empty())),
            view: Some(if ns { "grants" } else { "host" }),
        }
    }
}

fn tv(t: libc::timeval) -> Duration {
    Duration::from_secs(t.tv_sec.max(0) as u64) + Duration::from_micros(t.tv_usec.max(0) as u64)
}

/// Fills the argv template: each `{param}` with its string argument, `{tmp}` with the call's directory.
fn fill_argv(
    tool: &str,
    exec: &ExecSpec,
    args: &Value,
    tmp: Option<&std::path::Path>,
) -> Result<Vec<String>, CallError> {
    let mut out = Vec::with_capacity(exec.argv.len());
    for element in &exec.argv {
        out.push(crate::policy::fill_template(element, |p| {
            if p == "tmp" {
                return Ok(tmp.map(|t| t.to_string_lossy().into_owned()));
            }
            if !exec.params.iter().any(|x| x == p) {
                return Ok(None);
            }
            let v = args.get(p).and_then(Value::as_str).ok_or_else(|| {
                CallError::new(ErrorCode::InvalidArgs, format!("{tool}: argument `{p}` must be a string"))
            })?;
            if v.contains('\0') {
                return Err(CallError::new(
                    ErrorCode::InvalidArgs,
                    format!("{tool}: argument `{p}` contains a NUL byte"),
                ));
            }
            Ok(Some(v.to_string()))
        })?);
    }
    Ok(out)
}

/// Reads the helper's report lines from its socket (the program never holds it).
fn read_report(channel: &mut std::os::unix::net::UnixStream, prefix: Option<u8>) -> HelperReport {
    let mut text: Vec<u8> = prefix.into_iter().collect();
    let _ = channel.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = channel.take(MAX_REPORT).read_to_end(&mut text);
    // The first line is the confinement; a second one means the execve failed.
    let mut reports = text.split(|&b| b == b'\n').filter_map(|l| serde_json::from_slice::<HelperReport>(l).ok());
    match (reports.next(), reports.next()) {
        (Some(first), Some(second)) if first.ok && second.exec_failed => second,
        (Some(first), _) => first,
        (None, _) => HelperReport::default(),
    }
}

#[cfg(test)]
mod tests;
