//! Filesystem escapes: absolute paths, `..`, symbolic links (also one swapped
//! during the call), hard links, `/proc/self/root`, `/proc/<warden>/…`,
//! descriptors, device files, and writes through a read-only grant.
//!
//! Where a case expects "Permission denied", a call whose root is built from
//! its grants (it has namespaces: `sandbox.view = "grants"`) says "No such file
//! or directory" instead: the host's path, which the scene made, is not there
//! for the tool at all. Both are refusals ([`REFUSALS`]); the secret never
//! showing is judged the same way.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::json;

use crate::scene::{PYTHON, SHELL, SHELL_PROC, Tool, mode, set_mode};
use crate::util::kit::{brief, code, text};
use crate::{Case, Observed, Scene};

const CLASS: &str = "filesystem";

fn c(
    id: &'static str,
    runtime: &'static str,
    attempt: &'static str,
    expected: &'static str,
    run: fn(&Scene) -> Observed,
) -> Case {
    Case { id, class: CLASS, runtime, attempt, expected, heavy: false, run }
}

/// How the sandbox says no to a path: Landlock's EACCES, the read-only view's
/// EROFS (it answers first for a write), or, in a call's root built from its
/// grants, ENOENT: the host's path (which the scene made, and which exists)
/// is not there at all.
pub(crate) const REFUSALS: [&str; 3] = ["Permission denied", "Read-only file system", "No such file or directory"];

/// How many refusals `text` holds.
pub(crate) fn refusals(text: &str) -> usize {
    REFUSALS.iter().map(|r| text.matches(r).count()).sum()
}

/// A process attempt refused (at least `n` times: [`REFUSALS`]), the secret never shown.
fn refused(s: &Scene, r: &crate::util::Run, n: usize) -> Observed {
    let denials = refusals(&r.err());
    Observed::new(r.success() && denials >= n && !s.leaks(&r.all()), r.brief())
}

/// A component attempt that failed (with `want` when given), the secret never shown.
fn failed(s: &Scene, r: &warden::CallResponse, want: Option<&str>) -> Observed {
    let ok = r.error.is_some() && want.is_none_or(|w| code(r) == w) && !s.leaks(&text(r));
    Observed::new(ok, brief(r))
}

fn read_kit(s: &Scene, id: &str) -> crate::util::kit::Kit {
    s.kit(id, "[tools.read]\nplugin = \"kit\"\nfs.read = [\"{workspace}\"]\n")
}

fn read_file_kit(s: &Scene, id: &str) -> crate::util::kit::Kit {
    s.kit(id, "[tools.read_file]\nplugin = \"fs\"\nfs.read = [\"{workspace}\"]\n")
}

