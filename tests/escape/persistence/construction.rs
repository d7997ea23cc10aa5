//! Persistence closed by construction: the attacks that got past a list of
//! names (an outside red team's, and a check of nested repositories), each
//! tried by a process tool, the builtin file tools and a wrapped MCP server.
//!
//! - **commondir**: `.git/commondir` pointed at a directory of the tool's with
//!   a config that sets `core.fsmonitor`;
//! - **a bare repository at the grant's root** (a monorepo package as the
//!   workspace, no `.git` of its own): `HEAD`, `objects`, `refs`, `config`;
//! - **a nested repository** (`sub/.git`) and **a nested bare layout**
//!   (`a/b/HEAD` …) at depth;
//! - **the editors', shells' and agents' files at depth** (`sub/.envrc`,
//!   `pkg/.vscode/tasks.json`, `x/.mcp.json`).
//!
//! The judge is the host: while the call runs and after it, a prompt-like loop
//! runs real git (`status`, `log`, `commit`) in every directory the attack
//! could make a repository of, and nothing planted may run (it would append to
//! a marker outside every grant); the planted names are absent afterwards, and
//! an ordinary write beside the attack landed (the call really ran).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use serde_json::{Value, json};

use super::{call_in, fs_tools, host_git, server_policy, server_text, shell_policy};
use crate::scene::PYTHON;
use crate::util::clip;
use crate::util::kit::brief;
use crate::{Observed, Scene};

/// What is planted, where, and where host git is run to find it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Attack {
    Commondir,
    BareRoot,
    Nested,
    NestedBare,
    AutoRun,
    /// A submodule's `.git` file repointed at a repository the tool made.
    GitLink,
    /// An existing submodule's own config (`.git/modules/lib/config`).
    ModuleConfig,
    /// An existing worktree's `config.worktree`.
    WorktreeConfig,
}

/// The files of the any-depth list the AutoRun attack plants, each under a directory of its own.
const AUTO_RUN_PLANTS: &[&str] = &[
    "sub/.envrc",
    "pkg/.vscode/tasks.json",
    "x/.mcp.json",
    "a/.claude/settings.json",
    "b/.cursor/mcp.json",
    "c/.gemini/settings.json",
    "d/.codex/config.toml",
    "e/.continue/config.json",
    "f/.idea/workspace.xml",
    "g/.pre-commit-config.yaml",
    "h/lefthook.yml",
    "i/.lefthook.yml",
    "j/mise.toml",
    "k/.devcontainer/devcontainer.json",
    "l/warden.toml",
    "m/warden.lock",
];

