//! Real clients through warden's egress proxy: curl over
//! HTTP and HTTPS, Python's urllib, `pip install` from a simple index, `git
//! clone` over smart HTTP, `npm install` of a tarball, and Node, each in a
//! process tool whose only grant is its server's `host:port`, and the same
//! client refused for another port of that host, in one call.
//!
//! The servers run on the host's loopback, at 127.0.0.2 (all of 127/8 is the
//! host's loopback): the call's own network namespace has a loopback of its
//! own, so the proxy is the only way to them, and 127.0.0.2 is not in the
//! `NO_PROXY` warden sets (`localhost,127.0.0.1,::1`), so the clients use the
//! proxy variables as they come, with no policy of their own. The grant names
//! the address literally, which is what admits a loopback address.
//!
//! Each test checks that the granted request worked (the server logged it),
//! that the refused one was refused by the proxy (its 403 text reached the
//! client; the other server logged nothing), and that the call's audit record
//! lists both attempts with host, port and verdict. A client that is not
//! installed is skipped, with its reason printed and recorded. Every row is
//! printed (`egress: CLIENT | …`) and appended as a JSON line to
//! `target/tmp/egress-<uid>.json`, for the closing note's table; `.ci/unprivileged`
//! runs this binary again as an ordinary user.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod util;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use util::{Env, Run};

const PYTHON: &str = "/usr/bin/python3";
/// Where the servers listen: the host's loopback, outside `NO_PROXY`.
const HOST: &str = "127.0.0.2";

fn which(program: &str) -> Option<PathBuf> {
    ["/usr/local/bin", "/usr/bin", "/bin"].iter().map(|d| Path::new(d).join(program)).find(|p| p.is_file())
}

