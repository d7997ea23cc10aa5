//! `warden list`: the tools the policy offers.

use serde_json::{Value, json};

use crate::catalog::Catalog;
use crate::policy::units::{format_duration, format_size};

use super::session::Session;
use super::{Failure, print_json};

pub(super) fn list(catalog: &Catalog, as_json: bool) {
    if as_json {
        let tools: Vec<Value> = catalog
            .visible()
            .map(|e| {
                let (read, write, net) = e.spec.grants_text(false);
                let mut o = json!({
                    "name": e.spec.name,
                    "tier": e.spec.tier,
                    "runtime": e.spec.runtime(),
                    "plugin": e.spec.plugin(),
                    "available": e.state.is_ok(),
                    "grants": {"read": read, "write": write, "net": net,
                               "sysv_ipc": e.spec.grants.sysv_ipc, "inotify": e.spec.grants.inotify},
                    "limits": {
                        "timeout": format_duration(e.spec.limits.timeout),
                        "memory": format_size(e.spec.limits.memory),
                        "max_output": format_size(e.spec.limits.max_output),
                    },
                });
                match &e.state {
                    Ok(r) => {
                        o["description"] = json!(r.description);
                        o["input_schema"] = r.schema.clone();
                    }
                    Err(err) => {
                        o["unavailable"] = json!(err.message);
                        // What the refused tool says now, to review before accepting it.
                        if let Some(def) = &e.refused_definition {
                            let schema = serde_json::from_str::<Value>(&def.input_schema)
                                .unwrap_or_else(|_| json!(def.input_schema));
                            o["refused_definition"] = json!({"description": def.description, "input_schema": schema});
                        }
                    }
                }
                o
            })
            .collect();
        print_json(&Value::Array(tools));
        return;
    }
    type Row<'a> = (String, &'a str, String, String);
    let rows: Vec<Row<'_>> = catalog
        .visible()
        .map(|e| {
            let grants = e.spec.grant_words(true);
            let grants = if grants.is_empty() { "none".to_string() } else { grants.join(", ") };
            let description = match &e.state {
                Ok(r) => r.description.clone(),
                Err(err) => format!("UNAVAILABLE: {}", err.message),
            };
            (e.spec.name.clone(), e.spec.tier.as_str(), grants, description)
        })
        .collect();
    // Columns as wide as their longest entry (the grants column at most 60): long names keep the table aligned.
    let width =
        |f: &dyn Fn(&Row<'_>) -> usize, min: usize, max: usize| rows.iter().map(f).max().unwrap_or(0).clamp(min, max);
    let name_w = width(&|r| r.0.chars().count(), 4, usize::MAX);
    let grants_w = width(&|r| r.2.chars().count(), 6, 60);
    println!("{:<name_w$} {:<8} {:<grants_w$} DESCRIPTION", "TOOL", "TIER", "GRANTS");
    for (name, tier, grants, description) in &rows {
        println!("{name:<name_w$} {tier:<8} {grants:<grants_w$} {description}");
    }
}

/// `warden list [--json]`.
pub(super) fn command(s: &Session, as_json: bool) -> Result<u8, Failure> {
    let executor = s.executor()?;
    list(executor.catalog(), as_json);
    Ok(0)
}
