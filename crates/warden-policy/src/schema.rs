//! The policy file as written: every table and key the loader accepts, with
//! the source span of each value that a later check may need to point at.
//!
//! Every struct denies unknown fields, so a misspelt key is an error at its
//! own line and column rather than a silently ignored grant.

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

use crate::Tier;
use crate::units::{PolicyDuration, PolicySize};

/// The whole file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPolicy {
    pub version: Spanned<i64>,
    #[serde(default)]
    pub defaults: RawDefaults,
    #[serde(default)]
    pub sandbox: RawSandbox,
    #[serde(default)]
    pub plugins: BTreeMap<String, Spanned<RawPlugin>>,
    #[serde(default)]
    pub tools: BTreeMap<Spanned<String>, Spanned<RawTool>>,
    /// `[servers.NAME]`: the same keys as a process tool (`exec`, `cwd`, `tier`,
    /// `fs`, `net`, `env`, `limits`); the others are refused by the compiler.
    #[serde(default)]
    pub servers: BTreeMap<Spanned<String>, Spanned<RawTool>>,
    /// `[profiles.NAME]`: the tools (and stricter tiers) one agent gets.
    #[serde(default)]
    pub profiles: BTreeMap<Spanned<String>, Spanned<RawProfile>>,
    /// `[credentials.NAME]`: secrets a tool may use but never see.
    #[serde(default)]
    pub credentials: BTreeMap<Spanned<String>, Spanned<crate::credential::RawCredential>>,
    /// `[audit]`: rotation, retention, large arguments, and `[audit.otlp]`, the OpenTelemetry export.
    #[serde(default)]
    pub audit: crate::audit::RawAudit,
}

/// `[profiles.NAME]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawProfile {
    /// `"*"`, or a list of names and `*` patterns.
    pub tools: Spanned<toml::Value>,
    /// A stricter tier for some of the profile's tools.
    #[serde(default)]
    pub tiers: BTreeMap<Spanned<String>, Spanned<Tier>>,
    /// What the profile is for (shown by `policy check`).
    pub description: Option<String>,
}

/// `[defaults]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDefaults {
    pub tier: Option<Tier>,
    pub timeout: Option<PolicyDuration>,
    pub max_output: Option<PolicySize>,
    pub memory: Option<PolicySize>,
    /// `max_jobs = N`: background jobs running at once under `serve`.
    pub max_jobs: Option<Spanned<i64>>,
    /// `inbox = false`: a call whose client cannot ask is refused at once
    /// instead of waiting in warden's approval inbox.
    pub inbox: Option<bool>,
}

/// `[sandbox]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSandbox {
    pub mode: Option<Spanned<crate::SandboxMode>>,
}

/// `[plugins.NAME]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPlugin {
    pub source: Spanned<String>,
    pub sha256: Option<Spanned<String>>,
    /// `"tool"` (the warden:plugin world, the default) or `"command"` (wasi:cli/command).
    pub kind: Option<Spanned<String>>,
    /// The keys (`ssh-ed25519 …` lines or `SHA256:…` fingerprints) whose signature it must carry.
    pub signers: Option<Spanned<Vec<String>>>,
    /// The signature file (default: the source's path with `.sig` added).
    pub signature: Option<Spanned<String>>,
}

/// `[tools.NAME]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTool {
    pub plugin: Option<Spanned<String>>,
    pub exec: Option<Spanned<Vec<String>>>,
    /// The argument template of a tool of a `kind = "command"` plugin.
    pub args: Option<Spanned<Vec<String>>>,
    pub cwd: Option<Spanned<String>>,
    pub input_schema: Option<Spanned<toml::Value>>,
    pub description: Option<Spanned<String>>,
    pub tier: Option<Tier>,
    #[serde(default)]
    pub fs: RawFs,
    #[serde(default)]
    pub net: RawNet,
    #[serde(default)]
    pub env: RawEnv,
    #[serde(default)]
    pub limits: RawLimits,
    /// Admit SysV IPC and POSIX message queues where no private IPC namespace can be made.
    pub sysv_ipc: Option<Spanned<bool>>,
    /// Admit inotify watches (on any path the uid may read: Landlock does not check them).
    pub inotify: Option<Spanned<bool>>,
    #[serde(default)]
    pub rule: Vec<Spanned<RawRule>>,
    /// `cache = "60s"`: serve a repeated call's result again within this time.
    pub cache: Option<Spanned<PolicyDuration>>,
    /// `background = true`: under `serve`, a call answers at once with a job handle.
    pub background: Option<Spanned<bool>>,
    /// `inbox = false`: refused at once when its client cannot ask, instead of
    /// waiting in warden's approval inbox (`[defaults] inbox` otherwise).
    pub inbox: Option<Spanned<bool>>,
    /// `credentials = ["NAME"]`: the `[credentials.NAME]` it holds.
    #[serde(default)]
    pub credentials: Vec<Spanned<String>>,
}

/// `fs.read` / `fs.write` / `fs.deny_read` / `fs.deny_write` / `fs.unprotect` / `fs.git_init`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFs {
    #[serde(default)]
    pub read: Vec<Spanned<String>>,
    #[serde(default)]
    pub write: Vec<Spanned<String>>,
    /// No read, write or listing inside, though a grant covers it.
    #[serde(default)]
    pub deny_read: Vec<Spanned<String>>,
    /// Read-only inside a write grant.
    #[serde(default)]
    pub deny_write: Vec<Spanned<String>>,
    /// Built-in protected paths this tool may write after all.
    #[serde(default)]
    pub unprotect: Vec<Spanned<String>>,
    /// The tool may create git repositories (their config and hooks vetted).
    pub git_init: Option<Spanned<bool>>,
}

/// `net.connect`, `net.allow_private`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawNet {
    #[serde(default)]
    pub connect: Vec<Spanned<String>>,
    /// `net.allow_private`: a name grant may resolve to loopback, private,
    /// link-local or metadata addresses.
    pub allow_private: Option<Spanned<bool>>,
    /// `net.unix`: host unix sockets the tool may connect to, by path.
    #[serde(default)]
    pub unix: Vec<Spanned<String>>,
}

/// `env.pass` / `env.set`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawEnv {
    #[serde(default)]
    pub pass: Vec<Spanned<String>>,
    #[serde(default)]
    pub set: BTreeMap<String, Spanned<String>>,
}

/// `limits = { … }`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLimits {
    pub memory: Option<Spanned<PolicySize>>,
    pub timeout: Option<Spanned<PolicyDuration>>,
    pub max_output: Option<Spanned<PolicySize>>,
    pub cpu: Option<Spanned<PolicyDuration>>,
    pub processes: Option<Spanned<u32>>,
    pub open_files: Option<Spanned<u32>>,
    pub file_size: Option<Spanned<PolicySize>>,
    pub tmp_size: Option<Spanned<PolicySize>>,
    pub tmp_files: Option<Spanned<u32>>,
}

impl RawLimits {
    /// Whether any limit is written.
    pub fn any_set(&self) -> bool {
        self.memory.is_some()
            || self.timeout.is_some()
            || self.max_output.is_some()
            || self.cpu.is_some()
            || self.processes.is_some()
            || self.open_files.is_some()
            || self.file_size.is_some()
            || self.tmp_size.is_some()
            || self.tmp_files.is_some()
    }
}

/// `[[tools.NAME.rule]]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRule {
    pub when: BTreeMap<String, Spanned<String>>,
    pub tier: Tier,
    pub reason: Option<String>,
}
