//! The call's view of its grants, made by mounts in its own mount namespace
//! (in the helper's child, before the capabilities are dropped): write grants
//! as overlays ([`apply_layers`]), the protected and denied paths as read-only
//! binds or empty masks ([`apply`], [`PathRule`]), the view read-only but for
//! what must stay writable ([`read_only_view`], [`keep_writable`]), and a root
//! built from the grants ([`grant_view`]). Every target is opened with `openat2`
//! (no symbolic link followed) and mounted on through `/proc/self/fd/N`.
//! docs/security.md, "Protected paths and persistence", says what each holds.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::mount::MsFlags;

use crate::namespaces::{fd_path, open_path};
use crate::rules::{Deny, Kind, LayerRoot, PathRule};

/// Places the empty mask source may be staged on (the first that exists and
/// is unrelated to every rule); it is unmounted again before the tool runs.
const STAGING: &[&str] = &["/mnt", "/run", "/tmp", "/media", "/srv", "/opt"];

/// Mounts the call's layers: one overlay per write grant, over the grant itself.
/// `userns`: the helper is in a user namespace of the call's (overlayfs then
/// keeps its state in `user.` xattrs).
pub fn apply_layers(layers: &[LayerRoot], userns: bool) -> Result<(), String> {
    // The layers' own directories (upper and work side by side under the call's
    // directory) stay writable under the read-only view: one bind of that directory.
    let dirs: Vec<PathBuf> = layers.iter().filter_map(|l| l.upper.parent().map(Path::to_path_buf)).collect();
    keep_writable(&dirs)?;
    // Every directory is opened (no link followed) before any overlay is mounted.
    let mut opened = Vec::new();
    for l in layers {
        let open =
            |p: &Path| open_path(p, true).map_err(|e| format!("cannot open {} for the call's layer: {e}", p.display()));
        opened.push((l, open(&l.root)?, open(&l.upper)?, open(&l.work)?));
    }
    for (l, root, upper, work) in &opened {
        let options = format!(
            "lowerdir={},upperdir={},workdir={},redirect_dir=nofollow,metacopy=off,index=off,volatile{}",
            fd_path(root),
            fd_path(upper),
            fd_path(work),
            if userns { ",userxattr" } else { "" }
        );
        nix::mount::mount(
            Some("overlay"),
            fd_path(root).as_str(),
            Some("overlay"),
            MsFlags::empty(),
            Some(options.as_str()),
        )
        .map_err(|e| {
            format!(
                "cannot mount the call's layer over {} (upper {}): {e}; the layer needs overlayfs, on a file \
                     system that can hold its upper directory",
                l.root.display(),
                l.upper.display()
            )
        })?;
    }
    Ok(())
}

/// Applies `rules` that exist: read-only binds and masks, parents first.
pub fn apply(rules: &[PathRule]) -> Result<(), String> {
    let depth = |p: &Path| p.components().count();
    let present: Vec<&PathRule> = rules.iter().filter(|r| r.kind != Kind::Absent).collect();
    if present.is_empty() {
        return Ok(());
    }
    let masks = if present.iter().any(|r| r.deny == Deny::Read) { Some(MaskSource::new(rules)?) } else { None };
    let mut ordered = present;
    ordered.sort_by_key(|r| depth(&r.path));
    let result = ordered.iter().try_for_each(|r| apply_one(r, masks.as_ref()));
    if let Some(m) = masks {
        m.remove();
    }
    result
}

fn apply_one(r: &PathRule, masks: Option<&MaskSource>) -> Result<(), String> {
    let fd = match open_path(&r.path, false) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => {
            return Err(format!(
                "the {} path {} does not exist, so nothing can be mounted over it ({})",
                r.deny.as_str(),
                r.path.display(),
                r.why
            ));
        }
        Err(rustix::io::Errno::LOOP) => {
            return Err(format!(
                "the {} path {} now passes through a symbolic link: refused",
                r.deny.as_str(),
                r.path.display()
            ));
        }
        Err(e) => return Err(format!("cannot open {}: {e}", r.path.display())),
    };
    let st = rustix::fs::fstat(&fd).map_err(|e| format!("cannot stat {}: {e}", r.path.display()))?;
    let dir = rustix::fs::FileType::from_raw_mode(st.st_mode).is_dir();
    match r.deny {
        Deny::Write => {
            bind(&fd, &fd, true).map_err(|e| format!("cannot bind {} onto itself: {e}", r.path.display()))?;
            // The new mount is on top now: open it again (through no link) and
            // check it is the same file before making it read-only.
            let top = open_path(&r.path, dir).map_err(|e| format!("cannot open {} again: {e}", r.path.display()))?;
            let again = rustix::fs::fstat(&top).map_err(|e| format!("cannot stat {}: {e}", r.path.display()))?;
            if (again.st_dev, again.st_ino) != (st.st_dev, st.st_ino) {
                return Err(format!("{} changed while it was being made read-only", r.path.display()));
            }
            read_only(&top).map_err(|e| format!("cannot make {} read-only: {e}", r.path.display()))
        }
        Deny::Read => {
            let m = masks.ok_or("no mask source")?;
            let source = if dir { &m.dir } else { &m.file };
            bind(source, &fd, false).map_err(|e| format!("cannot mask {}: {e}", r.path.display()))
        }
    }
}

