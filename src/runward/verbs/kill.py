"""runward kill PATTERN: a safe pkill -f; a dry run unless --yes, then verified dead. The work
and its rendering: operations/kill.py."""

from __future__ import annotations

from ..spec import options

from ._common import old_spelling, show


def add_arguments(p) -> None:
    p.add_argument("pattern", help="extended regex against the full command line")
    options.add(p, "signal", default="TERM")
    p.add_argument("--grace", type=float, default=10.0, metavar="SECONDS", help="before KILL (default 10)")
    options.add(p, "tree")
    options.add(p, "yes")
    p.add_argument("--max-procs", type=int, default=32, metavar="N", help="refuse when more processes match (default 32)")
    old_spelling(p, "--max", "max_procs", type=int, default=32)


def run(args, out) -> int:
    from ..operations.kill import KillOptions, kill
    return show(out, kill(KillOptions.from_args(args)))
