//! The protected and denied paths of a call ([`Protection`]), enforced in
//! warden's own WASI host: `wasi:filesystem/types` is wasmtime-wasi's own
//! implementation behind a wrapper ([`Guarded`]) that judges every path an
//! operation reaches, where it really lies (reopened beneath the guest's
//! descriptor, links followed and judged hop by hop, at most [`MAX_LINKS`]),
//! before letting it run. The latest refusal is kept ([`Guard::note`]) for the
//! call's error. docs/security.md, "How each runtime holds them", has the rules.

use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use rustix::fs::{Mode, OFlags, ResolveFlags};
use rustix::io::Errno;
use wasmtime::component::{HasData, Linker, Resource};
use wasmtime_wasi::filesystem::{Descriptor, WasiFilesystemCtxView, WasiFilesystemView};
use wasmtime_wasi::p2::bindings::filesystem::types::ErrorCode;
use wasmtime_wasi::p2::bindings::sync::filesystem::types as fs;
use wasmtime_wasi::p2::bindings::sync::io::streams;
use wasmtime_wasi::p2::{FsError, FsResult};

use super::HostState;
use crate::persist::{self, Change, Kind, Verdict, View};
use crate::protect::{Deny, Protection};

/// Most symbolic links followed in one path (Linux's own bound).
const MAX_LINKS: usize = 40;

/// One refused access.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Refusal {
    /// The host path that was refused.
    pub(super) path: PathBuf,
    /// What the rule refuses there.
    pub(super) deny: Deny,
    /// The rule's reason (`protected: …`, `fs.deny_read`, …).
    pub(super) why: String,
    /// What the guest tried (`open`, `rename`, …).
    pub(super) op: &'static str,
    /// The protected path beneath `path` when `path` was refused because
    /// moving or removing it would move that one away.
    pub(super) beneath: Option<PathBuf>,
}

impl Refusal {
    /// The text a failed call carries: the path, that warden's policy refused
    /// it, and the key that releases it.
    pub(super) fn message(&self) -> String {
        let what = match self.deny {
            Deny::Read => "denied (no read, write or listing)",
            Deny::Write => "protected (read-only)",
        };
        let key = if self.why.contains("protected: warden's ") {
            // warden's own files (the log, the policy, the approvals) are never released.
            "nothing"
        } else if self.why.starts_with("protected") {
            "fs.unprotect"
        } else if self.deny == Deny::Read {
            "the tool's fs.deny_read"
        } else {
            "the tool's fs.deny_write"
        };
        match &self.beneath {
            Some(inner) => format!(
                "warden refused to {} {}: {} lies beneath it, which is {what} by warden's policy ({}); {key} \
                 releases it",
                self.op,
                self.path.display(),
                inner.display(),
                self.why
            ),
            None => format!(
                "warden refused to {} {}: it is {what} by warden's policy ({}); {key} releases it",
                self.op,
                self.path.display(),
                self.why
            ),
        }
    }
}

/// The per-call state of the guard: what is protected and the latest refusal.
#[derive(Debug, Default)]
pub(super) struct Guard {
    protect: Protection,
    /// The directories the call may write (canonical), for [`persist`].
    roots: Vec<PathBuf>,
    refusal: Option<Refusal>,
    /// Where each descriptor the guest holds lies (by its handle), as the
    /// kernel said when it was opened or first judged. Forgotten when the
    /// descriptor is dropped, and all of it after a rename (which may have
    /// moved any of them).
    paths: HashMap<u32, PathBuf>,
    /// Whether anything is denied to read (otherwise reads are not judged).
    reads: bool,
}

impl Guard {
    /// A guard for one call that may write `roots`.
    pub(super) fn new(protect: Protection, roots: Vec<PathBuf>) -> Guard {
        let reads =
            protect.rules.iter().any(|r| r.deny == Deny::Read) || protect.patterns.iter().any(|p| p.deny == Deny::Read);
        Guard { protect, roots, refusal: None, paths: HashMap::new(), reads }
    }

