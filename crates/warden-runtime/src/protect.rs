//! Paths inside a call's grants that it may not write (the built-in protected
//! paths and `fs.deny_write`) or not reach at all (`fs.deny_read`):
//! [`Protection`], the concrete paths of a call ([`PathRule`], globs expanded
//! when it starts, failing closed) and the patterns they came from
//! ([`DenyPattern`]). Landlock cannot carve them out of a grant, so the runtimes
//! enforce them: the judgement of [`super::persist`], read-only binds and masks
//! in a process call's mount namespace, and the checks of the WASI host.

use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::policy::glob::{is_glob, matches_components};

pub use warden_sandbox::rules::{Deny, Kind, PathRule};

/// A policy pattern, placeholders expanded: an absolute path in which `*`
/// matches within one component and a `**` component matches any number of
/// components (none included).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DenyPattern {
    /// The pattern.
    pub pattern: String,
    /// What is refused where it matches (and beneath).
    pub deny: Deny,
    /// Why, as in [`PathRule::why`].
    pub why: String,
}

impl DenyPattern {
    /// Whether `path` (absolute, normalised) is matched by the pattern or lies
    /// beneath something it matches.
    pub fn covers(&self, path: &Path) -> bool {
        let pat: Vec<&str> = self.pattern.split('/').filter(|c| !c.is_empty()).collect();
        let Some(text) = path.to_str() else {
            // Not UTF-8: compare through a lossy copy (rare).
            return self.covers(Path::new(&*path.to_string_lossy()));
        };
        let parts: Vec<&str> = text.split('/').filter(|c| !c.is_empty() && *c != ".").collect();
        (0..=parts.len()).any(|n| matches_components(&pat, &parts[..n]))
    }
}

/// The protected and denied paths of one call.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Protection {
    /// Concrete paths, expanded when the call started (existing or not).
    pub rules: Vec<PathRule>,
    /// The patterns, for runtimes that check every access (the WASI host).
    pub patterns: Vec<DenyPattern>,
    /// `fs.unprotect`: paths this tool may write after all.
    #[serde(default)]
    pub unprotect: Vec<PathBuf>,
    /// `fs.git_init`: the tool may create repositories (vetted).
    #[serde(default)]
    pub git_init: bool,
}

impl Protection {
    /// Nothing protected or denied.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty() && self.patterns.is_empty()
    }

    /// The rule or pattern that refuses `path` (absolute, normalised) for a
    /// read (`write` false: only `deny_read` refuses) or a write (every rule
    /// refuses). Returns the reason for the message.
    pub fn refusal(&self, path: &Path, write: bool) -> Option<(Deny, &str)> {
        let applies = |deny: Deny| write || deny == Deny::Read;
        let concrete = self.rules.iter().find(|r| applies(r.deny) && path.starts_with(&r.path)).map(|r| (r.deny, r));
        if let Some((deny, r)) = concrete {
            return Some((deny, r.why.as_str()));
        }
        self.patterns.iter().find(|p| applies(p.deny) && p.covers(path)).map(|p| (p.deny, p.why.as_str()))
    }

    /// Whether `path` is a strict ancestor of a rule's path inside that rule's
    /// root: removing or renaming it would move the rule's path away.
    pub fn is_pinned_ancestor(&self, path: &Path) -> bool {
        self.rules
            .iter()
            .any(|r| r.path != path && r.root != path && r.path.starts_with(path) && path.starts_with(&r.root))
    }
}

/// Protected at the root of every write grant: the shells' start-up files
/// (they matter where a grant is a home directory) and `.gitmodules`; the
/// names that matter at any depth are [`super::persist::AUTO_RUN`], protected
/// at each root too.
pub const PROTECTED_AT_ROOT: &[(&str, &str)] = &[
    // At the root only: git takes no command from it (`update = !command` is
    // honoured from config alone), and a checkout of a worktree or submodule
    // brings its own.
    (".gitmodules", "`git submodule update` clones and checks out what it names"),
    (".bashrc", "bash runs it at every interactive start"),
    (".bash_profile", "bash runs it at every login"),
    (".bash_login", "bash runs it at every login"),
    (".zshrc", "zsh runs it at every interactive start"),
    (".zprofile", "zsh runs it at every login"),
    (".zshenv", "zsh runs it at every start"),
    (".profile", "sh and bash run it at every login"),
];

