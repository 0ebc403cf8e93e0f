"""stop: a run's end on this target. Stop means verified dead (proc/terminate.py): the run lock,
stop_requested in the record before any signal, every member of the run signalled once and
waited for, KILL after the grace, a scan that finds no member, the shim's record of the end.
A module of its own: a stop imports none of what a start needs (the shim, the log files, the
peers' link), and a multi-node stop pays its imports once per node."""

import os
import time

from ..proc import cgroups, faults, gpus
from ..supervise import policy as supervise
from ..core.runspec import GRACE_S, STOP_SIGNAL
from ..core.procfs import boot_id, live, protected, scan
from ..proc.runs import attempt_state, blind_spot, members, own_procs
from ..core.secrets import shown_multinode
from ..core.store import RunStore
from ..proc.terminate import SIGNALS, PidWatch, parse_signal, signal_name, terminate
from ..core.wire import event, outlive_caller


def stop(req, home):
    store = _stop_store(home, req.get("name"))
    # from here the stop goes on to its verified end whatever happens to the CLI (Ctrl-C to
    # its group, its ssh link dropped); the event tells it so, the record gets the end
    outlive_caller()
    event({"stop_begun": {"name": store.name}})
    sig = req.get("signal")
    grace = req.get("grace")
    fd, asked = _lock_cancelling_start(store, req)
    try:
        cancelled = _cancelled_wait(store, asked)
        att = store.latest()
        procs = scan()
        prot = protected(procs)
        sig = sig or (att or {}).get("stop_signal", STOP_SIGNAL)
        grace = float(grace if grace is not None else (att or {}).get("grace", GRACE_S))
        if req.get("checkpoint") is not None:  # checked before anything is marked or signalled
            from . import stopckpt
            stopckpt.check(req["checkpoint"], att)
        mark_stop_requested(store, att, procs, req.get("by"))
        from ..supervise import gatewait
        if gatewait.pending(att) or gatewait.cancel_unanswered(att):  # restart's attempt blocked on the GPUs: it never ran; cancelled
            ended = gatewait.cancel(store, att) if gatewait.pending(att) else True
            res = gatewait.stop_result(store, att, ended)
            # restart's stop: the next attempt must pass the gate too, or a second restart
            # while blocked starts on the GPUs still held (a plain stop does not wait for them)
            res = gpus.stop_check(res, store, att, [], req.get("gpu_timeout")) if req.get("gpu_gate") else res
            return dict(res, cancelled_start=cancelled) if cancelled else res
        ckpt = None
        if req.get("checkpoint") is not None:  # marked first: a job that exits once saved is not restarted
            ckpt = stopckpt.before_stop(store, att, req["checkpoint"])
            procs = scan()
            prot = protected(procs)
        ended = supervise.end_backoff(store, att, req.get("by"))  # a shim waiting to restart: no next attempt
        res = stop_locked(store, att, procs, prot, sig, grace, req.get("gpu_timeout"), req.get("by"),
                          lambda s: store.note_stopping(fd, (att or {}).get("attempt"), s, grace))
        if ended:
            res["restart_cancelled"] = True
        if ckpt is not None:
            res["checkpoint"] = ckpt
            if ckpt.get("sent_to") and res.get("already_stopped"):
                # alive when this stop began: its own checkpoint signal ended the job (one that
                # does not handle it), so the stop did it -- never "already stopped", state "lost"
                res.update(already_stopped=False, state="stopped", ended_by="checkpoint_signal")
        _record_end(store, att, res, req.get("by"))
        if cancelled:
            res["cancelled_start"] = cancelled
        return res
    finally:
        store.unlock(fd)


def _lock_cancelling_start(store, req):
    """(the run lock's fd, the holders asked to give up): a start found holding the lock is
    asked to (waiting for GPUs, it does at its next poll), said as who asks, as it will say it:
    a restart's stop step (gpu_gate is restart's alone), a health action's, or a plain stop."""
    asked = []
    by = req.get("by") or ("restart" if req.get("gpu_gate") else "stop")

    def cancel_start(holder):
        if holder.get("verb") == "start":
            store.request_cancel(by)
            asked.append(holder)
    try:
        return store.lock("stop", req.get("lock_timeout"), cancel_start), asked
    finally:
        if asked:
            store.clear_cancel()