/// `mount --bind` from one descriptor onto another.
fn bind(source: &OwnedFd, target: &OwnedFd, recursive: bool) -> nix::Result<()> {
    let mut flags = MsFlags::MS_BIND;
    if recursive {
        flags |= MsFlags::MS_REC;
    }
    nix::mount::mount(Some(fd_path(source).as_str()), fd_path(target).as_str(), None::<&str>, flags, None::<&str>)
}

/// `mount_setattr` on the mount `fd` is the root of (and, `recursive`, every
/// mount beneath it): `set` and `clear` are `MOUNT_ATTR_*` bits.
fn set_attr(fd: &OwnedFd, set: u64, clear: u64, recursive: bool) -> std::io::Result<()> {
    #[repr(C)]
    struct MountAttr {
        attr_set: u64,
        attr_clr: u64,
        propagation: u64,
        userns_fd: u64,
    }
    const AT_RECURSIVE: libc::c_uint = 0x8000;
    let attr = MountAttr { attr_set: set, attr_clr: clear, propagation: 0, userns_fd: 0 };
    let flags = (libc::AT_EMPTY_PATH as libc::c_uint) | if recursive { AT_RECURSIVE } else { 0 };
    // SAFETY: mount_setattr reads `size_of::<MountAttr>()` bytes of `attr`, which
    // lives across the call, and the empty path is a valid C string.
    #[allow(unsafe_code)]
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            fd.as_raw_fd(),
            c"".as_ptr(),
            flags,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if r == 0 { Ok(()) } else { Err(std::io::Error::last_os_error()) }
}

/// `MOUNT_ATTR_RDONLY`.
const MOUNT_ATTR_RDONLY: u64 = 0x1;

/// Makes every mount of the call's mount namespace read-only: from here on
/// nothing outside what is mounted afterwards (its layers, `{tmp}`, `/proc`,
/// `/dev/shm`) and what [`keep_writable`] reopens can change, its metadata
/// (mode, owner, times, extended attributes) included, whatever the uid.
pub fn read_only_view() -> Result<(), String> {
    let root = open_path(Path::new("/"), true).map_err(|e| format!("cannot open / for the read-only view: {e}"))?;
    set_attr(&root, MOUNT_ATTR_RDONLY, 0, true).map_err(|e| format!("cannot make the call's view read-only: {e}"))
}

/// Reopens for writing each of `paths` (write grants) that the read-only view
/// covers and no layer or tmpfs of the call does: bound onto itself, its
/// read-only flag cleared.
pub fn keep_writable(paths: &[PathBuf]) -> Result<(), String> {
    for p in paths {
        let dir = p.is_dir();
        let fd = match open_path(p, dir) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::NOENT) => continue,
            Err(e) => return Err(format!("cannot open the write grant {}: {e}", p.display())),
        };
        let ro = nix::sys::statvfs::fstatvfs(&fd)
            .map_err(|e| format!("cannot stat {}: {e}", p.display()))?
            .flags()
            .contains(nix::sys::statvfs::FsFlags::ST_RDONLY);
        if !ro {
            continue;
        }
        bind(&fd, &fd, true).map_err(|e| format!("cannot bind the write grant {} onto itself: {e}", p.display()))?;
        let top = open_path(p, dir).map_err(|e| format!("cannot open {} again: {e}", p.display()))?;
        set_attr(&top, 0, MOUNT_ATTR_RDONLY, false)
            .map_err(|e| format!("cannot make the write grant {} writable: {e}", p.display()))?;
    }
    Ok(())
}

