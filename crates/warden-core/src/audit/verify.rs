//! `warden log verify`: the hash chain, line by line, across the log's files.

use super::*;

/// What `log verify` found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Verification {
    /// Records checked.
    pub records: u64,
    /// A torn last line that was skipped (its line number in the last file).
    pub torn_line: Option<u64>,
    /// The first bad line (its number in [`Verification::problem_file`]) and why.
    pub problem: Option<(u64, String)>,
    /// sha256 of the last good line: keep it elsewhere to anchor the chain.
    pub head: String,
    /// The files checked, in the order of the chain (rotated ones first).
    pub files: Vec<PathBuf>,
    /// The file of [`Verification::problem`].
    pub problem_file: Option<PathBuf>,
    /// The chain starts mid-way, at this seq: the files before it were
    /// removed (`[audit] keep`), so its first `prev` cannot be checked.
    pub start_seq: Option<u64>,
}

/// Whether `path` is named as a rotated file (`NAME.<20 digits>[.jsonl]`).
fn looks_rotated(path: &Path) -> bool {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let name = name.strip_suffix(".jsonl").unwrap_or(&name);
    name.rsplit_once('.').is_some_and(|(_, d)| d.len() == 20 && d.bytes().all(|b| b.is_ascii_digit()))
}

/// Checks the hash chain of the log whose current file is `path`: its
/// rotated files (see [`files`]) in order, then `path`, the chain running on
/// from one file into the next.
pub fn verify(path: &Path) -> std::io::Result<Verification> {
    let all = files::log_files(path)?;
    if all.is_empty() {
        return Err(std::io::Error::new(std::io::ErrorKind::NotFound, "no such file"));
    }
    let mut v = Verification { head: GENESIS.into(), ..Verification::default() };
    let mut expected_seq: Option<u64> = None;
    for (i, file) in all.iter().enumerate() {
        v.files.push(file.clone());
        let data = fs::read(file).map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", file.display())))?;
        let last = i + 1 == all.len();
        let rotated_first = i == 0 && looks_rotated(file);
        check_file(&mut v, &mut expected_seq, data, last, rotated_first);
        if v.problem.is_some() {
            v.problem_file = Some(file.clone());
            break;
        }
    }
    Ok(v)
}

/// Checks one file's lines, continuing the chain in `v` and `expected_seq`.
/// Torn lines are allowed only at the end of the `last` file; a `mid_chain`
/// file may start past the first record.
fn check_file(v: &mut Verification, expected_seq: &mut Option<u64>, mut data: Vec<u8>, last: bool, mid_chain: bool) {
    // Zero bytes past the last line: what a crash, or an older warden's blank fill, left.
    data.truncate(data.iter().rposition(|&b| !is_fill(b)).map_or(0, |i| i + 1));
    let lines: Vec<&[u8]> = data.split_inclusive(|&b| b == b'\n').collect();
    // Torn lines at the end (as the next writer finds them): without a newline,
    // or holding zeros, parts of a write that a crash kept from the disk.
    let torn = |raw: &[u8]| raw.last() != Some(&b'\n') || raw.iter().copied().any(is_fill);
    let whole = lines.len() - lines.iter().rev().take_while(|raw| torn(raw)).count();
    for (i, raw) in lines.iter().enumerate() {
        let n = i as u64 + 1;
        let fail = |why: String| Some((n, why));
        if i >= whole {
            if last {
                v.torn_line = Some(n);
            } else {
                v.problem = fail("a torn line in a rotated file (only the current file may end in one)".into());
            }
            return;
        }
        let line = &raw[..raw.len() - 1];
        let Ok(rec) = serde_json::from_slice::<Value>(line) else {
            v.problem = fail("not a JSON record (edited or corrupted)".into());
            return;
        };
        let (Some(seq), Some(prev)) = (rec.get("seq").and_then(Value::as_u64), rec.get("prev").and_then(Value::as_str))
        else {
            v.problem = fail("missing seq or prev: not a warden record".into());
            return;
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
            return;
        }
        if expected_seq.is_none() && mid_chain && seq > 1 {
            // The files before this one were removed by retention: start here.
            v.start_seq = Some(seq);
            v.head = prev.to_string();
        }
        if prev != v.head {
            let previous = match (n, expected_seq.is_some()) {
                (1, false) => "the start of the log".to_string(),
                (1, true) => "the last line of the previous file".to_string(),
                _ => format!("line {}", n - 1),
            };
            // The seq numbers are intact, so the previous line's content changed (or this prev did).
            v.problem = Some((
                if n == 1 { 1 } else { n - 1 },
                format!("{previous} does not hash to the prev recorded by line {n}: it was edited"),
            ));
            return;
        }
        v.head = sha256_hex(line);
        v.records += 1;
        *expected_seq = Some(seq + 1);
    }
}
