//! From policy text to a checked [`Policy`]: deserialise with spans, then check
//! what the types cannot, collecting every problem with its line and column.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Component, Path, PathBuf};

use regex::RegexBuilder;
use toml::Spanned;

use super::schema::{RawLimits, RawPolicy, RawTool};
use super::{
    ArgSelector, DEFAULT_MAX_OUTPUT, DEFAULT_MEMORY, DEFAULT_TIMEOUT, GrantPath, Grants, Limits, MAX_COMPONENT_MEMORY,
    NetGrant, PathGrant, PluginSource, PluginSpec, Policy, PolicyError, Problem, Rule, Tier, ToolSpec,
};

/// The builtin plugins compiled into warden.
pub(super) const BUILTIN_PLUGINS: &[&str] = &["fs"];
/// The largest compiled regex a rule may have.
const MAX_RULE_REGEX: usize = 1 << 20;
/// The most tools a policy may declare.
const MAX_TOOLS: usize = 1024;

/// What the placeholders expand to.
#[derive(Debug, Clone)]
pub struct Context {
    /// `{workspace}`: absolute, canonical.
    pub workspace: PathBuf,
    /// `{home}`.
    pub home: PathBuf,
    /// `{cache}`.
    pub cache: PathBuf,
}

impl Context {
    /// The context of this process: `workspace` canonicalised, `$HOME`, `$XDG_CACHE_HOME`.
    pub fn from_env(workspace: &Path) -> std::io::Result<Context> {
        let workspace = workspace.canonicalize()?;
        let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/root"));
        let cache = std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .unwrap_or_else(|| home.join(".cache"));
        Ok(Context { workspace, home, cache })
    }
}

struct Checker<'a> {
    text: &'a str,
    origin: &'a str,
    problems: Vec<Problem>,
}

impl Checker<'_> {
    fn at(&self, span: Range<usize>) -> (usize, usize) {
        let upto = &self.text[..span.start.min(self.text.len())];
        let line = upto.matches('\n').count() + 1;
        let column = upto.rsplit('\n').next().map(|l| l.chars().count()).unwrap_or(0) + 1;
        (line, column)
    }

    fn location(&self, span: Range<usize>) -> String {
        let (line, column) = self.at(span);
        format!("{}:{line}:{column}", self.origin)
    }

    fn problem(&mut self, span: Range<usize>, message: impl Into<String>) {
        let (line, column) = self.at(span);
        self.problems.push(Problem { file: self.origin.to_string(), line, column, message: message.into() });
    }
}

/// Deserialises and checks `text`.
pub(super) fn compile(text: &str, origin: &str, dir: &Path, ctx: &Context) -> Result<Policy, PolicyError> {
    let mut c = Checker { text, origin, problems: Vec::new() };
    let raw: RawPolicy = match toml::from_str(text) {
        Ok(raw) => raw,
        Err(e) => {
            let span = e.span().unwrap_or(0..0);
            c.problem(span, e.message().trim().to_string());
            return Err(PolicyError { problems: c.problems });
        }
    };

    if *raw.version.get_ref() != 1 {
        c.problem(
            raw.version.span(),
            format!("unsupported policy version {}: this warden reads version 1", raw.version.get_ref()),
        );
    }

    let defaults = Limits {
        timeout: raw.defaults.timeout.map_or(DEFAULT_TIMEOUT, |d| d.0),
        memory: raw.defaults.memory.map_or(DEFAULT_MEMORY, |s| s.0),
        max_output: raw.defaults.max_output.map_or(DEFAULT_MAX_OUTPUT, |s| s.0),
    };
    let default_tier = raw.defaults.tier.unwrap_or(Tier::Ask);

    let mut plugins = BTreeMap::new();
    for (name, spanned) in &raw.plugins {
        let span = spanned.span();
        let p = spanned.get_ref();
        let source = p.source.get_ref();
        let source = if let Some(builtin) = source.strip_prefix("builtin:") {
            if !BUILTIN_PLUGINS.contains(&builtin) {
                c.problem(
                    p.source.span(),
                    format!("plugin {name}: unknown builtin {source:?} (builtins: {})", BUILTIN_PLUGINS.join(", ")),
                );
            }
            PluginSource::Builtin(builtin.to_string())
        } else {
            PluginSource::File(dir.join(source))
        };
        let sha256 = match &p.sha256 {
            Some(h) => {
                let v = h.get_ref().to_ascii_lowercase();
                if v.len() != 64 || !v.bytes().all(|b| b.is_ascii_hexdigit()) {
                    c.problem(h.span(), format!("plugin {name}: sha256 must be 64 hexadecimal digits"));
                }
                Some(v)
            }
            None => {
                if matches!(source, PluginSource::File(_)) {
                    c.problem(
                        span.clone(),
                        format!(
                            "plugin {name}: missing sha256: a plugin that is not builtin loads only when pinned; \
                             add sha256 = \"…\" (`sha256sum FILE` prints it)"
                        ),
                    );
                }
                None
            }
        };
        plugins.insert(name.clone(), PluginSpec { name: name.clone(), source, sha256, location: c.location(span) });
    }

    if raw.tools.len() > MAX_TOOLS {
        c.problem(0..0, format!("too many tools: {} (at most {MAX_TOOLS})", raw.tools.len()));
    }

    let mut tools = BTreeMap::new();
    for (name, spanned) in &raw.tools {
        let tool_span = spanned.span();
        let name_str = name.get_ref();
        if !valid_tool_name(name_str) {
            c.problem(
                name.span(),
                format!(
                    "tool {name_str:?}: names are 1-64 characters of a-z, A-Z, 0-9, _ and - (dots and __ are reserved)"
                ),
            );
        }
        if let Some(t) =
            compile_tool(&mut c, name_str, tool_span, spanned.get_ref(), &plugins, &defaults, default_tier, ctx)
        {
            tools.insert(name_str.clone(), t);
        }
    }

    if !c.problems.is_empty() {
        c.problems.sort_by_key(|p| (p.line, p.column));
        return Err(PolicyError { problems: c.problems });
    }
    Ok(Policy {
        origin: origin.to_string(),
        workspace: ctx.workspace.clone(),
        mode: raw.sandbox.mode.unwrap_or_default(),
        plugins,
        tools,
    })
}

