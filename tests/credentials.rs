//! Credential brokering (issue 36) with real clients against real servers:
//! curl and Python requests (Bearer), git clone and push (Basic: a URL with
//! the placeholder, answering the 401 challenge; and `always = true` with a
//! plain URL), pip install from pypiserver (Basic in the index URL) and npm ci
//! from verdaccio (`_authToken` in .npmrc). Each runs in a process tool that
//! holds a credential whose real value is in warden's environment (or a 0600
//! file); the tool sees a placeholder.
//!
//! Each test checks that the server received the real secret (its log), that
//! the tool's environment (`env` and /proc/self/environ, printed by the tool)
//! holds the placeholder, that the real value and its base64 forms are nowhere
//! in the tool's output, the files it wrote or the audit log, and that the
//! audit record marks the attempt intercepted with the credential substituted.
//!
//! The servers listen on the host's 127.0.0.1 under the names of the
//! `# warden tests` block of /etc/hosts (.ci/run adds it; a test fails saying
//! so when a name does not resolve), over TLS from a test CA that warden
//! trusts through `SSL_CERT_FILE` (system roots plus the CA). A missing
//! client fails the test: none is skipped. Each test appends a row (client,
//! version, result) to target/credentials.json (target/tmp/credentials-UID.json
//! as another user); `.ci/unprivileged` runs this binary again as uid 1002.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "credentials/support.rs"]
mod support;
mod util;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use serde_json::json;
use support::{Ca, Cred, PYTHON, Server};
use util::{Env, Run};

/// A fresh workspace and the test CA under its root.
fn setup() -> (Env, Ca) {
    support::names_resolve();
    let env = Env::new();
    let ca = Ca::new(&env.root.path().join("ca"));
    (env, ca)
}

/// `warden call sh {command}` under `policy`, with `vars` (the real secrets) in warden's environment and
/// `SSL_CERT_FILE` the system roots plus the test CA.
fn call(env: &Env, ca: &Ca, policy: &str, vars: &[(&str, &str)], command: &str) -> Run {
    support::own(env);
    let p = env.root.path().join(format!("policy-{}.toml", support::unique()));
    std::fs::write(&p, policy).unwrap();
    println!("the policy:\n{policy}");
    let args = json!({ "command": command }).to_string();
    let mut c = env.command(&["--policy", p.to_str().unwrap(), "call", "sh", &args]);
    c.env("SSL_CERT_FILE", &ca.bundle);
    for (k, v) in vars {
        c.env(k, v);
    }
    util::run_to_end(c, None)
}

/// The line after `marker` in `out`, or "".
fn after<'a>(out: &'a str, marker: &str) -> &'a str {
    out.lines().find_map(|l| l.strip_prefix(marker)).unwrap_or_default().trim()
}

fn check(ok: bool, yes: String, no: impl FnOnce() -> String) -> Result<String, String> {
    if ok { Ok(yes) } else { Err(no()) }
}

/// The checks every test makes: the server got the real value (`wire`, how it appears in its log), the tool
/// saw the placeholder, nothing leaked, and the audit record shows the substitution.
fn common(
    env: &Env,
    r: &Run,
    (server, since): (&Server, usize),
    wire: &str,
    (var, real, prefix): (&str, &str, &str),
    (name, host): (&str, &str),
    user: Option<&str>,
) -> Vec<(&'static str, Result<String, String>)> {
    let logged: String = server.logged().lines().skip(since).map(|l| format!("{l}\n")).collect();
    let out = r.out();
    let leaked = support::leaks(env, &r.all(), &support::forms(real, user));
    vec![
        (
            "the server got the real secret",
            check(logged.contains(wire), format!("{} requests logged", logged.lines().count()), || {
                format!("not in its log: {}", util::clip(&logged, 600))
            }),
        ),
        ("the tool saw the placeholder", support::placeholder(&out, var, real, prefix)),
        ("nowhere the real value", check(leaked.is_empty(), "not found".into(), || leaked.join("; "))),
        ("audit record", support::audited(env, host, server.port, name)),
    ]
}

