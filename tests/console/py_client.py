"""One write_file call from the official Python SDK (mcp 2.3) on the 2025-11-25
protocol over Streamable HTTP: it cannot be asked, so the call waits in the
inbox until the person answers in the console (tests/console/console.mjs)."""

import os
import sys

import anyio
import httpx2
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client


async def main():
    headers = {"Authorization": "Bearer " + os.environ["MCP_TOKEN"]}
    http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=90))
    c = Client(streamable_http_client(os.environ["MCP_URL"], http_client=http), cache=None, mode="legacy")
    async with http, c:
        r = await c.call_tool("write_file", {"path": "py.txt", "content": "written by the Python SDK"})
        print("".join(getattr(b, "text", "") for b in r.content))
        return 1 if r.is_error else 0


sys.exit(anyio.run(main))
