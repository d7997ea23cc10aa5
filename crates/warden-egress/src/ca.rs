//! The per-process certificate authority of credential brokering: the CA an
//! intercepted connection's leaf is signed by, the bundle a tool is pointed at
//! (the system roots plus this CA), and the client configuration warden uses
//! toward the real server.
//!
//! Owns: the CA key, in memory only (never written, never in any PEM this
//! module returns), and a bounded cache of leaves. Trusts: the host names it
//! is asked to mint for (the proxy's bound credential hosts), and the system
//! root store (`rustls-native-certs`, which honours `SSL_CERT_FILE` and
//! `SSL_CERT_DIR`). Every configuration uses rustls' ring provider explicitly
//! and offers ALPN `http/1.1` only.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, PKCS_ECDSA_P256_SHA256, SanType, SerialNumber,
};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use time::OffsetDateTime;

/// Leaves one [`Authority`] keeps minted; when full, one is evicted.
pub const MAX_LEAVES: usize = 256;
/// The longest host name a leaf is minted for, in bytes (DNS's limit).
pub const MAX_HOST: usize = 253;
/// How long the CA is valid, from its creation (365 days).
const CA_LIFETIME: i64 = 365 * 86_400;
/// How long a leaf is valid at most, from its minting (30 days).
const LEAF_LIFETIME: i64 = 30 * 86_400;
/// Both CA and leaves start this long before now (1 hour), for skewed clocks.
const BACKDATE: i64 = 3_600;
/// A cached leaf with less than this left (1 day) is minted afresh.
const LEAF_MARGIN: i64 = 86_400;
/// The one ALPN protocol offered on either side: HTTP/2 is never intercepted.
const ALPN: &[u8] = b"http/1.1";

/// warden's per-process CA: ECDSA P-256, `CA:TRUE, pathlen:0`, valid for a
/// year. Its key lives in this value only; [`Authority::cert_pem`] and
/// [`bundle_pem`] carry the certificate, never the key.
pub struct Authority {
    /// The CA certificate, DER.
    der: CertificateDer<'static>,
    /// The CA certificate, PEM (64-column lines).
    pem: String,
    /// The CA's name and key, to sign leaves with. Never serialised.
    issuer: Issuer<'static, KeyPair>,
    /// The CA's end of validity, Unix seconds; no leaf outlives it.
    not_after: i64,
    /// Minted leaves by normalised host, with their end of validity.
    leaves: Mutex<HashMap<String, (i64, Arc<rustls::ServerConfig>)>>,
}

impl fmt::Debug for Authority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Authority").field("not_after", &self.not_after).finish_non_exhaustive()
    }
}

