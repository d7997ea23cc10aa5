//! MCP tasks: a background tool's job ([`super::jobs`]) seen through either
//! generation of tasks. A task *is* a job (same table, handle, owner, limits
//! and two audit records), so it exists only once the call was approved.
//! The 2026-07-28 extension (SEP-2663) is routed by rmcp ([`created`],
//! [`detailed`], [`cancel`]); the 2025-11-25 experimental tasks are answered by
//! [`legacy_request`] behind [`super::legacy_tasks`]. Clients poll, at
//! [`POLL_INTERVAL_MS`]. The behaviour of both is in docs/mcp.md, "Tasks".

use std::time::SystemTime;

use rmcp::ErrorData as McpError;
use rmcp::model::{CreateTaskResult, DetailedTask, JsonObject, Task, TaskPayload, TaskStatus};
use serde_json::{Value, json};

use super::jobs::{Jobs, TaskView};
use super::tools;
use warden_core::executor::Status;
use warden_runtime::error::CallError;

/// How often clients are told to poll a task.
pub const POLL_INTERVAL_MS: u64 = 1000;
/// The `_meta` key that ties a 2025-11-25 `tasks/result` to its task.
pub const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";
/// The most tasks one `tasks/list` page holds (the job table keeps at most
/// `max_jobs` running and 64 ended, so one page is all there is in practice).
pub const LIST_PAGE: usize = 100;

fn timestamp(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

/// "Not found" for a task id that is not the caller's, whatever the reason
/// (the same answer as for one that never existed).
pub fn not_found(e: &CallError, id: &str) -> McpError {
    McpError::invalid_params(e.message.clone(), Some(json!({ "taskId": id })))
}

// ---- 2026-07-28 ----------------------------------------------------------

fn modern_status(v: &TaskView) -> TaskStatus {
    match &v.ended {
        None => TaskStatus::Working,
        Some(r) if r.status == Status::Cancelled => TaskStatus::Cancelled,
        Some(_) => TaskStatus::Completed,
    }
}

fn modern_task(v: &TaskView) -> Task {
    let mut task = Task::new(v.id.clone(), modern_status(v), timestamp(v.created), timestamp(v.updated))
        .with_ttl_ms(v.ttl_ms)
        .with_poll_interval_ms(POLL_INTERVAL_MS);
    if let Some(m) = &v.message {
        task = task.with_status_message(m.clone());
    }
    task
}

/// The answer to the `tools/call` that started the job.
pub fn created(v: &TaskView) -> CreateTaskResult {
    CreateTaskResult::new(modern_task(v))
}

/// `tasks/get`: the task, with its final result inline once it ended.
pub fn detailed(v: &TaskView) -> DetailedTask {
    let payload = match &v.ended {
        None => TaskPayload::Working,
        Some(r) if r.status == Status::Cancelled => TaskPayload::Cancelled,
        Some(r) => TaskPayload::Completed { result: result_object(r) },
    };
    DetailedTask::new(modern_task(v), payload)
}

fn result_object(r: &warden_core::executor::CallResponse) -> JsonObject {
    match serde_json::to_value(tools::result(r)) {
        Ok(Value::Object(o)) => o,
        _ => JsonObject::new(),
    }
}

// ---- 2025-11-25 ----------------------------------------------------------

fn legacy_status(v: &TaskView) -> &'static str {
    match &v.ended {
        None => "working",
        Some(r) => match r.status {
            Status::Success => "completed",
            Status::Cancelled => "cancelled",
            // "For tool calls, this includes results with isError" (2025-11-25).
            Status::Error | Status::Rejected => "failed",
        },
    }
}

/// A 2025-11-25 `Task`.
pub fn legacy_task(v: &TaskView) -> Value {
    let mut o = JsonObject::new();
    o.insert("taskId".into(), json!(v.id));
    o.insert("status".into(), json!(legacy_status(v)));
    if let Some(m) = &v.message {
        o.insert("statusMessage".into(), json!(m));
    }
    o.insert("createdAt".into(), json!(timestamp(v.created)));
    o.insert("lastUpdatedAt".into(), json!(timestamp(v.updated)));
    o.insert("ttl".into(), json!(v.ttl_ms));
    o.insert("pollInterval".into(), json!(POLL_INTERVAL_MS));
    Value::Object(o)
}

