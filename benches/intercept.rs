//! Issue 36's rows: an HTTPS request through warden's egress proxy when a
//! held credential binds the host (TLS ended by warden, the placeholder
//! replaced, the response scanned) against the same request through the
//! opaque tunnel (a host no credential binds), in the same run, with the real
//! curl as the client and one loopback TLS origin answering both names.
//!
//! The origin's TLS material and `SSL_CERT_FILE` (the system roots and the
//! origin's CA, which warden verifies the origin against) come from `cargo
//! xtask bench` (`WARDEN_BENCH_TLS`); the names `api.warden.test` and
//! `evil.warden.test` from the tests' /etc/hosts block. Without them the rows
//! are skipped and say why.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use warden::egress::{EgressPolicy, Journal, Proxy};
use warden::policy::{Bind, Credential, Inject, NetGrant, Source};

/// The big download's size.
const BIG: usize = 100 << 20;

const ORIGIN: &str = r#"
import http.server, ssl, sys
BIG = int(sys.argv[3])
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    def log_message(self, *a): pass
    def do_GET(self):
        if self.path == "/big":
            self.send_response(200); self.send_header("Content-Length", str(BIG)); self.end_headers()
            chunk = b"x" * (1 << 20)
            for _ in range(BIG >> 20): self.wfile.write(chunk)
        else:
            self.send_response(200); self.send_header("Content-Length", "2"); self.end_headers(); self.wfile.write(b"ok")
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
c = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); c.load_cert_chain(sys.argv[1], sys.argv[2])
s.socket = c.wrap_socket(s.socket, server_side=True)
print(s.server_address[1], flush=True)
s.serve_forever()
"#;

/// The origin, killed when dropped.
struct Origin(Child, u16);

