//! From policy text to a checked [`Policy`]: deserialise with spans, then check
//! what the types cannot, collecting every problem with its line and column.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Component, Path, PathBuf};

use regex::RegexBuilder;
use toml::Spanned;

use crate::schema::{RawLimits, RawPolicy, RawRule, RawTool};
use crate::{
    ArgSelector, CommandSpec, DEFAULT_FILE_SIZE, DEFAULT_MAX_JOBS, DEFAULT_MAX_OUTPUT, DEFAULT_MEMORY,
    DEFAULT_OPEN_FILES, DEFAULT_PROCESSES, DEFAULT_TIMEOUT, DEFAULT_TMP_FILES, DEFAULT_TMP_SIZE, DenyEntry, ExecSpec,
    GrantPath, Grants, JOB_TOOLS, Limits, MAX_COMPONENT_MEMORY, MAX_MAX_JOBS, NetGrant, PathGrant, PluginKind,
    PluginSource, PluginSpec, Policy, PolicyError, Problem, Profile, Rule, Runner, SERVER_TOOL_SEPARATOR, ServerSpec,
    Tier, ToolSpec,
};

/// What `{system}` grants read (and execute) access to: what ordinary programs
/// need to start and run. Never `/etc` whole: it holds `shadow` and host keys.
pub const SYSTEM_READ: &[&str] = &[
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib64",
    "/lib32",
    "/libx32",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/localtime",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/alternatives",
    "/etc/hosts",
    "/etc/host.conf",
    "/etc/resolv.conf",
    "/etc/gai.conf",
    "/etc/mime.types",
    "/etc/debian_version",
    "/etc/os-release",
    "/etc/lsb-release",
    // git reads the system configuration at every start and stops (`fatal:
    // unable to access '/etc/gitconfig'`) when it exists but cannot be read.
    "/etc/gitconfig",
    "/etc/gitattributes",
    // getprotobyname/getservbyname (Python's socket module, curl, OpenSSH's
    // port names) read these; the C library reports "not found" without them.
    "/etc/protocols",
    "/etc/services",
    // ncurses and readline: a terminal program's key bindings and
    // capabilities (the system terminfo database itself lives under /usr).
    "/etc/terminfo",
    "/etc/inputrc",
    // libmagic (`file`, python-magic) loads its local rules from here.
    "/etc/magic",
    "/etc/magic.mime",
    // Never /etc/pip.conf, /etc/npmrc or /etc/docker: they may hold a
    // registry's credentials; a policy that needs them names them.
    // Debian's Python links /usr/lib/python3.X/sitecustomize.py here: without
    // it every python3 start prints a PermissionError.
    "/etc/python3",
    "/etc/python3.11",
    "/etc/python3.12",
    "/etc/python3.13",
    "/etc/python3.14",
    "/dev/urandom",
    "/dev/random",
];
/// What `{system}` grants read and write access to.
pub const SYSTEM_WRITE: &[&str] = &["/dev/null", "/dev/zero", "/dev/full"];
/// The most elements an `exec` template may have.
const MAX_ARGV: usize = 256;

/// The builtin plugins compiled into warden.
pub(crate) const BUILTIN_PLUGINS: &[&str] = &["fs", "net"];
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

/// The 1-based line and column (in characters) where `span` starts in `text`.
pub fn line_column(text: &str, span: &Range<usize>) -> (usize, usize) {
    let upto = &text[..span.start.min(text.len())];
    let line = upto.matches('\n').count() + 1;
    let column = upto.rsplit('\n').next().map(|l| l.chars().count()).unwrap_or(0) + 1;
    (line, column)
}

