//! Plugins from an OCI registry: `warden plugin push` to a private
//! docker-registry on loopback, a policy naming the manifest by digest, and
//! `warden call` of the component's tool; the registry serving changed bytes,
//! a tag or a wrong digest in the policy, the fetch cache (hashed again on
//! use), `warden plugin pull`, and a registry that wants a bearer token.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "oci/signed.rs"]
mod signed;
#[path = "oci/token.rs"]
mod token;
mod util;

use std::path::{Path, PathBuf};

use serde_json::Value;
use sha2::{Digest, Sha256};
use util::registry::Registry;
use util::{Env, Run};

/// The testkit component: a real `warden:plugin` component with an `echo` tool.
const TESTKIT: &str = warden::runtime::builtin::TESTKIT_WASM;

fn sha256_file(p: &Path) -> String {
    hex::encode(Sha256::digest(std::fs::read(p).unwrap()))
}

/// `warden ARGS` in `env`, with the cache (compiled components and OCI downloads) in `cache`.
fn warden(env: &Env, cache: &Path, args: &[&str], vars: &[(&str, &str)]) -> Run {
    let mut c = env.command(args);
    c.env("WARDEN_CACHE_DIR", cache).env_remove("WARDEN_OCI_USERNAME").env_remove("WARDEN_OCI_PASSWORD");
    for (k, v) in vars {
        c.env(k, v);
    }
    util::run_to_end(c, None)
}

/// A fresh cache directory of the test.
fn fresh_cache(env: &Env, name: &str) -> PathBuf {
    env.root.path().join(name)
}

/// Pushes `file` to `target`; the printed `source` and `sha256` values.
fn push(env: &Env, file: &str, target: &str, extra: &[&str], vars: &[(&str, &str)]) -> (String, String) {
    let cache = fresh_cache(env, "push-cache");
    let mut args = vec!["plugin", "push", file, target];
    args.extend_from_slice(extra);
    let run = warden(env, &cache, &args, vars);
    assert_eq!(run.code, 0, "push failed: {}", run.all());
    let value = |key: &str| {
        let line = run.stdout.lines().find(|l| l.starts_with(&format!("{key} = \""))).unwrap_or_else(|| {
            panic!("push printed no {key} line: {}", run.all());
        });
        line.split('"').nth(1).unwrap().to_string()
    };
    (value("source"), value("sha256"))
}

/// warden.toml in the workspace: the testkit as plugin `kit` from `source`, and its `echo` tool.
fn write_policy(env: &Env, source: &str, extra: &str) {
    env.write(
        "warden.toml",
        &format!(
            "version = 1\n[plugins.kit]\nsource = \"{source}\"\n{extra}\n\
             [tools.echo]\nplugin = \"kit\"\ntier = \"auto\"\n"
        ),
    );
}

