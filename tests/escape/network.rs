//! Network escapes: TCP, UDP, MPTCP, raw, packet and netlink sockets, abstract
//! and pathname unix sockets, DNS; without a grant, and beside one; and the
//! egress proxy, attacked as a program inside the call would.
//!
//! Where the host lets warden make namespaces (as root, or an ordinary user
//! with unprivileged user namespaces) every process call has a network
//! namespace of its own with only loopback: IP sockets, `bind` and `listen`
//! work inside, a connection to the host's 127.0.0.1 is refused (another
//! loopback) and every other address is unreachable. With `net.connect`
//! grants warden's proxy listens on 127.0.0.1:3128 inside and is the only
//! way out. The listeners these cases aim at live on the host: a case is
//! contained when its attempts were refused the way it expects and nothing
//! arrived at them; the proxy's cases carry a positive control (a granted
//! target really reached through the same mechanism), so none passes because
//! nothing works at all. Without a network namespace (the case reads the
//! record's `sandbox.namespaces`), a call without grants has no `AF_INET`
//! socket at all (`EPERM`), and one with grants is unavailable in enforce
//! mode (`SANDBOX_UNAVAILABLE`).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::scene::{PYTHON, SHELL, Tool};
use crate::util::kit::{brief, code};
use crate::util::{Run, clip};
use crate::{Case, Observed, Scene};

const CLASS: &str = "network";

fn c(
    id: &'static str,
    runtime: &'static str,
    attempt: &'static str,
    expected: &'static str,
    run: fn(&Scene) -> Observed,
) -> Case {
    Case { id, class: CLASS, runtime, attempt, expected, heavy: false, run }
}

/// A TCP listener that records whether anything connected.
struct Tcp(TcpListener);

impl Tcp {
    fn new() -> Tcp {
        Tcp::on("127.0.0.1:0")
    }
    fn on(addr: &str) -> Tcp {
        let l = TcpListener::bind(addr).unwrap();
        l.set_nonblocking(true).unwrap();
        Tcp(l)
    }
    /// On the host's `::1` (None when the host has no IPv6 loopback).
    fn v6() -> Option<Tcp> {
        let l = TcpListener::bind("[::1]:0").ok()?;
        l.set_nonblocking(true).unwrap();
        Some(Tcp(l))
    }
    fn port(&self) -> u16 {
        self.0.local_addr().unwrap().port()
    }
    /// Connections waiting (a connect completes in the kernel before the call returns).
    fn arrived(&self) -> usize {
        let mut n = 0;
        while self.0.accept().is_ok() {
            n += 1;
        }
        n
    }
}

struct Udp(UdpSocket);

impl Udp {
    fn new() -> Udp {
        Udp::on("127.0.0.1:0")
    }
    fn on(addr: &str) -> Udp {
        let u = UdpSocket::bind(addr).unwrap();
        u.set_nonblocking(true).unwrap();
        Udp(u)
    }
    fn port(&self) -> u16 {
        self.0.local_addr().unwrap().port()
    }
    fn arrived(&self) -> usize {
        let mut n = 0;
        while self.0.recv_from(&mut [0u8; 512]).is_ok() {
            n += 1;
        }
        n
    }
}

/// A tiny HTTP server on the host's 127.0.0.1 that answers every connection
/// `200 hello` and records, per connection, every byte it received (reading on
/// for a moment after the head, so a request smuggled behind another is seen).
struct Http {
    port: u16,
    seen: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
}

impl Http {
    fn new() -> Http {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.set_nonblocking(true).unwrap();
        let port = l.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (seen2, stop2) = (seen.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop2.load(Ordering::Relaxed) {
                match l.accept() {
                    Ok((conn, _)) => {
                        let seen = seen2.clone();
                        std::thread::spawn(move || serve_one(conn, &seen));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Http { port, seen, stop }
    }
    /// Connections so far, after letting the handlers finish.
    fn arrived(&self) -> usize {
        std::thread::sleep(Duration::from_millis(400));
        self.seen.lock().unwrap().len()
    }
    /// Everything received, all connections.
    fn received(&self) -> String {
        std::thread::sleep(Duration::from_millis(400));
        self.seen.lock().unwrap().join("\n")
    }
}

impl Drop for Http {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn serve_one(mut conn: TcpStream, seen: &Mutex<Vec<String>>) {
    let _ = conn.set_nonblocking(false);
    let _ = conn.set_read_timeout(Some(Duration::from_millis(300)));
    let mut got = Vec::new();
    let started = Instant::now();
    let mut buf = [0u8; 4096];
    while started.elapsed() < Duration::from_secs(3) {
        match conn.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            // Quiet for 300 ms after a whole head: the request is in.
            Err(_) if got.windows(4).any(|w| w == b"\r\n\r\n") => break,
            Err(_) => {}
        }
    }
    seen.lock().unwrap().push(String::from_utf8_lossy(&got).into_owned());
    let _ = conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello");
}

fn unix_arrived(l: &UnixListener) -> usize {
    let mut n = 0;
    while l.accept().is_ok() {
        n += 1;
    }
    n
}

/// The probe's prelude: `attempt(name, fn)` prints `name refused ERRNO` or `name ESCAPED`.
const PRELUDE: &str = "import socket, errno\n\
def attempt(name, fn):\n\
\x20   try:\n\
\x20       fn()\n\
\x20       print(name, 'ESCAPED')\n\
\x20   except OSError as e:\n\
\x20       print(name, 'refused', errno.errorcode.get(e.errno, e.errno))\n";

fn probe(s: &Scene, id: &str, tool: Tool<'_>, body: &str) -> Run {
    let ws = s.ws(id);
    s.python(&ws, tool, &format!("{PRELUDE}{body}"), "true")
}

/// Every attempt refused with `errno` (as many as `n`), nothing escaped, nothing arrived.
fn judged(r: &Run, errno: &str, n: usize, arrived: usize) -> Observed {
    let out = r.out();
    let refusals = out.matches(&format!("refused {errno}")).count();
    let ok = r.success() && refusals >= n && !out.contains("ESCAPED") && arrived == 0;
    Observed::new(ok, format!("{}; arrived at the listener: {arrived}", r.brief()))
}

fn granted(port: u16) -> Tool<'static> {
    let net: &'static str = Box::leak(format!("127.0.0.1:{port}").into_boxed_str());
    Tool { read: &[], net: Box::leak(Box::new([net])), limits: "timeout = \"20s\"" }
}

/// Whether a process call gets a network namespace of its own here.
fn netns(s: &Scene) -> bool {
    s.call_has("net")
}

/// A call with grants on a host without a network namespace: unavailable in
/// enforce mode (nothing ran, so nothing may have arrived).
fn unavailable(r: &Run, arrived: usize) -> Observed {
    let ok = r.error_code() == "SANDBOX_UNAVAILABLE" && arrived == 0;
    Observed::new(ok, format!("no network namespace here: {}; arrived: {arrived}", r.brief()))
}

/// [`judged`] for a call with grants: in its network namespace, or unavailable without one.
fn judged_granted(s: &Scene, r: &Run, errno: &str, n: usize, arrived: usize) -> Observed {
    if netns(s) { judged(r, errno, n, arrived) } else { unavailable(r, arrived) }
}

// ---------------------------------------------------------------- the proxy's probes

/// The probe's prelude for the proxy's cases: each attempt prints one line
/// `NAME: RESULT`, RESULT being `refused ERRNO`, `timeout`, `connected`, `ok`,
/// `http CODE BODY`, `socks REPLY` or what else went wrong.
const NET_PRELUDE: &str = r#"import socket, errno, os, re, sys, time
PROXY = ('127.0.0.1', 3128)
def say(name, r):
    print(f'{name}: {r}', flush=True)
def oserr(e):
    if isinstance(getattr(e, 'reason', None), OSError):
        e = e.reason
    if isinstance(e, socket.gaierror):
        return 'lookup failed ' + str(e)
    if isinstance(e, socket.timeout):
        return 'timeout'
    if e.errno is None:
        return 'failed ' + str(e)
    return 'refused ' + str(errno.errorcode.get(e.errno, e.errno))
def attempt(name, fn):
    try:
        r = fn()
        say(name, 'ok' if r is None else r)
    except OSError as e:
        say(name, oserr(e))
def udp_send(host, port, data=b'x', family=socket.AF_INET):
    socket.socket(family, socket.SOCK_DGRAM).sendto(data, (host, port))
def udp_conn(host, port, data=b'x'):
    x = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    x.settimeout(3)
    x.connect((host, port))
    x.send(data)
    x.recv(512)
    return 'ANSWERED'
def read_all(s, wait=3):
    s.settimeout(wait)
    b = b''
    try:
        while True:
            d = s.recv(4096)
            if not d:
                break
            b += d
    except OSError:
        pass
    return b
def timed(fn):
    t = time.time()
    try:
        fn()
        r = 'CONNECTED'
    except OSError as e:
        r = oserr(e)
    return '%s after %d ms' % (r, (time.time() - t) * 1000)
def head_of(s):
    s.settimeout(8)
    b = b''
    while b'\r\n\r\n' not in b:
        d = s.recv(4096)
        if not d:
            break
        b += d
    h, _, rest = b.partition(b'\r\n\r\n')
    return h, rest
def answer(s, tunnel=False):
    h, rest = head_of(s)
    if not h:
        return 'closed without an answer'
    parts = h.split(b' ', 2)
    code = parts[1].decode('latin-1') if len(parts) > 1 else '?'
    if tunnel and code == '200':
        return 'http 200'
    m = re.search(rb'(?i)\r\ncontent-length:\s*(\d+)', h)
    n = int(m.group(1)) if m else 4096
    s.settimeout(2)
    try:
        while len(rest) < n:
            d = s.recv(4096)
            if not d:
                break
            rest += d
    except OSError:
        pass
    body = rest[:n].decode('utf-8', 'replace').replace('\r', ' ').replace('\n', ' ')
    return f'http {code} {body[:240]}'
def via_connect(target, host=None, then=None):
    s = socket.create_connection(PROXY, timeout=8)
    s.sendall(f'CONNECT {target} HTTP/1.1\r\nHost: {host or target}\r\n\r\n'.encode())
    r = answer(s, tunnel=True)
    if r == 'http 200' and then is not None:
        s.sendall(then)
        r += ' | ' + answer(s)
    return r
def via_raw(raw):
    s = socket.create_connection(PROXY, timeout=8)
    s.sendall(raw)
    return answer(s)
def via_get(url, host):
    return via_raw(f'GET {url} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n'.encode())
def via_socks(addr, port, then=None):
    s = socket.create_connection(PROXY, timeout=8)
    s.sendall(b'\x05\x01\x00')
    g = s.recv(2)
    if g != b'\x05\x00':
        return 'socks greeting ' + g.hex()
    if ':' in addr:
        a = b'\x04' + socket.inet_pton(socket.AF_INET6, addr)
    elif re.fullmatch(r'[0-9.]+', addr):
        a = b'\x01' + socket.inet_pton(socket.AF_INET, addr)
    else:
        a = b'\x03' + bytes([len(addr)]) + addr.encode()
    s.sendall(b'\x05\x01\x00' + a + port.to_bytes(2, 'big'))
    r = s.recv(262)
    if len(r) < 2:
        return 'socks closed without a reply'
    out = f'socks {r[1]}'
    if r[1] == 0 and then is not None:
        s.sendall(then)
        out += ' | ' + answer(s)
    return out
def direct(host, port, family=socket.AF_INET, timeout=8):
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect((host, port))
    return 'connected'
def get(host):
    return f'GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n'.encode()
"#;

/// What one probe printed, as `(name, result)` pairs.
struct Said {
    run: Run,
    lines: Vec<(String, String)>,
}

impl Said {
    fn of(run: Run) -> Said {
        let lines = parse(&run.out());
        Said { run, lines }
    }
    fn get(&self, name: &str) -> Option<&str> {
        self.lines.iter().find(|(n, _)| n == name).map(|(_, r)| r.as_str())
    }
}

fn parse(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| l.split_once(": "))
        .filter(|(n, _)| !n.is_empty() && !n.contains(' '))
        .map(|(n, r)| (n.to_string(), r.trim().to_string()))
        .collect()
}

/// One expectation: the line `name` starts with one of `accepted`.
type Want<'a> = (&'a str, &'a [&'a str]);

