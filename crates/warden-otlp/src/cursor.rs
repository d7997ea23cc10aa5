//! The cursor beside the log (`audit.jsonl.otlp-cursor`): the last record the
//! collector accepted (its `seq`, its hash, the byte offset past its line),
//! replaced atomically after each accepted batch; and the exporter's lock
//! (`audit.jsonl.otlp-lock`, an `flock`), so that of several wardens sharing a
//! log only one exports at a time.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::reader;

/// The last record exported.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Cursor {
    /// Its `seq` (0: nothing exported yet).
    pub(crate) seq: u64,
    /// Its hash.
    pub(crate) hash: String,
    /// The byte offset past its line in the log.
    pub(crate) offset: u64,
}

/// `{log}.{suffix}`.
pub(crate) fn beside(log: &Path, suffix: &str) -> PathBuf {
    let mut name = log.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(format!(".{suffix}"));
    log.with_file_name(name)
}

/// The cursor file of the log at `log`.
pub fn cursor_path(log: &Path) -> PathBuf {
    beside(log, "otlp-cursor")
}

/// The exporter's lock file of the log at `log`.
pub fn lock_path(log: &Path) -> PathBuf {
    beside(log, "otlp-lock")
}

/// Takes the exporter's lock of `log` if no other warden holds it (never waits).
pub(crate) fn try_lock(log: &Path) -> std::io::Result<Option<File>> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(lock_path(log))?;
    match file.try_lock() {
        Ok(()) => Ok(Some(file)),
        Err(std::fs::TryLockError::WouldBlock) => Ok(None),
        Err(std::fs::TryLockError::Error(e)) => Err(e),
    }
}

/// Reads the cursor of `log` and checks it against the log: the record it
/// names must end at its offset with its hash. Otherwise (no cursor, a new
/// log, a cursor of another log) the export starts over from the log's first
/// record: records may be sent twice (each carries its `seq` and hash), never
/// skipped.
pub(crate) fn load(log: &Path) -> Cursor {
    let path = cursor_path(log);
    let text = match std::fs::read(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Cursor::default(),
        Err(e) => {
            tracing::warn!("OTLP export: cannot read {} ({e}); exporting the log from its start", path.display());
            return Cursor::default();
        }
    };
    let Ok(cursor) = serde_json::from_slice::<Cursor>(&text) else {
        tracing::warn!("OTLP export: {} is not a cursor; exporting the log from its start", path.display());
        return Cursor::default();
    };
    match reader::record_ending_at(log, cursor.offset) {
        Ok(Some(line)) if line.seq == cursor.seq && line.hash == cursor.hash => cursor,
        _ if cursor.seq == 0 => Cursor::default(),
        _ => {
            tracing::warn!(
                "OTLP export: the cursor {} names record {} ({}), which {} does not hold where it says; exporting the \
                 log from its start",
                path.display(),
                cursor.seq,
                cursor.hash,
                log.display()
            );
            Cursor::default()
        }
    }
}

/// Replaces the cursor of `log` with `cursor`: written to a fresh file (a link
/// planted at its name is never followed), synced, renamed over the old one.
pub(crate) fn store(log: &Path, cursor: &Cursor) -> std::io::Result<()> {
    let path = cursor_path(log);
    let mut r = [0u8; 8];
    getrandom::fill(&mut r).map_err(|e| std::io::Error::other(format!("no randomness: {e}")))?;
    let tmp = beside(log, &format!("otlp-cursor.{}", hex::encode(r)));
    let written = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)?;
        f.write_all(&serde_json::to_vec(cursor)?)?;
        f.write_all(b"\n")?;
        f.sync_data()?;
        std::fs::rename(&tmp, &path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}
