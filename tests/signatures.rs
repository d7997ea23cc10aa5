//! Plugin signatures as an operator meets them: keys made and components
//! signed by the real `ssh-keygen` (`-Y sign -n warden-plugin`), a real
//! component (the testkit), the real warden binary. Each refusal is checked for
//! its exit code, error code and a message naming `signers` of `[plugins.kit]`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod util;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;
use sha2::{Digest, Sha256};
use util::{Env, Run};

const TESTKIT: &str = warden::runtime::builtin::TESTKIT_WASM;

/// A key pair made by ssh-keygen, and what `ssh-keygen -l` says of it.
struct Key {
    private: PathBuf,
    line: String,
    fingerprint: String,
}

fn ssh_keygen(args: &[&str], stdin: Option<&Path>) -> Output {
    let mut c = Command::new("ssh-keygen");
    c.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
    c.stdin(match stdin {
        Some(p) => Stdio::from(std::fs::File::open(p).unwrap()),
        None => Stdio::null(),
    });
    c.output().unwrap_or_else(|e| panic!("ssh-keygen cannot run ({e}): apt-get install openssh-client"))
}

fn key(dir: &Path, name: &str) -> Key {
    let private = dir.join(name);
    let comment = format!("{name}@example.com");
    let out = ssh_keygen(&["-q", "-t", "ed25519", "-N", "", "-C", &comment, "-f", private.to_str().unwrap()], None);
    assert!(out.status.success(), "ssh-keygen: {}", String::from_utf8_lossy(&out.stderr));
    let public = dir.join(format!("{name}.pub"));
    let line = std::fs::read_to_string(&public).unwrap().trim().to_string();
    let listed = ssh_keygen(&["-l", "-f", public.to_str().unwrap()], None);
    let fingerprint = String::from_utf8_lossy(&listed.stdout).split_whitespace().nth(1).unwrap().to_string();
    assert!(fingerprint.starts_with("SHA256:"), "{fingerprint}");
    Key { private, line, fingerprint }
}

