"""`warden serve` on stdio, for both protocol generations, against the official
Python SDK: tools/list, calls, approvals (accept, decline, no capability,
forged and replayed state), progress and cancellation."""

import os
import subprocess
import time

import anyio
import mcp_types as types
import pytest
from mcp import ClientSession, stdio_client
from mcp.client import Client
from conftest import host_pids

MODES = ["legacy", "2026-07-28"]


def answer(action, content=None, seen=None):
    async def callback(ctx, params):
        if seen is not None:
            seen.append(params)
        return types.ElicitResult(action=action, content=content)

    return callback


def text(result) -> str:
    return "".join(c.text for c in result.content if c.type == "text")


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_tools_are_listed_sorted_with_policy_annotations(warden, mode):
    async with Client(warden.stdio(), mode=mode, cache=None) as c:
        assert c.protocol_version == ("2025-11-25" if mode == "legacy" else "2026-07-28")
        tools = (await c.list_tools()).tools
        names = [t.name for t in tools]
        assert names == ["delete_file", "fetch", "read_file", "shell", "write_file"], names
        by = {t.name: t for t in tools}
        assert "move_file" not in by  # tier deny is hidden
        a = by["read_file"].annotations
        assert (a.read_only_hint, a.destructive_hint, a.idempotent_hint, a.open_world_hint) == (True, False, True, False)
        a = by["write_file"].annotations
        assert (a.read_only_hint, a.destructive_hint, a.idempotent_hint, a.open_world_hint) == (False, False, False, False)
        assert by["delete_file"].annotations.destructive_hint is True
        a = by["fetch"].annotations
        assert (a.read_only_hint, a.open_world_hint) == (False, True)
        assert by["read_file"].input_schema["type"] == "object"
        assert "path" in by["read_file"].input_schema["properties"]
        assert "tier: ask" in by["write_file"].description
        assert "Writes: " + str(warden.ws) in by["write_file"].description
        assert "Network: 127.0.0.1:9" in by["fetch"].description
        # Stable across connections.
    async with Client(warden.stdio(), mode=mode, cache=None) as c:
        assert [t.name for t in (await c.list_tools()).tools] == names


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_read_file_returns_the_content_and_the_result_document(warden, mode):
    async with Client(warden.stdio(), mode=mode, cache=None) as c:
        r = await c.call_tool("read_file", {"path": "a.txt"})
        assert not r.is_error, text(r)
        assert "hello from the workspace" in text(r)
        assert r.structured_content["status"] == "success"
        assert r.structured_content["result"]["content"] == "hello from the workspace\n"


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_warden_errors_are_tool_errors_and_unknown_tools_protocol_errors(warden, mode):
    from mcp import MCPError

    async with Client(warden.stdio(), mode=mode, cache=None) as c:
        r = await c.call_tool("read_file", {"path": "../../etc/passwd"})
        assert r.is_error and text(r).startswith("INVALID_PATH"), text(r)
        r = await c.call_tool("read_file", {"nope": 1})
        assert r.is_error and text(r).startswith("INVALID_ARGS"), text(r)
        r = await c.call_tool("move_file", {"source": "a.txt", "dest": "b.txt"})
        assert r.is_error and text(r).startswith("DENIED"), text(r)
        assert (warden.ws / "a.txt").exists()
        with pytest.raises(MCPError) as e:
            await c.call_tool("no_such_tool", {})
        assert e.value.code == -32602
        # Still serving.
        assert not (await c.call_tool("read_file", {"path": "a.txt"})).is_error


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_write_runs_after_the_user_accepts(warden, mode):
    seen = []
    async with Client(warden.stdio(), mode=mode, cache=None, elicitation_callback=answer("accept", {}, seen)) as c:
        r = await c.call_tool("write_file", {"path": "new.txt", "content": "approved"})
        assert not r.is_error, text(r)
    assert (warden.ws / "new.txt").read_text() == "approved"
    assert len(seen) == 1
    assert "write_file" in seen[0].message and "new.txt" in seen[0].message
    assert "always" in seen[0].requested_schema["properties"]
    last = warden.records()[-1]
    assert (last["tool"], last["decision"], last["approved_by"], last["status"]) == (
        "write_file", "allowed", "elicitation", "success")


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_nothing_is_written_when_the_user_declines(warden, mode):
    async with Client(warden.stdio(), mode=mode, cache=None, elicitation_callback=answer("decline")) as c:
        r = await c.call_tool("write_file", {"path": "new.txt", "content": "refused"})
        assert r.is_error and text(r).startswith("REJECTED"), text(r)
    assert not (warden.ws / "new.txt").exists()
    assert warden.records()[-1]["status"] == "rejected"


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_a_dismissed_question_runs_nothing(warden, mode):
    async with Client(warden.stdio(), mode=mode, cache=None, elicitation_callback=answer("cancel")) as c:
        r = await c.call_tool("delete_file", {"path": "a.txt"})
        assert r.is_error and text(r).startswith("APPROVAL_REQUIRED"), text(r)
    assert (warden.ws / "a.txt").exists()


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_a_client_that_cannot_elicit_gets_an_error_naming_the_policy_line(warden, mode):
    async with Client(warden.stdio(), mode=mode, cache=None) as c:
        r = await c.call_tool("write_file", {"path": "new.txt", "content": "x"})
        assert r.is_error, text(r)
        t = text(r)
        assert t.startswith("APPROVAL_REQUIRED") and "elicitation" in t, t
        assert f"{warden.policy}:" in t and 'tier = "auto"' in t, t
    assert not (warden.ws / "new.txt").exists()
    assert warden.records()[-1]["decision"] == "approval_required"


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_a_refused_call_is_logged_at_warning_only_after_the_client_asks(warden, mode):
    logs = []

    async def on_log(params):
        logs.append(params)

    async def refused(c):
        r = await c.call_tool("write_file", {"path": "new.txt", "content": "x"})
        assert r.is_error and text(r).startswith("APPROVAL_REQUIRED"), text(r)

    # No level asked: nothing is sent.
    async with Client(warden.stdio(), mode=mode, cache=None, logging_callback=on_log) as c:
        await refused(c)
    assert logs == [], logs
    level = "warning" if mode != "legacy" else None
    async with Client(warden.stdio(), mode=mode, cache=None, logging_callback=on_log, log_level=level) as c:
        if mode == "legacy":
            await c.set_logging_level("warning")
        await refused(c)
    assert len(logs) == 1, logs
    assert logs[0].level == "warning" and logs[0].logger == "warden", logs
    assert logs[0].data["tool"] == "write_file" and logs[0].data["code"] == "APPROVAL_REQUIRED", logs
    # Above warning, a refusal is not sent.
    logs.clear()
    level = "error" if mode != "legacy" else None
    async with Client(warden.stdio(), mode=mode, cache=None, logging_callback=on_log, log_level=level) as c:
        if mode == "legacy":
            await c.set_logging_level("error")
        await refused(c)
    assert logs == [], logs


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_no_prompts_or_resources_and_not_found_names_what(warden, mode):
    async with Client(warden.stdio(), mode=mode, cache=None) as c:
        assert (await c.list_prompts()).prompts == []
        assert (await c.list_resources()).resources == []
        with pytest.raises(Exception) as e:
            await c.read_resource("test://nothing")
        assert getattr(e.value, "error", None) is not None, e.value
        assert e.value.error.code == -32602 and e.value.error.data == {"uri": "test://nothing"}, e.value.error