/// Makes the mount `fd` is the root of read-only, with everything beneath it.
fn read_only(fd: &OwnedFd) -> std::io::Result<()> {
    let r = set_attr(fd, MOUNT_ATTR_RDONLY, 0, true);
    if r.is_ok() {
        return Ok(());
    }
    let err = r.err().unwrap_or_else(std::io::Error::last_os_error);
    if err.raw_os_error() != Some(libc::ENOSYS) {
        return Err(err);
    }
    // An older kernel: remount the top mount only, keeping the flags it has
    // (a user namespace may not drop locked ones).
    let vfs = nix::sys::statvfs::fstatvfs(fd).map_err(std::io::Error::from)?;
    let f = vfs.flags();
    use nix::sys::statvfs::FsFlags;
    let mut flags = MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY;
    for (has, add) in [
        (FsFlags::ST_NOSUID, MsFlags::MS_NOSUID),
        (FsFlags::ST_NODEV, MsFlags::MS_NODEV),
        (FsFlags::ST_NOEXEC, MsFlags::MS_NOEXEC),
        (FsFlags::ST_NOATIME, MsFlags::MS_NOATIME),
        (FsFlags::ST_NODIRATIME, MsFlags::MS_NODIRATIME),
        (FsFlags::ST_RELATIME, MsFlags::MS_RELATIME),
    ] {
        if f.contains(has) {
            flags |= add;
        }
    }
    nix::mount::mount(None::<&str>, fd_path(fd).as_str(), None::<&str>, flags, None::<&str>).map_err(Into::into)
}

/// An empty mode-000 directory and file on a small read-only tmpfs, staged
/// on a directory unrelated to every rule while the masks are mounted.
struct MaskSource {
    at: PathBuf,
    dir: OwnedFd,
    file: OwnedFd,
}

impl MaskSource {
    fn new(rules: &[PathRule]) -> Result<MaskSource, String> {
        let related = |p: &Path| rules.iter().any(|r| r.path.starts_with(p) || p.starts_with(&r.path));
        let at = STAGING
            .iter()
            .map(Path::new)
            .find(|p| !related(p) && open_path(p, true).is_ok())
            .ok_or("no directory to stage the masks on")?
            .to_path_buf();
        let hard = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
        let stage = open_path(&at, true).map_err(|e| format!("cannot open {}: {e}", at.display()))?;
        nix::mount::mount(
            Some("tmpfs"),
            fd_path(&stage).as_str(),
            Some("tmpfs"),
            hard,
            Some("size=4k,nr_inodes=8,mode=000"),
        )
        .map_err(|e| format!("cannot mount the masks' tmpfs on {}: {e}", at.display()))?;
        let made = (|| -> Result<(OwnedFd, OwnedFd), String> {
            let d = at.join("d");
            let f = at.join("f");
            std::fs::create_dir(&d).map_err(|e| format!("cannot create {}: {e}", d.display()))?;
            std::fs::File::create(&f).map_err(|e| format!("cannot create {}: {e}", f.display()))?;
            for p in [&d, &f, &at] {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o000))
                    .map_err(|e| format!("cannot chmod {}: {e}", p.display()))?;
            }
            nix::mount::mount(
                None::<&str>,
                &at,
                None::<&str>,
                MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | hard,
                None::<&str>,
            )
            .map_err(|e| format!("cannot make the masks' tmpfs read-only: {e}"))?;
            let dir = open_path(&d, true).map_err(|e| format!("cannot open {}: {e}", d.display()))?;
            let file = open_path(&f, false).map_err(|e| format!("cannot open {}: {e}", f.display()))?;
            Ok((dir, file))
        })();
        match made {
            Ok((dir, file)) => Ok(MaskSource { at, dir, file }),
            Err(e) => {
                let _ = nix::mount::umount2(&at, nix::mount::MntFlags::MNT_DETACH);
                Err(e)
            }
        }
    }

    /// Unmounts the staging tmpfs (the masks mounted from it stay).
    fn remove(self) {
        drop(self.dir);
        drop(self.file);
        let _ = nix::mount::umount2(&self.at, nix::mount::MntFlags::MNT_DETACH);
    }
}

/// The links of the call's `/dev` (what bash, `cat /dev/stdin` and
/// `<(process substitution)` spell): each into the call's own `/proc`.
const DEV_LINKS: &[(&str, &str)] = &[
    ("fd", "/proc/self/fd"),
    ("stdin", "/proc/self/fd/0"),
    ("stdout", "/proc/self/fd/1"),
    ("stderr", "/proc/self/fd/2"),
];
/// The most links followed while recreating one spelled path.
const MAX_LINKS: usize = 40;
/// The root's own tmpfs: directories, empty mount points and links only.
const VIEW_TMPFS: &str = "size=1m,nr_inodes=16384,mode=0755";

