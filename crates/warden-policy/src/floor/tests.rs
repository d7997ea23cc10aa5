use std::path::Path;

use proptest::prelude::*;
use serde_json::json;

use super::apply::{FloorTier, host_under, path_under};
use super::*;
use crate::{Policy, SandboxMode};

fn ctx() -> Context {
    Context { workspace: "/ws".into(), home: "/home/u".into(), cache: "/home/u/.cache".into() }
}

fn policy(text: &str) -> Policy {
    crate::compile::compile(text, "p.toml", Path::new("/etc/warden"), &ctx()).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

fn floor(text: &str) -> Floor {
    compile_floor(text, "floor.toml", &ctx()).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

/// A project policy that asks for more than the floor below allows, key by key.
const GREEDY: &str = r#"
version = 1
[sandbox]
mode = "best-effort"
[defaults]
inbox = true
max_jobs = 16
[credentials.tok]
from = { env = "TOK" }
variable = "TOKEN"
[[credentials.tok.bind]]
host = "api.example.com"
inject = "bearer"
[tools.shell]
exec = ["/bin/sh", "-c", "{command}"]
tier = "auto"
fs.read = ["/", "{system}"]
fs.write = ["{workspace}", "/var/tmp", "{tmp}"]
fs.unprotect = ["{workspace}/.vscode"]
fs.git_init = true
net.connect = ["*:443", "example.org:80"]
net.allow_private = true
net.unix = ["/run/docker.sock"]
env.pass = ["HOME", "AWS_SECRET_ACCESS_KEY"]
sysv_ipc = true
inotify = true
credentials = ["tok"]
limits = { timeout = "10m", memory = "8GiB", processes = 4096 }
[[tools.shell.rule]]
when = { command = "^rm " }
tier = "auto"
[tools.other]
exec = ["/bin/true"]
tier = "auto"
[servers.srv]
exec = ["/bin/cat"]
tier = "auto"
fs.write = ["/srv"]
net.connect = ["*:443"]
"#;

const FLOOR: &str = r#"
version = 1
[sandbox]
mode = "enforce"
[defaults]
inbox = false
max_jobs = 2
[tools."*"]
net.connect = ["api.example.com:443", "*.corp.example:443"]
net.allow_private = false
limits = { timeout = "1m", memory = "1GiB" }
[tools.shell]
tier = "ask"
fs.read = ["{system}", "{workspace}", "/opt/tools"]
fs.write = ["{workspace}/src", "{tmp}"]
fs.deny_read = ["{workspace}/.env"]
fs.unprotect = []
fs.git_init = false
net.unix = []
env.pass = ["HOME"]
sysv_ipc = false
inotify = false
credentials = []
limits = { processes = 64 }
[[tools.shell.rule]]
when = { command = "^rm " }
tier = "deny"
[tools.other]
tier = "deny"
[servers.srv]
fs.write = ["/srv/data"]
[tools."srv__drop"]
tier = "confirm"
"#;

#[test]
fn a_floor_wins_over_each_key_a_project_loosens() {
    let mut p = policy(GREEDY);
    p.apply_floors(&[floor(FLOOR)]);
    assert_eq!(p.mode, SandboxMode::Enforce);
    assert!(!p.inbox);
    assert_eq!(p.max_jobs, 2);
    let t = &p.tools["shell"];
    assert_eq!(t.decide(&json!({"command": "ls"})).0, Tier::Ask, "the floor's tier over the policy's auto");
    let (tier, rule) = t.decide(&json!({"command": "rm -rf /"}));
    assert_eq!(tier, Tier::Deny, "the floor's deny rule over the policy's auto rule");
    assert!(rule.is_some_and(|r| r.location.starts_with("floor.toml:")), "{rule:?}");
    let ws = |s: &str| GrantPath::Fixed(Path::new("/ws").join(s));
    // `/` read is narrowed to what the floor reads; `{workspace}` write to `{workspace}/src`.
    assert!(t.grants.paths.contains(&PathGrant { path: ws(""), write: false }), "{:?}", t.grants.paths);
    assert!(t.grants.paths.contains(&PathGrant { path: ws("src"), write: true }));
    assert!(t.grants.paths.contains(&PathGrant { path: GrantPath::Fixed("/opt/tools".into()), write: false }));
    assert!(t.grants.paths.contains(&PathGrant { path: GrantPath::Tmp("".into()), write: true }));
    assert!(!t.grants.paths.iter().any(|g| g.path == GrantPath::Fixed("/var/tmp".into())));
    assert!(!t.grants.paths.iter().any(|g| g.path == GrantPath::Fixed("/".into())));
    assert!(t.grants.system, "the floor grants all of {{system}}");
    assert!(t.grants.deny.iter().any(|d| d.read && d.path == ws(".env")));
    assert!(t.grants.unprotect.is_empty() && t.grants.unix.is_empty() && t.grants.credentials.is_empty());
    assert_eq!(t.grants.env_pass, ["HOME"]);
    assert!(!t.grants.allow_private && !t.grants.sysv_ipc && !t.grants.inotify && !t.grants.git_init);
    let net: Vec<String> = t.grants.net.iter().map(ToString::to_string).collect();
    assert_eq!(net, ["api.example.com:443", "*.corp.example:443"], "`*:443` narrowed, port 80 dropped");
    assert_eq!(t.limits.timeout, std::time::Duration::from_secs(60));
    assert_eq!(t.limits.memory, 1 << 30);
    assert_eq!(t.limits.processes, 64);
    // A tool the floor forbids stays forbidden, whatever its arguments.
    assert_eq!(p.tools["other"].tier, Tier::Deny);
    assert_eq!(p.tools["other"].decide(&json!({})).0, Tier::Deny);
    // A server: its process's grants, and each tool's tier.
    let s = &p.servers["srv"];
    assert_eq!(s.grants.paths, [PathGrant { path: GrantPath::Fixed("/srv/data".into()), write: true }]);
    assert_eq!(s.grants.net.len(), 2);
    assert_eq!(s.tool_spec("list").decide(&json!({})).0, Tier::Auto);
    assert_eq!(s.tool_spec("drop").decide(&json!({})).0, Tier::Confirm);
    // Every change is noted for `policy explain`, with the floor's line.
    let notes = &p.floor_notes["shell"];
    assert!(notes.iter().any(|n| n.key == "tier" && n.now == "ask" && n.by.starts_with("floor.toml:")));
    assert!(notes.iter().any(|n| n.key == "net.connect"));
    assert!(p.floor_notes[""].iter().any(|n| n.key == "[sandbox] mode"));
}

#[test]
fn a_profile_cannot_lift_a_floor() {
    let text = format!("{GREEDY}\n[profiles.agent]\ntools = \"*\"\n[profiles.agent.tiers]\nshell = \"confirm\"\n");
    let mut p = policy(&text);
    p.apply_floors(&[floor(FLOOR)]);
    p.select_profile("agent").unwrap_or_else(|e| panic!("{e}"));
    let mut spec = p.tools["shell"].clone();
    if let Some(profile) = &p.profile {
        profile.apply(&mut spec);
    }
    assert_eq!(spec.decide(&json!({"command": "ls"})).0, Tier::Confirm);
    assert_eq!(spec.decide(&json!({"command": "rm x"})).0, Tier::Deny);
}

#[test]
fn floors_refuse_what_defines_a_tool_and_unknown_keys() {
    for (text, want) in [
        ("[tools.x]\nexec = [\"/bin/sh\"]\n", "never defines one"),
        ("[tools.x]\nfs.reed = []\n", "unknown field"),
        ("version = 2\n", "unsupported floor version 2"),
        ("[tools.x]\nnet.connect = [\"nohost\"]\n", "net.connect \"nohost\""),
        ("[tools.x]\nfs.write = [\"relative\"]\n", "absolute"),
    ] {
        let e = compile_floor(text, "f.toml", &ctx()).err().unwrap_or_else(|| panic!("accepted: {text}"));
        assert!(e.to_string().contains(want), "{text}: {e}");
    }
}

#[test]
fn hosts_and_paths_nest_as_documented() {
    assert!(host_under("a.example.com", "*.example.com"));
    assert!(host_under("*.a.example.com", "*.example.com"));
    assert!(!host_under("example.com", "*.example.com"));
    assert!(!host_under("badexample.com", "*.example.com"));
    assert!(!host_under("*", "*.example.com"));
    assert!(!host_under("10.0.0.1", "*"), "`*` names host names, never addresses");
    assert!(!host_under("169.254.169.254", "*.example.com"));
    assert!(host_under("::ffff:10.0.0.1", "10.0.0.1"));
    assert!(!host_under("example.com", "10.0.0.1"));
    assert!(path_under(&GrantPath::Fixed("/a/b".into()), &GrantPath::Fixed("/a".into())));
    assert!(!path_under(&GrantPath::Fixed("/ab".into()), &GrantPath::Fixed("/a".into())));
    assert!(!path_under(&GrantPath::Tmp("".into()), &GrantPath::Fixed("/".into())));
}

fn write(path: &Path, text: &str, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap_or_else(|e| panic!("{e}"));
}

fn euid() -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").map(|m| m.uid()).unwrap_or(u32::MAX)
}

#[test]
fn floor_files_that_others_could_change_are_refused_loudly() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap_or_else(|e| panic!("{e}"));
    let me = euid();
    let extra = dir.path().join("extra.toml");
    write(&extra, "[tools.x]\ntier = \"deny\"\n", 0o644);
    // The user's own extra floor loads; an empty system directory adds nothing.
    let floors = load_from(&dir.path().join("none"), &ctx(), Some(&extra), me).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(floors.len(), 1);
    assert_eq!(floors[0].tools["x"].tier, Some(Tier::Deny));
    // Writable by others: refused, naming the file and the fix.
    write(&extra, "[tools.x]\ntier = \"deny\"\n", 0o666);
    let e = load_from(&dir.path().join("none"), &ctx(), Some(&extra), me).err().map(|e| e.to_string());
    assert!(e.as_ref().is_some_and(|e| e.contains("writable by group or others") && e.contains("chmod go-w")), "{e:?}");
    write(&extra, "[tools.x]\ntier = \"deny\"\n", 0o644);
    // A system floor (requirements.toml) must be root's: a file of this user's is refused when
    // warden runs as someone else; as root, a file handed to another user is.
    let sys = dir.path().join("sys");
    std::fs::create_dir(&sys).unwrap_or_else(|e| panic!("{e}"));
    write(&sys.join(FLOOR_FILE), "[tools.x]\ntier = \"ask\"\n", 0o644);
    if me == 0 {
        std::os::unix::fs::chown(sys.join(FLOOR_FILE), Some(1002), None).unwrap_or_else(|e| panic!("{e}"));
    }
    let e = load_from(&sys, &ctx(), None, me).err().map(|e| e.to_string());
    assert!(e.as_ref().is_some_and(|e| e.contains("not root") && e.contains("chown root:root")), "{e:?}");
    // A dangling link where a floor was meant to be is an error, never an empty floor.
    let gone = dir.path().join("gone");
    std::fs::create_dir(&gone).unwrap_or_else(|e| panic!("{e}"));
    std::os::unix::fs::symlink("/nonexistent/requirements.toml", gone.join(FLOOR_FILE))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(load_from(&gone, &ctx(), None, me).is_err());
    // A floor that does not parse stops everything, with its line.
    write(&extra, "[tools.x]\ntier = \"sometimes\"\n", 0o644);
    let e = load_from(&dir.path().join("none"), &ctx(), Some(&extra), me).err().map(|e| e.to_string());
    assert!(e.as_ref().is_some_and(|e| e.contains("extra.toml:2")), "{e:?}");
}

