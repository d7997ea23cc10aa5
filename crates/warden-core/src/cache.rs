//! The read-only result cache ([`ResultCache`]; `cache = "60s"` on a tool): a
//! result is served again only to the same tool with the same arguments,
//! within its time to live, while the state of everything it may read is
//! unchanged ([`ResultCache::probe`] hashes the granted trees, at most
//! [`MAX_ENTRIES`] entries); a tool that may write ([`may_write`]) empties it.
//! One cache per warden process, at most [`MAX_RESULTS`] results and
//! [`MAX_BYTES`] bytes. docs/policy.md, "`cache`", has the rules.

#![forbid(unsafe_code)]

use std::collections::{HashMap, VecDeque};
use std::ffi::OsString;
use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use rustix::fs::{
    AtFlags, CWD, Dir, FileType, Mode, OFlags, ResolveFlags, Stat, fstat, fstatfs, openat, openat2, statat,
};
use rustix::io::Errno;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::policy::{GrantPath, SYSTEM_READ, SYSTEM_WRITE, ToolSpec};

/// The most results kept.
pub const MAX_RESULTS: usize = 256;
/// The most bytes of results kept (their JSON).
pub const MAX_BYTES: usize = 32 << 20;
/// The most entries (files, directories, links) a tool's read grants may hold to be cached.
pub const MAX_ENTRIES: usize = 20_000;
/// The most bytes of recently changed files hashed by content for one fingerprint.
const MAX_RACY_BYTES: u64 = 8 << 20;
/// A file modified this recently is hashed by content too.
const RACY: Duration = Duration::from_secs(2);

/// What one call asks of the cache, computed before it runs.
#[derive(Debug, Clone)]
pub struct Probe {
    key: String,
    fingerprint: [u8; 32],
    ttl: Duration,
}

/// A result served from the cache.
#[derive(Debug, Clone)]
pub struct Hit {
    /// The result, as first returned.
    pub value: Value,
    /// Whether it was cut.
    pub truncated: bool,
    /// The call that produced it.
    pub call_id: String,
    /// How old it is.
    pub age: Duration,
}

impl Hit {
    /// How the hit is shown in the result document and the audit record.
    pub fn to_json(&self) -> Value {
        json!({"hit": true, "call_id": self.call_id, "age_ms": self.age.as_millis() as u64})
    }
}

struct Cached {
    value: Value,
    truncated: bool,
    call_id: String,
    stored: Instant,
    ttl: Duration,
    fingerprint: [u8; 32],
    bytes: usize,
}

#[derive(Default)]
struct State {
    results: HashMap<String, Cached>,
    order: VecDeque<String>,
    bytes: usize,
}

/// The results of one warden process.
#[derive(Default)]
pub struct ResultCache {
    state: Mutex<State>,
}

impl std::fmt::Debug for ResultCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResultCache").field("results", &self.lock().results.len()).finish()
    }
}