pub(crate) fn cases() -> Vec<Case> {
    vec![
        c(
            "fs-absolute-path/process",
            "process",
            "cat a secret planted outside the workspace, by its absolute path",
            "cat: Permission denied (Landlock); the secret never appears",
            |s| {
                let ws = s.ws("abs");
                let r = s.shell(&ws, SHELL, &format!("cat {}", s.secret_file.display()));
                refused(s, &r, 1)
            },
        ),
        c(
            "fs-absolute-path/component",
            "component",
            "testkit `read` of the planted secret by its absolute path (workspace granted)",
            "PERMISSION_DENIED: not under any preopen; the secret never appears",
            |s| {
                let k = read_kit(s, "abs-c");
                failed(s, &k.call("read", json!({"path": s.secret_file})), Some("PERMISSION_DENIED"))
            },
        ),
        c(
            "fs-absolute-path/builtin",
            "component",
            "builtin read_file of the planted secret by its absolute path",
            "INVALID_PATH before anything runs",
            |s| {
                let k = read_file_kit(s, "abs-b");
                failed(s, &k.call("read_file", json!({"path": s.secret_file})), Some("INVALID_PATH"))
            },
        ),
        c(
            "fs-etc-shadow/process",
            "process",
            "cat /etc/shadow (as root in CI: uid 0 without capabilities)",
            "cat: Permission denied; no line of /etc/shadow appears",
            |s| {
                if !Path::new("/etc/shadow").exists() {
                    return Observed::skipped("/etc/shadow does not exist on this host");
                }
                let ws = s.ws("shadow");
                let r = s.shell(&ws, SHELL, "cat /etc/shadow; head -c 64 /etc/gshadow");
                refused(s, &r, 1)
            },
        ),
        c(
            "fs-dotdot/process",
            "process",
            "cat ../../outside/secret.txt and a long ../../../.. chain to it",
            "Permission denied twice; the secret never appears",
            |s| {
                let ws = s.ws("dotdot");
                let deep = format!("../../../../../../../../../..{}", s.secret_file.display());
                let r = s.shell(&ws, SHELL, &format!("cat ../../outside/secret.txt; cat {deep}"));
                refused(s, &r, 2)
            },
        ),
        c(
            "fs-dotdot/component",
            "component",
            "testkit `read` of WORKSPACE/../../outside/secret.txt",
            "PERMISSION_DENIED: `..` cannot climb out of a preopen",
            |s| {
                let k = read_kit(s, "dotdot-c");
                let path = format!("{}/../../outside/secret.txt", k.ws.display());
                failed(s, &k.call("read", json!({ "path": path })), Some("PERMISSION_DENIED"))
            },
        ),
        c(
            "fs-dotdot/builtin",
            "component",
            "builtin read_file of ../../outside/secret.txt",
            "INVALID_PATH (lexical check against the grants) before anything runs",
            |s| {
                let k = read_file_kit(s, "dotdot-b");
                failed(s, &k.call("read_file", json!({"path": "../../outside/secret.txt"})), Some("INVALID_PATH"))
            },
        ),
        c(
            "fs-symlink/process",
            "process",
            "cat a symbolic link, planted in the workspace, to the secret",
            "Permission denied (Landlock checks the resolved path)",
            |s| {
                let ws = s.ws("symlink");
                symlink(&s.secret_file, ws.join("link")).unwrap();
                let r = s.shell(&ws, SHELL, "cat link");
                refused(s, &r, 1)
            },
        ),
        c(
            "fs-symlink-dir/process",
            "process",
            "list and read through a planted link to the whole outside directory",
            "Permission denied for the listing and the read",
            |s| {
                let ws = s.ws("symlink-dir");
                symlink(&s.outside, ws.join("dirlink")).unwrap();
                let r = s.shell(&ws, SHELL, "ls dirlink/; cat dirlink/secret.txt");
                refused(s, &r, 2)
            },
        ),
        c(
            "fs-symlink-made/process",
            "process",
            "the tool makes its own link to the secret (ln -s), then reads it",
            "the link may be made inside the workspace, the read through it is Permission denied",
            |s| {
                let ws = s.ws("symlink-made");
                let r = s.shell(&ws, SHELL, &format!("ln -s {} made; cat made", s.secret_file.display()));
                refused(s, &r, 1)
            },
        ),
        c(
            "fs-symlink/component",
            "component",
            "testkit `read` of a planted link to the secret",
            "PERMISSION_DENIED: the link leads out of the preopen",
            |s| {
                let k = read_kit(s, "symlink-c");
                symlink(&s.secret_file, k.ws.join("link")).unwrap();
                failed(s, &k.call("read", json!({"path": k.ws.join("link")})), Some("PERMISSION_DENIED"))
            },
        ),
        c(
            "fs-symlink/builtin",
            "component",
            "builtin read_file of a planted link to the secret",
            "an error (the path is inside, its target is not reachable); the secret never appears",
            |s| {
                let k = read_file_kit(s, "symlink-b");
                symlink(&s.secret_file, k.ws.join("link")).unwrap();
                failed(s, &k.call("read_file", json!({"path": "link"})), None)
            },
        ),
        c(
            "fs-symlink-swap/process",
            "process",
            "300 reads of a link that a host thread keeps flipping between a granted file, the secret and /etc/shadow",
            "every read gives the granted file or Permission denied, never the secret (no check-then-use race)",
            symlink_swap_process,
        ),
        c(
            "fs-symlink-swap/component",
            "component",
            "150 testkit `read` calls of a link flipped between a granted file, the secret and /etc/shadow",
            "each call gives the granted file or PERMISSION_DENIED, never the secret",
            |s| {
                let k = read_kit(s, "swap-c");
                let path = k.ws.join("swap");
                swap_calls(s, &k.ws, || k.call("read", json!({ "path": path })))
            },
        ),
        c(
            "fs-symlink-swap/builtin",
            "component",
            "150 builtin read_file calls of a link flipped between a granted file, the secret and /etc/shadow",
            "each call gives the granted file or an error, never the secret (the path check is lexical, the open is confined)",
            |s| {
                let k = read_file_kit(s, "swap-b");
                swap_calls(s, &k.ws, || k.call("read_file", json!({"path": "swap"})))
            },
        ),
        c(
            "fs-hardlink-made/process",
            "process",
            "ln SECRET hard (a hard link from inside the workspace to the secret), then cat hard",
            "ln refused by Landlock (EXDEV: a link may not make a file reachable under other rights); no link is created",
            |s| {
                let ws = s.ws("hardlink");
                let r = s.shell(&ws, SHELL, &format!("ln {} hard; cat hard", s.secret_file.display()));
                let created = ws.join("hard").exists();
                let said = r.err().contains("Invalid cross-device link") || refusals(&r.err()) > 0;
                Observed::new(
                    r.success() && said && !created && !s.leaks(&r.all()),
                    format!("{}; link created: {created}", r.brief()),
                )
            },
        ),
        c(
            "fs-hardlink-trap/process",
            "process",
            "a tool that may read a directory outside and write the workspace links a file from there into the \
             workspace, for a later call that may read only the workspace; then that later call reads it",
            "ln refused by Landlock (EXDEV: the link would gain write rights); the later call finds no file",
            hardlink_trap,
        ),
        c(
            "fs-hardlink-planted/process",
            "process",
            "cat a hard link that the host made inside the workspace, before the call, to a file outside",
            "documented limit: the link reaches its target (Landlock checks the path, not the inode)",
            |s| hardlink_planted(s, false),
        ),
        c(
            "fs-hardlink-planted/component",
            "component",
            "testkit `read` of a hard link made inside the workspace, before the call, to a file outside",
            "documented limit: the link reaches its target (WASI checks the path, not the inode)",
            |s| hardlink_planted(s, true),
        ),
        c(
            "fs-proc-self-root/process",
            "process",
            "cat /proc/self/root/SECRET with /proc granted",
            "Permission denied: the magic link is resolved before Landlock checks",
            |s| {
                let ws = s.ws("proc-root");
                let r = s.shell(&ws, SHELL_PROC, &format!("cat /proc/self/root{}", s.secret_file.display()));
                refused(s, &r, 1)
            },
        ),
        c(
            "fs-proc-self-root/component",
            "component",
            "testkit `read` of /proc/self/root/SECRET",
            "PERMISSION_DENIED: /proc is not preopened",
            |s| {
                let k = read_kit(s, "proc-root-c");
                let path = format!("/proc/self/root{}", s.secret_file.display());
                failed(s, &k.call("read", json!({ "path": path })), Some("PERMISSION_DENIED"))
            },
        ),
        c(
            "fs-proc-warden-root/process",
            "process",
            "cat SECRET through /proc/PID/root of warden, with /proc granted: by warden's host pid (handed in), by \
             getppid(), and by every pid of the tool's /proc that is not its own",
            "no route reaches warden: its host pid names nothing in the call's pid namespace (ENOENT) or Landlock \
             refuses (EACCES); any other pid found is refused too; the secret never appears",
            |s| proc_warden(s, "root"),
        ),
        c(
            "fs-proc-warden-environ/process",
            "process",
            "read /proc/PID/environ of warden (its environment holds the secret as WARDEN_ESCAPE_CANARY): by its host \
             pid, getppid() and every pid the tool's /proc lists beside its own",
            "no environment but the tool's own is read (ENOENT in the pid namespace, EACCES without); the canary never \
             appears",
            |s| proc_warden(s, "environ"),
        ),
        c(
            "fs-proc-warden-mem/process",
            "process",
            "read warden's memory map and memory (/proc/PID/maps, then /proc/PID/mem at its first mapping): by its \
             host pid, getppid() and every pid the tool's /proc lists beside its own",
            "nothing read (ENOENT or EACCES); warden's binary never appears in a map",
            |s| proc_warden(s, "mem"),
        ),
        c(
            "fs-proc-warden-cwd/process",
            "process",
            "warden started in the secret's directory: ls and cat secret.txt through /proc/PID/cwd, by warden's host \
             pid, getppid() and every pid the tool's /proc lists beside its own",
            "every route refused (ENOENT or EACCES); the secret never appears",
            |s| proc_warden(s, "cwd"),
        ),
        c(
            "fs-proc-warden-fd/process",
            "process",
            "open every /proc/PID/fd/N of warden (its audit log, pipes, sockets), after a first call wrote a record: \
             by its host pid, getppid() and every pid the tool's /proc lists beside its own",
            "every open refused (ENOENT or EACCES); no audit record text appears",
            |s| proc_warden(s, "fd"),
        ),
        c(
            "fs-host-shm-proc/process",
            "process",
            "reach the host's /dev/shm and /proc: read a file the host planted in /dev/shm (the secret) and list it, \
             write a file there for the host to find; read /proc/1/cmdline, environ and root/ (the host's init), with \
             /proc granted",
            "the call's /dev/shm is its own (the host's file is not there, the tool's file never reaches the host); \
             /proc/1 is the call's own init (warden's sandbox helper, not the host init; its root/dev/shm is the \
             call's) or is refused; the secret never appears",
            host_shm_proc,
        ),
        c(
            "fs-inherited-fds/process",
            "process",
            "use descriptors 3-1023 that warden might have leaked (fstat each, from a fresh python)",
            "none is open but stdin (/dev/null), stdout, stderr and the progress pipe WARDEN_PROGRESS_FD names, \
             which is a pipe's write end (not readable)",
            |s| {
                let ws = s.ws("fds");
                let r = s.python(
                    &ws,
                    SHELL,
                    "import os\n\
                     found = []\n\
                     for fd in range(3, 1024):\n\
                     \x20   try:\n\
                     \x20       os.fstat(fd)\n\
                     \x20       found.append(fd)\n\
                     \x20   except OSError:\n\
                     \x20       pass\n\
                     import fcntl, stat\n\
                     progress = int(os.environ['WARDEN_PROGRESS_FD'])\n\
                     st = os.fstat(progress)\n\
                     write_only = fcntl.fcntl(progress, fcntl.F_GETFL) & os.O_ACCMODE == os.O_WRONLY\n\
                     if stat.S_ISFIFO(st.st_mode) and write_only:\n\
                     \x20   found.remove(progress)\n\
                     print('open beyond stdio:', found)\n",
                    "true",
                );
                Observed::new(r.success() && r.out().contains("open beyond stdio: []"), r.brief())
            },
        ),
        c(
            "fs-progress-fd/process",
            "process",
            "use the progress descriptor (WARDEN_PROGRESS_FD) to reach anything but its own pipe: read it, reopen it \
             through /proc/self/fd, use it as a socket, as a directory (openat, fchdir), mmap it",
            "EBADF on read; a reopening is the same pipe (same inode, nothing else); ENOTSOCK; ENOTDIR; ENODEV/EACCES",
            |s| {
                let ws = s.ws("progressfd");
                let r = s.python(
                    &ws,
                    SHELL,
                    "import errno, mmap, os, socket\n\
                     fd = int(os.environ['WARDEN_PROGRESS_FD'])\n\
                     ino = os.fstat(fd).st_ino\n\
                     def attempt(name, f):\n\
                     \x20   try:\n\
                     \x20       print(name, 'REACHED', f())\n\
                     \x20   except OSError as e:\n\
                     \x20       print(name, 'refused', errno.errorcode.get(e.errno, e.errno))\n\
                     attempt('read', lambda: os.read(fd, 1))\n\
                     def reopen():\n\
                     \x20   r = os.open(f'/proc/self/fd/{fd}', os.O_RDONLY | os.O_NONBLOCK)\n\
                     \x20   same = os.fstat(r).st_ino == ino\n\
                     \x20   if same: raise OSError(errno.EEXIST, 'the same pipe')\n\
                     \x20   return 'another file'\n\
                     attempt('reopen', reopen)\n\
                     attempt('socket', lambda: socket.socket(fileno=os.dup(fd)).getsockname())\n\
                     attempt('openat', lambda: os.open('etc', os.O_RDONLY, dir_fd=fd))\n\
                     attempt('fchdir', lambda: os.fchdir(fd))\n\
                     attempt('mmap', lambda: mmap.mmap(fd, 4096))\n",
                    "true",
                );
                let out = r.out();
                Observed::new(r.success() && out.contains("read refused") && !out.contains("REACHED"), r.brief())
            },
        ),
        c(
            "fs-block-device/process",
            "process",
            "read the first 512 bytes of the host's disks (/dev/vda, /dev/sda, … as listed in /sys/block)",
            "Permission denied (or no such device); no byte read",
            |s| {
                let ws = s.ws("blockdev");
                let mut devs: Vec<String> = std::fs::read_dir("/sys/block")
                    .map(|d| {
                        d.filter_map(Result::ok).map(|e| format!("/dev/{}", e.file_name().to_string_lossy())).collect()
                    })
                    .unwrap_or_default();
                devs.retain(|d| Path::new(d).exists());
                devs.sort_by_key(|d| d.contains("loop") || d.contains("ram"));
                devs.truncate(3);
                if devs.is_empty() {
                    devs.push("/dev/sda".into());
                }
                let r = s.shell(
                    &ws,
                    SHELL,
                    &format!("for d in {}; do echo \"$d $(head -c 512 $d | wc -c)\"; done", devs.join(" ")),
                );
                let zero = r.out().lines().all(|l| l.ends_with(" 0"));
                let said = r.err().contains("Permission denied") || r.err().contains("No such file");
                Observed::new(r.success() && zero && said, r.brief())
            },
        ),
        c(
            "fs-char-devices/process",
            "process",
            "read /dev/mem, /dev/kmem, /dev/port and whichever of /dev/hwrng, /dev/console, /dev/tty0, /dev/vcs exist",
            "Permission denied for each device that exists (No such file for the others); no byte read",
            |s| {
                let ws = s.ws("chardev");
                let mut devs = vec!["/dev/mem", "/dev/kmem", "/dev/port"];
                devs.extend(
                    ["/dev/hwrng", "/dev/console", "/dev/tty0", "/dev/vcs"]
                        .into_iter()
                        .filter(|d| Path::new(d).exists()),
                );
                let existing = devs.iter().filter(|d| Path::new(d).exists()).count();
                let r = s.shell(
                    &ws,
                    SHELL,
                    &format!("for d in {}; do echo \"$d $(head -c 16 $d | wc -c)\"; done", devs.join(" ")),
                );
                let zero = r.out().lines().count() == devs.len() && r.out().lines().all(|l| l.ends_with(" 0"));
                // Each device that exists refused (in a root built from the
                // grants none of them is there: No such file for all).
                let denied = refusals(&r.err());
                Observed::new(
                    r.success() && zero && denied == devs.len(),
                    format!("{} of {} devices exist on this host; {}", existing, devs.len(), r.brief()),
                )
            },
        ),
        c(
            "fs-dev-kmsg/process",
            "process",
            "write a line into the kernel log (echo MARKER > /dev/kmsg)",
            "Permission denied; the marker is not in the kernel log",
            dev_kmsg,
        ),
        c(
            "fs-mknod/process",
            "process",
            "mknod a block device (8,0: sda) and /dev/mem's char device (1,1) inside the workspace",
            "Operation not permitted (no CAP_MKNOD); nothing created",
            |s| {
                let ws = s.ws("mknod");
                let r = s.shell(&ws, SHELL, "mknod disk b 8 0; mknod mem c 1 1; echo done");
                let made = ws.join("disk").exists() || ws.join("mem").exists();
                let denied = r.err().matches("Operation not permitted").count() >= 2;
                Observed::new(r.success() && denied && !made, format!("{}; created: {made}", r.brief()))
            },
        ),
        c(
            "fs-ro-truncate/process",
            "process",
            "truncate a file under a read-only grant (: > FILE, truncate -s 0 FILE)",
            "Permission denied for both; the file keeps its content",
            |s| ro_process(s, "ro-truncate", |f, _| format!(": > {f}; truncate -s 0 {f}"), 2),
        ),
        c(
            "fs-ro-append/process",
            "process",
            "append to a file and create a new one under a read-only grant",
            "Permission denied for both; nothing changes",
            |s| ro_process(s, "ro-append", |f, d| format!("echo pwned >> {f}; echo pwned > {d}/new.txt"), 2),
        ),
        c(
            "fs-ro-rename/process",
            "process",
            "rename a read-only file in place, and move it into the writable workspace",
            "Permission denied for both (mv's copy into the workspace is a read the grant allows); the file stays \
             where it was",
            |s| ro_process(s, "ro-rename", |f, d| format!("mv {f} {d}/moved.txt; mv {f} ./stolen.txt"), 2),
        ),
        c(
            "fs-ro-unlink/process",
            "process",
            "rm a read-only file, and rm -rf its directory",
            "Permission denied; the file stays",
            |s| ro_process(s, "ro-unlink", |f, d| format!("rm -f {f}; rm -rf {d}"), 1),
        ),
        c(
            "fs-ro-link-write/process",
            "process",
            "hard-link a read-only file into the writable workspace, then write through the link",
            "ln refused (Landlock: a link may not gain rights); the file keeps its content",
            |s| {
                let (dir, file) = ro_dir(s, "ro-link");
                let ws = s.ws("ro-link");
                let f = file.display();
                let r = s.shell(&ws, ro_tool(&dir), &format!("ln {f} ./l && echo pwned > ./l; echo done"));
                let intact = std::fs::read_to_string(&file).unwrap_or_default() == "KEEP";
                let refused = r.err().contains("Invalid cross-device link") || r.err().contains("Permission denied");
                Observed::new(r.success() && refused && intact, format!("{}; file intact: {intact}", r.brief()))
            },
        ),
        c(
            "fs-metadata-outside/process",
            "process",
            "change the metadata of a file the tool's uid owns outside every grant: chmod, chown to itself, utime \
             (touch -d), setxattr and removexattr (python)",
            "each refused (Read-only file system: every mount but the call's own is read-only, at every uid); mode, \
             times and extended attributes unchanged on the host",
            metadata_outside,
        ),
        c(
            "fs-ro-chmod/process",
            "process",
            "chmod 777 a file under a read-only grant",
            "Read-only file system at every uid (the call's read-only view), mode kept; without a mount namespace, \
             as uid 0 Operation not permitted (seccomp), as an ordinary owner the documented limit",
            ro_chmod,
        ),
        c(
            "fs-ro-write/component",
            "component",
            "testkit `write` (create + truncate) of a file under a read-only grant",
            "PERMISSION_DENIED; the file keeps its content",
            |s| {
                let (dir, file) = ro_dir(s, "ro-c");
                let k = s.kit(
                    "ro-c",
                    &format!("[tools.write]\nplugin = \"kit\"\nfs.read = [{:?}]\n", dir.display().to_string()),
                );
                let r = k.call("write", json!({"path": file, "content": "pwned"}));
                ro_verdict(s, &r, &file, &[])
            },
        ),
        c(
            "fs-ro-truncate/builtin",
            "component",
            "builtin write_file over a file whose directory is granted read-only",
            "an error (INVALID_PATH or PERMISSION_DENIED); the file keeps its content",
            |s| ro_builtin(s, "write_file", |f, _| json!({"path": f, "content": "pwned"})),
        ),
        c(
            "fs-ro-edit/builtin",
            "component",
            "builtin edit_file of a file whose directory is granted read-only",
            "an error; the file keeps its content",
            |s| ro_builtin(s, "edit_file", |f, _| json!({"path": f, "old": "KEEP", "new": "PWNED"})),
        ),
        c(
            "fs-ro-rename/builtin",
            "component",
            "builtin move_file of a file whose directory is granted read-only",
            "an error; the file stays where it was",
            |s| ro_builtin(s, "move_file", |f, d| json!({"source": f, "dest": d.join("moved.txt")})),
        ),
        c(
            "fs-ro-unlink/builtin",
            "component",
            "builtin delete_file of a file whose directory is granted read-only",
            "an error; the file stays",
            |s| ro_builtin(s, "delete_file", |f, _| json!({ "path": f })),
        ),
        c(
            "fs-write-outside/process",
            "process",
            "create a file outside (next to the secret, and in /usr), append to the secret",
            "Permission denied three times; nothing created, the secret unchanged",
            |s| {
                let ws = s.ws("write-out");
                let planted = s.outside.join(format!("planted-{}", std::process::id()));
                let usr = PathBuf::from(format!("/usr/warden-escape-{}", std::process::id()));
                let r = s.shell(
                    &ws,
                    SHELL,
                    &format!(
                        "echo pwned > {}; touch {}; echo pwned >> {}",
                        planted.display(),
                        usr.display(),
                        s.secret_file.display()
                    ),
                );
                let made = planted.exists() || usr.exists();
                let _ = std::fs::remove_file(&usr);
                let intact = std::fs::read_to_string(&s.secret_file).unwrap_or_default() == s.secret;
                let o = refused(s, &r, 3);
                Observed::new(
                    o.contained && !made && intact,
                    format!("{}; created: {made}; secret intact: {intact}", o.observed),
                )
            },
        ),
        c(
            "fs-write-outside/component",
            "component",
            "testkit `write` of a new file next to the secret (workspace granted read-write)",
            "PERMISSION_DENIED; nothing created",
            |s| {
                let k = s.kit("write-out-c", "[tools.write]\nplugin = \"kit\"\nfs.write = [\"{workspace}\"]\n");
                let planted = s.outside.join("planted-by-component");
                let r = k.call("write", json!({"path": planted, "content": "pwned"}));
                let made = planted.exists();
                Observed::new(code(&r) == "PERMISSION_DENIED" && !made, format!("{}; created: {made}", brief(&r)))
            },
        ),
        c(
            "fs-inotify-outside/process",
            "process",
            "watch a directory outside every grant with inotify (Landlock does not check the watched path) and learn \
             the name of a file the host creates there during the call",
            "inotify_init1 refused with EPERM (seccomp; the tool does not set inotify = true); the name never appears",
            |s| {
                let ws = s.ws("inotify");
                let watched = s.side_dir("watched");
                let name = format!("created-by-the-host-{}", std::process::id());
                let maker = {
                    let path = watched.join(&name);
                    std::thread::spawn(move || {
                        std::thread::sleep(std::time::Duration::from_millis(700));
                        let _ = std::fs::write(path, "x");
                    })
                };
                let r = s.python(
                    &ws,
                    SHELL,
                    &format!(
                        "import ctypes, errno, os, select\n\
                         libc = ctypes.CDLL(None, use_errno=True)\n\
                         fd = libc.inotify_init1(0)\n\
                         if fd < 0:\n\
                         \x20   print('inotify', errno.errorcode.get(ctypes.get_errno()))\n\
                         else:\n\
                         \x20   w = libc.inotify_add_watch(fd, {:?}.encode(), 0x100)\n\
                         \x20   print('watch', w, errno.errorcode.get(ctypes.get_errno()))\n\
                         \x20   if select.select([fd], [], [], 3)[0]:\n\
                         \x20       print('EVENT', os.read(fd, 4096))\n",
                        watched.display().to_string()
                    ),
                    "true",
                );
                let _ = maker.join();
                let out = r.out();
                let ok = r.success() && out.contains("inotify EPERM") && !out.contains(&name);
                Observed::new(ok, r.brief())
            },
        ),
        c(
            "fs-grant-swap/process",
            "process",
            "a tool that may write the workspace replaces {workspace}/sub with a symbolic link to a directory outside; \
             a later call of another tool whose only grant is fs.read = {workspace}/sub reads the secret through it",
            "PERMISSION_DENIED naming the planted link (a grant may not pass through a link where a tool may write); \
             the secret never appears",
            |s| grant_swap(s, "reader", "process"),
        ),
        c(
            "fs-grant-swap/builtin",
            "component",
            "the same planted link, then read_file (fs.read = {workspace}/sub) of sub/secret.txt",
            "PERMISSION_DENIED naming the planted link; the secret never appears",
            |s| grant_swap(s, "read_file", "builtin"),
        ),
        c(
            "fs-grant-swap-home/process",
            "process",
            "the same plant where the writable grant is spelled through a symbolic link ($HOME -> realhome, \
             fs.write = {home}/data): the link planted in {home}/data/sub, then read by a tool granted {home}/data/sub",
            "PERMISSION_DENIED naming the planted link (writable places are compared canonically); the secret never \
             appears",
            |s| {
                let real = s.side_dir("realhome");
                let link = s.side_dir("homelinks").join("home");
                std::os::unix::fs::symlink(&real, &link).unwrap();
                std::fs::create_dir_all(real.join("data/sub")).unwrap();
                let ws = s.ws("grant-swap-home");
                let policy = s.policy_file(
                    "version = 1\n[tools.writer]\nexec = [\"/bin/bash\", \"-c\", \"{command}\"]\ntier = \"auto\"\n\
                     fs.read = [\"{system}\", \"{workspace}\"]\nfs.write = [\"{workspace}\", \"{home}/data\"]\n\
                     [tools.reader]\nexec = [\"/bin/bash\", \"-c\", \"{command}\"]\ntier = \"auto\"\n\
                     fs.read = [\"{system}\", \"{home}/data/sub\"]\n",
                );
                let call = |tool: &str, command: String| {
                    let mut c = std::process::Command::new(crate::scene::WARDEN);
                    c.current_dir(&ws)
                        .args(["--audit-log"])
                        .arg(s.base.join("logs").join("grant-swap-home.jsonl"))
                        .arg("--policy")
                        .arg(&policy)
                        .args(["call", tool, &json!({ "command": command }).to_string()])
                        .env("HOME", &link)
                        .env("WARDEN_CACHE_DIR", crate::util::cache_dir())
                        .env_remove("XDG_CACHE_HOME")
                        .stdin(std::process::Stdio::null())
                        .stdout(std::process::Stdio::piped())
                        .stderr(std::process::Stdio::piped());
                    crate::util::run_bounded(c, None)
                };
                let sub = link.join("data/sub");
                let planted = call(
                    "writer",
                    format!("rm -rf {0} && ln -s {1} {0} && echo planted", sub.display(), s.outside.display()),
                );
                if !planted.out().contains("planted") {
                    return Observed::new(false, format!("the link could not be planted: {}", planted.brief()));
                }
                let r = call("reader", format!("cat {}", s.secret_file.display()));
                let refused = r.error_code() == "PERMISSION_DENIED" && r.error_message().contains("symbolic link");
                Observed::new(refused && !s.leaks(&r.all()), r.brief())
            },
        ),
        c(
            "fs-grant-swap-alias/process",
            "process",
            "an administrator's link outside every writable place (/…/alias -> {workspace}/sub) is granted; the tool \
             replaces {workspace}/sub with a link to the secret's directory and reads through the alias",
            "PERMISSION_DENIED: each link of the chain is judged where it lies, one hop at a time; the secret never \
             appears",
            |s| {
                let ws = s.ws("grant-swap-alias");
                std::fs::create_dir(ws.join("sub")).unwrap();
                let alias = s.side_dir("aliases").join("alias");
                std::os::unix::fs::symlink(ws.join("sub"), &alias).unwrap();
                let tool = Tool {
                    read: Box::leak(Box::new([Box::leak(alias.display().to_string().into_boxed_str()) as &str])),
                    net: &[],
                    limits: "timeout = \"20s\"",
                };
                let planted =
                    s.shell(&ws, tool, &format!("rm -rf sub && ln -s {} sub && echo planted", s.outside.display()));
                if !planted.out().contains("planted") {
                    return Observed::new(false, format!("the link could not be planted: {}", planted.brief()));
                }
                let r = s.shell(&ws, tool, &format!("cat {}", s.secret_file.display()));
                let refused = r.error_code() == "PERMISSION_DENIED" && r.error_message().contains("symbolic link");
                Observed::new(refused && !s.leaks(&r.all()), r.brief())
            },
        ),
    ]
}

