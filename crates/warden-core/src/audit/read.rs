//! Reading the log as `warden log show` and `warden log tail` do: records of
//! one call, the last records, and new records as they come (across rotations).

use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;

use super::*;

/// Most records `log show` prints for one call id (a background job has two).
pub const MAX_SHOWN: usize = 64;

/// Every record of call `call_id`, in the order of the log (all its files).
pub fn records_of(path: &Path, call_id: &str) -> std::io::Result<Vec<Value>> {
    let mut found = Vec::new();
    let quoted = serde_json::to_string(call_id).unwrap_or_default();
    for file in files::log_files(path)? {
        let reader = BufReader::new(File::open(&file)?);
        for line in reader.split(b'\n') {
            let line = line?;
            // A cheap look before parsing: the id as JSON writes it.
            if !line.windows(quoted.len()).any(|w| w == quoted.as_bytes()) {
                continue;
            }
            let Ok(rec) = serde_json::from_slice::<Value>(&line) else { continue };
            if rec.get("call_id").and_then(Value::as_str) == Some(call_id) && found.len() < MAX_SHOWN {
                found.push(rec);
            }
        }
    }
    Ok(found)
}

/// Whole lines of `data`: each ending in a newline and holding no zero byte.
fn whole_lines(data: &[u8]) -> impl Iterator<Item = &[u8]> {
    data.split_inclusive(|&b| b == b'\n').filter(|l| l.ends_with(b"\n") && !l.contains(&0)).map(|l| &l[..l.len() - 1])
}

/// The last `n` whole lines of the first `len` bytes of `file`, oldest first.
fn last_of(file: &File, len: u64, n: usize) -> std::io::Result<Vec<Vec<u8>>> {
    let mut window = NEAR_WINDOW.max(64 << 10);
    loop {
        let from = len.saturating_sub(window);
        let mut data = vec![0u8; (len - from) as usize];
        file.read_exact_at(&mut data, from)?;
        // The first line of a window that does not start the file may be cut.
        let body = if from == 0 {
            &data[..]
        } else {
            match data.iter().position(|&b| b == b'\n') {
                Some(i) => &data[i + 1..],
                None => &[][..],
            }
        };
        let lines: Vec<&[u8]> = whole_lines(body).collect();
        if lines.len() >= n || from == 0 {
            return Ok(lines[lines.len().saturating_sub(n)..].iter().map(|l| l.to_vec()).collect());
        }
        window = window.saturating_mul(4);
    }
}

/// Follows the log: the last records, then each new one, across rotations.
#[derive(Debug)]
pub struct Follower {
    path: PathBuf,
    file: File,
    ino: (u64, u64),
    pos: u64,
    /// A line begun and not yet ended.
    pending: Vec<u8>,
}

impl Follower {
    /// Opens the log at `path` and answers its last `n` records (across its
    /// files, oldest first) and a follower that starts right after them.
    pub fn open(path: &Path, n: usize) -> std::io::Result<(Vec<Vec<u8>>, Follower)> {
        let file = File::open(path)?;
        let meta = file.metadata()?;
        let len = meta.len();
        let mut lines = if n == 0 { Vec::new() } else { last_of(&file, len, n)? };
        let mut older = files::rotated(path)?;
        while lines.len() < n {
            let Some(prev) = older.pop() else { break };
            let f = File::open(&prev)?;
            let mut more = last_of(&f, f.metadata()?.len(), n - lines.len())?;
            more.append(&mut lines);
            lines = more;
        }
        // Where `last_of` stopped: a line still being written is picked up by `poll`.
        let mut end = len;
        let mut tail = vec![0u8; len.min(NEAR_WINDOW) as usize];
        let from = len - tail.len() as u64;
        file.read_exact_at(&mut tail, from)?;
        if let Some(i) = tail.iter().rposition(|&b| b == b'\n') {
            end = len - tail.len() as u64 + i as u64 + 1;
        } else if len <= NEAR_WINDOW {
            end = 0;
        }
        let follower =
            Follower { path: path.to_path_buf(), ino: (meta.dev(), meta.ino()), file, pos: end, pending: Vec::new() };
        Ok((lines, follower))
    }

    /// The whole lines written since the last poll, across rotations: the
    /// file followed is read to its end, then each file rotated after it,
    /// then the new current file.
    pub fn poll(&mut self) -> std::io::Result<Vec<Vec<u8>>> {
        let moved = fs::metadata(&self.path).is_ok_and(|m| (m.dev(), m.ino()) != self.ino);
        let mut lines = Vec::new();
        loop {
            let (more, full) = self.read_new()?;
            lines.extend(more);
            if !(full && moved) {
                break;
            }
        }
        if !moved {
            return Ok(lines);
        }
        // The new current file first: a rotation after this is seen at the next poll.
        let file = File::open(&self.path)?;
        let meta = file.metadata()?;
        let ino = (meta.dev(), meta.ino());
        let ours = fs::read_link(format!("/proc/self/fd/{}", self.file.as_raw_fd())).ok();
        let ours = ours.and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()));
        let after = |f: &PathBuf| {
            let name = f.file_name().map(|n| n.to_string_lossy().into_owned());
            ours.as_ref().is_some_and(|o| name.as_ref().is_some_and(|n| n > o))
        };
        for between in files::rotated(&self.path)?.iter().filter(|f| after(f)) {
            let Ok(f) = File::open(between) else { continue };
            let m = f.metadata()?;
            if (m.dev(), m.ino()) == ino {
                continue;
            }
            let mut data = Vec::new();
            (&f).take(m.len()).read_to_end(&mut data)?;
            lines.extend(whole_lines(&data).map(<[u8]>::to_vec));
        }
        *self = Follower { path: self.path.clone(), ino, file, pos: 0, pending: Vec::new() };
        loop {
            let (more, full) = self.read_new()?;
            lines.extend(more);
            if !full {
                break;
            }
        }
        Ok(lines)
    }

    /// The whole lines of at most [`TAIL_WINDOW`] new bytes, and whether it read that many.
    fn read_new(&mut self) -> std::io::Result<(Vec<Vec<u8>>, bool)> {
        self.file.seek(SeekFrom::Start(self.pos))?;
        let mut data = Vec::new();
        (&self.file).take(TAIL_WINDOW).read_to_end(&mut data)?;
        let full = data.len() as u64 == TAIL_WINDOW;
        // Zero bytes (an older warden's blank fill) are not written yet.
        if let Some(z) = data.iter().position(|&b| b == 0) {
            data.truncate(z);
        }
        self.pos += data.len() as u64;
        self.pending.extend_from_slice(&data);
        let Some(cut) = self.pending.iter().rposition(|&b| b == b'\n') else { return Ok((Vec::new(), full)) };
        let rest = self.pending.split_off(cut + 1);
        let done = std::mem::replace(&mut self.pending, rest);
        Ok((whole_lines(&done).map(<[u8]>::to_vec).collect(), full))
    }
}
