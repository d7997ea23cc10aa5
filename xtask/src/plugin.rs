//! `cargo xtask plugin new|build|check`: scaffold a warden plugin, build it
//! reproducibly for wasm32-wasip2, and check it the way warden will load it.
//!
//! A scaffolded plugin is always its own cargo workspace (an empty `[workspace]`
//! table, its own `Cargo.lock` and the builtin plugins' release profile), so it
//! builds the same inside warden's `plugins/` directory and anywhere else, and
//! warden-runtime's build.rs (which builds only the members of `plugins/Cargo.toml`)
//! never builds it. It targets `warden:plugin@0.2.0` (content blocks and
//! progress): in `plugins/` it uses the shared `plugins/wit-0.2.0`; elsewhere
//! the WIT is copied into it, so it does not depend on this repository.
//!
//! `build` also builds the builtin plugins (`fs`, `testkit`): cargo finds their
//! workspace (`plugins/Cargo.toml`) and its lock file from their manifests.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::{cargo, root};

mod confine;
mod push;
mod sign;

/// The target every plugin is built for.
const TARGET: &str = "wasm32-wasip2";

pub(crate) const USAGE: &str = "\
usage: cargo xtask plugin new NAME [--dir DIR]
       cargo xtask plugin fetch NAME... [--dir DIR] [--target-dir DIR] [--warden FILE]
       cargo xtask plugin build NAME...|--all [--offline] [--clean] [--dir DIR] [--target-dir DIR] [--warden FILE]
       cargo xtask plugin check NAME|FILE.wasm [--offline] [--clean] [--dir DIR] [--target-dir DIR] [--warden FILE]
       cargo xtask plugin push NAME|FILE.wasm oci://HOST[:PORT]/REPO[:TAG] [--dir DIR] [--warden FILE]
       cargo xtask plugin sign NAME|FILE.wasm --key KEY [--dir DIR] [--warden FILE]

  new     create DIR/NAME: a plugin with one example tool (greet), its own cargo workspace and lock file
  fetch   download the dependencies Cargo.lock names, under warden: cargo only (no code of the plugin),
          crates.io the only network grant, into the build root's own CARGO_HOME
  build   fetch, then build DIR/NAME reproducibly for wasm32-wasip2 under warden (the plugin's build
          scripts and proc macros run with its sources read-only, its own target directory the only
          writable place, no network, no secrets); write target/plugins/NAME.wasm, print its sha256
          (stderr) and a policy snippet (stdout). --offline skips the fetch; --clean empties the
          plugin's target directory first (build a release you pin that way: an earlier build's
          code could have left anything there)
  check   build (or take FILE.wasm), load it as warden does, list its tools and WASI imports; exit 1
          when describe() fails, a schema is unusable, or a tool name is invalid or repeated
  push    publish target/plugins/NAME.wasm (or FILE.wasm) to an OCI registry with FILE.wasm.sig as its
          signature when present; print the source = \"oci://…@sha256:…\" line that pins it
  sign    sign target/plugins/NAME.wasm (or FILE.wasm) with `ssh-keygen -Y sign -n warden-plugin`,
          check it with warden, write FILE.wasm.sig and print the policy's `signers = [...]` line

  --dir DIR         where plugins live (default: this repository's plugins/)
  --target-dir DIR  the build root: CARGO_HOME of the fetch, one cargo target directory per plugin
                    (default: $CARGO_TARGET_DIR, else target/plugin-build beside target/plugins)
  --warden FILE     the warden binary that inspects the plugin (default: $WARDEN_BIN, else
                    `cargo build --locked --bin warden` in this repository)
  --key KEY         (sign) the ed25519 private key, or its .pub with the key in ssh-agent";

/// Directory names under a plugins directory that are not plugins.
const NOT_PLUGINS: &[&str] = &["wit", "wit-0.2.0", "target"];

/// Names cargo or rustc refuse for a crate, or that would shadow one.
const RESERVED: &str = "\
    abstract alloc as async await become box break build const continue core crate deps do dyn else enum \
    examples extern false final fn for gen if impl in incremental let loop macro match mod move mut override \
    priv proc_macro pub ref return self static std struct super test trait true try type typeof union unsafe \
    unsized use virtual where while yield";

#[derive(Default)]
struct Opts {
    names: Vec<String>,
    dir: Option<PathBuf>,
    target_dir: Option<PathBuf>,
    warden: Option<PathBuf>,
    all: bool,
    offline: bool,
    clean: bool,
    help: bool,
}

/// Runs `cargo xtask plugin ARGS`.
pub(crate) fn run(args: &[String]) -> Result<(), String> {
    let (sub, rest) = match args.split_first() {
        Some((sub, rest)) => (sub.as_str(), rest),
        None => return Err(format!("plugin: name a subcommand\n{USAGE}")),
    };
    if matches!(sub, "-h" | "--help" | "help") {
        println!("{USAGE}");
        return Ok(());
    }
    if sub == "sign" {
        return sign::sign(rest);
    }
    let opts = parse(rest)?;
    if opts.help {
        println!("{USAGE}");
        return Ok(());
    }
    match sub {
        "new" => new(&opts),
        "fetch" => fetch(&opts),
        "build" => build(&opts),
        "check" => check(&opts),
        "push" => push::push(&opts),
        other => Err(format!("plugin: unknown subcommand {other:?} (new, fetch, build, check, push or sign)\n{USAGE}")),
    }
}

fn parse(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts::default();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_string())),
            _ => (a.as_str(), None),
        };
        let mut value = |what: &str| -> Result<PathBuf, String> {
            match inline.clone().or_else(|| it.next().cloned()) {
                Some(v) if !v.is_empty() => Ok(PathBuf::from(v)),
                _ => Err(format!("plugin: {flag} needs {what}\n{USAGE}")),
            }
        };
        match flag {
            "--dir" => o.dir = Some(value("a directory")?),
            "--target-dir" => o.target_dir = Some(value("a directory")?),
            "--warden" => o.warden = Some(value("the path of a warden binary")?),
            "--all" if inline.is_none() => o.all = true,
            "--offline" if inline.is_none() => o.offline = true,
            "--clean" if inline.is_none() => o.clean = true,
            "-h" | "--help" => o.help = true,
            f if f.starts_with('-') => return Err(format!("plugin: unknown option {a:?}\n{USAGE}")),
            _ => o.names.push(a.clone()),
        }
    }
    Ok(o)
}

