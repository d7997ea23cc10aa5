//! `cargo xtask plugin sign NAME|FILE.wasm --key KEY`: sign a built component
//! with an OpenSSH key for warden's `signers`.
//!
//! `ssh-keygen -Y sign -n warden-plugin` does the signing (passphrases, the
//! agent and hardware keys work; nothing here reads a private key); the
//! signature is written beside the component as `FILE.wasm.sig` only after
//! `warden plugin inspect` found it valid for the component's bytes, and the
//! `signers = [...]` line to put in the policy is printed.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

use super::{Layout, USAGE, parse, warden};

/// The namespace warden checks (`ssh-keygen -n`).
const NAMESPACE: &str = "warden-plugin";
/// The most signature text read from ssh-keygen.
const MAX_SIGNATURE: u64 = 16 << 10;

/// Runs `cargo xtask plugin sign ARGS`.
pub(super) fn sign(args: &[String]) -> Result<(), String> {
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!("{USAGE}");
        return Ok(());
    }
    let (key, rest) = key_arg(args)?;
    let opts = parse(&rest)?;
    let [arg] = opts.names.as_slice() else {
        return Err(format!("plugin sign: give exactly one NAME or FILE.wasm\n{USAGE}"));
    };
    let wasm = if arg.ends_with(".wasm") || arg.contains('/') {
        PathBuf::from(arg)
    } else {
        let built = Layout::new(&opts)?.wasm(arg);
        if !built.is_file() {
            return Err(format!(
                "plugin sign: {} does not exist; build it first (cargo xtask plugin build {arg}) and sign what \
                 you reviewed",
                built.display()
            ));
        }
        built
    };
    if !wasm.is_file() {
        return Err(format!("plugin sign: {}: no such file", wasm.display()));
    }
    let text = ssh_sign(&key, &wasm)?;
    let mut sig = wasm.clone().into_os_string();
    sig.push(".sig");
    let sig = PathBuf::from(sig);
    let mut pending = sig.clone().into_os_string();
    pending.push(".new");
    let pending = PathBuf::from(pending);
    std::fs::write(&pending, &text).map_err(|e| format!("plugin sign: cannot write {}: {e}", pending.display()))?;
    let checked = check(&warden(&opts)?, &wasm, &pending);
    let key_line = match checked {
        Ok(k) => k,
        Err(e) => {
            let _ = std::fs::remove_file(&pending);
            return Err(e);
        }
    };
    std::fs::rename(&pending, &sig).map_err(|e| format!("plugin sign: cannot write {}: {e}", sig.display()))?;
    eprintln!("signed {} → {}", wasm.display(), sig.display());
    let comment = comment_of(&key);
    let entry = if comment.is_empty() { key_line } else { format!("{key_line} {comment}") };
    println!("signers = [{}]", Value::from(entry));
    Ok(())
}

/// `--key KEY` (or `--key=KEY`) taken out of `args`; the rest is parsed as other subcommands' options.
fn key_arg(args: &[String]) -> Result<(PathBuf, Vec<String>), String> {
    let (mut key, mut rest) = (None, Vec::new());
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--key" {
            key = it.next().filter(|k| !k.is_empty()).map(PathBuf::from);
            if key.is_none() {
                return Err(format!(
                    "plugin sign: --key needs a private key file (or its .pub with an agent)\n{USAGE}"
                ));
            }
        } else if let Some(k) = a.strip_prefix("--key=") {
            key = Some(PathBuf::from(k));
        } else {
            rest.push(a.clone());
        }
    }
    let key = key.ok_or_else(|| format!("plugin sign: --key KEY is required (e.g. ~/.ssh/id_ed25519)\n{USAGE}"))?;
    Ok((key, rest))
}

/// `ssh-keygen -Y sign -f KEY -n warden-plugin -` over the component's bytes:
/// the armored signature (ssh-keygen asks for a passphrase on the terminal).
fn ssh_sign(key: &Path, wasm: &Path) -> Result<String, String> {
    let input = std::fs::File::open(wasm).map_err(|e| format!("plugin sign: cannot read {}: {e}", wasm.display()))?;
    let mut child = Command::new("ssh-keygen")
        .args(["-q", "-Y", "sign", "-n", NAMESPACE, "-f"])
        .arg(key)
        .arg("-")
        .stdin(input)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("plugin sign: cannot run ssh-keygen ({e}); install openssh-client"))?;
    let mut text = String::new();
    if let Some(out) = child.stdout.take() {
        out.take(MAX_SIGNATURE).read_to_string(&mut text).map_err(|e| format!("plugin sign: ssh-keygen: {e}"))?;
    }
    let status = child.wait().map_err(|e| format!("plugin sign: ssh-keygen: {e}"))?;
    if !status.success() || !text.contains("-----BEGIN SSH SIGNATURE-----") {
        return Err(format!(
            "plugin sign: `ssh-keygen -Y sign -f {} -n {NAMESPACE}` failed ({status}); is {} an ed25519 private \
             key (ssh-keygen -t ed25519), or its .pub with the key in ssh-agent?",
            key.display(),
            key.display()
        ));
    }
    Ok(text)
}

/// Whether `warden plugin inspect` finds the signature valid for the
/// component: the signer's key line, or why not.
fn check(warden: &Path, wasm: &Path, sig: &Path) -> Result<String, String> {
    let out = Command::new(warden)
        .args(["plugin", "inspect", "--json", "--signature"])
        .arg(sig)
        .arg(wasm)
        .env("WARDEN_CACHE_DIR", "")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("plugin sign: cannot run {}: {e}", warden.display()))?;
    let doc: Value = serde_json::from_slice(&out.stdout).map_err(|_| {
        format!("plugin sign: `warden plugin inspect` failed: {}", String::from_utf8_lossy(&out.stderr).trim())
    })?;
    let sigs = doc["signatures"]["signatures"].as_array().cloned().unwrap_or_default();
    match sigs.iter().find(|s| s["valid"] == true && s["namespace"] == NAMESPACE) {
        Some(s) if s["key_type"] == "ssh-ed25519" => Ok(s["key"].as_str().unwrap_or_default().to_string()),
        Some(s) => Err(format!(
            "plugin sign: the key is {}: warden accepts ed25519 keys only; make one: ssh-keygen -t ed25519",
            s["key_type"]
        )),
        None => Err(format!(
            "plugin sign: warden does not find the new signature valid for {}: {}; nothing was written",
            wasm.display(),
            sigs.first().map_or_else(|| "no signature".into(), |s| s["problem"].to_string())
        )),
    }
}

/// The comment of `KEY.pub` (or of KEY itself when it is a .pub), if any.
fn comment_of(key: &Path) -> String {
    let public = if key.extension().is_some_and(|e| e == "pub") {
        key.to_path_buf()
    } else {
        let mut p = key.as_os_str().to_owned();
        p.push(".pub");
        PathBuf::from(p)
    };
    let text = std::fs::read_to_string(public).unwrap_or_default();
    text.lines().next().and_then(|l| l.splitn(3, ' ').nth(2)).unwrap_or("").trim().to_string()
}
