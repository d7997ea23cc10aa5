//! The policy file as written: every table and key the loader accepts, with
//! the source span of each value that a later check may need to point at.
//!
//! Every struct denies unknown fields, so a misspelt key is an error at its
//! own line and column rather than a silently ignored grant.

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

use super::Tier;
use super::units::{PolicyDuration, PolicySize};

/// The whole file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPolicy {
    pub(crate) version: Spanned<i64>,
    #[serde(default)]
    pub(crate) defaults: RawDefaults,
    #[serde(default)]
    pub(crate) sandbox: RawSandbox,
    #[serde(default)]
    pub(crate) plugins: BTreeMap<String, Spanned<RawPlugin>>,
    #[serde(default)]
    pub(crate) tools: BTreeMap<Spanned<String>, Spanned<RawTool>>,
    /// `[servers.NAME]`: the same keys as a process tool (`exec`, `cwd`, `tier`,
    /// `fs`, `net`, `env`, `limits`); the others are refused by the compiler.
    #[serde(default)]
    pub(crate) servers: BTreeMap<Spanned<String>, Spanned<RawTool>>,
    /// `[profiles.NAME]`: the tools (and stricter tiers) one agent gets.
    #[serde(default)]
    pub(crate) profiles: BTreeMap<Spanned<String>, Spanned<RawProfile>>,
}

/// `[profiles.NAME]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawProfile {
    /// `"*"`, or a list of names and `*` patterns.
    pub(crate) tools: Spanned<toml::Value>,
    /// A stricter tier for some of the profile's tools.
    #[serde(default)]
    pub(crate) tiers: BTreeMap<Spanned<String>, Spanned<Tier>>,
    /// What the profile is for (shown by `policy check`).
    pub(crate) description: Option<String>,
}

/// `[defaults]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDefaults {
    pub(crate) tier: Option<Tier>,
    pub(crate) timeout: Option<PolicyDuration>,
    pub(crate) max_output: Option<PolicySize>,
    pub(crate) memory: Option<PolicySize>,
    /// `max_jobs = N`: background jobs running at once under `serve`.
    pub(crate) max_jobs: Option<Spanned<i64>>,
}

/// `[sandbox]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSandbox {
    pub(crate) mode: Option<Spanned<super::SandboxMode>>,
}

/// `[plugins.NAME]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPlugin {
    pub(crate) source: Spanned<String>,
    pub(crate) sha256: Option<Spanned<String>>,
    /// `"tool"` (the warden:plugin world, the default) or `"command"` (wasi:cli/command).
    pub(crate) kind: Option<Spanned<String>>,
}

/// `[tools.NAME]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTool {
    pub(crate) plugin: Option<Spanned<String>>,
    pub(crate) exec: Option<Spanned<Vec<String>>>,
    /// The argument template of a tool of a `kind = "command"` plugin.
    pub(crate) args: Option<Spanned<Vec<String>>>,
    pub(crate) cwd: Option<Spanned<String>>,
    pub(crate) input_schema: Option<Spanned<toml::Value>>,
    pub(crate) description: Option<Spanned<String>>,
    pub(crate) tier: Option<Tier>,
    #[serde(default)]
    pub(crate) fs: RawFs,
    #[serde(default)]
    pub(crate) net: RawNet,
    #[serde(default)]
    pub(crate) env: RawEnv,
    #[serde(default)]
    pub(crate) limits: RawLimits,
    /// Admit SysV IPC and POSIX message queues where no private IPC namespace can be made.
    pub(crate) sysv_ipc: Option<Spanned<bool>>,
    /// Admit inotify watches (on any path the uid may read: Landlock does not check them).
    pub(crate) inotify: Option<Spanned<bool>>,
    #[serde(default)]
    pub(crate) rule: Vec<Spanned<RawRule>>,
    /// `cache = "60s"`: serve a repeated call's result again within this time.
    pub(crate) cache: Option<Spanned<PolicyDuration>>,
    /// `background = true`: under `serve`, a call answers at once with a job handle.
    pub(crate) background: Option<Spanned<bool>>,
}

/// `fs.read` / `fs.write` / `fs.deny_read` / `fs.deny_write` / `fs.unprotect` / `fs.git_init`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawFs {
    #[serde(default)]
    pub(crate) read: Vec<Spanned<String>>,
    #[serde(default)]
    pub(crate) write: Vec<Spanned<String>>,
    /// No read, write or listing inside, though a grant covers it.
    #[serde(default)]
    pub(crate) deny_read: Vec<Spanned<String>>,
    /// Read-only inside a write grant.
    #[serde(default)]
    pub(crate) deny_write: Vec<Spanned<String>>,
    /// Built-in protected paths this tool may write after all.
    #[serde(default)]
    pub(crate) unprotect: Vec<Spanned<String>>,
    /// The tool may create git repositories (their config and hooks vetted).
    pub(crate) git_init: Option<Spanned<bool>>,
}

/// `net.connect`, `net.allow_private`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawNet {
    #[serde(default)]
    pub(crate) connect: Vec<Spanned<String>>,
    /// `net.allow_private`: a name grant may resolve to loopback, private,
    /// link-local or metadata addresses.
    pub(crate) allow_private: Option<Spanned<bool>>,
    /// `net.unix`: host unix sockets the tool may connect to, by path.
    #[serde(default)]
    pub(crate) unix: Vec<Spanned<String>>,
}

/// `env.pass` / `env.set`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawEnv {
    #[serde(default)]
    pub(crate) pass: Vec<Spanned<String>>,
    #[serde(default)]
    pub(crate) set: BTreeMap<String, Spanned<String>>,
}

/// `limits = { … }`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawLimits {
    pub(crate) memory: Option<Spanned<PolicySize>>,
    pub(crate) timeout: Option<Spanned<PolicyDuration>>,
    pub(crate) max_output: Option<Spanned<PolicySize>>,
    pub(crate) cpu: Option<Spanned<PolicyDuration>>,
    pub(crate) processes: Option<Spanned<u32>>,
    pub(crate) open_files: Option<Spanned<u32>>,
    pub(crate) file_size: Option<Spanned<PolicySize>>,
    pub(crate) tmp_size: Option<Spanned<PolicySize>>,
    pub(crate) tmp_files: Option<Spanned<u32>>,
}

/// `[[tools.NAME.rule]]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRule {
    pub(crate) when: BTreeMap<String, Spanned<String>>,
    pub(crate) tier: Tier,
    pub(crate) reason: Option<String>,
}
