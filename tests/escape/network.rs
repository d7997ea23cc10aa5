//! Network escapes: TCP, UDP, MPTCP, raw, packet and netlink sockets, abstract
//! and pathname unix sockets, DNS; without a grant, and beside one.

use std::net::{TcpListener, UdpSocket};
use std::os::unix::net::UnixListener;

use serde_json::json;

use crate::scene::{Run, SHELL, Tool, brief, code};
use crate::{Case, Observed, Scene};

const CLASS: &str = "network";

fn c(
    id: &'static str,
    runtime: &'static str,
    attempt: &'static str,
    expected: &'static str,
    run: fn(&Scene) -> Observed,
) -> Case {
    Case { id, class: CLASS, runtime, attempt, expected, heavy: false, run }
}

/// A TCP listener that records whether anything connected.
struct Tcp(TcpListener);

impl Tcp {
    fn new() -> Tcp {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.set_nonblocking(true).unwrap();
        Tcp(l)
    }
    fn port(&self) -> u16 {
        self.0.local_addr().unwrap().port()
    }
    /// Connections waiting (a connect completes in the kernel before the call returns).
    fn arrived(&self) -> usize {
        let mut n = 0;
        while self.0.accept().is_ok() {
            n += 1;
        }
        n
    }
}

struct Udp(UdpSocket);

impl Udp {
    fn new() -> Udp {
        let u = UdpSocket::bind("127.0.0.1:0").unwrap();
        u.set_nonblocking(true).unwrap();
        Udp(u)
    }
    fn port(&self) -> u16 {
        self.0.local_addr().unwrap().port()
    }
    fn arrived(&self) -> usize {
        let mut n = 0;
        while self.0.recv_from(&mut [0u8; 512]).is_ok() {
            n += 1;
        }
        n
    }
}

fn unix_arrived(l: &UnixListener) -> usize {
    let mut n = 0;
    while l.accept().is_ok() {
        n += 1;
    }
    n
}

/// The probe's prelude: `attempt(name, fn)` prints `name refused ERRNO` or `name ESCAPED`.
const PRELUDE: &str = "import socket, errno\n\
def attempt(name, fn):\n\
\x20   try:\n\
\x20       fn()\n\
\x20       print(name, 'ESCAPED')\n\
\x20   except OSError as e:\n\
\x20       print(name, 'refused', errno.errorcode.get(e.errno, e.errno))\n";

fn probe(s: &Scene, id: &str, tool: Tool<'_>, body: &str) -> Run {
    let ws = s.ws(id);
    s.python(&ws, tool, &format!("{PRELUDE}{body}"), "true")
}

/// Every attempt refused with `errno` (as many as `n`), nothing escaped, nothing arrived.
fn judged(r: &Run, errno: &str, n: usize, arrived: usize) -> Observed {
    let out = r.out();
    let refusals = out.matches(&format!("refused {errno}")).count();
    let ok = r.success() && refusals >= n && !out.contains("ESCAPED") && arrived == 0;
    Observed::new(ok, format!("{}; arrived at the listener: {arrived}", r.brief()))
}

fn granted(port: u16) -> Tool<'static> {
    let net: &'static str = Box::leak(format!("127.0.0.1:{port}").into_boxed_str());
    Tool { read: &[], net: Box::leak(Box::new([net])), limits: "timeout = \"20s\"" }
}

