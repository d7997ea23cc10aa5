//! The policy: which tools exist, who must approve them, and the walls of each
//! tool's sandbox.
//!
//! Input is trusted-but-fallible TOML written by the operator. Loading is two
//! steps: [`schema`] deserialises the text (unknown keys, bad sizes and bad
//! durations fail here with their span), then [`compile`] checks what a type
//! cannot (declared plugins, placeholders, regexes, runtime-specific keys) and
//! builds an immutable [`Policy`]. Every key is either enforced by a runtime or
//! rejected with `file:line:column`: nothing is parsed and then ignored.

#![forbid(unsafe_code)]

pub mod audit;
pub mod compile;
#[allow(missing_docs, reason = "each field is the policy key of its name, documented in docs/credentials.md")]
pub mod credential;
mod decide;
pub mod floor;
pub mod glob;
pub mod oci;
#[allow(missing_docs, reason = "each field is the policy key of its name, documented in docs/otlp.md")]
pub mod otlp;
pub mod profile;
#[allow(missing_docs, reason = "each field is the policy key of its name, documented in docs/policy.md")]
pub mod schema;
pub mod signer;
pub mod units;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use regex::Regex;
use serde::{Deserialize, Serialize};

pub use compile::{Context, SYSTEM_READ, SYSTEM_WRITE};
pub use credential::{Bind, Credential, Inject, Source};
pub use decide::is_simple_command;
pub(crate) use decide::strictest;
pub use floor::apply::FloorTier;

/// Lasting approvals, beside the policy file.
pub const APPROVALS_FILE: &str = "warden.approvals.toml";
pub use oci::OciRef;
pub use profile::Profile;

/// The policy compiled into warden, used when no `--policy` is given and no
/// `./warden.toml` exists.
pub const DEFAULT_POLICY: &str = include_str!("../../../policies/default.toml");
/// The name the embedded default policy goes by in messages.
pub const DEFAULT_POLICY_NAME: &str = "<embedded policies/default.toml>";

/// Default wall-clock limit of a call.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// `[defaults] max_jobs` when unset: background jobs running at once under `serve`.
pub const DEFAULT_MAX_JOBS: usize = 4;
/// The largest `[defaults] max_jobs`.
pub const MAX_MAX_JOBS: usize = 256;
/// The names of warden's own MCP tools for background jobs: no policy tool may
/// take one while any tool has `background = true`.
pub const JOB_TOOLS: [&str; 4] = ["job_status", "job_output", "job_cancel", "job_list"];
/// Default cap on the serialised result of a call.
pub const DEFAULT_MAX_OUTPUT: u64 = 64 << 10;
/// Default memory limit of a call.
pub const DEFAULT_MEMORY: u64 = 256 << 20;
/// The most memory a component can address (wasm32).
pub const MAX_COMPONENT_MEMORY: u64 = 4 << 30;
/// Default process count of a process tool (its whole tree).
pub const DEFAULT_PROCESSES: u32 = 64;
/// Default open-file limit of a process tool.
pub const DEFAULT_OPEN_FILES: u32 = 256;
/// Default largest file a process tool may write.
pub const DEFAULT_FILE_SIZE: u64 = 256 << 20;
/// Default `limits.tmp_size`: the size of a process tool's `{tmp}` file system.
pub const DEFAULT_TMP_SIZE: u64 = 256 << 20;
/// Default `limits.tmp_files`: the files and directories a process tool's `{tmp}` may hold.
pub const DEFAULT_TMP_FILES: u32 = 10_000;

/// How much a call needs a person's say-so. Ordered from least to most strict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    /// Runs without asking.
    Auto,
    /// Asks once; may be granted for the rest of the session.
    Ask,
    /// Asks every time, with a preview.
    Confirm,
    /// Never runs, and is hidden from listings.
    Deny,
}

impl Tier {
    /// The policy spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Auto => "auto",
            Tier::Ask => "ask",
            Tier::Confirm => "confirm",
            Tier::Deny => "deny",
        }
    }
}