impl Checker<'_> {
    fn at(&self, span: Range<usize>) -> (usize, usize) {
        line_column(self.text, &span)
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
pub(crate) fn compile(text: &str, origin: &str, dir: &Path, ctx: &Context) -> Result<Policy, PolicyError> {
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

    let (defaults, default_tier) = compile_defaults(&raw);
    let plugins = compile_plugins(&mut c, &raw, dir);

    if raw.tools.len() > MAX_TOOLS {
        c.problem(0..0, format!("too many tools: {} (at most {MAX_TOOLS})", raw.tools.len()));
    }

    let servers = compile_servers(&mut c, &raw, &plugins, &defaults, ctx);
    let tools =
        compile_tools(&mut c, &raw, &servers, Scope { plugins: &plugins, defaults: &defaults, default_tier, ctx });

    let profiles = compile_profiles(&mut c, &raw, &tools, &servers);
    let max_jobs = compile_jobs(&mut c, &raw, &tools);

    if !c.problems.is_empty() {
        c.problems.sort_by_key(|p| (p.line, p.column));
        return Err(PolicyError { problems: c.problems });
    }
    Ok(Policy {
        origin: origin.to_string(),
        workspace: ctx.workspace.clone(),
        mode: raw.sandbox.mode.as_ref().map(|m| *m.get_ref()).unwrap_or_default(),
        plugins,
        tools,
        servers,
        lock_path: (origin != crate::DEFAULT_POLICY_NAME).then(|| dir.join(crate::LOCK_FILE)),
        profiles,
        profile: None,
        max_jobs,
        own_files: own_files(origin, dir),
    })
}

/// `[defaults]`: the limits of a tool that sets none, and the tier of a tool that names none.
fn compile_defaults(raw: &RawPolicy) -> (Limits, Tier) {
    let timeout = raw.defaults.timeout.map_or(DEFAULT_TIMEOUT, |d| d.0);
    let defaults = Limits {
        timeout,
        memory: raw.defaults.memory.map_or(DEFAULT_MEMORY, |s| s.0),
        max_output: raw.defaults.max_output.map_or(DEFAULT_MAX_OUTPUT, |s| s.0),
        cpu: timeout,
        processes: DEFAULT_PROCESSES,
        open_files: DEFAULT_OPEN_FILES,
        file_size: DEFAULT_FILE_SIZE,
        tmp_size: DEFAULT_TMP_SIZE,
        tmp_files: DEFAULT_TMP_FILES,
    };
    (defaults, raw.defaults.tier.unwrap_or(Tier::Ask))
}

/// Checks `[plugins.NAME]`, each in turn.
fn compile_plugins(c: &mut Checker<'_>, raw: &RawPolicy, dir: &Path) -> BTreeMap<String, PluginSpec> {
    let mut plugins = BTreeMap::new();
    for (name, spanned) in &raw.plugins {
        let span = spanned.span();
        let p = spanned.get_ref();
        let source = plugin_source(c, name, p, dir);
        let sha256 = plugin_sha256(c, name, p, &source, &span);
        let kind = plugin_kind(c, name, p);
        if kind == PluginKind::Command && matches!(source, PluginSource::Builtin(_)) {
            c.problem(span.clone(), format!("plugin {name}: builtin plugins are of kind \"tool\""));
        }
        plugins
            .insert(name.clone(), PluginSpec { name: name.clone(), source, kind, sha256, location: c.location(span) });
    }
    plugins
}

/// A plugin's `source`: `builtin:NAME` (one of [`BUILTIN_PLUGINS`]) or a file relative to `dir`.
fn plugin_source(c: &mut Checker<'_>, name: &str, p: &crate::schema::RawPlugin, dir: &Path) -> PluginSource {
    let source = p.source.get_ref();
    if let Some(builtin) = source.strip_prefix("builtin:") {
        if !BUILTIN_PLUGINS.contains(&builtin) {
            c.problem(
                p.source.span(),
                format!("plugin {name}: unknown builtin {source:?} (builtins: {})", BUILTIN_PLUGINS.join(", ")),
            );
        }
        PluginSource::Builtin(builtin.to_string())
    } else {
        PluginSource::File(dir.join(source))
    }
}

/// A plugin's `sha256`, lowercased: 64 hexadecimal digits, required of a plugin that is not builtin.
fn plugin_sha256(
    c: &mut Checker<'_>,
    name: &str,
    p: &crate::schema::RawPlugin,
    source: &PluginSource,
    span: &Range<usize>,
) -> Option<String> {
    match &p.sha256 {
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
    }
}

/// A plugin's `kind`: "tool" (the default) or "command".
fn plugin_kind(c: &mut Checker<'_>, name: &str, p: &crate::schema::RawPlugin) -> PluginKind {
    match p.kind.as_ref().map(|k| (k.get_ref().as_str(), k.span())) {
        None | Some(("tool", _)) => PluginKind::Tool,
        Some(("command", _)) => PluginKind::Command,
        Some((other, span)) => {
            c.problem(
                span,
                format!(
                    "plugin {name}: unknown kind {other:?}: \"tool\" (the warden:plugin world, the default) or \
                     \"command\" (a wasi:cli/command program run with each tool's `args`)"
                ),
            );
            PluginKind::Tool
        }
    }
}

/// Checks `[servers.NAME]`, each in turn; a server with problems is left out.
fn compile_servers(
    c: &mut Checker<'_>,
    raw: &RawPolicy,
    plugins: &BTreeMap<String, PluginSpec>,
    defaults: &Limits,
    ctx: &Context,
) -> BTreeMap<String, ServerSpec> {
    let mut servers = BTreeMap::new();
    for (name, spanned) in &raw.servers {
        if let Some(server) = compile_server(c, name, spanned, plugins, defaults, ctx) {
            servers.insert(name.get_ref().clone(), server);
        }
    }
    servers
}

/// Checks `[tools.NAME]`, each in turn: a `SERVER__TOOL` entry of a declared
/// server as a server's tool, any other as a tool of its own.
fn compile_tools(
    c: &mut Checker<'_>,
    raw: &RawPolicy,
    servers: &BTreeMap<String, ServerSpec>,
    scope: Scope<'_>,
) -> BTreeMap<String, ToolSpec> {
    let mut tools = BTreeMap::new();
    for (name, spanned) in &raw.tools {
        let tool_span = spanned.span();
        let name_str = name.get_ref();
        if let Some((server, tool)) = name_str.split_once(SERVER_TOOL_SEPARATOR)
            && raw.servers.keys().any(|k| k.get_ref() == server)
        {
            if let Some(server) = servers.get(server)
                && let Some(t) = compile_server_tool(c, server, tool, tool_span, spanned.get_ref())
            {
                tools.insert(name_str.clone(), t);
            }
            continue;
        }
        if !valid_tool_name(name_str) {
            c.problem(
                name.span(),
                format!(
                    "tool {name_str:?}: names are 1-64 characters of a-z, A-Z, 0-9, _ and - (dots and __ are reserved)"
                ),
            );
        }
        if let Some(t) = compile_tool(c, name_str, tool_span, spanned.get_ref(), scope) {
            tools.insert(name_str.clone(), t);
        }
    }
    tools
}

/// The files the policy itself lives in (none for the built-in default policy).
fn own_files(origin: &str, dir: &Path) -> Vec<(String, PathBuf)> {
    if origin == crate::DEFAULT_POLICY_NAME {
        Vec::new()
    } else {
        let absolute = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
        vec![
            ("policy file".to_string(), absolute(Path::new(origin))),
            ("lock file".to_string(), absolute(&dir.join(crate::LOCK_FILE))),
        ]
    }
}

/// Checks `[defaults] max_jobs` (1 to [`MAX_MAX_JOBS`]) and that no tool takes
/// the name of one of warden's job tools ([`JOB_TOOLS`]) while a tool has
/// `background = true` (the job tools are offered then, and must stay warden's own).
fn compile_jobs(c: &mut Checker<'_>, raw: &RawPolicy, tools: &BTreeMap<String, ToolSpec>) -> usize {
    let max_jobs = match &raw.defaults.max_jobs {
        None => DEFAULT_MAX_JOBS,
        Some(n) => match usize::try_from(*n.get_ref()) {
            Ok(v) if (1..=MAX_MAX_JOBS).contains(&v) => v,
            _ => {
                c.problem(
                    n.span(),
                    format!("[defaults] max_jobs must be from 1 to {MAX_MAX_JOBS}, not {}", n.get_ref()),
                );
                DEFAULT_MAX_JOBS
            }
        },
    };
    if let Some(bg) = tools.values().find(|t| t.background) {
        for name in raw.tools.keys() {
            if JOB_TOOLS.contains(&name.get_ref().as_str()) {
                c.problem(
                    name.span(),
                    format!(
                        "tool {}: this name belongs to warden's own job tools ({}), offered because tool {} has \
                         `background = true`; rename the tool",
                        name.get_ref(),
                        JOB_TOOLS.join(", "),
                        bg.name
                    ),
                );
            }
        }
    }
    max_jobs
}

/// The most profiles a policy may declare, and the most entries of one profile.
const MAX_PROFILES: usize = 64;

/// Checks `[profiles.NAME]`: names that exist, tiers that are only stricter.
/// A pattern that matches nothing is not an error here (a server's tools are
/// known only once it runs): `policy check` and `audit` warn about it.
fn compile_profiles(
    c: &mut Checker<'_>,
    raw: &RawPolicy,
    tools: &BTreeMap<String, ToolSpec>,
    servers: &BTreeMap<String, ServerSpec>,
) -> BTreeMap<String, Profile> {
    if raw.profiles.len() > MAX_PROFILES {
        c.problem(0..0, format!("too many profiles: {} (at most {MAX_PROFILES})", raw.profiles.len()));
    }
    let mut out = BTreeMap::new();
    for (name, spanned) in &raw.profiles {
        let (pname, p) = (name.get_ref(), spanned.get_ref());
        if !valid_tool_name(pname) {
            c.problem(name.span(), format!("profile {pname:?}: names are 1-64 characters of a-z, A-Z, 0-9, _ and -"));
        }
        let Some(listed) = profile_tools(c, pname, p) else { continue };
        check_profile_entries(c, pname, p, &listed, tools, servers);
        let mut profile = Profile {
            name: pname.clone(),
            tools: listed,
            tiers: BTreeMap::new(),
            location: c.location(spanned.span()),
            description: p.description.clone(),
        };
        profile_tiers(c, p, &mut profile, tools, servers);
        out.insert(pname.clone(), profile);
    }
    out
}

/// A profile's `tools`: `"*"` or a non-empty list of names and patterns, as a list.
fn profile_tools(c: &mut Checker<'_>, pname: &str, p: &crate::schema::RawProfile) -> Option<Vec<String>> {
    match p.tools.get_ref() {
        toml::Value::String(s) => Some(vec![s.clone()]),
        toml::Value::Array(items) if items.iter().all(toml::Value::is_str) && !items.is_empty() => {
            Some(items.iter().filter_map(|v| v.as_str().map(str::to_string)).collect())
        }
        _ => {
            c.problem(
                p.tools.span(),
                format!(
                    "profile {pname}: `tools` is \"*\" or a non-empty list of tool names and patterns, like \
                     [\"read_file\", \"git_*\", \"server__*\"]"
                ),
            );
            None
        }
    }
}

/// Checks the entries of a profile's `tools`: how many, their characters, and
/// that each name without a `*` is a tool of this policy or of a declared server.
fn check_profile_entries(
    c: &mut Checker<'_>,
    pname: &str,
    p: &crate::schema::RawProfile,
    listed: &[String],
    tools: &BTreeMap<String, ToolSpec>,
    servers: &BTreeMap<String, ServerSpec>,
) {
    if listed.len() > MAX_TOOLS {
        c.problem(
            p.tools.span(),
            format!("profile {pname}: {} entries in `tools` (at most {MAX_TOOLS})", listed.len()),
        );
    }
    for entry in listed {
        let bad_chars = !entry.chars().all(|ch| ch.is_ascii_alphanumeric() || matches!(ch, '_' | '-' | '*'));
        if entry.is_empty() || entry.len() > 140 || bad_chars {
            c.problem(
                p.tools.span(),
                format!("profile {pname}: {entry:?} is not a tool name or pattern (a-z, A-Z, 0-9, _, - and *)"),
            );
            continue;
        }
        if entry.contains('*') {
            continue;
        }
        let declared = tools.contains_key(entry)
            || entry
                .split_once(SERVER_TOOL_SEPARATOR)
                .is_some_and(|(server, tool)| servers.contains_key(server) && !tool.is_empty());
        if !declared {
            let candidates = tools.keys().map(String::as_str);
            let close = crate::profile::closest(entry, candidates);
            c.problem(
                p.tools.span(),
                format!(
                    "profile {pname}: no tool named {entry:?} in this policy{}",
                    if close.is_empty() {
                        " (a server's tools are SERVER__TOOL, or SERVER__* for all of them)".to_string()
                    } else {
                        format!("; did you mean {}?", close.join(", "))
                    }
                ),
            );
        }
    }
}

/// Checks a profile's `tiers` and adds to `profile` each that names a tool it
/// offers and is no less strict than the tool's own tier.
fn profile_tiers(
    c: &mut Checker<'_>,
    p: &crate::schema::RawProfile,
    profile: &mut Profile,
    tools: &BTreeMap<String, ToolSpec>,
    servers: &BTreeMap<String, ServerSpec>,
) {
    let pname = profile.name.clone();
    for (tool, tier) in &p.tiers {
        let (tool_name, tier_value) = (tool.get_ref(), *tier.get_ref());
        if !profile.admits(tool_name) {
            c.problem(
                tool.span(),
                format!(
                    "profile {pname}: tiers.{tool_name} names a tool the profile does not offer; add it to \
                     `tools` or remove the tier"
                ),
            );
            continue;
        }
        let base = tools.get(tool_name).map(|t| (t.tier, t.location.as_str())).or_else(|| {
            let (server, _) = tool_name.split_once(SERVER_TOOL_SEPARATOR)?;
            servers.get(server).map(|s| (s.tier, s.location.as_str()))
        });
        match base {
            None => {
                let close = crate::profile::closest(tool_name, tools.keys().map(String::as_str));
                c.problem(
                    tool.span(),
                    format!(
                        "profile {pname}: tiers.{tool_name}: no such tool in this policy{}",
                        if close.is_empty() { String::new() } else { format!("; did you mean {}?", close.join(", ")) }
                    ),
                );
            }
            Some((base, at)) if tier_value < base => c.problem(
                tier.span(),
                format!(
                    "profile {pname}: tiers.{tool_name} = \"{tier_value}\" would relax the tool's tier \
                     \"{base}\" ({at}); a profile may only make a tool stricter (auto < ask < confirm < deny)"
                ),
            ),
            Some(_) => {
                profile.tiers.insert(tool_name.clone(), (tier_value, c.location(tier.span())));
            }
        }
    }
}

/// Server names: 1-32 characters of a-z, 0-9 and `-`, so that `NAME__TOOL` splits one way.
fn valid_server_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 32
        && n.starts_with(|c: char| c.is_ascii_lowercase())
        && n.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// How much CPU time a server process may use before it is killed (and restarted
/// by the next call), unless `limits.cpu` says otherwise.
const DEFAULT_SERVER_CPU: std::time::Duration = std::time::Duration::from_secs(3600);

/// Checks `[servers.NAME]`: a process-tool entry without arguments.
fn compile_server(
    c: &mut Checker<'_>,
    name: &Spanned<String>,
    spanned: &Spanned<RawTool>,
    plugins: &BTreeMap<String, PluginSpec>,
    defaults: &Limits,
    ctx: &Context,
) -> Option<ServerSpec> {
    let (name_span, name) = (name.span(), name.get_ref());
    let t = spanned.get_ref();
    let before = c.problems.len();
    if !valid_server_name(name) {
        c.problem(
            name_span,
            format!("server {name:?}: names are 1-32 characters of a-z, 0-9 and -, starting with a letter"),
        );
    }
    let refused = [
        ("plugin", t.plugin.as_ref().map(Spanned::span)),
        ("args", t.args.as_ref().map(Spanned::span)),
        ("input_schema", t.input_schema.as_ref().map(Spanned::span)),
        ("description", t.description.as_ref().map(Spanned::span)),
        ("rule", t.rule.first().map(Spanned::span)),
        ("cache", t.cache.as_ref().map(Spanned::span)),
        ("background", t.background.as_ref().map(Spanned::span)),
    ];
    for (key, span) in refused {
        if let Some(span) = span {
            c.problem(
                span,
                format!(
                    "server {name}: `{key}` does not apply to a server (its tools come from the server; \
                     set tiers and rules per tool in [tools.\"{name}{SERVER_TOOL_SEPARATOR}TOOL\"])"
                ),
            );
        }
    }
    if t.exec.is_none() {
        c.problem(
            spanned.span(),
            format!("server {name}: needs `exec = [\"/path/to/program\", …]`, the command that starts the server"),
        );
        return None;
    }
    let label = format!("server {name}");
    let spec = compile_tool(c, &label, spanned.span(), t, Scope { plugins, defaults, default_tier: Tier::Ask, ctx });
    // The tool checks say "tool NAME:"; here the subject is the server.
    for p in &mut c.problems[before..] {
        if let Some(rest) = p.message.strip_prefix("tool server ") {
            p.message = format!("server {rest}");
        }
    }
    let spec = spec?;
    let Runner::Process(exec) = spec.runner else { return None };
    if !exec.params.is_empty() {
        c.problem(
            t.exec.as_ref().map_or(spanned.span(), Spanned::span),
            format!(
                "server {name}: exec uses {{{}}}, but a server is started once, not per call: only {{workspace}}, \
                 {{home}}, {{cache}} and {{tmp}} apply",
                exec.params.join("}, {")
            ),
        );
    }
    let mut limits = spec.limits;
    if t.limits.cpu.is_none() {
        limits.cpu = DEFAULT_SERVER_CPU;
    }
    if c.problems.len() > before {
        return None;
    }
    Some(ServerSpec { name: name.clone(), exec, tier: spec.tier, grants: spec.grants, limits, location: spec.location })
}

/// Checks `[tools."SERVER__TOOL"]`: a tier, rules or a description for one tool
/// of a server. Its walls are the server's.
fn compile_server_tool(
    c: &mut Checker<'_>,
    server: &ServerSpec,
    tool: &str,
    span: Range<usize>,
    t: &RawTool,
) -> Option<ToolSpec> {
    let full = format!("{}{SERVER_TOOL_SEPARATOR}{tool}", server.name);
    let before = c.problems.len();
    if tool.is_empty() || tool.len() > 64 {
        c.problem(span.clone(), format!("tool {full:?}: the server's tool name must be 1-64 characters"));
    }
    let l = &t.limits;
    let refused = [
        ("plugin", t.plugin.is_some()),
        ("exec", t.exec.is_some()),
        ("args", t.args.is_some()),
        ("cwd", t.cwd.is_some()),
        ("input_schema", t.input_schema.is_some()),
        ("fs", !t.fs.read.is_empty() || !t.fs.write.is_empty()),
        ("net", !t.net.connect.is_empty()),
        ("env", !t.env.pass.is_empty() || !t.env.set.is_empty()),
        ("cache", t.cache.is_some()),
        (
            "limits",
            l.memory.is_some()
                || l.timeout.is_some()
                || l.max_output.is_some()
                || l.cpu.is_some()
                || l.processes.is_some()
                || l.open_files.is_some()
                || l.file_size.is_some()
                || l.tmp_size.is_some()
                || l.tmp_files.is_some(),
        ),
    ];
    for (key, set) in refused {
        if set {
            c.problem(
                span.clone(),
                format!(
                    "tool {full}: `{key}` cannot be set per tool of a server: the server runs in one sandbox; \
                     set it in [servers.{}] ({})",
                    server.name, server.location
                ),
            );
        }
    }
    let rules = compile_rules(c, &full, &t.rule);
    if c.problems.len() > before {
        return None;
    }
    let mut spec = server.tool_spec(tool);
    spec.tier = t.tier.unwrap_or(server.tier);
    spec.rules = rules;
    spec.description = t.description.as_ref().map(|d| d.get_ref().clone());
    spec.location = c.location(span);
    spec.background = t.background.as_ref().is_some_and(|b| *b.get_ref());
    Some(spec)
}

fn valid_tool_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 64
        && !n.contains("__")
        && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// What a tool is compiled against besides its own table.
#[derive(Clone, Copy)]
struct Scope<'a> {
    /// The policy's plugins, by name.
    plugins: &'a BTreeMap<String, PluginSpec>,
    /// `[defaults]`' limits.
    defaults: &'a Limits,
    /// The tier of a tool that names none.
    default_tier: Tier,
    /// The placeholders' values.
    ctx: &'a Context,
}

