//! `oci://HOST[:PORT]/REPO@sha256:HEX` references: parsed and checked here
//! (host, repository name grammar of the OCI distribution spec, digest), so a
//! policy that loads names exactly one manifest. Tags name nothing fixed and
//! are refused in a policy; `warden plugin push` alone accepts one.

use std::fmt;

/// The most characters of a repository name (the distribution spec's limit).
const MAX_REPOSITORY: usize = 255;
/// The most characters of a registry host with its port.
const MAX_HOST: usize = 255;

/// A plugin published in an OCI registry, named by its manifest's digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OciRef {
    /// `HOST[:PORT]`, as written (`[::1]:5000` keeps its brackets).
    pub registry: String,
    /// The repository (`plugins/hello`).
    pub repository: String,
    /// The manifest digest: `sha256:` and 64 lowercase hexadecimal digits.
    pub digest: String,
}

impl fmt::Display for OciRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "oci://{}/{}@{}", self.registry, self.repository, self.digest)
    }
}

/// What follows the repository in a reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OciTag {
    /// `@sha256:HEX`.
    Digest(String),
    /// `:TAG`.
    Tag(String),
    /// Nothing.
    None,
}

/// A reference as `warden plugin push` takes it: a digest, a tag or neither.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OciTarget {
    /// `HOST[:PORT]`.
    pub registry: String,
    /// The repository.
    pub repository: String,
    /// Its tag or digest, if any.
    pub reference: OciTag,
}

impl OciTarget {
    /// Parses `oci://HOST[:PORT]/REPO[:TAG|@sha256:HEX]`.
    pub fn parse(text: &str) -> Result<OciTarget, String> {
        let rest = text.strip_prefix("oci://").ok_or("an OCI reference starts with oci://")?;
        let (registry, path) = rest.split_once('/').ok_or("no repository after the host (oci://HOST/REPO…)")?;
        check_host(registry)?;
        let (name, reference) = match path.split_once('@') {
            Some((name, digest)) => {
                check_digest(digest)?;
                if last_segment(name).contains(':') {
                    return Err("both a tag and a digest: keep the digest alone (…@sha256:…)".into());
                }
                (name, OciTag::Digest(digest.to_string()))
            }
            None => match path.rsplit_once(':') {
                Some((name, tag)) if !tag.contains('/') => {
                    check_tag(tag)?;
                    (name, OciTag::Tag(tag.to_string()))
                }
                _ => (path, OciTag::None),
            },
        };
        check_repository(name)?;
        Ok(OciTarget { registry: registry.to_string(), repository: name.to_string(), reference })
    }
}

impl OciRef {
    /// Parses `oci://HOST[:PORT]/REPO@sha256:HEX`; a tag or a missing digest is an error.
    pub fn parse(text: &str) -> Result<OciRef, String> {
        let t = OciTarget::parse(text)?;
        match t.reference {
            OciTag::Digest(digest) => Ok(OciRef { registry: t.registry, repository: t.repository, digest }),
            OciTag::Tag(tag) => Err(format!(
                "it names the tag {tag:?}, and a tag can be moved to other bytes; warden fetches by digest only: \
                 write oci://{}/{}@sha256:… (`cargo xtask plugin push` and `warden plugin push` print it)",
                t.registry, t.repository
            )),
            OciTag::None => Err(format!(
                "it names no digest; warden fetches by digest only: write oci://{}/{}@sha256:… \
                 (`cargo xtask plugin push` and `warden plugin push` print it)",
                t.registry, t.repository
            )),
        }
    }

    /// The host without its port or brackets (`127.0.0.1`, `::1`, `registry.example`).
    pub fn host(&self) -> &str {
        host_of(&self.registry)
    }
}

/// The host of `HOST[:PORT]` without port or brackets.
pub fn host_of(registry: &str) -> &str {
    if let Some(rest) = registry.strip_prefix('[') {
        return rest.split_once(']').map_or(rest, |(h, _)| h);
    }
    registry.split_once(':').map_or(registry, |(h, _)| h)
}

fn last_segment(name: &str) -> &str {
    name.rsplit('/').next().unwrap_or(name)
}

/// `HOST[:PORT]`: DNS labels, an IPv4 address or a bracketed IPv6 address, and a port 1..65535.
fn check_host(registry: &str) -> Result<(), String> {
    if registry.is_empty() || registry.len() > MAX_HOST {
        return Err(format!("the registry host must be 1 to {MAX_HOST} characters"));
    }
    let (host, port) = if let Some(rest) = registry.strip_prefix('[') {
        let (ip, after) = rest.split_once(']').ok_or("an IPv6 host needs its closing ]")?;
        ip.parse::<std::net::Ipv6Addr>().map_err(|_| format!("{ip:?} is not an IPv6 address"))?;
        let port = match after {
            "" => None,
            _ => Some(after.strip_prefix(':').ok_or_else(|| format!("{registry:?}: only :PORT may follow ]"))?),
        };
        (ip, port)
    } else {
        match registry.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (registry, None),
        }
    };
    if let Some(p) = port
        && !matches!(p.parse::<u16>(), Ok(n) if n > 0 && p.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err(format!("{registry:?}: the port must be a number from 1 to 65535"));
    }
    if !registry.starts_with('[') {
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        };
        if !host.split('.').all(label_ok) {
            return Err(format!("{host:?} is not a host name or address"));
        }
    }
    Ok(())
}

