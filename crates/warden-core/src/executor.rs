//! The call pipeline. Data flows one way; the first stage that fails ends the call:
//!
//! ```text
//! ToolCall ─► resolve (catalog) ─► validate (parsed, an object, ≤ 1 MiB)
//!          ─► decide (policy tier + rules; `deny` ends here, even for an unavailable tool)
//!          ─► validate (the tool available, JSON Schema, path arguments)
//!          ─► approve (approval) ─► not cancelled, the audit log can take the record
//!          ─► reuse (result cache: a hit skips run and shape)
//!          ─► run (runtime, inside the tool's walls) ─► shape (sanitise, truncate)
//!          ─► audit (durable) ─► CallResponse
//! ```
//!
//! [`Executor::begin`] runs the stages through reuse, [`Executor::finish`] the rest.
//! One audit record per call, fsynced before the response is returned; a background
//! job writes two with the same call id (status `running` when it is accepted, by
//! [`Executor::record_start`], and its end record). If the end record cannot be
//! written the response is `INTERNAL` and the tool's result is withheld.

#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::approval::{self, ApprovedBy, Approver};
use crate::audit::{AuditLog, Decision, Record};
use crate::cache::ResultCache;
use crate::catalog::{Catalog, Entry, Found, ReadyTool};
use crate::error::{CallError, ErrorCode};
use crate::lock::Pins;
use crate::policy::{CommandSpec, GrantPath, Policy, Runner, Tier};
use crate::runtime::process::ProcessRuntime;
use crate::runtime::server::ServerPool;
use crate::runtime::wasm::ComponentRuntime;
use crate::runtime::{Input, Invocation, RunOutput, Runtime, SandboxReport, Walls};
use crate::shape;

mod approve;
mod call;
pub use self::call::{CallHooks, CallResponse, MAX_ARGS_BYTES, Options, Status, ToolCall};

/// Where [`Executor::begin`] left a call.
// One per call, moved once: boxing either variant buys nothing.
#[allow(clippy::large_enum_variant)]
pub enum Begun {
    /// It ended before Run (refused, rejected, invalid, a cache hit): its record is written.
    Done(CallResponse),
    /// It passed every stage before Run: [`Executor::finish`] runs it.
    Ready(Ready),
}

/// A call decided and approved, not yet run (see [`Executor::begin`]).
pub struct Ready {
    call: ToolCall,
    call_id: String,
    ts: String,
    started: Instant,
    args_sha256: String,
    trace: Trace,
}

impl Ready {
    /// The call's id (the same in its start and end records).
    pub fn call_id(&self) -> &str {
        &self.call_id
    }

    /// The requested tool.
    pub fn tool(&self) -> &str {
        &self.call.tool
    }
}

/// Runs calls under one policy, for one session.
#[derive(Debug)]
pub struct Executor {
    policy: Policy,
    catalog: Catalog,
    runtime: ComponentRuntime,
    processes: ProcessRuntime,
    servers: ServerPool,
    /// The definitions pinned in `warden.lock`.
    pins: Pins,
    approver: Approver,
    audit: AuditLog,
    session: String,
    /// Where the policy's tools may write: no grant may pass through a link there.
    writable: Vec<std::path::PathBuf>,
    /// Results of `cache = "…"` tools.
    cache: ResultCache,
    /// Where calls whose client cannot ask wait for a person, when offered.
    inbox: Option<approval::inbox::Settings>,
    /// Lasting approvals (`warden.approvals.toml`).
    lasting: approval::lasting::Lasting,
    /// Where calls are announced as they start (`warden serve`), for the console.
    events: Option<crate::live::Events>,
}

