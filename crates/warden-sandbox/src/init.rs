//! pid 1 of a call's pid namespace ([`run`]): starts the tool as its child,
//! forwards the signals it is sent, reaps every process orphaned to it, and
//! hands the tool's own wait status to the monitor outside, so the call ends as
//! the tool ended. Without it the tool would be pid 1, and the kernel drops the
//! signals a namespace's init has no handler for (`abort()` went on). See
//! docs/security.md, "The tool may not signal its process group".

use std::os::fd::{AsRawFd, OwnedFd};

use nix::sys::signal::{SigSet, SigmaskHow, Signal};

/// The signals forwarded to the tool when they reach its init.
const FORWARDED: [Signal; 9] = [
    Signal::SIGTERM,
    Signal::SIGINT,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
    Signal::SIGWINCH,
    Signal::SIGCONT,
    Signal::SIGALRM,
];

/// Forks: the child (the tool) returns from this function through `start`,
/// which execs it; this process becomes the init and never returns.
pub fn run(status: OwnedFd, start: impl FnOnce() -> std::convert::Infallible) -> ! {
    let mut set = SigSet::empty();
    for s in FORWARDED {
        set.add(s);
    }
    set.add(Signal::SIGCHLD);
    // Blocked before the fork, so no signal meant for the tool is lost in between.
    if nix::sys::signal::pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&set), None).is_err() {
        std::process::exit(126);
    }
    // SAFETY: the helper is single-threaded, so the child may run any code.
    #[allow(unsafe_code)]
    let forked = unsafe { nix::unistd::fork() };
    match forked {
        Ok(nix::unistd::ForkResult::Child) => {
            drop(status);
            // `start` clears the mask before it execs the tool.
            match start() {}
        }
        Ok(nix::unistd::ForkResult::Parent { child }) => watch(child, status, &set),
        Err(_) => std::process::exit(126),
    }
}

/// The init's loop: forward, reap, and end with the tool.
fn watch(child: nix::unistd::Pid, status: OwnedFd, set: &SigSet) -> ! {
    // Nothing of the tool's: stdio, the report socket and the progress pipe are its alone.
    let keep = status.as_raw_fd() as u32;
    // SAFETY: close_range on descriptors of this single-threaded process other than `status`.
    #[allow(unsafe_code)]
    unsafe {
        if keep > 0 {
            libc::syscall(libc::SYS_close_range, 0u32, keep - 1, 0u32);
        }
        libc::syscall(libc::SYS_close_range, keep + 1, u32::MAX, 0u32);
    }
    loop {
        let Ok(sig) = set.wait() else { continue };
        if sig != Signal::SIGCHLD {
            let _ = nix::sys::signal::kill(child, sig);
            continue;
        }
        loop {
            let mut raw: libc::c_int = 0;
            // SAFETY: waitpid writes the status into a local integer.
            #[allow(unsafe_code)]
            let pid = unsafe { libc::waitpid(-1, &mut raw, libc::WNOHANG) };
            if pid <= 0 {
                break;
            }
            if pid == child.as_raw() {
                let bytes = raw.to_le_bytes();
                // SAFETY: a write of four bytes from a local array to a pipe this process owns.
                #[allow(unsafe_code)]
                unsafe {
                    libc::write(status.as_raw_fd(), bytes.as_ptr().cast(), bytes.len());
                }
                std::process::exit(0);
            }
        }
    }
}
