//! Plugin signatures: OpenSSH `sshsig` (PROTOCOL.sshsig), as `ssh-keygen -Y
//! sign -n warden-plugin FILE` writes them, over the component's own bytes.
//!
//! The armored text is untrusted (it sits beside the component, or comes from
//! a registry): bounded ([`MAX_SIGNATURE_TEXT`], [`MAX_SIGNATURE_BLOB`],
//! [`MAX_BLOCKS`]), parsed strictly (no trailing bytes, namespace
//! [`NAMESPACE`], hash `sha256` or `sha512`, ed25519 keys only) and checked
//! with `ring`. Who may sign is the policy's `signers` (trusted, checked at
//! load by [`crate::policy::signer`]); a text may carry several signatures and
//! is accepted when one of them is by a listed key and holds for the bytes.

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD};
use ring::signature::{ED25519, UnparsedPublicKey};
use serde::Serialize;
use sha2::{Digest, Sha256, Sha512};

use crate::error::ErrorCode;
use crate::policy::PluginSpec;
use crate::policy::signer::{ED25519 as ED25519_NAME, SignerEntry, Wire, ed25519_key, key_line, parse_entry};

mod load;
#[cfg(test)]
mod tests;

pub use load::{check, read_signature_file, signature_text, source_label};

/// The namespace a plugin signature must be made for (`ssh-keygen -n`).
pub const NAMESPACE: &str = "warden-plugin";
/// The largest signature text warden reads (all its armored blocks).
pub const MAX_SIGNATURE_TEXT: usize = 16 << 10;
/// The largest decoded signature (one block).
pub const MAX_SIGNATURE_BLOB: usize = 8 << 10;
/// The most signatures one text may carry.
pub const MAX_BLOCKS: usize = 8;

const BEGIN: &str = "-----BEGIN SSH SIGNATURE-----";
const END: &str = "-----END SSH SIGNATURE-----";
const MAGIC: &[u8] = b"SSHSIG";

/// One signature, parsed (not yet checked).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sshsig {
    /// The signer's public key blob.
    pub public_key: Vec<u8>,
    /// What the signature was made for (`ssh-keygen -n`).
    pub namespace: String,
    /// The reserved field (signed, otherwise unused).
    pub reserved: Vec<u8>,
    /// `sha256` or `sha512` (anything else is refused by [`Sshsig::verify`]).
    pub hash_alg: String,
    /// The signature blob: `string key-type || string raw-signature`.
    pub signature: Vec<u8>,
}

/// A signature that holds for the bytes, by a key the policy lists.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Verified {
    /// `SHA256:…` of the key, as `ssh-keygen -l` prints it.
    pub fingerprint: String,
    /// The key line (`ssh-ed25519 BASE64`, no comment).
    pub key: String,
    /// The comment of the matching `signers` entry, when it was a key line with one.
    pub comment: Option<String>,
}

/// Why no signature was accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The text is not SSH signatures warden reads.
    Malformed(String),
    /// Well formed, but by a key the policy does not list.
    NotListed {
        /// The key's fingerprint.
        fingerprint: String,
        /// The key line.
        key: String,
    },
    /// By a listed key (or at least a readable one), but it does not hold.
    Invalid {
        /// The key's fingerprint.
        fingerprint: String,
        /// What is wrong.
        why: String,
    },
}

impl Refusal {
    /// What to tell a person: `plugin` names `[plugins.NAME]`, `place` where the signature came from.
    pub fn message(&self, plugin: &str, place: &str) -> String {
        match self {
            Refusal::Malformed(why) => format!(
                "{place} is not an SSH signature warden reads ({why}); sign the component with `cargo xtask \
                 plugin sign` (ssh-keygen -Y sign -n {NAMESPACE})"
            ),
            Refusal::NotListed { fingerprint, key } => format!(
                "signed by {fingerprint} ({key}), a key that signers of [plugins.{plugin}] do not list; add it \
                 to signers of [plugins.{plugin}] only if you trust it"
            ),
            Refusal::Invalid { fingerprint, why } => format!(
                "the signature by {fingerprint} does not verify for these bytes ({why}); the component was \
                 changed after it was signed, or the signature is for another file"
            ),
        }
    }
}

/// `SHA256:` + unpadded base64 of the sha256 of a public key blob.
pub fn fingerprint(public_key: &[u8]) -> String {
    format!("SHA256:{}", STANDARD_NO_PAD.encode(Sha256::digest(public_key)))
}

