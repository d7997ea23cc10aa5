//! The proxy end to end over real loopback sockets: a proxy on a std listener
//! (as the sandbox helper hands it over), small upstream servers, and blocking
//! clients that speak HTTP and SOCKS5 by hand.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::{EgressPolicy, Journal, MAX_CONNECTIONS, Proxy};
use warden_policy::NetGrant;

const WAIT: Duration = Duration::from_secs(5);

fn listen() -> (TcpListener, u16) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
    let port = l.local_addr().unwrap_or_else(|e| panic!("{e}")).port();
    (l, port)
}

/// An upstream that echoes every connection until its client closes.
fn echo_server() -> u16 {
    let (l, port) = listen();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            std::thread::spawn(move || {
                let mut s = s;
                let mut buf = [0u8; 4096];
                while let Ok(n) = s.read(&mut buf) {
                    if n == 0 || s.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            });
        }
    });
    port
}

/// An upstream HTTP server: takes what arrives on each connection until a
/// pause, reports it, answers `ok` and closes.
fn http_server() -> (u16, Receiver<String>) {
    let (l, port) = listen();
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            let tx = tx.clone();
            std::thread::spawn(move || {
                let mut s = s;
                let _ = s.set_read_timeout(Some(Duration::from_millis(400)));
                let mut got = Vec::new();
                let mut buf = [0u8; 4096];
                while let Ok(n) = s.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    got.extend_from_slice(&buf[..n]);
                }
                let _ = tx.send(String::from_utf8_lossy(&got).into_owned());
                let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
            });
        }
    });
    (port, rx)
}

struct Running {
    proxy: Option<Proxy>,
    port: u16,
    journal: Arc<Journal>,
}

fn proxy(grants: &[(&str, u16)], allow_private: bool) -> Running {
    let policy = EgressPolicy {
        tool: "fetch".into(),
        grants: grants.iter().map(|(h, p)| NetGrant { host: h.to_string(), port: *p }).collect(),
        allow_private,
        credentials: Vec::new(),
    };
    let (l, port) = listen();
    let journal = Arc::new(Journal::default());
    let proxy = Proxy::start(l, Arc::new(policy), journal.clone()).unwrap_or_else(|e| panic!("{e}"));
    Running { proxy: Some(proxy), port, journal }
}

impl Running {
    fn client(&self) -> TcpStream {
        let s = TcpStream::connect(("127.0.0.1", self.port)).unwrap_or_else(|e| panic!("{e}"));
        s.set_read_timeout(Some(WAIT)).unwrap_or_else(|e| panic!("{e}"));
        s
    }

