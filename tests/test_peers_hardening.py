"""Issue 25, item 1: a multi-node run's coordinator cannot be switched off, nor its members
stopped or fooled, from the network (agent/supervise/peers.py; docs/multinode.md, "Trust").

Real shims started by the real agent on this machine, one home per node, talking over
127.0.0.1; real sockets for the flood, the silent connection and the fake coordinators."""

from __future__ import annotations

import errno
import hashlib
import hmac
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import uuid

import pytest

from conftest import alive, marked, wait_for
from runward.views import nodesview
from runward.transport import agentcall as transport
from runward.agent.core import boot

SECRET = uuid.uuid4().hex


def _agent(home, req: dict) -> dict:
    """One real agent call (the blob and request on stdin, as transport sends them) with HOME."""
    packed, sha = transport.agent_source()
    stdin = (b"%d %s\n" % (len(packed), sha.encode()) + packed
             + json.dumps(dict(req, v=boot.PROTOCOL)).encode() + b"\n")
    p = subprocess.run([sys.executable, "-S", "-c", boot.BOOTSTRAP], input=stdin, capture_output=True,
                       env=dict(os.environ, RUNWARD_HOME=str(home)), timeout=90)
    return json.loads(p.stdout.splitlines()[-1])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Run:
    """One multi-node run's nodes on this machine: node R's home is tmp/nodeR."""

    def __init__(self, tmp_path, nnodes: int, port: int | None = None):
        self.tmp, self.name = tmp_path, "ph" + uuid.uuid4().hex[:6]
        self.port = port or _free_port()
        self.part = {"id": uuid.uuid4().hex[:12], "secret": SECRET, "nnodes": nnodes, "nodes": [],
                     "master_addr": "127.0.0.1", "master_port": 1, "coord_port": self.port,
                     "on_node_failure": "stop"}

    def home(self, rank: int):
        return self.tmp / f"node{rank}"

    def start(self, rank: int) -> dict:
        return _agent(self.home(rank), {"op": "start", "name": self.name, "argv": ["sleep", "300"],
                                        "settle": 0.5, "grace": 2, "multinode": dict(self.part, rank=rank)})

    def pid(self, rank: int, reply: dict) -> int:
        assert reply["ok"], reply
        return reply["result"]["pid"]

    def record(self, rank: int) -> dict:
        return json.loads((self.home(rank) / "runs" / self.name / "attempts" / "1.json").read_text())

    def clean(self):
        for rank in range(self.part["nnodes"]):
            if (self.home(rank) / "runs" / self.name).is_dir():
                _agent(self.home(rank), {"op": "stop", "name": self.name, "grace": 1})
        for pid, start in marked(self.name + ".").items():
            if alive(pid, start):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def runs(tmp_path):
    made = []
    yield lambda *a, **kw: made.append(Run(tmp_path, *a, **kw)) or made[-1]
    for r in made:
        r.clean()


def _closed_by_peer(s: socket.socket) -> bool:
    try:
        return s.recv(65536) == b""
    except BlockingIOError:
        return False
    except OSError as e:
        return e.errno == errno.ECONNRESET


def test_a_thousand_idle_connections_are_shed_and_a_failed_node_still_stops_the_others(runs):
    """1,100 connections that never say hello, past select()'s 1024 descriptors: each is
    closed by the coordinator, its descriptors stay few, and a node killed afterwards still
    makes the coordinator stop every other node (today its thread died, nobody was stopped)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < 4096:
        pytest.skip(f"needs RLIMIT_NOFILE's hard limit >= 4096 (it is {hard}) to open 1,100 connections")
    resource.setrlimit(resource.RLIMIT_NOFILE, (4096, hard))  # the shims inherit it: accept() is not the limit
    flood: list[socket.socket] = []
    try:
        run = runs(3)
        pids = [run.pid(r, run.start(r)) for r in range(3)]
        shim0 = run.record(0)["shim"]["pid"]
        most = [0]

        def count_fds():
            most[0] = max(most[0], len(os.listdir(f"/proc/{shim0}/fd")))
        for i in range(1100):  # one after the other: each one accepted (a burst would overflow the backlog)
            flood.append(socket.create_connection(("127.0.0.1", run.port), timeout=10))
            flood[-1].setblocking(False)
            if i % 50 == 0:
                count_fds()

        def every_one_closed():
            count_fds()
            flood[:] = [s for s in flood if not _closed_by_peer(s) or s.close()]
            return not flood
        wait_for(every_one_closed, 90, "the coordinator to close all 1,100 silent connections")
        assert most[0] < 64 + 40, most  # at most 64 waiting for their hello, never one per connection
        os.kill(pids[2], signal.SIGKILL)
        wait_for(lambda: all(run.record(r).get("peer_stop") for r in (0, 1)), 30,
                 "nodes 0 and 1 stopped by node 2's failure")
        assert not alive(pids[0]) and not alive(pids[1])
        for r in (0, 1):
            rec = run.record(r)
            assert rec["peer_stop"]["by_node"] == 2 and rec["peer_stop"]["verified_dead"], rec
            assert "coordinator_lost" not in rec, rec
    finally:
        for s in flood:
            s.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_connection_that_never_proves_itself_is_closed(runs):
    """Silent: closed after the few seconds a hello may take. Talkative without a newline:
    closed at once, its bytes not buffered without bound."""
    run = runs(2)
    run.pid(0, run.start(0))
    silent = socket.create_connection(("127.0.0.1", run.port), timeout=30)
    chatty = socket.create_connection(("127.0.0.1", run.port), timeout=30)
    with silent, chatty:
        try:
            chatty.sendall(b"x" * 200_000)
        except OSError as e:  # closed while we still wrote: what the test wants
            assert e.errno in (errno.ECONNRESET, errno.EPIPE), e
        chatty.setblocking(False)
        wait_for(lambda: _closed_by_peer(chatty), 5, "the coordinator to close a hello line without end")
        silent.setblocking(False)
        wait_for(lambda: _closed_by_peer(silent), 15, "the coordinator to close a connection that never spoke")
    assert alive(run.record(0)["job"]["pid"])  # the run itself goes on


def _proof(role: str, part: dict, rank: int, nm: str, nc: str, secret: str) -> str:
    """The proof as the standard library's hmac computes it (the agent carries its own)."""
    text = "runward-peers %s %s %s %s %s" % (role, part["id"], rank, nm, nc)
    return hmac.new(secret.encode(), text.encode(), hashlib.sha256).hexdigest()