/// The decoded blobs of each armored block of `text`; anything but blank
/// lines outside the blocks is refused.
pub fn parse_armored(text: &str) -> Result<Vec<Vec<u8>>, String> {
    if text.len() > MAX_SIGNATURE_TEXT {
        return Err(format!("larger than {MAX_SIGNATURE_TEXT} bytes"));
    }
    let mut blobs = Vec::new();
    let mut body: Option<String> = None;
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        let Some(b) = body.as_mut() else {
            match line {
                "" => {}
                BEGIN => body = Some(String::new()),
                _ => return Err(format!("line {}: text outside a {BEGIN} block", n + 1)),
            }
            continue;
        };
        match line {
            BEGIN => return Err(format!("line {}: a block starts inside a block", n + 1)),
            END => {
                if blobs.len() == MAX_BLOCKS {
                    return Err(format!("more than {MAX_BLOCKS} signatures"));
                }
                if b.len() > MAX_SIGNATURE_BLOB / 3 * 4 + 4 {
                    return Err(format!("a signature longer than {MAX_SIGNATURE_BLOB} bytes"));
                }
                let blob = STANDARD.decode(b.as_bytes()).map_err(|e| format!("line {}: not base64: {e}", n + 1))?;
                blobs.push(blob);
                body = None;
            }
            _ => b.push_str(line),
        }
    }
    if body.is_some() {
        return Err(format!("a block without its {END} line"));
    }
    if blobs.is_empty() {
        return Err(format!("no {BEGIN} block"));
    }
    Ok(blobs)
}

impl Sshsig {
    /// Reads a decoded signature: magic, version 1, the five strings, nothing after.
    pub fn parse(blob: &[u8]) -> Result<Sshsig, String> {
        if blob.len() > MAX_SIGNATURE_BLOB {
            return Err(format!("a signature longer than {MAX_SIGNATURE_BLOB} bytes"));
        }
        let mut r = Wire(blob);
        if r.bytes(MAGIC.len()).ok() != Some(MAGIC) {
            return Err("no SSHSIG magic".into());
        }
        let version = r.u32()?;
        if version != 1 {
            return Err(format!("sshsig version {version} (warden reads 1)"));
        }
        let text = |b: &[u8], what: &str| String::from_utf8(b.to_vec()).map_err(|_| format!("{what} is not text"));
        let public_key = r.string()?.to_vec();
        let namespace = text(r.string()?, "the namespace")?;
        let reserved = r.string()?.to_vec();
        let hash_alg = text(r.string()?, "the hash algorithm")?;
        let signature = r.string()?.to_vec();
        r.end()?;
        Ok(Sshsig { public_key, namespace, reserved, hash_alg, signature })
    }

    /// The key type named in the public key blob (`?` when unreadable).
    pub fn key_type(&self) -> String {
        Wire(&self.public_key).string().map_or_else(|_| "?".into(), |t| String::from_utf8_lossy(t).into_owned())
    }

    /// Whether it is a `warden-plugin` ed25519 signature that holds for `message`.
    pub fn verify(&self, message: &[u8]) -> Result<(), String> {
        if self.namespace != NAMESPACE {
            return Err(format!(
                "it was made for namespace {:?}, not {NAMESPACE:?}: sign with -n {NAMESPACE}",
                self.namespace
            ));
        }
        let key = ed25519_key(&self.public_key)?;
        let digest: Vec<u8> = match self.hash_alg.as_str() {
            "sha256" => Sha256::digest(message).to_vec(),
            "sha512" => Sha512::digest(message).to_vec(),
            other => return Err(format!("hash {other:?}: sha256 or sha512")),
        };
        let mut sig = Wire(&self.signature);
        let kind = sig.string()?;
        if kind != ED25519_NAME.as_bytes() {
            return Err(format!("a {} signature from an {ED25519_NAME} key", String::from_utf8_lossy(kind)));
        }
        let raw = sig.string()?;
        sig.end()?;
        let mut signed = MAGIC.to_vec();
        for part in [self.namespace.as_bytes(), &self.reserved, self.hash_alg.as_bytes(), &digest] {
            put_string(&mut signed, part);
        }
        UnparsedPublicKey::new(&ED25519, key)
            .verify(&signed, raw)
            .map_err(|_| "the ed25519 signature does not match".to_string())
    }
}

