//! `warden policy explain TOOL`: each key of one tool as it stands for calls,
//! and which layer decided it (the policy, a managed floor, the profile).

use crate::policy::floor::apply::FloorNote;
use crate::policy::units::{format_duration, format_size};
use crate::policy::{Policy, SERVER_TOOL_SEPARATOR, ToolSpec};

use super::session::Session;
use super::{Failure, fail};
use crate::error::ErrorCode;

/// `warden policy explain TOOL`: exit 0, or 2 for a tool the policy does not have.
pub(super) fn explain(s: &Session, tool: &str) -> Result<u8, Failure> {
    let ctx = s.context()?;
    let policy = s.load_policy(&ctx)?;
    let Some((mut spec, server)) = find(&policy, tool) else {
        let names = crate::policy::profile::closest(tool, policy.tools.keys().map(String::as_str));
        let hint = if names.is_empty() { String::new() } else { format!("; did you mean {}?", names.join(", ")) };
        return Err(fail(ErrorCode::NotFound, format!("{tool}: {} has no such tool{hint}", policy.origin)));
    };
    if let Some(profile) = &policy.profile {
        profile.apply(&mut spec);
    }
    for line in lines(&policy, &spec, server.as_deref()) {
        println!("{line}");
    }
    Ok(0)
}

/// The tool's policy entry: its own, or its server's for a server tool the policy does not name.
fn find(policy: &Policy, tool: &str) -> Option<(ToolSpec, Option<String>)> {
    if let Some(spec) = policy.tools.get(tool) {
        let server = match &spec.runner {
            crate::policy::Runner::Server(st) => Some(st.server.clone()),
            _ => None,
        };
        return Some((spec.clone(), server));
    }
    let (server, name) = tool.split_once(SERVER_TOOL_SEPARATOR)?;
    policy.servers.get(server).map(|s| (s.tool_spec(name), Some(server.to_string())))
}

/// What `explain` prints.
fn lines(policy: &Policy, spec: &ToolSpec, server: Option<&str>) -> Vec<String> {
    let mut out = vec![format!("tool {} ({}), defined at {}", spec.name, spec.runtime(), spec.location)];
    out.push(if policy.floors.is_empty() {
        "managed floors: none".into()
    } else {
        format!("managed floors: {}", policy.floors.join(", "))
    });
    let none = Vec::new();
    let own = policy.floor_notes.get(&spec.name).unwrap_or(&none);
    let of_server = server.and_then(|s| policy.floor_notes.get(&format!("server {s}"))).unwrap_or(&none);
    let global = policy.floor_notes.get("").unwrap_or(&none);
    let notes: Vec<&FloorNote> = own.iter().chain(of_server).chain(global).collect();
    let by = |key: &str| -> String {
        let hits: Vec<String> = notes
            .iter()
            .filter(|n| n.key == key)
            .map(|n| format!("managed floor {} (the policy asked {})", n.by, n.asked))
            .collect();
        if hits.is_empty() { format!("the policy {}", policy.origin) } else { hits.join("; ") }
    };
    let mode = match policy.mode {
        crate::policy::SandboxMode::Enforce => "enforce",
        crate::policy::SandboxMode::BestEffort => "best-effort",
    };
    out.push(format!("[sandbox] mode = {mode}  <- {}", by("[sandbox] mode")));
    let tier = match &spec.hidden_by {
        Some(why) => format!("deny  <- {why}"),
        None => format!("{}  <- {}", spec.tier, by("tier")),
    };
    out.push(format!("tier = {tier}"));
    for r in &spec.rules {
        out.push(format!("  rule at {}: tier {}{}", r.location, r.tier, reason(r)));
    }
    for f in &spec.floors {
        out.push(format!(
            "  managed floor at {}: tier {} unless a rule of it says otherwise",
            f.base.location, f.base.tier
        ));
        for r in &f.rules {
            out.push(format!("  managed floor rule at {}: tier {}{}", r.location, r.tier, reason(r)));
        }
    }
    if !spec.floors.is_empty() {
        out.push("  each call gets the stricter of the policy's decision and each floor's".into());
    }
    let (read, write, net) = spec.grants_text(true);
    let g = &spec.grants;
    let list = |v: Vec<String>| if v.is_empty() { "[]".to_string() } else { v.join(", ") };
    let deny: Vec<String> =
        g.deny.iter().map(|d| format!("{} ({})", d.path, if d.read { "deny_read" } else { "deny_write" })).collect();
    let rows: Vec<(&str, String, &str)> = vec![
        ("fs.read", list(read), "fs.read, fs.write"),
        ("fs.write", list(write), "fs.read, fs.write"),
        ("fs.deny_read, fs.deny_write", list(deny), "fs.deny_read"),
        ("fs.unprotect", list(g.unprotect.iter().map(|p| p.display().to_string()).collect()), "fs.unprotect"),
        ("fs.git_init", g.git_init.to_string(), "fs.git_init"),
        ("net.connect", list(net), "net.connect"),
        ("net.allow_private", g.allow_private.to_string(), "net.allow_private"),
        ("net.unix", list(g.unix.iter().map(|p| p.display().to_string()).collect()), "net.unix"),
        ("env.pass", list(g.env_pass.clone()), "env.pass"),
        ("credentials", list(g.credentials.iter().map(|c| c.name.clone()).collect()), "credentials"),
        ("sysv_ipc", g.sysv_ipc.to_string(), "sysv_ipc"),
        ("inotify", g.inotify.to_string(), "inotify"),
    ];
    for (key, value, note_key) in rows {
        out.push(format!("{key} = {value}  <- {}", by(note_key)));
    }
    let l = &spec.limits;
    for (key, value) in [
        ("timeout", format_duration(l.timeout)),
        ("memory", format_size(l.memory)),
        ("max_output", format_size(l.max_output)),
        ("cpu", format_duration(l.cpu)),
        ("processes", l.processes.to_string()),
        ("open_files", l.open_files.to_string()),
        ("file_size", format_size(l.file_size)),
        ("tmp_size", format_size(l.tmp_size)),
        ("tmp_files", l.tmp_files.to_string()),
    ] {
        out.push(format!("limits.{key} = {value}  <- {}", by(&format!("limits.{key}"))));
    }
    out
}

fn reason(r: &crate::policy::Rule) -> String {
    r.reason.as_ref().map(|w| format!(" ({w})")).unwrap_or_default()
}
