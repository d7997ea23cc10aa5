#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;

use super::*;

/// The real tree with some entries added or hidden: a layer's view.
struct Fake {
    added: HashMap<PathBuf, Kind>,
}

impl View for Fake {
    fn kind(&self, path: &Path) -> Option<Kind> {
        self.added.get(path).copied().or_else(|| Real.kind(path))
    }
}

fn fake(entries: &[(&Path, Kind)]) -> Fake {
    Fake { added: entries.iter().map(|(p, k)| (p.to_path_buf(), *k)).collect() }
}

fn git(dir: &Path, args: &[&str]) {
    let ok = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .output()
        .unwrap();
    assert!(ok.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&ok.stderr));
}

fn ws() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().canonicalize().unwrap();
    git(&ws, &["init", "-q"]);
    (dir, ws)
}

fn refused(v: &Verdict) -> bool {
    matches!(v, Verdict::Refuse(_))
}

#[test]
fn inside_a_git_directory_only_the_state_git_work_writes_may_change() {
    let (_d, ws) = ws();
    let protect = Protection::default();
    let j = Judge::new(std::slice::from_ref(&ws), &protect);
    let at = |rel: &str, change, dir| j.judge(&Real, &ws.join(rel), change, dir);
    for rel in [
        ".git/objects/ab/cdef",
        ".git/refs/heads/topic",
        ".git/logs/HEAD",
        ".git/index",
        ".git/index.lock",
        ".git/HEAD",
        ".git/ORIG_HEAD",
        ".git/CHERRY_PICK_HEAD",
        ".git/packed-refs",
        ".git/COMMIT_EDITMSG",
        ".git/rebase-merge/done",
        ".git/sequencer/todo",
    ] {
        assert_eq!(at(rel, Change::Create, false), Verdict::Allow, "{rel}");
    }
    for rel in [
        ".git/commondir",
        ".git/config",
        ".git/config.worktree",
        ".git/x/config",
        ".git/hooks/post-commit",
        ".git/info/attributes",
        ".git/description",
        ".git/something-new",
    ] {
        assert!(refused(&at(rel, Change::Create, false)), "{rel}: {:?}", at(rel, Change::Create, false));
    }
    assert!(refused(&at(".git/x", Change::Create, true)), "a new directory at the top of .git");
    // Removing is never how something comes to run; a protected entry is kept by its rule.
    assert_eq!(at(".git/hooks/pre-commit.sample", Change::Delete, false), Verdict::Allow);
    assert_eq!(at("src/main.rs", Change::Create, false), Verdict::Allow);
}

#[test]
fn no_repository_appears_outside_one_at_any_depth_or_in_any_layout() {
    let (_d, ws) = ws();
    let protect = Protection::default();
    let j = Judge::new(std::slice::from_ref(&ws), &protect);
    // A nested .git, as a directory or inside one.
    assert!(refused(&j.judge(&Real, &ws.join("sub/.git"), Change::Create, true)));
    assert!(refused(&j.judge(&Real, &ws.join("a/b/.git/config"), Change::Create, false)));
    // A .git file is judged by what it says.
    assert_eq!(j.judge(&Real, &ws.join("sub/.git"), Change::Create, false), Verdict::Vet(Vet::GitLink));
    // A bare layout at any depth: HEAD beside objects and refs, or alone.
    std::fs::create_dir_all(ws.join("pkg/objects")).unwrap();
    std::fs::create_dir_all(ws.join("pkg/refs")).unwrap();
    let head = ws.join("pkg/HEAD");
    let view = RealPlus { path: &head, kind: Kind::File };
    let v = j.judge(&view, &head, Change::Create, false);
    assert!(refused(&v), "{v:?}");
    assert!(refused(&j.judge(&Real, &ws.join("deep/er/HEAD"), Change::Create, false)));
    // objects and refs beside an existing HEAD: the layout completes in the view.
    std::fs::create_dir_all(ws.join("fix")).unwrap();
    std::fs::write(ws.join("fix/HEAD"), "ref: refs/heads/main\n").unwrap();
    std::fs::create_dir_all(ws.join("fix/objects")).unwrap();
    let refs = ws.join("fix/refs");
    let view = RealPlus { path: &refs, kind: Kind::Dir };
    assert!(refused(&j.judge(&view, &refs, Change::Create, true)));
    // A commondir completes one too.
    let common = ws.join("fix/commondir");
    let view = RealPlus { path: &common, kind: Kind::File };
    assert!(refused(&j.judge(&view, &common, Change::Create, false)));
    // At the grant's root, when the root has no .git (a monorepo package).
    let root = tempfile::tempdir().unwrap();
    let pkg = root.path().canonicalize().unwrap();
    std::fs::create_dir_all(pkg.join("objects")).unwrap();
    std::fs::create_dir_all(pkg.join("refs")).unwrap();
    let j2 = Judge::new(std::slice::from_ref(&pkg), &protect);
    let head = pkg.join("HEAD");
    let view = RealPlus { path: &head, kind: Kind::File };
    assert!(refused(&j2.judge(&view, &head, Change::Create, false)));
}

