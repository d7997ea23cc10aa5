//! `warden lock`: pin, check and show the definitions of plugins' and servers' tools.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use serde_json::Value;

use crate::lock::Pins;
use crate::runtime::server::ServerPool;
use crate::runtime::wasm::ComponentRuntime;

use super::session::{Session, cache_dir};
use super::{Failure, fail};
use crate::error::ErrorCode;

/// Every definition, by the line `changes` names it with: its owner, the name
/// the catalog offers, the definition.
pub(super) type Found<'a> = BTreeMap<String, (crate::lock::Owner<'a>, String, crate::runtime::ToolDef)>;

/// `warden lock [--check | --show TOOL]`.
pub(super) fn lock(s: &Session, check: bool, show: Option<&str>) -> Result<u8, Failure> {
    gather(s, |policy, path, found, old, new| {
        if let Some(tool) = show {
            return show_tool(tool, found, old, new);
        }
        print_changes(found, old, new);
        if refuse_poisoned(policy, found, path) {
            return Ok(1);
        }
        check_or_write(check, path, old, new)
    })
}

/// The lock file's path, every definition the policy's plugins and servers
/// have now, the lock as it is and the lock they make, given to `then` (with
/// the servers still up): what `warden lock` and the console's "accept" start from.
pub(super) fn gather<T>(
    s: &Session,
    then: impl FnOnce(
        &crate::policy::Policy,
        &Path,
        &Found<'_>,
        Option<&crate::lock::Lock>,
        &crate::lock::Lock,
    ) -> Result<T, Failure>,
) -> Result<T, Failure> {
    use crate::lock::Lock;
    let ctx = s.context()?;
    let policy = s.load_policy(&ctx)?;
    let Some(path) = policy.lock_path.clone() else {
        return Err(fail(
            ErrorCode::InvalidArgs,
            "the embedded default policy has only builtin plugins, which warden itself pins: nothing to lock \
             (pass --policy FILE)",
        ));
    };
    let runtime = ComponentRuntime::new(cache_dir()).map_err(|e| fail(ErrorCode::Internal, e.message))?;
    let mut new = Lock::new();
    let mut found: Found<'_> = BTreeMap::new();
    pin_plugins(&policy, &runtime, &mut new, &mut found)?;
    // The servers stay up until the lock is written, as they would for a call.
    let servers = ServerPool::new(crate::runtime::process::default_helper(), &policy);
    pin_servers(&policy, &servers, &mut new, &mut found)?;
    let old = existing_lock(&path);
    then(&policy, &path, &found, old.as_ref(), &new)
}

/// Loads the policy's third-party plugins, records each component's
/// provenance and pins the tools of those that describe them (not commands).
fn pin_plugins<'a>(
    policy: &'a crate::policy::Policy,
    runtime: &ComponentRuntime,
    new: &mut crate::lock::Lock,
    found: &mut Found<'a>,
) -> Result<(), Failure> {
    use crate::lock::Owner;
    use crate::policy::PluginKind;
    for p in policy.plugins.values() {
        if !p.source.is_third_party() {
            continue;
        }
        let loaded =
            runtime.load(p).map_err(|e| fail(ErrorCode::ExecutionFailed, format!("cannot lock: {}", e.message)))?;
        let (signer, key) = loaded.signer.as_ref().map(|s| (s.fingerprint.clone(), s.key.clone())).unzip();
        let provenance =
            crate::lock::Provenance { source: loaded.source.clone(), sha256: loaded.sha256.clone(), signer, key };
        new.insert_provenance(&p.name, provenance);
        if p.kind == PluginKind::Command {
            continue;
        }
        new.insert(Owner::Plugin(&p.name), &loaded.tools);
        for t in &loaded.tools {
            found.insert(format!("plugin {}: {}", p.name, t.name), (Owner::Plugin(&p.name), t.name.clone(), t.clone()));
        }
    }
    Ok(())
}

