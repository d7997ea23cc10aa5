//! One `warden serve` runs every call of a workspace: its calls overlap and
//! follow one another, each with a layer of its own that reaches the
//! workspace only when it ends, judged. These cases attack what that adds, by
//! class:
//!
//! - **overlapping and back-to-back calls**: every route against an absent
//!   `.profile` while another call runs, then one after another;
//! - **the workspace made unsearchable** (`chmod 000`) by one call while the
//!   next starts: the change stays in the first call's layer until it ends,
//!   and the next runs;
//! - **serve killed** (SIGKILL) while a call has planted something: nothing of
//!   it reaches the workspace (its layer is kept aside, never applied), and the
//!   next `warden call` runs.
//!
//! The judge is the host: the name is absent after every call and once `serve`
//! is gone, and nothing of warden's ever appears in the workspace.

use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;

use super::{
    PROFILE_NEW, Prepared, Route, Target, call_in, judge, ordinary_written, prepare, route_script, routes, shell_policy,
};
use crate::scene::{CANARY_VAR, WARDEN};
use crate::util::mcp_stdio::McpStdio;
use crate::util::{Run, cache_dir, clip};
use crate::{Observed, Scene};

/// A `warden serve` over stdio in the prepared workspace (the shared client),
/// its stderr kept for the evidence.
struct Served {
    mcp: McpStdio,
}

impl Served {
    fn start(s: &Scene, p: &Prepared, policy: &str) -> Served {
        let policy = s.policy_file(policy);
        let side = s.side_dir("served");
        let stderr = side.join("stderr.txt");
        let mut c = Command::new(WARDEN);
        c.current_dir(&p.ws)
            .arg("--audit-log")
            .arg(side.join("audit.jsonl"))
            .arg("--workspace")
            .arg(&p.ws)
            .arg("--policy")
            .arg(&policy)
            .arg("serve")
            .env(CANARY_VAR, &s.secret)
            .env("WARDEN_CACHE_DIR", cache_dir())
            .env("HOME", &p.home)
            .env_remove("XDG_STATE_HOME")
            .env_remove("XDG_CACHE_HOME")
            .env_remove("RUST_LOG")
            .process_group(0)
            .stderr(std::fs::File::create(&stderr).unwrap());
        let said = |stderr: &Path| clip(std::fs::read_to_string(stderr).unwrap_or_default().trim(), 300);
        let mcp = McpStdio::start(c)
            .unwrap_or_else(|reply| panic!("warden serve did not initialize: {reply} {}", said(&stderr)));
        Served { mcp }
    }

    /// Starts `shell {command}`; its reply is read with [`Served::run`].
    fn call(&mut self, command: &str) -> u64 {
        self.mcp.call("shell", json!({"command": command}))
    }

    /// The call `id`'s result document, as a [`Run`] of `warden call` would hold it.
    fn run(&mut self, id: u64) -> Run {
        let doc = self.mcp.doc(id);
        let code = if doc.get("status").is_some() { 0 } else { -1 };
        Run { code, stdout: doc.to_string(), ..Run::default() }
    }
}

/// Waits (bounded) until `ready` holds.
fn until(mut ready: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !ready() {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    true
}

/// Names in the workspace that neither the host nor a finished call put there.
fn foreign(ws: &Path, known: &[&str]) -> Vec<String> {
    std::fs::read_dir(ws)
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| !known.contains(&n.as_str()))
                .collect()
        })
        .unwrap_or_default()
}

/// One route in the served workspace: the ordinary write must land and the name stay absent.
fn served_route(srv: &mut Served, p: &Prepared, route: Route) -> (bool, String) {
    let _ = std::fs::remove_file(p.ws.join("ordinary-write.txt"));
    let id = srv.call(&route_script(p, route));
    let r = srv.run(id);
    let ran = ordinary_written(&p.ws, "ordinary-write.txt", &r);
    let absent = std::fs::symlink_metadata(&p.file).is_err();
    let mut line = format!("{}: {}", route.name(), clip(r.brief().trim(), 110));
    match (&ran, absent) {
        (Err(why), _) => line.push_str(&format!(" → not proven: the ordinary write failed ({why})")),
        (_, false) => line.push_str(&format!(" → {} is {}", p.file.display(), clip(&super::state(&p.file), 100))),
        _ => line.push_str(" → held"),
    }
    (ran.is_ok() && absent, line)
}

/// The names the prepared workspace holds, and those the routes leave there.
const KNOWN: &[&str] = &[
    ".git",
    "README.md",
    ".gitmodules",
    ".envrc",
    ".vscode",
    ".idea",
    ".bashrc",
    ".mcp.json",
    ".claude",
    "ordinary-write.txt",
    "evil",
    "lnk",
    "lnkdir",
    "hl",
    "moved-away",
];

