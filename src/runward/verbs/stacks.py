"""runward stacks NAME [--on T]... [--native]: the Python stacks of every process of the run,
grouped by frame and named by rank (docs/diagnosis.md). Exit 0 when stacks were read, 1 when
none could be (py-spy missing, ptrace denied: the hint says what to do), 3 unreachable,
4 no such run. The work and its rendering: operations/stacks.py."""

from __future__ import annotations

from .. import options

from ._common import show


def add_arguments(p) -> None:
    p.add_argument("name", help="the run")
    options.add(p, "native")
    options.add(p, "timeout", "stacks", default=10.0)
    p.add_argument("--bring-py-spy", action="store_true",
                   help="where the target has no py-spy, push this machine's (runward[stacks]; same architecture "
                        "only), sha256-checked, kept under runward's home there; runward.toml [stacks] bring = true "
                        "makes it the default")


def run(args, out) -> int:
    from ..operations.stacks import StacksOptions, stacks
    return show(out, stacks(StacksOptions.from_args(args)))