impl fmt::Display for Tier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What to do when the kernel lacks a sandbox layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxMode {
    /// Refuse to run what cannot be fully confined.
    #[default]
    Enforce,
    /// Run with what exists, and say what was enforced.
    BestEffort,
}

/// A loaded, checked policy. Immutable once built.
#[derive(Debug)]
pub struct Policy {
    /// Where it came from: a file path or [`DEFAULT_POLICY_NAME`].
    pub origin: String,
    /// The workspace the placeholders were expanded against.
    pub workspace: PathBuf,
    /// `[sandbox] mode`.
    pub mode: SandboxMode,
    /// `[plugins.*]` by name.
    pub plugins: BTreeMap<String, PluginSpec>,
    /// `[tools.*]` by name (sorted, as every listing is). Overrides of a server's
    /// tools (`[tools."SERVER__TOOL"]`) are here too, with [`Runner::Server`].
    pub tools: BTreeMap<String, ToolSpec>,
    /// `[servers.*]` by name: MCP servers run in the process sandbox, whose tools
    /// are offered as `SERVER__TOOL`.
    pub servers: BTreeMap<String, ServerSpec>,
    /// `warden.lock` beside the policy file (`None` for the embedded default policy).
    pub lock_path: Option<PathBuf>,
    /// `[profiles.*]` by name.
    pub profiles: BTreeMap<String, Profile>,
    /// The profile chosen with `--profile` ([`Policy::select_profile`]), if any.
    pub profile: Option<Profile>,
    /// `[defaults] max_jobs`: background jobs running at once under `serve`.
    pub max_jobs: usize,
    /// warden's own files (what each is, absolute path): the policy file and its
    /// lock, and what the command line adds (the audit log, the component cache).
    /// Every call protects those inside its write grants, whatever the policy
    /// says: a tool that rewrote them would set its own walls or record.
    pub own_files: Vec<(String, PathBuf)>,
    /// `[defaults] inbox` (default `true`): calls whose client cannot ask wait
    /// in warden's approval inbox, where the command line or `serve` offers one.
    pub inbox: bool,
    /// `[credentials.*]` by name.
    pub credentials: BTreeMap<String, Credential>,
    /// The managed floors combined with it ([`Policy::apply_floors`]), in order.
    pub floors: Vec<String>,
    /// What each floor changed, by tool (`server NAME` for a server, `""` for the policy's own keys).
    pub floor_notes: BTreeMap<String, Vec<floor::apply::FloorNote>>,
    /// `[audit]`: how the audit log is kept.
    pub audit: audit::AuditSettings,
}

impl Policy {
    /// Whether a call of `spec` whose client cannot ask may wait in the inbox.
    pub fn may_wait(&self, spec: &ToolSpec) -> bool {
        spec.inbox.unwrap_or(self.inbox)
    }

    /// `warden.approvals.toml` beside the policy file (`None` for the embedded default policy).
    pub fn approvals_path(&self) -> Option<PathBuf> {
        self.lock_path.as_ref().map(|l| l.with_file_name(APPROVALS_FILE))
    }

    /// Chooses `[profiles.NAME]`: from now on only its tools are offered, at
    /// its tiers. An unknown name is an error naming the profiles there are.
    pub fn select_profile(&mut self, name: &str) -> Result<(), String> {
        match self.profiles.get(name) {
            Some(p) => {
                self.profile = Some(p.clone());
                Ok(())
            }
            None => {
                let close = profile::closest(name, self.profiles.keys().map(String::as_str));
                let declared: Vec<&str> = self.profiles.keys().map(String::as_str).collect();
                Err(format!(
                    "--profile {name:?}: {} declares no [profiles.{name}]{}",
                    self.origin,
                    if !close.is_empty() {
                        format!("; did you mean {}?", close.join(", "))
                    } else if declared.is_empty() {
                        "; it declares no profiles".to_string()
                    } else {
                        format!(" (profiles: {})", declared.join(", "))
                    }
                ))
            }
        }
    }

