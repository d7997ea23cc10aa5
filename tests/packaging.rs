//! Packaging as a user meets it: `warden completions SHELL` loaded by the real
//! shells, `warden --version` naming the commit, `warden policy show-default`
//! printing the embedded policy (which then checks as a file), the man pages,
//! and `cargo xtask dist --bin-dir` packing this build's binaries into an
//! archive that installs and runs from wherever it is unpacked, with a fresh
//! HOME. (The release build of `cargo xtask dist` itself is run by hand; its
//! layout is this test's.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

mod util;

fn warden(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_warden")).args(args).env_remove("RUST_LOG").stdin(Stdio::null()).output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Runs `program ARGS` (a shell) and returns its stdout; it must succeed.
fn shell(program: &str, args: &[&str]) -> String {
    let out = Command::new(program).args(args).stdin(Stdio::null()).output().unwrap_or_else(|e| {
        panic!("{program} is not installed ({e}): .ci/run installs bash, zsh and fish for this test")
    });
    assert!(out.status.success(), "{program} {args:?}: {}\n{}", text(&out.stdout), text(&out.stderr));
    text(&out.stdout)
}

/// The completion script for `sh`, written to a file a shell can source.
fn script(dir: &Path, sh: &str) -> PathBuf {
    let out = warden(&["completions", sh]);
    assert!(out.status.success(), "completions {sh}: {}", text(&out.stderr));
    let path = dir.join(format!("warden.{sh}"));
    std::fs::write(&path, &out.stdout).unwrap();
    path
}

#[test]
fn completions_load_in_bash_zsh_and_fish_and_complete_the_subcommands() {
    let dir = tempfile::tempdir().unwrap();
    // bash: the script registers a completion for `warden`, and completing `warden pol` offers `policy`.
    let bash = script(dir.path(), "bash");
    let probe = format!(
        "source {}; complete -p warden; COMP_WORDS=(warden pol); COMP_CWORD=1; COMP_LINE='warden pol'; \
         COMP_POINT=10; _warden warden pol warden; printf 'reply:%s\\n' \"${{COMPREPLY[@]}}\"",
        bash.display()
    );
    let out = shell("bash", &["--norc", "--noprofile", "-c", &probe]);
    assert!(
        out.lines().any(|l| l.starts_with("complete ") && l.contains(" -F _warden ") && l.ends_with(" warden")),
        "{out}"
    );
    assert!(out.lines().any(|l| l == "reply:policy"), "{out}");
    // zsh: under compinit the script binds `_warden` to `warden`.
    let zsh = script(dir.path(), "zsh");
    let probe = format!(
        "autoload -U compinit && compinit -u -D -d {}/zcompdump; source {}; print -r -- \"comp:${{_comps[warden]}}\"",
        dir.path().display(),
        zsh.display()
    );
    let out = shell("zsh", &["-f", "-c", &probe]);
    assert!(out.lines().any(|l| l == "comp:_warden"), "{out}");
    // fish: completing `warden pol` offers `policy`, and `warden policy ` its subcommands.
    let fish = script(dir.path(), "fish");
    let probe = format!("source {}; complete -C 'warden pol'; complete -C 'warden policy '", fish.display());
    let out = shell("fish", &["--no-config", "-c", &probe]);
    assert!(out.lines().any(|l| l.starts_with("policy\t")), "{out}");
    assert!(out.lines().any(|l| l.starts_with("show-default\t")), "{out}");
    // The other two clap_complete writes: they must at least name the command.
    for sh in ["elvish", "powershell"] {
        let out = warden(&["completions", sh]);
        assert!(out.status.success() && text(&out.stdout).contains("warden"), "{sh}: {}", text(&out.stderr));
    }
    let bad = warden(&["completions", "tcsh"]);
    assert_eq!(bad.status.code(), Some(2), "{}", text(&bad.stderr));
}

/// `warden 0.1.0 (abc1234 2026-11-28)`: the hash is the checkout's HEAD.
#[test]
fn version_names_the_commit_and_its_date() {
    let out = warden(&["--version"]);
    assert!(out.status.success());
    let line = text(&out.stdout);
    let line = line.trim_end();
    let rest = line
        .strip_prefix(&format!("warden {} (", env!("CARGO_PKG_VERSION")))
        .unwrap_or_else(|| panic!("{line:?} does not start with the version"));
    let (commit, date) = rest.strip_suffix(')').and_then(|r| r.split_once(' ')).unwrap_or_else(|| {
        panic!("{line:?} has no `(COMMIT DATE)`: was it built outside a git checkout without WARDEN_BUILD_COMMIT?")
    });
    let hash = commit.strip_suffix("-dirty").unwrap_or(commit);
    assert!(hash.len() >= 7 && hash.bytes().all(|b| b.is_ascii_hexdigit()), "{line:?}");
    let d = date.as_bytes();
    assert!(
        d.len() == 10 && d[4] == b'-' && d[7] == b'-' && date.replace('-', "").bytes().all(|b| b.is_ascii_digit()),
        "{line:?}"
    );
    let dir = env!("CARGO_MANIFEST_DIR");
    let head = Command::new("git")
        .args(["-c", &format!("safe.directory={dir}"), "-C", dir, "rev-parse", "HEAD"])
        .output()
        .unwrap();
    assert!(head.status.success(), "git cannot read this checkout: {}", text(&head.stderr));
    assert!(text(&head.stdout).starts_with(hash), "{line:?} is not HEAD {}", text(&head.stdout));
    // -V is the same line.
    assert_eq!(text(&warden(&["-V"]).stdout).trim_end(), line);
}

#[test]
fn show_default_prints_the_embedded_policy_which_checks_as_a_file() {
    let out = warden(&["policy", "show-default"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), warden::policy::DEFAULT_POLICY);
    let file = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("policies/default.toml")).unwrap();
    assert_eq!(text(&out.stdout), file, "the embedded policy is not policies/default.toml");
    let env = util::Env::new();
    let path = env.root.path().join("exported.toml");
    std::fs::write(&path, &out.stdout).unwrap();
    let checked = env.run(&["policy", "check", path.to_str().unwrap()]);
    assert_eq!(checked.code, 0, "{checked:?}");
    assert!(checked.stdout.contains("valid:"), "{checked:?}");
    // The exported file offers the same tools as the embedded policy.
    let listed = |args: &[&str]| env.run(args).stdout;
    assert_eq!(listed(&["--policy", path.to_str().unwrap(), "list", "--json"]), listed(&["list", "--json"]));
}

