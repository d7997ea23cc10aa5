//! The supply chain: a plugin whose build attacks the machine that builds it.
//!
//! `cargo xtask plugin build` and `check` run the author's code: the plugin's
//! `build.rs`, its proc macros, its dependencies' build scripts, and whatever
//! its `.cargo/config.toml` or `rust-toolchain.toml` names. One hostile
//! plugin (`evil`, no crates.io dependency, so it builds in seconds) does all of
//! it: each piece of its code tries to write outside its target directory (a
//! directory outside every grant, the plugin's own sources, a home directory),
//! to read a secret file and a secret variable of xtask's environment, and to
//! reach the network (a listener on the host's loopback, a host unix socket, and the egress proxy
//! toward a public host); it writes what it saw into its target directory,
//! where the host reads it. Its `.cargo/config.toml` (and one in the directory
//! above) and xtask's own environment name a compiler wrapper, a linker and a
//! runner that would mark a file on the host. A second plugin's
//! `rust-toolchain.toml` names a `path` whose `cargo` and `rustc` would do the
//! same. The host judges: the planted files are absent, the listener saw no
//! connection, the reports show each refusal, no marker exists, and `evil`
//! still built (so the attempts really ran).
//!
//! It runs xtask's binary, built once by the test (as root; an ordinary user
//! takes the one the root pass built) with the toolchain found in the test's
//! environment (`WARDEN_TEST_RUSTC`, else rustup's).

use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::scene::{WARDEN, set_mode};
use crate::util::{Run, run_to_end};
use crate::{Case, Observed, Scene};

const CLASS: &str = "supply-chain";

/// The pieces of `evil` that run code during a build.
const PIECES: &[&str] = &["build-script", "proc-macro", "dep-build-script"];

fn c(id: &'static str, attempt: &'static str, expected: &'static str, run: fn(&Scene) -> Observed) -> Case {
    Case { id, class: CLASS, runtime: "build", attempt, expected, heavy: false, run }
}

pub(crate) fn cases() -> Vec<Case> {
    vec![
        c(
            "supply-build-script/build",
            "the plugin's build.rs writes outside its target, reads a secret file and variable, connects out",
            "every write EROFS/EACCES or absent from the view, no secret, no connection; the plugin still builds",
            |s| piece(s, "build-script"),
        ),
        c(
            "supply-proc-macro/build",
            "a proc macro the plugin uses does the same while rustc expands it",
            "the same refusals, judged on the host",
            |s| piece(s, "proc-macro"),
        ),
        c(
            "supply-dep-build-script/build",
            "a dependency's build.rs does the same",
            "the same refusals, judged on the host",
            |s| piece(s, "dep-build-script"),
        ),
        c(
            "supply-check/build",
            "the same three pieces during `cargo xtask plugin check` (a fresh build root)",
            "the same refusals; check runs the build inside the walls too",
            check,
        ),
        c(
            "supply-cargo-config/build",
            "the plugin's .cargo/config.toml and the one above it name a rustc wrapper, a linker, a runner and [env]",
            "neither file is read (warnings name them); no marker on the host; [env] absent in the build",
            cargo_config,
        ),
        c(
            "supply-env-wrapper/build",
            "RUSTC_WRAPPER, CARGO_BUILD_RUSTC_WRAPPER and RUSTFLAGS set in xtask's own environment",
            "the build's environment is made from scratch: no marker, no flag",
            env_wrapper,
        ),
        c(
            "supply-checkout-links/build",
            "the plugin's checkout ships links under target/: the generated policy's name and the copy's partial \
             name to a file of the user's, and the build root's targets/ to a directory outside",
            "refused naming the link before anything is created through it; without the targets link the build \
             replaces the other two links, never writes through them",
            checkout_links,
        ),
        c(
            "supply-toolchain-path/build",
            "a plugin's rust-toolchain.toml sets [toolchain] path to a directory of fake cargo and rustc",
            "refused before anything runs, naming `path`; no marker",
            toolchain_path,
        ),
    ]
}

/// What the hostile builds left, computed once for all the cases.
struct Outcome {
    /// Why nothing could be attempted here.
    skipped: Option<String>,
    /// The build root of `build` and of `check`.
    roots: [PathBuf; 2],
    /// `cargo xtask plugin build evil`, `check evil`, `build evil-tc`.
    runs: Vec<Run>,
    /// Where each piece tried to plant a file.
    plant_dirs: Vec<PathBuf>,
    /// The markers the wrappers and the fake toolchain would write.
    config_marker: PathBuf,
    env_marker: PathBuf,
    tc_marker: PathBuf,
    /// The two `.cargo/config.toml` files.
    configs: [PathBuf; 2],
    /// Connections the host listeners (TCP on loopback, a unix socket) accepted.
    connections: usize,
}

