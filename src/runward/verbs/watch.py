"""runward watch NAME: follow a run's health through a window; exit 1 on the first alert. The
work: operations/watch.py; here the flags, and the points printed as they come on a terminal."""

from __future__ import annotations

from ..spec import options

from ._common import show, write_out


# Ctrl-C (cli.main): watch only reads
INTERRUPTED = ("interrupted: watch only reads; the run goes on as it was (its health actions, where it has "
               "them, are its shim's on the target, not watch's)")


def add_arguments(p) -> None:
    p.add_argument("name")
    options.add(p, "for_s", "watch", default=60.0)
    p.add_argument("--min", action="append", metavar="METRIC=V", help="alert below this floor, e.g. tok_s=14500")
    p.add_argument("--max", action="append", metavar="METRIC=V", help="alert above this ceiling")
    from ..spec.stallopts import add_arguments as stall_arguments
    stall_arguments(p)
    from ._common import old_spelling
    old_spelling(p, "--stall", "stall_after")  # its seconds are stall_after's (docs/diagnosis.md)
    options.add(p, "drop")
    options.add(p, "since", "watch")
    p.add_argument("--node", type=int, metavar="R", help="a multi-node run: watch node R (default 0)")
    p.add_argument("--all-nodes", action="store_true", help="a multi-node run: watch every node; healthy only if all are")


def run(args, out) -> int:
    """The operation (operations/watch.py); on a terminal, each new point's metrics printed as
    they come."""
    from ..operations.watch import WatchOptions, watch

    def on_points(ev: dict) -> None:
        pts = ev.get("points") or []
        if pts:
            m = pts[-1].get("metrics", {})
            write_out("  " + "  ".join(f"{k}={v}" for k, v in list(m.items())[:6]) + "\n")
    return show(out, watch(WatchOptions.from_args(args), on_points if not out.json and out.tty else None))
