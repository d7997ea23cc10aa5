//! `GET /api/feed`: server-sent events over one streamed body. Each open page
//! gets a task of its own that polls, every [`POLL`]: the audit log's new
//! records (`record`), each process's live events under `L.live/events/`
//! (`event`), and the inbox of pending approvals (`inbox`, the whole list,
//! when it changed). A page's queue holds [`QUEUE`] messages: a page that
//! stops reading stops its own task, no other.

use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Frame;
use serde_json::{Value, json};

use super::{Body, Console};

/// How often the files are looked at.
pub(super) const POLL: Duration = Duration::from_millis(200);
/// Messages queued for one page.
pub(super) const QUEUE: usize = 256;
/// Records sent when a page connects (the latest ones).
pub(super) const BACKLOG: usize = 300;
/// The most bytes read from one file per poll.
pub(super) const CHUNK: u64 = 1 << 20;
/// A comment line this often keeps proxies and the page's reader awake.
pub(super) const HEARTBEAT: Duration = Duration::from_secs(15);

/// A body fed by a channel.
struct Stream(tokio::sync::mpsc::Receiver<Bytes>);

impl hyper::body::Body for Stream {
    type Data = Bytes;
    type Error = std::convert::Infallible;
    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        self.0.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b))))
    }
}

/// The feed's body; its task holds `permit` (one of [`super::MAX_FEEDS`]).
pub(super) fn start(c: Arc<Console>, permit: tokio::sync::OwnedSemaphorePermit) -> Body {
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(QUEUE);
    tokio::spawn(async move {
        let _permit = permit;
        run(c, tx).await;
    });
    Stream(rx).boxed()
}

fn message(kind: &str, data: &Value) -> Bytes {
    Bytes::from(format!("event: {kind}\ndata: {data}\n\n"))
}

/// A file read as it grows: complete lines only, blank fill (NUL bytes a
/// writer that grows the log in chunks keeps past its end) skipped.
struct Tail {
    path: PathBuf,
    offset: u64,
    /// The file's inode: another file at the path (a rotation) is read from its start.
    ino: u64,
}

fn inode(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).map_or(0, |m| m.ino())
}

impl Tail {
    /// From the start of the last `backlog` lines (within [`CHUNK`]).
    fn last_lines(path: &Path, backlog: usize) -> Tail {
        let mut t = Tail { path: path.to_path_buf(), offset: 0, ino: inode(path) };
        let len = std::fs::metadata(path).map_or(0, |m| m.len());
        t.offset = len.saturating_sub(CHUNK);
        let Ok(data) = t.read() else { return t };
        let mut starts: Vec<u64> = Vec::new();
        let mut at = t.offset;
        let skip_partial = t.offset > 0;
        for (i, line) in data.split_inclusive(|&b| b == b'\n').enumerate() {
            if !(skip_partial && i == 0) && line.last() == Some(&b'\n') {
                starts.push(at);
            }
            at += line.len() as u64;
        }
        t.offset = starts.len().checked_sub(backlog).map_or(starts.first().copied().unwrap_or(t.offset), |i| starts[i]);
        t
    }

    fn read(&self) -> std::io::Result<Vec<u8>> {
        let mut f = std::fs::File::open(&self.path)?;
        let len = f.metadata()?.len();
        if len <= self.offset {
            return Ok(Vec::new());
        }
        f.seek(SeekFrom::Start(self.offset))?;
        let mut data = Vec::new();
        f.take((len - self.offset).min(CHUNK)).read_to_end(&mut data)?;
        Ok(data)
    }

    /// The complete lines written since the last call, parsed (a line that is
    /// not JSON is skipped).
    fn next(&mut self) -> Vec<Value> {
        let ino = inode(&self.path);
        if ino != self.ino || std::fs::metadata(&self.path).is_ok_and(|m| m.len() < self.offset) {
            // Replaced (rotated) or cut: read the new file from its start.
            (self.offset, self.ino) = (0, ino);
        }
        let Ok(data) = self.read() else { return Vec::new() };
        let end = data.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        let mut out = Vec::new();
        for line in data[..end].split(|&b| b == b'\n') {
            let line = line.trim_ascii_start();
            let line: &[u8] = line.iter().position(|&b| b != 0).map_or(&[], |i| &line[i..]);
            if line.is_empty() || line.contains(&0) {
                continue;
            }
            if let Ok(v) = serde_json::from_slice::<Value>(line) {
                out.push(v);
            }
        }
        self.offset += end as u64;
        out
    }
}

/// The pending approvals in `L.live/inbox`, oldest first (the inbox's own
/// reading: ids checked, expired ones and those of dead processes removed),
/// each marked `answered` once an answer waits beside it.
pub(super) fn pending(log: &Path) -> Vec<Value> {
    let inbox = crate::live::Live::for_log(log).inbox();
    inbox
        .list()
        .into_iter()
        .filter_map(|p| {
            let answered = inbox.answered(&p.id);
            let mut v = serde_json::to_value(p).ok()?;
            v["answered"] = json!(answered);
            Some(v)
        })
        .collect()
}

