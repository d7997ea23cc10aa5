//! What a process call's record and errors say: the helper's failure, the
//! limit a call reached, and the words for each layer of the sandbox report.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};
use warden_sandbox::spec::HelperReport;

use super::program;
use crate::error::{CallError, ErrorCode};
use crate::policy::ExecSpec;
use crate::{SandboxReport, Walls};

/// Why the helper stopped before the program ran: its report's error, or what
/// it wrote to stderr, and for a program that could not be executed, what to
/// change so that it can.
pub(super) fn helper_failed(
    tool: &str,
    exec: &ExecSpec,
    walls: &Walls,
    report: &HelperReport,
    stderr: &[u8],
) -> CallError {
    let why = report.error.clone().unwrap_or_else(|| {
        let said = String::from_utf8_lossy(&stderr[..stderr.len().min(512)]).trim().to_string();
        if said.is_empty() {
            "the sandbox helper stopped before reporting".into()
        } else {
            format!("the sandbox helper stopped before reporting: {said}")
        }
    });
    let code = if report.exec_failed { ErrorCode::ExecutionFailed } else { ErrorCode::SandboxUnavailable };
    let hint = if report.exec_failed {
        let granted: Vec<PathBuf> = walls.dirs.iter().map(|(d, _)| d.clone()).collect();
        let program = exec.argv.first().map(std::path::Path::new);
        let gid = nix::unistd::getegid().as_raw();
        let unreachable = program.and_then(|p| program::unreachable_for(p, report.uid, gid));
        match (program.and_then(|p| program::hint(p, &granted, &format!("tool {tool}"))), unreachable) {
            (Some(h), _) => format!(" ({h})"),
            (None, Some((path, why))) => format!(
                " (it runs as uid {} (the workspace's owner, since warden runs as root), and {}: {why}; \
                 give the workspace to the user who may run the program, or make {} reachable to uid {})",
                report.uid,
                path.display(),
                path.display(),
                report.uid
            ),
            (None, None) => " (is the program's directory in fs.read?)".to_string(),
        }
    } else {
        String::new()
    };
    CallError::new(code, format!("{tool}: {why}{hint}"))
}

/// How a call's program ended, for [`limit_reached`].
pub(super) struct Ends {
    pub(super) elapsed: Duration,
    pub(super) cpu: Duration,
    pub(super) exit_code: Option<i32>,
    pub(super) signal: Option<i32>,
    pub(super) timed_out: bool,
    pub(super) hit_pids_max: bool,
    pub(super) hit_memory_max: bool,
}

/// The limit a call's program ran into, if that is how it ended: the timeout,
/// CPU time, memory, file size or process count, each naming its key.
pub(super) fn limit_reached(tool: &str, limits: &crate::policy::Limits, e: &Ends) -> Option<CallError> {
    if e.timed_out {
        let what = if e.hit_pids_max { " (it also hit limits.processes)" } else { "" };
        return Some(CallError::new(
            if e.hit_pids_max { ErrorCode::LimitExceeded } else { ErrorCode::Timeout },
            format!(
                "{tool}: killed after {:.1}s (limits.timeout = {:?}){what}",
                e.elapsed.as_secs_f64(),
                limits.timeout
            ),
        ));
    }
    let cpu_spent = e.signal == Some(libc::SIGKILL) && e.cpu + Duration::from_millis(50) >= limits.cpu;
    match e.signal {
        Some(libc::SIGXCPU) => {
            return Some(CallError::new(
                ErrorCode::LimitExceeded,
                format!("{tool}: used its CPU time (limits.cpu = {:?})", limits.cpu),
            ));
        }
        Some(libc::SIGKILL) if e.hit_memory_max => {
            return Some(CallError::new(
                ErrorCode::LimitExceeded,
                format!(
                    "{tool}: killed for holding more memory than limits.memory ({} bytes; memfd, shared memory and {{tmp}} pages count)",
                    limits.memory
                ),
            ));
        }
        Some(libc::SIGKILL) if cpu_spent => {
            return Some(CallError::new(
                ErrorCode::LimitExceeded,
                format!("{tool}: used its CPU time (limits.cpu = {:?})", limits.cpu),
            ));
        }
        Some(libc::SIGXFSZ) => {
            return Some(CallError::new(
                ErrorCode::LimitExceeded,
                format!("{tool}: wrote a file past limits.file_size ({} bytes)", limits.file_size),
            ));
        }
        _ => {}
    }
    if e.hit_memory_max && e.exit_code != Some(0) {
        return Some(CallError::new(
            ErrorCode::LimitExceeded,
            format!(
                "{tool}: a process of its tree was killed for holding more memory than limits.memory ({} bytes; memfd, shared memory and {{tmp}} pages count), and it exited {}",
                limits.memory,
                e.exit_code.map_or("by a signal".into(), |c| c.to_string())
            ),
        ));
    }
    if e.hit_pids_max && e.exit_code != Some(0) {
        return Some(CallError::new(
            ErrorCode::LimitExceeded,
            format!("{tool}: its process tree hit limits.processes = {}", limits.processes),
        ));
    }
    None
}

/// What confines file metadata, for [`SandboxReport::metadata`].
pub(super) fn metadata_kind(view: bool, uid0: bool) -> &'static str {
    match (view, uid0) {
        (true, _) => "mount-view",
        (false, true) => "seccomp-uid0",
        (false, false) => "none",
    }
}

