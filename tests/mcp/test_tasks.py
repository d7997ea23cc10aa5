"""MCP tasks under `warden serve`, driven by real task clients this project did
not write: the TypeScript SDK 1.32.2's experimental tasks API (the 2025-11-25
`tasks` capability VS Code speaks) and `@modelcontextprotocol/ext-tasks` over
the v2 client (the 2026-07-28 `io.modelcontextprotocol/tasks` extension).

The clients are `tasks_clients/tasks_2025.mjs` and `tasks_2026.mjs`; each
prints one JSON observation a line. Their packages come from TASKS_CLIENTS (a
directory where `tasks_clients/package.json` was npm-installed), node from
TASKS_NODE (default `node`).

A background tool called as a task runs to its result; a cancelled one leaves
no process; serve stopped mid-task (SIGTERM, or the client closing stdin)
leaves no process; each writes the job's start record (`running`) and end
record under one call id, and the log's chain verifies."""

import json
import os
import pathlib
import queue
import re
import shutil
import signal
import subprocess
import threading
import time

import pytest
from conftest import FIXTURES, host_pids, marker

WARDEN = os.environ["WARDEN_BIN"]
HERE = pathlib.Path(__file__).parent / "tasks_clients"
TASK_ID = re.compile(r"j-[0-9a-f]{32}")
RELATED_TASK = "io.modelcontextprotocol/related-task"
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"

# A background shell tool and read_file (tests/fixtures/policies/background.toml).
POLICY = (FIXTURES / "background.toml").read_text()


@pytest.fixture(scope="session")
def clients(tmp_path_factory) -> pathlib.Path:
    """The two scripts beside the installed packages (ES modules resolve their
    imports from the script's own directory, so they are copied next to a link
    to TASKS_CLIENTS/node_modules)."""
    installed = os.environ.get("TASKS_CLIENTS")
    assert installed, "set TASKS_CLIENTS to a directory where tests/mcp/tasks_clients/package.json was npm-installed"
    modules = pathlib.Path(installed) / "node_modules"
    assert (modules / "@modelcontextprotocol" / "ext-tasks").is_dir(), f"no ext-tasks under {modules}"
    d = tmp_path_factory.mktemp("tasks_clients")
    for name in ["tasks_2025.mjs", "tasks_2026.mjs", "package.json"]:
        shutil.copy(HERE / name, d / name)
    (d / "node_modules").symlink_to(modules.resolve(), target_is_directory=True)
    return d


@pytest.fixture
def tasks(warden):
    warden.policy.write_text(POLICY)
    return warden


