//! Running a component in its store: a tool's `call` (both WIT generations),
//! a command's `run`, and what a trap or an error becomes.

use super::*;

pub(super) fn run_in_store(
    store: &mut Store<HostState>,
    plugin: &LoadedPlugin,
    tool: &str,
    args: &str,
    out: CappedPipe,
    err: CappedPipe,
) -> Result<RunOutput, CallError> {
    let cpu0 = thread_cpu();
    let started = Instant::now();
    let outcome: wasmtime::Result<Result<Returned, ToolError>> = match &plugin.pre {
        Pre::Tool(pre) => pre
            .instantiate(&mut *store)
            .and_then(|p: Plugin| p.warden_plugin_tool().call_call(&mut *store, tool, args))
            .map(|r| r.map(Returned::Json)),
        Pre::ToolV2(pre) => pre
            .instantiate(&mut *store)
            .and_then(|p| p.warden_plugin_tool().call_call(&mut *store, tool, args))
            .map(|r| r.map(Returned::Rich).map_err(ToolError::from)),
        Pre::Command(_) => {
            return Err(CallError::new(ErrorCode::Internal, format!("{tool}: plugin {} is a command", plugin.name)));
        }
    };
    // The last report the rate limit held back goes out before the result.
    store.data_mut().progress.flush();
    let cpu = thread_cpu().saturating_sub(cpu0);
    let limiter = &store.data().limiter;
    // A path or destination warden refused is what a failed call most likely tripped on.
    let refused = |mut e: CallError| {
        if let Some(note) = store.data().note() {
            e.message = format!("{}; {note}", e.message);
        }
        e
    };
    let (stdout, stderr) = (out.contents(), err.contents());
    let mut usage = Usage {
        cpu_ms: cpu.as_secs_f64() * 1000.0,
        max_rss_kb: (limiter.peak / 1024) as u64,
        output_bytes: stdout.total() + stderr.total(),
        truncated: stdout.dropped() > 0 || stderr.dropped() > 0,
        progress: Some(store.data().progress.counts()).filter(|c| c.accepted + c.ignored > 0),
    };
    match outcome {
        Ok(Ok(Returned::Json(text))) => {
            usage.output_bytes += text.len() as u64;
            let value = serde_json::from_str(&text).map_err(|e| {
                CallError::new(ErrorCode::ExecutionFailed, format!("{tool}: the plugin returned invalid JSON: {e}"))
            })?;
            Ok(RunOutput { value, usage, sandbox: None, blocks: false })
        }
        Ok(Ok(Returned::Rich(output))) => {
            let value = rich::to_value(tool, output)?;
            usage.output_bytes += serde_json::to_vec(&value).map_or(0, |v| v.len() as u64);
            Ok(RunOutput { value, usage, sandbox: None, blocks: true })
        }
        Ok(Err(e)) => Err(refused(match e {
            ToolError::InvalidArgs(m) => CallError::new(ErrorCode::InvalidArgs, format!("{tool}: {m}")),
            ToolError::NotFound(m) => CallError::new(ErrorCode::FileNotFound, format!("{tool}: {m}")),
            ToolError::PermissionDenied(m) => CallError::new(ErrorCode::PermissionDenied, format!("{tool}: {m}")),
            ToolError::Failed(m) => CallError::new(ErrorCode::ExecutionFailed, format!("{tool}: {m}")),
        })),
        Err(e) => Err(refused(trap_error(tool, &e, limiter, started, &tail(&stderr.joined())))),
    }
}

/// What a tool component's `call` returned, by world.
pub(super) enum Returned {
    /// 0.1.0: one JSON document.
    Json(String),
    /// 0.2.0: content blocks and structured content.
    Rich(bindings_v2::exports::warden::plugin::tool::ToolOutput),
}

impl From<bindings_v2::exports::warden::plugin::tool::ToolError> for ToolError {
    fn from(e: bindings_v2::exports::warden::plugin::tool::ToolError) -> ToolError {
        use bindings_v2::exports::warden::plugin::tool::ToolError as V2;
        match e {
            V2::InvalidArgs(m) => ToolError::InvalidArgs(m),
            V2::NotFound(m) => ToolError::NotFound(m),
            V2::PermissionDenied(m) => ToolError::PermissionDenied(m),
            V2::Failed(m) => ToolError::Failed(m),
        }
    }
}

