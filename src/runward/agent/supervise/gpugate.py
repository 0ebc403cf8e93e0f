"""The GPU gate of a supervised restart (docs/supervision.md, "The GPU gate"): for a run with
GPUs, the shim starts the next attempt only once the ended attempt's processes are verified
dead and its GPUs' memory is released (no compute process on them, memory.used under
max_used). A restart that starts while a leaked worker or a slow driver still holds the
memory OOMs at once and burns the restart budget; so where the memory is not released
within gpu_release_timeout, the attempt is `blocked` (the holders named, a `blocked`
notification) and starts by itself once it is. It never proceeds anyway.

Waited without the run lock, as the backoff is: a stop meanwhile marks the record and wakes
the shim (supervise.WAKE), checked at each poll."""

import time

from ..proc import gpus
from ..core.runspec import GRACE_S, STOP_SIGNAL
from ..core.procfs import protected, scan
from ..proc.runs import members
from ..proc.terminate import parse_signal, reap_ended, signal, terminate

BLOCKED_POLL_S = 3600.0  # once blocked: one long poll after another, each ended by a stop


def left_alive(store, att):
    """True when the ended attempt left processes alive (a launcher's backgrounded job, a worker
    in its own session): a restart of any run, GPUs or none, ends them first (Gate), or the
    next attempt would run beside them (`nohup python3 train.py &` under restart = "always" ran
    one more copy at each restart)."""
    procs = scan()
    return bool(members(store.name, att, procs, protected(procs)))


class Woken(Exception):
    """A stop came while the gate waited."""


def _check_wake(wake):
    if signal.sigtimedwait([wake], 0) is not None:
        raise Woken()


class Gate(object):
    def __init__(self, store, pol, n, wake, notify):
        self.store, self.pol, self.n = store, pol, n
        self.wake, self.notify = wake, notify
        self.att = store.attempt(n) or {}

    def wait(self):
        """The gate's facts (what was ended, how long the GPUs took) once the next attempt
        may start; None when a stop came meanwhile."""
        facts = {}
        t0 = time.monotonic()
        try:
            left = self._end_leftovers(facts)
            while left:  # survivors (state D): blocked until they are gone
                self._blocked([], "processes of attempt %d survived KILL: %s" % (self.n, ", ".join(
                    "pid %d (%s)" % (p, left[p].describe()["cmd"][:80]) for p in sorted(left))), facts)
                _check_wake(self.wake)
                time.sleep(gpus.POLL_S)
                left = self._members()[0]
            self._gpus(facts)
        except Woken:
            return None
        facts["waited_s"] = round(time.monotonic() - t0, 3)
        return facts

    def _members(self):
        procs = scan()
        return members(self.store.name, self.att, procs, protected(procs)), procs

    def _end_leftovers(self, facts):
        """What the ended attempt left alive (a worker outside the job's group, an escapee)
        is ended, verified, as a stop ends it: its memory is the next attempt's."""
        found, procs = self._members()
        if not found:
            return {}
        fates = terminate(found, procs, parse_signal(self.att.get("stop_signal") or STOP_SIGNAL),
                          float(self.att.get("grace", GRACE_S)), find_more=lambda: self._members()[0])
        facts["ended"] = [{"pid": f["pid"], "fate": f["fate"], "cmd": (f.get("cmd") or "")[:200]} for f in fates]
        reap_ended()
        return self._members()[0]

    def _gpus(self, facts):
        idx = list(self.att.get("gpus") or ())
        if not idx:  # gated for its leftovers alone: no GPUs of its own to wait for
            return
        timeout = float(self.pol.get("gpu_release_timeout", gpus.RELEASE_TIMEOUT))
        max_used = float(self.pol.get("gpu_max_used_mib", gpus.MAX_USED_MIB))
        on_poll = lambda: _check_wake(self.wake)  # noqa: E731
        now, snap, waited, polls = gpus.poll(idx, max_used, timeout, self.store.home, on_poll)
        if now is None:  # no nvidia-smi: no driver to hold memory, nothing to verify
            facts["gpus"] = {"checked": False, "note": snap.get("note")}
            return
        total = polls
        while not all(s["free"] for s in now):
            held = [gpus.held_message(s) for s in now if not s["free"]]
            self._blocked(now, "; ".join(held) + " after %gs" % timeout, facts)
            now, snap, waited, p = gpus.poll(idx, max_used, BLOCKED_POLL_S, self.store.home, on_poll)
            total += p
            if now is None:
                now = []
        facts["gpus"] = {"checked": True, "polls": total, "max_used_mib": max_used}
        if facts.get("blocked"):
            self.store.update_attempt(self.n, _released)

    def _blocked(self, now, why, facts):
        """Said once: the record (status: state blocked) and the notification."""
        if facts.get("blocked"):
            return
        facts["blocked"] = True
        holders = [dict(h, gpu=s["index"]) for s in now for h in s.get("holders") or ()]
        b = {"at": time.time(), "why": why, "holders": holders,
             "gpus": [{"index": s["index"], "used_mib": s.get("used_mib")} for s in now if not s["free"]],
             "timeout_s": float(self.pol.get("gpu_release_timeout", gpus.RELEASE_TIMEOUT))}
        self.store.update_attempt(self.n, lambda a: a.__setitem__("blocked", b))
        self.notify("blocked", self.n, why=why, holders=holders)


def _released(a):
    if a.get("blocked"):
        a["blocked"]["released_at"] = time.time()