fn bearer_test(client: &str, from_file: bool, tool: impl FnOnce(&str) -> (String, Vec<PathBuf>, String)) {
    let started = Instant::now();
    let (env, ca) = setup();
    let real = support::secret("sk-proj-", 40);
    let server = Server::serve(&ca, env.root.path(), "bearer", &[&real]);
    let from = if from_file {
        let f = env.root.path().join("secrets").join("api_token");
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(&f, &real).unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        format!("{{ file = {:?} }}", f.display().to_string())
    } else {
        "{ env = \"API_TOKEN\" }".to_string()
    };
    let url = format!("https://api.warden.test:{}/v1/items", server.port);
    let (command, read, version) = tool(&url);
    let cred = Cred {
        name: "api",
        from,
        variable: "API_TOKEN",
        host: "api.warden.test",
        ports: vec![server.port],
        inject: "\"bearer\"",
        extra: "",
    };
    let reads: Vec<&Path> = read.iter().map(PathBuf::as_path).collect();
    let policy = support::policy(&[cred], &reads);
    let vars: &[(&str, &str)] = if from_file { &[] } else { &[("API_TOKEN", &real)] };
    let r = call(&env, &ca, &policy, vars, &format!("{command}\n{}", support::print_env("API_TOKEN")));
    let got = after(&r.out(), "GOT:").to_string();
    let mut checks = vec![(
        "the request worked",
        check(got == "200 ok bearer", format!("{got:?}"), || format!("got {got:?}; {}", r.brief())),
    )];
    checks.extend(common(
        &env,
        &r,
        (&server, 0),
        &format!("Bearer {real}"),
        ("API_TOKEN", &real, "sk-proj-"),
        ("api", "api.warden.test"),
        None,
    ));
    support::row(client, &version, started, &checks);
}

fn curl_command(url: &str) -> (String, Vec<PathBuf>, String) {
    let curl = support::need("curl", "curl");
    let cmd = format!(
        "curl -sS -m 60 -o body.txt -w '%{{http_code}}' -H \"Authorization: Bearer $API_TOKEN\" {url} > code.txt 2> err.txt\n\
         echo \"GOT: $(cat code.txt) $(cat body.txt)\"; cat err.txt"
    );
    (cmd, vec![], support::version(&curl, "--version"))
}

#[test]
fn curl_bearer_from_env() {
    bearer_test("curl (Bearer; from env)", false, curl_command);
}

#[test]
fn curl_bearer_from_a_0600_file() {
    bearer_test("curl (Bearer; from a 0600 file)", true, curl_command);
}

#[test]
fn python_requests_bearer() {
    bearer_test("python requests (Bearer)", false, |url| {
        let venv = support::venv();
        let py = venv.join("bin/python");
        let code = "import os, sys, requests; \
                    r = requests.get(sys.argv[1], headers={\"Authorization\": \"Bearer \" + os.environ[\"API_TOKEN\"]}, timeout=60); \
                    print(\"GOT:\", r.status_code, r.text.strip())";
        let version = support::host_run(
            "requests' version",
            Command::new(&py).args(["-c", "import requests; print('requests', requests.__version__)"]),
        );
        (format!("{} -c '{code}' {url} 2>&1 | tail -n 5", py.display()), vec![venv], version.trim().to_string())
    });
}

/// A bare repository `repo.git` (push enabled) under `root`/projects with one commit (README "cloned").
fn repository(root: &Path) -> PathBuf {
    let work = root.join("work");
    let projects = root.join("projects");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::create_dir_all(&projects).unwrap();
    let git = |dir: &Path, args: &[&str]| {
        support::host_run(
            &format!("host git {args:?}"),
            Command::new("git")
                .current_dir(dir)
                .args(args)
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .env("HOME", dir)
                .env("GIT_AUTHOR_NAME", "t")
                .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
                .env("GIT_COMMITTER_NAME", "t")
                .env("GIT_COMMITTER_EMAIL", "t@example.invalid"),
        )
    };
    git(&work, &["init", "-q", "-b", "main", "."]);
    std::fs::write(work.join("README"), "cloned\n").unwrap();
    git(&work, &["add", "README"]);
    git(&work, &["commit", "-q", "-m", "one"]);
    git(&projects, &["clone", "-q", "--bare", work.to_str().unwrap(), "repo.git"]);
    git(&projects.join("repo.git"), &["config", "http.receivepack", "true"]);
    projects
}

