"""runward prune --older-than 7d [--on TARGET] [--dry-run]: stopped runs that ended long ago
removed. The work and its rendering: operations/prune.py."""

from __future__ import annotations

from ..spec import options

from ._common import show


def add_arguments(p) -> None:
    options.add(p, "older_than", required=True)
    options.add(p, "dry_run", "prune")
    options.add(p, "logs", "prune")


def run(args, out) -> int:
    from ..operations.prune import PruneOptions, prune
    return show(out, prune(PruneOptions.from_args(args)))