impl Authority {
    /// A fresh CA: ECDSA P-256, CA:TRUE pathlen 0, KeyUsage keyCertSign+cRLSign,
    /// CN "warden egress CA <pid> <yyyy-mm-dd>", validity now-1h .. now+365d,
    /// random serial.
    pub fn new() -> Result<Authority, String> {
        let now = unix_now()?;
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)
            .map_err(|e| format!("cannot generate the egress CA's key: {e}"))?;
        let mut params = CertificateParams::default();
        params.not_before = datetime(now - BACKDATE)?;
        params.not_after = datetime(now + CA_LIFETIME)?;
        params.serial_number = Some(serial()?);
        let today = datetime(now)?.date();
        let cn = format!(
            "warden egress CA {} {:04}-{:02}-{:02}",
            std::process::id(),
            today.year(),
            u8::from(today.month()),
            today.day()
        );
        let mut name = DistinguishedName::new();
        name.push(DnType::CommonName, cn);
        params.distinguished_name = name;
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let cert = params.self_signed(&key).map_err(|e| format!("cannot sign the egress CA's certificate: {e}"))?;
        let der = cert.der().clone();
        let pem = pem_encode(&der);
        Ok(Authority {
            der,
            pem,
            issuer: Issuer::new(params, key),
            not_after: now + CA_LIFETIME,
            leaves: Mutex::new(HashMap::new()),
        })
    }

    /// The CA certificate in PEM, for the bundle a tool trusts.
    pub fn cert_pem(&self) -> &str {
        &self.pem
    }

    /// A rustls ServerConfig presenting a leaf for `host` (a DNS name) signed
    /// by this CA: fresh P-256 key, random 16-byte serial, SAN DNS:host, CN
    /// host, EKU serverAuth, the authority key identifier extension (Python
    /// 3.13's `VERIFY_X509_STRICT` needs it), validity now-1h .. min(CA end,
    /// +30d); chain [leaf, ca]; ALPN ["http/1.1"] only; the certificate
    /// resolver answers only when the client's SNI is absent or equals `host`
    /// (ASCII case-insensitive, trailing dot ignored), so a mismatched SNI
    /// fails the handshake. Cached per host (at most [`MAX_LEAVES`]; one is
    /// evicted when full; a leaf with less than a day left is minted afresh).
    pub fn server_config(&self, host: &str) -> Result<Arc<rustls::ServerConfig>, String> {
        let host = normalise_host(host)?;
        let now = unix_now()?;
        let mut leaves = self.leaves.lock().map_err(|_| "the egress CA's leaf cache is poisoned".to_string())?;
        if let Some((end, config)) = leaves.get(&host)
            && *end - now > LEAF_MARGIN
        {
            return Ok(config.clone());
        }
        let (end, config) = self.mint(&host, now)?;
        if leaves.len() >= MAX_LEAVES
            && !leaves.contains_key(&host)
            && let Some(evict) = leaves.keys().next().cloned()
        {
            leaves.remove(&evict);
        }
        leaves.insert(host, (end, config.clone()));
        Ok(config)
    }

    /// Mints a leaf for the normalised `host` and builds its server config;
    /// returns the leaf's end of validity too.
    fn mint(&self, host: &str, now: i64) -> Result<(i64, Arc<rustls::ServerConfig>), String> {
        let what = |e: &dyn fmt::Display| format!("cannot mint the egress leaf certificate for {host}: {e}");
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).map_err(|e| what(&e))?;
        let end = self.not_after.min(now + LEAF_LIFETIME);
        let mut params = CertificateParams::default();
        params.not_before = datetime(now - BACKDATE)?;
        params.not_after = datetime(end)?;
        params.serial_number = Some(serial()?);
        let mut name = DistinguishedName::new();
        name.push(DnType::CommonName, host);
        params.distinguished_name = name;
        let dns = host.to_string().try_into().map_err(|e| what(&e))?;
        params.subject_alt_names = vec![SanType::DnsName(dns)];
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        let cert = params.signed_by(&key, &self.issuer).map_err(|e| what(&e))?;
        let private = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let signer = rustls::crypto::ring::sign::any_supported_type(&private).map_err(|e| what(&e))?;
        let certified = Arc::new(CertifiedKey::new(vec![cert.der().clone(), self.der.clone()], signer));
        let resolver = Arc::new(OneHost { host: host.to_string(), certified });
        let mut config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| what(&e))?
            .with_no_client_auth()
            .with_cert_resolver(resolver);
        config.alpn_protocols = vec![ALPN.to_vec()];
        Ok((end, Arc::new(config)))
    }
}

/// The certificate resolver of one leaf: it answers a client whose SNI is
/// absent or names its host, and no other, so the handshake fails.
#[derive(Debug)]
struct OneHost {
    /// The normalised host the leaf names.
    host: String,
    /// The leaf, the CA after it, and the leaf's key.
    certified: Arc<CertifiedKey>,
}

impl ResolvesServerCert for OneHost {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        match hello.server_name() {
            None => Some(self.certified.clone()),
            Some(sni) if same_host(sni, &self.host) => Some(self.certified.clone()),
            Some(_) => None,
        }
    }
}

/// The bundle a tool is pointed at, from [`bundle_pem`].
#[derive(Debug, Clone)]
pub struct Bundle {
    /// The system roots, each once, then the CA; PEM.
    pub pem: String,
    /// How many system roots the bundle holds.
    pub roots: usize,
    /// Set when the system store yielded no root or reported errors: the
    /// tool will trust only what loaded (perhaps only warden's CA), so its
    /// connections to hosts warden does not intercept may fail.
    pub note: Option<String>,
}

/// The bundle a tool is pointed at: every root of the system store
/// (`rustls_native_certs::load_native_certs()`, which honours `SSL_CERT_FILE`
/// and `SSL_CERT_DIR`) re-encoded as PEM, each once, then the CA. It never
/// fails: when the native store is empty the bundle is the CA alone and
/// [`Bundle::note`] says so (intercepted hosts still work; others will not
/// verify).
pub fn bundle_pem(authority: &Authority) -> Bundle {
    let loaded = rustls_native_certs::load_native_certs();
    let mut seen = HashSet::new();
    let mut pem = String::new();
    for cert in &loaded.certs {
        if seen.insert(cert.as_ref().to_vec()) {
            pem.push_str(&pem_encode(cert));
        }
    }
    let roots = seen.len();
    pem.push_str(authority.cert_pem());
    let errors: Vec<String> = loaded.errors.iter().take(3).map(|e| e.to_string()).collect();
    let note = if roots == 0 {
        Some(format!(
            "no system root certificate could be loaded ({}; SSL_CERT_FILE={}): the CA bundle holds warden's egress CA only, so the tool's connections to hosts warden does not intercept will fail to verify",
            if errors.is_empty() { "the store is empty".to_string() } else { errors.join("; ") },
            std::env::var("SSL_CERT_FILE").unwrap_or_else(|_| "unset".into())
        ))
    } else if !errors.is_empty() {
        Some(format!("some system root certificates could not be loaded: {}", errors.join("; ")))
    } else {
        None
    };
    Bundle { pem, roots, note }
}