/// Judges a probe: the call ran, each line is as wanted, each listener saw
/// exactly what it should (`(name, seen, expected)`: 0 for a target that must
/// stay untouched, the controls' count for a granted one).
fn verdict(said: &Said, wants: &[Want<'_>], listeners: &[(&str, usize, usize)]) -> Observed {
    let mut bad = Vec::new();
    for (name, accepted) in wants {
        match said.get(name) {
            Some(r) if accepted.iter().any(|a| r.starts_with(a)) => {}
            Some(r) => bad.push(format!("{name}: {} (expected {})", clip(r, 90), accepted.join(" or "))),
            None => bad.push(format!("{name}: no answer (expected {})", accepted.join(" or "))),
        }
    }
    for (name, seen, expected) in listeners {
        if seen != expected {
            bad.push(format!("{name} saw {seen} connection(s), expected {expected}"));
        }
    }
    let ok = said.run.success() && bad.is_empty();
    let lines: Vec<String> = said.lines.iter().map(|(n, r)| format!("{n}={}", clip(r, 110))).collect();
    let seen: Vec<String> = listeners.iter().map(|(n, s, _)| format!("{n} {s}")).collect();
    let mut text = if said.run.success() && !lines.is_empty() {
        format!("{}; arrived: {}", lines.join("; "), seen.join(", "))
    } else {
        format!("{}; arrived: {}", said.run.brief(), seen.join(", "))
    };
    if !bad.is_empty() {
        text = format!("NOT AS EXPECTED: {}; {text}", bad.join("; "));
    }
    Observed::new(ok, text)
}

/// A policy with the shell tool granted `net` (and `net.allow_private` when `private`).
fn net_policy(net: &[String], private: bool) -> String {
    let refs: Vec<&str> = net.iter().map(String::as_str).collect();
    let mut text = Scene::shell_policy(Tool { read: &[], net: &refs, limits: "timeout = \"20s\"" });
    if private {
        text.push_str("net.allow_private = true\n");
    }
    text
}

/// Runs `body` (after [`NET_PRELUDE`]) with python3 in the shell tool granted
/// `net`, with the audit log at `log`.
fn net_probe_logged(s: &Scene, ws: &Path, log: &Path, net: &[String], private: bool, body: &str) -> Said {
    std::fs::write(ws.join("probe.py"), format!("{NET_PRELUDE}{body}")).unwrap();
    let policy = s.policy_file(&net_policy(net, private));
    let args = json!({ "command": format!("{PYTHON} probe.py") }).to_string();
    Said::of(s.warden_logged(ws, log, &["--policy", policy.to_str().unwrap(), "call", "shell", &args], None, None))
}

fn net_probe(s: &Scene, id: &str, net: &[String], private: bool, body: &str) -> Said {
    let ws = s.ws(id);
    net_probe_logged(s, &ws, &s.log_file(), net, private, body)
}

/// The last audit record of `log`.
fn last_record(log: &Path) -> Value {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines().last().and_then(|l| serde_json::from_str(l).ok()).unwrap_or(Value::Null)
}

/// Whether `record`'s `network.attempts` holds one to `port` that was allowed (or not).
fn has_attempt(record: &Value, port: u16, allowed: bool) -> bool {
    record["network"]["attempts"]
        .as_array()
        .is_some_and(|v| v.iter().any(|a| a["port"].as_u64() == Some(u64::from(port)) && a["allowed"] == allowed))
}

fn g(addr: &str, port: u16) -> String {
    format!("{addr}:{port}")
}

const REFUSED: &[&str] = &["refused ECONNREFUSED"];
const UNREACH: &[&str] = &["refused ENETUNREACH", "refused EHOSTUNREACH"];
const FORBIDDEN: &[&str] = &["http 403"];
const SOCKS_REFUSED: &[&str] = &["socks 2"];
const TUNNEL: &[&str] = &["http 200 | http 200 hello"];
const TUNNEL_OPEN: &[&str] = &["http 200"];

/// A host thread that waits for the tool to write `ws/ready` (its content: what
/// the tool set up), runs `probe` on that text while the call still runs, then
/// writes `ws/done` so the tool may end; its answer is the probe's.
fn during_call(ws: &Path, probe: impl FnOnce(&str) -> String + Send + 'static) -> std::thread::JoinHandle<String> {
    let ws: PathBuf = ws.to_path_buf();
    std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(40);
        let ready = ws.join("ready");
        while !ready.exists() {
            if Instant::now() > deadline {
                return "the tool never said it was ready".to_string();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let text = std::fs::read_to_string(&ready).unwrap_or_default();
        let out = probe(text.trim());
        let _ = std::fs::write(ws.join("done"), "done");
        out
    })
}

/// The tool's half of [`during_call`]: write `ready` (atomically), wait for `done`.
const READY: &str = "def ready(text):\n\
\x20   open('ready.tmp', 'w').write(text)\n\
\x20   os.rename('ready.tmp', 'ready')\n\
\x20   end = time.time() + 15\n\
\x20   while not os.path.exists('done') and time.time() < end:\n\
\x20       time.sleep(0.02)\n";

/// The host's connection to `addr`: `refused`, or `CONNECTED`.
fn host_connect(addr: &str) -> String {
    match TcpStream::connect_timeout(&addr.parse().unwrap(), Duration::from_secs(2)) {
        Ok(_) => format!("{addr} CONNECTED"),
        Err(e) => format!("{addr} refused ({})", e.kind()),
    }
}

/// Where a probe's `tcp`-like attempts end without a grant: refused by the
/// namespace's loopback, or (without one) no socket at all.
fn no_route(s: &Scene) -> &'static [&'static str] {
    if netns(s) { REFUSED } else { &["refused EPERM"] }
}

/// Judges a probe of a call with grants: [`verdict`] in its network
/// namespace; without one the call must have been refused as unavailable.
fn proxied(s: &Scene, said: &Said, wants: &[Want<'_>], listeners: &[(&str, usize, usize)]) -> Observed {
    if netns(s) { verdict(said, wants, listeners) } else { unavailable(&said.run, listeners.iter().map(|l| l.1).sum()) }
}

/// A port free on the host's 127.0.0.1 right now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The tool listens (on what `body` sets up, printing its ports to `ready`),
/// while the host tries to connect to each `127.0.0.1:PORT` and `[::1]:PORT`
/// named there; contained when every host connect was refused and the tool
/// accepted nothing.
fn listen_case(s: &Scene, id: &str, net: &[String], body: &str, wants: &[Want<'_>]) -> Observed {
    let ws = s.ws(id);
    let host = during_call(&ws, |ports| {
        let mut out = Vec::new();
        for p in ports.split_whitespace().filter_map(|p| p.parse::<u16>().ok()).filter(|p| *p != 0) {
            out.push(host_connect(&format!("127.0.0.1:{p}")));
            out.push(host_connect(&format!("[::1]:{p}")));
        }
        out.join(", ")
    });
    let said = net_probe_logged(s, &ws, &s.log_file(), net, false, &format!("{READY}{body}"));
    let _ = std::fs::write(ws.join("done"), "done");
    let host = host.join().unwrap_or_else(|_| "the host's probe panicked".into());
    let reached = host.contains("CONNECTED") || host.starts_with("the tool never");
    let mut wants: Vec<Want<'_>> = wants.to_vec();
    wants.push(("accepted", &["0"]));
    let mut o = if net.is_empty() || netns(s) { verdict(&said, &wants, &[]) } else { unavailable(&said.run, 0) };
    if netns(s) || net.is_empty() {
        o.contained &= !reached;
        o.observed = format!("{}; the host's connects: {host}", o.observed);
    }
    o
}

/// An abstract unix name unique to this run.
fn abstract_name(what: &str) -> String {
    format!("warden-escape-{what}-{}", std::process::id())
}

/// Whether the host can bind the abstract name `name` now.
fn host_binds_abstract(name: &str) -> String {
    use std::os::linux::net::SocketAddrExt;
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    match UnixListener::bind_addr(&addr) {
        Ok(_) => "the host bound the abstract name".into(),
        Err(e) => format!("the host could NOT bind the abstract name: {e}"),
    }
}

const DNS_QUERY: &str = "q = b'\\x12\\x34\\x01\\x00\\x00\\x01\\x00\\x00\\x00\\x00\\x00\\x00\\x07example\\x03com\\x00\\x00\\x01\\x00\\x01'\n\
servers = [l.split()[1] for l in open('/etc/resolv.conf') if l.startswith('nameserver') and len(l.split()) > 1]\n\
NS = servers[0] if servers else '10.255.255.53'\n\
say('nameserver', NS)\n";

/// The DNS attempts: a lookup, UDP queries to the resolver of resolv.conf, to
/// the 127.0.0.53 stub and to the host's fake resolvers, TCP to port 53.
fn dns_body(fake: u16, fake53: u16) -> String {
    format!(
        "{DNS_QUERY}\
         attempt('getaddrinfo', lambda: 'RESOLVED %s' % (socket.getaddrinfo('escape-canary.example.com', 443)[0][4],))\n\
         attempt('getaddrinfo_localhost_ok', lambda: 'resolved %s' % (socket.getaddrinfo('localhost', 80)[0][4],))\n\
         attempt('udp53_resolver', lambda: udp_conn(NS, 53, q))\n\
         attempt('udp53_stub', lambda: udp_conn('127.0.0.53', 53, q))\n\
         attempt('udp_fake', lambda: udp_conn('127.0.0.1', {fake}, q))\n\
         attempt('udp_fake_stub', lambda: udp_conn('127.0.0.53', {fake53}, q))\n\
         attempt('tcp53_resolver', lambda: direct(NS, 53))\n\
         attempt('tcp53_stub', lambda: direct('127.0.0.53', 53))\n"
    )
}

/// What the DNS attempts of [`dns_body`] must meet.
fn dns_wants(s: &Scene) -> Vec<Want<'static>> {
    let far: &'static [&'static str] = if netns(s) {
        // The resolver of resolv.conf: unreachable, or (a loopback stub) refused by the namespace's loopback.
        &["refused ENETUNREACH", "refused EHOSTUNREACH", "refused ECONNREFUSED"]
    } else {
        &["refused EPERM"]
    };
    let near = no_route(s);
    vec![
        ("getaddrinfo", &["lookup failed"]),
        ("udp53_resolver", far),
        ("udp53_stub", near),
        ("udp_fake", near),
        ("udp_fake_stub", near),
        ("tcp53_resolver", far),
        ("tcp53_stub", near),
    ]
}

