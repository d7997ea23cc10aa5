//! Issue 18's rows: warden's egress proxy against a direct connection, both on
//! loopback, in the same run. The proxy is the one process tools get (the
//! same `egress::Proxy`, fed a listening socket as the sandbox helper feeds
//! it; here the socket is on the host's loopback rather than inside a call's
//! network namespace, which is the same kernel path).
//!
//! * connection setup: connect, (for the proxy: `CONNECT 127.0.0.1:P`, the
//!   grant check, warden's own connect, `200`), one byte there and back;
//! * a 100 MB download: a local server writes 100 MB; the client reads it all.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use warden::egress::{EgressPolicy, Journal, Proxy};
use warden::policy::NetGrant;

/// The download's size.
const DOWNLOAD: usize = 100 << 20;

/// A loopback server: each connection gets either one echoed byte (`e`) or
/// the whole download (`d`), by the first byte it sends.
fn origin() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let chunk = vec![b'x'; 1 << 20];
        for c in l.incoming() {
            let Ok(mut c) = c else { continue };
            let chunk = chunk.clone();
            std::thread::spawn(move || {
                let mut b = [0u8; 1];
                if c.read_exact(&mut b).is_err() {
                    return;
                }
                if b[0] == b'd' {
                    for _ in 0..DOWNLOAD / chunk.len() {
                        if c.write_all(&chunk).is_err() {
                            return;
                        }
                    }
                } else {
                    let _ = c.write_all(&b);
                }
            });
        }
    });
    port
}

/// A connection to the origin, direct or through the proxy's `CONNECT`.
fn open(origin: u16, proxy: Option<u16>) -> TcpStream {
    let Some(p) = proxy else { return TcpStream::connect(("127.0.0.1", origin)).unwrap() };
    let mut s = TcpStream::connect(("127.0.0.1", p)).unwrap();
    write!(s, "CONNECT 127.0.0.1:{origin} HTTP/1.1\r\nHost: 127.0.0.1:{origin}\r\n\r\n").unwrap();
    // The reply head, byte by byte: nothing after it is ours.
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        s.read_exact(&mut b).unwrap();
        head.push(b[0]);
    }
    assert!(head.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&head));
    s
}

fn round_trip(origin: u16, proxy: Option<u16>) {
    let mut s = open(origin, proxy);
    s.set_nodelay(true).unwrap();
    s.write_all(b"e").unwrap();
    let mut b = [0u8; 1];
    s.read_exact(&mut b).unwrap();
}

/// Seconds to read the whole download.
fn download(origin: u16, proxy: Option<u16>) -> f64 {
    let started = Instant::now();
    let mut s = open(origin, proxy);
    s.write_all(b"d").unwrap();
    let mut buf = vec![0u8; 256 << 10];
    let mut total = 0;
    while total < DOWNLOAD {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "the download ended at {total} bytes");
        total += n;
    }
    started.elapsed().as_secs_f64()
}

/// A row of the table: name, p50, p95.
type Row = (&'static str, Duration, Duration);
/// A target: name, met, measured.
type Target = (&'static str, bool, String);

/// The rows and the two targets.
pub(crate) fn rows(
    measure: impl Fn(usize, &mut dyn FnMut()) -> Vec<Duration>,
    percentile: impl Fn(Vec<Duration>, f64) -> Duration,
) -> (Vec<Row>, Vec<Target>) {
    let origin = origin();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let proxy_port = listener.local_addr().unwrap().port();
    let policy = EgressPolicy {
        tool: "bench".into(),
        grants: vec![NetGrant { host: "127.0.0.1".into(), port: origin }],
        allow_private: false,
        credentials: Vec::new(),
    };
    let journal = Arc::new(Journal::default());
    let _proxy = Proxy::start(listener, Arc::new(policy), journal.clone()).unwrap();
    for _ in 0..50 {
        round_trip(origin, None);
        round_trip(origin, Some(proxy_port));
    }
    let direct = measure(1_000, &mut || round_trip(origin, None));
    let proxied = measure(1_000, &mut || round_trip(origin, Some(proxy_port)));
    // Downloads, alternating, best of three each (the VM is noisy).
    let (mut direct_s, mut proxied_s) = (f64::MAX, f64::MAX);
    for _ in 0..3 {
        direct_s = direct_s.min(download(origin, None));
        proxied_s = proxied_s.min(download(origin, Some(proxy_port)));
    }
    assert!(journal.take().is_some(), "the proxy journals its connections");
    let (d50, p50) = (percentile(direct.clone(), 0.5), percentile(proxied.clone(), 0.5));
    let added_ms = (p50.as_secs_f64() - d50.as_secs_f64()) * 1e3;
    let mb = DOWNLOAD as f64 / 1e6;
    let (direct_rate, proxied_rate) = (mb / direct_s, mb / proxied_s);
    println!(
        "100 MB over loopback: direct {direct_rate:.0} MB/s, through warden's proxy {proxied_rate:.0} MB/s ({:.0} %)",
        100.0 * proxied_rate / direct_rate
    );
    let secs = |s: f64| Duration::from_secs_f64(s);
    let rows = vec![
        ("TCP connect + 1-byte round trip, direct (loopback)", d50, percentile(direct, 0.95)),
        ("... through warden's egress proxy (CONNECT)", p50, percentile(proxied, 0.95)),
        ("100 MB download, direct (best of 3)", secs(direct_s), secs(direct_s)),
        ("100 MB download through the proxy (best of 3)", secs(proxied_s), secs(proxied_s)),
    ];
    let targets = vec![
        ("proxy connection setup <= 1 ms over direct", added_ms <= 1.0, format!("+{added_ms:.2} ms")),
        (
            "proxy download >= 80 % of direct throughput",
            proxied_rate >= 0.8 * direct_rate,
            format!("{:.0} %", 100.0 * proxied_rate / direct_rate),
        ),
    ];
    (rows, targets)
}