/// The workspace of one attack and the judge's places.
struct Ground {
    /// The directory the tool may write (the workspace).
    ws: PathBuf,
    home: PathBuf,
    marker: PathBuf,
    /// Where host git runs in the loop.
    git_dirs: Vec<PathBuf>,
    /// What must be absent on the host afterwards (relative to `ws`).
    planted: Vec<&'static str>,
    /// Files that must be byte for byte as they were (relative to `ws`), with their content.
    kept: Vec<(&'static str, Vec<u8>)>,
}

fn fsmonitor(marker: &Path) -> String {
    format!("[core]\n\tfsmonitor = \"echo planted-fsmonitor-ran >> {}\"\n", marker.display())
}

/// A workspace for `attack`: a repository (the monorepo's, around the
/// workspace, for [`Attack::BareRoot`]) with one commit.
fn ground(s: &Scene, id: &str, attack: Attack) -> Ground {
    let top = s.ws(id);
    let home = s.side_dir("home");
    let marker = s.side_dir("marker").join("ran");
    super::git_ok(&top, &home, &["init", "-q", "-b", "main", "."]);
    std::fs::write(top.join("README.md"), "hello\n").unwrap();
    let ws = if attack == Attack::BareRoot {
        let pkg = top.join("packages/app");
        std::fs::create_dir_all(&pkg).unwrap();
        std::fs::write(pkg.join("index.js"), "module.exports = 1\n").unwrap();
        pkg
    } else {
        top.clone()
    };
    std::fs::create_dir_all(ws.join("sub")).unwrap();
    std::fs::create_dir_all(ws.join("a/b")).unwrap();
    std::fs::write(ws.join("sub/keep.txt"), "k\n").unwrap();
    std::fs::write(ws.join("a/b/keep.txt"), "k\n").unwrap();
    super::git_ok(&top, &home, &["add", "-A", "."]);
    super::git_ok(&top, &home, &["commit", "-q", "-m", "prepared on the host"]);
    match attack {
        Attack::GitLink | Attack::ModuleConfig => {
            // A submodule's layout: lib/.git a file naming .git/modules/lib.
            let module = ws.join(".git/modules/lib");
            std::fs::create_dir_all(ws.join(".git/modules")).unwrap();
            super::git_ok(
                &ws,
                &home,
                &["init", "-q", "-b", "main", "--separate-git-dir"]
                    .iter()
                    .map(|s| s.to_string())
                    .chain([module.display().to_string(), ws.join("lib").display().to_string()])
                    .collect::<Vec<_>>()
                    .iter()
                    .map(String::as_str)
                    .collect::<Vec<_>>(),
            );
            std::fs::write(ws.join("lib/.git"), "gitdir: ../.git/modules/lib\n").unwrap();
            std::fs::write(ws.join("lib/l.txt"), "l\n").unwrap();
        }
        Attack::WorktreeConfig => super::git_ok(&ws, &home, &["worktree", "add", "-q", "wt"]),
        _ => {}
    }
    let (git_dirs, planted): (Vec<PathBuf>, Vec<&str>) = match attack {
        // What would make the repository (without it, what else lands is inert).
        Attack::Commondir => (vec![ws.clone(), ws.join("sub")], vec![".git/commondir"]),
        Attack::BareRoot => (vec![ws.clone()], vec!["HEAD"]),
        Attack::Nested => (vec![ws.join("sub")], vec!["sub/.git"]),
        Attack::NestedBare => (vec![ws.join("a/b")], vec!["a/b/HEAD"]),
        Attack::AutoRun => (vec![ws.clone()], AUTO_RUN_PLANTS.to_vec()),
        Attack::GitLink => (vec![ws.join("lib")], vec!["evil/HEAD"]),
        Attack::ModuleConfig => (vec![ws.join("lib")], vec![]),
        Attack::WorktreeConfig => (vec![ws.join("wt")], vec![".git/worktrees/wt/config.worktree"]),
    };
    let kept_paths: &[&'static str] = match attack {
        Attack::GitLink => &["lib/.git"],
        Attack::ModuleConfig => &[".git/modules/lib/config"],
        Attack::Commondir | Attack::WorktreeConfig => &[".git/config"],
        _ => &[],
    };
    let kept = kept_paths.iter().map(|p| (*p, std::fs::read(ws.join(p)).unwrap())).collect();
    Ground { ws, home, marker, git_dirs, planted, kept }
}

/// The attack as shell text (cwd: the workspace), ending with a pause so the
/// host's loop runs while the call does, and an ordinary write.
fn script(g: &Ground, attack: Attack) -> String {
    let cfg = fsmonitor(&g.marker).replace('\n', "\\n").replace('"', "\\\"");
    let plant = match attack {
        Attack::Commondir => format!(
            "mkdir -p .git/x; printf \"{cfg}\" > .git/x/config; ln -s ../objects .git/x/objects; \
             ln -s ../refs .git/x/refs; cp .git/HEAD .git/x/HEAD; echo x > .git/commondir"
        ),
        Attack::BareRoot => {
            format!("mkdir -p objects refs/heads; echo 'ref: refs/heads/main' > HEAD; printf \"{cfg}\" > config")
        }
        Attack::Nested => format!(
            "mkdir -p sub/.git/objects sub/.git/refs/heads; echo 'ref: refs/heads/main' > sub/.git/HEAD; \
             printf \"{cfg}\" > sub/.git/config"
        ),
        Attack::NestedBare => format!(
            "mkdir -p a/b/objects a/b/refs/heads; echo 'ref: refs/heads/main' > a/b/HEAD; printf \"{cfg}\" > a/b/config"
        ),
        Attack::AutoRun => {
            let m = g.marker.display();
            AUTO_RUN_PLANTS
                .iter()
                .map(|p| format!("mkdir -p \"$(dirname {p})\"; echo 'echo ran >> {m}' > {p}"))
                .collect::<Vec<_>>()
                .join("; ")
        }
        Attack::GitLink => format!(
            "mkdir -p evil/objects evil/refs/heads; echo 'ref: refs/heads/main' > evil/HEAD; printf \"{cfg}\" > evil/config; \
             echo 'gitdir: ../evil' > lib/.git"
        ),
        Attack::ModuleConfig => format!("printf \"{cfg}\" >> .git/modules/lib/config"),
        Attack::WorktreeConfig => format!("printf \"{cfg}\" > .git/worktrees/wt/config.worktree"),
    };
    format!("{plant}; echo \"planted=$?\"; sleep 1; echo ordinary > ordinary-write.txt")
}

/// Host git, as a shell prompt runs it, in `dirs` until `stop`; the number of rounds.
fn prompt_loop(dirs: Vec<PathBuf>, home: PathBuf, stop: Arc<AtomicBool>, rounds: Arc<AtomicUsize>) {
    while !stop.load(Ordering::SeqCst) {
        round(&dirs, &home);
        rounds.fetch_add(1, Ordering::SeqCst);
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

fn round(dirs: &[PathBuf], home: &Path) {
    for d in dirs {
        host_git(d, home, &["status", "--porcelain"]);
        host_git(d, home, &["log", "-1", "--oneline"]);
    }
}

/// Runs `attempt` with the host's git loop going, then judges.
fn judged(g: &Ground, attempt: impl FnOnce() -> (Result<(), String>, String)) -> Observed {
    let stop = Arc::new(AtomicBool::new(false));
    let rounds = Arc::new(AtomicUsize::new(0));
    let looping = {
        let (dirs, home, stop, rounds) = (g.git_dirs.clone(), g.home.clone(), stop.clone(), rounds.clone());
        std::thread::spawn(move || prompt_loop(dirs, home, stop, rounds))
    };
    let (ran, said) = attempt();
    stop.store(true, Ordering::SeqCst);
    let _ = looping.join();
    // And once more after the call, with a commit, as the person would.
    round(&g.git_dirs, &g.home);
    for d in &g.git_dirs {
        host_git(d, &g.home, &["commit", "-q", "--allow-empty", "-m", "host commit after the call"]);
    }
    let mut problems = Vec::new();
    if let Err(why) = ran {
        problems.push(format!("not proven: the ordinary write beside the attack failed ({why})"));
    }
    if g.marker.exists() {
        problems.push(format!(
            "the planted command RAN on the host: {}",
            std::fs::read_to_string(&g.marker).unwrap_or_default().trim()
        ));
    }
    let left: Vec<&str> =
        g.planted.iter().copied().filter(|p| std::fs::symlink_metadata(g.ws.join(p)).is_ok()).collect();
    if !left.is_empty() {
        problems.push(format!("planted entries reached the host: {left:?}"));
    }
    let changed: Vec<&str> = g
        .kept
        .iter()
        .filter(|(p, was)| std::fs::read(g.ws.join(p)).ok().as_ref() != Some(was))
        .map(|(p, _)| *p)
        .collect();
    if !changed.is_empty() {
        problems.push(format!("protected files changed on the host: {changed:?}"));
    }
    let n = rounds.load(Ordering::SeqCst);
    if n == 0 {
        problems.push("not proven: host git never ran while the call did".into());
    }
    let verdict = if problems.is_empty() {
        format!("→ held ({n} rounds of host git during the call; nothing ran)")
    } else {
        format!("→ {}", problems.join("; "))
    };
    Observed::new(problems.is_empty(), format!("{} {verdict}", clip(said.trim(), 220)))
}

fn ordinary(ws: &Path, said: &str) -> Result<(), String> {
    if std::fs::read_to_string(ws.join("ordinary-write.txt")).is_ok_and(|t| t.trim() == "ordinary") {
        Ok(())
    } else {
        Err(clip(said, 120))
    }
}

pub(super) fn process(s: &Scene, id: &str, attack: Attack) -> Observed {
    let g = ground(s, id, attack);
    let command = script(&g, attack);
    judged(&g, || {
        let r = call_in(s, &g.ws, &g.home, &shell_policy(false, ""), "shell", &json!({ "command": command }));
        let said = r.brief();
        (ordinary(&g.ws, &said), said)
    })
}

/// The same plants through the builtin file tools (no links: `create_directory`
/// and `write_file`, as an agent with policies/ci.toml's auto tiers would).
pub(super) fn component(s: &Scene, id: &str, attack: Attack) -> Observed {
    let g = ground(s, id, attack);
    let k = s.kit_in(g.ws.clone(), &fs_tools(""));
    let cfg = fsmonitor(&g.marker);
    let calls: Vec<(&str, Value)> = match attack {
        Attack::Commondir => vec![
            ("create_directory", json!({"path": ".git/x/objects"})),
            ("create_directory", json!({"path": ".git/x/refs"})),
            ("write_file", json!({"path": ".git/x/HEAD", "content": "ref: refs/heads/main\n"})),
            ("write_file", json!({"path": ".git/x/config", "content": cfg})),
            ("write_file", json!({"path": ".git/commondir", "content": "x\n"})),
        ],
        Attack::BareRoot => vec![
            ("create_directory", json!({"path": "objects"})),
            ("create_directory", json!({"path": "refs/heads"})),
            ("write_file", json!({"path": "config", "content": cfg})),
            ("write_file", json!({"path": "HEAD", "content": "ref: refs/heads/main\n"})),
        ],
        Attack::Nested => vec![
            ("create_directory", json!({"path": "sub/.git/objects"})),
            ("create_directory", json!({"path": "sub/.git/refs/heads"})),
            (
                "write_file",
                json!({"path": "sub/.git/HEAD", "content": "ref: refs/heads/main\n", "create_parents": true}),
            ),
            ("write_file", json!({"path": "sub/.git/config", "content": cfg, "create_parents": true})),
        ],
        Attack::NestedBare => vec![
            ("create_directory", json!({"path": "a/b/objects"})),
            ("create_directory", json!({"path": "a/b/refs/heads"})),
            ("write_file", json!({"path": "a/b/config", "content": cfg})),
            ("write_file", json!({"path": "a/b/HEAD", "content": "ref: refs/heads/main\n"})),
        ],
        Attack::AutoRun => AUTO_RUN_PLANTS
            .iter()
            .map(|p| ("write_file", json!({"path": p, "content": "echo ran\n", "create_parents": true})))
            .collect(),
        Attack::GitLink => vec![
            ("create_directory", json!({"path": "evil/objects"})),
            ("create_directory", json!({"path": "evil/refs/heads"})),
            ("write_file", json!({"path": "evil/config", "content": cfg})),
            ("write_file", json!({"path": "evil/HEAD", "content": "ref: refs/heads/main\n"})),
            ("write_file", json!({"path": "lib/.git", "content": "gitdir: ../evil\n"})),
        ],
        Attack::ModuleConfig => vec![("write_file", json!({"path": ".git/modules/lib/config", "content": cfg}))],
        Attack::WorktreeConfig => {
            vec![("write_file", json!({"path": ".git/worktrees/wt/config.worktree", "content": cfg}))]
        }
    };
    judged(&g, || {
        let said: Vec<String> = calls.iter().map(|(t, a)| format!("{t}: {}", brief(&k.call(t, a.clone())))).collect();
        let r = k.call("write_file", json!({"path": "ordinary-write.txt", "content": "ordinary"}));
        let said = said.join("; ");
        (if r.error.is_none() { Ok(()) } else { Err(brief(&r)) }, said)
    })
}

/// The same plants by a wrapped MCP server (tests/servers/files_server.py).
pub(super) fn server(s: &Scene, id: &str, attack: Attack) -> Observed {
    let g = ground(s, id, attack);
    let ws = g.ws.clone();
    let at = |rel: &str| ws.join(rel).display().to_string();
    let cfg = fsmonitor(&g.marker);
    let head = "ref: refs/heads/main\n";
    let mut ops: Vec<Value> = match attack {
        Attack::Commondir => vec![
            json!({"op": "mkdir", "path": at(".git/x")}),
            json!({"op": "write", "path": at(".git/x/config"), "text": cfg}),
            json!({"op": "symlink", "target": "../objects", "path": at(".git/x/objects")}),
            json!({"op": "symlink", "target": "../refs", "path": at(".git/x/refs")}),
            json!({"op": "write", "path": at(".git/x/HEAD"), "text": head}),
            json!({"op": "write", "path": at(".git/commondir"), "text": "x\n"}),
        ],
        Attack::BareRoot => vec![
            json!({"op": "mkdir", "path": at("objects")}),
            json!({"op": "mkdir", "path": at("refs/heads")}),
            json!({"op": "write", "path": at("config"), "text": cfg}),
            json!({"op": "write", "path": at("HEAD"), "text": head}),
        ],
        Attack::Nested => vec![
            json!({"op": "mkdir", "path": at("sub/.git/objects")}),
            json!({"op": "mkdir", "path": at("sub/.git/refs/heads")}),
            json!({"op": "write", "path": at("sub/.git/HEAD"), "text": head}),
            json!({"op": "write", "path": at("sub/.git/config"), "text": cfg}),
        ],
        Attack::NestedBare => vec![
            json!({"op": "mkdir", "path": at("a/b/objects")}),
            json!({"op": "mkdir", "path": at("a/b/refs/heads")}),
            json!({"op": "write", "path": at("a/b/config"), "text": cfg}),
            json!({"op": "write", "path": at("a/b/HEAD"), "text": head}),
        ],
        Attack::AutoRun => AUTO_RUN_PLANTS
            .iter()
            .flat_map(|p| {
                let dir = Path::new(p).parent().unwrap().display().to_string();
                [json!({"op": "mkdir", "path": at(&dir)}), json!({"op": "write", "path": at(p), "text": "echo ran\n"})]
            })
            .collect(),
        Attack::GitLink => vec![
            json!({"op": "mkdir", "path": at("evil/objects")}),
            json!({"op": "mkdir", "path": at("evil/refs/heads")}),
            json!({"op": "write", "path": at("evil/config"), "text": cfg}),
            json!({"op": "write", "path": at("evil/HEAD"), "text": head}),
            json!({"op": "write", "path": at("lib/.git"), "text": "gitdir: ../evil\n"}),
        ],
        Attack::ModuleConfig => vec![json!({"op": "write", "path": at(".git/modules/lib/config"), "text": cfg})],
        Attack::WorktreeConfig => {
            vec![json!({"op": "write", "path": at(".git/worktrees/wt/config.worktree"), "text": cfg})]
        }
    };
    ops.push(json!({"op": "sleep", "seconds": "1"}));
    ops.push(json!({"op": "write", "path": at("ordinary-write.txt"), "text": "ordinary"}));
    judged(&g, || {
        let r = call_in(s, &g.ws, &g.home, &server_policy(false), "files__batch", &json!({ "ops": ops }));
        let said = server_text(&r);
        (ordinary(&g.ws, &said), said)
    })
}

/// `fs.deny_read` of a glob over a directory the tool made unreadable in an
/// earlier call: the next call's expansion fails closed, naming the path.
pub(super) fn glob_unreadable(s: &Scene) -> Observed {
    let ws = s.ws("persist-glob-unreadable");
    std::fs::create_dir_all(ws.join("certs")).unwrap();
    std::fs::write(ws.join("certs/server.pem"), &s.secret).unwrap();
    let home = s.side_dir("home");
    let policy = shell_policy(false, "fs.deny_read = [\"{workspace}/**/*.pem\"]\n");
    let first = call_in(s, &ws, &home, &policy, "shell", &json!({"command": "chmod 000 certs; echo done"}));
    let second = call_in(
        s,
        &ws,
        &home,
        &policy,
        "shell",
        &json!({"command": "chmod 755 certs; cat certs/server.pem; echo ordinary > ordinary-write.txt"}),
    );
    let leaked = s.leaks(&second.all());
    let _ = std::process::Command::new("chmod").arg("755").arg(ws.join("certs")).status();
    let said = format!("chmod 000: {}; then: {}", clip(&first.brief(), 80), clip(&second.brief(), 200));
    // As root warden reads the unreadable directory anyway and masks the file;
    // as an ordinary user the call fails closed, naming the directory.
    let held = !leaked
        && (second.error_code() == "PERMISSION_DENIED" && second.error_message().contains("certs")
            || second.success() && !second.out().contains(&s.secret));
    Observed::new(held, format!("{said} → {}", if held { "held" } else { "the secret was read" }))
}

/// `fs.deny_read = {workspace}/certs/*.pem` and the builtin tools: moving the
/// directory away would take the file out of the pattern's reach.
pub(super) fn glob_rename(s: &Scene) -> Observed {
    let k = s.kit("persist-glob-rename", &fs_tools("fs.deny_read = [\"{workspace}/certs/*.pem\"]\n"));
    std::fs::create_dir_all(k.ws.join("certs")).unwrap();
    std::fs::write(k.ws.join("certs/k.pem"), &s.secret).unwrap();
    std::fs::create_dir_all(k.ws.join("plain")).unwrap();
    std::fs::write(k.ws.join("plain/x.txt"), "x").unwrap();
    let moved = k.call("move_file", json!({"source": "certs", "dest": "moved"}));
    let read = k.call("read_file", json!({"path": "moved/k.pem"}));
    let ordinary = k.call("move_file", json!({"source": "plain", "dest": "plain2"}));
    let leaked = s.leaks(&format!("{}{}", brief(&read), crate::util::kit::text(&read)));
    let held = moved.error.is_some() && !leaked && ordinary.error.is_none() && k.ws.join("certs/k.pem").exists();
    Observed::new(
        held,
        format!(
            "move_file certs moved: {}; read_file moved/k.pem: {}; move_file plain plain2: {}",
            clip(&brief(&moved), 140),
            clip(&brief(&read), 60),
            brief(&ordinary)
        ),
    )
}

/// Nothing of warden's in the workspace while a served call runs or after:
/// no placeholder, no layer; the tool's own writes appear only when it ends.
pub(super) fn no_trace(s: &Scene) -> Observed {
    let g = ground(s, "persist-no-trace", Attack::AutoRun);
    let before = listing(&g.ws);
    let done = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let watcher = {
        let (ws, done, seen, before) = (g.ws.clone(), done.clone(), seen.clone(), before.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::SeqCst) {
                for name in listing(&ws) {
                    if !before.contains(&name) && !seen.lock().unwrap().contains(&name) {
                        seen.lock().unwrap().push(name);
                    }
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        })
    };
    let r = call_in(
        s,
        &g.ws,
        &g.home,
        &shell_policy(false, ""),
        "shell",
        &json!({"command": format!("echo mid > midway.txt; sleep 1; {PYTHON} -c 'print(1)'; echo ordinary > ordinary-write.txt")}),
    );
    done.store(true, Ordering::SeqCst);
    let _ = watcher.join();
    let during: Vec<String> = seen.lock().unwrap().clone();
    let after: Vec<String> = listing(&g.ws).into_iter().filter(|n| !before.contains(n)).collect();
    let mut want_after = vec!["midway.txt".to_string(), "ordinary-write.txt".to_string()];
    want_after.sort();
    let mut got_after = after.clone();
    got_after.sort();
    // Every name seen during the call must be one the tool made (seen as the call
    // ends and its layer is applied), never one of warden's.
    let foreign: Vec<&String> = during.iter().filter(|n| !want_after.contains(n)).collect();
    let held = foreign.is_empty() && got_after == want_after;
    Observed::new(
        held,
        format!(
            "{}: new names while it ran {during:?}, after {got_after:?} → {}",
            clip(&r.brief(), 80),
            if held { "no trace" } else { "a trace" }
        ),
    )
}

fn listing(ws: &Path) -> Vec<String> {
    std::fs::read_dir(ws)
        .map(|d| d.filter_map(Result::ok).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default()
}
