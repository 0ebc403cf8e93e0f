"""How a Ray run's start, stop, status and history read (render.engine_view hands a result or
row with a "ray" entry here)."""

from __future__ import annotations

ENGINE = "ray"  # the key of its results and rows: targets/ray.py's NAME


def job(d: dict):
    """The job's id a result, a started event or a status row says (its submission id)."""
    return d.get("submission_id") or (d.get(ENGINE) or {}).get("submission_id")


def _exit(ex: dict | None) -> str:
    ex = ex or {}
    out = (f"driver_exit_code {ex['exit_code']}" if ex.get("exit_code") is not None else "no driver_exit_code") + (
        f" (killed by {ex['signal']})" if ex.get("signal") else "")
    return out + (f", stopped by {ex['stopped_by']}" if ex.get("stopped_by") else "")


def start(r: dict) -> str:
    d = r.get("driver") or {}
    lines = [f"started {r['name']} attempt {r['attempt']}: Ray job {r.get('submission_id')}, {r.get('ray_state')},"
             f" driver pid {d.get('pid')} alive after {r.get('settle_s', 0):g}s settle"
             + (f" (node {str(d['node_id'])[:12]})" if d.get("node_id") else "")
             + (f", ready: {r['ready_line']!r}" if r.get("ready_line") else "")]
    if r.get("replaced"):
        old = r["replaced"]
        lines.insert(0, f"stopped attempt {old.get('attempt')} (Ray job {old.get('submission_id')}) first: "
                        f"{old.get('ray_state')}, verified")
    if r.get("node_pids"):
        lines.append(f"  on this node: pids {', '.join(map(str, r['node_pids']))} (by the marker)")
    lines.append(f"  log: {r['log']}")
    lines += ["    | " + ln for ln in r.get("first_lines") or []]
    return "\n".join(lines)


def stop(r: dict) -> str:
    head = f"{r['name']} attempt {r.get('attempt')} (Ray job {r.get('submission_id')})"
    if r.get("already_stopped"):
        lines = [f"{head}: already ended: {r.get('ray_state')}, {_exit(r.get('exit'))}"]
    else:
        how = ", then Ray's stop" if r.get("ray_stop_sent") else ""
        lines = [f"stopped {head}: {r['signal']} to its processes here (grace {r.get('grace_s', 0):g}s){how}; "
                 f"Ray says {r.get('ray_state')}, {_exit(r.get('exit'))} ({r.get('stop_s', 0):.2f}s)"]
    if r.get("verified_dead"):
        lines.append(f"  no process of the run left on this node ({r.get('verified_by')})")
    for p in r.get("processes") or []:
        where = f" (node {p['node_ip']})" if p.get("node_ip") else ""
        lines.append(f"  pid {p['pid']:>7}  {p['fate']:<20} {p.get('cmd', '')[:60]}{where}")
    for n in r.get("nodes") or []:  # the agents on the other nodes the job touched (transport/nodeagents.py)
        lines.append(f"  node {n['node_ip']} via {n['via']}: " + (
            f"{n['processes']} process(es) of the job stopped by the agent there, {n['survivors']} survived"
            if n.get("checked") else f"NOT REACHED ({n.get('error')}): its processes unchecked"))
        if n.get("job_id_processes"):  # started by the job's Ray workers there, out of every tree
            lines.append("    by the job's RAY_JOB_ID there: " + ", ".join(
                f"pid {p['pid']} {p['fate']}" for p in n["job_id_processes"]))
    return "\n".join(lines + _workers(r))


def _node(w: dict) -> str:
    return f"node {str(w.get('node_id'))[:12]} ({w.get('node_ip')})"


def _workers(r: dict) -> list[str]:
    """The job's Ray workers (Ray's state API), those out of this agent's sight, and the
    detached actors Ray keeps by design, each named with how to end it."""
    here = [w for w in r.get("workers") or [] if w.get("here")]
    lines = [f"  Ray workers of the job on this node: {len(here)}, "
             + ", ".join(f"pid {w['pid']} {w['fate']}" for w in here)] if here else []
    by_id = r.get("job_id_processes") or []
    if by_id:  # started by the job's Ray workers, out of the driver's tree: found by RAY_JOB_ID
        lines.append(f"  by the job's RAY_JOB_ID {by_id[0]['ray_job_id']} (started by its Ray workers): "
                     + ", ".join(f"pid {p['pid']} {p['fate']}" for p in by_id))
    for w in r.get("unchecked") or []:
        lines.append(f"  UNCHECKED: {w['kind']} pid {w.get('pid')} on {_node(w)}: not this node, its /proc is out of "
                     "sight" + (f"; Ray says {w['ray_says']}" if w.get("ray_says") else ""))
    for w in r.get("detached_actors") or []:
        a = w.get("actor") or {}
        life = {True: "alive", False: "gone", None: "not checked (another node)"}[w.get("alive")]
        lines.append(f"  detached actor {a.get('name') or '(no name)'} ({a.get('class')}) pid {w['pid']} on {_node(w)}: "
                     f"{life}; Ray keeps it by design and runward leaves it: end it with {w['end_with']}")
    for p in r.get("detached_processes") or []:  # the job's id alone ties them to it, as it does the actor's
        where = f" on node {p['node_ip']}" if p.get("node_ip") else ""
        lines.append(f"  pid {p['pid']}{where} ({p['cmd'][:60]}), by the job's RAY_JOB_ID only: {p['why']}; "
                     f"runward leaves it: end it with {p['end_with']}")
    return lines


def status_line(r: dict) -> list[str]:
    head = f"{r['name']:<16} {r['state']:<9} attempt {r.get('attempt')}  Ray job {r.get('submission_id')}"
    head += f" {r.get('ray_state') or '?'}"
    if r.get("exit"):
        head += f"  {_exit(r['exit'])}"
    elif r.get("pid") and r.get("state") == "running":
        head += f"  driver pid {r['pid']}"
    lines = [head]
    drv = (r.get("ray") or {}).get("driver") or {}
    if r.get("exit") and drv.get("node_id"):
        lines.append(f"  driver pid {drv.get('pid')} on node {str(drv['node_id'])[:12]}")
    if (r.get("exit") or {}).get("message") and r["exit"].get("state") == "FAILED":
        lines.append(f"  Ray: {r['exit']['message'].splitlines()[0][:160]}")
    if r.get("survivors"):
        lines.append(f"  still alive here, outliving the driver: pids {', '.join(map(str, r['survivors']))}")
    if r.get("note"):
        lines.append(f"  note: {r['note']}")
    return lines


def history_where(r: dict) -> str:
    """history's word on the attempt's job: its id, and its end as Ray said it."""
    s = r["ray"]
    return (f"ray job {s.get('submission_id')}" + (f" {s['state']}" if s.get("state") else "")
            + (f" driver_exit_code {s['exit_code']}" if s.get("exit_code") is not None else "")
            + (f", stopped by {s['stopped_by']}" if s.get("stopped_by") else ""))
