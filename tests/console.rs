//! `warden console` end to end: the page in a real browser (Debian's headless
//! `chromium`, driven by npm `playwright-core`, installed here under the target
//! directory on first use as tests/mcp.rs installs the MCP SDKs) against a real
//! `warden serve --http` and MCP requests on the 2025-11-25 protocol (a client
//! that cannot be asked, so its approvals wait in the inbox: plain JSON-RPC, the
//! TypeScript SDK and the Python SDK), and the gates
//! (Host, Origin, token) as plain HTTP. `.ci/run` installs `chromium` when missing.
//! The browser's steps are tests/console/console.mjs; its screenshots land in
//! the target directory (docs/console-*.png are copies).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const PLAYWRIGHT: &str = "playwright-core@1.65.1";
/// A real MCP client on the 2025-11-25 protocol (the TypeScript SDK), which
/// cannot be asked over stateless HTTP: its approval waits in the inbox.
const TS_SDK: &str = "@modelcontextprotocol/sdk@1.32.2";
const CHROMIUM: &str = "/usr/bin/chromium";
const MCP_TOKEN: &str = "console-test-token-0123456789abcdef";

fn tmp() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).to_path_buf()
}

/// A scratch directory of this uid's own (`.ci/unprivileged` runs suites as another user).
fn mine(name: &str) -> PathBuf {
    let uid = nix::unistd::geteuid().as_raw();
    tmp().join(if uid == 0 { name.to_string() } else { format!("{name}-{uid}") })
}

/// The directory holding node_modules/playwright-core and the TypeScript SDK.
fn playwright() -> PathBuf {
    let dir = mine("console-node");
    let installed = |p: &str| dir.join("node_modules").join(p).join("package.json").is_file();
    if !installed("playwright-core") || !installed("@modelcontextprotocol/sdk") {
        std::fs::create_dir_all(&dir).unwrap();
        // A package of its own, installed in place: `--prefix` would also move npm's
        // global configuration (PREFIX/etc/npmrc), and with it the machine's `cafile`.
        std::fs::write(dir.join("package.json"), "{\"name\": \"warden-console-test\", \"private\": true}\n").unwrap();
        let out = Command::new("npm")
            .current_dir(&dir)
            .args(["install", "--no-audit", "--no-fund", "--silent"])
            .args([PLAYWRIGHT, TS_SDK])
            .output()
            .expect("npm (install nodejs and npm)");
        assert!(out.status.success(), "npm install {PLAYWRIGHT} {TS_SDK}: {}", String::from_utf8_lossy(&out.stderr));
    }
    dir
}

/// The official Python SDK, as tests/mcp.rs pins it.
const PY_SDK: &str = "mcp==2.3.0";

/// The virtualenv's python with the Python SDK (the one tests/mcp.rs uses, when it is there).
fn python() -> PathBuf {
    let venv = mine("mcp-venv");
    let py = venv.join("bin").join("python");
    let ready = py.is_file()
        && Command::new(&py)
            .args(["-c", "import importlib.metadata as m; assert m.version('mcp') == '2.3.0'"])
            .output()
            .is_ok_and(|o| o.status.success());
    if !ready {
        let venv_made = Command::new("python3").arg("-m").arg("venv").arg(&venv).output().unwrap();
        assert!(venv_made.status.success(), "python3 -m venv: {}", String::from_utf8_lossy(&venv_made.stderr));
        let pip = Command::new(&py)
            .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", PY_SDK])
            .output()
            .unwrap();
        assert!(pip.status.success(), "pip install {PY_SDK}: {}", String::from_utf8_lossy(&pip.stderr));
    }
    py
}

/// A started warden process whose stderr is collected; killed when dropped.
struct Proc {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Proc {
    fn start(mut cmd: Command) -> Proc {
        let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Proc { child, lines, seen: Vec::new() }
    }

    /// The first stderr line holding `needle`: what follows it on the line.
    fn wait_for(&mut self, needle: &str) -> String {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if let Some(i) = line.find(needle) {
                        return line[i + needle.len()..].split_whitespace().next().unwrap_or("").to_string();
                    }
                }
                Err(_) => break,
            }
        }
        panic!("no {needle:?} on stderr:\n{}", self.seen.join("\n"));
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = self.child.wait();
    }
}

