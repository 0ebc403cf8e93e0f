"""One verdict across the nodes of a multi-node run (runward/multinode/verdict.py), from the nodes' own
attributions of real logs (tests/fixtures/logs, sources in test_attribution.py)."""

from __future__ import annotations

from helpers_attribution import attr

from runward.multinode.verdict import verdict
from runward.views.nodesview import render


def _row(rank: int, a: dict, **run) -> dict:
    return {"rank": rank, "target": f"node{rank}", "ok": True, "state": "exited", "run": dict(run, attribution=a)}


def _shift(a: dict, dt: float) -> dict:
    """The node's log as if written DT seconds later (the nodes' clocks agree)."""
    for s in [a.get("root")] + list(a.get("effects") or []) + list(a.get("signals") or []):
        if s and s.get("t") is not None:
            s["t"] += dt
    return a


def test_the_oom_on_node_1_is_the_root_and_node_0s_watchdog_timeout_its_effect():
    oom = attr("torchrun_gloo_oom.log")  # rank 1 CUDA OOM, rank 0 lost its peer
    hang = attr("nccl_watchdog.log")  # only timeouts: no root of its own
    _shift(hang, oom["root"]["t"] + 30 - hang["effects"][0]["t"])  # its watchdog fired 30 s after the OOM
    v = verdict([_row(0, hang), _row(1, oom)])
    assert v["root"]["node"] == 1 and v["root"]["rank"] == 1 and v["root"]["kind"] == "cuda_oom", v["root"]
    assert {(e["node"], e["rank"]) for e in v["effects"]} == {(0, 0), (0, 4), (1, 0)} and all(e["cascade"] for e in v["effects"])
    assert v["summary"].startswith("root cause: rank 1 (node 1) CUDA out of memory at 16:02:45; "), v["summary"]
    assert "rank 0 (node 0) then timed out in the collective" in v["summary"], v["summary"]
    res = {"name": "mn", "nnodes": 2, "state": "failed", "nodes": [_row(0, hang), _row(1, oom)], "attribution": v}
    assert v["summary"] in render(res, "status")


def test_the_earlier_of_two_nodes_own_failures_is_the_root():
    early, late = attr("torchrun_gloo_oom.log"), attr("torchrun_tee_gloo.log")
    late["root"]["t"] = early["root"]["t"] + 5  # node 0's own failure, 5 s after node 1's
    v = verdict([_row(0, late), _row(1, early)])
    assert v["root"]["node"] == 1 and v["how"] == "the earliest by time across nodes", v


def test_own_failures_without_times_are_not_ordered_across_nodes():
    a, b = attr("nccl_oom_cascade.log"), attr("cuda_oom.log")  # neither root carries a time
    v = verdict([_row(0, a), _row(1, b)])
    assert v["root"] is None and "cannot be ordered across nodes" in v["summary"], v