#[test]
fn git_init_allows_new_repositories_whose_config_and_hooks_are_vetted() {
    let (_d, ws) = ws();
    let protect = Protection { git_init: true, ..Protection::default() };
    let j = Judge::new(std::slice::from_ref(&ws), &protect);
    let new = ws.join("sub/.git");
    let view = fake(&[
        (&new, Kind::Dir),
        (&new.join("HEAD"), Kind::File),
        (&new.join("objects"), Kind::Dir),
        (&new.join("refs"), Kind::Dir),
    ]);
    assert_eq!(j.judge(&view, &new, Change::Create, true), Verdict::Allow);
    assert_eq!(j.judge(&view, &new.join("HEAD"), Change::Create, false), Verdict::Allow);
    assert_eq!(j.judge(&view, &new.join("config"), Change::Create, false), Verdict::Vet(Vet::Config));
    assert_eq!(j.judge(&view, &new.join("hooks/pre-commit.sample"), Change::Create, false), Verdict::Allow);
    assert!(refused(&j.judge(&view, &new.join("hooks/pre-commit"), Change::Create, false)));
    assert!(refused(&j.judge(&view, &new.join("commondir"), Change::Create, false)));
    // The workspace's own repository stays as it was.
    assert!(refused(&j.judge(&view, &ws.join(".git/config"), Change::Modify, false)));
}

#[test]
fn submodules_and_worktrees_made_inside_the_repository_are_vetted_not_refused() {
    let (_d, ws) = ws();
    let protect = Protection::default();
    let j = Judge::new(std::slice::from_ref(&ws), &protect);
    let module = ws.join(".git/modules/lib");
    let wt = ws.join(".git/worktrees/one");
    let view = fake(&[
        (&module, Kind::Dir),
        (&module.join("HEAD"), Kind::File),
        (&module.join("objects"), Kind::Dir),
        (&module.join("refs"), Kind::Dir),
        (&module.join("config"), Kind::File),
        (&wt, Kind::Dir),
        (&wt.join("HEAD"), Kind::File),
        (&wt.join("commondir"), Kind::File),
        (&ws.join("lib/.git"), Kind::File),
    ]);
    assert_eq!(j.judge(&view, &module.join("config"), Change::Create, false), Verdict::Vet(Vet::Config));
    assert_eq!(j.judge(&view, &module.join("objects/pack/p.pack"), Change::Create, false), Verdict::Allow);
    assert!(refused(&j.judge(&view, &module.join("hooks/post-checkout"), Change::Create, false)));
    assert_eq!(j.judge(&view, &wt.join("commondir"), Change::Create, false), Verdict::Vet(Vet::Commondir));
    assert_eq!(j.judge(&view, &wt.join("gitdir"), Change::Create, false), Verdict::Allow);
    assert!(refused(&j.judge(&view, &wt.join("config.worktree"), Change::Create, false)));
    // The submodule's .git file points at its git directory.
    let link = ws.join("lib/.git");
    assert_eq!(j.judge(&view, &link, Change::Create, false), Verdict::Vet(Vet::GitLink));
    assert_eq!(vet(Vet::GitLink, &link, b"gitdir: ../.git/modules/lib\n", &view, &j), Ok(()));
    for bad in ["gitdir: ../elsewhere\n", "gitdir: ../.git\n", "gitdir: ../.git/modules/lib\ngitdir: x\n", "x"] {
        assert!(vet(Vet::GitLink, &link, bad.as_bytes(), &view, &j).is_err(), "{bad:?}");
    }
    assert_eq!(vet(Vet::Commondir, &wt.join("commondir"), b"../..\n", &view, &j), Ok(()));
    assert!(vet(Vet::Commondir, &wt.join("commondir"), b"../../../x\n", &view, &j).is_err());
}

