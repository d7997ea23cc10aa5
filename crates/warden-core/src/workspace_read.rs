//! Host-side reads of workspace content ([`read_beneath`], [`Dir`]): opened once
//! beneath the workspace fd with `openat2` (no link of any kind followed),
//! regular files only, at most a bound ([`Bounded`]); no path-based fallback.
//! Tools run concurrently with the host, so nothing under `{workspace}` is
//! resolved twice. docs/security.md, "Host-side reads of the workspace", has
//! the steps.

#![forbid(unsafe_code)]

use std::fmt;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{CWD, FileType, Mode, OFlags, ResolveFlags, fstat, openat2};
use rustix::io::Errno;

/// What a bounded read returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bounded {
    /// At most the bound's worth of bytes.
    pub bytes: Vec<u8>,
    /// Whether the file held more than the bound (and `bytes` is its start).
    pub truncated: bool,
}

/// Why a host-side read did not happen.
#[derive(Debug)]
pub enum ReadError {
    /// Nothing is there (or a component of the path is not a directory).
    NotFound,
    /// The path leaves the directory (`..` above it, or an absolute path elsewhere).
    Outside,
    /// A symbolic link lies on the path: host-side reads follow none.
    Symlink,
    /// It is not a regular file; the kind it is.
    NotRegular(&'static str),
    /// The kernel has no `openat2` (or a filter refuses it): nothing is read.
    Unsupported,
    /// Any other failure.
    Io(std::io::Error),
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::NotFound => f.write_str("no such file"),
            ReadError::Outside => f.write_str("the path leads outside the directory it is read beneath"),
            ReadError::Symlink => f.write_str("a symbolic link is on the path, and host-side reads follow none"),
            ReadError::NotRegular(kind) => write!(f, "not a regular file ({kind})"),
            ReadError::Unsupported => {
                f.write_str("this kernel offers no openat2 (Linux 5.6 or later), so warden reads nothing here")
            }
            ReadError::Io(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for ReadError {}

fn refusal(e: Errno) -> ReadError {
    match e {
        Errno::NOENT | Errno::NOTDIR => ReadError::NotFound,
        Errno::XDEV => ReadError::Outside,
        Errno::LOOP => ReadError::Symlink,
        Errno::NOSYS => ReadError::Unsupported,
        other => ReadError::Io(other.into()),
    }
}

const RESOLVE: ResolveFlags = ResolveFlags::BENEATH.union(ResolveFlags::NO_SYMLINKS).union(ResolveFlags::NO_MAGICLINKS);

/// A directory held open, beneath which files are read.
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
    path: PathBuf,
}

impl Dir {
    /// Opens the directory at `canonical`, an absolute path with no symbolic link
    /// in it (a link anywhere on it is refused, not followed).
    pub fn open(canonical: &Path) -> Result<Dir, ReadError> {
        if !canonical.is_absolute() {
            return Err(ReadError::Io(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{} is not an absolute path", canonical.display()),
            )));
        }
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let fd = openat2(CWD, canonical, flags, Mode::empty(), ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS)
            .map_err(refusal)?;
        Ok(Dir { fd, path: canonical.to_path_buf() })
    }

    /// The path it was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `path` relative to this directory: a relative path as it is, an absolute
    /// one with this directory's path removed (refused when it is elsewhere).
    fn relative<'a>(&self, path: &'a Path) -> Result<&'a Path, ReadError> {
        let rel =
            if path.is_absolute() { path.strip_prefix(&self.path).map_err(|_| ReadError::Outside)? } else { path };
        if rel.components().any(|c| matches!(c, Component::RootDir | Component::Prefix(_))) {
            return Err(ReadError::Outside);
        }
        Ok(if rel.as_os_str().is_empty() { Path::new(".") } else { rel })
    }

    /// Reads at most `max` bytes of the regular file at `path` beneath this
    /// directory, opening it once and following no link.
    pub fn read(&self, path: &Path, max: u64) -> Result<Bounded, ReadError> {
        let rel = self.relative(path)?;
        let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
        let fd = openat2(&self.fd, rel, flags, Mode::empty(), RESOLVE).map_err(refusal)?;
        let st = fstat(&fd).map_err(|e| ReadError::Io(e.into()))?;
        match FileType::from_raw_mode(st.st_mode) {
            FileType::RegularFile => {}
            FileType::Directory => return Err(ReadError::NotRegular("a directory")),
            FileType::Fifo => return Err(ReadError::NotRegular("a FIFO")),
            FileType::CharacterDevice => return Err(ReadError::NotRegular("a character device")),
            FileType::BlockDevice => return Err(ReadError::NotRegular("a block device")),
            FileType::Socket => return Err(ReadError::NotRegular("a socket")),
            FileType::Symlink => return Err(ReadError::Symlink),
            FileType::Unknown => return Err(ReadError::NotRegular("of an unknown kind")),
        }
        let mut bytes = Vec::new();
        std::fs::File::from(fd).take(max.saturating_add(1)).read_to_end(&mut bytes).map_err(ReadError::Io)?;
        let truncated = bytes.len() as u64 > max;
        if truncated {
            bytes.truncate(usize::try_from(max).unwrap_or(usize::MAX));
        }
        Ok(Bounded { bytes, truncated })
    }
}