/// Where plugins live and where their builds go.
struct Layout {
    /// The plugins directory (DIR), absolute.
    dir: PathBuf,
    /// Whether DIR is this repository's `plugins/`.
    in_repo: bool,
    /// Where `NAME.wasm` is written: `<repo>/target/plugins`, or `DIR/target/plugins`.
    out_dir: PathBuf,
    /// cargo's target directory.
    target_dir: PathBuf,
}

impl Layout {
    fn new(opts: &Opts) -> Result<Layout, String> {
        let repo_plugins = root().join("plugins");
        let dir = absolute(opts.dir.as_deref().unwrap_or(&repo_plugins))?;
        let in_repo = same_file(&dir, &repo_plugins);
        let base = if in_repo { root().join("target") } else { dir.join("target") };
        let target_dir = match (&opts.target_dir, std::env::var_os("CARGO_TARGET_DIR")) {
            (Some(t), _) => absolute(t)?,
            (None, Some(t)) if !t.is_empty() => absolute(Path::new(&t))?,
            _ => base.join("plugin-build"),
        };
        Ok(Layout { dir, in_repo, out_dir: base.join("plugins"), target_dir })
    }

    fn wasm(&self, name: &str) -> PathBuf {
        self.out_dir.join(format!("{name}.wasm"))
    }

    /// `--dir DIR` as a user would retype it, or nothing for the default.
    fn dir_arg(&self) -> String {
        if self.in_repo { String::new() } else { format!(" --dir {}", self.dir.display()) }
    }

