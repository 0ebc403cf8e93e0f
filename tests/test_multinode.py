"""A run over several nodes (issue 16, docs/multinode.md) on real testbed hosts rw1..rw4: the
example job's ranks rendezvous at MASTER_ADDR:MASTER_PORT and all-reduce their step counter
over the network between the hosts' namespaces; all or nothing at start; a rank killed
stops the others (kept by the targets' shims, with no CLI running); stop verified on every
node. The hosts share this machine's files, so each node gets a home of its own."""

from __future__ import annotations

import json
import os
import re
import signal

import pytest

import testbed
from conftest import EXAMPLE, alive, marked, wait_for
from runward.multinode import nodes as multinode
from helpers_multinode import _config, _log, _rows, _torchrun, mn  # noqa: F401  (mn: fixture)


def test_two_nodes_talk_status_logs_and_stop_everywhere(cli, tmp_path, mn):
    _config(tmp_path, ["rw1", "rw2"], mn)
    rc, doc = cli.json("start", mn)
    assert rc == 0 and doc["ok"], doc
    res = doc["result"]
    assert res["state"] == "running" and res["master_addr"] == "10.200.1.2" and res["nnodes"] == 2
    pids = [r["result"]["pid"] for r in _rows(doc)]
    # the ranks really talk over the network: rank 1 (on rw2) sums with rank 0 (on rw1)
    wait_for(lambda: re.search(r"allreduce step 3 sum 6 nnodes 2", _log(tmp_path, 1, mn)), 60, "rank 1's all-reduce")
    log1 = _log(tmp_path, 1, mn)
    assert f"rendezvous rank=1 nnodes=2 master=10.200.1.2:{res['master_port']}" in log1
    assert '"--rank=1", "--of=2"' in log1  # placeholders, expanded per node in argv words
    # status from one node's record finds the other; the aggregate runs only when all do
    rc, st = cli.json("status", mn, "--on", "n1")
    assert rc == 0 and st["result"]["state"] == "running", st
    assert [r["state"] for r in _rows(st)] == ["running", "running"]
    env = _rows(st)[1]["run"]["multinode"]
    assert env["rank"] == 1 and env["id"] == res["run_id"]
    rc, lg = cli.json("logs", mn, "--all-nodes", "-n", "5")
    assert rc == 0 and any(ln.startswith("[rank 0] ") for ln in lg["result"]["lines"])
    assert any(ln.startswith("[rank 1] ") for ln in lg["result"]["lines"])
    rc, one = cli.json("logs", mn, "--node", "1", "--grep", "^rendezvous")
    assert rc == 0 and any("rendezvous rank=1" in ln for ln in one["result"]["lines"]), one
    # the coordinator on node 0 heeds only its members: a stranger's "node 1 failed" is dropped
    import socket
    with socket.create_connection(("10.200.1.2", res["coord_port"]), timeout=10) as s:
        s.sendall(b'{"ended": 1, "failed": true}\n{"hello": 1, "id": "not-this-run"}\n')
        assert s.recv(100) == b""  # closed by the coordinator after reading both lines
    rc, st = cli.json("status", mn)
    assert st["result"]["state"] == "running" and not any(r["run"].get("peer_events") for r in _rows(st)), st
    rc, w = cli.json("watch", mn, "--all-nodes", "--for", "1")
    assert rc == 0 and [r["ok"] and r["result"]["healthy"] for r in w["result"]["nodes"]] == [True, True], w
    rc, g = cli.json("gpus", "--on", "n0", "--on", "n1")  # no GPU here: one answer per node all the same
    assert rc == 0 and [t["target"] for t in g["targets"]] == ["n0 (ssh://rw1)", "n1 (ssh://rw2)"], g
    rc, doc = cli.json("stop", mn)
    assert rc == 0 and doc["result"]["verified_dead"], doc
    assert all(r["ok"] and r["result"]["verified_dead"] for r in _rows(doc))
    assert not any(alive(p) for p in pids)


def test_four_nodes_start_and_stop(cli, tmp_path, mn):
    _config(tmp_path, ["rw1", "rw2", "rw3", "rw4"], mn)
    rc, doc = cli.json("start", mn)
    assert rc == 0 and [r["rank"] for r in _rows(doc) if r["ok"]] == [0, 1, 2, 3], doc
    wait_for(lambda: "allreduce step 2 sum 8 nnodes 4" in _log(tmp_path, 3, mn), 60, "four ranks' all-reduce")
    rc, doc = cli.json("restart", mn)  # the whole run: every node stopped, then every node started
    assert rc == 0 and [s["step"] for s in doc["result"]["steps"]] == ["stop", "start"], doc
    assert doc["result"]["state"] == "running" and [r["result"]["attempt"] for r in _rows(doc)] == [2, 2, 2, 2], doc
    rc, doc = cli.json("stop", mn)
    assert rc == 0 and all(r["result"]["verified_dead"] for r in _rows(doc)), doc
    assert not marked(mn + ".")


