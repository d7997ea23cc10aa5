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

/// The key of a [`FloorNote`] for a floor's table naming a tool or server the policy does not define.
pub const UNMATCHED: &str = "names nothing here";

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
        self.drop_credential_commands(floors);
    }

    fn note(&mut self, subject: &str, key: &str, asked: String, now: String, by: &str) {
        let note = FloorNote { key: key.to_string(), asked, now, by: by.to_string() };
        self.floor_notes.entry(subject.to_string()).or_default().push(note);
    }

    fn apply_floor(&mut self, f: &Floor) {
        self.floors.push(f.origin.clone());
        self.apply_defaults(f);
        let star = f.tools.get("*");
        let unnamed = f.unnamed.as_ref().map(|(tier, at)| FloorEntry {
            location: at.clone(),
            tier: Some(*tier),
            ..FloorEntry::default()
        });
        let mut notes: Vec<(String, &'static str, String, String, String)> = Vec::new();
        for (name, spec) in &mut self.tools {
            // (entry, whether it names this tool: its rules' arguments are then checked)
            let mut entries: Vec<(&FloorEntry, bool)> = star.map(|e| (e, false)).into_iter().collect();
            entries.extend(f.tools.get(name).map(|e| (e, true)));
            if let Runner::Server(st) = &spec.runner {
                entries.extend(f.servers.get(&st.server).map(|e| (e, true)));
            }
            if !entries.iter().any(|(_, named)| *named) {
                entries.extend(unnamed.as_ref().map(|e| (e, false)));
            }
            for (e, named) in entries {
                let e = if named { fail_closed(e, spec) } else { e.clone() };
                let by = e.location.clone();
                bound_tool(spec, &e, &f.origin, &mut |key, asked, now| {
                    notes.push((name.clone(), key, asked, now, by.clone()))
                });
            }
            if let Some((false, by)) = &f.inbox
                && spec.inbox == Some(true)
            {
                notes.push((name.clone(), "inbox", "true".into(), "false".into(), by.clone()));
                spec.inbox = Some(false);
            }
        }
        for (name, server) in &mut self.servers {
            let mut entries: Vec<&FloorEntry> = star.into_iter().chain(f.servers.get(name)).collect();
            if !f.servers.contains_key(name) {
                entries.extend(unnamed.as_ref());
            }
            let subject = format!("server {name}");
            for e in entries {
                let by = e.location.clone();
                let mut note = |key, asked, now| notes.push((subject.clone(), key, asked, now, by.clone()));
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
        for (subject, key, asked, now, by) in notes {
            self.note(&subject, key, asked, now, &by);
        }
        // A name the floor bounds that this policy does not define: said, since a renamed tool escapes it.
        for (name, e) in &f.tools {
            let server_tool = name
                .split_once(crate::SERVER_TOOL_SEPARATOR)
                .is_some_and(|(server, _)| self.servers.contains_key(server));
            if name != "*" && !server_tool && !self.tools.contains_key(name) {
                self.note("", UNMATCHED, format!("[tools.{name}]"), "-".into(), &e.location);
            }
        }
        for (name, e) in &f.servers {
            if !self.servers.contains_key(name) {
                self.note("", UNMATCHED, format!("[servers.{name}]"), "-".into(), &e.location);
            }
        }
    }

    /// `[sandbox] mode` and `[defaults]`.
    fn apply_defaults(&mut self, f: &Floor) {
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
    }

    /// Under floors, a credential from `command` (a program the policy names,
    /// run on the host outside every sandbox) stays only where a floor says
    /// `credential_commands = true` and none says `false`; the others go from
    /// every holder, noted. (`keyring` runs `secret-tool lookup`, warden's own
    /// fixed program, and stays.)
    fn drop_credential_commands(&mut self, floors: &[Floor]) {
        let says: Vec<&(bool, String)> = floors.iter().filter_map(|f| f.credential_commands.as_ref()).collect();
        if floors.is_empty() || (says.iter().any(|(v, _)| *v) && says.iter().all(|(v, _)| *v)) {
            return;
        }
        let by = says.iter().find(|(v, _)| !*v).map_or_else(|| floors[0].origin.clone(), |(_, at)| at.clone());
        let gone: Vec<String> = self
            .credentials
            .values()
            .filter(|c| matches!(&c.source, crate::Source::Command(argv) if !is_keyring(argv)))
            .map(|c| c.name.clone())
            .collect();
        for name in &gone {
            self.credentials.remove(name);
            let why = format!(
                "{name} (from a command, which runs on the host: set [defaults] credential_commands = true in a floor to allow it)"
            );
            let holders: Vec<String> = self
                .tools
                .values()
                .filter(|t| t.grants.credentials.iter().any(|c| &c.name == name))
                .map(|t| t.name.clone())
                .chain(
                    self.servers
                        .values()
                        .filter(|s| s.grants.credentials.iter().any(|c| &c.name == name))
                        .map(|s| format!("server {}", s.name)),
                )
                .collect();
            for t in self.tools.values_mut() {
                t.grants.credentials.retain(|c| &c.name != name);
            }
            for s in self.servers.values_mut() {
                s.grants.credentials.retain(|c| &c.name != name);
            }
            for h in holders {
                self.note(&h, "credentials", why.clone(), "-".into(), &by);
            }
        }
    }
}

/// `from = { keyring = … }` as compiled: `secret-tool lookup service S account A`.
fn is_keyring(argv: &[String]) -> bool {
    argv.len() == 6 && argv[0] == "secret-tool" && argv[1] == "lookup" && argv[2] == "service" && argv[4] == "account"
}

/// `e` for `spec`: a rule of the floor that looks at an argument the tool does
/// not have would never match, so a renamed argument would slip past it; such a
/// rule matches every call instead (it fails closed), saying why. Only where
/// the policy says what the arguments are (process tools, command programs).
fn fail_closed(e: &FloorEntry, spec: &ToolSpec) -> FloorEntry {
    let params: Option<Vec<String>> = match &spec.runner {
        Runner::Process(x) => Some(match &x.input_schema {
            Some(schema) => schema_names(schema),
            None => x.params.clone(),
        }),
        Runner::Command(x) => Some(match &x.input_schema {
            Some(schema) => schema_names(schema),
            None => x.params.clone(),
        }),
        Runner::Plugin(_) | Runner::Server(_) => None,
    };
    let Some(params) = params else { return e.clone() };
    let mut e = e.clone();
    for rule in &mut e.rules {
        let missing: Vec<String> = rule
            .when
            .iter()
            .filter_map(|(sel, _)| match sel {
                crate::ArgSelector::Name(n) if !params.contains(n) => Some(n.clone()),
                crate::ArgSelector::Pointer(p) => {
                    let top = p.trim_start_matches('/').split('/').next().unwrap_or_default();
                    (!params.iter().any(|n| n == top)).then(|| p.clone())
                }
                _ => None,
            })
            .collect();
        if !missing.is_empty() {
            rule.when.clear();
            rule.reason = Some(format!(
                "{}the floor's rule looks at {} which {} has no argument of: it applies to every call",
                rule.reason.as_ref().map(|r| format!("{r}; ")).unwrap_or_default(),
                missing.join(", "),
                spec.name
            ));
        }
    }
    e
}

/// The property names of an input schema.
fn schema_names(schema: &serde_json::Value) -> Vec<String> {
    schema["properties"].as_object().map(|m| m.keys().cloned().collect()).unwrap_or_default()
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
    // An address is named only by the same address: `*` and `*.suffix` name
    // host names, never addresses (as the egress rules read them).
    match (inner.parse::<std::net::IpAddr>(), outer.parse::<std::net::IpAddr>()) {
        (Ok(a), Ok(b)) => return canonical(a) == canonical(b),
        (Ok(_), Err(_)) | (Err(_), Ok(_)) => return false,
        _ => {}
    }
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

/// An IPv4-mapped IPv6 address as the IPv4 address it is.
fn canonical(ip: std::net::IpAddr) -> std::net::IpAddr {
    match ip {
        std::net::IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, std::net::IpAddr::V4),
        v4 => v4,
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
