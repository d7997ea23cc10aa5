//! The findings as SARIF 2.1.0, in the shape GitHub code scanning accepts:
//! one run, the rules with their descriptions, help and `security-severity`,
//! and results located in the policy file.

use serde_json::{Value, json};

use super::Report;
use crate::lint::{RULES, Severity};

/// The SARIF schema this output follows.
pub const SCHEMA: &str = "https://json.schemastore.org/sarif-2.1.0.json";

/// The policy file as a SARIF URI: relative paths stay relative (to the
/// repository root, as code scanning expects), absolute ones become `file://`.
fn uri(file: &str) -> String {
    if file.starts_with('<') {
        // The embedded default policy has no file; name its source in this repository.
        return "policies/default.toml".into();
    }
    let path = std::path::Path::new(file);
    if let Ok(cwd) = std::env::current_dir()
        && let Ok(rel) = path.strip_prefix(&cwd)
    {
        return rel.to_string_lossy().into_owned();
    }
    if path.is_absolute() { format!("file://{}", path.display()) } else { file.trim_start_matches("./").to_string() }
}

/// The SARIF log of `report`.
pub fn to_sarif(report: &Report) -> Value {
    let rules: Vec<Value> = RULES
        .iter()
        .map(|r| {
            json!({
                "id": r.id,
                "name": r.name,
                "shortDescription": {"text": r.short},
                "fullDescription": {"text": r.full},
                "help": {"text": r.help, "markdown": format!("{}\n\n**Fix:** {}", r.full, r.help)},
                "defaultConfiguration": {"level": r.severity.as_str()},
                "properties": {
                    "security-severity": r.security_severity,
                    "tags": ["security", "warden-policy"],
                    "precision": "high",
                },
            })
        })
        .collect();
    let results: Vec<Value> = report
        .findings
        .iter()
        .map(|f| {
            let index = RULES.iter().position(|r| r.id == f.rule).unwrap_or(0);
            let mut region = serde_json::Map::new();
            region.insert("startLine".into(), json!(f.line.max(1)));
            if f.column > 0 {
                region.insert("startColumn".into(), json!(f.column));
            }
            json!({
                "ruleId": f.rule,
                "ruleIndex": index,
                "level": match f.severity { Severity::Error => "error", Severity::Warning => "warning" },
                "message": {"text": f.message},
                "locations": [{"physicalLocation": {
                    "artifactLocation": {"uri": uri(&f.file)},
                    "region": region,
                }}],
            })
        })
        .collect();
    json!({
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "warden",
                "version": env!("CARGO_PKG_VERSION"),
                "rules": rules,
            }},
            "results": results,
        }],
    })
}
