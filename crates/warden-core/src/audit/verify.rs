//! `warden log verify`: the hash chain, line by line.

use super::*;

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
