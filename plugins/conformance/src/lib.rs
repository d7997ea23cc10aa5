//! A `warden:plugin@0.2.0` fixture: the tools the official MCP conformance
//! suite (`@modelcontextprotocol/conformance`) calls by name, with the texts,
//! MIME types and URIs of its reference server, plus two tools for warden's
//! own tests of rich results (`oversize_image`, `bad_mime`).
//!
//! Nothing here touches the host beyond returning content and reporting
//! progress; it needs no grants.

wit_bindgen::generate!({ world: "plugin", path: "../wit-0.2.0" });

use exports::warden::plugin::tool::{
    ContentBlock, EmbeddedResource, Guest, Media, ResourceBody, ToolError, ToolInfo, ToolOutput,
};
use warden::plugin::host::progress;

struct Conformance;

const NO_ARGS: &str = r#"{"type":"object","properties":{},"additionalProperties":false}"#;

/// The suite checks this schema verbatim in `tools/list`.
const SCHEMA_2020_12: &str = r##"{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","$defs":{"address":{"$anchor":"addressDef","type":"object","properties":{"street":{"type":"string"},"city":{"type":"string"}}}},"properties":{"name":{"type":"string"},"address":{"$ref":"#/$defs/address"},"contactMethod":{"type":"string","enum":["phone","email"]},"phone":{"type":"string"},"email":{"type":"string"}},"allOf":[{"anyOf":[{"required":["phone"]},{"required":["email"]}]}],"if":{"properties":{"contactMethod":{"const":"phone"}},"required":["contactMethod"]},"then":{"required":["phone"]},"else":{"required":["email"]},"additionalProperties":false}"##;

const OVERSIZE_ARGS: &str = r#"{"type":"object","properties":{"bytes":{"type":"integer","minimum":0,"maximum":16777216}},"required":["bytes"]}"#;

/// A 1x1 red PNG.
const RED_PIXEL_PNG: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52, 0x00, 0x00, 0x00,
    0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x02, 0x00, 0x00, 0x00, 0x90, 0x77, 0x53, 0xde, 0x00, 0x00, 0x00, 0x0c, 0x49,
    0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0xf8, 0xcf, 0xc0, 0x00, 0x00, 0x03, 0x01, 0x01, 0x00, 0xc9, 0xfe, 0x92, 0xef,
    0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
];

/// A WAV file of `samples` 8-bit mono samples of silence at 8 kHz.
fn silent_wav(samples: u32) -> Vec<u8> {
    let mut w = Vec::with_capacity(44 + samples as usize);
    w.extend_from_slice(b"RIFF");
    w.extend_from_slice(&(36 + samples).to_le_bytes());
    w.extend_from_slice(b"WAVEfmt ");
    w.extend_from_slice(&16u32.to_le_bytes()); // fmt chunk size
    w.extend_from_slice(&1u16.to_le_bytes()); // PCM
    w.extend_from_slice(&1u16.to_le_bytes()); // mono
    w.extend_from_slice(&8000u32.to_le_bytes()); // sample rate
    w.extend_from_slice(&8000u32.to_le_bytes()); // byte rate
    w.extend_from_slice(&1u16.to_le_bytes()); // block align
    w.extend_from_slice(&8u16.to_le_bytes()); // bits per sample
    w.extend_from_slice(b"data");
    w.extend_from_slice(&samples.to_le_bytes());
    w.resize(44 + samples as usize, 0x80);
    w
}

fn tool(name: &str, description: &str, schema: &str) -> ToolInfo {
    ToolInfo { name: name.into(), description: description.into(), input_schema: schema.into() }
}

fn text(t: &str) -> ContentBlock {
    ContentBlock::Text(t.into())
}

fn png() -> ContentBlock {
    ContentBlock::Image(Media { data: RED_PIXEL_PNG.to_vec(), mime_type: "image/png".into() })
}

fn only(content: Vec<ContentBlock>) -> Result<ToolOutput, ToolError> {
    Ok(ToolOutput { content, structured_content: None })
}

impl Guest for Conformance {
    fn describe() -> Vec<ToolInfo> {
        vec![
            tool("test_simple_text", "Returns a simple text response", NO_ARGS),
            tool("test_image_content", "Returns a 1x1 red PNG image", NO_ARGS),
            tool("test_audio_content", "Returns a short silent WAV clip", NO_ARGS),
            tool("test_embedded_resource", "Returns an embedded text resource", NO_ARGS),
            tool("test_multiple_content_types", "Returns text, an image and an embedded resource", NO_ARGS),
            tool("test_error_handling", "Always fails, to test error results", NO_ARGS),
            tool("test_tool_with_progress", "Reports progress 0, 50 and 100 of 100, then returns", NO_ARGS),
            tool("json_schema_2020_12_tool", "Tool with JSON Schema 2020-12 features", SCHEMA_2020_12),
            tool("oversize_image", "Returns a PNG-typed image of `bytes` bytes (for max_output tests)", OVERSIZE_ARGS),
            tool("bad_mime", "Returns an image whose MIME type is malformed (for host checks)", NO_ARGS),
        ]
    }

    fn call(name: String, args: String) -> Result<ToolOutput, ToolError> {
        let args: serde_json::Value = serde_json::from_str(&args).map_err(|e| ToolError::InvalidArgs(e.to_string()))?;
        match name.as_str() {
            "test_simple_text" => only(vec![text("This is a simple text response for testing.")]),
            "test_image_content" => only(vec![png()]),
            "test_audio_content" => {
                only(vec![ContentBlock::Audio(Media { data: silent_wav(8), mime_type: "audio/wav".into() })])
            }
            "test_embedded_resource" => only(vec![ContentBlock::Resource(EmbeddedResource {
                uri: "test://embedded-resource".into(),
                mime_type: Some("text/plain".into()),
                body: ResourceBody::Text("This is an embedded resource content.".into()),
            })]),
            "test_multiple_content_types" => only(vec![
                text("Multiple content types test:"),
                png(),
                ContentBlock::Resource(EmbeddedResource {
                    uri: "test://mixed-content-resource".into(),
                    mime_type: Some("application/json".into()),
                    body: ResourceBody::Text(r#"{"test":"data","value":123}"#.into()),
                }),
            ]),
            "test_error_handling" => {
                Err(ToolError::Failed("This tool intentionally returns an error for testing".into()))
            }
            "test_tool_with_progress" => {
                for done in [0, 50, 100] {
                    progress(done, Some(100), &format!("step {done} of 100"));
                    if done < 100 {
                        // Past the host's rate limit (50 ms), so each report goes out.
                        std::thread::sleep(std::time::Duration::from_millis(60));
                    }
                }
                Ok(ToolOutput {
                    content: vec![text("Progress test completed")],
                    structured_content: Some(r#"{"steps":3}"#.into()),
                })
            }
            "json_schema_2020_12_tool" => only(vec![text(&format!("Received: {args}"))]),
            "oversize_image" => {
                let n = args.get("bytes").and_then(|v| v.as_u64()).unwrap_or(0) as usize;
                let mut data = RED_PIXEL_PNG.to_vec();
                data.resize(n.max(data.len()), 0);
                only(vec![text("an image follows"), ContentBlock::Image(Media { data, mime_type: "image/png".into() })])
            }
            "bad_mime" => {
                only(vec![ContentBlock::Image(Media { data: RED_PIXEL_PNG.to_vec(), mime_type: "not a mime".into() })])
            }
            other => Err(ToolError::NotFound(format!("no tool named {other}"))),
        }
    }
}

export!(Conformance);
