//! `warden run`: a command line under a tool's walls, warden's stdio passed through.

use serde_json::{Value, json};

use crate::executor::{CallHooks, ToolCall};

use super::session::Session;
use super::{Failure, echo, print_hints};

/// `warden run [--tool NAME] -- CMD …`: the command line under the tool's
/// walls, warden's stdio passed through; exits with the program's status, or
/// warden's code (and a line on stderr) when it refused or could not run it.
pub(super) fn run_command(s: &Session, tool: &str, command: &[String]) -> Result<u8, Failure> {
    let executor = s.executor_for(Some(tool))?;
    let line = command.iter().map(|a| shell_word(a)).collect::<Vec<_>>().join(" ");
    // Ctrl-C, a closed terminal or a CI runner's stop cancels the run: the
    // program's tree is killed and the record says so (exit 130).
    let cancel = crate::runtime::Cancel::new();
    let interrupted = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    {
        use nix::sys::signal::{SigSet, Signal};
        let mut set = SigSet::empty();
        for s in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
            set.add(s);
        }
        if set.thread_block().is_ok() {
            let (cancel, interrupted) = (cancel.clone(), interrupted.clone());
            let _ = std::thread::Builder::new().name("warden-run-signals".into()).spawn(move || {
                if set.wait().is_ok() {
                    interrupted.store(true, std::sync::atomic::Ordering::SeqCst);
                    cancel.cancel();
                }
            });
        }
    }
    let hooks = CallHooks { cancel, run: Some(command.to_vec()), ..CallHooks::default() };
    let response = executor.call_with(ToolCall::new(tool.to_string(), json!({ "command": line })), &hooks);
    // What the call's layer did not carry to the host, one line each.
    let layer = response.result.as_ref().and_then(|r| r.get("layer"));
    for refused in layer.and_then(|l| l.get("refused")).and_then(Value::as_array).into_iter().flatten() {
        let field = |k: &str| refused.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
        let line = format!("not applied: {}: {}", field("path"), field("why"));
        eprintln!("warden: {tool}: {}", crate::shape::sanitize_str(&line));
    }
    if let Some(more) = layer.and_then(|l| l.get("refused_count")).and_then(Value::as_u64) {
        let shown = layer.and_then(|l| l.get("refused")).and_then(Value::as_array).map_or(0, Vec::len) as u64;
        if more > shown {
            eprintln!("warden: {tool}: not applied: {} more (the audit record lists them)", more - shown);
        }
    }
    print_hints(tool, &response);
    if let Some(code) = echo::program_status(&response) {
        return Ok(code);
    }
    if interrupted.load(std::sync::atomic::Ordering::SeqCst) {
        eprintln!("warden: {tool}: interrupted; the command's processes were killed");
        return Ok(130);
    }
    if let Some(e) = &response.error {
        let mut message = e.message.clone();
        if e.code == crate::ErrorCode::NotFound && tool == "run" {
            message.push_str(
                "; warden run needs a tool to lend its walls: declare [tools.run] (fs, env, limits; no exec), or \
                 pass --tool NAME",
            );
        }
        eprintln!("warden: {tool}: {}: {}", e.code.as_str(), crate::shape::sanitize_str(&message));
    } else if let Some(why) = &response.reason {
        eprintln!("warden: {tool}: rejected: {}", crate::shape::sanitize_str(why));
    }
    Ok(response.exit_code())
}

/// A command-line word as a POSIX shell would read it back.
pub(super) fn shell_word(word: &str) -> String {
    let plain = !word.is_empty() && word.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b));
    if plain { word.to_string() } else { format!("'{}'", word.replace('\'', "'\\''")) }
}