def test_a_start_whose_request_waits_reaches_a_far_side_that_lost_its_cache(cli, tmp_path, mn):
    """A multi-node start sends each node the agent's hash alone and its request only once
    every node's probe is in. A far side that lost its code cache meanwhile answers
    AgentMissing before it reads a request: the start is made again there with the source,
    and every node runs."""
    import pwd
    from pathlib import Path
    from runward.transport import agentcall as transport
    _config(tmp_path, ["rw1", "rw2"], mn)
    rc, doc = cli.json("start", mn)  # the far sides run this agent: known, cached
    assert rc == 0, doc
    rc, doc = cli.json("stop", mn)
    assert rc == 0, doc
    # sshd sessions get the passwd entry's home, not this process's $HOME (a scratch HOME
    # under CI): the far side's cache is there
    far_home = Path(pwd.getpwuid(os.getuid()).pw_dir)
    cached = list((far_home / ".runward" / "cache").glob("agent-%s.*" % transport.agent_sha()[:32]))
    assert cached  # the hosts share this machine's files: their cache is the passwd home's
    for f in cached:
        f.unlink()
    rc, doc = cli.json("start", mn)
    assert rc == 0 and [r["result"]["verified"] for r in _rows(doc)] == [["alive_after_settle"]] * 2, doc
    assert [f.name for f in cached if f.exists()] == [f.name for f in cached]  # compiled again: the source came
    rc, doc = cli.json("stop", mn)
    assert rc == 0 and all(r["result"]["verified_dead"] for r in _rows(doc)), doc
    assert not marked(mn + ".")


def test_unreachable_node_at_start_starts_nothing(cli, tmp_path, mn):
    rc, doc = cli.json("start", mn, "--on", "ssh://rw1", "--on", "ssh://rw-down", "--", "sleep", "300")
    assert rc == 1 and not doc["ok"], doc
    rows = _rows(doc)
    assert rows[0]["ok"] and rows[1]["error"]["type"] == "Unreachable"
    assert doc["result"]["state"] == "not started"
    assert not marked(mn + ".")


def _plain_agents() -> set[int]:
    """pids of runward agents serving one call (not shims, loggers or residents)."""
    from runward.agent.core import boot
    out = set()
    for d in os.listdir("/proc"):
        try:
            args = open(f"/proc/{d}/cmdline", "rb").read().decode("utf-8", "replace").split("\0")
        except OSError:
            continue
        if boot.BOOTSTRAP in args and not {boot.SHIM_ARG, boot.RESIDENT_ARG} & set(args):
            out.add(int(d))
    return out


def test_a_node_whose_probe_times_out_starts_nothing_and_leaves_no_agent(cli, tmp_path, mn, monkeypatch):
    """rw1's start is under way (its agent loaded, waiting for its request) for the 2 s
    rw-timeout's probe takes to fail: no request is sent, and that agent ends."""
    import json
    monkeypatch.setitem(cli.env, "RUNWARD_CONNECT_TIMEOUT", "2")
    before = _plain_agents()
    p = cli.popen("start", mn, "--on", "ssh://rw1", "--on", "ssh://rw-timeout", "--json", "--", "sleep", "300")
    wait_for(lambda: _plain_agents() - before, timeout=10, what="rw1's agent waiting for its request")
    out, _ = p.communicate(timeout=60)
    rc, doc = p.returncode, json.loads(out)
    assert rc == 1 and doc["result"]["state"] == "not started", doc
    assert [r["ok"] for r in _rows(doc)] == [True, False] and _rows(doc)[1]["error"]["type"] == "Unreachable"
    assert not marked(mn + ".")
    wait_for(lambda: not (_plain_agents() - before), timeout=10, what="no agent left waiting for a request")
    rc, doc = cli.json("status", mn, "--on", "ssh://rw1")
    assert rc == 4, doc  # no record of it there: the request never arrived


