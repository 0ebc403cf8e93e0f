"""How status says a live run's stall judgement (agent/stall.py; docs/diagnosis.md)."""

from __future__ import annotations


def stall_line(s: dict) -> str:
    """`  stall_after 120s (derived: 10 x median step 0.8s); step 1200, 3s ago`."""
    if s.get("error"):
        return f"  stall: {s['error']}"
    after, src, med = s.get("stall_after"), s.get("stall_after_from"), s.get("median_step_s")
    step = (f"step time <= {med:.3g}s, from the attempt's start" if s.get("step_time_from") == "start"
            else f"median step {med:.3g}s" if med else "")
    how = {"set": "set", "derived": f"derived: max(10 x {step}, 120s)" if med else "derived",
           "default": "default: no step time observed yet"}.get(src, src)
    line = f"  stall_after {after:g}s ({how})"
    if s.get("step") is not None:
        line += f"; step {s['step']}"
    else:
        line += "; the log shows no steps (a stall is judged by its silence)"
    return line