    /// Where some tool or server of this policy may write (and so plant a
    /// symbolic link): the workspace and every fixed `fs.write` path. A granted
    /// path that passes through a link inside one of them is refused at call time
    /// ([`crate::runtime::Walls::for_tool`]).
    pub fn writable_roots(&self) -> Vec<PathBuf> {
        let grants = self.tools.values().map(|t| &t.grants).chain(self.servers.values().map(|s| &s.grants));
        let mut roots: Vec<PathBuf> = grants
            .flat_map(|g| g.paths.iter())
            .filter(|p| p.write)
            .filter_map(|p| match &p.path {
                GrantPath::Fixed(path) => Some(path.clone()),
                GrantPath::Tmp(_) => None,
            })
            .filter(|p| !compile::SYSTEM_WRITE.iter().any(|s| p == Path::new(s)))
            .collect();
        roots.push(self.workspace.clone());
        // Compared against canonical paths: a root spelled through a link (`{home}`
        // under `/home` -> `var/home`) is judged where it really lies.
        for root in &mut roots {
            if let Ok(real) = root.canonicalize() {
                *root = real;
            }
        }
        roots.sort();
        roots.dedup();
        roots
    }
}

/// The lock file written beside a policy by `warden lock`.
pub const LOCK_FILE: &str = "warden.lock";

/// The separator between a server's name and its tool's name: `SERVER__TOOL`.
pub const SERVER_TOOL_SEPARATOR: &str = "__";

/// `[servers.NAME]`, checked: an MCP server started inside the process sandbox.
#[derive(Debug, Clone)]
pub struct ServerSpec {
    /// Its name (the prefix of its tools' names).
    pub name: String,
    /// The command that starts it (no argument placeholders: it is started once, not per call).
    pub exec: ExecSpec,
    /// The tier of its tools unless `[tools."NAME__TOOL"]` says otherwise (default `ask`).
    pub tier: Tier,
    /// What its sandbox lets it reach, for as long as it runs.
    pub grants: Grants,
    /// `timeout` and `max_output` bound each call; the others bound the server process.
    pub limits: Limits,
    /// `file:line:column` of its table.
    pub location: String,
    /// The managed floors' say in its tools' tiers.
    pub floors: Vec<FloorTier>,
    /// The managed floors' `[tools."NAME__TOOL"]`, by tool.
    pub tool_floors: BTreeMap<String, Vec<FloorTier>>,
}

impl ServerSpec {
    /// The policy entry a tool of this server gets when no `[tools."NAME__TOOL"]` exists.
    pub fn tool_spec(&self, tool: &str) -> ToolSpec {
        let mut floors = self.floors.clone();
        floors.extend(self.tool_floors.get(tool).into_iter().flatten().cloned());
        let tier = floors.iter().map(|f| f.base.tier).fold(self.tier, Tier::max);
        ToolSpec {
            name: format!("{}{SERVER_TOOL_SEPARATOR}{tool}", self.name),
            runner: Runner::Server(ServerTool { server: self.name.clone(), tool: tool.to_string() }),
            description: None,
            tier,
            grants: self.grants.clone(),
            limits: self.limits,
            rules: Vec::new(),
            location: self.location.clone(),
            cache: None,
            hidden_by: None,
            background: false,
            inbox: None,
            floors,
        }
    }
}

/// Where a plugin's component comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PluginSource {
    /// Compiled into warden (`builtin:NAME`).
    Builtin(String),
    /// A `.wasm` file, resolved against the policy file's directory.
    File(PathBuf),
    /// A component in an OCI registry, by manifest digest (`oci://HOST/REPO@sha256:…`).
    Oci(OciRef),
}

impl PluginSource {
    /// Whether the component comes from outside warden (a file or a registry):
    /// its tools' definitions are pinned in warden.lock and linted.
    pub fn is_third_party(&self) -> bool {
        !matches!(self, PluginSource::Builtin(_))
    }
}

impl fmt::Display for PluginSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PluginSource::Builtin(name) => write!(f, "builtin:{name}"),
            PluginSource::File(path) => write!(f, "{}", path.display()),
            PluginSource::Oci(r) => write!(f, "{r}"),
        }
    }
}

