"""A test OTLP/HTTP receiver: decodes what warden posts to /v1/logs and
/v1/traces with the OpenTelemetry project's own generated messages (the
`opentelemetry-proto` package) and appends each log record and span, as JSON
(protobuf's JSON mapping), to a file, one per line.

Usage: receiver.py PORT_FILE OUT_FILE [PORT]. Listens on 127.0.0.1 (PORT, or
one the kernel picks), writes the port to PORT_FILE once listening.
"""

import json
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

PORT_FILE, OUT = sys.argv[1], sys.argv[2]
PORT = int(sys.argv[3]) if len(sys.argv) > 3 else 0


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        entries = []
        if self.path == "/v1/logs":
            req = ExportLogsServiceRequest.FromString(body)
            for rl in req.resource_logs:
                resource = MessageToDict(rl.resource)
                for sl in rl.scope_logs:
                    for rec in sl.log_records:
                        entries.append({"kind": "log", "resource": resource, "scope": sl.scope.name,
                                        "record": MessageToDict(rec)})
            reply = ExportLogsServiceResponse().SerializeToString()
        elif self.path == "/v1/traces":
            req = ExportTraceServiceRequest.FromString(body)
            for rs in req.resource_spans:
                for ss in rs.scope_spans:
                    for span in ss.spans:
                        entries.append({"kind": "span", "scope": ss.scope.name, "span": MessageToDict(span)})
            reply = ExportTraceServiceResponse().SerializeToString()
        else:
            self.send_response(404)
            self.end_headers()
            return
        headers = {
            "content_type": self.headers.get("Content-Type"),
            "token": self.headers.get("X-Test-Token"),
        }
        with open(OUT, "a") as f:
            for e in entries:
                e["headers"] = headers
                f.write(json.dumps(e) + "\n")
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args):
        pass


server = HTTPServer(("127.0.0.1", PORT), Handler)
with open(PORT_FILE + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
import os

os.rename(PORT_FILE + ".tmp", PORT_FILE)
server.serve_forever()
