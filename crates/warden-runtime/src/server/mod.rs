//! Sandboxed MCP servers ([`ServerPool`]): `[servers.NAME]` entries, each a
//! long-running program inside the process sandbox, spoken to with MCP over its
//! stdin and stdout ([`client`]). A server starts when its tools are first
//! needed, is restarted by the next call after a crash (with a growing
//! backoff), and must list the same definitions each time. Servers are started
//! from one long-lived thread: the parent-death signal that ties a sandboxed
//! program to warden fires when the *thread* that spawned it exits. docs/plugins.md
//! has the rest.

pub mod client;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use self::client::Connection;
use super::ToolDef;
use super::process::{ProcessRuntime, program};
use super::{CallTmp, Cancel, OutputTap, RunOutput, SandboxReport, Stream, Usage, Walls};
use crate::error::{CallError, ErrorCode};
use crate::policy::ServerSpec;

/// How long a server has to start and answer `initialize` and `tools/list`.
pub const START_TIMEOUT: Duration = Duration::from_secs(30);
/// The most tools warden takes from one server.
pub const MAX_TOOLS: usize = 256;
/// The most `tools/list` pages warden reads.
const MAX_PAGES: usize = 32;
/// A run shorter than this counts towards the restart backoff.
const SHORT_RUN: Duration = Duration::from_secs(60);
/// The longest wait between restarts.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// The MCP revision warden's client asks for.
const PROTOCOL_VERSION: &str = "2025-06-18";

type Job = Box<dyn FnOnce() + Send>;

/// The servers of one policy.
pub struct ServerPool {
    processes: ProcessRuntime,
    workspace: PathBuf,
    /// Where the policy's tools may write ([`crate::Policy::writable_roots`]).
    writable: Arc<[PathBuf]>,
    /// warden's own files ([`crate::Policy::own_files`]), protected in every start.
    own: Arc<[(String, PathBuf)]>,
    slots: Mutex<BTreeMap<String, Arc<Mutex<Slot>>>>,
    spawner: Mutex<Sender<Job>>,
}

impl std::fmt::Debug for ServerPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerPool").finish_non_exhaustive()
    }
}

/// One server's state.
#[derive(Default)]
struct Slot {
    live: Option<Live>,
    /// The definitions of its first run: every later run must list the same.
    tools: Option<Vec<ToolDef>>,
    /// Consecutive short runs or failed starts.
    failures: u32,
    /// No start before this.
    not_before: Option<Instant>,
    /// Why the server is refused for the rest of the session.
    poisoned: Option<String>,
    /// Why the last start failed.
    last_error: Option<String>,
}

/// A running server.
struct Live {
    conn: Arc<Connection>,
    sandbox: SandboxReport,
    /// What its egress proxy saw, drained after each call.
    journal: Arc<crate::egress::Journal>,
    /// Its grants, for the hints of a call that failed.
    grants: Arc<HintGrants>,
    _tmp: Option<CallTmp>,
}

/// A server's grants as [`crate::hints`] reads them.
struct HintGrants {
    name: String,
    dirs: Vec<(PathBuf, bool)>,
    links: Vec<PathBuf>,
    net: bool,
    protected: Vec<PathBuf>,
    /// The credentials it holds: their real values never reach a result.
    credentials: Vec<Arc<crate::egress::vault::Held>>,
}

impl HintGrants {
    fn of(name: &str, walls: &Walls) -> HintGrants {
        HintGrants {
            name: name.to_string(),
            dirs: walls.dirs.clone(),
            links: walls.links.clone(),
            net: !walls.net.is_empty(),
            protected: walls.protect.rules.iter().map(|r| r.path.clone()).collect(),
            credentials: walls.credentials.clone(),
        }
    }

