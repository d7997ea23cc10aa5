//! The MCP server ([`WardenServer`], its [`Shared`] state): `tools/list` and
//! `tools/call` over the policy's tools, through the same [`Executor`] as
//! `warden call`, at most [`MAX_CONCURRENT_CALLS`] at once, with the client as
//! the approval channel ([`super::approval`]), `notifications/cancelled` as the
//! cancel switch, and a tool's progress (or, without any, its running time once
//! a second) as `notifications/progress`. Prompts, resources and completions are
//! declared and served empty; logging is [`super::logging`]'s. What a client
//! sees is in docs/mcp.md.

use std::sync::Arc;
use std::time::{Duration, Instant};

#[allow(deprecated)] // logging is deprecated in rmcp (SEP-2577); 2025-11-25 clients use it.
use rmcp::model::SetLevelRequestParams;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, ContentBlock, CustomRequest,
    CustomResult, ErrorCode as RpcErrorCode, GetPromptRequestParams, GetPromptResponse, GetTaskParams, GetTaskResult,
    Implementation, JsonObject, ListToolsResult, PaginatedRequestParams, ProgressNotificationParam,
    ReadResourceRequestParams, ReadResourceResponse, ServerCapabilities, ServerConfig, TASKS_EXTENSION_ID, Tool,
    UpdateTaskParams,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::Value;
use tokio::sync::Semaphore;

use super::approval::{self, Live, Sealer, SessionGrants, Stateless};
use super::jobs::{self, Jobs};
use super::legacy_tasks::Legacy;
use super::logging::{Logger, SessionLevel};
use super::{tasks, tools};
use warden_core::approval::{Request, Verdict};
use warden_core::executor::{Begun, CallHooks, CallResponse, Executor, Ready, ToolCall};
use warden_runtime::{Cancel, Progress, ProgressSink};

/// The most calls one server runs at once; more wait for a slot.
pub const MAX_CONCURRENT_CALLS: usize = 16;
/// How often a long call reports progress.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);
/// Progress reports of one call waiting to be sent at most; more are dropped
/// (the runtime sends at most 20 a second, so this is never reached in practice).
const PROGRESS_QUEUE: usize = 64;

/// What every connection of one server shares.
pub struct Shared {
    executor: Executor,
    tools: Vec<Tool>,
    sealer: Arc<Sealer>,
    slots: Arc<Semaphore>,
    approver_only: bool,
    /// The background jobs, when a tool offered has `background = true`.
    jobs: Option<Arc<Jobs>>,
    /// The 2025-11-25 tasks' private names, when there are jobs.
    legacy: Option<Arc<Legacy>>,
}

impl Shared {
    /// The audit log the calls are recorded in.
    pub fn audit_log(&self) -> &warden_core::audit::AuditLog {
        self.executor.audit_log()
    }

    /// Shares `executor`; with `approver_only` (an explicit `--approve yes|deny`)
    /// the executor's own approver answers and the client is never asked.
    pub fn new(executor: Executor, sealer: Sealer, approver_only: bool) -> Result<Shared, String> {
        let mut tools = tools::list(executor.catalog());
        let background: Vec<String> =
            tools.iter().filter(|t| executor.is_background(&t.name)).map(|t| t.name.to_string()).collect();
        let jobs = (!background.is_empty()).then(|| Arc::new(Jobs::new(executor.policy().max_jobs)));
        let legacy = match &jobs {
            Some(_) => Some(Arc::new(Legacy::new(background)?)),
            None => None,
        };
        if jobs.is_some() {
            tools.extend(jobs::tools());
            tools.sort_by(|a, b| a.name.cmp(&b.name));
        }
        Ok(Shared {
            executor,
            tools,
            sealer: Arc::new(sealer),
            slots: Arc::new(Semaphore::new(MAX_CONCURRENT_CALLS)),
            approver_only,
            jobs,
            legacy,
        })
    }

