"""top's baseline: for a run past its first attempt, the fastest earlier attempt (median
throughput after warm-up, as `runward history` reads it; docs/history.md). Asked once per
(target, run, attempt) -- earlier attempts' logs do not change -- so a refresh costs no more
round trips than before once it is known."""

from __future__ import annotations

import threading

from ..errors import RunwardError

_known: dict[tuple, dict | None] = {}
_lock = threading.Lock()


def baseline(target, name: str, attempt, which: str = "best") -> dict | None:
    """{"attempt", "metric", "median", "which"} of the baseline: the best other attempt, or the
    run's rule's `attempt:N` (runward.toml's [runs.NAME.health] baseline, as watch and the
    shim judge it); None when it has no median (or is this attempt)."""
    if not isinstance(attempt, int) or attempt < 2:
        return None
    key = (target.display(), name, attempt, which)
    with _lock:
        if key in _known:
            return _known[key]
    from .. import api
    try:
        rows = api.history(target, name).get("attempts") or []
    except RunwardError:
        return None  # not cached: asked again at the next refresh
    best, fixed = None, int(which.split(":", 1)[1]) if which.startswith("attempt:") else None
    for r in rows:
        tp = r.get("throughput") or {}
        if r.get("attempt") == attempt or not isinstance(tp.get("median"), (int, float)):
            continue
        if (r.get("attempt") == fixed) if fixed is not None else (best is None or tp["median"] > best["median"]):
            best = {"attempt": r["attempt"], "metric": tp.get("metric"), "median": tp["median"],
                    "which": "attempt" if fixed is not None else "best"}
    with _lock:
        _known[key] = best
    return best


def change(r: dict) -> str | None:
    """"vs best #N -3.1%" (or "vs #N" for a rule's attempt:N): this attempt's throughput (the median of the series top shows)
    against the baseline, or None when either is not known."""
    base, h = r.get("baseline"), r.get("health") or {}
    series = [v for v in h.get("throughput_series") or [] if isinstance(v, (int, float)) and v == v]
    if not base or not series or base.get("metric") != h.get("throughput_metric") or not base["median"]:
        return None
    s = sorted(series)
    now = s[len(s) // 2] if len(s) % 2 else (s[len(s) // 2 - 1] + s[len(s) // 2]) / 2
    word = "vs #" if base.get("which") == "attempt" else "vs best #"
    return f"{word}{base['attempt']} {(now - base['median']) / base['median'] * 100:+.1f}%"