#[test]
fn a_pushed_component_is_called_by_digest_and_served_from_the_cache() {
    let env = Env::new();
    let registry = Registry::start();
    let (source, sha) = push(&env, TESTKIT, &format!("oci://{}/plugins/kit:0.1.0", registry.authority()), &[], &[]);
    assert!(source.starts_with(&format!("oci://{}/plugins/kit@sha256:", registry.authority())), "{source}");
    assert_eq!(sha, sha256_file(Path::new(TESTKIT)), "the layer is the component's bytes");

    // The registry holds the CNCF Wasm layout, by tag and by digest alike.
    let digest = source.rsplit('@').next().unwrap();
    let (status, body) = registry.get(&format!("/v2/plugins/kit/manifests/{digest}")).unwrap();
    assert_eq!(status, 200);
    assert_eq!(format!("sha256:{}", hex::encode(Sha256::digest(&body))), digest);
    let manifest: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(manifest["config"]["mediaType"], "application/vnd.wasm.config.v0+json");
    assert_eq!(manifest["layers"][0]["mediaType"], "application/wasm");
    assert_eq!(manifest["layers"][0]["digest"], format!("sha256:{sha}"));
    assert_eq!(registry.get("/v2/plugins/kit/manifests/0.1.0").unwrap().1, body);

    // Pinning the component's bytes too (sha256 = the layer digest) is accepted.
    write_policy(&env, &source, &format!("sha256 = \"{sha}\""));
    let cache = fresh_cache(&env, "cache");
    let run = warden(&env, &cache, &["call", "echo", r#"{"a":1}"#], &[]);
    assert_eq!(run.code, 0, "{}", run.all());
    assert!(run.success(), "{}", run.brief());
    let blob = cache.join("oci/blobs/sha256").join(&sha);
    assert_eq!(sha256_file(&blob), sha, "the component is cached under its digest");
    let lock = warden(&env, &cache, &["lock"], &[]);
    assert_eq!(lock.code, 0, "warden lock pins an OCI plugin's tools: {}", lock.all());
    assert!(std::fs::read_to_string(env.ws.join("warden.lock")).unwrap().contains("[plugins.\"kit\"]"));

    // The registry is gone: the cache serves, after hashing the bytes again.
    drop(registry);
    let run = warden(&env, &cache, &["call", "echo", r#"{"a":2}"#], &[]);
    assert!(run.success(), "from the cache: {}", run.all());

    // A cached blob that no longer matches its digest is not used: with the
    // registry gone, the plugin does not load.
    let mut bytes = std::fs::read(&blob).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x01;
    std::fs::write(&blob, &bytes).unwrap();
    let run = warden(&env, &cache, &["call", "echo", r#"{"a":3}"#], &[]);
    assert!(!run.success(), "a changed cache file was used: {}", run.all());
    assert!(run.error_message().contains("cannot connect to 127.0.0.1"), "{}", run.all());
    assert!(run.error_message().contains("plugin kit"), "{}", run.all());
}

#[test]
fn a_flipped_byte_in_the_registry_is_refused_naming_the_digest() {
    let env = Env::new();
    let registry = Registry::start();
    let (source, sha) = push(&env, TESTKIT, &format!("oci://{}/plugins/kit", registry.authority()), &[], &[]);
    let data = registry.blob_file(&format!("sha256:{sha}"));
    let mut bytes = std::fs::read(&data).unwrap();
    let at = bytes.len() / 3;
    bytes[at] ^= 0x01;
    std::fs::write(&data, &bytes).unwrap();
    write_policy(&env, &source, "");
    let run = warden(&env, &fresh_cache(&env, "cache"), &["call", "echo", "{}"], &[]);
    assert_eq!(run.code, 3, "{}", run.all());
    assert_eq!(run.error_code(), "DENIED", "{}", run.all());
    let msg = run.error_message();
    assert!(msg.contains(&format!("sha256:{sha}")) && msg.contains("plugin kit"), "{msg}");
    assert!(msg.contains("not the layer digest"), "{msg}");
}

#[test]
fn a_tag_or_a_missing_digest_is_a_policy_error_naming_source() {
    let env = Env::new();
    for source in ["oci://127.0.0.1:5077/plugins/kit:0.1.0", "oci://127.0.0.1:5077/plugins/kit"] {
        write_policy(&env, source, "");
        let run = warden(&env, &fresh_cache(&env, "cache"), &["policy", "check"], &[]);
        assert_eq!(run.code, 1, "{}", run.all());
        let all = run.all();
        assert!(all.contains("source of [plugins.kit]") && all.contains("digest only"), "{all}");
        assert!(all.contains("oci://127.0.0.1:5077/plugins/kit@sha256:"), "{all}");
        let call = warden(&env, &fresh_cache(&env, "cache"), &["call", "echo", "{}"], &[]);
        assert_eq!(call.code, 2, "{}", call.all());
    }
}

#[test]
fn a_wrong_digest_or_pin_is_refused() {
    let env = Env::new();
    let registry = Registry::start();
    let (source, sha) = push(&env, TESTKIT, &format!("oci://{}/plugins/kit", registry.authority()), &[], &[]);
    // The layer digest where the manifest digest belongs: docker-registry 2.8
    // answers 500 (it cannot read the component as a manifest); refused either way.
    let wrong = format!("oci://{}/plugins/kit@sha256:{sha}", registry.authority());
    write_policy(&env, &wrong, "");
    let run = warden(&env, &fresh_cache(&env, "c1"), &["call", "echo", "{}"], &[]);
    assert!(!run.success(), "{}", run.all());
    assert!(run.error_message().contains(&wrong) && run.error_message().contains("for the manifest"), "{}", run.all());
    // A digest of nothing there.
    let none = format!("oci://{}/plugins/kit@sha256:{}", registry.authority(), "0".repeat(64));
    write_policy(&env, &none, "");
    let run = warden(&env, &fresh_cache(&env, "c2"), &["call", "echo", "{}"], &[]);
    assert!(!run.success() && run.error_message().contains("plugin kit"), "{}", run.all());
    assert!(run.error_message().contains("HTTP 404"), "{}", run.all());
    // The right manifest, but sha256 pins other bytes.
    write_policy(&env, &source, &format!("sha256 = \"{}\"", "1".repeat(64)));
    let run = warden(&env, &fresh_cache(&env, "c3"), &["call", "echo", "{}"], &[]);
    assert_eq!(run.error_code(), "DENIED", "{}", run.all());
    assert!(run.error_message().contains("sha256 mismatch") && run.error_message().contains(&sha), "{}", run.all());
}

#[test]
fn pull_prefetches_and_push_carries_the_signature_annotation() {
    let env = Env::new();
    let registry = Registry::start();
    let sig = env.root.path().join("kit.wasm.sig");
    let armored = "-----BEGIN SSH SIGNATURE-----\nU1NIU0lHAAAAAQ==\n-----END SSH SIGNATURE-----\n";
    std::fs::write(&sig, armored).unwrap();
    let target = format!("oci://{}/plugins/kit:signed", registry.authority());
    let (source, sha) = push(&env, TESTKIT, &target, &["--signature", sig.to_str().unwrap()], &[]);
    let digest = source.rsplit('@').next().unwrap();
    let (_, body) = registry.get(&format!("/v2/plugins/kit/manifests/{digest}")).unwrap();
    let manifest: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(manifest["annotations"]["dev.warden.signature.sshsig"], armored);
    // The same component and signature give the same manifest digest.
    let (again, _) = push(&env, TESTKIT, &target, &["--signature", sig.to_str().unwrap()], &[]);
    assert_eq!(again, source);

    let cache = fresh_cache(&env, "cache");
    let run = warden(&env, &cache, &["plugin", "pull", &source], &[]);
    assert_eq!(run.code, 0, "{}", run.all());
    let path = cache.join("oci/blobs/sha256").join(&sha);
    assert!(run.stdout.contains(&path.display().to_string()) && run.stdout.contains(&sha), "{}", run.stdout);
    assert!(run.stdout.contains("present"), "{}", run.stdout);
    assert_eq!(sha256_file(&path), sha);
    // A tag is refused here too.
    let run = warden(&env, &cache, &["plugin", "pull", &target], &[]);
    assert_eq!(run.code, 2, "{}", run.all());
    assert!(run.stderr.contains("digest only"), "{}", run.all());
    // Not a signature: refused before anything is pushed.
    std::fs::write(&sig, "not armored").unwrap();
    let run = warden(&env, &cache, &["plugin", "push", TESTKIT, &target, "--signature", sig.to_str().unwrap()], &[]);
    assert_eq!(run.code, 2, "{}", run.all());
    assert!(run.stderr.contains("ssh-keygen -Y sign"), "{}", run.all());
}

#[test]
fn cargo_xtask_plugin_push_takes_the_signature_beside_the_file() {
    let env = Env::new();
    let registry = Registry::start();
    let wasm = env.root.path().join("kit.wasm");
    std::fs::copy(TESTKIT, &wasm).unwrap();
    let armored = "-----BEGIN SSH SIGNATURE-----\nU1NIU0lHAAAAAQ==\n-----END SSH SIGNATURE-----\n";
    std::fs::write(env.root.path().join("kit.wasm.sig"), armored).unwrap();
    let target = format!("oci://{}/plugins/kit:0.1.0", registry.authority());
    let out = std::process::Command::new(env!("CARGO"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["run", "--locked", "-q", "-p", "xtask", "--", "plugin", "push"])
        .arg(&wasm)
        .arg(&target)
        .env("WARDEN_BIN", env!("CARGO_BIN_EXE_warden"))
        .env("WARDEN_CACHE_DIR", "")
        .env_remove("RUST_LOG")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    // The same bytes and signature pushed by warden give the same manifest digest.
    let sig = env.root.path().join("kit.wasm.sig");
    let (source, _) = push(&env, wasm.to_str().unwrap(), &target, &["--signature", sig.to_str().unwrap()], &[]);
    assert!(stdout.contains(&format!("source = \"{source}\"")), "{stdout}");
    let digest = source.rsplit('@').next().unwrap();
    let (_, body) = registry.get(&format!("/v2/plugins/kit/manifests/{digest}")).unwrap();
    let manifest: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(manifest["annotations"]["dev.warden.signature.sshsig"], armored);
}
