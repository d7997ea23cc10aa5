//! Plugins from OCI registries: pull by manifest digest, push a component.
//!
//! Trusted: the policy's reference (`oci://HOST/REPO@sha256:…`). Untrusted:
//! everything the registry, a redirect target or the disk cache returns. So the
//! manifest's bytes must hash to the reference's digest before they are parsed,
//! the component's bytes must hash to the layer digest that manifest names, and
//! a cached file is hashed again on every use. Every body is bounded
//! ([`MAX_MANIFEST`], [`MAX_COMPONENT`]) and every request timed
//! ([`http::CONNECT_TIMEOUT`], [`http::REQUEST_TIMEOUT`]). Layout and push are
//! in [`manifest`]; the transport and authentication in [`http`]; the cache in
//! [`store`]. docs/plugins.md, "Publish and fetch with OCI".

mod http;
pub mod manifest;
mod store;

use std::path::{Path, PathBuf};

use ::http::{Method, StatusCode};
use bytes::Bytes;
use sha2::{Digest, Sha256};

pub use warden_policy::oci::{OciRef, OciTag, OciTarget};

use self::http::Registry;

/// The largest manifest warden reads.
pub const MAX_MANIFEST: u64 = 4 << 20;
/// The largest component (layer) warden reads: the file loader's limit.
pub const MAX_COMPONENT: u64 = crate::wasm::MAX_COMPONENT_FILE;
/// The largest signature annotation warden reads.
pub const MAX_SIGNATURE: usize = 16 << 10;
/// One fetch, whole: every request, redirect, token exchange and retry (each request also has its own 30 s).
pub const FETCH_DEADLINE: std::time::Duration = std::time::Duration::from_secs(120);
/// The manifest annotation that carries the component's armored sshsig signature(s).
pub const SIGNATURE_ANNOTATION: &str = "dev.warden.signature.sshsig";

/// A fetch that failed: whether the bytes failed a check (a tampered
/// registry, cache or reference: refuse) or the registry could not be used.
#[derive(Debug, Clone)]
pub struct FetchError {
    /// The registry served bytes that do not match what the reference names.
    pub integrity: bool,
    /// What happened and what to do.
    pub message: String,
}

impl FetchError {
    fn unusable(message: String) -> FetchError {
        FetchError { integrity: false, message }
    }
    fn refused(message: String) -> FetchError {
        FetchError { integrity: true, message }
    }
}

/// A component fetched and checked.
#[derive(Debug, Clone)]
pub struct Fetched {
    /// The component's bytes (their sha256 is [`Fetched::sha256`]).
    pub bytes: Vec<u8>,
    /// The layer digest's hex: the sha256 of [`Fetched::bytes`].
    pub sha256: String,
    /// The manifest's `dev.warden.signature.sshsig` annotation.
    pub signature: Option<String>,
    /// The manifest digest (`sha256:…`), the one the reference names.
    pub manifest_digest: String,
    /// Where the component lies in the cache, when it was stored there.
    pub cached: Option<PathBuf>,
}

/// What a push stored.
#[derive(Debug, Clone)]
pub struct Pushed {
    /// The reference by digest to write in a policy.
    pub reference: OciRef,
    /// The component's sha256 (the layer digest's hex).
    pub sha256: String,
}

/// `sha256:` and the hex of `bytes`' sha256.
pub fn digest_of(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// Runs `f` to completion on a runtime of its own, on a thread of its own (so
/// it works inside a caller's Tokio runtime too).
fn block_on<T: Send>(f: impl Future<Output = T> + Send) -> Result<T, String> {
    std::thread::scope(|s| {
        s.spawn(|| {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| format!("cannot start the OCI client's runtime: {e}"))?;
            Ok(rt.block_on(f))
        })
        .join()
        .map_err(|_| "the OCI client's thread panicked".to_string())?
    })
}

