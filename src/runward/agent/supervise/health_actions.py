"""Health actions, judged by the shim while the job lives, with nobody connected: every
interval, the attempt's facts (ops/health.py: NaN, OOM, traceback, NCCL, ...) and the rules
`watch` knows (ops/window.py: floors, ceilings, drop; health/stall.py: stall, straggler). An
alert whose kind names an action in [runs.NAME.health] actions gets it: notify (the default),
stop (the verified stop the CLI's stop is, run as a child of the shim: the agent's own stop
op, so stop's rules and checks are the same), or restart (that stop, marked as a health
restart: the supervisor then starts the next attempt whatever the restart policy). Each
action is recorded with its evidence (the line, its time, the metric values) in the attempt
record, where status and watch show it."""

import os
import sys
import time

from .. import boot
from ..wire import json_dumps

DEFAULT_INTERVAL = 5.0


ACTIONS = ("notify", "stop", "restart")


def action_ok(v):
    """notify, stop or restart, maybe after "stacks," (the stacks are taken first)."""
    if not isinstance(v, str):
        return False
    rest = [x.strip() for x in v.split(",") if x.strip() != "stacks"]
    return len(rest) <= 1 and all(x in ACTIONS for x in rest)


def check_limits(rules, bad_input):
    """The rules' min and max, tables of finite numbers, else bad_input(...) raised: each
    tick compares them with floats, and a string there killed the shim."""
    for key in ("min", "max"):
        lim = rules.get(key) or {}
        if not isinstance(lim, dict) or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                and abs(v) < float("inf") for v in lim.values()):
            raise bad_input("invalid health %s %r" % (key, lim), "give numbers, e.g. min = { tok_s = 14500 }")