static OUTCOME: OnceLock<Outcome> = OnceLock::new();
static ACCEPTED: AtomicUsize = AtomicUsize::new(0);

/// Each piece's code: the same attack, written into the crates as `attack.rs`.
const ATTACK: &str = r#"
#[allow(dead_code, unexpected_cfgs)]
fn attack(id: &str) {
    use std::io::{Read, Write};
    let mut r = String::new();
    for dir in PLANT {
        let p = format!("{dir}/planted-{id}");
        r += &format!("write {p}: {:?}\n", std::fs::write(&p, "planted").map_err(|e| e.to_string()));
    }
    r += &format!("read secret: {:?}\n", std::fs::read_to_string(SECRET).map_err(|e| e.to_string()));
    r += &format!("env secret: {:?}\n", std::env::var("WARDEN_SUPPLY_SECRET").map_err(|e| e.to_string()));
    r += &format!("env config: {:?}\n", std::env::var("WARDEN_SUPPLY_CONFIG").map_err(|e| e.to_string()));
    r += &format!("cfg evil: {}\n", cfg!(evil));
    let hit = std::net::TcpStream::connect(LISTENER).map(|_| ()).map_err(|e| e.to_string());
    r += &format!("connect listener: {hit:?}\n");
    let hit = std::os::unix::net::UnixStream::connect(AGENT).map(|_| ()).map_err(|e| e.to_string());
    r += &format!("connect unix: {hit:?}\n");
    let proxy = std::env::var("HTTPS_PROXY").unwrap_or_default();
    let reply = match proxy.strip_prefix("http://") {
        Some(addr) => std::net::TcpStream::connect(addr.trim_end_matches('/'))
            .and_then(|mut s| {
                s.write_all(b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n")?;
                let mut b = [0u8; 256];
                let n = s.read(&mut b)?;
                Ok(String::from_utf8_lossy(&b[..n]).lines().next().unwrap_or("").to_string())
            })
            .map_err(|e| e.to_string()),
        None => Err("no proxy".to_string()),
    };
    r += &format!("proxy connect: {reply:?}\n");
    // Into the target directory xtask gave the build (targets/NAME-KEY), found from OUT_DIR (a proc
    // macro sees the OUT_DIR of the crate it expands in).
    let mut at = std::path::PathBuf::from(std::env::var("OUT_DIR").unwrap_or_default());
    while let Some(parent) = at.parent().map(std::path::Path::to_path_buf) {
        if parent.file_name().is_some_and(|n| n == "targets") {
            let _ = std::fs::create_dir_all(at.join("reports"));
            let _ = std::fs::write(at.join("reports").join(format!("{id}.txt")), r);
            return;
        }
        at = parent;
    }
}
"#;

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn script(path: &Path, marker: &Path) {
    write(path, &format!("#!/bin/sh\necho ran \"$@\" >> '{}'\nexec \"$@\"\n", marker.display()));
    set_mode(path, 0o755);
}

/// Writes the plugins directory: `evil` (three pieces, a cargo config) and
/// `evil-tc` (a toolchain path).
fn fixture(s: &Scene, dir: &Path, plant_dirs: &[PathBuf], listener: u16, agent: &Path) -> [PathBuf; 2] {
    let evil = dir.join("evil");
    let consts = format!(
        "const PLANT: &[&str] = &[{}];\nconst SECRET: &str = {:?};\nconst LISTENER: &str = \"127.0.0.1:{listener}\";\n\
         const AGENT: &str = {:?};\n{ATTACK}",
        plant_dirs.iter().map(|d| format!("{:?}", d.display().to_string())).collect::<Vec<_>>().join(", "),
        s.secret_file.display().to_string(),
        agent.display().to_string(),
    );
    write(
        &evil.join("Cargo.toml"),
        "[package]\nname = \"evil\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[lib]\ncrate-type = [\"cdylib\"]\n\n\
         [dependencies]\nevil-macro = { path = \"macro\" }\nevil-dep = { path = \"dep\" }\n\n[workspace]\n",
    );
    write(&evil.join("attack.rs"), &consts);
    write(&evil.join("build.rs"), "include!(\"attack.rs\");\nfn main() { attack(\"build-script\"); }\n");
    write(
        &evil.join("src/lib.rs"),
        "evil_macro::attack_at_expansion!();\n\n#[no_mangle]\npub extern \"C\" fn evil() -> u32 { evil_dep::VALUE }\n",
    );
    write(
        &evil.join("macro/Cargo.toml"),
        "[package]\nname = \"evil-macro\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[lib]\nproc-macro = true\n",
    );
    write(&evil.join("macro/src/attack.rs"), &consts);
    write(
        &evil.join("macro/src/lib.rs"),
        "include!(\"attack.rs\");\n#[proc_macro]\npub fn attack_at_expansion(_: proc_macro::TokenStream) -> proc_macro::TokenStream {\n    \
         attack(\"proc-macro\");\n    proc_macro::TokenStream::new()\n}\n",
    );
    write(&evil.join("dep/Cargo.toml"), "[package]\nname = \"evil-dep\"\nversion = \"0.1.0\"\nedition = \"2021\"\n");
    write(&evil.join("dep/attack.rs"), &consts);
    write(&evil.join("dep/build.rs"), "include!(\"attack.rs\");\nfn main() { attack(\"dep-build-script\"); }\n");
    write(&evil.join("dep/src/lib.rs"), "pub const VALUE: u32 = 7;\n");
    write(
        &evil.join("Cargo.lock"),
        "version = 4\n\n[[package]]\nname = \"evil\"\nversion = \"0.1.0\"\ndependencies = [\n \"evil-dep\",\n \"evil-macro\",\n]\n\n\
         [[package]]\nname = \"evil-dep\"\nversion = \"0.1.0\"\n\n[[package]]\nname = \"evil-macro\"\nversion = \"0.1.0\"\n",
    );
    write(&evil.join("rust-toolchain.toml"), &format!("[toolchain]\nchannel = \"{}\"\n", channel()));
    let configs = [evil.join(".cargo/config.toml"), dir.join(".cargo/config.toml")];
    let wrap = s.outside.join("supply/wrap-config.sh");
    for config in &configs {
        write(
            config,
            &format!(
                "[build]\nrustc-wrapper = {w:?}\n\n[target.wasm32-wasip2]\nlinker = {w:?}\nrunner = {w:?}\n\n\
                 [target.x86_64-unknown-linux-gnu]\nlinker = {w:?}\n\n[env]\nWARDEN_SUPPLY_CONFIG = \"read\"\n",
                w = wrap.display().to_string()
            ),
        );
    }
    let tc = dir.join("evil-tc");
    write(
        &tc.join("Cargo.toml"),
        "[package]\nname = \"evil-tc\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[lib]\ncrate-type = [\"cdylib\"]\n\n[workspace]\n",
    );
    write(&tc.join("src/lib.rs"), "");
    write(&tc.join("Cargo.lock"), "version = 4\n\n[[package]]\nname = \"evil-tc\"\nversion = \"0.1.0\"\n");
    write(
        &tc.join("rust-toolchain.toml"),
        &format!("[toolchain]\npath = {:?}\n", s.outside.join("supply/faketc").display().to_string()),
    );
    configs
}

/// The toolchain channel this repository pins (the fixture pins the same).
fn channel() -> String {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("rust-toolchain.toml")).unwrap();
    text.lines()
        .find_map(|l| {
            l.split_once('=')
                .filter(|(k, _)| k.trim() == "channel")
                .map(|(_, v)| v.trim().trim_matches('"').to_string())
        })
        .unwrap()
}

