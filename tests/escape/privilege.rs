//! Privilege escapes: namespaces, mounts, chroot, setns, ptrace, set-user-ID
//! programs, capabilities, seccomp bypasses (io_uring, x32, i386, clone3,
//! handles), kernel attack surface, TIOCSTI, signals to warden, warden's
//! environment, sysctl and cgroup files.

use std::os::unix::process::CommandExt;
use std::path::Path;

use crate::scene::{PYTHON, SHELL, SHELL_PROC, Tool};
use crate::util::Run;
use crate::{Case, Observed, Scene};

const CLASS: &str = "privilege";

fn c(id: &'static str, attempt: &'static str, expected: &'static str, run: fn(&Scene) -> Observed) -> Case {
    Case { id, class: CLASS, runtime: "process", attempt, expected, heavy: false, run }
}

/// The probe's prelude: `show(name, nr, args…)` prints `name ERRNO` (or `name ok`).
/// Arguments are chosen so that a call reaching the kernel would fail with
/// another errno (EFAULT, EBADF, EINVAL): EPERM or ENOSYS then proves seccomp.
const SYSCALL: &str = "import ctypes, os, errno, sys\n\
libc = ctypes.CDLL(None, use_errno=True)\n\
libc.syscall.restype = ctypes.c_long\n\
def sc(*a):\n\
\x20   r = libc.syscall(*[ctypes.c_long(x) for x in a])\n\
\x20   return 'ok' if r >= 0 else errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))\n\
def show(name, *a):\n\
\x20   print(name, sc(*a), flush=True)\n";

/// Runs `body` after [`SYSCALL`]; every `(name, errno)` must be printed exactly so.
fn syscalls(s: &Scene, id: &str, tool: Tool<'_>, body: &str, want: &[(&str, &str)]) -> Observed {
    let ws = s.ws(id);
    let r = s.python(&ws, tool, &format!("{SYSCALL}{body}"), "true");
    let (missing, seen) = printed(&r, want);
    Observed::new(r.success() && missing, seen)
}

/// Whether every `(name, errno)` of `want` was printed exactly so (false: one is
/// missing), and the probe's lines, with what is missing.
fn printed(r: &Run, want: &[(&str, &str)]) -> (bool, String) {
    let out = r.out();
    let missing: Vec<String> = want
        .iter()
        .filter(|(name, errno)| !out.lines().any(|l| l == format!("{name} {errno}")))
        .map(|(name, errno)| format!("{name} (wanted {errno})"))
        .collect();
    let got = out.lines().collect::<Vec<_>>().join(", ");
    let seen = if missing.is_empty() { got } else { format!("{got}; MISSING {}; {}", missing.join(", "), r.brief()) };
    (missing.is_empty(), seen)
}

/// A shell attempt: `marker` must never be printed, and stderr must contain one of `why`.
fn shell_refused(s: &Scene, id: &str, tool: Tool<'_>, command: &str, marker: &str, why: &[&str]) -> Observed {
    let ws = s.ws(id);
    let r = s.shell(&ws, tool, command);
    let said = why.iter().any(|w| r.err().contains(w));
    Observed::new(r.success() && !r.out().contains(marker) && said && !s.leaks(&r.all()), r.brief())
}

const NOT_PERMITTED: &[&str] = &["Operation not permitted", "permission denied", "Permission denied"];

