//! The audit log ([`AuditLog`], its [`Record`]s): one JSON line per call (a
//! background job writes two, same call id), fsynced before the result is
//! returned and chained by hashes (`seq`, `prev`) so that edits, removals and
//! reorders before the last line are detected ([`verify`]; [`stats`]).
//!
//! Appends hold an exclusive `flock`, so several warden processes share one
//! log; [`AuditLog::check_writable`] reserves a record's space before the tool
//! runs, and `serve` grows the log in blank fill ([`AuditLog::grow_in_chunks`]).
//! Torn lines, reservations and the fill are described in docs/security.md,
//! "Durability and load" and "The audit chain needs an external anchor".

#![forbid(unsafe_code)]

use std::collections::HashSet;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::ThreadId;

use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::approval::ApprovedBy;
use crate::policy::Tier;
use crate::runtime::{SandboxReport, Usage};

/// `prev` of the first record.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";
/// Longest string argument kept in a record (the hash covers the whole).
const MAX_ARG_STRING: usize = 4096;
/// Most bytes of arguments kept in a record.
const MAX_ARGS_BYTES: usize = 16 << 10;
/// How far back from the end a writer looks for the last line.
const TAIL_WINDOW: u64 = 1 << 20;
/// How far it looks first: two of the longest records.
const NEAR_WINDOW: u64 = 2 * MAX_RECORD_BYTES as u64;
/// The longest line the log holds, its newline included, and the space reserved
/// for each call in flight. A record is at most: the arguments (cut to
/// `MAX_ARGS_BYTES` = 16 KiB of JSON), the tool name (256 characters, at most
/// 1.5 KiB escaped), three hashes and ids (about 200 bytes), the rule's
/// `file:line:column` and the sandbox's granted directories and destinations
/// (as many as the policy grants), and a few hundred bytes of fixed fields.
/// Only a policy with very long paths or very many grants comes near the
/// bound; a record above it is shrunk (its largest fields cut, `"shrunk":
/// true` added), never torn or refused.
pub const MAX_RECORD_BYTES: usize = 32 << 10;

/// What was decided for a call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// It ran (or was cleared to run).
    Allowed,
    /// The policy denied it.
    Denied,
    /// It needed approval and nobody could answer.
    ApprovalRequired,
    /// Someone said no.
    Rejected,
    /// It failed before a decision (unknown tool, invalid arguments).
    #[default]
    None,
}

/// One call's record, before it is chained.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Record {
    /// RFC 3339 UTC time the call started.
    pub ts: String,
    /// The call's id.
    pub call_id: String,
    /// The session (one CLI process, or one MCP connection).
    pub session: String,
    /// The requested tool name.
    pub tool: String,
    /// sha256 of the arguments' JSON.
    pub args_sha256: String,
    /// The arguments, secrets redacted and long values cut.
    pub args: Value,
    /// The tier the decision came to.
    pub tier: Option<Tier>,
    /// The rule that set the tier, `file:line:column`.
    pub rule: Option<String>,
    /// What was decided.
    pub decision: Decision,
    /// Who approved it.
    pub approved_by: Option<ApprovedBy>,
    /// `success`, `error`, `rejected` or `cancelled`; `running` in the start
    /// record of a background job (its end record has the same call id).
    pub status: &'static str,
    /// The error code, if any.
    pub error_code: Option<&'static str>,
    /// Wall time of the whole call.
    pub duration_ms: f64,
    /// What the tool used.
    pub usage: Option<Usage>,
    /// The sandbox it ran under.
    pub sandbox: Option<SandboxReport>,
    /// What it asked of the network, as warden's egress proxy saw it: counts,
    /// bytes, and each attempt (host, port, address, allowed or refused and
    /// why, bytes each way, duration).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<Value>,
    /// How the program ended, for a call that ran one (process tools and
    /// command components): `{"exit_code": N}` or `{"signal": "SIGKILL"}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit: Option<Value>,
    /// The `--profile` the call was made under.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// What the result cache did: `{"hit": true, "call_id": first call, "age_ms"}`,
    /// `{"hit": false}`, or `{"hit": false, "bypassed": why}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache: Option<Value>,
    /// What a content result (`warden:plugin@0.2.0`) held, as returned to the
    /// caller: each block's type, MIME type and size in bytes, and the size of
    /// its structured content; never the bytes themselves.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<Value>,
}

#[derive(Serialize)]
struct Chained<'a> {
    #[serde(flatten)]
    record: &'a Record,
    seq: u64,
    prev: String,
}

#[derive(Debug)]
struct Head {
    len: u64,
    seq: u64,
    prev: String,
    /// The file's size when this head was current: a writer that grew the
    /// file (a warden older than the fill) changed it.
    size: u64,
}

/// What the writers of one log share, behind its mutex.
#[derive(Debug, Default)]
struct Commit {
    /// The last line this process wrote, to chain the next one without reading the file.
    head: Option<Head>,
    /// Lines written by this process (each writer's ticket).
    written: u64,
    /// Every ticket up to this one is durable.
    durable: u64,
    /// `fdatasync` calls made (each covers one or more lines).
    syncs: u64,
    /// A writer is in `fdatasync` for everything written before it started.
    syncing: bool,
    /// An `fdatasync` failed: after that the kernel may have dropped the dirty
    /// pages and a later sync can succeed without them, so no later record is
    /// trusted to be durable (the PostgreSQL lesson). Every append fails from then on.
    failed: Option<String>,
    /// The threads that passed [`AuditLog::check_writable`] and have not appended
    /// since: each has [`MAX_RECORD_BYTES`] reserved past the end of the log (a
    /// call checks and appends on one thread; a thread checking twice holds one).
    reserved: HashSet<ThreadId>,
    /// The file system refused `fallocate` (`EOPNOTSUPP`): nothing is reserved,
    /// only the free-space check stands.
    no_prealloc: bool,
    /// Grow the log in chunks of this much blank fill (0: by each line, with
    /// reservations past the end).
    growth: u64,
    /// The log has been closed ([`AuditLog::close`]).
    closed: bool,
}

/// An open audit log.
///
/// Appends are serialised (the chain needs an order) but their `fdatasync` is
/// shared: a writer that finds no sync under way syncs everything written so
/// far, and the writers that wrote meanwhile wait for it, or for the next one
/// (group commit). No append returns before an `fdatasync` that began after its
/// line was written has succeeded.
#[derive(Debug)]
pub struct AuditLog {
    path: PathBuf,
    file: File,
    /// The log's file system suits blank fill ([`fill_supported`]).
    fill: bool,
    commit: Mutex<Commit>,
    synced: Condvar,
}

/// The log's blank fill: zero bytes. A record never holds one (JSON escapes
/// control characters), so a zero inside a line is a part of an overwrite that
/// a crash kept from the disk, whether the block still held fill or was never
/// written (a file system shows those as zeros).
fn is_fill(b: u8) -> bool {
    b == 0
}

