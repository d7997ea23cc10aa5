//! Policy lint: grants that are wider than their author probably meant.
//!
//! The loader refuses what is wrong; the lint points at what is allowed but
//! risky. Each rule has a stable id, a severity and a security score (for SARIF),
//! and every finding points at the line and column of the key or value that
//! caused it. The lint reads the policy text itself, so it reports on a file the
//! loader refused too (`WL000` carries the loader's problems).

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};

use toml::Spanned;

use crate::poisoning::Poisoned;
use crate::poisoning::poisoning;
use crate::policy::compile::{expand_text, line_column};
use crate::policy::schema::{RawPolicy, RawTool};
use crate::policy::{Context, PolicyError, SandboxMode, Tier};

mod credentials;
mod provenance;
mod rules;
pub use self::rules::{LintRule, RULES, Severity, rule};

/// One finding.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Finding {
    /// The rule's id.
    pub rule: &'static str,
    /// The rule's severity.
    pub severity: Severity,
    /// What was found, naming the tool and the value.
    pub message: String,
    /// The policy file.
    pub file: String,
    /// 1-based line (0: unknown).
    pub line: usize,
    /// 1-based column (0: unknown).
    pub column: usize,
}

struct Linter<'a> {
    text: &'a str,
    origin: &'a str,
    findings: Vec<Finding>,
    /// What `Surroundings::hard_links` found under each directory, asked once per directory.
    hard_links: BTreeMap<PathBuf, Option<HardLinks>>,
    /// `[sandbox] mode = "best-effort"`: protections a host lacks are not enforced.
    best_effort: bool,
}

impl Linter<'_> {
    fn add(&mut self, id: &'static str, span: Range<usize>, message: String) {
        let (line, column) = line_column(self.text, &span);
        let r = rule(id);
        self.findings.push(Finding {
            rule: r.id,
            severity: r.severity,
            message,
            file: self.origin.to_string(),
            line,
            column,
        });
    }
}

/// Programs that run code given as an argument.
const INTERPRETERS: &[&str] = &[
    "sh", "bash", "dash", "zsh", "ksh", "fish", "busybox", "env", "python", "python3", "perl", "ruby", "node", "php",
    "lua", "xargs", "awk", "gawk",
];

