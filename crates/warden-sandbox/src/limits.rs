//! Resource limits and capabilities: what bounds each process of a tool's
//! tree and strips root of its privileges (the host's cgroup bounds the tree).
//!
//! Each `apply_*` changes the calling process; the helper calls them in the
//! order `run_main` documents.

use nix::sys::resource::{Resource, setrlimit};

use crate::spec::RlimitSpec;

/// Sets CPU, AS, NPROC (when given), NOFILE, FSIZE, and CORE = 0.
pub fn apply_rlimits(l: &RlimitSpec) -> Result<(), String> {
    let set = |r: Resource, v: u64, what: &str| setrlimit(r, v, v).map_err(|e| format!("cannot set {what}: {e}"));
    set(Resource::RLIMIT_CORE, 0, "RLIMIT_CORE")?;
    // The soft limit sends SIGXCPU (reported as LIMIT_EXCEEDED); the hard one, a second later, SIGKILL.
    let cpu = l.cpu_secs.max(1);
    setrlimit(Resource::RLIMIT_CPU, cpu, cpu + 1).map_err(|e| format!("cannot set RLIMIT_CPU: {e}"))?;
    set(Resource::RLIMIT_AS, l.address_space, "RLIMIT_AS")?;
    set(Resource::RLIMIT_NOFILE, l.open_files, "RLIMIT_NOFILE")?;
    set(Resource::RLIMIT_FSIZE, l.file_size, "RLIMIT_FSIZE")?;
    if let Some(n) = l.processes {
        set(Resource::RLIMIT_NPROC, n, "RLIMIT_NPROC")?;
    }
    Ok(())
}

/// Makes the calling process (and what it execs and forks) the OOM killer's
/// first choice: `oom_score_adj` = 1000, which any process may raise for itself.
pub fn apply_oom_first() -> Result<(), String> {
    std::fs::write("/proc/self/oom_score_adj", "1000").map_err(|e| format!("cannot set oom_score_adj: {e}"))
}

/// How many threads `uid` runs now: RLIMIT_NPROC counts every thread of the uid,
/// not just the tool's.
pub fn processes_of(uid: u32) -> u64 {
    use std::os::unix::fs::MetadataExt;
    // RLIMIT_NPROC counts threads, so count each process's tasks.
    std::fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().bytes().all(|b| b.is_ascii_digit()))
                .filter(|e| e.metadata().is_ok_and(|m| m.uid() == uid))
                .map(|e| std::fs::read_dir(e.path().join("task")).map_or(1, |t| t.count().max(1)) as u64)
                .sum()
        })
        .unwrap_or(0)
}

/// Sets the securebits so that uid 0 gains no capability from exec or setuid,
/// and locks them: needs `CAP_SETPCAP`, so it comes first.
pub fn apply_securebits() -> Result<(), String> {
    const SECBIT_NOROOT: libc::c_ulong = 1 << 0;
    const SECBIT_NOROOT_LOCKED: libc::c_ulong = 1 << 1;
    const SECBIT_NO_SETUID_FIXUP: libc::c_ulong = 1 << 2;
    const SECBIT_NO_SETUID_FIXUP_LOCKED: libc::c_ulong = 1 << 3;
    const SECBIT_KEEP_CAPS_LOCKED: libc::c_ulong = 1 << 5;
    const SECBIT_NO_CAP_AMBIENT_RAISE: libc::c_ulong = 1 << 6;
    const SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED: libc::c_ulong = 1 << 7;
    let bits = SECBIT_NOROOT
        | SECBIT_NOROOT_LOCKED
        | SECBIT_NO_SETUID_FIXUP
        | SECBIT_NO_SETUID_FIXUP_LOCKED
        | SECBIT_KEEP_CAPS_LOCKED
        | SECBIT_NO_CAP_AMBIENT_RAISE
        | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
    // SAFETY: PR_SET_SECUREBITS takes an integer bit set and no pointers.
    #[allow(unsafe_code)]
    let r = unsafe {
        libc::prctl(libc::PR_SET_SECUREBITS, bits, 0 as libc::c_ulong, 0 as libc::c_ulong, 0 as libc::c_ulong)
    };
    if r != 0 {
        return Err(format!("cannot lock the securebits: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Empties every capability set: bounding first (it needs `CAP_SETPCAP`), then
/// ambient, inheritable, effective and permitted.
pub fn apply_drop_capabilities() -> Result<(), String> {
    use caps::CapSet;
    for cap in caps::all() {
        caps::drop(None, CapSet::Bounding, cap).map_err(|e| format!("cannot drop {cap} from the bounding set: {e}"))?;
    }
    for set in [CapSet::Ambient, CapSet::Inheritable, CapSet::Effective, CapSet::Permitted] {
        caps::clear(None, set).map_err(|e| format!("cannot clear the {set:?} capabilities: {e}"))?;
    }
    Ok(())
}

/// Becomes `uid`/`gid` with no supplementary groups.
pub fn apply_identity(uid: u32, gid: u32) -> Result<(), String> {
    use nix::unistd::{Gid, Uid, setgroups, setresgid, setresuid};
    setgroups(&[]).map_err(|e| format!("cannot clear supplementary groups: {e}"))?;
    let g = Gid::from_raw(gid);
    setresgid(g, g, g).map_err(|e| format!("cannot become gid {gid}: {e}"))?;
    let u = Uid::from_raw(uid);
    setresuid(u, u, u).map_err(|e| format!("cannot become uid {uid}: {e}"))?;
    Ok(())
}

/// Makes the calling process ignore `SIGXFSZ`, so a write past `RLIMIT_FSIZE`
/// fails with `EFBIG` (which the audit log reports) instead of killing warden
/// between a tool's run and its record. Process-wide; the sandbox helper
/// restores the default before it execs a tool.
pub fn ignore_sigxfsz() {
    use nix::sys::signal::{SigHandler, Signal, signal};
    // SAFETY: SIG_IGN installs no handler code; it only changes the disposition.
    #[allow(unsafe_code)]
    if let Err(e) = unsafe { signal(Signal::SIGXFSZ, SigHandler::SigIgn) } {
        tracing::warn!("cannot ignore SIGXFSZ: {e}");
    }
}