/// xtask's binary: built by the test where cargo runs (as root in CI), else
/// the one a root pass left. The target directory is the one `tests/xtask_plugin.rs`
/// builds xtask in, so the two share one build.
fn xtask_bin() -> Result<PathBuf, String> {
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("xtask-plugin");
    let bin = target.join("debug/xtask");
    let built = Command::new(env!("CARGO"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["build", "--locked", "-q", "-p", "xtask", "--target-dir"])
        .arg(&target)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if built || bin.is_file() {
        Ok(bin)
    } else {
        Err(format!(
            "no xtask binary: cargo cannot build one here and {} is absent (a root pass builds it)",
            bin.display()
        ))
    }
}

/// The compiler: `WARDEN_TEST_RUSTC`, else rustup's for the pinned channel.
fn rustc() -> Result<PathBuf, String> {
    if let Some(r) = std::env::var_os("WARDEN_TEST_RUSTC").filter(|r| !r.is_empty()) {
        return Ok(PathBuf::from(r));
    }
    let out = Command::new("rustup")
        .args(["which", "--toolchain", &channel(), "rustc"])
        .current_dir("/")
        .output()
        .map_err(|e| format!("no rustc: rustup cannot run ({e}) and WARDEN_TEST_RUSTC is not set"))?;
    if !out.status.success() {
        return Err("no rustc: rustup has no toolchain here and WARDEN_TEST_RUSTC is not set".into());
    }
    Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

fn outcome(s: &Scene) -> &'static Outcome {
    OUTCOME.get_or_init(|| attempt(s))
}

fn attempt(s: &Scene) -> Outcome {
    let base = s.side_dir("supply");
    // One copy of the plugins for `build`, one for `check`: each reports into its own build root.
    let dirs = [base.join("plugins"), base.join("plugins-check")];
    let roots = [base.join("build-root"), base.join("check-root")];
    let home = base.join("home");
    let plant_dirs = vec![s.outside.join("supply"), dirs[0].join("evil/src"), dirs[1].join("evil/src"), home.clone()];
    for d in &plant_dirs {
        std::fs::create_dir_all(d).unwrap();
        set_mode(d, 0o777);
    }
    let config_marker = s.outside.join("supply/config-wrapper-ran");
    let env_marker = s.outside.join("supply/env-wrapper-ran");
    let tc_marker = s.outside.join("supply/toolchain-ran");
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    listener.set_nonblocking(true).unwrap();
    // Each build reports under its own build root, inside its write grant.
    // A host unix socket, as an ssh-agent or a container daemon would offer one.
    let agent = s.outside.join("supply/agent.sock");
    let unix = std::os::unix::net::UnixListener::bind(&agent).unwrap();
    set_mode(&agent, 0o777);
    unix.set_nonblocking(true).unwrap();
    let configs = fixture(s, &dirs[0], &plant_dirs, port, &agent);
    fixture(s, &dirs[1], &plant_dirs, port, &agent);
    script(&s.outside.join("supply/wrap-config.sh"), &config_marker);
    script(&s.outside.join("supply/wrap-env.sh"), &env_marker);
    for program in ["cargo", "rustc"] {
        script(&s.outside.join("supply/faketc/bin").join(program), &tc_marker);
    }
    let mut outcome = Outcome {
        skipped: None,
        roots: roots.clone(),
        runs: Vec::new(),
        plant_dirs,
        config_marker,
        env_marker,
        tc_marker,
        configs,
        connections: 0,
    };
    let (xtask, rustc) = match (xtask_bin(), rustc()) {
        (Ok(x), Ok(r)) => (x, r),
        (Err(e), _) | (_, Err(e)) => {
            outcome.skipped = Some(e);
            return outcome;
        }
    };
    // Count what reaches the host's listener while the builds run.
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = {
        let done = done.clone();
        std::thread::spawn(move || {
            while !done.load(Ordering::SeqCst) {
                if let Ok((mut c, _)) = listener.accept() {
                    ACCEPTED.fetch_add(1, Ordering::SeqCst);
                    let _ = c.read(&mut [0u8; 16]);
                }
                if let Ok((mut c, _)) = unix.accept() {
                    ACCEPTED.fetch_add(1, Ordering::SeqCst);
                    let _ = c.read(&mut [0u8; 16]);
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        })
    };
    let wrap = s.outside.join("supply/wrap-env.sh").display().to_string();
    let run = |args: &[&str], dir: &Path, root: &Path| {
        let mut c = Command::new(&xtask);
        c.arg("plugin")
            .args(args)
            .arg("--dir")
            .arg(dir)
            .arg("--target-dir")
            .arg(root)
            .arg("--warden")
            .arg(WARDEN)
            .env("RUSTC", &rustc)
            .env("HOME", &home)
            .env("WARDEN_SUPPLY_SECRET", &s.secret)
            .env("RUSTC_WRAPPER", &wrap)
            .env("CARGO_BUILD_RUSTC_WRAPPER", &wrap)
            .env("RUSTFLAGS", "--cfg evil")
            .env_remove("CARGO_TARGET_DIR")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        run_to_end(c, None)
    };
    outcome.runs.push(run(&["build", "evil"], &dirs[0], &roots[0]));
    outcome.runs.push(run(&["check", "evil"], &dirs[1], &roots[1]));
    outcome.runs.push(run(&["build", "evil-tc"], &dirs[0], &roots[0]));
    done.store(true, Ordering::SeqCst);
    let _ = watcher.join();
    outcome.connections = ACCEPTED.load(Ordering::SeqCst);
    outcome
}

/// Whether the piece's report shows every attempt refused; the observed text.
fn judge_report(s: &Scene, o: &Outcome, report: &Path, piece: &str) -> (bool, String) {
    let Ok(text) = std::fs::read_to_string(report) else {
        return (false, format!("{piece}: no report at {}: the piece did not run", report.display()));
    };
    let planted: Vec<String> = o
        .plant_dirs
        .iter()
        .map(|d| d.join(format!("planted-{piece}")))
        .filter(|p| p.exists())
        .map(|p| p.display().to_string())
        .collect();
    let line = |k: &str| text.lines().find(|l| l.starts_with(k)).unwrap_or("(missing)").to_string();
    let refused = |k: &str| line(k).contains("Err(");
    let ok = planted.is_empty()
        && text.matches("write ").count() == o.plant_dirs.len()
        && text.lines().filter(|l| l.starts_with("write ")).all(|l| l.contains("Err("))
        && refused("read secret")
        && refused("env secret")
        && refused("env config")
        && line("cfg evil") == "cfg evil: false"
        && refused("connect listener")
        && refused("connect unix")
        && (line("proxy connect").contains("403") || refused("proxy connect"))
        && o.connections == 0
        && !s.leaks(&text);
    let writes: Vec<&str> = text.lines().filter(|l| l.starts_with("write ")).collect();
    let summary = format!(
        "{piece}: planted {planted:?}; {}; {}; {}; {}; {}; {}; host listeners saw {} connection(s)",
        writes.join("; "),
        line("read secret"),
        line("env secret"),
        line("connect listener"),
        line("connect unix"),
        line("proxy connect"),
        o.connections
    );
    (ok, summary)
}

/// Whether the hostile build `i` (0: build, 1: check) produced its component, so its code
/// really ran (warden then refuses to load it: it is no warden plugin, so xtask exits 1).
fn built(o: &Outcome, i: usize) -> bool {
    evil_target(o, i).join("wasm32-wasip2/release/evil.wasm").is_file()
}

/// The target directory xtask gave `evil` in build root `i` (`targets/evil-KEY`).
fn evil_target(o: &Outcome, i: usize) -> PathBuf {
    std::fs::read_dir(o.roots[i].join("targets"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("evil-")))
        .unwrap_or_else(|| o.roots[i].join("targets/evil-(none)"))
}

/// Where piece `piece` of build `i` reported.
fn report(o: &Outcome, i: usize, piece: &str) -> PathBuf {
    evil_target(o, i).join("reports").join(format!("{piece}.txt"))
}

fn skipped_or(o: &Outcome) -> Option<Observed> {
    o.skipped.as_ref().map(|why| Observed::skipped(why.clone()))
}

fn piece(s: &Scene, piece: &str) -> Observed {
    let o = outcome(s);
    if let Some(skip) = skipped_or(o) {
        return skip;
    }
    let build = &o.runs[0];
    let (ok, seen) = judge_report(s, o, &report(o, 0, piece), piece);
    let built = built(o, 0);
    let why = if built {
        "built".to_string()
    } else {
        format!("did not build: {}", &build.stderr[build.stderr.len().saturating_sub(1500)..])
    };
    Observed::new(ok && built, format!("build exit {} ({why}); {seen}", build.code))
}

fn check(s: &Scene) -> Observed {
    let o = outcome(s);
    if let Some(skip) = skipped_or(o) {
        return skip;
    }
    let run = &o.runs[1];
    let built = built(o, 1);
    let mut seen = vec![format!("check exit {} (built in its own root: {built})", run.code)];
    let mut ok = built && !s.leaks(&run.stdout) && !s.leaks(&run.stderr);
    for p in PIECES {
        let (held, text) = judge_report(s, o, &report(o, 1, p), p);
        ok &= held;
        seen.push(text);
    }
    Observed::new(ok, seen.join("; "))
}

fn cargo_config(s: &Scene) -> Observed {
    let o = outcome(s);
    if let Some(skip) = skipped_or(o) {
        return skip;
    }
    let build = &o.runs[0];
    let warned = o.configs.iter().all(|c| build.stderr.contains(&format!("not read: {}", c.display())));
    let marker = o.config_marker.exists();
    let env_seen =
        std::fs::read_to_string(report(o, 0, "build-script")).map(|t| t.contains("env config: Ok")).unwrap_or(true);
    Observed::new(
        warned && !marker && !env_seen && built(o, 0),
        format!(
            "warned for both files: {warned}; wrapper marker on the host: {marker}; [env] seen: {env_seen}; built: {}",
            built(o, 0)
        ),
    )
}

fn env_wrapper(s: &Scene) -> Observed {
    let o = outcome(s);
    if let Some(skip) = skipped_or(o) {
        return skip;
    }
    let marker = o.env_marker.exists();
    let cfg =
        std::fs::read_to_string(report(o, 0, "build-script")).map(|t| t.contains("cfg evil: true")).unwrap_or(true);
    let _ = s;
    Observed::new(
        !marker && !cfg && built(o, 0),
        format!("wrapper marker on the host: {marker}; RUSTFLAGS reached rustc: {cfg}"),
    )
}

fn toolchain_path(s: &Scene) -> Observed {
    let o = outcome(s);
    if let Some(skip) = skipped_or(o) {
        return skip;
    }
    let run = &o.runs[2];
    let named = run.stderr.contains("sets [toolchain] path");
    let marker = o.tc_marker.exists();
    let _ = s;
    Observed::new(
        run.code != 0 && named && !marker,
        format!(
            "exit {}; names `path`: {named}; fake toolchain ran: {marker}; {}",
            run.code,
            crate::util::clip(&run.stderr, 300)
        ),
    )
}

/// A plugin checkout that ships links where the build writes on the host.
fn checkout_links(s: &Scene) -> Observed {
    let (xtask, rustc) = match (xtask_bin(), rustc()) {
        (Ok(x), Ok(r)) => (x, r),
        (Err(e), _) | (_, Err(e)) => return Observed::skipped(e),
    };
    let base = s.side_dir("supply-links");
    let dir = base.join("plugins");
    let plain = dir.join("plain");
    write(
        &plain.join("Cargo.toml"),
        "[package]\nname = \"plain\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[lib]\ncrate-type = [\"cdylib\"]\n\n[workspace]\n",
    );
    write(&plain.join("src/lib.rs"), "#[no_mangle]\npub extern \"C\" fn plain() -> u32 { 7 }\n");
    write(&plain.join("Cargo.lock"), "version = 4\n\n[[package]]\nname = \"plain\"\nversion = \"0.1.0\"\n");
    write(&plain.join("rust-toolchain.toml"), &format!("[toolchain]\nchannel = \"{}\"\n", channel()));
    let victims = [s.outside.join("links-victim-policy"), s.outside.join("links-victim-copy")];
    for v in &victims {
        std::fs::write(v, "precious\n").unwrap();
        set_mode(v, 0o666);
    }
    let elsewhere = s.outside.join("links-elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let root = dir.join("target/plugin-build");
    for d in [root.join(".warden"), dir.join("target/plugins")] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::os::unix::fs::symlink(&victims[0], root.join(".warden/plain.toml")).unwrap();
    std::os::unix::fs::symlink(&victims[1], dir.join("target/plugins/.plain.wasm.partial")).unwrap();
    std::os::unix::fs::symlink(&elsewhere, root.join("targets")).unwrap();
    let run = || {
        let mut c = Command::new(&xtask);
        c.args(["plugin", "build", "plain", "--dir"])
            .arg(&dir)
            .arg("--warden")
            .arg(WARDEN)
            .env("RUSTC", &rustc)
            .env_remove("CARGO_TARGET_DIR")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        run_to_end(c, None)
    };
    let first = run();
    let refused = first.code != 0 && first.stderr.contains("targets is a symbolic link");
    let created = std::fs::read_dir(&elsewhere).map(|d| d.count()).unwrap_or(0);
    std::fs::remove_file(root.join("targets")).unwrap();
    let second = run();
    let intact = victims.iter().all(|v| std::fs::read_to_string(v).is_ok_and(|t| t == "precious\n"));
    let regular = |p: &Path| std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_file());
    let replaced = regular(&root.join(".warden/plain.toml")) && regular(&dir.join("target/plugins/plain.wasm"));
    Observed::new(
        refused && created == 0 && intact && replaced,
        format!(
            "with the targets link: exit {}, refused naming it: {refused}, {created} entr(ies) created through it; \
             without it: exit {} (the component is no warden plugin), the links replaced by files: {replaced}; \
             the user's two files intact: {intact}",
            first.code, second.code
        ),
    )
}
