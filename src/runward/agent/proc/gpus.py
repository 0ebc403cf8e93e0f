"""GPUs: who holds which GPU (nvidia-smi), wait until free before a start, verified release
after a stop. nvidia-smi has no event API we can use from the stdlib: NVML's event sets
(reachable only through ctypes on libnvidia-ml) report Xid errors and clock changes, never
a process exit or memory being freed. So every wait below polls nvidia-smi every POLL_S,
bounded by its timeout, and ends with an answer, never a hang."""

import time

from ..core.boot import held_message
from ..core.launchers import engine_alive, engine_workers
from ..core.procfs import (HOME_MARKER, MARKER, boot_id, in_host_pidns, marker_run, pid_namespace, protected, read_proc,
                     scan)
from .runs import attempt_state, members
from ..core.store import RunStore
from ..core.wire import AgentFailure, bad_input

GPU_QUERY = "--query-gpu=index,uuid,name,memory.used,memory.total,utilization.gpu"
APP_QUERY = "--query-compute-apps=gpu_uuid,pid,used_memory"
FORMAT = "--format=csv,noheader,nounits"
GPU_COLS = ("index", "uuid", "name", "memory.used", "memory.total", "utilization.gpu")
APP_COLS = ("gpu_uuid", "pid", "used_memory")
ALIASES = {"used_gpu_memory": "used_memory", "gpu_name": "name"}
TIMEOUT = 15.0
POLL_S = 0.5
MAX_USED_MIB = 1024.0     # at most this much used, and no compute process: the GPU is free
RELEASE_TIMEOUT = 60.0
WAIT_FREE_TIMEOUT = 300.0  # start --wait-gpus-free's bound, when --gpu-wait-timeout is not given
_CACHE = []               # one snapshot per agent process, for status (many runs, one call)


def failure(code, text, exe):
    text = (text or "").strip() or "(no output)"
    if code == 9 or "couldn't communicate with the NVIDIA driver" in text:
        hint = ("the NVIDIA driver is not loaded or not reachable: check `lsmod | grep nvidia` and dmesg "
                "on the host; inside a container, check that the GPUs are passed through")
    elif "version mismatch" in text:
        hint = "the driver was upgraded without a reboot: reboot the host, or reload the nvidia kernel modules"
    elif "Failed to initialize NVML" in text:
        hint = ("NVML could not start: check dmesg; inside a container the device nodes or the driver "
                "libraries may be missing (nvidia-container-toolkit)")
    else:
        hint = "run nvidia-smi by hand on the target: runward exec --on TARGET -- nvidia-smi"
    return AgentFailure("GpuUnavailable", "nvidia-smi failed (exit %s): %s" % (code, text), hint,
                        nvidia_smi=exe, exit_status=code, output=text[:2000])


def query(args, timeout=TIMEOUT):
    """(path, exit status, stdout, stderr) of one nvidia-smi call; path None if there is none."""
    return queries([args], timeout)[0]


def queries(arg_lists, timeout=TIMEOUT):
    """query() of each argument list, the calls run at once: a snapshot's two (GPUs, compute
    apps) cost one call's wall time, not two. nvidia-smi takes tens of ms (more without
    persistence mode), and the GPU gate reads one snapshot before every restart."""
    import subprocess
    from ..core.minimal import which  # shutil's, where python3-minimal lacks shutil
    exe = which("nvidia-smi")
    if exe is None:
        return [(None, None, "", "")] * len(arg_lists)
    procs = []
    try:
        for args in arg_lists:
            procs.append(subprocess.Popen([exe] + list(args), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE))
        deadline = time.monotonic() + timeout
        return [_answer(p, exe, max(0.0, deadline - time.monotonic()), timeout) for p in procs]
    except OSError as e:
        raise AgentFailure("GpuUnavailable", "nvidia-smi could not be run: %s" % e,
                           "check that %s is an executable nvidia-smi" % exe, nvidia_smi=exe)
    finally:
        for p in procs:  # one that did not answer in time (or was never read): killed, reaped
            if p.returncode is None:
                p.kill()
                p.wait()


