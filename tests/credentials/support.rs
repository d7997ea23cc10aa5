//! What tests/credentials.rs is built from: the names, the test CA, the
//! servers of `serve.py`, pypiserver and verdaccio (installed per uid under
//! target/tmp on first use), the policy, the leak checks and the table's rows.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::ToSocketAddrs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::util::Env;

pub(crate) const PYTHON: &str = "/usr/bin/python3";
/// The names the tests use, all 127.0.0.1 by the `# warden tests` block of /etc/hosts.
pub(crate) const NAMES: [&str; 5] =
    ["api.warden.test", "git.warden.test", "pypi.warden.test", "npm.warden.test", "evil.warden.test"];
pub(crate) const PYPISERVER: &str = "pypiserver==2.4.2";
pub(crate) const PASSLIB: &str = "passlib==1.7.4";
pub(crate) const REQUESTS: &str = "requests==2.34.2";

/// Fails (never skips) unless every name resolves to 127.0.0.1, saying what to add.
pub(crate) fn names_resolve() {
    for name in NAMES {
        let addrs: Vec<_> = (name, 443).to_socket_addrs().map(Iterator::collect).unwrap_or_default();
        assert!(
            addrs.iter().any(|a: &std::net::SocketAddr| a.ip() == std::net::Ipv4Addr::LOCALHOST),
            "{name} does not resolve to 127.0.0.1 (it gave {addrs:?}): add this block to /etc/hosts \
             (.ci/run does, as root):\n# warden tests\n127.0.0.1 {}\n# end warden tests",
            NAMES.join(" ")
        );
    }
}

/// A client the test needs, by its absolute path; a missing one fails the test (CI must not skip it green).
pub(crate) fn need(program: &str, package: &str) -> PathBuf {
    ["/usr/local/bin", "/usr/bin", "/bin"]
        .iter()
        .map(|d| Path::new(d).join(program))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{program} is not installed: install {package} (.ci/run does)"))
}

/// The version line a client prints.
pub(crate) fn version(program: &Path, arg: &str) -> String {
    Command::new(program)
        .arg(arg)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).lines().next().unwrap_or_default().trim().to_string())
        .unwrap_or_default()
}

/// A secret: `prefix` then `n` random [A-Za-z0-9].
pub(crate) fn secret(prefix: &str, n: usize) -> String {
    const ALPHA: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut bytes = vec![0u8; n];
    std::fs::File::open("/dev/urandom").unwrap().read_exact(&mut bytes).unwrap();
    let tail: String = bytes.iter().map(|b| ALPHA[usize::from(*b) % ALPHA.len()] as char).collect();
    format!("{prefix}{tail}")
}

