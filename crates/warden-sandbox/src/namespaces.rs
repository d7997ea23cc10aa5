//! The call's own namespaces ([`enter`]): mount, pid and IPC, a user namespace
//! when warden is not root (the same uid and gid inside as outside), and
//! network with only loopback ([`crate::netns`]). After `unshare` the helper
//! forks: the parent stays outside as the monitor, the child is pid 1 of the new
//! pid namespace, mounts its own `/proc` ([`mount_proc`]) and goes on confining
//! itself. The host decides once per process whether to ask
//! ([`NsSupport::probe`]). docs/security.md, "Process tools", has the details.

use std::os::fd::{AsRawFd, OwnedFd};

use nix::mount::MsFlags;
use nix::sched::CloneFlags;

use crate::spec::NsPlan;

/// Whether this host lets warden make a call's namespaces, and why not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NsSupport {
    /// They can be asked for.
    pub available: bool,
    /// With a user namespace (warden is not root).
    pub user: bool,
    /// Why not, when not: the sysctl or switch that refused, and what to do.
    pub reason: Option<String>,
}

impl NsSupport {
    /// Reads the switch and the sysctls (cheap; no namespace is made), except
    /// where AppArmor restricts user namespaces: a profile may grant them to
    /// the helper binary alone, so the helper tries, once per process
    /// ([`crate::probe::helper_namespaces`]).
    pub fn probe(root: bool) -> NsSupport {
        let off = std::env::var("WARDEN_NAMESPACES").is_ok_and(|v| v.eq_ignore_ascii_case("off"));
        NsSupport::decide(
            root,
            off,
            |p| std::fs::read_to_string(p).ok().map(|s| s.trim().to_string()),
            crate::probe::helper_namespaces,
        )
    }

    /// [`NsSupport::probe`] with the switch, the sysctl reader and the helper's try given.
    fn decide(
        root: bool,
        off: bool,
        read: impl Fn(&str) -> Option<String>,
        helper_tried: impl Fn() -> Result<(), String>,
    ) -> NsSupport {
        let refused = |reason: String| NsSupport { available: false, user: !root, reason: Some(reason) };
        if off {
            return refused("WARDEN_NAMESPACES=off asks warden to make no namespaces".into());
        }
        if root {
            return NsSupport { available: true, user: false, reason: None };
        }
        if read("/proc/sys/kernel/unprivileged_userns_clone").as_deref() == Some("0") {
            return refused(
                "the kernel refuses unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone = 0); \
                 set it to 1"
                    .into(),
            );
        }
        if read("/proc/sys/user/max_user_namespaces").as_deref() == Some("0") {
            return refused(
                "the kernel allows no user namespaces (sysctl user.max_user_namespaces = 0); raise it".into(),
            );
        }
        if read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").as_deref() == Some("1")
            && let Err(e) = helper_tried()
        {
            return refused(format!(
                "AppArmor restricts unprivileged user namespaces (sysctl kernel.apparmor_restrict_unprivileged_userns \
                 = 1) and the sandbox helper has no profile that allows them ({e}); install the profile \
                 `warden doctor` prints, or set the sysctl to 0"
            ));
        }
        NsSupport { available: true, user: true, reason: None }
    }
}

/// What [`enter`] made.
pub struct Entered {
    /// The names, for the report.
    pub names: Vec<String>,
    /// The read end of a pipe whose write end only the monitor holds: EOF means
    /// the monitor is gone.
    monitor_alive: OwnedFd,
    /// The write end of the pipe on which the call's init hands the monitor
    /// the tool's wait status ([`crate::init`]).
    status: Option<OwnedFd>,
}

impl Entered {
    /// The status pipe's write end, for the call's init.
    pub fn take_status(&mut self) -> Option<OwnedFd> {
        self.status.take()
    }

    /// Whether the monitor (the child's parent, outside the pid namespace,
    /// where `getppid` says 0) still lives.
    pub fn monitor_alive(&self) -> bool {
        let mut b = [0u8; 1];
        // SAFETY: a non-blocking read of one byte into a local buffer from a pipe we own.
        #[allow(unsafe_code)]
        let n = unsafe { libc::read(self.monitor_alive.as_raw_fd(), b.as_mut_ptr().cast(), 1) };
        n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EAGAIN)
    }
}

/// Why [`enter`] did not make the namespaces.
pub enum NsError {
    /// The kernel refused the `unshare` itself: nothing changed, the call may
    /// go on without namespaces.
    Refused(String),
    /// A later step failed: the helper is half-way and must stop.
    Broken(String),
}