fn valid_tool_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 64
        && !n.contains("__")
        && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

#[allow(clippy::too_many_arguments)]
fn compile_tool(
    c: &mut Checker<'_>,
    name: &str,
    span: Range<usize>,
    t: &RawTool,
    plugins: &BTreeMap<String, PluginSpec>,
    defaults: &Limits,
    default_tier: Tier,
    ctx: &Context,
) -> Option<ToolSpec> {
    if let Some(exec) = &t.exec {
        c.problem(
            exec.span(),
            format!(
                "tool {name}: `exec` (process tools) is not supported yet by this warden; \
                 remove the tool or run it as a component plugin"
            ),
        );
        return None;
    }
    let Some(plugin) = &t.plugin else {
        c.problem(span, format!("tool {name}: missing `plugin = \"…\"` naming the [plugins.*] entry that runs it"));
        return None;
    };
    if !plugins.contains_key(plugin.get_ref()) {
        let declared: Vec<&str> = plugins.keys().map(String::as_str).collect();
        c.problem(
            plugin.span(),
            format!(
                "tool {name}: plugin {:?} is not declared; add [plugins.{}] (declared: {})",
                plugin.get_ref(),
                plugin.get_ref(),
                if declared.is_empty() { "none".to_string() } else { declared.join(", ") }
            ),
        );
    }

    let limits = component_limits(c, name, &t.limits, defaults);

    let mut paths: Vec<PathGrant> = Vec::new();
    for (list, write) in [(&t.fs.read, false), (&t.fs.write, true)] {
        for entry in list {
            let Some(path) = expand_path(c, name, entry, ctx) else { continue };
            if let Some(existing) = paths.iter_mut().find(|g| g.path == path) {
                existing.write |= write;
            } else {
                paths.push(PathGrant { path, write });
            }
        }
    }

    let mut net = Vec::new();
    for entry in &t.net.connect {
        match parse_host_port(entry.get_ref()) {
            Ok(g) => net.push(g),
            Err(msg) => c.problem(entry.span(), format!("tool {name}: net.connect {:?}: {msg}", entry.get_ref())),
        }
    }

    let mut env_pass = Vec::new();
    for v in &t.env.pass {
        if valid_env_name(v.get_ref()) {
            env_pass.push(v.get_ref().clone());
        } else {
            c.problem(
                v.span(),
                format!("tool {name}: env.pass {:?} is not a variable name (WARDEN_* names are reserved)", v.get_ref()),
            );
        }
    }
    let mut env_set = BTreeMap::new();
    for (k, v) in &t.env.set {
        if !valid_env_name(k) {
            c.problem(
                v.span(),
                format!("tool {name}: env.set key {k:?} is not a variable name (WARDEN_* names are reserved)"),
            );
            continue;
        }
        match expand_text(v.get_ref(), ctx, true) {
            Ok(s) => {
                env_set.insert(k.clone(), s);
            }
            Err(msg) => c.problem(v.span(), format!("tool {name}: env.set.{k}: {msg}")),
        }
    }

    let mut rules = Vec::new();
    for r in &t.rule {
        let rspan = r.span();
        let raw = r.get_ref();
        if raw.when.is_empty() {
            c.problem(rspan.clone(), format!("tool {name}: a rule needs at least one `when` entry"));
            continue;
        }
        let mut when = Vec::new();
        for (key, re) in &raw.when {
            let selector =
                if key.starts_with('/') { ArgSelector::Pointer(key.clone()) } else { ArgSelector::Name(key.clone()) };
            match RegexBuilder::new(re.get_ref()).size_limit(MAX_RULE_REGEX).build() {
                Ok(rx) => when.push((selector, rx)),
                Err(e) => c.problem(re.span(), format!("tool {name}: rule regex for `{key}` does not compile: {e}")),
            }
        }
        rules.push(Rule { when, tier: raw.tier, reason: raw.reason.clone(), location: c.location(rspan) });
    }

    Some(ToolSpec {
        name: name.to_string(),
        plugin: plugin.get_ref().clone(),
        description: t.description.clone(),
        tier: t.tier.unwrap_or(default_tier),
        grants: Grants { paths, net, env_pass, env_set },
        limits,
        rules,
        location: c.location(span),
    })
}