    /// Judges a change at `path` by what may be left in a write grant
    /// ([`persist`]): against the real tree, with a created entry counted.
    fn persist(&mut self, op: &'static str, path: &Path, change: Change, kind: Kind) -> FsResult<()> {
        if self.roots.is_empty() {
            return Ok(());
        }
        let judge = persist::Judge::new(&self.roots, &self.protect);
        let view = persist::RealPlus { path, kind };
        let verdict = match change {
            Change::Create => judge.judge(&view, path, change, kind == Kind::Dir),
            _ => judge.judge(&persist::Real, path, change, kind == Kind::Dir),
        };
        let why = match verdict {
            Verdict::Allow => return Ok(()),
            Verdict::Refuse(why) => why,
            Verdict::Vet(_) => "a component may not write a .git link, a worktree's commondir or a repository's \
                                config (git submodule and git worktree, run as a process tool, may)"
                .to_string(),
        };
        Err(self.refuse(op, path, Deny::Write, format!("protected: {why}"), None))
    }

    /// Refuses moving a directory that holds a file a deny pattern matches:
    /// the pattern would no longer match it where it went.
    fn patterns_beneath(&mut self, op: &'static str, dir: &Path) -> FsResult<()> {
        if self.protect.patterns.is_empty() || !dir.is_dir() {
            return Ok(());
        }
        let mut stack = vec![dir.to_path_buf()];
        let mut walked = 0usize;
        while let Some(d) = stack.pop() {
            let entries = match std::fs::read_dir(&d) {
                Ok(e) => e,
                Err(e) => {
                    let why =
                        format!("warden cannot look inside {} for files its deny patterns cover: {e}", d.display());
                    return Err(self.refuse(op, dir, Deny::Write, why, None));
                }
            };
            for e in entries {
                walked += 1;
                let e = match e {
                    Ok(e) if walked <= crate::protect::MAX_WALK => e,
                    _ => {
                        let why = format!(
                            "warden cannot tell whether a deny pattern covers a file beneath {} (unreadable, or \
                             more than {} entries)",
                            d.display(),
                            crate::protect::MAX_WALK
                        );
                        return Err(self.refuse(op, dir, Deny::Write, why, None));
                    }
                };
                let path = e.path();
                if let Some(p) = self.protect.patterns.iter().find(|p| p.covers(&path)) {
                    let (deny, why) = (p.deny, p.why.clone());
                    return Err(self.refuse(op, dir, deny, why, Some(path)));
                }
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push(path);
                }
            }
        }
        Ok(())
    }

    /// The latest refusal, if any.
    #[cfg(test)]
    pub(super) fn refusal(&self) -> Option<&Refusal> {
        self.refusal.as_ref()
    }

    /// The latest refusal's message, if any.
    pub(super) fn note(&self) -> Option<String> {
        self.refusal.as_ref().map(Refusal::message)
    }

    /// Whether an access (a read, or a write) can be refused at all.
    fn active(&self, write: bool) -> bool {
        if write { !self.protect.is_empty() } else { self.reads }
    }

    /// Judges `path` for a read (`write` false) or a write; `pinned`: the
    /// operation would move or remove `path` itself, so a directory a protected
    /// path lies beneath is refused too.
    fn judge(&mut self, op: &'static str, path: &Path, write: bool, pinned: bool) -> FsResult<()> {
        if let Some((deny, why)) = self.protect.refusal(path, write) {
            let why = why.to_string();
            return Err(self.refuse(op, path, deny, why, None));
        }
        if pinned && self.protect.is_pinned_ancestor(path) {
            let rule =
                self.protect.rules.iter().find(|r| {
                    r.path.starts_with(path) && path.starts_with(&r.root) && r.path != path && r.root != path
                });
            let (why, beneath) = rule.map(|r| (r.why.clone(), Some(r.path.clone()))).unwrap_or_default();
            return Err(self.refuse(op, path, Deny::Write, why, beneath));
        }
        Ok(())
    }

    fn judge_all(&mut self, op: &'static str, paths: &[PathBuf], write: bool, pinned: bool) -> FsResult<()> {
        for p in paths {
            self.judge(op, p, write, pinned)?;
        }
        Ok(())
    }

    fn refuse(&mut self, op: &'static str, path: &Path, deny: Deny, why: String, beneath: Option<PathBuf>) -> FsError {
        tracing::debug!(op, path = %path.display(), ?deny, "refused by the WASI guard");
        self.refusal = Some(Refusal { path: path.to_path_buf(), deny, why, op, beneath });
        match deny {
            Deny::Read => ErrorCode::Access.into(),
            Deny::Write => ErrorCode::ReadOnly.into(),
        }
    }

    /// Fails closed when warden cannot tell where a descriptor lies.
    fn unknown(&mut self, op: &'static str) -> FsError {
        self.refusal = Some(Refusal {
            path: PathBuf::from("/proc/self/fd"),
            deny: Deny::Read,
            why: "warden needs /proc to tell where a descriptor lies when paths are protected".into(),
            op,
            beneath: None,
        });
        ErrorCode::Access.into()
    }
}

