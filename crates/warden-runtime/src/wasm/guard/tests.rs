#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::symlink;

use fs::HostDescriptor as _;
use wasmtime_wasi::p2::bindings::filesystem::preopens::Host as _;
use wasmtime_wasi::{FsPerms, WasiCtxBuilder};

use super::*;
use crate::protect::{DenyPattern, Kind, PathRule};
use crate::wasm::Wasi;

/// A workspace like a repository's, with `.git/hooks` and `.git/config`
/// protected, `**/.env` and `secrets` denied; preopened as a whole and
/// `secrets` once more on its own.
struct Ws {
    _dir: tempfile::TempDir,
    ws: PathBuf,
    wasi: Wasi,
    guard: Guard,
}

fn ws() -> Ws {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().canonicalize().unwrap().join("ws");
    for d in [".git/hooks", ".git/objects", ".git/refs", "secrets/inner", "src"] {
        std::fs::create_dir_all(ws.join(d)).unwrap();
    }
    for (f, text) in [
        (".env", "T=1"),
        ("secrets/key", "k"),
        (".git/config", "[core]"),
        (".git/HEAD", "ref: refs/heads/m\n"),
        ("src/main.rs", ""),
    ] {
        std::fs::write(ws.join(f), text).unwrap();
    }
    let rule =
        |p: &str, deny, kind, why: &str| PathRule { path: ws.join(p), deny, kind, root: ws.clone(), why: why.into() };
    let protect = Protection {
        rules: vec![
            rule(".git/hooks", Deny::Write, Kind::Dir, "protected: hooks"),
            rule(".git/config", Deny::Write, Kind::File, "protected: config"),
            rule("secrets", Deny::Read, Kind::Dir, "fs.deny_read"),
            rule(".vscode/tasks.json", Deny::Write, Kind::Absent, "protected: editor tasks"),
        ],
        patterns: vec![DenyPattern {
            pattern: format!("{}/**/.env", ws.display()),
            deny: Deny::Read,
            why: "fs.deny_read".into(),
        }],
        ..Protection::default()
    };
    let mut b = WasiCtxBuilder::new();
    b.allow_blocking_current_thread(true);
    b.preopened_dir(&ws, ws.to_string_lossy(), FsPerms::ReadWrite).unwrap();
    b.preopened_dir(ws.join("secrets"), "/s", FsPerms::ReadWrite).unwrap();
    let wasi = Wasi { ctx: b.build(), table: wasmtime::component::ResourceTable::new() };
    let roots = vec![ws.clone()];
    Ws { _dir: dir, ws, wasi, guard: Guard::new(protect, roots) }
}

impl Guarded<'_> {
    fn paths(&self) -> &HashMap<u32, PathBuf> {
        &self.guard.paths
    }
}

impl Ws {
    /// The guarded filesystem and the two preopens (workspace, secrets).
    fn fs(&mut self) -> (Guarded<'_>, u32, u32) {
        let mut g = Guarded { fs: self.wasi.filesystem(), guard: &mut self.guard };
        let dirs = g.fs.get_directories().unwrap();
        (g, dirs[0].0.rep(), dirs[1].0.rep())
    }
}

fn d(rep: u32) -> Resource<Descriptor> {
    Resource::new_borrow(rep)
}

fn code<T>(r: FsResult<T>) -> Option<ErrorCode> {
    r.err().map(|e| e.downcast().unwrap())
}

const READ: fs::DescriptorFlags = fs::DescriptorFlags::READ;
fn nofollow() -> fs::PathFlags {
    fs::PathFlags::empty()
}
const FOLLOW: fs::PathFlags = fs::PathFlags::SYMLINK_FOLLOW;

fn open(g: &mut Guarded<'_>, dir: u32, path: &str, oflags: fs::OpenFlags, flags: fs::DescriptorFlags) -> FsResult<u32> {
    g.open_at(d(dir), FOLLOW, path.into(), oflags, flags).map(|r| r.rep())
}

