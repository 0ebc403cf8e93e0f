"""runward logs NAME [-n LINES] [-f]: the run's log, followed across restarts."""

from __future__ import annotations

import sys

from ..errors import EXIT_OK, BadInput
from ._common import emit, load_config

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
    from .. import api
    from .. import multinode
    cfg = load_config(args)
    since = api.parse_duration(args.since, "--since") if args.since is not None else None
    pick = {"attempt": args.attempt, "since_s": since, "grep": args.grep}
    if args.offset is not None:
        if args.follow or any(v is not None for v in pick.values()):
            raise BadInput("--offset with -f, --attempt, --since or --grep", "--offset reads on from a previous call alone")
        pick["offset"] = args.offset
    target, nodes = multinode.pick_node(args, cfg, args.name, args.node, args.all_nodes)
    if nodes and args.offset is not None:
        raise BadInput("--offset with --all-nodes", "page one node's log: --node R --offset BYTES")
    if nodes:
        return multinode.logs_all(out, nodes, args.name, lines=args.n, follow=args.follow, for_s=args.for_s, **pick)
    if args.follow:
        events = []

        def on_line(ev: dict) -> None:
            if "line" in ev:
                if out.json:
                    events.append(ev["line"])
                else:
                    print(ev["line"], flush=True)
            elif "switch" in ev and not out.json:
                print(f"--- runward: log switched to {ev['switch']}", file=sys.stderr, flush=True)
        res = api.logs(target, args.name, lines=args.n, follow=True, on_line=on_line, for_s=args.for_s, **pick)
        res["lines"] = events
        out.doc({"ok": True, "command": "logs", "target": str(target), "result": res})
        return EXIT_OK
    res = api.logs(target, args.name, lines=args.n, **pick)
    if res.get("truncated") and not out.json:
        print(f"runward: more lines matched; showing the last {len(res['lines'])} (-n sets how many)", file=sys.stderr)
    return emit(out, "logs", target, res, "\n".join(res["lines"]))