/// More entries protected where `{home}` itself is a write grant.
pub const PROTECTED_AT_HOME: &[(&str, &str)] = &[
    (".ssh", "authorized_keys and config decide who logs in and what ssh runs"),
    (".gitconfig", "git runs the hooks, fsmonitor, aliases and filters it names, in every repository"),
    (".config/git", "git runs the hooks, fsmonitor, aliases and filters it names, in every repository"),
    (".config/systemd", "systemd --user starts the units in it at login"),
    (".config/autostart", "the desktop session starts what it lists at login"),
];

/// Why each part of a git directory is protected.
const GIT_HOOKS: &str = "git runs these hooks on the host (pre-commit, post-checkout, …)";
const GIT_CONFIG: &str = "core.fsmonitor, core.hooksPath, aliases and filter drivers in it run commands on the host";
const GIT_INFO: &str = "info/attributes selects filter and diff drivers; info/exclude hides files from review";
const GIT_ABSENT: &str = "no repository (and so no hooks or config) may be created here; git init on the host instead";
const GIT_FILE: &str = "it points git at another git directory, whose hooks and config then run";

/// The most directory entries a `**` pattern walks for one call.
pub const MAX_WALK: usize = 100_000;
/// The most paths one call's patterns may expand to.
pub const MAX_MATCHES: usize = 4096;
/// The largest git config file read for `core.hooksPath` and includes.
const MAX_GIT_CONFIG: u64 = 1 << 20;

/// What a call's protection is computed from.
#[derive(Debug)]
pub struct ProtectInput<'a> {
    /// The tool or server, for messages.
    pub tool: &'a str,
    /// The granted paths of the call, canonical, with write access or not.
    pub dirs: &'a [(PathBuf, bool)],
    /// The `fs.deny_read`/`fs.deny_write` entries.
    pub deny: &'a [crate::policy::DenyEntry],
    /// `fs.unprotect`.
    pub unprotect: &'a [PathBuf],
    /// The call's `{tmp}` (nothing in it outlives the call: not protected).
    pub tmp: Option<&'a Path>,
    /// Expand glob patterns to concrete paths (for the mount namespace);
    /// components match patterns at every access instead.
    pub expand_globs: bool,
    /// `fs.git_init`.
    pub git_init: bool,
    /// warden's own files ([`crate::policy::Policy::own_files`]): protected wherever a
    /// write grant holds them.
    pub own: &'a [(String, PathBuf)],
}

