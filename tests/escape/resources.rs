//! Resource exhaustion: processes, threads, memory, CPU, wall clock, daemons,
//! file size, disk and file count in `{tmp}`, descriptors, output floods and
//! argument bombs.

use std::path::Path;

use serde_json::json;

use crate::scene::{Tool, kit_header, survivors};
use crate::util::kit::{brief, code};
use crate::{Case, Observed, Scene};

const CLASS: &str = "resources";

fn c(
    id: &'static str,
    runtime: &'static str,
    attempt: &'static str,
    expected: &'static str,
    run: fn(&Scene) -> Observed,
) -> Case {
    Case { id, class: CLASS, runtime, attempt, expected, heavy: false, run }
}

fn heavy(mut case: Case) -> Case {
    case.heavy = true;
    case
}

fn tool(limits: &'static str) -> Tool<'static> {
    Tool { read: &[], net: &[], limits }
}

/// A marker for command lines, unique to this run.
fn marker(tag: &str) -> String {
    format!("{tag}{}", std::process::id())
}

/// A value of `key=` in the probe's output.
fn value<'a>(out: &'a str, key: &str) -> Option<&'a str> {
    out.lines().find_map(|l| l.strip_prefix(key)).map(str::trim)
}

pub(crate) fn cases() -> Vec<Case> {
    vec![
        heavy(c(
            "res-fork-bomb/process",
            "process",
            "a bash fork bomb (f() { f | f & }; f) under limits.processes = 32, timeout 3s",
            "LIMIT_EXCEEDED (pids cgroup as root, RLIMIT_NPROC otherwise) or TIMEOUT; no process survives the call",
            |s| {
                let ws = s.ws("forkbomb");
                let m = marker("forkbomb");
                let r = s.shell(
                    &ws,
                    tool("timeout = \"3s\", processes = 32"),
                    &format!("{m}() {{ {m} | {m} & }}; {m}; sleep 30"),
                );
                let left = survivors(&m);
                let code = r.error_code();
                Observed::new(
                    (code == "LIMIT_EXCEEDED" || code == "TIMEOUT") && left.is_empty(),
                    format!("{}; survivors: {}", r.brief(), left.len()),
                )
            },
        )),
        heavy(c(
            "res-thread-bomb/process",
            "process",
            "start threads until it fails, under limits.processes = 16",
            "thread creation fails near 16 (threads count as processes); the call ends normally",
            |s| {
                let ws = s.ws("threads");
                let r = s.python(
                    &ws,
                    tool("timeout = \"20s\", processes = 16"),
                    "import threading, time\n\
                     n = 0\n\
                     try:\n\
                     \x20   for _ in range(10000):\n\
                     \x20       threading.Thread(target=time.sleep, args=(5,), daemon=True).start()\n\
                     \x20       n += 1\n\
                     except RuntimeError as e:\n\
                     \x20   print('refused', e, flush=True)\n\
                     print('threads', n, flush=True)\n\
                     import os; os._exit(0)\n",
                    "true",
                );
                let n: u64 = value(&r.out(), "threads").and_then(|v| v.parse().ok()).unwrap_or(u64::MAX);
                Observed::new(r.success() && r.out().contains("refused") && n <= 16, r.brief())
            },
        )),
        c(
            "res-memory/process",
            "process",
            "allocate 1 GiB (python bytearray) and map 8 GiB, under limits.memory = 256MiB",
            "MemoryError for both (RLIMIT_AS); the program fails, warden does not",
            |s| {
                let ws = s.ws("memory");
                let r = s.python(
                    &ws,
                    tool("timeout = \"20s\", memory = \"256MiB\""),
                    "import mmap\n\
                     try:\n\
                     \x20   a = bytearray(1 << 30)\n\
                     \x20   print('ALLOCATED')\n\
                     except MemoryError:\n\
                     \x20   print('bytearray refused')\n\
                     try:\n\
                     \x20   m = mmap.mmap(-1, 8 << 30)\n\
                     \x20   print('MAPPED')\n\
                     except (OSError, MemoryError) as e:\n\
                     \x20   print('mmap refused', e)\n",
                    "true",
                );
                let out = r.out();
                let ok = r.success()
                    && out.contains("bytearray refused")
                    && out.contains("mmap refused")
                    && !out.contains("ALLOCATED")
                    && !out.contains("MAPPED");
                Observed::new(ok, r.brief())
            },
        ),
        heavy(c(
            "res-cpu/process",
            "process",
            "burn CPU forever (while :; do :; done) under limits.cpu = 1s, timeout 60s",
            "LIMIT_EXCEEDED: used its CPU time (RLIMIT_CPU)",
            |s| {
                let ws = s.ws("cpu");
                let r = s.shell(&ws, tool("timeout = \"60s\", cpu = \"1s\""), "while :; do :; done");
                Observed::new(r.error_code() == "LIMIT_EXCEEDED" && r.code == 4, r.brief())
            },
        )),
        c(
            "res-wall-clock/process",
            "process",
            "sleep forever under timeout = 3s",
            "TIMEOUT; the sleeping process is killed",
            |s| {
                let ws = s.ws("sleep");
                let m = format!("1000.{}1", std::process::id());
                let r = s.shell(&ws, tool("timeout = \"3s\""), &format!("sleep {m}"));
                let left = survivors(&m);
                Observed::new(
                    r.error_code() == "TIMEOUT" && left.is_empty(),
                    format!("{}; survivors: {}", r.brief(), left.len()),
                )
            },
        ),
        c(
            "res-daemons/process",
            "process",
            "leave daemons behind: setsid, a double fork, nohup + disown, then exit at once",
            "the call returns; the host kills the whole process group: no daemon survives",
            |s| {
                let ws = s.ws("daemons");
                let p = std::process::id();
                let r = s.shell(
                    &ws,
                    tool("timeout = \"20s\""),
                    &format!(
                        "setsid sleep 1000.{p}2 & (sleep 1000.{p}3 &) ; nohup sleep 1000.{p}4 >/dev/null 2>&1 & disown; echo started"
                    ),
                );
                let left: Vec<String> = (2..=4).flat_map(|i| survivors(&format!("1000.{p}{i}"))).collect();
                Observed::new(
                    r.success() && r.out().contains("started") && left.is_empty(),
                    format!("{}; survivors: {left:?}", r.brief()),
                )
            },
        ),
        c(
            "res-file-size/process",
            "process",
            "write an 8 MiB file under limits.file_size = 1MiB",
            "LIMIT_EXCEEDED (SIGXFSZ) or a failed write; the file stops at 1 MiB",
            |s| {
                let ws = s.ws("fsize");
                let r = s.shell(
                    &ws,
                    tool("timeout = \"20s\", file_size = \"1MiB\""),
                    "dd if=/dev/zero of=big bs=1M count=8",
                );
                let size = std::fs::metadata(ws.join("big")).map(|m| m.len()).unwrap_or(0);
                let refused = r.error_code() == "LIMIT_EXCEEDED" || r.exit().is_some_and(|c| c != 0);
                Observed::new(refused && size <= 1 << 20, format!("{}; file is {size} bytes", r.brief()))
            },
        ),
        c(
            "res-disk-fill/process",
            "process",
            "fill {tmp}: 24 files of 1 MiB under limits.tmp_size = 8MiB",
            "as root: ENOSPC once 8 MiB are written ({tmp} is a tmpfs of that size); {tmp} is removed after the call",
            |s| {
                const LIMIT: &str = "No disk quota without root";
                let ws = s.ws("diskfill");
                let r = s.shell(
                    &ws,
                    tool("timeout = \"30s\", tmp_size = \"8MiB\""),
                    "cd \"$HOME\" && for i in $(seq 1 24); do head -c 1048576 /dev/zero > f$i || echo refused; done 2>&1; \
                     echo tmp=$HOME; echo total=$(cat f* | wc -c)",
                );
                let out = r.out();
                let tmp = value(&out, "tmp=").unwrap_or_default().to_string();
                let total: u64 = value(&out, "total=").and_then(|v| v.parse().ok()).unwrap_or(u64::MAX);
                let nospace = out.contains("No space left on device");
                let removed = !tmp.is_empty() && !Path::new(&tmp).exists();
                let seen = format!(
                    "wrote {total} bytes in total; ENOSPC: {nospace}; {{tmp}} removed after the call: {removed}"
                );
                if s.root {
                    Observed::new(r.success() && nospace && total <= 8 << 20 && removed, seen)
                } else {
                    Observed::limit(LIMIT, r.success() && removed, seen)
                }
            },
        ),
        c(
            "res-file-count/process",
            "process",
            "create 5000 empty files in {tmp} under limits.tmp_files = 1000",
            "as root: ENOSPC after 1000 files (the tmpfs's inodes); {tmp} is removed after the call",
            |s| {
                const LIMIT: &str = "No disk quota without root";
                let ws = s.ws("filecount");
                let r = s.shell(
                    &ws,
                    tool("timeout = \"30s\", tmp_files = 1000"),
                    "cd \"$HOME\" && seq 1 5000 | xargs touch 2>&1 | sort -u | head -c 300; \
                     echo; echo tmp=$HOME; echo files=$(ls | wc -l)",
                );
                let out = r.out();
                let tmp = value(&out, "tmp=").unwrap_or_default().to_string();
                let files: u64 = value(&out, "files=").and_then(|v| v.parse().ok()).unwrap_or(u64::MAX);
                let nospace = out.contains("No space left on device");
                let removed = !tmp.is_empty() && !Path::new(&tmp).exists();
                let seen =
                    format!("created {files} files; ENOSPC: {nospace}; {{tmp}} removed after the call: {removed}");
                if s.root {
                    Observed::new(r.success() && nospace && files <= 1000 && removed, seen)
                } else {
                    Observed::limit(LIMIT, r.success() && removed, seen)
                }
            },
        ),
        c(
            "res-fd-exhaustion/process",
            "process",
            "open descriptors until it fails, under limits.open_files = 32",
            "EMFILE at 32 descriptors (RLIMIT_NOFILE)",
            |s| {
                let ws = s.ws("fds");
                let r = s.python(
                    &ws,
                    tool("timeout = \"20s\", open_files = 32"),
                    "import os, errno\n\
                     fds = []\n\
                     try:\n\
                     \x20   for _ in range(100000):\n\
                     \x20       fds.append(os.open('/dev/null', os.O_RDONLY))\n\
                     except OSError as e:\n\
                     \x20   print('refused', errno.errorcode.get(e.errno))\n\
                     print('highest', max(fds) if fds else -1)\n",
                    "true",
                );
                let highest: i64 = value(&r.out(), "highest").and_then(|v| v.parse().ok()).unwrap_or(i64::MAX);
                Observed::new(r.success() && r.out().contains("refused EMFILE") && highest < 32, r.brief())
            },
        ),
        c(
            "res-stdout-flood/process",
            "process",
            "write to stdout without end (yes) under max_output = 64KiB, timeout = 3s",
            "the pipe drained to the end (no deadlock, warden's memory bounded by max_output): TIMEOUT at 3s",
            |s| flood(s, "flood", "yes"),
        ),
        c(
            "res-stderr-flood/process",
            "process",
            "write to stderr without end (yes >&2) under max_output = 64KiB, timeout = 3s",
            "the pipe drained to the end (no deadlock): TIMEOUT at 3s",
            |s| flood(s, "flood-err", "yes >&2"),
        ),
        c(
            "res-flood-then-exit/process",
            "process",
            "write 16 MB to stdout and stderr, then exit 0, under max_output = 64KiB",
            "success, truncated; 64 KiB kept of both together, head and tail, the rest counted in `dropped`",
            |s| {
                let ws = s.ws("flood-exit");
                let r = s.shell(
                    &ws,
                    tool("timeout = \"30s\", max_output = \"64KiB\""),
                    "head -c 16000000 /dev/zero | tr '\\0' o; echo END; head -c 16000000 /dev/zero >&2",
                );
                let res = &r.doc()["result"];
                let size = serde_json::to_vec(res).map(|v| v.len()).unwrap_or(usize::MAX);
                let dropped =
                    res["dropped"]["stdout"].as_u64().unwrap_or(0) + res["dropped"]["stderr"].as_u64().unwrap_or(0);
                Observed::new(
                    r.success()
                        && res["truncated"] == true
                        && res["exit_code"] == 0
                        && r.out().ends_with("END\n")
                        && size <= 64 << 10
                        && dropped > 31_000_000,
                    format!(
                        "exit {}, result {size} bytes, dropped {dropped}, stdout ends END: {}",
                        res["exit_code"],
                        r.out().ends_with("END\n")
                    ),
                )
            },
        ),
        c(
            "res-args-deep-json/process",
            "process",
            "arguments nested 100 000 arrays deep (stack exhaustion in the parser or the schema check)",
            "INVALID_ARGS (recursion limit), exit 2; warden does not crash",
            |s| deep_json(s, "shell"),
        ),
        c(
            "res-args-deep-json/component",
            "component",
            "arguments nested 100 000 arrays deep, to the testkit's echo",
            "INVALID_ARGS (recursion limit), exit 2; warden does not crash",
            |s| deep_json(s, "echo"),
        ),
        c(
            "res-args-huge-string/process",
            "process",
            "a 2 MiB command string (`touch pwned; #AAAA…`), through stdin",
            "INVALID_ARGS: more than the 1 MiB accepted; nothing runs",
            |s| {
                let ws = s.ws("huge-args");
                let policy = s.policy_file(&Scene::shell_policy(crate::scene::SHELL));
                let args = json!({ "command": format!("touch pwned; #{}", "A".repeat(2 << 20)) }).to_string();
                let r = s.warden(
                    &ws,
                    &["--policy", policy.to_str().unwrap(), "call", "shell", "-"],
                    Some(args.as_bytes()),
                    None,
                );
                let ran = ws.join("pwned").exists();
                Observed::new(
                    r.error_code() == "INVALID_ARGS" && r.code == 2 && !ran,
                    format!("{}; ran: {ran}", r.brief()),
                )
            },
        ),
        c(
            "res-args-huge-string/component",
            "component",
            "a 2 MiB string argument to the testkit's echo (library executor)",
            "INVALID_ARGS: more than the 1 MiB accepted; the component never runs",
            |s| {
                let k = s.kit("huge-args-c", "[tools.echo]\nplugin = \"kit\"\n");
                let r = k.call("echo", json!({ "s": "A".repeat(2 << 20) }));
                Observed::new(code(&r) == "INVALID_ARGS", brief(&r))
            },
        ),
        c(
            "res-sysv-ipc/process",
            "process",
            "SysV IPC against the host: read a same-uid process's shared memory segment and consume its message \
             queue (both made by the test, holding the secret), enumerate every segment (shmctl SHM_STAT), and leave \
             a 100 MiB segment and a message queue behind for a later call",
            "with the call's IPC namespace (as root, or through a user namespace): ENOENT/EINVAL, nothing of the host's \
             is visible (the host's keys name fresh, empty objects there) and what the call made dies with it; without \
             one: EPERM (seccomp); the secret never appears, the host's segment and message are intact, nothing is \
             left behind",
            sysv_ipc,
        ),
        c(
            "res-mqueue/process",
            "process",
            "open and drain a POSIX message queue the host made before the call (its message holds the secret), and \
             create one (mq_open O_CREAT) that outlives the call, for a later call to read",
            "with the call's IPC namespace: the host's queue is not there (ENOENT) or not reachable (EACCES: Landlock, \
             the call's own mqueue file system is granted nowhere), the new one is refused (EACCES) or dies with the \
             namespace; without one: EPERM (seccomp); the host's message is still queued, the host finds no new queue \
             afterwards",
            mqueue,
        ),
        heavy(c(
            "res-memfd/process",
            "process",
            "hold 300 MiB in five memfd files (written, not mapped: not address space) under limits.memory = 128MiB, \
             file_size = 64MiB, tmp_size = 16MiB",
            "as root: LIMIT_EXCEEDED (the call's memory cgroup counts memfd pages); as an ordinary user: the documented \
             limit (no memory cgroup), bounded per file by limits.file_size (EFBIG past 64 MiB)",
            memfd,
        )),
        c(
            "res-oom-score/process",
            "process",
            "under memory pressure, have the kernel's OOM killer take warden instead of the tool: lower the tool's \
             oom_score_adj (echo -1000 > /proc/self/oom_score_adj, /proc readable)",
            "the tool starts at oom_score_adj 1000 (the first choice) and cannot lower it (Permission denied)",
            |s| {
                let ws = s.ws("oom");
                let r = s.shell(
                    &ws,
                    crate::scene::SHELL_PROC,
                    "cat /proc/self/oom_score_adj; echo -1000 > /proc/self/oom_score_adj; cat /proc/self/oom_score_adj",
                );
                let out = r.out();
                let lines: Vec<&str> = out.lines().collect();
                Observed::new(
                    r.success() && lines == ["1000", "1000"] && r.err().contains("Permission denied"),
                    r.brief(),
                )
            },
        ),
    ]
}

