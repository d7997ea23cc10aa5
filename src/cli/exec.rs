//! `warden exec`: tool calls in the shapes agents emit, tool results in the
//! shapes they expect back.
//!
//! | input                                              | output                                      |
//! |----------------------------------------------------|---------------------------------------------|
//! | OpenAI `tool_calls` item                           | `{"role":"tool","tool_call_id",…,"content"}` |
//! | OpenAI assistant message with `tool_calls`         | an array of those, in order                 |
//! | Anthropic `tool_use` block                         | a `tool_result` block                        |
//! | Anthropic assistant message with `content` blocks  | `{"role":"user","content":[tool_result…]}`   |
//! | OpenAI Chat Completions response (`chat.completion`) | the tool messages of its first choice, in order |
//! | OpenAI Responses API `function_call` item          | a `function_call_output` item                |
//! | OpenAI Responses API response (`response`)         | an array of `function_call_output` items     |
//! | an array of OpenAI items or Anthropic blocks       | an array of the matching results            |
//!
//! The `content` of each result is the call's result document as JSON text.
//! Chat tool results carry text only, so the bytes of image, audio and blob
//! blocks of a content result (`warden:plugin@0.2.0`) are left out: each such
//! block keeps its type, MIME type and size, and an `omitted` note saying
//! where the bytes can be had (`warden serve`, or `warden call`).
//! Several calls run concurrently; results keep the input order. The exit code
//! is that of the first call (in input order) that did not succeed.

use serde_json::{Value, json};

use crate::error::ErrorCode;
use crate::executor::{Executor, ToolCall};

/// Most calls one `exec` runs.
pub(super) const MAX_CALLS: usize = 64;

#[derive(Clone, Copy)]
enum Shape {
    OpenAi,
    Anthropic,
    /// The OpenAI Responses API.
    Responses,
}

struct Parsed {
    shape: Shape,
    id: String,
    call: ToolCall,
}

fn parse_item(v: &Value) -> Result<Option<Parsed>, String> {
    if v.get("type").and_then(Value::as_str) == Some("tool_use") {
        let id = v.get("id").and_then(Value::as_str).ok_or("a tool_use block needs a string `id`")?;
        let name = v.get("name").and_then(Value::as_str).ok_or("a tool_use block needs a string `name`")?;
        let input = v.get("input").cloned().unwrap_or_else(|| json!({}));
        return Ok(Some(Parsed { shape: Shape::Anthropic, id: id.into(), call: ToolCall::new(name, input) }));
    }
    if v.get("type").and_then(Value::as_str) == Some("function_call") {
        let id = v.get("call_id").and_then(Value::as_str).ok_or("a function_call item needs a string `call_id`")?;
        let name = v.get("name").and_then(Value::as_str).ok_or("a function_call item needs a string `name`")?;
        return Ok(Some(Parsed {
            shape: Shape::Responses,
            id: id.into(),
            call: with_arguments(name, v.get("arguments")),
        }));
    }
    if let Some(f) = v.get("function") {
        let id = v.get("id").and_then(Value::as_str).ok_or("a tool_calls item needs a string `id`")?;
        let name = f.get("name").and_then(Value::as_str).ok_or("`function.name` must be a string")?;
        return Ok(Some(Parsed {
            shape: Shape::OpenAi,
            id: id.into(),
            call: with_arguments(name, f.get("arguments")),
        }));
    }
    if v.get("type").and_then(Value::as_str).is_some() {
        return Ok(None); // a text or thinking block beside the tool calls
    }
    Err("not a tool call: expected an OpenAI tool_calls item (with `function`), a Responses API function_call \
         item, or an Anthropic tool_use block"
        .into())
}

/// A call of `name` with OpenAI's `arguments` (a JSON text, or an object).
fn with_arguments(name: &str, arguments: Option<&Value>) -> ToolCall {
    let mut call = ToolCall::new(name, json!({}));
    match arguments {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) if s.trim().is_empty() => {}
        Some(Value::String(s)) => match serde_json::from_str(s) {
            Ok(a) => call.args = a,
            Err(e) => call.input_error = Some(format!("`arguments` is not valid JSON: {e}")),
        },
        Some(other) => call.args = other.clone(),
    }
    call
}

/// `doc` without the bytes of binary content blocks (see the module docs).
fn text_only(doc: &Value) -> std::borrow::Cow<'_, Value> {
    let binary = |b: &Value| {
        matches!(b.get("type").and_then(Value::as_str), Some("image" | "audio"))
            || b.pointer("/resource/blob").is_some()
    };
    let Some(blocks) = doc.pointer("/result/content").and_then(Value::as_array) else {
        return std::borrow::Cow::Borrowed(doc);
    };
    if !blocks.iter().any(binary) {
        return std::borrow::Cow::Borrowed(doc);
    }
    let mut doc = doc.clone();
    if let Some(blocks) = doc.pointer_mut("/result/content").and_then(Value::as_array_mut) {
        for b in blocks.iter_mut().filter(|b| binary(b)) {
            let data = match b.get_mut("resource").and_then(Value::as_object_mut) {
                Some(r) => r.remove("blob"),
                None => b.as_object_mut().and_then(|o| o.remove("data")),
            };
            let encoded = data.as_ref().and_then(Value::as_str).map_or(0, str::len);
            let bytes = (encoded / 4 * 3).saturating_sub(
                data.as_ref()
                    .and_then(Value::as_str)
                    .map_or(0, |s| s.bytes().rev().take(2).filter(|&c| c == b'=').count()),
            );
            b["bytes"] = json!(bytes);
            b["omitted"] = json!(
                "binary content is not carried in a chat tool result; `warden serve` (MCP) or `warden call` returns it"
            );
        }
    }
    std::borrow::Cow::Owned(doc)
}

