//! Why a program cannot start under its read grants: the path on
//! its way to `execve` that no grant covers, so the error names the path and
//! the key to change instead of "Broken pipe" or a bare `EACCES`.
//!
//! The way is the program's path, each link it passes through (a virtualenv's
//! `bin/python` is a link into the base installation), and a script's
//! interpreter (`#!`), each checked with its directories resolved, as the
//! kernel resolves them.

use std::io::Read;
use std::path::{Path, PathBuf};

/// The most links and interpreters followed.
const MAX_HOPS: usize = 16;

/// The first path on `program`'s way that none of `granted` covers, and how
/// it was reached; `None` when every one is covered (or the program is missing).
pub fn ungranted(program: &Path, granted: &[PathBuf]) -> Option<(PathBuf, String)> {
    let granted: Vec<PathBuf> = granted.iter().map(|g| g.canonicalize().unwrap_or_else(|_| g.clone())).collect();
    let covered = |p: &Path| granted.iter().any(|g| p.starts_with(g));
    let mut path = program.to_path_buf();
    let mut how = String::from("the program");
    for _ in 0..MAX_HOPS {
        // Its directories as the kernel resolves them; the last component as it is.
        let resolved = match (path.parent(), path.file_name()) {
            (Some(dir), Some(name)) => dir.canonicalize().map(|d| d.join(name)).unwrap_or_else(|_| path.clone()),
            _ => path.clone(),
        };
        if !covered(&resolved) {
            return Some((resolved, how));
        }
        let meta = std::fs::symlink_metadata(&resolved).ok()?;
        if meta.file_type().is_symlink() {
            let target = std::fs::read_link(&resolved).ok()?;
            let dir = resolved.parent().map(Path::to_path_buf).unwrap_or_default();
            how = format!("the target of the link {}", resolved.display());
            path = dir.join(target);
            continue;
        }
        let interpreter = shebang(&resolved)?;
        how = format!("the interpreter of {} (its #! line)", resolved.display());
        path = interpreter;
    }
    None
}

/// The interpreter a script names on its `#!` line.
///
/// The program may lie in a directory a tool can write (a virtualenv in the
/// workspace): warden reads it on the host only when it is a regular file,
/// opened without following a link and without blocking, so a FIFO planted
/// there cannot hang warden.
fn shebang(path: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut file =
        std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW).open(path).ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let mut head = [0u8; 256];
    let n = file.read(&mut head).ok()?;
    let line = head[..n].strip_prefix(b"#!")?;
    let line = line.split(|&b| b == b'\n').next()?;
    let text = std::str::from_utf8(line).ok()?.trim();
    let first = text.split_whitespace().next()?;
    first.starts_with('/').then(|| PathBuf::from(first))
}

/// A sentence for an error: which path is outside `key` of `owner`, and what to add.
pub fn hint(program: &Path, granted: &[PathBuf], owner: &str) -> Option<String> {
    let (path, how) = ungranted(program, granted)?;
    let dir = path.parent().unwrap_or(Path::new("/"));
    Some(format!(
        "{how}, {}, is outside every fs.read grant of {owner}; add \"{}\" (or a directory above it) to its fs.read",
        path.display(),
        dir.display()
    ))
}

/// The first directory on the way to `program` (or the program itself) that
/// `uid` (with group `gid`) may not pass: as root, warden runs a tool as the
/// workspace's owner, who may not reach a program under a root-owned checkout
/// or home (the hint used to name fs.read, which was not the cause).
pub fn unreachable_for(program: &Path, uid: u32, gid: u32) -> Option<(PathBuf, String)> {
    use std::os::unix::fs::MetadataExt;
    if uid == 0 {
        return None;
    }
    let mut at = PathBuf::from("/");
    let parts: Vec<_> = program.components().skip(1).collect();
    for (i, part) in parts.iter().enumerate() {
        at.push(part);
        let Ok(meta) = std::fs::metadata(&at) else { return None };
        let last = i + 1 == parts.len();
        // A directory needs search (x); the program itself needs x (and r for a script, not checked).
        let bit = if meta.uid() == uid {
            0o100
        } else if meta.gid() == gid {
            0o010
        } else {
            0o001
        };
        if meta.mode() & bit == 0 {
            let what = if last { "execute" } else { "pass" };
            return Some((
                at.clone(),
                format!("uid {uid} may not {what} it (mode {:o}, owner uid {})", meta.mode() & 0o7777, meta.uid()),
            ));
        }
    }
    None
}

