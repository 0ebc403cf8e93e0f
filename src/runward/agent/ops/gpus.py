"""gpus and nspid: who holds which GPU, and, on a container's host, the namespaced pids
the CLI needs to map nvidia-smi's host pids to the container's processes."""

import os

from ..proc import gpus as gpu
from ..core.procfs import HOME_MARKER, MARKER, in_container, in_host_pidns, marker_run, pid_namespace, read_proc, read_text


def gpus(req, home):
    snap = gpu.snapshot()
    view = gpu.GpuView(home)
    table, stray = view.table(snap)
    res = {"host": os.uname().nodename, "nvidia_smi": snap["nvidia_smi"], "in_container": in_container(),
           "pids_are_local": view.direct, "pidns": pid_namespace(), "gpus": table,
           "home_id": home.id if home is not None else None,
           "mapping": "direct" if view.direct else "memory", "time": snap["at"]}
    if stray:
        res["unattributed_processes"] = stray
    if snap.get("note"):
        res["note"] = snap["note"]
    return res


def nspid(req, home):
    """On a container's host: for host pids nvidia-smi reported inside the container, the
    NSpid line of /proc/PID/status (the pid in each nested namespace, innermost last), the
    pid namespace, and the run marker. The CLI matches them to the container's namespace."""
    out = {}
    for pid in req.get("pids") or ():
        if not isinstance(pid, int) or pid <= 0:
            continue
        p = read_proc(pid)
        if p is None or p.dead:
            out[str(pid)] = None
            continue
        ns = None
        for ln in (read_text("/proc/%d/status" % pid, "") or "").splitlines():
            if ln.startswith("NSpid:"):
                ns = [int(x) for x in ln.split()[1:] if x.isdigit()]
        name, n = marker_run(p.env(MARKER))
        out[str(pid)] = {"nspid": ns, "pidns": pid_namespace(pid), "state": p.state, "start": p.start,
                         "run": name, "attempt": n, "home_id": p.env(HOME_MARKER) if name else None,
                         "cmd": p.describe()["cmd"][:200]}
    return {"host": os.uname().nodename, "pids": out, "pids_are_local": in_host_pidns()}
