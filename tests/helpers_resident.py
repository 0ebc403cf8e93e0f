"""The resident agent's ground truth (its records, its lock's holder, a process's parent) and the
far fixture: an ssh testbed host with a runward.toml target on it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import uuid
from pathlib import Path

import pytest

import testbed
from runward.transport import agentcall as transport
from runward.agent.core import boot
from runward.targets import parse_target


RESIDENT = boot.RESIDENT_ARG.encode()


@pytest.fixture
def far(tmp_path, monkeypatch):
    """In-process calls (transport.LAST_ROUTE says which way each went) to testbed host rw1,
    with a local home and a far home of this test's own."""
    tb = testbed.require("ssh")
    remote_home = f"/tmp/rw-res-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("RUNWARD_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("RUNWARD_SSH_CONFIG", tb["ssh_config"])
    monkeypatch.setenv("RUNWARD_RESIDENT_IDLE", "60")
    monkeypatch.delenv("RUNWARD_RESIDENT", raising=False)
    target = parse_target("ssh://rw1", home=remote_home, python="/usr/bin/python3")

    class Far:
        home = remote_home

        def call(self, req, **kw):
            return transport.call(target, dict(req), **kw)

        def entry(self):
            return f"{transport.agent_sha()} {transport.far_key(target)}"

        def listening(self):
            """The resident's socket once it accepts connections (a stale one refuses)."""
            for sock in (Path(remote_home) / "cache").glob("resident-*.sock"):
                if not _refused(sock):
                    return sock
            return None

        def resident(self):
            """pid of the resident serving this far home: the process holding its lock."""
            return _lock_holder(Path(remote_home) / "cache")

    f = Far()
    f.target = target
    f.tb = tb
    yield f
    pid = f.resident()
    if pid:
        os.kill(pid, signal.SIGKILL)
    subprocess.run(["rm", "-rf", remote_home])


def _records(entry: str) -> list[str]:
    """The states cache/far-agents records for a far side's resident, oldest first."""
    return [ln.split("\t")[1] for ln in transport.far_lines() if ln.startswith("@" + entry + "\t")]


def _lock_holder(cache: Path) -> int | None:
    locks = {str(p) for p in cache.glob("resident-*.sock.lock")}
    if not locks:
        return None
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            if RESIDENT not in Path(f"/proc/{d}/cmdline").read_bytes():
                continue
            for fd in os.listdir(f"/proc/{d}/fd"):
                if os.readlink(f"/proc/{d}/fd/{fd}") in locks:
                    return int(d)
        except OSError:
            continue
    return None


def _ppid(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except OSError:
        return None  # it has exited already


def _refused(path: Path) -> bool:
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(str(path))
        return False
    except OSError:
        return True
    finally:
        s.close()