/// The most names read from one `PATH` directory outside the grants.
const MAX_PATH_NAMES: usize = 8192;

/// Whether `path` is a file some user may execute (following links).
fn executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// A toolchain swapped in silently: the first `PATH` entry that
/// lies outside the grants and holds a program a later, granted entry holds
/// too. On the host the name runs the first; in the sandbox the kernel refuses
/// to execute it there, and a shell goes on down `PATH` to the other (Node 20
/// instead of setup-node's 22, the system python instead of pyenv's). The call
/// is refused before it runs, naming the entry, what it shadows and the key.
/// An entry outside the grants that shadows nothing swaps nothing: its
/// programs fail to start (126), which the result's hints explain.
pub fn path_swap(path: &str, granted: &[PathBuf], owner: &str) -> Option<String> {
    // `granted` is canonical already (the host resolved each grant).
    let covered = |p: &Path| granted.iter().any(|g| p.starts_with(g));
    let entries: Vec<(&str, PathBuf)> = path
        .split(':')
        .filter(|d| d.starts_with('/'))
        .filter_map(|d| Path::new(d).canonicalize().ok().map(|real| (d, real)))
        .collect();
    for (i, (dir, real)) in entries.iter().enumerate() {
        if covered(real) {
            continue;
        }
        let later: Vec<&PathBuf> = entries[i + 1..].iter().map(|(_, r)| r).filter(|r| covered(r)).collect();
        if later.is_empty() {
            continue;
        }
        let Ok(listing) = std::fs::read_dir(real) else { continue };
        let mut shadowed: Vec<(String, PathBuf)> = Vec::new();
        for entry in listing.flatten().take(MAX_PATH_NAMES) {
            let name = entry.file_name();
            if !executable(&real.join(&name)) {
                continue;
            }
            if let Some(other) = later.iter().map(|l| l.join(&name)).find(|c| executable(c)) {
                shadowed.push((name.to_string_lossy().into_owned(), other));
            }
        }
        shadowed.sort();
        let Some((first, other)) = shadowed.first() else { continue };
        let names: Vec<&str> = shadowed.iter().take(8).map(|(n, _)| n.as_str()).collect();
        let more = if shadowed.len() > names.len() {
            format!(" and {} more", shadowed.len() - names.len())
        } else {
            String::new()
        };
        let root = match real.file_name().and_then(|n| n.to_str()) {
            Some("bin" | "shims" | "sbin") => real
                .parent()
                .map(|p| format!(" (a toolchain's shims and links may need its whole installation, {})", p.display())),
            _ => None,
        }
        .unwrap_or_default();
        return Some(format!(
            "PATH entry {dir} is outside every fs.read grant of {owner}, and it holds {}{more}, which a later entry \
             holds too: inside the sandbox {first} would run {} instead of {dir}/{first}; add \"{}\" to its fs.read{root}, \
             or take {dir} out of PATH",
            names.join(", "),
            other.display(),
            real.display(),
        ));
    }
    None
}

