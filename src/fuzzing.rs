//! Entry points for the fuzz targets in `fuzz/` (`cargo xtask fuzz`): each takes
//! untrusted bytes the way warden does and checks the invariants that must hold
//! for any input. A violated invariant panics, which the fuzzer reports.
//!
//! Not part of the public API.

#![forbid(unsafe_code)]

use std::path::Path;
use std::sync::OnceLock;

use serde_json::Value;

use crate::policy::{Context, ExecSpec, Policy};
use crate::shape;

/// The policy loader: any text either loads or is refused with problems that
/// each have a message; loading never panics.
pub fn policy(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let ctx = Context { workspace: "/fuzz/ws".into(), home: "/fuzz/home".into(), cache: "/fuzz/cache".into() };
    match Policy::from_text(text, "fuzz.toml", Path::new("/fuzz"), &ctx) {
        Ok(p) => {
            for t in p.tools.values() {
                assert!(!t.name.is_empty(), "a tool without a name loaded");
                let _ = t.decide(&serde_json::json!({"command": "ls; id", "path": "/etc/shadow"}));
            }
        }
        Err(e) => {
            assert!(!e.problems.is_empty(), "a refused policy without a problem");
            assert!(e.problems.iter().all(|p| !p.message.is_empty()), "a problem without a message");
        }
    }
}

/// The tool-call parser of `warden exec`: any JSON document gives calls (at most
/// 64, each with arguments or the reason they cannot be read) or an error.
pub fn exec_input(data: &[u8]) {
    let Ok(doc) = serde_json::from_slice::<Value>(data) else { return };
    if let Ok(calls) = crate::cli::exec::calls_in(&doc) {
        assert!(!calls.is_empty() && calls.len() <= 64, "{} calls parsed", calls.len());
    }
}

/// Argument validation and result shaping: arguments are validated against a
/// process tool's schema; any JSON value, sanitised and truncated to a limit,
/// fits the limit and has no terminal escapes.
pub fn args_and_shape(data: &[u8]) {
    static VALIDATOR: OnceLock<Option<jsonschema::Validator>> = OnceLock::new();
    let Some((&first, rest)) = data.split_first() else { return };
    let Ok(value) = serde_json::from_slice::<Value>(rest) else { return };
    let validator = VALIDATOR.get_or_init(|| {
        let exec = ExecSpec {
            argv: vec!["/bin/sh".into(), "-c".into(), "{command}".into(), "{path}".into()],
            params: vec!["command".into(), "path".into()],
            cwd: "/".into(),
            input_schema: None,
        };
        jsonschema::draft202012::new(&exec.schema()).ok()
    });
    if let Some(v) = validator {
        for e in v.iter_errors(&value) {
            assert!(!e.to_string().is_empty(), "a violation without a message");
        }
    }
    let max = 64 + usize::from(first) * 64;
    let (shaped, _cut) = shape::truncate(shape::sanitize(value), max);
    let text = serde_json::to_string(&shaped).unwrap_or_default();
    assert!(text.len() <= max, "shaped to {} bytes, over {max}", text.len());
    assert!(!has_escape(&shaped), "a terminal escape survived sanitising: {text}");
}

/// Whether any string or key in `v` holds an ESC character.
fn has_escape(v: &Value) -> bool {
    match v {
        Value::String(s) => s.contains('\u{1b}'),
        Value::Array(a) => a.iter().any(has_escape),
        Value::Object(o) => o.iter().any(|(k, v)| k.contains('\u{1b}') || has_escape(v)),
        _ => false,
    }
}

/// The MCP stdio frame gate: any line either passes or is answered with a
/// JSON-RPC error frame carrying a valid id.
pub fn mcp_frame(data: &[u8]) {
    if let Err(answer) = crate::mcp::frames::check_line(data) {
        let code = answer["error"]["code"].as_i64();
        assert!(matches!(code, Some(-32700) | Some(-32600)), "unexpected answer {answer}");
        let id = &answer["id"];
        assert!(id.is_null() || id.is_string() || id.is_number(), "bad id {id}");
        assert!(serde_json::to_string(&answer).is_ok());
    }
}

/// The plugin signature parser (sshsig, armored or raw): any input gives
/// signatures or a refusal, never a panic, and nothing is accepted without a
/// listed signer.
pub fn sshsig(data: &[u8]) {
    use crate::runtime::signature::{Sshsig, describe, parse_armored, verify};
    let _ = Sshsig::parse(data);
    let Ok(text) = std::str::from_utf8(data) else { return };
    let described = describe(b"component", text);
    assert!(!described.is_empty(), "a text described as no signature at all");
    assert!(verify(b"component", text, &[]).is_err(), "a signature was accepted with no signers");
    if let Ok(blobs) = parse_armored(text) {
        assert!(blobs.len() <= crate::runtime::signature::MAX_BLOCKS, "more blocks than the bound");
        for b in blobs {
            assert!(b.len() <= crate::runtime::signature::MAX_SIGNATURE_BLOB + 3, "a block larger than the bound");
            let _ = Sshsig::parse(&b);
        }
    }
}