/// Whether the log's file system overwrites written blocks in place (so an
/// overwrite of fill cannot fail for want of space) and keeps `flock`s and OFD
/// locks apart (NFS and SMB emulate `flock` with byte-range locks): ext4, XFS
/// and tmpfs. Elsewhere the log is never grown in chunks.
fn fill_supported(file: &File) -> bool {
    use nix::sys::statfs::{EXT4_SUPER_MAGIC, TMPFS_MAGIC, XFS_SUPER_MAGIC, fstatfs};
    fstatfs(file).is_ok_and(|fs| [EXT4_SUPER_MAGIC, XFS_SUPER_MAGIC, TMPFS_MAGIC].contains(&fs.filesystem_type()))
}

/// How much fill a writer that grows in chunks adds at a time (about 1,500 records).
pub const GROWTH_CHUNK: u64 = 1 << 20;
/// How far back a writer looks through fill for the last line before giving up.
const MAX_FILL_SCAN: u64 = 64 << 20;
/// The byte of the log's range whose shared OFD lock says "a warden has this log
/// open" (far past any real end; `flock`s and OFD locks do not interact).
const PRESENCE_BYTE: i64 = 1 << 62;

/// The least free space the log's file system must have before a tool runs.
pub const MIN_FREE_BYTES: u64 = 1 << 20;

/// Checks that `file` is still the file at `path` (not removed, or replaced by
/// another) and not immutable (`chattr +i`, which the kernel checks at each
/// write: a log made immutable after warden opened it would otherwise fail only
/// after the tool ran). Returns its length. One `statx` of the open file and one
/// of the path, neither asking for a timestamp (see [`len_of`]).
fn still_there(file: &File, path: &Path) -> std::io::Result<u64> {
    use rustix::fs::{AtFlags, CWD, StatxAttributes, StatxFlags, statx};
    let open = statx(file, "", AtFlags::EMPTY_PATH, StatxFlags::INO | StatxFlags::NLINK | StatxFlags::SIZE)?;
    let gone = |why: &str| std::io::Error::new(std::io::ErrorKind::NotFound, why.to_string());
    match statx(CWD, path, AtFlags::empty(), StatxFlags::INO) {
        Ok(at)
            if at.stx_dev_major == open.stx_dev_major
                && at.stx_dev_minor == open.stx_dev_minor
                && at.stx_ino == open.stx_ino
                && open.stx_nlink > 0 => {}
        Ok(_) => return Err(gone("the log file was replaced by another file while warden had it open")),
        Err(_) if open.stx_nlink == 0 => return Err(gone("the log file was removed while warden had it open")),
        Err(e) => {
            return Err(std::io::Error::new(
                std::io::Error::from(e).kind(),
                format!("the log path cannot be read: {e}"),
            ));
        }
    }
    let immutable = StatxAttributes::IMMUTABLE;
    if open.stx_attributes_mask.contains(immutable) && open.stx_attributes.contains(immutable) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            "the log file is immutable (chattr +i): no record can be appended; `chattr -i` it, or use another log",
        ));
    }
    Ok(open.stx_size)
}

/// The log's length, by a `statx` that asks for the size alone.
///
/// Never `fstat` (or any stat asking for the modification or change time)
/// between two appends: since multigrain timestamps (Linux 6.13), a stat that
/// reads the change time marks it queried, so the next write must give the
/// inode a fresh fine-grained time, and the record's `fdatasync` then commits
/// the inode too. Measured on ext4 here: 40-60 us a record.
fn len_of(file: &File) -> std::io::Result<u64> {
    use rustix::fs::{AtFlags, StatxFlags, statx};
    Ok(statx(file, "", AtFlags::EMPTY_PATH, StatxFlags::SIZE)?.stx_size)
}

/// Takes (`F_RDLCK`, `F_WRLCK`) the OFD lock on [`PRESENCE_BYTE`] of `file`.
fn presence(file: &File, kind: i16, cmd: libc::c_int) -> std::io::Result<()> {
    use nix::fcntl::{FcntlArg, fcntl};
    let lock =
        libc::flock { l_type: kind, l_whence: libc::SEEK_SET as i16, l_start: PRESENCE_BYTE, l_len: 1, l_pid: 0 };
    let arg = if cmd == libc::F_OFD_SETLKW { FcntlArg::F_OFD_SETLKW(&lock) } else { FcntlArg::F_OFD_SETLK(&lock) };
    fcntl(file, arg).map(drop).map_err(std::io::Error::from)
}

fn sync_failed(why: &str) -> std::io::Error {
    std::io::Error::other(format!(
        "an earlier fdatasync of the log failed ({why}); records written since may be lost, so warden appends no more \
         to it: check the disk and `warden log verify` the log, then restart warden"
    ))
}

