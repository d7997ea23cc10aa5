//! Persistence: a tool that plants something the host runs later,
//! outside every sandbox — a git hook, a `core.fsmonitor` command, an `.envrc`
//! that direnv loads, editor tasks, shell start-up files, an MCP client's
//! configuration — and `fs.deny_read` by every route a tool has to a file.
//!
//! Each protected entry is attacked by every route the runtime offers, each
//! route in a fresh workspace prepared on the host: written directly, created
//! when absent, removed, renamed over, replaced through a rename of a parent,
//! replaced by a symbolic link, written through a symbolic link, hard-linked
//! both ways, and (for git) set through `git config`. It is attacked by a
//! process tool (`sh -c`), by the builtin file tools through the component
//! runtime, and by a wrapped MCP server (`tests/servers/files_server.py`).
//! The judge is the host: the entry must be byte for byte what it was (or
//! still absent, nothing left in its place), and `git status` and
//! `git commit` run on the host afterwards must run no planted hook or
//! fsmonitor (each would append to a marker file outside every grant). Each
//! route also does one ordinary write in the workspace, which must succeed,
//! so that a call refused whole never counts as contained.

use std::os::unix::fs::{MetadataExt, symlink};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::scene::{CANARY_VAR, PYTHON, WARDEN, set_mode};
use crate::util::kit::{brief, text};
use crate::util::{Run, cache_dir, clip, run_bounded};
use crate::{Case, Observed, Scene};

mod construction;
mod served;

const CLASS: &str = "persistence";

/// How the workspace's repository is laid out.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// `.git` a directory, hooks in `.git/hooks`, the usual dotfiles planted.
    Plain,
    /// As Plain, with `core.hooksPath = .githooks`.
    HooksPath,
    /// `.git` a file pointing to the git dir `.repo` (as `git worktree` and
    /// `--separate-git-dir` make).
    GitFile,
    /// The entry lies in `{home}`, which the tool may write.
    Home,
    /// No repository yet: the dotfiles only. Host git runs `git init` afterwards
    /// (which keeps hooks it finds in an existing `.git`), then commits.
    NoRepo,
}

/// One protected entry.
struct Target {
    layout: Layout,
    /// Relative to the workspace (to `{home}` for [`Layout::Home`]).
    rel: &'static str,
    /// Whether the host planted it before the call.
    exists: bool,
    /// Whether host git would run it (then `git status` and `git commit` are run on the host afterwards).
    git: bool,
}

const fn t(layout: Layout, rel: &'static str, exists: bool, git: bool) -> Target {
    Target { layout, rel, exists, git }
}

const GIT_HOOK: Target = t(Layout::Plain, ".git/hooks/pre-commit", true, true);
const GIT_HOOK_NEW: Target = t(Layout::Plain, ".git/hooks/post-commit", false, true);
const GIT_CONFIG: Target = t(Layout::Plain, ".git/config", true, true);
const GIT_INFO: Target = t(Layout::Plain, ".git/info/exclude", true, true);
const GIT_INFO_NEW: Target = t(Layout::Plain, ".git/info/attributes", false, true);
const GITMODULES: Target = t(Layout::Plain, ".gitmodules", true, true);
const HOOKSPATH: Target = t(Layout::HooksPath, ".githooks/pre-commit", true, true);
const HOOKSPATH_NEW: Target = t(Layout::HooksPath, ".githooks/post-commit", false, true);
const GITFILE_HOOK: Target = t(Layout::GitFile, ".repo/hooks/pre-commit", true, true);
const GITFILE_CONFIG: Target = t(Layout::GitFile, ".repo/config", true, true);
const ENVRC: Target = t(Layout::Plain, ".envrc", true, false);
const VSCODE: Target = t(Layout::Plain, ".vscode/tasks.json", true, false);
const VSCODE_NEW: Target = t(Layout::Plain, ".vscode/settings.json", false, false);
const IDEA: Target = t(Layout::Plain, ".idea/workspace.xml", true, false);
const BASHRC: Target = t(Layout::Plain, ".bashrc", true, false);
const PROFILE_NEW: Target = t(Layout::Plain, ".profile", false, false);
const MCP_JSON: Target = t(Layout::Plain, ".mcp.json", true, false);
const CLAUDE: Target = t(Layout::Plain, ".claude/settings.json", true, false);
const CURSOR_NEW: Target = t(Layout::Plain, ".cursor/mcp.json", false, false);
const HOME_BASHRC: Target = t(Layout::Home, ".bashrc", true, false);
const HOME_PROFILE_NEW: Target = t(Layout::Home, ".profile", false, false);
const NOREPO_HOOK_NEW: Target = t(Layout::NoRepo, ".git/hooks/pre-commit", false, true);

/// The ways one entry is attacked.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Route {
    /// Written in place (created, executable, when absent).
    Write,
    /// `edit_file` (component only).
    Edit,
    /// Removed.
    Remove,
    /// An executable file renamed over it (`mv evil F`).
    Rename,
    /// Copied over it (`copy_file`, component only).
    Copy,
    /// Replaced by a symbolic link to a file the tool controls.
    Symlink,
    /// Written through a symbolic link the tool (or, for components, an earlier call) made to it.
    ViaSymlink,
    /// Hard-linked out (`ln F hl`), then written through the link.
    HardlinkOut,
    /// A file the tool controls hard-linked in its place (`ln -f evil F`).
    HardlinkIn,
    /// The first directory under the granted root renamed away, then re-made with the entry planted.
    ParentRename,
}

impl Route {
    fn name(self) -> &'static str {
        match self {
            Route::Write => "write",
            Route::Edit => "edit",
            Route::Remove => "remove",
            Route::Rename => "rename-over",
            Route::Copy => "copy-over",
            Route::Symlink => "symlink",
            Route::ViaSymlink => "via-symlink",
            Route::HardlinkOut => "hardlink-out",
            Route::HardlinkIn => "hardlink-in",
            Route::ParentRename => "parent-rename",
        }
    }
}

/// The routes a runtime offers against `t`.
fn routes(t: &Target, runtime: &str) -> Vec<Route> {
    use Route::*;
    let all: &[Route] = match runtime {
        "process" => &[Write, Remove, Rename, Symlink, ViaSymlink, HardlinkOut, HardlinkIn, ParentRename],
        "component" => &[Write, Edit, Remove, Rename, Copy, ViaSymlink, ParentRename],
        _ => &[Write, Remove, Rename, Symlink, HardlinkOut, HardlinkIn, ParentRename],
    };
    let nested = t.rel.contains('/');
    all.iter()
        .copied()
        .filter(|r| t.exists || !matches!(r, Remove | HardlinkOut | Edit))
        .filter(|r| nested || *r != ParentRename)
        .collect()
}

