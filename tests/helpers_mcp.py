"""An MCP client session against `runward mcp` (stdio) and one tool call in it, for the tests that
hold the MCP tools to the CLI."""

from __future__ import annotations

import contextlib
import json
import os
import sys

import pytest

pytest.importorskip("mcp", reason="needs the MCP SDK: pip install -e '.[mcp]'")
import anyio  # noqa: E402  (installed with mcp)
from mcp import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402


@contextlib.asynccontextmanager
async def _session(env: dict, cwd, args=(), timeout: float = 60):
    """A ClientSession on `runward mcp ARGS`, spawned by the SDK's stdio client."""
    params = StdioServerParameters(command=sys.executable, args=["-m", "runward", "mcp", *args], env=env, cwd=str(cwd))
    # the server's stderr to a file: pytest's captured sys.stderr is no place for a child's
    with open(os.path.join(str(cwd), "mcp-server.stderr"), "a") as err:
        async with stdio_client(params, errlog=err) as (r, w):
            async with ClientSession(r, w) as s:
                with anyio.fail_after(timeout):
                    await s.initialize()
                yield s


async def _call(s, name: str, args: dict, progress: list | None = None, timeout: float = 120) -> tuple[bool, dict]:
    async def on_progress(p, total, message):
        progress.append((p, total, message))
    with anyio.fail_after(timeout):
        res = await s.call_tool(name, args, progress_callback=on_progress if progress is not None else None)
    doc = json.loads(res.content[0].text)
    assert res.structured_content == doc  # the same document, as text and as structured content
    return res.is_error, doc