    /// The plugins in DIR: subdirectories with a Cargo.toml and a src/lib.rs.
    fn plugins(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&self.dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| !NOT_PLUGINS.contains(&n.as_str()) && !n.starts_with('.'))
            .filter(|n| self.dir.join(n).join("Cargo.toml").is_file() && self.dir.join(n).join("src/lib.rs").is_file())
            .collect();
        names.sort();
        names
    }

    /// An error for a NAME that is not a plugin in DIR, with what to do.
    fn no_such_plugin(&self, name: &str) -> String {
        let known = self.plugins();
        let known = if known.is_empty() { "none".to_string() } else { known.join(", ") };
        format!(
            "plugin {name}: there is no {} (plugins in {}: {known}); `cargo xtask plugin new {name}{}` creates it",
            self.dir.join(name).join("Cargo.toml").display(),
            self.dir.display(),
            self.dir_arg(),
        )
    }
}

// ---------------------------------------------------------------------------
// new

fn new(opts: &Opts) -> Result<(), String> {
    let [name] = opts.names.as_slice() else {
        return Err(format!("plugin new: give exactly one NAME\n{USAGE}"));
    };
    if opts.all || opts.target_dir.is_some() || opts.warden.is_some() {
        return Err(format!("plugin new: only --dir applies\n{USAGE}"));
    }
    validate_name(name)?;
    let layout = Layout::new(opts)?;
    std::fs::create_dir_all(&layout.dir)
        .map_err(|e| format!("plugin new: cannot create {}: {e}", layout.dir.display()))?;
    let crate_dir = layout.dir.join(name);
    if crate_dir.symlink_metadata().is_ok() {
        return Err(format!(
            "plugin new: {} already exists; pick another name, or remove it first",
            crate_dir.display()
        ));
    }
    std::fs::create_dir(&crate_dir).map_err(|e| format!("plugin new: cannot create {}: {e}", crate_dir.display()))?;
    if let Err(e) = scaffold(&layout, name, &crate_dir) {
        // Only what this run created: the directory did not exist before.
        let _ = std::fs::remove_dir_all(&crate_dir);
        return Err(e);
    }
    let d = layout.dir_arg();
    eprintln!("created plugin {name} in {}", crate_dir.display());
    eprintln!("next:  edit {}/src/lib.rs", crate_dir.display());
    eprintln!("       cargo xtask plugin build {name}{d}   # reproducible .wasm, its sha256 and a policy snippet");
    eprintln!("       cargo xtask plugin check {name}{d}   # load it as warden does; list tools and WASI imports");
    Ok(())
}

fn validate_name(name: &str) -> Result<(), String> {
    let valid = (1..=64).contains(&name.len())
        && name.bytes().next().is_some_and(|b| b.is_ascii_lowercase())
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
    if !valid {
        return Err(format!(
            "plugin new: invalid name {name:?}: use 1-64 characters of a-z, 0-9, - and _, starting with a letter \
             (for example `hello` or `weather-api`)"
        ));
    }
    if NOT_PLUGINS.contains(&name) {
        return Err(format!("plugin new: {name:?} is reserved (plugins/{name} is not a plugin); pick another name"));
    }
    if RESERVED.split_whitespace().any(|w| w == name) {
        return Err(format!(
            "plugin new: {name:?} cannot name a crate (a Rust keyword or a name cargo reserves); pick another name"
        ));
    }
    Ok(())
}