/// One prepared workspace.
struct Prepared {
    ws: PathBuf,
    /// `{home}` of the call (and of host git).
    home: PathBuf,
    /// The entry (absolute).
    file: PathBuf,
    /// The granted root the entry lies under (the workspace or `{home}`).
    root: PathBuf,
    /// Appended to by a planted hook or fsmonitor when the host runs it.
    marker: PathBuf,
    /// The entry's state before the attack, and that of its first component under the root.
    before: (String, String),
}

impl Prepared {
    /// The first component of the entry under its root (`.git`, `.vscode`, …).
    fn top(&self) -> PathBuf {
        let rel = self.file.strip_prefix(&self.root).unwrap();
        self.root.join(rel.components().next().unwrap())
    }
    /// What a planted hook would say: append to the marker.
    fn evil(&self) -> String {
        format!("#!/bin/sh\necho planted-hook-ran >> {}\n", self.marker.display())
    }
}

/// The state of a path on the host, for comparison: its bytes, a link, a directory, or absent.
fn state(p: &Path) -> String {
    match std::fs::symlink_metadata(p) {
        Err(_) => "absent".into(),
        Ok(m) if m.file_type().is_symlink() => {
            format!("a symbolic link to {}", std::fs::read_link(p).map(|t| t.display().to_string()).unwrap_or_default())
        }
        Ok(m) if m.is_dir() => format!("a directory (inode {})", m.ino()),
        Ok(m) => format!(
            "a file of mode {:o}: {:?}",
            m.mode() & 0o7777,
            String::from_utf8_lossy(&std::fs::read(p).unwrap_or_default())
        ),
    }
}

/// Host git in `ws`, with a clean configuration (only the repository's own).
fn host_git(ws: &Path, home: &Path, args: &[&str]) -> (bool, String) {
    let out = Command::new("git")
        .current_dir(ws)
        .args(args)
        .env("HOME", home)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "host")
        .env("GIT_AUTHOR_EMAIL", "host@example.invalid")
        .env("GIT_COMMITTER_NAME", "host")
        .env("GIT_COMMITTER_EMAIL", "host@example.invalid")
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .env_remove("GIT_INDEX_FILE")
        .stdin(Stdio::null())
        .output()
        .expect("git on the host");
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), said)
}

fn git_ok(ws: &Path, home: &Path, args: &[&str]) {
    let (ok, said) = host_git(ws, home, args);
    assert!(ok, "host git {args:?} in {}: {said}", ws.display());
}

fn write_exec(p: &Path, text: &str) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
    set_mode(p, 0o755);
}

const BENIGN_HOOK: &str = "#!/bin/sh\nexit 0\n";

/// A repository in `ws` as `layout` wants it, prepared on the host: one commit,
/// a benign executable pre-commit hook, and the usual dotfiles.
fn prepare_repo(ws: &Path, home: &Path, layout: Layout) {
    match layout {
        Layout::NoRepo => {}
        Layout::GitFile => {
            git_ok(ws, home, &["init", "-q", "-b", "main", "--separate-git-dir", ".repo", "."]);
            std::fs::write(ws.join(".repo/info/exclude"), "/.repo/\n").unwrap();
        }
        _ => git_ok(ws, home, &["init", "-q", "-b", "main", "."]),
    }
    let files: &[(&str, &str)] = &[
        ("README.md", "hello\n"),
        (".gitmodules", "# no submodules\n"),
        (".envrc", "export GREETING=hello\n"),
        (".vscode/tasks.json", "{\"version\": \"2.0.0\", \"tasks\": []}\n"),
        (".idea/workspace.xml", "<project version=\"4\"/>\n"),
        (".bashrc", "# workspace bashrc\n"),
        (".mcp.json", "{\"mcpServers\": {}}\n"),
        (".claude/settings.json", "{}\n"),
    ];
    for (rel, body) in files {
        let p = ws.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, body).unwrap();
    }
    match layout {
        Layout::NoRepo => return,
        Layout::GitFile => write_exec(&ws.join(".repo/hooks/pre-commit"), BENIGN_HOOK),
        Layout::HooksPath => {
            git_ok(ws, home, &["config", "core.hooksPath", ".githooks"]);
            write_exec(&ws.join(".githooks/pre-commit"), BENIGN_HOOK);
        }
        _ => write_exec(&ws.join(".git/hooks/pre-commit"), BENIGN_HOOK),
    }
    git_ok(ws, home, &["add", "-A", "."]);
    git_ok(ws, home, &["commit", "-q", "-m", "prepared on the host"]);
}

/// A fresh workspace (and home) for one route against `t`.
fn prepare(s: &Scene, id: &str, t: &Target, ws: Option<PathBuf>) -> Prepared {
    let ws = ws.unwrap_or_else(|| s.ws(id));
    let home = s.side_dir("home");
    let marker = s.side_dir("marker").join("ran");
    let layout = if t.layout == Layout::Home { Layout::Plain } else { t.layout };
    prepare_repo(&ws, &home, layout);
    let root = if t.layout == Layout::Home {
        std::fs::write(home.join(".bashrc"), "# home bashrc\n").unwrap();
        home.canonicalize().unwrap()
    } else {
        ws.clone()
    };
    let file = root.join(t.rel);
    assert_eq!(t.exists, file.exists(), "the scene's layout for {}", t.rel);
    let mut p = Prepared { ws, home, file, root, marker, before: (String::new(), String::new()) };
    p.before = (state(&p.file), state(&p.top()));
    p
}

/// Judges one route on the host. `ran` says whether the ordinary write beside
/// the attack succeeded (the call really ran with its grants); `said` is the
/// route's evidence.
fn judge(p: &Prepared, t: &Target, route: Route, ran: Result<(), String>, said: &str) -> (bool, String) {
    let mut problems = Vec::new();
    if let Err(why) = ran {
        problems.push(format!("not proven: the ordinary write beside the attack failed ({why})"));
    }
    let after = state(&p.file);
    if after != p.before.0 {
        problems.push(format!("{} was {} and is now {}", t.rel, clip(&p.before.0, 60), clip(&after, 100)));
    }
    let top_after = state(&p.top());
    if p.top() != p.file && top_after != p.before.1 {
        let top = p.top();
        let top = top.strip_prefix(&p.root).unwrap_or(&top);
        problems.push(format!("{} was {} and is now {}", top.display(), p.before.1, clip(&top_after, 60)));
    }
    let mut git_said = String::new();
    if t.git {
        if t.layout == Layout::NoRepo {
            // The user starts a repository later: `git init` keeps the hooks of an existing `.git`.
            host_git(&p.ws, &p.home, &["init", "-q", "-b", "main", "."]);
        }
        let (_, st) = host_git(&p.ws, &p.home, &["status", "--porcelain"]);
        let (_, cm) = host_git(&p.ws, &p.home, &["commit", "-q", "--allow-empty", "-m", "host commit after the call"]);
        git_said = format!("host git status+commit: {}", clip(format!("{st}{cm}").trim(), 80));
    }
    if p.marker.exists() {
        problems.push(format!(
            "a planted hook RAN on the host ({})",
            std::fs::read_to_string(&p.marker).unwrap_or_default().trim()
        ));
    }
    let mut line = format!("{}: {}", route.name(), clip(said.trim(), 110));
    if problems.is_empty() {
        line.push_str(" → held");
        if t.git {
            line.push_str(" (no hook ran on the host)");
        }
    } else {
        line.push_str(&format!(" → {}", problems.join("; ")));
        if !git_said.is_empty() {
            line.push_str(&format!(" [{git_said}]"));
        }
    }
    (problems.is_empty(), line)
}

