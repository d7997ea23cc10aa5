//! What the host and the sandbox helper say to each other.
//!
//! The helper's stdin is one end of a socket pair. The host writes the
//! [`SandboxSpec`] as one JSON document after its length (8 bytes, little
//! endian) and shuts its side down for writing (unless the socket is to become
//! the program's stdin: [`SandboxSpec::stdin_from_host`]);
//! the helper moves the socket to [`REPORT_FD`] with close-on-exec and answers
//! with [`HelperReport`] lines. A successful `execve` closes the socket, so the
//! program never holds it and cannot forge a report: stdout and stderr are the
//! program's alone.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The whole sandbox of one process call.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SandboxSpec {
    /// The program (absolute) and its arguments.
    pub argv: Vec<String>,
    /// The whole environment.
    pub env: Vec<(String, String)>,
    /// Working directory.
    pub cwd: PathBuf,
    /// Paths readable (and executable).
    pub read: Vec<PathBuf>,
    /// Paths readable, writable and executable.
    pub write: Vec<PathBuf>,
    /// Grants as spelled where a link makes them differ from `read`/`write`
    /// (the host's `Walls::links`).
    #[serde(default)]
    pub links: Vec<PathBuf>,
    /// Host unix sockets bound into the call's root at their paths (`net.unix`).
    #[serde(default)]
    pub unix: Vec<PathBuf>,
    /// Every directory write grant (but `{tmp}`) has a layer in `layers`: with
    /// the call's root built from its grants, `AF_UNIX` may be admitted.
    #[serde(default)]
    pub layers_cover_writes: bool,
    /// TCP ports `connect` may reach, without a network namespace (best-effort
    /// mode); `socket()` is refused for every family when `None` and the call
    /// has no network namespace.
    pub net_ports: Option<Vec<u16>>,
    /// UDP sockets too (with `net_ports`): a grant names a host, which the
    /// program resolves over DNS itself. Otherwise only TCP.
    #[serde(default)]
    pub udp: bool,
    /// Resource limits.
    pub limits: RlimitSpec,
    /// `{tmp}` as a tmpfs of its own (as root; see [`crate::tmpfs`]).
    #[serde(default)]
    pub tmp_quota: Option<TmpQuota>,
    /// The call's cgroups, which the helper is in before anything else runs.
    #[serde(default)]
    pub cgroup: Option<CgroupJoin>,
    /// A private IPC namespace (as root): SysV IPC objects and POSIX message
    /// queues made by the call die with it, and no other process's are visible.
    #[serde(default)]
    pub ipc_namespace: bool,
    /// Admit SysV IPC and POSIX message queues without a private IPC namespace
    /// (the tool's `sysv_ipc = true`).
    #[serde(default)]
    pub sysv_ipc: bool,
    /// Admit inotify (the tool's `inotify = true`).
    #[serde(default)]
    pub inotify: bool,
    /// Run as this uid and gid (only when warden runs as root).
    pub run_as: Option<(u32, u32)>,
    /// Drop every capability and lock the securebits (when running as root).
    pub drop_caps: bool,
    /// Fail unless Landlock is fully enforced at ABI 4 or newer.
    pub require_landlock: bool,
    /// Fail unless the seccomp filter is installed.
    pub require_seccomp: bool,
    /// The host's pid: the helper exits if its parent is not this process, and the
    /// tool may not signal it.
    pub parent_pid: u32,
    /// The socket stays the program's stdin after the spec (a long-running MCP
    /// server reads its requests there); otherwise stdin is `/dev/null`.
    #[serde(default)]
    pub stdin_from_host: bool,
    /// After the progress pipe the host sends its own standard input, which
    /// becomes the program's (`warden run`: a terminal or a pipe passed through).
    #[serde(default)]
    pub stdin_passed: bool,
    /// After the spec the host sends the write end of the call's progress pipe
    /// ([`crate::progress`]); the tool gets it, and only it, as `WARDEN_PROGRESS_FD`.
    #[serde(default)]
    pub progress: bool,
    /// The call's own namespaces ([`crate::namespaces`]), when the host plans them.
    #[serde(default)]
    pub namespaces: Option<NsPlan>,
    /// Protected and denied paths, enforced by mounts in the call's mount
    /// namespace ([`crate::mounts`]).
    #[serde(default)]
    pub rules: Vec<crate::rules::PathRule>,
    /// `{system}` is granted: with a private `/proc` and `/dev/shm`, Landlock
    /// grants them too (read and write respectively).
    #[serde(default)]
    pub system: bool,
    /// The call's layers: each write grant is an overlay whose upper
    /// directory the host applies when the call ends (the host's layer),
    /// mounted before the rules.
    #[serde(default)]
    pub layers: Vec<crate::rules::LayerRoot>,
}