    /// The 2025-11-25 tasks' private names, when background tools are offered.
    pub fn legacy_tasks(&self) -> Option<Arc<Legacy>> {
        self.legacy.clone()
    }

    /// Cancels every running background job and waits for its end record
    /// (`serve` calls it before exiting).
    pub fn shutdown_jobs(&self) {
        if let Some(jobs) = &self.jobs {
            jobs.shutdown();
        }
    }

    /// Whether background jobs are offered (some tool has `background = true`).
    pub fn has_jobs(&self) -> bool {
        self.jobs.is_some()
    }

    /// The job table, when there are jobs (for the control socket).
    pub fn jobs_table(&self) -> Option<Arc<Jobs>> {
        self.jobs.clone()
    }

    /// The tools offered.
    pub fn tools(&self) -> &[Tool] {
        &self.tools
    }
}

/// One MCP session's handler (the stdio connection, or one HTTP request).
#[derive(Clone)]
pub struct WardenServer {
    shared: Arc<Shared>,
    /// "Always for this session" answers; `None` where the transport has no session.
    grants: Option<Arc<SessionGrants>>,
    /// The level `logging/setLevel` chose; on stateless HTTP it lasts one request.
    log_level: Arc<SessionLevel>,
    /// Who owns the background jobs this handler starts: the stdio connection,
    /// or the HTTP bearer token (see [`super::jobs`]).
    owner: Arc<str>,
}

impl WardenServer {
    /// A handler for a transport with sessions (stdio) or without (stateless
    /// HTTP), whose jobs belong to `owner`.
    pub fn new(shared: Arc<Shared>, sessions: bool, owner: Arc<str>) -> WardenServer {
        WardenServer { shared, grants: sessions.then(Arc::default), log_level: Arc::default(), owner }
    }
}

impl WardenServer {
    fn jobs(&self) -> Result<&Arc<Jobs>, McpError> {
        self.shared.jobs.as_ref().ok_or_else(|| {
            McpError::invalid_params("no tasks here: no tool of this policy has `background = true`", None)
        })
    }

    /// The answer to a call that started a job: a task for a client that asked
    /// for one, else the job handle.
    fn started(&self, handle: Value, legacy: bool, modern: bool) -> Result<CallToolResponse, McpError> {
        if !legacy && !modern {
            return Ok(jobs::handle_result(handle).into());
        }
        let id = handle.get("job").and_then(Value::as_str).unwrap_or_default();
        let view = self.jobs()?.view(&self.owner, id).map_err(|e| tasks::not_found(&e, id))?;
        match self.shared.legacy.as_ref().filter(|_| legacy) {
            Some(l) => {
                // [`super::legacy_tasks`] turns this into `{"task": …}` on its way out.
                let mut r = jobs::handle_result(tasks::legacy_task(&view));
                let mut meta = JsonObject::new();
                meta.insert(l.meta_key().to_string(), Value::Bool(true));
                r.meta = Some(meta.into());
                Ok(r.into())
            }
            None => Ok(CallToolResponse::Task(tasks::created(&view))),
        }
    }

    /// Calls one of warden's own job tools on a thread of its own.
    async fn call_job_tool(
        &self,
        jobs: Arc<Jobs>,
        name: String,
        request: &CallToolRequestParams,
    ) -> Result<CallToolResponse, McpError> {
        let (owner, args) = (self.owner.clone(), request.arguments.clone().unwrap_or_default());
        let answer = tokio::task::spawn_blocking(move || jobs::call(&jobs, &owner, &name, &args))
            .await
            .map_err(|e| McpError::internal_error(format!("the job tool's thread failed: {e}"), None))?;
        answer.map(Into::into).ok_or_else(|| McpError::internal_error("not a job tool", None))
    }

