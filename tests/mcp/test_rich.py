"""Rich results of `warden:plugin@0.2.0` components through `warden serve`:
the fixture `plugins/conformance` (WARDEN_CONFORMANCE_WASM) returns images,
audio, embedded resources and progress; the official Python SDK and the MCP
Inspector CLI list and call it, beside the 0.1.0 builtin `fs`, unchanged."""

import base64
import hashlib
import json
import os
import subprocess

import pytest
from mcp.client import Client

MODES = ["legacy", "2026-07-28"]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
TOOLS = [
    "json_schema_2020_12_tool",
    "oversize_image",
    "test_audio_content",
    "test_embedded_resource",
    "test_error_handling",
    "test_image_content",
    "test_multiple_content_types",
    "test_simple_text",
    "test_tool_with_progress",
]


def rich_policy() -> str:
    wasm = os.environ["WARDEN_CONFORMANCE_WASM"]
    sha = hashlib.sha256(open(wasm, "rb").read()).hexdigest()
    tools = "".join(f'\n[tools.{t}]\nplugin = "conformance"\ntier = "auto"\n' for t in TOOLS if t != "oversize_image")
    return f"""
version = 1

[plugins.fs]
source = "builtin:fs"

[plugins.conformance]
source = "{wasm}"
sha256 = "{sha}"

[tools.read_file]
plugin = "fs"
tier = "auto"
fs.read = ["{{workspace}}"]

[tools.oversize_image]
plugin = "conformance"
tier = "auto"
limits = {{ max_output = "4KiB" }}
{tools}"""


@pytest.fixture
def rich(warden):
    warden.policy.write_text(rich_policy())
    return warden


def text(result) -> str:
    return "".join(c.text for c in result.content if c.type == "text")


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_a_component_image_is_listed_and_called_as_an_mcp_image(rich, mode):
    async with Client(rich.stdio(), mode=mode, cache=None) as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
        assert sorted(tools) == sorted([*TOOLS, "read_file"]), sorted(tools)
        schema = tools["json_schema_2020_12_tool"].input_schema
        assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        assert schema["$defs"]["address"]["$anchor"] == "addressDef"
        assert schema["additionalProperties"] is False and "if" in schema and "else" in schema

        r = await c.call_tool("test_image_content", {})
        assert not r.is_error, r
        [image] = r.content
        assert image.type == "image" and image.mime_type == "image/png", image
        assert base64.b64decode(image.data).startswith(PNG_SIGNATURE)
        assert r.meta["warden/call"]["status"] == "success", r.meta

        r = await c.call_tool("test_multiple_content_types", {})
        assert [b.type for b in r.content] == ["text", "image", "resource"], r.content
        assert r.content[2].resource.uri == "test://mixed-content-resource"
        assert json.loads(r.content[2].resource.text) == {"test": "data", "value": 123}

        r = await c.call_tool("test_audio_content", {})
        assert r.content[0].type == "audio" and r.content[0].mime_type == "audio/wav"
        assert base64.b64decode(r.content[0].data).startswith(b"RIFF")

        r = await c.call_tool("test_error_handling", {})
        assert r.is_error and "intentionally returns an error" in r.content[0].text, r

        # The 0.1.0 builtin beside it, unchanged.
        r = await c.call_tool("read_file", {"path": "a.txt"})
        assert not r.is_error and "hello from the workspace" in text(r)
        assert r.structured_content["result"]["content"] == "hello from the workspace\n"

    # The audit record keeps the kinds and sizes of the blocks, never their bytes.
    rec = [x for x in rich.records() if x["tool"] == "test_image_content"][0]
    assert rec["content"] == {"blocks": [{"type": "image", "bytes": 69, "mime_type": "image/png"}]}, rec
    assert "iVBOR" not in rich.log.read_text()


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_component_progress_becomes_increasing_numeric_notifications(rich, mode):
    notes = []

    async def on_progress(progress, total, message):
        notes.append((progress, total, message))

    async with Client(rich.stdio(), mode=mode, cache=None) as c:
        r = await c.call_tool("test_tool_with_progress", {}, progress_callback=on_progress)
        assert not r.is_error, r
        assert r.structured_content == {"steps": 3}
    assert [(p, t) for p, t, _ in notes] == [(0, 100), (50, 100), (100, 100)], notes
    assert notes[1][2] == "step 50 of 100"


@pytest.mark.anyio
async def test_an_image_over_max_output_is_dropped_whole_with_a_marker(rich):
    async with Client(rich.stdio(), cache=None) as c:
        r = await c.call_tool("oversize_image", {"bytes": 70000})
        assert not r.is_error, r
        assert [b.type for b in r.content] == ["text", "text", "text"], r.content
        assert "image block (image/png, 70000 bytes) dropped" in r.content[1].text
        assert "truncated at limits.max_output" in r.content[2].text
        call = r.meta["warden/call"]
        assert call["truncated"] is True and call["dropped"]["blocks"] == 1, call
        r = await c.call_tool("oversize_image", {"bytes": 1000})
        assert [b.type for b in r.content] == ["text", "image"], r.content


def inspector(warden, *args: str) -> dict:
    cli = os.environ.get("INSPECTOR_CLI")
    assert cli, "INSPECTOR_CLI is not set (cargo test --test mcp installs the Inspector)"
    cmd = ["node", cli, "--cli", os.environ["WARDEN_BIN"], *warden.argv("serve"), *args]
    env = {**os.environ, **warden.env()}
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=warden.ws, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    return json.loads(p.stdout)


def test_the_mcp_inspector_lists_and_calls_a_component_image(rich):
    listed = inspector(rich, "--method", "tools/list")
    assert "test_image_content" in [t["name"] for t in listed["tools"]]
    called = inspector(rich, "--method", "tools/call", "--tool-name", "test_image_content")
    assert called.get("isError") is False, called
    [image] = called["content"]
    assert image["type"] == "image" and image["mimeType"] == "image/png", image
    assert base64.b64decode(image["data"]).startswith(PNG_SIGNATURE)
