//! Definition changes awaiting `warden lock`: what changed (a line diff of the
//! description and of the input schema against the definition warden.lock
//! accepted, which the lock keeps beside its hash), and "accept", which is
//! `warden lock` for one server or plugin: the same gathering, the same
//! poisoning refusal, and the lock rewritten with only that owner's pins
//! replaced. "Keep refusing" is the page's alone: nothing changes.

use serde_json::{Value, json};

use super::super::Failure;
use super::super::lock::{Found, gather, pretty_schema, shown, write_atomically};
use super::super::session::Session;

fn message(f: Failure) -> String {
    f.message
}

/// A line diff of `before` and `after`: `[[sign, line], …]`, sign `-`, `+` or ` `.
fn diff(before: &str, after: &str) -> Value {
    let (before, after) = (format!("{before}\n"), format!("{after}\n"));
    let lines: Vec<Value> = similar::TextDiff::from_lines(&before, &after)
        .iter_all_changes()
        .map(|c| {
            let sign = match c.tag() {
                similar::ChangeTag::Delete => "-",
                similar::ChangeTag::Insert => "+",
                similar::ChangeTag::Equal => " ",
            };
            json!([sign, shown(c.value().trim_end_matches('\n'))])
        })
        .collect();
    Value::Array(lines)
}

/// The owner part of a `found` key (`server NAME: tool` → `server NAME`).
fn owner_of(key: &str) -> &str {
    key.split_once(": ").map_or(key, |(o, _)| o)
}

/// `GET /api/definitions`: every definition new or changed since warden.lock
/// (none while there is no lock: nothing is pinned then).
pub(super) fn pending(s: &Session) -> Result<Value, String> {
    gather(s, |policy, path, found, old, new| {
        let Some(old) = old else {
            return Ok(json!({"lock": path.display().to_string(), "exists": false, "changes": []}));
        };
        let (added, changed, removed) = old.changes(new);
        let mut out = Vec::new();
        for (what, list) in [("new", &added), ("changed", &changed), ("removed", &removed)] {
            for key in list {
                let mut item = json!({"key": key, "what": what, "owner": owner_of(key)});
                if let Some((owner, name, def)) = found.get(key) {
                    let before = old.accepted(*owner, &def.name);
                    let (d0, s0) = before.map(|a| (a.description.clone(), pretty_schema(&a.input_schema))).unzip();
                    item["tool"] = json!(name);
                    item["description"] = diff(d0.as_deref().unwrap_or(""), &def.description);
                    item["input_schema"] = diff(s0.as_deref().unwrap_or(""), &pretty_schema(&def.input_schema));
                    if let Some(p) = crate::poisoning::definition_poisoning(&def.description, &def.input_schema)
                        && !p.answered_by(policy.tools.get(name))
                    {
                        item["poisoning"] = json!(p.why);
                    }
                }
                out.push(item);
            }
        }
        Ok(json!({"lock": path.display().to_string(), "exists": true, "changes": out}))
    })
    .map_err(message)
}

/// The owner's poisoned definitions the policy does not answer.
fn poisoned(policy: &crate::policy::Policy, found: &Found<'_>, owner: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (key, (_, name, def)) in found.iter().filter(|(k, _)| owner_of(k) == owner) {
        if let Some(p) = crate::poisoning::definition_poisoning(&def.description, &def.input_schema)
            && !p.answered_by(policy.tools.get(name))
        {
            out.push(format!("{key}: {} (tool poisoning)", p.why));
        }
    }
    out
}

/// `POST /api/definitions/accept {"owner": "server NAME" | "plugin NAME"}`.
pub(super) fn accept(s: &Session, owner: &str) -> Result<Value, String> {
    let (section, name) = match owner.split_once(' ') {
        Some(("server", n)) => ("servers", n.to_string()),
        Some(("plugin", n)) => ("plugins", n.to_string()),
        _ => return Err(format!("no such owner {owner:?}: give \"server NAME\" or \"plugin NAME\"")),
    };
    gather(s, |policy, path, found, old, new| {
        let refused = poisoned(policy, found, owner);
        if !refused.is_empty() {
            return Ok(json!({"accepted": false, "refused": refused}));
        }
        let mut out = old.cloned().unwrap_or_else(crate::lock::Lock::new);
        let (pins, out_pins) = match section {
            "servers" => (&new.servers, &mut out.servers),
            _ => (&new.plugins, &mut out.plugins),
        };
        match pins.get(&name) {
            Some(p) => out_pins.insert(name.clone(), p.clone()),
            None => out_pins.remove(&name),
        };
        let accepted = new.definitions.get(section).and_then(|d| d.get(&name)).cloned().unwrap_or_default();
        out.definitions.entry(section.to_string()).or_default().insert(name.clone(), accepted);
        if section == "plugins"
            && let Some(p) = new.provenance_of(&name)
        {
            out.insert_provenance(&name, p.clone());
        }
        write_atomically(path, out.to_text().as_bytes()).map_err(|e| {
            super::super::fail(crate::error::ErrorCode::Internal, format!("cannot write {}: {e}", path.display()))
        })?;
        Ok(json!({"accepted": true, "lock": path.display().to_string(), "owner": owner}))
    })
    .map_err(message)
}
