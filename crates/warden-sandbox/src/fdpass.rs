//! Handing one descriptor over the helper's channel: a marker byte, with the
//! descriptor as `SCM_RIGHTS` or without one. The one place that turns a
//! received descriptor number into an owned one.

use std::io::{IoSlice, IoSliceMut};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use nix::sys::socket::{ControlMessage, ControlMessageOwned, MsgFlags, recvmsg, sendmsg};

/// Sends `marker`, with `fd` when there is one.
pub fn send(channel: &impl AsRawFd, marker: u8, fd: Option<RawFd>) -> nix::Result<()> {
    let fds = fd.map(|f| [f]);
    let marker = [marker];
    let iov = [IoSlice::new(&marker)];
    let cmsg: Vec<ControlMessage<'_>> = fds.as_ref().map(|f| ControlMessage::ScmRights(f)).into_iter().collect();
    sendmsg::<()>(channel.as_raw_fd(), &iov, &cmsg, MsgFlags::empty(), None)?;
    Ok(())
}

/// What [`recv`] read: the marker byte (`None` at end of stream) and the
/// first descriptor that came with it (close-on-exec; any further ones are closed).
pub struct Received {
    /// The byte, or `None` when the peer closed the channel.
    pub marker: Option<u8>,
    /// The descriptor sent with it.
    pub fd: Option<OwnedFd>,
}

/// Reads one marker byte and the descriptor sent with it (retrying `EINTR`).
pub fn recv(channel: &impl AsRawFd) -> Result<Received, String> {
    let mut byte = [0u8; 1];
    let mut space = nix::cmsg_space!([RawFd; 1]);
    loop {
        let mut iov = [IoSliceMut::new(&mut byte)];
        match recvmsg::<()>(channel.as_raw_fd(), &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC) {
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e.to_string()),
            Ok(msg) => {
                let mut fd = None;
                for c in msg.cmsgs().map_err(|e| format!("a malformed control message: {e}"))? {
                    if let ControlMessageOwned::ScmRights(fds) = c {
                        for raw in fds {
                            // SAFETY: the kernel just installed `raw` in this process for this
                            // message; nothing else owns it (a second one is closed on drop).
                            #[allow(unsafe_code)]
                            let owned = unsafe { OwnedFd::from_raw_fd(raw) };
                            fd.get_or_insert(owned);
                        }
                    }
                }
                let marker = (msg.bytes == 1).then_some(byte[0]);
                return Ok(Received { marker, fd });
            }
        }
    }
}
