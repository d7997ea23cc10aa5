"""The approval inbox: a call whose MCP client cannot ask its user waits in
warden's inbox, and a person answers it from another terminal with `warden
approvals` (docs/approvals.md). Driven by the official Python SDK and the
TypeScript SDK 1.32.2 over Streamable HTTP on the 2025-11-25 protocol (the
transport is stateless, so warden cannot send them an elicitation request), and
checked from the host: the file written or not, the audit record.
"""

import asyncio
import json
import os
import pathlib
import re
import shutil
import subprocess
import time

import httpx2
import mcp_types as types
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

TOKEN = "inbox-token-0123456789abcdef"
WARDEN = os.environ["WARDEN_BIN"]


async def accept(ctx, params):
    return types.ElicitResult(action="accept", content={})


def with_inbox(warden, extra=""):
    """The suite's policy with the inbox on (the default), plus `extra`."""
    text = warden.policy.read_text().replace("inbox = false\n", "")
    warden.policy.write_text(text + extra)


class Serve:
    def __init__(self, warden, *args):
        self.p = subprocess.Popen(
            [WARDEN, *warden.argv("serve", "--http", "127.0.0.1:0", *args)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            env={**os.environ, **warden.env(), "WARDEN_HTTP_TOKEN": TOKEN}, cwd=warden.ws, text=True,
        )
        self.url = None
        for line in self.p.stderr:
            m = re.search(r"serving MCP at (http://\S+/mcp)", line)
            if m:
                self.url = m.group(1)
                break
        assert self.url, "warden did not report its address"

    def stop(self):
        self.p.terminate()
        assert self.p.wait(timeout=15) == 0
        return self.p.stderr.read()


@pytest.fixture
def serve(warden):
    started = []

    def start(*args):
        s = Serve(warden, *args)
        started.append(s)
        return s

    yield start
    for s in started:
        if s.p.poll() is None:
            s.stop()


def approvals(warden, *args, check=True):
    r = subprocess.run([WARDEN, *warden.argv("approvals", *args)], capture_output=True, text=True,
                       env={**os.environ, **warden.env()}, cwd=warden.ws, timeout=30)
    if check:
        assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    return r


def pending(warden, tool, timeout=30.0):
    """The first call of `tool` waiting in the inbox (polled, as a person would look)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        doc = json.loads(approvals(warden, "list", "--json").stdout)
        for p in doc["pending"]:
            if p["tool"] == tool:
                return p
        time.sleep(0.1)
    raise AssertionError(f"no call of {tool} appeared in the inbox")


def client(url, **kw):
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=httpx2.Timeout(30, read=90))
    return http, Client(streamable_http_client(url, http_client=http), cache=None, **kw)


async def call_answered(url, tool, args, answer):
    """Calls `tool` as a 2025-11-25 client over HTTP while `answer()` runs in a thread."""
    http, c = client(url, mode="legacy", elicitation_callback=accept)
    async with http, c:
        call = asyncio.create_task(c.call_tool(tool, args))
        await asyncio.to_thread(answer)
        return await asyncio.wait_for(call, 60)


def text(r):
    return r.content[0].text


@pytest.mark.anyio
async def test_a_legacy_http_client_writes_after_a_person_approves_in_warden_approvals(serve, warden):
    with_inbox(warden)
    s = serve()

    def approve():
        p = pending(warden, "write_file")
        assert p["client"] == "MCP client over Streamable HTTP (2025-11-25)", p
        assert "+over http" in p["preview"], p  # the same diff the elicitation form shows
        shown = approvals(warden, "show", p["id"]).stdout
        assert "write_file" in shown and "+over http" in shown and p["id"] in shown, shown
        approvals(warden, "approve", p["id"])

    r = await call_answered(s.url, "write_file", {"path": "web.txt", "content": "over http"}, approve)
    assert not r.is_error, text(r)
    assert (warden.ws / "web.txt").read_text() == "over http"
    rec = [x for x in warden.records() if x["tool"] == "write_file"][-1]
    assert rec["approved_by"] == "inbox" and rec["status"] == "success", rec
    assert rec["approval"]["id"].startswith("a-") and "uid" in rec["approval"]["who"], rec
    assert rec["approval"]["via"].startswith(("terminal", "command line")), rec
    assert json.loads(approvals(warden, "list", "--json").stdout)["pending"] == []


@pytest.mark.anyio
async def test_a_rejection_in_the_inbox_reaches_the_agent_as_rejected(serve, warden):
    with_inbox(warden)
    s = serve()

    def reject():
        approvals(warden, "reject", pending(warden, "write_file")["id"], "--reason", "not today")

    r = await call_answered(s.url, "write_file", {"path": "no.txt", "content": "x"}, reject)
    assert r.is_error and text(r).startswith("REJECTED") and "not today" in text(r), text(r)
    assert not (warden.ws / "no.txt").exists()
    rec = warden.records()[-1]
    assert rec["status"] == "rejected" and rec["approved_by"] == "inbox", rec


@pytest.mark.anyio
async def test_nobody_answering_times_out_with_the_true_reason(serve, warden):
    with_inbox(warden)
    s = serve("--approval-timeout", "1s")
    http, c = client(s.url, mode="legacy", elicitation_callback=accept)
    async with http, c:
        r = await c.call_tool("write_file", {"path": "late.txt", "content": "x"})
    t = text(r)
    assert r.is_error and t.startswith("APPROVAL_REQUIRED"), t
    assert "did not declare" not in t, "the client did declare elicitation: " + t
    assert "Streamable HTTP" in t and "warden approvals approve" in t, t
    assert not (warden.ws / "late.txt").exists()


@pytest.mark.anyio
async def test_inbox_false_refuses_at_once(serve, warden):
    with_inbox(warden)
    warden.policy.write_text(warden.policy.read_text().replace(
        '[tools.write_file]\nplugin = "fs"\n', '[tools.write_file]\nplugin = "fs"\ninbox = false\n'))
    s = serve()
    http, c = client(s.url, mode="legacy", elicitation_callback=accept)
    started = time.monotonic()
    async with http, c:
        r = await c.call_tool("write_file", {"path": "n.txt", "content": "x"})
    assert r.is_error and "inbox = false" in text(r), text(r)
    assert time.monotonic() - started < 20


@pytest.mark.anyio
async def test_a_lasting_approval_survives_a_restart_and_ends_when_the_definition_changes(serve, warden):
    with_inbox(warden)
    s = serve("--approval-timeout", "30s")
    args = {"path": "same.txt", "content": "same"}

    def always():
        p = pending(warden, "write_file")
        # A confirm-style "every call" is refused for confirm tools; write_file is ask.
        approvals(warden, "always", p["id"], "--match", "args")

    r = await call_answered(s.url, "write_file", args, always)
    assert not r.is_error, text(r)
    doc = json.loads(approvals(warden, "list", "--json", "--lasting").stdout)
    assert len(doc["lasting"]) == 1 and doc["lasting"][0]["match"] == "args", doc
    lasting_id = doc["lasting"][0]["id"]
    s.stop()

    # A new server process: the same call runs at once, approved by the lasting approval.
    s = serve("--approval-timeout", "2s")
    http, c = client(s.url, mode="legacy", elicitation_callback=accept)
    async with http, c:
        r = await c.call_tool("write_file", args)
        assert not r.is_error, text(r)
        # Other arguments are not covered.
        r = await c.call_tool("write_file", {"path": "other.txt", "content": "x"})
        assert r.is_error and text(r).startswith("APPROVAL_REQUIRED"), text(r)
    rec = [x for x in warden.records() if x["tool"] == "write_file" and x["status"] == "success"][-1]
    assert rec["approved_by"] == "lasting" and rec["approval"]["id"] == lasting_id, rec
    s.stop()

    # `policy check` shows it, and that it applies.
    check = subprocess.run([WARDEN, *warden.argv("policy", "check")], capture_output=True, text=True,
                           env={**os.environ, **warden.env()}, cwd=warden.ws)
    assert lasting_id in check.stdout and "[applies]" in check.stdout, check.stdout + check.stderr

    # The tool's definition changes: the approval no longer applies.
    warden.policy.write_text(warden.policy.read_text().replace(
        '[tools.write_file]\nplugin = "fs"\n', '[tools.write_file]\nplugin = "fs"\ndescription = "Write, changed"\n'))
    s = serve("--approval-timeout", "1s")
    http, c = client(s.url, mode="legacy", elicitation_callback=accept)
    async with http, c:
        r = await c.call_tool("write_file", args)
        assert r.is_error and text(r).startswith("APPROVAL_REQUIRED"), text(r)
    check = subprocess.run([WARDEN, *warden.argv("policy", "check")], capture_output=True, text=True,
                           env={**os.environ, **warden.env()}, cwd=warden.ws)
    assert "definition changed" in check.stdout, check.stdout
    audit = subprocess.run([WARDEN, *warden.argv("audit", "--no-self-test", "--format", "json", "--fail-on", "never")],
                           capture_output=True, text=True, env={**os.environ, **warden.env()}, cwd=warden.ws)
    rules = [f["rule"] for f in json.loads(audit.stdout)["findings"]]
    assert "WL123" in rules, audit.stdout[-2000:]
    approvals(warden, "revoke", lasting_id)
    assert json.loads(approvals(warden, "list", "--json", "--lasting").stdout)["lasting"] == []


def test_always_for_every_call_is_refused_for_a_confirm_tool(serve, warden):
    with_inbox(warden)
    s = serve("--approval-timeout", "20s")
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "delete_file", "arguments": {"path": "a.txt"}}}
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json",
               "Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"}
    import threading
    answer = {}
    t = threading.Thread(target=lambda: answer.update(r=httpx2.post(s.url, json=body, headers=headers, timeout=60)))
    t.start()
    p = pending(warden, "delete_file")
    r = approvals(warden, "always", p["id"], "--match", "tool", check=False)
    assert r.returncode == 2 and "confirm tool is approved per call" in r.stderr, r.stderr
    approvals(warden, "reject", p["id"])
    t.join(60)
    assert "REJECTED" in answer["r"].text, answer["r"].text
    assert (warden.ws / "a.txt").exists()


def test_allow_host_admits_a_service_name(serve, warden):
    base = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    plain = serve()
    port = plain.url.split(":")[2].split("/")[0]
    r = httpx2.post(plain.url, json=body, headers={**base, "Host": f"warden.internal:{port}"}, timeout=30)
    assert r.status_code == 403, r.text
    named = serve("--allow-host", "warden.internal")
    port = named.url.split(":")[2].split("/")[0]
    r = httpx2.post(named.url, json=body, headers={**base, "Host": f"warden.internal:{port}"}, timeout=30)
    assert r.status_code == 200, r.text
    r = httpx2.post(named.url, json=body, headers={**base, "Host": f"evil.example:{port}"}, timeout=30)
    assert r.status_code == 403, r.text


def test_the_typescript_sdk_over_http_writes_after_approval(serve, warden):
    with_inbox(warden)
    s = serve()
    modules = pathlib.Path(os.environ["TASKS_CLIENTS"]) / "node_modules"
    d = warden.root / "ts"
    d.mkdir()
    # ES modules resolve imports from the script's own directory.
    shutil.copy(pathlib.Path(__file__).parent / "tasks_clients" / "inbox_http.mjs", d / "inbox_http.mjs")
    (d / "package.json").write_text('{"type": "module"}')
    (d / "node_modules").symlink_to(modules.resolve(), target_is_directory=True)
    config = {"url": s.url, "token": TOKEN, "tool": "write_file", "arguments": {"path": "ts.txt", "content": "from ts"}}
    node = subprocess.Popen(["node", str(d / "inbox_http.mjs"), json.dumps(config)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=d)
    p = pending(warden, "write_file")
    approvals(warden, "approve", p["id"])
    out, err = node.communicate(timeout=60)
    assert node.returncode == 0, (out, err)
    result = json.loads(out.strip().splitlines()[-1])
    assert result["isError"] is False, result
    assert (warden.ws / "ts.txt").read_text() == "from ts"


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_a_stdio_client_without_elicitation_waits_and_runs_once_approved(warden, mode):
    with_inbox(warden)

    def approve():
        p = pending(warden, "write_file")
        assert p["client"].startswith("MCP client without elicitation"), p
        approvals(warden, "approve", p["id"])

    async with Client(warden.stdio(), mode=mode, cache=None) as c:
        call = asyncio.create_task(c.call_tool("write_file", {"path": f"{mode}.txt", "content": mode}))
        await asyncio.to_thread(approve)
        r = await asyncio.wait_for(call, 60)
    assert not r.is_error, text(r)
    assert (warden.ws / f"{mode}.txt").read_text() == mode
    assert warden.records()[-1]["approved_by"] == "inbox"
