//! Credentials (`[credentials.NAME]`): one nobody can use (WL125), a holder
//! that may also send what the credential reads elsewhere (WL126), body
//! substitution (WL127), a holder that sets its own CA variables (WL128), and
//! a source file some tool can read (WL129).

use crate::policy::Context;
use crate::policy::schema::{RawPolicy, RawTool};

use super::{Linter, expand_grant};

/// Tools and servers with their `credentials = [...]`.
fn holders(raw: &RawPolicy) -> impl Iterator<Item = (String, &RawTool)> {
    let tools = raw.tools.iter().map(|(n, t)| (format!("tool {}", n.get_ref()), t.get_ref()));
    let servers = raw.servers.iter().map(|(n, t)| (format!("server {}", n.get_ref()), t.get_ref()));
    tools.chain(servers)
}

pub(super) fn lint_credentials(l: &mut Linter<'_>, raw: &RawPolicy, ctx: &Context) {
    for (name, cred) in &raw.credentials {
        let n = name.get_ref();
        let c = cred.get_ref();
        let held = holders(raw).any(|(_, t)| t.credentials.iter().any(|h| h.get_ref() == n));
        if c.bind.is_empty() || !held {
            let why = if c.bind.is_empty() { "is bound to no host" } else { "is held by no tool or server" };
            l.add("WL125", name.span(), format!("credential {n} {why}: nothing can use it"));
        }
        for b in &c.bind {
            if let Some(body) = &b.get_ref().body
                && *body.get_ref()
            {
                l.add(
                    "WL127",
                    body.span(),
                    format!(
                        "credential {n}: body = true puts the real value into request bodies toward {}, which may \
                         store it where the tool can read it back",
                        b.get_ref().host.get_ref()
                    ),
                );
            }
        }
        let Some(file) =
            c.from.get_ref().file.as_ref().and_then(|f| crate::policy::compile::expand_text(f, ctx, false).ok())
        else {
            continue;
        };
        let file = std::path::PathBuf::from(file);
        for (who, t) in holders(raw) {
            let grants = t.fs.read.iter().chain(&t.fs.write);
            if let Some(g) = grants.filter_map(|g| expand_grant(g, ctx)).find(|g| file.starts_with(g)) {
                l.add(
                    "WL129",
                    c.from.span(),
                    format!("credential {n}: its file {} lies in {who}'s grant {}", file.display(), g.display()),
                );
            }
        }
    }
    for (who, t) in holders(raw) {
        let Some(first) = t.credentials.first() else { continue };
        let binds: Vec<(String, u16)> = t
            .credentials
            .iter()
            .filter_map(|h| raw.credentials.iter().find(|(n, _)| n.get_ref() == h.get_ref()))
            .flat_map(|(_, c)| c.get_ref().bind.iter())
            .map(|b| (b.get_ref().host.get_ref().to_ascii_lowercase(), b.get_ref().port.unwrap_or(443)))
            .collect();
        let others: Vec<&str> = t
            .net
            .connect
            .iter()
            .map(|g| g.get_ref().as_str())
            .filter(|g| !binds.iter().any(|(h, p)| *g == format!("{h}:{p}")))
            .collect();
        if !others.is_empty() || !t.net.unix.is_empty() {
            let mut reach: Vec<String> = others.iter().map(|s| s.to_string()).collect();
            reach.extend(t.net.unix.iter().map(|u| format!("unix {}", u.get_ref())));
            l.add(
                "WL126",
                first.span(),
                format!(
                    "{who} holds a credential and may also reach {}: what the credential reads can leave that way",
                    reach.join(", ")
                ),
            );
        }
        let ca_vars = warden_runtime_ca_variables();
        let sets: Vec<&str> = t
            .env
            .set
            .keys()
            .map(String::as_str)
            .chain(t.env.pass.iter().map(|p| p.get_ref().as_str()))
            .filter(|k| ca_vars.contains(k))
            .collect();
        if !sets.is_empty() {
            l.add(
                "WL128",
                first.span(),
                format!(
                    "{who} holds a credential but sets {} itself: its clients will not trust warden's interception",
                    sets.join(", ")
                ),
            );
        }
    }
}

fn warden_runtime_ca_variables() -> Vec<&'static str> {
    crate::runtime::credentials::CA_VARIABLES.iter().map(|(v, _)| *v).collect()
}