/// Keeps `link` flipping between `targets` (by atomic rename) while `body` runs;
/// returns what `body` returned and how many flips happened.
fn flipping<R>(link: &Path, targets: &[PathBuf], body: impl FnOnce() -> R) -> (R, usize) {
    symlink(&targets[0], link).unwrap();
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let flipper = scope.spawn(|| {
            let tmp = link.with_extension("next");
            let mut n = 0usize;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let _ = std::fs::remove_file(&tmp);
                if symlink(&targets[n % targets.len()], &tmp).is_ok() {
                    let _ = std::fs::rename(&tmp, link);
                }
                if n.is_multiple_of(16) {
                    std::thread::yield_now();
                }
            }
            n
        });
        let r = body();
        stop.store(true, Ordering::Relaxed);
        (r, flipper.join().unwrap())
    })
}

/// The link's targets, relative to the workspace (a component follows a relative
/// link inside its preopen, so the granted target really is readable there):
/// the granted file, the secret, and /etc/shadow.
fn swap_targets(s: &Scene, ws: &Path) -> Vec<PathBuf> {
    std::fs::write(ws.join("public.txt"), "public-content").unwrap();
    let up = "../".repeat(ws.components().count().saturating_sub(1));
    let relative = |p: &Path| PathBuf::from(format!("{up}{}", p.display().to_string().trim_start_matches('/')));
    let mut t = vec![PathBuf::from("public.txt"), relative(&s.secret_file)];
    if Path::new("/etc/shadow").exists() {
        t.push(relative(Path::new("/etc/shadow")));
    }
    t
}