def _answer(p, exe, left, timeout):
    import subprocess
    try:
        out, err = p.communicate(timeout=left)
    except subprocess.TimeoutExpired:
        raise AgentFailure("GpuUnavailable", "nvidia-smi did not answer within %gs" % timeout,
                           "a hung driver or a GPU in a bad state: check dmesg for Xid errors, run nvidia-smi by hand",
                           nvidia_smi=exe)
    return exe, p.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")


def cell(text, number=True):
    """One CSV cell -> (value, raw). The sentinels [N/A], [Not Supported] and [Insufficient
    Permissions] (printed with their brackets whatever the format) become None, raw kept."""
    t = (text or "").strip()
    if t.startswith("[") and t.endswith("]"):
        return None, t
    if not number:
        return t, None
    try:
        f = float(t.split()[0])  # "81559 MiB" when units are on, "81559" with nounits
    except (ValueError, IndexError):
        return None, t
    return (int(f) if f == int(f) else f), None


def rows(text, cols):
    """CSV lines -> dicts keyed by column. A header line (a replayed capture queried with
    --format=csv) gives the columns by name; without one they are in query order. Cells are
    split on ", " (nvidia-smi never quotes); a name holding ", " is joined back."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    names = list(cols)
    if lines:
        head = [c.strip().split(" [")[0] for c in lines[0].split(", ")]
        head = [ALIASES.get(c, c) for c in head]
        if cols[0] in head:
            names, lines = head, lines[1:]
    out = []
    for ln in lines:
        cells = ln.split(", ")
        if len(cells) > len(names) and "name" in names:
            i, extra = names.index("name"), len(cells) - len(names)
            cells[i:i + extra + 1] = [", ".join(cells[i:i + extra + 1])]
        if len(cells) != len(names) or any(c not in names for c in cols):
            raise AgentFailure("GpuUnavailable", "unexpected nvidia-smi output line: %r" % ln[:200],
                               "run nvidia-smi by hand on the target and report its output")
        out.append(dict(zip(names, cells)))
    return out


def _cells(row, spec):
    """{key: value} from a row by (key, column, numeric), and the raw text of unreadable cells."""
    out, raw = {}, {}
    for key, col, num in spec:
        out[key], r_ = cell(row[col], num)
        if r_ is not None:
            raw[key] = r_
    if raw:
        out["raw"] = raw
    return out


_GPU_CELLS = (("index", "index", True), ("uuid", "uuid", False), ("name", "name", False),
              ("used_mib", "memory.used", True), ("total_mib", "memory.total", True),
              ("utilization_pct", "utilization.gpu", True))
_APP_CELLS = (("pid", "pid", True), ("used_mib", "used_memory", True))


def snapshot(cached=False):
    """What nvidia-smi says now: {"nvidia_smi": path or None, "gpus": [...], "apps": [...],
    "note"}. No nvidia-smi, or no devices (exit 6), is an answer with a note; any other
    failure raises GpuUnavailable with the tool's own message."""
    if cached and _CACHE:
        return _CACHE[0]
    (exe, code, out, err), app = queries([[GPU_QUERY, FORMAT], [APP_QUERY, FORMAT]])
    snap = {"nvidia_smi": exe, "gpus": [], "apps": [], "at": time.time()}
    if exe is None:
        snap["note"] = "no nvidia-smi on this target"
    elif code == 6 or (code != 0 and "No devices were found" in out):
        snap["note"] = "nvidia-smi found no GPU here: %s" % (out.strip() or "No devices were found")
    elif code != 0:
        raise failure(code, out + err, exe)
    else:
        snap["gpus"] = [_cells(r, _GPU_CELLS) for r in rows(out, GPU_COLS)]
        exe, code, out, err = app
        if code != 0:
            raise failure(code, out + err, exe)
        for r in rows(out, APP_COLS):
            a = {"gpu_uuid": r["gpu_uuid"].strip()}
            a.update(_cells(r, _APP_CELLS))
            snap["apps"].append(a)
    if cached:
        _CACHE.append(snap)
    return snap


