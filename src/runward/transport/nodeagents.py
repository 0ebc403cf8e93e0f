"""An engine job's stop finished by the agents on its other nodes (the engine's docs, Nodes): the
target's agent (on the engine's head) names the job's processes out of its sight `unchecked`
(pid, the engine's node id, the node's address) with what an agent there looks for
(`node_check`); here they are grouped by address, and the agent on each of those nodes,
reached by its own ssh hop (`ssh://USER@ADDRESS`, USER the head's; or the target's runward.toml
map `node_ssh = {ADDRESS = "ssh://..."}`), stops them with the engine's node op (its scheme's
agent op node_check, which runs the engine's agent/ops/NAMEnode.py: the stop signal, the
grace, KILL, each one's fate) -- all nodes at once, one agent
call each. A node whose agent cannot be reached leaves its processes `unchecked`, never dead:
exit 3 naming the hop. Survivors on any node: exit 5 naming node and pid.

api.stop calls it, and api.start for the attempt --replace stops: so every verb that stops
(stop, stop --all, restart, start --replace, the library's and MCP's) reaches the nodes."""

from __future__ import annotations

import time

from ..errors import HopFailed, NotVerified, RunwardError


def engine(target, result):
    """The scheme module of the engine whose stop RESULT is (its record's key, else the
    target's), when that engine has a node check (its scheme's NODE_CHECK)."""
    from ..targets import engine_of
    scheme = engine_of(result) or getattr(target, "engine", None)
    return scheme if getattr(scheme, "NODE_CHECK", False) else None


def unchecked(target, result) -> list:
    """The processes a stop left to other nodes' agents: the head's agent says what they look
    for (`node_check`), whether the target was written with the engine's scheme or the run's
    record named the launcher (a stop without --on)."""
    if not isinstance(result, dict) or not isinstance(result.get("node_check"), dict) or engine(target, result) is None:
        return []
    return [u for u in result.get("unchecked") or [] if isinstance(u, dict)]


def node_target(target, address: str | None):
    """The ssh target of the agent on the node at ADDRESS, or None where there is no way in."""
    from ..targets import parse_target
    mapped = (getattr(target, "engine_spec", None) or {}).get("node_ssh") or {}
    if address in mapped:
        text = mapped[address]
    elif address:
        user = target.hops[0].user if target.hops else None
        text = "ssh://" + (user + "@" if user else "") + (f"[{address}]" if ":" in address else address)
    else:
        return None
    return parse_target(text, home=target.home, python=target.python)


def stop(target, name: str, error: RunwardError) -> dict:
    """The head's stop (ERROR: its NotVerified, naming processes unchecked) completed on each
    node: the result, verified, or the error that says what is not."""
    from concurrent.futures import ThreadPoolExecutor  # here: api imports this module, a status needs none of it
    from . import agentcall as transport
    t0 = time.monotonic()
    res = error.result
    groups: dict = {}
    for u in unchecked(target, res):
        groups.setdefault(u.get("node_ip"), []).append(u)
    ask = res.get("node_check") or {}
    req = {"op": "node_check", "engine": engine(target, res).NAME, "marker": ask.get("marker"), "home_id": ask.get("home_id"),
           "signal": res.get("signal"), "grace": res.get("grace_s")}

    def one(address):
        t = node_target(target, address)
        if t is None:
            return address, None, None
        workers = [{k: u.get(k) for k in ("pid", "node_id", "kind")} for u in groups[address]]
        ids = {u.get("node_id") for u in groups[address]}
        by_id = {k: ask[k] for k in ("job_id", "job_since") if k in ask}  # matched by the job's id there too
        if by_id:
            by_id["detached"] = [d for d in ask.get("detached") or [] if d.get("node_id") in ids]
        try:
            return address, t, transport.call(t, dict(req, workers=workers, **by_id))
        except RunwardError as e:
            return address, t, e

    with ThreadPoolExecutor(max(1, min(8, len(groups)))) as ex:
        answers = list(ex.map(one, groups))
    res["nodes"], failed = [], []
    for address, t, out in answers:
        _merge(res, address, t, out, groups[address], failed)
    res["unchecked"] = [u for u in res["unchecked"] if u.get("fate") == "unchecked"]
    res["verified_dead"] = not res.get("survivors")
    res["nodes_s"] = round(time.monotonic() - t0, 3)  # the nodes' agents, all at once: one ssh round trip each
    return _verdict(target, name, res, error, failed)


def _merge(res, address, t, out, group, failed):
    """One node's answer into RES: its processes' fates (each with its node), its survivors,
    and a `nodes` row; an error or no way in leaves its processes unchecked."""
    row = {"node_ip": address, "via": str(t) if t is not None else None}
    if isinstance(out, dict):
        fate = {w.get("pid"): w.get("fate") for w in out.get("workers") or []}
        for u in group:
            u["fate"] = fate.get(u.get("pid"), "not_found") if u.get("pid") else "unchecked"
        by = {(w.get("node_id"), w.get("pid")): w["fate"] for w in group}
        for w in res.get("workers") or []:
            w["fate"] = by.get((w.get("node_id"), w.get("pid")), w.get("fate"))
        procs = [dict(p, node_ip=address) for p in out.get("processes") or []]
        res["processes"] = (res.get("processes") or []) + procs
        res["survivors"] = (res.get("survivors") or []) + [p for p in procs if p.get("fate") == "survived"]
        res["detached_processes"] = (res.get("detached_processes") or []) + [
            dict(p, node_ip=address) for p in out.get("detached_processes") or []]
        row.update(checked=True, processes=len(procs), survivors=sum(p.get("fate") == "survived" for p in procs))
        by_id = [p for p in procs if p.get("pid") in set(out.get("job_id_processes") or ())]
        if by_id:  # what the job's workers there started out of every tree, found by the job's id
            row["job_id_processes"] = by_id
    else:
        why = out.message if isinstance(out, RunwardError) else (
            f"no way in to node {address!r}: the engine gave no address" if address is None else "")
        row.update(checked=False, error=why)
        failed.append((address, t, out))
    res["nodes"].append(row)


def _verdict(target, name, res, error, failed):
    scheme = engine(target, res)
    job = f"{scheme.LABEL} job {res.get('submission_id')}"
    if res.get("survivors"):
        said = ", ".join(f"pid {s['pid']} on node {s.get('node_ip') or 'the head'}" for s in res["survivors"])
        raise NotVerified(f"{name}: {len(res['survivors'])} process(es) of {job} survived the stop: {said}",
                          "see each one's state on its node (D: stuck in the kernel); `runward ps --on NODE`",
                          result=res)
    if failed:
        address, t, out = failed[0]
        left = ", ".join(f"pid {u.get('pid')} on node {u.get('node_ip')}" for u in res["unchecked"])
        why = out.message if isinstance(out, RunwardError) else "no address to reach it by"
        raise HopFailed(f"{name}: the agent on node {address} ({t or 'no ssh target'}) was not reached: {why}; "
                        f"its process(es) of {job} are unchecked, not known dead: {left}",
                        f"reach the node by ssh, or map its address to an ssh target in runward.toml's {scheme.LABEL} "
                        f'target: node_ssh = {{"{address}" = "ssh://USER@HOST"}}; then `runward stop {name}` again',
                        hop=str(t) if t is not None else None, result=res)
    if scheme.keeps_job(res):
        raise error  # the engine keeps the job: the head's own verdict stands
    if "no_process_of_run_alive" not in res.get("verified", []):
        res["verified"] = list(res.get("verified") or []) + ["no_process_of_run_alive"]
    return res
