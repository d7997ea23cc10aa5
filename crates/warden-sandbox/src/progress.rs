//! The tool's progress descriptor (`WARDEN_PROGRESS_FD`) on its way from the
//! host to the helper: the host sends the pipe's write end after the spec
//! ([`send_fd`]); the helper receives it inside the call's namespaces
//! ([`recv_fd`]) and names it to the tool. The host reads the other end.

use std::os::fd::{AsRawFd, OwnedFd};

/// The environment variable that names the descriptor.
pub const PROGRESS_ENV: &str = "WARDEN_PROGRESS_FD";
/// The marker byte sent with the descriptor over the helper socket.
const WITH_FD: u8 = b'F';

/// Sends `fd` to the helper on its socket, with a marker byte.
pub fn send_fd(channel: &impl AsRawFd, fd: &OwnedFd, what: &str) -> Result<(), String> {
    crate::fdpass::send(channel, WITH_FD, Some(fd.as_raw_fd()))
        .map_err(|e| format!("cannot hand the helper {what}: {e}"))
}

/// Receives the descriptor [`send_fd`] sent (close-on-exec until the helper
/// clears it for the tool).
pub fn recv_fd(channel: &impl AsRawFd, what: &str) -> Result<OwnedFd, String> {
    match crate::fdpass::recv(channel).map_err(|e| format!("cannot receive {what}: {e}"))? {
        crate::fdpass::Received { marker: Some(WITH_FD), fd: Some(fd) } => Ok(fd),
        _ => Err(format!("warden did not send {what}")),
    }
}
