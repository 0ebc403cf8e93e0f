"""runward stacks NAME [--on T]... [--native]: the Python stacks of every process of the run,
grouped by frame and named by rank (docs/diagnosis.md). Exit 0 when stacks were read, 1 when
none could be (py-spy missing, ptrace denied: the hint says what to do), 3 unreachable,
4 no such run. The work and its rendering: operations/stacks.py."""

from __future__ import annotations

from ..spec import options

from ._common import show


def add_arguments(p) -> None:
    p.add_argument("name", help="the run")
    options.add(p, "native")
    options.add(p, "timeout", "stacks", default=10.0)
    options.add(p, "bring_py_spy")


def run(args, out) -> int:
    from ..operations.stacks import StacksOptions, stacks
    return show(out, stacks(StacksOptions.from_args(args)))