class HealthKeeper(object):
    def __init__(self, store, n, cfg, notify):
        self.store = store
        self.n = n
        self.rules = dict(cfg.get("rules") or {})
        self.actions = dict(cfg.get("actions") or {})
        self.interval = float(cfg.get("interval") or DEFAULT_INTERVAL)
        self.notify = notify
        self.judge = None
        self.acted = False  # one stop or restart per attempt: the first alert that asks wins
        self.judged = set()  # the facts judged already, by (kind, line number, time)
        self.idle = cfg.get("idle")  # {"below": %, "for_s": s}: every GPU of the run under it that long
        self.idle_since = None
        self.idle_said = False  # once per idle spell: busy again, and it may be said again
        self.unjudged_why = None  # why the idle rule could not be judged at the last tick
        self.bjudge = None  # the baseline rules' judge (ops/baseline.py), built at the first tick
        self.below = set()  # the metrics already said below their baseline this attempt

    def tick(self, n):
        from ..ops import health
        from ..ops.window import Judge
        att = self.store.attempt(n)
        if not att or att.get("exit"):
            return
        from .. import faults
        faults.point("health:tick")
        saved, _, _ = health.scan(self.store, att, self.rules.get("metrics"))
        if self.judge is None:
            self.judge = Judge(att, saved, self.rules, time.time(), None)
        # Every stored fact not judged yet, not only this scan's new ones: a status or top
        # that scanned first has stored the NaN line's fact, and its scan's "new" list was
        # the only place this tick would have seen it (the action then never fired).
        facts = []
        for a in saved.get("alerts") or []:
            key = (a.get("kind"), a.get("line_no"), a.get("t"))
            if a.get("kind") != "exited" and key not in self.judged:
                self.judged.add(key)
                facts.append(a)
        alerts = (facts + self.judge.poll(att["log"], True, time.time()) + self._idle(att) + self._stalls(att)
                  + self._baseline(att))
        for a in alerts:
            if a["kind"] == "exited":
                continue  # the job's end is the supervisor's own event (notify "exited")
            self._act(n, a, saved.get("last") or {})

    def _stalls(self, att):
        """stall and straggler (health/stall.py), each acted on once per episode: a stall until the
        step moves again, a straggler per rank and basis while it lasts."""
        from ..health import stall
        out = []
        for a in stall.watch_alerts(self.store, att, self.rules, True):
            key = (a["kind"], a.get("since"), a.get("rank"), a.get("basis"))
            if key not in self.judged:
                self.judged.add(key)
                out.append(a)
        return out

    def _baseline(self, att):
        """below_baseline alerts, once per metric: the judge says it again at every poll
        while the attempt stays slow, and one action (or notification) is what was asked."""
        if not self.rules.get("baseline"):
            return []
        if self.bjudge is None:
            from ..ops.baseline import BaselineJudge
            self.bjudge = BaselineJudge(self.store, att, self.rules["baseline"])
        out = [a for a in self.bjudge.poll(time.time()) if a.get("metric") not in self.below]
        self.below.update(a.get("metric") for a in out)
        return out

    def _idle(self, att):
        """The idle alert: every GPU of the live run under gpu_util_below for the window,
        read from nvidia-smi once a tick. An unreadable utilization is not idle."""
        if not self.idle or not att.get("gpus"):
            return []
        from .. import gpus
        from ..logmetrics.alerts import alert
        try:
            snap = gpus.snapshot()
        except Exception as e:  # the driver's failure is not the run's idleness
            snap = {"gpus": [], "note": "nvidia-smi failed: %s" % (str(e)[:200] or type(e).__name__)}
        util = {g["index"]: g.get("utilization_pct") for g in snap.get("gpus") or ()}
        mine = [util.get(i) for i in att["gpus"]]
        now = time.time()
        unread = [i for i, u in zip(att["gpus"], mine) if not isinstance(u, (int, float))]
        self._unjudged(att, "GPU %s: no utilization read (%s)" % (",".join(map(str, unread)), snap.get(
            "note") or "not listed by nvidia-smi, or [N/A]") if unread else None)
        if not all(isinstance(u, (int, float)) and u < self.idle["below"] for u in mine):
            self.idle_since, self.idle_said = None, False
            return []
        if self.idle_since is None:
            self.idle_since = now
        if self.idle_said or now - self.idle_since < self.idle["for_s"]:
            return []
        self.idle_said = True
        a = alert("idle", now, "every GPU of the run (%s) under %g%% utilization for %.0fs: %s" % (
            ",".join(map(str, att["gpus"])), self.idle["below"], now - self.idle_since,
            ", ".join("GPU %s %s%%" % (i, u) for i, u in zip(att["gpus"], mine))),
            metric="gpu_util_pct", value=max(mine), since=self.idle_since)
        from ..ops.health import add_fact
        self.judged.add((a["kind"], a.get("line_no"), a.get("t")))  # judged here, not again as a stored fact
        add_fact(self.store, att, a)
        return [a]

    def _unjudged(self, att, why):
        """The idle rule could not be judged (no nvidia-smi, its failure, a GPU it does not
        list): kept in the attempt's record as idle_unjudged {"since", "why"} (and removed once
        read again), so status and watch say it: an unread utilization never fires, and a rule
        that never fires passed every watch. Written on a change only, not at every tick."""
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

    def _act(self, n, a, last):
        # "stacks,restart": the stacks first (while the hung processes still live), then the rest
        asked = [x.strip() for x in str(self.actions.get(a["kind"], "notify")).split(",")]
        action = ([x for x in asked if x != "stacks"] or ["notify"])[-1]
        if action != "notify" and self.acted:
            action = "notify"  # already stopping: the rest is evidence only
        rec = {"kind": a["kind"], "action": action, "at": time.time(), "line": a.get("line"),
               "line_no": a.get("line_no"), "line_t": a.get("t"), "detail": a.get("detail"),
               "metric": a.get("metric"), "value": a.get("value"),
               "metrics": dict(list(last.items())[:12])}
        if "stacks" in asked:
            from ..health.stall import take_stacks
            rec["stacks"] = a.get("stacks") or take_stacks(self.store.attempt(n) or {}, self.store)
            rec["action"] = "stacks," + action if action != "notify" else "stacks"
        if action in ("stop", "restart"):
            self.acted = True
            rec["stop_reply"] = os.path.join(self.store.dir, "attempts", "%d.health-stop.log" % n)
        self._write(n, rec)
        if action in ("stop", "restart"):
            self._stop(action)  # after the write: the stop marks the record it reads then
        self.notify("alert", n, alert=a, action=action, metrics=rec["metrics"])

    def _write(self, n, rec):
        """Append REC to the attempt's actions under the record lock (a stop marks the same
        record under it), never waiting out a stop's grace as the run lock would."""
        self.store.update_attempt(n, lambda att: att.setdefault("actions", []).append(rec))

    def _stop(self, action):
        """The agent's stop op in a child (bootstrap and blob as the CLI sends them): it
        takes the run lock, marks the record, stops the tree verified. Its reply goes to
        attempts/N.health-stop.log."""
        import signal
        import subprocess
        out = os.open(os.path.join(self.store.dir, "attempts", "%d.health-stop.log" % self.n),
                      os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        req = {"v": boot.PROTOCOL, "op": "stop", "name": self.store.name, "home": self.store.home.path,
               "by": "health:" + action}
        env = {k: os.environ[k] for k in ("PATH", "HOME", "LANG", "RUNWARD_HOME", "LD_LIBRARY_PATH")
               if k in os.environ}
        p = subprocess.Popen([sys.executable, "-S", "-c", boot.BOOTSTRAP], stdin=subprocess.PIPE, stdout=out,
                             stderr=2, close_fds=True, env=env,
                             preexec_fn=lambda: signal.pthread_sigmask(signal.SIG_SETMASK, ()))
        os.close(out)
        p.stdin.write(boot.handoff() + json_dumps(req).encode() + b"\n")
        p.stdin.close()
        p.returncode = 0  # reaped by the shim's wait loop, not by Popen
