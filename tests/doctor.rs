//! `warden doctor`: on this host (every layer there, checked against what the
//! kernel says on its own), with user namespaces refused (doctor runs under a
//! seccomp filter like Docker's default profile, which refuses `unshare` and
//! `clone` with namespace flags: the layers are reported missing with the fix,
//! and a real call confirms the verdicts), and the shipped AppArmor profile
//! parsed by `apparmor_parser`. Runs as root and, in CI, as uid `warden-ci`
//! (.ci/unprivileged).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod util;

use serde_json::Value;
use util::Env;

/// A tool with write grants (so protected paths), one with a network grant,
/// and one that reads.
fn policy(env: &Env, mode: &str) -> String {
    let path = env.root.path().join(format!("policy-{mode}.toml"));
    std::fs::write(
        &path,
        format!(
            "version = 1\n[sandbox]\nmode = \"{mode}\"\n\n\
             [tools.shell]\nexec = [\"/bin/sh\", \"-c\", \"{{command}}\"]\ntier = \"auto\"\n\
             fs.read = [\"{{system}}\", \"{{workspace}}\"]\nfs.write = [\"{{workspace}}\"]\n\n\
             [tools.fetch]\nexec = [\"/bin/true\", \"{{url}}\"]\ntier = \"auto\"\nfs.read = [\"{{system}}\"]\n\
             net.connect = [\"api.example.com:443\"]\n\n\
             [tools.show]\nexec = [\"/bin/cat\", \"{{path}}\"]\ntier = \"auto\"\nfs.read = [\"{{system}}\", \"{{workspace}}\"]\n"
        ),
    )
    .unwrap();
    path.display().to_string()
}

fn doc(r: &util::Run) -> Value {
    serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("{e}: {r:?}"))
}

fn layer<'a>(d: &'a Value, name: &str) -> &'a Value {
    d["layers"].as_array().unwrap().iter().find(|l| l["layer"] == name).unwrap_or_else(|| panic!("{name}: {d}"))
}

fn tool<'a>(d: &'a Value, name: &str) -> &'a Value {
    d["tools"].as_array().unwrap().iter().find(|t| t["tool"] == name).unwrap_or_else(|| panic!("{name}: {d}"))
}

/// The kernel's Landlock ABI, asked here (not through warden).
#[allow(unsafe_code)]
fn landlock_abi() -> i64 {
    // SAFETY: landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION) reads no memory.
    unsafe { libc::syscall(libc::SYS_landlock_create_ruleset, std::ptr::null::<libc::c_void>(), 0usize, 1u32) }
}

/// Whether this user may make a cgroup beneath its own pids cgroup (what the probe tries).
fn may_make_a_cgroup() -> bool {
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    let base = if std::path::Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
        format!("/sys/fs/cgroup{}", own.lines().find_map(|l| l.strip_prefix("0::")).unwrap().trim_end_matches('/'))
    } else {
        let path = own.lines().find_map(|l| l.split(':').nth(2).filter(|_| l.split(':').nth(1) == Some("pids")));
        format!("/sys/fs/cgroup/pids{}", path.unwrap().trim_end_matches('/'))
    };
    let dir = format!("{base}/warden-doctor-test-{}", std::process::id());
    let made = std::fs::create_dir(&dir).is_ok();
    let _ = std::fs::remove_dir(&dir);
    made
}

