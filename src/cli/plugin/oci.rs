//! `warden plugin push FILE oci://HOST/REPO[:TAG] [--signature SIG]` and
//! `warden plugin pull oci://HOST/REPO@sha256:…`: publish a component in the
//! CNCF Wasm OCI layout, and fetch one into the cache as a policy load would
//! (both digests checked). The client is `warden_runtime::oci`.

use std::io::Read;
use std::path::Path;

use crate::error::ErrorCode;
use crate::runtime::oci::{self, MAX_SIGNATURE, OciRef, OciTarget};
use crate::runtime::wasm::{ComponentRuntime, MAX_COMPONENT_FILE};

use super::super::session::cache_dir;
use super::super::{Failure, fail};

/// Reads at most `cap` bytes of `path`; more is an error naming the file.
fn read_capped(path: &Path, cap: u64, what: &str) -> Result<Vec<u8>, Failure> {
    let cannot = |e: std::io::Error| fail(ErrorCode::InvalidArgs, format!("cannot read {}: {e}", path.display()));
    let mut bytes = Vec::new();
    std::fs::File::open(path).map_err(cannot)?.take(cap + 1).read_to_end(&mut bytes).map_err(cannot)?;
    if bytes.len() as u64 > cap {
        return Err(fail(
            ErrorCode::InvalidArgs,
            format!("{} is larger than the {cap} bytes of {what}", path.display()),
        ));
    }
    Ok(bytes)
}

/// The armored signature text of `path`, checked for its shape (not verified: who signed is the policy's call).
fn signature_text(path: &Path) -> Result<String, Failure> {
    let bytes = read_capped(path, MAX_SIGNATURE as u64, "a signature")?;
    let text = String::from_utf8(bytes).map_err(|_| {
        fail(ErrorCode::InvalidArgs, format!("{} is not text: not an armored signature", path.display()))
    })?;
    if !text.contains("-----BEGIN SSH SIGNATURE-----") || !text.contains("-----END SSH SIGNATURE-----") {
        return Err(fail(
            ErrorCode::InvalidArgs,
            format!(
                "{} is not an armored SSH signature; make one with \
                 `ssh-keygen -Y sign -f KEY -n warden-plugin FILE.wasm`",
                path.display()
            ),
        ));
    }
    Ok(text)
}

/// `warden plugin push FILE TARGET [--signature SIG]`.
pub(in crate::cli) fn push(file: &Path, target: &str, signature: Option<&Path>) -> Result<u8, Failure> {
    let target = OciTarget::parse(target)
        .map_err(|e| fail(ErrorCode::InvalidArgs, format!("{target}: {e} (oci://HOST[:PORT]/REPO[:TAG])")))?;
    let bytes = read_capped(file, MAX_COMPONENT_FILE, "a component warden loads")?;
    let signature = signature.map(signature_text).transpose()?;
    let runtime = ComponentRuntime::new(cache_dir()).map_err(|e| fail(ErrorCode::Internal, e.message))?;
    let not_component = |e: crate::error::CallError| {
        fail(
            ErrorCode::InvalidArgs,
            format!("{}: {} (push takes a component, wasm32-wasip2)", file.display(), e.message),
        )
    };
    let imports = runtime.imports(&bytes).map_err(not_component)?;
    let exports = runtime.exports(&bytes).map_err(not_component)?;
    let pushed = oci::push(&target, &bytes, &imports, &exports, signature.as_deref()).map_err(|e| {
        fail(
            ErrorCode::ExecutionFailed,
            format!("cannot push {} to {}/{}: {e}", file.display(), target.registry, target.repository),
        )
    })?;
    eprintln!(
        "pushed {} ({} bytes{}) to {}/{}",
        file.display(),
        bytes.len(),
        if signature.is_some() { ", signed" } else { "" },
        target.registry,
        target.repository
    );
    println!("source = \"{}\"", pushed.reference);
    println!("sha256 = \"{}\"", pushed.sha256);
    Ok(0)
}

/// `warden plugin pull REFERENCE`.
pub(in crate::cli) fn pull(reference: &str) -> Result<u8, Failure> {
    let r = OciRef::parse(reference).map_err(|e| fail(ErrorCode::InvalidArgs, format!("{reference}: {e}")))?;
    let Some(cache) = cache_dir() else {
        return Err(fail(
            ErrorCode::InvalidArgs,
            "pull stores into the cache, and caching is off (WARDEN_CACHE_DIR is empty); set WARDEN_CACHE_DIR to a \
             directory",
        ));
    };
    let fetched = oci::fetch(&r, Some(&cache)).map_err(|e| {
        let code = if e.integrity { ErrorCode::Denied } else { ErrorCode::ExecutionFailed };
        fail(code, format!("{r}: {}", e.message))
    })?;
    let Some(path) = fetched.cached else {
        return Err(fail(
            ErrorCode::ExecutionFailed,
            format!(
                "{r}: fetched and checked, but not stored: the cache {} is not usable (see the warning)",
                cache.display()
            ),
        ));
    };
    println!("path       {}", path.display());
    println!("sha256     {}", fetched.sha256);
    println!("manifest   {}", fetched.manifest_digest);
    println!(
        "signature  {}",
        if fetched.signature.is_some() { "present (dev.warden.signature.sshsig)" } else { "none" }
    );
    Ok(0)
}
