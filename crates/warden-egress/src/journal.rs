//! The attempts of one call (or one server's life) to reach the network, for
//! its audit record and its result's `network` summary.
//!
//! Bounded, and arranged so that what matters survives the bound: every
//! destination reached is counted under its own `host:port` (up to
//! [`MAX_DESTINATIONS`] reached and as many refused, each kept apart, so a
//! tool cannot push one it reached out with a flood of refusals), then the
//! first [`MAX_ATTEMPTS`] attempts in full. Hosts are the program's text:
//! control characters are escaped and each is cut at [`MAX_HOST`] bytes.

use std::sync::Mutex;

use serde::Serialize;
use serde_json::{Value, json};

/// The attempts kept in full per call; later ones are only counted.
pub const MAX_ATTEMPTS: usize = 64;
/// The distinct destinations counted per call, reached and refused each.
pub const MAX_DESTINATIONS: usize = 32;
/// The longest host kept, in bytes.
pub const MAX_HOST: usize = 255;
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
    /// warden ended the program's TLS and relayed HTTP (a held credential binds the host).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub intercepted: bool,
    /// The credentials used (or whose placeholder was sent) on this connection.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub credentials: Vec<CredentialUse>,
    /// Real values in responses replaced by their placeholders before the program saw them.
    #[serde(skip_serializing_if = "is_zero")]
    pub redacted: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One credential on one connection: never its value, only its name and counts.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct CredentialUse {
    /// `[credentials.NAME]`.
    pub name: String,
    /// Placeholders replaced by the real value (or headers warden added).
    pub substituted: u64,
    /// Placeholders sent where no bind covers them: they went out as placeholders.
    pub misdirected: u64,
}

/// One destination's connections.
#[derive(Debug, Default, Clone, Copy)]
struct Dest {
    connections: u64,
    bytes_up: u64,
    bytes_down: u64,
}

/// Destinations by (host, port).
type Dests = std::collections::BTreeMap<(String, u16), Dest>;

#[derive(Debug, Default)]
struct Inner {
    kept: Vec<Attempt>,
    reached: Dests,
    refused_at: Dests,
    /// Destinations past [`MAX_DESTINATIONS`].
    uncounted: u64,
    allowed: u64,
    refused: u64,
    bytes_up: u64,
    bytes_down: u64,
}

/// `s` with control characters escaped, cut at `max` bytes.
fn clean(s: &str, max: usize) -> String {
    let mut out = String::new();
    for c in s.chars() {
        let piece: String = if c.is_control() { c.escape_default().collect() } else { c.to_string() };
        if out.len() + piece.len() > max {
            out.push('…');
            break;
        }
        out.push_str(&piece);
    }
    out
}

/// The attempts of one call; shared by the proxy's connections.
#[derive(Debug, Default)]
pub struct Journal {
    inner: Mutex<Inner>,
}

impl Journal {
    /// Adds one finished attempt.
    pub fn record(&self, mut a: Attempt) {
        a.host = clean(&a.host, MAX_HOST);
        a.reason = clean(&a.reason, 2 * MAX_HOST);
        let Ok(mut i) = self.inner.lock() else { return };
        let i = &mut *i;
        if a.allowed {
            i.allowed += 1;
        } else {
            i.refused += 1;
        }
        i.bytes_up += a.bytes_up;
        i.bytes_down += a.bytes_down;
        let map = if a.allowed { &mut i.reached } else { &mut i.refused_at };
        let key = (a.host.clone(), a.port);
        if map.len() < MAX_DESTINATIONS || map.contains_key(&key) {
            let d = map.entry(key).or_default();
            d.connections += 1;
            d.bytes_up += a.bytes_up;
            d.bytes_down += a.bytes_down;
        } else {
            i.uncounted += 1;
        }
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
        let dests = |m: &Dests| -> Vec<Value> {
            m.iter()
                .map(|((host, port), d)| {
                    json!({"host": host, "port": port, "connections": d.connections,
                           "bytes_up": d.bytes_up, "bytes_down": d.bytes_down})
                })
                .collect()
        };
        Some(json!({
            "allowed": i.allowed,
            "refused": i.refused,
            "bytes_up": i.bytes_up,
            "bytes_down": i.bytes_down,
            "reached": dests(&i.reached),
            "refused_destinations": dests(&i.refused_at),
            "uncounted_destinations": i.uncounted,
            "attempts": i.kept,
            "dropped": (i.allowed + i.refused).saturating_sub(MAX_ATTEMPTS as u64),
        }))
    }
}

/// The short `network` field of a result, from what [`Journal::take`] gave:
/// counts, the first destinations reached, and the first refusals with
/// their reasons (hosts quoted: they are the program's text).
pub fn summary(taken: &Value) -> Value {
    let refusals: Vec<Value> = taken["attempts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|a| a["allowed"] == false)
        .take(SUMMARY_REFUSALS)
        .map(|a| {
            json!(format!(
                "{:?}:{}: {}",
                a["host"].as_str().unwrap_or(""),
                a["port"],
                a["reason"].as_str().unwrap_or("")
            ))
        })
        .collect();
    let reached: Vec<Value> = taken["reached"]
        .as_array()
        .into_iter()
        .flatten()
        .take(SUMMARY_REFUSALS)
        .map(|d| json!(format!("{:?}:{}", d["host"].as_str().unwrap_or(""), d["port"])))
        .collect();
    json!({
        "allowed": taken["allowed"],
        "refused": taken["refused"],
        "reached": reached,
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
        assert!(s["refusals"][0].as_str().unwrap_or("").contains("\"registry.example\":443: not in net.connect"));
        assert_eq!(s["reached"], json!(["\"registry.example\":443"]));
        assert!(j.take().is_none(), "taken once");
    }

    #[test]
    fn a_flood_of_refusals_cannot_hide_a_destination_reached_later() {
        let j = Journal::default();
        for n in 0..1000 {
            j.record(Attempt { host: format!("decoy{n}.example"), ..attempt(false) });
        }
        j.record(Attempt { host: "exfil.example\u{1b}]0;x\u{7}".into(), ..attempt(true) });
        let t = j.take().unwrap_or_default();
        assert_eq!(t["reached"][0]["host"], "exfil.example\\u{1b}]0;x\\u{7}");
        assert_eq!(t["refused_destinations"].as_array().map(Vec::len), Some(MAX_DESTINATIONS));
        assert_eq!(t["uncounted_destinations"], 1000 - MAX_DESTINATIONS as u64);
        let j = Journal::default();
        j.record(Attempt { host: "h".repeat(60_000), ..attempt(false) });
        let t = j.take().unwrap_or_default();
        assert!(t["attempts"][0]["host"].as_str().unwrap_or("").len() <= MAX_HOST + 3);
    }
}