class GpuView(object):
    """nvidia-smi's processes, mapped to runs. Direct where its pids are ours (read the marker
    in /proc/PID/environ, else membership of a running run); inside a container the pids are
    the host's, so a process is attributed by memory: to the one running run here recorded on
    that GPU (the CLI then maps host pids exactly, through the host's NSpid lines)."""

    def __init__(self, home):
        self.home = home
        self.direct = in_host_pidns()
        self._procs = None
        self._members = None
        self._claims = None

    def procs(self):
        if self._procs is None:
            self._procs = scan()
        return self._procs

    def _runs(self):
        """[(name, attempt record)] of the runs here whose latest attempt is alive."""
        out = []
        if self.home is None:
            return out
        procs, bid = self.procs(), boot_id()
        for nm in self.home.run_names():
            store = RunStore(self.home, nm)
            att = store.latest() if store.exists() else None
            eng = engine_alive(att) if att else None  # an engine's attempt has no shim: its launcher says
            if att and (eng if eng is not None else attempt_state(att, procs, bid) in ("running", "orphaned", "starting")):
                out.append((nm, att))
        return out

    def member_of(self, pid):
        if self._members is None:
            self._members = {}
            procs = self.procs()
            prot = protected(procs)
            for nm, att in self._runs():
                for m in list(members(nm, att, procs, prot)) + list(engine_workers(att)):
                    self._members[m] = (nm, att.get("attempt"))
        return self._members.get(pid, (None, None))

    def claims(self, index):
        """Running runs here whose attempt records GPU index."""
        if self._claims is None:
            self._claims = [(nm, att.get("attempt"), att.get("gpus") or []) for nm, att in self._runs()]
        return [(nm, n) for nm, n, gs in self._claims if index in gs]

    def _by_memory(self, h, index):
        """Inside a container: the one running run here that recorded this GPU, if one."""
        h["pid_is_host_pid"] = True
        cl = self.claims(index)
        if len(cl) == 1:
            h.update(run=cl[0][0], attempt=cl[0][1], mapped_by="memory")
        elif cl:
            h["candidates"] = ["%s.%s" % c for c in cl]
        return h

    def holder(self, app, index):
        h = {"pid": app.get("pid"), "used_mib": app.get("used_mib"), "run": None, "attempt": None}
        if app.get("raw"):
            h["raw"] = app["raw"]
        pid = app.get("pid")
        if not self.direct:
            return self._by_memory(h, index)
        if pid is None:
            return h
        p = self.procs().get(pid) or read_proc(pid)
        if p is None or p.dead:
            h.update(state="gone", note="listed by nvidia-smi but gone from /proc")
            return h
        h["state"] = p.state
        h["cmd"] = p.describe()["cmd"][:200]
        name, n = marker_run(p.env(MARKER))
        phid = p.env(HOME_MARKER) if name is not None else None
        if phid and self.home is not None and phid != self.home.id:
            # a run of the same name may live in another runward home on this machine
            h.update(other_home_run="%s.%s" % (name, n),
                     note="a run of another runward home on this machine (RUNWARD_HOME_ID %s)" % phid)
            return h
        if name is None:
            name, n = self.member_of(pid)
        if name is not None:
            h.update(run=name, attempt=n, mapped_by="direct")
        return h

    def table(self, snap):
        """Each GPU with its processes; processes on a uuid nvidia-smi did not list as a GPU
        (a MIG device uuid, on drivers that print one) are kept apart, not dropped."""
        gpus, by_uuid = [], {}
        for g in snap["gpus"]:
            g = dict(g, processes=[])
            gpus.append(g)
            by_uuid[g["uuid"]] = g
        stray = []
        for a in snap["apps"]:
            g = by_uuid.get(a["gpu_uuid"])
            if g is None:
                stray.append(dict(self.holder(a, None), gpu_uuid=a["gpu_uuid"]))
            else:
                g["processes"].append(self.holder(a, g["index"]))
        return gpus, stray


