"""runward plot NAME -o FILE.png: a run's metrics drawn, alerts marked (needs matplotlib).
The work: operations/plot.py."""

from __future__ import annotations

from ._common import show


def add_arguments(p) -> None:
    p.add_argument("name")
    p.add_argument("--metric", action="append", metavar="M", help="metric(s) to draw (default: the main ones)")
    p.add_argument("-o", "--output", required=True, metavar="FILE.png", help="the PNG file to write")
    p.add_argument("--x", choices=("step", "time"), default="step", help="the x axis: step (default) or time")
    p.add_argument("--attempts", metavar="N,N,...",
                   help="overlay these attempts (x = step, one line each, labelled #N), e.g. 5,6,7")


def run(args, out) -> int:
    from ..operations.plot import PlotOptions, plot
    return show(out, plot(PlotOptions.from_args(args)))