pub(crate) fn base64(data: &[u8]) -> String {
    const T: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in data.chunks(3) {
        let n =
            (u32::from(c[0]) << 16) | (u32::from(*c.get(1).unwrap_or(&0)) << 8) | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                out.push(T[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The test CA and one leaf for every name, made with openssl under `dir`; `bundle` is the system roots
/// plus the CA (warden's SSL_CERT_FILE in the tests).
pub(crate) struct Ca {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub bundle: PathBuf,
}

fn openssl(args: &[&str], dir: &Path) {
    let out = Command::new(need("openssl", "openssl")).current_dir(dir).args(args).output().unwrap();
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

impl Ca {
    pub(crate) fn new(dir: &Path) -> Ca {
        std::fs::create_dir_all(dir).unwrap();
        openssl(
            &[
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "2",
                "-subj",
                "/CN=warden test CA",
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
                "-keyout",
                "ca.key",
                "-out",
                "ca.pem",
            ],
            dir,
        );
        openssl(
            &[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-subj",
                "/CN=api.warden.test",
                "-keyout",
                "leaf.key",
                "-out",
                "leaf.csr",
            ],
            dir,
        );
        let san: Vec<String> = NAMES.iter().map(|n| format!("DNS:{n}")).collect();
        std::fs::write(
            dir.join("leaf.ext"),
            format!(
                "subjectAltName={}\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n\
                 extendedKeyUsage=serverAuth\n",
                san.join(",")
            ),
        )
        .unwrap();
        openssl(
            &[
                "x509",
                "-req",
                "-in",
                "leaf.csr",
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "2",
                "-extfile",
                "leaf.ext",
                "-out",
                "leaf.pem",
            ],
            dir,
        );
        let mut bundle = std::fs::read("/etc/ssl/certs/ca-certificates.crt").unwrap_or_default();
        bundle.extend(std::fs::read(dir.join("ca.pem")).unwrap());
        std::fs::write(dir.join("bundle.pem"), bundle).unwrap();
        Ca { cert: dir.join("leaf.pem"), key: dir.join("leaf.key"), bundle: dir.join("bundle.pem") }
    }
}

/// A server on 127.0.0.1 that printed its port first, killed when dropped.
pub(crate) struct Server {
    child: Child,
    pub port: u16,
    pub log: PathBuf,
}

impl Server {
    /// `serve.py MODE LOG CERT KEY ARGS…`.
    pub(crate) fn serve(ca: &Ca, dir: &Path, mode: &str, args: &[&str]) -> Server {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/credentials/serve.py");
        let log = dir.join(format!("{mode}-{}.log", unique()));
        let mut c = Command::new(PYTHON);
        c.arg(&script).arg(mode).arg(&log).arg(&ca.cert).arg(&ca.key).args(args);
        Server::start(c, log, mode)
    }

    fn start(mut c: Command, log: PathBuf, what: &str) -> Server {
        let mut child = c.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let port = line.trim().parse().unwrap_or_else(|_| panic!("{what} did not start: {line:?}"));
        Server { child, port, log }
    }

    /// What it logged (JSON lines: request line, Host, Authorization).
    pub(crate) fn logged(&self) -> String {
        std::thread::sleep(Duration::from_millis(100));
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A plain program on a port of 127.0.0.1 chosen here (pypiserver, verdaccio), killed when dropped.
pub(crate) struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

pub(crate) fn daemon(c: &mut Command, port: u16, what: &str) -> Daemon {
    let child = c.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let up = crate::util::within(Duration::from_secs(60), || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok());
    assert!(up, "{what} did not listen on 127.0.0.1:{port} within 60 s");
    Daemon(child)
}

pub(crate) fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

/// A per-uid directory under target/tmp: the unprivileged pass can neither use nor replace root's.
pub(crate) fn mine(name: &str) -> PathBuf {
    let uid = nix::unistd::geteuid().as_raw();
    Path::new(env!("CARGO_TARGET_TMPDIR")).join(if uid == 0 { name.to_string() } else { format!("{name}-{uid}") })
}

fn run(what: &str, cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

static INSTALL: Mutex<()> = Mutex::new(());

/// The virtualenv with pypiserver, passlib and requests (installed on first use).
pub(crate) fn venv() -> PathBuf {
    let _g = INSTALL.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let venv = mine("cred-venv");
    let py = venv.join("bin/python");
    let check = "import importlib.metadata as m; assert m.version('pypiserver') == '2.4.2'; \
                 assert m.version('requests') == '2.34.2'; import passlib";
    if !(py.is_file() && Command::new(&py).args(["-c", check]).output().is_ok_and(|o| o.status.success())) {
        run("python3 -m venv (install python3-venv)", Command::new(PYTHON).args(["-m", "venv"]).arg(&venv));
        run(
            "pip install of the credential tests' servers",
            Command::new(&py)
                .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", PYPISERVER, PASSLIB, REQUESTS])
                .env_remove("PIP_FIND_LINKS"),
        );
    }
    venv
}

/// verdaccio 6.8.0 from tests/credentials/verdaccio's lock (installed on first use); its entry point.
pub(crate) fn verdaccio() -> PathBuf {
    let _g = INSTALL.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/credentials/verdaccio");
    let dir = mine("cred-verdaccio");
    let lock = std::fs::read(src.join("package-lock.json")).unwrap();
    let bin = dir.join("node_modules/verdaccio/bin/verdaccio");
    if !(std::fs::read(dir.join("package-lock.json")).is_ok_and(|l| l == lock) && bin.is_file()) {
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for f in ["package.json", "package-lock.json"] {
            std::fs::copy(src.join(f), dir.join(f)).unwrap();
        }
        run(
            "npm ci of tests/credentials/verdaccio (install nodejs and npm)",
            Command::new(need("npm", "npm")).current_dir(&dir).args(["ci", "--no-audit", "--no-fund", "--silent"]),
        );
    }
    bin
}

/// An htpasswd file (apr1) with one user, made with the venv's passlib.
pub(crate) fn htpasswd(venv: &Path, path: &Path, user: &str, password: &str) {
    let code = "import sys\nfrom passlib.apache import HtpasswdFile\n\
                h = HtpasswdFile(sys.argv[1], new=True); h.set_password(sys.argv[2], sys.argv[3]); h.save()";
    run("passlib htpasswd", Command::new(venv.join("bin/python")).args(["-c", code]).arg(path).args([user, password]));
}

pub(crate) fn host_run(what: &str, cmd: &mut Command) -> String {
    run(what, cmd)
}

/// One credential of the policy.
pub(crate) struct Cred<'a> {
    pub name: &'a str,
    /// `{ env = "…" }` or `{ file = "…" }`, as TOML.
    pub from: String,
    pub variable: &'a str,
    pub host: &'a str,
    /// One bind per port.
    pub ports: Vec<u16>,
    /// `"bearer"` or `"basic"`, as TOML.
    pub inject: &'a str,
    /// Extra keys of the bind (`always = true`), as TOML lines.
    pub extra: &'a str,
}

/// The policy: one `sh` tool (tier auto) reading `{system}`, its workspace and `read`, writing its workspace
/// and `{tmp}`, HOME = `{tmp}`, granted the credentials' hosts (loopback: `net.allow_private`), holding them.
/// Its memory limit is an address-space limit: node (npm) reserves far more than it uses.
pub(crate) fn policy(creds: &[Cred], read: &[&Path]) -> String {
    let mut t = String::from("version = 1\n");
    for c in creds {
        t.push_str(&format!("\n[credentials.{}]\nfrom = {}\nvariable = \"{}\"\n", c.name, c.from, c.variable));
        for port in &c.ports {
            t.push_str(&format!(
                "[[credentials.{}.bind]]\nhost = \"{}\"\nport = {port}\ninject = {}\n{}",
                c.name, c.host, c.inject, c.extra
            ));
        }
    }
    let reads: Vec<String> = read.iter().map(|p| format!("{:?}", p.display().to_string())).collect();
    let names: Vec<String> = creds.iter().map(|c| format!("{:?}", c.name)).collect();
    let net: Vec<String> = creds.iter().flat_map(|c| c.ports.iter().map(|p| format!("\"{}:{p}\"", c.host))).collect();
    t.push_str(&format!(
        "\n[tools.sh]\nexec = [\"/bin/sh\", \"-c\", \"{{command}}\"]\ntier = \"auto\"\n\
         fs.read = [\"{{system}}\", \"{{workspace}}\"{}]\nfs.write = [\"{{workspace}}\", \"{{tmp}}\"]\n\
         net.connect = [{}]\nnet.allow_private = true\ncredentials = [{}]\n\
         env = {{ pass = [\"PATH\", \"LANG\"], set = {{ HOME = \"{{tmp}}\" }} }}\n\
         limits = {{ timeout = \"300s\", memory = \"64GiB\", processes = 256, open_files = 1024 }}\n",
        reads.iter().map(|r| format!(", {r}")).collect::<String>(),
        net.join(", "),
        names.join(", ")
    ));
    t
}

/// As root, gives the workspace to an ordinary user (as tests/egress.rs does): the tool runs as that user.
pub(crate) fn own(env: &Env) {
    if !nix::unistd::geteuid().is_root() {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(env.root.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = Command::new("chown").args(["-R", "65534:65534"]).arg(&env.ws).output().unwrap();
    assert!(out.status.success(), "chown: {}", String::from_utf8_lossy(&out.stderr));
}

/// Everything a call left: warden's streams (the result document), the files under the workspace, the audit
/// log as text. Where any of `forms` occurs, as "what: form".
pub(crate) fn leaks(env: &Env, warden_out: &str, forms: &[String]) -> Vec<String> {
    let mut found = Vec::new();
    let mut look = |what: &str, text: &[u8]| {
        for f in forms {
            if text.windows(f.len()).any(|w| w == f.as_bytes()) {
                found.push(format!("{what}: {f}"));
            }
        }
    };
    look("warden's stdout/stderr (the tool's output)", warden_out.as_bytes());
    look("the audit log", &std::fs::read(&env.log).unwrap_or_default());
    let mut stack = vec![env.ws.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            let Ok(t) = e.file_type() else { continue };
            if t.is_dir() {
                stack.push(p);
            } else if t.is_file() {
                look(&p.display().to_string(), &std::fs::read(&p).unwrap_or_default());
            }
        }
    }
    found
}

/// The forms of `secret` a leak may take: itself, its base64, and base64 of `user:secret`.
pub(crate) fn forms(secret: &str, user: Option<&str>) -> Vec<String> {
    let mut f = vec![secret.to_string(), base64(secret.as_bytes())];
    if let Some(u) = user {
        f.push(base64(format!("{u}:{secret}").as_bytes()));
    }
    f
}

/// The value of `VAR=` in what the tool printed of its environment (`env`), and in /proc/self/environ
/// (printed after `ENVIRON:` with NULs as newlines).
pub(crate) fn seen(out: &str, var: &str) -> Vec<String> {
    out.lines().filter_map(|l| l.strip_prefix(&format!("{var}="))).map(str::to_string).collect()
}

/// The placeholder as the tool saw it: the same everywhere it printed it, never the secret, same prefix
/// and at least as long. `None` with why when not.
pub(crate) fn placeholder(out: &str, var: &str, real: &str, prefix: &str) -> Result<String, String> {
    let all = seen(out, var);
    let Some(first) = all.first() else { return Err(format!("the tool printed no {var}=")) };
    if all.iter().any(|v| v != first) {
        return Err(format!("{var} differs between env and /proc/self/environ: {all:?}"));
    }
    if first == real {
        return Err(format!("the tool's {var} is the REAL secret"));
    }
    if !first.starts_with(prefix) || first.len() < real.len() {
        return Err(format!("{var}={first:?} lacks the prefix {prefix:?} or the length {}", real.len()));
    }
    Ok(first.clone())
}

/// The shell lines that print `var` from `env` and from /proc/self/environ.
pub(crate) fn print_env(var: &str) -> String {
    format!("env | grep '^{var}='\ntr '\\0' '\\n' < /proc/self/environ | grep '^{var}='\n")
}

/// The audit record's egress attempt to `host:port`: intercepted, and `name` substituted at least once.
pub(crate) fn audited(env: &Env, host: &str, port: u16, name: &str) -> Result<String, String> {
    let rec = env.audit_records().pop().unwrap_or(Value::Null);
    let attempts = rec["network"]["attempts"].as_array().cloned().unwrap_or_default();
    let Some(a) = attempts.iter().find(|a| a["host"] == host && a["port"].as_u64() == Some(u64::from(port))) else {
        return Err(format!("no attempt to {host}:{port} in the audit record's network: {}", rec["network"]));
    };
    let cred = a["credentials"].as_array().and_then(|c| c.iter().find(|c| c["name"] == name)).cloned();
    let substituted = cred.as_ref().and_then(|c| c["substituted"].as_u64()).unwrap_or(0);
    if a["intercepted"] != true || substituted == 0 {
        return Err(format!("the attempt to {host}:{port} is not intercepted with {name} substituted: {a}"));
    }
    Ok(format!("intercepted, {name} substituted {substituted}×"))
}

/// One row of the client table: printed, appended as a JSON line to target/credentials.json (root) or
/// target/tmp/credentials-UID.json, then the test fails unless it held.
pub(crate) fn row(client: &str, version: &str, started: Instant, checks: &[(&str, Result<String, String>)]) {
    let ok = checks.iter().all(|(_, r)| r.is_ok());
    let detail: Vec<String> = checks
        .iter()
        .map(|(what, r)| match r {
            Ok(s) => format!("{what}: {s}"),
            Err(e) => format!("{what}: FAILED: {e}"),
        })
        .collect();
    let uid = nix::unistd::geteuid().as_raw();
    let entry = json!({
        "client": client,
        "version": version,
        "result": if ok { "pass" } else { "FAIL" },
        "detail": detail,
        "test_uid": uid,
        "seconds": (started.elapsed().as_secs_f64() * 10.0).round() / 10.0,
    });
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let path = if uid == 0 {
        tmp.parent().unwrap_or(tmp).join("credentials.json")
    } else {
        tmp.join(format!("credentials-{uid}.json"))
    };
    if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(&path) {
        let _ = f.write_all(format!("{entry}\n").as_bytes());
    }
    println!("credentials: {client} ({version}) | {} | {}", if ok { "pass" } else { "FAIL" }, detail.join(" | "));
    assert!(ok, "{client}: {}", detail.join("\n"));
}
