//! The vocabulary the host and the helper share about paths: what a rule
//! refuses at a concrete path ([`PathRule`]) and which directories a process
//! call writes through an overlay ([`LayerRoot`]). The host decides them; the
//! helper mounts them.

use std::path::PathBuf;

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
    /// Does not exist: nothing may be created there (what a process call
    /// makes there stays in its layer: the host's layer).
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

/// One write grant's layer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LayerRoot {
    /// The real directory (canonical): the overlay's lower layer, and where it is mounted.
    pub root: PathBuf,
    /// What the tool wrote.
    pub upper: PathBuf,
    /// overlayfs's own scratch directory (same file system as `upper`).
    pub work: PathBuf,
}