fn combine(lines: Vec<(bool, String)>) -> Observed {
    let ok = lines.iter().all(|(ok, _)| *ok);
    let text: Vec<String> = lines.into_iter().map(|(_, l)| l).collect();
    Observed::new(ok, text.join(" | "))
}

// ---------------------------------------------------------------- process tools

/// The policy of the process tool: `sh -c`, `{system}` and the workspace read,
/// the workspace and `{tmp}` written (and `{home}` for [`Layout::Home`]), plus `extra` lines.
fn shell_policy(home: bool, extra: &str) -> String {
    let (r, w) = if home { (", \"{home}\"", ", \"{home}\"") } else { ("", "") };
    format!(
        "version = 1\n[tools.shell]\nexec = [\"/bin/sh\", \"-c\", \"{{command}}\"]\ntier = \"auto\"\n\
         fs.read = [\"{{system}}\", \"{{workspace}}\"{r}]\nfs.write = [\"{{workspace}}\", \"{{tmp}}\"{w}]\n\
         env = {{ set = {{ PATH = \"/usr/local/bin:/usr/bin:/bin\", HOME = \"{{tmp}}\" }} }}\nlimits = {{ timeout = \"20s\" }}\n{extra}"
    )
}

/// The policy of the wrapped server.
fn server_policy(home: bool) -> String {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join("servers");
    let (r, w) = if home { (", \"{home}\"", ", \"{home}\"") } else { ("", "") };
    format!(
        "version = 1\n[servers.files]\nexec = [{PYTHON:?}, {:?}]\ntier = \"auto\"\n\
         fs.read = [\"{{system}}\", {:?}, \"{{workspace}}\"{r}]\nfs.write = [\"{{workspace}}\"{w}]\n\
         limits = {{ timeout = \"10s\" }}\n",
        dir.join("files_server.py").display().to_string(),
        dir.display().to_string()
    )
}

/// Runs `warden call TOOL ARGS` in `ws` with `HOME=home` under `policy`.
pub(crate) fn call_in(s: &Scene, ws: &Path, home: &Path, policy: &str, tool: &str, args: &Value) -> Run {
    let policy = s.policy_file(policy);
    let log = s.side_dir("log").join("audit.jsonl");
    let mut c = Command::new(WARDEN);
    c.current_dir(ws)
        .arg("--audit-log")
        .arg(&log)
        .arg("--workspace")
        .arg(ws)
        .arg("--policy")
        .arg(&policy)
        .arg("call")
        .arg(tool)
        .arg(args.to_string())
        .env(CANARY_VAR, &s.secret)
        .env("WARDEN_CACHE_DIR", cache_dir())
        .env("HOME", home)
        .env_remove("XDG_STATE_HOME")
        .env_remove("XDG_CACHE_HOME")
        .env_remove("RUST_LOG")
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    run_bounded(c, None)
}

/// A shell word.
fn q(p: &Path) -> String {
    format!("'{}'", p.display().to_string().replace('\'', "'\\''"))
}

/// The shell text of one route (cwd: the workspace).
fn route_script(p: &Prepared, route: Route) -> String {
    let f = q(&p.file);
    let dir = q(p.file.parent().unwrap());
    let mk = format!(
        "mkevil() {{ {PYTHON} -c 'import os,sys; fd=os.open(sys.argv[1], os.O_WRONLY|os.O_CREAT|os.O_TRUNC, 0o755); \
         os.write(fd, sys.argv[2].encode())' \"$1\" {}; }}; ",
        q(Path::new(&p.evil()))
    );
    let attack = match route {
        Route::Write => format!("mkevil {f}"),
        Route::Remove => format!("rm -f {f}"),
        Route::Rename => format!("mkevil evil && mv -f evil {f}"),
        Route::Symlink => format!("mkevil evil && ln -sfn \"$PWD/evil\" {f}"),
        Route::ViaSymlink => format!(
            "ln -sfn {f} lnk; mkevil lnk; ln -sfn {dir} lnkdir; mkevil lnkdir/{}",
            q(Path::new(p.file.file_name().unwrap()))
        ),
        Route::HardlinkOut => format!("ln {f} hl && mkevil hl"),
        Route::HardlinkIn => format!("mkevil evil && ln -f evil {f}"),
        Route::ParentRename => format!("mv {} moved-away; mkdir -p {dir}; mkevil {f}", q(&p.top())),
        Route::Edit | Route::Copy => unreachable!("component routes"),
    };
    // The attacker makes the parent first when the entry's directory is absent (`.cursor`).
    format!("{mk}mkdir -p {dir} 2>/dev/null; {attack}; echo \"exit=$?\"; echo ordinary > ordinary-write.txt")
}

fn ordinary_written(ws: &Path, name: &str, r: &Run) -> Result<(), String> {
    if std::fs::read_to_string(ws.join(name)).is_ok_and(|t| t.trim() == "ordinary") {
        Ok(())
    } else {
        Err(crate::util::clip(&r.brief(), 120))
    }
}

fn process_case(s: &Scene, t: &Target) -> Observed {
    let lines = routes(t, "process")
        .into_iter()
        .map(|route| {
            let p = prepare(s, "persist-p", t, None);
            let r = call_in(
                s,
                &p.ws,
                &p.home,
                &shell_policy(t.layout == Layout::Home, ""),
                "shell",
                &json!({ "command": route_script(&p, route) }),
            );
            let ran = ordinary_written(&p.ws, "ordinary-write.txt", &r);
            judge(&p, t, route, ran, &r.brief())
        })
        .collect();
    combine(lines)
}