fn git_test(client: &str, always: bool) {
    let started = Instant::now();
    let git = support::need("git", "git");
    let (env, ca) = setup();
    let real = support::secret("ghp_", 36);
    let projects = repository(env.root.path());
    let server = Server::serve(&ca, env.root.path(), "git", &[projects.to_str().unwrap(), "x-access-token", &real]);
    let p = server.port;
    let url = if always {
        format!("https://git.warden.test:{p}/repo.git")
    } else {
        format!("https://x-access-token:$GIT_TOKEN@git.warden.test:{p}/repo.git")
    };
    let cred = Cred {
        name: "git",
        from: "{ env = \"GIT_TOKEN\" }".into(),
        variable: "GIT_TOKEN",
        host: "git.warden.test",
        ports: vec![p],
        inject: "\"basic\"",
        extra: if always { "always = true\n" } else { "" },
    };
    let script = format!(
        "export GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@example.invalid GIT_COMMITTER_NAME=t \
         GIT_COMMITTER_EMAIL=t@example.invalid GIT_TERMINAL_PROMPT=0\n\
         git clone -q \"{url}\" mine > clone.log 2>&1; echo \"CLONE: exit=$?\"; cat clone.log\n\
         echo \"README: $(cat mine/README)\"\n\
         cd mine && echo pushed >> README && git commit -qam two && git push -q origin HEAD:main > ../push.log 2>&1\n\
         echo \"PUSH: exit=$?\"; cat ../push.log; cd ..\n{}",
        support::print_env("GIT_TOKEN")
    );
    let r = call(&env, &ca, &support::policy(&[cred], &[]), &[("GIT_TOKEN", &real)], &script);
    let out = r.out();
    let (clone, readme, push) = (after(&out, "CLONE:"), after(&out, "README:"), after(&out, "PUSH:"));
    let head = support::host_run(
        "git log of the served repository",
        Command::new(&git).arg("--git-dir").arg(projects.join("repo.git")).args(["log", "-1", "--format=%s", "main"]),
    );
    let logged = server.logged();
    let challenged = logged.lines().next().is_some_and(|l| l.contains("\"authorization\": null"));
    let mut checks = vec![
        (
            "clone and push",
            check(
                clone == "exit=0" && readme == "cloned" && push == "exit=0" && head.trim() == "two",
                format!("clone {clone}, README {readme:?}, push {push}, the server's main: {:?}", head.trim()),
                || format!("clone {clone:?}, README {readme:?}, push {push:?}, main {:?}; {}", head.trim(), r.brief()),
            ),
        ),
        (
            if always { "warden added the header (no 401 asked for it)" } else { "the 401 challenge came first" },
            check(challenged != always, format!("first request unauthenticated: {challenged}"), || {
                format!("first logged request: {:?}", logged.lines().next())
            }),
        ),
    ];
    let wire = format!("Basic {}", support::base64(format!("x-access-token:{real}").as_bytes()));
    checks.extend(common(
        &env,
        &r,
        (&server, 0),
        &wire,
        ("GIT_TOKEN", &real, "ghp_"),
        ("git", "git.warden.test"),
        Some("x-access-token"),
    ));
    support::row(client, &support::version(&git, "--version"), started, &checks);
}

#[test]
fn git_clone_and_push_with_the_placeholder_in_the_url() {
    git_test("git clone + push (Basic, placeholder in the URL, 401 challenge)", false);
}

#[test]
fn git_clone_and_push_with_always() {
    git_test("git clone + push (Basic, always = true, plain URL)", true);
}