#[test]
fn locate_resolves_links_dots_and_trailing_slashes_as_the_kernel_does() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::create_dir_all(root.join("a/b")).unwrap();
    symlink("a/b", root.join("l")).unwrap();
    symlink("../../a", root.join("a/b/up")).unwrap();
    symlink("/etc", root.join("abs")).unwrap();
    symlink("loop", root.join("loop")).unwrap();
    let fd = std::fs::File::open(&root).unwrap();
    let at = |p: &str, follow| locate(fd.as_fd(), p, follow);
    assert_eq!(at("a/./b/", false).unwrap(), [root.join("a/b")]);
    assert_eq!(at("a/b/../b/x", false).unwrap(), [root.join("a/b/x")]);
    assert_eq!(at("l/x", false).unwrap(), [root.join("a/b/x")]);
    assert_eq!(at("l/../x", false).unwrap(), [root.join("a/x")], "`..` after a link is physical");
    assert_eq!(at("l", false).unwrap(), [root.join("l")]);
    assert_eq!(at("l", true).unwrap(), [root.join("l"), root.join("a/b")]);
    assert_eq!(at("l/", false).unwrap(), [root.join("l"), root.join("a/b")], "a trailing slash follows");
    assert_eq!(at("a/b/up", true).unwrap(), [root.join("a/b/up"), root.join("a")]);
    assert_eq!(at(".", false).unwrap(), std::slice::from_ref(&root));
    assert!(at("..", false).is_err(), "above the descriptor");
    assert!(at("a/../../x", false).is_err(), "above the descriptor");
    assert!(at("/etc/passwd", false).is_err(), "absolute");
    assert!(at("abs", true).is_err(), "an absolute link is refused like cap-std does");
    assert!(at("loop", true).is_err());
    assert_eq!(at("abs", false).unwrap(), [root.join("abs")], "the link itself may be judged");
    // The fast way agrees with the kernel's wherever it answers, and
    // declines wherever a link or `..` is on the way.
    let plain = |p: &str, follow| locate_plain(fd.as_fd(), &root, p, follow);
    for p in ["a", "a/b", "./a//b/", "a/b/new", "new", "a/./b/.", "l", "a/b/up"] {
        if let Some(fast) = plain(p, false) {
            assert_eq!(fast, at(p, false).unwrap(), "{p}");
        }
    }
    assert_eq!(plain("a/b/new", true).unwrap(), [root.join("a/b/new")]);
    assert_eq!(plain("l", false).unwrap(), [root.join("l")]);
    for (p, follow) in [("l", true), ("l/x", false), ("l/", false), ("a/../a", false), ("/a", false), ("a/b/up", true)]
    {
        assert!(plain(p, follow).is_none(), "{p}");
    }
}

