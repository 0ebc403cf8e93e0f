"""One failure verdict across the nodes of a multi-node run (docs/diagnosis.md): each node's
agent attributes its own log (agent/health/attribution.py); here the nodes' signals are ordered by
their times, so "root cause: rank 2 (node 1) CUDA out of memory at 12:01:03; node 0: rank 0
then lost its peer (effects)". Nothing is made up: candidates that carry no time cannot be
ordered across nodes, and the verdict then says so instead of picking one."""

from __future__ import annotations


def _who(s: dict) -> str:
    """As agent/health/attribution.py says a rank (the CLI side keeps to the agent's boot and logmetrics)."""
    rank, node = s.get("rank"), s.get("node")
    if rank is None:
        return "a rank not named in the log" if node is None else f"node {node}"
    who = f"{'local rank' if s.get('local_rank') else 'rank'} {rank}"
    return who if node is None else f"{who} (node {node})"


def _clock(t) -> str:
    import time
    return "" if t is None else " at " + time.strftime("%H:%M:%S", time.localtime(t))


def _nodes(rows: list[dict]) -> dict[int, dict]:
    """{node rank: its attribution} for the nodes whose status carries one."""
    out = {}
    for r in rows:
        a = (r.get("run") or {}).get("attribution")
        if isinstance(a, dict) and (a.get("root") or a.get("effects")):
            out[r["rank"]] = a
    return out


def _root(cands: list[dict]) -> tuple[dict | None, str]:
    """(the first of the nodes' own failures, how it was chosen)."""
    if len(cands) == 1:
        return cands[0], "the only node whose log shows a failure of its own"
    timed = [c for c in cands if c.get("t") is not None]
    if len(timed) < len(cands):
        return None, ("nodes %s each show a failure of their own and not all carry a time: they cannot be "
                      "ordered across nodes" % ",".join(str(c["node"]) for c in cands))
    return min(timed, key=lambda c: c["t"]), "the earliest by time across nodes"


def verdict(rows: list[dict]) -> dict | None:
    """The run's attribution across nodes, or None when no node attributes a failure."""
    nodes = _nodes(rows)
    if not nodes:
        return None
    cands = [dict(a["root"], node=n) for n, a in sorted(nodes.items()) if a.get("root")]
    root, how = _root(cands)
    effects = []
    for n, a in sorted(nodes.items()):
        mine = [dict(s, node=n) for s in ([a["root"]] if a.get("root") else []) + list(a.get("effects") or [])]
        for s in mine:
            if root is not None and s.get("node") == root["node"] and s.get("line_no") == root.get("line_no"):
                continue
            if root is not None and s.get("t") is not None and root.get("t") is not None and s["t"] < root["t"]:
                continue  # before the root: not its effect (kept in that node's own attribution)
            effects.append(dict(s, cascade=bool(s.get("cascade")) or root is not None))
    peers = [r["rank"] for r in rows if (r.get("run") or {}).get("peer_stop")]
    out = {"root": root, "effects": effects, "how": how, "stopped_by_peers": peers}
    out["summary"] = summary(out)
    return out


def summary(v: dict) -> str:
    root = v.get("root")
    if root is None:
        head = "no single root cause across nodes: " + v["how"]
    else:
        head = "root cause: %s %s%s" % (_who(root), root["what"], _clock(root.get("t")))
    parts = []
    for e in v.get("effects") or ():
        if e.get("rank") is not None or e.get("node") is not None:
            parts.append("%s then %s%s" % (_who(e), e["what"], _clock(e.get("t"))))
    if parts and root is not None:
        head += "; " + "; ".join(parts) + " (effects)"
    if v.get("stopped_by_peers") and root is not None:
        head += "; node%s %s stopped by the others" % ("s" if len(v["stopped_by_peers"]) > 1 else "",
                                                       ",".join(map(str, v["stopped_by_peers"])))
    return head


def stall_verdict(rows: list[dict]) -> dict | None:
    """A multi-node run's stall across nodes: each live node judges its own log (agent/health/stall.py);
    the node whose step is behind the others' stopped first. None when no node has stalled."""
    stalled = [r for r in rows if any(a.get("kind") == "stall" for a in _alerts(r))]
    if not stalled:
        return None
    steps = {r["rank"]: ((r.get("run") or {}).get("stall") or {}).get("step") for r in rows}
    known = {n: s for n, s in steps.items() if s is not None}
    out = {"nodes_stalled": [r["rank"] for r in stalled], "steps": steps, "first": None}
    if len(set(known.values())) > 1:
        low = min(known.values())
        out["first"] = sorted(n for n, s in known.items() if s == low)
        out["summary"] = "stall: node%s %s stopped first (its last step %s; the furthest node reached %s)" % (
            "s" if len(out["first"]) > 1 else "", ",".join(map(str, out["first"])), low, max(known.values()))
    else:
        out["summary"] = "stall on node%s %s; every node's log stopped at the same step" % (
            "s" if len(stalled) > 1 else "", ",".join(str(r["rank"]) for r in stalled))
    return out


def _alerts(row: dict) -> list[dict]:
    return (((row.get("run") or {}).get("health") or {}).get("alerts")) or []
