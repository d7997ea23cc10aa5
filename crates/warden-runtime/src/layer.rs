//! The layer of a process call or server ([`Layer`]): its writes to each
//! directory it may write land in an overlay upper directory that warden owns,
//! outside every grant, and reach the real tree only through [`Layer::apply`],
//! which asks [`persist::Judge`] about every entry first, so the host sees
//! nothing the tool wrote until the call (or a server's request) ends, and then
//! only what the judgement allows. Nothing in the upper directories is trusted,
//! and real directories are opened beneath their grant's root with no link
//! followed. docs/security.md, "How each runtime holds them", has the details.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, RenameFlags, ResolveFlags};
use rustix::io::Errno;
use serde::Serialize;

use super::persist::{self, Change, Judge, Kind, Verdict, View};

/// The xattrs overlayfs keeps its own state in (as root, and in a user namespace).
const OVERLAY_XATTRS: [&str; 2] = ["trusted.overlay.", "user.overlay."];

pub use warden_sandbox::rules::LayerRoot;

/// How [`Layer::apply`] hands the changes over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApplyMode {
    /// The overlay is gone (the call ended): entries are moved into the real tree.
    Move,
    /// The overlay is still mounted (a running server): entries are copied,
    /// each once per change, and the upper directory is left as it is.
    Copy,
}

/// What one [`Layer::apply`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Applied {
    /// Entries that reached the real tree.
    pub applied: usize,
    /// Entries refused, with why (the path as it would have been).
    pub refused: Vec<(PathBuf, String)>,
    /// Entries that could not be applied (the layer is then kept).
    pub failed: Vec<(PathBuf, String)>,
}

impl Applied {
    /// The refusals and failures as result JSON (at most `max` of each, and
    /// how many in all), paths relative to `base` where they lie in it.
    pub fn to_json(&self, max: usize, base: &Path) -> Option<serde_json::Value> {
        if self.refused.is_empty() && self.failed.is_empty() {
            return None;
        }
        let list = |v: &[(PathBuf, String)]| {
            v.iter()
                .take(max)
                .map(|(p, why)| {
                    let shown = p.strip_prefix(base).ok().filter(|r| !r.as_os_str().is_empty()).unwrap_or(p);
                    serde_json::json!({"path": shown.display().to_string(), "why": why})
                })
                .collect::<Vec<_>>()
        };
        let mut out = serde_json::json!({});
        if !self.refused.is_empty() {
            out["refused"] = list(&self.refused).into();
            out["refused_count"] = self.refused.len().into();
        }
        if !self.failed.is_empty() {
            out["failed"] = list(&self.failed).into();
        }
        Some(out)
    }
}

/// The layers of one call (or one server's life): removed when dropped,
/// unless something could not be applied.
#[derive(Debug)]
pub struct Layer {
    /// `<base>/<call id>`.
    dir: PathBuf,
    /// Held while the layer lives: an unheld one was left by a warden that died.
    _lock: std::fs::File,
    roots: Vec<LayerRoot>,
    /// [`ApplyMode::Copy`]: the upper entries applied, by path, with their
    /// stamp then (applied again only when it changed).
    copied: HashMap<PathBuf, Stamp>,
    /// Keep the directory: something in it was not applied.
    keep: bool,
    /// Remove the directory it lies in once it is empty (one beside a grant).
    remove_base: bool,
}

/// Enough of a stat to tell that an upper entry changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    ino: u64,
    size: i64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stamp {
    fn of(st: &rustix::fs::Stat) -> Stamp {
        Stamp {
            ino: st.st_ino,
            size: st.st_size,
            mtime: (st.st_mtime, st.st_mtime_nsec as i64),
            ctime: (st.st_ctime, st.st_ctime_nsec as i64),
        }
    }
}

