//! CI jobs under `policies/ci.toml`: `warden run -- CMD …` as a CI
//! step writes it, real programs in a checkout the invoking user owns (root in
//! CI: a root-owned checkout, the tool uid 0 without capabilities), the
//! program's own exit status, stdio passed through, and a refusal that names
//! what to change. `.ci/unprivileged` runs this binary again as an ordinary
//! user.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod util;

use std::path::Path;

use util::{Env, Run};

/// The shipped CI policy, placed where docs/ci.md puts it: in the checkout.
fn ci_env() -> Env {
    let env = Env::new();
    let policy = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("policies/ci.toml")).unwrap();
    env.write("ci.toml", &policy);
    env
}

/// `warden --policy ci.toml run -- ARGV…` in the checkout, `stdin` fed to it.
fn run(env: &Env, argv: &[&str], stdin: Option<&str>) -> Run {
    let mut args = vec!["--policy", "ci.toml", "run", "--"];
    args.extend(argv);
    env.run_with_stdin(&args, stdin)
}

#[test]
fn run_passes_stdio_through_and_exits_with_the_programs_status() {
    let env = ci_env();
    let r = run(&env, &["sh", "-c", "cat; echo out; echo err >&2; exit 7"], Some("from stdin\n"));
    assert_eq!(r.code, 7, "{r:?}");
    assert_eq!(r.stdout, "from stdin\nout\n", "{r:?}");
    assert_eq!(r.stderr.trim(), "err", "{r:?}");
    let records = env.audit_records();
    let record = records.iter().find(|r| r["tool"] == "run").expect("a record of the run");
    assert_eq!(record["args"]["command"], "sh -c 'cat; echo out; echo err >&2; exit 7'", "{record}");
}

#[test]
fn run_writes_the_checkout_and_a_self_abort_is_134() {
    let env = ci_env();
    let r = run(&env, &["sh", "-c", "echo built > artifact.txt"], None);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(std::fs::read_to_string(env.ws.join("artifact.txt")).unwrap(), "built\n");
    let r = run(&env, &["/usr/bin/python3", "-c", "import os; os.abort()"], None);
    assert_eq!(r.code, 134, "SIGABRT is 128+6: {r:?}");
    let r = run(&env, &["sh", "-c", "kill -TERM $$"], None);
    assert_eq!(r.code, 143, "SIGTERM is 128+15: {r:?}");
}

#[test]
fn run_refuses_a_program_outside_the_grants_naming_it_and_the_key() {
    let env = ci_env();
    let program = env.outside.join("tool");
    std::fs::copy("/bin/true", &program).unwrap();
    let r = run(&env, &[program.to_str().unwrap()], None);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains(program.to_str().unwrap()) && r.stderr.contains("fs.read"), "{r:?}");
    let r = run(&env, &["no-such-program-here"], None);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("no-such-program-here: not found on the tool's PATH"), "{r:?}");
    // Nothing ran, and the record says the call failed.
    let records = env.audit_records();
    assert!(records.iter().filter(|r| r["tool"] == "run").all(|r| r["status"] == "error"), "{records:?}");
}

