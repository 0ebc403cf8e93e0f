"""runward history NAME: one line per attempt -- started, ran for, state/exit, steps reached,
the main throughput (median after warm-up), the last loss, and what changed against the
attempt before (docs/history.md). The work and its rendering: operations/history.py."""

from __future__ import annotations

from ._common import show


def add_arguments(p) -> None:
    p.add_argument("name")


def run(args, out) -> int:
    from ..operations.history import HistoryOptions, history
    return show(out, history(HistoryOptions.from_args(args)))
