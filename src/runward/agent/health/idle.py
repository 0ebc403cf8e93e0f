"""The idle-GPU judge of [runs.NAME.health] idle (the shim's health actions): every GPU of the
live run under `below` % utilization for `for_s` seconds, read from nvidia-smi once a poll.
An unreadable utilization is not idle, and is said (idle_unjudged in the attempt's record).

A judge as every health judge is (health/window.py's Judge, health/stall.py's StallJudge,
health/baseline.py's BaselineJudge): poll(att, alive, now) -> the alerts (logmetrics.alerts.alert)."""

import time

from ..logmetrics.alerts import alert
from ..proc import gpus


class IdleJudge(object):
    def __init__(self, store, idle):
        self.store = store
        self.idle = idle  # {"below": %, "for_s": s}
        self.since = None
        self.said = False  # once per idle spell: busy again, and it may be said again
        self.unjudged_why = None  # why the rule could not be judged at the last poll

    def poll(self, att, alive, now):
        """The idle alert, once per spell, also kept as a fact of the attempt (health/facts.py)."""
        if not alive or not att.get("gpus"):
            return []
        try:
            snap = gpus.snapshot()
        except Exception as e:  # the driver's failure is not the run's idleness
            snap = {"gpus": [], "note": "nvidia-smi failed: %s" % (str(e)[:200] or type(e).__name__)}
        util = {g["index"]: g.get("utilization_pct") for g in snap.get("gpus") or ()}
        mine = [util.get(i) for i in att["gpus"]]
        unread = [i for i, u in zip(att["gpus"], mine) if not isinstance(u, (int, float))]
        self._unjudged(att, "GPU %s: no utilization read (%s)" % (",".join(map(str, unread)), snap.get(
            "note") or "not listed by nvidia-smi, or [N/A]") if unread else None)
        if not all(isinstance(u, (int, float)) and u < self.idle["below"] for u in mine):
            self.since, self.said = None, False
            return []
        if self.since is None:
            self.since = now
        if self.said or now - self.since < self.idle["for_s"]:
            return []
        self.said = True
        a = alert("idle", now, "every GPU of the run (%s) under %g%% utilization for %.0fs: %s" % (
            ",".join(map(str, att["gpus"])), self.idle["below"], now - self.since,
            ", ".join("GPU %s %s%%" % (i, u) for i, u in zip(att["gpus"], mine))),
            metric="gpu_util_pct", value=max(mine), since=self.since)
        from .facts import add_fact
        add_fact(self.store, att, a)
        return [a]

    def _unjudged(self, att, why):
        """The idle rule could not be judged (no nvidia-smi, its failure, a GPU it does not
        list): kept in the attempt's record as idle_unjudged {"since", "why"} (and removed once
        read again), so status and watch say it: an unread utilization never fires, and a rule
        that never fires passed every watch. Written on a change only, not at every poll."""
        if why == self.unjudged_why:
            return
        self.unjudged_why = why
        rec = {"since": time.time(), "why": why} if why else None

        def mark(a):
            if rec:
                a["idle_unjudged"] = rec
            else:
                a.pop("idle_unjudged", None)
        self.store.update_attempt(att["attempt"], mark)
