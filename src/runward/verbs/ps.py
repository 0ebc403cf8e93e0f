"""runward ps PATTERN: a safe pgrep -af (never lists itself, its ancestors or its session)."""

from __future__ import annotations

from ..render import PROCS_HEADER, render_procs
from ._common import emit, load_config, target_of


def add_arguments(p) -> None:
    p.add_argument("pattern", help="extended regex against the full command line")


def run(args, out) -> int:
    from .. import api
    cfg = load_config(args)
    target = target_of(args, cfg)
    res = api.ps(target, args.pattern)
    text = PROCS_HEADER + "\n" + render_procs(res["processes"]) if res["processes"] else ""
    return emit(out, "ps", target, res, text or f"no process matches {args.pattern!r}")
