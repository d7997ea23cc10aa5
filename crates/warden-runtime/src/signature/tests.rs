//! sshsig built here with ring's `Ed25519KeyPair` (the same structure
//! `ssh-keygen -Y sign` writes; tests/signatures.rs checks against ssh-keygen itself).

use super::*;
use ring::signature::{Ed25519KeyPair, KeyPair as _};

const MESSAGE: &[u8] = b"\0asm component bytes";

fn key(seed: u8) -> Ed25519KeyPair {
    Ed25519KeyPair::from_seed_unchecked(&[seed; 32]).unwrap_or_else(|e| panic!("{e}"))
}

fn public_blob(k: &Ed25519KeyPair) -> Vec<u8> {
    let mut blob = Vec::new();
    put_string(&mut blob, b"ssh-ed25519");
    put_string(&mut blob, k.public_key().as_ref());
    blob
}

/// The sshsig blob of `message`, signed by `k` for `namespace` with `hash`.
fn sign_blob(k: &Ed25519KeyPair, message: &[u8], namespace: &str, hash: &str) -> Vec<u8> {
    let digest = if hash == "sha256" { Sha256::digest(message).to_vec() } else { Sha512::digest(message).to_vec() };
    let mut signed = MAGIC.to_vec();
    for part in [namespace.as_bytes(), b"", hash.as_bytes(), &digest] {
        put_string(&mut signed, part);
    }
    let mut sig = Vec::new();
    put_string(&mut sig, b"ssh-ed25519");
    put_string(&mut sig, k.sign(&signed).as_ref());
    let mut blob = MAGIC.to_vec();
    blob.extend_from_slice(&1u32.to_be_bytes());
    for part in [&public_blob(k), namespace.as_bytes(), b"", hash.as_bytes(), &sig] {
        put_string(&mut blob, part);
    }
    blob
}

fn armor(blob: &[u8]) -> String {
    let b64 = STANDARD.encode(blob);
    let lines: Vec<&str> = b64.as_bytes().chunks(70).map(|c| std::str::from_utf8(c).unwrap_or("")).collect();
    format!("{BEGIN}\n{}\n{END}\n", lines.join("\n"))
}

fn line(k: &Ed25519KeyPair, comment: &str) -> String {
    format!("{} {comment}", key_line(&public_blob(k)))
}

#[test]
fn a_listed_key_line_or_fingerprint_accepts_its_signature_with_either_hash() {
    let alice = key(1);
    for hash in ["sha512", "sha256"] {
        let text = armor(&sign_blob(&alice, MESSAGE, NAMESPACE, hash));
        let by_line = verify(MESSAGE, &text, &[line(&alice, "alice@example.com")]);
        let fp = fingerprint(&public_blob(&alice));
        assert_eq!(
            by_line,
            Ok(Verified {
                fingerprint: fp.clone(),
                key: key_line(&public_blob(&alice)),
                comment: Some("alice@example.com".into())
            })
        );
        let by_fp = verify(MESSAGE, &text, std::slice::from_ref(&fp));
        assert_eq!(by_fp.map(|v| (v.fingerprint, v.comment)), Ok((fp, None)));
    }
}

#[test]
fn an_unlisted_key_is_refused_naming_its_fingerprint_and_the_policy_key() {
    let (alice, bob) = (key(1), key(2));
    let text = armor(&sign_blob(&alice, MESSAGE, NAMESPACE, "sha512"));
    let refusal = verify(MESSAGE, &text, &[line(&bob, "bob")]);
    let fp = fingerprint(&public_blob(&alice));
    assert!(matches!(&refusal, Err(Refusal::NotListed { fingerprint, .. }) if *fingerprint == fp), "{refusal:?}");
    let message = refusal.err().map(|r| r.message("hello", "hello.wasm.sig")).unwrap_or_default();
    assert!(message.contains(&fp) && message.contains("signers of [plugins.hello]"), "{message}");
}