fn symlink_swap_process(s: &Scene) -> Observed {
    let ws = s.ws("swap");
    let targets = swap_targets(s, &ws);
    let tool = Tool { read: &[], net: &[], limits: "timeout = \"60s\", max_output = \"1MiB\"" };
    let (r, flips) = flipping(&ws.join("swap"), &targets, || {
        s.shell(&ws, tool, "for i in $(seq 1 300); do cat swap 2>&1; echo; done | sort | uniq -c")
    });
    let out = r.out();
    let public: u64 = count_lines(&out, "public-content");
    let denied: u64 = count_lines(&out, "Permission denied");
    let all: u64 = count_lines(&out, "");
    // The verdict rests on the secret alone; the counts show that the race really ran.
    let ok = r.success() && !s.leaks(&r.all()) && all == 300;
    Observed::new(
        ok,
        format!(
            "{flips} flips during the call; {public} reads gave the granted file, {denied} were Permission denied, \
             secret shown: {}",
            s.leaks(&r.all())
        ),
    )
}

/// Sums the `uniq -c` counts of the non-blank lines containing `needle`.
fn count_lines(out: &str, needle: &str) -> u64 {
    out.lines()
        .filter_map(|l| l.trim_start().split_once(' '))
        .filter(|(_, line)| !line.trim().is_empty() && line.contains(needle))
        .filter_map(|(n, _)| n.parse::<u64>().ok())
        .sum()
}

