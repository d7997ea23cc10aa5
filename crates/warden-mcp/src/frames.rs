//! The stdio frame gate: every line from the client is checked before rmcp sees
//! it, so that a malformed frame gets an answer instead of silence.
//!
//! rmcp drops a line that is not JSON, is not UTF-8, or is longer than its cap
//! without replying, which leaves a client waiting forever for that request.
//! Here such a line is answered with a JSON-RPC error (`-32700` parse error,
//! `-32600` for an oversized frame) carrying the request's id when it can be
//! recovered, and the server goes on. Lines longer than [`MAX_FRAME_BYTES`] are
//! never held in memory whole. Well-formed lines pass through untouched; rmcp's
//! own answers and the gate's are written to stdout whole, one line at a time.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, DuplexStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use super::legacy_tasks::{Legacy, Session};

fn lock(s: &Mutex<Session>) -> MutexGuard<'_, Session> {
    s.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The largest frame accepted from the client.
pub const MAX_FRAME_BYTES: usize = 16 << 20;
/// Buffer between the gate and rmcp, each way.
const PIPE_BYTES: usize = 1 << 20;

/// What one line from the client is.
#[derive(Debug, PartialEq)]
enum Line {
    Frame,
    Blank,
    /// Answer with this error frame instead.
    Refused(Value),
}

/// The id of a request that could not be parsed strictly, if one can be read.
fn recover_id(text: &str) -> Value {
    if let Ok(Value::Object(o)) = serde_json::from_str::<Value>(text)
        && let Some(id) = o.get("id").filter(|v| v.is_string() || v.is_number())
    {
        return id.clone();
    }
    Value::Null
}

fn error(id: Value, code: i64, message: String) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

/// Whether `line` passes the gate; otherwise the error frame it is answered with (for the fuzzer).
#[doc(hidden)]
pub fn check_line(line: &[u8]) -> Result<(), Value> {
    match classify(line) {
        Line::Frame | Line::Blank => Ok(()),
        Line::Refused(answer) => Err(answer),
    }
}

fn classify(line: &[u8]) -> Line {
    if line.iter().all(u8::is_ascii_whitespace) {
        return Line::Blank;
    }
    match std::str::from_utf8(line) {
        Err(e) => {
            let lossy = String::from_utf8_lossy(line);
            Line::Refused(error(
                recover_id(&lossy),
                -32700,
                format!("parse error: the frame is not valid UTF-8 (at byte {})", e.valid_up_to()),
            ))
        }
        // Parsed as rmcp will parse it (a `Value`: nesting deeper than 128, a
        // number out of range or a lone surrogate escape are errors there too,
        // which rmcp would drop without an answer).
        Ok(text) => match serde_json::from_str::<Value>(text) {
            Ok(_) => Line::Frame,
            Err(e) => Line::Refused(error(
                recover_id_prefix(text),
                -32700,
                format!("parse error: the frame is not JSON: {e}"),
            )),
        },
    }
}

/// Puts the gate between `input`/`output` and rmcp: returns the reader and
/// writer to hand rmcp, and the task that writes to `output` (it ends once rmcp
/// and the gate are done with it), and a switch that turns on when `input`
/// ends. With `legacy`, the frames of a 2025-11-25 tasks session are
/// rewritten on the way (see [`super::legacy_tasks`]).
pub fn gate<R, W>(
    input: R,
    output: W,
    legacy: Option<Arc<Legacy>>,
) -> (DuplexStream, DuplexStream, JoinHandle<()>, watch::Receiver<bool>)
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (rmcp_in, mut feed) = tokio::io::duplex(PIPE_BYTES);
    let (rmcp_out, from_rmcp) = tokio::io::duplex(PIPE_BYTES);
    let (refusals, mut refused) = mpsc::channel::<Value>(64);
    let session = legacy.map(|l| Arc::new(Mutex::new(Session::new(l, false))));
    let out_session = session.clone();
    let (closed_tx, closed) = watch::channel(false);

    tokio::spawn(async move {
        let mut input = BufReader::with_capacity(64 << 10, input);
        let mut line = Vec::new();
        loop {
            line.clear();
            let (complete, oversized) = match read_line_capped(&mut input, &mut line).await {
                Ok(r) => r,
                Err(_) => break,
            };
            if oversized {
                let head = String::from_utf8_lossy(&line[..line.len().min(4096)]).into_owned();
                let id = recover_id_prefix(&head);
                let message = format!("the frame is larger than {MAX_FRAME_BYTES} bytes and was dropped");
                if refusals.send(error(id, -32600, message)).await.is_err() {
                    break;
                }
            } else {
                match classify(&line) {
                    Line::Blank => {}
                    Line::Frame => {
                        let rewritten = session.as_ref().and_then(|s| lock(s).inbound(&line));
                        let frame = rewritten.as_deref().unwrap_or(&line);
                        if feed.write_all(frame).await.is_err() || feed.write_all(b"\n").await.is_err() {
                            break;
                        }
                    }
                    Line::Refused(frame) => {
                        if refusals.send(frame).await.is_err() {
                            break;
                        }
                    }
                }
            }
            if !complete {
                break; // EOF
            }
        }
        let _ = feed.shutdown().await;
        let _ = closed_tx.send(true);
    });

    let writer = tokio::spawn(async move {
        let mut output = output;
        let mut from_rmcp = BufReader::new(from_rmcp);
        let mut line = Vec::new();
        let (mut rmcp_open, mut gate_open) = (true, true);
        while rmcp_open || gate_open {
            tokio::select! {
                r = from_rmcp.read_until(b'\n', &mut line), if rmcp_open => match r {
                    Ok(0) | Err(_) => rmcp_open = false,
                    Ok(_) => {
                        let rewritten = out_session.as_ref().and_then(|s| {
                            let frame = line.strip_suffix(b"\n").unwrap_or(&line);
                            let mut s = lock(s);
                            if !s.waiting(frame) {
                                return None;
                            }
                            s.outbound(frame).map(|mut f| {
                                f.push(b'\n');
                                f
                            })
                        });
                        let frame = rewritten.as_deref().unwrap_or(&line);
                        if output.write_all(frame).await.is_err() || output.flush().await.is_err() {
                            return;
                        }
                        line.clear();
                    }
                },
                frame = refused.recv(), if gate_open => match frame {
                    None => gate_open = false,
                    Some(frame) => {
                        let mut bytes = frame.to_string().into_bytes();
                        bytes.push(b'\n');
                        if output.write_all(&bytes).await.is_err() || output.flush().await.is_err() {
                            return;
                        }
                    }
                },
            }
        }
    });
    (rmcp_in, rmcp_out, writer, closed)
}

