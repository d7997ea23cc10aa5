//! The 2025-11-25 experimental tasks, around rmcp (which models only the
//! 2026-07-28 extension): a [`Session`] rewrites the frames of a 2025-11-25
//! session on their way in ([`Session::inbound`]: `params.task` into `_meta`,
//! `tasks/*` to a private method) and out ([`Session::outbound`]:
//! `capabilities.tasks`, `execution.taskSupport`, `{"task": …}`), and nothing
//! else. The private key and method carry 128 random bits drawn when `serve`
//! starts ([`Legacy`]); a frame that would still show the key goes out as an
//! internal error. A frame this module does not need is not parsed: a byte check
//! comes first. docs/mcp.md, "Tasks", says what a client sees.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Map, Value, json};

/// The revision these tasks belong to.
pub const REVISION: &str = "2025-11-25";
/// `initialize` and `tools/list` requests noted and not yet answered, at most (per session).
pub const MAX_PENDING: usize = 4096;

/// What every session of one server shares.
#[derive(Debug)]
pub struct Legacy {
    /// `warden/task-<secret>`: the `_meta` key a task call's `task` travels under.
    meta_key: String,
    /// `warden/tasks-<secret>/`: what `tasks/*` are renamed to.
    method_prefix: String,
    background: Arc<[String]>,
}

impl Legacy {
    /// For a server whose background tools are `background`.
    pub fn new(background: Vec<String>) -> Result<Legacy, String> {
        let mut b = [0u8; 16];
        getrandom::fill(&mut b).map_err(|e| format!("no randomness for the tasks key: {e}"))?;
        let secret = hex::encode(b);
        Ok(Legacy {
            meta_key: format!("warden/task-{secret}"),
            method_prefix: format!("warden/tasks-{secret}/"),
            background: background.into(),
        })
    }

    /// The private `_meta` key a task-augmented `tools/call` carries its `task` in.
    pub fn meta_key(&self) -> &str {
        &self.meta_key
    }

    /// The private method prefix `tasks/*` are renamed to.
    pub fn method_prefix(&self) -> &str {
        &self.method_prefix
    }
}

/// What a noted request's response needs.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Pending {
    Initialize,
    ToolsList,
}

/// One session's rewriting: the stdio connection, or one HTTP request.
#[derive(Debug)]
pub struct Session {
    shared: Arc<Legacy>,
    /// The session speaks 2025-11-25 (its `initialize`, or its HTTP header).
    legacy: bool,
    pending: HashMap<String, Pending>,
    /// A task call went in: an answer may carry the private key. Until then no
    /// answer can (only a rewritten call puts it in `_meta`), and none is scanned.
    tasks_seen: bool,
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// The id as rmcp reads it (an integral `1.0` is `1`), so a response finds its
/// request; `None` for an id rmcp does not accept.
fn id_key(id: &Value) -> Option<String> {
    let id: rmcp::model::RequestId = serde_json::from_value(id.clone()).ok()?;
    serde_json::to_string(&id).ok()
}

impl Session {
    /// A session; `legacy` when the transport already knows it speaks 2025-11-25.
    pub fn new(shared: Arc<Legacy>, legacy: bool) -> Session {
        Session { shared, legacy, pending: HashMap::new(), tasks_seen: false }
    }

