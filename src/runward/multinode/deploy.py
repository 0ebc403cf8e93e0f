"""A multi-node run's files and restart (docs/multinode.md, "Deploy and restart"): its files
pushed to every node, each checked by sha256 on that node (a node is any target: each has a
filesystem of its own); and restart over every node, all or nothing: deploy everywhere
first, so a node whose deploy fails leaves every node's attempt untouched, then stop every
node (verified), then start every node (multinode.start: all or nothing, rolled back)."""

from __future__ import annotations

from .. import files
from . import nodes as multinode
from ..errors import EXIT_OK
from ..spec import restartgate
from ..targets import Target
from ..transport.fanout import fan_out_runs, worst_code


def deploy(nodes: list[Target], name: str, specs: list[str], *, base: str | None = None, **opts) -> tuple[dict, int]:
    """specs pushed to every node in parallel, each verified there: (result, exit code). A
    node's failure is its own row; the exit code is the worst node's."""
    results = fan_out_runs([(str(i), t) for i, t in enumerate(nodes)],
                               lambda _, t: files.push(t, specs, run=name, base=base, progress=False, **opts))
    rows = [{"rank": i, "target": t.display(), **_outcome(r)} for i, (t, r) in enumerate(zip(nodes, results))]
    res = {"name": name, "nnodes": len(nodes), "nodes": rows, "dry_run": bool(opts.get("dry_run"))}
    failed = [r for r in rows if not r["ok"]]
    if failed:
        res["message"] = "deploy failed on " + "; ".join(
            f"node {r['rank']} ({r['target']}): {r['error']['message']}" for r in failed)
    else:
        res["verified"] = ["sha256_on_every_node"]
    return res, worst_code(rows)


def _outcome(r: dict) -> dict:
    return {"ok": True, "result": r["result"]} if r["ok"] else {"ok": False, "error": r["error"]}


def restart(nodes: list[Target], name: str, kw: dict, *, specs: list[str] | None, base: str | None,
            stop_kw: dict, start_kw: dict) -> tuple[dict, int]:
    """deploy (when specs), stop, start over every node; each step on every node before the
    next, and a step that fails on any node ends the chain: (result with its steps, code)."""
    res: dict = {"name": name, "nnodes": len(nodes), "steps": [], "nodes": [
        {"rank": i, "target": t.display(), "ok": False} for i, t in enumerate(nodes)]}
    if specs:
        dep, code = deploy(nodes, name, specs, base=base)
        res["steps"].append({"step": "deploy", "result": dep})
        if code != EXIT_OK:
            res.update(state="unchanged", failed_step="deploy", nodes=dep["nodes"], message=f"restart stopped at step 'deploy': "
                       f"{dep['message']}; nothing was stopped or started")
            return res, code
    stop, code = multinode.stop(nodes, name, **stop_kw)
    res["steps"].append({"step": "stop", "result": stop})
    gates = restartgate.node_gates(stop["nodes"]) if code != EXIT_OK and stop_kw.get("gpu_gate") else None
    if code != EXIT_OK and gates is None:
        res.update(state="stop not verified", failed_step="stop", nodes=stop["nodes"],
                   message="restart stopped at step 'stop': not every node's stop was verified; nothing was started")
        return res, code
    start, code = multinode.start(nodes, name, kw, gates=gates, **start_kw)
    res["steps"].append({"step": "start", "result": start})
    res.update({k: start[k] for k in ("state", "nodes", "run_id", "master_addr", "master_port") if k in start})
    if start.get("state") == "blocked":  # every node's processes dead, some node's GPUs held: all wait
        res.update(message=start["message"], verified=["every_node_processes_dead"])
        return res, code
    if code != EXIT_OK:
        res.update(failed_step="start", message="restart failed at step 'start': "
                   + (start.get("message") or "a node did not start") + " (the old attempts were stopped)")
        return res, code
    res["verified"] = [*(["sha256_on_every_node"] if specs else []), "every_node_dead", "every_node_alive_after_settle"]
    return res, EXIT_OK