impl Protection {
    /// The protected and denied paths of one call.
    pub fn for_call(input: &ProtectInput<'_>) -> Result<Protection, String> {
        let mut out =
            Protection { unprotect: input.unprotect.to_vec(), git_init: input.git_init, ..Protection::default() };
        let roots: Vec<&PathBuf> = input
            .dirs
            .iter()
            .filter(|(p, w)| *w && p.is_dir() && !input.tmp.is_some_and(|t| p.starts_with(t)))
            .map(|(p, _)| p)
            .collect();
        let home = std::env::var_os("HOME").map(PathBuf::from).and_then(|h| h.canonicalize().ok());
        for root in &roots {
            for (name, why) in super::persist::AUTO_RUN.iter().chain(PROTECTED_AT_ROOT) {
                out.protect(root, &root.join(name), why, &roots);
            }
            if home.as_deref() == Some(root.as_path()) {
                for (name, why) in PROTECTED_AT_HOME {
                    out.protect(root, &root.join(name), why, &roots);
                }
            }
            out.protect_git(root, &roots, home.as_deref());
            for (what, path) in input.own {
                // Compared where it really lies (the file itself may be absent: a lock not yet written).
                let real = match (path.parent().and_then(|d| d.canonicalize().ok()), path.file_name()) {
                    (Some(dir), Some(name)) => dir.join(name),
                    _ => continue,
                };
                if root.starts_with(&real) {
                    return Err(format!(
                        "the write grant {} lies inside warden's {what} {}: a tool that wrote there would set its \
                         own walls, record or approvals; grant another directory, or give warden another \
                         --audit-log or policy location",
                        root.display(),
                        real.display()
                    ));
                }
                if input.unprotect.iter().any(|u| *u == real || *u == *path) {
                    return Err(format!(
                        "fs.unprotect {}: warden's {what} cannot be released to a tool (it would set its own \
                         walls, record or approvals); remove it from fs.unprotect",
                        path.display()
                    ));
                }
                if real.starts_with(root) {
                    let why = format!("warden's {what}: a tool that changed it would set its own walls or record");
                    out.protect(root, &real, &why, &roots);
                }
            }
        }
        out.rules.retain(|r| !input.unprotect.contains(&r.path));
        // An absent entry whose parent is absent too (`{home}/.config/git` with no
        // `.config`): nothing can be mounted there, so the highest absent
        // directory on the way is covered instead (no `.config` can be made).
        for r in &mut out.rules {
            if r.kind != Kind::Absent {
                continue;
            }
            let mut at = r.path.clone();
            while let Some(parent) = at.parent()
                && parent != r.root
                && parent.starts_with(&r.root)
                && fs_kind(parent).is_none()
            {
                at = parent.to_path_buf();
            }
            if at != r.path {
                r.why = format!("{} (covering {}, which does not exist)", r.why, r.path.display());
                r.path = at;
            }
        }
        for entry in input.deny {
            let deny = if entry.read { Deny::Read } else { Deny::Write };
            let key = if entry.read { "fs.deny_read" } else { "fs.deny_write" };
            let pattern = match (&entry.path, input.tmp) {
                (crate::policy::GrantPath::Fixed(p), _) => p.clone(),
                (crate::policy::GrantPath::Tmp(rel), Some(t)) => t.join(rel),
                (crate::policy::GrantPath::Tmp(_), None) => continue,
            };
            let text = pattern.to_string_lossy().into_owned();
            let why = format!("{key} of {}", input.tool);
            if is_glob(&text) {
                out.patterns.push(DenyPattern { pattern: text.clone(), deny, why: why.clone() });
                if input.expand_globs {
                    let found = expand(&text, input.dirs).map_err(|e| format!("{key} {text:?}: {e}"))?;
                    for path in found {
                        out.add(&path, deny, &why, input.dirs);
                    }
                }
            } else {
                out.patterns.push(DenyPattern { pattern: text.clone(), deny, why: why.clone() });
                out.add(&pattern, deny, &why, input.dirs);
            }
            if out.rules.len() > MAX_MATCHES {
                return Err(format!(
                    "{key} {text:?}: more than {MAX_MATCHES} paths to deny in one call; narrow the pattern"
                ));
            }
        }
        // One rule per path (deny_read wins), parents before children.
        out.rules.sort_by(|a, b| a.path.cmp(&b.path).then(a.deny.cmp(&b.deny)));
        out.rules.dedup_by(|later, first| later.path == first.path);
        Ok(out)
    }

    /// A protected entry at `path` under the write root `root`, and, when it
    /// is a symbolic link, the place it leads to if a tool may write there.
    fn protect(&mut self, root: &Path, path: &Path, why: &str, roots: &[&PathBuf]) {
        let why = format!("protected: {why}");
        self.push(root, path, Deny::Write, &why);
        if fs_kind(path) == Some(FileKind::Link)
            && let Ok(target) = path.canonicalize()
            && let Some(r) = roots.iter().find(|r| target.starts_with(r))
        {
            self.push(r, &target, Deny::Write, &why);
        }
    }