impl Drop for Origin {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn origin(dir: &Path) -> Origin {
    let mut child = Command::new("python3")
        .arg("-c")
        .arg(ORIGIN)
        .arg(dir.join("leaf.pem"))
        .arg(dir.join("leaf.key"))
        .arg(BIG.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let port = line.trim().parse().unwrap();
    Origin(child, port)
}

/// curl's `time_total` of each URL, fetched in one process (one kept-alive
/// connection when the URLs share a host).
fn curl(proxy: u16, cacert: &Path, urls: &[String], token: &str) -> Vec<Duration> {
    let out = Command::new("curl")
        .args(["-s", "--fail", "-w", "%{time_total}\\n", "--noproxy", ""])
        .arg("-x")
        .arg(format!("http://127.0.0.1:{proxy}"))
        .arg("--cacert")
        .arg(cacert)
        .arg("-H")
        .arg(format!("Authorization: Bearer {token}"))
        .args(urls.iter().flat_map(|u| ["-o", "/dev/null", u.as_str()]))
        .env_remove("SSL_CERT_FILE")
        .output()
        .unwrap();
    assert!(out.status.success(), "curl failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| Duration::from_secs_f64(l.trim().parse::<f64>().unwrap()))
        .collect()
}

/// A row of the table: name, p50, p95.
type Row = (&'static str, Duration, Duration);
/// A target: name, met, measured.
type Target = (&'static str, bool, String);

/// Why the rows cannot run here, if they cannot.
fn missing() -> Option<String> {
    let Some(dir) = std::env::var_os("WARDEN_BENCH_TLS") else {
        return Some("WARDEN_BENCH_TLS is unset (run through cargo xtask bench)".into());
    };
    if !Path::new(&dir).join("leaf.pem").exists() {
        return Some(format!("no origin certificate in {}", PathBuf::from(dir).display()));
    }
    for name in ["api.warden.test", "evil.warden.test"] {
        if std::net::ToSocketAddrs::to_socket_addrs(&(name, 443)).is_err() {
            return Some(format!("{name} does not resolve (add the tests' /etc/hosts block)"));
        }
    }
    None
}

/// The rows and the target.
pub(crate) fn rows(percentile: impl Fn(Vec<Duration>, f64) -> Duration) -> (Vec<Row>, Vec<Target>) {
    if let Some(why) = missing() {
        println!("credential interception rows skipped: {why}");
        return (Vec::new(), Vec::new());
    }
    let dir = PathBuf::from(std::env::var_os("WARDEN_BENCH_TLS").unwrap());
    let o = origin(&dir);
    let port = o.1;
    let cred = Credential {
        name: "bench".into(),
        source: Source::Command(vec!["printf".into(), "ghp_benchRealValue0123456789abcdefABCDEF".into()]),
        variable: "BENCH_TOKEN".into(),
        binds: vec![Bind {
            host: "api.warden.test".into(),
            port,
            methods: Vec::new(),
            paths: Vec::new(),
            inject: Inject::Bearer,
            always: false,
            user: String::new(),
            body: false,
        }],
        description: None,
        location: "bench".into(),
    };
    let held = warden::egress::vault::hold("bench", &[cred]).unwrap();
    let placeholder = held[0].placeholder.clone();
    let warden_ca = dir.join("warden-ca.pem");
    std::fs::write(&warden_ca, warden::egress::intercept::authority().unwrap().cert_pem()).unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let proxy = listener.local_addr().unwrap().port();
    let policy = EgressPolicy {
        tool: "bench".into(),
        grants: ["api.warden.test", "evil.warden.test"]
            .iter()
            .map(|h| NetGrant { host: h.to_string(), port })
            .collect(),
        allow_private: true,
        credentials: held,
    };
    let journal = Arc::new(Journal::default());
    let _proxy = Proxy::start(listener, Arc::new(policy), journal.clone()).unwrap();
    let origin_ca = dir.join("ca.pem");
    let url = |host: &str, path: &str| format!("https://{host}:{port}{path}");
    let (opaque, bound) = (url("evil.warden.test", "/small"), url("api.warden.test", "/small"));
    // Fresh connections: CONNECT, the handshake(s), one request.
    let (mut fresh_opaque, mut fresh_bound) = (Vec::new(), Vec::new());
    for _ in 0..40 {
        fresh_opaque.extend(curl(proxy, &origin_ca, std::slice::from_ref(&opaque), &placeholder));
        fresh_bound.extend(curl(proxy, &warden_ca, std::slice::from_ref(&bound), &placeholder));
    }
    // Kept-alive connections: 300 requests each, the first (the setup) dropped.
    let mut kept_opaque = curl(proxy, &origin_ca, &vec![opaque; 301], &placeholder);
    let mut kept_bound = curl(proxy, &warden_ca, &vec![bound; 301], &placeholder);
    kept_opaque.remove(0);
    kept_bound.remove(0);
    let (mut big_opaque, mut big_bound) = (f64::MAX, f64::MAX);
    for _ in 0..3 {
        let o = curl(proxy, &origin_ca, &[url("evil.warden.test", "/big")], &placeholder)[0];
        let b = curl(proxy, &warden_ca, &[url("api.warden.test", "/big")], &placeholder)[0];
        big_opaque = big_opaque.min(o.as_secs_f64());
        big_bound = big_bound.min(b.as_secs_f64());
    }
    let used = journal.take().map(|j| j.to_string()).unwrap_or_default();
    assert!(used.contains("\"intercepted\":true"), "the bound host was intercepted: {used:.400}");
    let added_ms =
        (percentile(kept_bound.clone(), 0.5).as_secs_f64() - percentile(kept_opaque.clone(), 0.5).as_secs_f64()) * 1e3;
    let mb = BIG as f64 / 1e6;
    println!(
        "100 MB over HTTPS: opaque tunnel {:.0} MB/s, intercepted {:.0} MB/s ({:.0} %)",
        mb / big_opaque,
        mb / big_bound,
        100.0 * big_opaque / big_bound
    );
    let secs = Duration::from_secs_f64;
    let rows = vec![
        (
            "HTTPS GET, fresh connection, opaque tunnel (curl)",
            percentile(fresh_opaque.clone(), 0.5),
            percentile(fresh_opaque, 0.95),
        ),
        (
            "... intercepted, credential substituted",
            percentile(fresh_bound.clone(), 0.5),
            percentile(fresh_bound, 0.95),
        ),
        (
            "HTTPS GET, kept-alive connection, opaque tunnel",
            percentile(kept_opaque.clone(), 0.5),
            percentile(kept_opaque, 0.95),
        ),
        ("... intercepted, credential substituted", percentile(kept_bound.clone(), 0.5), percentile(kept_bound, 0.95)),
        ("100 MB HTTPS download, opaque tunnel (best of 3)", secs(big_opaque), secs(big_opaque)),
        ("100 MB HTTPS download, intercepted (best of 3)", secs(big_bound), secs(big_bound)),
    ];
    let targets = vec![(
        "intercepted request <= 1 ms over the opaque tunnel (kept alive)",
        added_ms <= 1.0,
        format!("{added_ms:+.2} ms"),
    )];
    (rows, targets)
}