/// `wasi:filesystem/types` as the guest sees it: wasmtime-wasi's filesystem,
/// judged by the call's [`Guard`].
pub(super) struct Guarded<'a> {
    fs: WasiFilesystemCtxView<'a>,
    guard: &'a mut Guard,
}

/// [`HasData`] for [`Guarded`].
pub(super) struct GuardedFs;

impl HasData for GuardedFs {
    type Data<'a> = Guarded<'a>;
}

/// Adds every WASI interface wasmtime-wasi's `add_to_linker_sync` adds, with
/// `wasi:filesystem/types` through the guard.
pub(super) fn add_to_linker(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    use wasmtime_wasi::cli::WasiCli;
    use wasmtime_wasi::clocks::WasiClocks;
    use wasmtime_wasi::filesystem::WasiFilesystem;
    use wasmtime_wasi::p2::bindings::{cli, clocks, filesystem, random, sockets, sync};
    use wasmtime_wasi::random::{WasiRandom, WasiRandomView};
    use wasmtime_wasi::sockets::WasiSockets;
    use wasmtime_wasi::{WasiView, cli::WasiCliView, clocks::WasiClocksView, sockets::WasiSocketsView};
    type T = HostState;

    struct Io;
    impl HasData for Io {
        type Data<'a> = &'a mut wasmtime::component::ResourceTable;
    }

    let options = sync::LinkOptions::default();
    let l = linker;
    // wasmtime-wasi's add_nonblocking_to_linker.
    clocks::wall_clock::add_to_linker::<T, WasiClocks>(l, T::clocks)?;
    clocks::monotonic_clock::add_to_linker::<T, WasiClocks>(l, T::clocks)?;
    filesystem::preopens::add_to_linker::<T, WasiFilesystem>(l, |t| t.wasi.filesystem())?;
    random::random::add_to_linker::<T, WasiRandom>(l, T::random)?;
    random::insecure::add_to_linker::<T, WasiRandom>(l, T::random)?;
    random::insecure_seed::add_to_linker::<T, WasiRandom>(l, T::random)?;
    cli::exit::add_to_linker::<T, WasiCli>(l, T::cli)?;
    cli::environment::add_to_linker::<T, WasiCli>(l, T::cli)?;
    cli::stdin::add_to_linker::<T, WasiCli>(l, T::cli)?;
    cli::stdout::add_to_linker::<T, WasiCli>(l, T::cli)?;
    cli::stderr::add_to_linker::<T, WasiCli>(l, T::cli)?;
    cli::terminal_input::add_to_linker::<T, WasiCli>(l, T::cli)?;
    cli::terminal_output::add_to_linker::<T, WasiCli>(l, T::cli)?;
    cli::terminal_stdin::add_to_linker::<T, WasiCli>(l, T::cli)?;
    cli::terminal_stdout::add_to_linker::<T, WasiCli>(l, T::cli)?;
    cli::terminal_stderr::add_to_linker::<T, WasiCli>(l, T::cli)?;
    sockets::tcp_create_socket::add_to_linker::<T, WasiSockets>(l, T::sockets)?;
    sockets::instance_network::add_to_linker::<T, WasiSockets>(l, T::sockets)?;
    sockets::network::add_to_linker::<T, WasiSockets>(l, &(&options).into(), T::sockets)?;
    // Name lookup for granted names only, private answers dropped (module net).
    sockets::ip_name_lookup::add_to_linker::<T, super::net::NetLookup>(l, |t| super::net::Lookup {
        sockets: t.wasi.sockets(),
        net: &mut t.net,
    })?;
    // wasmtime-wasi's add_sync_wasi_io.
    sync::io::error::add_to_linker::<T, Io>(l, |t| t.ctx().table)?;
    sync::io::poll::add_to_linker::<T, Io>(l, |t| t.ctx().table)?;
    sync::io::streams::add_to_linker::<T, Io>(l, |t| t.ctx().table)?;
    // The rest of add_to_linker_with_options_sync, filesystem/types guarded.
    sync::filesystem::types::add_to_linker::<T, GuardedFs>(l, |t| Guarded {
        fs: t.wasi.filesystem(),
        guard: &mut t.guard,
    })?;
    sync::sockets::tcp::add_to_linker::<T, WasiSockets>(l, T::sockets)?;
    sync::sockets::udp::add_to_linker::<T, WasiSockets>(l, T::sockets)?;
    sync::sockets::udp_create_socket::add_to_linker::<T, WasiSockets>(l, T::sockets)?;
    Ok(())
}

