//! Rich results of `warden:plugin@0.2.0` components, and their progress reports.
//!
//! Input is untrusted: the blocks a guest returned and the progress it reports.
//! A call's output becomes the MCP-shaped result document
//! `{"content": [blocks], "structuredContent": {...}}`, with image, audio and
//! blob bytes in base64 (their JSON cost is what `max_output` counts, in
//! [`crate::shape::fit_content`]; the audit record keeps only kinds and
//! sizes, [`crate::shape::content_summary`]). Each block is checked here: a MIME type
//! must be a `type/subtype` token pair ([`valid_mime`]), a resource URI a
//! `scheme:` URI of at most [`MAX_URI`] bytes without spaces or control
//! characters, structured content a JSON object. A block that fails fails the
//! call with `EXECUTION_FAILED`, naming the tool, the block and what to change.
//! Text is cleaned later, with the whole result ([`crate::shape::sanitize`]).
//!
//! Progress ([`Reporter`]): each report is bounded (message cleaned and cut to
//! [`MAX_PROGRESS_MESSAGE`] bytes), must increase, and is forwarded at most
//! once per [`PROGRESS_INTERVAL`]; a report that comes sooner waits as the
//! pending one (a later one replaces it) and is sent at the next report or
//! when the call returns.

use std::time::Instant;

use base64::Engine as _;
use serde_json::{Map, Value, json};

use super::bindings_v2::exports::warden::plugin::tool::{ContentBlock, EmbeddedResource, ResourceBody, ToolOutput};
use crate::error::{CallError, ErrorCode};
use crate::runtime::{OutputTap, Progress, ProgressSink, Stream};

/// The longest resource URI accepted, in bytes.
pub(super) const MAX_URI: usize = 2048;
/// The longest MIME type accepted, in bytes.
pub(super) const MAX_MIME: usize = 127;
/// The longest progress message forwarded, in bytes (longer ones are cut).
pub(super) const MAX_PROGRESS_MESSAGE: usize = 256;
/// The least time between two forwarded progress reports.
pub(super) const PROGRESS_INTERVAL: std::time::Duration = std::time::Duration::from_millis(50);

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

/// Forwards one call's progress reports: bounded, increasing, rate-limited.
#[derive(Default)]
pub(super) struct Reporter {
    tool: String,
    sink: Option<ProgressSink>,
    tap: Option<OutputTap>,
    last_done: Option<u64>,
    last_sent: Option<Instant>,
    pending: Option<Progress>,
}

impl Reporter {
    /// A reporter for `tool` that forwards to `sink`, or else as lines to `tap`'s stderr.
    pub(super) fn new(tool: &str, sink: Option<ProgressSink>, tap: Option<OutputTap>) -> Reporter {
        Reporter { tool: tool.to_string(), sink, tap, ..Reporter::default() }
    }

    /// Takes one report from the guest.
    pub(super) fn report(&mut self, done: u64, total: Option<u64>, message: &str) {
        if self.sink.is_none() && self.tap.is_none() {
            return;
        }
        if self.last_done.is_some_and(|last| done <= last) {
            return;
        }
        self.last_done = Some(done);
        let mut message = crate::shape::sanitize_str(message);
        if message.len() > MAX_PROGRESS_MESSAGE {
            let mut end = MAX_PROGRESS_MESSAGE;
            while !message.is_char_boundary(end) {
                end -= 1;
            }
            message.truncate(end);
        }
        self.pending = Some(Progress { done, total: total.filter(|t| *t >= done), message });
        if self.last_sent.is_none_or(|t| t.elapsed() >= PROGRESS_INTERVAL) {
            self.flush();
        }
    }

    /// Sends the pending report, if any (when the call returns).
    pub(super) fn flush(&mut self) {
        let Some(p) = self.pending.take() else { return };
        self.last_sent = Some(Instant::now());
        if let Some(sink) = &self.sink {
            sink(&p);
        } else if let Some(tap) = &self.tap {
            let total = p.total.map(|t| format!("/{t}")).unwrap_or_default();
            let message = if p.message.is_empty() { String::new() } else { format!(": {}", p.message) };
            tap(Stream::Stderr, format!("[{}] progress {}{total}{message}\n", self.tool, p.done).as_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::{Arc, Mutex};

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

    #[test]
    fn progress_is_increasing_bounded_and_rate_limited_with_the_last_kept() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        let sink: ProgressSink = Arc::new(move |p: &Progress| s.lock().unwrap().push(p.clone()));
        let mut r = Reporter::new("t", Some(sink), None);
        r.report(1, Some(10), &format!("a\u{1b}[31m{}", "é".repeat(300)));
        r.report(1, Some(10), "same: dropped");
        r.report(0, Some(10), "lower: dropped");
        r.report(2, Some(10), "soon: pending");
        r.report(3, Some(10), "soon: replaces it");
        r.flush();
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 2, "{seen:?}");
        assert_eq!(seen[0].done, 1);
        assert!(seen[0].message.len() <= MAX_PROGRESS_MESSAGE && seen[0].message.starts_with("a[31m"));
        assert_eq!((seen[1].done, seen[1].total, seen[1].message.as_str()), (3, Some(10), "soon: replaces it"));
    }
}
