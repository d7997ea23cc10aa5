//! Puts the commit warden is built from into `warden --version`:
//! `0.1.0 (abc1234 2026-11-28)`, the short hash (`-dirty` when tracked files
//! differ from it) and the commit's date in UTC.
//!
//! From a git checkout it asks git; a build without `.git` (an unpacked source
//! archive, a vendored copy) sets `WARDEN_BUILD_COMMIT` (and `WARDEN_BUILD_DATE`,
//! or `SOURCE_DATE_EPOCH` for the date). Without either the version says
//! `commit unknown`: a missing or refusing git never fails the build.
//!
//! Cargo runs this again only when HEAD moves (`.git/HEAD`, the branch's ref,
//! `packed-refs`) or one of those variables changes, not on every build. The
//! `-dirty` mark is therefore what the tree was when HEAD last moved; `cargo
//! xtask dist` passes `WARDEN_BUILD_COMMIT` itself, computed fresh.

// A build script reports failure by panicking, with the reason.
#![allow(clippy::expect_used)]

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    for var in ["WARDEN_BUILD_COMMIT", "WARDEN_BUILD_DATE", "SOURCE_DATE_EPOCH"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let (commit, date) = match env::var("WARDEN_BUILD_COMMIT") {
        Ok(c) if !c.trim().is_empty() => (checked_commit(c.trim()), override_date()),
        _ => from_git(&manifest).unwrap_or_else(|| {
            // Nothing to watch but this file: otherwise cargo would run the script on every build.
            println!("cargo:rerun-if-changed=build.rs");
            (String::new(), override_date())
        }),
    };
    let version = env::var("CARGO_PKG_VERSION").expect("cargo sets CARGO_PKG_VERSION");
    let long = match (commit.is_empty(), date.is_empty()) {
        (true, _) => format!("{version} (commit unknown)"),
        (false, true) => format!("{version} ({commit})"),
        (false, false) => format!("{version} ({commit} {date})"),
    };
    println!("cargo:rustc-env=WARDEN_COMMIT={commit}");
    println!("cargo:rustc-env=WARDEN_COMMIT_DATE={date}");
    println!("cargo:rustc-env=WARDEN_LONG_VERSION={long}");
}

/// `WARDEN_BUILD_COMMIT`: a hex hash of 7 to 40 digits, `-dirty` allowed.
fn checked_commit(c: &str) -> String {
    let hash = c.strip_suffix("-dirty").unwrap_or(c);
    if !(7..=40).contains(&hash.len()) || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
        panic!(
            "WARDEN_BUILD_COMMIT={c:?} is not a commit: give 7 to 40 hex digits (`git rev-parse --short HEAD`), optionally with -dirty, or unset it"
        );
    }
    c.to_ascii_lowercase()
}

/// `WARDEN_BUILD_DATE` (YYYY-MM-DD), else the day of `SOURCE_DATE_EPOCH`, else none.
fn override_date() -> String {
    if let Ok(d) = env::var("WARDEN_BUILD_DATE") {
        let b = d.as_bytes();
        let shape = b.len() == 10
            && b.iter().enumerate().all(|(i, c)| if i == 4 || i == 7 { *c == b'-' } else { c.is_ascii_digit() });
        if !shape {
            panic!("WARDEN_BUILD_DATE={d:?} is not a date: give YYYY-MM-DD, or unset it");
        }
        return d;
    }
    match env::var("SOURCE_DATE_EPOCH") {
        Ok(s) => {
            let secs = s.trim().parse::<i64>().unwrap_or_else(|_| {
                panic!("SOURCE_DATE_EPOCH={s:?} is not a number of seconds since 1970; fix or unset it")
            });
            utc_day(secs)
        }
        Err(_) => String::new(),
    }
}

/// The commit, its date, and the files that move with HEAD watched; None when
/// this is not the top of a git checkout or git cannot answer.
fn from_git(manifest: &Path) -> Option<(String, String)> {
    // The crate inside someone else's repository (a vendored copy) is not a checkout of warden.
    let top = git(manifest, &["rev-parse", "--show-toplevel"])?;
    if Path::new(&top).canonicalize().ok()? != manifest.canonicalize().ok()? {
        return None;
    }
    let git_dir = PathBuf::from(git(manifest, &["rev-parse", "--absolute-git-dir"])?);
    let common = manifest.join(git(manifest, &["rev-parse", "--git-common-dir"])?);
    let hash = git(manifest, &["rev-parse", "--short", "HEAD"])?;
    let time: i64 = git(manifest, &["log", "-1", "--format=%ct", "HEAD"])?.parse().ok()?;
    // --no-optional-locks: do not refresh (rewrite) the index of the person building.
    let status = git(manifest, &["--no-optional-locks", "status", "--porcelain", "--untracked-files=no"]);
    let dirty = match status {
        Some(s) if s.is_empty() => "",
        Some(_) => "-dirty",
        None => return None,
    };
    watch(&git_dir.join("HEAD"));
    if let Some(branch) = git(manifest, &["symbolic-ref", "-q", "HEAD"]) {
        let loose = common.join(&branch);
        if loose.is_file() {
            watch(&loose);
        } else if let Some(parent) = loose.parent().filter(|p| p.is_dir()) {
            // A packed ref: a commit writes it loose, into this directory.
            watch(parent);
        }
    }
    for extra in ["packed-refs", "reftable"] {
        if common.join(extra).exists() {
            watch(&common.join(extra));
        }
    }
    Some((format!("{hash}{dirty}"), utc_day(time)))
}

fn watch(path: &Path) {
    println!("cargo:rerun-if-changed={}", path.display());
}

/// `git ARGS` in `dir`: its trimmed stdout when it succeeds. `safe.directory`
/// names this checkout: a build as root of a checkout another user owns (CI
/// containers) runs this checkout's code anyway, so git's ownership refusal
/// would only cost the commit.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let safe = format!("safe.directory={}", dir.display());
    let out = Command::new("git").arg("-c").arg(safe).arg("-C").arg(dir).args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    Some(String::from_utf8(out.stdout).ok()?.trim().to_string())
}

/// The UTC day (YYYY-MM-DD) of a Unix time (Howard Hinnant's civil_from_days).
fn utc_day(secs: i64) -> String {
    let z = secs.div_euclid(86_400) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}
