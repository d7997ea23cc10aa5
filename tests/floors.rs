//! Managed floors: a project policy that tries to loosen each key the floor
//! bounds, judged by real calls of the real binary (and from the host), and
//! floor files that cannot be trusted stopping every command.
//!
//! The floor comes from `WARDEN_REQUIREMENTS` (a further floor, owned by the
//! user or root); the root-only test writes a real one into
//! `/etc/warden/requirements.d`. Every test holds [`ONE_AT_A_TIME`]: that one
//! makes a floor every command of this machine obeys.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod util;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde_json::json;
use util::{Env, Run, SECRET, run_to_end};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// A project policy that asks for the most it can: every tool `auto`, the
/// directory outside the workspace writable, the network wide open.
fn greedy(env: &Env) -> String {
    let text = format!(
        "version = 1\n[sandbox]\nmode = \"best-effort\"\n\
         [tools.shell]\nexec = [\"/bin/bash\", \"-c\", \"{{command}}\"]\ntier = \"auto\"\n\
         fs.read = [\"{{system}}\", \"{{workspace}}\", \"{outside}\"]\n\
         fs.write = [\"{{workspace}}\", \"{{tmp}}\", \"{outside}\"]\n\
         net.connect = [\"*:443\"]\n\
         env = {{ pass = [\"PATH\"], set = {{ HOME = \"{{tmp}}\" }} }}\nlimits = {{ timeout = \"10m\" }}\n\
         [[tools.shell.rule]]\nwhen = {{ command = \"^rm \" }}\ntier = \"auto\"\n",
        outside = env.outside.display()
    );
    let path = env.root.path().join("warden.toml");
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

const FLOOR: &str = "[sandbox]\nmode = \"enforce\"\n\
    [tools.\"*\"]\nfs.read = [\"{system}\", \"{workspace}\"]\nfs.write = [\"{workspace}\", \"{tmp}\"]\n\
    net.connect = []\nlimits = { timeout = \"20s\" }\n\
    [tools.shell]\ntier = \"ask\"\n\
    [[tools.shell.rule]]\nwhen = { command = \"^rm \" }\ntier = \"deny\"\nreason = \"security says no rm\"\n";

/// Writes a floor file of mode `mode` in the test's directory.
fn floor_file(env: &Env, text: &str, mode: u32) -> PathBuf {
    let path = env.root.path().join("floor.toml");
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    path
}

fn with_floor(env: &Env, floor: &Path, args: &[&str]) -> Run {
    let mut c = env.command(args);
    c.env("WARDEN_REQUIREMENTS", floor);
    run_to_end(c, None)
}

fn shell(env: &Env, floor: &Path, policy: &str, approve: &str, command: &str) -> Run {
    let args = json!({ "command": command }).to_string();
    with_floor(env, floor, &["--policy", policy, "--approve", approve, "call", "shell", &args])
}

#[test]
fn a_project_cannot_loosen_the_floor_by_any_key() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let env = Env::new();
    let policy = greedy(&env);
    let floor = floor_file(&env, FLOOR, 0o644);
    // Without the floor the project's grants stand (the control: the escape below is real).
    let control = env.run(&[
        "--policy",
        &policy,
        "call",
        "shell",
        &json!({"command": format!("cat {}/secret.txt", env.outside.display())}).to_string(),
    ]);
    assert!(control.out().contains(SECRET), "control: {control:?}");

    // tier: the floor's `ask` over the project's `auto`: nobody can answer here.
    let r = shell(&env, &floor, &policy, "deny", "true");
    assert_eq!(r.error_code(), "APPROVAL_REQUIRED", "{r:?}");
    // a rule: the floor's deny over the project's auto rule, naming the floor's line.
    let r = shell(&env, &floor, &policy, "yes", "rm -f x");
    assert_eq!(r.error_code(), "DENIED", "{r:?}");
    assert!(r.error_message().contains("floor.toml:"), "{r:?}");
    // fs.read and fs.write: the directory outside the workspace is gone from the walls.
    let planted = env.outside.join("planted");
    let r = shell(
        &env,
        &floor,
        &policy,
        "yes",
        &format!("cat {0}/secret.txt; echo pwned > {0}/planted", env.outside.display()),
    );
    assert!(!r.stdout.contains(SECRET) && !r.stderr.contains(SECRET), "{r:?}");
    assert!(!planted.exists(), "the floor's fs.write did not hold: {r:?}");
    // ...while the workspace, which both allow, is writable.
    let r = shell(&env, &floor, &policy, "yes", "echo ok > inside && cat inside");
    assert_eq!(r.out().trim(), "ok", "{r:?}");
    assert_eq!(std::fs::read_to_string(env.ws.join("inside")).unwrap().trim(), "ok");
    // `policy check` names the floor; `policy explain` names the layer of each key.
    let r = with_floor(&env, &floor, &["--policy", &policy, "policy", "check"]);
    assert!(r.stdout.contains("managed floors:") && r.stdout.contains("sandbox mode enforce"), "{r:?}");
    let r = with_floor(&env, &floor, &["--policy", &policy, "policy", "explain", "shell"]);
    assert!(r.code == 0, "{r:?}");
    for want in [
        "tier = ask  <- managed floor",
        "the policy asked auto",
        "limits.timeout = 20s  <- managed floor",
        "net.connect = []  <- managed floor",
        "[sandbox] mode = enforce  <- managed floor",
    ] {
        assert!(r.stdout.contains(want), "{want:?} missing:\n{}", r.stdout);
    }
    // The record of the denied call names the floor's rule.
    let denied = env.audit_records().into_iter().find(|r| r["decision"] == "denied").unwrap();
    assert!(denied.to_string().contains("floor.toml:"), "{denied}");
}

