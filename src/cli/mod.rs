//! The `warden` command: parse flags, build the executor, run one command.
//!
//! stdout carries results only; logs and diagnostics go to stderr. Exit codes
//! are the ones README.md lists under "Use" (each error code's is
//! [`crate::error::ErrorCode::exit_code`]): 0 success, 1 the tool failed, 2 bad
//! usage or input, 3 denied or not approved, 4 timeout or limit, 5 sandbox
//! unavailable, 70 internal, 130 cancelled.

#![forbid(unsafe_code)]

pub mod args;
mod echo;
pub(crate) mod exec;
mod progress;

use std::collections::BTreeMap;
use std::io::{IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;
use serde_json::{Value, json};

use self::args::{
    ApproveArg, AuditFormat, Cli, Command, FailOn, LogCommand, PluginCommand, PolicyCommand, StatsFormat,
};
use crate::approval::{ApproveMode, Approver};
use crate::audit::{self, AuditLog};
use crate::catalog::Catalog;
use crate::executor::{CallHooks, Executor, Options, ToolCall};
use crate::lock::Pins;
use crate::policy::units::{format_duration, format_size};
use crate::policy::{Context, Policy, Tier};
use crate::runtime::server::ServerPool;
use crate::runtime::wasm::ComponentRuntime;

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

fn fail(code: u8, message: impl Into<String>) -> Failure {
    Failure { code, message: message.into() }
}

fn dispatch(cli: Cli) -> Result<u8, Failure> {
    match &cli.command {
        Command::Call { tool, args, exit_status, stream } => {
            let executor = executor_for(&cli, Some(tool))?;
            let args_text = if args == "-" { read_stdin()? } else { args.clone() };
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
                    return Ok(2);
                }
            };
            // Progress: a line updating in place on a terminal, plain lines with --stream elsewhere.
            let console = progress::Console::new(tool, *stream);
            let hooks = CallHooks {
                tap: stream.then(|| echo::tap(console.clone())),
                progress: console.sink(),
                ..CallHooks::default()
            };
            let response = executor.call_with(ToolCall::new(tool.clone(), args), &hooks);
            console.finish();
            if *stream {
                print_hints(tool, &response);
            }
            print_json(&response.to_json());
            Ok(if *exit_status {
                echo::program_status(&response).unwrap_or(response.exit_code())
            } else {
                response.exit_code()
            })
        }
        Command::Run { tool, command } => run_command(&cli, tool, command),
        Command::Exec => {
            let executor = executor(&cli)?;
            let input = read_stdin()?;
            let doc: Value = serde_json::from_str(&input).map_err(|e| {
                fail(2, format!("stdin is not valid JSON: {e} (line {}, column {})", e.line(), e.column()))
            })?;
            let (output, code) = exec::run(&executor, &doc).map_err(|m| fail(2, m))?;
            print_json(&output);
            Ok(code)
        }
        Command::Serve { http, approval_timeout, allow_origin } => serve(&cli, *http, *approval_timeout, allow_origin),
        Command::Plugin(PluginCommand::Inspect { file, json }) => plugin_inspect(file, *json),
        Command::Lock { check, show } => lock(&cli, *check, show.as_deref()),
        Command::Audit { format, fail_on, no_self_test } => audit(&cli, *format, *fail_on, !*no_self_test),
        Command::List { json } => {
            let executor = executor(&cli)?;
            list(executor.catalog(), *json);
            Ok(0)
        }
        Command::Policy(PolicyCommand::Check { file }) => {
            let ctx = context(&cli)?;
            let policy = match file {
                Some(f) => Policy::load(f, &ctx)
                    .map_err(|e| e.to_string())
                    .and_then(|mut p| with_profile(&cli, &mut p).map(|()| p).map_err(|f| f.message)),
                None => load_policy(&cli, &ctx).map_err(|f| f.message),
            };
            let policy = match policy {
                Ok(p) => p,
                Err(message) => {
                    eprintln!("{message}");
                    return Ok(1);
                }
            };
            let runtime = ComponentRuntime::new(cache_dir()).map_err(|e| fail(70, e.message))?;
            let (catalog, _servers) = catalog_of(&policy, &runtime);
            Ok(policy_check(&policy, &catalog))
        }
        Command::Log(LogCommand::Verify { file }) => {
            let path = file.clone().or_else(|| cli.audit_log.clone()).unwrap_or_else(audit::default_path);
            let v = audit::verify(&path).map_err(|e| fail(2, format!("cannot read {}: {e}", path.display())))?;
            if let Some(n) = v.torn_line {
                println!("note: line {n} is torn (a crash mid-write) and was not checked");
            }
            match v.problem {
                Some((line, why)) => {
                    println!("{}: line {line}: {why}", path.display());
                    println!("FAILED: the chain is broken at line {line} ({} records verified before it)", v.records);
                    Ok(1)
                }
                None => {
                    println!("ok: {} records, chain intact; head {}", v.records, v.head);
                    Ok(0)
                }
            }
        }
        Command::Log(LogCommand::Stats { file, format }) => {
            let path = file.clone().or_else(|| cli.audit_log.clone()).unwrap_or_else(audit::default_path);
            let stats = audit::stats(&path).map_err(|e| fail(2, format!("cannot read {}: {e}", path.display())))?;
            match format {
                StatsFormat::Json => print_json(&serde_json::to_value(&stats).unwrap_or_default()),
                StatsFormat::Text => {
                    // The tool column as wide as the longest name: the table stays aligned.
                    let w = stats.iter().map(|s| s.tool.chars().count()).max().unwrap_or(0).max(4);
                    println!(
                        "{:<w$} {:>7} {:>7} {:>7} {:>7} {:>7} {:>8} {:>10} {:>10}",
                        "TOOL", "CALLS", "OK", "FAILED", "ERRORS", "DENIED", "REJECTED", "P50_MS", "P95_MS"
                    );
                    for s in stats {
                        println!(
                            "{:<w$} {:>7} {:>7} {:>7} {:>7} {:>7} {:>8} {:>10.2} {:>10.2}",
                            s.tool, s.calls, s.ok, s.failed, s.errors, s.denied, s.rejected, s.p50_ms, s.p95_ms
                        );
                    }
                    println!("FAILED: the program ran and exited non-zero or by a signal (its exit is in each record)");
                }
            }
            Ok(0)
        }
    }
}

