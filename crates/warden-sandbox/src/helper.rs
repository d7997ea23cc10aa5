//! The sandbox helper ([`run_main`]): the `warden-sandbox` binary, or `warden`
//! re-executed with [`HELPER_ARG`]; single-threaded, before any runtime starts.
//! Its stdin is a socket to the host: it moves it to [`REPORT_FD`], reads its
//! [`SandboxSpec`] there, confines itself stage by stage (the numbered comments
//! below; the table in docs/security.md, "The helper, stage by stage"), reports
//! and `execve`s the tool. Any failure is reported on the socket and the helper
//! exits 126: the tool never runs half-confined (a failed `execve` exits 127).

use std::ffi::CString;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;

use crate::init;
use crate::landlock::{self, LandlockRules, MIN_ENFORCED_ABI};
use crate::limits;
use crate::mounts;
use crate::namespaces::{self, NsError};
use crate::netns;
use crate::progress;
use crate::seccomp;
use crate::spec::{HelperReport, MAX_REPORT, REPORT_FD, SandboxSpec};
use crate::tmpfs;

/// The first argument that makes `warden` the sandbox helper.
pub const HELPER_ARG: &str = "--warden-sandbox-helper";
/// The most bytes of spec the helper reads.
const MAX_SPEC: u64 = 4 << 20;

/// The helper binary this `warden` should use: `warden-sandbox` beside the
/// running executable when it is there (it starts several times faster, having
/// no component engine to relocate), else the executable itself, which turns
/// into the helper when given [`HELPER_ARG`].
pub fn default_helper() -> Option<std::path::PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let small = exe.with_file_name("warden-sandbox");
    Some(if small.is_file() { small } else { exe })
}

/// Writes one report line on the channel, or on stderr when there is none.
fn report(channel: Option<&mut std::fs::File>, r: &HelperReport) {
    let mut line = serde_json::to_string(r).unwrap_or_default();
    let mut end = line.len().min(MAX_REPORT as usize - 1);
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    line.truncate(end);
    line.push('\n');
    match channel {
        Some(c) => {
            let _ = c.write_all(line.as_bytes());
        }
        None => {
            let _ = std::io::stderr().write_all(line.as_bytes());
        }
    }
}