/// `ssh-keygen -Y sign -n NAMESPACE` of `file`: the armored signature.
fn sign(key: &Key, file: &Path, namespace: &str) -> String {
    let out = ssh_keygen(&["-q", "-Y", "sign", "-n", namespace, "-f", key.private.to_str().unwrap(), "-"], Some(file));
    assert!(out.status.success(), "ssh-keygen -Y sign: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// A directory outside the workspace with the component (`kit.wasm`), its
/// policy (`warden.toml`) and two keys.
struct Scene {
    env: Env,
    dir: PathBuf,
    wasm: PathBuf,
    policy: PathBuf,
    alice: Key,
    bob: Key,
}

impl Scene {
    fn new() -> Scene {
        let env = Env::new();
        let dir = env.root.path().canonicalize().unwrap().join("plugin");
        std::fs::create_dir_all(&dir).unwrap();
        let wasm = dir.join("kit.wasm");
        std::fs::copy(TESTKIT, &wasm).unwrap();
        let (alice, bob) = (key(&dir, "alice"), key(&dir, "bob"));
        let policy = dir.join("warden.toml");
        Scene { env, dir, wasm, policy, alice, bob }
    }

    fn sha256(&self) -> String {
        hex::encode(Sha256::digest(std::fs::read(&self.wasm).unwrap()))
    }

    /// `[plugins.kit]` with `extra` (signers, signature) and one tool.
    fn write_policy(&self, extra: &str) {
        let text = format!(
            "version = 1\n[plugins.kit]\nsource = \"kit.wasm\"\nsha256 = \"{}\"\n{extra}\n\
             [tools.echo]\nplugin = \"kit\"\ntier = \"auto\"\n",
            self.sha256()
        );
        std::fs::write(&self.policy, text).unwrap();
    }

    fn signers(keys: &[&str]) -> String {
        let quoted: Vec<String> = keys.iter().map(|k| Value::from(*k).to_string()).collect();
        format!("signers = [{}]", quoted.join(", "))
    }

    fn warden(&self, args: &[&str]) -> Run {
        let mut all = vec!["--policy", self.policy.to_str().unwrap()];
        all.extend_from_slice(args);
        self.env.run(&all)
    }

    fn call(&self) -> Run {
        self.warden(&["call", "echo", "{\"hello\": 1}"])
    }
}

/// A refusal of the plugin: DENIED, exit 3, the message naming what to change.
fn assert_denied(run: &Run, words: &[&str]) {
    assert_eq!(run.error_code(), "DENIED", "{}", run.brief());
    assert_eq!(run.code, 3, "{}", run.brief());
    let message = run.error_message();
    for w in words {
        assert!(message.contains(w), "{w:?} not in {message}");
    }
}

#[test]
fn a_component_signed_by_a_listed_key_runs_and_its_record_names_the_signer() {
    let s = Scene::new();
    std::fs::write(s.dir.join("kit.wasm.sig"), sign(&s.alice, &s.wasm, "warden-plugin")).unwrap();
    for entry in [s.alice.line.as_str(), s.alice.fingerprint.as_str()] {
        s.write_policy(&Scene::signers(&[entry]));
        let run = s.call();
        assert!(run.success(), "{}", run.brief());
        let records = s.env.audit_records();
        let component = &records.last().unwrap()["component"];
        assert_eq!(component["plugin"], "kit", "{component}");
        assert_eq!(component["signer"], s.alice.fingerprint.as_str(), "{component}");
        assert_eq!(component["sha256"], s.sha256().as_str(), "{component}");
        assert_eq!(component["source"], format!("file:{}", s.wasm.display()).as_str(), "{component}");
    }
    // ssh-keygen agrees with warden about the same signature.
    let allowed = s.dir.join("allowed_signers");
    std::fs::write(&allowed, format!("alice@example.com {}\n", s.alice.line)).unwrap();
    let sig = s.dir.join("kit.wasm.sig");
    let verify = ssh_keygen(
        &["-Y", "verify", "-f", allowed.to_str().unwrap(), "-I", "alice@example.com", "-n", "warden-plugin", "-s"]
            .into_iter()
            .chain([sig.to_str().unwrap()])
            .collect::<Vec<_>>(),
        Some(&s.wasm),
    );
    let said = String::from_utf8_lossy(&verify.stdout);
    assert!(verify.status.success() && said.contains(&s.alice.fingerprint), "{said}");
    // Unsigned calls of a plugin without signers carry a null signer.
    std::fs::remove_file(&sig).unwrap();
    s.write_policy("");
    assert!(s.call().success());
    assert_eq!(s.env.audit_records().last().unwrap()["component"]["signer"], Value::Null);
}

#[test]
fn a_key_the_policy_does_not_list_is_denied_naming_its_fingerprint() {
    let s = Scene::new();
    std::fs::write(s.dir.join("kit.wasm.sig"), sign(&s.alice, &s.wasm, "warden-plugin")).unwrap();
    s.write_policy(&Scene::signers(&[&s.bob.line]));
    assert_denied(&s.call(), &[&s.alice.fingerprint, "signers of [plugins.kit]", "plugin kit ("]);
    // Signed for git, not for warden: a listed key, but not a plugin signature.
    std::fs::write(s.dir.join("kit.wasm.sig"), sign(&s.alice, &s.wasm, "git")).unwrap();
    s.write_policy(&Scene::signers(&[&s.alice.line]));
    assert_denied(&s.call(), &["does not verify", "namespace \"git\""]);
}

#[test]
fn a_flipped_byte_with_its_sha256_updated_is_caught_by_the_signature() {
    let s = Scene::new();
    std::fs::write(s.dir.join("kit.wasm.sig"), sign(&s.alice, &s.wasm, "warden-plugin")).unwrap();
    let mut bytes = std::fs::read(&s.wasm).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x01;
    std::fs::write(&s.wasm, &bytes).unwrap();
    // The pin is updated to the new bytes: only the signature can tell.
    s.write_policy(&Scene::signers(&[&s.alice.line]));
    assert_denied(&s.call(), &[&format!("the signature by {} does not verify for these bytes", s.alice.fingerprint)]);
}

#[test]
fn an_unsigned_component_is_denied_when_signers_are_listed() {
    let s = Scene::new();
    s.write_policy(&Scene::signers(&[&s.alice.line]));
    let missing = s.dir.join("kit.wasm.sig");
    assert_denied(
        &s.call(),
        &[
            &format!("no signature: {} is missing", missing.display()),
            "cargo xtask plugin sign",
            "remove signers from [plugins.kit]",
        ],
    );
    // `signature` names another file, relative to the policy.
    std::fs::write(s.dir.join("elsewhere.sig"), sign(&s.alice, &s.wasm, "warden-plugin")).unwrap();
    s.write_policy(&format!("{}\nsignature = \"elsewhere.sig\"", Scene::signers(&[&s.alice.line])));
    assert!(s.call().success());
}

#[test]
fn empty_wildcard_and_malformed_signers_are_policy_errors() {
    let s = Scene::new();
    let cases = [
        ("signers = []", "signers of [plugins.kit]"),
        ("signers = [\"*\"]", "never accepts any signer"),
        ("signers = [\"any\"]", "never accepts any signer"),
        ("signers = [\"ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQ bob\"]", "ssh-keygen -t ed25519"),
        ("signers = [\"SHA256:short\"]", "signers of [plugins.kit]"),
        ("signature = \"kit.wasm.sig\"", "`signature` without `signers`"),
    ];
    for (extra, words) in cases {
        s.write_policy(extra);
        let run = s.warden(&["policy", "check"]);
        assert_eq!(run.code, 1, "{extra}: {}", run.brief());
        assert!(run.all().contains(words), "{extra}: {words:?} not in {}", run.all());
        let call = s.call();
        assert_ne!(call.code, 0, "{extra}: {}", call.brief());
    }
    std::fs::write(
        &s.policy,
        format!("version = 1\n[plugins.files]\nsource = \"builtin:fs\"\n{}\n", Scene::signers(&[&s.alice.line])),
    )
    .unwrap();
    assert!(s.warden(&["policy", "check"]).all().contains("take no `signers`"));
}

#[test]
fn inspect_shows_each_signature_and_whether_it_holds() {
    let s = Scene::new();
    let sig = s.dir.join("kit.wasm.sig");
    std::fs::write(&sig, sign(&s.alice, &s.wasm, "warden-plugin")).unwrap();
    let wasm = s.wasm.to_str().unwrap();
    let text = s.warden(&["plugin", "inspect", wasm]);
    assert_eq!(text.code, 0, "{}", text.brief());
    assert!(
        text.stdout.contains(&s.alice.fingerprint) && text.stdout.contains("valid for these bytes"),
        "{}",
        text.stdout
    );
    let json = s.warden(&["plugin", "inspect", "--json", wasm]).json();
    let first = &json["signatures"]["signatures"][0];
    assert_eq!(first["fingerprint"], s.alice.fingerprint.as_str(), "{json}");
    assert_eq!((first["valid"].clone(), first["namespace"].clone()), (Value::Bool(true), Value::from("warden-plugin")));
    assert!(s.alice.line.starts_with(first["key"].as_str().unwrap()), "{json}");
    // Another file's signature: shown, invalid, exit 1.
    let other = s.dir.join("other.sig");
    std::fs::write(&other, sign(&s.bob, &s.dir.join("bob.pub"), "warden-plugin")).unwrap();
    let run = s.warden(&["plugin", "inspect", "--json", "--signature", other.to_str().unwrap(), wasm]);
    assert_eq!(run.code, 1, "{}", run.brief());
    assert_eq!(run.json()["signatures"]["signatures"][0]["valid"], false);
}

#[test]
fn warden_lock_records_the_signer_and_refuses_another_one() {
    let s = Scene::new();
    let both = format!("{}{}", sign(&s.alice, &s.wasm, "warden-plugin"), sign(&s.bob, &s.wasm, "warden-plugin"));
    std::fs::write(s.dir.join("kit.wasm.sig"), both).unwrap();
    s.write_policy(&Scene::signers(&[&s.alice.line]));
    let locked = s.warden(&["lock"]);
    assert_eq!(locked.code, 0, "{}", locked.brief());
    let lock = std::fs::read_to_string(s.dir.join("warden.lock")).unwrap();
    assert!(lock.contains("[provenance.plugins.\"kit\"]"), "{lock}");
    assert!(lock.contains(&format!("signer = \"{}\"", s.alice.fingerprint)), "{lock}");
    assert!(lock.contains(&format!("sha256 = \"{}\"", s.sha256())), "{lock}");
    assert!(s.call().success());
    // The policy now trusts bob instead: the same bytes, another signer than the lock accepted.
    s.write_policy(&Scene::signers(&[&s.bob.line]));
    assert_denied(&s.call(), &[&s.bob.fingerprint, &s.alice.fingerprint, "review, then `warden lock`"]);
    assert_eq!(s.warden(&["lock", "--check"]).code, 1);
    assert_eq!(s.warden(&["lock"]).code, 0);
    assert!(s.call().success());
}

#[test]
fn audit_lists_provenance_and_flags_an_unsigned_third_party_plugin() {
    let s = Scene::new();
    s.write_policy("");
    let run = s.warden(&["audit", "--no-self-test", "--format", "json", "--fail-on", "never"]);
    let doc = run.json();
    let findings = doc["findings"].as_array().unwrap();
    assert!(
        findings.iter().any(|f| f["rule"] == "WL121" && f["message"].as_str().unwrap().contains("plugin kit")),
        "{doc}"
    );
    let provenance = doc["provenance"].as_array().unwrap();
    let kit = provenance.iter().find(|p| p["plugin"] == "kit").unwrap();
    assert_eq!(kit["sha256"], s.sha256().as_str());
    assert_eq!(kit["signer"], Value::Null);
    // Signed and listed: no WL121, and the signer is in the table.
    std::fs::write(s.dir.join("kit.wasm.sig"), sign(&s.alice, &s.wasm, "warden-plugin")).unwrap();
    s.write_policy(&Scene::signers(&[&s.alice.line]));
    let doc = s.warden(&["audit", "--no-self-test", "--format", "json", "--fail-on", "never"]).json();
    assert!(!doc["findings"].as_array().unwrap().iter().any(|f| f["rule"] == "WL121"), "{doc}");
    let kit = doc["provenance"].as_array().unwrap().iter().find(|p| p["plugin"] == "kit").cloned().unwrap();
    assert_eq!(kit["signer"], s.alice.fingerprint.as_str(), "{kit}");
    let text = s.warden(&["audit", "--no-self-test", "--fail-on", "never"]).stdout;
    assert!(text.contains("PROVENANCE") && text.contains(&s.alice.fingerprint), "{text}");
}

#[test]
fn audit_flags_network_imports_no_tool_of_the_plugin_is_granted() {
    // The testkit imports wasi:sockets (its tools probe the network).
    let s = Scene::new();
    let wl122 = |doc: &Value| {
        doc["findings"].as_array().unwrap().iter().find(|f| f["rule"] == "WL122").map(|f| f["message"].to_string())
    };
    s.write_policy("");
    let doc = s.warden(&["audit", "--no-self-test", "--format", "json", "--fail-on", "never"]).json();
    let message = wl122(&doc).unwrap_or_else(|| panic!("no WL122: {doc}"));
    assert!(message.contains("plugin kit") && message.contains("wasi:sockets/"), "{message}");
    std::fs::write(
        &s.policy,
        format!("{}net.connect = [\"example.com:443\"]\n", std::fs::read_to_string(&s.policy).unwrap()),
    )
    .unwrap();
    let doc = s.warden(&["audit", "--no-self-test", "--format", "json", "--fail-on", "never"]).json();
    assert_eq!(wl122(&doc), None, "{doc}");
}

fn xtask(args: &[&str]) -> Output {
    util::xtask_plugin(args)
}

#[test]
fn xtask_plugin_sign_writes_a_signature_warden_accepts_and_prints_the_signers_line() {
    let s = Scene::new();
    let (wasm, key) = (s.wasm.to_str().unwrap(), s.alice.private.to_str().unwrap());
    let out = xtask(&["sign", wasm, "--key", key]);
    assert!(out.status.success());
    let printed = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert_eq!(printed, format!("signers = [{}]", Value::from(s.alice.line.as_str())));
    // The printed line, pasted into the policy, loads the plugin.
    s.write_policy(&printed);
    let run = s.call();
    assert!(run.success(), "{}", run.brief());
    // An RSA key is refused with what to do; no signature file is left behind by a failed run.
    let rsa = s.dir.join("rsa");
    let made = ssh_keygen(&["-q", "-t", "rsa", "-b", "2048", "-N", "", "-f", rsa.to_str().unwrap()], None);
    assert!(made.status.success());
    let other = s.dir.join("other.wasm");
    std::fs::copy(&s.wasm, &other).unwrap();
    let out = xtask(&["sign", other.to_str().unwrap(), "--key", rsa.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("ssh-keygen -t ed25519"));
    assert!(!s.dir.join("other.wasm.sig").exists() && !s.dir.join("other.wasm.sig.new").exists());
    // Without --key: usage.
    assert!(!xtask(&["sign", wasm]).status.success());
}