fn io_error(e: Errno) -> FsError {
    if e == Errno::XDEV {
        // RESOLVE_BENEATH refused an escape: cap-std refuses it as not-permitted.
        return ErrorCode::NotPermitted.into();
    }
    FsError::from(std::io::Error::from(e))
}

/// warden's own `/proc/self/fd`, opened once (`None` without `/proc`).
fn proc_fds() -> Option<BorrowedFd<'static>> {
    static FDS: OnceLock<Option<OwnedFd>> = OnceLock::new();
    FDS.get_or_init(|| {
        rustix::fs::open("/proc/self/fd", OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty()).ok()
    })
    .as_ref()
    .map(|fd| fd.as_fd())
}

/// Where the kernel says an open descriptor lies.
fn real_path(fd: BorrowedFd<'_>) -> Option<PathBuf> {
    let name = fd.as_raw_fd().to_string();
    let p = rustix::fs::readlinkat(proc_fds()?, name.as_str(), Vec::new()).ok()?;
    let p = PathBuf::from(std::ffi::OsString::from_vec(p.into_bytes()));
    p.is_absolute().then_some(p)
}

/// The fast way to [`locate`] a path: when no component of `path` is `..`
/// or a symbolic link (each one is asked, `readlinkat` beneath `dir`), it lies
/// at `base` (where `dir` lies) joined with it. `None`: take the slow way.
fn locate_plain(dir: BorrowedFd<'_>, base: &Path, path: &str, follow: bool) -> Option<Vec<PathBuf>> {
    if path.starts_with('/') || path.len() > 4096 {
        return None;
    }
    let follow_last = follow || path.ends_with('/');
    let mut out = base.to_path_buf();
    let names: Vec<(usize, &str)> = path
        .split('/')
        .scan(0, |at, c| {
            let end = *at + c.len();
            *at = end + 1;
            Some((end, c))
        })
        .filter(|(_, c)| !c.is_empty() && *c != ".")
        .collect();
    for (i, &(end, c)) in names.iter().enumerate() {
        if c == ".." {
            return None;
        }
        out.push(c);
        let last = i + 1 == names.len();
        if !last || follow_last {
            // The prefix of `path` up to this component.
            match rustix::fs::readlinkat(dir, &path[..end], Vec::new()) {
                Err(Errno::INVAL) => {}
                Err(Errno::NOENT) if last => {}
                _ => return None,
            }
        }
    }
    Some(vec![out])
}

/// Opens `path` beneath `dir` as the kernel resolves it there (links followed,
/// `..` never above `dir`), for its location only.
fn open_beneath(dir: BorrowedFd<'_>, path: &str, directory: bool) -> Result<OwnedFd, Errno> {
    let mut flags = OFlags::PATH | OFlags::CLOEXEC;
    if directory {
        flags |= OFlags::DIRECTORY;
    }
    let path = if path.is_empty() { "." } else { path };
    let mut tries = 0;
    loop {
        match rustix::fs::openat2(dir, path, flags, Mode::empty(), ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS)
        {
            // A rename elsewhere raced a `..`: the kernel asks to try again.
            Err(Errno::AGAIN) if tries < 8 => tries += 1,
            other => return other,
        }
    }
}