/// Starts the policy's servers, asks each for its tools and pins them.
fn pin_servers<'a>(
    policy: &'a crate::policy::Policy,
    servers: &ServerPool,
    new: &mut crate::lock::Lock,
    found: &mut Found<'a>,
) -> Result<(), Failure> {
    use crate::lock::Owner;
    for s in policy.servers.values() {
        let defs = servers.definitions(s).map_err(|e| {
            fail(
                ErrorCode::ExecutionFailed,
                format!("cannot lock: server {}: {}", s.name, crate::shape::sanitize_str(&e.message)),
            )
        })?;
        new.insert(Owner::Server(&s.name), &defs);
        for t in &defs {
            let owner = Owner::Server(&s.name);
            found.insert(format!("server {}: {}", s.name, t.name), (owner, owner.tool_name(&t.name), t.clone()));
        }
    }
    Ok(())
}

/// The lock file as it is, if it can be read (a note says when it cannot).
fn existing_lock(path: &Path) -> Option<crate::lock::Lock> {
    match Pins::load(Some(path)) {
        Pins::Loaded(_, lock) => Some(lock),
        Pins::Broken(_, why) => {
            eprintln!("note: the existing {} cannot be read ({why}); it is replaced", path.display());
            None
        }
        Pins::Missing(_) | Pins::Unchecked => None,
    }
}

/// `--show TOOL`: one definition, whether it is pinned, and its change if any.
fn show_tool(
    tool: &str,
    found: &Found<'_>,
    old: Option<&crate::lock::Lock>,
    new: &crate::lock::Lock,
) -> Result<u8, Failure> {
    let Some((key, (owner, name, def))) = found.iter().find(|(_, (_, name, d))| name == tool || d.name == tool) else {
        let names: Vec<&str> = found.values().map(|(_, n, _)| n.as_str()).collect();
        return Err(fail(
            ErrorCode::InvalidArgs,
            format!("no plugin or server of this policy offers {tool:?} (they offer: {})", names.join(", ")),
        ));
    };
    let (added, changed, _) = old.cloned().unwrap_or_else(crate::lock::Lock::new).changes(new);
    let status = if added.contains(key) {
        "new: not in warden.lock"
    } else if changed.contains(key) {
        "CHANGED since warden.lock was written"
    } else {
        "pinned in warden.lock"
    };
    println!("{name} ({key}): {status}");
    show_definition(def);
    if let Some(p) = crate::poisoning::definition_poisoning(&def.description, &def.input_schema) {
        println!("POISONING: {} (refused unless the policy replaces it; see `warden audit`, WL111)", p.why);
    }
    if changed.contains(key) {
        show_change(old.and_then(|o| o.accepted(*owner, &def.name)), def);
    }
    Ok(0)
}

/// Prints each definition that is new, changed or removed since the lock file.
fn print_changes(found: &Found<'_>, old: Option<&crate::lock::Lock>, new: &crate::lock::Lock) {
    let (added, changed, removed) = old.cloned().unwrap_or_else(crate::lock::Lock::new).changes(new);
    for (what, list) in [("new", &added), ("CHANGED", &changed), ("removed", &removed)] {
        for t in list {
            println!("{what:<8} {}", crate::shape::sanitize_str(t));
            let Some((owner, _, def)) = found.get(t) else { continue };
            if what == "CHANGED" {
                show_change(old.and_then(|o| o.accepted(*owner, &def.name)), def);
            } else {
                let shown: String = crate::shape::sanitize_str(&def.description).chars().take(400).collect();
                let more = if def.description.chars().count() > 400 { "…" } else { "" };
                println!("         description: {shown:?}{more}");
            }
        }
    }
}

/// Whether a definition addresses the model and the policy does not answer it
/// (then each is printed, and the lock file is not written): such a
/// definition is never accepted silently.
fn refuse_poisoned(policy: &crate::policy::Policy, found: &Found<'_>, path: &Path) -> bool {
    let mut poisoned = Vec::new();
    for (key, (_, name, def)) in found {
        let Some(p) = crate::poisoning::definition_poisoning(&def.description, &def.input_schema) else { continue };
        if p.answered_by(policy.tools.get(name)) {
            continue;
        }
        poisoned.push(format!("{key}: {} (tool poisoning)", p.why));
    }
    if poisoned.is_empty() {
        return false;
    }
    for p in &poisoned {
        println!("REFUSED  {}", crate::shape::sanitize_str(p));
    }
    println!(
        "{} not written: read each with `warden lock --show TOOL`; replace a poisoned description with the \
         policy's own ([tools.\"TOOL\"] description = \"…\") or deny the tool (tier = \"deny\")",
        path.display()
    );
    true
}

