//! A plugin's build inside warden's walls.
//!
//! A plugin's `build.rs`, its proc macros and its dependencies' build scripts
//! are the author's code, and cargo runs them. So nothing of the plugin runs on
//! the host: the build is three steps.
//!
//! 1. **Preflight**, here, on the host: the plugin's files are read as data and
//!    nothing of it runs. A symlinked plugin directory, a missing `Cargo.lock`, a
//!    dependency from git or another registry, and a `rust-toolchain.toml`
//!    `path` are refused; a floating channel is refused; each `.cargo/config`
//!    the plugin ships (or any directory above it) is reported as not read.
//! 2. **Fetch**: `cargo fetch --locked` under `warden run`, into a `CARGO_HOME`
//!    of this build root's own. Its only grants: the toolchain and the plugin's
//!    sources read-only, that `CARGO_HOME` writable, and the crates registry's
//!    two hosts. It runs cargo only (no build script), which checks each crate
//!    against the checksum in `Cargo.lock`.
//! 3. **Build**: `cargo build --frozen` under `warden run`: the plugin, the
//!    toolchain and the fetched sources read-only, the plugin's own target
//!    directory (one per plugin: a build script cannot reach another plugin's
//!    cached libraries) the only writable place, no network, an environment
//!    made from scratch. cargo runs in the toolchain's directory, not the
//!    plugin's, so it discovers no `.cargo/config.toml` of the plugin's (cargo
//!    reads those from its working directory upward, whatever
//!    `--manifest-path` says), and it is the toolchain's own `cargo`, not the
//!    rustup proxy, so no `rust-toolchain.toml` is consulted.
//!
//! The artifact is then copied out only if it is a regular file (no link) in
//! that target directory, at most 64 MiB, and a WebAssembly component.

use std::io::{BufRead, BufReader, Read};
use std::path::{Component, Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

use super::{Layout, TARGET, canonical, toml_string};

/// The index and download hosts of crates.io: the fetch step's only network grants.
const REGISTRY_HOSTS: &[&str] = &["index.crates.io", "static.crates.io"];

/// The sources `Cargo.lock` may name: crates.io, through its git or its sparse index.
const CRATES_IO: &[&str] =
    &["registry+https://github.com/rust-lang/crates.io-index", "sparse+https://index.crates.io/"];

/// The largest component copied out of a build.
const MAX_COMPONENT: u64 = 64 << 20;

/// What the preflight found: where the plugin is and what builds it.
pub(super) struct Plan {
    /// The plugin's crate directory.
    crate_dir: PathBuf,
    /// Its `Cargo.toml`.
    manifest: PathBuf,
    /// The cargo workspace that holds it (the crate itself, or `plugins/` for a builtin): read-only.
    sources: PathBuf,
    /// The toolchain: its sysroot (canonical) and channel.
    sysroot: PathBuf,
}

/// The preflight: nothing of the plugin runs; its files are read as data.
pub(super) fn preflight(layout: &Layout, name: &str) -> Result<Plan, String> {
    let linked = |p: &Path| std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_symlink());
    let crate_dir = layout.dir.join(name);
    if linked(&crate_dir) {
        return Err(format!(
            "plugin {name}: {} is a symbolic link; the build would read wherever it points (and grant that to the \
             plugin's build scripts): make it a real directory",
            crate_dir.display()
        ));
    }
    let manifest = crate_dir.join("Cargo.toml");
    if !manifest.is_file() || linked(&manifest) {
        return Err(layout.no_such_plugin(name));
    }
    let text = read_plain(&manifest)?;
    let own_workspace = parse_toml(&manifest, &text)?.contains_key("workspace");
    let sources = if own_workspace {
        crate_dir.clone()
    } else if layout.in_repo {
        layout.dir.clone()
    } else {
        return Err(format!(
            "plugin {name}: {} has no [workspace] table, so cargo would take it into a workspace above it, outside \
             what the build may read; add an empty `[workspace]` table (the scaffold has one)",
            manifest.display()
        ));
    };
    check_lock(name, &sources.join("Cargo.lock"))?;
    let channel = channel(name, &crate_dir, &sources)?;
    let mut dir = Some(crate_dir.as_path());
    while let Some(d) = dir {
        for f in [".cargo/config", ".cargo/config.toml"] {
            if d.join(f).exists() {
                eprintln!(
                    "warning: plugin {name}: not read: {} (a plugin's cargo configuration could name a wrapper, a \
                     linker or a runner; the confined build runs cargo where it finds none)",
                    d.join(f).display()
                );
            }
        }
        dir = d.parent();
    }
    let sysroot = toolchain(name, &channel)?;
    Ok(Plan { crate_dir, manifest, sources, sysroot })
}

