"""runward ps PATTERN: a safe pgrep -af (never lists itself, its ancestors or its session)."""

from __future__ import annotations

from ..errors import EXIT_FAILED
from ..render import PROCS_HEADER, render_procs
from ._common import emit, load_config, target_of


def add_arguments(p) -> None:
    p.add_argument("pattern", help="extended regex against the full command line")


def run(args, out) -> int:
    from .. import api
    cfg = load_config(args)
    target = target_of(args, cfg)
    res = api.ps(target, args.pattern)
    if not res["processes"]:  # exit 1 as pgrep's: `runward ps X && ...` reads as `pgrep X && ...`
        return emit(out, "ps", target, res, f"no process matches {args.pattern!r}", code=EXIT_FAILED)
    return emit(out, "ps", target, res, PROCS_HEADER + "\n" + render_procs(res["processes"]))
