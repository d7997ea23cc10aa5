//! Result shaping: every result leaves warden clean and bounded.
//!
//! * **Sanitise**: control characters other than newline and tab are removed from
//!   every string, and so are invisible format characters (bidi overrides, zero-width
//!   characters, the Unicode tag block), so a tool cannot smuggle terminal escapes
//!   or hidden instructions to the model or the person reading.
//! * **Truncate by type** to `max_output` bytes of JSON: a string keeps its head
//!   and its tail around a marker that counts what was dropped; an array keeps its leading items plus a marker item;
//!   an object first shrinks its largest members, and if that is not enough it is
//!   wrapped as `{"truncated_json": "<prefix of its JSON>", "original_bytes": N}`.

#![forbid(unsafe_code)]

use serde_json::{Map, Value, json};

/// Whether `c` is stripped from result text.
fn is_hidden(c: char) -> bool {
    match c {
        '\n' | '\t' => false,
        c if c.is_control() => true,
        '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2060}'..='\u{2064}' | '\u{2066}'..='\u{2069}' => true,
        '\u{FEFF}' | '\u{00AD}' => true,
        '\u{E0000}'..='\u{E007F}' => true,
        _ => false,
    }
}

/// Whether `s` holds a hidden character. Printable ASCII (and newline and tab),
/// the common case, is decided a byte at a time.
fn has_hidden(s: &str) -> bool {
    let plain = |b: &u8| (0x20..0x7f).contains(b) || *b == b'\n' || *b == b'\t';
    !s.as_bytes().iter().all(plain) && s.chars().any(is_hidden)
}

fn strip(s: &str) -> String {
    s.chars().filter(|&c| !is_hidden(c)).collect()
}

/// Removes hidden characters from `s`.
pub fn sanitize_str(s: &str) -> String {
    if has_hidden(s) { strip(s) } else { s.to_string() }
}

/// Removes hidden characters from every string (and key) in `v`, in place: a
/// clean value (the usual case) is walked once and nothing is rebuilt.
pub fn sanitize(mut v: Value) -> Value {
    fn walk(v: &mut Value) {
        match v {
            Value::String(s) if has_hidden(s) => *s = strip(s),
            Value::Array(a) => a.iter_mut().for_each(walk),
            Value::Object(o) => {
                if o.keys().any(|k| has_hidden(k)) {
                    let taken = std::mem::take(o);
                    *o = taken.into_iter().map(|(k, v)| (if has_hidden(&k) { strip(&k) } else { k }, v)).collect();
                }
                o.values_mut().for_each(walk);
            }
            _ => {}
        }
    }
    walk(&mut v);
    v
}

fn size(v: &Value) -> usize {
    serde_json::to_vec(v).map(|b| b.len()).unwrap_or(usize::MAX)
}