fn swap_calls(s: &Scene, ws: &Path, call: impl Fn() -> warden::CallResponse) -> Observed {
    let targets = swap_targets(s, ws);
    let ((public, refused, other, leaked), flips) = flipping(&ws.join("swap"), &targets, || {
        let (mut public, mut refused, mut other, mut leaked) = (0, 0, 0, false);
        for _ in 0..150 {
            let r = call();
            leaked |= s.leaks(&text(&r));
            if text(&r).contains("public-content") {
                public += 1;
            } else if r.error.is_some() {
                refused += 1;
            } else {
                other += 1;
            }
        }
        (public, refused, other, leaked)
    });
    Observed::new(
        !leaked && other == 0,
        format!(
            "{flips} flips; {public} calls gave the granted file, {refused} were refused, {other} other; secret shown: {leaked}"
        ),
    )
}

fn hardlink_trap(s: &Scene) -> Observed {
    let side = s.side_dir("trap");
    std::fs::write(side.join("target.txt"), "TRAP-TARGET-CONTENT").unwrap();
    let ws = s.ws("hardlink-trap");
    let side_str = side.to_str().unwrap();
    let wide = Tool { read: &[side_str], ..SHELL };
    let first = s.shell(&ws, wide, &format!("ln {side_str}/target.txt hard; echo ln=$?"));
    let refused = first.out().contains("ln=1")
        && (first.err().contains("Invalid cross-device link") || first.err().contains("Permission denied"));
    let created = ws.join("hard").exists();
    let later = s.shell(&ws, SHELL, "cat hard");
    let reached = later.all().contains("TRAP-TARGET-CONTENT");
    Observed::new(
        first.success() && refused && !created && !reached,
        format!("{}; link created: {created}; the later call read the target: {reached}", first.brief()),
    )
}

