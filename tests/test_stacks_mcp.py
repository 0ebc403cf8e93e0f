"""The MCP tool `stacks` (read-only): a real blocked job's frame through `runward mcp`, the same
document as `runward stacks --json`; a run that does not exist is an error result (exit 4)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT
from helpers_stacks import BLOCKED, needs_spy

pytest.importorskip("mcp", reason="needs the MCP SDK: pip install -e '.[mcp]'")
import anyio  # noqa: E402  (installed with mcp)

from helpers_mcp import _call, _session  # noqa: E402


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


@needs_spy
def test_an_agent_brings_py_spy_through_the_stacks_tool(cli, tmp_path):
    """A target without py-spy: the tool's hint names its own bring_py_spy argument (not the
    CLI's --bring-py-spy), and bring_py_spy: true pushes this machine's py-spy there: the file
    on rw1 (which shares this filesystem) has its bytes, and its stacks are read with it."""
    import hashlib
    import shutil

    from runward.api import local_py_spy
    from helpers_stacks import _remote, _stop
    name = _remote(cli, tmp_path, "ssh", "ssh://rw1", "mcp")
    dest = f"/tmp/rwstk-mcp-{os.getpid()}/tools/py-spy"
    try:
        async def main():
            async with _session(cli.env, cli.cwd) as s:
                err, doc = await _call(s, "stacks", {"name": name, "on": "t"})
                if shutil.which("py-spy", path="/usr/local/bin:/usr/bin:/bin"):
                    pytest.skip("the testbed host has a py-spy of its own: nothing to bring")
                assert err and doc["result"]["error"] == "py-spy missing", doc
                for said in (doc["result"]["hint"], doc["result"]["summary"]):
                    assert "bring_py_spy: true" in said and "--bring-py-spy" not in said, said
                assert not os.path.exists(dest)
                err, doc = await _call(s, "stacks", {"name": name, "on": "t", "bring_py_spy": True})
                assert not err, doc
                assert doc["result"]["brought"] == dest == doc["result"]["py_spy"], doc["result"]
                assert "wait_for_the_lock_forever (<string>:5)" in doc["result"]["summary"], doc["result"]
        anyio.run(main)
        with open(dest, "rb") as f, open(local_py_spy(), "rb") as g:
            assert hashlib.sha256(f.read()).digest() == hashlib.sha256(g.read()).digest()
    finally:
        _stop(cli, name, "ssh://rw1")