/// The namespaces the host asks the helper for.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NsPlan {
    /// A user namespace too (warden is not root): the same ids inside as outside.
    pub user: bool,
    /// An IPC namespace too.
    pub ipc: bool,
    /// A private `/dev/shm` (sharing `{tmp}`'s tmpfs when there is one).
    pub shm: bool,
    /// Its size without a `{tmp}` (`limits.tmp_size`).
    #[serde(default)]
    pub shm_size: u64,
    /// Its files without a `{tmp}` (`limits.tmp_files`).
    #[serde(default)]
    pub shm_files: u32,
    /// A network namespace too, with only loopback ([`crate::netns`]).
    #[serde(default)]
    pub net: bool,
    /// Listen for warden's proxy inside it and hand the socket over (the tool
    /// has `net.connect` grants).
    #[serde(default)]
    pub proxy: bool,
    /// Fail when they cannot be made (the call has [`SandboxSpec::rules`] or
    /// network grants in enforce mode); otherwise go on without them and report it.
    pub required: bool,
}

/// The bounds of the call's `{tmp}` file system.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TmpQuota {
    /// The `{tmp}` directory the host created.
    pub path: PathBuf,
    /// Its size in bytes (`limits.tmp_size`).
    pub size: u64,
    /// The files and directories it may hold (`limits.tmp_files`).
    pub files: u32,
    /// Fail when it cannot be mounted (enforce mode); otherwise report it absent.
    pub required: bool,
}

/// The rlimits of one call.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct RlimitSpec {
    /// `RLIMIT_CPU` in seconds.
    pub cpu_secs: u64,
    /// `RLIMIT_AS` in bytes.
    pub address_space: u64,
    /// `RLIMIT_NPROC` (when not root; root is bounded by the cgroup).
    pub processes: Option<u64>,
    /// `RLIMIT_NPROC` once in a user namespace of the call's own, where only
    /// the call's processes (and its monitor) count.
    #[serde(default)]
    pub processes_in_userns: Option<u64>,
    /// `RLIMIT_NOFILE`.
    pub open_files: u64,
    /// `RLIMIT_FSIZE` in bytes.
    pub file_size: u64,
}

/// What the helper reports on [`REPORT_FD`]: one line before it execs the tool,
/// and one more if the `execve` itself fails.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct HelperReport {
    /// Set up and about to exec.
    pub ok: bool,
    /// Why not, when not.
    pub error: Option<String>,
    /// Whether the error is the exec itself (the sandbox was fine).
    pub exec_failed: bool,
    /// Landlock ABI enforced (0: none).
    pub landlock_abi: u32,
    /// Whether the seccomp filter is installed.
    pub seccomp: bool,
    /// Whether the rlimits are set.
    pub rlimits: bool,
    /// The uid the tool runs as.
    pub uid: u32,
    /// Whether the pids cgroup holds the tree.
    pub cgroup: bool,
    /// Whether `{tmp}` is a tmpfs of its own, bounded by `limits.tmp_size` and `tmp_files`.
    #[serde(default)]
    pub tmp_quota: bool,
    /// Whether the call has a private IPC namespace.
    #[serde(default)]
    pub ipc_namespace: bool,
    /// The namespaces the call got (`user`, `mount`, `pid`, `ipc`).
    #[serde(default)]
    pub namespaces: Vec<String>,
    /// Why the planned namespaces could not be made, when they could not.
    #[serde(default)]
    pub namespace_error: Option<String>,
    /// `/proc` is the call's own pid namespace's.
    #[serde(default)]
    pub proc_private: bool,
    /// `/dev/shm` is a tmpfs of the call's own.
    #[serde(default)]
    pub shm_private: bool,
    /// The rules were applied by mounts.
    #[serde(default)]
    pub paths_masked: bool,
    /// The write grants are layers.
    #[serde(default)]
    pub layered: bool,
    /// Every mount but the call's own is read-only: file metadata is confined
    /// by the view, at every uid.
    #[serde(default)]
    pub view_read_only: bool,
    /// The call's root was built from its grants ([`crate::mounts::grant_view`]):
    /// nothing else exists for the tool, and `AF_UNIX` sockets are admitted.
    #[serde(default)]
    pub grant_view: bool,
    /// Why the call's root could not be built from its grants (the call went
    /// on in the host's tree, without `AF_UNIX`).
    #[serde(default)]
    pub grant_view_error: Option<String>,
    /// The call has a network namespace of its own (only loopback; the proxy
    /// its one way out).
    #[serde(default)]
    pub net_namespace: bool,
}

/// The helper's report channel (close-on-exec).
pub const REPORT_FD: i32 = 3;
/// The most report bytes the host reads.
pub const MAX_REPORT: u64 = 64 << 10;

/// How the helper comes to be in the call's cgroups.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CgroupJoin {
    /// Their directory name (`warden-<id>`, the same in every hierarchy).
    pub name: String,
    /// How many hierarchies hold them (pids, and memory where it is one of its own).
    pub hierarchies: usize,
    /// The files the helper writes `0` into, moving itself: in v1 each
    /// hierarchy's `tasks` (its one thread, which takes no global lock; see
    /// `CallCgroup::self_join_files`), in v2 `cgroup.procs` when the host could
    /// not move it; empty when the host did.
    pub join: Vec<PathBuf>,
}
