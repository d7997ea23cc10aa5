//! Paths inside a call's grants that it may not write (the built-in protected
//! paths and `fs.deny_write`) or not reach at all (`fs.deny_read`).
//!
//! Landlock rules are allow-lists: a path cannot be carved out of a granted
//! tree. So these rules are enforced by another layer, chosen by the runtime:
//! read-only binds and masks in the call's mount namespace for process tools
//! and servers ([`super::process`]), warden's own WASI host for components
//! ([`super::wasm`]). [`Protection`] is what both are given: the concrete paths
//! of this call ([`PathRule`], globs expanded when the call starts) and the
//! patterns they came from ([`DenyPattern`], which the WASI host matches at
//! every access, so a file created during the call is covered too).

use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

/// What a rule refuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum Deny {
    /// No read, no write, no listing inside (`fs.deny_read`).
    Read,
    /// Read-only: no write, create, remove, rename or link (protected paths, `fs.deny_write`).
    Write,
}

impl Deny {
    /// `deny_read` or `read_only`, for reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Deny::Read => "deny_read",
            Deny::Write => "read_only",
        }
    }
}

/// Whether a rule's path is, or will be made, a directory or a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A directory (and everything beneath it).
    Dir,
    /// A single file.
    File,
    /// Does not exist: nothing may be created there (a process call covers it
    /// with an empty directory for its duration: [`Placeholders`]).
    Absent,
}

/// One concrete path of one call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathRule {
    /// Absolute and canonical in its parent (the last component is never followed).
    pub path: PathBuf,
    /// What is refused there.
    pub deny: Deny,
    /// What is there now.
    pub kind: Kind,
    /// The granted root the path lies under (the directories between the two are
    /// pinned, so a rename of a parent cannot move the path away).
    pub root: PathBuf,
    /// Why: `protected: git runs these hooks on the host`, or `fs.deny_read`.
    pub why: String,
}

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
        let parts: Vec<String> = path
            .components()
            .filter_map(|c| match c {
                Component::Normal(n) => Some(n.to_string_lossy().into_owned()),
                _ => None,
            })
            .collect();
        let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
        (0..=parts.len()).any(|n| glob_components(&pat, &parts[..n]))
    }
}

/// Whether the components `path` match the pattern components `pat` exactly.
fn glob_components(pat: &[&str], path: &[&str]) -> bool {
    match pat.split_first() {
        None => path.is_empty(),
        Some((&"**", rest)) => (0..=path.len()).any(|skip| glob_components(rest, &path[skip..])),
        Some((first, rest)) => {
            path.split_first().is_some_and(|(p, tail)| glob_one(first, p) && glob_components(rest, tail))
        }
    }
}

/// `*` and `?` within one component.
fn glob_one(pat: &str, name: &str) -> bool {
    fn go(p: &[char], n: &[char]) -> bool {
        match p.split_first() {
            None => n.is_empty(),
            Some(('*', rest)) => (0..=n.len()).any(|i| go(rest, &n[i..])),
            Some(('?', rest)) => !n.is_empty() && go(rest, &n[1..]),
            Some((c, rest)) => n.first() == Some(c) && go(rest, &n[1..]),
        }
    }
    let p: Vec<char> = pat.chars().collect();
    let n: Vec<char> = name.chars().collect();
    go(&p, &n)
}

/// Whether a pattern has glob characters.
pub fn is_glob(pattern: &str) -> bool {
    pattern.contains(['*', '?'])
}

/// The protected and denied paths of one call.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Protection {
    /// Concrete paths, expanded when the call started (existing or not).
    pub rules: Vec<PathRule>,
    /// The patterns, for runtimes that check every access (the WASI host).
    pub patterns: Vec<DenyPattern>,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn pat(p: &str) -> DenyPattern {
        DenyPattern { pattern: p.into(), deny: Deny::Read, why: String::new() }
    }

    #[test]
    fn globs_match_by_component() {
        assert!(pat("/w/.env").covers(Path::new("/w/.env")));
        assert!(pat("/w/.env").covers(Path::new("/w/.env/x")));
        assert!(!pat("/w/.env").covers(Path::new("/w/.envrc")));
        assert!(pat("/w/**/*.pem").covers(Path::new("/w/a.pem")));
        assert!(pat("/w/**/*.pem").covers(Path::new("/w/a/b/c.pem")));
        assert!(!pat("/w/**/*.pem").covers(Path::new("/w/a/b/c.pem.txt")));
        assert!(!pat("/w/**/*.pem").covers(Path::new("/v/a.pem")));
        assert!(pat("/h/.ssh").covers(Path::new("/h/.ssh/id_ed25519")));
        assert!(pat("/w/*/secret?").covers(Path::new("/w/a/secret1")));
        assert!(!pat("/w/*/secret?").covers(Path::new("/w/a/b/secret1")));
    }

    #[test]
    fn reads_are_refused_only_by_deny_read() {
        let p = Protection {
            rules: vec![PathRule {
                path: "/w/.git/hooks".into(),
                deny: Deny::Write,
                kind: Kind::Dir,
                root: "/w".into(),
                why: "protected".into(),
            }],
            patterns: vec![pat("/w/**/.env")],
        };
        assert!(p.refusal(Path::new("/w/.git/hooks/pre-commit"), false).is_none());
        assert!(p.refusal(Path::new("/w/.git/hooks/pre-commit"), true).is_some());
        assert!(p.refusal(Path::new("/w/sub/.env"), false).is_some());
        assert!(p.refusal(Path::new("/w/src/main.rs"), true).is_none());
        assert!(p.is_pinned_ancestor(Path::new("/w/.git")));
        assert!(!p.is_pinned_ancestor(Path::new("/w")));
        assert!(!p.is_pinned_ancestor(Path::new("/w/.git/hooks")));
    }
}
