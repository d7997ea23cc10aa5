//! `warden plugin inspect`: what a component asks for, before it is declared;
//! `push` and `pull` (OCI registries) are in [`oci`].

mod oci;

pub(super) use self::oci::{pull, push};

use std::path::Path;

use serde_json::{Value, json};

use crate::runtime::wasm::ComponentRuntime;

use super::session::cache_dir;
use super::{Failure, fail, print_json};
use crate::error::ErrorCode;

mod signatures;

/// What an import lets a component ask for.
pub(super) fn reach(import: &str) -> String {
    let family = import.split('/').next().unwrap_or(import);
    match family {
        "wasi:filesystem" => "files: only in directories a policy grants (fs.read, fs.write)".into(),
        "wasi:sockets" => "network: TCP/UDP and name lookup, only to destinations a policy grants (net.connect)".into(),
        "wasi:http" => "outgoing HTTP: warden does not provide it, so the component will not load".into(),
        "wasi:clocks" => "clocks".into(),
        "wasi:random" => "random numbers".into(),
        "wasi:cli" => "environment, stdin/stdout/stderr, exit (warden gives only what a policy sets)".into(),
        "wasi:io" => "streams and polling".into(),
        "warden:plugin" => "progress reports of a running call (warden:plugin@0.2.0's host interface)".into(),
        other => format!("{other}: not a WASI interface warden provides, so the component will not load"),
    }
}

pub(super) fn plugin_inspect(file: &Path, signature: Option<&Path>, as_json: bool) -> Result<u8, Failure> {
    use crate::runtime::wasm::MAX_COMPONENT_FILE;
    use sha2::Digest;
    let meta = std::fs::metadata(file)
        .map_err(|e| fail(ErrorCode::InvalidArgs, format!("cannot read {}: {e}", file.display())))?;
    if meta.len() > MAX_COMPONENT_FILE {
        return Err(fail(
            ErrorCode::InvalidArgs,
            format!("{} is larger than the {MAX_COMPONENT_FILE} bytes warden loads", file.display()),
        ));
    }
    let bytes = std::fs::read(file)
        .map_err(|e| fail(ErrorCode::InvalidArgs, format!("cannot read {}: {e}", file.display())))?;
    let sha256 = hex::encode(sha2::Sha256::digest(&bytes));
    let sigs = signatures::read(file, signature, &bytes)?;
    let runtime = ComponentRuntime::new(cache_dir()).map_err(|e| fail(ErrorCode::Internal, e.message))?;
    let imports = runtime
        .imports(&bytes)
        .map_err(|e| fail(ErrorCode::ExecutionFailed, format!("{}: {}", file.display(), e.message)))?;
    let spec = crate::policy::PluginSpec {
        name: "inspected".into(),
        source: crate::policy::PluginSource::File(file.to_path_buf()),
        kind: crate::policy::PluginKind::Tool,
        sha256: Some(sha256.clone()),
        signers: Vec::new(),
        signature: None,
        location: file.display().to_string(),
    };
    let exports = runtime.exports(&bytes).unwrap_or_default();
    let command = exports.iter().any(|e| e.starts_with("wasi:cli/run@"))
        && !exports.iter().any(|e| e.starts_with("warden:plugin/tool@"));
    if command {
        let code = inspect_command(file, &sha256, bytes.len(), &imports, as_json, &sigs)?;
        return Ok(code.max(signatures::exit_code(&sigs)));
    }
    let tools = runtime.load(&spec).map(|p| p.tools.clone());
    let sanitize = crate::shape::sanitize_str;
    if as_json {
        let mut doc = json!({
            "file": file.display().to_string(),
            "sha256": sha256,
            "size": bytes.len(),
            "kind": "tool",
            "imports": imports.iter().map(|i| json!({"name": i, "reach": reach(i)})).collect::<Vec<_>>(),
            "signatures": signatures::to_json(&sigs),
        });
        match &tools {
            Ok(tools) => {
                doc["tools"] = tools
                    .iter()
                    .map(|t| {
                        json!({
                            "name": sanitize(&t.name),
                            "description": sanitize(&t.description),
                            "input_schema": serde_json::from_str::<Value>(&t.input_schema).unwrap_or(Value::Null),
                            "schema_error": schema_error(&t.input_schema),
                            "poisoning": crate::poisoning::definition_poisoning(&t.description, &t.input_schema)
                                .map(|p| p.why),
                        })
                    })
                    .collect();
            }
            Err(e) => doc["error"] = json!(e.message),
        }
        print_json(&doc);
    } else {
        println!("file     {}", file.display());
        println!("sha256   {sha256}");
        println!("size     {} bytes", bytes.len());
        signatures::print(&sigs);
        println!("\nIMPORTS (what it could ask the host for)");
        if imports.is_empty() {
            println!("  none");
        }
        for i in &imports {
            println!("  {i:<40} {}", reach(i));
        }
        println!("\nTOOLS");
        match &tools {
            Ok(tools) => {
                for t in tools {
                    println!("  {:<20} {}", sanitize(&t.name), sanitize(&t.description));
                    if let Some(p) = crate::poisoning::definition_poisoning(&t.description, &t.input_schema) {
                        println!("  {:<20} WARNING: {} (tool poisoning)", "", sanitize(&p.why));
                    }
                    println!("  {:<20} input schema: {}", "", sanitize(&t.input_schema));
                    if let Some(why) = schema_error(&t.input_schema) {
                        println!("  {:<20} ERROR: the input schema is unusable: {}", "", sanitize(&why));
                    }
                }
            }
            Err(e) => println!("  not a warden plugin: {}", e.message),
        }
    }
    let bad_schema = tools.as_ref().is_ok_and(|t| t.iter().any(|t| schema_error(&t.input_schema).is_some()));
    Ok(u8::from(tools.is_err() || bad_schema).max(signatures::exit_code(&sigs)))
}

/// `plugin inspect` of a `wasi:cli/command` program: no tools of its own.
pub(super) fn inspect_command(
    file: &Path,
    sha256: &str,
    size: usize,
    imports: &[String],
    as_json: bool,
    sigs: &signatures::Found,
) -> Result<u8, Failure> {
    let note = "a command program (wasi:cli/command): declare it with kind = \"command\" and give each tool \
                an `args` template (docs/plugins.md)";
    if as_json {
        print_json(&json!({
            "file": file.display().to_string(),
            "sha256": sha256,
            "size": size,
            "kind": "command",
            "imports": imports.iter().map(|i| json!({"name": i, "reach": reach(i)})).collect::<Vec<_>>(),
            "tools": [],
            "signatures": signatures::to_json(sigs),
            "note": note,
        }));
        return Ok(0);
    }
    println!("file     {}", file.display());
    println!("sha256   {sha256}");
    println!("size     {size} bytes");
    signatures::print(sigs);
    println!("kind     {note}");
    println!("\nIMPORTS (what it could ask the host for)");
    if imports.is_empty() {
        println!("  none");
    }
    for i in imports {
        println!("  {i:<40} {}", reach(i));
    }
    Ok(0)
}

/// Why a tool's input schema cannot be used, or `None` when warden can
/// validate arguments with it (the catalog's own check).
pub(super) fn schema_error(text: &str) -> Option<String> {
    crate::catalog::input_schema(text).err()
}