pub(crate) fn cases() -> Vec<Case> {
    vec![
        c(
            "priv-unshare-user",
            "unshare -Ur id -u: a new user namespace, mapped to root inside",
            "unshare: Operation not permitted; nothing runs as the namespace's root",
            |s| shell_refused(s, "unshare-u", SHELL, "unshare -Ur id -u && echo UNSHARED", "UNSHARED", NOT_PERMITTED),
        ),
        c("priv-unshare-mount", "unshare -m: a private mount namespace", "unshare: Operation not permitted", |s| {
            shell_refused(s, "unshare-m", SHELL, "unshare -m true && echo UNSHARED", "UNSHARED", NOT_PERMITTED)
        }),
        c("priv-unshare-net", "unshare -n: a private network namespace", "unshare: Operation not permitted", |s| {
            shell_refused(s, "unshare-n", SHELL, "unshare -n true && echo UNSHARED", "UNSHARED", NOT_PERMITTED)
        }),
        c(
            "priv-unshare-syscall",
            "the raw syscalls: unshare(CLONE_NEWUSER|CLONE_NEWNS|CLONE_NEWNET), unshare(0), setns(-1, 0)",
            "EPERM for each (seccomp, before the kernel looks at the arguments)",
            |s| {
                syscalls(
                    s,
                    "unshare-sys",
                    SHELL,
                    "show('unshare_all', 272, 0x10000000 | 0x00020000 | 0x40000000)\n\
                     show('unshare_none', 272, 0)\n\
                     show('setns', 308, -1, 0)\n",
                    &[("unshare_all", "EPERM"), ("unshare_none", "EPERM"), ("setns", "EPERM")],
                )
            },
        ),
        c(
            "priv-setns",
            "enter another namespace: setns on /proc/self/ns/net, nsenter -t 1 -m (with /proc granted)",
            "setns EPERM; nsenter fails; the secret never appears",
            |s| {
                let ws = s.ws("setns");
                std::fs::write(
                    ws.join("probe.py"),
                    format!(
                        "{SYSCALL}try:\n\
                         \x20   fd = os.open('/proc/self/ns/net', os.O_RDONLY)\n\
                         \x20   show('setns', 308, fd, 0)\n\
                         except OSError as e:\n\
                         \x20   print('open refused', e.errno)\n"
                    ),
                )
                .unwrap();
                let r = s.shell(
                    &ws,
                    SHELL_PROC,
                    &format!("{PYTHON} probe.py; nsenter -t 1 -m -- cat {} && echo ENTERED", s.secret_file.display()),
                );
                let out = r.out();
                let ok = r.success()
                    && (out.contains("setns EPERM") || out.contains("open refused"))
                    && !out.contains("ENTERED")
                    && !s.leaks(&r.all());
                Observed::new(ok, r.brief())
            },
        ),
        c(
            "priv-mount",
            "mount a tmpfs on a workspace directory, bind-mount the secret's directory into the workspace",
            "mount refused; nothing mounted, the secret never appears",
            |s| {
                let ws = s.ws("mount");
                let r = s.shell(
                    &ws,
                    SHELL,
                    &format!(
                        "mkdir m b; mount -t tmpfs none m && echo MOUNTED; mount --bind {} b && echo MOUNTED; cat b/secret.txt",
                        s.outside.display()
                    ),
                );
                let empty = std::fs::read_dir(ws.join("b")).map(|d| d.count() == 0).unwrap_or(true);
                let said = NOT_PERMITTED.iter().any(|w| r.err().contains(w)) || r.err().contains("must be superuser");
                Observed::new(
                    r.success() && said && !r.out().contains("MOUNTED") && empty && !s.leaks(&r.all()),
                    format!("{}; bind target still empty: {empty}", r.brief()),
                )
            },
        ),
        c(
            "priv-mount-syscalls",
            "mount(2), umount2(2), pivot_root(2), and the new mount API (fsopen, open_tree, move_mount, mount_setattr)",
            "EPERM for mount, umount2 and pivot_root; ENOSYS for the new API",
            |s| {
                syscalls(
                    s,
                    "mount-sys",
                    SHELL,
                    "show('mount', 165, 0, 0, 0, 0, 0)\n\
                     show('umount2', 166, 0, 0)\n\
                     show('pivot_root', 155, 0, 0)\n\
                     show('fsopen', 430, 0, 0)\n\
                     show('open_tree', 428, -1, 0, 0)\n\
                     show('move_mount', 429, -1, 0, -1, 0, 0)\n\
                     show('mount_setattr', 442, -1, 0, 0, 0, 0)\n",
                    &[
                        ("mount", "EPERM"),
                        ("umount2", "EPERM"),
                        ("pivot_root", "EPERM"),
                        ("fsopen", "ENOSYS"),
                        ("open_tree", "ENOSYS"),
                        ("move_mount", "ENOSYS"),
                        ("mount_setattr", "ENOSYS"),
                    ],
                )
            },
        ),
        c(
            "priv-chroot",
            "chroot(NULL) (EFAULT if the kernel saw it) and chroot(1) to a directory",
            "EPERM from seccomp; chroot(1) fails",
            |s| {
                let ws = s.ws("chroot");
                std::fs::create_dir_all(ws.join("jail")).unwrap();
                std::fs::write(ws.join("probe.py"), format!("{SYSCALL}show('chroot', 161, 0)\n")).unwrap();
                let r = s.shell(&ws, SHELL, &format!("{PYTHON} probe.py; chroot jail /bin/true && echo CHROOTED"));
                let ok = r.success() && r.out().contains("chroot EPERM") && !r.out().contains("CHROOTED");
                Observed::new(ok, r.brief())
            },
        ),
        c(
            "priv-ptrace",
            "PTRACE_ATTACH to warden (the parent), PTRACE_SEIZE of pid 1, and strace -p $PPID",
            "EPERM for both calls; strace fails",
            |s| {
                let ws = s.ws("ptrace");
                std::fs::write(
                    ws.join("probe.py"),
                    format!(
                        "{SYSCALL}show('attach', 101, 16, os.getppid(), 0, 0)\nshow('seize', 101, 0x4206, 1, 0, 0)\n"
                    ),
                )
                .unwrap();
                let r =
                    s.shell(&ws, SHELL, &format!("{PYTHON} probe.py; strace -p $PPID -e trace=none 2>&1 | head -3"));
                let out = r.out();
                let ok = r.success()
                    && out.contains("attach EPERM")
                    && out.contains("seize EPERM")
                    && !out.contains("Process ") // strace's "Process N attached"
                    && !out.contains("attached");
                Observed::new(ok, r.brief())
            },
        ),
        c("priv-process-vm", "process_vm_readv and process_vm_writev on warden's pid", "EPERM for both", |s| {
            syscalls(
                s,
                "process-vm",
                SHELL,
                "show('readv', 310, os.getppid(), 0, 0, 0, 0, 0)\nshow('writev', 311, os.getppid(), 0, 0, 0, 0, 0)\n",
                &[("readv", "EPERM"), ("writev", "EPERM")],
            )
        }),
        c(
            "priv-setuid",
            "run a set-user-ID-root program (a root-owned 4755 copy of id, as the nobody-owned workspace's uid), and su",
            "the set-user-ID bit is ignored (NO_NEW_PRIVS): euid stays the caller's; su fails",
            setuid,
        ),
        c(
            "priv-workspace-owner",
            "as root, a workspace owned by nobody (65534): who is the tool, and can it read the secret (mode 0644)?",
            "the tool runs as 65534, and the secret is Permission denied (Landlock, not file modes)",
            |s| {
                if !s.root {
                    return Observed::skipped("needs root to give the workspace to another user");
                }
                let ws = s.ws("owner");
                std::os::unix::fs::chown(&ws, Some(65534), Some(65534)).unwrap();
                let r = s.shell(&ws, SHELL, &format!("id -u; cat {}", s.secret_file.display()));
                let ok = r.success()
                    && r.out() == "65534\n"
                    && crate::filesystem::refusals(&r.err()) > 0
                    && !s.leaks(&r.all());
                Observed::new(ok, r.brief())
            },
        ),
        c(
            "priv-capabilities",
            "read the capability sets, then use CAP_SYS_ADMIN (sethostname to its own name) and CAP_CHOWN (chown to another user)",
            "every capability set is 0 (bounding set too, as root), NoNewPrivs 1, Seccomp 2; both uses Operation not permitted",
            capabilities,
        ),
        c(
            "priv-io-uring",
            "io_uring_setup, io_uring_enter and io_uring_register (which would bypass the seccomp rules)",
            "ENOSYS for each",
            |s| {
                syscalls(
                    s,
                    "io-uring",
                    SHELL,
                    "show('io_uring_setup', 425, 8, 0)\nshow('io_uring_enter', 426, -1, 0, 0, 0, 0, 0)\n\
                     show('io_uring_register', 427, -1, 0, 0, 0)\n",
                    &[("io_uring_setup", "ENOSYS"), ("io_uring_enter", "ENOSYS"), ("io_uring_register", "ENOSYS")],
                )
            },
        ),
        c(
            "priv-x32-syscalls",
            "the x32 syscall table (bit 0x40000000): getpid, unshare(CLONE_NEWUSER), openat, socket, ptrace",
            "EPERM for each (the architecture guard)",
            |s| {
                syscalls(
                    s,
                    "x32",
                    SHELL,
                    "X = 0x40000000\n\
                     show('getpid', X | 39)\n\
                     show('unshare', X | 272, 0x10000000)\n\
                     show('openat', X | 257, -100, 0, 0)\n\
                     show('socket', X | 41, 2, 1, 0)\n\
                     show('ptrace', X | 521, 16, os.getppid(), 0, 0)\n",
                    &[
                        ("getpid", "EPERM"),
                        ("unshare", "EPERM"),
                        ("openat", "EPERM"),
                        ("socket", "EPERM"),
                        ("ptrace", "EPERM"),
                    ],
                )
            },
        ),
        c(
            "priv-i386-int80",
            "the i386 entry: machine code `mov eax, 20 (getpid); int 0x80` run from an executable mapping",
            "the process is killed by the architecture guard (SIGSYS, exit 159) before the call returns",
            |s| {
                let ws = s.ws("i386");
                let script = "import ctypes, mmap\n\
                    buf = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)\n\
                    buf.write(bytes([0xb8, 0x14, 0, 0, 0, 0xcd, 0x80, 0xc3]))\n\
                    addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))\n\
                    f = ctypes.CFUNCTYPE(ctypes.c_long)(addr)\n\
                    print('before', flush=True)\n\
                    print('ESCAPED', f(), flush=True)\n";
                let r = s.python(&ws, SHELL, script, "echo exit=$?");
                let out = r.out();
                // 159 = 128 + SIGSYS; 139 (SIGSEGV) on a kernel without IA-32 emulation, where int 0x80 never enters.
                let killed = out.contains("exit=159") || out.contains("exit=139");
                Observed::new(r.success() && out.contains("before") && !out.contains("ESCAPED") && killed, r.brief())
            },
        ),
        c(
            "priv-clone3",
            "clone3 (whose flags seccomp cannot inspect), and clone with CLONE_NEWUSER through the shell's unshare --fork",
            "clone3 ENOSYS (libc falls back to clone, which seccomp inspects); unshare --fork refused",
            |s| {
                let ws = s.ws("clone3");
                std::fs::write(ws.join("probe.py"), format!("{SYSCALL}show('clone3', 435, 0, 0)\n")).unwrap();
                let r = s.shell(&ws, SHELL, &format!("{PYTHON} probe.py; unshare -U --fork true && echo CLONED"));
                let ok = r.success() && r.out().contains("clone3 ENOSYS") && !r.out().contains("CLONED");
                Observed::new(ok, r.brief())
            },
        ),
        c(
            "priv-handles",
            "the 'shocker' escape: name_to_handle_at and open_by_handle_at (reach any inode by handle)",
            "EPERM for both",
            |s| {
                syscalls(
                    s,
                    "handles",
                    SHELL,
                    "show('name_to_handle_at', 303, -100, 0, 0, 0, 0)\nshow('open_by_handle_at', 304, -100, 0, 0)\n",
                    &[("name_to_handle_at", "EPERM"), ("open_by_handle_at", "EPERM")],
                )
            },
        ),
        c(
            "priv-kernel-surface",
            "bpf, perf_event_open, userfaultfd, keyctl, add_key, init_module, finit_module, kexec_load, personality, acct, swapon, reboot",
            "EPERM for each",
            |s| {
                syscalls(
                    s,
                    "kernel",
                    SHELL,
                    "show('bpf', 321, 0, 0, 0)\n\
                     show('perf_event_open', 298, 0, 0, -1, -1, 0)\n\
                     show('userfaultfd', 323, 0)\n\
                     show('keyctl', 250, 0, 0, 0, 0, 0)\n\
                     show('add_key', 248, 0, 0, 0, 0, 0)\n\
                     show('init_module', 175, 0, 0, 0)\n\
                     show('finit_module', 313, -1, 0, 0)\n\
                     show('kexec_load', 246, 0, 0, 0, 0)\n\
                     show('personality', 135, 0xffffffff)\n\
                     show('acct', 163, 0)\n\
                     show('swapon', 167, 0, 0)\n\
                     show('reboot', 169, 0, 0, 0, 0)\n",
                    &[
                        ("bpf", "EPERM"),
                        ("perf_event_open", "EPERM"),
                        ("userfaultfd", "EPERM"),
                        ("keyctl", "EPERM"),
                        ("add_key", "EPERM"),
                        ("init_module", "EPERM"),
                        ("finit_module", "EPERM"),
                        ("kexec_load", "EPERM"),
                        ("personality", "EPERM"),
                        ("acct", "EPERM"),
                        ("swapon", "EPERM"),
                        ("reboot", "EPERM"),
                    ],
                )
            },
        ),
        c(
            "priv-tiocsti",
            "push keystrokes with TIOCSTI (and TIOCLINUX, and TIOCSTI with garbage in the high bits); open /dev/tty",
            "EPERM for each ioctl; no terminal to open",
            |s| {
                let ws = s.ws("tiocsti");
                std::fs::write(
                    ws.join("probe.py"),
                    format!(
                        "{SYSCALL}c = ctypes.c_char(b'x')\n\
                         show('tiocsti', 16, 0, 0x5412, ctypes.addressof(c))\n\
                         show('tiocsti_high', 16, 0, 0x5412 | (1 << 32), ctypes.addressof(c))\n\
                         show('tioclinux', 16, 0, 0x541C, ctypes.addressof(c))\n\
                         try:\n\
                         \x20   os.open('/dev/tty', os.O_RDWR)\n\
                         \x20   print('TTY OPENED')\n\
                         except OSError as e:\n\
                         \x20   print('tty', errno.errorcode.get(e.errno))\n"
                    ),
                )
                .unwrap();
                let r = s.shell(&ws, SHELL, &format!("{PYTHON} probe.py"));
                let out = r.out();
                let ok = r.success()
                    && ["tiocsti EPERM", "tiocsti_high EPERM", "tioclinux EPERM"].iter().all(|w| out.contains(w))
                    && out.contains("tty ")
                    && !out.contains("TTY OPENED");
                Observed::new(ok, r.brief())
            },
        ),
        c(
            "priv-kill-warden",
            "kill -KILL and -STOP the tool's parent ($PPID: warden without a pid namespace, the call's init in one), its \
             process group, and every process (kill -1)",
            "each kill fails (EPERM), or, in the call's pid namespace, reaches only its init, which ignores it; warden \
             answers and records the call",
            |s| {
                let ws = s.ws("kill");
                let r = s.shell(
                    &ws,
                    SHELL,
                    "echo ppid=$PPID; kill -STOP $PPID; echo stop=$?; kill -9 $PPID; echo host=$?; kill -9 -1; echo all=$?; \
                     kill -9 -- -$(ps -o pgid= $PPID 2>/dev/null | tr -d ' ' || echo 1) 2>/dev/null; echo done",
                );
                let out = r.out();
                // In the call's pid namespace $PPID is its init (pid 1), which the kernel keeps from
                // signals sent inside it; warden itself is not visible there at all.
                let parent = if out.contains("ppid=1\n") { ["stop=0", "host=0"] } else { ["stop=1", "host=1"] };
                let ok = r.code == 0 && r.success() && parent.iter().chain(&["all=1", "done"]).all(|w| out.contains(w));
                Observed::new(ok, format!("warden exit {}; {}", r.code, r.brief()))
            },
        ),
        c(
            "priv-unmask",
            "undo the read-only mask on a protected path (.git/hooks of a real repository): umount2 (plain and \
             MNT_DETACH), mount --bind a directory of its own over it, remount it read-write (mount MS_REMOUNT and \
             mount_setattr), open_tree(OPEN_TREE_CLONE) + move_mount, and unshare(NEWNS) and unshare(NEWUSER|NEWNS) \
             followed by umount2 and a remount inside; then write .git/hooks/pre-commit",
            "every mount call fails (EPERM from seccomp; in a nested namespace, were one made, the mask is locked); \
             the hook is not written and the host's .git/hooks has no new file",
            unmask,
        ),
        c(
            "priv-kill-monitor",
            "stop or kill the call's monitor and helper from inside its pid namespace: kill(0, SIGSTOP), kill(0, \
             SIGKILL), kill(-1, SIGSTOP), kill(-1, SIGKILL), then exit 7, once as the shell's replacement (the init's \
             child) and once as a \
             child of the shell (which also signals pid 1, then exits 9)",
            "the signals reach neither (seccomp: EPERM for kill(0, …); nothing else is visible); each call ends with \
             the tool's own exit status (7, and 9 after the child's 7), well inside its 10 s timeout, and is recorded \
             in a log that verifies",
            kill_monitor,
        ),
        c(
            "priv-environment",
            "print the whole environment: warden's holds WARDEN_ESCAPE_CANARY (the secret)",
            "only PATH and HOME from the policy (plus the shell's own PWD, SHLVL, _), and warden's defaults for the \
             call's {tmp} (TMPDIR, TMP, TEMP, PYTHONPYCACHEPREFIX, PYTEST_ADDOPTS), each naming that {tmp} (HOME \
             here), WARDEN_PROGRESS_FD, a descriptor number, GIT_DISCOVERY_ACROSS_FILESYSTEM=1 (git looks past \
             the call's layer), and, with a network namespace, the variables that point programs at warden's proxy \
             (127.0.0.1:3128, NO_PROXY its loopback), each with exactly that value; the canary never appears",
            |s| {
                let ws = s.ws("env");
                let r = s.shell(&ws, SHELL, "env; tr '\\0' '\\n' < /proc/self/environ 2>/dev/null");
                let out = r.out();
                let vars: Vec<(&str, &str)> = out.lines().filter_map(|l| l.split_once('=')).collect();
                let names: Vec<&str> = vars.iter().map(|(k, _)| *k).collect();
                let tmp = vars.iter().find(|(k, _)| *k == "HOME").map(|(_, v)| *v).unwrap_or("");
                // warden's defaults must name the call's own {tmp} (HOME = "{tmp}" in the policy), nothing of warden's.
                let in_tmp = |k: &str, v: &str| match k {
                    "TMPDIR" | "TMP" | "TEMP" => v == tmp,
                    "PYTHONPYCACHEPREFIX" => v.starts_with(&format!("{tmp}/")),
                    "PYTEST_ADDOPTS" => v == format!("-o cache_dir={tmp}/pytest-cache"),
                    _ => false,
                };
                // warden's proxy (in every call with a network namespace), by exact value.
                let proxy = |k: &str, v: &str| match k {
                    "HTTP_PROXY"
                    | "http_proxy"
                    | "HTTPS_PROXY"
                    | "https_proxy"
                    | "npm_config_proxy"
                    | "npm_config_https_proxy"
                    | "YARN_HTTP_PROXY"
                    | "YARN_HTTPS_PROXY"
                    | "PIP_PROXY"
                    | "CARGO_HTTP_PROXY"
                    | "GLOBAL_AGENT_HTTP_PROXY" => v == "http://127.0.0.1:3128",
                    "ALL_PROXY" | "all_proxy" => v == "socks5h://127.0.0.1:3128",
                    "NO_PROXY" | "no_proxy" | "npm_config_noproxy" => v == "localhost,127.0.0.1,::1",
                    "NODE_USE_ENV_PROXY" => v == "1",
                    _ => false,
                };
                let extra: Vec<String> = vars
                    .iter()
                    .filter(|(k, _)| !["HOME", "PATH", "PWD", "SHLVL", "_", "OLDPWD"].contains(k))
                    .filter(|(k, v)| !(*k == "WARDEN_PROGRESS_FD" && v.parse::<u16>().is_ok()))
                    .filter(|(k, v)| !(*k == "GIT_DISCOVERY_ACROSS_FILESYSTEM" && *v == "1"))
                    .filter(|(k, v)| tmp.is_empty() || !in_tmp(k, v))
                    .filter(|(k, v)| !(s.call_has("net") && proxy(k, v)))
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect();
                Observed::new(
                    r.success() && !tmp.is_empty() && extra.is_empty() && !s.leaks(&r.all()),
                    format!("variables: {names:?}; unexpected: {extra:?}"),
                )
            },
        ),
        c(
            "priv-sysctl",
            "write kernel settings through /proc/sys (hostname, with its own value) with /proc granted read-only",
            "Permission denied (Landlock), or, where the call has its own /proc, Read-only file system (its /proc/sys \
             is mounted read-only)",
            |s| {
                // The call's own /proc (with a pid namespace) has /proc/sys read-only; Landlock refuses it anyway.
                let why: &[&str] = if s.call_has("pid") {
                    &["Permission denied", "Read-only file system"]
                } else {
                    &["Permission denied"]
                };
                shell_refused(
                    s,
                    "sysctl",
                    SHELL_PROC,
                    "cat /proc/sys/kernel/hostname > h; cat h > /proc/sys/kernel/hostname && echo WRITTEN",
                    "WRITTEN",
                    why,
                )
            },
        ),
        c(
            "priv-cgroup-leave",
            "move the tool out of its cgroups: its pid into the root cgroup.procs (v1 pids and v2), and 0 (the \
             writing thread, the way warden's helper joins) into the root v1 tasks files of pids and memory",
            "Permission denied (/sys is not granted) or Read-only file system (the call's read-only view)",
            |s| {
                let files: Vec<&str> = [
                    "/sys/fs/cgroup/cgroup.procs",
                    "/sys/fs/cgroup/pids/cgroup.procs",
                    "/sys/fs/cgroup/unified/cgroup.procs",
                    "/sys/fs/cgroup/pids/tasks",
                    "/sys/fs/cgroup/memory/tasks",
                ]
                .into_iter()
                .filter(|p| Path::new(p).exists())
                .collect();
                if files.is_empty() {
                    return Observed::skipped("no cgroup.procs file on this host");
                }
                let ws = s.ws("cgroup");
                let cmd: Vec<String> = files
                    .iter()
                    .map(|f| {
                        let what = if f.ends_with("/tasks") { "0" } else { "$$" };
                        format!("echo {what} > {f} && echo MOVED")
                    })
                    .collect();
                let r = s.shell(&ws, SHELL, &cmd.join("; "));
                let denied = crate::filesystem::refusals(&r.err());
                Observed::new(r.success() && denied == files.len() && !r.out().contains("MOVED"), r.brief())
            },
        ),
        c(
            "priv-prlimit-warden",
            "set warden's own rlimits from the tool (its parent, as the same uid): prlimit64(warden, RLIMIT_FSIZE = 0) \
             to kill it with SIGXFSZ while it writes the record, RLIMIT_NOFILE = 0, RLIMIT_CPU = 0; reading them, and \
             lowering the tool's own, as controls",
            "EPERM for the three changes (seccomp: prlimit64 with a pid and a new limit); the controls work; warden \
             answers and its record is in a log that verifies",
            |s| {
                owner_probe(
                    s,
                    "prlimit",
                    "import struct\n\
                     zero = ctypes.create_string_buffer(struct.pack('QQ', 0, 0), 16)\n\
                     old = ctypes.create_string_buffer(16)\n\
                     mine = ctypes.create_string_buffer(struct.pack('QQ', 1 << 20, 1 << 20), 16)\n\
                     show('fsize', 302, ppid, 1, ctypes.addressof(zero), 0)\n\
                     show('nofile', 302, ppid, 7, ctypes.addressof(zero), 0)\n\
                     show('cpu', 302, ppid, 0, ctypes.addressof(zero), 0)\n\
                     show('read', 302, ppid, 1, 0, ctypes.addressof(old))\n\
                     show('own', 302, 0, 1, ctypes.addressof(mine), 0)\n",
                    &[("fsize", "EPERM"), ("nofile", "EPERM"), ("cpu", "EPERM"), ("read", "ok"), ("own", "ok")],
                    &[("read", "ESRCH")],
                )
            },
        ),
        c(
            "priv-sched-warden",
            "slow warden down from the tool (its parent, as the same uid): setpriority on its pid and on PRIO_USER, \
             sched_setaffinity, sched_setscheduler and sched_setattr (SCHED_IDLE), sched_setparam, ioprio_set on its \
             pid and on IOPRIO_WHO_USER, migrate_pages, move_pages, process_madvise, kcmp, pidfd_getfd; the same calls \
             on the tool itself (pid 0) as controls",
            "EPERM for each call aimed at another process (seccomp); the controls work; warden answers and its record \
             is in a log that verifies",
            |s| {
                owner_probe(
                    s,
                    "sched",
                    "import struct\n\
                     mask = ctypes.create_string_buffer(b'\\x01' + bytes(127), 128)\n\
                     param = ctypes.create_string_buffer(bytes(4), 4)\n\
                     attr = ctypes.create_string_buffer(struct.pack('IIQiIQQQ', 48, 5, 0, 0, 0, 0, 0, 0), 48)\n\
                     show('setpriority', 141, 0, ppid, 19)\n\
                     show('setpriority_user', 141, 2, 0, 19)\n\
                     show('affinity', 203, ppid, 128, ctypes.addressof(mask))\n\
                     show('scheduler', 144, ppid, 5, ctypes.addressof(param))\n\
                     show('param', 142, ppid, ctypes.addressof(param))\n\
                     show('attr', 314, ppid, ctypes.addressof(attr), 0)\n\
                     show('ioprio', 251, 1, ppid, 3 << 13)\n\
                     show('ioprio_user', 251, 3, 0, 3 << 13)\n\
                     show('migrate', 256, ppid, 64, ctypes.addressof(mask), ctypes.addressof(mask))\n\
                     show('move_pages', 279, ppid, 0, 0, 0, 0, 0)\n\
                     show('madvise', 440, 0, 0, 0, 0, 0)\n\
                     show('kcmp', 312, ppid, os.getpid(), 0, 0, 0)\n\
                     show('pidfd_getfd', 438, 0, 0, 0)\n\
                     show('own_nice', 141, 0, 0, min(os.nice(0) + 1, 19))\n\
                     show('own_affinity', 203, 0, 128, ctypes.addressof(mask))\n\
                     show('own_ioprio', 251, 1, 0, 2 << 13)\n",
                    &[
                        ("setpriority", "EPERM"),
                        ("setpriority_user", "EPERM"),
                        ("affinity", "EPERM"),
                        ("scheduler", "EPERM"),
                        ("param", "EPERM"),
                        ("attr", "EPERM"),
                        ("ioprio", "EPERM"),
                        ("ioprio_user", "EPERM"),
                        ("migrate", "EPERM"),
                        ("move_pages", "EPERM"),
                        ("madvise", "EPERM"),
                        ("kcmp", "EPERM"),
                        ("pidfd_getfd", "EPERM"),
                        ("own_nice", "ok"),
                        ("own_affinity", "ok"),
                        ("own_ioprio", "ok"),
                    ],
                    &[],
                )
            },
        ),
        c(
            "priv-sigio-warden",
            "make the kernel signal warden for the tool: a socketpair end owned by warden's pid (fcntl F_SETOWN, \
             F_SETOWN_EX, ioctl FIOSETOWN, SIOCSPGRP), then O_ASYNC and a write (SIGIO kills by default; as uid 0 \
             the kernel's own check passes for any target); F_GETOWN as a control",
            "EPERM for the four (seccomp; Landlock ABI 6 scopes the signal too); no signal reaches warden, which \
             answers and records the call",
            |s| {
                owner_probe(
                    s,
                    "sigio",
                    "import socket, fcntl, struct\n\
                     a, b = socket.socketpair()\n\
                     owner = ctypes.create_string_buffer(struct.pack('ii', 1, ppid), 8)\n\
                     pid = ctypes.create_string_buffer(struct.pack('i', ppid), 4)\n\
                     show('setown', 72, a.fileno(), 8, ppid)\n\
                     show('setown_ex', 72, a.fileno(), 15, ctypes.addressof(owner))\n\
                     show('fiosetown', 16, a.fileno(), 0x8901, ctypes.addressof(pid))\n\
                     show('siocspgrp', 16, a.fileno(), 0x8902, ctypes.addressof(pid))\n\
                     show('getown', 72, a.fileno(), 9)\n\
                     fcntl.fcntl(a.fileno(), fcntl.F_SETFL, fcntl.fcntl(a.fileno(), fcntl.F_GETFL) | 0o20000)\n\
                     b.send(b'wake')\n",
                    &[
                        ("setown", "EPERM"),
                        ("setown_ex", "EPERM"),
                        ("fiosetown", "EPERM"),
                        ("siocspgrp", "EPERM"),
                        ("getown", "ok"),
                    ],
                    &[],
                )
            },
        ),
        c(
            "priv-clone-parent",
            "clone(CLONE_PARENT): a child that is warden's own, outside the call's reaping (a zombie per call under \
             warden serve, and, without root, the uid's process count)",
            "EPERM (seccomp); warden answers and records the call",
            |s| {
                owner_probe(
                    s,
                    "clone-parent",
                    "show('clone_parent', 56, 0x8000 | 17, 0, 0, 0, 0)\n",
                    &[("clone_parent", "EPERM")],
                    &[],
                )
            },
        ),
    ]
}