/// What kind of component a plugin is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PluginKind {
    /// The `warden:plugin` world: it describes its tools and is called with JSON.
    #[default]
    Tool,
    /// A plain `wasi:cli/command` program: each tool runs it with an `args` template.
    Command,
}

/// `[plugins.NAME]`, checked.
#[derive(Debug, Clone)]
pub struct PluginSpec {
    /// The plugin's name in the policy.
    pub name: String,
    /// Where the component is.
    pub source: PluginSource,
    /// `kind = "tool"` (default) or `"command"`.
    pub kind: PluginKind,
    /// The pinned sha256 of the component bytes (lowercase hex); required for
    /// files, optional for OCI (where it must equal the layer digest).
    pub sha256: Option<String>,
    /// `signers`: the keys one of which must have signed the component (each a
    /// checked [`signer`] entry); empty: no signature is required.
    pub signers: Vec<String>,
    /// `signature`: where a file source's signature is (default: the source's
    /// path with `.sig` added); `None` for builtins.
    pub signature: Option<PathBuf>,
    /// `file:line:column` of the table, for messages.
    pub location: String,
}

/// One directory a tool may reach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathGrant {
    /// Where.
    pub path: GrantPath,
    /// Write (and so read) access; otherwise read-only.
    pub write: bool,
}

/// A granted path: fixed at load time, or under the per-call `{tmp}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GrantPath {
    /// An absolute path.
    Fixed(PathBuf),
    /// `{tmp}` followed by this relative path (often empty).
    Tmp(PathBuf),
}

impl fmt::Display for GrantPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GrantPath::Fixed(p) => write!(f, "{}", p.display()),
            GrantPath::Tmp(rel) if rel.as_os_str().is_empty() => f.write_str("{tmp}"),
            GrantPath::Tmp(rel) => write!(f, "{{tmp}}/{}", rel.display()),
        }
    }
}

/// `host:port` a tool may connect to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetGrant {
    /// A host name (lower case, no trailing dot), `*.suffix` (any name below
    /// `suffix`, not `suffix` itself), `*` (any name), or an IP address.
    pub host: String,
    /// The TCP port.
    pub port: u16,
}

impl fmt::Display for NetGrant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// What a tool's sandbox lets it reach. Nothing else is reachable.
#[derive(Debug, Clone, Default)]
pub struct Grants {
    /// Directories, read-only or read-write.
    pub paths: Vec<PathGrant>,
    /// TCP destinations.
    pub net: Vec<NetGrant>,
    /// `net.unix`: host unix sockets the tool may connect to (absolute paths;
    /// process tools and servers, inside a root built from their grants).
    pub unix: Vec<PathBuf>,
    /// `net.allow_private = true`: a name grant may resolve to loopback,
    /// private, link-local, CGNAT or metadata addresses.
    pub allow_private: bool,
    /// Host environment variables passed through by name.
    pub env_pass: Vec<String>,
    /// Environment variables set to a value (placeholders `{tmp}` expanded per call).
    pub env_set: BTreeMap<String, String>,
    /// SysV IPC and POSIX message queues admitted without a private IPC
    /// namespace (`sysv_ipc = true`; process tools and servers).
    pub sysv_ipc: bool,
    /// inotify watches admitted (`inotify = true`; process tools and servers).
    pub inotify: bool,
    /// `{system}` is granted: with a pid namespace of its own the call also
    /// reads its private `/proc` and writes its private `/dev/shm`.
    pub system: bool,
    /// `fs.deny_read` and `fs.deny_write`: paths (and `*`/`**` globs) inside the grants.
    pub deny: Vec<DenyEntry>,
    /// `fs.unprotect`: built-in protected paths this tool may write after all.
    pub unprotect: Vec<PathBuf>,
    /// `fs.git_init = true`: the tool may create git repositories, whose config
    /// and hooks are vetted before they reach the host (process tools and servers).
    pub git_init: bool,
    /// `credentials = [...]`: secrets it may use through the egress proxy, never see.
    pub credentials: Vec<Credential>,
}

