//! `cargo xtask dist`: the release archive
//! `target/dist/warden-VERSION-ARCH-linux-gnu.tar.gz` and `SHA256SUMS` beside it
//! (docs/install.md lists the layout).
//!
//! It builds `warden` and `warden-sandbox` with the release profile (the commit
//! passed in `WARDEN_BUILD_COMMIT`, so `--version` names it), has the built
//! `warden` write its completions and man pages, and packs them with the
//! AppArmor profile, the shipped policies and the docs. The builtin components
//! (`builtin:fs`, `builtin:net`) are inside the `warden` binary, so there is no
//! plugin directory to ship.
//!
//! The archive is reproducible from the same binaries: entries sorted, every
//! mtime `SOURCE_DATE_EPOCH` (else the commit's time), owner and group 0, modes
//! 0755/0644, and a gzip header without a name or time.
//!
//! `--bin-dir DIR` packs the `warden` and `warden-sandbox` found in DIR instead
//! of building (tests/packaging.rs packs the debug binaries that way); `--out DIR`
//! writes somewhere other than `target/dist`.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::Digest;

pub(crate) const USAGE: &str = "usage: cargo xtask dist [--bin-dir DIR] [--out DIR]";

/// The largest file taken into the archive (a release `warden` is some tens of MiB).
const MAX_FILE: u64 = 512 << 20;

/// What goes into the archive, by path inside its top directory.
pub(crate) struct Layout {
    /// Regular files: path → (executable, bytes).
    files: BTreeMap<String, (bool, Vec<u8>)>,
    /// Directories that exist even when empty.
    dirs: Vec<String>,
}

impl Layout {
    fn new() -> Self {
        Layout { files: BTreeMap::new(), dirs: Vec::new() }
    }

    fn add(&mut self, path: &str, executable: bool, bytes: Vec<u8>) {
        self.files.insert(path.to_string(), (executable, bytes));
    }

    fn add_file(&mut self, path: &str, executable: bool, from: &Path) -> Result<(), String> {
        let len = std::fs::metadata(from).map_err(|e| format!("{}: {e}", from.display()))?.len();
        if len > MAX_FILE {
            return Err(format!(
                "{}: {len} bytes, more than the {MAX_FILE} an archive member may have",
                from.display()
            ));
        }
        let bytes = std::fs::read(from).map_err(|e| format!("cannot read {}: {e}", from.display()))?;
        self.add(path, executable, bytes);
        Ok(())
    }

    /// Every path of the archive, directories included, sorted (a parent sorts before its children).
    pub(crate) fn paths(&self) -> Vec<String> {
        let mut all: Vec<String> = self.files.keys().cloned().collect();
        let mut dirs: Vec<String> = self.dirs.clone();
        for p in self.files.keys().chain(self.dirs.iter()) {
            let mut cur = p.as_str();
            while let Some((parent, _)) = cur.rsplit_once('/') {
                dirs.push(format!("{parent}/"));
                cur = parent;
            }
        }
        all.extend(dirs.into_iter().map(|d| if d.ends_with('/') { d } else { format!("{d}/") }));
        all.sort();
        all.dedup();
        all
    }
}

/// Where the commit, version and times come from.
struct Source {
    version: String,
    commit: Option<String>,
    epoch: u64,
}

