"""Load: 10,000 calls from 8 concurrent MCP clients against one `warden serve
--http`, alternating a component tool (read_file) and a process tool (shell).
Every call is answered; after warm-up warden's open descriptors do not grow
and its memory stays flat (read from /proc/PID/fd and /proc/PID/status); no
zombie or orphan process is left; the audit log verifies with every record."""

import os
import subprocess
import threading

import httpx2

from test_durability import call, start

CLIENTS = 8
CALLS = 10_000
WARM_UP = 1_000


def rss_kib(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def children(pid: int) -> list[tuple[int, str]]:
    """Processes whose parent is `pid`, with their state."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = open(f"/proc/{entry}/stat").read()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid:
            out.append((int(entry), fields[0]))
    return out


def test_10000_calls_from_8_clients_leak_nothing(warden):
    p, url = start(warden)
    done = 0
    failures: list[str] = []
    lock = threading.Lock()
    warm = threading.Event()
    samples = {}

    def client(k):
        nonlocal done
        with httpx2.Client() as http:
            for n in range(CALLS // CLIENTS):
                name, args = (("read_file", {"path": "a.txt"}) if n % 2 else
                              ("shell", {"command": f"echo load {k} {n}"}))
                try:
                    result = call(http, url, n + 1, name, args)
                    doc = result.get("structuredContent") or {}
                    ok = doc.get("status") == "success"
                    if not ok:
                        failures.append(f"{name}: {doc}")
                except Exception as e:  # noqa: BLE001
                    failures.append(f"{name}: {e!r}")
                with lock:
                    done += 1
                    if done == WARM_UP:
                        samples["warm"] = (rss_kib(p.pid), fds(p.pid))
                        warm.set()

    threads = [threading.Thread(target=client, args=(k,)) for k in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    end_rss, end_fds = rss_kib(p.pid), fds(p.pid)
    leftover = children(p.pid)
    p.terminate()
    assert p.wait(timeout=30) == 0

    assert done == CALLS and not failures, f"{len(failures)} failed, e.g. {failures[:3]}"
    warm_rss, warm_fds = samples["warm"]
    print(f"RSS {warm_rss} KiB after {WARM_UP} calls, {end_rss} KiB after {CALLS}; fds {warm_fds} -> {end_fds}")
    assert end_fds <= warm_fds, f"descriptors grew from {warm_fds} to {end_fds}"
    assert end_rss <= warm_rss + 16 * 1024, f"memory grew from {warm_rss} KiB to {end_rss} KiB"
    assert not leftover, f"processes left under warden: {leftover}"
    ps = subprocess.run(["pgrep", "-f", "echo load"], capture_output=True, text=True)
    assert ps.stdout.strip() == "", f"orphans: {ps.stdout}"
    out = subprocess.run([os.environ["WARDEN_BIN"], "log", "verify", str(warden.log)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and f"ok: {CALLS} records" in out.stdout, out.stdout + out.stderr
