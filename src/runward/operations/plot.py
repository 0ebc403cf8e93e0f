"""plot: a run's metrics drawn to a PNG, alerts marked; or attempts overlaid (x = step, one
line each). Needs matplotlib (runward[plot]): its absence is bad input naming the extra."""

from __future__ import annotations

from ..errors import BadInput
from . import Outcome, Targeted, single
from .common import load_config, target_of

_PLOT_EXTRA = "pip install matplotlib (or: pip install 'runward[plot]')"


class PlotOptions(Targeted):
    """What `runward plot` takes (verbs/plot.py's flags)."""
    name: str | None = None
    metric: list = []
    output: str | None = None
    x: str = "step"
    attempts: str | None = None


def plot(opts: PlotOptions) -> Outcome:
    from .. import api
    if not opts.output:
        raise BadInput("plot needs an output file", "give -o FILE.png")
    if opts.x not in ("step", "time"):
        raise BadInput(f"invalid --x {opts.x!r}", "give --x step or --x time")
    cfg = load_config(opts)
    target = target_of(opts, cfg, opts.name)
    if opts.attempts is not None:
        return _overlay(api, opts, target)
    res = api.health(target, opts.name, api.health_rules({"health": cfg.runs.value(opts.name, "health")}), points=True)
    from ..views import health as _health
    try:
        path = _health.plot(res["series"], res["all_alerts"], opts.metric or None, opts.output, x=opts.x)
    except ImportError as e:
        raise BadInput(str(e), _PLOT_EXTRA)
    except ValueError as e:
        raise BadInput(str(e), "check --metric against the metrics in `runward status NAME --json`")
    res = {"name": opts.name, "output": str(path or opts.output), "points": len(res["series"]),
           "alerts": len(res["all_alerts"])}
    return single("plot", target, res, lambda: f"wrote {res['output']} ({res['points']} points, {res['alerts']} alerts)")


def _overlay(api, opts, target) -> Outcome:
    """plot --attempts: the attempts' points (one round trip), drawn by runward.views.overlay."""
    from ..views import overlay
    if opts.x != "step" or opts.metric:
        raise BadInput("plot --attempts draws throughput and loss over steps only",
                       "leave out --x time / --metric with --attempts")
    try:
        wanted = overlay.parse_attempts(opts.attempts)
    except ValueError as e:
        raise BadInput(str(e), "give attempt numbers, e.g. --attempts 5,6,7 (`runward history NAME` lists them)")
    doc = api.overlay(target, opts.name, wanted)
    try:
        drawn = overlay.draw(doc, opts.output)
    except ImportError as e:
        raise BadInput(str(e), _PLOT_EXTRA)
    res = {"name": opts.name, "output": opts.output, "attempts": [r["attempt"] for r in doc["attempts"]], **drawn}
    return single("plot", target, res, lambda: f"wrote {opts.output} (attempts {opts.attempts})")
