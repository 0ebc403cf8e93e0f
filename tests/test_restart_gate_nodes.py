"""A multi-node `restart`'s GPU gate (issue 29, docs/supervision.md "restart: blocked"), on
two real ssh testbed hosts, each with its own nvidia-smi stand-in (its fake driver's state
file, reached through the node's `python` wrapper): every node's old attempt is verified
dead, but another process still holds node 1's GPU. No node may start then -- node 0's job
alone would sit in its rendezvous and fail the run -- so every node's attempt is blocked
(exit 5, the holder named), and all start together, by themselves, once it is released. A
stop meanwhile cancels every node's, and nothing starts anywhere."""

from __future__ import annotations

import fcntl
import json
import os
import re
import signal
import subprocess
import time
import uuid

import pytest

import fakegpu
import testbed
from conftest import alive, marked, wait_for
from helpers_restart_gate import _config


@pytest.fixture
def mg(cli, tmp_path):
    tb = testbed.require("ssh")
    cli.env.update(RUNWARD_SSH_CONFIG=tb["ssh_config"])
    name = "mg" + uuid.uuid4().hex[:6]
    holder = subprocess.Popen(["sleep", "300"])  # another process on node 1's GPU 1 (a leaked worker)
    yield name, _config(tmp_path, name), holder
    holder.kill()
    holder.wait()
    cli.run("stop", name, "--grace", "2")
    for pid, start in marked(name + ".").items():
        if alive(pid, start):
            os.kill(pid, signal.SIGKILL)


def _rec(tmp_path, rank: int, name: str, n: int) -> dict:
    p = tmp_path / f"node{rank}" / "runs" / name / "attempts" / f"{n}.json"
    return json.loads(p.read_text()) if p.exists() else {}


def _blocked(cli, name, holder):
    rc, doc = cli.json("restart", name, "--gpu-release-timeout", "0.5", timeout=120)
    assert rc == 5, doc
    res = doc["result"]
    assert res["state"] == "blocked", res
    msg = doc["error"]["message"]
    assert f"{name}: blocked: node 1 n1 (ssh://rw2): GPU 1 still holds" in msg and str(holder.pid) in msg and "2,000 MiB" in msg, msg
    assert "every node starts by itself once every node's GPUs are released" in msg, msg
    stop = res["steps"][0]["result"]["nodes"]
    assert stop[0]["ok"] and not stop[1]["ok"] and stop[1]["result"]["verified_dead"], stop
    return res


def test_a_held_gpu_on_one_node_blocks_every_node_then_all_start_together(cli, tmp_path, mg):
    name, states, holder = mg
    rc, doc = cli.json("start", name, timeout=120)
    assert rc == 0, doc
    old = [r["result"]["pid"] for r in doc["result"]["nodes"]]
    fakegpu.attach(states[1], 1, holder.pid, 2000)
    res = _blocked(cli, name, holder)
    assert [r["result"]["state"] for r in res["nodes"]] == ["blocked", "blocked"], res["nodes"]
    assert not any(alive(p) for p in old), "an old attempt outlived the restart's stop"
    b0, b1 = (res["nodes"][i]["result"]["blocked"] for i in (0, 1))
    assert [h["pid"] for h in b1["holders"]] == [holder.pid] and b0["holders"] == [], (b0, b1)
    assert b0["why"].startswith("waiting for the other nodes' GPUs: node 1 n1 (ssh://rw2): GPU 1"), b0
    rc, st = cli.json("status", name)
    assert [r["state"] for r in st["result"]["nodes"]] == ["blocked", "blocked"], st
    assert st["result"]["state"] == "blocked", st
    # node 0's GPU is free: it waits for node 1's all the same, no job forked on either node
    wait_for(lambda: _rec(tmp_path, 0, name, 2).get("blocked", {}).get("own_released_at"), 30, "node 0's own release")
    assert not _rec(tmp_path, 0, name, 2).get("job") and not _rec(tmp_path, 1, name, 2).get("job")
    text = cli.run("status", name).stdout  # each node says why it waits
    assert re.search(r"node 0 n0 \(ssh://rw1\): blocked \(GPUs released here; waiting for node 1 \(ssh://rw2\)\)",
                     text), text
    assert re.search(r"node 1 n1 \(ssh://rw2\): blocked \(node 1 n1 \(ssh://rw2\): GPU 1 still holds 2,000 MiB \(pid %d" % holder.pid, text), text
    holder.kill()
    holder.wait()
    freed = time.time()
    wait_for(lambda: all(_rec(tmp_path, i, name, 2).get("job") for i in (0, 1)), 60, "both nodes to start by themselves")
    for i in (0, 1):
        a = _rec(tmp_path, i, name, 2)
        assert a["started_at"] >= freed and a["blocked"]["released_at"] >= freed and "error" not in a, a
    # the two ranks rendezvous and talk: started together, as one run
    log1 = tmp_path / "node1" / "runs" / name / "log"
    wait_for(lambda: re.search(r"allreduce step 3 sum 6 nnodes 2", log1.read_text()), 60, "rank 1's all-reduce")
    rc, st = cli.json("status", name)
    assert rc == 0 and st["result"]["state"] == "running", st
    assert cli.json("stop", name)[0] == 0