/// `git config KEY VALUE` inside the sandbox (the repository's own config file),
/// then host git. `layout` picks the repository.
fn git_config_case(s: &Scene, layout: Layout, key: &str, value: &str) -> Observed {
    let target = t(layout, if layout == Layout::GitFile { ".repo/config" } else { ".git/config" }, true, true);
    let p = prepare(s, "persist-gitcfg", &target, None);
    let value = value.replace("MARKER", &p.marker.display().to_string());
    let mk = format!(
        "mkdir -p evilhooks; {PYTHON} -c 'import os,sys; fd=os.open(sys.argv[1], os.O_WRONLY|os.O_CREAT|os.O_TRUNC, 0o755); \
         os.write(fd, sys.argv[2].encode())' evilhooks/pre-commit {}; ",
        q(Path::new(&p.evil()))
    );
    let script = format!(
        "git rev-parse --git-dir >/dev/null && echo git-works; {mk}git config {key} {}; echo \"exit=$?\"; \
         echo ordinary > ordinary-write.txt",
        q(Path::new(&value))
    );
    let r = call_in(s, &p.ws, &p.home, &shell_policy(false, ""), "shell", &json!({ "command": script }));
    let mut ran = ordinary_written(&p.ws, "ordinary-write.txt", &r);
    if ran.is_ok() && !r.out().contains("git-works") {
        ran = Err(format!("git does not run inside the sandbox: {}", clip(&r.brief(), 120)));
    }
    let (ok, mut line) = judge(&p, &target, Route::Write, ran, &r.brief());
    if r.err().contains("chmod on") {
        // git copies the old file's mode onto its lock file; seccomp refuses a uid-0 tool every chmod.
        line.push_str(
            " (as uid 0, git's chmod of its lock file is refused by seccomp before the protection is reached; \
             the raw writes of persist-git-config show the protection itself)",
        );
    }
    Observed::new(ok, line.replacen("write: ", &format!("git config {key}: "), 1))
}

// ---------------------------------------------------------------- builtin file tools

/// Every builtin fs tool at tier auto, reading and writing the workspace, with `extra` lines for each.
fn fs_tools(extra: &str) -> String {
    [
        "read_file",
        "list_directory",
        "search_files",
        "grep",
        "file_info",
        "write_file",
        "edit_file",
        "create_directory",
        "copy_file",
        "move_file",
        "delete_file",
    ]
    .iter()
    .map(|n| {
        format!(
            "[tools.{n}]\nplugin = \"fs\"\ntier = \"auto\"\nfs.read = [\"{{workspace}}\"]\nfs.write = [\"{{workspace}}\"]\n{extra}"
        )
    })
    .collect()
}

fn component_case(s: &Scene, t: &Target) -> Observed {
    let lines = routes(t, "component")
        .into_iter()
        .map(|route| {
            let k = s.kit("persist-c", &fs_tools(""));
            let p = prepare(s, "persist-c", t, Some(k.ws.clone()));
            let rel = t.rel;
            let evil = p.evil();
            if route == Route::ViaSymlink {
                // As an earlier call of a process tool could have left it: relative, so that it stays inside the preopen.
                symlink(rel, p.ws.join("lnk")).unwrap();
            }
            let parent = Path::new(rel).parent().filter(|d| !d.as_os_str().is_empty());
            let mut calls: Vec<(&str, Value)> = match (t.exists, parent) {
                // The attacker makes the parent first when the entry's directory is absent (`.cursor`).
                (false, Some(d)) if route != Route::ParentRename => vec![("create_directory", json!({ "path": d }))],
                _ => Vec::new(),
            };
            calls.extend(match route {
                Route::Write => vec![("write_file", json!({"path": rel, "content": evil}))],
                Route::Edit => {
                    let old = std::fs::read_to_string(&p.file).unwrap();
                    vec![("edit_file", json!({"path": rel, "old": old, "new": evil}))]
                }
                Route::Remove => vec![("delete_file", json!({"path": rel}))],
                Route::Rename => vec![
                    ("write_file", json!({"path": "evil", "content": evil})),
                    ("move_file", json!({"source": "evil", "dest": rel})),
                ],
                Route::Copy => vec![
                    ("write_file", json!({"path": "evil", "content": evil})),
                    ("copy_file", json!({"source": "evil", "dest": rel})),
                ],
                Route::ViaSymlink => vec![("write_file", json!({"path": "lnk", "content": evil}))],
                Route::ParentRename => {
                    let top = p.top();
                    let top = top.file_name().unwrap().to_str().unwrap();
                    vec![
                        ("move_file", json!({"source": top, "dest": "moved-away"})),
                        ("write_file", json!({"path": rel, "content": evil, "create_parents": true})),
                    ]
                }
                _ => unreachable!("process routes"),
            });
            let said: Vec<String> =
                calls.iter().map(|(tool, args)| format!("{tool}: {}", brief(&k.call(tool, args.clone())))).collect();
            let ordinary = k.call("write_file", json!({"path": "ordinary-write.txt", "content": "ordinary"}));
            let ran = if ordinary.error.is_none() { Ok(()) } else { Err(brief(&ordinary)) };
            judge(&p, t, route, ran, &said.join("; "))
        })
        .collect();
    combine(lines)
}

// ---------------------------------------------------------------- a wrapped MCP server

fn server_case(s: &Scene, t: &Target) -> Observed {
    let lines = routes(t, "server")
        .into_iter()
        .map(|route| {
            let p = prepare(s, "persist-s", t, None);
            let policy = server_policy(t.layout == Layout::Home);
            let f = p.file.display().to_string();
            let evil_path = p.ws.join("evil").display().to_string();
            let lnk = p.ws.join("lnk").display().to_string();
            let write_evil = json!({"op": "write", "path": evil_path, "text": p.evil(), "mode": "755"});
            // One call per route (one server start): the server's `batch` runs the operations in order.
            let mut ops: Vec<Value> = Vec::new();
            if !t.exists && route != Route::ParentRename {
                ops.push(json!({"op": "mkdir", "path": p.file.parent().unwrap()}));
            }
            ops.extend(match route {
                Route::Write => vec![json!({"op": "write", "path": f, "text": p.evil(), "mode": "755"})],
                Route::Remove => vec![json!({"op": "remove", "path": f})],
                Route::Rename => vec![write_evil, json!({"op": "rename", "source": evil_path, "dest": f})],
                Route::Symlink => vec![
                    write_evil,
                    json!({"op": "symlink", "target": evil_path, "path": lnk}),
                    json!({"op": "rename", "source": lnk, "dest": f}),
                ],
                Route::HardlinkOut => vec![
                    json!({"op": "link", "source": f, "dest": lnk}),
                    json!({"op": "write", "path": lnk, "text": p.evil(), "mode": "755"}),
                ],
                Route::HardlinkIn if t.exists => vec![
                    write_evil,
                    json!({"op": "link", "source": evil_path, "dest": lnk}),
                    json!({"op": "rename", "source": lnk, "dest": f}),
                ],
                Route::HardlinkIn => vec![write_evil, json!({"op": "link", "source": evil_path, "dest": f})],
                Route::ParentRename => vec![
                    json!({"op": "rename", "source": p.top(), "dest": p.ws.join("moved-away")}),
                    json!({"op": "mkdir", "path": p.file.parent().unwrap()}),
                    json!({"op": "write", "path": f, "text": p.evil(), "mode": "755"}),
                ],
                _ => unreachable!("not a server route"),
            });
            let ok_path = p.ws.join("ordinary-write.txt").display().to_string();
            ops.push(json!({"op": "write", "path": ok_path, "text": "ordinary"}));
            let r = call_in(s, &p.ws, &p.home, &policy, "files__batch", &json!({ "ops": ops }));
            let ran = ordinary_written(&p.ws, "ordinary-write.txt", &r);
            judge(&p, t, route, ran, &server_text(&r))
        })
        .collect();
    combine(lines)
}

