//! A registry behind bearer tokens: docker-registry's `auth.token` with a test
//! token service on loopback that issues RS256 JWTs (signed by `openssl dgst`)
//! only to a client that sends the right basic credentials.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::util::Env;
use super::util::registry::Registry;
use super::{TESTKIT, fresh_cache, warden, write_policy};

const SERVICE: &str = "warden-test-registry";
const ISSUER: &str = "warden-test-issuer";
const USER: &str = "alice";
const PASSWORD: &str = "s3cret-pw";

fn b64(bytes: &[u8], url: bool) -> String {
    let table: &[u8; 64] = if url {
        b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    } else {
        b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    };
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..=chunk.len() {
            out.push(table[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
        if !url {
            out.push_str(&"=".repeat(3 - chunk.len()));
        }
    }
    out
}

/// The token service's key and certificate (the registry's rootcertbundle).
fn make_key(dir: &Path) {
    let out = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "tok.key", "-out", "tok.pem"])
        .args(["-subj", "/CN=warden-test", "-days", "1"])
        .current_dir(dir)
        .output()
        .expect("openssl is needed for the token test");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// A JWT granting pull and push on `repo`, signed with the test key.
fn token(dir: &Path, repo: &str) -> String {
    let der = Command::new("openssl").args(["x509", "-in", "tok.pem", "-outform", "DER"]).current_dir(dir).output();
    let der = der.unwrap().stdout;
    let header = format!(r#"{{"alg":"RS256","typ":"JWT","x5c":["{}"]}}"#, b64(&der, false));
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let claims = serde_json::json!({
        "iss": ISSUER, "sub": USER, "aud": SERVICE, "exp": now + 300, "nbf": now - 10, "iat": now,
        "jti": format!("j{now}{}", rand_suffix()),
        "access": [{"type": "repository", "name": repo, "actions": ["pull", "push"]}],
    });
    let signing = format!("{}.{}", b64(header.as_bytes(), true), b64(claims.to_string().as_bytes(), true));
    let input = dir.join(format!("signing-{}", rand_suffix()));
    std::fs::write(&input, &signing).unwrap();
    let sig =
        Command::new("openssl").args(["dgst", "-sha256", "-sign", "tok.key"]).arg(&input).current_dir(dir).output();
    format!("{signing}.{}", b64(&sig.unwrap().stdout, true))
}

fn rand_suffix() -> u64 {
    static N: AtomicUsize = AtomicUsize::new(0);
    N.fetch_add(1, Ordering::Relaxed) as u64
}

/// Serves tokens on `listener` to clients sending the basic credentials; counts refusals.
fn serve_tokens(listener: TcpListener, dir: std::path::PathBuf, refused: Arc<AtomicUsize>, granted: Arc<AtomicUsize>) {
    let basic = format!("basic {}", b64(format!("{USER}:{PASSWORD}").as_bytes(), false)).to_ascii_lowercase();
    for stream in listener.incoming() {
        let Ok(mut stream) = stream else { continue };
        let mut lines = Vec::new();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                break;
            }
            lines.push(line.trim_end().to_string());
        }
        let authorized = lines.iter().any(|l| l.to_ascii_lowercase() == format!("authorization: {basic}"));
        let answer = if authorized {
            granted.fetch_add(1, Ordering::Relaxed);
            let body = serde_json::json!({"token": token(&dir, "plugins/kit")}).to_string();
            format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
                 Connection: close\r\n\r\n{body}",
                body.len()
            )
        } else {
            refused.fetch_add(1, Ordering::Relaxed);
            "HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_string()
        };
        let _ = stream.write_all(answer.as_bytes());
    }
}

#[test]
fn a_token_registry_is_used_with_the_configured_credentials() {
    let env = Env::new();
    let keys = tempfile::tempdir().unwrap();
    make_key(keys.path());
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (refused, granted) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (dir, count, given) = (keys.path().to_path_buf(), refused.clone(), granted.clone());
    std::thread::spawn(move || serve_tokens(listener, dir, count, given));
    let registry = Registry::start_with(&format!(
        "auth:\n  token:\n    realm: http://127.0.0.1:{port}/token\n    service: {SERVICE}\n    issuer: {ISSUER}\n    \
         rootcertbundle: {}\n",
        keys.path().join("tok.pem").display()
    ));
    let target = format!("oci://{}/plugins/kit:0.1.0", registry.authority());
    // The credentials are for the registry and its token service, and only those (WARDEN_OCI_REGISTRY).
    let hosts = format!("{},127.0.0.1:{port}", registry.authority());
    let creds = [("WARDEN_OCI_USERNAME", USER), ("WARDEN_OCI_PASSWORD", PASSWORD), ("WARDEN_OCI_REGISTRY", &hosts)];

    // No credentials: the token service says no, and the error says what to set.
    let run = warden(&env, &fresh_cache(&env, "c0"), &["plugin", "push", TESTKIT, &target], &[]);
    assert_ne!(run.code, 0, "{}", run.all());
    assert!(run.stderr.contains("WARDEN_OCI_USERNAME"), "{}", run.all());
    assert!(refused.load(Ordering::Relaxed) > 0);

    // Credentials not meant for the token service never reach it: the push is refused, naming the
    // variable, and the token service saw no credentials.
    let only_registry = registry.authority().to_string();
    let scoped =
        [("WARDEN_OCI_USERNAME", USER), ("WARDEN_OCI_PASSWORD", PASSWORD), ("WARDEN_OCI_REGISTRY", &only_registry)];
    let run = warden(&env, &fresh_cache(&env, "c-scoped"), &["plugin", "push", TESTKIT, &target], &scoped);
    assert_ne!(run.code, 0, "{}", run.all());
    assert!(run.stderr.contains("WARDEN_OCI_REGISTRY"), "{}", run.all());
    assert_eq!(granted.load(Ordering::Relaxed), 0, "the token service got the credentials");

    let (source, _) = super::push(&env, TESTKIT, &target, &[], &creds);
    write_policy(&env, &source, "");
    let run = warden(&env, &fresh_cache(&env, "c1"), &["call", "echo", "{}"], &creds);
    assert!(run.success(), "{}", run.all());
    let run = warden(&env, &fresh_cache(&env, "c2"), &["call", "echo", "{}"], &[]);
    assert!(!run.success() && run.error_message().contains("WARDEN_OCI_PASSWORD"), "{}", run.all());
}
