#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;

use super::*;
use crate::protect::Protection;

struct Scene {
    _tmp: tempfile::TempDir,
    ws: PathBuf,
    layer: Layer,
}

/// A workspace with a repository and two files, and a layer over it whose
/// upper directory the test fills by hand, as overlayfs would.
fn scene() -> Scene {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().canonicalize().unwrap();
    let ws = base.join("ws");
    std::fs::create_dir_all(ws.join("d")).unwrap();
    let ok = std::process::Command::new("git").arg("-C").arg(&ws).args(["init", "-q"]).status().unwrap();
    assert!(ok.success());
    std::fs::write(ws.join("old.txt"), "old").unwrap();
    std::fs::write(ws.join("d/x"), "x").unwrap();
    std::fs::write(ws.join("d/y"), "y").unwrap();
    std::fs::create_dir_all(base.join("layers")).unwrap();
    let layer = Layer::create_in(&base.join("layers"), "c-test", std::slice::from_ref(&ws)).unwrap();
    Scene { _tmp: tmp, ws, layer }
}

fn up(s: &Scene, rel: &str, text: &str) {
    let p = s.layer.roots()[0].upper.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

fn whiteout(s: &Scene, rel: &str) {
    let p = s.layer.roots()[0].upper.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    rustix::fs::mknodat(rustix::fs::CWD, &p, FileType::CharacterDevice, Mode::empty(), 0).unwrap();
}

fn apply(s: &mut Scene, protect: &Protection, mode: ApplyMode) -> Applied {
    let judge = Judge::new(std::slice::from_ref(&s.ws), protect);
    s.layer.apply(&judge, mode)
}

#[test]
fn allowed_changes_move_in_and_refused_ones_never_reach_the_tree() {
    let mut s = scene();
    up(&s, "a.txt", "new");
    up(&s, "deep/new/tree/file", "t");
    up(&s, "sub/.git/HEAD", "ref: refs/heads/main\n");
    up(&s, "sub/.git/config", "[core]\n\tfsmonitor = touch /tmp/x\n");
    std::fs::create_dir_all(s.layer.roots()[0].upper.join("sub/.git/objects")).unwrap();
    std::fs::create_dir_all(s.layer.roots()[0].upper.join("sub/.git/refs")).unwrap();
    up(&s, ".git/commondir", "x\n");
    up(&s, ".git/refs/heads/topic", "0000000000000000000000000000000000000000\n");
    up(&s, "src/.envrc", "evil");
    whiteout(&s, "old.txt");
    let out = apply(&mut s, &Protection::default(), ApplyMode::Move);
    let ws = &s.ws;
    assert_eq!(std::fs::read_to_string(ws.join("a.txt")).unwrap(), "new");
    assert_eq!(std::fs::read_to_string(ws.join("deep/new/tree/file")).unwrap(), "t");
    assert!(ws.join(".git/refs/heads/topic").exists());
    assert!(!ws.join("old.txt").exists(), "the removal reached the tree");
    for gone in ["sub/.git", ".git/commondir", "src/.envrc"] {
        assert!(!ws.join(gone).exists(), "{gone} reached the tree");
    }
    let refused: Vec<String> =
        out.refused.iter().map(|(p, _)| p.strip_prefix(ws).unwrap().display().to_string()).collect();
    assert_eq!(refused, vec![".git/commondir", "src/.envrc", "sub/.git"], "{out:?}");
    assert!(out.failed.is_empty(), "{out:?}");
}

#[test]
fn set_id_bits_and_overlay_state_never_reach_the_host() {
    let mut s = scene();
    up(&s, "tool", "#!/bin/sh\n");
    let upper = s.layer.roots()[0].upper.clone();
    std::fs::set_permissions(upper.join("tool"), std::fs::Permissions::from_mode(0o4755)).unwrap();
    rustix::fs::setxattr(upper.join("tool").as_path(), "user.overlay.origin", b"", rustix::fs::XattrFlags::empty())
        .unwrap();
    apply(&mut s, &Protection::default(), ApplyMode::Move);
    let m = std::fs::metadata(s.ws.join("tool")).unwrap();
    assert_eq!(m.permissions().mode() & 0o7777, 0o755);
    let mut buf = [0u8; 256];
    let n = rustix::fs::listxattr(s.ws.join("tool").as_path(), &mut buf[..]).unwrap();
    assert!(!buf[..n].windows(8).any(|w| w == b"overlay."), "{:?}", &buf[..n]);
}

#[test]
fn an_opaque_directory_replaces_the_real_one_and_protected_entries_stay() {
    let mut s = scene();
    up(&s, "d/z", "z");
    let upper = s.layer.roots()[0].upper.clone();
    rustix::fs::setxattr(upper.join("d").as_path(), "user.overlay.opaque", b"y", rustix::fs::XattrFlags::empty())
        .unwrap();
    // The workspace's own config may not be removed by a whiteout either.
    whiteout(&s, ".git/config");
    let protect = Protection::for_call(&crate::protect::ProtectInput {
        tool: "t",
        dirs: &[(s.ws.clone(), true)],
        deny: &[],
        unprotect: &[],
        tmp: None,
        expand_globs: true,
        git_init: false,
        own: &[],
    })
    .unwrap();
    let out = apply(&mut s, &protect, ApplyMode::Move);
    let mut names: Vec<String> =
        std::fs::read_dir(s.ws.join("d")).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    names.sort();
    assert_eq!(names, vec!["z"]);
    assert!(s.ws.join(".git/config").exists());
    assert_eq!(out.refused.len(), 1, "{out:?}");
}

#[test]
fn copy_mode_applies_each_change_once_and_keeps_the_layer() {
    let mut s = scene();
    up(&s, "notes.txt", "one");
    let first = apply(&mut s, &Protection::default(), ApplyMode::Copy);
    assert_eq!(first.applied, 1);
    assert_eq!(std::fs::read_to_string(s.ws.join("notes.txt")).unwrap(), "one");
    assert!(s.layer.roots()[0].upper.join("notes.txt").exists(), "the upper entry stays");
    let again = apply(&mut s, &Protection::default(), ApplyMode::Copy);
    assert_eq!(again.applied, 0, "nothing changed since");
    std::thread::sleep(std::time::Duration::from_millis(20));
    up(&s, "notes.txt", "two");
    let third = apply(&mut s, &Protection::default(), ApplyMode::Copy);
    assert_eq!(third.applied, 1);
    assert_eq!(std::fs::read_to_string(s.ws.join("notes.txt")).unwrap(), "two");
}

#[test]
fn the_layer_is_removed_unless_something_was_not_applied() {
    let s = scene();
    let dir = s.layer.dir().to_path_buf();
    assert!(dir.exists());
    drop(s.layer);
    assert!(!dir.exists());
}

#[test]
fn a_directory_the_tool_made_unreadable_is_still_applied_with_its_mode() {
    let mut s = scene();
    up(&s, "d/x", "changed");
    let upper = s.layer.roots()[0].upper.clone();
    std::fs::set_permissions(upper.join("d"), std::fs::Permissions::from_mode(0o000)).unwrap();
    let out = apply(&mut s, &Protection::default(), ApplyMode::Move);
    assert!(out.failed.is_empty(), "{out:?}");
    let m = std::fs::metadata(s.ws.join("d")).unwrap();
    assert_eq!(m.permissions().mode() & 0o777, 0o000);
    std::fs::set_permissions(s.ws.join("d"), std::fs::Permissions::from_mode(0o755)).unwrap();
    assert_eq!(std::fs::read_to_string(s.ws.join("d/x")).unwrap(), "changed");
}
