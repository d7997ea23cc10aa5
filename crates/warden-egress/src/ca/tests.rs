//! The CA over real loopback TLS handshakes (tokio-rustls on both ends), and
//! its certificates read back by `openssl x509` and `openssl verify`.

use std::io::Write as _;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

use super::*;

const HOST: &str = "api.warden.test";

fn authority() -> Authority {
    Authority::new().unwrap_or_else(|e| panic!("{e}"))
}

fn pem_certs(pem: &str) -> Vec<CertificateDer<'static>> {
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .unwrap_or_else(|e| panic!("the PEM does not parse: {e:?}"))
}

fn roots_of(pem: &str) -> rustls::RootCertStore {
    let mut roots = rustls::RootCertStore::empty();
    for cert in pem_certs(pem) {
        roots.add(cert).unwrap_or_else(|e| panic!("{e}"));
    }
    roots
}

/// A client trusting only `pem`, offering `alpn`.
fn client(pem: &str, alpn: &[&[u8]]) -> rustls::ClientConfig {
    let mut config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap_or_else(|e| panic!("{e}"))
        .with_root_certificates(roots_of(pem))
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    config
}

/// Verifies the chain properly (against `pem`) but always for [`HOST`],
/// whatever SNI the client sends: so a failed handshake with another SNI is
/// the server's refusal, not the client's name check.
#[derive(Debug)]
struct PinnedName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for PinnedName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let host = ServerName::try_from(HOST).unwrap_or_else(|e| panic!("{e}"));
        self.0.verify_server_cert(end_entity, intermediates, &host, ocsp, now)
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

fn pinned_client(pem: &str) -> rustls::ClientConfig {
    let verifier = WebPkiServerVerifier::builder_with_provider(Arc::new(roots_of(pem)), provider())
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    let mut config = client(pem, &[ALPN]);
    config.dangerous().set_certificate_verifier(Arc::new(PinnedName(verifier)));
    config
}

/// What one handshake gave: the client's negotiated ALPN and the chain it
/// was shown, or the errors of each side.
struct Outcome {
    client: Result<(Option<Vec<u8>>, Vec<CertificateDer<'static>>), String>,
    server: Result<(), String>,
}

/// A handshake over a loopback TCP pair; the server sends "ok" and closes.
async fn handshake(server: Arc<rustls::ServerConfig>, client: rustls::ClientConfig, sni: &str) -> Outcome {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap_or_else(|e| panic!("{e}"));
    let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
    let serve = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.map_err(|e| e.to_string())?;
        let mut tls = tokio_rustls::TlsAcceptor::from(server).accept(tcp).await.map_err(|e| e.to_string())?;
        tls.write_all(b"ok").await.map_err(|e| e.to_string())?;
        tls.shutdown().await.map_err(|e| e.to_string())
    });
    let tcp = TcpStream::connect(addr).await.unwrap_or_else(|e| panic!("{e}"));
    let name = ServerName::try_from(sni.to_string()).unwrap_or_else(|e| panic!("{e}"));
    let client = async {
        let mut tls =
            tokio_rustls::TlsConnector::from(Arc::new(client)).connect(name, tcp).await.map_err(|e| e.to_string())?;
        let mut got = Vec::new();
        tls.read_to_end(&mut got).await.map_err(|e| e.to_string())?;
        assert_eq!(got, b"ok");
        let (_, conn) = tls.get_ref();
        let chain = conn.peer_certificates().unwrap_or_default().iter().map(|c| c.clone().into_owned()).collect();
        Ok((conn.alpn_protocol().map(<[u8]>::to_vec), chain))
    }
    .await;
    let server = serve.await.unwrap_or_else(|e| panic!("{e}"));
    Outcome { client, server }
}

#[tokio::test]
async fn handshake_succeeds_for_the_bound_host_with_the_ca_alone() {
    let ca = authority();
    let server = ca.server_config(HOST).unwrap_or_else(|e| panic!("{e}"));
    let out = handshake(server, client(ca.cert_pem(), &[ALPN]), HOST).await;
    let (alpn, chain) = out.client.unwrap_or_else(|e| panic!("the client failed: {e}"));
    out.server.unwrap_or_else(|e| panic!("the server failed: {e}"));
    assert_eq!(alpn.as_deref(), Some(ALPN));
    assert_eq!(chain.len(), 2, "the chain is [leaf, ca]");
    assert_eq!(chain[1].as_ref(), pem_certs(ca.cert_pem())[0].as_ref());
}

