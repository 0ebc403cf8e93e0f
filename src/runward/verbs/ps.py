"""runward ps PATTERN: a safe pgrep -af (never lists itself, its ancestors or its session). The
work and its rendering: operations/ps.py."""

from __future__ import annotations

from ._common import show


def add_arguments(p) -> None:
    p.add_argument("pattern", help="extended regex against the full command line")


def run(args, out) -> int:
    from ..operations.ps import PsOptions, ps
    return show(out, ps(PsOptions.from_args(args)))
