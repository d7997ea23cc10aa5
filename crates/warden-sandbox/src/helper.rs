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
fn confine(
    channel: &mut std::fs::File,
    r: &mut HelperReport,
) -> Result<(SandboxSpec, Option<std::os::fd::OwnedFd>), String> {
    // The spec's length, then exactly that much: nothing past it is read, since
    // for a server the rest of the stream is the program's stdin.
    let mut len = [0u8; 8];
    channel.read_exact(&mut len).map_err(|e| format!("cannot read the spec's length: {e}"))?;
    let len = u64::from_le_bytes(len);
    if len > MAX_SPEC {
        return Err(format!("the spec is {len} bytes, more than {MAX_SPEC}"));
    }
    let mut text = vec![0u8; len as usize];
    channel.read_exact(&mut text).map_err(|e| format!("cannot read the spec: {e}"))?;
    let mut spec: SandboxSpec = serde_json::from_slice(&text).map_err(|e| format!("bad spec: {e}"))?;

    // 1. stdin: /dev/null, or the host's socket (without close-on-exec) for a server.
    let null = std::fs::File::open("/dev/null").map_err(|e| format!("cannot open /dev/null: {e}"))?;
    let source = if spec.stdin_from_host { channel.as_raw_fd() } else { null.as_raw_fd() };
    // SAFETY: dup2 of a valid open descriptor onto 0; no memory is touched.
    #[allow(unsafe_code)]
    if unsafe { libc::dup2(source, 0) } < 0 {
        return Err(format!("cannot reopen stdin: {}", std::io::Error::last_os_error()));
    }
    drop(null);

    // 2. New session and process group (the old group is the host's).
    let host_pgid = nix::unistd::getpgrp().as_raw() as u32;
    nix::unistd::setsid().map_err(|e| format!("setsid: {e}"))?;

    // 3. Die with the host.
    nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL).map_err(|e| format!("PR_SET_PDEATHSIG: {e}"))?;
    if nix::unistd::getppid().as_raw() as u32 != spec.parent_pid {
        return Err("the host exited before the tool started".into());
    }

    // 4. The call's cgroups: the helper moves itself in where the host did not
    // (in v1 always: its one thread, through `tasks`, which takes no lock that
    // waits for an RCU grace period), then checks it is in each of them.
    if let Some(cg) = &spec.cgroup {
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
        r.cgroup = true;
    }

    // 4b. The call's own namespaces: from here on this is the
    // child, pid 1 of its pid namespace; its parent stays outside as the monitor.
    let mut entered = None;
    if let Some(plan) = &spec.namespaces {
        match namespaces::enter(plan) {
            Ok(e) => {
                r.namespaces = e.names.clone();
                r.ipc_namespace = plan.ipc;
                entered = Some(e);
            }
            Err(NsError::Refused(e)) if plan.required => {
                return Err(format!(
                    "cannot make the call's namespaces, which its protected and denied paths need: {e}"
                ));
            }
            Err(NsError::Refused(e)) => r.namespace_error = Some(e),
            Err(NsError::Broken(e)) => return Err(format!("cannot set up the call's namespaces: {e}")),
        }
    }
    let in_ns = entered.is_some();
    let userns = in_ns && spec.namespaces.as_ref().is_some_and(|p| p.user);
    let netns = in_ns && spec.namespaces.as_ref().is_some_and(|p| p.net);
    r.net_namespace = netns;
    // 4b'. warden's proxy: the one way out of the network namespace.
    if spec.namespaces.as_ref().is_some_and(|p| p.proxy) {
        let listener = if netns { Some(netns::proxy_listener()?) } else { None };
        netns::send_listener(channel, listener.as_ref())?;
    }
    // 4b''. The progress pipe's write end, received here (in the call's
    // namespaces: the monitor outside never holds it); close-on-exec until 7.
    let progress_fd = if spec.progress { Some(progress::recv_fd(channel, "the progress pipe")?) } else { None };
    // 4b-stdin. `warden run`: warden's own stdin becomes the program's.
    if spec.stdin_passed {
        let fd = progress::recv_fd(channel, "its standard input")?;
        // SAFETY: dup2 of a descriptor this process owns onto 0; no memory is touched.
        #[allow(unsafe_code)]
        if unsafe { libc::dup2(std::os::fd::AsRawFd::as_raw_fd(&fd), 0) } < 0 {
            return Err(format!("cannot make warden's stdin the program's: {}", std::io::Error::last_os_error()));
        }
    }
    // 4b-view. The view read-only: only what is mounted from here on (the
    // layers, {tmp}, /proc, /dev/shm) and the write grants reopened below can change.
    if in_ns {
        match mounts::read_only_view() {
            Ok(()) => r.view_read_only = true,
            Err(e) if spec.namespaces.as_ref().is_some_and(|p| p.required) => return Err(e),
            Err(_) => {}
        }
    }
    // 4c. A /proc of the call's own pid namespace.
    if in_ns {
        r.proc_private = namespaces::mount_proc();
    }

    // 4d. {tmp} as a tmpfs of its own (in the call's mount namespace, or in
    // one of its own as root), holding a private /dev/shm too with {system}.
    let owner = spec.run_as.unwrap_or((nix::unistd::getuid().as_raw(), nix::unistd::getgid().as_raw()));
    let shm = spec.namespaces.as_ref().filter(|p| in_ns && p.shm);
    if let Some(quota) = &spec.tmp_quota {
        let granted: Vec<&std::path::Path> = spec.read.iter().chain(&spec.write).map(|p| p.as_path()).collect();
        match tmpfs::mount_private_tmp(quota, owner, &granted, !in_ns, shm.is_some()) {
            Ok(shared) => {
                r.tmp_quota = true;
                r.shm_private = shared;
            }
            Err(e) if quota.required => return Err(e),
            Err(_) => r.tmp_quota = false,
        }
    } else if let Some(plan) = shm {
        match tmpfs::mount_private_shm(plan.shm_size, plan.shm_files, owner) {
            Ok(done) => r.shm_private = done,
            Err(e) if plan.required => return Err(e),
            Err(_) => {}
        }
    }

    // 4e. A private IPC namespace (as root without the call's namespaces, while the capabilities last).
    if spec.ipc_namespace && !in_ns {
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWIPC)
            .map_err(|e| format!("cannot make a private IPC namespace: unshare(CLONE_NEWIPC): {e}"))?;
        r.ipc_namespace = true;
    }

    // 4f. The write grants as layers, then the protected and denied paths, as mounts.
    if !spec.layers.is_empty() {
        let required = spec.namespaces.as_ref().is_some_and(|p| p.required);
        if in_ns {
            match mounts::apply_layers(&spec.layers, userns) {
                Ok(()) => r.layered = true,
                Err(e) if required => return Err(e),
                Err(_) => {}
            }
        } else if required {
            return Err("the call's layers need a mount namespace, which it does not have".into());
        }
    }
    if !spec.rules.is_empty() {
        let required = spec.namespaces.as_ref().is_some_and(|p| p.required);
        if in_ns {
            match mounts::apply(&spec.rules) {
                Ok(()) => r.paths_masked = true,
                Err(e) if required => return Err(e),
                Err(_) => {}
            }
        } else if required {
            return Err("the call's protected and denied paths need a mount namespace, which it does not have".into());
        }
    }

    // 4g. Write grants no layer or tmpfs holds are writable again.
    if r.view_read_only {
        mounts::keep_writable(&spec.write)?;
    }

    // 4h. The call's root built from its grants (with its own /proc and the
    // call's network namespace): what no grant names does not exist, so an
    // AF_UNIX path reaches only the call's own sockets and its grants'.
    if r.view_read_only && r.proc_private && netns {
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
    }

    // 5. rlimits, and the OOM killer's first choice: the tool, never warden.
    let mut rlimits = spec.limits;
    if userns {
        // In the call's own user namespace only its processes (and the monitor) count.
        rlimits.processes = rlimits.processes_in_userns.or(rlimits.processes);
    }
    limits::apply_rlimits(&rlimits)?;
    r.rlimits = true;
    limits::apply_oom_first()?;

    // 6. Privileges (in the call's user namespace too, where it has them all).
    if spec.drop_caps || userns {
        limits::apply_securebits()?;
        if let Some((uid, gid)) = spec.run_as {
            limits::apply_identity(uid, gid)?;
            // Changing credentials cleared the parent-death signal: ask again.
            nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                .map_err(|e| format!("PR_SET_PDEATHSIG: {e}"))?;
            let alive = match &entered {
                Some(e) => e.monitor_alive(),
                None => nix::unistd::getppid().as_raw() as u32 == spec.parent_pid,
            };
            if !alive {
                return Err("the host exited before the tool started".into());
            }
        }
        limits::apply_drop_capabilities()?;
    }
    r.uid = nix::unistd::getuid().as_raw();

    // 7. Working directory, then no new privileges.
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

    // 7b. The progress pipe: the one descriptor besides 0-2 the tool keeps.
    if let Some(fd) = progress_fd {
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

    // 8. Landlock.
    let abi = landlock::kernel_abi();
    // In the call's network namespace TCP is free: loopback and the proxy are all there is.
    let mut rules = LandlockRules {
        read: spec.read.clone(),
        write: spec.write.clone(),
        connect_ports: spec.net_ports.clone(),
        network_namespace: netns,
    };
    // {system} reaches the call's own /proc and /dev/shm, never the host's.
    if spec.system && r.proc_private {
        rules.read.push("/proc".into());
    }
    if spec.system && r.shm_private {
        rules.write.push("/dev/shm".into());
    }
    match landlock::apply_to_current_thread(&rules, abi) {
        Ok(used) if spec.require_landlock && used < MIN_ENFORCED_ABI => {
            return Err(format!("Landlock ABI {used} is older than the {MIN_ENFORCED_ABI} that enforce mode requires"));
        }
        Ok(used) => r.landlock_abi = used,
        Err(e) if spec.require_landlock => return Err(e),
        Err(_) => r.landlock_abi = 0,
    }

    // 9. seccomp, last.
    let filters = seccomp::build(seccomp::Target {
        net: spec.net_ports.is_some(),
        udp: spec.udp,
        host_pid: spec.parent_pid,
        host_pgid,
        // With a read-only view the mounts confine metadata; without one, as uid 0, seccomp does.
        uid0: nix::unistd::getuid().is_root() && !r.view_read_only,
        ipc: r.ipc_namespace || spec.sysv_ipc,
        inotify: spec.inotify,
        pid_namespace: in_ns,
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
    let status = entered.as_mut().and_then(namespaces::Entered::take_status);
    Ok((spec, status))
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