/// Reads one line (without its newline) into `line`, keeping at most
/// [`MAX_FRAME_BYTES`] + 1 bytes and discarding the rest. Returns whether a
/// newline ended it (false at EOF) and whether it was too long.
async fn read_line_capped<R: AsyncRead + Unpin>(
    input: &mut BufReader<R>,
    line: &mut Vec<u8>,
) -> std::io::Result<(bool, bool)> {
    let mut oversized = false;
    loop {
        let buf = input.fill_buf().await?;
        if buf.is_empty() {
            return Ok((false, oversized));
        }
        let (chunk, found) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (&buf[..i], Some(i + 1)),
            None => (buf, None),
        };
        if !oversized {
            let room = MAX_FRAME_BYTES + 1 - line.len();
            line.extend_from_slice(&chunk[..chunk.len().min(room)]);
            oversized = line.len() > MAX_FRAME_BYTES;
        }
        let used = found.unwrap_or(buf.len());
        input.consume(used);
        if found.is_some() {
            return Ok((true, oversized));
        }
    }
}

/// The id near the start of an oversized frame, when it comes before the params.
fn recover_id_prefix(head: &str) -> Value {
    let Some(at) = head.find("\"id\"") else { return Value::Null };
    let rest = head[at + 4..].trim_start();
    let Some(rest) = rest.strip_prefix(':') else { return Value::Null };
    let rest = rest.trim_start();
    let end = rest.find([',', '}']).unwrap_or(rest.len());
    match serde_json::from_str::<Value>(rest[..end].trim()) {
        Ok(v) if v.is_number() || v.is_string() => v,
        _ => Value::Null,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_classified() {
        assert_eq!(classify(b"  "), Line::Blank);
        assert_eq!(classify(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#), Line::Frame);
        let Line::Refused(e) = classify(b"not json") else { panic!("accepted") };
        assert_eq!(e["error"]["code"], -32700);
        assert_eq!(e["id"], Value::Null);
        let Line::Refused(e) = classify(b"{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"x\",\"params\":{\"a\":\"\xff\"}}")
        else {
            panic!("accepted")
        };
        assert_eq!(e["id"], 7);
        assert!(e["error"]["message"].as_str().is_some_and(|m| m.contains("UTF-8")));
    }

    #[test]
    fn frames_rmcp_would_drop_silently_are_answered_with_their_id() {
        let deep =
            format!(r#"{{"jsonrpc":"2.0","id":5,"method":"ping","params":{}{}}}"#, "[".repeat(200), "]".repeat(200));
        for frame in [
            r#"{"jsonrpc":"2.0","id":3,"method":"ping","params":{"n":1e999}}"#.to_string(),
            r#"{"jsonrpc":"2.0","id":4,"method":"ping","params":{"s":"\ud800"}}"#.to_string(),
            deep,
        ] {
            let Line::Refused(e) = classify(frame.as_bytes()) else { panic!("passed: {frame:.80}") };
            assert_eq!(e["error"]["code"], -32700, "{frame:.80}");
            assert!(e["id"].is_number(), "{e}");
        }
    }

    #[test]
    fn an_oversized_frame_keeps_its_id_when_it_comes_first() {
        assert_eq!(recover_id_prefix(r#"{"jsonrpc":"2.0","id": 42,"method":"tools/call","params":{"#), json!(42));
        assert_eq!(recover_id_prefix(r#"{"id":"abc","x":"#), json!("abc"));
        assert_eq!(recover_id_prefix(r#"{"params":{"x":"#), Value::Null);
    }

    #[tokio::test]
    async fn long_lines_are_cut_without_being_held() {
        let data = [vec![b'a'; MAX_FRAME_BYTES + 10], b"\nok\n".to_vec()].concat();
        let mut r = BufReader::new(&data[..]);
        let mut line = Vec::new();
        assert_eq!(read_line_capped(&mut r, &mut line).await.ok(), Some((true, true)));
        assert_eq!(line.len(), MAX_FRAME_BYTES + 1);
        line.clear();
        assert_eq!(read_line_capped(&mut r, &mut line).await.ok(), Some((true, false)));
        assert_eq!(line, b"ok");
        line.clear();
        assert_eq!(read_line_capped(&mut r, &mut line).await.ok(), Some((false, false)));
    }
}