/// Makes the namespaces of `plan`, forks, and returns in the child (pid 1 of
/// the new pid namespace); the parent becomes the [`monitor`] and never returns.
pub fn enter(plan: &NsPlan) -> Result<Entered, NsError> {
    let (uid, gid) = (nix::unistd::getuid().as_raw(), nix::unistd::getgid().as_raw());
    let mut flags = CloneFlags::CLONE_NEWNS | CloneFlags::CLONE_NEWPID;
    let mut names = Vec::new();
    if plan.user {
        flags |= CloneFlags::CLONE_NEWUSER;
        names.push("user".to_string());
    }
    names.extend(["mount".to_string(), "pid".to_string()]);
    if plan.ipc {
        flags |= CloneFlags::CLONE_NEWIPC;
        names.push("ipc".to_string());
    }
    if plan.net {
        flags |= CloneFlags::CLONE_NEWNET;
        names.push("net".to_string());
    }
    nix::sched::unshare(flags).map_err(|e| NsError::Refused(format!("unshare({}): {e}", names.join(", "))))?;
    let broken = |what: &str, e: &dyn std::fmt::Display| NsError::Broken(format!("{what}: {e}"));
    if plan.user {
        std::fs::write("/proc/self/setgroups", "deny").map_err(|e| broken("cannot write /proc/self/setgroups", &e))?;
        std::fs::write("/proc/self/uid_map", format!("{uid} {uid} 1"))
            .map_err(|e| broken("cannot write /proc/self/uid_map", &e))?;
        std::fs::write("/proc/self/gid_map", format!("{gid} {gid} 1"))
            .map_err(|e| broken("cannot write /proc/self/gid_map", &e))?;
    }
    nix::mount::mount(None::<&str>, "/", None::<&str>, MsFlags::MS_REC | MsFlags::MS_SLAVE, None::<&str>)
        .map_err(|e| broken("cannot make the mounts private (mount / MS_SLAVE)", &e))?;
    if plan.net {
        crate::netns::loopback_up().map_err(|e| broken("the call's network namespace", &e))?;
    }

    let (read_end, write_end) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC | nix::fcntl::OFlag::O_NONBLOCK)
        .map_err(|e| broken("pipe2", &e))?;
    let (status_read, status_write) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| broken("pipe2", &e))?;
    // SAFETY: the helper is single-threaded, so the child may run any code.
    #[allow(unsafe_code)]
    match unsafe { nix::unistd::fork() }.map_err(|e| broken("fork", &e))? {
        nix::unistd::ForkResult::Parent { child } => {
            drop(read_end);
            drop(status_write);
            monitor(child, write_end, status_read)
        }
        nix::unistd::ForkResult::Child => {
            drop(write_end);
            drop(status_read);
            nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                .map_err(|e| broken("PR_SET_PDEATHSIG", &e))?;
            let entered = Entered { names, monitor_alive: read_end, status: Some(status_write) };
            if !entered.monitor_alive() {
                return Err(NsError::Broken("the monitor exited before the tool started".into()));
            }
            Ok(entered)
        }
    }
}

/// The parent outside the pid namespace: waits for the child and ends as the
/// tool ended (the status the call's init handed over on `status`, or the
/// child's own when it handed none). `alive` is held open so the child can
/// tell it lives.
fn monitor(child: nix::unistd::Pid, alive: OwnedFd, status: OwnedFd) -> ! {
    use nix::sys::signal::{SigHandler, SigSet, Signal};
    use nix::sys::wait::{WaitStatus, waitpid};
    // Stdio and the report socket are the child's alone: the host sees their
    // end when the tool's tree closes them.
    // SAFETY: closes descriptors 0..=3 of this single-threaded process; `alive` is above them.
    #[allow(unsafe_code)]
    unsafe {
        libc::syscall(libc::SYS_close_range, 0u32, crate::spec::REPORT_FD as u32, 0u32);
    }
    // SAFETY: PR_SET_DUMPABLE takes integers: no core of the monitor when it re-raises a signal.
    #[allow(unsafe_code)]
    unsafe {
        libc::prctl(
            libc::PR_SET_DUMPABLE,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        );
    }
    let _ = crate::limits::apply_drop_capabilities();
    let own = loop {
        match waitpid(child, None) {
            Err(nix::errno::Errno::EINTR) => continue,
            Ok(WaitStatus::Exited(_, code)) => break Ok(code),
            Ok(WaitStatus::Signaled(_, sig, _)) => break Err(sig),
            Ok(_) => continue,
            Err(_) => break Ok(126),
        }
    };
    drop(alive);
    // The tool's own status, when the init handed it over (every end of the
    // pipe is closed now: a read ends at once).
    let mut raw = [0u8; 4];
    let handed = nix::unistd::read(&status, &mut raw).is_ok_and(|n| n == 4);
    let status = if handed {
        let raw = i32::from_le_bytes(raw);
        if libc::WIFSIGNALED(raw) {
            Signal::try_from(libc::WTERMSIG(raw)).map_err(|_| ()).map_or(Ok(128 + libc::WTERMSIG(raw)), Err)
        } else {
            Ok(libc::WEXITSTATUS(raw))
        }
    } else {
        own
    };
    match status {
        Ok(code) => std::process::exit(code),
        Err(sig) => {
            // SAFETY: the default disposition installs no handler.
            #[allow(unsafe_code)]
            let _ = unsafe { nix::sys::signal::signal(sig, SigHandler::SigDfl) };
            let mut set = SigSet::empty();
            set.add(sig);
            let _ = set.thread_unblock();
            let _ = nix::sys::signal::raise(sig);
            // A signal that does not end a process (none should reach here).
            std::process::exit(128 + sig as i32)
        }
    }
}