/// One test's workspace, policy, audit log and MCP server.
struct Setup {
    root: tempfile::TempDir,
}

const SERVER: &str = r#"import json, os, sys
def answer(req):
    m, p = req.get("method"), req.get("params") or {}
    if m == "initialize":
        return {"protocolVersion": p.get("protocolVersion", "2025-06-18"), "capabilities": {"tools": {}},
                "serverInfo": {"name": "notes", "version": "1"}}
    if m == "tools/list":
        with open(os.environ["DESC_FILE"]) as f:
            desc = f.read().strip()
        schema = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
        return {"tools": [{"name": "note", "description": desc, "inputSchema": schema}]}
    if m == "tools/call":
        return {"content": [{"type": "text", "text": "noted: " + p["arguments"]["text"]}], "isError": False}
    return {}
for line in sys.stdin:
    req = json.loads(line)
    if "id" in req:
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": req["id"], "result": answer(req)}) + "\n")
        sys.stdout.flush()
"#;

impl Setup {
    fn new() -> Setup {
        let root = tempfile::Builder::new().prefix("console-").tempdir_in(tmp()).unwrap();
        let r = root.path();
        std::fs::create_dir_all(r.join("ws")).unwrap();
        std::fs::write(r.join("ws/a.txt"), "hello\n").unwrap();
        std::fs::write(r.join("server.py"), SERVER).unwrap();
        std::fs::write(r.join("desc.txt"), "Keep a short note\n").unwrap();
        let policy = format!(
            "version = 1\n\n[defaults]\ntier = \"ask\"\ntimeout = \"30s\"\n\n\
             [plugins.fs]\nsource = \"builtin:fs\"\n\n\
             [tools.read_file]\nplugin = \"fs\"\ntier = \"auto\"\nfs.read = [\"{{workspace}}\"]\n\n\
             [tools.write_file]\nplugin = \"fs\"\ntier = \"ask\"\nfs.write = [\"{{workspace}}\"]\n\n\
             [tools.bg]\nexec = [\"/bin/sh\", \"-c\", \"{{command}}\"]\ndescription = \"Run in the background\"\n\
             tier = \"auto\"\nbackground = true\nfs.read = [\"{{system}}\", \"{{workspace}}\"]\n\
             env = {{ pass = [\"PATH\"] }}\nlimits = {{ timeout = \"10m\", cpu = \"10m\" }}\n\n\
             [tools.sh]\nexec = [\"/bin/sh\", \"-c\", \"{{command}}\"]\ndescription = \"Run a command\"\n\
             tier = \"auto\"\nfs.read = [\"{{system}}\", \"{{workspace}}\"]\nenv = {{ pass = [\"PATH\"] }}\n\n\
             [servers.notes]\nexec = [\"/usr/bin/python3\", {:?}]\ntier = \"auto\"\n\
             fs.read = [\"{{system}}\", {:?}]\nenv.set = {{ DESC_FILE = {:?} }}\n",
            r.join("server.py").display().to_string(),
            r.display().to_string(),
            r.join("desc.txt").display().to_string(),
        );
        std::fs::write(r.join("policy.toml"), policy).unwrap();
        Setup { root }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.root.path().join(rel)
    }

    fn warden(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_warden"));
        c.arg("--policy")
            .arg(self.path("policy.toml"))
            .arg("--audit-log")
            .arg(self.path("audit.jsonl"))
            .arg("--workspace")
            .arg(self.path("ws"))
            .args(args)
            .current_dir(self.path("ws"))
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", self.root.path())
            .env("WARDEN_CACHE_DIR", mine("warden-test-cache"))
            .env("WARDEN_HTTP_TOKEN", MCP_TOKEN)
            .env("RUST_LOG", "warn");
        c
    }

    fn console(&self) -> (Proc, String) {
        self.console_with(&[])
    }

    fn console_with(&self, args: &[&str]) -> (Proc, String) {
        let mut p = Proc::start(self.warden(&[&["console"], args].concat()));
        let url = p.wait_for("console at ");
        (p, url)
    }
}

/// The status of a plain HTTP/1.1 request.
fn status(addr: &str, request: &str) -> u16 {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut head = [0u8; 12];
    s.read_exact(&mut head).unwrap();
    String::from_utf8_lossy(&head[9..12]).parse().unwrap()
}

