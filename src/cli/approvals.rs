//! `warden approvals`: answer calls waiting in warden's inbox from any
//! terminal, and keep or revoke lasting approvals. docs/approvals.md.

use std::path::PathBuf;

use serde_json::{Value, json};

use super::args::{ApprovalsCommand, MatchArg, ScopeArg};
use super::session::Session;
use super::{Failure, fail, print_json};
use crate::approval::inbox::{Wanted, refuse};
use crate::approval::lasting::{self, Match, Scope};
use crate::error::ErrorCode;
use crate::live::{Answer, AnswerKind, Live, Pending, now_ms, whoami};

pub(super) fn run(s: &Session, command: &ApprovalsCommand) -> Result<u8, Failure> {
    let live = Live::for_log(&super::absolute(&s.audit_log()));
    let inbox = live.inbox();
    let answer = |id: &str, kind: AnswerKind, reason: Option<String>, lasting: Option<Value>| {
        let pending = inbox.get(id).map_err(|e| fail(ErrorCode::NotFound, e))?;
        let a = Answer {
            id: pending.id.clone(),
            args_sha256: pending.args_sha256.clone(),
            answer: kind,
            reason,
            lasting,
            who: whoami(),
            via: via(),
        };
        inbox.answer(&a).map_err(|e| fail(ErrorCode::InvalidArgs, e))?;
        Ok(pending)
    };
    match command {
        ApprovalsCommand::List { json, lasting } => list(s, &live, *json, *lasting),
        ApprovalsCommand::Show { id, json } => {
            let p = inbox.get(id).map_err(|e| fail(ErrorCode::NotFound, e))?;
            if *json {
                print_json(&serde_json::to_value(&p).unwrap_or_default());
            } else {
                print!("{}", describe(&p));
            }
            Ok(0)
        }
        ApprovalsCommand::Approve { id } => {
            let p = answer(id, AnswerKind::Approve, None, None)?;
            println!("approved {} ({}): it runs now", p.id, p.tool);
            Ok(0)
        }
        ApprovalsCommand::Reject { id, reason } => {
            let p = answer(id, AnswerKind::Reject, reason.clone(), None)?;
            println!("rejected {} ({}): its agent gets REJECTED", p.id, p.tool);
            Ok(0)
        }
        ApprovalsCommand::Always { id, matches, when, scope, until } => {
            let wanted = wanted(*matches, when, *scope, until.clone())?;
            let pending = inbox.get(id).map_err(|e| fail(ErrorCode::NotFound, e))?;
            let tier = if pending.tier == "confirm" { crate::Tier::Confirm } else { crate::Tier::Ask };
            if let Some(why) = refuse(tier, &wanted) {
                return Err(fail(ErrorCode::InvalidArgs, format!("approval {id} ({}): {why}", pending.tool)));
            }
            let value = json!({
                "match": match_name(*matches),
                "when": wanted.when,
                "scope": if *scope == ScopeArg::Session { "session" } else { "workspace" },
                "until": until,
            });
            let p = answer(id, AnswerKind::Always, None, Some(value))?;
            println!(
                "approved {} ({}); the waiting warden keeps the lasting approval beside its policy \
                 (`warden approvals list --lasting` shows it; where it could not, that warden says why on its stderr)",
                p.id, p.tool
            );
            Ok(0)
        }
        ApprovalsCommand::Revoke { id } => revoke(s, id),
    }
}

fn match_name(m: MatchArg) -> &'static str {
    match m {
        MatchArg::Args => "args",
        MatchArg::Rule => "rule",
        MatchArg::Tool => "tool",
    }
}

/// The "always" scope from the flags, checked before anything is answered.
fn wanted(matches: MatchArg, when: &[String], scope: ScopeArg, until: Option<String>) -> Result<Wanted, Failure> {
    let mut pairs = std::collections::BTreeMap::new();
    for w in when {
        let Some((k, v)) = w.split_once('=') else {
            return Err(fail(
                ErrorCode::InvalidArgs,
                format!("--when {w:?}: write ARG=REGEX, like command=^npm test$"),
            ));
        };
        if pairs.insert(k.to_string(), v.to_string()).is_some() {
            return Err(fail(
                ErrorCode::InvalidArgs,
                format!("--when {k}=… is given twice: give one regex per argument (alternatives with |)"),
            ));
        }
    }
    if matches != MatchArg::Rule && !pairs.is_empty() {
        return Err(fail(ErrorCode::InvalidArgs, "--when needs --match rule"));
    }
    if let Some(u) = &until
        && lasting::until_time(u).is_none_or(|t| t < std::time::SystemTime::now())
    {
        return Err(fail(
            ErrorCode::InvalidArgs,
            format!("--until {u:?}: give a future date (YYYY-MM-DD) or RFC 3339 time"),
        ));
    }
    let matches = match matches {
        MatchArg::Args => Match::Args,
        MatchArg::Rule => Match::Rule,
        MatchArg::Tool => Match::Tool,
    };
    let scope = Some(if scope == ScopeArg::Session { Scope::Session } else { Scope::Workspace });
    let probe = lasting::Entry {
        id: String::new(),
        tool: String::new(),
        tier: crate::Tier::Ask,
        matches,
        args_sha256: Some(String::new()),
        when: pairs.clone(),
        scope: Scope::Workspace,
        session: None,
        workspace: Some(String::new()),
        until: until.clone(),
        definition: String::new(),
        who: String::new(),
        via: String::new(),
        created: String::new(),
    };
    if let Some(why) = probe.problem() {
        return Err(fail(ErrorCode::InvalidArgs, why));
    }
    Ok(Wanted { matches: Some(matches), when: pairs, scope, until })
}