/// The directories a call's layer covers: its write grants that are
/// directories, outside `{tmp}`, none inside another.
pub fn roots_of(dirs: &[(PathBuf, bool)], tmp: Option<&Path>) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = dirs
        .iter()
        .filter(|(p, w)| *w && p.is_dir() && !tmp.is_some_and(|t| p.starts_with(t)))
        .map(|(p, _)| p.clone())
        .collect();
    out.sort();
    out.dedup();
    let all = out.clone();
    out.retain(|p| !all.iter().any(|o| o != p && p.starts_with(o)));
    out
}

/// Where a call's layers are kept: a directory of this user's outside every
/// write grant, on the same file system as the grants when one can be found
/// (then the changes move in by `rename`, and fill the disk the tool's writes
/// would have filled): warden's state directory, or else beside the nearest
/// ancestor of a grant on its file system (`.warden-layers-UID`, removed again
/// when empty); failing both, the state directory, the runtime directory or
/// `/var/tmp` on another file system (the changes are then copied in).
fn base_dir(roots: &[PathBuf]) -> Result<Base, String> {
    use std::os::unix::fs::MetadataExt;
    let uid = nix::unistd::geteuid().as_raw();
    let env = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    let state =
        env("XDG_STATE_HOME").or_else(|| env("HOME").map(|h| h.join(".local/state"))).map(|s| s.join("warden/layers"));
    let clash = |p: &Path| roots.iter().any(|r| p.starts_with(r) || r.starts_with(p));
    let dev = |p: &Path| std::fs::metadata(p).map(|m| m.dev()).ok();
    let mut tried = Vec::new();
    let usable = |c: &Path, tried: &mut Vec<String>| -> Option<PathBuf> {
        if clash(c) {
            tried.push(format!("{} (inside a write grant)", c.display()));
            return None;
        }
        match private_dir(c, uid).and_then(|()| c.canonicalize().map_err(|e| e.to_string())) {
            Ok(canon) if !clash(&canon) => Some(canon),
            Ok(_) => {
                tried.push(format!("{} (inside a write grant)", c.display()));
                None
            }
            Err(e) => {
                tried.push(format!("{}: {e}", c.display()));
                None
            }
        }
    };
    let want = roots.first().and_then(|r| dev(r));
    // The state directory, when it shares the grants' file system.
    if let Some(st) = &state
        && let Some(dir) = usable(st, &mut tried)
        && dev(&dir) == want
    {
        return Ok(Base { dir, shared: false });
    }
    // Beside the nearest ancestor of the first grant that is on its file system and writable.
    if let Some(root) = roots.first() {
        for a in root.ancestors().skip(1) {
            if dev(a) != want {
                break;
            }
            if nix::unistd::access(a, nix::unistd::AccessFlags::W_OK | nix::unistd::AccessFlags::X_OK).is_err() {
                continue;
            }
            let c = a.join(format!(".warden-layers-{uid}"));
            if let Some(dir) = usable(&c, &mut tried) {
                return Ok(Base { dir, shared: true });
            }
        }
    }
    let runtime = env("XDG_RUNTIME_DIR").map(|r| r.join("warden/layers"));
    for c in [state, runtime, Some(PathBuf::from(format!("/var/tmp/warden-{uid}/layers")))].into_iter().flatten() {
        if let Some(dir) = usable(&c, &mut tried) {
            return Ok(Base { dir, shared: false });
        }
    }
    Err(format!("no directory to keep the call's layer in: {}", tried.join("; ")))
}

/// Where layers are kept, and whether it is a directory of warden's beside a
/// grant (removed when no layer is left in it).
struct Base {
    dir: PathBuf,
    shared: bool,
}

