"""How status says a live run's stall judgement (agent/health/stall.py; docs/diagnosis.md)."""

from __future__ import annotations


def stall_line(s: dict) -> str:
    """`  stall_after 120s (derived: the floor = 120s, over 10 x median step 0.8s = 8s); step 1200`:
    the rule is the agent's own words for the number it used (stall_after_rule)."""
    if s.get("error"):
        return f"  stall: {s['error']}"
    after, src = s.get("stall_after"), s.get("stall_after_from")
    line = f"  stall_after {after:g}s ({s.get('stall_after_rule') or src})"
    if s.get("step") is not None:
        line += f"; step {s['step']}"
    else:
        line += "; " + _no_step(s.get("no_step_yet") or {})
    return line


def _no_step(n: dict) -> str:
    """Before the first step: a tree that computes or reads is starting, not stalled."""
    if not n:
        return "the log shows no steps yet"
    took = _duration(n.get("for_s"))
    use = (f"{100 * n.get('cpu_cores', 0):.0f}% of a core, {_rate(n.get('io_bytes_s', 0))} of reads and writes"
           f" over the last {n.get('window_s', 0):g}s")
    if n.get("verdict") == "starting":
        return f"no step yet, {took}, loading? (the process tree: {use})"
    if n.get("verdict") == "still":
        return f"no step yet, {took}: the log shows no steps and the process tree is still ({use})"
    return (f"no step yet, {took}: the log shows no steps; a stall before the first step needs the log silent and "
            f"the process tree without CPU and I/O for {n.get('window_s', 0):g}s (not sampled that long yet)")


def _duration(s) -> str:
    s = int(s or 0)
    return f"{s // 3600}h{s % 3600 // 60}m" if s >= 3600 else f"{s // 60}m{s % 60}s" if s >= 60 else f"{s}s"


def _rate(b) -> str:
    for unit in ("B", "KiB", "MiB"):
        if b < 1024 or unit == "MiB":
            return f"{b:.0f} {unit}/s" if unit == "B" else f"{b:.1f} {unit}/s"
        b /= 1024.0
    return ""
