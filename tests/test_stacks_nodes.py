"""`runward stacks` of a multi-node run (docs/multinode.md) on real testbed hosts rw1 and rw2:
every node's processes in one summary, named by rank, whether the nodes come from
runward.toml's [runs.NAME] nodes or from the record of the one node --on names (as status
finds them). The hosts share this machine's files, so each node has a home of its own, and
each gets runward's own py-spy (--bring-py-spy: their /usr/bin/python3 has none beside it)."""

from __future__ import annotations

import os
import signal
import uuid

import pytest

import testbed
from conftest import alive, marked
from helpers_stacks import needs_spy

# RANK in the process's own environment (what stacks reads from /proc/PID/environ): the job
# re-executes itself with it, as torchrun's workers are started with theirs
JOB = """\
import os, sys, time
if "RANK" not in os.environ:
    os.execve(sys.executable, [sys.executable, __file__, sys.argv[1]], dict(os.environ, RANK=sys.argv[1]))

def rank0_blocks_in_the_collective():
    print("ready", flush=True)
    while True:
        time.sleep(0.5)

def rank1_sleeps_in_its_loop():
    print("ready", flush=True)
    while True:
        time.sleep(0.5)

(rank0_blocks_in_the_collective if sys.argv[1] == "0" else rank1_sleeps_in_its_loop)()
"""


@pytest.fixture
def two(cli, tmp_path):
    tb = testbed.require("ssh")
    cli.env.update(RUNWARD_SSH_CONFIG=tb["ssh_config"])
    name = "stkmn" + uuid.uuid4().hex[:6]
    (tmp_path / "job.py").write_text(JOB)
    (tmp_path / "work" / "runward.toml").write_text(
        f'[targets.n0]\non = "ssh://rw1"\nhome = "{tmp_path}/node0"\n\n'
        f'[targets.n1]\non = "ssh://rw2"\nhome = "{tmp_path}/node1"\n\n'
        f'[runs.{name}]\nnodes = ["n0", "n1"]\n'
        f'command = ["python3", "{tmp_path}/job.py", "{{node_rank}}"]\nsettle = 0.3\n')
    yield name
    cli.run("stop", name, "--grace", "2")
    for pid, start in marked(name + ".").items():  # whatever a failed assertion left, by pid + start
        if alive(pid, start):
            os.kill(pid, signal.SIGKILL)


@needs_spy
def test_every_node_of_a_multi_node_run_in_one_summary(cli, two):
    rc, doc = cli.json("start", two, "--ready", "^ready", "--ready-timeout", "60", timeout=120)
    assert rc == 0, doc
    for extra in ([], ["--on", "n1"]):  # the nodes from runward.toml; from node 1's record
        rc, doc = cli.json("stacks", two, "--bring-py-spy", *extra)
        assert rc == 0, doc
        res = doc["result"]
        s = res["summary"]
        assert "rank 0 in rank0_blocks_in_the_collective (job.py:" in s, s
        assert "rank 1 in rank1_sleeps_in_its_loop (job.py:" in s, s
        assert sorted(p["node"] for p in res["procs"] if p.get("frame")) == [0, 1], res["procs"]
        assert [n["target"] for n in res["nodes"]] == ["ssh://rw1", "ssh://rw2"], res["nodes"]
        assert all(n.get("kept") for n in res["nodes"]), res["nodes"]  # kept on each node