pub(crate) fn run(args: &[String]) -> Result<(), String> {
    let (mut bin_dir, mut out) = (None, None);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let slot = match a.as_str() {
            "--bin-dir" => &mut bin_dir,
            "--out" => &mut out,
            _ => return Err(format!("dist: unknown argument {a:?}\n{USAGE}")),
        };
        *slot = Some(PathBuf::from(it.next().ok_or_else(|| format!("dist: {a} needs a directory\n{USAGE}"))?));
    }
    let root = super::root();
    let source = source(&root)?;
    let bin_dir = match bin_dir {
        Some(d) => d,
        None => build_release(&root, &source)?,
    };
    let out = out.unwrap_or_else(|| root.join("target").join("dist"));
    let name = format!("warden-{}-{}-linux-gnu", source.version, std::env::consts::ARCH);
    let scratch = out.join(format!(".{name}.work"));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).map_err(|e| format!("cannot create {}: {e}", scratch.display()))?;
    let layout = layout(&root, &bin_dir, &scratch);
    let _ = std::fs::remove_dir_all(&scratch);
    let layout = layout?;
    let archive = out.join(format!("{name}.tar.gz"));
    let bytes = pack(&layout, &name, source.epoch)?;
    std::fs::write(&archive, &bytes).map_err(|e| format!("cannot write {}: {e}", archive.display()))?;
    let sum = hex(&sha2::Sha256::digest(&bytes));
    let sums = out.join("SHA256SUMS");
    std::fs::write(&sums, format!("{sum}  {name}.tar.gz\n"))
        .map_err(|e| format!("cannot write {}: {e}", sums.display()))?;
    println!("{} ({} bytes, sha256 {sum})", archive.display(), bytes.len());
    println!("{}", sums.display());
    for bin in ["warden", "warden-sandbox"] {
        println!("{bin}: {}", linkage(&bin_dir.join(bin)));
    }
    Ok(())
}

/// The version (Cargo.toml), the commit (git, `-dirty` when tracked files
/// changed) and the archive's time (`SOURCE_DATE_EPOCH`, else the commit's).
fn source(root: &Path) -> Result<Source, String> {
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).map_err(|e| format!("Cargo.toml: {e}"))?;
    let doc: toml::Table = toml::from_str(&manifest).map_err(|e| format!("Cargo.toml: {e}"))?;
    let version = doc
        .get("package")
        .and_then(|p| p.get("version"))
        .and_then(|v| v.as_str())
        .ok_or("Cargo.toml has no package.version")?
        .to_string();
    let git = |args: &[&str]| -> Option<String> {
        // As build.rs does: a root build of a checkout another user owns still names its commit.
        let safe = format!("safe.directory={}", root.display());
        let out = Command::new("git").arg("-c").arg(safe).arg("-C").arg(root).args(args).output().ok()?;
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let commit = git(&["rev-parse", "--short", "HEAD"]).map(|hash| {
        let clean = git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| s.is_empty());
        if clean { hash } else { format!("{hash}-dirty") }
    });
    let epoch = match std::env::var("SOURCE_DATE_EPOCH") {
        Ok(s) => s.trim().parse().map_err(|_| format!("SOURCE_DATE_EPOCH={s:?} is not a number of seconds"))?,
        Err(_) => git(&["log", "-1", "--format=%ct", "HEAD"])
            .and_then(|t| t.parse().ok())
            .ok_or("no git commit to date the archive by: set SOURCE_DATE_EPOCH (seconds since 1970) for its mtimes")?,
    };
    Ok(Source { version, commit, epoch })
}

/// `cargo build --release` of both binaries, the commit passed to build.rs.
fn build_release(root: &Path, source: &Source) -> Result<PathBuf, String> {
    let mut cargo = super::cargo();
    cargo.current_dir(root).args(["build", "--release", "--locked", "-p", "warden", "-p", "warden-sandbox"]);
    cargo.args(["--bin", "warden", "--bin", "warden-sandbox"]);
    match &source.commit {
        Some(c) => cargo.env("WARDEN_BUILD_COMMIT", c).env("SOURCE_DATE_EPOCH", source.epoch.to_string()),
        None => cargo.env_remove("WARDEN_BUILD_COMMIT"),
    };
    let status = cargo.status().map_err(|e| format!("cannot run cargo: {e}"))?;
    if !status.success() {
        return Err(format!("the release build failed ({status}); see its output above"));
    }
    Ok(root.join("target").join("release"))
}