    /// A policy entry at a concrete path, under whichever grant holds it.
    fn add(&mut self, path: &Path, deny: Deny, why: &str, dirs: &[(PathBuf, bool)]) {
        let root = dirs.iter().filter(|(d, _)| path.starts_with(d)).map(|(d, _)| d).max_by_key(|d| d.as_os_str().len());
        let Some(root) = root else { return };
        let root = root.clone();
        self.push(&root, path, deny, why);
        if fs_kind(path) == Some(FileKind::Link)
            && let Ok(target) = path.canonicalize()
            && target.starts_with(&root)
        {
            self.push(&root, &target, deny, why);
        }
    }

    fn push(&mut self, root: &Path, path: &Path, deny: Deny, why: &str) {
        let kind = match fs_kind(path) {
            Some(FileKind::Dir) => Kind::Dir,
            Some(_) => Kind::File,
            None => Kind::Absent,
        };
        self.rules.push(PathRule {
            path: path.to_path_buf(),
            deny,
            kind,
            root: root.to_path_buf(),
            why: why.to_string(),
        });
    }

    /// The repository's own places that run on the host: its git directory's
    /// hooks, config and info (through a `.git` file too, for worktrees and
    /// submodules, with their common directory and modules), and the
    /// directory `core.hooksPath` names; or, with no `.git` at the root, the
    /// name `.git` itself, so no repository can be made there.
    fn protect_git(&mut self, root: &Path, roots: &[&PathBuf], home: Option<&Path>) {
        let (gitdirs, worktree) = self.git_dirs_of(root);
        let mut configs = self.protect_git_dirs(gitdirs, roots);
        if let Some(home) = home {
            configs.push(home.join(".gitconfig"));
        }
        match std::env::var_os("XDG_CONFIG_HOME") {
            Some(x) => configs.push(PathBuf::from(x).join("git/config")),
            None => configs.extend(home.map(|h| h.join(".config/git/config"))),
        }
        self.protect_config_paths(configs, roots, home, worktree.as_deref());
    }

    /// The git directories of the repository at `root` (or around it, when it
    /// has no `.git`), and its work tree; a `.git` that is absent or a file is
    /// protected as such.
    fn git_dirs_of(&mut self, root: &Path) -> (Vec<PathBuf>, Option<PathBuf>) {
        let dot_git = root.join(".git");
        let mut gitdirs = Vec::new();
        let mut worktree = Some(root.to_path_buf());
        match fs_kind(&dot_git) {
            None => {
                self.push(root, &dot_git, Deny::Write, &format!("protected: {GIT_ABSENT}"));
                // The repository around the root, if any, for its core.hooksPath.
                worktree = None;
                let mut at = root.parent();
                for _ in 0..64 {
                    let Some(dir) = at else { break };
                    if let Some(g) = git_dir_of(&dir.join(".git")) {
                        gitdirs.push(g);
                        worktree = Some(dir.to_path_buf());
                        break;
                    }
                    at = dir.parent();
                }
            }
            Some(FileKind::Dir) => gitdirs.push(dot_git.clone()),
            Some(_) => {
                self.push(root, &dot_git, Deny::Write, &format!("protected: {GIT_FILE}"));
                if let Some(g) = git_dir_of(&dot_git) {
                    gitdirs.push(g);
                }
            }
        }
        (gitdirs, worktree)
    }