fn hardlink_planted(s: &Scene, component: bool) -> Observed {
    const LIMIT: &str = "Hard links already inside a grant reach their target";
    let target = s.side_dir("linked").join("target.txt");
    std::fs::write(&target, "LINKED-TARGET-CONTENT").unwrap();
    let (r_text, summary) = if component {
        let k = read_kit(s, "hardlink-c");
        if let Err(e) = std::fs::hard_link(&target, k.ws.join("hard")) {
            return Observed::skipped(format!("cannot make the hard link: {e}"));
        }
        let r = k.call("read", json!({"path": k.ws.join("hard")}));
        (text(&r), brief(&r))
    } else {
        let ws = s.ws("hardlink-planted");
        if let Err(e) = std::fs::hard_link(&target, ws.join("hard")) {
            return Observed::skipped(format!("cannot make the hard link: {e}"));
        }
        let r = s.shell(&ws, SHELL, "cat hard");
        (r.all(), r.brief())
    };
    // The limit as documented: the target's content comes through. The planted
    // secret (a different file) still never does.
    let reached = r_text.contains("LINKED-TARGET-CONTENT");
    Observed::limit(
        LIMIT,
        reached && !s.leaks(&r_text),
        format!("{summary}; the link reached its target: {reached} (as documented)"),
    )
}

/// The probe of the `fs-proc-warden-*` cases: warden's `/proc/PID/` entries by
/// every pid that could name it. `argv[1]` is what to read (`root`, `environ`,
/// `mem`, `cwd`, `fd`), `argv[2]` the secret's path. Prints `ROUTE PID: refused
/// ERRNO…` or `READ ROUTE PID …` per attempt, then `foreign N refused M` (pids
/// found outside the tool's own process group, and how many of them gave nothing).
const PROC_WARDEN_PROBE: &str = "import os, sys, time, errno\n\
what, secret = sys.argv[1], sys.argv[2]\n\
deadline = time.time() + 10\n\
while not os.path.exists('warden.pid') and time.time() < deadline:\n\
\x20   time.sleep(0.01)\n\
host = int(open('warden.pid').read()) if os.path.exists('warden.pid') else None\n\
print('host_pid', host is not None)\n\
def group(pid):\n\
\x20   try:\n\
\x20       return open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()[2]\n\
\x20   except (OSError, IndexError):\n\
\x20       return None\n\
me = group('self')\n\
pids = [int(e) for e in os.listdir('/proc') if e.isdigit()]\n\
mine = {p for p in pids if group(p) == me}\n\
routes = [('host', host)] if host and host not in mine else []\n\
if host in mine:\n\
\x20   print(f'host {host}: names a process of the tool itself')\n\
if os.getppid() in mine:\n\
\x20   print('ppid', os.getppid(), 'is in the process group of the tool')\n\
else:\n\
\x20   routes.append(('ppid', os.getppid()))\n\
foreign = sorted(p for p in pids if p not in mine)\n\
routes += [('scan', n) for n in foreign]\n\
def name(e):\n\
\x20   return errno.errorcode.get(e.errno, str(e.errno))\n\
def attempt(pid):\n\
\x20   got, refused = [], []\n\
\x20   d = f'/proc/{pid}'\n\
\x20   def read(path, n=4096, at=None):\n\
\x20       try:\n\
\x20           fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)\n\
\x20       except OSError as e:\n\
\x20           refused.append(name(e)); return b''\n\
\x20       try:\n\
\x20           data = os.pread(fd, n, at) if at is not None else os.read(fd, n)\n\
\x20       except OSError as e:\n\
\x20           refused.append(name(e)); data = b''\n\
\x20       finally:\n\
\x20           os.close(fd)\n\
\x20       if data: got.append((path, data[:300]))\n\
\x20       return data\n\
\x20   def listing(path):\n\
\x20       try:\n\
\x20           return os.listdir(path)\n\
\x20       except OSError as e:\n\
\x20           refused.append(name(e)); return None\n\
\x20   if what == 'environ':\n\
\x20       read(d + '/environ')\n\
\x20   elif what == 'root':\n\
\x20       read(d + '/root' + secret)\n\
\x20   elif what == 'cwd':\n\
\x20       names = listing(d + '/cwd/')\n\
\x20       if names is not None: got.append((d + '/cwd/', names))\n\
\x20       read(d + '/cwd/' + os.path.basename(secret))\n\
\x20   elif what == 'mem':\n\
\x20       maps = read(d + '/maps')\n\
\x20       start = int(maps.split(b'-', 1)[0], 16) if maps else 0x400000\n\
\x20       read(d + '/mem', 200, start)\n\
\x20   elif what == 'fd':\n\
\x20       fds = listing(d + '/fd')\n\
\x20       if fds is not None: got.append((d + '/fd', fds))\n\
\x20       for fd in (fds if fds is not None else [str(i) for i in range(64)]):\n\
\x20           read(f'{d}/fd/{fd}')\n\
\x20   return got, refused\n\
scan_refused = 0\n\
for route, pid in routes:\n\
\x20   got, refused = attempt(pid)\n\
\x20   for path, data in got:\n\
\x20       print('READ', route, pid, path, data)\n\
\x20   if route != 'scan':\n\
\x20       print(f'{route} {pid}: refused', ' '.join(sorted(set(refused))) or 'nothing')\n\
\x20   elif not got:\n\
\x20       scan_refused += 1\n\
print('foreign', len(foreign), 'refused', scan_refused)\n";