/// Fetches the component `r` names, checked against its digests. `cache` is
/// warden's cache directory (`None`: nothing is read from or written to disk);
/// entries live in `{cache}/oci/`.
pub fn fetch(r: &OciRef, cache: Option<&Path>) -> Result<Fetched, FetchError> {
    let store = cache.and_then(store::Store::open);
    let whole = async {
        tokio::time::timeout(FETCH_DEADLINE, fetch_async(r, store.as_ref())).await.unwrap_or_else(|_| {
            Err(FetchError::unusable(format!(
                "the registry did not deliver the component within {} s (every request, redirect and token \
                 included); try again, or pre-fetch it with `warden plugin pull`",
                FETCH_DEADLINE.as_secs()
            )))
        })
    };
    block_on(whole).map_err(FetchError::unusable)?
}

async fn fetch_async(r: &OciRef, store: Option<&store::Store>) -> Result<Fetched, FetchError> {
    let mut registry = Registry::new(&r.registry);
    let manifest = match store.and_then(|s| s.get("manifests", &r.digest, MAX_MANIFEST)) {
        Some(bytes) => bytes,
        None => {
            let path = format!("/v2/{}/manifests/{}", r.repository, r.digest);
            let accept = [("accept", manifest::MANIFEST_TYPE.to_string())];
            let reply = registry
                .send(Method::GET, &path, &accept, Bytes::new(), MAX_MANIFEST)
                .await
                .map_err(|e| FetchError::unusable(format!("cannot fetch the manifest: {e}")))?;
            expect_ok(&reply, "the manifest", r)?;
            let got = digest_of(&reply.body);
            if got != r.digest {
                return Err(FetchError::refused(format!(
                    "the registry served a manifest whose digest is {got}, not {}: refused (the registry or \
                     something between is not serving what the reference names)",
                    r.digest
                )));
            }
            if let Some(s) = store {
                s.put("manifests", &r.digest, &reply.body);
            }
            reply.body
        }
    };
    let accepted = manifest::accept(&manifest)
        .map_err(|e| FetchError::refused(format!("manifest {} is not a Wasm component artifact: {e}", r.digest)))?;
    let layer = &accepted.layer_digest;
    let (bytes, cached) = match store.and_then(|s| s.get("blobs", layer, accepted.layer_size)) {
        Some(bytes) => (bytes, store.map(|s| s.path("blobs", layer))),
        None => {
            let path = format!("/v2/{}/blobs/{layer}", r.repository);
            let reply = registry
                .send(Method::GET, &path, &[], Bytes::new(), accepted.layer_size)
                .await
                .map_err(|e| FetchError::unusable(format!("cannot fetch the component (layer {layer}): {e}")))?;
            expect_ok(&reply, &format!("the component (layer {layer})"), r)?;
            let got = digest_of(&reply.body);
            if got != *layer {
                return Err(FetchError::refused(format!(
                    "the registry served a component whose digest is {got}, not the layer digest {layer} its \
                     manifest names: refused (the stored blob was changed; push the component again)"
                )));
            }
            let cached = store.and_then(|s| s.put("blobs", layer, &reply.body));
            (reply.body, cached)
        }
    };
    let sha256 = layer.trim_start_matches("sha256:").to_string();
    Ok(Fetched { bytes, sha256, signature: accepted.signature, manifest_digest: r.digest.clone(), cached })
}

/// A `200`, or an error naming what was missing and what to do.
fn expect_ok(reply: &http::Reply, what: &str, r: &OciRef) -> Result<(), FetchError> {
    match reply.status {
        StatusCode::OK => Ok(()),
        StatusCode::NOT_FOUND => Err(FetchError::unusable(format!(
            "{} answered HTTP 404 (not found) for {what}: check the digest, or push the plugin there \
             (`warden plugin push`)",
            r.registry
        ))),
        s => Err(FetchError::unusable(format!(
            "{} answered HTTP {} for {what}: {}",
            r.registry,
            s.as_u16(),
            reply.excerpt()
        ))),
    }
}

