//! A command's session: the parsed command line, and the one place that
//! finds the policy, loads it and builds the executor from it.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use super::args::{ApproveArg, Cli, Command};
use super::{Failure, absolute, fail};
use crate::approval::{ApproveMode, Approver};
use crate::audit::{self, AuditLog};
use crate::catalog::Catalog;
use crate::error::ErrorCode;
use crate::executor::{Executor, Options};
use crate::lock::Pins;
use crate::policy::floor::{self, Floor};
use crate::policy::{Context, Policy};
use crate::runtime::server::ServerPool;
use crate::runtime::wasm::ComponentRuntime;

/// This machine's managed floors (`/etc/warden/requirements.toml`,
/// `requirements.d/*.toml`, and `WARDEN_REQUIREMENTS`): any that cannot be
/// read or trusted stops the command.
pub(super) fn load_floors(ctx: &Context) -> Result<Vec<Floor>, Failure> {
    let extra = std::env::var_os(floor::EXTRA_FLOOR_ENV).filter(|v| !v.is_empty()).map(PathBuf::from);
    // A floor's `{home}` is the user's home from the password database, not `$HOME` (which the caller sets).
    let euid = nix::unistd::geteuid();
    let mut ctx = ctx.clone();
    if let Ok(Some(user)) = nix::unistd::User::from_uid(euid) {
        ctx.home = user.dir;
    }
    floor::load(&ctx, extra.as_deref(), euid.as_raw()).map_err(|e| {
        fail(
            ErrorCode::InvalidArgs,
            format!("{e}\n(a managed floor that cannot be trusted stops every command; see docs/policy.md, \"Managed floors\")"),
        )
    })
}

/// The command line, and what is built from it on demand.
pub(super) struct Session {
    /// The parsed command line.
    pub(super) cli: Cli,
    /// The OpenTelemetry export, once started ([`super::export`]).
    pub(super) export: std::sync::Mutex<Option<warden_otlp::Exporter>>,
}

impl Session {
    /// The audit log: `--audit-log`, else the default path.
    pub(super) fn audit_log(&self) -> PathBuf {
        self.cli.audit_log.clone().unwrap_or_else(audit::default_path)
    }

    pub(super) fn context(&self) -> Result<Context, Failure> {
        let ws = match &self.cli.workspace {
            Some(w) => w.clone(),
            None => std::env::current_dir()
                .map_err(|e| fail(ErrorCode::InvalidArgs, format!("cannot find the current directory: {e}")))?,
        };
        Context::from_env(&ws).map_err(|e| {
            fail(ErrorCode::InvalidArgs, format!("workspace {}: {e} (pass an existing --workspace)", ws.display()))
        })
    }