pub(crate) fn cases() -> Vec<Case> {
    vec![
        c(
            "net-tcp/process",
            "process",
            "connect to a local TCP listener: bash /dev/tcp, python AF_INET and AF_INET6 (no network grant)",
            "socket() refused with EPERM (seccomp); the listener sees no connection",
            |s| {
                let l = Tcp::new();
                let p = l.port();
                let ws = s.ws("tcp");
                let bash = s.shell(&ws, SHELL, &format!("echo x > /dev/tcp/127.0.0.1/{p} && echo CONNECTED"));
                let r = probe(
                    s,
                    "tcp-py",
                    SHELL,
                    &format!(
                        "attempt('tcp', lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM).connect(('127.0.0.1', {p})))\n\
                         attempt('tcp6', lambda: socket.socket(socket.AF_INET6, socket.SOCK_STREAM).connect(('::ffff:127.0.0.1', {p})))\n"
                    ),
                );
                let o = judged(&r, "EPERM", 2, l.arrived());
                let bash_ok = bash.success() && !bash.out().contains("CONNECTED");
                Observed::new(o.contained && bash_ok, format!("bash: {}; python: {}", bash.brief(), o.observed))
            },
        ),
        c(
            "net-udp/process",
            "process",
            "send a UDP datagram to a local receiver (no network grant)",
            "socket() refused with EPERM; nothing received",
            |s| {
                let u = Udp::new();
                let r = probe(
                    s,
                    "udp",
                    SHELL,
                    &format!(
                        "attempt('udp', lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('127.0.0.1', {})))\n",
                        u.port()
                    ),
                );
                judged(&r, "EPERM", 1, u.arrived())
            },
        ),
        c(
            "net-mptcp/process",
            "process",
            "connect with an MPTCP socket (IPPROTO_MPTCP = 262), which Landlock's TCP rules do not cover",
            "socket() refused with EPERM; the listener sees no connection",
            |s| {
                let l = Tcp::new();
                let r = probe(
                    s,
                    "mptcp",
                    SHELL,
                    &format!(
                        "attempt('mptcp', lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM, 262).connect(('127.0.0.1', {})))\n",
                        l.port()
                    ),
                );
                judged(&r, "EPERM", 1, l.arrived())
            },
        ),
        c("net-raw/process", "process", "open raw IPv4 (ICMP) and raw IPv6 sockets", "EPERM for both", |s| {
            let r = probe(
                s,
                "raw",
                SHELL,
                "attempt('raw4', lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP))\n\
                     attempt('raw6', lambda: socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6))\n",
            );
            judged(&r, "EPERM", 2, 0)
        }),
        c(
            "net-packet/process",
            "process",
            "open AF_PACKET sockets (raw and datagram, ETH_P_ALL)",
            "EPERM for both",
            |s| {
                let r = probe(
                    s,
                    "packet",
                    SHELL,
                    "attempt('packet', lambda: socket.socket(17, socket.SOCK_RAW, 0x0300))\n\
                     attempt('packet_dgram', lambda: socket.socket(17, socket.SOCK_DGRAM, 0x0300))\n",
                );
                judged(&r, "EPERM", 2, 0)
            },
        ),
        c(
            "net-netlink/process",
            "process",
            "open netlink sockets (route, audit, uevent) to talk to the kernel",
            "EPERM for each",
            |s| {
                let r = probe(
                    s,
                    "netlink",
                    SHELL,
                    "attempt('route', lambda: socket.socket(16, socket.SOCK_RAW, 0))\n\
                     attempt('audit', lambda: socket.socket(16, socket.SOCK_RAW, 9))\n\
                     attempt('uevent', lambda: socket.socket(16, socket.SOCK_DGRAM, 15))\n",
                );
                judged(&r, "EPERM", 3, 0)
            },
        ),
        c(
            "net-unix-abstract/process",
            "process",
            "connect to an abstract unix socket that a host daemon listens on",
            "socket(AF_UNIX) refused with EPERM; the daemon sees no connection",
            |s| {
                use std::os::linux::net::SocketAddrExt;
                let name = format!("warden-escape-{}", std::process::id());
                let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
                let l = UnixListener::bind_addr(&addr).unwrap();
                l.set_nonblocking(true).unwrap();
                let r = probe(
                    s,
                    "abstract",
                    SHELL,
                    &format!(
                        "attempt('abstract', lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).connect('\\0{name}'))\n"
                    ),
                );
                judged(&r, "EPERM", 1, unix_arrived(&l))
            },
        ),
        c(
            "net-unix-path/process",
            "process",
            "connect to a pathname unix socket outside every grant (like /run/docker.sock); also /dev/log",
            "EPERM (Landlock would not look at connect(); seccomp refuses the socket); nothing arrives",
            |s| {
                let path = s.side_dir("daemon").join("daemon.sock");
                let l = UnixListener::bind(&path).unwrap();
                l.set_nonblocking(true).unwrap();
                let r = probe(
                    s,
                    "unix-path",
                    SHELL,
                    &format!(
                        "attempt('daemon', lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).connect({:?}))\n\
                         attempt('devlog', lambda: socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).connect('/dev/log'))\n",
                        path.display().to_string()
                    ),
                );
                judged(&r, "EPERM", 2, unix_arrived(&l))
            },
        ),
        c(
            "net-dns/process",
            "process",
            "resolve a name (getaddrinfo) and send a raw DNS query to a local fake resolver",
            "the lookup fails, the query's socket is EPERM; the resolver receives nothing",
            |s| {
                let u = Udp::new();
                let r = probe(
                    s,
                    "dns",
                    SHELL,
                    &format!(
                        "try:\n\
                         \x20   print('resolved', socket.getaddrinfo('escape-canary.example.com', 80))\n\
                         \x20   print('ESCAPED')\n\
                         except OSError as e:\n\
                         \x20   print('lookup failed', e)\n\
                         q = b'\\x12\\x34\\x01\\x00\\x00\\x01\\x00\\x00\\x00\\x00\\x00\\x00\\x07example\\x03com\\x00\\x00\\x01\\x00\\x01'\n\
                         attempt('dns', lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(q, ('127.0.0.1', {})))\n",
                        u.port()
                    ),
                );
                let o = judged(&r, "EPERM", 1, u.arrived());
                Observed::new(o.contained && r.out().contains("lookup failed"), o.observed)
            },
        ),
        c(
            "net-tcp-other-port/process",
            "process",
            "with net.connect = 127.0.0.1:A, connect to port B on the same host (and to A, as a control)",
            "B refused by Landlock (EACCES); A connects; B's listener sees nothing",
            |s| {
                let (a, b) = (Tcp::new(), Tcp::new());
                let r = probe(
                    s,
                    "tcp-other",
                    granted(a.port()),
                    &format!(
                        "attempt('other', lambda: socket.socket().connect(('127.0.0.1', {})))\n\
                         try:\n\
                         \x20   socket.socket().connect(('127.0.0.1', {}))\n\
                         \x20   print('granted ok')\n\
                         except OSError as e:\n\
                         \x20   print('granted failed', e)\n",
                        b.port(),
                        a.port()
                    ),
                );
                let o = judged(&r, "EACCES", 1, b.arrived());
                let control = r.out().contains("granted ok") && a.arrived() == 1;
                Observed::new(o.contained && control, format!("{}; the granted port worked: {control}", o.observed))
            },
        ),
        c(
            "net-tcp-listen/process",
            "process",
            "with a network grant, bind and listen on a TCP port (to be reached from outside)",
            "bind() refused with EPERM (seccomp: no bind without UDP; Landlock also handles TCP bind and allows it on no port)",
            |s| {
                let a = Tcp::new();
                let r = probe(
                    s,
                    "tcp-listen",
                    granted(a.port()),
                    "def listen(port):\n\
                     \x20   x = socket.socket()\n\
                     \x20   x.bind(('127.0.0.1', port))\n\
                     \x20   x.listen()\n\
                     attempt('bind0', lambda: listen(0))\n\
                     attempt('bind', lambda: listen(47321))\n",
                );
                judged(&r, "EPERM", 2, 0)
            },
        ),
        c(
            "net-tcp-listen-autobind/process",
            "process",
            "with a network grant, listen() on a socket never bound (the kernel would bind it to an ephemeral port on every address)",
            "listen() refused with EPERM (seccomp: the tool shares the host's network); nothing listens",
            |s| {
                let a = Tcp::new();
                let r = probe(
                    s,
                    "tcp-autobind",
                    granted(a.port()),
                    "def autobind(family):\n\
                     \x20   x = socket.socket(family)\n\
                     \x20   x.listen()\n\
                     \x20   print('listening on', x.getsockname())\n\
                     attempt('listen', lambda: autobind(socket.AF_INET))\n\
                     attempt('listen6', lambda: autobind(socket.AF_INET6))\n",
                );
                judged(&r, "EPERM", 2, 0)
            },
        ),
        c(
            "net-tcp-fastopen/process",
            "process",
            "with net.connect = 127.0.0.1:A, reach port B by TCP Fast Open: sendto and sendmsg with MSG_FASTOPEN, \
             sendmmsg with MSG_FASTOPEN (ctypes), TCP_FASTOPEN_CONNECT then connect (and connect to A, as a control)",
            "EPERM for all four (seccomp; Landlock's connect hook is not on the Fast Open path); B's listener sees nothing",
            |s| {
                let (a, b) = (Tcp::new(), Tcp::new());
                let r = probe(
                    s,
                    "tcp-fastopen",
                    granted(a.port()),
                    &format!(
                        "import ctypes, os\n\
                         libc = ctypes.CDLL(None, use_errno=True)\n\
                         B = {b}\n\
                         def tfo_sendto():\n\
                         \x20   socket.socket().sendto(b'x', socket.MSG_FASTOPEN, ('127.0.0.1', B))\n\
                         def tfo_sendmsg():\n\
                         \x20   socket.socket().sendmsg([b'x'], [], socket.MSG_FASTOPEN, ('127.0.0.1', B))\n\
                         class iovec(ctypes.Structure):\n\
                         \x20   _fields_ = [('base', ctypes.c_void_p), ('len', ctypes.c_size_t)]\n\
                         class msghdr(ctypes.Structure):\n\
                         \x20   _fields_ = [('name', ctypes.c_void_p), ('namelen', ctypes.c_uint32), ('iov', ctypes.POINTER(iovec)), ('iovlen', ctypes.c_size_t), ('control', ctypes.c_void_p), ('controllen', ctypes.c_size_t), ('flags', ctypes.c_int)]\n\
                         class mmsghdr(ctypes.Structure):\n\
                         \x20   _fields_ = [('hdr', msghdr), ('len', ctypes.c_uint)]\n\
                         def tfo_sendmmsg():\n\
                         \x20   x = socket.socket()\n\
                         \x20   addr = ctypes.create_string_buffer(bytes([2, 0]) + B.to_bytes(2, 'big') + bytes([127, 0, 0, 1]) + bytes(8), 16)\n\
                         \x20   data = ctypes.create_string_buffer(b'x', 1)\n\
                         \x20   iov = iovec(ctypes.cast(data, ctypes.c_void_p), 1)\n\
                         \x20   m = mmsghdr(msghdr(ctypes.cast(addr, ctypes.c_void_p), 16, ctypes.pointer(iov), 1, None, 0, 0), 0)\n\
                         \x20   if libc.sendmmsg(x.fileno(), ctypes.byref(m), 1, socket.MSG_FASTOPEN) < 0:\n\
                         \x20       e = ctypes.get_errno()\n\
                         \x20       raise OSError(e, os.strerror(e))\n\
                         def tfo_option():\n\
                         \x20   x = socket.socket()\n\
                         \x20   x.setsockopt(socket.IPPROTO_TCP, 30, 1)\n\
                         \x20   x.connect(('127.0.0.1', B))\n\
                         \x20   x.send(b'x')\n\
                         attempt('sendto', tfo_sendto)\n\
                         attempt('sendmsg', tfo_sendmsg)\n\
                         attempt('sendmmsg', tfo_sendmmsg)\n\
                         attempt('option', tfo_option)\n\
                         try:\n\
                         \x20   socket.socket().connect(('127.0.0.1', {a}))\n\
                         \x20   print('granted ok')\n\
                         except OSError as e:\n\
                         \x20   print('granted failed', e)\n",
                        a = a.port(),
                        b = b.port()
                    ),
                );
                let o = judged(&r, "EPERM", 4, b.arrived());
                let control = r.out().contains("granted ok") && a.arrived() == 1;
                Observed::new(o.contained && control, format!("{}; the granted port worked: {control}", o.observed))
            },
        ),
        c(
            "net-mptcp-granted/process",
            "process",
            "with net.connect = 127.0.0.1:A, connect to A over MPTCP (a protocol Landlock does not filter)",
            "EPERM (seccomp admits protocol 0, TCP and UDP only); A's listener sees nothing",
            |s| {
                let a = Tcp::new();
                let r = probe(
                    s,
                    "mptcp-granted",
                    granted(a.port()),
                    &format!(
                        "attempt('mptcp', lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM, 262).connect(('127.0.0.1', {})))\n",
                        a.port()
                    ),
                );
                judged(&r, "EPERM", 1, a.arrived())
            },
        ),
        c(
            "net-unix-granted/process",
            "process",
            "with a network grant, connect to a host daemon's pathname unix socket",
            "EPERM: a grant admits AF_INET and AF_INET6 only",
            |s| {
                let a = Tcp::new();
                let path = s.side_dir("daemon").join("daemon.sock");
                let l = UnixListener::bind(&path).unwrap();
                l.set_nonblocking(true).unwrap();
                let r = probe(
                    s,
                    "unix-granted",
                    granted(a.port()),
                    &format!(
                        "attempt('daemon', lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).connect({:?}))\n",
                        path.display().to_string()
                    ),
                );
                judged(&r, "EPERM", 1, unix_arrived(&l))
            },
        ),
        c(
            "net-raw-granted/process",
            "process",
            "with a network grant, open raw, packet and SCTP (SOCK_SEQPACKET, protocol 0) sockets",
            "EPERM for all three",
            |s| {
                let a = Tcp::new();
                let r = probe(
                    s,
                    "raw-granted",
                    granted(a.port()),
                    "attempt('raw', lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP))\n\
                     attempt('packet', lambda: socket.socket(17, socket.SOCK_RAW, 0x0300))\n\
                     attempt('sctp', lambda: socket.socket(socket.AF_INET, socket.SOCK_SEQPACKET, 0))\n",
                );
                judged(&r, "EPERM", 3, 0)
            },
        ),
        c(
            "net-udp-granted/process",
            "process",
            "with net.connect = 127.0.0.1:A (TCP, an address): UDP sockets (protocol 0, UDP, nonblocking) to another local port",
            "socket() refused with EPERM (seccomp: no grant names a host, so no DNS and no UDP); no datagram arrives",
            |s| {
                let (a, u) = (Tcp::new(), Udp::new());
                let r = probe(
                    s,
                    "udp-granted",
                    granted(a.port()),
                    &format!(
                        "attempt('udp', lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('127.0.0.1', {p})))\n\
                         attempt('udp-proto', lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_UDP))\n\
                         attempt('udp-nonblock', lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM | socket.SOCK_NONBLOCK))\n\
                         attempt('udp6', lambda: socket.socket(socket.AF_INET6, socket.SOCK_DGRAM))\n",
                        p = u.port()
                    ),
                );
                judged(&r, "EPERM", 4, u.arrived() + a.arrived())
            },
        ),
        c(
            "net-tcp-other-port/component",
            "component",
            "testkit `connect` to port B with net.connect = 127.0.0.1:A",
            "PERMISSION_DENIED (the socket address check); B's listener sees nothing",
            |s| {
                let (a, b) = (Tcp::new(), Tcp::new());
                let k = s.kit(
                    "tcp-other-c",
                    &format!("[tools.connect]\nplugin = \"kit\"\nnet.connect = [\"127.0.0.1:{}\"]\n", a.port()),
                );
                let r = k.call("connect", json!({"addr": format!("127.0.0.1:{}", b.port())}));
                let arrived = b.arrived();
                Observed::new(
                    code(&r) == "PERMISSION_DENIED" && arrived == 0,
                    format!("{}; arrived: {arrived}", brief(&r)),
                )
            },
        ),
        c(
            "net-dns/component",
            "component",
            "testkit `connect` to localhost:PORT by name, without any network grant",
            "refused (no name lookup, no socket); the listener sees nothing",
            |s| {
                let l = Tcp::new();
                let k = s.kit("dns-c", "[tools.connect]\nplugin = \"kit\"\n");
                let r = k.call("connect", json!({"addr": format!("localhost:{}", l.port())}));
                let arrived = l.arrived();
                Observed::new(r.error.is_some() && arrived == 0, format!("{}; arrived: {arrived}", brief(&r)))
            },
        ),
        c(
            "net-dns-ip-grant/component",
            "component",
            "with net.connect = 127.0.0.1:A (an address), connect to localhost:A by name",
            "refused: name lookup stays off when every grant is an address; the listener sees nothing",
            |s| {
                let a = Tcp::new();
                let k = s.kit(
                    "dns-ip-c",
                    &format!("[tools.connect]\nplugin = \"kit\"\nnet.connect = [\"127.0.0.1:{}\"]\n", a.port()),
                );
                let r = k.call("connect", json!({"addr": format!("localhost:{}", a.port())}));
                let arrived = a.arrived();
                Observed::new(r.error.is_some() && arrived == 0, format!("{}; arrived: {arrived}", brief(&r)))
            },
        ),
        c(
            "net-unix-dgram-pair/process",
            "process",
            "a datagram socketpair (no grant needed; SOCK_DGRAM, and SOCK_RAW, which AF_UNIX turns into a datagram \
             pair), then sendto a host daemon's pathname datagram socket from one end (a stream pair cannot: it is \
             connected to itself)",
            "socketpair(AF_UNIX, SOCK_DGRAM | SOCK_RAW) refused with EPERM (seccomp); nothing arrives at the daemon",
            |s| {
                let path = s.side_dir("dgram").join("daemon.sock");
                let d = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
                d.set_nonblocking(true).unwrap();
                let r = probe(
                    s,
                    "dgram-pair",
                    SHELL,
                    &format!(
                        "attempt('dgram_pair', lambda: socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)[0].sendto(b'x', {:?}))\n\
                         attempt('raw_pair', lambda: socket.socketpair(socket.AF_UNIX, socket.SOCK_RAW)[0].sendto(b'x', {:?}))\n\
                         a, b = socket.socketpair()\n\
                         attempt('stream_pair_sendto', lambda: a.sendto(b'x', {:?}))\n",
                        path.display().to_string(),
                        path.display().to_string(),
                        path.display().to_string()
                    ),
                );
                let mut arrived = 0;
                while d.recv(&mut [0u8; 64]).is_ok() {
                    arrived += 1;
                }
                // A stream pair ignores the destination (the datagram goes to its peer), which is harmless.
                let out = r.out();
                let ok = r.success()
                    && out.contains("dgram_pair refused EPERM")
                    && out.contains("raw_pair refused EPERM")
                    && arrived == 0;
                Observed::new(ok, format!("{}; arrived at the daemon: {arrived}", r.brief()))
            },
        ),
        c(
            "net-bind-abstract/process",
            "process",
            "bind a socketpair end to an abstract unix name, to squat a name a host daemon binds later (no network grant)",
            "bind() refused with EPERM (seccomp: no bind without UDP); the host binds the name afterwards",
            |s| {
                let name = format!("warden-escape-squat-{}", std::process::id());
                let r = probe(
                    s,
                    "bind-abstract",
                    SHELL,
                    &format!("a, b = socket.socketpair()\nattempt('bind_abstract', lambda: a.bind(b'\\0{name}'))\n"),
                );
                let o = judged(&r, "EPERM", 1, 0);
                Observed::new(o.contained, o.observed)
            },
        ),
        c(
            "net-bind-udp-granted/process",
            "process",
            "with a grant that names a host (UDP admitted for DNS): bind a UDP port, and a socketpair end to an \
             abstract name (squatting a name or a port a host daemon uses)",
            "bind() refused with EPERM for both (seccomp: nothing binds); nothing arrives",
            |s| {
                let a = Tcp::new();
                let net: &'static str = Box::leak(format!("localhost:{}", a.port()).into_boxed_str());
                let tool = Tool { read: &[], net: Box::leak(Box::new([net])), limits: "timeout = \"20s\"" };
                let name = format!("warden-escape-udp-squat-{}", std::process::id());
                let r = probe(
                    s,
                    "bind-udp",
                    tool,
                    &format!(
                        "attempt('bind_udp', lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).bind(('127.0.0.1', 0)))\n\
                         a, b = socket.socketpair()\n\
                         attempt('bind_abstract', lambda: a.bind(b'\\0{name}'))\n"
                    ),
                );
                judged(&r, "EPERM", 2, a.arrived())
            },
        ),
    ]
}