/// The events files, each followed from its last [`BACKLOG`] lines.
fn events(live: &Path, tails: &mut HashMap<PathBuf, Tail>) -> Vec<Value> {
    // The files of processes that ended are gone.
    tails.retain(|path, _| path.exists());
    let Ok(entries) = std::fs::read_dir(live.join("events")) else { return Vec::new() };
    let mut out = Vec::new();
    for e in entries.flatten() {
        let path = e.path();
        if path.extension().and_then(|x| x.to_str()) != Some("jsonl") {
            continue;
        }
        let tail = tails.entry(path.clone()).or_insert_with(|| Tail::last_lines(&path, BACKLOG));
        out.extend(tail.next());
    }
    out
}

/// What one page's task follows.
struct Files {
    log: Tail,
    events: HashMap<PathBuf, Tail>,
    /// Events older than the first record sent (set at the first poll) are
    /// not sent: their calls ended before the records the page has (it would
    /// show them running for ever).
    since_ms: Option<u64>,
}

/// When the record `r` was made, in ms since the epoch (0 when it cannot be read).
fn record_ms(r: &Value) -> u64 {
    r.get("ts")
        .and_then(Value::as_str)
        .and_then(|ts| humantime::parse_rfc3339(ts).ok())
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// What changed since the last poll.
struct Changes {
    records: Vec<Value>,
    events: Vec<Value>,
    inbox: Vec<Value>,
}

fn poll(files: &mut Files, log: &Path, live: &Path) -> Changes {
    let records = files.log.next();
    let since = *files.since_ms.get_or_insert_with(|| records.first().map_or(0, record_ms));
    let mut evs = events(live, &mut files.events);
    evs.retain(|e| e.get("ts_ms").and_then(Value::as_u64).is_none_or(|t| t >= since));
    Changes { records, events: evs, inbox: pending(log) }
}

async fn run(c: Arc<Console>, tx: tokio::sync::mpsc::Sender<Bytes>) {
    let mut files = Some(Files { log: Tail::last_lines(&c.log, BACKLOG), events: HashMap::new(), since_ms: None });
    let mut inbox_seen: Option<String> = None;
    let mut beat = Instant::now();
    let hello = json!({"log": c.log.display().to_string(), "live": c.live.display().to_string(), "via": c.via});
    if tx.send(message("hello", &hello)).await.is_err() {
        return;
    }
    while let Some(mut f) = files.take() {
        let (log, live) = (c.log.clone(), c.live.clone());
        let Ok((f, changes)) = tokio::task::spawn_blocking(move || {
            let changes = poll(&mut f, &log, &live);
            (f, changes)
        })
        .await
        else {
            return;
        };
        files = Some(f);
        let mut out: Vec<Bytes> = changes.records.iter().map(|r| message("record", r)).collect();
        out.extend(changes.events.iter().map(|e| message("event", e)));
        let inbox_text = Value::Array(changes.inbox).to_string();
        if inbox_seen.as_deref() != Some(&inbox_text) {
            out.push(Bytes::from(format!("event: inbox\ndata: {inbox_text}\n\n")));
            inbox_seen = Some(inbox_text);
        }
        if out.is_empty() && beat.elapsed() >= HEARTBEAT {
            out.push(Bytes::from_static(b": beat\n\n"));
        }
        for m in out {
            beat = Instant::now();
            if tx.send(m).await.is_err() {
                return;
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(POLL) => {}
            _ = tx.closed() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::io::Write;

    #[test]
    fn a_tail_yields_whole_lines_only_and_skips_the_blank_fill() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let mut f = std::fs::File::create(&path).unwrap();
        f.write_all(b"{\"seq\":1}\n{\"seq\":2}\n").unwrap();
        let mut t = Tail::last_lines(&path, 1);
        assert_eq!(t.next(), vec![json!({"seq": 2})], "the backlog is the last line");
        // A writer that grows the log in chunks leaves NUL fill past its end;
        // a record is written over it, first in part.
        f.write_all(&[0u8; 64]).unwrap();
        assert!(t.next().is_empty());
        let mut g = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        g.seek(SeekFrom::Start(20)).unwrap();
        g.write_all(b"{\"seq\":3").unwrap();
        assert!(t.next().is_empty(), "a torn line waits");
        g.write_all(b"}\n").unwrap();
        assert_eq!(t.next(), vec![json!({"seq": 3})]);
        assert!(t.next().is_empty());
        // Replaced by another file (rotated): read from its start.
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, b"{\"seq\":9}\n").unwrap();
        assert_eq!(t.next(), vec![json!({"seq": 9})]);
    }
}
