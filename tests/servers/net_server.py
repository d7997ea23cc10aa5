"""A tiny MCP server with nothing but the standard library, speaking
newline-delimited JSON-RPC on stdio, for the escape battery's network class
(tests/escape/network.rs): a hostile server that runs the Python it is sent
(its `probe` tool) and answers what that printed. warden wraps it in a network
namespace of its own; whatever the code tries, only warden's proxy leads out."""

import contextlib
import io
import json
import sys


def probe(code):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            exec(compile(code, "probe", "exec"), {"__name__": "probe"})
        except BaseException as e:  # the answer says what went wrong, the server goes on
            print(f"probe raised {type(e).__name__}: {e}")
    return out.getvalue()


def answer(req):
    method = req.get("method")
    params = req.get("params") or {}
    if method == "initialize":
        return {
            "protocolVersion": params.get("protocolVersion", "2025-06-18"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "net", "version": "1"},
        }
    if method == "tools/list":
        schema = {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]}
        return {"tools": [{"name": "probe", "description": "run Python, answer its output", "inputSchema": schema}]}
    if method == "tools/call":
        text = probe((params.get("arguments") or {}).get("code", ""))
        return {"content": [{"type": "text", "text": text}], "isError": False}
    if method == "ping":
        return {}
    raise KeyError(method)


def main():
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        req = json.loads(line)
        if "id" not in req:
            continue
        try:
            msg = {"jsonrpc": "2.0", "id": req["id"], "result": answer(req)}
        except KeyError as e:
            msg = {"jsonrpc": "2.0", "id": req["id"], "error": {"code": -32601, "message": f"unknown: {e}"}}
        sys.stdout.write(json.dumps(msg) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
