//! The files of one log: the current file (the log's path), the files it was
//! rotated to, and the lock file beside them.
//!
//! A log at `DIR/audit.jsonl` rotates to `DIR/audit.NNNNNNNNNNNNNNNNNNNN.jsonl`,
//! where the twenty digits are the `seq` of the file's first record, zero-padded:
//! the rotated files sort by name in the order of the chain, and the current
//! file comes after them all. (A log whose name does not end in `.jsonl`, say
//! `DIR/log`, rotates to `DIR/log.NNNNNNNNNNNNNNNNNNNN`.) The lock is
//! `DIR/audit.jsonl.lock`, never renamed.

use std::os::fd::AsRawFd;
use std::time::SystemTime;

use super::*;

/// `<log>.lock`: the file whose `flock` orders appends and rotations.
pub fn lock_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".lock");
    path.with_file_name(name)
}

/// The log's files a tool must never write, each with what it is: the
/// current file, its lock, and the files it was rotated to so far (a file
/// rotated later is new to the tools running then: its chain link in the next
/// file and an external copy, such as the OTLP export, show an edit).
pub fn own_files(log: &Path) -> Vec<(&'static str, PathBuf)> {
    let mut own = vec![("audit log", log.to_path_buf()), ("audit log lock", lock_path(log))];
    own.extend(rotated(log).unwrap_or_default().into_iter().map(|p| ("rotated audit log", p)));
    own
}

/// The log's name split for rotation: (stem, suffix), `("audit", ".jsonl")`.
fn parts(path: &Path) -> (String, &'static str) {
    let name = path.file_name().unwrap_or_default().to_string_lossy().into_owned();
    match name.strip_suffix(".jsonl") {
        Some(stem) => (stem.to_string(), ".jsonl"),
        None => (name, ""),
    }
}

/// Where the current file of the log at `path` goes when rotated, its first record being `first`.
pub fn rotated_path(path: &Path, first: u64) -> PathBuf {
    let (stem, suffix) = parts(path);
    path.with_file_name(format!("{stem}.{first:020}{suffix}"))
}

/// The first seq of the rotated file named `name`, if it is one of the log at `path`.
pub fn rotated_seq(path: &Path, name: &str) -> Option<u64> {
    let (stem, suffix) = parts(path);
    let digits = name.strip_prefix(&stem)?.strip_prefix('.')?.strip_suffix(suffix)?;
    (digits.len() == 20 && digits.bytes().all(|b| b.is_ascii_digit())).then(|| digits.parse().ok())?
}

/// The rotated files of the log at `path`, oldest first.
pub fn rotated(path: &Path) -> std::io::Result<Vec<PathBuf>> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut found = Vec::new();
    for entry in entries {
        let entry = entry?;
        if let Some(seq) = rotated_seq(path, &entry.file_name().to_string_lossy()) {
            found.push((seq, entry.path()));
        }
    }
    found.sort();
    Ok(found.into_iter().map(|(_, p)| p).collect())
}

/// Every file of the log at `path` in the order of its chain: the rotated
/// files, then the current file (if it exists).
pub fn log_files(path: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut all = rotated(path)?;
    if path.exists() {
        all.push(path.to_path_buf());
    }
    Ok(all)
}

/// Why the open file is no longer the log's.
#[derive(Debug)]
pub(super) enum Moved {
    /// Another warden rotated it: the path names the new file.
    Rotated,
    /// Removed, replaced, immutable, or its path unreadable.
    Other(std::io::Error),
}

