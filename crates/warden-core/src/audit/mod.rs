//! The audit log ([`AuditLog`], its [`Record`]s): one JSON line per call (a
//! background job writes two, same call id), fsynced before the result is
//! returned and chained by hashes (`seq`, `prev`) so that edits, removals and
//! reorders before the last line are detected ([`verify`]; [`stats`]).
//!
//! The file only ever grows by whole lines, each written with one `pwrite` at
//! its end: a reader that tails it never sees blank fill. Appends hold an
//! exclusive `flock` on a lock file beside the log (`audit.jsonl.lock`, which
//! is never renamed), so several warden processes share one log and one of
//! them can rotate it ([`files`]); [`AuditLog::check_writable`] reserves a
//! record's space before the tool runs (`fallocate` past the end, the file's
//! size unchanged). Torn lines and reservations are described in
//! docs/security.md, "Durability and load" and "The audit chain needs an
//! external anchor".

#![forbid(unsafe_code)]

use std::collections::HashSet;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::ThreadId;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::approval::ApprovedBy;
use crate::policy::Tier;
use crate::runtime::{SandboxReport, Usage};

pub mod files;
mod head;
pub mod read;
mod record;
mod redact;
mod stats;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_files;
mod verify;

use record::encode;
pub use record::{Decision, Record};
pub use redact::{redact, redact_with};
pub use stats::{ToolStats, stats};
pub use verify::{Verification, verify};

/// `prev` of the first record.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";
/// Longest string argument kept in a record as it is; a longer one is kept as
/// its digest and size, or whole with `[audit] record_content` (the record's
/// `args_sha256` covers the whole arguments either way).
pub const MAX_ARG_STRING: usize = 4096;
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

/// `[audit]` of the policy, as the log applies it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Settings {
    /// Rotate the log once its file has reached this many bytes.
    pub rotate: Option<u64>,
    /// Remove rotated files whose last record is older than this (at a rotation).
    pub keep: Option<Duration>,
    /// Keep string arguments longer than [`MAX_ARG_STRING`] whole (up to the
    /// arguments' bound) instead of as `{"sha256", "bytes"}`.
    pub record_content: bool,
}

impl From<&crate::policy::audit::AuditSettings> for Settings {
    fn from(s: &crate::policy::audit::AuditSettings) -> Settings {
        Settings { rotate: s.rotate, keep: s.keep, record_content: s.record_content }
    }
}

#[derive(Debug)]
struct Head {
    /// The file's length after the last line.
    len: u64,
    seq: u64,
    prev: String,
}

/// What the writers of one log share, behind its mutex.
#[derive(Debug)]
struct Commit {
    /// The log file appended to now (replaced when the log is rotated).
    file: Arc<File>,
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
    /// `<log>.lock`: its `flock` orders the appends and rotations of every
    /// warden process sharing the log.
    lock_file: File,
    settings: Settings,
    commit: Mutex<Commit>,
    synced: Condvar,
}

/// A zero byte: a record never holds one (JSON escapes control characters),
/// so a zero inside a line is a part of a write that a crash kept from the
/// disk (a file system shows unwritten blocks as zeros), or the blank fill an
/// older warden grew its log with.
fn is_fill(b: u8) -> bool {
    b == 0
}

/// How far back a writer looks through zero bytes for the last line before giving up.
const MAX_FILL_SCAN: u64 = 64 << 20;

/// The least free space the log's file system must have before a tool runs.
pub const MIN_FREE_BYTES: u64 = 1 << 20;

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

/// Opens (creating it, private to this user) the log file at `path`.
fn open_file(path: &Path) -> std::io::Result<File> {
    OpenOptions::new().read(true).write(true).create(true).truncate(false).mode(0o600).open(path)
}