const SECRET_MARKERS: &[&str] = &["TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "PRIVATE", "API_KEY"];

fn is_secret_name(name: &str) -> bool {
    let n = name.to_ascii_uppercase();
    n.starts_with("AWS_")
        || n.ends_with("_KEY")
        || n.ends_with("_TOKEN")
        || SECRET_MARKERS.iter().any(|m| n.contains(m))
}

/// Whether `path` is `/`, `home`, or an ancestor of `workspace` or `home`.
fn covers(path: &Path, target: &Path) -> bool {
    target.starts_with(path)
}

/// What the lint needs besides the policy text.
#[derive(Debug, Default)]
pub struct Surroundings {
    /// The loader's problems, when it refused the policy.
    pub refused: Option<PolicyError>,
    /// The plugins' descriptions of tools that have no policy description, by tool name.
    pub descriptions: BTreeMap<String, String>,
    /// Third-party definitions that address the model: by the
    /// owner's section (`plugins` or `servers`) and name, the tool and what was found.
    pub poisoned: Vec<(&'static str, String, String, Poisoned)>,
    /// warden's own files (the policy file, the audit log, the component cache), by what they are.
    pub own_files: Vec<(String, PathBuf)>,
    /// Looks for regular files under a granted directory that have a hard link
    /// outside it (`warden audit` passes [`crate::checkup::links::hard_links`]).
    pub hard_links: Option<fn(&Path) -> Option<HardLinks>>,
    /// Every tool the policy offers, servers' included (`None`: not known, so
    /// profiles' patterns are not judged).
    pub tool_names: Option<Vec<String>>,
    /// Why this host cannot give a call a network namespace, as probed by
    /// the caller (`warden audit`: [`warden_sandbox::namespaces::NsSupport::probe`]);
    /// `None` when it can or nobody asked. The lint itself touches no host.
    pub no_net_namespace: Option<String>,
    /// The interfaces each third-party plugin's component imports, by plugin
    /// name, as `warden audit` read them (absent: not known).
    pub plugin_imports: BTreeMap<String, Vec<String>>,
    /// The lasting approvals beside the policy: their file, its text, and each
    /// entry with why it can no longer apply (`None`: it applies).
    pub lasting: Option<LastingFile>,
}

/// The lasting approvals' file, its text, and each entry with why it can no longer apply.
pub type LastingFile = (PathBuf, String, Vec<(crate::approval::lasting::Entry, Option<String>)>);

/// Files under a directory with a hard link outside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HardLinks {
    /// How many were found.
    pub count: u64,
    /// The first one found.
    pub example: PathBuf,
    /// Whether the whole directory was looked at (the walk is bounded).
    pub complete: bool,
}

/// Lints the policy `text` (named `origin` in findings).
pub fn lint(text: &str, origin: &str, ctx: &Context, around: &Surroundings) -> Vec<Finding> {
    let mut l = Linter { text, origin, findings: Vec::new(), hard_links: BTreeMap::new(), best_effort: false };
    if let Some(err) = &around.refused {
        for p in &err.problems {
            let r = rule("WL000");
            l.findings.push(Finding {
                rule: r.id,
                severity: r.severity,
                message: p.message.clone(),
                file: p.file.clone(),
                line: p.line,
                column: p.column,
            });
        }
    }
    let raw: RawPolicy = match toml::from_str(text) {
        Ok(raw) => raw,
        Err(_) => return finish(l),
    };
    if let Some(mode) = &raw.sandbox.mode
        && *mode.get_ref() == SandboxMode::BestEffort
    {
        l.best_effort = true;
        l.add(
            "WL108",
            mode.span(),
            "[sandbox] mode = \"best-effort\": tools run without the layers this kernel lacks".into(),
        );
    }
    for (name, plugin) in &raw.plugins {
        let p = plugin.get_ref();
        if !p.source.get_ref().starts_with("builtin:") && p.sha256.is_none() {
            l.add("WL106", plugin.span(), format!("plugin {name}: source {:?} has no sha256", p.source.get_ref()));
        }
    }
    provenance::lint_plugins(&mut l, &raw, around);
    provenance::lint_lasting(&mut l, around);
    credentials::lint_credentials(&mut l, &raw, ctx);
    let default_tier = raw.defaults.tier.unwrap_or(Tier::Ask);
    for (name, tool) in &raw.tools {
        lint_tool(&mut l, name, tool, default_tier, ctx, around);
    }
    for (section, owner, tool, p) in &around.poisoned {
        let span = match *section {
            "servers" => raw.servers.iter().find(|(n, _)| n.get_ref() == owner).map(|(_, s)| s.span()),
            _ => raw.plugins.get(owner).map(|p| p.span()),
        };
        let Some(span) = span else { continue };
        let what = if p.in_description {
            format!("set [tools.\"{tool}\"] description = \"…\" to replace it, or deny the tool")
        } else {
            "deny the tool (tier = \"deny\"): a schema cannot be replaced in the policy".to_string()
        };
        let kind = if *section == "servers" { "server" } else { "plugin" };
        l.add(
            "WL111",
            span,
            format!("tool {tool}: {kind} {owner}'s definition: {}; it is refused until you {what}", p.why),
        );
    }
    if let Some(names) = &around.tool_names {
        for (profile, p) in &raw.profiles {
            let listed: Vec<&str> = match p.get_ref().tools.get_ref() {
                toml::Value::String(s) => vec![s.as_str()],
                toml::Value::Array(items) => items.iter().filter_map(toml::Value::as_str).collect(),
                _ => Vec::new(),
            };
            for pattern in listed {
                if !names.iter().any(|n| crate::policy::glob::matches(pattern, n)) {
                    l.add(
                        "WL118",
                        p.get_ref().tools.span(),
                        format!("profile {}: {pattern:?} matches no tool of this policy", profile.get_ref()),
                    );
                }
            }
        }
    }
    finish(l)
}

fn finish(mut l: Linter<'_>) -> Vec<Finding> {
    l.findings.sort_by(|a, b| (a.line, a.column, a.rule).cmp(&(b.line, b.column, b.rule)));
    l.findings
}

/// Lints one `[tools.NAME]` entry: each of its parts in turn.
fn lint_tool(
    l: &mut Linter<'_>,
    name: &Spanned<String>,
    tool: &Spanned<RawTool>,
    default_tier: Tier,
    ctx: &Context,
    around: &Surroundings,
) {
    let t = tool.get_ref();
    let name = name.get_ref();
    let tier = t.tier.unwrap_or(default_tier);
    let process = t.exec.is_some();
    lint_writes(l, name, t, ctx, around);
    lint_reads(l, name, t, ctx);
    lint_hard_links(l, name, t, ctx, around);
    lint_net(l, name, t, tier, process, around);
    if let Some(exec) = &t.exec {
        lint_exec(l, name, t, exec, tier);
    }
    lint_risky_keys(l, name, t);
    lint_limits(l, name, t);
    lint_shadowed(l, name, t);
    for entry in &t.net.unix {
        if let Some(daemon) = root_daemon(entry.get_ref()) {
            l.add("WL119", entry.span(), format!("tool {name}: net.unix {:?} is {daemon}'s socket", entry.get_ref()));
        }
    }
    lint_description(l, name, tool, around);
}

/// A grant's path with its placeholders expanded, when it is an absolute path
/// outside `{tmp}`.
fn expand_grant(entry: &Spanned<String>, ctx: &Context) -> Option<PathBuf> {
    let e = expand_text(entry.get_ref(), ctx, true).ok()?;
    if e.starts_with("{tmp}") {
        return None;
    }
    let p: PathBuf = Path::new(&e).components().collect();
    p.is_absolute().then_some(p)
}

/// `fs.write` over the whole file system, the home directory or a parent of
/// the workspace (WL101), or over warden's own files in best-effort mode (WL112).
fn lint_writes(l: &mut Linter<'_>, name: &str, t: &RawTool, ctx: &Context, around: &Surroundings) {
    for entry in &t.fs.write {
        if let Some(p) = expand_grant(entry, ctx)
            && (p == Path::new("/") || covers(&p, &ctx.home) || (covers(&p, &ctx.workspace) && p != ctx.workspace))
        {
            let what = if p == Path::new("/") {
                "the whole file system".to_string()
            } else if covers(&p, &ctx.home) {
                format!("the home directory {}", ctx.home.display())
            } else {
                format!("a parent of the workspace {}", ctx.workspace.display())
            };
            l.add("WL101", entry.span(), format!("tool {name}: fs.write {:?} covers {what}", entry.get_ref()));
        }
    }
    // Every call protects warden's own files inside its write grants (a read-only
    // bind in its namespace, a refusal in the WASI host); only best-effort mode
    // may run a process tool without that namespace.
    let best_effort = l.best_effort;
    for entry in t.fs.write.iter().filter(|_| best_effort) {
        let Some(p) = expand_grant(entry, ctx) else { continue };
        let hit: Vec<String> = around
            .own_files
            .iter()
            .filter(|(_, f)| covers(&p, f))
            .map(|(what, f)| format!("{what} {}", f.display()))
            .collect();
        if !hit.is_empty() {
            l.add(
                "WL112",
                entry.span(),
                format!("tool {name}: fs.write {:?} covers warden's {}", entry.get_ref(), hit.join(" and ")),
            );
        }
    }
}

/// Grants that make the home directory readable (WL102), or that cover where
/// host daemons keep their sockets (WL120).
fn lint_reads(l: &mut Linter<'_>, name: &str, t: &RawTool, ctx: &Context) {
    for entry in t.fs.read.iter().chain(&t.fs.write) {
        if let Some(p) = expand_grant(entry, ctx)
            && covers(&p, &ctx.home)
        {
            l.add(
                "WL102",
                entry.span(),
                format!("tool {name}: {:?} makes the home directory {} readable", entry.get_ref(), ctx.home.display()),
            );
        }
    }
    for entry in t.fs.read.iter().chain(&t.fs.write) {
        let Some(p) = expand_grant(entry, ctx) else { continue };
        if let Some(dir) = ["/run", "/var/run", "/run/user", "/tmp"].into_iter().find(|d| covers(&p, Path::new(d))) {
            l.add(
                "WL120",
                entry.span(),
                format!("tool {name}: {:?} covers {dir}, where host daemons keep their sockets", entry.get_ref()),
            );
        }
    }
}

/// Grants holding files with a hard link outside them (WL113), when the
/// caller scans for them.
fn lint_hard_links(l: &mut Linter<'_>, name: &str, t: &RawTool, ctx: &Context, around: &Surroundings) {
    let Some(scan) = around.hard_links else { return };
    let mut seen = Vec::new();
    for entry in t.fs.read.iter().chain(&t.fs.write) {
        // `{system}` holds the distribution's own hard links (one program under several names).
        if entry.get_ref().contains("{system}") {
            continue;
        }
        let Some(p) = expand_grant(entry, ctx) else { continue };
        if seen.contains(&p) {
            continue;
        }
        let found = l.hard_links.entry(p.clone()).or_insert_with(|| scan(&p)).clone();
        if let Some(h) = found {
            l.add(
                "WL113",
                entry.span(),
                format!(
                    "tool {name}: {:?} holds {}{} file(s) with a hard link outside it, for example {}: the tool \
                     reaches each with this grant's rights, whatever the policy says of its other paths",
                    entry.get_ref(),
                    if h.complete { "" } else { "at least " },
                    h.count,
                    h.example.display()
                ),
            );
        }
        seen.push(p);
    }
}

/// `net.connect` without a network namespace to enforce it (WL103), or wider
/// than one domain at tier auto (WL117).
fn lint_net(l: &mut Linter<'_>, name: &str, t: &RawTool, tier: Tier, process: bool, around: &Surroundings) {
    if process
        && let Some(first) = t.net.connect.first()
        && let Some(why) = &around.no_net_namespace
    {
        let ports: Vec<&str> = t.net.connect.iter().filter_map(|e| e.get_ref().rsplit(':').next()).collect();
        l.add(
            "WL103",
            first.span(),
            format!(
                "tool {name}: no network namespace on this host ({why}): unavailable in enforce mode, and in \
                 best-effort mode it reaches every host on port(s) {}",
                ports.join(", ")
            ),
        );
    }
    // A tool a person approves call by call (`ask`, `confirm`) may be wide on purpose.
    for entry in t.net.connect.iter().filter(|_| tier == Tier::Auto) {
        let host = entry.get_ref().rsplit_once(':').map(|(h, _)| h).unwrap_or("");
        if let Some(why) = wider_than_a_domain(host) {
            l.add("WL117", entry.span(), format!("tool {name}: net.connect {:?} {why}", entry.get_ref()));
        }
    }
}

/// An interpreter running agent-chosen arguments at tier auto without rules
/// (WL104), and auto rules not anchored at both ends (WL105).
fn lint_exec(l: &mut Linter<'_>, name: &str, t: &RawTool, exec: &Spanned<Vec<String>>, tier: Tier) {
    let argv = exec.get_ref();
    let program = argv.first().map(|p| p.rsplit('/').next().unwrap_or(p)).unwrap_or("");
    let interp =
        INTERPRETERS.iter().any(|i| program == *i || (i.starts_with("python") && program.starts_with("python")));
    let agent_chosen = argv.iter().any(|a| a.contains('{') && !a.contains("{tmp}") && a.contains('}'));
    if tier == Tier::Auto && t.rule.is_empty() && interp && agent_chosen {
        l.add(
            "WL104",
            exec.span(),
            format!("tool {name}: {program} runs agent-chosen arguments at tier auto, with no rules"),
        );
    }
    for r in &t.rule {
        if r.get_ref().tier != Tier::Auto {
            continue;
        }
        for (key, pattern) in &r.get_ref().when {
            let p = pattern.get_ref();
            let start = p.starts_with('^') || p.starts_with("\\A");
            let end = (p.ends_with('$') && !p.ends_with("\\$")) || p.ends_with("\\z");
            if !(start && end) {
                l.add(
                    "WL105",
                    pattern.span(),
                    format!("tool {name}: the auto rule on `{key}` is not anchored at both ends: {p:?}"),
                );
            }
        }
    }
}

/// Keys that open something of the host to the tool: a secret in `env.pass`
/// (WL107), `inotify` (WL115), `fs.unprotect` (WL116), `sysv_ipc` (WL114).
fn lint_risky_keys(l: &mut Linter<'_>, name: &str, t: &RawTool) {
    for v in &t.env.pass {
        if is_secret_name(v.get_ref()) {
            l.add("WL107", v.span(), format!("tool {name}: env.pass hands {} to the tool", v.get_ref()));
        }
    }
    if let Some(v) = t.inotify.as_ref().filter(|v| *v.get_ref()) {
        l.add(
            "WL115",
            v.span(),
            format!("tool {name}: inotify = true lets the tool watch any directory its uid can read"),
        );
    }
    for entry in &t.fs.unprotect {
        l.add(
            "WL116",
            entry.span(),
            format!(
                "tool {name}: fs.unprotect {:?} lets the tool write what runs on the host outside the sandbox",
                entry.get_ref()
            ),
        );
    }
    if let Some(v) = t.sysv_ipc.as_ref().filter(|v| *v.get_ref()) {
        l.add(
            "WL114",
            v.span(),
            format!("tool {name}: sysv_ipc = true opens the host's SysV IPC to the tool without root"),
        );
    }
}

/// A description that reads like instructions to the agent (WL111): the
/// policy's own, or else its plugin's.
fn lint_description(l: &mut Linter<'_>, name: &str, tool: &Spanned<RawTool>, around: &Surroundings) {
    match &tool.get_ref().description {
        Some(d) => {
            if let Some(why) = poisoning(d.get_ref()) {
                l.add("WL111", d.span(), format!("tool {name}: its policy description {why}"));
            }
        }
        None => {
            if let Some(why) = around.descriptions.get(name).and_then(|d| poisoning(d)) {
                l.add("WL111", tool.span(), format!("tool {name}: its plugin's description {why}"));
            }
        }
    }
}

/// The daemon a socket path belongs to when that daemon acts as root for
/// whoever connects (WL119), by the names their packages give the sockets.
fn root_daemon(path: &str) -> Option<&'static str> {
    let name = path.rsplit('/').next().unwrap_or(path);
    let daemon = match name {
        "docker.sock" => "Docker",
        "containerd.sock" | "containerd.sock.ttrpc" => "containerd",
        "podman.sock" => "Podman",
        "crio.sock" => "CRI-O",
        "buildkitd.sock" => "BuildKit",
        "libvirt-sock" | "virtqemud-sock" | "virtproxyd-sock" => "libvirt",
        // The system bus: as uid 0 (a root-owned checkout) a client may ask
        // systemd for a transient unit, which runs outside every sandbox.
        "system_bus_socket" => "D-Bus (system bus)",
        "snapd.socket" => "snapd",
        "unix.socket" if path.contains("/lxd/") => "LXD",
        "unix.socket" if path.contains("/incus/") => "Incus",
        "private" if path.contains("/systemd/") => "systemd",
        _ => return None,
    };
    Some(daemon)
}

