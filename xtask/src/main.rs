//! Project chores: `cargo xtask tour`, `cargo xtask plugin new|build|check`
//! (see `plugin.rs`), `cargo xtask escape` (see `escape.rs`),
//! `cargo xtask fuzz` (see `fuzz.rs`), `cargo xtask bench` (see `bench.rs`),
//! `cargo xtask conformance` (the MCP conformance suite, see `conformance.rs`) and
//! `cargo xtask dist` (the release archive, see `dist.rs`).
//!
//! `tour` builds warden and walks through its main job on the embedded default
//! policy in a scratch workspace: the tools, a read, a refused escape, and a
//! write that needs approval (refused without a terminal, then run with
//! `--approve yes`), then the audit log those calls left.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

mod bench;
mod conformance;
mod dist;
mod escape;
mod fuzz;
mod plugin;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("tour") => tour(),
        Some("plugin") => plugin::run(&args[1..]),
        Some("escape") => escape::run(),
        Some("fuzz") => fuzz::run(&root(), &args[1..]),
        Some("bench") => bench::run(&args[1..]),
        Some("conformance") => conformance::run(),
        Some("dist") => dist::run(&args[1..]),
        _ => Err(format!(
            "usage: cargo xtask tour\n       cargo xtask escape\n       cargo xtask conformance\n       {}\n       {}\n       {}\n       {}",
            plugin::USAGE.trim_start_matches("usage: "),
            fuzz::USAGE.trim_start_matches("usage: "),
            bench::USAGE.trim_start_matches("usage: "),
            dist::USAGE.trim_start_matches("usage: ")
        )),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().map(Path::to_path_buf).unwrap_or_default()
}

fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
}

/// The debug `warden` binary, built first: or the one `WARDEN_BIN` names
/// (CI passes the one `cargo test` built, whose features differ from a plain
/// `cargo build`'s, so building again would compile half the tree twice).
fn debug_warden(root: &Path) -> Result<PathBuf, String> {
    if let Some(bin) = std::env::var_os("WARDEN_BIN").map(PathBuf::from) {
        return if bin.is_file() { Ok(bin) } else { Err(format!("WARDEN_BIN={} is not a file", bin.display())) };
    }
    let status = cargo()
        .current_dir(root)
        .args(["build", "--locked", "--bin", "warden"])
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !status.success() {
        return Err("building warden failed".into());
    }
    Ok(root.join("target/debug/warden"))
}

fn tour() -> Result<(), String> {
    let root = root();
    let warden = debug_warden(&root)?;
    let scratch = std::env::temp_dir().join(format!("warden-tour-{}", std::process::id()));
    let ws = scratch.join("workspace");
    std::fs::create_dir_all(&ws).map_err(|e| e.to_string())?;
    std::fs::write(ws.join("notes.md"), "# Notes\nwarden keeps agents inside the lines.\n")
        .map_err(|e| e.to_string())?;
    // A git repository, so that git_status has something to show (skipped when git is missing).
    let _ = Command::new("git").args(["init", "-q"]).current_dir(&ws).status();
    let log = scratch.join("audit.jsonl");
    let steps: &[(&str, &[&str])] = &[
        ("The tools the default policy offers", &["list"]),
        ("A read inside the workspace runs (tier auto)", &["call", "read_file", r#"{"path":"notes.md"}"#]),
        ("An escape is refused before anything runs", &["call", "read_file", r#"{"path":"/etc/passwd"}"#]),
        (
            "A write needs approval; without a terminal nobody can give it",
            &["--approve", "deny", "call", "write_file", r#"{"path":"todo.md","content":"- ship it\n"}"#],
        ),
        (
            "With --approve yes it runs (and the log says who approved)",
            &["--approve", "yes", "call", "write_file", r#"{"path":"todo.md","content":"- ship it\n"}"#],
        ),
        ("A process tool: git status, in its sandbox (tier auto)", &["call", "git_status"]),
        (
            "The shell runs simple commands on its auto rule; /etc/shadow stays unreadable even as root",
            &["call", "shell", r#"{"command":"cat /etc/shadow"}"#],
        ),
        ("Every call left a hash-chained audit record", &["log", "verify"]),
        ("Per-tool figures from the log", &["log", "stats"]),
    ];
    for (title, args) in steps {
        println!(
            "\n== {title}\n$ warden {}",
            args.iter()
                .map(|a| if a.contains(' ') || a.contains('{') { format!("'{a}'") } else { a.to_string() })
                .collect::<Vec<_>>()
                .join(" ")
        );
        let status = Command::new(&warden)
            .current_dir(&ws)
            .arg("--audit-log")
            .arg(&log)
            .args(*args)
            .stdin(std::process::Stdio::null())
            .status()
            .map_err(|e| format!("cannot run warden: {e}"))?;
        println!("(exit {})", status.code().unwrap_or(-1));
    }
    println!("\nThe scratch workspace and its audit log are in {}", scratch.display());
    Ok(())
}