#[test]
fn the_console_refuses_a_wrong_host_a_foreign_origin_and_a_missing_token() {
    let setup = Setup::new();
    let (_console, url) = setup.console();
    let rest = url.strip_prefix("http://").unwrap();
    let (addr, fragment) = rest.split_once('/').unwrap();
    let token = fragment.strip_prefix("#token=").unwrap();
    assert_eq!(token.len(), 64, "{url}");
    let get =
        |path: &str, headers: &str| status(addr, &format!("GET {path} HTTP/1.1\r\n{headers}Connection: close\r\n\r\n"));
    let host = format!("Host: {addr}\r\n");
    let auth = format!("Authorization: Bearer {token}\r\n");
    // The page itself needs no token; the API does.
    assert_eq!(get("/", &host), 200);
    assert_eq!(get("/api/inbox", &host), 401);
    assert_eq!(get("/api/inbox", &format!("{host}Authorization: Bearer {}\r\n", "0".repeat(64))), 401);
    assert_eq!(get("/api/inbox", &format!("{host}{auth}")), 200);
    // A name that is not this console's (DNS rebinding), with the right token.
    let port = addr.rsplit(':').next().unwrap();
    assert_eq!(get("/api/inbox", &format!("Host: evil.example:{port}\r\n{auth}")), 403);
    assert_eq!(get("/", &format!("Host: evil.example:{port}\r\n")), 403);
    assert_eq!(get("/api/inbox", &format!("Host: localhost:{port}\r\n{auth}")), 200);
    // Another origin, even with the token.
    assert_eq!(get("/api/inbox", &format!("{host}{auth}Origin: http://evil.example\r\n")), 403);
    assert_eq!(get("/api/inbox", &format!("{host}{auth}Origin: http://localhost:1\r\n")), 403);
    assert_eq!(get("/api/inbox", &format!("{host}{auth}Origin: http://{addr}\r\n")), 200);
    let post = format!(
        "POST /api/answer HTTP/1.1\r\n{host}{auth}Origin: http://evil.example\r\nContent-Type: application/json\r\n\
         Content-Length: 2\r\nConnection: close\r\n\r\n{{}}"
    );
    assert_eq!(status(addr, &post), 403);
    // At most 8 pages follow the feed at once; the ninth is told to close one.
    let feeds: Vec<std::net::TcpStream> = (0..8)
        .map(|_| {
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            s.write_all(format!("GET /api/feed HTTP/1.1\r\n{host}{auth}\r\n").as_bytes()).unwrap();
            let mut head = [0u8; 12];
            s.read_exact(&mut head).unwrap();
            assert_eq!(&head[9..12], b"200");
            s
        })
        .collect();
    assert_eq!(get("/api/feed", &format!("{host}{auth}")), 503);
    drop(feeds);
}

#[test]
fn an_allowed_host_name_reaches_the_console_and_no_other_does() {
    let setup = Setup::new();
    let (_console, url) = setup.console_with(&["--allow-host", "warden.internal"]);
    let (addr, fragment) = url.strip_prefix("http://").unwrap().split_once('/').unwrap();
    let auth = format!("Authorization: Bearer {}\r\n", fragment.strip_prefix("#token=").unwrap());
    let port = addr.rsplit(':').next().unwrap();
    let get =
        |headers: &str| status(addr, &format!("GET /api/inbox HTTP/1.1\r\n{headers}{auth}Connection: close\r\n\r\n"));
    assert_eq!(get(&format!("Host: warden.internal:{port}\r\n")), 200);
    assert_eq!(get("Host: warden.internal\r\n"), 200);
    assert_eq!(get(&format!("Host: warden.internal:{port}\r\nOrigin: https://warden.internal:{port}\r\n")), 200);
    assert_eq!(get(&format!("Host: warden.internal:{port}\r\nOrigin: http://127.0.0.1:{port}\r\n")), 403);
    assert_eq!(get(&format!("Host: warden.internal.evil.example:{port}\r\n")), 403);
    assert_eq!(get(&format!("Host: other.internal:{port}\r\n")), 403);
}

