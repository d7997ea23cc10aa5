//! `warden call`: one call from the command line.

use serde_json::{Value, json};

use crate::executor::{CallHooks, ToolCall};

use super::session::Session;
use super::{Failure, echo, print_hints, print_json, progress, read_stdin};

/// `warden call TOOL ARGS`: one call, its result document on stdout.
pub(super) fn call(s: &Session, tool: &str, args: &str, exit_status: bool, stream: bool) -> Result<u8, Failure> {
    let executor = s.executor_for(Some(tool))?;
    let args_text = if args == "-" { read_stdin()? } else { args.to_string() };
    let args: Value = match serde_json::from_str(&args_text) {
        Ok(v) => v,
        Err(e) => {
            let doc = json!({
                "status": "error",
                "tool": tool,
                "error": crate::error::CallError::new(
                    crate::error::ErrorCode::InvalidArgs,
                    format!("ARGS is not valid JSON: {e} (line {}, column {})", e.line(), e.column()),
                )
                .to_json(),
            });
            print_json(&doc);
            return Ok(crate::error::ErrorCode::InvalidArgs.exit_code());
        }
    };
    // Progress: a line updating in place on a terminal, plain lines with --stream elsewhere.
    let console = progress::Console::new(tool, stream);
    let hooks =
        CallHooks { tap: stream.then(|| echo::tap(console.clone())), progress: console.sink(), ..CallHooks::default() };
    let response = executor.call_with(ToolCall::new(tool.to_string(), args), &hooks);
    console.finish();
    if stream {
        print_hints(tool, &response);
    }
    print_json(&response.to_json());
    Ok(if exit_status { echo::program_status(&response).unwrap_or(response.exit_code()) } else { response.exit_code() })
}