    /// The hints for what the server said while a call failed.
    fn hints(&self, said: &str) -> Vec<String> {
        let g = crate::hints::Grants {
            tool: &self.name,
            dirs: &self.dirs,
            links: &self.links,
            net: self.net,
            protected: &self.protected,
        };
        crate::hints::from_stderr(&g, said)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl ServerPool {
    /// A pool that starts the servers of `policy` through `helper`.
    pub fn new(helper: Option<PathBuf>, policy: &crate::policy::Policy) -> ServerPool {
        let (mode, workspace, writable) = (policy.mode, policy.workspace.clone(), policy.writable_roots().into());
        let (tx, rx) = channel::<Job>();
        let _ = std::thread::Builder::new().name("warden-servers".into()).spawn(move || {
            while let Ok(job) = rx.recv() {
                job();
            }
        });
        ServerPool {
            processes: ProcessRuntime::new(helper, mode),
            workspace,
            writable,
            own: policy.own_files.clone().into(),
            slots: Mutex::default(),
            spawner: Mutex::new(tx),
        }
    }

    fn slot(&self, name: &str) -> Arc<Mutex<Slot>> {
        lock(&self.slots).entry(name.to_string()).or_default().clone()
    }

    /// The tools `spec` offers, starting it if needed.
    pub fn definitions(&self, spec: &ServerSpec) -> Result<Vec<ToolDef>, CallError> {
        let slot = self.slot(&spec.name);
        let mut slot = lock(&slot);
        self.ensure(spec, &mut slot, START_TIMEOUT)?;
        Ok(slot.tools.clone().unwrap_or_default())
    }

    /// The sandbox the running server is confined by.
    pub fn sandbox(&self, name: &str) -> Option<SandboxReport> {
        let slot = self.slot(name);
        let slot = lock(&slot);
        slot.live.as_ref().map(|l| l.sandbox.clone())
    }

    /// What the server asked of the network since the last time this was
    /// asked (its proxy's journal, drained): the attempts of the calls that
    /// ran meanwhile (several at once share them).
    pub fn network(&self, name: &str) -> Option<Value> {
        let slot = self.slot(name);
        let slot = lock(&slot);
        slot.live.as_ref().and_then(|l| l.journal.take())
    }

    /// The running server's process id (for tests and diagnostics).
    pub fn pid(&self, name: &str) -> Option<u32> {
        let slot = self.slot(name);
        let slot = lock(&slot);
        slot.live.as_ref().filter(|l| l.conn.is_alive()).map(|l| l.conn.pid())
    }

    /// Calls `tool` of `spec` with `args`, within the server's `limits.timeout`.
    pub fn call(
        &self,
        spec: &ServerSpec,
        tool: &str,
        args: &Value,
        cancel: &Cancel,
        tap: Option<&OutputTap>,
    ) -> Result<(RunOutput, SandboxReport), CallError> {
        let (conn, sandbox, grants) = {
            let slot = self.slot(&spec.name);
            let mut slot = lock(&slot);
            self.ensure(spec, &mut slot, spec.limits.timeout)?;
            let live = slot.live.as_ref().ok_or_else(|| {
                CallError::new(ErrorCode::Internal, format!("server {}: not running after a start", spec.name))
            })?;
            (live.conn.clone(), live.sandbox.clone(), live.grants.clone())
        };
        // With a tap (`warden call --stream`), the server's progress shows as lines as it comes.
        let name = format!("{}{}{tool}", spec.name, crate::policy::SERVER_TOOL_SEPARATOR);
        let show = |p: &Value| {
            if let Some(tap) = tap {
                tap(Stream::Stderr, progress_line(&name, p).as_bytes());
            }
        };
        let params = json!({"name": tool, "arguments": args});
        let on_progress: Option<&dyn Fn(&Value)> = if tap.is_some() { Some(&show) } else { None };
        let mark = conn.stderr_mark();
        let result = conn.request_with_progress("tools/call", params, spec.limits.timeout, cancel, on_progress);
        // What it wrote while answering reaches the real tree now, judged.
        let applied = conn.apply_layer();
        let refused = applied.as_ref().and_then(|a| a.to_json(20, &self.workspace));
        let note = match &refused {
            Some(r) => format!("; warden refused changes it made: {r}"),
            None => String::new(),
        };
        let result = result.map_err(|e| CallError::new(e.code, format!("{}{note}", e.message)))?;
        let output_bytes = result.to_string().len() as u64;
        let usage = Usage { output_bytes, ..Usage::default() };
        if result.get("isError").and_then(Value::as_bool) == Some(true) {
            let text = text_of(&result);
            // What it answered and what it wrote to stderr meanwhile: the grant a refusal needs.
            let hints = grants.hints(&format!("{text}\n{}", conn.stderr_since(mark)));
            let hints: String = hints.iter().map(|h| format!("; hint: {h}")).collect();
            return Err(CallError::new(
                ErrorCode::ExecutionFailed,
                format!("{}__{tool}: the server reports an error: {text}{note}{hints}", spec.name),
            ));
        }
        let mut value = json!({"content": result.get("content").cloned().unwrap_or_else(|| json!([]))});
        if let Some(s) = result.get("structuredContent") {
            value["structuredContent"] = s.clone();
        }
        if let Some(r) = refused {
            // MCP clients see content blocks: the refusal is one too.
            if let Some(blocks) = value["content"].as_array_mut() {
                blocks.push(json!({"type": "text", "text": format!("warden refused changes this call made: {r}")}));
            }
            value["layer"] = r;
        }
        crate::credentials::redact_value(&name, &grants.credentials, &mut value)?;
        // MCP content: fitted to max_output block by block (an image is dropped whole, never cut).
        Ok((RunOutput { value, usage, sandbox: Some(sandbox.clone()), blocks: true }, sandbox))
    }

    /// Makes sure the server runs: restarts it (after its backoff) when it ended.
    fn ensure(&self, spec: &ServerSpec, slot: &mut Slot, patience: Duration) -> Result<(), CallError> {
        if let Some(why) = &slot.poisoned {
            return Err(CallError::new(ErrorCode::Denied, why.clone()));
        }
        if let Some(live) = &slot.live {
            if live.conn.is_alive() {
                return Ok(());
            }
            // It ended: count a short run towards the backoff.
            let short = live.conn.started.elapsed() < SHORT_RUN;
            slot.failures = if short { slot.failures + 1 } else { 1 };
            slot.not_before = Some(Instant::now() + backoff(slot.failures));
            tracing::warn!("{}", live.conn.ended().unwrap_or_else(|| format!("server {} ended", spec.name)));
            slot.live = None;
        }
        if let Some(at) = slot.not_before {
            let wait = at.saturating_duration_since(Instant::now());
            if wait > patience.min(MAX_BACKOFF) {
                return Err(CallError::new(
                    ErrorCode::ExecutionFailed,
                    format!(
                        "server {} failed {} time(s) in a row{}; the next start is in {:.1}s",
                        spec.name,
                        slot.failures,
                        slot.last_error.as_ref().map(|e| format!(" (last: {e})")).unwrap_or_default(),
                        wait.as_secs_f64()
                    ),
                ));
            }
            std::thread::sleep(wait);
        }
        match self.start(spec) {
            Ok((live, tools)) => {
                if let Some(before) = &slot.tools
                    && !same_definitions(before, &tools)
                {
                    let why = format!(
                        "server {} listed different tool definitions after a restart than when it first started; \
                         its tools are refused for the rest of this session (review them, then `warden lock`)",
                        spec.name
                    );
                    slot.poisoned = Some(why.clone());
                    return Err(CallError::new(ErrorCode::Denied, why));
                }
                slot.tools.get_or_insert(tools);
                slot.live = Some(live);
                slot.last_error = None;
                Ok(())
            }
            Err(e) => {
                slot.failures += 1;
                slot.not_before = Some(Instant::now() + backoff(slot.failures.max(2)));
                slot.last_error = Some(e.message.clone());
                Err(e)
            }
        }
    }

    /// Starts the server on the spawner thread and lists its tools.
    fn start(&self, spec: &ServerSpec) -> Result<(Live, Vec<ToolDef>), CallError> {
        let (tx, rx) = channel();
        let job_spec = spec.clone();
        let (workspace, writable, own) = (self.workspace.clone(), self.writable.clone(), self.own.clone());
        let processes = self.processes.clone();
        let job: Job = Box::new(move || {
            let _ = tx.send(start_on_this_thread(&processes, &job_spec, &workspace, &writable, &own));
        });
        lock(&self.spawner)
            .send(job)
            .map_err(|_| CallError::new(ErrorCode::Internal, "the server spawner thread is gone".to_string()))?;
        let Started { process, sandbox, tmp, journal, program_hint, grants } = rx
            .recv()
            .map_err(|_| CallError::new(ErrorCode::Internal, "the server spawner thread is gone".to_string()))??;
        let conn = Arc::new(Connection::new(&spec.name, process)?);
        let tools = handshake(&conn, &spec.name).map_err(|e| start_failure(spec, e, &conn, program_hint))?;
        Ok((Live { conn, sandbox, journal, grants: Arc::new(grants), _tmp: tmp }, tools))
    }
}

/// One progress notification as a line: `[TOOL] progress 3/10: message`.
fn progress_line(tool: &str, p: &Value) -> String {
    let number = |k: &str| p.get(k).and_then(Value::as_f64).map(|n| format!("{n}"));
    let mut line = format!("[{tool}] progress {}", number("progress").unwrap_or_else(|| "?".into()));
    if let Some(total) = number("total") {
        line.push_str(&format!("/{total}"));
    }
    if let Some(m) = p.get("message").and_then(Value::as_str) {
        let m: String = m.chars().take(512).collect();
        line.push_str(&format!(": {m}"));
    }
    line.push('\n');
    line
}

/// Why a server did not start, said so the user can act on it: how
/// it ended (exit status, the end of its stderr), and, when the program could
/// not be executed, which path is outside its `fs.read`.
fn start_failure(spec: &ServerSpec, e: CallError, conn: &Connection, program_hint: Option<String>) -> CallError {
    // A server that ended on its own: let the reader thread record how (its exit
    // status) before stopping it, which would turn that into SIGKILL.
    let wait_ended = |for_: Duration| {
        let deadline = Instant::now() + for_;
        let mut ended = conn.ended();
        while ended.is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
            ended = conn.ended();
        }
        ended
    };
    if e.code != ErrorCode::Timeout {
        wait_ended(Duration::from_secs(2));
    }
    conn.stop();
    let ended = wait_ended(Duration::from_secs(2));
    let mut message = format!("server {} ({}) could not start: {}", spec.name, spec.location, e.message);
    if let Some(ended) = ended.as_deref().filter(|w| !e.message.contains(*w)) {
        message.push_str(&format!("; {ended}"));
    }
    let could_not_exec =
        ended.as_deref().is_some_and(|w| w.contains("exit status: 127") || w.contains("exit status: 126"));
    match program_hint {
        Some(h) => message.push_str(&format!("; {h}")),
        None if could_not_exec => message.push_str(
            "; the program could not be executed: are it, its interpreter and the libraries it loads in fs.read?",
        ),
        None => {}
    }
    CallError::new(e.code, message)
}

/// A server process as the spawner thread started it.
struct Started {
    process: crate::process::ServerProcess,
    /// The sandbox it runs in.
    sandbox: SandboxReport,
    /// Its `{tmp}`, removed with it.
    tmp: Option<CallTmp>,
    /// Its egress journal.
    journal: Arc<crate::egress::Journal>,
    /// Which path of its program no read grant covers.
    program_hint: Option<String>,
    /// Its grants, for hints.
    grants: HintGrants,
}

/// Spawns the server's confined process from the calling thread (the spawner:
/// see the module docs for why).
fn start_on_this_thread(
    processes: &ProcessRuntime,
    spec: &ServerSpec,
    workspace: &std::path::Path,
    writable: &[PathBuf],
    own: &[(String, PathBuf)],
) -> Result<Started, CallError> {
    let (walls, tmp) = Walls::for_tool(&spec.tool_spec("server"), workspace, writable, own)?;
    let granted: Vec<PathBuf> = walls.dirs.iter().map(|(d, _)| d.clone()).collect();
    let owner = format!("[servers.{}]", spec.name);
    let program_hint = spec.exec.argv.first().and_then(|p| program::hint(std::path::Path::new(p), &granted, &owner));
    let started = processes.start_server(&spec.name, &spec.exec, &walls, tmp.as_ref().map(|t| t.path.as_path()))?;
    Ok(Started {
        process: started.process,
        sandbox: started.sandbox,
        tmp,
        journal: walls.journal.clone(),
        program_hint,
        grants: HintGrants::of(&spec.name, &walls),
    })
}

/// `initialize`, `notifications/initialized`, then every page of `tools/list`.
fn handshake(conn: &Connection, name: &str) -> Result<Vec<ToolDef>, CallError> {
    let no_cancel = Cancel::new();
    let deadline = Instant::now() + START_TIMEOUT;
    let left = || deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
    let init = conn
        .request(
            "initialize",
            json!({
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "warden", "version": env!("CARGO_PKG_VERSION")},
            }),
            left(),
            &no_cancel,
        )
        .map_err(|e| CallError::new(e.code, format!("{} (while starting: initialize)", e.message)))?;
    if init.get("capabilities").and_then(|c| c.get("tools")).is_none() {
        tracing::warn!("server {name} does not declare the tools capability; asking for its tools anyway");
    }
    conn.notify("notifications/initialized", json!({}))?;
    let mut tools = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let params = match &cursor {
            Some(c) => json!({"cursor": c}),
            None => json!({}),
        };
        let page = conn
            .request("tools/list", params, left(), &no_cancel)
            .map_err(|e| CallError::new(e.code, format!("{} (while starting: tools/list)", e.message)))?;
        for t in page.get("tools").and_then(Value::as_array).into_iter().flatten() {
            let Some(tool_name) = t.get("name").and_then(Value::as_str) else { continue };
            if !valid_tool_name(tool_name) {
                tracing::warn!(
                    "server {name}: tool {:?} has a name warden does not offer; skipped",
                    shorten(tool_name)
                );
                continue;
            }
            if tools.len() >= MAX_TOOLS {
                tracing::warn!("server {name} lists more than {MAX_TOOLS} tools; the rest are not offered");
                break;
            }
            let schema = t.get("inputSchema").cloned().unwrap_or_else(|| json!({"type": "object"}));
            tools.push(ToolDef {
                name: tool_name.to_string(),
                description: t.get("description").and_then(Value::as_str).unwrap_or_default().to_string(),
                input_schema: schema.to_string(),
            });
        }
        cursor = page.get("nextCursor").and_then(Value::as_str).map(str::to_string);
        if cursor.is_none() {
            break;
        }
    }
    tools.sort_by(|a, b| a.name.cmp(&b.name));
    tools.dedup_by(|a, b| a.name == b.name);
    Ok(tools)
}

