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

mod record;
mod redact;
mod stats;
#[cfg(test)]
mod tests;
mod verify;

use record::encode;
pub use record::{Decision, Record};
pub use redact::redact;
pub use stats::{ToolStats, stats};
pub use verify::{Verification, verify};

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
