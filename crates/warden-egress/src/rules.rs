//! Which destinations a tool's grants admit, and which addresses are private
//! ([`EgressPolicy`], [`private_kind`]), the same for the egress proxy and for
//! components' sockets. [`EgressPolicy::decide`] runs the three steps: the grant
//! ([`EgressPolicy::grant_for`]), warden's own resolution ([`resolve`], at most
//! [`MAX_ADDRESSES`] answers within [`RESOLVE_TIMEOUT`]), and the private-address
//! rule ([`EgressPolicy::admit_address`]) that stops DNS rebinding. Every refusal
//! names the key to change (docs/policy.md, `net.connect`).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use warden_policy::NetGrant;

/// The resolved addresses kept per name (the rest are dropped).
pub const MAX_ADDRESSES: usize = 16;
/// How long resolving one name may take.
pub const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);

/// What the proxy checks each connection against.
#[derive(Debug, Clone)]
pub struct EgressPolicy {
    /// The tool (or server) the connections belong to, for refusal texts.
    pub tool: String,
    /// Its `net.connect` grants.
    pub grants: Vec<NetGrant>,
    /// `net.allow_private = true`.
    pub allow_private: bool,
    /// The credentials it holds: a CONNECT to one's bind is intercepted.
    pub credentials: Vec<std::sync::Arc<crate::vault::Held>>,
}

/// Why a connection was not made, as [`EgressPolicy::decide`] tells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// No grant covers the requested `host:port` (or the host is not a name
    /// or an address): a policy refusal.
    NotGranted(String),
    /// The name did not resolve (or took too long): an upstream failure.
    Unresolved(String),
    /// Every resolved address is private and not admitted; the first one and
    /// why: a policy refusal.
    Private {
        /// The first refused address.
        address: SocketAddr,
        /// The refusal text.
        reason: String,
    },
}

impl Refusal {
    /// The text for the program and the audit record.
    pub fn reason(&self) -> &str {
        match self {
            Refusal::NotGranted(r) | Refusal::Unresolved(r) | Refusal::Private { reason: r, .. } => r,
        }
    }

    /// Whether the policy refused (as opposed to the network failing).
    pub fn is_policy(&self) -> bool {
        !matches!(self, Refusal::Unresolved(_))
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.reason())
    }
}

impl From<Refusal> for String {
    fn from(r: Refusal) -> String {
        match r {
            Refusal::NotGranted(s) | Refusal::Unresolved(s) | Refusal::Private { reason: s, .. } => s,
        }
    }
}

/// A connection the policy admits: the grant that covers it and the admitted
/// addresses, in the resolver's order (never empty).
#[derive(Debug, Clone)]
pub struct Decision {
    /// The grant that matched the requested `host:port`.
    pub grant: NetGrant,
    /// The addresses to try, in order. Addresses of a mixed answer that were
    /// refused are not here (see `dropped`).
    pub addrs: Vec<SocketAddr>,
    /// Resolved addresses refused as private, with the reason.
    pub dropped: Vec<(SocketAddr, String)>,
}

/// What kind of non-public address `ip` is, or `None` when it is public.
///
/// IPv4-mapped (`::ffff:a.b.c.d`), IPv4-compatible (`::a.b.c.d`), NAT64
/// (`64:ff9b::/96`) and 6to4 (`2002::/16`) IPv6 addresses are classified by the
/// IPv4 address they carry.
pub fn private_kind(ip: IpAddr) -> Option<&'static str> {
    let kind = match ip {
        IpAddr::V4(v4) => v4_kind(v4),
        IpAddr::V6(v6) => v6_kind(v6),
    };
    kind.or_else(|| own_addresses().contains(&ip.to_canonical()).then_some("this host's own"))
}

/// How long the host's own addresses are trusted before they are read again.
const OWN_ADDRESSES_TTL: std::time::Duration = std::time::Duration::from_secs(10);

