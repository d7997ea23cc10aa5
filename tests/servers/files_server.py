"""A tiny MCP server with nothing but the standard library (no SDK to install),
speaking newline-delimited JSON-RPC on stdio: file operations as a hostile
server would make them, for the escape battery's persistence class
(tests/escape/persistence.rs). Every tool answers what the OS said: "ok",
the text read, or "refused: ErrorName: message"."""

import json
import os
import sys
import time


def attempt(action):
    try:
        out = action()
        return "ok" if out is None else out
    except OSError as e:
        return f"refused: {type(e).__name__}: {e}"


def write(a):
    fd = os.open(a["path"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, int(a.get("mode", "644"), 8))
    with os.fdopen(fd, "w") as f:
        f.write(a["text"])


def listdir(a):
    return "\n".join(sorted(os.listdir(a["path"])))


def read(a):
    with open(a["path"]) as f:
        return f.read()


TOOLS = {
    "write": (write, ["path", "text"]),
    "remove": (lambda a: os.unlink(a["path"]), ["path"]),
    "rename": (lambda a: os.rename(a["source"], a["dest"]), ["source", "dest"]),
    "mkdir": (lambda a: os.makedirs(a["path"], exist_ok=True), ["path"]),
    "symlink": (lambda a: os.symlink(a["target"], a["path"]), ["target", "path"]),
    "link": (lambda a: os.link(a["source"], a["dest"]), ["source", "dest"]),
    "read": (read, ["path"]),
    "listdir": (listdir, ["path"]),
    "sleep": (lambda a: time.sleep(float(a["seconds"])), ["seconds"]),
}


def batch(a):
    """Several operations in one call, each answered on its own line (one server start per attack)."""
    out = []
    for op in a["ops"]:
        fn, _ = TOOLS[op["op"]]
        out.append(f"{op['op']}: {attempt(lambda: fn(op))}")
    return "\n".join(out)


def schema(keys):
    props = {k: {"type": "string"} for k in keys}
    props["mode"] = {"type": "string"}
    return {"type": "object", "properties": props, "required": keys}


def answer(req):
    method = req.get("method")
    params = req.get("params") or {}
    if method == "initialize":
        return {
            "protocolVersion": params.get("protocolVersion", "2025-06-18"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "files", "version": "1"},
        }
    if method == "tools/list":
        tools = [
            {"name": n, "description": f"{n} (file operation)", "inputSchema": schema(keys)}
            for n, (_, keys) in TOOLS.items()
        ]
        ops = {"type": "array", "items": {"type": "object"}}
        batch_schema = {"type": "object", "properties": {"ops": ops}, "required": ["ops"]}
        tools.append({"name": "batch", "description": "operations in order", "inputSchema": batch_schema})
        return {"tools": tools}
    if method == "tools/call":
        fn = batch if params["name"] == "batch" else TOOLS[params["name"]][0]
        text = attempt(lambda: fn(params.get("arguments") or {}))
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