/// What a server tool answered (its text), or warden's refusal.
fn server_text(r: &Run) -> String {
    let doc = r.doc();
    match doc["result"]["content"][0]["text"].as_str() {
        Some(t) => clip(&t.replace('\n', "; "), 160),
        None => r.brief(),
    }
}

// ---------------------------------------------------------------- fs.deny_read

const DENY_READ: &str = "fs.deny_read = [\"{workspace}/private\", \"{workspace}/**/*.pem\"]\n";

/// A workspace with `private/` (the secret, and a file whose name must not be
/// listed), `keys/server.pem` (the secret), `ok.txt` (readable).
fn deny_ws(s: &Scene, ws: &Path) -> String {
    let name = format!("NAME-CANARY-{}", std::process::id());
    std::fs::create_dir_all(ws.join("private")).unwrap();
    std::fs::create_dir_all(ws.join("keys")).unwrap();
    std::fs::create_dir_all(ws.join("sub")).unwrap();
    std::fs::write(ws.join("private/secret.txt"), &s.secret).unwrap();
    std::fs::write(ws.join("private").join(&name), "x").unwrap();
    std::fs::write(ws.join("keys/server.pem"), &s.secret).unwrap();
    std::fs::write(ws.join("ok.txt"), "visible-control\n").unwrap();
    name
}

/// One process route against `fs.deny_read`: runs `command` (with `cat ok.txt`
/// after it as the control); contained when the call ran, the control was read,
/// neither the secret nor the hidden name appears, and the host files are intact.
fn deny_process(s: &Scene, command: &str, setup: fn(&Path)) -> Observed {
    let ws = s.ws("deny-read");
    let name = deny_ws(s, &ws);
    setup(&ws);
    let home = s.side_dir("home");
    let script = format!("{command}; echo \"exit=$?\"; cat ok.txt");
    let r = call_in(s, &ws, &home, &shell_policy(false, DENY_READ), "shell", &json!({ "command": script }));
    let all = r.all();
    let mut problems = Vec::new();
    if !r.out().contains("visible-control") {
        problems.push("not proven: the control file was not read".to_string());
    }
    if s.leaks(&all) {
        problems.push("THE SECRET was shown".into());
    }
    if all.contains(&name) {
        problems.push("a name inside the denied directory was listed".into());
    }
    if std::fs::read_to_string(ws.join("private/secret.txt")).ok().as_deref() != Some(s.secret.as_str())
        || !ws.join("private").join(&name).exists()
    {
        problems.push("the denied directory was changed on the host".into());
    }
    let line = clip(&r.brief().replace(&name, "[HIDDEN NAME]"), 220);
    if problems.is_empty() {
        Observed::new(true, line)
    } else {
        Observed::new(false, format!("{}: {line}", problems.join("; ")))
    }
}

fn deny_component(s: &Scene, calls: &[(&str, Value)], setup: fn(&Path)) -> Observed {
    let k = s.kit("deny-read-c", &fs_tools(DENY_READ));
    let name = deny_ws(s, &k.ws);
    setup(&k.ws);
    let mut problems = Vec::new();
    let mut said = Vec::new();
    for (tool, args) in calls {
        let r = k.call(tool, args.clone());
        let t = text(&r);
        if s.leaks(&t) {
            problems.push(format!("{tool} showed THE SECRET"));
        }
        if t.contains(&name) {
            problems.push(format!("{tool} listed a name inside the denied directory"));
        }
        // A copy or a move that succeeded is judged by what it left readable.
        said.push(format!("{tool}: {}", brief(&r).replace(&name, "[HIDDEN NAME]")));
    }
    for leftover in ["copy.txt", "moved/secret.txt"] {
        let r = k.call("read_file", json!({"path": leftover}));
        if s.leaks(&text(&r)) {
            problems.push(format!("the secret was readable at {leftover} afterwards"));
        }
    }
    let control = k.call("read_file", json!({"path": "ok.txt"}));
    if !text(&control).contains("visible-control") {
        problems.push(format!("not proven: the control file was not read ({})", brief(&control)));
    }
    if std::fs::read_to_string(k.ws.join("private/secret.txt")).ok().as_deref() != Some(s.secret.as_str()) {
        problems.push("the denied file was changed on the host".into());
    }
    let line = clip(&said.join("; "), 260);
    if problems.is_empty() {
        Observed::new(true, line)
    } else {
        Observed::new(false, format!("{}: {line}", problems.join("; ")))
    }
}

fn nothing(_: &Path) {}

// ---------------------------------------------------------------- fs.deny_write and fs.unprotect

/// `fs.deny_write = ["{workspace}/vendor"]` against a process tool: write, remove, rename into and out of,
/// a parent rename and a link; `vendor/lib.txt` must be unchanged, the ordinary write must succeed.
fn deny_write_process(s: &Scene) -> Observed {
    let ws = s.ws("deny-write");
    std::fs::create_dir_all(ws.join("vendor")).unwrap();
    std::fs::write(ws.join("vendor/lib.txt"), "vendored\n").unwrap();
    let home = s.side_dir("home");
    let script = "cat vendor/lib.txt; echo evil > vendor/lib.txt; rm -f vendor/lib.txt; echo x > vendor/new.txt; \
                  mv vendor v2; ln -s /tmp vendor/l; echo evil > e && mv -f e vendor/lib.txt; echo \"exit=$?\"; \
                  echo ordinary > ordinary-write.txt";
    let r = call_in(
        s,
        &ws,
        &home,
        &shell_policy(false, "fs.deny_write = [\"{workspace}/vendor\"]\n"),
        "shell",
        &json!({ "command": script }),
    );
    let intact = std::fs::read_to_string(ws.join("vendor/lib.txt")).ok().as_deref() == Some("vendored\n")
        && !ws.join("vendor/new.txt").exists()
        && !ws.join("v2").exists()
        && std::fs::symlink_metadata(ws.join("vendor/l")).is_err();
    let read = r.out().contains("vendored");
    let ran = ordinary_written(&ws, "ordinary-write.txt", &r);
    let ok = intact && read && ran.is_ok();
    let why = match (intact, read, ran) {
        (false, _, _) => "vendor/ was changed on the host: ".to_string(),
        (_, false, _) => "not proven: vendor/lib.txt was not readable: ".to_string(),
        (_, _, Err(e)) => format!("not proven: {e}: "),
        _ => String::new(),
    };
    Observed::new(ok, format!("{why}{}", clip(&r.brief(), 240)))
}

