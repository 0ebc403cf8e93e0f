"""The relay (runward/transport/relay.py): an ssh host's resident agent kept one round trip away by a
local process that keeps the connections of earlier calls open. Real sshd hosts of the
testbed, real processes and sockets; what is true is read from /proc and the far home, never
from the relay's own word."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

import pytest

import testbed
from conftest import CLI, alive, wait_for
from runward.transport import agentcall as transport
from helpers_follow import _children
from helpers_resident import _ppid, far  # noqa: F401  (far: the fixture)
from helpers_relay import _end_master, _paths, _relays, _through_relay


def test_a_call_through_the_relay_is_answered_now_by_a_child_forked_for_it(far, tmp_path):
    """The relay keeps a connection, never an answer: a job killed behind its back shows dead
    at the next call, and each request runs in its own child of the kept connection's."""
    c = CLI(tmp_path / "clihome", tmp_path)
    c.env = testbed.env(far.tb, c.env)
    c.env.update(RUNWARD_SSH_CONFIG=far.tb["ssh_config"], RUNWARD_HOME=os.environ["RUNWARD_HOME"])
    (tmp_path / "runward.toml").write_text(f'[targets.h]\non = "ssh://rw1"\nhome = "{far.home}"\n'
                                           f'python = "/usr/bin/python3"\n')
    name = "rel" + uuid.uuid4().hex[:6]
    rc, doc = c.json("start", name, "--on", "h", "--settle", "0.3", "--", "sleep", "300")
    assert rc == 0, doc
    _through_relay(far)
    resident = far.resident()
    run = far.call({"op": "status", "names": [name]})["runs"][0]
    assert transport.LAST_WAY == "relay" and run["state"] == "running" and alive(run["pid"], run["start_time"])
    os.kill(run["pid"], signal.SIGKILL)  # behind runward's back
    wait_for(lambda: not alive(run["pid"], run["start_time"]), what="the job to die")
    run = wait_for(lambda: (r := far.call({"op": "status", "names": [name]})["runs"][0])["state"] != "running" and r,
                   what="status to see the job dead")
    assert transport.LAST_WAY == "relay" and run["state"] in ("failed", "exited"), run
    # each request: a child forked for it by the kept connection's child of the resident
    a, b = far.call({"op": "ping"})["pid"], far.call({"op": "ping"})["pid"]
    assert transport.LAST_WAY == "relay" and a != b
    kept = [p for p in _children(resident)]
    assert kept, "no kept connection's child under the resident"
    assert all(_ppid(p) in (*kept, None) for p in (a, b))


