//! Background jobs ([`Jobs`]): tools with `background = true` under `warden serve`.
//!
//! A call of such a tool passes every stage before Run in the request (the
//! user is asked before anything starts), gets its start record (status
//! `running`) and answers at once with a handle ([`Jobs::start`]); Run and the
//! end record (same call id) happen on a thread of the job's own. warden's own
//! tools ([`tools`], [`call`]: `job_status`, `job_output`, `job_cancel`,
//! `job_list`) follow it; they read the job table and are not audited.
//! Bounds, ownership of handles and shutdown are in docs/mcp.md, "Background jobs".

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use rmcp::model::{CallToolResult, ContentBlock, JsonObject, Tool, ToolAnnotations};
use serde_json::{Value, json};

use warden_core::executor::{CallHooks, CallResponse, Ready, Status};
use warden_runtime::capture::HeadTail;
use warden_runtime::error::{CallError, ErrorCode};
use warden_runtime::{Cancel, OutputTap, Progress, ProgressSink};

/// How long an ended job is kept for `job_status` and `job_output`.
pub const FINISHED_TTL: Duration = Duration::from_secs(600);
/// The most ended jobs kept; beyond it the oldest is forgotten first.
pub const MAX_FINISHED: usize = 64;
/// The most output bytes one `job_output` call returns.
pub const MAX_OUTPUT_CHUNK: usize = 64 << 10;
/// How long `job_cancel` waits for the job's end record.
pub const CANCEL_WAIT: Duration = Duration::from_secs(10);
/// How long `serve` waits at exit for its jobs' end records (and for calls
/// still being approved, which then never start).
pub const SHUTDOWN_WAIT: Duration = Duration::from_secs(30);

/// A job's stdout and stderr, in arrival order, head and tail within `max_output`.
type Output = HeadTail;

/// One job.
struct Job {
    owner: Arc<str>,
    tool: String,
    call_id: String,
    started: String,
    since: Instant,
    cancel: Cancel,
    output: Arc<Mutex<Output>>,
    /// When it was created and when it ended (for MCP tasks' timestamps).
    created: SystemTime,
    /// The tool's latest progress report, if it made one.
    progress: Arc<Mutex<Option<Progress>>>,
    /// Set once the end record is written.
    ended: Option<(CallResponse, Instant, SystemTime)>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Job {
    fn status(&self) -> &'static str {
        match &self.ended {
            None => "running",
            Some((r, ..)) => match r.status {
                Status::Success => "finished",
                Status::Cancelled => "cancelled",
                Status::Error | Status::Rejected => "failed",
            },
        }
    }

    fn summary(&self, id: &str, full: bool) -> Value {
        let mut o = JsonObject::new();
        o.insert("job".into(), json!(id));
        o.insert("tool".into(), json!(self.tool));
        o.insert("status".into(), json!(self.status()));
        o.insert("call_id".into(), json!(self.call_id));
        o.insert("started".into(), json!(self.started));
        o.insert("output_bytes".into(), json!(lock(&self.output).total()));
        if let Some(p) = lock(&self.progress).as_ref() {
            o.insert("progress".into(), json!({"done": p.done, "total": p.total, "message": p.message}));
        }
        match &self.ended {
            None => {
                o.insert("running_ms".into(), json!(self.since.elapsed().as_millis() as u64));
            }
            Some((r, ..)) => {
                if let Some(v) = &r.result {
                    for key in ["exit_code", "signal"] {
                        if let Some(x) = v.get(key) {
                            o.insert(key.into(), x.clone());
                        }
                    }
                }
                if let Some(e) = &r.error {
                    o.insert("error".into(), e.to_json());
                }
                if full {
                    o.insert("result".into(), r.to_json());
                }
            }
        }
        Value::Object(o)
    }
}