#[tokio::test]
async fn sni_case_and_trailing_dot_are_the_same_host_and_no_sni_is_answered() {
    let ca = authority();
    let server = ca.server_config("API.Warden.Test.").unwrap_or_else(|e| panic!("{e}"));
    let out = handshake(server.clone(), pinned_client(ca.cert_pem()), "Api.WARDEN.test.").await;
    out.client.unwrap_or_else(|e| panic!("mixed-case SNI with a dot: {e}"));
    let mut quiet = client(ca.cert_pem(), &[]);
    quiet.enable_sni = false;
    let out = handshake(server, quiet, HOST).await;
    let (alpn, _) = out.client.unwrap_or_else(|e| panic!("no SNI: {e}"));
    assert_eq!(alpn, None, "a client offering no ALPN gets none");
}

#[tokio::test]
async fn a_mismatched_sni_fails_the_handshake_on_the_server() {
    let ca = authority();
    let server = ca.server_config(HOST).unwrap_or_else(|e| panic!("{e}"));
    // The control: the pinned verifier accepts this leaf under the bound SNI.
    let out = handshake(server.clone(), pinned_client(ca.cert_pem()), HOST).await;
    out.client.unwrap_or_else(|e| panic!("the pinned client with the bound SNI: {e}"));
    let out = handshake(server.clone(), pinned_client(ca.cert_pem()), "evil.warden.test").await;
    assert!(out.client.is_err(), "a client naming evil.warden.test completed the handshake");
    let err = out.server.err().unwrap_or_else(|| panic!("the server accepted SNI evil.warden.test"));
    println!("mismatched SNI, server side: {err}");
    // And an ordinary client checking the name fails too.
    let out = handshake(server, client(ca.cert_pem(), &[ALPN]), "evil.warden.test").await;
    assert!(out.client.is_err() && out.server.is_err());
}

#[tokio::test]
async fn only_http1_is_negotiated() {
    let ca = authority();
    let server = ca.server_config(HOST).unwrap_or_else(|e| panic!("{e}"));
    let out = handshake(server.clone(), client(ca.cert_pem(), &[b"h2"]), HOST).await;
    let err = out.client.err().unwrap_or_else(|| panic!("a client offering only h2 completed the handshake"));
    println!("h2 only, client side: {err}");
    assert!(out.server.is_err());
    let out = handshake(server, client(ca.cert_pem(), &[b"h2", ALPN]), HOST).await;
    let (alpn, _) = out.client.unwrap_or_else(|e| panic!("h2 then http/1.1: {e}"));
    assert_eq!(alpn.as_deref(), Some(ALPN));
}

#[tokio::test]
async fn upstream_config_verifies_against_the_system_roots_not_warden_ca() {
    let upstream = upstream_config().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(upstream.alpn_protocols, vec![ALPN.to_vec()]);
    assert!(Arc::ptr_eq(&upstream, &upstream_config().unwrap_or_else(|e| panic!("{e}"))), "built once");
    let ca = authority();
    let server = ca.server_config(HOST).unwrap_or_else(|e| panic!("{e}"));
    let out = handshake(server, (*upstream).clone(), HOST).await;
    let err = out.client.err().unwrap_or_else(|| panic!("the upstream config trusted warden's own CA"));
    assert!(err.contains("UnknownIssuer") || err.contains("unknown issuer"), "{err}");
}

fn openssl(args: &[&str], stdin: &[u8]) -> String {
    let mut child = Command::new("openssl")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("openssl: {e}"));
    child.stdin.take().unwrap_or_else(|| panic!("stdin")).write_all(stdin).unwrap_or_else(|e| panic!("{e}"));
    let out = child.wait_with_output().unwrap_or_else(|e| panic!("{e}"));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "openssl {args:?}: {text}");
    text
}