/// The addresses of this host's interfaces (`getifaddrs`), read at most every
/// [`OWN_ADDRESSES_TTL`]: a granted name that resolves to one of them would
/// reach the host's own services on its public address (a server bound to
/// `0.0.0.0`), so they count as private.
fn own_addresses() -> Vec<IpAddr> {
    static CACHE: std::sync::Mutex<Option<(std::time::Instant, Vec<IpAddr>)>> = std::sync::Mutex::new(None);
    let mut cache = CACHE.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((at, addrs)) = cache.as_ref()
        && at.elapsed() < OWN_ADDRESSES_TTL
    {
        return addrs.clone();
    }
    let addrs: Vec<IpAddr> = nix::ifaddrs::getifaddrs()
        .map(|all| {
            all.filter_map(|i| i.address)
                .filter_map(|a| {
                    a.as_sockaddr_in()
                        .map(|v4| IpAddr::V4(v4.ip()))
                        .or_else(|| a.as_sockaddr_in6().map(|v6| IpAddr::V6(v6.ip())))
                })
                .map(|ip| ip.to_canonical())
                .collect()
        })
        .unwrap_or_default();
    *cache = Some((std::time::Instant::now(), addrs.clone()));
    addrs
}

fn v4_kind(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, d] = ip.octets();
    Some(match (a, b, c, d) {
        (0, ..) => "unspecified",
        (10, ..) => "private",
        (100, 64..=127, ..) => "CGNAT",
        (127, ..) => "loopback",
        (169, 254, 169, 254) => "cloud metadata",
        (169, 254, ..) => "link-local",
        (172, 16..=31, ..) => "private",
        (192, 0, 0, _) => "reserved",
        // Documentation (TEST-NET-1..3) and the old 6to4 relay anycast.
        (192, 0, 2, _) | (198, 51, 100, _) | (203, 0, 113, _) | (192, 88, 99, _) => "reserved",
        (192, 168, ..) => "private",
        (198, 18..=19, ..) => "reserved",
        (224..=239, ..) => "multicast",
        (255, 255, 255, 255) => "broadcast",
        (240..=255, ..) => "reserved",
        _ => return None,
    })
}

fn v6_kind(ip: Ipv6Addr) -> Option<&'static str> {
    let s = ip.segments();
    let embedded = |hi: u16, lo: u16| v4_kind(Ipv4Addr::new((hi >> 8) as u8, hi as u8, (lo >> 8) as u8, lo as u8));
    if ip.is_unspecified() {
        return Some("unspecified");
    }
    if ip.is_loopback() {
        return Some("loopback");
    }
    if ip == Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x254) {
        return Some("cloud metadata");
    }
    match s {
        // IPv4-mapped and IPv4-compatible.
        [0, 0, 0, 0, 0, 0xffff, hi, lo] | [0, 0, 0, 0, 0, 0, hi, lo] => embedded(hi, lo),
        // SIIT (IPv4-translated).
        [0, 0, 0, 0, 0xffff, 0, hi, lo] => embedded(hi, lo),
        // NAT64 well-known prefix.
        [0x64, 0xff9b, 0, 0, 0, 0, hi, lo] => embedded(hi, lo),
        // Local-use NAT64, Teredo (its IPv4s are obfuscated), documentation.
        [0x64, 0xff9b, 1, ..] => Some("private"),
        [0x2001, 0, ..] | [0x2001, 0xdb8, ..] => Some("reserved"),
        // 6to4.
        [0x2002, hi, lo, ..] => embedded(hi, lo),
        [first, ..] if first & 0xfe00 == 0xfc00 => Some("private"),
        [first, ..] if first & 0xffc0 == 0xfe80 => Some("link-local"),
        [first, ..] if first & 0xffc0 == 0xfec0 => Some("site-local"),
        [first, ..] if first & 0xff00 == 0xff00 => Some("multicast"),
        _ => None,
    }
}

/// A requested host in the form grants are compared in: lower case, no
/// trailing dot, IPv6 without brackets. `Err` when it is neither a name nor an
/// address.
fn normalise(host: &str) -> Result<Host, String> {
    let h = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    if let Ok(ip) = h.parse::<IpAddr>() {
        return Ok(Host::Ip(ip));
    }
    if host.starts_with('[') {
        return Err(format!("{host:?} is not an IP address"));
    }
    let name = h.strip_suffix('.').unwrap_or(h).to_ascii_lowercase();
    let bad_label = |l: &str| {
        l.is_empty() || l.len() > 63 || !l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    if name.is_empty() {
        return Err("the request names no host".into());
    }
    if name.len() > 253 || name.split('.').any(bad_label) {
        return Err(format!("{:?} is not a host name or IP address", truncate(host, 80)));
    }
    // The resolver reads `2130706433`, `127.1` and `0x7f.1` as addresses; no
    // real name ends in a numeric label, so such a "name" is refused rather
    // than let an address pass a grant meant for names (`*`).
    let last = name.rsplit('.').next().unwrap_or_default();
    let hex = last.strip_prefix("0x").is_some_and(|h| h.bytes().all(|b| b.is_ascii_hexdigit()));
    if hex || last.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "{:?} is an address in a form warden does not take; write it as a dotted IPv4 or an IPv6 address",
            truncate(host, 80)
        ));
    }
    Ok(Host::Name(name))
}

