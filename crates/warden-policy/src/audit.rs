//! `[audit]`: how the audit log is kept (rotation, retention, what of large
//! arguments it stores) and `[audit.otlp]` ([`crate::otlp`]), its
//! OpenTelemetry export. See docs/policy.md, "[audit]", and docs/otlp.md.

use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use crate::compile::Checker;
use crate::otlp::{Otlp, RawOtlp};
use crate::units::PolicySize;

/// The smallest `rotate`: a file holds at least a few records.
pub const MIN_ROTATE: u64 = 1 << 10;
/// The longest `keep`: about a hundred years.
pub const MAX_KEEP: Duration = Duration::from_secs(36_500 * 86_400);

/// `[audit]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAudit {
    /// A size: rotate the log's file once it has reached it.
    pub rotate: Option<Spanned<PolicySize>>,
    /// A duration (days allowed, unlike elsewhere): remove rotated files older than it.
    pub keep: Option<Spanned<String>>,
    /// Keep long string arguments whole (up to the record's bound).
    pub record_content: Option<bool>,
    /// `[audit.otlp]`: the OpenTelemetry export.
    pub otlp: Option<Spanned<RawOtlp>>,
}

/// `[audit]` as compiled.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditSettings {
    /// `rotate`, in bytes (`None`: one file that grows forever).
    pub rotate: Option<u64>,
    /// `keep` (`None`: rotated files are never removed).
    pub keep: Option<Duration>,
    /// `record_content` (default `false`: long strings as `{"sha256", "bytes"}`).
    pub record_content: bool,
    /// `[audit.otlp]`: export every record to an OpenTelemetry collector.
    pub otlp: Option<Otlp>,
}

/// Checks `[audit]`; `dir` is the policy's directory.
pub(crate) fn compile(c: &mut Checker<'_>, raw: &RawAudit, dir: &Path) -> AuditSettings {
    let rotate = raw.rotate.as_ref().and_then(|r| {
        let v = r.get_ref().0;
        if v < MIN_ROTATE {
            c.problem(r.span(), format!("[audit] rotate must be at least 1KiB, not {v} bytes"));
            return None;
        }
        Some(v)
    });
    let keep = raw.keep.as_ref().and_then(|k| match parse_keep(k.get_ref()) {
        Ok(d) => Some(d),
        Err(e) => {
            c.problem(k.span(), format!("[audit] keep: {e}"));
            None
        }
    });
    if let (Some(k), None) = (&raw.keep, &raw.rotate) {
        c.problem(
            k.span(),
            "[audit] keep removes rotated files, and without `rotate` there are none: set `rotate` too",
        );
    }
    let otlp = raw.otlp.as_ref().and_then(|o| crate::otlp::compile_otlp(c, o, dir));
    AuditSettings { rotate, keep, record_content: raw.record_content.unwrap_or(false), otlp }
}

/// Parses `keep`: `"30d"`, `"12h"`, `"2w"`; more than zero, at most 36500 days.
fn parse_keep(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s.trim())
        .map_err(|e| format!("bad duration {s:?}: {e} (write for example \"30d\" or \"12h\")"))?;
    if d.is_zero() {
        return Err(format!("bad duration {s:?}: must be more than zero"));
    }
    if d > MAX_KEEP {
        return Err(format!("bad duration {s:?}: at most 36500d"));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::compile::{Context, compile};

    fn load(extra: &str) -> Result<AuditSettings, String> {
        let ctx = Context { workspace: "/ws".into(), home: "/home/u".into(), cache: "/home/u/.cache".into() };
        compile(&format!("version = 1\n{extra}"), "p.toml", Path::new("/etc/warden"), &ctx)
            .map(|p| p.audit)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn audit_settings_parse_with_their_units_and_defaults() {
        assert_eq!(load(""), Ok(AuditSettings::default()));
        let s = load("[audit]\nrotate = \"100MiB\"\nkeep = \"30d\"\nrecord_content = true\n");
        assert_eq!(
            s,
            Ok(AuditSettings {
                rotate: Some(100 << 20),
                keep: Some(Duration::from_secs(30 * 86_400)),
                record_content: true,
                otlp: None,
            })
        );
        assert_eq!(load("[audit]\nrotate = 4096\n").map(|s| s.rotate), Ok(Some(4096)));
    }

    #[test]
    fn bad_audit_settings_are_refused_at_their_line() {
        for (text, says) in [
            ("[audit]\nrotat = \"1MiB\"\n", "unknown field `rotat`"),
            ("[audit]\nrotate = \"1.5MiB\"\n", "bad size"),
            ("[audit]\nrotate = 100\n", "at least 1KiB"),
            ("[audit]\nrotate = \"1MiB\"\nkeep = \"0d\"\n", "more than zero"),
            ("[audit]\nrotate = \"1MiB\"\nkeep = \"soon\"\n", "bad duration"),
            ("[audit]\nrotate = \"1MiB\"\nkeep = \"40000d\"\n", "at most 36500d"),
            ("[audit]\nkeep = \"30d\"\n", "set `rotate` too"),
            ("[audit]\nrecord_content = \"yes\"\n", "invalid type"),
        ] {
            let e = load(text).err().unwrap_or_else(|| panic!("{text:?} was accepted"));
            assert!(e.contains(says) && e.contains("p.toml:"), "{text:?}: {e}");
        }
    }
}