/// Pushes `component` to `target` (config, layer, then the manifest with the
/// signature annotation), and returns the reference by digest to pin.
pub fn push(
    target: &OciTarget,
    component: &[u8],
    imports: &[String],
    exports: &[String],
    signature: Option<&str>,
) -> Result<Pushed, String> {
    if component.len() as u64 > MAX_COMPONENT {
        return Err(format!("the component is larger than the {MAX_COMPONENT} bytes warden loads"));
    }
    if signature.is_some_and(|s| s.len() > MAX_SIGNATURE) {
        return Err(format!("the signature is larger than the {MAX_SIGNATURE} bytes warden reads"));
    }
    block_on(push_async(target, component, imports, exports, signature))?
}

async fn push_async(
    target: &OciTarget,
    component: &[u8],
    imports: &[String],
    exports: &[String],
    signature: Option<&str>,
) -> Result<Pushed, String> {
    let mut registry = Registry::new(&target.registry);
    let repo = &target.repository;
    let layer_digest = digest_of(component);
    let config = manifest::config(&layer_digest, imports, exports);
    let config_digest = digest_of(&config);
    upload(&mut registry, repo, &config_digest, Bytes::from(config.clone())).await?;
    upload(&mut registry, repo, &layer_digest, Bytes::copy_from_slice(component)).await?;
    let body = manifest::manifest(&config_digest, config.len(), &layer_digest, component.len(), signature);
    let digest = digest_of(&body);
    let reference = match &target.reference {
        OciTag::Tag(t) => t.clone(),
        OciTag::Digest(d) if *d != digest => {
            return Err(format!("the manifest's digest is {digest}, not the {d} the target names"));
        }
        OciTag::Digest(_) | OciTag::None => digest.clone(),
    };
    let headers = [("content-type", manifest::MANIFEST_TYPE.to_string())];
    let path = format!("/v2/{repo}/manifests/{reference}");
    let reply = registry.send(Method::PUT, &path, &headers, Bytes::from(body), 1 << 20).await?;
    if reply.status != StatusCode::CREATED {
        return Err(format!("storing the manifest: HTTP {}: {}", reply.status.as_u16(), reply.excerpt()));
    }
    if let Some(said) = reply.header("docker-content-digest")
        && said != digest
    {
        return Err(format!("the registry stored the manifest as {said}, not {digest}: do not use it"));
    }
    let reference = OciRef { registry: target.registry.clone(), repository: repo.clone(), digest };
    Ok(Pushed { reference, sha256: layer_digest.trim_start_matches("sha256:").to_string() })
}

/// Uploads one blob unless the registry has it: `POST …/blobs/uploads/`, then `PUT` with its digest.
async fn upload(registry: &mut Registry, repo: &str, digest: &str, body: Bytes) -> Result<(), String> {
    let head = registry.send(Method::HEAD, &format!("/v2/{repo}/blobs/{digest}"), &[], Bytes::new(), 0).await?;
    if head.status == StatusCode::OK {
        return Ok(());
    }
    let start = registry.send(Method::POST, &format!("/v2/{repo}/blobs/uploads/"), &[], Bytes::new(), 1 << 20).await?;
    if start.status != StatusCode::ACCEPTED {
        return Err(format!("starting the upload of {digest}: HTTP {}: {}", start.status.as_u16(), start.excerpt()));
    }
    let location = start.header("location").ok_or_else(|| format!("starting the upload of {digest}: no Location"))?;
    let sep = if location.contains('?') { '&' } else { '?' };
    let put = format!("{location}{sep}digest={}", digest.replace(':', "%3A"));
    let headers = [("content-type", "application/octet-stream".to_string())];
    let done = registry.send(Method::PUT, &put, &headers, body, 1 << 20).await?;
    if done.status != StatusCode::CREATED {
        return Err(format!("uploading {digest}: HTTP {}: {}", done.status.as_u16(), done.excerpt()));
    }
    Ok(())
}
