//! `[plugins.NAME] signers` and `signature`: who must have signed a plugin's
//! component, and where its signature is. An empty list, a wildcard or a
//! malformed key never means "any signer": each is a load error.

use super::*;
use crate::signer::{MAX_SIGNERS, parse_entry};

/// A plugin's `signers` (each entry checked, trimmed) and its signature file.
pub(super) fn plugin_signers(
    c: &mut Checker<'_>,
    name: &str,
    p: &crate::schema::RawPlugin,
    source: &PluginSource,
    dir: &Path,
) -> (Vec<String>, Option<PathBuf>) {
    let Some(raw) = &p.signers else {
        if let Some(sig) = &p.signature {
            c.problem(
                sig.span(),
                format!(
                    "plugin {name}: `signature` without `signers`: nobody would check it; add signers = \
                     [\"ssh-ed25519 AAAA… comment\"] to [plugins.{name}], or remove signature"
                ),
            );
        }
        return (Vec::new(), None);
    };
    if let PluginSource::Builtin(_) = source {
        c.problem(raw.span(), format!("plugin {name}: builtin plugins are part of warden and take no `signers`"));
        return (Vec::new(), None);
    }
    let entries = raw.get_ref();
    if entries.is_empty() || entries.len() > MAX_SIGNERS {
        c.problem(
            raw.span(),
            format!(
                "signers of [plugins.{name}]: {} entries; list 1 to {MAX_SIGNERS} keys (never any signer), or \
                 remove signers to accept the plugin unsigned",
                entries.len()
            ),
        );
    }
    let mut signers = Vec::new();
    for entry in entries {
        match parse_entry(entry) {
            Ok(_) => signers.push(entry.trim().to_string()),
            Err(why) => c.problem(raw.span(), format!("signers of [plugins.{name}]: {why}")),
        }
    }
    let signature = match (&p.signature, source) {
        (Some(sig), PluginSource::Oci(_)) => {
            c.problem(
                sig.span(),
                format!(
                    "plugin {name}: `signature` applies to file sources; an OCI component's signature is its \
                     manifest's dev.warden.signature.sshsig annotation (`warden plugin push --signature` sets it): \
                     remove signature from [plugins.{name}]"
                ),
            );
            None
        }
        (Some(sig), _) => Some(dir.join(sig.get_ref())),
        (None, PluginSource::Oci(_)) => None,
        (None, PluginSource::File(path)) => {
            let mut with_sig = path.clone().into_os_string();
            with_sig.push(".sig");
            Some(PathBuf::from(with_sig))
        }
        (None, PluginSource::Builtin(_)) => None,
    };
    (signers, signature)
}
