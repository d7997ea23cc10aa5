//! Placeholders shared under `serve` (issue 22): one `warden serve` runs every
//! call of a workspace, so the placeholder over an absent protected name is
//! made once for the calls that overlap and lingers between calls that follow
//! one another. These cases attack what that sharing adds, by class:
//!
//! - **reuse**: the routes against the absent name run while another call
//!   holds its placeholder (so they mount the same one, for certain) and back
//!   to back after it (within the linger), and try to remove or rename the
//!   placeholder itself from inside;
//! - **the reuse check made to fail**: a call takes the workspace's search
//!   permission away (`chmod 000`, which stops an unprivileged warden from
//!   checking the name) while the next call starts: that call must fail closed
//!   or run held, never reuse blindly or drop the placeholder a running call
//!   mounts;
//! - **a placeholder that outlives its server**: `serve` killed with SIGKILL
//!   while its placeholders linger, then a `warden call` of the same
//!   workspace: the leftover is adopted, mounted and removed, never written.
//!
//! The judge is the host, as for the other persistence cases: the name is
//! absent (or, while `serve` runs, an empty placeholder) after every call, and
//! absent with no placeholder left once `serve` is gone.

use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;

use super::{
    PROFILE_NEW, Prepared, Route, Target, call_in, judge, ordinary_written, prepare, route_script, routes, shell_policy,
};
use crate::mcp_stdio::McpStdio;
use crate::scene::{CANARY_VAR, Run, WARDEN, cache_dir, clip};
use crate::{Observed, Scene};

/// A `warden serve` over stdio in the prepared workspace (the shared client),
/// its stderr kept for the evidence.
struct Served {
    mcp: McpStdio,
    stderr: std::path::PathBuf,
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
        Served { mcp, stderr }
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

    fn said(&self) -> String {
        clip(std::fs::read_to_string(&self.stderr).unwrap_or_default().trim(), 300)
    }
}

/// While `serve` runs, the protected name must be absent or an empty directory
/// (the placeholder): nothing the tool wrote, no link, no file.
fn placeholder_or_absent(file: &Path) -> Result<Option<u64>, String> {
    match std::fs::symlink_metadata(file) {
        Err(_) => Ok(None),
        Ok(m) if m.is_dir() && std::fs::read_dir(file).is_ok_and(|mut d| d.next().is_none()) => Ok(Some(m.ino())),
        Ok(_) => Err(format!("{} is {}", file.display(), clip(&super::state(file), 100))),
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

/// Temporary names a placeholder is made under, left in the workspace.
fn stray_temporaries(ws: &Path) -> Vec<String> {
    std::fs::read_dir(ws)
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(".warden-placeholder"))
                .collect()
        })
        .unwrap_or_default()
}

/// One route in the served workspace: the ordinary write must land and the name stay held.
fn served_route(srv: &mut Served, p: &Prepared, route: Route, extra: &str) -> (bool, String, Option<u64>) {
    let _ = std::fs::remove_file(p.ws.join("ordinary-write.txt"));
    let id = srv.call(&format!("{}{extra}", route_script(p, route)));
    let r = srv.run(id);
    let ran = ordinary_written(&p.ws, "ordinary-write.txt", &r);
    let now = placeholder_or_absent(&p.file);
    let ok = ran.is_ok() && now.is_ok();
    let mut line = format!("{}: {}", route.name(), clip(r.brief().trim(), 110));
    match (&ran, &now) {
        (Err(why), _) => line.push_str(&format!(" → not proven: the ordinary write failed ({why})")),
        (_, Err(why)) => line.push_str(&format!(" → {why}")),
        _ => line.push_str(" → held"),
    }
    (ok, line, now.ok().flatten())
}

/// Every route against an absent name while one call holds its placeholder,
/// then back to back, each also trying to remove and rename the placeholder.
pub(super) fn reuse(s: &Scene) -> Observed {
    let t: &Target = &PROFILE_NEW;
    let p = prepare(s, "persist-served-reuse", t, None);
    let mut srv = Served::start(s, &p, &shell_policy(false, ""));
    let mut lines = Vec::new();
    let holder = srv.call("sleep 3; echo holder-done");
    if !until(|| p.file.is_dir()) {
        return Observed::new(false, format!("not proven: no placeholder appeared for {} ({})", t.rel, srv.said()));
    }
    let first = std::fs::symlink_metadata(&p.file).map(|m| m.ino()).ok();
    let unmount = "; rmdir .profile; echo \"rmdir=$?\"; mv .profile moved-profile; echo \"mv=$?\"";
    let mut shared = 0;
    for route in routes(t, "process") {
        let (ok, line, ino) = served_route(&mut srv, &p, route, unmount);
        shared += usize::from(ino.is_some() && ino == first);
        lines.push((ok, line));
    }
    let held = srv.run(holder);
    lines.push((held.out().contains("holder-done"), format!("the holding call: {}", clip(&held.brief(), 60))));
    // Back to back, no call holding it: within the linger the same placeholder is taken again.
    let mut lingered = 0;
    for route in routes(t, "process") {
        let (ok, line, ino) = served_route(&mut srv, &p, route, unmount);
        lingered += usize::from(ino.is_some() && ino == first);
        lines.push((ok, line));
    }
    let moved = p.ws.join("moved-profile").exists();
    lines.push((!moved, format!("the placeholder renamed out from inside: {moved}")));
    let closed = srv.mcp.close();
    lines.push(after_serve(&p, t, closed));
    let n = routes(t, "process").len();
    lines.insert(
        0,
        (
            shared == n,
            format!("{shared} of {n} overlapping calls mounted the held placeholder; {lingered} of {n} calls back to back reused it"),
        ),
    );
    super::combine(lines)
}

