"""Fixtures for the end-to-end MCP tests: the real `warden serve`, driven by the
official Python SDK (`mcp` 2.3, which this project did not write).

Run by `cargo test --test mcp`, which creates the virtualenv and passes:
WARDEN_BIN (the binary), WARDEN_CACHE_DIR (shared compile cache) and, for the
Inspector test, INSPECTOR_CLI (the Inspector's cli.js).
"""

import json
import os
import pathlib

import pytest

WARDEN = os.environ["WARDEN_BIN"]

FIXTURES = pathlib.Path(__file__).resolve().parent.parent / "fixtures" / "policies"

# The policy every MCP suite starts from (tests/fixtures/policies/mcp.toml).
POLICY = (FIXTURES / "mcp.toml").read_text()



def marker(tag: str) -> str:
    """A sleep duration unique to this test, to find its processes from the host
    (inside the sandbox's pid namespace the pids are not the host's)."""
    return f"300.{os.getpid()}{abs(hash(tag)) % 10000}"


def host_pids(secs: str) -> list[int]:
    """The host pids whose command line holds `secs` (see [`marker`])."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if secs.encode() in f.read():
                        found.append(int(entry))
            except OSError:
                pass
    return found


class Warden:
    """One test's workspace, policy and audit log, and how to start warden on them."""

    def __init__(self, root: pathlib.Path):
        self.root = root
        self.ws = root / "ws"
        self.ws.mkdir()
        (self.ws / "a.txt").write_text("hello from the workspace\n")
        self.policy = root / "policy.toml"
        self.policy.write_text(POLICY)
        self.log = root / "audit.jsonl"

    def argv(self, *extra: str) -> list[str]:
        return [
            "--policy", str(self.policy),
            "--audit-log", str(self.log),
            "--workspace", str(self.ws),
            *extra,
        ]

    def env(self) -> dict[str, str]:
        return {
            "WARDEN_CACHE_DIR": os.environ["WARDEN_CACHE_DIR"],
            "HOME": str(self.root),
            "RUST_LOG": "warn",
        }

    def stdio(self, *serve_args: str):
        from mcp import StdioServerParameters

        return StdioServerParameters(
            command=WARDEN,
            args=self.argv("serve", "--approval-timeout", "10s", *serve_args),
            env=self.env(),
            cwd=str(self.ws),
        )

    def records(self) -> list[dict]:
        if not self.log.exists():
            return []
        out = []
        for line in self.log.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                pass
        return out


@pytest.fixture
def warden(tmp_path: pathlib.Path) -> Warden:
    return Warden(tmp_path)


@pytest.fixture
def anyio_backend():
    return "asyncio"
