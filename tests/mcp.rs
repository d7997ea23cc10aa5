//! `warden serve` end to end against MCP clients this project did not write:
//! the official Python SDK (`mcp` 2.3, in a virtualenv under the target
//! directory) runs `tests/mcp/*.py` with pytest, and the MCP Inspector CLI
//! (npm `@modelcontextprotocol/inspector` 0.15) lists and calls tools, among
//! them a `warden:plugin@0.2.0` component's image (`tests/mcp/test_rich.py`).
//! Background jobs (`background = true`, the `job_*` tools) are `tests/mcp/test_jobs.py`;
//! MCP tasks (`tests/mcp/test_tasks.py`) are driven by the TypeScript SDK 1.32's
//! experimental tasks client (2025-11-25) and `@modelcontextprotocol/ext-tasks`
//! over the v2 client (2026-07-28), from `tests/mcp/tasks_clients` (`npm ci`
//! of its lock file).
//!
//! Both are installed here on first use, from PyPI and npm, so `cargo test`
//! needs only `python3` (with venv) and `npm` on the machine; `.ci/run` installs
//! those when they are missing.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

const MCP_SDK: &str = "mcp==2.3.0";
const PYTEST: &str = "pytest==8.4.2";
const INSPECTOR: &str = "@modelcontextprotocol/inspector@0.15.0";

fn tmp() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).to_path_buf()
}

/// A scratch directory of this uid's own: `.ci/unprivileged` runs this suite
/// again as an ordinary user, who can neither use nor replace root's.
fn mine(name: &str) -> PathBuf {
    let uid = nix::unistd::geteuid().as_raw();
    tmp().join(if uid == 0 { name.to_string() } else { format!("{name}-{uid}") })
}

fn run(what: &str, cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {what}: {e} ({cmd:?})"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The virtualenv's python, with the SDK and pytest installed.
fn python() -> PathBuf {
    let venv = mine("mcp-venv");
    let py = venv.join("bin").join("python");
    let ready = py.is_file()
        && Command::new(&py)
            .args(["-c", "import importlib.metadata as m; assert m.version('mcp') == '2.3.0'; import pytest"])
            .output()
            .is_ok_and(|o| o.status.success());
    if !ready {
        run("python3 -m venv (install python3-venv)", Command::new("python3").arg("-m").arg("venv").arg(&venv));
        run(
            "pip install",
            Command::new(&py).args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", MCP_SDK, PYTEST]),
        );
    }
    py
}

/// A directory where `tests/mcp/tasks_clients` is installed (`npm ci` of its lock).
fn tasks_clients() -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/tasks_clients");
    let dir = mine("tasks-clients");
    let lock = std::fs::read(src.join("package-lock.json")).unwrap();
    // Installed from this very lock file, or again.
    let ready = std::fs::read(dir.join("package-lock.json")).is_ok_and(|l| l == lock)
        && dir.join("node_modules/@modelcontextprotocol/ext-tasks").is_dir();
    if !ready {
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for f in ["package.json", "package-lock.json"] {
            std::fs::copy(src.join(f), dir.join(f)).unwrap();
        }
        run(
            "npm ci of tests/mcp/tasks_clients (install nodejs and npm)",
            Command::new("npm").current_dir(&dir).args(["ci", "--no-audit", "--no-fund", "--silent"]),
        );
    }
    dir
}

/// The Inspector's CLI entry point.
fn inspector() -> PathBuf {
    let dir = mine("inspector");
    let cli = dir.join("node_modules/@modelcontextprotocol/inspector/cli/build/cli.js");
    if !cli.is_file() {
        std::fs::create_dir_all(&dir).unwrap();
        if !dir.join("package.json").is_file() {
            std::fs::write(dir.join("package.json"), "{\"name\":\"warden-test-inspector\",\"private\":true}\n")
                .unwrap();
        }
        run(
            "npm install (install nodejs and npm)",
            Command::new("npm").current_dir(&dir).args(["install", "--no-audit", "--no-fund", "--silent", INSPECTOR]),
        );
    }
    cli
}

#[test]
fn python_sdk_and_inspector_end_to_end() {
    let py = python();
    let cli = inspector();
    let tasks = tasks_clients();
    let suite = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join("mcp");
    let out = Command::new(&py)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA"])
        .arg(&suite)
        .env("WARDEN_BIN", env!("CARGO_BIN_EXE_warden"))
        // The tools pass PATH through: a hermetic one, so no user-owned shim
        // directory (pyenv, nvm) shadows a granted program and trips warden's
        // toolchain check.
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("WARDEN_CACHE_DIR", mine("warden-test-cache"))
        .env("INSPECTOR_CLI", &cli)
        .env("TASKS_CLIENTS", &tasks)
        // The warden:plugin@0.2.0 fixture (plugins/conformance) for test_rich.py.
        .env("WARDEN_CONFORMANCE_WASM", warden::runtime::builtin::CONFORMANCE_WASM)
        // The testkit component (its `spin` loops forever) for test_jobs.py.
        .env("WARDEN_TESTKIT_WASM", warden::runtime::builtin::TESTKIT_WASM)
        .env_remove("WARDEN_HTTP_TOKEN")
        .env_remove("WARDEN_STATE_KEY")
        .output()
        .unwrap();
    let report = format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    println!("{report}");
    assert!(out.status.success(), "the MCP end-to-end suite failed:\n{report}");
    // The suite really ran: every test file contributed.
    for file in [
        "test_stdio.py",
        "test_robustness.py",
        "test_http.py",
        "test_rich.py",
        "test_progress.py",
        "test_jobs.py",
        "test_tasks.py",
        "test_inbox.py",
    ] {
        assert!(report.contains(file), "{file} did not run:\n{report}");
    }
}
