"""The GPU gate of the `restart` verb (docs/supervision.md, "restart: blocked"). The verb's
stop verified the old attempt dead; where its GPUs still hold memory after
gpu_release_timeout, starting now would OOM at once, and exiting with nothing started leaves
the user to poll. So the new attempt is recorded `blocked` (the holders named) and its shim
waits, detached, until the GPUs are released, then starts the job by itself. Never "proceeds
anyway". A stop meanwhile marks the record (stop_requested), which the shim reads at each
poll: the attempt is then cancelled, nothing started.

The supervised restart's gate (supervise/gpugate.py) waits in the shim of the attempt that ended; this
one waits in the shim of the attempt to come, as no shim of the stopped attempt is left."""

import time

from ..proc import gpus
from ..core.procfs import live

BLOCKED_POLL_S = 3600.0  # one long poll after another, each ended by a stop's mark
CANCEL_WAIT_S = 10.0     # a stop waits this long for the waiting shim to see its mark (polls: 0.5 s)
LOCK_WAIT_S = 3600.0     # released: the run lock before the fork; a stop may hold it through a long grace
CANCEL_POLL_S = 0.5      # released, waiting for the run lock: the stop's mark is read this often
CANCELLED = "not started: `runward stop` cancelled it while it was blocked on the GPUs"


class Cancelled(Exception):
    """A stop marked the blocked attempt, or (a multi-node run) another node's: why says which."""

    def __init__(self, why=None):
        Exception.__init__(self, why)
        self.why = why


def blocked_record(gate):
    """What the attempt record says of the block, from the restart's stop (the holders it
    named after gpu_release_timeout)."""
    return {"at": time.time(), "by": "restart", "why": gate.get("why") or "GPUs not released",
            "holders": gate.get("holders") or [], "gpus": gate.get("held") or [],
            "timeout_s": gate.get("timeout_s")}


def pending(att):
    """The attempt waits in its shim for the GPUs: no job yet, the block not released."""
    b = (att or {}).get("blocked") or {}
    return bool((att or {}).get("gate") and b.get("by") == "restart" and not b.get("released_at")
                and not b.get("cancelled_at") and not att.get("job") and att.get("shim")
                and live(att["shim"]) is not None)


def status(out, att, state):
    """status: a restart's attempt waiting for its GPUs is `blocked`, not `starting`."""
    if state == "starting" and pending(att):
        out["blocked"] = att["blocked"]
        return "blocked"
    if ((att or {}).get("blocked") or {}).get("cancelled_at"):
        out["blocked"] = att["blocked"]
    return state


def wait(store, n, att, say, notify, hold):
    """In the shim, before the job is forked: True once the GPUs are released (the record
    says when), False when a stop cancelled the attempt (the record says so). Free at the
    first read (freed since the stop looked): one nvidia-smi read, and the start goes on.
    A node of a multi-node run waits for every node's (supervise/gatebarrier.py), its own free or not."""
    gate = att["gate"]
    idx = list(gate.get("gpus") or ())
    max_used = float(gpus.MAX_USED_MIB if gate.get("max_used_mib") is None else gate["max_used_mib"])
    now, _, _, polls = gpus.poll(idx, max_used, 0, store.home)
    multi = int((att.get("multinode") or {}).get("nnodes") or 1) > 1
    if _free(now) and not multi:
        return _end(store, n, att, "released_at", polls=polls, checked=now is not None)

    def mark(a):
        a["shim"] = att["shim"]
    store.update_attempt(n, mark)  # the shim's identity first: status sees the waiter
    b = att.get("blocked") or {}
    say({"blocked": b})
    notify("blocked", n, why=b.get("why"), holders=b.get("holders"))

    def on_poll():
        if (store.attempt(n) or {}).get("stop_requested"):
            raise Cancelled()
    try:
        if multi:
            _every_node(store, n, att, idx, max_used, on_poll)
        else:
            while not _free(now):
                on_poll()
                now, _, _, p = gpus.poll(idx, max_used, BLOCKED_POLL_S, store.home, on_poll)
                polls += p
        # released: the run lock, held until the job is recorded (hold: the Supervisor gives it
        # back then), so a stop either cancels the attempt before the fork or finds its job
        fd = _lock(store, on_poll)
        try:
            on_poll()
        except BaseException:
            store.unlock(fd)
            raise
        hold(fd)
    except Cancelled as c:
        return _end(store, n, att, "cancelled_at", error=c.why or CANCELLED)
    return _end(store, n, att, "released_at", polls=polls, checked=now is not None)


def _free(now):
    return now is None or all(s["free"] for s in now)