def states(snap, indices, max_used, view):
    """Per requested GPU: memory, holders, and whether it is free (memory.used readable and
    <= max_used, and no compute process on it)."""
    gpus, _ = view.table(snap)
    by_index = {g["index"]: g for g in gpus}
    out = []
    for i in indices:
        g = by_index.get(i)
        if g is None:
            out.append({"index": i, "missing": True, "free": False, "holders": []})
            continue
        st = {"index": i, "uuid": g["uuid"], "used_mib": g["used_mib"], "total_mib": g["total_mib"],
              "holders": g["processes"]}
        if (g.get("raw") or {}).get("used_mib"):
            st["raw"] = {"used_mib": g["raw"]["used_mib"]}
        st["free"] = g["used_mib"] is not None and g["used_mib"] <= max_used and not g["processes"]
        out.append(st)
    return out


def poll(indices, max_used, timeout, home, on_poll=None):
    """Poll nvidia-smi until every GPU in indices is free or timeout passes (see the module
    docstring for why it polls); on_poll() is called at each poll and may raise to end the
    wait. Returns (states, snapshot, waited_s, polls)."""
    t0 = time.monotonic()
    deadline = t0 + max(0.0, timeout)
    polls = 0
    while True:
        snap = snapshot()
        polls += 1
        if snap["nvidia_smi"] is None:
            return None, snap, round(time.monotonic() - t0, 3), polls
        now = states(snap, indices, max_used, GpuView(home))
        left = deadline - time.monotonic()
        if all(s["free"] for s in now) or left <= 0:
            return now, snap, round(time.monotonic() - t0, 3), polls
        if on_poll is not None:
            on_poll()
        time.sleep(min(POLL_S, left))


def _present(gpus):
    """Refuse a wait on GPUs that nvidia-smi cannot show or does not list."""
    snap = snapshot()
    if snap["nvidia_smi"] is None or not snap["gpus"]:
        raise AgentFailure("GpuUnavailable", "cannot wait for GPUs %s to be free: %s" % (
            ",".join(map(str, gpus)), snap.get("note")),
            "start without --wait-gpus-free, or install the NVIDIA driver utilities on the target")
    have = sorted(g["index"] for g in snap["gpus"] if g["index"] is not None)
    missing = [i for i in gpus if i not in have]
    if missing:
        raise bad_input("GPU %s is not on this target (nvidia-smi lists %s)" % (
            ",".join(map(str, missing)), ",".join(map(str, have)) or "none"), "pick --gpus from that list")


def wait_timeout(spec):
    """How long start --wait-gpus-free waits: its --gpu-wait-timeout, else WAIT_FREE_TIMEOUT."""
    t = spec.get("timeout") if isinstance(spec, dict) else None
    return WAIT_FREE_TIMEOUT if t is None else t


def wait_free(gpus, spec, home, on_poll=None):
    """start --wait-gpus-free: before any record is made, wait until GPUS are free, else
    refuse naming who holds them. on_poll (a stop's cancel request) may end the wait."""
    timeout = float(wait_timeout(spec))
    spec = spec if isinstance(spec, dict) else {}
    max_used = float(spec.get("max_used_mib") if spec.get("max_used_mib") is not None else MAX_USED_MIB)
    if timeout < 0 or max_used < 0:
        raise bad_input("invalid --timeout/--max-used for --wait-gpus-free", "give numbers >= 0")
    _present(gpus)
    now, snap, waited, polls = poll(gpus, max_used, timeout, home, on_poll)
    res = {"gpus": now, "waited_s": waited, "polls": polls, "max_used_mib": max_used, "timeout_s": timeout,
           "pids_are_local": in_host_pidns(), "pidns": pid_namespace(),
           "home_id": home.id if home is not None else None}
    busy = [s for s in now if not s["free"]]
    if busy:
        held = [held_message(s, "holds") for s in busy]
        runs = sorted({h["run"] for s in busy for h in s["holders"] if h.get("run")})
        raise AgentFailure("GpusBusy", "GPUs not free after %gs: %s" % (timeout, "; ".join(held)),
                           "wait longer (--timeout), raise --max-used, or free them" +
                           (": runward stop %s" % " ".join(runs) if runs else " (see `runward gpus`)"),
                           result=dict(res, gpus_held=held))
    return res