    /// A frame from the client, rewritten if it needs to be (`None`: pass it as it is).
    pub fn inbound(&mut self, frame: &[u8]) -> Option<Vec<u8>> {
        let wanted =
            contains(frame, b"initialize") || (self.legacy && (contains(frame, b"tools") || contains(frame, b"tasks")));
        if !wanted {
            return None;
        }
        let mut msg: Value = serde_json::from_slice(frame).ok()?;
        let o = msg.as_object_mut()?;
        let method = o.get("method")?.as_str()?.to_string();
        let key = o.get("id").and_then(id_key);
        let mut changed = false;
        match method.as_str() {
            "initialize" => {
                let asked = o.get("params").and_then(|p| p.get("protocolVersion")).and_then(Value::as_str);
                self.legacy = asked == Some(REVISION);
                self.expect(key, Pending::Initialize);
            }
            "tools/list" if self.legacy => self.expect(key, Pending::ToolsList),
            "tools/call" if self.legacy => {
                let params = o.get_mut("params").and_then(Value::as_object_mut)?;
                if let Some(task) = params.remove("task") {
                    let meta = params.entry("_meta").or_insert_with(|| json!({}));
                    meta.as_object_mut()?.insert(self.shared.meta_key.clone(), task);
                    self.tasks_seen = true;
                    changed = true;
                }
            }
            // A notification (no id) keeps its name: rmcp answers nothing to it either way.
            m if self.legacy
                && key.is_some()
                && matches!(m, "tasks/get" | "tasks/result" | "tasks/list" | "tasks/cancel") =>
            {
                let verb = &m["tasks/".len()..];
                o.insert("method".into(), json!(format!("{}{verb}", self.shared.method_prefix)));
                changed = true;
            }
            _ => {}
        }
        changed.then(|| serde_json::to_vec(&msg).ok()).flatten()
    }

    fn expect(&mut self, key: Option<String>, what: Pending) {
        if let Some(k) = key
            && self.pending.len() < MAX_PENDING
        {
            self.pending.insert(k, what);
        }
    }

    /// Whether answers may need rewriting at all: a request was noted, or a
    /// task call went in. Otherwise they pass unread (and over HTTP, unbuffered).
    pub fn expecting(&self) -> bool {
        !self.pending.is_empty() || self.tasks_seen
    }

    /// Whether this answer may need rewriting: a request was noted, or it
    /// carries the private key.
    pub fn waiting(&self, frame: &[u8]) -> bool {
        !self.pending.is_empty() || (self.tasks_seen && contains(frame, self.shared.meta_key.as_bytes()))
    }

    /// A frame from rmcp, rewritten if it answers a request noted on the way in,
    /// or is the answer of a task call that started a job.
    ///
    /// The task answer is found by the private key in its `_meta` (only
    /// [`super::server`] writes it, for a call that started a job), not by its
    /// id: no id spelling can make it go out unrewritten. A frame that still
    /// holds the key after this (which nothing should produce) is replaced by an
    /// internal error, so the secret never reaches the client.
    pub fn outbound(&mut self, frame: &[u8]) -> Option<Vec<u8>> {
        let shared = self.shared.clone();
        let key = shared.meta_key.as_str();
        let secret = contains(frame, key.as_bytes());
        if self.pending.is_empty() && !secret {
            return None;
        }
        let Ok(mut msg) = serde_json::from_slice::<Value>(frame) else {
            return secret.then(|| withheld(&Value::Null));
        };
        let rewritten = self.rewrite(&mut msg, key);
        match serde_json::to_vec(&msg) {
            Ok(out) if contains(&out, key.as_bytes()) => Some(withheld(msg.get("id").unwrap_or(&Value::Null))),
            Ok(out) if rewritten => Some(out),
            Ok(_) => None,
            Err(_) => secret.then(|| withheld(msg.get("id").unwrap_or(&Value::Null))),
        }
    }