    /// Protects the hooks, config and info of each git directory under a write
    /// grant, with its common directory, worktrees and submodules (bounded);
    /// the config files git will read, to follow next.
    fn protect_git_dirs(&mut self, gitdirs: Vec<PathBuf>, roots: &[&PathBuf]) -> Vec<PathBuf> {
        // The common directory of a worktree's git directory holds the shared config and hooks.
        let mut all = Vec::new();
        for g in gitdirs {
            if let Some(common) = read_small(&g.join("commondir"))
                && let Ok(c) = g.join(common.trim()).canonicalize()
            {
                all.push(c);
            }
            all.push(g);
        }
        let mut configs = Vec::new();
        let mut i = 0;
        while i < all.len() && i < 64 {
            let g = all[i].clone();
            i += 1;
            configs.push(g.join("config"));
            configs.push(g.join("config.worktree"));
            if let Some(r) = roots.iter().find(|r| g.starts_with(r)) {
                for (name, why) in [("hooks", GIT_HOOKS), ("config", GIT_CONFIG), ("info", GIT_INFO)] {
                    self.push(r, &g.join(name), Deny::Write, &format!("protected: {why}"));
                }
                if let Ok(wt) = std::fs::read_dir(g.join("worktrees")) {
                    for e in wt.flatten().take(64) {
                        let c = e.path().join("config.worktree");
                        if c.exists() {
                            self.push(r, &c, Deny::Write, &format!("protected: {GIT_CONFIG}"));
                        }
                    }
                }
            }
            // Submodules' git directories, nested as deep as they go (bounded).
            if let Ok(modules) = std::fs::read_dir(g.join("modules")) {
                for e in modules.flatten().take(256) {
                    if e.path().join("HEAD").exists() {
                        all.push(e.path());
                    } else if let Ok(inner) = std::fs::read_dir(e.path()) {
                        all.extend(inner.flatten().take(64).map(|e| e.path()).filter(|p| p.join("HEAD").exists()));
                    }
                }
            }
        }
        configs
    }

