"""node_check for Ray (ops/nodes.py): the stop of a Ray job's processes on one node that is not the head, asked
by the CLI of this node's agent over its own ssh hop (transport/nodeagents.py) after the head's
agent named them `unchecked` (docs/ray.md, Nodes).

On this node: the run's marked processes (its driver's tree and escapees, when Ray placed the
driver here) and each pid Ray gave for this node that is a Ray worker of this node: a `ray::`
title, child of the raylet whose `--node_id=` is the node id Ray gave (a pid alone names no
process across machines; the raylet's node id ties it to this node). Each gets the stop signal,
the grace, then KILL, and its fate; a last look names any survivor. A listed pid that is no
such worker here is `not_found`: not signalled (Ray's word was about a process that has
ended, or the pid is another's now). And, where the head gives the job's id (`job_id`, its
start `job_since` in epoch seconds), what the job's workers here started out of every tree:
the head's rule (ray.job_id_processes) with this node's raylets (`--node_id=` of the listed
workers' nodes) and the detached actors the head names here spared, their possible orphans
held and named (`detached_processes`). Detached actors are never sent here: the head names
them."""

import os

from ..core import ray
from ..core.procfs import scan
from ..core.wire import bad_input
from ..proc.terminate import parse_signal, signal_name, terminate

LAST_LOOK_GRACE_S = 2.0


def check(req, home):
    marker, home_id = req.get("marker"), req.get("home_id")
    listed = req.get("workers") or []
    if not marker or not isinstance(listed, list):
        raise bad_input("node_check (ray) needs the run's marker and the job's workers on this node")
    sig = parse_signal(req.get("signal") or "TERM")
    att = {"marker": marker, "home_id": home_id}
    procs = scan()
    att["scope"] = _scope(req, listed, procs)
    members = _members(att, listed, procs)
    seen = {w["pid"]: dict(w) for w in listed if isinstance(w, dict) and isinstance(w.get("pid"), int)}
    fates = terminate(members, procs, sig, float(req.get("grace") or 0),
                      find_more=lambda: _members(att, listed, scan())) if members else []
    left = _members(att, listed, scan())
    late = terminate(left, scan(), sig, LAST_LOOK_GRACE_S) if left else []
    fates += late
    fate = {f["pid"]: f["fate"] for f in fates}
    for pid, w in seen.items():
        w["fate"] = fate.get(pid, "not_found")
    return {"node": os.uname().nodename, "signal": signal_name(sig), "processes": fates, "workers": list(seen.values()),
            "survivors": [f for f in fates if f["fate"] == "survived"], "outlived_stop": sorted(left),
            "detached_processes": ray.held_left(att["scope"], scan()),
            "job_id_processes": sorted(att["scope"]["found"]) if att["scope"] else []}


def _scope(req, listed, procs):
    """The job's RAY_JOB_ID scope on this node (ray.node_scope), or None where the head gave
    no job id (an older runward's CLI)."""
    if not req.get("job_id") or not isinstance(req.get("job_since"), (int, float)):
        return None
    ids = sorted({w.get("node_id") for w in listed if isinstance(w, dict) and isinstance(w.get("node_id"), str)})
    det = [d for d in req.get("detached") or [] if isinstance(d, dict) and d.get("node_id") in ids
           and isinstance(d.get("pid"), int)]
    ours = [w["pid"] for w in listed if isinstance(w, dict) and isinstance(w.get("pid"), int)]
    return ray.node_scope(req["job_id"], req["job_since"], ids, procs, [d["pid"] for d in det], ours,
                          [str(d.get("name")) for d in det])


def _members(att, listed, procs):
    """{pid: Proc} of the run here: its marked processes and the listed Ray workers of this node."""
    out = {p: procs[p] for p in ray.processes(att, procs)}
    out.update((p, procs[p]) for p in (ray.job_id_processes(att["scope"], procs) if att.get("scope") else ()))
    raylets = {}
    for w in listed:
        p = procs.get(w.get("pid")) if isinstance(w, dict) else None
        if p is None or p.dead or not p.cmdline_raw().startswith(ray.RAY_WORKER):
            continue
        parent = procs.get(p.ppid)
        if parent is None:
            continue
        if parent.pid not in raylets:
            raylets[parent.pid] = _node_id_of(parent)
        if raylets[parent.pid] == w.get("node_id") and w.get("start") in (None, p.start):
            w["start"] = p.start
            out[p.pid] = p
    return out


def _node_id_of(raylet):
    """The Ray node id a raylet serves, from its command line (`--node_id=ID`), else None."""
    for word in raylet.cmdline_raw().split(b"\0"):
        if word.startswith(b"--node_id="):
            return word[len(b"--node_id="):].decode("ascii", "replace")
    return None
