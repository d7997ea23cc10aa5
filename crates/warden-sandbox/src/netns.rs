//! The call's network namespace: only loopback ([`loopback_up`]), and one
//! listening socket on [`PROXY_ADDR`] ([`proxy_listener`]) that the helper sends
//! to warden over its report channel ([`send_listener`]; the host's side is
//! [`recv_listener`], a marker byte `P` with the descriptor or `N` without) and
//! then closes: warden's egress proxy accepts on it from the host namespace and
//! is the one way out. docs/security.md, "Network: one way out", has the rest.

use std::os::fd::AsRawFd;

/// The marker byte sent with the proxy's listening socket.
const WITH_LISTENER: u8 = b'P';
/// The marker byte sent when there is none.
const WITHOUT_LISTENER: u8 = b'N';

/// Brings the namespace's loopback interface up (`SIOCSIFFLAGS` on `lo`).
/// Needs `CAP_NET_ADMIN` in the namespace's owning user namespace.
pub fn loopback_up() -> Result<(), String> {
    let sock = std::net::UdpSocket::bind("0.0.0.0:0")
        .or_else(|_| std::net::UdpSocket::bind("[::]:0"))
        .map_err(|e| format!("cannot open a socket to configure lo: {e}"))?;
    // SAFETY: `ifreq` is plain data; zeroed is a valid value.
    #[allow(unsafe_code)]
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *dst = *src as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS reads the flags of the interface named in `req` into it;
    // `req` is a valid, live `ifreq` for the duration of the call.
    #[allow(unsafe_code)]
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) } != 0 {
        return Err(format!("cannot read lo's flags: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: the flags member of the union, just filled by SIOCGIFFLAGS.
    #[allow(unsafe_code)]
    unsafe {
        req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
    }
    // SAFETY: SIOCSIFFLAGS reads `req` (name and flags); it stays valid for the call.
    #[allow(unsafe_code)]
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req) } != 0 {
        return Err(format!("cannot bring lo up: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Where the proxy listens inside the call's network namespace.
pub const PROXY_ADDR: std::net::SocketAddrV4 = std::net::SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, 3128);

/// The proxy's listening socket at [`PROXY_ADDR`], in the
/// namespace the caller is in (close-on-exec).
pub fn proxy_listener() -> Result<std::net::TcpListener, String> {
    std::net::TcpListener::bind(PROXY_ADDR)
        .map_err(|e| format!("cannot listen on {} for warden's proxy: {e}", PROXY_ADDR))
}

/// Sends `listener` (or, with `None`, only the marker that there is none) on
/// the helper's report channel.
pub fn send_listener(channel: &impl AsRawFd, listener: Option<&std::net::TcpListener>) -> Result<(), String> {
    let marker = if listener.is_some() { WITH_LISTENER } else { WITHOUT_LISTENER };
    crate::fdpass::send(channel, marker, listener.map(AsRawFd::as_raw_fd))
        .map_err(|e| format!("cannot hand warden the proxy's socket: {e}"))
}

/// What [`recv_listener`] read.
pub enum Received {
    /// The proxy's listening socket.
    Listener(std::net::TcpListener),
    /// The helper had none (its report says why).
    None,
    /// Not a marker: the first byte of the helper's report, to be read with the rest.
    Report(u8),
}

/// Reads the marker (and the socket) the helper sends, waiting at most `timeout`.
pub fn recv_listener(
    channel: &std::os::unix::net::UnixStream,
    timeout: std::time::Duration,
) -> Result<Received, String> {
    let _ = channel.set_read_timeout(Some(timeout));
    let got = crate::fdpass::recv(channel)
        .map_err(|e| format!("no word from the sandbox helper about the proxy's socket: {e}"));
    let _ = channel.set_read_timeout(None);
    let crate::fdpass::Received { marker, fd } = got?;
    Ok(match (marker, fd) {
        (None, _) => Received::None,
        (Some(WITH_LISTENER), Some(fd)) => Received::Listener(std::net::TcpListener::from(fd)),
        (Some(WITH_LISTENER | WITHOUT_LISTENER), _) => Received::None,
        (Some(other), _) => Received::Report(other),
    })
}