fn serve(
    cli: &Cli,
    http: Option<std::net::SocketAddr>,
    approval_timeout: std::time::Duration,
    allow_origin: &[String],
) -> Result<u8, Failure> {
    if cli.approve == Some(ApproveArg::Prompt) {
        return Err(fail(
            2,
            "serve cannot prompt on a terminal: approvals go to the MCP client's user (drop --approve prompt)",
        ));
    }
    let http = match http {
        None => None,
        Some(addr) => {
            let token = match std::env::var("WARDEN_HTTP_TOKEN") {
                Ok(t) if t.trim().len() >= 16 => t.trim().to_string(),
                Ok(_) => return Err(fail(2, "WARDEN_HTTP_TOKEN must be at least 16 characters")),
                Err(_) => {
                    let mut b = [0u8; 32];
                    getrandom::fill(&mut b).map_err(|e| fail(70, format!("no randomness for the token: {e}")))?;
                    let t = hex::encode(b);
                    eprintln!("warden: bearer token: {t} (set WARDEN_HTTP_TOKEN to choose one)");
                    t
                }
            };
            Some(crate::mcp::http::HttpOptions { addr, token, allowed_origins: allow_origin.to_vec() })
        }
    };
    let options = crate::mcp::ServeOptions { approval_timeout, approver_only: cli.approve.is_some(), http };
    let executor = executor(cli)?;
    crate::mcp::serve(executor, options).map_err(|m| fail(70, m))?;
    Ok(0)
}

