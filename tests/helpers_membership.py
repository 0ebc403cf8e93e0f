"""Who belongs to a run, as /proc says: an ordinary user's CLI (the ordinary fixture, no cgroup of
its own), a run's record, processes by their command line, their stat fields, and killing them
all by pid and start time."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT, read_stat, world_readable_src


def record(home: Path, name: str, n: int = 1) -> dict:
    try:
        return json.loads((home / "runs" / name / "attempts" / f"{n}.json").read_text())
    except (OSError, ValueError):
        return {}


def procs_with(needle: bytes, uid: int | None = None) -> list[int]:
    """Live pids of this pid namespace whose command line holds needle (ground truth)."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            if uid is not None and os.stat(f"/proc/{d}").st_uid != uid:
                continue
            if needle in Path(f"/proc/{d}/cmdline").read_bytes():
                st = read_stat(int(d))
                if st and st[0] not in ("Z", "X"):
                    out.append(int(d))
        except OSError:
            pass
    return out


def stat_fields(pid: int) -> list[str]:
    data = Path(f"/proc/{pid}/stat").read_text()
    return data[data.rfind(")") + 2:].split()  # state, ppid, pgrp, session, ...


def kill_all(pids):
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


MEMBER_USER = "rwmember"  # not test_stop_signals' user: its teardown's `pkill -u` must never hit ours


@pytest.fixture
def ordinary(tmp_path):
    """A CLI runner as an ordinary user: no cgroup of its own (as tests/test_stop_signals.py's
    nonroot, with a user of its own)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to create and switch to an ordinary user")
    py = shutil.which("python3", path="/usr/bin:/bin")
    if not py:
        pytest.skip("no system python3 for the ordinary user")
    try:
        pw = pwd.getpwnam(MEMBER_USER)
    except KeyError:
        subprocess.run(["useradd", "-M", "-d", "/nonexistent", "-s", "/bin/sh", MEMBER_USER], check=True)
        pw = pwd.getpwnam(MEMBER_USER)
    base = Path(f"/tmp/rwmember-{os.getpid()}-{tmp_path.name}")
    base.mkdir(mode=0o700)
    os.chown(base, pw.pw_uid, pw.pw_gid)

    def run(*args, timeout=120):
        env = {"PATH": "/usr/bin:/bin", "RUNWARD_HOME": str(base / "home"), "PYTHONPATH": world_readable_src(),
               "HOME": str(base), "LANG": "C.UTF-8"}
        return subprocess.run([py, "-m", "runward", *args], cwd=base, env=env, capture_output=True, text=True,
                              timeout=timeout, user=pw.pw_uid, group=pw.pw_gid, extra_groups=[])

    probe = run("--help")
    if probe.returncode != 0:
        pytest.skip(f"the ordinary user cannot run runward from {ROOT}: {probe.stderr[-300:]}")
    run.uid, run.home = pw.pw_uid, base / "home"
    yield run
    subprocess.run(["pkill", "-KILL", "-u", MEMBER_USER])
    shutil.rmtree(base, ignore_errors=True)