#[test]
fn denied_paths_are_unreachable_by_every_path_operation() {
    let mut w = ws();
    let ws = w.ws.clone();
    symlink("../.env", ws.join("src/e")).unwrap();
    symlink("../secrets/inner", ws.join("src/s")).unwrap();
    let (mut g, root, secrets) = w.fs();
    let none = fs::OpenFlags::empty();
    assert_eq!(code(open(&mut g, root, ".env", none, READ)), Some(ErrorCode::Access));
    assert_eq!(code(open(&mut g, root, "src/../.env", none, READ)), Some(ErrorCode::Access));
    assert_eq!(code(open(&mut g, root, "src/e", none, READ)), Some(ErrorCode::Access), "through a link");
    assert_eq!(code(open(&mut g, root, "src/s/../key", none, READ)), Some(ErrorCode::Access), "link then ..");
    assert_eq!(code(open(&mut g, root, "secrets", fs::OpenFlags::DIRECTORY, READ)), Some(ErrorCode::Access));
    assert_eq!(code(g.stat_at(d(root), nofollow(), "secrets/key".into())), Some(ErrorCode::Access));
    assert_eq!(code(g.stat_at(d(root), FOLLOW, "src/e".into())), Some(ErrorCode::Access));
    assert!(g.stat_at(d(root), nofollow(), "src/e".into()).is_ok(), "the link itself is not denied");
    assert_eq!(g.readlink_at(d(root), "src/e".into()).unwrap(), "../.env");
    assert_eq!(code(g.readlink_at(d(root), "secrets/x".into())), Some(ErrorCode::Access));
    let now = fs::NewTimestamp::Now;
    assert_eq!(code(g.set_times_at(d(root), nofollow(), ".env".into(), now, now)), Some(ErrorCode::Access));
    assert_eq!(
        code(g.link_at(d(root), nofollow(), ".env".into(), d(root), "src/copy".into())),
        Some(ErrorCode::Access)
    );
    assert_eq!(code(g.rename_at(d(root), ".env".into(), d(root), "src/env".into())), Some(ErrorCode::Access));
    assert_eq!(code(g.unlink_file_at(d(root), "secrets/key".into())), Some(ErrorCode::Access));
    // The same directory through its own preopen.
    assert_eq!(code(g.read_directory(d(secrets))), Some(ErrorCode::Access));
    assert_eq!(code(open(&mut g, secrets, "key", none, READ)), Some(ErrorCode::Access));
    assert_eq!(code(g.stat_at(d(secrets), nofollow(), "key".into())), Some(ErrorCode::Access));
    // A hash for a listing, made from the path, not the file.
    let h = g.metadata_hash_at(d(root), nofollow(), ".env".into()).unwrap();
    assert_eq!((h.lower, h.upper), {
        let p = path_hash(&ws.join(".env"));
        (p.lower, p.upper)
    });
    assert!(code(g.metadata_hash_at(d(root), nofollow(), "nothing/.env".into())).is_some());
    let refusal = w.guard.refusal().unwrap();
    assert_eq!(refusal.path, ws.join("secrets/key"));
    assert!(refusal.message().contains("the tool's fs.deny_read releases it"), "{}", refusal.message());
    assert!(std::fs::exists(ws.join(".env")).unwrap() && !std::fs::exists(ws.join("src/copy")).unwrap());
}