#[test]
fn on_this_host_every_layer_a_call_needs_is_there() {
    let env = Env::new();
    let root = nix::unistd::geteuid().is_root();
    let p = policy(&env, "enforce");
    let r = env.run(&["--policy", &p, "doctor", "--json"]);
    let d = doc(&r);
    println!("{}", serde_json::to_string_pretty(&d).unwrap());
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(d["schema"], 1);
    assert_eq!(d["verdict"], "ok");
    assert_eq!(d["uid"], nix::unistd::geteuid().as_raw());
    let helper = d["helper"].as_str().unwrap();
    assert!(helper.ends_with("/warden") || helper.ends_with("/warden-sandbox"), "{helper}");
    for name in ["user", "mount", "pid", "ipc", "net", "namespaces", "overlayfs", "landlock", "seccomp"] {
        assert_eq!(layer(&d, name)["status"], "ok", "{name}: {}", layer(&d, name));
    }
    assert_eq!(layer(&d, "user")["needed"], !root);
    assert!(layer(&d, "pid")["detail"].as_str().unwrap().contains("pid 1"));
    assert!(layer(&d, "net")["detail"].as_str().unwrap().contains("loopback up"));
    // Landlock: the ABI the kernel gives a plain syscall from this test, and a write refused.
    let abi = landlock_abi();
    assert!(abi >= 4, "this host's Landlock ABI is {abi}");
    assert_eq!(d["host"]["landlock_abi"], abi);
    let landlock = layer(&d, "landlock")["detail"].as_str().unwrap();
    assert!(landlock.starts_with(&format!("ABI {abi} ")) && landlock.contains("refused"), "{landlock}");
    assert!(layer(&d, "seccomp")["detail"].as_str().unwrap().contains("io_uring_setup refused"));
    // cgroups: as root a call's pids cgroup is made; unprivileged, delegation is reported as it is.
    let cgroup = layer(&d, "cgroup");
    assert_eq!(cgroup["needed"], root);
    assert_eq!(cgroup["status"] == "ok", may_make_a_cgroup(), "{cgroup}");
    assert_eq!(d["namespaces"]["available"], true, "{}", d["namespaces"]);
    for name in ["shell", "fetch", "show"] {
        let t = tool(&d, name);
        assert_eq!(t["enforce"]["verdict"], "runs", "{t}");
        assert_eq!(t["best_effort"]["verdict"], "runs", "{t}");
    }
    assert!(tool(&d, "fetch")["enforce"]["layers"].to_string().contains("egress proxy"));
    // No fix for a layer a call needs (unprivileged: perhaps delegation, which it does not use).
    let fixes: Vec<&str> = d["fixes"].as_array().unwrap().iter().map(|f| f["id"].as_str().unwrap()).collect();
    assert!(fixes.iter().all(|f| *f == "cgroup-delegation" && !root), "{fixes:?}");
    // The text form says the same.
    let text = env.run(&["--policy", &p, "doctor"]);
    assert_eq!(text.code, 0, "{text:?}");
    assert!(text.stdout.contains("verdict: ok (exit 0)") && text.stdout.contains("TOOLS"), "{}", text.stdout);
}

/// Runs `warden ARGS` in `env` under a seccomp filter like Docker's default
/// profile: `unshare` refused (EPERM), `clone` with any namespace flag refused
/// (EPERM), `clone3` (whose flags a filter cannot read) ENOSYS, so that libc
/// falls back to `clone`.
fn without_namespaces(env: &Env, args: &[&str]) -> util::Run {
    use seccompiler::{SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule};
    use std::os::unix::process::CommandExt;
    let flags = [
        libc::CLONE_NEWUSER,
        libc::CLONE_NEWNS,
        libc::CLONE_NEWPID,
        libc::CLONE_NEWIPC,
        libc::CLONE_NEWNET,
        libc::CLONE_NEWUTS,
        libc::CLONE_NEWCGROUP,
    ];
    // One rule per flag (rules are alternatives): clone with that flag set.
    let clone_ns: Vec<SeccompRule> = flags
        .iter()
        .map(|&f| {
            let f = f as u64;
            SeccompRule::new(vec![
                SeccompCondition::new(0, SeccompCmpArgLen::Qword, SeccompCmpOp::MaskedEq(f), f).unwrap(),
            ])
            .unwrap()
        })
        .collect();
    let filter = |rules, action| -> seccompiler::BpfProgram {
        SeccompFilter::new(rules, SeccompAction::Allow, action, std::env::consts::ARCH.try_into().unwrap())
            .unwrap()
            .try_into()
            .unwrap()
    };
    let eperm = filter(
        std::collections::BTreeMap::from([(libc::SYS_unshare, vec![]), (libc::SYS_clone, clone_ns)]),
        SeccompAction::Errno(libc::EPERM as u32),
    );
    let clone3 = filter(
        std::collections::BTreeMap::from([(libc::SYS_clone3, vec![])]),
        SeccompAction::Errno(libc::ENOSYS as u32),
    );
    let mut cmd = env.command(args);
    #[allow(unsafe_code)]
    // SAFETY: between fork and exec only prctl and seccomp run (async-signal-safe
    // system calls); the filters were built before the fork.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            for f in [&eperm, &clone3] {
                seccompiler::apply_filter(f).map_err(|e| std::io::Error::other(e.to_string()))?;
            }
            Ok(())
        });
    }
    util::run_to_end(cmd, None)
}

