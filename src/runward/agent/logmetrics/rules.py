"""The rules on metric values: NaN/Inf losses, counted NaN steps, floors and ceilings, and a
drop below a fraction of the early median. Each alerts once per crossing, across calls."""

import math

from .alerts import alert, decode
from .names import (NANCOUNT_RE, R_BOUND, R_DROP, R_LOSS, R_NANCOUNT, R_PROGRESS, STEP_NAMES,
                    inverse_rate, is_inverse, is_loss, is_throughput, norm_name,
                    throughput_metric)

MAX_TRACKED = 64  # metrics whose early median is kept in the state


def median(values):
    s = sorted(values)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2.0


def rule_name(k):
    return "throughput" if k == "throughput" else norm_name(k)


class Rules(object):
    """The rules of one call (from RULES) and what they remember between calls (STATE)."""

    def __init__(self, rules, state, alerts, clock):
        self.alerts = alerts
        self.clock = clock
        self.mins = {rule_name(k): float(v) for k, v in (rules.get("min") or {}).items()}
        self.maxs = {rule_name(k): float(v) for k, v in (rules.get("max") or {}).items()}
        self.drop_fraction = rules.get("drop_fraction", 0.5)
        self.drop_points = int(rules.get("drop_points") or 3)
        self.early_points = int(rules.get("early_points") or 10)
        dm = rules.get("drop_metrics")
        self.drop_metrics = None if dm is None else set(rule_name(k) for k in dm)
        self.tracked = state.get("tracked") or {}  # name -> {"early", "med", "low", "hit"}
        # The attempt's own scan (ops/health.py) runs the drop rule for its early median
        # alone: once a metric's median is known its values are no longer checked, so its
        # lines take the feed's lazy path (matched only if kept) and "low"/"hit" stay as they are.
        self.median_only = bool(rules.get("drop_median_only"))
        self.violating = dict(state.get("violating") or {})  # "min:tok_s" -> points back OK
        self.names = set(state.get("names") or ())
        self.main_tp = throughput_metric(self.names)
        self.roles = {}
        self.dirty = False  # the main throughput changed: every template's checks again
        # A watch's window: values of lines stamped before it are no evidence now.
        self.not_before = rules.get("not_before")

    def role(self, name):
        """Which rules look at metric NAME (bits R_*); redone for every name when the main
        throughput metric changes."""
        if name not in self.names:
            self.names.add(name)
            if is_throughput(name):
                main = throughput_metric(self.names)
                if main != self.main_tp:
                    self.main_tp = main
                    self.roles = {}
                    self.dirty = True
        is_main = name == self.main_tp
        role = 0
        if is_loss(name) or is_throughput(name) or name in STEP_NAMES:
            role |= R_PROGRESS
        if is_loss(name):
            role |= R_LOSS
        elif NANCOUNT_RE.search(name):
            role |= R_NANCOUNT
        if name in self.mins or name in self.maxs or (is_main and (
                "throughput" in self.mins or "throughput" in self.maxs)):
            role |= R_BOUND
        if self.drop_fraction and (is_main if self.drop_metrics is None else (
                name in self.drop_metrics or (is_main and "throughput" in self.drop_metrics))) \
                and not (self.median_only and self._median_known(name)):
            role |= R_DROP
        self.roles[name] = role
        return role

    def _median_known(self, name):
        tr = self.tracked.get(name)
        return tr is not None and tr["med"] is not None

    def arm(self, tpl):
        """Set what the hot loop checks on lines of template TPL (see Template)."""
        checks = []
        losses = []
        progress = False
        for gi, name in enumerate(tpl.names):
            role = self.roles.get(name)
            if role is None:
                role = self.role(name)
            if tpl.finite and role & ~R_PROGRESS == R_LOSS:
                losses.append("nan:" + name)  # finite by its skeleton: only a NaN run ends
                progress = True
                continue
            if role & ~R_PROGRESS:
                conv = float if tpl.convs is None else tpl.convs[gi]
                rnames = (name, "throughput") if name == self.main_tp else (name,)
                los = [self.mins[r] for r in rnames if r in self.mins]
                his = [self.maxs[r] for r in rnames if r in self.maxs]
                lo = max(los) if los else -math.inf
                if is_inverse(name) and (role & R_DROP or len(los) + len(his) > (
                        (name in self.mins) + (name in self.maxs))):
                    lo = math.inf  # read as a rate (check): never the hot loop's quiet path
                checks.append((gi + 1, name, role & ~R_PROGRESS, conv, lo,
                               min(his) if his else math.inf))
            progress = progress or bool(role & R_PROGRESS)
        tpl.progress = progress
        tpl.checks = tuple(checks)
        tpl.losses = tuple(losses)
        tpl.lazy = tpl.finite and not checks and tpl.match is not None
        tpl.fast = tpl.lazy and not tpl.event

    def check(self, n, line, t, name, v, role):
        """Rules on one value. LINE is str or the raw bytes; T a time or, with raw bytes,
        whether the line has a timestamp (both are worked out only for an alert)."""
        if self.not_before is not None:
            line, t = self._where(line, t)
            if t < self.not_before:
                return
        if role & R_LOSS:
            self._nan(n, line, t, name, v)
        elif role & R_NANCOUNT:
            self._nan_count(n, line, t, name, v)
        inv = is_inverse(name)
        if role & R_BOUND:
            for rname in ((name, "throughput") if name == self.main_tp else (name,)):
                # A time per step under a throughput rule is read as the rate it stands for.
                x = inverse_rate(name, v) if inv and rname == "throughput" else v
                lo = self.mins.get(rname)
                if lo is not None:
                    self._bound("below_min", name, v, x, x < lo, lo, n, line, t)
                hi = self.maxs.get(rname)
                if hi is not None:
                    self._bound("above_max", name, v, x, x > hi, hi, n, line, t)
        if role & R_DROP:
            self._drop(name, v, inverse_rate(name, v) if inv else v, n, line, t)

    def _nan(self, n, line, t, name, v):
        key = "nan:" + name
        if v != v or v == math.inf or v == -math.inf:
            if key not in self.violating:
                self.violating[key] = 0
                line, t = self._where(line, t)
                what = "NaN" if v != v else "Inf"
                self.alerts.append(alert("nan" if v != v else "inf", t,
                                         "%s is %s" % (name, what), n, line, name, v))
        elif key in self.violating:
            del self.violating[key]

    def _nan_count(self, n, line, t, name, v):
        key = "nancount:" + name
        if v > 0:
            if key not in self.violating:  # Megatron: "number of nan iterations: 3"
                self.violating[key] = 0
                line, t = self._where(line, t)
                self.alerts.append(alert("nan", t, "%s = %g: the framework counts "
                                         "NaN steps" % (name, v), n, line, name, v))
        elif key in self.violating:
            del self.violating[key]

    def _where(self, line, t):
        """(line text, time) for an alert, from what check was given."""
        if isinstance(line, bytes):
            line = decode(line)
            t = self.clock.of(line) if t else self.clock.written
        return line, t

    def _bound(self, kind, name, v, x, bad, limit, n, line, t):
        # Alert when the value crosses the limit; again only after it was back within it for
        # drop_points values in a row (a value that hovers at the limit would alert each line).
        # X: the value the limit is compared with (V, or the rate a time per step stands for).
        key = kind + ":" + name + (":rate" if x is not v else "")
        if bad:
            if key not in self.violating:
                line, t = self._where(line, t)
                word = "below the floor" if kind == "below_min" else "above the ceiling"
                extra = {"limit": limit}
                shown = "%s = %g" % (name, v)
                if x is not v:
                    extra.update(inverse=True, rate=x)
                    shown += " (%g steps/s, a time per step read as a rate)" % x
                self.alerts.append(alert(kind, t, "%s, %s %g" % (shown, word, limit),
                                         n, line, name, v, **extra))
            self.violating[key] = 0
        elif v == v and key in self.violating:
            self.violating[key] += 1
            if self.violating[key] >= self.drop_points:
                del self.violating[key]

    def _drop(self, name, v, x, n, line, t):
        """The drop rule on X: V itself, or for a time per step the rate it stands for."""
        if x != x:
            return
        tr = self.tracked.get(name)
        if tr is None:
            if len(self.tracked) >= MAX_TRACKED:
                return
            tr = self.tracked[name] = {"early": [], "med": None, "low": 0, "hit": False}
        if tr["med"] is None:
            tr["early"].append(x)
            if len(tr["early"]) >= self.early_points:
                tr["med"] = median(tr["early"])
                tr["early"] = []
                if self.median_only:  # nothing more to learn from NAME: every role again
                    self.roles = {}
                    self.dirty = True
            return
        if x < self.drop_fraction * tr["med"]:
            tr["low"] += 1
            if tr["low"] >= self.drop_points and not tr["hit"]:
                tr["hit"] = True
                line, t = self._where(line, t)
                extra = {"median": tr["med"]}
                shown = "%s = %g" % (name, v)
                if x is not v:  # the median is of rates, steps per second
                    extra.update(inverse=True, rate=x)
                    shown += " (%g steps/s)" % x
                self.alerts.append(alert(
                    "drop", t, "%s for %d points in a row, below %g x its early median %g"
                    % (shown, tr["low"], self.drop_fraction, tr["med"]), n, line, name, v,
                    **extra))
        else:
            tr["low"] = 0
            tr["hit"] = False