/// The workspace's search permission taken away by a call while the next starts.
pub(super) fn unsearchable(s: &Scene) -> Observed {
    let t: &Target = &PROFILE_NEW;
    let p = prepare(s, "persist-served-chmod", t, None);
    let mut srv = Served::start(s, &p, &shell_policy(false, ""));
    let mut lines = Vec::new();
    let mode = |ws: &Path| std::fs::metadata(ws).map(|m| m.mode() & 0o777).unwrap_or(0o777);
    let holder = srv.call("chmod 000 \"$PWD\"; sleep 2; chmod 755 \"$PWD\"; echo restored");
    if !until(|| mode(&p.ws) == 0 || srv.mcp.peek()) {
        return Observed::new(false, format!("not proven: the chmod call neither ran nor ended ({})", srv.said()));
    }
    if mode(&p.ws) != 0 {
        // As root the tool (uid 0 without capabilities, in a user namespace of its
        // own) may not chmod the host's root-owned workspace: the attack is refused
        // before it starts. An unprivileged warden's tool owns the workspace and can.
        let h = srv.run(holder);
        let refused = h.err().contains("Operation not permitted");
        return Observed::new(refused, format!("the chmod itself refused: {}", clip(&h.brief(), 160)));
    }
    // While the workspace is unsearchable: the call fails closed, or runs held.
    let _ = std::fs::remove_file(p.ws.join("ordinary-write.txt"));
    let id = srv.call(&route_script(&p, Route::Write));
    let r = srv.run(id);
    let refused = !r.success() && !r.error_code().is_empty();
    let written = std::fs::read_to_string(p.ws.join("ordinary-write.txt")).is_ok_and(|t| t.trim() == "ordinary");
    let now = placeholder_or_absent(&p.file);
    let ok = (refused || written) && now.is_ok();
    lines.push((
        ok,
        format!("a call started meanwhile: {} → {}", clip(&r.brief(), 140), now.err().unwrap_or("held".into())),
    ));
    let h = srv.run(holder);
    lines.push((h.out().contains("restored"), format!("the chmod call: {}", clip(&h.brief(), 60))));
    // The holder's placeholder survived the failed check: the next calls are held and run.
    for route in [Route::Write, Route::Symlink] {
        let (ok, line, _) = served_route(&mut srv, &p, route, "");
        lines.push((ok, line));
    }
    let closed = srv.mcp.close();
    lines.push(after_serve(&p, t, closed));
    super::combine(lines)
}

/// `serve` killed while its placeholder lingers; a `warden call` of the workspace then.
pub(super) fn killed(s: &Scene) -> Observed {
    let t: &Target = &PROFILE_NEW;
    let p = prepare(s, "persist-served-killed", t, None);
    let policy = shell_policy(false, "");
    let mut srv = Served::start(s, &p, &policy);
    let (ok, line, _) = served_route(&mut srv, &p, Route::Write, "");
    let mut lines = vec![(ok, line)];
    srv.mcp.kill();
    let left = p.file.is_dir();
    let r = call_in(s, &p.ws, &p.home, &policy, "shell", &json!({ "command": route_script(&p, Route::Symlink) }));
    let ran = ordinary_written(&p.ws, "ordinary-write.txt", &r);
    let mut after = judge(&p, t, Route::Symlink, ran, &r.brief());
    after.1 = format!("after SIGKILL (a placeholder left behind: {left}), warden call {}", after.1);
    lines.push(after);
    let stray = stray_temporaries(&p.ws);
    lines.push((stray.is_empty(), format!("temporaries left: {stray:?}")));
    super::combine(lines)
}

/// Once `serve` ended: the name as it was, no placeholder, no temporary.
fn after_serve(p: &Prepared, t: &Target, closed: Result<(), String>) -> (bool, String) {
    let (held, line) = judge(p, t, Route::Write, Ok(()), "after serve ended");
    let stray = stray_temporaries(&p.ws);
    let ok = held && stray.is_empty() && closed.is_ok();
    (ok, format!("{line}; serve's exit: {closed:?}; temporaries left: {stray:?}"))
}