    /// Follows the git config files (and what they include, bounded): each
    /// include and `core.hooksPath` under a write grant is protected.
    fn protect_config_paths(
        &mut self,
        mut configs: Vec<PathBuf>,
        roots: &[&PathBuf],
        home: Option<&Path>,
        worktree: Option<&Path>,
    ) {
        let mut seen = 0;
        while seen < configs.len() && seen < 64 {
            let config = configs[seen].clone();
            seen += 1;
            for (key, value) in git_config_paths(&config) {
                let value = match value.strip_prefix("~/") {
                    Some(rest) => match home {
                        Some(h) => h.join(rest),
                        None => continue,
                    },
                    None => PathBuf::from(&value),
                };
                let path = if value.is_absolute() {
                    value
                } else if key == "path" {
                    // An include is relative to the file that names it.
                    config.parent().map(|d| d.join(&value)).unwrap_or(value)
                } else {
                    match worktree {
                        Some(w) => w.join(&value),
                        None => continue,
                    }
                };
                // As the kernel will resolve it when git opens it (`..` at `/` stays there).
                let path: PathBuf = crate::paths::lexical(Path::new("/"), &path).0;
                let Some(r) = roots.iter().find(|r| path.starts_with(r)) else { continue };
                if key == "path" {
                    self.push(r, &path, Deny::Write, "protected: a git config file includes it");
                    configs.push(path);
                } else {
                    self.push(
                        r,
                        &path,
                        Deny::Write,
                        "protected: core.hooksPath names it: git runs its hooks on the host",
                    );
                    // husky: core.hooksPath = .husky/_ runs the scripts in .husky.
                    if path.file_name().is_some_and(|n| n == "_")
                        && let Some(parent) = path.parent()
                        && parent.starts_with(r)
                        && parent != r.as_path()
                    {
                        self.push(r, parent, Deny::Write, "protected: the hooks that core.hooksPath's scripts run");
                    }
                }
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FileKind {
    Dir,
    File,
    Link,
}

/// What is at `path`, not following a final link.
fn fs_kind(path: &Path) -> Option<FileKind> {
    let m = std::fs::symlink_metadata(path).ok()?;
    Some(if m.file_type().is_symlink() {
        FileKind::Link
    } else if m.is_dir() {
        FileKind::Dir
    } else {
        FileKind::File
    })
}

/// The git directory a `.git` entry stands for: itself, or where a `.git` file points.
fn git_dir_of(dot_git: &Path) -> Option<PathBuf> {
    match fs_kind(dot_git)? {
        FileKind::Dir => Some(dot_git.to_path_buf()),
        _ => {
            let text = read_small(dot_git)?;
            let target = text.lines().find_map(|l| l.strip_prefix("gitdir:"))?.trim();
            dot_git.parent()?.join(target).canonicalize().ok()
        }
    }
}

/// A small regular file, read at most [`MAX_GIT_CONFIG`] bytes. These files lie
/// where tools may write (`.git/commondir`, an included config): opened
/// non-blocking and refused unless regular, so a FIFO or `/dev/zero` planted
/// there cannot stall or flood the host's next call.
fn read_small(path: &Path) -> Option<String> {
    use std::io::Read;
    let flags = rustix::fs::OFlags::RDONLY
        | rustix::fs::OFlags::NONBLOCK
        | rustix::fs::OFlags::NOCTTY
        | rustix::fs::OFlags::CLOEXEC;
    let fd = rustix::fs::open(path, flags, rustix::fs::Mode::empty()).ok()?;
    let st = rustix::fs::fstat(&fd).ok()?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
        return None;
    }
    let mut text = String::new();
    std::fs::File::from(fd).take(MAX_GIT_CONFIG).read_to_string(&mut text).ok()?;
    Some(text)
}

/// `core.hooksPath` (as `hookspath`) and `include.path`/`includeIf.*.path` (as
/// `path`) values of one git config file, read leniently.
fn git_config_paths(config: &Path) -> Vec<(&'static str, String)> {
    let Some(text) = read_small(config) else { return Vec::new() };
    let mut section = String::new();
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix('[') {
            section = rest.split([']', ' ', '"']).next().unwrap_or("").to_ascii_lowercase();
            continue;
        }
        let Some((key, value)) = line.split_once('=') else { continue };
        let key = key.trim().to_ascii_lowercase();
        let value = value.split(['#', ';']).next().unwrap_or("").trim().trim_matches('"').to_string();
        if value.is_empty() {
            continue;
        }
        match (section.as_str(), key.as_str()) {
            ("core", "hookspath") => out.push(("hookspath", value)),
            ("include" | "includeif", "path") => out.push(("path", value)),
            _ => {}
        }
    }
    out
}

/// The existing paths under the grants that a glob pattern matches (the walk
/// starts at the pattern's fixed part, never follows a link, and is bounded).
fn expand(pattern: &str, dirs: &[(PathBuf, bool)]) -> Result<Vec<PathBuf>, String> {
    let fixed: PathBuf =
        Path::new(pattern).components().take_while(|c| !is_glob(&c.as_os_str().to_string_lossy())).collect();
    let pat = DenyPattern { pattern: pattern.to_string(), deny: Deny::Read, why: String::new() };
    // Walk from the fixed part, or from each grant beneath it.
    let starts: Vec<PathBuf> = if dirs.iter().any(|(d, _)| fixed.starts_with(d)) {
        vec![fixed.clone()]
    } else {
        dirs.iter().filter(|(d, _)| d.starts_with(&fixed)).map(|(d, _)| d.clone()).collect()
    };
    let mut found = Vec::new();
    let mut walked = 0usize;
    let mut stack = starts;
    // A start that does not exist holds no match; any other error fails the
    // call: a directory the walk cannot read could hold one.
    stack.retain(|p| std::fs::symlink_metadata(p).is_ok());
    while let Some(dir) = stack.pop() {
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) => {
                return Err(format!(
                    "cannot look inside {} for paths it matches: {e}; make it readable, or narrow the pattern",
                    dir.display()
                ));
            }
        };
        for e in entries {
            let e = e.map_err(|e| format!("cannot read {} for paths it matches: {e}", dir.display()))?;
            walked += 1;
            if walked > MAX_WALK {
                return Err(format!(
                    "more than {MAX_WALK} entries to walk under {}; narrow the pattern",
                    fixed.display()
                ));
            }
            let path = e.path();
            let is_dir =
                e.file_type().map_err(|err| format!("cannot tell what {} is: {err}", path.display()))?.is_dir();
            if glob_components_of(&pat, &path) {
                found.push(path);
                if found.len() > MAX_MATCHES {
                    return Err(format!("it matches more than {MAX_MATCHES} paths; narrow the pattern"));
                }
                continue;
            }
            if is_dir {
                stack.push(path);
            }
        }
    }
    Ok(found)
}