/// Closes every inherited descriptor above 2 and moves stdin (the host's
/// socket) to [`REPORT_FD`], close-on-exec.
fn open_channel() -> Result<std::fs::File, String> {
    use std::os::fd::FromRawFd;
    // SAFETY: close_range on descriptors this single-threaded process has not used yet.
    #[allow(unsafe_code)]
    if unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) } != 0 {
        return Err(format!("close_range: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: F_DUPFD_CLOEXEC duplicates descriptor 0 to the lowest free one >= 3,
    // which is 3 since every descriptor above 2 was just closed; no memory is touched.
    #[allow(unsafe_code)]
    let fd = unsafe { libc::fcntl(0, libc::F_DUPFD_CLOEXEC, REPORT_FD) };
    if fd != REPORT_FD {
        return Err(format!("cannot move the host socket to fd {REPORT_FD}: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: fd 3 was just created by fcntl and is owned by nothing else.
    #[allow(unsafe_code)]
    Ok(unsafe { std::fs::File::from_raw_fd(fd) })
}

/// Runs the helper; never returns.
pub fn run_main() -> ! {
    let mut r = HelperReport::default();
    let mut channel = match open_channel() {
        Ok(c) => c,
        Err(e) => {
            report(None, &HelperReport { error: Some(e), ..r });
            std::process::exit(126);
        }
    };
    match confine(&mut channel, &mut r) {
        Ok((spec, status)) => {
            r.ok = true;
            report(Some(&mut channel), &r);
            let start = move || -> std::convert::Infallible {
                // The tool starts with no signal blocked, whatever blocked them on
                // the way (the init blocks what it forwards; `warden run` blocks
                // Ctrl-C for the thread that waits for it).
                let _ = nix::sys::signal::pthread_sigmask(
                    nix::sys::signal::SigmaskHow::SIG_SETMASK,
                    Some(&nix::sys::signal::SigSet::empty()),
                    None,
                );
                let err = exec(&spec);
                report(Some(&mut channel), &HelperReport { ok: false, error: Some(err), exec_failed: true, ..r });
                std::process::exit(127);
            };
            // Pid 1 of the call's pid namespace stays its init; the tool is its child.
            match status {
                Some(status) => init::run(status, start),
                None => match start() {},
            }
        }
        Err(e) => {
            r.ok = false;
            r.error = Some(e);
            report(Some(&mut channel), &r);
            std::process::exit(126);
        }
    }
}

/// Confines this process; returns the spec and, in a pid namespace of the
/// call's own, the status pipe its init hands the tool's end to the monitor on.
/// Each step is a method of [`Confinement`], in the order they must run.
fn confine(
    channel: &mut std::fs::File,
    r: &mut HelperReport,
) -> Result<(SandboxSpec, Option<std::os::fd::OwnedFd>), String> {
    let spec = read_spec(channel)?;
    let mut c = Confinement { channel, r, spec, host_pgid: 0, entered: None, progress_fd: None };
    c.take_stdin()?;
    c.leave_the_hosts_session()?;
    c.die_with_the_host()?;
    c.join_the_cgroups()?;
    c.enter_the_namespaces()?;
    c.hand_over_the_proxy_socket()?;
    c.receive_descriptors()?;
    c.make_the_view_read_only()?;
    c.mount_private_tmp()?;
    c.unshare_ipc()?;
    c.mount_layers_and_masks()?;
    c.reopen_write_grants()?;
    c.build_the_root_from_the_grants()?;
    c.apply_rlimits()?;
    c.drop_privileges()?;
    c.prepare_for_exec()?;
    c.apply_landlock()?;
    c.apply_seccomp()?;
    let status = c.entered.as_mut().and_then(namespaces::Entered::take_status);
    Ok((c.spec, status))
}

/// The spec's length, then exactly that much: nothing past it is read, since
/// for a server the rest of the stream is the program's stdin.
fn read_spec(channel: &mut std::fs::File) -> Result<SandboxSpec, String> {
    let mut len = [0u8; 8];
    channel.read_exact(&mut len).map_err(|e| format!("cannot read the spec's length: {e}"))?;
    let len = u64::from_le_bytes(len);
    if len > MAX_SPEC {
        return Err(format!("the spec is {len} bytes, more than {MAX_SPEC}"));
    }
    let mut text = vec![0u8; len as usize];
    channel.read_exact(&mut text).map_err(|e| format!("cannot read the spec: {e}"))?;
    serde_json::from_slice(&text).map_err(|e| format!("bad spec: {e}"))
}

/// One call's confinement as it goes: the spec, what the report says so far,
/// and what earlier steps left for later ones.
struct Confinement<'a> {
    channel: &'a mut std::fs::File,
    r: &'a mut HelperReport,
    spec: SandboxSpec,
    /// The host's process group (seccomp keeps the tool from signalling it).
    host_pgid: u32,
    /// The call's own namespaces, when they were made.
    entered: Option<namespaces::Entered>,
    /// The progress pipe's write end, close-on-exec until [`Self::prepare_for_exec`].
    progress_fd: Option<std::os::fd::OwnedFd>,
}

impl Confinement<'_> {
    fn in_ns(&self) -> bool {
        self.entered.is_some()
    }

    /// In a user namespace of the call's own.
    fn userns(&self) -> bool {
        self.in_ns() && self.spec.namespaces.as_ref().is_some_and(|p| p.user)
    }

    /// In a network namespace of the call's own.
    fn netns(&self) -> bool {
        self.in_ns() && self.spec.namespaces.as_ref().is_some_and(|p| p.net)
    }

    /// The call's namespaces are required (enforce mode, with paths or grants that need them).
    fn required(&self) -> bool {
        self.spec.namespaces.as_ref().is_some_and(|p| p.required)
    }

    /// Step 1: stdin: /dev/null, or the host's socket (without close-on-exec) for a server.
    fn take_stdin(&mut self) -> Result<(), String> {
        let null = std::fs::File::open("/dev/null").map_err(|e| format!("cannot open /dev/null: {e}"))?;
        let source = if self.spec.stdin_from_host { self.channel.as_raw_fd() } else { null.as_raw_fd() };
        // SAFETY: dup2 of a valid open descriptor onto 0; no memory is touched.
        #[allow(unsafe_code)]
        if unsafe { libc::dup2(source, 0) } < 0 {
            return Err(format!("cannot reopen stdin: {}", std::io::Error::last_os_error()));
        }
        Ok(())
    }

    /// Step 2: A new session and process group (the old group is the host's).
    fn leave_the_hosts_session(&mut self) -> Result<(), String> {
        self.host_pgid = nix::unistd::getpgrp().as_raw() as u32;
        nix::unistd::setsid().map_err(|e| format!("setsid: {e}"))?;
        Ok(())
    }

    /// Step 3: Die with the host.
    fn die_with_the_host(&mut self) -> Result<(), String> {
        nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
            .map_err(|e| format!("PR_SET_PDEATHSIG: {e}"))?;
        if nix::unistd::getppid().as_raw() as u32 != self.spec.parent_pid {
            return Err("the host exited before the tool started".into());
        }
        Ok(())
    }

    /// Step 4: The call's cgroups: the helper moves itself in where the host did not
    /// (in v1 always: its one thread, through `tasks`, which takes no lock that
    /// waits for an RCU grace period), then checks it is in each of them.
    fn join_the_cgroups(&mut self) -> Result<(), String> {
        let Some(cg) = &self.spec.cgroup else { return Ok(()) };
        for file in &cg.join {
            std::fs::write(file, "0").map_err(|e| format!("cannot join the call's cgroup {}: {e}", file.display()))?;
        }
        let mine =
            std::fs::read_to_string("/proc/self/cgroup").map_err(|e| format!("cannot read /proc/self/cgroup: {e}"))?;
        // One line per hierarchy; each of the call's is named `warden-<id>`.
        let inside = mine.lines().filter(|l| l.rsplit('/').next() == Some(cg.name.as_str())).count();
        if inside < cg.hierarchies {
            return Err(format!(
                "the helper is in {inside} of the call's {} cgroups ({}) after joining them: {}",
                cg.hierarchies,
                cg.name,
                mine.trim()
            ));
        }
        self.r.cgroup = true;
        Ok(())
    }

    /// Step 4b: The call's own namespaces: from here on this is the child, pid 1
    /// of its pid namespace; its parent stays outside as the monitor.
    fn enter_the_namespaces(&mut self) -> Result<(), String> {
        if let Some(plan) = &self.spec.namespaces {
            match namespaces::enter(plan) {
                Ok(e) => {
                    self.r.namespaces = e.names.clone();
                    self.r.ipc_namespace = plan.ipc;
                    self.entered = Some(e);
                }
                Err(NsError::Refused(e)) if plan.required => {
                    return Err(format!(
                        "cannot make the call's namespaces, which its protected and denied paths need: {e}; \
                         `warden doctor` names the cause on this host and the fix"
                    ));
                }
                Err(NsError::Refused(e)) => self.r.namespace_error = Some(e),
                Err(NsError::Broken(e)) => return Err(format!("cannot set up the call's namespaces: {e}")),
            }
        }
        self.r.net_namespace = self.netns();
        Ok(())
    }

    /// Step 4b': warden's proxy: the one way out of the network namespace.
    fn hand_over_the_proxy_socket(&mut self) -> Result<(), String> {
        if self.spec.namespaces.as_ref().is_some_and(|p| p.proxy) {
            let listener = if self.netns() { Some(netns::proxy_listener()?) } else { None };
            netns::send_listener(self.channel, listener.as_ref())?;
        }
        Ok(())
    }

    /// Step 4b'': The progress pipe's write end, received here (in the call's
    /// namespaces: the monitor outside never holds it); and for `warden run`,
    /// warden's own stdin, which becomes the program's.
    fn receive_descriptors(&mut self) -> Result<(), String> {
        if self.spec.progress {
            self.progress_fd = Some(progress::recv_fd(self.channel, "the progress pipe")?);
        }
        if self.spec.stdin_passed {
            let fd = progress::recv_fd(self.channel, "its standard input")?;
            // SAFETY: dup2 of a descriptor this process owns onto 0; no memory is touched.
            #[allow(unsafe_code)]
            if unsafe { libc::dup2(std::os::fd::AsRawFd::as_raw_fd(&fd), 0) } < 0 {
                return Err(format!("cannot make warden's stdin the program's: {}", std::io::Error::last_os_error()));
            }
        }
        Ok(())
    }

    /// Step 4b-view: The view read-only: only what is mounted from here on (the
    /// layers, {tmp}, /proc, /dev/shm) and the write grants reopened below can
    /// change. 4c. A /proc of the call's own pid namespace.
    fn make_the_view_read_only(&mut self) -> Result<(), String> {
        if !self.in_ns() {
            return Ok(());
        }
        match mounts::read_only_view() {
            Ok(()) => self.r.view_read_only = true,
            Err(e) if self.required() => return Err(e),
            Err(_) => {}
        }
        self.r.proc_private = namespaces::mount_proc();
        Ok(())
    }

    /// Step 4d: {tmp} as a tmpfs of its own (in the call's mount namespace, or in
    /// one of its own as root), holding a private /dev/shm too with {system}.
    fn mount_private_tmp(&mut self) -> Result<(), String> {
        let in_ns = self.in_ns();
        let spec = &self.spec;
        let owner = spec.run_as.unwrap_or((nix::unistd::getuid().as_raw(), nix::unistd::getgid().as_raw()));
        let shm = spec.namespaces.as_ref().filter(|p| in_ns && p.shm);
        if let Some(quota) = &spec.tmp_quota {
            let granted: Vec<&std::path::Path> = spec.read.iter().chain(&spec.write).map(|p| p.as_path()).collect();
            match tmpfs::mount_private_tmp(quota, owner, &granted, !in_ns, shm.is_some()) {
                Ok(shared) => {
                    self.r.tmp_quota = true;
                    self.r.shm_private = shared;
                }
                Err(e) if quota.required => return Err(e),
                Err(_) => self.r.tmp_quota = false,
            }
        } else if let Some(plan) = shm {
            match tmpfs::mount_private_shm(plan.shm_size, plan.shm_files, owner) {
                Ok(done) => self.r.shm_private = done,
                Err(e) if plan.required => return Err(e),
                Err(_) => {}
            }
        }
        Ok(())
    }

    /// Step 4e: A private IPC namespace (as root without the call's namespaces,
    /// while the capabilities last).
    fn unshare_ipc(&mut self) -> Result<(), String> {
        if self.spec.ipc_namespace && !self.in_ns() {
            match nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWIPC) {
                Ok(()) => self.r.ipc_namespace = true,
                // Best-effort (the spec requires nothing): seccomp refuses SysV IPC
                // and message queues instead, unless the tool asked for them.
                Err(_) if !self.spec.require_seccomp => {}
                Err(e) => {
                    return Err(format!(
                        "cannot make a private IPC namespace: unshare(CLONE_NEWIPC): {e}; `warden doctor` names \
                         the cause on this host and the fix"
                    ));
                }
            }
        }
        Ok(())
    }

    /// Step 4f: The write grants as layers, then the protected and denied paths, as mounts.
    fn mount_layers_and_masks(&mut self) -> Result<(), String> {
        let (in_ns, required, userns) = (self.in_ns(), self.required(), self.userns());
        if !self.spec.layers.is_empty() {
            if in_ns {
                match mounts::apply_layers(&self.spec.layers, userns) {
                    Ok(()) => self.r.layered = true,
                    Err(e) if required => return Err(e),
                    Err(_) => {}
                }
            } else if required {
                return Err("the call's layers need a mount namespace, which it does not have".into());
            }
        }
        if !self.spec.rules.is_empty() {
            if in_ns {
                match mounts::apply(&self.spec.rules) {
                    Ok(()) => self.r.paths_masked = true,
                    Err(e) if required => return Err(e),
                    Err(_) => {}
                }
            } else if required {
                return Err(
                    "the call's protected and denied paths need a mount namespace, which it does not have".into()
                );
            }
        }
        Ok(())
    }

    /// Step 4g: Write grants no layer or tmpfs holds are writable again.
    fn reopen_write_grants(&mut self) -> Result<(), String> {
        if self.r.view_read_only {
            mounts::keep_writable(&self.spec.write)?;
        }
        Ok(())
    }

    /// Step 4h: The call's root built from its grants (with its own /proc and the
    /// call's network namespace): what no grant names does not exist, so an
    /// AF_UNIX path reaches only the call's own sockets and its grants'.
    fn build_the_root_from_the_grants(&mut self) -> Result<(), String> {
        let netns = self.netns();
        let (r, spec) = (&mut *self.r, &self.spec);
        if !(r.view_read_only && r.proc_private && netns) {
            return Ok(());
        }
        let mut grants: Vec<std::path::PathBuf> = spec.read.iter().chain(&spec.write).cloned().collect();
        grants.push("/proc".into());
        if r.shm_private {
            grants.push("/dev/shm".into());
        }
        if let Some(q) = spec.tmp_quota.as_ref().filter(|_| r.tmp_quota) {
            grants.push(q.path.clone());
        }
        let mut spelled: Vec<std::path::PathBuf> = spec.links.clone();
        spelled.push(spec.cwd.clone());
        spelled.extend(spec.argv.first().map(std::path::PathBuf::from));
        // net.unix: each host socket (resolved by the host, checked a socket
        // again when opened), alone at its place.
        match mounts::grant_view(&grants, &spec.unix, &spelled, &spec.cwd) {
            Ok(built) => r.grant_view = built,
            // Nothing changed: the host's tree stays, under Landlock, and AF_UNIX stays refused.
            Err(mounts::ViewError::NotBuilt(e)) => r.grant_view_error = Some(e),
            Err(mounts::ViewError::Broken(e)) => return Err(e),
        }
        Ok(())
    }

    /// Step 5: rlimits, and the OOM killer's first choice: the tool, never warden.
    fn apply_rlimits(&mut self) -> Result<(), String> {
        let mut rlimits = self.spec.limits;
        if self.userns() {
            // In the call's own user namespace only its processes (and the monitor) count.
            rlimits.processes = rlimits.processes_in_userns.or(rlimits.processes);
        }
        limits::apply_rlimits(&rlimits)?;
        self.r.rlimits = true;
        limits::apply_oom_first()
    }

    /// Step 6: Privileges (in the call's user namespace too, where it has them all).
    fn drop_privileges(&mut self) -> Result<(), String> {
        if self.spec.drop_caps || self.userns() {
            limits::apply_securebits()?;
            if let Some((uid, gid)) = self.spec.run_as {
                limits::apply_identity(uid, gid)?;
                // Changing credentials cleared the parent-death signal: ask again.
                nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                    .map_err(|e| format!("PR_SET_PDEATHSIG: {e}"))?;
                let alive = match &self.entered {
                    Some(e) => e.monitor_alive(),
                    None => nix::unistd::getppid().as_raw() as u32 == self.spec.parent_pid,
                };
                if !alive {
                    return Err("the host exited before the tool started".into());
                }
            }
            limits::apply_drop_capabilities()?;
        }
        self.r.uid = nix::unistd::getuid().as_raw();
        Ok(())
    }

    /// Step 7: The working directory, no new privileges, the default dispositions
    /// of the signals warden ignores, and the progress pipe: the one
    /// descriptor besides 0-2 the tool keeps.
    fn prepare_for_exec(&mut self) -> Result<(), String> {
        let spec = &mut self.spec;
        std::env::set_current_dir(&spec.cwd).map_err(|e| format!("cannot enter {}: {e}", spec.cwd.display()))?;
        nix::sys::prctl::set_no_new_privs().map_err(|e| format!("PR_SET_NO_NEW_PRIVS: {e}"))?;
        // warden ignores SIGXFSZ (a write past an rlimit must fail, not kill it) and
        // SIGPIPE (Rust's start-up); an ignored signal stays ignored across execve,
        // so the tool gets the defaults back: `yes | head` ends quietly, and a write
        // past limits.file_size kills the writer.
        for sig in [nix::sys::signal::Signal::SIGXFSZ, nix::sys::signal::Signal::SIGPIPE] {
            // SAFETY: restoring a signal's default disposition installs no handler.
            #[allow(unsafe_code)]
            unsafe { nix::sys::signal::signal(sig, nix::sys::signal::SigHandler::SigDfl) }
                .map_err(|e| format!("cannot restore {sig}: {e}"))?;
        }
        if let Some(fd) = self.progress_fd.take() {
            use std::os::fd::IntoRawFd;
            let fd = fd.into_raw_fd();
            // SAFETY: F_SETFD on a descriptor this process owns (just received and
            // deliberately leaked into the tool); no memory is touched.
            #[allow(unsafe_code)]
            if unsafe { libc::fcntl(fd, libc::F_SETFD, 0) } != 0 {
                return Err(format!("cannot keep the progress pipe open: {}", std::io::Error::last_os_error()));
            }
            spec.env.retain(|(k, _)| k != progress::PROGRESS_ENV);
            spec.env.push((progress::PROGRESS_ENV.to_string(), fd.to_string()));
        }
        Ok(())
    }

    /// Step 8: Landlock.
    fn apply_landlock(&mut self) -> Result<(), String> {
        let abi = landlock::kernel_abi();
        let spec = &self.spec;
        // In the call's network namespace TCP is free: loopback and the proxy are all there is.
        let mut rules = LandlockRules {
            read: spec.read.clone(),
            write: spec.write.clone(),
            connect_ports: spec.net_ports.clone(),
            network_namespace: self.netns(),
        };
        // {system} reaches the call's own /proc and /dev/shm, never the host's.
        if spec.system && self.r.proc_private {
            rules.read.push("/proc".into());
        }
        if spec.system && self.r.shm_private {
            rules.write.push("/dev/shm".into());
        }
        match landlock::apply_to_current_thread(&rules, abi) {
            Ok(used) if spec.require_landlock && used < MIN_ENFORCED_ABI => {
                return Err(format!(
                    "Landlock ABI {used} is older than the {MIN_ENFORCED_ABI} that enforce mode requires"
                ));
            }
            Ok(used) => self.r.landlock_abi = used,
            Err(e) if spec.require_landlock => return Err(e),
            Err(_) => self.r.landlock_abi = 0,
        }
        Ok(())
    }

    /// Step 9: seccomp, last.
    fn apply_seccomp(&mut self) -> Result<(), String> {
        let (netns, pid_namespace) = (self.netns(), self.in_ns());
        let (spec, r) = (&self.spec, &mut *self.r);
        let filters = seccomp::build(seccomp::Target {
            net: spec.net_ports.is_some(),
            udp: spec.udp,
            host_pid: spec.parent_pid,
            host_pgid: self.host_pgid,
            // With a read-only view the mounts confine metadata; without one, as uid 0, seccomp does.
            uid0: nix::unistd::getuid().is_root() && !r.view_read_only,
            ipc: r.ipc_namespace || spec.sysv_ipc,
            inotify: spec.inotify,
            pid_namespace,
            network_namespace: netns,
            // Only where every directory write grant is the call's own layer: a
            // host socket in a write grant bound directly would be reachable.
            unix: r.grant_view && netns && spec.layers_cover_writes && (spec.layers.is_empty() || r.layered),
        })?;
        match seccomp::apply_to_current_thread(&filters) {
            Ok(()) => r.seccomp = true,
            Err(e) if spec.require_seccomp => return Err(e),
            Err(_) => r.seccomp = false,
        }
        Ok(())
    }
}

fn exec(spec: &SandboxSpec) -> String {
    let cstr = |s: &str| CString::new(s).map_err(|_| format!("{s:?} contains a NUL byte"));
    let argv: Result<Vec<CString>, String> = spec.argv.iter().map(|a| cstr(a)).collect();
    let env: Result<Vec<CString>, String> = spec.env.iter().map(|(k, v)| cstr(&format!("{k}={v}"))).collect();
    let (argv, env) = match (argv, env) {
        (Ok(a), Ok(e)) => (a, e),
        (Err(e), _) | (_, Err(e)) => return e,
    };
    let Some(program) = argv.first() else { return "empty argv".into() };
    match nix::unistd::execve(program, &argv, &env) {
        Ok(never) => match never {},
        Err(e) => format!("cannot execute {}: {e}", spec.argv[0]),
    }
}
