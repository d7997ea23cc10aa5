//! Where the chain ends: the last whole line of the log, found by reading
//! its end, with torn lines (a crash mid-write) moved aside first.

use super::*;

impl AuditLog {
    /// The head of the chain at the end of the current file, `size` bytes
    /// long: the one this process remembers if no other writer has appended
    /// since, or else read from the file (or, for an empty file, from the
    /// newest rotated one). The caller holds the flock.
    pub(super) fn head(&self, commit: &mut Commit, size: u64) -> std::io::Result<Head> {
        if let Some(h) = commit.head.take().filter(|h| h.len == size) {
            return Ok(h);
        }
        let (head, cut) = read_head(&commit.file, &self.path, size)?;
        if cut {
            // Cutting freed the reservations past the end: take them back.
            let want = commit.reserved.len() * MAX_RECORD_BYTES;
            self.preallocate(commit, head.len, want)?;
        }
        if head.len == 0
            && let Some(last) = files::rotated(&self.path)?.pop()
        {
            let file = File::open(&last)?;
            let (h, _) = read_head_within(&file, &last, len_of(&file)?, TAIL_WINDOW, false)?
                .ok_or_else(|| std::io::Error::other(format!("{}: its last record is not whole", last.display())))?;
            return Ok(Head { len: 0, ..h });
        }
        Ok(head)
    }
}

/// Finds the last complete line of `file` (at `path`), moving torn ones aside
/// first. Also answers whether the file was cut.
fn read_head(file: &File, path: &Path, size: u64) -> std::io::Result<(Head, bool)> {
    // The last line is most often within a record's length of the end: read
    // that much first (a `warden call` opens the log every time, and a
    // megabyte read at each was a tenth of a millisecond), the whole window
    // only when no line ends there.
    match read_head_within(file, path, size, NEAR_WINDOW, true)? {
        Some(head) => Ok(head),
        None => read_head_within(file, path, size, TAIL_WINDOW, true)?
            .ok_or_else(|| std::io::Error::other("the last audit record is longer than 1 MiB")),
    }
}

/// Where the content ends: the byte after the last one that is not a zero.
fn content_end(file: &File, size: u64) -> std::io::Result<u64> {
    let mut buf = vec![0u8; 64 << 10];
    let mut pos = size;
    while pos > 0 {
        if size - pos > MAX_FILL_SCAN {
            return Err(std::io::Error::other(format!(
                "the log ends in more than {} MiB of zero bytes, more than warden ever leaves: cut them off \
                 (truncate) or start a new log",
                MAX_FILL_SCAN >> 20
            )));
        }
        let from = pos.saturating_sub(buf.len() as u64);
        let chunk = &mut buf[..(pos - from) as usize];
        file.read_exact_at(chunk, from)?;
        if let Some(i) = chunk.iter().rposition(|&b| !is_fill(b)) {
            return Ok(from + i as u64 + 1);
        }
        pos = from;
    }
    Ok(0)
}

/// [`read_head`] looking back at most `window` bytes: `None` when no whole
/// line lies within them. With `repair`, torn lines at the end are moved aside
/// to `<log>.torn` and cut off, as are zero bytes after the last line (what a
/// crash, or an older warden's blank fill, left).
fn read_head_within(
    file: &File,
    path: &Path,
    size: u64,
    window: u64,
    repair: bool,
) -> std::io::Result<Option<(Head, bool)>> {
    let genesis = |len| Some((Head { len, seq: 0, prev: GENESIS.into() }, len < size));
    let end = content_end(file, size)?;
    if end == 0 {
        if repair && size > 0 {
            file.set_len(0)?;
            file.sync_data()?;
        }
        return Ok(genesis(0));
    }
    let start = end.saturating_sub(window);
    let mut tail = vec![0u8; (end - start) as usize];
    file.read_exact_at(&mut tail, start)?;
    // Torn lines at the end: one without its newline (a crash mid-append), or
    // one holding zeros (pages a crash kept from the disk; the lines of one
    // group commit can all be such).
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
        if !repair {
            return Ok(None);
        }
        let torn = tail.split_off(keep);
        move_aside(path, &torn)?;
        len = start + keep as u64;
        tracing::warn!(
            "audit log {}: moved {} torn last line(s) ({} bytes, a crash mid-write) to {}",
            path.display(),
            torn.split_inclusive(|&b| b == b'\n').count(),
            torn.len(),
            torn_path(path).display()
        );
    }
    let cut = len < size;
    if cut && repair {
        // Durably, before a new line goes there: a lost page of that line
        // must read as zeros, never as the torn bytes.
        file.set_len(len)?;
        file.sync_data()?;
    }
    if len == 0 {
        return Ok(genesis(0));
    }
    let body = &tail[..keep - 1];
    let last = match body.iter().rposition(|&b| b == b'\n') {
        Some(i) => &body[i + 1..],
        None if start == 0 => body,
        // The torn lines (if any) are cut off now: the next look starts at the cut.
        None => return Ok(None),
    };
    let seq = serde_json::from_slice::<Value>(last)
        .ok()
        .and_then(|v| v.get("seq").and_then(Value::as_u64))
        .ok_or_else(|| std::io::Error::other("the last audit record is not a warden record (no seq)"))?;
    Ok(Some((Head { len, seq, prev: sha256_hex(last) }, cut)))
}

/// `<log>.torn`, where torn lines go.
pub(super) fn torn_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".torn");
    path.with_file_name(name)
}

/// Appends `torn` to `<log>.torn`, its zeros shown as spaces so the file stays text.
fn move_aside(path: &Path, torn: &[u8]) -> std::io::Result<()> {
    let aside = torn_path(path);
    let mut t = OpenOptions::new().append(true).create(true).mode(0o600).open(&aside)?;
    for part in torn.split_inclusive(|&b| b == b'\n') {
        let part: Vec<u8> = part.iter().map(|&b| if is_fill(b) { b' ' } else { b }).collect();
        t.write_all(&part)?;
        if part.last() != Some(&b'\n') {
            t.write_all(b"\n")?;
        }
    }
    t.sync_data()
}
