"""runward kill PATTERN: a safe pkill -f; a dry run unless --yes, then verified dead. The work
and its rendering: operations/kill.py."""

from __future__ import annotations

from ._common import old_spelling, show, signal_arg


def add_arguments(p) -> None:
    p.add_argument("pattern", help="extended regex against the full command line")
    p.add_argument("--signal", default="TERM", metavar="SIG", type=signal_arg,
                   help="the signal sent first (default TERM), then KILL")
    p.add_argument("--grace", type=float, default=10.0, metavar="SECONDS", help="before KILL (default 10)")
    p.add_argument("--tree", action="store_true", help="also every descendant of a match")
    p.add_argument("--yes", action="store_true", help="signal them (without it: a dry run)")
    p.add_argument("--max-procs", type=int, default=32, metavar="N", help="refuse when more processes match (default 32)")
    old_spelling(p, "--max", "max_procs", type=int, default=32)


def run(args, out) -> int:
    from ..operations.kill import KillOptions, kill
    return show(out, kill(KillOptions.from_args(args)))
