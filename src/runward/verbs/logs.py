"""runward logs NAME [-n LINES] [-f]: the run's log, followed across restarts. The work:
operations/logs.py; here the flags, and a follow's lines printed as they come."""

from __future__ import annotations

from ..spec import options

import sys

from ._common import show, write_out

# Ctrl-C (cli.main): logs only reads, and a follower's agent ends with its caller (stdin_held)
INTERRUPTED = "interrupted: logs only reads; its follower on the target ended too, and the run goes on as it was"


def add_arguments(p) -> None:
    p.add_argument("name")
    options.add(p, "lines")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing lines as they come, across restarts")
    options.add(p, "for_s", "logs")
    options.add(p, "attempt")
    options.add(p, "since", "logs")
    options.add(p, "offset")
    options.add(p, "grep")
    p.add_argument("--node", type=int, metavar="R", help="a multi-node run: node R's log (default 0)")
    p.add_argument("--all-nodes", action="store_true", help="a multi-node run: every node's log, lines as [rank R] ...")


def run(args, out) -> int:
    """The operation (operations/logs.py); a follow's lines printed here as they come."""
    from ..operations.logs import LogsOptions, logs

    def on_line(ev: dict) -> None:
        if out.json:
            return  # the document holds them
        if "line" in ev:
            write_out(ev["line"] + "\n")
        elif "switch" in ev:
            print(f"--- runward: log switched to {ev['switch']}", file=sys.stderr, flush=True)
    return show(out, logs(LogsOptions.from_args(args), on_line if args.follow else None))
