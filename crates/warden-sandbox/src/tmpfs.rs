//! The call's `{tmp}` as a tmpfs of its own, so `limits.tmp_size` and
//! `limits.tmp_files` bound it (`RLIMIT_FSIZE` bounds one file, never the total):
//! [`mount_private_tmp`], and with `{system}` a private `/dev/shm` in the same
//! tmpfs ([`mount_private_shm`]). Without a mount namespace there is no mount
//! (docs/security.md, "No disk quota without root").

use std::os::unix::fs::DirBuilderExt;
use std::path::Path;

use nix::mount::MsFlags;

use crate::spec::TmpQuota;

/// Where `/dev/shm` is.
const SHM: &str = "/dev/shm";

/// Mounts the quota'd `{tmp}`; `owner` is the uid and gid the tool runs as;
/// `granted` are the paths the policy grants (those under `{tmp}` are created).
/// With `unshare` it makes its own mount namespace first (the call has none);
/// with `shm` the same tmpfs backs a private `/dev/shm`. Returns whether it did.
pub fn mount_private_tmp(
    quota: &TmpQuota,
    owner: (u32, u32),
    granted: &[&Path],
    unshare: bool,
    shm: bool,
) -> Result<bool, String> {
    let tmp = &quota.path;
    if unshare {
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS)
            .map_err(|e| format!("cannot make a mount namespace for {{tmp}}: unshare(CLONE_NEWNS): {e}"))?;
        nix::mount::mount(None::<&str>, "/", None::<&str>, MsFlags::MS_REC | MsFlags::MS_SLAVE, None::<&str>)
            .map_err(|e| format!("cannot make the mounts private (mount / MS_SLAVE): {e}"))?;
    }
    let shm = shm && Path::new(SHM).is_dir();
    let under: Vec<&Path> = granted.iter().copied().filter(|p| p.starts_with(tmp) && *p != tmp.as_path()).collect();
    // Every granted directory under {tmp} costs an inode, and so does the root
    // (and the two halves when /dev/shm shares it).
    let inodes = u64::from(quota.files) + 3 + under.len() as u64 * 4;
    let data = format!("size={},nr_inodes={inodes},mode=0700,uid={},gid={}", quota.size.max(4096), owner.0, owner.1);
    let tmp_fd = crate::namespaces::open_path(tmp, true).map_err(|e| format!("cannot open {}: {e}", tmp.display()))?;
    let on = crate::namespaces::fd_path(&tmp_fd);
    nix::mount::mount(
        Some("tmpfs"),
        on.as_str(),
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(data.as_str()),
    )
    .map_err(|e| format!("cannot mount the tmpfs ({data}) on {}: {e}", tmp.display()))?;
    if shm {
        // One tmpfs, two halves: `.shm` on /dev/shm, `.tmp` on {tmp}.
        let half = |name: &str, mode: u32| -> Result<std::path::PathBuf, String> {
            let p = tmp.join(name);
            std::fs::DirBuilder::new()
                .mode(mode)
                .create(&p)
                .map_err(|e| format!("cannot create {}: {e}", p.display()))?;
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode))
                .map_err(|e| format!("cannot chmod {}: {e}", p.display()))?;
            std::os::unix::fs::chown(&p, Some(owner.0), Some(owner.1))
                .map_err(|e| format!("cannot hand {} to uid {}: {e}", p.display(), owner.0))?;
            Ok(p)
        };
        let (t, s) = (half(".tmp", 0o700)?, half(".shm", 0o1777)?);
        bind_path(&s, Path::new(SHM))?;
        bind_path(&t, tmp)?;
    }
    for dir in under {
        // Each component between {tmp} and the grant, owned by the tool.
        let mut at = tmp.to_path_buf();
        for part in dir.strip_prefix(tmp).map_err(|e| e.to_string())?.components() {
            at.push(part);
            if !at.exists() {
                std::fs::DirBuilder::new()
                    .mode(0o700)
                    .create(&at)
                    .map_err(|e| format!("cannot create {} in the tmpfs: {e}", at.display()))?;
                std::os::unix::fs::chown(&at, Some(owner.0), Some(owner.1))
                    .map_err(|e| format!("cannot hand {} to uid {}: {e}", at.display(), owner.0))?;
            }
        }
    }
    Ok(shm)
}

/// Mounts a private `/dev/shm` of its own, bounded as `{tmp}` would be (the
/// call has no `{tmp}`). Returns whether there was a `/dev/shm` to cover.
pub fn mount_private_shm(size: u64, files: u32, owner: (u32, u32)) -> Result<bool, String> {
    if !Path::new(SHM).is_dir() {
        return Ok(false);
    }
    let fd = crate::namespaces::open_path(Path::new(SHM), true).map_err(|e| format!("cannot open {SHM}: {e}"))?;
    let data =
        format!("size={},nr_inodes={},mode=1777,uid={},gid={}", size.max(4096), u64::from(files) + 1, owner.0, owner.1);
    nix::mount::mount(
        Some("tmpfs"),
        crate::namespaces::fd_path(&fd).as_str(),
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(data.as_str()),
    )
    .map_err(|e| format!("cannot mount a tmpfs ({data}) on {SHM}: {e}"))?;
    Ok(true)
}

/// Binds the directory `from` onto `to`, both opened through no symbolic link.
fn bind_path(from: &Path, to: &Path) -> Result<(), String> {
    use crate::namespaces::{fd_path, open_path};
    let f = open_path(from, true).map_err(|e| format!("cannot open {}: {e}", from.display()))?;
    let t = open_path(to, true).map_err(|e| format!("cannot open {}: {e}", to.display()))?;
    nix::mount::mount(Some(fd_path(&f).as_str()), fd_path(&t).as_str(), None::<&str>, MsFlags::MS_BIND, None::<&str>)
        .map_err(|e| format!("cannot bind {} on {}: {e}", from.display(), to.display()))
}
