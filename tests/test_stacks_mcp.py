"""The MCP tool `stacks` (read-only): a real blocked job's frame through `runward mcp`, the same
document as `runward stacks --json`; a run that does not exist is an error result (exit 4)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT
from test_stacks import BLOCKED, needs_spy

pytest.importorskip("mcp", reason="needs the MCP SDK: pip install -e '.[mcp]'")
import anyio  # noqa: E402  (installed with mcp)

from test_mcp import _call, _session  # noqa: E402


@needs_spy
def test_the_stacks_tool_names_the_blocked_function(tmp_path):
    env = dict(os.environ, RUNWARD_HOME=str(tmp_path / "home"), PYTHONPATH=str(ROOT / "src"))
    env.pop("RUNWARD_CONFIG", None)
    (tmp_path / "blocked.py").write_text(BLOCKED)
    name = f"stkmcp{os.getpid()}"
    rw = [sys.executable, "-m", "runward"]
    p = subprocess.run(rw + ["start", name, "--settle", "0.2", "--ready", "ready", "--", sys.executable,
                             str(tmp_path / "blocked.py")], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    try:
        async def main():
            async with _session(env, tmp_path) as s:
                tools = {t.name: t for t in (await s.list_tools()).tools}
                assert tools["stacks"].annotations.read_only_hint
                err, doc = await _call(s, "stacks", {"name": name})
                assert not err, doc
                assert "in wait_for_the_lock_forever (blocked.py:5)" in doc["result"]["summary"], doc
                cli = json.loads(subprocess.run(rw + ["stacks", name, "--json"], cwd=tmp_path, env=env,
                                                capture_output=True, text=True, timeout=120).stdout)
                assert set(doc["result"]) == set(cli["result"]), (sorted(doc["result"]), sorted(cli["result"]))
                err, doc = await _call(s, "stacks", {"name": f"nosuch{os.getpid()}"})
                assert err and doc["error"]["exit_code"] == 4, doc
        anyio.run(main)
    finally:
        subprocess.run(rw + ["stop", name, "--grace", "2"], cwd=tmp_path, env=env, capture_output=True, timeout=120)
