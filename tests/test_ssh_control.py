"""The ssh control directory and the processes runward leaves running: a directory no other
local user can take first, and no helper (control master, relay, resident, shim) that keeps
the directory the CLI ran from busy. Real sshd hosts of the testbed; ground truth from
/proc (each process's cwd and command line) and the directories on disk."""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

import testbed
from conftest import CLI, wait_for
from runward.transport import agentcall as transport
from runward.agent.core import boot
from helpers_relay import _relays, _through_relay
from helpers_resident import _ppid, far  # noqa: F401  (the fixture)
from helpers_ssh_control import _end_masters, _masters


def _in_dir(path: Path) -> list[tuple[int, str]]:
    """(pid, command) of every process but this one whose cwd is path or below it: what
    makes `umount path` say "target is busy"."""
    out = []
    root = os.path.realpath(path)
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            cwd = os.readlink(f"/proc/{d}/cwd")
            cmd = Path(f"/proc/{d}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if cwd == root or cwd.startswith(root + "/"):
            out.append((int(d), cmd))
    return out


@pytest.fixture
def long_home(tmp_path):
    """A CLI whose home is too long for a socket path under it (the fallback directory)."""
    tb = testbed.require("ssh")
    home = tmp_path / ("h" * 48)
    work = tmp_path / "work"
    work.mkdir()
    c = CLI(home, work)
    c.env["RUNWARD_SSH_CONFIG"] = tb["ssh_config"]
    c.env.pop("XDG_RUNTIME_DIR", None)
    return c


def test_a_long_homes_control_directory_cannot_be_taken_by_another_user(long_home):
    home = os.path.abspath(long_home.home)
    # the name the fallback had: anyone could compute it and make it first
    squatted = f"/tmp/runward-{os.getuid()}-{hashlib.sha1(home.encode()).hexdigest()[:10]}"
    os.mkdir(squatted, 0o755)
    os.chown(squatted, 65534, 65534)  # another local user's (nobody's)
    try:
        p = long_home.run("exec", "--on", "ssh://rw1", "--", "true", timeout=60)
        assert p.returncode == 0, p.stderr
        used = (Path(home) / "ssh-dir").read_text()
        st = os.lstat(used)
        assert used != squatted and used.startswith("/tmp/runward-")
        assert stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o077
        masters = _masters(used)
        assert masters, "the call's control master has its socket in the directory recorded"
        assert any(stat.S_ISSOCK(os.lstat(os.path.join(used, n)).st_mode) for n in os.listdir(used))
        # the next call finds the same directory (and its master) again
        p = long_home.run("exec", "--on", "ssh://rw1", "--", "true", timeout=60)
        assert p.returncode == 0, p.stderr
        assert (Path(home) / "ssh-dir").read_text() == used and _masters(used) == masters
        assert os.lstat(squatted).st_uid == 65534 and os.listdir(squatted) == []  # untouched
        _end_masters(used)
        # a recorded directory that is gone (a reboot, a tmp cleaner) is made anew
        wait_for(lambda: not _masters(used), what="the master to end")
        shutil.rmtree(used)
        p = long_home.run("exec", "--on", "ssh://rw1", "--", "true", timeout=60)
        assert p.returncode == 0, p.stderr
        again = (Path(home) / "ssh-dir").read_text()
        assert again != used and not os.lstat(again).st_mode & 0o077 and _masters(again)
        _end_masters(again)
    finally:
        os.rmdir(squatted)


def test_a_long_homes_control_directory_is_under_a_private_runtime_dir(long_home):
    runtime = tempfile.mkdtemp(prefix="xdg-", dir="/tmp")  # 0700, ours: as systemd's /run/user/UID
    long_home.env["XDG_RUNTIME_DIR"] = runtime
    try:
        p = long_home.run("exec", "--on", "ssh://rw1", "--", "true", timeout=60)
        assert p.returncode == 0, p.stderr
        (d,) = [os.path.join(runtime, n) for n in os.listdir(runtime)]
        assert not os.lstat(d).st_mode & 0o077 and _masters(d)
        assert not (long_home.home / "ssh-dir").exists()
        _end_masters(d)
    finally:
        wait_for(lambda: not _masters(runtime), what="the master to end")
        shutil.rmtree(runtime)


def test_no_helper_keeps_the_callers_directory_busy(far, tmp_path, monkeypatch):
    """A read-only call over ssh leaves a control master, a relay and a resident running; a
    local start leaves a shim. None of them holds the directory the caller ran from."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    control = transport.control_dir()
    try:
        listen = _through_relay(far)  # the master, the resident, then the relay
        (master,) = _masters(control)
        (relay,) = _relays(listen)
        cli = CLI(Path(os.environ["RUNWARD_HOME"]), work)
        p = cli.run("start", "held", "--", "sleep", "300")
        assert p.returncode == 0, p.stderr
        job = cli.status("held")["pid"]
        shim = _ppid(job)  # the job's parent
        assert boot.SHIM_ARG.encode() in Path(f"/proc/{shim}/cmdline").read_bytes()
        for pid in (master, far.resident(), relay, shim):
            assert os.readlink(f"/proc/{pid}/cwd") == "/", Path(f"/proc/{pid}/cmdline").read_bytes()
        # the job alone: a local run starts where runward is run from (issue 42 item 8)
        assert [pid for pid, _ in _in_dir(work)] == [job]
        assert cli.run("stop", "held").returncode == 0
        assert _in_dir(work) == []
    finally:
        _end_masters(control)


def test_a_relative_cwd_is_still_the_jobs_while_its_shim_runs_from_root(cli):
    (cli.cwd / "sub").mkdir()
    rc, doc = cli.json("start", "rel", "--cwd", "sub", "--", "sleep", "300")
    assert rc == 0, doc
    job = doc["result"]["pid"]
    assert os.readlink(f"/proc/{job}/cwd") == str(cli.cwd / "sub")
    assert os.readlink(f"/proc/{_ppid(job)}/cwd") == "/"
    assert cli.run("stop", "rel").returncode == 0