    /// Who answers this call's approvals: `None` when the executor's own
    /// approver does (`--approve yes|deny`).
    fn asker(&self, request: &CallToolRequestParams, context: &RequestContext<RoleServer>) -> Option<Asker> {
        let shared = &self.shared;
        let modern = context.protocol_version().is_some_and(|v| !v.has_initialize());
        let can_elicit = context.client_capabilities().is_some_and(|c| c.elicitation.is_some());
        if shared.approver_only {
            None
        } else if !modern && self.grants.is_none() {
            // Stateless HTTP keeps no connection to send a 2025-11-25 client a
            // request on, whatever it declared.
            Some(Asker::Nobody(
                "this MCP client speaks the 2025-11-25 protocol over Streamable HTTP, where warden's stateless \
                 transport cannot send it an elicitation request",
                "MCP client over Streamable HTTP (2025-11-25)",
            ))
        } else if !can_elicit {
            Some(Asker::Nobody(
                "this MCP client cannot ask its user (it did not declare the elicitation capability)",
                if modern { "MCP client without elicitation (2026-07-28)" } else { "MCP client without elicitation" },
            ))
        } else if modern {
            Some(Asker::Stateless(Arc::new(Stateless {
                state: request.request_state.clone(),
                responses: request.input_responses.clone(),
                sealer: shared.sealer.clone(),
                grants: self.grants.clone(),
                input_required: Default::default(),
            })))
        } else if let Some(grants) = &self.grants {
            Some(Asker::Live(Live {
                handle: tokio::runtime::Handle::current(),
                peer: context.peer.clone(),
                cancelled: context.ct.clone(),
                sealer: shared.sealer.clone(),
                grants: grants.clone(),
            }))
        } else {
            // Unreachable: a legacy call without grants is stateless HTTP, handled above.
            Some(Asker::Nobody("this MCP client cannot be asked", "MCP client"))
        }
    }
}

/// What the call's thread came back with.
enum Outcome {
    /// The call ended (in the foreground, or before a job could start).
    Response(CallResponse),
    /// A background job started: its handle.
    Job(serde_json::Value),
}

/// Who answers approvals for one call, when the client does (not `--approve yes|deny`).
enum Asker {
    Live(Live),
    Stateless(Arc<Stateless>),
    /// Why it cannot be asked, and how the agent reached warden.
    Nobody(&'static str, &'static str),
}

/// Turns the switch on if the request's future is dropped before the call ends.
struct CancelOnDrop(Cancel, bool);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if !self.1 {
            self.0.cancel();
        }
    }
}

impl ServerHandler for WardenServer {
    #[allow(deprecated)] // enable_logging: see the import of SetLevelRequestParams.
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_logging()
            .enable_prompts()
            .enable_resources()
            .enable_completions()
            .build();
        let mut capabilities = capabilities;
        // Background tools run as tasks for clients of the 2026-07-28 extension (see [`super::tasks`]).
        if self.shared.jobs.is_some() {
            capabilities
                .extensions
                .get_or_insert_with(Default::default)
                .insert(TASKS_EXTENSION_ID.into(), JsonObject::new());
        }
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new("warden", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "warden runs these tools under a security policy: each runs in a sandbox limited to the \
                 grants in its description, and tools of tier ask or confirm need the user's approval.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(self.shared.tools.clone()))
    }

