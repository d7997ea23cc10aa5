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
        ..Protection::default()
    };
    assert!(p.refusal(Path::new("/w/.git/hooks/pre-commit"), false).is_none());
    assert!(p.refusal(Path::new("/w/.git/hooks/pre-commit"), true).is_some());
    assert!(p.refusal(Path::new("/w/sub/.env"), false).is_some());
    assert!(p.refusal(Path::new("/w/src/main.rs"), true).is_none());
    assert!(p.is_pinned_ancestor(Path::new("/w/.git")));
    assert!(!p.is_pinned_ancestor(Path::new("/w")));
    assert!(!p.is_pinned_ancestor(Path::new("/w/.git/hooks")));
}

fn policy(text: &str, ws: &Path) -> Result<crate::policy::Policy, String> {
    let ctx = crate::policy::Context {
        workspace: ws.to_path_buf(),
        home: "/nonexistent-home".into(),
        cache: "/nonexistent-cache".into(),
    };
    crate::policy::Policy::from_text(text, "t.toml", ws, &ctx).map_err(|e| e.to_string())
}

#[test]
fn deny_entries_must_lie_inside_a_grant_and_unprotect_names_one_path() {
    let ws = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let ws = ws.path().canonicalize().unwrap_or_else(|e| panic!("{e}"));
    let head = "version = 1\n[tools.t]\nexec = [\"/bin/true\"]\nfs.read = [\"/usr\"]\nfs.write = [\"{workspace}\"]\n";
    let ok = format!(
        "{head}fs.deny_read = [\"{{workspace}}/.env\", \"{{workspace}}/**/*.pem\", \"/usr/**/secret\"]\nfs.deny_write = [\"{{workspace}}/vendor\"]\nfs.unprotect = [\"{{workspace}}/.vscode\"]\n"
    );
    let p = policy(&ok, &ws).unwrap_or_else(|e| panic!("{e}"));
    let g = &p.tools["t"].grants;
    assert_eq!(g.deny.len(), 4);
    assert_eq!(g.unprotect, vec![ws.join(".vscode")]);
    for (entry, says) in [
        ("fs.deny_read = [\"/etc/shadow\"]", "inside no fs.read or fs.write grant"),
        ("fs.deny_write = [\"/usr/lib\"]", "inside no fs.write grant"),
        ("fs.deny_read = [\"{workspace}/a**b\"]", "whole path component"),
        ("fs.deny_read = [\"relative\"]", "absolute"),
        ("fs.deny_read = [\"{system}\"]", "{system} is a grant"),
        ("fs.unprotect = [\"{workspace}/*\"]", "name one protected path"),
        ("fs.unprotect = [\"/usr/.envrc\"]", "inside no fs.write grant"),
        ("fs.deny_reed = [\"{workspace}/.env\"]", "unknown field"),
    ] {
        let e = policy(&format!("{head}{entry}\n"), &ws).err().unwrap_or_else(|| panic!("{entry} was accepted"));
        assert!(e.contains(says), "{entry}: {e}");
    }
}

fn git(dir: &Path, args: &[&str]) {
    let ok = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .output();
    assert!(ok.is_ok_and(|o| o.status.success()), "git {args:?}");
}

#[test]
fn a_call_protects_the_root_entries_and_the_repository_places() {
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let ws = tmp.path().canonicalize().unwrap_or_else(|e| panic!("{e}"));
    git(&ws, &["init", "-q"]);
    git(&ws, &["config", "core.hooksPath", ".husky/_"]);
    std::fs::create_dir_all(ws.join("wt")).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(ws.join(".env"), "SECRET=1").unwrap_or_else(|e| panic!("{e}"));
    std::fs::create_dir_all(ws.join("a/b")).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(ws.join("a/b/key.pem"), "k").unwrap_or_else(|e| panic!("{e}"));
    let dirs = vec![(ws.clone(), true)];
    let deny = vec![
        crate::policy::DenyEntry { path: crate::policy::GrantPath::Fixed(ws.join(".env")), read: true },
        crate::policy::DenyEntry { path: crate::policy::GrantPath::Fixed(ws.join("**/*.pem")), read: true },
    ];
    let unprotect = vec![ws.join(".idea")];
    let input = ProtectInput {
        tool: "t",
        dirs: &dirs,
        deny: &deny,
        unprotect: &unprotect,
        tmp: None,
        expand_globs: true,
        git_init: false,
        own: &[],
    };
    let p = Protection::for_call(&input).unwrap_or_else(|e| panic!("{e}"));
    let rule = |rel: &str| p.rules.iter().find(|r| r.path == ws.join(rel));
    for (rel, kind) in [
        (".git/hooks", Kind::Dir),
        (".git/config", Kind::File),
        (".git/info", Kind::Dir),
        (".envrc", Kind::Absent),
        (".husky", Kind::Absent),
        (".mcp.json", Kind::Absent),
    ] {
        let r = rule(rel).unwrap_or_else(|| panic!("{rel} is not protected: {:?}", p.rules));
        assert_eq!((r.kind, r.deny, r.root.as_path()), (kind, Deny::Write, ws.as_path()), "{rel}");
    }
    assert!(rule(".idea").is_none(), "fs.unprotect releases .idea");
    assert_eq!(rule(".env").map(|r| r.deny), Some(Deny::Read));
    assert_eq!(rule("a/b/key.pem").map(|r| r.deny), Some(Deny::Read), "the glob was expanded");
    assert!(p.refusal(&ws.join("x/y.pem"), false).is_some(), "the pattern covers files made later");
    assert!(p.is_pinned_ancestor(&ws.join(".git")));
    // A worktree's .git file: the file itself and the common directory's places.
    git(&ws, &["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "x"]);
    git(&ws, &["worktree", "add", "-q", "wt/one"]);
    let wt = ws.join("wt/one");
    let dirs = vec![(wt.clone(), true), (ws.clone(), true)];
    let input = ProtectInput {
        tool: "t",
        dirs: &dirs,
        deny: &[],
        unprotect: &[],
        tmp: None,
        expand_globs: true,
        git_init: false,
        own: &[],
    };
    let p = Protection::for_call(&input).unwrap_or_else(|e| panic!("{e}"));
    assert!(p.rules.iter().any(|r| r.path == wt.join(".git") && r.kind == Kind::File), "{:?}", p.rules);
    assert!(p.rules.iter().any(|r| r.path == ws.join(".git/worktrees/one/config") || r.path == ws.join(".git/hooks")));
}