/// The policy of the wrapped MCP server `tests/servers/net_server.py`.
fn server_policy(net: &[String]) -> String {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join("servers");
    let net: Vec<String> = net.iter().map(|n| format!("{n:?}")).collect();
    format!(
        "version = 1\n[servers.net]\nexec = [{PYTHON:?}, {:?}]\ntier = \"auto\"\n\
         fs.read = [\"{{system}}\", {:?}, \"{{workspace}}\"]\nnet.connect = [{}]\nlimits = {{ timeout = \"20s\" }}\n",
        dir.join("net_server.py").display().to_string(),
        dir.display().to_string(),
        net.join(", ")
    )
}

/// Sends `body` (after [`NET_PRELUDE`]) to the wrapped server's `probe` tool.
fn server_probe(s: &Scene, id: &str, net: &[String], body: &str) -> Said {
    let ws = s.ws(id);
    let policy = s.policy_file(&server_policy(net));
    let args = json!({ "code": format!("{NET_PRELUDE}{body}") }).to_string();
    let run = s.warden(&ws, &["--policy", policy.to_str().unwrap(), "call", "net__probe", &args], None, None);
    let text = run.doc()["result"]["content"][0]["text"].as_str().unwrap_or_default().to_string();
    Said { lines: parse(&text), run }
}

