//! Packaging: `warden --version` with the commit, `warden completions SHELL`,
//! `warden man [--dir DIR]` and `warden policy show-default` (docs/install.md).

use std::io::Write;
use std::path::Path;

use clap::CommandFactory;

use super::args::Cli;
use super::{Failure, fail};
use crate::error::ErrorCode;

/// `warden --version`: the package version and the commit it was built from,
/// like `0.1.0 (abc1234 2026-11-28)` (a `-dirty` commit had uncommitted changes;
/// `commit unknown` when built without git and without `WARDEN_BUILD_COMMIT`).
/// build.rs makes it.
pub(crate) const VERSION: &str = env!("WARDEN_LONG_VERSION");

/// The commit's date (UTC, YYYY-MM-DD), empty when unknown.
pub(crate) const COMMIT_DATE: &str = env!("WARDEN_COMMIT_DATE");

/// `warden policy show-default`: the embedded policy exactly as embedded.
pub(super) fn show_default() -> Result<u8, Failure> {
    write_stdout(crate::policy::DEFAULT_POLICY.as_bytes())?;
    Ok(0)
}

/// `warden completions SHELL`.
pub(super) fn completions(shell: clap_complete::Shell) -> Result<u8, Failure> {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "warden", &mut script);
    write_stdout(&script)?;
    Ok(0)
}

/// `warden man`: warden(1) on stdout; with `dir`, one page per command written there.
pub(super) fn man(dir: Option<&Path>) -> Result<u8, Failure> {
    let mut cmd = Cli::command().disable_help_subcommand(true);
    cmd.build();
    let Some(dir) = dir else {
        let mut page = Vec::new();
        page_of(cmd).render(&mut page).map_err(|e| fail(ErrorCode::Internal, format!("man: {e}")))?;
        write_stdout(&page)?;
        return Ok(0);
    };
    if !dir.is_dir() {
        return Err(fail(
            ErrorCode::InvalidArgs,
            format!("man --dir {}: not a directory; create it first", dir.display()),
        ));
    }
    let mut pages = Vec::new();
    collect(cmd, &mut pages);
    for page in pages {
        let path = dir.join(page.get_filename());
        let mut text = Vec::new();
        page.render(&mut text).map_err(|e| fail(ErrorCode::Internal, format!("man: {e}")))?;
        std::fs::write(&path, text)
            .map_err(|e| fail(ErrorCode::InvalidArgs, format!("man --dir: cannot write {}: {e}", path.display())))?;
        println!("{}", path.display());
    }
    Ok(0)
}

/// `cmd`'s page and those of its visible subcommands, depth first.
fn collect(cmd: clap::Command, pages: &mut Vec<clap_mangen::Man>) {
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        collect(sub.clone(), pages);
    }
    pages.push(page_of(cmd));
}

/// One page, dated by the commit (not the day it was rendered), so that the
/// same commit renders the same bytes.
fn page_of(cmd: clap::Command) -> clap_mangen::Man {
    clap_mangen::Man::new(cmd).date(COMMIT_DATE).source(format!("warden {VERSION}")).manual("warden manual")
}

fn write_stdout(bytes: &[u8]) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    out.write_all(bytes)
        .and_then(|()| out.flush())
        .map_err(|e| fail(ErrorCode::Internal, format!("cannot write to stdout: {e}")))
}
