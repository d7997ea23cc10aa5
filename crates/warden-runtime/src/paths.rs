//! Lexical path arithmetic shared by the policy checks and the runtimes.

use std::path::{Component, Path, PathBuf};

/// `raw` joined to `base` when relative, with `.` and `..` resolved lexically
/// the way the kernel resolves them (`..` at `/` stays at `/`), and whether a
/// `..` tried to climb above `/` (a caller checking a tool's argument refuses
/// such a path; one following a path a program will open keeps the kernel's answer).
pub fn lexical(base: &Path, raw: &Path) -> (PathBuf, bool) {
    let joined = if raw.is_absolute() { raw.to_path_buf() } else { base.join(raw) };
    let mut out = PathBuf::from("/");
    let mut above = false;
    for c in joined.components() {
        match c {
            Component::ParentDir => above |= !out.pop(),
            Component::Normal(s) => out.push(s),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    (out, above)
}

#[cfg(test)]
mod tests {
    use super::lexical;
    use std::path::{Path, PathBuf};

    #[test]
    fn dots_resolve_as_the_kernel_resolves_them() {
        let ws = Path::new("/w/s");
        let l = |raw: &str| lexical(ws, Path::new(raw));
        assert_eq!(l("a/../b"), (PathBuf::from("/w/s/b"), false));
        assert_eq!(l("./a/./b/"), (PathBuf::from("/w/s/a/b"), false));
        assert_eq!(l("../x"), (PathBuf::from("/w/x"), false));
        assert_eq!(l("/etc/passwd"), (PathBuf::from("/etc/passwd"), false));
        assert_eq!(l("../../../.."), (PathBuf::from("/"), true));
        assert_eq!(l("/../etc/x"), (PathBuf::from("/etc/x"), true), "`..` at `/` stays at `/`");
    }
}

/// Why [`read_regular`] returned no bytes.
#[derive(Debug)]
pub(crate) enum ReadFail {
    /// Nothing at the path (the open's error).
    Missing(std::io::Error),
    /// Something that is not a regular file (a FIFO, a device, a directory).
    NotRegular,
    /// A regular file larger than the limit.
    TooLarge,
    /// Another error opening or reading it.
    Io(std::io::Error),
}

/// A regular file of at most `limit` bytes, read from one descriptor opened
/// non-blocking (a FIFO or a terminal left at a path a tool may write does not
/// hang warden) and checked to be a regular file before any read.
pub(crate) fn read_regular(path: &Path, limit: u64) -> Result<Vec<u8>, ReadFail> {
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let file = match std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY).open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(ReadFail::Missing(e)),
        Err(e) => return Err(ReadFail::Io(e)),
    };
    if !file.metadata().map_err(ReadFail::Io)?.is_file() {
        return Err(ReadFail::NotRegular);
    }
    let mut bytes = Vec::new();
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes).map_err(ReadFail::Io)?;
    if bytes.len() as u64 > limit {
        return Err(ReadFail::TooLarge);
    }
    Ok(bytes)
}
