//! Hard-linked files under a granted directory (lint rule `WL113`).
//!
//! Landlock and the WASI preopens authorise a path, never an inode: a file
//! that also has a link outside the grant is reachable through the link inside
//! it. No tool can make such a link (Landlock refuses it), so `warden audit`
//! looks for the ones already there.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::lint::HardLinks;

/// The most directory entries looked at under one grant.
const MAX_ENTRIES: usize = 200_000;
/// The longest a walk of one grant may take.
const MAX_TIME: Duration = Duration::from_secs(5);

/// Regular files under `dir` with a hard link that is not under `dir` too:
/// each inode's links are counted during the walk, and one whose links are all
/// inside (cargo's `target/`, a `cp -al` copy within the workspace) is no way
/// out. Symbolic links are not followed. `None` when there is none (or `dir`
/// cannot be read).
pub fn hard_links(dir: &Path) -> Option<HardLinks> {
    use std::collections::HashMap;
    use std::os::unix::fs::MetadataExt;
    let started = Instant::now();
    // (device, inode) -> (links seen here, links it has, the first path seen).
    let mut linked: HashMap<(u64, u64), (u64, u64, PathBuf)> = HashMap::new();
    let (mut entries, mut complete) = (0usize, true);
    let mut todo = vec![dir.to_path_buf()];
    'walk: while let Some(d) = todo.pop() {
        let Ok(list) = std::fs::read_dir(&d) else { continue };
        for entry in list.flatten() {
            entries += 1;
            if entries > MAX_ENTRIES || started.elapsed() > MAX_TIME {
                complete = false;
                break 'walk;
            }
            let Ok(meta) = entry.metadata() else { continue };
            if meta.is_dir() {
                todo.push(entry.path());
            } else if meta.is_file() && meta.nlink() > 1 {
                linked.entry((meta.dev(), meta.ino())).or_insert_with(|| (0, meta.nlink(), entry.path())).0 += 1;
            }
        }
    }
    let mut outside: Vec<PathBuf> =
        linked.into_values().filter(|(seen, links, _)| seen < links).map(|(_, _, path)| path).collect();
    outside.sort();
    let count = outside.len() as u64;
    outside.into_iter().next().map(|example| HardLinks { count, example, complete })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn finds_links_to_files_outside_and_not_links_within() {
        let root = tempfile::tempdir().unwrap();
        let (granted, outside) = (root.path().join("granted"), root.path().join("outside"));
        std::fs::create_dir_all(granted.join("a/b")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(granted.join("a/plain.txt"), "x").unwrap();
        std::os::unix::fs::symlink(&outside, granted.join("to-outside")).unwrap();
        assert_eq!(hard_links(&granted), None, "a symbolic link is not followed, a plain file is not counted");
        std::fs::write(outside.join("secret"), "s").unwrap();
        std::fs::hard_link(outside.join("secret"), granted.join("a/b/linked")).unwrap();
        let found = hard_links(&granted).unwrap();
        assert_eq!((found.count, found.example, found.complete), (1, granted.join("a/b/linked"), true));
        // Both links of a file inside the grant (as cargo's target/ has): no way out.
        std::fs::remove_file(granted.join("a/b/linked")).unwrap();
        std::fs::hard_link(granted.join("a/plain.txt"), granted.join("a/b/twin")).unwrap();
        assert_eq!(hard_links(&granted), None);
        assert!(hard_links(&granted.join("a/b")).is_some(), "seen from a/b, the twin's other link is outside");
    }
}