/// The call's root built from its grants: a tmpfs holding only
/// the granted paths, each bound (with everything mounted beneath it: its
/// layer, its protected and denied paths) at its canonical place, the links
/// through which a grant, the working directory or the program is spelled
/// recreated on the way, `/proc` and `/dev/shm` of the call's own and
/// `/dev/fd` and `/dev/std*`; then `pivot_root` into it, the old root
/// detached, and the tmpfs made read-only. What no grant names does not
/// exist for the tool: not a file, not a directory, not a socket. This is what
/// lets `AF_UNIX` sockets inside the call: a path reaches only the call's own
/// sockets and those of its grants.
///
/// [`ViewError::NotBuilt`]: no view was built and nothing changed (a grant is
/// `/`, the working directory lies outside every grant, a grant changed since
/// the host resolved it); the host's tree stays, under Landlock, and
/// `AF_UNIX` stays refused.
pub fn grant_view(grants: &[PathBuf], sockets: &[PathBuf], spelled: &[PathBuf], cwd: &Path) -> Result<bool, ViewError> {
    use ViewError::NotBuilt;
    // The grants as the host resolved them (canonical, no link): never
    // resolved again here, so a link planted since cannot redirect a bind
    // (it is refused when opened: ELOOP).
    let mut kept: Vec<PathBuf> = Vec::new();
    let mut candidates: Vec<PathBuf> =
        grants.iter().chain(sockets).map(|g| g.components().collect::<PathBuf>()).filter(|g| g.exists()).collect();
    candidates.sort_by_key(|p| p.components().count());
    for c in candidates {
        if c == Path::new("/") {
            return Err(NotBuilt("a grant is / itself".into()));
        }
        if !kept.iter().any(|k| c.starts_with(k)) {
            kept.push(c);
        }
    }
    let covered = |p: &Path| kept.iter().any(|k| p.starts_with(k));
    // A working directory spelled through a link counts where it leads (the link is recreated on the way).
    if !covered(cwd) && !std::fs::canonicalize(cwd).is_ok_and(|c| covered(&c)) {
        return Err(NotBuilt(format!("the working directory {} lies outside every grant", cwd.display())));
    }
    let at = STAGING
        .iter()
        .map(Path::new)
        .find(|p| !kept.iter().any(|k| k.starts_with(p) || p.starts_with(k)) && open_path(p, true).is_ok())
        .ok_or_else(|| NotBuilt("no directory to build the call's root on".into()))?
        .to_path_buf();
    let hard = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    let stage = open_path(&at, true).map_err(|e| NotBuilt(format!("cannot open {}: {e}", at.display())))?;
    nix::mount::mount(Some("tmpfs"), fd_path(&stage).as_str(), Some("tmpfs"), hard, Some(VIEW_TMPFS))
        .map_err(|e| NotBuilt(format!("cannot mount the call's root on {}: {e}", at.display())))?;
    drop(stage);
    let built = build_view(&at, &kept, sockets, spelled).and_then(|()| {
        std::env::set_current_dir(&at).map_err(|e| format!("cannot enter the call's root {}: {e}", at.display()))?;
        nix::unistd::pivot_root(".", ".").map_err(|e| format!("cannot pivot into the call's root: pivot_root: {e}"))
    });
    if let Err(e) = built {
        let _ = nix::mount::umount2(&at, nix::mount::MntFlags::MNT_DETACH);
        return Err(NotBuilt(e));
    }
    enter_view().map_err(ViewError::Broken)?;
    Ok(true)
}

/// Why [`grant_view`] did not build the call's root.
#[derive(Debug)]
pub enum ViewError {
    /// Nothing changed: the host's tree stays.
    NotBuilt(String),
    /// The root was pivoted but the view is not whole: the call cannot go on.
    Broken(String),
}