/// Checks one tool's table (or a server's, named by `name`) against `scope`.
fn compile_tool(
    c: &mut Checker<'_>,
    name: &str,
    span: Range<usize>,
    t: &RawTool,
    scope: Scope<'_>,
) -> Option<ToolSpec> {
    let Scope { plugins, defaults, default_tier, ctx } = scope;
    let runner = compile_runner(c, name, t, plugins, ctx)?;
    let process = matches!(runner, Runner::Process(_));

    let limits = tool_limits(c, name, &t.limits, defaults, process);
    let (paths, system) = compile_paths(c, name, t, process, ctx);

    let allow_private = compile_allow_private(c, name, t);
    let unix = compile_unix(c, name, t, &runner, ctx);
    let net = compile_connect(c, name, t);

    let env_pass = compile_env_pass(c, name, t);
    let env_set = compile_env_set(c, name, t, ctx);

    let sysv_ipc = process_flag(c, name, "sysv_ipc", &t.sysv_ipc, process);
    let inotify = process_flag(c, name, "inotify", &t.inotify, process);
    let git_init = process_flag(c, name, "fs.git_init", &t.fs.git_init, process);
    check_git_init(c, name, t, &paths);

    let (deny, unprotect) = compile_deny(c, name, &t.fs, &paths, ctx);

    let rules = compile_rules(c, name, &t.rule);
    let tier = t.tier.unwrap_or(default_tier);
    let cache = t.cache.as_ref().and_then(|d| compile_cache(c, name, d, tier, &paths, &net, sysv_ipc));
    let background = compile_background(c, name, t);

    Some(ToolSpec {
        name: name.to_string(),
        runner,
        description: t.description.as_ref().map(|d| d.get_ref().clone()),
        tier,
        grants: Grants {
            paths,
            net,
            unix,
            allow_private,
            env_pass,
            env_set,
            sysv_ipc,
            inotify,
            system,
            deny,
            unprotect,
            git_init,
        },
        limits,
        rules,
        location: c.location(span),
        cache,
        hidden_by: None,
        background,
    })
}

