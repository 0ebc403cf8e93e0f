"""`runward stacks`, this side: ask every node of the run for its capture (agent/stacks.py),
merge them into one grouping ("ranks 0,1 in all_reduce (...); rank 2 in ..."), and render it.

Kept out of api.py (already long) so the stacks work merges cleanly; api.stacks calls here."""

from __future__ import annotations

from . import transport
from .agent.stackgroup import group, summary
from .errors import RunwardError


def capture(targets: list, name: str, *, native: bool = False, timeout: float = 10.0) -> dict:
    """Every node's capture (in parallel), merged: `nodes` (each target's own document, or
    its error), and `groups` / `summary` over every process read, each tagged with its node."""
    from concurrent.futures import ThreadPoolExecutor
    req = {"op": "stacks", "name": name, "native": native, "timeout": timeout}

    def one(t):
        try:
            return transport.call(t, dict(req))
        except RunwardError as e:
            if len(targets) == 1:
                raise
            return {"ok": False, "error": e.to_dict().get("type"), "hint": e.message, "procs": []}

    with ThreadPoolExecutor(max_workers=min(8, len(targets))) as ex:
        docs = list(ex.map(one, targets))
    if len(docs) == 1:
        docs[0]["target"] = str(targets[0])
        return docs[0]
    procs = []
    for i, (t, d) in enumerate(zip(targets, docs)):
        d["target"] = str(t)
        for p in d.get("procs") or ():
            procs.append(dict(p, node=d.get("node", i)))
    out = {"run": name, "nodes": docs, "procs": procs, "ok": any(d.get("ok") for d in docs),
           "took_s": max((d.get("took_s") or 0) for d in docs)}
    bad = [d for d in docs if not d.get("ok")]
    if not out["ok"] and bad:
        out.update(error=bad[0].get("error"), hint=bad[0].get("hint"))
    out["groups"] = group(procs)
    out["summary"] = summary(out) + "".join(
        "; node %s (%s): %s" % (d.get("node", i), d["target"], d.get("error"))
        for i, d in enumerate(docs) if not d.get("ok") and out["ok"])
    return out


def render(doc: dict) -> str:
    """The summary, then each process: pid, rank, its frame or why it was not read."""
    lines = [doc.get("summary") or "no stacks"]
    for p in doc.get("procs") or ():
        who = "rank %s" % p["rank"] if p.get("rank") is not None else p.get("comm") or "?"
        node = " node %s" % p["node"] if p.get("node") is not None and doc.get("nodes") else ""
        f = p.get("frame")
        where = ("%s (%s:%s)" % (f.get("name"), f.get("file"), f.get("line")) if f
                 else "not read: %s (%s)" % (p.get("error"), p.get("hint")))
        lines.append("  pid %-8s %-10s%s  %s" % (p.get("pid"), who, node, where))
    if doc.get("kept"):
        lines.append("kept: %s" % doc["kept"])
    return "\n".join(lines)
