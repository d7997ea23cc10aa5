//! What a tool may leave in a write grant: nothing that a program on the host
//! loads and runs when the person runs an ordinary command there (any git
//! command, a shell, an editor or an agent in the folder). One judgement
//! ([`Judge::judge`]) serves every runtime: the WASI host before each write, the
//! process layer for every entry a call left. Git is closed by construction
//! ([`git_place`]); the editors', shells' and agents' files are a list
//! ([`AUTO_RUN`]). docs/security.md, "Protected paths and persistence", says
//! why each rule holds.

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};

use super::protect::Protection;

/// Names that a program on the host reads and acts on when the person opens,
/// enters or commits in the directory that holds them, at any depth.
pub const AUTO_RUN: &[(&str, &str)] = &[
    (".envrc", "direnv runs it in the person's shell on entering its directory"),
    (
        ".vscode",
        "VS Code runs its tasks (runOn: folderOpen) and the programs its settings name when the folder is opened",
    ),
    (
        ".devcontainer",
        "VS Code and devcontainer tools run its lifecycle commands when the folder is opened in a container",
    ),
    (".idea", "JetBrains IDEs run its run configurations and startup tasks when the project is opened"),
    (".zed", "Zed runs the language servers and tasks its settings name when the folder is opened"),
    (".exrc", "vim and neovim with 'exrc' source it on starting in its directory"),
    (".nvim.lua", "neovim with 'exrc' sources it on starting in its directory"),
    (".nvimrc", "neovim with 'exrc' sources it on starting in its directory"),
    (".mcp.json", "agents (Claude Code and others) start the MCP servers it lists, on the host"),
    (".claude", "Claude Code runs the hooks and MCP servers its settings name"),
    (".cursor", "Cursor starts the MCP servers and runs the rules it holds"),
    (".gemini", "Gemini CLI starts the MCP servers and runs the tools its settings name"),
    (".codex", "Codex reads project configuration from it (MCP servers, commands)"),
    (".continue", "Continue starts the MCP servers its configuration lists"),
    (".roo", "Roo Code starts the MCP servers its mcp.json lists"),
    (".kiro", "Kiro starts the MCP servers and runs the hooks its settings name"),
    (".amazonq", "Amazon Q starts the MCP servers its mcp.json lists"),
    (".aider.conf.yml", "aider runs the lint and test commands it names after every edit"),
    (".pre-commit-config.yaml", "the pre-commit hook runs the commands it lists at every commit"),
    ("lefthook.yml", "the lefthook git hooks run the commands it lists"),
    ("lefthook.yaml", "the lefthook git hooks run the commands it lists"),
    (".lefthook.yml", "the lefthook git hooks run the commands it lists"),
    (".lefthook.yaml", "the lefthook git hooks run the commands it lists"),
    ("lefthook-local.yml", "the lefthook git hooks run the commands it lists"),
    (".lefthook-local.yml", "the lefthook git hooks run the commands it lists"),
    (".lefthook", "the lefthook git hooks run the scripts in it"),
    ("mise.toml", "mise, activated in the shell, runs its hooks and env scripts on entering the directory"),
    (".mise.toml", "mise, activated in the shell, runs its hooks and env scripts on entering the directory"),
    ("mise.local.toml", "mise, activated in the shell, runs its hooks and env scripts on entering the directory"),
    (".mise", "mise, activated in the shell, reads its configuration on entering the directory"),
    (
        "warden.toml",
        "warden started in its directory without --policy loads it as the policy: its tools' walls and tiers",
    ),
    ("warden.lock", "warden trusts the plugin and server definitions it pins, beside a policy in its directory"),
    ("warden.approvals.toml", "warden lets the calls it lists run without asking, beside a policy in its directory"),
    (".warden.approvals.toml.lock", "warden serializes its edits of warden.approvals.toml on it"),
];

/// Why a name is refused at any depth, if it is.
pub fn auto_run(name: &str) -> Option<&'static str> {
    AUTO_RUN.iter().find(|(n, _)| *n == name).map(|(_, why)| *why)
}