def test_calls_at_once_each_get_their_own_answer(far):
    listen = _through_relay(far)
    names = [f"nosuch{i}{uuid.uuid4().hex[:4]}" for i in range(6)]
    got: dict[str, str] = {}

    def ask(n):
        try:
            far.call({"op": "logs", "name": n})
        except Exception as e:  # noqa: BLE001
            got[n] = f"{getattr(e, 'kind', '')} {e}"
    threads = [threading.Thread(target=ask, args=(n,)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(got) == sorted(names)
    for n in names:  # each error names its own request's run, none another's
        assert got[n].startswith("RunNotFound") and n in got[n] and not any(m in got[n] for m in names if m != n)
    assert len(_relays(listen)) == 1


def test_a_killed_relay_costs_no_call_and_is_replaced(far):
    listen = _through_relay(far)
    first = _relays(listen)
    assert len(first) == 1
    os.kill(first[0], signal.SIGKILL)
    wait_for(lambda: not _relays(listen), what="the relay to die")
    far.call({"op": "status"})  # its socket refuses: the forward, handed to a new relay
    assert (transport.LAST_ROUTE, transport.LAST_WAY) == ("resident", "forward")
    second = wait_for(lambda: _relays(listen), what="a new relay")
    assert second != first
    wait_for(lambda: far.call({"op": "status"}) is not None and transport.LAST_WAY == "relay",
             what="a call through the new relay")


def test_a_killed_resident_takes_its_kept_connections_along(far):
    """A kept connection's child serves only while the resident that accepted it lives."""
    _through_relay(far)
    old = far.resident()
    kept = _children(old)
    assert kept
    os.kill(old, signal.SIGKILL)
    wait_for(lambda: not alive(old), what="the resident to die")
    far.call({"op": "status"})  # the kept child refuses, the forward leads nowhere: the ordinary way
    assert transport.LAST_ROUTE == "exec"
    wait_for(lambda: not any(alive(p) for p in kept), what="the kept connections' children to end")
    new = wait_for(lambda: (far.resident() or 0) not in (0, old) and far.resident(), what="a new resident")
    wait_for(far.listening, what="its socket")
    wait_for(lambda: far.call({"op": "status"}) is not None and transport.LAST_WAY == "relay",
             what="the relay to reach the new resident")
    assert _children(new)


def test_the_relay_ends_with_its_control_master(far):
    listen = _end_master(far)
    assert not os.path.exists(listen)
    wait_for(lambda: far.call({"op": "status"}) is not None and transport.LAST_WAY == "relay",
             what="a relay of the new forward")
    assert _paths(far)[1] != listen


def test_an_idle_relay_exits_and_its_far_children_with_it(far, monkeypatch):
    monkeypatch.setenv("RUNWARD_RESIDENT_IDLE", "3")
    listen = _through_relay(far)
    pid = _relays(listen)[0]
    kept = _children(far.resident())
    assert kept
    wait_for(lambda: not alive(pid), timeout=30, what="the idle relay to exit")
    wait_for(lambda: not any(alive(p) for p in kept), timeout=30, what="its kept connections' children to end")
    assert not os.path.exists(listen)


def test_kept_requests_count_as_the_residents_use(far, monkeypatch):
    """The resident's idle time runs from the last request, on a kept connection or not."""
    monkeypatch.setenv("RUNWARD_RESIDENT_IDLE", "4")
    _through_relay(far)
    pid = far.resident()
    end = time.monotonic() + 7
    while time.monotonic() < end:
        far.call({"op": "status"})
        assert transport.LAST_WAY == "relay"
        time.sleep(0.5)
    assert far.resident() == pid and alive(pid)


def test_relay_off(far, monkeypatch):
    monkeypatch.setenv("RUNWARD_RELAY", "0")
    far.call({"op": "status"})
    wait_for(far.listening, what="the resident's socket")
    for _ in range(3):
        far.call({"op": "status"})
        assert (transport.LAST_ROUTE, transport.LAST_WAY) == ("resident", "forward")
    assert not _relays(_paths(far)[1])


def test_it_serves_its_own_uid_only(far):
    """Another uid's connection to the relay's socket is closed unanswered; nothing is sent
    on. (The 0700 control directory keeps others out already; the relay checks again.)"""
    if os.geteuid() != 0:
        pytest.skip("needs root to connect as another uid")
    listen = _through_relay(far)
    # a copy of its socket's path another uid can reach: the relay checks the peer, not the path
    os.chmod(os.path.dirname(listen), 0o711)
    os.chmod(listen, 0o777)
    try:
        client = textwrap.dedent("""
            import socket, sys
            s = socket.socket(socket.AF_UNIX)
            s.connect(sys.argv[1])
            data = b""
            try:  # the relay may close before our request is all sent: a broken pipe, nothing answered
                s.sendall(sys.argv[2].encode() + b"\\n" + b'{"v": 1, "op": "ping"}\\n')
                while True:
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    data += chunk
            except (BrokenPipeError, ConnectionResetError):  # closed with our request unread
                pass
            sys.stdout.write(repr(data))
        """)
        out = subprocess.run(["/usr/bin/python3", "-c", client, listen, f"0 {transport.agent_sha()}"],
                             capture_output=True, text=True, timeout=60, user=65534, group=65534, extra_groups=[],
                             env={"PATH": "/usr/bin:/bin"})
        assert out.stdout == "b''", out
    finally:
        os.chmod(os.path.dirname(listen), 0o700)
    far.call({"op": "status"})
    assert transport.LAST_WAY == "relay"


def test_the_relay_module_is_stdlib_only():
    """It runs as `python -I -S transport/relay.py`: nothing of runward's on its path."""
    path = Path(transport.__file__).parent / "relay.py"
    src = path.read_text()
    assert "from ." not in src and "import runward" not in src and "from runward" not in src
    out = subprocess.run([sys.executable, "-I", "-S", "-c", "import runpy, sys; runpy.run_path(sys.argv[1])", str(path)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


def test_doctor_says_a_relay_keeps_the_way(far, monkeypatch):
    from runward import api as ops
    from runward.operations.doctor import render_doctor
    _through_relay(far)
    res = ops.doctor(far.target)
    r = res["hops"][-1]["checks"]["resident"]
    assert r["route"] == "relay", r
    assert "reached through a local relay's kept connection" in render_doctor(res)
    monkeypatch.setenv("RUNWARD_RELAY", "0")
    assert ops.doctor(far.target)["hops"][-1]["checks"]["resident"]["route"] == "forward"