@pytest.mark.anyio
async def test_legacy_always_for_this_session_covers_later_ask_calls_only(warden):
    seen = []
    async with Client(warden.stdio(), mode="legacy", cache=None,
                      elicitation_callback=answer("accept", {"always": True}, seen)) as c:
        for i in range(3):
            r = await c.call_tool("write_file", {"path": f"f{i}.txt", "content": "x"})
            assert not r.is_error, text(r)
        assert len(seen) == 1
        # confirm is asked every time, and offers no "always".
        for _ in range(2):
            (warden.ws / "gone.txt").write_text("x")
            r = await c.call_tool("delete_file", {"path": "gone.txt"})
            assert not r.is_error, text(r)
        assert len(seen) == 3
        assert seen[1].requested_schema["properties"] == {}
    assert [r["approved_by"] for r in warden.records() if r["tool"] == "write_file"] == [
        "elicitation", "grant", "grant"]


async def first_round(session, tool, args):
    r = await session.call_tool(tool, args, allow_input_required=True)
    assert isinstance(r, types.InputRequiredResult), r
    assert set(r.input_requests) == {"warden-approval"}
    assert r.request_state.startswith("rs1.")
    return r


ACCEPT = {"warden-approval": types.ElicitResult(action="accept", content={})}


@pytest.mark.anyio
async def test_2026_request_state_cannot_be_forged_reused_or_moved_to_other_arguments(warden):
    async with stdio_client(warden.stdio()) as (read, write):
        async with ClientSession(read, write, elicitation_callback=answer("accept")) as s:
            await s.discover()
            args = {"path": "new.txt", "content": "one"}
            r = await first_round(s, "write_file", args)
            state = r.request_state

            # Tampered: one character of the tag changed.
            forged = state[:-2] + ("A" if state[-2] != "A" else "B") + state[-1]
            out = await s.call_tool("write_file", args, input_responses=ACCEPT, request_state=forged)
            assert out.is_error and "requestState" in text(out), text(out)
            # Invented outright.
            out = await s.call_tool("write_file", args, input_responses=ACCEPT, request_state="rs1.AAAA.BBBB")
            assert out.is_error
            # The real state on other arguments.
            other = {"path": "evil.txt", "content": "one"}
            out = await s.call_tool("write_file", other, input_responses=ACCEPT, request_state=state)
            assert out.is_error and "requestState" in text(out), text(out)
            # The real state on another tool.
            out = await s.call_tool("delete_file", {"path": "a.txt"}, input_responses=ACCEPT, request_state=state)
            assert out.is_error
            assert not (warden.ws / "new.txt").exists() and not (warden.ws / "evil.txt").exists()
            assert (warden.ws / "a.txt").exists()

            # The real state, once: runs.
            out = await s.call_tool("write_file", args, input_responses=ACCEPT, request_state=state)
            assert not out.is_error, text(out)
            assert (warden.ws / "new.txt").read_text() == "one"
            (warden.ws / "new.txt").unlink()
            # Replayed: refused, nothing written.
            out = await s.call_tool("write_file", args, input_responses=ACCEPT, request_state=state)
            assert out.is_error and "already used" in text(out), text(out)
            assert not (warden.ws / "new.txt").exists()