/// The same through the builtin tools.
fn deny_write_builtin(s: &Scene) -> Observed {
    let k = s.kit("deny-write-c", &fs_tools("fs.deny_write = [\"{workspace}/vendor\"]\n"));
    std::fs::create_dir_all(k.ws.join("vendor")).unwrap();
    std::fs::write(k.ws.join("vendor/lib.txt"), "vendored\n").unwrap();
    let calls = [
        ("write_file", json!({"path": "vendor/lib.txt", "content": "evil"})),
        ("edit_file", json!({"path": "vendor/lib.txt", "old": "vendored", "new": "evil"})),
        ("delete_file", json!({"path": "vendor/lib.txt"})),
        ("write_file", json!({"path": "vendor/new.txt", "content": "x"})),
        ("move_file", json!({"source": "vendor", "dest": "v2"})),
        ("create_directory", json!({"path": "vendor/sub"})),
    ];
    let said: Vec<String> = calls.iter().map(|(t, a)| format!("{t}: {}", brief(&k.call(t, a.clone())))).collect();
    let read = text(&k.call("read_file", json!({"path": "vendor/lib.txt"}))).contains("vendored");
    let ordinary = k.call("write_file", json!({"path": "ordinary-write.txt", "content": "ordinary"}));
    let intact = std::fs::read_to_string(k.ws.join("vendor/lib.txt")).ok().as_deref() == Some("vendored\n")
        && !k.ws.join("vendor/new.txt").exists()
        && !k.ws.join("v2").exists()
        && !k.ws.join("vendor/sub").exists();
    let ok = intact && read && ordinary.error.is_none();
    let why = if !intact {
        "vendor/ was changed on the host: "
    } else if !read || ordinary.error.is_some() {
        "not proven (the read or the ordinary write failed): "
    } else {
        ""
    };
    Observed::new(ok, format!("{why}{}", clip(&said.join("; "), 300)))
}

/// `fs.unprotect = ["{workspace}/.envrc"]` releases that entry only: the tool writes
/// `.envrc`, and `.git/hooks/pre-commit` stays protected in the same call.
fn unprotect_one(s: &Scene) -> Observed {
    let t = GIT_HOOK;
    let p = prepare(s, "unprotect", &t, None);
    let script = format!(
        "echo 'export RELEASED=1' > .envrc; echo \"envrc=$?\"; printf '%s\\n' {} > .git/hooks/pre-commit; echo \"hook=$?\"; \
         echo ordinary > ordinary-write.txt",
        q(Path::new(&p.evil()))
    );
    let r = call_in(
        s,
        &p.ws,
        &p.home,
        &shell_policy(false, "fs.unprotect = [\"{workspace}/.envrc\"]\n"),
        "shell",
        &json!({ "command": script }),
    );
    let released = std::fs::read_to_string(p.ws.join(".envrc")).is_ok_and(|t| t.contains("RELEASED"));
    let ran = ordinary_written(&p.ws, "ordinary-write.txt", &r);
    let (held, line) = judge(&p, &t, Route::Write, ran, &r.brief());
    let ok = held && released;
    let pre = if released { "" } else { "the released .envrc could not be written: " };
    Observed::new(ok, format!("{pre}.envrc released: {released}; {line}"))
}

// ---------------------------------------------------------------- the table

fn case(
    id: &'static str,
    runtime: &'static str,
    attempt: String,
    expected: &'static str,
    run: fn(&Scene) -> Observed,
) -> Case {
    Case { id, class: CLASS, runtime, attempt: Box::leak(attempt.into_boxed_str()), expected, heavy: false, run }
}

fn route_names(t: &Target, runtime: &str) -> String {
    routes(t, runtime).iter().map(|r| r.name()).collect::<Vec<_>>().join(", ")
}

const EXPECTED_P: &str = "every route refused (read-only bind or placeholder in the call's mount namespace); \
     on the host the entry is unchanged and git runs no planted hook";
const EXPECTED_C: &str =
    "every route refused by warden's WASI host; on the host the entry is unchanged and git runs no planted hook";
const EXPECTED_S: &str = "every route refused in the server's mount namespace; on the host the entry is unchanged";

macro_rules! entries {
    ($v:ident; $($key:literal => $target:ident),* $(,)?) => {$(
        $v.push(case(
            concat!("persist-", $key, "/process"),
            "process",
            format!("sh -c against {} ({}): {}", $target.rel, if $target.exists { "planted" } else { "absent" }, route_names(&$target, "process")),
            EXPECTED_P,
            |s| process_case(s, &$target),
        ));
        if $target.layout != Layout::Home {
            $v.push(case(
                concat!("persist-", $key, "/builtin"),
                "component",
                format!("builtin fs tools against {} ({}): {}", $target.rel, if $target.exists { "planted" } else { "absent" }, route_names(&$target, "component")),
                EXPECTED_C,
                |s| component_case(s, &$target),
            ));
        }
        $v.push(case(
            concat!("persist-", $key, "/server"),
            "process",
            format!("a wrapped MCP server against {} ({}): {}", $target.rel, if $target.exists { "planted" } else { "absent" }, route_names(&$target, "server")),
            EXPECTED_S,
            |s| server_case(s, &$target),
        ));
    )*};
}

