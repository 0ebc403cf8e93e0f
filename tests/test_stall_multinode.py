"""A stall and a failure across two ssh hosts of the testbed (agent/health/stall.py per node, runward/multinode/verdict.py
across them): a 2-node torchrun job (gloo, CPU) whose rank 1, alone on node 1, sleeps in its
loop while rank 0 on node 0 waits for it in all_reduce."""

from __future__ import annotations

import pytest

from conftest import wait_for
from helpers_multinode import _config, _torchrun, mn  # noqa: F401  (mn: the fixture)
from helpers_stall import HANG_JOB


def test_two_node_stall_names_the_node_whose_rank_stopped_first(cli, tmp_path, mn):  # noqa: F811
    torchrun = _torchrun()
    if torchrun is None:
        pytest.skip("torch is not installed (pip install -e '.[torch]')")
    _config(tmp_path, ["rw1", "rw2"], mn)
    script = tmp_path / "hang.py"
    script.write_text(HANG_JOB)
    rc, doc = cli.json("start", mn, "--stall-after", "5", "--ready", r"step 1 ", "--ready-timeout", "180",
                       "--stop-signal", "INT", "--grace", "10", "--env", "GLOO_SOCKET_IFNAME=eth0", "--",
                       torchrun, "--nnodes={nnodes}", "--node_rank={node_rank}", "--nproc_per_node=1",
                       "--master_addr={master_addr}", "--master_port={master_port}", str(script), timeout=300)
    assert rc == 0, doc

    def stalled():
        rc, d = cli.json("status", mn)
        return d["result"] if rc == 0 and (d["result"].get("stall") or {}).get("first") else None
    res = wait_for(stalled, 60, "the stall on both nodes")
    s = res["stall"]
    assert s["first"] == [1] and s["steps"] in ({0: 8, 1: 7}, {"0": 8, "1": 7}), s
    assert "stall: node 1 stopped first (its last step 7; the furthest node reached 8)" in cli.run("status", mn).stdout
    node1 = next(r for r in res["nodes"] if r["rank"] == 1)["run"]
    a = next(a for a in node1["health"]["alerts"] if a["kind"] == "stall")
    assert a["node"] == 1 and a["stall_after"] == 5 and a["t"] - a["since"] <= 10, a
    # the stacks of both nodes (py-spy brought to each, hash-checked): rank 0 waits in the
    # collective, rank 1 (node 1) sleeps in its loop -- the hung rank, in its frame
    rc, st = cli.json("stacks", mn, "--bring-py-spy", timeout=120)
    assert rc == 0, st
    frames = {p.get("rank"): (p.get("frame") or {}) for p in st["result"]["procs"] if p.get("rank") is not None}
    assert frames[0].get("name") == "all_reduce", (frames, st["result"]["summary"])
    assert frames[1].get("name") == "<module>" and "rank 1 in <module> (hang.py:6)" in st["result"]["summary"], (frames, st["result"]["summary"])
    assert cli.run("stop", mn).returncode == 0


def test_two_node_oom_on_node_1_is_the_root_and_node_0_its_cascade(cli, tmp_path, mn):  # noqa: F811
    """The real 2-node failure: rank 1 (node 1) raises a CUDA-OOM-like error, rank 0 (node 0)
    then fails in the collective; multi-node status names one root across nodes."""
    from helpers_attribution import OOM_JOB
    torchrun = _torchrun()
    if torchrun is None:
        pytest.skip("torch is not installed (pip install -e '.[torch]')")
    _config(tmp_path, ["rw1", "rw2"], mn)
    script = tmp_path / "oom.py"
    script.write_text(OOM_JOB)
    rc, doc = cli.json("start", mn, "--settle", "0.2", "--env", "GLOO_SOCKET_IFNAME=eth0", "--",
                       torchrun, "--nnodes={nnodes}", "--node_rank={node_rank}", "--nproc_per_node=1",
                       "--master_addr={master_addr}", "--master_port={master_port}", str(script), timeout=300)

    def judged():  # once no node runs: node 0's cascade may land a moment after node 1's OOM (CI, loaded)
        rc, d = cli.json("status", mn)
        res = d.get("result") or {}
        ended = res.get("nodes") and all(n.get("state") not in ("running", "starting") for n in res["nodes"])
        return res if rc in (0, 1) and res.get("attribution") and ended else None
    res = wait_for(judged, 120, "one failure verdict across the nodes, every node ended")
    v = res["attribution"]
    assert v["summary"].startswith("root cause: rank 1 (node 1) CUDA out of memory"), v
    assert "node 0" in v["summary"] and "root cause: rank 0" not in v["summary"], v  # node 0: an effect
    cli.run("stop", mn)
