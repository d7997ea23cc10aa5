//! The attempts of one call (or one server's life) to reach the network, for
//! its audit record and its result's `network` summary. Bounded: past
//! [`MAX_ATTEMPTS`] only the counts grow.

use std::sync::Mutex;

use serde::Serialize;
use serde_json::{Value, json};

/// The attempts kept in full per call; later ones are only counted.
pub const MAX_ATTEMPTS: usize = 256;
/// The refusals the result's summary names.
const SUMMARY_REFUSALS: usize = 5;

/// One connection the program asked the proxy for.
#[derive(Debug, Clone, Serialize)]
pub struct Attempt {
    /// `connect` (HTTP CONNECT), `http` (plain HTTP forwarding) or `socks5`
    /// (the proxy); `wasi-socket`, `wasi-lookup` or `wasi-http` (components).
    pub via: &'static str,
    /// The host as the program named it (a name or an address).
    pub host: String,
    /// The port.
    pub port: u16,
    /// The address warden connected to (or refused, once resolved).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// Whether the connection was made.
    pub allowed: bool,
    /// Why not (or the grant that allowed it): names the key to change.
    pub reason: String,
    /// Bytes from the program to the destination.
    pub bytes_up: u64,
    /// Bytes from the destination to the program.
    pub bytes_down: u64,
    /// From the request to the connection's end.
    pub duration_ms: f64,
}

#[derive(Debug, Default)]
struct Inner {
    kept: Vec<Attempt>,
    allowed: u64,
    refused: u64,
    bytes_up: u64,
    bytes_down: u64,
}

/// The attempts of one call; shared by the proxy's connections.
#[derive(Debug, Default)]
pub struct Journal {
    inner: Mutex<Inner>,
}

impl Journal {
    /// Adds one finished attempt.
    pub fn record(&self, a: Attempt) {
        let Ok(mut i) = self.inner.lock() else { return };
        if a.allowed {
            i.allowed += 1;
        } else {
            i.refused += 1;
        }
        i.bytes_up += a.bytes_up;
        i.bytes_down += a.bytes_down;
        if i.kept.len() < MAX_ATTEMPTS {
            i.kept.push(a);
        }
    }

    /// Takes what was recorded so far (a server's journal is drained after each call).
    pub fn take(&self) -> Option<Value> {
        let Ok(mut i) = self.inner.lock() else { return None };
        let i = std::mem::take(&mut *i);
        if i.allowed + i.refused == 0 {
            return None;
        }
        Some(json!({
            "allowed": i.allowed,
            "refused": i.refused,
            "bytes_up": i.bytes_up,
            "bytes_down": i.bytes_down,
            "attempts": i.kept,
            "dropped": (i.allowed + i.refused).saturating_sub(MAX_ATTEMPTS as u64),
        }))
    }
}

/// The short `network` field of a result, from what [`Journal::take`] gave:
/// counts and the first refusals with their reasons.
pub fn summary(taken: &Value) -> Value {
    let refusals: Vec<Value> = taken["attempts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|a| a["allowed"] == false)
        .take(SUMMARY_REFUSALS)
        .map(|a| {
            json!(format!("{}:{}: {}", a["host"].as_str().unwrap_or(""), a["port"], a["reason"].as_str().unwrap_or("")))
        })
        .collect();
    json!({
        "allowed": taken["allowed"],
        "refused": taken["refused"],
        "refusals": refusals,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(allowed: bool) -> Attempt {
        Attempt {
            via: "connect",
            host: "registry.example".into(),
            port: 443,
            address: None,
            allowed,
            reason: if allowed { "granted".into() } else { "not in net.connect".into() },
            bytes_up: 10,
            bytes_down: 20,
            duration_ms: 1.0,
        }
    }

    #[test]
    fn counts_grow_past_the_kept_attempts() {
        let j = Journal::default();
        assert!(j.take().is_none());
        for n in 0..MAX_ATTEMPTS + 3 {
            j.record(attempt(n % 2 == 0));
        }
        let t = j.take().unwrap_or_default();
        assert_eq!(t["attempts"].as_array().map(Vec::len), Some(MAX_ATTEMPTS));
        assert_eq!(t["dropped"], 3);
        assert_eq!(t["bytes_down"], 20 * (MAX_ATTEMPTS as u64 + 3));
        let s = summary(&t);
        assert_eq!(s["refusals"].as_array().map(Vec::len), Some(SUMMARY_REFUSALS));
        assert!(s["refusals"][0].as_str().unwrap_or("").contains("registry.example:443: not in net.connect"));
        assert!(j.take().is_none(), "taken once");
    }
}
