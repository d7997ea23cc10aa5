"""Nothing lost when warden dies: `warden serve --http` is killed with SIGKILL
while 8 clients are calling tools; afterwards the audit log verifies (a torn
last line is reported, not fatal) and every call whose result a client
received has its record (the record is durable before the result leaves)."""

import json
import os
import re
import signal
import subprocess
import threading
import time

import httpx2

TOKEN = "durability-token-0123456789"
META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}


def start(warden):
    p = subprocess.Popen(
        [os.environ["WARDEN_BIN"], *warden.argv("serve", "--http", "127.0.0.1:0")],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        env={**os.environ, **warden.env(), "WARDEN_HTTP_TOKEN": TOKEN}, cwd=warden.ws, text=True,
    )
    for line in p.stderr:
        m = re.search(r"serving MCP at (http://\S+/mcp)", line)
        if m:
            # Keep draining stderr so that warden never blocks on it.
            threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
            return p, m.group(1)
    raise AssertionError("warden did not report its address")


def call(http, url, n, name, arguments):
    body = {"jsonrpc": "2.0", "id": n, "method": "tools/call",
            "params": {"name": name, "arguments": arguments, "_meta": META}}
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json",
               "Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2026-07-28",
               "Mcp-Method": "tools/call", "Mcp-Name": name}
    r = http.post(url, json=body, headers=headers, timeout=30)
    r.raise_for_status()
    return r.json()["result"]


def test_sigkill_during_8_clients_loses_no_record(warden):
    p, url = start(warden)
    received: list[str] = []
    lock = threading.Lock()
    stop = threading.Event()

    def client(k):
        with httpx2.Client() as http:
            n = 0
            while not stop.is_set():
                n += 1
                name, args = (("read_file", {"path": "a.txt"}) if n % 2 else
                              ("shell", {"command": f"echo client {k} call {n}"}))
                try:
                    result = call(http, url, n, name, args)
                except Exception:  # noqa: BLE001 - the server was killed
                    return
                doc = result.get("structuredContent") or {}
                if doc.get("status") == "success":
                    with lock:
                        received.append(doc["call_id"])

    threads = [threading.Thread(target=client, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    # Kill it in full flight: once calls are completing (however loaded the machine is).
    deadline = time.monotonic() + 120
    while len(received) < 40 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)
    os.kill(p.pid, signal.SIGKILL)
    p.wait(timeout=10)
    stop.set()
    for t in threads:
        t.join(timeout=40)

    assert len(received) >= 16, f"too few calls completed before the kill: {len(received)}"
    out = subprocess.run([os.environ["WARDEN_BIN"], "log", "verify", str(warden.log)],
                         capture_output=True, text=True, timeout=60)
    print(f"received {len(received)} results; log verify: {out.stdout.strip()}")
    assert out.returncode == 0, out.stdout + out.stderr
    recorded = {r["call_id"] for r in warden.records()}
    missing = [c for c in received if c not in recorded]
    assert not missing, f"{len(missing)} of {len(received)} received results have no record: {missing[:5]}"
    # The sandboxes of the calls in flight died with warden: no shell is left behind.
    time.sleep(0.5)
    ps = subprocess.run(["pgrep", "-f", "echo client"], capture_output=True, text=True)
    assert ps.stdout.strip() == "", f"processes outlived warden: {ps.stdout}"