def _cancelled_wait(store, holders):
    """What became of a start this stop found waiting for GPUs under the run's lock (its
    holder name's gpu_wait), read once the lock is ours: it gave the lock up without making
    its attempt (cancelled), or it had launched that attempt before its next poll saw the
    request (launched: the attempt this stop then ends). None: no such start was waiting."""
    waits = [h for h in holders if isinstance(h.get("gpu_wait"), dict)]
    if not waits:
        return None
    h = waits[0]
    w = h["gpu_wait"]
    return {"pid": h.get("pid"), "gpus": w.get("gpus"), "attempt": w.get("attempt"),
            "launched": w.get("attempt") in store.attempts()}


def _record_end(store, att, res, by):
    """The stop's end in the attempt's record ("stopped"): what `status` shows of a stop
    whose caller was gone before its reply (a Ctrl-C'd CLI, a dropped link)."""
    if not att or res.get("already_stopped"):
        return
    end = {"at": time.time(), "by": by or "cli", "verified_dead": bool(res.get("verified_dead")),
           "survivors": len(res.get("survivors") or ()), "signal": res.get("signal"), "grace_s": res.get("grace_s")}
    store.update_attempt(att["attempt"], lambda fresh: fresh.update(stopped=end))


def _stop_store(home, name):
    """The run's store, or RunNotFound; a run whose first start holds the lock (waiting for
    GPUs: no record yet) is found too, so that the stop can cancel that start."""
    store = RunStore(home, name)
    if store.exists() or store.holder().get("verb") == "start":
        return store
    return RunStore.existing(home, name)


def mark_stop_requested(store, att, procs, by=None):
    """Before any signal: a start still in its settle period (it has let the lock go)
    then reports its job's end as stopped by us, not as an early exit, and a supervising
    shim does not restart it. Read and written under the record lock: the shim writes the
    same record when the job ends. BY: "cli" (a stop from the CLI, always the last word), or a
    health action's (supervise/policy.py), which never overrides a stop already asked for."""
    if not att or attempt_state(att, procs, boot_id()) not in ("running", "starting", "orphaned"):
        return

    def mark(fresh):
        if fresh.get("exit") or (by and by != "cli" and fresh.get("stop_requested")):
            return False
        fresh["stop_requested"] = {"at": time.time(), "pid": os.getpid(), "by": by or "cli"}
    store.update_attempt(att["attempt"], mark)


def stop_locked(store, att, procs, prot, sig, grace, gpu_timeout=None, by=None, signalling=None):
    """signalling(signal name): called just before the signal (stop notes it for status), and
    with None once terminate is done."""
    signum = parse_signal(sig)
    found = members(store.name, att, procs, prot)
    res = {"name": store.name, "attempt": att.get("attempt") if att else None, "signal": signal_name(signum),
           "grace_s": grace, "multinode": shown_multinode((att or {}).get("multinode"))}
    unseen = blind_spot(att, procs)
    if unseen:
        res["blind_spot"] = unseen
    if not found:
        return _already_stopped(store, att, procs, res, gpu_timeout, by)
    job = (att or {}).get("job")
    group = job["pid"] if job and job["pid"] in found else None

    scans = []  # what each scan found, in order

    def find_more():
        ps = scan()
        scans.append(members(store.name, att, ps, protected(ps)))
        return scans[-1]

    if signalling is not None:
        signalling(signal_name(signum))
    t0 = time.monotonic()
    thawed = []
    own = (att or {}).get("cgroups")
    fates = terminate(found, procs, signum, grace, find_more=find_more, group=group,
                      thaw=(lambda: thawed.extend(cgroups.thaw(own)) or thawed) if own else None)
    if signalling is not None:
        # what follows (the shim's record, up to 10 s; the GPUs' release, up to its timeout)
        # is no stop under way: status said 'grace is over: SIGKILL sent' of a job ended by TERM
        signalling(None)
    survivors = [f for f in fates if f["fate"] == "survived"]
    # "dead" needs a scan that finds no member: terminate's last one did when it found none
    # (a member alive then would be in it, and nothing but a member makes one); else one now
    left = {} if scans and not scans[-1] else find_more()
    for pid, p in left.items():
        if not any(f["pid"] == pid for f in survivors):
            survivors.append(dict(p.describe(), fate="survived"))
    res.update({"already_stopped": False, "processes": fates, "survivors": survivors,
                "verified_dead": not survivors, "stop_s": round(time.monotonic() - t0, 4)})
    if thawed:
        res["thawed"] = thawed  # the run's own cgroups found frozen, thawed after the signal
    if not survivors:
        res["verified"] = ["no_process_of_run_alive"]
        faults.point("stop:dead")
        _let_shim_record(store, att, fates, by)
        cgroups.remove(cgroups.run_paths((att or {}).get("cgroups")))  # earlier attempts' left ones too
        gpus.stop_check(res, store, att, fates, gpu_timeout)
    latest = store.latest()
    res["state"] = attempt_state(latest, own_procs(latest), boot_id())
    return res