/// A file of the plugin's, read as data: a link, a FIFO or anything but a
/// regular file of at most 1 MiB is refused.
fn read_plain(path: &Path) -> Result<String, String> {
    let meta = std::fs::symlink_metadata(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if !meta.file_type().is_file() || meta.len() > 1 << 20 {
        return Err(format!("{}: not a regular file of at most 1 MiB; the build refuses it", path.display()));
    }
    std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

fn parse_toml(path: &Path, text: &str) -> Result<toml::Table, String> {
    text.parse::<toml::Table>().map_err(|e| format!("{}: not valid TOML: {e}", path.display()))
}

/// `Cargo.lock` exists and names crates.io (or no source: a path) for every package.
fn check_lock(name: &str, lock: &Path) -> Result<(), String> {
    if !lock.exists() {
        return Err(format!(
            "plugin {name}: {} is missing: the build takes exactly the versions a lock file names (run `cargo \
             generate-lockfile` in the plugin, review it, and build again)",
            lock.display()
        ));
    }
    let doc = parse_toml(lock, &read_plain(lock)?)?;
    for package in doc.get("package").and_then(toml::Value::as_array).into_iter().flatten() {
        let Some(source) = package.get("source") else { continue };
        let source = source.as_str().unwrap_or_default();
        if !CRATES_IO.contains(&source) {
            let pkg = package.get("name").and_then(toml::Value::as_str).unwrap_or("?");
            return Err(format!(
                "plugin {name}: {} takes {pkg} from {source:?}; the build fetches from crates.io only (its only \
                 network grant): depend on a crates.io release of {pkg}",
                lock.display()
            ));
        }
    }
    Ok(())
}

/// The channel the plugin is built with: its own `rust-toolchain.toml` (or
/// `rust-toolchain`), else its workspace's, else this repository's. A `path`
/// (a directory of binaries rustup would run) and a floating channel are refused.
fn channel(name: &str, crate_dir: &Path, sources: &Path) -> Result<String, String> {
    let candidates = [crate_dir, sources, &super::root()];
    for dir in candidates {
        for file in ["rust-toolchain.toml", "rust-toolchain"] {
            let path = dir.join(file);
            if std::fs::symlink_metadata(&path).is_err() {
                continue;
            }
            let text = read_plain(&path)?;
            let table = match parse_toml(&path, &text) {
                Ok(t) => t.get("toolchain").and_then(toml::Value::as_table).cloned().unwrap_or_default(),
                // The legacy form: the file is the channel's name.
                Err(_) if file == "rust-toolchain" => {
                    std::iter::once(("channel".to_string(), toml::Value::String(text.trim().to_string()))).collect()
                }
                Err(e) => return Err(e),
            };
            if table.contains_key("path") {
                return Err(format!(
                    "plugin {name}: {} sets [toolchain] path, a directory whose programs rustup would run as the \
                     compiler; the build refuses it: remove `path` and name a channel (\"X.Y.Z\")",
                    path.display()
                ));
            }
            let channel = table.get("channel").and_then(toml::Value::as_str).unwrap_or_default().to_string();
            if !pinned(&channel) {
                return Err(format!(
                    "plugin {name}: {} names the channel {channel:?}; the build needs an exact one (\"1.95.0\", or \
                     \"nightly-2026-01-01\"), so the same sources give the same bytes",
                    path.display()
                ));
            }
            return Ok(channel);
        }
    }
    Err(format!("plugin {name}: no rust-toolchain.toml names a channel (not even {})", super::root().display()))
}

/// `X.Y.Z`, or `nightly-YYYY-MM-DD` / `beta-YYYY-MM-DD`.
fn pinned(channel: &str) -> bool {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let version = channel.split('.').collect::<Vec<_>>();
    if version.len() == 3 && version.iter().all(|p| digits(p)) {
        return true;
    }
    match channel.split_once('-') {
        Some(("nightly" | "beta", date)) => {
            let d: Vec<&str> = date.split('-').collect();
            d.len() == 3 && d.iter().all(|p| digits(p))
        }
        _ => false,
    }
}

/// The sysroot of the toolchain for `channel` (canonical), with the wasm target
/// added when it lacks it. `$RUSTC` names the compiler when set; otherwise
/// rustup finds the channel. rustup and rustc run in `/`, where no plugin file
/// can steer them.
fn toolchain(name: &str, channel: &str) -> Result<PathBuf, String> {
    let rustup = || {
        let mut c = Command::new("rustup");
        c.current_dir("/").env("RUSTUP_AUTO_INSTALL", "0").env_remove("RUSTUP_TOOLCHAIN");
        c
    };
    let rustc = match std::env::var_os("RUSTC").filter(|r| !r.is_empty()) {
        Some(r) => PathBuf::from(r),
        None => match rustup().args(["which", "--toolchain", channel, "rustc"]).stderr(Stdio::null()).output() {
            Ok(o) if o.status.success() => PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()),
            Ok(_) => {
                return Err(format!(
                    "plugin {name}: the toolchain {channel} is not installed: run `rustup toolchain install \
                     {channel} --profile minimal --target {TARGET}`, then build again"
                ));
            }
            Err(_) => PathBuf::from("rustc"),
        },
    };
    let run = |args: &[&str]| {
        Command::new(&rustc)
            .args(args)
            .current_dir("/")
            .env_remove("RUSTUP_TOOLCHAIN")
            .stderr(Stdio::inherit())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let sysroot = run(&["--print", "sysroot"])
        .map(|s| canonical(Path::new(&s)))
        .ok_or_else(|| format!("plugin {name}: cannot run {} --print sysroot", rustc.display()))?;
    let version = run(&["--version"]).unwrap_or_default();
    if channel.contains('.') && !version.starts_with(&format!("rustc {channel} ")) {
        return Err(format!(
            "plugin {name}: the plugin is pinned to rustc {channel}, but {} is {version:?}; install {channel} (rustup \
             toolchain install {channel}) or point RUSTC at it",
            rustc.display()
        ));
    }
    for program in ["cargo", "rustc"] {
        if !sysroot.join("bin").join(program).is_file() {
            return Err(format!("plugin {name}: the toolchain {} has no bin/{program}", sysroot.display()));
        }
    }
    if !sysroot.join("lib/rustlib").join(TARGET).join("lib").is_dir() {
        eprintln!("the {TARGET} target is missing from {channel}: running `rustup target add {TARGET}`");
        let added = rustup().args(["target", "add", "--toolchain", channel, TARGET]).status();
        if !added.is_ok_and(|s| s.success()) {
            return Err(format!(
                "plugin {name}: the toolchain {} lacks the {TARGET} target; run `rustup target add --toolchain \
                 {channel} {TARGET}` (or install your distribution's rust-std for it), then build again",
                sysroot.display()
            ));
        }
    }
    Ok(sysroot)
}

/// What a confined run does.
#[derive(Clone, Copy, Default)]
pub(super) struct How {
    /// Skip the fetch (after `plugin fetch`).
    pub offline: bool,
    /// Fetch only.
    pub fetch_only: bool,
    /// Empty the plugin's target directory first: nothing an earlier build's code left there is reused.
    pub clean: bool,
}

/// Where one plugin's confined build keeps its state, under the build root.
struct Dirs {
    /// The `CARGO_HOME` the fetch step fills (shared by the plugins of this root; only cargo writes it).
    cargo_home: PathBuf,
    /// This plugin's cargo target directory: the build's one writable place.
    target: PathBuf,
    /// The generated policy and the audit log of the steps: no step can write here.
    gen_dir: PathBuf,
}

fn dirs(layout: &Layout, plan: &Plan, name: &str, clean: bool) -> Result<Dirs, String> {
    let root = &layout.target_dir;
    // targets/NAME-KEY: no plugin name can make its target directory the shared cargo home, and two
    // plugins of one name from different places (a shared CARGO_TARGET_DIR) never share one.
    let key = {
        use std::hash::{Hash, Hasher};
        let mut h = std::hash::DefaultHasher::new();
        plan.crate_dir.hash(&mut h);
        format!("{:016x}", h.finish())
    };
    let d = Dirs {
        cargo_home: root.join("cargo-home"),
        target: root.join("targets").join(format!("{name}-{key}")),
        gen_dir: root.join(".warden"),
    };
    if clean && d.target.exists() {
        real_dir(&d.target)?;
        std::fs::remove_dir_all(&d.target)
            .map_err(|e| format!("plugin build: cannot empty {}: {e}", d.target.display()))?;
    }
    for dir in [&d.cargo_home, &d.target, &d.gen_dir] {
        real_dir(dir)?;
    }
    Ok(d)
}

/// Creates `dir` (absolute, from a canonical base) and checks that no part of
/// it is a symbolic link: the build root and the output directory may lie in
/// the plugin's own checkout (`DIR/target/`), where its author could have
/// committed a link that would turn a host-side write (the generated policy,
/// the audit log, the copied component, the build's write grant) elsewhere.
pub(super) fn real_dir(dir: &Path) -> Result<(), String> {
    let mut at = PathBuf::new();
    for part in dir.components() {
        at.push(part);
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.is_dir() => {}
            Ok(m) => {
                let what = if m.file_type().is_symlink() { "a symbolic link" } else { "not a directory" };
                return Err(format!(
                    "plugin build: {} is {what}; the build writes only through real directories: remove it (a \
                     plugin's checkout must not ship one under target/), or pass --target-dir",
                    at.display()
                ));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::create_dir(&at).map_err(|e| format!("plugin build: cannot create {}: {e}", at.display()))?
            }
            Err(e) => return Err(format!("plugin build: {}: {e}", at.display())),
        }
    }
    Ok(())
}

/// Writes `text` to `path` as a new file: whatever was there (a link, say) is
/// removed first, never written through.
pub(super) fn write_new(path: &Path, text: &[u8]) -> Result<(), String> {
    use std::io::Write as _;
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("plugin build: cannot replace {}: {e}", path.display())),
    }
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .and_then(|mut f| f.write_all(text))
        .map_err(|e| format!("plugin build: cannot write {}: {e}", path.display()))
}