    /// Rewrites `msg` in place; whether it changed.
    fn rewrite(&mut self, msg: &mut Value, key: &str) -> bool {
        let Some(o) = msg.as_object_mut() else { return false };
        if o.contains_key("method") {
            return false; // a request or notification from the server
        }
        let what = o.get("id").and_then(id_key).and_then(|k| self.pending.remove(&k));
        let Some(result) = o.get_mut("result").and_then(Value::as_object_mut) else { return false };
        // A task call that started a job: `{"task": …}`, whatever its id.
        if result.get("_meta").and_then(|m| m.get(key)).is_some() {
            let task = result.get("structuredContent").cloned().unwrap_or(Value::Null);
            let mut created = Map::new();
            created.insert("task".into(), task);
            *result = created;
            return true;
        }
        match what {
            Some(Pending::Initialize) => {
                if result.get("protocolVersion").and_then(Value::as_str) != Some(REVISION) {
                    self.legacy = false;
                    return false;
                }
                if self.shared.background.is_empty() {
                    return false;
                }
                let Some(caps) = result.entry("capabilities").or_insert_with(|| json!({})).as_object_mut() else {
                    return false;
                };
                caps.insert("tasks".into(), json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}));
                true
            }
            Some(Pending::ToolsList) => {
                let Some(tools) = result.get_mut("tools").and_then(Value::as_array_mut) else { return false };
                let mut any = false;
                for tool in tools.iter_mut().filter_map(Value::as_object_mut) {
                    let name = tool.get("name").and_then(Value::as_str).unwrap_or("");
                    if self.shared.background.iter().any(|b| b == name) {
                        tool.insert("execution".into(), json!({"taskSupport": "optional"}));
                        any = true;
                    }
                }
                any
            }
            None => false,
        }
    }
}