/// The probe's prelude for calls aimed at warden: `ppid` is warden's host pid,
/// written to `warden.pid` by the test once warden runs (the tool's own parent is
/// not warden, and inside the call's pid namespace `getppid()` is 0, which the
/// kernel reads as "this process").
const WARDEN_PID: &str = "import time\n\
deadline = time.time() + 10\n\
while not os.path.exists('warden.pid') and time.time() < deadline:\n\
\x20   time.sleep(0.01)\n\
ppid = int(open('warden.pid').read())\n\
print('visible', os.path.exists(f'/proc/{ppid}'), flush=True)\n";

/// Runs `body` (after [`SYSCALL`] and [`WARDEN_PID`]) against warden, which must
/// answer with a record in a log that verifies (the tool is `exec`ed: no shell
/// between; every `(name, errno)` must be printed exactly so). Where the call has a pid
/// namespace, each `(name, errno)` of `in_pid_ns` replaces the one of `want`
/// with that name (a call that reaches the kernel finds no such process there).
fn owner_probe(s: &Scene, id: &str, body: &str, want: &[(&str, &str)], in_pid_ns: &[(&str, &str)]) -> Observed {
    let ws = s.ws(id);
    let log = s.base.join("logs").join(format!("{id}-owner.jsonl"));
    std::fs::write(ws.join("probe.py"), format!("{SYSCALL}{WARDEN_PID}{body}")).unwrap();
    let policy = s.policy_file(&Scene::shell_policy(SHELL));
    let args = serde_json::json!({ "command": format!("exec {PYTHON} probe.py") }).to_string();
    let r = s.warden_with_pid(&ws, &log, &["--policy", policy.to_str().unwrap(), "call", "shell", &args], None);
    let pid_ns = s.call_has("pid");
    let mut want: Vec<(&str, &str)> = want
        .iter()
        .map(|&(n, e)| if pid_ns { in_pid_ns.iter().find(|(m, _)| *m == n).copied().unwrap_or((n, e)) } else { (n, e) })
        .collect();
    // Warden's host pid names nothing the tool can see in its own pid namespace.
    if pid_ns {
        want.push(("visible", "False"));
    }
    let (all, seen) = printed(&r, &want);
    let verified = warden::audit::verify(&log).ok();
    let recorded = verified.as_ref().is_some_and(|v| v.records == 1 && v.problem.is_none() && v.torn_line.is_none());
    Observed::new(
        r.success() && all && recorded,
        format!(
            "{}{seen}; warden answered: {}; the log verifies with the call's record: {recorded}",
            if pid_ns { "(pid namespace) " } else { "" },
            r.success()
        ),
    )
}