/// The policy of the two steps, every path absolute.
fn policy(plan: &Plan, dirs: &Dirs, rustflags: &str, allow_private: bool) -> String {
    let q = |p: &Path| toml_string(&p.display().to_string());
    let (tc, src, home, target) = (q(&plan.sysroot), q(&plan.sources), q(&dirs.cargo_home), q(&dirs.target));
    let path = toml_string(&format!("{}:/usr/bin:/bin", plan.sysroot.join("bin").display()));
    let rustc = q(&plan.sysroot.join("bin/rustc"));
    let hosts: Vec<String> = REGISTRY_HOSTS.iter().map(|h| toml_string(&format!("{h}:443"))).collect();
    format!(
        "# Generated by `cargo xtask plugin build` for one build; see xtask/src/plugin/confine.rs.\n\
         version = 1\n\n[sandbox]\nmode = \"enforce\"\n\n\
         # Runs cargo only: no build script, no proc macro.\n\
         [tools.plugin-fetch]\ntier = \"auto\"\ncwd = {tc}\n\
         fs.read = [\"{{system}}\", {tc}, {src}]\nfs.write = [{home}, \"{{tmp}}\"]\n\
         net.connect = [{hosts}]\nnet.allow_private = {allow_private}\n\
         env.set = {{ HOME = \"{{tmp}}\", CARGO_HOME = {home}, PATH = {path}, RUSTC = {rustc}, \
         CARGO_TERM_COLOR = \"never\" }}\n\
         limits = {{ timeout = \"10m\", memory = \"2GiB\", processes = 64, file_size = \"1GiB\", \
         tmp_size = \"256MiB\" }}\n\n\
         # The plugin's build scripts and proc macros, and its dependencies', run here.\n\
         [tools.plugin-build]\ntier = \"auto\"\ncwd = {tc}\n\
         fs.read = [\"{{system}}\", {tc}, {src}, {home}]\nfs.write = [{target}, \"{{tmp}}\"]\n\
         env.set = {{ HOME = \"{{tmp}}\", CARGO_HOME = {home}, PATH = {path}, RUSTC = {rustc}, \
         CARGO_INCREMENTAL = \"0\", CARGO_TERM_COLOR = \"never\", CARGO_ENCODED_RUSTFLAGS = {flags} }}\n\
         limits = {{ timeout = \"30m\", cpu = \"30m\", memory = \"8GiB\", processes = 512, open_files = 4096, \
         file_size = \"2GiB\", tmp_size = \"2GiB\", tmp_files = 100000 }}\n",
        hosts = hosts.join(", "),
        flags = toml_string(rustflags),
    )
}

