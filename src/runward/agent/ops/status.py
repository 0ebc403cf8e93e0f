"""status, logs, spec and ping: what a run is now on this target, read from its records
against /proc (the read-only verbs, which the resident agent also serves)."""

import os
import sys
import time

from ..core import launchers
from . import launcher_ops
from ..supervise import logfiles
from ..proc import cgroups
from ..core.procfs import alive_in, boot_id, protected, scan, uptime
from ..proc.runs import attempt_state, blind_spot, blind_spot_before, drift, log_info, members, paused, summarize_tree
from ..core.secrets import mask_url_passwords, redact_env, shown_multinode
from ..core.sidelock import SIDE_WAIT_S, SideLocked
from ..core.store import RunStore, check_name, read_json
from ..core.wire import AgentFailure, caller_gone


# --- status

def status(req, home):
    names = req.get("names")
    if names:
        for nm in names:
            check_name(nm)
    all_names = home.run_names()
    if names:
        missing = [nm for nm in names if (nm not in all_names or not RunStore(home, nm).exists())
                   and RunStore(home, nm).gpu_wait() is None]  # a first start waiting for GPUs: shown
        if missing:
            raise AgentFailure("RunNotFound", "no run named %s on this target" % ", ".join(missing),
                               "`runward status` lists the runs here")
    waiting = [] if names else home.first_starts_waiting()  # no run directory yet, only their lock
    all_names = sorted(set(all_names) | set(waiting))
    bid = boot_id()
    if not (names or all_names):
        return {"runs": [], "boot_id": bid, "time": time.time(), "host": os.uname().nodename}
    procs = scan()
    prot = protected(procs)
    up = uptime()
    runs = []
    for nm in names or all_names:
        store = RunStore(home, nm)
        if store.exists():
            runs.append(status_of(store, procs, prot, bid, up, bool(names), req.get("since_s")))
        elif names or nm in waiting:  # a first start waiting for its GPUs (the checks above)
            runs.append({"name": nm, "state": "none", "attempt": None})
        if runs and runs[-1]["name"] == nm:
            _gpu_wait(runs[-1], store)
            _stopping(runs[-1], store)
    return {"runs": runs, "boot_id": bid, "time": time.time(), "host": os.uname().nodename}


def _gpu_wait(out, store):
    """A start of this run waiting for its GPUs (start --wait-gpus-free) before it makes
    attempt N: out["gpu_wait"] says which attempt, the GPUs and since when. Its lock's holder
    says so while it is alive (store.gpu_wait); once attempt N exists, that attempt speaks."""
    w = store.gpu_wait()
    if w is not None and w.get("attempt", 0) > (out.get("attempt") or 0):
        out["gpu_wait"] = w


def _stopping(out, store):
    """A stop of this attempt under way (it signalled, and waits for the end or its KILL):
    out["stopping"] says the signal, since when and the grace. Its lock's holder says so
    while that stop is alive (store.stopping), as a start's gpu_wait."""
    w = store.stopping()
    if w is not None and out.get("attempt") is not None and w.get("attempt") == out.get("attempt"):
        out["stopping"] = w