@pytest.mark.anyio
async def test_2026_request_state_expires(warden):
    params = warden.stdio()
    params.args[params.args.index("--approval-timeout") + 1] = "1s"
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write, elicitation_callback=answer("accept")) as s:
            await s.discover()
            args = {"path": "late.txt", "content": "x"}
            r = await first_round(s, "write_file", args)
            await anyio.sleep(2.2)
            out = await s.call_tool("write_file", args, input_responses=ACCEPT, request_state=r.request_state)
            assert out.is_error and "expired" in text(out), text(out)
    assert not (warden.ws / "late.txt").exists()


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_cancelling_a_sleeping_shell_kills_its_processes(warden, mode):
    # The pids the shell sees are its pid namespace's, and what it writes reaches
    # the workspace only when the call ends: the host finds the processes by a
    # marker in their command lines instead.
    secs = f"300.{os.getpid()}{len(mode)}"
    command = f"sleep {secs} & wait"

    async with Client(warden.stdio(), mode=mode, cache=None) as c:
        with anyio.move_on_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(c.call_tool, "shell", {"command": command})
                with anyio.fail_after(20):
                    while len(host_pids(secs)) < 2:
                        await anyio.sleep(0.05)
                pids = host_pids(secs)
                assert len(pids) >= 2 and all(alive(p) for p in pids), pids
                tg.cancel_scope.cancel()  # -> notifications/cancelled
        deadline = time.monotonic() + 10
        while any(alive(p) for p in pids) and time.monotonic() < deadline:
            await anyio.sleep(0.05)
        assert not any(alive(p) for p in pids), "the cancelled call's processes are still alive"
        # The server keeps serving, and the cancellation is on record.
        assert not (await c.call_tool("read_file", {"path": "a.txt"})).is_error
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            shells = [r for r in warden.records() if r["tool"] == "shell"]
            if shells:
                break
            await anyio.sleep(0.05)
        assert shells and shells[-1]["status"] == "cancelled" and shells[-1]["error_code"] == "CANCELLED", shells


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_long_calls_report_progress(warden, mode):
    notes = []

    async def on_progress(progress, total, message):
        notes.append((progress, message))

    async with Client(warden.stdio(), mode=mode, cache=None) as c:
        r = await c.call_tool("shell", {"command": "sleep 2.5; echo done"}, progress_callback=on_progress)
        assert not r.is_error, text(r)
        assert "done" in text(r)
    assert 1 <= len(notes) <= 3, notes
    assert all("shell running" in m for _, m in notes), notes


