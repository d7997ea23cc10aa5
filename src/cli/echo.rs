//! `warden call --stream` and `--exit-status`: a CI step sees a long
//! run as it happens, and fails when the program failed.

use std::sync::{Arc, Mutex, PoisonError};

use serde_json::Value;

use super::progress::Console;
use crate::executor::{CallResponse, Status};
use crate::runtime::{OutputTap, Stream};

/// Bytes of an incomplete UTF-8 sequence kept back from one chunk for the next.
#[derive(Default)]
struct Pending {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

/// A tap that copies a program's output to warden's stderr as it arrives,
/// cleaned as results are (no terminal escapes, no invisible characters): the
/// program's bytes never reach the terminal raw.
pub(super) fn tap(console: Arc<Console>) -> OutputTap {
    let pending = Arc::new(Mutex::new(Pending::default()));
    Arc::new(move |stream: Stream, data: &[u8]| {
        let mut p = pending.lock().unwrap_or_else(PoisonError::into_inner);
        let held = match stream {
            Stream::Stdout => &mut p.stdout,
            Stream::Stderr => &mut p.stderr,
        };
        held.extend_from_slice(data);
        let text = take_complete(held);
        if !text.is_empty() {
            console.output(&crate::shape::sanitize_str(&text));
        }
    })
}

/// The text of `held` up to its last complete character (invalid bytes become
/// U+FFFD); an incomplete sequence at its end stays in `held`.
fn take_complete(held: &mut Vec<u8>) -> String {
    let end = match std::str::from_utf8(held) {
        Ok(_) => held.len(),
        Err(e) if e.error_len().is_none() => e.valid_up_to(),
        Err(_) => held.len(),
    };
    let rest = held.split_off(end);
    let text = String::from_utf8_lossy(held).into_owned();
    *held = rest;
    text
}

/// The program's own exit status, when the call ran one to its end: its exit
/// code, or 128+N when signal N ended it. `None` for refusals, limits and
/// results that are not a program's (warden's own codes apply).
pub(super) fn program_status(response: &CallResponse) -> Option<u8> {
    if response.status != Status::Success {
        return None;
    }
    let result = response.result.as_ref()?;
    if let Some(code) = result.get("exit_code").and_then(Value::as_i64) {
        return Some((code & 0xff) as u8);
    }
    let signal = result.get("signal").and_then(Value::as_str)?;
    let number =
        signal.parse::<nix::sys::signal::Signal>().map(|s| s as i32).or_else(|_| signal.parse::<i32>()).ok()?;
    Some((128 + number).clamp(0, 255) as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_incomplete_character_waits_for_the_next_chunk() {
        let mut held = "aé".as_bytes()[..2].to_vec();
        assert_eq!(take_complete(&mut held), "a");
        held.extend_from_slice(&"é".as_bytes()[1..]);
        assert_eq!(take_complete(&mut held), "é");
        assert!(held.is_empty());
    }

    fn success(result: Value) -> CallResponse {
        CallResponse {
            status: Status::Success,
            tool: "t".into(),
            call_id: "c".into(),
            result: Some(result),
            truncated: false,
            error: None,
            reason: None,
            duration_ms: 0.0,
            cache: None,
        }
    }

    #[test]
    fn the_status_is_the_programs_own() {
        assert_eq!(program_status(&success(serde_json::json!({"exit_code": 1}))), Some(1));
        assert_eq!(program_status(&success(serde_json::json!({"exit_code": 0}))), Some(0));
        let killed = serde_json::json!({"exit_code": null, "signal": "SIGKILL"});
        assert_eq!(program_status(&success(killed)), Some(137));
        assert_eq!(program_status(&success(serde_json::json!({"content": "x"}))), None);
    }
}