fn setuid(s: &Scene) -> Observed {
    let ws = s.ws("setuid");
    let su = ["/usr/bin/su", "/bin/su"].into_iter().find(|p| Path::new(p).exists());
    let su_cmd = su.map(|p| format!("; {p} root -c 'id -u' </dev/null; echo su=$?")).unwrap_or_default();
    if !s.root {
        // No root-owned set-user-ID file can be made: try the system's su only.
        let Some(_) = su else { return Observed::skipped("not root, and no su on this host") };
        let r = s.shell(&ws, SHELL, &format!("true{su_cmd}"));
        let ok = r.success() && !r.out().lines().any(|l| l == "0") && !r.out().contains("su=0");
        return Observed::new(ok, format!("(not root: su only) {}", r.brief()));
    }
    std::os::unix::fs::chown(&ws, Some(65534), Some(65534)).unwrap();
    let prog = ws.join("suid-id");
    std::fs::copy("/usr/bin/id", &prog).unwrap();
    crate::scene::set_mode(&prog, 0o4755);
    let nosuid = nix::sys::statvfs::statvfs(&ws)
        .map(|v| v.flags().contains(nix::sys::statvfs::FsFlags::ST_NOSUID))
        .unwrap_or(false);
    // Control, outside the sandbox: as 65534, does the bit work on this mount?
    let control = std::process::Command::new(&prog)
        .arg("-u")
        .uid(65534)
        .gid(65534)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let r = s.shell(&ws, SHELL, &format!("id -u; ./suid-id -u{su_cmd}"));
    let out = r.out();
    let lines: Vec<&str> = out.lines().collect();
    let ok =
        r.success() && lines.first() == Some(&"65534") && lines.get(1) == Some(&"65534") && !r.out().contains("su=0");
    Observed::new(
        ok,
        format!(
            "outside the sandbox the copy gives euid {control}{}; inside: {}",
            if nosuid { " (nosuid mount)" } else { "" },
            r.brief()
        ),
    )
}

