//! Applying a layer: walking its upper directory, judging each entry against
//! the tree as the layer would leave it, and moving or copying in what is allowed,
//! without following anything in the upper directory.

use super::*;

/// The tree as the layers will leave it: an entry of an upper directory
/// stands for itself (a whiteout for nothing), otherwise the real tree shows
/// through unless an opaque upper directory above hides it.
pub(super) struct LayerView<'a> {
    pub(super) roots: &'a [LayerRoot],
    pub(super) git: RefCell<HashMap<PathBuf, bool>>,
    /// Upper directories already asked about: opaque or not.
    pub(super) upper: RefCell<HashMap<PathBuf, bool>>,
}

impl LayerView<'_> {
    fn opaque(&self, up: &Path) -> bool {
        if let Some(o) = self.upper.borrow().get(up) {
            return *o;
        }
        let o = is_opaque(up);
        self.upper.borrow_mut().insert(up.to_path_buf(), o);
        o
    }
}

impl View for LayerView<'_> {
    fn kind(&self, path: &Path) -> Option<Kind> {
        let Some(lr) = self.roots.iter().filter(|r| path.starts_with(&r.root)).max_by_key(|r| r.root.as_os_str().len())
        else {
            return persist::Real.kind(path);
        };
        let Ok(rel) = path.strip_prefix(&lr.root) else { return persist::Real.kind(path) };
        let parts: Vec<&OsStr> = rel.iter().collect();
        let mut up = lr.upper.clone();
        let mut hidden = false;
        for (i, part) in parts.iter().enumerate() {
            up.push(part);
            let Ok(st) = rustix::fs::lstat(&up) else {
                return if hidden { None } else { persist::Real.kind(path) };
            };
            if is_whiteout(&st) {
                return None;
            }
            if i + 1 == parts.len() {
                return Some(kind_of(&st));
            }
            if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
                return None;
            }
            if self.opaque(&up) {
                hidden = true;
            }
        }
        persist::Real.kind(path)
    }

    fn is_git_dir(&self, d: &Path) -> bool {
        if let Some(known) = self.git.borrow().get(d) {
            return *known;
        }
        let is = persist::git_signature(self, d);
        self.git.borrow_mut().insert(d.to_path_buf(), is);
        is
    }
}

/// One layer root's walk.
pub(super) struct Walk<'a, 'j> {
    pub(super) judge: &'a Judge<'j>,
    pub(super) view: &'a LayerView<'a>,
    pub(super) mode: ApplyMode,
    pub(super) out: &'a mut Applied,
    pub(super) copied: &'a mut HashMap<PathBuf, Stamp>,
    pub(super) lr: &'a LayerRoot,
}

/// Opens a directory of the upper tree (no link followed). One the tool made
/// unreadable to its owner is given its owner's rights first (warden owns the
/// upper tree; the mode the tool set is applied from the stat taken before).
fn open_upper(dir: impl AsFd, name: &OsStr) -> Result<OwnedFd, Errno> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    match rustix::fs::openat(&dir, name, flags, Mode::empty()) {
        Err(Errno::ACCESS) => {
            let st = rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW)?;
            if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
                return Err(Errno::ACCESS);
            }
            rustix::fs::chmodat(&dir, name, Mode::from_raw_mode((st.st_mode & 0o7777) | 0o700), AtFlags::empty())?;
            rustix::fs::openat(&dir, name, flags, Mode::empty())
        }
        other => other,
    }
}

/// Opens a directory of the real tree beneath `dir`, no link followed.
fn open_real(dir: impl AsFd, name: &OsStr) -> Result<OwnedFd, Errno> {
    rustix::fs::openat2(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS | ResolveFlags::BENEATH,
    )
}