fn task_id(params: &Option<Value>) -> Result<&str, McpError> {
    params.as_ref().and_then(|p| p.get("taskId")).and_then(Value::as_str).ok_or_else(|| {
        McpError::invalid_params("`taskId` (a string) is required", params.as_ref().map(|p| json!({"params": p})))
    })
}

/// Tears a task's sandbox down (the same teardown as `job_cancel`, waiting,
/// bounded, for the end record) and shows it then; both generations' cancel.
pub async fn cancel(jobs: &std::sync::Arc<Jobs>, owner: &str, id: &str) -> Result<TaskView, McpError> {
    let (jobs, owner_s, id_s) = (jobs.clone(), owner.to_string(), id.to_string());
    tokio::task::spawn_blocking(move || jobs.cancel(&owner_s, &id_s).and_then(|_| jobs.view(&owner_s, &id_s)))
        .await
        .map_err(|e| McpError::internal_error(format!("the cancel's thread failed: {e}"), None))?
        .map_err(|e| not_found(&e, id))
}

/// Answers a 2025-11-25 `tasks/*` request (`method` without its prefix:
/// `get`, `result`, `list`, `cancel`) for `owner`.
pub async fn legacy_request(
    jobs: &std::sync::Arc<Jobs>,
    owner: &str,
    method: &str,
    params: Option<Value>,
) -> Result<Value, McpError> {
    match method {
        "get" => {
            let id = task_id(&params)?;
            jobs.view(owner, id).map(|v| legacy_task(&v)).map_err(|e| not_found(&e, id))
        }
        "result" => {
            // Blocks until the job ended, as the revision says; a client that
            // gives up cancels the request, which drops this wait (not the job).
            let id = task_id(&params)?;
            let v = jobs.ended(owner, id).await.map_err(|e| not_found(&e, id))?;
            let Some(r) = &v.ended else { return Err(McpError::internal_error("the task has no result", None)) };
            let mut o = result_object(r);
            o.remove("resultType"); // a 2026-07-28 member
            let meta = o.entry("_meta").or_insert_with(|| json!({}));
            if let Some(m) = meta.as_object_mut() {
                m.insert(RELATED_TASK.into(), json!({ "taskId": v.id }));
            }
            Ok(Value::Object(o))
        }
        "list" => {
            // One page: the cursor, if any, is the last id of the page before.
            let after = params.as_ref().and_then(|p| p.get("cursor")).and_then(Value::as_str).map(str::to_string);
            let views = jobs.views(owner);
            let start = match &after {
                None => 0,
                Some(c) => match views.iter().position(|v| &v.id == c) {
                    Some(i) => i + 1,
                    None => {
                        return Err(McpError::invalid_params(
                            "unknown `cursor`: pass the nextCursor of the previous tasks/list",
                            Some(json!({"cursor": c})),
                        ));
                    }
                },
            };
            let page: Vec<&TaskView> = views.iter().skip(start).take(LIST_PAGE).collect();
            let mut o = JsonObject::new();
            o.insert("tasks".into(), Value::Array(page.iter().map(|v| legacy_task(v)).collect()));
            if start + page.len() < views.len()
                && let Some(last) = page.last()
            {
                o.insert("nextCursor".into(), json!(last.id));
            }
            Ok(Value::Object(o))
        }
        "cancel" => {
            let id = task_id(&params)?;
            let v = jobs.view(owner, id).map_err(|e| not_found(&e, id))?;
            if v.ended.is_some() {
                return Err(McpError::invalid_params(
                    format!("task {id} already ended ({}): there is nothing to cancel", legacy_status(&v)),
                    Some(json!({ "taskId": id, "status": legacy_status(&v) })),
                ));
            }
            let v = cancel(jobs, owner, id).await?;
            // It ended on its own while the cancel arrived: as for a task that had already ended.
            match legacy_status(&v) {
                "cancelled" | "working" => Ok(legacy_task(&v)),
                other => Err(McpError::invalid_params(
                    format!("task {id} ended ({other}) before the cancel took effect: there was nothing to cancel"),
                    Some(json!({ "taskId": id, "status": other })),
                )),
            }
        }
        _ => Err(McpError::new(
            rmcp::model::ErrorCode::METHOD_NOT_FOUND,
            format!("tasks/{method} is not a 2025-11-25 tasks method"),
            None,
        )),
    }
}
