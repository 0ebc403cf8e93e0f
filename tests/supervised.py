"""Helpers for tests of supervised runs: the shims of a test's home (and the zygotes they fork),
ended before the cli fixture kills the jobs, so that no shim starts a next attempt; the `sup`
fixture that does so; and readers of a run's attempt records."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from conftest import alive


def shims_of(home: Path) -> list[int]:
    """The shims of this home, and the next attempts' processes they fork in advance
    (zygotes: forks of the shim, found the same way), from /proc."""
    out = []
    item = b"\0RUNWARD_HOME=" + str(home).encode() + b"\0"   # the whole item, found in one search
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{d}/cmdline").read_bytes()
            if b"runward-shim" not in cmd:
                continue
            env = Path(f"/proc/{d}/environ").read_bytes()
        except OSError:
            continue
        if item in b"\0" + env + b"\0" and alive(int(d)):
            out.append(int(d))
    return out


def end_shims(home: Path) -> None:
    """A supervising shim would start the next attempt of what the cli fixture kills: its
    shims go first, then the jobs."""
    for pid in shims_of(home):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def records(home: Path, name: str) -> list[dict]:
    d = home / "runs" / name / "attempts"
    return [json.loads(p.read_text()) for p in sorted((p for p in d.glob("*.json") if p.stem.isdigit()),
                                                      key=lambda p: int(p.stem))]


def rec(home: Path, name: str, n: int) -> dict:
    p = home / "runs" / name / "attempts" / f"{n}.json"
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError):
        return {}


def shim_gone(home: Path, name: str) -> bool:
    last = records(home, name)[-1]
    s = last.get("shim") or {}
    return not alive(s["pid"], s["start"])


@pytest.fixture
def sup(cli):
    yield cli
    end_shims(cli.home)
