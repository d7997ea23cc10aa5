//! The policy's tools as MCP sees them, and call responses as MCP results.
//!
//! `tools/list` shows every tool that is not `deny` and is ready, sorted by name.
//! Annotations come from the policy, never from the plugin: `readOnlyHint` (and
//! `idempotentHint`) when the tool can write nowhere that outlives the call and
//! reach no network, `destructiveHint` for `confirm`, `openWorldHint` only with a
//! network grant. The description ends with the tier and the grants, so the
//! agent and the person reading its transcript see the walls.

use std::sync::Arc;

use rmcp::model::{CallToolResult, ContentBlock, JsonObject, Tool, ToolAnnotations};
use serde_json::{Value, json};

use warden_core::catalog::{Catalog, Entry};
use warden_core::executor::{CallResponse, Status};
use warden_policy::Tier;
use warden_policy::units::format_duration;

/// The MCP tool list of `catalog`: visible, ready tools sorted by name.
pub fn list(catalog: &Catalog) -> Vec<Tool> {
    let mut tools = Vec::new();
    for entry in catalog.visible() {
        match &entry.state {
            Ok(_) => tools.push(tool(entry)),
            Err(e) => tracing::warn!(tool = %entry.spec.name, "not offered over MCP: {}", e.message),
        }
    }
    tools
}

/// Whether the tool can change nothing that outlives the call: no write grant
/// except the per-call `{tmp}` and the `{system}` devices, and no network.
fn read_only(entry: &Entry) -> bool {
    let g = &entry.spec.grants;
    g.lasting_write().is_none() && g.net.is_empty()
}

fn tool(entry: &Entry) -> Tool {
    let spec = &entry.spec;
    let (description, schema) = match &entry.state {
        Ok(r) => (r.description.as_str(), r.schema.clone()),
        Err(_) => ("", json!({"type": "object"})),
    };
    let (read, write, net) = spec.grants_text(true);
    let none = |v: &[String]| if v.is_empty() { "nothing".to_string() } else { v.join(", ") };
    let tier = match spec.tier {
        Tier::Auto => "auto (runs without asking)",
        Tier::Ask => "ask (the user approves each call, or the rest of the session)",
        Tier::Confirm => "confirm (the user approves each call with its exact arguments)",
        Tier::Deny => "deny",
    };
    let mut text = format!(
        "{description}\n\n[warden] tier: {tier}. Reads: {}. Writes: {}. Network: {}. Timeout: {}.",
        none(&read),
        none(&write),
        if net.is_empty() { "none".to_string() } else { net.join(", ") },
        format_duration(spec.limits.timeout)
    );
    if spec.background {
        text.push_str(
            " Runs in the background: the call answers with a job handle {\"job\": \"j-…\"} (an MCP task \
             instead, for a client that speaks tasks); follow it with job_status and job_output, stop it with \
             job_cancel.",
        );
    }
    let schema: JsonObject = match schema {
        Value::Object(o) => o,
        // MCP needs an object schema; a non-object one is wrapped so nothing is lost.
        other => {
            let mut o = JsonObject::new();
            o.insert("allOf".into(), json!([other]));
            o.insert("type".into(), json!("object"));
            o
        }
    };
    let read_only = read_only(entry);
    let annotations = ToolAnnotations::new()
        .read_only(read_only)
        .destructive(spec.tier == Tier::Confirm)
        .idempotent(read_only)
        .open_world(!spec.grants.net.is_empty());
    Tool::new(spec.name.clone(), text, Arc::new(schema)).with_annotations(annotations)
}

/// The content blocks of a content result (`{"content": [...]}`, maybe with
/// `structuredContent`, and `dropped` when warden fitted it to `max_output`):
/// a wrapped server's, or a `warden:plugin@0.2.0` component's, when they parse as MCP content.
fn server_content(value: &Value) -> Option<Vec<ContentBlock>> {
    let o = value.as_object()?;
    if !o.keys().all(|k| k == "content" || k == "structuredContent" || k == "dropped") {
        return None;
    }
    serde_json::from_value(o.get("content")?.clone()).ok()
}

/// The MCP result of a response. Success is the tool's result as text plus
/// the whole result document as `structuredContent`; a content result (a
/// wrapped server's or a 0.2.0 component's blocks: text, image, audio,
/// resource) goes through as its blocks, with the tool's own
/// `structuredContent` (if it gave one: a text block carries its JSON when
/// there are no blocks), and warden's result document without the result
/// (status, call id, truncated, dropped) under `_meta["warden/call"]`, so that
/// images are not sent twice. Everything else is `isError`.
pub fn result(response: &CallResponse) -> CallToolResult {
    let doc = response.to_json();
    let mut r = match response.status {
        Status::Success => {
            let value = response.result.clone().unwrap_or(Value::Null);
            // A wrapped MCP server's content goes through as the server gave it
            // (sanitised and bounded by the executor).
            if let Some(mut blocks) = server_content(&value) {
                let structured = value.get("structuredContent").cloned();
                if blocks.is_empty()
                    && let Some(s) = &structured
                {
                    blocks.push(ContentBlock::text(s.to_string()));
                }
                if response.truncated {
                    blocks.push(ContentBlock::text("[warden: the result was truncated at limits.max_output]"));
                }
                let mut r = CallToolResult::success(blocks);
                r.structured_content = structured;
                let mut call = doc;
                if let Some(o) = call.as_object_mut() {
                    o.remove("result");
                    if let Some(d) = value.get("dropped") {
                        o.insert("dropped".into(), d.clone());
                    }
                }
                let mut meta = JsonObject::new();
                meta.insert("warden/call".into(), call);
                r.meta = Some(meta.into());
                return r;
            }
            let mut text = match &value {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            if response.truncated {
                text.push_str("\n[warden: the result was truncated at limits.max_output]");
            }
            CallToolResult::success(vec![ContentBlock::text(text)])
        }
        Status::Rejected => CallToolResult::error(vec![ContentBlock::text(format!(
            "REJECTED: {}",
            response.reason.clone().unwrap_or_default()
        ))]),
        Status::Error | Status::Cancelled => {
            let text = match &response.error {
                Some(e) => format!("{}: {}", e.code, e.message),
                None => "INTERNAL: the call failed without an error".to_string(),
            };
            CallToolResult::error(vec![ContentBlock::text(text)])
        }
    };
    r.structured_content = Some(doc);
    r
}