/// What the pipeline learnt about a call, for its audit record.
struct Trace {
    tier: Option<Tier>,
    rule: Option<String>,
    decision: Decision,
    approved_by: Option<ApprovedBy>,
    sandbox: Option<SandboxReport>,
    usage: Option<crate::runtime::Usage>,
    network: Option<Value>,
    /// How the program ended (process tools and command components).
    exit: Option<Value>,
    /// What the result cache did: `{"hit": …}`, or why it was bypassed.
    cache: Option<Value>,
    /// The cache entry to fill with a successful result.
    cache_probe: Option<crate::cache::Probe>,
    /// The kinds and sizes of a content result's blocks (never their bytes).
    content: Option<Value>,
    /// A component tool's provenance: plugin, source, sha256, signer.
    component: Option<Value>,
    /// Who answered, where (inbox answers and lasting approvals).
    approval: Option<Value>,
}

fn random_id(prefix: &str) -> String {
    let mut b = [0u8; 8];
    if getrandom::fill(&mut b).is_err() {
        let nanos = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        b = (nanos as u64 ^ u64::from(std::process::id())).to_le_bytes();
    }
    format!("{prefix}-{}", hex::encode(b))
}

impl Executor {
    /// An executor for `policy`: loads its plugins (compiled components cached in
    /// `cache_dir`), answering approvals with `approver` and recording to `audit`.
    /// The process ignores `SIGXFSZ` from then on (a write past an rlimit fails
    /// instead of killing warden before a record is written).
    pub fn new(policy: Policy, approver: Approver, audit: AuditLog, options: Options) -> Result<Executor, CallError> {
        Executor::new_for(policy, approver, audit, options, None)
    }

    /// [`Executor::new`] for calls of one tool, `only` (as requested: a name or
    /// `PLUGIN.TOOL`): no other tool is prepared, so `warden call` loads nothing
    /// the call does not need (see [`Catalog::build_for`]).
    pub fn new_for(
        mut policy: Policy,
        approver: Approver,
        audit: AuditLog,
        options: Options,
        only: Option<&str>,
    ) -> Result<Executor, CallError> {
        // A write past an rlimit must fail (and be reported), never kill warden between a run and its record.
        warden_sandbox::limits::ignore_sigxfsz();
        // The record and the approvals inbox are warden's own, whoever embeds the
        // executor: every call protects them inside its write grants.
        let log = std::path::absolute(audit.path()).unwrap_or_else(|_| audit.path().to_path_buf());
        let live = ("approvals inbox", crate::live::Live::for_log(&log).path().to_path_buf());
        for (what, path) in crate::audit::files::own_files(&log).into_iter().chain([live]) {
            if !policy.own_files.iter().any(|(_, p)| *p == path) {
                policy.own_files.push((what.to_string(), path));
            }
        }
        // A call of one tool is a process's only call (`warden call`): no instance pool.
        let runtime = match only {
            Some(_) => ComponentRuntime::one_shot(options.cache_dir),
            None => ComponentRuntime::new(options.cache_dir)?,
        };
        let processes = ProcessRuntime::new(options.sandbox_helper.clone(), policy.mode);
        let servers = ServerPool::new(options.sandbox_helper, &policy);
        let pins = Pins::load(policy.lock_path.as_deref());
        let catalog = Catalog::build_for(&policy, &runtime, &servers, &pins, only);
        let writable = policy.writable_roots();
        let lasting = approval::lasting::Lasting::new(policy.approvals_path());
        Ok(Executor {
            policy,
            catalog,
            runtime,
            processes,
            servers,
            pins,
            approver,
            audit,
            session: random_id("s"),
            writable,
            cache: ResultCache::default(),
            inbox: None,
            lasting,
            events: None,
        })
    }

    /// Announces each call as it starts in the live directory's
    /// `events/PID.jsonl` (for `warden console`), unless `WARDEN_LIVE_EVENTS=off`.
    pub fn announce_calls(&mut self) {
        if std::env::var("WARDEN_LIVE_EVENTS").is_ok_and(|v| v == "off") {
            return;
        }
        let live = crate::live::Live::for_log(self.audit.path());
        match live.ensure() {
            Ok(()) => self.events = Some(live.events()),
            Err(e) => tracing::warn!("{e}; calls are not announced to warden console"),
        }
    }

