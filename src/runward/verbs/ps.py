"""runward ps PATTERN: a safe pgrep -af (never lists itself, its ancestors or its session)."""

from __future__ import annotations

from ..render import render_procs
from ._common import emit, load_config, target_of


def add_arguments(p) -> None:
    p.add_argument("pattern", help="extended regex against the full command line")


def run(args, out) -> int:
    from .. import api
    cfg = load_config(args)
    target = target_of(args, cfg)
    res = api.ps(target, args.pattern)
    return emit(out, "ps", target, res, render_procs(res["processes"]) or f"no process matches {args.pattern!r}")