/// One `fs.deny_read` or `fs.deny_write` entry, placeholders expanded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DenyEntry {
    /// The path or pattern (`*` within a component, `**` any number of components).
    pub path: GrantPath,
    /// `fs.deny_read` (no read, write or listing); otherwise `fs.deny_write` (read-only).
    pub read: bool,
}

impl Grants {
    /// Whether the tool may change anything outside itself.
    pub fn writes(&self) -> bool {
        self.paths.iter().any(|p| p.write)
    }

    /// A write grant whose changes outlive the call: any but the per-call
    /// `{tmp}` and the `{system}` devices (`/dev/null`, …).
    pub fn lasting_write(&self) -> Option<&PathGrant> {
        lasting_write(&self.paths)
    }
}

/// The first of `paths` that grants a write outliving the call (see [`Grants::lasting_write`]).
pub fn lasting_write(paths: &[PathGrant]) -> Option<&PathGrant> {
    paths.iter().find(|p| {
        p.write
            && match &p.path {
                GrantPath::Fixed(path) => !SYSTEM_WRITE.iter().any(|s| path.as_os_str() == *s),
                GrantPath::Tmp(_) => false,
            }
    })
}

/// The limits of one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Wall clock.
    pub timeout: Duration,
    /// Linear memory (components) or address space (processes) in bytes.
    pub memory: u64,
    /// Serialised result, and each captured output stream, in bytes.
    pub max_output: u64,
    /// CPU time (processes; `RLIMIT_CPU`). Defaults to the timeout.
    pub cpu: Duration,
    /// Processes in the tool's tree (processes; a pids cgroup as root, `RLIMIT_NPROC` otherwise).
    pub processes: u32,
    /// Open files per process (processes; `RLIMIT_NOFILE`).
    pub open_files: u32,
    /// Largest file written (processes; `RLIMIT_FSIZE`).
    pub file_size: u64,
    /// The bytes `{tmp}` may hold (processes, as root: a private tmpfs of this size).
    pub tmp_size: u64,
    /// The files and directories `{tmp}` may hold (processes, as root: the tmpfs's inodes).
    pub tmp_files: u32,
}

/// What runs a tool.
#[derive(Debug, Clone)]
pub enum Runner {
    /// A tool of a component plugin, by the plugin's policy name.
    Plugin(String),
    /// A `kind = "command"` component run with an argument template.
    Command(CommandSpec),
    /// A program run as a confined process.
    Process(ExecSpec),
    /// A tool of a sandboxed MCP server.
    Server(ServerTool),
}

/// A tool of a `[servers.NAME]` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerTool {
    /// The server's policy name.
    pub server: String,
    /// The tool's name as the server knows it.
    pub tool: String,
}

/// A tool of a `kind = "command"` plugin: `plugin` and `args = [...]`, checked.
#[derive(Debug, Clone)]
pub struct CommandSpec {
    /// The plugin's policy name.
    pub plugin: String,
    /// The arguments after the program name: `{name}` is replaced by the string
    /// argument `name` (each element stays one argument).
    pub args: Vec<String>,
    /// The argument names the template uses, in order of first use.
    pub params: Vec<String>,
    /// An explicit input schema, replacing the one made from `params`.
    pub input_schema: Option<serde_json::Value>,
}

impl CommandSpec {
    /// The input schema: the explicit one, or every parameter a required string.
    pub fn schema(&self) -> serde_json::Value {
        template_schema(&self.params, self.input_schema.as_ref())
    }
}

/// The schema of a template's arguments: `explicit`, or every parameter a required string.
fn template_schema(params: &[String], explicit: Option<&serde_json::Value>) -> serde_json::Value {
    if let Some(s) = explicit {
        return s.clone();
    }
    let props: serde_json::Map<String, serde_json::Value> =
        params.iter().map(|p| (p.clone(), serde_json::json!({"type": "string", "maxLength": 131072}))).collect();
    serde_json::json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": props,
        "required": params,
        "additionalProperties": false,
    })
}