/// The default log path: `$XDG_STATE_HOME/warden/audit.jsonl` or `~/.local/state/warden/audit.jsonl`.
pub fn default_path() -> PathBuf {
    let state =
        std::env::var_os("XDG_STATE_HOME").map(PathBuf::from).filter(|p| p.is_absolute()).unwrap_or_else(|| {
            std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/root")).join(".local/state")
        });
    state.join("warden").join("audit.jsonl")
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

impl AuditLog {
    /// Opens (creating it and its directory, private to this user) the log at `path`.
    pub fn open(path: &Path) -> std::io::Result<AuditLog> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
        }
        // Not O_APPEND: a record goes at the logical end, which may lie inside the fill.
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(false).mode(0o600).open(path)?;
        let fill = fill_supported(&file);
        if fill {
            presence(&file, libc::F_RDLCK as i16, libc::F_OFD_SETLKW)?;
        }
        Ok(AuditLog { path: path.to_path_buf(), file, fill, commit: Mutex::default(), synced: Condvar::new() })
    }

    /// Grows the log in chunks of `bytes` of blank fill from now on, so that
    /// records overwrite space already written and their `fdatasync` commits
    /// data only (see the module's documentation). For a long-lived writer:
    /// each growth is written and synced once, and [`AuditLog::close`] cuts
    /// what is left.
    /// On a file system other than ext4, XFS or tmpfs the log keeps growing
    /// line by line (see [`fill_supported`]), and warden says so at debug level.
    pub fn grow_in_chunks(&self, bytes: u64) {
        if !self.fill {
            tracing::debug!(
                "audit log {}: its file system is not ext4, XFS or tmpfs, so it grows line by line",
                self.path.display()
            );
            return;
        }
        self.lock().growth = bytes;
    }

    /// Stops growing in chunks and, if no other warden has the log open, cuts
    /// the blank fill off its end (under the append lock), so that the log at
    /// rest is plain JSON lines. Records appended later (a call that outlived
    /// `serve`) are still written, without fill. Also run when the log is dropped.
    pub fn close(&self) {
        let mut commit = self.lock();
        commit.growth = 0;
        if !self.fill || commit.closed || commit.failed.is_some() {
            return;
        }
        commit.closed = true;
        let cut = (|| {
            self.file.lock()?;
            // Leaving: let go of this process's presence first, so that of two
            // closers the second finds the first gone. Alone if no other open
            // file description holds it.
            let alone = presence(&self.file, libc::F_UNLCK as i16, libc::F_OFD_SETLK)
                .and_then(|()| presence(&self.file, libc::F_WRLCK as i16, libc::F_OFD_SETLK))
                .is_ok();
            let cut = if alone {
                len_of(&self.file).and_then(|size| {
                    let mut head = self.head(&mut commit, size)?;
                    if head.len < size {
                        self.file.set_len(head.len)?;
                        head.size = head.len;
                        // A call still in flight (one that outlived `serve`) keeps its reservation.
                        let want = commit.reserved.len() * MAX_RECORD_BYTES;
                        self.preallocate(&mut commit, head.len, want)?;
                    }
                    commit.head = Some(head);
                    Ok(())
                })
            } else {
                Ok(())
            };
            let _ = presence(&self.file, libc::F_UNLCK as i16, libc::F_OFD_SETLK);
            self.file.unlock()?;
            cut
        })();
        if let Err(e) = cut {
            tracing::warn!("audit log {}: its blank fill could not be cut off: {e}", self.path.display());
        }
    }

    /// The log's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether a record written now would be durable at the log's path: the
    /// file is still linked there (not removed or replaced), is not immutable
    /// (`chattr +i` refuses every write, even to an open descriptor), and its
    /// file system is writable and has at least [`MIN_FREE_BYTES`] free. The executor asks
    /// before a tool runs, so that a call without a record never runs.
    ///
    /// It also reserves the record's space: past the end of the log, blocks for
    /// [`MAX_RECORD_BYTES`] times the calls of this process checked and not yet
    /// appended (this one included) are allocated without changing the file's
    /// size, so that a tool filling the file system while it runs cannot leave
    /// its record without room. The reservation is held by the calling thread
    /// until its next [`AuditLog::append`]. Where the file system does not
    /// support `fallocate`, nothing is reserved (the free-space check stands alone).
    pub fn check_writable(&self) -> std::io::Result<()> {
        if let Some(why) = &self.lock().failed {
            return Err(sync_failed(why));
        }
        let len = still_there(&self.file, &self.path)?;
        // A file-size limit warden inherited (nothing the tool does can set one:
        // seccomp refuses prlimit64 on another process) would stop the append.
        let (limit, _) =
            nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_FSIZE).map_err(std::io::Error::from)?;
        if limit != nix::sys::resource::RLIM_INFINITY && limit < len.saturating_add(MAX_RECORD_BYTES as u64 * 16) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::FileTooLarge,
                format!(
                    "warden's RLIMIT_FSIZE ({limit} bytes) leaves no room past the log's {len} bytes; raise it \
                     (ulimit -f) or start a new log"
                ),
            ));
        }
        let fs = nix::sys::statvfs::fstatvfs(&self.file).map_err(std::io::Error::from)?;
        if fs.flags().contains(nix::sys::statvfs::FsFlags::ST_RDONLY) {
            return Err(std::io::Error::new(std::io::ErrorKind::ReadOnlyFilesystem, "its file system is read-only"));
        }
        let free = fs.blocks_available().saturating_mul(fs.fragment_size());
        if free < MIN_FREE_BYTES {
            return Err(std::io::Error::new(
                std::io::ErrorKind::StorageFull,
                format!("its file system has {free} bytes free, less than {MIN_FREE_BYTES}"),
            ));
        }
        self.reserve()
    }

    /// Reserves [`MAX_RECORD_BYTES`] past the end for the calling thread (see [`AuditLog::check_writable`]).
    fn reserve(&self) -> std::io::Result<()> {
        let mut commit = self.lock();
        if commit.no_prealloc && commit.growth == 0 {
            return Ok(());
        }
        let me = std::thread::current().id();
        let fresh = commit.reserved.insert(me);
        // The flock makes the end found here the end the reservation starts from.
        self.file.lock()?;
        let reserved = len_of(&self.file).and_then(|size| {
            let mut head = self.head(&mut commit, size)?;
            let want = (commit.reserved.len() * MAX_RECORD_BYTES) as u64;
            let room = self.room(&mut commit, head.len, size, want);
            if let Ok(grown) = room {
                head.size = grown;
            }
            commit.head = Some(head);
            room.map(drop)
        });
        let unlocked = self.file.unlock();
        if let Err(e) = reserved.and(unlocked) {
            if fresh {
                commit.reserved.remove(&me);
            }
            return Err(e);
        }
        Ok(())
    }

    /// Makes `[end, end + want)` allocated, `end` being the logical end and
    /// `size` the file's size: blank fill written up to a chunk past the end
    /// when the log grows in chunks, blocks reserved past the size otherwise.
    /// Returns the file's size after.
    fn room(&self, commit: &mut Commit, end: u64, size: u64, want: u64) -> std::io::Result<u64> {
        if commit.growth == 0 {
            return self.preallocate(commit, end, want as usize).map(|()| size);
        }
        if size >= end + want {
            return Ok(size);
        }
        let chunk = end + want.max(commit.growth);
        if self.fill(size, chunk).is_ok() {
            return Ok(chunk);
        }
        // A file system too full for a chunk may still have room for what is wanted.
        match self.fill(size, end + want) {
            Ok(()) => Ok((end + want).max(len_of(&self.file)?)),
            Err(e) => Err(std::io::Error::new(
                e.kind(),
                format!("cannot reserve {want} bytes for the record(s) of the calls in flight: {e}"),
            )),
        }
    }

    /// Writes blank fill over `[from, to)`.
    fn fill(&self, from: u64, to: u64) -> std::io::Result<()> {
        static BLANK: [u8; 64 << 10] = [0; 64 << 10];
        let mut at = from;
        while at < to {
            let n = (to - at).min(BLANK.len() as u64) as usize;
            self.file.write_all_at(&BLANK[..n], at)?;
            at += n as u64;
        }
        Ok(())
    }

    /// The head of the chain at the logical end: the one this process
    /// remembers if no other writer has appended since (the byte at its end is
    /// still fill, or the end of the file), or else read from the file. The
    /// caller holds the flock.
    fn head(&self, commit: &mut Commit, size: u64) -> std::io::Result<Head> {
        if let Some(h) = commit.head.take() {
            let mut b = [0u8; 1];
            if h.size == size && (h.len == size || (self.file.read_at(&mut b, h.len)? == 1 && is_fill(b[0]))) {
                return Ok(h);
            }
        }
        self.read_head(size)
    }

    /// Allocates `[at, at + bytes)` without changing the file's size. A file
    /// system without `fallocate` turns reservations off for this log (and
    /// answers `Ok`); any other failure (`ENOSPC`) is an error.
    fn preallocate(&self, commit: &mut Commit, at: u64, bytes: usize) -> std::io::Result<()> {
        use rustix::fs::{FallocateFlags, fallocate};
        use rustix::io::Errno;
        if commit.no_prealloc || bytes == 0 {
            return Ok(());
        }
        match fallocate(&self.file, FallocateFlags::KEEP_SIZE, at, bytes as u64) {
            Ok(()) => Ok(()),
            Err(e) if e == Errno::OPNOTSUPP || e == Errno::NOSYS => {
                commit.no_prealloc = true;
                commit.reserved.clear();
                tracing::warn!(
                    "audit log {}: its file system cannot preallocate (fallocate: {e}); a tool that fills it \
                     while it runs can leave its record without room (only {MIN_FREE_BYTES} bytes free are checked)",
                    self.path.display()
                );
                Ok(())
            }
            Err(e) => Err(std::io::Error::new(
                std::io::Error::from(e).kind(),
                format!("cannot reserve {bytes} bytes for the record(s) of the calls in flight: {e}"),
            )),
        }
    }

    /// Records appended by this process, and the `fdatasync` calls that made them durable.
    pub fn commits(&self) -> (u64, u64) {
        let commit = self.lock();
        (commit.written, commit.syncs)
    }

    fn lock(&self) -> MutexGuard<'_, Commit> {
        self.commit.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Appends `record`, chained to the last line, and fsyncs it. Returns only once it is durable.
    ///
    /// The line goes into the space the calling thread reserved in
    /// [`AuditLog::check_writable`], if it did; otherwise it must find room on top
    /// of the other calls' reservations, or it fails without writing. A write
    /// that fails mid-line is cut off before the error is returned.
    pub fn append(&self, record: &Record) -> std::io::Result<()> {
        let mut commit = self.lock();
        if let Some(why) = &commit.failed {
            return Err(sync_failed(why));
        }
        let reserved = commit.reserved.remove(&std::thread::current().id());
        // The flock orders this line against other warden processes sharing the log.
        self.file.lock()?;
        // A record appended to a removed or replaced file would be lost without a word.
        let written =
            still_there(&self.file, &self.path).and_then(|size| self.write_line(&mut commit, record, size, reserved));
        let unlocked = self.file.unlock();
        written.and(unlocked)?;
        commit.written += 1;
        let ticket = commit.written;
        loop {
            if let Some(why) = &commit.failed {
                return Err(sync_failed(why));
            }
            if commit.durable >= ticket {
                return Ok(());
            }
            if commit.syncing {
                commit = self.synced.wait(commit).unwrap_or_else(PoisonError::into_inner);
                continue;
            }
            // Lead: one fdatasync for every line written so far, this one included.
            commit.syncing = true;
            let through = commit.written;
            drop(commit);
            let synced = self.file.sync_data();
            commit = self.lock();
            commit.syncing = false;
            commit.syncs += 1;
            match synced {
                Ok(()) => commit.durable = commit.durable.max(through),
                Err(e) => commit.failed = Some(e.to_string()),
            }
            self.synced.notify_all();
        }
    }

    /// Writes `record` as the next line of the chain at the logical end, the
    /// file being `size` bytes long (the caller holds the flock); `reserved` if
    /// its space was reserved.
    fn write_line(&self, commit: &mut Commit, record: &Record, size: u64, reserved: bool) -> std::io::Result<()> {
        let head = self.head(commit, size)?;
        let (start, seq) = (head.len, head.seq + 1);
        let (line, prev) = match encode(record, seq, &head.prev) {
            Ok(encoded) => encoded,
            Err(e) => {
                commit.head = Some(head);
                return Err(e);
            }
        };
        let mut size = size;
        if !reserved {
            // Room for this line on top of what the calls in flight have reserved, or no line at all.
            let want = (line.len() + commit.reserved.len() * MAX_RECORD_BYTES) as u64;
            match self.room(commit, start, size, want) {
                Ok(grown) => size = grown,
                Err(e) => {
                    commit.head = Some(head);
                    return Err(e);
                }
            }
        }
        if let Err(e) = self.file.write_all_at(&line, start) {
            // No torn line may stay for the next append to be merged into: blank
            // what was written inside the file, cut what grew it.
            let end = start + line.len() as u64;
            let cut = self
                .fill(start.min(size), end.min(size))
                .and_then(|()| if end > size { self.file.set_len(size.max(start)) } else { Ok(()) });
            let outcome = match &cut {
                Ok(()) => "the partial line was cut off".to_string(),
                Err(c) => format!("the partial line could not be cut off ({c}); the next append moves it aside"),
            };
            if cut.is_ok() {
                // Cutting may have freed the reservations past the end too: take them back if there is room.
                let _ = self.room(commit, start, size, (commit.reserved.len() * MAX_RECORD_BYTES) as u64);
                commit.head = Some(head);
            }
            return Err(std::io::Error::new(e.kind(), format!("{e} ({outcome})")));
        }
        let len = start + line.len() as u64;
        commit.head = Some(Head { len, seq, prev, size: size.max(len) });
        Ok(())
    }

    /// Where the content ends: the byte after the last one that is not fill.
    fn content_end(&self, size: u64) -> std::io::Result<u64> {
        let mut buf = vec![0u8; 64 << 10];
        let mut pos = size;
        while pos > 0 {
            if size - pos > MAX_FILL_SCAN {
                return Err(std::io::Error::other(format!(
                    "the log ends in more than {} MiB of blank fill (spaces or zeros), more than warden ever \
                     writes: cut it off (truncate) or start a new log",
                    MAX_FILL_SCAN >> 20
                )));
            }
            let from = pos.saturating_sub(buf.len() as u64);
            let chunk = &mut buf[..(pos - from) as usize];
            self.file.read_exact_at(chunk, from)?;
            if let Some(i) = chunk.iter().rposition(|&b| !is_fill(b)) {
                return Ok(from + i as u64 + 1);
            }
            pos = from;
        }
        Ok(0)
    }

    /// Finds the last complete line before the fill, moving torn ones aside first.
    fn read_head(&self, size: u64) -> std::io::Result<Head> {
        // The last line is most often within a record's length of the end: read
        // that much first (a `warden call` opens the log every time, and a
        // megabyte read at each was a tenth of a millisecond), the whole window
        // only when no line ends there.
        match self.read_head_within(size, NEAR_WINDOW)? {
            Some(head) => Ok(head),
            None => self
                .read_head_within(size, TAIL_WINDOW)?
                .ok_or_else(|| std::io::Error::other("the last audit record is longer than 1 MiB")),
        }
    }

    /// [`AuditLog::read_head`] looking back at most `window` bytes: `None` when
    /// no whole line lies within them.
    fn read_head_within(&self, size: u64, window: u64) -> std::io::Result<Option<Head>> {
        let genesis = |len| Some(Head { len, seq: 0, prev: GENESIS.into(), size });
        let end = self.content_end(size)?;
        if end == 0 {
            return Ok(genesis(0));
        }
        let start = end.saturating_sub(window);
        let mut tail = vec![0u8; (end - start) as usize];
        self.file.read_exact_at(&mut tail, start)?;
        // Torn lines at the end: one without its newline (a crash mid-append),
        // or one holding fill (an overwrite of which a crash kept some pages
        // from the disk; the lines of one group commit can all be such).
        let mut keep = tail.len();
        while keep > 0 {
            let line = &tail[..keep];
            let ends = line.last() == Some(&b'\n');
            let from = line[..keep - usize::from(ends)].iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
            if ends && !line[from..].iter().copied().any(is_fill) {
                break;
            }
            if from == 0 && start > 0 {
                return Ok(None);
            }
            keep = from;
        }
        let mut len = end;
        if keep < tail.len() {
            let torn = tail.split_off(keep);
            let aside = self.path.with_extension("jsonl.torn");
            let mut t = OpenOptions::new().append(true).create(true).mode(0o600).open(&aside)?;
            for part in torn.split_inclusive(|&b| b == b'\n') {
                // Its fill shown as spaces, so the file stays text.
                let part: Vec<u8> = part.iter().map(|&b| if is_fill(b) { b' ' } else { b }).collect();
                t.write_all(&part)?;
                if part.last() != Some(&b'\n') {
                    t.write_all(b"\n")?;
                }
            }
            t.sync_data()?;
            let cut = start + keep as u64;
            // Blanked, not cut (the reservations and fill past it stay), and
            // durably so before a new line goes over it: a lost page of that
            // line must read as fill, not as the torn bytes.
            self.fill(cut, len)?;
            self.file.sync_data()?;
            len = cut;
            tracing::warn!(
                "audit log {}: moved {} torn last line(s) ({} bytes, a crash mid-write) to {}",
                self.path.display(),
                torn.split_inclusive(|&b| b == b'\n').count(),
                torn.len(),
                aside.display()
            );
            if len == 0 {
                return Ok(genesis(0));
            }
        }
        let body = &tail[..tail.len() - 1];
        let last = match body.iter().rposition(|&b| b == b'\n') {
            Some(i) => &body[i + 1..],
            None if start == 0 => body,
            // The torn lines (if any) are fill now: the next look starts at the cut.
            None => return Ok(None),
        };
        let seq = serde_json::from_slice::<Value>(last)
            .ok()
            .and_then(|v| v.get("seq").and_then(Value::as_u64))
            .ok_or_else(|| std::io::Error::other("the last audit record is not a warden record (no seq)"))?;
        Ok(Some(Head { len, seq, prev: sha256_hex(last), size }))
    }
}

