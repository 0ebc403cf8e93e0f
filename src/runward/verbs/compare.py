"""runward compare NAME [A B]: two attempts (default the last two) side by side -- what changed
between them and what it did to throughput and loss at the steps both reached, with a one-line
verdict (docs/history.md). The work and its rendering: operations/compare.py."""

from __future__ import annotations

from ._common import show


def add_arguments(p) -> None:
    p.add_argument("name")
    p.add_argument("a", nargs="?", type=int, metavar="A", help="the attempt compared from (default: the one before B)")
    p.add_argument("b", nargs="?", type=int, metavar="B", help="the attempt compared with it (default: the last)")


def run(args, out) -> int:
    from ..operations.compare import CompareOptions, compare
    return show(out, compare(CompareOptions.from_args(args)))
