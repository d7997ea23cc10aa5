//! A hostile test component: each tool attacks the host in one way, so the
//! tests can prove the component runtime contains it and keeps serving.

wit_bindgen::generate!({ world: "plugin", path: "../wit" });

use exports::warden::plugin::tool::{Guest, ToolError, ToolInfo};

struct Testkit;

const ANY: &str = r#"{"type":"object"}"#;

fn tool(name: &str, description: &str) -> ToolInfo {
    ToolInfo { name: name.into(), description: description.into(), input_schema: ANY.into() }
}

impl Guest for Testkit {
    fn describe() -> Vec<ToolInfo> {
        vec![
            tool("echo", "Return the arguments unchanged"),
            tool("env", "Return every environment variable and argument the component sees"),
            tool("spin", "Loop forever"),
            tool("grow", "Allocate memory until the host refuses"),
            tool("flood", "Write 64 MiB to stdout and stderr, then return"),
            tool("huge", "Return a 16 MiB string"),
            tool("recurse", "Recurse with large frames until the in-memory stack overflows"),
            tool("deep", "Recurse with small frames until the native wasm stack overflows"),
            tool("read", "Read the file at `path` (any path) and return it"),
            tool("write", "Write `content` to `path` (any path)"),
            tool("connect", "Open a TCP connection to `addr`"),
        ]
    }

    fn call(name: String, args: String) -> Result<String, ToolError> {
        let args: serde_json::Value = serde_json::from_str(&args).map_err(|e| ToolError::InvalidArgs(e.to_string()))?;
        let s = |k: &str| args.get(k).and_then(|v| v.as_str()).unwrap_or_default().to_string();
        match name.as_str() {
            "echo" => Ok(args.to_string()),
            "env" => {
                let env: Vec<String> = std::env::vars().map(|(k, v)| format!("{k}={v}")).collect();
                let argv: Vec<String> = std::env::args().collect();
                Ok(serde_json::json!({"env": env, "args": argv}).to_string())
            }
            "spin" => {
                let mut n: u64 = 0;
                loop {
                    n = std::hint::black_box(n.wrapping_add(1));
                }
            }
            "grow" => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(vec![1u8; 1 << 20]);
                    std::hint::black_box(&hoard);
                }
            }
            "flood" => {
                use std::io::Write;
                let chunk = vec![b'x'; 1 << 16];
                for _ in 0..1024 {
                    let _ = std::io::stdout().write_all(&chunk);
                    let _ = std::io::stderr().write_all(&chunk);
                }
                Ok("\"flooded\"".into())
            }
            "huge" => Ok(serde_json::Value::String("y".repeat(16 << 20)).to_string()),
            "recurse" => Ok(recurse(1).to_string()),
            "deep" => Ok(deep(1).to_string()),
            "read" => std::fs::read_to_string(s("path"))
                .map(|c| serde_json::Value::String(c).to_string())
                .map_err(|e| ToolError::PermissionDenied(e.to_string())),
            "write" => std::fs::write(s("path"), s("content"))
                .map(|_| "true".into())
                .map_err(|e| ToolError::PermissionDenied(e.to_string())),
            "connect" => std::net::TcpStream::connect(s("addr"))
                .map(|_| "\"connected\"".into())
                .map_err(|e| ToolError::PermissionDenied(e.to_string())),
            other => Err(ToolError::NotFound(other.into())),
        }
    }
}

#[inline(never)]
fn recurse(n: u64) -> u64 {
    let pad = std::hint::black_box([n; 64]);
    if std::hint::black_box(n) == 0 { pad[0] } else { recurse(n + 1).wrapping_add(pad[3]) }
}

#[inline(never)]
fn deep(n: u64) -> u64 {
    if std::hint::black_box(n) == 0 { 0 } else { deep(n + 1).wrapping_add(1) }
}

export!(Testkit);
