//! Findings about where plugins come from: a third-party plugin nobody's
//! signature vouches for (WL121), and a component that imports network
//! interfaces none of its tools is granted (WL122). The imports are host
//! facts `warden audit` reads from the components ([`super::Surroundings`]).
//! And about who said yes ahead of time: lasting approvals that can no longer
//! apply (WL123) or cover every call for ever (WL124).

use super::*;

/// The import families that reach the network.
const NET_IMPORTS: &[&str] = &["wasi:sockets/", "wasi:http/"];

/// WL121 and WL122 for each `[plugins.NAME]`.
pub(super) fn lint_plugins(l: &mut Linter<'_>, raw: &RawPolicy, around: &Surroundings) {
    for (name, plugin) in &raw.plugins {
        let p = plugin.get_ref();
        if p.source.get_ref().starts_with("builtin:") {
            continue;
        }
        if p.signers.is_none() {
            l.add(
                "WL121",
                plugin.span(),
                format!(
                    "plugin {name}: source {:?} loads whoever built it: add signers = [\"ssh-ed25519 AAAA… \
                     author\"] to [plugins.{name}] so only a component its author signed loads",
                    p.source.get_ref()
                ),
            );
        }
        let Some(imports) = around.plugin_imports.get(name) else { continue };
        let net: Vec<&str> =
            imports.iter().map(String::as_str).filter(|i| NET_IMPORTS.iter().any(|n| i.starts_with(n))).collect();
        if net.is_empty() {
            continue;
        }
        let granted = raw.tools.values().any(|t| {
            t.get_ref().plugin.as_ref().is_some_and(|p| p.get_ref() == name) && !t.get_ref().net.connect.is_empty()
        });
        if !granted {
            l.add(
                "WL122",
                plugin.span(),
                format!(
                    "plugin {name}: the component imports {} but none of its tools has net.connect: it asks for \
                     more than the policy gives it; ask its author why, or prefer a build without networking",
                    net.join(", ")
                ),
            );
        }
    }
}

/// WL123 and WL124 for each entry of `warden.approvals.toml`, at its line there.
pub(super) fn lint_lasting(l: &mut Linter<'_>, around: &Surroundings) {
    use crate::approval::lasting::Match;
    let Some((path, text, entries)) = &around.lasting else { return };
    for (e, inert) in entries {
        let needle = format!("id = \"{}\"", e.id);
        let line = text.lines().position(|l| l.trim() == needle).map_or(0, |i| i + 1);
        let mut push = |id: &'static str, message: String| {
            let r = rules::rule(id);
            l.findings.push(Finding {
                rule: r.id,
                severity: r.severity,
                message,
                file: path.display().to_string(),
                line,
                column: 1,
            });
        };
        if let Some(why) = inert {
            push(
                "WL123",
                format!("lasting approval {} of {}: {why}; `warden approvals revoke {}`", e.id, e.tool, e.id),
            );
        }
        if e.matches == Match::Tool && e.until.is_none() {
            push(
                "WL124",
                format!(
                    "lasting approval {} approves every call of {} with no end date; narrow it to a rule or give it \
                     --until, or `warden approvals revoke {}`",
                    e.id, e.tool, e.id
                ),
            );
        }
    }
}
