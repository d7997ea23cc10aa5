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

use self::server::{compile_server, compile_server_tool};
use self::tool::{Scope, compile_tool};
pub(crate) use self::tool::{compile_rules, expand_pattern};

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
    // The trust store and OpenSSL's configuration, never /etc/ssl whole: its
    // private/ holds the host's TLS keys (readable by root and ssl-cert).
    "/etc/ssl/certs",
    "/etc/ssl/openssl.cnf",
    "/etc/ssl/cert.pem",
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

pub(crate) struct Checker<'a> {
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

impl<'a> Checker<'a> {
    /// A checker of `text`, named `origin` in messages.
    pub(crate) fn new(text: &'a str, origin: &'a str) -> Checker<'a> {
        Checker { text, origin, problems: Vec::new() }
    }

    pub(crate) fn has_problems(&self) -> bool {
        !self.problems.is_empty()
    }

    /// The problems found, in file order.
    pub(crate) fn into_error(mut self) -> PolicyError {
        self.problems.sort_by_key(|p| (p.line, p.column));
        PolicyError { problems: self.problems }
    }

    fn at(&self, span: Range<usize>) -> (usize, usize) {
        line_column(self.text, &span)
    }

    pub(crate) fn location(&self, span: Range<usize>) -> String {
        let (line, column) = self.at(span);
        format!("{}:{line}:{column}", self.origin)
    }

    pub(crate) fn problem(&mut self, span: Range<usize>, message: impl Into<String>) {
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

    let credentials = crate::credential::compile_credentials(&mut c, &raw.credentials, ctx);
    let mut servers = compile_servers(&mut c, &raw, &plugins, &defaults, ctx);
    for (name, spanned) in &raw.servers {
        if let Some(s) = servers.get_mut(name.get_ref()) {
            let spec = s.tool_spec("-");
            let names = &spanned.get_ref().credentials;
            let subject = format!("server {}", name.get_ref());
            s.grants.credentials =
                crate::credential::held(&mut c, &credentials, &subject, names, &spec, spanned.span());
        }
    }
    let mut tools =
        compile_tools(&mut c, &raw, &servers, Scope { plugins: &plugins, defaults: &defaults, default_tier, ctx });
    for (name, spanned) in &raw.tools {
        if let Some(t) = tools.get_mut(name.get_ref()) {
            let names = &spanned.get_ref().credentials;
            let subject = format!("tool {}", name.get_ref());
            let held = crate::credential::held(&mut c, &credentials, &subject, names, t, spanned.span());
            if !names.is_empty() {
                t.grants.credentials = held;
            }
        }
    }

    let specs = tools.values().map(|t| (format!("tool {}", t.name), &t.grants));
    let specs = specs.chain(servers.values().map(|s| (format!("server {}", s.name), &s.grants)));
    let holders: Vec<(String, &crate::Grants)> = specs.collect();
    crate::credential::check_sources(&mut c, &raw.credentials, &credentials, holders.clone());
    let audit = crate::audit::compile(&mut c, &raw.audit, dir);
    if let (Some(raw_otlp), Some(otlp)) = (&raw.audit.otlp, &audit.otlp) {
        crate::otlp::check_reach(&mut c, raw_otlp, otlp, &holders);
    }
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
        inbox: raw.defaults.inbox.unwrap_or(true),
        credentials,
        floors: Vec::new(),
        floor_notes: BTreeMap::new(),
        audit,
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
        let (signers, signature) = signers::plugin_signers(c, name, p, &source, dir);
        let location = c.location(span);
        plugins.insert(
            name.clone(),
            PluginSpec { name: name.clone(), source, kind, sha256, signers, signature, location },
        );
    }
    plugins
}

/// A plugin's `source`: `builtin:NAME` (one of [`BUILTIN_PLUGINS`]), `oci://HOST/REPO@sha256:…`
/// (by digest only) or a file relative to `dir`.
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
    } else if source.starts_with("oci://") {
        match crate::oci::OciRef::parse(source) {
            Ok(r) => PluginSource::Oci(r),
            Err(why) => {
                c.problem(p.source.span(), format!("plugin {name}: source of [plugins.{name}]: {why}"));
                PluginSource::File(PathBuf::new())
            }
        }
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
            // An unusable oci:// source already has its problem (and needs no sha256).
            if matches!(source, PluginSource::File(_)) && !p.source.get_ref().starts_with("oci://") {
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
            ("lasting approvals".to_string(), absolute(&dir.join(crate::APPROVALS_FILE))),
            ("lasting approvals' lock".to_string(), absolute(&dir.join(format!(".{}.lock", crate::APPROVALS_FILE)))),
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

fn valid_tool_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 64
        && !n.contains("__")
        && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Variables warden itself sets for components; a policy may not override them.
const RESERVED_ENV_PREFIX: &str = "WARDEN_";

pub(crate) fn valid_env_name(n: &str) -> bool {
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

pub(crate) fn expand_path(
    c: &mut Checker<'_>,
    tool: &str,
    entry: &Spanned<String>,
    ctx: &Context,
) -> Option<GrantPath> {
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

pub(crate) fn parse_host_port(s: &str) -> Result<NetGrant, String> {
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

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.line == 0 {
            write!(f, "{}: {}", self.file, self.message)
        } else {
            write!(f, "{}:{}:{}: {}", self.file, self.line, self.column, self.message)
        }
    }
}

impl std::fmt::Display for PolicyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, p) in self.problems.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "invalid policy: {p}")?;
        }
        Ok(())
    }
}

impl std::error::Error for PolicyError {}

mod server;
mod signers;
mod tool;

#[cfg(test)]
mod tests;
