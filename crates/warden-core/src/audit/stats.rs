//! `warden log stats`: per-tool counts and latencies.

use super::*;

/// Per-tool figures of `log stats`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ToolStats {
    /// The tool.
    pub tool: String,
    /// Calls recorded.
    pub calls: u64,
    /// Succeeded (a program that ran exited 0).
    pub ok: u64,
    /// Ran a program that exited non-zero or was ended by a signal (a
    /// failed test run is not a success).
    pub failed: u64,
    /// Failed (other than denied and rejected).
    pub errors: u64,
    /// Denied by the policy.
    pub denied: u64,
    /// Rejected by a person.
    pub rejected: u64,
    /// Median duration.
    pub p50_ms: f64,
    /// 95th percentile duration.
    pub p95_ms: f64,
}

/// Whether the record's program exited non-zero or by a signal.
fn program_failed(rec: &Value) -> bool {
    let Some(exit) = rec.get("exit") else { return false };
    exit.get("signal").is_some_and(|s| !s.is_null())
        || exit.get("exit_code").and_then(Value::as_i64).is_some_and(|c| c != 0)
}

/// Per-tool counts and latencies from the log at `path` (its rotated files
/// included), sorted by tool.
pub fn stats(path: &Path) -> std::io::Result<Vec<ToolStats>> {
    let mut all = files::rotated(path)?;
    all.push(path.to_path_buf());
    let mut by_tool: std::collections::BTreeMap<String, (ToolStats, Vec<f64>)> = Default::default();
    for file in all {
        count(&fs::read_to_string(file)?, &mut by_tool);
    }
    Ok(by_tool
        .into_values()
        .map(|(mut s, mut d)| {
            d.sort_by(f64::total_cmp);
            let pct = |p: f64| if d.is_empty() { 0.0 } else { d[((d.len() - 1) as f64 * p).round() as usize] };
            s.p50_ms = pct(0.5);
            s.p95_ms = pct(0.95);
            s
        })
        .collect())
}

/// Counts the records of one file's `data` into `by_tool`.
fn count(data: &str, by_tool: &mut std::collections::BTreeMap<String, (ToolStats, Vec<f64>)>) {
    for line in data.lines() {
        let Ok(rec) = serde_json::from_str::<Value>(line) else { continue };
        // A background job's start record: its end record counts the call.
        if rec.get("status").and_then(Value::as_str) == Some("running") {
            continue;
        }
        let tool = rec.get("tool").and_then(Value::as_str).unwrap_or("?").to_string();
        let (s, durations) =
            by_tool.entry(tool.clone()).or_insert_with(|| (ToolStats { tool, ..Default::default() }, Vec::new()));
        s.calls += 1;
        match (rec.get("status").and_then(Value::as_str), rec.get("error_code").and_then(Value::as_str)) {
            (Some("success"), _) if program_failed(&rec) => s.failed += 1,
            (Some("success"), _) => s.ok += 1,
            (Some("rejected"), _) => s.rejected += 1,
            (_, Some("DENIED")) => s.denied += 1,
            _ => s.errors += 1,
        }
        if let Some(d) = rec.get("duration_ms").and_then(Value::as_f64) {
            durations.push(d);
        }
    }
}