#[test]
fn what_the_red_team_found_is_closed() {
    // Addresses: a floor `*:443` keeps no literal address of the policy's.
    let text = "version = 1\n[tools.t]\nexec = [\"/bin/sh\", \"-c\", \"{cmd}\"]\n\
                net.connect = [\"127.0.0.1:443\", \"*:443\", \"[::ffff:a9fe:a9fe]:443\"]\ninbox = true\n\
                [tools.Shell]\nexec = [\"/bin/sh\", \"-c\", \"{cmd}\"]\ntier = \"auto\"\n\
                [credentials.tok]\nfrom = { command = [\"/bin/sh\", \"-c\", \"echo abcdefgh12345\"] }\n\
                variable = \"TOK\"\n[[credentials.tok.bind]]\nhost = \"api.example.com\"\ninject = \"bearer\"\n\
                [tools.c]\nexec = [\"/bin/true\"]\nnet.connect = [\"api.example.com:443\"]\ncredentials = [\"tok\"]\n";
    let floor_text = "[defaults]\ninbox = false\ntier = \"confirm\"\n\
                      [tools.\"*\"]\nnet.connect = [\"*:443\", \"10.0.0.5:443\"]\n\
                      [tools.t]\ntier = \"auto\"\n[[tools.t.rule]]\nwhen = { command = \"^curl \" }\ntier = \"deny\"\n\
                      [tools.c]\n";
    let mut p = policy(text);
    p.apply_floors(&[floor(floor_text)]);
    let t = &p.tools["t"];
    let net: Vec<String> = t.grants.net.iter().map(ToString::to_string).collect();
    assert_eq!(net, ["*:443"], "no address survives a name pattern, and the floor's own address is not added");
    // A rule on an argument the tool renamed matches every call (fails closed).
    assert_eq!(t.decide(&json!({"cmd": "ls"})).0, Tier::Deny);
    // A tool's own `inbox = true` gives way to the floor's `inbox = false`.
    assert_eq!(t.inbox, Some(false));
    // A tool the floor does not name (renamed `shell`) gets `[defaults] tier`.
    assert_eq!(p.tools["Shell"].decide(&json!({"cmd": "ls"})).0, Tier::Confirm);
    // A credential from a host command is dropped under a floor that does not allow it.
    assert!(p.tools["c"].grants.credentials.is_empty() && p.credentials.is_empty());
    assert!(p.floor_notes["c"].iter().any(|n| n.key == "credentials"));
    let mut allowed = policy(text);
    allowed.apply_floors(&[floor("[defaults]\ncredential_commands = true\n")]);
    assert_eq!(allowed.tools["c"].grants.credentials.len(), 1);
    // A server's tool has no walls of its own to bound.
    let e = compile_floor("[tools.\"srv__x\"]\nfs.write = []\n", "f.toml", &ctx()).err().map(|e| e.to_string());
    assert!(e.is_some_and(|e| e.contains("[servers.srv]")));
    // `{system}` in a floor keeps its devices writable.
    let f = floor("[tools.\"*\"]\nfs.read = [\"{system}\"]\n");
    let paths = f.tools["*"].paths.clone().unwrap_or_default();
    assert!(paths.contains(&PathGrant { path: GrantPath::Fixed("/dev/null".into()), write: true }));
}