#[test]
fn man_pages_are_rendered_for_every_command() {
    let out = warden(&["man"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let page = text(&out.stdout);
    assert!(page.contains("\n.TH warden 1 ") && page.contains("\n.SH SUBCOMMANDS\n"), "{page}");
    // Each command is named by its own page; the hidden `man` is not.
    assert!(page.contains("\nwarden\\-completions(1)\n") && page.contains("\nwarden\\-policy(1)\n"), "{page}");
    assert!(!page.contains("warden\\-man(1)") && !page.contains("warden\\-help(1)"), "{page}");
    let dir = tempfile::tempdir().unwrap();
    let out = warden(&["man", "--dir", dir.path().to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let mut names: Vec<String> =
        std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    for want in ["warden.1", "warden-call.1", "warden-policy-show-default.1", "warden-completions.1"] {
        assert!(names.iter().any(|n| n == want), "{want} missing from {names:?}");
    }
    assert!(!names.iter().any(|n| n == "warden-man.1"), "the hidden command has a page: {names:?}");
    let call = std::fs::read_to_string(dir.path().join("warden-call.1")).unwrap();
    assert!(call.contains("\n.TH warden-call 1 ") && call.contains("\\fB\\-\\-exit\\-status\\fR"), "{call}");
}

/// `cargo xtask dist --bin-dir` over this build's `warden` and `warden-sandbox`:
/// the checksum file matches, the archive unpacks into one directory, and the
/// unpacked `warden` runs a component tool and a process tool (through the
/// unpacked helper) with nothing of this build's around.
#[test]
fn the_archive_unpacks_and_runs_from_anywhere() {
    let bins = Path::new(env!("CARGO_BIN_EXE_warden")).parent().unwrap();
    assert!(
        bins.join("warden-sandbox").is_file(),
        "no warden-sandbox beside {} (cargo test builds it; else `cargo build -p warden-sandbox`)",
        env!("CARGO_BIN_EXE_warden")
    );
    let out_dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["run", "--locked", "-q", "-p", "xtask", "--", "dist", "--bin-dir"])
        .arg(bins)
        .arg("--out")
        .arg(out_dir.path())
        // The xtask build goes beside the plugin test's (never the outer build's locked target directory).
        .env("CARGO_TARGET_DIR", Path::new(env!("CARGO_TARGET_TMPDIR")).join("xtask-plugin"))
        .env("SOURCE_DATE_EPOCH", "1800000000")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "xtask dist: {}\n{}", text(&out.stdout), text(&out.stderr));
    let name = format!("warden-{}-{}-linux-gnu", env!("CARGO_PKG_VERSION"), std::env::consts::ARCH);
    let sums = shell("sh", &["-c", &format!("cd {} && sha256sum --strict -c SHA256SUMS", out_dir.path().display())]);
    assert_eq!(sums.trim(), format!("{name}.tar.gz: OK"));
    let archive = out_dir.path().join(format!("{name}.tar.gz"));
    let listing = shell("sh", &["-c", &format!("TZ=UTC tar tvzf {}", archive.display())]);
    for line in listing.lines() {
        assert!(line.contains(" root/root ") && line.contains(" 2027-01-15 "), "{line}");
        assert!(line.split_whitespace().nth(5).unwrap().starts_with(&format!("{name}/")), "{line}");
    }
    for want in [
        "bin/warden",
        "bin/warden-sandbox",
        "share/bash-completion/completions/warden",
        "share/zsh/site-functions/_warden",
        "share/fish/vendor_completions.d/warden.fish",
        "share/man/man1/warden.1",
        "share/warden/apparmor/",
        "share/warden/policies/default.toml",
        "share/doc/warden/README.md",
    ] {
        assert!(listing.contains(&format!("{name}/{want}")), "{want} is not in the archive:\n{listing}");
    }
    let home = tempfile::tempdir().unwrap();
    shell("tar", &["xzf", archive.to_str().unwrap(), "-C", home.path().to_str().unwrap()]);
    let bin = home.path().join(&name).join("bin/warden");
    let ws = home.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("notes.md"), "packed\n").unwrap();
    let run = |args: &[&str]| {
        let out = Command::new(&bin)
            .args(args)
            .current_dir(&ws)
            .env_clear()
            .env("HOME", home.path())
            .env("PATH", util::PATH)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {}\n{}", text(&out.stdout), text(&out.stderr));
        text(&out.stdout)
    };
    assert_eq!(run(&["--version"]), text(&warden(&["--version"]).stdout));
    assert!(run(&["call", "read_file", r#"{"path":"notes.md"}"#]).contains(r#""content":"packed\n""#));
    let shell_out = run(&["--approve", "yes", "call", "shell", r#"{"command":"echo from-the-archive"}"#]);
    assert!(shell_out.contains(r#""stdout":"from-the-archive\n""#), "{shell_out}");
    assert!(home.path().join(".local/state/warden/audit.jsonl").is_file(), "no audit log under the fresh HOME");
    run(&["log", "verify"]);
}