/// The distribution spec's name grammar: `[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*` components joined by `/`.
fn check_repository(name: &str) -> Result<(), String> {
    let bad = || {
        format!(
            "{name:?} is not a repository name: lowercase letters and digits, separated by '.', '_', '__' or \
             dashes, in components joined by '/'"
        )
    };
    if name.is_empty() || name.len() > MAX_REPOSITORY {
        return Err(format!("the repository name must be 1 to {MAX_REPOSITORY} characters"));
    }
    for component in name.split('/') {
        let bytes = component.as_bytes();
        let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
        if bytes.is_empty() || !alnum(bytes[0]) || !alnum(bytes[bytes.len() - 1]) {
            return Err(bad());
        }
        let mut i = 0;
        while i < bytes.len() {
            if alnum(bytes[i]) {
                i += 1;
                continue;
            }
            let start = i;
            while i < bytes.len() && !alnum(bytes[i]) {
                i += 1;
            }
            let sep = &component[start..i];
            if !(sep == "." || sep == "_" || sep == "__" || sep.bytes().all(|b| b == b'-')) {
                return Err(bad());
            }
        }
    }
    Ok(())
}

/// `[A-Za-z0-9_][A-Za-z0-9._-]{0,127}`.
fn check_tag(tag: &str) -> Result<(), String> {
    let ok = !tag.is_empty()
        && tag.len() <= 128
        && !tag.starts_with(['.', '-'])
        && tag.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok { Ok(()) } else { Err(format!("{tag:?} is not a tag: up to 128 of A-Z a-z 0-9 . _ -")) }
}

/// `sha256:` and 64 lowercase hexadecimal digits.
pub fn check_digest(digest: &str) -> Result<(), String> {
    let hex = digest.strip_prefix("sha256:").ok_or_else(|| format!("{digest:?}: the digest must be sha256:…"))?;
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        return Err(format!("{digest:?}: the digest must be sha256: and 64 lowercase hexadecimal digits"));
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::type_complexity)]
mod tests {
    use super::*;

    const D: &str = "sha256:3c7a98a7a4f6e1e0f0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f607";

    #[test]
    fn parses_and_displays_a_digest_reference() {
        for text in [
            format!("oci://127.0.0.1:5077/plugins/hello@{D}"),
            format!("oci://ghcr.io/acme/tools/hello-world@{D}"),
            format!("oci://[::1]:5000/a.b__c--d/e_f@{D}"),
        ] {
            let r = OciRef::parse(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(r.to_string(), text);
        }
        let r = OciRef::parse(&format!("oci://[::1]:5000/x@{D}")).unwrap();
        assert_eq!((r.host(), r.repository.as_str(), r.digest.as_str()), ("::1", "x", D));
    }

    #[test]
    fn refuses_tags_missing_digests_and_bad_parts() {
        let e = OciRef::parse("oci://127.0.0.1:5077/plugins/hello:0.1.0").unwrap_err();
        assert!(e.contains("digest only") && e.contains("oci://127.0.0.1:5077/plugins/hello@sha256:"), "{e}");
        assert!(OciRef::parse("oci://h/plugins/hello").unwrap_err().contains("no digest"));
        for bad in [
            "https://h/x@sha256:00".to_string(),
            format!("oci://h/Upper@{D}"),
            format!("oci://h/a//b@{D}"),
            format!("oci://h/-a@{D}"),
            format!("oci://h/a...b@{D}"),
            format!("oci://h:0/a@{D}"),
            format!("oci://h:99999/a@{D}"),
            format!("oci://bad_host/a@{D}"),
            format!("oci://h/a:tag@{D}"),
            format!("oci://h/a@{}", D.to_uppercase().replace("SHA256", "sha256")),
            "oci://h/a@sha256:abc".to_string(),
            format!("oci://h/a@sha512:{}", &D[7..]),
            format!("oci:///a@{D}"),
        ] {
            assert!(OciRef::parse(&bad).is_err(), "{bad} was accepted");
        }
    }

    #[test]
    fn a_push_target_takes_a_tag_or_nothing() {
        let t = OciTarget::parse("oci://localhost:5000/p/hello:0.1.0").unwrap();
        assert_eq!((t.registry.as_str(), t.repository.as_str()), ("localhost:5000", "p/hello"));
        assert_eq!(t.reference, OciTag::Tag("0.1.0".into()));
        assert_eq!(OciTarget::parse("oci://localhost:5000/p/hello").unwrap().reference, OciTag::None);
        assert!(OciTarget::parse("oci://h/p:-bad").is_err());
    }
}