@pytest.mark.anyio
async def test_stdout_carries_only_mcp_and_eof_exits_cleanly(warden):
    # A raw client: two frames, then EOF.
    p = subprocess.run(
        [os.environ["WARDEN_BIN"], *warden.argv("serve")],
        input=(
            b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25",'
            b'"capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}\n'
            b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n'
            b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"shell","arguments":{"command":"echo noise; echo more >&2"}}}\n'
        ),
        capture_output=True, env={**os.environ, **warden.env()}, timeout=60, cwd=warden.ws,
    )
    assert p.returncode == 0, p.stderr
    import json
    frames = [json.loads(line) for line in p.stdout.decode().splitlines()]
    assert [f.get("id") for f in frames] == [1, 2], frames
    assert frames[1]["result"]["structuredContent"]["result"]["stdout"] == "noise\n"


@pytest.mark.anyio
@pytest.mark.parametrize("flag,expect", [("deny", "APPROVAL_REQUIRED"), ("yes", None)])
async def test_an_explicit_approve_flag_answers_instead_of_the_client(warden, flag, expect):
    seen = []
    async with Client(warden.stdio("--approve", flag), mode="legacy", cache=None,
                      elicitation_callback=answer("accept", {}, seen)) as c:
        r = await c.call_tool("write_file", {"path": "flag.txt", "content": "x"})
        if expect:
            assert r.is_error and text(r).startswith(expect), text(r)
        else:
            assert not r.is_error, text(r)
    assert seen == []
    assert (warden.ws / "flag.txt").exists() == (expect is None)
    last = warden.records()[-1]
    assert last["approved_by"] == ("flag" if flag == "yes" else None), last


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP"])
def test_a_signal_ends_a_stdio_server_cleanly_at_once(warden, sig):
    """Without background tools too: a signal right after a call (its
    placeholders still kept for the next one) ends serve at once with exit 0,
    the log's blank fill cut and no placeholder left in the workspace (before,
    the signal killed the process with nothing cleaned up)."""
    import json
    import signal
    before = sorted(os.listdir(warden.ws))
    p = subprocess.Popen(
        [os.environ["WARDEN_BIN"], *warden.argv("serve")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env={**os.environ, **warden.env()}, cwd=warden.ws, text=True,
    )

    def rpc(msg):
        p.stdin.write(json.dumps(msg) + "\n")
        p.stdin.flush()

    def reply(want):
        for line in p.stdout:
            msg = json.loads(line)
            if msg.get("id") == want:
                return msg
        raise AssertionError("warden closed stdout")

    try:
        rpc({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"}}})
        assert "result" in reply(1)
        rpc({"jsonrpc": "2.0", "method": "notifications/initialized"})
        rpc({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "shell", "arguments": {"command": "echo hi > out.txt"}}})
        assert reply(2)["result"]["isError"] is False
        started = time.monotonic()
        p.send_signal(getattr(signal, sig))
        assert p.wait(timeout=20) == 0, p.stderr.read()
        took = time.monotonic() - started
    finally:
        if p.poll() is None:
            p.kill()
    assert took < 3, f"serve took {took:.1f} s to end after {sig}"
    log = warden.log.read_bytes()
    assert log.endswith(b"\n") and b"\0" not in log, "the log's blank fill was not cut"
    assert sorted(os.listdir(warden.ws)) == sorted(before + ["out.txt"]), "placeholders were left in the workspace"
    assert [r["tool"] for r in warden.records()] == ["shell"]