#[test]
fn a_floor_that_others_could_change_stops_every_command() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let env = Env::new();
    let policy = greedy(&env);
    let floor = floor_file(&env, FLOOR, 0o666);
    for args in [
        vec!["--policy", &policy, "call", "shell", "{\"command\":\"true\"}"],
        vec!["--policy", &policy, "list"],
        vec!["--policy", &policy, "policy", "check"],
    ] {
        let r = with_floor(&env, &floor, &args);
        assert!(r.code != 0, "{args:?}: {r:?}");
        assert!(r.all().contains("writable by group or others") && r.all().contains("chmod go-w"), "{args:?}: {r:?}");
        assert!(!r.all().contains("\"status\":\"success\""), "{r:?}");
    }
    // A floor named but missing is an error too, never no floor.
    let gone = env.root.path().join("gone.toml");
    let r = with_floor(&env, &gone, &["--policy", &policy, "call", "shell", "{\"command\":\"true\"}"]);
    assert!(r.code != 0 && r.all().contains("WARDEN_REQUIREMENTS"), "{r:?}");
    // One that does not parse names its line.
    let floor = floor_file(&env, "[tools.shell]\nexec = [\"/bin/sh\"]\n", 0o644);
    let r = with_floor(&env, &floor, &["--policy", &policy, "list"]);
    assert!(r.code != 0 && r.all().contains("floor.toml:2") && r.all().contains("never defines one"), "{r:?}");
}

/// Removes what the root test put in /etc/warden, whatever happens.
struct Cleanup(Vec<PathBuf>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        for p in self.0.iter().rev() {
            let _ = std::fs::remove_file(p).or_else(|_| std::fs::remove_dir(p));
        }
    }
}

#[test]
#[ignore = "needs root: writes a floor into /etc/warden/requirements.d"]
fn the_system_floor_in_etc_warden_binds_every_policy() {
    util::needs_root();
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let env = Env::new();
    let policy = greedy(&env);
    let mut made = Vec::new();
    for dir in ["/etc/warden", "/etc/warden/requirements.d"] {
        if !Path::new(dir).exists() {
            std::fs::create_dir(dir).unwrap();
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
            made.push(PathBuf::from(dir));
        }
    }
    let file = PathBuf::from(format!("/etc/warden/requirements.d/zz-warden-test-{}.toml", std::process::id()));
    made.push(file.clone());
    let _cleanup = Cleanup(made);
    std::fs::write(&file, "[tools.shell]\ntier = \"deny\"\n").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let r = env.run(&["--policy", &policy, "--approve", "yes", "call", "shell", "{\"command\":\"true\"}"]);
    assert_eq!(r.error_code(), "DENIED", "{r:?}");
    assert!(r.error_message().contains(&file.display().to_string()), "{r:?}");
    // Handed to another user, it could be lowered: every command stops.
    std::os::unix::fs::chown(&file, Some(1002), None).unwrap();
    let r = env.run(&["--policy", &policy, "list"]);
    assert!(r.code != 0 && r.all().contains("not root") && r.all().contains("chown root:root"), "{r:?}");
}
