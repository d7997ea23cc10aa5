"""Hostile and heavy traffic: malformed frames, unknown methods, a 10 MiB
argument, invalid UTF-8; 1,000 sequential calls and 8 concurrent clients with
the audit log verified and the server's memory checked for growth."""

import json
import os
import subprocess
import time

import anyio
import pytest
from mcp.client import Client

INIT = (
    b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25",'
    b'"capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}\n'
    b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n'
)


class Raw:
    """A raw line client on the server's stdin and stdout."""

    def __init__(self, warden):
        self.p = subprocess.Popen(
            [os.environ["WARDEN_BIN"], *warden.argv("serve")],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            env={**os.environ, **warden.env()}, cwd=warden.ws,
        )
        self.send(INIT)
        assert self.reply(1)["result"]["serverInfo"]["name"] == "warden"

    def send(self, data: bytes):
        self.p.stdin.write(data)
        self.p.stdin.flush()

    def reply(self, want_id):
        while True:
            line = self.p.stdout.readline()
            assert line, "the server closed stdout"
            frame = json.loads(line)
            if frame.get("id") == want_id:
                return frame

    def read_call(self, id_):
        frame = {"jsonrpc": "2.0", "id": id_, "method": "tools/call",
                 "params": {"name": "read_file", "arguments": {"path": "a.txt"}}}
        self.send(json.dumps(frame).encode() + b"\n")
        r = self.reply(id_)
        assert r["result"]["isError"] is False, r
        return r

    def close(self):
        self.p.stdin.close()
        assert self.p.wait(timeout=30) == 0


def test_malformed_input_gets_an_error_or_nothing_and_the_server_keeps_serving(warden):
    raw = Raw(warden)
    raw.send(b"this is not json\n")
    assert raw.reply(None)["error"]["code"] == -32700
    raw.send(b"\xff\xfe\xfd\n")
    assert raw.reply(None)["error"]["code"] == -32700
    # Invalid UTF-8 inside a request: answered with the request's id, not left hanging.
    raw.send(b'{"jsonrpc":"2.0","id":50,"method":"tools/call","params":{"name":"read_file","arguments":{"path":"\xff\xfe"}}}\n')
    e = raw.reply(50)["error"]
    assert e["code"] == -32700 and "UTF-8" in e["message"], e
    raw.read_call(2)
    raw.send(b'{"foo":"bar"}\n')
    raw.send(b'{"jsonrpc":"2.0","id":3,"method":"no/such/method"}\n')
    assert raw.reply(3)["error"]["code"] == -32601
    raw.send(b'{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"arguments":{}}}\n')
    assert "error" in raw.reply(4)
    raw.send(b'{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"read_file","arguments":[1,2]}}\n')
    assert "error" in raw.reply(5)
    raw.read_call(6)
    # A 10 MiB argument: refused by the executor (1 MiB limit), audited, nothing runs.
    big = {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
           "params": {"name": "write_file", "arguments": {"path": "big.txt", "content": "x" * (10 << 20)}}}
    raw.send(json.dumps(big).encode() + b"\n")
    r = raw.reply(7)
    assert r["result"]["isError"] is True
    assert r["result"]["content"][0]["text"].startswith("INVALID_ARGS"), r["result"]["content"][0]["text"][:300]
    assert not (warden.ws / "big.txt").exists()
    # A line past the 16 MiB frame cap is dropped unread, answered, and the next served.
    raw.send(b'{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"read_file","arguments":{"path":"' + b"y" * (17 << 20) + b'"}}}\n')
    e = raw.reply(8)["error"]
    assert e["code"] == -32600 and "larger than" in e["message"], e
    raw.read_call(9)
    raw.close()


def rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_a_thousand_sequential_calls_keep_memory_flat_and_the_log_verifies(warden):
    raw = Raw(warden)
    for i in range(200):
        raw.read_call(100 + i)
    warm = rss_kb(raw.p.pid)
    started = time.monotonic()
    for i in range(800):
        raw.read_call(1000 + i)
    took = time.monotonic() - started
    after = rss_kb(raw.p.pid)
    fds = len(os.listdir(f"/proc/{raw.p.pid}/fd"))
    raw.close()
    print(f"\n800 sequential read_file calls: {800 / took:.0f} calls/s; RSS {warm} KiB after 200, {after} KiB after 1000; {fds} fds")
    assert after < warm + 16 * 1024, f"RSS grew from {warm} KiB to {after} KiB"
    assert fds < 64, fds
    check_log(warden, 1000)


def check_log(warden, at_least):
    v = subprocess.run([os.environ["WARDEN_BIN"], "log", "verify", str(warden.log)], capture_output=True, text=True)
    assert v.returncode == 0, v.stdout + v.stderr
    assert len(warden.records()) >= at_least


@pytest.mark.anyio
async def test_eight_concurrent_clients_are_all_answered(warden):
    per_client = 40
    results = []

    async def client(n):
        async with Client(warden.stdio(), mode="legacy" if n % 2 else "2026-07-28", cache=None) as c:
            for i in range(per_client):
                if i % 5 == 0:
                    r = await c.call_tool("shell", {"command": f"echo {n}-{i}"})
                    assert not r.is_error and f"{n}-{i}" in r.structured_content["result"]["stdout"], r
                else:
                    r = await c.call_tool("read_file", {"path": "a.txt"})
                    assert not r.is_error, r
                results.append(n)

    async with anyio.create_task_group() as tg:
        for n in range(8):
            tg.start_soon(client, n)
    assert len(results) == 8 * per_client
    check_log(warden, 8 * per_client)


@pytest.mark.anyio
async def test_concurrent_calls_on_one_connection(warden):
    async with Client(warden.stdio(), mode="2026-07-28", cache=None) as c:
        got = []

        async def one(i):
            r = await c.call_tool("shell", {"command": f"sleep 0.2; echo {i}"})
            got.append(r.structured_content["result"]["stdout"].strip())

        async with anyio.create_task_group() as tg:
            for i in range(24):
                tg.start_soon(one, i)
        assert sorted(got, key=int) == [str(i) for i in range(24)]
