"""runward watch NAME: follow a run's health through a window; exit 1 on the first alert."""

from __future__ import annotations

import sys

from ._common import emit, load_config


# Ctrl-C (cli.main): watch only reads
INTERRUPTED = ("interrupted: watch only reads; the run goes on as it was (its health actions, where it has "
               "them, are its shim's on the target, not watch's)")


def add_arguments(p) -> None:
    p.add_argument("name")
    p.add_argument("--for", dest="for_s", type=float, default=60.0, metavar="S", help="window (default 60)")
    p.add_argument("--min", action="append", metavar="METRIC=V", help="alert below this floor, e.g. tok_s=14500")
    p.add_argument("--max", action="append", metavar="METRIC=V", help="alert above this ceiling")
    from ..stallopts import add_arguments as stall_arguments
    stall_arguments(p)
    from ._common import old_spelling
    old_spelling(p, "--stall", "stall_after")  # its seconds are stall_after's (docs/diagnosis.md)
    p.add_argument("--drop", type=float, metavar="FRACTION",
                   help="alert when throughput stays under FRACTION of its early median (default 0.5)")
    p.add_argument("--since", metavar="DURATION",
                   help="the rules also judge lines of this look-back before the window, e.g. 60s "
                        "(default: from the watch's start)")
    p.add_argument("--node", type=int, metavar="R", help="a multi-node run: watch node R (default 0)")
    p.add_argument("--all-nodes", action="store_true", help="a multi-node run: watch every node; healthy only if all are")


def _stall(args, cfg) -> dict:
    """stall_after and straggler_ratio, runward.toml's checked, the flags over them."""
    from ..stallopts import options
    o = options({"health": cfg.runs.value(args.name, "health")}, args, args.name)
    return {"stall": o.get("after"), "ratio": o.get("ratio")}


def _unjudged(res: dict) -> str:
    """The baseline rules that judged nothing: a healthy watch is no pass of a rule that could
    not be judged (a baseline attempt that is not there, too few points yet)."""
    return "".join(f"\n{m} vs baseline: not judged: {b.get('why') or b.get('verdict') or 'no points yet'}"
                   for m, b in (res.get("baseline") or {}).items() if b.get("ratio") is None)


def run(args, out) -> int:
    from .. import api
    from .. import multinode
    cfg = load_config(args)
    target, nodes = multinode.pick_node(args, cfg, args.name, args.node, args.all_nodes)
    rules = api.health_rules({"health": cfg.runs.value(args.name, "health")}, mins=api.parse_limits(args.min, "--min"),
                             maxs=api.parse_limits(args.max, "--max"), drop=args.drop,
                             **_stall(args, cfg))
    from ..health import format_alert

    def on_points(ev: dict) -> None:
        if not out.json and out.tty:
            pts = ev.get("points") or []
            if pts:
                m = pts[-1].get("metrics", {})
                print("  " + "  ".join(f"{k}={v}" for k, v in list(m.items())[:6]), flush=True)
    since = api.parse_duration(args.since, "--since")
    if nodes:
        return multinode.watch_all(out, nodes, args.name, for_s=args.for_s, rules=rules, since_s=since)
    res = api.watch(target, args.name, for_s=args.for_s, rules=rules, on_points=on_points, since_s=since)
    acted = "".join(f"\nhealth action: {a.get('action')} on {a.get('kind')}"
                    + (f" (line {a['line_no']}: {a.get('line')})" if a.get("line_no") else "")
                    for a in res.get("actions") or [])
    if res["healthy"]:
        text = (f"{args.name}: healthy for {res['watched_s']:.0f}s"
                + (f"; {res['throughput_metric']} last {res['metrics'].get(res['throughput_metric'])}"
                   if res.get("throughput_metric") else ""))
        return emit(out, "watch", target, res, text + _unjudged(res) + acted)
    text = "\n".join(f"ALERT {format_alert(a)}" for a in res["alerts"])
    if res.get("ended"):
        text += f"\n{args.name}: the job is not running"
    text += acted

    out.doc({"ok": False, "command": "watch", "target": str(target), "result": res,
             "error": {"type": "Alert", "message": res["alert"].get("detail", res["alert"]["kind"]),
                       "exit_code": 1}})
    if not out.json:
        print(text, file=sys.stderr)
    return 1
