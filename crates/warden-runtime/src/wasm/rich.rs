//! Rich results of `warden:plugin@0.2.0` components: a call's content blocks
//! become the MCP-shaped result document (`content`, `structuredContent`,
//! bytes in base64), each block checked here (a `type/subtype` MIME type,
//! [`valid_mime`]; a `scheme:` URI of at most [`MAX_URI`] bytes; structured
//! content an object); a block that fails fails the call with
//! `EXECUTION_FAILED`. Fitting to `max_output` and cleaning are
//! [`crate::shape`]'s. docs/plugins.md has the rules.

use base64::Engine as _;
use serde_json::{Map, Value, json};

use super::bindings_v2::exports::warden::plugin::tool::{ContentBlock, EmbeddedResource, ResourceBody, ToolOutput};
use crate::error::{CallError, ErrorCode};

/// The longest resource URI accepted, in bytes.
pub(super) const MAX_URI: usize = 2048;
/// The longest MIME type accepted, in bytes.
pub(super) const MAX_MIME: usize = 127;

/// Whether `s` is a MIME type of the form `type/subtype` (RFC 6838 token
/// characters, each part 1-63 bytes, no parameters), like `image/png`.
pub(super) fn valid_mime(s: &str) -> bool {
    let token = |t: &str| {
        !t.is_empty()
            && t.len() <= 63
            && t.as_bytes()[0].is_ascii_alphanumeric()
            && t.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$&-^_.+".contains(&b))
    };
    s.len() <= MAX_MIME && s.split_once('/').is_some_and(|(t, sub)| token(t) && token(sub))
}

/// Whether `s` is an acceptable resource URI: `scheme:rest`, at most
/// [`MAX_URI`] bytes, no whitespace, control or invisible characters.
pub(super) fn valid_uri(s: &str) -> bool {
    let scheme_ok = s.split_once(':').is_some_and(|(scheme, _)| {
        scheme.as_bytes().first().is_some_and(u8::is_ascii_alphabetic)
            && scheme.bytes().all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b))
    });
    scheme_ok
        && s.len() <= MAX_URI
        && !s.chars().any(|c| c.is_whitespace() || c.is_control())
        && crate::shape::sanitize_str(s) == s
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The result document of a 0.2.0 call's output, checked block by block.
pub(super) fn to_value(tool: &str, out: ToolOutput) -> Result<Value, CallError> {
    let bad = |i: usize, what: String| {
        CallError::new(ErrorCode::ExecutionFailed, format!("{tool}: the plugin's content block {i} {what}"))
    };
    let mime = |i: usize, kind: &str, m: &str| {
        if valid_mime(m) {
            Ok(())
        } else {
            Err(bad(
                i,
                format!(
                    "({kind}) has the MIME type {:?}, not of the form type/subtype (like image/png); fix the \
                     plugin's mime-type",
                    m.chars().take(64).collect::<String>()
                ),
            ))
        }
    };
    let mut blocks = Vec::with_capacity(out.content.len());
    for (i, block) in out.content.into_iter().enumerate() {
        blocks.push(match block {
            ContentBlock::Text(text) => json!({"type": "text", "text": text}),
            ContentBlock::Image(m) => {
                mime(i, "image", &m.mime_type)?;
                json!({"type": "image", "data": b64(&m.data), "mimeType": m.mime_type})
            }
            ContentBlock::Audio(m) => {
                mime(i, "audio", &m.mime_type)?;
                json!({"type": "audio", "data": b64(&m.data), "mimeType": m.mime_type})
            }
            ContentBlock::Resource(EmbeddedResource { uri, mime_type, body }) => {
                if !valid_uri(&uri) {
                    return Err(bad(
                        i,
                        format!(
                            "(resource) has the URI {:?}: a URI must be scheme:… of at most {MAX_URI} bytes without \
                             spaces or control characters",
                            uri.chars().take(64).collect::<String>()
                        ),
                    ));
                }
                let mut r = Map::new();
                r.insert("uri".into(), json!(uri));
                if let Some(m) = mime_type {
                    mime(i, "resource", &m)?;
                    r.insert("mimeType".into(), json!(m));
                }
                match body {
                    ResourceBody::Text(t) => r.insert("text".into(), json!(t)),
                    ResourceBody::Blob(b) => r.insert("blob".into(), json!(b64(&b))),
                };
                json!({"type": "resource", "resource": r})
            }
        });
    }
    let mut doc = Map::new();
    doc.insert("content".into(), Value::Array(blocks));
    if let Some(text) = out.structured_content {
        let value: Value = serde_json::from_str(&text).map_err(|e| {
            CallError::new(
                ErrorCode::ExecutionFailed,
                format!("{tool}: the plugin's structured-content is not valid JSON: {e}"),
            )
        })?;
        if !value.is_object() {
            return Err(CallError::new(
                ErrorCode::ExecutionFailed,
                format!("{tool}: the plugin's structured-content must be a JSON object (MCP structuredContent)"),
            ));
        }
        doc.insert("structuredContent".into(), value);
    }
    Ok(Value::Object(doc))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn mime_types_are_type_slash_subtype_tokens() {
        for ok in ["image/png", "audio/wav", "application/vnd.api+json", "text/x-c"] {
            assert!(valid_mime(ok), "{ok}");
        }
        for bad in ["", "image", "image/", "/png", "image/png; charset=x", "a/b/c", "im age/png", "image/pn\u{1b}g"] {
            assert!(!valid_mime(bad), "{bad:?}");
        }
        assert!(!valid_mime(&format!("image/{}", "x".repeat(200))));
    }

    #[test]
    fn uris_need_a_scheme_and_no_hidden_characters() {
        assert!(valid_uri("test://embedded-resource"));
        assert!(valid_uri("file:///a/b.txt"));
        for bad in ["no-scheme", "://x", "a b:c", "x:a b", "x:\u{202E}y", "1x:y"] {
            assert!(!valid_uri(bad), "{bad:?}");
        }
        assert!(!valid_uri(&format!("x:{}", "a".repeat(MAX_URI))));
    }
}