/// What the judgement sees of an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A directory.
    Dir,
    /// A symbolic link.
    Link,
    /// Anything else (a file, a FIFO, a socket).
    File,
}

/// The tree a judgement looks at: the real one, or the one a layer will make.
pub trait View {
    /// What is at `path`, no final link followed (links on the way are
    /// followed: callers check the way themselves where that matters).
    fn kind(&self, path: &Path) -> Option<Kind>;
    /// Whether something is at `path`.
    fn exists(&self, path: &Path) -> bool {
        self.kind(path).is_some()
    }
    /// Whether `d` holds a git directory's signature ([`git_signature`]); a
    /// view may remember the answers.
    fn is_git_dir(&self, d: &Path) -> bool {
        git_signature(self, d)
    }
}

/// The real tree, as it is now.
#[derive(Debug, Default, Clone, Copy)]
pub struct Real;

impl View for Real {
    fn kind(&self, path: &Path) -> Option<Kind> {
        let m = std::fs::symlink_metadata(path).ok()?;
        Some(if m.is_dir() {
            Kind::Dir
        } else if m.file_type().is_symlink() {
            Kind::Link
        } else {
            Kind::File
        })
    }
}

/// The real tree with one entry more: what a component's write would make.
#[derive(Debug)]
pub struct RealPlus<'a> {
    /// The entry the write creates.
    pub path: &'a Path,
    /// What it is.
    pub kind: Kind,
}

impl View for RealPlus<'_> {
    fn kind(&self, path: &Path) -> Option<Kind> {
        if path == self.path { Some(self.kind) } else { Real.kind(path) }
    }
}

/// What is done at a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// A new entry there (created, renamed or linked to the name).
    Create,
    /// Its content or metadata changed.
    Modify,
    /// It is removed (or renamed away).
    Delete,
}

/// A judgement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The change may reach the real tree.
    Allow,
    /// It may not: why, naming the key that would allow it where one does.
    Refuse(String),
    /// It may if its content passes [`vet`].
    Vet(Vet),
}

/// Files whose content decides whether they may stay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vet {
    /// A `.git` file (`gitdir: …`): it must point at a submodule's or
    /// worktree's git directory.
    GitLink,
    /// A new worktree's `commondir`: it must be `../..`.
    Commondir,
    /// A new repository's `config`: only keys that run nothing.
    Config,
}

/// The largest file [`vet`] reads.
pub const MAX_VETTED: u64 = 64 << 10;

/// How a git directory came to be, which decides what may be written in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GitKind {
    /// It was a git directory before: its config, hooks and info stay as they are.
    Existing,
    /// A submodule's, cloned into an existing repository's `modules/`.
    NewModule,
    /// A worktree's, under an existing repository's `worktrees/`.
    NewWorktree,
    /// A repository the tool made under `fs.git_init`.
    NewRepo,
}

/// The judgement of one call's changes.
pub struct Judge<'a> {
    /// The write grants, canonical.
    roots: Vec<PathBuf>,
    protect: &'a Protection,
    /// Whether a directory of the real tree is a git directory.
    real_git: RefCell<HashMap<PathBuf, bool>>,
}

impl std::fmt::Debug for Judge<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Judge").field("roots", &self.roots).finish_non_exhaustive()
    }
}

/// Whether `d` holds a git directory's signature in `view`: a `HEAD`, and a
/// `commondir` or both `objects` and `refs` (git's `is_git_directory`, taken
/// wide: any `HEAD` counts, whatever it holds).
pub fn git_signature<V: View + ?Sized>(view: &V, d: &Path) -> bool {
    view.exists(&d.join("HEAD"))
        && (view.exists(&d.join("commondir")) || (view.exists(&d.join("objects")) && view.exists(&d.join("refs"))))
}

fn names(path: &Path) -> Vec<&str> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_str().unwrap_or("\u{fffd}")),
            _ => None,
        })
        .collect()
}

/// What makes a directory a git directory ([`git_signature`]).
const GIT_SIGNATURE: &[&str] = &["HEAD", "commondir", "objects", "refs"];