impl AuditLog {
    /// Opens (creating it and its directory, private to this user) the log at
    /// `path`, and its lock file beside it.
    pub fn open(path: &Path) -> std::io::Result<AuditLog> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
        }
        let lock_file = open_file(&files::lock_path(path))?;
        let file = Arc::new(open_file(path)?);
        let commit = Commit {
            file,
            head: None,
            written: 0,
            durable: 0,
            syncs: 0,
            syncing: false,
            failed: None,
            reserved: HashSet::new(),
            no_prealloc: false,
        };
        Ok(AuditLog {
            path: path.to_path_buf(),
            lock_file,
            settings: Settings::default(),
            commit: Mutex::new(commit),
            synced: Condvar::new(),
        })
    }

    /// Applies the policy's `[audit]` settings (rotation, retention, content).
    pub fn set_settings(&mut self, settings: Settings) {
        self.settings = settings;
    }

    /// The settings in force.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The arguments of a call as its record keeps them ([`redact_with`] under
    /// this log's `record_content`).
    pub fn args_of(&self, args: &Value) -> Value {
        redact_with(args, self.settings.record_content)
    }

    /// The log's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether a record written now would be durable at the log's path: the
    /// file is still linked there (not removed or replaced, other than by a
    /// rotation), is not immutable (`chattr +i` refuses every write, even to an
    /// open descriptor), and its file system is writable and has at least
    /// [`MIN_FREE_BYTES`] free. The executor asks before a tool runs, so that a
    /// call without a record never runs.
    ///
    /// It also reserves the record's space: past the end of the log, blocks for
    /// [`MAX_RECORD_BYTES`] times the calls of this process checked and not yet
    /// appended (this one included) are allocated without changing the file's
    /// size, so that a tool filling the file system while it runs cannot leave
    /// its record without room. The reservation is held by the calling thread
    /// until its next [`AuditLog::append`]. Where the file system does not
    /// support `fallocate`, nothing is reserved (the free-space check stands alone).
    pub fn check_writable(&self) -> std::io::Result<()> {
        let file = {
            let commit = self.lock();
            if let Some(why) = &commit.failed {
                return Err(sync_failed(why));
            }
            commit.file.clone()
        };
        let len = files::still_there(&file, &self.path).or_else(|e| match e {
            // Rotated by another warden: the reservation below opens the new file.
            files::Moved::Rotated => Ok(0),
            files::Moved::Other(e) => Err(e),
        })?;
        // A file-size limit warden inherited (nothing the tool does can set one:
        // seccomp refuses prlimit64 on another process) would stop the append.
        let (limit, _) =
            nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_FSIZE).map_err(std::io::Error::from)?;
        if limit != nix::sys::resource::RLIM_INFINITY && limit < len.saturating_add(MAX_RECORD_BYTES as u64 * 16) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::FileTooLarge,
                format!(
                    "warden's RLIMIT_FSIZE ({limit} bytes) leaves no room past the log's {len} bytes; raise it \
                     (ulimit -f), set `[audit] rotate` below it, or start a new log"
                ),
            ));
        }
        let fs = nix::sys::statvfs::fstatvfs(&*file).map_err(std::io::Error::from)?;
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

    /// Reserves [`MAX_RECORD_BYTES`] past the end for the calling thread (see
    /// [`AuditLog::check_writable`]), rotating the log first if it has reached `rotate`.
    fn reserve(&self) -> std::io::Result<()> {
        let mut commit = self.lock();
        let me = std::thread::current().id();
        let fresh = commit.reserved.insert(me);
        // The flock makes the end found here the end the reservation starts from.
        self.lock_file.lock()?;
        let reserved = self.current(&mut commit).and_then(|size| {
            let mut head = self.head(&mut commit, size)?;
            if self.settings.rotate.is_some_and(|r| head.len >= r) {
                self.rotate(&mut commit, &mut head)?;
            }
            let want = commit.reserved.len() * MAX_RECORD_BYTES;
            let end = head.len;
            commit.head = Some(head);
            self.preallocate(&mut commit, end, want)
        });
        let unlocked = self.lock_file.unlock();
        if let Err(e) = reserved.and(unlocked) {
            if fresh {
                commit.reserved.remove(&me);
            }
            return Err(e);
        }
        Ok(())
    }

    /// The size of the file the log's path names now, after switching to it if
    /// another warden rotated the log (the caller holds the flock).
    fn current(&self, commit: &mut Commit) -> std::io::Result<u64> {
        match files::still_there(&commit.file, &self.path) {
            Ok(size) => Ok(size),
            Err(files::Moved::Other(e)) => Err(e),
            Err(files::Moved::Rotated) => {
                let file = Arc::new(open_file(&self.path)?);
                self.switch(commit, file)?;
                // Read again: the new file's last line, or the rotated file's if it is empty.
                commit.head = None;
                len_of(&commit.file)
            }
        }
    }

    /// Makes every line written to the current file durable, then appends to
    /// `file` from now on. A line of this process in the old file was written
    /// before any in the new one, so the tickets stay in order.
    fn switch(&self, commit: &mut Commit, file: Arc<File>) -> std::io::Result<()> {
        if let Err(e) = commit.file.sync_data() {
            commit.failed = Some(e.to_string());
            self.synced.notify_all();
            return Err(sync_failed(&e.to_string()));
        }
        commit.syncs += 1;
        commit.durable = commit.written;
        self.synced.notify_all();
        commit.file = file;
        Ok(())
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
        match fallocate(&*commit.file, FallocateFlags::KEEP_SIZE, at, bytes as u64) {
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
        self.lock_file.lock()?;
        // A record appended to a removed or replaced file would be lost without a word.
        let written = self.current(&mut commit).and_then(|size| self.write_line(&mut commit, record, size, reserved));
        let unlocked = self.lock_file.unlock();
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
            // Lead: one fdatasync for every line written so far, this one included
            // (those written to a file since rotated were synced when it was).
            commit.syncing = true;
            let through = commit.written;
            let file = commit.file.clone();
            drop(commit);
            let synced = file.sync_data();
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

    /// Writes `record` as the next line of the chain at the end of the file,
    /// `size` bytes long (the caller holds the flock); `reserved` if its space
    /// was reserved. A line without a reservation rotates the log first if it
    /// has reached `rotate` (a reserved one goes where its space is).
    fn write_line(&self, commit: &mut Commit, record: &Record, size: u64, reserved: bool) -> std::io::Result<()> {
        let mut head = self.head(commit, size)?;
        let (line, prev) = match encode(record, head.seq + 1, &head.prev) {
            Ok(encoded) => encoded,
            Err(e) => {
                commit.head = Some(head);
                return Err(e);
            }
        };
        if !reserved {
            if self.settings.rotate.is_some_and(|r| head.len >= r)
                && let Err(e) = self.rotate(commit, &mut head)
            {
                commit.head = Some(head);
                return Err(e);
            }
            // Room for this line on top of what the calls in flight have reserved, or no line at all.
            let want = line.len() + commit.reserved.len() * MAX_RECORD_BYTES;
            if let Err(e) = self.preallocate(commit, head.len, want) {
                commit.head = Some(head);
                return Err(e);
            }
        }
        let start = head.len;
        if let Err(e) = commit.file.write_all_at(&line, start) {
            // No torn line may stay for the next append to be merged into: cut what was written.
            let cut = commit.file.set_len(start);
            let outcome = match &cut {
                Ok(()) => "the partial line was cut off".to_string(),
                Err(c) => format!("the partial line could not be cut off ({c}); the next append moves it aside"),
            };
            if cut.is_ok() {
                // Cutting freed the reservations past the end too: take them back if there is room.
                let want = commit.reserved.len() * MAX_RECORD_BYTES;
                let _ = self.preallocate(commit, start, want);
                commit.head = Some(head);
            }
            return Err(std::io::Error::new(e.kind(), format!("{e} ({outcome})")));
        }
        commit.head = Some(Head { len: start + line.len() as u64, seq: head.seq + 1, prev });
        Ok(())
    }

    /// Renames the current file to its rotated name, starts a new one at the
    /// path (the chain continues: `head` keeps its seq and prev, its length
    /// becomes 0), and removes rotated files older than `keep`. The caller
    /// holds the flock. The new file gets the reservations of this process's
    /// calls in flight; another process's reservations stay in the old file
    /// (its next record needs room of its own).
    fn rotate(&self, commit: &mut Commit, head: &mut Head) -> std::io::Result<()> {
        let first = files::first_seq(&commit.file)?.unwrap_or(head.seq);
        let to = files::rotated_path(&self.path, first);
        if to.exists() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                format!("cannot rotate the log: {} exists already; move it away", to.display()),
            ));
        }
        // Its reservations past the end are of no use in a file nobody appends to.
        commit.file.set_len(head.len)?;
        fs::rename(&self.path, &to)?;
        let file = OpenOptions::new().read(true).write(true).create_new(true).mode(0o600).open(&self.path);
        let file = match file {
            Ok(f) => Arc::new(f),
            Err(e) => {
                let _ = fs::rename(&to, &self.path);
                return Err(std::io::Error::new(e.kind(), format!("cannot start a new log file after rotating: {e}")));
            }
        };
        self.switch(commit, file)?;
        files::sync_dir(&self.path)?;
        head.len = 0;
        tracing::info!("audit log {}: rotated to {} (records from seq {first})", self.path.display(), to.display());
        if let Some(keep) = self.settings.keep {
            files::remove_older(&self.path, keep);
        }
        Ok(())
    }
}
