//! `cargo xtask plugin new|build|check` as a plugin author meets it: a fresh
//! scaffold builds on the first try, its policy snippet pins the file it built
//! and runs under warden, the build is reproducible (the same bytes from a copy
//! at another path with a clean target directory), and `check` refuses a plugin
//! whose schema warden cannot use, naming the tool.
//!
//! Each clean release build of a plugin takes tens of seconds, so this is one
//! test that shares one target directory wherever reproducibility is not what
//! it measures.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use sha2::Digest;

mod util;

/// `cargo xtask plugin ARGS` (its nested cargo builds go to `target/tmp/xtask-plugin`).
fn xtask(args: &[&str]) -> Output {
    util::xtask_plugin(args)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let dest = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &dest);
        } else {
            std::fs::copy(entry.path(), &dest).unwrap();
        }
    }
}

#[test]
fn a_new_plugin_builds_reproducibly_runs_under_its_snippet_and_is_checked() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap();
    let dir = root.join("plugins");
    let dir_s = dir.to_str().unwrap();

    // new: a standalone crate with its own workspace, lock file and copy of the WIT.
    let out = xtask(&["new", "hello", "--dir", dir_s]);
    assert!(out.status.success());
    let crate_dir = dir.join("hello");
    for f in ["Cargo.toml", "Cargo.lock", "src/lib.rs", "README.md", "wit/tool.wit", "rust-toolchain.toml"] {
        assert!(crate_dir.join(f).is_file(), "the scaffold lacks {f}");
    }
    let wit = std::fs::read_to_string(crate_dir.join("wit/tool.wit")).unwrap();
    assert!(wit.starts_with("package warden:plugin@0.2.0;"), "the scaffold's WIT is not 0.2.0:\n{wit}");
    let manifest = std::fs::read_to_string(crate_dir.join("Cargo.toml")).unwrap();
    assert!(manifest.contains("[workspace]") && manifest.contains("codegen-units = 1"), "{manifest}");
    // Names are checked, and nothing existing is overwritten.
    let out = xtask(&["new", "hello", "--dir", dir_s]);
    assert!(!out.status.success() && text(&out.stderr).contains("already exists"));
    let out = xtask(&["new", "Hello!", "--dir", dir_s]);
    assert!(!out.status.success() && text(&out.stderr).contains("invalid name"));
    assert!(!dir.join("Hello!").exists());

    // Reproducible: a copy at another path, built in a clean target directory, must give the same
    // bytes. It builds alongside the rest (cores idle while a build runs its serial steps).
    let other = tempfile::tempdir().unwrap();
    let other_dir = other.path().canonicalize().unwrap().join("somewhere/else");
    copy_dir(&crate_dir, &other_dir.join("hello"));
    let fresh_target = other.path().join("fresh-target");
    let second_build = {
        let (dir, target) = (other_dir.to_str().unwrap().to_string(), fresh_target.to_str().unwrap().to_string());
        std::thread::spawn(move || xtask(&["build", "hello", "--dir", &dir, "--target-dir", &target]))
    };

    // build: the .wasm, and a policy snippet that pins it.
    let out = xtask(&["build", "hello", "--dir", dir_s]);
    assert!(out.status.success());
    let snippet = text(&out.stdout);
    let doc: toml::Table =
        toml::from_str(&snippet).unwrap_or_else(|e| panic!("the snippet is not TOML: {e}\n{snippet}"));
    let wasm = PathBuf::from(doc["plugins"]["hello"]["source"].as_str().unwrap());
    assert_eq!(wasm, dir.join("target/plugins/hello.wasm"));
    let bytes = std::fs::read(&wasm).unwrap();
    assert_eq!(doc["plugins"]["hello"]["sha256"].as_str().unwrap(), hex::encode(sha2::Sha256::digest(&bytes)));
    assert_eq!(doc["tools"]["greet"]["plugin"].as_str(), Some("hello"));
    assert_eq!(doc["tools"]["greet"]["tier"].as_str(), Some("ask"));
    assert_eq!(doc["tools"].as_table().unwrap().len(), 1, "{snippet}");
    assert!(text(&out.stderr).contains(&hex::encode(sha2::Sha256::digest(&bytes))), "build prints the sha256");

    // The snippet, as is, is a policy under which warden runs the tool.
    let policy = root.join("warden.toml");
    std::fs::write(&policy, format!("version = 1\n\n{snippet}")).unwrap();
    let warden = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_warden"))
            .arg("--policy")
            .arg(&policy)
            .arg("--audit-log")
            .arg(root.join("a.jsonl"))
            .arg("--workspace")
            .arg(&root)
            .args(args)
            .env("WARDEN_CACHE_DIR", "")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let out = warden(&["--approve", "yes", "call", "greet", r#"{"name":"x"}"#]);
    assert!(out.status.success(), "{out:?}");
    let result: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // A warden:plugin@0.2.0 component: a text block, and the greeting as structured content.
    assert_eq!(result["result"]["content"][0], serde_json::json!({"type": "text", "text": "Hello, x!"}), "{result}");
    assert_eq!(result["result"]["structuredContent"]["greeting"], "Hello, x!", "{result}");
    // The schema bounds the input before the plugin runs.
    let out = warden(&["--approve", "yes", "call", "greet", &format!(r#"{{"name":"{}"}}"#, "x".repeat(101))]);
    assert!(!out.status.success(), "{out:?}");

    // check: the tools and the WASI imports with their reach.
    let out = xtask(&["check", "hello", "--dir", dir_s]);
    assert!(out.status.success());
    let report = text(&out.stdout);
    assert!(
        report.contains("greet") && report.contains("wasi:cli/environment") && report.contains("streams"),
        "{report}"
    );

    // A schema warden cannot use: check and build fail, naming the tool; build prints no snippet.
    assert!(xtask(&["new", "broken", "--dir", dir_s]).status.success());
    let lib = dir.join("broken/src/lib.rs");
    let code = std::fs::read_to_string(&lib).unwrap();
    assert!(code.contains(r#""type": "object","#));
    std::fs::write(&lib, code.replacen(r#""type": "object","#, r#""type": 5,"#, 1)).unwrap();
    let out = xtask(&["check", "broken", "--dir", dir_s]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains(r#"tool "greet""#) && err.contains("schema"), "{err}");
    let out = xtask(&["build", "broken", "--dir", dir_s]);
    assert!(!out.status.success() && out.stdout.is_empty());
    assert!(text(&out.stderr).contains(r#"tool "greet""#));

    let out = second_build.join().unwrap();
    assert!(out.status.success());
    let again = std::fs::read(other_dir.join("target/plugins/hello.wasm")).unwrap();
    assert!(
        std::fs::read_dir(fresh_target.join("targets")).unwrap().flatten().any(|e| e
            .file_name()
            .to_string_lossy()
            .starts_with("hello-")
            && e.path().join("wasm32-wasip2/release").is_dir()),
        "the build did not use the fresh target directory"
    );
    if again != bytes {
        let at = bytes.iter().zip(&again).position(|(a, b)| a != b).unwrap_or(bytes.len().min(again.len()));
        panic!(
            "not reproducible: {} ({} bytes) and {} ({} bytes) differ from byte {at}",
            wasm.display(),
            bytes.len(),
            other_dir.join("target/plugins/hello.wasm").display(),
            again.len()
        );
    }
}
