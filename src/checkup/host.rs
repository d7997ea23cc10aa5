//! What this machine offers a sandbox: the kernel, Landlock, seccomp,
//! namespaces, cgroups, and the sysctls that change what a tool could try.
//! Read from `/proc` and `/sys`; nothing is changed.

use std::path::Path;

use serde::Serialize;

use crate::runtime::process::HostSupport;

/// The host, as `warden audit` reports it.
#[derive(Debug, Clone, Serialize)]
pub struct HostReport {
    /// `uname -sr`.
    pub kernel: String,
    /// The Landlock ABI (0: none).
    pub landlock_abi: u32,
    /// What that ABI lets warden restrict.
    pub landlock_covers: Vec<&'static str>,
    /// seccomp filters are available.
    pub seccomp: bool,
    /// The seccomp actions the kernel offers.
    pub seccomp_actions: Vec<String>,
    /// `user.max_user_namespaces` (0: user namespaces are off).
    pub max_user_namespaces: Option<u64>,
    /// `user.max_pid_namespaces`.
    pub max_pid_namespaces: Option<u64>,
    /// `1` or `2`, or none when no cgroup file system is mounted.
    pub cgroup_version: Option<u8>,
    /// The controllers available (v2: `cgroup.controllers`; v1: the mounted hierarchies).
    pub cgroup_controllers: Vec<String>,
    /// warden runs as root.
    pub root: bool,
    /// `kernel.yama.ptrace_scope` (0 classic, 1 restricted, 2 admin only, 3 none).
    pub ptrace_scope: Option<u64>,
    /// `dev.tty.legacy_tiocsti` (0: TIOCSTI injection is off for everyone).
    pub legacy_tiocsti: Option<u64>,
    /// `kernel.io_uring_disabled` (0 allowed, 1 restricted, 2 disabled).
    pub io_uring_disabled: Option<u64>,
    /// `kernel.unprivileged_bpf_disabled`.
    pub unprivileged_bpf_disabled: Option<u64>,
    /// Why a call gets no namespaces of its own here (`None`: it gets them).
    /// `warden audit` reads the switch and the sysctls; `warden doctor` sets
    /// what the sandbox helper found when it tried.
    pub namespaces_refused: Option<String>,
    /// Why warden, as root, gets no private IPC namespace for a call (`None`:
    /// it does, or it is not root). Set by `warden doctor` from the helper's
    /// try; `warden audit` assumes one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ipc_namespace_refused: Option<String>,
}

fn number(path: &str) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// What each Landlock ABI adds, by version.
const LANDLOCK: &[(u32, &str)] = &[
    (1, "file system access"),
    (2, "renames and links across directories (refer)"),
    (3, "truncation"),
    (4, "TCP bind and connect by port"),
    (5, "ioctl on devices"),
    (6, "signals and abstract unix sockets outside the sandbox (scopes)"),
    (7, "audit logging of denials"),
];

impl HostReport {
    /// Reads the running host.
    pub fn probe() -> HostReport {
        let support = HostSupport::probe();
        let kernel = nix::sys::utsname::uname()
            .map(|u| format!("{} {}", u.sysname().to_string_lossy(), u.release().to_string_lossy()))
            .unwrap_or_else(|_| "unknown".into());
        let seccomp_actions = std::fs::read_to_string("/proc/sys/kernel/seccomp/actions_avail")
            .map(|s| s.split_whitespace().map(String::from).collect())
            .unwrap_or_default();
        let (cgroup_version, cgroup_controllers) = if Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
            let c = std::fs::read_to_string("/sys/fs/cgroup/cgroup.controllers").unwrap_or_default();
            (Some(2), c.split_whitespace().map(String::from).collect())
        } else if let Ok(dir) = std::fs::read_dir("/sys/fs/cgroup") {
            let mut names: Vec<String> = dir
                .filter_map(Result::ok)
                .filter(|e| e.path().is_dir())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            (if names.is_empty() { None } else { Some(1) }, names)
        } else {
            (None, Vec::new())
        };
        HostReport {
            kernel,
            landlock_abi: support.landlock_abi,
            landlock_covers: LANDLOCK.iter().filter(|(v, _)| *v <= support.landlock_abi).map(|(_, w)| *w).collect(),
            seccomp: support.seccomp,
            seccomp_actions,
            max_user_namespaces: number("/proc/sys/user/max_user_namespaces"),
            max_pid_namespaces: number("/proc/sys/user/max_pid_namespaces"),
            cgroup_version,
            cgroup_controllers,
            root: support.root,
            ptrace_scope: number("/proc/sys/kernel/yama/ptrace_scope"),
            legacy_tiocsti: number("/proc/sys/dev/tty/legacy_tiocsti"),
            io_uring_disabled: number("/proc/sys/kernel/io_uring_disabled"),
            unprivileged_bpf_disabled: number("/proc/sys/kernel/unprivileged_bpf_disabled"),
            namespaces_refused: super::namespace_refusal(),
            ipc_namespace_refused: None,
        }
    }
}
