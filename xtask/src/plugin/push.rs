//! `cargo xtask plugin push NAME|FILE.wasm oci://HOST[:PORT]/REPO[:TAG]`: publish
//! a built plugin with `warden plugin push`, with `FILE.wasm.sig` (an armored
//! sshsig signature) as its signature annotation when that file exists, and
//! print the `source = "oci://…@sha256:…"` line that pins it by digest.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use super::{Layout, Opts, USAGE, absolute, warden};

/// Runs the push.
pub(super) fn push(opts: &Opts) -> Result<(), String> {
    let [what, target] = opts.names.as_slice() else {
        return Err(format!("plugin push: give NAME (or FILE.wasm) and oci://HOST/REPO[:TAG]\n{USAGE}"));
    };
    if !target.starts_with("oci://") {
        return Err(format!("plugin push: {target:?} is not an oci://HOST/REPO[:TAG] reference\n{USAGE}"));
    }
    if opts.all || opts.offline || opts.target_dir.is_some() {
        return Err(format!("plugin push: only --dir and --warden apply\n{USAGE}"));
    }
    let wasm: PathBuf =
        if what.ends_with(".wasm") { absolute(std::path::Path::new(what))? } else { Layout::new(opts)?.wasm(what) };
    if !wasm.is_file() {
        return Err(format!(
            "plugin push: {} does not exist; build it first (`cargo xtask plugin build {what}`)",
            wasm.display()
        ));
    }
    let mut sig = wasm.clone().into_os_string();
    sig.push(".sig");
    let sig = PathBuf::from(sig);
    let warden = warden(opts)?;
    let mut cmd = Command::new(&warden);
    cmd.args(["plugin", "push"]).arg(&wasm).arg(target);
    if sig.is_file() {
        eprintln!("signing with {} (the manifest's dev.warden.signature.sshsig annotation)", sig.display());
        cmd.arg("--signature").arg(&sig);
    } else {
        eprintln!("no {}: pushing unsigned (sign it with ssh-keygen -Y sign -n warden-plugin)", sig.display());
    }
    let status =
        cmd.stdin(Stdio::null()).status().map_err(|e| format!("plugin push: cannot run {}: {e}", warden.display()))?;
    if !status.success() {
        return Err(format!("plugin push: `warden plugin push` failed ({status}); its error is above"));
    }
    Ok(())
}