const GIT_STATE_DIRS: &[&str] = &[
    "objects",
    "refs",
    "reftable",
    "logs",
    "rebase-merge",
    "rebase-apply",
    "sequencer",
    "rr-cache",
    "lfs",
    "lost-found",
];
const GIT_STATE_FILES: &[&str] = &[
    "index",
    "packed-refs",
    "COMMIT_EDITMSG",
    "MERGE_MSG",
    "MERGE_MODE",
    "MERGE_RR",
    "SQUASH_MSG",
    "TAG_EDITMSG",
    "NOTES_EDITMSG",
    "BISECT_LOG",
    "BISECT_START",
    "BISECT_TERMS",
    "BISECT_NAMES",
    "BISECT_EXPECTED_REV",
    "BISECT_ANCESTORS_OK",
    "BISECT_RUN",
    "AUTO_MERGE",
    "MERGE_AUTOSTASH",
    "shallow",
    "gc.pid",
    "gc.log",
];

const GIT_WRITABLE: &str = "a tool may change only the objects, refs, logs, index, HEAD and *_HEAD files, \
     packed-refs, message and lock files and the rebase, merge and sequencer state there";

/// Whether a top-level name of a git directory is state ordinary git work writes.
fn git_state_file(name: &str) -> bool {
    GIT_STATE_FILES.contains(&name)
        || name == "HEAD"
        || name.ends_with(".lock")
        || name.starts_with("sharedindex.")
        || (name.ends_with("_HEAD") && name.bytes().all(|b| b.is_ascii_uppercase() || b == b'_'))
}

/// What may be written at `rel` inside a git directory of `kind`.
fn git_place(kind: GitKind, rel: &[&str], dir: bool, git_dir: &Path) -> Verdict {
    let refuse =
        |what: &str| Verdict::Refuse(format!("in the git directory {}, {what}; {GIT_WRITABLE}", git_dir.display()));
    let new = matches!(kind, GitKind::NewModule | GitKind::NewRepo);
    match rel {
        [] => Verdict::Allow,
        [first, ..] if GIT_STATE_DIRS.contains(first) => Verdict::Allow,
        [name] if git_state_file(name) => Verdict::Allow,
        ["worktrees"] | ["worktrees", _] if dir => Verdict::Allow,
        // A worktree's own directory that is not (yet) one in this view.
        ["worktrees", _, rest @ ..] => match rest {
            ["gitdir"] | ["locked"] => Verdict::Allow,
            ["commondir"] => Verdict::Vet(Vet::Commondir),
            ["config.worktree"] => refuse("git reads a worktree's config from config.worktree"),
            _ => git_place(GitKind::Existing, rest, dir, git_dir),
        },
        // Submodules' git directories are judged as git directories of their
        // own once they are one; on the way there only directories are made.
        ["modules", ..] if dir => Verdict::Allow,
        ["modules", ..] => refuse("only a submodule's complete git directory may be made under modules/"),
        ["gitdir"] | ["locked"] if kind == GitKind::NewWorktree => Verdict::Allow,
        ["commondir"] if kind == GitKind::NewWorktree => Verdict::Vet(Vet::Commondir),
        ["config"] if new => Verdict::Vet(Vet::Config),
        ["hooks"] if new && dir => Verdict::Allow,
        ["hooks", name] if new && name.ends_with(".sample") => Verdict::Allow,
        ["info", ..] | ["description"] | ["branches", ..] if new => Verdict::Allow,
        ["config"] | ["config.worktree"] => {
            refuse("git runs what its config names (core.fsmonitor, hooksPath, aliases, filters)")
        }
        ["hooks", ..] => refuse("git runs its hooks"),
        ["commondir"] | ["gitdir"] => refuse("git takes config and hooks from where commondir points"),
        ["info", ..] => refuse("info/attributes selects filter and diff drivers"),
        _ => refuse("nothing else may appear (a later git may read it)"),
    }
}

