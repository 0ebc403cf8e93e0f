"""runward plot NAME -o FILE.png: a run's metrics drawn, alerts marked (needs matplotlib)."""

from __future__ import annotations

from ..errors import BadInput
from ._common import emit, load_config, target_of


def add_arguments(p) -> None:
    p.add_argument("name")
    p.add_argument("--metric", action="append", metavar="M", help="metric(s) to draw (default: the main ones)")
    p.add_argument("-o", "--output", required=True, metavar="FILE.png", help="the PNG file to write")
    p.add_argument("--x", choices=("step", "time"), default="step", help="the x axis: step (default) or time")
    p.add_argument("--attempts", metavar="N,N,...",
                   help="overlay these attempts (x = step, one line each, labelled #N), e.g. 5,6,7")


def run(args, out) -> int:
    from .. import api
    cfg = load_config(args)
    target = target_of(args, cfg, args.name)
    if args.attempts is not None:
        return _overlay(api, args, target, out)
    res = api.health(target, args.name, api.health_rules({"health": cfg.runs.value(args.name, "health")}), points=True)
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


def _overlay(api, args, target, out) -> int:
    """plot --attempts: the attempts' points (one round trip), drawn by runward.overlay."""
    from .. import overlay
    if args.x != "step" or args.metric:
        raise BadInput("plot --attempts draws throughput and loss over steps only",
                       "leave out --x time / --metric with --attempts")
    try:
        wanted = overlay.parse_attempts(args.attempts)
    except ValueError as e:
        raise BadInput(str(e), "give attempt numbers, e.g. --attempts 5,6,7 (`runward history NAME` lists them)")
    doc = api.overlay(target, args.name, wanted)
    try:
        drawn = overlay.draw(doc, args.output)
    except ImportError as e:
        raise BadInput(str(e), "pip install matplotlib (or: pip install 'runward[plot]')")
    res = {"name": args.name, "output": args.output, "attempts": [r["attempt"] for r in doc["attempts"]], **drawn}
    return emit(out, "plot", target, res, f"wrote {args.output} (attempts {args.attempts})")