impl ResultCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// What a call of `spec` with arguments hashing to `args_sha256` may reuse:
    /// `Ok(None)` when the tool has no cache, `Err` (why) when this call cannot
    /// be cached (its trees are too large or unreadable).
    pub fn probe(spec: &ToolSpec, args_sha256: &str) -> Result<Option<Probe>, String> {
        let Some(ttl) = spec.cache else { return Ok(None) };
        let mut key = Sha256::new();
        key.update(spec.name.as_bytes());
        key.update([0]);
        key.update(args_sha256.as_bytes());
        // The variables it is passed are part of what it reads.
        for name in &spec.grants.env_pass {
            key.update([0]);
            key.update(name.as_bytes());
            key.update([1]);
            if let Some(v) = std::env::var_os(name) {
                key.update(v.as_bytes());
            }
        }
        let fingerprint = fingerprint(spec)?;
        Ok(Some(Probe { key: hex::encode(key.finalize()), fingerprint, ttl }))
    }

    /// The cached result for `probe`, if it is fresh and nothing it read changed.
    pub fn lookup(&self, probe: &Probe) -> Option<Hit> {
        let mut state = self.lock();
        let cached = state.results.get(&probe.key)?;
        let age = cached.stored.elapsed();
        if age < cached.ttl && cached.fingerprint == probe.fingerprint {
            return Some(Hit {
                value: cached.value.clone(),
                truncated: cached.truncated,
                call_id: cached.call_id.clone(),
                age,
            });
        }
        // Stale: drop it now.
        state.remove(&probe.key);
        None
    }

    /// Keeps a successful result of the call `probe` was made for.
    pub fn store(&self, probe: Probe, value: &Value, truncated: bool, call_id: &str) {
        let bytes = serde_json::to_vec(value).map(|v| v.len()).unwrap_or(usize::MAX);
        if bytes > MAX_BYTES / 4 {
            return;
        }
        let mut state = self.lock();
        state.remove(&probe.key);
        while state.results.len() >= MAX_RESULTS || state.bytes + bytes > MAX_BYTES {
            let Some(oldest) = state.order.pop_front() else { break };
            if let Some(old) = state.results.remove(&oldest) {
                state.bytes -= old.bytes;
            }
        }
        state.bytes += bytes;
        state.order.push_back(probe.key.clone());
        let cached = Cached {
            value: value.clone(),
            truncated,
            call_id: call_id.to_string(),
            stored: Instant::now(),
            ttl: probe.ttl,
            fingerprint: probe.fingerprint,
            bytes,
        };
        state.results.insert(probe.key, cached);
    }

    /// Forgets everything (a call that may write ran, or is about to).
    pub fn clear(&self) {
        let mut state = self.lock();
        state.results.clear();
        state.order.clear();
        state.bytes = 0;
    }

    /// How many results are kept.
    pub fn len(&self) -> usize {
        self.lock().results.len()
    }

    /// Whether no result is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl State {
    fn remove(&mut self, key: &str) {
        if let Some(old) = self.results.remove(key) {
            self.bytes -= old.bytes;
            self.order.retain(|k| k != key);
        }
    }
}

/// Whether a call of `spec` may change what a cached tool reads: it has a
/// lasting write grant, or it is a server's (a server keeps its own state).
pub fn may_write(spec: &ToolSpec) -> bool {
    spec.grants.lasting_write().is_some() || matches!(spec.runner, crate::policy::Runner::Server(_))
}

/// The state of everything `spec` may read, as one hash.
fn fingerprint(spec: &ToolSpec) -> Result<[u8; 32], String> {
    // `{system}`'s own paths belong to the package manager; a path the policy
    // names itself is walked like any other.
    let system: Vec<&Path> =
        if spec.grants.system { SYSTEM_READ.iter().chain(SYSTEM_WRITE).map(Path::new).collect() } else { Vec::new() };
    let mut roots: Vec<PathBuf> = spec
        .grants
        .paths
        .iter()
        .filter_map(|g| match &g.path {
            GrantPath::Fixed(p) if !system.contains(&p.as_path()) => Some(p.clone()),
            _ => None,
        })
        .collect();
    roots.sort();
    let mut walk = Walk { hash: Sha256::new(), entries: 0, racy_bytes: 0, now: SystemTime::now() };
    for root in &roots {
        walk.tree(root)?;
    }
    Ok(walk.hash.finalize().into())
}

struct Walk {
    hash: Sha256,
    entries: usize,
    racy_bytes: u64,
    now: SystemTime,
}

/// The deepest directory nesting walked (each level holds one descriptor).
const MAX_DEPTH: usize = 128;

/// File systems whose files change without their times changing: a result read
/// there could be stale, so a tool that reads them is not cached.
const VOLATILE_FS: &[(i64, &str)] = &[
    (0x9fa0, "proc"),
    (0x6265_6572, "sysfs"),
    (0x0027_e0eb, "cgroup"),
    (0x6367_7270, "cgroup2"),
    (0x6462_6720, "debugfs"),
    (0x7472_6163, "tracefs"),
    (0x7363_6673, "securityfs"),
    (0xcafe_4a11, "bpf"),
];