/// Whether a registry host resolves, on this host, to an address the egress
/// proxy treats as private (a mirror on a private network): the fetch step may
/// then reach it, and says so.
fn registry_is_private() -> bool {
    use std::net::{IpAddr, ToSocketAddrs};
    let private = |ip: IpAddr| match ip {
        IpAddr::V4(v) => {
            let o = v.octets();
            v.is_private()
                || v.is_loopback()
                || v.is_link_local()
                || (o[0] == 100 && (64..128).contains(&o[1]))
                || (o[0] == 192 && o[1] == 0 && o[2] == 2)
                || (o[0] == 198 && (o[1] == 18 || o[1] == 19 || (o[1] == 51 && o[2] == 100)))
                || (o[0] == 203 && o[1] == 0 && o[2] == 113)
                || o[0] >= 240
        }
        IpAddr::V6(v) => {
            v.is_loopback() || (v.segments()[0] & 0xfe00) == 0xfc00 || (v.segments()[0] & 0xffc0) == 0xfe80
        }
    };
    REGISTRY_HOSTS.iter().any(|h| (*h, 443).to_socket_addrs().is_ok_and(|mut a| a.any(|a| private(a.ip()))))
}

/// Fetches the plugin's dependencies (step 2) and, unless `fetch_only`,
/// builds it (step 3); returns the component's path in its target directory.
pub(super) fn run(layout: &Layout, name: &str, warden: &Path, how: How) -> Result<PathBuf, String> {
    let How { offline, fetch_only, clean } = how;
    let plan = preflight(layout, name)?;
    let dirs = dirs(layout, &plan, name, clean)?;
    // Every machine-specific path the output could embed (panic locations, file!()), mapped to a
    // fixed one. rustc applies the last matching mapping, so the most specific come last.
    let mut remaps: Vec<(PathBuf, &str)> = vec![
        (layout.dir.clone(), "/warden/plugins"),
        (dirs.target.clone(), "/warden/target"),
        (dirs.cargo_home.clone(), "/cargo"),
        (plan.sysroot.clone(), "/rustc/sysroot"),
    ];
    remaps.sort_by_key(|(from, _)| from.as_os_str().len());
    let flags: Vec<String> =
        remaps.iter().map(|(from, to)| format!("--remap-path-prefix={}={to}", from.display())).collect();
    let allow_private = !offline && registry_is_private();
    if allow_private {
        eprintln!(
            "note: crates.io's hosts resolve to private or reserved addresses here (a mirror); the fetch step may \
             reach them (net.allow_private)"
        );
    }
    let policy_file = dirs.gen_dir.join(format!("{name}.toml"));
    write_new(&policy_file, policy(&plan, &dirs, &flags.join("\x1f"), allow_private).as_bytes())?;
    // A fresh log per run, never one a checkout shipped (warden appends to the file it finds).
    let audit_log = dirs.gen_dir.join(format!("{name}.audit.jsonl"));
    write_new(&audit_log, b"")?;
    let cargo = plan.sysroot.join("bin/cargo");
    let step = |tool: &str, args: &[&str]| {
        let mut cmd = Command::new(warden);
        cmd.arg("--policy")
            .arg(&policy_file)
            .arg("--audit-log")
            .arg(&audit_log)
            .arg("--workspace")
            .arg(&dirs.target)
            .args(["run", "--tool", tool, "--"])
            .arg(&cargo)
            .args(args)
            .arg("--manifest-path")
            .arg(&plan.manifest)
            .current_dir(&dirs.target)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("WARDEN_CACHE_DIR", "")
            .env("RUST_LOG", "error");
        relay(cmd)
    };
    if !offline {
        eprintln!("fetching the dependencies of plugin {name} (under warden: crates.io only)");
        let out = step("plugin-fetch", &["fetch", "--locked", "--target", TARGET])?;
        if !out.status.success() {
            return Err(format!(
                "plugin build: fetching the dependencies of {name} failed (above). If cargo says the lock file needs \
                 to be updated, you changed a dependency: run `cargo update --manifest-path {}` and build again",
                plan.manifest.display()
            ));
        }
    }
    if fetch_only {
        return Ok(dirs.cargo_home);
    }
    eprintln!(
        "building plugin {name} ({}) for {TARGET} (under warden: no network, writes only {})",
        plan.crate_dir.display(),
        dirs.target.display()
    );
    let target = dirs.target.display().to_string();
    let out = step(
        "plugin-build",
        &[
            "build",
            "--frozen",
            "--release",
            "--target",
            TARGET,
            "--message-format=json-render-diagnostics",
            "--target-dir",
            &target,
        ],
    )?;
    if !out.status.success() {
        return Err(format!(
            "plugin build: building {name} failed (cargo's errors are above; a build that needs the network or a \
             path outside the plugin is refused by the walls: `cargo xtask plugin fetch {name}` fetches, and the \
             plugin's sources must lie in {})",
            plan.sources.display()
        ));
    }
    artifact(name, &plan, &dirs, &out.stdout)
}