fn deep_json(s: &Scene, tool: &str) -> Observed {
    let ws = s.ws(&format!("deep-{tool}"));
    let policy = if tool == "shell" {
        Scene::shell_policy(crate::scene::SHELL)
    } else {
        format!("{}[tools.echo]\nplugin = \"kit\"\n", kit_header())
    };
    let policy = s.policy_file(&policy);
    let depth = 100_000;
    let args = format!("{{\"command\":{}{}}}", "[".repeat(depth), "]".repeat(depth));
    let r = s.warden(&ws, &["--policy", policy.to_str().unwrap(), "call", tool, "-"], Some(args.as_bytes()), None);
    let crashed = r.stderr.contains("panicked") || r.stderr.contains("overflow") || r.code < 0;
    Observed::new(
        r.error_code() == "INVALID_ARGS" && r.code == 2 && !crashed,
        format!("exit {}; {}", r.code, r.brief()),
    )
}

/// A unique SysV IPC key for this run.
fn ipc_key(n: u32) -> i32 {
    (((std::process::id() & 0xffff) << 8 | n) & 0x7fff_ffff) as i32 | 0x1000_0000
}

/// Runs a python script on the host (outside any sandbox); its stdout.
fn host_python(script: &str) -> String {
    let out = std::process::Command::new(crate::scene::PYTHON).arg("-c").arg(script).output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

/// ctypes access to the SysV and POSIX IPC calls, for the host and the probe alike.
const IPC_PRELUDE: &str = "import ctypes, os, errno\n\
libc = ctypes.CDLL(None, use_errno=True)\n\
libc.shmat.restype = ctypes.c_void_p\n\
def err():\n\
\x20   return errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))\n";

fn sysv_ipc(s: &Scene) -> Observed {
    let (shm_key, msg_key, left_key) = (ipc_key(1), ipc_key(2), ipc_key(3));
    let secret = &s.secret;
    // The host side: a segment and a queue of the test's uid, both holding the secret.
    let made = host_python(&format!(
        "{IPC_PRELUDE}\
         i = libc.shmget({shm_key}, 4096, 0o1600)\n\
         a = libc.shmat(i, None, 0)\n\
         ctypes.memmove(a, b'{secret}', {n})\n\
         q = libc.msgget({msg_key}, 0o1600)\n\
         m = ctypes.create_string_buffer(b'\\x01\\x00\\x00\\x00\\x00\\x00\\x00\\x00{secret}', 8 + {n})\n\
         print('host', i, q, libc.msgsnd(q, m, {n}, 0))\n",
        n = secret.len()
    ));
    let leftover_size = 100 * 1048576 + 4096 + u64::from(std::process::id() % 4096);
    let ws = s.ws("sysv");
    let r = s.python(
        &ws,
        crate::scene::SHELL,
        &format!(
            "{IPC_PRELUDE}\
             i = libc.shmget({shm_key}, 0, 0)\n\
             if i < 0:\n\
             \x20   print('shmget', err())\n\
             else:\n\
             \x20   a = libc.shmat(i, None, 0o10000)\n\
             \x20   print('shmat', err() if a in (None, ctypes.c_void_p(-1).value) else ctypes.string_at(a, 64))\n\
             q = libc.msgget({msg_key}, 0)\n\
             if q < 0:\n\
             \x20   print('msgget', err())\n\
             else:\n\
             \x20   m = ctypes.create_string_buffer(4096)\n\
             \x20   n = libc.msgrcv(q, m, 4000, 0, 0o4000)\n\
             \x20   print('msgrcv', err() if n < 0 else m.raw[8:8 + n])\n\
             buf = ctypes.create_string_buffer(256)\n\
             seen = [k for k in range(256) if libc.shmctl(k, 13, buf) >= 0]\n\
             print('shm_stat', len(seen))\n\
             left = libc.shmget(0, {leftover_size}, 0o1600)\n\
             print('leave_shm', err() if left < 0 else 'made')\n\
             lq = libc.msgget({left_key}, 0o1600)\n\
             print('leave_msg', err() if lq < 0 else 'made')\n\
             i = libc.shmget({shm_key}, 4096, 0o1600)\n\
             if i < 0:\n\
             \x20   print('same_key_shm', err())\n\
             else:\n\
             \x20   a = libc.shmat(i, None, 0)\n\
             \x20   data = b'' if a in (None, ctypes.c_void_p(-1).value) else ctypes.string_at(a, 64)\n\
             \x20   print('same_key_shm', 'fresh' if data == bytes(64) else data)\n\
             q = libc.msgget({msg_key}, 0o1600)\n\
             if q < 0:\n\
             \x20   print('same_key_msg', err())\n\
             else:\n\
             \x20   m = ctypes.create_string_buffer(4096)\n\
             \x20   n = libc.msgrcv(q, m, 4000, 0, 0o4000)\n\
             \x20   print('same_key_msg', err() if n < 0 else m.raw[8:8 + n])\n"
        ),
        "true",
    );
    // What the host sees afterwards, then clean up.
    let after = host_python(&format!(
        "{IPC_PRELUDE}\
         shm = open('/proc/sysvipc/shm').read().split('\\n')[1:]\n\
         print('leftover_shm', sum(1 for l in shm if len(l.split()) > 3 and l.split()[3] == '{leftover_size}'))\n\
         print('leftover_msg', libc.msgget({left_key}, 0) >= 0)\n\
         q = libc.msgget({msg_key}, 0)\n\
         m = ctypes.create_string_buffer(4096)\n\
         n = libc.msgrcv(q, m, 4000, 0, 0o4000)\n\
         print('still_queued', n > 0 and m.raw[8:8 + n] == b'{secret}')\n\
         a = libc.shmat(libc.shmget({shm_key}, 0, 0), None, 0o10000)\n\
         print('host_shm_intact', a not in (None, ctypes.c_void_p(-1).value) and ctypes.string_at(a, {n}) == b'{secret}')\n\
         libc.msgctl(q, 0, None)\n\
         libc.shmctl(libc.shmget({shm_key}, 0, 0), 0, None)\n\
         lq = libc.msgget({left_key}, 0)\n\
         if lq >= 0: libc.msgctl(lq, 0, None)\n",
        n = secret.len()
    ));
    let out = r.out();
    // With the call's IPC namespace nothing of the host's is there (and what the call
    // makes, even under the host's keys, is its own); without one seccomp refuses IPC.
    let ns = s.call_has("ipc");
    let refusal = if ns { ["ENOENT", "EINVAL"].as_slice() } else { ["EPERM"].as_slice() };
    let refused = |name: &str| out.lines().any(|l| refusal.iter().any(|e| l == format!("{name} {e}")));
    let line = |l: &str| out.lines().any(|x| x == l);
    let host_untouched = after.contains("leftover_shm 0")
        && after.contains("leftover_msg False")
        && after.contains("still_queued True")
        && after.contains("host_shm_intact True");
    let stat_none = line("shm_stat 0");
    let own_objects = if ns {
        line("same_key_shm fresh") && line("same_key_msg ENOMSG")
    } else {
        line("same_key_shm EPERM") && line("same_key_msg EPERM") && refused("leave_shm") && refused("leave_msg")
    };
    let ok = made.starts_with("host ")
        && r.success()
        && refused("shmget")
        && refused("msgget")
        && stat_none
        && own_objects
        && host_untouched
        && !s.leaks(&r.all());
    let seen = format!(
        "{}{}; afterwards on the host: {}",
        if ns { "(IPC namespace) " } else { "" },
        out.lines().collect::<Vec<_>>().join(", "),
        after.lines().collect::<Vec<_>>().join(", ")
    );
    Observed::new(ok, if made.starts_with("host ") { seen } else { format!("host setup failed: {made}") })
}

fn mqueue(s: &Scene) -> Observed {
    let name = format!("/warden-escape-{}", std::process::id());
    let host_name = format!("/warden-escape-host-{}", std::process::id());
    let secret = &s.secret;
    // The host's own queue, made before the call, holding the secret.
    let made = host_python(&format!(
        "{IPC_PRELUDE}\
         q = libc.mq_open(b'{host_name}', os.O_CREAT | os.O_RDWR, 0o600, None)\n\
         print('host', err() if q < 0 else libc.mq_send(q, b'{secret}', {n}, 0))\n",
        n = secret.len()
    ));
    let ws = s.ws("mqueue");
    let r = s.python(
        &ws,
        crate::scene::SHELL,
        &format!(
            "{IPC_PRELUDE}\
             h = libc.mq_open(b'{host_name}', os.O_RDONLY | os.O_NONBLOCK)\n\
             if h < 0:\n\
             \x20   print('host_queue', err())\n\
             else:\n\
             \x20   m = ctypes.create_string_buffer(1 << 16)\n\
             \x20   n = libc.mq_receive(h, m, 1 << 16, None)\n\
             \x20   print('host_queue', err() if n < 0 else m.raw[:n])\n\
             q = libc.mq_open(b'{name}', os.O_CREAT | os.O_RDWR, 0o600, None)\n\
             print('mq_open', err() if q < 0 else 'made')\n\
             if q >= 0: print('mq_send', libc.mq_send(q, b'hello', 5, 0))\n"
        ),
        "true",
    );
    let after = host_python(&format!(
        "{IPC_PRELUDE}\
         q = libc.mq_open(b'{name}', os.O_RDONLY)\n\
         print('host_open', err() if q < 0 else 'FOUND')\n\
         libc.mq_unlink(b'{name}')\n\
         h = libc.mq_open(b'{host_name}', os.O_RDONLY | os.O_NONBLOCK)\n\
         m = ctypes.create_string_buffer(1 << 16)\n\
         n = libc.mq_receive(h, m, 1 << 16, None) if h >= 0 else -1\n\
         print('still_queued', n > 0 and m.raw[:n] == b'{secret}')\n\
         libc.mq_unlink(b'{host_name}')\n"
    ));
    let out = r.out();
    // With the call's IPC namespace its mqueue file system is its own, and Landlock
    // refuses opens on it (granted nowhere); without one seccomp refuses the call.
    let ns = s.call_has("ipc");
    let line = |l: &str| out.lines().any(|x| x == l);
    let inside = if ns {
        (line("host_queue ENOENT") || line("host_queue EACCES")) && (line("mq_open EACCES") || line("mq_open made"))
    } else {
        line("host_queue EPERM") && line("mq_open EPERM")
    };
    let gone = after.contains("host_open ENOENT") && after.contains("still_queued True");
    Observed::new(
        made.trim() == "host 0" && r.success() && inside && gone && !s.leaks(&r.all()),
        format!(
            "{}{}; the host afterwards: {}",
            if ns { "(IPC namespace) " } else { "" },
            s.redact(&r.brief()),
            after.trim().replace('\n', ", ")
        ),
    )
}

fn memfd(s: &Scene) -> Observed {
    const LIMIT: &str = "No memory cgroup without root";
    let ws = s.ws("memfd");
    let r = s.python(
        &ws,
        tool("timeout = \"30s\", memory = \"128MiB\", file_size = \"64MiB\", tmp_size = \"16MiB\""),
        "import os, signal\n\
         signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n\
         chunk = b'x' * (1 << 20)\n\
         fds = []\n\
         held = 0\n\
         for i in range(5):\n\
         \x20   fd = os.memfd_create(f'hold{i}')\n\
         \x20   fds.append(fd)\n\
         \x20   for _ in range(60):\n\
         \x20       os.write(fd, chunk)\n\
         \x20       held += 1\n\
         \x20   print('held_mib', held, flush=True)\n\
         try:\n\
         \x20   for _ in range(10):\n\
         \x20       os.write(fds[0], chunk)\n\
         \x20   print('past_file_size', 'written')\n\
         except OSError as e:\n\
         \x20   print('past_file_size', e.errno)\n",
        "exit $?",
    );
    let out = r.out();
    if s.root {
        let killed = r.error_code() == "LIMIT_EXCEEDED" && r.error_message().contains("limits.memory");
        Observed::new(killed, r.brief())
    } else {
        // Without a memory cgroup the 300 MiB are held; the bound that does hold is per file.
        // 27: EFBIG, a write past RLIMIT_FSIZE with SIGXFSZ ignored.
        let efbig = out.lines().any(|l| l == "past_file_size 27");
        Observed::limit(LIMIT, r.success() && efbig, r.brief())
    }
}

/// An endless flood (`command`) under max_output = 64 KiB and a 3 s timeout:
/// warden drains the pipe to the end (the program is not killed for
/// its output), so the call ends at the timeout, neither hung nor lost.
fn flood(s: &Scene, ws: &str, command: &str) -> Observed {
    let ws = s.ws(ws);
    let r = s.shell(&ws, tool("timeout = \"3s\", max_output = \"64KiB\""), command);
    Observed::new(!r.hung && r.error_code() == "TIMEOUT", r.brief())
}
