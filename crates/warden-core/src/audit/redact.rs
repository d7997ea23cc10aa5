//! What of a call's arguments a record keeps: secrets redacted, long strings
//! and large documents cut (the record's hash covers the whole).

use super::*;

/// Keys whose values are never written to the log.
fn secret_key(k: &str) -> bool {
    let k = k.to_ascii_lowercase();
    ["password", "passwd", "secret", "token", "key", "authorization", "cookie", "credential"]
        .iter()
        .any(|s| k.contains(s))
}

fn secret_value(s: &str) -> bool {
    let t = s.trim_start();
    t.starts_with("Bearer ")
        || t.starts_with("Basic ")
        || t.contains("PRIVATE KEY-----")
        || (t.len() == 20 && t.starts_with("AKIA") && t.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit()))
        || t.starts_with("ghp_")
        || t.starts_with("sk-")
}

/// The arguments as the log keeps them: secret-looking values replaced, long
/// strings kept as their digest and size, bounded ([`redact_with`] without content).
pub fn redact(v: &Value) -> Value {
    redact_with(v, false)
}

/// The arguments as the log keeps them: secret-looking values replaced; a
/// string longer than [`MAX_ARG_STRING`] (a `write_file`'s content) kept as
/// `{"sha256": hex of its UTF-8 bytes, "bytes": N}`, or as it is with
/// `content` (`[audit] record_content = true`); the whole cut to
/// `MAX_ARGS_BYTES` of JSON either way. The record's `args_sha256` covers the
/// arguments as they were given, and the line's hash what is stored.
pub fn redact_with(v: &Value, content: bool) -> Value {
    fn walk(v: &Value, content: bool) -> Value {
        match v {
            Value::Object(o) => Value::Object(
                o.iter()
                    .map(|(k, v)| {
                        let v = if secret_key(k) && !v.is_object() && !v.is_array() {
                            Value::from("[REDACTED]")
                        } else {
                            walk(v, content)
                        };
                        (k.clone(), v)
                    })
                    .collect(),
            ),
            Value::Array(a) => Value::Array(a.iter().map(|v| walk(v, content)).collect()),
            Value::String(s) if secret_value(s) => Value::from("[REDACTED]"),
            Value::String(s) if s.len() > MAX_ARG_STRING && !content => {
                serde_json::json!({"sha256": sha256_hex(s.as_bytes()), "bytes": s.len()})
            }
            other => other.clone(),
        }
    }
    crate::shape::truncate(walk(v, content), MAX_ARGS_BYTES).0
}