/// Server tool names warden offers: 1-64 characters of a-z, A-Z, 0-9, `_` and `-`.
fn valid_tool_name(n: &str) -> bool {
    !n.is_empty() && n.len() <= 64 && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn shorten(s: &str) -> String {
    s.chars().take(80).collect()
}

fn same_definitions(a: &[ToolDef], b: &[ToolDef]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| x.name == y.name && x.description == y.description && x.input_schema == y.input_schema)
}

/// The wait before start number `failures` + 1: none for the first restart, then
/// 250 ms doubling up to [`MAX_BACKOFF`].
fn backoff(failures: u32) -> Duration {
    if failures <= 1 {
        return Duration::ZERO;
    }
    Duration::from_millis(250).saturating_mul(1 << (failures - 2).min(10)).min(MAX_BACKOFF)
}

/// The text of a tool result's content, for error messages.
fn text_of(result: &Value) -> String {
    let text: Vec<&str> = result
        .get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| c.get("text").and_then(Value::as_str))
        .collect();
    let joined = text.join(" ");
    if joined.is_empty() { "no message".into() } else { joined.chars().take(2048).collect() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_is_capped() {
        assert_eq!(backoff(1), Duration::ZERO);
        assert_eq!(backoff(2), Duration::from_millis(250));
        assert_eq!(backoff(3), Duration::from_millis(500));
        assert_eq!(backoff(40), MAX_BACKOFF);
    }
}