/// Runs `cmd` with stdout captured and stderr relayed line by line, each line
/// stripped of control characters (a build script's `cargo::warning` could
/// carry terminal escapes).
fn relay(mut cmd: Command) -> Result<Output, String> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("plugin build: cannot run warden: {e}"))?;
    let stderr = child.stderr.take();
    let relay = std::thread::spawn(move || {
        let Some(stderr) = stderr else { return };
        for line in BufReader::new(stderr).split(b'\n').map_while(Result::ok) {
            let line: String =
                String::from_utf8_lossy(&line).chars().filter(|c| !c.is_control() || *c == '\t').collect();
            eprintln!("{line}");
        }
    });
    let mut stdout = Vec::new();
    if let Some(mut out) = child.stdout.take() {
        let _ = out.read_to_end(&mut stdout);
    }
    let status = child.wait().map_err(|e| format!("plugin build: waiting for warden: {e}"))?;
    let _ = relay.join();
    Ok(Output { status, stdout, stderr: Vec::new() })
}

/// The component cargo reported, checked before it leaves the target
/// directory: inside it, reached through no link, a regular file of at most
/// 64 MiB that starts like a component.
fn artifact(name: &str, plan: &Plan, dirs: &Dirs, stdout: &[u8]) -> Result<PathBuf, String> {
    let manifest = canonical(&plan.manifest);
    let reported = String::from_utf8_lossy(stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|m| m["reason"] == "compiler-artifact")
        .filter(|m| m["manifest_path"].as_str().is_some_and(|p| canonical(Path::new(p)) == manifest))
        .filter(|m| m["target"]["crate_types"].as_array().is_some_and(|t| t.iter().any(|t| t == "cdylib")))
        .flat_map(|m| m["filenames"].as_array().cloned().unwrap_or_default())
        .filter_map(|f| f.as_str().map(PathBuf::from))
        .find(|f| f.extension().is_some_and(|e| e == "wasm"));
    let Some(path) = reported else {
        return Err(format!(
            "plugin build: cargo built {name} but produced no .wasm: is its [lib] crate-type [\"cdylib\"] in {}?",
            plan.manifest.display()
        ));
    };
    let inside = path.is_absolute()
        && !path.components().any(|c| matches!(c, Component::ParentDir))
        && path.starts_with(&dirs.target)
        && canonical(&path) == path;
    let meta = std::fs::symlink_metadata(&path).ok();
    let regular = meta.as_ref().is_some_and(|m| m.file_type().is_file() && m.len() <= MAX_COMPONENT);
    let mut head = [0u8; 8];
    let component = regular
        && std::fs::File::open(&path).and_then(|mut f| f.read_exact(&mut head)).is_ok()
        && head == [0, b'a', b's', b'm', 0x0d, 0, 1, 0];
    if !(inside && component) {
        return Err(format!(
            "plugin build: {name}: the build reported {} as its component, which is not a regular file of at most \
             64 MiB holding a WebAssembly component inside {} (reached through no link); nothing was copied",
            path.display(),
            dirs.target.display()
        ));
    }
    Ok(path)
}