/// The host paths an operation on `path` relative to `dir` reaches: the entry
/// itself (its directory resolved by the kernel), and with `follow` each
/// symbolic link's target in turn, as cap-std follows them (relative to the
/// link's directory, never above `dir`; absolute targets are refused).
/// `Err(None)`: warden cannot tell where a directory lies (no `/proc`).
fn locate(dir: BorrowedFd<'_>, path: &str, follow: bool) -> Result<Vec<PathBuf>, Option<FsError>> {
    let mut chain = Vec::with_capacity(1);
    let mut rest = path.to_string();
    for _ in 0..=MAX_LINKS {
        if rest.starts_with('/') {
            return Err(Some(ErrorCode::NotPermitted.into()));
        }
        let trimmed = rest.trim_end_matches('/');
        // `name/` follows a link at `name` (and must be a directory).
        let follow_last = follow || trimmed.len() != rest.len();
        let (parent, name) = match trimmed.rfind('/') {
            Some(i) => (&trimmed[..i], &trimmed[i + 1..]),
            None => ("", trimmed),
        };
        if name.is_empty() || name == "." || name == ".." {
            let fd = open_beneath(dir, trimmed, true).map_err(|e| Some(io_error(e)))?;
            chain.push(real_path(fd.as_fd()).ok_or(None)?);
            return Ok(chain);
        }
        let parent_fd = open_beneath(dir, parent, true).map_err(|e| Some(io_error(e)))?;
        let mut entry = real_path(parent_fd.as_fd()).ok_or(None)?;
        entry.push(name);
        chain.push(entry);
        if !follow_last {
            return Ok(chain);
        }
        match rustix::fs::readlinkat(parent_fd.as_fd(), name, Vec::new()) {
            Ok(target) => {
                let target = target.to_string_lossy().into_owned();
                rest = if parent.is_empty() { target } else { format!("{parent}/{target}") };
            }
            // Not a link, or nothing there (yet): the entry is where it lands.
            Err(Errno::INVAL | Errno::NOENT) => return Ok(chain),
            Err(e) => return Err(Some(io_error(e))),
        }
    }
    Err(Some(ErrorCode::Loop.into()))
}

impl Guarded<'_> {
    /// The raw descriptor behind a guest descriptor, borrowed from the table.
    fn host_fd(&self, fd: &Resource<Descriptor>) -> FsResult<BorrowedFd<'_>> {
        Ok(match self.fs.table.get(fd)? {
            Descriptor::File(f) => f.file.as_fd(),
            Descriptor::Dir(d) => d.dir.as_fd(),
        })
    }

    /// Where a descriptor lies: remembered, or asked of the kernel.
    fn where_is(&mut self, op: &'static str, fd: &Resource<Descriptor>) -> FsResult<PathBuf> {
        if let Some(p) = self.guard.paths.get(&fd.rep()) {
            return Ok(p.clone());
        }
        match real_path(self.host_fd(fd)?) {
            Some(p) => {
                self.guard.paths.insert(fd.rep(), p.clone());
                Ok(p)
            }
            None => Err(self.guard.unknown(op)),
        }
    }

    /// The paths an operation reaches.
    fn reach(
        &mut self,
        op: &'static str,
        fd: &Resource<Descriptor>,
        path: &str,
        follow: bool,
    ) -> FsResult<Vec<PathBuf>> {
        let base = self.where_is(op, fd)?;
        let dir = self.host_fd(fd)?;
        if let Some(chain) = locate_plain(dir, &base, path, follow) {
            return Ok(chain);
        }
        match locate(dir, path, follow) {
            Ok(chain) => Ok(chain),
            Err(Some(e)) => Err(e),
            Err(None) => Err(self.guard.unknown(op)),
        }
    }

    /// Judges an operation on `path` relative to `fd`.
    fn check_at(
        &mut self,
        op: &'static str,
        fd: &Resource<Descriptor>,
        path: &str,
        follow: bool,
        write: bool,
        pinned: bool,
    ) -> FsResult<Vec<PathBuf>> {
        if !self.guard.active(write) {
            return Ok(Vec::new());
        }
        let chain = self.reach(op, fd, path, follow)?;
        self.guard.judge_all(op, &chain, write, pinned)?;
        Ok(chain)
    }

    /// Judges a change at `path` relative to `fd`: the paths it reaches, then
    /// what it leaves where it lands ([`persist`]).
    fn check_change(
        &mut self,
        op: &'static str,
        fd: &Resource<Descriptor>,
        path: &str,
        follow: bool,
        pinned: bool,
        (change, kind): (Change, Kind),
    ) -> FsResult<Vec<PathBuf>> {
        let chain = self.check_at(op, fd, path, follow, true, pinned)?;
        if let Some(last) = chain.last() {
            let change = if change == Change::Create && persist::Real.exists(last) { Change::Modify } else { change };
            self.guard.persist(op, last, change, kind)?;
        }
        Ok(chain)
    }

    /// Judges an operation on the descriptor itself.
    fn check_fd(&mut self, op: &'static str, fd: &Resource<Descriptor>, write: bool) -> FsResult<()> {
        if !self.guard.active(write) {
            return Ok(());
        }
        let path = self.where_is(op, fd)?;
        self.guard.judge(op, &path, write, false)?;
        if write {
            let kind = if path.is_dir() { Kind::Dir } else { Kind::File };
            self.guard.persist(op, &path, Change::Modify, kind)?;
        }
        Ok(())
    }
}

