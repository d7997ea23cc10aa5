//! The OpenTelemetry export (`[audit.otlp]`) of the commands that write
//! records (`call`, `run`, `exec`, `serve`): started once the policy is loaded
//! and the log open, finished (a bounded wait for what is left to send) when
//! the command ends.

use std::path::{Path, PathBuf};

use warden_policy::otlp::Otlp;

use super::args::Command;
use super::session::Session;
use super::{Failure, fail};
use crate::error::ErrorCode;

/// The export's files beside the log (the cursor, the lock): warden's own, protected like the log.
pub(super) fn own_files(log: &Path) -> Vec<(String, PathBuf)> {
    vec![
        ("OTLP export cursor".to_string(), warden_otlp::cursor_path(log)),
        ("OTLP export lock".to_string(), warden_otlp::lock_path(log)),
    ]
}

/// Starts the export of `log` if the policy asks for one and the command writes records.
pub(super) fn start(s: &Session, otlp: Option<&Otlp>, log: &Path) -> Result<(), Failure> {
    let Some(otlp) = otlp else { return Ok(()) };
    if !matches!(s.cli.command, Command::Call { .. } | Command::Run { .. } | Command::Exec | Command::Serve { .. }) {
        return Ok(());
    }
    let exporter = warden_otlp::start(otlp, log).map_err(|m| fail(ErrorCode::InvalidArgs, m))?;
    *s.export.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(exporter);
    Ok(())
}

/// Finishes the export, if one runs: waits at most the policy's `flush` time.
pub(super) fn finish(s: &Session) {
    let exporter = s.export.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
    if let Some(e) = exporter {
        e.finish();
    }
}