fn audit(cli: &Cli, format: AuditFormat, fail_on: FailOn, self_test: bool) -> Result<u8, Failure> {
    use crate::checkup::{Report, escapes, host::HostReport, sarif, selftest, tool_layers};
    use crate::lint::{Severity, Surroundings, lint};
    let ctx = context(cli)?;
    let (text, origin, dir) = policy_source(cli)?;
    let host = HostReport::probe();
    let mut loaded = Policy::from_text(&text, &origin, &dir, &ctx);
    if let Ok(policy) = &mut loaded {
        with_profile(cli, policy)?;
    }
    let mut tool_names = None;
    let (tools, descriptions, poisoned) = match &loaded {
        Ok(policy) => {
            let runtime = ComponentRuntime::new(cache_dir()).map_err(|e| fail(70, e.message))?;
            let (catalog, servers) = catalog_of(policy, &runtime);
            let descriptions = catalog
                .entries()
                .filter(|e| e.spec.description.is_none())
                .filter_map(|e| e.state.as_ref().ok().map(|r| (e.spec.name.clone(), r.description.clone())))
                .collect();
            let poisoned = poisoned_definitions(policy, &runtime, &servers);
            // Under a profile, servers it cannot use were not started: their names are unknown.
            if policy.profile.is_none() {
                tool_names = Some(catalog.entries().map(|e| e.spec.name.clone()).collect());
            }
            (tool_layers(policy, &catalog, &host), descriptions, poisoned)
        }
        Err(_) => (Vec::new(), Default::default(), Vec::new()),
    };
    let mut own = Vec::new();
    if origin != crate::policy::DEFAULT_POLICY_NAME {
        own.push(("policy file".to_string(), absolute(Path::new(&origin))));
    }
    own.extend(own_files(cli));
    let around = Surroundings {
        refused: loaded.as_ref().err().cloned(),
        descriptions,
        poisoned,
        own_files: own,
        hard_links: Some(crate::checkup::links::hard_links),
        tool_names,
        no_net_namespace: crate::runtime::process::namespaces::NsSupport::probe(nix::unistd::geteuid().is_root())
            .reason,
    };
    let mut findings = lint(&text, &origin, &ctx, &around);
    let mode = loaded.as_ref().map(|p| p.mode).unwrap_or_default();
    let cases = if self_test {
        Some(selftest::run(mode, cache_dir()).map_err(|e| fail(70, format!("the self-test cannot run: {e}")))?)
    } else {
        None
    };
    if let Some(c) = &cases {
        findings.extend(escapes(c, &origin));
    }
    let report = Report { policy: origin, host, tools, self_test: cases, findings };
    match format {
        AuditFormat::Text => print!("{}", report.to_text()),
        AuditFormat::Json => print_json(&serde_json::to_value(&report).unwrap_or_default()),
        AuditFormat::Sarif => print_json(&sarif::to_sarif(&report)),
    }
    let threshold = match fail_on {
        FailOn::Error => Some(Severity::Error),
        FailOn::Warning => Some(Severity::Warning),
        FailOn::Never => None,
    };
    Ok(u8::from(report.fails(threshold)))
}

/// The third-party definitions of `policy`'s plugins and servers that address
/// the model, and that the policy neither replaces nor denies (WL111).
fn poisoned_definitions(
    policy: &Policy,
    runtime: &ComponentRuntime,
    servers: &ServerPool,
) -> Vec<(&'static str, String, String, crate::lint::Poisoned)> {
    use crate::policy::{PluginKind, PluginSource};
    let mut out = Vec::new();
    let mut judge = |section: &'static str, owner: &str, name: String, def: &crate::runtime::wasm::ToolDef| {
        let Some(p) = crate::lint::definition_poisoning(&def.description, &def.input_schema) else { return };
        if p.answered_by(policy.tools.get(&name)) {
            return;
        }
        out.push((section, owner.to_string(), name, p));
    };
    for p in policy.plugins.values() {
        if !matches!(p.source, PluginSource::File(_)) || p.kind == PluginKind::Command {
            continue;
        }
        let Ok(loaded) = runtime.load(p) else { continue };
        for def in &loaded.tools {
            // Only the tools the policy offers reach the model.
            if policy.tools.get(&def.name).is_some_and(|t| t.plugin() == Some(p.name.as_str())) {
                judge("plugins", &p.name, def.name.clone(), def);
            }
        }
    }
    for s in policy.servers.values() {
        for def in servers.definitions(s).unwrap_or_default() {
            judge("servers", &s.name, s.tool_spec(&def.name).name, &def);
        }
    }
    out
}

/// The catalog of `policy` as the executor would build it, and the servers it started.
fn catalog_of(policy: &Policy, runtime: &ComponentRuntime) -> (Catalog, ServerPool) {
    let servers = ServerPool::new(crate::runtime::process::default_helper(), policy);
    let pins = Pins::load(policy.lock_path.as_deref());
    (Catalog::build_all(policy, runtime, &servers, &pins), servers)
}

