"""runward's state directory is 0700 on both sides (issue 20, stumble 12): the home and every
directory runward makes for it, parents included, on this machine and on an ssh target; an
existing home of ours that others may read is narrowed to 0700; one others may write is
refused. (A container's ~/.runward made by the bootstrap itself: tests/test_container_init.py.)"""

from __future__ import annotations

import os
import stat
import subprocess
import uuid
from pathlib import Path

import pytest

import testbed
from conftest import CLI


def mode(p: Path) -> int:
    return stat.S_IMODE(os.lstat(p).st_mode)


def test_local_home_and_its_parents_are_made_0700(tmp_path):
    base = tmp_path / "made"  # nothing of it exists: runward makes made/by/runward/home
    c = CLI(base / "by" / "runward" / "home", tmp_path)
    p = c.run("status")
    assert p.returncode == 0, p.stderr
    rc, doc = c.json("start", "m", "--settle", "0.2", "--", "sleep", "30")
    assert rc == 0, doc
    try:
        made = [base, base / "by", base / "by" / "runward", c.home, c.home / "runs", c.home / "cache"]
        assert {str(d): oct(mode(d)) for d in made} == {str(d): "0o700" for d in made}
    finally:
        assert c.json("stop", "m")[0] == 0


def test_local_home_of_ours_readable_by_others_is_narrowed_and_writable_refused(tmp_path):
    c = CLI(tmp_path / "home", tmp_path)
    c.home.mkdir(mode=0o755)
    c.home.chmod(0o755)  # what runward made before: readable by everyone
    assert c.run("status").returncode == 0
    assert mode(c.home) == 0o700
    c.home.chmod(0o775)  # writable by the group: its contents cannot be trusted
    rc, doc = c.json("start", "w", "--settle", "0.2", "--", "true")
    assert rc == 3 and "writable by others" in doc["error"]["message"], doc
    assert mode(c.home) == 0o775  # refused, not silently "fixed"


def test_remote_home_and_its_parents_are_made_0700_over_ssh(tmp_path):
    tb = testbed.require("ssh")
    c = CLI(tmp_path / "home", tmp_path / "work")
    (tmp_path / "work").mkdir()
    c.env = testbed.env(tb, c.env)
    c.env["RUNWARD_SSH_CONFIG"] = tb["ssh_config"]
    base = Path(f"/tmp/rw-mode-{uuid.uuid4().hex[:8]}")  # rw1 shares this machine's files
    old = base / "old"
    (tmp_path / "work" / "runward.toml").write_text(
        f'[targets.far]\non = "ssh://rw1"\nhome = "{base}/deep/home"\n\n'
        f'[targets.old]\non = "ssh://rw1"\nhome = "{old}"\n')
    try:
        rc, doc = c.json("start", "m", "--on", "far", "--settle", "0.2", "--", "sleep", "30")
        assert rc == 0, doc
        assert c.json("stop", "m", "--on", "far")[0] == 0
        made = [base, base / "deep", base / "deep" / "home", base / "deep" / "home" / "runs"]
        assert {str(d): oct(mode(d)) for d in made} == {str(d): "0o700" for d in made}
        old.mkdir(mode=0o755)
        old.chmod(0o755)
        rc, doc = c.json("start", "o", "--on", "old", "--settle", "0.2", "--", "true")
        assert rc in (0, 1), doc  # `true` may end inside the settle time: either way it ran
        assert mode(old) == 0o700
    finally:
        subprocess.run(["rm", "-rf", str(base)])