    #[allow(deprecated)]
    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.log_level.set(request.level);
        Ok(())
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        Err(McpError::invalid_params(
            format!("no prompt named {:?}: warden offers tools only", request.name),
            Some(serde_json::json!({ "name": request.name })),
        ))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        Err(McpError::invalid_params(
            "Resource not found: warden offers tools only",
            Some(serde_json::json!({ "uri": request.uri })),
        ))
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        let view =
            self.jobs()?.view(&self.owner, &request.task_id).map_err(|e| tasks::not_found(&e, &request.task_id))?;
        Ok(GetTaskResult::new(tasks::detailed(&view)))
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        // A task that already ended stays as it ended: the ack is the same.
        tasks::cancel(self.jobs()?, &self.owner, &request.task_id).await.map(|_| ())
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.jobs()?.view(&self.owner, &request.task_id).map_err(|e| tasks::not_found(&e, &request.task_id))?;
        Err(McpError::invalid_params(
            format!(
                "task {} has no outstanding input requests: warden asks for approval before a task starts, \
                 never during it",
                request.task_id
            ),
            Some(serde_json::json!({"taskId": request.task_id})),
        ))
    }

    async fn on_custom_request(
        &self,
        request: CustomRequest,
        _context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, McpError> {
        let verb = self.shared.legacy.as_ref().and_then(|l| request.method.strip_prefix(l.method_prefix()));
        match (verb, &self.shared.jobs) {
            (Some(verb), Some(jobs)) => {
                tasks::legacy_request(jobs, &self.owner, verb, request.params).await.map(CustomResult::new)
            }
            _ => Err(McpError::new(RpcErrorCode::METHOD_NOT_FOUND, request.method, None)),
        }
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.shared.tools.iter().find(|t| t.name == name).cloned()
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let shared = self.shared.clone();
        let name = request.name.to_string();
        // Run as a task? (2025-11-25: `params.task`, carried in private `_meta`;
        // 2026-07-28: the client declared the extension.) Only background tools do.
        let legacy_task = shared.legacy.as_ref().is_some_and(|l| context.meta.get(l.meta_key()).is_some());
        let modern_task = context.client_capabilities().is_some_and(|c| c.supports_tasks());
        if legacy_task && !shared.executor.is_background(&name) {
            return Err(not_a_task(&name));
        }
        // warden's own job tools (no policy tool may share their names).
        if let Some(jobs) = shared.jobs.clone()
            && warden_policy::JOB_TOOLS.contains(&name.as_str())
        {
            return self.call_job_tool(jobs, name, &request).await;
        }
        // Unknown names are a protocol fault; everything else is a result.
        if let Err(e) = shared.executor.resolve(&name) {
            return Err(McpError::invalid_params(e.message, None));
        }
        let args = Value::Object(request.arguments.clone().unwrap_or_default());
        // A 2025-11-25 task call answers a task once the job starts: no running-time
        // notifications for it (over HTTP they would turn its answer into an event stream).
        let progress = if legacy_task { None } else { context.meta.get_progress_token() };
        let logger = Logger::for_request(&context, Some(&self.log_level));

        let asker = self.asker(&request, &context);
        let stateless = match &asker {
            Some(Asker::Stateless(s)) => Some(s.clone()),
            _ => None,
        };

        // A call cancelled while it waited for a slot never starts.
        let _slot = acquire_slot(&shared, &context).await?;
        // A background tool takes its place among `max_jobs` before it is approved.
        let job_slot = match reserve_job(&shared, &name) {
            Ok(slot) => slot,
            Err(e) => return Ok(no_job_slot(&name, &e)),
        };
        let cancel = Cancel::new();
        let mut on_drop = CancelOnDrop(cancel.clone(), false);
        // The tool's own progress reports, when the client asked for progress.
        let (reports_tx, mut reports) = tokio::sync::mpsc::channel::<Progress>(PROGRESS_QUEUE);
        let sink: Option<ProgressSink> = progress.is_some().then(|| {
            let sink: ProgressSink = Arc::new(move |p: &Progress| {
                let _ = reports_tx.try_send(p.clone());
            });
            sink
        });
        let thread = CallThread {
            shared: shared.clone(),
            owner: self.owner.clone(),
            asker,
            name,
            args,
            job_slot,
            cancel: cancel.clone(),
            sink,
        };
        let call = tokio::task::spawn_blocking(move || thread.run());

        let joined = watch_call(call, &context, &cancel, &mut reports, progress.as_ref(), &request.name).await;
        on_drop.1 = true;
        let response =
            match joined.map_err(|e| McpError::internal_error(format!("the call's thread failed: {e}"), None))? {
                Outcome::Response(r) => r,
                Outcome::Job(handle) => return self.started(handle, legacy_task, modern_task),
            };
        logger.refusal(&response).await;

        if let Some(s) = stateless
            && response.error.as_ref().is_some_and(|e| e.code == warden_runtime::error::ErrorCode::ApprovalRequired)
            && let Some(input) = s.input_required.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take()
        {
            return Ok(input.into());
        }
        Ok(tools::result(&response).into())
    }
}

