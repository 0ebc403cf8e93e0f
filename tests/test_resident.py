"""The resident agent: the read-only verbs over ssh served by an agent kept running on the
host, reached through the ssh control master's forward of its unix socket
(runward/agent/core/resident.py; docs/protocol.md). Real sshd hosts of the testbed, real processes and sockets."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import textwrap
import threading
import time
import uuid
from pathlib import Path

import pytest

import testbed
from conftest import CLI, alive, wait_for
from runward.transport import agentcall as transport
from runward.agent.core import boot, resident
from runward.targets import parse_target
from helpers_resident import RESIDENT, _ppid, _records, _refused, far  # noqa: F401  (far: fixture)


def test_the_cli_sends_the_agents_read_only_verbs_only():
    assert transport.RESIDENT_OPS == resident.OPS
    assert not {"start", "stop", "kill", "exec", "push", "doctor", "watch"} & resident.OPS


@pytest.mark.parametrize("on,req,payload,wanted", [
    ("ssh://rw1", {"op": "status"}, None, True),
    ("ssh://rw1", {"op": "logs", "follow": False}, None, True),
    ("ssh://rw1", {"op": "logs", "follow": True}, None, False),   # a stream cannot be asked again
    ("ssh://rw1", {"op": "stop"}, None, False),                   # changes something
    ("ssh://rw1", {"op": "push"}, iter([b""]), False),
    ("ssh://rw1/podman:c", {"op": "status"}, None, False),        # its socket is in the container
    ("podman:c", {"op": "status"}, None, False),
    ("local", {"op": "status"}, None, False),
])
def test_which_calls_may_go_to_a_resident(on, req, payload, wanted, monkeypatch, tmp_path):
    monkeypatch.setenv("RUNWARD_HOME", str(tmp_path))
    r = transport.Resident(parse_target(on), req, payload, "sha key", [])
    assert r.wanted is wanted
    monkeypatch.setenv("RUNWARD_RESIDENT", "0")
    assert not transport.Resident(parse_target(on), req, payload, "sha key", []).wanted


def test_first_call_starts_it_and_the_next_calls_go_through_it(far):
    far.call({"op": "status"})
    assert transport.LAST_ROUTE == "exec"
    pid = wait_for(far.resident, what="the resident to take its lock")
    cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    # its command line is the bootstrap and its role: no home, no request (the pkill -f rule)
    assert cmd[-2:] == [RESIDENT, b""] and far.home.encode() not in b"\0".join(cmd)
    sock = wait_for(far.listening, what="the resident's socket")
    assert stat.S_ISSOCK(sock.stat().st_mode) and not sock.stat().st_mode & 0o077
    assert not (Path(far.home) / "cache").stat().st_mode & 0o077
    # the control master forwards a socket in runward's own 0700 directory to it
    rec = _records(far.entry())
    assert len(rec) == 1
    local = Path(transport.control_dir()) / ("r-" + rec[0])
    assert stat.S_ISSOCK(local.stat().st_mode)
    got = far.call({"op": "ping"})
    assert transport.LAST_ROUTE == "resident"
    # a child forked for it by the connection's child of the resident (the connection is
    # kept for the relay: test_relay.py)
    kept = [int(x) for x in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    assert got["pid"] != pid and _ppid(got["pid"]) in (*kept, None)


def test_it_answers_as_a_fresh_agent_would(far, tmp_path):
    c = CLI(tmp_path / "clihome", tmp_path)
    c.env = testbed.env(far.tb, c.env)
    c.env.update(RUNWARD_SSH_CONFIG=far.tb["ssh_config"], RUNWARD_HOME=os.environ["RUNWARD_HOME"])
    (tmp_path / "runward.toml").write_text(f'[targets.h]\non = "ssh://rw1"\nhome = "{far.home}"\n'
                                           f'python = "/usr/bin/python3"\n')
    name = "res" + uuid.uuid4().hex[:6]
    rc, doc = c.json("start", name, "--on", "h", "--settle", "0.3", "--", "sleep", "300")
    assert rc == 0, doc
    try:
        far.call({"op": "status"})
        wait_for(far.listening, what="the resident's socket")
        via_resident = far.call({"op": "status", "names": [name]})["runs"][0]
        assert transport.LAST_ROUTE == "resident"
        os.environ["RUNWARD_RESIDENT"] = "0"
        try:
            via_exec = far.call({"op": "status", "names": [name]})["runs"][0]
            assert transport.LAST_ROUTE == "exec"
        finally:
            del os.environ["RUNWARD_RESIDENT"]
        for k in ("name", "state", "attempt", "pid", "start_time", "argv"):
            assert via_resident[k] == via_exec[k]
        assert via_resident["state"] == "running" and alive(via_resident["pid"], via_resident["start_time"])
        assert via_resident["tree"]["pids"] == via_exec["tree"]["pids"]
        # a run that does not exist is the same error both ways
        with pytest.raises(Exception) as e:
            far.call({"op": "logs", "name": "nosuch" + name})
        assert transport.LAST_ROUTE == "resident" and e.value.kind == "RunNotFound"
    finally:
        rc, doc = c.json("stop", name, "--on", "h")
        assert rc == 0, doc


def test_a_killed_resident_is_replaced_and_no_call_fails(far):
    far.call({"op": "status"})
    first = wait_for(far.resident, what="the resident")
    wait_for(far.listening, what="its socket")
    far.call({"op": "status"})
    assert transport.LAST_ROUTE == "resident"
    for _ in range(3):  # more than _RESIDENT_FAILS_MAX times: a success in between resets the count
        os.kill(first, signal.SIGKILL)
        wait_for(lambda: not alive(first), what="the resident to die")
        far.call({"op": "status"})  # the forward leads nowhere: asked again the ordinary way
        assert transport.LAST_ROUTE == "exec"
        second = wait_for(lambda: (far.resident() or 0) not in (0, first) and far.resident(),
                          what="a new resident")
        wait_for(far.listening, what="its socket")
        far.call({"op": "status"})
        assert transport.LAST_ROUTE == "resident"
        first = second


def test_a_new_control_master_gets_a_new_forward(far):
    far.call({"op": "status"})
    wait_for(far.listening, what="the resident's socket")
    old = _records(far.entry())[-1]
    rw1 = parse_target("ssh://rw1").hops[0]  # its control socket, as runward names it
    subprocess.run(rw1.ssh_argv(transport.ssh_base(), ["-O", "exit"]), capture_output=True, check=True)
    wait_for(lambda: _refused(Path(transport.control_dir()) / ("r-" + old)), what="the master to go")
    far.call({"op": "status"})
    assert transport.LAST_ROUTE == "exec"
    new = _records(far.entry())[-1]
    assert new != old and not (Path(transport.control_dir()) / ("r-" + old)).exists()
    far.call({"op": "status"})
    assert transport.LAST_ROUTE == "resident"


def test_a_forward_that_never_answers_is_given_up(far):
    """sshd refusing streamlocal forwarding looks like this: the forward accepts and closes.
    Two such tries and the far side is left alone (for this agent version)."""
    far.call({"op": "status"})  # the ordinary way: the source is cached there
    entry = far.entry()
    transport.far_remember(f"@{entry}\tdeadbeef0000", entry.split()[0], transport.far_lines())
    path = Path(transport.control_dir()) / "r-deadbeef0000"
    path.unlink(missing_ok=True)
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(str(path))
    srv.listen(8)
    accepted = []

    def serve():
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            accepted.append(1)
            conn.close()
    threading.Thread(target=serve, daemon=True).start()
    try:
        for want in (1, 2, 2, 2):
            res = far.call({"op": "status"})
            assert transport.LAST_ROUTE == "exec" and res["runs"] == []
            assert len(accepted) == want
        assert [ln for ln in transport.far_lines() if ln.startswith("@" + entry)][-2:] == [
            f"@{entry}\t!", f"@{entry}\t!"]
    finally:
        srv.close()


def test_a_host_that_refuses_unix_socket_forwarding_is_given_up(far):
    """rw-nofwd: rw1's sshd on a port with AllowStreamLocalForwarding no. Every call still
    answers; the forward is tried twice, then never again for this agent version."""
    testbed.require("nofwd")
    target = parse_target("ssh://rw-nofwd", home=far.home, python="/usr/bin/python3")
    entry = f"{transport.agent_sha()} {transport.far_key(target)}"
    routes, records = [], []
    for _ in range(5):
        res = transport.call(target, {"op": "status"})
        assert res["runs"] == []
        wait_for(far.listening, what="the resident's socket")  # it runs: sshd will not reach it
        routes.append(transport.LAST_ROUTE)
        records.append(_records(entry))
    assert routes == ["exec"] * 5
    assert records[0] and records[0][0].isalnum()     # the forward, set up after the first call
    assert records[1][1:] == ["!"] and records[2][1:] == ["!", "!"]
    assert records[4] == records[2]                    # no third try
    assert transport.Resident(target, {"op": "status"}, None, entry, transport.far_lines()).wanted is False


def test_it_refuses_another_agent_version(far):
    far.call({"op": "status"})
    sock = wait_for(far.listening, what="its socket")
    s = socket.socket(socket.AF_UNIX)
    s.connect(str(sock))
    s.sendall(b"0 " + b"0" * 64 + b"\n" + b'{"v": 1, "op": "status"}\n')
    data = b""
    while chunk := s.recv(4096):
        data += chunk
    s.close()
    assert b'"AgentMissing"' in data and b'"ok": false' in data


def test_it_exits_when_idle_or_when_its_socket_is_removed(far, monkeypatch):
    monkeypatch.setenv("RUNWARD_RESIDENT_IDLE", "1")
    far.call({"op": "status"})
    pid = wait_for(far.resident, what="the resident")
    wait_for(lambda: not alive(pid), timeout=30, what="the idle resident to exit")
    assert not list((Path(far.home) / "cache").glob("resident-*.sock"))  # it removed its socket
    monkeypatch.setenv("RUNWARD_RESIDENT_IDLE", "600")
    transport.call(far.target, {"op": "status", "resident": None})
    pid = wait_for(far.resident, what="a new resident")
    sock = wait_for(far.listening, what="its socket")
    sock.unlink()
    wait_for(lambda: not alive(pid), timeout=30, what="the resident to notice its socket is gone")


def test_a_forward_record_is_only_ever_a_name_we_made(monkeypatch, tmp_path):
    """far-agents is ours (0600), but what it names is joined to a path: only [0-9a-z]."""
    monkeypatch.setenv("RUNWARD_HOME", str(tmp_path))
    t = parse_target("ssh://rw1")
    for bad in ("../../tmp/x", "a/b", ""):
        r = transport.Resident(t, {"op": "status"}, None, "sha key", [f"@sha key\t{bad}"])
        assert r.wanted and r.forward is None
    r = transport.Resident(t, {"op": "status"}, None, "sha key", ["@sha key\tab12"])
    assert r.forward == os.path.join(transport.control_dir(), "r-ab12")


def test_doctor_shows_the_resident_and_the_way_to_it(far, monkeypatch):
    testbed.require("nofwd")
    testbed.require("podman")
    from runward import api as ops
    from runward.operations.doctor import render_doctor

    def resident(target):
        res = ops.doctor(target)
        assert res["ok"], res
        return res["hops"][-1]["checks"].get("resident"), render_doctor(res)
    r, _ = resident(far.target)  # doctor looks, and starts nothing
    assert r["alive"] is False and r["route"] == "not yet"
    assert far.resident() is None
    far.call({"op": "status"})
    wait_for(far.listening, what="the resident's socket")
    r, text = resident(far.target)
    assert r["alive"] is True and r["route"] == "forward" and r["path"].startswith(far.home + "/cache/")
    assert "resident agent: running, reached through the ssh control master's forward" in text
    nofwd = parse_target("ssh://rw-nofwd", home=far.home, python="/usr/bin/python3")
    for _ in range(3):
        transport.call(nofwd, {"op": "status"})
    r, text = resident(nofwd)
    assert r["route"] == "given up" and "AllowStreamLocalForwarding" in text
    monkeypatch.setenv("RUNWARD_RESIDENT", "0")
    assert resident(far.target)[0]["route"] == "off"
    chain = ops.doctor(parse_target("ssh://rw1/podman:" + far.tb["podman"], home=far.home))
    assert chain["ok"] and not any("resident" in h["checks"] for h in chain["hops"])


# --- only the read-only verbs, only for its own uid ----------------------------------------

def _ask(sock: Path, req: dict, sha: str | None = None) -> dict:
    """One request straight to a resident's socket, as the CLI's forward would send it."""
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(30)
    s.connect(str(sock))
    try:
        s.sendall(b"0 %s\n" % (sha or transport.agent_sha()).encode() + json.dumps(req).encode() + b"\n")
    except BrokenPipeError:
        pass  # refused before it read the request: the reply is there all the same
    data = b""
    while chunk := s.recv(4096):
        data += chunk
    s.close()
    return json.loads(data.splitlines()[-1])


def test_it_refuses_what_changes_something(far, tmp_path):
    far.call({"op": "status"})
    sock = wait_for(far.listening, what="its socket")
    proof = tmp_path / "ran"
    name = "res" + uuid.uuid4().hex[:6]
    for req in ({"op": "exec", "argv": ["/usr/bin/touch", str(proof)]},
                {"op": "start", "name": name, "argv": ["/usr/bin/touch", str(proof)], "settle": 0.2}):
        got = _ask(sock, dict(req, v=1, home=far.home))
        assert got["ok"] is False and got["error"]["type"] == "BadInput", got
        assert got["error"]["message"] == (f"the resident agent serves only read-only verbs; {req['op']} goes "
                                           f"through a fresh agent"), got
    time.sleep(0.5)  # a start would have spawned its shim by now
    assert not proof.exists()
    assert not (Path(far.home) / "runs" / name).exists()
    got = _ask(sock, {"v": 1, "op": "ping", "home": far.home})  # what reads is still served
    assert got["ok"] is True and got["result"]["pid"], got


RESIDENT_USER = "rwresident"


@pytest.fixture
def user_resident():
    """A resident started as an ordinary user, from the bootstrap and the blob on its stdin,
    as resident._start starts one (here with the source: nothing is cached for that user)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to create and switch to an ordinary user")
    py = shutil.which("python3", path="/usr/bin:/bin")
    if not py:
        pytest.skip("no system python3 for the ordinary user")
    try:
        pw = pwd.getpwnam(RESIDENT_USER)
    except KeyError:
        subprocess.run(["useradd", "-M", "-d", "/nonexistent", "-s", "/bin/sh", RESIDENT_USER], check=True)
        pw = pwd.getpwnam(RESIDENT_USER)
    base = Path(f"/tmp/rwres-{os.getpid()}-{uuid.uuid4().hex[:6]}")
    base.mkdir(mode=0o700)
    os.chown(base, pw.pw_uid, pw.pw_gid)
    sock = base / "r.sock"
    blob, sha = boot.build_blob(str(Path(resident.__file__).parent.parent))
    env = {"PATH": "/usr/bin:/bin", "RUNWARD_HOME": str(base / "home"), "HOME": str(base), "LANG": "C.UTF-8"}
    p = subprocess.Popen([py, "-S", "-c", boot.BOOTSTRAP, boot.RESIDENT_ARG], stdin=subprocess.PIPE,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=base,
                         user=pw.pw_uid, group=pw.pw_gid, extra_groups=[], start_new_session=True)
    p.stdin.write(b"%d %s\n" % (len(blob), sha.encode()) + blob
                  + json.dumps({"path": str(sock), "idle": 60}).encode() + b"\n")
    p.stdin.close()
    try:
        wait_for(lambda: sock.exists() and not _refused(sock), what="the ordinary user's resident")
        yield sock, sha, pw, py
    finally:
        p.kill()
        p.wait()
        subprocess.run(["pkill", "-KILL", "-u", RESIDENT_USER])
        shutil.rmtree(base, ignore_errors=True)


def test_it_refuses_a_connection_from_another_uid(user_resident, tmp_path):
    sock, sha, pw, py = user_resident
    got = _ask(sock, {"v": 1, "op": "ping"}, sha)  # we are root: not its user
    assert got["ok"] is False and got["error"]["type"] == "AgentError" and "result" not in got, got
    assert got["error"]["message"] == (f"the resident agent serves uid {pw.pw_uid} only; a connection "
                                       f"from uid 0 is refused"), got
    # its own user is served: the refusal is the uid's, not a resident that serves nobody
    client = textwrap.dedent("""
        import socket, sys
        s = socket.socket(socket.AF_UNIX)
        s.connect(sys.argv[1])
        s.sendall(sys.argv[2].encode() + b"\\n" + b'{"v": 1, "op": "ping"}\\n')
        data = b""
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
        sys.stdout.write(data.decode())
    """)
    out = subprocess.run([py, "-c", client, str(sock), f"0 {sha}"], capture_output=True, text=True, timeout=60,
                         user=pw.pw_uid, group=pw.pw_gid, extra_groups=[], env={"PATH": "/usr/bin:/bin"})
    mine = json.loads(out.stdout.splitlines()[-1])
    assert mine["ok"] is True and mine["result"]["pid"], out
