//! The empty directories a process call mounts over its absent protected and
//! denied paths, so there is something to bind read-only (a mount needs a
//! target; nothing else stops a file from being created under a name).
//!
//! Each is created on the host while a call needs it, marked with the extended
//! attribute [`PLACEHOLDER_XATTR`], held with a shared `flock` by every warden
//! process that mounts it, and removed (only if still empty) by the last one to
//! let go: a call never removes one another call still covers (which would
//! detach that call's mount).
//!
//! Within one warden process the calls share them: a placeholder is made once
//! for the calls that overlap, and, when [`linger`] is set (`serve` sets it),
//! kept that long after the last of them ended, so that calls that follow one
//! another (a test suite run through `serve`) do not each make and remove
//! fifteen directories on the workspace's file system. A placeholder is reused
//! only while it is still the directory under its name (checked by inode).
//! [`release_idle`] removes the idle ones at once (`serve` does as it ends).

use std::collections::HashMap;
use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::{Condvar, LazyLock, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use super::protect::{Kind, PathRule};

/// How long `serve` keeps a placeholder no call uses: long enough for the next
/// of a run of calls, short enough that an empty `.git` seldom outlives them.
pub const SERVE_LINGER: Duration = Duration::from_millis(200);

/// Marks a directory as a warden placeholder.
pub const PLACEHOLDER_XATTR: &str = "user.warden.placeholder";

/// One placeholder this process holds.
#[derive(Debug)]
struct Held {
    /// The directory, held with a shared `flock`.
    fd: OwnedFd,
    /// Its parent: it is removed through this descriptor, never by a path a
    /// tool could have redirected.
    parent: OwnedFd,
    /// Its name in the parent.
    name: OsString,
    /// Calls of this process that mount it now.
    users: usize,
    /// When the last of them ended (none uses it now).
    idle_since: Option<Instant>,
    /// Which placeholder under this path it is (a later one gets another).
    id: u64,
}

#[derive(Debug, Default)]
struct Registry {
    held: HashMap<PathBuf, Held>,
    /// The last [`Held::id`] given.
    ids: u64,
    /// Placeholders no longer under their name (removed or replaced by someone
    /// else) that calls still mount, by id: their lock is kept until the last
    /// of those calls ends, so no other process removes what they mount over.
    retired: HashMap<u64, Held>,
    /// How long an unused placeholder is kept (zero: removed at once).
    linger: Duration,
    /// The thread that removes placeholders idle for `linger` runs.
    reaper: bool,
}

/// The placeholders of this process. Its lock also serialises making and
/// removing them within the process (`flock` orders them against others).
static REGISTRY: LazyLock<Mutex<Registry>> = LazyLock::new(Mutex::default);
/// Wakes the reaper when a placeholder becomes idle.
static IDLE: Condvar = Condvar::new();

fn registry() -> MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Keeps a placeholder `for_how_long` after the last call that used it ended
/// (zero: removes it with that call, the default).
pub fn linger(for_how_long: Duration) {
    let mut reg = registry();
    reg.linger = for_how_long;
    if !for_how_long.is_zero() && !reg.reaper {
        let spawned = std::thread::Builder::new().name("warden-placeholders".into()).spawn(reap);
        // Without the reaper nothing would remove idle ones: keep none.
        match spawned {
            Ok(_) => reg.reaper = true,
            Err(_) => reg.linger = Duration::ZERO,
        }
    }
}

/// Removes every placeholder no call uses now, and keeps none from then on.
pub fn release_idle() {
    let mut reg = registry();
    reg.linger = Duration::ZERO;
    let idle: Vec<PathBuf> = reg.held.iter().filter(|(_, h)| h.users == 0).map(|(p, _)| p.clone()).collect();
    for path in idle {
        if let Some(h) = reg.held.remove(&path) {
            remove(h);
        }
    }
}

/// Removes the placeholders idle for `linger`, forever.
fn reap() {
    let mut reg = registry();
    loop {
        let now = Instant::now();
        let linger = reg.linger;
        let due: Vec<PathBuf> = reg
            .held
            .iter()
            .filter(|(_, h)| h.users == 0 && h.idle_since.is_some_and(|t| now.duration_since(t) >= linger))
            .map(|(p, _)| p.clone())
            .collect();
        for path in due {
            if let Some(h) = reg.held.remove(&path) {
                remove(h);
            }
        }
        let next = reg.held.values().filter_map(|h| h.idle_since).min();
        reg = match next {
            Some(t) => {
                IDLE.wait_timeout(reg, (t + linger).saturating_duration_since(now))
                    .unwrap_or_else(PoisonError::into_inner)
                    .0
            }
            None => IDLE.wait(reg).unwrap_or_else(PoisonError::into_inner),
        };
    }
}

/// The placeholders one call mounts over, by path; let go of when dropped.
#[derive(Debug, Default)]
pub struct Placeholders {
    paths: Vec<(PathBuf, u64)>,
}

/// Whether `path`, no link followed, is still `h`'s directory (not removed,
/// replaced, or moved away with a parent); an error for anything else that
/// stops the check (a tool can make its workspace unsearchable), so that a
/// call fails closed rather than mounting over something it does not hold.
fn at_path(h: &Held, path: &std::path::Path) -> Result<bool, String> {
    use rustix::fs::{Mode, OFlags, ResolveFlags, openat2};
    let held = rustix::fs::fstat(&h.fd).map_err(|e| format!("cannot check the placeholder {}: {e}", path.display()))?;
    if held.st_nlink == 0 {
        return Ok(false);
    }
    let flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    match openat2(rustix::fs::CWD, path, flags, Mode::empty(), ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS)
    {
        Ok(fd) => {
            let now = rustix::fs::fstat(&fd).map_err(|e| format!("cannot check {}: {e}", path.display()))?;
            Ok(now.st_ino == held.st_ino && now.st_dev == held.st_dev)
        }
        Err(rustix::io::Errno::NOENT) => Ok(false),
        Err(e) => Err(format!("cannot check the placeholder {}: {e}", path.display())),
    }
}

/// Whether `h` is still the directory under its name in its parent (the
/// question before removing it through that parent).
fn still_named(h: &Held) -> bool {
    let nofollow = rustix::fs::AtFlags::SYMLINK_NOFOLLOW;
    match (rustix::fs::fstat(&h.fd), rustix::fs::statat(&h.parent, &h.name, nofollow)) {
        (Ok(a), Ok(b)) => a.st_ino == b.st_ino && a.st_dev == b.st_dev && a.st_nlink > 0,
        _ => false,
    }
}

impl Placeholders {
    /// Makes every [`Kind::Absent`] rule's path exist as an empty directory and
    /// holds it (one this process already holds is shared).
    pub fn acquire(rules: &[PathRule]) -> Result<Placeholders, String> {
        // Declared before the registry's guard, so that on an error part-way
        // the guard is dropped first and then what was taken is let go of (its Drop).
        let mut out = Placeholders::default();
        let mut reg = registry();
        for rule in rules.iter().filter(|r| r.kind == Kind::Absent) {
            if let Some(h) = reg.held.get_mut(&rule.path) {
                if at_path(h, &rule.path)? {
                    h.users += 1;
                    h.idle_since = None;
                    out.paths.push((rule.path.clone(), h.id));
                    continue;
                }
                // Removed, replaced or moved by someone else: a new one is made.
                // The calls that mount the old one keep it held until they end.
                if let Some(old) = reg.held.remove(&rule.path) {
                    if old.users == 0 {
                        remove(old);
                    } else {
                        reg.retired.insert(old.id, old);
                    }
                }
            }
            let Some(mut held) = make(rule)? else { continue };
            reg.ids += 1;
            held.id = reg.ids;
            out.paths.push((rule.path.clone(), held.id));
            reg.held.insert(rule.path.clone(), held);
        }
        Ok(out)
    }
}

/// Makes (or finds, left by another warden process or a call of another) the
/// placeholder at `rule.path`, and holds it; `None` if its parent is absent too.
fn make(rule: &PathRule) -> Result<Option<Held>, String> {
    use rustix::fs::{AtFlags, Mode, OFlags, ResolveFlags, openat2};
    let (Some(parent), Some(name)) = (rule.path.parent(), rule.path.file_name()) else { return Ok(None) };
    let resolve = ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
    let mut dir = match openat2(
        rustix::fs::CWD,
        parent,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
        resolve,
    ) {
        Ok(d) => d,
        // Its parent is absent too: a placeholder would need a tree; the
        // runtime refuses the rule (or covers the nearest existing name).
        Err(rustix::io::Errno::NOENT) => return Ok(None),
        Err(e) => return Err(format!("cannot open {} to cover {}: {e}", parent.display(), rule.path.display())),
    };
    for _ in 0..20 {
        // Made under a temporary name, marked, then renamed into place
        // (never over anything): no call ever sees it unmarked.
        let mut tmp_name = OsString::from(".warden-placeholder-");
        let mut rnd = [0u8; 8];
        let _ = getrandom::fill(&mut rnd);
        tmp_name.push(hex::encode(rnd));
        if rustix::fs::mkdirat(&dir, tmp_name.as_os_str(), Mode::from_raw_mode(0o700)).is_ok() {
            if let Ok(t) = openat2(&dir, tmp_name.as_os_str(), OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty(), resolve)
            {
                let _ = rustix::fs::fsetxattr(&t, PLACEHOLDER_XATTR, b"1", rustix::fs::XattrFlags::empty());
            }
            let placed =
                rustix::fs::renameat_with(&dir, tmp_name.as_os_str(), &dir, name, rustix::fs::RenameFlags::NOREPLACE);
            if placed.is_err() {
                let _ = rustix::fs::unlinkat(&dir, tmp_name.as_os_str(), AtFlags::REMOVEDIR);
            }
        }
        let fd = match openat2(&dir, name, OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW, Mode::empty(), resolve)
        {
            Ok(fd) => fd,
            Err(rustix::io::Errno::NOENT) => continue,
            // A link appeared under the name: the runtime refuses to mount through it.
            Err(e) => return Err(format!("cannot open the placeholder {}: {e}", rule.path.display())),
        };
        // One left by a warden that died is held like any other, and
        // removed by the last call to let go of it. Never waited on for long
        // (the registry is locked meanwhile): an exclusive lock is another
        // process removing it, for an instant.
        let mut locked = false;
        for _ in 0..100 {
            match rustix::fs::flock(&fd, rustix::fs::FlockOperation::NonBlockingLockShared) {
                Ok(()) => {
                    locked = true;
                    break;
                }
                Err(rustix::io::Errno::WOULDBLOCK) => std::thread::sleep(Duration::from_millis(10)),
                Err(e) => return Err(format!("cannot lock the placeholder {}: {e}", rule.path.display())),
            }
        }
        if !locked {
            return Err(format!(
                "cannot lock the placeholder {}: another process has held it exclusively for a second",
                rule.path.display()
            ));
        }
        let held = Held { fd, parent: dir, name: name.to_os_string(), users: 1, idle_since: None, id: 0 };
        // Still the same directory under that path (not removed and made again meanwhile)?
        if at_path(&held, &rule.path)? {
            return Ok(Some(held));
        }
        dir = held.parent;
    }
    Err(format!("cannot hold a placeholder at {}: it keeps changing", rule.path.display()))
}

/// Whether the directory open at `fd` carries warden's placeholder mark.
pub fn is_placeholder(fd: &OwnedFd) -> bool {
    let mut mark = [0u8; 1];
    rustix::fs::fgetxattr(fd, PLACEHOLDER_XATTR, &mut mark).is_ok()
}

/// Lets go of `h`, removing it if this process was its last holder, it is
/// still the directory under its name, and it is empty.
fn remove(h: Held) {
    use rustix::fs::FlockOperation::{NonBlockingLockExclusive, Unlock};
    if !is_placeholder(&h.fd) {
        return;
    }
    // The last holder removes it. Two processes letting go together would each
    // see the other's shared lock: each lets go of its own first and tries
    // once more, so the later of the two succeeds.
    let mut last = rustix::fs::flock(&h.fd, NonBlockingLockExclusive).is_ok();
    if !last {
        let _ = rustix::fs::flock(&h.fd, Unlock);
        last = rustix::fs::flock(&h.fd, NonBlockingLockExclusive).is_ok();
    }
    // Still the directory under that name (not one made anew meanwhile,
    // which another may hold); only an empty one goes.
    if last && still_named(&h) {
        let _ = rustix::fs::unlinkat(&h.parent, &h.name, rustix::fs::AtFlags::REMOVEDIR);
    }
}

impl Drop for Placeholders {
    fn drop(&mut self) {
        let mut reg = registry();
        let linger = reg.linger;
        for (path, id) in self.paths.drain(..) {
            if let Some(h) = reg.retired.get_mut(&id) {
                h.users = h.users.saturating_sub(1);
                if h.users == 0
                    && let Some(h) = reg.retired.remove(&id)
                {
                    remove(h);
                }
                continue;
            }
            let Some(h) = reg.held.get_mut(&path).filter(|h| h.id == id) else { continue };
            h.users = h.users.saturating_sub(1);
            if h.users > 0 {
                continue;
            }
            if linger.is_zero() {
                if let Some(h) = reg.held.remove(&path) {
                    remove(h);
                }
            } else {
                h.idle_since = Some(Instant::now());
                IDLE.notify_one();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::protect::Deny;
    use std::os::unix::fs::MetadataExt;
    use std::path::Path;

    fn rule(ws: &Path, name: &str) -> PathRule {
        PathRule { path: ws.join(name), deny: Deny::Write, kind: Kind::Absent, root: ws.into(), why: "test".into() }
    }

    fn ino(path: &Path) -> Option<u64> {
        std::fs::symlink_metadata(path).ok().map(|m| m.ino())
    }

    /// One test (the registry is the process's): sharing, lingering, release,
    /// a placeholder replaced by a real directory meanwhile, and no lingering.
    #[test]
    fn calls_share_placeholders_which_linger_only_when_asked_and_never_take_a_real_directory() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let ws = dir.path().canonicalize().unwrap_or_else(|e| panic!("{e}"));
        let rules = [rule(&ws, ".git"), rule(&ws, ".envrc")];
        linger(Duration::from_secs(600));
        let a = Placeholders::acquire(&rules).unwrap_or_else(|e| panic!("{e}"));
        let first = ino(&ws.join(".git")).unwrap_or_else(|| panic!("no placeholder at .git"));
        let b = Placeholders::acquire(&rules).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(ino(&ws.join(".git")), Some(first), "overlapping calls share one");
        drop((a, b));
        assert_eq!(ino(&ws.join(".git")), Some(first), "kept after the last call, while it lingers");
        let c = Placeholders::acquire(&rules).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(ino(&ws.join(".git")), Some(first), "the next call reuses it");
        drop(c);
        // Replaced on the host meanwhile by a real (unmarked) directory: it is the
        // user's now, held while a call needs it and never removed.
        std::fs::remove_dir(ws.join(".git")).unwrap_or_else(|e| panic!("{e}"));
        std::fs::create_dir(ws.join(".git")).unwrap_or_else(|e| panic!("{e}"));
        let real = ino(&ws.join(".git"));
        let d = Placeholders::acquire(&rules).unwrap_or_else(|e| panic!("{e}"));
        drop(d);
        release_idle();
        assert_eq!(ino(&ws.join(".git")), real, "a real directory is never removed");
        assert_eq!(ino(&ws.join(".envrc")), None, "idle placeholders are removed when released");
        // Without lingering (`warden call`), the last call to let go removes it.
        let e = Placeholders::acquire(&rules).unwrap_or_else(|e| panic!("{e}"));
        assert!(ws.join(".envrc").is_dir());
        drop(e);
        assert_eq!(ino(&ws.join(".envrc")), None);
        let left: Vec<_> = std::fs::read_dir(&ws).into_iter().flatten().flatten().map(|e| e.file_name()).collect();
        assert_eq!(left, vec![std::ffi::OsString::from(".git")], "nothing else left behind");

        // Removed on the host while a call mounts it: the next call gets a new
        // one; the old one stays held until its call ends, and its end does
        // not touch the new one.
        let envrc = [rule(&ws, ".envrc")];
        let a = Placeholders::acquire(&envrc).unwrap_or_else(|e| panic!("{e}"));
        std::fs::remove_dir(ws.join(".envrc")).unwrap_or_else(|e| panic!("{e}"));
        let b = Placeholders::acquire(&envrc).unwrap_or_else(|e| panic!("{e}"));
        let second = ino(&ws.join(".envrc"));
        assert!(second.is_some());
        drop(a);
        assert_eq!(ino(&ws.join(".envrc")), second, "the old call's end leaves the new one");
        drop(b);
        assert_eq!(ino(&ws.join(".envrc")), None);

        // An error part-way (a link planted at a protected name) fails the call
        // and lets go of what it took, without deadlocking the registry.
        std::os::unix::fs::symlink("/etc", ws.join(".bashrc")).unwrap_or_else(|e| panic!("{e}"));
        let (tx, rx) = std::sync::mpsc::channel();
        let (ws2, rules2) = (ws.clone(), [rule(&ws, ".envrc"), rule(&ws, ".bashrc")]);
        std::thread::spawn(move || {
            let failed = Placeholders::acquire(&rules2).err();
            let again = Placeholders::acquire(&[rule(&ws2, ".envrc")]).map(drop);
            let _ = tx.send((failed, again));
        });
        let (failed, again) =
            rx.recv_timeout(Duration::from_secs(30)).unwrap_or_else(|_| panic!("acquire deadlocked after an error"));
        assert!(failed.is_some_and(|e| e.contains(".bashrc")), "a link at the name fails the call");
        assert!(again.is_ok(), "{again:?}");
        assert_eq!(ino(&ws.join(".envrc")), None, "the failed call let go of what it took");
    }
}