/// Sends one of the tool's own progress reports, if it is greater than the last one sent.
async fn send_report(
    context: &RequestContext<RoleServer>,
    token: rmcp::model::ProgressToken,
    p: &Progress,
    last: &mut Option<f64>,
) {
    let done = p.done as f64;
    if last.is_some_and(|l| done <= l) {
        return;
    }
    *last = Some(done);
    let mut note = ProgressNotificationParam::new(token, done);
    if let Some(total) = p.total {
        note = note.with_total(total as f64);
    }
    if !p.message.is_empty() {
        note = note.with_message(p.message.clone());
    }
    let _ = context.peer.notify_progress(note).await;
}

/// The protocol error for a task call of a tool that does not run as one.
fn not_a_task(name: &str) -> McpError {
    McpError::new(
        RpcErrorCode::METHOD_NOT_FOUND,
        format!(
            "{name} does not run as a task (its execution.taskSupport is forbidden): only tools with \
             `background = true` in the policy do; call it without `task`"
        ),
        Some(serde_json::json!({"tool": name})),
    )
}

/// One of the server's call slots, or an error if the call is cancelled first.
async fn acquire_slot(
    shared: &Arc<Shared>,
    context: &RequestContext<RoleServer>,
) -> Result<tokio::sync::OwnedSemaphorePermit, McpError> {
    tokio::select! {
        slot = shared.slots.clone().acquire_owned() => {
            slot.map_err(|_| McpError::internal_error("the server is shutting down", None))
        }
        _ = context.ct.cancelled() => {
            Err(McpError::internal_error("cancelled before it started", None))
        }
    }
}

/// A place among `max_jobs` for a background tool (none for any other tool).
fn reserve_job(shared: &Shared, name: &str) -> Result<Option<jobs::Slot>, warden_runtime::error::CallError> {
    let background = shared.jobs.as_ref().filter(|_| shared.executor.is_background(name));
    background.map(|jobs| jobs.reserve()).transpose()
}

/// The error result of a background call that found no place among `max_jobs`.
fn no_job_slot(name: &str, e: &warden_runtime::error::CallError) -> CallToolResponse {
    let mut r = CallToolResult::error(vec![ContentBlock::text(format!("{}: {}", e.code, e.message))]);
    r.structured_content = Some(serde_json::json!({
        "status": "error",
        "tool": name,
        "error": e.to_json(),
    }));
    r.into()
}

/// What the call's blocking thread needs: it asks for approval, runs the
/// call, and (for a background tool) starts the job.
struct CallThread {
    shared: Arc<Shared>,
    owner: Arc<str>,
    asker: Option<Asker>,
    name: String,
    args: Value,
    job_slot: Option<jobs::Slot>,
    cancel: Cancel,
    sink: Option<ProgressSink>,
}