/// `warden run`'s program: a path (relative to `cwd`), or a name found on the
/// tool's `PATH` as a shell would find it. The first match decides: when it
/// (or a link or interpreter on its way) lies outside the tool's grants, the
/// call is refused naming it, never run with another program further down
/// `PATH` (a toolchain swapped in silently).
pub fn locate(tool: &str, program: &str, cwd: &Path, walls: &crate::Walls) -> Result<String, crate::CallError> {
    use crate::{CallError, ErrorCode};
    use std::os::unix::fs::PermissionsExt;
    let granted: Vec<PathBuf> = walls.dirs.iter().map(|(d, _)| d.clone()).collect();
    let check = |candidate: PathBuf| -> Result<String, CallError> {
        match hint(&candidate, &granted, &format!("tool {tool}")) {
            None => Ok(candidate.display().to_string()),
            Some(why) if candidate.as_os_str() == program => {
                Err(CallError::new(ErrorCode::ExecutionFailed, format!("{tool}: {program}: {why}")))
            }
            Some(why) => Err(CallError::new(
                ErrorCode::ExecutionFailed,
                format!("{tool}: {program} is {}, and {why}", candidate.display()),
            )),
        }
    };
    if program.contains('/') {
        let candidate = cwd.join(program);
        if !candidate.is_file() {
            return Err(CallError::new(
                ErrorCode::ExecutionFailed,
                format!("{tool}: {program}: no such program (looked for {})", candidate.display()),
            ));
        }
        return check(candidate);
    }
    let path =
        walls.env.iter().find(|(k, _)| k == "PATH").map(|(_, v)| v.as_str()).unwrap_or("/usr/local/bin:/usr/bin:/bin");
    for dir in path.split(':').filter(|d| d.starts_with('/')) {
        let candidate = Path::new(dir).join(program);
        let runnable = std::fs::metadata(&candidate).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
        if runnable {
            return check(candidate);
        }
    }
    Err(CallError::new(
        ErrorCode::ExecutionFailed,
        format!(
            "{tool}: {program}: not found on the tool's PATH ({path}); pass its full path, or set PATH in env.pass or env.set"
        ),
    ))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::os::unix::fs::{PermissionsExt, symlink};

    #[test]
    fn names_the_target_of_a_link_outside_the_grants() {
        let root = tempfile::tempdir().unwrap();
        let (venv, base) = (root.path().join("venv/bin"), root.path().join("base/bin"));
        std::fs::create_dir_all(&venv).unwrap();
        std::fs::create_dir_all(&base).unwrap();
        std::fs::write(base.join("python3.12"), b"\x7fELF").unwrap();
        symlink(base.join("python3.12"), venv.join("python")).unwrap();
        let granted = [root.path().join("venv")];
        let (path, how) = ungranted(&venv.join("python"), &granted).unwrap();
        assert_eq!(path, base.canonicalize().unwrap().join("python3.12"));
        assert!(how.contains("the target of the link"), "{how}");
        assert!(ungranted(&venv.join("python"), &[root.path().to_path_buf()]).is_none());
        let h = hint(&venv.join("python"), &granted, "[servers.notes]").unwrap();
        assert!(h.contains("fs.read grant of [servers.notes]") && h.contains("base/bin"), "{h}");
    }

    #[test]
    fn a_directory_the_uid_cannot_pass_is_named() {
        use std::os::unix::fs::MetadataExt;
        let root = tempfile::tempdir().unwrap();
        std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let dir = root.path().join("private");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("tool"), b"#!/bin/sh\n").unwrap();
        std::fs::set_permissions(dir.join("tool"), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        let owner = std::fs::metadata(&dir).unwrap().uid();
        let other = if owner == 65534 { 65533 } else { 65534 };
        let (path, why) = unreachable_for(&dir.join("tool"), other, 65534).unwrap();
        assert_eq!(path, dir);
        assert!(why.contains("may not pass") && why.contains("700"), "{why}");
        assert!(unreachable_for(&dir.join("tool"), owner, 0).is_none() || owner == 0);
    }

    #[test]
    fn a_fifo_in_place_of_the_program_is_not_read() {
        let root = tempfile::tempdir().unwrap();
        let fifo = root.path().join("python");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        // Would block forever on a blocking open with no writer.
        assert_eq!(shebang(&fifo), None);
        assert!(ungranted(&fifo, &[root.path().to_path_buf()]).is_none());
    }

    #[test]
    fn names_a_scripts_interpreter_outside_the_grants() {
        let root = tempfile::tempdir().unwrap();
        let (bin, opt) = (root.path().join("bin"), root.path().join("opt"));
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::create_dir_all(&opt).unwrap();
        std::fs::write(opt.join("node"), b"\x7fELF").unwrap();
        let script = bin.join("server");
        std::fs::write(&script, format!("#!{} --flag\nconsole.log(1)\n", opt.join("node").display())).unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let (path, how) = ungranted(&script, std::slice::from_ref(&bin)).unwrap();
        assert_eq!(path, opt.canonicalize().unwrap().join("node"));
        assert!(how.contains("interpreter"), "{how}");
    }
}
