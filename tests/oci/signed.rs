//! Signed components from a registry: the signature travels in the manifest's
//! `dev.warden.signature.sshsig` annotation (made by `ssh-keygen -Y sign -n
//! warden-plugin`), and `signers` of `[plugins.X]` decides whom to accept.

use std::path::Path;
use std::process::Command;

use super::util::Env;
use super::util::registry::Registry;
use super::{TESTKIT, fresh_cache, push, warden, write_policy};

/// An ed25519 key `name` in `dir`; its public key line.
fn keygen(dir: &Path, name: &str) -> String {
    let out = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", &format!("{name}@example.com"), "-f"])
        .arg(dir.join(name))
        .output()
        .expect("ssh-keygen is needed");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    std::fs::read_to_string(dir.join(format!("{name}.pub"))).unwrap().trim().to_string()
}

/// `ssh-keygen -Y sign` of `file` with `key`: writes `file.sig`.
fn sign(key: &Path, file: &Path) {
    let out = Command::new("ssh-keygen")
        .args(["-Y", "sign", "-n", "warden-plugin", "-f"])
        .arg(key)
        .arg(file)
        .output()
        .expect("ssh-keygen is needed");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn signers_decide_whom_to_accept_for_an_oci_component() {
    let env = Env::new();
    let registry = Registry::start();
    let keys = env.root.path();
    let alice = keygen(keys, "alice");
    let bob = keygen(keys, "bob");
    let wasm = keys.join("kit.wasm");
    std::fs::copy(TESTKIT, &wasm).unwrap();
    sign(&keys.join("alice"), &wasm);
    let sig = keys.join("kit.wasm.sig");
    let signed_target = format!("oci://{}/plugins/kit:signed", registry.authority());
    let (signed, _) = push(&env, wasm.to_str().unwrap(), &signed_target, &["--signature", sig.to_str().unwrap()], &[]);
    let unsigned_target = format!("oci://{}/plugins/kit:unsigned", registry.authority());
    let (unsigned, _) = push(&env, wasm.to_str().unwrap(), &unsigned_target, &[], &[]);
    assert_ne!(signed, unsigned, "the annotation is part of the manifest");

    // Signed by a listed key: loads.
    write_policy(&env, &signed, &format!("signers = [\"{alice}\"]"));
    let run = warden(&env, &fresh_cache(&env, "c1"), &["call", "echo", "{}"], &[]);
    assert!(run.success(), "{}", run.all());

    // Signed by a key the policy does not list: refused, naming signers.
    write_policy(&env, &signed, &format!("signers = [\"{bob}\"]"));
    let run = warden(&env, &fresh_cache(&env, "c2"), &["call", "echo", "{}"], &[]);
    assert_eq!(run.error_code(), "DENIED", "{}", run.all());
    assert!(run.error_message().contains("signers"), "{}", run.all());

    // No annotation while signers are listed: refused, naming signers.
    write_policy(&env, &unsigned, &format!("signers = [\"{alice}\"]"));
    let run = warden(&env, &fresh_cache(&env, "c3"), &["call", "echo", "{}"], &[]);
    assert_eq!(run.error_code(), "DENIED", "{}", run.all());
    assert!(run.error_message().contains("signers"), "{}", run.all());
}