def wait_for(predicate, timeout=20.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def text(result: dict) -> str:
    return "".join(c.get("text", "") for c in result.get("content", []) if c.get("type") == "text")


def bg_records(warden) -> list[dict]:
    return [r for r in warden.records() if r["tool"] == "bg"]


def verify_log(warden):
    out = subprocess.run([WARDEN, "--audit-log", str(warden.log), "log", "verify"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stdout + out.stderr


class Script:
    """One client script run: its observations as they arrive, its stdin."""

    def __init__(self, clients: pathlib.Path, generation: str, scenario: str, config: dict):
        self.p = subprocess.Popen(
            [os.environ.get("TASKS_NODE", "node"), str(clients / f"tasks_{generation}.mjs"), scenario, json.dumps(config)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            cwd=clients, text=True,
        )
        self.events: list[dict] = []
        self.stderr: list[str] = []
        self._q: queue.Queue = queue.Queue()
        self._out = threading.Thread(target=self._read_stdout, daemon=True)
        self._err = threading.Thread(target=self._read_stderr, daemon=True)
        self._out.start()
        self._err.start()

    def _read_stdout(self):
        for line in self.p.stdout:
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                event = {"event": "unparsed", "line": line}
            self.events.append(event)
            self._q.put(event)
        self._q.put(None)

    def _read_stderr(self):
        for line in self.p.stderr:
            self.stderr.append(line)

    def report(self) -> str:
        events = "\n".join(json.dumps(e)[:2000] for e in self.events)
        return f"\n--- observations ---\n{events}\n--- stderr ---\n{''.join(self.stderr)[-8000:]}"

    def until(self, name: str, timeout: float = 90) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {name!r} observation within {timeout}s" + self.report())
            try:
                event = self._q.get(timeout=left)
            except queue.Empty:
                continue
            if event is None or event["event"] == "fatal":
                raise AssertionError(f"the client ended before {name!r}" + self.report())
            if event["event"] == name:
                return event

    def send(self, line: str):
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()

    def close_stdin(self):
        self.p.stdin.close()

    def finish(self, timeout: float = 90) -> "Script":
        try:
            code = self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
            raise AssertionError(f"the client did not end within {timeout}s" + self.report())
        self._out.join(10)
        self._err.join(10)
        assert code == 0, f"the client exited {code}" + self.report()
        return self

    def all(self, name: str) -> list[dict]:
        return [e for e in self.events if e["event"] == name]

    def one(self, name: str) -> dict:
        found = self.all(name)
        assert len(found) == 1, f"{len(found)} {name!r} observations" + self.report()
        return found[0]


def config(warden, command: str, **extra) -> dict:
    return {
        "command": WARDEN,
        "args": warden.argv("serve", "--approval-timeout", "10s"),
        "env": warden.env(),
        "cwd": str(warden.ws),
        "tool": "bg",
        "arguments": {"command": command},
        "plain": {"tool": "read_file", "arguments": {"path": "a.txt"}},
        **extra,
    }


def assert_ended(warden, end_status: str, script: Script) -> list[dict]:
    """The job's two records: the start (`running`) and the end, one call id."""
    recs = bg_records(warden)
    assert [r["status"] for r in recs] == ["running", end_status], json.dumps(recs, indent=1) + script.report()
    assert recs[0]["call_id"] == recs[1]["call_id"], recs
    assert recs[0]["decision"] == "allowed" and recs[1]["decision"] == "allowed", recs
    if end_status == "cancelled":
        assert recs[1]["error_code"] == "CANCELLED", recs[1]
    verify_log(warden)
    return recs


def assert_gone(secs: str, script: Script):
    deadline = time.monotonic() + 10
    while host_pids(secs) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not host_pids(secs), "the task's processes are still alive" + script.report()


# -- 2025-11-25: the SDK's experimental tasks API --------------------------------


def test_2025_a_background_tool_runs_as_a_task_to_its_result(tasks, clients):
    s = Script(clients, "2025", "run", config(tasks, "echo hello from the task; sleep 1.5; echo done")).finish()

    caps = s.one("initialized")["serverCapabilities"]
    assert caps.get("tasks") == {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}, caps
    tools = {t["name"]: t for t in s.one("tools")["tools"]}
    assert tools["bg"]["execution"] == {"taskSupport": "optional"}, tools["bg"]
    assert (tools["read_file"]["execution"] or {}).get("taskSupport", "forbidden") == "forbidden", tools["read_file"]
    # The SDK decided to call it as a task from tools/list alone (it sent `task: {}`).
    assert s.one("task_tool")["isToolTask"] is True

    created = s.one("created")["task"]
    task_id = created["taskId"]
    assert TASK_ID.fullmatch(task_id) and created["status"] == "working", created
    assert {"createdAt", "lastUpdatedAt", "ttl"} <= created.keys(), created
    statuses = [e["task"]["status"] for e in s.all("status")]
    assert statuses[0] == "working" and statuses[-1] == "completed", statuses
    assert set(statuses) == {"working", "completed"}, statuses

    result = s.one("result")["result"]
    assert not result.get("isError"), result
    assert "hello from the task" in text(result) and "done" in text(result), result
    assert result["_meta"][RELATED_TASK]["taskId"] == task_id, result
    # tasks/result again, after the end: the same result.
    assert text(s.one("task_result")["result"]) == text(result)
    assert s.one("get")["task"]["status"] == "completed"
    listed = {t["taskId"]: t for t in s.one("list")["tasks"]}
    assert listed[task_id]["status"] == "completed", listed
    assert not s.one("plain_result")["result"].get("isError")

    recs = assert_ended(tasks, "success", s)
    assert result["structuredContent"]["call_id"] == recs[0]["call_id"], result


def test_2025_a_cancelled_task_leaves_no_process(tasks, clients):
    secs = marker("2025-cancel")
    s = Script(clients, "2025", "cancel", config(tasks, f"echo start; sleep {secs}; echo end", ttl=60000))
    created = s.until("created")["task"]
    assert TASK_ID.fullmatch(created["taskId"]), created
    s.until("waiting")
    wait_for(lambda: host_pids(secs), what="the task's sleep")
    # The start record is written before the task is handed out.
    assert [r["status"] for r in bg_records(tasks)] == ["running"], tasks.records()
    s.send("cancel")
    cancelled = s.until("cancel")["task"]
    assert cancelled["taskId"] == created["taskId"] and cancelled["status"] == "cancelled", cancelled
    assert_gone(secs, s)
    s.finish()

    assert not s.all("result"), "a cancelled task produced a result" + s.report()
    [error] = s.all("stream_error")
    assert "was cancelled" in error["message"], error
    assert s.one("get")["task"]["status"] == "cancelled"
    listed = {t["taskId"]: t for t in s.one("list")["tasks"]}
    assert listed[created["taskId"]]["status"] == "cancelled", listed
    # An unknown task id is invalid params.
    assert s.one("unknown_get_error")["code"] == -32602, s.report()
    assert not s.one("plain_result")["result"].get("isError")

    recs = assert_ended(tasks, "cancelled", s)
    assert "end" not in json.dumps(recs[1].get("exit", {}))


# -- 2026-07-28: ext-tasks over the v2 client --------------------------------------


def test_2026_a_background_tool_runs_as_a_task_to_its_result(tasks, clients):
    s = Script(clients, "2026", "run", config(tasks, "echo hello from the task; sleep 1.5; echo done")).finish()

    init = s.one("initialized")
    assert init["era"] == "modern" and init["protocolVersion"] == "2026-07-28", init
    assert init["serverCapabilities"]["extensions"][TASKS_EXTENSION] == {}, init
    caps = s.one("session")["capabilities"]
    assert caps["execution"] is True and caps["cancellation"] is True, caps

    wire = s.one("created")["wire"]
    assert wire["resultType"] == "task" and wire["status"] == "working", wire
    assert TASK_ID.fullmatch(wire["taskId"]), wire
    assert {"createdAt", "lastUpdatedAt", "ttlMs", "pollIntervalMs"} <= wire.keys(), wire
    statuses = s.one("result")["statuses"]
    assert statuses[0] == "working" and statuses[-1] == "completed", statuses

    outcome = s.one("result")["outcome"]
    assert outcome["status"] == "completed", outcome
    result = outcome["result"]
    assert result["resultType"] == "complete" and not result.get("isError"), result
    assert "hello from the task" in text(result) and "done" in text(result), result

    # tasks/get after the end: the DetailedTask, its result inline.
    got = s.one("get")["task"]["raw"]
    assert got["taskId"] == wire["taskId"] and got["status"] == "completed", got
    assert text(got["result"]) == text(result), got
    assert s.one("unknown_get_error")["name"] == "JsonRpcResponseError", s.report()
    assert s.one("plain_execution")["kind"] == "immediate"

    recs = assert_ended(tasks, "success", s)
    assert result["structuredContent"]["call_id"] == recs[0]["call_id"], result


def test_2026_a_cancelled_task_leaves_no_process(tasks, clients):
    secs = marker("2026-cancel")
    s = Script(clients, "2026", "cancel", config(tasks, f"echo start; sleep {secs}; echo end"))
    created = s.until("created")
    assert TASK_ID.fullmatch(created["taskId"]), created
    s.until("waiting")
    wait_for(lambda: host_pids(secs), what="the task's sleep")
    assert [r["status"] for r in bg_records(tasks)] == ["running"], tasks.records()
    s.send("cancel")
    ack = s.until("cancel")["response"]
    assert ack["result"]["resultType"] == "complete", ack
    assert_gone(secs, s)
    s.finish()

    assert s.one("result")["outcome"]["status"] == "cancelled", s.report()
    got = s.one("get")["task"]["raw"]
    assert got["status"] == "cancelled" and "result" not in got, got
    assert s.one("plain_execution")["kind"] == "immediate"

    recs = assert_ended(tasks, "cancelled", s)
    assert "end" not in json.dumps(recs[1].get("exit", {}))


# -- serve stopped mid-task ----------------------------------------------------------


@pytest.mark.parametrize("how", ["sigterm", "stdin"])
@pytest.mark.parametrize("generation", ["2025", "2026"])
def test_stopping_serve_mid_task_cancels_it_before_exit(tasks, clients, generation, how):
    secs = marker(f"hold-{generation}-{how}")
    s = Script(clients, generation, "hold", config(tasks, f"echo start; sleep {secs}; echo end"))
    held = s.until("holding")
    assert TASK_ID.fullmatch(held["taskId"]), held
    wait_for(lambda: host_pids(secs), what="the task's sleep")
    if how == "sigterm":
        os.kill(held["serverPid"], signal.SIGTERM)
    else:
        # The host goes away: the SDK closes warden's stdin (SIGTERM only after 2 s).
        s.close_stdin()
    end = s.until("server_exit", timeout=30)
    assert end["code"] == 0 and end["signal"] is None, end
    s.finish()
    if how == "stdin":
        waited = end["at"] - s.one("closing")["at"]
        assert waited < 2000, f"warden took {waited} ms to exit after stdin ended: the SDK's SIGTERM stopped it"
    assert s.one("held")["ended"] == ("server" if how == "sigterm" else "stdin")
    assert_gone(secs, s)
    assert_ended(tasks, "cancelled", s)


def test_2025_tasks_over_http_are_rewritten_per_request(tasks):
    """Over stateless HTTP no session remembers the revision: each request's
    MCP-Protocol-Version header (or an initialize's body) selects the
    2025-11-25 rewriting. Raw JSON-RPC, since the SDK's task client above runs
    on stdio: the capability, taskSupport, a task-augmented call, tasks/result
    (from a later request), tasks/list, and a 2026-07-28 request left alone."""
    import urllib.request

    token = "tasks-token-0123456789abcdef"
    p = subprocess.Popen(
        [WARDEN, *tasks.argv("serve", "--http", "127.0.0.1:0")],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        env={**os.environ, **tasks.env(), "WARDEN_HTTP_TOKEN": token}, cwd=tasks.ws, text=True,
    )
    try:
        url = None
        for line in p.stderr:
            m = re.search(r"serving MCP at (http://\S+/mcp)", line)
            if m:
                url = m.group(1)
                break
        assert url

        def post(msg, version="2025-11-25", **extra):
            headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json",
                       "Accept": "application/json, text/event-stream", **extra}
            if version:
                headers["MCP-Protocol-Version"] = version
            req = urllib.request.Request(url, data=json.dumps(msg).encode(), headers=headers)
            with urllib.request.urlopen(req, timeout=30) as r:
                return json.loads(r.read())

        init = post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}},
            version=None)
        assert init["result"]["capabilities"]["tasks"]["requests"] == {"tools": {"call": {}}}, init
        listed = post({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})["result"]["tools"]
        support = {t["name"]: t.get("execution", {}).get("taskSupport") for t in listed}
        assert support["bg"] == "optional" and support["read_file"] is None, support
        created = post({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "bg", "arguments": {"command": "sleep 0.5; echo over-http"}, "task": {"ttl": 60000}}})
        task = created["result"]["task"]
        assert TASK_ID.fullmatch(task["taskId"]) and task["status"] == "working", created
        result = post({"jsonrpc": "2.0", "id": 3, "method": "tasks/result", "params": {"taskId": task["taskId"]}})
        assert result["result"]["_meta"][RELATED_TASK] == {"taskId": task["taskId"]}, result
        assert "over-http" in text(result["result"]), result
        listed = post({"jsonrpc": "2.0", "id": 4, "method": "tasks/list", "params": {}})["result"]["tasks"]
        assert [(t["taskId"], t["status"]) for t in listed] == [(task["taskId"], "completed")], listed
        # A task call of a tool that is not background: -32601, naming the key.
        refused = post({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {
            "name": "read_file", "arguments": {"path": str(tasks.ws / "a.txt")}, "task": {}}})
        assert refused["error"]["code"] == -32601 and "background = true" in refused["error"]["message"], refused
        # A 2026-07-28 request is not rewritten: tasks/get is rmcp's, gated on the extension.
        modern = post({"jsonrpc": "2.0", "id": 6, "method": "tasks/get", "params": {"taskId": task["taskId"], "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS_EXTENSION: {}}}}}},
            version="2026-07-28", **{"Mcp-Method": "tasks/get", "Mcp-Name": task["taskId"]})
        assert modern["result"]["status"] == "completed" and modern["result"]["resultType"] == "complete", modern
        assert modern["result"]["result"]["isError"] is False, modern
        p.terminate()
        assert p.wait(timeout=20) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    records = bg_records(tasks)
    assert [r["status"] for r in records] == ["running", "success"], records
    verify_log(tasks)
