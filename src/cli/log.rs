//! `warden log`: verify the audit log's chain, its statistics, and its
//! records (`show` one call's, `tail` the last and the new ones).

use std::path::Path;

use super::args::StatsFormat;
use crate::audit::{self};

use super::session::Session;
use super::{Failure, fail, print_json};
use crate::error::ErrorCode;

/// `warden log verify [FILE]`: checks the audit log's hash chain.
pub(super) fn verify(s: &Session, file: Option<&Path>) -> Result<u8, Failure> {
    let path = file.map(Path::to_path_buf).unwrap_or_else(|| s.audit_log());
    let v = audit::verify(&path)
        .map_err(|e| fail(ErrorCode::InvalidArgs, format!("cannot read {}: {e}", path.display())))?;
    let (ok, lines) = verdict(&path, &v);
    for line in lines {
        println!("{line}");
    }
    Ok(if ok { 0 } else { 1 })
}

/// What `log verify` says of `v`: whether the chain is intact, and its lines
/// (the console shows the same).
pub(super) fn verdict(path: &Path, v: &audit::Verification) -> (bool, Vec<String>) {
    let mut lines = Vec::new();
    if let Some(seq) = v.start_seq {
        lines.push(format!(
            "note: the log starts mid-chain at seq {seq} (its older files were removed by `[audit] keep`): the chain \
             is checked from there, and that record's prev is taken as given"
        ));
    }
    if let Some(n) = v.torn_line {
        lines.push(format!("note: line {n} is torn (a crash mid-write) and was not checked"));
    }
    let files = match v.files.len() {
        0 | 1 => String::new(),
        n => format!(" in {n} files ({} .. {})", v.files[0].display(), path.display()),
    };
    match &v.problem {
        Some((line, why)) => {
            let file = v.problem_file.as_deref().unwrap_or(path);
            lines.push(format!("{}: line {line}: {why}", file.display()));
            lines.push(format!(
                "FAILED: the chain is broken at {} line {line} ({} records verified before it{files})",
                file.display(),
                v.records
            ));
            (false, lines)
        }
        None => {
            lines.push(format!("ok: {} records{files}, chain intact; head {}", v.records, v.head));
            (true, lines)
        }
    }
}

/// `warden log show CALL_ID`: the call's records, pretty JSON, one after the other.
pub(super) fn show(s: &Session, call_id: &str, file: Option<&Path>) -> Result<u8, Failure> {
    let path = file.map(Path::to_path_buf).unwrap_or_else(|| s.audit_log());
    let found = audit::read::records_of(&path, call_id)
        .map_err(|e| fail(ErrorCode::InvalidArgs, format!("cannot read {}: {e}", path.display())))?;
    if found.is_empty() {
        eprintln!(
            "warden: no record of call {call_id:?} in {} or its rotated files (`warden log tail` lists the last calls)",
            path.display()
        );
        return Ok(1);
    }
    for rec in found {
        println!("{}", serde_json::to_string_pretty(&rec).unwrap_or_default());
    }
    Ok(0)
}

/// `warden log tail [-n N] [--follow]`: the last records as JSON lines, then the new ones.
pub(super) fn tail(s: &Session, n: u32, follow: bool, file: Option<&Path>) -> Result<u8, Failure> {
    use std::io::Write;
    let path = file.map(Path::to_path_buf).unwrap_or_else(|| s.audit_log());
    let cannot = |e: std::io::Error| fail(ErrorCode::InvalidArgs, format!("cannot read {}: {e}", path.display()));
    let (last, mut follower) = audit::read::Follower::open(&path, n as usize).map_err(cannot)?;
    let print = |lines: Vec<Vec<u8>>| -> bool {
        let mut out = std::io::stdout().lock();
        for line in lines {
            if out.write_all(&line).and_then(|()| out.write_all(b"\n")).is_err() {
                return false;
            }
        }
        out.flush().is_ok()
    };
    if !print(last) {
        return Ok(0);
    }
    if !follow {
        return Ok(0);
    }
    loop {
        std::thread::sleep(std::time::Duration::from_millis(200));
        let new = follower.poll().map_err(cannot)?;
        // A reader that went away (`| head`) ends the follow.
        if !print(new) {
            return Ok(0);
        }
    }
}

/// `warden log stats [FILE]`: per-tool counts and latencies.
pub(super) fn stats(s: &Session, file: Option<&Path>, format: StatsFormat) -> Result<u8, Failure> {
    let path = file.map(Path::to_path_buf).unwrap_or_else(|| s.audit_log());
    let stats = audit::stats(&path)
        .map_err(|e| fail(ErrorCode::InvalidArgs, format!("cannot read {}: {e}", path.display())))?;
    match format {
        StatsFormat::Json => print_json(&serde_json::to_value(&stats).unwrap_or_default()),
        StatsFormat::Text => {
            // The tool column as wide as the longest name: the table stays aligned.
            let w = stats.iter().map(|s| s.tool.chars().count()).max().unwrap_or(0).max(4);
            println!(
                "{:<w$} {:>7} {:>7} {:>7} {:>7} {:>7} {:>8} {:>10} {:>10}",
                "TOOL", "CALLS", "OK", "FAILED", "ERRORS", "DENIED", "REJECTED", "P50_MS", "P95_MS"
            );
            for s in stats {
                println!(
                    "{:<w$} {:>7} {:>7} {:>7} {:>7} {:>7} {:>8} {:>10.2} {:>10.2}",
                    s.tool, s.calls, s.ok, s.failed, s.errors, s.denied, s.rejected, s.p50_ms, s.p95_ms
                );
            }
            println!("FAILED: the program ran and exited non-zero or by a signal (its exit is in each record)");
        }
    }
    Ok(0)
}