    /// The policy's text, its name in messages and the directory relative paths
    /// in it start from: `--policy`, else `./warden.toml`, else the embedded
    /// default (the one place that decides).
    pub(super) fn policy_source(&self) -> Result<(String, String, PathBuf), Failure> {
        let path = match &self.cli.policy {
            Some(p) => p.clone(),
            None if Path::new("warden.toml").is_file() => PathBuf::from("warden.toml"),
            None => {
                return Ok((
                    crate::policy::DEFAULT_POLICY.to_string(),
                    crate::policy::DEFAULT_POLICY_NAME.to_string(),
                    PathBuf::from("."),
                ));
            }
        };
        let text = std::fs::read_to_string(&path).map_err(|e| {
            fail(
                ErrorCode::InvalidArgs,
                format!("cannot read the policy {}: {e} (pass an existing file with --policy)", path.display()),
            )
        })?;
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).map(Path::to_path_buf);
        Ok((text, path.display().to_string(), dir.unwrap_or_else(|| PathBuf::from("."))))
    }

    pub(super) fn load_policy(&self, ctx: &Context) -> Result<Policy, Failure> {
        let (text, origin, dir) = self.policy_source()?;
        let policy =
            Policy::from_text(&text, &origin, &dir, ctx).map_err(|e| fail(ErrorCode::InvalidArgs, e.to_string()))?;
        self.effective(policy, ctx)
    }

    /// The policy as it stands for calls: combined with this machine's managed
    /// floors (the one place that does it), under `--profile`, protecting
    /// warden's own files.
    pub(super) fn effective(&self, mut policy: Policy, ctx: &Context) -> Result<Policy, Failure> {
        let floors = load_floors(ctx)?;
        policy.apply_floors(&floors);
        for f in &floors {
            policy.own_files.push(("managed floor".into(), PathBuf::from(&f.origin)));
        }
        self.with_profile(&mut policy)?;
        policy.own_files.extend(self.own_files());
        if policy.audit.otlp.is_some() {
            policy.own_files.extend(super::export::own_files(&absolute(&self.audit_log())));
        }
        Ok(policy)
    }

    /// warden's own files beyond the policy and its lock: the audit log and the
    /// compiled-component cache (every call protects them inside its write grants).
    pub(super) fn own_files(&self) -> Vec<(String, PathBuf)> {
        let log = absolute(&self.audit_log());
        let live = crate::live::Live::for_log(&log).path().to_path_buf();
        let mut own = vec![("audit log".to_string(), log), ("approvals inbox".to_string(), live)];
        if let Some(cache) = cache_dir() {
            own.push(("component cache".into(), absolute(&cache)));
        }
        own
    }

    /// Applies `--profile`, if given.
    pub(super) fn with_profile(&self, policy: &mut Policy) -> Result<(), Failure> {
        match &self.cli.profile {
            Some(name) => policy.select_profile(name).map_err(|m| fail(ErrorCode::InvalidArgs, m)),
            None => Ok(()),
        }
    }

    pub(super) fn approve_mode(&self) -> ApproveMode {
        if matches!(self.cli.command, Command::Serve { .. }) {
            // stdin and stdout carry MCP: the client answers, through the server's own hook.
            return match self.cli.approve {
                Some(ApproveArg::Yes) => ApproveMode::Yes,
                Some(ApproveArg::Deny) => ApproveMode::DenyAll,
                _ => ApproveMode::Deny,
            };
        }
        match self.cli.approve {
            Some(ApproveArg::Yes) => ApproveMode::Yes,
            Some(ApproveArg::Deny) => ApproveMode::DenyAll,
            Some(ApproveArg::Inbox) => ApproveMode::Deny,
            Some(ApproveArg::Prompt) => ApproveMode::Prompt,
            None => {
                let attached = (std::io::stdin().is_terminal() || std::io::stderr().is_terminal())
                    && std::fs::OpenOptions::new().read(true).write(true).open("/dev/tty").is_ok();
                if attached { ApproveMode::Prompt } else { ApproveMode::Deny }
            }
        }
    }

    pub(super) fn executor(&self) -> Result<Executor, Failure> {
        self.executor_for(None)
    }

    /// The executor; with `only`, for calls of that one tool (nothing else is loaded).
    pub(super) fn executor_for(&self, only: Option<&str>) -> Result<Executor, Failure> {
        let ctx = self.context()?;
        let policy = self.load_policy(&ctx)?;
        let log_path = self.audit_log();
        let mut log = AuditLog::open(&log_path).map_err(|e| {
            fail(
                ErrorCode::Internal,
                format!("cannot open the audit log {}: {e} (pass a writable --audit-log)", log_path.display()),
            )
        })?;
        log.set_settings((&policy.audit).into());
        let options = Options { cache_dir: cache_dir(), sandbox_helper: crate::runtime::process::default_helper() };
        let otlp = policy.audit.otlp.clone();
        let mut executor = Executor::new_for(policy, Approver::new(self.approve_mode()), log, options, only)
            .map_err(|e| fail(e.code, e.message))?;
        if self.cli.approve == Some(ApproveArg::Inbox) && !matches!(self.cli.command, Command::Serve { .. }) {
            executor.offer_inbox(crate::mcp::DEFAULT_APPROVAL_TIMEOUT);
        }
        super::export::start(self, otlp.as_ref(), &absolute(&log_path))?;
        Ok(executor)
    }
}

pub(super) fn cache_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("WARDEN_CACHE_DIR") {
        return if d.is_empty() { None } else { Some(PathBuf::from(d)) };
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("warden").join("components"))
}

/// The catalog of `policy` as the executor would build it, and the servers it started.
pub(super) fn catalog_of(policy: &Policy, runtime: &ComponentRuntime) -> (Catalog, ServerPool) {
    let servers = ServerPool::new(crate::runtime::process::default_helper(), policy);
    let pins = Pins::load(policy.lock_path.as_deref());
    (Catalog::build_all(policy, runtime, &servers, &pins), servers)
}
