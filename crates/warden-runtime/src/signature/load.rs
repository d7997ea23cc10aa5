//! The signature step of loading a plugin: after its size and sha256 pin,
//! before anything compiles it. The text comes from where the source keeps it
//! ([`signature_text`]: a file beside the component, nothing for builtins);
//! [`check`] takes the text whatever its origin, so a source that carries its
//! signature elsewhere (a registry's manifest) passes it in the same way.

use std::path::Path;

use super::{MAX_SIGNATURE_TEXT, REFUSED, Verified, place, verify};
use crate::error::ErrorCode;
use crate::policy::{PluginSource, PluginSpec};

/// A signature file: a regular file of at most [`MAX_SIGNATURE_TEXT`] bytes of
/// UTF-8, read from one non-blocking descriptor (it may sit where a tool can
/// write: a FIFO must not hang warden); `None` when it does not exist.
pub fn read_signature_file(path: &Path) -> Result<Option<String>, (ErrorCode, String)> {
    use crate::paths::ReadFail;
    let bytes = match crate::paths::read_regular(path, MAX_SIGNATURE_TEXT as u64) {
        Ok(bytes) => bytes,
        Err(ReadFail::Missing(_)) => return Ok(None),
        Err(ReadFail::Io(e)) => return Err((REFUSED, format!("cannot read the signature {}: {e}", path.display()))),
        Err(ReadFail::NotRegular) => {
            return Err((REFUSED, format!("the signature {} is not a regular file", path.display())));
        }
        Err(ReadFail::TooLarge) => {
            return Err((
                REFUSED,
                format!("the signature {} is larger than {MAX_SIGNATURE_TEXT} bytes", path.display()),
            ));
        }
    };
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|_| (REFUSED, format!("the signature {} is not text (an armored SSH signature)", path.display())))
}

/// The signature text `spec`'s source carries, if any: the `signature` file
/// (default `SOURCE.sig`) of a file source; builtins have none, and an OCI
/// component's comes with its manifest (`load` passes it to [`check`]). Read
/// only when the policy lists `signers` (nothing else looks at it).
pub fn signature_text(spec: &PluginSpec) -> Result<Option<String>, (ErrorCode, String)> {
    if spec.signers.is_empty() {
        return Ok(None);
    }
    match (&spec.source, &spec.signature) {
        (PluginSource::File(_), Some(path)) => read_signature_file(path),
        _ => Ok(None),
    }
}

/// The signature check of `spec` for `bytes`, given the text its source
/// carries: without `signers`, nothing is checked (`None`); with them, a
/// missing text, an unlisted key or a signature that does not hold is refused
/// (DENIED), each message naming `signers` of `[plugins.NAME]`.
pub fn check(spec: &PluginSpec, bytes: &[u8], text: Option<&str>) -> Result<Option<Verified>, (ErrorCode, String)> {
    if spec.signers.is_empty() {
        return Ok(None);
    }
    let name = &spec.name;
    let place = place(spec);
    let Some(text) = text else {
        let how = if matches!(spec.source, PluginSource::Oci(_)) {
            "sign it with `cargo xtask plugin sign` and push it with its signature (`cargo xtask plugin push`, or \
             `warden plugin push --signature`)"
        } else {
            "sign it with `cargo xtask plugin sign`"
        };
        return Err((
            REFUSED,
            format!(
                "no signature: {place} is missing; {how}, or remove signers from [plugins.{name}] to accept it unsigned"
            ),
        ));
    };
    verify(bytes, text, &spec.signers).map(Some).map_err(|r| (REFUSED, r.message(name, &place)))
}

/// How a record and the lock name a plugin's source: `builtin:NAME`,
/// `file:/absolute/path` or `oci://HOST/REPO@sha256:…`.
pub fn source_label(source: &PluginSource) -> String {
    match source {
        PluginSource::Builtin(name) => format!("builtin:{name}"),
        PluginSource::File(path) => {
            let abs = std::path::absolute(path).unwrap_or_else(|_| path.clone());
            format!("file:{}", abs.display())
        }
        PluginSource::Oci(r) => r.to_string(),
    }
}