/// A job as MCP tasks (both generations, see [`super::tasks`]) show it.
#[derive(Debug, Clone)]
pub struct TaskView {
    /// The handle, which is the task id.
    pub id: String,
    /// The tool it runs.
    pub tool: String,
    /// When the job started.
    pub created: SystemTime,
    /// The end, or now while it runs.
    pub updated: SystemTime,
    /// How long after `created` warden keeps it: while it runs, the time so
    /// far plus [`FINISHED_TTL`]; once ended, exactly until it is forgotten.
    pub ttl_ms: u64,
    /// The latest progress report, as a status message.
    pub message: Option<String>,
    /// `None` while it runs.
    pub ended: Option<CallResponse>,
}

impl TaskView {
    fn of(id: &str, j: &Job) -> TaskView {
        let (updated, lived) = match &j.ended {
            Some((_, at, wall)) => (*wall, at.duration_since(j.since)),
            None => (SystemTime::now(), j.since.elapsed()),
        };
        let message = lock(&j.progress).as_ref().map(|p| match (p.total, p.message.is_empty()) {
            (Some(t), true) => format!("{}/{t}", p.done),
            (Some(t), false) => format!("{}/{t}: {}", p.done, p.message),
            (None, true) => p.done.to_string(),
            (None, false) => format!("{}: {}", p.done, p.message),
        });
        TaskView {
            id: id.to_string(),
            tool: j.tool.clone(),
            created: j.created,
            updated,
            ttl_ms: u64::try_from((lived + FINISHED_TTL).as_millis()).unwrap_or(u64::MAX),
            message,
            ended: j.ended.as_ref().map(|(r, ..)| r.clone()),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[derive(Default)]
struct Table {
    jobs: HashMap<String, Job>,
    /// Slots taken by calls between the check of `max_jobs` and their start.
    reserved: usize,
    closing: bool,
}

impl Table {
    fn running(&self) -> usize {
        self.jobs.values().filter(|j| j.ended.is_none()).count()
    }

    /// Forgets ended jobs past [`FINISHED_TTL`], and the oldest past [`MAX_FINISHED`].
    fn prune(&mut self) {
        self.jobs.retain(|_, j| j.ended.as_ref().is_none_or(|(_, at, _)| at.elapsed() < FINISHED_TTL));
        let mut ended: Vec<(Instant, String)> =
            self.jobs.iter().filter_map(|(id, j)| j.ended.as_ref().map(|(_, at, _)| (*at, id.clone()))).collect();
        if ended.len() > MAX_FINISHED {
            ended.sort();
            for (_, id) in ended.iter().take(ended.len() - MAX_FINISHED) {
                self.jobs.remove(id);
            }
        }
    }
}

/// The job table of one `serve` process.
pub struct Jobs {
    max: usize,
    table: Mutex<Table>,
    /// Signalled whenever a job ends.
    ended: Condvar,
    /// The same, for async waiters (the 2025-11-25 `tasks/result`).
    ended_async: tokio::sync::Notify,
}

/// A place among the `max_jobs`, taken before the call is approved; given
/// back when dropped unless a job started with it.
pub struct Slot {
    jobs: Arc<Jobs>,
    used: bool,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if !self.used {
            let mut t = lock(&self.jobs.table);
            t.reserved = t.reserved.saturating_sub(1);
        }
    }
}

/// The `NOT_FOUND` of a handle that is not the caller's, whatever the reason.
fn not_found(id: &str) -> CallError {
    let shown: String = id.chars().take(40).collect();
    CallError::new(
        ErrorCode::NotFound,
        format!(
            "no job {shown:?}: it never existed, was started by another connection, or was forgotten {} after it ended",
            warden_policy::units::format_duration(FINISHED_TTL)
        ),
    )
}

fn new_handle() -> Result<String, CallError> {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b)
        .map_err(|e| CallError::new(ErrorCode::Internal, format!("no randomness for a job handle: {e}")))?;
    Ok(format!("j-{}", hex::encode(b)))
}

impl Jobs {
    /// A table that runs at most `max` jobs at once (`[defaults] max_jobs`).
    pub fn new(max: usize) -> Jobs {
        Jobs { max, table: Mutex::default(), ended: Condvar::new(), ended_async: tokio::sync::Notify::new() }
    }