/// Whether the pattern matches `path` itself (not merely an ancestor).
fn glob_components_of(pat: &DenyPattern, path: &Path) -> bool {
    let p: Vec<&str> = pat.pattern.split('/').filter(|c| !c.is_empty()).collect();
    let parts: Vec<String> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect();
    let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
    matches_components(&p, &parts)
}

/// What a tool's protection would be if it were called now (no `{tmp}`;
/// patterns not expanded), for `warden policy check` and `warden audit`.
pub fn preview(tool: &crate::policy::ToolSpec) -> Result<Protection, String> {
    let dirs: Vec<(PathBuf, bool)> = tool
        .grants
        .paths
        .iter()
        .filter_map(|g| match &g.path {
            crate::policy::GrantPath::Fixed(p) => Some((p.canonicalize().ok()?, g.write)),
            crate::policy::GrantPath::Tmp(_) => None,
        })
        .collect();
    Protection::for_call(&ProtectInput {
        tool: &tool.name,
        dirs: &dirs,
        deny: &tool.grants.deny,
        unprotect: &tool.grants.unprotect,
        tmp: None,
        expand_globs: false,
        git_init: tool.grants.git_init,
        own: &[],
    })
}

impl Protection {
    /// The rules in the order a person wants them named: the policy's own
    /// (`fs.deny_*`) first, then built-in ones that exist, then the rest.
    pub fn by_weight(&self) -> Vec<&PathRule> {
        let mut v: Vec<&PathRule> = self.rules.iter().collect();
        v.sort_by_key(|r| (r.why.starts_with("protected"), r.kind == Kind::Absent));
        v
    }

    /// The first `max` paths of [`Protection::by_weight`], and how many more, for messages.
    pub fn named(&self, max: usize) -> String {
        let all = self.by_weight();
        let mut paths: Vec<String> = all.iter().take(max).map(|r| r.path.display().to_string()).collect();
        if all.len() > max {
            paths.push(format!("and {} more", all.len() - max));
        }
        paths.join(", ")
    }

    /// One line per kind of rule, for listings: `protected in ROOT: git by
    /// construction, …, and .git/hooks, …` (the rules of this repository), then
    /// `fs.deny_read: PATTERN`.
    pub fn summary(&self) -> Vec<String> {
        let mut lines = Vec::new();
        let listed = |p: &Path, root: &Path| {
            let rel = p.strip_prefix(root).unwrap_or(p);
            let first = rel.components().next().map(|c| c.as_os_str().to_string_lossy().into_owned());
            first.is_some_and(|n| {
                super::persist::auto_run(&n).is_some() || PROTECTED_AT_ROOT.iter().any(|(name, _)| *name == n)
            }) && rel.components().count() == 1
        };
        let mut roots: Vec<&PathBuf> =
            self.rules.iter().filter(|r| r.why.starts_with("protected")).map(|r| &r.root).collect();
        roots.sort();
        roots.dedup();
        for root in roots {
            let names: Vec<String> = self
                .rules
                .iter()
                .filter(|r| r.why.starts_with("protected") && r.root == *root && !listed(&r.path, root))
                .map(|r| r.path.strip_prefix(root).unwrap_or(&r.path).display().to_string())
                .collect();
            let mut line = format!(
                "protected in {}: git by construction (only git's state inside a git directory, no new \
                 repository{}), the editors', shells' and agents' files (docs/security.md)",
                root.display(),
                if self.git_init { " but vetted ones: fs.git_init" } else { "" }
            );
            if !names.is_empty() {
                line.push_str(&format!(", and {}", names.join(", ")));
            }
            lines.push(line);
        }
        for p in &self.patterns {
            let key = if p.deny == Deny::Read { "fs.deny_read" } else { "fs.deny_write" };
            lines.push(format!("{key}: {}", p.pattern));
        }
        lines
    }
}

#[cfg(test)]
mod tests;