fn capabilities(s: &Scene) -> Observed {
    let ws = s.ws("caps");
    // chown to another user than the tool's own (a chown to oneself needs no capability).
    let r = s.shell(
        &ws,
        SHELL_PROC,
        "grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status; \
         hostname \"$(hostname)\"; echo hostname=$?; touch f; u=$(id -u); if [ $u = 0 ]; then t=65534; else t=0; fi; \
         chown $t f; echo chown=$?; echo uid=$u",
    );
    let out = r.out();
    let mut want = vec![
        "CapInh:\t0000000000000000",
        "CapPrm:\t0000000000000000",
        "CapEff:\t0000000000000000",
        "CapAmb:\t0000000000000000",
        "NoNewPrivs:\t1",
        "Seccomp:\t2",
        "hostname=1",
        "chown=1",
    ];
    if s.root {
        want.push("CapBnd:\t0000000000000000");
    }
    let missing: Vec<&&str> = want.iter().filter(|w| !out.contains(**w)).collect();
    let uid: Option<u32> = out.lines().find_map(|l| l.strip_prefix("uid=")).and_then(|u| u.parse().ok());
    let owner = std::fs::metadata(ws.join("f")).map(|m| std::os::unix::fs::MetadataExt::uid(&m)).ok();
    let ok = r.success() && missing.is_empty() && uid.is_some() && owner == uid;
    Observed::new(
        ok,
        format!(
            "{}; missing {missing:?}; f owned by {owner:?}",
            out.replace('\t', " ").lines().collect::<Vec<_>>().join(", ")
        ),
    )
}