    /// Takes a place among the running jobs, or says why there is none.
    pub fn reserve(self: &Arc<Self>) -> Result<Slot, CallError> {
        let mut t = lock(&self.table);
        if t.closing {
            return Err(CallError::new(ErrorCode::Internal, "the server is shutting down: no new jobs start"));
        }
        if t.running() + t.reserved >= self.max {
            return Err(CallError::new(
                ErrorCode::LimitExceeded,
                format!(
                    "{} background jobs are running, the most [defaults] max_jobs allows; wait for one to end \
                     (job_status), cancel one (job_cancel), or raise max_jobs in the policy",
                    self.max
                ),
            ));
        }
        t.reserved += 1;
        Ok(Slot { jobs: self.clone(), used: false })
    }

    /// Starts `ready` as a job of `owner`: writes its start record, then runs
    /// it on a thread of its own with `finish` (the executor's Run stage and
    /// end record). Returns the handle document.
    pub fn start(
        self: &Arc<Self>,
        mut slot: Slot,
        owner: Arc<str>,
        ready: Ready,
        max_output: usize,
        record_start: impl FnOnce(&Ready) -> Result<(), CallError>,
        finish: impl FnOnce(Ready, &CallHooks<'_>) -> CallResponse + Send + 'static,
    ) -> Result<Value, CallError> {
        let id = new_handle()?;
        // A call approved while serve was stopping never starts (nor leaves a start record).
        if lock(&self.table).closing {
            return Err(CallError::new(ErrorCode::Internal, "the server is shutting down: no new jobs start"));
        }
        record_start(&ready)?;
        let output = Arc::new(Mutex::new(Output::new(max_output.clamp(2, 64 << 20))));
        let cancel = Cancel::new();
        let progress: Arc<Mutex<Option<Progress>>> = Arc::default();
        let job = Job {
            owner,
            tool: ready.tool().to_string(),
            call_id: ready.call_id().to_string(),
            started: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
            since: Instant::now(),
            created: SystemTime::now(),
            progress: progress.clone(),
            cancel: cancel.clone(),
            output: output.clone(),
            ended: None,
            thread: None,
        };
        let handle = json!({"job": id, "status": "running", "tool": job.tool, "call_id": job.call_id});
        {
            let mut t = lock(&self.table);
            t.reserved = t.reserved.saturating_sub(1);
            slot.used = true;
            // Shutdown began since the check above: the job ends at once, cancelled,
            // and shutdown waits for its end record.
            if t.closing {
                job.cancel.cancel();
            }
            t.jobs.insert(id.clone(), job);
        }
        let tap_out = output.clone();
        let tap: OutputTap = Arc::new(move |_, bytes: &[u8]| lock(&tap_out).push(bytes));
        let jobs = self.clone();
        let job_id = id.clone();
        let (tool, call_id) = (ready.tool().to_string(), ready.call_id().to_string());
        // The latest report is kept for job_status and tasks' status message.
        let sink: ProgressSink = Arc::new(move |p: &Progress| *lock(&progress) = Some(p.clone()));
        let spawned = std::thread::Builder::new().name("warden-job".into()).spawn(move || {
            let hooks =
                CallHooks { approve: None, cancel, tap: Some(tap), progress: Some(sink), run: None, client: None };
            // A panic must not leave the job `running` for ever, holding a place among max_jobs.
            let response = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| finish(ready, &hooks)))
                .unwrap_or_else(|_| CallResponse {
                    status: Status::Error,
                    tool,
                    call_id,
                    result: None,
                    truncated: false,
                    error: Some(CallError::new(
                        ErrorCode::Internal,
                        "the job's thread panicked before its end record was written",
                    )),
                    cache: None,
                    reason: None,
                    duration_ms: 0.0,
                });
            jobs.end(&job_id, response, &output);
        });
        let mut t = lock(&self.table);
        match spawned {
            Ok(thread) => {
                if let Some(j) = t.jobs.get_mut(&id) {
                    j.thread = Some(thread);
                }
                Ok(handle)
            }
            Err(e) => {
                t.jobs.remove(&id);
                Err(CallError::new(ErrorCode::Internal, format!("cannot start the job's thread: {e}")))
            }
        }
    }

