//! The compiled-component cache: `DIR/<sha256 of the component>-<engine hash>.cwasm`.
//!
//! Deserialising precompiled code is `unsafe` in wasmtime because the bytes are
//! trusted to be wasmtime's own output. So the cache directory must be owned by
//! the current user and writable by nobody else (checked on every load), files
//! are written whole and renamed into place, and a directory that fails the check
//! is not used at all: the component is compiled in memory instead, with a warning.

use std::fs;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use wasmtime::Engine;
use wasmtime::component::Component;

/// Where compiled components live, when the directory is safe to use.
#[derive(Debug, Clone)]
pub(crate) struct ComponentCache {
    dir: Option<PathBuf>,
    engine_hash: String,
}

impl ComponentCache {
    /// A cache in `dir` (created 0700 when missing); `None` disables caching.
    pub(crate) fn new(engine: &Engine, dir: Option<PathBuf>) -> ComponentCache {
        let mut h = DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut h);
        let engine_hash = format!("{:016x}", h.finish());
        let dir = dir.and_then(|d| match prepare_dir(&d) {
            Ok(()) => Some(d),
            Err(why) => {
                tracing::warn!("not caching compiled components in {}: {why}", d.display());
                None
            }
        });
        ComponentCache { dir, engine_hash }
    }

    fn path_for(&self, sha256: &str) -> Option<PathBuf> {
        self.dir.as_ref().map(|d| d.join(format!("{sha256}-{}.cwasm", self.engine_hash)))
    }

    /// The compiled component for `bytes` (whose hash is `sha256`): from the cache, or compiled and stored.
    pub(crate) fn load(&self, engine: &Engine, sha256: &str, bytes: &[u8]) -> wasmtime::Result<Component> {
        if let Some(path) = self.path_for(sha256) {
            if let Some(c) = self.try_read(engine, &path) {
                return Ok(c);
            }
            let component = Component::from_binary(engine, bytes)?;
            if let Err(e) = write_atomically(&path, &component.serialize()?) {
                tracing::warn!("cannot store compiled component {}: {e}", path.display());
            }
            return Ok(component);
        }
        Component::from_binary(engine, bytes)
    }

    fn try_read(&self, engine: &Engine, path: &Path) -> Option<Component> {
        let meta = fs::symlink_metadata(path).ok()?;
        if !safe_owner_and_mode(&meta) || !meta.is_file() {
            tracing::warn!("ignoring cached component {}: not a private regular file", path.display());
            return None;
        }
        // SAFETY: the file is a regular file (not a link) in a directory owned by
        // this user and writable only by it (`prepare_dir`, checked at start), the
        // file itself is owned by this user and not group/world writable, and it was
        // written by `write_atomically` from `Component::serialize` of the same
        // engine configuration (its name carries the engine's compatibility hash;
        // wasmtime checks the header again and refuses mismatches).
        #[allow(unsafe_code)]
        let loaded = unsafe { Component::deserialize_file(engine, path) };
        match loaded {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::warn!("ignoring cached component {}: {e:#}", path.display());
                None
            }
        }
    }
}

pub(crate) fn safe_owner_and_mode(meta: &fs::Metadata) -> bool {
    meta.uid() == current_uid() && meta.mode() & 0o022 == 0
}

fn current_uid() -> u32 {
    // The owner of /proc/self is this process's real uid.
    fs::metadata("/proc/self").map(|m| m.uid()).unwrap_or(u32::MAX)
}

pub(crate) fn prepare_dir(dir: &Path) -> Result<(), String> {
    if !dir.exists() {
        fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(|e| e.to_string())?;
    }
    let meta = fs::symlink_metadata(dir).map_err(|e| e.to_string())?;
    if !meta.is_dir() {
        return Err("not a directory (or a symbolic link)".into());
    }
    if meta.uid() != current_uid() {
        return Err(format!("owned by uid {}, not this user", meta.uid()));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(format!("writable by others (mode {:o}); run chmod go-w on it", meta.mode() & 0o777));
    }
    Ok(())
}

pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let mut f = fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    fs::set_permissions(&tmp, fs::Permissions::from_mode(0o600))?;
    fs::rename(&tmp, path).inspect_err(|_| {
        let _ = fs::remove_file(&tmp);
    })
}