/// What goes out instead of a frame that would have shown the private key.
fn withheld(id: &Value) -> Vec<u8> {
    let id = if id.is_string() || id.is_number() { id.clone() } else { Value::Null };
    let frame = json!({"jsonrpc": "2.0", "id": id, "error": {
        "code": -32603,
        "message": "warden withheld this answer: it would have shown warden's private tasks key",
    }});
    serde_json::to_vec(&frame).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn session() -> Session {
        Session::new(Arc::new(Legacy::new(vec!["bg".into()]).unwrap()), false)
    }

    fn init(s: &mut Session, version: &str) {
        let req = json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":version}});
        assert!(s.inbound(req.to_string().as_bytes()).is_none());
    }

    #[test]
    fn a_2025_session_gets_the_tasks_capability_and_task_support() {
        let mut s = session();
        init(&mut s, REVISION);
        let out = s
            .outbound(
                br#"{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{}}}}"#,
            )
            .unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["result"]["capabilities"]["tasks"]["requests"]["tools"]["call"], json!({}));
        assert!(s.inbound(br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#).is_none());
        let out =
            s.outbound(br#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"bg"},{"name":"read_file"}]}}"#).unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["result"]["tools"][0]["execution"]["taskSupport"], "optional");
        assert!(v["result"]["tools"][1].get("execution").is_none());
        assert!(!s.waiting(b"{}"));
    }

    #[test]
    fn other_revisions_are_left_alone() {
        for version in ["2025-06-18", "2026-07-28"] {
            let mut s = session();
            init(&mut s, version);
            let answer = format!(r#"{{"jsonrpc":"2.0","id":0,"result":{{"protocolVersion":"{version}"}}}}"#);
            assert!(s.outbound(answer.as_bytes()).is_none());
            let get = br#"{"jsonrpc":"2.0","id":2,"method":"tasks/get","params":{"taskId":"j-1"}}"#;
            assert!(s.inbound(get).is_none(), "{version}: tasks/get must reach rmcp as it is");
            let call = br#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"bg","task":{}}}"#;
            assert!(s.inbound(call).is_none());
        }
    }

    #[test]
    fn a_task_call_is_carried_in_private_meta_and_answered_as_a_task() {
        let mut s = session();
        init(&mut s, REVISION);
        let key = s.shared.meta_key().to_string();
        let call = br#"{"jsonrpc":"2.0","id":"c","method":"tools/call","params":{"name":"bg","task":{"ttl":5000}}}"#;
        let v: Value = serde_json::from_slice(&s.inbound(call).unwrap()).unwrap();
        assert!(v["params"].get("task").is_none());
        assert_eq!(v["params"]["_meta"][&key]["ttl"], 5000);
        let answer = json!({"jsonrpc":"2.0","id":"c","result":{
            "content":[], "structuredContent": {"taskId":"j-1","status":"working"}, "_meta": {key.clone(): true}}});
        let v: Value = serde_json::from_slice(&s.outbound(answer.to_string().as_bytes()).unwrap()).unwrap();
        assert_eq!(v["result"], json!({"task": {"taskId":"j-1","status":"working"}}));
    }

    #[test]
    fn a_task_answer_is_found_by_its_key_whatever_the_id_spelling() {
        let mut s = session();
        init(&mut s, REVISION);
        let key = s.shared.meta_key().to_string();
        let call = br#"{"jsonrpc":"2.0","id":1.0,"method":"tools/call","params":{"name":"bg","task":{}}}"#;
        assert!(s.inbound(call).is_some());
        // rmcp answers id 1.0 as 1.
        let answer = json!({"jsonrpc":"2.0","id":1,"result":{
            "content":[], "structuredContent": {"taskId":"j-1"}, "_meta": {key.clone(): true}}});
        let out = s.outbound(answer.to_string().as_bytes()).unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["result"], json!({"task": {"taskId":"j-1"}}));
        assert!(!String::from_utf8_lossy(&out).contains(&key));
    }

    #[test]
    fn a_frame_that_would_show_the_key_is_withheld() {
        let mut s = session();
        init(&mut s, REVISION);
        let answer = json!({"jsonrpc":"2.0","id":0,"result":{"protocolVersion": REVISION}}).to_string();
        assert!(s.outbound(answer.as_bytes()).is_some());
        let key = s.shared.meta_key().to_string();
        let plain = json!({"jsonrpc":"2.0","id":6,"result":{"content":[]}}).to_string();
        // Before any task call no answer can hold the key: none is scanned.
        assert!(!s.expecting() && !s.waiting(plain.as_bytes()));
        let call = br#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"bg","task":{}}}"#;
        assert!(s.inbound(call).is_some());
        assert!(s.expecting());
        for frame in [
            json!({"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text": key.clone()}]}}).to_string(),
            format!(r#"{{"jsonrpc":"2.0","id":7,"result":{{"x":"{key}""#),
        ] {
            assert!(s.waiting(frame.as_bytes()));
            let out = s.outbound(frame.as_bytes()).unwrap();
            assert!(!String::from_utf8_lossy(&out).contains(&key), "{}", String::from_utf8_lossy(&out));
            let v: Value = serde_json::from_slice(&out).unwrap();
            assert_eq!(v["error"]["code"], -32603);
        }
    }

    #[test]
    fn a_refused_task_call_and_forged_keys_pass_unchanged() {
        let mut s = session();
        init(&mut s, REVISION);
        let call = br#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"bg","task":{}}}"#;
        assert!(s.inbound(call).is_some());
        // The tool's own result claims to be a task under a guessed key: not the secret one.
        let answer = br#"{"jsonrpc":"2.0","id":4,"result":{"isError":true,"structuredContent":{"x":1},"_meta":{"warden/task":true}}}"#;
        assert!(s.outbound(answer).is_none());
    }

    #[test]
    fn tasks_methods_are_renamed_to_the_private_prefix() {
        let mut s = session();
        init(&mut s, REVISION);
        for verb in ["get", "result", "list", "cancel"] {
            let req = format!(r#"{{"jsonrpc":"2.0","id":9,"method":"tasks/{verb}","params":{{"taskId":"j-1"}}}}"#);
            let v: Value = serde_json::from_slice(&s.inbound(req.as_bytes()).unwrap()).unwrap();
            assert_eq!(v["method"], format!("{}{verb}", s.shared.method_prefix()));
        }
        assert!(s.inbound(br#"{"jsonrpc":"2.0","id":9,"method":"tasks/update","params":{}}"#).is_none());
        // A notification keeps its name.
        assert!(s.inbound(br#"{"jsonrpc":"2.0","method":"tasks/get","params":{"taskId":"j-1"}}"#).is_none());
    }
}
