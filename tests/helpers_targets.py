"""The testbed's targets from a CLI: the tb fixture (the testbed, or a skip), rcli (a CLI whose
runward.toml names every testbed target) and the processes a run's marker names, killed by pid
and start time."""

from __future__ import annotations

import os
import signal
import subprocess
import uuid
from pathlib import Path

import pytest

import testbed
from conftest import CLI, alive, marked


@pytest.fixture(scope="module")
def tb():
    return testbed.require("ssh")


@pytest.fixture
def rcli(tmp_path, tb):
    """A CLI whose runward.toml names every testbed target, each with its own state dir."""
    c = CLI(tmp_path / "home", tmp_path / "work")
    (tmp_path / "work").mkdir(exist_ok=True)
    c.env = testbed.env(tb, c.env)
    c.env["RUNWARD_SSH_CONFIG"] = tb["ssh_config"]
    tag = uuid.uuid4().hex[:8]
    c.remote_home = f"/tmp/rw-test-{tag}"
    toml = []
    for name, on in {"h1": "ssh://rw1", "h1pod": "ssh://rw1/podman:rwpod", "h1pct": "ssh://rw1/pct:200",
                     "pod": "podman:rwpod", "h1lxc": "ssh://rw1/lxc:rwlxc", "h1docker": "ssh://rw1/docker:rwpod",
                     **{f"n{i}": f"ssh://rw{i}" for i in range(1, 9)}}.items():
        toml.append(f'[targets.{name}]\non = "{on}"\nhome = "{c.remote_home}/{name}"\n')
    (tmp_path / "work" / "runward.toml").write_text("\n".join(toml))
    yield c
    for d in Path("/tmp").glob(f"rw-test-{tag}*"):
        subprocess.run(["rm", "-rf", str(d)])


def _kill_marked(prefix: str) -> None:
    for pid, start in marked(prefix).items():
        if alive(pid, start):
            os.kill(pid, signal.SIGKILL)
