//! The sandbox helper: `warden` re-executed with [`HELPER_ARG`], single-threaded,
//! before any runtime starts. It reads its [`SandboxSpec`] from stdin and, in
//! this order:
//!
//! 1. reopens stdin on `/dev/null` (the tool gets no input);
//! 2. starts a new session and process group (the host kills the whole group);
//! 3. asks for `SIGKILL` when its parent dies, then checks the parent is still the host;
//! 4. closes every inherited file descriptor but 0–2;
//! 5. joins the per-call pids cgroup (as root);
//! 6. sets the rlimits (CPU, AS, NPROC when not root, NOFILE, FSIZE, CORE = 0);
//! 7. as root: locks the securebits, becomes the workspace owner when that is
//!    not root, and empties every capability set;
//! 8. changes to the working directory; sets `NO_NEW_PRIVS`;
//! 9. Landlock; 10. seccomp, last; then reports on stderr and `execve`s the tool.
//!
//! Any failure is reported on the first stderr line and the helper exits 126:
//! the tool never runs half-confined.

use std::ffi::CString;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;

use super::landlock::{self, LandlockRules, MIN_ENFORCED_ABI};
use super::limits;
use super::seccomp;
use super::spec::{HelperReport, REPORT_PREFIX, SandboxSpec};

/// The first argument that makes `warden` the sandbox helper.
pub const HELPER_ARG: &str = "--warden-sandbox-helper";
/// The most bytes of spec the helper reads.
const MAX_SPEC: u64 = 4 << 20;

fn report(r: &HelperReport) {
    let line = format!("{REPORT_PREFIX}{}\n", serde_json::to_string(r).unwrap_or_default());
    let _ = std::io::stderr().write_all(line.as_bytes());
}

/// Runs the helper; never returns.
pub fn run_main() -> ! {
    let mut r = HelperReport::default();
    match confine(&mut r) {
        Ok(spec) => {
            r.ok = true;
            report(&r);
            let err = exec(&spec);
            report(&HelperReport { ok: false, error: Some(err), exec_failed: true, ..r });
            std::process::exit(127);
        }
        Err(e) => {
            r.ok = false;
            r.error = Some(e);
            report(&r);
            std::process::exit(126);
        }
    }
}

fn confine(r: &mut HelperReport) -> Result<SandboxSpec, String> {
    let mut text = String::new();
    std::io::stdin().take(MAX_SPEC).read_to_string(&mut text).map_err(|e| format!("cannot read the spec: {e}"))?;
    let spec: SandboxSpec = serde_json::from_str(&text).map_err(|e| format!("bad spec: {e}"))?;

    // 1. stdin from /dev/null.
    let null = std::fs::File::open("/dev/null").map_err(|e| format!("cannot open /dev/null: {e}"))?;
    // SAFETY: dup2 of a valid open descriptor onto 0; no memory is touched.
    #[allow(unsafe_code)]
    if unsafe { libc::dup2(null.as_raw_fd(), 0) } < 0 {
        return Err(format!("cannot reopen stdin: {}", std::io::Error::last_os_error()));
    }
    drop(null);

    // 2. New session and process group.
    nix::unistd::setsid().map_err(|e| format!("setsid: {e}"))?;

    // 3. Die with the host.
    nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL).map_err(|e| format!("PR_SET_PDEATHSIG: {e}"))?;
    if nix::unistd::getppid().as_raw() as u32 != spec.parent_pid {
        return Err("the host exited before the tool started".into());
    }

    // 4. Close every inherited descriptor but 0-2.
    // SAFETY: close_range on descriptors this single-threaded process does not use.
    #[allow(unsafe_code)]
    if unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) } != 0 {
        return Err(format!("close_range: {}", std::io::Error::last_os_error()));
    }

    // 5. The pids cgroup.
    if let Some(procs) = &spec.cgroup_procs {
        std::fs::write(procs, std::process::id().to_string())
            .map_err(|e| format!("cannot join the pids cgroup {}: {e}", procs.display()))?;
        r.cgroup = true;
    }

    // 6. rlimits.
    limits::apply_rlimits(&spec.limits)?;
    r.rlimits = true;

    // 7. Privileges.
    if spec.drop_caps {
        limits::apply_securebits()?;
        if let Some((uid, gid)) = spec.run_as {
            limits::apply_identity(uid, gid)?;
        }
        limits::apply_drop_capabilities()?;
    }
    r.uid = nix::unistd::getuid().as_raw();

    // 8. Working directory, then no new privileges.
    std::env::set_current_dir(&spec.cwd).map_err(|e| format!("cannot enter {}: {e}", spec.cwd.display()))?;
    nix::sys::prctl::set_no_new_privs().map_err(|e| format!("PR_SET_NO_NEW_PRIVS: {e}"))?;

    // 9. Landlock.
    let abi = landlock::kernel_abi();
    let rules =
        LandlockRules { read: spec.read.clone(), write: spec.write.clone(), connect_ports: spec.net_ports.clone() };
    match landlock::apply_to_current_thread(&rules, abi) {
        Ok(used) if spec.require_landlock && used < MIN_ENFORCED_ABI => {
            return Err(format!("Landlock ABI {used} is older than the {MIN_ENFORCED_ABI} that enforce mode requires"));
        }
        Ok(used) => r.landlock_abi = used,
        Err(e) if spec.require_landlock => return Err(e),
        Err(_) => r.landlock_abi = 0,
    }

    // 10. seccomp, last.
    let filters = seccomp::build(spec.net_ports.is_some())?;
    match seccomp::apply_to_current_thread(&filters) {
        Ok(()) => r.seccomp = true,
        Err(e) if spec.require_seccomp => return Err(e),
        Err(_) => r.seccomp = false,
    }
    Ok(spec)
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
