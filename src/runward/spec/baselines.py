"""[runs.NAME.health]'s baseline rules, read and checked here before any request:
`tok_s = { min_ratio = 0.95, baseline = "best" }` (or baseline = "attempt:6"). The agent
judges them during a watch (agent/health/baseline.py; docs/history.md)."""

from __future__ import annotations

from ..agent.logmetrics.names import norm_name
from ..errors import BadInput

EXAMPLE = 'tok_s = { min_ratio = 0.95, baseline = "best" }'


def rules(h: dict) -> dict:
    """{metric: {"min_ratio": float, "baseline": "best" | "attempt:N"}} from the health table's
    tables that have a min_ratio; BadInput naming the key for anything else in them."""
    out = {}
    for metric, v in h.items():
        if not isinstance(v, dict) or metric in ("min", "max", "actions", "metrics", "idle"):  # idle: spec/supervision.py
            continue
        if set(v) - {"min_ratio", "baseline"} or "min_ratio" not in v:
            raise BadInput(f"invalid [health] {metric} = {v!r}: a baseline rule has min_ratio and baseline only",
                           f"write {EXAMPLE}")
        ratio, which = v["min_ratio"], v.get("baseline", "best")
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 < ratio <= 10:
            raise BadInput(f"invalid [health] {metric}.min_ratio {ratio!r}", f"a number above 0, e.g. {EXAMPLE}")
        if not (which == "best" or isinstance(which, str) and which.startswith("attempt:")
                and which[8:].isdigit() and int(which[8:]) > 0):
            raise BadInput(f"invalid [health] {metric}.baseline {which!r}",
                           'baseline = "best" (the fastest other attempt) or "attempt:N"')
        out[norm_name(metric)] = {"min_ratio": float(ratio), "baseline": which}
    return out
