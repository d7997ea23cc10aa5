//! Managed floors: `/etc/warden/requirements.toml` and
//! `/etc/warden/requirements.d/*.toml`, written by whoever runs the machine,
//! combined with every user or project policy so that the floor always wins.
//!
//! A floor is written in the policy language, with the keys that bound a tool
//! rather than define one: `tier` and `[[rule]]`s, `fs.read`/`fs.write` (the
//! most a tool may be granted), `fs.deny_read`/`fs.deny_write` (added),
//! `fs.unprotect`, `net.connect`, `net.unix`, `env.pass` and `credentials`
//! (the most a tool may name), `net.allow_private`, `sysv_ipc`, `inotify` and
//! `fs.git_init` (`false`: never turned on), `limits` (the most a tool may
//! set), `[sandbox] mode` and `[defaults] inbox`/`max_jobs`. A table
//! `[tools."*"]` bounds every tool and server. How each key combines is in
//! [`apply`] and docs/policy.md, "Managed floors".
//!
//! Loading ([`load`]) fails closed: a floor file that exists but cannot be
//! read, does not parse, or could be changed by anyone but root (the file or
//! any directory above it owned by another user, or writable by group or
//! others) is an error for every command, never an empty floor.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use crate::compile::{Checker, Context, expand_path, parse_host_port};
use crate::schema::{RawLimits, RawRule};
use crate::{DenyEntry, GrantPath, NetGrant, PathGrant, PolicyError, Problem, Rule, SandboxMode, Tier};

pub mod apply;
#[cfg(test)]
mod tests;

/// Where the managed floors live.
pub const FLOOR_DIR: &str = "/etc/warden";
/// The floor file in [`FLOOR_DIR`].
pub const FLOOR_FILE: &str = "requirements.toml";
/// The directory of further floor files (`*.toml`, in name order) in [`FLOOR_DIR`].
pub const FLOOR_DROPINS: &str = "requirements.d";
/// A further floor file or directory, owned by root or by the user running
/// warden. It can only add to the floor (every floor makes the policy
/// stricter), so a user may set it for themselves; it never replaces
/// [`FLOOR_DIR`].
pub const EXTRA_FLOOR_ENV: &str = "WARDEN_REQUIREMENTS";
/// The largest floor file read.
const MAX_FLOOR_BYTES: u64 = 1 << 20;
/// The most floor files read.
const MAX_FLOOR_FILES: usize = 64;

/// One floor file, checked.
#[derive(Debug, Clone, Default)]
pub struct Floor {
    /// The file.
    pub origin: String,
    /// `[sandbox] mode`, with its `file:line:column`.
    pub mode: Option<(SandboxMode, String)>,
    /// `[defaults] inbox`.
    pub inbox: Option<(bool, String)>,
    /// `[defaults] max_jobs`.
    pub max_jobs: Option<(usize, String)>,
    /// `[defaults] tier`: the least tier of every tool the floor does not name
    /// (`[tools.NAME]`, or `[servers.NAME]` for a server's tools): with it, a
    /// floor is an allowlist that renaming a tool cannot leave.
    pub unnamed: Option<(Tier, String)>,
    /// `[defaults] credential_commands`: whether a policy's credential may come
    /// from `from = { command = … }`, a program run on the host outside every
    /// sandbox (under a floor: only when a floor says `true` and none `false`).
    pub credential_commands: Option<(bool, String)>,
    /// `[tools.NAME]` by name; `"*"` bounds every tool and server.
    pub tools: BTreeMap<String, FloorEntry>,
    /// `[servers.NAME]` by name: the server process and each of its tools.
    pub servers: BTreeMap<String, FloorEntry>,
}

