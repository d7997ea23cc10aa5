//! warden's OpenTelemetry export (`[audit.otlp]`): every record of the audit
//! log as an OTLP log record, and optionally a span per call, sent to a
//! collector in the background.
//!
//! The local log stays the source of truth: the exporter reads it (it never
//! sits between a call and its reply), sends what it finds after the cursor
//! beside the log in bounded batches, retries with exponential back-off, and
//! moves the cursor only past what the collector accepted, so what could not
//! be sent is sent by the next warden that starts. Of several wardens sharing
//! a log, the one holding the exporter's lock exports every record of it.
//! Trusted input: the policy's settings; the log is read as data (a line that
//! is not a record is skipped). docs/otlp.md has the contract.

#![forbid(unsafe_code)]

mod cursor;
pub mod encode;
mod reader;
mod transport;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use prost::Message as _;
use warden_policy::otlp::Otlp;

pub use cursor::{cursor_path, lock_path};

use crate::cursor::Cursor;
use crate::reader::Line;
use crate::transport::{Outcome, Transport};

/// How often the exporter looks at the log for new records.
const POLL: Duration = Duration::from_millis(250);
/// How often a warden whose log another warden exports asks for the lock again.
const LOCK_RETRY: Duration = Duration::from_secs(2);
/// The first wait after a failed request; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
/// The longest wait between two attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// The most bytes of records (as the log holds them) in one request, below
/// the 4 MiB a collector's gRPC receiver takes by default.
const MAX_BATCH_BYTES: usize = 3 << 20;

/// What the caller and the exporter's thread share.
#[derive(Debug, Default)]
struct State {
    /// The caller is leaving: stop once a look at the log begun after this was set finds nothing to send.
    finish: bool,
    /// The thread has ended.
    stopped: bool,
    /// Records the collector accepted from this process.
    exported: u64,
}

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<State>,
    wake: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits up to `d`, or until the caller finishes. Returns whether it is finishing.
    fn sleep(&self, d: Duration) -> bool {
        let state = self.lock();
        if state.finish {
            return true;
        }
        let (state, _) = self.wake.wait_timeout(state, d).unwrap_or_else(PoisonError::into_inner);
        state.finish
    }
}

/// A running export; [`Exporter::finish`] when leaving.
#[derive(Debug)]
pub struct Exporter {
    shared: Arc<Shared>,
    flush: Duration,
}

/// Starts exporting the log at `log` as `settings` say, on a thread of its
/// own. Fails (naming the variable or file) when a header's variable is not
/// in warden's environment or the TLS roots cannot be loaded.
pub fn start(settings: &Otlp, log: &Path) -> Result<Exporter, String> {
    let transport = Transport::new(settings)?;
    let shared = Arc::new(Shared::default());
    let worker = Worker { settings: settings.clone(), log: log.to_path_buf(), transport, shared: shared.clone() };
    std::thread::Builder::new()
        .name("warden-otlp".into())
        .spawn(move || worker.run())
        .map_err(|e| format!("[audit.otlp]: cannot start the exporter's thread: {e}"))?;
    Ok(Exporter { shared, flush: settings.flush })
}

impl Exporter {
    /// Waits, at most the policy's `flush` time, for the records written so
    /// far to be sent; what is left is sent by the next warden that starts.
    /// Returns how many records this process exported.
    pub fn finish(self) -> u64 {
        let deadline = Instant::now() + self.flush;
        let mut state = self.shared.lock();
        state.finish = true;
        self.shared.wake.notify_all();
        while !state.stopped {
            let now = Instant::now();
            if now >= deadline {
                tracing::info!(
                    "OTLP export: records not yet sent are left for the next warden (the cursor says where)"
                );
                break;
            }
            state = self.shared.wake.wait_timeout(state, deadline - now).unwrap_or_else(PoisonError::into_inner).0;
        }
        state.exported
    }
}