    /// Marks a job ended. A job that printed nothing (a component) gets its
    /// result's text as its output.
    fn end(&self, id: &str, response: CallResponse, output: &Mutex<Output>) {
        {
            let mut out = lock(output);
            if out.total() == 0
                && let Some(v) = &response.result
            {
                let text = match v {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                out.push(text.as_bytes());
            }
        }
        let mut t = lock(&self.table);
        if let Some(j) = t.jobs.get_mut(id) {
            j.ended = Some((response, Instant::now(), SystemTime::now()));
        }
        self.ended.notify_all();
        self.ended_async.notify_waiters();
    }

    /// A job of `owner` as a task.
    pub fn view(&self, owner: &str, id: &str) -> Result<TaskView, CallError> {
        let mut t = lock(&self.table);
        t.prune();
        let j = t.jobs.get(id).filter(|j| &*j.owner == owner).ok_or_else(|| not_found(id))?;
        Ok(TaskView::of(id, j))
    }

    /// Every job of `owner` as a task, oldest first.
    pub fn views(&self, owner: &str) -> Vec<TaskView> {
        let mut t = lock(&self.table);
        t.prune();
        let mut mine: Vec<(&String, &Job)> = t.jobs.iter().filter(|(_, j)| &*j.owner == owner).collect();
        mine.sort_by_key(|(id, j)| (j.since, id.as_str()));
        mine.into_iter().map(|(id, j)| TaskView::of(id, j)).collect()
    }

    /// Waits until the job of `owner` has ended (its end record is written), then shows it.
    pub async fn ended(&self, owner: &str, id: &str) -> Result<TaskView, CallError> {
        loop {
            let notified = self.ended_async.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let view = self.view(owner, id)?;
            if view.ended.is_some() {
                return Ok(view);
            }
            notified.await;
        }
    }

    /// `job_status`.
    pub fn status(&self, owner: &str, id: &str) -> Result<Value, CallError> {
        let mut t = lock(&self.table);
        t.prune();
        let j = t.jobs.get(id).filter(|j| &*j.owner == owner).ok_or_else(|| not_found(id))?;
        Ok(j.summary(id, true))
    }

    /// `job_output`: up to `limit` bytes (at most [`MAX_OUTPUT_CHUNK`]) from `offset`.
    pub fn output(&self, owner: &str, id: &str, offset: u64, limit: usize) -> Result<Value, CallError> {
        let mut t = lock(&self.table);
        t.prune();
        let j = t.jobs.get(id).filter(|j| &*j.owner == owner).ok_or_else(|| not_found(id))?;
        let out = lock(&j.output);
        let (bytes, next, skipped) = out.read(offset, limit.clamp(1, MAX_OUTPUT_CHUNK));
        let done = j.ended.is_some();
        Ok(json!({
            "job": id,
            "status": j.status(),
            "offset": offset,
            "next_offset": next,
            "skipped": skipped,
            "total": out.total(),
            "eof": done && next >= out.total(),
            // What reaches the model is cleaned like every result: no escapes, no invisible text.
            "output": warden_runtime::shape::sanitize_str(&String::from_utf8_lossy(&bytes)),
        }))
    }

    /// `job_cancel`: the job's teardown, then its status once its end record
    /// is written (or still `running` if that takes longer than [`CANCEL_WAIT`]).
    pub fn cancel(&self, owner: &str, id: &str) -> Result<Value, CallError> {
        let mut t = lock(&self.table);
        t.prune();
        let j = t.jobs.get(id).filter(|j| &*j.owner == owner).ok_or_else(|| not_found(id))?;
        j.cancel.cancel();
        let deadline = Instant::now() + CANCEL_WAIT;
        while t.jobs.get(id).is_some_and(|j| j.ended.is_none()) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            t = self.ended.wait_timeout(t, left).unwrap_or_else(PoisonError::into_inner).0;
        }
        let j = t.jobs.get(id).ok_or_else(|| not_found(id))?;
        Ok(j.summary(id, true))
    }