/// Checks that `file` is still the file at `path` (not removed, or replaced by
/// another other than by a rotation) and not immutable (`chattr +i`, which the
/// kernel checks at each write: a log made immutable after warden opened it
/// would otherwise fail only after the tool ran). Returns its length. One
/// `statx` of the open file and one of the path, neither asking for a
/// timestamp (see [`len_of`]).
pub(super) fn still_there(file: &File, path: &Path) -> Result<u64, Moved> {
    use rustix::fs::{AtFlags, CWD, StatxAttributes, StatxFlags, statx};
    let io = |e: rustix::io::Errno| Moved::Other(e.into());
    let open =
        statx(file, "", AtFlags::EMPTY_PATH, StatxFlags::INO | StatxFlags::NLINK | StatxFlags::SIZE).map_err(io)?;
    let gone = |why: &str| Moved::Other(std::io::Error::new(std::io::ErrorKind::NotFound, why.to_string()));
    match statx(CWD, path, AtFlags::empty(), StatxFlags::INO) {
        Ok(at)
            if at.stx_dev_major == open.stx_dev_major
                && at.stx_dev_minor == open.stx_dev_minor
                && at.stx_ino == open.stx_ino
                && open.stx_nlink > 0 => {}
        _ if was_rotated(file, path) => return Err(Moved::Rotated),
        Ok(_) => return Err(gone("the log file was replaced by another file while warden had it open")),
        Err(_) if open.stx_nlink == 0 => return Err(gone("the log file was removed while warden had it open")),
        Err(e) => {
            return Err(Moved::Other(std::io::Error::new(
                std::io::Error::from(e).kind(),
                format!("the log path cannot be read: {e}"),
            )));
        }
    }
    let immutable = StatxAttributes::IMMUTABLE;
    if open.stx_attributes_mask.contains(immutable) && open.stx_attributes.contains(immutable) {
        return Err(Moved::Other(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            "the log file is immutable (chattr +i): no record can be appended; `chattr -i` it, or use another log",
        )));
    }
    Ok(open.stx_size)
}

/// Whether `file` now bears a rotated name of the log at `path` (in its
/// directory), as the kernel names the open file; one removed since by
/// `keep` counts too.
fn was_rotated(file: &File, path: &Path) -> bool {
    let Ok(now) = fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())) else { return false };
    let now = now.to_string_lossy();
    let now = Path::new(now.strip_suffix(" (deleted)").unwrap_or(now.as_ref()));
    let same_dir = match (now.parent(), path.parent().and_then(|d| d.canonicalize().ok())) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    };
    same_dir && now.file_name().is_some_and(|n| rotated_seq(path, &n.to_string_lossy()).is_some())
}

/// The seq of the first record of `file`, if it has a whole one.
pub(super) fn first_seq(file: &File) -> std::io::Result<Option<u64>> {
    let mut buf = vec![0u8; MAX_RECORD_BYTES];
    let n = file.read_at(&mut buf, 0)?;
    let Some(end) = buf[..n].iter().position(|&b| b == b'\n') else { return Ok(None) };
    Ok(serde_json::from_slice::<Value>(&buf[..end]).ok().and_then(|v| v.get("seq").and_then(Value::as_u64)))
}

/// `fsync`s the directory of `path`, so that a rename or a new file in it is durable.
pub(super) fn sync_dir(path: &Path) -> std::io::Result<()> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    File::open(dir)?.sync_all()
}

/// Removes the rotated files of the log at `path` last written more than
/// `keep` ago, except the newest: the chain's start then stays in a file named
/// by its first seq (`log verify` starts mid-chain there). Failures are logged,
/// never fatal: retention must not stop a record.
pub(super) fn remove_older(path: &Path, keep: Duration) {
    let Ok(mut old) = rotated(path) else { return };
    old.pop();
    let Some(cutoff) = SystemTime::now().checked_sub(keep) else { return };
    for file in old {
        let stale = fs::metadata(&file).and_then(|m| m.modified()).is_ok_and(|t| t < cutoff);
        if !stale {
            continue;
        }
        match fs::remove_file(&file) {
            Ok(()) => tracing::info!("audit log: removed {} (older than `keep`)", file.display()),
            Err(e) => tracing::warn!("audit log: cannot remove {} (older than `keep`): {e}", file.display()),
        }
    }
}
