"""Helpers for tests of a multi-node run's GPU gate over real ssh testbed nodes (rw1.., each with
its own nvidia-smi stand-in): processes that hold a node's GPU, the `env` fixture that names a
run and cleans it up, and readers of each node's attempt records under its home."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import uuid

import pytest

import fakegpu
import testbed
from conftest import alive, marked, wait_for


class Holders:
    """Real processes holding a node's GPU (leaked workers); killed at teardown."""

    def __init__(self):
        self.procs = []

    def hold(self, state, gpu=1, mib=2000):
        p = subprocess.Popen(["sleep", "300"])
        self.procs.append(p)
        fakegpu.attach(state, gpu, p.pid, mib)
        return p

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def free(p):
    p.kill()
    p.wait()


@pytest.fixture
def env(cli, tmp_path):
    tb = testbed.require("ssh")
    cli.env.update(RUNWARD_SSH_CONFIG=tb["ssh_config"])
    name = "rv" + uuid.uuid4().hex[:6]
    h = Holders()
    yield name, h
    h.close()
    cli.run("stop", name, "--grace", "2")
    for pid, start in marked(name + ".").items():
        if alive(pid, start):
            os.kill(pid, signal.SIGKILL)
    for i in range(3):  # a waiting shim a test left behind (it carries no marker: no job yet)
        d = tmp_path / f"node{i}" / "runs" / name / "attempts"
        for f in (d.glob("*.json") if d.exists() else ()):
            shim = json.loads(f.read_text()).get("shim") or {}
            if shim.get("pid") and alive(shim["pid"], shim.get("start")):
                os.kill(shim["pid"], signal.SIGKILL)


def record(tmp_path, rank: int, name: str, n: int) -> dict:
    p = tmp_path / f"node{rank}" / "runs" / name / "attempts" / f"{n}.json"
    try:
        return json.loads(p.read_text()) if p.exists() else {}
    except ValueError:
        return {}


def shim_alive(a: dict) -> bool:
    s = a.get("shim") or {}
    return bool(s.get("pid")) and alive(s["pid"], s.get("start"))


def start_run(cli, name):
    rc, doc = cli.json("start", name, timeout=120)
    assert rc == 0, doc
    return doc


def restart_blocked(cli, name):
    rc, doc = cli.json("restart", name, "--gpu-release-timeout", "0.5", timeout=120)
    assert rc == 5 and doc["result"]["state"] == "blocked", doc
    return doc


def both_run(tmp_path, name, n, nnodes=2, timeout=60):
    wait_for(lambda: all(record(tmp_path, i, name, n).get("job") for i in range(nnodes)), timeout,
             "every node to start by itself")
    log = tmp_path / f"node{nnodes - 1}" / "runs" / name / "log"
    wait_for(lambda: re.search(r"allreduce step 3 sum \d+ nnodes %d" % nnodes, log.read_text()), 60,
             "the last rank's all-reduce")


def happens(cond, within: float) -> bool:
    """True as soon as COND holds, False when it has not within WITHIN seconds (a negative
    check needs a window: this is the window, polled, not a sleep before one look)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.1)
    return bool(cond())


def in_rw2(*argv):
    return subprocess.run(["nsenter", "--net=/run/netns/runward-rw2", *argv], capture_output=True, text=True,
                          timeout=10)