    /// `job_list`: the owner's jobs, running first, then by start.
    pub fn list(&self, owner: &str) -> Value {
        let mut t = lock(&self.table);
        t.prune();
        let mut mine: Vec<(&String, &Job)> = t.jobs.iter().filter(|(_, j)| &*j.owner == owner).collect();
        mine.sort_by_key(|(_, j)| (j.ended.is_some(), j.since));
        json!({"jobs": mine.iter().map(|(id, j)| j.summary(id, false)).collect::<Vec<_>>(), "max_jobs": self.max})
    }

    /// Who owns job `id` (for the control socket, [`super::control`], which
    /// answers the person running warden about every owner's jobs).
    pub fn owner_of(&self, id: &str) -> Option<Arc<str>> {
        lock(&self.table).jobs.get(id).map(|j| j.owner.clone())
    }

    /// Every owner's jobs, running first, then by start; each says whose it is
    /// (`stdio:PID`, or `http` for a bearer token's, never the token's hash).
    pub fn list_all(&self) -> Value {
        let mut t = lock(&self.table);
        t.prune();
        let mut all: Vec<(&String, &Job)> = t.jobs.iter().collect();
        all.sort_by_key(|(_, j)| (j.ended.is_some(), j.since));
        let jobs: Vec<Value> = all
            .iter()
            .map(|(id, j)| {
                let mut v = j.summary(id, false);
                let owner = if j.owner.starts_with("stdio:") { j.owner.to_string() } else { "http".to_string() };
                v["owner"] = json!(owner);
                v
            })
            .collect();
        json!({"jobs": jobs, "max_jobs": self.max})
    }

    /// Cancels every running job and waits until each has written its end
    /// record; no job starts afterwards.
    pub fn shutdown(&self) {
        let mut t = lock(&self.table);
        t.closing = true;
        // Until no job runs and no call holds a place (one may still become a
        // job, which then starts cancelled), bounded.
        let deadline = Instant::now() + SHUTDOWN_WAIT;
        loop {
            for j in t.jobs.values().filter(|j| j.ended.is_none()) {
                j.cancel.cancel();
            }
            if (t.running() == 0 && t.reserved == 0) || Instant::now() >= deadline {
                break;
            }
            t = match self.ended.wait_timeout(t, Duration::from_millis(100)) {
                Ok((guard, _)) => guard,
                Err(poisoned) => poisoned.into_inner().0,
            };
        }
        // Only ended jobs are joined: exit stays bounded even if a teardown hangs.
        let threads: Vec<std::thread::JoinHandle<()>> =
            t.jobs.values_mut().filter(|j| j.ended.is_some()).filter_map(|j| j.thread.take()).collect();
        drop(t);
        for thread in threads {
            let _ = thread.join();
        }
    }
}

