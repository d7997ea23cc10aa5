//! The page's API (every route needs the token; [`super::handle`] checked it).
//! Requests with a body are `POST`s of JSON (at most [`MAX_BODY_BYTES`]).

use std::io::Read;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

use super::{Body, Console, json, text};

/// The largest request body.
pub(super) const MAX_BODY_BYTES: usize = 64 << 10;
/// The most records a search answers with (newest first).
pub(super) const MAX_RESULTS: usize = 200;
/// The most bytes of the log a search reads (its end).
pub(super) const MAX_SEARCH_BYTES: u64 = 64 << 20;
/// How long a `serve` process has to answer on its control socket (a
/// cancellation waits up to `job_cancel`'s 10 s for the end record).
pub(super) const CONTROL_TIMEOUT: Duration = Duration::from_secs(15);
/// How long it has to list its jobs (the page asks every second).
pub(super) const LIST_TIMEOUT: Duration = Duration::from_secs(2);
/// The largest answer read from a control socket.
pub(super) const MAX_CONTROL_ANSWER: u64 = 4 << 20;

/// One API request.
pub(super) async fn route(c: Arc<Console>, req: http::Request<Incoming>) -> http::Response<Body> {
    let (method, path) = (req.method().clone(), req.uri().path().to_string());
    if method == http::Method::GET {
        return match path.as_str() {
            "/api/feed" => match c.feeds.clone().try_acquire_owned() {
                Ok(permit) => {
                    let mut r = super::answer(StatusCode::OK, "text/event-stream", super::feed::start(c, permit));
                    r.headers_mut().insert("x-accel-buffering", http::HeaderValue::from_static("no"));
                    r
                }
                Err(_) => text(StatusCode::SERVICE_UNAVAILABLE, "too many pages follow this console; close one"),
            },
            "/api/inbox" => blocking(move || Ok(Value::Array(super::feed::pending(&c.log)))).await,
            "/api/jobs" => json(StatusCode::OK, &jobs(&c.live).await),
            "/api/verify" => blocking(move || Ok(verify(&c.log))).await,
            "/api/definitions" => {
                // One gathering at a time (each starts the policy's servers).
                let _one = c.accepting.clone().lock_owned().await;
                let session = c.session.clone();
                blocking(move || super::defs::pending(&session)).await
            }
            _ => text(StatusCode::NOT_FOUND, "Not found"),
        };
    }
    if method != http::Method::POST {
        return text(StatusCode::METHOD_NOT_ALLOWED, "GET or POST");
    }
    let is_json =
        req.headers().get(http::header::CONTENT_TYPE).is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if !is_json {
        return text(StatusCode::UNSUPPORTED_MEDIA_TYPE, "send application/json");
    }
    let body = match http_body_util::Limited::new(req.into_body(), MAX_BODY_BYTES).collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return text(StatusCode::PAYLOAD_TOO_LARGE, "the request is too large"),
    };
    let Ok(body) = serde_json::from_slice::<Value>(&body) else {
        return text(StatusCode::BAD_REQUEST, "the body is not JSON");
    };
    let s = |k: &str| body.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    match path.as_str() {
        "/api/answer" => answer(&c, &body).await,
        "/api/search" => blocking(move || Ok(search(&c.log, &body))).await,
        "/api/jobs/output" | "/api/jobs/cancel" => {
            let op = if path.ends_with("output") { "output" } else { "cancel" };
            let offset = body.get("offset").and_then(Value::as_u64).unwrap_or(0);
            let request = json!({"op": op, "job": s("job"), "offset": offset, "limit": 32 << 10});
            let pid = body.get("pid").and_then(Value::as_u64).unwrap_or(0);
            match control(&c.live, pid, &request, CONTROL_TIMEOUT).await {
                Ok(v) => json(StatusCode::OK, &v),
                Err(e) => text(StatusCode::BAD_GATEWAY, e),
            }
        }
        "/api/definitions/accept" => {
            let _one = c.accepting.clone().lock_owned().await;
            let (owner, session) = (s("owner"), c.session.clone());
            blocking(move || super::defs::accept(&session, &owner)).await
        }
        _ => text(StatusCode::NOT_FOUND, "Not found"),
    }
}

