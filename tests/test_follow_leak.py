"""An interrupted `logs -f` into a container leaves no follower behind (issue 20, stumble 1).

The follower agent runs inside the real testbed container (rwpod), reached directly
(podman:rwpod) and behind a real ssh host (ssh://rw1/podman:rwpod). Its caller goes away in the
three ways people see: Ctrl-C (SIGINT to the CLI), the CLI's ssh or podman child killed, the
CLI itself killed. Ground truth is the container's processes read from the host's /proc: every
runward agent (the bootstrap's `import sys,os,marshal` in its cmdline) that appeared in the
container's pid namespace for the follow must be gone, within a bounded wait."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

import testbed
from conftest import CLI, marked, read_stat, wait_for
from helpers_follow import _children

BOOTSTRAP_WORDS = b"import sys,os,marshal"


@pytest.fixture
def pcli(tmp_path):
    tb = testbed.require("podman")
    c = CLI(tmp_path / "home", tmp_path / "work")
    (tmp_path / "work").mkdir()
    c.env = testbed.env(tb, c.env)
    c.env["RUNWARD_SSH_CONFIG"] = tb["ssh_config"]
    c.remote_home = f"/tmp/rw-follow-{uuid.uuid4().hex[:8]}"
    (tmp_path / "work" / "runward.toml").write_text(
        f'[targets.pod]\non = "podman:{tb["podman"]}"\nhome = "{c.remote_home}"\n\n'
        f'[targets.h1pod]\non = "ssh://rw1/podman:{tb["podman"]}"\nhome = "{c.remote_home}"\n')
    c.container = tb["podman"]
    yield c
    subprocess.run(["podman", "exec", c.container, "rm", "-rf", c.remote_home], env=c.env, capture_output=True)


def _container_pidns(c) -> str:
    p = subprocess.run(["podman", "inspect", "--format", "{{.State.Pid}}", c.container], env=c.env,
                       capture_output=True, text=True, check=True)
    return os.readlink(f"/proc/{int(p.stdout)}/ns/pid")


def _agents_in(pidns: str) -> dict[int, int]:
    """pid -> start time of every live runward agent (not a shim) in that pid namespace."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{d}/ns/pid") != pidns:
                continue
            cmd = Path(f"/proc/{d}/cmdline").read_bytes()
        except OSError:
            continue
        st = read_stat(int(d))
        if BOOTSTRAP_WORDS in cmd and b"runward-shim" not in cmd and st and st[0] not in ("Z", "X"):
            out[int(d)] = st[1]
    return out


@pytest.mark.parametrize("how", ["sigint", "kill-hop-child", "kill-cli"])
@pytest.mark.parametrize("on", ["pod", "h1pod"])
def test_interrupted_follow_leaves_no_agent_in_the_container(pcli, on, how):
    name = f"fl{on}{how.replace('-', '')}"[:30]
    rc, doc = pcli.json("start", name, "--on", on, "--settle", "0.3", "--",
                        "sh", "-c", "while :; do echo tick; sleep 0.2; done")
    assert rc == 0, doc
    try:
        pidns = _container_pidns(pcli)
        before = _agents_in(pidns)
        follow = subprocess.Popen(pcli.argv("logs", name, "--on", on, "-f"), cwd=pcli.cwd, env=pcli.env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        try:
            assert follow.stdout.readline(), "logs -f printed nothing"
            assert b"tick" in follow.stdout.readline()  # following: lines written after it began
            followers = {p: s for p, s in _agents_in(pidns).items() if before.get(p) != s}
            assert followers, "no follower agent found in the container"
            if how == "sigint":
                follow.send_signal(signal.SIGINT)
            elif how == "kill-hop-child":
                hop = _children(follow.pid)
                assert hop, "the CLI has no ssh/podman child"
                for pid in hop:
                    os.kill(pid, signal.SIGKILL)
            else:
                follow.kill()
            follow.wait(timeout=20)

            def gone():
                now = _agents_in(pidns)
                return not [p for p, s in followers.items() if now.get(p) == s]
            wait_for(gone, timeout=10, what=f"the follower agents {sorted(followers)} to end after {how}")
        finally:
            if follow.poll() is None:
                follow.kill()
                follow.wait()
            follow.stdout.close()
            follow.stderr.close()
    finally:
        rc, doc = pcli.json("stop", name, "--on", on, "--grace", "2")
        assert rc == 0 and doc["result"]["verified_dead"], doc
        assert not marked(f"{name}.")


def test_followers_end_on_the_local_target_too(cli, tmp_path):
    """The same through no hop at all: the agent is the CLI's own child. The job is quiet after
    its first line, so the follower never writes: a failed write cannot be what ends it."""
    rc, doc = cli.json("start", "flocal", "--settle", "0.3", "--", "sh", "-c", "echo one; exec sleep 300")
    assert rc == 0, doc
    follow = cli.popen("logs", "flocal", "-f")
    try:
        assert follow.stdout.readline()
        agent = wait_for(lambda: _children(follow.pid), what="the local agent")
        starts = {p: read_stat(p)[1] for p in agent}
        follow.kill()
        follow.wait(timeout=20)
        wait_for(lambda: not [p for p, s in starts.items() if (read_stat(p) or ("X", 0))[0] not in ("Z", "X")
                              and read_stat(p)[1] == s], timeout=10, what="the local follower to end")
    finally:
        follow.stdout.close()
        follow.stderr.close()
        rc, doc = cli.json("stop", "flocal", "--grace", "2")
        assert rc == 0, doc
