//! The fetch cache: `{cache}/oci/manifests/sha256/HEX` and
//! `{cache}/oci/blobs/sha256/HEX`, under the compile cache's rules (directories
//! owned by this user and writable by nobody else, private files written whole
//! and renamed into place). A hit is hashed again before use: a file that no
//! longer matches its name is ignored and fetched anew.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::wasm::cache::{prepare_dir, safe_owner_and_mode, write_atomically};

/// The cache's directory, checked.
pub(crate) struct Store {
    root: PathBuf,
}

impl Store {
    /// The store under `cache` (created 0700), or `None` with a warning when it is not safe to use.
    pub(crate) fn open(cache: &Path) -> Option<Store> {
        let root = cache.join("oci");
        for kind in ["manifests", "blobs"] {
            let dir = root.join(kind).join("sha256");
            if let Err(why) = prepare_dir(&dir) {
                tracing::warn!("not caching OCI downloads in {}: {why}", dir.display());
                return None;
            }
        }
        Some(Store { root })
    }

    /// Where `digest` (`sha256:HEX`) of `kind` lies.
    pub(crate) fn path(&self, kind: &str, digest: &str) -> PathBuf {
        self.root.join(kind).join("sha256").join(digest.trim_start_matches("sha256:"))
    }

    /// The cached bytes of `digest`, when present, private, at most `cap` bytes and matching it.
    pub(crate) fn get(&self, kind: &str, digest: &str, cap: u64) -> Option<Vec<u8>> {
        let path = self.path(kind, digest);
        let meta = fs::symlink_metadata(&path).ok()?;
        if !meta.is_file() || !safe_owner_and_mode(&meta) || meta.len() > cap {
            tracing::warn!("ignoring cached {}: not a private regular file of at most {cap} bytes", path.display());
            return None;
        }
        let mut bytes = Vec::new();
        fs::File::open(&path).ok()?.take(cap + 1).read_to_end(&mut bytes).ok()?;
        if super::digest_of(&bytes) != digest {
            tracing::warn!("ignoring cached {}: its bytes no longer match their digest", path.display());
            return None;
        }
        Some(bytes)
    }

    /// Stores `bytes` (already checked against `digest`); where, when it worked.
    pub(crate) fn put(&self, kind: &str, digest: &str, bytes: &[u8]) -> Option<PathBuf> {
        let path = self.path(kind, digest);
        match write_atomically(&path, bytes) {
            Ok(()) => Some(path),
            Err(e) => {
                tracing::warn!("cannot cache {}: {e}", path.display());
                None
            }
        }
    }
}
