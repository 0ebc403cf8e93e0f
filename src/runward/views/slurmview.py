"""How a Slurm run's start, stop, status and history read (render.engine_view hands a
result or row with a "slurm" entry here)."""

from __future__ import annotations

ENGINE = "slurm"  # the key of its results and rows: targets/slurm.py's NAME


def job(d: dict):
    """The job's id a result, a started event or a status row says."""
    return d.get("job_id")


def _exit(ex: dict | None) -> str:
    ex = ex or {}
    return f"ExitCode {ex.get('exit_code', '?')}" + (f" (killed by {ex['signal']})" if ex.get("signal") else "")


def start(r: dict) -> str:
    job = f"Slurm job {r.get('job_id')} on partition {r['slurm'].get('partition')}"
    if r.get("pending"):
        lines = [f"submitted {r['name']} attempt {r['attempt']}: {job}, PENDING ({r.get('reason') or 'no reason given'})"
                 f" after {r.get('settle_s', 0):g}s; not running yet (`runward status {r['name']}` follows it)"]
    else:
        lines = [f"started {r['name']} attempt {r['attempt']}: {job}, {r.get('slurm_state')} on {r.get('nodes') or '?'},"
                 f" alive after {r.get('settle_s', 0):g}s settle"
                 + (f", ready: {r['ready_line']!r}" if r.get("ready_line") else "")]
        if r.get("node_pids"):
            lines.append(f"  on this node: pids {', '.join(map(str, r['node_pids']))} (by the marker)")
    if r.get("replaced"):
        old = r["replaced"]
        lines.insert(0, f"stopped attempt {old.get('attempt')} (Slurm job {old.get('job_id')}) first: "
                        f"{old.get('slurm_state')}, verified")
    lines.append(f"  log: {r['log']}  script: {r['slurm'].get('script')}")
    lines += ["    | " + ln for ln in r.get("first_lines") or []]
    return "\n".join(lines)


def stop(r: dict) -> str:
    head = f"{r['name']} attempt {r.get('attempt')} (Slurm job {r.get('job_id')})"
    if r.get("already_stopped"):
        lines = [f"{head}: already ended: {r.get('slurm_state')}, {_exit(r.get('exit'))}"]
    else:
        how = f"scancel --signal={r['signal']} --full" + (", then scancel after the grace" if r.get("escalated") else "")
        lines = [f"stopped {head}: {how}; left the queue as {r.get('slurm_state')}, {_exit(r.get('exit'))}"
                 f" ({r.get('stop_s', 0):.2f}s)"]
    if r.get("verified_dead"):
        lines.append("  no process of the run left on this node (verified by the marker)")
    for p in r.get("processes") or []:
        lines.append(f"  pid {p['pid']:>7}  {p['fate']:<20} escaped Slurm's cleanup  {p.get('cmd', '')[:60]}")
    return "\n".join(lines)


def status_line(r: dict) -> list[str]:
    head = f"{r['name']:<16} {r['state']:<9} attempt {r.get('attempt')}  Slurm job {r.get('job_id')}"
    head += f" {r.get('slurm_state') or '?'}"
    if r.get("state") == "pending":
        head += f" ({r.get('reason')})"
    elif r.get("exit"):
        head += f"  {_exit(r['exit'])}"
    elif r.get("nodes"):
        head += f" on {r['nodes']}"
    lines = [head + f"  [from {r.get('source')}]"]
    for ex in r.get("requeued") or []:  # ends recorded before Slurm requeued the same job id
        lines.append(f"  requeued by Slurm after an end recorded as {ex.get('state')}, {_exit(ex)}")
    if r.get("note"):
        lines.append(f"  note: {r['note']}")
    return lines


def history_where(r: dict) -> str:
    """history's word on the attempt's job: its id, and its end as Slurm recorded it."""
    s = r["slurm"]
    return (f"slurm job {s.get('job_id')}" + (f" {s['state']} ExitCode {s.get('exit_code')}" if s.get("state") else "")
            + (f" ({s['start']} .. {s['end']})" if s.get("start") and s.get("end") else ""))
