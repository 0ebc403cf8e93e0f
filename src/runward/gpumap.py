"""GPUs and who holds them (api.py's split, by concern): the target's GPUs read with each
process mapped to its run, through containers (a host pid matched by NSpid on the host hop,
or per-GPU memory, and which was used), and the holders named when a start or stop finds
GPUs still held."""

from __future__ import annotations

from .transport import agentcall as transport
from .errors import BadInput, RunwardError
from .targets import Target


def held_line(g: dict, verb: str = "still holds") -> str:
    from .agent.core import boot  # the message the agent prints too, shared on purpose
    return boot.held_message(g, verb)


def gpus(target: Target, *, mapping: str = "auto") -> dict:
    """Every GPU on the target with the processes on it, each mapped to its run. Inside a
    container nvidia-smi's pids are the host's: with a host hop before the container (ssh,
    or this machine for a container hop alone) they are matched through the host's
    /proc/PID/status NSpid line (mapping "nspid"); otherwise, or with mapping="memory",
    the agent's attribution by memory stands (mapping "memory"). Where the pids are the
    target's own the agent reads the run marker directly (mapping "direct")."""
    if mapping not in ("auto", "memory"):
        raise BadInput(f"invalid --map {mapping!r}", "use auto or memory")
    res = transport.call(target, {"op": "gpus"})
    if res.get("pids_are_local") or mapping == "memory":
        return res
    procs = [p for g in res.get("gpus") or () for p in g.get("processes") or ()]
    procs += res.get("unattributed_processes") or []
    if not target.hops or target.host_prefix().hops == target.hops:
        res["mapping_note"] = ("nvidia-smi's pids here are the host's and this target has no host hop to read "
                               "them on: processes are attributed by memory")
        return res
    if procs:
        try:
            _map_host_pids(target, procs, res.get("pidns"), res.get("home_id"))
        except RunwardError as e:
            res["mapping_note"] = (f"could not read the host's /proc through {target.host_prefix()}: "
                                   f"{e.message}; processes are attributed by memory")
            return res
    res["mapping"] = "nspid"
    res["mapping_host"] = str(target.host_prefix())
    return res


def _map_host_pids(target: Target, procs: list[dict], pidns: str | None, home_id: str | None = None) -> None:
    """One call to the container's host: the NSpid line, pid namespace and run marker of each
    host pid; a process is the target's when its pid namespace is the target's."""
    pids = sorted({p["pid"] for p in procs if isinstance(p.get("pid"), int)})
    if not pids:
        return
    info = transport.call(target.host_prefix(), {"op": "nspid", "pids": pids}).get("pids") or {}
    for p in procs:
        if not isinstance(p.get("pid"), int):
            continue
        i = info.get(str(p["pid"]))
        p["host_pid"] = p["pid"]
        p.pop("pid_is_host_pid", None)
        p.pop("candidates", None)
        p.update(run=None, attempt=None, mapped_by="nspid")
        if i is None:
            p.update(pid=None, note="no such pid on the host (it exited since nvidia-smi listed it)")
            continue
        p["state"], p["cmd"] = i.get("state"), i.get("cmd")
        if pidns is None or i.get("pidns") == pidns:
            p["pid"] = (i.get("nspid") or [None])[-1]
            if i.get("run") and home_id and i.get("home_id") and i["home_id"] != home_id:
                p.update(other_home_run=f"{i['run']}.{i['attempt']}",
                         note=f"a run of another runward home in this container (RUNWARD_HOME_ID {i['home_id']})")
            else:
                p["run"], p["attempt"] = i.get("run"), i.get("attempt")
            if pidns is None:
                p["note"] = "the target's pid namespace could not be read: assumed to be the innermost"
        else:
            p.update(pid=None, outside_target=True,
                     note="not in this container: a process of the host or of another container"
                     + (f" (its run marker: {i['run']}.{i['attempt']})" if i.get("run") else ""))


def name_holders(target: Target, states: list[dict], pidns: str | None, home_id: str | None) -> bool:
    """Best effort: name the holders of a GPU through the host (stop/start answers inside a
    container). False when there is no host hop or it could not be read."""
    if not target.hops or target.host_prefix().hops == target.hops:
        return False
    holders = [h for s in states for h in s.get("holders") or ()]
    try:
        _map_host_pids(target, holders, pidns, home_id)
    except RunwardError:
        return False
    return True
