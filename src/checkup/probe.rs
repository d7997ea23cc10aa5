//! The escape probe: `warden --warden-probe CASE [ARG]`, run by the self-test
//! as a process tool inside the policy's real sandbox. Each case really makes
//! the attempt with the raw call an attacker would use, and prints one line:
//! `refused: WHY` when the sandbox stopped it, `escaped: WHAT` when it worked.
//! Checked first in `main`, before any thread or runtime exists.

#![allow(unsafe_code)]

use std::io::Write;

/// The argument that turns `warden` into the probe.
pub const PROBE_ARG: &str = "--warden-probe";

fn report(escaped: bool, what: impl std::fmt::Display) -> ! {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{}: {what}", if escaped { "escaped" } else { "refused" });
    let _ = out.flush();
    std::process::exit(0)
}

fn errno() -> std::io::Error {
    std::io::Error::last_os_error()
}

/// Runs the case named after [`PROBE_ARG`] and exits.
pub fn run_main() -> ! {
    let args: Vec<String> = std::env::args().skip(2).collect();
    let arg = args.get(1).cloned().unwrap_or_default();
    match args.first().map(String::as_str).unwrap_or("") {
        "read" => match std::fs::read(&arg) {
            Ok(b) => report(true, format!("read {} bytes of {arg}", b.len())),
            Err(e) => report(false, e),
        },
        "write" => match std::fs::write(&arg, "escaped") {
            Ok(()) => report(true, format!("wrote {arg}")),
            Err(e) => report(false, e),
        },
        "connect" => match std::net::TcpStream::connect(&arg) {
            Ok(_) => report(true, format!("connected to {arg}")),
            Err(e) => report(false, e),
        },
        "userns" => match nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWUSER) {
            Ok(()) => report(true, "created a user namespace"),
            Err(e) => report(false, e),
        },
        "ptrace" => ptrace(&arg),
        "io_uring" => io_uring(),
        "fork" => fork(&arg),
        "memory" => memory(&arg),
        "daemon" => daemon(&arg),
        "flood" => flood(&arg),
        "prlimit" => prlimit(&arg),
        other => report(false, format!("unknown probe case {other:?}")),
    }
}

/// Attaches to warden (pid `arg`, else the parent) with `PTRACE_ATTACH`.
fn ptrace(arg: &str) -> ! {
    // warden's pid as warden sees it (in a pid namespace of the call's
    // own it names nothing, or something else, and getppid() says 0).
    let parent: i32 = arg.parse().unwrap_or_else(|_| nix::unistd::getppid().as_raw());
    // SAFETY: PTRACE_ATTACH takes a pid and ignores the address and data arguments.
    let r = unsafe { libc::ptrace(libc::PTRACE_ATTACH, parent, 0, 0) };
    if r == 0 {
        // SAFETY: as above; let the parent go at once.
        unsafe { libc::ptrace(libc::PTRACE_DETACH, parent, 0, 0) };
        report(true, format!("attached to pid {parent}"));
    }
    report(false, errno())
}

/// Creates an io_uring instance.
fn io_uring() -> ! {
    let mut params = [0u8; 120]; // struct io_uring_params
    // SAFETY: io_uring_setup(entries, params) writes at most sizeof(io_uring_params) = 120 bytes.
    let fd = unsafe { libc::syscall(libc::SYS_io_uring_setup, 4, params.as_mut_ptr()) };
    if fd >= 0 {
        report(true, "created an io_uring instance");
    }
    report(false, errno())
}

/// Forks `arg` (default 10,000) children that stay alive.
fn fork(arg: &str) -> ! {
    let limit: u32 = arg.parse().unwrap_or(10_000);
    for n in 0..limit {
        // SAFETY: the probe is single-threaded; the child only calls pause(), which is async-signal-safe.
        match unsafe { libc::fork() } {
            0 => loop {
                // SAFETY: pause has no preconditions.
                unsafe { libc::pause() };
            },
            -1 => report(false, format!("fork refused after {n} children: {}", errno())),
            _ => {}
        }
    }
    report(true, format!("forked {limit} children"))
}

/// Maps `arg` bytes (default 8 GiB) of anonymous memory.
fn memory(arg: &str) -> ! {
    let bytes: usize = arg.parse().unwrap_or(8 << 30);
    // SAFETY: an anonymous private mapping with no address hint; it is unmapped if it succeeds.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        report(false, errno());
    }
    // SAFETY: p is the mapping just created, of `bytes` bytes.
    unsafe { libc::munmap(p, bytes) };
    report(true, format!("mapped {bytes} bytes"))
}

/// Forks a child that tries to leave the session (`setsid`) and stays alive,
/// holding a lock on the file `arg` it writes its pid to.
fn daemon(arg: &str) -> ! {
    // SAFETY: single-threaded; the child only calls async-signal-safe functions before it sleeps.
    match unsafe { libc::fork() } {
        0 => {
            // SAFETY: setsid has no preconditions; its failure is what the sandbox should cause.
            let detached = unsafe { libc::setsid() } >= 0;
            let note = format!("{} {}", std::process::id(), if detached { "detached" } else { "attached" });
            // Held for as long as this process lives: the host's proof of life
            // (a pid means nothing outside the call's pid namespace).
            let held = std::fs::write(arg, note).and_then(|()| std::fs::File::open(arg));
            if let Ok(f) = &held {
                let _ = rustix::fs::flock(f, rustix::fs::FlockOperation::LockExclusive);
            }
            loop {
                // SAFETY: pause has no preconditions.
                unsafe { libc::pause() };
            }
        }
        -1 => report(false, format!("fork refused: {}", errno())),
        _ => loop {
            // SAFETY: pause has no preconditions; the parent outlives its timeout.
            unsafe { libc::pause() };
        },
    }
}

/// Writes `arg` bytes (default 64 MiB) to stdout.
fn flood(arg: &str) -> ! {
    let bytes: usize = arg.parse().unwrap_or(64 << 20);
    let chunk = vec![b'x'; 1 << 16];
    let mut out = std::io::stdout().lock();
    let mut written = 0;
    while written < bytes {
        if out.write_all(&chunk).is_err() {
            break;
        }
        written += chunk.len();
    }
    std::process::exit(0)
}

/// Sets `RLIMIT_FSIZE` to 0 on warden (pid `arg`, else the parent).
fn prlimit(arg: &str) -> ! {
    // warden's pid as warden sees it (in a pid namespace of the call's
    // own it names nothing, or something else, and getppid() says 0).
    let parent: i32 = arg.parse().unwrap_or_else(|_| nix::unistd::getppid().as_raw());
    let zero = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: prlimit64 reads one rlimit struct from a valid pointer and writes nothing (old is NULL).
    let r = unsafe { libc::syscall(libc::SYS_prlimit64, parent, libc::RLIMIT_FSIZE, &zero, 0usize) };
    if r == 0 {
        report(true, format!("set RLIMIT_FSIZE = 0 on warden (pid {parent})"));
    }
    report(false, errno())
}