#[derive(Debug, PartialEq, Eq)]
enum Host {
    Name(String),
    Ip(IpAddr),
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Name(n) => f.write_str(n),
            Host::Ip(IpAddr::V6(v6)) => write!(f, "[{v6}]"),
            Host::Ip(ip) => write!(f, "{ip}"),
        }
    }
}

fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// `host:port` as a grant would spell it (`[v6]:port`).
fn spell(ip: IpAddr, port: u16) -> String {
    SocketAddr::new(ip, port).to_string()
}

/// A grant's host as an address, when it is one.
fn grant_ip(g: &NetGrant) -> Option<IpAddr> {
    let h = g.host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(&g.host);
    h.parse().ok()
}

impl EgressPolicy {
    /// The grant that covers `host:port`, or why none does (naming the entry
    /// to add to `net.connect`). Exact names are preferred over wildcards.
    pub fn grant_for(&self, host: &str, port: u16) -> Result<&NetGrant, String> {
        let tool = &self.tool;
        let h = normalise(host).map_err(|e| format!("{tool}: {e}"))?;
        let ports = || self.grants.iter().filter(|g| g.port == port);
        let found = match &h {
            Host::Ip(ip) => ports().find(|g| grant_ip(g) == Some(*ip)),
            Host::Name(name) => {
                let host_of = |g: &NetGrant| g.host.trim_end_matches('.').to_ascii_lowercase();
                ports().find(|g| host_of(g) == *name).or_else(|| {
                    ports().find(|g| {
                        let gh = host_of(g);
                        if gh == "*" {
                            return true;
                        }
                        gh.strip_prefix("*.").is_some_and(|suffix| {
                            name.len() > suffix.len() + 1 && name.ends_with(&format!(".{suffix}"))
                        })
                    })
                })
            }
        };
        found.ok_or_else(|| {
            let wanted = format!("{h}:{port}");
            let mut text =
                format!("{tool} has no grant for {wanted}; add \"{wanted}\" to net.connect of {tool} in the policy");
            if matches!(h, Host::Ip(_)) && ports().any(|g| g.host == "*") {
                text.push_str(" (\"*\" covers names, never addresses)");
            }
            text
        })
    }

    /// Whether a connection for `requested_host` may go to `ip` (on any
    /// port): public addresses always, non-public ones only with
    /// `net.allow_private = true` or a grant naming that address literally.
    pub fn admit_address(&self, requested_host: &str, ip: IpAddr) -> Result<(), String> {
        self.admit(requested_host, ip, None)
    }

    /// As [`EgressPolicy::admit_address`], but a literal grant must also name
    /// `addr`'s port. The proxy and [`EgressPolicy::decide`] use this one.
    pub fn admit_socket_addr(&self, requested_host: &str, addr: SocketAddr) -> Result<(), String> {
        self.admit(requested_host, addr.ip(), Some(addr.port()))
    }

    fn admit(&self, requested_host: &str, ip: IpAddr, port: Option<u16>) -> Result<(), String> {
        let Some(kind) = private_kind(ip) else { return Ok(()) };
        let canonical = ip.to_canonical();
        let named = self
            .grants
            .iter()
            .any(|g| port.is_none_or(|p| p == g.port) && grant_ip(g).map(|i| i.to_canonical()) == Some(canonical));
        if self.allow_private || named {
            return Ok(());
        }
        let tool = &self.tool;
        let article = match kind {
            k if k.starts_with("this") => "",
            k if k.starts_with(['a', 'e', 'i', 'o', 'u']) => "an ",
            _ => "a ",
        };
        let spelled = match port {
            Some(p) => spell(ip, p),
            None => format!("{}:PORT", Host::Ip(ip)),
        };
        let host = truncate(requested_host, 80);
        Err(format!(
            "{host} resolves to {ip}, {article}{kind} address; name the address in net.connect (\"{spelled}\") \
             or set net.allow_private = true for {tool}"
        ))
    }

