//! Durations (`"30s"`, `"1m30s"`, `"250ms"`) and sizes (`"64KiB"`, `"1GiB"`, or a
//! plain number of bytes) as the policy writes them.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Deserializer, de};

/// The longest duration a policy may set anywhere.
pub const MAX_DURATION: Duration = Duration::from_secs(24 * 3600);

/// A policy duration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PolicyDuration(pub Duration);

/// A policy size in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PolicySize(pub u64);

/// Parses `"30s"`, `"1m30s"`, `"250ms"`, `"2h"`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s.trim())
        .map_err(|e| format!("bad duration {s:?}: {e} (write for example \"30s\", \"250ms\" or \"2m\")"))?;
    if d.is_zero() {
        return Err(format!("bad duration {s:?}: must be more than zero"));
    }
    if d > MAX_DURATION {
        return Err(format!("bad duration {s:?}: at most 24h"));
    }
    Ok(d)
}

/// Parses `"64KiB"`, `"256MiB"`, `"1GiB"`, `"10MB"`, `"512"` (bytes).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let hint = "(write for example \"64KiB\", \"256MiB\" or \"1GiB\")";
    let n: u64 = num.parse().map_err(|_| format!("bad size {s:?}: expected a number then a unit {hint}"))?;
    let mult: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "TiB" => 1 << 40,
        "KB" | "kB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        other => return Err(format!("bad size {s:?}: unknown unit {other:?} {hint}")),
    };
    let v = n.checked_mul(mult).ok_or_else(|| format!("bad size {s:?}: too large"))?;
    if v == 0 {
        return Err(format!("bad size {s:?}: must be more than zero"));
    }
    Ok(v)
}

/// Formats bytes the way a policy would write them.
pub fn format_size(v: u64) -> String {
    for (unit, m) in [("GiB", 1u64 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
        if v >= m && v.is_multiple_of(m) {
            return format!("{}{unit}", v / m);
        }
    }
    format!("{v}B")
}

/// Formats a duration the way a policy would write it.
pub fn format_duration(d: Duration) -> String {
    humantime::format_duration(d).to_string().replace(' ', "")
}

impl<'de> Deserialize<'de> for PolicyDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        parse_duration(&s).map(PolicyDuration).map_err(de::Error::custom)
    }
}

impl<'de> Deserialize<'de> for PolicySize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl de::Visitor<'_> for V {
            type Value = PolicySize;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a size such as \"64KiB\" or a number of bytes")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<PolicySize, E> {
                parse_size(s).map(PolicySize).map_err(E::custom)
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<PolicySize, E> {
                if n <= 0 {
                    return Err(E::custom(format!("bad size {n}: must be more than zero")));
                }
                Ok(PolicySize(n as u64))
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_and_decimal_units() {
        assert_eq!(parse_size("64KiB"), Ok(65536));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("10MB"), Ok(10_000_000));
        assert_eq!(parse_size("512"), Ok(512));
        assert!(parse_size("12 parsecs").is_err());
        assert!(parse_size("0KiB").is_err());
        assert!(parse_size("99999999999999TiB").is_err());
    }

    #[test]
    fn durations_parse_and_are_bounded() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("3d").is_err());
    }

    #[test]
    fn sizes_format_back() {
        assert_eq!(format_size(65536), "64KiB");
        assert_eq!(format_size(1000), "1000B");
    }
}