def _already_stopped(store, att, procs, res, gpu_timeout, by):
    """No process of the run lives: verified dead as it is, the shim's record and the run's
    empty cgroups seen to."""
    sp = live((att or {}).get("shim")) if (att or {}).get("shim") else None
    if sp is not None and sp.state == "T" and (att or {}).get("job"):
        # the job ended by itself under its paused shim (a zombie only the shim can reap):
        # resumed, the shim records that end (and finds the stop marked: no restart)
        _let_shim_record(store, att, [], by)
        att, procs = store.latest(), scan()
    res.update({"already_stopped": True, "verified_dead": True, "processes": [],
                "state": attempt_state(att, procs, boot_id())})
    if (att or {}).get("peer_stop"):  # a node's shim ended it on its peers' word: what, and why
        res["peer_stop"] = att["peer_stop"]
    res["verified"] = ["no_process_of_run_alive"]
    # what a shim killed before its job ended could not remove: the run's empty cgroups
    cgroups.remove(cgroups.run_paths((att or {}).get("cgroups")))
    return gpus.stop_check(res, store, att, [], gpu_timeout)


def _let_shim_record(store, att, fates, by=None):
    """Wait (10 s at most: on a loaded machine, as CI's, 2 s is too short) for the shim
    to record the exit before we answer, so a `status` right after is true. An orphan's shim is gone and will record nothing: then stop, which
    saw the job to its end, records it (under the run lock the caller holds), so the attempt
    reads "exited", not "lost". A health action's stop (BY "health:...") is the shim's own
    child: the shim records the exit itself and then needs the run lock this stop holds to
    decide the restart, so waiting for the shim's end here held both for 10 s (the run read
    `exited` that long, and restarted 10 s late)."""
    shim_ident = (att or {}).get("shim")
    sp = live(shim_ident) if shim_ident else None
    if sp is not None and str(by or "").startswith("health:"):
        return
    if sp is not None:
        w = PidWatch()
        if w.add(sp):
            if sp.state == "T":
                # the run's own shim paused (SIGSTOP to it, a debugger's stop): the job ended
                # but only its parent can reap it and record how; paused, it never would, and
                # the run read "starting" for good. SIGCONT (no harm to a shim, which takes it
                # as any process does) lets it do that now.
                w.signal(sp.pid, SIGNALS["SIGCONT"])  # terminate's table: no enum import for a stop
            w.wait(10.0)
        w.close()
        if live(shim_ident) is not None:
            return  # alive but slow: the record is still its to write
    job = (att or {}).get("job")
    fate = next((f for f in fates if job and f["pid"] == job["pid"] and f["start"] == job["start"]), None)
    if fate is None:
        return  # the job was gone before this stop: how it ended is not ours to say
    sigs = fate.get("signals") or []

    def record_exit(now):
        if now.get("exit") or now.get("error"):
            return False
        # what stop sent is not how the job ended (a job that saves on TERM returns 0): only
        # the shim, its parent, could have read that, so it is unknown, said as unknown
        now["exit"] = {"at": time.time(), "code": None, "signal": None, "unknown": True, "by": "stop",
                       "signals_sent": sigs,
                       "note": "recorded by stop: the shim was gone, the job's own exit status is unknown"}
    store.update_attempt(att["attempt"], record_exit)


def checkpoint(req, home):
    """The op a multi-node stop sends every node first (multinode.stop): the stop marked, the
    checkpoint signal sent, its wait; the stop itself comes once every node has answered, so
    no node's job is ended while another's still saves its part (a collective save waits
    for every rank)."""
    from . import stopckpt
    store = RunStore.existing(home, req.get("name"))
    fd = store.lock("stop", req.get("lock_timeout"))
    try:
        att = store.latest()
        stopckpt.check(req.get("checkpoint"), att)
        mark_stop_requested(store, att, scan())  # marked first: a job that exits once saved is not restarted
        res = stopckpt.before_stop(store, att, req["checkpoint"])
        return dict(res, name=store.name, attempt=(att or {}).get("attempt"))
    finally:
        store.unlock(fd)
