//! Waiting in warden's inbox: a call whose client cannot ask its user is
//! posted to the live directory's inbox ([`crate::live`]) and waits there,
//! up to the approval timeout, for a person answering with `warden approvals`
//! or in `warden console`. "Always" records a lasting approval
//! ([`super::lasting`]) scoped as the person chose.

use std::path::Path;
use std::time::Duration;

use super::lasting::{self, Entry, Match, Scope};
use super::{Answered, ApprovedBy, Request, Verdict};
use crate::live::{AnswerKind, Live, Pending, Waited};
use crate::policy::Tier;
use crate::runtime::Cancel;

/// The most calls of one process waiting at once: `serve` runs at most 16
/// calls at a time, so waiting calls never take every place from the others.
pub const MAX_WAITING: usize = 8;

/// Where and how long calls wait.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The live directory (beside the audit log).
    pub live: Live,
    /// How long a call waits for an answer.
    pub timeout: Duration,
    /// The calls of this process waiting now.
    pub waiting: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

/// Gives a waiting place back when dropped.
struct Place<'a>(&'a std::sync::atomic::AtomicUsize);

impl Drop for Place<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// What the person's "always" asked for (the answer's `lasting` object).
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Wanted {
    /// `args` (default), `rule` or `tool`.
    #[serde(rename = "match")]
    pub matches: Option<Match>,
    /// For `rule`: argument → regex.
    #[serde(default)]
    pub when: std::collections::BTreeMap<String, String>,
    /// `workspace` (default) or `session`.
    pub scope: Option<Scope>,
    /// The last day (`YYYY-MM-DD`) or moment (RFC 3339).
    pub until: Option<String>,
}

/// Why `wanted` cannot become a lasting approval of a `tier` call, if it cannot.
pub fn refuse(tier: Tier, wanted: &Wanted) -> Option<String> {
    if tier == Tier::Confirm && wanted.matches == Some(Match::Tool) {
        return Some(
            "a confirm tool is approved per call: an always answer may cover these arguments (--match args) \
             or a rule (--when KEY=REGEX), not every call"
                .into(),
        );
    }
    if wanted.matches == Some(Match::Rule) && wanted.when.is_empty() {
        return Some("--match rule needs at least one --when KEY=REGEX".into());
    }
    None
}

/// What the call's context lends the lasting approval.
pub struct Context<'a> {
    /// `warden.approvals.toml`, when the policy has a file.
    pub file: Option<&'a Path>,
    /// The workspace.
    pub workspace: &'a Path,
    /// The tool's definition now ([`lasting::definition`]).
    pub definition: &'a str,
    /// How the agent reached warden.
    pub client: &'a str,
    /// The call's progress sink, told where the person can answer (an MCP
    /// client that sent a progress token sees it while the call waits).
    pub progress: Option<&'a crate::runtime::ProgressSink>,
}

/// Posts `req` and waits; the verdict says who answered and where.
pub fn ask(settings: &Settings, req: &Request<'_>, why: &str, cancel: &Cancel, ctx: &Context<'_>) -> Verdict {
    let inbox = settings.live.inbox();
    let _place = Place(&settings.waiting);
    if settings.waiting.fetch_add(1, std::sync::atomic::Ordering::SeqCst) >= MAX_WAITING {
        return Verdict::Required(format!(
            "{why}; {MAX_WAITING} calls of this warden process already wait in its approval inbox, so this one \
             was refused at once (answer them with `warden approvals`, or set inbox = false on tools that \
             should not wait)"
        ));
    }
    if let Err(e) = settings.live.ensure() {
        return Verdict::Required(format!("{} needs approval and warden's inbox is unusable: {e}", req.tool));
    }
    let posted = |p: &Pending| {
        if let Some(sink) = ctx.progress {
            sink(&crate::runtime::Progress {
                done: 0,
                total: None,
                message: format!("waiting for a person: warden approvals approve {} (or warden console)", p.id),
            });
        }
        eprintln!(
            "warden: {} waits for approval {} (up to {}s): `warden approvals show {}`, or `warden console`",
            p.tool,
            p.id,
            settings.timeout.as_secs(),
            p.id
        );
    };
    let waited = match inbox.wait(req, ctx.client, settings.timeout, cancel, &posted) {
        Ok(w) => w,
        Err(e) => return Verdict::Required(format!("{} needs approval: {e}; nothing ran", req.tool)),
    };
    match waited {
        Waited::Answered(p, a) => {
            let mut answered = Answered {
                approved: true,
                by: ApprovedBy::Inbox,
                id: p.id.clone(),
                who: a.who,
                via: a.via,
                reason: String::new(),
            };
            match a.answer {
                AnswerKind::Approve => {}
                AnswerKind::Reject => {
                    answered.approved = false;
                    answered.reason = format!(
                        "{}: rejected by {} in warden's inbox ({}){}",
                        req.tool,
                        answered.who,
                        answered.via,
                        a.reason.map(|r| format!(": {}", crate::shape::sanitize_str(&r))).unwrap_or_default()
                    );
                }
                AnswerKind::Always => {
                    if let Err(e) = keep(req, &answered, a.lasting, ctx) {
                        // The person approved this call; only the lasting part failed.
                        eprintln!("warden: {}: approved once; the lasting approval was not kept: {e}", req.tool);
                    }
                }
            }
            Verdict::Answered(answered)
        }
        Waited::TimedOut(p) => Verdict::Required(format!(
            "{why}. It waited {}s as approval {} in warden's inbox and nobody answered: a person answers with \
             `warden approvals approve {}` or in `warden console` while it waits (--approval-timeout sets how long)",
            settings.timeout.as_secs(),
            p.id,
            p.id
        )),
        Waited::Cancelled(p) => Verdict::Required(format!(
            "{}: cancelled by the caller while approval {} waited; nothing ran",
            req.tool, p.id
        )),
    }
}

/// Records the lasting approval the person asked for with "always".
fn keep(req: &Request<'_>, by: &Answered, wanted: Option<serde_json::Value>, ctx: &Context<'_>) -> Result<(), String> {
    let wanted: Wanted = match wanted {
        Some(v) => serde_json::from_value(v).map_err(|e| format!("the always answer's scope is unreadable: {e}"))?,
        None => Wanted::default(),
    };
    if let Some(why) = refuse(req.tier, &wanted) {
        return Err(why);
    }
    let Some(file) = ctx.file else {
        return Err("the embedded default policy has no file to keep lasting approvals beside; \
                    write a policy file (warden.toml) to keep them"
            .into());
    };
    let matches = wanted.matches.unwrap_or(Match::Args);
    let scope = wanted.scope.unwrap_or(Scope::Workspace);
    let entry = Entry {
        id: lasting::new_id()?,
        tool: req.tool.to_string(),
        tier: req.tier,
        matches,
        args_sha256: (matches == Match::Args).then(|| req.args_sha256.to_string()),
        when: if matches == Match::Rule { wanted.when } else { Default::default() },
        scope,
        session: (scope == Scope::Session).then(|| req.session.to_string()),
        workspace: (scope == Scope::Workspace).then(|| ctx.workspace.display().to_string()),
        until: wanted.until,
        definition: ctx.definition.to_string(),
        who: by.who.clone(),
        via: by.via.clone(),
        created: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
    };
    if let Some(why) = entry.problem() {
        return Err(why);
    }
    let id = entry.id.clone();
    lasting::update(file, |entries| {
        entries.push(entry);
        Ok(())
    })?;
    eprintln!("warden: {}: lasting approval {id} kept in {}", req.tool, file.display());
    Ok(())
}
