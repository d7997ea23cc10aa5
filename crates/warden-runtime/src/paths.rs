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