    /// Grant, resolve and admit `host:port` (see the module documentation).
    /// Of a mixed answer only the admitted addresses are kept; when none is
    /// admitted the first refusal is the error.
    pub async fn decide(&self, host: &str, port: u16) -> Result<Decision, Refusal> {
        let grant = self.grant_for(host, port).map_err(Refusal::NotGranted)?.clone();
        let addrs = resolve(host, port).await.map_err(Refusal::Unresolved)?;
        self.admit_all(host, grant, addrs)
    }

    fn admit_all(&self, host: &str, grant: NetGrant, resolved: Vec<SocketAddr>) -> Result<Decision, Refusal> {
        let mut addrs = Vec::new();
        let mut dropped = Vec::new();
        for a in resolved {
            match self.admit_socket_addr(host, a) {
                Ok(()) => addrs.push(a),
                Err(e) => dropped.push((a, e)),
            }
        }
        if addrs.is_empty() {
            return Err(match dropped.into_iter().next() {
                Some((address, reason)) => Refusal::Private { address, reason },
                None => Refusal::Unresolved(format!("{} has no addresses", truncate(host, 80))),
            });
        }
        Ok(Decision { grant, addrs, dropped })
    }
}

/// `host` as an address, when it is an IP literal (`[v6]` too).
pub fn ip_literal(host: &str) -> Option<IpAddr> {
    let h = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    h.parse().ok()
}

/// Keeps the first [`MAX_ADDRESSES`] distinct addresses.
fn bound(found: impl Iterator<Item = SocketAddr>) -> Vec<SocketAddr> {
    let mut out: Vec<SocketAddr> = Vec::new();
    for a in found {
        if out.len() == MAX_ADDRESSES {
            break;
        }
        if !out.contains(&a) {
            out.push(a);
        }
    }
    out
}

fn unresolved(host: &str, e: impl fmt::Display) -> String {
    format!("could not resolve {}: {e}", truncate(host, 80))
}

