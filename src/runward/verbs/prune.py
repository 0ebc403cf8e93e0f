"""runward prune --older-than 7d [--on TARGET] [--dry-run]: stopped runs that ended long ago
removed. The work and its rendering: operations/prune.py."""

from __future__ import annotations

from ._common import show


def add_arguments(p) -> None:
    p.add_argument("--older-than", required=True, metavar="DURATION",
                   help="remove the stopped runs whose last attempt ended longer ago than this "
                        "(7d, 12h, 10m, 90s, 1h30m; a live run is never removed)")
    p.add_argument("--dry-run", action="store_true", help="list what would be removed; remove nothing")
    p.add_argument("--logs", action="store_true",
                   help="remove their log files too (default: kept, as `runward rm` keeps them)")


def run(args, out) -> int:
    from ..operations.prune import PruneOptions, prune
    return show(out, prune(PruneOptions.from_args(args)))
