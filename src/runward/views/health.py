"""Training health for people: sparklines, one-line alerts, the last values, plots.

The parsing and the alerts happen where the log lives (the agent's "health" op; its code,
runward.agent.logmetrics, is imported below, once, for the names it gives metrics); this module
only renders what comes back: points [{"line", "t", "metrics"}] and alerts [{"kind", "line_no", "line", "t", ...}].
"""

from __future__ import annotations

import math
import time
from typing import Iterable, Sequence

from ..agent import logmetrics as _lm  # the one import of the parser
from ..agent.logmetrics.kinds import KINDS, color, label

BLOCKS = "▁▂▃▄▅▆▇█"
BAD = "!"  # a NaN or an infinity in a sparkline

STEP_NAMES = ("step", "global_step", "iteration", "iter", "num_updates", "train_step")
LR_NAMES = ("lr", "learning_rate")
GRAD_NAMES = ("grad_norm", "gnorm")



def as_number(v) -> float | None:
    """A metric value as a float: the agent sends NaN and infinities as "nan"/"inf" strings."""
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, (int, float)):
        return float(v)
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _finite(v: float | None) -> bool:
    return v is not None and not math.isnan(v) and not math.isinf(v)


def sparkline(values: Iterable, width: int = 30) -> str:
    """VALUES as at most WIDTH unicode blocks, lowest ▁ to highest █; NaN and Inf as `!`.

    More values than WIDTH are put into WIDTH buckets of consecutive values, each drawn at
    its mean; a bucket holding a NaN or Inf is drawn `!`, so one bad value is never averaged
    away. Values that are not numbers (None) are skipped.
    """
    vals = [v for v in (as_number(x) for x in values) if v is not None]
    if not vals or width <= 0:
        return ""
    if len(vals) > width:
        buckets = []
        for i in range(width):
            chunk = vals[len(vals) * i // width: len(vals) * (i + 1) // width]
            buckets.append(math.nan if not all(_finite(v) for v in chunk)
                           else sum(chunk) / len(chunk))
        vals = buckets
    finite = [v for v in vals if _finite(v)]
    if not finite:
        return BAD * len(vals)
    lo, hi = min(finite), max(finite)
    out = []
    for v in vals:
        if not _finite(v):
            out.append(BAD)
        elif hi == lo:
            out.append(BLOCKS[(len(BLOCKS) - 1) // 2])
        else:
            out.append(BLOCKS[min(len(BLOCKS) - 1, int((v - lo) / (hi - lo) * len(BLOCKS)))])
    return "".join(out)


def _clock(t) -> str:
    if not isinstance(t, (int, float)):
        return "--:--:--"
    lt = time.localtime(t)
    if time.localtime().tm_yday != lt.tm_yday or abs(time.time() - t) > 86400:
        return time.strftime("%Y-%m-%d %H:%M:%S", lt)
    return time.strftime("%H:%M:%S", lt)


def format_alert(alert: dict) -> str:
    """One line a person reads: time, kind, what, where.

    `12:04:31 NaN: loss is NaN (line 3010: iter 3010: loss nan, time 1019.95ms)`
    """
    kind = alert.get("kind", "?")
    detail = " ".join(str(alert.get("detail") or "").split())
    parts = ["%s %s: %s" % (_clock(alert.get("t")), label(kind), detail)]
    line_no, line = alert.get("line_no"), alert.get("line")
    where = []
    if line_no is not None:
        where.append("line %d" % line_no)
    if line and kind in KINDS and KINDS[kind].quotes_line:
        text = " ".join(line.split())
        where.append(text if len(text) <= 80 else text[:77] + "...")
    if alert.get("repeats"):
        where.append("+%d more like it" % alert["repeats"])
    if where:
        parts.append("(%s)" % ": ".join(where[:2]) + (
            ", " + where[2] if len(where) > 2 else ""))
    return " ".join(parts)


def _names(points: Sequence[dict]) -> list[str]:
    seen: dict[str, None] = {}
    for p in points:
        for k in p.get("metrics", {}):
            seen.setdefault(k, None)
    return list(seen)


def step_metric(points: Sequence[dict]) -> str | None:
    """The step-like metric printed most often (nanoGPT prints `iter` each line and `step`
    only at evaluations: the axis is `iter`); ties go to STEP_NAMES order."""
    counts: dict[str, int] = {}
    for p in points:
        for k in p.get("metrics", {}):
            if k in STEP_NAMES:
                counts[k] = counts.get(k, 0) + 1
    if not counts:
        return None
    return max(counts, key=lambda n: (counts[n], -STEP_NAMES.index(n)))


def main_metrics(points: Sequence[dict]) -> list[str]:
    """The metrics a person looks at first, in this order: the step, the loss, the main
    throughput, the learning rate, the gradient norm (each when the log has it)."""
    names = _names(points)
    out = []
    step = step_metric(points)
    if step:
        out.append(step)
    losses = [n for n in names if _lm.is_loss(n)]
    if losses:
        # "loss" itself if printed, else the most frequent loss-like name (lm_loss, ...).
        counts = {n: sum(1 for p in points if n in p.get("metrics", {})) for n in losses}
        out.append("loss" if "loss" in counts else max(losses, key=lambda n: counts[n]))
    tp = _lm.throughput_metric(names)
    if tp:
        out.append(tp)
    for group in (LR_NAMES, GRAD_NAMES):
        hit = next((n for n in group if n in names), None)
        if hit:
            out.append(hit)
    return out


def summarize(points: Sequence[dict]) -> dict:
    """The last value of each main metric, {name: value}, in main_metrics() order."""
    out = {}
    for name in main_metrics(points):
        for p in reversed(points):
            if name in p.get("metrics", {}):
                out[name] = p["metrics"][name]
                break
    return out


def series(points: Sequence[dict], metric: str, x: str = "step") -> tuple[list, list]:
    """(xs, ys) of METRIC. x="step": the step printed with it, else the last step printed
    before it, else its line number; x="time": its time (epoch seconds)."""
    if x not in ("step", "time"):
        raise ValueError("x must be 'step' or 'time', not %r" % (x,))
    step_name = step_metric(points)
    xs, ys = [], []
    last_step = None
    for p in points:
        m = p.get("metrics", {})
        if step_name and step_name in m:
            last_step = as_number(m[step_name])
        if metric not in m:
            continue
        y = as_number(m[metric])
        if y is None:
            continue
        if x == "time":
            xs.append(p.get("t"))
        else:
            xs.append(last_step if last_step is not None else p.get("line"))
        ys.append(y)
    return xs, ys


def _alert_x(alert: dict, points: Sequence[dict], x: str):
    """Where an alert goes on the x axis: its time, or the step at its line."""
    if x == "time":
        return alert.get("t")
    line_no = alert.get("line_no")
    step_name = step_metric(points)
    last = None
    for p in points:
        if line_no is not None and p.get("line", 0) > line_no:
            break
        if step_name and step_name in p.get("metrics", {}):
            last = as_number(p["metrics"][step_name])
        elif not step_name:
            last = p.get("line")
    if line_no is None and points:  # stall, exited: at the end
        return last
    return last if last is not None else line_no


def plot(points: Sequence[dict], alerts: Sequence[dict], metrics: Sequence[str] | None,
         out_path: str, x: str = "step") -> str:
    """Draw METRICS (default: main_metrics) over steps or time, one panel each, alerts as
    vertical lines; write OUT_PATH (format from its extension) and return it.

    matplotlib is optional (`pip install matplotlib`, or the `plot` extra); it is imported
    here only, so nothing else in runward pays for it.
    """
    try:
        import matplotlib
        matplotlib.use("Agg")  # files only; never a window, works over ssh
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise ImportError("runward plot needs matplotlib, which is not installed: "
                          "pip install matplotlib (or pip install 'runward[plot]')") from e
    if x not in ("step", "time"):
        raise ValueError("x must be 'step' or 'time', not %r" % (x,))
    names = list(metrics) if metrics else [n for n in main_metrics(points)
                                           if n not in STEP_NAMES or x == "time"]
    names = [_lm.norm_name(n) for n in names]
    if not names:
        raise ValueError("no metric to plot: the log has no metric lines yet")
    fig, axes = plt.subplots(len(names), 1, sharex=True, squeeze=False,
                             figsize=(9, 2.2 * len(names) + 0.6))
    if x == "time":
        import datetime
        conv = datetime.datetime.fromtimestamp
    else:
        def conv(v):
            return v
    for ax, name in zip(axes[:, 0], names):
        xs, ys = series(points, name, x)
        good = [(xv, yv) for xv, yv in zip(xs, ys) if _finite(yv) and xv is not None]
        if good:
            ax.plot([conv(xv) for xv, _ in good], [yv for _, yv in good], lw=1.2)
        for xv, yv in zip(xs, ys):
            if not _finite(yv) and xv is not None:  # a NaN has no height: mark where it is
                ax.axvline(conv(xv), color="red", alpha=0.25, lw=0.8)
        ax.set_ylabel(name)
        ax.grid(True, alpha=0.3)
        for a in alerts:
            ax_x = _alert_x(a, points, x)
            if ax_x is None:
                continue
            ax.axvline(conv(ax_x), color=color(a.get("kind")), ls="--", lw=1)
    top = axes[0, 0]
    seen = set()
    for a in alerts:
        ax_x = _alert_x(a, points, x)
        kind = a.get("kind")
        if ax_x is None or kind in seen:
            continue
        seen.add(kind)
        top.annotate(label(kind), xy=(conv(ax_x), 1.0),
                     xycoords=("data", "axes fraction"), rotation=90, va="top", ha="right",
                     fontsize=8, color=color(kind))
    axes[-1, 0].set_xlabel("time" if x == "time" else (step_metric(points) or "log line"))
    fig.tight_layout()
    fig.savefig(out_path)
    plt.close(fig)
    return out_path
