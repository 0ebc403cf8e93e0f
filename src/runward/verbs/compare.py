"""runward compare NAME [A B]: two attempts (default the last two) side by side -- what changed
between them and what it did to throughput and loss at the steps both reached, with a one-line
verdict (docs/history.md)."""

from __future__ import annotations

from ..errors import BadInput
from ._common import emit, load_config, target_of
from .history import changed


def add_arguments(p) -> None:
    p.add_argument("name")
    p.add_argument("a", nargs="?", type=int, metavar="A", help="the attempt compared from (default: the one before B)")
    p.add_argument("b", nargs="?", type=int, metavar="B", help="the attempt compared with it (default: the last)")


def run(args, out) -> int:
    from .. import api
    if (args.a is None) != (args.b is None):
        raise BadInput(f"compare {args.name} {args.a}: one attempt named, two needed",
                       f"name both, e.g. `runward compare {args.name} 3 5`, or none for the last two")
    cfg = load_config(args)
    target = target_of(args, cfg, args.name)
    res = api.compare(target, args.name, args.a, args.b)
    return emit(out, "compare", target, res, render(res))


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
    return "\n".join(lines)


def _cell(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)