/// [`Dir::open`] of `dir`, then [`Dir::read`] of `path` beneath it.
pub fn read_beneath(dir: &Path, path: &Path, max: u64) -> Result<Bounded, ReadError> {
    Dir::open(dir)?.read(path, max)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::os::unix::fs::symlink;
    use std::time::{Duration, Instant};

    use super::*;

    fn ws() -> (tempfile::TempDir, PathBuf) {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().canonicalize().unwrap();
        (d, p)
    }

    #[test]
    fn a_regular_file_is_read() {
        let (_d, ws) = ws();
        std::fs::write(ws.join("a.txt"), "hello").unwrap();
        let got = read_beneath(&ws, Path::new("a.txt"), 100).unwrap();
        assert_eq!(got, Bounded { bytes: b"hello".to_vec(), truncated: false });
        // An absolute path inside the directory is made relative.
        assert_eq!(read_beneath(&ws, &ws.join("a.txt"), 100).unwrap().bytes, b"hello");
        // Exactly the bound is not cut.
        assert!(!read_beneath(&ws, Path::new("a.txt"), 5).unwrap().truncated);
    }

    #[test]
    fn a_file_larger_than_the_bound_is_cut_at_the_bound() {
        let (_d, ws) = ws();
        std::fs::write(ws.join("big"), vec![b'x'; 10_000]).unwrap();
        let got = read_beneath(&ws, Path::new("big"), 4096).unwrap();
        assert_eq!(got.bytes.len(), 4096);
        assert!(got.truncated);
    }

    #[test]
    fn a_symbolic_link_anywhere_on_the_path_is_refused() {
        let (_d, ws) = ws();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "SECRET").unwrap();
        std::fs::create_dir(ws.join("sub")).unwrap();
        std::fs::write(ws.join("sub/in.txt"), "inside").unwrap();
        symlink(outside.path(), ws.join("dirlink")).unwrap();
        symlink(outside.path().join("secret"), ws.join("filelink")).unwrap();
        // Even a link that stays inside is not followed.
        symlink(ws.join("sub"), ws.join("inner")).unwrap();
        for p in ["dirlink/secret", "filelink", "inner/in.txt"] {
            let e = read_beneath(&ws, Path::new(p), 100).unwrap_err();
            assert!(matches!(e, ReadError::Symlink), "{p}: {e:?}");
        }
        // The directory itself reached through a link is refused too.
        let e = read_beneath(&ws.join("inner"), Path::new("in.txt"), 100).unwrap_err();
        assert!(matches!(e, ReadError::Symlink), "{e:?}");
    }

    #[test]
    fn dot_dot_out_and_absolute_paths_elsewhere_are_refused() {
        let (_d, ws) = ws();
        std::fs::create_dir(ws.join("sub")).unwrap();
        std::fs::write(ws.join("a.txt"), "a").unwrap();
        for p in ["../a.txt", "./../sub/../a.txt", "/etc/passwd"] {
            let e = read_beneath(&ws.join("sub"), Path::new(p), 100).unwrap_err();
            assert!(matches!(e, ReadError::Outside), "{p}: {e:?}");
        }
        // `..` that stays beneath is fine.
        assert_eq!(read_beneath(&ws, Path::new("sub/../a.txt"), 100).unwrap().bytes, b"a");
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let (_d, ws) = ws();
        rustix::fs::mknodat(CWD, ws.join("fifo"), FileType::Fifo, Mode::from_raw_mode(0o600), 0).unwrap();
        let started = Instant::now();
        let e = read_beneath(&ws, Path::new("fifo"), 100).unwrap_err();
        assert!(matches!(e, ReadError::NotRegular("a FIFO")), "{e:?}");
        assert!(started.elapsed() < Duration::from_secs(2));
    }

    #[test]
    fn dev_zero_through_a_link_and_directories_are_refused() {
        let (_d, ws) = ws();
        symlink("/dev/zero", ws.join("zero")).unwrap();
        assert!(matches!(read_beneath(&ws, Path::new("zero"), 100).unwrap_err(), ReadError::Symlink));
        // Read beneath /dev itself, it is a device, not a file.
        let e = read_beneath(Path::new("/dev"), Path::new("zero"), 100).unwrap_err();
        assert!(matches!(e, ReadError::NotRegular("a character device")), "{e:?}");
        std::fs::create_dir(ws.join("d")).unwrap();
        assert!(matches!(read_beneath(&ws, Path::new("d"), 100).unwrap_err(), ReadError::NotRegular("a directory")));
        assert!(matches!(read_beneath(&ws, Path::new(""), 100).unwrap_err(), ReadError::NotRegular("a directory")));
        assert!(matches!(read_beneath(&ws, Path::new("missing"), 100).unwrap_err(), ReadError::NotFound));
    }

    #[test]
    fn proc_files_are_read_to_the_bound_whatever_their_size_says() {
        // /proc/PID/status reports st_size 0 but has content.
        let proc = PathBuf::from(format!("/proc/{}", std::process::id()));
        let got = read_beneath(&proc, Path::new("status"), 16).unwrap();
        assert_eq!(got.bytes.len(), 16);
        assert!(got.truncated);
    }
}