fn lint_limits(l: &mut Linter<'_>, name: &str, t: &RawTool) {
    const GIB: u64 = 1 << 30;
    let lim = &t.limits;
    let mut high = |span: Range<usize>, what: String| l.add("WL109", span, format!("tool {name}: {what}"));
    if let Some(m) = &lim.memory
        && m.get_ref().0 > 4 * GIB
    {
        high(
            m.span(),
            format!("limits.memory is {} (default 256MiB)", crate::policy::units::format_size(m.get_ref().0)),
        );
    }
    // A tool with neither exec nor plugin only lends its walls to `warden run`:
    // the command line is the person's own (a test suite, a build), so long
    // wall-clock and CPU limits are its nature, not a runaway's allowance.
    let run_only = t.exec.is_none() && t.plugin.is_none();
    if let Some(d) = &lim.timeout
        && !run_only
        && d.get_ref().0 > std::time::Duration::from_secs(600)
    {
        high(
            d.span(),
            format!("limits.timeout is {} (default 30s)", crate::policy::units::format_duration(d.get_ref().0)),
        );
    }
    if let Some(d) = &lim.cpu
        && !run_only
        && d.get_ref().0 > std::time::Duration::from_secs(600)
    {
        high(d.span(), format!("limits.cpu is {}", crate::policy::units::format_duration(d.get_ref().0)));
    }
    if let Some(s) = &lim.max_output
        && s.get_ref().0 > 16 << 20
    {
        high(s.span(), format!("limits.max_output is {}", crate::policy::units::format_size(s.get_ref().0)));
    }
    if let Some(n) = &lim.processes
        && *n.get_ref() > 1024
    {
        high(n.span(), format!("limits.processes is {}", n.get_ref()));
    }
    if let Some(n) = &lim.open_files
        && *n.get_ref() > 4096
    {
        high(n.span(), format!("limits.open_files is {}", n.get_ref()));
    }
    if let Some(s) = &lim.file_size
        && s.get_ref().0 > 4 * GIB
    {
        high(s.span(), format!("limits.file_size is {}", crate::policy::units::format_size(s.get_ref().0)));
    }
}