pub(crate) fn cases() -> Vec<Case> {
    let mut v = Vec::new();
    entries!(v;
        "git-hooks" => GIT_HOOK,
        "git-hooks-new" => GIT_HOOK_NEW,
        "git-config" => GIT_CONFIG,
        "git-info" => GIT_INFO,
        "git-info-new" => GIT_INFO_NEW,
        "gitmodules" => GITMODULES,
        "hookspath" => HOOKSPATH,
        "hookspath-new" => HOOKSPATH_NEW,
        "gitfile-hooks" => GITFILE_HOOK,
        "gitfile-config" => GITFILE_CONFIG,
        "envrc" => ENVRC,
        "vscode" => VSCODE,
        "vscode-new" => VSCODE_NEW,
        "idea" => IDEA,
        "bashrc" => BASHRC,
        "profile-new" => PROFILE_NEW,
        "mcp-json" => MCP_JSON,
        "claude" => CLAUDE,
        "cursor-new" => CURSOR_NEW,
        "home-bashrc" => HOME_BASHRC,
        "home-profile-new" => HOME_PROFILE_NEW,
        "norepo-git-new" => NOREPO_HOOK_NEW,
    );
    let git = |id: &'static str, key: &str, run: fn(&Scene) -> Observed| {
        case(
            id,
            "process",
            format!(
                "git config {key} (a command, or a hooks directory the tool fills) inside the sandbox, then git status and git commit on the host"
            ),
            "git config fails (its config file is read-only); the host's git runs nothing planted",
            run,
        )
    };
    const FSMONITOR: &str = "echo planted-fsmonitor-ran >> MARKER";
    v.push(git("persist-git-fsmonitor/process", "core.fsmonitor", |s| {
        git_config_case(s, Layout::Plain, "core.fsmonitor", FSMONITOR)
    }));
    v.push(git("persist-git-set-hookspath/process", "core.hooksPath", |s| {
        git_config_case(s, Layout::Plain, "core.hooksPath", "evilhooks")
    }));
    v.push(git("persist-gitfile-fsmonitor/process", "core.fsmonitor", |s| {
        git_config_case(s, Layout::GitFile, "core.fsmonitor", FSMONITOR)
    }));
    v.push(git("persist-gitfile-set-hookspath/process", "core.hooksPath", |s| {
        git_config_case(s, Layout::GitFile, "core.hooksPath", "evilhooks")
    }));

    v.push(case(
        "deny-write/process",
        "process",
        "fs.deny_write = {workspace}/vendor: overwrite, remove, create, rename the directory, link into it, rename over".into(),
        "each refused (read-only); vendor/lib.txt readable and unchanged; the ordinary write succeeds",
        deny_write_process,
    ));
    v.push(case(
        "deny-write/builtin",
        "component",
        "fs.deny_write = {workspace}/vendor: write_file, edit_file, delete_file, a new file, move_file of the directory, create_directory".into(),
        "each refused by the WASI host; vendor/lib.txt readable and unchanged; the ordinary write succeeds",
        deny_write_builtin,
    ));
    let served = |id: &'static str, attempt: &str, expected: &'static str, run: fn(&Scene) -> Observed| {
        case(id, "process", attempt.to_string(), expected, run)
    };
    v.push(served(
        "persist-served-reuse/process",
        "one warden serve: every route against an absent .profile while another call runs, then back to back",
        "each call's writes reach the workspace only when it ends, judged: .profile never appears, the ordinary \
         writes do; nothing of warden's in the workspace at any time",
        served::reuse,
    ));
    v.push(served(
        "persist-served-chmod/process",
        "one warden serve: a call makes the workspace unsearchable (chmod 000) while the next call starts and writes \
         .profile",
        "the chmod stays in the first call's layer (the host's mode never changes); the next call runs; the name \
         absent once serve ends",
        served::unsearchable,
    ));
    v.push(served(
        "persist-served-killed/process",
        "warden serve killed (SIGKILL) while a call has written .profile in its layer, then warden call writes it",
        "nothing of the killed call reaches the workspace; the next call's .profile is refused; the name absent",
        served::killed,
    ));
    use construction::Attack;
    let planted = |what: &str| {
        format!(
            "{what}, then real git (status, log, commit) on the host in a prompt-like loop while the call runs and after"
        )
    };
    macro_rules! built {
        ($v:ident; $($name:literal, $attack:expr, $what:literal;)*) => {$(
            $v.push(case(concat!("persist-", $name, "/process"), "process", planted($what),
                "the plant stays in the call's layer; refused when it ends; host git runs nothing", |s| {
                construction::process(s, concat!("persist-", $name, "-p"), $attack)
            }));
            $v.push(case(concat!("persist-", $name, "/builtin"), "component", planted($what),
                "each write that makes it refused by the WASI host; host git runs nothing", |s| {
                construction::component(s, concat!("persist-", $name, "-c"), $attack)
            }));
            $v.push(case(concat!("persist-", $name, "/server"), "process", planted($what),
                "the server's layer is applied when its request ends, the plant refused; host git runs nothing", |s| {
                construction::server(s, concat!("persist-", $name, "-s"), $attack)
            }));
        )*};
    }
    built!(v;
        "commondir", Attack::Commondir, ".git/commondir pointed at .git/x, whose config sets core.fsmonitor";
        "bare-root", Attack::BareRoot, "a monorepo package as the workspace: HEAD, objects, refs and a config with core.fsmonitor at its root";
        "nested-repo", Attack::Nested, "sub/.git with HEAD, objects, refs and a config with core.fsmonitor";
        "nested-bare", Attack::NestedBare, "a/b/ as a bare repository (HEAD, objects, refs, a config with core.fsmonitor)";
        "autorun-depth", Attack::AutoRun, "the editors', agents', shells' and hook managers' files at depth (.envrc, .vscode, .mcp.json, .claude, .cursor, .gemini, .codex, .continue, .idea, .pre-commit-config.yaml, lefthook.yml, .lefthook.yml, mise.toml, .devcontainer)";
        "gitlink", Attack::GitLink, "a submodule's .git file repointed (gitdir: ../evil) at a repository the tool made with a config that sets core.fsmonitor";
        "module-config", Attack::ModuleConfig, "an existing submodule's own config (.git/modules/lib/config) given core.fsmonitor";
        "worktree-config", Attack::WorktreeConfig, "an existing worktree's config.worktree given core.fsmonitor";
    );
    v.push(case(
        "persist-glob-unreadable/process",
        "process",
        "fs.deny_read = {workspace}/**/*.pem: one call makes certs/ unreadable (chmod 000), the next makes it readable \
         again and reads certs/server.pem"
            .into(),
        "the second call fails closed naming certs/ (an ordinary user), or the file is masked (root reads the \
         directory anyway); the secret never appears",
        construction::glob_unreadable,
    ));
    v.push(case(
        "persist-glob-rename/builtin",
        "component",
        "fs.deny_read = {workspace}/certs/*.pem: move_file certs moved, then read_file moved/k.pem".into(),
        "the move refused (the directory holds a file the pattern covers); the secret never appears; moving a \
         directory without such files works",
        construction::glob_rename,
    ));
    v.push(case(
        "persist-no-trace/process",
        "process",
        "a call that writes a file and runs for a second while the host lists the workspace every 5 ms".into(),
        "no name of warden's ever appears (no placeholder, no layer); the tool's own files appear when it ends",
        construction::no_trace,
    ));
    v.push(case(
        "persist-unprotect-one/process",
        "process",
        "fs.unprotect = {workspace}/.envrc: write .envrc (released) and .git/hooks/pre-commit (not released) in one call".into(),
        ".envrc written; the hook refused and unchanged; host git runs no planted hook",
        unprotect_one,
    ));
    let dp = |id: &'static str, attempt: &str, run: fn(&Scene) -> Observed| {
        case(
            id,
            "process",
            format!("{attempt} (fs.deny_read = {{workspace}}/private and **/*.pem)"),
            "Permission denied or no such file; the secret and the names inside never appear; the control file is read",
            run,
        )
    };
    v.push(dp("deny-read-absolute/process", "cat WS/private/secret.txt by its absolute path", |s| {
        deny_process(s, "cat \"$PWD/private/secret.txt\"", nothing)
    }));
    v.push(dp("deny-read-dotdot/process", "cat sub/../private/secret.txt and ../WS/private/secret.txt", |s| {
        deny_process(s, "cat sub/../private/secret.txt; cat ../\"$(basename \"$PWD\")\"/private/secret.txt", nothing)
    }));
    v.push(dp(
        "deny-read-symlink-made/process",
        "ln -s private/secret.txt l; cat l; ln -s private d; cat d/secret.txt",
        |s| deny_process(s, "ln -s private/secret.txt l; cat l; ln -s private d; cat d/secret.txt", nothing),
    ));
    v.push(dp("deny-read-symlink-planted/process", "cat a link the host planted to private/secret.txt", |s| {
        deny_process(s, "cat planted", |ws| symlink(ws.join("private/secret.txt"), ws.join("planted")).unwrap())
    }));
    v.push(dp("deny-read-hardlink-made/process", "ln private/secret.txt hl; cat hl", |s| {
        deny_process(s, "ln private/secret.txt hl; cat hl", nothing)
    }));
    v.push(dp("deny-read-copy/process", "cp private/secret.txt c; cp -r private pc; cat c pc/*", |s| {
        deny_process(s, "cp private/secret.txt c; cp -r private pc; cat c pc/*", nothing)
    }));
    v.push(dp("deny-read-proc-cwd/process", "cat /proc/self/cwd/private/secret.txt", |s| {
        deny_process(s, "cat /proc/self/cwd/private/secret.txt", nothing)
    }));
    v.push(dp("deny-read-grep/process", "grep -r ESCAPE-SECRET over the workspace", |s| {
        deny_process(s, "grep -r ESCAPE-SECRET . ", nothing)
    }));
    v.push(dp("deny-read-tar/process", "tar c of the workspace, to stdout", |s| {
        deny_process(s, "tar cf - . 2>&1 | strings", nothing)
    }));
    v.push(dp("deny-read-ls/process", "ls -la private; find . ; ls private/*", |s| {
        deny_process(s, "ls -la private; find . ; ls private/*", nothing)
    }));
    v.push(dp("deny-read-rename/process", "mv private p2 && cat p2/secret.txt; rm -rf private", |s| {
        deny_process(s, "mv private p2 && cat p2/secret.txt; rm -rf private", nothing)
    }));
    v.push(dp(
        "deny-read-glob/process",
        "cat keys/server.pem (denied by **/*.pem); cp keys/server.pem k.txt; cat k.txt",
        |s| deny_process(s, "cat keys/server.pem; cp keys/server.pem k.txt; cat k.txt", nothing),
    ));
    v.push(dp("deny-read-python/process", "python3: os.open by an O_PATH descriptor of private, then openat beneath it", |s| {
        deny_process(
            s,
            &format!(
                "{PYTHON} -c 'import os\nd=os.open(\"private\", os.O_PATH)\ntry:\n print(open(\"/proc/self/fd/%d/secret.txt\" % d).read())\nexcept OSError as e: print(\"refused\", e)\ntry:\n print(os.listdir(\"/proc/self/fd/%d\" % d))\nexcept OSError as e: print(\"refused\", e)'"
            ),
            nothing,
        )
    }));

    let dc = |id: &'static str, attempt: &str, run: fn(&Scene) -> Observed| {
        case(
            id,
            "component",
            format!("{attempt} (fs.deny_read = {{workspace}}/private and **/*.pem)"),
            "each call refused; the secret and the names inside never appear; the control file is read",
            run,
        )
    };
    v.push(dc(
        "deny-read-read-file/builtin",
        "read_file private/secret.txt, sub/../private/secret.txt, keys/server.pem, /WS/private/secret.txt",
        |s| {
            deny_component(
                s,
                &[
                    ("read_file", json!({"path": "private/secret.txt"})),
                    ("read_file", json!({"path": "sub/../private/secret.txt"})),
                    ("read_file", json!({"path": "keys/server.pem"})),
                    ("file_info", json!({"path": "private/secret.txt"})),
                ],
                nothing,
            )
        },
    ));
    v.push(dc(
        "deny-read-symlink/builtin",
        "read_file of a link the host planted to private/secret.txt, and to private/",
        |s| {
            deny_component(
                s,
                &[
                    ("read_file", json!({"path": "planted"})),
                    ("read_file", json!({"path": "pd/secret.txt"})),
                    ("list_directory", json!({"path": "pd"})),
                ],
                |ws| {
                    // Relative, so that they stay inside the preopen (an absolute link is never followed there).
                    symlink("private/secret.txt", ws.join("planted")).unwrap();
                    symlink("private", ws.join("pd")).unwrap();
                },
            )
        },
    ));
    v.push(dc("deny-read-list/builtin", "list_directory private, list_directory . depth 4, search_files **/*", |s| {
        deny_component(
            s,
            &[
                ("list_directory", json!({"path": "private"})),
                ("list_directory", json!({"path": ".", "depth": 4})),
                ("search_files", json!({"pattern": "**/*"})),
                ("search_files", json!({"pattern": "*", "path": "private"})),
            ],
            nothing,
        )
    }));
    v.push(dc("deny-read-grep/builtin", "grep ESCAPE-SECRET over the workspace and in private", |s| {
        deny_component(
            s,
            &[("grep", json!({"pattern": "ESCAPE-SECRET"})), ("grep", json!({"pattern": "ESCAPE", "path": "private"}))],
            nothing,
        )
    }));
    v.push(dc(
        "deny-read-copy-move/builtin",
        "copy_file private/secret.txt copy.txt, move_file private moved, write_file private/new",
        |s| {
            deny_component(
                s,
                &[
                    ("copy_file", json!({"source": "private/secret.txt", "dest": "copy.txt"})),
                    ("move_file", json!({"source": "private", "dest": "moved"})),
                    ("write_file", json!({"path": "private/new.txt", "content": "x"})),
                    ("delete_file", json!({"path": "private/secret.txt"})),
                ],
                nothing,
            )
        },
    ));
    v
}
