"""stop --checkpoint of a multi-node run (docs/multinode.md, "stop --checkpoint"): every node
gets the checkpoint signal and waits for its own line (or newer complete checkpoint), all at
once; only when every node has answered does the verified stop of every node begin. A
per-node "signal, wait, stop" would end one rank while another still saves, and a
collective save (every rank writes its shard, then a barrier) would then hang or tear."""

from __future__ import annotations

from ..transport import agentcall as transport
from ..transport.fanout import fan_out_runs
from ..errors import BadInput


def before_stop(nodes, name: str, checkpoint: dict, lock_timeout: float | None) -> list[dict]:
    """Each node's checkpoint step, in rank order. Refused on every node (bad input: nothing
    to wait for, a bad regex), nothing was signalled: BadInput, and nothing is stopped."""
    req = {"op": "checkpoint", "name": name, "checkpoint": checkpoint, "lock_timeout": lock_timeout}
    got = fan_out_runs([(str(i), t) for i, t in enumerate(nodes)], lambda _, t: transport.call(t, dict(req)))
    rows = []
    for i, (t, r) in enumerate(zip(nodes, got)):
        row = {"rank": i, "target": t.display(), "ok": r["ok"]}
        row.update({"result": r["result"]} if r["ok"] else {"error": r["error"]})
        rows.append(row)
    bad = [r for r in rows if not r["ok"] and r["error"].get("type") == "BadInput"]
    if bad and len(bad) == len([r for r in rows if not r["ok"] or not r["result"].get("skipped")]):
        e = bad[0]["error"]
        raise BadInput(f"{name}: stop --checkpoint refused on node {bad[0]['rank']}: {e.get('message')}; "
                       "nothing was signalled or stopped", e.get("hint") or "")
    return rows
