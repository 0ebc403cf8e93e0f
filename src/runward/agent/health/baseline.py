"""Baselines in health rules: `tok_s = { min_ratio = 0.95, baseline = "best" }` in
[runs.NAME.health] (or baseline = "attempt:6"): a watch alerts (below_baseline) when this
attempt's median of the metric, at the steps both it and the baseline attempt reached past
their warm-up, is below min_ratio of the baseline's (attempts.side_by_side; too few points
judges nothing). "best": the other attempt with the highest median of the metric (the lowest,
for a time per step)."""

import time

from ..logmetrics import is_inverse
from ..logmetrics.alerts import alert
from .attempts import facts, side_by_side, si

EVERY_S = 2.0  # the attempt's section is parsed again at most this often during a watch


class BaselineJudge(object):
    def __init__(self, store, att, rules):
        self.store, self.att = store, att
        self.rules = rules  # {metric: {"min_ratio", "baseline"}}
        self.base = {m: self._baseline(m, r.get("baseline") or "best") for m, r in rules.items()}
        self.next_t = 0.0
        self.last = {}  # metric -> what the last judgement saw (the watch's reply says it)

    def _baseline(self, metric, which):
        """(attempt number, its series) of the baseline, or (None, why)."""
        others = [n for n in self.store.attempts() if n != self.att.get("attempt")]
        if which.startswith("attempt:"):
            n = int(which.split(":", 1)[1])
            att = self.store.attempt(n) if n in others else None
            if att is None:
                return None, "attempt %d is not another attempt of %s" % (n, self.store.name)
            return n, facts(self.store, att, "", True, metric)["series"]
        best = None
        for n in others:
            f = facts(self.store, self.store.attempt(n) or {}, "", True, metric)
            med = (f.get("throughput") or {}).get("median")
            if med is not None and (best is None or (med < best[0] if is_inverse(metric) else med > best[0])):
                best = (med, n, f["series"])
        return (best[1], best[2]) if best else (None, "no other attempt printed %s past its warm-up" % metric)

    def poll(self, att, alive, now):
        """The below_baseline alerts of the attempt ATT as its log stands now (the judge
        interface: health/window.py's Judge); judged whether the job is alive or not."""
        if time.monotonic() < self.next_t:
            return []
        self.next_t = time.monotonic() + EVERY_S
        out = []
        for m, r in self.rules.items():
            n, base = self.base[m]
            if n is None:
                self.last[m] = {"baseline": None, "why": base}
                continue
            cur = facts(self.store, self.store.attempt(att["attempt"]) or att, "", True, m)["series"]
            seen = side_by_side(base, cur)
            got = self.last[m] = {"baseline": n, "min_ratio": float(r["min_ratio"]), "steps": seen["steps"],
                                  "verdict": seen["verdict"]}
            if not seen.get("throughput"):
                continue
            b, c = seen["throughput"]
            got["ratio"] = ratio = round((b / c if is_inverse(m) else c / b) if b and c else 0.0, 4)
            if ratio < got["min_ratio"]:
                out.append(alert("below_baseline", now, "%s %s is %.2f of attempt %d's %s at steps %s-%s "
                                 "(min_ratio %g)" % (m, si(c), ratio, n, si(b), seen["steps"][0], seen["steps"][1],
                                                     got["min_ratio"]), metric=m, value=c, baseline=n, ratio=ratio))
        return out