def test_a_node_that_exits_early_rolls_back_every_node(cli, tmp_path, mn):
    _config(tmp_path, ["rw1", "rw2"], mn)
    rc, doc = cli.json("start", mn, "--env", "TRAIN_FAIL_RANK=1", "--env", "TRAIN_FAIL_FAST=1")
    assert rc == 1 and doc["result"]["state"] == "rolled back", doc
    rows = _rows(doc)
    assert rows[1]["error"]["type"] == "ExitedEarly" and rows[1]["result"]["exit"]["code"] == 3
    assert rows[0]["rollback"]["verified_dead"]
    assert not alive(rows[0]["result"]["pid"]) and not marked(mn + ".")


def test_nodes_not_ready_in_time_are_rolled_back(cli, tmp_path, mn):
    _config(tmp_path, ["rw1", "rw2"], mn)
    rc, doc = cli.json("start", mn, "--ready", "^no such line", "--ready-timeout", "1")
    assert rc == 1 and doc["result"]["state"] == "rolled back", doc
    rows = _rows(doc)
    assert [r["error"]["type"] for r in rows] == ["NotVerified", "NotVerified"]
    assert all(r["rollback"]["verified_dead"] for r in rows) and not marked(mn + ".")


def test_a_rank_killed_stops_every_node_without_the_cli(cli, tmp_path, mn):
    _config(tmp_path, ["rw1", "rw2", "rw3"], mn)
    rc, doc = cli.json("start", mn)
    assert rc == 0, doc
    pids = [r["result"]["pid"] for r in _rows(doc)]
    wait_for(lambda: "allreduce step 2" in _log(tmp_path, 2, mn), 60, "the ranks' all-reduce")
    os.kill(pids[2], signal.SIGKILL)  # rank 2 dies; ranks 0 and 1 wait in the all-reduce
    wait_for(lambda: not alive(pids[0]) and not alive(pids[1]), 60, "the shims to stop ranks 0 and 1")
    rc, st = cli.json("status", mn)
    assert rc == 0 and st["result"]["state"] == "failed", st
    runs = [r["run"] for r in _rows(st)]
    assert runs[2]["exit"]["signal"] == "SIGKILL" and runs[2].get("stop_requested") is None
    for r in runs[:2]:  # each node's own exit kept, and why it was stopped
        assert r["state"] == "exited" and r["exit"]["code"] == 0 and r["peer_stop"]["by_node"] == 2
        assert r["peer_stop"]["verified_dead"]
    assert not marked(mn + ".")


def test_on_node_failure_continue_leaves_the_others_running(cli, tmp_path, mn):
    _config(tmp_path, ["rw1", "rw2"], mn, 'on_node_failure = "continue"')
    rc, doc = cli.json("start", mn, "--env", "TRAIN_FAIL_RANK=0", "--env", "TRAIN_CRASH_AT=20")
    assert rc == 0, doc
    pids = [r["result"]["pid"] for r in _rows(doc)]

    def node1_saw_it():
        # the nodes are asked one after the other: node 0 may be read just before its job
        # failed and node 1 just after it heard so; wait for one reading that has both
        rc, st = cli.json("status", mn)
        return rc == 0 and _rows(st)[0].get("failed") and _rows(st)[1]["run"].get("peer_events") and st
    st = wait_for(node1_saw_it, 60, "node 0 failed and node 1 recording node 0's end")
    assert _rows(st)[1]["state"] == "running", st
    assert st["result"]["state"] == "failed" and alive(pids[1])
    # the failed node reads as its own status and top read it: exited, by its exit code
    assert _rows(st)[0]["state"] == "exited" and _rows(st)[0]["run"]["exit"]["code"] not in (0, None), st
    assert _rows(st)[0]["run"]["state"] == "exited" and _rows(st)[0]["failed"] is True, st


# A member node's link whose job ends before it reached node 0's coordinator (not listening
# yet: its first connect is refused). It says "ended" on stdout once it was told the job ended.
EARLY_END = r"""
import sys, threading
from runward.agent.supervise import peers
link = peers.Link(None, 1, {"rank": 1, "nnodes": 2, "coord_port": int(sys.argv[1]),
                            "master_addr": "127.0.0.1", "id": "early"})
threading.Thread(target=link.run, daemon=True).start()
ex = {"code": 3, "signal": None}
print("ended", flush=True)
peers.ended(link, ex, {})
"""