/// How a call reaches the network, for [`SandboxReport::egress`].
pub(super) fn egress_kind(network_namespace: bool, grants: bool) -> &'static str {
    match (network_namespace, grants) {
        (true, true) => "proxy",
        (true, false) => "loopback",
        (false, true) => "landlock-ports",
        (false, false) => "none",
    }
}

/// The static name of a namespace the helper reports, for [`SandboxReport::namespaces`].
pub(super) fn namespace_name(name: &str) -> Option<&'static str> {
    ["user", "mount", "pid", "ipc", "net"].into_iter().find(|n| *n == name)
}

/// The `protected` result field: a write the call's read-only paths refused
/// (the program exited non-zero with `EROFS` or `EBUSY` in its stderr), said so
/// the model can act on it; at most 20 paths.
/// What a failed call's message adds about its layer: the changes warden refused.
pub(super) fn layer_note(applied: &crate::layer::Applied) -> String {
    if applied.refused.is_empty() {
        return String::new();
    }
    let shown: Vec<String> =
        applied.refused.iter().take(5).map(|(p, why)| format!("{} ({why})", p.display())).collect();
    format!(
        "; warden refused {} of the changes it made: {}{}",
        applied.refused.len(),
        shown.join("; "),
        if applied.refused.len() > 5 { "; …" } else { "" }
    )
}

pub(super) fn protected_hint(walls: &Walls, exit_code: Option<i32>, stderr: &[u8]) -> Option<String> {
    if exit_code == Some(0) {
        return None;
    }
    let text = String::from_utf8_lossy(stderr);
    let exdev = text.contains("Invalid cross-device link")
        .then_some("a directory that was there before the call cannot be renamed inside it (its layer: EXDEV); mv copies instead, git mv of a directory fails");
    if !text.contains("Read-only file system") && !text.contains("Device or resource busy") {
        return exdev.map(str::to_string);
    }
    // The policy's own first, then the built-in ones; only what is mounted (what
    // does not exist is refused when the call's layer is applied instead).
    let ro: Vec<&crate::protect::PathRule> = walls
        .protect
        .by_weight()
        .into_iter()
        .filter(|r| r.deny == crate::protect::Deny::Write && r.kind != crate::protect::Kind::Absent)
        .collect();
    if ro.is_empty() {
        return exdev.map(str::to_string);
    }
    let mut paths: Vec<String> = ro.iter().take(20).map(|r| r.path.display().to_string()).collect();
    if ro.len() > 20 {
        paths.push(format!("and {} more", ro.len() - 20));
    }
    let mut why: Vec<&str> = ro.iter().map(|r| r.why.as_str()).collect();
    why.sort_unstable();
    why.dedup();
    why.truncate(5);
    let mut hint = format!(
        "these paths are read-only in warden's sandbox ({}): {}; writes there fail with EROFS, removing or \
         renaming them with EBUSY",
        why.join("; "),
        paths.join(", ")
    );
    if let Some(x) = exdev {
        hint.push_str("; ");
        hint.push_str(x);
    }
    Some(hint)
}

/// What bounds the memory a call holds, for [`SandboxReport::memory`].
pub(super) fn memory_bound(cgroup: bool) -> &'static str {
    if cgroup { "cgroup" } else { "rlimit" }
}

/// How a call reaches SysV IPC and message queues, for [`SandboxReport::ipc`].
pub(super) fn ipc_kind(namespace: bool, sysv_ipc: bool) -> &'static str {
    match (namespace, sysv_ipc) {
        (true, _) => "namespace",
        (false, true) => "shared",
        (false, false) => "refused",
    }
}

/// A wait status as the result's `exit_code` and `signal`.
pub(super) fn exit_of(status: i32) -> (Option<i32>, Option<i32>) {
    if libc::WIFEXITED(status) {
        (Some(libc::WEXITSTATUS(status)), None)
    } else if libc::WIFSIGNALED(status) {
        (None, Some(libc::WTERMSIG(status)))
    } else {
        (None, None)
    }
}

/// What a result says to the model about a failure the walls may explain: a
/// protected path it met (`protected`), and for a failed program, the grants
/// its errors point at (`hints`).
pub(super) fn add_hints(value: &mut Value, tool: &str, walls: &Walls, exit_code: Option<i32>, stderr_tail: &[u8]) {
    if let Some(hint) = protected_hint(walls, exit_code, stderr_tail) {
        value["protected"] = json!(hint);
    }
    if exit_code != Some(0) {
        let protected: Vec<PathBuf> = walls.protect.rules.iter().map(|r| r.path.clone()).collect();
        let grants = crate::hints::Grants {
            tool,
            dirs: &walls.dirs,
            links: &walls.links,
            net: !walls.net.is_empty(),
            protected: &protected,
        };
        let hints = crate::hints::from_stderr(&grants, &String::from_utf8_lossy(stderr_tail));
        if !hints.is_empty() {
            value["hints"] = json!(hints);
        }
    }
}

/// The layers a best-effort call really got, in its result (which layers hold
/// varies by host there).
pub(super) fn best_effort_sandbox(report: &HelperReport, confirmed: &SandboxReport, memory_cgroup: bool) -> Value {
    json!({"landlock_abi": report.landlock_abi, "seccomp": report.seccomp, "rlimits": report.rlimits, "uid": report.uid, "pids_cgroup": report.cgroup, "tmp_quota": report.tmp_quota, "ipc_namespace": report.ipc_namespace, "memory_cgroup": memory_cgroup, "namespaces": confirmed.namespaces, "proc": confirmed.proc, "shm": report.shm_private, "paths": confirmed.paths})
}