#[test]
fn a_run_only_tool_is_neither_listed_nor_callable() {
    let env = ci_env();
    let r = env.run(&["--policy", "ci.toml", "call", "run", "{}"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.json()["error"]["message"].as_str().unwrap().contains("warden run --tool run -- CMD"), "{r:?}");
    let r = env.run(&["--policy", "ci.toml", "list"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.lines().all(|l| !l.starts_with("run ")), "{r:?}");
    assert!(r.stdout.lines().any(|l| l.starts_with("test ")), "{r:?}");
    // Another tool lends its walls, tier and rules with --tool (the command line is what its rules
    // see); a policy without [tools.run] says what to declare.
    let r = env.run(&["--policy", "ci.toml", "run", "--tool", "test", "--", "python3", "-m", "unittest", "-h"]);
    assert_eq!(r.code, 0, "{r:?}");
    let r = env.run(&["--policy", "ci.toml", "run", "--tool", "test", "--", "true"]);
    assert_eq!(r.code, 3, "not a runner's command line: test asks, and nobody answers: {r:?}");
    env.write("bare.toml", "version = 1\n");
    let r = env.run(&["--policy", "bare.toml", "run", "--", "true"]);
    assert_ne!(r.code, 0, "{r:?}");
    assert!(r.stderr.contains("declare [tools.run]"), "{r:?}");
}

/// warden's own files in the checkout (the policy docs/ci.md puts there, a
/// `warden.toml` warden would load without `--policy`, the lock beside them)
/// are protected in every call, whatever the grants: a tool that rewrote one
/// would set its own walls at the next step. Judged from the host: the bytes
/// are unchanged and nothing new appeared.
#[test]
fn a_run_cannot_rewrite_or_plant_wardens_own_files() {
    let env = ci_env();
    let before = std::fs::read(env.ws.join("ci.toml")).unwrap();
    let r = run(
        &env,
        &[
            "sh",
            "-c",
            "echo 'tier = \"auto\"' >> ci.toml; echo \"ci.toml $?\"; \
             printf 'version = 1\\n' > warden.toml; echo \"warden.toml $?\"; \
             mkdir -p sub && printf 'version = 1\\n' > sub/warden.toml; \
             printf 'x' > warden.lock; mv ci.toml moved.toml; echo \"mv $?\"; echo done",
        ],
        None,
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("ci.toml 2") || r.stdout.contains("ci.toml 1"), "the append failed inside: {r:?}");
    assert!(r.stdout.contains("done"), "{r:?}");
    assert_eq!(std::fs::read(env.ws.join("ci.toml")).unwrap(), before, "the policy file is as it was");
    for planted in ["warden.toml", "sub/warden.toml", "warden.lock", "moved.toml"] {
        assert!(!env.ws.join(planted).exists(), "{planted} reached the host: {r:?}");
    }
    assert!(r.stderr.contains("not applied: sub/warden.toml"), "{r:?}");
}

/// A toolchain first on `PATH` (as setup-node or pyenv put it) but outside the
/// grants: on the host `python3` is the toolchain's; in the sandbox a shell
/// would skip the entry and run /usr/bin/python3. warden refuses before
/// anything runs, naming the entry, what it shadows and the key; granted, the
/// toolchain's own program runs.
#[test]
fn a_toolchain_outside_the_grants_is_refused_never_swapped() {
    use std::os::unix::fs::PermissionsExt;
    let env = ci_env();
    let home = env.outside.join("toolchain");
    let bin = home.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let python = bin.join("python3");
    std::fs::write(&python, "#!/bin/sh\necho the toolchain python\n").unwrap();
    std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("{}:{}", bin.display(), util::PATH);
    let run_with_path = |policy: &str| {
        let mut c = env.command(&["--policy", policy, "run", "--", "sh", "-c", "python3 --version; echo ran"]);
        c.env("PATH", &path);
        let r = util::run_to_end(c, None);
        (Some(r.code), r.stdout, r.stderr)
    };
    let (code, stdout, stderr) = run_with_path("ci.toml");
    assert_eq!(code, Some(1), "{stdout}{stderr}");
    assert!(!stdout.contains("ran"), "the command ran with a swapped toolchain: {stdout}");
    let entry = bin.display().to_string();
    for part in [entry.as_str(), "python3", "/usr/bin/python3", "fs.read", "tool run"] {
        assert!(stderr.contains(part), "the refusal names {part}: {stderr}");
    }

    env.write(
        "toolchain.toml",
        &format!(
            "version = 1\n\n[tools.run]\ntier = \"auto\"\nfs.read = [\"{{system}}\", \"{{workspace}}\", \"{}\"]\n\
             fs.write = [\"{{workspace}}\", \"{{tmp}}\"]\nenv = {{ pass = [\"PATH\"], set = {{ HOME = \"{{tmp}}\" }} }}\n",
            home.display()
        ),
    );
    let (code, stdout, stderr) = run_with_path("toolchain.toml");
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert_eq!(stdout, "the toolchain python\nran\n", "{stderr}");
}

/// `AF_UNIX` inside the call: multiprocessing's Manager (a socket
/// under `{tmp}`), a pathname server in the checkout, an abstract name and
/// datagram pairs, as test suites use them; the record says the call's root
/// was built from its grants.
#[test]
fn unix_sockets_work_between_the_processes_of_one_call() {
    let env = ci_env();
    let script = "import multiprocessing as mp, socket, os\n\
                  with mp.Manager() as m:\n\
                  \x20   d = m.dict(); d['k'] = 'v'; print('manager', d['k'])\n\
                  s = socket.socket(socket.AF_UNIX); s.bind('app.sock'); s.listen()\n\
                  c = socket.socket(socket.AF_UNIX); c.connect('app.sock'); a, _ = s.accept(); c.send(b'hi'); print('path', a.recv(2).decode())\n\
                  t = socket.socket(socket.AF_UNIX); t.bind(b'\\0warden-test'); t.listen()\n\
                  u = socket.socket(socket.AF_UNIX); u.connect(b'\\0warden-test'); print('abstract ok')\n\
                  p, q = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM); p.send(b'd'); print('dgram', q.recv(1).decode())\n";
    let r = run(&env, &["python3", "-c", script], None);
    if !namespaces(&env) {
        // Without namespaces the host's tree stays and AF_UNIX is refused: say so.
        assert_ne!(r.code, 0, "{r:?}");
        return;
    }
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.stdout, "manager v\npath hi\nabstract ok\ndgram d\n", "{r:?}");
    let records = env.audit_records();
    let record = records.iter().rev().find(|r| r["tool"] == "run").expect("a record");
    assert_eq!(record["sandbox"]["view"], "grants", "{record}");
}

/// A working directory spelled through a symbolic link to a granted
/// directory (a toolchain's `1.95.0 -> stable` link, say): the call's root is
/// still built from the grants, and the program runs there.
#[test]
fn a_working_directory_spelled_through_a_link_still_gets_the_grant_view() {
    let env = ci_env();
    let real = env.outside.join("real-dir");
    std::fs::create_dir_all(&real).unwrap();
    let link = env.outside.join("link-dir");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    env.write(
        "linked.toml",
        &format!(
            "version = 1\n\n[tools.run]\ntier = \"auto\"\ncwd = \"{}\"\nfs.read = [\"{{system}}\", \"{}\"]\n\
             fs.write = [\"{{tmp}}\"]\n",
            link.display(),
            real.display()
        ),
    );
    let r = env.run_with_stdin(&["--policy", "linked.toml", "run", "--", "sh", "-c", "pwd -P"], None);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.stdout.trim(), real.display().to_string(), "{r:?}");
    if namespaces(&env) {
        let records = env.audit_records();
        let record = records.iter().rev().find(|r| r["tool"] == "run").expect("a record");
        assert_eq!(record["sandbox"]["view"], "grants", "{record}");
    }
}