/// What runs the tool: a process (`exec`), a component (`plugin`), or nothing
/// (walls only); `None` when the table names both.
fn compile_runner(
    c: &mut Checker<'_>,
    name: &str,
    t: &RawTool,
    plugins: &BTreeMap<String, PluginSpec>,
    ctx: &Context,
) -> Option<Runner> {
    let runner = match (&t.exec, &t.plugin) {
        (Some(_), Some(plugin)) => {
            c.problem(
                plugin.span(),
                format!("tool {name}: has both `plugin` and `exec`; a tool is a component or a process, not both"),
            );
            return None;
        }
        // Neither: walls for `warden run --tool NAME -- CMD`, which agents cannot call.
        (None, None) => walls_only_runner(c, name, t, ctx)?,
        (None, Some(plugin)) if plugins.get(plugin.get_ref()).is_some_and(|p| p.kind == PluginKind::Command) => {
            Runner::Command(compile_command(c, name, plugin.get_ref(), t, ctx)?)
        }
        (None, Some(plugin)) => plugin_runner(c, name, plugin, t, plugins),
        (Some(exec), None) => {
            if let Some(args) = &t.args {
                c.problem(
                    args.span(),
                    format!("tool {name}: `args` is for command components; put arguments in `exec`"),
                );
            }
            Runner::Process(compile_exec(c, name, exec, t, ctx)?)
        }
    };
    Some(runner)
}

