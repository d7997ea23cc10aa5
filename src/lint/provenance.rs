//! Findings about where plugins come from: a third-party plugin nobody's
//! signature vouches for (WL121), and a component that imports network
//! interfaces none of its tools is granted (WL122). The imports are host
//! facts `warden audit` reads from the components ([`super::Surroundings`]).

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