/// The archive's files: the binaries from `bin_dir`, what the built `warden`
/// generates (completions, man pages, written into `scratch`), and files of the
/// repository.
fn layout(root: &Path, bin_dir: &Path, scratch: &Path) -> Result<Layout, String> {
    let mut l = Layout::new();
    let warden = bin_dir.join("warden");
    for bin in ["warden", "warden-sandbox"] {
        l.add_file(&format!("bin/{bin}"), true, &bin_dir.join(bin))
            .map_err(|e| format!("{e} (build it, or pass --bin-dir with both binaries)"))?;
    }
    for (shell, path) in [
        ("bash", "share/bash-completion/completions/warden"),
        ("zsh", "share/zsh/site-functions/_warden"),
        ("fish", "share/fish/vendor_completions.d/warden.fish"),
    ] {
        l.add(path, false, output(Command::new(&warden).args(["completions", shell]))?);
    }
    let man = scratch.join("man");
    std::fs::create_dir_all(&man).map_err(|e| format!("cannot create {}: {e}", man.display()))?;
    output(Command::new(&warden).arg("man").arg("--dir").arg(&man))?;
    for entry in std::fs::read_dir(&man).map_err(|e| format!("{}: {e}", man.display()))? {
        let entry = entry.map_err(|e| format!("{}: {e}", man.display()))?;
        let file = entry.file_name().to_string_lossy().into_owned();
        l.add_file(&format!("share/man/man1/{file}"), false, &entry.path())?;
    }
    // The profile `warden doctor` points to; its directory is there even before the profile is.
    l.dirs.push("share/warden/apparmor".into());
    let apparmor = root.join("packaging/apparmor/warden-sandbox");
    if apparmor.is_file() {
        l.add_file("share/warden/apparmor/warden-sandbox", false, &apparmor)?;
    }
    for dir in ["policies", "docs"] {
        let dest = if dir == "docs" { "share/doc/warden/docs" } else { "share/warden/policies" };
        for entry in std::fs::read_dir(root.join(dir)).map_err(|e| format!("{dir}/: {e}"))? {
            let path = entry.map_err(|e| format!("{dir}/: {e}"))?.path();
            let file = path.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
            if path.is_file() && (file.ends_with(".md") || file.ends_with(".toml")) {
                l.add_file(&format!("{dest}/{file}"), false, &path)?;
            }
        }
    }
    for doc in ["README.md", "SECURITY.md", "LICENSE", "LICENSE-APACHE", "NOTICE"] {
        if root.join(doc).is_file() {
            l.add_file(&format!("share/doc/warden/{doc}"), false, &root.join(doc))?;
        }
    }
    l.add_file("README.md", false, &root.join("README.md"))?;
    Ok(l)
}

