"""Background jobs (`background = true`) under `warden serve`, against the
official Python SDK: the handle, job_status / job_output / job_cancel /
job_list, approval before the start, `[defaults] max_jobs`, ownership, and
shutdown mid-job (stdin closed, SIGTERM) leaving no process and both records."""

import json
import os
import re
import signal
import subprocess
import time

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from conftest import FIXTURES, host_pids, marker

MODES = ["legacy", "2026-07-28"]

# The background tool of tests/fixtures/policies/background.toml, at most two
# jobs at once, and one that asks first.
POLICY = (FIXTURES / "background.toml").read_text().replace('timeout = "30s"\n', 'timeout = "30s"\nmax_jobs = 2\n', 1) + """
[tools.bg_ask]
exec = ["/bin/sh", "-c", "{command}"]
description = "Run a shell command in the background, once approved"
tier = "ask"
background = true
fs.read = ["{system}", "{workspace}"]
env = { pass = ["PATH"] }
"""


@pytest.fixture
def jobs(warden):
    warden.policy.write_text(POLICY)
    return warden


def text(result) -> str:
    return "".join(c.text for c in result.content if c.type == "text")


def pids_of(secs):
    async def probe():
        return host_pids(secs)
    return probe


async def until(predicate, timeout=20, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = await predicate()
        if value:
            return value
        await anyio.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


async def start(c, command, tool="bg"):
    r = await c.call_tool(tool, {"command": command})
    assert not r.is_error, text(r)
    handle = r.structured_content
    assert handle["status"] == "running" and re.fullmatch(r"j-[0-9a-f]{32}", handle["job"]), handle
    return handle


async def start_args(c, tool, args):
    r = await c.call_tool(tool, args)
    assert not r.is_error, text(r)
    assert r.structured_content["status"] == "running", r.structured_content
    return r.structured_content


async def job(c, name, **args):
    r = await c.call_tool(name, args)
    return r


def records_of(warden, call_id):
    return [r for r in warden.records() if r["call_id"] == call_id]


def verify_log(warden):
    out = subprocess.run([os.environ["WARDEN_BIN"], "log", "verify", str(warden.log)],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stdout + out.stderr
    stats = subprocess.run([os.environ["WARDEN_BIN"], "log", "stats", str(warden.log)],
                           capture_output=True, text=True, timeout=30)
    assert stats.returncode == 0, stats.stdout + stats.stderr
    return stats.stdout


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_a_running_job_is_followed_and_cancelled_and_its_processes_die(jobs, mode):
    secs = marker("cancel" + mode)
    async with Client(jobs.stdio(), mode=mode, cache=None) as c:
        tools = (await c.list_tools()).tools
        names = [t.name for t in tools]
        assert names == sorted(names)
        by = {t.name: t for t in tools}
        assert "Runs in the background" in by["bg"].description
        assert "Runs in the background" not in by["read_file"].description
        assert {"job_status", "job_output", "job_cancel", "job_list"} <= set(names), names

        began = time.monotonic()
        handle = await start(c, f"echo start; sleep {secs}; echo end")
        assert time.monotonic() - began < 10, "the call must answer at once"
        # The start record is written before the handle is returned.
        [first] = records_of(jobs, handle["call_id"])
        assert first["status"] == "running" and first["decision"] == "allowed", first

        r = await job(c, "job_status", job=handle["job"])
        assert not r.is_error and r.structured_content["status"] == "running", text(r)

        async def started():
            r = await job(c, "job_output", job=handle["job"], offset=0)
            return "start" in r.structured_content["output"] and r.structured_content
        out = await until(started, what="job_output to show `start`")
        assert out["status"] == "running" and not out["eof"] and out["next_offset"] == len("start\n"), out
        pids = await until(pids_of(secs), what="the job's sleep")

        r = await job(c, "job_list")
        assert [j["job"] for j in r.structured_content["jobs"]] == [handle["job"]], text(r)

        r = await job(c, "job_cancel", job=handle["job"])
        assert not r.is_error, text(r)
        assert r.structured_content["status"] == "cancelled", r.structured_content
        assert r.structured_content["result"]["error"]["code"] == "CANCELLED"
        deadline = time.monotonic() + 10
        while host_pids(secs) and time.monotonic() < deadline:
            await anyio.sleep(0.05)
        assert not host_pids(secs), f"the cancelled job's processes are still alive: {pids}"
        # The server keeps serving.
        assert not (await c.call_tool("read_file", {"path": "a.txt"})).is_error

    recs = records_of(jobs, handle["call_id"])
    assert [r["status"] for r in recs] == ["running", "cancelled"], recs
    assert recs[1]["error_code"] == "CANCELLED" and recs[1]["decision"] == "allowed"
    assert "end" not in json.dumps(recs[1].get("exit", {}))
    verify_log(jobs)


@pytest.mark.anyio
async def test_a_short_job_finishes_with_its_output_and_exit_code(jobs):
    async with Client(jobs.stdio(), cache=None) as c:
        handle = await start(c, "echo hello from the job; echo to stderr >&2; exit 3")

        async def ended():
            r = await job(c, "job_status", job=handle["job"])
            return r.structured_content["status"] != "running" and r.structured_content
        status = await until(ended, what="the job to end")
        assert status["status"] == "finished" and status["exit_code"] == 3, status
        assert status["result"]["status"] == "success"
        assert "hello from the job" in status["result"]["result"]["stdout"]

        r = await job(c, "job_output", job=handle["job"])
        out = r.structured_content
        assert "hello from the job" in out["output"] and "to stderr" in out["output"], out
        assert out["eof"] and out["next_offset"] == out["total"], out
        # Read on from the end: nothing more.
        r = await job(c, "job_output", job=handle["job"], offset=out["next_offset"])
        assert r.structured_content["output"] == "" and r.structured_content["eof"]
        # A bounded read (stdout and stderr interleave as they arrive, in either order).
        r = await job(c, "job_output", job=handle["job"], offset=0, limit=5)
        assert r.structured_content["output"] == out["output"][:5] and r.structured_content["next_offset"] == 5

    recs = records_of(jobs, handle["call_id"])
    assert [r["status"] for r in recs] == ["running", "success"], recs
    assert recs[1]["exit"] == {"exit_code": 3}
    stats = verify_log(jobs)
    assert "bg" in stats


@pytest.mark.anyio
async def test_max_jobs_refuses_one_more_naming_the_key(jobs):
    secs = marker("max")
    async with Client(jobs.stdio(), cache=None) as c:
        a = await start(c, f"sleep {secs}")
        b = await start(c, f"sleep {secs}")
        r = await c.call_tool("bg", {"command": "echo third"})
        assert r.is_error and "max_jobs" in text(r), text(r)
        assert r.structured_content["error"]["code"] == "LIMIT_EXCEEDED"
        # Once one ends, there is room again.
        await job(c, "job_cancel", job=a["job"])
        d = await start(c, "echo fourth")
        await job(c, "job_cancel", job=b["job"])
        await job(c, "job_cancel", job=d["job"])
    assert not host_pids(secs)


@pytest.mark.anyio
async def test_approval_happens_before_the_job_starts(jobs):
    async def decline(ctx, params):
        return types.ElicitResult(action="decline")

    async def accept(ctx, params):
        return types.ElicitResult(action="accept", content={})

    async with Client(jobs.stdio(), mode="legacy", cache=None, elicitation_callback=decline) as c:
        r = await c.call_tool("bg_ask", {"command": "echo no"})
        assert r.is_error and text(r).startswith("REJECTED"), text(r)
        assert (await job(c, "job_list")).structured_content["jobs"] == []
    async with Client(jobs.stdio(), mode="legacy", cache=None, elicitation_callback=accept) as c:
        handle = await start(c, "echo yes", tool="bg_ask")
        # The start record comes first (a job this short may have written its end record already).
        first = records_of(jobs, handle["call_id"])[0]
        assert first["approved_by"] == "elicitation" and first["status"] == "running", first


@pytest.mark.anyio
async def test_a_job_is_not_found_by_anyone_else(jobs):
    secs = marker("owner")
    async with Client(jobs.stdio(), cache=None) as c:
        handle = await start(c, f"sleep {secs}")
        missing = await job(c, "job_status", job="j-" + "0" * 32)
        assert missing.is_error and text(missing).startswith("NOT_FOUND"), text(missing)

        # Another connection (stdio: another serve) does not find it.
        async with Client(jobs.stdio(), cache=None) as other:
            for name in ["job_status", "job_output", "job_cancel"]:
                r = await job(other, name, job=handle["job"])
                assert r.is_error and text(r).startswith("NOT_FOUND"), text(r)
                assert text(r).replace(handle["job"], "X") == text(missing).replace("j-" + "0" * 32, "X")
            assert (await job(other, "job_list")).structured_content["jobs"] == []

        # Nor does an HTTP client holding the server's token.
        token = "jobs-token-0123456789abcdef"
        p = subprocess.Popen(
            [os.environ["WARDEN_BIN"], *jobs.argv("serve", "--http", "127.0.0.1:0")],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            env={**os.environ, **jobs.env(), "WARDEN_HTTP_TOKEN": token}, cwd=jobs.ws, text=True,
        )
        try:
            url = None
            for line in p.stderr:
                m = re.search(r"serving MCP at (http://\S+/mcp)", line)
                if m:
                    url = m.group(1)
                    break
            assert url
            http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
            async with http, Client(streamable_http_client(url, http_client=http), cache=None) as web:
                r = await job(web, "job_status", job=handle["job"])
                assert r.is_error and text(r).startswith("NOT_FOUND"), text(r)
                # Its own job is its own.
                mine = await start(web, "echo over http")
                r = await job(web, "job_status", job=mine["job"])
                assert not r.is_error, text(r)
        finally:
            p.terminate()
            assert p.wait(timeout=15) == 0

        # The owner still sees its job.
        r = await job(c, "job_status", job=handle["job"])
        assert not r.is_error and r.structured_content["status"] == "running"
        await job(c, "job_cancel", job=handle["job"])


@pytest.mark.anyio
async def test_closing_stdin_mid_job_cancels_it_and_records_both_ends(jobs):
    secs = marker("eof")
    async with Client(jobs.stdio(), cache=None) as c:
        handle = await start(c, f"echo start; sleep {secs}; echo end")
        await until(pids_of(secs), what="the job's sleep")
    # The client closed stdin and warden exited: no process of the job is left.
    deadline = time.monotonic() + 10
    while host_pids(secs) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not host_pids(secs), "the job outlived serve"
    recs = records_of(jobs, handle["call_id"])
    assert [r["status"] for r in recs] == ["running", "cancelled"], recs
    verify_log(jobs)


def rpc(p, message):
    p.stdin.write(json.dumps(message) + "\n")
    p.stdin.flush()


def reply(p, want_id):
    for line in p.stdout:
        msg = json.loads(line)
        if msg.get("id") == want_id:
            return msg
    raise AssertionError("warden closed stdout")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_signal_mid_job_cancels_it_and_cleans_up_before_exit(jobs, sig):
    """SIGTERM, or SIGHUP (the terminal serve ran in was closed): the job is
    cancelled and recorded, the log's blank fill is cut, and the protected
    paths' placeholders (kept 200 ms between calls) are removed."""
    secs = marker("term" if sig == signal.SIGTERM else "hup")
    before = sorted(os.listdir(jobs.ws))
    p = subprocess.Popen(
        [os.environ["WARDEN_BIN"], *jobs.argv("serve")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env={**os.environ, **jobs.env()}, cwd=jobs.ws, text=True,
    )
    try:
        rpc(p, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"}}})
        assert "result" in reply(p, 1)
        rpc(p, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        rpc(p, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "bg", "arguments": {"command": f"sleep {secs}"}}})
        handle = reply(p, 2)["result"]["structuredContent"]
        deadline = time.monotonic() + 20
        while not host_pids(secs) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert host_pids(secs)
        p.send_signal(sig)
        assert p.wait(timeout=20) == 0, p.stderr.read()
    finally:
        if p.poll() is None:
            p.kill()
    assert not host_pids(secs), "the job outlived serve"
    recs = records_of(jobs, handle["call_id"])
    assert [r["status"] for r in recs] == ["running", "cancelled"], recs
    verify_log(jobs)
    log = jobs.log.read_bytes()
    assert log.endswith(b"\n") and b"\0" not in log, "the log's blank fill was not cut"
    assert sorted(os.listdir(jobs.ws)) == before, "placeholders (or other files) were left in the workspace"


def test_warden_call_runs_a_background_tool_in_the_foreground(jobs):
    out = subprocess.run(
        [os.environ["WARDEN_BIN"], *jobs.argv("call", "bg", json.dumps({"command": "echo fg"}))],
        capture_output=True, text=True, timeout=60, env={**os.environ, **jobs.env()}, cwd=jobs.ws,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    doc = json.loads(out.stdout)
    assert doc["status"] == "success" and doc["result"]["stdout"] == "fg\n", doc
    assert [r["status"] for r in jobs.records()] == ["success"]


@pytest.mark.anyio
async def test_stopping_the_http_server_mid_job_cancels_it_before_exit(jobs):
    secs = marker("http")
    token = "jobs-token-0123456789abcdef"
    p = subprocess.Popen(
        [os.environ["WARDEN_BIN"], *jobs.argv("serve", "--http", "127.0.0.1:0")],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        env={**os.environ, **jobs.env(), "WARDEN_HTTP_TOKEN": token}, cwd=jobs.ws, text=True,
    )
    try:
        url = None
        for line in p.stderr:
            m = re.search(r"serving MCP at (http://\S+/mcp)", line)
            if m:
                url = m.group(1)
                break
        assert url
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
        async with http, Client(streamable_http_client(url, http_client=http), cache=None) as web:
            handle = await start(web, f"echo start; sleep {secs}")
            await until(pids_of(secs), what="the job's sleep")
            # A later request of the same token finds it (stateless HTTP: no session ties them).
            r = await job(web, "job_status", job=handle["job"])
            assert not r.is_error and r.structured_content["status"] == "running", text(r)
        p.terminate()
        assert p.wait(timeout=20) == 0
    finally:
        if p.poll() is None:
            p.kill()
    assert not host_pids(secs), "the job outlived serve"
    recs = records_of(jobs, handle["call_id"])
    assert [r["status"] for r in recs] == ["running", "cancelled"], recs
    verify_log(jobs)


def component_policy() -> str:
    import hashlib

    wasm = os.environ["WARDEN_TESTKIT_WASM"]
    sha = hashlib.sha256(open(wasm, "rb").read()).hexdigest()
    return f"""
version = 1

[plugins.fs]
source = "builtin:fs"

[plugins.testkit]
source = "{wasm}"
sha256 = "{sha}"

[tools.read_file]
plugin = "fs"
tier = "auto"
background = true
fs.read = ["{{workspace}}"]

[tools.spin]
plugin = "testkit"
tier = "auto"
background = true
limits = {{ timeout = "1h" }}
"""


@pytest.mark.anyio
async def test_component_tools_run_as_jobs_and_cancel_at_their_epoch(warden):
    warden.policy.write_text(component_policy())
    async with Client(warden.stdio(), cache=None) as c:
        handle = await start_args(c, "read_file", {"path": "a.txt"})

        async def ended():
            r = await job(c, "job_status", job=handle["job"])
            return r.structured_content["status"] != "running" and r.structured_content
        status = await until(ended, what="the component job to end")
        assert status["status"] == "finished", status
        r = await job(c, "job_output", job=handle["job"])
        assert "hello from the workspace" in r.structured_content["output"], r.structured_content

        # A component that loops forever, cancelled: torn down at its next epoch tick.
        slow = await start_args(c, "spin", {})
        await anyio.sleep(0.5)
        began = time.monotonic()
        r = await job(c, "job_cancel", job=slow["job"])
        assert r.structured_content["status"] == "cancelled", r.structured_content
        assert time.monotonic() - began < 2.5, "the component ran on after job_cancel"
        # And one left spinning when the client goes away.
        left = await start_args(c, "spin", {})
    recs = records_of(warden, slow["call_id"])
    assert [r["status"] for r in recs] == ["running", "cancelled"], recs
    recs = records_of(warden, left["call_id"])
    assert [r["status"] for r in recs] == ["running", "cancelled"], recs
    verify_log(warden)
