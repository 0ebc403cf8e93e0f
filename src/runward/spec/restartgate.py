"""restart's GPU gate, the CLI's half (docs/supervision.md, "restart: blocked"): what a
restart's start carries, read from its stop's result (here, below api.py and multinode/,
which both restart). The verb's stop verified the old attempt dead but its GPUs still hold
memory after gpu_release_timeout: rather than exit with nothing started (the user left to
poll nvidia-smi) or start anyway (an OOM at once), the new attempt is handed to a waiter on
the target (agent/supervise/gatewait.py), which starts it by itself once the GPUs are
released."""

from __future__ import annotations

from ..errors import NotVerified


def from_stop(e: NotVerified) -> dict | None:
    """The gate for the start, from a stop that verified every process dead but not the GPUs
    released; None for any other failure (survivors: nothing may start)."""
    return from_result(e.result or {})


def from_result(res: dict) -> dict | None:
    """from_stop's gate, from a stop's result (a node's row of a multi-node stop)."""
    rel = res.get("gpu_release") or {}
    if not (res.get("verified_dead") and rel.get("checked") and rel.get("verified") is False and rel.get("gpus")):
        return None
    held = [g for g in rel["gpus"] if not g.get("released")]
    holders = [dict(h, gpu=g.get("index")) for g in held for h in g.get("holders") or ()]
    why = "; ".join(res.get("gpus_held") or [rel.get("message") or "GPUs not released"])
    if rel.get("timeout_s") is not None and "after" not in why:
        why += f" after {rel['timeout_s']:g}s"
    return {"gpus": [g["index"] for g in rel["gpus"]], "max_used_mib": rel.get("max_used_mib"),
            "timeout_s": rel.get("timeout_s"), "why": why, "holders": holders,
            "held": [{"index": g.get("index"), "used_mib": g.get("used_mib")} for g in held]}


def blocked(name: str, res: dict) -> NotVerified:
    """Exit 5: nothing verified alive yet; the waiter on the target is, and starts the run."""
    b = (res.get("blocked") or {})
    return NotVerified(f"{name}: blocked: {b.get('why')}; the run starts by itself when released; "
                       f"`runward stop {name}` cancels",
                       f"`runward status {name}` says blocked, then running; `runward gpus` names every holder",
                       result=res)


def node_gates(rows: list[dict]) -> list[dict] | None:
    """A multi-node restart's gates, one per node, from its stop's rows: None unless every
    node's stop verified its processes dead and the only failure is held GPUs. Every node
    gets one, its own GPUs free or not: no node starts until every node's are released
    (agent/supervise/gatebarrier.py), and the free ones say which node they wait for."""
    gates: list[dict | None] = []
    for r in rows:
        if r["ok"]:
            gates.append(None)
            continue
        g = from_result(r.get("result") or {}) if r["error"]["type"] == "NotVerified" else None
        if g is None:
            return None
        gates.append(dict(g, why=f"node {r['rank']} {r['target']}: {g['why']}"))
    held = [g for g in gates if g is not None]
    if not held:
        return None
    why = "; ".join(g["why"] for g in held)
    out = []
    for r, g in zip(rows, gates):
        if g is None:  # released here: the gate reads them once (free), then waits for the others
            rel = (r.get("result") or {}).get("gpu_release") or {}
            g = {"gpus": [x["index"] for x in rel.get("gpus") or ()], "max_used_mib": rel.get("max_used_mib"),
                 "timeout_s": rel.get("timeout_s"), "holders": [], "held": [],
                 "why": f"waiting for the other nodes' GPUs: {why}"}
        out.append(g)
    return out
