//! `warden policy check`: validate a policy and print what it grants.

use std::path::Path;

use crate::catalog::Catalog;
use crate::policy::units::{format_duration, format_size};
use crate::policy::{Policy, Tier};
use crate::runtime::wasm::ComponentRuntime;

use super::session::{Session, cache_dir, catalog_of};
use super::{Failure, fail};
use crate::error::ErrorCode;

pub(super) fn policy_check(policy: &Policy, catalog: &Catalog) -> u8 {
    let mode = match policy.mode {
        crate::policy::SandboxMode::Enforce => "enforce",
        crate::policy::SandboxMode::BestEffort => "best-effort",
    };
    println!("policy {} (sandbox mode {mode})", policy.origin);
    if !policy.floors.is_empty() {
        println!(
            "managed floors: {} (the stricter always wins; `warden policy explain TOOL` says which layer decided each key)",
            policy.floors.join(", ")
        );
    }
    let unmatched = crate::policy::floor::apply::UNMATCHED;
    for n in policy.floor_notes.get("").into_iter().flatten().filter(|n| n.key == unmatched) {
        eprintln!(
            "warning: the managed floor's {} ({}) names no tool of this policy: a tool under another name is \
             bounded only by [tools.\"*\"] and [defaults] tier",
            n.asked, n.by
        );
    }
    if let Some(p) = &policy.profile {
        println!("profile {} ({}): {}", p.name, p.location, p.tools.join(", "));
        if let Some(d) = &p.description {
            println!("  {}", crate::shape::sanitize_str(d));
        }
    }
    // A profile's pattern that offers nothing is a mistake worth seeing (WL118).
    // Under a profile, servers it cannot use were not started: judge only its own patterns.
    let judged = policy.profiles.values().filter(|p| policy.profile.as_ref().is_none_or(|s| s.name == p.name));
    for p in judged {
        for pattern in &p.tools {
            if !catalog.entries().any(|e| crate::policy::glob::matches(pattern, &e.spec.name)) {
                eprintln!("warning: profile {} ({}): {pattern:?} matches no tool of this policy", p.name, p.location);
            }
        }
    }
    println!("{:<18} {:<8} {:<9} {:<7} {:<40} RULES", "TOOL", "TIER", "TIMEOUT", "MEMORY", "GRANTS");
    let mut broken = 0;
    for e in catalog.entries() {
        let grants = e.spec.grant_words(true);
        println!(
            "{:<18} {:<8} {:<9} {:<7} {:<40} {}",
            e.spec.name,
            e.spec.tier.as_str(),
            format_duration(e.spec.limits.timeout),
            format_size(e.spec.limits.memory),
            if grants.is_empty() { "none".to_string() } else { grants.join(", ") },
            e.spec.rules.len()
        );
        if e.spec.tier != Tier::Deny {
            let mechanism = crate::checkup::paths_mechanism(&e.spec);
            match crate::runtime::protect::preview(&e.spec) {
                Ok(p) => {
                    for line in p.summary() {
                        println!("  {line} [{mechanism}]");
                    }
                }
                Err(why) => println!("  protected and denied paths: {why}"),
            }
            if !e.spec.grants.net.is_empty() {
                println!("  network: {}", crate::checkup::egress_mechanism(&e.spec));
            }
            for c in &e.spec.grants.credentials {
                println!("  credential {}: {} sees a placeholder; {}", c.name, c.variable, bind_words(c));
            }
        }
        if let Err(err) = &e.state
            && e.spec.tier != Tier::Deny
        {
            broken += 1;
            eprintln!("error: {}", err.message);
        }
    }
    print_lasting(policy, catalog);
    if broken > 0 {
        eprintln!("invalid: {broken} tool(s) cannot be used");
        1
    } else {
        println!("valid: {} tool(s)", catalog.entries().count());
        0
    }
}

/// `warden policy check [FILE]`: exit 0 valid, 1 invalid.
pub(super) fn check(s: &Session, file: Option<&Path>) -> Result<u8, Failure> {
    let ctx = s.context()?;
    let policy = match file {
        Some(f) => {
            Policy::load(f, &ctx).map_err(|e| e.to_string()).and_then(|p| s.effective(p, &ctx).map_err(|f| f.message))
        }
        None => s.load_policy(&ctx).map_err(|f| f.message),
    };
    let policy = match policy {
        Ok(p) => p,
        Err(message) => {
            eprintln!("{message}");
            return Ok(1);
        }
    };
    let runtime = ComponentRuntime::new(cache_dir()).map_err(|e| fail(ErrorCode::Internal, e.message))?;
    let (catalog, _servers) = catalog_of(&policy, &runtime);
    Ok(policy_check(&policy, &catalog))
}

/// Where a credential's real value may go, in words.
fn bind_words(c: &crate::policy::Credential) -> String {
    let binds: Vec<String> = c
        .binds
        .iter()
        .map(|b| {
            let mut s = format!("{}:{} as {}", b.host, b.port, b.inject);
            if !b.methods.is_empty() {
                s.push_str(&format!(" for {}", b.methods.join("/")));
            }
            if !b.paths.is_empty() {
                s.push_str(&format!(" under {}", b.paths.join(" ")));
            }
            if b.always {
                s.push_str(" (added when absent)");
            }
            if b.body {
                s.push_str(" (and in bodies)");
            }
            s
        })
        .collect();
    format!("the real value ({}) goes only to {}", c.source, binds.join("; "))
}

/// The lasting approvals kept beside the policy, each with whether it still applies.
fn print_lasting(policy: &Policy, catalog: &Catalog) {
    match super::approvals::standing(policy, catalog) {
        None => {}
        Some(Err(e)) => eprintln!("warning: {e}"),
        Some(Ok((path, entries))) if !entries.is_empty() => {
            println!("lasting approvals ({}): {}", path.display(), entries.len());
            let now = std::time::SystemTime::now();
            for (e, inert) in &entries {
                let state = match inert {
                    None => "applies".to_string(),
                    Some(why) => format!("does not apply: {why}; `warden approvals revoke {}`", e.id),
                };
                println!("{} [{state}]", super::approvals::lasting_line(e, now));
            }
        }
        Some(Ok(_)) => {}
    }
}
