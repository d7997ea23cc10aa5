//! Builds the builtin component tools (`plugins/`, its own cargo workspace) for
//! wasm32-wasip2 and places them in `OUT_DIR`, so the runtime embeds the `fs` and
//! `net` components and `cargo install` gives a self-contained program.
//!
//! The wasm32-wasip2 target is added with rustup when it is missing (rustup does
//! not add targets from `rust-toolchain.toml` to an installed toolchain).

// A build script reports failure by panicking, with the reason.
#![allow(clippy::expect_used)]

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

const TARGET: &str = "wasm32-wasip2";
const PLUGINS: &[&str] = &["conformance", "fs", "net", "testkit"];

fn main() {
    // The workspace root (this crate is crates/warden-runtime), canonical so that
    // the path remapped out of the components is the same on every checkout.
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let root = manifest.join("../..").canonicalize().expect("the workspace root of crates/warden-runtime exists");
    let plugins = root.join("plugins");
    for p in [
        "wit",
        "wit-0.2.0",
        "conformance/src",
        "conformance/Cargo.toml",
        "fs/src",
        "fs/Cargo.toml",
        "net/src",
        "net/Cargo.toml",
        "testkit/src",
        "testkit/Cargo.toml",
        "Cargo.toml",
        "Cargo.lock",
    ] {
        println!("cargo:rerun-if-changed=../../plugins/{p}");
    }
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    // Components already built (by a normal build) for another toolchain's build
    // of warden, such as the nightly one of the fuzz targets, which lacks the target.
    println!("cargo:rerun-if-env-changed=WARDEN_PLUGIN_DIR");
    if let Some(dir) = env::var_os("WARDEN_PLUGIN_DIR") {
        for name in PLUGINS {
            let built = Path::new(&dir).join(format!("{name}.wasm"));
            let dest = out.join(format!("{name}.wasm"));
            std::fs::copy(&built, &dest).unwrap_or_else(|e| {
                panic!("WARDEN_PLUGIN_DIR: cannot copy {}: {e} (build warden normally first)", built.display())
            });
        }
        finish(&out);
        return;
    }
    let rustc = env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    ensure_target(&rustc);

    let target_dir = root.join("target").join("wasm-plugins");
    let cargo_home = env::var("CARGO_HOME").unwrap_or_default();
    let mut flags = vec![format!("--remap-path-prefix={}=/warden/plugins", plugins.display())];
    if !cargo_home.is_empty() {
        flags.push(format!("--remap-path-prefix={cargo_home}=/cargo"));
    }
    let status = Command::new(&cargo)
        .args(["build", "--release", "--locked", "--target", TARGET, "--manifest-path"])
        .arg(plugins.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target_dir)
        .env("CARGO_ENCODED_RUSTFLAGS", flags.join("\x1f"))
        .env("RUSTC", &rustc)
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET")
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env_remove("CARGO_PRIMARY_PACKAGE")
        .status()
        .unwrap_or_else(|e| panic!("cannot run {cargo} to build the builtin plugins: {e}"));
    if !status.success() {
        panic!("building the builtin plugins (plugins/) for {TARGET} failed: see the errors above");
    }
    for name in PLUGINS {
        let built = target_dir.join(TARGET).join("release").join(format!("{name}.wasm"));
        let dest = out.join(format!("{name}.wasm"));
        std::fs::copy(&built, &dest).unwrap_or_else(|e| panic!("cannot copy {}: {e}", built.display()));
    }
    finish(&out);
}

/// Tells the crate where the testkit is and the embedded `fs` component's
/// sha256, so a run does not hash 900 KB again each time it starts.
fn finish(out: &Path) {
    use sha2::Digest;
    println!("cargo:rustc-env=WARDEN_TESTKIT_WASM={}", out.join("testkit.wasm").display());
    // The warden:plugin@0.2.0 fixture of the MCP tests (plugins/conformance).
    println!("cargo:rustc-env=WARDEN_CONFORMANCE_WASM={}", out.join("conformance.wasm").display());
    let fs = std::fs::read(out.join("fs.wasm")).expect("the fs component was just placed in OUT_DIR");
    println!("cargo:rustc-env=WARDEN_BUILTIN_FS_SHA256={}", hex::encode(sha2::Sha256::digest(&fs)));
    let net = std::fs::read(out.join("net.wasm")).expect("the net component was just placed in OUT_DIR");
    println!("cargo:rustc-env=WARDEN_BUILTIN_NET_SHA256={}", hex::encode(sha2::Sha256::digest(&net)));
}

/// Adds the wasm32-wasip2 target with rustup when this toolchain lacks it.
fn ensure_target(rustc: &str) {
    let sysroot = Command::new(rustc)
        .args(["--print", "sysroot"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    if let Some(sysroot) = &sysroot
        && Path::new(sysroot).join("lib/rustlib").join(TARGET).join("lib").is_dir()
    {
        return;
    }
    println!("cargo:warning=the {TARGET} target is missing: running `rustup target add {TARGET}`");
    let status = Command::new("rustup").args(["target", "add", TARGET]).status();
    match status {
        Ok(s) if s.success() => {}
        Ok(s) => panic!("`rustup target add {TARGET}` failed ({s}); run it yourself, then build again"),
        Err(e) => panic!(
            "the {TARGET} target is missing and rustup cannot be run ({e}); install the target for this \
             toolchain (with rustup: `rustup target add {TARGET}`; otherwise your distribution's \
             rust-std package for {TARGET}), then build again"
        ),
    }
}
