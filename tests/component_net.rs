//! Components on the network: sockets, name lookups and wasi:http
//! judged by the egress rules, through the executor. Servers listen on
//! 127.0.0.1 only; nothing leaves the machine.
//!
//! * the hostile testkit's `connect` (std's `TcpStream::connect`, which looks a
//!   name up through `wasi:sockets/ip-name-lookup`);
//! * the builtin `http_fetch` (the `net` component, `wasi:http`), against a
//!   small HTTP server on loopback.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod util;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use util::kit::{Kit, code, message};
use warden::Status;

/// The testkit with the builtin `net` plugin, then `extra`.
fn kit(extra: &str) -> Kit {
    Kit::new("64MiB", &format!("[plugins.net]\nsource = \"builtin:net\"\n{extra}"))
}

/// A listener on 127.0.0.1 that accepts nothing (connections pile up in its backlog).
fn listener() -> (TcpListener, u16) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.set_nonblocking(true).unwrap();
    let port = l.local_addr().unwrap().port();
    (l, port)
}

/// A small HTTP/1.1 server on 127.0.0.1: `/` answers "hello", `/big` 3 MiB,
/// `/here` redirects to `/`, `/away` redirects to `away` (another port).
/// Each request's head is kept. Stops when dropped (or after a minute).
struct Server {
    port: u16,
    heads: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn server(away: u16) -> Server {
    let (l, port) = listener();
    let heads = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let (h, s) = (heads.clone(), stop.clone());
    std::thread::spawn(move || {
        let until = Instant::now() + Duration::from_secs(60);
        while !s.load(Ordering::SeqCst) && Instant::now() < until {
            let Ok((mut c, _)) = l.accept() else {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            };
            c.set_nonblocking(false).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && head.len() < 16 << 10 {
                match c.read(&mut byte) {
                    Ok(1) => head.push(byte[0]),
                    _ => break,
                }
            }
            let head = String::from_utf8_lossy(&head).into_owned();
            let path = head.split(' ').nth(1).unwrap_or("/").to_string();
            let is_head = head.starts_with("HEAD ");
            h.lock().unwrap().push(head);
            let (status, extra, body): (&str, String, Vec<u8>) = match path.as_str() {
                "/" => ("200 OK", "X-Test: one\r\nX-Test: two\r\n".into(), b"hello \xff".to_vec()),
                "/big" => ("200 OK", String::new(), vec![b'x'; 3 << 20]),
                "/here" => ("302 Found", "Location: /\r\n".into(), Vec::new()),
                "/away" => ("302 Found", format!("Location: http://127.0.0.1:{away}/\r\n"), Vec::new()),
                _ => ("404 Not Found", String::new(), Vec::new()),
            };
            let reply =
                format!("HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n{extra}\r\n", body.len());
            let _ = c.write_all(reply.as_bytes());
            if !is_head {
                let _ = c.write_all(&body);
            }
        }
    });
    Server { port, heads, stop }
}

/// Components keep per-address checks: a literal grant reaches that address;
/// a granted name is looked up by warden and its loopback answer dropped
/// without `net.allow_private` (nothing connects, the error names the key);
/// with it the same name connects; an ungranted name is not even looked up.
#[test]
fn component_sockets_follow_the_egress_rules() {
    let (l, port) = listener();
    let k = kit(&format!("[tools.connect]\nplugin = \"kit\"\nnet.connect = [\"localhost:{port}\"]\n"));
    let r = k.call("connect", json!({"addr": format!("localhost:{port}")}));
    assert_eq!(code(&r), "PERMISSION_DENIED", "a name resolving to loopback: {r:?}");
    assert!(message(&r).contains("net.allow_private"), "{r:?}");
    std::thread::sleep(Duration::from_millis(50));
    assert!(l.accept().is_err(), "a connection reached loopback through a granted name");
    let record = k.last_record();
    assert_eq!(record["network"]["refused"], 1, "the refusal is in the audit record: {record}");

    // The address itself, even granted by name, is not reachable by its literal.
    let r = k.call("connect", json!({"addr": format!("127.0.0.1:{port}")}));
    assert_eq!(code(&r), "PERMISSION_DENIED", "{r:?}");
    assert!(message(&r).contains("net.connect"), "{r:?}");

    // A name no grant covers: refused before any lookup.
    let r = k.call("connect", json!({"addr": format!("other.invalid:{port}")}));
    assert_eq!(code(&r), "PERMISSION_DENIED", "{r:?}");
    assert!(message(&r).contains("no grant for other.invalid") && message(&r).contains("net.connect"), "{r:?}");
    std::thread::sleep(Duration::from_millis(50));
    assert!(l.accept().is_err());

    let k = kit(&format!(
        "[tools.connect]\nplugin = \"kit\"\nnet.connect = [\"localhost:{port}\"]\nnet.allow_private = true\n"
    ));
    let r = k.call("connect", json!({"addr": format!("localhost:{port}")}));
    assert_eq!(r.result, Some(json!("connected")), "allow_private: {r:?}");
    assert!(util::within(Duration::from_secs(5), || l.accept().is_ok()), "the admitted connection did not arrive");

    let k = kit(&format!("[tools.connect]\nplugin = \"kit\"\nnet.connect = [\"127.0.0.1:{port}\"]\n"));
    let r = k.call("connect", json!({"addr": format!("127.0.0.1:{port}")}));
    assert_eq!(r.result, Some(json!("connected")), "a literal grant: {r:?}");
    let arrived = util::within(Duration::from_secs(5), || l.accept().is_ok());
    assert!(arrived, "the literal grant's connection did not arrive");
}

/// `http_fetch` over wasi:http: a granted literal address works (status,
/// repeated headers joined, lossy text, HEAD, a redirect on the same
/// authority, truncation at `max_bytes`); an ungranted port, a redirect to
/// one, and a granted name that resolves to loopback are refused with the key
/// to change, and nothing reaches the refused server.
#[test]
fn http_fetch_reaches_only_what_its_grants_admit() {
    let other = server(0);
    let s = server(other.port);
    let port = s.port;
    let k = kit(&format!(
        "[tools.http_fetch]\nplugin = \"net\"\nlimits = {{ max_output = \"8MiB\" }}\nnet.connect = [\"127.0.0.1:{port}\", \"localhost:{port}\"]\n"
    ));
    let url = format!("http://127.0.0.1:{port}/");
    let r = k.call("http_fetch", json!({"url": url}));
    assert_eq!(r.status, Status::Success, "{r:?}");
    let v = r.result.clone().unwrap();
    assert_eq!(v["status"], 200, "{v}");
    assert_eq!(v["body"], "hello \u{fffd}", "{v}");
    assert_eq!(v["headers"]["x-test"], "one, two", "{v}");
    assert_eq!(v["truncated"], false);
    assert_eq!(v["url"], url);
    let head = s.heads.lock().unwrap().last().cloned().unwrap();
    assert!(head.starts_with("GET / HTTP/1.1\r\n"), "{head}");
    assert!(head.to_ascii_lowercase().contains(&format!("host: 127.0.0.1:{port}")), "{head}");
    let record = k.last_record();
    assert_eq!(record["network"]["allowed"], 1, "{record}");

    let r = k.call("http_fetch", json!({"url": format!("http://127.0.0.1:{port}/here"), "method": "HEAD"}));
    let v = r.result.clone().unwrap_or_else(|| panic!("{r:?}"));
    assert_eq!((v["status"].clone(), v["body"].clone()), (json!(200), json!("")), "{v}");
    assert_eq!(v["url"], url, "the redirect was followed");

    let r = k.call("http_fetch", json!({"url": format!("http://127.0.0.1:{port}/big"), "max_bytes": 1000}));
    let v = r.result.clone().unwrap_or_else(|| panic!("{r:?}"));
    assert_eq!((v["body"].as_str().map(str::len), v["truncated"].clone()), (Some(1000), json!(true)));

    let seen = other.heads.lock().unwrap().len();
    let r = k.call("http_fetch", json!({"url": format!("http://127.0.0.1:{}/", other.port)}));
    assert_eq!(code(&r), "PERMISSION_DENIED", "an ungranted port: {r:?}");
    assert!(message(&r).contains("net.connect"), "{r:?}");
    let r = k.call("http_fetch", json!({"url": format!("http://127.0.0.1:{port}/away")}));
    assert_eq!(code(&r), "PERMISSION_DENIED", "a redirect to an ungranted port: {r:?}");
    assert!(message(&r).contains(&format!("127.0.0.1:{}", other.port)), "{r:?}");
    assert_eq!(other.heads.lock().unwrap().len(), seen, "a refused request reached the server");

    // The grant names 127.0.0.1 literally, so localhost (resolving to it) is admitted ...
    let r = k.call("http_fetch", json!({"url": format!("http://localhost:{port}/")}));
    assert_eq!(r.result.as_ref().map(|v| v["status"].clone()), Some(json!(200)), "{r:?}");
    // ... but a name alone is not: loopback needs net.allow_private.
    let k = kit(&format!("[tools.http_fetch]\nplugin = \"net\"\nnet.connect = [\"localhost:{port}\"]\n"));
    let before = s.heads.lock().unwrap().len();
    let r = k.call("http_fetch", json!({"url": format!("http://localhost:{port}/")}));
    assert_eq!(code(&r), "PERMISSION_DENIED", "a granted name resolving to loopback: {r:?}");
    assert!(message(&r).contains("net.allow_private"), "{r:?}");
    assert_eq!(s.heads.lock().unwrap().len(), before, "the refused request reached the server");
    assert_eq!(k.last_record()["network"]["refused"], 1);

    let r = k.call("http_fetch", json!({"url": "ftp://127.0.0.1/"}));
    assert_eq!(code(&r), "INVALID_ARGS", "{r:?}");

    let k = kit(&format!(
        "[tools.http_fetch]\nplugin = \"net\"\nnet.connect = [\"localhost:{port}\"]\nnet.allow_private = true\n"
    ));
    let r = k.call("http_fetch", json!({"url": format!("http://localhost:{port}/")}));
    assert_eq!(r.result.as_ref().map(|v| v["status"].clone()), Some(json!(200)), "allow_private: {r:?}");
}

/// Without any grant every request is refused, naming the entry to add.
#[test]
fn http_fetch_without_a_grant_is_refused() {
    let s = server(0);
    let k = kit("[tools.http_fetch]\nplugin = \"net\"\n");
    let r = k.call("http_fetch", json!({"url": format!("http://127.0.0.1:{}/", s.port)}));
    assert_eq!(code(&r), "PERMISSION_DENIED", "{r:?}");
    assert!(message(&r).contains(&format!("add \"127.0.0.1:{}\" to net.connect", s.port)), "{r:?}");
    assert!(s.heads.lock().unwrap().is_empty());
}

/// http_fetch keeps at most 1 MiB of a body and says truncated (the host's
/// own bound on wasi:http bodies is tested on the send hook, in
/// `runtime::wasm::net`).
#[test]
fn http_fetch_bodies_are_bounded() {
    let s = server(0);
    let k = kit(&format!(
        "[tools.http_fetch]\nplugin = \"net\"\nlimits = {{ max_output = \"4MiB\" }}\nnet.connect = [\"127.0.0.1:{}\"]\n",
        s.port
    ));
    let r = k.call("http_fetch", json!({"url": format!("http://127.0.0.1:{}/big", s.port)}));
    let v = r.result.clone().unwrap_or_else(|| panic!("{r:?}"));
    assert_eq!(v["truncated"], true, "{r:?}");
    assert_eq!(v["body"].as_str().map(str::len), Some(1 << 20));
}
