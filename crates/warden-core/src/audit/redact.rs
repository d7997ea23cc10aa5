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

/// The arguments as the log keeps them: secret-looking values replaced, long strings cut, bounded.
pub fn redact(v: &Value) -> Value {
    fn walk(v: &Value) -> Value {
        match v {
            Value::Object(o) => Value::Object(
                o.iter()
                    .map(|(k, v)| {
                        let v = if secret_key(k) && !v.is_object() && !v.is_array() {
                            Value::from("[REDACTED]")
                        } else {
                            walk(v)
                        };
                        (k.clone(), v)
                    })
                    .collect(),
            ),
            Value::Array(a) => Value::Array(a.iter().map(walk).collect()),
            Value::String(s) if secret_value(s) => Value::from("[REDACTED]"),
            Value::String(s) if s.len() > MAX_ARG_STRING => {
                let mut end = MAX_ARG_STRING;
                while !s.is_char_boundary(end) {
                    end -= 1;
                }
                Value::from(format!("{}…[{} bytes]", &s[..end], s.len()))
            }
            other => other.clone(),
        }
    }
    crate::shape::truncate(walk(v), MAX_ARGS_BYTES).0
}