#[test]
fn with_namespaces_refused_doctor_names_the_fix_and_the_verdicts_match_real_calls() {
    let env = Env::new();
    let root = nix::unistd::geteuid().is_root();
    let enforce = policy(&env, "enforce");
    let r = without_namespaces(&env, &["--policy", &enforce, "doctor", "--json"]);
    let d = doc(&r);
    println!("{}", serde_json::to_string_pretty(&d).unwrap());
    for name in ["user", "mount", "pid", "ipc", "net", "namespaces"] {
        let l = layer(&d, name);
        assert_eq!(l["status"], "missing", "{l}");
        assert!(l["detail"].as_str().unwrap().contains("Operation not permitted"), "{l}");
        assert!(l["fix"].to_string().contains("container"), "{l}");
    }
    assert_eq!(layer(&d, "user")["needed"], !root);
    // What needs no namespace still holds.
    for name in ["landlock", "seccomp"] {
        assert_eq!(layer(&d, name)["status"], "ok", "{}", layer(&d, name));
    }
    assert_eq!(d["namespaces"]["available"], false);
    let fix = d["fixes"].as_array().unwrap().iter().find(|f| f["id"] == "container").unwrap();
    let steps = fix["steps"].to_string();
    assert!(steps.contains("--security-opt seccomp=unconfined") && steps.contains("seccompProfile"), "{fix}");
    assert!(fix["cause"].as_str().unwrap().contains("Seccomp: 2"), "{fix}");
    // Enforce refuses the tools whose grants need namespaces; best-effort runs them with what remains.
    for name in ["shell", "fetch"] {
        let t = tool(&d, name);
        assert_eq!(t["enforce"]["verdict"], "refused", "{t}");
        assert_eq!(t["best_effort"]["verdict"], "degraded", "{t}");
        assert!(t["best_effort"]["layers"].to_string().contains("seccomp filter"), "{t}");
    }
    assert!(tool(&d, "fetch")["enforce"]["missing"].to_string().contains("network namespace"));
    assert!(tool(&d, "shell")["enforce"]["missing"].to_string().contains("protected and denied paths"));
    assert_eq!(d["verdict"], "refused");
    assert_eq!(r.code, 5, "{r:?}");
    let text = without_namespaces(&env, &["--policy", &enforce, "doctor"]);
    println!("{}", text.stdout);
    assert!(text.stdout.contains("MISSING") && text.stdout.contains("[container]"), "{}", text.stdout);

    // The verdicts are what a call gets: enforce refuses, naming `warden doctor` ...
    let args = r#"{"command": "echo ran-here"}"#;
    let call = without_namespaces(&env, &["--policy", &enforce, "call", "shell", args]);
    assert_eq!(call.error_code(), "SANDBOX_UNAVAILABLE", "{call:?}");
    assert!(call.error_message().contains("warden doctor"), "{call:?}");
    // `show` needs no namespace of its own; as root, a private IPC namespace,
    // which enforce mode requires: again the doctor's verdict is the call's.
    let file = env.write("f.txt", "shown-here").display().to_string();
    let show = tool(&d, "show");
    assert_eq!(show["enforce"]["verdict"], if root { "refused" } else { "degraded" }, "{show}");
    let call = without_namespaces(&env, &["--policy", &enforce, "call", "show", &format!(r#"{{"path": "{file}"}}"#)]);
    if root {
        assert_eq!(call.error_code(), "SANDBOX_UNAVAILABLE", "{call:?}");
        assert!(call.error_message().contains("warden doctor"), "{call:?}");
    } else {
        assert!(call.stdout.contains("shown-here"), "{call:?}");
    }
    // ... and best-effort runs it.
    let best = policy(&env, "best-effort");
    let call = without_namespaces(&env, &["--policy", &best, "call", "shell", args]);
    assert!(call.stdout.contains("ran-here"), "{call:?}");
    let d = doc(&without_namespaces(&env, &["--policy", &best, "doctor", "--json"]));
    assert_eq!(d["verdict"], "degraded", "{d}");
}

#[test]
fn the_shipped_apparmor_profile_parses() {
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/packaging/apparmor/warden-sandbox");
    let text = std::fs::read_to_string(file).unwrap();
    assert!(text.contains("abi <abi/4.0>,") && text.contains("\n  userns,\n"), "{text}");
    assert!(text.contains("profile warden-sandbox /usr/local/bin/warden-sandbox flags=(unconfined) {"));
    // In /usr/sbin, which an ordinary user's PATH may lack.
    let parser = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .map(|d| d.join("apparmor_parser"))
        .find(|p| p.is_file())
        .expect("apparmor_parser (Debian's apparmor package; .ci/run installs it)");
    let version = std::process::Command::new(&parser)
        .arg("--version")
        .output()
        .expect("apparmor_parser (Debian's apparmor package; .ci/run installs it)");
    let version = String::from_utf8_lossy(&version.stdout).to_string();
    let major: u32 = version
        .split_whitespace()
        .find_map(|w| w.split('.').next().and_then(|m| m.parse().ok()))
        .unwrap_or_else(|| panic!("{version}"));
    // AppArmor 3 (Debian 12) knows neither abi/4.0 nor the userns rule: it
    // parses the rest (header, attachment, flags, includes); 4 parses it all.
    let dir = tempfile::tempdir().unwrap();
    let parse = |name: &str, text: &str| {
        let text = if major >= 4 {
            text.to_string()
        } else {
            text.replace("abi <abi/4.0>,", "abi <abi/3.0>,").replace("\n  userns,\n", "\n")
        };
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        let out = std::process::Command::new(&parser).args(["-Q", "-K"]).arg(&path).output().unwrap();
        (out.status.success(), String::from_utf8_lossy(&out.stderr).to_string())
    };
    let (ok, err) = parse("warden-sandbox", &text);
    assert!(ok, "apparmor_parser {version}: {err}");
    // The profile doctor prints for a helper elsewhere parses too.
    let printed = warden::checkup::fixes::apparmor_profile_for("/opt/warden-1.2/bin/warden-sandbox");
    assert!(printed.contains("profile warden-sandbox /opt/warden-1.2/bin/warden-sandbox flags=(unconfined)"));
    let (ok, err) = parse("printed", &printed);
    assert!(ok, "{err}\n{printed}");
    // A path AppArmor would read as a pattern is never put in a profile.
    assert!(
        warden::checkup::fixes::apparmor_profile_for("/opt/w*/warden-sandbox")
            .contains(" /usr/local/bin/warden-sandbox ")
    );
    // And the parser really judges: a misspelt rule fails.
    let (ok, _) = parse("broken", &text.replace("  include if exists", "  inclde if exists"));
    assert!(!ok, "apparmor_parser accepted a broken profile");
}