impl Drop for AuditLog {
    fn drop(&mut self) {
        self.close();
    }
}

fn encode(record: &Record, seq: u64, prev: &str) -> std::io::Result<(Vec<u8>, String)> {
    let mut line = serde_json::to_vec(&Chained { record, seq, prev: prev.to_string() })?;
    if line.len() >= MAX_RECORD_BYTES {
        line = shrink_record(record, seq, prev)?;
    }
    let hash = sha256_hex(&line);
    line.push(b'\n');
    Ok((line, hash))
}

/// `record` cut below [`MAX_RECORD_BYTES`]: its largest fields (other than `seq`
/// and `prev`) are shrunk in turn, and `"shrunk": true` says so.
fn shrink_record(record: &Record, seq: u64, prev: &str) -> std::io::Result<Vec<u8>> {
    let Value::Object(mut doc) = serde_json::to_value(Chained { record, seq, prev: prev.to_string() })? else {
        return Err(std::io::Error::other("an audit record is not a JSON object"));
    };
    doc.insert("shrunk".into(), Value::Bool(true));
    let limit = MAX_RECORD_BYTES - 1;
    loop {
        let size = serde_json::to_vec(&doc)?.len();
        if size <= limit {
            return Ok(serde_json::to_vec(&doc)?);
        }
        let field_size = |v: &Value| serde_json::to_vec(v).map_or(0, |b| b.len());
        let largest = doc
            .iter()
            .filter(|(k, _)| !matches!(k.as_str(), "seq" | "prev" | "shrunk"))
            .map(|(k, v)| (field_size(v), k.clone()))
            .max();
        match largest {
            Some((n, key)) if n > 256 => {
                let budget = n.saturating_sub(size - limit).max(n / 2).min(n - 64).max(64);
                if let Some(v) = doc.get_mut(&key) {
                    let cut = crate::shape::truncate(v.take(), budget).0;
                    // A value the shape cannot cut (a long number) goes whole.
                    *v = if field_size(&cut) < n { cut } else { Value::from(format!("…[{n} bytes cut]")) };
                }
            }
            _ => {
                return Err(std::io::Error::other(format!(
                    "the audit record is {size} bytes and cannot be cut to {MAX_RECORD_BYTES}"
                )));
            }
        }
    }
}

