//! The call's `{tmp}` as a file system of its own, so `limits.tmp_size` and
//! `limits.tmp_files` bound it (`RLIMIT_FSIZE` bounds one file, never the total).
//!
//! In the helper, as root, before the capabilities are dropped: a private mount
//! namespace (mounts propagate in from the host, never out), then a tmpfs with
//! `size` and `nr_inodes` over the `{tmp}` directory the host created, owned by
//! whoever the tool runs as, `nosuid` and `nodev`. The directories the policy
//! grants under `{tmp}` are made again inside it. The file system lives as long
//! as a process of the call does, so nothing the tool writes there outlives it;
//! the host removes the (empty) directory beneath as before.
//!
//! Without root there is no mount: `{tmp}` is the host's directory, bounded per
//! file only (docs/security.md, "No disk quota without root").

use std::os::unix::fs::DirBuilderExt;
use std::path::Path;

use nix::mount::MsFlags;

use super::spec::TmpQuota;

/// Mounts the quota'd `{tmp}`; `owner` is the uid and gid the tool runs as;
/// `granted` are the paths the policy grants (those under `{tmp}` are created).
pub fn mount_private_tmp(quota: &TmpQuota, owner: (u32, u32), granted: &[&Path]) -> Result<(), String> {
    let tmp = &quota.path;
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS)
        .map_err(|e| format!("cannot make a mount namespace for {{tmp}}: unshare(CLONE_NEWNS): {e}"))?;
    nix::mount::mount(None::<&str>, "/", None::<&str>, MsFlags::MS_REC | MsFlags::MS_SLAVE, None::<&str>)
        .map_err(|e| format!("cannot make the mounts private (mount / MS_SLAVE): {e}"))?;
    let under: Vec<&Path> = granted.iter().copied().filter(|p| p.starts_with(tmp) && *p != tmp.as_path()).collect();
    // Every granted directory under {tmp} costs an inode, and so does the root.
    let inodes = u64::from(quota.files) + 1 + under.len() as u64 * 4;
    let data = format!("size={},nr_inodes={inodes},mode=0700,uid={},gid={}", quota.size.max(4096), owner.0, owner.1);
    nix::mount::mount(Some("tmpfs"), tmp, Some("tmpfs"), MsFlags::MS_NOSUID | MsFlags::MS_NODEV, Some(data.as_str()))
        .map_err(|e| format!("cannot mount the tmpfs ({data}) on {}: {e}", tmp.display()))?;
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
    Ok(())
}