/// One `[tools.NAME]` or `[servers.NAME]` of a floor: the most it may have.
/// `None` leaves a key to the policy.
#[derive(Debug, Clone, Default)]
pub struct FloorEntry {
    /// `file:line:column` of its table.
    pub location: String,
    /// The least tier (with its rules, the floor's own decision for a call).
    pub tier: Option<Tier>,
    /// Its rules: they decide the floor's tier for a call as a policy's rules do.
    pub rules: Vec<Rule>,
    /// `fs.read` and `fs.write`: the most a grant may cover (`Some` when either key is given).
    pub paths: Option<Vec<PathGrant>>,
    /// `fs.deny_read`, `fs.deny_write`: added to every tool it bounds.
    pub deny: Vec<DenyEntry>,
    /// `fs.unprotect`: the protected paths a tool may unprotect (`[]`: none).
    pub unprotect: Option<Vec<PathBuf>>,
    /// `net.connect`: the destinations a tool may be granted.
    pub net: Option<Vec<NetGrant>>,
    /// `net.unix`: the host sockets a tool may be granted.
    pub unix: Option<Vec<PathBuf>>,
    /// `env.pass`: the variables a tool may be passed.
    pub env_pass: Option<Vec<String>>,
    /// `credentials`: the credentials a tool may hold.
    pub credentials: Option<Vec<String>>,
    /// `net.allow_private`, `sysv_ipc`, `inotify`, `fs.git_init`: `false` keeps each off.
    pub flags: Flags,
    /// `limits`: the most a tool may set.
    pub limits: LimitCaps,
}

/// The switches a floor may keep off.
#[derive(Debug, Clone, Copy, Default)]
pub struct Flags {
    /// `net.allow_private`.
    pub allow_private: Option<bool>,
    /// `sysv_ipc`.
    pub sysv_ipc: Option<bool>,
    /// `inotify`.
    pub inotify: Option<bool>,
    /// `fs.git_init`.
    pub git_init: Option<bool>,
}

/// `limits` of a floor: each the most a tool may set.
#[derive(Debug, Clone, Copy, Default)]
#[allow(missing_docs, reason = "each field is the `limits` key of its name")]
pub struct LimitCaps {
    pub timeout: Option<Duration>,
    pub memory: Option<u64>,
    pub max_output: Option<u64>,
    pub cpu: Option<Duration>,
    pub processes: Option<u32>,
    pub open_files: Option<u32>,
    pub file_size: Option<u64>,
    pub tmp_size: Option<u64>,
    pub tmp_files: Option<u32>,
}