/// `fs-proc-warden-*`: warden starts in the secret's directory with the canary in
/// its environment; its host pid is handed to the probe once it runs; the probe
/// tries every pid that could name warden. Contained when no attempt read
/// anything, the host pid was tried (and refused), the secret, warden's binary
/// and no audit record text appear, and, where the call has a pid namespace, the
/// tool's `/proc` lists no process but its own.
fn proc_warden(s: &Scene, what: &str) -> Observed {
    let ws = s.ws(&format!("ppid-{what}"));
    let log = s.base.join("logs").join(format!("ppid-{what}.jsonl"));
    let policy = s.policy_file(&Scene::shell_policy(SHELL_PROC));
    let p = policy.to_str().unwrap();
    if what == "fd" {
        // A record in the log first, so that an audit log opened through fd/N would show one.
        let first = s.warden_logged(&ws, &log, &["--policy", p, "call", "shell", r#"{"command":"true"}"#], None, None);
        if !first.success() {
            return Observed::new(false, format!("the first call failed: {}", first.brief()));
        }
    }
    std::fs::write(ws.join("probe.py"), PROC_WARDEN_PROBE).unwrap();
    let args = json!({ "command": format!("{PYTHON} probe.py {what} {}", s.secret_file.display()) }).to_string();
    let r = s.warden_with_pid(&ws, &log, &["--policy", p, "call", "shell", &args], Some(&s.outside));
    let out = r.out();
    let host = out.lines().find(|l| l.starts_with("host ")).unwrap_or("").to_string();
    // Refused, or (a pid number the host and the call's namespace happen to share) the tool's own process.
    let host_refused = (host.contains(": refused") && !host.ends_with("refused nothing"))
        || host.ends_with("names a process of the tool itself");
    let foreign_none = out.lines().any(|l| l.starts_with("foreign 0 "));
    let pid_ns = s.call_has("pid");
    let ok = r.success()
        && out.lines().any(|l| l == "host_pid True")
        && host_refused
        && !out.lines().any(|l| l.starts_with("READ "))
        && (!pid_ns || foreign_none)
        && !s.leaks(&r.all())
        && !out.contains(crate::scene::WARDEN)
        && !out.contains("\"prev\"")
        && !out.contains("args_sha256");
    let lines: Vec<&str> = out.lines().filter(|l| !l.starts_with("host_pid")).collect();
    Observed::new(
        ok,
        format!(
            "{}; {}",
            if pid_ns { "the call has a pid namespace" } else { "the call has no pid namespace" },
            if lines.is_empty() { r.brief() } else { crate::util::clip(&lines.join(", "), 400) }
        ),
    )
}

fn dev_kmsg(s: &Scene) -> Observed {
    let ws = s.ws("kmsg");
    let marker = format!("warden-escape-kmsg-{}", std::process::id());
    let r = s.shell(&ws, SHELL, &format!("echo {marker} > /dev/kmsg; echo done"));
    let refused = refusals(&r.err()) > 0;
    match kernel_log() {
        Some(log) => {
            let found = log.contains(&marker);
            Observed::new(r.success() && refused && !found, format!("{}; marker in the kernel log: {found}", r.brief()))
        }
        None => Observed::new(
            r.success() && refused,
            format!("{}; (the kernel log is not readable by the test: only the refusal is checked)", r.brief()),
        ),
    }
}

/// The kernel log's current records, read without blocking (None when unreadable).
fn kernel_log() -> Option<String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open("/dev/kmsg").ok()?;
    let mut all = String::new();
    let mut buf = vec![0u8; 16 << 10];
    for _ in 0..200_000 {
        match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => all.push_str(&String::from_utf8_lossy(&buf[..n])),
            // EPIPE: a record was overwritten while reading; keep going.
            Err(e) if e.raw_os_error() == Some(libc::EPIPE) => continue,
            Err(_) => break,
        }
    }
    Some(all)
}

/// A directory outside every workspace holding `keep.txt` ("KEEP", mode 0644).
fn ro_dir(s: &Scene, name: &str) -> (PathBuf, PathBuf) {
    let dir = s.side_dir(name);
    let file = dir.join("keep.txt");
    std::fs::write(&file, "KEEP").unwrap();
    set_mode(&file, 0o644);
    (dir, file)
}

fn ro_tool(dir: &Path) -> Tool<'static> {
    let read: &'static str = Box::leak(dir.display().to_string().into_boxed_str());
    Tool { read: Box::leak(Box::new([read])), net: &[], limits: "timeout = \"20s\"" }
}

