//! The CNCF Wasm OCI artifact layout: the manifest warden accepts (one
//! `application/wasm` layer, the wasm config type) and the config and manifest
//! `warden plugin push` writes, byte for byte the same for the same component
//! and signature (fixed `created`, fixed key order, compact JSON).

use serde_json::{Value, json};

use super::{MAX_COMPONENT, MAX_SIGNATURE, SIGNATURE_ANNOTATION};

/// The OCI image manifest's media type.
pub const MANIFEST_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
/// The Wasm config's media type.
pub const CONFIG_TYPE: &str = "application/vnd.wasm.config.v0+json";
/// The one layer's media type: the component's bytes.
pub const LAYER_TYPE: &str = "application/wasm";

/// What warden takes from a manifest whose digest it checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Accepted {
    /// The layer's digest (`sha256:…`).
    pub(crate) layer_digest: String,
    /// The layer's size in bytes.
    pub(crate) layer_size: u64,
    /// The `dev.warden.signature.sshsig` annotation.
    pub(crate) signature: Option<String>,
}

/// Checks a manifest (already matched to its digest) against the Wasm layout.
pub(crate) fn accept(body: &[u8]) -> Result<Accepted, String> {
    let doc: Value = serde_json::from_slice(body).map_err(|e| format!("the manifest is not JSON: {e}"))?;
    if doc["schemaVersion"] != 2 {
        return Err("the manifest's schemaVersion is not 2".into());
    }
    if doc["mediaType"] != MANIFEST_TYPE {
        return Err(format!(
            "the manifest's mediaType is {}, not {MANIFEST_TYPE} (an image index or a Docker manifest is not a \
             warden plugin)",
            doc["mediaType"]
        ));
    }
    if doc["config"]["mediaType"] != CONFIG_TYPE {
        return Err(format!(
            "the config's mediaType is {}, not {CONFIG_TYPE}: not a Wasm artifact",
            doc["config"]["mediaType"]
        ));
    }
    let layers = doc["layers"].as_array().map(Vec::as_slice).unwrap_or_default();
    let [layer] = layers else {
        return Err(format!("the manifest has {} layers; a Wasm component artifact has exactly one", layers.len()));
    };
    if layer["mediaType"] != LAYER_TYPE {
        return Err(format!("the layer's mediaType is {}, not {LAYER_TYPE}", layer["mediaType"]));
    }
    let layer_digest = layer["digest"].as_str().unwrap_or_default().to_string();
    warden_policy::oci::check_digest(&layer_digest).map_err(|e| format!("the layer's digest: {e}"))?;
    let layer_size = layer["size"].as_u64().ok_or("the layer has no size")?;
    if layer_size == 0 || layer_size > MAX_COMPONENT {
        return Err(format!("the layer's size {layer_size} is not 1 to {MAX_COMPONENT} bytes"));
    }
    let signature = match &doc["annotations"][SIGNATURE_ANNOTATION] {
        Value::Null => None,
        Value::String(s) if s.len() <= MAX_SIGNATURE => Some(s.clone()),
        Value::String(s) => {
            return Err(format!(
                "the {SIGNATURE_ANNOTATION} annotation has {} bytes, more than {MAX_SIGNATURE}",
                s.len()
            ));
        }
        _ => return Err(format!("the {SIGNATURE_ANNOTATION} annotation is not a string")),
    };
    Ok(Accepted { layer_digest, layer_size, signature })
}

/// A descriptor.
fn descriptor(media_type: &str, digest: &str, size: usize) -> Value {
    json!({"mediaType": media_type, "digest": digest, "size": size})
}

/// The config blob: deterministic (`created` is the epoch; keys in a fixed order).
pub(crate) fn config(layer_digest: &str, imports: &[String], exports: &[String]) -> Vec<u8> {
    let doc = json!({
        "created": "1970-01-01T00:00:00Z",
        "architecture": "wasm",
        "os": "wasip2",
        "layerDigests": [layer_digest],
        "component": {"exports": exports, "imports": imports},
    });
    doc.to_string().into_bytes()
}

/// The manifest, with the signature (armored sshsig text) as an annotation when given.
pub(crate) fn manifest(
    config_digest: &str,
    config_size: usize,
    layer_digest: &str,
    layer_size: usize,
    signature: Option<&str>,
) -> Vec<u8> {
    let mut doc = json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST_TYPE,
        "config": descriptor(CONFIG_TYPE, config_digest, config_size),
        "layers": [descriptor(LAYER_TYPE, layer_digest, layer_size)],
    });
    if let Some(sig) = signature {
        doc["annotations"] = json!({ SIGNATURE_ANNOTATION: sig });
    }
    doc.to_string().into_bytes()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::type_complexity)]
mod tests {
    use super::*;

    const L: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
    const C: &str = "sha256:2222222222222222222222222222222222222222222222222222222222222222";

    #[test]
    fn what_push_writes_is_deterministic_and_accepted() {
        let cfg = config(L, &["wasi:cli/environment@0.2.0".into()], &["warden:plugin/tool@0.2.0".into()]);
        assert_eq!(
            String::from_utf8(cfg).unwrap(),
            [
                r#"{"created":"1970-01-01T00:00:00Z","architecture":"wasm","os":"wasip2","#,
                &format!(r#""layerDigests":["{L}"],"#),
                r#""component":{"exports":["warden:plugin/tool@0.2.0"],"imports":["wasi:cli/environment@0.2.0"]}}"#,
            ]
            .concat()
        );
        let sig = "-----BEGIN SSH SIGNATURE-----\nU1NIU0lH\n-----END SSH SIGNATURE-----\n";
        let m = manifest(C, 10, L, 20, Some(sig));
        assert_eq!(m, manifest(C, 10, L, 20, Some(sig)));
        let a = accept(&m).unwrap();
        assert_eq!(a, Accepted { layer_digest: L.into(), layer_size: 20, signature: Some(sig.into()) });
        assert_eq!(accept(&manifest(C, 10, L, 20, None)).unwrap().signature, None);
    }

    #[test]
    fn refuses_what_is_not_one_wasm_layer() {
        let good: Value = serde_json::from_slice(&manifest(C, 10, L, 20, None)).unwrap();
        let cases: Vec<(&str, Box<dyn Fn(&mut Value)>)> = vec![
            ("schemaVersion", Box::new(|d| d["schemaVersion"] = json!(1))),
            ("mediaType", Box::new(|d| d["mediaType"] = json!("application/vnd.oci.image.index.v1+json"))),
            ("config", Box::new(|d| d["config"]["mediaType"] = json!("application/vnd.oci.image.config.v1+json"))),
            ("2 layers", Box::new(|d| d["layers"] = json!([d["layers"][0].clone(), d["layers"][0].clone()]))),
            ("0 layers", Box::new(|d| d["layers"] = json!([]))),
            ("layer's mediaType", Box::new(|d| d["layers"][0]["mediaType"] = json!("application/octet-stream"))),
            ("layer's digest", Box::new(|d| d["layers"][0]["digest"] = json!("sha512:00"))),
            ("size", Box::new(|d| d["layers"][0]["size"] = json!(MAX_COMPONENT + 1))),
            (
                "annotation",
                Box::new(|d| d["annotations"] = json!({SIGNATURE_ANNOTATION: "x".repeat(MAX_SIGNATURE + 1)})),
            ),
        ];
        for (what, change) in cases {
            let mut d = good.clone();
            change(&mut d);
            let e = accept(d.to_string().as_bytes()).unwrap_err();
            assert!(e.contains(what.trim_start_matches(|c: char| c.is_ascii_digit() || c == ' ')), "{what}: {e}");
        }
    }
}