/// The names in a directory, but `.` and `..`.
fn names_in(dir: impl AsFd) -> Result<Vec<OsString>, Errno> {
    let mut out = Vec::new();
    for e in rustix::fs::Dir::read_from(dir)? {
        let e = e?;
        let name = e.file_name().to_bytes();
        if name != b"." && name != b".." {
            out.push(OsStr::from_bytes(name).to_os_string());
        }
    }
    out.sort();
    Ok(out)
}

/// One entry of the layer as [`Walk::entry`] found it, beside what the real
/// tree has under the same name.
struct Seen<'a> {
    /// The layer's directory holding it.
    up: &'a OwnedFd,
    /// The real directory it goes into, when that one was applied.
    real: Option<&'a OwnedFd>,
    name: &'a OsStr,
    /// Its path in the real tree.
    path: PathBuf,
    /// Its path in the layer.
    entry_up: PathBuf,
    st: rustix::fs::Stat,
    stamp: Stamp,
    /// What the real tree has there, if anything.
    real_st: Option<rustix::fs::Stat>,
    real_is_dir: bool,
}

impl Walk<'_, '_> {
    fn refuse(&mut self, path: PathBuf, why: String) {
        self.out.refused.push((path, why));
    }

    fn fail(&mut self, path: PathBuf, why: String) {
        self.out.failed.push((path, why));
    }

    pub(super) fn root(&mut self) -> Result<(), String> {
        let up = rustix::fs::open(
            &self.lr.upper,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| format!("cannot open the layer {}: {}", self.lr.upper.display(), errno_text(e)))?;
        let real = rustix::fs::openat2(
            rustix::fs::CWD,
            &self.lr.root,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
        )
        .map_err(|e| format!("cannot open {}: {}", self.lr.root.display(), errno_text(e)))?;
        let upper = self.lr.upper.clone();
        let root = self.lr.root.clone();
        // The grant's root itself keeps its mode (a tool that made it unreadable
        // would lock the person out of their workspace); said, not dropped silently.
        if let (Ok(u), Ok(r)) = (rustix::fs::fstat(&up), rustix::fs::fstat(&real))
            && u.st_mode & 0o7777 != r.st_mode & 0o7777
        {
            self.refuse(
                root.clone(),
                format!(
                    "the mode of a write grant's root is not changed by a call (it made it {:o}; it stays {:o})",
                    u.st_mode & 0o7777,
                    r.st_mode & 0o7777
                ),
            );
        }
        self.dir(&up, &upper, Some(&real), &root, false);
        Ok(())
    }

    /// Applies the upper directory `up` (at `up_path`) onto the real one
    /// `real` (at `path`; `None`: there is none yet and it is not made).
    /// `opaque`: the real directory's own entries are hidden.
    fn dir(&mut self, up: &OwnedFd, up_path: &Path, real: Option<&OwnedFd>, path: &Path, opaque: bool) {
        let names = match names_in(up) {
            Ok(n) => n,
            Err(e) => return self.fail(path.to_path_buf(), format!("cannot list the layer: {}", errno_text(e))),
        };
        if opaque && let Some(real) = real {
            // What the tool removed by replacing the directory.
            let listed: HashSet<&OsString> = names.iter().collect();
            if let Ok(real_names) = names_in(real) {
                for n in real_names.iter().filter(|n| !listed.contains(n)) {
                    self.delete(real, n, &path.join(n));
                }
            }
        }
        for name in &names {
            self.entry(up, up_path, real, path, name, opaque);
        }
    }

