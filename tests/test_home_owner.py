"""root with another user's HOME (`sudo -E runward ...`) writes nothing into that user's
~/.runward before refusing: it made root-owned cache/ and runs/ there (and a status, root-owned
health and stall state in a run's directory), refused after, and the user's own runward then
failed with a PermissionError. Ground truth: the owner of every path under that home."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"
PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


def _tree(d: Path) -> dict[str, int]:
    return {str(p): p.lstat().st_uid for p in [d, *d.rglob("*")]}


def _as(user, home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(SRC), "HOME": str(home)}
    kw = {"user": user[0], "group": user[1], "extra_groups": []} if user else {}
    return subprocess.run([PY, "-m", "runward", *args], env=env, cwd="/", capture_output=True, text=True,
                          timeout=120, **kw)


@pytest.mark.skipif(os.geteuid() != 0, reason="runs runward as root and as another user")
@pytest.mark.parametrize("made", [True, False], ids=["home-made", "no-home-yet"])
def test_root_with_another_users_home_writes_nothing_there_and_refuses(made):
    from oracle.world import ordinary_user
    user = ordinary_user()
    top = Path(tempfile.mkdtemp(prefix="rw-owner-"))  # /tmp's: the user reaches it (pytest's tmp_path is root's 0700)
    os.chmod(top, 0o755)
    home = top / "alice"
    home.mkdir(mode=0o755)
    os.chown(home, *user)
    name = "own"
    if made:  # the user's runward has a run there
        p = _as(user, home, "start", name, "--settle", "0.2", "--json", "--", "sleep", "60")
        assert p.returncode == 0, p.stdout + p.stderr
    before = _tree(home)
    assert set(before.values()) == {user[0]}, before
    try:
        for args in (("start", "r", "--settle", "0.2", "--json", "--", "sleep", "60"), ("status", "--json"),
                     ("status", name, "--json"), ("logs", name, "--json"), ("stop", name, "--json")):
            p = _as(None, home, *args)
            err = json.loads(p.stdout).get("error") or {}
            assert p.returncode == 3 and "not this user's (uid 0)" in err.get("message", ""), (args, p.stdout, p.stderr)
            assert "RUNWARD_HOME" in err.get("hint", ""), err
            assert _tree(home) == before, args  # nothing made, nothing of root's
        p = _as(user, home, "status", "--json")  # the user's own runward still works there
        assert p.returncode == 0, p.stdout + p.stderr
    finally:
        if made:
            p = _as(user, home, "stop", name, "--json")
            assert p.returncode == 0, p.stdout + p.stderr
        shutil.rmtree(top, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="runs runward as another user")
def test_a_user_who_cannot_enter_the_home_is_told_so_never_no_run_nor_a_traceback():
    """An ordinary user with a HOME they cannot enter (HOME=/root kept by `sudo -u USER`, a
    0700 home of another's) or cannot make a home in: start was a PermissionError traceback,
    stop the same, and logs of a run the home holds said 'no run named' (exit 4), a verdict
    on what was never read. Each verb now says the home is not readable (or cannot be made)
    by this user, exit 3. Ground truth: the run's record is there, and nothing new is."""
    from oracle.world import ordinary_user
    user = ordinary_user()
    top = Path(tempfile.mkdtemp(prefix="rw-enter-"))
    os.chmod(top, 0o755)
    home = top / "roothome"  # root's, 0700: the user cannot enter it
    run = home / ".runward" / "runs" / "x"
    run.mkdir(parents=True)
    (run / "run.json").write_text("{}")
    os.chmod(home, 0o700)
    before = _tree(home)
    try:
        for args in (("start", "x", "--settle", "0.2", "--json", "--", "sleep", "60"), ("stop", "x", "--json"),
                     ("logs", "x", "--json"), ("status", "x", "--json"), ("status", "--json")):
            p = _as(user, home, *args)
            err = json.loads(p.stdout).get("error") or {}
            assert p.returncode == 3 and "is not readable by this user" in err.get("message", ""), (args, p.stdout)
            assert "traceback" not in p.stdout.lower() and "RUNWARD_HOME" in err.get("hint", ""), (args, p.stdout)
            assert _tree(home) == before, args
        p = _as(user, top / "missing" / "home", "start", "x", "--settle", "0.2", "--json", "--", "sleep", "60")
        err = json.loads(p.stdout).get("error") or {}
        assert p.returncode == 3 and f"cannot be made by this user (uid {user[0]}): {top} is not writable" in \
            err.get("message", ""), p.stdout
        assert not (top / "missing").exists()
    finally:
        shutil.rmtree(top, ignore_errors=True)