def test_a_member_whose_job_ends_before_its_link_connects_still_tells_node_0():
    """The end of a member's job that came before its link reached node 0's coordinator is
    not lost: the link goes on trying, says hello and then that the job ended (failed), so
    node 0 stops the others now, not after the 120 s it waits for a member that never came."""
    import hashlib
    import hmac
    import json
    import socket
    import subprocess
    import sys
    from conftest import ROOT
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    member = subprocess.Popen([sys.executable, "-c", EARLY_END, str(port)], stdout=subprocess.PIPE,
                              env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"})
    try:
        assert member.stdout.readline().strip() == b"ended"  # its job is over; nothing listens yet
        with socket.socket() as srv:
            srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            srv.bind(("127.0.0.1", port))
            srv.listen(1)
            srv.settimeout(10)
            conn, _ = srv.accept()
            with conn, conn.makefile("rb") as f:
                conn.settimeout(10)
                hello = json.loads(f.readline())
                # the member tells only a coordinator that proves it knows the run's secret
                # (none here: the run id is the key); docs/multinode.md, "Trust"
                text = "runward-peers coordinator early 1 %s nc" % hello["nonce"]
                proof = hmac.new(b"early", text.encode(), hashlib.sha256).hexdigest()
                conn.sendall(json.dumps({"welcome": 1, "nonce": "nc", "proof": proof}).encode() + b"\n")
                said = [hello, json.loads(f.readline()), json.loads(f.readline())]
        assert said[0]["hello"] == 1 and said[0]["id"] == "early" and "proof" in said[1], said
        assert said[2]["ended"] == 1 and said[2]["failed"] is True and said[2]["exit"]["code"] == 3, said
        assert member.wait(timeout=30) == 0
    finally:
        member.kill()
        member.wait()


def test_placeholders_expand_in_argv_words_only():
    v = {"node_rank": 2, "nnodes": 4, "master_addr": "10.0.0.1", "master_port": 29500}
    assert multinode.expand(["--rank={node_rank}", "{nnodes}", "{master_addr}:{master_port}", "{other}"], v) == \
        ["--rank=2", "4", "10.0.0.1:29500", "{other}"]
    env = multinode.rank_env(1, 2, "10.0.0.1", 29500, ["10.0.0.1", "10.0.0.2"], 8)
    assert env["WORLD_SIZE"] == "16" and env["RUNWARD_NODE_IPS"] == "10.0.0.1,10.0.0.2"
    assert multinode.aggregate(["running", "running"]) == "running"
    assert multinode.aggregate(["running", "exited"]) == "partial"


def test_on_twice_is_refused_by_a_one_target_verb(cli):
    rc, doc = cli.json("restart", "x", "--on", "local", "--on", "ssh://rw1")
    assert rc == 2 and "acts on one target" in doc["error"]["message"], doc


def test_torchrun_gloo_over_two_hosts(cli, tmp_path, mn):
    torchrun = _torchrun()
    if torchrun is None:
        pytest.skip("torch is not installed (pip install -e '.[torch]')")
    _config(tmp_path, ["rw1", "rw2"], mn)
    script = str(EXAMPLE.parent / "gloo_allreduce.py")
    rc, doc = cli.json("start", mn, "--ready", r"^gloo step 1 ", "--ready-timeout", "180", "--stop-signal", "INT",
                       "--grace", "20",
                       # every testbed host has the machine's hostname, which resolves to 127.0.0.1:
                       # gloo must be told its interface, as on a cluster with several NICs
                       "--env", "GLOO_SOCKET_IFNAME=eth0", "--", torchrun, "--nnodes={nnodes}", "--node_rank={node_rank}",
                       "--nproc_per_node=1", "--master_addr={master_addr}", "--master_port={master_port}", script,
                       timeout=300)
    assert rc == 0, doc
    wait_for(lambda: "gloo step 3 sum 6 world 2" in _log(tmp_path, 1, mn), 120, "gloo's all-reduce on rank 1")
    rc, doc = cli.json("stop", mn)
    assert rc == 0 and all(r["result"]["verified_dead"] for r in _rows(doc)), doc
    assert not marked(mn + ".")


def test_containers_as_nodes(cli, mn):
    """Any target is a node: an ssh host, a container behind ssh (pct), a local podman
    container. The testbed's containers have no network, so they cannot be ranks that talk;
    with "continue" their shims only record that node 0's coordinator was out of reach."""
    tb = testbed.require("pct")
    testbed.require("podman")
    cli.env.update(testbed.env(tb, cli.env))
    rc, doc = cli.json("start", mn, "--on", "ssh://rw1", "--on", "ssh://rw2/pct:200", "--on", "podman:rwpod",
                       "--on-node-failure", "continue", "--settle", "0.3", "--", "sleep", "300")
    assert rc == 0 and [r["ok"] for r in _rows(doc)] == [True, True, True], doc
    rc, st = cli.json("status", mn, "--on", "podman:rwpod")  # the container's record names the others
    assert rc == 0 and st["result"]["state"] == "running" and len(_rows(st)) == 3, st
    rc, doc = cli.json("stop", mn, "--on", "ssh://rw2/pct:200")
    assert rc == 0 and [r["result"]["verified_dead"] for r in _rows(doc)] == [True, True, True], doc


def test_a_restart_policy_on_a_multi_node_run_is_refused_and_nothing_starts(cli, mn):
    """One node restarted alone would rejoin a rendezvous its peers have left: refused, exit 2,
    nothing started on either node."""
    rc, doc = cli.json("start", mn, "--on", "ssh://rw1", "--on", "ssh://rw2", "--restart", "on-failure",
                       "--", "sleep", "600")
    assert rc == 2 and doc["error"]["type"] == "BadInput" and "multi-node" in doc["error"]["message"], doc
    assert not marked(mn + "."), "nothing may have started"


@pytest.mark.parametrize("action", ["restart", "stacks,stop"])
def test_a_health_action_that_stops_or_restarts_a_multi_node_run_is_refused(cli, tmp_path, mn, action):
    """One node's shim judges its own rank's log: a stop or restart there would end or restart
    that rank alone while node 0 runs on. Refused at start, exit 2, naming the action; nothing
    started on either node."""
    _config(tmp_path, ["rw1", "rw2"], mn, f'[runs.{mn}.health]\nactions = {{ nan = "{action}" }}')
    rc, doc = cli.json("start", mn)
    assert rc == 2 and doc["error"]["type"] == "BadInput", doc
    assert "nan" in doc["error"]["message"] and "multi-node" in doc["error"]["message"], doc
    assert "notify" in doc["error"]["hint"], doc
    assert not marked(mn + "."), "nothing may have started"
    assert not (tmp_path / "node0" / "runs" / mn).exists() and not (tmp_path / "node1" / "runs" / mn).exists()


def test_node_1s_stop_line_reads_the_same_whichever_way_the_stop_reached_it_first(cli, tmp_path, mn):
    """A stop signals every node at once, and node 0's end goes to node 1 over the nodes' link
    as a stop of the whole run: node 1's shim may end its job before the CLI's call for node 1
    arrives. Forced here (node 1's agent starts 8 s late once the stop begins: a slow hop), and
    left to timing in a second run: node 1's line is the same words both times. Ground truth:
    node 1's record (its shim's peer_stop, or the CLI's stop) and its job gone from /proc."""
    slow = tmp_path / "slow-now"
    _config(tmp_path, ["rw1", "rw2"], mn)
    py = tmp_path / "py-slow"
    py.write_text(f'#!/bin/sh\n[ -e {slow} ] && sleep 8\nexec python3 "$@"\n')
    py.chmod(0o755)
    toml = tmp_path / "work" / "runward.toml"
    text = toml.read_text().replace(f'home = "{tmp_path}/node1"\n', f'home = "{tmp_path}/node1"\npython = "{py}"\n')
    toml.write_text(text)
    lines = {}
    for how in ("the whole-run word first", "either first"):
        rc, doc = cli.json("start", mn)
        assert rc == 0, doc
        attempt = doc["result"]["nodes"][1]["result"]["attempt"]
        wait_for(lambda: "allreduce step 2" in _log(tmp_path, 1, mn), 60, "rank 1's all-reduce")
        if how == "the whole-run word first":
            slow.touch()
        try:
            p = cli.run("stop", mn, "--grace", "5")
        finally:
            slow.unlink(missing_ok=True)
        assert p.returncode == 0, (p.stdout, p.stderr)
        assert not marked(f"{mn}.{attempt}"), "every node's job is gone (by /proc)"
        rec = json.loads((tmp_path / "node1" / "runs" / mn / "attempts" / f"{attempt}.json").read_text())
        if how == "the whole-run word first":
            assert (rec.get("peer_stop") or {}).get("whole"), rec  # node 1's shim ended it, as forced
        lines[how] = [ln.replace(f"attempt {attempt}", "attempt N") for ln in p.stdout.splitlines()[1:]]
    want = ["  node 0 n0 (ssh://rw1): stopped by runward stop, attempt N, verified dead",
            "  node 1 n1 (ssh://rw2): stopped by runward stop, attempt N, verified dead"]
    assert lines == {"the whole-run word first": want, "either first": want}, lines