    /// One entry of an upper directory.
    fn entry(
        &mut self,
        up: &OwnedFd,
        up_path: &Path,
        real: Option<&OwnedFd>,
        dir_path: &Path,
        name: &OsStr,
        opaque: bool,
    ) {
        let path = dir_path.join(name);
        let entry_up = up_path.join(name);
        let st = match rustix::fs::statat(up, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(e) => return self.fail(path, format!("cannot stat it in the layer: {}", errno_text(e))),
        };
        let stamp = Stamp::of(&st);
        // Applied (copied) before and unchanged since: the host may have changed it meanwhile.
        if self.copied.get(&path) == Some(&stamp) && kind_of(&st) != Kind::Dir {
            return;
        }
        let real_st = real.and_then(|r| rustix::fs::statat(r, name, AtFlags::SYMLINK_NOFOLLOW).ok());
        let real_is_dir = real_st.as_ref().is_some_and(|s| FileType::from_raw_mode(s.st_mode) == FileType::Directory);
        // Something removed.
        if is_whiteout(&st) {
            if let (Some(real), Some(_)) = (real, &real_st) {
                self.delete(real, name, &path);
            }
            if self.mode == ApplyMode::Copy {
                self.copied.insert(path, stamp);
            }
            return;
        }
        let seen = Seen { up, real, name, path, entry_up, st, stamp, real_st, real_is_dir };
        if kind_of(&seen.st) == Kind::Dir {
            self.dir_entry(seen, opaque);
        } else {
            self.file_entry(seen);
        }
    }

    /// A directory in the layer: merged into the real one that was there, or
    /// created (moved whole when nothing beneath it is refused).
    fn dir_entry(&mut self, seen: Seen<'_>, opaque: bool) {
        let Seen { up, real, name, path, entry_up, st, stamp, real_st, real_is_dir } = seen;
        // In copy mode a directory that replaced the real one did so once: later
        // applies merge into it (the host may have added to it since).
        let applied_before = self.copied.contains_key(&path);
        let entry_opaque =
            !applied_before && (opaque || real_st.is_none() || !real_is_dir || self.view.opaque(&entry_up));
        let sub_up = match open_upper(up, name) {
            Ok(fd) => fd,
            Err(e) => return self.fail(path, format!("cannot open it in the layer: {}", errno_text(e))),
        };
        if real_is_dir && !entry_opaque {
            // A directory that was there: only what changed beneath it.
            let Some(real) = real else { return };
            match open_real(real, name) {
                Ok(sub_real) => {
                    // Its mode last: one the tool took away would keep the rest out.
                    self.dir(&sub_up, &entry_up, Some(&sub_real), &path, false);
                    self.metadata(&sub_real, &st, &path);
                }
                Err(e) => self.fail(path, format!("cannot open it: {}", errno_text(e))),
            }
            return;
        }
        // A new directory, or one that replaces what was there.
        if let Verdict::Refuse(why) = self.judge.judge(self.view, &path, Change::Create, true) {
            return self.refuse(path, why);
        }
        let Some(real) = real else { return self.fail(path, "its directory was not applied".into()) };
        if real_st.is_some() && !real_is_dir {
            // A file replaced by a directory.
            if !self.delete(real, name, &path) {
                return;
            }
        }
        if self.mode == ApplyMode::Move && real_st.is_none() && self.clean(&sub_up, &entry_up, &path) {
            // Nothing beneath it is refused: the whole tree moves at once.
            self.sanitise(up, &entry_up, name, &st);
            match rustix::fs::renameat_with(up, name, real, name, RenameFlags::NOREPLACE) {
                Ok(()) => {
                    self.out.applied += 1;
                    return;
                }
                Err(Errno::XDEV) => {}
                Err(e) => return self.fail(path, format!("cannot move it in: {}", errno_text(e))),
            }
        }
        if real_st.is_none() {
            let m = Mode::from_raw_mode(st.st_mode & 0o1777) | Mode::RWXU;
            if let Err(e) = rustix::fs::mkdirat(real, name, m) {
                return self.fail(path, format!("cannot create it: {}", errno_text(e)));
            }
        }
        match open_real(real, name) {
            Ok(sub_real) => {
                self.dir(&sub_up, &entry_up, Some(&sub_real), &path, real_st.is_some());
                self.own(&sub_real, &st);
                let _ = rustix::fs::fchmod(&sub_real, Mode::from_raw_mode(st.st_mode & 0o1777));
                self.out.applied += 1;
                if self.mode == ApplyMode::Copy {
                    self.copied.insert(path, stamp);
                }
            }
            Err(e) => self.fail(path, format!("cannot open it: {}", errno_text(e))),
        }
    }