#[test]
fn pip_install_from_pypiserver() {
    let started = Instant::now();
    let (env, ca) = setup();
    let venv = support::venv();
    let real = support::secret("pypi-", 40);
    let dir = env.root.path().join("pypi");
    std::fs::create_dir_all(dir.join("packages")).unwrap();
    let wheel = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/credentials/wheel.py");
    support::host_run("wheel.py", Command::new(PYTHON).arg(&wheel).arg(dir.join("packages")));
    support::htpasswd(&venv, &dir.join("htpasswd"), "ci", &real);
    let up = support::free_port();
    let _pypi = support::daemon(
        Command::new(venv.join("bin/pypi-server"))
            .args(["run", "-i", "127.0.0.1", "-p", &up.to_string(), "-P"])
            .arg(dir.join("htpasswd"))
            .args(["-a", "download,list,update", "--log-stream", "none"])
            .arg(dir.join("packages")),
        up,
        "pypiserver",
    );
    let server = Server::serve(&ca, &dir, "proxy", &[&up.to_string()]);
    let cred = Cred {
        name: "pypi",
        from: "{ env = \"PIP_TOKEN\" }".into(),
        variable: "PIP_TOKEN",
        host: "pypi.warden.test",
        ports: vec![server.port],
        inject: "\"basic\"",
        extra: "",
    };
    let script = format!(
        "{PYTHON} -m venv v || exit 1\n\
         v/bin/pip install --no-cache-dir --disable-pip-version-check --retries 0 --timeout 60 \
         --index-url \"https://ci:$PIP_TOKEN@pypi.warden.test:{}/simple/\" credpkg > pip.log 2>&1\n\
         echo \"PIP: exit=$?\"; tail -n 5 pip.log\n\
         echo \"IMPORT: $(v/bin/python -c 'import credpkg; print(credpkg.HELLO)' 2>&1)\"\n{}",
        server.port,
        support::print_env("PIP_TOKEN")
    );
    let r = call(&env, &ca, &support::policy(&[cred], &[]), &[("PIP_TOKEN", &real)], &script);
    let out = r.out();
    let (pip, imported) = (after(&out, "PIP:"), after(&out, "IMPORT:"));
    let mut checks = vec![(
        "pip install",
        check(pip == "exit=0" && imported == "credpkg imported", format!("{pip}; import: {imported:?}"), || {
            format!("{pip:?}; import: {imported:?}; {}", r.brief())
        }),
    )];
    let wire = format!("Basic {}", support::base64(format!("ci:{real}").as_bytes()));
    checks.extend(common(
        &env,
        &r,
        (&server, 0),
        &wire,
        ("PIP_TOKEN", &real, "pypi-"),
        ("pypi", "pypi.warden.test"),
        Some("ci"),
    ));
    let pip_version = support::host_run("pip's version", Command::new(PYTHON).args(["-m", "pip", "--version"]));
    let version = pip_version.split(" from ").next().unwrap_or_default().to_string();
    support::row("pip install (pypiserver 2.4.2, Basic in the index URL)", &version, started, &checks);
}

/// verdaccio on `up` with a user `ci` (password `password`), behind `serve.py proxy`; its login token.
fn start_verdaccio(dir: &Path, up: u16, password: &str) -> (support::Daemon, String) {
    let bin = support::verdaccio();
    std::fs::create_dir_all(dir.join("storage")).unwrap();
    support::htpasswd(&support::venv(), &dir.join("htpasswd"), "ci", password);
    std::fs::write(
        dir.join("config.yaml"),
        "storage: ./storage\nauth:\n  htpasswd:\n    file: ./htpasswd\n    max_users: -1\nuplinks: {}\n\
         packages:\n  '**':\n    access: $authenticated\n    publish: $authenticated\n\
         log: { type: stdout, format: pretty, level: warn }\n",
    )
    .unwrap();
    let daemon = support::daemon(
        Command::new(support::need("node", "nodejs"))
            .arg(&bin)
            .arg("--config")
            .arg(dir.join("config.yaml"))
            .args(["--listen", &format!("127.0.0.1:{up}")]),
        up,
        "verdaccio",
    );
    let login = support::host_run(
        "verdaccio login",
        Command::new(support::need("curl", "curl"))
            .args(["-sS", "-m", "60", "-u", &format!("ci:{password}"), "-X", "PUT"])
            .args(["-H", "content-type: application/json", "-d"])
            .arg(json!({ "name": "ci", "password": password }).to_string())
            .arg(format!("http://127.0.0.1:{up}/-/user/org.couchdb.user:ci")),
    );
    let token =
        serde_json::from_str::<serde_json::Value>(&login).ok().and_then(|v| v["token"].as_str().map(String::from));
    (daemon, token.unwrap_or_else(|| panic!("verdaccio gave no token: {login}")))
}