/// `exec = [...]` and its companions, checked.
#[derive(Debug, Clone)]
pub struct ExecSpec {
    /// The argv template: `{name}` is replaced by the string argument `name`;
    /// `{tmp}` by the call's private directory. Each element stays one argv element.
    pub argv: Vec<String>,
    /// The argument names the template uses, in order of first use.
    pub params: Vec<String>,
    /// The working directory.
    pub cwd: PathBuf,
    /// An explicit input schema, replacing the one made from `params`.
    pub input_schema: Option<serde_json::Value>,
}

impl ExecSpec {
    /// A tool with no `exec`: it only lends its walls to `warden run`.
    pub fn run_only(&self) -> bool {
        self.argv.is_empty()
    }

    /// The input schema: the explicit one, or every parameter a required string.
    pub fn schema(&self) -> serde_json::Value {
        template_schema(&self.params, self.input_schema.as_ref())
    }
}

/// Fills one template element in a single pass: each `{name}` for which `value`
/// returns `Some` is replaced, everything else is kept as written. A value is
/// never expanded again, so an argument that contains `{other}` stays literal.
pub fn fill_template<E>(element: &str, mut value: impl FnMut(&str) -> Result<Option<String>, E>) -> Result<String, E> {
    let mut out = String::with_capacity(element.len());
    let mut rest = element;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let name = after.find('}').map(|close| &after[..close]);
        match name {
            Some(name) if !name.contains('{') => match value(name)? {
                Some(v) => {
                    out.push_str(&v);
                    rest = &after[name.len() + 1..];
                }
                None => {
                    out.push('{');
                    rest = after;
                }
            },
            _ => {
                out.push('{');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// Which argument a rule looks at.
#[derive(Debug, Clone)]
pub enum ArgSelector {
    /// A top-level argument by name.
    Name(String),
    /// A JSON pointer into the arguments (starts with `/`).
    Pointer(String),
}

impl ArgSelector {
    /// The string value selected from `args`, if it is a string.
    pub fn select<'a>(&self, args: &'a serde_json::Value) -> Option<&'a str> {
        match self {
            ArgSelector::Name(n) => args.get(n),
            ArgSelector::Pointer(p) => args.pointer(p),
        }
        .and_then(serde_json::Value::as_str)
    }
}

/// `[[tools.NAME.rule]]`, checked.
#[derive(Debug, Clone)]
pub struct Rule {
    /// Every selector's value must match its regex.
    pub when: Vec<(ArgSelector, Regex)>,
    /// The tier this rule sets when it matches.
    pub tier: Tier,
    /// Why, shown in denials.
    pub reason: Option<String>,
    /// `file:line:column` of the rule, named in decisions.
    pub location: String,
}

/// `[tools.NAME]`, checked.
#[derive(Debug, Clone)]
pub struct ToolSpec {
    /// The tool's name.
    pub name: String,
    /// What runs it.
    pub runner: Runner,
    /// Overrides the plugin's description.
    pub description: Option<String>,
    /// The base tier.
    pub tier: Tier,
    /// What its sandbox lets it reach.
    pub grants: Grants,
    /// Its limits.
    pub limits: Limits,
    /// Its rules, in file order.
    pub rules: Vec<Rule>,
    /// `file:line:column` of its table.
    pub location: String,
    /// `cache = "60s"`: how long a result may be served again to the same
    /// arguments (read-only tools at tier `auto` only; see `crate::cache`).
    pub cache: Option<Duration>,
    /// Why the chosen profile hides this tool (its tier is then `deny`).
    pub hidden_by: Option<String>,
    /// `background = true`: under `warden serve` a call answers at once with a
    /// job handle and runs on (see `crate::mcp::jobs`); elsewhere it runs in the foreground.
    pub background: bool,
    /// `inbox = true|false`: whether a call whose client cannot ask may wait in
    /// warden's approval inbox (`None`: `[defaults] inbox`, see [`Policy::inbox`]).
    pub inbox: Option<bool>,
    /// The managed floors' say in its tier: each call gets the stricter of
    /// its own decision and each floor's ([`ToolSpec::decide`]).
    pub floors: Vec<FloorTier>,
}

/// A policy that could not be loaded: each problem with its place in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyError {
    /// Every problem found, in file order.
    pub problems: Vec<Problem>,
}