/// The client config warden uses toward the real server: the system roots
/// (`rustls-native-certs`, honouring `SSL_CERT_FILE`), ALPN ["http/1.1"],
/// built once and shared. Fails when no root certificate could be loaded.
pub fn upstream_config() -> Result<Arc<rustls::ClientConfig>, String> {
    static CONFIG: OnceLock<Result<Arc<rustls::ClientConfig>, String>> = OnceLock::new();
    CONFIG.get_or_init(build_upstream).clone()
}

/// Builds [`upstream_config`]'s configuration.
fn build_upstream() -> Result<Arc<rustls::ClientConfig>, String> {
    let loaded = rustls_native_certs::load_native_certs();
    let mut roots = rustls::RootCertStore::empty();
    let (added, _ignored) = roots.add_parsable_certificates(loaded.certs);
    if added == 0 {
        let errors: Vec<String> = loaded.errors.iter().take(3).map(|e| e.to_string()).collect();
        return Err(format!(
            "no root certificates could be loaded from the system store ({}), so warden cannot verify the servers it brokers credentials to: set SSL_CERT_FILE to a PEM file of trusted root certificates (now {})",
            if errors.is_empty() { "it is empty".to_string() } else { errors.join("; ") },
            std::env::var("SSL_CERT_FILE").unwrap_or_else(|_| "unset".into())
        ));
    }
    let mut config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("the egress upstream TLS configuration: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![ALPN.to_vec()];
    Ok(Arc::new(config))
}

/// rustls' ring provider, shared; never the process default.
fn provider() -> Arc<CryptoProvider> {
    static PROVIDER: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    PROVIDER.get_or_init(|| Arc::new(rustls::crypto::ring::default_provider())).clone()
}

/// `host` lower-cased without a trailing dot, if it is a DNS name (not an
/// IP address, not empty, at most [`MAX_HOST`] bytes).
fn normalise_host(host: &str) -> Result<String, String> {
    let lower = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
    let refuse = |why: &str| Err(format!("cannot mint an egress leaf certificate for host {host:?}: {why}"));
    if lower.is_empty() || lower.len() > MAX_HOST {
        return refuse("a host is a DNS name of 1 to 253 bytes");
    }
    match ServerName::try_from(lower.as_str()) {
        Ok(ServerName::DnsName(_)) => Ok(lower),
        Ok(_) => refuse("an IP address is never intercepted; bind a DNS name"),
        Err(e) => refuse(&e.to_string()),
    }
}

/// Whether the client's SNI names `host` (already normalised): ASCII
/// case-insensitive, a trailing dot ignored.
fn same_host(sni: &str, host: &str) -> bool {
    sni.strip_suffix('.').unwrap_or(sni).eq_ignore_ascii_case(host)
}

/// One certificate as PEM, 64-column base64 lines.
fn pem_encode(der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = String::with_capacity(b64.len() + b64.len() / 64 + 64);
    out.push_str("-----BEGIN CERTIFICATE-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}

/// A random positive 16-byte serial number.
fn serial() -> Result<SerialNumber, String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| format!("cannot draw a certificate serial number: {e}"))?;
    bytes[0] = (bytes[0] & 0x7f) | 0x01;
    Ok(SerialNumber::from_slice(&bytes))
}

/// Now, in Unix seconds.
fn unix_now() -> Result<i64, String> {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_err(|e| format!("the system clock is before 1970: {e}"))?
        .as_secs();
    i64::try_from(secs).map_err(|e| format!("the system clock is out of range: {e}"))
}

/// Unix seconds as a certificate time.
fn datetime(secs: i64) -> Result<OffsetDateTime, String> {
    OffsetDateTime::from_unix_timestamp(secs).map_err(|e| format!("a certificate time is out of range: {e}"))
}

#[cfg(test)]
mod tests;