/// Appends an SSH `string`.
pub(crate) fn put_string(out: &mut Vec<u8>, part: &[u8]) {
    out.extend_from_slice(&u32::try_from(part.len()).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(part);
}

/// Whether `key` is listed in `signers`; the matching entry's comment.
fn listed(signers: &[SignerEntry], key: &[u8], fp: &str) -> Option<Option<String>> {
    signers.iter().find_map(|s| match s {
        SignerEntry::Key { blob, comment } if blob == key => Some(comment.clone()),
        SignerEntry::Fingerprint(f) if f == fp => Some(None),
        _ => None,
    })
}

/// Accepts `armored` for `bytes` when one of its signatures is by a key of
/// `signers` (key lines or fingerprints, as the policy holds them) and holds;
/// otherwise the most telling refusal: a listed key's failed signature, then
/// an unlisted key, then why the text cannot be read.
pub fn verify(bytes: &[u8], armored: &str, signers: &[String]) -> Result<Verified, Refusal> {
    let entries: Vec<SignerEntry> = signers.iter().filter_map(|s| parse_entry(s).ok()).collect();
    let blobs = parse_armored(armored).map_err(Refusal::Malformed)?;
    let (mut invalid, mut unlisted, mut malformed) = (None, None, None);
    for blob in blobs {
        let sig = match Sshsig::parse(&blob) {
            Ok(sig) => sig,
            Err(why) => {
                malformed.get_or_insert(Refusal::Malformed(why));
                continue;
            }
        };
        let fp = fingerprint(&sig.public_key);
        let Some(comment) = listed(&entries, &sig.public_key, &fp) else {
            match ed25519_key(&sig.public_key) {
                Ok(_) => unlisted.get_or_insert(Refusal::NotListed { fingerprint: fp, key: key_line(&sig.public_key) }),
                Err(why) => invalid.get_or_insert(Refusal::Invalid { fingerprint: fp, why }),
            };
            continue;
        };
        match sig.verify(bytes) {
            Ok(()) => return Ok(Verified { fingerprint: fp, key: key_line(&sig.public_key), comment }),
            Err(why) => {
                invalid.get_or_insert(Refusal::Invalid { fingerprint: fp, why });
            }
        }
    }
    Err(invalid.or(unlisted).or(malformed).unwrap_or_else(|| Refusal::Malformed("no signature".into())))
}

/// One signature of a text, as `warden plugin inspect` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Described {
    /// `ssh-ed25519`, or what the blob names.
    pub key_type: String,
    /// `SHA256:…` of the key (absent when the signature cannot be read).
    pub fingerprint: Option<String>,
    /// The key line, for an ed25519 key.
    pub key: Option<String>,
    /// The namespace it was made for.
    pub namespace: Option<String>,
    /// Its hash algorithm.
    pub hash: Option<String>,
    /// Whether it holds for these bytes (and is a `warden-plugin` signature).
    pub valid: bool,
    /// Why not, when it does not.
    pub problem: Option<String>,
}

/// Each signature of `armored` and whether it holds for `bytes`; who is
/// trusted is the policy's call, not this one's. An unreadable text is one
/// entry saying why.
pub fn describe(bytes: &[u8], armored: &str) -> Vec<Described> {
    let unreadable = |why: String| Described {
        key_type: "?".into(),
        fingerprint: None,
        key: None,
        namespace: None,
        hash: None,
        valid: false,
        problem: Some(why),
    };
    let blobs = match parse_armored(armored) {
        Ok(b) => b,
        Err(why) => return vec![unreadable(why)],
    };
    blobs
        .iter()
        .map(|blob| match Sshsig::parse(blob) {
            Err(why) => unreadable(why),
            Ok(sig) => {
                let check = sig.verify(bytes);
                Described {
                    key_type: sig.key_type(),
                    fingerprint: Some(fingerprint(&sig.public_key)),
                    key: ed25519_key(&sig.public_key).ok().map(|_| key_line(&sig.public_key)),
                    namespace: Some(sig.namespace.clone()),
                    hash: Some(sig.hash_alg.clone()),
                    valid: check.is_ok(),
                    problem: check.err(),
                }
            }
        })
        .collect()
}

/// Where `spec`'s signature text is read from, for messages.
pub(crate) fn place(spec: &PluginSpec) -> String {
    if let crate::policy::PluginSource::Oci(r) = &spec.source {
        return format!("the dev.warden.signature.sshsig annotation of {r}'s manifest");
    }
    spec.signature.as_ref().map_or_else(|| "the signature".into(), |p| p.display().to_string())
}

/// The error code of every signature refusal.
pub(crate) const REFUSED: ErrorCode = ErrorCode::Denied;