/// A tool without `exec` or `plugin`: refuses the keys that need a program.
fn walls_only_runner(c: &mut Checker<'_>, name: &str, t: &RawTool, ctx: &Context) -> Option<Runner> {
    for (key, value) in [
        ("args", t.args.as_ref().map(Spanned::span)),
        ("input_schema", t.input_schema.as_ref().map(Spanned::span)),
        ("cache", t.cache.as_ref().map(Spanned::span)),
        ("background", t.background.as_ref().map(Spanned::span)),
    ] {
        if let Some(span) = value {
            c.problem(
                span,
                format!(
                    "tool {name}: `{key}` needs a program; a tool without `exec` or `plugin` only lends its \
                     walls to `warden run --tool {name} -- CMD`"
                ),
            );
        }
    }
    let cwd = compile_cwd(c, name, t, ctx)?;
    Some(Runner::Process(ExecSpec { argv: Vec::new(), params: Vec::new(), cwd, input_schema: None }))
}

/// A tool of a `kind = "tool"` plugin: the plugin must be declared, and the
/// process-only keys are refused.
fn plugin_runner(
    c: &mut Checker<'_>,
    name: &str,
    plugin: &Spanned<String>,
    t: &RawTool,
    plugins: &BTreeMap<String, PluginSpec>,
) -> Runner {
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
    for (key, value) in
        [("cwd", t.cwd.as_ref().map(Spanned::span)), ("input_schema", t.input_schema.as_ref().map(Spanned::span))]
    {
        if let Some(span) = value {
            c.problem(span, format!("tool {name}: `{key}` applies only to process tools (`exec`)"));
        }
    }
    if let Some(args) = &t.args {
        c.problem(
            args.span(),
            format!(
                "tool {name}: `args` applies only to tools of a kind = \"command\" plugin; plugin {} \
                 describes its own tools",
                plugin.get_ref()
            ),
        );
    }
    Runner::Plugin(plugin.get_ref().clone())
}

/// `fs.read` and `fs.write`, with `{system}` expanded and a path granted twice
/// merged into one grant; the flag says whether `{system}` was granted.
fn compile_paths(c: &mut Checker<'_>, name: &str, t: &RawTool, process: bool, ctx: &Context) -> (Vec<PathGrant>, bool) {
    let mut paths: Vec<PathGrant> = Vec::new();
    let mut system = false;
    for (list, write) in [(&t.fs.read, false), (&t.fs.write, true)] {
        for entry in list {
            let expanded: Vec<(GrantPath, bool)> = if entry.get_ref().trim() == "{system}" {
                system = process;
                if !process {
                    c.problem(
                        entry.span(),
                        format!(
                            "tool {name}: {{system}} grants what programs need to run and applies only to process tools"
                        ),
                    );
                    continue;
                }
                let read = SYSTEM_READ.iter().map(|p| (GrantPath::Fixed(p.into()), write));
                read.chain(SYSTEM_WRITE.iter().map(|p| (GrantPath::Fixed(p.into()), true))).collect()
            } else {
                match expand_path(c, name, entry, ctx) {
                    Some(path) => vec![(path, write)],
                    None => continue,
                }
            };
            for (path, write) in expanded {
                if let Some(existing) = paths.iter_mut().find(|g| g.path == path) {
                    existing.write |= write;
                } else {
                    paths.push(PathGrant { path, write });
                }
            }
        }
    }
    (paths, system)
}

/// `net.allow_private`, refused (as false) when the tool has no `net.connect`.
fn compile_allow_private(c: &mut Checker<'_>, name: &str, t: &RawTool) -> bool {
    match &t.net.allow_private {
        Some(v) if t.net.connect.is_empty() && *v.get_ref() => {
            c.problem(v.span(), format!("tool {name}: net.allow_private = true without net.connect grants nothing"));
            false
        }
        Some(v) => *v.get_ref(),
        None => false,
    }
}