/// The job tools' MCP definitions.
pub fn tools() -> Vec<Tool> {
    let job = json!({"type": "string", "description": "the handle a background tool answered with (j-…)"});
    let defs = [
        (
            "job_status",
            "[warden] The status of a background job: running, finished (with exit_code), failed or cancelled, \
             and its result document once it ended.",
            json!({"type": "object", "properties": {"job": job}, "required": ["job"], "additionalProperties": false}),
            true,
        ),
        (
            "job_output",
            "[warden] A background job's output from `offset` (0 at first; then the `next_offset` of the last \
             answer), at most 65536 bytes (`limit`) a call. Past the tool's max_output the middle is dropped: \
             `skipped` counts the bytes jumped over.",
            json!({"type": "object", "properties": {
                "job": job,
                "offset": {"type": "integer", "minimum": 0},
                "limit": {"type": "integer", "minimum": 1, "maximum": MAX_OUTPUT_CHUNK},
            }, "required": ["job"], "additionalProperties": false}),
            true,
        ),
        (
            "job_cancel",
            "[warden] Cancels a background job (its sandbox is torn down) and answers its status once it ended.",
            json!({"type": "object", "properties": {"job": job}, "required": ["job"], "additionalProperties": false}),
            false,
        ),
        (
            "job_list",
            "[warden] The background jobs started on this connection: running ones, and ended ones for 10 minutes.",
            json!({"type": "object", "properties": {}, "additionalProperties": false}),
            true,
        ),
    ];
    defs.into_iter()
        .map(|(name, description, schema, read_only)| {
            let schema: JsonObject = match schema {
                Value::Object(o) => o,
                _ => JsonObject::new(),
            };
            Tool::new(name, description, Arc::new(schema)).with_annotations(
                ToolAnnotations::new().read_only(read_only).destructive(false).idempotent(read_only).open_world(false),
            )
        })
        .collect()
}

/// Answers a call of job tool `name` for `owner`; `None` when `name` is not one.
pub fn call(jobs: &Jobs, owner: &str, name: &str, args: &JsonObject) -> Option<CallToolResult> {
    if !warden_policy::JOB_TOOLS.contains(&name) {
        return None;
    }
    let job = args.get("job").and_then(Value::as_str);
    let answer = match (name, job) {
        ("job_list", _) => Ok(jobs.list(owner)),
        (_, None) => Err(CallError::new(ErrorCode::InvalidArgs, format!("{name}: `job` (a string) is required"))),
        ("job_status", Some(id)) => jobs.status(owner, id),
        ("job_cancel", Some(id)) => jobs.cancel(owner, id),
        (_, Some(id)) => {
            let offset = args.get("offset").map_or(Some(0), Value::as_u64);
            let limit = args.get("limit").map_or(Some(MAX_OUTPUT_CHUNK as u64), Value::as_u64);
            match (offset, limit) {
                (Some(offset), Some(limit)) => {
                    jobs.output(owner, id, offset, usize::try_from(limit).unwrap_or(MAX_OUTPUT_CHUNK))
                }
                _ => Err(CallError::new(
                    ErrorCode::InvalidArgs,
                    format!("{name}: `offset` and `limit` must be whole numbers (limit at least 1)"),
                )),
            }
        }
    };
    Some(match answer {
        Ok(doc) => {
            let mut r = CallToolResult::success(vec![ContentBlock::text(doc.to_string())]);
            r.structured_content = Some(doc);
            r
        }
        Err(e) => {
            let mut r = CallToolResult::error(vec![ContentBlock::text(format!("{}: {}", e.code, e.message))]);
            r.structured_content = Some(json!({
                "status": "error",
                "error": e.to_json(),
            }));
            r
        }
    })
}