// ---- the file as written -------------------------------------------------

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFloor {
    version: Option<Spanned<i64>>,
    #[serde(default)]
    sandbox: RawFloorSandbox,
    #[serde(default)]
    defaults: RawFloorDefaults,
    #[serde(default)]
    tools: BTreeMap<Spanned<String>, Spanned<RawFloorEntry>>,
    #[serde(default)]
    servers: BTreeMap<Spanned<String>, Spanned<RawFloorEntry>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFloorSandbox {
    mode: Option<Spanned<SandboxMode>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFloorDefaults {
    inbox: Option<Spanned<bool>>,
    max_jobs: Option<Spanned<usize>>,
    tier: Option<Spanned<Tier>>,
    credential_commands: Option<Spanned<bool>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFloorEntry {
    tier: Option<Tier>,
    #[serde(default)]
    rule: Vec<Spanned<RawRule>>,
    #[serde(default)]
    fs: RawFloorFs,
    #[serde(default)]
    net: RawFloorNet,
    #[serde(default)]
    env: RawFloorEnv,
    #[serde(default)]
    limits: RawLimits,
    sysv_ipc: Option<bool>,
    inotify: Option<bool>,
    credentials: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFloorFs {
    read: Option<Vec<Spanned<String>>>,
    write: Option<Vec<Spanned<String>>>,
    #[serde(default)]
    deny_read: Vec<Spanned<String>>,
    #[serde(default)]
    deny_write: Vec<Spanned<String>>,
    unprotect: Option<Vec<Spanned<String>>>,
    git_init: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFloorNet {
    connect: Option<Vec<Spanned<String>>>,
    allow_private: Option<bool>,
    unix: Option<Vec<Spanned<String>>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFloorEnv {
    pass: Option<Vec<String>>,
}

// ---- checking ------------------------------------------------------------

/// Checks the floor text `text` (`origin` names it in messages).
pub fn compile_floor(text: &str, origin: &str, ctx: &Context) -> Result<Floor, PolicyError> {
    let mut c = Checker::new(text, origin);
    let raw: RawFloor = match toml::from_str(text) {
        Ok(raw) => raw,
        Err(e) => {
            let msg = e.message().trim().to_string();
            let hint = if msg.contains("unknown field") {
                " (a floor bounds tools and never defines one: exec, plugin, args, cwd, env.set, cache, \
                 background and the other keys that say how a tool runs belong in the policy)"
            } else {
                ""
            };
            c.problem(e.span().unwrap_or(0..0), format!("managed floor: {msg}{hint}"));
            return Err(c.into_error());
        }
    };
    if let Some(v) = raw.version.as_ref().filter(|v| *v.get_ref() != 1) {
        c.problem(v.span(), format!("unsupported floor version {}: this warden reads version 1", v.get_ref()));
    }
    let mut floor = Floor { origin: origin.to_string(), ..Floor::default() };
    floor.mode = raw.sandbox.mode.as_ref().map(|m| (*m.get_ref(), c.location(m.span())));
    floor.inbox = raw.defaults.inbox.as_ref().map(|v| (*v.get_ref(), c.location(v.span())));
    floor.max_jobs = raw.defaults.max_jobs.as_ref().map(|v| (*v.get_ref(), c.location(v.span())));
    floor.unnamed = raw.defaults.tier.as_ref().map(|v| (*v.get_ref(), c.location(v.span())));
    floor.credential_commands = raw.defaults.credential_commands.as_ref().map(|v| (*v.get_ref(), c.location(v.span())));
    for (map, out, kind) in [(&raw.tools, &mut floor.tools, "tools"), (&raw.servers, &mut floor.servers, "servers")] {
        for (name, entry) in map {
            let subject = format!("[{kind}.{}]", name.get_ref());
            if kind == "tools" && name.get_ref().contains(crate::SERVER_TOOL_SEPARATOR) {
                server_tool_keys(&mut c, &subject, entry);
            }
            out.insert(name.get_ref().clone(), compile_entry(&mut c, &subject, entry, ctx));
        }
    }
    if c.has_problems() {
        return Err(c.into_error());
    }
    Ok(floor)
}

/// A server's tool runs inside the server's walls: only its tier and rules are its own.
fn server_tool_keys(c: &mut Checker<'_>, subject: &str, entry: &Spanned<RawFloorEntry>) {
    let e = entry.get_ref();
    let walls = e.fs.read.is_some()
        || e.fs.write.is_some()
        || !e.fs.deny_read.is_empty()
        || !e.fs.deny_write.is_empty()
        || e.fs.unprotect.is_some()
        || e.fs.git_init.is_some()
        || e.net.connect.is_some()
        || e.net.allow_private.is_some()
        || e.net.unix.is_some()
        || e.env.pass.is_some()
        || e.credentials.is_some()
        || e.sysv_ipc.is_some()
        || e.inotify.is_some()
        || e.limits.any_set();
    if walls {
        let server = subject.trim_start_matches("[tools.").split(crate::SERVER_TOOL_SEPARATOR).next().unwrap_or("");
        c.problem(
            entry.span(),
            format!(
                "{subject}: a server's tool runs inside its server's walls; bound fs, net, env, credentials and \
                 limits in [servers.{server}], keep only tier and rules here"
            ),
        );
    }
}

fn compile_entry(c: &mut Checker<'_>, subject: &str, entry: &Spanned<RawFloorEntry>, ctx: &Context) -> FloorEntry {
    let raw = entry.get_ref();
    let rules = crate::compile::compile_rules(c, subject, &raw.rule);
    let mut paths = None;
    if raw.fs.read.is_some() || raw.fs.write.is_some() {
        let mut list: Vec<PathGrant> = Vec::new();
        for (entries, write) in [(&raw.fs.read, false), (&raw.fs.write, true)] {
            for e in entries.iter().flatten() {
                for (path, write) in floor_paths(c, subject, e, write, ctx) {
                    match list.iter_mut().find(|g| g.path == path) {
                        Some(g) => g.write |= write,
                        None => list.push(PathGrant { path, write }),
                    }
                }
            }
        }
        paths = Some(list);
    }
    let mut deny = Vec::new();
    for (entries, read, key) in
        [(&raw.fs.deny_read, true, "fs.deny_read"), (&raw.fs.deny_write, false, "fs.deny_write")]
    {
        for e in entries {
            if let Some(path) = crate::compile::expand_pattern(c, subject, key, e, ctx) {
                deny.push(DenyEntry { path, read });
            }
        }
    }
    let fixed = |c: &mut Checker<'_>, list: &Option<Vec<Spanned<String>>>| {
        list.as_ref().map(|l| {
            l.iter()
                .filter_map(|e| match expand_path(c, subject, e, ctx) {
                    Some(GrantPath::Fixed(p)) => Some(p),
                    Some(GrantPath::Tmp(_)) => {
                        c.problem(e.span(), format!("{subject}: {:?}: name a fixed path here", e.get_ref()));
                        None
                    }
                    None => None,
                })
                .collect::<Vec<_>>()
        })
    };
    let unprotect = fixed(c, &raw.fs.unprotect);
    let unix = fixed(c, &raw.net.unix);
    let net = raw.net.connect.as_ref().map(|l| {
        l.iter()
            .filter_map(|e| match parse_host_port(e.get_ref()) {
                Ok(g) => Some(g),
                Err(msg) => {
                    c.problem(e.span(), format!("{subject}: net.connect {:?}: {msg}", e.get_ref()));
                    None
                }
            })
            .collect()
    });
    FloorEntry {
        location: c.location(entry.span()),
        tier: raw.tier,
        rules,
        paths,
        deny,
        unprotect,
        net,
        unix,
        env_pass: raw.env.pass.clone(),
        credentials: raw.credentials.clone(),
        flags: Flags {
            allow_private: raw.net.allow_private,
            sysv_ipc: raw.sysv_ipc,
            inotify: raw.inotify,
            git_init: raw.fs.git_init,
        },
        limits: limit_caps(&raw.limits),
    }
}

/// One `fs.read`/`fs.write` entry of a floor: `{system}` stands for what it
/// grants a process tool (its devices writable, as there).
fn floor_paths(
    c: &mut Checker<'_>,
    subject: &str,
    e: &Spanned<String>,
    write: bool,
    ctx: &Context,
) -> Vec<(GrantPath, bool)> {
    if e.get_ref().trim() == "{system}" {
        let read = crate::SYSTEM_READ.iter().map(|p| (GrantPath::Fixed(p.into()), write));
        return read.chain(crate::SYSTEM_WRITE.iter().map(|p| (GrantPath::Fixed(p.into()), true))).collect();
    }
    expand_path(c, subject, e, ctx).into_iter().map(|p| (p, write)).collect()
}

fn limit_caps(l: &RawLimits) -> LimitCaps {
    LimitCaps {
        timeout: l.timeout.as_ref().map(|d| d.get_ref().0),
        memory: l.memory.as_ref().map(|s| s.get_ref().0),
        max_output: l.max_output.as_ref().map(|s| s.get_ref().0),
        cpu: l.cpu.as_ref().map(|d| d.get_ref().0),
        processes: l.processes.as_ref().map(|v| *v.get_ref()),
        open_files: l.open_files.as_ref().map(|v| *v.get_ref()),
        file_size: l.file_size.as_ref().map(|s| s.get_ref().0),
        tmp_size: l.tmp_size.as_ref().map(|s| s.get_ref().0),
        tmp_files: l.tmp_files.as_ref().map(|v| *v.get_ref()),
    }
}

// ---- finding and reading the files ---------------------------------------

/// Every floor on this machine, in order: [`FLOOR_DIR`]'s `requirements.toml`,
/// then `requirements.d/*.toml` by name, then [`EXTRA_FLOOR_ENV`]'s file or
/// directory (`extra`). `euid` is the user running warden: the only owner
/// besides root an `extra` floor may have.
pub fn load(ctx: &Context, extra: Option<&Path>, euid: u32) -> Result<Vec<Floor>, PolicyError> {
    load_from(Path::new(FLOOR_DIR), ctx, extra, euid)
}

/// [`load`], with the system floors looked for in `dir` (tests).
pub fn load_from(dir: &Path, ctx: &Context, extra: Option<&Path>, euid: u32) -> Result<Vec<Floor>, PolicyError> {
    let mut files = Vec::new();
    files.extend(find(&dir.join(FLOOR_FILE), &dir.join(FLOOR_DROPINS), &[0])?);
    if let Some(extra) = extra {
        if !extra.is_absolute() {
            return Err(error(extra, format!("{EXTRA_FLOOR_ENV} must be an absolute path")));
        }
        let meta = std::fs::metadata(extra).map_err(|e| {
            error(extra, format!("cannot read the floor named by {EXTRA_FLOOR_ENV}: {e} (unset it or fix the path)"))
        })?;
        let owners = [0, euid];
        if meta.is_dir() {
            files.extend(find(Path::new(""), extra, &owners)?);
        } else {
            files.extend(find(extra, Path::new(""), &owners)?);
        }
    }
    if files.len() > MAX_FLOOR_FILES {
        return Err(error(dir, format!("more than {MAX_FLOOR_FILES} floor files")));
    }
    files.iter().map(|(path, text)| compile_floor(text, &path.display().to_string(), ctx)).collect()
}

/// The floor file `file` (if it exists) and the `*.toml` of `dropins` (if it
/// exists), read after checking who could have changed them.
fn find(file: &Path, dropins: &Path, owners: &[u32]) -> Result<Vec<(PathBuf, String)>, PolicyError> {
    let mut out = Vec::new();
    if !file.as_os_str().is_empty() && exists(file)? {
        out.push((file.to_path_buf(), read_checked(file, owners)?));
    }
    if !dropins.as_os_str().is_empty() && exists(dropins)? {
        check_owner(dropins, owners)?;
        let entries =
            std::fs::read_dir(dropins).map_err(|e| error(dropins, format!("cannot list the floor directory: {e}")))?;
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| error(dropins, format!("cannot list the floor directory: {e}")))?;
            let path = entry.path();
            if path.extension().is_some_and(|x| x == "toml") {
                names.push(path);
            }
        }
        names.sort();
        for path in names {
            let text = read_checked(&path, owners)?;
            out.push((path, text));
        }
    }
    Ok(out)
}

/// Whether `path` exists (a dangling link is an error: a floor that was meant to be there).
fn exists(path: &Path) -> Result<bool, PolicyError> {
    match std::fs::symlink_metadata(path) {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(error(path, format!("cannot read the managed floor: {e}"))),
    }
}

/// Reads one floor file, bounded, after [`check_owner`]: the file opened is
/// the one checked (its resolved path, opened without following a link, and
/// its owner and mode checked again on the open file).
fn read_checked(path: &Path, owners: &[u32]) -> Result<String, PolicyError> {
    use std::io::Read;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let real = check_owner(path, owners)?;
    let file = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW).open(&real).map_err(|e| {
        error(
            path,
            format!(
                "cannot read the managed floor: {e} (a floor is never taken as empty; make it readable: chmod 644)"
            ),
        )
    })?;
    let meta = file.metadata().map_err(|e| error(path, format!("cannot read the managed floor: {e}")))?;
    if !meta.is_file() || !owners.contains(&meta.uid()) || meta.mode() & 0o022 != 0 {
        return Err(error(path, "the managed floor changed while it was read; read it again".into()));
    }
    let mut text = String::new();
    file.take(MAX_FLOOR_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| error(path, format!("cannot read the managed floor: {e}")))?;
    if text.len() as u64 > MAX_FLOOR_BYTES {
        return Err(error(path, format!("the managed floor is larger than {MAX_FLOOR_BYTES} bytes")));
    }
    Ok(text)
}

/// `path` (links resolved) and every directory above it must be owned by one
/// of `owners` and writable by no group or other user: otherwise someone else
/// could lower the floor. A sticky directory (`/tmp`) may be writable by all:
/// its other users can neither replace nor rename what they do not own.
fn check_owner(path: &Path, owners: &[u32]) -> Result<PathBuf, PolicyError> {
    use std::os::unix::fs::MetadataExt;
    let real = path.canonicalize().map_err(|e| error(path, format!("cannot read the managed floor: {e}")))?;
    let mut at = Some(real.as_path());
    while let Some(p) = at {
        let meta = std::fs::metadata(p).map_err(|e| error(path, format!("cannot check {}: {e}", p.display())))?;
        let who = if owners.len() > 1 { "root or the user running warden" } else { "root" };
        if !owners.contains(&meta.uid()) {
            return Err(error(
                path,
                format!(
                    "{} is owned by uid {}, not {who}: anyone who owns it could lower the floor; \
                     `chown root:root {}`",
                    p.display(),
                    meta.uid(),
                    p.display()
                ),
            ));
        }
        if meta.mode() & 0o022 != 0 && !(meta.is_dir() && meta.mode() & 0o1000 != 0) {
            return Err(error(
                path,
                format!(
                    "{} is writable by group or others (mode {:o}): they could lower the floor; `chmod go-w {}`",
                    p.display(),
                    meta.mode() & 0o7777,
                    p.display()
                ),
            ));
        }
        at = p.parent();
    }
    Ok(real)
}

fn error(path: &Path, message: String) -> PolicyError {
    PolicyError { problems: vec![Problem { file: path.display().to_string(), line: 0, column: 0, message }] }
}