fn prefix(s: &str, max_bytes: usize) -> &str {
    let mut end = max_bytes.min(s.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

fn suffix(s: &str, max_bytes: usize) -> &str {
    let mut start = s.len() - max_bytes.min(s.len());
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

/// Shapes `v` to at most `max` bytes of JSON; returns it and whether anything was cut.
pub fn truncate(v: Value, max: usize) -> (Value, bool) {
    let max = max.max(64);
    if size(&v) <= max {
        return (v, false);
    }
    (shrink(v, max), true)
}

fn shrink(v: Value, max: usize) -> Value {
    match v {
        Value::String(s) => {
            // The head and the tail: a log's verdict is at its end. JSON escaping
            // can grow text; budget conservatively and re-check.
            let mut budget = max.saturating_sub(64);
            loop {
                let head = prefix(&s, budget / 2);
                let tail = suffix(&s, budget - head.len());
                let dropped = s.len() - head.len() - tail.len();
                let out = Value::String(format!("{head}…[truncated {dropped} of {} bytes]…{tail}", s.len()));
                if size(&out) <= max || budget == 0 {
                    return out;
                }
                budget = budget.saturating_sub((size(&out) - max).max(16));
            }
        }
        Value::Array(items) => {
            let total = items.len();
            let mut kept = Vec::new();
            let mut used = 2 + 64;
            for item in items {
                let s = size(&item) + 1;
                if used + s > max {
                    break;
                }
                used += s;
                kept.push(item);
            }
            let dropped = total - kept.len();
            kept.push(json!(format!("…[{dropped} more items truncated]")));
            Value::Array(kept)
        }
        Value::Object(o) => shrink_object(o, max),
        other => other,
    }
}

fn shrink_object(mut o: Map<String, Value>, max: usize) -> Value {
    // Shrink the largest member until the object fits or nothing more can give.
    for _ in 0..8 {
        let total = size(&Value::Object(o.clone()));
        if total <= max {
            return Value::Object(o);
        }
        let Some((key, member_size)) = o
            .iter()
            .filter(|(_, v)| matches!(v, Value::String(_) | Value::Array(_) | Value::Object(_)))
            .map(|(k, v)| (k.clone(), size(v)))
            .max_by_key(|(_, s)| *s)
        else {
            break;
        };
        let excess = total - max;
        if member_size <= excess + 64 {
            break;
        }
        let member = o.remove(&key).unwrap_or(Value::Null);
        o.insert(key, shrink(member, member_size - excess));
    }
    let v = Value::Object(o);
    let text = serde_json::to_string(&v).unwrap_or_default();
    if text.len() <= max {
        return v;
    }
    // Escaping can grow the kept text (quotes, backslashes): budget and re-check, as for strings.
    let mut budget = max.saturating_sub(96);
    loop {
        let out = json!({"truncated_json": prefix(&text, budget), "original_bytes": text.len()});
        if size(&out) <= max || budget == 0 {
            return out;
        }
        budget = budget.saturating_sub((size(&out) - max).max(16));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_escapes_and_invisible_characters_but_keeps_newlines_and_tabs() {
        let v = json!({"a\u{1b}": "red\u{1b}[31m\r\nok\tx\u{202E}y\u{200B}z\u{E0041}"});
        assert_eq!(sanitize(v), json!({"a": "red[31m\nok\txyz"}));
    }

    #[test]
    fn nested_values_and_keys_are_cleaned_and_clean_ones_kept_in_order() {
        let v = json!({"z": 1, "k\u{7f}ey": [{"in\u{200B}ner": "a\u{1b}b"}, "plain text\n", "é\u{00AD}x"], "a": "ok"});
        let out = sanitize(v);
        assert_eq!(out, json!({"z": 1, "key": [{"inner": "ab"}, "plain text\n", "éx"], "a": "ok"}));
        assert_eq!(
            out.as_object().map(|o| o.keys().cloned().collect::<Vec<_>>()),
            Some(vec!["z".into(), "key".into(), "a".into()])
        );
        assert_eq!(sanitize_str("\u{9b}31m"), "31m", "the C1 control introducer is hidden too");
    }

    #[test]
    fn strings_keep_head_and_tail_around_a_marker_and_fit() {
        let text = format!("FIRST{}LAST", "x".repeat(10_000));
        let (v, cut) = truncate(json!(text), 1000);
        assert!(cut);
        assert!(size(&v) <= 1000);
        let s = v.as_str().unwrap_or_default();
        assert!(s.starts_with("FIRST") && s.ends_with("LAST"), "{s}");
        let kept = s.chars().filter(|&c| c == 'x').count();
        assert!(s.contains(&format!("…[truncated {} of 10009 bytes]…", 10_000 - kept)), "{s}");
    }

    #[test]
    fn arrays_keep_leading_items_and_a_marker() {
        let items: Vec<Value> = (0..1000).map(|i| json!(format!("item {i}"))).collect();
        let (v, cut) = truncate(Value::Array(items), 500);
        assert!(cut);
        let a = v.as_array().cloned().unwrap_or_default();
        assert_eq!(a[0], json!("item 0"));
        assert!(a.last().and_then(Value::as_str).is_some_and(|s| s.contains("more items truncated")));
        assert!(size(&v) <= 500);
    }

    #[test]
    fn objects_shrink_their_largest_member_first() {
        let (v, cut) = truncate(json!({"path": "a.txt", "content": "y".repeat(100_000), "lines": 3}), 2048);
        assert!(cut);
        assert_eq!(v["path"], "a.txt");
        assert_eq!(v["lines"], 3);
        assert!(size(&v) <= 2048);
    }

    #[test]
    fn objects_of_many_small_members_are_wrapped() {
        let o: Map<String, Value> = (0..500).map(|i| (format!("k{i}"), json!(i))).collect();
        let (v, cut) = truncate(Value::Object(o), 300);
        assert!(cut);
        assert!(v.get("truncated_json").is_some());
        assert!(size(&v) <= 300);
    }

    #[test]
    fn a_wrapped_object_fits_even_when_escaping_doubles_its_text() {
        let o: Map<String, Value> = (0..500).map(|i| (format!("k\"{i}"), json!("\"\\\""))).collect();
        let (v, cut) = truncate(Value::Object(o), 300);
        assert!(cut);
        assert!(size(&v) <= 300, "{} bytes", size(&v));
    }

    #[test]
    fn small_results_are_untouched() {
        let v = json!({"a": [1, 2, 3]});
        assert_eq!(truncate(v.clone(), 1000), (v, false));
    }
}