def _fake_coordinator(run: Run, secret: str, then: list[dict]):
    """Accept the member's next connection on the run's port, answer its hello with a
    proof made with SECRET, and say THEN; returns (its hello, what the member sent next)."""
    with socket.socket() as srv:
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind(("127.0.0.1", run.port))
        srv.listen(4)
        srv.settimeout(30)
        conn, _ = srv.accept()
    with conn, conn.makefile("rb") as f:
        conn.settimeout(10)
        hello = json.loads(f.readline())
        nc = "c" * 32
        lines = [{"welcome": 1, "nonce": nc, "proof": _proof("coordinator", run.part, 1, hello.get("nonce"), nc, secret)}]
        conn.sendall(b"".join(json.dumps(m).encode() + b"\n" for m in lines + then))
        try:
            after = f.readline()
        except OSError:
            after = b""
    return hello, after


def test_a_member_heeds_only_a_coordinator_that_proves_it_knows_the_secret(runs):
    """A listener on the coordinator's port without the run's secret cannot stop the member
    nor tell it the run ended; the member says why, keeps its job, and tries again. The real
    coordinator's proof (an independent HMAC here) is heeded, and the member proves itself."""
    run = runs(2)
    pid = run.pid(1, run.start(1))
    stop = {"stop": {"rank": 0, "why": "a stranger says so"}}
    hello, after = _fake_coordinator(run, "not-the-secret", [stop, {"ended": 0, "failed": False}])
    assert after == b"", after  # no proof, no "ended", nothing for a listener that did not prove itself
    wait_for(lambda: any("did not prove" in e.get("why", "") for e in run.record(1).get("peer_events", [])),
             10, "the member to record the unproved listener")
    rec = run.record(1)
    assert alive(pid) and "stop_requested" not in rec and "peer_stop" not in rec, rec
    assert hello["hello"] == 1 and hello["id"] == run.part["id"] and len(hello["nonce"]) >= 16, hello
    # it was not told "ended" either: it comes back, and this time the coordinator is real
    hello, after = _fake_coordinator(run, SECRET, [stop])
    assert json.loads(after) == {"proof": _proof("member", run.part, 1, hello["nonce"], "c" * 32, SECRET)}
    rec = wait_for(lambda: run.record(1).get("peer_stop") and run.record(1), 30,
                   "the member to stop its job on the proved coordinator's word")
    assert rec["peer_stop"]["by_node"] == 0 and rec["peer_stop"]["verified_dead"] and not alive(pid), rec
    assert any(e.get("told_by") == 0 and e.get("why") == "a stranger says so" for e in rec["peer_events"]), rec


def test_a_coordinator_that_cannot_listen_is_said_and_stops_the_run_and_the_secret_is_never_shown(runs):
    """The coordinator's port taken by someone else: node 0 does not run on unwatched. Its
    record and status say "coordinator lost", and with on_node_failure = "stop" its job is
    stopped."""
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen(1)
        run = runs(2, port=squatter.getsockname()[1])
        reply = run.start(0)  # the job may be stopped while the start still settles
        wait_for(lambda: (run.home(0) / "runs" / run.name / "attempts" / "1.json").exists()
                 and run.record(0).get("peer_stop"), 30, "node 0's job stopped by its failed coordinator")
    rec = run.record(0)
    assert "could not listen" in rec["coordinator_lost"]["why"] and rec["peer_stop"]["verified_dead"], rec
    st = _agent(run.home(0), {"op": "status", "names": [run.name]})
    assert st["ok"] and SECRET not in json.dumps(st) and SECRET not in json.dumps(reply), st
    node = st["result"]["runs"][0]
    assert node["multinode"]["secret"] == "[secret]" and "could not listen" in node["coordinator_lost"]["why"]
    line = nodesview.node_line({"rank": 0, "target": "local", "ok": True, "run": node})
    assert "coordinator lost" in line, line
    stop = _agent(run.home(0), {"op": "stop", "name": run.name})
    assert stop["ok"] and SECRET not in json.dumps(stop), stop
