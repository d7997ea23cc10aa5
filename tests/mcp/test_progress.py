"""A process tool's own progress (`WARDEN_PROGRESS_FD`) through `warden serve`:
the program writes JSON lines to the descriptor the variable names, and the
official Python SDK sees them as `notifications/progress` with numeric
progress and total, increasing, all before the result; what is not a valid,
increasing report never reaches the client."""

import pytest
from mcp.client import Client

MODES = ["legacy", "2026-07-28"]

# Each report waits a little longer than warden's 50 ms rate limit, so all
# three valid ones are forwarded; the bad lines between them are ignored.
SCRIPT = r"""
say() { printf '%s\n' "$1" >&"$WARDEN_PROGRESS_FD"; sleep 0.12; }
say '{"progress": 1, "total": 3, "message": "one"}'
say 'not json'
say '{"progress": -5, "total": 3}'
say '{"progress": 2, "total": 3, "message": "two \u001b[31mred"}'
say '{"progress": 1, "total": 3, "message": "going back"}'
say '{"progress": 3, "total": 3, "message": "three"}'
echo done
"""

POLICY = """
version = 1

[tools.steps]
exec = ["/bin/bash", "-c", "{script}"]
tier = "auto"
fs.read = ["{system}", "{workspace}"]
fs.write = ["{tmp}"]
env = { pass = ["PATH"] }
limits = { timeout = "20s" }
"""


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_process_progress_becomes_increasing_numeric_notifications(warden, mode):
    warden.policy.write_text(POLICY)
    notes = []

    async def on_progress(progress, total, message):
        notes.append((progress, total, message))

    async with Client(warden.stdio(), mode=mode, cache=None) as c:
        r = await c.call_tool("steps", {"script": SCRIPT}, progress_callback=on_progress)
        # Every notification arrived before the result did.
        seen_before_result = list(notes)
        assert not r.is_error, r
        assert r.structured_content["result"]["stdout"] == "done\n", r.structured_content
    assert [(p, t) for p, t, _ in seen_before_result] == [(1, 3), (2, 3), (3, 3)], notes
    assert all(isinstance(p, (int, float)) and isinstance(t, (int, float)) for p, t, _ in notes)
    assert notes[0][2] == "one" and notes[2][2] == "three", notes
    assert "\x1b" not in notes[1][2] and notes[1][2].startswith("two "), notes
    [rec] = [x for x in warden.records() if x["tool"] == "steps"]
    assert rec["usage"]["progress"] == {"accepted": 3, "ignored": 3}, rec


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_a_slow_starter_keeps_its_own_reports_after_the_running_time(warden, mode):
    # 2.3 s of silence (warden sends its running-time notifications), then the
    # tool's own 1/3, 2/3, 3/3: none may be held back as "not increasing".
    warden.policy.write_text(POLICY)
    notes = []

    async def on_progress(progress, total, message):
        notes.append((progress, total, message))

    script = "sleep 2.3\n" + SCRIPT
    async with Client(warden.stdio(), mode=mode, cache=None) as c:
        r = await c.call_tool("steps", {"script": script}, progress_callback=on_progress)
        assert not r.is_error, r
    running = [n for n in notes if n[1] is None]
    own = [(p, t) for p, t, _ in notes if t is not None]
    assert len(running) >= 1 and all("running for" in m for _, _, m in running), notes
    assert own == [(1, 3), (2, 3), (3, 3)], notes
    values = [p for p, _, _ in notes]
    assert values == sorted(values) and len(set(values)) == len(values), notes