/// `net.unix`: host sockets, for process tools and servers only.
fn compile_unix(c: &mut Checker<'_>, name: &str, t: &RawTool, runner: &Runner, ctx: &Context) -> Vec<PathBuf> {
    let mut unix = Vec::new();
    for entry in &t.net.unix {
        if !matches!(runner, Runner::Process(_) | Runner::Server(_)) {
            c.problem(
                entry.span(),
                format!("tool {name}: net.unix reaches a host socket from a process tool or server; remove it here"),
            );
            continue;
        }
        match expand_path(c, name, entry, ctx) {
            Some(GrantPath::Fixed(p)) => unix.push(p),
            Some(GrantPath::Tmp(_)) => c.problem(
                entry.span(),
                format!("tool {name}: net.unix {:?}: the call's own sockets in {{tmp}} need no grant", entry.get_ref()),
            ),
            None => {}
        }
    }
    unix
}

/// `net.connect`: each entry a host and port.
fn compile_connect(c: &mut Checker<'_>, name: &str, t: &RawTool) -> Vec<NetGrant> {
    let mut net = Vec::new();
    for entry in &t.net.connect {
        match parse_host_port(entry.get_ref()) {
            Ok(g) => net.push(g),
            Err(msg) => c.problem(entry.span(), format!("tool {name}: net.connect {:?}: {msg}", entry.get_ref())),
        }
    }
    net
}

/// `env.pass`: the names of variables passed through.
fn compile_env_pass(c: &mut Checker<'_>, name: &str, t: &RawTool) -> Vec<String> {
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
    env_pass
}

/// `env.set`: variables set, their values' placeholders expanded.
fn compile_env_set(c: &mut Checker<'_>, name: &str, t: &RawTool, ctx: &Context) -> BTreeMap<String, String> {
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
    env_set
}

/// A flag that applies to process tools only (`sysv_ipc`, `inotify`,
/// `fs.git_init`): refused (as false) on any other tool.
fn process_flag(c: &mut Checker<'_>, name: &str, key: &str, v: &Option<Spanned<bool>>, process: bool) -> bool {
    match v {
        Some(v) if !process => {
            c.problem(v.span(), format!("tool {name}: {key} applies to process tools and [servers] only"));
            false
        }
        Some(v) => *v.get_ref(),
        None => false,
    }
}

/// `fs.git_init = true` needs a write grant to create repositories in.
fn check_git_init(c: &mut Checker<'_>, name: &str, t: &RawTool, paths: &[PathGrant]) {
    if let Some(v) = t.fs.git_init.as_ref().filter(|v| *v.get_ref())
        && !paths.iter().any(|p| p.write)
    {
        c.problem(
            v.span(),
            format!("tool {name}: fs.git_init = true needs an fs.write grant to create repositories in"),
        );
    }
}

/// `background = true`, refused alongside `cache`.
fn compile_background(c: &mut Checker<'_>, name: &str, t: &RawTool) -> bool {
    let background = t.background.as_ref().filter(|b| *b.get_ref());
    if let (Some(b), Some(_)) = (background, &t.cache) {
        c.problem(
            b.span(),
            format!(
                "tool {name}: `background = true` and `cache` do not go together (a cached answer is a result, \
                 not a job handle); remove one"
            ),
        );
    }
    background.is_some()
}

/// The longest `cache` a tool may have.
const MAX_CACHE: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// Checks `cache = "…"`: only a tool that changes nothing and reaches no
/// network, at tier `auto`, may have its results served again.
fn compile_cache(
    c: &mut Checker<'_>,
    name: &str,
    d: &Spanned<crate::units::PolicyDuration>,
    tier: Tier,
    paths: &[PathGrant],
    net: &[NetGrant],
    sysv_ipc: bool,
) -> Option<std::time::Duration> {
    let ttl = d.get_ref().0;
    let why = if ttl.is_zero() || ttl > MAX_CACHE {
        Some(format!("must be more than 0s and at most {}", humantime::format_duration(MAX_CACHE)))
    } else if tier != Tier::Auto {
        Some(format!(
            "applies only to tools of tier \"auto\" (this one is \"{tier}\"): a cached answer would skip the approval"
        ))
    } else if let Some(w) = crate::lasting_write(paths) {
        Some(format!(
            "applies only to read-only tools, and this one may write {} (fs.write): a call that changes \
             something must run every time",
            w.path
        ))
    } else if sysv_ipc {
        Some(
            "does not apply with sysv_ipc = true: shared memory and message queues change without any file \
             changing"
                .to_string(),
        )
    } else {
        net.first().map(|n| {
            format!(
                "applies only to tools without network grants, and this one may connect to {n} (net.connect): \
                 what it fetches can change without warden seeing it"
            )
        })
    };
    match why {
        Some(why) => {
            c.problem(d.span(), format!("tool {name}: cache {why}; remove `cache` or change the tool"));
            None
        }
        None => Some(ttl),
    }
}