/// One problem in a policy file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The file (or [`DEFAULT_POLICY_NAME`]).
    pub file: String,
    /// 1-based line, 0 when unknown.
    pub line: usize,
    /// 1-based column, 0 when unknown.
    pub column: usize,
    /// What is wrong and what to change.
    pub message: String,
}

impl Policy {
    /// Loads and checks the policy file at `path`.
    pub fn load(path: &Path, ctx: &Context) -> Result<Policy, PolicyError> {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| PolicyError {
            problems: vec![Problem {
                file: origin.clone(),
                line: 0,
                column: 0,
                message: format!("cannot read the policy file: {e}"),
            }],
        })?;
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("."));
        compile::compile(&text, &origin, &dir, ctx)
    }

    /// Checks policy text; `origin` names it in messages and `dir` anchors relative plugin paths.
    pub fn from_text(text: &str, origin: &str, dir: &Path, ctx: &Context) -> Result<Policy, PolicyError> {
        compile::compile(text, origin, dir, ctx)
    }

    /// The embedded default policy.
    pub fn embedded_default(ctx: &Context) -> Result<Policy, PolicyError> {
        compile::compile(DEFAULT_POLICY, DEFAULT_POLICY_NAME, Path::new("."), ctx)
    }
}

impl ToolSpec {
    /// The read, write and net grants as text. With `short`, the paths that
    /// `{system}` added are shown as the one word `{system}` when all of them are there
    /// with exactly the access `{system}` gives.
    pub fn grants_text(&self, short: bool) -> (Vec<String>, Vec<String>, Vec<String>) {
        let g = &self.grants;
        let granted =
            |p: &str, write: bool| g.paths.iter().any(|x| x.path == GrantPath::Fixed(p.into()) && x.write == write);
        let system =
            short && SYSTEM_READ.iter().all(|p| granted(p, false)) && SYSTEM_WRITE.iter().all(|p| granted(p, true));
        let hidden = |x: &PathGrant| {
            system
                && matches!(&x.path, GrantPath::Fixed(p) if SYSTEM_READ.iter().chain(SYSTEM_WRITE).any(|s| p.as_os_str() == *s))
        };
        let mut read: Vec<String> = Vec::new();
        if system {
            read.push("{system}".into());
        }
        read.extend(g.paths.iter().filter(|p| !p.write && !hidden(p)).map(|p| p.path.to_string()));
        let write = g.paths.iter().filter(|p| p.write && !hidden(p)).map(|p| p.path.to_string()).collect();
        let net = g.net.iter().map(|n| n.to_string()).collect();
        (read, write, net)
    }

    /// Every grant in a word or two (`read P`, `write P`, `net H:P`, `sysv_ipc`,
    /// `inotify`), for listings; `short` as in [`ToolSpec::grants_text`].
    pub fn grant_words(&self, short: bool) -> Vec<String> {
        let (read, write, net) = self.grants_text(short);
        let mut words: Vec<String> = read.iter().map(|p| format!("read {p}")).collect();
        words.extend(write.iter().map(|p| format!("write {p}")));
        words.extend(net.iter().map(|n| format!("net {n}")));
        for (set, word) in [(self.grants.sysv_ipc, "sysv_ipc"), (self.grants.inotify, "inotify")] {
            if set {
                words.push(word.into());
            }
        }
        words
    }

    /// The plugin's name, for component tools.
    pub fn plugin(&self) -> Option<&str> {
        match &self.runner {
            Runner::Plugin(p) => Some(p),
            Runner::Command(c) => Some(&c.plugin),
            Runner::Process(_) | Runner::Server(_) => None,
        }
    }

    /// What runs it, in one word: `component`, `process` or `server`.
    pub fn runtime(&self) -> &'static str {
        match &self.runner {
            Runner::Plugin(_) | Runner::Command(_) => "component",
            Runner::Process(_) => "process",
            Runner::Server(_) => "server",
        }
    }
}
