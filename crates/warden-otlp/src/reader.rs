//! Reading the audit log from a byte offset: the whole lines after it (never
//! a line still being written, never the blank fill of zero bytes a `serve`
//! grows the log in), each with its `seq` and the hash the next line's `prev`
//! holds. The one place that knows the log's layout: a log split into several
//! files is read here.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use serde_json::Value;
use sha2::{Digest, Sha256};

/// The longest line read (a record is at most 32 KiB; a line longer than this
/// is not warden's, and is skipped).
pub(crate) const MAX_LINE: usize = 1 << 20;
/// How much is read at a time.
const CHUNK: usize = 256 << 10;

/// One record of the log.
#[derive(Debug, Clone)]
pub(crate) struct Line {
    /// Its `seq`.
    pub(crate) seq: u64,
    /// sha256 of the line (without its newline): the next record's `prev`.
    pub(crate) hash: String,
    /// The record, parsed.
    pub(crate) record: Value,
    /// The byte offset just past its newline.
    pub(crate) end: u64,
    /// Its length in bytes.
    pub(crate) len: usize,
}

/// What one read found.
#[derive(Debug, Default)]
pub(crate) struct Read {
    /// Whole records, in order.
    pub(crate) lines: Vec<Line>,
    /// Where the next read starts (past the last whole line looked at,
    /// skipped ones included).
    pub(crate) next: u64,
}

/// Reads up to `max` records of the log at `path` from byte `from`, skipping
/// those whose `seq` is `after` or less (a log read from its start). Lines
/// that are not records (not JSON, no `seq`) are skipped with a warning.
pub(crate) fn records_after(path: &Path, from: u64, after: u64, max: usize) -> std::io::Result<Read> {
    let file = File::open(path)?;
    let size = file.metadata()?.len();
    let mut out = Read { lines: Vec::new(), next: from.min(size) };
    let mut buf = Vec::new();
    let mut at = out.next;
    while out.lines.len() < max && at < size {
        let want = ((size - at) as usize).min(CHUNK.max(buf.len()));
        let mut chunk = vec![0u8; want];
        file.read_exact_at(&mut chunk, at)?;
        at += want as u64;
        buf.extend_from_slice(&chunk);
        let mut start = 0;
        while out.lines.len() < max {
            let Some(nl) = buf[start..].iter().position(|&b| b == b'\n' || b == 0) else { break };
            if buf[start + nl] == 0 {
                // Fill (or a line a crash left half written, which the next writer moves aside): the end for now.
                return Ok(out);
            }
            let line = &buf[start..start + nl];
            out.next += (nl + 1) as u64;
            start += nl + 1;
            if line.is_empty() {
                continue;
            }
            match parse(line, out.next) {
                Some(l) if l.seq > after => out.lines.push(l),
                Some(_) => {}
                None => tracing::warn!(
                    "audit log {}: the line ending at byte {} is not a warden record; it is not exported",
                    path.display(),
                    out.next
                ),
            }
        }
        buf.drain(..start);
        if buf.len() > MAX_LINE {
            tracing::warn!("audit log {}: a line longer than {MAX_LINE} bytes is skipped", path.display());
            out.next += buf.len() as u64;
            buf.clear();
        }
    }
    Ok(out)
}

/// Where the records after `after` are, in the order to read them: the log's
/// current file from `offset`; or, when a rotation moved some of them out of
/// it, the rotated files from the one that holds `after + 1` on (each from its
/// start, `false`: offsets there are not the current file's), then the current
/// file from its start.
pub(crate) fn sources(log: &Path, after: u64, offset: u64) -> Vec<(std::path::PathBuf, u64, bool)> {
    use warden_core::audit::files;
    let first = first_seq(log);
    if first.is_none_or(|f| f <= after + 1) {
        return vec![(log.to_path_buf(), offset, true)];
    }
    let rotated = files::rotated(log).unwrap_or_default();
    let starts = |p: &std::path::PathBuf| {
        p.file_name().and_then(|n| files::rotated_seq(log, &n.to_string_lossy())).unwrap_or(u64::MAX)
    };
    // From the last rotated file starting at or before the next record (the oldest left
    // when `keep` removed the one that held it: what remains is sent).
    let from = rotated.iter().rposition(|p| starts(p) <= after + 1).unwrap_or(0);
    let mut out: Vec<_> = rotated[from.min(rotated.len())..].iter().map(|p| (p.clone(), 0, false)).collect();
    out.push((log.to_path_buf(), 0, true));
    out
}

/// The `seq` of the first record of the file at `path`.
fn first_seq(path: &Path) -> Option<u64> {
    let file = File::open(path).ok()?;
    let mut head = vec![0u8; (64 << 10).min(file.metadata().ok()?.len() as usize)];
    file.read_exact_at(&mut head, 0).ok()?;
    let nl = head.iter().position(|&b| b == b'\n')?;
    parse(&head[..nl], nl as u64 + 1).map(|l| l.seq)
}

fn parse(line: &[u8], end: u64) -> Option<Line> {
    let record: Value = serde_json::from_slice(line).ok()?;
    let seq = record.get("seq")?.as_u64()?;
    Some(Line { seq, hash: hex::encode(Sha256::digest(line)), record, end, len: line.len() })
}

/// The record whose line ends exactly at byte `end`, if one does.
pub(crate) fn record_ending_at(path: &Path, end: u64) -> std::io::Result<Option<Line>> {
    let file = File::open(path)?;
    if end == 0 || file.metadata()?.len() < end {
        return Ok(None);
    }
    let from = end.saturating_sub(64 << 10);
    let mut tail = vec![0u8; (end - from) as usize];
    file.read_exact_at(&mut tail, from)?;
    if tail.pop() != Some(b'\n') {
        return Ok(None);
    }
    let start = match tail.iter().rposition(|&b| b == b'\n') {
        Some(i) => i + 1,
        None if from == 0 => 0,
        None => return Ok(None),
    };
    Ok(parse(&tail[start..], end))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stops_at_fill_and_partial_lines() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        let log = dir.path().join("audit.jsonl");
        let mut text =
            b"{\"seq\":1,\"prev\":\"0\"}\n{\"seq\":2,\"prev\":\"x\"}\nnot json\n{\"seq\":3,\"prev\":\"y\"}\n".to_vec();
        text.extend_from_slice(b"{\"seq\":4,");
        text.extend_from_slice(&[0u8; 100]);
        std::fs::write(&log, &text)?;
        let r = records_after(&log, 0, 1, 10)?;
        assert_eq!(r.lines.iter().map(|l| l.seq).collect::<Vec<_>>(), [2, 3]);
        let three = r.lines[1].clone();
        assert_eq!(r.next, three.end);
        let again = record_ending_at(&log, three.end)?.map(|l| (l.seq, l.hash));
        assert_eq!(again, Some((3, three.hash.clone())));
        assert_eq!(records_after(&log, r.next, 0, 10)?.lines.len(), 0);
        // The partial record completed: it is read from where the last read stopped.
        text.truncate(text.len() - 100);
        text.extend_from_slice(b"\"prev\":\"z\"}\n");
        std::fs::write(&log, &text)?;
        let r = records_after(&log, r.next, 0, 10)?;
        assert_eq!(r.lines.iter().map(|l| l.seq).collect::<Vec<_>>(), [4]);
        Ok(())
    }
}
