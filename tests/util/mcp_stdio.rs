//! `warden serve` over stdio, spoken to line by line with hand-written
//! JSON-RPC: requests may overlap (replies are matched by id), every wait is
//! bounded. Shared by `tests/cli.rs` and the escape battery.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// The longest one request may take.
const REPLY: Duration = Duration::from_secs(60);

/// A running `warden serve`, initialized.
pub(crate) struct McpStdio {
    child: Child,
    stdin: Option<ChildStdin>,
    replies: mpsc::Receiver<Value>,
    /// Replies that came while another was awaited, by id.
    early: HashMap<u64, Value>,
    next: u64,
}

impl McpStdio {
    /// Spawns `serve` (the command as configured, stdin and stdout piped here)
    /// and initializes it; the initialize reply when it was not a result.
    pub(crate) fn start(mut c: Command) -> Result<McpStdio, Value> {
        c.stdin(Stdio::piped()).stdout(Stdio::piped());
        let mut child = c.spawn().expect("cannot start warden serve");
        let stdin = child.stdin.take();
        let out = child.stdout.take().expect("stdout is piped");
        let (tx, replies) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if let Ok(v) = serde_json::from_str::<Value>(&line)
                    && tx.send(v).is_err()
                {
                    break;
                }
            }
        });
        let mut s = McpStdio { child, stdin, replies, early: HashMap::new(), next: 0 };
        let init = s.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}),
        );
        let answer = s.wait(init);
        if answer.get("result").is_none() {
            return Err(answer);
        }
        s.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        Ok(s)
    }

    /// Writes one message (a server that went away is seen by [`McpStdio::wait`]).
    pub(crate) fn send(&mut self, v: Value) {
        if let Some(stdin) = self.stdin.as_mut() {
            let _ = writeln!(stdin, "{v}");
            let _ = stdin.flush();
        }
    }

    /// Sends a request; its reply is read with [`McpStdio::wait`].
    pub(crate) fn request(&mut self, method: &str, params: Value) -> u64 {
        self.next += 1;
        let id = self.next;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        id
    }

    /// Starts `tools/call`.
    pub(crate) fn call(&mut self, tool: &str, args: Value) -> u64 {
        self.request("tools/call", json!({"name": tool, "arguments": args}))
    }

    /// `tools/call` and its result document (warden's `structuredContent`).
    pub(crate) fn call_doc(&mut self, tool: &str, args: Value) -> Value {
        let id = self.call(tool, args);
        self.doc(id)
    }

    /// The result document of call `id`: `structuredContent`, or the whole
    /// reply when there is none (an error, or no reply in time).
    pub(crate) fn doc(&mut self, id: u64) -> Value {
        let reply = self.wait(id);
        reply.pointer("/result/structuredContent").cloned().unwrap_or(reply)
    }

    /// The reply to `id` (a JSON-RPC error object when none came in time).
    pub(crate) fn wait(&mut self, id: u64) -> Value {
        let deadline = Instant::now() + REPLY;
        loop {
            if let Some(v) = self.early.remove(&id) {
                return v;
            }
            match self.replies.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(v) => match v.get("id").and_then(Value::as_u64) {
                    Some(got) if got == id => return v,
                    Some(got) => {
                        self.early.insert(got, v);
                    }
                    // A notification or a request of the server's: not awaited here.
                    None => {}
                },
                Err(_) => return json!({"error": {"message": format!("no reply to request {id} in {REPLY:?}")}}),
            }
        }
    }

    /// Whether a reply is waiting (kept for [`McpStdio::wait`]).
    pub(crate) fn peek(&mut self) -> bool {
        while let Ok(v) = self.replies.try_recv() {
            if let Some(id) = v.get("id").and_then(Value::as_u64) {
                self.early.insert(id, v);
            }
        }
        !self.early.is_empty()
    }

    /// SIGKILL: nothing of `serve`'s own clean-up runs.
    pub(crate) fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Closes stdin, as a client that is done does, and waits (bounded) for the exit.
    pub(crate) fn close(mut self) -> Result<(), String> {
        self.stdin = None;
        let deadline = Instant::now() + REPLY;
        loop {
            match self.child.try_wait() {
                Ok(Some(st)) if st.success() => return Ok(()),
                Ok(Some(st)) => return Err(format!("serve ended with {st}")),
                _ if Instant::now() > deadline => return Err("serve did not end after its stdin closed".into()),
                _ => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    }
}

impl Drop for McpStdio {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