/// Runs a command component to its end: the exit code, stdout and stderr.
pub(super) fn run_command_in_store(
    store: &mut Store<HostState>,
    plugin: &LoadedPlugin,
    tool: &str,
    (out, err): (CappedPipe, CappedPipe),
    cap: usize,
) -> Result<RunOutput, CallError> {
    let Pre::Command(pre) = &plugin.pre else {
        return Err(CallError::new(ErrorCode::Internal, format!("{tool}: plugin {} is not a command", plugin.name)));
    };
    let cpu0 = thread_cpu();
    let started = Instant::now();
    let outcome = pre.instantiate(&mut *store).and_then(|c| c.wasi_cli_run().call_run(&mut *store));
    let cpu = thread_cpu().saturating_sub(cpu0);
    let limiter = &store.data().limiter;
    let (stdout, stderr) = (out.contents(), err.contents());
    let note = store.data().note();
    let exit_code = match outcome {
        Ok(Ok(())) => 0,
        Ok(Err(())) => 1,
        Err(e) => match e.downcast_ref::<wasmtime_wasi::I32Exit>() {
            Some(exit) => exit.0,
            None => {
                let mut e = trap_error(tool, &e, limiter, started, &tail(&stderr.joined()));
                if let Some(note) = note {
                    e.message = format!("{}; {note}", e.message);
                }
                return Err(e);
            }
        },
    };
    // A program that failed after a refusal: its stderr says which path warden
    // refused, and why.
    // Both streams within max_output together, each keeping its head and tail.
    let [out_text, err_text] = capture::fit([("stdout", &stdout), ("stderr", &stderr)], capture::budget(cap));
    let truncated = out_text.dropped > 0 || err_text.dropped > 0;
    let mut stderr_text = err_text.text;
    if exit_code != 0
        && let Some(note) = note
    {
        if !stderr_text.is_empty() && !stderr_text.ends_with('\n') {
            stderr_text.push('\n');
        }
        stderr_text.push_str(&format!("warden: {note}\n"));
    }
    let usage = Usage {
        cpu_ms: cpu.as_secs_f64() * 1000.0,
        max_rss_kb: (limiter.peak / 1024) as u64,
        output_bytes: stdout.total() + stderr.total(),
        truncated,
        progress: None,
    };
    let mut value = serde_json::json!({
        "exit_code": exit_code,
        "stdout": out_text.text,
        "stderr": stderr_text,
        "truncated": truncated,
    });
    if truncated {
        value["dropped"] = serde_json::json!({"stdout": out_text.dropped, "stderr": err_text.dropped});
    }
    Ok(RunOutput { value, usage, sandbox: None, blocks: false })
}

/// The error for a component that trapped (or was stopped) instead of returning.
pub(super) fn trap_error(
    tool: &str,
    e: &wasmtime::Error,
    limiter: &MemoryLimiter,
    started: Instant,
    stderr_tail: &str,
) -> CallError {
    let trap = e.downcast_ref::<Trap>().copied();
    let elapsed = started.elapsed();
    if e.downcast_ref::<CancelledByCaller>().is_some() {
        CallError::new(
            ErrorCode::Cancelled,
            format!("{tool}: cancelled by the caller after {:.1}s", elapsed.as_secs_f64()),
        )
    } else if trap == Some(Trap::Interrupt) {
        CallError::new(
            ErrorCode::Timeout,
            format!("{tool}: stopped after {:.1}s (limits.timeout)", elapsed.as_secs_f64()),
        )
    } else if limiter.refused {
        CallError::new(
            ErrorCode::LimitExceeded,
            format!(
                "{tool}: memory limit of {} reached (limits.memory){stderr_tail}",
                crate::policy::units::format_size(limiter.memory as u64)
            ),
        )
    } else if trap == Some(Trap::StackOverflow) {
        CallError::new(ErrorCode::ExecutionFailed, format!("{tool}: trapped: stack overflow"))
    } else if trap == Some(Trap::MemoryOutOfBounds) {
        CallError::new(
            ErrorCode::ExecutionFailed,
            format!(
                "{tool}: trapped: out of bounds memory access (the component's own stack lives in its \
                 memory, so a deep recursion ends this way){stderr_tail}"
            ),
        )
    } else {
        // The trap (or host error) without wasmtime's multi-line backtrace.
        let what = trap.map_or_else(|| e.root_cause().to_string(), |t| t.to_string());
        CallError::new(ErrorCode::ExecutionFailed, format!("{tool}: trapped: {what}{stderr_tail}"))
    }
}

/// The last few lines of a component's stderr, for error messages.
pub(super) fn tail(stderr: &[u8]) -> String {
    if stderr.is_empty() {
        return String::new();
    }
    let text = String::from_utf8_lossy(stderr);
    let start = text.len().saturating_sub(1024);
    let start = (start..text.len()).find(|&i| text.is_char_boundary(i)).unwrap_or(text.len());
    format!("; stderr: {}", text[start..].trim())
}