pub(crate) fn cases() -> Vec<Case> {
    vec![
        c(
            "net-tcp/process",
            "process",
            "no network grant: connect to a TCP listener on the host's loopback: bash /dev/tcp, python AF_INET, \
             AF_INET6 to ::ffff:127.0.0.1 and to ::1",
            "refused: ECONNREFUSED in the call's network namespace (its own loopback), EPERM without one; the host's \
             listeners see no connection",
            |s| {
                let (l, l6) = (Tcp::new(), Tcp::v6());
                let (p, p6) = (l.port(), l6.as_ref().map_or(0, Tcp::port));
                let ws = s.ws("tcp");
                let bash = s.shell(&ws, SHELL, &format!("echo x > /dev/tcp/127.0.0.1/{p} && echo CONNECTED"));
                let said = net_probe(
                    s,
                    "tcp-py",
                    &[],
                    false,
                    &format!(
                        "attempt('tcp', lambda: direct('127.0.0.1', {p}))\n\
                         attempt('tcp6_mapped', lambda: direct('::ffff:127.0.0.1', {p}, socket.AF_INET6))\n\
                         attempt('tcp6', lambda: direct('::1', {p6}, socket.AF_INET6))\n"
                    ),
                );
                let e = no_route(s);
                let mut o = verdict(
                    &said,
                    &[("tcp", e), ("tcp6_mapped", e), ("tcp6", e)],
                    &[("127.0.0.1", l.arrived(), 0), ("::1", l6.map_or(0, |l| l.arrived()), 0)],
                );
                let bash_ok = bash.success() && !bash.out().contains("CONNECTED");
                o.contained &= bash_ok;
                o.observed = format!("bash: {}; python: {}", bash.brief(), o.observed);
                o
            },
        ),
        c(
            "net-udp/process",
            "process",
            "no network grant: UDP to a receiver on the host's loopback (sendto, and a connected socket that waits \
             for an answer), and to a far address (10.255.255.1:53)",
            "nothing received on the host: in the call's namespace the datagram reaches its own loopback (the \
             connected socket hears ECONNREFUSED) and the far address is unreachable; without one EPERM",
            |s| {
                let u = Udp::new();
                let p = u.port();
                let said = net_probe(
                    s,
                    "udp",
                    &[],
                    false,
                    &format!(
                        "attempt('udp', lambda: udp_send('127.0.0.1', {p}))\n\
                         attempt('udp_connected', lambda: udp_conn('127.0.0.1', {p}))\n\
                         attempt('udp_far', lambda: udp_send('10.255.255.1', 53))\n"
                    ),
                );
                let wants: Vec<Want<'_>> = if netns(s) {
                    vec![("udp", &["ok"]), ("udp_connected", REFUSED), ("udp_far", UNREACH)]
                } else {
                    let e: &[&str] = &["refused EPERM"];
                    vec![("udp", e), ("udp_connected", e), ("udp_far", e)]
                };
                verdict(&said, &wants, &[("the receiver", u.arrived(), 0)])
            },
        ),
        c(
            "net-dns/process",
            "process",
            "no network grant: resolve a name (getaddrinfo); DNS queries over UDP to the nameserver of \
             /etc/resolv.conf, to the 127.0.0.53 stub and to fake resolvers on the host's 127.0.0.1 and 127.0.0.53; \
             TCP to port 53 of the nameserver and the stub",
            "the lookup fails; every query unreachable or refused by the namespace's own loopback (EPERM without \
             one); the fake resolvers receive nothing",
            |s| {
                let (u, u53) = (Udp::new(), Udp::on("127.0.0.53:0"));
                let said = net_probe(s, "dns", &[], false, &dns_body(u.port(), u53.port()));
                verdict(
                    &said,
                    &dns_wants(s),
                    &[("127.0.0.1 fake", u.arrived(), 0), ("127.0.0.53 fake", u53.arrived(), 0)],
                )
            },
        ),
        c(
            "net-proxy-nogrant/process",
            "process",
            "no network grant, through the proxy that listens in every call with a network namespace: CONNECT \
             127.0.0.1:A and localhost:A, SOCKS5 to 127.0.0.1:A, GET http://127.0.0.1:A/, and CONNECT to a name \
             (warden-escape.invalid:443) that would make the host look it up",
            "each refused (403 / SOCKS 2) before any lookup or connection (the record's reason: no grant); A sees \
             nothing; without a namespace the proxy is not there (EPERM)",
            |s| {
                let a = Tcp::new();
                let pa = a.port();
                let ws = s.ws("proxy-nogrant");
                let log = s.log_file();
                let said = net_probe_logged(
                    s,
                    &ws,
                    &log,
                    &[],
                    false,
                    &format!(
                        "attempt('connect', lambda: via_connect('127.0.0.1:{pa}'))\n\
                         attempt('connect_name', lambda: via_connect('localhost:{pa}'))\n\
                         attempt('socks', lambda: via_socks('127.0.0.1', {pa}))\n\
                         attempt('forward', lambda: via_get('http://127.0.0.1:{pa}/', '127.0.0.1:{pa}'))\n\
                         attempt('lookup', lambda: via_connect('warden-escape.invalid:443'))\n"
                    ),
                );
                let listeners = [("A", a.arrived(), 0)];
                if !netns(s) {
                    let e: &[&str] = &["refused EPERM"];
                    let wants: Vec<Want<'_>> =
                        ["connect", "connect_name", "socks", "forward", "lookup"].map(|n| (n, e)).to_vec();
                    return verdict(&said, &wants, &listeners);
                }
                let mut o = verdict(
                    &said,
                    &[
                        ("connect", FORBIDDEN),
                        ("connect_name", FORBIDDEN),
                        ("socks", SOCKS_REFUSED),
                        ("forward", FORBIDDEN),
                        ("lookup", FORBIDDEN),
                    ],
                    &listeners,
                );
                // Refused on the grant, before the name was resolved on the host.
                let record = last_record(&log);
                let attempts = record["network"]["attempts"].as_array().cloned().unwrap_or_default();
                let unlooked = attempts.iter().any(|t| {
                    t["host"] == "warden-escape.invalid"
                        && t["allowed"] == false
                        && t["reason"].as_str().is_some_and(|r| r.contains("has no grant"))
                });
                o.contained &= unlooked && attempts.iter().all(|t| t["allowed"] == false);
                o.observed = format!("{}; the name refused on the grant: {unlooked}", o.observed);
                o
            },
        ),
        c(
            "net-dns-granted/process",
            "process",
            "with net.connect = [\"example.com:443\", \"127.0.0.1:A\"] (a grant by name, which used to open UDP for \
             the program's own DNS): the same lookup, UDP and TCP/53 queries (DNS exfiltration); control: CONNECT \
             to A through the proxy",
            "the lookup fails (no resolver inside: names are the proxy's); every query unreachable or refused; the \
             fake resolvers receive nothing; the control reaches A",
            |s| {
                let (a, u, u53) = (Tcp::new(), Udp::new(), Udp::on("127.0.0.53:0"));
                let net = [g("example.com", 443), g("127.0.0.1", a.port())];
                let body = format!(
                    "{}attempt('connect_granted', lambda: via_connect('127.0.0.1:{}'))\n",
                    dns_body(u.port(), u53.port()),
                    a.port()
                );
                let said = net_probe(s, "dns-granted", &net, false, &body);
                let mut wants = dns_wants(s);
                wants.push(("connect_granted", TUNNEL_OPEN));
                proxied(
                    s,
                    &said,
                    &wants,
                    &[("127.0.0.1 fake", u.arrived(), 0), ("127.0.0.53 fake", u53.arrived(), 0), ("A", a.arrived(), 1)],
                )
            },
        ),
        c(
            "net-tcp-other-port/process",
            "process",
            "with net.connect = 127.0.0.1:A, ignore the proxy: connect straight to the host's 127.0.0.1:B and to the \
             granted 127.0.0.1:A (python, bash /dev/tcp, curl --noproxy '*'); control: A through the proxy (CONNECT)",
            "every direct connect refused (ECONNREFUSED: the namespace's own loopback); B sees nothing, A only the \
             control's connection",
            |s| {
                let (a, b) = (Tcp::new(), Tcp::new());
                let (pa, pb) = (a.port(), b.port());
                let said = net_probe(
                    s,
                    "tcp-other",
                    &[g("127.0.0.1", pa)],
                    false,
                    &format!(
                        "import subprocess\n\
                         attempt('direct_other', lambda: direct('127.0.0.1', {pb}))\n\
                         attempt('direct_granted', lambda: direct('127.0.0.1', {pa}))\n\
                         attempt('direct_granted6', lambda: direct('::ffff:127.0.0.1', {pa}, socket.AF_INET6))\n\
                         r = subprocess.run(['/bin/bash', '-c', 'echo x > /dev/tcp/127.0.0.1/{pa} && echo CONNECTED'], capture_output=True, text=True)\n\
                         say('bash_granted', 'CONNECTED' if 'CONNECTED' in r.stdout else 'failed ' + r.stderr.strip()[-80:])\n\
                         r = subprocess.run(['curl', '-sS', '--noproxy', '*', '-m', '10', 'http://127.0.0.1:{pa}/'], capture_output=True, text=True)\n\
                         say('curl_noproxy', 'exit %d %s' % (r.returncode, r.stderr.strip()[-80:]))\n\
                         attempt('connect_granted', lambda: via_connect('127.0.0.1:{pa}'))\n"
                    ),
                );
                proxied(
                    s,
                    &said,
                    &[
                        ("direct_other", &["refused ECONNREFUSED", "refused EACCES"]),
                        ("direct_granted", &["refused ECONNREFUSED", "refused EACCES"]),
                        ("direct_granted6", &["refused ECONNREFUSED", "refused EACCES"]),
                        ("bash_granted", &["failed"]),
                        ("curl_noproxy", &["exit 7 "]),
                        ("connect_granted", TUNNEL_OPEN),
                    ],
                    &[("B", b.arrived(), 0), ("A", a.arrived(), 1)],
                )
            },
        ),
        c(
            "net-proxy-other-port/process",
            "process",
            "with net.connect = 127.0.0.1:A, ask the proxy for 127.0.0.1:B by CONNECT, plain HTTP forwarding and \
             SOCKS5; controls: A by each of the three",
            "B refused by each (HTTP 403 naming \"127.0.0.1:B\" and net.connect; SOCKS reply 2); B sees nothing; \
             A answers each control; the audit record has the attempts (A allowed, B refused)",
            |s| {
                let (a, b) = (Http::new(), Tcp::new());
                let (pa, pb) = (a.port, b.port());
                let ws = s.ws("proxy-other");
                let log = s.log_file();
                let said = net_probe_logged(
                    s,
                    &ws,
                    &log,
                    &[g("127.0.0.1", pa)],
                    false,
                    &format!(
                        "A, B = {pa}, {pb}\n\
                         attempt('connect_other', lambda: via_connect('127.0.0.1:%d' % B))\n\
                         attempt('forward_other', lambda: via_get('http://127.0.0.1:%d/' % B, '127.0.0.1:%d' % B))\n\
                         attempt('socks_other', lambda: via_socks('127.0.0.1', B))\n\
                         attempt('connect_granted', lambda: via_connect('127.0.0.1:%d' % A, then=get('127.0.0.1:%d' % A)))\n\
                         attempt('forward_granted', lambda: via_get('http://127.0.0.1:%d/' % A, '127.0.0.1:%d' % A))\n\
                         attempt('socks_granted', lambda: via_socks('127.0.0.1', A, then=get('127.0.0.1:%d' % A)))\n"
                    ),
                );
                let mut o = proxied(
                    s,
                    &said,
                    &[
                        ("connect_other", FORBIDDEN),
                        ("forward_other", FORBIDDEN),
                        ("socks_other", SOCKS_REFUSED),
                        ("connect_granted", TUNNEL),
                        ("forward_granted", &["http 200 hello"]),
                        ("socks_granted", &["socks 0 | http 200 hello"]),
                    ],
                    &[("B", b.arrived(), 0), ("A", a.arrived(), 3)],
                );
                if netns(s) {
                    let text = said.get("connect_other").unwrap_or_default();
                    let names = text.contains(&format!("127.0.0.1:{pb}")) && text.contains("net.connect");
                    let record = last_record(&log);
                    let audited = has_attempt(&record, pb, false) && has_attempt(&record, pa, true);
                    let doc = said.run.doc();
                    let summary =
                        if doc["result"]["network"].is_object() { &doc["result"]["network"] } else { &doc["network"] };
                    let summed =
                        summary["refused"].as_u64().unwrap_or(0) >= 3 && summary["allowed"].as_u64().unwrap_or(0) >= 3;
                    o.contained &= names && audited && summed;
                    o.observed = format!(
                        "{}; the 403 names the grant: {names}; the audit record has A allowed and B refused: {audited} \
                         (network: {}); the result's summary: {}",
                        o.observed,
                        clip(&record["network"].to_string(), 200),
                        clip(&summary.to_string(), 160)
                    );
                }
                o
            },
        ),
        c(
            "net-ip-literal/process",
            "process",
            "with net.connect = 127.0.0.1:A: IP literals of other hosts (10.255.255.1, 169.254.169.254, 192.0.2.1) \
             directly, by CONNECT, by plain HTTP (the metadata path) and by SOCKS5; control: A by CONNECT",
            "directly ENETUNREACH (no route out of the namespace); the proxy refuses each (403, SOCKS 2); the \
             control reaches A",
            |s| {
                let a = Tcp::new();
                let pa = a.port();
                let said = net_probe(
                    s,
                    "ip-literal",
                    &[g("127.0.0.1", pa)],
                    false,
                    &format!(
                        "attempt('direct_private', lambda: direct('10.255.255.1', 80))\n\
                         attempt('direct_metadata', lambda: direct('169.254.169.254', 80))\n\
                         attempt('direct_public', lambda: direct('192.0.2.1', 443))\n\
                         attempt('connect_private', lambda: via_connect('10.255.255.1:80'))\n\
                         attempt('connect_metadata', lambda: via_connect('169.254.169.254:80'))\n\
                         attempt('connect_public', lambda: via_connect('192.0.2.1:443'))\n\
                         attempt('forward_metadata', lambda: via_get('http://169.254.169.254/latest/meta-data/', '169.254.169.254'))\n\
                         attempt('socks_metadata', lambda: via_socks('169.254.169.254', 80))\n\
                         attempt('connect_granted', lambda: via_connect('127.0.0.1:{pa}'))\n"
                    ),
                );
                proxied(
                    s,
                    &said,
                    &[
                        ("direct_private", UNREACH),
                        ("direct_metadata", UNREACH),
                        ("direct_public", UNREACH),
                        ("connect_private", FORBIDDEN),
                        ("connect_metadata", FORBIDDEN),
                        ("connect_public", FORBIDDEN),
                        ("forward_metadata", FORBIDDEN),
                        ("socks_metadata", SOCKS_REFUSED),
                        ("connect_granted", TUNNEL_OPEN),
                    ],
                    &[("A", a.arrived(), 1)],
                )
            },
        ),
        c(
            "net-wildcard-private/process",
            "process",
            "with net.connect = [\"*:B\", \"*:B6\", \"*:80\", \"127.0.0.1:A\"] (any host on those ports, but no allow_private): loopback, private, CGNAT, \
             metadata and unspecified targets by every spelling (127.0.0.1:B, localhost:B, [::1]:B6, \
             [::ffff:127.0.0.1]:B, 0.0.0.0:B, 127.1:B, 2130706433:B, 0x7f000001:B, 10.255.255.1, 100.64.0.1, \
             169.254.169.254, [fd00:ec2::254]) by CONNECT, SOCKS5 and forwarding; control: A (named literally)",
            "every one refused (403 / SOCKS 2): `*:PORT` never admits a private address; B and B6 see nothing; the \
             control reaches A",
            |s| {
                let (a, b, b6) = (Tcp::new(), Tcp::new(), Tcp::v6());
                let (pa, pb, pb6) = (a.port(), b.port(), b6.as_ref().map_or(1, Tcp::port));
                let said = net_probe(
                    s,
                    "wildcard-private",
                    &[g("*", pb), g("*", pb6), g("*", 80), g("127.0.0.1", pa)],
                    false,
                    &format!(
                        "B = {pb}\n\
                         for name, t in [('loopback', '127.0.0.1:%d' % B), ('localhost', 'localhost:%d' % B),\n\
                         \x20               ('v6_loopback', '[::1]:{pb6}'), ('v4_mapped', '[::ffff:127.0.0.1]:%d' % B),\n\
                         \x20               ('unspecified', '0.0.0.0:%d' % B), ('short', '127.1:%d' % B),\n\
                         \x20               ('decimal', '2130706433:%d' % B), ('hex', '0x7f000001:%d' % B),\n\
                         \x20               ('private', '10.255.255.1:80'), ('cgnat', '100.64.0.1:80'),\n\
                         \x20               ('metadata', '169.254.169.254:80'), ('metadata6', '[fd00:ec2::254]:80')]:\n\
                         \x20   attempt('connect_' + name, lambda: via_connect(t))\n\
                         attempt('socks_loopback', lambda: via_socks('127.0.0.1', B))\n\
                         attempt('socks_localhost', lambda: via_socks('localhost', B))\n\
                         attempt('forward_loopback', lambda: via_get('http://127.0.0.1:%d/' % B, '127.0.0.1:%d' % B))\n\
                         attempt('connect_granted', lambda: via_connect('127.0.0.1:{pa}'))\n"
                    ),
                );
                let mut wants: Vec<Want<'_>> = [
                    "loopback",
                    "localhost",
                    "v6_loopback",
                    "v4_mapped",
                    "unspecified",
                    "short",
                    "decimal",
                    "hex",
                    "private",
                    "cgnat",
                    "metadata",
                    "metadata6",
                ]
                .iter()
                .map(|n| (&*Box::leak(format!("connect_{n}").into_boxed_str()), FORBIDDEN))
                .collect();
                wants.extend([
                    ("socks_loopback", SOCKS_REFUSED),
                    ("socks_localhost", SOCKS_REFUSED),
                    ("forward_loopback", FORBIDDEN),
                    ("connect_granted", TUNNEL_OPEN),
                ]);
                proxied(
                    s,
                    &said,
                    &wants,
                    &[("B", b.arrived(), 0), ("B6", b6.map_or(0, |l| l.arrived()), 0), ("A", a.arrived(), 1)],
                )
            },
        ),
        c(
            "net-rebind-localhost/process",
            "process",
            "with net.connect = localhost:A (a granted NAME that resolves to 127.0.0.1, as DNS rebinding would make \
             it), without net.allow_private: CONNECT, plain HTTP and SOCKS5 (domain) to localhost:A, also spelled \
             LOCALHOST and localhost.; control: the same grant with net.allow_private = true",
            "refused (403 / SOCKS 2): the resolved address is loopback; A sees nothing until allow_private, then \
             exactly the control",
            |s| {
                let a = Http::new();
                let pa = a.port;
                let net = [g("localhost", pa)];
                let said = net_probe(
                    s,
                    "rebind",
                    &net,
                    false,
                    &format!(
                        "A = {pa}\n\
                         attempt('connect_name', lambda: via_connect('localhost:%d' % A))\n\
                         attempt('connect_upper', lambda: via_connect('LOCALHOST:%d' % A))\n\
                         attempt('connect_dot', lambda: via_connect('localhost.:%d' % A))\n\
                         attempt('forward_name', lambda: via_get('http://localhost:%d/' % A, 'localhost:%d' % A))\n\
                         attempt('socks_name', lambda: via_socks('localhost', A))\n"
                    ),
                );
                let before = a.arrived();
                let o = proxied(
                    s,
                    &said,
                    &[
                        ("connect_name", FORBIDDEN),
                        ("connect_upper", FORBIDDEN),
                        ("connect_dot", FORBIDDEN),
                        ("forward_name", FORBIDDEN),
                        ("socks_name", SOCKS_REFUSED),
                    ],
                    &[("A", before, 0)],
                );
                if !netns(s) {
                    return o;
                }
                let control = net_probe(
                    s,
                    "rebind-control",
                    &net,
                    true,
                    &format!(
                        "attempt('connect_name', lambda: via_connect('localhost:{pa}', then=get('localhost:{pa}')))\n"
                    ),
                );
                let c = verdict(&control, &[("connect_name", TUNNEL)], &[("A", a.arrived(), 1)]);
                Observed::new(
                    o.contained && c.contained,
                    format!("{}; with net.allow_private = true: {}", o.observed, c.observed),
                )
            },
        ),
        c(
            "net-host-mismatch/process",
            "process",
            "with net.connect = 127.0.0.1:A: CONNECT 127.0.0.1:A with Host: 127.0.0.1:B, and plain HTTP to \
             http://127.0.0.1:A/ with Host: 127.0.0.1:B and Host: evil.example (a front reached for another \
             host's name); control: CONNECT A with its own Host",
            "HTTP 400 for each; B sees nothing; A sees only the control",
            |s| {
                let (a, b) = (Http::new(), Tcp::new());
                let (pa, pb) = (a.port, b.port());
                let said = net_probe(
                    s,
                    "host-mismatch",
                    &[g("127.0.0.1", pa)],
                    false,
                    &format!(
                        "T, O = '127.0.0.1:{pa}', '127.0.0.1:{pb}'\n\
                         attempt('connect_host_other', lambda: via_connect(T, host=O))\n\
                         attempt('forward_host_other', lambda: via_get('http://%s/' % T, O))\n\
                         attempt('forward_host_name', lambda: via_get('http://%s/' % T, 'evil.example'))\n\
                         attempt('connect_granted', lambda: via_connect(T, then=get(T)))\n"
                    ),
                );
                proxied(
                    s,
                    &said,
                    &[
                        ("connect_host_other", &["http 400"]),
                        ("forward_host_other", &["http 400"]),
                        ("forward_host_name", &["http 400"]),
                        ("connect_granted", TUNNEL),
                    ],
                    &[("B", b.arrived(), 0), ("A", a.arrived(), 1)],
                )
            },
        ),
        c(
            "net-smuggle/process",
            "process",
            "with net.connect = 127.0.0.1:A, through the plain-HTTP forwarder: Content-Length with \
             Transfer-Encoding: chunked, two Content-Lengths, Transfer-Encoding: gzip alone (each hiding a request for \
             127.0.0.1:B in the body); a valid chunked POST to A pipelined with requests for B and for A with \
             Host B",
            "400 for the three ambiguous bodies; the pipelined POST answered once (one request per connection); B \
             sees nothing and A never receives the smuggled requests",
            |s| {
                let (a, b) = (Http::new(), Tcp::new());
                let (pa, pb) = (a.port, b.port());
                let said = net_probe(
                    s,
                    "smuggle",
                    &[g("127.0.0.1", pa)],
                    false,
                    &format!(
                        "T, O = '127.0.0.1:{pa}', '127.0.0.1:{pb}'\n\
                         second = ('GET http://%s/smuggled HTTP/1.1\\r\\nHost: %s\\r\\n\\r\\n' % (O, O)).encode()\n\
                         post = 'POST http://%s/ HTTP/1.1\\r\\nHost: %s\\r\\n' % (T, T)\n\
                         cl_te = (post + 'Content-Length: %d\\r\\nTransfer-Encoding: chunked\\r\\n\\r\\n' % (5 + len(second))).encode() + b'0\\r\\n\\r\\n' + second\n\
                         double_cl = (post + 'Content-Length: 0\\r\\nContent-Length: %d\\r\\n\\r\\n' % len(second)).encode() + second\n\
                         te_gzip = (post + 'Transfer-Encoding: gzip\\r\\n\\r\\n').encode() + second\n\
                         attempt('cl_te', lambda: via_raw(cl_te))\n\
                         attempt('double_cl', lambda: via_raw(double_cl))\n\
                         attempt('te_gzip', lambda: via_raw(te_gzip))\n\
                         pipelined = ('POST http://%s/first HTTP/1.1\\r\\nHost: %s\\r\\nTransfer-Encoding: chunked\\r\\n\\r\\n5\\r\\nhello\\r\\n0\\r\\n\\r\\n' % (T, T)).encode() + second + ('GET http://%s/second HTTP/1.1\\r\\nHost: %s\\r\\n\\r\\n' % (T, O)).encode()\n\
                         def run_pipelined():\n\
                         \x20   x = socket.create_connection(PROXY, timeout=8)\n\
                         \x20   x.sendall(pipelined)\n\
                         \x20   got = read_all(x)\n\
                         \x20   return 'answers %d: %s' % (got.count(b'HTTP/1.'), got[:40].decode('latin-1').replace('\\r', ' ').replace('\\n', ' '))\n\
                         attempt('pipelined', run_pipelined)\n"
                    ),
                );
                let mut o = proxied(
                    s,
                    &said,
                    &[
                        ("cl_te", &["http 400"]),
                        ("double_cl", &["http 400"]),
                        ("te_gzip", &["http 400", "http 501"]),
                        ("pipelined", &["answers 1: HTTP/1.1 200"]),
                    ],
                    &[("B", b.arrived(), 0), ("A", a.arrived(), 1)],
                );
                let got = a.received();
                let smuggled = got.contains("/smuggled") || got.contains("/second") || got.contains(&format!(":{pb}"));
                o.contained &= !smuggled;
                o.observed = format!("{}; A received a smuggled request: {smuggled}", o.observed);
                o
            },
        ),
        c(
            "net-socks-literal/process",
            "process",
            "with net.connect = 127.0.0.1:A, SOCKS5 CONNECT with IP literals not granted: 127.0.0.1:B, \
             10.255.255.1:80, 169.254.169.254:80, [::1]:B6, [::ffff:127.0.0.1]:B; control: SOCKS5 to A",
            "SOCKS reply 2 (not allowed) for each; B and B6 see nothing; the control reaches A",
            |s| {
                let (a, b, b6) = (Tcp::new(), Tcp::new(), Tcp::v6());
                let (pa, pb, pb6) = (a.port(), b.port(), b6.as_ref().map_or(1, Tcp::port));
                let said = net_probe(
                    s,
                    "socks-literal",
                    &[g("127.0.0.1", pa)],
                    false,
                    &format!(
                        "attempt('socks_other', lambda: via_socks('127.0.0.1', {pb}))\n\
                         attempt('socks_private', lambda: via_socks('10.255.255.1', 80))\n\
                         attempt('socks_metadata', lambda: via_socks('169.254.169.254', 80))\n\
                         attempt('socks_v6', lambda: via_socks('::1', {pb6}))\n\
                         attempt('socks_mapped', lambda: via_socks('::ffff:127.0.0.1', {pb}))\n\
                         attempt('socks_granted', lambda: via_socks('127.0.0.1', {pa}))\n"
                    ),
                );
                proxied(
                    s,
                    &said,
                    &[
                        ("socks_other", SOCKS_REFUSED),
                        ("socks_private", SOCKS_REFUSED),
                        ("socks_metadata", SOCKS_REFUSED),
                        ("socks_v6", SOCKS_REFUSED),
                        ("socks_mapped", SOCKS_REFUSED),
                        ("socks_granted", &["socks 0"]),
                    ],
                    &[("B", b.arrived(), 0), ("B6", b6.map_or(0, |l| l.arrived()), 0), ("A", a.arrived(), 1)],
                )
            },
        ),
        c(
            "net-ipv6/process",
            "process",
            "with net.connect = [\"127.0.0.1:A\", \"[::1]:G6\"]: IPv6 straight to the host's ::1 listeners and to a \
             global address (2001:4860:4860::8888, TCP and UDP); through the proxy [::1]:C6 (not granted) by \
             CONNECT, plain HTTP and SOCKS5, and [2001:db8::1]:443; controls: [::1]:G6 by CONNECT and SOCKS5, A by \
             CONNECT",
            "directly ECONNREFUSED (the namespace's own ::1) and ENETUNREACH; the proxy refuses C6 and the global \
             address (403, SOCKS 2); C6 sees nothing, G6 exactly the two controls, A one",
            |s| {
                let (a, g6, c6) = (Tcp::new(), Tcp::v6(), Tcp::v6());
                let (Some(g6), Some(c6)) = (g6, c6) else {
                    return Observed::skipped("the host has no IPv6 loopback (::1)");
                };
                let (pa, pg, pc) = (a.port(), g6.port(), c6.port());
                let said = net_probe(
                    s,
                    "ipv6",
                    &[g("127.0.0.1", pa), g("[::1]", pg)],
                    false,
                    &format!(
                        "attempt('direct_v6_granted', lambda: direct('::1', {pg}, socket.AF_INET6))\n\
                         attempt('direct_v6_other', lambda: direct('::1', {pc}, socket.AF_INET6))\n\
                         attempt('direct_v6_global', lambda: direct('2001:4860:4860::8888', 443, socket.AF_INET6))\n\
                         attempt('udp_v6_global', lambda: udp_send('2001:4860:4860::8888', 53, b'x', socket.AF_INET6))\n\
                         attempt('connect_v6_other', lambda: via_connect('[::1]:{pc}'))\n\
                         attempt('connect_v6_global', lambda: via_connect('[2001:db8::1]:443'))\n\
                         attempt('forward_v6_other', lambda: via_get('http://[::1]:{pc}/', '[::1]:{pc}'))\n\
                         attempt('socks_v6_other', lambda: via_socks('::1', {pc}))\n\
                         attempt('connect_v6_granted', lambda: via_connect('[::1]:{pg}'))\n\
                         attempt('socks_v6_granted', lambda: via_socks('::1', {pg}))\n\
                         attempt('connect_granted', lambda: via_connect('127.0.0.1:{pa}'))\n"
                    ),
                );
                proxied(
                    s,
                    &said,
                    &[
                        ("direct_v6_granted", REFUSED),
                        ("direct_v6_other", REFUSED),
                        ("direct_v6_global", UNREACH),
                        ("udp_v6_global", UNREACH),
                        ("connect_v6_other", FORBIDDEN),
                        ("connect_v6_global", FORBIDDEN),
                        ("forward_v6_other", FORBIDDEN),
                        ("socks_v6_other", SOCKS_REFUSED),
                        ("connect_v6_granted", TUNNEL_OPEN),
                        ("socks_v6_granted", &["socks 0"]),
                        ("connect_granted", TUNNEL_OPEN),
                    ],
                    &[("C6", c6.arrived(), 0), ("G6", g6.arrived(), 2), ("A", a.arrived(), 1)],
                )
            },
        ),
        c(
            "net-tcp-fastopen/process",
            "process",
            "with net.connect = 127.0.0.1:A, reach port B by TCP Fast Open: sendto and sendmsg with MSG_FASTOPEN, \
             sendmmsg with MSG_FASTOPEN (ctypes), TCP_FASTOPEN_CONNECT then connect; and sendto MSG_FASTOPEN to the \
             granted A itself, past the proxy; control: A by CONNECT",
            "each refused (EPERM from seccomp, or ECONNREFUSED from the namespace's own loopback); B sees nothing, \
             A only the control",
            |s| {
                let (a, b) = (Tcp::new(), Tcp::new());
                let said = net_probe(
                    s,
                    "tcp-fastopen",
                    &[g("127.0.0.1", a.port())],
                    false,
                    &format!(
                        "import ctypes\n\
                         libc = ctypes.CDLL(None, use_errno=True)\n\
                         A, B = {a}, {b}\n\
                         def tfo_sendto(port):\n\
                         \x20   socket.socket().sendto(b'x', socket.MSG_FASTOPEN, ('127.0.0.1', port))\n\
                         def tfo_sendmsg():\n\
                         \x20   socket.socket().sendmsg([b'x'], [], socket.MSG_FASTOPEN, ('127.0.0.1', B))\n\
                         class iovec(ctypes.Structure):\n\
                         \x20   _fields_ = [('base', ctypes.c_void_p), ('len', ctypes.c_size_t)]\n\
                         class msghdr(ctypes.Structure):\n\
                         \x20   _fields_ = [('name', ctypes.c_void_p), ('namelen', ctypes.c_uint32), ('iov', ctypes.POINTER(iovec)), ('iovlen', ctypes.c_size_t), ('control', ctypes.c_void_p), ('controllen', ctypes.c_size_t), ('flags', ctypes.c_int)]\n\
                         class mmsghdr(ctypes.Structure):\n\
                         \x20   _fields_ = [('hdr', msghdr), ('len', ctypes.c_uint)]\n\
                         def tfo_sendmmsg():\n\
                         \x20   x = socket.socket()\n\
                         \x20   addr = ctypes.create_string_buffer(bytes([2, 0]) + B.to_bytes(2, 'big') + bytes([127, 0, 0, 1]) + bytes(8), 16)\n\
                         \x20   data = ctypes.create_string_buffer(b'x', 1)\n\
                         \x20   iov = iovec(ctypes.cast(data, ctypes.c_void_p), 1)\n\
                         \x20   m = mmsghdr(msghdr(ctypes.cast(addr, ctypes.c_void_p), 16, ctypes.pointer(iov), 1, None, 0, 0), 0)\n\
                         \x20   if libc.sendmmsg(x.fileno(), ctypes.byref(m), 1, socket.MSG_FASTOPEN) < 0:\n\
                         \x20       e = ctypes.get_errno()\n\
                         \x20       raise OSError(e, os.strerror(e))\n\
                         def tfo_option():\n\
                         \x20   x = socket.socket()\n\
                         \x20   x.setsockopt(socket.IPPROTO_TCP, 30, 1)\n\
                         \x20   x.connect(('127.0.0.1', B))\n\
                         \x20   x.send(b'x')\n\
                         attempt('sendto', lambda: tfo_sendto(B))\n\
                         attempt('sendmsg', tfo_sendmsg)\n\
                         attempt('sendmmsg', tfo_sendmmsg)\n\
                         attempt('option', tfo_option)\n\
                         attempt('sendto_granted', lambda: tfo_sendto(A))\n\
                         attempt('connect_granted', lambda: via_connect('127.0.0.1:%d' % A))\n",
                        a = a.port(),
                        b = b.port()
                    ),
                );
                let e: &[&str] = &["refused EPERM", "refused ECONNREFUSED"];
                proxied(
                    s,
                    &said,
                    &[
                        ("sendto", e),
                        ("sendmsg", e),
                        ("sendmmsg", e),
                        ("option", e),
                        ("sendto_granted", e),
                        ("connect_granted", TUNNEL_OPEN),
                    ],
                    &[("B", b.arrived(), 0), ("A", a.arrived(), 1)],
                )
            },
        ),
        c(
            "net-tcp-listen/process",
            "process",
            "with a network grant, bind and listen on TCP ports (127.0.0.1:P, 0.0.0.0:Q, [::1]:P; P and Q free on \
             the host) to be reached from outside, while the host connects to them",
            "the binds work inside the call's network namespace (its own addresses) and the host's connects are \
             refused (nothing of it listens on the host), the tool accepts nothing; without a namespace the call \
             is unavailable",
            |s| {
                let a = Tcp::new();
                let (p, q) = (free_port(), free_port());
                let body = format!(
                    "P, Q = {p}, {q}\n\
                     held = []\n\
                     def listen(addr, family=socket.AF_INET):\n\
                     \x20   x = socket.socket(family)\n\
                     \x20   x.bind(addr)\n\
                     \x20   x.listen()\n\
                     \x20   x.setblocking(False)\n\
                     \x20   held.append(x)\n\
                     \x20   return 'listening'\n\
                     attempt('bind', lambda: listen(('127.0.0.1', P)))\n\
                     attempt('bind_any', lambda: listen(('0.0.0.0', Q)))\n\
                     attempt('bind6', lambda: listen(('::1', P), socket.AF_INET6))\n\
                     ready('%d %d' % (P, Q))\n\
                     n = 0\n\
                     for x in held:\n\
                     \x20   try:\n\
                     \x20       while True:\n\
                     \x20           x.accept()\n\
                     \x20           n += 1\n\
                     \x20   except OSError:\n\
                     \x20       pass\n\
                     say('accepted', n)\n"
                );
                let l: &[&str] = &["listening"];
                let mut o = listen_case(
                    s,
                    "tcp-listen",
                    &[g("127.0.0.1", a.port())],
                    &body,
                    &[("bind", l), ("bind_any", l), ("bind6", l)],
                );
                let arrived = a.arrived();
                o.contained &= arrived == 0;
                o
            },
        ),
        c(
            "net-tcp-listen-autobind/process",
            "process",
            "no network grant: listen() on sockets never bound (the kernel binds them to an ephemeral port on \
             every address), while the host connects to those ports",
            "in the call's network namespace the port is its own and the host's connects are refused, the tool \
             accepts nothing; without one EPERM",
            |s| {
                let body = "held, ports = [], []\n\
                     def autobind(family):\n\
                     \x20   x = socket.socket(family)\n\
                     \x20   x.listen()\n\
                     \x20   x.setblocking(False)\n\
                     \x20   held.append(x)\n\
                     \x20   ports.append(x.getsockname()[1])\n\
                     \x20   return 'listening'\n\
                     attempt('listen', lambda: autobind(socket.AF_INET))\n\
                     attempt('listen6', lambda: autobind(socket.AF_INET6))\n\
                     ready(' '.join(str(p) for p in ports) or '0')\n\
                     n = 0\n\
                     for x in held:\n\
                     \x20   try:\n\
                     \x20       while True:\n\
                     \x20           x.accept()\n\
                     \x20           n += 1\n\
                     \x20   except OSError:\n\
                     \x20       pass\n\
                     say('accepted', n)\n";
                let l: &[&str] = if netns(s) { &["listening"] } else { &["refused EPERM"] };
                listen_case(s, "tcp-autobind", &[], body, &[("listen", l), ("listen6", l)])
            },
        ),
        c(
            "net-udp-granted/process",
            "process",
            "with net.connect = 127.0.0.1:A: UDP (protocol 0, UDP, nonblocking, IPv6) to a receiver on the host's \
             loopback, a connected UDP socket waiting for an answer, UDP to a far address",
            "no datagram arrives at the host: the namespace's own loopback (ECONNREFUSED on the connected socket), \
             the far address unreachable",
            |s| {
                let (a, u) = (Tcp::new(), Udp::new());
                let p = u.port();
                let said = net_probe(
                    s,
                    "udp-granted",
                    &[g("127.0.0.1", a.port())],
                    false,
                    &format!(
                        "attempt('udp', lambda: udp_send('127.0.0.1', {p}))\n\
                         attempt('udp_proto', lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_UDP).sendto(b'x', ('127.0.0.1', {p})) and None)\n\
                         attempt('udp_nonblock', lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM | socket.SOCK_NONBLOCK).sendto(b'x', ('127.0.0.1', {p})) and None)\n\
                         attempt('udp6', lambda: udp_send('::ffff:127.0.0.1', {p}, b'x', socket.AF_INET6))\n\
                         attempt('udp_connected', lambda: udp_conn('127.0.0.1', {p}))\n\
                         attempt('udp_far', lambda: udp_send('10.255.255.1', 53))\n"
                    ),
                );
                let ok: &[&str] = &["ok"];
                proxied(
                    s,
                    &said,
                    &[
                        ("udp", ok),
                        ("udp_proto", ok),
                        ("udp_nonblock", ok),
                        ("udp6", ok),
                        ("udp_connected", REFUSED),
                        ("udp_far", UNREACH),
                    ],
                    &[("the receiver", u.arrived(), 0), ("A", a.arrived(), 0)],
                )
            },
        ),
        c(
            "net-bind-abstract/process",
            "process",
            "bind a socketpair end to an abstract unix name, to squat a name a host daemon binds (no network grant); \
             the host binds the name while the call still holds it",
            "in the call's network namespace the name is the namespace's own (abstract names are per network \
             namespace): the host binds it; without one bind() is EPERM",
            |s| {
                let name = abstract_name("squat");
                let ws = s.ws("bind-abstract");
                let n2 = name.clone();
                let host = during_call(&ws, move |_| host_binds_abstract(&n2));
                let said = net_probe_logged(
                    s,
                    &ws,
                    &s.log_file(),
                    &[],
                    false,
                    &format!(
                        "{READY}a, b = socket.socketpair()\n\
                         attempt('bind_abstract', lambda: a.bind(b'\\0{name}'))\n\
                         ready('held')\n"
                    ),
                );
                let _ = std::fs::write(ws.join("done"), "done");
                let host = host.join().unwrap_or_default();
                let l: &[&str] = if netns(s) { &["ok"] } else { &["refused EPERM"] };
                let mut o = verdict(&said, &[("bind_abstract", l)], &[]);
                o.contained &= host == "the host bound the abstract name";
                o.observed = format!("{}; {host}", o.observed);
                o
            },
        ),
        c(
            "net-bind-udp-granted/process",
            "process",
            "with net.connect = localhost:A (a name): bind UDP 127.0.0.1:P (free on the host) and a socketpair end \
             to an abstract name, squatting a port or a name a host daemon uses; the host binds both meanwhile",
            "the binds are the namespace's own: the host binds the same port and name while the call holds them; \
             nothing arrives at A",
            |s| {
                let a = Tcp::new();
                let p = free_port();
                let name = abstract_name("udp-squat");
                let ws = s.ws("bind-udp");
                let n2 = name.clone();
                let host = during_call(&ws, move |_| {
                    let udp = match UdpSocket::bind(("127.0.0.1", p)) {
                        Ok(_) => "the host bound the UDP port".to_string(),
                        Err(e) => format!("the host could NOT bind the UDP port: {e}"),
                    };
                    format!("{udp}; {}", host_binds_abstract(&n2))
                });
                let said = net_probe_logged(
                    s,
                    &ws,
                    &s.log_file(),
                    &[g("localhost", a.port())],
                    false,
                    &format!(
                        "{READY}u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n\
                         attempt('bind_udp', lambda: u.bind(('127.0.0.1', {p})))\n\
                         x, y = socket.socketpair()\n\
                         attempt('bind_abstract', lambda: x.bind(b'\\0{name}'))\n\
                         ready('held')\n"
                    ),
                );
                let _ = std::fs::write(ws.join("done"), "done");
                let host = host.join().unwrap_or_default();
                let ok: &[&str] = &["ok"];
                let mut o = proxied(s, &said, &[("bind_udp", ok), ("bind_abstract", ok)], &[("A", a.arrived(), 0)]);
                if netns(s) {
                    o.contained &= host == "the host bound the UDP port; the host bound the abstract name";
                    o.observed = format!("{}; {host}", o.observed);
                }
                o
            },
        ),
        c(
            "net-proxy-unaware/process",
            "process",
            "with net.connect = 127.0.0.1:A, a program that ignores the proxy variables: \
             socket.create_connection to 127.0.0.1:A and to 192.0.2.1:80 (timeout 15 s), urllib with no proxy; \
             control: A by CONNECT",
            "each fails at once with ECONNREFUSED or ENETUNREACH (no route, no waiting for the timeout); the \
             variables point at the proxy; A sees only the control",
            |s| {
                let a = Http::new();
                let pa = a.port;
                let said = net_probe(
                    s,
                    "proxy-unaware",
                    &[g("127.0.0.1", pa)],
                    false,
                    &format!(
                        "import urllib.request\n\
                         A = {pa}\n\
                         def urllib_noproxy():\n\
                         \x20   op = urllib.request.build_opener(urllib.request.ProxyHandler(dict()))\n\
                         \x20   op.open('http://127.0.0.1:%d/' % A, timeout=15).read()\n\
                         say('create_connection', timed(lambda: socket.create_connection(('127.0.0.1', A), timeout=15)))\n\
                         say('create_connection_far', timed(lambda: socket.create_connection(('192.0.2.1', 80), timeout=15)))\n\
                         say('urllib_no_proxy', timed(urllib_noproxy))\n\
                         say('http_proxy', os.environ.get('http_proxy', 'unset'))\n\
                         say('all_proxy', os.environ.get('ALL_PROXY', 'unset'))\n\
                         attempt('connect_granted', lambda: via_connect('127.0.0.1:%d' % A, then=get('127.0.0.1:%d' % A)))\n"
                    ),
                );
                proxied(
                    s,
                    &said,
                    &[
                        ("create_connection", REFUSED),
                        ("create_connection_far", UNREACH),
                        ("urllib_no_proxy", REFUSED),
                        ("http_proxy", &["http://127.0.0.1:3128"]),
                        ("all_proxy", &["socks5h://127.0.0.1:3128"]),
                        ("connect_granted", TUNNEL),
                    ],
                    &[("A", a.arrived(), 1)],
                )
            },
        ),
        c(
            "net-proxy-self/process",
            "process",
            "with net.connect = [\"*:3128\", \"127.0.0.1:A\"]: ask the proxy for its own address as a host target \
             (CONNECT 127.0.0.1:3128, localhost:3128, [::1]:3128; SOCKS5 127.0.0.1:3128; GET http://127.0.0.1:3128/), \
             a loop or the host's own 3128; control: A",
            "each refused (403 / SOCKS 2: a loopback address no grant names); the control reaches A",
            |s| {
                let a = Tcp::new();
                let pa = a.port();
                let said = net_probe(
                    s,
                    "proxy-self",
                    &[g("*", 3128), g("127.0.0.1", pa)],
                    false,
                    &format!(
                        "attempt('connect_self', lambda: via_connect('127.0.0.1:3128'))\n\
                         attempt('connect_self_name', lambda: via_connect('localhost:3128'))\n\
                         attempt('connect_self_v6', lambda: via_connect('[::1]:3128'))\n\
                         attempt('socks_self', lambda: via_socks('127.0.0.1', 3128))\n\
                         attempt('forward_self', lambda: via_get('http://127.0.0.1:3128/', '127.0.0.1:3128'))\n\
                         attempt('connect_granted', lambda: via_connect('127.0.0.1:{pa}'))\n"
                    ),
                );
                proxied(
                    s,
                    &said,
                    &[
                        ("connect_self", FORBIDDEN),
                        ("connect_self_name", FORBIDDEN),
                        ("connect_self_v6", FORBIDDEN),
                        ("socks_self", SOCKS_REFUSED),
                        ("forward_self", FORBIDDEN),
                        ("connect_granted", TUNNEL_OPEN),
                    ],
                    &[("A", a.arrived(), 1)],
                )
            },
        ),
        c(
            "net-server/server",
            "server",
            "a wrapped MCP server (tests/servers/net_server.py) with net.connect = 127.0.0.1:A runs what it likes: \
             direct connects to the host's 127.0.0.1:A and :B, CONNECT to B, UDP out; control: CONNECT to A",
            "direct connects refused (its own namespace), the proxy refuses B (403); B sees nothing, A only the \
             control",
            |s| {
                let (a, b) = (Http::new(), Tcp::new());
                let (pa, pb) = (a.port, b.port());
                let said = server_probe(
                    s,
                    "server",
                    &[g("127.0.0.1", pa)],
                    &format!(
                        "say('https_proxy', os.environ.get('HTTPS_PROXY', 'unset'))\n\
                         attempt('direct_granted', lambda: direct('127.0.0.1', {pa}))\n\
                         attempt('direct_other', lambda: direct('127.0.0.1', {pb}))\n\
                         attempt('direct_far', lambda: direct('10.255.255.1', 80))\n\
                         attempt('connect_other', lambda: via_connect('127.0.0.1:{pb}'))\n\
                         attempt('connect_granted', lambda: via_connect('127.0.0.1:{pa}', then=get('127.0.0.1:{pa}')))\n"
                    ),
                );
                proxied(
                    s,
                    &said,
                    &[
                        ("https_proxy", &["http://127.0.0.1:3128"]),
                        ("direct_granted", REFUSED),
                        ("direct_other", REFUSED),
                        ("direct_far", UNREACH),
                        ("connect_other", FORBIDDEN),
                        ("connect_granted", TUNNEL),
                    ],
                    &[("B", b.arrived(), 0), ("A", a.arrived(), 1)],
                )
            },
        ),
        c(
            "net-server-nogrant/server",
            "server",
            "a wrapped MCP server without any grant: direct connect to the host's 127.0.0.1:A, and CONNECT \
             127.0.0.1:A through warden's proxy address 127.0.0.1:3128",
            "the direct connect refused (ECONNREFUSED in its own namespace, EPERM without one); the proxy, which \
             listens in every call with a network namespace, refuses the CONNECT (403: no grant; EPERM without a \
             namespace); A sees nothing",
            |s| {
                let a = Tcp::new();
                let pa = a.port();
                let said = server_probe(
                    s,
                    "server-nogrant",
                    &[],
                    &format!(
                        "attempt('direct', lambda: direct('127.0.0.1', {pa}))\n\
                         attempt('proxy', lambda: via_connect('127.0.0.1:{pa}'))\n"
                    ),
                );
                let e = no_route(s);
                let proxy: &[&str] = if netns(s) { &["http 403"] } else { e };
                verdict(&said, &[("direct", e), ("proxy", proxy)], &[("A", a.arrived(), 0)])
            },
        ),
        c(
            "net-no-netns/process",
            "process",
            "with WARDEN_NAMESPACES=off (no network namespace, as on a host that refuses them): a tool with \
             net.connect = 127.0.0.1:A that would connect straight to A; a tool without grants that opens AF_INET \
             sockets",
            "the granted tool is unavailable in enforce mode (SANDBOX_UNAVAILABLE naming the reason) and never \
             runs; the other gets EPERM from socket(); A sees nothing",
            |s| {
                let a = Tcp::new();
                let pa = a.port();
                let ws = s.ws("no-netns");
                let body = format!("{NET_PRELUDE}attempt('direct', lambda: direct('127.0.0.1', {pa}))\n");
                std::fs::write(ws.join("probe.py"), body).unwrap();
                let args = json!({ "command": format!("{PYTHON} probe.py") }).to_string();
                let off = [("WARDEN_NAMESPACES", "off")];
                // The workspace read-only: no protected path to hold, so only the network can make it unavailable.
                let granted = s.policy_file(
                    &net_policy(&[g("127.0.0.1", pa)], false)
                        .replace("fs.write = [\"{workspace}\", \"{tmp}\"]", "fs.write = [\"{tmp}\"]"),
                );
                let r1 = s.warden_env(
                    &ws,
                    &s.log_file(),
                    &["--policy", granted.to_str().unwrap(), "call", "shell", &args],
                    &off,
                );
                // Best-effort: the workspace's protected paths cannot be held either (no mount namespace).
                let plain = s.policy_file(
                    &net_policy(&[], false)
                        .replace("version = 1\n", "version = 1\n[sandbox]\nmode = \"best-effort\"\n"),
                );
                let r2 = Said::of(s.warden_env(
                    &ws,
                    &s.log_file(),
                    &["--policy", plain.to_str().unwrap(), "call", "shell", &args],
                    &off,
                ));
                let arrived = a.arrived();
                let msg = r1.error_message();
                let named = msg.contains("network") && (msg.contains("WARDEN_NAMESPACES") || msg.contains("namespace"));
                let first = r1.error_code() == "SANDBOX_UNAVAILABLE" && named;
                let second = verdict(&r2, &[("direct", &["refused EPERM"])], &[("A", arrived, 0)]);
                Observed::new(
                    first && second.contained,
                    format!("granted: {}; without grants: {}", r1.brief(), second.observed),
                )
            },
        ),
        c(
            "net-mptcp/process",
            "process",
            "connect with an MPTCP socket (IPPROTO_MPTCP = 262), which Landlock's TCP rules do not cover",
            "socket() refused with EPERM; the listener sees no connection",
            |s| {
                let l = Tcp::new();
                let r = probe(
                    s,
                    "mptcp",
                    SHELL,
                    &format!(
                        "attempt('mptcp', lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM, 262).connect(('127.0.0.1', {})))\n",
                        l.port()
                    ),
                );
                judged(&r, "EPERM", 1, l.arrived())
            },
        ),
        c("net-raw/process", "process", "open raw IPv4 (ICMP) and raw IPv6 sockets", "EPERM for both", |s| {
            let r = probe(
                s,
                "raw",
                SHELL,
                "attempt('raw4', lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP))\n\
                     attempt('raw6', lambda: socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6))\n",
            );
            judged(&r, "EPERM", 2, 0)
        }),
        c(
            "net-packet/process",
            "process",
            "open AF_PACKET sockets (raw and datagram, ETH_P_ALL)",
            "EPERM for both",
            |s| {
                let r = probe(
                    s,
                    "packet",
                    SHELL,
                    "attempt('packet', lambda: socket.socket(17, socket.SOCK_RAW, 0x0300))\n\
                     attempt('packet_dgram', lambda: socket.socket(17, socket.SOCK_DGRAM, 0x0300))\n",
                );
                judged(&r, "EPERM", 2, 0)
            },
        ),
        c(
            "net-netlink/process",
            "process",
            "open netlink sockets (route, audit, uevent) to talk to the kernel",
            "EPERM for each",
            |s| {
                let r = probe(
                    s,
                    "netlink",
                    SHELL,
                    "attempt('route', lambda: socket.socket(16, socket.SOCK_RAW, 0))\n\
                     attempt('audit', lambda: socket.socket(16, socket.SOCK_RAW, 9))\n\
                     attempt('uevent', lambda: socket.socket(16, socket.SOCK_DGRAM, 15))\n",
                );
                judged(&r, "EPERM", 3, 0)
            },
        ),
        c(
            "net-unix-abstract/process",
            "process",
            "connect to an abstract unix socket that a host daemon listens on",
            "in the call's network namespace abstract names are its own: ECONNREFUSED; without one socket(AF_UNIX) \
             is EPERM; the daemon sees no connection",
            |s| {
                use std::os::linux::net::SocketAddrExt;
                let name = format!("warden-escape-{}", std::process::id());
                let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
                let l = UnixListener::bind_addr(&addr).unwrap();
                l.set_nonblocking(true).unwrap();
                let r = probe(
                    s,
                    "abstract",
                    SHELL,
                    &format!(
                        "attempt('abstract', lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).connect('\\0{name}'))\n"
                    ),
                );
                judged(&r, if netns(s) { "ECONNREFUSED" } else { "EPERM" }, 1, unix_arrived(&l))
            },
        ),
        c(
            "net-unix-path/process",
            "process",
            "connect to a pathname unix socket outside every grant (like /run/docker.sock); also /dev/log",
            "in the call's root built from its grants the path does not exist: ENOENT; without one (no namespaces) \
             seccomp refuses the socket, EPERM (Landlock does not look at connect()); nothing arrives",
            |s| {
                let path = s.side_dir("daemon").join("daemon.sock");
                let l = UnixListener::bind(&path).unwrap();
                l.set_nonblocking(true).unwrap();
                let r = probe(
                    s,
                    "unix-path",
                    SHELL,
                    &format!(
                        "attempt('daemon', lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).connect({:?}))\n\
                         attempt('devlog', lambda: socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).connect('/dev/log'))\n",
                        path.display().to_string()
                    ),
                );
                judged(&r, if netns(s) { "ENOENT" } else { "EPERM" }, 2, unix_arrived(&l))
            },
        ),
        c(
            "net-mptcp-granted/process",
            "process",
            "with net.connect = 127.0.0.1:A, connect to A over MPTCP (a protocol Landlock does not filter)",
            "EPERM (seccomp admits protocol 0, TCP and UDP only); A's listener sees nothing",
            |s| {
                let a = Tcp::new();
                let r = probe(
                    s,
                    "mptcp-granted",
                    granted(a.port()),
                    &format!(
                        "attempt('mptcp', lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM, 262).connect(('127.0.0.1', {})))\n",
                        a.port()
                    ),
                );
                judged_granted(s, &r, "EPERM", 1, a.arrived())
            },
        ),
        c(
            "net-unix-granted/process",
            "process",
            "with a network grant, connect to a host daemon's pathname unix socket",
            "ENOENT: the call's root holds only its grants (without namespaces a grant is unavailable)",
            |s| {
                let a = Tcp::new();
                let path = s.side_dir("daemon").join("daemon.sock");
                let l = UnixListener::bind(&path).unwrap();
                l.set_nonblocking(true).unwrap();
                let r = probe(
                    s,
                    "unix-granted",
                    granted(a.port()),
                    &format!(
                        "attempt('daemon', lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).connect({:?}))\n",
                        path.display().to_string()
                    ),
                );
                judged_granted(s, &r, "ENOENT", 1, unix_arrived(&l))
            },
        ),
        c(
            "net-raw-granted/process",
            "process",
            "with a network grant, open raw, packet and SCTP (SOCK_SEQPACKET, protocol 0) sockets",
            "EPERM for all three",
            |s| {
                let a = Tcp::new();
                let r = probe(
                    s,
                    "raw-granted",
                    granted(a.port()),
                    "attempt('raw', lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP))\n\
                     attempt('packet', lambda: socket.socket(17, socket.SOCK_RAW, 0x0300))\n\
                     attempt('sctp', lambda: socket.socket(socket.AF_INET, socket.SOCK_SEQPACKET, 0))\n",
                );
                judged_granted(s, &r, "EPERM", 3, 0)
            },
        ),
        c(
            "net-tcp-other-port/component",
            "component",
            "testkit `connect` to port B with net.connect = 127.0.0.1:A",
            "PERMISSION_DENIED (the socket address check); B's listener sees nothing",
            |s| {
                let (a, b) = (Tcp::new(), Tcp::new());
                let k = s.kit(
                    "tcp-other-c",
                    &format!("[tools.connect]\nplugin = \"kit\"\nnet.connect = [\"127.0.0.1:{}\"]\n", a.port()),
                );
                let r = k.call("connect", json!({"addr": format!("127.0.0.1:{}", b.port())}));
                let arrived = b.arrived();
                Observed::new(
                    code(&r) == "PERMISSION_DENIED" && arrived == 0,
                    format!("{}; arrived: {arrived}", brief(&r)),
                )
            },
        ),
        c(
            "net-dns/component",
            "component",
            "testkit `connect` to localhost:PORT by name, without any network grant",
            "refused (no name lookup, no socket); the listener sees nothing",
            |s| {
                let l = Tcp::new();
                let k = s.kit("dns-c", "[tools.connect]\nplugin = \"kit\"\n");
                let r = k.call("connect", json!({"addr": format!("localhost:{}", l.port())}));
                let arrived = l.arrived();
                Observed::new(r.error.is_some() && arrived == 0, format!("{}; arrived: {arrived}", brief(&r)))
            },
        ),
        c(
            "net-dns-ip-grant/component",
            "component",
            "with net.connect = 127.0.0.1:A (an address), connect to localhost:A by name",
            "refused: name lookup stays off when every grant is an address; the listener sees nothing",
            |s| {
                let a = Tcp::new();
                let k = s.kit(
                    "dns-ip-c",
                    &format!("[tools.connect]\nplugin = \"kit\"\nnet.connect = [\"127.0.0.1:{}\"]\n", a.port()),
                );
                let r = k.call("connect", json!({"addr": format!("localhost:{}", a.port())}));
                let arrived = a.arrived();
                Observed::new(r.error.is_some() && arrived == 0, format!("{}; arrived: {arrived}", brief(&r)))
            },
        ),
        c(
            "net-unix-dgram-pair/process",
            "process",
            "a datagram socketpair (no grant needed; SOCK_DGRAM, and SOCK_RAW, which AF_UNIX turns into a datagram \
             pair), then sendto a host daemon's pathname datagram socket from one end (a stream pair cannot: it is \
             connected to itself)",
            "in the call's root built from its grants the pairs are made but the daemon's path does not exist \
             (ENOENT); without namespaces socketpair(AF_UNIX, SOCK_DGRAM | SOCK_RAW) is EPERM (seccomp); nothing \
             arrives at the daemon",
            |s| {
                let path = s.side_dir("dgram").join("daemon.sock");
                let d = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
                d.set_nonblocking(true).unwrap();
                let r = probe(
                    s,
                    "dgram-pair",
                    SHELL,
                    &format!(
                        "attempt('dgram_pair', lambda: socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)[0].sendto(b'x', {:?}))\n\
                         attempt('raw_pair', lambda: socket.socketpair(socket.AF_UNIX, socket.SOCK_RAW)[0].sendto(b'x', {:?}))\n\
                         a, b = socket.socketpair()\n\
                         attempt('stream_pair_sendto', lambda: a.sendto(b'x', {:?}))\n",
                        path.display().to_string(),
                        path.display().to_string(),
                        path.display().to_string()
                    ),
                );
                let mut arrived = 0;
                while d.recv(&mut [0u8; 64]).is_ok() {
                    arrived += 1;
                }
                // A stream pair ignores the destination (the datagram goes to its peer), which is harmless.
                let out = r.out();
                let errno = if netns(s) { "ENOENT" } else { "EPERM" };
                let ok = r.success()
                    && out.contains(&format!("dgram_pair refused {errno}"))
                    && out.contains(&format!("raw_pair refused {errno}"))
                    && arrived == 0;
                Observed::new(ok, format!("{}; arrived at the daemon: {arrived}", r.brief()))
            },
        ),
    ]
}