struct Worker {
    settings: Otlp,
    log: PathBuf,
    transport: Transport,
    shared: Arc<Shared>,
}

/// What one look at the log came to.
enum Step {
    /// Everything the log held was sent.
    CaughtUp,
    /// Sent a full queue: there may be more.
    More,
    /// A request failed: try again after the back-off.
    Failed,
}

/// Where the export stands in the log.
struct Position {
    cursor: Cursor,
    /// The byte offset to read on from.
    offset: u64,
    /// The records being sent are the current file's (not a rotated one's).
    live: bool,
    /// Records per request now (halved while the collector refuses a batch as too large).
    batch: usize,
    backoff: Duration,
}

impl Worker {
    fn run(self) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build();
        match runtime {
            Ok(rt) => self.export(&rt),
            Err(e) => tracing::warn!("OTLP export: no runtime for the exporter ({e}); nothing is exported"),
        }
        let mut state = self.shared.lock();
        state.stopped = true;
        self.shared.wake.notify_all();
    }

    fn export(&self, rt: &tokio::runtime::Runtime) {
        // The lock is held as long as this warden exports; closing the file lets it go.
        let _lock = loop {
            // Another warden exports this log (every record of it): nothing to wait for when leaving.
            match cursor::try_lock(&self.log) {
                Ok(Some(file)) => break file,
                Ok(None) => {}
                Err(e) => tracing::warn!("OTLP export: cannot lock {}: {e}", cursor::lock_path(&self.log).display()),
            }
            if self.shared.sleep(LOCK_RETRY) {
                return;
            }
        };
        let cursor = cursor::load(&self.log);
        let offset = cursor.offset;
        let mut pos = Position { cursor, offset, live: true, batch: self.settings.batch, backoff: FIRST_BACKOFF };
        loop {
            // Read before the look: a record appended before `finish` was asked is seen by this look.
            let finishing = self.shared.lock().finish;
            match self.step(rt, &mut pos) {
                Step::CaughtUp if finishing => return,
                Step::CaughtUp => {
                    self.shared.sleep(POLL);
                }
                Step::More => {}
                // Leaving, and the collector did not take the records: the cursor keeps them for the next warden.
                Step::Failed if self.shared.lock().finish => return,
                Step::Failed => {
                    let wait = pos.backoff;
                    pos.backoff = (pos.backoff * 2).min(MAX_BACKOFF);
                    if self.shared.sleep(wait) {
                        return;
                    }
                }
            }
        }
    }

    /// Reads what the log holds after `pos` and sends it.
    fn step(&self, rt: &tokio::runtime::Runtime, pos: &mut Position) -> Step {
        let size = std::fs::metadata(&self.log).map(|m| m.len()).unwrap_or(0);
        if size < pos.offset {
            tracing::warn!(
                "OTLP export: {} is shorter than the cursor's offset (a new log?); exporting it from its start",
                self.log.display()
            );
            pos.cursor = Cursor::default();
            pos.offset = 0;
        }
        // After a rotation, what the cursor has not reached may be in rotated files: the first
        // file (in chain order) that holds records after the cursor is sent from.
        let mut found = None;
        for (file, from, live) in reader::sources(&self.log, pos.cursor.seq, pos.offset) {
            match reader::records_after(&file, from, pos.cursor.seq, self.settings.queue) {
                Ok(read) if live || !read.lines.is_empty() => {
                    found = Some((read, live));
                    break;
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!("OTLP export: cannot read {}: {e}", file.display());
                    return Step::CaughtUp;
                }
            }
        }
        let Some((read, live)) = found else { return Step::CaughtUp };
        pos.live = live;
        if read.lines.is_empty() {
            pos.offset = read.next;
            return Step::CaughtUp;
        }
        let mut rest: &[Line] = &read.lines;
        while !rest.is_empty() {
            let n = batch_len(rest, pos.batch);
            match rt.block_on(self.send(&rest[..n])) {
                Ok(()) => self.accepted(pos, &rest[n - 1], n),
                Err(Outcome::Refused(why)) if n > 1 => {
                    pos.batch = (n / 2).max(1);
                    tracing::warn!("OTLP export: the collector refused {n} records ({why}); sending fewer at a time");
                    continue;
                }
                Err(Outcome::Refused(why)) => {
                    tracing::error!(
                        "OTLP export: the collector refused record {} ({why}); it stays in the local log only",
                        rest[0].seq
                    );
                    self.accepted(pos, &rest[0], 0);
                }
                Err(Outcome::Retry(why)) => {
                    tracing::warn!("OTLP export: {why}; trying again in {:?}", pos.backoff);
                    return Step::Failed;
                }
                Err(Outcome::Accepted(_)) => return Step::Failed,
            }
            rest = &rest[n.max(1)..];
        }
        if !live {
            // Offsets in a rotated file are not the current file's: read that from its start (by seq).
            pos.offset = 0;
            return Step::More;
        }
        if read.lines.last().is_some_and(|l| l.end == pos.offset) {
            pos.offset = read.next;
        }
        if read.lines.len() < self.settings.queue { Step::CaughtUp } else { Step::More }
    }

    /// The collector took the records up to `last` (`n` of them this request).
    fn accepted(&self, pos: &mut Position, last: &Line, n: usize) {
        // The stored offset is the current file's only: a record of a rotated file keeps 0 (read by seq).
        let offset = if pos.live { last.end } else { 0 };
        pos.cursor = Cursor { seq: last.seq, hash: last.hash.clone(), offset };
        pos.offset = offset;
        pos.backoff = FIRST_BACKOFF;
        if let Err(e) = cursor::store(&self.log, &pos.cursor) {
            tracing::warn!(
                "OTLP export: cannot write {}: {e}; records up to {} may be sent again",
                cursor::cursor_path(&self.log).display(),
                last.seq
            );
        }
        self.shared.lock().exported += n as u64;
    }

    /// Sends `lines` as log records (and their spans): `Ok` when all were accepted.
    async fn send(&self, lines: &[Line]) -> Result<(), Outcome> {
        let log = self.log.display().to_string();
        let s = &self.settings;
        let logs = encode::logs_request(lines, &log, s.arguments, s.spans).encode_to_vec();
        match self.transport.post(&s.logs, logs).await {
            Outcome::Accepted(body) => partial("log records", &body),
            other => return Err(other),
        }
        if s.spans
            && let Some(traces) = encode::traces_request(lines, &log)
        {
            match self.transport.post(&s.traces, traces.encode_to_vec()).await {
                Outcome::Accepted(body) => partial("spans", &body),
                other => return Err(other),
            }
        }
        Ok(())
    }
}

/// How many of `lines` go in the next request: at most `batch`, at most
/// [`MAX_BATCH_BYTES`] of records, at least one.
fn batch_len(lines: &[Line], batch: usize) -> usize {
    let mut bytes = 0;
    let mut n = 0;
    for l in lines.iter().take(batch) {
        bytes += l.len;
        if n > 0 && bytes > MAX_BATCH_BYTES {
            break;
        }
        n += 1;
    }
    n.max(1)
}

/// Says what a collector's partial success rejected (never sent again: the
/// specification says a partial success is not to be retried).
fn partial(what: &str, body: &[u8]) {
    use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceResponse;
    // Both responses put `partial_success` in field 1 with the count in field 1 and the message in field 2.
    if let Ok(r) = ExportLogsServiceResponse::decode(body)
        && let Some(p) = r.partial_success.filter(|p| p.rejected_log_records > 0 || !p.error_message.is_empty())
    {
        tracing::warn!(
            "OTLP export: the collector rejected {} {what}: {}; they stay in the local log",
            p.rejected_log_records,
            p.error_message
        );
    }
}
