"""Health actions, judged by the shim while the job lives, with nobody connected: every
interval, the attempt's facts (health/facts.py: NaN, OOM, traceback, NCCL, ...) and the rules
`watch` knows (health/window.py: floors, ceilings, drop; health/stall.py: stall, straggler). An
alert whose kind names an action in [runs.NAME.health] actions gets it: notify (the default),
stop (the verified stop the CLI's stop is, run as a child of the shim: the agent's own stop
op, so stop's rules and checks are the same), or restart (that stop, marked as a health
restart: the supervisor then starts the next attempt whatever the restart policy). Each
action is recorded with its evidence (the line, its time, the metric values) in the attempt
record, where status and watch show it."""

import os
import sys
import time

from ..core import boot
from ..core.wire import json_dumps

DEFAULT_INTERVAL = 5.0


ACTIONS = ("notify", "stop", "restart")


def _fact_key(a):
    return a.get("kind"), a.get("line_no"), a.get("t")


def action_ok(v):
    """notify, stop or restart, maybe after "stacks," (the stacks are taken first)."""
    if not isinstance(v, str):
        return False
    rest = [x.strip() for x in v.split(",") if x.strip() != "stacks"]
    return len(rest) <= 1 and all(x in ACTIONS for x in rest)


def check_limits(rules, bad_input):
    """The rules' min and max, tables of finite numbers, else bad_input(...) raised: each
    tick compares them with floats, and a string there would kill the shim."""
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
        self.judges = None  # [(judge, the key it says an alert once by, or None)], at the first tick
        self.acted = False  # one stop or restart per attempt: the first alert that asks wins
        self.judged = set()  # the alerts judged already, by their key
        self.idle = cfg.get("idle")  # {"below": %, "for_s": s}: every GPU of the run under it that long

    def tick(self, n):
        from ..health import facts as health
        att = self.store.attempt(n)
        if not att or att.get("exit"):
            return
        from ..proc import faults
        faults.point("health:tick")
        saved, _, _ = health.scan(self.store, att, self.rules.get("metrics"))
        if self.judges is None:
            self.judges = self._judges(att, saved)
        # Every stored fact not judged yet, not only this scan's new ones: a status or top
        # that scanned first has stored the NaN line's fact, so it is in no "new" list of
        # this tick's scan (judging only those, the action would never fire).
        alerts = [a for a in saved.get("alerts") or [] if a.get("kind") != "exited" and self._first(_fact_key(a))]
        for judge, key in self.judges:
            alerts += [a for a in judge.poll(att, True, time.time()) if key is None or self._first(key(a))]
        for a in alerts:
            if a["kind"] == "exited":
                continue  # the job's end is the supervisor's own event (notify "exited")
            self._act(n, a, saved.get("last") or {})

    def _judges(self, att, saved):
        """The rules' judges, each polled every tick (one interface: poll(att, alive, now)),
        with the key each one's alert is acted on once by: a window rule's the scan says once;
        the idle alert once per spell (and kept as a fact: its key the fact's); a stall until
        the step moves again, a straggler per rank and basis while it lasts; a metric below
        its baseline once (the judge says it again at every poll while it stays slow)."""
        from ..health.window import Judge
        from ..health.stall import StallJudge
        out = [(Judge(att, saved, self.rules, time.time(), None), None)]
        if self.idle:
            from ..health.idle import IdleJudge
            out.append((IdleJudge(self.store, self.idle), _fact_key))
        out.append((StallJudge(self.store, self.rules), lambda a: (a["kind"], a.get("since"), a.get("rank"),
                                                                    a.get("basis"))))
        if self.rules.get("baseline"):
            from ..health.baseline import BaselineJudge
            out.append((BaselineJudge(self.store, att, self.rules["baseline"]), lambda a: (a["kind"], a.get("metric"))))
        return out

    def _first(self, key):
        """Whether an alert of KEY is judged for the first time (then remembered)."""
        if key in self.judged:
            return False
        self.judged.add(key)
        return True

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
