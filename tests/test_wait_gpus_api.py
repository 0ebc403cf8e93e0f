"""`start --wait-gpus-free` from Python and from an MCP client (issue 27: a GPU wait is one of
the long waits an MCP client may run as a task; the start tool had no way to ask for it).
Against the nvidia-smi stand-in (tests/bin/nvidia-smi) with a real process holding GPU 0:
the start waits until that process is dead, then starts; the job's start is after the
holder's end, by /proc."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import fakegpu
from conftest import wait_for

ROOT = Path(__file__).resolve().parent.parent


def _holder(state, seconds: float) -> subprocess.Popen:
    """A plain process holding 70 GB of GPU 0 for SECONDS, then gone (and its memory with it)."""
    p = subprocess.Popen(["sleep", str(seconds)])
    fakegpu.attach(state, 0, p.pid, 70000)
    return p


def _start_time(pid: int) -> float:
    """The process's start, seconds since the epoch, from /proc (not from runward)."""
    with open(f"/proc/{pid}/stat") as f:
        ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/stat") as f:
        btime = next(int(ln.split()[1]) for ln in f if ln.startswith("btime "))
    return btime + ticks / os.sysconf("SC_CLK_TCK")


def test_library_start_waits_for_the_gpus_then_starts(cli, tmp_path, lib, monkeypatch):
    state = fakegpu.create_state(tmp_path / "smi.json", gpus=2)
    for k in ("PATH", "RUNWARD_FAKE_SMI_STATE"):
        monkeypatch.setenv(k, fakegpu.env_with_standin(state)[k])
    holder = _holder(state, 3)
    held_from = _start_time(holder.pid)
    res = lib.start("wg-lib", ["sleep", "30"], gpus=[0], wait_gpus_free=True, settle=0.5)
    assert holder.poll() is not None, "started while the holder still held GPU 0"
    assert res.ok and res.pid, res.to_json()
    assert _start_time(res.pid) >= held_from + 2.9, "the job's process began before GPU 0 was free"
    cli.run("stop", "wg-lib", "--grace", "2")


def test_library_wait_gpus_free_without_gpus_is_bad_input(lib):
    res = lib.start("wg-none", ["sleep", "30"], wait_gpus_free=True)
    assert res.exit_code == 2 and "--gpus" in res.error["message"], res.to_json()
    res = lib.start("wg-none", ["sleep", "30"], gpus=[0], wait_gpus_free="yes")
    assert res.exit_code == 2 and "wait_gpus_free" in res.error["message"], res.to_json()


def test_the_mcp_start_tool_takes_wait_gpus_free(tmp_path):
    pytest.importorskip("mcp", reason="the MCP extra (runward[mcp]) is not installed")
    import anyio
    from mcp.client.stdio import StdioServerParameters
    state = fakegpu.create_state(tmp_path / "smi.json", gpus=2)
    env = fakegpu.env_with_standin(state, dict(os.environ, RUNWARD_HOME=str(tmp_path / "home"),
                                               PYTHONPATH=str(ROOT / "src")))
    env.pop("RUNWARD_CONFIG", None)
    holder = _holder(state, 3)

    async def main():
        from mcp import Client
        params = StdioServerParameters(command=sys.executable, args=["-m", "runward", "mcp", "--allow", "all"], env=env,
                                       cwd=str(tmp_path))
        async with Client(params) as c:
            res = await c.call_tool("start", {"name": "wg-mcp", "command": ["sleep", "30"], "gpus": [0],
                                              "wait_gpus_free": True, "settle": 0.5, "on": "local"})
            return json.loads(res.content[0].text)
    try:
        doc = anyio.run(main)
        assert holder.poll() is not None, "started while the holder still held GPU 0"
        assert doc["ok"] and doc["result"]["pid"], doc
    finally:
        subprocess.run([sys.executable, "-m", "runward", "stop", "wg-mcp", "--grace", "1"], cwd=tmp_path, env=env,
                       capture_output=True, timeout=60)
    wait_for(lambda: holder.poll() is not None, 10, "the holder's end")