/// One directory being walked: its descriptor, its path (for the hash and for
/// messages only: nothing is opened by path) and the names left to look at.
struct Frame {
    fd: OwnedFd,
    path: PathBuf,
    names: std::vec::IntoIter<OsString>,
}

impl Walk {
    /// Hashes `root` and everything under it by descriptor: the root is opened
    /// with no symbolic link anywhere on its path, and each entry below it
    /// relative to its directory's descriptor, never following a link, so a
    /// tool that swaps a directory for a link while warden walks cannot send
    /// the walk anywhere else (a host-side read of paths a tool controls).
    fn tree(&mut self, root: &Path) -> Result<(), String> {
        let how = ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
        let fd = match openat2(CWD, root, OFlags::PATH | OFlags::CLOEXEC, Mode::empty(), how) {
            Ok(fd) => fd,
            // A path that does not exist is a state too.
            Err(Errno::NOENT) => {
                self.hash.update(root.as_os_str().as_bytes());
                self.hash.update(b"\0missing\0");
                return Ok(());
            }
            Err(Errno::LOOP | Errno::XDEV) => {
                return Err(format!("its grant {} passes through a symbolic link", root.display()));
            }
            Err(e) => return Err(format!("cannot open {}: {e}", root.display())),
        };
        let st = fstat(&fd).map_err(|e| format!("cannot look at {}: {e}", root.display()))?;
        self.entry(root, &st)?;
        match FileType::from_raw_mode(st.st_mode) {
            FileType::Directory => {
                let dir = openat(&fd, ".", OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
                    .map_err(|e| format!("cannot open {}: {e}", root.display()))?;
                let frame = self.frame(dir, root.to_path_buf())?;
                self.walk(frame)
            }
            FileType::RegularFile if self.racy(&st) => {
                // Reopened through the O_PATH descriptor: the very file looked at.
                let file = openat(
                    CWD,
                    format!("/proc/self/fd/{}", fd.as_raw_fd()).as_str(),
                    OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
                    Mode::empty(),
                )
                .map_err(|e| format!("cannot read {}: {e}", root.display()))?;
                self.contents(file, root, st.st_size as u64)
            }
            _ => Ok(()),
        }
    }

    /// Walks the directories below `first`, depth first, in name order.
    fn walk(&mut self, first: Frame) -> Result<(), String> {
        let mut stack = vec![first];
        loop {
            let depth = stack.len();
            let Some(top) = stack.last_mut() else { break };
            let Some(name) = top.names.next() else {
                stack.pop();
                continue;
            };
            let path = top.path.join(&name);
            let st = match statat(&top.fd, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => st,
                Err(Errno::NOENT) => {
                    self.hash.update(path.as_os_str().as_bytes());
                    self.hash.update(b"\0missing\0");
                    continue;
                }
                Err(e) => return Err(format!("cannot look at {}: {e}", path.display())),
            };
            self.entry(&path, &st)?;
            match FileType::from_raw_mode(st.st_mode) {
                FileType::Directory => {
                    if depth >= MAX_DEPTH {
                        return Err(format!("{} is nested more than {MAX_DEPTH} directories deep", path.display()));
                    }
                    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
                    let dir = openat(&top.fd, name.as_os_str(), flags, Mode::empty())
                        .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
                    let frame = self.frame(dir, path)?;
                    stack.push(frame);
                }
                FileType::RegularFile if self.racy(&st) => {
                    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
                    let file = openat(&top.fd, name.as_os_str(), flags, Mode::empty())
                        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
                    self.contents(file, &path, st.st_size as u64)?;
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// A directory to walk: refused on a volatile file system; its names sorted,
    /// never more than the bound in memory however large it is.
    #[allow(clippy::unnecessary_cast)]
    fn frame(&mut self, fd: OwnedFd, path: PathBuf) -> Result<Frame, String> {
        if let Ok(fs) = fstatfs(&fd)
            && let Some((_, kind)) = VOLATILE_FS.iter().find(|(magic, _)| *magic == fs.f_type as i64)
        {
            return Err(format!(
                "{} is on {kind}, whose files change without their times changing: a result could be stale",
                path.display()
            ));
        }
        let dir = Dir::read_from(&fd).map_err(|e| format!("cannot list {}: {e}", path.display()))?;
        let mut names: Vec<OsString> = Vec::new();
        for entry in dir {
            let entry = entry.map_err(|e| format!("cannot list {}: {e}", path.display()))?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            if names.len() >= MAX_ENTRIES {
                return Err(format!("{} holds more than {MAX_ENTRIES} entries", path.display()));
            }
            names.push(OsString::from_vec(name.to_vec()));
        }
        names.sort();
        Ok(Frame { fd, path, names: names.into_iter() })
    }

    /// Hashes one entry's path and state, counting it against the bound.
    // The stat fields' types differ between architectures.
    #[allow(clippy::unnecessary_cast)]
    fn entry(&mut self, path: &Path, st: &Stat) -> Result<(), String> {
        self.entries += 1;
        if self.entries > MAX_ENTRIES {
            return Err(format!(
                "its read grants hold more than {MAX_ENTRIES} entries (at {}), too many to watch for changes",
                path.display()
            ));
        }
        self.hash.update(path.as_os_str().as_bytes());
        self.hash.update([0]);
        for n in [
            st.st_dev,
            st.st_ino,
            u64::from(st.st_mode),
            st.st_size as u64,
            st.st_mtime as u64,
            st.st_mtime_nsec as u64,
            st.st_ctime as u64,
            st.st_ctime_nsec as u64,
        ] {
            self.hash.update(n.to_le_bytes());
        }
        Ok(())
    }

    /// Whether a file was modified too recently for its times to tell a change.
    #[allow(clippy::unnecessary_cast)]
    fn racy(&self, st: &Stat) -> bool {
        let modified = SystemTime::UNIX_EPOCH
            + Duration::from_secs(st.st_mtime.max(0) as u64)
            + Duration::from_nanos(st.st_mtime_nsec as u64);
        self.now.duration_since(modified).map_or(true, |d| d < RACY)
    }

    /// Hashes the contents of a file changed too recently for its times to tell.
    fn contents(&mut self, file: OwnedFd, path: &Path, size: u64) -> Result<(), String> {
        self.racy_bytes += size;
        if self.racy_bytes > MAX_RACY_BYTES {
            return Err(format!(
                "more than {} MiB of its files changed in the last {}s (last {}): too much to compare",
                MAX_RACY_BYTES >> 20,
                RACY.as_secs(),
                path.display()
            ));
        }
        // The tool may have swapped the file for a FIFO since it was looked at:
        // read only a regular file (opened non-blocking, so a FIFO never hangs the open).
        if !fstat(&file).is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::RegularFile) {
            return Err(format!("{} is no longer a regular file", path.display()));
        }
        let mut buf = Vec::new();
        std::fs::File::from(file)
            .take(MAX_RACY_BYTES + 1)
            .read_to_end(&mut buf)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        self.hash.update(b"\0contents\0");
        self.hash.update(Sha256::digest(&buf));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn probe(key: &str, print: u8, ttl: Duration) -> Probe {
        Probe { key: key.into(), fingerprint: [print; 32], ttl }
    }

    #[test]
    fn a_result_is_served_only_while_fresh_and_unchanged() {
        let cache = ResultCache::default();
        cache.store(probe("k", 1, Duration::from_secs(60)), &json!({"a": 1}), false, "c-1");
        let hit = cache.lookup(&probe("k", 1, Duration::from_secs(60))).expect("a hit");
        assert_eq!(hit.value, json!({"a": 1}));
        assert_eq!(hit.call_id, "c-1");
        // The trees changed: a miss, and the stale result is dropped.
        assert!(cache.lookup(&probe("k", 2, Duration::from_secs(60))).is_none());
        assert!(cache.is_empty());
        cache.store(probe("k", 1, Duration::ZERO), &json!(1), false, "c-2");
        assert!(cache.lookup(&probe("k", 1, Duration::ZERO)).is_none(), "expired");
    }

    #[test]
    fn the_cache_is_bounded_and_cleared() {
        let cache = ResultCache::default();
        for i in 0..MAX_RESULTS + 10 {
            cache.store(probe(&i.to_string(), 0, Duration::from_secs(60)), &json!(i), false, "c");
        }
        assert_eq!(cache.len(), MAX_RESULTS);
        assert!(cache.lookup(&probe("0", 0, Duration::from_secs(60))).is_none(), "the oldest went first");
        cache.clear();
        assert!(cache.is_empty());
    }

    #[test]
    fn a_fingerprint_sees_a_same_size_rewrite_and_a_new_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.txt");
        std::fs::write(&file, "aaaa").unwrap();
        let walk = |_: ()| {
            let mut w = Walk { hash: Sha256::new(), entries: 0, racy_bytes: 0, now: SystemTime::now() };
            w.tree(dir.path()).unwrap();
            <[u8; 32]>::from(w.hash.finalize())
        };
        let first = walk(());
        assert_eq!(first, walk(()), "nothing changed");
        std::fs::write(&file, "bbbb").unwrap();
        let second = walk(());
        assert_ne!(first, second, "same size, same second");
        std::fs::write(dir.path().join("b.txt"), "").unwrap();
        assert_ne!(second, walk(()), "a new file");
    }

    /// The walk is a host-side read of paths a tool may control: a FIFO, a
    /// link to a secret and a link loop are looked at, never opened or followed.
    #[test]
    fn a_fingerprint_opens_no_fifo_and_follows_no_link() {
        let dir = tempfile::tempdir().unwrap();
        nix::unistd::mkfifo(&dir.path().join("fifo"), nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        std::os::unix::fs::symlink("/etc/shadow", dir.path().join("shadow")).unwrap();
        std::os::unix::fs::symlink("loop", dir.path().join("loop")).unwrap();
        std::os::unix::fs::symlink(dir.path(), dir.path().join("up")).unwrap();
        let mut w = Walk { hash: Sha256::new(), entries: 0, racy_bytes: 0, now: SystemTime::now() };
        w.tree(dir.path()).unwrap();
        assert_eq!(w.entries, 5, "the directory and its four entries, once each");
        // A FIFO handed to `contents` (as after a swap) is not read.
        let fifo = dir.path().join("fifo");
        let fd = openat(CWD, &fifo, OFlags::RDONLY | OFlags::NONBLOCK, Mode::empty()).unwrap();
        let err = w.contents(fd, &fifo, 0).unwrap_err();
        assert!(err.contains("no longer a regular file"), "{err}");
    }

    /// A grant whose path passes through a link (a tool swapped a directory for
    /// one) is not walked; nor is a file system whose times do not move.
    #[test]
    fn a_fingerprint_refuses_a_linked_root_and_proc() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("real")).unwrap();
        std::os::unix::fs::symlink("/etc", dir.path().join("swapped")).unwrap();
        let walk = |root: &Path| {
            let mut w = Walk { hash: Sha256::new(), entries: 0, racy_bytes: 0, now: SystemTime::now() };
            w.tree(root).map(|()| w.entries)
        };
        assert_eq!(walk(&dir.path().join("real")), Ok(1));
        for root in [dir.path().join("swapped"), dir.path().join("swapped/ssl")] {
            let err = walk(&root).unwrap_err();
            assert!(err.contains("passes through a symbolic link"), "{err}");
        }
        let err = walk(Path::new("/proc/sys")).unwrap_err();
        assert!(err.contains("on proc"), "{err}");
    }
}
