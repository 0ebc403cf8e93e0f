"""history of a multi-node run (docs/history.md): each node's history read in parallel (one
round trip per node), merged by attempt number. A row is node 0's (the first node that
answered), with `nodes` = {rank: {field: value}} for the fields where another node's attempt
differs (its exit, steps, throughput, loss, files...): what every node agrees on is said once.
A node that could not be read is named with its error, never taken for one that agrees."""

from __future__ import annotations

from .. import api
from . import nodes as multinode
from ..targets import Target

FIELDS = ("state", "exit", "ran_s", "steps", "throughput", "loss", "files", "command", "cwd", "changed", "error")


def history(nodes: list[Target], name: str) -> tuple[dict, int]:
    results = multinode._each(nodes, lambda _, t: api.history(t, name))
    rows, merged, code = [], {}, 0
    for rank, (t, r) in enumerate(zip(nodes, results)):
        rows.append({"rank": rank, "target": t.display(), "ok": r["ok"], **({} if r["ok"] else {"error": r["error"]})})
        if not r["ok"]:
            code = code or int(r["error"].get("exit_code") or 1)
            continue
        for att in r["result"].get("attempts") or []:
            base = merged.get(att["attempt"])
            if base is None:
                merged[att["attempt"]] = dict(att, nodes={}, rank=rank)
                continue
            diff = {k: att.get(k) for k in FIELDS if _differs(k, att.get(k), base.get(k))}
            if diff:
                base["nodes"][str(rank)] = diff
    out = [merged[n] for n in sorted(merged)]
    for row in out:
        if not row["nodes"]:
            del row["nodes"]
    return {"name": name, "attempts": out, "nodes": rows}, code


def _differs(key: str, a, b) -> bool:
    if key == "ran_s":  # nodes start and end within moments of each other: not a difference
        return a != b if a is None or b is None else abs(a - b) > 5
    if key == "exit" and a and b:  # the same end at another moment is the same end
        return (a.get("code"), a.get("signal")) != (b.get("code"), b.get("signal"))
    if key == "throughput" and a and b:
        return (a.get("metric"), a.get("median")) != (b.get("metric"), b.get("median"))
    return a != b