/// Fills the staged root at `at`: mount points and binds for `kept`
/// (canonical, none beneath another), the links on the way to each of
/// `spelled`, the top-level links and `/dev`'s.
fn build_view(at: &Path, kept: &[PathBuf], sockets: &[PathBuf], spelled: &[PathBuf]) -> Result<(), String> {
    let inside = |p: &Path| at.join(p.strip_prefix("/").unwrap_or(p));
    let mkdirs = |p: &Path| std::fs::create_dir_all(p).map_err(|e| format!("cannot create {}: {e}", p.display()));
    for k in kept {
        let dir = k.is_dir();
        let source = open_path(k, dir).map_err(|e| format!("cannot open the grant {}: {e}", k.display()))?;
        // A net.unix entry binds one socket and nothing else: whatever is
        // there now must still be a socket.
        if sockets.contains(k) {
            let st = rustix::fs::fstat(&source).map_err(|e| format!("cannot stat {}: {e}", k.display()))?;
            if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::Socket {
                return Err(format!("the net.unix entry {} is no longer a socket", k.display()));
            }
        }
        let target = inside(k);
        if dir {
            mkdirs(&target)?;
        } else {
            if let Some(parent) = target.parent() {
                mkdirs(parent)?;
            }
            std::fs::File::create(&target).map_err(|e| format!("cannot create {}: {e}", target.display()))?;
        }
        let target_fd = open_path(&target, dir).map_err(|e| format!("cannot open {}: {e}", target.display()))?;
        bind(&source, &target_fd, true)
            .map_err(|e| format!("cannot bind the grant {} into the call's root: {e}", k.display()))?;
    }
    let covered = |p: &Path| kept.iter().any(|k| p.starts_with(k));
    // The links directly under / (merged /usr: `/bin` → `usr/bin`, `/lib64` →
    // `usr/lib64`, through which ELF interpreters and `#!` lines are spelled):
    // they point, and grant nothing. Then the links on each spelled path.
    let mut work: Vec<(PathBuf, usize)> = std::fs::read_dir("/")
        .map_err(|e| format!("cannot list /: {e}"))?
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_symlink()))
        .map(|e| (e.path(), 0))
        .collect();
    work.extend(spelled.iter().map(|p| (p.clone(), 0)));
    while let Some((path, links)) = work.pop() {
        if links > MAX_LINKS || !path.is_absolute() {
            continue;
        }
        let mut cur = PathBuf::from("/");
        let mut parts = path.components().skip(1).peekable();
        while let Some(part) = parts.next() {
            // `cur` holds no link, so `..` is its parent.
            match part {
                std::path::Component::ParentDir => {
                    cur.pop();
                    continue;
                }
                std::path::Component::CurDir => continue,
                _ => {}
            }
            let next = cur.join(part);
            if covered(&next) {
                break;
            }
            let Ok(meta) = std::fs::symlink_metadata(&next) else { break };
            let place = inside(&next);
            if meta.file_type().is_symlink() {
                let target =
                    std::fs::read_link(&next).map_err(|e| format!("cannot read the link {}: {e}", next.display()))?;
                if std::fs::symlink_metadata(&place).is_err() {
                    std::os::unix::fs::symlink(&target, &place)
                        .map_err(|e| format!("cannot recreate the link {}: {e}", next.display()))?;
                }
                // Go on from where the link leads, with the rest of the path.
                let mut rest = cur.join(&target);
                rest.extend(parts);
                work.push((rest, links + 1));
                break;
            }
            if !meta.is_dir() {
                break;
            }
            if std::fs::symlink_metadata(&place).is_err() {
                std::fs::create_dir(&place).map_err(|e| format!("cannot create {}: {e}", place.display()))?;
            }
            cur = next;
        }
    }
    let dev = inside(Path::new("/dev"));
    if !covered(Path::new("/dev")) {
        mkdirs(&dev)?;
        for (name, target) in DEV_LINKS {
            let place = dev.join(name);
            if std::fs::symlink_metadata(&place).is_err() {
                std::os::unix::fs::symlink(target, &place)
                    .map_err(|e| format!("cannot create {}: {e}", place.display()))?;
            }
        }
    }
    Ok(())
}

/// After `pivot_root(".", ".")` into the staged root: the old root stacked
/// on it is detached (nothing of it stays reachable), and the new one made
/// read-only.
fn enter_view() -> Result<(), String> {
    nix::mount::umount2(".", nix::mount::MntFlags::MNT_DETACH)
        .map_err(|e| format!("cannot detach the host's root from the call's: {e}"))?;
    std::env::set_current_dir("/").map_err(|e| format!("cannot enter the call's root: {e}"))?;
    let root = open_path(Path::new("/"), true).map_err(|e| format!("cannot open the call's root: {e}"))?;
    set_attr(&root, MOUNT_ATTR_RDONLY, 0, false).map_err(|e| format!("cannot make the call's root read-only: {e}"))
}
