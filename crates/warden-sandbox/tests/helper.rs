//! The `warden-sandbox` binary on its own: what it does with a spec it must
//! refuse. It never runs a program it was not given in full and well formed;
//! it answers on the host's socket with one JSON report and exits 126.
//! (The whole sandbox is exercised through warden by the root crate's suites.)

#![allow(clippy::expect_used, reason = "a test fails by panicking")]

use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};

/// Runs the helper with one end of a socket pair as its stdin, writes `sent`
/// to the other, and returns its exit code and the report it wrote back.
fn helper(sent: &[u8]) -> (Option<i32>, serde_json::Value) {
    let (host, tool) = UnixStream::pair().expect("socketpair");
    let mut child = Command::new(env!("CARGO_BIN_EXE_warden-sandbox"))
        .stdin(Stdio::from(OwnedFd::from(tool)))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn warden-sandbox");
    let mut host = host;
    host.write_all(sent).expect("write the spec");
    host.shutdown(std::net::Shutdown::Write).expect("shutdown");
    let mut report = String::new();
    host.read_to_string(&mut report).expect("read the report");
    let status = child.wait().expect("wait");
    let line = report.lines().next().unwrap_or_else(|| panic!("no report; stderr: {:?}", child.stderr));
    (status.code(), serde_json::from_str(line).expect("the report is JSON"))
}

#[test]
fn a_spec_longer_than_the_limit_is_refused_before_it_is_read() {
    let (code, report) = helper(&(u64::MAX).to_le_bytes());
    assert_eq!(code, Some(126));
    assert_eq!(report["ok"], false);
    let error = report["error"].as_str().expect("an error");
    assert!(error.contains("more than"), "{error}");
}

#[test]
fn a_spec_that_does_not_parse_is_refused() {
    let text = b"{\"program\": 1}";
    let mut sent = (text.len() as u64).to_le_bytes().to_vec();
    sent.extend_from_slice(text);
    let (code, report) = helper(&sent);
    assert_eq!(code, Some(126));
    assert!(report["error"].as_str().expect("an error").starts_with("bad spec"), "{report}");
}

#[test]
fn a_spec_cut_short_is_refused() {
    let mut sent = 100u64.to_le_bytes().to_vec();
    sent.extend_from_slice(b"{\"program\"");
    let (code, report) = helper(&sent);
    assert_eq!(code, Some(126));
    assert!(report["error"].as_str().expect("an error").contains("cannot read the spec"), "{report}");
}