    /// A file, a link, a FIFO or a socket in the layer: judged (vetted where
    /// it must be), then moved or copied over what was there.
    fn file_entry(&mut self, seen: Seen<'_>) {
        let Seen { up, real, name, path, entry_up, st, stamp, real_st, real_is_dir } = seen;
        let change = if real_st.is_some() { Change::Modify } else { Change::Create };
        // The bytes a vetted file was judged by: those, and no later ones, are what a
        // running server's copy writes.
        let vetted = match self.judge.judge(self.view, &path, change, false) {
            Verdict::Allow => None,
            Verdict::Refuse(why) => return self.refuse(path, why),
            Verdict::Vet(what) => {
                let text = match read_small(up, name) {
                    Ok(t) => t,
                    Err(e) => return self.refuse(path, e),
                };
                if let Err(why) = persist::vet(what, &path, &text, self.view, self.judge) {
                    return self.refuse(path, why);
                }
                Some(text)
            }
        };
        let Some(real) = real else { return self.fail(path, "its directory was not applied".into()) };
        if real_is_dir && !self.delete(real, name, &path) {
            return;
        }
        self.sanitise(up, &entry_up, name, &st);
        let moved = match self.mode {
            ApplyMode::Move => match rustix::fs::renameat(up, name, real, name) {
                Ok(()) => Ok(()),
                Err(Errno::XDEV) => copy_file(up, name, real, name, &st),
                Err(e) => Err(errno_text(e)),
            },
            ApplyMode::Copy => match &vetted {
                Some(text) => write_vetted(real, name, text, &st),
                None => copy_file(up, name, real, name, &st),
            },
        };
        match moved {
            Ok(()) => {
                self.out.applied += 1;
                if self.mode == ApplyMode::Copy {
                    self.copied.insert(path, stamp);
                }
            }
            Err(e) => self.fail(path, format!("cannot apply it: {e}")),
        }
    }

    /// Whether every entry beneath a new upper directory is allowed as it is
    /// (then the directory moves whole); strips what must not reach the host.
    fn clean(&mut self, up: &OwnedFd, up_path: &Path, path: &Path) -> bool {
        let Ok(names) = names_in(up) else { return false };
        for name in &names {
            let sub = path.join(name);
            let Ok(st) = rustix::fs::statat(up, name, AtFlags::SYMLINK_NOFOLLOW) else { return false };
            if is_whiteout(&st) {
                return false;
            }
            let dir = kind_of(&st) == Kind::Dir;
            if self.judge.judge(self.view, &sub, Change::Create, dir) != Verdict::Allow {
                return false;
            }
            self.sanitise(up, &up_path.join(name), name, &st);
            if dir {
                let Ok(sub_up) = open_upper(up, name) else { return false };
                if !self.clean(&sub_up, &up_path.join(name), &sub) {
                    return false;
                }
            }
        }
        true
    }

    /// Strips what must never reach the host from an upper entry:
    /// set-user-ID and set-group-ID bits, and overlayfs's own xattrs.
    fn sanitise(&self, up: &OwnedFd, entry_up: &Path, name: &OsStr, st: &rustix::fs::Stat) {
        let ft = FileType::from_raw_mode(st.st_mode);
        if ft == FileType::RegularFile && st.st_mode & 0o6000 != 0 {
            let _ = rustix::fs::chmodat(up, name, Mode::from_raw_mode(st.st_mode & 0o777), AtFlags::empty());
        }
        let mut buf = vec![0u8; 4096];
        if let Ok(n) = rustix::fs::llistxattr(entry_up, &mut buf[..]) {
            for attr in buf[..n].split(|b| *b == 0).filter(|a| !a.is_empty()) {
                let attr = OsStr::from_bytes(attr);
                if OVERLAY_XATTRS.iter().any(|p| attr.as_bytes().starts_with(p.as_bytes())) {
                    let _ = rustix::fs::lremovexattr(entry_up, attr);
                }
            }
        }
    }