/// `warden lock [--check | --show TOOL]`.
fn lock(cli: &Cli, check: bool, show: Option<&str>) -> Result<u8, Failure> {
    use crate::lock::{Lock, Owner};
    use crate::policy::{PluginKind, PluginSource};
    let ctx = context(cli)?;
    let policy = load_policy(cli, &ctx)?;
    let Some(path) = policy.lock_path.clone() else {
        return Err(fail(
            2,
            "the embedded default policy has only builtin plugins, which warden itself pins: nothing to lock \
             (pass --policy FILE)",
        ));
    };
    let runtime = ComponentRuntime::new(cache_dir()).map_err(|e| fail(70, e.message))?;
    let mut new = Lock::new();
    // Every definition, by the line `changes` names it with: its owner, the name the catalog offers, the definition.
    let mut found: BTreeMap<String, (Owner<'_>, String, crate::runtime::wasm::ToolDef)> = BTreeMap::new();
    for p in policy.plugins.values() {
        if !matches!(p.source, PluginSource::File(_)) || p.kind == PluginKind::Command {
            continue;
        }
        let loaded = runtime.load(p).map_err(|e| fail(1, format!("cannot lock: {}", e.message)))?;
        new.insert(Owner::Plugin(&p.name), &loaded.tools);
        for t in &loaded.tools {
            found.insert(format!("plugin {}: {}", p.name, t.name), (Owner::Plugin(&p.name), t.name.clone(), t.clone()));
        }
    }
    let servers = ServerPool::new(crate::runtime::process::default_helper(), &policy);
    for s in policy.servers.values() {
        let defs = servers.definitions(s).map_err(|e| {
            fail(1, format!("cannot lock: server {}: {}", s.name, crate::shape::sanitize_str(&e.message)))
        })?;
        new.insert(Owner::Server(&s.name), &defs);
        for t in &defs {
            let owner = Owner::Server(&s.name);
            found.insert(format!("server {}: {}", s.name, t.name), (owner, owner.tool_name(&t.name), t.clone()));
        }
    }
    let old = match Pins::load(Some(&path)) {
        Pins::Loaded(_, lock) => Some(lock),
        Pins::Broken(_, why) => {
            eprintln!("note: the existing {} cannot be read ({why}); it is replaced", path.display());
            None
        }
        Pins::Missing(_) | Pins::Unchecked => None,
    };
    if let Some(tool) = show {
        let Some((key, (owner, name, def))) = found.iter().find(|(_, (_, name, d))| name == tool || d.name == tool)
        else {
            let names: Vec<&str> = found.values().map(|(_, n, _)| n.as_str()).collect();
            return Err(fail(
                2,
                format!("no plugin or server of this policy offers {tool:?} (they offer: {})", names.join(", ")),
            ));
        };
        let (added, changed, _) = old.clone().unwrap_or_else(Lock::new).changes(&new);
        let status = if added.contains(key) {
            "new: not in warden.lock"
        } else if changed.contains(key) {
            "CHANGED since warden.lock was written"
        } else {
            "pinned in warden.lock"
        };
        println!("{name} ({key}): {status}");
        show_definition(def);
        if let Some(p) = crate::lint::definition_poisoning(&def.description, &def.input_schema) {
            println!("POISONING: {} (refused unless the policy replaces it; see `warden audit`, WL111)", p.why);
        }
        if changed.contains(key) {
            show_change(old.as_ref().and_then(|o| o.accepted(*owner, &def.name)), def);
        }
        return Ok(0);
    }
    let (added, changed, removed) = old.clone().unwrap_or_else(Lock::new).changes(&new);
    for (what, list) in [("new", &added), ("CHANGED", &changed), ("removed", &removed)] {
        for t in list {
            println!("{what:<8} {}", crate::shape::sanitize_str(t));
            let Some((owner, _, def)) = found.get(t) else { continue };
            if what == "CHANGED" {
                show_change(old.as_ref().and_then(|o| o.accepted(*owner, &def.name)), def);
            } else {
                let shown: String = crate::shape::sanitize_str(&def.description).chars().take(400).collect();
                let more = if def.description.chars().count() > 400 { "…" } else { "" };
                println!("         description: {shown:?}{more}");
            }
        }
    }
    // Definitions that address the model are never accepted silently.
    let mut poisoned = Vec::new();
    for (key, (_, name, def)) in &found {
        let Some(p) = crate::lint::definition_poisoning(&def.description, &def.input_schema) else { continue };
        if p.answered_by(policy.tools.get(name)) {
            continue;
        }
        poisoned.push(format!("{key}: {} (tool poisoning)", p.why));
    }
    if !poisoned.is_empty() {
        for p in &poisoned {
            println!("REFUSED  {}", crate::shape::sanitize_str(p));
        }
        println!(
            "{} not written: read each with `warden lock --show TOOL`; replace a poisoned description with the \
             policy's own ([tools.\"TOOL\"] description = \"…\") or deny the tool (tier = \"deny\")",
            path.display()
        );
        return Ok(1);
    }
    let tools: usize = new.plugins.values().chain(new.servers.values()).map(|t| t.len()).sum();
    let up_to_date = old.as_ref().is_some_and(|o| o.same_pins(&new));
    if check {
        if up_to_date {
            println!("{} is up to date: {tools} tool definition(s)", path.display());
            return Ok(0);
        }
        println!(
            "{} is {}: run `warden lock` after reviewing the changes above",
            path.display(),
            if old.is_none() { "missing" } else { "out of date" }
        );
        return Ok(1);
    }
    write_atomically(&path, new.to_text().as_bytes())
        .map_err(|e| fail(70, format!("cannot write {}: {e}", path.display())))?;
    println!(
        "wrote {}: {} plugin(s), {} server(s), {tools} tool definition(s){}",
        path.display(),
        new.plugins.len(),
        new.servers.len(),
        if up_to_date { " (unchanged)" } else { "" }
    );
    Ok(0)
}

/// `text` with control and invisible characters shown as `\u{…}` escapes, the rest as it is.
fn shown(text: &str) -> String {
    text.chars()
        .map(|c| {
            let hidden = c.is_control()
                || matches!(c, '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2060}'..='\u{2069}' | '\u{FEFF}' | '\u{E0000}'..='\u{E007F}');
            if hidden { c.escape_unicode().to_string() } else { c.to_string() }
        })
        .collect()
}

/// The input schema as indented JSON (as given when it is not JSON).
fn pretty_schema(text: &str) -> String {
    serde_json::from_str::<Value>(text)
        .and_then(|v| serde_json::to_string_pretty(&v))
        .unwrap_or_else(|_| text.to_string())
}

/// A definition, for a person to read: control and invisible characters shown escaped.
fn show_definition(def: &crate::runtime::wasm::ToolDef) {
    println!("description: {:?}", def.description);
    println!("input schema:");
    for line in pretty_schema(&def.input_schema).lines() {
        println!("  {}", shown(line));
    }
}

/// What changed in a definition since it was accepted: a line diff of its
/// description and of its indented input schema.
fn show_change(old: Option<&crate::lock::Accepted>, def: &crate::runtime::wasm::ToolDef) {
    let Some(old) = old else {
        println!("         (warden.lock keeps no text of the accepted definition: written by an older warden)");
        println!("         description now: {:?}", def.description);
        return;
    };
    let parts = [
        ("description", old.description.clone(), def.description.clone()),
        ("input schema", pretty_schema(&old.input_schema), pretty_schema(&def.input_schema)),
    ];
    for (what, before, after) in parts {
        if before == after {
            println!("         {what}: unchanged");
            continue;
        }
        println!("         {what}:");
        let (before, after) = (format!("{before}\n"), format!("{after}\n"));
        for change in similar::TextDiff::from_lines(&before, &after).iter_all_changes() {
            let sign = match change.tag() {
                similar::ChangeTag::Delete => "-",
                similar::ChangeTag::Insert => "+",
                similar::ChangeTag::Equal => " ",
            };
            println!("           {sign} {}", shown(change.value().trim_end_matches('\n')));
        }
    }
}

/// Writes `path` through a temporary file in the same directory, fsynced, then renamed.
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let tmp = dir.join(format!(".{}.tmp-{}", crate::policy::LOCK_FILE, std::process::id()));
    let result = (|| {
        // create_new: a name planted beforehand (a link a tool left) is never followed.
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        std::fs::File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// What an import lets a component ask for.
fn reach(import: &str) -> String {
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

fn plugin_inspect(file: &Path, as_json: bool) -> Result<u8, Failure> {
    use crate::runtime::wasm::MAX_COMPONENT_FILE;
    use sha2::Digest;
    let meta = std::fs::metadata(file).map_err(|e| fail(2, format!("cannot read {}: {e}", file.display())))?;
    if meta.len() > MAX_COMPONENT_FILE {
        return Err(fail(2, format!("{} is larger than the {MAX_COMPONENT_FILE} bytes warden loads", file.display())));
    }
    let bytes = std::fs::read(file).map_err(|e| fail(2, format!("cannot read {}: {e}", file.display())))?;
    let sha256 = hex::encode(sha2::Sha256::digest(&bytes));
    let runtime = ComponentRuntime::new(cache_dir()).map_err(|e| fail(70, e.message))?;
    let imports = runtime.imports(&bytes).map_err(|e| fail(1, format!("{}: {}", file.display(), e.message)))?;
    let spec = crate::policy::PluginSpec {
        name: "inspected".into(),
        source: crate::policy::PluginSource::File(file.to_path_buf()),
        kind: crate::policy::PluginKind::Tool,
        sha256: Some(sha256.clone()),
        location: file.display().to_string(),
    };
    let exports = runtime.exports(&bytes).unwrap_or_default();
    let command = exports.iter().any(|e| e.starts_with("wasi:cli/run@"))
        && !exports.iter().any(|e| e.starts_with("warden:plugin/tool@"));
    if command {
        return inspect_command(file, &sha256, bytes.len(), &imports, as_json);
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
                            "poisoning": crate::lint::definition_poisoning(&t.description, &t.input_schema)
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
                    if let Some(p) = crate::lint::definition_poisoning(&t.description, &t.input_schema) {
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
    Ok(u8::from(tools.is_err() || bad_schema))
}

/// `plugin inspect` of a `wasi:cli/command` program: no tools of its own.
fn inspect_command(file: &Path, sha256: &str, size: usize, imports: &[String], as_json: bool) -> Result<u8, Failure> {
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
            "note": note,
        }));
        return Ok(0);
    }
    println!("file     {}", file.display());
    println!("sha256   {sha256}");
    println!("size     {size} bytes");
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
fn schema_error(text: &str) -> Option<String> {
    crate::catalog::input_schema(text).err()
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
        .map_err(|e| fail(2, format!("cannot read stdin: {e}")))?;
    if s.len() as u64 > MAX_STDIN_BYTES {
        return Err(fail(2, format!("stdin is larger than {MAX_STDIN_BYTES} bytes")));
    }
    Ok(s)
}

fn context(cli: &Cli) -> Result<Context, Failure> {
    let ws = match &cli.workspace {
        Some(w) => w.clone(),
        None => std::env::current_dir().map_err(|e| fail(2, format!("cannot find the current directory: {e}")))?,
    };
    Context::from_env(&ws)
        .map_err(|e| fail(2, format!("workspace {}: {e} (pass an existing --workspace)", ws.display())))
}

/// The policy's text, its name in messages and the directory relative paths
/// in it start from: `--policy`, else `./warden.toml`, else the embedded
/// default (the one place that decides).
fn policy_source(cli: &Cli) -> Result<(String, String, PathBuf), Failure> {
    let path = match &cli.policy {
        Some(p) => p.clone(),
        None if Path::new("warden.toml").is_file() => PathBuf::from("warden.toml"),
        None => {
            return Ok((
                crate::policy::DEFAULT_POLICY.to_string(),
                crate::policy::DEFAULT_POLICY_NAME.to_string(),
                PathBuf::from("."),
            ));
        }
    };
    let text = std::fs::read_to_string(&path).map_err(|e| {
        fail(2, format!("cannot read the policy {}: {e} (pass an existing file with --policy)", path.display()))
    })?;
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).map(Path::to_path_buf);
    Ok((text, path.display().to_string(), dir.unwrap_or_else(|| PathBuf::from("."))))
}

fn load_policy(cli: &Cli, ctx: &Context) -> Result<Policy, Failure> {
    let (text, origin, dir) = policy_source(cli)?;
    let mut policy = Policy::from_text(&text, &origin, &dir, ctx).map_err(|e| fail(2, e.to_string()))?;
    with_profile(cli, &mut policy)?;
    policy.own_files.extend(own_files(cli));
    Ok(policy)
}

/// warden's own files beyond the policy and its lock: the audit log and the
/// compiled-component cache (every call protects them inside its write grants).
fn own_files(cli: &Cli) -> Vec<(String, PathBuf)> {
    let mut own = vec![("audit log".to_string(), absolute(&cli.audit_log.clone().unwrap_or_else(audit::default_path)))];
    if let Some(cache) = cache_dir() {
        own.push(("component cache".into(), absolute(&cache)));
    }
    own
}

/// Applies `--profile`, if given.
fn with_profile(cli: &Cli, policy: &mut Policy) -> Result<(), Failure> {
    match &cli.profile {
        Some(name) => policy.select_profile(name).map_err(|m| fail(2, m)),
        None => Ok(()),
    }
}

fn cache_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("WARDEN_CACHE_DIR") {
        return if d.is_empty() { None } else { Some(PathBuf::from(d)) };
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("warden").join("components"))
}

fn approve_mode(cli: &Cli) -> ApproveMode {
    if matches!(cli.command, Command::Serve { .. }) {
        // stdin and stdout carry MCP: the client answers, through the server's own hook.
        return if cli.approve == Some(ApproveArg::Yes) { ApproveMode::Yes } else { ApproveMode::Deny };
    }
    match cli.approve {
        Some(ApproveArg::Yes) => ApproveMode::Yes,
        Some(ApproveArg::Deny) => ApproveMode::Deny,
        Some(ApproveArg::Prompt) => ApproveMode::Prompt,
        None => {
            let attached = (std::io::stdin().is_terminal() || std::io::stderr().is_terminal())
                && std::fs::OpenOptions::new().read(true).write(true).open("/dev/tty").is_ok();
            if attached { ApproveMode::Prompt } else { ApproveMode::Deny }
        }
    }
}

fn executor(cli: &Cli) -> Result<Executor, Failure> {
    executor_for(cli, None)
}

/// The executor; with `only`, for calls of that one tool (nothing else is loaded).
fn executor_for(cli: &Cli, only: Option<&str>) -> Result<Executor, Failure> {
    let ctx = context(cli)?;
    let policy = load_policy(cli, &ctx)?;
    let log_path = cli.audit_log.clone().unwrap_or_else(audit::default_path);
    let log = AuditLog::open(&log_path).map_err(|e| {
        fail(70, format!("cannot open the audit log {}: {e} (pass a writable --audit-log)", log_path.display()))
    })?;
    let options = Options { cache_dir: cache_dir(), sandbox_helper: crate::runtime::process::default_helper() };
    Executor::new_for(policy, Approver::new(approve_mode(cli)), log, options, only)
        .map_err(|e| fail(e.code.exit_code(), e.message))
}

fn list(catalog: &Catalog, as_json: bool) {
    if as_json {
        let tools: Vec<Value> = catalog
            .visible()
            .map(|e| {
                let (read, write, net) = e.spec.grants_text(false);
                let mut o = json!({
                    "name": e.spec.name,
                    "tier": e.spec.tier,
                    "runtime": e.spec.runtime(),
                    "plugin": e.spec.plugin(),
                    "available": e.state.is_ok(),
                    "grants": {"read": read, "write": write, "net": net,
                               "sysv_ipc": e.spec.grants.sysv_ipc, "inotify": e.spec.grants.inotify},
                    "limits": {
                        "timeout": format_duration(e.spec.limits.timeout),
                        "memory": format_size(e.spec.limits.memory),
                        "max_output": format_size(e.spec.limits.max_output),
                    },
                });
                match &e.state {
                    Ok(r) => {
                        o["description"] = json!(r.description);
                        o["input_schema"] = r.schema.clone();
                    }
                    Err(err) => {
                        o["unavailable"] = json!(err.message);
                        // What the refused tool says now, to review before accepting it.
                        if let Some(def) = &e.refused_definition {
                            let schema = serde_json::from_str::<Value>(&def.input_schema)
                                .unwrap_or_else(|_| json!(def.input_schema));
                            o["refused_definition"] = json!({"description": def.description, "input_schema": schema});
                        }
                    }
                }
                o
            })
            .collect();
        print_json(&Value::Array(tools));
        return;
    }
    type Row<'a> = (String, &'a str, String, String);
    let rows: Vec<Row<'_>> = catalog
        .visible()
        .map(|e| {
            let grants = e.spec.grant_words(true);
            let grants = if grants.is_empty() { "none".to_string() } else { grants.join(", ") };
            let description = match &e.state {
                Ok(r) => r.description.clone(),
                Err(err) => format!("UNAVAILABLE: {}", err.message),
            };
            (e.spec.name.clone(), e.spec.tier.as_str(), grants, description)
        })
        .collect();
    // Columns as wide as their longest entry (the grants column at most 60): long names keep the table aligned.
    let width =
        |f: &dyn Fn(&Row<'_>) -> usize, min: usize, max: usize| rows.iter().map(f).max().unwrap_or(0).clamp(min, max);
    let name_w = width(&|r| r.0.chars().count(), 4, usize::MAX);
    let grants_w = width(&|r| r.2.chars().count(), 6, 60);
    println!("{:<name_w$} {:<8} {:<grants_w$} DESCRIPTION", "TOOL", "TIER", "GRANTS");
    for (name, tier, grants, description) in &rows {
        println!("{name:<name_w$} {tier:<8} {grants:<grants_w$} {description}");
    }
}

fn policy_check(policy: &Policy, catalog: &Catalog) -> u8 {
    let mode = match policy.mode {
        crate::policy::SandboxMode::Enforce => "enforce",
        crate::policy::SandboxMode::BestEffort => "best-effort",
    };
    println!("policy {} (sandbox mode {mode})", policy.origin);
    if let Some(p) = &policy.profile {
        println!("profile {} ({}): {}", p.name, p.location, p.tools.join(", "));
        if let Some(d) = &p.description {
            println!("  {}", crate::shape::sanitize_str(d));
        }
    }
    // A profile's pattern that offers nothing is a mistake worth seeing (WL118).
    // Under a profile, servers it cannot use were not started: judge only its own patterns.
    let judged = policy.profiles.values().filter(|p| policy.profile.as_ref().is_none_or(|s| s.name == p.name));
    for p in judged {
        for pattern in &p.tools {
            if !catalog.entries().any(|e| crate::policy::glob::matches(pattern, &e.spec.name)) {
                eprintln!("warning: profile {} ({}): {pattern:?} matches no tool of this policy", p.name, p.location);
            }
        }
    }
    println!("{:<18} {:<8} {:<9} {:<7} {:<40} RULES", "TOOL", "TIER", "TIMEOUT", "MEMORY", "GRANTS");
    let mut broken = 0;
    for e in catalog.entries() {
        let grants = e.spec.grant_words(true);
        println!(
            "{:<18} {:<8} {:<9} {:<7} {:<40} {}",
            e.spec.name,
            e.spec.tier.as_str(),
            format_duration(e.spec.limits.timeout),
            format_size(e.spec.limits.memory),
            if grants.is_empty() { "none".to_string() } else { grants.join(", ") },
            e.spec.rules.len()
        );
        if e.spec.tier != Tier::Deny {
            let mechanism = crate::checkup::paths_mechanism(&e.spec);
            match crate::runtime::protect::preview(&e.spec) {
                Ok(p) => {
                    for line in p.summary() {
                        println!("  {line} [{mechanism}]");
                    }
                }
                Err(why) => println!("  protected and denied paths: {why}"),
            }
            if !e.spec.grants.net.is_empty() {
                println!("  network: {}", crate::checkup::egress_mechanism(&e.spec));
            }
        }
        if let Err(err) = &e.state
            && e.spec.tier != Tier::Deny
        {
            broken += 1;
            eprintln!("error: {}", err.message);
        }
    }
    if broken > 0 {
        eprintln!("invalid: {broken} tool(s) cannot be used");
        1
    } else {
        println!("valid: {} tool(s)", catalog.entries().count());
        0
    }
}

/// The result's hints (what to add to the policy after a refusal), once each,
/// on stderr: the end of a CI step's log, where a person looks.
fn print_hints(tool: &str, response: &crate::CallResponse) {
    let hints = response.result.as_ref().and_then(|r| r.get("hints")).and_then(Value::as_array);
    for hint in hints.into_iter().flatten().filter_map(Value::as_str) {
        eprintln!("warden: {tool}: hint: {}", crate::shape::sanitize_str(hint));
    }
}

/// `warden run [--tool NAME] -- CMD …`: the command line under the tool's
/// walls, warden's stdio passed through; exits with the program's status, or
/// warden's code (and a line on stderr) when it refused or could not run it.
fn run_command(cli: &Cli, tool: &str, command: &[String]) -> Result<u8, Failure> {
    let executor = executor_for(cli, Some(tool))?;
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
fn shell_word(word: &str) -> String {
    let plain = !word.is_empty() && word.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b));
    if plain { word.to_string() } else { format!("'{}'", word.replace('\'', "'\\''")) }
}
