//! What the credential cases are built from: a test CA made with openssl
//! (warden trusts it through `SSL_CERT_FILE`, as the system roots plus that
//! CA), the servers of `credential_serve.py` (each logging everything it
//! received), a secret with every form it could take on the wire, the policy,
//! one call, and the judge that looks for those forms wherever the tool or a
//! host not bound could see them.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::{Value, json};

use crate::scene::PYTHON;
use crate::util::{Run, clip};
use crate::{Observed, Scene};

/// The names of the `# warden tests` block of /etc/hosts, all 127.0.0.1.
pub(crate) const NAMES: [&str; 5] =
    ["api.warden.test", "git.warden.test", "pypi.warden.test", "npm.warden.test", "evil.warden.test"];
/// The variable of warden's environment that holds the real value.
const FROM: &str = "WARDEN_ESCAPE_API_TOKEN";
/// The variable the tool sees (with the placeholder).
pub(crate) const VARIABLE: &str = "API_TOKEN";

/// The test CA and its leaves, under one directory outside every grant.
pub(crate) struct Pki {
    /// A leaf for every name of [`NAMES`], signed by the test CA.
    pub cert: PathBuf,
    pub key: PathBuf,
    /// A self-signed leaf for the same names, in no trust store.
    pub rogue_cert: PathBuf,
    pub rogue_key: PathBuf,
    /// The system roots and the test CA: warden's `SSL_CERT_FILE`.
    pub bundle: PathBuf,
}

fn openssl(dir: &Path, args: &[&str]) -> Result<(), String> {
    let out =
        Command::new("/usr/bin/openssl").current_dir(dir).args(args).output().map_err(|e| format!("openssl: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr)))
    }
}

fn make_pki(dir: &Path) -> Result<Pki, String> {
    let san: Vec<String> = NAMES.iter().map(|n| format!("DNS:{n}")).collect();
    std::fs::write(
        dir.join("leaf.ext"),
        format!(
            "subjectAltName={}\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n\
             extendedKeyUsage=serverAuth\n",
            san.join(",")
        ),
    )
    .map_err(|e| e.to_string())?;
    let days = ["-days", "2"];
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            days[0],
            days[1],
            "-subj",
            "/CN=warden escape test CA",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
        ],
    )?;
    openssl(
        dir,
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
    )?;
    openssl(
        dir,
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
            days[0],
            days[1],
            "-extfile",
            "leaf.ext",
            "-out",
            "leaf.pem",
        ],
    )?;
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            days[0],
            days[1],
            "-subj",
            "/CN=api.warden.test",
            "-addext",
            &format!("subjectAltName={}", san.join(",")),
            "-keyout",
            "rogue.key",
            "-out",
            "rogue.pem",
        ],
    )?;
    let mut bundle = std::fs::read("/etc/ssl/certs/ca-certificates.crt").unwrap_or_default();
    bundle.extend(std::fs::read(dir.join("ca.pem")).map_err(|e| e.to_string())?);
    std::fs::write(dir.join("bundle.pem"), bundle).map_err(|e| e.to_string())?;
    Ok(Pki {
        cert: dir.join("leaf.pem"),
        key: dir.join("leaf.key"),
        rogue_cert: dir.join("rogue.pem"),
        rogue_key: dir.join("rogue.key"),
        bundle: dir.join("bundle.pem"),
    })
}

/// The run's test CA (made once), or why it could not be made.
pub(crate) fn pki(s: &Scene) -> Result<&'static Pki, String> {
    static PKI: OnceLock<Result<Pki, String>> = OnceLock::new();
    PKI.get_or_init(|| make_pki(&s.side_dir("credential-pki"))).as_ref().map_err(Clone::clone)
}