def status_of(store, procs, prot, bid, up, with_drift=True, since=None):
    att = store.latest()
    launcher = launchers.named(att)
    if launcher is not None:  # an engine's job: its launcher says what it is
        out = launcher_ops(launcher).status_of(store, att)
        if with_drift and out["state"] != "lost":
            att = store.attempt(att["attempt"]) or att  # as the launcher left it (a driver it found and kept)
            _details(out, store, att, out["state"], since)
        return out
    state = attempt_state(att, procs, bid)
    out = {"name": store.name, "state": state, "attempt": att.get("attempt") if att else None}
    if att is None:
        return out
    if att.get("gate"):  # restart's GPU gate: waiting for the GPUs is `blocked` (supervise/gatewait.py)
        from ..supervise import gatewait
        state = out["state"] = gatewait.status(out, att, state)
    out.update({"argv": [mask_url_passwords(a) for a in att["argv"]] if att.get("argv") else att.get("argv"),
                "cwd": att.get("cwd"), "started_at": att.get("started_at"),
                "log": log_info(att.get("log")), "gpus": att.get("gpus")})
    # a multi-node run's node (supervise/peers.py); stopped: a stop's end, also one nobody waited for (ops/stop.py)
    for k in ("multinode", "peer_events", "peer_stop", "coordinator_lost", "stop_requested", "stopped"):
        if att.get(k):
            out[k] = att[k]
    if out.get("multinode"):
        out["multinode"] = shown_multinode(out["multinode"])
    if att.get("job"):
        out["pid"] = att["job"]["pid"]
        out["start_time"] = att["job"]["start"]
    # a lost attempt too: its shim and job may be gone while their children live on
    found = members(store.name, att, procs, prot)
    if found:
        out["tree"] = summarize_tree(found, up, att["job"]["pid"] if att.get("job") else None)
        if out["tree"]["uptime_s"] is not None and att.get("started_at"):
            # a restart's job execs in a process forked during the attempt before (the
            # zygote, supervise/policy.py): its /proc age counts that attempt and the backoff too
            out["tree"]["uptime_s"] = round(max(0.0, min(out["tree"]["uptime_s"], time.time() - att["started_at"])), 1)
        out["tree"]["pids"] = sorted(found)
    if att.get("gpus") and state in ("running", "orphaned"):
        from ..proc import gpus  # a run given GPUs only: the status of any other skips its import
        out.update(gpus.usage(att, found))
    _pauses(out, att, found, procs, state)
    if state == "exited" and found:
        state = out["state"] = "stray"  # the job's exit is not the run's end: stop still has work
    if state in ("stray", "failed", "lost") and found:
        out["stray_processes"] = sorted(found)
    _ending(out, att, state, bid)
    # a live shim sees what this attempt left; an earlier attempt's blind spot stays
    unseen = blind_spot(att, procs) if state in ("orphaned", "lost", "exited", "stray") else blind_spot_before(att)
    if unseen:
        out["blind_spot"] = unseen  # what the member search cannot see here
    if att.get("supervise"):  # restarts, policy, next restart, gave_up; only then (signal, enum)
        from ..supervise import policy as supervise
        supervise.status_fields(out, att)
        if att.get("idle_unjudged") and out["state"] == "running":
            out["idle_unjudged"] = att["idle_unjudged"]  # idle.IdleJudge._unjudged
    if with_drift:
        _details(out, store, att, state, since)
    return out


def _pauses(out, att, found, procs, state):
    """What makes no progress though alive: members stopped by a signal or a debugger, the
    run's cgroups frozen, its shim paused (status's `paused`)."""
    if state in ("running", "orphaned") and found:
        p = paused(found, out.get("pid"))
        if p:
            out["paused"] = p
    if state in ("running", "orphaned") and found and att.get("cgroups"):
        _frozen(out, att, found)
    _shim_paused(out, att, procs, state)


def _frozen(out, att, found):
    """The run's cgroups frozen (cgroup.freeze): their members read S, not T, yet run nothing,
    so `paused` says so (frozen: the cgroups; their members among pids)."""
    fr = cgroups.frozen(att["cgroups"])
    if not fr:
        return
    inside = cgroups.pids(fr) & set(found)
    p = out.get("paused") or {"pids": [], "job": False, "of": len(found)}
    p["pids"] = sorted(set(p["pids"]) | inside)
    p["job"] = bool(p["job"] or out.get("pid") in inside)
    p["frozen"] = fr
    why = ("its cgroup is frozen (cgroup.freeze: `systemctl freeze`, a runtime's pause): nothing in it runs, "
           "a signal's handler neither, until it is thawed; `runward stop` thaws it after its signal")
    p["note"] = p["note"] + "; " + why if p.get("note") else why
    out["paused"] = p