/// Checks `fs.deny_read`, `fs.deny_write` and `fs.unprotect`: each must lie
/// inside a grant of the tool (`fs.unprotect`: a write grant), since an entry
/// outside every grant would change nothing and must not look as if it did.
fn compile_deny(
    c: &mut Checker<'_>,
    name: &str,
    fs: &crate::schema::RawFs,
    grants: &[PathGrant],
    ctx: &Context,
) -> (Vec<DenyEntry>, Vec<PathBuf>) {
    /// The part of a pattern before its first glob component.
    fn fixed_prefix(p: &GrantPath) -> GrantPath {
        match p {
            GrantPath::Fixed(path) => GrantPath::Fixed(
                path.components().take_while(|c| !c.as_os_str().to_string_lossy().contains(['*', '?'])).collect(),
            ),
            GrantPath::Tmp(rel) => GrantPath::Tmp(
                rel.components().take_while(|c| !c.as_os_str().to_string_lossy().contains(['*', '?'])).collect(),
            ),
        }
    }
    fn under(inner: &GrantPath, outer: &GrantPath) -> bool {
        match (inner, outer) {
            (GrantPath::Fixed(i), GrantPath::Fixed(o)) => i.starts_with(o),
            (GrantPath::Tmp(i), GrantPath::Tmp(o)) => i.starts_with(o),
            _ => false,
        }
    }
    let mut deny = Vec::new();
    for (list, read, key) in [(&fs.deny_read, true, "fs.deny_read"), (&fs.deny_write, false, "fs.deny_write")] {
        for entry in list {
            if entry.get_ref().contains("{system}") {
                c.problem(entry.span(), format!("tool {name}: {key}: {{system}} is a grant; name the paths to deny"));
                continue;
            }
            let Some(path) = expand_pattern(c, name, key, entry, ctx) else { continue };
            let prefix = fixed_prefix(&path);
            // Inside a grant, or a pattern whose fixed part contains one (`/**/.env`).
            let reachable =
                grants.iter().any(|g| (read || g.write) && (under(&prefix, &g.path) || under(&g.path, &prefix)));
            if !reachable {
                let what = if read { "fs.read or fs.write grant" } else { "fs.write grant" };
                c.problem(
                    entry.span(),
                    format!(
                        "tool {name}: {key} {:?} is inside no {what} of this tool, so it changes nothing; \
                         remove it, or correct the path",
                        entry.get_ref()
                    ),
                );
                continue;
            }
            deny.push(DenyEntry { path, read });
        }
    }
    let mut unprotect = Vec::new();
    for entry in &fs.unprotect {
        let Some(path) = expand_pattern(c, name, "fs.unprotect", entry, ctx) else { continue };
        match &path {
            GrantPath::Fixed(p) if !crate::glob::is_glob(&p.to_string_lossy()) => {
                if grants.iter().any(|g| g.write && under(&path, &g.path)) {
                    unprotect.push(p.clone());
                } else {
                    c.problem(
                        entry.span(),
                        format!(
                            "tool {name}: fs.unprotect {:?} is inside no fs.write grant of this tool, where \
                             nothing is protected; remove it",
                            entry.get_ref()
                        ),
                    );
                }
            }
            _ => c.problem(
                entry.span(),
                format!(
                    "tool {name}: fs.unprotect {:?}: name one protected path (no globs, not under {{tmp}}), \
                     for example \"{{workspace}}/.vscode\"",
                    entry.get_ref()
                ),
            ),
        }
    }
    (deny, unprotect)
}

/// Expands one `fs.deny_*`/`fs.unprotect` entry: a grant path in which `*`, `?`
/// and `**` components may appear.
fn expand_pattern(
    c: &mut Checker<'_>,
    name: &str,
    key: &str,
    entry: &Spanned<String>,
    ctx: &Context,
) -> Option<GrantPath> {
    let raw = entry.get_ref();
    if raw.contains(['[', ']', '{']) && !raw.starts_with('{') || raw.matches('{').count() > 1 {
        c.problem(
            entry.span(),
            format!(
                "tool {name}: {key} {raw:?}: one placeholder, at the start; `*`, `?` and `**` are the only wildcards"
            ),
        );
        return None;
    }
    if raw.split('/').any(|part| part.contains("**") && part != "**") {
        c.problem(
            entry.span(),
            format!("tool {name}: {key} {raw:?}: `**` must be a whole path component (`{{workspace}}/**/*.pem`)"),
        );
        return None;
    }
    let before = c.problems.len();
    let path = expand_path(c, name, entry, ctx);
    for p in &mut c.problems[before..] {
        p.message = p.message.replacen("path ", &format!("{key} "), 1);
    }
    path
}