    /// Lets calls whose client cannot ask wait in warden's inbox (beside the
    /// audit log) for up to `timeout`, for tools the policy lets wait.
    pub fn offer_inbox(&mut self, timeout: std::time::Duration) {
        let live = crate::live::Live::for_log(self.audit.path());
        self.inbox = Some(approval::inbox::Settings { live, timeout, waiting: Default::default() });
    }

    /// The policy.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The catalog of tools, with every server started and its tools found.
    pub fn catalog(&self) -> &Catalog {
        self.catalog.load_all(&self.found());
        &self.catalog
    }

    /// Resolves a requested tool name, starting only the server it names, if any.
    pub fn resolve(&self, name: &str) -> Result<&Entry, CallError> {
        self.catalog.resolve(name, &self.found())
    }

    fn found(&self) -> Found<'_> {
        Found { policy: &self.policy, runtime: &self.runtime, servers: &self.servers, pins: &self.pins }
    }

    /// The running process of server `name`, if it runs (for diagnostics and tests).
    pub fn server_pid(&self, name: &str) -> Option<u32> {
        self.servers.pid(name)
    }

    /// The session id.
    pub fn session(&self) -> &str {
        &self.session
    }

    /// The audit log the calls are recorded in.
    pub fn audit_log(&self) -> &AuditLog {
        &self.audit
    }

    /// Runs one call through the whole pipeline. Never panics on bad input; every
    /// outcome is a response, and every response has an audit record.
    pub fn call(&self, call: ToolCall) -> CallResponse {
        self.call_with(call, &CallHooks::default())
    }

    /// [`Executor::call`] with a caller's own approval channel and cancel switch.
    pub fn call_with(&self, call: ToolCall, hooks: &CallHooks<'_>) -> CallResponse {
        match self.begin(call, hooks) {
            Begun::Done(response) => response,
            Begun::Ready(ready) => self.finish(ready, hooks),
        }
    }

    /// The stages before Run (resolve, validate, decide, approve, the cache):
    /// either the call ends here (its record written), or it is [`Ready`] to
    /// run, with [`Executor::finish`] now or on another thread (a background job).
    pub fn begin(&self, call: ToolCall, hooks: &CallHooks<'_>) -> Begun {
        let started = Instant::now();
        let ts = humantime::format_rfc3339_millis(SystemTime::now()).to_string();
        let call_id = random_id("c");
        let args_bytes = serde_json::to_vec(&call.args).unwrap_or_default();
        let args_sha256 = hex::encode(Sha256::digest(&args_bytes));
        let mut ready = Ready {
            call,
            call_id,
            ts,
            started,
            args_sha256,
            trace: Trace {
                tier: None,
                rule: None,
                decision: Decision::None,
                approved_by: None,
                sandbox: None,
                usage: None,
                network: None,
                exit: None,
                cache: None,
                cache_probe: None,
                content: None,
                component: None,
                approval: None,
            },
        };
        let sha = ready.args_sha256.clone();
        match self.pipeline(&ready.call, args_bytes.len(), &sha, &mut ready.trace, hooks) {
            Ok(None) => {
                if let Some(events) = &self.events {
                    let mut fields = serde_json::Map::new();
                    fields.insert("call_id".into(), ready.call_id.clone().into());
                    fields.insert("tool".into(), ready.call.tool.clone().into());
                    fields.insert("session".into(), self.session.clone().into());
                    fields.insert("args".into(), self.audit.args_of(&ready.call.args));
                    events.emit("call_start", fields);
                }
                Begun::Ready(ready)
            }
            Ok(Some(hit)) => Begun::Done(self.conclude(ready, Ok(hit))),
            Err(e) => {
                self.announce_refusal(&ready, &e);
                Begun::Done(self.conclude(ready, Err(e)))
            }
        }
    }

    /// Tells the console why a call ended before it ran (the record has the
    /// code, not the message), and that a definition awaits `warden lock`.
    fn announce_refusal(&self, ready: &Ready, e: &CallError) {
        let Some(events) = &self.events else { return };
        let mut fields = serde_json::Map::new();
        fields.insert("call_id".into(), ready.call_id.clone().into());
        fields.insert("tool".into(), ready.call.tool.clone().into());
        fields.insert("code".into(), e.code.as_str().into());
        fields.insert("message".into(), shape::sanitize_str(&e.message).into());
        events.emit("call_end", fields);
        let refused = self.catalog.entries().any(|c| c.spec.name == ready.call.tool && c.refused_definition.is_some());
        if refused {
            let mut fields = serde_json::Map::new();
            fields.insert("tool".into(), ready.call.tool.clone().into());
            events.emit("definition_refused", fields);
        }
    }

    /// The Run stage and shaping of a [`Ready`] call, then its (end) record.
    pub fn finish(&self, mut ready: Ready, hooks: &CallHooks<'_>) -> CallResponse {
        let outcome = self.run_stage(&ready.call, &mut ready.trace, hooks);
        self.conclude(ready, outcome)
    }

    /// Writes the start record of a [`Ready`] call that runs on as a background
    /// job: decision and approval as decided, status `running`. Its end record,
    /// written by [`Executor::finish`], has the same call id.
    pub fn record_start(&self, ready: &Ready) -> Result<(), CallError> {
        let mut record = self.record(ready, "running");
        record.duration_ms = ready.started.elapsed().as_secs_f64() * 1000.0;
        self.audit.append(&record).map_err(|e| {
            CallError::new(
                ErrorCode::Internal,
                format!(
                    "{}: cannot write the job's start record to {}: {e}; nothing ran (fix the log or pass --audit-log)",
                    ready.call.tool,
                    self.audit.path().display()
                ),
            )
        })
    }

    /// A record of `ready` with what was decided before Run, and nothing of a run.
    fn record(&self, ready: &Ready, status: &'static str) -> Record {
        Record {
            ts: ready.ts.clone(),
            call_id: ready.call_id.clone(),
            session: self.session.clone(),
            tool: ready.call.tool.chars().take(256).collect(),
            args_sha256: ready.args_sha256.clone(),
            args: self.audit.args_of(&ready.call.args),
            tier: ready.trace.tier,
            rule: ready.trace.rule.clone(),
            decision: ready.trace.decision,
            approved_by: ready.trace.approved_by,
            status,
            error_code: None,
            duration_ms: 0.0,
            usage: None,
            sandbox: None,
            network: None,
            exit: None,
            profile: self.policy.profile.as_ref().map(|p| p.name.clone()),
            cache: None,
            content: None,
            component: None,
            approval: ready.trace.approval.clone(),
        }
    }

    /// The response of a call that ended with `outcome`, and its record.
    fn conclude(&self, ready: Ready, outcome: Result<(Value, bool), CallError>) -> CallResponse {
        let mut trace = ready.trace;
        let mut response = CallResponse {
            status: Status::Success,
            tool: ready.call.tool.clone(),
            call_id: ready.call_id.clone(),
            result: None,
            truncated: false,
            error: None,
            reason: None,
            duration_ms: 0.0,
            cache: None,
        };
        match outcome {
            Ok((value, truncated)) => {
                if let Some(probe) = trace.cache_probe.take() {
                    self.cache.store(probe, &value, truncated, &response.call_id);
                }
                response.cache = trace.cache.clone().filter(|c| c["hit"] == true);
                response.result = Some(value);
                response.truncated = truncated;
            }
            Err(e) if e.code == ErrorCode::Rejected => {
                response.status = Status::Rejected;
                response.reason = Some(e.message.clone());
            }
            Err(e) if e.code == ErrorCode::Cancelled => {
                response.status = Status::Cancelled;
                response.error = Some(CallError::new(e.code, shape::sanitize_str(&e.message)));
            }
            Err(e) => {
                response.status = Status::Error;
                response.error = Some(CallError::new(e.code, shape::sanitize_str(&e.message)));
            }
        }
        response.duration_ms = ready.started.elapsed().as_secs_f64() * 1000.0;

        let ready = Ready { trace, ..ready };
        let mut record = self.record(&ready, response.status.as_str());
        let trace = ready.trace;
        record.error_code = response.error.as_ref().map(|e| e.code.as_str());
        record.duration_ms = response.duration_ms;
        record.usage = trace.usage;
        record.sandbox = trace.sandbox;
        record.network = trace.network;
        record.exit = trace.exit;
        record.cache = trace.cache;
        record.content = trace.content;
        record.component = trace.component;
        // An INTERNAL error already says why the log failed (the pre-run check): keep it.
        let explained = response.error.as_ref().is_some_and(|x| x.code == ErrorCode::Internal);
        if let Err(e) = self.audit.append(&record)
            && !explained
        {
            response.status = Status::Error;
            response.result = None;
            response.truncated = false;
            response.error = Some(CallError::new(
                ErrorCode::Internal,
                format!(
                    "cannot write the audit record to {}: {e}; the result is withheld (fix the log or pass --audit-log)",
                    self.audit.path().display()
                ),
            ));
        }
        response
    }

    /// The Run stage of a call that passed the others: a tool that may write
    /// empties the result cache once more after it ran.
    fn run_stage(&self, call: &ToolCall, trace: &mut Trace, hooks: &CallHooks<'_>) -> Result<(Value, bool), CallError> {
        let entry: &Entry = self.resolve(&call.tool)?;
        let ready: &ReadyTool = entry.state.as_ref().map_err(Clone::clone)?;
        let ran = self.run(&entry.spec, ready, call, trace, hooks);
        if crate::cache::may_write(&entry.spec) {
            self.cache.clear();
        }
        ran
    }

    /// Whether `name` resolves to a tool with `background = true`.
    pub fn is_background(&self, name: &str) -> bool {
        self.resolve(name).is_ok_and(|e| e.spec.background)
    }

    fn pipeline(
        &self,
        call: &ToolCall,
        args_len: usize,
        args_sha256: &str,
        trace: &mut Trace,
        hooks: &CallHooks<'_>,
    ) -> Result<Option<(Value, bool)>, CallError> {
        // Resolve.
        let entry: &Entry = self.resolve(&call.tool)?;
        let spec = &entry.spec;
        let name = spec.name.as_str();

        // Validate.
        if let Some(why) = &call.input_error {
            return Err(CallError::new(ErrorCode::InvalidArgs, format!("{name}: {why}")));
        }
        if !call.args.is_object() {
            return Err(CallError::new(ErrorCode::InvalidArgs, format!("{name}: arguments must be a JSON object")));
        }
        if args_len > MAX_ARGS_BYTES {
            return Err(CallError::new(
                ErrorCode::InvalidArgs,
                format!("{name}: arguments are {args_len} bytes, more than the {MAX_ARGS_BYTES} accepted"),
            ));
        }
        // Decide before touching the tool: a denied tool is denied even when unavailable.
        let (tier, rule) = spec.decide(&call.args);
        trace.tier = Some(tier);
        trace.rule = rule.map(|r| r.location.clone());
        if tier == Tier::Deny {
            trace.decision = Decision::Denied;
            let why = match rule {
                Some(r) => format!(
                    "{name}: denied by the rule at {}{}",
                    r.location,
                    r.reason.as_ref().map(|s| format!(": {s}")).unwrap_or_default()
                ),
                None => spec
                    .hidden_by
                    .clone()
                    .unwrap_or_else(|| format!("{name}: the policy sets tier = \"deny\" ({})", spec.location)),
            };
            return Err(CallError::new(ErrorCode::Denied, why));
        }
        let ready: &ReadyTool = entry.state.as_ref().map_err(Clone::clone)?;
        let run_only = matches!(&spec.runner, Runner::Process(e) if e.run_only());
        match (&hooks.run, &spec.runner) {
            (Some(_), Runner::Process(_)) => {}
            (Some(_), _) => {
                return Err(CallError::new(
                    ErrorCode::InvalidArgs,
                    format!("{name}: warden run needs a process tool (its walls); {name} is not one"),
                ));
            }
            (None, _) if run_only => {
                return Err(CallError::new(
                    ErrorCode::InvalidArgs,
                    format!(
                        "{name}: has no exec; it lends its walls to a command line: warden run --tool {name} -- CMD"
                    ),
                ));
            }
            (None, _) => {}
        }
        // A command line under the tool's walls has no arguments to check.
        let violations = if hooks.run.is_some() { Vec::new() } else { ready.violations(&call.args) };
        if !violations.is_empty() {
            trace.decision = Decision::None;
            return Err(CallError::new(
                ErrorCode::InvalidArgs,
                format!("{name}: {} invalid argument(s): {}", violations.len(), violations.join("; ")),
            ));
        }
        if hooks.run.is_none() {
            self.check_paths(name, ready, &call.args)?;
        }

        // Approve.
        let definition = || approval::lasting::definition(&self.policy, spec, &ready.description, &ready.schema);
        self.approve(spec, (tier, rule.map(|r| r.location.as_str())), call, (args_sha256, &definition), trace, hooks)?;
        trace.decision = Decision::Allowed;
        if hooks.cancel.is_cancelled() {
            return Err(CallError::new(ErrorCode::Cancelled, format!("{name}: cancelled by the caller before it ran")));
        }
        // No record, no run: a call whose record could not be kept never starts.
        self.audit.check_writable().map_err(|e| {
            CallError::new(
                ErrorCode::Internal,
                format!(
                    "{name}: the audit log {} cannot take this call's record ({e}); nothing ran \
                     (fix the log, or pass --audit-log)",
                    self.audit.path().display()
                ),
            )
        })?;

        // Reuse: a read-only tool's fresh result; a tool that may write empties the cache.
        Ok(self.reuse(spec, tier, args_sha256, trace))
    }

    /// The reuse stage: a read-only auto tool's fresh cached result, if there is
    /// one; a tool that may write empties the cache.
    fn reuse(
        &self,
        spec: &crate::policy::ToolSpec,
        tier: Tier,
        args_sha256: &str,
        trace: &mut Trace,
    ) -> Option<(Value, bool)> {
        let name = spec.name.as_str();
        let writes = crate::cache::may_write(spec);
        if writes {
            self.cache.clear();
        }
        if tier == Tier::Auto {
            match ResultCache::probe(spec, args_sha256) {
                Ok(Some(probe)) => {
                    if let Some(hit) = self.cache.lookup(&probe) {
                        trace.cache = Some(hit.to_json());
                        return Some((hit.value, hit.truncated));
                    }
                    trace.cache = Some(json!({"hit": false}));
                    trace.cache_probe = Some(probe);
                }
                Ok(None) => {}
                Err(why) => trace.cache = Some(json!({"hit": false, "bypassed": format!("{name}: {why}")})),
            }
        }
        None
    }

    /// The run stage: the tool's runtime, then shaping.
    fn run(
        &self,
        spec: &crate::policy::ToolSpec,
        ready: &ReadyTool,
        call: &ToolCall,
        trace: &mut Trace,
        hooks: &CallHooks<'_>,
    ) -> Result<(Value, bool), CallError> {
        let name = spec.name.as_str();
        if let Runner::Server(st) = &spec.runner {
            let server = self.policy.servers.get(&st.server).ok_or_else(|| {
                CallError::new(ErrorCode::Internal, format!("{name}: server {} is not declared", st.server))
            })?;
            trace.sandbox = self.servers.sandbox(&st.server);
            let run = self.servers.call(server, &st.tool, &call.args, &hooks.cancel, hooks.tap.as_ref());
            trace.network = self.servers.network(&st.server);
            let (RunOutput { value, usage, blocks, .. }, sandbox) = run?;
            trace.sandbox = Some(sandbox);
            return Ok(self.shape(spec, value, usage, blocks, trace));
        }
        trace.component = ready.plugin.as_ref().map(|p| p.provenance());
        let (walls, tmp) = Walls::for_tool(spec, &self.policy.workspace, &self.writable, &self.policy.own_files)?;
        let tmp_path = tmp.as_ref().map(|t| t.path.as_path());
        let run = match (&spec.runner, &ready.plugin) {
            (Runner::Process(exec), _) => {
                // `warden run`: its command line under the tool's walls (only a process tool lends them).
                let input = match hooks.run.as_deref() {
                    Some(argv) => Input::Argv(argv.to_vec()),
                    None => Input::Args(&call.args),
                };
                let invocation = Invocation { tool: name, input, walls: &walls, tmp: tmp_path, watch: hooks.watch() };
                run_in(&self.processes, exec, invocation, trace)
            }
            (Runner::Plugin(_), Some(plugin)) => {
                let input = Input::Args(&call.args);
                let invocation = Invocation { tool: name, input, walls: &walls, tmp: tmp_path, watch: hooks.watch() };
                run_in(&self.runtime, plugin, invocation, trace)
            }
            (Runner::Command(command), Some(plugin)) => {
                // The record names the walls even when the arguments cannot make a command line.
                let argv = command_argv(name, command, &call.args, &ready.path_args, &self.policy.workspace)
                    .inspect_err(|_| trace.sandbox = Some(self.runtime.report(&walls)))?;
                let input = Input::Argv(argv);
                let invocation = Invocation { tool: name, input, walls: &walls, tmp: tmp_path, watch: hooks.watch() };
                run_in(&self.runtime, plugin, invocation, trace)
            }
            (Runner::Plugin(p), None) | (Runner::Command(CommandSpec { plugin: p, .. }), None) => {
                return Err(CallError::new(ErrorCode::Internal, format!("{name}: plugin {p} is not loaded")));
            }
            (Runner::Server(_), _) => {
                return Err(CallError::new(ErrorCode::Internal, format!("{name}: a server tool reached the runtimes")));
            }
        };
        // Whatever the outcome, the record keeps what the call asked of the network.
        trace.network = walls.journal.take();
        let RunOutput { value, usage, sandbox, blocks } = run?;
        if matches!(spec.runner, Runner::Process(_) | Runner::Command(_)) {
            let mut exit = serde_json::Map::new();
            for key in ["exit_code", "signal"] {
                if let Some(v) = value.get(key).filter(|v| !v.is_null()) {
                    exit.insert(key.into(), v.clone());
                }
            }
            trace.exit = Some(Value::Object(exit));
        }
        if sandbox.is_some() {
            trace.sandbox = sandbox;
        }
        Ok(self.shape(spec, value, usage, blocks, trace))
    }

    /// Sanitises and truncates a result to the tool's `max_output`; a content
    /// result (`blocks`) block by block, its kinds and sizes noted for the audit record.
    fn shape(
        &self,
        spec: &crate::policy::ToolSpec,
        value: Value,
        usage: crate::runtime::Usage,
        blocks: bool,
        trace: &mut Trace,
    ) -> (Value, bool) {
        let streams_truncated = usage.truncated;
        trace.usage = Some(usage);
        // The network in short, so the model can ask for the grant it lacks.
        let mut value = value;
        if let (Some(network), Some(fields)) = (&trace.network, value.as_object_mut()) {
            fields.insert("network".into(), crate::egress::journal::summary(network));
            // A failed call that was refused a destination: the grant to add, once.
            let failed = fields.get("exit_code").is_some_and(|c| c != 0);
            let refused = crate::runtime::hints::from_network(&spec.name, network);
            if failed && !refused.is_empty() {
                let mut hints: Vec<Value> = refused.into_iter().map(Value::from).collect();
                if let Some(Value::Array(more)) = fields.remove("hints") {
                    for h in more {
                        if !hints.contains(&h) {
                            hints.push(h);
                        }
                    }
                }
                hints.truncate(crate::runtime::hints::MAX_HINTS);
                fields.insert("hints".into(), Value::Array(hints));
            }
        }
        let max = usize::try_from(spec.limits.max_output).unwrap_or(usize::MAX);
        let (value, cut) = if blocks {
            let fitted = shape::fit_content(shape::sanitize(value), max);
            trace.content = shape::content_summary(&fitted.0);
            fitted
        } else {
            shape::truncate(shape::sanitize(value), max)
        };
        if let Some(u) = trace.usage.as_mut() {
            u.truncated |= cut;
        }
        (value, cut || streams_truncated)
    }

    /// Refuses path arguments that fall outside every directory the tool is granted,
    /// before anything runs (the sandbox would refuse them too).
    fn check_paths(&self, name: &str, ready: &ReadyTool, args: &Value) -> Result<(), CallError> {
        let spec = self.resolve(name)?;
        let fixed: Vec<&Path> = spec
            .spec
            .grants
            .paths
            .iter()
            .filter_map(|g| match &g.path {
                GrantPath::Fixed(p) => Some(p.as_path()),
                GrantPath::Tmp(_) => None,
            })
            .collect();
        for key in &ready.path_args {
            let Some(raw) = args.get(key).and_then(Value::as_str) else { continue };
            let normal = normalize(&self.policy.workspace, raw);
            let inside = normal.as_ref().is_some_and(|p| fixed.iter().any(|root| p.starts_with(root)));
            if !inside {
                let granted: Vec<String> = fixed.iter().map(|p| p.display().to_string()).collect();
                return Err(CallError::new(
                    ErrorCode::InvalidPath,
                    format!(
                        "{name}: `{key}` = {raw:?} is outside the directories granted to this tool ({}); \
                         paths are relative to the workspace {}",
                        if granted.is_empty() { "none".to_string() } else { granted.join(", ") },
                        self.policy.workspace.display()
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// Runs `target` in `runtime` as `call` describes; the record's `sandbox` is
/// what the runtime enforces for the call's walls until the run confirms it.
fn run_in<R: Runtime + ?Sized>(
    runtime: &R,
    target: &R::Target,
    call: Invocation<'_>,
    trace: &mut Trace,
) -> Result<RunOutput, CallError> {
    trace.sandbox = Some(runtime.report(call.walls));
    runtime.run(target, call)
}

/// The argv of a command component's call: the plugin's name, then each `args`
/// element with `{name}` replaced by the string argument `name`. Path arguments
/// (`"format": "path"`) are given as absolute paths (already checked to be
/// inside a grant), since a component has no working directory of its own.
fn command_argv(
    tool: &str,
    command: &CommandSpec,
    args: &Value,
    path_args: &[String],
    workspace: &Path,
) -> Result<Vec<String>, CallError> {
    let mut argv = vec![command.plugin.clone()];
    for element in &command.args {
        argv.push(crate::policy::fill_template(element, |p| {
            if !command.params.iter().any(|x| x == p) {
                return Ok(None);
            }
            let v = args.get(p).and_then(Value::as_str).ok_or_else(|| {
                CallError::new(ErrorCode::InvalidArgs, format!("{tool}: argument `{p}` must be a string"))
            })?;
            Ok(Some(if path_args.iter().any(|x| x == p) {
                normalize(workspace, v).map(|p| p.to_string_lossy().into_owned()).unwrap_or_else(|| v.to_string())
            } else {
                v.to_string()
            }))
        })?);
    }
    Ok(argv)
}

/// Joins `raw` to `base` and removes `.` and `..` lexically; `None` if it climbs above `/`.
fn normalize(base: &Path, raw: &str) -> Option<PathBuf> {
    let (path, above) = crate::paths::lexical(base, Path::new(raw));
    (!above).then_some(path)
}