def release(att, fates, timeout, max_used, home=None):
    """After a verified stop: wait until the attempt's GPUs hold no compute process and
    their memory.used is back under max_used; a distinct, bounded answer when not."""
    gpus = list(att.get("gpus") or [])
    timeout = RELEASE_TIMEOUT if timeout is None else float(timeout)
    max_used = MAX_USED_MIB if max_used is None else float(max_used)
    direct = in_host_pidns()
    out = {"checked": True, "method": "direct" if direct else "memory", "timeout_s": timeout,
           "max_used_mib": max_used, "pids_are_local": direct, "pidns": pid_namespace(),
           "home_id": home.id if home is not None else None}
    try:
        now, snap, waited, polls = poll(gpus, max_used, timeout, home)
    except AgentFailure as e:
        out.update({"checked": True, "verified": False, "error": e.message, "hint": e.hint,
                    "message": "GPU release not verified: %s" % e.message})
        return out
    if now is None:
        return {"checked": False, "verified": False, "note": "GPU release not checked: no nvidia-smi"}
    ours = set(f["pid"] for f in fates or ())
    for s in now:
        for h in s["holders"]:
            if direct and h.get("pid") in ours:
                h["of_this_run"] = True
        s["released"] = s.pop("free")
    out.update({"verified": all(s["released"] for s in now), "waited_s": waited, "polls": polls, "gpus": now})
    if not out["verified"]:
        out["message"] = "; ".join(held_message(s) for s in now if not s["released"]) + \
            " after %gs" % timeout
    return out


def stop_check(res, store, att, fates, gpu_timeout, max_used=None):
    """The stop result's GPU part: only for an attempt that recorded GPUs (no nvidia-smi call
    otherwise)."""
    if not (att or {}).get("gpus"):
        return res
    pol = att.get("supervise") or {}  # the run's own gpu_release_timeout / max used, where it set them
    gpu_timeout = pol.get("gpu_release_timeout") if gpu_timeout is None else gpu_timeout
    max_used = pol.get("gpu_max_used_mib") if max_used is None else max_used
    rel = release(att, fates, gpu_timeout, max_used, store.home)
    res["gpu_release"] = rel
    if rel.get("verified"):
        res.setdefault("verified", []).append("gpu_released")
    elif rel.get("checked"):
        res["gpus_held"] = [held_message(s) for s in rel.get("gpus") or () if not s["released"]] or [rel["message"]]
    return res


def usage(att, run_members):
    """status: the GPUs of a running attempt, their memory and the run's share of it."""
    try:
        snap = snapshot(cached=True)
    except AgentFailure as e:
        return {"gpu_usage": [], "gpu_note": e.message}
    if snap["nvidia_smi"] is None:
        return {"gpu_usage": [], "gpu_note": snap["note"]}
    direct = in_host_pidns()
    by_index = {g["index"]: g for g in snap["gpus"]}
    out_rows = []
    for i in att.get("gpus") or ():
        g = by_index.get(i)
        if g is None:
            out_rows.append({"index": i, "used_mib": None, "total_mib": None, "run_mib": None,
                             "note": "not listed by nvidia-smi"})
            continue
        apps = [a for a in snap["apps"] if a["gpu_uuid"] == g["uuid"]]
        mine = [a for a in apps if direct and a.get("pid") in run_members]
        out_rows.append({"index": i, "used_mib": g["used_mib"], "total_mib": g["total_mib"],
                         "run_mib": sum(a["used_mib"] for a in mine if isinstance(a.get("used_mib"), (int, float)))
                         if direct else None, "processes": len(apps)})
    out = {"gpu_usage": out_rows}
    if not direct:
        out["gpu_note"] = "pids here are the host's: per-run memory is in `runward gpus`"
    return out
