//! A private OCI registry for a test: Debian's `docker-registry` (distribution
//! 2.8) on a free loopback port, its storage in a temp directory, started
//! fresh and killed on drop. A missing binary fails the test (never skipped).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The registry binary the tests run.
pub(crate) const BINARY: &str = "/usr/bin/docker-registry";

/// A running registry.
pub(crate) struct Registry {
    child: Child,
    /// Its configuration, storage and log.
    pub dir: tempfile::TempDir,
    /// Its port on 127.0.0.1.
    pub port: u16,
}

/// A free port on 127.0.0.1 (closed again: the registry binds it next).
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl Registry {
    /// A registry that anyone may push to and pull from.
    pub(crate) fn start() -> Registry {
        Registry::start_with("")
    }

    /// A registry whose configuration ends with `extra` (YAML at the top level, e.g. an `auth:` block).
    pub(crate) fn start_with(extra: &str) -> Registry {
        assert!(
            Path::new(BINARY).is_file(),
            "{BINARY} is missing: the OCI tests need it (apt-get install docker-registry)"
        );
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let config = dir.path().join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {}\n\
                 http:\n  addr: 127.0.0.1:{port}\n  secret: warden-test\n{extra}",
                dir.path().join("data").display()
            ),
        )
        .unwrap();
        let log = std::fs::File::create(dir.path().join("registry.log")).unwrap();
        let child = Command::new(BINARY)
            .arg("serve")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("cannot start docker-registry");
        let mut r = Registry { child, dir, port };
        let up = super::within(Duration::from_secs(10), || {
            matches!(r.get("/v2/").map(|(status, _)| status), Some(200 | 401))
        });
        if !up {
            let _ = r.child.kill();
            panic!(
                "docker-registry did not answer on 127.0.0.1:{port} within 10s; its log:\n{}",
                std::fs::read_to_string(r.dir.path().join("registry.log")).unwrap_or_default()
            );
        }
        r
    }

    /// `127.0.0.1:PORT`.
    pub(crate) fn authority(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Where the registry keeps the blob `digest` (`sha256:HEX`).
    pub(crate) fn blob_file(&self, digest: &str) -> PathBuf {
        let hex = digest.trim_start_matches("sha256:");
        self.dir.path().join("data/docker/registry/v2/blobs/sha256").join(&hex[..2]).join(hex).join("data")
    }

    /// A plain `GET path` (HTTP/1.0, `Accept` of an OCI manifest): the status and the body, or `None`.
    pub(crate) fn get(&self, path: &str) -> Option<(u16, Vec<u8>)> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        write!(
            s,
            "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{}\r\nAccept: application/vnd.oci.image.manifest.v1+json\r\n\r\n",
            self.port
        )
        .ok()?;
        let mut all = Vec::new();
        s.read_to_end(&mut all).ok()?;
        let split = all.windows(4).position(|w| w == b"\r\n\r\n")?;
        let head = String::from_utf8_lossy(&all[..split]).into_owned();
        let status = head.split_whitespace().nth(1)?.parse().ok()?;
        Some((status, all[split + 4..].to_vec()))
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