/// A job's handle as the result of the call that started it.
pub fn handle_result(handle: Value) -> CallToolResult {
    let mut r = CallToolResult::success(vec![ContentBlock::text(handle.to_string())]);
    r.structured_content = Some(handle);
    r
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::time::Instant;

    use super::{Job, Jobs, Output};
    use warden_runtime::Cancel;
    use warden_runtime::error::ErrorCode;

    fn with_job(owner: &str) -> Arc<Jobs> {
        let jobs = Arc::new(Jobs::new(1));
        let job = Job {
            owner: Arc::from(owner),
            tool: "bg".into(),
            call_id: "c-1".into(),
            started: "now".into(),
            since: Instant::now(),
            created: std::time::SystemTime::now(),
            progress: Arc::default(),
            cancel: Cancel::new(),
            output: Arc::new(Mutex::new(Output::new(16))),
            ended: None,
            thread: None,
        };
        super::lock(&jobs.table).jobs.insert("j-1".into(), job);
        jobs
    }

    #[test]
    fn another_owner_gets_the_answer_of_a_missing_job() {
        let jobs = with_job("stdio:1");
        assert_eq!(jobs.status("stdio:1", "j-1").map(|v| v["status"].clone()).ok(), Some("running".into()));
        for (owner, id) in [("token:x", "j-1"), ("stdio:1", "j-2")] {
            let e = jobs.status(owner, id).err().map(|e| (e.code, e.message.replace(id, "ID")));
            let missing = jobs.status("stdio:1", "j-2").err().map(|e| (e.code, e.message.replace("j-2", "ID")));
            assert_eq!(e, missing);
            assert_eq!(e.map(|e| e.0), Some(ErrorCode::NotFound));
        }
        assert!(jobs.output("token:x", "j-1", 0, 10).is_err());
        assert!(jobs.list("token:x")["jobs"].as_array().is_some_and(Vec::is_empty));
        // Tasks are the same jobs: the same answer, and no list of another's.
        let as_task = jobs.view("token:x", "j-1").err().map(|e| (e.code, e.message.replace("j-1", "ID")));
        let missing = jobs.view("stdio:1", "j-2").err().map(|e| (e.code, e.message.replace("j-2", "ID")));
        assert_eq!(as_task, missing);
        assert!(jobs.views("token:x").is_empty());
        assert_eq!(jobs.views("stdio:1").len(), 1);
    }

    #[test]
    fn max_jobs_counts_running_and_reserved() {
        let jobs = with_job("o");
        let e = jobs.reserve().err().map(|e| (e.code, e.message));
        assert!(e.as_ref().is_some_and(|(c, m)| *c == ErrorCode::LimitExceeded && m.contains("[defaults] max_jobs")));
        let free = Arc::new(Jobs::new(1));
        let slot = free.reserve();
        assert!(slot.is_ok() && free.reserve().is_err());
        drop(slot);
        assert!(free.reserve().is_ok());
    }

    #[test]
    fn output_keeps_head_and_tail_and_counts_the_middle() {
        let mut o = Output::new(8);
        o.push(b"0123");
        o.push(b"456789ab");
        assert_eq!(o.total(), 12);
        let (b, next, skipped) = o.read(0, 100);
        assert_eq!((b.as_slice(), next, skipped), (&b"0123"[..], 4, 0));
        let (b, next, skipped) = o.read(4, 100);
        assert_eq!((b.as_slice(), next, skipped), (&b"89ab"[..], 12, 4));
        let (b, next, _) = o.read(12, 100);
        assert_eq!((b.len(), next), (0, 12));
    }

    #[test]
    fn job_output_is_cleaned_like_any_result() {
        let jobs = with_job("o");
        {
            let t = super::lock(&jobs.table);
            let job = t.jobs.get("j-1").map(|j| j.output.clone());
            drop(t);
            if let Some(out) = job {
                super::lock(&out).push("a\u{1b}]0;x\u{7}b\u{202e}c".as_bytes());
            }
        }
        // The head (8 bytes here), then the rest from where it ended.
        let read = |offset| {
            let v = jobs.output("o", "j-1", offset, 100).map(|v| v["output"].as_str().map(str::to_string));
            v.ok().flatten().unwrap_or_default()
        };
        let text = read(0) + &read(8);
        assert!(!text.contains('\u{1b}') && !text.contains('\u{7}') && !text.contains('\u{202e}'), "{text:?}");
        assert!(text.starts_with('a') && text.ends_with('c'), "{text:?}");
    }

    #[test]
    fn output_reads_in_chunks() {
        let mut o = Output::new(100);
        o.push(b"hello world");
        let (b, next, _) = o.read(0, 5);
        assert_eq!((b.as_slice(), next), (&b"hello"[..], 5));
        let (b, next, _) = o.read(next, 100);
        assert_eq!((b.as_slice(), next), (&b" world"[..], 11));
    }
}