#[test]
fn names_that_editors_shells_and_agents_run_are_refused_at_any_depth() {
    let (_d, ws) = ws();
    let protect = Protection::default();
    let j = Judge::new(std::slice::from_ref(&ws), &protect);
    for rel in ["sub/.envrc", "a/b/.vscode/tasks.json", "pkg/.mcp.json", "x/.claude/settings.json", ".lefthook.yml"] {
        assert!(refused(&j.judge(&Real, &ws.join(rel), Change::Create, false)), "{rel}");
    }
    // fs.unprotect releases the one path it names.
    let protect = Protection { unprotect: vec![ws.join("sub/.envrc")], ..Protection::default() };
    let j = Judge::new(std::slice::from_ref(&ws), &protect);
    assert_eq!(j.judge(&Real, &ws.join("sub/.envrc"), Change::Create, false), Verdict::Allow);
    assert!(refused(&j.judge(&Real, &ws.join("other/.envrc"), Change::Create, false)));
    // Outside the write grants nothing is judged here.
    assert_eq!(j.judge(&Real, Path::new("/elsewhere/.envrc"), Change::Create, false), Verdict::Allow);
}

#[test]
fn a_new_repository_config_holds_only_keys_that_run_nothing() {
    let init = "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\tlogallrefupdates = true\n";
    let clone = format!(
        "{init}[remote \"origin\"]\n\turl = https://example.org/r.git\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n\
         [branch \"main\"]\n\tremote = origin\n\tmerge = refs/heads/main\n"
    );
    let module = format!("{clone}[core]\n\tworktree = ../../../lib\n[submodule \"x\"]\n\tupdate = rebase\n");
    for ok in [init, clone.as_str(), module.as_str(), "; comment\n# comment\n[core]\nbare\n"] {
        assert_eq!(vet_config(ok), Ok(()), "{ok}");
    }
    for bad in [
        "[core]\n\tfsmonitor = touch /tmp/x\n",
        "[core]\n\thooksPath = hooks2\n",
        "[core]\n\tsshCommand = sh\n",
        "[core]\n\tpager = sh\n",
        "[include]\n\tpath = ../x\n",
        "[includeIf \"gitdir:/\"]\n\tpath = x\n",
        "[alias]\n\tst = !sh\n",
        "[filter \"x\"]\n\tclean = sh\n",
        "[diff \"x\"]\n\ttextconv = sh\n",
        "[credential]\n\thelper = !sh\n",
        "[submodule \"x\"]\n\tupdate = !sh\n",
        "[remote \"o\"]\n\tuploadpack = sh\n",
        "[remote \"o\"]\n\turl = ext::sh -c x\n",
        "[core \"x\"]\n\tbare = true\n",
        "[core]\n\tfsmonitor = \"unterminated\n",
        "bare = true\n",
        "[core\n",
        "[core]\n\tbare = \\q\n",
    ] {
        assert!(vet_config(bad).is_err(), "{bad}");
    }
}

#[test]
fn only_what_makes_a_forbidden_repository_is_refused_beside_it() {
    let root = tempfile::tempdir().unwrap();
    let pkg = root.path().canonicalize().unwrap();
    let protect = Protection::default();
    let j = Judge::new(std::slice::from_ref(&pkg), &protect);
    let view = fake(&[
        (&pkg.join("HEAD"), Kind::File),
        (&pkg.join("objects"), Kind::Dir),
        (&pkg.join("refs"), Kind::Dir),
        (&pkg.join("config"), Kind::File),
        (&pkg.join("ordinary.txt"), Kind::File),
    ]);
    for sig in ["HEAD", "refs"] {
        assert!(refused(&j.judge(&view, &pkg.join(sig), Change::Create, sig != "HEAD")), "{sig}");
    }
    assert!(refused(&j.judge(&view, &pkg.join("objects"), Change::Create, true)));
    // Without its HEAD the directory is no repository: the rest lands.
    assert_eq!(j.judge(&view, &pkg.join("ordinary.txt"), Change::Create, false), Verdict::Allow);
    assert_eq!(j.judge(&view, &pkg.join("config"), Change::Create, false), Verdict::Allow);
}