def _every_node(store, n, att, idx, max_used, on_poll):
    """A multi-node run's node: its own GPUs read every second, and what it waits for kept
    in the record's blocked.why (its own holders, else the other nodes), until every node's
    GPUs are released (supervise/gatebarrier.py)."""
    from . import gatebarrier
    first = (att.get("blocked") or {}).get("why") or "GPUs not released"
    known = {h.get("pid") for h in (att.get("blocked") or {}).get("holders") or ()}
    said = [first]

    def own():
        now = gpus.poll(idx, max_used, 0, store.home)[0]
        if _free(now):
            return True, None
        held = [s for s in now if not s["free"]]
        if {h.get("pid") for s in held for h in s["holders"]} == known:
            return False, None  # the holders the restart named: its words stand
        return False, "; ".join("GPU %s holds %s MiB (%s)" % (
            s["index"], "{:,}".format(int(s.get("used_mib") or 0)),
            ", ".join("pid %s" % h.get("pid") for h in s["holders"]) or "no process listed") for s in held)

    def note(text):
        text = text or first
        if text == said[0]:
            return
        said[0] = text

        def change(a):
            b = a.setdefault("blocked", {})
            b["why"] = text
            if text.startswith("GPUs released here"):
                b["holders"] = []
                b.setdefault("own_released_at", time.time())
        store.update_attempt(n, change)
    try:
        gatebarrier.wait(att["multinode"], own, on_poll, note)
    except gatebarrier.PeerStopped as p:
        raise Cancelled("not started: %s" % p.reason)


def _lock(store, on_poll):
    """The run lock, asked for in short waits with the stop's mark read between them: a stop
    holds that lock while it waits for this shim to end (cancel), so one long wait here made
    that stop wait out CANCEL_WAIT_S and answer `blocked` though the attempt was cancelled."""
    from ..core.wire import AgentFailure
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        on_poll()
        try:
            return store.lock("supervise", CANCEL_POLL_S)
        except AgentFailure as e:
            if e.type != "LockTimeout" or time.monotonic() > deadline:
                raise


def _end(store, n, att, when, error=None, **facts):
    """The block's end in the record (and in ATT, which the shim writes again at the fork)."""
    def change(a):
        b = a.setdefault("blocked", {})
        b[when] = time.time()
        b.update(facts)
        if error:
            a["error"], a["exit"] = error, None
        att.update({k: a[k] for k in ("blocked", "stop_requested", "error") if k in a})
    store.update_attempt(n, change)
    return False if error else True


def cancel(store, att):
    """A stop of a blocked attempt: its mark is on the record (mark_stop_requested); wait,
    bounded, until the shim has seen it and ended. True when verified ended."""
    deadline = time.monotonic() + CANCEL_WAIT_S
    while live(att["shim"]) is not None:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)  # the shim's next poll (0.5 s) ends it: its end is what is waited for
    return ((store.attempt(att["attempt"]) or {}).get("blocked") or {}).get("cancelled_at") is not None


def cancel_unanswered(att):
    """A multi-node attempt whose shim another node's stop cancelled (the barrier's tell,
    supervise/gatebarrier.py) before any stop reached this node: the stop arriving now is that
    same stop (or its like), and its answer here is the cancel, as it is where its own mark
    ended the shim. Which node a stop reaches first is a race; the answer does not depend on it.
    Once answered (stop_result records it), a later stop is a stop of an ended run."""
    b = (att or {}).get("blocked") or {}
    return bool((att or {}).get("multinode") and b.get("by") == "restart" and b.get("cancelled_at")
                and not b.get("cancel_answered") and not att.get("job"))


def stop_result(store, att, ended):
    """The stop's answer for a blocked attempt: nothing of it ever ran, so no process to end
    and no GPU of its to wait for."""
    if ended:
        store.update_attempt(att["attempt"], lambda a: a.setdefault("blocked", {}).update(cancel_answered=time.time()))
    res = {"name": store.name, "attempt": att.get("attempt"), "already_stopped": True, "processes": [],
           "verified_dead": True, "restart_cancelled": ended, "state": "failed" if ended else "blocked",
           "verified": ["no_process_of_run_alive"] + (["start_cancelled"] if ended else [])}
    if att.get("multinode"):  # the CLI stops the other nodes too, not trusting the gate's tell
        from ..core.secrets import shown_multinode
        res["multinode"] = shown_multinode(att["multinode"])
    if not ended:
        res["message"] = "the blocked attempt's shim (pid %s) did not end within %gs" % (
            att["shim"].get("pid"), CANCEL_WAIT_S)
    return res