#[tokio::test]
async fn the_certificates_have_the_promised_fields_and_pass_x509_strict() {
    let ca = authority();
    let server = ca.server_config(HOST).unwrap_or_else(|e| panic!("{e}"));
    let out = handshake(server, client(ca.cert_pem(), &[ALPN]), HOST).await;
    let (_, chain) = out.client.unwrap_or_else(|e| panic!("{e}"));
    let leaf = openssl(&["x509", "-inform", "DER", "-noout", "-text"], chain[0].as_ref());
    for want in [
        "X509v3 Authority Key Identifier",
        "DNS:api.warden.test",
        "Subject: CN = api.warden.test",
        "TLS Web Server Authentication",
        "CA:FALSE",
        "ASN1 OID: prime256v1",
    ] {
        assert!(leaf.contains(want), "the leaf lacks {want:?}:\n{leaf}");
    }
    let serial = leaf.split("Serial Number:").nth(1).and_then(|s| s.lines().nth(1)).unwrap_or_default();
    assert_eq!(serial.trim().split(':').count(), 16, "a 16-byte serial: {serial:?}");
    let root = openssl(&["x509", "-noout", "-text"], ca.cert_pem().as_bytes());
    let cn = format!("CN = warden egress CA {} ", std::process::id());
    for want in [
        "CA:TRUE, pathlen:0",
        "Certificate Sign, CRL Sign",
        "X509v3 Subject Key Identifier",
        cn.as_str(),
        "ASN1 OID: prime256v1",
    ] {
        assert!(root.contains(want), "the CA lacks {want:?}:\n{root}");
    }
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, ca.cert_pem()).unwrap_or_else(|e| panic!("{e}"));
    let ca_arg = ca_file.to_str().unwrap_or_else(|| panic!("path"));
    let verified = openssl(
        &["verify", "-x509_strict", "-purpose", "sslserver", "-verify_hostname", HOST, "-CAfile", ca_arg],
        pem_encode(&chain[0]).as_bytes(),
    );
    assert!(verified.contains("OK"), "{verified}");
}

/// Python's ssl client with 3.13's default flags (`VERIFY_X509_STRICT`,
/// `VERIFY_X509_PARTIAL_CHAIN`) trusting only the CA.
const PYTHON_CLIENT: &str = r#"
import socket, ssl, sys
ctx = ssl.create_default_context(cafile=sys.argv[1])
ctx.verify_flags |= ssl.VERIFY_X509_STRICT | ssl.VERIFY_X509_PARTIAL_CHAIN
ctx.set_alpn_protocols(["h2", "http/1.1"])
with socket.create_connection(("127.0.0.1", int(sys.argv[2]))) as raw:
    with ctx.wrap_socket(raw, server_hostname=sys.argv[3]) as tls:
        print(tls.selected_alpn_protocol(), tls.recv(2).decode())
"#;

#[tokio::test]
async fn python_with_strict_x509_verification_accepts_the_leaf() {
    let ca = authority();
    let server = ca.server_config(HOST).unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, ca.cert_pem()).unwrap_or_else(|e| panic!("{e}"));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap_or_else(|e| panic!("{e}"));
    let port = listener.local_addr().unwrap_or_else(|e| panic!("{e}")).port().to_string();
    let serve = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.map_err(|e| e.to_string())?;
        let mut tls = tokio_rustls::TlsAcceptor::from(server).accept(tcp).await.map_err(|e| e.to_string())?;
        tls.write_all(b"ok").await.map_err(|e| e.to_string())?;
        tls.shutdown().await.map_err(|e| e.to_string())
    });
    let ca_arg = ca_file.to_str().unwrap_or_else(|| panic!("path")).to_string();
    let out = tokio::task::spawn_blocking(move || {
        Command::new("python3")
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .args(["-c", PYTHON_CLIENT, &ca_arg, &port, HOST])
            .output()
            .unwrap_or_else(|e| panic!("python3: {e}"))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "python's strict client failed: {text}");
    assert_eq!(text.trim(), "http/1.1 ok");
    serve.await.unwrap_or_else(|e| panic!("{e}")).unwrap_or_else(|e| panic!("the server failed: {e}"));
}

