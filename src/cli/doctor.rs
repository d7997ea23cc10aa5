//! `warden doctor [--json]`: the sandbox helper tries each layer, then the
//! verdict for each tool of the policy in both modes, and the fixes.

use crate::checkup::doctor::examine;
use crate::error::ErrorCode;
use crate::runtime::wasm::ComponentRuntime;

use super::session::{Session, cache_dir, catalog_of};
use super::{Failure, fail, print_json};

pub(super) fn doctor(s: &Session, json: bool) -> Result<u8, Failure> {
    let ctx = s.context()?;
    let policy = s.load_policy(&ctx)?;
    let helper = crate::runtime::process::default_helper()
        .ok_or_else(|| fail(ErrorCode::Internal, "cannot find the sandbox helper (warden's own executable)"))?;
    let probe = warden_sandbox::probe::run_helper(&helper, &[]).map_err(|e| fail(ErrorCode::SandboxUnavailable, e))?;
    let runtime = ComponentRuntime::new(cache_dir()).map_err(|e| fail(ErrorCode::Internal, e.message))?;
    let (catalog, _servers) = catalog_of(&policy, &runtime);
    let report = examine(&policy, &catalog, probe);
    if json {
        print_json(&serde_json::to_value(&report).unwrap_or_default());
    } else {
        print!("{}", report.to_text());
    }
    Ok(report.exit_code())
}