/// Patterns that match every value.
/// Public suffixes of more than one label that a `*.` grant is most often
/// written against by mistake (a short list, not the whole Public Suffix List:
/// one-label suffixes are caught by their shape).
const MULTI_LABEL_SUFFIXES: &[&str] = &[
    "co.uk",
    "org.uk",
    "ac.uk",
    "gov.uk",
    "com.au",
    "net.au",
    "org.au",
    "co.jp",
    "ne.jp",
    "co.nz",
    "com.br",
    "com.cn",
    "com.tw",
    "co.in",
    "co.za",
    "com.mx",
    "github.io",
    "gitlab.io",
    "herokuapp.com",
    "appspot.com",
    "cloudfront.net",
    "amazonaws.com",
    "azurewebsites.net",
    "vercel.app",
    "netlify.app",
    "pages.dev",
    "workers.dev",
];

/// Why a `net.connect` host is wider than one registrable domain, if it is.
fn wider_than_a_domain(host: &str) -> Option<&'static str> {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    if host == "*" {
        return Some("reaches any host of the internet on that port");
    }
    let suffix = host.strip_prefix("*.")?;
    if !suffix.contains('.') || MULTI_LABEL_SUFFIXES.contains(&suffix) {
        return Some("covers a whole public suffix: any domain registered under it");
    }
    None
}

fn matches_everything(p: &str) -> bool {
    matches!(p, "" | ".*" | "^.*" | "^.*$" | ".*$" | "(?s).*" | "^(?s).*$" | "[\\s\\S]*" | "^[\\s\\S]*$")
}

fn lint_shadowed(l: &mut Linter<'_>, name: &str, t: &RawTool) {
    for (i, r) in t.rule.iter().enumerate() {
        let r = r.get_ref();
        let shadowed = t.rule.iter().enumerate().any(|(j, s)| {
            let s = s.get_ref();
            j != i
                && s.tier > r.tier
                && s.when.len() == 1
                && s.when.iter().all(|(key, sp)| {
                    r.when.get(key).is_some_and(|rp| rp.get_ref() == sp.get_ref() || matches_everything(sp.get_ref()))
                })
        });
        if shadowed && let Some((key, p)) = r.when.iter().next() {
            l.add(
                "WL110",
                p.span(),
                format!(
                    "tool {name}: the {} rule on `{key}` never decides a call: a stricter rule matches all it matches",
                    r.tier
                ),
            );
        }
    }
}
