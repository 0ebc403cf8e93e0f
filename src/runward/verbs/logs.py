"""runward logs NAME [-n LINES] [-f]: the run's log, followed across restarts. The work:
operations/logs.py; here the flags, and a follow's lines printed as they come."""

from __future__ import annotations

import sys

from ._common import show

# Ctrl-C (cli.main): logs only reads, and a follower's agent ends with its caller (stdin_held)
INTERRUPTED = "interrupted: logs only reads; its follower on the target ended too, and the run goes on as it was"


def add_arguments(p) -> None:
    p.add_argument("name")
    p.add_argument("-n", "--lines", dest="n", type=int, default=None, metavar="LINES",
                   help="the last LINES lines (default 20; with --attempt, --since or --grep and no -f, "
                        "every selected line)")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing lines as they come, across restarts")
    p.add_argument("--for", dest="for_s", type=float, metavar="S", help="follow for S seconds, then exit")
    p.add_argument("--attempt", type=int, metavar="N", help="attempt N's section of the log only")
    p.add_argument("--since", metavar="DURATION",
                   help="lines written in the last DURATION (10m, 2h): by the timestamps lines start with, "
                        "else by their attempt's start time")
    p.add_argument("--offset", type=int, metavar="BYTES",
                   help="the lines after this byte offset of the log: the `offset` the previous call returned "
                        "(--json), at most -n (default 200); pages through a log in bounded calls")
    p.add_argument("--grep", metavar="REGEX",
                   help="only lines matching this Python regex, matched on the target (with -f too)")
    p.add_argument("--node", type=int, metavar="R", help="a multi-node run: node R's log (default 0)")
    p.add_argument("--all-nodes", action="store_true", help="a multi-node run: every node's log, lines as [rank R] ...")


def run(args, out) -> int:
    """The operation (operations/logs.py); a follow's lines printed here as they come."""
    from ..operations.logs import LogsOptions, logs

    def on_line(ev: dict) -> None:
        if out.json:
            return  # the document holds them
        if "line" in ev:
            print(ev["line"], flush=True)
        elif "switch" in ev:
            print(f"--- runward: log switched to {ev['switch']}", file=sys.stderr, flush=True)
    return show(out, logs(LogsOptions.from_args(args), on_line if args.follow else None))
