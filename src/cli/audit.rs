//! `warden audit`: the host, each tool's layers, the policy's findings, the self-test.

use std::path::Path;

use super::args::{AuditFormat, FailOn};
use crate::policy::Policy;
use crate::runtime::server::ServerPool;
use crate::runtime::wasm::ComponentRuntime;

use super::session::{Session, cache_dir, catalog_of};
use super::{Failure, absolute, fail, print_json};
use crate::error::ErrorCode;

pub(super) fn audit(s: &Session, format: AuditFormat, fail_on: FailOn, self_test: bool) -> Result<u8, Failure> {
    use crate::checkup::{Report, escapes, host::HostReport, sarif, selftest, tool_layers};
    use crate::lint::{Severity, Surroundings, lint};
    let ctx = s.context()?;
    let (text, origin, dir) = s.policy_source()?;
    let host = HostReport::probe();
    let loaded = match Policy::from_text(&text, &origin, &dir, &ctx) {
        Ok(policy) => Ok(s.effective(policy, &ctx)?),
        Err(e) => Err(e),
    };
    let mut tool_names = None;
    let mut lasting = None;
    let (mut provenance, mut plugin_imports) = (Vec::new(), Default::default());
    let (tools, descriptions, poisoned) = match &loaded {
        Ok(policy) => {
            let runtime = ComponentRuntime::new(cache_dir()).map_err(|e| fail(ErrorCode::Internal, e.message))?;
            let (catalog, servers) = catalog_of(policy, &runtime);
            let descriptions = catalog
                .entries()
                .filter(|e| e.spec.description.is_none())
                .filter_map(|e| e.state.as_ref().ok().map(|r| (e.spec.name.clone(), r.description.clone())))
                .collect();
            let poisoned = poisoned_definitions(policy, &runtime, &servers);
            lasting = match super::approvals::standing(policy, &catalog) {
                Some(Ok((path, entries))) => {
                    let text = std::fs::read_to_string(&path).unwrap_or_default();
                    Some((path, text, entries))
                }
                Some(Err(e)) => {
                    eprintln!("warning: {e}");
                    None
                }
                None => None,
            };
            (provenance, plugin_imports) = plugin_provenance(policy, &runtime);
            // Under a profile, servers it cannot use were not started: their names are unknown.
            if policy.profile.is_none() {
                tool_names = Some(catalog.entries().map(|e| e.spec.name.clone()).collect());
            }
            (tool_layers(policy, &catalog, &host), descriptions, poisoned)
        }
        Err(_) => (Vec::new(), Default::default(), Vec::new()),
    };
    let mut own = Vec::new();
    if origin != crate::policy::DEFAULT_POLICY_NAME {
        own.push(("policy file".to_string(), absolute(Path::new(&origin))));
    }
    own.extend(s.own_files());
    let around = Surroundings {
        refused: loaded.as_ref().err().cloned(),
        descriptions,
        poisoned,
        own_files: own,
        hard_links: Some(crate::checkup::links::hard_links),
        tool_names,
        no_net_namespace: warden_sandbox::namespaces::NsSupport::probe(nix::unistd::geteuid().is_root()).reason,
        plugin_imports,
        lasting,
    };
    let mut findings = lint(&text, &origin, &ctx, &around);
    let mode = loaded.as_ref().map(|p| p.mode).unwrap_or_default();
    let cases = if self_test {
        Some(
            selftest::run(mode, cache_dir())
                .map_err(|e| fail(ErrorCode::Internal, format!("the self-test cannot run: {e}")))?,
        )
    } else {
        None
    };
    if let Some(c) = &cases {
        findings.extend(escapes(c, &origin));
    }
    let report = Report { policy: origin, host, tools, provenance, self_test: cases, findings };
    match format {
        AuditFormat::Text => print!("{}", report.to_text()),
        AuditFormat::Json => print_json(&serde_json::to_value(&report).unwrap_or_default()),
        AuditFormat::Sarif => print_json(&sarif::to_sarif(&report)),
    }
    let threshold = match fail_on {
        FailOn::Error => Some(Severity::Error),
        FailOn::Warning => Some(Severity::Warning),
        FailOn::Never => None,
    };
    Ok(u8::from(report.fails(threshold)))
}

/// The third-party definitions of `policy`'s plugins and servers that address
/// the model, and that the policy neither replaces nor denies (WL111).
pub(super) fn poisoned_definitions(
    policy: &Policy,
    runtime: &ComponentRuntime,
    servers: &ServerPool,
) -> Vec<(&'static str, String, String, crate::poisoning::Poisoned)> {
    use crate::policy::PluginKind;
    let mut out = Vec::new();
    let mut judge = |section: &'static str, owner: &str, name: String, def: &crate::runtime::ToolDef| {
        let Some(p) = crate::poisoning::definition_poisoning(&def.description, &def.input_schema) else { return };
        if p.answered_by(policy.tools.get(&name)) {
            return;
        }
        out.push((section, owner.to_string(), name, p));
    };
    for p in policy.plugins.values() {
        if !p.source.is_third_party() || p.kind == PluginKind::Command {
            continue;
        }
        let Ok(loaded) = runtime.load(p) else { continue };
        for def in &loaded.tools {
            // Only the tools the policy offers reach the model.
            if policy.tools.get(&def.name).is_some_and(|t| t.plugin() == Some(p.name.as_str())) {
                judge("plugins", &p.name, def.name.clone(), def);
            }
        }
    }
    for s in policy.servers.values() {
        for def in servers.definitions(s).unwrap_or_default() {
            judge("servers", &s.name, s.tool_spec(&def.name).name, &def);
        }
    }
    out
}

/// Each plugin's provenance as it loads here, and the imports of each
/// third-party component (for WL122), by plugin name.
fn plugin_provenance(
    policy: &Policy,
    runtime: &ComponentRuntime,
) -> (Vec<crate::checkup::PluginProvenance>, std::collections::BTreeMap<String, Vec<String>>) {
    let mut imports = std::collections::BTreeMap::new();
    let rows = policy
        .plugins
        .values()
        .map(|p| {
            // A file or a registry's component, read with load's own checks (a FIFO in a file's place
            // does not hang the audit; a registry's bytes must match their digest).
            if p.source.is_third_party()
                && let Ok(found) = runtime.plugin_imports(p)
            {
                imports.insert(p.name.clone(), found);
            }
            let loaded = runtime.load(p);
            crate::checkup::PluginProvenance {
                plugin: p.name.clone(),
                source: crate::runtime::signature::source_label(&p.source),
                sha256: loaded.as_ref().ok().map(|l| l.sha256.clone()),
                signer: loaded.as_ref().ok().and_then(|l| l.signer.as_ref().map(|s| s.fingerprint.clone())),
                status: loaded.map_or_else(|e| e.message, |_| "loaded".into()),
            }
        })
        .collect();
    (rows, imports)
}