/// Keys whose values are never written to the log.
fn secret_key(k: &str) -> bool {
    let k = k.to_ascii_lowercase();
    ["password", "passwd", "secret", "token", "key", "authorization", "cookie", "credential"]
        .iter()
        .any(|s| k.contains(s))
}

fn secret_value(s: &str) -> bool {
    let t = s.trim_start();
    t.starts_with("Bearer ")
        || t.starts_with("Basic ")
        || t.contains("PRIVATE KEY-----")
        || (t.len() == 20 && t.starts_with("AKIA") && t.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit()))
        || t.starts_with("ghp_")
        || t.starts_with("sk-")
}

/// The arguments as the log keeps them: secret-looking values replaced, long strings cut, bounded.
pub fn redact(v: &Value) -> Value {
    fn walk(v: &Value) -> Value {
        match v {
            Value::Object(o) => Value::Object(
                o.iter()
                    .map(|(k, v)| {
                        let v = if secret_key(k) && !v.is_object() && !v.is_array() {
                            Value::from("[REDACTED]")
                        } else {
                            walk(v)
                        };
                        (k.clone(), v)
                    })
                    .collect(),
            ),
            Value::Array(a) => Value::Array(a.iter().map(walk).collect()),
            Value::String(s) if secret_value(s) => Value::from("[REDACTED]"),
            Value::String(s) if s.len() > MAX_ARG_STRING => {
                let mut end = MAX_ARG_STRING;
                while !s.is_char_boundary(end) {
                    end -= 1;
                }
                Value::from(format!("{}…[{} bytes]", &s[..end], s.len()))
            }
            other => other.clone(),
        }
    }
    crate::shape::truncate(walk(v), MAX_ARGS_BYTES).0
}

/// What `log verify` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verification {
    /// Records checked.
    pub records: u64,
    /// A torn last line that was skipped (its line number).
    pub torn_line: Option<u64>,
    /// The first bad line and why.
    pub problem: Option<(u64, String)>,
    /// sha256 of the last good line: keep it elsewhere to anchor the chain.
    pub head: String,
}

/// Checks the hash chain of the log at `path`.
pub fn verify(path: &Path) -> std::io::Result<Verification> {
    let mut data = fs::read(path)?;
    // The blank fill a writer that grows in chunks keeps past the last line.
    data.truncate(data.iter().rposition(|&b| !is_fill(b)).map_or(0, |i| i + 1));
    let mut v = Verification { records: 0, torn_line: None, problem: None, head: GENESIS.into() };
    let mut expected_seq: Option<u64> = None;
    let lines: Vec<&[u8]> = data.split_inclusive(|&b| b == b'\n').collect();
    // Torn lines at the end (as the next writer finds them): without a newline,
    // or holding fill, parts of an overwrite that a crash kept from the disk.
    let torn = |raw: &[u8]| raw.last() != Some(&b'\n') || raw.iter().copied().any(is_fill);
    let whole = lines.len() - lines.iter().rev().take_while(|raw| torn(raw)).count();
    for (i, raw) in lines.iter().enumerate() {
        let n = i as u64 + 1;
        if i >= whole {
            v.torn_line = Some(n);
            break;
        }
        let line = &raw[..raw.len() - 1];
        let fail = |why: String| Some((n, why));
        let Ok(rec) = serde_json::from_slice::<Value>(line) else {
            v.problem = fail("not a JSON record (edited or corrupted)".into());
            break;
        };
        let (Some(seq), Some(prev)) = (rec.get("seq").and_then(Value::as_u64), rec.get("prev").and_then(Value::as_str))
        else {
            v.problem = fail("missing seq or prev: not a warden record".into());
            break;
        };
        if let Some(want) = expected_seq.filter(|&want| want != seq) {
            v.problem = fail(format!(
                "seq {seq} where {want} was expected: {}",
                if seq > want {
                    "records were removed before this line"
                } else {
                    "records were reordered or duplicated"
                }
            ));
            break;
        }
        if prev != v.head {
            let previous = if n == 1 { "the start of the log".to_string() } else { format!("line {}", n - 1) };
            // The seq numbers are intact, so the previous line's content changed (or this prev did).
            v.problem = Some((
                if n == 1 { 1 } else { n - 1 },
                format!("{previous} does not hash to the prev recorded by line {n}: it was edited"),
            ));
            break;
        }
        v.head = sha256_hex(line);
        v.records += 1;
        expected_seq = Some(seq + 1);
    }
    Ok(v)
}