/// Where this answer comes from: the terminal, else the command line.
fn via() -> String {
    use std::io::IsTerminal as _;
    match std::fs::read_link("/proc/self/fd/0") {
        Ok(tty) if std::io::stdin().is_terminal() => format!("terminal {}", tty.display()),
        _ => format!("command line (pid {})", std::process::id()),
    }
}

fn describe(p: &Pending) -> String {
    let mut out = format!(
        "approval {}\n  tool      {} (tier {}, set at {})\n  client    {}\n  session   {}\n  waiting   {}s, answer within {}s\n\nArguments:\n{}\n",
        p.id,
        p.tool,
        p.tier,
        p.location,
        p.client,
        p.session,
        now_ms().saturating_sub(p.created_ms) / 1000,
        p.expires_ms.saturating_sub(now_ms()) / 1000,
        p.args_text
    );
    if !p.preview.is_empty() {
        out.push_str(&format!("\n{}\n", p.preview));
    }
    out.push_str(&format!(
        "\nwarden approvals approve {id}   |   reject {id} [--reason TEXT]   |   always {id} [--match args|rule|tool]\n",
        id = p.id
    ));
    out
}

/// The lasting approvals file of the policy in use, if it has a file.
fn lasting_file(s: &Session) -> Result<Option<PathBuf>, Failure> {
    let (_, origin, dir) = s.policy_source()?;
    Ok((origin != crate::policy::DEFAULT_POLICY_NAME).then(|| dir.join(crate::policy::APPROVALS_FILE)))
}

fn list(s: &Session, live: &Live, json: bool, with_lasting: bool) -> Result<u8, Failure> {
    let pending = live.inbox().list();
    let lasting = match (with_lasting, lasting_file(s)?) {
        (true, Some(f)) => lasting::read(&f).map_err(|e| fail(ErrorCode::InvalidArgs, e))?,
        _ => Vec::new(),
    };
    if json {
        let mut doc = json!({"pending": pending});
        if with_lasting {
            doc["lasting"] = serde_json::to_value(&lasting).unwrap_or_default();
        }
        print_json(&doc);
        return Ok(0);
    }
    if pending.is_empty() {
        println!("no call waits for approval in {}", live.path().display());
    }
    for p in &pending {
        let first = p.args_text.lines().map(str::trim).collect::<Vec<_>>().join(" ");
        let first: String = if first.chars().count() > 60 {
            format!("{}…", first.chars().take(59).collect::<String>())
        } else {
            first
        };
        println!(
            "{}  {:<20} {:<7} {:>4}s  {}  {first}",
            p.id,
            p.tool,
            p.tier,
            now_ms().saturating_sub(p.created_ms) / 1000,
            p.client
        );
    }
    if with_lasting {
        println!("\nlasting approvals ({}):", lasting.len());
        let now = std::time::SystemTime::now();
        for e in &lasting {
            println!("{}", lasting_line(e, now));
        }
    }
    Ok(0)
}

/// One lasting approval in a line (also for `policy check`).
pub(super) fn lasting_line(e: &lasting::Entry, now: std::time::SystemTime) -> String {
    let what = match e.matches {
        Match::Args => {
            format!("arguments sha256 {}", e.args_sha256.as_deref().unwrap_or("?").chars().take(12).collect::<String>())
        }
        Match::Rule => {
            let w: Vec<String> = e.when.iter().map(|(k, v)| format!("{k}={v}")).collect();
            format!("rule {}", w.join(" "))
        }
        Match::Tool => "every call".to_string(),
    };
    let scope = match e.scope {
        Scope::Session => format!("session {}", e.session.as_deref().unwrap_or("?")),
        Scope::Workspace => format!("workspace {}", e.workspace.as_deref().unwrap_or("?")),
    };
    let until = e.until.as_deref().map(|u| format!(" until {u}")).unwrap_or_default();
    let state = if e.expired(now) { " [expired]" } else { "" };
    format!("  {}  {:<20} {what}; {scope}{until}; by {} via {}{state}", e.id, e.tool, e.who, e.via)
}

fn revoke(s: &Session, id: &str) -> Result<u8, Failure> {
    let Some(file) = lasting_file(s)? else {
        return Err(fail(ErrorCode::NotFound, "the embedded default policy keeps no lasting approvals"));
    };
    let removed = lasting::update(&file, |entries| {
        let before = entries.len();
        entries.retain(|e| e.id != id);
        Ok(before != entries.len())
    })
    .map_err(|e| fail(ErrorCode::InvalidArgs, e))?;
    if !removed {
        return Err(fail(
            ErrorCode::NotFound,
            format!("no lasting approval {id} in {} (`warden approvals list --lasting`)", file.display()),
        ));
    }
    println!("revoked {id} from {}", file.display());
    Ok(0)
}

/// The lasting approvals of `policy` (`None` without a policy file), each
/// with why it can no longer apply, judged against `catalog`.
pub(super) type Standing = (PathBuf, Vec<(lasting::Entry, Option<String>)>);

pub(super) fn standing(policy: &crate::Policy, catalog: &crate::catalog::Catalog) -> Option<Result<Standing, String>> {
    let path = policy.approvals_path()?;
    let entries = match lasting::read(&path) {
        Ok(e) => e,
        Err(e) => return Some(Err(e)),
    };
    let now = std::time::SystemTime::now();
    let judged = entries
        .into_iter()
        .map(|e| {
            let definition = catalog.entries().find(|c| c.spec.name == e.tool).and_then(|c| {
                c.state.as_ref().ok().map(|r| lasting::definition(policy, &c.spec, &r.description, &r.schema))
            });
            let why = lasting::inert(&e, definition.as_deref(), now);
            (e, why)
        })
        .collect();
    Some(Ok((path, judged)))
}