def _shim_paused(out, att, procs, state):
    """The run's own shim paused (SIGSTOP to it, a debugger): the job may run on, but only
    the shim reaps it, records how it ended and decides a restart, so none of that happens
    until it is resumed; an ended job then sits as a zombie and the attempt reads "starting"
    (its shim alive, no exit recorded). Said in `paused` ("shim": its pid) and, once the job
    ended, in the note."""
    shim = att.get("shim")
    sp = procs.get(shim["pid"]) if shim and shim.get("pid") else None
    if sp is None or sp.start != shim.get("start") or sp.dead or sp.state not in ("T", "t") \
            or state not in ("running", "starting"):
        return
    p = out.get("paused") or {"pids": [], "job": False, "of": len((out.get("tree") or {}).get("pids") or ())}
    p["shim"] = sp.pid
    why = "the run's shim (pid %d) is %s: the job's end is not recorded, nor a restart decided, until it " \
          "is resumed (SIGCONT; `runward stop` resumes it)" % (sp.pid, "held by a debugger" if sp.state == "t" else "paused")
    p["note"] = why if not out.get("paused") else p["note"] + "; " + why
    out["paused"] = p
    job = att.get("job")
    if state == "starting" and job and not alive_in(procs, job):
        out["note"] = "the job has ended; " + why


def _ending(out, att, state, bid):
    """How the attempt ended, or why its state is what it is."""
    if att.get("exit"):
        ex = att["exit"]
        out["exit"] = ex
        if att.get("started_at") and ex.get("at"):
            out["duration_s"] = round(ex["at"] - att["started_at"], 3)
    if att.get("error"):
        out["error"] = att["error"]
    if state == "lost":
        out["note"] = ("the machine rebooted since this attempt started (boot id changed)"
                       if att.get("boot_id") != bid else
                       "the shim died and the job is gone without an exit record")
        if out.get("stray_processes"):
            out["note"] += "; %d of its processes are still alive: stop ends them" % len(out["stray_processes"])
    if state == "orphaned":
        out["note"] = "the shim is gone but the job lives: still tracked and stoppable"
    if state == "stray":
        out["note"] = "the job exited; %d of its processes are still alive: stop ends them" % len(
            out.get("stray_processes") or ())
    failed = att.get("shim_failed")
    if failed and state in ("orphaned", "lost", "stray", "exited"):
        # exited: the shim recorded the job's end, then failed (in its backoff, deciding):
        # the policy's next step (a restart, its notification) died with it, so it is said
        out["shim_failed"] = failed
        out["note"] = "the shim failed (%s; its log: %s): %s" % (failed.get("error"), failed.get("log"), {
            "orphaned": "the job lives unsupervised (no health action, no exit record); still tracked and stoppable",
            "lost": "the job is gone without an exit record",
            "exited": "after the job's end was recorded; nothing follows it (no restart, whatever the policy "
                      "says): `runward restart` starts a new attempt",
            "stray": out.get("note", "")}[state])


def _details(out, store, att, state, since=None):
    """A status of named runs also says: files changed since the start, what deploy wrote,
    and the health read from the log (the only place status imports the log parser)."""
    if state in ("running", "orphaned"):
        d = drift(att, store.home)
        if d:
            out["drift"] = d
    dep = read_json(os.path.join(store.dir, "deployed.json"))
    if dep:
        out["deployed"] = dep
    live = bool(att.get("log")) and state == "running"
    beside = _stall_beside(store, att) if live else None
    try:
        if att.get("log") and state != "lost":
            _health(out, store, att, since)
    finally:
        judged = _stall_collect(beside) if beside else None
    if live:
        _stall(out, store, att, judged)
    if att.get("log") and state in ("exited", "failed"):
        from ..health import attribution  # who failed first, and what followed (docs/diagnosis.md)
        if attribution.failed(att):
            try:
                res = attribution.for_attempt(store, att)
            except (OSError, ValueError) as e:
                res = {"error": "could not read the log: %s" % e, "summary": None}
            if res is not None:
                out["attribution"] = res
    kept = _last_stacks(store, att)
    if kept:
        out["stacks"] = kept