/// Makes `dir` (and its parents) and checks that it is a directory of this
/// user's that no one else may write, reached through no link at its end.
fn private_dir(dir: &Path, uid: u32) -> Result<(), String> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(|e| e.to_string())?;
    let m = std::fs::symlink_metadata(dir).map_err(|e| e.to_string())?;
    if !m.is_dir() || m.uid() != uid || m.mode() & 0o022 != 0 {
        return Err("not a directory of this user's that only it may write".into());
    }
    // /var/tmp/warden-UID is in a directory everyone may write: it must be ours too.
    if let Some(parent) = dir.parent().filter(|p| p.starts_with("/var/tmp/")) {
        let m = std::fs::symlink_metadata(parent).map_err(|e| e.to_string())?;
        if !m.is_dir() || m.uid() != uid || m.mode() & 0o022 != 0 {
            return Err(format!("{} is not a directory of this user's", parent.display()));
        }
    }
    Ok(())
}

fn errno_text(e: Errno) -> String {
    std::io::Error::from(e).to_string()
}

impl Layer {
    /// A fresh layer for `roots` (from [`roots_of`]), under the call id `id`.
    pub fn create(id: &str, roots: &[PathBuf]) -> Result<Layer, String> {
        // Where a process keeps layers is found once for a set of grants.
        static BASES: std::sync::Mutex<Vec<(Vec<PathBuf>, PathBuf, bool)>> = std::sync::Mutex::new(Vec::new());
        let cached = BASES
            .lock()
            .ok()
            .and_then(|b| b.iter().find(|(r, _, _)| r == roots).map(|(_, d, s)| Base { dir: d.clone(), shared: *s }));
        let base = match cached.filter(|b| !b.shared) {
            Some(b) => b,
            None => {
                let b = base_dir(roots)?;
                if let Ok(mut all) = BASES.lock()
                    && all.len() < 64
                {
                    all.push((roots.to_vec(), b.dir.clone(), b.shared));
                }
                report_orphans(&b.dir, id);
                b
            }
        };
        let mut layer = Layer::create_in(&base.dir, id, roots);
        // A directory beside the grant that another call removed as it emptied: made again.
        if base.shared && layer.is_err() && !base.dir.exists() {
            let base = base_dir(roots)?;
            layer = Layer::create_in(&base.dir, id, roots);
        }
        let mut layer = layer?;
        layer.remove_base = base.shared;
        Ok(layer)
    }

    /// [`Layer::create`] in the directory `base`.
    pub fn create_in(base: &Path, id: &str, roots: &[PathBuf]) -> Result<Layer, String> {
        use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
        let dir = base.join(id);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(|e| format!("cannot create the call's layer {}: {e}", dir.display()))?;
        let lock = std::fs::File::create(dir.join("lock"))
            .map_err(|e| format!("cannot create the layer's lock in {}: {e}", dir.display()))?;
        rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive)
            .map_err(|e| format!("cannot lock the layer {}: {e}", dir.display()))?;
        let mut layer = Layer {
            dir: dir.clone(),
            _lock: lock,
            roots: Vec::new(),
            copied: HashMap::new(),
            keep: false,
            remove_base: false,
        };
        for (i, root) in roots.iter().enumerate() {
            let upper = dir.join(format!("{i}.upper"));
            let work = dir.join(format!("{i}.work"));
            for d in [&upper, &work] {
                std::fs::DirBuilder::new()
                    .mode(0o700)
                    .create(d)
                    .map_err(|e| format!("cannot create {}: {e}", d.display()))?;
            }
            // The merged root takes the upper root's owner and mode: the real root's.
            let m = std::fs::metadata(root).map_err(|e| format!("cannot stat {}: {e}", root.display()))?;
            if nix::unistd::geteuid().is_root() {
                std::os::unix::fs::lchown(&upper, Some(m.uid()), Some(m.gid()))
                    .map_err(|e| format!("cannot hand {} to uid {}: {e}", upper.display(), m.uid()))?;
            }
            std::fs::set_permissions(&upper, std::fs::Permissions::from_mode(m.mode() & 0o7777))
                .map_err(|e| format!("cannot set the mode of {}: {e}", upper.display()))?;
            layer.roots.push(LayerRoot { root: root.clone(), upper, work });
        }
        Ok(layer)
    }

    /// The layers, for the helper's spec.
    pub fn roots(&self) -> &[LayerRoot] {
        &self.roots
    }

    /// Where the layer is kept.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Applies what the tool wrote to the real tree, each entry judged by
    /// `judge` in the tree as the layer will leave it.
    pub fn apply(&mut self, judge: &Judge<'_>, mode: ApplyMode) -> Applied {
        let mut out = Applied::default();
        let view = LayerView { roots: &self.roots, git: RefCell::default(), upper: RefCell::default() };
        for lr in self.roots.clone() {
            let mut w = Walk { judge, view: &view, mode, out: &mut out, copied: &mut self.copied, lr: &lr };
            if let Err(e) = w.root() {
                w.out.failed.push((lr.root.clone(), e));
            }
        }
        if !out.failed.is_empty() {
            self.keep = true;
        }
        out
    }
}