/// `priv-unmask`: the mount calls of a tool against the read-only bind over a
/// protected path, then a write through it.
fn unmask(s: &Scene) -> Observed {
    let ws = s.ws("unmask");
    let init = std::process::Command::new("git").args(["init", "-q"]).arg(&ws).status();
    if !init.is_ok_and(|st| st.success()) {
        return Observed::skipped("git init failed on this host");
    }
    let hooks = ws.join(".git/hooks");
    let before: Vec<String> = list(&hooks);
    let body = "import tempfile\n\
        def addr(b):\n\
        \x20   buf = ctypes.create_string_buffer(b)\n\
        \x20   keep.append(buf)\n\
        \x20   return ctypes.addressof(buf)\n\
        keep = []\n\
        hooks = os.path.abspath('.git/hooks').encode()\n\
        os.makedirs('mine', exist_ok=True)\n\
        mine = os.path.abspath('mine').encode()\n\
        MS_RDONLY, MS_REMOUNT, MS_BIND, MS_REC = 1, 32, 4096, 16384\n\
        show('umount2', 166, addr(hooks), 0)\n\
        show('umount2_detach', 166, addr(hooks), 2)\n\
        show('bind_over', 165, addr(mine), addr(hooks), 0, MS_BIND | MS_REC, 0)\n\
        show('remount_rw', 165, 0, addr(hooks), 0, MS_REMOUNT | MS_BIND, 0)\n\
        attr = ctypes.create_string_buffer(bytes(32))\n\
        ctypes.memmove(attr, (1).to_bytes(8, 'little') + bytes(24), 32)\n\
        show('mount_setattr', 442, -100, addr(hooks), 0, ctypes.addressof(attr), 32)\n\
        t = sc(428, -100, addr(mine), 1 | 0o2000000)\n\
        print('open_tree', t, flush=True)\n\
        show('move_mount', 429, -1, addr(b''), -100, addr(hooks), 4)\n\
        for name, flags in (('unshare_ns', 0x20000), ('unshare_user_ns', 0x10000000 | 0x20000)):\n\
        \x20   pid = os.fork()\n\
        \x20   if pid == 0:\n\
        \x20       r = sc(272, flags)\n\
        \x20       print(name, r, flush=True)\n\
        \x20       if r == 'ok':\n\
        \x20           show(name + '_umount2', 166, addr(hooks), 2)\n\
        \x20           show(name + '_remount_rw', 165, 0, addr(hooks), 0, MS_REMOUNT | MS_BIND, 0)\n\
        \x20           try:\n\
        \x20               open('.git/hooks/pre-commit', 'w').write('#!/bin/sh\\necho pwned\\n')\n\
        \x20               print(name + '_write', 'WRITTEN', flush=True)\n\
        \x20           except OSError as e:\n\
        \x20               print(name + '_write', errno.errorcode.get(e.errno, e.errno), flush=True)\n\
        \x20       os._exit(0)\n\
        \x20   os.waitpid(pid, 0)\n\
        try:\n\
        \x20   open('.git/hooks/pre-commit', 'w').write('#!/bin/sh\\necho pwned\\n')\n\
        \x20   print('write', 'WRITTEN', flush=True)\n\
        except OSError as e:\n\
        \x20   print('write', errno.errorcode.get(e.errno, e.errno), flush=True)\n";
    let r = s.python(&ws, SHELL, &format!("{SYSCALL}{body}"), "true");
    let out = r.out();
    let after = list(&hooks);
    let added: Vec<&String> = after.iter().filter(|n| !before.contains(n)).collect();
    let value = |name: &str| {
        out.lines().find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(' '))).unwrap_or("").to_string()
    };
    // Every mount call failed (any errno but "ok"); the file was not written, here or in a nested namespace.
    let calls = ["umount2", "umount2_detach", "bind_over", "remount_rw", "mount_setattr", "open_tree", "move_mount"];
    let refused = calls.iter().all(|c| {
        let v = value(c);
        !v.is_empty() && v != "ok" && !v.chars().all(|ch| ch.is_ascii_digit())
    });
    let ok = r.success()
        && refused
        && !value("write").is_empty()
        && !out.contains("WRITTEN")
        && added.is_empty()
        && !hooks.join("pre-commit").exists();
    Observed::new(
        ok,
        format!("{}; new in the host's .git/hooks: {added:?}", out.lines().collect::<Vec<_>>().join(", ")),
    )
}