def _last_stacks(store, att):
    """The newest `stacks` capture of this attempt (agent/health/stacks.py keeps them as
    stacks/<attempt>-<ms>.json): when and its summary. Read here without importing the
    capture module (subprocess, threads): status stays light."""
    d = os.path.join(store.dir, "stacks")
    try:
        pre = "%d-" % int(att.get("attempt") or 0)
        fs = [f for f in os.listdir(d) if f.startswith(pre) and f.endswith(".json")]
    except (OSError, ValueError):
        return None
    for f in sorted(fs, key=lambda f: int(f[len(pre):-5]) if f[len(pre):-5].isdigit() else 0, reverse=True)[:1]:
        try:
            doc = read_json(os.path.join(d, f)) or {}
        except AgentFailure:
            return None
        return {"at": doc.get("at"), "summary": doc.get("summary"), "ok": doc.get("ok"), "path": os.path.join(d, f)}
    return None


def _health(out, store, att, since):
    from ..health import facts as health
    try:
        saved, _, _ = health.scan(store, att, lock_wait=SIDE_WAIT_S)
        out["health"] = health.summary(saved, since=since)
    except SideLocked as e:  # a stuck holder: said, not waited for forever
        out["health"] = {"error": str(e), "locked_by": e.holder}
    except (OSError, ValueError) as e:
        out["health"] = {"error": "could not read the log: %s" % e}


def _judge_stall(store, att):
    """stall.check's answer as data: ("ok", result), ("locked", message, holder) or
    ("error", message)."""
    from ..health import stall
    try:
        return ("ok", stall.check(store, att, lock_wait=SIDE_WAIT_S))
    except SideLocked as e:  # a stuck holder (a status, a `flock`): said, not waited for forever
        return ("locked", str(e), e.holder)
    except (OSError, ValueError) as e:
        return ("error", "could not judge a stall: %s" % e)


def _stall_beside(store, att):
    """A first read of a big log (no health.json yet, skim.FORK_MIN or more of the attempt's
    log): the stall judged in a forked process while this one scans the log, on a core the
    skim's search leaves (its other half, stall's 4 MiB read, ~0.06-0.1 s, no longer waits
    for the scan). (pid, read end), or None: judged here after the scan (a small read, one
    core, threads in this process, no fork)."""
    from ..logmetrics import skim, skimfork
    try:
        big = (not os.path.exists(os.path.join(store.dir, "health.json")) and
               os.path.getsize(att["log"]) - int(att.get("log_offset") or 0) >= skim.FORK_MIN)
    except (OSError, ValueError):
        return None
    if not big or skimfork.threaded() or skim.cores() < 2:
        return None
    return skimfork.forked(lambda: _judge_stall(store, att))


def _stall_collect(kid):
    """The forked judgement's answer, or None where it gave none whole (judged here then)."""
    from ..logmetrics import skimfork
    got = skimfork.answer(kid)
    return got if isinstance(got, tuple) and got and got[0] in ("ok", "locked", "error") else None


def _stall(out, store, att, judged=None):
    """A live run's stall and stragglers (health/stall.py): said beside its health, and its alerts
    among the health's, where status, top and MCP show alerts. JUDGED: _judge_stall's answer
    from a forked process, where one gave it."""
    judged = judged or _judge_stall(store, att)
    if judged[0] == "locked":
        out["stall"] = {"error": judged[1], "locked_by": judged[2]}
        return
    if judged[0] == "error":
        out["stall"] = {"error": judged[1]}
        return
    res = out["stall"] = judged[1]
    h = out.get("health")
    if isinstance(h, dict) and "error" not in h:
        h["alerts"] = list(h.get("alerts") or []) + res["alerts"]


# --- logs, spec, ping

def logs(req, home, emit):
    store = RunStore.existing(home, req.get("name"))
    att = store.latest()
    log = att.get("log")
    picked = None
    if req.get("attempt") is not None or req.get("since_s") is not None or req.get("grep"):
        from ..core.logselect import pick  # --attempt, --since, --grep: only the selected lines travel
        picked = pick(store, att, req)
        lines, emit = picked.pop("lines"), picked.pop("emit")(emit)
    elif req.get("offset") is not None and not req.get("follow"):
        return dict(_after(log, int(req["offset"]), 200 if req.get("lines") is None else int(req["lines"])),
                    name=store.name, log=log)
    else:
        end = _size(log)  # before the tail: a line written meanwhile comes again, never missed
        lines = logfiles.tail(log, 20 if req.get("lines") is None else int(req["lines"]))  # across a rotation
    if not req.get("follow"):
        out = dict(picked or {}, name=store.name, log=log if picked is None else picked["log"], lines=lines)
        if picked is None:
            out["offset"] = end  # where the next call's `offset` reads on from (logs --offset)
        return out
    for ln in lines:
        emit({"line": ln})
    pos = logfiles.end_of(log)
    return _follow(store, att, log, pos, emit, float(req["for_s"]) if req.get("for_s") else None)


