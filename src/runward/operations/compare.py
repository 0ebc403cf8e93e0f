"""compare: two attempts (default the last two) side by side -- what changed between them and
what it did to throughput and loss at the steps both reached, with a one-line verdict
(docs/history.md)."""

from __future__ import annotations

from ..errors import BadInput
from . import Outcome, Targeted, single
from .common import load_config, target_of
from .history import changed, partial


class CompareOptions(Targeted):
    """What `runward compare` takes (verbs/compare.py's arguments)."""
    name: str | None = None
    a: int | None = None
    b: int | None = None


def compare(opts: CompareOptions) -> Outcome:
    from .. import api
    for key in ("a", "b"):  # as logs' --attempt and the MCP tool's schema (ge=1): else the API takes 1.5 (compares
        v = getattr(opts, key)  # attempt 1 unasked), True (1), 0 and -1 (RunNotFound where MCP says BadInput)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise BadInput(f"invalid attempt {key.upper()} {v!r}: not an attempt number (a whole number >= 1)",
                           f"name two attempts, e.g. `runward compare {opts.name} 3 5` (the API: a=3, b=5)")
    if (opts.a is None) != (opts.b is None):
        raise BadInput(f"compare {opts.name} {opts.a}: one attempt named, two needed",
                       f"name both, e.g. `runward compare {opts.name} 3 5`, or none for the last two")
    cfg = load_config(opts)
    target = target_of(opts, cfg, opts.name)
    res = api.compare(target, opts.name, opts.a, opts.b)
    return single("compare", target, res, lambda: render(res))


def render(res: dict) -> str:
    a, b = res["a"], res["b"]
    lines = [f"compare {res['name']}: attempt {a} -> {b}",
             "changed: " + (changed(res.get("changed") or {}) or "nothing (same files, env, command, cwd)")]
    for path, d in (res.get("diffs") or {}).items():
        if d.get("diff"):
            lines.append(d["diff"].rstrip("\n") + ("\n... (diff cut; the file's two versions are on the target)"
                                                    if d.get("truncated") else ""))
        else:
            lines.append(f"{path}: no diff: {d.get('why')}")
    if res.get("rows"):
        tp = res.get("metric") or "throughput"
        head = ("step", f"{tp} #{a}", f"{tp} #{b}", f"loss #{a}", f"loss #{b}")
        lines.append("  ".join(f"{h:>12}" for h in head))
        for row in res["rows"]:
            lines.append("  ".join(f"{_cell(v):>12}" for v in row))
    lines.append(res.get("verdict") or "no metrics at steps both attempts reached")
    for f in res.get("attempts") or []:
        if f.get("log_partial"):
            lines.append(f"attempt {f.get('attempt')}: {partial(f)}")
    return "\n".join(lines)


def _cell(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)
