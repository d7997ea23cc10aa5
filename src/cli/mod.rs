//! The `warden` command: parse flags, build the executor, run one command.
//!
//! stdout carries results only; logs and diagnostics go to stderr. Exit codes
//! are the ones README.md lists under "Use" (each error code's is
//! [`crate::error::ErrorCode::exit_code`]): 0 success, 1 the tool failed, 2 bad
//! usage or input, 3 denied or not approved, 4 timeout or limit, 5 sandbox
//! unavailable, 70 internal, 130 cancelled.

#![forbid(unsafe_code)]

mod approvals;
pub mod args;
mod audit;
mod call;
mod console;
mod doctor;
mod echo;
pub(crate) mod exec;
mod explain;
mod export;
mod list;
mod lock;
mod log;
mod package;
mod plugin;
mod policy;
mod progress;
mod run;
mod serve;
mod session;

use std::io::{IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;
use serde_json::Value;

use self::args::{Cli, Command, LogCommand, PluginCommand, PolicyCommand};
use self::session::Session;
use crate::error::ErrorCode;

/// The largest stdin document `call -` and `exec` read.
pub const MAX_STDIN_BYTES: u64 = 8 << 20;

/// Parses the command line and runs it.
pub fn run() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
    match dispatch(cli) {
        Ok(code) => ExitCode::from(code),
        Err(Failure { code, message }) => {
            eprintln!("warden: {message}");
            ExitCode::from(code)
        }
    }
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .try_init();
}

/// A command that could not run: an exit code and what to tell the user.
struct Failure {
    code: u8,
    message: String,
}

/// A failure with `code`'s exit code (README.md, "Use").
fn fail(code: ErrorCode, message: impl Into<String>) -> Failure {
    Failure { code: code.exit_code(), message: message.into() }
}

/// One command, one file: this only says which.
fn dispatch(cli: Cli) -> Result<u8, Failure> {
    let s = Session { cli, export: Default::default() };
    if let Command::Console { listen, allow_host } = &s.cli.command {
        let (listen, allow_host) = (*listen, allow_host.clone());
        return console::console(std::sync::Arc::new(s), listen, allow_host);
    }
    let code = match &s.cli.command {
        Command::Call { tool, args, exit_status, stream } => call::call(&s, tool, args, *exit_status, *stream),
        Command::Run { tool, command } => run::run_command(&s, tool, command),
        Command::Exec => exec::command(&s),
        Command::Serve { http, approval_timeout, allow_origin, allow_host } => {
            serve::serve(&s, *http, *approval_timeout, (allow_origin, allow_host))
        }
        Command::Plugin(PluginCommand::Inspect { file, signature, json }) => {
            plugin::plugin_inspect(file, signature.as_deref(), *json)
        }
        Command::Plugin(PluginCommand::Push { file, target, signature }) => {
            plugin::push(file, target, signature.as_deref())
        }
        Command::Plugin(PluginCommand::Pull { reference }) => plugin::pull(reference),
        Command::Console { .. } => unreachable_console(),
        Command::Lock { check, show } => lock::lock(&s, *check, show.as_deref()),
        Command::Audit { format, fail_on, no_self_test } => audit::audit(&s, *format, *fail_on, !*no_self_test),
        Command::List { json } => list::command(&s, *json),
        Command::Doctor { json } => doctor::doctor(&s, *json),
        Command::Policy(PolicyCommand::Check { file }) => policy::check(&s, file.as_deref()),
        Command::Policy(PolicyCommand::Explain { tool }) => explain::explain(&s, tool),
        Command::Log(LogCommand::Verify { file }) => log::verify(&s, file.as_deref()),
        Command::Log(LogCommand::Stats { file, format }) => log::stats(&s, file.as_deref(), *format),
        Command::Log(LogCommand::Show { call_id, file }) => log::show(&s, call_id, file.as_deref()),
        Command::Log(LogCommand::Tail { lines, follow, file }) => log::tail(&s, *lines, *follow, file.as_deref()),
        Command::Approvals(c) => approvals::run(&s, c),
        Command::Policy(PolicyCommand::ShowDefault) => package::show_default(),
        Command::Completions { shell } => package::completions(*shell),
        Command::Man { dir } => package::man(dir.as_deref()),
    };
    // The records this command wrote: sent, or left to the next start (a bounded wait).
    export::finish(&s);
    code
}

/// `console` owns its session (its server's tasks outlive any borrow) and is run above.
fn unreachable_console() -> Result<u8, Failure> {
    Err(fail(ErrorCode::Internal, "the console is dispatched before the other commands"))
}

/// `p` made absolute against the current directory (lexically; it may not exist yet).
fn absolute(p: &Path) -> PathBuf {
    let joined = if p.is_absolute() { p.to_path_buf() } else { std::env::current_dir().unwrap_or_default().join(p) };
    joined.canonicalize().unwrap_or_else(|_| joined.components().collect())
}

fn print_json(v: &Value) {
    let mut out = std::io::stdout().lock();
    let _ = serde_json::to_writer(&mut out, v);
    let _ = writeln!(out);
}

fn read_stdin() -> Result<String, Failure> {
    let mut s = String::new();
    std::io::stdin()
        .take(MAX_STDIN_BYTES + 1)
        .read_to_string(&mut s)
        .map_err(|e| fail(ErrorCode::InvalidArgs, format!("cannot read stdin: {e}")))?;
    if s.len() as u64 > MAX_STDIN_BYTES {
        return Err(fail(ErrorCode::InvalidArgs, format!("stdin is larger than {MAX_STDIN_BYTES} bytes")));
    }
    Ok(s)
}

/// The result's hints (what to add to the policy after a refusal), once each,
/// on stderr: the end of a CI step's log, where a person looks.
fn print_hints(tool: &str, response: &crate::CallResponse) {
    let hints = response.result.as_ref().and_then(|r| r.get("hints")).and_then(Value::as_array);
    for hint in hints.into_iter().flatten().filter_map(Value::as_str) {
        eprintln!("warden: {tool}: hint: {}", crate::shape::sanitize_str(hint));
    }
}