def _size(log):
    try:
        return os.path.getsize(log) if log else 0
    except OSError:
        return 0


def _after(log, offset, n):
    """At most N complete lines after byte OFFSET of the log (an `offset` a previous call
    returned), and the offset after the last of them: an agent pages through a log in
    bounded calls. A log shorter than OFFSET was rotated or rewritten: read from its start,
    and say so (`restarted`)."""
    size = _size(log)
    start = offset if 0 <= offset <= size else 0
    data, _ = logfiles.read_on(log, start) if log else (b"", 0)
    chunks = data.split(b"\n")[:-1][:max(0, n)]  # a partial last line waits for the next call
    end = start + sum(len(c) + 1 for c in chunks)
    return {"lines": [c.decode("utf-8", "replace") for c in chunks], "offset": end,
            "more": end < size, "restarted": start != offset}


def _follow(store, att, log, pos, emit, for_s):
    pending = b""
    deadline = time.monotonic() + for_s if for_s else None
    last_check = 0.0
    while deadline is None or time.monotonic() < deadline:
        # no inotify in the stdlib: poll the file every 100 ms; a restart appends to the same
        # log (or switches it: re-read the latest attempt once a second)
        if time.monotonic() - last_check > 1.0:
            last_check = time.monotonic()
            latest = store.latest() or att
            if latest.get("log") != log:
                log, pos, pending = latest["log"], 0, b""
                emit({"switch": log})
        data, pos = logfiles.read_on(log, pos)  # the rest of a file rotated away first
        if data:
            pending += data
            *lines, pending = pending.split(b"\n")
            for ln in lines:
                emit({"line": ln.decode("utf-8", "replace")})
        if caller_gone(0 if data else 0.1):  # Ctrl-C, a killed ssh/podman: end, never leak
            break
    return {"name": store.name, "log": log, "followed": True}


def spec(req, home):
    """The last attempt's spec, for restart, and what deploy recorded (deployed.json: the
    CLI compares it with the local files before it stops anything). Secret values stay on
    the target: a start with reuse_env takes them from the attempt record there. env_from's
    values were never here: the CLI reads them again from where the start took them."""
    store = RunStore.existing(home, req.get("name"))
    latest = store.latest()
    launchers.refuse_start(req, latest)  # restart's first call: refused before its stop
    run = store.run()
    sp = dict(run.get("spec") or {})
    sp["env"] = redact_env(sp.get("env"))
    if sp.get("multinode"):
        sp["multinode"] = shown_multinode(sp["multinode"])
    out = {"name": store.name, "attempt": run.get("attempt"), "spec": sp,
           "hashes": (latest or {}).get("hashes") or {}}  # what it started with: restart's "code"
    engine = launchers.named(latest)
    if engine:  # what the target's engine options were (restart's "changed" compares the target's now)
        out["engine"] = {engine: {k: latest[engine].get(k) for k in launchers.queries(engine).TARGET_KEYS}}
    dep = read_json(os.path.join(store.dir, "deployed.json"))
    if dep:
        out["deployed"] = dep
    # a restart's working directory, checked before its stop (the start resolves it the same way)
    cwds = [c for c in (req.get("cwds") or []) + [sp.get("cwd")] if isinstance(c, str) and c]
    out["cwd_missing"] = sorted({c for c in cwds if not os.path.isdir(os.path.expanduser(c))})
    return out


def ping(req, home):
    return {"python": sys.version.split()[0], "pid": os.getpid(), "boot_id": boot_id(), "time": time.time()}
