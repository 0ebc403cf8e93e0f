"""history of a multi-node run (issue 30): every node's attempts, merged, said per node where
they differ. Two testbed hosts (rw1, rw2); rank 1 of the example job exits with code 7 at
step 5 (TRAIN_FAIL_RANK, TRAIN_EXIT_AT), so its end differs from node 0's (stopped by the
run's on_node_failure). Ground truth: each node's own log on its own home."""

from __future__ import annotations

import json
import re

from conftest import wait_for
from helpers_multinode import _config, _log, mn  # noqa: F401  (the fixture: ssh testbed, a name)


def test_history_of_two_nodes_says_where_the_nodes_differ(cli, tmp_path, mn):  # noqa: F811
    _config(tmp_path, ["rw1", "rw2"], mn)
    rc, doc = cli.json("start", mn, "--env", "TRAIN_FAIL_RANK=1", "--env", "TRAIN_EXIT_AT=5",
                       "--env", "TRAIN_EXIT_CODE=7")
    assert rc == 0, doc

    def ended():
        rc, d = cli.json("status", mn)
        return d if all(r.get("state") not in ("running", "starting") for r in d["result"]["nodes"]) else None
    wait_for(ended, timeout=90, what="both nodes to end")
    assert "exiting with code 7" in _log(tmp_path, 1, mn)
    p = cli.run("history", mn, "--json")
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)["result"]
    assert [n["ok"] for n in res["nodes"]] == [True, True], res["nodes"]
    (row,) = res["attempts"]
    assert row["rank"] == 0 and row["node"] == {"rank": 0, "nnodes": 2}, row
    assert row["exit"]["code"] != 7, row  # node 0 was stopped, not failed by itself
    n1 = row["nodes"]["1"]
    assert n1["exit"]["code"] == 7, n1
    steps1 = max(int(m.group(1)) for m in re.finditer(r"\bstep (\d+)\b", _log(tmp_path, 1, mn)))
    assert row["nodes"]["1"].get("steps", row["steps"]) == steps1, row
    text = cli.run("history", mn).stdout
    assert "[node 0]" in text and re.search(r"^    node 1: .*exited 7", text, re.M), text