/// Whether calls get namespaces here (the last record says).
fn namespaces(env: &Env) -> bool {
    let records = env.audit_records();
    records
        .iter()
        .rev()
        .find(|r| r["tool"] == "run")
        .is_some_and(|r| r["sandbox"]["namespaces"].as_array().is_some_and(|n| n.iter().any(|x| x == "net")))
}

/// One call's sockets are unreachable from another's, judged by the listener:
/// call A listens on a path in the shared checkout and on an abstract name;
/// call B, running at the same time in the same checkout, finds neither
/// (its own layer of the checkout, its own network namespace), and A accepts
/// nothing. A host daemon's socket outside the grants does not exist for B.
#[test]
fn a_calls_socket_is_unreachable_from_another_call_and_host_sockets_from_both() {
    use std::io::{BufRead, BufReader};
    let env = ci_env();
    let daemon_path = env.outside.join("daemon.sock");
    let daemon = std::os::unix::net::UnixListener::bind(&daemon_path).unwrap();
    daemon.set_nonblocking(true).unwrap();
    let listener = "import socket, select, sys\n\
                    s = socket.socket(socket.AF_UNIX); s.bind('a.sock'); s.listen()\n\
                    t = socket.socket(socket.AF_UNIX); t.bind(b'\\0warden-call-a'); t.listen()\n\
                    print('ready', flush=True)\n\
                    r, _, _ = select.select([s, t], [], [], 4)\n\
                    print('accepted', len(r), flush=True)\n";
    let mut a = env.command(&["--policy", "ci.toml", "run", "--", "python3", "-c", listener]).spawn().unwrap();
    let mut lines = BufReader::new(a.stdout.take().unwrap()).lines();
    let first = lines.next().and_then(Result::ok).unwrap_or_default();
    if first != "ready" {
        let _ = a.wait();
        assert!(!namespaces(&env), "call A did not start listening: {first:?}");
        return;
    }
    let prober = format!(
        "import socket, errno\n\
         def attempt(name, addr):\n\
         \x20   try:\n\
         \x20       socket.socket(socket.AF_UNIX).connect(addr); print(name, 'CONNECTED')\n\
         \x20   except OSError as e:\n\
         \x20       print(name, 'refused', errno.errorcode.get(e.errno, e.errno))\n\
         attempt('path', 'a.sock')\n\
         attempt('abstract', b'\\0warden-call-a')\n\
         attempt('daemon', {:?})\n",
        daemon_path.display().to_string()
    );
    let b = run(&env, &["python3", "-c", &prober], None);
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let _ = a.wait();
    assert_eq!(b.code, 0, "{b:?}");
    assert_eq!(b.stdout, "path refused ENOENT\nabstract refused ECONNREFUSED\ndaemon refused ENOENT\n", "{b:?}");
    assert_eq!(rest, vec!["accepted 0".to_string()], "call A saw a connection");
    assert!(daemon.accept().is_err(), "the host daemon saw a connection");
}