impl CallThread {
    fn run(self) -> Outcome {
        let CallThread { shared: worker, owner, asker, name, args, job_slot, cancel: switch, sink } = self;
        let request_name = name.clone();
        let hook = |req: &Request<'_>| -> Verdict {
            match &asker {
                Some(Asker::Live(live)) => live.ask(req),
                Some(Asker::Stateless(s)) => s.ask(req),
                Some(Asker::Nobody(why, _)) => approval::no_channel(req, why),
                // Never installed without an asker (see below).
                None => approval::cannot_ask(req, "no approval channel is configured"),
            }
        };
        // Without an asker, the executor's own approver answers (`--approve yes|deny`).
        let approve: Option<&(dyn Fn(&Request<'_>) -> Verdict + Sync)> =
            if asker.is_some() { Some(&hook) } else { None };
        let client = match &asker {
            Some(Asker::Nobody(_, client)) => Some(*client),
            _ => None,
        };
        let hooks = CallHooks { approve, cancel: switch, tap: None, progress: sink, run: None, client };
        let ready = match worker.executor.begin(ToolCall::new(name, args), &hooks) {
            Begun::Done(response) => return Outcome::Response(response),
            Begun::Ready(ready) => ready,
        };
        let (Some(slot), Some(jobs)) = (job_slot, worker.jobs.clone()) else {
            return Outcome::Response(worker.executor.finish(ready, &hooks));
        };
        start_job(&worker, &jobs, slot, owner, ready, request_name)
    }
}

/// Starts an approved background call as a job, on its own thread with its
/// own cancel switch.
fn start_job(
    worker: &Arc<Shared>,
    jobs: &Arc<Jobs>,
    slot: jobs::Slot,
    owner: Arc<str>,
    ready: Ready,
    request_name: String,
) -> Outcome {
    let max_output = worker
        .executor
        .resolve(ready.tool())
        .map_or(usize::MAX, |e| usize::try_from(e.spec.limits.max_output).unwrap_or(usize::MAX));
    let runner = worker.clone();
    let started = jobs.start(
        slot,
        owner,
        ready,
        max_output,
        |r| worker.executor.record_start(r),
        move |r, hooks| runner.executor.finish(r, hooks),
    );
    match started {
        Ok(handle) => Outcome::Job(handle),
        Err(e) => Outcome::Response(CallResponse {
            status: warden_core::executor::Status::Error,
            tool: request_name,
            call_id: String::new(),
            result: None,
            truncated: false,
            error: Some(e),
            cache: None,
            reason: None,
            duration_ms: 0.0,
        }),
    }
}

/// Waits for the call's thread: turns the request's cancellation into the
/// call's, and sends the tool's progress reports (or, without any, its running
/// time once a second) while the client asked for progress.
async fn watch_call(
    mut call: tokio::task::JoinHandle<Outcome>,
    context: &RequestContext<RoleServer>,
    cancel: &Cancel,
    reports: &mut tokio::sync::mpsc::Receiver<Progress>,
    progress: Option<&rmcp::model::ProgressToken>,
    tool: &str,
) -> Result<Outcome, tokio::task::JoinError> {
    let started = Instant::now();
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + PROGRESS_EVERY, PROGRESS_EVERY);
    let mut watching = true;
    // The last progress value sent: each one sent is greater.
    let mut last: Option<f64> = None;
    let mut own_reports = false;
    let joined = loop {
        tokio::select! {
            r = &mut call => break r,
            _ = context.ct.cancelled(), if watching => {
                // Keep waiting: the call ends promptly and its audit record is written.
                cancel.cancel();
                watching = false;
            }
            Some(p) = reports.recv(), if progress.is_some() => {
                own_reports = true;
                if let Some(token) = progress.cloned() {
                    send_report(context, token, &p, &mut last).await;
                }
            }
            _ = ticks.tick(), if progress.is_some() && !own_reports => {
                if let Some(token) = progress.cloned() {
                    // The running time goes as a value below 1 (s/(s+1), no total), so a
                    // tool that starts its own reports late (1 and up) is never held back.
                    let secs = started.elapsed().as_secs_f64().floor();
                    let value = secs / (secs + 1.0);
                    if last.is_none_or(|l| value > l) {
                        last = Some(value);
                        let note = ProgressNotificationParam::new(token, value)
                            .with_message(format!("{tool} running for {secs:.0}s"));
                        let _ = context.peer.notify_progress(note).await;
                    }
                }
            }
        }
    };
    // Reports made just before the call returned go out before its response.
    while let Ok(p) = reports.try_recv() {
        if let Some(token) = progress.cloned() {
            send_report(context, token, &p, &mut last).await;
        }
    }
    joined
}