def test_a_stop_while_blocked_cancels_every_node_and_nothing_starts(cli, tmp_path, mg):
    name, states, holder = mg
    assert cli.json("start", name, timeout=120)[0] == 0
    fakegpu.attach(states[1], 1, holder.pid, 2000)
    _blocked(cli, name, holder)
    shims = [_rec(tmp_path, i, name, 2)["shim"]["pid"] for i in (0, 1)]
    p = cli.run("stop", name)
    assert p.returncode == 0, p.stdout + p.stderr
    # each node's stop cancels its waiter, or finds it cancelled already by the other's (the
    # barrier tells every node: a multi-node attempt starts together or not at all)
    rows = [ln for ln in p.stdout.splitlines() if ln.startswith("  node ")]
    assert len(rows) == 2 and all("cancelled the blocked start of attempt 2 (it never ran)" in ln
                                  or ln.endswith("failed, attempt 2, verified dead") for ln in rows), p.stdout
    assert "cancelled the blocked start" in p.stdout, p.stdout
    for i in (0, 1):
        assert not alive(shims[i]), f"node {i}'s waiting shim outlived the stop"
    # again, the GPU still held: nothing of the run lives, but node 1's GPU is not released (exit 5)
    rc, doc = cli.json("stop", name, "--gpu-release-timeout", "1", timeout=120)
    assert rc == 5, doc
    n0, n1 = (doc["result"]["nodes"][i] for i in (0, 1))
    assert n0["ok"] and n0["result"]["verified_dead"] and n0["result"]["already_stopped"], n0
    assert not n1["ok"] and n1["result"]["verified_dead"] and str(holder.pid) in n1["error"]["message"], n1
    holder.kill()
    holder.wait()
    assert cli.json("stop", name, timeout=120)[0] == 0  # released: stopped, verified, on every node
    for i in (0, 1):  # released now: a cancelled attempt stays cancelled on every node
        a = _rec(tmp_path, i, name, 2)
        assert a["blocked"].get("cancelled_at") and not a.get("job") and a["error"].startswith("not started: "), a


def test_a_stop_of_one_node_while_blocked_cancels_every_node(cli, tmp_path, mg):
    name, states, holder = mg
    assert cli.json("start", name, timeout=120)[0] == 0
    fakegpu.attach(states[1], 1, holder.pid, 2000)
    _blocked(cli, name, holder)
    shim0 = _rec(tmp_path, 0, name, 2)["shim"]["pid"]
    p = cli.run("stop", name, "--on", "n1")
    assert p.returncode == 0 and "cancelled the blocked start of attempt 2 (it never ran)" in p.stdout, p.stdout
    # node 1 will never start, so node 0 does not wait for it: told by node 1, it is cancelled too
    wait_for(lambda: not alive(shim0), 20, "node 0's waiting shim to end")
    a0 = _rec(tmp_path, 0, name, 2)
    assert a0["error"] == "not started: node 1 (ssh://rw2) was stopped while every node waited for the GPUs", a0
    assert a0["blocked"]["cancelled_at"] and not a0.get("job"), a0
    holder.kill()
    holder.wait()
    rc, st = cli.json("status", name)
    assert [r["state"] for r in st["result"]["nodes"]] == ["failed", "failed"], st
    assert not any(_rec(tmp_path, i, name, 2).get("job") for i in (0, 1))


def test_a_stop_reaching_a_node_its_peer_already_cancelled_says_the_cancel_not_a_gpu_wait(cli, tmp_path, mg):
    """Which node a multi-node stop reaches first is a race: node 0's cancel is told to node
    1's waiting shim (the barrier), which ends before the stop's own call to node 1 arrives.
    That call's answer is the same cancel, at once, not a stop of an ended run that waits
    gpu_release_timeout for a GPU the attempt never held (CI saw exit 5 after 60 s). Made
    deterministic here: node 0's record gets the mark a stop writes there first (its waiting
    shim reads it, ends and tells node 1's), and the run's stop comes once node 1 is cancelled."""
    name, states, holder = mg
    assert cli.json("start", name, timeout=120)[0] == 0
    fakegpu.attach(states[1], 1, holder.pid, 2000)
    _blocked(cli, name, holder)
    run0 = tmp_path / "node0" / "runs" / name
    with open(run0 / "record.lock", "a") as lk:  # the record lock, as every writer of the record takes it
        fcntl.flock(lk, fcntl.LOCK_EX)
        att = json.loads((run0 / "attempts" / "2.json").read_text())
        att["stop_requested"] = {"at": time.time(), "pid": os.getpid(), "by": "cli"}  # as ops/stop.py marks it
        (run0 / "attempts" / "2.json.tmp").write_text(json.dumps(att))
        (run0 / "attempts" / "2.json.tmp").rename(run0 / "attempts" / "2.json")
    wait_for(lambda: (_rec(tmp_path, 1, name, 2).get("blocked") or {}).get("cancelled_at"), 20, "node 1's cancel, told by node 0")
    t0 = time.monotonic()
    p = cli.run("stop", name)
    assert p.returncode == 0, p.stdout + p.stderr
    rows = [ln for ln in p.stdout.splitlines() if ln.startswith("  node ")]
    assert len(rows) == 2 and all("cancelled the blocked start of attempt 2 (it never ran)" in ln for ln in rows), p.stdout
    assert time.monotonic() - t0 < 30, "no wait for a GPU the attempt never held"
    # answered once: a later stop is a stop of an ended run, and says the GPU still held (exit 5)
    rc, doc = cli.json("stop", name, "--gpu-release-timeout", "1", timeout=120)
    assert rc == 5 and str(holder.pid) in doc["result"]["nodes"][1]["error"]["message"], doc