/// Fails (never skips) unless every name resolves to 127.0.0.1, saying what to add.
pub(crate) fn names_resolve() -> Result<(), String> {
    use std::net::ToSocketAddrs;
    for name in NAMES {
        let addrs: Vec<std::net::SocketAddr> = (name, 443).to_socket_addrs().map(Iterator::collect).unwrap_or_default();
        if !addrs.iter().any(|a| a.ip() == std::net::Ipv4Addr::LOCALHOST) {
            return Err(format!(
                "{name} does not resolve to 127.0.0.1: add to /etc/hosts (.ci/run does, as root): \
                 `# warden tests` / `127.0.0.1 {}` / `# end warden tests`",
                NAMES.join(" ")
            ));
        }
    }
    Ok(())
}

/// One server of `credential_serve.py`, killed when dropped.
pub(crate) struct Server {
    child: Child,
    pub port: u16,
    log: PathBuf,
}

/// How a server speaks.
#[derive(Clone, Copy)]
pub(crate) enum Tls {
    /// TLS with the test CA's leaf (warden verifies it).
    Trusted,
    /// TLS with the self-signed leaf (warden must not).
    Rogue,
    /// Plain HTTP.
    Plain,
}

impl Server {
    /// A server whose `/redirect` points at `evil` (0: none).
    pub(crate) fn start(s: &Scene, pki: &Pki, tls: Tls, evil: u16) -> Server {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/escape/credential_serve.py");
        let log = s.side_dir("credential-server").join("log.jsonl");
        let (cert, key) = match tls {
            Tls::Trusted => (pki.cert.as_path(), pki.key.as_path()),
            Tls::Rogue => (pki.rogue_cert.as_path(), pki.rogue_key.as_path()),
            Tls::Plain => (Path::new("-"), Path::new("-")),
        };
        let mut child = Command::new(PYTHON)
            .arg(&script)
            .arg(&log)
            .arg(cert)
            .arg(key)
            .arg(evil.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let port = line.trim().parse().unwrap_or_else(|_| panic!("credential_serve.py did not start: {line:?}"));
        Server { child, port, log }
    }

    /// Everything it logged (after a moment for the handlers to finish).
    pub(crate) fn text(&self) -> String {
        std::thread::sleep(Duration::from_millis(300));
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Its events as JSON.
    pub(crate) fn events(&self) -> Vec<Value> {
        self.text().lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
    }

    /// The heads of the requests it received, the control's (`?control`) left out.
    pub(crate) fn requests(&self) -> Vec<String> {
        self.events()
            .iter()
            .filter(|e| e["event"] == "request")
            .map(|e| format!("{}{}", e["head"].as_str().unwrap_or_default(), e["body"].as_str().unwrap_or_default()))
            .filter(|h| !h.contains("control=1"))
            .collect()
    }

    /// How many connections it accepted, and whether anything at all (a request or stray bytes) arrived.
    pub(crate) fn summary(&self) -> String {
        let ev = self.events();
        let n = |what: &str| ev.iter().filter(|e| e["event"] == what).count();
        format!(
            "{} connection(s), {} request(s), {} failed handshake(s), {} stray",
            n("open"),
            n("request"),
            n("handshake failed"),
            n("rest")
        )
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A real value and every form of it that must never reach the tool or a host not bound.
pub(crate) struct Secret {
    pub real: String,
    forms: Vec<(String, &'static str)>,
}

const ALNUM: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

fn b64(data: &[u8], url: bool) -> String {
    let t: &[u8] = if url {
        b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    } else {
        b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    };
    let mut out = String::new();
    for c in data.chunks(3) {
        let n =
            (u32::from(c[0]) << 16) | (u32::from(*c.get(1).unwrap_or(&0)) << 8) | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..=c.len() {
            out.push(t[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

impl Secret {
    /// `wtk_` and 40 random [A-Za-z0-9] (the placeholder keeps `wtk_`).
    pub(crate) fn new() -> Secret {
        let mut bytes = [0u8; 40];
        getrandom::fill(&mut bytes).unwrap();
        let tail: String = bytes.iter().map(|b| ALNUM[usize::from(*b) % ALNUM.len()] as char).collect();
        let real = format!("wtk_{tail}");
        let mut forms = vec![(real.clone(), "raw")];
        // Base64 (standard and URL-safe) at each of the 3 alignments: the part of
        // the encoding that depends on the value's bytes alone.
        for k in 0..3usize {
            let mut data = vec![b':'; k];
            data.extend_from_slice(real.as_bytes());
            for url in [false, true] {
                let enc = b64(&data, url);
                let start = if k == 0 { 0 } else { 4 };
                let end = (data.len() / 3) * 4;
                forms.push((enc[start..end].to_string(), if url { "base64url" } else { "base64" }));
            }
        }
        Secret { real, forms }
    }

    /// The forms of the real value found in `text`.
    pub(crate) fn found(&self, text: &str) -> Vec<&'static str> {
        let mut v: Vec<&'static str> =
            self.forms.iter().filter(|(f, _)| text.contains(f.as_str())).map(|f| f.1).collect();
        v.dedup();
        v
    }

    /// `text` with the real value replaced, for a report.
    pub(crate) fn redact(&self, text: &str) -> String {
        let mut t = text.to_string();
        for (f, what) in &self.forms {
            t = t.replace(f.as_str(), &format!("[THE REAL VALUE, {what}]"));
        }
        t
    }
}

/// A bind of credential `api` at `host:port` (`inject = "bearer"`).
pub(crate) fn policy(port: u16, net: &[String], read: &[&str], timeout: &str) -> String {
    let quote = |v: &[&str]| v.iter().map(|s| format!("{s:?}")).collect::<Vec<_>>().join(", ");
    let mut reads = vec!["{system}", "{workspace}"];
    reads.extend(read);
    let net: Vec<&str> = net.iter().map(String::as_str).collect();
    format!(
        "version = 1\n\
         [credentials.api]\nfrom = {{ env = \"{FROM}\" }}\nvariable = \"{VARIABLE}\"\n\
         [[credentials.api.bind]]\nhost = \"api.warden.test\"\nport = {port}\ninject = \"bearer\"\n\
         [tools.shell]\nexec = [\"/bin/bash\", \"-c\", \"{{command}}\"]\ntier = \"auto\"\n\
         fs.read = [{}]\nfs.write = [\"{{workspace}}\", \"{{tmp}}\"]\nnet.connect = [{}]\nnet.allow_private = true\n\
         credentials = [\"api\"]\n\
         env = {{ set = {{ PATH = \"/usr/local/bin:/usr/bin:/bin\", HOME = \"{{tmp}}\" }} }}\n\
         limits = {{ timeout = \"{timeout}\" }}\n",
        quote(&reads),
        quote(&net),
    )
}

/// One call of the shell tool, and what it left.
pub(crate) struct Call {
    pub run: Run,
    pub log: PathBuf,
    pub ws: PathBuf,
}

impl Call {
    /// The placeholder the tool saw (its line `PH=…`).
    pub(crate) fn placeholder(&self) -> String {
        self.run.out().lines().find_map(|l| l.strip_prefix("PH=")).unwrap_or_default().to_string()
    }
    /// The call's last audit record.
    pub(crate) fn record(&self) -> Value {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        text.lines().last().and_then(|l| serde_json::from_str(l).ok()).unwrap_or(Value::Null)
    }
    /// Its egress attempts to `port`.
    pub(crate) fn attempts(&self, port: u16) -> Vec<Value> {
        let r = self.record();
        r["network"]["attempts"]
            .as_array()
            .map(|v| v.iter().filter(|a| a["port"].as_u64() == Some(u64::from(port))).cloned().collect())
            .unwrap_or_default()
    }
    /// Sums `field` of credential `api` over the attempts to `port`.
    pub(crate) fn used(&self, port: u16, field: &str) -> u64 {
        self.attempts(port)
            .iter()
            .flat_map(|a| a["credentials"].as_array().cloned().unwrap_or_default())
            .filter(|c| c["name"] == "api")
            .map(|c| c[field].as_u64().unwrap_or(0))
            .sum()
    }
    /// Everything the call left that the tool or its caller sees: warden's
    /// streams, the audit log, the workspace's files.
    fn visible(&self) -> Vec<(String, String)> {
        let mut v = vec![
            ("warden's output".to_string(), self.run.all()),
            ("the audit log".to_string(), std::fs::read_to_string(&self.log).unwrap_or_default()),
        ];
        let mut stack = vec![self.ws.clone()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                let p = e.path();
                if p.is_dir() {
                    stack.push(p);
                } else if let Ok(b) = std::fs::read(&p) {
                    v.push((format!("the workspace's {}", p.display()), String::from_utf8_lossy(&b).into_owned()));
                }
            }
        }
        v
    }
}

/// Runs `command` in the shell tool under `policy`, warden holding `secret` and trusting the test CA.
pub(crate) fn call(s: &Scene, id: &str, pki: &Pki, secret: &Secret, policy: &str, command: &str) -> Call {
    let ws = s.ws(id);
    let log = s.log_file();
    let file = s.policy_file(policy);
    let args = json!({ "command": command }).to_string();
    let bundle = pki.bundle.to_str().unwrap();
    let run = s.warden_env(
        &ws,
        &log,
        &["--policy", file.to_str().unwrap(), "call", "shell", &args],
        &[(FROM, &secret.real), ("SSL_CERT_FILE", bundle)],
    );
    Call { run, log, ws }
}

/// Collects a case's checks; contained when every one held.
pub(crate) struct Judge<'a> {
    s: &'a Scene,
    secret: &'a Secret,
    bad: Vec<String>,
    notes: Vec<String>,
}

impl<'a> Judge<'a> {
    pub(crate) fn new(s: &'a Scene, secret: &'a Secret) -> Judge<'a> {
        Judge { s, secret, bad: Vec::new(), notes: Vec::new() }
    }
    /// One check: `what` is said either way, and marked when it failed.
    pub(crate) fn check(&mut self, ok: bool, what: impl Into<String>) {
        let what = what.into();
        if ok {
            self.notes.push(what);
        } else {
            self.bad.push(what);
        }
    }
    /// `text` (seen by `who`) holds no form of the real value nor the scene's secret.
    pub(crate) fn clean(&mut self, who: &str, text: &str) {
        let found = self.secret.found(text);
        if !found.is_empty() {
            self.bad.push(format!("THE REAL VALUE reached {who} ({})", found.join(", ")));
        }
        if self.s.leaks(text) {
            self.bad.push(format!("warden's canary reached {who}"));
        }
    }
    /// Everything `call` left holds no form of the real value.
    pub(crate) fn clean_call(&mut self, call: &Call) {
        for (who, text) in call.visible() {
            self.clean(&who, &text);
        }
    }
    /// The placeholder the tool saw: present, the real value's shape, not the real value.
    pub(crate) fn placeholder(&mut self, call: &Call) -> String {
        let ph = call.placeholder();
        let real = &self.secret.real;
        let ok = ph.starts_with("wtk_") && ph.len() == real.len() && ph != *real;
        self.check(
            ok,
            format!("the tool's {VARIABLE} is a placeholder of the real value's shape ({} chars)", ph.len()),
        );
        ph
    }
    /// The tool's line `name: …` starts with one of `wanted`.
    pub(crate) fn line(&mut self, call: &Call, name: &str, wanted: &[&str]) {
        let out = call.run.out();
        let got = out.lines().find_map(|l| l.strip_prefix(&format!("{name}: "))).unwrap_or("(no line)");
        let ok = wanted.iter().any(|w| got.starts_with(w));
        self.check(ok, format!("{name}: {}", clip(got, 100)));
    }
    pub(crate) fn done(self, call: &Call) -> Observed {
        let mut text = self.notes.join("; ");
        if !self.bad.is_empty() {
            text = format!("NOT AS EXPECTED: {}; {text}", self.bad.join("; "));
            if !call.run.success() {
                text = format!("{text}; the call: {}", call.run.brief());
            }
        }
        Observed::new(self.bad.is_empty(), self.secret.redact(&text))
    }
}

/// The case cannot be attempted as built (names, CA): a failure saying why, never a pass.
pub(crate) fn unready(why: String) -> Observed {
    Observed::new(false, format!("could not set the case up: {why}"))
}