/// Per-tool figures of `log stats`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ToolStats {
    /// The tool.
    pub tool: String,
    /// Calls recorded.
    pub calls: u64,
    /// Succeeded (a program that ran exited 0).
    pub ok: u64,
    /// Ran a program that exited non-zero or was ended by a signal (a
    /// failed test run is not a success).
    pub failed: u64,
    /// Failed (other than denied and rejected).
    pub errors: u64,
    /// Denied by the policy.
    pub denied: u64,
    /// Rejected by a person.
    pub rejected: u64,
    /// Median duration.
    pub p50_ms: f64,
    /// 95th percentile duration.
    pub p95_ms: f64,
}

/// Whether the record's program exited non-zero or by a signal.
fn program_failed(rec: &Value) -> bool {
    let Some(exit) = rec.get("exit") else { return false };
    exit.get("signal").is_some_and(|s| !s.is_null())
        || exit.get("exit_code").and_then(Value::as_i64).is_some_and(|c| c != 0)
}

/// Per-tool counts and latencies from the log at `path`, sorted by tool.
pub fn stats(path: &Path) -> std::io::Result<Vec<ToolStats>> {
    let data = fs::read_to_string(path)?;
    let mut by_tool: std::collections::BTreeMap<String, (ToolStats, Vec<f64>)> = Default::default();
    for line in data.lines() {
        let Ok(rec) = serde_json::from_str::<Value>(line) else { continue };
        // A background job's start record: its end record counts the call.
        if rec.get("status").and_then(Value::as_str) == Some("running") {
            continue;
        }
        let tool = rec.get("tool").and_then(Value::as_str).unwrap_or("?").to_string();
        let (s, durations) =
            by_tool.entry(tool.clone()).or_insert_with(|| (ToolStats { tool, ..Default::default() }, Vec::new()));
        s.calls += 1;
        match (rec.get("status").and_then(Value::as_str), rec.get("error_code").and_then(Value::as_str)) {
            (Some("success"), _) if program_failed(&rec) => s.failed += 1,
            (Some("success"), _) => s.ok += 1,
            (Some("rejected"), _) => s.rejected += 1,
            (_, Some("DENIED")) => s.denied += 1,
            _ => s.errors += 1,
        }
        if let Some(d) = rec.get("duration_ms").and_then(Value::as_f64) {
            durations.push(d);
        }
    }
    Ok(by_tool
        .into_values()
        .map(|(mut s, mut d)| {
            d.sort_by(f64::total_cmp);
            let pct = |p: f64| if d.is_empty() { 0.0 } else { d[((d.len() - 1) as f64 * p).round() as usize] };
            s.p50_ms = pct(0.5);
            s.p95_ms = pct(0.95);
            s
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(tool: &str) -> Record {
        Record {
            ts: "2026-01-01T00:00:00Z".into(),
            call_id: "c-1".into(),
            session: "s".into(),
            tool: tool.into(),
            args_sha256: "x".into(),
            args: serde_json::json!({"token": "abc", "path": "a"}),
            tier: Some(Tier::Auto),
            decision: Decision::Allowed,
            approved_by: Some(ApprovedBy::Auto),
            status: "success",
            duration_ms: 1.0,
            ..Record::default()
        }
    }

    fn log_with(n: usize) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("a.jsonl");
        let log = AuditLog::open(&path).unwrap_or_else(|e| panic!("{e}"));
        for i in 0..n {
            log.append(&record(&format!("t{i}"))).unwrap_or_else(|e| panic!("{e}"));
        }
        (dir, path)
    }

    #[test]
    fn a_jobs_start_and_end_records_verify_and_count_once() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("a.jsonl");
        let log = AuditLog::open(&path).unwrap_or_else(|e| panic!("{e}"));
        let start = Record { status: "running", ..record("bg") };
        let end = Record { status: "cancelled", error_code: Some("CANCELLED"), ..record("bg") };
        for r in [&start, &end] {
            log.append(r).unwrap_or_else(|e| panic!("{e}"));
        }
        let v = verify(&path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((v.records, v.problem), (2, None));
        let s = stats(&path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((s.len(), s[0].calls, s[0].errors, s[0].ok), (1, 1, 1, 0));
    }

    #[test]
    fn a_fresh_chain_verifies() {
        let (_d, path) = log_with(5);
        let v = verify(&path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((v.records, v.problem, v.torn_line), (5, None, None));
    }

    #[test]
    fn an_edited_line_is_named() {
        let (_d, path) = log_with(5);
        let text = fs::read_to_string(&path).unwrap_or_default().replacen("\"t2\"", "\"tX\"", 1);
        fs::write(&path, text).unwrap_or_else(|e| panic!("{e}"));
        let v = verify(&path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(v.problem.map(|p| p.0), Some(3));
    }

    #[test]
    fn a_removed_line_is_named() {
        let (_d, path) = log_with(5);
        let text = fs::read_to_string(&path).unwrap_or_default();
        let kept: Vec<&str> = text.lines().enumerate().filter(|(i, _)| *i != 1).map(|(_, l)| l).collect();
        fs::write(&path, kept.join("\n") + "\n").unwrap_or_else(|e| panic!("{e}"));
        let v = verify(&path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(v.problem.map(|p| p.0), Some(2));
    }

    #[test]
    fn a_torn_tail_is_reported_then_moved_aside_by_the_next_writer() {
        let (_d, path) = log_with(3);
        let mut f = OpenOptions::new().append(true).open(&path).unwrap_or_else(|e| panic!("{e}"));
        f.write_all(b"{\"ts\":\"half").unwrap_or_else(|e| panic!("{e}"));
        let v = verify(&path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((v.records, v.torn_line, v.problem), (3, Some(4), None));
        let log = AuditLog::open(&path).unwrap_or_else(|e| panic!("{e}"));
        log.append(&record("after")).unwrap_or_else(|e| panic!("{e}"));
        let v = verify(&path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((v.records, v.torn_line, v.problem), (4, None, None));
        assert!(path.with_extension("jsonl.torn").exists());
    }

    /// The head is looked for near the end first ([`NEAR_WINDOW`]), then over
    /// the whole window: a torn tail longer than the near window (a crash in a
    /// group commit of large records) still finds the last whole line behind it.
    #[test]
    fn a_torn_tail_longer_than_the_near_window_is_still_moved_aside() {
        let (_d, path) = log_with(3);
        let mut f = OpenOptions::new().append(true).open(&path).unwrap_or_else(|e| panic!("{e}"));
        let torn = format!("{{\"ts\":\"{}", "x".repeat(3 * NEAR_WINDOW as usize));
        f.write_all(torn.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
        let log = AuditLog::open(&path).unwrap_or_else(|e| panic!("{e}"));
        log.append(&record("after")).unwrap_or_else(|e| panic!("{e}"));
        let v = verify(&path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((v.records, v.torn_line, v.problem), (4, None, None));
        let aside = fs::read_to_string(path.with_extension("jsonl.torn")).unwrap_or_default();
        assert_eq!(aside.trim_end(), torn);
        // And a log whose last line is far from the end without being torn (a
        // line longer than the near window, as an older warden could write).
        let (_d2, path2) = log_with(1);
        let mut f = OpenOptions::new().append(true).open(&path2).unwrap_or_else(|e| panic!("{e}"));
        let text = fs::read_to_string(&path2).unwrap_or_default();
        let first: Value = serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{e}"));
        let mut long = first.clone();
        long["seq"] = serde_json::json!(2);
        long["prev"] = serde_json::json!(sha256_hex(text.trim().as_bytes()));
        long["args"] = serde_json::json!({"text": "y".repeat(2 * NEAR_WINDOW as usize)});
        f.write_all(format!("{long}\n").as_bytes()).unwrap_or_else(|e| panic!("{e}"));
        let log = AuditLog::open(&path2).unwrap_or_else(|e| panic!("{e}"));
        log.append(&record("after")).unwrap_or_else(|e| panic!("{e}"));
        let last: Value =
            serde_json::from_str(fs::read_to_string(&path2).unwrap_or_default().lines().last().unwrap_or_default())
                .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(last["seq"], 3, "chained after the long line: {last}");
    }

    fn size(path: &Path) -> u64 {
        fs::metadata(path).map(|m| m.len()).unwrap_or_else(|e| panic!("{e}"))
    }

    fn content(path: &Path) -> Vec<u8> {
        let mut data = fs::read(path).unwrap_or_else(|e| panic!("{e}"));
        data.truncate(data.iter().rposition(|&b| !is_fill(b)).map_or(0, |i| i + 1));
        data
    }

    #[test]
    fn a_log_grown_in_chunks_is_overwritten_in_place_and_cut_when_the_last_writer_closes() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("a.jsonl");
        let serve = AuditLog::open(&path).unwrap_or_else(|e| panic!("{e}"));
        serve.grow_in_chunks(256 << 10);
        serve.check_writable().unwrap_or_else(|e| panic!("{e}"));
        let grown = size(&path);
        assert!(grown >= 256 << 10, "the first reservation grows the log by a chunk: {grown}");
        assert!(fs::read(&path).unwrap_or_default().iter().all(|&b| b == 0), "all blank fill");
        for i in 0..3 {
            serve.check_writable().unwrap_or_else(|e| panic!("{e}"));
            serve.append(&record(&format!("s{i}"))).unwrap_or_else(|e| panic!("{e}"));
        }
        assert_eq!(size(&path), grown, "records overwrite the fill: the size does not change");
        let v = verify(&path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((v.records, v.torn_line, v.problem), (3, None, None));
        // Another warden process (a `warden call` beside the server) finds the
        // logical end from the content, not the size, and writes there.
        let call = AuditLog::open(&path).unwrap_or_else(|e| panic!("{e}"));
        call.check_writable().unwrap_or_else(|e| panic!("{e}"));
        call.append(&record("cli")).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(size(&path), grown);
        // The server's remembered head is stale now: it must notice and chain to the CLI's line.
        serve.append(&record("s3")).unwrap_or_else(|e| panic!("{e}"));
        let v = verify(&path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((v.records, v.torn_line, v.problem), (5, None, None));
        let s = stats(&path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.iter().map(|t| t.calls).sum::<u64>(), 5);
        // Not the last to close: the server still writes into the fill.
        drop(call);
        assert_eq!(size(&path), grown);
        serve.close();
        assert_eq!(size(&path), content(&path).len() as u64, "the last writer cut the fill off");
        assert_eq!(fs::read(&path).unwrap_or_default().last(), Some(&b'\n'));
        // A record after the close (a call that outlived serve) is still written, without fill.
        serve.append(&record("late")).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(fs::read(&path).unwrap_or_default().last(), Some(&b'\n'));
        assert_eq!(verify(&path).map(|v| (v.records, v.problem)).ok(), Some((6, None)));
    }

    /// What a server that crashed mid-sync leaves: its fill (never cut), with
    /// `crash` written over it after the last durable line.
    fn crashed_with(crash: &[u8]) -> (tempfile::TempDir, PathBuf) {
        let (d, path) = log_with(2);
        let end = size(&path);
        let f = OpenOptions::new().write(true).open(&path).unwrap_or_else(|e| panic!("{e}"));
        f.write_all_at(&[0u8; 64 << 10], end).unwrap_or_else(|e| panic!("{e}"));
        f.write_all_at(crash, end).unwrap_or_else(|e| panic!("{e}"));
        (d, path)
    }

    #[test]
    fn records_torn_mid_overwrite_are_moved_aside_whichever_pages_were_lost() {
        let page = |c: u8| vec![c; 4096];
        let line = |parts: &[Vec<u8>]| {
            let mut l = b"{\"seq\":3,\"prev\":\"x\",\"args\":\"".to_vec();
            parts.iter().for_each(|p| l.extend_from_slice(p));
            l.extend_from_slice(b"\"}\n");
            l
        };
        let cases: Vec<(&str, Vec<u8>)> = vec![
            // The line's second page reached the disk, its first did not (still fill).
            ("a lost first page", [vec![0u8; 100], b"call_id\":\"c-1\"}\n".to_vec()].concat()),
            // A lost middle page inside a string: the line parses, its seq and prev intact.
            ("a lost middle page", line(&[page(b'a'), page(0), page(b'a')])),
            // Two lines of one group commit, only the page they share on disk.
            (
                "two lines, one page kept",
                [vec![0u8; 3000], b"tail of one\"}\n{\"ts\":\"start of the next".to_vec()].concat(),
            ),
        ];
        for (what, crash) in cases {
            let (_d, path) = crashed_with(&crash);
            let v = verify(&path).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!((v.records, v.torn_line.is_some(), v.problem), (2, true, None), "{what}");
            let log = AuditLog::open(&path).unwrap_or_else(|e| panic!("{what}: {e}"));
            log.append(&record("after")).unwrap_or_else(|e| panic!("{what}: {e}"));
            let v = verify(&path).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!((v.records, v.torn_line, v.problem), (3, None, None), "{what}");
            let aside = fs::read(path.with_extension("jsonl.torn")).unwrap_or_else(|e| panic!("{e}"));
            assert!(!aside.contains(&0) && aside.ends_with(b"\n"), "{what}: moved aside as text");
            drop(log);
            assert_eq!(size(&path), content(&path).len() as u64, "{what}: the fill is cut when the last writer closes");
        }
    }

    #[test]
    fn concurrent_writers_share_fsyncs_and_keep_one_chain() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("a.jsonl");
        // Two opens of one path stand for two warden processes (each has its own flock).
        // One grows the log in chunks of fill (a server), the other writes
        // into that fill or past it (a CLI call beside it).
        let logs = [AuditLog::open(&path), AuditLog::open(&path)].map(|l| l.unwrap_or_else(|e| panic!("{e}")));
        logs[0].grow_in_chunks(16 << 10);
        std::thread::scope(|s| {
            for t in 0..8 {
                let log = &logs[t % 2];
                s.spawn(move || {
                    for i in 0..50 {
                        if i % 3 == 0 {
                            log.check_writable().unwrap_or_else(|e| panic!("{e}"));
                        }
                        log.append(&record(&format!("w{t}-{i}"))).unwrap_or_else(|e| panic!("{e}"));
                    }
                });
            }
        });
        let v = verify(&path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((v.records, v.torn_line, v.problem), (400, None, None));
        let text = fs::read_to_string(&path).unwrap_or_default();
        for t in 0..8 {
            for i in 0..50 {
                assert!(text.contains(&format!("\"w{t}-{i}\"")), "record w{t}-{i} is missing");
            }
        }
        for log in &logs {
            let (written, syncs) = log.commits();
            assert_eq!(written, 200);
            assert!((1..=200).contains(&syncs), "{syncs} fdatasyncs for 200 records");
        }
        drop(logs);
        assert_eq!(fs::read(&path).unwrap_or_default().last(), Some(&b'\n'), "no fill left once both closed");
    }

    #[test]
    fn check_writable_reserves_the_record_past_the_end_and_the_append_lands_in_it() {
        use std::os::unix::fs::MetadataExt;
        let (_d, path) = log_with(1);
        let log = AuditLog::open(&path).unwrap_or_else(|e| panic!("{e}"));
        let meta = || fs::metadata(&path).unwrap_or_else(|e| panic!("{e}"));
        let before = meta();
        log.check_writable().unwrap_or_else(|e| panic!("{e}"));
        if log.lock().no_prealloc {
            eprintln!("skipped: the file system of {} has no fallocate", path.display());
            return;
        }
        let reserved = meta();
        assert_eq!(reserved.len(), before.len(), "the reservation changed the file's size");
        assert!(
            reserved.blocks() * 512 >= before.len() + MAX_RECORD_BYTES as u64,
            "{} bytes allocated for {} bytes of log: no record reserved",
            reserved.blocks() * 512,
            before.len()
        );
        // A second call in flight (another thread) reserves a second record.
        std::thread::scope(|s| {
            s.spawn(|| log.check_writable().unwrap_or_else(|e| panic!("{e}")));
        });
        assert_eq!(log.lock().reserved.len(), 2);
        let two = meta();
        assert!(two.blocks() * 512 >= before.len() + 2 * MAX_RECORD_BYTES as u64);

        log.append(&record("reserved")).unwrap_or_else(|e| panic!("{e}"));
        let after = meta();
        assert!(after.len() > before.len());
        assert_eq!(after.blocks(), two.blocks(), "the append allocated blocks: it did not land in the reservation");
        assert_eq!(log.lock().reserved.len(), 1, "the append did not release its thread's reservation");
        let v = verify(&path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((v.records, v.torn_line, v.problem), (2, None, None));
    }

    #[test]
    fn an_oversized_record_is_shrunk_not_torn() {
        let (_d, path) = log_with(1);
        let log = AuditLog::open(&path).unwrap_or_else(|e| panic!("{e}"));
        let mut big = record("big");
        big.args = serde_json::json!({"text": "x".repeat(100_000), "list": vec!["y".repeat(100); 1000]});
        big.rule = Some(format!("/{}:1:1", "p/".repeat(20_000)));
        log.append(&big).unwrap_or_else(|e| panic!("{e}"));
        log.append(&record("after")).unwrap_or_else(|e| panic!("{e}"));
        let text = fs::read_to_string(&path).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[1].len() < MAX_RECORD_BYTES, "{} bytes", lines[1].len());
        let doc: Value = serde_json::from_str(lines[1]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (doc["shrunk"].as_bool(), doc["tool"].as_str(), doc["seq"].as_u64()),
            (Some(true), Some("big"), Some(2))
        );
        let v = verify(&path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((v.records, v.torn_line, v.problem), (3, None, None));
    }

    /// A write that fails mid-line (here: a full 256 KiB tmpfs, with the
    /// reservation switched off as on a file system without fallocate) leaves no
    /// torn line: it is cut off, the error says so, and the next append chains.
    #[test]
    fn a_write_that_fails_mid_line_is_cut_off() {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipped: mounting a small file system needs root (CI runs as root)");
            return;
        }
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let small = dir.path().join("small");
        fs::create_dir(&small).unwrap_or_else(|e| panic!("{e}"));
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=256k", "tmpfs"])
            .arg(&small)
            .status()
            .is_ok_and(|s| s.success());
        assert!(mounted, "cannot mount a tmpfs as root");
        struct Unmount<'a>(&'a Path);
        impl Drop for Unmount<'_> {
            fn drop(&mut self) {
                let _ = std::process::Command::new("umount").arg("-l").arg(self.0).status();
            }
        }
        let _unmount = Unmount(&small);
        let path = small.join("a.jsonl");
        let log = AuditLog::open(&path).unwrap_or_else(|e| panic!("{e}"));
        log.append(&record("first")).unwrap_or_else(|e| panic!("{e}"));
        log.lock().no_prealloc = true;
        let len = fs::metadata(&path).map(|m| m.len()).unwrap_or_default();
        // Fill every page but the log's own, which has room for part of a line.
        let mut filler = File::create(small.join("filler")).unwrap_or_else(|e| panic!("{e}"));
        while filler.write(&[0u8; 4096]).is_ok_and(|n| n > 0) {}
        drop(filler);
        let mut big = record("big");
        big.args = serde_json::json!({"text": "z".repeat(8000)});
        let e = log.append(&big).err().unwrap_or_else(|| panic!("a line larger than the room left was written"));
        assert!(e.to_string().contains("cut off"), "{e}");
        let text = fs::read(&path).unwrap_or_default();
        assert_eq!((text.len() as u64, text.last()), (len, Some(&b'\n')), "a torn line was left");
        fs::remove_file(small.join("filler")).unwrap_or_else(|e| panic!("{e}"));
        log.append(&record("after")).unwrap_or_else(|e| panic!("{e}"));
        let v = verify(&path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((v.records, v.torn_line, v.problem), (2, None, None));
        assert!(!path.with_extension("jsonl.torn").exists());
    }

    #[test]
    fn secrets_are_redacted() {
        let r = redact(
            &serde_json::json!({"api_key": "k", "nested": {"Authorization": "x"}, "h": "Bearer abc", "ok": "fine"}),
        );
        assert_eq!(
            r,
            serde_json::json!({"api_key": "[REDACTED]", "nested": {"Authorization": "[REDACTED]"}, "h": "[REDACTED]", "ok": "fine"})
        );
    }
}