// ---- the property: for random policies (and floors), the result never exceeds the floor --------

const PATHS: &[&str] = &["{workspace}", "{workspace}/src", "/usr", "/etc", "/", "{tmp}", "/var/lib", "{home}"];
const NETS: &[&str] =
    &["*:443", "api.example.com:443", "*.example.com:443", "x.y.example.com:443", "example.org:80", "10.1.2.3:22"];
const TIERS: &[&str] = &["auto", "ask", "confirm", "deny"];

fn list(pool: &[&str], picks: &[usize]) -> String {
    let mut items: Vec<String> = picks.iter().map(|i| format!("\"{}\"", pool[i % pool.len()])).collect();
    items.dedup();
    format!("[{}]", items.join(", "))
}

#[derive(Debug, Clone)]
struct Side {
    tier: usize,
    rule_tier: usize,
    read: Vec<usize>,
    write: Vec<usize>,
    net: Vec<usize>,
    private: bool,
    timeout: u64,
    processes: u32,
}

fn side() -> impl Strategy<Value = Side> {
    (
        0..4usize,
        0..4usize,
        proptest::collection::vec(0..8usize, 0..4),
        proptest::collection::vec(0..8usize, 0..3),
        proptest::collection::vec(0..6usize, 0..3),
        any::<bool>(),
        1..600u64,
        1..500u32,
    )
        .prop_map(|(tier, rule_tier, read, write, net, private, timeout, processes)| Side {
            tier,
            rule_tier,
            read,
            write,
            net,
            private,
            timeout,
            processes,
        })
}