/// Writes the files of plugin `name` into the empty `crate_dir`, and its Cargo.lock.
fn scaffold(layout: &Layout, name: &str, crate_dir: &Path) -> Result<(), String> {
    let plugins = root().join("plugins");
    let manifest = read(&plugins.join("Cargo.toml"))?;
    let section = |header: &str| {
        toml_section(&manifest, header).ok_or_else(|| {
            format!("plugin new: {} has no {header} section to copy", plugins.join("Cargo.toml").display())
        })
    };
    let profile = format!("[profile.release]\n{}", section("[profile.release]")?);
    let deps = section("[workspace.dependencies]")?;
    let dependencies: String = ["wit-bindgen", "serde_json"]
        .iter()
        .map(|dep| {
            deps.lines().find(|l| l.split('=').next().map(str::trim) == Some(dep)).map(|l| format!("{l}\n")).ok_or_else(
                || format!("plugin new: {} declares no {dep} to depend on", plugins.join("Cargo.toml").display()),
            )
        })
        .collect::<Result<_, _>>()?;

    let (wit_path, wit_note) = if layout.in_repo {
        (
            "../wit-0.2.0",
            "\n  It is the shared `plugins/wit-0.2.0`: to move this plugin out of warden's repository, copy \
             `plugins/wit-0.2.0`\n  into it as `wit/` and change `path` in `src/lib.rs` to \"wit\".",
        )
    } else {
        (
            "wit",
            "\n  A copy of warden's `plugins/wit-0.2.0`, so that this plugin does not depend on warden's repository.",
        )
    };
    let out = layout.wasm(name);
    let fill = |template: &str| {
        template
            .replace("{{name}}", name)
            .replace("{{wit_path}}", wit_path)
            .replace("{{wit_note}}", wit_note)
            .replace("{{dir_arg}}", &layout.dir_arg())
            .replace("{{out}}", &out.display().to_string())
            .replace("{{dependencies}}", &dependencies)
            .replace("{{profile}}", &profile)
    };
    let mut files: Vec<(PathBuf, String)> = vec![
        (crate_dir.join("Cargo.toml"), fill(include_str!("../templates/Cargo.toml.tmpl"))),
        (crate_dir.join("src/lib.rs"), fill(include_str!("../templates/lib.rs.tmpl"))),
        (crate_dir.join("README.md"), fill(include_str!("../templates/README.md.tmpl"))),
        (crate_dir.join(".gitignore"), include_str!("../templates/gitignore.tmpl").to_string()),
        // The code is formatted for warden's style, wherever the plugin lives.
        (crate_dir.join("rustfmt.toml"), read(&plugins.join("rustfmt.toml"))?),
    ];
    if !layout.in_repo {
        files.push((crate_dir.join("wit/tool.wit"), read(&plugins.join("wit-0.2.0/tool.wit"))?));
        // Outside the repository, pin the toolchain warden's plugins are built with (a reproducible
        // build needs the same rustc), with the wasm target.
        files.push((crate_dir.join("rust-toolchain.toml"), toolchain_file()?));
    }
    for (path, text) in &files {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| format!("plugin new: cannot create {}: {e}", parent.display()))?;
        }
        std::fs::write(path, text).map_err(|e| format!("plugin new: cannot write {}: {e}", path.display()))?;
    }
    lock(crate_dir)
}

/// Creates `crate_dir/Cargo.lock` so that builds can be `--locked`: from the
/// builtin plugins' lock file (the same, known-good versions, no network),
/// falling back to a fresh resolution.
fn lock(crate_dir: &Path) -> Result<(), String> {
    let manifest = crate_dir.join("Cargo.toml");
    let lock = crate_dir.join("Cargo.lock");
    if std::fs::copy(root().join("plugins/Cargo.lock"), &lock).is_ok() {
        // Trims the copied lock file to this plugin's dependencies, keeping their versions.
        let trimmed = cargo()
            .args(["metadata", "--format-version", "1", "--offline", "--manifest-path"])
            .arg(&manifest)
            .current_dir(crate_dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if trimmed.is_ok_and(|s| s.success()) {
            return Ok(());
        }
    }
    let status = cargo()
        .args(["generate-lockfile", "--manifest-path"])
        .arg(&manifest)
        .current_dir(crate_dir)
        .status()
        .map_err(|e| format!("plugin new: cannot run cargo: {e}"))?;
    if !status.success() {
        return Err(format!(
            "plugin new: `cargo generate-lockfile` failed for {} (see above); check that crates.io is reachable, \
             then run `cargo xtask plugin new` again",
            manifest.display()
        ));
    }
    Ok(())
}

/// A rust-toolchain.toml with this repository's channel and the wasm target.
fn toolchain_file() -> Result<String, String> {
    let path = root().join("rust-toolchain.toml");
    let text = read(&path)?;
    let channel = text
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once('=')?;
            (k.trim() == "channel").then(|| v.trim().trim_matches('"').to_string())
        })
        .ok_or_else(|| format!("plugin new: {} names no channel", path.display()))?;
    Ok(format!(
        "# The toolchain warden's plugins are built with: the same source and Cargo.lock give the same\n\
         # .wasm only with the same rustc.\n\
         [toolchain]\nchannel = \"{channel}\"\ntargets = [\"{TARGET}\"]\nprofile = \"minimal\"\n"
    ))
}