/// Publishes `credpkg` 1.0.0 to `registry` as the host user and writes an app requiring it (package.json,
/// .npmrc with `${NPM_TOKEN}`, package-lock.json) under `app`.
fn publish_and_lock(env: &Env, ca: &Ca, registry: &str, token: &str, app: &Path) {
    let npm = support::need("npm", "npm");
    let pkg = env.root.path().join("credpkg");
    std::fs::create_dir_all(&pkg).unwrap();
    std::fs::write(pkg.join("package.json"), r#"{"name":"credpkg","version":"1.0.0","main":"index.js"}"#).unwrap();
    std::fs::write(pkg.join("index.js"), "module.exports = 'credpkg required';\n").unwrap();
    let auth = format!("{}:_authToken=", registry.trim_start_matches("https:"));
    let host_rc = env.root.path().join("host.npmrc");
    std::fs::write(&host_rc, format!("{auth}{token}\n")).unwrap();
    let host_npm = |dir: &Path, args: &[&str]| {
        support::host_run(
            &format!("host npm {args:?}"),
            Command::new(&npm)
                .current_dir(dir)
                .args(args)
                .env("npm_config_cafile", &ca.bundle)
                .env("npm_config_cache", env.root.path().join("host-npm-cache"))
                .env("npm_config_update_notifier", "false")
                .env("NPM_TOKEN", token),
        )
    };
    host_npm(&pkg, &["publish", "--registry", registry, "--userconfig", host_rc.to_str().unwrap()]);
    std::fs::create_dir_all(app).unwrap();
    std::fs::write(app.join("package.json"), r#"{"name":"app","version":"1.0.0","dependencies":{"credpkg":"1.0.0"}}"#)
        .unwrap();
    std::fs::write(app.join(".npmrc"), format!("registry={registry}\n{auth}${{NPM_TOKEN}}\n")).unwrap();
    host_npm(app, &["install", "--package-lock-only", "--no-audit", "--no-fund"]);
}

#[test]
fn npm_ci_from_verdaccio() {
    let started = Instant::now();
    let node = support::need("node", "nodejs");
    let npm = support::need("npm", "npm");
    let (env, ca) = setup();
    let dir = env.root.path().join("verdaccio");
    let up = support::free_port();
    let (_verdaccio, real) = start_verdaccio(&dir, up, &support::secret("npw-", 24));
    let server = Server::serve(&ca, &dir, "proxy", &[&up.to_string()]);
    let registry = format!("https://npm.warden.test:{}/", server.port);
    publish_and_lock(&env, &ca, &registry, &real, &env.ws.join("app"));
    let before = server.logged().lines().count();
    let cred = Cred {
        name: "npm",
        from: "{ env = \"NPM_TOKEN\" }".into(),
        variable: "NPM_TOKEN",
        host: "npm.warden.test",
        ports: vec![server.port],
        inject: "\"bearer\"",
        extra: "",
    };
    let script = format!(
        "cd app && npm ci --no-audit --no-fund --no-update-notifier --fetch-retries 0 --cache \"$PWD/../npm-cache\" \
         > ../npm.log 2>&1; echo \"NPM: exit=$?\"; tail -n 5 ../npm.log\n\
         echo \"REQUIRE: $(node -e 'console.log(require(\"credpkg\"))' 2>&1)\"\n{}",
        support::print_env("NPM_TOKEN")
    );
    let r = call(&env, &ca, &support::policy(&[cred], &[]), &[("NPM_TOKEN", &real)], &script);
    let out = r.out();
    let (npm_ci, required) = (after(&out, "NPM:"), after(&out, "REQUIRE:"));
    let tool_requests = server.logged().lines().count().saturating_sub(before);
    let mut checks = vec![(
        "npm ci",
        check(
            npm_ci == "exit=0" && required == "credpkg required" && tool_requests > 0,
            format!("{npm_ci}; require: {required:?}; {tool_requests} requests from the tool"),
            || format!("{npm_ci:?}; require: {required:?}; {tool_requests} requests; {}", r.brief()),
        ),
    )];
    checks.extend(common(
        &env,
        &r,
        (&server, before),
        &format!("Bearer {real}"),
        ("NPM_TOKEN", &real, ""),
        ("npm", "npm.warden.test"),
        None,
    ));
    let version =
        format!("npm {} (node {})", support::version(&npm, "--version"), support::version(&node, "--version"));
    support::row("npm ci (verdaccio 6.8.0, _authToken in .npmrc)", &version, started, &checks);
}

/// Responses that carry the secret back (raw, JSON-escaped, base64, chunked, gzip although the client asked
/// for identity) reach the tool with the placeholder; so does a redirect's `Location` that carries it (curl
/// without -L: warden never follows it).
#[test]
fn curl_sees_the_placeholder_in_echoed_responses_and_redirects() {
    let started = Instant::now();
    let curl = support::need("curl", "curl");
    let (env, ca) = setup();
    let real = support::secret("sk-proj-", 40);
    let echo = Server::serve(&ca, env.root.path(), "echo", &[]);
    let redirect = Server::serve(&ca, env.root.path(), "redirect", &[&echo.port.to_string()]);
    let cred = Cred {
        name: "api",
        from: "{ env = \"API_TOKEN\" }".into(),
        variable: "API_TOKEN",
        host: "api.warden.test",
        ports: vec![echo.port, redirect.port],
        inject: "\"bearer\"",
        extra: "",
    };
    let get = "curl -sS -m 60 -H \"Authorization: Bearer $API_TOKEN\" -H 'Accept-Encoding: identity'";
    let script = format!(
        "for v in raw json base64 chunked gzip; do {get} -o resp-$v.bin https://api.warden.test:{e}/$v; done\n\
         base64 -d resp-base64.bin > resp-base64.txt\n\
         gzip -dc resp-gzip.bin > resp-gzip.txt 2>/dev/null || cp resp-gzip.bin resp-gzip.txt\n\
         {get} -D redirect.txt -o /dev/null https://api.warden.test:{r}/x\n\
         echo \"LOCATION: $(grep -i '^location:' redirect.txt | tr -d '\\r')\"\n{}",
        support::print_env("API_TOKEN"),
        e = echo.port,
        r = redirect.port
    );
    let r = call(&env, &ca, &support::policy(&[cred], &[]), &[("API_TOKEN", &real)], &script);
    let seen = support::placeholder(&r.out(), "API_TOKEN", &real, "sk-proj-");
    let mut checks = Vec::new();
    if let Ok(ph) = &seen {
        for f in ["resp-raw.bin", "resp-json.bin", "resp-base64.txt", "resp-chunked.bin", "resp-gzip.txt"] {
            let body = std::fs::read_to_string(env.ws.join(f)).unwrap_or_default();
            // All of it: inside a longer base64 text the value's last character shares its 6 bits with the
            // byte after it, and that character too must carry the placeholder's bits, none of the real value's.
            let want = format!("Bearer {ph}");
            checks.push((
                "an echoed body holds the placeholder",
                check(body.contains(&want), f.to_string(), || format!("{f}: {}", util::clip(&body, 300))),
            ));
        }
        let location = after(&r.out(), "LOCATION:").to_string();
        checks.push((
            "the redirect's Location holds the placeholder",
            check(location.contains(&format!("Bearer%20{ph}")), location.clone(), || {
                format!("{location:?}; {}", r.brief())
            }),
        ));
    }
    checks.extend(common(
        &env,
        &r,
        (&echo, 0),
        &format!("Bearer {real}"),
        ("API_TOKEN", &real, "sk-proj-"),
        ("api", "api.warden.test"),
        None,
    ));
    checks.push((
        "the redirect server got the real secret",
        check(redirect.logged().contains(&format!("Bearer {real}")), "yes".into(), || redirect.logged()),
    ));
    support::row(
        "curl (echoed secret in bodies, redirect Location)",
        &support::version(&curl, "--version"),
        started,
        &checks,
    );
}
