//! Who may sign a plugin: one entry of `[plugins.NAME] signers`, either an
//! OpenSSH public key line (`ssh-ed25519 BASE64 [comment]`, what `~/.ssh/*.pub`
//! and `github.com/USER.keys` hold) or a key's fingerprint (`SHA256:…`, what
//! `ssh-keygen -l` prints). Input is the operator's policy text; only ed25519
//! keys are accepted. The signature itself is checked in the runtime crate
//! (`warden_runtime::signature`), which reads keys with [`ed25519_key`].

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD};

/// The only key type accepted.
pub const ED25519: &str = "ssh-ed25519";
/// The longest signer entry (a key line with its comment).
pub const MAX_SIGNER_LEN: usize = 1024;
/// The most entries of one plugin's `signers`.
pub const MAX_SIGNERS: usize = 64;

/// One `signers` entry, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignerEntry {
    /// A public key: its wire blob (`string "ssh-ed25519" || string key`) and comment.
    Key {
        /// The key's blob, as in the key line's base64.
        blob: Vec<u8>,
        /// The key line's comment (often an e-mail address), if any.
        comment: Option<String>,
    },
    /// `SHA256:` + unpadded base64 of the sha256 of a key's blob.
    Fingerprint(String),
}

/// Reads one `signers` entry; the error says what is wrong and what to write.
pub fn parse_entry(entry: &str) -> Result<SignerEntry, String> {
    let entry = entry.trim();
    if entry.len() > MAX_SIGNER_LEN {
        return Err(format!("an entry is longer than {MAX_SIGNER_LEN} bytes"));
    }
    if entry.is_empty() || entry == "*" || entry.eq_ignore_ascii_case("any") {
        return Err(format!(
            "{entry:?} is not a key: warden never accepts any signer; list a public key line \
             (`ssh-ed25519 AAAA… comment`, from KEY.pub) or its fingerprint (`SHA256:…`, `ssh-keygen -lf KEY.pub`)"
        ));
    }
    if let Some(fp) = entry.strip_prefix("SHA256:") {
        let ok = fp.len() == 43 && STANDARD_NO_PAD.decode(fp).is_ok_and(|d| d.len() == 32);
        return if ok {
            Ok(SignerEntry::Fingerprint(entry.to_string()))
        } else {
            Err(format!("{entry:?} is not a SHA256 key fingerprint (`ssh-keygen -lf KEY.pub` prints one)"))
        };
    }
    let mut fields = entry.splitn(3, char::is_whitespace);
    let (kind, b64) = (fields.next().unwrap_or(""), fields.next().unwrap_or("").trim());
    let comment = fields.next().map(str::trim).filter(|c| !c.is_empty()).map(str::to_string);
    if kind != ED25519 {
        return Err(format!(
            "{kind:?} keys are not accepted, only {ED25519}: make an ed25519 key: ssh-keygen -t ed25519 \
             (an entry is `ssh-ed25519 AAAA… comment` or `SHA256:…`)"
        ));
    }
    let blob = STANDARD.decode(b64).map_err(|e| format!("the key of {kind} {b64:?} is not base64: {e}"))?;
    ed25519_key(&blob).map_err(|e| format!("the key {kind} {b64:?} is not an ed25519 public key: {e}"))?;
    Ok(SignerEntry::Key { blob, comment })
}

/// The 32-byte ed25519 key inside a public key blob (`string "ssh-ed25519" ||
/// string key`, nothing after); other key types are refused, naming them.
pub fn ed25519_key(blob: &[u8]) -> Result<[u8; 32], String> {
    let mut r = Wire(blob);
    let kind = r.string()?;
    if kind != ED25519.as_bytes() {
        return Err(format!(
            "a {} key: only {ED25519} is accepted; make an ed25519 key: ssh-keygen -t ed25519",
            String::from_utf8_lossy(kind)
        ));
    }
    let key = r.string()?;
    r.end()?;
    key.try_into().map_err(|_| format!("an ed25519 key is 32 bytes, this one {}", key.len()))
}

/// The key line `ssh-ed25519 BASE64` of a blob (no comment).
pub fn key_line(blob: &[u8]) -> String {
    format!("{ED25519} {}", STANDARD.encode(blob))
}

/// A reader of SSH wire data (RFC 4251 `string`, `uint32`); every read is
/// bounded by what is left.
#[derive(Debug)]
pub struct Wire<'a>(pub &'a [u8]);

impl<'a> Wire<'a> {
    /// `n` raw bytes.
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.0.len() < n {
            return Err(format!("truncated: {n} bytes wanted, {} left", self.0.len()));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    /// A big-endian `uint32`.
    pub fn u32(&mut self) -> Result<u32, String> {
        let b = self.bytes(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A `string`: a `uint32` length, then that many bytes.
    pub fn string(&mut self) -> Result<&'a [u8], String> {
        let n = self.u32()?;
        self.bytes(usize::try_from(n).map_err(|_| "a length does not fit".to_string())?)
    }

    /// Nothing may be left.
    pub fn end(&self) -> Result<(), String> {
        if self.0.is_empty() { Ok(()) } else { Err(format!("{} trailing bytes", self.0.len())) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALICE: &str =
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAINtD+pCM+xVz2NBYT7swvKXAmUDOXEaHmSt0CFdw7ev/ alice@example.com";

    #[test]
    fn a_key_line_and_a_fingerprint_are_read() {
        match parse_entry(ALICE) {
            Ok(SignerEntry::Key { blob, comment }) => {
                assert_eq!(comment.as_deref(), Some("alice@example.com"));
                assert!(ALICE.starts_with(&key_line(&blob)));
            }
            other => panic!("{other:?}"),
        }
        let fp = "SHA256:nqPcU8YmihgyFTEKskMn4hXcUbfsTDbjRD9BPFMGm+Y";
        assert_eq!(parse_entry(fp), Ok(SignerEntry::Fingerprint(fp.into())));
    }

    #[test]
    fn wildcards_other_key_types_and_damaged_keys_are_refused() {
        for bad in ["", "*", "any", "ANY", "SHA256:short", "MD5:aa:bb", "ssh-ed25519 !!!", "ssh-ed25519 AAAA"] {
            assert!(parse_entry(bad).is_err(), "{bad:?} was accepted");
        }
        let rsa = "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQC7 bob@example.com";
        assert!(parse_entry(rsa).is_err_and(|e| e.contains("ssh-keygen -t ed25519")));
        // An ed25519 line whose blob names another type, or has a short key.
        let mut blob = Vec::new();
        for part in [b"ssh-rsa".as_slice(), &[7u8; 32]] {
            blob.extend_from_slice(&(part.len() as u32).to_be_bytes());
            blob.extend_from_slice(part);
        }
        assert!(ed25519_key(&blob).is_err_and(|e| e.contains("ssh-rsa")));
        assert!(parse_entry(&format!("ssh-ed25519 {}", STANDARD.encode(&blob))).is_err());
        let mut ed = Vec::new();
        for part in [ED25519.as_bytes(), &[7u8; 32]] {
            ed.extend_from_slice(&(part.len() as u32).to_be_bytes());
            ed.extend_from_slice(part);
        }
        assert!(ed25519_key(&ed).is_ok());
        assert!(ed25519_key(&ed[..20]).is_err_and(|e| e.contains("truncated")));
        let mut long = ed.clone();
        long.push(0);
        assert!(ed25519_key(&long).is_err_and(|e| e.contains("trailing")));
    }
}
