//! `[audit]`: what becomes of the audit log beyond the local file. Today its
//! one table, `[audit.otlp]` ([`crate::otlp`]): the OpenTelemetry export.

use std::path::Path;

use serde::Deserialize;
use toml::Spanned;

use crate::compile::Checker;
use crate::otlp::{Otlp, RawOtlp};

/// `[audit]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAudit {
    pub otlp: Option<Spanned<RawOtlp>>,
}

/// `[audit]`, checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditSettings {
    /// `[audit.otlp]`: export every record to an OpenTelemetry collector.
    pub otlp: Option<Otlp>,
}

/// Checks `[audit]`; `dir` is the policy's directory.
pub(crate) fn compile_audit(c: &mut Checker<'_>, raw: &RawAudit, dir: &Path) -> AuditSettings {
    AuditSettings { otlp: raw.otlp.as_ref().and_then(|o| crate::otlp::compile_otlp(c, o, dir)) }
}
