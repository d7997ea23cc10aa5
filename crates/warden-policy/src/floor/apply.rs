//! Combining a policy with its floors: the floor always wins.
//!
//! | key | combined |
//! |---|---|
//! | `[sandbox] mode` | `enforce` if either says so |
//! | `tier`, `[[rule]]` | each call: the stricter of the policy's decision and the floor's ([`FloorTier`]) |
//! | `fs.read`, `fs.write` | the intersection: what both cover, read-only unless both allow writing |
//! | `fs.deny_read`, `fs.deny_write` | the union |
//! | `fs.unprotect`, `net.unix`, `env.pass`, `credentials` | the policy's entries the floor lists |
//! | `net.connect` | the intersection (a wildcard narrowed to the floor's names) |
//! | `net.allow_private`, `sysv_ipc`, `inotify`, `fs.git_init` | off where the floor says `false` |
//! | `limits.*` | the smaller |
//! | `[defaults] inbox` | off where the floor says `false`; `max_jobs` the smaller |
//!
//! A tool the floor does not name is bounded by `[tools."*"]` alone; a tool
//! the floor names but the policy does not define is not added.

use super::{Floor, FloorEntry, LimitCaps};
use crate::{GrantPath, Grants, Limits, NetGrant, PathGrant, Policy, Rule, Runner, SandboxMode, Tier, ToolSpec};

/// A floor's say in a tool's tier: its base tier and rules, decided per call
/// like a policy's ([`ToolSpec::decide`] takes the stricter).
#[derive(Debug, Clone)]
pub struct FloorTier {
    /// The floor's tier, as a rule that always matches (its reason and location name the floor).
    pub base: Rule,
    /// The floor's rules for the tool.
    pub rules: Vec<Rule>,
}

impl FloorTier {
    fn from_entry(e: &FloorEntry, origin: &str) -> Option<FloorTier> {
        if e.tier.is_none() && e.rules.is_empty() {
            return None;
        }
        let tier = e.tier.unwrap_or(Tier::Auto);
        let base = Rule {
            when: Vec::new(),
            tier,
            reason: Some(format!("the managed floor {origin} sets tier = \"{tier}\"")),
            location: e.location.clone(),
        };
        Some(FloorTier { base, rules: e.rules.clone() })
    }

    /// The floor's tier for a call with `args`, and the rule that set it.
    pub fn decide(&self, args: &serde_json::Value, process: bool) -> &Rule {
        if self.base.tier == Tier::Deny {
            return &self.base;
        }
        crate::strictest(&self.rules, args, process).unwrap_or(&self.base)
    }
}

/// What a floor changed, for `warden policy explain`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FloorNote {
    /// The key (`fs.write`, `limits.timeout`, `tier`, …).
    pub key: String,
    /// What the policy asked for.
    pub asked: String,
    /// What stands.
    pub now: String,
    /// The floor's `file:line:column`.
    pub by: String,
}

impl Policy {
    /// Combines the policy with `floors` (each only ever makes it stricter).
    pub fn apply_floors(&mut self, floors: &[Floor]) {
        for f in floors {
            self.apply_floor(f);
        }
    }

    fn note(&mut self, subject: &str, key: &str, asked: String, now: String, by: &str) {
        let note = FloorNote { key: key.to_string(), asked, now, by: by.to_string() };
        self.floor_notes.entry(subject.to_string()).or_default().push(note);
    }