/// `--check`: whether the lock file pins `new` already; else writes it.
fn check_or_write(
    check: bool,
    path: &Path,
    old: Option<&crate::lock::Lock>,
    new: &crate::lock::Lock,
) -> Result<u8, Failure> {
    let tools: usize = new.plugins.values().chain(new.servers.values()).map(|t| t.len()).sum();
    let up_to_date = old.is_some_and(|o| o.same_pins(new));
    if check {
        if up_to_date {
            println!("{} is up to date: {tools} tool definition(s)", path.display());
            return Ok(0);
        }
        println!(
            "{} is {}: run `warden lock` after reviewing the changes above",
            path.display(),
            if old.is_none() { "missing" } else { "out of date" }
        );
        return Ok(1);
    }
    write_atomically(path, new.to_text().as_bytes())
        .map_err(|e| fail(ErrorCode::Internal, format!("cannot write {}: {e}", path.display())))?;
    println!(
        "wrote {}: {} plugin(s), {} server(s), {tools} tool definition(s){}",
        path.display(),
        new.plugins.len(),
        new.servers.len(),
        if up_to_date { " (unchanged)" } else { "" }
    );
    Ok(0)
}

/// `text` with control and invisible characters shown as `\u{…}` escapes, the rest as it is.
pub(super) fn shown(text: &str) -> String {
    text.chars()
        .map(|c| {
            let hidden = c.is_control()
                || matches!(c, '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2060}'..='\u{2069}' | '\u{FEFF}' | '\u{E0000}'..='\u{E007F}');
            if hidden { c.escape_unicode().to_string() } else { c.to_string() }
        })
        .collect()
}

/// The input schema as indented JSON (as given when it is not JSON).
pub(super) fn pretty_schema(text: &str) -> String {
    serde_json::from_str::<Value>(text)
        .and_then(|v| serde_json::to_string_pretty(&v))
        .unwrap_or_else(|_| text.to_string())
}

/// A definition, for a person to read: control and invisible characters shown escaped.
pub(super) fn show_definition(def: &crate::runtime::ToolDef) {
    println!("description: {:?}", def.description);
    println!("input schema:");
    for line in pretty_schema(&def.input_schema).lines() {
        println!("  {}", shown(line));
    }
}

/// What changed in a definition since it was accepted: a line diff of its
/// description and of its indented input schema.
pub(super) fn show_change(old: Option<&crate::lock::Accepted>, def: &crate::runtime::ToolDef) {
    let Some(old) = old else {
        println!("         (warden.lock keeps no text of the accepted definition: written by an older warden)");
        println!("         description now: {:?}", def.description);
        return;
    };
    let parts = [
        ("description", old.description.clone(), def.description.clone()),
        ("input schema", pretty_schema(&old.input_schema), pretty_schema(&def.input_schema)),
    ];
    for (what, before, after) in parts {
        if before == after {
            println!("         {what}: unchanged");
            continue;
        }
        println!("         {what}:");
        let (before, after) = (format!("{before}\n"), format!("{after}\n"));
        for change in similar::TextDiff::from_lines(&before, &after).iter_all_changes() {
            let sign = match change.tag() {
                similar::ChangeTag::Delete => "-",
                similar::ChangeTag::Insert => "+",
                similar::ChangeTag::Equal => " ",
            };
            println!("           {sign} {}", shown(change.value().trim_end_matches('\n')));
        }
    }
}

/// Writes `path` through a temporary file in the same directory, fsynced, then renamed.
pub(super) fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let tmp = dir.join(format!(".{}.tmp-{}", crate::policy::LOCK_FILE, std::process::id()));
    let result = (|| {
        // create_new: a name planted beforehand (a link a tool left) is never followed.
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        std::fs::File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}