    /// A directory that was there changed mode: judged, then applied.
    fn metadata(&mut self, real: &OwnedFd, st: &rustix::fs::Stat, path: &Path) {
        let Ok(now) = rustix::fs::fstat(real) else { return };
        if now.st_mode & 0o7777 == st.st_mode & 0o7777 {
            return;
        }
        match self.judge.judge(self.view, path, Change::Modify, true) {
            Verdict::Allow => {
                let _ = rustix::fs::fchmod(real, Mode::from_raw_mode(st.st_mode & 0o1777));
            }
            Verdict::Refuse(why) => self.refuse(path.to_path_buf(), why),
            Verdict::Vet(_) => self.refuse(path.to_path_buf(), "its mode may not change here".into()),
        }
    }

    /// Hands a directory warden made to the owner the tool gave it.
    fn own(&self, real: &OwnedFd, st: &rustix::fs::Stat) {
        if nix::unistd::geteuid().is_root() {
            let _ = rustix::fs::fchown(
                real,
                Some(rustix::fs::Uid::from_raw(st.st_uid)),
                Some(rustix::fs::Gid::from_raw(st.st_gid)),
            );
        }
    }

    /// Removes a real entry (recursively), each removal judged; whether it is gone.
    fn delete(&mut self, dir: &OwnedFd, name: &OsStr, path: &Path) -> bool {
        let Ok(st) = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) else { return true };
        let is_dir = FileType::from_raw_mode(st.st_mode) == FileType::Directory;
        if let Verdict::Refuse(why) = self.judge.judge(&persist::Real, path, Change::Delete, is_dir) {
            self.refuse(path.to_path_buf(), why);
            return false;
        }
        if is_dir {
            let Ok(sub) = open_real(dir, name) else {
                self.fail(path.to_path_buf(), "cannot open it to remove it".into());
                return false;
            };
            let mut all = true;
            for n in names_in(&sub).unwrap_or_default() {
                all &= self.delete(&sub, &n, &path.join(&n));
            }
            if !all {
                return false;
            }
        }
        let flags = if is_dir { AtFlags::REMOVEDIR } else { AtFlags::empty() };
        match rustix::fs::unlinkat(dir, name, flags) {
            Ok(()) | Err(Errno::NOENT) => true,
            Err(e) => {
                self.fail(path.to_path_buf(), format!("cannot remove it: {}", errno_text(e)));
                false
            }
        }
    }
}

/// A file of the upper tree, for [`persist::vet`]: regular, at most [`persist::MAX_VETTED`] bytes.
fn read_small(dir: &OwnedFd, name: &OsStr) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
        Mode::empty(),
    )
    .map_err(|e| format!("cannot read it to check it: {}", errno_text(e)))?;
    let st = rustix::fs::fstat(&fd).map_err(errno_text)?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return Err("it is not a regular file".into());
    }
    let mut text = Vec::new();
    std::fs::File::from(fd).take(persist::MAX_VETTED + 1).read_to_end(&mut text).map_err(|e| e.to_string())?;
    if text.len() as u64 > persist::MAX_VETTED {
        return Err(format!("it is larger than the {} bytes warden checks", persist::MAX_VETTED));
    }
    Ok(text)
}

/// Writes the bytes a vetted file was judged by into the real tree (replacing
/// what is there), with the upper file's owner and mode.
fn write_vetted(real: &OwnedFd, to: &OsStr, text: &[u8], st: &rustix::fs::Stat) -> Result<(), String> {
    use std::io::Write;
    let (tmp, mut file) = temp_file(real, st)?;
    let written = file.write_all(text).map_err(|e| e.to_string());
    put_in_place(real, &tmp, to, &file, st, written)
}