/// The 32-byte private scalar inside a P-256 PKCS#8 key: ECPrivateKey's
/// `version 1, OCTET STRING (32)`.
fn scalar(pkcs8: &[u8]) -> Vec<u8> {
    let at = pkcs8
        .windows(5)
        .position(|w| w == [0x02, 0x01, 0x01, 0x04, 0x20])
        .unwrap_or_else(|| panic!("no ECPrivateKey in the PKCS#8 key"));
    pkcs8[at + 5..at + 37].to_vec()
}

#[test]
fn the_key_is_in_no_pem_and_the_bundle_holds_system_roots_then_the_ca() {
    let ca = authority();
    let key = ca.issuer.key().serialized_der().to_vec();
    let secret = scalar(&key);
    let bundle = bundle_pem(&ca);
    for (what, pem) in [("cert_pem", ca.cert_pem()), ("bundle", bundle.pem.as_str())] {
        assert!(!pem.contains("PRIVATE"), "{what} holds a private key block");
        let b64 = base64::engine::general_purpose::STANDARD.encode(&key);
        assert!(!pem.contains(&b64[..40]), "{what} holds the PKCS#8 key's base64");
        for cert in pem_certs(pem) {
            assert!(!cert.as_ref().windows(32).any(|w| w == secret.as_slice()), "{what} holds the CA's private scalar");
        }
        assert!(pem.lines().all(|l| l.len() <= 64), "{what} has a line over 64 columns");
    }
    let certs = pem_certs(&bundle.pem);
    assert!(bundle.roots >= 1, "no system root loaded: {:?}", bundle.note);
    assert_eq!(certs.len(), bundle.roots + 1);
    assert_eq!(certs.last().map(|c| c.as_ref()), Some(pem_certs(ca.cert_pem())[0].as_ref()), "the CA comes last");
    let distinct: HashSet<&[u8]> = certs.iter().map(|c| c.as_ref()).collect();
    assert_eq!(distinct.len(), certs.len(), "a root appears twice");
    assert!(bundle.pem.ends_with(ca.cert_pem()));
    println!("bundle: {} system roots, note {:?}", bundle.roots, bundle.note);
}

#[test]
fn leaves_are_cached_bounded_and_refused_for_ips_and_junk() {
    let ca = authority();
    let started = Instant::now();
    let first = ca.server_config(HOST).unwrap_or_else(|e| panic!("{e}"));
    println!("first leaf minted in {:?}", started.elapsed());
    let again = ca.server_config("API.warden.test.").unwrap_or_else(|e| panic!("{e}"));
    assert!(Arc::ptr_eq(&first, &again), "the same host minted twice");
    let started = Instant::now();
    for i in 0..MAX_LEAVES + 4 {
        ca.server_config(&format!("h{i}.warden.test")).unwrap_or_else(|e| panic!("{e}"));
    }
    let each = started.elapsed() / u32::try_from(MAX_LEAVES + 4).unwrap_or(1);
    println!("leaf mint time: {each:?} each over {} hosts", MAX_LEAVES + 4);
    let held = ca.leaves.lock().unwrap_or_else(|e| panic!("{e}")).len();
    assert_eq!(held, MAX_LEAVES, "the cache holds {held}");
    for bad in ["127.0.0.1", "::1", "", ".", "a b.test", "*.warden.test", &"a".repeat(254)] {
        let err = ca.server_config(bad).err().unwrap_or_else(|| panic!("minted a leaf for {bad:?}"));
        assert!(err.contains("cannot mint an egress leaf certificate"), "{err}");
    }
}

#[test]
fn two_authorities_differ_and_serials_are_random() {
    let (a, b) = (authority(), authority());
    assert_ne!(a.cert_pem(), b.cert_pem());
    let serials: HashSet<Vec<u8>> = (0..64).map(|_| serial().unwrap_or_else(|e| panic!("{e}")).to_bytes()).collect();
    assert_eq!(serials.len(), 64);
    assert!(serials.iter().all(|s| s.len() == 16 && s[0] & 0x80 == 0 && s[0] != 0));
}
