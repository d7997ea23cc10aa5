//! The call's cgroups, as root ([`CallCgroup`]): a pids cgroup that bounds the
//! tree's process count (uid 0 is exempt from `RLIMIT_NPROC`) and names its
//! live members for the kill, and a memory cgroup (v2 `memory.max`, or v1 in the
//! `memory` hierarchy beneath warden's own) that bounds what the tree holds in
//! memory, `memfd` files, SysV shared memory and `{tmp}` pages included, at
//! `limits.memory` plus `limits.tmp_size` when `{tmp}` is a tmpfs of its own.
//! docs/security.md has both rows, and what holds where no memory controller is usable.

use std::path::{Path, PathBuf};

/// The cgroups of one call; dropping it kills what is left inside and removes them.
#[derive(Debug)]
pub struct CallCgroup {
    /// The directory with the pids controller.
    pids: PathBuf,
    /// The directory with the memory controller (the same one in v2), when usable.
    memory: Option<PathBuf>,
    /// `v1` or `v2`.
    pub version: &'static str,
}

/// warden's own cgroup in the v1 `memory` hierarchy, from `/proc/self/cgroup`;
/// read once per process (it does not change), not at every call.
fn own_v1_memory_path() -> &'static str {
    static PATH: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PATH.get_or_init(|| own_v1_path("memory").unwrap_or_default())
}

/// warden's own cgroup in the v1 hierarchy that holds `controller`, from `/proc/self/cgroup`.
fn own_v1_path(controller: &str) -> Option<String> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    text.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let (_, names, path) = (parts.next()?, parts.next()?, parts.next()?);
        names.split(',').any(|n| n == controller).then(|| path.trim_start_matches('/').to_string())
    })
}

fn write(dir: &Path, file: &str, value: impl ToString) -> bool {
    std::fs::write(dir.join(file), value.to_string()).is_ok()
}

impl CallCgroup {
    /// Creates `warden-<id>` with `pids.max = max_pids` and, where a memory
    /// controller is usable, a memory limit of `memory_max` bytes without swap;
    /// `None` when no pids controller is usable.
    pub fn create(id: &str, max_pids: u32, memory_max: u64) -> Option<CallCgroup> {
        let name = format!("warden-{id}");
        let v2 = Path::new("/sys/fs/cgroup");
        let controllers = std::fs::read_to_string(v2.join("cgroup.subtree_control")).unwrap_or_default();
        let has = |c: &str| controllers.split_whitespace().any(|x| x == c);
        if has("pids") {
            let dir = v2.join(&name);
            if std::fs::create_dir(&dir).is_ok() {
                if !write(&dir, "pids.max", max_pids) {
                    let _ = std::fs::remove_dir(&dir);
                    return None;
                }
                let memory = (has("memory") && write(&dir, "memory.max", memory_max)).then(|| {
                    // memory.swap.max exists only where swap is accounted.
                    let _ = write(&dir, "memory.swap.max", 0);
                    dir.clone()
                });
                return Some(CallCgroup { pids: dir, memory, version: "v2" });
            }
        }
        let v1 = Path::new("/sys/fs/cgroup/pids");
        if !v1.join("cgroup.procs").exists() {
            return None;
        }
        let dir = v1.join(&name);
        std::fs::create_dir(&dir).ok()?;
        if !write(&dir, "pids.max", max_pids) {
            let _ = std::fs::remove_dir(&dir);
            return None;
        }
        let memory = Self::create_v1_memory(&name, memory_max);
        Some(CallCgroup { pids: dir, memory, version: "v1" })
    }

    fn create_v1_memory(name: &str, memory_max: u64) -> Option<PathBuf> {
        let root = Path::new("/sys/fs/cgroup/memory");
        if !root.join("cgroup.procs").exists() {
            return None;
        }
        let dir = root.join(own_v1_memory_path()).join(name);
        std::fs::create_dir(&dir).ok()?;
        let limited = write(&dir, "memory.limit_in_bytes", memory_max)
            && if dir.join("memory.memsw.limit_in_bytes").exists() {
                write(&dir, "memory.memsw.limit_in_bytes", memory_max)
            } else {
                write(&dir, "memory.swappiness", 0)
            };
        if limited {
            Some(dir)
        } else {
            let _ = std::fs::remove_dir(&dir);
            None
        }
    }