#[test]
fn the_console_in_a_browser_shows_calls_answers_approvals_cancels_jobs_and_accepts_definitions() {
    if !Path::new(CHROMIUM).is_file() {
        panic!("{CHROMIUM} is missing: apt-get install chromium (.ci/run does)");
    }
    let node = playwright();
    let py = python();
    let setup = Setup::new();
    let lock = setup.warden(&["lock"]).output().unwrap();
    assert!(lock.status.success(), "warden lock: {}", String::from_utf8_lossy(&lock.stderr));
    // The server's definition changes after it was pinned (before serve finds it): refused until accepted.
    std::fs::write(setup.path("desc.txt"), "Keep a short note, at most 80 characters\n").unwrap();
    let mut serve = Proc::start(setup.warden(&["serve", "--http", "127.0.0.1:0", "--approval-timeout", "60s"]));
    let mcp = serve.wait_for("serving MCP at ");
    let (_console, url) = setup.console();
    let shots = mine("console-shots");
    std::fs::create_dir_all(&shots).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/console/console.mjs");
    let out = Command::new("node")
        .arg(&script)
        .current_dir(&node)
        .env("NODE_PATH", node.join("node_modules"))
        .env("CHROMIUM", CHROMIUM)
        .env("CONSOLE_URL", &url)
        .env("MCP_URL", &mcp)
        .env("MCP_TOKEN", MCP_TOKEN)
        .env("WS", setup.path("ws"))
        .env("DESC_FILE", setup.path("desc.txt"))
        .env("SHOTS", &shots)
        .env("PY", &py)
        .env("PY_CLIENT", Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/console/py_client.py"))
        .output()
        .unwrap();
    let report = format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    println!("{report}");
    assert!(out.status.success(), "the browser steps failed:\n{report}\nserve:\n{}", serve.seen.join("\n"));
    // From the host: the approved write happened, the rejected one did not.
    assert_eq!(std::fs::read_to_string(setup.path("ws/approved.txt")).unwrap(), "written after approval");
    assert_eq!(std::fs::read_to_string(setup.path("ws/sdk.txt")).unwrap(), "written by the TypeScript SDK");
    assert_eq!(std::fs::read_to_string(setup.path("ws/py.txt")).unwrap(), "written by the Python SDK");
    assert!(!setup.path("ws/rejected.txt").exists());
    let log = std::fs::read_to_string(setup.path("audit.jsonl")).unwrap();
    let records: Vec<serde_json::Value> =
        log.lines().filter(|l| !l.trim_matches('\0').is_empty()).filter_map(|l| serde_json::from_str(l).ok()).collect();
    assert!(records.iter().any(|r| r["tool"] == "bg" && r["status"] == "cancelled"), "{log}");
    assert!(records.iter().any(|r| r["tool"] == "write_file" && r["status"] == "rejected"), "{log}");
    // Who answered, and where: the console, by its address.
    let console_addr = url.trim_start_matches("http://").split('/').next().unwrap().to_string();
    let approved: Vec<&serde_json::Value> =
        records.iter().filter(|r| r["tool"] == "write_file" && r["status"] == "success").collect();
    assert_eq!(approved.len(), 5, "{log}");
    let by = |r: &&serde_json::Value| r["approved_by"].as_str().unwrap_or("").to_string();
    assert_eq!(approved.iter().filter(|r| by(r) == "lasting").count(), 1, "{log}");
    for r in approved.into_iter().filter(|r| by(r) == "inbox") {
        assert_eq!(r["approval"]["via"], format!("console {console_addr}"), "{r}");
        assert!(r["approval"]["who"].as_str().unwrap().contains("(uid "), "{r}");
    }
    // The accepted definition is pinned: a new process calls the tool.
    let noted = setup.warden(&["call", "notes__note", r#"{"text":"hi"}"#]).output().unwrap();
    let out = String::from_utf8_lossy(&noted.stdout);
    assert!(noted.status.success() && out.contains("noted: hi"), "{out}{}", String::from_utf8_lossy(&noted.stderr));
}

#[test]
fn a_live_directory_open_to_others_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let setup = Setup::new();
    let live = setup.path("audit.jsonl.live");
    std::fs::create_dir(&live).unwrap();
    std::fs::set_permissions(&live, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = setup.warden(&["console"]).stdin(Stdio::null()).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("closed to others (mode 0700)"), "{err}");
}