#[test]
fn a_flipped_byte_anywhere_is_refused() {
    let alice = key(1);
    let signers = [line(&alice, "alice")];
    let blob = sign_blob(&alice, MESSAGE, NAMESPACE, "sha512");
    // In the message: the signature no longer holds.
    let mut changed = MESSAGE.to_vec();
    changed[5] ^= 1;
    let r = verify(&changed, &armor(&blob), &signers);
    assert!(matches!(r, Err(Refusal::Invalid { .. })), "{r:?}");
    // In the signature blob: every byte matters (a flip in the key makes it unlisted).
    for i in 0..blob.len() {
        let mut bad = blob.clone();
        bad[i] ^= 0x40;
        assert!(verify(MESSAGE, &armor(&bad), &signers).is_err(), "byte {i} flipped was accepted");
    }
}

#[test]
fn another_namespace_trailing_bytes_and_truncation_are_refused() {
    let alice = key(1);
    let signers = [line(&alice, "alice")];
    let git = verify(MESSAGE, &armor(&sign_blob(&alice, MESSAGE, "git", "sha512")), &signers);
    assert!(matches!(&git, Err(Refusal::Invalid { why, .. }) if why.contains("namespace \"git\"")), "{git:?}");
    let blob = sign_blob(&alice, MESSAGE, NAMESPACE, "sha512");
    let mut trailing = blob.clone();
    trailing.push(0);
    let r = verify(MESSAGE, &armor(&trailing), &signers);
    assert!(matches!(&r, Err(Refusal::Malformed(why)) if why.contains("trailing")), "{r:?}");
    for n in 0..blob.len() {
        assert!(Sshsig::parse(&blob[..n]).is_err(), "{n} bytes parsed");
    }
    let md5 = verify(MESSAGE, &armor(&sign_blob(&alice, MESSAGE, NAMESPACE, "md5")), &signers);
    assert!(md5.is_err());
}

#[test]
fn armor_is_bounded_and_strict() {
    let alice = key(1);
    let signers = [line(&alice, "alice")];
    let good = armor(&sign_blob(&alice, MESSAGE, NAMESPACE, "sha512"));
    assert!(parse_armored("").is_err());
    assert!(parse_armored(&format!("junk\n{good}")).is_err());
    assert!(parse_armored(&good.replace(END, "")).is_err());
    assert!(parse_armored(&good.replace("A", "*")).is_err() || !good.contains('A'));
    assert!(parse_armored(&good.repeat(MAX_BLOCKS + 1)).is_err());
    assert!(parse_armored(&" ".repeat(MAX_SIGNATURE_TEXT + 1)).is_err());
    let huge = armor(&vec![0u8; MAX_SIGNATURE_BLOB + 3]);
    assert!(parse_armored(&huge).is_err_and(|e| e.contains("longer")), "an oversized block was decoded");
    // Several blocks: one good one by a listed key suffices, whatever the others are.
    let bob = armor(&sign_blob(&key(2), MESSAGE, NAMESPACE, "sha512"));
    assert!(verify(MESSAGE, &format!("{bob}\n{good}"), &signers).is_ok());
    assert!(verify(MESSAGE, &bob, &signers).is_err());
}

#[test]
fn describe_shows_each_signature_and_whether_it_holds() {
    let (alice, bob) = (key(1), key(2));
    let text = format!(
        "{}{}",
        armor(&sign_blob(&alice, MESSAGE, NAMESPACE, "sha512")),
        armor(&sign_blob(&bob, b"other bytes", NAMESPACE, "sha256"))
    );
    let d = describe(MESSAGE, &text);
    assert_eq!(d.len(), 2);
    assert!(d[0].valid && d[0].key_type == "ssh-ed25519" && d[0].namespace.as_deref() == Some(NAMESPACE));
    assert_eq!(d[0].fingerprint.as_deref(), Some(fingerprint(&public_blob(&alice)).as_str()));
    assert!(!d[1].valid && d[1].problem.is_some());
    let broken = describe(MESSAGE, "not a signature");
    assert!(broken.len() == 1 && !broken[0].valid);
}

#[test]
fn the_fingerprint_is_what_ssh_keygen_prints() {
    // `ssh-keygen -lf` of this key line prints this fingerprint (OpenSSH 9.2).
    let line = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAINtD+pCM+xVz2NBYT7swvKXAmUDOXEaHmSt0CFdw7ev/ alice@example.com";
    let Ok(SignerEntry::Key { blob, .. }) = parse_entry(line) else { panic!("the key line was refused") };
    assert_eq!(fingerprint(&blob), "SHA256:nqPcU8YmihgyFTEKskMn4hXcUbfsTDbjRD9BPFMGm+Y");
}