/// With no network grant, a program that honours the proxy settings is
/// refused at once by warden's proxy: curl and npm (whose fetch
/// does not retry a 403, where it retries a failed lookup for about a minute)
/// end with the proxy's 403, the hint names `net.connect` and the
/// destination once, and the record keeps every refused attempt.
#[test]
fn without_a_network_grant_the_proxy_refuses_at_once_naming_the_grant() {
    let env = ci_env();
    let r = run(&env, &["sh", "-c", "exit 0"], None);
    assert_eq!(r.code, 0, "{r:?}");
    if !namespaces(&env) {
        // Without a network namespace there is no proxy: the socket is refused (EPERM).
        return;
    }
    let r = run(&env, &["curl", "-sS", "https://pypi.org/simple/"], None);
    assert_eq!(r.code, 56, "curl's CONNECT refused: {r:?}");
    assert!(r.stderr.contains("CONNECT tunnel failed, response 403"), "{r:?}");
    let hints: Vec<&str> = r.stderr.lines().filter(|l| l.starts_with("warden: run: hint: ")).collect();
    assert_eq!(
        hints,
        ["warden: run: hint: run was refused pypi.org:443: add \"pypi.org:443\" to its net.connect if it needs it"],
        "{r:?}"
    );
    env.write("package.json", r#"{"name":"x","version":"1.0.0","dependencies":{"left-pad":"1.3.0"}}"#);
    let r = run(&env, &["npm", "install", "--no-audit", "--no-fund"], None);
    assert_ne!(r.code, 0, "{r:?}");
    assert!(r.stderr.contains("E403") && !r.stderr.contains("EAI_AGAIN") && !r.stderr.contains("ENOTFOUND"), "{r:?}");
    assert!(r.stderr.contains("hint: run was refused registry.npmjs.org:443"), "{r:?}");
    let records = env.audit_records();
    let record = records.iter().rev().find(|r| r["tool"] == "run").expect("a record");
    let network = &record["network"];
    assert!(network["refused"].as_u64().is_some_and(|n| n >= 1) && network["allowed"] == 0, "{record}");
    assert_eq!(network["refused_destinations"][0]["host"], "registry.npmjs.org", "{record}");
    assert_eq!(record["sandbox"]["egress"], "loopback", "{record}");
}

/// A wrapped MCP server that fails after a refusal gets the same hints as a
/// process tool: from what it answered and what it wrote to stderr
/// during the call, naming the server and the `fs.read` line; a path inside
/// its grants gets none.
#[test]
fn a_wrapped_servers_refusal_names_the_grant() {
    let env = Env::new();
    let server = env.write(
        "srv.py",
        r#"import json, sys
def answer(req):
    m, p = req.get("method"), req.get("params") or {}
    if m == "initialize":
        return {"protocolVersion": p.get("protocolVersion", "2025-06-18"), "capabilities": {"tools": {}},
                "serverInfo": {"name": "srv", "version": "1"}}
    if m == "tools/list":
        schema = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
        return {"tools": [{"name": "cat", "description": "Print a file", "inputSchema": schema}]}
    if m == "tools/call":
        try:
            with open(p["arguments"]["path"]) as f:
                return {"content": [{"type": "text", "text": f.read()}], "isError": False}
        except OSError as e:
            print(f"cat: {e}", file=sys.stderr, flush=True)
            return {"content": [{"type": "text", "text": f"cannot read it: {e.strerror}"}], "isError": True}
    return {}
for line in sys.stdin:
    req = json.loads(line)
    if "id" in req:
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": req["id"], "result": answer(req)}) + "\n")
        sys.stdout.flush()
"#,
    );
    env.write(
        "srv.toml",
        &format!(
            "version = 1\n\n[servers.srv]\nexec = [\"/usr/bin/python3\", {:?}]\ntier = \"auto\"\n\
             fs.read = [\"{{system}}\", \"{{workspace}}\"]\n",
            server.display().to_string()
        ),
    );
    env.write("here.txt", "inside\n");
    let r = env.run(&["--policy", "srv.toml", "call", "srv__cat", r#"{"path":"here.txt"}"#]);
    assert_eq!(r.code, 0, "{r:?}");
    let r = env.run(&["--policy", "srv.toml", "call", "srv__cat", r#"{"path":"/opt/warden-absent/tool.conf"}"#]);
    assert_ne!(r.code, 0, "{r:?}");
    let message = r.json()["error"]["message"].as_str().unwrap_or_default().to_string();
    assert!(
        message.contains(
            "hint: the program was refused /opt/warden-absent/tool.conf, outside every grant of srv: if it needs \
             it, add \"/opt/warden-absent/tool.conf\""
        ) && message.contains("fs.read"),
        "{r:?}"
    );
    assert_eq!(message.matches("hint:").count(), 1, "once: {message}");
    let r = env.run(&["--policy", "srv.toml", "call", "srv__cat", r#"{"path":"absent-here.txt"}"#]);
    assert_ne!(r.code, 0, "{r:?}");
    assert!(!r.stdout.contains("hint:"), "a path inside its grants names no grant: {r:?}");
}

/// Hints at the wall: a run that failed after the sandbox refused
/// a path outside its grants, a program not on its PATH and a name it cannot
/// resolve ends with one line each on stderr naming the key and the value;
/// `call --stream` prints the same once and keeps them in the result's `hints`.
#[test]
fn a_refusal_ends_with_hints_naming_the_key_once() {
    let env = ci_env();
    let script = "cat /opt/warden-absent/tool.conf; cat /opt/warden-absent/tool.conf; no-such-runner-here; \
                  python3 -c \"import socket; socket.getaddrinfo('pypi.org', 443)\"; exit 3";
    let r = run(&env, &["sh", "-c", script], None);
    assert_eq!(r.code, 3, "{r:?}");
    let hints: Vec<&str> = r.stderr.lines().filter(|l| l.starts_with("warden: run: hint: ")).collect();
    assert_eq!(hints.len(), 3, "{r:?}");
    assert!(
        hints[0].contains("refused /opt/warden-absent/tool.conf, outside every grant of run")
            && hints[0].contains("fs.read")
    );
    assert!(hints[1].contains("no-such-runner-here is not on the PATH of run"), "{hints:?}");
    if namespaces(&env) {
        assert!(hints[2].contains("run has no network grant") && hints[2].contains("net.connect"), "{hints:?}");
    }
    // The program's own stderr came first, whole.
    assert!(r.stderr.find("tool.conf: No such file").unwrap() < r.stderr.find("warden: run: hint").unwrap(), "{r:?}");

    env.write(
        "shell.toml",
        "version = 1\n\n[tools.sh]\nexec = [\"/bin/sh\", \"-c\", \"{command}\"]\ntier = \"auto\"\n\
         fs.read = [\"{system}\", \"{workspace}\"]\nenv = { set = { PATH = \"/usr/bin:/bin\" } }\n",
    );
    let r = env.run(&[
        "--policy",
        "shell.toml",
        "call",
        "--stream",
        "sh",
        r#"{"command":"cat /opt/warden-absent/x; exit 1"}"#,
    ]);
    let doc: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    let hints = doc["result"]["hints"].as_array().unwrap();
    assert_eq!(hints.len(), 1, "{doc}");
    assert!(
        hints[0]
            .as_str()
            .unwrap()
            .starts_with("the program was refused /opt/warden-absent/x, outside every grant of sh"),
        "{doc}"
    );
    assert_eq!(r.stderr.matches("warden: sh: hint: the program was refused /opt/warden-absent/x").count(), 1, "{r:?}");
}

/// A wheel built by hand (pip needs no build backend and no index for it):
/// package `hello_pkg` with a console script `hello-pkg`; zipped by the
/// host's Python.
fn write_wheel(path: &Path) {
    let script = r#"
import base64, hashlib, sys, zipfile
files = {
    "hello_pkg/__init__.py": "def main():\n    print('hello from the wheel')\n",
    "hello_pkg-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: hello-pkg\nVersion: 1.0\n",
    "hello_pkg-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    "hello_pkg-1.0.dist-info/entry_points.txt": "[console_scripts]\nhello-pkg = hello_pkg:main\n",
}
record = []
with zipfile.ZipFile(sys.argv[1], "w") as z:
    for name, text in files.items():
        data = text.encode()
        z.writestr(name, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append("hello_pkg-1.0.dist-info/RECORD,,")
    z.writestr("hello_pkg-1.0.dist-info/RECORD", "\n".join(record) + "\n")
"#;
    let status = std::process::Command::new("python3").args(["-c", script]).arg(path).status().unwrap();
    assert!(status.success(), "cannot write the wheel");
}

/// The programs a CI job must be able to run, each through `warden run` under
/// `policies/ci.toml`, in a checkout the invoking user owns (root in CI: a
/// root-owned checkout; an ordinary user in `.ci/unprivileged`): a venv and
/// `pip install` of a local wheel with a console script; `npm ci` of a
/// lockfile whose `file:` dependency has a bin (npm links and chmods it);
/// `git init` and `commit` in the call's `{tmp}` (cargo: the next test).
#[test]
fn real_programs_run_in_a_checkout_the_user_owns() {
    let env = ci_env();
    // Python: venv, pip, the console script.
    write_wheel(&env.ws.join("hello_pkg-1.0-py3-none-any.whl"));
    let r = run(&env, &["python3", "-m", "venv", ".venv"], None);
    assert_eq!(r.code, 0, "python3 -m venv: {r:?}");
    let r = run(
        &env,
        &[
            ".venv/bin/pip",
            "install",
            "-q",
            "--no-index",
            "--disable-pip-version-check",
            "./hello_pkg-1.0-py3-none-any.whl",
        ],
        None,
    );
    assert_eq!(r.code, 0, "pip install: {r:?}");
    let r = run(&env, &[".venv/bin/hello-pkg"], None);
    assert_eq!((r.code, r.stdout.as_str()), (0, "hello from the wheel\n"), "{r:?}");

    // npm: a lockfile, a file: dependency with a bin, the test script.
    env.write("tool/package.json", r#"{"name": "tool", "version": "1.0.0", "bin": {"tool-hello": "cli.js"}}"#);
    env.write("tool/cli.js", "#!/usr/bin/env node\nconsole.log('hello from tool');\n");
    env.write(
        "package.json",
        r#"{"name": "app", "version": "1.0.0", "private": true, "dependencies": {"tool": "file:tool"}, "scripts": {"test": "tool-hello"}}"#,
    );
    env.write(
        "package-lock.json",
        r#"{"name": "app", "version": "1.0.0", "lockfileVersion": 3, "requires": true, "packages": {
  "": {"name": "app", "version": "1.0.0", "dependencies": {"tool": "file:tool"}},
  "node_modules/tool": {"resolved": "tool", "link": true},
  "tool": {"version": "1.0.0", "bin": {"tool-hello": "cli.js"}}}}"#,
    );
    let r = run(&env, &["npm", "ci", "--offline", "--no-audit", "--no-fund", "--no-update-notifier"], None);
    assert_eq!(r.code, 0, "npm ci: {r:?}");
    let r = run(&env, &["npm", "test", "--silent", "--no-update-notifier"], None);
    assert_eq!((r.code, r.stdout.as_str()), (0, "hello from tool\n"), "npm test: {r:?}");

    // git: a repository made and committed to in the call's {tmp}.
    let r = run(
        &env,
        &[
            "sh",
            "-c",
            "cd \"$TMPDIR\" && git init -q r && cd r && echo x > f && git add f && \
             git -c user.name=ci -c user.email=ci@example.invalid commit -q -m first && git log --format=%s",
        ],
        None,
    );
    assert_eq!((r.code, r.stdout.as_str()), (0, "first\n"), "git: {r:?}");
}

/// `cargo test` under `warden run` with `CARGO_HOME` in the checkout and the
/// invoking user's rustup toolchain (read-only). CI's root job runs it (root
/// has the toolchain that built warden; the unprivileged user has none, and
/// rustup's downloads are not reachable from CI to give it one).
#[test]
#[ignore = "needs a rustup toolchain in HOME"]
fn cargo_test_runs_with_the_users_rustup_toolchain() {
    let env = ci_env();
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from).unwrap_or_default();
    let (cargo_bin, rustup) = (home.join(".cargo/bin"), home.join(".rustup"));
    assert!(
        cargo_bin.join("cargo").exists() && rustup.is_dir(),
        "needs a rustup toolchain under {} (run it as a user that has one; .ci/run's root job does)",
        home.display()
    );
    env.write("crate/Cargo.toml", "[package]\nname = \"acc\"\nversion = \"0.1.0\"\nedition = \"2021\"\n");
    env.write(
        "crate/src/lib.rs",
        "#[cfg(test)]\nmod t {\n    #[test]\n    fn two() {\n        assert_eq!(1 + 1, 2);\n    }\n}\n",
    );
    env.write(
        "cargo.toml",
        &format!(
            "version = 1\n\n[tools.run]\ntier = \"auto\"\nfs.read = [\"{{system}}\", \"{{workspace}}\", \"{}\", \"{}\"]\n\
             fs.write = [\"{{workspace}}\", \"{{tmp}}\"]\n\
             env = {{ set = {{ HOME = \"{{tmp}}\", PATH = \"{}:/usr/bin:/bin\", CARGO_HOME = \"{{workspace}}/.cargo-home\", RUSTUP_HOME = \"{}\" }} }}\n\
             limits = {{ timeout = \"10m\", cpu = \"10m\", memory = \"4GiB\", processes = 512, open_files = 4096, file_size = \"1GiB\", tmp_size = \"1GiB\" }}\n",
            cargo_bin.display(),
            rustup.display(),
            cargo_bin.display(),
            rustup.display()
        ),
    );
    let mut c = env.command(&["--policy", "../cargo.toml", "run", "--", "cargo", "test", "--offline", "-q"]);
    c.current_dir(env.ws.join("crate"));
    let r = util::run_to_end(c, None);
    assert_eq!(r.code, 0, "cargo test: {}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("1 passed"), "cargo test: {}{}", r.stdout, r.stderr);
}

/// `net.unix`: one host socket by path, bound into the call's root; its
/// neighbour in the same directory is not there. Judged by the listeners.
#[test]
fn net_unix_reaches_the_one_granted_host_socket_and_nothing_beside_it() {
    use std::io::Read;
    let env = ci_env();
    let probe = run(&env, &["true"], None);
    assert_eq!(probe.code, 0, "{probe:?}");
    let with_namespaces = namespaces(&env);
    let dir = env.outside.join("run");
    std::fs::create_dir_all(&dir).unwrap();
    let db = std::os::unix::net::UnixListener::bind(dir.join("db.sock")).unwrap();
    let other = std::os::unix::net::UnixListener::bind(dir.join("other.sock")).unwrap();
    db.set_nonblocking(true).unwrap();
    other.set_nonblocking(true).unwrap();
    env.write(
        "unix.toml",
        &format!(
            "version = 1\n\n[tools.run]\ntier = \"auto\"\nfs.read = [\"{{system}}\", \"{{workspace}}\"]\n\
             fs.write = [\"{{workspace}}\", \"{{tmp}}\"]\nnet.unix = [\"{}\"]\n",
            dir.join("db.sock").display()
        ),
    );
    let prober = format!(
        "import socket, errno\n\
         def attempt(name, path):\n\
         \x20   try:\n\
         \x20       s = socket.socket(socket.AF_UNIX); s.connect(path); s.sendall(b'hello'); s.close(); print(name, 'CONNECTED')\n\
         \x20   except OSError as e:\n\
         \x20       print(name, 'refused', errno.errorcode.get(e.errno, e.errno))\n\
         attempt('db', {:?})\n\
         attempt('other', {:?})\n",
        dir.join("db.sock").display().to_string(),
        dir.join("other.sock").display().to_string()
    );
    let r = env.run(&["--policy", "unix.toml", "run", "--", "python3", "-c", &prober]);
    if !with_namespaces {
        assert_eq!(r.code, 5, "SANDBOX_UNAVAILABLE without namespaces: {r:?}");
        assert!(r.stderr.contains("net.unix"), "{r:?}");
        return;
    }
    assert_eq!((r.code, r.stdout.as_str()), (0, "db CONNECTED\nother refused ENOENT\n"), "{r:?}");
    let (mut conn, _) = db.accept().expect("the granted daemon saw the connection");
    conn.set_nonblocking(false).unwrap();
    let mut got = String::new();
    conn.read_to_string(&mut got).unwrap();
    assert_eq!(got, "hello");
    assert!(other.accept().is_err(), "the socket beside it saw a connection");
}

/// A registry of the test's own on loopback (pypiserver, serving wheels the
/// host downloaded once per uid), its address and the server.
struct Registry {
    port: u16,
    server: std::process::Child,
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.server.kill();
        let _ = self.server.wait();
    }
}

fn host(program: &Path, args: &[&str]) {
    let out = std::process::Command::new(program).args(args).output().unwrap();
    assert!(out.status.success(), "{} {args:?}: {}", program.display(), String::from_utf8_lossy(&out.stderr));
}

/// pypiserver on 127.0.0.1 serving pytest, pytest-xdist and their dependencies.
fn registry() -> Registry {
    let base = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("ci-registry-{}", nix::unistd::geteuid()));
    let (venv, wheels) = (base.join("venv"), base.join("wheels"));
    let python = venv.join("bin/python");
    if !base.join("ready").exists() {
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&wheels).unwrap();
        host(Path::new("python3"), &["-m", "venv", venv.to_str().unwrap()]);
        host(&python, &["-m", "pip", "install", "-q", "--disable-pip-version-check", "pypiserver==2.3.2"]);
        host(
            &python,
            &["-m", "pip", "download", "-q", "--disable-pip-version-check", "--only-binary=:all:", "-d"]
                .into_iter()
                .chain([wheels.to_str().unwrap(), "pytest==8.3.4", "pytest-xdist==3.6.1"])
                .collect::<Vec<_>>(),
        );
        std::fs::write(base.join("ready"), "").unwrap();
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let server = std::process::Command::new(venv.join("bin/pypi-server"))
        .args(["run", "-i", "127.0.0.1", "-p", &port.to_string(), "--disable-fallback"])
        .arg(&wheels)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let registry = Registry { port, server };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(std::time::Instant::now() < deadline, "pypiserver did not listen on {port}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    registry
}

/// pytest with pytest-xdist's workers and a multiprocessing Manager, installed
/// with pip from a registry through the documented grant (`net.connect` to
/// the registry, every request through warden's egress proxy), each step a
/// `warden run` under `policies/ci.toml`.
#[test]
fn pytest_xdist_and_a_manager_installed_from_a_registry_through_the_grant() {
    let env = ci_env();
    let probe = run(&env, &["true"], None);
    assert_eq!(probe.code, 0, "{probe:?}");
    if !namespaces(&env) {
        eprintln!("skipped: a registry grant holds only in the call's network namespace (none here)");
        return;
    }
    let registry = registry();
    let mut policy = std::fs::read_to_string(env.ws.join("ci.toml")).unwrap();
    policy.push_str(&format!("net.connect = [\"127.0.0.1:{}\"]\n", registry.port));
    env.write("ci.toml", &policy);
    let r = run(&env, &["python3", "-m", "venv", ".venv"], None);
    assert_eq!(r.code, 0, "{r:?}");
    let index = format!("http://127.0.0.1:{}/simple/", registry.port);
    let r = run(
        &env,
        &[
            ".venv/bin/pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            "--index-url",
            &index,
            "pytest",
            "pytest-xdist",
        ],
        None,
    );
    assert_eq!(r.code, 0, "pip install through the proxy: {r:?}");
    env.write(
        "tests/test_mp.py",
        "import multiprocessing as mp\n\n\
         def test_manager():\n    with mp.Manager() as m:\n        d = m.dict(); d['k'] = 1\n        assert d['k'] == 1\n\n\
         def test_one():\n    assert 1\n\ndef test_two():\n    assert 2\n",
    );
    let r = run(&env, &[".venv/bin/python", "-m", "pytest", "-q", "-n", "2", "-p", "no:cacheprovider", "tests"], None);
    assert_eq!(r.code, 0, "pytest -n 2: {r:?}");
    assert!(r.stdout.contains("3 passed"), "{r:?}");
    // The registry was reached through the proxy, and the record says so.
    let records = env.audit_records();
    let pip =
        records.iter().find(|r| r["args"]["command"].as_str().is_some_and(|c| c.contains("pip install"))).unwrap();
    assert!(pip["network"].to_string().contains(&registry.port.to_string()), "{pip}");
}