    fn apply_floor(&mut self, f: &Floor) {
        self.floors.push(f.origin.clone());
        if let Some((SandboxMode::Enforce, by)) = &f.mode
            && self.mode != SandboxMode::Enforce
        {
            self.note("", "[sandbox] mode", "best-effort".into(), "enforce".into(), by);
            self.mode = SandboxMode::Enforce;
        }
        if let Some((false, by)) = &f.inbox
            && self.inbox
        {
            self.note("", "[defaults] inbox", "true".into(), "false".into(), by);
            self.inbox = false;
        }
        if let Some((most, by)) = &f.max_jobs
            && self.max_jobs > *most
        {
            self.note("", "[defaults] max_jobs", self.max_jobs.to_string(), most.to_string(), by);
            self.max_jobs = (*most).max(1);
        }
        let star = f.tools.get("*");
        let mut notes = Vec::new();
        for (name, spec) in &mut self.tools {
            let mut entries: Vec<&FloorEntry> = star.into_iter().chain(f.tools.get(name)).collect();
            if let Runner::Server(st) = &spec.runner {
                entries.extend(f.servers.get(&st.server));
            }
            for e in entries {
                bound_tool(spec, e, &f.origin, &mut |key, asked, now| notes.push((name.clone(), key, asked, now, e)));
            }
        }
        for (name, server) in &mut self.servers {
            let entries: Vec<&FloorEntry> = star.into_iter().chain(f.servers.get(name)).collect();
            let subject = format!("server {name}");
            for e in entries {
                let mut note = |key, asked, now| notes.push((subject.clone(), key, asked, now, e));
                if let Some(t) = FloorTier::from_entry(e, &f.origin) {
                    raise(&mut server.tier, t.base.tier, &mut note);
                    server.floors.push(t);
                }
                bound_grants(&mut server.grants, e, &mut note);
                bound_limits(&mut server.limits, &e.limits, &mut note);
            }
            // A floor's `[tools."NAME__TOOL"]` reaches the server's tools that the policy does not name.
            let prefix = format!("{name}{}", crate::SERVER_TOOL_SEPARATOR);
            for (tool, e) in f.tools.iter().filter(|(t, _)| t.starts_with(&prefix)) {
                if let Some(t) = FloorTier::from_entry(e, &f.origin) {
                    server.tool_floors.entry(tool[prefix.len()..].to_string()).or_default().push(t);
                }
            }
        }
        for (subject, key, asked, now, e) in notes {
            self.note(&subject, key, asked, now, &e.location);
        }
    }
}