/// `POST /api/answer {"id", "args_sha256", "answer": "approve|reject|always",
/// "reason", "lasting"}`: the person's answer to a pending approval, through
/// the inbox's own code (first answer wins; changed arguments are refused),
/// recorded with who gave it and `via: "console ADDR"`.
async fn answer(c: &Console, body: &Value) -> http::Response<Body> {
    use warden_core::live::{Answer, AnswerKind, Live};
    let s = |k: &str| body.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let kind = match s("answer").as_str() {
        "approve" => AnswerKind::Approve,
        "reject" => AnswerKind::Reject,
        "always" => AnswerKind::Always,
        other => return text(StatusCode::BAD_REQUEST, format!("answer {other:?}: give approve, reject or always")),
    };
    let reason: Option<String> =
        Some(s("reason")).filter(|r| !r.trim().is_empty()).map(|r| r.chars().take(500).collect());
    let lasting = match kind {
        AnswerKind::Always => body.get("lasting").filter(|v| v.is_object()).cloned(),
        _ => None,
    };
    let a = Answer {
        id: s("id"),
        args_sha256: s("args_sha256"),
        answer: kind,
        reason,
        lasting,
        who: warden_core::live::whoami(),
        via: c.via.clone(),
    };
    let inbox = Live::for_log(&c.log).inbox();
    match tokio::task::spawn_blocking(move || inbox.answer(&a).map(|()| a)).await {
        Ok(Ok(a)) => json(StatusCode::OK, &json!({"answered": true, "id": a.id, "who": a.who, "via": a.via})),
        Ok(Err(e)) => text(StatusCode::CONFLICT, e),
        Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

/// `f` on a blocking thread: its JSON, or its failure as 409 with the message.
async fn blocking(f: impl FnOnce() -> Result<Value, String> + Send + 'static) -> http::Response<Body> {
    match tokio::task::spawn_blocking(f).await {
        Ok(Ok(v)) => json(StatusCode::OK, &v),
        Ok(Err(e)) => text(StatusCode::CONFLICT, e),
        Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

/// One request to the control socket of `serve` process `pid`.
async fn control(live: &Path, pid: u64, request: &Value, limit: Duration) -> Result<Value, String> {
    let path = live.join("procs").join(format!("{pid}.sock"));
    let exchange = async {
        let stream = tokio::net::UnixStream::connect(&path).await.map_err(|e| format!("process {pid}: {e}"))?;
        let (read, mut write) = stream.into_split();
        let mut line = request.to_string().into_bytes();
        line.push(b'\n');
        write.write_all(&line).await.map_err(|e| e.to_string())?;
        let mut answer = String::new();
        use tokio::io::AsyncReadExt;
        tokio::io::BufReader::new(read.take(MAX_CONTROL_ANSWER))
            .read_line(&mut answer)
            .await
            .map_err(|e| e.to_string())?;
        serde_json::from_str::<Value>(&answer).map_err(|e| format!("process {pid} answered no JSON: {e}"))
    };
    tokio::time::timeout(limit, exchange).await.map_err(|_| format!("process {pid} did not answer"))?
}

/// Every `serve` process's jobs: `[{"pid", "jobs", "max_jobs"}]` (processes
/// that are gone, whose socket stayed, are left out).
async fn jobs(live: &Path) -> Value {
    let mut pids: Vec<u64> = std::fs::read_dir(live.join("procs"))
        .map(|d| {
            d.flatten().filter_map(|e| e.file_name().to_str()?.strip_suffix(".sock")?.parse::<u64>().ok()).collect()
        })
        .unwrap_or_default();
    pids.sort_unstable();
    let mut out = Vec::new();
    for pid in pids {
        if let Ok(v) = control(live, pid, &json!({"op": "jobs"}), LIST_TIMEOUT).await {
            out.push(v);
        }
    }
    Value::Array(out)
}

/// `warden log verify`'s verdict on the log.
fn verify(log: &Path) -> Value {
    match crate::audit::verify(log) {
        Ok(v) => {
            let (ok, lines) = super::super::log::verdict(log, &v);
            json!({"ok": ok, "records": v.records, "head": v.head, "lines": lines})
        }
        Err(e) => json!({"ok": false, "records": 0, "lines": [format!("cannot read {}: {e}", log.display())]}),
    }
}

/// The log's records (its last [`MAX_SEARCH_BYTES`]) that match `q`: `tool`
/// and `status` exact when given, `text` anywhere in the line; newest first.
fn search(log: &Path, q: &Value) -> Value {
    let field = |k: &str| q.get(k).and_then(Value::as_str).map(str::trim).filter(|s| !s.is_empty());
    let (tool, status, needle) = (field("tool"), field("status"), field("text").map(str::to_lowercase));
    let Ok(f) = std::fs::File::open(log) else { return json!({"records": [], "scanned": 0}) };
    let len = f.metadata().map_or(0, |m| m.len());
    let mut data = Vec::new();
    let mut f = f;
    use std::io::{Seek, SeekFrom};
    let start = len.saturating_sub(MAX_SEARCH_BYTES);
    if f.seek(SeekFrom::Start(start)).is_err() || f.take(MAX_SEARCH_BYTES).read_to_end(&mut data).is_err() {
        return json!({"records": [], "scanned": 0});
    }
    let mut found = Vec::new();
    let mut scanned = 0u64;
    for line in data.split(|&b| b == b'\n').rev() {
        let line = line.trim_ascii();
        if line.is_empty() || line.contains(&0) {
            continue;
        }
        let Ok(rec) = serde_json::from_slice::<Value>(line) else { continue };
        scanned += 1;
        let is = |k: &str, want: Option<&str>| want.is_none_or(|w| rec.get(k).and_then(Value::as_str) == Some(w));
        let has = needle.as_ref().is_none_or(|n| String::from_utf8_lossy(line).to_lowercase().contains(n.as_str()));
        if is("tool", tool) && is("status", status) && has {
            found.push(rec);
            if found.len() >= MAX_RESULTS {
                break;
            }
        }
    }
    json!({"records": found, "scanned": scanned, "partial": start > 0})
}