    /// The cgroups' directory name (`warden-<id>`).
    pub fn name(&self) -> String {
        self.pids.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
    }

    /// Whether a memory controller bounds the call.
    pub fn has_memory(&self) -> bool {
        self.memory.is_some()
    }

    /// Moves `pid` into every cgroup of the call.
    pub fn join(&self, pid: u32) -> std::io::Result<()> {
        for procs in self.procs_files() {
            std::fs::write(procs, pid.to_string())?;
        }
        Ok(())
    }

    /// The files a process writes its pid to, to join (one per hierarchy).
    pub fn procs_files(&self) -> Vec<PathBuf> {
        self.files("cgroup.procs")
    }

    /// How many hierarchies hold the call's cgroups.
    pub fn hierarchies(&self) -> usize {
        self.files("cgroup.procs").len()
    }

    /// The files a single-threaded process writes `0` to, to move itself into
    /// every cgroup of the call: in v1 `tasks` (its one thread, and so itself);
    /// in v2, which has no such file for a domain cgroup, `cgroup.procs`.
    ///
    /// Why: moving a whole process (`cgroup.procs`, or another thread's id)
    /// takes the kernel's global `cgroup_threadgroup_rwsem` for writing, which
    /// waits for an RCU grace period: 11–20 ms on a 2-core VM, most of a
    /// `warden call`. A thread moving itself needs no such lock (the kernel
    /// skips it when the thread is the caller): about 60 µs.
    pub fn self_join_files(&self) -> Vec<PathBuf> {
        self.files(if self.version == "v1" { "tasks" } else { "cgroup.procs" })
    }

    fn files(&self, name: &str) -> Vec<PathBuf> {
        let mut v = vec![self.pids.join(name)];
        if let Some(m) = self.memory.as_ref().filter(|m| **m != self.pids) {
            v.push(m.join(name));
        }
        v
    }

    /// Whether the tree hit `pids.max`.
    pub fn hit_max(&self) -> bool {
        event_count(&self.pids.join("pids.events"), "max") > 0
    }

    /// Whether the kernel killed a process of the call for its memory limit.
    pub fn hit_memory_max(&self) -> bool {
        self.memory.as_ref().is_some_and(|m| {
            let file = if self.version == "v2" { "memory.events" } else { "memory.oom_control" };
            event_count(&m.join(file), "oom_kill") > 0
        })
    }

    /// The pids still inside.
    pub fn pids(&self) -> Vec<i32> {
        std::fs::read_to_string(self.pids.join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }
}

/// The number after `key ` in a flat-keyed cgroup file (0 when absent).
fn event_count(file: &Path, key: &str) -> u64 {
    std::fs::read_to_string(file)
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix(' ').and_then(|n| n.trim().parse::<u64>().ok()))
        })
        .unwrap_or(0)
}

impl Drop for CallCgroup {
    fn drop(&mut self) {
        for _ in 0..200 {
            for pid in self.pids() {
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
            }
            if std::fs::remove_dir(&self.pids).is_ok() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        if self.pids.exists() {
            tracing::warn!("cannot remove the cgroup {}", self.pids.display());
        }
        if let Some(m) = self.memory.as_ref().filter(|m| **m != self.pids) {
            for _ in 0..200 {
                if std::fs::remove_dir(m).is_ok() || !m.exists() {
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            tracing::warn!("cannot remove the cgroup {}", m.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_counts_are_read_by_key() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let f = dir.path().join("memory.events");
        std::fs::write(&f, "low 0\nhigh 0\nmax 3\noom 1\noom_kill 2\noom_group_kill 0\n")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(event_count(&f, "oom_kill"), 2);
        assert_eq!(event_count(&f, "max"), 3);
        assert_eq!(event_count(&f, "oom"), 1);
        assert_eq!(event_count(&f, "absent"), 0);
    }
}