    /// Sends `request` whole and reads the answer to its end.
    fn exchange(&self, request: &str) -> String {
        let mut s = self.client();
        s.write_all(request.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    }

    /// Waits for `n` attempts in the journal and returns them.
    fn attempts(&self, n: usize) -> Vec<Value> {
        let deadline = Instant::now() + WAIT;
        let mut all = Vec::new();
        while Instant::now() < deadline {
            if let Some(t) = self.journal.take()
                && let Some(a) = t["attempts"].as_array()
            {
                all.extend(a.iter().cloned());
            }
            if all.len() >= n {
                return all;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("{} attempts recorded, {n} awaited: {all:?}", all.len());
    }
}

/// Reads a response head byte by byte (the tunnel's bytes follow it).
fn read_head(s: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match s.read(&mut b) {
            Ok(1) => head.push(b[0]),
            other => panic!("head cut short ({other:?}): {:?}", String::from_utf8_lossy(&head)),
        }
    }
    String::from_utf8_lossy(&head).into_owned()
}

fn echo_through(s: &mut TcpStream, text: &[u8]) {
    s.write_all(text).unwrap_or_else(|e| panic!("{e}"));
    let mut back = vec![0u8; text.len()];
    s.read_exact(&mut back).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(back, text);
}

#[test]
fn connect_to_a_granted_address_tunnels() {
    let echo = echo_server();
    let p = proxy(&[("127.0.0.1", echo)], false);
    let mut s = p.client();
    write!(s, "CONNECT 127.0.0.1:{echo} HTTP/1.1\r\nHost: 127.0.0.1:{echo}\r\n\r\nearly")
        .unwrap_or_else(|e| panic!("{e}"));
    let head = read_head(&mut s);
    assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
    let mut early = [0u8; 5];
    s.read_exact(&mut early).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(&early, b"early", "bytes sent past the head go first");
    echo_through(&mut s, b"hello");
    s.shutdown(Shutdown::Write).unwrap_or_else(|e| panic!("{e}"));
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    let a = &p.attempts(1)[0];
    assert_eq!(a["via"], "connect");
    assert_eq!(a["allowed"], true);
    assert_eq!(a["host"], "127.0.0.1");
    assert_eq!(a["address"], format!("127.0.0.1:{echo}"));
    assert_eq!(a["reason"], format!("granted by net.connect \"127.0.0.1:{echo}\""));
    assert_eq!(a["bytes_up"], 10);
    assert_eq!(a["bytes_down"], 10);
}

#[test]
fn connect_elsewhere_is_refused_with_the_grant_to_add() {
    let echo = echo_server();
    let p = proxy(&[("127.0.0.1", echo)], false);
    let other = echo_server();
    let r = p.exchange(&format!("CONNECT 127.0.0.1:{other} HTTP/1.1\r\n\r\n"));
    assert!(r.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{r}");
    assert!(r.contains("X-Warden-Refusal: 1\r\n") && r.contains("Content-Type: text/plain"), "{r}");
    assert!(
        r.contains(&format!(
            "warden egress proxy: fetch has no grant for 127.0.0.1:{other}; add \"127.0.0.1:{other}\" to net.connect"
        )),
        "{r}"
    );
    let a = &p.attempts(1)[0];
    assert_eq!(a["allowed"], false);
    assert_eq!(a["port"], other);
    assert!(a["reason"].as_str().unwrap_or("").contains("net.connect"), "{a}");
}

#[test]
fn a_granted_name_that_resolves_to_loopback_needs_allow_private() {
    let echo = echo_server();
    let p = proxy(&[("localhost", echo)], false);
    let r = p.exchange(&format!("CONNECT localhost:{echo} HTTP/1.1\r\nHost: localhost:{echo}\r\n\r\n"));
    assert!(r.starts_with("HTTP/1.1 403 "), "{r}");
    assert!(
        r.contains("localhost resolves to") && r.contains("loopback") && r.contains("net.allow_private = true"),
        "{r}"
    );
    let a = &p.attempts(1)[0];
    assert_eq!(a["allowed"], false);
    assert!(a["address"].as_str().is_some_and(|s| s.contains("127.0.0.1") || s.contains("::1")), "{a}");

    let p = proxy(&[("localhost", echo)], true);
    let mut s = p.client();
    write!(s, "CONNECT LocalHost.:{echo} HTTP/1.1\r\n\r\n").unwrap_or_else(|e| panic!("{e}"));
    let head = read_head(&mut s);
    assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
    echo_through(&mut s, b"private ok");
}

#[test]
fn connect_with_a_different_host_header_is_a_bad_request() {
    let echo = echo_server();
    let p = proxy(&[("127.0.0.1", echo)], false);
    for host in [format!("evil.example:{echo}"), "127.0.0.1:1".to_string(), "127.0.0.1".to_string()] {
        let r = p.exchange(&format!("CONNECT 127.0.0.1:{echo} HTTP/1.1\r\nHost: {host}\r\n\r\n"));
        assert!(r.starts_with("HTTP/1.1 400 "), "{host}: {r}");
        assert!(r.contains("does not agree"), "{r}");
    }
    let r = p.exchange(&format!("CONNECT 127.0.0.1:{echo} HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"));
    assert!(r.starts_with("HTTP/1.1 400 "), "{r}");
    assert_eq!(p.attempts(4).iter().filter(|a| a["allowed"] == false).count(), 4);
}

#[test]
fn plain_http_is_forwarded_in_origin_form_without_proxy_headers() {
    let (port, seen) = http_server();
    let p = proxy(&[("127.0.0.1", port)], false);
    let r = p.exchange(&format!(
        "GET http://127.0.0.1:{port}/path?q=1 HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nProxy-Connection: keep-alive\r\n\
         Proxy-Authorization: Basic eDp5\r\nConnection: keep-alive, X-Drop\r\nX-Drop: 1\r\nX-Keep: 2\r\n\r\n"
    ));
    assert!(r.starts_with("HTTP/1.1 200 OK") && r.ends_with("ok"), "{r}");
    let got = seen.recv_timeout(WAIT).unwrap_or_else(|e| panic!("{e}"));
    assert!(got.starts_with("GET /path?q=1 HTTP/1.1\r\n"), "{got}");
    assert!(got.contains("\r\nConnection: close\r\n") && got.contains("\r\nX-Keep: 2\r\n"), "{got}");
    assert!(!got.contains("Proxy-") && !got.contains("X-Drop") && !got.contains("keep-alive"), "{got}");
    let a = &p.attempts(1)[0];
    assert_eq!(a["via"], "http");
    assert_eq!(a["allowed"], true);
    assert_eq!(a["bytes_up"], got.len());
    assert_eq!(a["bytes_down"], r.len());

    // Host must be there and agree; the default port is 80.
    for head in [
        format!("GET http://127.0.0.1:{port}/ HTTP/1.1\r\n\r\n"),
        format!("GET http://127.0.0.1:{port}/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"),
        format!("GET http://127.0.0.1:{port}/ HTTP/1.1\r\nHost: other.example:{port}\r\n\r\n"),
    ] {
        let r = p.exchange(&head);
        assert!(r.starts_with("HTTP/1.1 400 "), "{head}: {r}");
    }
    // Not granted: refused before any connection.
    let r = p.exchange("GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n");
    assert!(r.starts_with("HTTP/1.1 403 ") && r.contains("\"example.com:80\""), "{r}");
    assert!(seen.recv_timeout(Duration::from_millis(600)).is_err(), "nothing else reached upstream");
}

#[test]
fn requests_to_the_proxy_itself_and_https_urls_are_bad_requests() {
    let p = proxy(&[("*", 80)], false);
    let r = p.exchange("GET /x HTTP/1.1\r\nHost: 127.0.0.1:3128\r\n\r\n");
    assert!(r.starts_with("HTTP/1.1 400 ") && r.contains("takes only proxy requests"), "{r}");
    let r = p.exchange("GET https://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n");
    assert!(r.starts_with("HTTP/1.1 400 ") && r.contains("CONNECT"), "{r}");
    let r = p.exchange("GET http://example.com/ HTTP/1.1\nHost: example.com\n\n");
    assert!(r.starts_with("HTTP/1.1 400 ") && r.contains("CRLF"), "bare LF: {r}");
    let r = p.exchange("GET http://example.com/ HTTP/1.1\r\nHost: example.com\nX: 1\r\n\r\n");
    assert!(r.starts_with("HTTP/1.1 400 ") && r.contains("CRLF"), "bare LF: {r}");
    let attempts = p.attempts(4);
    assert!(attempts.iter().all(|a| a["allowed"] == false), "{attempts:?}");
}

#[test]
fn smuggling_is_refused_and_a_pipelined_request_never_reaches_upstream() {
    let (port, seen) = http_server();
    let p = proxy(&[("127.0.0.1", port)], false);
    let start = format!("POST http://127.0.0.1:{port}/a HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n");
    for (case, headers) in [
        ("CL and TE", "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n"),
        ("two CLs", "Content-Length: 5\r\nContent-Length: 6\r\n"),
        ("a CL list", "Content-Length: 5, 6\r\n"),
        ("TE gzip", "Transfer-Encoding: gzip, chunked\r\n"),
        ("two TEs", "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n"),
        ("TE identity", "Transfer-Encoding: identity\r\n"),
        ("space before colon", "Transfer-Encoding : chunked\r\n"),
        ("line folding", "X-A: 1\r\n Transfer-Encoding: chunked\r\n"),
        ("Connection names CL", "Content-Length: 5\r\nConnection: content-length\r\n"),
    ] {
        let r = p.exchange(&format!("{start}{headers}\r\nhello"));
        assert!(r.starts_with("HTTP/1.1 400 "), "{case}: {r}");
    }
    assert!(seen.recv_timeout(Duration::from_millis(600)).is_err(), "nothing reached upstream");

    let second = format!("GET http://127.0.0.1:{port}/second HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n");
    for body in [
        format!("Transfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n0\r\nX-Trailer: t\r\n\r\n{second}"),
        format!("Content-Length: 5\r\n\r\nhello{second}"),
        format!("Content-Length: 5\r\nContent-Length: 5\r\n\r\nhello{second}"),
    ] {
        let r = p.exchange(&format!("{start}{body}"));
        assert!(r.starts_with("HTTP/1.1 200 OK"), "{r}");
        let got = seen.recv_timeout(WAIT).unwrap_or_else(|e| panic!("{e}"));
        assert!(got.contains("hello"), "{got}");
        assert!(!got.contains("second") && !got.contains("ext=") && !got.contains("X-Trailer"), "{got}");
        assert_eq!(got.matches("Content-Length").count(), usize::from(body.starts_with("Content-Length")), "{got}");
    }
    assert!(seen.recv_timeout(Duration::from_millis(600)).is_err(), "the second request never arrived");
}

fn socks_connect(p: &Running, addr: &[u8], port: u16) -> (TcpStream, u8) {
    let mut s = p.client();
    s.write_all(&[5, 2, 0x02, 0x00]).unwrap_or_else(|e| panic!("{e}"));
    let mut choice = [0u8; 2];
    s.read_exact(&mut choice).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(choice, [5, 0]);
    let mut req = vec![5, 1, 0];
    req.extend_from_slice(addr);
    req.extend_from_slice(&port.to_be_bytes());
    s.write_all(&req).unwrap_or_else(|e| panic!("{e}"));
    let mut reply = [0u8; 10];
    s.read_exact(&mut reply).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((reply[0], reply[3]), (5, 1), "{reply:?}");
    (s, reply[1])
}

fn domain(name: &str) -> Vec<u8> {
    let mut v = vec![3, name.len() as u8];
    v.extend_from_slice(name.as_bytes());
    v
}

#[test]
fn socks5_by_name_and_by_address() {
    let echo = echo_server();
    let p = proxy(&[("localhost", echo), ("127.0.0.1", echo)], false);
    let (mut s, code) = socks_connect(&p, &[1, 127, 0, 0, 1], echo);
    assert_eq!(code, 0);
    echo_through(&mut s, b"by address");
    drop(s);
    let (_, code) = socks_connect(&p, &domain("localhost"), echo);
    assert_eq!(code, 0, "localhost's 127.0.0.1 is named by a grant");
    let (_, code) = socks_connect(&p, &[1, 127, 0, 0, 2], echo);
    assert_eq!(code, 2, "an address no grant names");
    let (_, code) = socks_connect(&p, &domain("other.example"), echo);
    assert_eq!(code, 2);
    let mut v6 = vec![4];
    v6.extend_from_slice(&std::net::Ipv6Addr::LOCALHOST.octets());
    let (_, code) = socks_connect(&p, &v6, echo);
    assert_eq!(code, 2);
    let attempts = p.attempts(5);
    assert!(attempts.iter().all(|a| a["via"] == "socks5"), "{attempts:?}");
    assert_eq!(attempts.iter().filter(|a| a["allowed"] == true).count(), 2, "{attempts:?}");
    assert!(attempts.iter().any(|a| a["host"] == "::1"), "{attempts:?}");

    let by_name = proxy(&[("localhost", echo)], false);
    let (_, code) = socks_connect(&by_name, &domain("localhost"), echo);
    assert_eq!(code, 2, "localhost is loopback: refused without allow_private");
    let a = &by_name.attempts(1)[0];
    assert!(a["reason"].as_str().is_some_and(|r| r.contains("net.allow_private")), "{a}");

    let open = proxy(&[("localhost", echo)], true);
    let (mut s, code) = socks_connect(&open, &domain("localhost"), echo);
    assert_eq!(code, 0);
    echo_through(&mut s, b"by name");
    drop(s);
    let (_, code) = socks_connect(&open, &[1, 127, 0, 0, 1], echo);
    assert_eq!(code, 2, "allow_private does not make an address literal granted");

    // Not CONNECT: command not supported.
    let mut s = open.client();
    s.write_all(&[5, 1, 0, 5, 2, 0, 1, 127, 0, 0, 1, 0, 80]).unwrap_or_else(|e| panic!("{e}"));
    let mut reply = [0u8; 12];
    s.read_exact(&mut reply).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(reply[3], 7);
    let attempts = open.attempts(3);
    assert!(attempts.iter().any(|a| a["reason"].as_str().is_some_and(|r| r.contains("only CONNECT"))), "{attempts:?}");
}

#[test]
fn dropping_the_proxy_closes_live_tunnels() {
    let echo = echo_server();
    let mut p = proxy(&[("127.0.0.1", echo)], false);
    let mut s = p.client();
    write!(s, "CONNECT 127.0.0.1:{echo} HTTP/1.1\r\n\r\n").unwrap_or_else(|e| panic!("{e}"));
    assert!(read_head(&mut s).starts_with("HTTP/1.1 200 "));
    echo_through(&mut s, b"alive");
    let before = Instant::now();
    drop(p.proxy.take());
    let mut buf = [0u8; 16];
    let n = s.read(&mut buf).unwrap_or(0);
    assert_eq!(n, 0, "the tunnel closed");
    assert!(before.elapsed() < Duration::from_secs(2));
    let a = &p.attempts(1)[0];
    assert_eq!(a["allowed"], true);
    assert!(a["reason"].as_str().is_some_and(|r| r.contains("the call ended")), "{a}");
    // The accept loop lets go of the socket as soon as it next runs.
    let deadline = Instant::now() + WAIT;
    while TcpStream::connect(("127.0.0.1", p.port)).is_ok() {
        assert!(Instant::now() < deadline, "still listening");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn connections_past_the_bound_are_answered_busy() {
    let echo = echo_server();
    let p = proxy(&[("127.0.0.1", echo)], false);
    let idle: Vec<TcpStream> = (0..MAX_CONNECTIONS).map(|_| p.client()).collect();
    std::thread::sleep(Duration::from_millis(200));
    let r = p.exchange(&format!("CONNECT 127.0.0.1:{echo} HTTP/1.1\r\n\r\n"));
    assert!(r.starts_with("HTTP/1.1 503 ") && r.contains("more than 64 connections"), "{r}");
    drop(idle);
    // 65 connections: past the attempts kept in full, the refusal is still
    // counted under its destination.
    let deadline = Instant::now() + WAIT;
    let mut seen = Vec::new();
    while !seen.iter().any(|a: &Value| a["port"] == echo && a["allowed"] == false) {
        assert!(Instant::now() < deadline, "{seen:?}");
        if let Some(t) = p.journal.take() {
            seen.extend(t["attempts"].as_array().into_iter().flatten().cloned());
            for d in t["refused_destinations"].as_array().into_iter().flatten() {
                seen.push(json!({"port": d["port"], "allowed": false}));
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
