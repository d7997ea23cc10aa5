//! Process tools under rlimits, Landlock and seccomp: every escape here is
//! really attempted by a real program inside the sandbox, and really refused.
//! Run as root (as CI does), these also prove that uid 0 without capabilities
//! cannot read `/etc/shadow`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod util;

use std::net::{TcpListener, UdpSocket};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};
use util::{Env, Run, SECRET};

const PYTHON: &str = "/usr/bin/python3";

/// A policy with one `shell` tool at tier auto; `extra` goes inside its table.
fn policy(env: &Env, extra: &str, limits: &str) -> String {
    let text = format!(
        "version = 1\n[tools.shell]\nexec = [\"/bin/bash\", \"-c\", \"{{command}}\"]\ntier = \"auto\"\n\
         fs.read = [\"{{system}}\", \"{{workspace}}\"{extra}]\nfs.write = [\"{{workspace}}\", \"{{tmp}}\"]\n\
         env = {{ pass = [\"PATH\"], set = {{ HOME = \"{{tmp}}\" }} }}\nlimits = {{ {limits} }}\n"
    );
    let path = env.root.path().join("policy.toml");
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

fn shell_with(env: &Env, policy: &str, command: &str) -> Run {
    env.run(&["--policy", policy, "call", "shell", &json!({ "command": command }).to_string()])
}

fn shell(env: &Env, command: &str) -> Run {
    let p = policy(env, "", "timeout = \"10s\"");
    shell_with(env, &p, command)
}

fn result(r: &Run) -> Value {
    let doc = r.json();
    assert_eq!(doc["status"], "success", "{r:?}");
    doc["result"].clone()
}

fn python(env: &Env, script: &str) -> Run {
    if !Path::new(PYTHON).exists() {
        panic!("{PYTHON} is needed for this test (Debian package python3)");
    }
    std::fs::write(env.ws.join("probe.py"), script).unwrap();
    shell(env, &format!("{PYTHON} probe.py"))
}

/// Live (non-zombie) processes whose command line contains `marker`.
fn survivors(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().filter_map(Result::ok) {
        let dir = e.path();
        let Ok(cmd) = std::fs::read(dir.join("cmdline")) else { continue };
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        let state = std::fs::read_to_string(dir.join("stat")).unwrap_or_default();
        let zombie = state.rsplit_once(')').is_some_and(|(_, r)| r.trim_start().starts_with('Z'));
        if cmd.contains(marker) && !zombie && !cmd.contains("cargo") {
            found.push(format!("{}: {cmd}", dir.display()));
        }
    }
    found
}

#[test]
fn shell_echo_under_the_default_policy() {
    let env = Env::new();
    let r = env.call(&["--approve", "yes"], "shell", r#"{"command":"echo hi"}"#);
    assert_eq!(r.code, 0, "{r:?}");
    let res = result(&r);
    assert_eq!((res["stdout"].as_str(), res["exit_code"].as_i64()), (Some("hi\n"), Some(0)));
    let rec = env.audit_records().pop().unwrap();
    assert_eq!(rec["sandbox"]["runtime"], "process");
    assert!(rec["usage"]["cpu_ms"].is_number());
}

#[test]
fn a_failing_program_is_a_successful_call_with_its_exit_code() {
    let env = Env::new();
    let r = shell(&env, "echo out; echo err >&2; exit 3");
    assert_eq!(r.code, 0, "{r:?}");
    let res = result(&r);
    assert_eq!(
        (&res["exit_code"], &res["stdout"], &res["stderr"], &res["truncated"]),
        (&json!(3), &json!("out\n"), &json!("err\n"), &json!(false))
    );
    assert!(res["cpu_ms"].is_number() && res["max_rss_kb"].as_u64().unwrap() > 0, "{res}");
    let rec = env.audit_records().pop().unwrap();
    assert_eq!((rec["sandbox"]["seccomp"].as_bool(), rec["sandbox"]["rlimits"].as_bool()), (Some(true), Some(true)));
    assert!(rec["sandbox"]["landlock_abi"].as_u64().unwrap() >= 4, "{rec}");
}

#[test]
fn reads_outside_the_grants_are_refused_even_as_root() {
    let env = Env::new();
    let secret = env.outside.join("secret.txt");
    let home_file = env.root.path().join("home-secret");
    std::fs::write(&home_file, SECRET).unwrap();
    for target in [Path::new("/etc/shadow"), Path::new("/root/.bashrc"), secret.as_path(), home_file.as_path()] {
        if !target.exists() {
            continue;
        }
        let r = shell(&env, &format!("cat {}", target.display()));
        let res = result(&r);
        assert_ne!(res["exit_code"], 0, "{target:?}: {r:?}");
        assert!(util::refusals(res["stderr"].as_str().unwrap()) > 0, "{target:?}: {r:?}");
        assert!(!r.stdout.contains(SECRET) && !r.stdout.contains("root:"), "{target:?} leaked: {r:?}");
    }
    let r = shell(&env, "ls /root; ls /etc | head -3");
    assert!(util::refusals(result(&r)["stderr"].as_str().unwrap()) > 0, "{r:?}");
}

#[test]
fn writes_outside_fs_write_are_refused() {
    let env = Env::new();
    let outside_new = env.outside.join("new.txt");
    let tmp_escape = std::env::temp_dir().join(format!("warden-escape-{}", std::process::id()));
    let cmd = format!(
        "echo pwned > {}; echo pwned > {}; echo pwned >> {}; rm -f {}; mv {} {}/moved; touch /usr/pwned",
        outside_new.display(),
        tmp_escape.display(),
        env.outside.join("secret.txt").display(),
        env.outside.join("secret.txt").display(),
        env.outside.join("secret.txt").display(),
        env.ws.display()
    );
    let r = shell(&env, &cmd);
    let stderr = result(&r)["stderr"].as_str().unwrap().to_string();
    // Landlock's EACCES, the read-only view's EROFS (it answers first for a
    // write), or ENOENT in a root built from the grants.
    assert!(util::refusals(&stderr) >= 4, "{stderr}");
    assert!(!outside_new.exists() && !tmp_escape.exists() && !Path::new("/usr/pwned").exists());
    assert_eq!(std::fs::read_to_string(env.outside.join("secret.txt")).unwrap(), SECRET);
    // Inside the workspace, writing works.
    let r = shell(&env, "echo ok > inside.txt && cat inside.txt");
    assert_eq!(result(&r)["stdout"], "ok\n");
}

#[test]
fn links_and_proc_root_do_not_lead_outside() {
    let env = Env::new();
    std::os::unix::fs::symlink(env.outside.join("secret.txt"), env.ws.join("link")).unwrap();
    let p = policy(&env, ", \"/proc\"", "timeout = \"10s\"");
    let secret = env.outside.join("secret.txt");
    let cmd = format!(
        "cat link; cat /proc/self/root{}; ln {} hard; cat hard; ln -s {} made; cat made",
        secret.display(),
        secret.display(),
        secret.display()
    );
    let r = shell_with(&env, &p, &cmd);
    let res = result(&r);
    assert!(!r.stdout.contains(SECRET), "leaked: {r:?}");
    assert!(util::refusals(res["stderr"].as_str().unwrap()) >= 3, "{r:?}");
    assert!(!env.ws.join("hard").exists(), "a hardlink to a file outside was created");
}

#[test]
fn status_shows_no_new_privs_seccomp_no_capabilities_and_only_stdio() {
    let env = Env::new();
    let p = policy(&env, ", \"/proc\"", "timeout = \"10s\"");
    std::fs::write(
        env.ws.join("fds.py"),
        "import os\nfor f in sorted(os.listdir('/proc/self/fd'), key=int):\n    print(f, os.readlink('/proc/self/fd/' + f))\n",
    )
    .unwrap();
    let r = shell_with(
        &env,
        &p,
        &format!(
            "grep -E '^(NoNewPrivs|Seccomp|CapEff|CapPrm|CapBnd|CapAmb):' /proc/self/status; exec {PYTHON} fds.py"
        ),
    );
    let out = result(&r)["stdout"].as_str().unwrap().to_string();
    let mut wanted = vec!["NoNewPrivs:\t1", "Seccomp:\t2", "CapEff:\t0000000000000000", "CapPrm:\t0000000000000000"];
    if nix::unistd::geteuid().is_root() {
        // Only root has a bounding set worth emptying; warden empties it.
        wanted.push("CapBnd:\t0000000000000000");
    }
    for want in wanted {
        assert!(out.contains(want), "missing {want:?} in {out}");
    }
    for line in out.lines().filter(|l| l.chars().next().is_some_and(|c| c.is_ascii_digit())) {
        let (fd, target) = line.split_once(' ').unwrap();
        let fd: u32 = fd.parse().unwrap();
        // Beyond 0-2 only the directory listing itself may be open.
        assert!(fd <= 2 || target.ends_with("/fd"), "inherited fd {fd} -> {target}\n{out}");
    }
}

/// Without a grant the call has a network namespace of its own with only
/// loopback: TCP sockets work but reach only that loopback
/// (ECONNREFUSED for the host's listener), MPTCP, raw and packet sockets stay
/// refused (EPERM), and a datagram to the host's receiver goes nowhere.
#[test]
fn no_network_without_a_grant() {
    let env = Env::new();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_nonblocking(true).unwrap();
    let uport = udp.local_addr().unwrap().port();

    let r = shell(&env, &format!("echo x > /dev/tcp/127.0.0.1/{port} && echo CONNECTED"));
    assert!(!result(&r)["stdout"].as_str().unwrap().contains("CONNECTED"), "{r:?}");
    let r = python(
        &env,
        &format!(
            "import socket\n\
             for name, make in [('tcp', lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM)),\n\
                                ('tcp6', lambda: socket.socket(socket.AF_INET6, socket.SOCK_STREAM)),\n\
                                ('mptcp', lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM, 262)),\n\
                                ('raw', lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, 1)),\n\
                                ('packet', lambda: socket.socket(17, socket.SOCK_RAW, 0)),\n\
                                ('udp', lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM))]:\n\
             \x20   try:\n\
             \x20       s = make()\n\
             \x20       if name == 'udp':\n\
             \x20           s.sendto(b'x', ('127.0.0.1', {uport}))\n\
             \x20       elif name == 'tcp6':\n\
             \x20           s.connect(('::ffff:127.0.0.1', {port}))\n\
             \x20       else:\n\
             \x20           s.connect(('127.0.0.1', {port}))\n\
             \x20       print(name, 'sent')\n\
             \x20   except OSError as e:\n\
             \x20       print(name, 'refused', e.errno)\n"
        ),
    );
    let out = result(&r)["stdout"].as_str().unwrap().to_string();
    let want = "tcp refused 111\ntcp6 refused 111\nmptcp refused 1\nraw refused 1\npacket refused 1\nudp sent\n";
    assert_eq!(out, want, "TCP reaches only the call's loopback, the rest is refused: {r:?}");
    let rec = env.audit_records().pop().unwrap();
    assert!(rec["sandbox"]["namespaces"].as_array().unwrap().iter().any(|n| n == "net"), "{rec}");
    std::thread::sleep(Duration::from_millis(50));
    assert!(listener.accept().is_err(), "a TCP connection arrived");
    assert!(udp.recv_from(&mut [0u8; 8]).is_err(), "a UDP datagram arrived");
}

/// A test suite may serve on 127.0.0.1 inside the call (its own loopback):
/// bind, listen, connect and accept work, with and without a grant.
#[test]
fn a_local_server_works_inside_the_call() {
    let env = Env::new();
    let r = python(
        &env,
        "import socket, threading\n\
         srv = socket.socket()\n\
         srv.bind(('127.0.0.1', 0))\n\
         srv.listen()\n\
         port = srv.getsockname()[1]\n\
         def serve():\n\
         \x20   c, _ = srv.accept()\n\
         \x20   c.sendall(b'hello ' + c.recv(16))\n\
         \x20   c.close()\n\
         threading.Thread(target=serve).start()\n\
         cl = socket.create_connection(('127.0.0.1', port), timeout=5)\n\
         cl.sendall(b'client')\n\
         print(cl.recv(64).decode())\n\
         u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n\
         u.bind(('127.0.0.1', 0))\n\
         socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'dgram', u.getsockname())\n\
         print(u.recv(16).decode())\n",
    );
    assert_eq!(result(&r)["stdout"], "hello client\ndgram\n", "{r:?}");
}

#[test]
fn daemon_sockets_are_unreachable_even_where_landlock_does_not_look() {
    let env = Env::new();
    // A listening unix socket outside every grant, like /run/docker.sock would be.
    let path = env.outside.join("daemon.sock");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    listener.set_nonblocking(true).unwrap();
    let r = python(
        &env,
        &format!(
            "import socket\n\
             try:\n\
             \x20   s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n\
             \x20   s.connect({:?})\n\
             \x20   print('ESCAPED')\n\
             except OSError as e:\n\
             \x20   print('refused', e.errno)\n\
             a, b = socket.socketpair()\n\
             a.send(b'pair'); print(b.recv(4).decode())\n",
            path.display().to_string()
        ),
    );
    let out = result(&r)["stdout"].as_str().unwrap().to_string();
    // EPERM (seccomp, without namespaces) or ENOENT (a root built from the grants).
    assert!((out.contains("refused 1") || out.contains("refused 2")) && !out.contains("ESCAPED"), "{out} {r:?}");
    assert!(out.contains("pair"), "socketpair should still work: {out} {r:?}");
    assert!(listener.accept().is_err(), "a connection reached the daemon socket");
}

/// With `net.connect = 127.0.0.1:GP` the call's one way out is warden's
/// proxy on 127.0.0.1:3128 inside its namespace: a direct connect reaches
/// only the call's own loopback (even for the granted port); through the
/// proxy GP is reached and another port refused with a 403 naming the grant.
#[test]
fn a_network_grant_opens_exactly_its_host_and_port_through_the_proxy() {
    let env = Env::new();
    let granted = TcpListener::bind("127.0.0.1:0").unwrap();
    let other = TcpListener::bind("127.0.0.1:0").unwrap();
    granted.set_nonblocking(true).unwrap();
    other.set_nonblocking(true).unwrap();
    let (gp, op) = (granted.local_addr().unwrap().port(), other.local_addr().unwrap().port());
    let text = std::fs::read_to_string(policy(&env, "", "timeout = \"10s\"")).unwrap()
        + &format!("net.connect = [\"127.0.0.1:{gp}\"]\n");
    // net.connect must sit inside [tools.shell]: append before any later table (there is none).
    let p = env.root.path().join("net.toml");
    std::fs::write(&p, text).unwrap();
    let p = p.display().to_string();
    std::fs::write(
        env.ws.join("probe.py"),
        "import socket, sys\n\
         def connect(port):\n\
         \x20   s = socket.create_connection(('127.0.0.1', 3128), timeout=5)\n\
         \x20   s.sendall(b'CONNECT 127.0.0.1:%d HTTP/1.1\\r\\nHost: 127.0.0.1:%d\\r\\n\\r\\n' % (port, port))\n\
         \x20   return s.recv(4096).decode('latin-1').replace('\\r\\n', ' ')\n\
         print('GRANTED', connect(int(sys.argv[1])))\n\
         print('OTHER', connect(int(sys.argv[2])))\n",
    )
    .unwrap();
    let r = shell_with(
        &env,
        &p,
        &format!(
            "echo a > /dev/tcp/127.0.0.1/{gp} && echo DIRECT-OK; echo b > /dev/tcp/127.0.0.1/{op} && echo OTHER-OK; \
             echo \"proxy=$HTTPS_PROXY\"; {PYTHON} probe.py {gp} {op}"
        ),
    );
    let out = result(&r)["stdout"].as_str().unwrap().to_string();
    assert!(!out.contains("DIRECT-OK") && !out.contains("OTHER-OK"), "a direct connect left the call: {r:?}");
    assert!(out.contains("proxy=http://127.0.0.1:3128\n"), "{r:?}");
    assert!(out.contains("GRANTED HTTP/1.1 200"), "the granted port through the proxy: {r:?}");
    assert!(out.contains("OTHER HTTP/1.1 403") && out.contains(&format!("127.0.0.1:{op}")), "{r:?}");
    assert!(util::within(Duration::from_secs(5), || granted.accept().is_ok()), "the proxy reached the granted port");
    assert!(granted.accept().is_err(), "only the proxy's connection arrived");
    assert!(other.accept().is_err());
}

/// UDP never leaves the call, whatever the grants: a grant by name no longer
/// opens UDP for the program's own DNS (the proxy resolves names).
#[test]
fn udp_never_leaves_the_call() {
    let env = Env::new();
    let listener = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let script = format!(
        "import socket\ntry:\n    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('127.0.0.1', {port}))\n    \
         print('UDP-SENT')\nexcept OSError as e:\n    print('UDP-REFUSED', e.errno)\n\
         try:\n    socket.getaddrinfo('example.com', 443)\n    print('RESOLVED')\nexcept OSError as e:\n    print('NO-LOOKUP')\n"
    );
    std::fs::write(env.ws.join("probe.py"), script).unwrap();
    for grant in ["127.0.0.1:9", "localhost:9", "example.com:443"] {
        let text = std::fs::read_to_string(policy(&env, "", "timeout = \"10s\"")).unwrap()
            + &format!("net.connect = [\"{grant}\"]\n");
        let p = env.root.path().join("udp.toml");
        std::fs::write(&p, text).unwrap();
        let r = shell_with(&env, &p.display().to_string(), &format!("{PYTHON} probe.py"));
        let out = result(&r)["stdout"].as_str().unwrap().to_string();
        assert!(out.contains("NO-LOOKUP"), "grant {grant}: a name was resolved inside the call: {r:?}");
        std::thread::sleep(Duration::from_millis(50));
        assert!(listener.recv_from(&mut [0u8; 16]).is_err(), "grant {grant}: a datagram arrived: {r:?}");
    }
}

#[test]
fn namespaces_mounts_ptrace_io_uring_chroot_and_tiocsti_are_refused() {
    let env = Env::new();
    let r = shell(&env, "unshare -U true && echo UNSHARED; mount -t tmpfs none /tmp && echo MOUNTED; echo done");
    let res = result(&r);
    let out = res["stdout"].as_str().unwrap();
    assert!(!out.contains("UNSHARED") && !out.contains("MOUNTED") && out.contains("done"), "{r:?}");
    let r = python(
        &env,
        "import ctypes, os, errno\n\
         libc = ctypes.CDLL(None, use_errno=True)\n\
         def sc(*a):\n\
         \x20   r = libc.syscall(*[ctypes.c_long(x) for x in a])\n\
         \x20   return 'ok' if r >= 0 else errno.errorcode[ctypes.get_errno()]\n\
         print('ptrace', sc(101, 16, os.getppid(), 0, 0))\n\
         print('io_uring_setup', sc(425, 8, 0))\n\
         print('chroot', sc(161, 0))\n\
         print('unshare', sc(272, 0x10000000))\n\
         print('clone_newuser', sc(56, 0x10000000 | 17, 0, 0, 0, 0))\n\
         print('bpf', sc(321, 0, 0, 0))\n\
         print('tiocsti', sc(16, 0, 0x5412, 0))\n\
         print('tiocsti_high', sc(16, 0, 0x5412 | (1 << 32), 0))\n\
         print('x32_getpid', sc(0x40000000 | 39))\n",
    );
    let out = result(&r)["stdout"].as_str().unwrap().to_string();
    for (call, want) in [
        ("ptrace", "EPERM"),
        ("io_uring_setup", "ENOSYS"),
        ("chroot", "EPERM"),
        ("unshare", "EPERM"),
        ("clone_newuser", "EPERM"),
        ("bpf", "EPERM"),
        ("tiocsti", "EPERM"),
        ("tiocsti_high", "EPERM"),
        ("x32_getpid", "EPERM"),
    ] {
        assert!(out.contains(&format!("{call} {want}\n")), "{call}: expected {want} in {out} {r:?}");
    }
}

/// A tool that reopens its own stdout for reading (`/proc/self/fd/1`) and,
/// from a child spinning on it, takes each byte it writes before warden can:
/// poll then tells warden the pipe is readable when it no longer is. A read
/// that blocked there would stop warden's loop, and with it the deadline (the
/// tool would run on unbounded). The race is lost or won per call, so five calls
/// make the attempt; each must end at its timeout.
#[test]
fn a_tool_taking_its_own_output_first_still_meets_its_timeout() {
    let env = Env::new();
    let p = policy(&env, "", "timeout = \"3s\"");
    let script = [
        "import os, time",
        "r = os.open('/proc/self/fd/1', os.O_RDONLY | os.O_NONBLOCK)",
        "if os.fork() == 0:",
        "    t = time.time()",
        "    while time.time() - t < 2.5:",
        "        try:",
        "            if os.read(r, 65536) and not os.path.exists('stolen.txt'):",
        "                open('stolen.txt', 'w').write('1')",
        "        except BlockingIOError:",
        "            pass",
        "    time.sleep(60)",
        "t = time.time()",
        "while time.time() - t < 2 and not os.path.exists('stolen.txt'):",
        "    os.write(1, b'x')",
        "    time.sleep(0.001)",
        "for i in range(100):",
        "    os.write(1, b'x')",
        "    time.sleep(0.001)",
        "time.sleep(60)",
    ];
    std::fs::write(env.ws.join("steal.py"), script.join("\n") + "\n").unwrap();
    for round in 0..5 {
        let _ = std::fs::remove_file(env.ws.join("stolen.txt"));
        let mut c = env.command(&[
            "--policy",
            &p,
            "call",
            "shell",
            &json!({"command": format!("{PYTHON} steal.py")}).to_string(),
        ]);
        let mut child = c.spawn().unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break Some(s);
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(status.is_some(), "round {round}: warden did not end the call 17 s past its 3 s timeout");
        let out = child.wait_with_output().unwrap();
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        assert_eq!(doc["error"]["code"], "TIMEOUT", "round {round}: {doc}");
        let stolen = env.ws.join("stolen.txt").exists();
        assert!(stolen, "round {round}: the attack was not made (nothing taken from the pipe): {doc}");
    }
}

/// As root the tool runs inside each of its call's cgroups (pids, and memory
/// where that is a hierarchy of its own), which the helper joined before it
/// made the tool; the record names the pids cgroup and whether memory had one.
#[test]
#[ignore = "needs root"]
fn as_root_the_tool_runs_inside_every_cgroup_of_its_call() {
    util::needs_root();
    let env = Env::new();
    let r = shell(&env, "cat /proc/self/cgroup");
    let out = result(&r)["stdout"].as_str().unwrap().to_string();
    let rec = env.audit_records().pop().unwrap();
    let sandbox = &rec["sandbox"];
    assert_eq!(sandbox["processes"], "pids-cgroup", "{rec}");
    let line = |controller: &str| {
        out.lines()
            .find(|l| l.split(':').nth(1).is_some_and(|c| c.split(',').any(|n| n == controller)))
            .map(str::to_string)
    };
    let unified = out.lines().all(|l| l.starts_with("0::"));
    let pids = if unified { out.lines().next().map(str::to_string) } else { line("pids") };
    let pids = pids.unwrap_or_default();
    let name = pids.rsplit('/').next().unwrap_or_default().to_string();
    assert!(name.starts_with("warden-"), "the tool is not in a call's pids cgroup: {out}");
    if sandbox["memory"] == "cgroup" && !unified {
        let memory = line("memory").unwrap_or_default();
        assert!(memory.ends_with(&format!("/{name}")), "the tool is not in the call's memory cgroup {name}: {out}");
    }
    // The call's cgroups are gone once it ended.
    assert!(
        !Path::new("/sys/fs/cgroup/pids").join(&name).exists() && !Path::new("/sys/fs/cgroup").join(&name).exists()
    );
}

#[test]
fn a_fork_bomb_is_contained_and_nothing_survives() {
    let env = Env::new();
    let p = policy(&env, "", "timeout = \"3s\", processes = 32");
    let marker = "forkbomb7c1e";
    let r = shell_with(&env, &p, &format!("{marker}() {{ {marker} | {marker} & }}; {marker}; sleep 30"));
    let code = r.error_code();
    assert!(code == "LIMIT_EXCEEDED" || code == "TIMEOUT", "{r:?}");
    let gone = util::within(Duration::from_secs(5), || survivors(marker).is_empty());
    assert!(gone, "survivors 5 s after the call: {:?}", survivors(marker));
}

#[test]
fn memory_cpu_and_wall_clock_limits_hold() {
    let env = Env::new();
    let p = policy(&env, "", "timeout = \"10s\", memory = \"256MiB\"");
    let r = shell_with(&env, &p, &format!("{PYTHON} -c 'a = bytearray(1 << 30)'"));
    let res = result(&r);
    assert_ne!(res["exit_code"], 0, "{r:?}");
    assert!(res["stderr"].as_str().unwrap().contains("MemoryError"), "{r:?}");

    let p = policy(&env, "", "timeout = \"10s\", cpu = \"1s\"");
    let r = shell_with(&env, &p, "while :; do :; done");
    assert_eq!(r.error_code(), "LIMIT_EXCEEDED", "{r:?}");
    assert_eq!(r.code, 4);

    let p = policy(&env, "", "timeout = \"1s\"");
    let r = shell_with(&env, &p, "sleep 1000.4242");
    assert_eq!(r.error_code(), "TIMEOUT", "{r:?}");
    assert!(r.json()["duration_ms"].as_f64().unwrap() < 5000.0, "{r:?}");
    assert_eq!(survivors("1000.4242"), Vec::<String>::new());
}

#[test]
fn daemons_do_not_outlive_their_call() {
    let env = Env::new();
    let r = shell(
        &env,
        "setsid sleep 1000.1111 & (sleep 1000.2222 &) ; nohup sleep 1000.3333 >/dev/null 2>&1 & disown; echo started",
    );
    assert_eq!(result(&r)["stdout"], "started\n", "{r:?}");
    for marker in ["1000.1111", "1000.2222", "1000.3333"] {
        let gone = util::within(Duration::from_secs(5), || survivors(marker).is_empty());
        assert!(gone, "{marker} survived 5 s after the call: {:?}", survivors(marker));
    }
}

#[test]
fn output_past_max_output_keeps_head_and_tail_and_the_program_runs_to_its_end() {
    // A test runner's verdict is at the end of its output; the
    // program is never killed for what it prints.
    let env = Env::new();
    let p = policy(&env, "", "timeout = \"30s\", max_output = \"64KiB\"");
    let r = shell_with(
        &env,
        &p,
        "echo FIRST-OUT; head -c 8000000 /dev/zero | tr '\\0' o; echo; echo LAST-OUT; \
         echo FIRST-ERR >&2; head -c 3000000 /dev/zero | tr '\\0' e >&2; echo LAST-ERR >&2; \
         echo ran-to-the-end > done.txt; exit 3",
    );
    let doc = r.json();
    assert_eq!(doc["status"], "success", "{r:?}");
    assert_eq!(doc["truncated"], true);
    let res = &doc["result"];
    assert_eq!(res["exit_code"], 3, "the program's own exit, not a kill: {res}");
    assert_eq!(std::fs::read_to_string(env.ws.join("done.txt")).unwrap(), "ran-to-the-end\n");
    let out = res["stdout"].as_str().unwrap();
    let err = res["stderr"].as_str().unwrap();
    assert!(out.starts_with("FIRST-OUT\no") && out.ends_with("o\nLAST-OUT\n"), "{}", &out[..200.min(out.len())]);
    assert!(err.starts_with("FIRST-ERR\ne") && err.ends_with("eLAST-ERR\n"));
    assert!(out.contains("…[truncated ") && out.contains(" bytes of stdout here (limits.max_output)"));
    // What was dropped is counted exactly.
    let kept = |text: &str| {
        let (head, rest) = text.split_once("\n…[truncated ").unwrap();
        let (_, tail) = rest.split_once("]…\n").unwrap();
        (head.len() + tail.len()) as u64
    };
    assert_eq!(res["dropped"]["stdout"].as_u64().unwrap(), 8_000_020 - kept(out), "{}", res["dropped"]);
    assert_eq!(res["dropped"]["stderr"].as_u64().unwrap(), 3_000_019 - kept(err), "{}", res["dropped"]);
    assert!(serde_json::to_vec(&doc["result"]).unwrap().len() <= 64 << 10);
}

#[test]
fn an_endless_flood_runs_to_its_timeout_without_deadlock() {
    let env = Env::new();
    let p = policy(&env, "", "timeout = \"2s\", max_output = \"64KiB\"");
    let r = shell_with(&env, &p, "yes");
    assert_eq!(r.error_code(), "TIMEOUT", "{r:?}");
}

#[test]
fn writing_past_file_size_is_refused() {
    let env = Env::new();
    let p = policy(&env, "", "timeout = \"10s\", file_size = \"1MiB\"");
    let r = shell_with(&env, &p, "dd if=/dev/zero of=big bs=1M count=8");
    let code = r.error_code();
    let refused = code == "LIMIT_EXCEEDED" || r.json()["result"]["exit_code"].as_i64().is_some_and(|c| c != 0);
    assert!(refused, "{r:?}");
    assert!(std::fs::metadata(env.ws.join("big")).map(|m| m.len()).unwrap_or(0) <= 1 << 20);
}

#[test]
fn git_tools_work_and_arguments_are_never_commands() {
    let env = Env::new();
    let git = |args: &[&str]| {
        let s = std::process::Command::new("git").args(args).current_dir(&env.ws).output().unwrap();
        assert!(s.status.success(), "{s:?}");
    };
    git(&["init", "-q"]);
    env.write("a.txt", "one\n");
    git(&["add", "a.txt"]);
    git(&["-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "first commit"]);
    env.write("a.txt", "one\ntwo\n");
    let r = env.call(&[], "git_status", "{}");
    assert!(result(&r)["stdout"].as_str().unwrap().contains(" M a.txt"), "{r:?}");
    let r = env.call(&[], "git_log", "{}");
    assert!(result(&r)["stdout"].as_str().unwrap().contains("first commit"), "{r:?}");
    let r = env.call(&[], "git_diff", r#"{"path":"a.txt"}"#);
    assert!(result(&r)["stdout"].as_str().unwrap().contains("+two"), "{r:?}");
    let r = env.call(&[], "git_diff", r#"{"path":"; rm -rf / ; touch pwned"}"#);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(!env.ws.join("pwned").exists());
    assert!(env.ws.join("a.txt").exists());
    let r = env.call(&[], "git_diff", "{}");
    assert_eq!(r.error_code(), "INVALID_ARGS", "{r:?}");
}

#[test]
fn shell_rules_auto_only_simple_commands_and_deny_rm_rf_root() {
    let env = Env::new();
    env.write("f.txt", "content\n");
    let r = env.call(&[], "shell", r#"{"command":"cat f.txt"}"#);
    assert_eq!(result(&r)["stdout"], "content\n", "{r:?}");
    let r = env.call(&[], "shell", r#"{"command":"cat f.txt; touch pwned"}"#);
    assert_eq!(r.error_code(), "APPROVAL_REQUIRED", "{r:?}");
    let r = env.call(&[], "shell", r#"{"command":"cat f.txt $(touch pwned)"}"#);
    assert_eq!(r.error_code(), "APPROVAL_REQUIRED", "{r:?}");
    assert!(!env.ws.join("pwned").exists());
    let r = env.call(&["--approve", "yes"], "shell", r#"{"command":"rm -rf /"}"#);
    assert_eq!((r.code, r.error_code().as_str()), (3, "DENIED"), "{r:?}");
    assert!(r.stdout.contains("recursive delete of the root"));
}

#[test]
fn a_missing_program_is_reported_not_run() {
    let env = Env::new();
    let path = env.root.path().join("p.toml");
    std::fs::write(&path, "version = 1\n[tools.nope]\nexec = [\"/usr/bin/definitely-not-here\"]\ntier = \"auto\"\n")
        .unwrap();
    let r = env.run(&["--policy", path.to_str().unwrap(), "call", "nope", "{}"]);
    assert_eq!((r.code, r.error_code().as_str()), (5, "SANDBOX_UNAVAILABLE"), "{r:?}");
    assert!(r.stdout.contains("definitely-not-here"));
}

#[test]
fn best_effort_results_say_what_was_enforced() {
    let env = Env::new();
    let text = std::fs::read_to_string(policy(&env, "", "timeout = \"10s\"")).unwrap().replacen(
        "version = 1\n",
        "version = 1\n[sandbox]\nmode = \"best-effort\"\n",
        1,
    );
    let p = env.root.path().join("be.toml");
    std::fs::write(&p, text).unwrap();
    let r = shell_with(&env, p.to_str().unwrap(), "true");
    let res = result(&r);
    assert!(res["sandbox"]["landlock_abi"].as_u64().unwrap() >= 4, "{r:?}");
    assert_eq!(res["sandbox"]["seccomp"], true);
}

#[test]
fn the_environment_is_only_what_the_policy_passes_and_sets() {
    let env = Env::new();
    let r = shell(&env, "env | cut -d= -f1 | sort | tr '\\n' ' '");
    let out = result(&r)["stdout"].as_str().unwrap().to_string();
    let names: Vec<&str> = out.split_whitespace().collect();
    // bash adds PWD, SHLVL and _ itself; warden points the temporary and cache
    // variables at the call's {tmp}, names the progress pipe, and lets git look
    // past the workspace's layer for its repository, and points programs at its
    // egress proxy (in a network namespace it listens in every call, and with no
    // net.connect grant refuses every destination); everything else comes from
    // the policy.
    let expected = [
        "HOME",
        "PATH",
        "PWD",
        "SHLVL",
        "_",
        "TMPDIR",
        "TMP",
        "TEMP",
        "PYTHONPYCACHEPREFIX",
        "PYTEST_ADDOPTS",
        "WARDEN_PROGRESS_FD",
        "GIT_DISCOVERY_ACROSS_FILESYSTEM",
        "HTTP_PROXY",
        "http_proxy",
        "HTTPS_PROXY",
        "https_proxy",
        "ALL_PROXY",
        "all_proxy",
        "npm_config_proxy",
        "npm_config_https_proxy",
        "YARN_HTTP_PROXY",
        "YARN_HTTPS_PROXY",
        "PIP_PROXY",
        "CARGO_HTTP_PROXY",
        "GLOBAL_AGENT_HTTP_PROXY",
        "NODE_USE_ENV_PROXY",
        "NO_PROXY",
        "no_proxy",
        "npm_config_noproxy",
    ];
    let unexpected: Vec<&&str> = names.iter().filter(|n| !expected.contains(n)).collect();
    assert!(unexpected.is_empty(), "leaked variables: {unexpected:?} ({r:?})");
    let r = shell(&env, "echo $HOME; test -d $HOME && touch $HOME/t && echo TMP-WRITABLE");
    let out = result(&r)["stdout"].as_str().unwrap().to_string();
    assert!(out.contains("/warden-") && out.contains("TMP-WRITABLE"), "{r:?}");
    let tmp = out.lines().next().unwrap().to_string();
    assert!(!Path::new(&tmp).exists(), "{{tmp}} {tmp} outlived its call");
    let r = shell(&env, "echo $TMPDIR $TMP $TEMP; echo $PYTHONPYCACHEPREFIX; echo $PYTEST_ADDOPTS; echo $HOME");
    let out = result(&r)["stdout"].as_str().unwrap().to_string();
    let lines: Vec<&str> = out.lines().collect();
    let tmp = lines.get(3).copied().unwrap_or_default();
    assert_eq!(lines.first().copied(), Some(format!("{tmp} {tmp} {tmp}").as_str()), "{r:?}");
    assert_eq!(lines.get(1).copied(), Some(format!("{tmp}/pycache").as_str()), "{r:?}");
    assert_eq!(lines.get(2).copied(), Some(format!("-o cache_dir={tmp}/pytest-cache").as_str()), "{r:?}");
}

#[test]
#[ignore = "needs root"]
fn as_root_the_tool_runs_as_the_workspace_owner() {
    util::needs_root();
    let env = Env::new();
    std::os::unix::fs::chown(&env.ws, Some(65534), Some(65534)).unwrap();
    let r = shell(&env, "id -u; id -g; touch mine && stat -c %u mine; touch $HOME/t && echo TMP-OK");
    assert_eq!(result(&r)["stdout"], "65534\n65534\n65534\nTMP-OK\n", "{r:?}");
}

/// As root `{tmp}` is a tmpfs of `limits.tmp_size` bytes with the granted
/// directories under it, private to the call: the host's directory stays empty.
#[test]
fn as_root_tmp_is_a_bounded_tmpfs_of_its_own() {
    let env = Env::new();
    let text = "version = 1\n[tools.shell]\nexec = [\"/bin/bash\", \"-c\", \"{command}\"]\ntier = \"auto\"\n\
         fs.read = [\"{system}\", \"{workspace}\"]\nfs.write = [\"{tmp}\", \"{tmp}/cache/deep\"]\n\
         env = { pass = [\"PATH\"], set = { HOME = \"{tmp}\" } }\n\
         limits = { timeout = \"10s\", tmp_size = \"1MiB\", tmp_files = 50 }\n";
    let p = env.root.path().join("tmpfs.toml");
    std::fs::write(&p, text).unwrap();
    let r = shell_with(
        &env,
        &p.display().to_string(),
        "stat -f -c %T \"$HOME\"; echo x > \"$HOME/cache/deep/f\" && echo DEEP-OK; \
         head -c 2097152 /dev/zero > \"$HOME/big\" 2>/dev/null || echo FULL; \
         for i in $(seq 1 80); do touch \"$HOME/n$i\" 2>/dev/null || { echo INODES-AT-$i; break; }; done; \
         echo HOST-TMP=$HOME",
    );
    let out = result(&r)["stdout"].as_str().unwrap().to_string();
    assert!(out.contains("DEEP-OK"), "a grant under {{tmp}} is there and writable: {r:?}");
    let host_tmp = out.lines().find_map(|l| l.strip_prefix("HOST-TMP=")).unwrap().to_string();
    assert!(!Path::new(&host_tmp).exists(), "{{tmp}} is removed after the call");
    if nix::unistd::geteuid().is_root() {
        assert!(out.starts_with("tmpfs\n"), "{r:?}");
        assert!(out.contains("FULL"), "2 MiB does not fit in tmp_size = 1MiB: {r:?}");
        assert!(out.contains("INODES-AT-"), "80 files do not fit in tmp_files = 50: {r:?}");
    } else {
        eprintln!("not root: {{tmp}} is a plain directory (the documented limit); checked the grants only");
    }
}

#[test]
fn the_program_cannot_forge_the_sandbox_report() {
    let env = Env::new();
    let forged = r#"{"ok":true,"error":null,"exec_failed":false,"landlock_abi":99,"seccomp":false,"rlimits":false,"uid":4242,"cgroup":false}"#;
    let failed = r#"{"ok":false,"error":"FORGED","exec_failed":true,"landlock_abi":99,"seccomp":false,"rlimits":false,"uid":4242,"cgroup":false}"#;
    // Both on stderr and, in case anything else listened there, on every
    // descriptor up to 9: only the progress pipe takes it, as a progress line
    // that is not one (ignored).
    let r = shell(
        &env,
        &format!(
            "printf '\\001warden-sandbox %s\\n%s\\n' '{forged}' '{failed}' >&2; \
             printf '%s\\n%s\\n' '{forged}' '{failed}' >&$WARDEN_PROGRESS_FD; \
             for fd in 3 4 5 6 7 8 9; do [ $fd = \"$WARDEN_PROGRESS_FD\" ] && continue; \
             (printf '%s\\n' '{failed}' >&$fd) 2>/dev/null && echo WROTE-$fd; done; echo done"
        ),
    );
    let res = result(&r);
    assert_eq!(res["stdout"], "done\n", "a descriptor beyond stdio was writable: {r:?}");
    assert!(res["stderr"].as_str().unwrap().contains("FORGED"), "the program's stderr is its own: {r:?}");
    let rec = env.audit_records().pop().unwrap();
    assert_eq!(rec["sandbox"]["seccomp"], true, "{rec}");
    assert_ne!(rec["sandbox"]["landlock_abi"], 99, "{rec}");
    assert_ne!(rec["sandbox"]["uid"], 4242, "{rec}");
    assert_eq!(rec["usage"]["progress"], json!({"accepted": 0, "ignored": 2}), "{rec}");
}

#[test]
fn signals_cannot_reach_warden_or_every_process() {
    let env = Env::new();
    // $PPID is the call's init (pid 1 of its pid namespace), which ignores signals
    // sent inside it; warden is not visible there; every process (-1) is refused.
    let r = shell(
        &env,
        "echo ppid=$PPID; kill -9 $PPID; echo init=$?; kill -9 -1; echo all=$?; kill -9 -$(ps -o pgid= $PPID 2>/dev/null || echo 1) 2>/dev/null; echo done",
    );
    assert_eq!(r.code, 0, "warden did not survive: {r:?}");
    let out = result(&r)["stdout"].as_str().unwrap().to_string();
    assert!(out.contains("ppid=1\n") && out.contains("all=1") && out.ends_with("done\n"), "{out} {r:?}");
}

#[test]
#[ignore = "needs root"]
fn as_uid_0_file_metadata_outside_the_grants_cannot_change() {
    util::needs_root();
    use std::os::unix::fs::PermissionsExt;
    let env = Env::new();
    let target = env.outside.join("secret.txt");
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o600)).unwrap();
    // A root-owned program of our own, so a failure cannot damage the system's.
    let program = env.outside.join("program");
    std::fs::copy("/bin/true", &program).unwrap();
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
    let t = target.display();
    let prog = program.display();
    let r = shell(
        &env,
        &format!(
            "id -u; chmod 666 {t}; echo chmod=$?; chmod u+s {prog} 2>/dev/null; echo setuid=$?; \
             chown 65534 {t}; echo chown=$?; {PYTHON} -c \"import os; os.setxattr('{t}', 'user.x', b'1')\" 2>/dev/null; echo xattr=$?"
        ),
    );
    let out = result(&r)["stdout"].as_str().unwrap().to_string();
    assert!(out.starts_with("0\n"), "the tool should run as uid 0 here: {out}");
    for want in ["chmod=1", "setuid=1", "chown=1", "xattr=1"] {
        assert!(out.contains(want), "missing {want} in {out} {r:?}");
    }
    let meta = std::fs::metadata(&target).unwrap();
    assert_eq!(meta.permissions().mode() & 0o7777, 0o600);
    assert_eq!(std::os::unix::fs::MetadataExt::uid(&meta), 0);
    assert_eq!(std::fs::metadata(&program).unwrap().permissions().mode() & 0o7777, 0o755, "{prog} became setuid");
}

#[test]
fn a_warden_binary_without_warden_sandbox_beside_it_is_its_own_helper() {
    let env = Env::new();
    let p = policy(&env, "", "timeout = \"10s\"");
    let alone = env.root.path().join("bin");
    std::fs::create_dir_all(&alone).unwrap();
    let copy = alone.join("warden");
    std::fs::copy(env!("CARGO_BIN_EXE_warden"), &copy).unwrap();
    let out = std::process::Command::new(&copy)
        .current_dir(&env.ws)
        .arg("--audit-log")
        .arg(env.root.path().join("alone.jsonl"))
        .args(["--policy", &p, "call", "shell", r#"{"command":"echo ok"}"#])
        .env("HOME", env.root.path())
        .env("PATH", util::PATH)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text} {}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains(r#""stdout":"ok\n""#), "{text}");
}

/// The executor's cancel switch (what MCP `notifications/cancelled` turns on)
/// kills the whole process tree, daemonised children included, and the call is
/// recorded as cancelled.
#[test]
fn a_cancelled_call_leaves_no_process_behind() {
    use warden::approval::{ApproveMode, Approver};
    use warden::executor::CallHooks;
    use warden::policy::Context;
    use warden::runtime::Cancel;

    let env = Env::new();
    // In this process warden passes the test's own PATH: the system's is set instead (tests/util).
    let text = std::fs::read_to_string(policy(&env, "", "timeout = \"60s\"")).unwrap();
    let text = text.replace("pass = [\"PATH\"], set = {", &format!("set = {{ PATH = {:?},", util::PATH));
    let path = env.root.path().join("policy.toml");
    std::fs::write(&path, text).unwrap();
    let ctx = Context { workspace: env.ws.clone(), home: env.root.path().into(), cache: env.root.path().into() };
    let policy = warden::Policy::load(Path::new(&path), &ctx).unwrap();
    std::fs::create_dir_all(env.log.parent().unwrap()).unwrap();
    let log = warden::audit::AuditLog::open(&env.log).unwrap();
    let options = warden::Options {
        cache_dir: None,
        sandbox_helper: Some(std::path::Path::new(env!("CARGO_BIN_EXE_warden")).with_file_name("warden-sandbox")),
    };
    let exec = warden::Executor::new(policy, Approver::new(ApproveMode::Deny), log, options).unwrap();
    let marker = "cancelmark-5e1d";
    let hooks = CallHooks { cancel: Cancel::new(), ..CallHooks::default() };
    let switch = hooks.cancel.clone();
    let ws = env.ws.clone();
    let watcher = std::thread::spawn(move || {
        // Cancel once both the daemonised child and the shell are running.
        for _ in 0..400 {
            if std::fs::read_to_string(ws.join("started")).is_ok_and(|s| s.lines().count() == 2) {
                break;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        let before = survivors("cancelmark-5e1d").len();
        switch.cancel();
        before
    });
    let command =
        format!("(exec -a {marker} sleep 300 &); echo a > started; echo b >> started; exec -a {marker} sleep 300");
    let r = exec.call_with(warden::ToolCall::new("shell", json!({ "command": command })), &hooks);
    let before = watcher.join().unwrap();
    assert!(before >= 2, "the sleeps were not running before the cancel ({before})");
    assert_eq!(r.status, warden::Status::Cancelled, "{r:?}");
    assert_eq!(r.error.as_ref().map(|e| e.code.as_str()), Some("CANCELLED"));
    assert_eq!(r.to_json()["status"], "cancelled");
    assert!(survivors(marker).is_empty(), "survivors: {:?}", survivors(marker));
    let last = std::fs::read_to_string(&env.log).unwrap();
    let last: Value = serde_json::from_str(last.lines().last().unwrap()).unwrap();
    assert_eq!((last["status"].as_str(), last["error_code"].as_str()), (Some("cancelled"), Some("CANCELLED")));
}

/// A policy whose shell tool has `fs.deny_write` and `fs.deny_read` entries
/// inside its grants, and `{system}`.
fn masked_policy(env: &Env) -> String {
    let text = "version = 1\n[tools.shell]\nexec = [\"/bin/bash\", \"-c\", \"{command}\"]\ntier = \"auto\"\n\
         fs.read = [\"{system}\", \"{workspace}\"]\nfs.write = [\"{workspace}\", \"{tmp}\"]\n\
         fs.deny_write = [\"{workspace}/vendor/lib\", \"{workspace}/vendor/pinned.txt\"]\n\
         fs.deny_read = [\"{workspace}/secrets\", \"{workspace}/conf/key.pem\"]\n\
         env = { pass = [\"PATH\"], set = { HOME = \"{tmp}\" } }\nlimits = { timeout = \"10s\" }\n";
    let path = env.root.path().join("masked.toml");
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

/// Protected and denied paths are enforced by mounts in the call's own mount
/// namespace, as root and as an ordinary user (through a user namespace).
#[test]
fn deny_write_and_deny_read_hold_by_mounts_in_the_calls_namespace() {
    let env = Env::new();
    for d in ["vendor/lib", "secrets", "conf"] {
        std::fs::create_dir_all(env.ws.join(d)).unwrap();
    }
    std::fs::write(env.ws.join("vendor/lib/a.txt"), "A").unwrap();
    std::fs::write(env.ws.join("vendor/pinned.txt"), "P").unwrap();
    std::fs::write(env.ws.join("secrets/token"), "TOKEN-4242").unwrap();
    std::fs::write(env.ws.join("conf/key.pem"), "PEM-4242").unwrap();
    std::os::unix::fs::symlink("secrets/token", env.ws.join("link")).unwrap();
    let p = masked_policy(&env);
    let r = shell_with(
        &env,
        &p,
        "echo x > vendor/lib/a.txt || echo W-LIB; echo x > vendor/pinned.txt || echo W-FILE; \
         touch vendor/lib/new || echo CREATE-LIB; mv vendor v2 || echo MV-PARENT; rm -rf vendor/lib || echo RM-LIB; \
         touch vendor/beside && echo BESIDE-OK; cat vendor/lib/a.txt; echo; \
         cat secrets/token || echo R-DIR; ls secrets || echo LS-DIR; cat link || echo R-LINK; \
         cat conf/../secrets/token || echo R-DOTDOT; cat conf/key.pem || echo R-FILE; \
         mv secrets s2 || echo MV-MASK; false",
    );
    let res = result(&r);
    let out = res["stdout"].as_str().unwrap();
    for want in [
        "W-LIB",
        "W-FILE",
        "CREATE-LIB",
        "MV-PARENT",
        "RM-LIB",
        "BESIDE-OK",
        "R-DIR",
        "LS-DIR",
        "R-LINK",
        "R-DOTDOT",
        "R-FILE",
        "MV-MASK",
    ] {
        assert!(out.contains(want), "{want} missing: {r:?}");
    }
    assert!(out.contains("A\n"), "a read-only path stays readable: {r:?}");
    assert!(!out.contains("4242"), "a denied path was read: {r:?}");
    let err = res["stderr"].as_str().unwrap();
    assert!(err.contains("Read-only file system") && err.contains("Device or resource busy"), "{r:?}");
    assert!(res["protected"].as_str().unwrap().contains("vendor/lib"), "the model is told why: {r:?}");
    assert_eq!(std::fs::read_to_string(env.ws.join("vendor/lib/a.txt")).unwrap(), "A");
    assert_eq!(std::fs::read_to_string(env.ws.join("vendor/pinned.txt")).unwrap(), "P");
    assert!(env.ws.join("vendor/beside").exists() && env.ws.join("secrets/token").exists());
    let rec = env.audit_records().pop().unwrap();
    assert_eq!(rec["sandbox"]["paths"], "mount-namespace", "{rec}");
    assert_eq!(rec["sandbox"]["proc"], "private", "{rec}");
    let ns: Vec<&str> = rec["sandbox"]["namespaces"].as_array().unwrap().iter().filter_map(|v| v.as_str()).collect();
    let want: &[&str] = if nix::unistd::geteuid().is_root() {
        &["mount", "pid", "ipc", "net"]
    } else {
        &["user", "mount", "pid", "ipc", "net"]
    };
    assert_eq!(ns, want, "{rec}");
}

/// `warden ARGS` with `WARDEN_NAMESPACES=off`.
fn without_namespaces(env: &Env, args: &[&str]) -> Run {
    let mut c = env.command(args);
    c.env("WARDEN_NAMESPACES", "off");
    util::run_to_end(c, None)
}

/// With `WARDEN_NAMESPACES=off` a call with protected paths is refused in
/// enforce mode (naming the paths and what to do), and runs unmasked in
/// best-effort mode, saying so.
#[test]
fn without_namespaces_protected_paths_refuse_the_call_in_enforce_mode() {
    let env = Env::new();
    std::fs::create_dir_all(env.ws.join("vendor/lib")).unwrap();
    std::fs::write(env.ws.join("vendor/pinned.txt"), "P").unwrap();
    std::fs::create_dir_all(env.ws.join("secrets")).unwrap();
    std::fs::create_dir_all(env.ws.join("conf")).unwrap();
    std::fs::write(env.ws.join("conf/key.pem"), "PEM").unwrap();
    let p = masked_policy(&env);
    let r = without_namespaces(&env, &["--policy", &p, "call", "shell", &json!({"command": "echo RAN"}).to_string()]);
    assert_eq!(r.error_code(), "SANDBOX_UNAVAILABLE", "{r:?}");
    let msg = r.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(msg.contains("vendor/lib") && msg.contains("WARDEN_NAMESPACES") && msg.contains("best-effort"), "{msg}");

    let text = std::fs::read_to_string(&p)
        .unwrap()
        .replace("version = 1\n", "version = 1\n[sandbox]\nmode = \"best-effort\"\n");
    std::fs::write(&p, text).unwrap();
    let r = without_namespaces(
        &env,
        &["--policy", &p, "call", "shell", &json!({"command": "echo $$; echo RAN"}).to_string()],
    );
    let res = result(&r);
    assert!(res["stdout"].as_str().unwrap().ends_with("RAN\n"), "{r:?}");
    assert_ne!(res["stdout"].as_str().unwrap(), "1\nRAN\n", "no pid namespace with WARDEN_NAMESPACES=off: {r:?}");
    assert_eq!(res["sandbox"]["paths"], "none", "{r:?}");
    assert_eq!(res["sandbox"]["proc"], "host", "{r:?}");
}

/// `/proc` is the call's own pid namespace's (with `{system}`), `/dev/shm` a
/// private tmpfs; the tool is the child of the call's init (pid 1) and its end
/// is the call's: a signal it sends itself ends it.
#[test]
fn proc_and_dev_shm_are_the_calls_own() {
    let env = Env::new();
    let marker = format!("warden-shm-{}", std::process::id());
    let host_shm = Path::new("/dev/shm").join(&marker);
    let r = shell(
        &env,
        &format!(
            "echo pid=$$; echo procs=$(ls /proc | grep -c '^[0-9]'); grep -c ^Name: /proc/self/status; \
             echo data > /dev/shm/{marker} && echo SHM-OK; ls /dev/shm | wc -l; \
             stat -f -c %T /dev/shm; cat /proc/sys/kernel/ostype; echo 1 > /proc/sys/kernel/ostype || echo SYS-RO"
        ),
    );
    let out = result(&r)["stdout"].as_str().unwrap().to_string();
    assert!(out.contains("pid=2\n"), "the tool is the init's first child: {r:?}");
    let procs: u32 = out.lines().find_map(|l| l.strip_prefix("procs=")).unwrap().parse().unwrap();
    assert!(procs <= 5, "only the call's processes are in /proc: {r:?}");
    assert!(out.contains("SHM-OK\n1\ntmpfs\nLinux\n") && out.contains("SYS-RO"), "{r:?}");
    assert!(!host_shm.exists(), "the call's /dev/shm is private");
    // A signal ends the call as it ended the tool: a real fault, and one it sends itself.
    let r = shell(&env, &format!("exec {PYTHON} -c 'import ctypes; ctypes.string_at(0)'"));
    assert_eq!(result(&r)["signal"], "SIGSEGV", "{r:?}");
    let r = shell(&env, &format!("exec {PYTHON} -c 'import os, signal; os.kill(os.getpid(), signal.SIGABRT)'"));
    assert_eq!(result(&r)["signal"], "SIGABRT", "{r:?}");
    let r = shell(&env, &format!("{PYTHON} -c 'import os; os.abort()'; echo status=$?"));
    assert!(result(&r)["stdout"].as_str().unwrap().contains("status=134"), "{r:?}");
    let r = shell(&env, "exit 7");
    assert_eq!(result(&r)["exit_code"], 7, "{r:?}");
}

/// A server starts on the first call of one of its tools, not for a
/// call of another tool; `list` starts it; a server that cannot start says how
/// it ended (exit status, the end of its stderr) and where it is declared.
#[test]
fn servers_start_on_first_use_and_say_why_they_cannot() {
    let env = Env::new();
    let mark = env.ws.join("starts.log");
    let text = format!(
        "version = 1\n[tools.shell]\nexec = [\"/bin/sh\", \"-c\", \"{{command}}\"]\ntier = \"auto\"\n\
         fs.read = [\"{{system}}\"]\nlimits = {{ timeout = \"10s\" }}\n\n\
         [servers.probe]\nexec = [\"/bin/sh\", \"-c\", \"echo started >> \\\"$MARK\\\"; echo 'no such module: mcp' >&2; exit 3\"]\n\
         tier = \"auto\"\nfs.read = [\"{{system}}\"]\nfs.write = [\"{{workspace}}\"]\nenv.set = {{ MARK = \"{}\" }}\n",
        mark.display()
    );
    let policy = env.root.path().join("policy.toml");
    std::fs::write(&policy, text).unwrap();
    let p = policy.to_str().unwrap();
    let r = env.run(&["--policy", p, "call", "shell", r#"{"command":"echo hi"}"#]);
    assert_eq!(result(&r)["stdout"], "hi\n", "{r:?}");
    assert!(!mark.exists(), "a call of another tool started the server: {r:?}");
    assert!(!r.stderr.contains("could not start") && !r.stderr.contains("unavailable"), "{}", r.stderr);

    let r = env.run(&["--policy", p, "call", "probe__anything", "{}"]);
    assert!(mark.exists(), "a call of its tool starts it: {r:?}");
    let msg = r.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(msg.contains("server probe") && msg.contains("could not start"), "{msg}");
    assert!(msg.contains("exit status: 3") && msg.contains("no such module: mcp"), "{msg}");
    assert!(msg.contains("policy.toml"), "names where it is declared: {msg}");

    std::fs::remove_file(&mark).unwrap();
    let r = env.run(&["--policy", p, "list"]);
    assert!(mark.exists(), "list starts every server: {r:?}");
    assert!(r.stdout.contains("probe__*") && r.stdout.contains("UNAVAILABLE"), "{}", r.stdout);
}

/// As root, a tool runs as the workspace's owner; a program under a
/// root-only directory (a root-owned checkout or home) fails to start, and the
/// error says so rather than pointing at fs.read, which grants it.
#[test]
#[ignore = "needs root"]
fn a_program_the_workspace_owner_cannot_reach_is_named() {
    util::needs_root();
    use std::os::unix::fs::PermissionsExt;
    let env = Env::new();
    std::fs::set_permissions(env.root.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let private = env.root.path().join("checkout");
    std::fs::create_dir_all(private.join("bin")).unwrap();
    std::fs::copy("/bin/true", private.join("bin/tool")).unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
    let out = std::process::Command::new("chown").args(["-R", "65534:65534"]).arg(&env.ws).output().unwrap();
    assert!(out.status.success());
    let text = format!(
        "version = 1\n[tools.run]\nexec = [\"{}\"]\ntier = \"auto\"\nfs.read = [\"{{system}}\", \"{{workspace}}\", \"{}\"]\n",
        private.join("bin/tool").display(),
        private.display()
    );
    let policy = env.root.path().join("policy.toml");
    std::fs::write(&policy, text).unwrap();
    let r = env.run(&["--policy", policy.to_str().unwrap(), "call", "run", "{}"]);
    let msg = r.json()["error"]["message"].as_str().unwrap_or_default().to_string();
    assert!(msg.contains("uid 65534") && msg.contains("the workspace's owner"), "{r:?}");
    assert!(msg.contains(&private.display().to_string()) && msg.contains("may not pass"), "{msg}");
}

// ---- WARDEN_PROGRESS_FD: a process tool's own progress ----

/// `warden call --stream shell COMMAND` under the one-tool policy with `limits`.
fn streamed(env: &Env, limits: &str, command: &str) -> Run {
    let p = policy(env, "", limits);
    env.run(&["--policy", &p, "call", "--stream", "shell", &json!({ "command": command }).to_string()])
}

/// The progress lines `--stream` showed.
fn progress_lines(r: &Run) -> Vec<String> {
    r.stderr.lines().filter(|l| l.starts_with("[shell] progress")).map(str::to_string).collect()
}

/// The call's progress counts in its audit record.
fn progress_counts(env: &Env) -> Value {
    env.audit_records().pop().unwrap()["usage"]["progress"].clone()
}

#[test]
fn a_process_tool_reports_progress_on_its_descriptor() {
    let env = Env::new();
    let r = streamed(
        &env,
        "timeout = \"20s\"",
        r#"for i in 1 2 3; do echo "{\"progress\": $i, \"total\": 3, \"message\": \"step $i\"}" >&"$WARDEN_PROGRESS_FD"; sleep 0.1; done; echo ok"#,
    );
    assert_eq!(result(&r)["stdout"], "ok\n", "{r:?}");
    assert_eq!(
        progress_lines(&r),
        ["[shell] progress 1/3: step 1", "[shell] progress 2/3: step 2", "[shell] progress 3/3: step 3"],
        "{r:?}"
    );
    assert_eq!(progress_counts(&env), json!({"accepted": 3, "ignored": 0}));
}

/// On a terminal (`script` gives warden one), progress is one line updated in
/// place, with the share done, lifted out of the way of streamed output and
/// erased before the result is printed.
#[test]
fn on_a_terminal_progress_is_one_line_updated_in_place() {
    assert!(
        Command::new("script").arg("--version").output().is_ok(),
        "needs `script` (util-linux) to give warden a terminal: install util-linux"
    );
    let env = Env::new();
    let p = policy(&env, "", "timeout = \"20s\"");
    let command = r#"for i in 1 2 3; do echo "{\"progress\": $i, \"total\": 4, \"message\": \"step $i\"}" >&"$WARDEN_PROGRESS_FD"; echo "out $i" >&2; sleep 0.1; done"#;
    let cmd = env.command(&["--policy", &p, "call", "--stream", "shell", &json!({ "command": command }).to_string()]);
    // The same command, as one shell line for `script -c`.
    let line: Vec<String> = std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|a| format!("'{}'", a.to_string_lossy().replace('\'', r"'\''")))
        .collect();
    let mut script = Command::new("script");
    script.args(["-qec", &line.join(" "), "/dev/null"]).current_dir(env.ws.as_path());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => script.env(k, v),
            None => script.env_remove(k),
        };
    }
    script.env("TERM", "xterm");
    let out = script.output().unwrap();
    let screen = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{screen}");
    assert!(screen.contains("\r\x1b[K[shell] progress 3/4 (75%): step 3"), "{screen:?}");
    // The program's output is not glued to a progress line: each starts after an erase.
    assert!(screen.contains("\r\x1b[Kout 3"), "{screen:?}");
    // Erased before the result: the JSON document starts a clean line.
    assert!(screen.contains("\r\x1b[K{\"status\":\"success\""), "{screen:?}");
    // Not one plain progress line (those are for logs).
    assert!(!screen.contains("progress 1/4: step 1\r\n"), "{screen:?}");
}

#[test]
fn the_progress_descriptor_is_a_pipes_write_end_and_the_only_one_kept() {
    let env = Env::new();
    let r = python(
        &env,
        r#"
import errno, fcntl, os, stat
fd = int(os.environ["WARDEN_PROGRESS_FD"])
st = os.fstat(fd)
print("fifo", stat.S_ISFIFO(st.st_mode))
print("write-only", fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_WRONLY)
try:
    os.read(fd, 1)
    print("readable")
except OSError as e:
    print("read", errno.errorcode[e.errno])
# Every descriptor the program holds, but the one listdir itself opens.
held = sorted(int(n) for n in os.listdir("/proc/self/fd") if os.path.exists(f"/proc/self/fd/{n}") and not os.path.isdir(f"/proc/self/fd/{n}"))
print("held", held == [0, 1, 2, fd], held, fd)
"#,
    );
    let out = result(&r)["stdout"].as_str().unwrap().to_string();
    for want in ["fifo True", "write-only True", "read EBADF", "held True"] {
        assert!(out.contains(want), "{want}: {out}");
    }
}

#[test]
fn bad_progress_reports_are_ignored_and_counted_never_fatal() {
    let env = Env::new();
    let long = "x".repeat(5000);
    let command = format!(
        r#"w() {{ printf '%s\n' "$1" >&"$WARDEN_PROGRESS_FD"; sleep 0.06; }}
w '{{"progress": 1, "total": 10}}'
w '{{"progress": 2, "message": "{long}"}}'
w 'not json'
w '{{"progress": NaN}}'
w '{{"progress": -4}}'
w '{{"progress": 1e300}}'
w '{{"progress": 9007199254740993}}'
w '{{"progress": 3, "total": -1}}'
w '{{"progress": 1, "message": "going back"}}'
w '{{"progress": 4, "total": 10, "message": "last"}}'
echo ok"#
    );
    let r = streamed(&env, "timeout = \"20s\"", &command);
    assert_eq!(result(&r)["exit_code"], 0, "{r:?}");
    assert_eq!(progress_lines(&r), ["[shell] progress 1/10", "[shell] progress 4/10: last"], "{r:?}");
    assert_eq!(progress_counts(&env), json!({"accepted": 2, "ignored": 8}));
}

#[test]
fn terminal_escapes_in_a_progress_message_never_reach_the_terminal() {
    let env = Env::new();
    let r = streamed(
        &env,
        "timeout = \"20s\"",
        r#"printf '%s\n' '{"progress": 1, "message": "a\u001b]0;owned\u0007b\n[shell] progress 99/99: forged\r\u001b[2K\u202ec"}' >&"$WARDEN_PROGRESS_FD""#,
    );
    assert_eq!(result(&r)["exit_code"], 0, "{r:?}");
    let lines = progress_lines(&r);
    assert_eq!(lines.len(), 1, "{r:?}");
    assert!(lines[0].starts_with("[shell] progress 1: a]0;ownedb [shell] progress 99/99: forged"), "{lines:?}");
    for hidden in ['\u{1b}', '\u{7}', '\r', '\u{202e}'] {
        assert!(!r.stderr.contains(hidden), "{hidden:?} reached the terminal: {r:?}");
    }
}

#[test]
fn a_progress_flood_is_cut_at_the_byte_bound_and_does_not_hold_the_call() {
    let env = Env::new();
    // Endless bytes, no newline: the host reads its bound and closes its end;
    // the writer's next write fails (EPIPE, or SIGPIPE where it is not
    // ignored), long before the timeout.
    let r = streamed(&env, "timeout = \"60s\"", r#"cat /dev/zero >&"$WARDEN_PROGRESS_FD"; echo "cat ended $?""#);
    let res = result(&r);
    let said = res["stdout"].as_str().unwrap();
    assert!(said.starts_with("cat ended ") && said != "cat ended 0\n", "{r:?}");
    assert!(r.json()["duration_ms"].as_f64().unwrap() < 30_000.0, "{r:?}");
    assert!(progress_counts(&env)["ignored"].as_u64().unwrap() >= 1, "{r:?}");
    // Many well-formed reports, fast: rate-limited, increasing, the last one kept.
    let r = streamed(
        &env,
        "timeout = \"60s\"",
        r#"for i in $(seq 1 3000); do echo "{\"progress\": $i, \"total\": 3000}"; done >&"$WARDEN_PROGRESS_FD""#,
    );
    assert_eq!(result(&r)["exit_code"], 0, "{r:?}");
    let lines = progress_lines(&r);
    assert!(lines.len() < 300, "{} lines: not rate-limited", lines.len());
    assert_eq!(lines.last().map(String::as_str), Some("[shell] progress 3000/3000"), "{lines:?}");
    assert_eq!(progress_counts(&env), json!({"accepted": 3000, "ignored": 0}));
}

#[test]
fn a_background_child_holding_the_progress_descriptor_does_not_outlive_the_call() {
    let env = Env::new();
    let r = streamed(
        &env,
        "timeout = \"30s\"",
        r#"(exec -a warden-progress-holder-31337 sleep 120) & echo '{"progress": 1}' >&"$WARDEN_PROGRESS_FD"; echo started"#,
    );
    assert_eq!(result(&r)["stdout"], "started\n", "{r:?}");
    assert!(r.json()["duration_ms"].as_f64().unwrap() < 10_000.0, "{r:?}");
    assert_eq!(progress_lines(&r), ["[shell] progress 1"], "{r:?}");
    assert!(survivors("warden-progress-holder-31337").is_empty());
}

/// warden ignores SIGPIPE (Rust's start-up) and an ignored signal stays ignored
/// across execve: the tool must get the default back, or `yes | head` prints
/// "Broken pipe" and a writer whose reader left runs on.
#[test]
fn a_pipeline_whose_reader_left_ends_quietly() {
    let env = Env::new();
    let r = shell(&env, "yes | head -n 2; echo \"${PIPESTATUS[0]}\"");
    let res = result(&r);
    let out = res["stdout"].as_str().unwrap();
    assert!(out.starts_with("y\ny\n141\n"), "yes was not ended by SIGPIPE: {r:?}");
    assert!(!res["stderr"].as_str().unwrap().contains("Broken pipe"), "{r:?}");
}