/// Bounds one tool by one floor entry; `note` hears each change.
fn bound_tool(spec: &mut ToolSpec, e: &FloorEntry, origin: &str, note: &mut dyn FnMut(&'static str, String, String)) {
    if let Some(t) = FloorTier::from_entry(e, origin) {
        raise(&mut spec.tier, t.base.tier, note);
        spec.floors.push(t);
    }
    bound_grants(&mut spec.grants, e, note);
    bound_limits(&mut spec.limits, &e.limits, note);
}

fn raise(tier: &mut Tier, floor: Tier, note: &mut dyn FnMut(&'static str, String, String)) {
    if floor > *tier {
        note("tier", tier.to_string(), floor.to_string());
        *tier = floor;
    }
}

/// Whether `inner` lies inside `outer`.
pub(crate) fn path_under(inner: &GrantPath, outer: &GrantPath) -> bool {
    match (inner, outer) {
        (GrantPath::Fixed(i), GrantPath::Fixed(o)) => i.starts_with(o),
        (GrantPath::Tmp(i), GrantPath::Tmp(o)) => i.starts_with(o),
        _ => false,
    }
}

/// What both `asked` and `most` cover: each pair's inner path, writable only where both allow it.
pub(crate) fn intersect_paths(asked: &[PathGrant], most: &[PathGrant]) -> Vec<PathGrant> {
    let mut out: Vec<PathGrant> = Vec::new();
    for a in asked {
        for m in most {
            let path = if path_under(&a.path, &m.path) {
                &a.path
            } else if path_under(&m.path, &a.path) {
                &m.path
            } else {
                continue;
            };
            let write = a.write && m.write;
            match out.iter_mut().find(|g| &g.path == path) {
                Some(g) => g.write |= write,
                None => out.push(PathGrant { path: path.clone(), write }),
            }
        }
    }
    out
}

/// Whether the host pattern `inner` names only hosts that `outer` names.
pub(crate) fn host_under(inner: &str, outer: &str) -> bool {
    if outer == "*" || inner == outer {
        return true;
    }
    match outer.strip_prefix("*.") {
        Some(suffix) => {
            let name = inner.strip_prefix("*.").unwrap_or(inner);
            inner != "*" && name.ends_with(suffix) && name[..name.len() - suffix.len()].ends_with('.')
        }
        None => false,
    }
}

/// What both `asked` and `most` reach.
pub(crate) fn intersect_net(asked: &[NetGrant], most: &[NetGrant]) -> Vec<NetGrant> {
    let mut out: Vec<NetGrant> = Vec::new();
    for a in asked {
        for m in most.iter().filter(|m| m.port == a.port) {
            let g = if host_under(&a.host, &m.host) {
                a
            } else if host_under(&m.host, &a.host) {
                m
            } else {
                continue;
            };
            if !out.contains(g) {
                out.push(g.clone());
            }
        }
    }
    out
}

fn words<T: std::fmt::Display>(items: &[T]) -> String {
    if items.is_empty() {
        return "nothing".into();
    }
    items.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
}

fn path_words(items: &[PathGrant]) -> String {
    words(&items.iter().map(|g| format!("{}{}", g.path, if g.write { " (write)" } else { "" })).collect::<Vec<_>>())
}

/// Bounds `g` by the floor entry `e`.
fn bound_grants(g: &mut Grants, e: &FloorEntry, note: &mut dyn FnMut(&'static str, String, String)) {
    if let Some(most) = &e.paths {
        let kept = intersect_paths(&g.paths, most);
        if kept != g.paths {
            note("fs.read, fs.write", path_words(&g.paths), path_words(&kept));
            g.paths = kept;
        }
        let all_system = crate::SYSTEM_READ.iter().all(|p| {
            let p = GrantPath::Fixed(p.into());
            g.paths.iter().any(|x| x.path == p)
        });
        if g.system && !all_system {
            note("{system}", "granted".into(), "only in part".into());
            g.system = false;
        }
    }
    for d in &e.deny {
        if !g.deny.contains(d) {
            let key = if d.read { "fs.deny_read" } else { "fs.deny_write" };
            note(key, "-".into(), d.path.to_string());
            g.deny.push(d.clone());
        }
    }
    if let Some(most) = &e.net {
        let kept = intersect_net(&g.net, most);
        if kept != g.net {
            note("net.connect", words(&g.net), words(&kept));
            g.net = kept;
        }
    }
    let keep_paths = |list: &mut Vec<std::path::PathBuf>,
                      most: &Option<Vec<std::path::PathBuf>>,
                      key,
                      note: &mut dyn FnMut(&'static str, String, String)| {
        if let Some(most) = most {
            let before = list.clone();
            list.retain(|p| most.iter().any(|m| p.starts_with(m)));
            if *list != before {
                let show = |l: &[std::path::PathBuf]| words(&l.iter().map(|p| p.display()).collect::<Vec<_>>());
                note(key, show(&before), show(list));
            }
        }
    };
    keep_paths(&mut g.unprotect, &e.unprotect, "fs.unprotect", note);
    keep_paths(&mut g.unix, &e.unix, "net.unix", note);
    if let Some(most) = &e.env_pass {
        let before = g.env_pass.clone();
        g.env_pass.retain(|v| most.contains(v));
        if g.env_pass != before {
            note("env.pass", words(&before), words(&g.env_pass));
        }
    }
    if let Some(most) = &e.credentials {
        let before: Vec<String> = g.credentials.iter().map(|c| c.name.clone()).collect();
        g.credentials.retain(|c| most.contains(&c.name));
        if g.credentials.len() != before.len() {
            note("credentials", words(&before), words(&g.credentials.iter().map(|c| &c.name).collect::<Vec<_>>()));
        }
    }
    for (key, floor, value) in [
        ("net.allow_private", e.flags.allow_private, &mut g.allow_private),
        ("sysv_ipc", e.flags.sysv_ipc, &mut g.sysv_ipc),
        ("inotify", e.flags.inotify, &mut g.inotify),
        ("fs.git_init", e.flags.git_init, &mut g.git_init),
    ] {
        if floor == Some(false) && *value {
            note(key, "true".into(), "false".into());
            *value = false;
        }
    }
}

/// Caps each of `l` at the floor's.
fn bound_limits(l: &mut Limits, caps: &LimitCaps, note: &mut dyn FnMut(&'static str, String, String)) {
    use crate::units::{format_duration as d, format_size as b};
    fn cap<T: PartialOrd + Copy>(
        key: &'static str,
        value: &mut T,
        most: Option<T>,
        show: fn(T) -> String,
        note: &mut dyn FnMut(&'static str, String, String),
    ) {
        if let Some(m) = most
            && *value > m
        {
            note(key, show(*value), show(m));
            *value = m;
        }
    }
    let n = |v: u32| v.to_string();
    cap("limits.timeout", &mut l.timeout, caps.timeout, d, note);
    cap("limits.memory", &mut l.memory, caps.memory, b, note);
    cap("limits.max_output", &mut l.max_output, caps.max_output, b, note);
    cap("limits.cpu", &mut l.cpu, caps.cpu, d, note);
    cap("limits.processes", &mut l.processes, caps.processes, n, note);
    cap("limits.open_files", &mut l.open_files, caps.open_files, n, note);
    cap("limits.file_size", &mut l.file_size, caps.file_size, b, note);
    cap("limits.tmp_size", &mut l.tmp_size, caps.tmp_size, b, note);
    cap("limits.tmp_files", &mut l.tmp_files, caps.tmp_files, n, note);
}