/// A generating command's stdout; its failure is the archive's.
fn output(cmd: &mut Command) -> Result<Vec<u8>, String> {
    let shown = format!("{cmd:?}");
    let out = cmd.output().map_err(|e| format!("cannot run {shown}: {e}"))?;
    if !out.status.success() {
        return Err(format!("{shown} failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr)));
    }
    Ok(out.stdout)
}

/// The gzipped tar of `layout` under `top/`, the same bytes for the same input.
pub(crate) fn pack(layout: &Layout, top: &str, epoch: u64) -> Result<Vec<u8>, String> {
    let gz = flate2::GzBuilder::new().mtime(0).write(Vec::new(), flate2::Compression::default());
    let mut tar = tar::Builder::new(gz);
    let err = |e: std::io::Error| format!("packing the archive: {e}");
    let mut paths = layout.paths();
    paths.insert(0, String::new());
    for p in paths {
        let full = format!("{top}/{p}");
        let mut header = tar::Header::new_gnu();
        header.set_mtime(epoch);
        header.set_uid(0);
        header.set_gid(0);
        header.set_username("root").map_err(err)?;
        header.set_groupname("root").map_err(err)?;
        match layout.files.get(&p) {
            Some((exec, bytes)) => {
                header.set_entry_type(tar::EntryType::Regular);
                header.set_mode(if *exec { 0o755 } else { 0o644 });
                header.set_size(bytes.len() as u64);
                tar.append_data(&mut header, &full, bytes.as_slice()).map_err(err)?;
            }
            None => {
                header.set_entry_type(tar::EntryType::Directory);
                header.set_mode(0o755);
                header.set_size(0);
                tar.append_data(&mut header, &full, std::io::empty()).map_err(err)?;
            }
        }
    }
    let mut gz = tar.into_inner().map_err(err)?;
    gz.flush().map_err(err)?;
    gz.finish().map_err(err)
}

/// How a binary links: static, or the highest GLIBC symbol version it needs
/// (`objdump -T`), which is the oldest glibc it runs on.
fn linkage(bin: &Path) -> String {
    let out = match Command::new("objdump").arg("-T").arg(bin).output() {
        Ok(o) => o,
        Err(e) => return format!("cannot run objdump -T ({e}): the glibc it needs is not known"),
    };
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("not a dynamic object") {
        return "static (no dynamic symbols)".into();
    }
    let needed = Command::new("objdump")
        .arg("-p")
        .arg(bin)
        .output()
        .map(|o| {
            let text = String::from_utf8_lossy(&o.stdout).into_owned();
            text.lines().filter_map(|l| l.trim().strip_prefix("NEEDED")).map(str::trim).collect::<Vec<_>>().join(" ")
        })
        .unwrap_or_default();
    match max_glibc(&text) {
        Some((a, b)) => format!("needs glibc {a}.{b} or newer (highest GLIBC_ symbol version); links {needed}"),
        None => format!("no GLIBC_ symbol versions; links {needed}"),
    }
}

/// The highest `GLIBC_x.y[.z]` in `objdump -T` output, as (x, y).
pub(crate) fn max_glibc(objdump: &str) -> Option<(u32, u32)> {
    objdump
        .split(|c: char| c.is_whitespace() || c == '(' || c == ')')
        .filter_map(|w| w.strip_prefix("GLIBC_"))
        .filter_map(|v| {
            let mut parts = v.split('.').map(str::parse::<u32>);
            Some((parts.next()?.ok()?, parts.next()?.ok()?))
        })
        .max()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn sample() -> Layout {
        let mut l = Layout::new();
        l.add("bin/warden", true, b"\x7fELF warden".to_vec());
        l.add("share/man/man1/warden.1", false, b".TH warden 1\n".to_vec());
        l.add("README.md", false, b"# warden\n".to_vec());
        l.dirs.push("share/warden/apparmor".into());
        l
    }

    #[test]
    fn the_archive_is_sorted_owned_by_root_dated_by_the_epoch_and_reproducible() {
        let bytes = pack(&sample(), "warden-0.1.0", 1_800_000_000).unwrap();
        assert_eq!(bytes, pack(&sample(), "warden-0.1.0", 1_800_000_000).unwrap(), "not reproducible");
        let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(bytes.as_slice()));
        let mut seen = Vec::new();
        for entry in archive.entries().unwrap() {
            let entry = entry.unwrap();
            let h = entry.header();
            assert_eq!((h.uid().unwrap(), h.gid().unwrap(), h.mtime().unwrap()), (0, 0, 1_800_000_000));
            let path = entry.path().unwrap().to_string_lossy().into_owned();
            let mode = h.mode().unwrap();
            let want = if path.ends_with('/') || path.starts_with("warden-0.1.0/bin/") { 0o755 } else { 0o644 };
            assert_eq!(mode, want, "{path}");
            seen.push(path);
        }
        let want = [
            "warden-0.1.0/",
            "warden-0.1.0/README.md",
            "warden-0.1.0/bin/",
            "warden-0.1.0/bin/warden",
            "warden-0.1.0/share/",
            "warden-0.1.0/share/man/",
            "warden-0.1.0/share/man/man1/",
            "warden-0.1.0/share/man/man1/warden.1",
            "warden-0.1.0/share/warden/",
            "warden-0.1.0/share/warden/apparmor/",
        ];
        assert_eq!(seen, want);
        assert_ne!(bytes, pack(&sample(), "warden-0.1.0", 1_800_000_001).unwrap(), "the epoch is not in the archive");
    }

    #[test]
    fn the_highest_glibc_version_is_found() {
        let text = "0000000000000000      DF *UND*  0000000000000000 (GLIBC_2.2.5) write\n\
                    0000000000000000      DF *UND*  0000000000000000 (GLIBC_2.34) __libc_start_main\n\
                    0000000000000000  w   DF *UND*  0000000000000000 (GLIBC_2.9)  pipe2\n\
                    0000000000000000      DF *UND*  0000000000000000  GLIBC_2.17  clock_gettime\n";
        assert_eq!(max_glibc(text), Some((2, 34)));
        assert_eq!(max_glibc("no versions here"), None);
    }
}
