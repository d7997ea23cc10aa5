//! The signatures `warden plugin inspect` shows: each one's key, fingerprint,
//! namespace and whether it holds for the component's bytes. Who is trusted is
//! the policy's `signers`, not this listing's.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::error::ErrorCode;
use crate::runtime::signature::{Described, describe, read_signature_file};

use super::super::{Failure, fail};

/// The signature file read (if any) and what it holds.
pub(super) type Found = Option<(PathBuf, Vec<Described>)>;

/// `--signature SIG` (must exist), else `FILE.sig` when it exists.
pub(super) fn read(file: &Path, signature: Option<&Path>, bytes: &[u8]) -> Result<Found, Failure> {
    let path = signature.map_or_else(
        || {
            let mut p = file.as_os_str().to_owned();
            p.push(".sig");
            PathBuf::from(p)
        },
        Path::to_path_buf,
    );
    let text = read_signature_file(&path).map_err(|(_, msg)| fail(ErrorCode::InvalidArgs, msg))?;
    match (text, signature) {
        (Some(text), _) => Ok(Some((path.clone(), describe(bytes, &text)))),
        (None, Some(_)) => {
            Err(fail(ErrorCode::InvalidArgs, format!("the signature {} does not exist", path.display())))
        }
        (None, None) => Ok(None),
    }
}

/// 1 when a signature present does not hold for the bytes.
pub(super) fn exit_code(found: &Found) -> u8 {
    u8::from(found.as_ref().is_some_and(|(_, d)| d.iter().any(|d| !d.valid)))
}

/// The `signatures` field of `--json`: `null` when there is no signature file.
pub(super) fn to_json(found: &Found) -> Value {
    match found {
        None => Value::Null,
        Some((path, described)) => json!({"file": path.display().to_string(), "signatures": described}),
    }
}

/// The text lines: one per signature.
pub(super) fn print(found: &Found) {
    let Some((path, described)) = found else {
        println!("signature  none (sign it: cargo xtask plugin sign FILE --key KEY)");
        return;
    };
    println!("signatures {}", path.display());
    for d in described {
        let who = d.fingerprint.as_deref().unwrap_or("?");
        let ns = d.namespace.as_deref().unwrap_or("?");
        let verdict = match &d.problem {
            None => "valid for these bytes".to_string(),
            Some(why) => format!("INVALID for these bytes: {}", crate::shape::sanitize_str(why)),
        };
        let ns = crate::shape::sanitize_str(ns);
        println!("  {} {who}, namespace {ns}: {verdict}", crate::shape::sanitize_str(&d.key_type));
        if let Some(key) = &d.key {
            println!("    key: {key}");
        }
    }
}
