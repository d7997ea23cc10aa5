"""`warden serve --http`: bearer token, Origin check, stateless serving of both
protocol generations; and the MCP Inspector CLI against stdio."""

import json
import os
import re
import subprocess

import httpx2
import mcp_types as types
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

TOKEN = "test-token-0123456789abcdef"


@pytest.fixture
def server(warden):
    p = subprocess.Popen(
        [os.environ["WARDEN_BIN"], *warden.argv("serve", "--http", "127.0.0.1:0",
                                                "--allow-origin", "https://app.example")],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env={**os.environ, **warden.env(), "WARDEN_HTTP_TOKEN": TOKEN}, cwd=warden.ws, text=True,
    )
    url = None
    for line in p.stderr:
        m = re.search(r"serving MCP at (http://\S+/mcp)", line)
        if m:
            url = m.group(1)
            break
    assert url, "warden did not report its address"
    yield url
    p.terminate()
    assert p.wait(timeout=15) == 0
    assert p.stdout.read() == "", "stdout must stay empty over HTTP"


def post(url, headers, body=None):
    body = body or {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                  "io.modelcontextprotocol/clientCapabilities": {}}}}
    base = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/list"}
    return httpx2.post(url, json=body, headers={**base, **headers}, timeout=30)


def test_a_request_without_the_token_is_refused(server):
    r = post(server, {})
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    r = post(server, {"Authorization": "Bearer wrong-token-0123456789abcd"})
    assert r.status_code == 401
    assert post(server, {"Authorization": f"Bearer {TOKEN}"}).status_code == 200


def test_foreign_origins_are_refused(server):
    auth = {"Authorization": f"Bearer {TOKEN}"}
    assert post(server, {**auth, "Origin": "https://evil.example"}).status_code == 403
    assert post(server, {**auth, "Origin": "http://localhost.evil.example"}).status_code == 403
    assert post(server, {**auth, "Origin": "http://localhost:6274"}).status_code == 200
    assert post(server, {**auth, "Origin": "https://app.example"}).status_code == 200
    # A Host that is not this server (DNS rebinding).
    assert post(server, {**auth, "Host": "evil.example"}).status_code == 403


async def accept(ctx, params):
    return types.ElicitResult(action="accept", content={})


def client(url, **kw):
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=httpx2.Timeout(30, read=60))
    return http, Client(streamable_http_client(url, http_client=http), cache=None, **kw)


@pytest.mark.anyio
async def test_2026_clients_list_call_and_approve_statelessly(server, warden):
    http, c = client(server, mode="2026-07-28", elicitation_callback=accept)
    async with http, c:
        names = [t.name for t in (await c.list_tools()).tools]
        assert names == sorted(names) and "read_file" in names
        r = await c.call_tool("read_file", {"path": "a.txt"})
        assert not r.is_error and "hello from the workspace" in r.content[0].text
        r = await c.call_tool("write_file", {"path": "web.txt", "content": "over http"})
        assert not r.is_error, r.content[0].text
    assert (warden.ws / "web.txt").read_text() == "over http"


@pytest.mark.anyio
async def test_legacy_clients_over_http_cannot_be_asked_so_nothing_runs(server, warden):
    http, c = client(server, mode="legacy", elicitation_callback=accept)
    async with http, c:
        r = await c.call_tool("read_file", {"path": "a.txt"})
        assert not r.is_error
        r = await c.call_tool("write_file", {"path": "web.txt", "content": "x"})
        assert r.is_error and r.content[0].text.startswith("APPROVAL_REQUIRED"), r.content[0].text
    assert not (warden.ws / "web.txt").exists()


def inspector(warden, *args):
    cli = os.environ.get("INSPECTOR_CLI")
    assert cli, "INSPECTOR_CLI is not set (cargo test --test mcp installs the Inspector)"
    cmd = ["node", cli, "--cli", os.environ["WARDEN_BIN"], *warden.argv("serve"), *args]
    env = {**os.environ, **warden.env()}
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=warden.ws, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    return json.loads(p.stdout)


def test_the_mcp_inspector_lists_the_tools_and_reads_a_file(warden):
    listed = inspector(warden, "--method", "tools/list")
    assert [t["name"] for t in listed["tools"]] == ["delete_file", "fetch", "read_file", "shell", "write_file"]
    called = inspector(warden, "--method", "tools/call", "--tool-name", "read_file", "--tool-arg", "path=a.txt")
    assert called.get("isError") is False, called
    assert "hello from the workspace" in called["content"][0]["text"]