/// The body of the TOML section that starts with the line `header`, up to the
/// next section, without trailing blank lines.
fn toml_section(text: &str, header: &str) -> Option<String> {
    let mut lines = text.lines().skip_while(|l| l.trim() != header);
    lines.next()?;
    let body: Vec<&str> = lines.take_while(|l| !l.trim_start().starts_with('[')).collect();
    let body = body.join("\n");
    Some(format!("{}\n", body.trim_end()))
}

// ---------------------------------------------------------------------------
// build

fn build(opts: &Opts) -> Result<(), String> {
    let layout = Layout::new(opts)?;
    let names = match (opts.all, opts.names.is_empty()) {
        (true, true) => {
            let all = layout.plugins();
            if all.is_empty() {
                return Err(format!(
                    "plugin build --all: no plugins in {}; `cargo xtask plugin new NAME{}` creates one",
                    layout.dir.display(),
                    layout.dir_arg()
                ));
            }
            all
        }
        (false, false) => opts.names.clone(),
        (true, false) => return Err(format!("plugin build: give NAMEs or --all, not both\n{USAGE}")),
        (false, true) => {
            let known = layout.plugins().join(", ");
            return Err(format!(
                "plugin build: name the plugin(s) to build, or pass --all (plugins in {}: {known})",
                layout.dir.display()
            ));
        }
    };
    let warden = warden(opts)?;
    let mut built = Vec::new();
    for name in &names {
        built.push((name, compile(&layout, name, &warden, opts)?));
    }
    let mut failed = Vec::new();
    for (name, wasm) in built {
        let doc = inspect(&warden, &wasm)?;
        let sha = doc["sha256"].as_str().unwrap_or_default();
        eprintln!("built {name}: {} ({} bytes)\nsha256 {sha}", wasm.display(), doc["size"]);
        let (problems, warnings) = findings(&doc);
        for w in &warnings {
            eprintln!("warning: {name}: {w}");
        }
        if problems.is_empty() {
            print!("{}", snippet(name, &wasm, &doc));
        } else {
            for p in &problems {
                eprintln!("error: {name}: {p}");
            }
            failed.push(name.as_str());
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "plugin build: warden cannot use {}: fix the errors above in src/lib.rs and build again \
             (no policy snippet for a plugin that would not load or validate)",
            failed.join(", ")
        ))
    }
}

/// Builds plugin `name` of `layout` inside warden's walls (see [`confine`]) and
/// copies the component to `layout.wasm(name)`.
fn compile(layout: &Layout, name: &str, warden: &Path, opts: &Opts) -> Result<PathBuf, String> {
    let how = confine::How { offline: opts.offline, clean: opts.clean, fetch_only: false };
    let artifact = confine::run(layout, name, warden, how)?;
    let dest = layout.wasm(name);
    // The output directory may lie in the plugin's checkout: through real directories only, and the
    // copy goes to a new file (a link left at either name is replaced, never written through).
    confine::real_dir(&layout.out_dir)?;
    let partial = layout.out_dir.join(format!(".{name}.wasm.partial"));
    let bytes =
        std::fs::read(&artifact).map_err(|e| format!("plugin build: cannot read {}: {e}", artifact.display()))?;
    confine::write_new(&partial, &bytes)?;
    std::fs::rename(&partial, &dest)
        .map_err(|e| format!("plugin build: cannot move {} to {}: {e}", partial.display(), dest.display()))?;
    Ok(dest)
}