/// A name no one else uses in the directory an entry is applied to.
fn temp_name() -> OsString {
    let mut b = [0u8; 6];
    let _ = getrandom::fill(&mut b);
    let mut tmp = OsString::from(".warden-apply-");
    tmp.push(hex::encode(b));
    tmp
}

/// A new file under a temporary name in `real`, of the upper entry's mode.
fn temp_file(real: &OwnedFd, st: &rustix::fs::Stat) -> Result<(OsString, std::fs::File), String> {
    let tmp = temp_name();
    let fd = rustix::fs::openat(
        real,
        &tmp,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(st.st_mode & 0o777),
    )
    .map_err(errno_text)?;
    Ok((tmp, std::fs::File::from(fd)))
}

/// Gives a file written under a temporary name the upper entry's owner,
/// mode and times and renames it over `to`; removes it if anything failed.
fn put_in_place(
    real: &OwnedFd,
    tmp: &OsStr,
    to: &OsStr,
    file: &std::fs::File,
    st: &rustix::fs::Stat,
    written: Result<(), String>,
) -> Result<(), String> {
    let _ = rustix::fs::fchmod(file, Mode::from_raw_mode(st.st_mode & 0o777));
    if nix::unistd::geteuid().is_root() {
        let _ = rustix::fs::fchown(
            file,
            Some(rustix::fs::Uid::from_raw(st.st_uid)),
            Some(rustix::fs::Gid::from_raw(st.st_gid)),
        );
    }
    let times = rustix::fs::Timestamps {
        last_access: rustix::fs::Timespec { tv_sec: st.st_atime, tv_nsec: st.st_atime_nsec as _ },
        last_modification: rustix::fs::Timespec { tv_sec: st.st_mtime, tv_nsec: st.st_mtime_nsec as _ },
    };
    let _ = rustix::fs::futimens(file, &times);
    match written.and_then(|()| rustix::fs::renameat(real, tmp, real, to).map_err(errno_text)) {
        Ok(()) => Ok(()),
        Err(e) => {
            let _ = rustix::fs::unlinkat(real, tmp, AtFlags::empty());
            Err(e)
        }
    }
}

/// Copies one non-directory entry of the upper tree into the real one
/// (replacing what is there): a file's bytes, a link, a FIFO; owner, mode and
/// times kept. Sockets are not copied (nothing listens on them any more).
fn copy_file(up: &OwnedFd, name: &OsStr, real: &OwnedFd, to: &OsStr, st: &rustix::fs::Stat) -> Result<(), String> {
    match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => {
            let src = rustix::fs::openat(up, name, OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())
                .map_err(errno_text)?;
            let (tmp, mut file) = temp_file(real, st)?;
            let copied = std::io::copy(&mut std::fs::File::from(src), &mut file).map(drop).map_err(|e| e.to_string());
            put_in_place(real, &tmp, to, &file, st, copied)
        }
        FileType::Symlink | FileType::Fifo => {
            let tmp = temp_name();
            if FileType::from_raw_mode(st.st_mode) == FileType::Symlink {
                let target = rustix::fs::readlinkat(up, name, Vec::new()).map_err(errno_text)?;
                rustix::fs::symlinkat(target.as_c_str(), real, &tmp).map_err(errno_text)?;
            } else {
                rustix::fs::mknodat(real, &tmp, FileType::Fifo, Mode::from_raw_mode(st.st_mode & 0o777), 0)
                    .map_err(errno_text)?;
            }
            rustix::fs::renameat(real, &tmp, real, to).map_err(|e| {
                let _ = rustix::fs::unlinkat(real, &tmp, AtFlags::empty());
                errno_text(e)
            })
        }
        _ => Ok(()),
    }
}
