"""runward stacks NAME [--on T]... [--native]: the Python stacks of every process of the run,
grouped by frame and named by rank (docs/diagnosis.md). Exit 0 when stacks were read, 1 when
none could be (py-spy missing, ptrace denied: the hint says what to do), 3 unreachable,
4 no such run. The work and its rendering: operations/stacks.py."""

from __future__ import annotations

from ._common import show


def add_arguments(p) -> None:
    p.add_argument("name", help="the run")
    p.add_argument("--native", action="store_true", help="native (C/C++) frames too, where py-spy can (py-spy --native)")
    p.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS",
                   help="how long py-spy may take per process (default 10)")
    p.add_argument("--bring-py-spy", action="store_true",
                   help="where the target has no py-spy, push this machine's (runward[stacks]; same architecture "
                        "only), sha256-checked, kept under runward's home there; runward.toml [stacks] bring = true "
                        "makes it the default")


def run(args, out) -> int:
    from ..operations.stacks import StacksOptions, stacks
    return show(out, stacks(StacksOptions.from_args(args)))