/// The policy entries for plugin `name`: the pinned file and one `[tools.X]` per tool, granting nothing.
fn snippet(name: &str, wasm: &Path, doc: &Value) -> String {
    let mut s = format!(
        "[plugins.{}]\nsource = {}\nsha256 = {}\n",
        toml_key(name),
        toml_string(&wasm.display().to_string()),
        toml_string(doc["sha256"].as_str().unwrap_or_default())
    );
    for tool in doc["tools"].as_array().into_iter().flatten() {
        let tool = tool["name"].as_str().unwrap_or_default();
        s.push_str(&format!("\n[tools.{}]\nplugin = {}\ntier = \"ask\"\n", toml_key(tool), toml_string(name)));
    }
    s
}

fn toml_key(k: &str) -> String {
    let bare = !k.is_empty() && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if bare { k.to_string() } else { toml_string(k) }
}

fn toml_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

// ---------------------------------------------------------------------------
// fetch

fn fetch(opts: &Opts) -> Result<(), String> {
    if opts.names.is_empty() || opts.all || opts.offline {
        return Err(format!("plugin fetch: name the plugin(s) whose dependencies to fetch\n{USAGE}"));
    }
    let layout = Layout::new(opts)?;
    let warden = warden(opts)?;
    for name in &opts.names {
        let home = confine::run(&layout, name, &warden, confine::How { fetch_only: true, ..Default::default() })?;
        eprintln!("fetched the dependencies of {name} into {}", home.display());
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// check

fn check(opts: &Opts) -> Result<(), String> {
    let [arg] = opts.names.as_slice() else {
        return Err(format!("plugin check: give exactly one NAME or FILE.wasm\n{USAGE}"));
    };
    if opts.all {
        return Err(format!("plugin check: --all does not apply; check one plugin at a time\n{USAGE}"));
    }
    let given = Path::new(arg);
    let warden = warden(opts)?;
    let (name, wasm) = if arg.ends_with(".wasm") || arg.contains('/') {
        if !given.is_file() {
            return Err(format!("plugin check: {arg}: no such file"));
        }
        let stem = given.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| arg.clone());
        (stem, given.to_path_buf())
    } else {
        let layout = Layout::new(opts)?;
        (arg.clone(), compile(&layout, arg, &warden, opts)?)
    };
    let doc = inspect(&warden, &wasm)?;
    print!("{}", report(&name, &doc));
    let (problems, warnings) = findings(&doc);
    for w in &warnings {
        eprintln!("warning: {name}: {w}");
    }
    for p in &problems {
        eprintln!("error: {name}: {p}");
    }
    if problems.is_empty() {
        println!("\nok: warden can load {name}; `cargo xtask plugin build` prints its policy snippet");
        Ok(())
    } else {
        Err(format!(
            "plugin check: {} problem(s) in {name}: fix them (src/lib.rs, describe()) and check again",
            problems.len()
        ))
    }
}

/// What `check` prints: the file, each tool and each WASI import with its reach.
fn report(name: &str, doc: &Value) -> String {
    let mut s = format!(
        "plugin  {name}\nfile    {}\nsha256  {}\nsize    {} bytes\n\nTOOLS\n",
        doc["file"].as_str().unwrap_or_default(),
        doc["sha256"].as_str().unwrap_or_default(),
        doc["size"]
    );
    match doc["tools"].as_array() {
        Some(tools) if !tools.is_empty() => {
            for t in tools {
                let tool = t["name"].as_str().unwrap_or_default();
                s.push_str(&format!("  {tool:<24} {}\n", t["description"].as_str().unwrap_or_default()));
                let schema = match t["schema_error"].as_str() {
                    Some(e) => format!("UNUSABLE: {e}"),
                    None => t["input_schema"].to_string(),
                };
                s.push_str(&format!("  {:<24} input schema: {schema}\n", ""));
            }
        }
        _ => s.push_str("  none\n"),
    }
    s.push_str("\nIMPORTS (what it could ask the host for; each is reachable only through what a policy grants)\n");
    match doc["imports"].as_array() {
        Some(imports) if !imports.is_empty() => {
            for i in imports {
                let (n, reach) = (i["name"].as_str().unwrap_or_default(), i["reach"].as_str().unwrap_or_default());
                s.push_str(&format!("  {n:<40} {reach}\n"));
            }
        }
        _ => s.push_str("  none\n"),
    }
    s
}

/// The problems that stop warden using the plugin, and the warnings, from `warden plugin inspect --json`.
fn findings(doc: &Value) -> (Vec<String>, Vec<String>) {
    let mut problems = Vec::new();
    let mut warnings = Vec::new();
    if let Some(e) = doc["error"].as_str() {
        problems.push(format!("warden cannot load it (describe() failed, or it does not fit the plugin world): {e}"));
    }
    for i in doc["imports"].as_array().into_iter().flatten() {
        let reach = i["reach"].as_str().unwrap_or_default();
        if reach.contains("will not load") {
            problems.push(format!("it imports {}: {reach}; remove what needs it", i["name"].as_str().unwrap_or("?")));
        }
    }
    let tools = doc["tools"].as_array();
    if doc["error"].is_null() && tools.is_none_or(|t| t.is_empty()) {
        problems.push("describe() returns no tools: return one ToolInfo per tool".into());
    }
    let mut seen = BTreeSet::new();
    for t in tools.into_iter().flatten() {
        let tool = t["name"].as_str().unwrap_or_default();
        if !valid_tool_name(tool) {
            problems.push(format!(
                "tool {tool:?}: a tool name must be 1-64 characters of a-z, 0-9 and _, starting with a letter \
                 ([a-z][a-z0-9_]{{0,63}}); rename it in describe() and call()"
            ));
        }
        if !seen.insert(tool) {
            problems.push(format!("tool {tool:?}: describe() lists it more than once; each name must be unique"));
        }
        if let Some(e) = t["schema_error"].as_str() {
            problems.push(format!(
                "tool {tool:?}: its input schema is unusable: {e}; describe() must give a JSON Schema 2020-12 with \
                 \"type\": \"object\""
            ));
        }
        if let Some(why) = t["poisoning"].as_str() {
            warnings.push(format!(
                "tool {tool:?}: the description {why} (tool poisoning: text aimed at the model, not the user); \
                 reword it to say what the tool does"
            ));
        }
    }
    (problems, warnings)
}

fn valid_tool_name(n: &str) -> bool {
    (1..=64).contains(&n.len())
        && n.bytes().next().is_some_and(|b| b.is_ascii_lowercase())
        && n.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

// ---------------------------------------------------------------------------
// warden

/// The warden binary that inspects plugins: `--warden`, `$WARDEN_BIN`, or a fresh build of this repository's.
fn warden(opts: &Opts) -> Result<PathBuf, String> {
    let given =
        opts.warden.clone().or_else(|| std::env::var_os("WARDEN_BIN").filter(|w| !w.is_empty()).map(PathBuf::from));
    if let Some(w) = given {
        return if w.is_file() {
            absolute(&w)
        } else {
            Err(format!("{}: no such file; pass --warden with the path of a warden binary", w.display()))
        };
    }
    eprintln!("building warden (to inspect the plugin as warden loads it)");
    let out = cargo()
        .current_dir(root())
        .args(["build", "--locked", "--bin", "warden", "--message-format=json-render-diagnostics"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    let exe = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == "warden")
        .find_map(|m| m["executable"].as_str().map(PathBuf::from));
    match exe {
        Some(exe) if out.status.success() => Ok(exe),
        _ => Err("building warden failed (cargo's errors are above); pass --warden FILE to use a warden binary you \
                  have"
            .into()),
    }
}

/// `warden plugin inspect FILE --json`, without a compile cache.
fn inspect(warden: &Path, wasm: &Path) -> Result<Value, String> {
    let out = Command::new(warden)
        .args(["plugin", "inspect"])
        .arg(wasm)
        .arg("--json")
        .env("WARDEN_CACHE_DIR", "")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", warden.display()))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    match serde_json::from_slice::<Value>(&out.stdout) {
        Ok(doc) if matches!(out.status.code(), Some(0 | 1)) => Ok(doc),
        _ => Err(format!(
            "{} is not a warden plugin: `warden plugin inspect` says: {}; a plugin is a component built for {TARGET} \
             that exports the `plugin` world (plugins/wit-0.2.0/tool.wit, or 0.1.0's plugins/wit/tool.wit)",
            wasm.display(),
            stderr.trim().trim_start_matches("warden: ")
        )),
    }
}

// ---------------------------------------------------------------------------
// paths

fn read(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

/// `p` made absolute against the current directory, resolved through symlinks when it exists.
fn absolute(p: &Path) -> Result<PathBuf, String> {
    let joined = if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir().map_err(|e| format!("cannot find the current directory: {e}"))?.join(p)
    };
    Ok(canonical(&joined))
}

fn canonical(p: &Path) -> PathBuf {
    p.canonicalize().unwrap_or_else(|_| p.components().collect())
}

fn same_file(a: &Path, b: &Path) -> bool {
    canonical(a) == canonical(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        for ok in ["hello", "weather-api", "a1_b2", &"x".repeat(64)] {
            assert!(validate_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "Hello", "1abc", "-x", "a b", "a.b", "wit", "target", "std", "fn", &"x".repeat(65), "é"] {
            assert!(validate_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn tool_names_are_checked() {
        assert!(valid_tool_name("greet") && valid_tool_name("read_file2"));
        for bad in ["", "Greet", "_x", "a-b", "2x", &"x".repeat(65)] {
            assert!(!valid_tool_name(bad), "{bad}");
        }
    }

    #[test]
    fn toml_sections_come_out_whole() {
        let text = "[a]\nx = 1\n\n[profile.release]\nopt-level = \"s\"\nlto = true\n\n[b]\ny = 2\n";
        assert_eq!(toml_section(text, "[profile.release]").as_deref(), Some("opt-level = \"s\"\nlto = true\n"));
        assert_eq!(toml_section(text, "[c]"), None);
    }

    #[test]
    fn the_builtin_profile_is_reproducible() {
        let manifest = read(&root().join("plugins/Cargo.toml")).unwrap_or_default();
        let profile = toml_section(&manifest, "[profile.release]").unwrap_or_default();
        for setting in ["codegen-units = 1", "strip = true", "panic = \"abort\"", "debug = false"] {
            assert!(profile.contains(setting), "plugins/Cargo.toml's release profile lacks {setting}");
        }
    }

    #[test]
    fn snippets_quote_what_toml_needs() {
        let doc = serde_json::json!({"sha256": "ab", "tools": [{"name": "greet"}, {"name": "odd name"}]});
        let s = snippet("hello", Path::new("/tmp/a \"b\"/hello.wasm"), &doc);
        assert!(s.contains("[plugins.hello]\nsource = \"/tmp/a \\\"b\\\"/hello.wasm\"\nsha256 = \"ab\"\n"), "{s}");
        assert!(s.contains("[tools.greet]\nplugin = \"hello\"\ntier = \"ask\"\n"), "{s}");
        assert!(s.contains("[tools.\"odd name\"]"), "{s}");
    }

    #[test]
    fn findings_name_the_tool() {
        let doc = serde_json::json!({"imports": [], "tools": [
            {"name": "greet", "schema_error": "the schema must describe an object", "poisoning": null},
            {"name": "greet", "schema_error": null, "poisoning": "asks the model to ignore instructions"},
            {"name": "Bad", "schema_error": null, "poisoning": null},
        ]});
        let (problems, warnings) = findings(&doc);
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert!(problems[0].contains("\"greet\"") && problems[0].contains("unusable"));
        assert!(problems[1].contains("more than once"));
        assert!(problems[2].contains("\"Bad\""));
        assert_eq!(warnings.len(), 1);
        let (problems, _) = findings(&serde_json::json!({"imports": [], "error": "describe trapped"}));
        assert!(problems[0].contains("describe trapped"));
    }
}