/// The names in a directory (empty when unreadable).
fn list(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| d.filter_map(Result::ok).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default()
}

/// `priv-kill-monitor`: signals at the monitor and helper from inside the pid
/// namespace, as pid 1 and as a child; the call must end with the tool's status.
fn kill_monitor(s: &Scene) -> Observed {
    const TIMEOUT: u64 = 10;
    let body = "import signal, sys\n\
        show('kill0_stop', 62, 0, signal.SIGSTOP)\n\
        show('kill0_kill', 62, 0, signal.SIGKILL)\n\
        show('killall_stop', 62, -1, signal.SIGSTOP)\n\
        show('killall_kill', 62, -1, signal.SIGKILL)\n\
        if os.getpid() != 1:\n\
        \x20   show('kill1_stop', 62, 1, signal.SIGSTOP)\n\
        \x20   show('kill1_kill', 62, 1, signal.SIGKILL)\n\
        print('pid', os.getpid(), flush=True)\n\
        sys.exit(7)\n";
    let tool = Tool { read: &[], net: &[], limits: "timeout = \"10s\"" };
    let mut lines = Vec::new();
    let mut ok = true;
    for (how, command, code) in [
        ("as pid 1", format!("exec {PYTHON} probe.py"), 7),
        ("as a child", format!("{PYTHON} probe.py; echo after=$?; exit 9"), 9),
    ] {
        let ws = s.ws("kill-monitor");
        std::fs::write(ws.join("probe.py"), format!("{SYSCALL}{body}")).unwrap();
        let log = s.base.join("logs").join(format!("kill-monitor-{code}.jsonl"));
        let policy = s.policy_file(&Scene::shell_policy(tool));
        let args = serde_json::json!({ "command": command }).to_string();
        let started = std::time::Instant::now();
        let r = s.warden_logged(&ws, &log, &["--policy", policy.to_str().unwrap(), "call", "shell", &args], None, None);
        let took = started.elapsed();
        let recorded = warden::audit::verify(&log)
            .ok()
            .is_some_and(|v| v.records == 1 && v.problem.is_none() && v.torn_line.is_none());
        let out = r.out();
        // kill(0, …) is refused by seccomp; no signal may have been delivered anywhere but the tool's own tree.
        let kill0 = ["kill0_stop EPERM", "kill0_kill EPERM"].iter().all(|w| out.lines().any(|l| l == *w));
        let child_ok = code != 9 || out.lines().any(|l| l == "after=7");
        let this = r.success()
            && !r.hung
            && r.exit() == Some(code)
            && child_ok
            && kill0
            && recorded
            && took < std::time::Duration::from_secs(TIMEOUT - 2);
        ok &= this;
        lines.push(format!(
            "{how}: {}; {:.1} s; recorded: {recorded}",
            out.lines().collect::<Vec<_>>().join(", ").replace("\n", " "),
            took.as_secs_f64()
        ));
        if !this {
            lines.push(r.brief());
        }
    }
    Observed::new(ok, lines.join(" | "))
}