fn result_message(p: &Parsed, doc: &Value, ok: bool) -> Value {
    let content = text_only(doc).to_string();
    match p.shape {
        Shape::OpenAi => json!({"role": "tool", "tool_call_id": p.id, "content": content}),
        Shape::Anthropic => json!({"type": "tool_result", "tool_use_id": p.id, "content": content, "is_error": !ok}),
        Shape::Responses => json!({"type": "function_call_output", "call_id": p.id, "output": content}),
    }
}

/// How the results are wrapped: as the input was.
enum Wrap {
    One,
    Array,
    AnthropicMessage,
}

/// The tool calls in `doc`, in order, and how to wrap their results.
fn parse(doc: &Value) -> Result<(Vec<Parsed>, Wrap), String> {
    // A whole Chat Completions response: the message of its first choice.
    let doc = match doc.get("object").and_then(Value::as_str) {
        Some("chat.completion") => {
            doc.pointer("/choices/0/message").ok_or("a chat.completion response needs `choices[0].message`")?
        }
        _ => doc,
    };
    let (items, wrap): (Vec<&Value>, Wrap) = if let Some(calls) = doc.get("tool_calls").and_then(Value::as_array) {
        (calls.iter().collect(), Wrap::Array)
    } else if let (Some("response"), Some(output)) =
        (doc.get("object").and_then(Value::as_str), doc.get("output").and_then(Value::as_array))
    {
        // A whole Responses API response: its function_call items (reasoning and messages beside them are skipped).
        (output.iter().collect(), Wrap::Array)
    } else if let (Some("assistant"), Some(blocks)) =
        (doc.get("role").and_then(Value::as_str), doc.get("content").and_then(Value::as_array))
    {
        (blocks.iter().collect(), Wrap::AnthropicMessage)
    } else if let Some(a) = doc.as_array() {
        (a.iter().collect(), Wrap::Array)
    } else {
        (vec![doc], Wrap::One)
    };
    let mut parsed = Vec::new();
    for (i, item) in items.iter().enumerate() {
        match parse_item(item) {
            Ok(Some(p)) => parsed.push(p),
            Ok(None) => {}
            Err(e) => return Err(format!("call {}: {e}", i + 1)),
        }
    }
    if parsed.is_empty() {
        return Err("no tool call found in the input".into());
    }
    if parsed.len() > MAX_CALLS {
        return Err(format!("{} calls in one exec; at most {MAX_CALLS}", parsed.len()));
    }
    Ok((parsed, wrap))
}

/// The tool calls `doc` holds, without running them (for the fuzzer).
pub(crate) fn calls_in(doc: &Value) -> Result<Vec<ToolCall>, String> {
    parse(doc).map(|(parsed, _)| parsed.into_iter().map(|p| p.call).collect())
}

/// Runs the call(s) in `doc`; returns the output document and the exit code.
pub(super) fn run(executor: &Executor, doc: &Value) -> Result<(Value, u8), String> {
    let (parsed, wrap) = parse(doc)?;
    let responses: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = parsed.iter().map(|p| s.spawn(|| executor.call(p.call.clone()))).collect();
        handles.into_iter().map(|h| h.join()).collect()
    });
    let mut code = 0;
    let mut out = Vec::new();
    for (p, r) in parsed.iter().zip(responses) {
        let r = r.map_err(|_| format!("the call to {} panicked", p.call.tool))?;
        if code == 0 {
            code = r.exit_code();
        }
        out.push(result_message(p, &r.to_json(), r.exit_code() == 0));
    }
    let output = match wrap {
        Wrap::One => out.into_iter().next().unwrap_or(Value::Null),
        Wrap::Array => Value::Array(out),
        Wrap::AnthropicMessage => json!({"role": "user", "content": out}),
    };
    Ok((output, code))
}

/// `warden exec`: a provider's tool-call message on stdin, the messages with
/// the results on stdout.
pub(super) fn command(s: &super::session::Session) -> Result<u8, super::Failure> {
    let executor = s.executor()?;
    let input = super::read_stdin()?;
    let doc: Value = serde_json::from_str(&input).map_err(|e| {
        super::fail(
            ErrorCode::InvalidArgs,
            format!("stdin is not valid JSON: {e} (line {}, column {})", e.line(), e.column()),
        )
    })?;
    let (output, code) = run(&executor, &doc).map_err(|m| super::fail(ErrorCode::InvalidArgs, m))?;
    super::print_json(&output);
    Ok(code)
}
