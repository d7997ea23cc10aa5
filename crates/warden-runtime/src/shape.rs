//! Result shaping: every result leaves warden clean and bounded. [`sanitize`]
//! removes control characters (but newline and tab) and invisible format
//! characters from every string; [`truncate`] cuts a result to `max_output`
//! bytes of JSON by type; [`fit_content`] fits a `warden:plugin@0.2.0` content
//! result block by block (binaries dropped whole, never cut). docs/policy.md
//! (`max_output`) says what a cut result looks like.

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
            // The budget counts escaped bytes but cuts raw ones: it never exceeds the text.
            let mut budget = max.saturating_sub(64).min(s.len());
            loop {
                let head = prefix(&s, budget / 2);
                let tail = suffix(&s, budget.saturating_sub(head.len()));
                let dropped = s.len().saturating_sub(head.len() + tail.len());
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

/// The part of a content result that is largest: a block (by index) or the structured content.
enum Largest {
    Block(usize, usize),
    Structured(usize),
}

/// Fits an MCP content result (`{"content": [blocks], "structuredContent": {…}}`,
/// what a `warden:plugin@0.2.0` component returns) to `max` bytes of JSON,
/// base64 counted as the bytes it takes. The largest part gives first, until
/// the whole fits:
///
/// * an image, audio or blob block is never cut inside (a partial image is
///   garbage): it is dropped whole and replaced by a text block saying what was
///   dropped (`[warden: image block (image/png, 70000 bytes) dropped: …]`);
/// * a text block (or a text resource) keeps its head and tail around a marker,
///   like any string ([`truncate`]);
/// * the structured content is shrunk like any object ([`truncate`]);
/// * if many small blocks still do not fit, trailing blocks are dropped and a
///   last text block counts them.
///
/// A cut result gains `"dropped": {"blocks": N, "bytes": M}` (whole blocks
/// dropped, and the JSON bytes removed in all). Returns it and whether anything
/// was cut. A value of another shape is [`truncate`]d.
pub fn fit_content(v: Value, max: usize) -> (Value, bool) {
    let max = max.max(256);
    if size(&v) <= max {
        return (v, false);
    }
    let Value::Object(mut o) = v else { return truncate(v, max) };
    let Some(Value::Array(mut blocks)) = o.get_mut("content").map(Value::take) else {
        return truncate(Value::Object(o), max);
    };
    let original = size(&Value::Object(o.clone())) + size(&Value::Array(blocks.clone()));
    // Room for the `dropped` member added at the end.
    let max_doc = max.saturating_sub(64);
    let doc_size = |o: &Map<String, Value>, blocks: &[Value]| {
        size(&Value::Object(o.clone())) - 2 + serde_json::to_vec(blocks).map_or(usize::MAX, |b| b.len())
    };
    let mut dropped_blocks = 0usize;
    // More blocks than could ever fit (each is at least 16 bytes of JSON) go in
    // one step, so a flood of tiny blocks costs no pass over all of them.
    let cap = max / 16 + 1;
    let early = blocks.len().saturating_sub(cap);
    blocks.truncate(cap);
    for _ in 0..64 {
        let total = doc_size(&o, &blocks);
        if total <= max_doc {
            break;
        }
        let excess = total - max_doc;
        let structured = o.get("structuredContent").map_or(0, size);
        let largest = blocks
            .iter()
            .enumerate()
            .map(|(i, b)| (i, size(b)))
            .max_by_key(|(_, s)| *s)
            .filter(|(_, s)| *s >= structured)
            .map_or(Largest::Structured(structured), |(i, s)| Largest::Block(i, s));
        match largest {
            Largest::Structured(s) if s > 128 => {
                let sc = o.get_mut("structuredContent").map(Value::take).unwrap_or(Value::Null);
                o.insert("structuredContent".into(), truncate(sc, s.saturating_sub(excess)).0);
            }
            Largest::Block(i, s) if s > 128 => {
                let block = &mut blocks[i];
                let kind = block.get("type").and_then(Value::as_str).unwrap_or("?").to_string();
                let text = match kind.as_str() {
                    "text" => block.get_mut("text"),
                    "resource" => block.get_mut("resource").and_then(|r| r.get_mut("text")),
                    _ => None,
                };
                match text {
                    Some(t) if t.is_string() && s > excess + 192 => {
                        let budget = size(t).saturating_sub(excess);
                        *t = shrink(t.take(), budget);
                    }
                    _ => {
                        *block = dropped_block(block, &kind);
                        dropped_blocks += 1;
                    }
                }
            }
            _ => break,
        }
    }
    // Many small blocks: drop from the end, and say how many.
    let mut tail_dropped = early;
    let mut total = doc_size(&o, &blocks);
    if total > max_doc {
        // Room for the text block that counts them.
        const MARKER: usize = 128;
        while total + MARKER > max_doc
            && let Some(last) = blocks.pop()
        {
            total = total.saturating_sub(size(&last) + 1);
            tail_dropped += 1;
        }
    }
    if tail_dropped > 0 {
        dropped_blocks += tail_dropped;
        blocks.push(json!({"type": "text", "text": format!("[warden: {tail_dropped} more content blocks dropped: the result is over limits.max_output]")}));
    }
    let kept = doc_size(&o, &blocks);
    o.insert("content".into(), Value::Array(blocks));
    if size(&Value::Object(o.clone())) > max {
        // Nothing left that can give (an enormous structured content of tiny members was shrunk already).
        return truncate(Value::Object(o), max);
    }
    o.insert("dropped".into(), json!({"blocks": dropped_blocks, "bytes": original.saturating_sub(kept)}));
    (Value::Object(o), true)
}

/// The text block that stands for a binary block dropped whole.
fn dropped_block(block: &Value, kind: &str) -> Value {
    let (mime, data) = match kind {
        "resource" => {
            let r = block.get("resource");
            (r.and_then(|r| r.get("mimeType")), r.and_then(|r| r.get("blob").or_else(|| r.get("text"))))
        }
        _ => (block.get("mimeType"), block.get("data")),
    };
    let mime = mime.and_then(Value::as_str).map(|m| format!("{m}, ")).unwrap_or_default();
    let bytes = data.and_then(Value::as_str).map_or(0, decoded_len);
    json!({"type": "text", "text": format!("[warden: {kind} block ({mime}{bytes} bytes) dropped: the result is over limits.max_output]")})
}

/// The bytes a base64 text decodes to.
fn decoded_len(s: &str) -> usize {
    (s.len() / 4 * 3).saturating_sub(s.bytes().rev().take(2).filter(|&b| b == b'=').count())
}

/// What the audit record keeps of an MCP content result: each block's kind, MIME
/// type and size in bytes (decoded size for binaries), never the bytes.
pub fn content_summary(value: &Value) -> Option<Value> {
    let blocks = value.get("content")?.as_array()?;
    let decoded = decoded_len;
    let list: Vec<Value> = blocks
        .iter()
        .map(|b| {
            let kind = b.get("type").and_then(Value::as_str).unwrap_or("?");
            let (mime, bytes) = match kind {
                "text" => (None, b.get("text").and_then(Value::as_str).map_or(0, str::len)),
                "image" | "audio" => (b.get("mimeType"), b.get("data").and_then(Value::as_str).map_or(0, decoded)),
                "resource" => {
                    let r = b.get("resource");
                    let text = r.and_then(|r| r.get("text")).and_then(Value::as_str).map(str::len);
                    let blob = r.and_then(|r| r.get("blob")).and_then(Value::as_str).map(decoded);
                    (r.and_then(|r| r.get("mimeType")), text.or(blob).unwrap_or(0))
                }
                _ => (None, 0),
            };
            let mut o = json!({"type": kind, "bytes": bytes});
            if let Some(m) = mime {
                o["mime_type"] = m.clone();
            }
            o
        })
        .collect();
    let mut doc = json!({"blocks": list});
    if let Some(s) = value.get("structuredContent") {
        doc["structured_bytes"] = json!(serde_json::to_vec(s).map_or(0, |v| v.len()));
    }
    Some(doc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_that_grows_when_escaped_is_cut_without_overflow() {
        // 10,000 control characters: each escapes to six bytes, so the escaped
        // budget is larger than the raw text (this panicked in debug builds).
        let text = "\u{1}".repeat(10_000);
        let (out, cut) = truncate(json!(text), 16 << 10);
        assert!(cut);
        assert!(size(&out) <= 16 << 10, "{}", size(&out));
    }

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

    fn png(bytes: usize) -> Value {
        json!({"type": "image", "data": "A".repeat(bytes.div_ceil(3) * 4), "mimeType": "image/png"})
    }

    #[test]
    fn content_that_fits_is_untouched() {
        let v = json!({"content": [{"type": "text", "text": "hi"}, png(100)], "structuredContent": {"a": 1}});
        assert_eq!(fit_content(v.clone(), 4096), (v, false));
    }

    #[test]
    fn an_oversize_image_is_dropped_whole_with_a_marker_and_counted() {
        let v = json!({"content": [{"type": "text", "text": "caption"}, png(70_000)]});
        let (out, cut) = fit_content(v, 4096);
        assert!(cut);
        assert!(size(&out) <= 4096, "{} bytes", size(&out));
        assert_eq!(out["content"][0], json!({"type": "text", "text": "caption"}));
        let marker = out["content"][1]["text"].as_str().unwrap_or_default();
        assert_eq!(
            marker,
            "[warden: image block (image/png, 70002 bytes) dropped: the result is over limits.max_output]"
        );
        assert_eq!(out["dropped"]["blocks"], 1);
        assert!(out["dropped"]["bytes"].as_u64().unwrap_or(0) > 90_000, "{out}");
        assert_eq!(content_summary(&out).map(|s| s["blocks"].as_array().map(Vec::len)), Some(Some(2)));
    }

    #[test]
    fn a_small_image_survives_while_a_long_text_gives_head_and_tail() {
        let text = format!("HEAD{}TAIL", "x".repeat(50_000));
        let v = json!({"content": [{"type": "text", "text": text}, png(300)]});
        let (out, cut) = fit_content(v, 8192);
        assert!(cut && size(&out) <= 8192, "{} bytes", size(&out));
        let t = out["content"][0]["text"].as_str().unwrap_or_default();
        assert!(t.starts_with("HEAD") && t.ends_with("TAIL") && t.contains("[truncated "), "{t}");
        assert_eq!(out["content"][1]["type"], "image");
        assert_eq!(out["dropped"]["blocks"], 0);
    }

    #[test]
    fn many_small_blocks_keep_the_leading_ones_and_count_the_rest() {
        let blocks: Vec<Value> = (0..2000).map(|i| json!({"type": "text", "text": format!("line {i}")})).collect();
        let (out, cut) = fit_content(json!({"content": blocks}), 2048);
        assert!(cut && size(&out) <= 2048, "{} bytes", size(&out));
        let c = out["content"].as_array().cloned().unwrap_or_default();
        assert_eq!(c[0]["text"], "line 0");
        let last = c.last().and_then(|b| b["text"].as_str()).unwrap_or_default();
        assert!(last.contains("more content blocks dropped"), "{last}");
        assert_eq!(out["dropped"]["blocks"].as_u64(), Some(2000 - (c.len() as u64 - 1)));
    }

    #[test]
    fn a_large_structured_content_is_shrunk_and_blocks_kept() {
        let v = json!({"content": [{"type": "text", "text": "ok"}], "structuredContent": {"rows": "r".repeat(20_000)}});
        let (out, cut) = fit_content(v, 4096);
        assert!(cut && size(&out) <= 4096, "{} bytes", size(&out));
        assert_eq!(out["content"][0]["text"], "ok");
        assert!(out["structuredContent"].is_object());
    }
}