impl Drop for Layer {
    fn drop(&mut self) {
        if self.keep {
            tracing::warn!("the call's unapplied changes are kept in {}", self.dir.display());
            return;
        }
        if let Err(e) = remove_tree(&self.dir) {
            tracing::warn!("cannot remove the layer {}: {e}", self.dir.display());
        }
        if self.remove_base
            && let Some(base) = self.dir.parent()
        {
            // Fails while another call's layer is in it, as it should.
            let _ = std::fs::remove_dir(base);
        }
    }
}

/// Says once per process where layers lie that a warden which died mid-call
/// left (their lock is held by no one): never applied, kept for the person.
fn report_orphans(base: &Path, mine: &str) {
    use std::sync::atomic::{AtomicBool, Ordering};
    static SAID: AtomicBool = AtomicBool::new(false);
    if SAID.load(Ordering::Relaxed) {
        return;
    }
    let Ok(entries) = std::fs::read_dir(base) else { return };
    let mut orphans = Vec::new();
    for e in entries.flatten().take(256) {
        if e.file_name() == mine || !e.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let Ok(lock) = std::fs::File::open(e.path().join("lock")) else { continue };
        if rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockShared).is_ok() {
            orphans.push(e.path().display().to_string());
        }
    }
    if !orphans.is_empty() && !SAID.swap(true, Ordering::Relaxed) {
        tracing::warn!(
            "the changes of {} call(s) interrupted before warden could check them were never applied; they are kept \
             in {} (remove them once you no longer need them)",
            orphans.len(),
            orphans.join(", ")
        );
    }
}

/// Removes a tree this process owns, making each directory searchable first
/// (overlayfs leaves mode-000 directories in its work directory, and a tool
/// may leave them in its upper one).
fn remove_tree(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    match std::fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(_) => {
            let mut stack = vec![dir.to_path_buf()];
            while let Some(d) = stack.pop() {
                let _ = std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700));
                if let Ok(entries) = std::fs::read_dir(&d) {
                    for e in entries.flatten() {
                        if e.file_type().is_ok_and(|t| t.is_dir()) {
                            stack.push(e.path());
                        }
                    }
                }
            }
            std::fs::remove_dir_all(dir)
        }
    }
}

fn is_whiteout(st: &rustix::fs::Stat) -> bool {
    FileType::from_raw_mode(st.st_mode) == FileType::CharacterDevice && st.st_rdev == 0
}

fn kind_of(st: &rustix::fs::Stat) -> Kind {
    match FileType::from_raw_mode(st.st_mode) {
        FileType::Directory => Kind::Dir,
        FileType::Symlink => Kind::Link,
        _ => Kind::File,
    }
}

/// Whether an upper directory is opaque (it hides the real one's content).
fn is_opaque(path: &Path) -> bool {
    OVERLAY_XATTRS.iter().any(|prefix| {
        let mut buf = [0u8; 4];
        let name = format!("{prefix}opaque");
        matches!(rustix::fs::lgetxattr(path, name.as_str(), &mut buf), Ok(n) if buf[..n] == *b"y")
    })
}

mod apply;
use self::apply::{LayerView, Walk};

#[cfg(test)]
mod tests;
