//! `warden log`: verify the audit log's chain, and its statistics.

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
    if let Some(n) = v.torn_line {
        lines.push(format!("note: line {n} is torn (a crash mid-write) and was not checked"));
    }
    match &v.problem {
        Some((line, why)) => {
            lines.push(format!("{}: line {line}: {why}", path.display()));
            lines
                .push(format!("FAILED: the chain is broken at line {line} ({} records verified before it)", v.records));
            (false, lines)
        }
        None => {
            lines.push(format!("ok: {} records, chain intact; head {}", v.records, v.head));
            (true, lines)
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