#[test]
fn protected_paths_are_read_only_through_every_operation() {
    let mut w = ws();
    let ws = w.ws.clone();
    symlink("../.git/hooks/pre-commit", ws.join("src/h")).unwrap();
    let (mut g, root, _) = w.fs();
    let ro = Some(ErrorCode::ReadOnly);
    let create = fs::OpenFlags::CREATE;
    let wr = fs::DescriptorFlags::WRITE;
    assert_eq!(code(open(&mut g, root, ".git/hooks/pre-commit", create, wr)), ro);
    assert_eq!(code(open(&mut g, root, "src/h", create, wr)), ro, "through a dangling link");
    assert_eq!(code(open(&mut g, root, ".git/config", fs::OpenFlags::TRUNCATE, READ)), ro);
    assert_eq!(code(g.create_directory_at(d(root), ".git/hooks/./d/".into())), ro);
    assert_eq!(code(g.symlink_at(d(root), "x".into(), ".git/hooks/post-merge".into())), ro);
    assert_eq!(code(g.link_at(d(root), nofollow(), "src/main.rs".into(), d(root), ".git/hooks/x".into())), ro);
    assert_eq!(
        code(g.link_at(d(root), nofollow(), ".git/config".into(), d(root), "cfg".into())),
        ro,
        "a second name to write through"
    );
    assert_eq!(code(g.rename_at(d(root), ".git".into(), d(root), "git".into())), ro, "a pinned ancestor");
    assert_eq!(code(g.rename_at(d(root), "src".into(), d(root), ".git".into())), ro, "onto a pinned ancestor");
    assert_eq!(code(g.remove_directory_at(d(root), ".git/hooks".into())), ro);
    // An absent protected path: no link where its directory would be, nothing created there.
    assert_eq!(code(g.symlink_at(d(root), "src".into(), ".vscode".into())), ro);
    assert_eq!(code(g.link_at(d(root), nofollow(), "src/main.rs".into(), d(root), ".vscode".into())), ro);
    assert_eq!(code(g.create_directory_at(d(root), ".vscode".into())), ro, "the name is protected at any depth");
    assert_eq!(code(g.create_directory_at(d(root), "src/.vscode".into())), ro, "at any depth");
    assert!(open(&mut g, root, ".vscode/tasks.json", create, wr).is_err());
    let now = fs::NewTimestamp::Now;
    assert_eq!(code(g.set_times_at(d(root), nofollow(), ".git/config".into(), now, now)), ro);
    // A directory descriptor for .git: operations relative to it are judged where they land.
    let git = open(&mut g, root, ".git", fs::OpenFlags::DIRECTORY, READ).unwrap();
    assert_eq!(code(open(&mut g, git, "hooks/pre-commit", create, wr)), ro);
    assert_eq!(code(g.rename_at(d(git), "hooks".into(), d(git), "h".into())), ro);
    assert_eq!(code(g.unlink_file_at(d(git), "config".into())), ro);
    assert!(open(&mut g, git, "HEAD", create, wr).is_ok(), "elsewhere in .git is writable");
    // A protected file opened for reading: it reads, but nothing writes through it.
    let cfg = open(&mut g, root, ".git/config", fs::OpenFlags::empty(), READ).unwrap();
    assert_eq!(g.read(d(cfg), 100, 0).unwrap().0, b"[core]");
    assert_eq!(code(g.write_via_stream(d(cfg), 0).map(|s| s.rep())), ro);
    assert_eq!(code(g.append_via_stream(d(cfg)).map(|s| s.rep())), ro);
    assert_eq!(code(g.set_times(d(cfg), now, now)), ro);
    assert_eq!(code(g.set_size(d(cfg), 0)), ro);
    // Ordinary work.
    let f = open(&mut g, root, "src/new.rs", create, wr).unwrap();
    assert!(g.write(d(f), b"x".to_vec(), 0).is_ok());
    assert!(g.rename_at(d(root), "src/new.rs".into(), d(root), "src/old.rs".into()).is_ok());
    assert!(g.read_directory(d(git)).is_ok());
    let refusal = w.guard.refusal().unwrap().message();
    assert!(refusal.contains(".git/config") && refusal.contains("fs.unprotect"), "{refusal}");
    assert!(!std::fs::exists(ws.join(".git/hooks/pre-commit")).unwrap());
    assert_eq!(std::fs::read_to_string(ws.join(".git/config")).unwrap(), "[core]");
}

/// With nothing denied to read (the built-in protected paths alone), reads
/// are not judged at all, and writes still are.
#[test]
fn reads_are_not_judged_when_nothing_is_denied_to_read() {
    let mut w = ws();
    w.guard.protect.rules.retain(|r| r.deny == Deny::Write);
    w.guard.protect.patterns.clear();
    w.guard = Guard::new(std::mem::take(&mut w.guard.protect), vec![w.ws.clone()]);
    let (mut g, root, _) = w.fs();
    let cfg = open(&mut g, root, ".git/config", fs::OpenFlags::empty(), READ).unwrap();
    assert!(g.paths().is_empty(), "a read was located");
    assert_eq!(code(g.write_via_stream(d(cfg), 0).map(|s| s.rep())), Some(ErrorCode::ReadOnly));
    let wr = fs::DescriptorFlags::WRITE;
    assert_eq!(code(open(&mut g, root, ".git/hooks/x", fs::OpenFlags::CREATE, wr)), Some(ErrorCode::ReadOnly));
    assert!(open(&mut g, root, ".env", fs::OpenFlags::empty(), READ).is_ok());
}

#[test]
fn nothing_is_judged_without_protection() {
    let mut w = ws();
    w.guard = Guard::default();
    let (mut g, root, _) = w.fs();
    assert!(open(&mut g, root, ".env", fs::OpenFlags::empty(), READ).is_ok());
    assert!(g.rename_at(d(root), ".git".into(), d(root), "git".into()).is_ok());
    assert!(w.guard.refusal().is_none());
}