fn component_limits(c: &mut Checker<'_>, name: &str, l: &RawLimits, defaults: &Limits) -> Limits {
    let process_only: [(&str, Option<Range<usize>>); 4] = [
        ("cpu", l.cpu.as_ref().map(Spanned::span)),
        ("processes", l.processes.as_ref().map(Spanned::span)),
        ("open_files", l.open_files.as_ref().map(Spanned::span)),
        ("file_size", l.file_size.as_ref().map(Spanned::span)),
    ];
    for (key, span) in process_only {
        if let Some(span) = span {
            c.problem(
                span,
                format!(
                    "tool {name}: limits.{key} applies only to process tools; a component is bounded by \
                     limits.memory and limits.timeout"
                ),
            );
        }
    }
    let limits = Limits {
        timeout: l.timeout.map_or(defaults.timeout, |d| d.0),
        memory: l.memory.map_or(defaults.memory, |s| s.0),
        max_output: l.max_output.map_or(defaults.max_output, |s| s.0),
    };
    if limits.memory > MAX_COMPONENT_MEMORY {
        c.problem(0..0, format!("tool {name}: limits.memory is above 4GiB, more than a component can address"));
    }
    limits
}

/// Variables warden itself sets for components; a policy may not override them.
const RESERVED_ENV_PREFIX: &str = "WARDEN_";

fn valid_env_name(n: &str) -> bool {
    !n.is_empty()
        && !n.starts_with(RESERVED_ENV_PREFIX)
        && n.len() <= 128
        && !n.starts_with(|c: char| c.is_ascii_digit())
        && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// Expands `{workspace}`, `{home}`, `{cache}` (and keeps `{tmp}` when `keep_tmp`).
fn expand_text(s: &str, ctx: &Context, keep_tmp: bool) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = s;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let close = after.find('}').ok_or_else(|| format!("unclosed placeholder in {s:?}"))?;
        let name = &after[..close];
        match name {
            "workspace" => out.push_str(&ctx.workspace.to_string_lossy()),
            "home" => out.push_str(&ctx.home.to_string_lossy()),
            "cache" => out.push_str(&ctx.cache.to_string_lossy()),
            "tmp" if keep_tmp => out.push_str("{tmp}"),
            "system" => {
                return Err("{system} grants what programs need to run and applies only to process tools".into());
            }
            other => {
                return Err(format!(
                    "unknown placeholder {{{other}}} (known: {{workspace}}, {{home}}, {{tmp}}, {{cache}}, {{system}})"
                ));
            }
        }
        rest = &after[close + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

fn expand_path(c: &mut Checker<'_>, tool: &str, entry: &Spanned<String>, ctx: &Context) -> Option<GrantPath> {
    let raw = entry.get_ref();
    let fail = |c: &mut Checker<'_>, msg: String| {
        c.problem(entry.span(), format!("tool {tool}: path {raw:?}: {msg}"));
        None
    };
    let expanded = match expand_text(raw, ctx, true) {
        Ok(s) => s,
        Err(msg) => return fail(c, msg),
    };
    if let Some(rest) = expanded.strip_prefix("{tmp}") {
        let rel = PathBuf::from(rest.trim_start_matches('/'));
        if rel.components().any(|c| !matches!(c, Component::Normal(_))) || rest.contains("{tmp}") {
            return fail(c, "only plain names may follow {tmp}".into());
        }
        return Some(GrantPath::Tmp(rel));
    }
    if expanded.contains("{tmp}") {
        return fail(c, "{tmp} may only start a path".into());
    }
    let p = PathBuf::from(&expanded);
    if !p.is_absolute() {
        return fail(c, "grants must be absolute or start with a placeholder such as {workspace}".into());
    }
    if p.components().any(|c| matches!(c, Component::ParentDir)) {
        return fail(c, "`..` is not allowed in a grant".into());
    }
    let p: PathBuf = p.components().collect();
    Some(GrantPath::Fixed(p))
}

fn parse_host_port(s: &str) -> Result<NetGrant, String> {
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let (h, p) = rest.split_once("]:").ok_or("write [IPv6]:PORT")?;
        (h.to_string(), p)
    } else {
        let (h, p) = s.rsplit_once(':').ok_or("write HOST:PORT, for example \"api.example.com:443\"")?;
        (h.to_string(), p)
    };
    if host.is_empty() || host.contains('*') || host == "0.0.0.0" || host == "::" {
        return Err("name one host: wildcards and unspecified addresses are not allowed".into());
    }
    if !host.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._:".contains(&b)) {
        return Err("not a host name or IP address".into());
    }
    let port: u16 = port.parse().map_err(|_| format!("bad port {port:?}"))?;
    if port == 0 {
        return Err("port 0 is not a destination".into());
    }
    Ok(NetGrant { host, port })
}

#[cfg(test)]
mod tests;