/// One server of `tests/egress/serve.py`, killed when dropped.
struct Server {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Server {
    /// Starts `serve.py MODE 127.0.0.2 ROOT LOG EXTRA…` and reads its port.
    fn start(mode: &str, root: &Path, extra: &[&Path]) -> Server {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/egress/serve.py");
        let log = root.with_extension(format!("{mode}-{}.log", unique()));
        let mut child = Command::new(PYTHON)
            .arg(&script)
            .arg(mode)
            .arg(HOST)
            .arg(root)
            .arg(&log)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3 on the host");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let port = line.trim().parse().unwrap_or_else(|_| panic!("serve.py {mode} did not start: {line:?}"));
        Server { child, port, log }
    }
    fn addr(&self) -> String {
        format!("{HOST}:{}", self.port)
    }
    /// The request lines it served.
    fn requests(&self) -> Vec<String> {
        std::thread::sleep(Duration::from_millis(100));
        std::fs::read_to_string(&self.log).unwrap_or_default().lines().map(str::to_string).collect()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

/// A directory under the test's root (outside the workspace), readable by everyone.
fn dir(env: &Env, name: &str) -> PathBuf {
    let d = env.root.path().join(name);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The policy: one `sh` tool, tier auto, reading `{system}` and its
/// workspace, writing its workspace and `{tmp}`, HOME = `{tmp}`, granted `net`.
fn policy(net: &[String], limits: &str) -> String {
    let net: Vec<String> = net.iter().map(|n| format!("{n:?}")).collect();
    format!(
        "version = 1\n[tools.sh]\nexec = [\"/bin/sh\", \"-c\", \"{{command}}\"]\ntier = \"auto\"\n\
         fs.read = [\"{{system}}\", \"{{workspace}}\"]\nfs.write = [\"{{workspace}}\", \"{{tmp}}\"]\n\
         net.connect = [{}]\nenv = {{ pass = [\"PATH\", \"LANG\"], set = {{ HOME = \"{{tmp}}\" }} }}\n\
         limits = {{ {limits} }}\n",
        net.join(", ")
    )
}

const LIMITS: &str = "timeout = \"120s\", memory = \"4GiB\", processes = 256, open_files = 1024";

/// The owner given to the workspace when the test runs as root.
const ORDINARY_UID: u32 = 65534;

/// As root, gives the workspace to an ordinary user (as `docs/security.md`
/// recommends, and as tests/usability.rs does), so the tool runs as that user:
/// uid 0 without capabilities may not chmod, which pip and git do.
fn own(env: &Env) {
    if !nix::unistd::geteuid().is_root() {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(env.root.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let out =
        Command::new("chown").args(["-R", &format!("{ORDINARY_UID}:{ORDINARY_UID}")]).arg(&env.ws).output().unwrap();
    assert!(out.status.success(), "chown: {}", String::from_utf8_lossy(&out.stderr));
}

/// Runs `command` in the `sh` tool granted `net` (the workspace given to an ordinary user as root).
fn sh(env: &Env, net: &[String], command: &str) -> Run {
    sh_limited(env, net, LIMITS, command)
}

/// [`sh`] with the tool's `limits`.
fn sh_limited(env: &Env, net: &[String], limits: &str, command: &str) -> Run {
    own(env);
    let p = env.root.path().join(format!("policy-{}.toml", unique()));
    std::fs::write(&p, policy(net, limits)).unwrap();
    let args = json!({ "command": command }).to_string();
    env.run(&["--policy", p.to_str().unwrap(), "call", "sh", &args])
}

/// What a call printed.
struct Said {
    ran: bool,
    stdout: String,
    stderr: String,
    doc: Value,
}

fn said(r: &Run) -> Said {
    let doc: Value = serde_json::from_str(r.stdout.trim()).unwrap_or(Value::Null);
    let res = &doc["result"];
    Said {
        ran: doc["status"] == "success",
        stdout: res["stdout"].as_str().unwrap_or_default().to_string(),
        stderr: if doc.is_null() {
            format!("warden exit {}: {}{}", r.code, r.stdout, r.stderr)
        } else if doc["status"] != "success" {
            format!("{}: {}", doc["error"]["code"], doc["error"]["message"])
        } else {
            res["stderr"].as_str().unwrap_or_default().to_string()
        },
        doc,
    }
}

fn tail(s: &str, n: usize) -> String {
    let chars: Vec<char> = s.trim().chars().collect();
    chars[chars.len().saturating_sub(n)..].iter().collect::<String>().replace('\n', "\\n")
}

/// The line after `marker` in `out` (what a step printed), or "".
fn after<'a>(out: &'a str, marker: &str) -> &'a str {
    out.lines().find_map(|l| l.strip_prefix(marker)).unwrap_or_default().trim()
}

/// What the call's audit record says of the attempts to `granted` (allowed)
/// and `refused` (refused): whether both are there, and a line for the table.
/// The result's own `network` summary must count both too.
fn audit(env: &Env, s: &Said, granted: &[&Server], refused: &[&Server]) -> (bool, String) {
    let rec = env.audit_records().pop().unwrap_or(Value::Null);
    let attempts = rec["network"]["attempts"].as_array().cloned().unwrap_or_default();
    let find = |port: u16, allowed: bool| {
        attempts
            .iter()
            .find(|a| a["host"] == HOST && a["port"].as_u64() == Some(u64::from(port)) && a["allowed"] == allowed)
    };
    let mut ok = rec["network"].is_object();
    let mut parts = Vec::new();
    for s in granted {
        match find(s.port, true) {
            Some(a) => parts.push(format!(
                "allowed {} via {} (address {}, {} B up, {} B down)",
                s.addr(),
                a["via"].as_str().unwrap_or("?"),
                a["address"].as_str().unwrap_or("?"),
                a["bytes_up"],
                a["bytes_down"]
            )),
            None => {
                ok = false;
                parts.push(format!("NO allowed attempt to {}", s.addr()));
            }
        }
    }
    for s in refused {
        match find(s.port, false) {
            Some(a) => parts.push(format!(
                "refused {} via {} ({})",
                s.addr(),
                a["via"].as_str().unwrap_or("?"),
                a["reason"].as_str().unwrap_or("?")
            )),
            None => {
                ok = false;
                parts.push(format!("NO refused attempt to {}", s.addr()));
            }
        }
    }
    let total = format!(
        "network: allowed {}, refused {}, {} B up, {} B down",
        rec["network"]["allowed"], rec["network"]["refused"], rec["network"]["bytes_up"], rec["network"]["bytes_down"]
    );
    parts.push(total);
    let summary = if s.doc["result"]["network"].is_object() { &s.doc["result"]["network"] } else { &s.doc["network"] };
    let counted = summary["allowed"].as_u64().unwrap_or(0) >= 1 && summary["refused"].as_u64().unwrap_or(0) >= 1;
    parts.push(format!("the result's network: {summary}"));
    (ok && counted, parts.join("; "))
}

/// One row of the table: printed, appended to `target/tmp/egress-<uid>.json`,
/// then the test fails unless everything held.
struct Row<'a> {
    client: &'a str,
    granted: (bool, String),
    refused: (bool, String),
    audit: (bool, String),
    started: Instant,
}

impl Row<'_> {
    fn finish(self) {
        let yes = |b: bool| if b { "yes" } else { "NO" };
        write_row(json!({
            "client": self.client,
            "granted_works": yes(self.granted.0),
            "granted_detail": self.granted.1,
            "ungranted_refused": yes(self.refused.0),
            "refused_detail": self.refused.1,
            "audit_shows": yes(self.audit.0),
            "audit_detail": self.audit.1,
            "seconds": (self.started.elapsed().as_secs_f64() * 10.0).round() / 10.0,
        }));
        println!(
            "egress: {} | granted works: {} ({}) | ungranted refused: {} ({}) | audit: {} ({})",
            self.client,
            yes(self.granted.0),
            self.granted.1,
            yes(self.refused.0),
            self.refused.1,
            yes(self.audit.0),
            self.audit.1
        );
        assert!(
            self.granted.0 && self.refused.0 && self.audit.0,
            "{}: granted {:?}; refused {:?}; audit {:?}",
            self.client,
            self.granted,
            self.refused,
            self.audit
        );
    }
}

fn write_row(mut row: Value) {
    let uid = nix::unistd::geteuid().as_raw();
    row["test_uid"] = json!(uid);
    row["ts"] = json!(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_secs());
    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("egress-{uid}.json"));
    if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(&path) {
        let _ = f.write_all(format!("{row}\n").as_bytes());
    }
}

/// Prints and records a client that cannot be tried here.
fn skip(client: &str, why: &str) {
    println!("egress: {client} | skipped: {why}");
    write_row(json!({ "client": client, "skipped": why }));
}

/// The proxy's refusal as the client saw it: the 403 text naming the grant to add.
fn names_grant(text: &str, s: &Server) -> bool {
    text.contains(&format!("\"{}\"", s.addr())) || text.contains(&s.addr())
}

/// A static site with `hello.txt`.
fn site(env: &Env, name: &str) -> PathBuf {
    let d = dir(env, name);
    std::fs::write(d.join("hello.txt"), format!("hello from {name}\n")).unwrap();
    d
}

#[test]
fn curl_http_and_https_through_connect() {
    let started = Instant::now();
    if which("curl").is_none() || which("openssl").is_none() {
        return skip("curl (HTTP and HTTPS)", "curl or openssl is not installed");
    }
    let env = Env::new();
    let root = site(&env, "site");
    let (key, cert) = (env.ws.join("key.pem"), env.ws.join("cert.pem"));
    let out = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=localhost"])
        .args(["-addext", "subjectAltName=IP:127.0.0.1,IP:127.0.0.2,DNS:localhost", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .unwrap();
    assert!(out.status.success(), "openssl: {}", String::from_utf8_lossy(&out.stderr));
    let (http, http2) = (Server::start("static", &root, &[]), Server::start("static", &root, &[]));
    let (tls, tls2) = (Server::start("tls", &root, &[&cert, &key]), Server::start("tls", &root, &[&cert, &key]));
    let script = format!(
        "echo \"HTTP: $(curl -sS -m 30 http://{h}/hello.txt 2>&1)\"\n\
         echo \"HTTPS: $(curl -sS -m 30 --cacert cert.pem https://{t}/hello.txt 2>&1)\"\n\
         out=$(curl -sS -m 30 -w ' code=%{{http_code}}' http://{h2}/hello.txt 2>&1 | tr '\\n' ' '); echo \"HTTP-OTHER: $out\"\n\
         out=$(curl -sS -m 30 --cacert cert.pem https://{t2}/hello.txt 2>&1); echo \"HTTPS-OTHER: exit=$? $out\" | tr '\\n' ' '\n",
        h = http.addr(),
        t = tls.addr(),
        h2 = http2.addr(),
        t2 = tls2.addr()
    );
    let s = said(&sh(&env, &[http.addr(), tls.addr()], &script));
    let (o_http, o_https) = (after(&s.stdout, "HTTP:"), after(&s.stdout, "HTTPS:"));
    let granted = s.ran
        && o_http == "hello from site"
        && o_https == "hello from site"
        && http.requests().len() == 1
        && tls.requests().len() == 1;
    let (r_http, r_https) = (after(&s.stdout, "HTTP-OTHER:"), after(&s.stdout, "HTTPS-OTHER:"));
    let refused = s.ran
        && r_http.contains("code=403")
        && names_grant(r_http, &http2)
        && r_http.contains("net.connect")
        && r_https.starts_with("exit=56")
        && r_https.contains("403")
        && http2.requests().is_empty()
        && tls2.requests().is_empty();
    Row {
        client: "curl (HTTP forwarding and HTTPS via CONNECT)",
        granted: (granted, format!("HTTP: {o_http:?}; HTTPS: {o_https:?}{}", failure(&s))),
        refused: (refused, format!("HTTP: {}; HTTPS: {}", tail(r_http, 200), tail(r_https, 160))),
        audit: audit(&env, &s, &[&http, &tls], &[&http2, &tls2]),
        started,
    }
    .finish();
}

/// The call's own failure, when it did not run or the tool said something on stderr.
fn failure(s: &Said) -> String {
    if s.ran && s.stderr.trim().is_empty() { String::new() } else { format!(" (stderr: {})", tail(&s.stderr, 300)) }
}

#[test]
fn python_urllib_honours_http_proxy() {
    let started = Instant::now();
    let env = Env::new();
    let root = site(&env, "site");
    let (a, b) = (Server::start("static", &root, &[]), Server::start("static", &root, &[]));
    std::fs::write(
        env.ws.join("fetch.py"),
        "import sys, urllib.request, urllib.error\n\
         for label, url in [('GRANTED', sys.argv[1]), ('OTHER', sys.argv[2])]:\n\
         \x20   try:\n\
         \x20       print(label + ':', urllib.request.urlopen(url, timeout=30).read().decode().strip())\n\
         \x20   except urllib.error.HTTPError as e:\n\
         \x20       print(label + ':', 'HTTPError', e.code, e.read().decode(errors='replace').strip().replace('\\n', ' '))\n\
         \x20   except OSError as e:\n\
         \x20       print(label + ':', 'failed', e)\n",
    )
    .unwrap();
    let cmd = format!("{PYTHON} fetch.py http://{}/hello.txt http://{}/hello.txt", a.addr(), b.addr());
    let s = said(&sh(&env, &[a.addr()], &cmd));
    let (g, o) = (after(&s.stdout, "GRANTED:"), after(&s.stdout, "OTHER:"));
    Row {
        client: "python3 urllib",
        granted: (s.ran && g == "hello from site" && a.requests().len() == 1, format!("{g:?}{}", failure(&s))),
        refused: (o.starts_with("HTTPError 403") && names_grant(o, &b) && b.requests().is_empty(), tail(o, 200)),
        audit: audit(&env, &s, &[&a], &[&b]),
        started,
    }
    .finish();
}

/// A simple index (PEP 503) with one pure-Python wheel, `tinypkg` 0.1.0, built here.
const WHEEL_PY: &str = r#"import base64, hashlib, os, sys, zipfile
out, name, ver = sys.argv[1], 'tinypkg', '0.1.0'
files = {
    name + '/__init__.py': "HELLO = 'tinypkg imported'\n",
    '%s-%s.dist-info/METADATA' % (name, ver): 'Metadata-Version: 2.1\nName: %s\nVersion: %s\n' % (name, ver),
    '%s-%s.dist-info/WHEEL' % (name, ver): 'Wheel-Version: 1.0\nGenerator: warden-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n',
}
record = []
for p, t in files.items():
    d = base64.urlsafe_b64encode(hashlib.sha256(t.encode()).digest()).rstrip(b'=').decode()
    record.append('%s,sha256=%s,%d' % (p, d, len(t.encode())))
rec = '%s-%s.dist-info/RECORD' % (name, ver)
record.append(rec + ',,')
files[rec] = '\n'.join(record) + '\n'
os.makedirs(os.path.join(out, 'simple', name), exist_ok=True)
whl = '%s-%s-py3-none-any.whl' % (name, ver)
with zipfile.ZipFile(os.path.join(out, 'simple', name, whl), 'w') as z:
    for p, t in files.items():
        z.writestr(p, t)
with open(os.path.join(out, 'simple', name, 'index.html'), 'w') as f:
    f.write('<html><body><a href="%s">%s</a></body></html>\n' % (whl, whl))
with open(os.path.join(out, 'simple', 'index.html'), 'w') as f:
    f.write('<html><body><a href="%s/">%s</a></body></html>\n' % (name, name))
"#;

#[test]
fn pip_install_from_a_local_simple_index() {
    let started = Instant::now();
    let env = Env::new();
    let root = dir(&env, "index");
    let out = Command::new(PYTHON).args(["-c", WHEEL_PY]).arg(&root).output().unwrap();
    assert!(out.status.success(), "building the wheel: {}", String::from_utf8_lossy(&out.stderr));
    let (a, b) = (Server::start("static", &root, &[]), Server::start("static", &root, &[]));
    let pip = "\"$HOME/v/bin/pip\" install --no-cache-dir --disable-pip-version-check --retries 0 --timeout 20";
    let script = format!(
        "{PYTHON} -m venv \"$HOME/v\" || exit 1\n\
         {pip} -v --index-url http://{b}/simple/ tinypkg > \"$HOME/other.log\" 2>&1; echo \"OTHER: exit=$? $(tr '\\n' ' ' < \"$HOME/other.log\")\"\n\
         {pip} --index-url http://{a}/simple/ tinypkg > \"$HOME/granted.log\" 2>&1; echo \"PIP: exit=$?\"\n\
         tail -n 3 \"$HOME/granted.log\"\n\
         echo \"IMPORT: $(\"$HOME/v/bin/python\" -c 'import tinypkg; print(tinypkg.HELLO)' 2>&1 | tail -n 1)\"\n",
        a = a.addr(),
        b = b.addr()
    );
    let s = said(&sh(&env, &[a.addr()], &script));
    let imported = after(&s.stdout, "IMPORT:");
    let granted = s.ran && after(&s.stdout, "PIP:") == "exit=0" && imported == "tinypkg imported";
    let other = after(&s.stdout, "OTHER:");
    // pip logs the index's 403 only at debug level: what it says is "No matching distribution"; the
    // result's network summary (what the model reads) names the refusal and the grant to add.
    let refusals = s.doc["result"]["network"]["refusals"].to_string();
    let refused = other.starts_with("exit=1")
        && other.contains("No matching distribution")
        && refusals.contains(&format!("add \\\"{}\\\"", b.addr()))
        && b.requests().is_empty();
    let shown = other.find("ERROR").map_or(other, |i| &other[i..]);
    let served = a.requests();
    Row {
        client: "pip install (local simple index, venv in {tmp})",
        granted: (
            granted && served.iter().any(|l| l.contains(".whl")),
            format!(
                "{}; import: {imported:?}; the index served {}{}",
                after(&s.stdout, "PIP:"),
                served.join(", "),
                failure(&s)
            ),
        ),
        refused: (
            refused,
            format!(
                "{} … {}; the result's refusals: {}",
                &other[..other.len().min(7)],
                tail(shown, 200),
                tail(&refusals, 200)
            ),
        ),
        audit: audit(&env, &s, &[&a], &[&b]),
        started,
    }
    .finish();
}

fn host_git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .current_dir(dir)
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
        .output()
        .expect("git on the host");
    assert!(out.status.success(), "host git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn git_clone_over_smart_http() {
    let started = Instant::now();
    if which("git").is_none() {
        return skip("git clone (smart HTTP)", "git is not installed");
    }
    let env = Env::new();
    let work = dir(&env, "work");
    host_git(&work, &["init", "-q", "-b", "main", "."]);
    std::fs::write(work.join("README"), "cloned through warden\n").unwrap();
    host_git(&work, &["add", "README"]);
    host_git(&work, &["commit", "-q", "-m", "one"]);
    let projects = dir(&env, "projects");
    host_git(&projects, &["clone", "-q", "--bare", work.to_str().unwrap(), "repo.git"]);
    let (a, b) = (Server::start("git", &projects, &[]), Server::start("git", &projects, &[]));
    let script = format!(
        "git clone -q http://{b}/repo.git other 2>&1; echo \"OTHER: exit=$?\"\n\
         git clone -q http://{a}/repo.git mine 2>&1; echo \"CLONE: exit=$?\"\n\
         echo \"README: $(cat mine/README)\"\n",
        a = a.addr(),
        b = b.addr()
    );
    let s = said(&sh(&env, &[a.addr()], &script));
    let readme = after(&s.stdout, "README:");
    let served = a.requests();
    let granted = s.ran && after(&s.stdout, "CLONE:") == "exit=0" && readme == "cloned through warden";
    let other_text: String = s.stdout.lines().take_while(|l| !l.starts_with("OTHER:")).collect::<Vec<_>>().join(" ");
    let refused = after(&s.stdout, "OTHER:") == "exit=128" && other_text.contains("403") && b.requests().is_empty();
    Row {
        client: "git clone (smart HTTP, git http-backend)",
        granted: (
            granted && served.iter().any(|l| l.contains("git-upload-pack")),
            format!("README: {readme:?}; the server served {}{}", served.len(), failure(&s)),
        ),
        refused: (refused, format!("{} {}", after(&s.stdout, "OTHER:"), tail(&other_text, 200))),
        audit: audit(&env, &s, &[&a], &[&b]),
        started,
    }
    .finish();
}

#[test]
fn npm_install_of_a_tarball() {
    let started = Instant::now();
    let (Some(npm), Some(_)) = (which("npm"), which("node")) else {
        return skip("npm install (tarball)", "npm or node is not installed");
    };
    let env = Env::new();
    let pkg = dir(&env, "tinynpm");
    std::fs::write(pkg.join("package.json"), r#"{"name":"tinynpm","version":"1.0.0","main":"index.js"}"#).unwrap();
    std::fs::write(pkg.join("index.js"), "module.exports = 'tinynpm required';\n").unwrap();
    let root = dir(&env, "tarballs");
    let out = Command::new(&npm)
        .current_dir(&pkg)
        .args(["pack", "--silent", "--pack-destination"])
        .arg(&root)
        .env("npm_config_cache", env.root.path().join("npm-cache"))
        .env("npm_config_update_notifier", "false")
        .output()
        .unwrap();
    assert!(out.status.success(), "npm pack: {}", String::from_utf8_lossy(&out.stderr));
    let (a, b) = (Server::start("static", &root, &[]), Server::start("static", &root, &[]));
    let npm_i = "npm install --no-audit --no-fund --no-update-notifier --fetch-retries 0";
    let script = format!(
        "export npm_config_cache=\"$HOME/.npm\"\n\
         mkdir app && cd app && echo '{{\"name\":\"app\",\"version\":\"1.0.0\"}}' > package.json || exit 1\n\
         {npm_i} http://{b}/tinynpm-1.0.0.tgz > \"$HOME/other.log\" 2>&1; echo \"OTHER: exit=$? $(tr '\\n' ' ' < \"$HOME/other.log\")\"\n\
         {npm_i} http://{a}/tinynpm-1.0.0.tgz > \"$HOME/granted.log\" 2>&1; echo \"NPM: exit=$?\"\n\
         tail -n 5 \"$HOME/granted.log\"\n\
         echo \"REQUIRE: $(node -e 'console.log(require(\"tinynpm\"))' 2>&1)\"\n",
        a = a.addr(),
        b = b.addr()
    );
    let s = said(&sh(&env, &[a.addr()], &script));
    let required = after(&s.stdout, "REQUIRE:");
    let granted = s.ran && after(&s.stdout, "NPM:") == "exit=0" && required == "tinynpm required";
    let other = after(&s.stdout, "OTHER:");
    let refused = !other.starts_with("exit=0") && other.contains("403") && b.requests().is_empty();
    Row {
        client: "npm install (tarball over HTTP)",
        granted: (
            granted && a.requests().iter().any(|l| l.contains(".tgz")),
            format!("{}; require: {required:?}{}", after(&s.stdout, "NPM:"), failure(&s)),
        ),
        refused: (refused, tail(other, 300)),
        audit: audit(&env, &s, &[&a], &[&b]),
        started,
    }
    .finish();
}

/// Node: `NODE_USE_ENV_PROXY` (Node 22.21+ and 24.5+) makes `fetch` and
/// `http` use the proxy variables; older Node ignores them, and then the
/// program has no route at all: `fetch` fails at once (ECONNREFUSED, the
/// namespace's own loopback), never goes around. Both are checked, as the
/// installed Node allows; and an `http.request` through the proxy named by
/// `http_proxy` (what an agent library does) works on any Node.
#[test]
fn node_fetch_and_http_through_the_proxy() {
    let started = Instant::now();
    let Some(node) = which("node") else {
        return skip("node", "node is not installed");
    };
    let version = Command::new(&node)
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let nums: Vec<u32> = version.trim_start_matches('v').split('.').filter_map(|n| n.parse().ok()).collect();
    let env_proxy = match nums.as_slice() {
        [major, ..] if *major >= 25 => true,
        [24, minor, ..] => *minor >= 5,
        [22, minor, ..] => *minor >= 21,
        _ => false,
    };
    let env = Env::new();
    let root = site(&env, "site");
    let (a, b) = (Server::start("static", &root, &[]), Server::start("static", &root, &[]));
    std::fs::write(
        env.ws.join("fetch.js"),
        r#"const http = require('http');
const [granted, other] = process.argv.slice(2);
function viaProxy(target) {
  const proxy = new URL(process.env.http_proxy);
  return new Promise((resolve) => {
    const req = http.request({ host: proxy.hostname, port: proxy.port, path: `http://${target}/hello.txt`, headers: { Host: target } }, (res) => {
      let body = '';
      res.on('data', (d) => (body += d));
      res.on('end', () => resolve(`${res.statusCode} ${body.trim().replace(/\n/g, ' ')}`));
    });
    req.on('error', (e) => resolve(`error ${e.code || e.message}`));
    req.end();
  });
}
async function viaFetch(target) {
  const t = Date.now();
  try {
    const r = await fetch(`http://${target}/hello.txt`, { signal: AbortSignal.timeout(30000) });
    return `${r.status} ${(await r.text()).trim().replace(/\n/g, ' ')}`;
  } catch (e) {
    const c = e.cause || e;
    return `error ${c.code || c.name || c.message} after ${Date.now() - t} ms`;
  }
}
(async () => {
  console.log('HTTP-GRANTED:', await viaProxy(granted));
  console.log('HTTP-OTHER:', await viaProxy(other));
  console.log('FETCH-GRANTED:', await viaFetch(granted));
  console.log('FETCH-OTHER:', await viaFetch(other));
})();
"#,
    )
    .unwrap();
    let cmd = format!("node fetch.js {} {}", a.addr(), b.addr());
    // undici (fetch) instantiates its HTTP parser as WebAssembly, whose memory V8 reserves as
    // address space far beyond what it uses: a low RLIMIT_AS fails fetch before it connects.
    let limits = "timeout = \"120s\", memory = \"64GiB\", processes = 256, open_files = 1024";
    let s = said(&sh_limited(&env, &[a.addr()], limits, &cmd));
    let (hg, ho) = (after(&s.stdout, "HTTP-GRANTED:"), after(&s.stdout, "HTTP-OTHER:"));
    let (fg, fo) = (after(&s.stdout, "FETCH-GRANTED:"), after(&s.stdout, "FETCH-OTHER:"));
    let fetch_ok = if env_proxy {
        fg == "200 hello from site" && fo.starts_with("403")
    } else {
        // No proxy support: no route at all, and it fails at once (not at the 30 s timeout).
        fg.starts_with("error ECONNREFUSED") && fo.starts_with("error ECONNREFUSED")
    };
    let fetch_note = if env_proxy {
        format!("fetch with NODE_USE_ENV_PROXY ({version}): {fg:?} / {fo:?}")
    } else {
        format!("fetch ignores the proxy on {version} (no NODE_USE_ENV_PROXY): fails fast: {fg:?} / {fo:?}")
    };
    let requests = a.requests().len();
    let want = if env_proxy { 2 } else { 1 };
    Row {
        client: "node (http.request via http_proxy; fetch)",
        granted: (
            s.ran && hg == "200 hello from site" && fetch_ok && requests == want,
            format!("http.request: {hg:?}; {fetch_note}; the server served {requests}{}", failure(&s)),
        ),
        refused: (ho.starts_with("403") && names_grant(ho, &b) && b.requests().is_empty(), tail(ho, 200)),
        audit: audit(&env, &s, &[&a], &[&b]),
        started,
    }
    .finish();
}