/// Resolves `host` (a name or an IP literal, parsed without a lookup) with
/// the system resolver, within [`RESOLVE_TIMEOUT`], on a tokio runtime.
pub async fn resolve(host: &str, port: u16) -> Result<Vec<SocketAddr>, String> {
    let name = match normalise(host)? {
        Host::Name(n) => n,
        Host::Ip(ip) => return Ok(vec![SocketAddr::new(ip, port)]),
    };
    match tokio::time::timeout(RESOLVE_TIMEOUT, tokio::net::lookup_host((name.as_str(), port))).await {
        Ok(Ok(it)) => {
            let v = bound(it);
            if v.is_empty() { Err(unresolved(host, "no addresses")) } else { Ok(v) }
        }
        Ok(Err(e)) => Err(unresolved(host, e)),
        Err(_) => Err(unresolved(host, format!("no answer within {}s", RESOLVE_TIMEOUT.as_secs()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(grants: &[(&str, u16)], allow_private: bool) -> EgressPolicy {
        EgressPolicy {
            tool: "fetch".into(),
            grants: grants.iter().map(|(h, p)| NetGrant { host: h.to_string(), port: *p }).collect(),
            allow_private,
            credentials: Vec::new(),
        }
    }

    /// [`EgressPolicy::decide`] on warden's egress runtime, from a test thread.
    fn decide_now(p: &EgressPolicy, host: &str, port: u16) -> Result<Decision, Refusal> {
        let rt = crate::runtime().unwrap_or_else(|e| panic!("{e}"));
        rt.block_on(p.decide(host, port))
    }

    fn kind(s: &str) -> Option<&'static str> {
        private_kind(s.parse().unwrap_or_else(|e| panic!("{s}: {e}")))
    }

    #[test]
    fn documentation_translation_and_this_hosts_own_addresses_are_private() {
        for a in ["192.0.2.2", "198.51.100.7", "203.0.113.9", "192.88.99.1", "2001:db8::1", "2001:0:4136::1"] {
            assert_eq!(kind(a), Some("reserved"), "{a}");
        }
        assert_eq!(kind("::ffff:0:10.0.0.1"), Some("private"));
        assert_eq!(kind("64:ff9b:1::1"), Some("private"));
        // Every address of this host's interfaces (its public ones included).
        for ip in own_addresses() {
            assert!(private_kind(ip).is_some(), "{ip}");
        }
        let p = policy(&[("*", 80)], false);
        if let Some(ip) = own_addresses().into_iter().find(|ip| v4_or_v6_kind(*ip).is_none()) {
            let e = p.admit_address("self.example", ip).err().unwrap_or_default();
            assert!(e.contains("this host's own address"), "{e}");
        }
    }

    fn v4_or_v6_kind(ip: IpAddr) -> Option<&'static str> {
        match ip {
            IpAddr::V4(v4) => v4_kind(v4),
            IpAddr::V6(v6) => v6_kind(v6),
        }
    }

    #[test]
    fn private_v4() {
        for (a, k) in [
            ("0.0.0.0", "unspecified"),
            ("0.1.2.3", "unspecified"),
            ("10.1.2.3", "private"),
            ("100.64.0.1", "CGNAT"),
            ("100.127.255.255", "CGNAT"),
            ("127.0.0.1", "loopback"),
            ("127.255.0.9", "loopback"),
            ("169.254.169.254", "cloud metadata"),
            ("169.254.1.1", "link-local"),
            ("172.16.0.1", "private"),
            ("172.31.255.255", "private"),
            ("192.0.0.8", "reserved"),
            ("192.168.1.1", "private"),
            ("198.18.0.1", "reserved"),
            ("198.19.255.255", "reserved"),
            ("224.0.0.1", "multicast"),
            ("239.255.255.250", "multicast"),
            ("240.0.0.1", "reserved"),
            ("255.255.255.255", "broadcast"),
        ] {
            assert_eq!(kind(a), Some(k), "{a}");
        }
        for a in [
            "8.8.8.8",
            "100.63.255.255",
            "100.128.0.0",
            "172.15.0.1",
            "172.32.0.1",
            "192.0.1.1",
            "198.20.0.1",
            "1.1.1.1",
        ] {
            assert_eq!(kind(a), None, "{a}");
        }
    }

    #[test]
    fn private_v6() {
        for (a, k) in [
            ("::", "unspecified"),
            ("::1", "loopback"),
            ("0:0:0:0:0:0:0:1", "loopback"),
            ("fc00::1", "private"),
            ("fd12:3456::1", "private"),
            ("fd00:ec2::254", "cloud metadata"),
            ("fe80::1", "link-local"),
            ("febf::1", "link-local"),
            ("fec0::1", "site-local"),
            ("ff02::1", "multicast"),
            ("::ffff:127.0.0.1", "loopback"),
            ("::ffff:169.254.169.254", "cloud metadata"),
            ("::ffff:10.0.0.1", "private"),
            ("::127.0.0.1", "loopback"),
            ("::10.0.0.1", "private"),
            ("64:ff9b::a9fe:a9fe", "cloud metadata"),
            ("64:ff9b::7f00:1", "loopback"),
            ("2002:7f00:1::1", "loopback"),
            ("2002:c0a8:0101::", "private"),
        ] {
            assert_eq!(kind(a), Some(k), "{a}");
        }
        for a in ["2001:4860:4860::8888", "::ffff:8.8.8.8", "64:ff9b::808:808", "2002:808:808::1", "2606:4700::1111"] {
            assert_eq!(kind(a), None, "{a}");
        }
    }

    #[test]
    fn grants_by_name() {
        let p = policy(&[("registry.example", 443), ("*.pkg.example", 443), ("exact.example", 80)], false);
        assert!(p.grant_for("registry.example", 443).is_ok());
        assert!(p.grant_for("Registry.EXAMPLE.", 443).is_ok(), "case and trailing dot");
        assert!(p.grant_for("a.pkg.example", 443).is_ok());
        assert!(p.grant_for("a.b.PKG.example", 443).is_ok());
        assert!(p.grant_for("pkg.example", 443).is_err(), "the suffix itself is not below it");
        assert!(p.grant_for("evilpkg.example", 443).is_err());
        assert!(p.grant_for("registry.example", 80).is_err(), "ports must be equal");
        assert!(p.grant_for("exact.example", 80).is_ok());
        let e = p.grant_for("evil.example", 443).err().unwrap_or_default();
        assert_eq!(
            e,
            "fetch has no grant for evil.example:443; add \"evil.example:443\" to net.connect of fetch in the policy"
        );
        assert!(p.grant_for("", 443).is_err());
        assert!(p.grant_for("registry.example/x", 443).is_err());
        assert!(p.grant_for("a..pkg.example", 443).is_err());
    }

    #[test]
    fn star_covers_names_not_addresses() {
        let p = policy(&[("*", 443)], false);
        assert!(p.grant_for("anything.example", 443).is_ok());
        assert!(p.grant_for("localhost", 443).is_ok());
        assert!(p.grant_for("anything.example", 80).is_err());
        for odd in ["2130706433", "127.1", "0x7f.1", "1.2.3.0x4", "08.8.8.8"] {
            let e = p.grant_for(odd, 443).err().unwrap_or_default();
            assert!(e.contains("an address in a form"), "{odd}: {e}");
        }
        for ip in ["1.2.3.4", "[::1]", "::1", "2606:4700::1111"] {
            let e = p.grant_for(ip, 443).err().unwrap_or_default();
            assert!(e.contains("never addresses"), "{ip}: {e}");
        }
    }

    #[test]
    fn grants_by_address() {
        let p = policy(&[("127.0.0.1", 8080), ("::1", 8080), ("2001:db8:0:0::1", 443)], false);
        assert!(p.grant_for("127.0.0.1", 8080).is_ok());
        assert!(p.grant_for("127.0.0.2", 8080).is_err());
        assert!(p.grant_for("localhost", 8080).is_err(), "a name is not the address");
        assert!(p.grant_for("[::1]", 8080).is_ok());
        assert!(p.grant_for("0:0::1", 8080).is_ok(), "IPv6 forms are normalised");
        assert!(p.grant_for("[2001:DB8::1]", 443).is_ok());
        let e = p.grant_for("::2", 8080).err().unwrap_or_default();
        assert!(e.contains("\"[::2]:8080\""), "{e}");
    }

    #[test]
    fn private_addresses_need_a_literal_grant_or_allow_private() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap_or_else(|e| panic!("{e}"));
        let p = policy(&[("registry.example", 443), ("10.0.0.5", 443)], false);
        assert!(p.admit_address("registry.example", ip("93.184.216.34")).is_ok());
        let e = p.admit_address("registry.example", ip("127.0.0.1")).err().unwrap_or_default();
        assert_eq!(
            e,
            "registry.example resolves to 127.0.0.1, a loopback address; name the address in net.connect \
             (\"127.0.0.1:PORT\") or set net.allow_private = true for fetch"
        );
        let e = p.admit_address("registry.example", ip("169.254.169.254")).err().unwrap_or_default();
        assert!(e.contains("a cloud metadata address"), "{e}");
        assert!(p.admit_address("registry.example", ip("10.0.0.5")).is_ok(), "named literally");
        assert!(p.admit_address("registry.example", ip("::ffff:10.0.0.5")).is_ok(), "the mapped form too");
        let sa = |s: &str| s.parse::<SocketAddr>().unwrap_or_else(|e| panic!("{e}"));
        assert!(p.admit_socket_addr("registry.example", sa("10.0.0.5:443")).is_ok());
        let e = p.admit_socket_addr("registry.example", sa("10.0.0.5:22")).err().unwrap_or_default();
        assert!(e.contains("\"10.0.0.5:22\""), "{e}");
        let e = p.admit_socket_addr("x", sa("[fe80::1]:443")).err().unwrap_or_default();
        assert!(e.contains("a link-local address") && e.contains("\"[fe80::1]:443\""), "{e}");
        let open = policy(&[("registry.example", 443)], true);
        assert!(open.admit_address("registry.example", ip("127.0.0.1")).is_ok());
    }

    #[test]
    fn decide_resolves_and_admits() {
        let p = policy(&[("localhost", 5000), ("127.0.0.1", 5001)], false);
        match decide_now(&p, "localhost", 5000) {
            Err(Refusal::Private { address, reason }) => {
                assert!(address.ip().is_loopback());
                assert!(reason.contains("net.allow_private = true"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        let d = decide_now(&p, "127.0.0.1", 5001).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(d.addrs, vec!["127.0.0.1:5001".parse().unwrap_or_else(|e| panic!("{e}"))]);
        assert!(matches!(decide_now(&p, "other.example", 5000), Err(Refusal::NotGranted(_))));
        let open = policy(&[("localhost", 5000)], true);
        let d = decide_now(&open, "localhost", 5000).unwrap_or_else(|e| panic!("{e}"));
        assert!(!d.addrs.is_empty() && d.addrs.len() <= MAX_ADDRESSES);
        let r = decide_now(&open, "localhost", 5000).map(|d| d.grant.to_string());
        assert_eq!(r.ok().as_deref(), Some("localhost:5000"));
        let bad = policy(&[("no-such-host.invalid", 80)], true);
        assert!(matches!(decide_now(&bad, "no-such-host.invalid", 80), Err(Refusal::Unresolved(_))));
    }
}
