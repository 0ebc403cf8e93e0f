"""runward rm NAME [--on TARGET] [--logs]: a stopped run's records removed (exit 1 if it
lives). The work and its rendering: operations/rm.py."""

from __future__ import annotations

from ..spec import options
from ._common import show


def add_arguments(p) -> None:
    p.add_argument("name", help="the run to remove; it must be stopped (`runward stop NAME` first)")
    options.add(p, "logs")
    options.add(p, "lock_timeout")


def run(args, out) -> int:
    from ..operations.rm import RmOptions, rm
    return show(out, rm(RmOptions.from_args(args)))