fn project_text(s: &Side, mode: bool) -> String {
    let mut t = format!(
        "version = 1\n[sandbox]\nmode = \"{}\"\n[tools.t]\nexec = [\"/bin/sh\", \"-c\", \"{{command}}\"]\ntier = \"{}\"\n",
        if mode { "enforce" } else { "best-effort" },
        TIERS[s.tier]
    );
    t += &format!("fs.read = {}\nfs.write = {}\n", list(PATHS, &s.read), list(PATHS, &s.write));
    if !s.net.is_empty() {
        t += &format!("net.connect = {}\nnet.allow_private = {}\n", list(NETS, &s.net), s.private);
    }
    t += &format!("limits = {{ timeout = \"{}s\", processes = {} }}\n", s.timeout, s.processes);
    t += &format!("[[tools.t.rule]]\nwhen = {{ command = \"^ls\" }}\ntier = \"{}\"\n", TIERS[s.rule_tier]);
    t
}

fn floor_text(s: &Side, star: bool) -> String {
    let mut t = String::from("[sandbox]\nmode = \"enforce\"\n");
    t += &format!("[tools.\"{}\"]\ntier = \"{}\"\n", if star { "*" } else { "t" }, TIERS[s.tier.min(2)]);
    t += &format!("fs.read = {}\nfs.write = {}\n", list(PATHS, &s.read), list(PATHS, &s.write));
    t += &format!("net.connect = {}\nnet.allow_private = {}\n", list(NETS, &s.net), s.private);
    t += &format!("limits = {{ timeout = \"{}s\", processes = {} }}\n", s.timeout, s.processes);
    t += &format!(
        "[[tools.\"{}\".rule]]\nwhen = {{ command = \"rm\" }}\ntier = \"{}\"\n",
        if star { "*" } else { "t" },
        TIERS[s.rule_tier]
    );
    t
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn the_effective_policy_never_exceeds_the_floor_nor_the_project(
        p in side(), f in side(), star in any::<bool>(), mode in any::<bool>(),
    ) {
        let text = project_text(&p, mode);
        let Ok(project) = crate::compile::compile(&text, "p.toml", Path::new("/x"), &ctx()) else {
            return Err(TestCaseError::reject("a project policy the loader refuses"));
        };
        let fl = floor(&floor_text(&f, star));
        let mut eff = crate::compile::compile(&text, "p.toml", Path::new("/x"), &ctx()).map_err(|e| TestCaseError::fail(e.to_string()))?;
        eff.apply_floors(std::slice::from_ref(&fl));
        let entry = fl.tools.values().next().ok_or_else(|| TestCaseError::fail("no entry"))?;
        let (t, before) = (&eff.tools["t"], &project.tools["t"]);
        prop_assert_eq!(eff.mode, SandboxMode::Enforce);
        let most = entry.paths.as_ref().ok_or_else(|| TestCaseError::fail("no paths"))?;
        for g in &t.grants.paths {
            prop_assert!(most.iter().any(|m| path_under(&g.path, &m.path) && (m.write || !g.write)), "{:?} beyond the floor", g);
            prop_assert!(before.grants.paths.iter().any(|b| path_under(&g.path, &b.path) && (b.write || !g.write)), "{:?} beyond the project", g);
        }
        let nets = entry.net.as_ref().ok_or_else(|| TestCaseError::fail("no net"))?;
        for n in &t.grants.net {
            prop_assert!(nets.iter().any(|m| m.port == n.port && host_under(&n.host, &m.host)), "{} beyond the floor", n);
            prop_assert!(before.grants.net.iter().any(|b| b.port == n.port && host_under(&n.host, &b.host)), "{} beyond the project", n);
        }
        prop_assert!(!t.grants.allow_private || (f.private && before.grants.allow_private));
        prop_assert!(t.limits.timeout.as_secs() <= f.timeout.min(p.timeout));
        prop_assert!(t.limits.processes <= f.processes.min(p.processes));
        let floor_tier = FloorTier::decide;
        let ft = t.floors.first().ok_or_else(|| TestCaseError::fail("no floor tier"))?;
        for args in [json!({"command": "ls -l"}), json!({"command": "rm -rf x"}), json!({"command": "ls; rm x"}), json!({})] {
            let got = t.decide(&args).0;
            prop_assert!(got >= floor_tier(ft, &args, true).tier, "{} below the floor for {}", got, args);
            prop_assert!(got >= before.decide(&args).0, "{} below the project for {}", got, args);
        }
    }
}
