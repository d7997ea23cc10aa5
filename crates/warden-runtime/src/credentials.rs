//! A call's credentials ([`for_call`]): each loaded from its source (once per
//! process), its placeholder put in the variable it names, and the bundle
//! that makes programs trust warden's egress CA (the system roots and that CA,
//! one file per process) granted read-only and named in the variables real
//! clients read. The real values stay in warden; docs/credentials.md.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use crate::egress::vault::Held;
use crate::error::{CallError, ErrorCode};
use crate::policy::ToolSpec;

/// The variables that point clients at a CA bundle, each with who reads it.
/// Most *replace* the client's trust store, which is why the bundle holds the
/// system roots too.
pub const CA_VARIABLES: &[(&str, &str)] = &[
    ("SSL_CERT_FILE", "OpenSSL's default file: Python ssl/urllib, Ruby, PHP, curl, Go, uv, rustls-native-certs"),
    ("REQUESTS_CA_BUNDLE", "Python requests, and pip's vendored copy of it"),
    ("CURL_CA_BUNDLE", "the curl command; requests as a fallback"),
    ("PIP_CERT", "pip's --cert (it wins over pip.conf)"),
    ("GIT_SSL_CAINFO", "git (libcurl gets an explicit CA file, so SSL_CERT_FILE is not read)"),
    ("CARGO_HTTP_CAINFO", "cargo (libcurl)"),
    ("NODE_EXTRA_CA_CERTS", "Node and Bun: added to their bundled roots"),
    ("npm_config_cafile", "npm: a cafile in an npmrc would otherwise replace Node's store"),
    ("YARN_HTTPS_CA_FILE_PATH", "yarn (berry)"),
    ("AWS_CA_BUNDLE", "botocore and the AWS CLI"),
    ("DENO_CERT", "Deno"),
    ("BUNDLE_SSL_CA_CERT", "Ruby's bundler"),
    ("HEX_CACERTS_PATH", "Elixir's hex"),
    ("GRPC_DEFAULT_SSL_ROOTS_FILE_PATH", "gRPC's C core (Python, Ruby, PHP gRPC)"),
];

/// The bundle file of this process: written once, beside no grant warden makes.
fn bundle() -> Result<&'static PathBuf, String> {
    static BUNDLE: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUNDLE
        .get_or_init(|| {
            let ca = crate::egress::intercept::authority()?;
            let bundle = crate::egress::ca::bundle_pem(ca);
            if let Some(note) = &bundle.note {
                tracing::warn!("the CA bundle for credential interception: {note}");
            }
            let pem = bundle.pem;
            let base = std::env::var_os("XDG_RUNTIME_DIR")
                .map(PathBuf::from)
                .filter(|p| p.is_absolute() && p.is_dir())
                .unwrap_or_else(std::env::temp_dir);
            sweep(&base);
            // A name nobody can guess, made fresh, and a file made fresh in
            // it: a tool that may write where it lies (the same uid, /tmp
            // granted) cannot plant a link there for warden to write through.
            let mut rnd = [0u8; 8];
            getrandom::fill(&mut rnd).map_err(|e| format!("no randomness: {e}"))?;
            let dir = base.join(format!("warden-ca-{}-{}", std::process::id(), hex::encode(rnd)));
            use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
            std::fs::DirBuilder::new()
                .mode(0o755)
                .create(&dir)
                .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
            let path = dir.join("ca-bundle.pem");
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o644)
                .open(&path)
                .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
            std::io::Write::write_all(&mut file, pem.as_bytes())
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            Ok(path)
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// Removes the bundles of this user's warden processes that are gone (a
/// directory of its own, never a link, never another user's).
fn sweep(base: &std::path::Path) {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(base) else { return };
    let me = nix::unistd::geteuid().as_raw();
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix("warden-ca-")) else { continue };
        let pid = rest.split('-').next().unwrap_or_default();
        let mine = std::fs::symlink_metadata(e.path()).is_ok_and(|m| m.is_dir() && m.uid() == me);
        if mine && pid.parse::<u32>().is_ok() && !std::path::Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// Loads `tool`'s credentials, puts each placeholder in its variable and the
/// CA bundle in the clients' variables (where the policy sets none), and
/// grants the bundle read-only.
pub(crate) fn for_call(
    tool: &ToolSpec,
    env: &mut Vec<(String, String)>,
    dirs: &mut Vec<(PathBuf, bool)>,
) -> Result<Vec<Arc<Held>>, CallError> {
    let creds = &tool.grants.credentials;
    if creds.is_empty() {
        return Ok(Vec::new());
    }
    let held = crate::egress::vault::hold(&tool.name, creds).map_err(|e| CallError::new(ErrorCode::Denied, e))?;
    for h in &held {
        env.retain(|(k, _)| k != &h.variable);
        env.push((h.variable.clone(), h.placeholder.clone()));
    }
    let path = bundle().map_err(|e| {
        CallError::new(
            ErrorCode::SandboxUnavailable,
            format!("{}: cannot prepare credential interception: {e}", tool.name),
        )
    })?;
    let shown = path.to_string_lossy().into_owned();
    for (var, _) in CA_VARIABLES {
        if !env.iter().any(|(k, _)| k == var) {
            env.push((var.to_string(), shown.clone()));
        }
    }
    dirs.push((path.clone(), false));
    Ok(held)
}

/// Defence in depth: the tool never holds a real value, but should one reach
/// its output (an upstream that echoed it where warden could not see, over an
/// opaque tunnel), every form of it is replaced by the placeholder before the
/// result or the record holds it, and warden says so.
pub(crate) fn redact_output(tool: &str, walls: &crate::Walls, texts: [&mut String; 2]) {
    if walls.credentials.is_empty() {
        return;
    }
    let Ok(redact) = crate::egress::vault::redactor(&walls.credentials) else { return };
    for text in texts {
        let (out, hits) = redact.replace_all(text.as_bytes());
        if hits > 0 {
            tracing::warn!("{tool}: a credential's real value reached the tool's output; warden replaced it");
            *text = String::from_utf8_lossy(&out).into_owned();
        }
    }
}

/// [`redact_output`] for a wrapped server's result: every form of a held
/// credential's real value in it replaced by its placeholder (the same forms,
/// JSON-escaped ones included, so the document stays JSON).
pub(crate) fn redact_value(tool: &str, held: &[Arc<Held>], value: &mut serde_json::Value) -> Result<(), CallError> {
    if held.is_empty() {
        return Ok(());
    }
    let fail =
        |e: String| CallError::new(ErrorCode::Internal, format!("{tool}: cannot scan the result for credentials: {e}"));
    let redact = crate::egress::vault::redactor(held).map_err(fail)?;
    let text = serde_json::to_vec(value).map_err(|e| fail(e.to_string()))?;
    let (out, hits) = redact.replace_all(&text);
    if hits > 0 {
        tracing::warn!("{tool}: a credential's real value reached the server's result; warden replaced it");
        *value = serde_json::from_slice(&out).map_err(|e| fail(e.to_string()))?;
    }
    Ok(())
}