/// Checks `[[tools.NAME.rule]]` entries.
fn compile_rules(c: &mut Checker<'_>, name: &str, raw_rules: &[Spanned<RawRule>]) -> Vec<Rule> {
    let mut rules = Vec::new();
    for r in raw_rules {
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

    rules
}

fn tool_limits(c: &mut Checker<'_>, name: &str, l: &RawLimits, defaults: &Limits, process: bool) -> Limits {
    if !process {
        let process_only: [(&str, Option<Range<usize>>); 6] = [
            ("cpu", l.cpu.as_ref().map(Spanned::span)),
            ("processes", l.processes.as_ref().map(Spanned::span)),
            ("open_files", l.open_files.as_ref().map(Spanned::span)),
            ("file_size", l.file_size.as_ref().map(Spanned::span)),
            ("tmp_size", l.tmp_size.as_ref().map(Spanned::span)),
            ("tmp_files", l.tmp_files.as_ref().map(Spanned::span)),
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
    }
    let timeout = l.timeout.as_ref().map_or(defaults.timeout, |d| d.get_ref().0);
    let limits = Limits {
        timeout,
        memory: l.memory.as_ref().map_or(defaults.memory, |s| s.get_ref().0),
        max_output: l.max_output.as_ref().map_or(defaults.max_output, |s| s.get_ref().0),
        cpu: l.cpu.as_ref().map_or(timeout, |d| d.get_ref().0),
        processes: l.processes.as_ref().map_or(defaults.processes, |p| *p.get_ref()),
        open_files: l.open_files.as_ref().map_or(defaults.open_files, |p| *p.get_ref()),
        file_size: l.file_size.as_ref().map_or(defaults.file_size, |p| p.get_ref().0),
        tmp_size: l.tmp_size.as_ref().map_or(defaults.tmp_size, |p| p.get_ref().0),
        tmp_files: l.tmp_files.as_ref().map_or(defaults.tmp_files, |p| *p.get_ref()),
    };
    if !process && limits.memory > MAX_COMPONENT_MEMORY {
        c.problem(0..0, format!("tool {name}: limits.memory is above 4GiB, more than a component can address"));
    }
    for (key, value, min) in [
        ("processes", l.processes.as_ref(), 1u32),
        ("open_files", l.open_files.as_ref(), 8),
        ("tmp_files", l.tmp_files.as_ref(), 1),
    ] {
        if let Some(v) = value.filter(|v| *v.get_ref() < min) {
            c.problem(v.span(), format!("tool {name}: limits.{key} must be at least {min}"));
        }
    }
    limits
}

/// Checks `exec` and its companions (`cwd`, `input_schema`).
fn compile_exec(
    c: &mut Checker<'_>,
    name: &str,
    exec: &Spanned<Vec<String>>,
    t: &RawTool,
    ctx: &Context,
) -> Option<ExecSpec> {
    let argv_raw = exec.get_ref();
    let before = c.problems.len();
    if argv_raw.is_empty() || argv_raw.len() > MAX_ARGV {
        c.problem(exec.span(), format!("tool {name}: exec needs 1 to {MAX_ARGV} elements, the program first"));
        return None;
    }
    if !argv_raw[0].starts_with('/') && !argv_raw[0].starts_with('{') {
        c.problem(
            exec.span(),
            format!(
                "tool {name}: exec[0] = {:?} must be an absolute path (no PATH search happens), for example \"/usr/bin/{}\"",
                argv_raw[0], argv_raw[0]
            ),
        );
    }
    let (argv, params) = compile_template(c, name, "exec", exec, ctx, true);
    let cwd = compile_cwd(c, name, t, ctx)?;
    let input_schema = compile_input_schema(c, name, t);
    if c.problems.len() > before {
        return None;
    }
    Some(ExecSpec { argv, params, cwd, input_schema })
}

/// A process tool's working directory: `cwd` expanded, or the workspace.
fn compile_cwd(c: &mut Checker<'_>, name: &str, t: &RawTool, ctx: &Context) -> Option<PathBuf> {
    match &t.cwd {
        None => Some(ctx.workspace.clone()),
        Some(cwd) => match expand_path(c, name, cwd, ctx) {
            Some(GrantPath::Fixed(p)) => Some(p),
            Some(GrantPath::Tmp(_)) => {
                c.problem(cwd.span(), format!("tool {name}: cwd cannot be under {{tmp}}"));
                None
            }
            None => None,
        },
    }
}

/// Checks the `args` template of a tool of a `kind = "command"` plugin.
fn compile_command(c: &mut Checker<'_>, name: &str, plugin: &str, t: &RawTool, ctx: &Context) -> Option<CommandSpec> {
    let before = c.problems.len();
    let (args, params) = match &t.args {
        Some(args) if args.get_ref().len() > MAX_ARGV => {
            c.problem(args.span(), format!("tool {name}: args has more than {MAX_ARGV} elements"));
            return None;
        }
        Some(args) => compile_template(c, name, "args", args, ctx, false),
        None => (Vec::new(), Vec::new()),
    };
    if let Some(args) = &t.args
        && args.get_ref().iter().any(|a| a.contains("{tmp}"))
    {
        c.problem(args.span(), format!("tool {name}: {{tmp}} is not available to components"));
    }
    if let Some(cwd) = &t.cwd {
        c.problem(
            cwd.span(),
            format!("tool {name}: `cwd` applies only to process tools; a command component sees only its preopens"),
        );
    }
    let input_schema = compile_input_schema(c, name, t);
    if c.problems.len() > before {
        return None;
    }
    Some(CommandSpec { plugin: plugin.to_string(), args, params, input_schema })
}

/// Expands the placeholders of an argument template (`exec` or `args`): `{workspace}`,
/// `{home}` and `{cache}` now, `{tmp}` per call, and `{name}` from the call's
/// string argument `name`. Returns the template and its parameter names.
fn compile_template(
    c: &mut Checker<'_>,
    name: &str,
    key: &str,
    template: &Spanned<Vec<String>>,
    ctx: &Context,
    program_first: bool,
) -> (Vec<String>, Vec<String>) {
    let mut argv = Vec::new();
    let mut params: Vec<String> = Vec::new();
    for (i, element) in template.get_ref().iter().enumerate() {
        if element.contains('\0') {
            c.problem(template.span(), format!("tool {name}: {key}[{i}] contains a NUL byte"));
            continue;
        }
        let mut out = String::new();
        let mut rest = element.as_str();
        while let Some(open) = rest.find('{') {
            out.push_str(&rest[..open]);
            let after = &rest[open + 1..];
            let ident = after.find('}').map(|close| &after[..close]).filter(|id| {
                id.chars().next().is_some_and(|ch| ch.is_ascii_alphabetic() || ch == '_')
                    && id.chars().all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
            });
            let Some(id) = ident else {
                // Not a placeholder (for example an awk program): kept as written.
                out.push('{');
                rest = after;
                continue;
            };
            match id {
                "workspace" => out.push_str(&ctx.workspace.to_string_lossy()),
                "home" => out.push_str(&ctx.home.to_string_lossy()),
                "cache" => out.push_str(&ctx.cache.to_string_lossy()),
                "tmp" => out.push_str("{tmp}"),
                "system" => c.problem(
                    template.span(),
                    format!("tool {name}: {key}[{i}]: {{system}} is a grant, not an argument"),
                ),
                param => {
                    if i == 0 && program_first {
                        c.problem(
                            template.span(),
                            format!("tool {name}: the program ({key}[0]) cannot come from an argument"),
                        );
                    }
                    if !params.iter().any(|p| p == param) {
                        params.push(param.to_string());
                    }
                    out.push('{');
                    out.push_str(param);
                    out.push('}');
                }
            }
            rest = &after[id.len() + 1..];
        }
        out.push_str(rest);
        argv.push(out);
    }
    (argv, params)
}

/// `input_schema`: a JSON Schema object, written as a TOML table or as JSON text.
fn compile_input_schema(c: &mut Checker<'_>, name: &str, t: &RawTool) -> Option<serde_json::Value> {
    let v = t.input_schema.as_ref()?;
    let json = match v.get_ref() {
        toml::Value::String(text) => serde_json::from_str(text).map_err(|e| e.to_string()),
        other => serde_json::to_value(other).map_err(|e| e.to_string()),
    };
    match json {
        Ok(schema) if schema.is_object() => Some(schema),
        Ok(_) => {
            c.problem(v.span(), format!("tool {name}: input_schema must be a JSON Schema object"));
            None
        }
        Err(e) => {
            c.problem(v.span(), format!("tool {name}: input_schema is not JSON: {e}"));
            None
        }
    }
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
pub fn expand_text(s: &str, ctx: &Context, keep_tmp: bool) -> Result<String, String> {
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
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    if host.is_empty() || host == "0.0.0.0" || host == "::" {
        return Err("name a host: unspecified addresses are not destinations".into());
    }
    if let Ok(ip) = host.parse::<std::net::IpAddr>() {
        if ip.is_unspecified() {
            return Err("name a host: unspecified addresses are not destinations".into());
        }
    } else if host != "*" {
        // A name, or `*.` before one: every label 1-63 letters, digits, `-` or `_`.
        let name = host.strip_prefix("*.").unwrap_or(&host);
        let bad_label = |l: &str| {
            l.is_empty()
                || l.len() > 63
                || l.starts_with('-')
                || !l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        };
        if name.len() > 253 || name.split('.').any(bad_label) {
            return Err(if host.contains('*') {
                "a wildcard may only be the first label (\"*.example.com:443\") or the whole host (\"*:443\")".into()
            } else {
                "not a host name or IP address".into()
            });
        }
    }
    let port: u16 = port.parse().map_err(|_| format!("bad port {port:?}"))?;
    if port == 0 {
        return Err("port 0 is not a destination".into());
    }
    Ok(NetGrant { host, port })
}

#[cfg(test)]
mod tests;