/// Every route against an absent name while another call runs, then back to back.
pub(super) fn reuse(s: &Scene) -> Observed {
    let t: &Target = &PROFILE_NEW;
    let p = prepare(s, "persist-served-reuse", t, None);
    let mut srv = Served::start(s, &p, &shell_policy(false, ""));
    let mut lines = Vec::new();
    let holder = srv.call("touch holder-was-here; sleep 3; echo holder-done");
    for route in routes(t, "process") {
        lines.push(served_route(&mut srv, &p, route));
    }
    let stray = foreign(&p.ws, KNOWN);
    lines.push((stray.is_empty(), format!("while the holding call ran, new names in the workspace: {stray:?}")));
    let held = srv.run(holder);
    let landed = p.ws.join("holder-was-here").exists();
    lines.push((
        held.out().contains("holder-done") && landed,
        format!("the holding call: {} (its file landed when it ended: {landed})", clip(&held.brief(), 60)),
    ));
    for route in routes(t, "process") {
        lines.push(served_route(&mut srv, &p, route));
    }
    let closed = srv.mcp.close();
    lines.push(after_serve(&p, t, closed));
    super::combine(lines)
}

/// The workspace's search permission taken away by a call while the next starts.
pub(super) fn unsearchable(s: &Scene) -> Observed {
    let t: &Target = &PROFILE_NEW;
    let p = prepare(s, "persist-served-chmod", t, None);
    let mut srv = Served::start(s, &p, &shell_policy(false, ""));
    let mut lines = Vec::new();
    let mode = |ws: &Path| std::fs::metadata(ws).map(|m| m.mode() & 0o777).unwrap_or(0);
    let before = mode(&p.ws);
    let holder = srv.call("chmod 000 \"$PWD\" && echo chmodded; sleep 2; chmod 755 \"$PWD\"; echo restored");
    // The chmod happens in the call's layer: the host's workspace keeps its mode while it runs.
    let mut changed = false;
    let _ = until(|| {
        changed |= mode(&p.ws) != before;
        srv.mcp.peek()
    });
    lines.push((!changed, format!("the host's workspace mode changed while the call ran: {changed}")));
    let (ok, line) = served_route(&mut srv, &p, Route::Write);
    lines.push((ok, format!("a call started meanwhile: {line}")));
    let h = srv.run(holder);
    lines.push((h.out().contains("restored"), format!("the chmod call: {}", clip(&h.brief(), 80))));
    lines.push((mode(&p.ws) == before, format!("the workspace's mode after it: {:o}", mode(&p.ws))));
    let closed = srv.mcp.close();
    lines.push(after_serve(&p, t, closed));
    super::combine(lines)
}

/// `serve` killed while a call has planted the name; a `warden call` of the workspace then.
pub(super) fn killed(s: &Scene) -> Observed {
    let t: &Target = &PROFILE_NEW;
    let p = prepare(s, "persist-served-killed", t, None);
    let policy = shell_policy(false, "");
    let mut srv = Served::start(s, &p, &policy);
    let _planting = srv.call(&format!("{}; touch planted-before-kill; sleep 5", route_script(&p, Route::Write)));
    std::thread::sleep(Duration::from_millis(1500));
    srv.mcp.kill();
    let stray = foreign(&p.ws, KNOWN);
    let absent = std::fs::symlink_metadata(&p.file).is_err();
    let mut lines = vec![(
        absent && stray.is_empty(),
        format!("after SIGKILL mid-call: {} absent: {absent}; new names: {stray:?}", t.rel),
    )];
    let r = call_in(s, &p.ws, &p.home, &policy, "shell", &json!({ "command": route_script(&p, Route::Symlink) }));
    let ran = ordinary_written(&p.ws, "ordinary-write.txt", &r);
    let mut after = judge(&p, t, Route::Symlink, ran, &r.brief());
    after.1 = format!("then warden call {}", after.1);
    lines.push(after);
    super::combine(lines)
}

/// Once `serve` ended: the name as it was, nothing of warden's left.
fn after_serve(p: &Prepared, t: &Target, closed: Result<(), String>) -> (bool, String) {
    let (held, line) = judge(p, t, Route::Write, Ok(()), "after serve ended");
    let mut known = KNOWN.to_vec();
    known.push("holder-was-here");
    let stray = foreign(&p.ws, &known);
    let ok = held && stray.is_empty() && closed.is_ok();
    (ok, format!("{line}; serve's exit: {closed:?}; new names: {stray:?}"))
}