fn ro_process(s: &Scene, name: &str, command: fn(&str, &str) -> String, denials: usize) -> Observed {
    let (dir, file) = ro_dir(s, name);
    let ws = s.ws(name);
    let cmd = command(&file.display().to_string(), &dir.display().to_string());
    let r = s.shell(&ws, ro_tool(&dir), &cmd);
    let intact = std::fs::read_to_string(&file).unwrap_or_default() == "KEEP";
    let listing: Vec<String> = std::fs::read_dir(&dir)
        .map(|d| d.filter_map(Result::ok).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    // A copy into the workspace is a read the grant allows (mv copies when the
    // rename crosses into the call's layer): only the original must stay.
    let stolen =
        ws.join("stolen.txt").exists() && std::fs::read_to_string(ws.join("stolen.txt")).unwrap_or_default() != "KEEP";
    let o = refused(s, &r, denials);
    Observed::new(
        o.contained && intact && listing == ["keep.txt"] && !stolen,
        format!("{}; file intact: {intact}; directory holds {listing:?}", o.observed),
    )
}

fn ro_chmod(s: &Scene) -> Observed {
    const LIMIT: &str = "File metadata is not confined by Landlock";
    let (dir, file) = ro_dir(s, "ro-chmod");
    let ws = s.ws("ro-chmod");
    let r = s.shell(&ws, ro_tool(&dir), &format!("id -u; chmod 777 {}; echo chmod=$?", file.display()));
    let uid0 = r.out().starts_with("0\n");
    let now = mode(&file);
    if now == 0o644 {
        // The read-only view refuses it at every uid (EROFS); without one, seccomp as uid 0 (EPERM).
        let refused = (r.err().contains("Read-only file system") || r.err().contains("Operation not permitted"))
            && r.out().contains("chmod=1");
        return Observed::new(r.success() && refused, format!("{}; mode still {now:o}", r.brief()));
    }
    if uid0 || s.call_has("mount") {
        return Observed::new(false, format!("{}; the mode changed to {now:o}", r.brief()));
    }
    // Without a mount namespace, an ordinary uid that owns the file may change its mode: the documented limit.
    Observed::limit(LIMIT, true, format!("{}; the owner (not uid 0) changed the mode to {now:o}", r.brief()))
}

/// `fs-metadata-outside`: a file the uid owns, granted to nothing.
fn metadata_outside(s: &Scene) -> Observed {
    use std::os::unix::fs::MetadataExt;
    let dir = s.side_dir("meta-outside");
    let file = dir.join("owned.txt");
    std::fs::write(&file, "KEEP").unwrap();
    set_mode(&file, 0o644);
    let _ = rustix::fs::setxattr(file.as_path(), "user.kept", b"1", rustix::fs::XattrFlags::empty());
    let before = std::fs::metadata(&file).unwrap();
    let xattr = |p: &Path| {
        let mut buf = [0u8; 512];
        rustix::fs::listxattr(p, &mut buf[..]).map(|n| buf[..n].to_vec()).unwrap_or_default()
    };
    let x_before = xattr(&file);
    let f = file.display();
    let ws = s.ws("meta-outside");
    let r = s.shell(
        &ws,
        SHELL,
        &format!(
            "chmod 600 {f}; echo chmod=$?; chown $(id -u):$(id -g) {f}; echo chown=$?; touch -d 2001-01-01 {f}; \
             echo utime=$?; {PYTHON} -c 'import os,sys\nfor op in (lambda: os.setxattr(sys.argv[1], \"user.x\", b\"y\"), \
             lambda: os.removexattr(sys.argv[1], \"user.kept\")):\n  try: op(); print(\"xattr=0\")\n  except OSError as e: \
             print(\"xattr=1\", e.strerror)' {f}"
        ),
    );
    let after = std::fs::metadata(&file).unwrap();
    let unchanged = after.mode() == before.mode()
        && after.mtime() == before.mtime()
        && after.uid() == before.uid()
        && xattr(&file) == x_before;
    let out = r.out();
    let all_refused = ["chmod=1", "chown=1", "utime=1"].iter().all(|w| out.contains(w)) && !out.contains("xattr=0");
    Observed::new(r.success() && unchanged && all_refused, format!("{}; unchanged on the host: {unchanged}", r.brief()))
}

fn ro_verdict(s: &Scene, r: &warden::CallResponse, file: &Path, extra: &[PathBuf]) -> Observed {
    let intact = std::fs::read_to_string(file).unwrap_or_default() == "KEEP";
    let made = extra.iter().any(|p| p.exists());
    Observed::new(
        r.error.is_some() && intact && !made && !s.leaks(&text(r)),
        format!("{}; file intact: {intact}", brief(r)),
    )
}

fn ro_builtin(s: &Scene, tool: &'static str, args: fn(&Path, &Path) -> serde_json::Value) -> Observed {
    let (dir, file) = ro_dir(s, &format!("ro-{tool}"));
    let k = s.kit(
        &format!("ro-{tool}"),
        &format!("[tools.{tool}]\nplugin = \"fs\"\nfs.read = [{:?}]\n", dir.display().to_string()),
    );
    let r = k.call(tool, args(&file, &dir));
    ro_verdict(s, &r, &file, &[dir.join("moved.txt")])
}

/// The grant-swap attack: `writer` plants `{workspace}/sub` -> the secret's directory,
/// then `victim` (granted `{workspace}/sub` only) reads `sub/secret.txt`.
fn grant_swap(s: &Scene, victim: &str, kind: &str) -> Observed {
    let ws = s.ws(&format!("grant-swap-{kind}"));
    std::fs::create_dir(ws.join("sub")).unwrap();
    let policy = s.policy_file(
        "version = 1\n[plugins.fs]\nsource = \"builtin:fs\"\n\
         [tools.writer]\nexec = [\"/bin/bash\", \"-c\", \"{command}\"]\ntier = \"auto\"\n\
         fs.read = [\"{system}\", \"{workspace}\"]\nfs.write = [\"{workspace}\"]\n\
         [tools.reader]\nexec = [\"/bin/bash\", \"-c\", \"{command}\"]\ntier = \"auto\"\n\
         fs.read = [\"{system}\", \"{workspace}/sub\"]\n\
         [tools.read_file]\nplugin = \"fs\"\ntier = \"auto\"\nfs.read = [\"{workspace}/sub\"]\n",
    );
    let p = policy.to_str().unwrap();
    let plant = json!({ "command": format!("rm -rf sub && ln -s {} sub && echo planted", s.outside.display()) });
    let planted = s.warden(&ws, &["--policy", p, "call", "writer", &plant.to_string()], None, None);
    if !planted.out().contains("planted") {
        return Observed::new(false, format!("the link could not be planted: {}", planted.brief()));
    }
    let args = if victim == "reader" {
        json!({ "command": format!("cat {}/sub/secret.txt", ws.display()) })
    } else {
        json!({ "path": "sub/secret.txt" })
    };
    let r = s.warden(&ws, &["--policy", p, "call", victim, &args.to_string()], None, None);
    let refused = r.error_code() == "PERMISSION_DENIED" && r.error_message().contains("symbolic link");
    Observed::new(refused && !s.leaks(&r.all()), r.brief())
}

/// `fs-host-shm-proc`: the host's `/dev/shm` and `/proc/1` from inside a call.
fn host_shm_proc(s: &Scene) -> Observed {
    let shm = Path::new("/dev/shm");
    if !shm.is_dir() {
        return Observed::skipped("no /dev/shm on this host");
    }
    let tag = format!("warden-escape-{}-{}", std::process::id(), s.secret.len());
    let planted = shm.join(format!("{tag}-host"));
    let written = shm.join(format!("{tag}-tool"));
    std::fs::write(&planted, &s.secret).unwrap();
    set_mode(&planted, 0o644);
    let host_init = std::fs::read("/proc/1/cmdline").unwrap_or_default();
    let ws = s.ws("host-shm");
    let r = s.python(
        &ws,
        SHELL_PROC,
        &format!(
            "import os\n\
             def show(name, f):\n\
             \x20   try:\n\
             \x20       print(name, repr(f()))\n\
             \x20   except OSError as e:\n\
             \x20       print(name, 'refused', e.errno)\n\
             show('planted', lambda: open('{planted}').read())\n\
             show('listing', lambda: sorted(n for n in os.listdir('/dev/shm') if n.startswith('{tag}')))\n\
             show('write', lambda: open('{written}', 'w').write('from the tool'))\n\
             show('cmdline', lambda: open('/proc/1/cmdline', 'rb').read().hex())\n\
             home = ('HOME=' + os.environ['HOME']).encode()\n\
             show('environ_call', lambda: home in open('/proc/1/environ', 'rb').read().split(bytes(1)))\n\
             show('root_shm', lambda: sorted(n for n in os.listdir('/proc/1/root/dev/shm') if n.startswith('{tag}')))\n\
             show('root_planted', lambda: open('/proc/1/root{planted}').read())\n",
            planted = planted.display(),
            written = written.display(),
        ),
        "true",
    );
    let reached = written.exists();
    let _ = std::fs::remove_file(&written);
    let _ = std::fs::remove_file(&planted);
    let out = r.out();
    let value = |name: &str| out.lines().find_map(|l| l.strip_prefix(&format!("{name} "))).unwrap_or("").to_string();
    let host_cmdline = String::from_utf8_lossy(&host_init).replace('\0', " ");
    // /proc/1 must not be the host's init: its cmdline differs from the one the host reads (or is refused).
    let cmdline = value("cmdline");
    let not_host_init = cmdline.starts_with("refused")
        || (!host_init.is_empty() && cmdline.trim_matches('\'') != hex::encode(&host_init));
    // When read, /proc/1 is a process of the call's: its init, warden's helper
    // (started with an empty environment), or the tool (its HOME is the call's {tmp}).
    let environ = value("environ_call");
    let helper = hex::encode(b"--warden-sandbox-helper");
    let call_init = cmdline.contains(&helper) && environ == "False";
    let ok = r.success()
        && !reached
        && value("planted").starts_with("refused")
        && (value("listing") == "[]" || value("listing").starts_with("refused"))
        && not_host_init
        && (environ == "True" || environ.starts_with("refused") || call_init)
        && !value("root_shm").contains(&format!("{tag}-host"))
        && value("root_planted").starts_with("refused")
        && !s.leaks(&r.all());
    Observed::new(
        ok,
        format!(
            "{}; the host's init: {}; the tool's file on the host's /dev/shm: {reached}",
            out.lines().collect::<Vec<_>>().join(", "),
            crate::util::clip(host_cmdline.trim(), 60)
        ),
    )
}