impl fs::Host for Guarded<'_> {
    fn convert_error_code(&mut self, err: FsError) -> wasmtime::Result<fs::ErrorCode> {
        fs::Host::convert_error_code(&mut self.fs, err)
    }

    fn filesystem_error_code(&mut self, err: Resource<streams::Error>) -> wasmtime::Result<Option<fs::ErrorCode>> {
        fs::Host::filesystem_error_code(&mut self.fs, err)
    }
}

/// A metadata hash made from a path alone.
fn path_hash(path: &Path) -> fs::MetadataHashValue {
    use std::hash::{DefaultHasher, Hash, Hasher};
    let mut h = DefaultHasher::new();
    path.hash(&mut h);
    let lower = h.finish();
    lower.hash(&mut h);
    fs::MetadataHashValue { lower, upper: h.finish() }
}

fn follows(flags: fs::PathFlags) -> bool {
    flags.contains(fs::PathFlags::SYMLINK_FOLLOW)
}

impl fs::HostDescriptor for Guarded<'_> {
    fn advise(
        &mut self,
        fd: Resource<fs::Descriptor>,
        offset: fs::Filesize,
        len: fs::Filesize,
        advice: fs::Advice,
    ) -> FsResult<()> {
        fs::HostDescriptor::advise(&mut self.fs, fd, offset, len, advice)
    }

    fn sync_data(&mut self, fd: Resource<fs::Descriptor>) -> FsResult<()> {
        fs::HostDescriptor::sync_data(&mut self.fs, fd)
    }

    fn get_flags(&mut self, fd: Resource<fs::Descriptor>) -> FsResult<fs::DescriptorFlags> {
        fs::HostDescriptor::get_flags(&mut self.fs, fd)
    }

    fn get_type(&mut self, fd: Resource<fs::Descriptor>) -> FsResult<fs::DescriptorType> {
        fs::HostDescriptor::get_type(&mut self.fs, fd)
    }

    fn set_size(&mut self, fd: Resource<fs::Descriptor>, size: fs::Filesize) -> FsResult<()> {
        self.check_fd("truncate", &fd, true)?;
        fs::HostDescriptor::set_size(&mut self.fs, fd, size)
    }

    fn set_times(
        &mut self,
        fd: Resource<fs::Descriptor>,
        atim: fs::NewTimestamp,
        mtim: fs::NewTimestamp,
    ) -> FsResult<()> {
        self.check_fd("set the times of", &fd, true)?;
        fs::HostDescriptor::set_times(&mut self.fs, fd, atim, mtim)
    }

    fn read(
        &mut self,
        fd: Resource<fs::Descriptor>,
        len: fs::Filesize,
        offset: fs::Filesize,
    ) -> FsResult<(Vec<u8>, bool)> {
        self.check_fd("read", &fd, false)?;
        fs::HostDescriptor::read(&mut self.fs, fd, len, offset)
    }

    fn write(&mut self, fd: Resource<fs::Descriptor>, buf: Vec<u8>, offset: fs::Filesize) -> FsResult<fs::Filesize> {
        self.check_fd("write", &fd, true)?;
        fs::HostDescriptor::write(&mut self.fs, fd, buf, offset)
    }

    fn read_directory(&mut self, fd: Resource<fs::Descriptor>) -> FsResult<Resource<fs::DirectoryEntryStream>> {
        self.check_fd("list", &fd, false)?;
        fs::HostDescriptor::read_directory(&mut self.fs, fd)
    }

    fn sync(&mut self, fd: Resource<fs::Descriptor>) -> FsResult<()> {
        fs::HostDescriptor::sync(&mut self.fs, fd)
    }

    fn create_directory_at(&mut self, fd: Resource<fs::Descriptor>, path: String) -> FsResult<()> {
        self.check_change("create", &fd, &path, false, false, (Change::Create, Kind::Dir))?;
        fs::HostDescriptor::create_directory_at(&mut self.fs, fd, path)
    }

    fn stat(&mut self, fd: Resource<fs::Descriptor>) -> FsResult<fs::DescriptorStat> {
        fs::HostDescriptor::stat(&mut self.fs, fd)
    }

    fn stat_at(
        &mut self,
        fd: Resource<fs::Descriptor>,
        path_flags: fs::PathFlags,
        path: String,
    ) -> FsResult<fs::DescriptorStat> {
        self.check_at("stat", &fd, &path, follows(path_flags), false, false)?;
        fs::HostDescriptor::stat_at(&mut self.fs, fd, path_flags, path)
    }

    fn set_times_at(
        &mut self,
        fd: Resource<fs::Descriptor>,
        path_flags: fs::PathFlags,
        path: String,
        atim: fs::NewTimestamp,
        mtim: fs::NewTimestamp,
    ) -> FsResult<()> {
        self.check_change("set the times of", &fd, &path, follows(path_flags), false, (Change::Modify, Kind::File))?;
        fs::HostDescriptor::set_times_at(&mut self.fs, fd, path_flags, path, atim, mtim)
    }

    fn link_at(
        &mut self,
        fd: Resource<fs::Descriptor>,
        old_path_flags: fs::PathFlags,
        old_path: String,
        new_descriptor: Resource<fs::Descriptor>,
        new_path: String,
    ) -> FsResult<()> {
        // A second name for a protected file would be a way to write it, and
        // for a denied one a way to read it: the source is judged as a write.
        self.check_at("link", &fd, &old_path, follows(old_path_flags), true, false)?;
        self.check_change("link", &new_descriptor, &new_path, false, true, (Change::Create, Kind::File))?;
        fs::HostDescriptor::link_at(&mut self.fs, fd, old_path_flags, old_path, new_descriptor, new_path)
    }

    fn open_at(
        &mut self,
        fd: Resource<fs::Descriptor>,
        path_flags: fs::PathFlags,
        path: String,
        oflags: fs::OpenFlags,
        flags: fs::DescriptorFlags,
    ) -> FsResult<Resource<fs::Descriptor>> {
        let write = oflags.intersects(fs::OpenFlags::CREATE | fs::OpenFlags::TRUNCATE | fs::OpenFlags::EXCLUSIVE)
            || flags.intersects(fs::DescriptorFlags::WRITE | fs::DescriptorFlags::MUTATE_DIRECTORY);
        if !self.guard.active(write) {
            return fs::HostDescriptor::open_at(&mut self.fs, fd, path_flags, path, oflags, flags);
        }
        let op = if write { "open for writing" } else { "open" };
        if write {
            let kind =
                if flags.contains(fs::DescriptorFlags::MUTATE_DIRECTORY) || oflags.contains(fs::OpenFlags::DIRECTORY) {
                    Kind::Dir
                } else {
                    Kind::File
                };
            let change = if oflags.contains(fs::OpenFlags::CREATE) { Change::Create } else { Change::Modify };
            self.check_change(op, &fd, &path, follows(path_flags), false, (change, kind))?;
        } else {
            self.check_at(op, &fd, &path, follows(path_flags), write, false)?;
        }
        let opened = fs::HostDescriptor::open_at(&mut self.fs, fd, path_flags, path, oflags, flags)?;
        // Judged again where the kernel says the new descriptor lies (a link
        // swapped in since the check lands here).
        self.guard.paths.remove(&opened.rep());
        let landed = self.where_is(op, &opened).and_then(|p| self.guard.judge(op, &p, write, false));
        if let Err(e) = landed {
            self.guard.paths.remove(&opened.rep());
            fs::HostDescriptor::drop(&mut self.fs, opened).map_err(FsError::trap)?;
            return Err(e);
        }
        Ok(opened)
    }

    fn drop(&mut self, fd: Resource<fs::Descriptor>) -> wasmtime::Result<()> {
        // Handles are reused: a later descriptor must not inherit this one's path.
        self.guard.paths.remove(&fd.rep());
        fs::HostDescriptor::drop(&mut self.fs, fd)
    }

    fn readlink_at(&mut self, fd: Resource<fs::Descriptor>, path: String) -> FsResult<String> {
        self.check_at("read the link", &fd, &path, false, false, false)?;
        fs::HostDescriptor::readlink_at(&mut self.fs, fd, path)
    }

    fn remove_directory_at(&mut self, fd: Resource<fs::Descriptor>, path: String) -> FsResult<()> {
        self.check_change("remove", &fd, &path, false, true, (Change::Delete, Kind::Dir))?;
        fs::HostDescriptor::remove_directory_at(&mut self.fs, fd, path)
    }

    fn rename_at(
        &mut self,
        fd: Resource<fs::Descriptor>,
        old_path: String,
        new_fd: Resource<fs::Descriptor>,
        new_path: String,
    ) -> FsResult<()> {
        let from = self.check_change("rename", &fd, &old_path, false, true, (Change::Delete, Kind::File))?;
        let kind = match from.last() {
            Some(p) if p.is_dir() => {
                self.guard.patterns_beneath("rename", p)?;
                Kind::Dir
            }
            Some(p) if persist::Real.kind(p) == Some(Kind::Link) => Kind::Link,
            _ => Kind::File,
        };
        self.check_change("rename onto", &new_fd, &new_path, false, true, (Change::Create, kind))?;
        let renamed = fs::HostDescriptor::rename_at(&mut self.fs, fd, old_path, new_fd, new_path);
        // Any descriptor may lie beneath what moved: ask the kernel again.
        self.guard.paths.clear();
        renamed
    }

    fn symlink_at(&mut self, fd: Resource<fs::Descriptor>, src_path: String, dest_path: String) -> FsResult<()> {
        // A link in place of a directory a protected path lies beneath (`.git`
        // absent, `.git -> elsewhere`) would move that path where the rules
        // do not look, while the host's git still finds it by name.
        self.check_change("create the link", &fd, &dest_path, false, true, (Change::Create, Kind::Link))?;
        fs::HostDescriptor::symlink_at(&mut self.fs, fd, src_path, dest_path)
    }

    fn unlink_file_at(&mut self, fd: Resource<fs::Descriptor>, path: String) -> FsResult<()> {
        self.check_change("delete", &fd, &path, false, true, (Change::Delete, Kind::File))?;
        fs::HostDescriptor::unlink_file_at(&mut self.fs, fd, path)
    }

    fn read_via_stream(
        &mut self,
        fd: Resource<fs::Descriptor>,
        offset: fs::Filesize,
    ) -> FsResult<Resource<streams::InputStream>> {
        self.check_fd("read", &fd, false)?;
        fs::HostDescriptor::read_via_stream(&mut self.fs, fd, offset)
    }

    fn write_via_stream(
        &mut self,
        fd: Resource<fs::Descriptor>,
        offset: fs::Filesize,
    ) -> FsResult<Resource<streams::OutputStream>> {
        self.check_fd("write", &fd, true)?;
        fs::HostDescriptor::write_via_stream(&mut self.fs, fd, offset)
    }

    fn append_via_stream(&mut self, fd: Resource<fs::Descriptor>) -> FsResult<Resource<streams::OutputStream>> {
        self.check_fd("append to", &fd, true)?;
        fs::HostDescriptor::append_via_stream(&mut self.fs, fd)
    }

    fn is_same_object(&mut self, a: Resource<fs::Descriptor>, b: Resource<fs::Descriptor>) -> wasmtime::Result<bool> {
        fs::HostDescriptor::is_same_object(&mut self.fs, a, b)
    }

    fn metadata_hash(&mut self, fd: Resource<fs::Descriptor>) -> FsResult<fs::MetadataHashValue> {
        fs::HostDescriptor::metadata_hash(&mut self.fs, fd)
    }

    fn metadata_hash_at(
        &mut self,
        fd: Resource<fs::Descriptor>,
        path_flags: fs::PathFlags,
        path: String,
    ) -> FsResult<fs::MetadataHashValue> {
        if !self.guard.active(false) {
            return fs::HostDescriptor::metadata_hash_at(&mut self.fs, fd, path_flags, path);
        }
        let chain = self.reach("stat", &fd, &path, follows(path_flags))?;
        let hash = fs::HostDescriptor::metadata_hash_at(&mut self.fs, fd, path_flags, path)?;
        // A directory listing asks for every entry's hash (wasi-libc's inode
        // number): a denied entry's is made from its path, not its metadata,
        // so that listing its parent neither fails nor tells anything more.
        match chain.iter().find(|p| self.guard.protect.refusal(p, false).is_some()) {
            Some(denied) => Ok(path_hash(denied)),
            None => Ok(hash),
        }
    }
}

impl fs::HostDirectoryEntryStream for Guarded<'_> {
    fn read_directory_entry(
        &mut self,
        stream: Resource<fs::DirectoryEntryStream>,
    ) -> FsResult<Option<fs::DirectoryEntry>> {
        fs::HostDirectoryEntryStream::read_directory_entry(&mut self.fs, stream)
    }

    fn drop(&mut self, stream: Resource<fs::DirectoryEntryStream>) -> wasmtime::Result<()> {
        fs::HostDirectoryEntryStream::drop(&mut self.fs, stream)
    }
}

#[cfg(test)]
mod tests;