/// Mounts a fresh `proc` of the call's pid namespace on `/proc`, with
/// `/proc/sys` read-only. `false` (the host's `/proc` kept) when the kernel
/// refuses, as in a container whose `/proc` is partly masked.
pub fn mount_proc() -> bool {
    let hard = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    if nix::mount::mount(Some("proc"), "/proc", Some("proc"), hard, None::<&str>).is_err() {
        return false;
    }
    let sys = nix::mount::mount(
        Some("/proc/sys"),
        "/proc/sys",
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    )
    .and_then(|()| {
        nix::mount::mount(
            None::<&str>,
            "/proc/sys",
            None::<&str>,
            MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | hard,
            None::<&str>,
        )
    });
    if sys.is_err() {
        let _ = nix::mount::umount2("/proc/sys", nix::mount::MntFlags::MNT_DETACH);
        let _ = nix::mount::umount2("/proc", nix::mount::MntFlags::MNT_DETACH);
        return false;
    }
    true
}

/// An `O_PATH` descriptor of `path` opened without following any symbolic
/// link (magic links included), for mounting through `/proc/self/fd/N`.
pub fn open_path(path: &std::path::Path, directory: bool) -> Result<OwnedFd, rustix::io::Errno> {
    use rustix::fs::{CWD, Mode, OFlags, ResolveFlags, openat2};
    let mut flags = OFlags::PATH | OFlags::CLOEXEC;
    if directory {
        flags |= OFlags::DIRECTORY;
    }
    openat2(CWD, path, flags, Mode::empty(), ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS)
}

/// `/proc/self/fd/N` of a descriptor.
pub fn fd_path(fd: &OwnedFd) -> String {
    format!("/proc/self/fd/{}", fd.as_raw_fd())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_switch_and_the_sysctls_decide() {
        let none = |_: &str| None;
        let works = || Ok(());
        let refused = || Err("unshare(user, mount, pid, ipc, net): EPERM".to_string());
        assert!(NsSupport::decide(true, false, none, works).available);
        let off = NsSupport::decide(true, true, none, works);
        assert!(!off.available && off.reason.unwrap_or_default().contains("WARDEN_NAMESPACES"));
        let user = NsSupport::decide(false, false, none, works);
        assert!(user.available && user.user);
        for (file, name) in [
            ("/proc/sys/kernel/unprivileged_userns_clone", "unprivileged_userns_clone"),
            ("/proc/sys/user/max_user_namespaces", "max_user_namespaces"),
        ] {
            let s = NsSupport::decide(false, false, |p| (p == file).then(|| "0".to_string()), works);
            assert!(!s.available && s.reason.unwrap_or_default().contains(name), "{file}");
        }
        let restricted = |p: &str| p.ends_with("apparmor_restrict_unprivileged_userns").then(|| "1".into());
        let aa = NsSupport::decide(false, false, restricted, refused);
        let why = aa.reason.unwrap_or_default();
        assert!(!aa.available && why.contains("AppArmor") && why.contains("warden doctor") && why.contains("EPERM"));
        // A profile that grants the helper user namespaces: the helper's try decides.
        assert!(NsSupport::decide(false, false, restricted, works).available);
        // As root the user-namespace sysctls do not matter.
        assert!(NsSupport::decide(true, false, |_| Some("0".into()), refused).available);
    }
}
