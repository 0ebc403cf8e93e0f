"""runward plot NAME -o FILE.png: a run's metrics drawn, alerts marked (needs matplotlib)."""

from __future__ import annotations

from ..errors import BadInput
from ._common import emit, load_config, target_of


def add_arguments(p) -> None:
    p.add_argument("name")
    p.add_argument("--metric", action="append", metavar="M", help="metric(s) to draw (default: the main ones)")
    p.add_argument("-o", "--output", required=True, metavar="FILE.png", help="the PNG file to write")
    p.add_argument("--x", choices=("step", "time"), default="step", help="the x axis: step (default) or time")


def run(args, out) -> int:
    from .. import api
    cfg = load_config(args)
    target = target_of(args, cfg, args.name)
    res = api.health(target, args.name, api.health_rules(cfg.runs.get(args.name)), points=True)
    from .. import health as _health
    try:
        path = _health.plot(res["series"], res["all_alerts"], args.metric, args.output, x=args.x)
    except ImportError as e:
        raise BadInput(str(e), "pip install matplotlib (or: pip install 'runward[plot]')")
    except ValueError as e:
        raise BadInput(str(e), "check --metric against the metrics in `runward status NAME --json`")
    res = {"name": args.name, "output": str(path or args.output), "points": len(res["series"]),
           "alerts": len(res["all_alerts"])}
    return emit(out, "plot", target, res, f"wrote {res['output']} ({res['points']} points, {res['alerts']} alerts)")