impl<'a> Judge<'a> {
    /// A judgement for a call that may write `roots` (canonical) under `protect`.
    pub fn new(roots: &[PathBuf], protect: &'a Protection) -> Judge<'a> {
        Judge { roots: roots.to_vec(), protect, real_git: RefCell::default() }
    }

    /// The write grants.
    pub fn roots(&self) -> &[PathBuf] {
        &self.roots
    }

    /// Whether `d` was a git directory in the real tree (asked once).
    fn real_git_dir(&self, d: &Path) -> bool {
        if let Some(known) = self.real_git.borrow().get(d) {
            return *known;
        }
        let is = git_signature(&Real, d);
        self.real_git.borrow_mut().insert(d.to_path_buf(), is);
        is
    }

    /// The write grant `path` lies in (the longest).
    fn root_of(&self, path: &Path) -> Option<&Path> {
        self.roots.iter().filter(|r| path.starts_with(r)).max_by_key(|r| r.as_os_str().len()).map(PathBuf::as_path)
    }

    /// Judges one change at `path` (absolute, normalised) in `view`; `dir`:
    /// the entry is (or will be) a directory.
    pub fn judge(&self, view: &dyn View, path: &Path, change: Change, dir: bool) -> Verdict {
        let Some(root) = self.root_of(path) else { return Verdict::Allow };
        if path == root || self.protect.unprotect.iter().any(|u| path.starts_with(u)) {
            return Verdict::Allow;
        }
        if let Some((_, why)) = self.protect.refusal(path, true) {
            return Verdict::Refuse(why.to_string());
        }
        // Nothing removed makes a program on the host run something new (the
        // protected entries above are kept whole).
        if change == Change::Delete {
            return Verdict::Allow;
        }
        let Ok(rel) = path.strip_prefix(root) else { return Verdict::Allow };
        let rel = names(rel);
        if let Some((name, why)) = rel.iter().find_map(|n| auto_run(n).map(|w| (n, w))) {
            return Verdict::Refuse(format!("protected at any depth: {name}: {why}"));
        }
        let name = rel.last().copied().unwrap_or("");
        // The nearest git directory the entry lies in, in the tree as it will be.
        let parent = path.parent().unwrap_or(root);
        // A new git directory that may not be made loses what makes it one (its
        // HEAD, objects, refs, commondir: refused here), so beneath it the entry
        // is judged as if it were none; the search goes on above it.
        let mut git = None;
        for a in parent.ancestors().take_while(|a| a.starts_with(root)) {
            if !view.is_git_dir(a) {
                continue;
            }
            if self.real_git_dir(a) {
                git = Some((a, GitKind::Existing));
                break;
            }
            match self.new_git_kind(a, root) {
                Ok(kind) => {
                    git = Some((a, kind));
                    break;
                }
                Err(why) if path.parent() == Some(a) && GIT_SIGNATURE.contains(&name) => return Verdict::Refuse(why),
                Err(_) => {}
            }
        }
        match git {
            Some((g, kind)) => {
                let inner = path.strip_prefix(g).map(names).unwrap_or_default();
                git_place(kind, &inner, dir, g)
            }
            None if rel.contains(&".git") => {
                if name == ".git" && !dir {
                    Verdict::Vet(Vet::GitLink)
                } else if self.protect.git_init {
                    Verdict::Allow
                } else {
                    Verdict::Refuse(format!(
                        "{}: a .git here would make a repository whose hooks and config host git runs; a tool \
                         that must create repositories needs fs.git_init = true (their config and hooks are then \
                         vetted)",
                        rel.join("/")
                    ))
                }
            }
            None if name == "HEAD" && !self.protect.git_init => Verdict::Refuse(format!(
                "{}: a HEAD (with objects and refs, or a commondir) makes its directory a git repository that \
                 host git would use; a tool that must create repositories needs fs.git_init = true",
                rel.join("/")
            )),
            None => Verdict::Allow,
        }
    }

    /// How the git directory `g`, new in this view, may have come to be.
    fn new_git_kind(&self, g: &Path, root: &Path) -> Result<GitKind, String> {
        let outer =
            g.parent().and_then(|p| p.ancestors().take_while(|a| a.starts_with(root)).find(|a| self.real_git_dir(a)));
        if let Some(outer) = outer
            && let Ok(rel) = g.strip_prefix(outer)
        {
            match names(rel).as_slice() {
                ["modules", _, ..] => return Ok(GitKind::NewModule),
                ["worktrees", _] => return Ok(GitKind::NewWorktree),
                _ => {}
            }
        }
        if self.protect.git_init {
            return Ok(GitKind::NewRepo);
        }
        Err(format!(
            "{} would be a new git repository (it holds a HEAD with objects and refs, or a commondir), whose hooks \
             and config host git would run; a tool that must create repositories needs fs.git_init = true",
            g.display()
        ))
    }
}

/// Checks the content of a file [`Judge::judge`] asked to [`Verdict::Vet`]:
/// `path` is where it will lie, `view` the tree it will lie in.
pub fn vet(what: Vet, path: &Path, text: &[u8], view: &dyn View, judge: &Judge<'_>) -> Result<(), String> {
    let text = std::str::from_utf8(text).map_err(|_| format!("{} is not UTF-8 text", path.display()))?;
    match what {
        Vet::Commondir => {
            if text.trim_end_matches('\n') == "../.." {
                Ok(())
            } else {
                Err(format!(
                    "{}: a worktree's commondir must lead back to its repository (\"../..\"); elsewhere it would \
                     take config and hooks from another git directory",
                    path.display()
                ))
            }
        }
        Vet::Config => vet_config(text).map_err(|e| format!("{}: {e}", path.display())),
        Vet::GitLink => vet_git_link(path, text, view, judge),
    }
}

/// A `.git` file must say `gitdir: P` with `P` a git directory under an
/// existing repository's `modules/` or `worktrees/`, reached through no link.
fn vet_git_link(path: &Path, text: &str, view: &dyn View, judge: &Judge<'_>) -> Result<(), String> {
    let bad = |why: &str| {
        Err(format!(
            "{}: {why}; a .git file may only point at a submodule's or worktree's git directory (under an \
             existing repository's modules/ or worktrees/), as git submodule and git worktree write them",
            path.display()
        ))
    };
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let (Some(line), None) = (lines.next(), lines.next()) else { return bad("it is not one gitdir: line") };
    let Some(target) = line.strip_prefix("gitdir:").map(str::trim) else { return bad("it is not a gitdir: line") };
    let Some(dir) = path.parent() else { return bad("it has no directory") };
    let mut to = PathBuf::new();
    for c in dir.join(target).components() {
        match c {
            Component::ParentDir => {
                to.pop();
            }
            Component::CurDir => {}
            c => to.push(c),
        }
    }
    // No link on the way, from the root of the file system (the host's git
    // follows them; this judgement reads the path as it is written).
    let mut at = PathBuf::from("/");
    for c in names(&to) {
        at.push(c);
        if view.kind(&at) == Some(Kind::Link) {
            return bad(&format!("{} on the way to its gitdir is a symbolic link", at.display()));
        }
    }
    if !view.is_git_dir(&to) {
        return bad(&format!("{} is not a git directory", to.display()));
    }
    let outer = to.parent().and_then(|p| p.ancestors().find(|a| judge.real_git_dir(a)));
    match outer.and_then(|o| to.strip_prefix(o).ok()).map(names).as_deref() {
        Some(["modules", _, ..]) | Some(["worktrees", _]) => Ok(()),
        _ => bad(&format!("{} is not under an existing repository's modules/ or worktrees/", to.display())),
    }
}

/// The keys a new repository's config may hold: what `git init`, `git clone`
/// and `git submodule` write, none of which makes git run a program
/// (docs/security.md lists each with why).
fn allowed_key(section: &str, sub: Option<&str>, key: &str, value: &str) -> bool {
    match (section, sub.is_some(), key) {
        (
            "core",
            false,
            "repositoryformatversion"
            | "filemode"
            | "bare"
            | "logallrefupdates"
            | "ignorecase"
            | "precomposeunicode"
            | "symlinks"
            | "worktree",
        ) => true,
        ("extensions", false, "objectformat" | "refstorage" | "worktreeconfig" | "partialclone") => true,
        ("remote", true, "url" | "pushurl") => !value.starts_with("ext::") && !value.starts_with("fd::"),
        ("remote", true, "fetch" | "push" | "mirror" | "tagopt" | "prune" | "promisor" | "partialclonefilter") => true,
        ("branch", true, "remote" | "merge" | "rebase" | "pushremote") => true,
        ("submodule", true, "url") => !value.starts_with("ext::"),
        ("submodule", true, "active") => true,
        ("submodule", true, "update") => matches!(value, "checkout" | "rebase" | "merge" | "none"),
        ("user", false, "name" | "email") => true,
        ("init", false, "defaultbranch") => true,
        _ => false,
    }
}

/// Checks a git config file against [`allowed_key`]: every key must be
/// allowed, and anything this parser does not understand fails.
pub fn vet_config(text: &str) -> Result<(), String> {
    let mut section: Option<(String, Option<String>)> = None;
    let mut lines = text.lines().enumerate().peekable();
    while let Some((n, raw)) = lines.next() {
        let line = raw.trim_start();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        let at = |why: &str| format!("line {}: {why}", n + 1);
        let mut rest = line;
        if let Some(after) = rest.strip_prefix('[') {
            let close = after.find(']').ok_or_else(|| at("a section header without ]"))?;
            let head = &after[..close];
            rest = after[close + 1..].trim_start();
            section = Some(match head.split_once(char::is_whitespace) {
                Some((name, sub)) => {
                    let sub = sub.trim();
                    let sub = sub
                        .strip_prefix('"')
                        .and_then(|s| s.strip_suffix('"'))
                        .ok_or_else(|| at("a subsection that is not quoted"))?;
                    if sub.contains(['\\', '"']) {
                        return Err(at("a subsection with escapes"));
                    }
                    (name.to_ascii_lowercase(), Some(sub.to_string()))
                }
                None => match head.split_once('.') {
                    Some((name, sub)) => (name.to_ascii_lowercase(), Some(sub.to_ascii_lowercase())),
                    None => (head.to_ascii_lowercase(), None),
                },
            });
            if rest.is_empty() || rest.starts_with('#') || rest.starts_with(';') {
                continue;
            }
        }
        let Some((name, sub)) = &section else { return Err(at("a key before any section")) };
        let (key, value) = match rest.split_once('=') {
            Some((k, v)) => (k.trim(), Some(v)),
            None => (rest.trim(), None),
        };
        if key.is_empty() || !key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
            return Err(at("a key this check does not understand"));
        }
        // The value, with quotes, escapes, comments and continued lines read as git does.
        let mut value_text = String::new();
        let mut source = value.unwrap_or("").to_string();
        loop {
            let mut quoted = false;
            let mut chars = source.chars().peekable();
            let mut continued = false;
            while let Some(c) = chars.next() {
                match c {
                    '"' => quoted = !quoted,
                    '\\' => match chars.next() {
                        None => continued = true,
                        Some('n') => value_text.push('\n'),
                        Some('t') => value_text.push('\t'),
                        Some('b') => {
                            value_text.pop();
                        }
                        Some(c @ ('"' | '\\')) => value_text.push(c),
                        Some(_) => return Err(at("an escape git does not accept")),
                    },
                    '#' | ';' if !quoted => break,
                    c => value_text.push(c),
                }
            }
            if !continued {
                if quoted {
                    return Err(at("an unterminated quote"));
                }
                break;
            }
            source = match lines.next() {
                Some((_, next)) => next.to_string(),
                None => return Err(at("a continued line at the end")),
            };
        }
        let value_text = value_text.trim();
        let key = key.to_ascii_lowercase();
        if !allowed_key(name, sub.as_deref(), &key, value_text) {
            let full = match sub {
                Some(s) => format!("{name}.{s}.{key}"),
                None => format!("{name}.{key}"),
            };
            return Err(format!(
                "{full} is not among the keys a new repository's config may hold (what git init, clone and \
                 submodule write; none of them runs a program)"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
